/*
 * httpparse: header value checks (see httpparse.h).
 */
#include "httpparse.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define JSON_TYPE "application/json"

bool httpparse_json_type(const char *ct)
{
	if (!ct)
		return false;
	while (*ct == ' ' || *ct == '\t')
		ct++;
	size_t n = strlen(JSON_TYPE);
	if (strncasecmp(ct, JSON_TYPE, n) != 0)
		return false;
	ct += n;
	while (*ct == ' ' || *ct == '\t')
		ct++;
	return *ct == '\0' || *ct == ';';
}

bool httpparse_idem_key(const char *key)
{
	if (!key)
		return false;
	size_t n = strlen(key);
	if (n < 1 || n > HTTPPARSE_IDEM_KEY_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (key[i] < 0x20 || key[i] > 0x7e)
			return false;
	return true;
}

int httpparse_content_length(const char *text, size_t max_bytes)
{
	char *end;
	errno = 0;
	unsigned long long n = strtoull(text, &end, 10);
	if (errno || end == text || n > max_bytes)
		return -EFBIG;
	return 0;
}
