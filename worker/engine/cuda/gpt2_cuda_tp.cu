/*
 * gpt2_cuda_tp: GPT-2's tensor-parallel forward and backward on the GPU
 * (gpt2_cuda_new_tp; Megatron-style with sequence parallelism), the twin
 * of the CPU row's gpt2_tp.c step for step, on the model gpt2_cuda.cu
 * lays out at TP size t > 1 (the local tensor table of gpt2_layout_tp).
 *
 * Rank k of t holds heads [k H/t, (k+1) H/t) (Cf = C/t channels of q, k,
 * v and of attn.c_proj's input), 4C/t MLP features, wte rows
 * [k Vl, (k+1) Vl) and n = N/t rows of the residual stream. Layer forward:
 * LayerNorm on the n rows (bf16 out), all-gather to (N, C) (bf16 moves as
 * is: the values the GEMM reads), column-parallel c_attn and attention on
 * this rank's heads, row-parallel c_proj into an fp32 partial (N, C),
 * reduce-scatter to n rows + residual + bias (cuda_tprow_rs_residual); the
 * MLP likewise. Backward re-gathers the LayerNorm outputs (activations
 * stay 1/t) and gathers the residual gradient's bf16 copy before each
 * row-parallel layer's backward; the input gradients of c_attn and c_fc
 * are fp32 partials reduce-scattered into LayerNorm's backward. The
 * embedding and the LM head are vocabulary-parallel: each rank adds its
 * rows' embeddings into (N, C) (rank 0 the positions too) and
 * reduce-scatters; the logits are this rank's block, the loss
 * cuda_tp.h's (max and sums combined over the group). Replicated
 * gradients (LayerNorms, the row-parallel biases, wpe) are all-reduced at
 * the end of a dense backward (cuda_tprow_rep_begin / _end), or, streamed,
 * in each range before it is handed out (cuda_tprow_rep_range). Parameters
 * and gradient buckets come through the same helpers as without TP, in
 * the same orders, so the streamed modes work on this rank's flat buffer.
 *
 * Every collective waits for the model's stream first (cuda_tprow.h).
 */
#include <string.h>

#include "cuda_check.h"
#include "cuda_tp.h"
#include "gpt2_cuda_priv.h"

#define BLOCK 256

/* dwpe[(row0 + i) % T] += dout[i] for the local rows i < n, each column
 * summed in row order (tp_positions_backward's order). */
__global__ void k_positions_backward(float *dwpe, const float *dout, int row0, int n, int T, int C)
{
	int idx = blockIdx.x * blockDim.x + threadIdx.x;
	if (idx >= T * C)
		return;
	int p = idx / C, c = idx % C;
	int i0 = ((p - row0) % T + T) % T;
	float acc = dwpe[idx];
	for (int i = i0; i < n; i += T)
		acc += dout[(size_t)i * C + c];
	dwpe[idx] = acc;
}

static void s_positions_backward(float *dwpe, const float *dout, int row0, int n, int T, int C,
                                 cudaStream_t s)
{
	k_positions_backward<<<(T * C + BLOCK - 1) / BLOCK, BLOCK, 0, s>>>(dwpe, dout, row0, n, T, C);
	CUDA_CHECK_LAUNCH();
}

/* The valid local vocabulary rows (not padding) and the first one's id. */
static int s_vocab(const gpt2_cuda_t *m, int *ret_v0)
{
	int v0 = m->tpr.g.rank * m->Vl, nv = m->cfg.vocab_size - v0;
	*ret_v0 = v0;
	return nv < 0 ? 0 : nv < m->Vl ? nv : m->Vl;
}

/* wte block starting at local row c0 of `rows`: its end, and how many of
 * its rows are valid (*ret_cn, maybe 0) */
static int s_block(const gpt2_cuda_t *m, int c0, int rows, int nv, int *ret_cn)
{
	int c1 = rows < m->Vl - c0 ? c0 + rows : m->Vl;
	int e = c1 < nv ? c1 : nv;
	*ret_cn = e > c0 ? e - c0 : 0;
	return c1;
}

/* Streamed: the replicated gradients in range [lo, hi) (at g) summed over
 * the group before the range is handed out; dense: at the end. */
static void s_rep_range(gpt2_cuda_t *m, float *g, size_t lo, size_t hi)
{
	model_range_t r = {lo, hi};
	if (m->stream_begin)
		cuda_tprow_rep_range(&m->tpr, r, g);
}

