/*
 * gpt2_tp: GPT-2's tensor-parallel forward and backward on the CPU
 * (model.h's model_tp_t, engine/tp.h; docs/training.md "Tensor
 * parallelism"), on the model gpt2.c creates with tp_size > 1.
 */
#include <string.h>

#include "gpt2_priv.h"
#include "kernels.h"
#include "tp.h"

/*
 * Rank k of t holds heads [k H/t, (k+1) H/t) (Cf = C/t channels of q, k, v
 * and of attn.c_proj's input), 4C/t MLP features, wte rows [k Vl, (k+1) Vl)
 * and n = N/t rows of the residual stream. Layer forward: LN on the n rows,
 * all-gather (N, C), column-parallel c_attn and attention on N rows of
 * this rank's heads, row-parallel c_proj into a partial (N, C),
 * reduce-scatter to n rows, + residual + bias; the MLP likewise. Backward
 * re-gathers the LN outputs (Megatron's recompute: activations stay 1/t)
 * and all-gathers the residual gradient before each row-parallel layer's
 * backward; replicated gradients are all-reduced at the end (tp_rep_end),
 * or, streamed (ZeRO-2/3), in each range before it is handed out.
 * Parameters come by range through gpt2_p_fetch in the orders gpt2.h
 * describes (wpe, the wte blocks, the layers, ln_f, the wte blocks; then
 * the wte blocks, ln_f, the layers backwards), gradients through
 * gpt2_p_grad_begin / _end, so the streamed modes work on this rank's
 * flat buffer as they do without TP. */

/* Streamed: the replicated tensors' gradients in range r (at g) summed
 * over the group before the range is handed out; dense: at the end. */
static void s_rep_range(gpt2_t *m, float *g, model_range_t r)
{
	if (m->w.mode != MODEL_DENSE)
		tp_rep_range(&m->tp, m->tensors, m->n_tensors, r, g);
}

/* Block k of the local wte rows, and how many of them are real (not
 * padding): [*c0, *c0 + return) */
static model_range_t s_block(const gpt2_t *m, int k, int nv, int *c0, int *nvalid)
{
	int c1;
	model_range_t r = gpt2_p_chunk(m, k, c0, &c1);
	c1 = c1 < nv ? c1 : nv;
	*nvalid = c1 > *c0 ? c1 - *c0 : 0;
	return r;
}

/* Valid local vocabulary rows and the first one's id. */
static int s_tp_vocab(const gpt2_t *m, int *ret_v0)
{
	int Vl = (int)m->tensors[0].shape[0], v0 = m->tp.g.rank * Vl;
	int nv = m->cfg.vocab_size - v0;
	*ret_v0 = v0;
	return nv < 0 ? 0 : nv < Vl ? nv : Vl;
}

