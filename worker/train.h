/*
 * train: the training loop every rank runs: one process on the CPU
 * (`ringworker train`), or one rank of a data-parallel group when given a
 * communicator (worker/comm).
 *
 * From a validated job spec it builds the model of model.arch on the
 * spec's device (worker/engine/model.h's registry), opens
 * the data (worker/data), and runs train.steps optimizer steps: each step
 * computes gradients over grad_accum micro-batches of this rank's slice of
 * the global batch, all-reduces them so that every rank holds the mean
 * gradient of the global batch (nothing to do on one rank), clips them to
 * the global norm train.grad_clip, and applies AdamW to the flat parameter
 * buffer (the whole buffer, identically on every rank; or, with
 * parallel.sharding zero1/zero2/zero3, each rank its own shard: see
 * docs/training.md).
 * It prints one line per step and a summary; see docs/training.md for the
 * output formats, the exit codes below, and how results compare across
 * world sizes. With parallel.device "cuda" the same loop runs the engine
 * on the process's CUDA device 0 (docs/gpu.md, "Training on a GPU").
 */
#ifndef RINGMASTER_WORKER_TRAIN_H
#define RINGMASTER_WORKER_TRAIN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "comm.h"
#include "exitcode.h"
#include "jobspec.h"
#include "snapshot.h"
#include "trace.h"

/* Exit statuses of `ringworker train` and of a rank are api/exitcode.h's
 * RM_EXIT_* (documented in docs/training.md). */

/* One optimizer step, as every rank reports it (the loss is the mean over
 * ranks, the same on all of them). */
typedef struct {
	int64_t step;        /* 1-based */
	double loss;
	double lr;
	double grad_norm;
	double tokens_per_s; /* of the whole job (all ranks) */
	double ms;           /* wall time of the step */
	double val_loss;     /* NaN unless validation ran after this step */
	double flops_per_token; /* the model's training FLOPs per token (MFU's numerator / tokens) */

	/* What this rank holds, in bytes (the same at every step): parameters
	 * (the full replica with its bf16 copy; under zero3 the master shard and
	 * two gather slots), gradients (the engine's full buffer, plus the
	 * reduced shard under zero1; under zero2/zero3 the shard and the bucket
	 * buffers) and AdamW's m and v (the whole buffer, or this rank's
	 * shard). */
	size_t params_bytes;
	size_t grads_bytes;
	size_t optim_bytes;
	size_t activations_bytes; /* the engine's activation arena */
	/* The flat parameter buffer after this step (borrowed, valid only during
	 * on_step; every rank holds the same bits; NULL under zero3 and on cuda
	 * unless opt->report_params) and its length; n_params_padded is it
	 * rounded up to a multiple of the world size when sharded. */
	const float *params;
	size_t n_params;
	size_t n_params_padded;

	/* On the first step of a run that resumed from a snapshot (else
	 * resumed_from_step 0): the snapshot's step, the time loading it took,
	 * and the committed snapshots passed over as corrupt ("step 30:
	 * rank-1-of-2.safetensors: checksum mismatch; ...", borrowed; "" when
	 * none). */
	int64_t resumed_from_step;
	double load_ms;
	const char *snapshot_skipped;
} train_report_t;

/* This rank's shard of a snapshot, written and fsync'ed (docs/snapshots.md). */
typedef struct {
	int64_t step;
	const char *tmp_dir;             /* <checkpoint_dir>/step-<N>.tmp: the shards */
	const char *final_dir;           /* <checkpoint_dir>/step-<N>: after the commit */
	const snap_shard_info_t *shard;  /* this rank's file: name, bytes, XXH3 */
	const snap_manifest_t *manifest; /* everything but the files, for the committer */
	double write_ms;                 /* the writer thread's time */
} train_snapshot_t;

