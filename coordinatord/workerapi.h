/*
 * workerapi: the REST routes of the worker channel's keys (issue 22, part
 * C; docs/workers.md): POST /v1/workers/join-tokens, GET and POST
 * /v1/workers/keys, POST /v1/workers/keys/{id}/revoke. Writes go to the
 * broker's writer loop (broker_client_workers), reads to the thread's
 * reader store. The routes' permissions are in routes.c (admin, viewer).
 */
#ifndef RINGMASTER_COORDINATORD_WORKERAPI_H
#define RINGMASTER_COORDINATORD_WORKERAPI_H

#include <jansson.h>

#include "request.h"

enum MHD_Result workerapi_join_token(request_t *rq);
enum MHD_Result workerapi_keys(request_t *rq);
enum MHD_Result workerapi_key_add(request_t *rq);
enum MHD_Result workerapi_key_revoke(request_t *rq);

/* Add "key": {id, name} (or null) to each worker object of `workers` (GET
 * /v1/workers), from `st`. Errors leave the objects as they are. */
void workerapi_annotate_keys(store_t *st, json_t *workers);

#endif
