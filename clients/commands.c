/*
 * commands: see commands.h. Every command follows the same path: parse its
 * options (the global --json and --server are accepted here too, so that
 * `ringctl jobs --json` works), call the server with request_json(), which
 * deals with every failure and prints it, then print the answer. Paged lists
 * (jobs, events) follow next_cursor with --all.
 */
#include "commands.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "export.h"
#include "report.h"
#include "table.h"

/* Largest spec file read by submit; the server's own limit is lower. */
#define SPEC_MAX_BYTES ((size_t)16 << 20)
/* Names longer than this are cut in tables (show prints them whole). */
#define NAME_MAX_CHARS 40
/* JSON output of values inside tables and `show`: stable and readable. */
#define DUMP_FLAGS (JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15))

enum {
	OPT_JSON = 1000,
	OPT_SERVER,
	OPT_HELP,
	OPT_ALL,
	OPT_STATE,
	OPT_LIMIT,
	OPT_CURSOR,
	OPT_IDEM,
	OPT_SINCE,
	OPT_FOLLOW,
	OPT_OUTPUT,
	OPT_RANK,
	OPT_ATTEMPT,
};

static int usage_error(const char *cmd, const char *usage, const char *fmt, const char *arg)
{
	fputs("ringctl: ", stderr);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nUsage: ringctl %s%s%s\nTry 'ringctl --help' for more.\n", cmd,
	        usage[0] ? " " : "", usage);
	return CTL_EXIT_USAGE;
}

/* ---- options ------------------------------------------------------------ */

typedef struct {
	bool all;
	bool quiet;
	const char *state;
	const char *cursor;
	const char *idempotency_key;
	long limit; /* 0 = server's default */
	long long since; /* metrics: first step */
	bool follow;     /* metrics: keep polling until the job ends */
	const char *output; /* trace: the file to write ("-" or NULL: stdout) */
	long rank;          /* trace: only this rank, when has_rank */
	bool has_rank;
	long attempt;       /* trace: only this attempt; 0: all */
} cmd_opts_t;

#define COMMON_LONG_OPTS                                                                           \
	{"json", no_argument, NULL, OPT_JSON}, {"server", required_argument, NULL, OPT_SERVER},        \
		{"help", no_argument, NULL, OPT_HELP}

/*
 * Parses argv (argv[0] = command name) against long_opts. On success the
 * positional arguments are left in argv[*ret_first ..argc-1] and 0 is
 * returned; --help prints the usage and returns -1 with *ret_exit = 0; a bad
 * option returns -1 with *ret_exit = CTL_EXIT_USAGE.
 */
static int parse_options(cmd_ctx_t *ctx, const cmd_t *cmd, int argc, char **argv,
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
				*ret_exit = usage_error(cmd->name, cmd->usage,
				                        "--rank needs an integer >= 0 (got \"%s\")", optarg);
				return -1;
			}
			opts->has_rank = true;
			break;
		case OPT_ATTEMPT:
			errno = 0;
			opts->attempt = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || opts->attempt < 1 || opts->attempt > INT_MAX) {
				*ret_exit = usage_error(cmd->name, cmd->usage,
				                        "--attempt needs an integer >= 1 (got \"%s\")", optarg);
				return -1;
			}
			break;
		case OPT_SINCE:
			errno = 0;
			opts->since = strtoll(optarg, &end, 10);
			if (errno || end == optarg || *end || opts->since < 0) {
				*ret_exit = usage_error(cmd->name, cmd->usage,
				                        "--since needs an integer >= 0 (got \"%s\")", optarg);
				return -1;
			}
			break;
		case OPT_LIMIT:
			errno = 0;
			opts->limit = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || opts->limit < 1) {
				*ret_exit = usage_error(cmd->name, cmd->usage,
				                        "--limit needs a positive integer (got \"%s\")", optarg);
				return -1;
			}
			break;
		case ':':
			*ret_exit = usage_error(cmd->name, cmd->usage, "option %s needs a value",
			                        argv[optind - 1]);
			return -1;
		default:
			*ret_exit = usage_error(cmd->name, cmd->usage, "unknown option %s", argv[optind - 1]);
			return -1;
		}
	}
	*ret_first = optind;
	return 0;
}

