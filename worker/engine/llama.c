/*
 * llama: the Llama model on the CPU (see llama.h): the activation arena,
 * the streaming ranges, and forward and backward as a sequence of oneDNN
 * GEMMs (matmul.c) and C kernels (kernels.c, kernels_llama.c).
 *
 * Layout. The table and init are llama_layout.c's. Weights are nn.Linear's
 * (out, in), so a projection is y = x @ W^T (a GEMM with B transposed),
 * dx = dy @ W and dW += dy^T @ x. q_proj, k_proj and v_proj are adjacent
 * in the flat buffer and so form one (C + 2 KV hd, C) matrix: one GEMM
 * gives qkv (N, (H + 2 KV) hd) in the layout the grouped-query attention
 * kernel reads; gate_proj and up_proj likewise form one (2F, C) matrix.
 * RoPE rotates q and k in place in qkv after the GEMM (the rotated values
 * are what attention's backward needs); its backward rotates dq and dk
 * back. Residual additions are fused into the o_proj and down_proj GEMMs
 * (oneDNN's sum post-op). Backward turns the logits into their gradient in
 * place and recomputes the SwiGLU output instead of keeping it.
 *
 * bf16 mode as gpt2.c's: a bf16 copy of the parameters (refreshed at each
 * forward, or of the fetched range under MODEL_STREAM_ALL) and bf16
 * scratch copies of each GEMM's activation operands; GEMMs accumulate and
 * write fp32; master weights, gradients and the C kernels stay fp32.
 */
#include "llama.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "kernels.h"
#include "kernels_llama.h"
#include "llama_layout.h"
#include "initrand.h"
#include "matmul.h"
#include "modelcpu.h"
#include "tp.h"

typedef struct {
	float *encoded;              /* (N, C) embedding */
	float *rms1, *rstd1;         /* (L, N, C), (L, N) */
	float *qkv;                  /* (L, N, QKV) q and k after RoPE */
	float *att;                  /* (L, B, H, T, T) */
	float *atty;                 /* (L, N, C) */
	float *res2;                 /* (L, N, C) after attention */
	float *rms2, *rstd2;         /* (L, N, C), (L, N) */
	float *gu;                   /* (L, N, 2F) gate and up before SwiGLU */
	float *res3;                 /* (L, N, C) after the MLP */
	float *rmsf, *rstdf;         /* (N, C), (N) */
	float *logits;               /* (N, V); dlogits after backward */
	float *lse, *losses;         /* (N) */
	float *dres;                 /* (N, C) gradient of the residual stream */
	float *dbig;                 /* (N, max(2F, QKV)) dgu / dqkv */
	float *dsmall;               /* (N, C) */
	float *act;                  /* (N, F) SwiGLU output / its gradient */
	float *att_scratch;
	float *full, *dloc, *ce_scratch; /* TP only: (N, C) gathered, (n, C), the loss's */
	float *rope_cos, *rope_sin;  /* (max_T, hd/2) */
	int32_t *inputs, *targets;   /* (N) copies for backward */
	uint16_t *a16, *b16;         /* bf16 GEMM operands */
} acts_t;

struct llama {
	model_config_t cfg;
	int max_B, max_T;
	int hd, qkv_w; /* head size; qkv row width (H + 2 KV) hd (this rank's heads) */
	int tp_size;   /* TP ranks (1: none); tensors, qkv_w are this rank's part */
	int vl;        /* vocabulary rows held (V, or V padded / tp) */
	tp_t tp;

	int n_tensors;
	model_tensor_t *tensors;
	modelcpu_params_t w; /* parameters, gradients, streaming (modelcpu.h) */

	int rows, n_chunks;  /* embed_tokens / lm_head blocks of `rows` rows */
	size_t head_off;     /* offset of the LM head's matrix (0 when tied) */
	size_t max_range;
	model_range_t r_norm;
	model_range_t *r_layers;
	model_range_t *seq_fwd, *seq_bwd;
	int n_seq_fwd, n_seq_bwd;

	void *arena;
	size_t arena_bytes;
	acts_t a;
	matmul_cache_t *mm;
	int B, T;
	bool have_targets;
};

static void *s_carve(char *base, double *off, double n, size_t size)
{
	void *p = base ? base + (size_t)*off : NULL;
	*off += ceil(n * (double)size / 64.0) * 64.0;
	return p;
}

/* Lay out the arena for TP rank parts of tp ranks (1: none): the residual
 * stream and norms n = N/tp rows, the rest all N rows of this rank's
 * heads / features / vocabulary block. With base NULL only measure it (in
 * double, so that absurd sizes are refused rather than overflowing). */
