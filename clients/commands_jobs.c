/*
 * commands_jobs: see commands_jobs.h. Each command parses its options with
 * cmd_parse_options(), makes its call through cmd_request_json() and prints
 * a table or, with --json, the server's body as sent. The paged lists go
 * through fetch_pages(), which follows next_cursor while --all and merges
 * the pages into one list; submit sends the spec's bytes exactly as read,
 * after a local JSON syntax check that names the line and column.
 */
#include "commands_jobs.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "commands_common.h"
#include "commands_follow.h"
#include "table.h"

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
		return cmd_out_of_memory();
	if (status != CTL_EXIT_OK) {
		free(data);
		return status;
	}
	data[n] = '\0';
	*ret_data = data;
	*ret_bytes = n;
	return CTL_EXIT_OK;
}

int cmd_run_submit(cmd_ctx_t *ctx, int argc, char **argv)
{
	static const struct option long_opts[] = {
		COMMON_LONG_OPTS,
		{"idempotency-key", required_argument, NULL, OPT_IDEM},
		{"quiet", no_argument, NULL, 'q'},
		{"wait", no_argument, NULL, OPT_WAIT},
		{"metrics", no_argument, NULL, OPT_METRICS},
		{0, 0, 0, 0},
	};
	const cmd_t *cmd = cmd_find("submit");
	cmd_opts_t opts = {0};
	int first, status;
	if (cmd_parse_options(ctx, cmd, argc, argv, ":hqw", long_opts, &opts, &first, &status) < 0 ||
	    cmd_expect_args(cmd, argc, first, 1, &status) < 0)
		return status;
	if (opts.metrics && !opts.wait)
		return cmd_usage_error(cmd->name, cmd->usage, "%s applies only with --wait", "--metrics");
	const char *path = argv[first];

	char *spec = NULL; /* read_spec sets both on success; GCC's -Wmaybe-uninitialized cannot tell */
	size_t spec_bytes = 0;
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
	status = cmd_request_json(ctx, "POST", "/v1/jobs", spec, spec_bytes, opts.idempotency_key,
	                          &response, &job);
	free(spec);
	if (status != CTL_EXIT_OK)
		return status;
	char b1[64], b2[64], b3[64];
	const char *id = cmd_field_text(job, "id", b1, sizeof b1);
	if (ctx->json) {
		cmd_print_raw(&response);
	} else if (opts.quiet) {
		printf("%s\n", id ? id : "-");
	} else {
		char *name = table_sanitize(cmd_or_empty(cmd_field_text(job, "name", b2, sizeof b2)), 0);
		const char *state = cmd_field_text(job, "state", b3, sizeof b3);
		printf("submitted job %s%s%s%s: %s\n", id ? id : "-", name && name[0] ? " (" : "",
		       name ? name : "", name && name[0] ? ")" : "", state ? state : "-");
		free(name);
	}
	fflush(stdout);
	char *wait_id = opts.wait && id ? strdup(id) : NULL;
	json_decref(job);
	rest_response_clear(&response);
	if (!opts.wait)
		return CTL_EXIT_OK;
	if (!wait_id) {
		fprintf(stderr, "ringctl: the server's answer names no job id; cannot wait for it\n");
		return CTL_EXIT_FAILED;
	}
	const cmd_follow_opts_t o = {.what = opts.metrics ? FOLLOW_METRICS : FOLLOW_LOGS, .follow = true};
	char end_state[32];
	status = cmd_follow_job(ctx, wait_id, &o, end_state, sizeof end_state);
	if (status == CTL_EXIT_OK) {
		status = cmd_job_end_status(ctx, wait_id, end_state);
		if (status == CTL_EXIT_OK && !ctx->json)
			fprintf(stderr, "ringctl: job %s %s\n", wait_id, end_state);
	}
	free(wait_id);
	return status;
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
		status = cmd_out_of_memory();
		goto out;
	}
	for (;;) {
		char *path = strdup(base_path);
		char limit_text[32];
		snprintf(limit_text, sizeof limit_text, "%ld", opts->limit);
		if (!cmd_client(ctx)) {
			free(path);
			status = cmd_out_of_memory();
			goto out;
		}
		if (!path || (opts->state && cmd_path_add_query(ctx, &path, "state", opts->state) < 0) ||
		    (opts->limit && cmd_path_add_query(ctx, &path, "limit", limit_text) < 0) ||
		    (cursor && cmd_path_add_query(ctx, &path, "cursor", cursor) < 0)) {
			free(path);
			status = cmd_out_of_memory();
			goto out;
		}
		rest_response_t response;
		json_t *page;
		status = cmd_request_json(ctx, "GET", path, NULL, 0, NULL, &response, &page);
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
		cmd_print_raw(single);
		return;
	}
	json_t *all = json_pack("{sOss?}", list_key, items, "next_cursor", next);
	char *text = all ? json_dumps(all, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	if (text)
		printf("%s\n", text);
	else
		cmd_out_of_memory();
	free(text);
	json_decref(all);
}

