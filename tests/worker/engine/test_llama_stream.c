/*
 * test_llama_stream: Llama's streamed modes (model.h's MODEL_STREAM_GRADS,
 * ZeRO-2, and MODEL_STREAM_ALL, ZeRO-3) against MODEL_DENSE on a tiny
 * model whose vocabulary spans three streamed blocks, untied and tied.
 *
 * The stream here is what the trainer's does, minus the network: fetch
 * copies the range into a buffer of exactly its size (so a read outside
 * the range is caught by ASan, and wrong offsets give wrong numbers),
 * checks the size against model_max_range and the order against the
 * prefetch hint; grad_end adds the range's gradients into a full buffer.
 *
 * Expected: the loss is the same bits in all modes (forward does the same
 * arithmetic; the LM head's blocks are columns of one GEMM); STREAM_GRADS
 * and STREAM_ALL give the same bits as each other; against DENSE the
 * gradients agree to 1e-5 (norm-wise relative, per tensor): the streamed
 * LM head sums its blocks' contributions to d(final norm) one block after
 * another, and a tied embedding's two gradient ranges are added by the
 * stream, both in another order than one dense GEMM (fp32 rounding, ~1e-7).
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama_model.h"

static int n_failed;

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
		n_failed++;
}

enum { B = 2, T = 6, V = 300 };

typedef struct {
	const float *params; /* the full parameters the "shards" hold */
	float *grads;        /* gradients added up from grad_end */
	size_t max_range;
	model_range_t expect_next; /* the last prefetch hint */
	bool have_hint;
	int bad_order, bad_size, n_fetch, n_grad;
	float *held;
} fake_t;

static const float *s_fetch(void *ctx, model_range_t r, model_range_t next)
{
	fake_t *f = ctx;
	if (r.hi - r.lo > f->max_range || r.hi <= r.lo)
		f->bad_size++;
	if (f->have_hint && (f->expect_next.lo != r.lo || f->expect_next.hi != r.hi) &&
	    f->expect_next.hi > f->expect_next.lo)
		f->bad_order++;
	f->expect_next = next;
	f->have_hint = true;
	f->held = malloc((r.hi - r.lo) * sizeof(float));
	memcpy(f->held, f->params + r.lo, (r.hi - r.lo) * sizeof(float));
	f->n_fetch++;
	return f->held;
}

static void s_release(void *ctx, const float *p)
{
	fake_t *f = ctx;
	if (p != f->held)
		f->bad_order++;
	free(f->held);
	f->held = NULL;
}

static float *s_grad_begin(void *ctx, model_range_t r)
{
	fake_t *f = ctx;
	if (r.hi - r.lo > f->max_range)
		f->bad_size++;
	return calloc(r.hi - r.lo, sizeof(float));
}

static void s_grad_end(void *ctx, float *g, model_range_t r)
{
	fake_t *f = ctx;
	for (size_t i = r.lo; i < r.hi; i++)
		f->grads[i] += g[i - r.lo];
	free(g);
	f->n_grad++;
}

static model_config_t cfg_of(bool tied)
{
	return (model_config_t){.n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 16, .ffn_dim = 24,
				.vocab_size = V, .seq_len = T, .rope_theta = 10000.0, .norm_eps = 1e-5,
				.rope_scaling = {8.0, 1.0, 4.0, 4}, .tie_embeddings = tied};
}

static double rel(const float *a, const float *b, size_t n)
{
	double d = 0, s = 0;
	for (size_t i = 0; i < n; i++) {
		d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		s += (double)b[i] * b[i];
	}
	return s > 0 ? sqrt(d / s) : sqrt(d);
}