static double s_layout(acts_t *a, char *base, const model_config_t *cfg, int max_B, int max_T,
                       bool bf16, int tp)
{
	double t = tp > 1 ? tp : 1;
	double L = cfg->n_layer, C = cfg->n_embd, V = ceil(cfg->vocab_size / t), H = cfg->n_head / t;
	double F = cfg->ffn_dim / t, hd = C / cfg->n_head, QKV = (H + 2.0 * cfg->n_kv_head / t) * hd;
	double N = (double)max_B * max_T, n = ceil(N / t), f = sizeof(float), off = 0;
	a->encoded = s_carve(base, &off, n * C, f);
	a->rms1 = s_carve(base, &off, L * n * C, f);
	a->rstd1 = s_carve(base, &off, L * n, f);
	a->qkv = s_carve(base, &off, L * N * QKV, f);
	a->att = s_carve(base, &off, L * N * H * max_T, f);
	a->atty = s_carve(base, &off, L * N * H * hd, f);
	a->res2 = s_carve(base, &off, L * n * C, f);
	a->rms2 = s_carve(base, &off, L * n * C, f);
	a->rstd2 = s_carve(base, &off, L * n, f);
	a->gu = s_carve(base, &off, L * N * 2 * F, f);
	a->res3 = s_carve(base, &off, L * n * C, f);
	a->rmsf = s_carve(base, &off, n * C, f);
	a->rstdf = s_carve(base, &off, n, f);
	a->logits = s_carve(base, &off, N * V, f);
	a->lse = s_carve(base, &off, N, f);
	a->losses = s_carve(base, &off, N, f);
	a->dres = s_carve(base, &off, n * C, f);
	a->dbig = s_carve(base, &off, N * (2 * F > QKV ? 2 * F : QKV), f);
	a->dsmall = s_carve(base, &off, N * C, f);
	a->act = s_carve(base, &off, N * F, f);
	a->att_scratch = s_carve(base, &off, (double)max_B * H * hd * ((max_T + 15) / 16 * 16) +
					     N * H * max_T, f);
	a->rope_cos = s_carve(base, &off, (double)max_T * hd / 2, f);
	a->rope_sin = s_carve(base, &off, (double)max_T * hd / 2, f);
	a->inputs = s_carve(base, &off, N, sizeof(int32_t));
	a->targets = s_carve(base, &off, N, sizeof(int32_t));
	a->full = a->dloc = a->ce_scratch = NULL;
	if (t > 1) {
		a->full = s_carve(base, &off, N * C, f);
		a->dloc = s_carve(base, &off, n * C, f);
		a->ce_scratch = s_carve(base, &off, (double)tp_ce_scratch_floats(tp, (int)N), f);
	}
	a->a16 = a->b16 = NULL;
	if (bf16) {
		double wide = V > 2 * F ? V : 2 * F;
		wide = wide > QKV ? wide : QKV;
		a->a16 = s_carve(base, &off, N * (wide > C ? wide : C), sizeof(uint16_t));
		a->b16 = s_carve(base, &off, N * (F > C ? F : C), sizeof(uint16_t));
	}
	return off;
}

/* -ENOMEM with the line gpt2.c writes when the model or batch cannot fit. */
static int s_check_memory(const model_config_t *cfg, int max_B, int max_T, bool bf16,
                          model_streaming_t mode, char *err, size_t errlen)
{
	double C = cfg->n_embd, V = cfg->vocab_size, F = cfg->ffn_dim;
	double kv = (double)cfg->n_kv_head * (C / cfg->n_head);
	double n_params = V * C * (cfg->tie_embeddings ? 1 : 2) + C +
			  cfg->n_layer * (2 * C + 2 * C * C + 2 * kv * C + 3 * F * C);
	double state = mode == MODEL_DENSE ? n_params * (16.0 + (bf16 ? 2.0 : 0.0))
		: mode == MODEL_STREAM_GRADS ? n_params * (4.0 + (bf16 ? 2.0 : 0.0)) : 0.0;
	acts_t a;
	double act = s_layout(&a, NULL, cfg, max_B, max_T, bf16, 1);
	double avail = modelcpu_available_bytes();
	if (state > avail) {
		snprintf(err, errlen,
			 "model does not fit in memory: needs %.1f GiB for %.0f parameters, their gradients"
			 " and AdamW state, but %.1f GiB is available; lower model.n_layer, model.n_embd,"
			 " model.ffn_dim or model.vocab_size",
			 state / 1073741824.0, n_params, avail / 1073741824.0);
		return -ENOMEM;
	}
	if (state + act > avail || (double)max_B * max_T > 2147483647.0 / 4) {
		snprintf(err, errlen,
			 "batch does not fit in memory: needs %.1f GiB for activations (train.batch_size %d"
			 " x model.seq_len %d tokens) and %.1f GiB for parameters, gradients and AdamW"
			 " state, but %.1f GiB is available; lower train.batch_size or model.seq_len",
			 act / 1073741824.0, max_B, max_T, state / 1073741824.0, avail / 1073741824.0);
		return -ENOMEM;
	}
	return 0;
}

/* ---- ranges ---- */

/* Block k of the matrix at `off` (embed_tokens or the LM head). */
static model_range_t s_chunk(const llama_t *m, size_t off, int k, int *ret_v0, int *ret_v1)
{
	int V = m->vl;
	size_t C = (size_t)m->cfg.n_embd;
	int v0 = k * m->rows, v1 = v0 + m->rows < V ? v0 + m->rows : V;
	*ret_v0 = v0;
	*ret_v1 = v1;
	return (model_range_t){off + (size_t)v0 * C, off + (size_t)v1 * C};
}

static bool s_build_ranges(llama_t *m)
{
	const int L = m->cfg.n_layer;
	m->rows = m->w.mode == MODEL_DENSE ? m->vl : llama_stream_rows(&m->cfg);
	m->n_chunks = (m->vl + m->rows - 1) / m->rows;
	const model_tensor_t *norm = &m->tensors[1 + LLAMA_LAYER_TENSORS * L];
	m->r_norm = (model_range_t){norm->offset, norm->offset + norm->numel};
	m->head_off = m->cfg.tie_embeddings ? 0 : m->tensors[m->n_tensors - 1].offset;
	m->r_layers = calloc((size_t)L, sizeof *m->r_layers);
	m->n_seq_fwd = 2 * m->n_chunks + L + 1;
	m->n_seq_bwd = m->n_chunks + 1 + L;
	m->seq_fwd = calloc((size_t)m->n_seq_fwd, sizeof(model_range_t));
	m->seq_bwd = calloc((size_t)m->n_seq_bwd, sizeof(model_range_t));
	if (!m->r_layers || !m->seq_fwd || !m->seq_bwd)
		return false;
	for (int l = 0; l < L; l++) {
		const model_tensor_t *t = &m->tensors[1 + l * LLAMA_LAYER_TENSORS];
		const model_tensor_t *e = t + LLAMA_LAYER_TENSORS - 1;
		m->r_layers[l] = (model_range_t){t->offset, e->offset + e->numel};
	}
	int f = 0, b = 0, v0, v1;
	for (int k = 0; k < m->n_chunks; k++)
		m->seq_fwd[f++] = s_chunk(m, 0, k, &v0, &v1);
	for (int l = 0; l < L; l++)
		m->seq_fwd[f++] = m->r_layers[l];
	m->seq_fwd[f++] = m->r_norm;
	for (int k = 0; k < m->n_chunks; k++) {
		m->seq_fwd[f++] = s_chunk(m, m->head_off, k, &v0, &v1);
		m->seq_bwd[b++] = s_chunk(m, m->head_off, k, &v0, &v1);
	}
	m->seq_bwd[b++] = m->r_norm;
	for (int l = L - 1; l >= 0; l--)
		m->seq_bwd[b++] = m->r_layers[l];
	return true;
}

