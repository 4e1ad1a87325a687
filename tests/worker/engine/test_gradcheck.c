/*
 * test_gradcheck ARCH: the engine's backward pass against central finite
 * differences of its forward pass, through the architecture's CPU row of
 * the model registry (model.h), for a sample of elements of EVERY
 * parameter tensor by name. ARCH "gpt2": a tiny GPT-2 (2 layers, 2 heads,
 * C=8, V=11, B=2, T=5; the tied wte included). ARCH "llama": a tiny Llama
 * (2 layers, 4 heads sharing 2 KV heads, C=16, FFN 24, V=11, RoPE with
 * Llama 3.1 scaling whose three frequency bands all occur), untied and
 * then tied.
 *
 * The forward runs in fp32, so the finite difference uses a large step
 * (EPS = 1e-2 on weights of scale ~0.3) and the tolerance covers fp32
 * rounding of the loss and the O(EPS^2) truncation error:
 *   |analytic - numeric| <= ABS_TOL + REL_TOL * max(|analytic|, |numeric|)
 * with ABS_TOL = 3e-4 and REL_TOL = 1e-2 (observed: errors below 1e-4). A wrong sign, a missing term or a
 * wrong transposition gives errors of order |gradient| and fails.
 *
 * Also checked: gradient accumulation (two backwards at loss_scale 0.5 equal
 * one at 1.0), a smaller (B, T) than the model was created for, and bf16 mode
 * (gradients within 5% in norm of the fp32 ones, per tensor).
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2.h"
#include "gpt2_model.h"
#include "llama.h"
#include "llama_model.h"

#define EPS 1e-2f
#define ABS_TOL 3e-4
#define REL_TOL 1e-2
#define SAMPLES_PER_TENSOR 6

static int n_failed;

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
		n_failed++;
}

static uint64_t rng_state = 0x1234567ull;

static double rnd(void) /* uniform [0, 1) */
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(rng_state >> 11) / 9007199254740992.0;
}

enum { L = 2, V = 11, B = 2, T = 5, SEQ = 6 };

/* The architecture under test and its row's object. */
static const char *arch = "gpt2";
static bool tied = false;

typedef struct {
	const model_ops_t *ops;
	void *impl;
} tmodel_t;

static size_t num_params(const tmodel_t *m)
{
	return m->ops->num_params(m->impl);
}

static float *params(const tmodel_t *m)
{
	return m->ops->params(m->impl);
}

static float *grads(const tmodel_t *m)
{
	return m->ops->grads(m->impl);
}

static float forward(const tmodel_t *m, const int32_t *in, const int32_t *tg)
{
	return m->ops->forward(m->impl, in, tg, B, T);
}

static const float *logits_of(const tmodel_t *m)
{
	return strcmp(arch, "gpt2") == 0 ? gpt2_logits(m->impl) : llama_logits(m->impl);
}

static const model_tensor_t *tensors(const tmodel_t *m, int *ret_n)
{
	return m->ops->tensors(m->impl, ret_n);
}

static void free_model(tmodel_t *m)
{
	m->ops->free(m->impl);
}

static tmodel_t make_model(int max_B, int max_T, model_precision_t prec)
{
	model_config_t cfg = {.n_layer = L, .n_head = 2, .n_embd = 8, .vocab_size = V, .seq_len = SEQ};
	tmodel_t m = {.ops = &gpt2_model_cpu};
	if (strcmp(arch, "llama") == 0) {
		m.ops = &llama_model_cpu;
		cfg.n_head = 4;
		cfg.n_kv_head = 2;
		cfg.n_embd = 16;
		cfg.ffn_dim = 24;
		cfg.rope_theta = 100.0; /* hd 4: inv_freq 1 and 0.1, wavelengths 6.3 and 63 */
		cfg.rope_scaling = (model_rope_scaling_t){4.0, 1.0, 4.0, 16}; /* keep < 4 < smooth < 16 < divide */
		cfg.norm_eps = 1e-5;
		cfg.tie_embeddings = tied;
	}
	model_options_t opt = {.max_B = max_B, .max_T = max_T, .precision = prec};
	char err[256];
	if (m.ops->create(&cfg, &opt, &m.impl, err, sizeof err) < 0) {
		printf("FAIL create: %s\n", err);
		exit(1);
	}
	m.ops->init_params(m.impl, 42);
	/* Weights of scale ~0.3 and non-trivial norm parameters, so that every
	 * gradient is well above fp32 noise. */
	rng_state = 99;
	float *p = params(&m);
	int n;
	const model_tensor_t *tab = tensors(&m, &n);
	for (int i = 0; i < n; i++) {
		const model_tensor_t *t = &tab[i];
		for (size_t k = 0; k < t->numel; k++)
			p[t->offset + k] += (float)((rnd() - 0.5) * 0.6);
	}
	return m;
}

