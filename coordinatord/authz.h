/*
 * authz: the gate every routed request passes before its handler (http.c's
 * dispatch): who is calling (auth.h: a bearer token, or the dashboard's
 * session cookie, session.h) and whether the route's permission
 * (routes.h's perm column) lets that role in.
 *
 * Public routes pass untouched. Without a valid credential the answer is
 * 401 (problem+json, WWW-Authenticate: Bearer); with a role below the
 * route's, 403 naming the role needed. /metrics follows metrics_auth (a
 * loopback caller needs nothing by default). With --auth off every caller
 * is an anonymous admin. A request authenticated by the cookie must also
 * come with an allowed Host (DNS rebinding: 421), and when it changes state
 * with X-CSRF-Token equal to its session's and an Origin, when sent, that
 * matches its Host (403).
 */
#ifndef RINGMASTER_COORDINATORD_AUTHZ_H
#define RINGMASTER_COORDINATORD_AUTHZ_H

#include <stdbool.h>

#include "config.h"
#include "request.h"
#include "routes.h"

/* Settings from the configuration (metrics_auth, the allowed Host names).
 * Call once before serving. */
void authz_init(const config_t *cfg);

/*
 * Authenticate rq into rq->who and check it may use a route needing
 * `perm`. 0: go on to the handler; otherwise the answer (401, 403, 421,
 * 503) is queued and in *ret_answer.
 */
int authz_check(request_t *rq, route_perm_t perm, enum MHD_Result *ret_answer);

/* Whether the request's Host header names this server (the listen host,
 * localhost, 127.0.0.1, ::1, the machine's name or --allowed-hosts),
 * with or without a port. */
bool authz_host_allowed(request_t *rq);

/* Whether the caller's address is loopback. */
bool authz_caller_is_loopback(request_t *rq);

#endif
