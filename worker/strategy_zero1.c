/*
 * strategy_zero1: parallel.sharding "zero1" (AdamW state sharded): the flat
 * buffer of N parameters is seen as padded to W * S (S = ceil(N / W)) and
 * rank r owns [r * S, r * S + count_r). A step reduce-scatters the full
 * gradient buffer into the rank's S-float gradient shard (sum; the backward
 * is already scaled by 1/(A * W)), clips by the global norm of the shards
 * (strategy_clip_sharded), runs AdamW on the shard with m, v of S floats,
 * and all-gathers every rank's updated range into the parameter replica in
 * place. Also the clip and update every sharded mode shares.
 */
#include "strategy.h"

#include <math.h>

#include "train_dev.h"
#include "train_tp.h"

int strategy_clip_sharded(train_t *t, int64_t step, double *ret_norm)
{
	double clip = t->spec->train.grad_clip;
	/* TP: replicated tensors count on TP rank 0 only */
	double part = t->tp_size > 1 ? train_tp_sum_squares(t, true) : t->dev->shard_sum_squares(t);
	float mine[2];
	mine[0] = (float)part;
	mine[1] = (float)(part - (double)mine[0]);
	double a = train_now_s();
	if (t->dev->allgather_host(t, t->comm, mine, t->norm_parts, t->norm_counts) < 0)
		return train_comm_error(t, "all-gather of the gradient norm", step);
	t->times.comm_s += train_now_s() - a;
	double sum = 0;
	for (size_t r = 0; r < (size_t)t->W; r++)
		sum += (double)t->norm_parts[2 * r] + (double)t->norm_parts[2 * r + 1];
	if (t->tp_size > 1 && train_tp_sum(t, sum, &sum) < 0)
		return train_comm_error(t, "all-gather of the gradient norm over the tensor-parallel group", step);
	double norm = sqrt(sum);
	float factor = clip > 0 && isfinite(norm) && norm > clip ? (float)(clip / norm) : 1.0f;
	t->dev->scale_shard(t, factor);
	*ret_norm = norm;
	return RM_EXIT_OK;
}

void strategy_update_shard(train_t *t, const optim_adamw_t *hp)
{
	t->dev->update_shard(t, hp);
}

static int s_reduce(train_t *t)
{
	return t->dev->reduce_scatter(t);
}

static int s_gather(train_t *t)
{
	return t->dev->gather_params(t);
}

/* The model's buffers (with its full gradient buffer), the reduced
 * gradient shard, and AdamW's m and v of S floats each. */
static void s_memory(const train_t *t, size_t *ret_params, size_t *ret_grads, size_t *ret_optim)
{
	size_t act;
	t->dev->model_bytes(t, ret_params, ret_grads, &act);
	*ret_grads += t->shard_len * sizeof(float);
	*ret_optim = 2 * t->shard_len * sizeof(float);
}

const train_strategy_t strategy_zero1 = {
	.name = "zero1",
	.reduce = s_reduce,
	.reduce_what = "reduce-scatter of the gradients",
	.clip = strategy_clip_sharded,
	.update = strategy_update_shard,
	.gather = s_gather,
	.memory = s_memory,
};
