/*
 * tp: the CPU rows' tensor-parallel pieces (see tp.h): counted collectives,
 * the local/logical map, replicated gradients, the vocabulary-parallel
 * cross-entropy and sequence-parallel positions.
 */
#include "tp.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tp_check(const model_tp_t *g, const char *const *dim_names, const int *dims, int n_dims,
             char *err, size_t errlen)
{
	if (!g)
		return 0;
	if (g->size < 1 || g->rank < 0 || g->rank >= g->size) {
		snprintf(err, errlen, "parallel.tensor: TP rank %d of group size %d is out of range",
			 g->rank, g->size);
		return -1;
	}
	if (g->size > 1 && (!g->allgather || !g->reduce_scatter || !g->allreduce)) {
		snprintf(err, errlen, "internal error: a tensor-parallel model needs its collectives");
		return -1;
	}
	for (int i = 0; i < n_dims; i++)
		if (dims[i] % g->size != 0) {
			snprintf(err, errlen, "%s (%d) must be divisible by parallel.tensor (%d)",
				 dim_names[i], dims[i], g->size);
			return -1;
		}
	return 0;
}

int tp_init(tp_t *s, const model_tp_t *g, const model_tensor_t *t, int n)
{
	memset(s, 0, sizeof *s);
	if (g)
		s->g = *g;
	else
		s->g.size = 1;
	if (s->g.size <= 1)
		return 0;
	for (int i = 0; i < n; i++)
		if (t[i].tp_split == MODEL_TP_REPLICATED)
			s->rep_n += t[i].numel;
	s->rep_saved = malloc((s->rep_n ? s->rep_n : 1) * sizeof(float));
	s->rep_pack = malloc((s->rep_n ? s->rep_n : 1) * sizeof(float));
	if (!s->rep_saved || !s->rep_pack) {
		tp_free(s);
		return -ENOMEM;
	}
	return 0;
}

void tp_free(tp_t *s)
{
	free(s->rep_saved);
	free(s->rep_pack);
	s->rep_saved = s->rep_pack = NULL;
}

void tp_allgather(tp_t *s, const float *in, float *out, size_t n_each)
{
	int t = s->g.size;
	s->vol.allgather_floats += (uint64_t)t * n_each;
	s->vol.allgather_calls++;
	s->vol.sent_floats += (double)(t - 1) * (double)n_each;
	s->g.allgather(s->g.ctx, in, out, n_each);
}

void tp_reduce_scatter(tp_t *s, const float *in, float *out, size_t n_each)
{
	int t = s->g.size;
	s->vol.reduce_scatter_floats += (uint64_t)t * n_each;
	s->vol.reduce_scatter_calls++;
	s->vol.sent_floats += (double)(t - 1) * (double)n_each;
	s->g.reduce_scatter(s->g.ctx, in, out, n_each);
}

void tp_allreduce(tp_t *s, float *buf, size_t n)
{
	int t = s->g.size;
	s->vol.allreduce_floats += n;
	s->vol.allreduce_calls++;
	s->vol.sent_floats += 2.0 * (double)(t - 1) / t * (double)n;
	s->g.allreduce(s->g.ctx, buf, n);
}

/* ---- local and logical ---- */

bool tp_is_qkv(const model_tensor_t *t)
{
	size_t len = strlen(t->name);
	static const char *const sfx[] = {"attn.c_attn.weight", "attn.c_attn.bias"};
	for (size_t i = 0; i < 2; i++) {
		size_t l = strlen(sfx[i]);
		if (len >= l && strcmp(t->name + len - l, sfx[i]) == 0)
			return true;
	}
	return false;
}

/* The part of local [a, a + n) -> logical [b, b + n) inside local [lo, hi). */
static void s_emit(tp_segment_fn fn, void *ctx, size_t a, size_t b, size_t n, size_t lo, size_t hi)
{
	size_t s = a > lo ? a : lo, e = a + n < hi ? a + n : hi;
	if (s < e)
		fn(ctx, s, b + (s - a), e - s);
}

void tp_segments(const model_tensor_t *t, int rank, int size, size_t lo, size_t hi,
                 tp_segment_fn fn, void *ctx)
{
	if (hi > t->numel)
		hi = t->numel;
	if (size <= 1 || t->tp_split == MODEL_TP_REPLICATED) {
		s_emit(fn, ctx, 0, 0, t->numel, lo, hi);
		return;
	}
	bool qkv = tp_is_qkv(t);
	size_t k = (size_t)rank;
	if (t->tp_split == 0 && qkv) { /* c_attn.bias (3C) */
		size_t third = (size_t)t->full_shape[0] / 3, part = third / (size_t)size;
		for (size_t p = 0; p < 3; p++)
			s_emit(fn, ctx, p * part, p * third + k * part, part, lo, hi);
		return;
	}
	if (t->tp_split == 0) {
		size_t rows = (size_t)t->shape[0], cols = t->ndim == 2 ? (size_t)t->shape[1] : 1;
		size_t first = k * rows, full = (size_t)t->full_shape[0];
		size_t valid = full > first ? (full - first < rows ? full - first : rows) : 0;
		s_emit(fn, ctx, 0, first * cols, valid * cols, lo, hi);
		return;
	}
	/* tp_split 1: every row's columns */
	size_t cl = (size_t)t->shape[1], fc = (size_t)t->full_shape[1];
	size_t r0 = lo / cl, r1 = (hi + cl - 1) / cl;
	for (size_t r = r0; r < r1; r++) {
		if (qkv) {
			size_t pw = cl / 3, third = fc / 3;
			for (size_t p = 0; p < 3; p++)
				s_emit(fn, ctx, r * cl + p * pw, r * fc + p * third + k * pw, pw, lo, hi);
		} else {
			s_emit(fn, ctx, r * cl, r * fc + k * cl, cl, lo, hi);
		}
	}
}

