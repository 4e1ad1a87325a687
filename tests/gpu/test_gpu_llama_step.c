/*
 * test_gpu_llama_step: the CUDA Llama row against the CPU Llama row
 * (model.h's registry: model_create("llama", MODEL_DEVICE_CUDA / _CPU)) on
 * a tiny config with grouped-query attention, Llama 3.1 RoPE scaling and
 * an untied LM head, then the same with tied embeddings: 2 layers, C 64,
 * 4 heads of 16, 2 KV heads, FFN 96, V 256, B 3, T 40 (a partial
 * attention tile), theta 10000, scaling factor 8 / low 1 / high 4 /
 * original 16 (so all three wavelength bands occur). The same initial
 * parameters (the CPU row's init, seed 7, uploaded with dev->set_params)
 * and batches (x' = 5x + 3 mod V with random jumps); 8 steps of
 * zero_grad, forward, backward, AdamW (lr 3e-3, wd 0.1; optim.c on the CPU,
 * dev->adamw on the GPU).
 *
 * Checked, with the bounds of test_gpu_step.c (GPT-2's) and why:
 *   - the same parameter count and tensor table (names, offsets, decay);
 *     parameters up and back unchanged;
 *   - step 0's logits within LOGITS_BOUND (2e-2, rel_err of gpu_util.h:
 *     the GPU keeps them in bf16, 2^-8, after the roundings below; as
 *     GPT-2's), through llama_cuda_get_logits and llama_logits;
 *   - step 0 loss within LOSS_REL (5e-3 relative) and the whole gradient
 *     within GRAD_BOUND (5e-2 normwise, ||g - c|| / ||c||; the worst
 *     tensor printed): the GPU rounds every GEMM operand, q, k, v after
 *     RoPE, the probabilities and the attention gradients to bf16 (2^-8
 *     each) against the CPU row's fp32, a few roundings that compound
 *     (measured on cudaemu: 2.8e-3 normwise, 6.5e-3 for the worst tensor;
 *     the same bound holds for every tensor alone, so a wrong norm weight
 *     gradient cannot hide in the norm of the whole); a wrong RoPE sign, a
 *     KV head mapping or a missing RMSNorm term is an O(1) error in some
 *     tensor's gradient;
 *   - every step's loss within LOSS_REL of the CPU's: AdamW moves each
 *     parameter by ~lr a step, so a broken optimizer or decay flag moves
 *     the loss by 1e-2 within a few steps;
 *   - determinism: a second GPU run gives the same loss bits;
 *   - the gradients-ready ranges cover every parameter exactly once;
 *   - streaming (ZeRO-2's and ZeRO-3's hooks) on a model whose vocabulary
 *     (2000 x 64) is larger than a layer, so the embedding and the LM head
 *     come in blocks, untied and tied: every range no larger than
 *     max_range, each parameter's gradient handed out once (embed_tokens'
 *     twice when tied), the fetches in order (the model checks that and
 *     exits 70 otherwise); against the same model unstreamed, the loss
 *     within STREAM_LOSS_REL (1e-4), the logits within STREAM_LOGITS_BOUND
 *     (8e-3) and the summed gradient within STREAM_GRAD_BOUND (1e-3): the
 *     LM head's GEMMs run per block and drmsf is their sum, whose last
 *     fp32 bits flip bf16 roundings of the GEMM inputs downstream (one
 *     flip of a logit is up to 2^-8 of the largest, 3.9e-3), as GPT-2's
 *     test_gpu_step states.
 * Skips (exit 77) where there is no GPU.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"
#include "llama_cuda.h"
#include "llama_layout.h"
#include "model.h"
#include "optim.h"
#include "step_util.h"

#define STEPS 8
#define BB 3
#define TT 40
#define LR 3e-3
#define GRAD_BOUND 5e-2
#define LOGITS_BOUND 2e-2
#define STREAM_LOSS_REL 1e-4
#define STREAM_LOGITS_BOUND 8e-3
#define STREAM_GRAD_BOUND 1e-3
#define LOSS_REL 5e-3

static const step_tokens_t s_tokens = {.seed = 12345, .jumps = 1, .mul = 5, .add = 3};

static model_config_t s_config(bool tied)
{
	return step_llama_config(tied, 96, 256, 64, 16);
}

/* n steps on the GPU from params; the losses into ret_losses, step 0's
 * gradient into ret_grad0 (NULL: not wanted) */
