/*
 * webui: the dashboard's routes. GET / answers the dashboard's index.html
 * and GET /assets/{name} its scripts, styles, uPlot (with its license
 * notice) and the default job spec, all embedded in the binary at build time
 * by scripts/embed_assets.py (coordinatord/meson.build), so nothing is
 * installed beside the daemon and the browser fetches nothing from elsewhere.
 *
 * Every answer carries a strong ETag (If-None-Match answers 304),
 * Cache-Control: no-cache (the browser revalidates, so a new daemon's files
 * show at once), a Content-Security-Policy allowing only this origin, and
 * X-Content-Type-Options: nosniff.
 */
#ifndef RINGMASTER_COORDINATORD_WEBUI_H
#define RINGMASTER_COORDINATORD_WEBUI_H

#include <stddef.h>

#include "request.h"

/* One embedded file (the generated webui_assets.c defines the table). */
typedef struct {
	const char *name;  /* as served under /assets/ ("app.js") */
	const char *ctype; /* Content-Type */
	const char *etag;  /* quoted strong ETag */
	const unsigned char *data;
	size_t len;
} webui_asset_t;

extern const webui_asset_t webui_assets[];
extern const size_t webui_n_assets;

/* The Content-Security-Policy of every dashboard answer. */
#define WEBUI_CSP                                                                                        \
	"default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; " \
	"frame-ancestors 'none'; form-action 'self'"

/* The embedded file called `name` (len bytes, need not be NUL-terminated);
 * NULL when there is none. */
const webui_asset_t *webui_find(const char *name, size_t len);

/* GET /: index.html. */
enum MHD_Result webui_index(request_t *rq);
/* GET /assets/{name}: the embedded file, or 404 problem+json; routes.json
 * is the route table ({"routes": [{"method", "path"}, ...]}). */
enum MHD_Result webui_asset(request_t *rq);

#endif
