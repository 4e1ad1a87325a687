/*
 * fabric: the workers' side of the broker loop. It serves the wire protocol
 * of api/wire.h on the loop's ZeroMQ ROUTER (agents register and heartbeat,
 * ranks join, rendezvous and report), keeps the cluster in memory (agents and
 * their devices, the live attempt of each scheduled or running job, each
 * attempt's key-value store and parked KV_GETs), places queued jobs (gang
 * placement, priority then FIFO, packed onto few nodes), restarts the rank
 * group of a job whose rank failed (recovery: ABORT and KILL of the failed
 * attempt, backoff, placement of attempt + 1, the `recovered` event), and
 * records every change in the store. The parts live in their own modules
 * (agents.c, ranks.c, kv.c, snapcommit.c, attempt.c, placement.c, scheduler.c)
 * over the shared state of fabric_int.h; this header is all that the rest
 * of the daemon sees.
 *
 * Everything here runs on the broker loop's thread, which owns the writer
 * store_t: writes open a transaction lazily and fabric_flush() commits it
 * once per loop iteration (group commit), so a METRICS message per step costs
 * a row, not a transaction. Messages produced while that transaction is open
 * are held and sent, in order, after its commit. Nothing blocks: replies go
 * out with ZMQ_DONTWAIT, a KV_GET that must wait is parked and answered from
 * fabric_tick().
 *
 * The memory state is rebuilt from the store at start (fabric_load): agents
 * recorded alive are given dead_after intervals to speak again, placed ranks
 * keep their devices; the key-value stores are not persisted (they belong to
 * the attempt).
 */
#ifndef RINGMASTER_COORDINATORD_FABRIC_H
#define RINGMASTER_COORDINATORD_FABRIC_H

#include <stdbool.h>
#include <stddef.h>

#include "store.h"

typedef struct fabric fabric_t;

typedef struct {
	int heartbeat_ms;  /* interval of HEARTBEATs both ways */
	int dead_after;    /* intervals without a message: the agent is dead */
	int metrics_every; /* steps between METRICS, told to ranks in JOINED */
	int restart_backoff_ms;     /* wait before the 2nd restart of a job, doubling after */
	int restart_backoff_max_ms; /* the longest wait between restarts */
	int restart_grace_ms;       /* time a failed attempt's ranks get to be reported gone */
	int dead_worker_retention_s; /* dead worker rows older than this are deleted; 0: never */
	bool auth;                  /* --broker-auth on: every message carries a ZAP User-Id */
} fabric_options_t;

/* A fabric on `router` (a bound ROUTER socket) and the writer store `st`,
 * both borrowed and used from the loop thread only. NULL on out-of-memory. */
fabric_t *fabric_new(void *router, store_t *st, const fabric_options_t *opt);

/* Free everything; accepts NULL. Commits nothing: call fabric_flush first. */
void fabric_free(fabric_t *f);

/* Rebuild the memory state from the store (see above). 0 or a negative errno
 * with one line in `err`. */
int fabric_load(fabric_t *f, char *err, size_t errlen);

/* Receive and answer what is waiting on the ROUTER (a bounded batch). */
void fabric_handle_wire(fabric_t *f);

/* Timers: HEARTBEATs out, agents declared dead, KV_GET timeouts, and the
 * scheduling pass when something changed (or once a second). */
void fabric_tick(fabric_t *f);

/* The loop could not hear the wire for `deaf_us` (it was busy outside its
 * poll, or a poll overslept its timeout: a slow disk under a commit, the
 * process stopped, the machine starved). From one heartbeat interval up,
 * that silence is the coordinator's, not the agents': their liveness clocks
 * restart from now plus the gap (agents that gave us up meanwhile may be in
 * a reconnect backoff that long; at most DEAF_FORGIVEN_MAX_US in all
 * between two messages of an agent), so no node is declared dead for
 * heartbeats still queued on the way in or for a reconnect under way. Call it once per loop iteration, before fabric_handle_wire() and
 * fabric_tick(). */
void fabric_deaf(fabric_t *f, int64_t deaf_us);

/* Milliseconds until the next timer is due (0 when one is due now). */
long fabric_timeout_ms(fabric_t *f);

/* Commit the writes of this iteration (rolled back and logged on failure). */
void fabric_flush(fabric_t *f);

/* The job `job_id` was just set to cancelled in the store (and committed):
 * abort its live attempt, if any (ABORT to its ranks, KILL to its agents),
 * free its devices and schedule again. */
void fabric_job_cancelled(fabric_t *f, const char *job_id, const char *reason);

/* Key `key_id` was just revoked (and committed): its agent is declared
 * dead (its ranks' attempts fail as on a lost node) and its identities stop
 * matching the key. */
void fabric_key_revoked(fabric_t *f, int64_t key_id);

/* Something changed outside the fabric (a job submitted): schedule at the
 * next tick. */
void fabric_mark_dirty(fabric_t *f);

#endif