/* ---- create and free ---- */

static int s_alloc_buffers(llama_t *m, bool bf16)
{
	if (m->w.mode != MODEL_STREAM_ALL) {
		if (!(m->w.params = modelcpu_alloc(m->w.n_params * sizeof(float))))
			return -ENOMEM;
		memset(m->w.params, 0, m->w.n_params * sizeof(float));
	}
	if (m->w.mode == MODEL_DENSE) {
		if (!(m->w.grads = modelcpu_alloc(m->w.n_params * sizeof(float))))
			return -ENOMEM;
		memset(m->w.grads, 0, m->w.n_params * sizeof(float));
	}
	size_t n16 = m->w.mode == MODEL_STREAM_ALL ? m->max_range : m->w.n_params;
	if (bf16 && !(m->w.params16 = modelcpu_alloc(n16 * sizeof(uint16_t))))
		return -ENOMEM;
	m->arena_bytes = (size_t)s_layout(&m->a, NULL, &m->cfg, m->max_B, m->max_T, bf16, m->tp_size);
	if (!(m->arena = modelcpu_alloc(m->arena_bytes)))
		return -ENOMEM;
	s_layout(&m->a, m->arena, &m->cfg, m->max_B, m->max_T, bf16, m->tp_size);
	llama_rope_tables(&m->cfg, m->max_T, m->a.rope_cos, m->a.rope_sin);
	return 0;
}

int llama_new(const model_config_t *cfg, int max_B, int max_T, model_precision_t precision,
              model_streaming_t mode, const model_stream_t *stream, llama_t **ret_model, char *err,
              size_t errlen)
{
	return llama_new_tp(cfg, max_B, max_T, precision, mode, stream, NULL, ret_model, err, errlen);
}

/* The TP group's rules for Llama: heads, KV heads, the FFN width and the
 * sequence divide by t. */
static int s_tp_check(const model_config_t *cfg, int max_T, const model_tp_t *tp, char *err,
                      size_t errlen)
{
	static const char *const names[] = {"model.n_head", "model.n_kv_head", "model.ffn_dim",
					    "the sequence length (sequence parallelism)"};
	int dims[] = {cfg->n_head, cfg->n_kv_head, cfg->ffn_dim, max_T};
	return tp_check(tp, names, dims, tp && tp->size > 1 ? 4 : 0, err, errlen);
}

int llama_new_tp(const model_config_t *cfg, int max_B, int max_T, model_precision_t precision,
                 model_streaming_t mode, const model_stream_t *stream, const model_tp_t *tp,
                 llama_t **ret_model, char *err, size_t errlen)
{
	if (mode != MODEL_DENSE && (!stream || !stream->grad_begin || !stream->grad_end ||
				   (mode == MODEL_STREAM_ALL && (!stream->fetch || !stream->release)))) {
		snprintf(err, errlen, "internal error: a streamed model needs its stream functions");
		return -EINVAL;
	}
	if (llama_config_check(cfg, max_B, max_T, err, errlen) < 0 ||
	    s_tp_check(cfg, max_T, tp, err, errlen) < 0)
		return -EINVAL;
	bool bf16 = precision == MODEL_PRECISION_BF16;
	int rc = s_check_memory(cfg, max_B, max_T, bf16, mode, err, errlen);
	if (rc < 0)
		return rc;
	llama_t *m = calloc(1, sizeof *m);
	if (!m)
		goto nomem;
	m->cfg = *cfg;
	m->max_B = max_B;
	m->max_T = max_T;
	m->tp_size = tp && tp->size > 1 ? tp->size : 1;
	m->hd = cfg->n_embd / cfg->n_head;
	m->qkv_w = (cfg->n_head + 2 * cfg->n_kv_head) / m->tp_size * m->hd;
	m->vl = (cfg->vocab_size + m->tp_size - 1) / m->tp_size;
	m->w.mode = mode;
	if (stream)
		m->w.stream = *stream;
	if (llama_layout_tp(cfg, m->tp_size, &m->tensors, &m->n_tensors, &m->w.n_params,
			    &m->max_range) < 0 ||
	    !s_build_ranges(m) || s_alloc_buffers(m, bf16) < 0 ||
	    tp_init(&m->tp, tp, m->tensors, m->n_tensors) < 0)
		goto nomem;
	if (!(m->mm = matmul_cache_create(bf16, err, errlen))) {
		llama_free(m);
		return -EIO;
	}
	*ret_model = m;
	return 0;
nomem:
	snprintf(err, errlen,
		 "batch does not fit in memory: cannot allocate the parameters, gradients and"
		 " activations (train.batch_size %d x model.seq_len %d tokens); lower"
		 " train.batch_size or model.seq_len",
		 max_B, max_T);
	llama_free(m);
	return -ENOMEM;
}

void llama_free(llama_t *m)
{
	if (!m)
		return;
	matmul_cache_free(m->mm);
	tp_free(&m->tp);
	free(m->arena);
	free(m->w.params16);
	free(m->w.grads);
	free(m->w.params);
	free(m->r_layers);
	free(m->seq_fwd);
	free(m->seq_bwd);
	free(m->tensors);
	free(m);
}

size_t llama_num_params(const llama_t *m)
{
	return m->w.n_params;
}

float *llama_params(llama_t *m)
{
	return m->w.params;
}

float *llama_grads(llama_t *m)
{
	return m->w.grads;
}

const model_tensor_t *llama_tensors(const llama_t *m, int *ret_n)
{
	*ret_n = m->n_tensors;
	return m->tensors;
}

size_t llama_max_range(const llama_t *m)
{
	return m->max_range;
}