#define LAYER_SLICE(ptr, l, per_row) ((ptr) + (size_t)(l) * maxN * (per_row))
#define LOCAL_SLICE(ptr, l, per_row) ((ptr) + (size_t)(l) * maxn * (per_row))
#define P(which) (lp.p + (m->offsets[(which)] - m->offsets[T_LN1_W]))
#define P16(which) (lp.p16 + (m->offsets[(which)] - m->offsets[T_LN1_W]))
#define G(which) (lg + (m->offsets[(which)] - m->offsets[T_LN1_W]))

/* The vocabulary-parallel embedding, reduce-scattered into encoded (n, C). */
static void s_embed(gpt2_cuda_t *m, const int32_t *d_inputs)
{
	const int C = m->cfg.n_embd, N = m->B * m->T, n = N / m->tp;
	acts_t *a = &m->a;
	cudaStream_t s = m->stream;
	int v0, nv = s_vocab(m, &v0), cn;
	const size_t wpe_lo = m->off_wpe, wpe_hi = wpe_lo + (size_t)m->cfg.seq_len * C;
	params_view_t v = gpt2_cuda_p_params_get(m, wpe_lo, wpe_hi, false);
	if (m->tpr.g.rank == 0) /* the positions, once */
		cuda_embed_positions_forward(a->dsmall, v.p, m->B, m->T, C, s);
	else
		CUDA_CHECK(cudaMemsetAsync(a->dsmall, 0, (size_t)N * C * sizeof(float), s));
	gpt2_cuda_p_params_put(m, v);
	const int rows = m->fetch ? m->wte_rows : m->Vl;
	for (int c0 = 0; c0 < m->Vl;) {
		int c1 = s_block(m, c0, rows, nv, &cn);
		v = gpt2_cuda_p_params_get(m, (size_t)c0 * C, (size_t)c1 * C, false);
		if (cn > 0)
			cuda_embed_tokens_add(a->dsmall, d_inputs, v.p, v0 + c0, v0 + c0 + cn, N, C, s);
		gpt2_cuda_p_params_put(m, v);
		c0 = c1;
	}
	cuda_tprow_reduce_scatter(&m->tpr, a->dsmall, a->encoded, (size_t)n * C);
}

/* Layer l's forward: x (n, C) in, res3 (n, C) out. */
static void s_layer_forward(gpt2_cuda_t *m, int l, const float *x)
{
	const int C = m->cfg.n_embd, t = m->tp, Hl = m->cfg.n_head / t, Cf = C / t;
	const int B = m->B, T = m->T, N = B * T, n = N / t;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T, maxn = (maxN + t - 1) / t;
	acts_t *a = &m->a;
	cudaStream_t s = m->stream;
	uint16_t *ln1 = LOCAL_SLICE(a->ln1, l, C), *ln2 = LOCAL_SLICE(a->ln2, l, C);
	float *qkv = m->fused ? NULL : LAYER_SLICE(a->qkv, l, 3 * Cf);
	uint16_t *qkv16 = m->fused ? LAYER_SLICE(a->qkv16, l, 3 * Cf) : NULL;
	uint16_t *atty = LAYER_SLICE(a->atty, l, Cf);
	uint16_t *att = m->fused ? NULL : LAYER_SLICE(a->att, l, (size_t)Hl * m->max_T);
	float *att_lse = m->fused ? LAYER_SLICE(a->att_lse, l, Hl) : NULL;
	float *res2 = LOCAL_SLICE(a->res2, l, C), *res3 = LOCAL_SLICE(a->res3, l, C);
	uint16_t *fch = LAYER_SLICE(a->fch, l, 4 * Cf), *gelu = LAYER_SLICE(a->gelu, l, 4 * Cf);
	const size_t first_layer = m->off_wpe + (size_t)m->cfg.seq_len * C;
	const size_t lo = first_layer + (size_t)l * m->layer_floats;
	params_view_t lp = gpt2_cuda_p_params_get(m, lo, lo + m->layer_floats, true);
	cuda_layernorm_forward(NULL, ln1, LOCAL_SLICE(a->ln1_mean, l, 1), LOCAL_SLICE(a->ln1_rstd, l, 1),
			       x, P(T_LN1_W), P(T_LN1_B), n, C, s);
	cuda_tprow_allgather(&m->tpr, ln1, a->full16, (size_t)n * C, sizeof(uint16_t));
	if (m->fused) {
		gpt2_cuda_p_gemm16(m, N, 3 * Cf, C, a->full16, P16(T_QKV_W), false, P16(T_QKV_B), qkv16, 0,
				   CUDA_GEMM_EPI_NONE, NULL);
		cuda_flash_forward(NULL, atty, att_lse, qkv16, B, T, Cf, Hl, Hl, s);
	} else {
		gpt2_cuda_p_gemm(m, N, 3 * Cf, C, a->full16, false, P16(T_QKV_W), false, P(T_QKV_B), qkv,
				 false);
		cuda_attention_forward(m->gemm, NULL, atty, att, qkv, &m->att_s, B, T, Cf, Hl, s);
	}
	gpt2_cuda_p_gemm(m, N, C, Cf, atty, false, P16(T_PROJ_W), false, NULL, a->dsmall, false);
	cuda_tprow_rs_residual(&m->tpr, res2, NULL, a->dsmall, x, P(T_PROJ_B), n, C);
	cuda_layernorm_forward(NULL, ln2, LOCAL_SLICE(a->ln2_mean, l, 1), LOCAL_SLICE(a->ln2_rstd, l, 1),
			       res2, P(T_LN2_W), P(T_LN2_B), n, C, s);
	cuda_tprow_allgather(&m->tpr, ln2, a->full16, (size_t)n * C, sizeof(uint16_t));
	gpt2_cuda_p_gemm16(m, N, 4 * Cf, C, a->full16, P16(T_FC_W), false, P16(T_FC_B), gelu, 0,
			   CUDA_GEMM_EPI_GELU, fch);
	gpt2_cuda_p_gemm(m, N, C, 4 * Cf, gelu, false, P16(T_FCPROJ_W), false, NULL, a->dsmall, false);
	cuda_tprow_rs_residual(&m->tpr, res3, NULL, a->dsmall, res2, P(T_FCPROJ_B), n, C);
	gpt2_cuda_p_params_put(m, lp);
}

