/*
 * export: `ringctl export`. It reads a snapshot from the checkpoint file
 * system (a `step-N` folder, a job's folder, or a job id: the snapshot is
 * read where the coordinator lists it, or under --root), verifies its
 * checksums and writes the model weights as one Hugging Face safetensors
 * file through snap_export_hf() (api/snapshot.h).
 */
#ifndef RINGCTL_EXPORT_H
#define RINGCTL_EXPORT_H

#include "commands.h"

/* The default checkpoint root when neither --root nor the environment says. */
#define EXPORT_DEFAULT_ROOT "/var/lib/ringmaster/checkpoints"

/*
 * Runs `ringctl export SNAPSHOT_DIR|JOB [--step N] [--root DIR] -o FILE`;
 * argv[0] is "export". Prints what it wrote (a JSON object with --json) and
 * returns a CTL_EXIT_* status: 1 for a missing, unreadable or corrupt
 * snapshot or a failed write (one line on stderr naming the path; a job
 * whose listed snapshot this host cannot read included), 64 for bad usage.
 */
int export_run(cmd_ctx_t *ctx, int argc, char **argv);

#endif
