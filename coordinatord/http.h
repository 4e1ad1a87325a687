/*
 * http: the REST API (v1), served by libmicrohttpd's internal thread pool.
 *
 * The routes are listed once, in routes.c's table (routes.h): method, path
 * template, handler (jobapi.c, opsapi.c), metrics label and permission.
 * `ringmasterd --print-routes` prints it; the tests compare it with
 * api/openapi.yaml and send every route every method it does not allow.
 *
 * Each handler thread lazily opens its own reader store_t and broker client
 * (thread-local, never shared) and keeps one reusable response buffer, so the
 * GET path allocates little. Reads go straight to SQLite; mutations go to the
 * broker loop. Errors are application/problem+json (problem.h).
 */
#ifndef RINGMASTER_COORDINATORD_HTTP_H
#define RINGMASTER_COORDINATORD_HTTP_H

#include <stddef.h>
#include <stdio.h>

#include "config.h"

typedef struct http http_t;

/*
 * Bind cfg's listen address and start serving with cfg->http_threads
 * threads. `zctx` (borrowed) is the ZeroMQ context of the broker loop;
 * `db_path` the database the reader connections open. Returns NULL with one
 * line in `err` (for example "cannot listen on 127.0.0.1:8080: Address
 * already in use").
 */
http_t *http_new(const config_t *cfg, void *zctx, char *err, size_t errlen);

/*
 * Stop accepting connections, let requests in flight finish (up to
 * `grace_ms`), stop the threads, and close every thread's reader store and
 * broker client. Accepts NULL. Safe to call once; http_free calls it.
 */
void http_stop(http_t *h, int grace_ms);
void http_free(http_t *h);

#endif