static void s_run_gpu(const model_config_t *cfg, const float *params, size_t n, float *ret_losses,
                      float *ret_grad0, bool check_ready)
{
	model_options_t mo = {.max_B = BB, .max_T = TT, .fused_attention = true};
	model_t *g = step_model("llama", MODEL_DEVICE_CUDA, cfg, &mo, "CUDA llama");
	const model_device_ops_t *dev = model_dev(g);
	void *impl = model_impl(g);
	dev->set_params(impl, params);
	step_ready_t rd = {n, calloc(n, sizeof(int))};
	int32_t in[BB * TT], tg[BB * TT];
	for (int s = 0; s < STEPS; s++) {
		step_batch(&s_tokens, s, BB, TT, cfg->vocab_size, in, tg);
		if (check_ready)
			dev->set_grads_ready(impl, s == 0 ? step_ready : NULL, &rd);
		model_zero_grad(g);
		ret_losses[s] = model_forward(g, in, tg, BB, TT);
		model_backward(g, 1.0f);
		if (s == 0 && ret_grad0)
			gpu_get(ret_grad0, model_grads(g), n * sizeof(float));
		optim_adamw_t hp = step_adamw(LR, s);
		dev->adamw(impl, &hp, 1.0f);
	}
	if (check_ready) {
		size_t bad = 0;
		for (size_t i = 0; i < n; i++)
			bad += rd.seen[i] != 1;
		expect(bad == 0, "grads-ready ranges cover every parameter once (%g wrong of %g)", (double)bad,
		       (double)n);
	}
	free(rd.seen);
	model_free(g);
}