/* Checks that exactly n_args positional arguments remain. */
static int expect_args(const cmd_t *cmd, int argc, int first, int n_args, int *ret_exit)
{
	int n = argc - first;
	if (n == n_args)
		return 0;
	*ret_exit = usage_error(cmd->name, cmd->usage, "%s",
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
static int request_json(cmd_ctx_t *ctx, const char *method, const char *path, const char *body,
                        size_t body_bytes, const char *idempotency_key,
                        rest_response_t *ret_response, json_t **ret_json)
{
	if (!ctx->client) {
		ctx->client = rest_client_new(ctx->server, ctx->token);
		if (!ctx->client) {
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
static char *job_path(cmd_ctx_t *ctx, const char *id, const char *suffix)
{
	if (!ctx->client && !(ctx->client = rest_client_new(ctx->server, ctx->token)))
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
static int path_add_query(cmd_ctx_t *ctx, char **path, const char *key, const char *value)
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

static int out_of_memory(void)
{
	fprintf(stderr, "ringctl: out of memory\n");
	return CTL_EXIT_FAILED;
}

/* Prints a body as the server sent it, ending with exactly one newline. */
static void print_raw(const rest_response_t *response)
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
static const char *value_text(const json_t *v, char *buf, size_t buf_len)
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

static const char *field_text(const json_t *obj, const char *key, char *buf, size_t buf_len)
{
	return value_text(json_object_get(obj, key), buf, buf_len);
}

static const char *or_empty(const char *s)
{
	return s ? s : "";
}

static const char *or_dash(const char *s)
{
	return s ? s : "-";
}

/* "2025-06-01T12:00:00.123456Z" -> "2025-06-01T12:00:00Z"; anything else as is. */
static const char *short_time(const char *t, char *buf, size_t buf_len)
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

/* ---- submit --------------------------------------------------------------- */

/* Reads all of path ("-" = stdin) into a NUL-terminated buffer. */
static int read_spec(const char *path, char **ret_data, size_t *ret_bytes)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "ringctl: cannot open %s: %s\n", path, strerror(errno));
		return CTL_EXIT_FAILED;
	}
	size_t cap = 8192, n = 0;
	char *data = malloc(cap);
	int status = CTL_EXIT_OK;
	while (data) {
		if (n + 1 >= cap) {
			if (cap > SPEC_MAX_BYTES) {
				fprintf(stderr, "ringctl: %s is larger than %zu bytes; that is not a job spec\n",
				        path, SPEC_MAX_BYTES);
				status = CTL_EXIT_FAILED;
				break;
			}
			char *bigger = realloc(data, cap * 2);
			if (!bigger)
				break;
			data = bigger;
			cap *= 2;
		}
		size_t got = fread(data + n, 1, cap - n - 1, f);
		n += got;
		if (got == 0) {
			if (ferror(f)) {
				fprintf(stderr, "ringctl: cannot read %s: %s\n", path, strerror(errno));
				status = CTL_EXIT_FAILED;
			}
			break;
		}
	}
	if (f != stdin)
		fclose(f);
	if (!data)
		return out_of_memory();
	if (status != CTL_EXIT_OK) {
		free(data);
		return status;
	}
	data[n] = '\0';
	*ret_data = data;
	*ret_bytes = n;
	return CTL_EXIT_OK;
}

static int run_submit(cmd_ctx_t *ctx, int argc, char **argv)
{
	static const struct option long_opts[] = {
		COMMON_LONG_OPTS,
		{"idempotency-key", required_argument, NULL, OPT_IDEM},
		{"quiet", no_argument, NULL, 'q'},
		{0, 0, 0, 0},
	};
	const cmd_t *cmd = cmd_find("submit");
	cmd_opts_t opts = {0};
	int first, status;
	if (parse_options(ctx, cmd, argc, argv, ":hq", long_opts, &opts, &first, &status) < 0 ||
	    expect_args(cmd, argc, first, 1, &status) < 0)
		return status;
	const char *path = argv[first];

	char *spec;
	size_t spec_bytes;
	if ((status = read_spec(path, &spec, &spec_bytes)) != CTL_EXIT_OK)
		return status;
	/* Catch a syntax error here, with its line and column; the server judges
	 * the content. The bytes are sent exactly as read. */
	json_error_t err;
	json_t *parsed = json_loadb(spec, spec_bytes, 0, &err);
	if (!parsed) {
		fprintf(stderr, "ringctl: %s:%d:%d: not valid JSON: %s\n",
		        strcmp(path, "-") == 0 ? "<stdin>" : path, err.line, err.column, err.text);
		free(spec);
		return CTL_EXIT_FAILED;
	}
	json_decref(parsed);

	rest_response_t response;
	json_t *job;
	status = request_json(ctx, "POST", "/v1/jobs", spec, spec_bytes, opts.idempotency_key,
	                      &response, &job);
	free(spec);
	if (status != CTL_EXIT_OK)
		return status;
	char b1[64], b2[64], b3[64];
	const char *id = field_text(job, "id", b1, sizeof b1);
	if (ctx->json) {
		print_raw(&response);
	} else if (opts.quiet) {
		printf("%s\n", id ? id : "-");
	} else {
		char *name = table_sanitize(or_empty(field_text(job, "name", b2, sizeof b2)), 0);
		const char *state = field_text(job, "state", b3, sizeof b3);
		printf("submitted job %s%s%s%s: %s\n", id ? id : "-", name && name[0] ? " (" : "",
		       name ? name : "", name && name[0] ? ")" : "", state ? state : "-");
		free(name);
	}
	json_decref(job);
	rest_response_clear(&response);
	return CTL_EXIT_OK;
}

/* ---- paged lists: jobs, events -------------------------------------------- */

/*
 * GETs base_path with opts' filters, following next_cursor while opts->all.
 * Returns CTL_EXIT_OK with all items of list_key in *ret_items, the last
 * page's next_cursor (NULL or a copy to free) in *ret_next and, when only one
 * page was fetched, its raw response in *ret_single (else zeroed).
 */
static int fetch_pages(cmd_ctx_t *ctx, const char *base_path, const char *list_key,
                       const cmd_opts_t *opts, json_t **ret_items, char **ret_next,
                       rest_response_t *ret_single)
{
	json_t *items = json_array();
	char *cursor = opts->cursor ? strdup(opts->cursor) : NULL;
	int n_pages = 0;
	int status = CTL_EXIT_OK;
	memset(ret_single, 0, sizeof *ret_single);
	if (!items || (opts->cursor && !cursor)) {
		status = out_of_memory();
		goto out;
	}
	for (;;) {
		char *path = strdup(base_path);
		char limit_text[32];
		snprintf(limit_text, sizeof limit_text, "%ld", opts->limit);
		if (!ctx->client && !(ctx->client = rest_client_new(ctx->server, ctx->token))) {
			free(path);
			status = out_of_memory();
			goto out;
		}
		if (!path || (opts->state && path_add_query(ctx, &path, "state", opts->state) < 0) ||
		    (opts->limit && path_add_query(ctx, &path, "limit", limit_text) < 0) ||
		    (cursor && path_add_query(ctx, &path, "cursor", cursor) < 0)) {
			free(path);
			status = out_of_memory();
			goto out;
		}
		rest_response_t response;
		json_t *page;
		status = request_json(ctx, "GET", path, NULL, 0, NULL, &response, &page);
		free(path);
		if (status != CTL_EXIT_OK)
			goto out;
		n_pages++;
		json_t *list = json_object_get(page, list_key);
		if (json_is_array(list))
			json_array_extend(items, list);
		const char *next = json_string_value(json_object_get(page, "next_cursor"));
		bool same = next && cursor && strcmp(next, cursor) == 0;
		free(cursor);
		cursor = next && next[0] ? strdup(next) : NULL;
		json_decref(page);
		if (same) {
			fprintf(stderr, "ringctl: the server returned the same cursor twice; stopping\n");
			rest_response_clear(&response);
			status = CTL_EXIT_FAILED;
			goto out;
		}
		if (!opts->all || !cursor) {
			if (n_pages == 1)
				*ret_single = response;
			else
				rest_response_clear(&response);
			break;
		}
		rest_response_clear(&response);
	}
	*ret_items = items;
	*ret_next = cursor;
	return CTL_EXIT_OK;
out:
	json_decref(items);
	free(cursor);
	return status;
}

/* With --json: one page as the server sent it, several pages as one list. */
static void print_pages_json(const char *list_key, json_t *items, const char *next,
                             const rest_response_t *single)
{
	if (single->body) {
		print_raw(single);
		return;
	}
	json_t *all = json_pack("{sOss?}", list_key, items, "next_cursor", next);
	char *text = all ? json_dumps(all, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	if (text)
		printf("%s\n", text);
	else
		out_of_memory();
	free(text);
	json_decref(all);
}

static void hint_more(const char *what, const char *next)
{
	if (next)
		fprintf(stderr, "ringctl: more %s: add --all, or --cursor %s for the next page\n", what, next);
}

static int run_jobs(cmd_ctx_t *ctx, int argc, char **argv)
{
	static const struct option long_opts[] = {
		COMMON_LONG_OPTS,
		{"state", required_argument, NULL, OPT_STATE},
		{"limit", required_argument, NULL, OPT_LIMIT},
		{"cursor", required_argument, NULL, OPT_CURSOR},
		{"all", no_argument, NULL, OPT_ALL},
		{0, 0, 0, 0},
	};
	const cmd_t *cmd = cmd_find("jobs");
	cmd_opts_t opts = {0};
	int first, status;
	if (parse_options(ctx, cmd, argc, argv, ":ha", long_opts, &opts, &first, &status) < 0 ||
	    expect_args(cmd, argc, first, 0, &status) < 0)
		return status;

	json_t *jobs;
	char *next;
	rest_response_t single;
	if ((status = fetch_pages(ctx, "/v1/jobs", "jobs", &opts, &jobs, &next, &single)) != CTL_EXIT_OK)
		return status;
	if (ctx->json) {
		print_pages_json("jobs", jobs, next, &single);
	} else {
		static const char *const headers[] = {"ID", "NAME", "STATE", "PRIO", "WORLD", "CREATED"};
		table_t *table = table_new(6, headers);
		if (!table) {
			status = out_of_memory();
			goto out;
		}
		table_set_max_width(table, 1, NAME_MAX_CHARS);
		size_t i;
		json_t *job;
		json_array_foreach(jobs, i, job) {
			char b[6][128];
			const json_t *spec = json_object_get(job, "spec");
			const char *prio = field_text(job, "priority", b[3], sizeof b[3]);
			if (!prio)
				prio = field_text(spec, "priority", b[3], sizeof b[3]);
			const char *world = field_text(job, "world_size", b[4], sizeof b[4]);
			if (!world)
				world = field_text(json_object_get(spec, "parallel"), "world_size", b[4], sizeof b[4]);
			char created[64];
			const char *cells[6] = {
				field_text(job, "id", b[0], sizeof b[0]),
				field_text(job, "name", b[1], sizeof b[1]),
				field_text(job, "state", b[2], sizeof b[2]),
				prio,
				world,
				short_time(field_text(job, "created_at", b[5], sizeof b[5]), created, sizeof created),
			};
			if (table_add_row(table, cells) < 0) {
				status = out_of_memory();
				break;
			}
		}
		if (status == CTL_EXIT_OK) {
			table_print(table, stdout);
			hint_more("jobs", next);
		}
		table_free(table);
	}
out:
	json_decref(jobs);
	free(next);
	rest_response_clear(&single);
	return status;
}

static int run_events(cmd_ctx_t *ctx, int argc, char **argv)
{
	static const struct option long_opts[] = {
		COMMON_LONG_OPTS,
		{"limit", required_argument, NULL, OPT_LIMIT},
		{"cursor", required_argument, NULL, OPT_CURSOR},
		{"all", no_argument, NULL, OPT_ALL},
		{0, 0, 0, 0},
	};
	const cmd_t *cmd = cmd_find("events");
	cmd_opts_t opts = {0};
	int first, status;
	if (parse_options(ctx, cmd, argc, argv, ":ha", long_opts, &opts, &first, &status) < 0 ||
	    expect_args(cmd, argc, first, 1, &status) < 0)
		return status;
	char *path = job_path(ctx, argv[first], "/events");
	if (!path)
		return out_of_memory();
	json_t *events;
	char *next;
	rest_response_t single;
	status = fetch_pages(ctx, path, "events", &opts, &events, &next, &single);
	free(path);
	if (status != CTL_EXIT_OK)
		return status;
	if (ctx->json) {
		print_pages_json("events", events, next, &single);
	} else {
		static const char *const headers[] = {"ID", "AT", "TYPE", "FROM", "TO", "ATTEMPT", "REASON"};
		table_t *table = table_new(7, headers);
		if (!table) {
			status = out_of_memory();
			goto out;
		}
		size_t i;
		json_t *ev;
		json_array_foreach(events, i, ev) {
			char b[7][256];
			char at[64];
			const char *cells[7] = {
				field_text(ev, "id", b[0], sizeof b[0]),
				short_time(field_text(ev, "at", b[1], sizeof b[1]), at, sizeof at),
				field_text(ev, "type", b[2], sizeof b[2]),
				field_text(ev, "from", b[3], sizeof b[3]),
				field_text(ev, "to", b[4], sizeof b[4]),
				field_text(ev, "attempt", b[5], sizeof b[5]),
				field_text(ev, "reason", b[6], sizeof b[6]),
			};
			if (table_add_row(table, cells) < 0) {
				status = out_of_memory();
				break;
			}
		}
		if (status == CTL_EXIT_OK) {
			table_print(table, stdout);
			hint_more("events", next);
		}
		table_free(table);
	}
out:
	json_decref(events);
	free(next);
	rest_response_clear(&single);
	return status;
}

/* ---- show, cancel --------------------------------------------------------- */

/* Prints "key: value" for one field, the values aligned at key_width. */
static int print_field(const char *key, const json_t *value, size_t key_width)
{
	char buf[4096];
	char *text = table_sanitize(or_dash(value_text(value, buf, sizeof buf)), 0);
	if (!text)
		return out_of_memory();
	printf("%s:%*s %s\n", key, (int)(key_width - strlen(key)), "", text);
	free(text);
	return CTL_EXIT_OK;
}

/* "1.5 MiB" for a byte count (a JSON integer); NULL for anything else. */
static const char *bytes_text(const json_t *v, char *buf, size_t buf_len)
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

/* Prints the ranks of a job's current attempt (GET /v1/jobs/{id}'s "ranks")
 * as an indented table with the memory each holds; nothing when empty. */
static int print_job_ranks(const json_t *ranks)
{
	if (!json_is_array(ranks) || json_array_size(ranks) == 0)
		return CTL_EXIT_OK;
	static const char *const headers[] = {"  RANK", "NODE", "DEVICE", "STATE", "PARAMS", "GRADS", "OPTIMIZER",
	                                      "ACTIVATIONS"};
	static const char *const mem_keys[] = {"params_bytes", "grads_bytes", "optim_bytes", "activations_bytes"};
	table_t *table = table_new(8, headers);
	if (!table)
		return out_of_memory();
	int status = CTL_EXIT_OK;
	size_t i;
	json_t *r;
	json_array_foreach(ranks, i, r) {
		char b[8][128];
		const json_t *dev = json_object_get(r, "device");
		const json_t *mem = json_object_get(r, "memory");
		const char *rank = field_text(r, "rank", b[1], sizeof b[1]);
		snprintf(b[0], sizeof b[0], "  %s", or_dash(rank));
		snprintf(b[2], sizeof b[2], "%s:%s", or_dash(field_text(dev, "kind", b[3], sizeof b[3])),
		         or_dash(field_text(dev, "index", b[4], sizeof b[4])));
		const char *cells[8] = {b[0], field_text(r, "node", b[1], sizeof b[1]), b[2],
		                        field_text(r, "state", b[3], sizeof b[3])};
		for (int k = 0; k < 4; k++)
			cells[4 + k] = bytes_text(json_object_get(mem, mem_keys[k]), b[4 + k], sizeof b[4 + k]);
		if (table_add_row(table, cells) < 0) {
			status = out_of_memory();
			break;
		}
	}
	if (status == CTL_EXIT_OK) {
		printf("ranks:\n");
		table_print(table, stdout);
	}
	table_free(table);
	return status;
}

/* Prints "key: value" lines for a job, its ranks (with their memory) as a
 * table, then its spec as indented JSON. */
static int print_job(const json_t *job)
{
	static const char *const order[] = {"id",         "name",       "state",      "state_reason",
	                                    "priority",   "world_size", "attempt",    "created_at",
	                                    "updated_at"};
	const size_t n_order = sizeof order / sizeof order[0];
	size_t key_width = 0;
	const char *key;
	json_t *value;
	json_object_foreach((json_t *)job, key, value) {
		if (strcmp(key, "spec") != 0 && strcmp(key, "ranks") != 0 && strlen(key) > key_width)
			key_width = strlen(key);
	}
	/* Known fields first, in a fixed order; then whatever else the server sent. */
	for (size_t i = 0; i < n_order; i++) {
		json_t *v = json_object_get(job, order[i]);
		if (v && print_field(order[i], v, key_width) != CTL_EXIT_OK)
			return CTL_EXIT_FAILED;
	}
	json_object_foreach((json_t *)job, key, value) {
		bool known = strcmp(key, "spec") == 0 || strcmp(key, "ranks") == 0;
		for (size_t i = 0; i < n_order && !known; i++)
			known = strcmp(key, order[i]) == 0;
		if (!known && print_field(key, value, key_width) != CTL_EXIT_OK)
			return CTL_EXIT_FAILED;
	}
	if (print_job_ranks(json_object_get(job, "ranks")) != CTL_EXIT_OK)
		return CTL_EXIT_FAILED;
	const json_t *spec = json_object_get(job, "spec");
	if (spec) {
		char *text = json_dumps(spec, JSON_INDENT(2) | DUMP_FLAGS | JSON_ENCODE_ANY);
		if (!text)
			return out_of_memory();
		printf("spec:\n");
		/* Indent every line by two spaces. jansson escapes control characters
		 * inside strings, so the only raw ones are these newlines. */
		for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
			nl = strchr(line, '\n');
			printf("  %.*s\n", nl ? (int)(nl - line) : (int)strlen(line), line);
		}
		free(text);
	}
	return CTL_EXIT_OK;
}

static int run_show(cmd_ctx_t *ctx, int argc, char **argv)
{
	static const struct option long_opts[] = {COMMON_LONG_OPTS, {0, 0, 0, 0}};
	const cmd_t *cmd = cmd_find("show");
	cmd_opts_t opts = {0};
	int first, status;
	if (parse_options(ctx, cmd, argc, argv, ":h", long_opts, &opts, &first, &status) < 0 ||
	    expect_args(cmd, argc, first, 1, &status) < 0)
		return status;
	char *path = job_path(ctx, argv[first], "");
	if (!path)
		return out_of_memory();
	rest_response_t response;
	json_t *job;
	status = request_json(ctx, "GET", path, NULL, 0, NULL, &response, &job);
	free(path);
	if (status != CTL_EXIT_OK)
		return status;
	if (ctx->json)
		print_raw(&response);
	else
		status = print_job(job);
	json_decref(job);
	rest_response_clear(&response);
	return status;
}

static int run_cancel(cmd_ctx_t *ctx, int argc, char **argv)
{
	static const struct option long_opts[] = {COMMON_LONG_OPTS, {0, 0, 0, 0}};
	const cmd_t *cmd = cmd_find("cancel");
	cmd_opts_t opts = {0};
	int first, status;
	if (parse_options(ctx, cmd, argc, argv, ":h", long_opts, &opts, &first, &status) < 0 ||
	    expect_args(cmd, argc, first, 1, &status) < 0)
		return status;
	char *path = job_path(ctx, argv[first], "/cancel");
	if (!path)
		return out_of_memory();
	rest_response_t response;
	json_t *job;
	status = request_json(ctx, "POST", path, NULL, 0, NULL, &response, &job);
	free(path);
	if (status != CTL_EXIT_OK)
		return status;
	if (ctx->json) {
		print_raw(&response);
	} else {
		char b1[128], b2[64];
		const char *id = field_text(job, "id", b1, sizeof b1);
		const char *state = field_text(job, "state", b2, sizeof b2);
		char *safe_id = table_sanitize(id ? id : argv[first], 0);
		printf("job %s: %s\n", safe_id ? safe_id : "-", state ? state : "-");
		free(safe_id);
	}
	json_decref(job);
	rest_response_clear(&response);
	return status;
}

/* ---- checkpoints ---------------------------------------------------------- */

static int run_checkpoints(cmd_ctx_t *ctx, int argc, char **argv)
{
	static const struct option long_opts[] = {COMMON_LONG_OPTS, {0, 0, 0, 0}};
	const cmd_t *cmd = cmd_find("checkpoints");
	cmd_opts_t opts = {0};
	int first, status;
	if (parse_options(ctx, cmd, argc, argv, ":h", long_opts, &opts, &first, &status) < 0 ||
	    expect_args(cmd, argc, first, 1, &status) < 0)
		return status;
	char *path = job_path(ctx, argv[first], "/checkpoints");
	if (!path)
		return out_of_memory();
	rest_response_t response;
	json_t *doc;
	status = request_json(ctx, "GET", path, NULL, 0, NULL, &response, &doc);
	free(path);
	if (status != CTL_EXIT_OK)
		return status;
	if (ctx->json) {
		print_raw(&response);
		goto out;
	}
	static const char *const headers[] = {"STEP", "COMMITTED", "SIZE", "WORLD", "ATTEMPT", "PATH"};
	table_t *table = table_new(6, headers);
	if (!table) {
		status = out_of_memory();
		goto out;
	}
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(doc, "checkpoints"), i, c) {
		char b[6][256], when[64];
		const char *cells[6] = {
			field_text(c, "step", b[0], sizeof b[0]),
			short_time(field_text(c, "committed_at", b[1], sizeof b[1]), when, sizeof when),
			bytes_text(json_object_get(c, "bytes"), b[2], sizeof b[2]),
			field_text(c, "world_size", b[3], sizeof b[3]),
			field_text(c, "attempt", b[4], sizeof b[4]),
			field_text(c, "path", b[5], sizeof b[5]),
		};
		if (table_add_row(table, cells) < 0) {
			status = out_of_memory();
			break;
		}
	}
	if (status == CTL_EXIT_OK) {
		if (table_n_rows(table) == 0)
			printf("no committed checkpoints\n");
		else
			table_print(table, stdout);
	}
	table_free(table);
out:
	json_decref(doc);
	rest_response_clear(&response);
	return status;
}

/* ---- trace ---------------------------------------------------------------- */

/* Write n bytes to `path` through a temporary file renamed over it, so that
 * a reader never sees half a trace. 0, or -1 with a line on stderr. */
static int write_file(const char *path, const char *data, size_t n)
{
	size_t len = strlen(path) + 16;
	char *tmp = malloc(len);
	if (!tmp) {
		out_of_memory();
		return -1;
	}
	snprintf(tmp, len, "%s.tmp-XXXXXX", path);
	int fd = mkstemp(tmp);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f) {
		fprintf(stderr, "ringctl: cannot write %s: %s\n", path, strerror(errno));
		if (fd >= 0) {
			close(fd);
			unlink(tmp);
		}
		free(tmp);
		return -1;
	}
	bool ok = fwrite(data, 1, n, f) == n && fputc('\n', f) != EOF;
	ok = fclose(f) == 0 && ok;
	mode_t mask = umask(0);
	umask(mask);
	if (ok && chmod(tmp, 0666 & ~mask) == 0 && rename(tmp, path) == 0) {
		free(tmp);
		return 0;
	}
	fprintf(stderr, "ringctl: cannot write %s: %s\n", path, strerror(errno));
	unlink(tmp);
	free(tmp);
	return -1;
}

/* "24 phases of steps 2 to 4 on 2 rank(s)" for a Chrome trace from the server. */
static void trace_summary(const json_t *doc, char *buf, size_t buf_len)
{
	long long n_phases = 0, first = -1, last = -1;
	int n_ranks = 0;
	long long ranks_seen[64];
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(doc, "traceEvents"), i, e) {
		const char *ph = json_string_value(json_object_get(e, "ph"));
		const char *cat = json_string_value(json_object_get(e, "cat"));
		if (!ph || strcmp(ph, "X") != 0)
			continue;
		long long step = json_integer_value(json_object_get(json_object_get(e, "args"), "step"));
		if (first < 0 || step < first)
			first = step;
		if (step > last)
			last = step;
		if (cat && strcmp(cat, "phase") == 0)
			n_phases++;
		long long pid = json_integer_value(json_object_get(e, "pid"));
		bool seen = false;
		for (int k = 0; k < n_ranks && k < 64; k++)
			seen = seen || ranks_seen[k] == pid;
		if (!seen) {
			if (n_ranks < 64)
				ranks_seen[n_ranks] = pid;
			n_ranks++;
		}
	}
	snprintf(buf, buf_len, "%lld phases of steps %lld to %lld on %d rank(s)", n_phases, first, last, n_ranks);
}

