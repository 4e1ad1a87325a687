/*
 * rest: one libcurl easy handle reused for every request of a ringctl run,
 * so that `jobs --all` keeps its connection open across pages. Redirects are
 * not followed and only http/https URLs are allowed: ringctl talks to one
 * coordinator and should say so plainly when the URL points elsewhere.
 */
#include "rest.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#define CONNECT_TIMEOUT_MS 5000L
#define TOTAL_TIMEOUT_MS 60000L

struct rest_client {
	CURL *curl;
	char *base_url;
	char *auth_header; /* "Authorization: Bearer ..." or NULL */
	char *last_url;
	char *cacert; /* CURLOPT_CAINFO, or NULL: the system's store */
	char error[CURL_ERROR_SIZE];
};

typedef struct {
	char *data;
	size_t n_bytes;
	size_t cap_bytes;
	bool too_big;
} growbuf_t;

rest_client_t *rest_client_new(const char *base_url, const char *token)
{
	rest_client_t *client = calloc(1, sizeof *client);
	if (!client)
		return NULL;
	size_t n = strlen(base_url);
	while (n > 0 && base_url[n - 1] == '/')
		n--;
	client->base_url = strndup(base_url, n);
	if (!client->base_url)
		goto fail;
	if (token) {
		size_t len = strlen("Authorization: Bearer ") + strlen(token) + 1;
		client->auth_header = malloc(len);
		if (!client->auth_header)
			goto fail;
		snprintf(client->auth_header, len, "Authorization: Bearer %s", token);
	}
	client->curl = curl_easy_init();
	if (!client->curl)
		goto fail;
	return client;
fail:
	rest_client_free(client);
	return NULL;
}

void rest_client_free(rest_client_t *client)
{
	if (!client)
		return;
	if (client->curl)
		curl_easy_cleanup(client->curl);
	free(client->base_url);
	free(client->auth_header);
	free(client->last_url);
	free(client->cacert);
	free(client);
}

int rest_client_set_cacert(rest_client_t *client, const char *path)
{
	char *copy = NULL;
	if (path && !(copy = strdup(path)))
		return REST_ERR_NOMEM;
	free(client->cacert);
	client->cacert = copy;
	return 0;
}

const char *rest_client_error(const rest_client_t *client)
{
	return client->error;
}

const char *rest_client_last_url(const rest_client_t *client)
{
	return client->last_url ? client->last_url : "";
}

char *rest_client_escape(rest_client_t *client, const char *s)
{
	char *escaped = curl_easy_escape(client->curl, s, 0);
	if (!escaped)
		return NULL;
	char *copy = strdup(escaped); /* so callers free() rather than curl_free() */
	curl_free(escaped);
	return copy;
}

void rest_response_clear(rest_response_t *response)
{
	free(response->content_type);
	free(response->body);
	memset(response, 0, sizeof *response);
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	growbuf_t *buf = userdata;
	size_t n = size * nmemb;
	if (n > REST_MAX_BODY_BYTES - buf->n_bytes) {
		buf->too_big = true;
		return 0; /* makes libcurl stop with CURLE_WRITE_ERROR */
	}
	if (buf->n_bytes + n + 1 > buf->cap_bytes) {
		size_t cap = buf->cap_bytes ? buf->cap_bytes : 4096;
		while (cap < buf->n_bytes + n + 1)
			cap *= 2;
		char *data = realloc(buf->data, cap);
		if (!data)
			return 0;
		buf->data = data;
		buf->cap_bytes = cap;
	}
	memcpy(buf->data + buf->n_bytes, ptr, n);
	buf->n_bytes += n;
	buf->data[buf->n_bytes] = '\0';
	return n;
}

