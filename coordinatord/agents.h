/*
 * agents: the node agents on the broker loop: REGISTER (devices, and the
 * ranks an agent runs, reconciled against the live attempts), HEARTBEAT,
 * RANK_EXITED (a rank's exit status, which may fail its attempt), agents
 * declared dead after dead_after silent intervals, and the coordinator's
 * own HEARTBEATs (api/wire.h).
 *
 * Agents live in the fabric's `agents` map (fabric_int.h) for the life of
 * the fabric, dead ones included; their devices are sorted by (kind,
 * index) and point at the attempt that owns them.
 */
#ifndef RINGMASTER_COORDINATORD_AGENTS_H
#define RINGMASTER_COORDINATORD_AGENTS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "fabric_int.h"

/* A message of type `type` from the agent on `node` (identity `ident`):
 * REGISTER, HEARTBEAT or RANK_EXITED; anything else gets ERROR 400, and an
 * agent not registered (or declared dead) ERROR 404 unless it registers. */
void agents_on_message(fabric_t *f, const char *ident, const char *node, wire_type_t type, json_t *p);

/* Declare dead the agents silent for longer than dead_after intervals
 * (mono `now`): their ranks' attempts fail (or drain), their devices are
 * freed, the store says so. */
void agents_expire(fabric_t *f, int64_t now);

/* The loop heard nothing for `deaf_us` that it should have (mono `now`):
 * every alive agent's silence clock restarts at now + deaf_us. An agent
 * that gave us up meanwhile reconnects with a backoff that doubles from
 * 1 s, so its next REGISTER may come up to about deaf_us after we wake.
 * At most `cap_us` in all is forgiven an agent since it last spoke (a
 * coordinator that stalls again and again still finds a dead node). */
void agents_deaf(fabric_t *f, int64_t deaf_us, int64_t cap_us, int64_t now);

/* HEARTBEAT to every alive agent; heartbeats heard since the last call are
 * written to the store. */
void agents_heartbeat(fabric_t *f);

/* Parse REGISTER's devices (borrowed) into a sorted array: 0 and *ret
 * (malloc'ed, NULL when empty) and *ret_n, or -EINVAL / -ENOMEM with
 * `detail` naming the field. */
int agents_parse_devices(const json_t *arr, device_t **ret, int *ret_n, char *detail, size_t dlen);

/* The agent of `node`, added (not alive, no devices) when unknown; NULL on
 * out-of-memory. */
agent_t *agents_get_or_add(fabric_t *f, const char *node);

/*
 * Whether rank `rank` of `job`'s attempt `att` was placed on agent `a`
 * (the live attempt's placement, else the ranks table). A report (`what`:
 * the message type) about another agent's rank or an unknown one is
 * refused: ERROR 403 to the agent, logged, false.
 */
bool agents_owns_rank(fabric_t *f, agent_t *a, const char *job, int att, int rank, const char *what);

/* The agent spoke: its last-seen times are now (the wall one to be stored). */
void agents_touch(agent_t *a);

/* The agent's device of `kind` and `index`, or NULL. */
device_t *agents_device(agent_t *a, int kind, int index);

#endif