static int run_trace(cmd_ctx_t *ctx, int argc, char **argv)
{
	static const struct option long_opts[] = {
		COMMON_LONG_OPTS,
		{"output", required_argument, NULL, OPT_OUTPUT},
		{"rank", required_argument, NULL, OPT_RANK},
		{"attempt", required_argument, NULL, OPT_ATTEMPT},
		{0, 0, 0, 0},
	};
	const cmd_t *cmd = cmd_find("trace");
	cmd_opts_t opts = {0};
	int first, status;
	if (parse_options(ctx, cmd, argc, argv, ":ho:", long_opts, &opts, &first, &status) < 0 ||
	    expect_args(cmd, argc, first, 1, &status) < 0)
		return status;
	char *path = job_path(ctx, argv[first], "/trace");
	char num[32];
	if (path && opts.attempt > 0) {
		snprintf(num, sizeof num, "%ld", opts.attempt);
		if (path_add_query(ctx, &path, "attempt", num) < 0) {
			free(path);
			path = NULL;
		}
	}
	if (path && opts.has_rank) {
		snprintf(num, sizeof num, "%ld", opts.rank);
		if (path_add_query(ctx, &path, "rank", num) < 0) {
			free(path);
			path = NULL;
		}
	}
	if (!path)
		return out_of_memory();
	rest_response_t response;
	json_t *doc;
	status = request_json(ctx, "GET", path, NULL, 0, NULL, &response, &doc);
	free(path);
	if (status != CTL_EXIT_OK)
		return status;
	size_t n = response.body_bytes;
	while (n > 0 && (response.body[n - 1] == '\n' || response.body[n - 1] == '\r'))
		n--;
	if (!opts.output || strcmp(opts.output, "-") == 0) {
		print_raw(&response);
	} else if (write_file(opts.output, response.body, n) < 0) {
		status = CTL_EXIT_FAILED;
	} else {
		char summary[160];
		trace_summary(doc, summary, sizeof summary);
		printf("wrote %s: %s; open it in https://ui.perfetto.dev\n", opts.output, summary);
	}
	json_decref(doc);
	rest_response_clear(&response);
	return status;
}