static void s_case(bool tied)
{
	char err[256];
	model_config_t cfg = s_config(tied);
	printf("-- llama %s embeddings\n", tied ? "tied" : "untied");
	model_options_t co = {.max_B = BB, .max_T = TT, .precision = MODEL_PRECISION_FP32};
	model_t *c = step_model("llama", MODEL_DEVICE_CPU, &cfg, &co, "CPU llama");
	model_init_params(c, 7);
	const size_t n = model_num_params(c);
	int nt_c = 0;
	const model_tensor_t *tc = model_tensors(c, &nt_c);
	float *p0 = malloc(n * sizeof(float));
	memcpy(p0, model_params(c), n * sizeof(float));
	/* the table and the round trip */
	{
		model_options_t mo = {.max_B = BB, .max_T = TT, .fused_attention = true};
		model_t *g = step_model("llama", MODEL_DEVICE_CUDA, &cfg, &mo, "CUDA llama");
		int nt_g = 0;
		const model_tensor_t *tg = model_tensors(g, &nt_g);
		bool same = nt_g == nt_c && model_num_params(g) == n;
		for (int i = 0; same && i < nt_c; i++)
			same = !strcmp(tg[i].name, tc[i].name) && tg[i].offset == tc[i].offset &&
			       tg[i].decay == tc[i].decay;
		expect(same, "same table: %g tensors, %g parameters", (double)nt_g, (double)n);
		float *back = malloc(n * sizeof(float));
		model_dev(g)->set_params(model_impl(g), p0);
		model_dev(g)->get_params(model_impl(g), back);
		expect(!memcmp(back, p0, n * sizeof(float)), "parameters up and back unchanged: %g floats, %g tensors", (double)n,
		       (double)nt_c);
		free(back);
		model_free(g);
	}
	/* step 0's logits: the engines themselves (the registry has no logits) */
	{
		const size_t nl = (size_t)BB * TT * (size_t)cfg.vocab_size;
		int32_t in0[BB * TT], tg0[BB * TT];
		step_batch(&s_tokens, 0, BB, TT, cfg.vocab_size, in0, tg0);
		llama_cuda_t *g = NULL;
		if (llama_cuda_new(&cfg, BB, TT, true, &g, err, sizeof err) < 0) {
			fprintf(stderr, "FAIL llama_cuda_new: %s\n", err);
			exit(1);
		}
		llama_cuda_set_params(g, p0);
		(void)llama_cuda_forward(g, in0, NULL, BB, TT);
		float *lgg = malloc(nl * sizeof(float));
		llama_cuda_get_logits(g, lgg);
		llama_cuda_free(g);
		(void)model_forward(c, in0, NULL, BB, TT);
		const double e = rel_err(lgg, llama_logits(model_impl(c)), nl);
		expect(e <= LOGITS_BOUND, "step 0 logits: rel err %.3g (bound %.3g)", e, LOGITS_BOUND);
		free(lgg);
	}
	float lc[STEPS], lg[STEPS], lg2[STEPS];
	float *gc = malloc(n * sizeof(float)), *gg = malloc(n * sizeof(float));
	step_cpu_steps(c, tc, nt_c, &s_tokens, BB, TT, cfg.vocab_size, STEPS, LR, lc, gc);
	s_run_gpu(&cfg, p0, n, lg, gg, true);
	/* step 0's gradient: normwise, and the worst tensor */
	double num = 0, den = 0, worst = 0;
	int worst_i = 0;
	for (int i = 0; i < nt_c; i++) {
		double tn = 0, td = 0;
		for (size_t k = tc[i].offset; k < tc[i].offset + tc[i].numel; k++) {
			tn += ((double)gg[k] - gc[k]) * ((double)gg[k] - gc[k]);
			td += (double)gc[k] * gc[k];
		}
		num += tn;
		den += td;
		if (sqrt(tn / (td > 0 ? td : 1e-30)) > worst) {
			worst = sqrt(tn / (td > 0 ? td : 1e-30));
			worst_i = i;
		}
	}
	printf("     worst tensor: %s\n", tc[worst_i].name);
	expect(worst <= GRAD_BOUND, "step 0 gradient: worst tensor's rel err %.3g (bound %.3g)", worst, GRAD_BOUND);
	const double gerr = sqrt(num / den);
	expect(gerr <= GRAD_BOUND, "step 0 gradient: normwise rel err %.3g (bound %.3g)", gerr, GRAD_BOUND);
	double lerr = 0;
	for (int s = 0; s < STEPS; s++) {
		const double e = fabs((double)lg[s] - lc[s]) / fabs((double)lc[s]);
		lerr = e > lerr ? e : lerr;
		printf("     step %d loss cpu %.6f gpu %.6f\n", s, lc[s], lg[s]);
	}
	expect(lerr <= LOSS_REL, "every step's loss: max rel err %.3g (bound %.3g)", lerr, LOSS_REL);
	s_run_gpu(&cfg, p0, n, lg2, NULL, false);
	expect(!memcmp(lg, lg2, sizeof lg), "a second GPU run: the same loss bits, %g steps of %g", (double)STEPS, (double)STEPS);
	free(p0), free(gc), free(gg);
	model_free(c);
}

/* ---- streaming ---- */

static double s_norm_err(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		den += (double)b[i] * b[i];
	}
	return sqrt(num / (den > 0 ? den : 1e-30));
}

