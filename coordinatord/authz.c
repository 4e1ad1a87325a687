/*
 * authz: the per-request gate (see authz.h).
 */
#include "authz.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <sodium.h>

#include "auth.h"
#include "session.h"
#include "tokenapi.h"

#define MAX_HOSTS 32
#define HOST_MAX 256

static struct {
	config_metrics_auth_t metrics_auth;
	int n_hosts;
	char hosts[MAX_HOSTS][HOST_MAX];
} s_authz;

static void add_host(const char *h, size_t n)
{
	if (n == 0 || n >= HOST_MAX || s_authz.n_hosts >= MAX_HOSTS)
		return;
	memcpy(s_authz.hosts[s_authz.n_hosts], h, n);
	s_authz.hosts[s_authz.n_hosts][n] = '\0';
	s_authz.n_hosts++;
}

void authz_init(const config_t *cfg)
{
	auth_init(cfg);
	s_authz.metrics_auth = cfg->metrics_auth;
	s_authz.n_hosts = 0;
	add_host(cfg->listen_host, strlen(cfg->listen_host));
	static const char *const fixed[] = {"localhost", "127.0.0.1", "::1"};
	for (size_t i = 0; i < 3; i++)
		add_host(fixed[i], strlen(fixed[i]));
	char name[HOST_MAX] = "";
	if (gethostname(name, sizeof name - 1) == 0 && name[0])
		add_host(name, strlen(name));
	for (const char *p = cfg->allowed_hosts; *p;) {
		size_t n = strcspn(p, ",");
		add_host(p, n);
		p += n;
		if (*p == ',')
			p++;
	}
}

/* The host part of a Host header value (without port and brackets) into
 * out; false when malformed. */
static bool host_name(const char *value, char out[HOST_MAX])
{
	size_t n;
	if (value[0] == '[') {
		const char *close = strchr(value, ']');
		if (!close || (close[1] && close[1] != ':'))
			return false;
		value++;
		n = (size_t)(close - value);
	} else {
		n = strcspn(value, ":");
	}
	if (n == 0 || n >= HOST_MAX)
		return false;
	memcpy(out, value, n);
	out[n] = '\0';
	return true;
}

bool authz_host_allowed(request_t *rq)
{
	const char *host = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
	char name[HOST_MAX];
	if (!host || !host_name(host, name))
		return false;
	for (int i = 0; i < s_authz.n_hosts; i++)
		if (strcasecmp(name, s_authz.hosts[i]) == 0)
			return true;
	return false;
}

bool authz_caller_is_loopback(request_t *rq)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(rq->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	return ci && auth_addr_is_loopback(ci->client_addr);
}

/* Whether an Origin header value is the origin of the request's Host. */
static bool origin_matches_host(request_t *rq, const char *origin)
{
	const char *host = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
	const char *rest = NULL;
	if (strncasecmp(origin, "http://", 7) == 0)
		rest = origin + 7;
	else if (strncasecmp(origin, "https://", 8) == 0)
		rest = origin + 8;
	return host && rest && strcasecmp(rest, host) == 0;
}

static enum MHD_Result unauthorized(request_t *rq, const char *detail)
{
	rq->extra_header = MHD_HTTP_HEADER_WWW_AUTHENTICATE;
	rq->extra_value = "Bearer realm=\"ringmaster\"";
	return request_problem(rq, 401, detail, NULL);
}

/* A bearer credential into rq->who: 0, or the answer queued. */
static int check_bearer(request_t *rq, const char *header, enum MHD_Result *ret)
{
	size_t len = 0;
	const char *token = auth_bearer(header, &len);
	if (!token) {
		*ret = unauthorized(rq, "the Authorization header must be \"Bearer TOKEN\" with a ringmaster API token");
		return -EACCES;
	}
	store_t *reader = request_reader(rq);
	if (!reader) {
		*ret = request_db_unavailable(rq);
		return -EIO;
	}
	char why[200];
	bool touch = false;
	int64_t expires = 0;
	int r = auth_token_check(reader, token, len, &rq->who, &touch, &expires, why, sizeof why);
	if (r == -EACCES) {
		char detail[300];
		snprintf(detail, sizeof detail, "%s; ask an admin for a token (ringctl token create)", why);
		*ret = unauthorized(rq, detail);
		return r;
	}
	if (r < 0) {
		*ret = request_db_unavailable(rq);
		return r;
	}
	broker_client_t *bc = touch ? request_client(rq) : NULL;
	if (bc)
		tokenapi_cmd_touch(bc, rq->who.token_id);
	return 0;
}

