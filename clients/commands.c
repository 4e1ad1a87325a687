/*
 * commands: see commands.h. This file holds the table of subcommands; each
 * lives with its family: commands_jobs.c (submit, jobs, events, show,
 * cancel), commands_artifacts.c (checkpoints, trace), commands_status.c
 * (workers, metrics) and export.c (export), on what commands_common.c
 * shares (options, requests, reading fields).
 */
#include "commands.h"

#include <string.h>

#include "commands_artifacts.h"
#include "commands_jobs.h"
#include "commands_status.h"
#include "export.h"

/* ---- the command table ---------------------------------------------------- */

static const cmd_t commands[] = {
	{"submit", cmd_run_submit, "[--idempotency-key KEY] [--quiet] SPEC.json|-",
	 "Submit a job spec (a file, or - for stdin) and print the new job."},
	{"jobs", cmd_run_jobs, "[--state STATE] [--limit N] [--cursor C] [--all]",
	 "List jobs; --all follows every page, --state filters."},
	{"show", cmd_run_show, "ID", "Show one job: its state, timestamps and full spec."},
	{"cancel", cmd_run_cancel, "ID", "Cancel a job."},
	{"events", cmd_run_events, "[--limit N] [--cursor C] [--all] ID",
	 "List a job's events (state changes with their reasons)."},
	{"metrics", cmd_run_metrics, "[--since STEP] [--follow] ID",
	 "Print a job's training metrics (step, loss, validation loss, lr, tokens/s); --follow keeps"
	 " printing new steps until the job ends, then exits 0 if it succeeded."},
	{"checkpoints", cmd_run_checkpoints, "ID",
	 "List a job's committed checkpoints, newest first (step, time, size, path)."},
	{"trace", cmd_run_trace, "[-o FILE] [--rank R] [--attempt N] ID",
	 "Download the Chrome trace of a job's profiled steps (its spec's profile range) to FILE"
	 " (default: stdout); open it in https://ui.perfetto.dev."},
	{"workers", cmd_run_workers, "", "List the worker nodes known to the coordinator."},
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
