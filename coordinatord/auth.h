/*
 * auth: who is calling the REST API, and what they may do.
 *
 * A caller is a principal: the role of the credential it presented (an API
 * token in "Authorization: Bearer", or the dashboard's session cookie) and
 * that credential's name, which jobs and events record as their submitter or
 * canceller. Roles are ordered: a viewer reads (every GET and stream), an
 * operator also submits and cancels, an admin also manages tokens and
 * workers. http.c authenticates each request into request_t.who before its
 * route's permission (routes.h) is checked.
 */
#ifndef RINGMASTER_COORDINATORD_AUTH_H
#define RINGMASTER_COORDINATORD_AUTH_H

#include <stdbool.h>
#include <stdint.h>

/* A token's or a session's name: [A-Za-z0-9._@-], 1 .. 64 bytes. */
#define AUTH_NAME_MAX 64

typedef enum {
	AUTH_ROLE_NONE = 0, /* not authenticated */
	AUTH_ROLE_VIEWER,
	AUTH_ROLE_OPERATOR,
	AUTH_ROLE_ADMIN,
} auth_role_t;

/* How the principal was authenticated. */
typedef enum {
	AUTH_VIA_NONE = 0, /* nothing presented (or nothing valid) */
	AUTH_VIA_TOKEN,    /* Authorization: Bearer */
	AUTH_VIA_COOKIE,   /* the dashboard's session cookie */
	AUTH_VIA_OFF,      /* --auth off: every caller is an anonymous admin */
} auth_via_t;

typedef struct {
	auth_role_t role;
	auth_via_t via;
	int64_t token_id;              /* the token's row (or the session's token's); 0 when none */
	char name[AUTH_NAME_MAX + 1];  /* "" when not authenticated */
} auth_principal_t;

#endif
