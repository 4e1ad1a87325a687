/*
 * llama_cuda_tp: Llama's forward and backward on one GPU with tensor
 * parallelism (llama_cuda.h, "Tensor parallelism"): the CPU row's
 * s_tp_forward / s_tp_backward (worker/engine/llama.c) step for step, on
 * device buffers, with the group's collectives from cuda_tprow.h and the
 * vocabulary-parallel cross-entropy's kernels from cuda_tp.h.
 *
 * Rank k of t holds query heads H/t, KV heads KV/t (q, k, v adjacent in
 * the table: one (D, C) GEMM, D = (H + 2 KV) hd / t), F/t gate and up
 * features (one (2F/t, C) GEMM), o_proj's and down_proj's matching input
 * columns, vocabulary rows [k Vl, (k+1) Vl) of embed_tokens and lm_head
 * (Vl = V padded / t; the padded rows are never read) and rows
 * [k n, (k+1) n) of the residual stream, n = B T / t. Before each
 * column-parallel GEMM the normed rows are all-gathered as bf16 (the GEMM's
 * operand, so the same bits as gathering fp32 and rounding); after each
 * row-parallel GEMM its fp32 (N, C) partial sums are reduce-scattered with
 * the residual added (cuda_tprow_rs_residual). Backward gathers the bf16
 * copy of the residual gradient the same way and reduce-scatters the
 * input gradients of the column-parallel GEMMs in fp32.
 *
 * The arena's parts at n rows (the residual stream, norms, their
 * gradients) are indexed with maxn = max_B max_T / t, the others with maxN.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_llama_kernels.h"
#include "cuda_tp.h"
#include "llama_cuda_int.h"

#define NSLICE(ptr, l, per_row) ((ptr) + (size_t)(l) * maxN * (size_t)(per_row))
#define LSLICE(ptr, l, per_row) ((ptr) + (size_t)(l) * maxn * (size_t)(per_row))

/* this rank's first vocabulary id, and how many of its Vl rows are real */
static int s_vocab(const llama_cuda_t *m, int *ret_v0)
{
	int v0 = m->tp.g.rank * m->vl, nv = m->cfg.vocab_size - v0;
	*ret_v0 = v0;
	return nv < 0 ? 0 : nv < m->vl ? nv : m->vl;
}

/* the block of `rows` local rows starting at k0: its end, and how many of
 * its rows are real (not padding) */
static int s_block(const llama_cuda_t *m, int k0, int nv, int *ret_cn)
{
	int k1 = m->rows < m->vl - k0 ? k0 + m->rows : m->vl;
	int c1 = k1 < nv ? k1 : nv;
	*ret_cn = c1 > k0 ? c1 - k0 : 0;
	return k1;
}

/* streamed: the norms' gradients in [lo, hi) (at g) summed over the group
 * before the range is handed out; dense: all at the end of backward */
static void s_rep_range(llama_cuda_t *m, float *g, size_t lo, size_t hi)
{
	if (m->streaming != MODEL_DENSE)
		cuda_tprow_rep_range(&m->tp, (model_range_t){lo, hi}, g);
}

/* the (n, C) bf16 rows of every rank, in rank order, into full16 */
static void s_gather16(llama_cuda_t *m, const uint16_t *rows16, int n)
{
	cuda_tprow_allgather(&m->tp, rows16, m->a.full16, (size_t)n * (size_t)m->cfg.n_embd, sizeof(uint16_t));
}

