/*
 * train_tp: tensor parallelism in the training loop (issue 24; 2D with the
 * data-parallel strategies). The model computes in a TP group of t ranks
 * (model_options_t.tp: this module's adapter over the TP comm) and holds
 * only its TP rank's parts; everything data-parallel (DDP, ZeRO-1/2/3
 * with zero2/zero3 streaming the TP layers' local ranges through the
 * shard_t, the data loader, the loss) runs unchanged over the DP comm on
 * that LOCAL flat buffer. What this module adds:
 *   - the gradient norm's TP part: replicated tensors counted on TP rank 0
 *     only, the DP-summed partial sums all-gathered over the TP group and
 *     added in rank order (every rank the same bits);
 *   - the LOGICAL layout (worker/tplayout.h) for snapshots (this rank's
 *     logical range of params, m and v assembled from the DP shards and the
 *     TP parts; zero3's params from the master shards), for resume (tsnap
 *     reads logical ranges into local ones) and for init.safetensors (the
 *     file's logical tensors cut into this rank's parts), so a job resumes
 *     at any t and d and its losses are t = 1's up to reduction order.
 * Private to worker/train*.c (train_impl.h).
 */
#ifndef RINGMASTER_WORKER_TRAIN_TP_H
#define RINGMASTER_WORKER_TRAIN_TP_H

#include "train_impl.h"
#include "tplayout.h"

/* t->tp (the model's adapter) before the model is created: NULL without
 * TP. RM_EXIT_* code. */
int train_tp_begin(train_t *t);
const model_tp_t *train_tp_model(const train_t *t);

/* After the model exists: the layouts of every TP rank. RM_EXIT_* code. */
int train_tp_setup(train_t *t);

/* Free what train_tp_begin/setup made; accepts a train_t without TP. */
void train_tp_free(train_t *t);

/* This rank's layout (NULL without TP). */
const tplayout_t *train_tp_layout(const train_t *t);

/* Whether a TP collective inside the model failed since the last call
 * (its comm's error is then the TP comm's last error); clears it. */
bool train_tp_failed(train_t *t);

/* The sum of squares of the reduced gradients (t->dev->grads: the rank's
 * shard, local elements [shard_lo, shard_lo + shard_count), or the whole
 * local buffer), replicated tensors left out on TP ranks other than 0. */
double train_tp_sum_squares(train_t *t, bool shard);

/* The sum over the TP group of each rank's `part`, in rank order (a hi/lo
 * float pair per rank, as strategy_clip_sharded): the same bits everywhere.
 * 0 or the comm's error. */
int train_tp_sum(train_t *t, double part, double *ret_sum);

/* This rank's logical range [lo, lo + count) of params, AdamW's m and v,
 * assembled from the DP shards and the TP parts (collectives over both
 * groups, every rank at once): three new buffers of count floats into
 * ret_p, ret_m, ret_v (free them), or NULL each when count is 0. 0, or the
 * comm's error (-ENOMEM when they do not fit). */
int train_tp_snapshot(train_t *t, int64_t lo, int64_t count, float **ret_p, float **ret_m, float **ret_v);

/* init.safetensors (the logical tensors of the file) into this rank's
 * parts of the model's buffer (zero3: the parts in its DP shard, into the
 * master shard). RM_EXIT_* code. (train.seed's values need nothing here:
 * the engine initialises a TP rank's parts as the slices of the t = 1
 * model's, engine/tp.h.) */
int train_tp_init_pretrained(train_t *t);

#endif
