/*
 * commands_follow: see commands_follow.h. Following is polling, never a
 * stream: every FOLLOW_POLL_INTERVAL_US, read the job's state first, then
 * page through what is new since the last answer (log lines by their seq,
 * with GET /v1/jobs/{id}/logs?since=SEQ; metrics rows by step). Reading the
 * state before the lines means that a job seen final has all its lines
 * committed but for those an agent still had in flight, so one more poll
 * is made after the final state before stopping. Polling the JSON form
 * survives a coordinator restart and a proxy that buffers, where a held
 * SSE response would not.
 */
#include "commands_follow.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "commands_common.h"
#include "commands_status.h"
#include "table.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Prints one log line: "[r0 a1 out] text" (the JSON line itself with
 * --json). On a terminal, control characters in text become '?'. */
static int print_log_line(const cmd_ctx_t *ctx, const json_t *line, bool tty)
{
	if (ctx->json) {
		char *text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER);
		if (!text)
			return cmd_out_of_memory();
		printf("%s\n", text);
		free(text);
		return CTL_EXIT_OK;
	}
	char b[2][32];
	const char *stream = json_string_value(json_object_get(line, "stream"));
	const char *text = cmd_or_empty(json_string_value(json_object_get(line, "text")));
	char *safe = tty ? table_sanitize(text, 0) : NULL;
	if (tty && !safe)
		return cmd_out_of_memory();
	printf("[r%s a%s %s] %s\n", cmd_or_dash(cmd_field_text(line, "rank", b[0], sizeof b[0])),
	       cmd_or_dash(cmd_field_text(line, "attempt", b[1], sizeof b[1])),
	       stream && strcmp(stream, "stderr") == 0 ? "err" : "out", safe ? safe : text);
	free(safe);
	return CTL_EXIT_OK;
}

/* State of one log follow. */
typedef struct {
	char *base_path;    /* /v1/jobs/{id}/logs */
	long long since;    /* seq of the last line printed */
	bool first;         /* no request made yet (tail applies to it) */
	long long dropped;  /* as last reported, to say it once */
	bool tty;
} logs_cursor_t;

/*
 * One GET of the job's logs after cur->since (or its tail, the first
 * time): prints the lines and moves cur->since on. *ret_n: lines printed.
 */
static int logs_page(cmd_ctx_t *ctx, const char *id, const cmd_follow_opts_t *o, logs_cursor_t *cur,
                     size_t *ret_n)
{
	char num[3][32];
	char *path = strdup(cur->base_path);
	snprintf(num[0], sizeof num[0], "%ld", o->rank);
	snprintf(num[1], sizeof num[1], "%ld", o->attempt);
	if (cur->first && o->tail > 0)
		snprintf(num[2], sizeof num[2], "%ld", o->tail);
	else
		snprintf(num[2], sizeof num[2], "%lld", cur->since);
	if (!path || (o->has_rank && cmd_path_add_query(ctx, &path, "rank", num[0]) < 0) ||
	    (o->attempt > 0 && cmd_path_add_query(ctx, &path, "attempt", num[1]) < 0) ||
	    cmd_path_add_query(ctx, &path, cur->first && o->tail > 0 ? "tail" : "since", num[2]) < 0) {
		free(path);
		return cmd_out_of_memory();
	}
	rest_response_t response;
	json_t *page;
	int status = cmd_request_json(ctx, "GET", path, NULL, 0, NULL, &response, &page);
	free(path);
	if (status != CTL_EXIT_OK)
		return status;
	cur->first = false;
	size_t i, n = 0;
	json_t *line;
	json_array_foreach(json_object_get(page, "lines"), i, line) {
		json_int_t seq = json_integer_value(json_object_get(line, "seq"));
		if (json_is_integer(json_object_get(line, "seq")) && seq <= cur->since)
			continue; /* seen already */
		if ((status = print_log_line(ctx, line, cur->tty)) != CTL_EXIT_OK)
			break;
		if (seq > cur->since)
			cur->since = seq;
		n++;
	}
	const json_t *next = json_object_get(page, "next");
	if (json_is_integer(next) && json_integer_value(next) > cur->since)
		cur->since = json_integer_value(next);
	const json_t *dropped = json_object_get(page, "dropped");
	if (json_is_integer(dropped) && json_integer_value(dropped) > cur->dropped) {
		cur->dropped = json_integer_value(dropped);
		fprintf(stderr, "ringctl: the coordinator has dropped %lld lines of job %s (past its"
		        " per-job cap); they are not shown\n", cur->dropped, id);
	}
	fflush(stdout);
	json_decref(page);
	rest_response_clear(&response);
	*ret_n = n;
	return status;
}