/* ---- workers -------------------------------------------------------------- */

/* The first of keys that obj has, as text. */
static const char *first_field(const json_t *obj, const char *const *keys, char *buf, size_t buf_len)
{
	for (; *keys; keys++) {
		const char *t = field_text(obj, *keys, buf, buf_len);
		if (t)
			return t;
	}
	return NULL;
}

static int run_workers(cmd_ctx_t *ctx, int argc, char **argv)
{
	static const struct option long_opts[] = {COMMON_LONG_OPTS, {0, 0, 0, 0}};
	const cmd_t *cmd = cmd_find("workers");
	cmd_opts_t opts = {0};
	int first, status;
	if (parse_options(ctx, cmd, argc, argv, ":h", long_opts, &opts, &first, &status) < 0 ||
	    expect_args(cmd, argc, first, 0, &status) < 0)
		return status;
	rest_response_t response;
	json_t *page;
	if ((status = request_json(ctx, "GET", "/v1/workers", NULL, 0, NULL, &response, &page)) !=
	    CTL_EXIT_OK)
		return status;
	if (ctx->json) {
		print_raw(&response);
		goto out;
	}
	static const char *const headers[] = {"ID", "STATE", "DEVICES", "RANKS", "LAST SEEN"};
	static const char *const id_keys[] = {"id", "node", "name", NULL};
	static const char *const seen_keys[] = {"last_heartbeat", "last_heartbeat_at", "last_seen_at",
	                                        "heartbeat_at", "updated_at", NULL};
	table_t *table = table_new(5, headers);
	if (!table) {
		status = out_of_memory();
		goto out;
	}
	size_t i;
	json_t *w;
	json_array_foreach(json_object_get(page, "workers"), i, w) {
		char b[5][256], seen[64];
		const json_t *devices = json_object_get(w, "devices");
		const char *n_devices = json_is_array(devices) ? b[2] : value_text(devices, b[2], sizeof b[2]);
		if (json_is_array(devices))
			snprintf(b[2], sizeof b[2], "%zu", json_array_size(devices));
		const char *cells[5] = {
			first_field(w, id_keys, b[0], sizeof b[0]),
			field_text(w, "state", b[1], sizeof b[1]),
			n_devices,
			field_text(w, "running_ranks", b[4], sizeof b[4]),
			short_time(first_field(w, seen_keys, b[3], sizeof b[3]), seen, sizeof seen),
		};
		if (table_add_row(table, cells) < 0) {
			status = out_of_memory();
			break;
		}
	}
	if (status == CTL_EXIT_OK)
		table_print(table, stdout);
	table_free(table);
out:
	json_decref(page);
	rest_response_clear(&response);
	return status;
}

