/*
 * rest: the HTTP side of ringctl. A small wrapper over one libcurl easy handle
 * that sends a request to the coordinator's REST API and hands back the status,
 * the content type and the whole body. It knows nothing about jobs or JSON;
 * commands.c turns responses into tables and report.c turns errors into one
 * line for stderr.
 */
#ifndef RINGCTL_REST_H
#define RINGCTL_REST_H

#include <stddef.h>

/* Largest response body accepted; a longer one fails with REST_ERR_TOO_BIG. */
#define REST_MAX_BODY_BYTES ((size_t)64 << 20)

typedef enum {
	REST_OK = 0,
	REST_ERR_UNREACHABLE = -1, /* no HTTP answer: refused, DNS, timeout, reset */
	REST_ERR_BAD_URL = -2,     /* the server URL cannot be used (scheme, syntax) */
	REST_ERR_NOMEM = -3,
	REST_ERR_TOO_BIG = -4, /* response larger than REST_MAX_BODY_BYTES */
	REST_ERR_TLS = -5,     /* https: the server's certificate is not trusted, or the handshake failed */
} rest_result_t;

typedef struct rest_client rest_client_t;

typedef struct {
	long status;        /* HTTP status code */
	char *content_type; /* NULL when the server sent none */
	char *body;         /* NUL-terminated; body_bytes excludes the NUL */
	size_t body_bytes;
} rest_response_t;

/*
 * Makes a client for the server at base_url ("http://host:port", trailing
 * slashes ignored). token, when not NULL, is sent as "Authorization: Bearer".
 * Both strings are copied. Returns NULL when out of memory or when libcurl
 * cannot be initialised. curl_global_init() must have been called.
 */
rest_client_t *rest_client_new(const char *base_url, const char *token);

/*
 * Trust the CA certificate(s) in the PEM file `path` (copied) for https
 * servers, instead of the system's store (libcurl's CURLOPT_CAINFO); NULL
 * goes back to the system's. Returns 0, or REST_ERR_NOMEM.
 */
int rest_client_set_cacert(rest_client_t *client, const char *path);

/* Frees the client; NULL is fine. */
void rest_client_free(rest_client_t *client);

/*
 * Sends METHOD base_url+path. path starts with '/' and must already be
 * escaped (see rest_client_escape). body may be NULL (no body); a non-NULL body
 * is sent with Content-Type: application/json. idempotency_key, when not NULL,
 * is sent as the Idempotency-Key header.
 *
 * On REST_OK, *ret_response holds the answer, whatever its status; release it
 * with rest_response_clear(). On failure *ret_response is left untouched and
 * rest_client_error() / rest_client_last_url() describe what went wrong.
 */
rest_result_t rest_client_request(rest_client_t *client, const char *method, const char *path,
                                  const char *body, size_t body_bytes, const char *idempotency_key,
                                  rest_response_t *ret_response);

/* The text of the last failure (libcurl's message); never NULL. Borrowed. */
const char *rest_client_error(const rest_client_t *client);

/* The full URL of the last request; "" before the first. Borrowed. */
const char *rest_client_last_url(const rest_client_t *client);

/*
 * Percent-encodes s for use as one path segment or query value. Returns a
 * string the caller frees with free(), or NULL when out of memory.
 */
char *rest_client_escape(rest_client_t *client, const char *s);

/* Frees what a response holds and zeroes it; a zeroed response is fine. */
void rest_response_clear(rest_response_t *response);

#endif