static void hint_more(const char *what, const char *next)
{
	if (next)
		fprintf(stderr, "ringctl: more %s: add --all, or --cursor %s for the next page\n", what, next);
}

/* Prints jobs as the `jobs` table to out. */
static int print_jobs_table(const json_t *jobs, FILE *out)
{
	static const char *const headers[] = {"ID", "NAME", "STATE", "PRIO", "WORLD", "CREATED"};
	table_t *table = table_new(6, headers);
	if (!table)
		return cmd_out_of_memory();
	table_set_max_width(table, 1, NAME_MAX_CHARS);
	int status = CTL_EXIT_OK;
	size_t i;
	json_t *job;
	json_array_foreach(jobs, i, job) {
		char b[6][128];
		const json_t *spec = json_object_get(job, "spec");
		const char *prio = cmd_field_text(job, "priority", b[3], sizeof b[3]);
		if (!prio)
			prio = cmd_field_text(spec, "priority", b[3], sizeof b[3]);
		const char *world = cmd_field_text(job, "world_size", b[4], sizeof b[4]);
		if (!world)
			world = cmd_field_text(json_object_get(spec, "parallel"), "world_size", b[4], sizeof b[4]);
		char created[64];
		const char *cells[6] = {
			cmd_field_text(job, "id", b[0], sizeof b[0]),
			cmd_field_text(job, "name", b[1], sizeof b[1]),
			cmd_field_text(job, "state", b[2], sizeof b[2]),
			prio,
			world,
			cmd_short_time(cmd_field_text(job, "created_at", b[5], sizeof b[5]), created, sizeof created),
		};
		if (table_add_row(table, cells) < 0) {
			status = cmd_out_of_memory();
			break;
		}
	}
	if (status == CTL_EXIT_OK)
		table_print(table, out);
	table_free(table);
	return status;
}

/* Interval between two polls of `jobs --watch`. */
#define JOBS_WATCH_INTERVAL_US 1000000

/*
 * One round of `jobs --watch` on the list just read. On a terminal: clears
 * the screen and draws the whole table when it differs from *last (the
 * text drawn last time, replaced). Elsewhere: prints the jobs that are new
 * or changed since *seen (id -> compact JSON, updated), as a table or one
 * JSON line each with --json; nothing when none changed.
 */
static int watch_round(const cmd_ctx_t *ctx, const json_t *jobs, bool tty, char **last, json_t *seen)
{
	if (tty) {
		char *text = NULL;
		size_t len = 0;
		FILE *mem = open_memstream(&text, &len);
		if (!mem)
			return cmd_out_of_memory();
		int status = print_jobs_table(jobs, mem);
		fclose(mem);
		if (status != CTL_EXIT_OK || !text) {
			free(text);
			return status != CTL_EXIT_OK ? status : cmd_out_of_memory();
		}
		if (!*last || strcmp(*last, text) != 0) {
			time_t now = time(NULL);
			char at[32];
			strftime(at, sizeof at, "%H:%M:%S", localtime(&now));
			printf("\033[H\033[2Jringctl jobs --watch (every %d s; Ctrl-C to stop)  %s\n\n%s",
			       JOBS_WATCH_INTERVAL_US / 1000000, at, text);
			fflush(stdout);
		}
		free(*last);
		*last = text;
		return CTL_EXIT_OK;
	}
	json_t *changed = json_array();
	if (!changed)
		return cmd_out_of_memory();
	size_t i;
	json_t *job;
	json_array_foreach(jobs, i, job) {
		const char *id = json_string_value(json_object_get(job, "id"));
		char *text = json_dumps(job, JSON_COMPACT | JSON_SORT_KEYS);
		const char *before = id ? json_string_value(json_object_get(seen, id)) : NULL;
		if (text && (!before || strcmp(before, text) != 0)) {
			json_array_append(changed, job);
			if (id)
				json_object_set_new(seen, id, json_string(text));
		}
		free(text);
	}
	int status = CTL_EXIT_OK;
	if (json_array_size(changed) > 0) {
		if (ctx->json) {
			json_array_foreach(changed, i, job) {
				char *text = json_dumps(job, JSON_COMPACT | JSON_PRESERVE_ORDER);
				if (text)
					printf("%s\n", text);
				free(text);
			}
		} else {
			status = print_jobs_table(changed, stdout);
		}
		fflush(stdout);
	}
	json_decref(changed);
	return status;
}