void gpt2_cuda_tp_forward(gpt2_cuda_t *m, bool targets)
{
	const int L = m->cfg.n_layer, C = m->cfg.n_embd, t = m->tp;
	const int N = m->B * m->T, n = N / t;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T, maxn = (maxN + t - 1) / t;
	acts_t *a = &m->a;
	cudaStream_t s = m->stream;
	const int32_t *d_inputs = a->ids, *d_targets = a->ids + N;
	gpt2_cuda_p_pass(m, false);
	s_embed(m, d_inputs);
	const float *x = a->encoded;
	for (int l = 0; l < L; l++) {
		s_layer_forward(m, l, x);
		x = LOCAL_SLICE(a->res3, l, C);
	}
	params_view_t fp = gpt2_cuda_p_params_get(m, m->off_lnf, m->off_lnf + 2 * (size_t)C, false);
	cuda_layernorm_forward(NULL, a->lnf, a->lnf_mean, a->lnf_rstd, x, fp.p, fp.p + C, n, C, s);
	gpt2_cuda_p_params_put(m, fp);
	cuda_tprow_allgather(&m->tpr, a->lnf, a->full16, (size_t)n * C, sizeof(uint16_t));
	/* this rank's vocabulary block of the logits (N, nv), rows ld apart,
	 * by blocks of wte rows */
	int v0, nv = s_vocab(m, &v0), cn;
	const int64_t ld = (int64_t)gpt2_cuda_p_logits_ld(m->Vl);
	const int rows = m->fetch ? m->wte_rows : m->Vl;
	for (int c0 = 0; c0 < m->Vl;) {
		int c1 = s_block(m, c0, rows, nv, &cn);
		params_view_t v = gpt2_cuda_p_params_get(m, (size_t)c0 * C, (size_t)c1 * C, true);
		if (cn > 0)
			gpt2_cuda_p_gemm16(m, N, cn, C, a->full16, v.p16, true, NULL, a->logits + c0, ld,
					   CUDA_GEMM_EPI_NONE, NULL);
		gpt2_cuda_p_params_put(m, v);
		c0 = c1;
	}
	if (!targets)
		return;
	/* cuda_tp.h's cross-entropy: row maxima gathered, sums all-reduced */
	float *mx = a->ce, *all = mx + N, *red = all + (size_t)t * N, *lse = red + 2 * (size_t)N;
	cuda_tp_ce_rowmax(mx, NULL, a->logits, (size_t)ld, N, nv, s);
	cuda_tprow_allgather(&m->tpr, mx, all, (size_t)N, sizeof(float));
	cuda_tp_ce_maxof(mx, all, N, t, s);
	cuda_tp_ce_partials(red, NULL, a->logits, (size_t)ld, d_targets, mx, N, nv, v0, s);
	cuda_tprow_allreduce(&m->tpr, red, 2 * (size_t)N);
	cuda_tp_ce_finish(a->losses, lse, mx, red, N, s);
	cuda_mean(a->loss, a->losses, N, s);
	m->have_targets = true;
}

