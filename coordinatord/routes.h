/*
 * routes: the REST API's route table, the one place a route is written down.
 *
 * Each row is one method on one path template ("/v1/jobs/{id}/cancel"; a
 * {name} segment matches one non-empty path segment), its handler, the label
 * its requests are counted under in /metrics, the permission it needs and how
 * its body is read. Everything else derives from the table: matching (404
 * when no row has the path, 405 with Allow listing the rows' methods when
 * none has the method), the metrics labels, `ringmasterd --print-routes`
 * (which the OpenAPI agreement test and the 405 test read) and the handler
 * dispatch in http.c.
 *
 * To add a route: write its handler (jobapi.c for job routes, opsapi.c for
 * the rest, or a new module), add a row to s_routes in routes.c, and describe
 * it in api/openapi.yaml; the tests check the other two places agree.
 */
#ifndef RINGMASTER_COORDINATORD_ROUTES_H
#define RINGMASTER_COORDINATORD_ROUTES_H

#include <stddef.h>

#include "metrics.h"
#include "request.h"

/* What a caller must hold to use a route (auth.h): nothing, or at least a
 * role. /metrics is its own case: a token, or a loopback caller, as
 * configured. */
typedef enum {
	ROUTE_PERM_PUBLIC = 0, /* anyone: /healthz, /readyz, the dashboard's page and assets */
	ROUTE_PERM_VIEWER,     /* every other GET and the streams */
	ROUTE_PERM_OPERATOR,   /* submit and cancel */
	ROUTE_PERM_ADMIN,      /* tokens and workers' enrollment */
	ROUTE_PERM_METRICS,    /* /metrics: see config.h's metrics_auth */
} route_perm_t;

/* How http.c reads the body of a request to the route. */
typedef enum {
	ROUTE_BODY_NONE = 0, /* any body is read and discarded */
	ROUTE_BODY_JSON,     /* application/json up to max_body_bytes, with an optional Idempotency-Key */
} route_body_t;

typedef enum MHD_Result (*route_handler_t)(request_t *rq);

typedef struct {
	metrics_method_t method;
	const char *path;  /* template */
	route_handler_t handler;
	const char *label; /* metrics label: the template */
	route_perm_t perm;
	route_body_t body;
} route_t;

/* The label of requests no route serves (the last metrics label). */
#define ROUTE_UNMATCHED_LABEL "unmatched"

/* The table, *ret_n rows (static, borrowed). */
const route_t *route_table(size_t *ret_n);

/*
 * Build the derived tables (labels, Allow lists) and return the metrics
 * labels, *ret_n of them, ROUTE_UNMATCHED_LABEL last (static, borrowed).
 * Call once before serving.
 */
const char *const *route_init(int *ret_n);

/*
 * Match `url` and `method`. Returns the row when one serves both. Otherwise
 * NULL, with rq->label, rq->path and rq->allow set: rq->allow is NULL when no
 * row has the path (404) and the path's methods ("GET, POST") when none has
 * the method (405). On a match of a path with an {id} segment, rq->seg and
 * rq->seg_len point into `url` and rq->id holds a copy when it fits.
 */
const route_t *route_match(const char *url, metrics_method_t method, request_t *rq);

/* "GET", "POST", ... for a method of the table. */
const char *route_method_name(metrics_method_t method);

#endif