size_t llama_param_bytes(const llama_t *m)
{
	return modelcpu_param_bytes(&m->w, m->max_range);
}

size_t llama_grad_bytes(const llama_t *m)
{
	return modelcpu_grad_bytes(&m->w);
}

size_t llama_activation_bytes(const llama_t *m)
{
	return m->arena_bytes;
}

/* A TP part's init: each local element its logical element's value
 * (llama_init_range's rule), padded vocabulary rows 0. */
typedef struct {
	const llama_t *m;
	int i;
	uint64_t seed;
	float *out; /* where local element `skip` of tensor i goes */
	size_t skip;
} init_ctx_t;

static void s_init_segment(void *vctx, size_t local, size_t logical, size_t n)
{
	const init_ctx_t *c = vctx;
	const model_tensor_t *t = &c->m->tensors[c->i];
	float *p = c->out + (local - c->skip);
	if (t->ndim == 1) {
		for (size_t k = 0; k < n; k++)
			p[k] = 1.0f;
		return;
	}
	bool resid = strstr(t->name, "o_proj.weight") || strstr(t->name, "down_proj.weight");
	double std = resid ? 0.02 / sqrt(2.0 * c->m->cfg.n_layer) : 0.02;
	initrand_normal(p, logical, logical + n, c->seed, (uint64_t)c->i, std);
}

void llama_init_range_of(const llama_t *m, uint64_t seed, size_t lo, size_t hi, float *out)
{
	if (m->tp_size <= 1) {
		llama_init_range(&m->cfg, m->tensors, m->n_tensors, seed, lo, hi, out);
		return;
	}
	for (int i = 0; i < m->n_tensors; i++) {
		const model_tensor_t *t = &m->tensors[i];
		size_t a = t->offset > lo ? t->offset : lo;
		size_t b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
		if (a >= b)
			continue;
		init_ctx_t c = {m, i, seed, out + (a - lo), a - t->offset};
		memset(out + (a - lo), 0, (b - a) * sizeof(float));
		tp_segments(t, m->tp.g.rank, m->tp_size, a - t->offset, b - t->offset, s_init_segment, &c);
	}
}

void llama_init_params(llama_t *m, uint64_t seed)
{
	if (m->w.params)
		llama_init_range_of(m, seed, 0, m->w.n_params, m->w.params);
}

double llama_model_flops(const llama_t *m, int T)
{
	if (m->tp_size <= 1)
		return llama_flops_per_token(&m->cfg, m->w.n_params, T);
	/* this rank's share: its parameters (less its embedding block when
	 * untied) and 1/t of the attention */
	double n = (double)m->w.n_params;
	if (!m->cfg.tie_embeddings)
		n -= (double)m->vl * m->cfg.n_embd;
	return 6.0 * n + 12.0 * m->cfg.n_layer * m->cfg.n_embd / m->tp_size * (double)T;
}

void llama_tp_comm(const llama_t *m, model_tp_comm_t *ret)
{
	*ret = m->tp.vol;
}

const float *llama_logits(const llama_t *m)
{
	return m->a.logits;
}

void llama_zero_grad(llama_t *m)
{
	modelcpu_zero_grad(&m->w);
}

/* ---- parameters in and gradients out ---- */

static void s_seq_start(llama_t *m, const model_range_t *seq, int n)
{
	modelcpu_seq_start(&m->w, seq, n);
}

static const float *s_fetch(llama_t *m, model_range_t r)
{
	return modelcpu_fetch(&m->w, r, "llama");
}

static void s_release(llama_t *m, const float *p)
{
	modelcpu_release(&m->w, p);
}

static float *s_grad_begin(llama_t *m, model_range_t r)
{
	return modelcpu_grad_begin(&m->w, r);
}

static void s_grad_end(llama_t *m, float *g, model_range_t r)
{
	modelcpu_grad_end(&m->w, g, r);
}

/* Tensor `which` of layer l inside a range starting at lo. */
static inline float *s_at(const llama_t *m, const float *base, size_t lo, int l, int which)
{
	return (float *)(uintptr_t)base + (m->tensors[1 + l * LLAMA_LAYER_TENSORS + which].offset - lo);
}

/* C (M, N) (+)= op(A) @ op(B) (modelcpu_gemm without a bias). */
static void s_gemm(llama_t *m, int M, int N, int K, const float *A, int64_t lda, bool trans_a,
                   const float *B, bool trans_b, float *C, int64_t ldc, bool accumulate)
{
	modelcpu_gemm(&m->w, m->mm, m->a.a16, m->a.b16, M, N, K, A, lda, trans_a, B, trans_b, NULL,
	              C, ldc, accumulate);
}

#define SLICE(ptr, l, per_row) ((ptr) + (size_t)(l) * maxN * (size_t)(per_row))

