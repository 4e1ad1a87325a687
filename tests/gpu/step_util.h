/*
 * step_util: what the GPU tests that run a model's steps against the CPU
 * row share (test_gpu_llama_step.c, test_gpu_tp_llama.c,
 * test_gpu_tp_gpt2.c): the one-line pass/fail check that counts failures,
 * the token batches (a walk x' = mul x + add mod V with random jumps, so
 * that the model has something to learn), AdamW's hyper-parameters (only
 * the learning rate differs between tests), model creation that exits on
 * failure, the CPU row's reference steps, the tiny grouped-query Llama
 * config with Llama 3.1 RoPE scaling, the grads-ready hook that counts
 * which parameters a backward reported, and the streaming hooks a trainer
 * would give the model. Each test keeps its own sizes, seeds and bounds.
 * Include it in one test .c file (its helpers are static); it includes
 * gpu_util.h.
 */
#ifndef RINGMASTER_TESTS_GPU_STEP_UTIL_H
#define RINGMASTER_TESTS_GPU_STEP_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "model.h"
#include "optim.h"

/* checks that failed (expect counts them) */
static int n_failed;

/* one line: ok or FAIL, what (a format of two numbers) */
static inline void expect(bool ok, const char *fmt, double a, double b)
{
	char what[200];
	snprintf(what, sizeof what, fmt, a, b);
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
		n_failed++;
}

/* a test's token walk: seed (step s starts from seed + 977 s), a jump to a
 * random token where the top 4 bits of the generator are below jumps
 * (jumps / 16 of the tokens), else x' = mul x + add mod V */
typedef struct {
	uint32_t seed, jumps;
	int mul, add;
} step_tokens_t;

/* step's B x T inputs and their targets (the next tokens) */
static inline void step_batch(const step_tokens_t *k, int step, int B, int T, int V, int32_t *in,
                              int32_t *tg)
{
	uint32_t r = k->seed + 977u * (uint32_t)step;
	for (int b = 0; b < B; b++) {
		r = r * 1664525u + 1013904223u;
		int x = (int)(r >> 8) % V;
		for (int t = 0; t <= T; t++) {
			r = r * 1664525u + 1013904223u;
			int next = (r >> 28) < k->jumps ? (int)(r >> 8) % V : (k->mul * x + k->add) % V;
			if (t < T)
				in[b * T + t] = x;
			if (t > 0)
				tg[b * T + t - 1] = x;
			x = next;
		}
	}
}

/* AdamW at step (0-based): beta 0.9 / 0.95, eps 1e-8, weight decay 0.1 */
static inline optim_adamw_t step_adamw(double lr, int step)
{
	optim_adamw_t hp = {.lr = lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
			    .t = step + 1};
	return hp;
}

/* model_create(arch, device, cfg, o), or exit 1 with "FAIL create the
 * <what>: <reason>" */
static inline model_t *step_model(const char *arch, model_device_t device, const model_config_t *cfg,
                                  const model_options_t *o, const char *what)
{
	char err[256];
	model_t *m = NULL;
	if (model_create(arch, device, cfg, o, &m, err, sizeof err) < 0) {
		fprintf(stderr, "FAIL create the %s: %s\n", what, err);
		exit(1);
	}
	return m;
}

/* The CPU row's reference run: `steps` steps of zero_grad, forward,
 * backward and optim.c's AdamW (step_adamw(lr)) over the batches of k
 * (B x T, vocabulary V); every step's loss into losses, step 0's gradient
 * into grad0. table (nt tensors) gives the decay flags. */
