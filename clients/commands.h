/*
 * commands: ringctl's subcommands (submit, jobs, show, cancel, events,
 * logs, wait, metrics, checkpoints, trace, workers, export). Each parses its own options, makes its REST call(s) through
 * rest.c and prints either an aligned table (table.c) or, with --json, the
 * server's JSON for scripts. ringctl.c only parses the global options and
 * dispatches here. commands.c holds the table; the commands live by family
 * in commands_jobs.c, commands_artifacts.c, commands_status.c and export.c,
 * on the helpers of commands_common.c.
 */
#ifndef RINGCTL_COMMANDS_H
#define RINGCTL_COMMANDS_H

#include <stdbool.h>
#include <stdio.h>

#include "rest.h"

/* Exit statuses, documented in docs/ringctl.md. */
enum {
	CTL_EXIT_OK = 0,
	CTL_EXIT_FAILED = 1,      /* the server refused (HTTP error) or a local error */
	CTL_EXIT_UNREACHABLE = 2, /* no HTTP answer from the server */
	CTL_EXIT_JOB_FAILED = 3,    /* wait, submit --wait: the job ended failed */
	CTL_EXIT_JOB_CANCELLED = 4, /* wait, submit --wait: the job ended cancelled */
	CTL_EXIT_TIMEOUT = 5,       /* wait --timeout: the job had not ended in time */
	CTL_EXIT_USAGE = 64,      /* bad command line (sysexits.h EX_USAGE) */
};

typedef struct {
	const char *server;    /* base URL; borrowed, may be replaced by --server */
	const char *token;     /* bearer token or NULL; borrowed */
	const char *cacert;    /* --cacert: CA file for https servers, or NULL (the system's); borrowed */
	bool json;             /* print the server's JSON instead of tables */
	rest_client_t *client; /* made on first request; owned */
} cmd_ctx_t;

/* Runs one subcommand; argv[0] is its name. Returns a CTL_EXIT_* status. */
typedef int (*cmd_fn_t)(cmd_ctx_t *ctx, int argc, char **argv);

typedef struct {
	const char *name;
	cmd_fn_t run;
	const char *usage;   /* arguments after the name, for the usage line */
	const char *summary; /* one line for --help */
} cmd_t;

/* The subcommand called name, or NULL. Returns a pointer into a static table. */
const cmd_t *cmd_find(const char *name);

/* Prints "  NAME USAGE\n      SUMMARY" for every subcommand to out. */
void cmd_print_list(FILE *out);

/* Frees what ctx owns (its client); the borrowed strings are left alone. */
void cmd_ctx_clear(cmd_ctx_t *ctx);

#endif
