/*
 * sessionapi: the dashboard's session routes (session.h holds the
 * sessions):
 *   GET  /v1/session         who am I: {name, role, via, csrf} (csrf with
 *                            the cookie only; 401 when not signed in)
 *   POST /v1/session         {token} or {code} -> 200 {name, role, csrf} and
 *                            Set-Cookie rm_session (HttpOnly, SameSite=Strict,
 *                            Path=/, Secure under TLS); refused with 421 for a
 *                            Host that is not the coordinator's and 403 for a
 *                            foreign Origin
 *   POST /v1/session/logout  ends the cookie's session, clears the cookie
 *   POST /v1/session/codes   a one-time login code (60 s) for the caller,
 *                            which `ringctl dashboard` puts in the address
 */
#ifndef RINGMASTER_COORDINATORD_SESSIONAPI_H
#define RINGMASTER_COORDINATORD_SESSIONAPI_H

#include <stdbool.h>

#include "config.h"
#include "request.h"

/* Settings: the cookie is Secure when cfg->tls_cert is set. */
void sessionapi_init(const config_t *cfg);
/* Whether the cookie carries Secure (the transport sets it when it serves
 * HTTPS by other means). */
void sessionapi_set_secure(bool secure);

enum MHD_Result sessionapi_get(request_t *rq);
enum MHD_Result sessionapi_login(request_t *rq);
enum MHD_Result sessionapi_logout(request_t *rq);
enum MHD_Result sessionapi_code(request_t *rq);

#endif