static inline void step_cpu_steps(model_t *c, const model_tensor_t *table, int nt, const step_tokens_t *k,
                                  int B, int T, int V, int steps, double lr, float *losses, float *grad0)
{
	const size_t n = model_num_params(c);
	float *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
	int32_t *in = malloc((size_t)B * T * sizeof(int32_t)), *tg = malloc((size_t)B * T * sizeof(int32_t));
	for (int s = 0; s < steps; s++) {
		step_batch(k, s, B, T, V, in, tg);
		model_zero_grad(c);
		losses[s] = model_forward(c, in, tg, B, T);
		model_backward(c, 1.0f);
		if (s == 0)
			memcpy(grad0, model_grads(c), n * sizeof(float));
		optim_adamw_t hp = step_adamw(lr, s);
		optim_adamw_update(table, nt, model_params(c), model_grads(c), m, v, 0, n, &hp);
	}
	free(m), free(v), free(in), free(tg);
}

/* The tiny Llama: 2 layers, C 64, 4 heads of 16, 2 KV heads, theta 10000,
 * RoPE scaling factor 8 / low 1 / high 4 (original_max_position chosen by
 * the test, so that all three wavelength bands occur), eps 1e-5. */
static inline model_config_t step_llama_config(bool tied, int ffn_dim, int vocab_size, int seq_len,
                                               int original_max_position)
{
	model_config_t c;
	memset(&c, 0, sizeof c);
	c.n_layer = 2;
	c.n_embd = 64;
	c.n_head = 4;
	c.n_kv_head = 2;
	c.ffn_dim = ffn_dim;
	c.vocab_size = vocab_size;
	c.seq_len = seq_len;
	c.rope_theta = 10000.0;
	c.rope_scaling.factor = 8.0;
	c.rope_scaling.low_freq_factor = 1.0;
	c.rope_scaling.high_freq_factor = 4.0;
	c.rope_scaling.original_max_position = original_max_position;
	c.norm_eps = 1e-5;
	c.tie_embeddings = tied;
	return c;
}

/* the grads-ready hook's context: seen[i] counts the reports of parameter
 * i < n */
typedef struct {
	size_t n;
	int *seen;
} step_ready_t;

/* dev->set_grads_ready's hook: waits for the range's event, counts it */
static inline void step_ready(void *ctx, model_range_t r, void *ev)
{
	step_ready_t *rd = ctx;
	gpu_must(cudaEventSynchronize((cudaEvent_t)ev), "ready event");
	for (size_t i = r.lo; i < r.hi && i < rd->n; i++)
		rd->seen[i]++;
}

/* ---- the trainer's side of streaming (ZeRO-2's and ZeRO-3's hooks) in
 * one process: parameters fetched from a device copy, each gradient range
 * handed out in a fresh zeroed device buffer and summed into a host one */

typedef struct {
	size_t n, max_range;
	const float *d_full; /* (n) all the parameters on the device, for fetch */
	float *acc;          /* (n) the gradients handed out, summed */
	int *count;          /* (n) how often each was handed out */
	size_t too_big;      /* ranges larger than max_range */
} step_streamer_t;

static inline const float *step_fetch(void *ctx, model_range_t r, model_range_t next)
{
	step_streamer_t *st = ctx;
	(void)next;
	st->too_big += r.hi - r.lo > st->max_range;
	return st->d_full + r.lo;
}

static inline void step_release(void *ctx, const float *p)
{
	(void)ctx;
	(void)p;
}

static inline float *step_grad_begin(void *ctx, model_range_t r)
{
	step_streamer_t *st = ctx;
	st->too_big += r.hi - r.lo > st->max_range;
	return gpu_dup(NULL, (r.hi - r.lo) * sizeof(float));
}

static inline void step_grad_end(void *ctx, float *g, model_range_t r)
{
	step_streamer_t *st = ctx;
	float *h = malloc((r.hi - r.lo) * sizeof(float));
	gpu_get(h, g, (r.hi - r.lo) * sizeof(float));
	for (size_t i = r.lo; i < r.hi; i++) {
		st->acc[i] += h[i - r.lo];
		st->count[i]++;
	}
	free(h);
	cudaFree(g);
}

/* the model's hooks over st */
static inline model_stream_t step_stream(step_streamer_t *st)
{
	model_stream_t fns = {st, step_fetch, step_release, step_grad_begin, step_grad_end};
	return fns;
}

#endif