float gpt2_tp_forward(gpt2_t *m, const int32_t *inputs, const int32_t *targets, int B, int T)
{
	const int L = m->cfg.n_layer, C = m->cfg.n_embd, t = m->tp_size, H = m->cfg.n_head / t;
	const int Cf = C / t, N = B * T, n = N / t;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T, maxn = (maxN + t - 1) / t;
	acts_t *a = &m->a;
	int v0, nv = s_tp_vocab(m, &v0), c0, cn;
	const size_t ld = (size_t)m->tensors[0].shape[0];
	gpt2_p_seq_start(m, m->seq_fwd, m->n_seq_fwd);

	/* vocabulary-parallel embedding (TP rank 0 adds the positions once),
	 * reduce-scattered to this rank's rows */
	const float *wpe = gpt2_p_fetch(m, m->r_wpe);
	if (m->tp.g.rank == 0)
		kernel_embed_positions(a->dsmall, wpe, B, T, C);
	else
		memset(a->dsmall, 0, (size_t)N * C * sizeof(float));
	gpt2_p_release(m, wpe);
	for (int k = 0; k < m->n_chunks; k++) {
		const float *w = gpt2_p_fetch(m, s_block(m, k, nv, &c0, &cn));
		if (cn > 0)
			kernel_embed_tokens(a->dsmall, inputs, w, v0 + c0, v0 + c0 + cn, N, C);
		gpt2_p_release(m, w);
	}
	tp_reduce_scatter(&m->tp, a->dsmall, a->encoded, (size_t)n * C);
	const float *x = a->encoded;
	for (int l = 0; l < L; l++) {
		float *ln1 = LOCAL_SLICE(a->ln1, l, C), *ln2 = LOCAL_SLICE(a->ln2, l, C);
		float *qkv = LAYER_SLICE(a->qkv, l, 3 * Cf), *atty = LAYER_SLICE(a->atty, l, Cf);
		float *att = LAYER_SLICE(a->att, l, (size_t)H * m->max_T);
		float *res2 = LOCAL_SLICE(a->res2, l, C), *res3 = LOCAL_SLICE(a->res3, l, C);
		float *fch = LAYER_SLICE(a->fch, l, 4 * Cf);
		const model_range_t r = m->r_layers[l];
		const float *P = gpt2_p_fetch(m, r);
#define LP(which) gpt2_p_at(m, P, r.lo, l, (which))
		kernel_layernorm_forward(ln1, LOCAL_SLICE(a->ln1_mean, l, 1),
					 LOCAL_SLICE(a->ln1_rstd, l, 1), x, LP(T_LN1_W), LP(T_LN1_B), n, C);
		tp_allgather(&m->tp, ln1, a->full, (size_t)n * C);
		gpt2_p_gemm(m, N, 3 * Cf, C, a->full, 0, false, LP(T_QKV_W), false, LP(T_QKV_B), qkv, 0, false);
		kernel_attention_forward(atty, att, qkv, a->att_scratch, B, T, Cf, H);
		gpt2_p_gemm(m, N, C, Cf, atty, 0, false, LP(T_PROJ_W), false, NULL, a->dsmall, 0, false);
		tp_rs_residual(&m->tp, res2, a->dsmall, x, LP(T_PROJ_B), n, C);
		kernel_layernorm_forward(ln2, LOCAL_SLICE(a->ln2_mean, l, 1),
					 LOCAL_SLICE(a->ln2_rstd, l, 1), res2, LP(T_LN2_W), LP(T_LN2_B), n, C);
		tp_allgather(&m->tp, ln2, a->full, (size_t)n * C);
		gpt2_p_gemm(m, N, 4 * Cf, C, a->full, 0, false, LP(T_FC_W), false, LP(T_FC_B), fch, 0, false);
		kernel_gelu_forward(a->dbig, fch, (size_t)N * 4 * Cf);
		gpt2_p_gemm(m, N, C, 4 * Cf, a->dbig, 0, false, LP(T_FCPROJ_W), false, NULL, a->dsmall, 0,
		       false);
		tp_rs_residual(&m->tp, res3, a->dsmall, res2, LP(T_FCPROJ_B), n, C);
#undef LP
		gpt2_p_release(m, P);
		x = res3;
	}
	const float *lnf_p = gpt2_p_fetch(m, m->r_lnf);
	kernel_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, lnf_p, lnf_p + C, n, C);
	gpt2_p_release(m, lnf_p);
	tp_allgather(&m->tp, a->lnf, a->full, (size_t)n * C);
	/* this rank's vocabulary block of the logits, (N, nv) in rows Vl apart,
	 * by blocks of wte rows */
	for (int k = 0; k < m->n_chunks; k++) {
		const float *w = gpt2_p_fetch(m, s_block(m, k, nv, &c0, &cn));
		if (cn > 0)
			gpt2_p_gemm(m, N, cn, C, a->full, 0, false, w, true, NULL, a->logits + c0,
				    (int64_t)ld, false);
		gpt2_p_release(m, w);
	}
	if (!targets)
		return 0.0f;
	memcpy(a->targets, targets, (size_t)N * sizeof(int32_t));
	m->have_targets = true;
	return tp_crossentropy_forward(&m->tp, a->losses, a->lse, a->logits, ld, targets, N, nv, v0,
				       a->ce_scratch);
}

/* One layer's backward with its parameters P and gradients G (range r);
 * a->dres holds d res3 (n rows) in and d x out. */