/* ---- metrics ------------------------------------------------------------- */

/* Interval between polls of `metrics --follow`. */
#define FOLLOW_POLL_US 1000000

static void print_metric_header(void)
{
	printf("%8s  %9s  %9s  %10s  %9s  %10s  %9s\n", "STEP", "LOSS", "VAL_LOSS", "LR", "GRAD_NORM",
	       "TOKENS/S", "MS");
}

static void print_metric_row(const json_t *m)
{
	char val[32] = "-";
	const json_t *v = json_object_get(m, "val_loss");
	if (json_is_number(v))
		snprintf(val, sizeof val, "%.4f", json_number_value(v));
	printf("%8lld  %9.4f  %9s  %10.3e  %9.3f  %10.0f  %9.1f\n",
	       (long long)json_integer_value(json_object_get(m, "step")),
	       json_number_value(json_object_get(m, "loss")), val,
	       json_number_value(json_object_get(m, "lr")),
	       json_number_value(json_object_get(m, "grad_norm")),
	       json_number_value(json_object_get(m, "tokens_per_s")),
	       json_number_value(json_object_get(m, "ms")));
}

static bool state_is_final(const char *state)
{
	return state && (strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
	                 strcmp(state, "cancelled") == 0);
}

/*
 * One page of metrics from step *since: prints its rows (a line of JSON
 * each with --json) and moves *since past the last one. *ret_more tells
 * whether the server has more rows already.
 */
