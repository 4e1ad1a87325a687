/*
 * optim: AdamW, sums of squares for gradient clipping, and the learning-rate
 * schedule (see optim.h). All of it is elementwise or reduces in a fixed
 * order, so the result is the same for any number of OpenMP threads.
 */
#include "optim.h"

#include <math.h>

#include "kernels.h"

/* optim_sum_squares cuts x into this many blocks, by n alone */
#define SUMSQ_BLOCKS 64
#define SUMSQ_LANES 8

/* AdamW on [lo, hi) with one decay setting, in PyTorch's form:
 * p = p * (1 - lr*wd) - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps). */
static void s_adamw_segment(float *params, const float *grads, float *m, float *v, size_t lo,
                            size_t hi, const optim_adamw_t *hp, bool decay)
{
	const float b1 = (float)hp->beta1, b2 = (float)hp->beta2;
	const float step = (float)(hp->lr / (1.0 - pow(hp->beta1, (double)hp->t)));
	const float inv_sqrt_bc2 = (float)(1.0 / sqrt(1.0 - pow(hp->beta2, (double)hp->t)));
	const float eps = (float)hp->eps;
	const float keep = decay ? (float)(1.0 - hp->lr * hp->weight_decay) : 1.0f;
#pragma omp parallel for simd schedule(static)
	for (size_t i = lo; i < hi; i++) {
		float g = grads[i];
		float mi = b1 * m[i] + (1.0f - b1) * g;
		float vi = b2 * v[i] + (1.0f - b2) * g * g;
		m[i] = mi;
		v[i] = vi;
		params[i] = params[i] * keep - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
	}
}

void optim_adamw_update(const model_tensor_t *tensors, int n_tensors, float *params,
                        const float *grads, float *m, float *v, size_t lo, size_t hi,
                        const optim_adamw_t *hp)
{
	kernel_flush_denormals();
	for (int i = 0; i < n_tensors; i++) {
		const model_tensor_t *t = &tensors[i];
		size_t a = t->offset > lo ? t->offset : lo;
		size_t b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
		if (a < b)
			s_adamw_segment(params, grads, m, v, a, b, hp, t->decay);
	}
}

void optim_adamw_update_shard(const model_tensor_t *tensors, int n_tensors, float *params,
                              const float *grads, float *m, float *v, size_t lo, size_t hi,
                              const optim_adamw_t *hp)
{
	kernel_flush_denormals();
	for (int i = 0; i < n_tensors; i++) {
		const model_tensor_t *t = &tensors[i];
		size_t a = t->offset > lo ? t->offset : lo;
		size_t b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
		/* The segment [a, b) as [0, b - a) of shifted pointers. */
		if (a < b)
			s_adamw_segment(params + (a - lo), grads + (a - lo), m + (a - lo), v + (a - lo), 0,
					b - a, hp, t->decay);
	}
}

double optim_sum_squares(const float *x, size_t n)
{
	double partial[SUMSQ_BLOCKS];
#pragma omp parallel for schedule(static)
	for (int blk = 0; blk < SUMSQ_BLOCKS; blk++) {
		size_t a = n / SUMSQ_BLOCKS * (size_t)blk + (n % SUMSQ_BLOCKS) * (size_t)blk / SUMSQ_BLOCKS;
		size_t b = n / SUMSQ_BLOCKS * (size_t)(blk + 1) +
		           (n % SUMSQ_BLOCKS) * (size_t)(blk + 1) / SUMSQ_BLOCKS;
		double acc[SUMSQ_LANES] = {0};
		size_t i = a;
		for (; i + SUMSQ_LANES <= b; i += SUMSQ_LANES)
			for (int k = 0; k < SUMSQ_LANES; k++)
				acc[k] += (double)x[i + k] * (double)x[i + k];
		for (int k = 0; i < b; i++, k++)
			acc[k] += (double)x[i] * (double)x[i];
		double s = 0;
		for (int k = 0; k < SUMSQ_LANES; k++)
			s += acc[k];
		partial[blk] = s;
	}
	double total = 0;
	for (int blk = 0; blk < SUMSQ_BLOCKS; blk++)
		total += partial[blk];
	return total;
}

void optim_scale(float *x, size_t n, float s)
{
#pragma omp parallel for simd schedule(static)
	for (size_t i = 0; i < n; i++)
		x[i] *= s;
}

double optim_lr_at(int64_t step, int64_t total_steps, int64_t warmup_steps, double lr, double min_lr,
                   int cosine)
{
	if (warmup_steps > 0 && step < warmup_steps)
		return lr * (double)(step + 1) / (double)warmup_steps;
	if (!cosine)
		return lr;
	if (step >= total_steps || total_steps <= warmup_steps)
		return min_lr;
	double progress = (double)(step - warmup_steps) / (double)(total_steps - warmup_steps);
	return min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(M_PI * progress));
}
