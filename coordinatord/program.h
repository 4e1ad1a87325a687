/*
 * program: what is particular to program jobs (the user's own program run
 * under torchrun's contract, issue 26; docs/jobspec.md "Programs") on the
 * broker loop. The rest of an attempt's life (placement, recovery, cancel)
 * is the built-in trainer's, with these differences, each applied here:
 *   - ranks go only on agents whose REGISTER said programs: true, at most
 *     parallel.ranks_per_node of them on one node (program_cap_free);
 *   - each attempt reserves a MASTER_PORT from its rank 0 node's
 *     program_ports that no other live attempt there holds
 *     (program_pick_port), and SPAWN carries the program and torchrun's
 *     values (program_spawn_fields);
 *   - a rank's RANK_STARTED stands for JOIN (the attempt runs once every
 *     rank started), its exit with status 0 for DONE (the job succeeds once
 *     every rank exited 0); any other exit fails the whole gang, which is
 *     restarted (never parked or adopted) while restarts are left: every
 *     failure counts as retryable;
 *   - rank 0's PROGRAM_METRICS rows are stored as METRICS rows.
 * Wire shapes: api/wire.h.
 */
#ifndef RINGMASTER_COORDINATORD_PROGRAM_H
#define RINGMASTER_COORDINATORD_PROGRAM_H

#include <stdbool.h>

#include <jansson.h>

#include "fabric_int.h"

#define PROGRAM_DEFAULT_PORT_LO 29500
#define PROGRAM_DEFAULT_PORT_HI 29999

/* The state reason of a program job no alive agent can take. */
#define PROGRAM_NO_AGENT_REASON "waiting: no worker allows programs (ringworker agent --allow-program)"

/*
 * REGISTER's program fields (`p` borrowed) onto agent `a`: programs,
 * program_ports (default PROGRAM_DEFAULT_PORT_LO..HI) and advertise. 0, or
 * -EINVAL with `detail` naming the field (nothing changed).
 */
int program_parse_register(agent_t *a, const json_t *p, char *detail, size_t dlen);

/* The agent's program fields as REGISTER carries them (compact JSON,
 * malloc'ed; NULL on out-of-memory), for the store (schema 009): read back
 * after a coordinator restart with program_parse_register. */
char *program_register_json(const agent_t *a);

/*
 * For a program job with `spec` (devices of `kind`): zero n_free[i] of the
 * alive agents that do not allow programs and cap the others at
 * parallel.ranks_per_node. *ret_total is the ranks the allowing agents could
 * hold at all (devices of the kind, capped the same way). Returns how many
 * alive agents allow programs. For a built-in job changes nothing and
 * returns -1.
 */
int program_cap_free(agent_t *const *alive, int n_alive, const jobspec_t *spec, int kind, int *n_free,
                     long *ret_total);

/* Whether every rank's agent of the program attempt `at` still allows
 * programs (its restart may go back on the same devices). */
bool program_agents_ok(const attempt_t *at);

/*
 * A port of agent `a`'s program_ports that no live attempt in f->attempts
 * other than `prev` (the failed attempt being restarted, or NULL) holds as
 * its master_port on that agent: the lowest that is not prev's either (a
 * restart gets a new port), else prev's own (its ranks are gone), else
 * -ENOSPC.
 */
int program_pick_port(fabric_t *f, const agent_t *a, const attempt_t *prev);

/* Record the MASTER_PORT of the program attempt `at` just placed: a
 * "program_port" event ("MASTER_PORT 30000 on node n2 (10.0.0.2)"), in the
 * loop's transaction; the user sees it, and program_restore_port reads it
 * back after a coordinator restart. */
void program_note_port(fabric_t *f, const attempt_t *at);

/* After a coordinator restart: the master_port of the restored program
 * attempt `at` from its "program_port" event (stays 0 when none). */
void program_restore_port(fabric_t *f, attempt_t *at);

/* Add SPAWN's program and torch objects for rank `rank` of the program
 * attempt `at` to `sp` (borrowed); no-op for a built-in attempt. */
void program_spawn_fields(const attempt_t *at, int rank, json_t *sp);

/* RANK_STARTED from agent `a` (checked to be the rank's agent). */
void program_on_rank_started(fabric_t *f, agent_t *a, json_t *p);

/* PROGRAM_METRICS from agent `a` (checked to be the rank's agent). */
void program_on_metrics(fabric_t *f, agent_t *a, json_t *p);

/*
 * Rank `rank` of the live program attempt `at` exited (status `code`,
 * signal `sig`, `error` the agent's last error line): status 0 is its
 * success (all ranks: the job succeeds), anything else fails the attempt
 * (gang restart or failure). `at` may be freed.
 */
void program_rank_exited(fabric_t *f, attempt_t *at, int rank, int code, int sig, const char *error,
                         int64_t detection_us);

#endif