static int metrics_page(cmd_ctx_t *ctx, const char *base_path, long long *since, bool *header_done,
                        bool *ret_more)
{
	char *path = strdup(base_path);
	char since_text[32];
	snprintf(since_text, sizeof since_text, "%lld", *since);
	if (!path || path_add_query(ctx, &path, "since_step", since_text) < 0) {
		free(path);
		return out_of_memory();
	}
	rest_response_t response;
	json_t *page;
	int status = request_json(ctx, "GET", path, NULL, 0, NULL, &response, &page);
	free(path);
	if (status != CTL_EXIT_OK)
		return status;
	size_t i;
	json_t *m;
	json_array_foreach(json_object_get(page, "metrics"), i, m) {
		if (ctx->json) {
			char *text = json_dumps(m, JSON_COMPACT | JSON_PRESERVE_ORDER);
			if (text)
				printf("%s\n", text);
			free(text);
		} else {
			if (!*header_done) {
				print_metric_header();
				*header_done = true;
			}
			print_metric_row(m);
		}
		json_int_t step = json_integer_value(json_object_get(m, "step"));
		if (step >= *since)
			*since = step + 1;
	}
	*ret_more = json_is_integer(json_object_get(page, "next_since_step"));
	fflush(stdout);
	json_decref(page);
	rest_response_clear(&response);
	return CTL_EXIT_OK;
}

