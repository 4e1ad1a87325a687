/*
 * streamapi: the Server-Sent Events routes (routes.c lists them).
 *
 *   GET /v1/jobs/{id}/stream   streamapi_job: the job's state, event,
 *                              metrics and log entries, then end
 *   GET /v1/stream             streamapi_all: job and worker changes
 *   GET /v1/jobs/{id}/logs?follow=1  streamapi_logs (from logapi_logs)
 *
 * Frames come from the change feed (feed.c). No stream holds a thread: the
 * body is a libmicrohttpd callback response; when a stream has nothing to
 * send its connection is suspended (MHD_suspend_connection) and every
 * suspended one is resumed when the feed publishes, and by one ticker
 * thread every keep-alive interval (which then sends ": keep-alive").
 * Last-Event-ID (header) or ?last_event_id= resumes after that sequence
 * number; one the feed no longer holds gets `event: reset`. At most
 * max_streams are open (503 with Retry-After past it).
 */
#ifndef RINGMASTER_COORDINATORD_STREAMAPI_H
#define RINGMASTER_COORDINATORD_STREAMAPI_H

#include "request.h"

/* Start the ticker and hook the feed's notify. 0 or -errno. */
int streamapi_init(int max_streams, int keepalive_ms);

/* End every stream (each sends what it has and closes) and stop the ticker;
 * call before stopping libmicrohttpd. */
void streamapi_shutdown(void);

enum MHD_Result streamapi_job(request_t *rq);
enum MHD_Result streamapi_all(request_t *rq);

/* follow=1 of GET /v1/jobs/{id}/logs: the lines matching `q` (the job
 * exists) as `log` events, then new ones until the job ends. */
enum MHD_Result streamapi_logs(request_t *rq, const store_log_query_t *q);

#endif