/* `jobs --watch`: polls the list every JOBS_WATCH_INTERVAL_US until killed.
 * A failed first read ends it; later failures are printed and retried. */
static int watch_jobs(cmd_ctx_t *ctx, const cmd_opts_t *opts)
{
	bool tty = isatty(STDOUT_FILENO) == 1;
	char *last = NULL;
	json_t *seen = json_object();
	if (!seen)
		return cmd_out_of_memory();
	for (int round = 0;; round++) {
		json_t *jobs;
		char *next;
		rest_response_t single;
		int status = fetch_pages(ctx, "/v1/jobs", "jobs", opts, &jobs, &next, &single);
		if (status != CTL_EXIT_OK && round == 0) {
			json_decref(seen);
			return status;
		}
		if (status == CTL_EXIT_OK) {
			status = watch_round(ctx, jobs, tty, &last, seen);
			json_decref(jobs);
			free(next);
			rest_response_clear(&single);
			if (status != CTL_EXIT_OK) {
				free(last);
				json_decref(seen);
				return status;
			}
		}
		usleep(JOBS_WATCH_INTERVAL_US);
	}
}

int cmd_run_jobs(cmd_ctx_t *ctx, int argc, char **argv)
{
	static const struct option long_opts[] = {
		COMMON_LONG_OPTS,
		{"state", required_argument, NULL, OPT_STATE},
		{"limit", required_argument, NULL, OPT_LIMIT},
		{"cursor", required_argument, NULL, OPT_CURSOR},
		{"all", no_argument, NULL, OPT_ALL},
		{"watch", no_argument, NULL, OPT_WATCH},
		{0, 0, 0, 0},
	};
	const cmd_t *cmd = cmd_find("jobs");
	cmd_opts_t opts = {0};
	int first, status;
	if (cmd_parse_options(ctx, cmd, argc, argv, ":haw", long_opts, &opts, &first, &status) < 0 ||
	    cmd_expect_args(cmd, argc, first, 0, &status) < 0)
		return status;
	if (opts.watch)
		return watch_jobs(ctx, &opts);

	json_t *jobs;
	char *next;
	rest_response_t single;
	if ((status = fetch_pages(ctx, "/v1/jobs", "jobs", &opts, &jobs, &next, &single)) != CTL_EXIT_OK)
		return status;
	if (ctx->json) {
		print_pages_json("jobs", jobs, next, &single);
	} else if ((status = print_jobs_table(jobs, stdout)) == CTL_EXIT_OK) {
		hint_more("jobs", next);
	}
	json_decref(jobs);
	free(next);
	rest_response_clear(&single);
	return status;
}