/* Layer l's backward with its parameters and gradients (lp, lg): a->dres
 * (and dres16) hold d res3 (n rows) in and d x out; x is the layer's input. */
static void s_layer_backward(gpt2_cuda_t *m, int l, const float *x, params_view_t lp, float *lg)
{
	const int C = m->cfg.n_embd, t = m->tp, Hl = m->cfg.n_head / t, Cf = C / t;
	const int B = m->B, T = m->T, N = B * T, n = N / t;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T, maxn = (maxN + t - 1) / t;
	acts_t *a = &m->a;
	cudaStream_t s = m->stream;
	const uint16_t *ln1 = LOCAL_SLICE(a->ln1, l, C), *ln2 = LOCAL_SLICE(a->ln2, l, C);
	float *qkv = m->fused ? NULL : LAYER_SLICE(a->qkv, l, 3 * Cf);
	const uint16_t *qkv16 = m->fused ? LAYER_SLICE(a->qkv16, l, 3 * Cf) : NULL;
	const uint16_t *atty = LAYER_SLICE(a->atty, l, Cf);
	const uint16_t *att = m->fused ? NULL : LAYER_SLICE(a->att, l, (size_t)Hl * m->max_T);
	const float *att_lse = m->fused ? LAYER_SLICE(a->att_lse, l, Hl) : NULL;
	const float *res2 = LOCAL_SLICE(a->res2, l, C);
	uint16_t *fch = LAYER_SLICE(a->fch, l, 4 * Cf);
	const uint16_t *gelu = LAYER_SLICE(a->gelu, l, 4 * Cf);
	/* MLP: d res3 gathered; c_proj row-parallel, c_fc column-parallel */
	cuda_tprow_allgather(&m->tpr, a->dres16, a->full16, (size_t)n * C, sizeof(uint16_t));
	gpt2_cuda_p_gemm(m, 4 * Cf, C, N, gelu, true, a->full16, false, NULL, G(T_FCPROJ_W), true);
	cuda_bias_backward16(G(T_FCPROJ_B), a->dres16, n, C, a->colsum, s);
	gpt2_cuda_p_gemm16(m, N, 4 * Cf, C, a->full16, P16(T_FCPROJ_W), true, NULL, a->dbig16, 0,
			   CUDA_GEMM_EPI_DGELU, fch);
	cuda_bias_backward16(G(T_FC_B), a->dbig16, N, 4 * Cf, a->colsum, s);
	cuda_tprow_allgather(&m->tpr, ln2, a->full16, (size_t)n * C, sizeof(uint16_t));
	gpt2_cuda_p_gemm(m, C, 4 * Cf, N, a->full16, true, a->dbig16, false, NULL, G(T_FC_W), true);
	gpt2_cuda_p_gemm(m, N, C, 4 * Cf, a->dbig16, false, P16(T_FC_W), true, NULL, a->dsmall, false);
	cuda_tprow_reduce_scatter(&m->tpr, a->dsmall, a->dloc, (size_t)n * C);
	cuda_layernorm_backward(a->dres, a->dres16, G(T_LN2_W), G(T_LN2_B), a->dloc, res2,
				LOCAL_SLICE(a->ln2_mean, l, 1), LOCAL_SLICE(a->ln2_rstd, l, 1), P(T_LN2_W),
				n, C, a->colsum, s);
	/* attention: d res2 gathered */
	cuda_tprow_allgather(&m->tpr, a->dres16, a->full16, (size_t)n * C, sizeof(uint16_t));
	gpt2_cuda_p_gemm(m, Cf, C, N, atty, true, a->full16, false, NULL, G(T_PROJ_W), true);
	cuda_bias_backward16(G(T_PROJ_B), a->dres16, n, C, a->colsum, s);
	if (m->fused) {
		gpt2_cuda_p_gemm16(m, N, Cf, C, a->full16, P16(T_PROJ_W), true, NULL, a->dsmall16, 0,
				   CUDA_GEMM_EPI_NONE, NULL);
		cuda_flash_backward(NULL, a->dbig16, G(T_QKV_B), NULL, a->dsmall16, qkv16, atty, att_lse,
				    &m->att_s, B, T, Cf, Hl, Hl, s);
	} else {
		gpt2_cuda_p_gemm(m, N, Cf, C, a->full16, false, P16(T_PROJ_W), true, NULL, a->dsmall, false);
		cuda_attention_backward(m->gemm, a->dbig, a->dbig16, a->dsmall, qkv, att, &m->att_s, B, T,
					Cf, Hl, s);
		cuda_bias_backward(G(T_QKV_B), a->dbig, N, 3 * Cf, a->colsum, s);
	}
	cuda_tprow_allgather(&m->tpr, ln1, a->full16, (size_t)n * C, sizeof(uint16_t));
	gpt2_cuda_p_gemm(m, C, 3 * Cf, N, a->full16, true, a->dbig16, false, NULL, G(T_QKV_W), true);
	gpt2_cuda_p_gemm(m, N, C, 3 * Cf, a->dbig16, false, P16(T_QKV_W), true, NULL, a->dsmall, false);
	cuda_tprow_reduce_scatter(&m->tpr, a->dsmall, a->dloc, (size_t)n * C);
	cuda_layernorm_backward(a->dres, a->dres16, G(T_LN1_W), G(T_LN1_B), a->dloc, x,
				LOCAL_SLICE(a->ln1_mean, l, 1), LOCAL_SLICE(a->ln1_rstd, l, 1), P(T_LN1_W),
				n, C, a->colsum, s);
}