/* One block's forward: x (N, C) in, res3 of layer l out. */
static void s_layer_forward(llama_t *m, int l, const float *x, int B, int T)
{
	const int C = m->cfg.n_embd, H = m->cfg.n_head, KV = m->cfg.n_kv_head, F = m->cfg.ffn_dim;
	const int N = B * T, QKV = m->qkv_w;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T;
	const float eps = (float)m->cfg.norm_eps;
	acts_t *a = &m->a;
	float *rms1 = SLICE(a->rms1, l, C), *qkv = SLICE(a->qkv, l, QKV), *atty = SLICE(a->atty, l, C);
	float *res2 = SLICE(a->res2, l, C), *rms2 = SLICE(a->rms2, l, C), *gu = SLICE(a->gu, l, 2 * F);
	float *res3 = SLICE(a->res3, l, C);
	const model_range_t r = m->r_layers[l];
	const float *P = s_fetch(m, r);
#define LP(which) s_at(m, P, r.lo, l, (which))
	kernel_rmsnorm_forward(rms1, SLICE(a->rstd1, l, 1), x, LP(LLAMA_T_ATTN_NORM), N, C, eps);
	/* q_proj, k_proj, v_proj are one (QKV, C) matrix */
	s_gemm(m, N, QKV, C, rms1, 0, false, LP(LLAMA_T_Q), true, qkv, 0, false);
	kernel_rope_forward(qkv, (size_t)QKV, H + KV, m->hd, a->rope_cos, a->rope_sin, B, T);
	kernel_gqa_attention_forward(atty, SLICE(a->att, l, (size_t)H * m->max_T), qkv, a->att_scratch,
				     B, T, H, KV, m->hd);
	memcpy(res2, x, (size_t)N * C * sizeof(float));
	s_gemm(m, N, C, C, atty, 0, false, LP(LLAMA_T_O), true, res2, 0, true);
	kernel_rmsnorm_forward(rms2, SLICE(a->rstd2, l, 1), res2, LP(LLAMA_T_MLP_NORM), N, C, eps);
	/* gate_proj and up_proj are one (2F, C) matrix */
	s_gemm(m, N, 2 * F, C, rms2, 0, false, LP(LLAMA_T_GATE), true, gu, 0, false);
	kernel_swiglu_forward(a->act, gu, N, F);
	memcpy(res3, res2, (size_t)N * C * sizeof(float));
	s_gemm(m, N, C, F, a->act, 0, false, LP(LLAMA_T_DOWN), true, res3, 0, true);
#undef LP
	s_release(m, P);
}

static void s_check_batch(const llama_t *m, const int32_t *inputs, const int32_t *targets, int B,
                          int T)
{
	const int V = m->cfg.vocab_size;
	if (B < 1 || B > m->max_B || T < 1 || T > m->max_T) {
		fprintf(stderr, "ringworker: fatal: llama_forward: batch %d x %d exceeds the model's %d x %d\n",
			B, T, m->max_B, m->max_T);
		exit(EX_SOFTWARE);
	}
	for (int n = 0; n < B * T; n++)
		if (inputs[n] < 0 || inputs[n] >= V || (targets && (targets[n] < 0 || targets[n] >= V))) {
			fprintf(stderr, "ringworker: fatal: llama_forward: token id out of [0, %d)\n", V);
			exit(EX_SOFTWARE);
		}
}

/* ---- tensor parallelism (model.h, tp.h; gpt2.c's scheme) ----
 * Rank k of t holds query heads [k H/t, (k+1) H/t) and KV heads
 * [k KV/t, (k+1) KV/t) (query head h of the rank reads its KV head
 * h / (H/KV) as without TP), F/t of the gate and up features, the
 * matching o_proj and down_proj input columns, vocabulary rows
 * [k Vl, (k+1) Vl) of the embedding and the LM head, and n = N/t rows of
 * the residual stream and the norms. */

#define LSLICE(ptr, l, per_row) ((ptr) + (size_t)(l) * maxn * (size_t)(per_row))

static int s_tp_vocab(const llama_t *m, int *ret_v0)
{
	int v0 = m->tp.g.rank * m->vl, nv = m->cfg.vocab_size - v0;
	*ret_v0 = v0;
	return nv < 0 ? 0 : nv < m->vl ? nv : m->vl;
}

static void s_tp_layer_forward(llama_t *m, int l, const float *x, int B, int T)
{
	const int C = m->cfg.n_embd, t = m->tp_size, H = m->cfg.n_head / t, KV = m->cfg.n_kv_head / t;
	const int F = m->cfg.ffn_dim / t, Cf = H * m->hd, N = B * T, n = N / t, QKV = m->qkv_w;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T, maxn = (maxN + t - 1) / t;
	const float eps = (float)m->cfg.norm_eps;
	acts_t *a = &m->a;
	float *rms1 = LSLICE(a->rms1, l, C), *qkv = SLICE(a->qkv, l, QKV), *atty = SLICE(a->atty, l, Cf);
	float *res2 = LSLICE(a->res2, l, C), *rms2 = LSLICE(a->rms2, l, C), *gu = SLICE(a->gu, l, 2 * F);
	float *res3 = LSLICE(a->res3, l, C);
	const model_range_t r = m->r_layers[l];
	const float *P = s_fetch(m, r);
#define LP(which) s_at(m, P, r.lo, l, (which))
	kernel_rmsnorm_forward(rms1, LSLICE(a->rstd1, l, 1), x, LP(LLAMA_T_ATTN_NORM), n, C, eps);
	tp_allgather(&m->tp, rms1, a->full, (size_t)n * C);
	s_gemm(m, N, QKV, C, a->full, 0, false, LP(LLAMA_T_Q), true, qkv, 0, false);
	kernel_rope_forward(qkv, (size_t)QKV, H + KV, m->hd, a->rope_cos, a->rope_sin, B, T);
	kernel_gqa_attention_forward(atty, SLICE(a->att, l, (size_t)H * m->max_T), qkv, a->att_scratch,
				     B, T, H, KV, m->hd);
	s_gemm(m, N, C, Cf, atty, 0, false, LP(LLAMA_T_O), true, a->dsmall, 0, false);
	tp_rs_residual(&m->tp, res2, a->dsmall, x, NULL, n, C);
	kernel_rmsnorm_forward(rms2, LSLICE(a->rstd2, l, 1), res2, LP(LLAMA_T_MLP_NORM), n, C, eps);
	tp_allgather(&m->tp, rms2, a->full, (size_t)n * C);
	s_gemm(m, N, 2 * F, C, a->full, 0, false, LP(LLAMA_T_GATE), true, gu, 0, false);
	kernel_swiglu_forward(a->act, gu, N, F);
	s_gemm(m, N, C, F, a->act, 0, false, LP(LLAMA_T_DOWN), true, a->dsmall, 0, false);
	tp_rs_residual(&m->tp, res3, a->dsmall, res2, NULL, n, C);
#undef LP
	s_release(m, P);
}

/* Block k of the local rows of the matrix at off, and how many of its rows
 * are real (not padding): [*c0, *c0 + *nvalid) */