/* Reads job_path's state into state (NUL-terminated, "" when absent). */
static int read_state(cmd_ctx_t *ctx, const char *job_path, char *state, size_t state_len)
{
	rest_response_t response;
	json_t *job;
	int status = cmd_request_json(ctx, "GET", job_path, NULL, 0, NULL, &response, &job);
	if (status != CTL_EXIT_OK)
		return status;
	snprintf(state, state_len, "%s", cmd_or_empty(json_string_value(json_object_get(job, "state"))));
	json_decref(job);
	rest_response_clear(&response);
	return CTL_EXIT_OK;
}

/* Prints everything new: log pages until one brings nothing new (the
 * server may answer fewer than its page size of 1000 and still have more),
 * metrics pages until the server has no more. */
static int drain(cmd_ctx_t *ctx, const char *id, const cmd_follow_opts_t *o, logs_cursor_t *logs,
                 const char *metrics_path, long long *step_since, bool *header_done)
{
	int status = CTL_EXIT_OK;
	if (o->what == FOLLOW_LOGS) {
		size_t n;
		do {
			status = logs_page(ctx, id, o, logs, &n);
		} while (status == CTL_EXIT_OK && n > 0);
	} else if (o->what == FOLLOW_METRICS) {
		bool more;
		do {
			status = cmd_metrics_page(ctx, metrics_path, step_since, header_done, &more);
		} while (status == CTL_EXIT_OK && more);
	}
	return status;
}

int cmd_follow_job(cmd_ctx_t *ctx, const char *id, const cmd_follow_opts_t *o, char *ret_state,
                   size_t state_len)
{
	logs_cursor_t logs = {.first = true, .tty = isatty(STDOUT_FILENO) == 1};
	char *job_path = cmd_job_path(ctx, id, "");
	char *metrics_path = cmd_job_path(ctx, id, "/metrics");
	logs.base_path = cmd_job_path(ctx, id, "/logs");
	long long step_since = 0;
	bool header_done = false;
	int status = CTL_EXIT_OK;
	double deadline = o->timeout_s > 0 ? now_s() + o->timeout_s : INFINITY;
	ret_state[0] = '\0';
	if (!job_path || !metrics_path || !logs.base_path) {
		status = cmd_out_of_memory();
		goto out;
	}
	for (;;) {
		if (o->follow && (status = read_state(ctx, job_path, ret_state, state_len)) != CTL_EXIT_OK)
			break;
		if ((status = drain(ctx, id, o, &logs, metrics_path, &step_since, &header_done)) != CTL_EXIT_OK ||
		    !o->follow)
			break;
		if (cmd_state_is_final(ret_state)) {
			/* Lines an agent sent as its ranks exited may land just after
			 * the final state: one more poll for them. */
			if (o->what != FOLLOW_NOTHING) {
				usleep(FOLLOW_POLL_INTERVAL_US);
				status = drain(ctx, id, o, &logs, metrics_path, &step_since, &header_done);
			}
			break;
		}
		if (now_s() >= deadline) {
			fprintf(stderr, "ringctl: job %s is still %s after %g s (--timeout)\n", id,
			        ret_state[0] ? ret_state : "not final", o->timeout_s);
			status = CTL_EXIT_TIMEOUT;
			break;
		}
		usleep(FOLLOW_POLL_INTERVAL_US);
	}
out:
	free(job_path);
	free(metrics_path);
	free(logs.base_path);
	return status;
}

/* The reason of the job's last event that has one, as a copy to free; NULL
 * when none (or a request failed: the error is printed). */
