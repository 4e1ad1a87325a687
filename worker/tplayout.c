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

static bool s_ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* GPT-2's c_attn (model.h's "qkv" rule). */
static bool s_qkv(const model_tensor_t *x)
{
	return s_ends_with(x->name, "attn.c_attn.weight") || s_ends_with(x->name, "attn.c_attn.bias");
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

/* The runs of tensor x (local table entry) at logical offset L for rank k of t. */
static int s_tensor_runs(const model_tensor_t *x, size_t L, int k, int t, s_runs_t *r, char *err,
                         size_t errlen)
{
	const size_t off = x->offset;
	const bool qkv = s_qkv(x);
	const size_t rows = (size_t)x->shape[0], full_rows = (size_t)x->full_shape[0];
	const size_t cols = x->ndim == 2 ? (size_t)x->shape[1] : 1;
	const size_t full_cols = x->ndim == 2 ? (size_t)x->full_shape[1] : 1;
	if (x->tp_split == MODEL_TP_REPLICATED || t == 1) {
		if (x->numel != (size_t)(x->full_shape[0] * (x->ndim == 2 ? x->full_shape[1] : 1)))
			return s_fail(err, errlen, "tensor %s holds %zu floats but its logical shape is not"
				      " that size", x->name, x->numel);
		s_add(r, off, L, x->numel, x->tp_split == MODEL_TP_REPLICATED && t > 1);
		return 0;
	}
	if (x->tp_split == 0 && qkv && x->ndim == 1) { /* c_attn.bias: [q_k | k_k | v_k] */
		if (rows % 3 || full_rows % 3 || rows / 3 * (size_t)t != full_rows / 3)
			return s_fail(err, errlen, "tensor %s: %zu local of %zu logical is not the qkv rule",
				      x->name, rows, full_rows);
		const size_t part = rows / 3, C = full_rows / 3;
		for (size_t p = 0; p < 3; p++)
			s_add(r, off + p * part, L + p * C + (size_t)k * part, part, false);
		return 0;
	}
	if (x->tp_split == 0) { /* blocks of rows; the vocabulary's last block may be padding */
		if (cols != full_cols || rows * (size_t)t < full_rows)
			return s_fail(err, errlen, "tensor %s: local rows %zu x %d ranks do not cover %zu",
				      x->name, rows, t, full_rows);
		size_t r0 = (size_t)k * rows;
		size_t valid = r0 >= full_rows ? 0 : full_rows - r0 < rows ? full_rows - r0 : rows;
		s_add(r, off, L + r0 * full_cols, valid * cols, false);
		return 0;
	}
	if (x->tp_split == 1 && x->ndim == 2) {
		if (rows != full_rows || cols * (size_t)t != full_cols || (qkv && cols % 3))
			return s_fail(err, errlen, "tensor %s: local (%zu, %zu) is not a column block of (%zu,"
				      " %zu) for %d ranks", x->name, rows, cols, full_rows, full_cols, t);
		for (size_t i = 0; i < rows; i++) {
			if (!qkv) {
				s_add(r, off + i * cols, L + i * full_cols + (size_t)k * cols, cols, false);
				continue;
			}
			const size_t part = cols / 3, C = full_cols / 3;
			for (size_t p = 0; p < 3; p++)
				s_add(r, off + i * cols + p * part, L + i * full_cols + p * C + (size_t)k * part,
				      part, false);
		}
		return 0;
	}
	return s_fail(err, errlen, "tensor %s: tp_split %d of a %d-D tensor is not one of model.h's rules",
		      x->name, x->tp_split, x->ndim);
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