static int32_t inputs[B * T], targets[B * T];

static void gradcheck(void)
{
	tmodel_t mm = make_model(B, T, MODEL_PRECISION_FP32), *m = &mm;
	float *p = params(m);
	size_t n = num_params(m);
	float *grad = malloc(n * sizeof(float));

	m->ops->zero_grad(m->impl);
	forward(m, inputs, targets);
	m->ops->backward(m->impl, 1.0f);
	memcpy(grad, grads(m), n * sizeof(float));

	int bad_tensors = 0, n_tensors;
	double worst = 0;
	const model_tensor_t *tab = tensors(m, &n_tensors);
	for (int i = 0; i < n_tensors; i++) {
		const model_tensor_t *t = &tab[i];
		int bad = 0;
		double max_err = 0, max_grad = 0;
		for (int s = 0; s < SAMPLES_PER_TENSOR; s++) {
			/* first and last element, then random ones */
			size_t k = s == 0 ? 0 : s == 1 ? t->numel - 1 : (size_t)(rnd() * (double)t->numel);
			size_t idx = t->offset + k;
			float saved = p[idx];
			p[idx] = saved + EPS;
			float lp = forward(m, inputs, targets);
			p[idx] = saved - EPS;
			float lm = forward(m, inputs, targets);
			p[idx] = saved;
			double num = ((double)lp - (double)lm) / (2.0 * EPS);
			double ana = grad[idx];
			double err = fabs(num - ana);
			double scale = fabs(num) > fabs(ana) ? fabs(num) : fabs(ana);
			if (err > ABS_TOL + REL_TOL * scale) {
				printf("     %s[%zu]: analytic %.6g numeric %.6g\n", t->name, k, ana, num);
				bad++;
			}
			max_err = err > max_err ? err : max_err;
			max_grad = fabs(ana) > max_grad ? fabs(ana) : max_grad;
		}
		worst = max_err > worst ? max_err : worst;
		char what[160];
		snprintf(what, sizeof what, "gradcheck %-46s max |err| %.2e (max |grad| %.2e)", t->name,
			 max_err, max_grad);
		check(bad == 0, what);
		bad_tensors += bad != 0;
	}
	printf("     %d tensors checked, worst |err| %.2e\n", n_tensors, worst);
	if (strcmp(arch, "gpt2") == 0)
		check(n_tensors == 2 + 12 * L + 2, "tensor count is 2 + 12 L + 2");
	else
		check(n_tensors == 1 + 9 * L + (tied ? 1 : 2), "tensor count is 1 + 9 L + 1 (+1 untied)");
	check(bad_tensors == 0, "every tensor agrees with finite differences");
	free(grad);
	free_model(m);
}

static double rel_diff(const float *a, const float *b, size_t n)
{
	double d = 0, s = 0;
	for (size_t i = 0; i < n; i++) {
		d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		s += (double)b[i] * b[i];
	}
	return s > 0 ? sqrt(d / s) : sqrt(d);
}