/* layer l's forward: x (n, C) in, res_mlp of layer l out */
static void s_layer_forward(llama_cuda_t *m, int l, const float *x, int B, int T)
{
	const model_config_t *c = &m->cfg;
	const int t = m->tp_size, C = c->n_embd, H = c->n_head / t, KV = c->n_kv_head / t, hd = m->hd;
	const int Cf = H * hd, D = m->D, Fd = m->Fd, N = B * T, n = N / t;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T, maxn = maxN / (size_t)t;
	const float eps = (float)c->norm_eps;
	acts_t *a = &m->a;
	cudaStream_t s = m->stream;
	const size_t lo = m->layer0 + (size_t)l * m->layer_floats;
	view_t lp = lc_pget(m, lo, lo + m->layer_floats, true);
	const float *P = lp.p;
	const uint16_t *P16 = lp.p16;
	uint16_t *rms1 = LSLICE(a->rms1, l, C), *rms2 = LSLICE(a->rms2, l, C);
	uint16_t *qkv16 = NSLICE(a->qkv16, l, D), *atty = NSLICE(a->atty, l, Cf);
	uint16_t *gu16 = NSLICE(a->gu16, l, 2 * Fd), *hsw = NSLICE(a->hsw, l, Fd);
	float *res_attn = LSLICE(a->res_attn, l, C), *res_mlp = LSLICE(a->res_mlp, l, C);
	cuda_rmsnorm_forward(NULL, rms1, LSLICE(a->rstd1, l, 1), x, P + m->rel[LLAMA_T_ATTN_NORM], n, C, eps, s);
	s_gather16(m, rms1, n);
	lc_linear(m, N, D, C, a->full16, P16 + m->rel[LLAMA_T_Q], a->qkv32, NULL);
	cuda_rope_forward(NULL, qkv16, a->qkv32, a->rope_cos, a->rope_sin, N, T, H, KV, hd, s);
	cuda_flash_forward(NULL, atty, NSLICE(a->lse, l, H), qkv16, B, T, Cf, H, KV, s);
	/* o_proj row-parallel: partial sums, reduce-scattered onto x */
	lc_linear(m, N, C, Cf, atty, P16 + m->rel[LLAMA_T_O], a->dsmall, NULL);
	cuda_tprow_rs_residual(&m->tp, res_attn, NULL, a->dsmall, x, NULL, n, C);
	cuda_rmsnorm_forward(NULL, rms2, LSLICE(a->rstd2, l, 1), res_attn, P + m->rel[LLAMA_T_MLP_NORM], n, C,
			     eps, s);
	s_gather16(m, rms2, n);
	lc_linear(m, N, 2 * Fd, C, a->full16, P16 + m->rel[LLAMA_T_GATE], NULL, gu16);
	cuda_swiglu_forward(hsw, gu16, N, Fd, s);
	lc_linear(m, N, C, Fd, hsw, P16 + m->rel[LLAMA_T_DOWN], a->dsmall, NULL);
	cuda_tprow_rs_residual(&m->tp, res_mlp, NULL, a->dsmall, res_attn, NULL, n, C);
	lc_pput(m, lp);
}

/* the cross-entropy over the group (cuda_tp.h's five steps) and dlogits
 * for a loss scale of 1 (backward's LM-head GEMMs take it as alpha) */
static void s_crossentropy(llama_cuda_t *m, int N, int nv, int v0)
{
	acts_t *a = &m->a;
	cudaStream_t s = m->stream;
	const int32_t *targets = a->ids + N;
	cuda_tp_ce_rowmax(a->ce_mx, NULL, a->logits, (size_t)m->vl, N, nv, s);
	cuda_tprow_allgather(&m->tp, a->ce_mx, a->ce_all, (size_t)N, sizeof(float));
	cuda_tp_ce_maxof(a->ce_mx, a->ce_all, N, m->tp_size, s);
	cuda_tp_ce_partials(a->ce_red, NULL, a->logits, (size_t)m->vl, targets, a->ce_mx, N, nv, v0, s);
	cuda_tprow_allreduce(&m->tp, a->ce_red, 2 * (size_t)N);
	cuda_tp_ce_finish(a->losses, a->ce_lse, a->ce_mx, a->ce_red, N, s);
	cuda_tp_ce_backward(NULL, a->dlogits, NULL, a->logits, (size_t)m->vl, a->ce_lse, targets, N, nv, v0,
			    1.0f / (float)N, s);
	cuda_mean(a->loss, a->losses, N, s);
}

