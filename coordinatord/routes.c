/*
 * routes: the route table and its matcher (see routes.h).
 */
#include "routes.h"

#include <stdio.h>
#include <string.h>

#include "jobapi.h"
#include "logapi.h"
#include "opsapi.h"
#include "sessionapi.h"
#include "streamapi.h"
#include "tokenapi.h"
#include "webui.h"
#include "workerapi.h"

#define P ROUTE_PERM_PUBLIC
#define V ROUTE_PERM_VIEWER
#define O ROUTE_PERM_OPERATOR
#define A ROUTE_PERM_ADMIN
#define M ROUTE_PERM_METRICS
#define A ROUTE_PERM_ADMIN

/* The API: one row per method and path, in the order /metrics lists them. */
static const route_t s_routes[] = {
	{METRICS_METHOD_GET, "/v1/jobs", jobapi_list, "/v1/jobs", V, ROUTE_BODY_NONE},
	{METRICS_METHOD_POST, "/v1/jobs", jobapi_submit, "/v1/jobs", O, ROUTE_BODY_JSON},
	{METRICS_METHOD_GET, "/v1/jobs/{id}", jobapi_get, "/v1/jobs/{id}", V, ROUTE_BODY_NONE},
	{METRICS_METHOD_POST, "/v1/jobs/{id}/cancel", jobapi_cancel, "/v1/jobs/{id}/cancel", O, ROUTE_BODY_NONE},
	{METRICS_METHOD_GET, "/v1/jobs/{id}/events", jobapi_events, "/v1/jobs/{id}/events", V, ROUTE_BODY_NONE},
	{METRICS_METHOD_GET, "/v1/jobs/{id}/metrics", jobapi_metrics, "/v1/jobs/{id}/metrics", V, ROUTE_BODY_NONE},
	{METRICS_METHOD_GET, "/v1/jobs/{id}/checkpoints", jobapi_checkpoints, "/v1/jobs/{id}/checkpoints", V,
	 ROUTE_BODY_NONE},
	{METRICS_METHOD_GET, "/v1/jobs/{id}/trace", jobapi_trace, "/v1/jobs/{id}/trace", V, ROUTE_BODY_NONE},
	{METRICS_METHOD_GET, "/v1/jobs/{id}/logs", logapi_logs, "/v1/jobs/{id}/logs", V, ROUTE_BODY_NONE},
	{METRICS_METHOD_GET, "/v1/jobs/{id}/stream", streamapi_job, "/v1/jobs/{id}/stream", V, ROUTE_BODY_NONE},
	{METRICS_METHOD_GET, "/v1/stream", streamapi_all, "/v1/stream", V, ROUTE_BODY_NONE},
	{METRICS_METHOD_GET, "/v1/workers", opsapi_workers, "/v1/workers", V, ROUTE_BODY_NONE},
	{METRICS_METHOD_POST, "/v1/workers/join-tokens", workerapi_join_token, "/v1/workers/join-tokens", A,
	 ROUTE_BODY_JSON},
	{METRICS_METHOD_GET, "/v1/workers/keys", workerapi_keys, "/v1/workers/keys", V, ROUTE_BODY_NONE},
	{METRICS_METHOD_POST, "/v1/workers/keys", workerapi_key_add, "/v1/workers/keys", A, ROUTE_BODY_JSON},
	{METRICS_METHOD_POST, "/v1/workers/keys/{id}/revoke", workerapi_key_revoke, "/v1/workers/keys/{id}/revoke", A,
	 ROUTE_BODY_NONE},
	{METRICS_METHOD_GET, "/healthz", opsapi_healthz, "/healthz", P, ROUTE_BODY_NONE},
	{METRICS_METHOD_GET, "/readyz", opsapi_readyz, "/readyz", P, ROUTE_BODY_NONE},
	{METRICS_METHOD_GET, "/metrics", opsapi_metrics, "/metrics", M, ROUTE_BODY_NONE},
	{METRICS_METHOD_GET, "/", webui_index, "/", P, ROUTE_BODY_NONE},
	{METRICS_METHOD_GET, "/assets/{name}", webui_asset, "/assets/{name}", P, ROUTE_BODY_NONE},
	{METRICS_METHOD_GET, "/v1/tokens", tokenapi_list, "/v1/tokens", A, ROUTE_BODY_NONE},
	{METRICS_METHOD_POST, "/v1/tokens", tokenapi_create, "/v1/tokens", A, ROUTE_BODY_JSON},
	{METRICS_METHOD_POST, "/v1/tokens/{id}/revoke", tokenapi_revoke, "/v1/tokens/{id}/revoke", A, ROUTE_BODY_NONE},
	{METRICS_METHOD_GET, "/v1/session", sessionapi_get, "/v1/session", V, ROUTE_BODY_NONE},
	{METRICS_METHOD_POST, "/v1/session", sessionapi_login, "/v1/session", P, ROUTE_BODY_JSON},
	{METRICS_METHOD_POST, "/v1/session/logout", sessionapi_logout, "/v1/session/logout", V, ROUTE_BODY_NONE},
	{METRICS_METHOD_POST, "/v1/session/codes", sessionapi_code, "/v1/session/codes", V, ROUTE_BODY_NONE},
};
#define N_ROUTES (sizeof s_routes / sizeof s_routes[0])