static model_range_t s_block(const llama_t *m, size_t off, int k, int nv, int *c0, int *nvalid)
{
	int c1;
	model_range_t r = s_chunk(m, off, k, c0, &c1);
	c1 = c1 < nv ? c1 : nv;
	*nvalid = c1 > *c0 ? c1 - *c0 : 0;
	return r;
}

/* Streamed: the replicated norms' gradients in range r (at g) summed over
 * the group before the range is handed out; dense: at the end. */
static void s_rep_range(llama_t *m, float *g, model_range_t r)
{
	if (m->w.mode != MODEL_DENSE)
		tp_rep_range(&m->tp, m->tensors, m->n_tensors, r, g);
}

static float s_tp_forward(llama_t *m, const int32_t *inputs, const int32_t *targets, int B, int T)
{
	const int L = m->cfg.n_layer, C = m->cfg.n_embd, t = m->tp_size, N = B * T, n = N / t;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T, maxn = (maxN + t - 1) / t;
	acts_t *a = &m->a;
	int v0, nv = s_tp_vocab(m, &v0), c0, cn;
	s_seq_start(m, m->seq_fwd, m->n_seq_fwd);
	memset(a->dsmall, 0, (size_t)N * C * sizeof(float));
	for (int k = 0; k < m->n_chunks; k++) {
		const float *w = s_fetch(m, s_block(m, 0, k, nv, &c0, &cn));
		if (cn > 0)
			kernel_embed_tokens(a->dsmall, inputs, w, v0 + c0, v0 + c0 + cn, N, C);
		s_release(m, w);
	}
	tp_reduce_scatter(&m->tp, a->dsmall, a->encoded, (size_t)n * C);
	const float *x = a->encoded;
	for (int l = 0; l < L; l++) {
		s_tp_layer_forward(m, l, x, B, T);
		x = LSLICE(a->res3, l, C);
	}
	const float *nw = s_fetch(m, m->r_norm);
	kernel_rmsnorm_forward(a->rmsf, a->rstdf, x, nw, n, C, (float)m->cfg.norm_eps);
	s_release(m, nw);
	tp_allgather(&m->tp, a->rmsf, a->full, (size_t)n * C);
	for (int k = 0; k < m->n_chunks; k++) {
		const float *w = s_fetch(m, s_block(m, m->head_off, k, nv, &c0, &cn));
		if (cn > 0)
			s_gemm(m, N, cn, C, a->full, 0, false, w, true, a->logits + c0, m->vl, false);
		s_release(m, w);
	}
	if (!targets)
		return 0.0f;
	memcpy(a->targets, targets, (size_t)N * sizeof(int32_t));
	m->have_targets = true;
	return tp_crossentropy_forward(&m->tp, a->losses, a->lse, a->logits, (size_t)m->vl, targets,
				       N, nv, v0, a->ce_scratch);
}

/* One block's backward with its parameters P and gradients G (range r):
 * a->dres (n rows) holds d res3 in, d x out. */
static void s_tp_layer_backward(llama_t *m, int l, const float *x, const float *P, float *G,
                                model_range_t r)
{
	const int C = m->cfg.n_embd, t = m->tp_size, H = m->cfg.n_head / t, KV = m->cfg.n_kv_head / t;
	const int F = m->cfg.ffn_dim / t, Cf = H * m->hd, B = m->B, T = m->T, N = B * T, n = N / t;
	const int QKV = m->qkv_w;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T, maxn = (maxN + t - 1) / t;
	acts_t *a = &m->a;
	float *rms1 = LSLICE(a->rms1, l, C), *qkv = SLICE(a->qkv, l, QKV), *atty = SLICE(a->atty, l, Cf);
	float *res2 = LSLICE(a->res2, l, C), *rms2 = LSLICE(a->rms2, l, C), *gu = SLICE(a->gu, l, 2 * F);
#define LP(which) s_at(m, P, r.lo, l, (which))
#define LG(which) s_at(m, G, r.lo, l, (which))
	/* MLP: d res3 gathered; down_proj row-parallel, gate/up column-parallel */
	tp_allgather(&m->tp, a->dres, a->full, (size_t)n * C);
	kernel_swiglu_forward(a->act, gu, N, F);
	s_gemm(m, C, F, N, a->full, 0, true, a->act, false, LG(LLAMA_T_DOWN), 0, true);
	s_gemm(m, N, F, C, a->full, 0, false, LP(LLAMA_T_DOWN), false, a->act, 0, false);
	kernel_swiglu_backward(a->dbig, a->act, gu, N, F);
	tp_allgather(&m->tp, rms2, a->full, (size_t)n * C);
	s_gemm(m, 2 * F, C, N, a->dbig, 0, true, a->full, false, LG(LLAMA_T_GATE), 0, true);
	s_gemm(m, N, C, 2 * F, a->dbig, 0, false, LP(LLAMA_T_GATE), false, a->dsmall, 0, false);
	tp_reduce_scatter(&m->tp, a->dsmall, a->dloc, (size_t)n * C);
	kernel_rmsnorm_backward(a->dres, LG(LLAMA_T_MLP_NORM), a->dloc, res2, LSLICE(a->rstd2, l, 1),
				LP(LLAMA_T_MLP_NORM), n, C);
	/* attention: d res2 gathered */
	tp_allgather(&m->tp, a->dres, a->full, (size_t)n * C);
	s_gemm(m, C, Cf, N, a->full, 0, true, atty, false, LG(LLAMA_T_O), 0, true);
	s_gemm(m, N, Cf, C, a->full, 0, false, LP(LLAMA_T_O), false, a->dsmall, 0, false);
	kernel_gqa_attention_backward(a->dbig, a->dsmall, qkv, SLICE(a->att, l, (size_t)H * m->max_T),
				      a->att_scratch, B, T, H, KV, m->hd);
	kernel_rope_backward(a->dbig, (size_t)QKV, H + KV, m->hd, a->rope_cos, a->rope_sin, B, T);
	tp_allgather(&m->tp, rms1, a->full, (size_t)n * C);
	s_gemm(m, QKV, C, N, a->dbig, 0, true, a->full, false, LG(LLAMA_T_Q), 0, true);
	s_gemm(m, N, C, QKV, a->dbig, 0, false, LP(LLAMA_T_Q), false, a->dsmall, 0, false);
	tp_reduce_scatter(&m->tp, a->dsmall, a->dloc, (size_t)n * C);
	kernel_rmsnorm_backward(a->dres, LG(LLAMA_T_ATTN_NORM), a->dloc, x, LSLICE(a->rstd1, l, 1),
				LP(LLAMA_T_ATTN_NORM), n, C);
#undef LP
#undef LG
}

