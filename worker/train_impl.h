/*
 * train_impl: the training loop's state, shared by the modules the loop is
 * made of and private to them: train.c (the loop), train_dev*.c (what
 * differs per device: the CPU model, or the GPU through train_cuda.c) and
 * strategy*.c (what differs per parallel mode: none, zero1, zero2, zero3).
 * Nothing outside worker/train*.c and worker/strategy*.c includes it.
 */
#ifndef RINGMASTER_WORKER_TRAIN_IMPL_H
#define RINGMASTER_WORKER_TRAIN_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data.h"
#include "model.h"
#include "optim.h"
#include "shard.h"
#include "train.h"
#include "train_snap.h"

typedef struct train train_t;
typedef struct train_dev train_dev_t;
typedef struct train_strategy train_strategy_t;

#define ADAM_BETA1 0.9
#define ADAM_BETA2 0.95
#define ADAM_EPS 1e-8

/* Seconds spent per phase. */
typedef struct {
	double data_s;
	double forward_s;
	double backward_s;
	double comm_s;
	double optim_s;
} train_times_t;

struct train {
	const jobspec_t *spec; /* borrowed */
	const train_options_t *opt;
	int B, T, A;
	comm_t *comm; /* borrowed; NULL on one rank. With TP: the data-parallel group */
	int W, rank;  /* with TP: the data-parallel size d and this rank's place in it */
	/* Tensor parallelism (train_tp.c): tp_size 1 without it. */
	comm_t *tp_comm;      /* borrowed; NULL with tp_size 1 */
	int tp_size, tp_rank; /* the TP group (t) and this rank's place in it */
	int world_size, world_rank; /* the job's: tp_size * W, and dp rank * tp_size + tp_rank */
	struct train_tp *tpx; /* the model's TP adapter, layouts and scratch (train_tp.c) */
	float *rank_vals; /* (max(W, W * eval_batches)): one slot per rank or validation batch */

	const train_dev_t *dev;           /* the device's operations (train_dev.h) */
	const train_strategy_t *strategy; /* the parallel mode's (strategy.h) */
	model_t *model; /* on a device row with `mirror`: the host side of its state, never run */
	struct train_cuda *gpu; /* parallel.device cuda: the GPU side (train_dev_cuda.c only); else NULL */
	size_t n_params;
	float *adam_m; /* (n_params), or (shard_len) when sharded */
	float *adam_v; /* (n_params), or (shard_len) when sharded */

	/* ZeRO (sharded: zero1/zero2/zero3 with a comm); else shard_lo 0 and
	 * shard_count n_params. */
	bool sharded;
	jobspec_sharding_t sharding;
	size_t shard_len;     /* S = ceil(n_params / W): every rank's shard, padding included */
	size_t shard_lo;      /* rank * S */
	size_t shard_count;   /* real entries of this rank's shard, <= S (0 possible) */
	size_t *shard_counts; /* (W): every rank's real count; they sum to n_params */
	float *grad_shard;    /* (S): the reduced gradient of this rank's shard; zero padding */
	float *grad_own;      /* zero1: grad_shard's allocation (zero2/3: the shard_t's) */
	float *norm_parts;    /* (2 * W): the ranks' partial sums of squares as hi, lo floats */
	size_t *norm_counts;  /* (W): all 2, the counts of that all-gather */
	shard_t *zero;        /* zero2/zero3: the streamed gradients (and parameters) */
	float *params_full;   /* zero3 with opt->report_params: the gathered replica */

	data_source_t *train_src;
	data_source_t *val_src; /* NULL without data.val */
	data_loader_t loader;
	data_sampler_t val_sampler;

	int32_t *inputs;  /* (B, T) */
	int32_t *targets; /* (B, T) */

	tsnap_t *snap;      /* snapshots (opt->checkpoint_dir) and resuming */
	int64_t start_step; /* 1, or the resumed snapshot's step + 1 */

	train_times_t times;
	trace_t trace; /* the phases of the current step: NVTX ranges, and times when profiled */
};

/* CLOCK_MONOTONIC in seconds. */
double train_now_s(void);

/* One line "ringworker: error: ..." on opt->log; returns code. */
int train_error(const train_t *t, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A failed collective: one line naming it and the comm's error; the comm
 * is aborted so that the other ranks fail at once too. RM_EXIT_COMM. */
int train_comm_error(train_t *t, const char *what, int64_t step);

/* This rank's master parameters on the host (shard-indexed, shard_count of
 * them): its range of the replica, or the zero3 shard; on a device with a
 * host mirror, its range of the mirror's buffer. Only when shard_count > 0. */
float *train_master(train_t *t);

/* The streaming mode of the spec's sharding (zero2: gradients, zero3:
 * parameters too; model.h). */
model_streaming_t train_streaming(const train_t *t);

/* t->model: a CPU model of the spec's architecture (model_create: the
 * model, or a device's host mirror); on failure the exit code its error
 * code calls for (out of memory, or a model the engine refuses), logged. */
int train_model_create(train_t *t, const model_config_t *cfg, const model_options_t *mo);

#endif