static void s_stream_case(bool tied)
{
	char err[256];
	model_config_t cfg = s_config(tied);
	cfg.vocab_size = 2000;
	printf("-- llama streamed, V 2000, %s\n", tied ? "tied" : "untied");
	model_tensor_t *tab = NULL;
	int nt = 0;
	size_t n = 0, max_range = 0;
	if (llama_layout(&cfg, &tab, &nt, &n, &max_range) < 0)
		exit(1);
	float *p0 = malloc(n * sizeof(float));
	llama_init_range(&cfg, tab, nt, 11, 0, n, p0);
	const size_t nl = (size_t)BB * TT * (size_t)cfg.vocab_size;
	int32_t in[BB * TT], tg[BB * TT];
	step_batch(&s_tokens, 3, BB, TT, cfg.vocab_size, in, tg);
	/* the reference: the same model with its buffers */
	llama_cuda_t *d = NULL;
	if (llama_cuda_new(&cfg, BB, TT, true, &d, err, sizeof err) < 0) {
		fprintf(stderr, "FAIL llama_cuda_new: %s\n", err);
		exit(1);
	}
	llama_cuda_set_params(d, p0);
	llama_cuda_zero_grad(d);
	const float l_dense = llama_cuda_forward(d, in, tg, BB, TT);
	llama_cuda_backward(d, 1.0f);
	float *g_dense = malloc(n * sizeof(float)), *lg_dense = malloc(nl * sizeof(float));
	llama_cuda_get_grads(d, g_dense);
	llama_cuda_get_logits(d, lg_dense);
	llama_cuda_free(d);
	const model_streaming_t modes[2] = {MODEL_STREAM_GRADS, MODEL_STREAM_ALL};
	float *d_full = gpu_dup(p0, n * sizeof(float));
	for (int k = 0; k < 2; k++) {
		const char *name = k == 0 ? "streamed gradients" : "streamed parameters";
		step_streamer_t st = {n, max_range, d_full, calloc(n, sizeof(float)), calloc(n, sizeof(int)), 0};
		model_stream_t fns = step_stream(&st);
		llama_cuda_t *m = NULL;
		if (llama_cuda_new_streamed(&cfg, BB, TT, false, modes[k], &fns, &m, err, sizeof err) < 0) {
			fprintf(stderr, "FAIL llama_cuda_new_streamed: %s\n", err);
			exit(1);
		}
		if (k == 0)
			llama_cuda_set_params(m, p0);
		const float l = llama_cuda_forward(m, in, tg, BB, TT);
		llama_cuda_backward(m, 1.0f);
		float *lg = malloc(nl * sizeof(float));
		llama_cuda_get_logits(m, lg);
		llama_cuda_free(m);
		size_t bad = 0;
		for (size_t i = 0; i < n; i++)
			bad += st.count[i] != (tied && i < (size_t)cfg.vocab_size * cfg.n_embd ? 2 : 1);
		char what[96];
		snprintf(what, sizeof what, "%s: every float handed out as due (%%g wrong), %%g too large", name);
		expect(bad == 0 && st.too_big == 0, what, (double)bad, (double)st.too_big);
		snprintf(what, sizeof what, "%s: loss rel err %%.3g (bound %%.3g)", name);
		const double le = fabs((double)l - l_dense) / fabs((double)l_dense);
		expect(le <= STREAM_LOSS_REL, what, le, STREAM_LOSS_REL);
		snprintf(what, sizeof what, "%s: logits rel err %%.3g (bound %%.3g)", name);
		const double e1 = rel_err(lg, lg_dense, nl);
		expect(e1 <= STREAM_LOGITS_BOUND, what, e1, STREAM_LOGITS_BOUND);
		snprintf(what, sizeof what, "%s: gradient rel err %%.3g (bound %%.3g)", name);
		const double e2 = s_norm_err(st.acc, g_dense, n);
		expect(e2 <= STREAM_GRAD_BOUND, what, e2, STREAM_GRAD_BOUND);
		free(lg), free(st.acc), free(st.count);
	}
	cudaFree(d_full);
	free(p0), free(tab), free(g_dense), free(lg_dense);
}

int main(void)
{
	gpu_probe_or_skip("gpu-llama-step");
	s_case(false);
	s_case(true);
	s_stream_case(false);
	s_stream_case(true);
	if (n_failed) {
		printf("%d check(s) failed\n", n_failed);
		return 1;
	}
	printf("all checks passed\n");
	return 0;
}
