/*
 * session: the dashboard's sessions and one-time login codes, in memory.
 *
 * A browser exchanges an API token (or a one-time code from `ringctl
 * dashboard`) for a session (POST /v1/session, sessionapi.c): a random id
 * sent back as the HttpOnly cookie rm_session, and a random CSRF token the
 * page sends in X-CSRF-Token with every state-changing request. A session
 * carries the principal of the token it came from; it ends after
 * SESSION_IDLE_US without use, at logout, when its token expires or is
 * revoked (session_forget_token), and when the daemon stops (sessions are
 * not stored). A login code is 60 s long and good once.
 *
 * Ids, CSRF tokens and codes are 32 random bytes (randombytes_buf) in
 * base64url; they are compared with sodium_memcmp. One mutex guards the
 * tables; each lookup is a scan of at most SESSION_MAX entries.
 */
#ifndef RINGMASTER_COORDINATORD_SESSION_H
#define RINGMASTER_COORDINATORD_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"

#define SESSION_COOKIE "rm_session"
#define SESSION_SECRET_LEN 43 /* base64url of 32 bytes */
#define SESSION_SECRET_BYTES (SESSION_SECRET_LEN + 1)
#define SESSION_CODE_PREFIX "rmc_"
#define SESSION_CODE_BYTES (4 + SESSION_SECRET_BYTES)
#define SESSION_IDLE_US (12LL * 3600 * 1000000)
#define SESSION_CODE_US (60LL * 1000000)
#define SESSION_MAX 4096
#define SESSION_CODES_MAX 256

/*
 * A new session for `who` (its token expiring at token_expires_at_us, wall
 * clock, 0 never): its id and csrf. When the table is full the session idle
 * longest is dropped. 0 or -ENOMEM.
 */
int session_create(const auth_principal_t *who, int64_t token_expires_at_us, char ret_id[SESSION_SECRET_BYTES],
                   char ret_csrf[SESSION_SECRET_BYTES]);

/*
 * The live session whose id is the `len` bytes at `id`: 0 with *ret_who
 * (via COOKIE) and its csrf (may be NULL), its idle time restarted; -ENOENT
 * when none (unknown, idle too long, or its token expired).
 */
int session_lookup(const char *id, size_t len, auth_principal_t *ret_who, char ret_csrf[SESSION_SECRET_BYTES]);

/* End the session whose id is `id` (`len` bytes); nothing when none. */
void session_destroy(const char *id, size_t len);

/* End every session and code made from token `token_id` (revoked). */
void session_forget_token(int64_t token_id);

/* A one-time login code for `who`, good for SESSION_CODE_US. 0 or -ENOMEM. */
int session_code_create(const auth_principal_t *who, int64_t token_expires_at_us,
                        char ret_code[SESSION_CODE_BYTES]);

/* Use a code (`len` bytes): 0 with *ret_who and its token's expiry, the code
 * gone; -ENOENT when unknown, used or expired. */
int session_code_redeem(const char *code, size_t len, auth_principal_t *ret_who, int64_t *ret_token_expires_at_us);

#endif
