/*
 * optim: AdamW, global gradient-norm clipping and the learning-rate schedule,
 * over ranges of the flat parameter buffer.
 *
 * Everything works on a contiguous range [lo, hi) of the flat buffers so that
 * a ZeRO shard updates just its own range. Weight decay follows the decay
 * ranges of the model's tensor table (model_tensor_t's offset, numel and
 * `decay`: not on biases and norms), whatever the architecture. Sums of
 * squares use a fixed chunking and order, so they do not depend on the number
 * of OpenMP threads.
 */
#ifndef RINGMASTER_ENGINE_OPTIM_H
#define RINGMASTER_ENGINE_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct optim_adamw {
	double lr;           /* this step's learning rate */
	double beta1;        /* 0.9 */
	double beta2;        /* 0.95 */
	double eps;          /* 1e-8 */
	double weight_decay; /* decoupled, applied where the tensor's decay flag is set */
	int64_t t;           /* 1-based step count, for bias correction */
} optim_adamw_t;

/*
 * One AdamW update of params[lo, hi) from grads[lo, hi), with moments m, v
 * indexed like params (m[i], v[i] for i in [lo, hi)). The tensor table
 * (n_tensors entries in flat-buffer order, model_tensors) gives the decay
 * ranges: each tensor's part of [lo, hi) decays when its flag is set.
 */
void optim_adamw_update(const model_tensor_t *tensors, int n_tensors, float *params,
                        const float *grads, float *m, float *v, size_t lo, size_t hi,
                        const optim_adamw_t *hp);

/*
 * The same update for a ZeRO shard: the elements [lo, hi) of the flat
 * buffer, with params, grads, m and v holding only the shard: params[i - lo],
 * grads[i - lo], m[i - lo], v[i - lo] are element i. Decay follows the tensor table as
 * above, also where lo or hi falls inside a tensor. Every element gets
 * exactly the arithmetic optim_adamw_update gives it.
 */
void optim_adamw_update_shard(const model_tensor_t *tensors, int n_tensors, float *params,
                              const float *grads, float *m, float *v, size_t lo, size_t hi,
                              const optim_adamw_t *hp);

/* Sum of squares of x[0..n), in double, in an order fixed by n alone. */
double optim_sum_squares(const float *x, size_t n);

/* Multiply x[0..n) by s. */
void optim_scale(float *x, size_t n, float s);

/*
 * Learning rate at 0-based `step`: linear warmup from lr/warmup_steps to lr
 * over warmup_steps, then constant or cosine decay to min_lr at total_steps.
 */
double optim_lr_at(int64_t step, int64_t total_steps, int64_t warmup_steps, double lr, double min_lr,
                   int cosine);

#endif