int cmd_run_events(cmd_ctx_t *ctx, int argc, char **argv)
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
	if (cmd_parse_options(ctx, cmd, argc, argv, ":ha", long_opts, &opts, &first, &status) < 0 ||
	    cmd_expect_args(cmd, argc, first, 1, &status) < 0)
		return status;
	char *path = cmd_job_path(ctx, argv[first], "/events");
	if (!path)
		return cmd_out_of_memory();
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
			status = cmd_out_of_memory();
			goto out;
		}
		size_t i;
		json_t *ev;
		json_array_foreach(events, i, ev) {
			char b[7][256];
			char at[64];
			const char *cells[7] = {
				cmd_field_text(ev, "id", b[0], sizeof b[0]),
				cmd_short_time(cmd_field_text(ev, "at", b[1], sizeof b[1]), at, sizeof at),
				cmd_field_text(ev, "type", b[2], sizeof b[2]),
				cmd_field_text(ev, "from", b[3], sizeof b[3]),
				cmd_field_text(ev, "to", b[4], sizeof b[4]),
				cmd_field_text(ev, "attempt", b[5], sizeof b[5]),
				cmd_field_text(ev, "reason", b[6], sizeof b[6]),
			};
			if (table_add_row(table, cells) < 0) {
				status = cmd_out_of_memory();
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
	char *text = table_sanitize(cmd_or_dash(cmd_value_text(value, buf, sizeof buf)), 0);
	if (!text)
		return cmd_out_of_memory();
	printf("%s:%*s %s\n", key, (int)(key_width - strlen(key)), "", text);
	free(text);
	return CTL_EXIT_OK;
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
		return cmd_out_of_memory();
	int status = CTL_EXIT_OK;
	size_t i;
	json_t *r;
	json_array_foreach(ranks, i, r) {
		char b[8][128];
		const json_t *dev = json_object_get(r, "device");
		const json_t *mem = json_object_get(r, "memory");
		const char *rank = cmd_field_text(r, "rank", b[1], sizeof b[1]);
		snprintf(b[0], sizeof b[0], "  %s", cmd_or_dash(rank));
		snprintf(b[2], sizeof b[2], "%s:%s", cmd_or_dash(cmd_field_text(dev, "kind", b[3], sizeof b[3])),
		         cmd_or_dash(cmd_field_text(dev, "index", b[4], sizeof b[4])));
		const char *cells[8] = {b[0], cmd_field_text(r, "node", b[1], sizeof b[1]), b[2],
		                        cmd_field_text(r, "state", b[3], sizeof b[3])};
		for (int k = 0; k < 4; k++)
			cells[4 + k] = cmd_bytes_text(json_object_get(mem, mem_keys[k]), b[4 + k], sizeof b[4 + k]);
		if (table_add_row(table, cells) < 0) {
			status = cmd_out_of_memory();
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
			return cmd_out_of_memory();
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

int cmd_run_show(cmd_ctx_t *ctx, int argc, char **argv)
{
	static const struct option long_opts[] = {COMMON_LONG_OPTS, {0, 0, 0, 0}};
	const cmd_t *cmd = cmd_find("show");
	cmd_opts_t opts = {0};
	int first, status;
	if (cmd_parse_options(ctx, cmd, argc, argv, ":h", long_opts, &opts, &first, &status) < 0 ||
	    cmd_expect_args(cmd, argc, first, 1, &status) < 0)
		return status;
	char *path = cmd_job_path(ctx, argv[first], "");
	if (!path)
		return cmd_out_of_memory();
	rest_response_t response;
	json_t *job;
	status = cmd_request_json(ctx, "GET", path, NULL, 0, NULL, &response, &job);
	free(path);
	if (status != CTL_EXIT_OK)
		return status;
	if (ctx->json)
		cmd_print_raw(&response);
	else
		status = print_job(job);
	json_decref(job);
	rest_response_clear(&response);
	return status;
}

int cmd_run_cancel(cmd_ctx_t *ctx, int argc, char **argv)
{
	static const struct option long_opts[] = {COMMON_LONG_OPTS, {0, 0, 0, 0}};
	const cmd_t *cmd = cmd_find("cancel");
	cmd_opts_t opts = {0};
	int first, status;
	if (cmd_parse_options(ctx, cmd, argc, argv, ":h", long_opts, &opts, &first, &status) < 0 ||
	    cmd_expect_args(cmd, argc, first, 1, &status) < 0)
		return status;
	char *path = cmd_job_path(ctx, argv[first], "/cancel");
	if (!path)
		return cmd_out_of_memory();
	rest_response_t response;
	json_t *job;
	status = cmd_request_json(ctx, "POST", path, NULL, 0, NULL, &response, &job);
	free(path);
	if (status != CTL_EXIT_OK)
		return status;
	if (ctx->json) {
		cmd_print_raw(&response);
	} else {
		char b1[128], b2[64];
		const char *id = cmd_field_text(job, "id", b1, sizeof b1);
		const char *state = cmd_field_text(job, "state", b2, sizeof b2);
		char *safe_id = table_sanitize(id ? id : argv[first], 0);
		printf("job %s: %s\n", safe_id ? safe_id : "-", state ? state : "-");
		free(safe_id);
	}
	json_decref(job);
	rest_response_clear(&response);
	return status;
}
