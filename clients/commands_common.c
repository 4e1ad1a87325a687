/*
 * commands_common: see commands_common.h. Every command follows the same
 * path: parse its options (the global --json and --server are accepted here
 * too, so that `ringctl jobs --json` works), call the server with
 * cmd_request_json(), which deals with every failure and prints it, then
 * print the answer.
 */
#include "commands_common.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "report.h"

bool cmd_state_is_final(const char *state)
{
	return state && (strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
	                 strcmp(state, "cancelled") == 0);
}

int cmd_usage_error(const char *cmd, const char *usage, const char *fmt, const char *arg)
{
	fputs("ringctl: ", stderr);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nUsage: ringctl %s%s%s\nTry 'ringctl --help' for more.\n", cmd,
	        usage[0] ? " " : "", usage);
	return CTL_EXIT_USAGE;
}


/*
 * Parses argv (argv[0] = command name) against long_opts. On success the
 * positional arguments are left in argv[*ret_first ..argc-1] and 0 is
 * returned; --help prints the usage and returns -1 with *ret_exit = 0; a bad
 * option returns -1 with *ret_exit = CTL_EXIT_USAGE.
 */
int cmd_parse_options(cmd_ctx_t *ctx, const cmd_t *cmd, int argc, char **argv,
                      const char *short_opts, const struct option *long_opts, cmd_opts_t *opts,
                      int *ret_first, int *ret_exit)
{
	optind = 0; /* GNU: restart scanning, argv[0] is the command's name */
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, short_opts, long_opts, NULL)) != -1) {
		char *end;
		switch (c) {
		case OPT_JSON: ctx->json = true; break;
		case OPT_SERVER: ctx->server = optarg; break;
		case 'h':
		case OPT_HELP:
			printf("Usage: ringctl %s%s%s\n%s\n", cmd->name, cmd->usage[0] ? " " : "", cmd->usage,
			       cmd->summary);
			*ret_exit = CTL_EXIT_OK;
			return -1;
		case 'a':
		case OPT_ALL: opts->all = true; break;
		case 'q': opts->quiet = true; break;
		case OPT_STATE: opts->state = optarg; break;
		case OPT_CURSOR: opts->cursor = optarg; break;
		case OPT_IDEM: opts->idempotency_key = optarg; break;
		case 'f':
		case OPT_FOLLOW: opts->follow = true; break;
		case 'o':
		case OPT_OUTPUT: opts->output = optarg; break;
		case OPT_RANK:
			errno = 0;
			opts->rank = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || opts->rank < 0 || opts->rank > INT_MAX) {
				*ret_exit = cmd_usage_error(cmd->name, cmd->usage,
				                            "--rank needs an integer >= 0 (got \"%s\")", optarg);
				return -1;
			}
			opts->has_rank = true;
			break;
		case OPT_ATTEMPT:
			errno = 0;
			opts->attempt = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || opts->attempt < 1 || opts->attempt > INT_MAX) {
				*ret_exit = cmd_usage_error(cmd->name, cmd->usage,
				                            "--attempt needs an integer >= 1 (got \"%s\")", optarg);
				return -1;
			}
			break;
		case OPT_SINCE:
			errno = 0;
			opts->since = strtoll(optarg, &end, 10);
			if (errno || end == optarg || *end || opts->since < 0) {
				*ret_exit = cmd_usage_error(cmd->name, cmd->usage,
				                            "--since needs an integer >= 0 (got \"%s\")", optarg);
				return -1;
			}
			break;
		case OPT_TAIL:
			errno = 0;
			opts->tail = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || opts->tail < 1 || opts->tail > 10000) {
				*ret_exit = cmd_usage_error(cmd->name, cmd->usage,
				                            "--tail needs an integer from 1 to 10000 (got \"%s\")", optarg);
				return -1;
			}
			break;
		case OPT_TIMEOUT:
			errno = 0;
			opts->timeout_s = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(opts->timeout_s > 0) || opts->timeout_s > 1e9) {
				*ret_exit = cmd_usage_error(cmd->name, cmd->usage,
				                            "--timeout needs a number of seconds > 0 (got \"%s\")", optarg);
				return -1;
			}
			break;
		case 'w':
		case OPT_WAIT: opts->wait = true; break;
		case OPT_METRICS: opts->metrics = true; break;
		case OPT_WATCH: opts->watch = true; break;
		case OPT_LIMIT:
			errno = 0;
			opts->limit = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || opts->limit < 1) {
				*ret_exit = cmd_usage_error(cmd->name, cmd->usage,
				                            "--limit needs a positive integer (got \"%s\")", optarg);
				return -1;
			}
			break;
		case ':':
			*ret_exit = cmd_usage_error(cmd->name, cmd->usage, "option %s needs a value",
			                            argv[optind - 1]);
			return -1;
		default:
			*ret_exit = cmd_usage_error(cmd->name, cmd->usage, "unknown option %s", argv[optind - 1]);
			return -1;
		}
	}
	*ret_first = optind;
	return 0;
}