/* Derived by route_init: each row's label index and its path's Allow list. */
static const char *s_labels[METRICS_MAX_ROUTES];
static int s_n_labels;
static int s_label_of[N_ROUTES];
static char s_allow[N_ROUTES][64];

const route_t *route_table(size_t *ret_n)
{
	*ret_n = N_ROUTES;
	return s_routes;
}

const char *route_method_name(metrics_method_t method)
{
	return metrics_method_name(method);
}

const char *const *route_init(int *ret_n)
{
	s_n_labels = 0;
	for (size_t i = 0; i < N_ROUTES; i++) {
		int l = 0;
		while (l < s_n_labels && strcmp(s_labels[l], s_routes[i].label) != 0)
			l++;
		if (l == s_n_labels && s_n_labels < METRICS_MAX_ROUTES - 1)
			s_labels[s_n_labels++] = s_routes[i].label;
		s_label_of[i] = l;
		s_allow[i][0] = '\0';
		for (size_t j = 0; j < N_ROUTES; j++) {
			if (strcmp(s_routes[j].path, s_routes[i].path) != 0)
				continue;
			size_t n = strlen(s_allow[i]);
			snprintf(s_allow[i] + n, sizeof s_allow[i] - n, "%s%s", n ? ", " : "",
			         route_method_name(s_routes[j].method));
		}
	}
	s_labels[s_n_labels] = ROUTE_UNMATCHED_LABEL;
	*ret_n = s_n_labels + 1;
	return s_labels;
}

/* Whether `url` fits `tmpl`, a {name} segment matching one non-empty
 * segment; the last such segment goes to *ret_seg and *ret_seg_len. */
static bool path_fits(const char *tmpl, const char *url, const char **ret_seg, size_t *ret_seg_len)
{
	while (*tmpl && *url) {
		if (*tmpl == '{') {
			const char *close = strchr(tmpl, '}');
			size_t n = strcspn(url, "/");
			if (!close || n == 0)
				return false;
			*ret_seg = url;
			*ret_seg_len = n;
			tmpl = close + 1;
			url += n;
			continue;
		}
		if (*tmpl != *url)
			return false;
		tmpl++;
		url++;
	}
	return *tmpl == '\0' && *url == '\0';
}

const route_t *route_match(const char *url, metrics_method_t method, request_t *rq)
{
	rq->label = s_n_labels;
	rq->path = ROUTE_UNMATCHED_LABEL;
	rq->allow = NULL;
	rq->seg = NULL;
	rq->seg_len = 0;
	rq->id[0] = '\0';
	for (size_t i = 0; i < N_ROUTES; i++) {
		const char *seg = NULL;
		size_t seg_len = 0;
		if (!path_fits(s_routes[i].path, url, &seg, &seg_len))
			continue;
		if (!rq->allow) {
			/* the first row of the path: the path's label and Allow */
			rq->label = s_label_of[i];
			rq->path = s_routes[i].path;
			rq->allow = s_allow[i];
			rq->seg = seg;
			rq->seg_len = seg_len;
			if (seg && seg_len < STORE_ID_BYTES) {
				memcpy(rq->id, seg, seg_len);
				rq->id[seg_len] = '\0';
			}
		}
		if (s_routes[i].method == method)
			return &s_routes[i];
	}
	return NULL;
}
