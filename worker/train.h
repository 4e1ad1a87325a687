/*
 * train: the training loop every rank runs; today one process on the CPU
 * (`ringworker train`), later one rank of a data-parallel group.
 *
 * From a validated job spec it builds the GPT-2 model (worker/engine), opens
 * the data (worker/data), and runs train.steps optimizer steps: each step
 * computes gradients over grad_accum micro-batches, reduces them (a no-op on
 * one rank; the place where ranks will all-reduce or reduce-scatter), clips
 * them to the global norm train.grad_clip, and applies AdamW to a range of
 * the flat parameter buffer (the whole buffer on one rank; a ZeRO shard
 * later). It prints one line per step and a summary; see docs/training.md
 * for the output formats and the exit codes below.
 */
#ifndef RINGMASTER_WORKER_TRAIN_H
#define RINGMASTER_WORKER_TRAIN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "jobspec.h"

/* Exit statuses of `ringworker train` (documented in docs/training.md). */
enum {
	TRAIN_EXIT_OK = 0,
	TRAIN_EXIT_USAGE = 1,    /* bad command line, or an internal error */
	TRAIN_EXIT_SPEC = 2,     /* the job spec is unreadable or invalid */
	TRAIN_EXIT_DATA = 3,     /* a data file is missing, short, corrupt or out of vocabulary */
	TRAIN_EXIT_NOMEM = 4,    /* the model, batch or data does not fit in memory */
	TRAIN_EXIT_DIVERGED = 5, /* the loss became NaN or infinite */
};

typedef struct {
	const char *data_root; /* relative data paths resolve against it; NULL: the current directory */
	int64_t steps;         /* steps to run; 0: train.steps. The lr schedule stays the spec's. */
	bool json;             /* one JSON object per step on `out`; header and summary on `log` */
	FILE *out;             /* step lines (stdout) */
	FILE *log;             /* errors, and the header and summary in JSON mode (stderr) */
	const char *spec_name; /* shown in the header ("jobs/x.json", "embedded default") */
	const char *missing_data_hint; /* appended to "no such file" data errors, or NULL */
} train_options_t;

/*
 * Train as `spec` says (borrowed). Returns one of the TRAIN_EXIT_* codes;
 * on failure one line "ringworker: error: ..." naming the file or field has
 * gone to opt->log.
 */
int train_run(const jobspec_t *spec, const train_options_t *opt);

#endif
