/*
 * tplayout: a TP rank's local parts against the logical flat buffer (see
 * tplayout.h).
 */
#include "tplayout.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tp.h"

typedef struct {
	tplayout_run_t *runs;
	size_t n, cap;
	bool oom;
} s_runs_t;

static void s_add(s_runs_t *r, size_t local, size_t logical, size_t n, bool replicated)
{
	if (n == 0 || r->oom)
		return;
	if (r->n > 0) { /* merge with the previous run when both sides continue it */
		tplayout_run_t *p = &r->runs[r->n - 1];
		if (p->replicated == replicated && p->local + p->n == local && p->logical + p->n == logical) {
			p->n += n;
			return;
		}
	}
	if (r->n == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 64;
		tplayout_run_t *g = realloc(r->runs, cap * sizeof *g);
		if (!g) {
			r->oom = true;
			return;
		}
		r->runs = g;
		r->cap = cap;
	}
	r->runs[r->n++] = (tplayout_run_t){.local = local, .logical = logical, .n = n, .replicated = replicated};
}

static int s_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int s_fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (err && errlen)
		vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

typedef struct {
	s_runs_t *r;
	size_t off, L;
} s_seg_t;

static void s_segment(void *ctx, size_t local, size_t logical, size_t n)
{
	s_seg_t *g = ctx;
	s_add(g->r, g->off + local, g->L + logical, n, false);
}

/* The runs of tensor x (local table entry) at logical offset L for rank k
 * of t: the engine's rules (engine/tp.h tp_segments), after checking that
 * the local shape is a part of full_shape as model.h says. */
static int s_tensor_runs(const model_tensor_t *x, size_t L, int k, int t, s_runs_t *r, char *err,
                         size_t errlen)
{
	const size_t rows = (size_t)x->shape[0], full_rows = (size_t)x->full_shape[0];
	const size_t cols = x->ndim == 2 ? (size_t)x->shape[1] : 1;
	const size_t full_cols = x->ndim == 2 ? (size_t)x->full_shape[1] : 1;
	if (x->numel != rows * cols)
		return s_fail(err, errlen, "tensor %s holds %zu floats, not its shape's %zu", x->name, x->numel,
			      rows * cols);
	if (x->tp_split == MODEL_TP_REPLICATED || t == 1) {
		if (rows != full_rows || cols != full_cols)
			return s_fail(err, errlen, "tensor %s is whole on every rank but its shape is not its"
				      " logical shape", x->name);
		s_add(r, x->offset, L, x->numel, x->tp_split == MODEL_TP_REPLICATED && t > 1);
		return 0;
	}
	const bool qkv = tp_is_qkv(x);
	bool ok;
	if (x->tp_split == 0) /* row blocks; the vocabulary's may be padded; qkv: thirds of them */
		ok = cols == full_cols && (qkv ? rows % 3 == 0 && rows * (size_t)t == full_rows
					       : rows * (size_t)t >= full_rows && (rows - 1) * (size_t)t < full_rows);
	else
		ok = x->tp_split == 1 && x->ndim == 2 && rows == full_rows && cols * (size_t)t == full_cols &&
		     (!qkv || cols % 3 == 0);
	if (!ok)
		return s_fail(err, errlen, "tensor %s: local (%zu, %zu) is not rank %d's part of (%zu, %zu) by"
			      " tp_split %d (model.h)", x->name, rows, cols, k, full_rows, full_cols, x->tp_split);
	s_seg_t g = {.r = r, .off = x->offset, .L = L};
	tp_segments(x, k, t, 0, x->numel, s_segment, &g);
	return 0;
}

int tplayout_build(const model_tensor_t *local, int n, int tp_rank, int tp_size, tplayout_t *ret,
                   char *err, size_t errlen)
{
	if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size || n < 0)
		return s_fail(err, errlen, "TP rank %d of %d is not a rank of the group", tp_rank, tp_size);
	tplayout_t l = {.tp_rank = tp_rank, .tp_size = tp_size, .n_tensors = n};
	s_runs_t r = {0};
	l.logical = calloc((size_t)(n > 0 ? n : 1), sizeof *l.logical);
	if (!l.logical)
		return -ENOMEM;
	size_t L = 0, expect_local = 0;
	for (int i = 0; i < n; i++) {
		const model_tensor_t *x = &local[i];
		if (x->offset != expect_local) {
			free(l.logical);
			free(r.runs);
			return s_fail(err, errlen, "tensor %s starts at %zu, not right after the one before (%zu)",
				      x->name, x->offset, expect_local);
		}
		int rc = s_tensor_runs(x, L, tp_rank, tp_size, &r, err, errlen);
		if (rc < 0) {
			free(l.logical);
			free(r.runs);
			return rc;
		}
		model_tensor_t *g = &l.logical[i];
		*g = *x;
		g->shape[0] = x->full_shape[0];
		g->shape[1] = x->ndim == 2 ? x->full_shape[1] : 0;
		g->offset = L;
		g->numel = (size_t)x->full_shape[0] * (x->ndim == 2 ? (size_t)x->full_shape[1] : 1);
		L += g->numel;
		expect_local += x->numel;
	}
	if (r.oom) {
		free(l.logical);
		free(r.runs);
		return -ENOMEM;
	}
	l.n_local = expect_local;
	l.n_logical = L;
	l.runs = r.runs;
	l.n_runs = r.n;
	*ret = l;
	return 0;
}

void tplayout_free(tplayout_t *l)
{
	free(l->runs);
	free(l->logical);
	memset(l, 0, sizeof *l);
}

void tplayout_to_logical(const tplayout_t *l, const float *local, size_t lo, size_t count,
                         bool with_replicated, float *out)
{
	const size_t hi = lo + count;
	for (size_t i = 0; i < l->n_runs; i++) {
		const tplayout_run_t *u = &l->runs[i];
		if (u->replicated && !with_replicated)
			continue;
		size_t a = u->logical > lo ? u->logical : lo;
		size_t b = u->logical + u->n < hi ? u->logical + u->n : hi;
		if (a < b)
			memcpy(out + (a - lo), local + u->local + (a - u->logical), (b - a) * sizeof(float));
	}
}

int tplayout_each_local(const tplayout_t *l, size_t lo, size_t count,
                        int (*fn)(void *ctx, size_t local_off, size_t logical_off, size_t n),
                        void *ctx)
{
	const size_t hi = lo + count;
	for (size_t i = 0; i < l->n_runs; i++) {
		const tplayout_run_t *u = &l->runs[i];
		if (u->local >= hi)
			break; /* runs are in local order */
		size_t a = u->local > lo ? u->local : lo;
		size_t b = u->local + u->n < hi ? u->local + u->n : hi;
		if (a >= b)
			continue;
		int rc = fn(ctx, a, u->logical + (a - u->local), b - a);
		if (rc < 0)
			return rc;
	}
	return 0;
}

typedef struct {
	const float *logical;
	float *out;
	size_t lo;
} s_copy_t;

static int s_copy_piece(void *ctx, size_t local_off, size_t logical_off, size_t n)
{
	s_copy_t *c = ctx;
	memcpy(c->out + (local_off - c->lo), c->logical + logical_off, n * sizeof(float));
	return 0;
}

void tplayout_from_logical(const tplayout_t *l, const float *logical, size_t lo, size_t count,
                           float *out)
{
	memset(out, 0, count * sizeof(float));
	s_copy_t c = {.logical = logical, .out = out, .lo = lo};
	tplayout_each_local(l, lo, count, s_copy_piece, &c);
}
