/*
 * webui: the dashboard's routes (see webui.h).
 */
#include "webui.h"

#include <string.h>

#include "clock.h"
#include "log.h"
#include "metrics.h"
#include "routes.h"

const webui_asset_t *webui_find(const char *name, size_t len)
{
	for (size_t i = 0; i < webui_n_assets; i++) {
		if (strlen(webui_assets[i].name) == len && memcmp(webui_assets[i].name, name, len) == 0)
			return &webui_assets[i];
	}
	return NULL;
}

/* Whether the request's If-None-Match names `etag` (or is "*"). */
static bool etag_matches(request_t *rq, const char *etag)
{
	const char *inm = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
	if (!inm)
		return false;
	if (strcmp(inm, "*") == 0)
		return true;
	size_t n = strlen(etag);
	for (const char *p = strstr(inm, etag); p; p = strstr(p + 1, etag)) {
		char after = p[n];
		if (after == '\0' || after == ',' || after == ' ')
			return true;
	}
	return false;
}

/* Answer `a` (200, or 304 when the caller holds its ETag). */
static enum MHD_Result serve(request_t *rq, const webui_asset_t *a)
{
	bool fresh = etag_matches(rq, a->etag);
	int status = fresh ? 304 : 200;
	struct MHD_Response *resp = MHD_create_response_from_buffer(fresh ? 0 : a->len, (void *)a->data,
	                                                            MHD_RESPMEM_PERSISTENT);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, a->ctype);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, a->etag);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(resp, "Content-Security-Policy", WEBUI_CSP);
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
	enum MHD_Result r = MHD_queue_response(rq->conn, (unsigned)status, resp);
	MHD_destroy_response(resp);
	metrics_record(rq->label, rq->method, status, clock_mono_us() - rq->start_us);
	if (log_enabled(LOG_DEBUG))
		log_debug("http: %s answered %d", rq->path, status);
	return r;
}

enum MHD_Result webui_index(request_t *rq)
{
	const webui_asset_t *a = webui_find("index.html", strlen("index.html"));
	if (!a)
		return request_problem(rq, 500, "the dashboard was built without its index.html", NULL);
	return serve(rq, a);
}

/* routes.json: the route table's rows, so the page asks only for the
 * routes this daemon serves (the streams and logs came later). */
static enum MHD_Result serve_routes(request_t *rq)
{
	size_t n;
	const route_t *t = route_table(&n);
	json_t *list = json_array();
	for (size_t i = 0; list && i < n; i++) {
		if (json_array_append_new(list, json_pack("{ss ss}", "method", route_method_name(t[i].method), "path",
		                                          t[i].path)) < 0) {
			json_decref(list);
			list = NULL;
		}
	}
	return request_reply_json(rq, 200, list ? json_pack("{so}", "routes", list) : NULL);
}

enum MHD_Result webui_asset(request_t *rq)
{
	if (rq->seg && rq->seg_len == strlen("routes.json") && memcmp(rq->seg, "routes.json", rq->seg_len) == 0)
		return serve_routes(rq);
	const webui_asset_t *a = rq->seg ? webui_find(rq->seg, rq->seg_len) : NULL;
	if (!a || strcmp(a->name, "index.html") == 0)
		return request_problem(rq, 404, "no such dashboard file", NULL);
	return serve(rq, a);
}
