/*
 * commands_common: what every ringctl subcommand shares (see commands.h for
 * the subcommands themselves): the option parser that knows every option of
 * every command, the REST call that deals with every failure and prints it,
 * and tolerant readers that turn JSON fields into table cells. The
 * subcommands live by family in commands_jobs.c (submit, jobs, events, show,
 * cancel), commands_artifacts.c (checkpoints, trace) and commands_status.c
 * (workers, metrics); commands.c holds the table of them.
 */
#ifndef RINGCTL_COMMANDS_COMMON_H
#define RINGCTL_COMMANDS_COMMON_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "commands.h"
#include "rest.h"

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
	OPT_TAIL,
	OPT_TIMEOUT,
	OPT_WAIT,
	OPT_METRICS,
	OPT_WATCH,
};

/* Options of every command, as parsed by cmd_parse_options(). */
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
	long attempt;       /* trace, logs: only this attempt; 0: all */
	long tail;          /* logs: only the last N lines; 0: all */
	double timeout_s;   /* wait: give up after this many seconds; 0: never */
	bool wait;          /* submit: follow the job until it ends */
	bool metrics;       /* submit --wait: print metrics rows rather than log lines */
	bool watch;         /* jobs: redraw the list when it changes, until Ctrl-C */
} cmd_opts_t;

#define COMMON_LONG_OPTS                                                                           \
	{"json", no_argument, NULL, OPT_JSON}, {"server", required_argument, NULL, OPT_SERVER},        \
		{"help", no_argument, NULL, OPT_HELP}

/* Prints "ringctl: <fmt with arg>" and the command's usage line on stderr;
 * returns CTL_EXIT_USAGE. */
int cmd_usage_error(const char *cmd, const char *usage, const char *fmt, const char *arg);

/*
 * Parses argv (argv[0] = command name) against long_opts. On success the
 * positional arguments are left in argv[*ret_first ..argc-1] and 0 is
 * returned; --help prints the usage and returns -1 with *ret_exit = 0; a bad
 * option returns -1 with *ret_exit = CTL_EXIT_USAGE.
 */
int cmd_parse_options(cmd_ctx_t *ctx, const cmd_t *cmd, int argc, char **argv,
                      const char *short_opts, const struct option *long_opts, cmd_opts_t *opts,
                      int *ret_first, int *ret_exit);

/* Checks that exactly n_args positional arguments remain: 0, or -1 with
 * *ret_exit = CTL_EXIT_USAGE after printing why. */
int cmd_expect_args(const cmd_t *cmd, int argc, int first, int n_args, int *ret_exit);

/* ctx's client, made on first use with ctx's server, token and CA file;
 * NULL when out of memory. */
rest_client_t *cmd_client(cmd_ctx_t *ctx);

/*
 * Sends a request and checks the answer. On success returns CTL_EXIT_OK with
 * the parsed JSON body in *ret_json (owned by the caller) and the raw response
 * in *ret_response (clear it with rest_response_clear). Otherwise prints one
 * line on stderr and returns the exit status; nothing is returned.
 */
int cmd_request_json(cmd_ctx_t *ctx, const char *method, const char *path, const char *body,
                     size_t body_bytes, const char *idempotency_key,
                     rest_response_t *ret_response, json_t **ret_json);

/* Returns "/v1/jobs/<escaped id><suffix>" (caller frees), or NULL. Makes
 * ctx's client when it has none. */
char *cmd_job_path(cmd_ctx_t *ctx, const char *id, const char *suffix);

/* Appends "<sep>key=<escaped value>" to a malloc'ed path; returns 0 or -ENOMEM. */
int cmd_path_add_query(cmd_ctx_t *ctx, char **path, const char *key, const char *value);

/* Whether state is one a job never leaves: succeeded, failed or cancelled. */
bool cmd_state_is_final(const char *state);

/* Prints "ringctl: out of memory" and returns CTL_EXIT_FAILED. */
int cmd_out_of_memory(void);

/* Prints a body as the server sent it, ending with exactly one newline. */
void cmd_print_raw(const rest_response_t *response);

/*
 * Text for a JSON value: strings as they are, numbers and booleans printed,
 * objects and arrays as compact JSON, NULL/null as NULL. The result points
 * into buf or into the value; it lives as long as both. cmd_field_text() is
 * the same for obj's member key.
 */
const char *cmd_value_text(const json_t *v, char *buf, size_t buf_len);
const char *cmd_field_text(const json_t *obj, const char *key, char *buf, size_t buf_len);

/* s, or "" (cmd_or_empty) or "-" (cmd_or_dash) for NULL. */
const char *cmd_or_empty(const char *s);
const char *cmd_or_dash(const char *s);

/* "2025-06-01T12:00:00.123456Z" -> "2025-06-01T12:00:00Z" (into buf);
 * anything else as is; NULL for NULL. */
const char *cmd_short_time(const char *t, char *buf, size_t buf_len);

/* "1.5 MiB" for a byte count (a JSON integer); NULL for anything else. */
const char *cmd_bytes_text(const json_t *v, char *buf, size_t buf_len);

#endif