static int run_metrics(cmd_ctx_t *ctx, int argc, char **argv)
{
	static const struct option long_opts[] = {
		COMMON_LONG_OPTS,
		{"since", required_argument, NULL, OPT_SINCE},
		{"follow", no_argument, NULL, OPT_FOLLOW},
		{0, 0, 0, 0},
	};
	const cmd_t *cmd = cmd_find("metrics");
	cmd_opts_t opts = {0};
	int first, status;
	if (parse_options(ctx, cmd, argc, argv, ":hf", long_opts, &opts, &first, &status) < 0 ||
	    expect_args(cmd, argc, first, 1, &status) < 0)
		return status;
	char *path = job_path(ctx, argv[first], "/metrics");
	char *job = job_path(ctx, argv[first], "");
	if (!path || !job) {
		free(path);
		free(job);
		return out_of_memory();
	}
	long long since = opts.since;
	bool header_done = false, more = true;
	for (;;) {
		/* Read the job's state before its metrics, so that the rows of a
		 * job seen as ended are all there when they are read. */
		char state[32] = "";
		if (opts.follow) {
			rest_response_t response;
			json_t *j;
			if ((status = request_json(ctx, "GET", job, NULL, 0, NULL, &response, &j)) != CTL_EXIT_OK)
				break;
			snprintf(state, sizeof state, "%s", or_empty(json_string_value(json_object_get(j, "state"))));
			if (state_is_final(state)) {
				const char *reason = json_string_value(json_object_get(j, "state_reason"));
				fprintf(stderr, "ringctl: job %s %s%s%s\n", argv[first], state, reason ? ": " : "",
				        or_empty(reason));
			}
			json_decref(j);
			rest_response_clear(&response);
		}
		do {
			status = metrics_page(ctx, path, &since, &header_done, &more);
		} while (status == CTL_EXIT_OK && more);
		if (status != CTL_EXIT_OK || !opts.follow)
			break;
		if (state_is_final(state)) {
			status = strcmp(state, "succeeded") == 0 ? CTL_EXIT_OK : CTL_EXIT_FAILED;
			break;
		}
		usleep(FOLLOW_POLL_US);
	}
	if (status == CTL_EXIT_OK && !header_done && !ctx->json && !opts.follow)
		fprintf(stderr, "ringctl: no metrics yet for job %s\n", argv[first]);
	free(path);
	free(job);
	return status;
}

