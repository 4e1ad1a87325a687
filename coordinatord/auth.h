/*
 * auth: who is calling the REST API, and what they may do.
 *
 * A caller is a principal: the role of the credential it presented (an API
 * token in "Authorization: Bearer", or the dashboard's session cookie) and
 * that credential's name, which jobs and events record as their submitter or
 * canceller. Roles are ordered: a viewer reads (every GET and stream), an
 * operator also submits and cancels, an admin also manages tokens and
 * workers. authz.c (from http.c's dispatch) authenticates each request into
 * request_t.who with the functions here, then checks its route's permission
 * (routes.h).
 */
#ifndef RINGMASTER_COORDINATORD_AUTH_H
#define RINGMASTER_COORDINATORD_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "config.h"
#include "store.h"

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

/* A token: "rmt_" + base64url without padding of 32 random bytes (43
 * characters); AUTH_TOKEN_BYTES holds it with its NUL. */
#define AUTH_TOKEN_PREFIX "rmt_"
#define AUTH_TOKEN_LEN 47
#define AUTH_TOKEN_BYTES (AUTH_TOKEN_LEN + 1)
/* The characters of a token shown in listings (its prefix). */
#define AUTH_TOKEN_DISPLAY_LEN 12
/* The first admin token's file, beside the database. */
#define AUTH_ADMIN_TOKEN_FILE "admin.token"

/* "viewer", "operator", "admin"; "none" for AUTH_ROLE_NONE. Static. */
const char *auth_role_name(auth_role_t role);
/* A role's name to the role: 0, or -EINVAL for anything else. */
int auth_role_parse(const char *name, auth_role_t *ret_role);
/* Whether `name` is a valid token name (see AUTH_NAME_MAX). */
bool auth_name_valid(const char *name);

/* A fresh token (randombytes_buf) and its stored form: the hash of the
 * whole string (crypto_generichash, 32 bytes) and its display prefix. */
void auth_token_make(char ret_token[AUTH_TOKEN_BYTES]);
void auth_token_hash(const char *token, size_t len, unsigned char ret_hash[32]);

/*
 * The module's settings, from the configuration (auth on or off). Call
 * once before serving; auth_enabled() then tells whether tokens are needed.
 */
void auth_init(const config_t *cfg);
bool auth_enabled(void);

/*
 * The credential of an "Authorization" header value: "Bearer TOKEN" (the
 * scheme in any case, one or more spaces). Returns a pointer into `header`
 * and its length in *ret_len, or NULL when the header is not a bearer
 * credential.
 */
const char *auth_bearer(const char *header, size_t *ret_len);

/*
 * Authenticate a presented token (`len` bytes, not NUL-terminated) with the
 * thread's reader store `reader`: its hash is looked up (and compared with
 * sodium_memcmp), an expired or revoked token refused. A short-lived
 * in-memory cache of hash -> principal saves the lookup; auth_forget_token
 * empties it for a token at once. 0 and *ret_who (role, via TOKEN, name,
 * token_id), *ret_expires_at_us (0: never) and *ret_touch (true at most once a minute per token: the caller
 * records the use with the writer); -EACCES with why (for the 401: "the
 * token has expired", never the token) or -EIO when the store failed.
 */
int auth_token_check(store_t *reader, const char *token, size_t len, auth_principal_t *ret_who, bool *ret_touch,
                     int64_t *ret_expires_at_us, char *why, size_t whylen);

/* Forget every cached authentication of token `id` (call once its
 * revocation is committed: the next request with it reads the store). */
void auth_forget_token(int64_t id);

/* Whether an address is loopback (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104). */
bool auth_addr_is_loopback(const struct sockaddr *sa);

/*
 * At start, before serving: refuse `--auth off` unless every address the
 * listen host resolves to is loopback or --insecure is given (then a
 * warning is logged). 0, or -EPERM with a message saying why in `err`.
 */
int auth_check_exposure(const config_t *cfg, char *err, size_t errlen);

/*
 * At start, once the broker loop runs: when the database has no token yet,
 * make an admin token named "admin", write it to <db folder>/admin.token
 * (0600, O_EXCL|O_NOFOLLOW) and store its hash through the writer loop
 * (zctx: the broker's ZeroMQ context). Every start logs the file's path,
 * never the token. 0, or a negative errno with a message in `err`.
 */
int auth_bootstrap(const config_t *cfg, void *zctx, char *err, size_t errlen);

#endif