float lc_tp_forward(llama_cuda_t *m, bool targets, int B, int T)
{
	const model_config_t *c = &m->cfg;
	const int L = c->n_layer, C = c->n_embd, t = m->tp_size, N = B * T, n = N / t;
	const size_t maxn = (size_t)m->max_B * (size_t)m->max_T / (size_t)t;
	acts_t *a = &m->a;
	cudaStream_t s = m->stream;
	int v0, nv = s_vocab(m, &v0), cn;
	lc_pass(m, false);
	/* the embedding: this rank's vocabulary rows (other tokens add 0) into
	 * (N, C) zeros, reduce-scattered to the rank's n rows */
	CUDA_CHECK(cudaMemsetAsync(a->dsmall, 0, (size_t)N * C * sizeof(float), s));
	for (int k0 = 0; k0 < m->vl;) {
		const int k1 = s_block(m, k0, nv, &cn);
		view_t v = lc_pget(m, (size_t)k0 * C, (size_t)k1 * C, false);
		if (cn > 0)
			cuda_embed_tokens_add(a->dsmall, a->ids, v.p, v0 + k0, v0 + k0 + cn, N, C, s);
		lc_pput(m, v);
		k0 = k1;
	}
	cuda_tprow_reduce_scatter(&m->tp, a->dsmall, a->encoded, (size_t)n * C);
	const float *x = a->encoded;
	for (int l = 0; l < L; l++) {
		s_layer_forward(m, l, x, B, T);
		x = LSLICE(a->res_mlp, l, C);
	}
	view_t np = lc_pget(m, m->off_norm, m->off_norm + (size_t)C, false);
	cuda_rmsnorm_forward(NULL, a->rmsf, a->rstdf, x, np.p, n, C, (float)c->norm_eps, s);
	lc_pput(m, np);
	s_gather16(m, a->rmsf, n);
	/* the logits of this rank's real vocabulary rows, per block */
	for (int k0 = 0; k0 < m->vl;) {
		const int k1 = s_block(m, k0, nv, &cn);
		const size_t hlo = m->off_head + (size_t)k0 * C;
		view_t v = lc_pget(m, hlo, m->off_head + (size_t)k1 * C, true);
		if (cn > 0)
			lc_gemm_ld(m, N, cn, C, a->full16, 0, false, v.p16, true, NULL, a->logits + k0, m->vl, false,
				   NULL, 1.0f);
		lc_pput(m, v);
		k0 = k1;
	}
	if (!targets)
		return 0.0f;
	s_crossentropy(m, N, nv, v0);
	m->have_targets = true;
	float loss = 0.0f;
	lc_copy(&loss, a->loss, sizeof loss, cudaMemcpyDeviceToHost, s);
	return loss;
}

/* layer l's backward; dres (n rows, with dres16) holds d(layer output) and
 * leaves with d(layer input) */