/* ---- the command table ---------------------------------------------------- */

static const cmd_t commands[] = {
	{"submit", run_submit, "[--idempotency-key KEY] [--quiet] SPEC.json|-",
	 "Submit a job spec (a file, or - for stdin) and print the new job."},
	{"jobs", run_jobs, "[--state STATE] [--limit N] [--cursor C] [--all]",
	 "List jobs; --all follows every page, --state filters."},
	{"show", run_show, "ID", "Show one job: its state, timestamps and full spec."},
	{"cancel", run_cancel, "ID", "Cancel a job."},
	{"events", run_events, "[--limit N] [--cursor C] [--all] ID",
	 "List a job's events (state changes with their reasons)."},
	{"metrics", run_metrics, "[--since STEP] [--follow] ID",
	 "Print a job's training metrics (step, loss, validation loss, lr, tokens/s); --follow keeps"
	 " printing new steps until the job ends, then exits 0 if it succeeded."},
	{"checkpoints", run_checkpoints, "ID",
	 "List a job's committed checkpoints, newest first (step, time, size, path)."},
	{"trace", run_trace, "[-o FILE] [--rank R] [--attempt N] ID",
	 "Download the Chrome trace of a job's profiled steps (its spec's profile range) to FILE"
	 " (default: stdout); open it in https://ui.perfetto.dev."},
	{"workers", run_workers, "", "List the worker nodes known to the coordinator."},
	{"export", export_run, "SNAPSHOT_DIR|JOB [--step N] [--root DIR] -o FILE",
	 "Write a snapshot's model weights as one Hugging Face safetensors file (local: reads the"
	 " checkpoint folder, verifies checksums; JOB is looked up under --root,"
	 " $RINGMASTER_CHECKPOINT_ROOT or " EXPORT_DEFAULT_ROOT ")."},
};

const cmd_t *cmd_find(const char *name)
{
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

void cmd_print_list(FILE *out)
{
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(out, "  %s%s%s\n      %s\n", commands[i].name, commands[i].usage[0] ? " " : "",
		        commands[i].usage, commands[i].summary);
}

void cmd_ctx_clear(cmd_ctx_t *ctx)
{
	rest_client_free(ctx->client);
	ctx->client = NULL;
}
