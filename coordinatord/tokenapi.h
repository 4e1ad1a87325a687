/*
 * tokenapi: the token routes (GET /v1/tokens, POST /v1/tokens, POST
 * /v1/tokens/{id}/revoke; admin) and the writer loop's token commands.
 *
 * A token is made in the HTTP thread (auth_token_make): only its hash and
 * display prefix travel to the writer loop, and the token itself appears
 * once, in the 201 answer of POST /v1/tokens. The writer's side
 * (tokenapi_apply, called by broker.c inside its group transaction) takes
 * one JSON command: {"op": "create" | "revoke" | "touch", ...}.
 */
#ifndef RINGMASTER_COORDINATORD_TOKENAPI_H
#define RINGMASTER_COORDINATORD_TOKENAPI_H

#include <jansson.h>

#include "broker.h"
#include "request.h"
#include "sbuf.h"
#include "store.h"

/* Route handlers (routes.c). */
enum MHD_Result tokenapi_list(request_t *rq);
enum MHD_Result tokenapi_create(request_t *rq);
enum MHD_Result tokenapi_revoke(request_t *rq);

/* A token row's JSON: {id, name, role, prefix, created_at, expires_at,
 * last_used_at, revoked_at}; NULL when out of memory. */
json_t *tokenapi_view(const store_token_t *t);

/*
 * Store token `t` (name, role, hash, prefix, times) through the writer loop;
 * ret->status 201 with the row's JSON, or 409 when an unrevoked token has
 * the name. 0 or a negative errno (broker_client_* codes).
 */
int tokenapi_cmd_create(broker_client_t *bc, const store_token_t *t, int timeout_ms, broker_reply_t *ret);

/* Record a use of token `id` now; sent without waiting for the answer. */
void tokenapi_cmd_touch(broker_client_t *bc, int64_t id);

/*
 * The writer's side of a token command `cmd` (JSON text), inside the open
 * transaction of `st`: *ret_status and `body` (the row's JSON, or a
 * problem). 0, or a negative errno from the store, which fails the group.
 */
int tokenapi_apply(store_t *st, const char *cmd, sbuf_t *body, int *ret_status);

#endif
