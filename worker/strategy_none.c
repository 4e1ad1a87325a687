/*
 * strategy_none: parallel.sharding "none" (and one rank alone): the
 * backward is scaled by 1/(grad_accum * W), so one all-reduce (sum) of the
 * flat gradient buffer is already the mean gradient of the global batch;
 * every rank then clips and applies AdamW to the same bits, and the
 * parameters stay identical without ever being sent. Also the registry of
 * modes (strategy_for).
 */
#include "strategy.h"

#include <math.h>

#include "train_dev.h"
#include "train_tp.h"

static int s_reduce(train_t *t)
{
	return t->dev->reduce_all(t);
}

/* With TP: this rank's share (replicated tensors on TP rank 0 only)
 * summed over the TP group; the DP replicas hold the same gradients. */
static int s_clip_tp(train_t *t, int64_t step, double *ret_norm)
{
	double sum, clip = t->spec->train.grad_clip;
	double a = train_now_s();
	if (train_tp_sum(t, train_tp_sum_squares(t, false), &sum) < 0)
		return train_comm_error(t, "all-gather of the gradient norm over the tensor-parallel group", step);
	t->times.comm_s += train_now_s() - a;
	double norm = sqrt(sum);
	t->dev->scale_all(t, clip > 0 && isfinite(norm) && norm > clip ? (float)(clip / norm) : 1.0f);
	*ret_norm = norm;
	return RM_EXIT_OK;
}

static int s_clip(train_t *t, int64_t step, double *ret_norm)
{
	if (t->tp_size > 1)
		return s_clip_tp(t, step, ret_norm);
	*ret_norm = t->dev->clip_all(t, t->spec->train.grad_clip);
	return RM_EXIT_OK;
}

static void s_update(train_t *t, const optim_adamw_t *hp)
{
	t->dev->update_all(t, hp);
}

/* The model's buffers and AdamW's m and v of N floats each. */
static void s_memory(const train_t *t, size_t *ret_params, size_t *ret_grads, size_t *ret_optim)
{
	size_t act;
	t->dev->model_bytes(t, ret_params, ret_grads, &act);
	*ret_optim = 2 * t->shard_len * sizeof(float);
}

const train_strategy_t strategy_none = {
	.name = "none",
	.reduce = s_reduce,
	.reduce_what = "all-reduce of the gradients",
	.clip = s_clip,
	.update = s_update,
	.gather = NULL,
	.memory = s_memory,
};

const train_strategy_t *strategy_for(const train_t *t)
{
	if (!t->sharded)
		return &strategy_none;
	switch (t->sharding) {
	case JOBSPEC_SHARDING_ZERO1: return &strategy_zero1;
	case JOBSPEC_SHARDING_ZERO2: return &strategy_zero2;
	case JOBSPEC_SHARDING_ZERO3: return &strategy_zero3;
	case JOBSPEC_SHARDING_NONE: break;
	}
	return &strategy_none;
}
