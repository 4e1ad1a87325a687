/*
 * jobview: the JSON the REST API shows for jobs, their ranks, events,
 * metrics rows and checkpoints.
 *
 * A job object is
 *   {"id","name","state","priority","world_size","attempt","restarts","spec",
 *    "created_at","updated_at","state_reason"}
 * with "spec" the stored spec (defaults filled in) embedded as is, times in
 * RFC 3339 UTC with microseconds, and "state_reason" a string or null. The
 * POST reply (rendered by the writer loop), the lists and GET /v1/jobs/{id}
 * (rendered by an HTTP thread) all come from jobview_job_open, so they are
 * byte for byte equal but for the one member GET /v1/jobs/{id} adds at the
 * end: "ranks", the ranks of the current attempt (jobview_rank).
 *
 * The job object is written by hand into an sbuf, the one JSON writer kept
 * on the REST side: it embeds the stored spec text as is, where jansson
 * would parse and re-serialize the spec of every job shown. Measured with
 * wrk -t2 -c32 as bench/http/run.sh runs it (2,000 jobs, old and new binary
 * alternated in one session, issue 20): built with jansson, GET
 * /v1/jobs?limit=100 served 117 to 178 requests/s against 2,364 to 4,064 by
 * hand, and GET /v1/jobs/{id} 8,130 to 12,868 against 17,883 to 29,287.
 *
 * The other views are built with jansson: each returns a new reference, NULL
 * when out of memory. Strings that are not valid UTF-8 (a path or a node
 * name as a worker reported it) show U+FFFD in place of the bytes that break
 * it, in both writers.
 */
#ifndef RINGMASTER_COORDINATORD_JOBVIEW_H
#define RINGMASTER_COORDINATORD_JOBVIEW_H

#include <jansson.h>

#include "sbuf.h"
#include "store.h"

/* Append the job object for `job` (borrowed). */
void jobview_job(sbuf_t *out, const store_job_t *job);
/* The same without its closing '}': the caller appends more members
 * (",\"ranks\":...") and the '}'. */
void jobview_job_open(sbuf_t *out, const store_job_t *job);

/* One rank of an attempt: {"rank","node","device":{"kind","index"},
 * "state","memory"}, memory being {"params_bytes","grads_bytes",
 * "optim_bytes","activations_bytes"} or null until the rank reported it. */
json_t *jobview_rank(const store_rank_t *r);

/* One checkpoint: {"step","committed_at","bytes","world_size","attempt",
 * "path"}. */
json_t *jobview_checkpoint(const store_checkpoint_t *c);

/* One event: {"id","type","at","from","to","reason","attempt"}. */
json_t *jobview_event(const store_event_t *ev);

/* One metrics row: {"step","loss","lr","grad_norm","tokens_per_s","ms",
 * "val_loss","attempt","time"}; non-finite values and a missing val_loss are
 * null. */
json_t *jobview_metric(const store_metric_t *m);

/* A string (null for NULL) / an RFC 3339 time / a number (null when not
 * finite), as the views above show them; for the other views (opsapi.c). */
json_t *jobview_string(const char *s);
json_t *jobview_time(long long at_us);
json_t *jobview_real(double v);

/* Opaque list cursors: base64url (no padding) of "v1:<n>". `out` must hold
 * JOBVIEW_CURSOR_BYTES. jobview_cursor_decode returns 0 and *ret_n (>= 0), or
 * -EINVAL if `text` is not a cursor this server made. */
#define JOBVIEW_CURSOR_BYTES 48
void jobview_cursor_encode(long long n, char out[JOBVIEW_CURSOR_BYTES]);
int jobview_cursor_decode(const char *text, long long *ret_n);

#endif