static void s_tp_backward(llama_t *m, float loss_scale)
{
	const int L = m->cfg.n_layer, C = m->cfg.n_embd, t = m->tp_size, N = m->B * m->T, n = N / t;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T, maxn = (maxN + t - 1) / t;
	acts_t *a = &m->a;
	int v0, nv = s_tp_vocab(m, &v0), c0, cn;
	s_seq_start(m, m->seq_bwd, m->n_seq_bwd);
	if (m->w.mode == MODEL_DENSE)
		tp_rep_begin(&m->tp, m->tensors, m->n_tensors, m->w.grads);
	tp_crossentropy_backward(a->logits, (size_t)m->vl, a->lse, a->targets, N, nv, v0,
				 loss_scale / (float)N);
	tp_allgather(&m->tp, a->rmsf, a->full, (size_t)n * C);
	bool any = false;
	for (int k = 0; k < m->n_chunks; k++) {
		model_range_t r = s_block(m, m->head_off, k, nv, &c0, &cn);
		const float *w = s_fetch(m, r);
		float *g = s_grad_begin(m, r);
		if (cn > 0) {
			s_gemm(m, cn, C, N, a->logits + c0, m->vl, true, a->full, false, g, 0, true);
			s_gemm(m, N, C, cn, a->logits + c0, m->vl, false, w, false, a->dsmall, 0, any);
			any = true;
		}
		s_grad_end(m, g, r);
		s_release(m, w);
	}
	if (!any)
		memset(a->dsmall, 0, (size_t)N * C * sizeof(float));
	tp_reduce_scatter(&m->tp, a->dsmall, a->dloc, (size_t)n * C);
	const float *xf = L > 0 ? LSLICE(a->res3, L - 1, C) : a->encoded;
	const float *P = s_fetch(m, m->r_norm);
	float *G = s_grad_begin(m, m->r_norm);
	memset(a->dres, 0, (size_t)n * C * sizeof(float));
	kernel_rmsnorm_backward(a->dres, G, a->dloc, xf, a->rstdf, P, n, C);
	s_rep_range(m, G, m->r_norm);
	s_grad_end(m, G, m->r_norm);
	s_release(m, P);
	for (int l = L - 1; l >= 0; l--) {
		const model_range_t r = m->r_layers[l];
		P = s_fetch(m, r);
		G = s_grad_begin(m, r);
		s_tp_layer_backward(m, l, l == 0 ? a->encoded : LSLICE(a->res3, l - 1, C), P, G, r);
		s_rep_range(m, G, r);
		s_grad_end(m, G, r);
		s_release(m, P);
	}
	tp_allgather(&m->tp, a->dres, a->full, (size_t)n * C);
	for (int k = 0; k < m->n_chunks; k++) {
		model_range_t r = s_block(m, 0, k, nv, &c0, &cn);
		float *g = s_grad_begin(m, r);
		if (cn > 0)
			kernel_embed_tokens_backward(g, v0 + c0, v0 + c0 + cn, a->full, a->inputs, N, C);
		s_grad_end(m, g, r);
	}
	if (m->w.mode == MODEL_DENSE)
		tp_rep_end(&m->tp, m->tensors, m->n_tensors, m->w.grads);
}

float llama_forward(llama_t *m, const int32_t *inputs, const int32_t *targets, int B, int T)
{
	s_check_batch(m, inputs, targets, B, T);
	const int L = m->cfg.n_layer, C = m->cfg.n_embd, V = m->cfg.vocab_size, N = B * T;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T;
	acts_t *a = &m->a;
	kernel_flush_denormals();
	memcpy(a->inputs, inputs, (size_t)N * sizeof(int32_t));
	m->B = B;
	m->T = T;
	m->have_targets = false;
	if (m->w.params16 && m->w.mode != MODEL_STREAM_ALL)
		kernel_to_bf16(m->w.params16, m->w.params, m->w.n_params);
	if (m->tp_size > 1) {
		if (T % m->tp_size != 0)
			modelcpu_fatal("llama_forward: T is not divisible by the tensor-parallel ranks");
		return s_tp_forward(m, inputs, targets, B, T);
	}
	s_seq_start(m, m->seq_fwd, m->n_seq_fwd);

	memset(a->encoded, 0, (size_t)N * C * sizeof(float));
	for (int k = 0; k < m->n_chunks; k++) {
		int v0, v1;
		const float *w = s_fetch(m, s_chunk(m, 0, k, &v0, &v1));
		kernel_embed_tokens(a->encoded, inputs, w, v0, v1, N, C);
		s_release(m, w);
	}
	const float *x = a->encoded;
	for (int l = 0; l < L; l++) {
		s_layer_forward(m, l, x, B, T);
		x = SLICE(a->res3, l, C);
	}
	const float *nw = s_fetch(m, m->r_norm);
	kernel_rmsnorm_forward(a->rmsf, a->rstdf, x, nw, N, C, (float)m->cfg.norm_eps);
	s_release(m, nw);
	/* logits[:, v0:v1] = rmsf @ head[v0:v1]^T, by blocks of the head's rows */
	for (int k = 0; k < m->n_chunks; k++) {
		int v0, v1;
		const float *w = s_fetch(m, s_chunk(m, m->head_off, k, &v0, &v1));
		s_gemm(m, N, v1 - v0, C, a->rmsf, 0, false, w, true, a->logits + v0, V, false);
		s_release(m, w);
	}
	if (!targets)
		return 0.0f;
	memcpy(a->targets, targets, (size_t)N * sizeof(int32_t));
	m->have_targets = true;
	return kernel_crossentropy_forward(a->losses, a->lse, a->logits, targets, N, V);
}

