/*
 * traces: the coordinator's side of profiling (docs/profiling.md). Ranks of a
 * job whose spec has `profile: {start_step, end_step}` send one TRACE per
 * profiled step (wire.h): the step's start on their wall clock, its
 * duration, and its phases (data, forward, backward, grad_reduce, ...).
 * traces_record checks one and stores it (schema 005, at most
 * TRACES_MAX_ROWS_PER_JOB rows and TRACES_MAX_BYTES_PER_JOB bytes of events
 * per job); traces_render turns a job's rows into a Chrome trace JSON object
 * for GET /v1/jobs/{id}/trace, which Perfetto (https://ui.perfetto.dev) and
 * chrome://tracing open.
 *
 * traces_record runs on the broker loop (the writer store_t); traces_render
 * on an HTTP thread with its reader. Neither keeps state.
 */
#ifndef RINGMASTER_COORDINATORD_TRACES_H
#define RINGMASTER_COORDINATORD_TRACES_H

#include <stddef.h>

#include <jansson.h>

#include "sbuf.h"
#include "store.h"

#define TRACES_MAX_EVENTS 64          /* phases in one TRACE */
#define TRACES_NAME_MAX_BYTES 64      /* a phase's name */
#define TRACES_MAX_ROWS_PER_JOB 65536 /* (attempt, rank, step) rows kept per job */
#define TRACES_MAX_BYTES_PER_JOB (16 << 20) /* bytes of events JSON kept per job */

/*
 * Check the TRACE payload `p` (already decoded by wire.h: step, start_unix_us,
 * dur_us, events present and of their JSON kinds) from rank `rank` of
 * (job_id, attempt), and store it inside the caller's transaction:
 * step >= 1; events an array of at most TRACES_MAX_EVENTS objects
 * {name: 1..TRACES_NAME_MAX_BYTES bytes, ts_us, dur_us: finite numbers >= 0};
 * the numbers finite. Only name, ts_us and dur_us of each event are kept.
 * Returns 0 when stored, and also when not stored for a reason the rank
 * cannot fix: the job's cap is reached (logged at the first refusal and
 * every 1000th), or the same step of the same rank and attempt was stored
 * already (the first is kept). Returns -EINVAL with one line in `err` (for
 * an ERROR reply to the rank) when the payload is invalid, or another
 * negative errno when the store failed (logged here, with the SQLite
 * message).
 */
int traces_record(store_t *st, const char *job_id, int attempt, int rank, const json_t *p, char *err,
                  size_t errlen);

/*
 * Append the Chrome trace (JSON object format) of a job's rows to `out`:
 *   {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {"job": ID}}
 * with, per stored step of a rank, a complete event ("ph": "X") named
 * "step N" (cat "step") spanning the step, and one per phase (cat "phase",
 * named after it) inside it; ts (the rank's wall clock, Unix microseconds)
 * and dur in microseconds, pid = the rank, tid = 0, args {step, attempt}.
 * Each rank seen gets process_name ("rank N") and process_sort_index
 * metadata events ("ph": "M"), and its thread a thread_name. attempt /
 * rank >= 0 keep only that attempt / rank.
 * Returns the number of rows rendered (0: the job has none that match;
 * `out` then holds an empty trace), -ENOENT for an unknown job, or another
 * negative errno (store, or a row that cannot be parsed: -EIO). On a
 * failure `out` holds a partial document: discard it.
 */
int traces_render(store_t *st, const char *job_id, int attempt, int rank, sbuf_t *out);

#endif
