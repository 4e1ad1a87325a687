/*
 * test_optim: the learning-rate schedule at its corners, one AdamW step
 * against values computed by hand (in double, PyTorch's formula), no weight
 * decay on biases and LayerNorm parameters, updates restricted to [lo, hi),
 * and optim_sum_squares independent of the thread count and exact on
 * known inputs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "gpt2.h"
#include "optim.h"

static int n_failed;

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
		n_failed++;
}

static int close_to(double a, double b, double tol)
{
	return fabs(a - b) <= tol * (fabs(b) > 1 ? fabs(b) : 1);
}

static void lr_schedule(void)
{
	/* warmup 10 steps to 1e-3, cosine to 1e-4 at step 100 */
	check(close_to(optim_lr_at(0, 100, 10, 1e-3, 1e-4, 1), 1e-4, 1e-12), "warmup step 0 = lr/warmup");
	check(close_to(optim_lr_at(4, 100, 10, 1e-3, 1e-4, 1), 5e-4, 1e-12), "warmup step 4 = 5 lr/warmup");
	check(close_to(optim_lr_at(9, 100, 10, 1e-3, 1e-4, 1), 1e-3, 1e-12), "warmup ends at lr");
	check(close_to(optim_lr_at(10, 100, 10, 1e-3, 1e-4, 1), 1e-3, 1e-12), "cosine starts at lr");
	check(close_to(optim_lr_at(55, 100, 10, 1e-3, 1e-4, 1), 5.5e-4, 1e-12), "cosine midpoint");
	check(close_to(optim_lr_at(100, 100, 10, 1e-3, 1e-4, 1), 1e-4, 1e-12), "cosine ends at min_lr");
	check(optim_lr_at(99, 100, 10, 1e-3, 1e-4, 1) > 1e-4, "cosine above min_lr before the end");
	check(close_to(optim_lr_at(500, 100, 10, 1e-3, 1e-4, 1), 1e-4, 1e-12), "past the end: min_lr");
	int mono = 1;
	for (int s = 10; s < 100; s++)
		mono &= optim_lr_at(s + 1, 100, 10, 1e-3, 1e-4, 1) <= optim_lr_at(s, 100, 10, 1e-3, 1e-4, 1);
	check(mono, "cosine never increases");
	check(close_to(optim_lr_at(50, 100, 10, 1e-3, 1e-4, 0), 1e-3, 1e-12), "constant after warmup");
	check(close_to(optim_lr_at(0, 100, 0, 1e-3, 1e-4, 0), 1e-3, 1e-12), "no warmup: lr from step 0");
	check(close_to(optim_lr_at(0, 100, 0, 1e-3, 1e-4, 1), 1e-3, 1e-12), "no warmup: cosine from lr");
}

static gpt2_t *tiny_model(void)
{
	gpt2_config_t cfg = {.n_layer = 1, .n_head = 2, .n_embd = 4, .vocab_size = 5, .seq_len = 3};
	char err[256];
	gpt2_t *m = gpt2_create(&cfg, 1, 3, GPT2_PRECISION_FP32, err, sizeof err);
	if (!m) {
		printf("FAIL gpt2_create: %s\n", err);
		exit(1);
	}
	return m;
}

/* PyTorch AdamW, in double */
static double ref_adamw(double p, double g, double *m, double *v, double lr, double wd, int decay, int t)
{
	const double b1 = 0.9, b2 = 0.95, eps = 1e-8;
	if (decay)
		p *= 1 - lr * wd;
	*m = b1 * *m + (1 - b1) * g;
	*v = b2 * *v + (1 - b2) * g * g;
	double mhat = *m / (1 - pow(b1, t)), vhat = *v / (1 - pow(b2, t));
	return p - lr * mhat / (sqrt(vhat) + eps);
}