/* ---- replicated gradients ---- */

void tp_rep_begin(tp_t *s, const model_tensor_t *t, int n, float *grads)
{
	size_t o = 0;
	for (int i = 0; i < n; i++) {
		if (t[i].tp_split != MODEL_TP_REPLICATED)
			continue;
		memcpy(s->rep_saved + o, grads + t[i].offset, t[i].numel * sizeof(float));
		memset(grads + t[i].offset, 0, t[i].numel * sizeof(float));
		o += t[i].numel;
	}
}

void tp_rep_end(tp_t *s, const model_tensor_t *t, int n, float *grads)
{
	size_t o = 0;
	for (int i = 0; i < n; i++)
		if (t[i].tp_split == MODEL_TP_REPLICATED) {
			memcpy(s->rep_pack + o, grads + t[i].offset, t[i].numel * sizeof(float));
			o += t[i].numel;
		}
	tp_allreduce(s, s->rep_pack, s->rep_n);
	o = 0;
	for (int i = 0; i < n; i++) {
		if (t[i].tp_split != MODEL_TP_REPLICATED)
			continue;
		float *g = grads + t[i].offset;
		for (size_t j = 0; j < t[i].numel; j++)
			g[j] = s->rep_saved[o + j] + s->rep_pack[o + j];
		o += t[i].numel;
	}
}

void tp_rep_range(tp_t *s, const model_tensor_t *t, int n, model_range_t r, float *g)
{
	size_t o = 0;
	for (int i = 0; i < n; i++)
		if (t[i].tp_split == MODEL_TP_REPLICATED && t[i].offset >= r.lo &&
		    t[i].offset + t[i].numel <= r.hi) {
			memcpy(s->rep_pack + o, g + (t[i].offset - r.lo), t[i].numel * sizeof(float));
			o += t[i].numel;
		}
	if (o == 0)
		return;
	tp_allreduce(s, s->rep_pack, o);
	o = 0;
	for (int i = 0; i < n; i++)
		if (t[i].tp_split == MODEL_TP_REPLICATED && t[i].offset >= r.lo &&
		    t[i].offset + t[i].numel <= r.hi) {
			memcpy(g + (t[i].offset - r.lo), s->rep_pack + o, t[i].numel * sizeof(float));
			o += t[i].numel;
		}
}

/* ---- vocabulary-parallel cross-entropy ---- */

size_t tp_ce_scratch_floats(int size, int N)
{
	return (size_t)N * ((size_t)size + 3);
}

float tp_crossentropy_forward(tp_t *s, float *losses, float *lse, const float *logits, size_t ld,
                              const int32_t *targets, int N, int ncols, int v0, float *scratch)
{
	const int t = s->g.size;
	float *mx = scratch, *all = scratch + N, *red = scratch + (size_t)N * (size_t)(t + 1);
	/* the row maxima over the group: gathered, then the largest */
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const float *x = logits + (size_t)n * ld;
		float m = -INFINITY;
		for (int v = 0; v < ncols; v++)
			m = x[v] > m ? x[v] : m;
		mx[n] = m;
	}
	tp_allgather(s, mx, all, (size_t)N);
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		float m = -INFINITY;
		for (int r = 0; r < t; r++)
			m = all[(size_t)r * N + n] > m ? all[(size_t)r * N + n] : m;
		mx[n] = m;
	}
	/* the sum of exp(x - max) and the target's logit, summed over the group */
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const float *x = logits + (size_t)n * ld;
		float sum = 0.0f;
		for (int v = 0; v < ncols; v++)
			sum += expf(x[v] - mx[n]);
		int tg = targets[n] - v0;
		red[n] = sum;
		red[N + n] = tg >= 0 && tg < ncols ? x[tg] : 0.0f;
	}
	tp_allreduce(s, red, 2 * (size_t)N);
	double total = 0;
	for (int n = 0; n < N; n++) {
		lse[n] = mx[n] + logf(red[n]);
		losses[n] = lse[n] - red[N + n];
		total += losses[n];
	}
	return (float)(total / N);
}

void tp_crossentropy_backward(float *logits, size_t ld, const float *lse, const int32_t *targets,
                              int N, int ncols, int v0, float scale)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		float *x = logits + (size_t)n * ld;
		for (int v = 0; v < ncols; v++)
			x[v] = expf(x[v] - lse[n]) * scale;
		int tg = targets[n] - v0;
		if (tg >= 0 && tg < ncols)
			x[tg] -= scale;
	}
}

/* ---- sequence-parallel pieces ---- */

void tp_positions_backward(float *dwpe, const float *dout, int row0, int n, int T, int C)
{
	/* by column blocks, each column summed over the rows in order */
#pragma omp parallel for schedule(static)
	for (int c0 = 0; c0 < C; c0 += 16) {
		int c1 = c0 + 16 < C ? c0 + 16 : C;
		for (int i = 0; i < n; i++) {
			float *d = dwpe + (size_t)((row0 + i) % T) * C;
			const float *g = dout + (size_t)i * C;
			for (int c = c0; c < c1; c++)
				d[c] += g[c];
		}
	}
}

void tp_rs_residual(tp_t *s, float *out, const float *part, const float *res, const float *bias,
                    int n, int C)
{
	tp_reduce_scatter(s, part, out, (size_t)n * (size_t)C);
#pragma omp parallel for schedule(static)
	for (int i = 0; i < n; i++) {
		float *o = out + (size_t)i * C;
		const float *r = res + (size_t)i * C;
		for (int c = 0; c < C; c++)
			o[c] += r[c] + (bias ? bias[c] : 0.0f);
	}
}
