/*
 * opsapi: the handlers of the operator's routes (routes.c lists them).
 *
 *   GET /v1/workers   opsapi_workers: worker agents, their devices and the
 *                     ranks placed on them
 *   GET /healthz      opsapi_healthz: 200 while the process serves
 *   GET /readyz       opsapi_readyz: the database reads and the writer loop answers
 *   GET /metrics      opsapi_metrics: the Prometheus exposition (metrics.h)
 */
#ifndef RINGMASTER_COORDINATORD_OPSAPI_H
#define RINGMASTER_COORDINATORD_OPSAPI_H

#include "request.h"

enum MHD_Result opsapi_workers(request_t *rq);
enum MHD_Result opsapi_healthz(request_t *rq);
enum MHD_Result opsapi_readyz(request_t *rq);
enum MHD_Result opsapi_metrics(request_t *rq);

#endif
