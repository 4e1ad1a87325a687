/*
 * strategy: what the training loop does differently per parallel mode
 * (parallel.sharding), as one table of operations per mode: "none"
 * (strategy_none.c: all-reduce, every rank updates everything), "zero1"
 * (strategy_zero1.c: reduce-scatter, AdamW on the rank's shard, all-gather
 * of the parameters) and "zero2" / "zero3" (strategy_zero23.c: gradients,
 * and for zero3 parameters too, streamed through worker/shard.c during
 * forward and backward). The loop (train.c) calls reduce, clip, update and
 * gather in that order each step and never asks which mode it runs; the
 * device's part of each is train_dev.h's. Private to worker/ (see
 * train_impl.h). docs/training.md has the arithmetic of each mode and
 * where a new one (tensor parallelism) goes.
 */
#ifndef RINGMASTER_WORKER_STRATEGY_H
#define RINGMASTER_WORKER_STRATEGY_H

#include "train_impl.h"

struct train_strategy {
	const char *name;
	/* Across ranks (called only with a comm): the gradients summed into
	 * where update reads them. 0 or the comm's error; reduce_what names the
	 * collective in the error line. */
	int (*reduce)(train_t *t);
	const char *reduce_what;
	/* The global gradient norm before clipping into *ret_norm, and the
	 * gradients scaled to train.grad_clip when that is set and exceeded.
	 * RM_EXIT_* code (a sharded norm is a collective). */
	int (*clip)(train_t *t, int64_t step, double *ret_norm);
	/* AdamW with hp on what this rank updates. */
	void (*update)(train_t *t, const optim_adamw_t *hp);
	/* After the update: every rank's parameters current again (NULL: there
	 * is nothing to do). 0 or the comm's error. */
	int (*gather)(train_t *t);
	/* Bytes this rank holds, as train_report_t counts them: the model's
	 * (the device's model_bytes) and the mode's own buffers (AdamW's m and
	 * v of S floats each, a reduced gradient shard, the shard_t's). */
	void (*memory)(const train_t *t, size_t *ret_params, size_t *ret_grads, size_t *ret_optim);
};

/* The mode of t (t->sharded and t->sharding; unsharded without a comm). */
const train_strategy_t *strategy_for(const train_t *t);

extern const train_strategy_t strategy_none;
extern const train_strategy_t strategy_zero1;
extern const train_strategy_t strategy_zero2;
extern const train_strategy_t strategy_zero3;

/*
 * The clip of every sharded mode: each rank's sum of squares over its shard
 * goes out as a float pair (hi, lo = the rounding error of hi) in one
 * all-gather, and every rank adds the pairs in rank order in double, so all
 * of them get the same bits and a rerun repeats them; the shard is then
 * scaled by the clipping factor (on the GPU, folded into AdamW).
 */
int strategy_clip_sharded(train_t *t, int64_t step, double *ret_norm);

/* AdamW on this rank's shard (every sharded mode). */
void strategy_update_shard(train_t *t, const optim_adamw_t *hp);

#endif
