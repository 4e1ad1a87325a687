/*
 * commands_tokens: the token and dashboard commands (see
 * commands_tokens.h). The token itself is printed once, by `token create`,
 * with a warning to store it: the server keeps only its hash.
 */
#include "commands_tokens.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "commands_common.h"
#include "table.h"

#define TOKEN_USAGE "create --name NAME --role viewer|operator|admin [--expires 30d] | list | revoke NAME|ID"

int cmd_parse_duration(const char *text, long long *ret_s)
{
	if (text[0] < '0' || text[0] > '9')
		return -1;
	char *end;
	errno = 0;
	long long n = strtoll(text, &end, 10);
	if (errno || end == text || n <= 0)
		return -1;
	long long unit = 1;
	if (*end == 'd')
		unit = 86400;
	else if (*end == 'h')
		unit = 3600;
	else if (*end == 'm')
		unit = 60;
	else if (*end != 's' && *end != '\0')
		return -1;
	if (*end && end[1])
		return -1;
	if (n > 3660LL * 86400 / unit)
		return -1;
	*ret_s = n * unit;
	return 0;
}

typedef struct {
	const char *name, *role, *expires;
} token_opts_t;

/* The global options and --name/--role/--expires: 0 with argv[*ret_first..]
 * left, or -1 with *ret_exit. */
static int parse(cmd_ctx_t *ctx, int argc, char **argv, token_opts_t *o, const char *usage, int *ret_first,
                 int *ret_exit)
{
	enum { O_NAME = 2000, O_ROLE, O_EXPIRES };
	static const struct option long_opts[] = {
		COMMON_LONG_OPTS,
		{"name", required_argument, NULL, O_NAME},
		{"role", required_argument, NULL, O_ROLE},
		{"expires", required_argument, NULL, O_EXPIRES},
		{0, 0, 0, 0},
	};
	optind = 0;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
		switch (c) {
		case OPT_JSON: ctx->json = true; break;
		case OPT_SERVER: ctx->server = optarg; break;
		case O_NAME: o->name = optarg; break;
		case O_ROLE: o->role = optarg; break;
		case O_EXPIRES: o->expires = optarg; break;
		case 'h':
		case OPT_HELP:
			printf("Usage: ringctl %s %s\n", argv[0], usage);
			*ret_exit = CTL_EXIT_OK;
			return -1;
		case ':':
			*ret_exit = cmd_usage_error(argv[0], usage, "option needs a value: %s", argv[optind - 1]);
			return -1;
		default:
			*ret_exit = cmd_usage_error(argv[0], usage, "unknown option: %s", argv[optind - 1]);
			return -1;
		}
	}
	*ret_first = optind;
	return 0;
}

static int token_create(cmd_ctx_t *ctx, const token_opts_t *o)
{
	if (!o->name || !o->role)
		return cmd_usage_error("token", TOKEN_USAGE, "token create needs --name and --role%s", "");
	long long expires_s = 0;
	if (o->expires && cmd_parse_duration(o->expires, &expires_s) < 0)
		return cmd_usage_error("token", TOKEN_USAGE,
		                       "--expires must be a duration such as 30d, 12h, 90m or 3600 (got \"%s\")", o->expires);
	json_t *body = json_pack("{ss ss}", "name", o->name, "role", o->role);
	if (body && expires_s)
		json_object_set_new(body, "expires_in_s", json_integer(expires_s));
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!text)
		return cmd_out_of_memory();
	rest_response_t response;
	json_t *doc;
	int status = cmd_request_json(ctx, "POST", "/v1/tokens", text, strlen(text), NULL, &response, &doc);
	free(text);
	if (status != CTL_EXIT_OK)
		return status;
	if (ctx->json) {
		cmd_print_raw(&response);
	} else {
		char b1[128], b2[128], b3[64], b4[64];
		printf("%s\n", cmd_or_empty(cmd_field_text(doc, "token", b1, sizeof b1)));
		fprintf(stderr,
		        "ringctl: token \"%s\" (%s, expires %s) created. Store it now: it is shown only this once and the "
		        "server keeps only its hash.\n",
		        cmd_or_dash(cmd_field_text(doc, "name", b2, sizeof b2)),
		        cmd_or_dash(cmd_field_text(doc, "role", b3, sizeof b3)),
		        json_is_string(json_object_get(doc, "expires_at")) ? cmd_field_text(doc, "expires_at", b4, sizeof b4)
		                                                           : "never");
	}
	json_decref(doc);
	rest_response_clear(&response);
	return CTL_EXIT_OK;
}

static int token_list(cmd_ctx_t *ctx)
{
	rest_response_t response;
	json_t *doc;
	int status = cmd_request_json(ctx, "GET", "/v1/tokens", NULL, 0, NULL, &response, &doc);
	if (status != CTL_EXIT_OK)
		return status;
	if (ctx->json) {
		cmd_print_raw(&response);
		json_decref(doc);
		rest_response_clear(&response);
		return CTL_EXIT_OK;
	}
	static const char *const headers[] = {"ID", "NAME", "ROLE", "PREFIX", "CREATED", "EXPIRES", "LAST USED", "REVOKED"};
	static const char *const keys[] = {"id", "name", "role", "prefix", "created_at", "expires_at", "last_used_at",
	                                   "revoked_at"};
	table_t *t = table_new(8, headers);
	size_t i;
	json_t *tok;
	json_array_foreach(json_object_get(doc, "tokens"), i, tok) {
		char buf[8][128];
		const char *cells[8];
		for (int k = 0; k < 8; k++) {
			const char *v = cmd_field_text(tok, keys[k], buf[k], sizeof buf[k]);
			if (v && k >= 4) {
				char shortbuf[64];
				v = cmd_short_time(v, shortbuf, sizeof shortbuf);
				snprintf(buf[k], sizeof buf[k], "%s", v ? v : "-");
				v = buf[k];
			}
			cells[k] = cmd_or_dash(v);
		}
		if (t)
			table_add_row(t, cells);
	}
	if (t) {
		table_print(t, stdout);
		table_free(t);
	}
	json_decref(doc);
	rest_response_clear(&response);
	return t ? CTL_EXIT_OK : cmd_out_of_memory();
}