/* The LM head's backward (dwte by blocks, dlnf reduce-scattered) and
 * ln_f's, into a->dres (n, C). */
static void s_head_backward(gpt2_cuda_t *m, float loss_scale)
{
	const int L = m->cfg.n_layer, C = m->cfg.n_embd, t = m->tp;
	const int N = m->B * m->T, n = N / t;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T, maxn = (maxN + t - 1) / t;
	acts_t *a = &m->a;
	cudaStream_t s = m->stream;
	int v0, nv = s_vocab(m, &v0), cn;
	const int64_t ld = (int64_t)gpt2_cuda_p_logits_ld(m->Vl);
	const float *lse = a->ce + (size_t)(t + 3) * N;
	cuda_tp_ce_backward(NULL, a->dlogits, NULL, a->logits, (size_t)ld, lse, a->ids + N, N, nv, v0,
			    loss_scale / (float)N, s);
	cuda_tprow_allgather(&m->tpr, a->lnf, a->full16, (size_t)n * C, sizeof(uint16_t));
	/* by blocks of wte rows: dwte[c] (+)= dlogits[:, c]^T @ lnf,
	 * dlnf (+)= dlogits[:, c] @ wte[c] */
	const int rows = m->stream_begin ? m->wte_rows : m->Vl;
	bool any = false;
	for (int c0 = 0; c0 < m->Vl;) {
		int c1 = s_block(m, c0, rows, nv, &cn);
		const size_t lo = (size_t)c0 * C, hi = (size_t)c1 * C;
		float *g = gpt2_cuda_p_grad_begin(m, lo, hi);
		if (cn > 0)
			gpt2_cuda_p_gemm_ld(m, cn, C, N, a->dlogits + c0, ld, true, a->full16, false, NULL, g,
					    0, true, 1.0f);
		gpt2_cuda_p_grad_end(m, g, lo, hi);
		params_view_t v = gpt2_cuda_p_params_get(m, lo, hi, true);
		if (cn > 0)
			gpt2_cuda_p_gemm_ld(m, N, C, cn, a->dlogits + c0, ld, false, v.p16, false, NULL,
					    a->dsmall, 0, any, 1.0f);
		any = any || cn > 0;
		gpt2_cuda_p_params_put(m, v);
		c0 = c1;
	}
	if (!any)
		CUDA_CHECK(cudaMemsetAsync(a->dsmall, 0, (size_t)N * C * sizeof(float), s));
	cuda_tprow_reduce_scatter(&m->tpr, a->dsmall, a->dloc, (size_t)n * C);
	const size_t lo = m->off_lnf, hi = lo + 2 * (size_t)C;
	params_view_t w = gpt2_cuda_p_params_get(m, lo, hi, false);
	float *g = gpt2_cuda_p_grad_begin(m, lo, hi);
	CUDA_CHECK(cudaMemsetAsync(a->dres, 0, (size_t)n * C * sizeof(float), s));
	cuda_layernorm_backward(a->dres, a->dres16, g, g + C, a->dloc, LOCAL_SLICE(a->res3, L - 1, C),
				a->lnf_mean, a->lnf_rstd, w.p, n, C, a->colsum, s);
	s_rep_range(m, g, lo, hi);
	gpt2_cuda_p_grad_end(m, g, lo, hi);
	gpt2_cuda_p_params_put(m, w);
}

