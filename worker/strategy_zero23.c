/*
 * strategy_zero23: parallel.sharding "zero2" and "zero3". The model streams
 * through the shard_t (worker/shard.c): it has no gradient buffer and hands
 * each range's gradients to the shard_t during backward, which
 * reduce-scatters them into the rank's gradient shard on its own thread, so
 * reduce only waits for the last one. zero3's model has no parameters
 * either: the shard_t keeps the master shard and all-gathers each range
 * just before the model uses it, AdamW updates that shard, and gather only
 * forgets the gathered ranges. Clip and update are zero1's.
 */
#include "strategy.h"

#include "train_dev.h"

/* Reduced range by range during backward; wait for the last. */
static int s_reduce(train_t *t)
{
	return shard_sync(t->zero);
}

/* zero2: the parameter replica is the model's; all-gather it as zero1. */
static int s_gather_zero2(train_t *t)
{
	return t->dev->gather_params(t);
}

/* zero3: the next forward gathers layer by layer; cached ranges are stale. */
static int s_gather_zero3(train_t *t)
{
	return shard_invalidate(t->zero);
}

/* The model's buffers (no gradient buffer; zero3: no parameters either),
 * the shard_t's (gradient shard and buckets; zero3: the master shard and
 * gather slots), and AdamW's m and v of S floats each. */
static void s_memory(const train_t *t, size_t *ret_params, size_t *ret_grads, size_t *ret_optim)
{
	size_t act;
	t->dev->model_bytes(t, ret_params, ret_grads, &act);
	*ret_params += shard_param_bytes(t->zero);
	*ret_grads += shard_grad_bytes(t->zero);
	*ret_optim = 2 * t->shard_len * sizeof(float);
}

const train_strategy_t strategy_zero2 = {
	.name = "zero2",
	.reduce = s_reduce,
	.reduce_what = "ZeRO gathers and reduce-scatters",
	.clip = strategy_clip_sharded,
	.update = strategy_update_shard,
	.gather = s_gather_zero2,
	.memory = s_memory,
};

const train_strategy_t strategy_zero3 = {
	.name = "zero3",
	.reduce = s_reduce,
	.reduce_what = "ZeRO gathers and reduce-scatters",
	.clip = strategy_clip_sharded,
	.update = strategy_update_shard,
	.gather = s_gather_zero3,
	.memory = s_memory,
};
