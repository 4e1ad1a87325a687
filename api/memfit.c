/*
 * memfit: a rank's memory from its job spec (see memfit.h).
 */
#include "memfit.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>

/* gpt2.c's activation arena (s_arena_bytes_estimate), in bytes. */
static double s_arena_bytes(double L, double C, double V, double H, double B, double T, bool bf16)
{
	double N = B * T;
	double floats = N * (8 * C + V + 4) + B * C * (T + 16) + N * H * T + L * N * (12 * C + 4 + H * T);
	double bytes = 4 * floats + 8 * N;
	if (bf16)
		bytes += 2 * N * ((V > 4 * C ? V : 4 * C) + 4 * C);
	return bytes + 64.0 * 32;
}

void memfit_estimate(const jobspec_t *spec, memfit_t *ret)
{
	double L = spec->model.n_layer, C = spec->model.n_embd, V = spec->model.vocab_size;
	double H = spec->model.n_head, T = spec->model.seq_len, B = spec->train.batch_size;
	double W = spec->parallel.world_size > 0 ? spec->parallel.world_size : 1;
	double layer = 12 * C * C + 13 * C;
	double P = V * C + T * C + L * layer + 2 * C;
	if (spec->model.arch[0] == 'l') {
		/* Llama's table (llama_layout): no positions or biases, GQA's
		 * narrower k/v, SwiGLU's three matrices, an untied LM head. The
		 * activations keep GPT-2's formula as the estimate. */
		double KVC = C / H * spec->model.n_kv_head, F = spec->model.ffn_dim;
		layer = 2 * C * C + 2 * C * KVC + 3 * C * F + 2 * C;
		P = V * C * (spec->model.tie_embeddings ? 1 : 2) + L * layer + C;
	}
	/* Tensor parallelism (parallel.tensor t > 1): a rank holds 1/t of the
	 * split tensors (the vocabulary padded to a multiple of t) and all of
	 * the replicated ones (norms; GPT-2's positions and row-parallel
	 * biases); ZeRO shards that over the d = W / t data-parallel ranks, and
	 * zero2/zero3's streamed unit is a layer's local part (its split
	 * matrices / t, its replicated norms and biases whole). */
	double t = spec->parallel.tensor > 1 ? spec->parallel.tensor : 1;
	jobspec_sharding_t sharding = spec->parallel.sharding;
	if (t > 1) {
		bool llama = spec->model.arch[0] == 'l';
		double R = llama ? L * 2 * C + C : T * C + L * 6 * C + 2 * C;
		double n_vocab = llama && !spec->model.tie_embeddings ? 2 : 1;
		double Vp = ceil(V / t) * t;
		double r = llama ? 2 * C : 6 * C; /* a layer's replicated floats */
		P = (P - R + (Vp - V) * C * n_vocab) / t + R;
		layer = (layer - r) / t + r;
		W /= t;
	}
	double S = ceil(P / W);
	bool bf16 = spec->train.precision == JOBSPEC_PRECISION_BF16;
	memfit_t m = {.n_params = P};
	switch (sharding) {
	case JOBSPEC_SHARDING_NONE:
		m.params_bytes = 4 * P, m.grads_bytes = 4 * P, m.optim_bytes = 8 * P;
		break;
	case JOBSPEC_SHARDING_ZERO1:
		m.params_bytes = 4 * P, m.grads_bytes = 4 * P + 4 * S, m.optim_bytes = 8 * S;
		break;
	case JOBSPEC_SHARDING_ZERO2:
		m.params_bytes = 4 * P, m.grads_bytes = 4 * S + 4 * layer, m.optim_bytes = 8 * S;
		break;
	case JOBSPEC_SHARDING_ZERO3:
		m.params_bytes = 4 * S + 4 * layer, m.grads_bytes = 4 * S + 4 * layer, m.optim_bytes = 8 * S;
		break;
	}
	if (bf16 && sharding != JOBSPEC_SHARDING_ZERO3)
		m.params_bytes += 2 * P;
	m.activations_bytes = s_arena_bytes(L, C, V, H, B, T, bf16);
	if (t > 1) /* sequence parallelism: 1/t, plus the all-gathered (B, T, C) pair */
		m.activations_bytes = m.activations_bytes / t + 8 * B * T * C;
	m.total_bytes = m.params_bytes + m.grads_bytes + m.optim_bytes + m.activations_bytes;
	*ret = m;
}

void memfit_describe(const memfit_t *m, char *buf, size_t len)
{
	const double gib = 1073741824.0;
	snprintf(buf, len,
	         "about %.2f GiB per rank (%.0f bytes: parameters %.2f, gradients %.2f, AdamW state %.2f,"
	         " activations %.2f GiB)",
	         m->total_bytes / gib, m->total_bytes, m->params_bytes / gib, m->grads_bytes / gib,
	         m->optim_bytes / gib, m->activations_bytes / gib);
}
