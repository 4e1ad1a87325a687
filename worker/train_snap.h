/*
 * train_snap: snapshots for the training loop (worker/train.c): taking
 * them (this rank's range of the parameters and AdamW state copied aside
 * and written by a writer thread, snapw, while training goes on), reporting
 * a written shard to the caller or, for one process alone, committing it
 * and applying retention (api/snapshot.c's snap_prune), and resuming from
 * the newest usable committed snapshot of the job (or an explicit folder
 * of another job's) at any world size and sharding. docs/snapshots.md has
 * the files; train.h's train_options_t the caller's side.
 *
 * The loop hands this module flat host buffers in the model's layout (its
 * tensor table, copied for the manifests); what lives where (a ZeRO shard,
 * the GPU) is the trainer's business. Errors are lines
 * "ringworker: error: ..." on opt->log; a snapshot that cannot be written
 * never stops training.
 */
#ifndef RINGMASTER_WORKER_TRAIN_SNAP_H
#define RINGMASTER_WORKER_TRAIN_SNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "tplayout.h"
#include "train.h"

typedef struct tsnap tsnap_t;

typedef struct {
	const jobspec_t *spec;       /* borrowed, for the manifest and retention */
	const train_options_t *opt;  /* borrowed: checkpoint_dir, the on_snapshot hooks, resume* */
	int world_size, rank;
	bool alone;                  /* one process without a comm: commits its own snapshots */
	int64_t global_batch;        /* sequences per step over all ranks, for the manifest */
	size_t n_params;
	const model_tensor_t *tensors; /* (n_tensors) the model's table, copied */
	int n_tensors;
} tsnap_setup_t;

/*
 * The snapshot state of one training run: with opt->checkpoint_dir, the
 * writer thread and the manifests' tensor table. RM_EXIT_OK with
 * *ret_snap set, or RM_EXIT_NOMEM (logged).
 */
int tsnap_new(const tsnap_setup_t *setup, tsnap_t **ret_snap);

/* Wait for a write in flight (not reported), free everything; accepts NULL. */
void tsnap_free(tsnap_t *s);

/*
 * Where resumed state goes: `count` floats of the snapshot's "params" from
 * element `params_lo` into params (the whole buffer, or a ZeRO-3 shard),
 * and AdamW's m and v of this rank's shard [lo, lo + count) into adam_m,
 * adam_v (shard-indexed).
 */
typedef struct {
	float *params;
	int64_t params_lo, params_count;
	float *adam_m, *adam_v;
	int64_t lo, count;
	/* Tensor parallelism: the ranges above are of this TP rank's LOCAL
	 * buffer and the snapshot holds the logical one (tplayout.h); NULL
	 * without TP (local = logical). Elements with no logical counterpart
	 * (padded vocabulary rows) are left as they are. */
	const tplayout_t *layout;
} tsnap_dest_t;

/*
 * opt->resume / opt->resume_dir: load the newest usable snapshot of the
 * job's own (rank 0 first removes committed folders past resume_upto),
 * else opt->resume_dir, into dest. *ret_start_step: 1 when starting fresh,
 * else the snapshot's step + 1, with *ret_cursor its data cursor (a global
 * sample index). RM_EXIT_* code (logged).
 */
int tsnap_resume(tsnap_t *s, const tsnap_dest_t *dest, int64_t *ret_start_step,
                 uint64_t *ret_cursor);

/* The time the resume took, in ms, and the snapshots it passed over as
 * corrupt ("step 30: ...; ...", borrowed; "" when none). */
double tsnap_load_ms(const tsnap_t *s);
const char *tsnap_skipped(const tsnap_t *s);

/* Whether a snapshot is due after `step` of n_steps with that loss:
 * checkpoint.every_steps, the last step, snapshots on, a finite loss. */
bool tsnap_due(const tsnap_t *s, int64_t step, int64_t n_steps, float loss);

/* The range of the flat buffer this rank writes (snap_shard_range): its
 * ZeRO shard, or under `none` the same slice, so that all ranks write in
 * parallel and the layout is one for every mode. */
void tsnap_range(const tsnap_t *s, int64_t *ret_lo, int64_t *ret_count);

/*
 * Taking the snapshot of `step`, in two calls around the trainer's copy of
 * its state to the host: tsnap_begin waits for the write in flight (at
 * most one) and makes step-<N>.tmp; false when it cannot (logged and
 * reported, skip the snapshot). tsnap_submit then queues this rank's
 * range (tsnap_range's count floats each of params, m and v; all NULL when
 * the count is 0) with the data cursor after the step.
 */
bool tsnap_begin(tsnap_t *s, int64_t step);
void tsnap_submit(tsnap_t *s, int64_t step, const float *params, const float *adam_m,
                  const float *adam_v, uint64_t cursor);

/* Report the write in flight once it is done (on_snapshot, or committed
 * alone); with `wait`, wait for it. */
void tsnap_poll(tsnap_t *s, bool wait);

#endif