static void s_tp_layer_backward(gpt2_t *m, int l, const float *x, const float *P, float *G,
                                model_range_t r)
{
	const int C = m->cfg.n_embd, t = m->tp_size, H = m->cfg.n_head / t, Cf = C / t;
	const int B = m->B, T = m->T, N = B * T, n = N / t;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T, maxn = (maxN + t - 1) / t;
	acts_t *a = &m->a;
	float *ln1 = LOCAL_SLICE(a->ln1, l, C), *ln2 = LOCAL_SLICE(a->ln2, l, C);
	float *qkv = LAYER_SLICE(a->qkv, l, 3 * Cf), *atty = LAYER_SLICE(a->atty, l, Cf);
	float *att = LAYER_SLICE(a->att, l, (size_t)H * m->max_T);
	float *res2 = LOCAL_SLICE(a->res2, l, C), *fch = LAYER_SLICE(a->fch, l, 4 * Cf);
#define LP(which) gpt2_p_at(m, P, r.lo, l, (which))
#define LG(which) gpt2_p_at(m, G, r.lo, l, (which))
	/* MLP: d res3 gathered; c_proj row-parallel, c_fc column-parallel */
	tp_allgather(&m->tp, a->dres, a->full, (size_t)n * C);
	kernel_gelu_forward(a->dbig, fch, (size_t)N * 4 * Cf);
	gpt2_p_gemm(m, 4 * Cf, C, N, a->dbig, 0, true, a->full, false, NULL, LG(T_FCPROJ_W), 0, true);
	kernel_bias_backward(LG(T_FCPROJ_B), a->dres, n, C);
	gpt2_p_gemm(m, N, 4 * Cf, C, a->full, 0, false, LP(T_FCPROJ_W), true, NULL, a->dbig, 0, false);
	kernel_gelu_backward_inplace(a->dbig, fch, (size_t)N * 4 * Cf);
	tp_allgather(&m->tp, ln2, a->full, (size_t)n * C);
	gpt2_p_gemm(m, C, 4 * Cf, N, a->full, 0, true, a->dbig, false, NULL, LG(T_FC_W), 0, true);
	kernel_bias_backward(LG(T_FC_B), a->dbig, N, 4 * Cf);
	gpt2_p_gemm(m, N, C, 4 * Cf, a->dbig, 0, false, LP(T_FC_W), true, NULL, a->dsmall, 0, false);
	tp_reduce_scatter(&m->tp, a->dsmall, a->dloc, (size_t)n * C);
	kernel_layernorm_backward(a->dres, LG(T_LN2_W), LG(T_LN2_B), a->dloc, res2,
				  LOCAL_SLICE(a->ln2_mean, l, 1), LOCAL_SLICE(a->ln2_rstd, l, 1),
				  LP(T_LN2_W), n, C);
	/* attention: d res2 gathered */
	tp_allgather(&m->tp, a->dres, a->full, (size_t)n * C);
	gpt2_p_gemm(m, Cf, C, N, atty, 0, true, a->full, false, NULL, LG(T_PROJ_W), 0, true);
	kernel_bias_backward(LG(T_PROJ_B), a->dres, n, C);
	gpt2_p_gemm(m, N, Cf, C, a->full, 0, false, LP(T_PROJ_W), true, NULL, a->dsmall, 0, false);
	kernel_attention_backward(a->dbig, a->dsmall, qkv, att, a->att_scratch, B, T, Cf, H);
	tp_allgather(&m->tp, ln1, a->full, (size_t)n * C);
	gpt2_p_gemm(m, C, 3 * Cf, N, a->full, 0, true, a->dbig, false, NULL, LG(T_QKV_W), 0, true);
	kernel_bias_backward(LG(T_QKV_B), a->dbig, N, 3 * Cf);
	gpt2_p_gemm(m, N, C, 3 * Cf, a->dbig, 0, false, LP(T_QKV_W), true, NULL, a->dsmall, 0, false);
	tp_reduce_scatter(&m->tp, a->dsmall, a->dloc, (size_t)n * C);
	kernel_layernorm_backward(a->dres, LG(T_LN1_W), LG(T_LN1_B), a->dloc, x,
				  LOCAL_SLICE(a->ln1_mean, l, 1), LOCAL_SLICE(a->ln1_rstd, l, 1),
				  LP(T_LN1_W), n, C);
#undef LP
#undef LG
}