/* The session cookie into rq->who, with the Host, Origin and CSRF checks:
 * 0, or the answer queued. */
static int check_cookie(request_t *rq, const char *cookie, enum MHD_Result *ret)
{
	char csrf[SESSION_SECRET_BYTES];
	if (session_lookup(cookie, strlen(cookie), &rq->who, csrf) < 0) {
		*ret = unauthorized(rq, "the dashboard session has ended (signed out, idle for 12 hours, its token revoked "
		                        "or expired, or the coordinator restarted); sign in again");
		return -EACCES;
	}
	if (!authz_host_allowed(rq)) {
		*ret = request_problem(rq, 421,
		                       "the Host header names a host this coordinator does not serve; add it with "
		                       "--allowed-hosts if it is one of its names",
		                       NULL);
		return -EACCES;
	}
	if (rq->method == METRICS_METHOD_GET)
		return 0;
	const char *origin = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Origin");
	if (origin && !origin_matches_host(rq, origin)) {
		*ret = request_problem(rq, 403, "cross-origin request refused: its Origin is not this coordinator's", NULL);
		return -EACCES;
	}
	const char *sent = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "X-CSRF-Token");
	if (!sent || strlen(sent) != SESSION_SECRET_LEN || sodium_memcmp(sent, csrf, SESSION_SECRET_LEN) != 0) {
		*ret = request_problem(rq, 403,
		                       "a request that changes state with the session cookie needs the X-CSRF-Token "
		                       "header that GET /v1/session gives",
		                       NULL);
		return -EACCES;
	}
	return 0;
}

static auth_role_t role_needed(route_perm_t perm)
{
	switch (perm) {
	case ROUTE_PERM_OPERATOR: return AUTH_ROLE_OPERATOR;
	case ROUTE_PERM_ADMIN: return AUTH_ROLE_ADMIN;
	default: return AUTH_ROLE_VIEWER;
	}
}

int authz_check(request_t *rq, route_perm_t perm, enum MHD_Result *ret_answer)
{
	if (perm == ROUTE_PERM_PUBLIC)
		return 0;
	if (!auth_enabled()) {
		memset(&rq->who, 0, sizeof rq->who);
		rq->who.role = AUTH_ROLE_ADMIN;
		rq->who.via = AUTH_VIA_OFF;
		return 0;
	}
	if (perm == ROUTE_PERM_METRICS) {
		if (s_authz.metrics_auth == CONFIG_METRICS_AUTH_OPEN ||
		    (s_authz.metrics_auth == CONFIG_METRICS_AUTH_LOOPBACK && authz_caller_is_loopback(rq)))
			return 0;
	}
	const char *header = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	const char *cookie = MHD_lookup_connection_value(rq->conn, MHD_COOKIE_KIND, SESSION_COOKIE);
	int r;
	if (header) {
		r = check_bearer(rq, header, ret_answer);
	} else if (cookie) {
		r = check_cookie(rq, cookie, ret_answer);
	} else {
		*ret_answer = unauthorized(rq, "this route needs an API token: send \"Authorization: Bearer TOKEN\" "
		                               "(the first admin token is in admin.token beside the database; "
		                               "ringctl finds it there)");
		return -EACCES;
	}
	if (r < 0)
		return r;
	auth_role_t need = role_needed(perm);
	if (rq->who.role < need) {
		char detail[300];
		snprintf(detail, sizeof detail, "%s %s needs the %s role; token \"%s\" has the %s role", rq->method_name,
		         rq->path, auth_role_name(need), rq->who.name, auth_role_name(rq->who.role));
		*ret_answer = request_problem(rq, 403, detail, NULL);
		return -EPERM;
	}
	return 0;
}