/* The embedding's backward from a->dres (n, C): wpe's rows of this rank's
 * positions, then dres gathered and wte's rows by blocks. */
static void s_embed_backward(gpt2_cuda_t *m)
{
	const int C = m->cfg.n_embd, t = m->tp, T = m->T, N = m->B * T, n = N / t;
	acts_t *a = &m->a;
	cudaStream_t s = m->stream;
	const size_t wlo = m->off_wpe, whi = wlo + (size_t)m->cfg.seq_len * C;
	float *g = gpt2_cuda_p_grad_begin(m, wlo, whi);
	s_positions_backward(g, a->dres, m->tpr.g.rank * n, n, T, C, s);
	s_rep_range(m, g, wlo, whi);
	gpt2_cuda_p_grad_end(m, g, wlo, whi);
	cuda_tprow_allgather(&m->tpr, a->dres, a->dsmall, (size_t)n * C, sizeof(float));
	const int32_t *d_uniq = a->ids + 2 * N, *d_starts = a->ids + 3 * N, *d_rows = a->ids + 4 * N + 1;
	const int32_t *h_uniq = m->host_ids + 2 * N;
	int v0, nv = s_vocab(m, &v0), cn, k0 = 0;
	while (k0 < m->n_unique && h_uniq[k0] < v0)
		k0++;
	const int rows = m->stream_begin ? m->wte_rows : m->Vl;
	for (int c0 = 0; c0 < m->Vl;) {
		int c1 = s_block(m, c0, rows, nv, &cn), k1 = k0;
		while (k1 < m->n_unique && h_uniq[k1] < v0 + c0 + cn)
			k1++;
		const size_t lo = (size_t)c0 * C, hi = (size_t)c1 * C;
		g = gpt2_cuda_p_grad_begin(m, lo, hi);
		if (k1 > k0)
			cuda_embed_tokens_backward(g, v0 + c0, a->dsmall, d_uniq + k0, d_starts + k0, d_rows,
						   k1 - k0, C, s);
		gpt2_cuda_p_grad_end(m, g, lo, hi);
		k0 = k1;
		c0 = c1;
	}
}

void gpt2_cuda_tp_backward(gpt2_cuda_t *m, float loss_scale)
{
	const int L = m->cfg.n_layer, C = m->cfg.n_embd, t = m->tp;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T, maxn = (maxN + t - 1) / t;
	acts_t *a = &m->a;
	gpt2_cuda_p_pass(m, true);
	if (!m->stream_begin)
		cuda_tprow_rep_begin(&m->tpr, m->grads);
	s_head_backward(m, loss_scale);
	const size_t first_layer = m->off_wpe + (size_t)m->cfg.seq_len * C;
	for (int l = L - 1; l >= 0; l--) {
		const size_t lo = first_layer + (size_t)l * m->layer_floats, hi = lo + m->layer_floats;
		params_view_t lp = gpt2_cuda_p_params_get(m, lo, hi, true);
		float *lg = gpt2_cuda_p_grad_begin(m, lo, hi);
		s_layer_backward(m, l, l == 0 ? a->encoded : LOCAL_SLICE(a->res3, l - 1, C), lp, lg);
		s_rep_range(m, lg, lo, hi);
		gpt2_cuda_p_grad_end(m, lg, lo, hi);
		gpt2_cuda_p_params_put(m, lp);
	}
	s_embed_backward(m);
	if (m->stream_begin)
		return;
	cuda_tprow_rep_end(&m->tpr, m->grads);
	/* the replicated gradients are final only now: every range at once,
	 * in gpt2_cuda_set_grads_ready's order */
	gpt2_cuda_p_grads_ready(m, 0, m->off_lnf, 2 * (size_t)C);
	for (int l = L - 1; l >= 0; l--)
		gpt2_cuda_p_grads_ready(m, L - l, first_layer + (size_t)l * m->layer_floats,
					m->layer_floats);
	gpt2_cuda_p_grads_ready(m, L + 1, 0, first_layer);
}