void gpt2_tp_backward(gpt2_t *m, float loss_scale)
{
	const int L = m->cfg.n_layer, C = m->cfg.n_embd, t = m->tp_size;
	const int B = m->B, T = m->T, N = B * T, n = N / t, row0 = m->tp.g.rank * n;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T, maxn = (maxN + t - 1) / t;
	acts_t *a = &m->a;
	int v0, nv = s_tp_vocab(m, &v0), c0, cn;
	const size_t ld = (size_t)m->tensors[0].shape[0];
	gpt2_p_seq_start(m, m->seq_bwd, m->n_seq_bwd);
	if (m->w.mode == MODEL_DENSE)
		tp_rep_begin(&m->tp, m->tensors, m->n_tensors, m->w.grads);

	tp_crossentropy_backward(a->logits, ld, a->lse, a->targets, N, nv, v0, loss_scale / (float)N);
	tp_allgather(&m->tp, a->lnf, a->full, (size_t)n * C);
	/* by blocks of wte rows: dwte[c] (+)= dlogits[:, c]^T @ lnf, dlnf (+)= dlogits[:, c] @ wte[c] */
	bool any = false;
	for (int k = 0; k < m->n_chunks; k++) {
		model_range_t r = s_block(m, k, nv, &c0, &cn);
		const float *w = gpt2_p_fetch(m, r);
		float *g = gpt2_p_grad_begin(m, r);
		if (cn > 0) {
			gpt2_p_gemm(m, cn, C, N, a->logits + c0, (int64_t)ld, true, a->full, false, NULL, g,
				    0, true);
			gpt2_p_gemm(m, N, C, cn, a->logits + c0, (int64_t)ld, false, w, false, NULL,
				    a->dsmall, 0, any);
			any = true;
		}
		gpt2_p_grad_end(m, g, r);
		gpt2_p_release(m, w);
	}
	if (!any)
		memset(a->dsmall, 0, (size_t)N * C * sizeof(float));
	tp_reduce_scatter(&m->tp, a->dsmall, a->dloc, (size_t)n * C);
	const float *P = gpt2_p_fetch(m, m->r_lnf);
	float *G = gpt2_p_grad_begin(m, m->r_lnf);
	memset(a->dres, 0, (size_t)n * C * sizeof(float));
	kernel_layernorm_backward(a->dres, G, G + C, a->dloc, LOCAL_SLICE(a->res3, L - 1, C),
				  a->lnf_mean, a->lnf_rstd, P, n, C);
	s_rep_range(m, G, m->r_lnf);
	gpt2_p_grad_end(m, G, m->r_lnf);
	gpt2_p_release(m, P);
	for (int l = L - 1; l >= 0; l--) {
		const model_range_t r = m->r_layers[l];
		P = gpt2_p_fetch(m, r);
		G = gpt2_p_grad_begin(m, r);
		s_tp_layer_backward(m, l, l == 0 ? a->encoded : LOCAL_SLICE(a->res3, l - 1, C), P, G, r);
		s_rep_range(m, G, r);
		gpt2_p_grad_end(m, G, r);
		gpt2_p_release(m, P);
	}
	G = gpt2_p_grad_begin(m, m->r_wpe);
	tp_positions_backward(G, a->dres, row0, n, T, C);
	s_rep_range(m, G, m->r_wpe);
	gpt2_p_grad_end(m, G, m->r_wpe);
	tp_allgather(&m->tp, a->dres, a->full, (size_t)n * C);
	for (int k = 0; k < m->n_chunks; k++) {
		model_range_t r = s_block(m, k, nv, &c0, &cn);
		float *g = gpt2_p_grad_begin(m, r);
		if (cn > 0)
			kernel_embed_tokens_backward(g, v0 + c0, v0 + c0 + cn, a->full, a->inputs, N, C);
		gpt2_p_grad_end(m, g, r);
	}
	if (m->w.mode == MODEL_DENSE)
		tp_rep_end(&m->tp, m->tensors, m->n_tensors, m->w.grads);
}