/* Checks that exactly n_args positional arguments remain. */
int cmd_expect_args(const cmd_t *cmd, int argc, int first, int n_args, int *ret_exit)
{
	int n = argc - first;
	if (n == n_args)
		return 0;
	*ret_exit = cmd_usage_error(cmd->name, cmd->usage, "%s",
	                            n < n_args ? "missing argument" : "too many arguments");
	return -1;
}

/* ---- requests ----------------------------------------------------------- */

/*
 * Sends a request and checks the answer. On success returns CTL_EXIT_OK with
 * the parsed JSON body in *ret_json (owned by the caller) and the raw response
 * in *ret_response (clear it with rest_response_clear). Otherwise prints one
 * line on stderr and returns the exit status; nothing is returned.
 */
rest_client_t *cmd_client(cmd_ctx_t *ctx)
{
	if (ctx->client)
		return ctx->client;
	rest_client_t *client = rest_client_new(ctx->server, ctx->token);
	if (client && ctx->cacert && rest_client_set_cacert(client, ctx->cacert) < 0) {
		rest_client_free(client);
		return NULL;
	}
	return ctx->client = client;
}

int cmd_request_json(cmd_ctx_t *ctx, const char *method, const char *path, const char *body,
                     size_t body_bytes, const char *idempotency_key,
                     rest_response_t *ret_response, json_t **ret_json)
{
	if (!ctx->client) {
		if (!cmd_client(ctx)) {
			fprintf(stderr, "ringctl: cannot set up libcurl (out of memory?)\n");
			return CTL_EXIT_FAILED;
		}
	}
	rest_response_t response;
	rest_result_t r = rest_client_request(ctx->client, method, path, body, body_bytes,
	                                      idempotency_key, &response);
	const char *url = rest_client_last_url(ctx->client);
	const char *why = rest_client_error(ctx->client);
	switch (r) {
	case REST_OK: break;
	case REST_ERR_UNREACHABLE:
		fprintf(stderr, "ringctl: cannot reach %s: %s (is ringmasterd running? set --server or RINGMASTER_SERVER)\n",
		        url, why);
		return CTL_EXIT_UNREACHABLE;
	case REST_ERR_TLS:
		fprintf(stderr, "ringctl: cannot open a trusted TLS connection to %s: %s (if the server's certificate "
		        "is self-signed or from a private CA, pass that CA with --cacert FILE)\n", url, why);
		return CTL_EXIT_UNREACHABLE;
	case REST_ERR_BAD_URL:
		fprintf(stderr, "ringctl: cannot use server URL %s: %s (expected http://HOST:PORT)\n",
		        ctx->server, why);
		return CTL_EXIT_USAGE;
	default:
		fprintf(stderr, "ringctl: %s %s: %s\n", method, url, why);
		return CTL_EXIT_FAILED;
	}

	if (response.status < 200 || response.status > 299) {
		char line[2048];
		report_format_http_error(response.status, response.content_type, response.body,
		                         response.body_bytes, line, sizeof line);
		fprintf(stderr, "ringctl: %s\n", line);
		if (response.status == 401)
			fprintf(stderr, "ringctl: %s; pass --token, set RINGMASTER_TOKEN or put \"token = ...\" in "
			                "~/.config/ringmaster/ringctl.conf (an admin makes one with 'ringctl token create'; "
			                "the first admin token is in admin.token beside the daemon's database)\n",
			        ctx->token ? "the server refused this token" : "the server wants an API token");
		else if (response.status == 403)
			fprintf(stderr, "ringctl: this token's role may not do that; ask an admin for a token with the "
			                "role named above ('ringctl token create --role ...')\n");
		rest_response_clear(&response);
		return CTL_EXIT_FAILED;
	}
	json_error_t err;
	json_t *json = json_loadb(response.body, response.body_bytes, 0, &err);
	if (!json_is_object(json)) {
		fprintf(stderr, "ringctl: %s %s answered %ld with %s\n", method, url, response.status,
		        json ? "JSON that is not an object" : "a body that is not JSON");
		json_decref(json);
		rest_response_clear(&response);
		return CTL_EXIT_FAILED;
	}
	*ret_json = json;
	*ret_response = response;
	return CTL_EXIT_OK;
}

