/*
 * jobapi: the handlers of the job routes (routes.c lists them).
 *
 *   GET  /v1/jobs                    jobapi_list (state, limit, cursor)
 *   POST /v1/jobs                    jobapi_submit (Idempotency-Key honoured)
 *   GET  /v1/jobs/{id}               jobapi_get, with the current attempt's ranks
 *   POST /v1/jobs/{id}/cancel        jobapi_cancel
 *   GET  /v1/jobs/{id}/events        jobapi_events (limit, cursor)
 *   GET  /v1/jobs/{id}/metrics       jobapi_metrics, rank 0's per-step rows (since_step, limit)
 *   GET  /v1/jobs/{id}/checkpoints   jobapi_checkpoints
 *   GET  /v1/jobs/{id}/trace         jobapi_trace, Chrome trace (attempt, rank)
 *
 * Reads go straight to the thread's reader store; mutations go to the
 * writer loop (broker.h). Each answers through request.h.
 */
#ifndef RINGMASTER_COORDINATORD_JOBAPI_H
#define RINGMASTER_COORDINATORD_JOBAPI_H

#include "request.h"

/*
 * The most queued jobs in all (--max-queued-jobs): a submission that finds
 * this many queued is answered 429 naming the cap. Set once before the HTTP
 * threads start. The count is read from the thread's reader store, so
 * submissions racing on several HTTP threads may pass it by at most the
 * number of threads.
 */
void jobapi_set_max_queued(int max_queued_jobs);

enum MHD_Result jobapi_list(request_t *rq);
enum MHD_Result jobapi_submit(request_t *rq);
enum MHD_Result jobapi_get(request_t *rq);
enum MHD_Result jobapi_cancel(request_t *rq);
enum MHD_Result jobapi_events(request_t *rq);
enum MHD_Result jobapi_metrics(request_t *rq);
enum MHD_Result jobapi_checkpoints(request_t *rq);
enum MHD_Result jobapi_trace(request_t *rq);

#endif
