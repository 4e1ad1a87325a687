/*
 * commands_artifacts: see commands_artifacts.h. checkpoints prints GET
 * /v1/jobs/{id}/checkpoints as a table; trace fetches GET
 * /v1/jobs/{id}/trace (filtered by --attempt and --rank) and prints it, or
 * writes it to -o FILE through a temporary file renamed over it and prints
 * a one-line summary of what it holds.
 */
#include "commands_artifacts.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "commands_common.h"
#include "table.h"

/* ---- checkpoints ---------------------------------------------------------- */

int cmd_run_checkpoints(cmd_ctx_t *ctx, int argc, char **argv)
{
	static const struct option long_opts[] = {COMMON_LONG_OPTS, {0, 0, 0, 0}};
	const cmd_t *cmd = cmd_find("checkpoints");
	cmd_opts_t opts = {0};
	int first, status;
	if (cmd_parse_options(ctx, cmd, argc, argv, ":h", long_opts, &opts, &first, &status) < 0 ||
	    cmd_expect_args(cmd, argc, first, 1, &status) < 0)
		return status;
	char *path = cmd_job_path(ctx, argv[first], "/checkpoints");
	if (!path)
		return cmd_out_of_memory();
	rest_response_t response;
	json_t *doc;
	status = cmd_request_json(ctx, "GET", path, NULL, 0, NULL, &response, &doc);
	free(path);
	if (status != CTL_EXIT_OK)
		return status;
	if (ctx->json) {
		cmd_print_raw(&response);
		goto out;
	}
	static const char *const headers[] = {"STEP", "COMMITTED", "SIZE", "WORLD", "ATTEMPT", "PATH"};
	table_t *table = table_new(6, headers);
	if (!table) {
		status = cmd_out_of_memory();
		goto out;
	}
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(doc, "checkpoints"), i, c) {
		char b[6][256], when[64];
		const char *cells[6] = {
			cmd_field_text(c, "step", b[0], sizeof b[0]),
			cmd_short_time(cmd_field_text(c, "committed_at", b[1], sizeof b[1]), when, sizeof when),
			cmd_bytes_text(json_object_get(c, "bytes"), b[2], sizeof b[2]),
			cmd_field_text(c, "world_size", b[3], sizeof b[3]),
			cmd_field_text(c, "attempt", b[4], sizeof b[4]),
			cmd_field_text(c, "path", b[5], sizeof b[5]),
		};
		if (table_add_row(table, cells) < 0) {
			status = cmd_out_of_memory();
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
		cmd_out_of_memory();
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

int cmd_run_trace(cmd_ctx_t *ctx, int argc, char **argv)
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
	if (cmd_parse_options(ctx, cmd, argc, argv, ":ho:", long_opts, &opts, &first, &status) < 0 ||
	    cmd_expect_args(cmd, argc, first, 1, &status) < 0)
		return status;
	char *path = cmd_job_path(ctx, argv[first], "/trace");
	char num[32];
	if (path && opts.attempt > 0) {
		snprintf(num, sizeof num, "%ld", opts.attempt);
		if (cmd_path_add_query(ctx, &path, "attempt", num) < 0) {
			free(path);
			path = NULL;
		}
	}
	if (path && opts.has_rank) {
		snprintf(num, sizeof num, "%ld", opts.rank);
		if (cmd_path_add_query(ctx, &path, "rank", num) < 0) {
			free(path);
			path = NULL;
		}
	}
	if (!path)
		return cmd_out_of_memory();
	rest_response_t response;
	json_t *doc;
	status = cmd_request_json(ctx, "GET", path, NULL, 0, NULL, &response, &doc);
	free(path);
	if (status != CTL_EXIT_OK)
		return status;
	size_t n = response.body_bytes;
	while (n > 0 && (response.body[n - 1] == '\n' || response.body[n - 1] == '\r'))
		n--;
	if (!opts.output || strcmp(opts.output, "-") == 0) {
		cmd_print_raw(&response);
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
