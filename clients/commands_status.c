/*
 * commands_status: see commands_status.h. workers prints GET /v1/workers as
 * a table; metrics pages through GET /v1/jobs/{id}/metrics by since_step,
 * printing each new step once, and with --follow polls every second until
 * the job reaches a final state.
 */
#include "commands_status.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "commands_common.h"
#include "table.h"

/* ---- workers -------------------------------------------------------------- */

/* The first of keys that obj has, as text. */
static const char *first_field(const json_t *obj, const char *const *keys, char *buf, size_t buf_len)
{
	for (; *keys; keys++) {
		const char *t = cmd_field_text(obj, *keys, buf, buf_len);
		if (t)
			return t;
	}
	return NULL;
}

int cmd_run_workers(cmd_ctx_t *ctx, int argc, char **argv)
{
	static const struct option long_opts[] = {COMMON_LONG_OPTS, {0, 0, 0, 0}};
	const cmd_t *cmd = cmd_find("workers");
	cmd_opts_t opts = {0};
	int first, status;
	if (cmd_parse_options(ctx, cmd, argc, argv, ":h", long_opts, &opts, &first, &status) < 0 ||
	    cmd_expect_args(cmd, argc, first, 0, &status) < 0)
		return status;
	rest_response_t response;
	json_t *page;
	if ((status = cmd_request_json(ctx, "GET", "/v1/workers", NULL, 0, NULL, &response, &page)) !=
	    CTL_EXIT_OK)
		return status;
	if (ctx->json) {
		cmd_print_raw(&response);
		goto out;
	}
	static const char *const headers[] = {"ID", "STATE", "DEVICES", "RANKS", "LAST SEEN"};
	static const char *const id_keys[] = {"id", "node", "name", NULL};
	static const char *const seen_keys[] = {"last_heartbeat", "last_heartbeat_at", "last_seen_at",
	                                        "heartbeat_at", "updated_at", NULL};
	table_t *table = table_new(5, headers);
	if (!table) {
		status = cmd_out_of_memory();
		goto out;
	}
	size_t i;
	json_t *w;
	json_array_foreach(json_object_get(page, "workers"), i, w) {
		char b[5][256], seen[64];
		const json_t *devices = json_object_get(w, "devices");
		const char *n_devices = json_is_array(devices) ? b[2] : cmd_value_text(devices, b[2], sizeof b[2]);
		if (json_is_array(devices))
			snprintf(b[2], sizeof b[2], "%zu", json_array_size(devices));
		const char *cells[5] = {
			first_field(w, id_keys, b[0], sizeof b[0]),
			cmd_field_text(w, "state", b[1], sizeof b[1]),
			n_devices,
			cmd_field_text(w, "running_ranks", b[4], sizeof b[4]),
			cmd_short_time(first_field(w, seen_keys, b[3], sizeof b[3]), seen, sizeof seen),
		};
		if (table_add_row(table, cells) < 0) {
			status = cmd_out_of_memory();
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

int cmd_metrics_page(cmd_ctx_t *ctx, const char *base_path, long long *since, bool *header_done,
                        bool *ret_more)
{
	char *path = strdup(base_path);
	char since_text[32];
	snprintf(since_text, sizeof since_text, "%lld", *since);
	if (!path || cmd_path_add_query(ctx, &path, "since_step", since_text) < 0) {
		free(path);
		return cmd_out_of_memory();
	}
	rest_response_t response;
	json_t *page;
	int status = cmd_request_json(ctx, "GET", path, NULL, 0, NULL, &response, &page);
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

int cmd_run_metrics(cmd_ctx_t *ctx, int argc, char **argv)
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
	if (cmd_parse_options(ctx, cmd, argc, argv, ":hf", long_opts, &opts, &first, &status) < 0 ||
	    cmd_expect_args(cmd, argc, first, 1, &status) < 0)
		return status;
	char *path = cmd_job_path(ctx, argv[first], "/metrics");
	char *job = cmd_job_path(ctx, argv[first], "");
	if (!path || !job) {
		free(path);
		free(job);
		return cmd_out_of_memory();
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
			if ((status = cmd_request_json(ctx, "GET", job, NULL, 0, NULL, &response, &j)) != CTL_EXIT_OK)
				break;
			snprintf(state, sizeof state, "%s", cmd_or_empty(json_string_value(json_object_get(j, "state"))));
			if (cmd_state_is_final(state)) {
				const char *reason = json_string_value(json_object_get(j, "state_reason"));
				fprintf(stderr, "ringctl: job %s %s%s%s\n", argv[first], state, reason ? ": " : "",
				        cmd_or_empty(reason));
			}
			json_decref(j);
			rest_response_clear(&response);
		}
		do {
			status = cmd_metrics_page(ctx, path, &since, &header_done, &more);
		} while (status == CTL_EXIT_OK && more);
		if (status != CTL_EXIT_OK || !opts.follow)
			break;
		if (cmd_state_is_final(state)) {
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
