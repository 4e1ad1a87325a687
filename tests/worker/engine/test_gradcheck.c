/*
 * test_gradcheck: the engine's backward pass against central finite
 * differences of its forward pass, on a tiny GPT-2 (2 layers, 2 heads, C=8,
 * V=11, B=2, T=5), for a sample of elements of EVERY parameter tensor by name
 * (the tied wte included).
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2.h"

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

enum { L = 2, H = 2, C = 8, V = 11, B = 2, T = 5, SEQ = 6 };

static gpt2_t *make_model(int max_B, int max_T, gpt2_precision_t prec)
{
	gpt2_config_t cfg = {.n_layer = L, .n_head = H, .n_embd = C, .vocab_size = V, .seq_len = SEQ};
	char err[256];
	gpt2_t *m = gpt2_create(&cfg, max_B, max_T, prec, err, sizeof err);
	if (!m) {
		printf("FAIL gpt2_create: %s\n", err);
		exit(1);
	}
	gpt2_init_params(m, 42);
	/* Weights of scale ~0.3 and non-trivial LayerNorm parameters, so that every
	 * gradient is well above fp32 noise. */
	rng_state = 99;
	float *p = gpt2_params(m);
	for (int i = 0; i < gpt2_num_tensors(m); i++) {
		const gpt2_tensor_t *t = gpt2_tensor(m, i);
		for (size_t k = 0; k < t->numel; k++)
			p[t->offset + k] += (float)((rnd() - 0.5) * 0.6);
	}
	return m;
}

static int32_t inputs[B * T], targets[B * T];

static void gradcheck(void)
{
	gpt2_t *m = make_model(B, T, GPT2_PRECISION_FP32);
	float *p = gpt2_params(m);
	size_t n = gpt2_num_params(m);
	float *grad = malloc(n * sizeof(float));

	gpt2_zero_grad(m);
	gpt2_forward(m, inputs, targets, B, T);
	gpt2_backward(m, 1.0f);
	memcpy(grad, gpt2_grads(m), n * sizeof(float));

	int bad_tensors = 0;
	double worst = 0;
	for (int i = 0; i < gpt2_num_tensors(m); i++) {
		const gpt2_tensor_t *t = gpt2_tensor(m, i);
		int bad = 0;
		double max_err = 0, max_grad = 0;
		for (int s = 0; s < SAMPLES_PER_TENSOR; s++) {
			/* first and last element, then random ones */
			size_t k = s == 0 ? 0 : s == 1 ? t->numel - 1 : (size_t)(rnd() * (double)t->numel);
			size_t idx = t->offset + k;
			float saved = p[idx];
			p[idx] = saved + EPS;
			float lp = gpt2_forward(m, inputs, targets, B, T);
			p[idx] = saved - EPS;
			float lm = gpt2_forward(m, inputs, targets, B, T);
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
		snprintf(what, sizeof what, "gradcheck %-22s max |err| %.2e (max |grad| %.2e)", t->name,
			 max_err, max_grad);
		check(bad == 0, what);
		bad_tensors += bad != 0;
	}
	printf("     %d tensors checked, worst |err| %.2e\n", gpt2_num_tensors(m), worst);
	check(gpt2_num_tensors(m) == 2 + 12 * L + 2, "tensor count is 2 + 12 L + 2");
	check(bad_tensors == 0, "every tensor agrees with finite differences");
	free(grad);
	gpt2_free(m);
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
	gpt2_t *m = make_model(B, T, GPT2_PRECISION_FP32);
	size_t n = gpt2_num_params(m);
	float *g1 = malloc(n * sizeof(float));
	gpt2_zero_grad(m);
	float l1 = gpt2_forward(m, inputs, targets, B, T);
	gpt2_backward(m, 1.0f);
	memcpy(g1, gpt2_grads(m), n * sizeof(float));
	gpt2_zero_grad(m);
	for (int k = 0; k < 2; k++) {
		gpt2_forward(m, inputs, targets, B, T);
		gpt2_backward(m, 0.5f);
	}
	check(rel_diff(gpt2_grads(m), g1, n) < 1e-6, "two backwards at 0.5 add up to one at 1.0");

	/* the same batch through a model created for a larger (B, T) */
	gpt2_t *big = make_model(B + 1, SEQ, GPT2_PRECISION_FP32);
	gpt2_zero_grad(big);
	float l2 = gpt2_forward(big, inputs, targets, B, T);
	gpt2_backward(big, 1.0f);
	check(fabsf(l1 - l2) <= 1e-6f * fabsf(l1), "smaller (B, T) than max: same loss");
	check(rel_diff(gpt2_grads(big), g1, n) < 1e-5, "smaller (B, T) than max: same gradients");

	/* forward without targets: the logits agree with those of a forward with them */
	gpt2_forward(big, inputs, targets, B, T);
	float *logits = malloc((size_t)B * T * V * sizeof(float));
	memcpy(logits, gpt2_logits(big), (size_t)B * T * V * sizeof(float));
	check(gpt2_forward(big, inputs, NULL, B, T) == 0.0f, "forward without targets returns 0");
	check(memcmp(logits, gpt2_logits(big), (size_t)B * T * V * sizeof(float)) == 0,
	      "forward without targets gives the same logits");
	free(logits);
	gpt2_free(big);
	free(g1);
	gpt2_free(m);
}

static void bf16_mode(void)
{
	gpt2_t *f = make_model(B, T, GPT2_PRECISION_FP32);
	gpt2_t *h = make_model(B, T, GPT2_PRECISION_BF16);
	gpt2_zero_grad(f);
	gpt2_zero_grad(h);
	float lf = gpt2_forward(f, inputs, targets, B, T);
	float lh = gpt2_forward(h, inputs, targets, B, T);
	gpt2_backward(f, 1.0f);
	gpt2_backward(h, 1.0f);
	char what[160];
	snprintf(what, sizeof what, "bf16 loss %.5f within 2%% of fp32 %.5f", lh, lf);
	check(fabsf(lh - lf) <= 0.02f * fabsf(lf), what);
	int bad = 0;
	double worst = 0;
	for (int i = 0; i < gpt2_num_tensors(f); i++) {
		const gpt2_tensor_t *t = gpt2_tensor(f, i);
		double r = rel_diff(gpt2_grads(h) + t->offset, gpt2_grads(f) + t->offset, t->numel);
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
	gpt2_free(f);
	gpt2_free(h);
}

int main(void)
{
	for (int i = 0; i < B * T; i++) {
		inputs[i] = (int32_t)(rnd() * V);
		targets[i] = (int32_t)(rnd() * V);
	}
	gradcheck();
	accumulation();
	bf16_mode();
	printf("%s\n", n_failed ? "test_gradcheck: FAILED" : "test_gradcheck: all passed");
	return n_failed ? 1 : 0;
}