/* The id of the unrevoked token named or numbered `which`: 0, or the exit. */
static int find_token(cmd_ctx_t *ctx, const char *which, long long *ret_id)
{
	rest_response_t response;
	json_t *doc;
	int status = cmd_request_json(ctx, "GET", "/v1/tokens", NULL, 0, NULL, &response, &doc);
	if (status != CTL_EXIT_OK)
		return status;
	long long found = 0;
	size_t i;
	json_t *tok;
	json_array_foreach(json_object_get(doc, "tokens"), i, tok) {
		const char *name = json_string_value(json_object_get(tok, "name"));
		long long id = json_integer_value(json_object_get(tok, "id"));
		char idtext[32];
		snprintf(idtext, sizeof idtext, "%lld", id);
		bool live = json_is_null(json_object_get(tok, "revoked_at"));
		if (strcmp(idtext, which) == 0 || (live && name && strcmp(name, which) == 0))
			found = id;
	}
	json_decref(doc);
	rest_response_clear(&response);
	if (!found) {
		char *safe = table_sanitize(which, 64);
		fprintf(stderr, "ringctl: no token named or numbered \"%s\" that is not revoked ('ringctl token list')\n",
		        safe ? safe : "?");
		free(safe);
		return CTL_EXIT_FAILED;
	}
	*ret_id = found;
	return CTL_EXIT_OK;
}

static int token_revoke(cmd_ctx_t *ctx, const char *which)
{
	long long id = 0;
	int status = find_token(ctx, which, &id);
	if (status != CTL_EXIT_OK)
		return status;
	char path[64];
	snprintf(path, sizeof path, "/v1/tokens/%lld/revoke", id);
	rest_response_t response;
	json_t *doc;
	status = cmd_request_json(ctx, "POST", path, NULL, 0, NULL, &response, &doc);
	if (status != CTL_EXIT_OK)
		return status;
	if (ctx->json) {
		cmd_print_raw(&response);
	} else {
		char b[128];
		char *safe = table_sanitize(cmd_or_dash(cmd_field_text(doc, "name", b, sizeof b)), 64);
		printf("token %lld (%s) revoked\n", id, safe ? safe : "-");
		free(safe);
	}
	json_decref(doc);
	rest_response_clear(&response);
	return CTL_EXIT_OK;
}

int cmd_run_token(cmd_ctx_t *ctx, int argc, char **argv)
{
	token_opts_t o = {0};
	int first = 0, status = CTL_EXIT_OK;
	if (parse(ctx, argc, argv, &o, TOKEN_USAGE, &first, &status) < 0)
		return status;
	if (first >= argc)
		return cmd_usage_error("token", TOKEN_USAGE, "token needs a subcommand: create, list or revoke%s", "");
	const char *sub = argv[first];
	int n_args = argc - first - 1;
	if (strcmp(sub, "create") == 0 && n_args == 0)
		return token_create(ctx, &o);
	if (strcmp(sub, "list") == 0 && n_args == 0)
		return token_list(ctx);
	if (strcmp(sub, "revoke") == 0 && n_args == 1)
		return token_revoke(ctx, argv[first + 1]);
	return cmd_usage_error("token", TOKEN_USAGE, "unknown subcommand or wrong arguments: %s", sub);
}

int cmd_run_dashboard(cmd_ctx_t *ctx, int argc, char **argv)
{
	token_opts_t o = {0};
	int first = 0, status = CTL_EXIT_OK;
	if (parse(ctx, argc, argv, &o, "", &first, &status) < 0)
		return status;
	if (first != argc)
		return cmd_usage_error("dashboard", "", "dashboard takes no arguments (got %s)", argv[first]);
	rest_response_t response;
	json_t *doc;
	status = cmd_request_json(ctx, "POST", "/v1/session/codes", NULL, 0, NULL, &response, &doc);
	if (status != CTL_EXIT_OK)
		return status;
	const char *code = json_string_value(json_object_get(doc, "code"));
	size_t n = strlen(ctx->server);
	while (n && ctx->server[n - 1] == '/')
		n--;
	if (ctx->json)
		cmd_print_raw(&response);
	else if (code)
		printf("%.*s/?code=%s\n", (int)n, ctx->server, code);
	json_decref(doc);
	rest_response_clear(&response);
	if (!code && !ctx->json) {
		fprintf(stderr, "ringctl: the server's answer has no login code\n");
		return CTL_EXIT_FAILED;
	}
	if (!ctx->json)
		fprintf(stderr, "ringctl: open this address within 60 seconds; the code signs in one browser, once\n");
	return CTL_EXIT_OK;
}