static void s_layer_backward(llama_cuda_t *m, int l)
{
	const model_config_t *c = &m->cfg;
	const int t = m->tp_size, C = c->n_embd, H = c->n_head / t, KV = c->n_kv_head / t, hd = m->hd;
	const int Cf = H * hd, D = m->D, Fd = m->Fd, B = m->B, T = m->T, N = B * T, n = N / t;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T, maxn = maxN / (size_t)t;
	acts_t *a = &m->a;
	cudaStream_t s = m->stream;
	const size_t lo = m->layer0 + (size_t)l * m->layer_floats, hi = lo + m->layer_floats;
	view_t lp = lc_pget(m, lo, hi, true);
	const float *P = lp.p;
	const uint16_t *P16 = lp.p16;
	float *G = lc_gbegin(m, lo, hi);
	const float *x = l == 0 ? a->encoded : LSLICE(a->res_mlp, l - 1, C);
	const uint16_t *rms1 = LSLICE(a->rms1, l, C), *rms2 = LSLICE(a->rms2, l, C);
	const uint16_t *qkv16 = NSLICE(a->qkv16, l, D), *atty = NSLICE(a->atty, l, Cf);
	const uint16_t *gu16 = NSLICE(a->gu16, l, 2 * Fd), *hsw = NSLICE(a->hsw, l, Fd);
	const float *res_attn = LSLICE(a->res_attn, l, C);
	/* MLP: d res_mlp gathered; down_proj row-parallel, gate/up column-parallel */
	s_gather16(m, a->dres16, n);
	lc_linear_dw(m, N, C, Fd, a->full16, hsw, G + m->rel[LLAMA_T_DOWN], 1.0f);
	lc_linear_dx(m, N, C, Fd, a->full16, P16 + m->rel[LLAMA_T_DOWN], NULL, a->dh16, 1.0f);
	cuda_swiglu_backward(a->dgu16, a->dh16, gu16, N, Fd, s);
	s_gather16(m, rms2, n);
	lc_linear_dw(m, N, 2 * Fd, C, a->dgu16, a->full16, G + m->rel[LLAMA_T_GATE], 1.0f);
	lc_linear_dx(m, N, 2 * Fd, C, a->dgu16, P16 + m->rel[LLAMA_T_GATE], a->dsmall, NULL, 1.0f);
	cuda_tprow_reduce_scatter(&m->tp, a->dsmall, a->dloc, (size_t)n * C);
	cuda_rmsnorm_backward(a->dres, a->dres16, G + m->rel[LLAMA_T_MLP_NORM], a->dloc, NULL, res_attn,
			      LSLICE(a->rstd2, l, 1), P + m->rel[LLAMA_T_MLP_NORM], n, C, a->colsum, s);
	/* attention: d res_attn gathered */
	s_gather16(m, a->dres16, n);
	lc_linear_dw(m, N, C, Cf, a->full16, atty, G + m->rel[LLAMA_T_O], 1.0f);
	lc_linear_dx(m, N, C, Cf, a->full16, P16 + m->rel[LLAMA_T_O], NULL, a->dsmall16, 1.0f);
	cuda_flash_backward(a->qkv32, NULL, NULL, NULL, a->dsmall16, qkv16, atty, NSLICE(a->lse, l, H), &m->att_s,
			    B, T, Cf, H, KV, s);
	cuda_rope_backward(NULL, a->dqkv16, a->qkv32, a->rope_cos, a->rope_sin, N, T, H, KV, hd, s);
	s_gather16(m, rms1, n);
	lc_linear_dw(m, N, D, C, a->dqkv16, a->full16, G + m->rel[LLAMA_T_Q], 1.0f);
	lc_linear_dx(m, N, D, C, a->dqkv16, P16 + m->rel[LLAMA_T_Q], a->dsmall, NULL, 1.0f);
	cuda_tprow_reduce_scatter(&m->tp, a->dsmall, a->dloc, (size_t)n * C);
	cuda_rmsnorm_backward(a->dres, a->dres16, G + m->rel[LLAMA_T_ATTN_NORM], a->dloc, NULL, x,
			      LSLICE(a->rstd1, l, 1), P + m->rel[LLAMA_T_ATTN_NORM], n, C, a->colsum, s);
	s_rep_range(m, G, lo, hi);
	lc_gend(m, G, lo, hi);
	lc_pput(m, lp);
}

/* the LM head's blocks (embed_tokens' when tied): dW += loss_scale
 * dlogits^T @ rmsf (gathered), and (N, C) partial d rmsf in dsmall */
static void s_head_backward(llama_cuda_t *m, int nv, float loss_scale)
{
	const int C = m->cfg.n_embd, N = m->B * m->T;
	acts_t *a = &m->a;
	bool any = false;
	int cn;
	for (int k0 = 0; k0 < m->vl;) {
		const int k1 = s_block(m, k0, nv, &cn);
		const size_t hlo = m->off_head + (size_t)k0 * C, hhi = m->off_head + (size_t)k1 * C;
		float *g = lc_gbegin(m, hlo, hhi);
		if (cn > 0)
			lc_gemm_ld(m, cn, C, N, a->dlogits + k0, m->vl, true, a->full16, false, g, NULL, 0, true, NULL,
				   loss_scale);
		lc_gend(m, g, hlo, hhi);
		view_t v = lc_pget(m, hlo, hhi, true);
		if (cn > 0) {
			lc_gemm_ld(m, N, C, cn, a->dlogits + k0, m->vl, false, v.p16, false, a->dsmall, NULL, 0, any,
				   NULL, loss_scale);
			any = true;
		}
		lc_pput(m, v);
		k0 = k1;
	}
	if (!any)
		CUDA_CHECK(cudaMemsetAsync(a->dsmall, 0, (size_t)N * C * sizeof(float), m->stream));
}