static char *last_event_reason(cmd_ctx_t *ctx, const char *id)
{
	char *base = cmd_job_path(ctx, id, "/events");
	char *cursor = NULL, *reason = NULL;
	for (int pages = 0; base && pages < 1000; pages++) {
		char *path = strdup(base);
		if (!path || cmd_path_add_query(ctx, &path, "limit", "500") < 0 ||
		    (cursor && cmd_path_add_query(ctx, &path, "cursor", cursor) < 0)) {
			free(path);
			break;
		}
		rest_response_t response;
		json_t *page;
		int status = cmd_request_json(ctx, "GET", path, NULL, 0, NULL, &response, &page);
		free(path);
		if (status != CTL_EXIT_OK)
			break;
		size_t i;
		json_t *ev;
		json_array_foreach(json_object_get(page, "events"), i, ev) {
			const char *r = json_string_value(json_object_get(ev, "reason"));
			if (r && r[0]) {
				free(reason);
				reason = strdup(r);
			}
		}
		const char *next = json_string_value(json_object_get(page, "next_cursor"));
		bool more = next && next[0] && !(cursor && strcmp(cursor, next) == 0);
		free(cursor);
		cursor = more ? strdup(next) : NULL;
		json_decref(page);
		rest_response_clear(&response);
		if (!cursor)
			break;
	}
	free(cursor);
	free(base);
	return reason;
}

int cmd_job_end_status(cmd_ctx_t *ctx, const char *id, const char *state)
{
	if (strcmp(state, "succeeded") == 0)
		return CTL_EXIT_OK;
	int status = strcmp(state, "cancelled") == 0 ? CTL_EXIT_JOB_CANCELLED : CTL_EXIT_JOB_FAILED;
	char *reason = NULL;
	char *path = cmd_job_path(ctx, id, "");
	rest_response_t response;
	json_t *job;
	if (path && cmd_request_json(ctx, "GET", path, NULL, 0, NULL, &response, &job) == CTL_EXIT_OK) {
		const char *r = json_string_value(json_object_get(job, "state_reason"));
		reason = r && r[0] ? strdup(r) : NULL;
		json_decref(job);
		rest_response_clear(&response);
	}
	free(path);
	if (!reason)
		reason = last_event_reason(ctx, id);
	char *safe = table_sanitize(reason ? reason : "no reason recorded", 0);
	fprintf(stderr, "ringctl: job %s %s: %s\n", id, state, safe ? safe : "?");
	free(safe);
	free(reason);
	return status;
}

int cmd_run_logs(cmd_ctx_t *ctx, int argc, char **argv)
{
	static const struct option long_opts[] = {
		COMMON_LONG_OPTS,
		{"follow", no_argument, NULL, OPT_FOLLOW},
		{"rank", required_argument, NULL, OPT_RANK},
		{"attempt", required_argument, NULL, OPT_ATTEMPT},
		{"tail", required_argument, NULL, OPT_TAIL},
		{0, 0, 0, 0},
	};
	const cmd_t *cmd = cmd_find("logs");
	cmd_opts_t opts = {0};
	int first, status;
	if (cmd_parse_options(ctx, cmd, argc, argv, ":hf", long_opts, &opts, &first, &status) < 0 ||
	    cmd_expect_args(cmd, argc, first, 1, &status) < 0)
		return status;
	const cmd_follow_opts_t o = {
		.what = FOLLOW_LOGS, .follow = opts.follow, .rank = opts.rank, .has_rank = opts.has_rank,
		.attempt = opts.attempt, .tail = opts.tail,
	};
	char state[32];
	status = cmd_follow_job(ctx, argv[first], &o, state, sizeof state);
	if (status == CTL_EXIT_OK && opts.follow)
		fprintf(stderr, "ringctl: job %s %s\n", argv[first], state);
	return status;
}

int cmd_run_wait(cmd_ctx_t *ctx, int argc, char **argv)
{
	static const struct option long_opts[] = {
		COMMON_LONG_OPTS,
		{"timeout", required_argument, NULL, OPT_TIMEOUT},
		{0, 0, 0, 0},
	};
	const cmd_t *cmd = cmd_find("wait");
	cmd_opts_t opts = {0};
	int first, status;
	if (cmd_parse_options(ctx, cmd, argc, argv, ":h", long_opts, &opts, &first, &status) < 0 ||
	    cmd_expect_args(cmd, argc, first, 1, &status) < 0)
		return status;
	const cmd_follow_opts_t o = {.what = FOLLOW_NOTHING, .follow = true, .timeout_s = opts.timeout_s};
	char state[32];
	if ((status = cmd_follow_job(ctx, argv[first], &o, state, sizeof state)) != CTL_EXIT_OK)
		return status;
	status = cmd_job_end_status(ctx, argv[first], state);
	if (status == CTL_EXIT_OK) {
		char *safe = table_sanitize(argv[first], 0);
		printf("job %s: %s\n", safe ? safe : "-", state);
		free(safe);
	}
	return status;
}
