/*
 * jobview: the JSON the REST API shows for jobs, their ranks, events,
 * metrics rows and checkpoints.
 *
 * A job object is
 *   {"id","name","state","priority","world_size","attempt","spec",
 *    "created_at","updated_at","state_reason"}
 * with "spec" the stored spec (defaults filled in) embedded as is, times in
 * RFC 3339 UTC with microseconds, and "state_reason" a string or null. The
 * POST reply (rendered by the writer loop), the lists and GET /v1/jobs/{id}
 * (rendered by an HTTP thread) all come from jobview_job_open, so they are
 * byte for byte equal but for the one member GET /v1/jobs/{id} adds at the
 * end: "ranks", the ranks of the current attempt (jobview_rank).
 * Rendering appends to an sbuf and allocates nothing else.
 */
#ifndef RINGMASTER_COORDINATORD_JOBVIEW_H
#define RINGMASTER_COORDINATORD_JOBVIEW_H

#include "sbuf.h"
#include "store.h"

/* Append the job object for `job` (borrowed). */
void jobview_job(sbuf_t *out, const store_job_t *job);
/* The same without its closing '}': the caller appends more members
 * (",\"name\":...") and the '}'. */
void jobview_job_open(sbuf_t *out, const store_job_t *job);

/* Append one rank of an attempt: {"rank","node","device":{"kind","index"},
 * "state","memory"}, memory being {"params_bytes","grads_bytes",
 * "optim_bytes","activations_bytes"} or null until the rank reported it. */
void jobview_rank(sbuf_t *out, const store_rank_t *r);

/* Append one checkpoint: {"step","committed_at","bytes","world_size",
 * "attempt","path"}. */
void jobview_checkpoint(sbuf_t *out, const store_checkpoint_t *c);

/* Append one event: {"id","type","at","from","to","reason","attempt"}. */
void jobview_event(sbuf_t *out, const store_event_t *ev);

/* Append one metrics row: {"step","loss","lr","grad_norm","tokens_per_s",
 * "ms","val_loss","attempt","time"}; non-finite values and a missing
 * val_loss are null. */
void jobview_metric(sbuf_t *out, const store_metric_t *m);

/* Opaque list cursors: base64url (no padding) of "v1:<n>". `out` must hold
 * JOBVIEW_CURSOR_BYTES. jobview_cursor_decode returns 0 and *ret_n (>= 0), or
 * -EINVAL if `text` is not a cursor this server made. */
#define JOBVIEW_CURSOR_BYTES 48
void jobview_cursor_encode(long long n, char out[JOBVIEW_CURSOR_BYTES]);
int jobview_cursor_decode(const char *text, long long *ret_n);

#endif