/* embed_tokens per block of this rank's real rows, from the gathered (N, C)
 * fp32 gradient in dsmall: the run of the (sorted) distinct tokens inside */
static void s_embed_backward(llama_cuda_t *m, int nv, int v0)
{
	const int C = m->cfg.n_embd, N = m->B * m->T;
	acts_t *a = &m->a;
	const int32_t *d_uniq = a->ids + 2 * N, *d_starts = a->ids + 3 * N, *d_rows = a->ids + 4 * N + 1;
	const int32_t *h_uniq = m->host_ids + 2 * N;
	int u0 = 0, cn;
	while (u0 < m->n_unique && h_uniq[u0] < v0)
		u0++;
	for (int k0 = 0; k0 < m->vl;) {
		const int k1 = s_block(m, k0, nv, &cn);
		int u1 = u0;
		while (u1 < m->n_unique && h_uniq[u1] < v0 + k0 + cn)
			u1++;
		float *g = lc_gbegin(m, (size_t)k0 * C, (size_t)k1 * C);
		if (u1 > u0)
			cuda_embed_tokens_backward(g, v0 + k0, a->dsmall, d_uniq + u0, d_starts + u0, d_rows, u1 - u0,
						   C, m->stream);
		lc_gend(m, g, (size_t)k0 * C, (size_t)k1 * C);
		u0 = u1;
		k0 = k1;
	}
}

void lc_tp_backward(llama_cuda_t *m, float loss_scale)
{
	const model_config_t *c = &m->cfg;
	const int L = c->n_layer, C = c->n_embd, t = m->tp_size, n = m->B * m->T / t;
	const size_t maxn = (size_t)m->max_B * (size_t)m->max_T / (size_t)t;
	acts_t *a = &m->a;
	cudaStream_t s = m->stream;
	int v0, nv = s_vocab(m, &v0);
	lc_pass(m, true);
	if (m->streaming == MODEL_DENSE)
		cuda_tprow_rep_begin(&m->tp, m->grads);
	s_gather16(m, a->rmsf, n);
	s_head_backward(m, nv, loss_scale);
	cuda_tprow_reduce_scatter(&m->tp, a->dsmall, a->dloc, (size_t)n * C);
	{
		const size_t lo = m->off_norm, hi = lo + (size_t)C;
		view_t w = lc_pget(m, lo, hi, false);
		float *g = lc_gbegin(m, lo, hi);
		CUDA_CHECK(cudaMemsetAsync(a->dres, 0, (size_t)n * C * sizeof(float), s));
		cuda_rmsnorm_backward(a->dres, a->dres16, g, a->dloc, NULL,
				      L > 0 ? LSLICE(a->res_mlp, L - 1, C) : a->encoded, a->rstdf, w.p, n, C,
				      a->colsum, s);
		s_rep_range(m, g, lo, hi);
		lc_gend(m, g, lo, hi);
		lc_pput(m, w);
	}
	for (int l = L - 1; l >= 0; l--)
		s_layer_backward(m, l);
	cuda_tprow_allgather(&m->tp, a->dres, a->dsmall, (size_t)n * C, sizeof(float));
	s_embed_backward(m, nv, v0);
	if (m->streaming != MODEL_DENSE)
		return;
	cuda_tprow_rep_end(&m->tp, m->grads);
	/* the norms' gradients are final only now: every range at once */
	lc_grads_ready(m, 0, m->off_norm, m->n_params);
	for (int l = L - 1; l >= 0; l--) {
		const size_t lo = m->layer0 + (size_t)l * m->layer_floats;
		lc_grads_ready(m, L - l, lo, lo + m->layer_floats);
	}
	lc_grads_ready(m, L + 1, 0, m->layer0);
}
