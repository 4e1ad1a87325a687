/*
 * attempt: the life of a job's live attempt on the broker loop, and its
 * recovery (docs/coordinator.md "Recovery").
 *
 * An attempt is placed by the scheduler (scheduler.c), runs while its ranks
 * report, and ends: succeeded (every rank DONE), failed, or cancelled
 * (attempt_end). When a rank fails, attempt_failed() asks attempt_decide()
 * whether the job restarts or fails; a restart marks the attempt failed,
 * asks its surviving ranks to park (ABORT rejoin) and stops the others,
 * waits until every rank is gone or parked (attempt_check_drained, within
 * the restart grace), then waits out the backoff (attempt_backoff_us) before
 * the scheduler places attempt + 1 (scheduler.c, keeping the parked ranks that
 * go back on their own device). The deadlines that fail an attempt from the
 * timers (a clean exit without DONE, a FAILED whose exit status never came)
 * are checked by attempt_expire().
 *
 * attempt_decide() and attempt_backoff_us() are plain functions of their
 * inputs (unit-tested in tests/coordinator/unit/test_fabric.c); the others
 * apply a decision: store writes in the loop's transaction and messages
 * sent after its commit (fabric_int.h).
 */
#ifndef RINGMASTER_COORDINATORD_ATTEMPT_H
#define RINGMASTER_COORDINATORD_ATTEMPT_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "exitcode.h"
#include "fabric_int.h"

/* What a rank's failure does to its attempt. */
typedef enum {
	ATTEMPT_RESTART,            /* the job goes recovering; attempt + 1 follows */
	ATTEMPT_FAIL_NOT_RETRYABLE, /* the failure would happen again: the job fails */
	ATTEMPT_FAIL_EXHAUSTED,     /* restart.max_restarts reached: the job fails */
} attempt_verdict_t;

/* The decision for a failure (`retryable`: a restart may help) of an
 * attempt whose job restarted `restarts` times, allowed `max_restarts`. */
attempt_verdict_t attempt_decide(bool retryable, int restarts, int max_restarts);

/* The wait before restart number `n` (1 for the first), in microseconds:
 * none for the first, then opt->restart_backoff_ms doubling, at most
 * opt->restart_backoff_max_ms. */
int64_t attempt_backoff_us(const fabric_options_t *opt, int n);

/* What a failure of kind `kind` that no restart can fix is ("a job spec
 * error"), or NULL when a restart may help. */
const char *attempt_not_retryable(rm_failure_t kind);

/* The failure kind of a FAILED or RANK_EXITED payload `p` (borrowed): its
 * `failure` code when it carries one this build knows, else what exit
 * status `exit_code` (signal `sig`) means (an older worker). */
rm_failure_t attempt_payload_failure(const json_t *p, int exit_code, int sig);

/* Free an attempt and everything it owns (its KV, parked KV_GETs, spec,
 * ranks, snapshot reports); accepts NULL. Does not touch devices or maps. */
void attempt_free(attempt_t *at);

/*
 * End a live attempt: the job goes to `to` with `reason` (unless
 * `state_already_set`: cancel), its unfinished ranks become lost, and with
 * `kill` its connected ranks get ABORT and its agents KILL (rank -1).
 * Devices are freed and the scheduler runs again. `at` is freed.
 */
void attempt_end(fabric_t *f, attempt_t *at, store_job_state_t to, const char *reason, bool kill,
                 bool state_already_set);

/* attempt_end to failed with `cause`, killing its ranks. `at` is freed. */
void attempt_fail(fabric_t *f, attempt_t *at, const char *cause);

/*
 * A rank of the live attempt `at` failed (`cause`), `detection_us` after it
 * happened. With restarts left and a failure a restart can help
 * (`not_retryable` NULL), the job goes `recovering`: the attempt's ranks get
 * ABORT ("recovering: CAUSE", survivors with rejoin) and the others KILL,
 * its messages are refused from now on, and once its ranks are gone and the
 * backoff is over the scheduler places the next attempt. Otherwise the job
 * fails with a reason naming `not_retryable` or the restart limit. An
 * attempt that has failed already is left alone. `at` may be freed.
 */
void attempt_failed(fabric_t *f, attempt_t *at, const char *cause, const char *not_retryable,
                    int64_t detection_us);

/* A rank of a failed attempt is gone once its agent reported its exit, or
 * the agent itself is gone. */
bool attempt_rank_gone(const rank_rt_t *rr);

/* A parked rank that can be kept for the next attempt. */
bool attempt_rank_kept(const rank_rt_t *rr);

/* The ABORT (new reference) that asks a survivor of the failed attempt `at`
 * to park. */
json_t *attempt_rejoin_abort(const attempt_t *at);

/* Stop rank r of the failed attempt `at` for good: a plain ABORT on its
 * identity and a KILL of just that rank to its agent; it is not kept. */
void attempt_stop_rank(fabric_t *f, attempt_t *at, int r, const char *reason);

/* A failed attempt whose ranks are all gone or parked (or whose grace is
 * over: the others are stopped) is drained: its restart is due after the
 * backoff, and the scheduler runs. No-op for others. */
void attempt_check_drained(fabric_t *f, attempt_t *at, int64_t now);

/* SPAWN's payload (new reference) for rank `rank` of `at`. */
json_t *attempt_spawn_payload(const attempt_t *at, int rank);

/* Give back the devices a failed attempt still holds (before its restart). */
void attempt_release_devices(attempt_t *at);

/* Whether every rank of `at` can go back on its device (its agent alive,
 * the device free). */
bool attempt_same_devices_free(const attempt_t *at);

/* The timers of the live attempts (mono `now`): ranks that exited cleanly
 * without DONE, or sent FAILED without their exit status coming, past their
 * grace fail their attempt; failed attempts past their grace are drained. */
void attempt_expire(fabric_t *f, int64_t now);

#endif
