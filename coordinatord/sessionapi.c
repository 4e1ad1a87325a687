/*
 * sessionapi: the session routes (see sessionapi.h).
 */
#include "sessionapi.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>
#include <sodium.h>

#include "auth.h"
#include "authz.h"
#include "clock.h"
#include "jobview.h"
#include "log.h"
#include "session.h"

static atomic_bool s_secure;

void sessionapi_init(const config_t *cfg)
{
	atomic_store(&s_secure, cfg->tls_cert[0] != '\0');
}

void sessionapi_set_secure(bool secure)
{
	atomic_store(&s_secure, secure);
}

static const char *via_name(auth_via_t via)
{
	switch (via) {
	case AUTH_VIA_TOKEN: return "token";
	case AUTH_VIA_COOKIE: return "cookie";
	case AUTH_VIA_OFF: return "off";
	default: return "none";
	}
}

/* {name, role, via, csrf} (csrf may be NULL: null). */
static json_t *whoami(const auth_principal_t *who, const char *csrf)
{
	return json_pack("{ss ss ss so}", "name", who->name, "role", auth_role_name(who->role), "via",
	                 via_name(who->via), "csrf", csrf ? json_string(csrf) : json_null());
}

enum MHD_Result sessionapi_get(request_t *rq)
{
	char csrf[SESSION_SECRET_BYTES];
	bool have_csrf = false;
	if (rq->who.via == AUTH_VIA_COOKIE) {
		const char *cookie = MHD_lookup_connection_value(rq->conn, MHD_COOKIE_KIND, SESSION_COOKIE);
		auth_principal_t again;
		have_csrf = cookie && session_lookup(cookie, strlen(cookie), &again, csrf) == 0;
	}
	return request_reply_json(rq, 200, whoami(&rq->who, have_csrf ? csrf : NULL));
}

/* The token's expiry (0 never) from the store; 0 when it cannot be read
 * (a session then ends with its idle time or a revocation). */
static int64_t token_expiry(request_t *rq, int64_t token_id)
{
	store_t *st = token_id ? request_reader(rq) : NULL;
	store_token_t t;
	if (!st || store_token_get(st, token_id, &t) < 0)
		return 0;
	return t.expires_at_us;
}

/* Who the body's {token} or {code} names: 0, or the answer queued. */
static int login_principal(request_t *rq, auth_principal_t *who, int64_t *expires, enum MHD_Result *ret)
{
	json_t *doc = json_loadb(rq->body.data ? rq->body.data : "", rq->body.len, 0, NULL);
	json_t *token = json_object_get(doc, "token"), *code = json_object_get(doc, "code");
	int r = -EINVAL;
	if (!json_is_object(doc) || json_object_size(doc) != 1 || (!json_is_string(token) && !json_is_string(code))) {
		*ret = request_bad_request(rq, "the body must be {\"token\": \"rmt_...\"} or {\"code\": \"rmc_...\"}", "");
	} else if (json_is_string(code)) {
		if (session_code_redeem(json_string_value(code), json_string_length(code), who, expires) == 0)
			r = 0;
		else
			*ret = request_problem(rq, 401,
			                       "the login code is unknown, already used or expired (codes last 60 s); run "
			                       "'ringctl dashboard' again",
			                       "/code");
	} else {
		store_t *reader = request_reader(rq);
		char why[200];
		bool touch = false;
		int c = reader ? auth_token_check(reader, json_string_value(token), json_string_length(token), who, &touch,
		                                  expires, why, sizeof why)
		               : -EIO;
		if (c == 0)
			r = 0;
		else if (c == -EACCES)
			*ret = request_problem(rq, 401, why, "/token");
		else
			*ret = request_db_unavailable(rq);
	}
	json_decref(doc);
	return r;
}

enum MHD_Result sessionapi_login(request_t *rq)
{
	if (!authz_host_allowed(rq))
		return request_problem(rq, 421,
		                       "the Host header names a host this coordinator does not serve; add it with "
		                       "--allowed-hosts if it is one of its names",
		                       NULL);
	const char *origin = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Origin");
	const char *host = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
	if (origin) {
		const char *rest = strncasecmp(origin, "http://", 7) == 0    ? origin + 7
		                   : strncasecmp(origin, "https://", 8) == 0 ? origin + 8
		                                                              : NULL;
		if (!rest || !host || strcasecmp(rest, host) != 0)
			return request_problem(rq, 403, "cross-origin sign-in refused: its Origin is not this coordinator's",
			                       NULL);
	}
	if (rq->too_large)
		return request_problem(rq, 413, "request body is too large", NULL);
	auth_principal_t who;
	int64_t expires = 0;
	enum MHD_Result answer;
	if (login_principal(rq, &who, &expires, &answer) < 0)
		return answer;
	char id[SESSION_SECRET_BYTES], csrf[SESSION_SECRET_BYTES];
	session_create(&who, expires, id, csrf);
	char cookie[160];
	snprintf(cookie, sizeof cookie, "%s=%s; HttpOnly; SameSite=Strict; Path=/%s", SESSION_COOKIE, id,
	         atomic_load(&s_secure) ? "; Secure" : "");
	sodium_memzero(id, sizeof id);
	rq->extra_header = MHD_HTTP_HEADER_SET_COOKIE;
	rq->extra_value = cookie;
	who.via = AUTH_VIA_COOKIE;
	log_info("dashboard session opened for token \"%s\"", who.name);
	enum MHD_Result r = request_reply_json(rq, 200, whoami(&who, csrf));
	sodium_memzero(cookie, sizeof cookie);
	return r;
}

enum MHD_Result sessionapi_logout(request_t *rq)
{
	const char *cookie = MHD_lookup_connection_value(rq->conn, MHD_COOKIE_KIND, SESSION_COOKIE);
	if (cookie && rq->who.via == AUTH_VIA_COOKIE)
		session_destroy(cookie, strlen(cookie));
	rq->extra_header = MHD_HTTP_HEADER_SET_COOKIE;
	rq->extra_value = atomic_load(&s_secure) ? SESSION_COOKIE "=; Max-Age=0; HttpOnly; SameSite=Strict; Path=/; Secure"
	                                         : SESSION_COOKIE "=; Max-Age=0; HttpOnly; SameSite=Strict; Path=/";
	return request_reply_json(rq, 200, json_pack("{sb}", "signed_out", 1));
}

enum MHD_Result sessionapi_code(request_t *rq)
{
	char code[SESSION_CODE_BYTES];
	session_code_create(&rq->who, token_expiry(rq, rq->who.token_id), code);
	json_t *doc = json_pack("{ss so}", "code", code, "expires_at",
	                        jobview_time(clock_wall_us() + SESSION_CODE_US));
	sodium_memzero(code, sizeof code);
	return request_reply_json(rq, 201, doc);
}