/* Returns "/v1/jobs/<escaped id><suffix>" (caller frees), or NULL. */
char *cmd_job_path(cmd_ctx_t *ctx, const char *id, const char *suffix)
{
	if (!cmd_client(ctx))
		return NULL;
	char *escaped = rest_client_escape(ctx->client, id);
	if (!escaped)
		return NULL;
	size_t len = strlen("/v1/jobs/") + strlen(escaped) + strlen(suffix) + 1;
	char *path = malloc(len);
	if (path)
		snprintf(path, len, "/v1/jobs/%s%s", escaped, suffix);
	free(escaped);
	return path;
}

/* Appends "<sep>key=<escaped value>" to a malloc'ed path; returns 0 or -ENOMEM. */
int cmd_path_add_query(cmd_ctx_t *ctx, char **path, const char *key, const char *value)
{
	char *escaped = rest_client_escape(ctx->client, value);
	if (!escaped)
		return -ENOMEM;
	const char *sep = strchr(*path, '?') ? "&" : "?";
	size_t len = strlen(*path) + 1 + strlen(key) + 1 + strlen(escaped) + 1;
	char *longer = malloc(len);
	if (longer)
		snprintf(longer, len, "%s%s%s=%s", *path, sep, key, escaped);
	free(escaped);
	if (!longer)
		return -ENOMEM;
	free(*path);
	*path = longer;
	return 0;
}

int cmd_out_of_memory(void)
{
	fprintf(stderr, "ringctl: out of memory\n");
	return CTL_EXIT_FAILED;
}

/* Prints a body as the server sent it, ending with exactly one newline. */
void cmd_print_raw(const rest_response_t *response)
{
	size_t n = response->body_bytes;
	while (n > 0 && (response->body[n - 1] == '\n' || response->body[n - 1] == '\r'))
		n--;
	fwrite(response->body, 1, n, stdout);
	fputc('\n', stdout);
}

/* ---- reading fields tolerantly ------------------------------------------ */

/*
 * Text for a JSON value: strings as they are, numbers and booleans printed,
 * objects and arrays as compact JSON, NULL/null as NULL. The result points
 * into buf or into the value; it lives as long as both.
 */
const char *cmd_value_text(const json_t *v, char *buf, size_t buf_len)
{
	if (!v || json_is_null(v))
		return NULL;
	if (json_is_string(v))
		return json_string_value(v);
	if (json_is_integer(v)) {
		snprintf(buf, buf_len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		return buf;
	}
	if (json_is_boolean(v))
		return json_is_true(v) ? "true" : "false";
	char *dump = json_dumps(v, JSON_COMPACT | DUMP_FLAGS | JSON_ENCODE_ANY);
	if (!dump)
		return NULL;
	snprintf(buf, buf_len, "%s", dump);
	free(dump);
	return buf;
}

const char *cmd_field_text(const json_t *obj, const char *key, char *buf, size_t buf_len)
{
	return cmd_value_text(json_object_get(obj, key), buf, buf_len);
}

const char *cmd_or_empty(const char *s)
{
	return s ? s : "";
}

const char *cmd_or_dash(const char *s)
{
	return s ? s : "-";
}

/* "2025-06-01T12:00:00.123456Z" -> "2025-06-01T12:00:00Z"; anything else as is. */
const char *cmd_short_time(const char *t, char *buf, size_t buf_len)
{
	if (!t)
		return NULL;
	const char *dot = strchr(t, '.');
	if (strlen(t) < 20 || t[10] != 'T' || !dot || dot - t != 19)
		return t;
	size_t digits = strspn(dot + 1, "0123456789");
	snprintf(buf, buf_len, "%.19s%s", t, dot + 1 + digits);
	return buf;
}

/* "1.5 MiB" for a byte count (a JSON integer); NULL for anything else. */
const char *cmd_bytes_text(const json_t *v, char *buf, size_t buf_len)
{
	if (!json_is_integer(v))
		return NULL;
	double n = (double)json_integer_value(v);
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	size_t u = 0;
	while (n >= 1024 && u + 1 < sizeof units / sizeof units[0]) {
		n /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, buf_len, "%.0f B", n);
	else
		snprintf(buf, buf_len, "%.1f %s", n, units[u]);
	return buf;
}