typedef struct {
	const char *data_root; /* data paths resolve beneath it, confined (data.h); NULL: as given, unconfined */
	int64_t steps;         /* steps to run; 0: train.steps. The lr schedule stays the spec's. */
	bool json;             /* one JSON object per step on `out`; header and summary on `log` */
	FILE *out;             /* step lines (stdout) */
	FILE *log;             /* errors, and the header and summary in JSON mode (stderr) */
	const char *spec_name; /* shown in the header ("jobs/x.json", "embedded default") */
	const char *missing_data_hint; /* appended to "no such file" data errors, or NULL */

	/* Data parallelism. comm NULL: one rank (rank 0, world_size 1), and
	 * spec->parallel.world_size is ignored. Otherwise (borrowed) this process
	 * is `rank` (must equal comm_rank(comm)) of comm_world_size(comm) ranks,
	 * which must equal spec->parallel.world_size: it takes its interleaved
	 * slice of each global batch and gradients are averaged over ranks every
	 * step. parallel.sharding "none" all-reduces the gradients and every
	 * rank updates the whole buffer; "zero1", "zero2" and "zero3"
	 * reduce-scatter them (zero2/zero3 range by range during backward),
	 * each rank keeps AdamW state for and updates only its 1/W shard, and
	 * the parameters are all-gathered (zero3: range by range before each
	 * use, never as a whole).
	 * Without a comm, parallel.sharding is ignored. With parallel.device
	 * cuda the comm must be an NCCL comm on device 0 (comm_nccl_new), else
	 * a Gloo comm. After a failed collective
	 * train_run calls comm_abort(comm), so that the other ranks fail at once,
	 * and returns RM_EXIT_COMM. */
	comm_t *comm;
	int rank;
	/* Tensor parallelism (spec->parallel.tensor t > 1; docs/training.md "2D
	 * parallelism"): tp_comm (borrowed) is this rank's tensor-parallel
	 * group of t ranks, and comm/rank above are its DATA-parallel group
	 * (d = world_size / t ranks; a group of one when d = 1) and its place
	 * there; world_rank is its rank in the job (snapshot files are the
	 * job's: rank-<world_rank>-of-<world_size>). NULL with t = 1. */
	comm_t *tp_comm;
	int world_rank;
	/* No header, step lines or summary, on `out` or `log` (ranks other than
	 * 0 in a group); errors still go to `log`. */
	bool quiet;
	/* Called on every rank after every step (after its validation, if any,
	 * and also for a step whose loss is not finite, before train_run stops
	 * with RM_EXIT_DIVERGED); a non-zero return stops training (train_run
	 * then returns RM_EXIT_ABORTED without a message). NULL: none. */
	int (*on_step)(void *ctx, const train_report_t *report);
	void *on_step_ctx;
	/* Give on_step the whole parameter replica under zero3 too (gathered
	 * from the shards each step, for tests) and on cuda (copied from the
	 * GPU each step); otherwise report->params is NULL there. */
	bool report_params;

	/* Snapshots. checkpoint_dir: the job's folder; every
	 * checkpoint.every_steps steps and after the last one, each rank copies
	 * its range of the parameters and AdamW state aside and a writer thread
	 * writes it to step-<N>.tmp/ there while training goes on (at most one
	 * in flight: the next waits). NULL: no snapshots. When a shard is on
	 * disk, on_snapshot is called on the training thread (at the next step
	 * or before train_run returns); the caller reports it and rank 0 later
	 * commits the snapshot (snap_commit with the manifest completed by the
	 * files) once every rank's shard is in. on_snapshot NULL, without a
	 * comm: the shard is committed at once and retention
	 * (checkpoint.keep_last, keep_every) applied. A failed write is an
	 * error line on `log` and training goes on (the snapshot is never
	 * committed). */
	const char *checkpoint_dir;
	int (*on_snapshot)(void *ctx, const train_snapshot_t *snap);
	/* This rank's shard of `step` could not be written (`error`: one line,
	 * also logged); the snapshot never commits. Training goes on. NULL:
	 * only the log line. Called with on_snapshot_ctx. */
	void (*on_snapshot_failed)(void *ctx, int64_t step, const char *error);
	void *on_snapshot_ctx;
	/* Start from the newest committed snapshot in checkpoint_dir whose
	 * checksums verify (older ones are tried when the newest is corrupt),
	 * at any world size; none there: start fresh. The run then goes from
	 * that step + 1 to the end, with the data cursor and optimizer state
	 * restored, and its losses are the bits an uninterrupted run gives at
	 * the same world size. */
	bool resume;
	/* With resume: only snapshots of steps <= resume_upto (the coordinator's
	 * latest recorded checkpoint; 0: none, start fresh); rank 0 removes the
	 * committed folders past it (renamed, never recorded). Negative: no
	 * bound. */
	int64_t resume_upto;
	/* An explicit committed snapshot folder to start from (another job's:
	 * the spec's resume_from, which the coordinator sends when this job has
	 * no snapshot of its own), used when `resume` finds nothing of the
	 * job's own (resume off, no checkpoint_dir, or nothing there <=
	 * resume_upto). Its checksums are verified first (snap_verify): a
	 * corrupt or unreadable folder is an error naming it
	 * (RM_EXIT_DATA), never a fresh start. It may have been written at
	 * any world size and sharding (each rank reads its own range, the data
	 * cursor is a global sample index); the model must have as many
	 * parameters (else RM_EXIT_SPEC). NULL: none. */
	const char *resume_dir;

	/* Profiling (docs/profiling.md). Every step is an NVTX range with one
	 * range per phase inside it (CUDA builds; see trace.h). For the steps
	 * of the spec's profile range (start_step <= step <= end_step), the
	 * phases are also timed and on_trace is called on the training thread
	 * after the step's last phase (its snapshot copy or validation, if any)
	 * and before on_step, with the step (borrowed, valid during the call).
	 * NULL, or no profile in the spec: nothing is collected. */
	void (*on_trace)(void *ctx, const trace_step_t *step);
	void *on_trace_ctx;
} train_options_t;

/*
 * Whether this worker can run `spec` on the device it names, before any
 * rendezvous: RM_EXIT_OK on cpu. On cuda: RM_EXIT_SPEC when the spec
 * asks for what the GPU path does not do (parallel.sharding other than
 * "none", train.precision other than "bf16"); RM_EXIT_USAGE, retried by
 * the coordinator like any node fault (docs/gpu.md says why), when this
 * process has no usable CUDA GPU ("parallel.device is cuda but this worker
 * has no usable CUDA GPU: <CUDA's reason>") or was built without CUDA.
 * One line in err, without the "ringworker: error: " prefix. train_run
 * makes the same check first.
 */
int train_check_device(const jobspec_t *spec, char *err, size_t errlen);

/*
 * Train as `spec` says (borrowed). Returns one of the RM_EXIT_* codes;
 * on failure one line "ringworker: error: ..." naming the file or field has
 * gone to opt->log.
 */
int train_run(const jobspec_t *spec, const train_options_t *opt);

#endif
