/*
 * jobview: the JSON the REST API shows for jobs, events and metrics rows.
 *
 * A job object is
 *   {"id","name","state","priority","world_size","attempt","spec",
 *    "created_at","updated_at","state_reason"}
 * with "spec" the stored spec (defaults filled in) embedded as is, times in
 * RFC 3339 UTC with microseconds, and "state_reason" a string or null. The
 * POST reply (rendered by the writer loop) and GET /v1/jobs/{id} (rendered by
 * an HTTP thread) both come from jobview_job, so they are byte for byte equal.
 * Rendering appends to an sbuf and allocates nothing else.
 */
#ifndef RINGMASTER_COORDINATORD_JOBVIEW_H
#define RINGMASTER_COORDINATORD_JOBVIEW_H

#include "sbuf.h"
#include "store.h"

/* Append the job object for `job` (borrowed). */
void jobview_job(sbuf_t *out, const store_job_t *job);

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
