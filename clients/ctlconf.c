/*
 * ctlconf: ringctl's config file and token file (see ctlconf.h).
 */
#include "ctlconf.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
		s[--n] = '\0';
	return s;
}

static void config_path(char *out, size_t outlen)
{
	const char *explicit_path = getenv("RINGCTL_CONFIG");
	const char *xdg = getenv("XDG_CONFIG_HOME");
	const char *home = getenv("HOME");
	if (explicit_path && explicit_path[0])
		snprintf(out, outlen, "%s", explicit_path);
	else if (xdg && xdg[0])
		snprintf(out, outlen, "%s/ringmaster/ringctl.conf", xdg);
	else if (home && home[0])
		snprintf(out, outlen, "%s/.config/ringmaster/ringctl.conf", home);
	else
		out[0] = '\0';
}

/* One "key = value" line into ret: 0, or -1 with the message. */
static int take_line(ctlconf_t *ret, char *line, int lineno, char *err, size_t errlen)
{
	char *eq = strchr(line, '=');
	if (!eq) {
		snprintf(err, errlen, "%s:%d: expected \"key = value\" (keys: server, token, cacert)", ret->path, lineno);
		return -1;
	}
	*eq = '\0';
	char *key = trim(line), *value = trim(eq + 1);
	char *field = NULL;
	size_t size = 0;
	if (strcmp(key, "server") == 0) {
		field = ret->server;
		size = sizeof ret->server;
	} else if (strcmp(key, "token") == 0) {
		field = ret->token;
		size = sizeof ret->token;
	} else if (strcmp(key, "cacert") == 0) {
		field = ret->cacert;
		size = sizeof ret->cacert;
	} else {
		snprintf(err, errlen, "%s:%d: unknown key \"%.64s\" (keys: server, token, cacert)", ret->path, lineno, key);
		return -1;
	}
	if (strlen(value) >= size) {
		snprintf(err, errlen, "%s:%d: the value of %s is too long", ret->path, lineno, key);
		return -1;
	}
	memcpy(field, value, strlen(value) + 1);
	return 0;
}

int ctlconf_load(ctlconf_t *ret, char *err, size_t errlen)
{
	memset(ret, 0, sizeof *ret);
	config_path(ret->path, sizeof ret->path);
	if (!ret->path[0])
		return 0;
	FILE *f = fopen(ret->path, "r");
	if (!f) {
		if (errno == ENOENT) {
			ret->path[0] = '\0';
			return 0;
		}
		snprintf(err, errlen, "cannot read %s: %s", ret->path, strerror(errno));
		return -1;
	}
	char buf[8192];
	int lineno = 0, r = 0;
	while (r == 0 && fgets(buf, sizeof buf, f)) {
		lineno++;
		char *hash = strchr(buf, '#');
		if (hash)
			*hash = '\0';
		char *line = trim(buf);
		if (!line[0] || line[0] == '[')
			continue;
		r = take_line(ret, line, lineno, err, errlen);
	}
	fclose(f);
	return r;
}

int ctlconf_read_token_file(const char *path, char *out, size_t outlen)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char buf[512];
	bool got = fgets(buf, sizeof buf, f) != NULL;
	fclose(f);
	if (!got)
		return -1;
	char *t = trim(buf);
	if (!t[0] || strlen(t) >= outlen)
		return -1;
	memcpy(out, t, strlen(t) + 1);
	return 0;
}
