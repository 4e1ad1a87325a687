/*
 * train_dev: what the training loop does differently per device, as one
 * table of operations per parallel.device: "cpu" (train_dev_cpu.c: the
 * model runs on the host, buffers are host memory, collectives over Gloo)
 * and "cuda" (train_dev_cuda.c, builds with the CUDA engine: the model runs
 * on the GPU through train_cuda.c, the host model is only a mirror of its
 * state for initialisation and snapshots, collectives over NCCL on device
 * memory). The loop (train.c) and the parallel modes (strategy*.c) call
 * these and never ask which device they run on. Private to worker/ (see
 * train_impl.h).
 *
 * A new device is a new row here (and its model rows in
 * worker/engine/model.h); docs/training.md, "Where things go".
 */
#ifndef RINGMASTER_WORKER_TRAIN_DEV_H
#define RINGMASTER_WORKER_TRAIN_DEV_H

#include <stdio.h>

#include "train_impl.h"

struct train_dev {
	const char *name; /* "cpu", "cuda" */
	/* The state lives on the device, t->model is its host mirror (never
	 * run): the zero3 master shard too is the mirror's range. */
	bool mirror;
	/* Whether this process can train here: RM_EXIT_OK, or a code with
	 * one line in err (train_check_device). */
	int (*probe)(char *err, size_t errlen);
	/* Where shard.c keeps its buffers (zero2/zero3). */
	const shard_mem_t *shard_mem;
	/* t->model for the spec (the model, or the device's host mirror), before
	 * the shard layout; then the device's side once the layout is known
	 * (n_vals: the most host values a collective sends). RM_EXIT_* code,
	 * logged. */
	int (*create_model)(train_t *t, const model_config_t *cfg);
	int (*create)(train_t *t, const model_config_t *cfg, size_t n_vals);
	void (*free)(train_t *t);
	/* A header line about the device, or nothing. */
	void (*print_header)(const train_t *t, FILE *f);

	/* The model: zero the gradients; forward of t->inputs, t->targets (the
	 * mean loss); backward (`last`: the last micro-step, whose backward may
	 * start the gradient reduction layer by layer, strategy's reduce waits). */
	void (*zero_grad)(train_t *t);
	float (*forward)(train_t *t);
	void (*backward)(train_t *t, float loss_scale, bool last);

	/* In place: n host floats summed over t->comm's ranks; an all-gather
	 * of host floats over `comm` (t->comm, or the TP group's t->tp_comm),
	 * of any size (the GPU stages them through device memory). 0 or the
	 * comm's error. */
	int (*allreduce_host)(train_t *t, float *buf, size_t n);
	int (*allgather_host)(train_t *t, comm_t *comm, const float *in, float *out,
	                      const size_t *counts);

	/* The whole state from / into the host buffers (model params, adam_m,
	 * adam_v) after initialisation or resume / for a snapshot. */
	void (*to_device)(train_t *t);
	void (*to_host)(train_t *t);
	/* report->params: the replica after this step, or NULL. */
	const float *(*report_params)(train_t *t);
	/* Bytes of the model's own buffers on this device: parameters (with a
	 * low-precision copy; not AdamW's moments), its gradient buffer (0 when
	 * streamed), activations. The strategy adds its own (strategy.h). */
	void (*model_bytes)(const train_t *t, size_t *ret_params, size_t *ret_grads,
	                    size_t *ret_activations);

	/* The strategies' pieces (strategy*.c). Unsharded: the all-reduce of
	 * the flat gradient, the global norm with clipping (returns the norm),
	 * AdamW over everything. zero1: the reduce-scatter into the shard's
	 * gradients. Sharded: the sum of squares of the shard's gradients,
	 * scaling them by the clipping factor, AdamW on the shard, the
	 * all-gather of every rank's range (zero1, zero2) and of the whole
	 * replica into params_full (zero3's report). Collectives return 0 or the
	 * comm's error. */
	int (*reduce_all)(train_t *t);
	double (*clip_all)(train_t *t, double grad_clip);
	void (*update_all)(train_t *t, const optim_adamw_t *hp);
	int (*reduce_scatter)(train_t *t);
	double (*shard_sum_squares)(train_t *t);
	void (*scale_shard)(train_t *t, float factor);
	void (*update_shard)(train_t *t, const optim_adamw_t *hp);
	int (*gather_params)(train_t *t);
	int (*gather_replica)(train_t *t);

	/* Tensor parallelism's gradient norm (train_tp.c), in the device's
	 * memory: the gradients after the strategy's reduction (`shard`: the
	 * rank's reduced shard, else the whole flat buffer), the sum of squares
	 * of n floats of them, and the whole buffer scaled by the clipping
	 * factor (unsharded; the GPU folds it into AdamW). */
	const float *(*grads)(train_t *t, bool shard);
	double (*sum_squares)(train_t *t, const float *x, size_t n);
	void (*scale_all)(train_t *t, float factor);
};

/* The row for `device`, or NULL when this build has none (cuda without
 * the CUDA engine). */
const train_dev_t *train_dev_find(jobspec_device_t device);

extern const train_dev_t train_dev_cpu;
extern const train_dev_t train_dev_cuda;

#endif