static void adamw(void)
{
	gpt2_t *model = tiny_model();
	size_t n = gpt2_num_params(model);
	float *p = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
	float *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
	double *rp = malloc(n * sizeof(double)), *rm = calloc(n, sizeof(double)),
	       *rv = calloc(n, sizeof(double));
	for (size_t i = 0; i < n; i++) {
		p[i] = (float)(0.5 - 0.01 * (double)(i % 97));
		rp[i] = p[i];
	}
	int ok = 1;
	for (int t = 1; t <= 3; t++) {
		for (size_t i = 0; i < n; i++)
			g[i] = (float)(0.1 * sin((double)i * 0.7 + t));
		optim_adamw_t hp = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
				    .weight_decay = 0.1, .t = t};
		optim_adamw_update(gpt2_tensors(model), gpt2_num_tensors(model), p, g, m, v, 0, n, &hp);
		for (int k = 0; k < gpt2_num_tensors(model); k++) {
			const gpt2_tensor_t *tt = gpt2_tensor(model, k);
			for (size_t i = tt->offset; i < tt->offset + tt->numel; i++) {
				rp[i] = ref_adamw(rp[i], g[i], &rm[i], &rv[i], 1e-2, 0.1, tt->decay, t);
				if (!close_to(p[i], rp[i], 1e-6)) {
					if (ok)
						printf("     %s step %d: %.9g vs %.9g\n", tt->name, t, p[i], rp[i]);
					ok = 0;
				}
			}
		}
	}
	check(ok, "AdamW matches the hand computation over 3 steps");

	/* decay flags: 2-D weights and embeddings only */
	int flags_ok = 1;
	for (int k = 0; k < gpt2_num_tensors(model); k++) {
		const gpt2_tensor_t *tt = gpt2_tensor(model, k);
		int want = tt->ndim == 2;
		flags_ok &= tt->decay == want;
	}
	check(flags_ok, "decay set on 2-D tensors only");
	check(!gpt2_tensor_by_name(model, "h.0.attn.c_attn.bias")->decay, "no decay on c_attn.bias");
	check(!gpt2_tensor_by_name(model, "h.0.ln_1.weight")->decay, "no decay on ln_1.weight");
	check(gpt2_tensor_by_name(model, "wte.weight")->decay, "decay on wte.weight");

	/* zero gradient: a decayed weight shrinks by exactly lr*wd, a bias stays */
	memset(g, 0, n * sizeof(float));
	memset(m, 0, n * sizeof(float));
	memset(v, 0, n * sizeof(float));
	const gpt2_tensor_t *w = gpt2_tensor_by_name(model, "h.0.mlp.c_fc.weight");
	const gpt2_tensor_t *b = gpt2_tensor_by_name(model, "h.0.mlp.c_fc.bias");
	p[w->offset] = 2.0f;
	p[b->offset] = 2.0f;
	optim_adamw_t hp = {.lr = 0.5, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .t = 1};
	optim_adamw_update(gpt2_tensors(model), gpt2_num_tensors(model), p, g, m, v, 0, n, &hp);
	check(close_to(p[w->offset], 2.0 * (1 - 0.05), 1e-7), "weight decays by lr*wd with zero gradient");
	check(p[b->offset] == 2.0f, "bias does not decay");

	/* a range update touches only [lo, hi) */
	for (size_t i = 0; i < n; i++) {
		p[i] = 1.0f;
		g[i] = 1.0f;
	}
	size_t lo = n / 3, hi = 2 * n / 3;
	optim_adamw_update(gpt2_tensors(model), gpt2_num_tensors(model), p, g, m, v, lo, hi, &hp);
	int range_ok = 1;
	for (size_t i = 0; i < n; i++)
		range_ok &= (i >= lo && i < hi) ? p[i] != 1.0f : p[i] == 1.0f;
	check(range_ok, "update of [lo, hi) changes exactly that range");

	free(p);
	free(g);
	free(m);
	free(v);
	free(rp);
	free(rm);
	free(rv);
	gpt2_free(model);
}

static void sum_squares(void)
{
	size_t n = 1000003;
	float *x = malloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		x[i] = (float)sin((double)i) * 3.0f;
	int saved = omp_get_max_threads();
	omp_set_num_threads(1);
	double s1 = optim_sum_squares(x, n);
	omp_set_num_threads(2);
	double s2 = optim_sum_squares(x, n);
	omp_set_num_threads(3);
	double s3 = optim_sum_squares(x, n);
	omp_set_num_threads(saved);
	check(s1 == s2 && s2 == s3, "sum_squares bitwise equal with 1, 2 and 3 threads");
	double ref = 0;
	for (size_t i = 0; i < n; i++)
		ref += (double)x[i] * x[i];
	check(close_to(s1, ref, 1e-12), "sum_squares equals the plain sum");
	for (size_t i = 0; i < 10; i++)
		x[i] = (float)i;
	check(optim_sum_squares(x, 10) == 285.0, "sum_squares of 0..9 is 285");
	check(optim_sum_squares(x, 0) == 0.0, "sum_squares of nothing is 0");
	optim_scale(x, 10, 0.5f);
	check(x[4] == 2.0f && x[9] == 4.5f, "optim_scale");
	free(x);
}

int main(void)
{
	lr_schedule();
	adamw();
	sum_squares();
	printf("%s\n", n_failed ? "test_optim: FAILED" : "test_optim: all passed");
	return n_failed ? 1 : 0;
}