static void accumulation(void)
{
	tmodel_t mm = make_model(B, T, MODEL_PRECISION_FP32), *m = &mm;
	size_t n = num_params(m);
	float *g1 = malloc(n * sizeof(float));
	m->ops->zero_grad(m->impl);
	float l1 = forward(m, inputs, targets);
	m->ops->backward(m->impl, 1.0f);
	memcpy(g1, grads(m), n * sizeof(float));
	m->ops->zero_grad(m->impl);
	for (int k = 0; k < 2; k++) {
		forward(m, inputs, targets);
		m->ops->backward(m->impl, 0.5f);
	}
	check(rel_diff(grads(m), g1, n) < 1e-6, "two backwards at 0.5 add up to one at 1.0");

	/* the same batch through a model created for a larger (B, T) */
	tmodel_t bb = make_model(B + 1, SEQ, MODEL_PRECISION_FP32), *big = &bb;
	big->ops->zero_grad(big->impl);
	float l2 = forward(big, inputs, targets);
	big->ops->backward(big->impl, 1.0f);
	check(fabsf(l1 - l2) <= 1e-6f * fabsf(l1), "smaller (B, T) than max: same loss");
	check(rel_diff(grads(big), g1, n) < 1e-5, "smaller (B, T) than max: same gradients");

	/* forward without targets: the logits agree with those of a forward with them */
	forward(big, inputs, targets);
	float *logits = malloc((size_t)B * T * V * sizeof(float));
	memcpy(logits, logits_of(big), (size_t)B * T * V * sizeof(float));
	check(forward(big, inputs, NULL) == 0.0f, "forward without targets returns 0");
	check(memcmp(logits, logits_of(big), (size_t)B * T * V * sizeof(float)) == 0,
	      "forward without targets gives the same logits");
	free(logits);
	free_model(big);
	free(g1);
	free_model(m);
}

static void bf16_mode(void)
{
	tmodel_t ff = make_model(B, T, MODEL_PRECISION_FP32), *f = &ff;
	tmodel_t hh = make_model(B, T, MODEL_PRECISION_BF16), *h = &hh;
	f->ops->zero_grad(f->impl);
	h->ops->zero_grad(h->impl);
	float lf = forward(f, inputs, targets);
	float lh = forward(h, inputs, targets);
	f->ops->backward(f->impl, 1.0f);
	h->ops->backward(h->impl, 1.0f);
	char what[160];
	snprintf(what, sizeof what, "bf16 loss %.5f within 2%% of fp32 %.5f", lh, lf);
	check(fabsf(lh - lf) <= 0.02f * fabsf(lf), what);
	int bad = 0;
	double worst = 0;
	int n_tensors;
	const model_tensor_t *tab = tensors(f, &n_tensors);
	for (int i = 0; i < n_tensors; i++) {
		const model_tensor_t *t = &tab[i];
		double r = rel_diff(grads(h) + t->offset, grads(f) + t->offset, t->numel);
		worst = r > worst ? r : worst;
		if (r > 0.05) {
			printf("     bf16 %s: relative gradient error %.3f\n", t->name, r);
			bad++;
		}
	}
	snprintf(what, sizeof what, "bf16 gradients within 5%% (norm) of fp32, every tensor (worst %.4f)",
		 worst);
	check(bad == 0, what);
	/* bf16 GEMM inputs must actually be rounded: exactly fp32 means no bf16 */
	check(worst > 0, "bf16 mode differs from fp32");
	free_model(f);
	free_model(h);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		arch = argv[1];
	if (strcmp(arch, "gpt2") != 0 && strcmp(arch, "llama") != 0) {
		fprintf(stderr, "usage: test_gradcheck [gpt2|llama]\n");
		return 2;
	}
	for (int i = 0; i < B * T; i++) {
		inputs[i] = (int32_t)(rnd() * V);
		targets[i] = (int32_t)(rnd() * V);
	}
	/* GPT-2 once (its LM head is always tied); Llama untied, then tied */
	for (int pass = 0; pass < (strcmp(arch, "llama") == 0 ? 2 : 1); pass++) {
		tied = pass == 1;
		printf("---- %s%s\n", arch, strcmp(arch, "llama") == 0 ? (tied ? " tied" : " untied") : "");
		gradcheck();
		accumulation();
		bf16_mode();
	}
	printf("%s\n", n_failed ? "test_gradcheck: FAILED" : "test_gradcheck: all passed");
	return n_failed ? 1 : 0;
}