/* One block's backward: a->dres holds d res3 in, d x out; x the block's input. */
static void s_layer_backward(llama_t *m, int l, const float *x)
{
	const int C = m->cfg.n_embd, H = m->cfg.n_head, KV = m->cfg.n_kv_head, F = m->cfg.ffn_dim;
	const int B = m->B, T = m->T, N = B * T, QKV = m->qkv_w;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T;
	acts_t *a = &m->a;
	float *rms1 = SLICE(a->rms1, l, C), *qkv = SLICE(a->qkv, l, QKV), *atty = SLICE(a->atty, l, C);
	float *res2 = SLICE(a->res2, l, C), *rms2 = SLICE(a->rms2, l, C), *gu = SLICE(a->gu, l, 2 * F);
	const model_range_t r = m->r_layers[l];
	const float *P = s_fetch(m, r);
	float *G = s_grad_begin(m, r);
#define LP(which) s_at(m, P, r.lo, l, (which))
#define LG(which) s_at(m, G, r.lo, l, (which))
	/* MLP: res3 = res2 + down(silu(gate) * up); dres holds d res3 */
	kernel_swiglu_forward(a->act, gu, N, F);
	s_gemm(m, C, F, N, a->dres, 0, true, a->act, false, LG(LLAMA_T_DOWN), 0, true);
	s_gemm(m, N, F, C, a->dres, 0, false, LP(LLAMA_T_DOWN), false, a->act, 0, false);
	kernel_swiglu_backward(a->dbig, a->act, gu, N, F);
	s_gemm(m, 2 * F, C, N, a->dbig, 0, true, rms2, false, LG(LLAMA_T_GATE), 0, true);
	s_gemm(m, N, C, 2 * F, a->dbig, 0, false, LP(LLAMA_T_GATE), false, a->dsmall, 0, false);
	kernel_rmsnorm_backward(a->dres, LG(LLAMA_T_MLP_NORM), a->dsmall, res2, SLICE(a->rstd2, l, 1),
				LP(LLAMA_T_MLP_NORM), N, C);
	/* attention: res2 = x + o_proj(attn(rope(q), rope(k), v)); dres holds d res2 */
	s_gemm(m, C, C, N, a->dres, 0, true, atty, false, LG(LLAMA_T_O), 0, true);
	s_gemm(m, N, C, C, a->dres, 0, false, LP(LLAMA_T_O), false, a->dsmall, 0, false);
	kernel_gqa_attention_backward(a->dbig, a->dsmall, qkv, SLICE(a->att, l, (size_t)H * m->max_T),
				      a->att_scratch, B, T, H, KV, m->hd);
	kernel_rope_backward(a->dbig, (size_t)QKV, H + KV, m->hd, a->rope_cos, a->rope_sin, B, T);
	s_gemm(m, QKV, C, N, a->dbig, 0, true, rms1, false, LG(LLAMA_T_Q), 0, true);
	s_gemm(m, N, C, QKV, a->dbig, 0, false, LP(LLAMA_T_Q), false, a->dsmall, 0, false);
	kernel_rmsnorm_backward(a->dres, LG(LLAMA_T_ATTN_NORM), a->dsmall, x, SLICE(a->rstd1, l, 1),
				LP(LLAMA_T_ATTN_NORM), N, C);
#undef LP
#undef LG
	s_grad_end(m, G, r);
	s_release(m, P);
}

void llama_backward(llama_t *m, float loss_scale)
{
	if (!m->have_targets)
		modelcpu_fatal("llama_backward without a forward with targets");
	m->have_targets = false; /* the logits become their gradient */
	kernel_flush_denormals();
	const int L = m->cfg.n_layer, C = m->cfg.n_embd, V = m->cfg.vocab_size;
	const int N = m->B * m->T;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T;
	acts_t *a = &m->a;
	if (m->tp_size > 1) {
		s_tp_backward(m, loss_scale);
		return;
	}
	s_seq_start(m, m->seq_bwd, m->n_seq_bwd);

	kernel_crossentropy_backward_inplace(a->logits, a->lse, a->targets, N, V, loss_scale / (float)N);
	/* By blocks of the head's rows: dhead[v0:v1] (+)= dlogits[:, v0:v1]^T @ rmsf,
	 * drmsf (+)= dlogits[:, v0:v1] @ head[v0:v1] */
	for (int k = 0; k < m->n_chunks; k++) {
		int v0, v1;
		model_range_t r = s_chunk(m, m->head_off, k, &v0, &v1);
		const float *w = s_fetch(m, r);
		float *g = s_grad_begin(m, r);
		s_gemm(m, v1 - v0, C, N, a->logits + v0, V, true, a->rmsf, false, g, 0, true);
		s_gemm(m, N, C, v1 - v0, a->logits + v0, V, false, w, false, a->dsmall, 0, k > 0);
		s_grad_end(m, g, r);
		s_release(m, w);
	}
	const float *xf = L > 0 ? SLICE(a->res3, L - 1, C) : a->encoded;
	const float *P = s_fetch(m, m->r_norm);
	float *G = s_grad_begin(m, m->r_norm);
	memset(a->dres, 0, (size_t)N * C * sizeof(float));
	kernel_rmsnorm_backward(a->dres, G, a->dsmall, xf, a->rstdf, P, N, C);
	s_grad_end(m, G, m->r_norm);
	s_release(m, P);
	for (int l = L - 1; l >= 0; l--)
		s_layer_backward(m, l, l == 0 ? a->encoded : SLICE(a->res3, l - 1, C));
	for (int k = 0; k < m->n_chunks; k++) {
		int v0, v1;
		model_range_t r = s_chunk(m, 0, k, &v0, &v1);
		float *g = s_grad_begin(m, r);
		kernel_embed_tokens_backward(g, v0, v1, a->dres, a->inputs, N, C);
		s_grad_end(m, g, r);
	}
}
