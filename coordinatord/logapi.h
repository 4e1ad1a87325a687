/*
 * logapi: the job logs over REST (routes.c lists the route).
 *
 *   GET /v1/jobs/{id}/logs?rank=R&attempt=N&tail=N&since=SEQ
 *       logapi_logs: the lines the job's ranks printed (store_logs.c), as
 *       {"lines": [{seq, rank, attempt, stream, time, text}], "next": SEQ,
 *        "dropped": N}; since: lines after that seq, at most
 *       LOGAPI_PAGE_LINES per answer (page on with next); tail: the last N.
 */
#ifndef RINGMASTER_COORDINATORD_LOGAPI_H
#define RINGMASTER_COORDINATORD_LOGAPI_H

#include "request.h"

#define LOGAPI_PAGE_LINES 1000
#define LOGAPI_MAX_TAIL 10000

enum MHD_Result logapi_logs(request_t *rq);

#endif