/* loss and gradients of one step in `mode` (grads: n floats out) */
static float run(bool tied, model_streaming_t mode, model_precision_t prec, const float *params,
                 const int32_t *in, const int32_t *tg, float *grads, fake_t *f)
{
	const model_ops_t *ops = &llama_model_cpu;
	model_config_t cfg = cfg_of(tied);
	model_stream_t st = {f, s_fetch, s_release, s_grad_begin, s_grad_end};
	model_options_t opt = {.max_B = B, .max_T = T, .precision = prec, .streaming = mode,
			       .stream = mode == MODEL_DENSE ? NULL : &st};
	void *m;
	char err[256];
	if (ops->create(&cfg, &opt, &m, err, sizeof err) < 0) {
		printf("FAIL create: %s\n", err);
		exit(1);
	}
	size_t n = ops->num_params(m);
	f->params = params;
	f->grads = grads;
	f->max_range = ops->max_range(m);
	memset(grads, 0, n * sizeof(float));
	if (mode != MODEL_STREAM_ALL)
		memcpy(ops->params(m), params, n * sizeof(float));
	check(mode == MODEL_STREAM_ALL ? ops->params(m) == NULL : ops->params(m) != NULL,
	      "parameter buffer held only when not MODEL_STREAM_ALL");
	check(mode == MODEL_DENSE ? ops->grads(m) != NULL : ops->grads(m) == NULL,
	      "gradient buffer held only in MODEL_DENSE");
	ops->zero_grad(m);
	float loss = ops->forward(m, in, tg, B, T);
	f->have_hint = false;
	ops->backward(m, 1.0f);
	if (mode == MODEL_DENSE)
		memcpy(grads, ops->grads(m), n * sizeof(float));
	ops->free(m);
	return loss;
}

static void modes(bool tied, model_precision_t prec)
{
	const model_ops_t *ops = &llama_model_cpu;
	model_config_t cfg = cfg_of(tied);
	model_options_t opt = {.max_B = B, .max_T = T, .precision = MODEL_PRECISION_FP32};
	void *m;
	char err[256];
	if (ops->create(&cfg, &opt, &m, err, sizeof err) < 0) {
		printf("FAIL create: %s\n", err);
		exit(1);
	}
	size_t n = ops->num_params(m);
	int nt;
	const model_tensor_t *tab = ops->tensors(m, &nt);
	model_tensor_t *tabc = malloc((size_t)nt * sizeof *tabc);
	memcpy(tabc, tab, (size_t)nt * sizeof *tabc);
	float *params = malloc(n * sizeof(float));
	ops->init_range(m, 5, 0, n, params);
	ops->free(m);
	/* larger weights so that every gradient is well above rounding */
	for (size_t i = 0; i < n; i++)
		params[i] *= 10.0f;
	int32_t in[B * T], tg[B * T];
	for (int i = 0; i < B * T; i++) {
		in[i] = (i * 97 + 13) % V;
		tg[i] = (i * 61 + 7) % V;
	}
	float *gd = malloc(n * sizeof(float)), *g2 = malloc(n * sizeof(float)), *g3 = malloc(n * sizeof(float));
	fake_t fd = {0}, f2 = {0}, f3 = {0};
	float ld = run(tied, MODEL_DENSE, prec, params, in, tg, gd, &fd);
	float l2 = run(tied, MODEL_STREAM_GRADS, prec, params, in, tg, g2, &f2);
	float l3 = run(tied, MODEL_STREAM_ALL, prec, params, in, tg, g3, &f3);
	char what[200];
	snprintf(what, sizeof what, "%s %s: loss the same bits in all modes (%.7f %.7f %.7f)",
		 tied ? "tied" : "untied", prec == MODEL_PRECISION_BF16 ? "bf16" : "fp32", ld, l2, l3);
	check(ld == l2 && l2 == l3, what);
	check(memcmp(g2, g3, n * sizeof(float)) == 0, "STREAM_GRADS and STREAM_ALL: same gradient bits");
	check(f3.bad_order == 0 && f3.bad_size == 0 && f2.bad_size == 0,
	      "fetches follow the prefetch hints, ranges within max_range");
	/* embed blocks 3, 2 layers, norm, head blocks 3 (forward); head 3, norm, 2 layers (backward) */
	check(f3.n_fetch == 3 + 2 + 1 + 3 + 3 + 1 + 2, "STREAM_ALL: 15 fetches per step");
	check(f2.n_grad == 3 + 1 + 2 + 3 && f3.n_grad == f2.n_grad, "9 gradient ranges per step");
	double worst = 0;
	for (int i = 0; i < nt; i++) {
		double r = rel(g2 + tabc[i].offset, gd + tabc[i].offset, tabc[i].numel);
		worst = r > worst ? r : worst;
	}
	snprintf(what, sizeof what, "streamed gradients within 1e-5 of dense, every tensor (worst %.2e)",
		 worst);
	check(worst <= 1e-5, what);
	free(gd);
	free(g2);
	free(g3);
	free(params);
	free(tabc);
}

int main(void)
{
	modes(false, MODEL_PRECISION_FP32);
	modes(true, MODEL_PRECISION_FP32);
	modes(false, MODEL_PRECISION_BF16);
	printf("%s\n", n_failed ? "test_llama_stream: FAILED" : "test_llama_stream: all passed");
	return n_failed ? 1 : 0;
}
