/*
 * commands: see commands.h. This file holds the table of subcommands; each
 * lives with its family: commands_jobs.c (submit, jobs, events, show,
 * cancel), commands_follow.c (logs, wait), commands_artifacts.c (checkpoints, trace), commands_status.c
 * (workers, metrics) and export.c (export), on what commands_common.c
 * shares (options, requests, reading fields).
 */
#include "commands.h"

#include <string.h>

#include "commands_artifacts.h"
#include "commands_follow.h"
#include "commands_jobs.h"
#include "commands_status.h"
#include "commands_tokens.h"
#include "commands_workers.h"
#include "export.h"

/* ---- the command table ---------------------------------------------------- */

static const cmd_t commands[] = {
	{"submit", cmd_run_submit,
	 "[--idempotency-key KEY] [--quiet] [--wait [--metrics]] SPEC.json|-",
	 "Submit a job spec (a file, or - for stdin) and print the new job; --wait then prints its"
	 " log lines (or with --metrics its metrics rows) until it ends and exits as `wait` does."},
	{"jobs", cmd_run_jobs, "[--state STATE] [--limit N] [--cursor C] [--all] [--watch]",
	 "List jobs; --all follows every page, --state filters, --watch redraws the list when it"
	 " changes until Ctrl-C."},
	{"show", cmd_run_show, "ID", "Show one job: its state, timestamps and full spec."},
	{"cancel", cmd_run_cancel, "ID", "Cancel a job."},
	{"logs", cmd_run_logs, "[-f] [--rank R] [--attempt N] [--tail N] ID",
	 "Print a job's log lines (its ranks' stdout and stderr) as \"[rR aN out|err] text\"; -f"
	 " follows new lines until the job ends."},
	{"wait", cmd_run_wait, "[--timeout S] ID",
	 "Wait until a job ends: exit 0 if it succeeded, 3 if it failed, 4 if it was cancelled"
	 " (the cause on stderr), 5 after --timeout seconds."},
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
	{"token", cmd_run_token, "create --name N --role viewer|operator|admin [--expires 30d] | list | revoke NAME|ID",
	 "Manage API tokens (admin): create prints the new token once (store it), list shows them"
	 " without their secrets, revoke refuses one from the next request on."},
	{"dashboard", cmd_run_dashboard, "",
	 "Print the dashboard's address with a one-time login code (60 seconds) that signs a browser in."},
	{"worker", cmd_run_worker, "enroll [--uses N] [--expires DUR] | keys | add-key NAME PUBLIC_KEY | revoke ID",
	 "The workers' CURVE keys (admin): enroll prints a one-time join token for `ringworker agent"
	 " --join-token` (default 1 use, 1h); keys lists the enrolled keys; add-key enrolls an agent's"
	 " public key (its state folder's agent.pub); revoke drops that agent and refuses its key."},
	{"export", export_run, "SNAPSHOT_DIR|JOB [--step N] [--root DIR] [--dtype f32|bf16] -o PATH",
	 "Write a snapshot's model weights as one Hugging Face safetensors file, or for a Llama job a"
	 " folder with model.safetensors and config.json (reads the"
	 " checkpoint folder, verifies checksums; JOB's snapshot is where the coordinator lists it,"
	 " or under --root or $RINGMASTER_CHECKPOINT_ROOT when given)."},
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
