/*
 * commands_workers: see commands_workers.h. The subcommand is argv[1]; its
 * own options (--uses, --expires) are taken out before the common ones
 * (--server, --json, --help) are parsed.
 */
#include "commands_workers.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "commands_common.h"
#include "table.h"

/* "30m", "1h", "2d", "90s" or plain seconds -> seconds; -1 when invalid. */
static long long duration_s(const char *s)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || v <= 0)
		return -1;
	long long mul = 1;
	if (*end == 's')
		end++;
	else if (*end == 'm')
		mul = 60, end++;
	else if (*end == 'h')
		mul = 3600, end++;
	else if (*end == 'd')
		mul = 86400, end++;
	return *end ? -1 : v * mul;
}

static int enroll(cmd_ctx_t *ctx, const cmd_t *cmd, long long uses, long long ttl)
{
	char body[128];
	snprintf(body, sizeof body, "{\"uses\":%lld,\"expires_in_s\":%lld}", uses, ttl);
	rest_response_t response;
	json_t *doc;
	int status = cmd_request_json(ctx, "POST", "/v1/workers/join-tokens", body, strlen(body), NULL, &response,
	                              &doc);
	if (status != CTL_EXIT_OK)
		return status;
	(void)cmd;
	if (ctx->json) {
		cmd_print_raw(&response);
	} else {
		const char *token = json_string_value(json_object_get(doc, "token"));
		printf("%s\n", token ? token : "");
		fprintf(stderr,
		        "ringctl: a join token for %lld agent(s), valid %lld s; start each agent with\n"
		        "  ringworker agent --coordinator tcp://HOST:PORT --join-token %s\n",
		        (long long)json_integer_value(json_object_get(doc, "uses")), ttl, "TOKEN");
	}
	json_decref(doc);
	rest_response_clear(&response);
	return status;
}

static int keys(cmd_ctx_t *ctx)
{
	rest_response_t response;
	json_t *doc;
	int status = cmd_request_json(ctx, "GET", "/v1/workers/keys", NULL, 0, NULL, &response, &doc);
	if (status != CTL_EXIT_OK)
		return status;
	if (ctx->json) {
		cmd_print_raw(&response);
		goto out;
	}
	static const char *const headers[] = {"ID", "NAME", "NODE", "PUBLIC KEY", "STATE"};
	table_t *table = table_new(5, headers);
	if (!table) {
		status = cmd_out_of_memory();
		goto out;
	}
	size_t i;
	json_t *k;
	json_array_foreach(json_object_get(doc, "keys"), i, k) {
		char b[4][256];
		bool revoked = !json_is_null(json_object_get(k, "revoked_at_us"));
		const char *cells[5] = {
			cmd_field_text(k, "id", b[0], sizeof b[0]),
			cmd_field_text(k, "name", b[1], sizeof b[1]),
			cmd_or_dash(cmd_field_text(k, "node", b[2], sizeof b[2])),
			cmd_field_text(k, "public_key", b[3], sizeof b[3]),
			revoked ? "revoked" : "live",
		};
		if (table_add_row(table, cells) < 0) {
			status = cmd_out_of_memory();
			break;
		}
	}
	if (status == CTL_EXIT_OK) {
		if (table_n_rows(table) == 0)
			printf("no worker keys\n");
		else
			table_print(table, stdout);
	}
	table_free(table);
out:
	json_decref(doc);
	rest_response_clear(&response);
	return status;
}

static int post_print(cmd_ctx_t *ctx, const char *path, const char *body, const char *done)
{
	rest_response_t response;
	json_t *doc;
	int status = cmd_request_json(ctx, "POST", path, body, body ? strlen(body) : 0, NULL, &response, &doc);
	if (status != CTL_EXIT_OK)
		return status;
	if (ctx->json) {
		cmd_print_raw(&response);
	} else {
		char b[3][256];
		printf("%s: key %s (%s)\n", done, cmd_field_text(doc, "id", b[0], sizeof b[0]),
		       cmd_or_dash(cmd_field_text(doc, "name", b[1], sizeof b[1])));
	}
	json_decref(doc);
	rest_response_clear(&response);
	return status;
}

int cmd_run_worker(cmd_ctx_t *ctx, int argc, char **argv)
{
	const cmd_t *cmd = cmd_find("worker");
	const char *sub = argc > 1 ? argv[1] : "";
	if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0) {
		printf("Usage: ringctl worker %s\n%s\n", cmd->usage, cmd->summary);
		return CTL_EXIT_OK;
	}
	if (strcmp(sub, "enroll") && strcmp(sub, "keys") && strcmp(sub, "add-key") && strcmp(sub, "revoke"))
		return cmd_usage_error(cmd->name, cmd->usage, "unknown worker subcommand \"%s\"", sub);
	/* take --uses and --expires out; the rest goes to the common parser */
	long long uses = 1, ttl = 3600;
	char **rest = calloc((size_t)argc + 1, sizeof *rest);
	if (!rest)
		return cmd_out_of_memory();
	int n = 0;
	rest[n++] = argv[0];
	for (int i = 2; i < argc; i++) {
		bool is_uses = strcmp(argv[i], "--uses") == 0, is_exp = strcmp(argv[i], "--expires") == 0;
		if ((is_uses || is_exp) && strcmp(sub, "enroll") == 0) {
			char *end;
			long long v = i + 1 < argc ? (is_uses ? strtoll(argv[i + 1], &end, 10) : duration_s(argv[i + 1])) : -1;
			if (v <= 0 || (is_uses && (*end || v > 1000))) {
				free(rest);
				return cmd_usage_error(cmd->name, cmd->usage,
				                       is_uses ? "--uses needs an integer from 1 to 1000 (got \"%s\")"
				                               : "--expires needs a duration such as 90s, 30m, 1h or 7d (got \"%s\")",
				                       i + 1 < argc ? argv[i + 1] : "");
			}
			if (is_uses)
				uses = v;
			else
				ttl = v;
			i++;
			continue;
		}
		rest[n++] = argv[i];
	}
	static const struct option long_opts[] = {COMMON_LONG_OPTS, {0, 0, 0, 0}};
	cmd_opts_t opts = {0};
	int first, status;
	int want = strcmp(sub, "add-key") == 0 ? 2 : strcmp(sub, "revoke") == 0 ? 1 : 0;
	if (cmd_parse_options(ctx, cmd, n, rest, ":h", long_opts, &opts, &first, &status) < 0 ||
	    cmd_expect_args(cmd, n, first, want, &status) < 0) {
		free(rest);
		return status;
	}
	if (strcmp(sub, "enroll") == 0) {
		status = enroll(ctx, cmd, uses, ttl);
	} else if (strcmp(sub, "keys") == 0) {
		status = keys(ctx);
	} else if (strcmp(sub, "add-key") == 0) {
		json_t *b = json_pack("{s:s, s:s}", "name", rest[first], "public_key", rest[first + 1]);
		char *body = b ? json_dumps(b, JSON_COMPACT) : NULL;
		json_decref(b);
		status = body ? post_print(ctx, "/v1/workers/keys", body, "added") : cmd_out_of_memory();
		free(body);
	} else {
		char *end, path[128];
		long long id = strtoll(rest[first], &end, 10);
		if (*end || end == rest[first] || id < 1) {
			free(rest);
			return cmd_usage_error(cmd->name, cmd->usage, "revoke needs a key id (ringctl worker keys), got \"%s\"",
			                       argv[argc - 1]);
		}
		snprintf(path, sizeof path, "/v1/workers/keys/%lld/revoke", id);
		status = post_print(ctx, path, NULL, "revoked");
	}
	free(rest);
	return status;
}