static rest_result_t classify(CURLcode rc, const growbuf_t *buf)
{
	switch (rc) {
	case CURLE_URL_MALFORMAT:
	case CURLE_UNSUPPORTED_PROTOCOL:
		return REST_ERR_BAD_URL;
	case CURLE_OUT_OF_MEMORY:
		return REST_ERR_NOMEM;
	case CURLE_WRITE_ERROR:
		return buf->too_big ? REST_ERR_TOO_BIG : REST_ERR_NOMEM;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_ISSUER_ERROR:
		return REST_ERR_TLS;
	default:
		return REST_ERR_UNREACHABLE;
	}
}

rest_result_t rest_client_request(rest_client_t *client, const char *method, const char *path,
                                  const char *body, size_t body_bytes, const char *idempotency_key,
                                  rest_response_t *ret_response)
{
	CURL *curl = client->curl;
	rest_result_t result = REST_ERR_NOMEM;
	struct curl_slist *headers = NULL;
	char *idem_header = NULL;
	growbuf_t buf = {0};

	client->error[0] = '\0';
	size_t url_len = strlen(client->base_url) + strlen(path) + 1;
	char *url = malloc(url_len);
	if (!url) {
		snprintf(client->error, sizeof client->error, "out of memory");
		return REST_ERR_NOMEM;
	}
	snprintf(url, url_len, "%s%s", client->base_url, path);
	free(client->last_url);
	client->last_url = url;

	curl_easy_reset(curl);
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, client->error);
	curl_easy_setopt(curl, CURLOPT_URL, url);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
#else
	curl_easy_setopt(curl, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, TOTAL_TIMEOUT_MS);
	curl_easy_setopt(curl, CURLOPT_USERAGENT, "ringctl/" RINGMASTER_VERSION);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, &buf);
	if (client->cacert)
		curl_easy_setopt(curl, CURLOPT_CAINFO, client->cacert);

	struct curl_slist *h = curl_slist_append(headers, "Accept: application/json, application/problem+json");
	if (!h)
		goto out;
	headers = h;
	if (client->auth_header) {
		if (!(h = curl_slist_append(headers, client->auth_header)))
			goto out;
		headers = h;
	}
	if (idempotency_key) {
		size_t len = strlen("Idempotency-Key: ") + strlen(idempotency_key) + 1;
		if (!(idem_header = malloc(len)))
			goto out;
		snprintf(idem_header, len, "Idempotency-Key: %s", idempotency_key);
		if (!(h = curl_slist_append(headers, idem_header)))
			goto out;
		headers = h;
	}
	if (body) {
		if (!(h = curl_slist_append(headers, "Content-Type: application/json")))
			goto out;
		headers = h;
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_bytes);
		/* No "Expect: 100-continue" round trip for big specs. */
		if (!(h = curl_slist_append(headers, "Expect:")))
			goto out;
		headers = h;
	} else if (strcmp(method, "POST") == 0) {
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, "");
		curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, 0L);
	}
	if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0)
		curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);

	CURLcode rc = curl_easy_perform(curl);
	if (rc != CURLE_OK) {
		result = classify(rc, &buf);
		if (!client->error[0])
			snprintf(client->error, sizeof client->error, "%s", curl_easy_strerror(rc));
		if (result == REST_ERR_TOO_BIG)
			snprintf(client->error, sizeof client->error,
			         "response larger than %zu bytes", REST_MAX_BODY_BYTES);
		goto out;
	}

	rest_response_t response = {0};
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
	char *ct = NULL;
	curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &ct);
	if (ct && !(response.content_type = strdup(ct)))
		goto out;
	if (!buf.data && !(buf.data = calloc(1, 1))) {
		free(response.content_type);
		goto out;
	}
	response.body = buf.data;
	response.body_bytes = buf.n_bytes;
	buf.data = NULL;
	*ret_response = response;
	result = REST_OK;
out:
	if (result == REST_ERR_NOMEM && !client->error[0])
		snprintf(client->error, sizeof client->error, "out of memory");
	/* The handle keeps pointers to these until the next reset. */
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, NULL);
	curl_slist_free_all(headers);
	free(idem_header);
	free(buf.data);
	return result;
}
