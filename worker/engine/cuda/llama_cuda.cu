/*
 * llama_cuda: Llama on one GPU (see llama_cuda.h): the activation arena,
 * forward and backward as cuBLASLt GEMMs (cuda_gemm.h), the fused
 * attention with grouped KV heads (cuda_flash_*), Llama's kernels
 * (cuda_llama_kernels.h) and GPT-2's shared ones (embedding, cross-entropy,
 * AdamW, sums: cuda_kernels.h), in the order of the CPU row (llama.c).
 *
 * Weights are HF's (out, in): y = x @ W^T is a GEMM with B transposed,
 * dx = dy @ W one without, dW += dy^T @ x one with A transposed. Adjacent
 * tensors act as one: q_proj, k_proj, v_proj are one (H + 2 KV) hd x C
 * matrix (one QKV GEMM, whose fp32 output the RoPE kernel rotates into the
 * bf16 qkv16 the attention reads), gate_proj and up_proj one 2F x C matrix
 * (one GEMM into gu16, SwiGLU's input).
 *
 * Arena (per layer with the max sizes; N = max_B max_T, D = (H + 2 KV) hd):
 *   encoded (N, C) f32; per layer: rms1 (N, C) bf16, rstd1 (N), qkv16
 *   (N, D) bf16 (rotated), lse (N H), atty (N, C) bf16, res_attn (N, C)
 *   f32, rms2 (N, C) bf16, rstd2 (N), gu16 (N, 2F) bf16, hsw (N, F) bf16,
 *   res_mlp (N, C) f32; rmsf (N, C) bf16, rstdf (N); logits, dlogits
 *   (N, V) bf16; losses (N), loss; scratch: qkv32 (N, D) f32 (the QKV
 *   GEMM's output in forward, dqkv in backward), dqkv16 (N, D), dres
 *   (N, C) f32 + bf16, dsmall (N, C) f32 + bf16, dgu16 (N, 2F), dh16
 *   (N, F), column-sum partials, the sum of squares, attention scratch,
 *   token ids and the embedding-gradient index; the RoPE tables (max_T,
 *   hd/2) x 2.
 * The residual additions are GEMMs that read the stream they leave as
 * their C_in (gpt2_cuda.cu's residual GEMM), so x is never copied.
 *
 * Streaming (llama_cuda.h): every kernel gets its parameters from lc_pget
 * and its gradient destination from lc_gbegin, which are the model's own
 * buffers or a range fetched from the caller and a zeroed bucket handed
 * back by lc_pput / lc_gend; a layer's tensors are addressed from the
 * layer's first float, so one code path serves all three modes. The
 * embedding and the LM head run per block of rows (one block of all V
 * rows when nothing is streamed): the embedding adds each block's tokens,
 * the LM head's GEMMs read and write the block's columns of the logits
 * and dlogits in place (rows V apart).
 */
#include "llama_cuda.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_attention.h"
#include "cuda_check.h"
#include "cuda_gemm.h"
#include "cuda_kernels.h"
#include "cuda_llama_kernels.h"
#include "llama_layout.h"
#include "llama_cuda_int.h"

extern "C" {
#include "tp.h"
}

static const double GIB = 1073741824.0;

static void s_misuse(const char *what)
{
	fprintf(stderr, "ringworker: fatal: %s\n", what);
	exit(CUDA_EXIT_MISUSE);
}

static void *s_carve(char *base, size_t *off, size_t n, size_t size)
{
	void *p = base ? base + *off : NULL;
	*off += (n * size + 255) / 256 * 256;
	return p;
}

/* the arena for TP rank parts of t ranks (1: none): the residual stream
 * and norms at n = N/t rows, the rest N rows of this rank's heads,
 * features and vocabulary rows; t = 1 is the layout without TP */
static size_t s_layout(acts_t *a, char *base, const model_config_t *cfg, int max_B, int max_T, int t)
{
	const size_t L = (size_t)cfg->n_layer, C = (size_t)cfg->n_embd, V = ((size_t)cfg->vocab_size + t - 1) / t;
	const size_t H = (size_t)(cfg->n_head / t), hd = C / (size_t)cfg->n_head, Cf = H * hd;
	const size_t D = Cf + 2 * (size_t)(cfg->n_kv_head / t) * hd;
	const size_t Fd = (size_t)(cfg->ffn_dim / t), N = (size_t)max_B * (size_t)max_T, n = N / t;
	const size_t f = sizeof(float), h = sizeof(uint16_t);
	size_t off = 0;
	a->encoded = (float *)s_carve(base, &off, n * C, f);
	a->rms1 = (uint16_t *)s_carve(base, &off, L * n * C, h);
	a->rstd1 = (float *)s_carve(base, &off, L * n, f);
	a->qkv16 = (uint16_t *)s_carve(base, &off, L * N * D, h);
	a->lse = (float *)s_carve(base, &off, L * N * H, f);
	a->atty = (uint16_t *)s_carve(base, &off, L * N * Cf, h);
	a->res_attn = (float *)s_carve(base, &off, L * n * C, f);
	a->rms2 = (uint16_t *)s_carve(base, &off, L * n * C, h);
	a->rstd2 = (float *)s_carve(base, &off, L * n, f);
	a->gu16 = (uint16_t *)s_carve(base, &off, L * N * 2 * Fd, h);
	a->hsw = (uint16_t *)s_carve(base, &off, L * N * Fd, h);
	a->res_mlp = (float *)s_carve(base, &off, L * n * C, f);
	a->rmsf = (uint16_t *)s_carve(base, &off, n * C, h);
	a->rstdf = (float *)s_carve(base, &off, n, f);
	a->logits = (uint16_t *)s_carve(base, &off, N * V, h);
	a->dlogits = (uint16_t *)s_carve(base, &off, N * V, h);
	a->losses = (float *)s_carve(base, &off, N, f);
	a->loss = (float *)s_carve(base, &off, 1, f);
	a->qkv32 = (float *)s_carve(base, &off, N * D, f);
	a->dqkv16 = (uint16_t *)s_carve(base, &off, N * D, h);
	a->dres = (float *)s_carve(base, &off, n * C, f);
	a->dres16 = (uint16_t *)s_carve(base, &off, n * C, h);
	a->dsmall = (float *)s_carve(base, &off, N * C, f);
	a->dsmall16 = (uint16_t *)s_carve(base, &off, N * C, h);
	a->dgu16 = (uint16_t *)s_carve(base, &off, N * 2 * Fd, h);
	a->dh16 = (uint16_t *)s_carve(base, &off, N * Fd, h);
	a->colsum = (float *)s_carve(base, &off, cuda_colsum_scratch_floats((int)N, (int)C), f);
	a->sumsq = (double *)s_carve(base, &off, 1, sizeof(double));
	a->sumsq_scratch = (double *)s_carve(base, &off, cuda_sum_squares_scratch(), sizeof(double));
	a->att_scratch = s_carve(base, &off, cuda_attention_scratch_bytes(max_B, max_T, (int)Cf, (int)H, true), 1);
	a->ids = (int32_t *)s_carve(base, &off, 5 * N + 1, sizeof(int32_t));
	a->rope_cos = (float *)s_carve(base, &off, (size_t)max_T * (hd / 2), f);
	a->rope_sin = (float *)s_carve(base, &off, (size_t)max_T * (hd / 2), f);
	a->full16 = NULL;
	a->dloc = a->ce_mx = a->ce_all = a->ce_red = a->ce_lse = NULL;
	if (t > 1) {
		a->full16 = (uint16_t *)s_carve(base, &off, N * C, h);
		a->dloc = (float *)s_carve(base, &off, n * C, f);
		a->ce_mx = (float *)s_carve(base, &off, N, f);
		a->ce_all = (float *)s_carve(base, &off, (size_t)t * N, f);
		a->ce_red = (float *)s_carve(base, &off, 2 * N, f);
		a->ce_lse = (float *)s_carve(base, &off, N, f);
	}
	return off;
}

/* a bound in double on the arena, before s_layout's size_t arithmetic */
static double s_arena_bound(const model_config_t *c, double B, double T)
{
	double L = c->n_layer, C = c->n_embd, V = c->vocab_size, H = c->n_head, Fd = c->ffn_dim;
	return B * T * ((L + 2) * (64 * C + 12 * Fd + 8 * H + 64) + 6 * V) + 1e9;
}

/* the decay segments and the per-layer offsets, from the table */
static bool s_build_table(llama_cuda_t *m)
{
	m->segs = (segment_t *)calloc((size_t)m->n_tensors, sizeof *m->segs);
	if (!m->segs)
		return false;
	for (int i = 0; i < m->n_tensors; i++) {
		const model_tensor_t *t = &m->tensors[i];
		if (m->n_segs > 0 && m->segs[m->n_segs - 1].decay == t->decay &&
		    m->segs[m->n_segs - 1].hi == t->offset)
			m->segs[m->n_segs - 1].hi += t->numel;
		else
			m->segs[m->n_segs++] = (segment_t){t->offset, t->offset + t->numel, t->decay};
	}
	const model_config_t *c = &m->cfg;
	m->layer0 = m->tensors[1].offset;
	m->layer_floats = 0; /* this TP rank's part: from the table */
	for (int i = 0; i < LLAMA_LAYER_TENSORS; i++)
		m->layer_floats += m->tensors[1 + i].numel;
	for (int i = 0; i < LLAMA_LAYER_TENSORS; i++)
		m->rel[i] = m->tensors[1 + i].offset - m->layer0;
	m->off_norm = m->layer0 + (size_t)c->n_layer * m->layer_floats;
	m->off_head = c->tie_embeddings ? 0 : m->off_norm + (size_t)c->n_embd;
	const size_t Cf = (size_t)(c->n_head / m->tp_size) * (size_t)m->hd;
	return m->rel[LLAMA_T_K] == m->rel[LLAMA_T_Q] + Cf * (size_t)c->n_embd &&
	       m->rel[LLAMA_T_UP] == m->rel[LLAMA_T_GATE] + (size_t)m->Fd * (size_t)c->n_embd;
}

/* ---- create and free ---- */

static int s_check(const model_config_t *cfg, int max_B, int max_T, char *err, size_t errlen)
{
	if (llama_config_check(cfg, max_B, max_T, err, errlen) < 0)
		return -EINVAL;
	if (!cuda_flash_supported(cfg->n_embd, cfg->n_head)) {
		snprintf(err, errlen,
			 "model.n_embd / model.n_head (%d / %d = %d) is a head size the GPU's fused "
			 "attention does not have (16, 32 or 64) for arch llama on parallel.device cuda",
			 cfg->n_embd, cfg->n_head, cfg->n_head > 0 ? cfg->n_embd / cfg->n_head : 0);
		return -EINVAL;
	}
	if (s_arena_bound(cfg, max_B, max_T) > 1e17 || (double)max_B * max_T > 2147483647.0 / 8) {
		snprintf(err, errlen,
			 "out of GPU memory: train.batch_size %d x model.seq_len %d tokens is far beyond "
			 "any GPU's memory; lower train.batch_size or model.seq_len",
			 max_B, max_T);
		return -ENOMEM;
	}
	return 0;
}

/* the state buffers: [params], [grads], [m, v] (f32), [params16] */
static int s_alloc_state(llama_cuda_t *m, bool moments, char *err, size_t errlen)
{
	const bool params = m->streaming != MODEL_STREAM_ALL, grads = m->streaming == MODEL_DENSE;
	const size_t n_f32 = m->n_params * ((params ? 1 : 0) + (grads ? 1 : 0) + (moments ? 2 : 0));
	m->state_bytes = n_f32 * sizeof(float) + (params ? (m->n_params * 2 + 255) / 256 * 256 : 256);
	cudaError_t rc = cudaMalloc(&m->state, m->state_bytes);
	if (rc != cudaSuccess) {
		m->state = NULL;
		snprintf(err, errlen,
			 "out of GPU memory: need %.1f GiB for %zu parameters, their gradients and AdamW "
			 "state: %s",
			 (double)m->state_bytes / GIB, m->n_params, cudaGetErrorString(rc));
		return -ENOMEM;
	}
	float *next = (float *)m->state;
	if (params) {
		m->params = next;
		next += m->n_params;
		m->params16 = (uint16_t *)((float *)m->state + n_f32);
	}
	if (grads) {
		m->grads = next;
		next += m->n_params;
	}
	if (moments) {
		m->mom1 = next;
		m->mom2 = next + m->n_params;
	}
	if ((rc = cudaMemset(m->state, 0, m->state_bytes)) != cudaSuccess) {
		snprintf(err, errlen, "CUDA error clearing the parameters: %s", cudaGetErrorString(rc));
		return -EIO;
	}
	if (!params && (rc = cudaMalloc((void **)&m->fetched16, m->max_range * sizeof(uint16_t))) != cudaSuccess) {
		m->fetched16 = NULL;
		snprintf(err, errlen, "out of GPU memory: %.1f MiB for the bf16 copy of a fetched range: %s",
			 (double)m->max_range * 2 / 1048576.0, cudaGetErrorString(rc));
		return -ENOMEM;
	}
	return 0;
}

/* MODEL_STREAM_ALL's fetch order (llama_cuda.h): forward the embed_tokens
 * blocks, layers 0..L-1, model.norm, the LM head's blocks; backward the LM
 * head's blocks, model.norm, layers L-1..0 */
static bool s_build_order(llama_cuda_t *m)
{
	const int L = m->cfg.n_layer, V = m->vl;
	const size_t C = (size_t)m->cfg.n_embd;
	const int blocks = (V + m->rows - 1) / m->rows;
	m->n_fwd = 2 * blocks + L + 1;
	m->n_bwd = blocks + 1 + L;
	m->order = (size_t *)calloc(2 * (size_t)(m->n_fwd + m->n_bwd), sizeof(size_t));
	if (!m->order)
		return false;
	size_t *o = m->order;
#define PUSH(lo, hi) (*o++ = (lo), *o++ = (hi))
#define PUSH_BLOCKS(base)                                                                          \
	for (int v0 = 0; v0 < V; v0 += m->rows)                                                     \
		PUSH((base) + (size_t)v0 * C, (base) + (size_t)(m->rows < V - v0 ? v0 + m->rows : V) * C)
#define PUSH_LAYER(l) PUSH(m->layer0 + (size_t)(l) * m->layer_floats, m->layer0 + (size_t)((l) + 1) * m->layer_floats)
	PUSH_BLOCKS(0);
	for (int l = 0; l < L; l++)
		PUSH_LAYER(l);
	PUSH(m->off_norm, m->off_norm + C);
	PUSH_BLOCKS(m->off_head);
	PUSH_BLOCKS(m->off_head);
	PUSH(m->off_norm, m->off_norm + C);
	for (int l = L - 1; l >= 0; l--)
		PUSH_LAYER(l);
#undef PUSH_LAYER
#undef PUSH_BLOCKS
#undef PUSH
	return true;
}

/* the arena, the RoPE tables, pinned ids and the events */
static int s_alloc_rest(llama_cuda_t *m, char *err, size_t errlen)
{
	const model_config_t *cfg = &m->cfg;
	const size_t N = (size_t)m->max_B * (size_t)m->max_T, half = (size_t)m->hd / 2;
	m->arena_bytes = s_layout(&m->a, NULL, cfg, m->max_B, m->max_T, m->tp_size);
	cudaError_t rc = cudaMalloc(&m->arena, m->arena_bytes);
	if (rc != cudaSuccess) {
		m->arena = NULL;
		snprintf(err, errlen,
			 "out of GPU memory: need %.1f GiB for activations (train.batch_size %d x "
			 "model.seq_len %d tokens): %s; lower train.batch_size or model.seq_len",
			 (double)m->arena_bytes / GIB, m->max_B, m->max_T, cudaGetErrorString(rc));
		return -ENOMEM;
	}
	s_layout(&m->a, (char *)m->arena, cfg, m->max_B, m->max_T, m->tp_size);
	cuda_attention_scratch_carve(&m->att_s, m->a.att_scratch, m->max_B, m->max_T,
				     cfg->n_embd / m->tp_size, cfg->n_head / m->tp_size, true);
	float *tab = (float *)malloc(2 * (size_t)m->max_T * half * sizeof(float));
	if (!tab) {
		snprintf(err, errlen, "out of host memory");
		return -ENOMEM;
	}
	llama_rope_tables(cfg, m->max_T, tab, tab + (size_t)m->max_T * half);
	rc = cudaMemcpy(m->a.rope_cos, tab, (size_t)m->max_T * half * sizeof(float), cudaMemcpyHostToDevice);
	if (rc == cudaSuccess)
		rc = cudaMemcpy(m->a.rope_sin, tab + (size_t)m->max_T * half,
				(size_t)m->max_T * half * sizeof(float), cudaMemcpyHostToDevice);
	free(tab);
	if (rc != cudaSuccess) {
		snprintf(err, errlen, "CUDA error uploading the RoPE tables: %s", cudaGetErrorString(rc));
		return -EIO;
	}
	if ((rc = cudaMallocHost(&m->host_ids, (5 * N + 1) * sizeof(int32_t))) != cudaSuccess) {
		m->host_ids = NULL;
		snprintf(err, errlen, "out of pinned host memory for %zu token ids: %s", 5 * N + 1,
			 cudaGetErrorString(rc));
		return -ENOMEM;
	}
	m->host_counts = (int32_t *)calloc((size_t)cfg->vocab_size + 1, sizeof(int32_t));
	m->ready = (cudaEvent_t *)calloc((size_t)cfg->n_layer + 2, sizeof *m->ready);
	if (!m->host_counts || !m->ready) {
		snprintf(err, errlen, "out of host memory");
		return -ENOMEM;
	}
	for (int i = 0; i < cfg->n_layer + 2; i++)
		if ((rc = cudaEventCreateWithFlags(&m->ready[i], cudaEventDisableTiming)) != cudaSuccess) {
			m->ready[i] = NULL;
			snprintf(err, errlen, "cannot create CUDA events: %s", cudaGetErrorString(rc));
			return -EIO;
		}
	return 0;
}

extern "C" int llama_cuda_new(const model_config_t *cfg, int max_B, int max_T, bool moments,
                              llama_cuda_t **ret_model, char *err, size_t errlen)
{
	return llama_cuda_new_streamed(cfg, max_B, max_T, moments, MODEL_DENSE, NULL, ret_model, err, errlen);
}

extern "C" int llama_cuda_new_streamed(const model_config_t *cfg, int max_B, int max_T, bool moments,
                                       model_streaming_t streaming, const model_stream_t *stream,
                                       llama_cuda_t **ret_model, char *err, size_t errlen)
{
	return llama_cuda_new_tp(cfg, max_B, max_T, moments, streaming, stream, NULL, ret_model, err, errlen);
}

/* llama.c's rules for a TP group: heads, KV heads, the FFN width and the
 * sequence divide by t */
static int s_tp_check(const model_config_t *cfg, int max_T, const model_tp_t *tp, char *err, size_t errlen)
{
	static const char *const names[] = {"model.n_head", "model.n_kv_head", "model.ffn_dim",
					    "the sequence length (sequence parallelism)"};
	int dims[] = {cfg->n_head, cfg->n_kv_head, cfg->ffn_dim, max_T};
	return tp_check(tp, names, dims, tp && tp->size > 1 ? 4 : 0, err, errlen) < 0 ? -EINVAL : 0;
}

extern "C" int llama_cuda_new_tp(const model_config_t *cfg, int max_B, int max_T, bool moments,
                                 model_streaming_t streaming, const model_stream_t *stream,
                                 const model_tp_t *tp, llama_cuda_t **ret_model, char *err, size_t errlen)
{
	if (streaming != MODEL_DENSE &&
	    (!stream || !stream->grad_begin || !stream->grad_end ||
	     (streaming == MODEL_STREAM_ALL && (!stream->fetch || !stream->release)))) {
		snprintf(err, errlen, "internal error: a streamed model needs its stream functions");
		return -EINVAL;
	}
	int code = s_check(cfg, max_B, max_T, err, errlen);
	if (code < 0 || (code = s_tp_check(cfg, max_T, tp, err, errlen)) < 0)
		return code;
	int n_dev = 0;
	cudaError_t rc = cudaGetDeviceCount(&n_dev);
	if (rc != cudaSuccess || n_dev == 0) {
		(void)cudaGetLastError();
		snprintf(err, errlen, "no CUDA GPU: %s",
			 rc != cudaSuccess ? cudaGetErrorString(rc) : "no device found");
		return -ENODEV;
	}
	llama_cuda_t *m = (llama_cuda_t *)calloc(1, sizeof *m);
	if (!m) {
		snprintf(err, errlen, "out of host memory");
		return -ENOMEM;
	}
	m->cfg = *cfg;
	m->max_B = max_B;
	m->max_T = max_T;
	m->tp_size = tp && tp->size > 1 ? tp->size : 1;
	m->hd = cfg->n_embd / cfg->n_head;
	m->D = (cfg->n_head + 2 * cfg->n_kv_head) / m->tp_size * m->hd;
	m->Fd = cfg->ffn_dim / m->tp_size;
	m->vl = (cfg->vocab_size + m->tp_size - 1) / m->tp_size;
	m->streaming = streaming;
	if (stream)
		m->st = *stream;
	m->rows = streaming == MODEL_DENSE ? m->vl : llama_stream_rows(cfg);
	code = -ENOMEM;
	if (llama_layout_tp(cfg, m->tp_size, &m->tensors, &m->n_tensors, &m->n_params, &m->max_range) < 0 ||
	    !s_build_table(m) || (streaming == MODEL_STREAM_ALL && !s_build_order(m))) {
		snprintf(err, errlen, "out of host memory");
		goto fail;
	}
	{
		acts_t probe;
		double act = (double)s_layout(&probe, NULL, cfg, max_B, max_T, m->tp_size) + (32 << 20);
		const double per = (streaming != MODEL_STREAM_ALL ? 6.0 : 0.0) +
				   (streaming == MODEL_DENSE ? 4.0 : 0.0) + (moments ? 8.0 : 0.0);
		double state = (double)m->n_params * per;
		size_t free_b = 0, total_b = 0;
		if ((rc = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess) {
			snprintf(err, errlen, "no CUDA GPU: %s", cudaGetErrorString(rc));
			code = -ENODEV;
			goto fail_cuda;
		}
		if (state + act > (double)free_b) {
			snprintf(err, errlen,
				 "out of GPU memory: need %.1f GiB for activations (train.batch_size %d x "
				 "model.seq_len %d tokens) and %.1f GiB for parameters, gradients and AdamW "
				 "state, but %.1f GiB is free; lower train.batch_size or model.seq_len",
				 act / GIB, max_B, max_T, state / GIB, (double)free_b / GIB);
			goto fail;
		}
	}
	if ((rc = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking)) != cudaSuccess ||
	    (rc = cudaEventCreateWithFlags(&m->staged, cudaEventDisableTiming)) != cudaSuccess) {
		snprintf(err, errlen, "no CUDA GPU: %s", cudaGetErrorString(rc));
		code = -ENODEV;
		goto fail_cuda;
	}
	m->gemm = cuda_gemm_create(m->stream, err, errlen);
	if (!m->gemm || (code = cuda_tprow_init(&m->tp, tp, m->stream, m->tensors, m->n_tensors, err, errlen)) < 0)
		goto fail;
	if ((code = s_alloc_state(m, moments, err, errlen)) < 0 || (code = s_alloc_rest(m, err, errlen)) < 0)
		goto fail_cuda;
	*ret_model = m;
	return 0;
fail_cuda:
	(void)cudaGetLastError();
fail:
	llama_cuda_free(m);
	return code;
}

extern "C" void llama_cuda_free(llama_cuda_t *m)
{
	if (!m)
		return;
	if (m->stream)
		cudaStreamSynchronize(m->stream);
	cuda_gemm_free(m->gemm);
	cuda_tprow_free(&m->tp);
	if (m->arena)
		cudaFree(m->arena);
	if (m->state)
		cudaFree(m->state);
	if (m->fetched16)
		cudaFree(m->fetched16);
	free(m->order);
	if (m->host_ids)
		cudaFreeHost(m->host_ids);
	if (m->staged)
		cudaEventDestroy(m->staged);
	if (m->ready)
		for (int i = 0; i < m->cfg.n_layer + 2; i++)
			if (m->ready[i])
				cudaEventDestroy(m->ready[i]);
	if (m->stream)
		cudaStreamDestroy(m->stream);
	free(m->ready);
	free(m->host_counts);
	free(m->segs);
	free(m->tensors);
	free(m);
}

/* ---- accessors and host copies ---- */

extern "C" size_t llama_cuda_num_params(const llama_cuda_t *m) { return m->n_params; }
extern "C" size_t llama_cuda_max_range(const llama_cuda_t *m) { return m->max_range; }
extern "C" size_t llama_cuda_state_bytes(const llama_cuda_t *m)
{
	return m->state_bytes + cuda_tprow_bytes(&m->tp);
}
extern "C" size_t llama_cuda_activation_bytes(const llama_cuda_t *m) { return m->arena_bytes; }
extern "C" cudaStream_t llama_cuda_stream(const llama_cuda_t *m) { return m->stream; }
extern "C" float *llama_cuda_params(llama_cuda_t *m) { return m->params; }
extern "C" float *llama_cuda_grads(llama_cuda_t *m) { return m->grads; }

extern "C" const model_tensor_t *llama_cuda_tensors(const llama_cuda_t *m, int *ret_n)
{
	*ret_n = m->n_tensors;
	return m->tensors;
}

extern "C" double llama_cuda_flops_per_token(const llama_cuda_t *m, int T)
{
	if (m->tp_size <= 1)
		return llama_flops_per_token(&m->cfg, m->n_params, T);
	/* llama.c's share of a TP rank: its parameters (less its embedding
	 * block when untied) and 1/t of the attention */
	double n = (double)m->n_params;
	if (!m->cfg.tie_embeddings)
		n -= (double)m->vl * m->cfg.n_embd;
	return 6.0 * n + 12.0 * m->cfg.n_layer * m->cfg.n_embd / m->tp_size * (double)T;
}

extern "C" void llama_cuda_tp_comm(const llama_cuda_t *m, model_tp_comm_t *ret)
{
	*ret = m->tp.vol;
}

extern "C" size_t llama_cuda_tp_bytes(const llama_cuda_t *m)
{
	return cuda_tprow_bytes(&m->tp);
}

void lc_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s)
{
	CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
	CUDA_CHECK(cudaStreamSynchronize(s));
}

extern "C" void llama_cuda_set_params(llama_cuda_t *m, const float *params)
{
	if (!m->params)
		s_misuse("llama_cuda_set_params on a model created without parameters");
	lc_copy(m->params, params, m->n_params * sizeof(float), cudaMemcpyHostToDevice, m->stream);
	llama_cuda_params_written(m);
	CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

extern "C" void llama_cuda_get_params(llama_cuda_t *m, float *ret_params)
{
	if (!m->params)
		s_misuse("llama_cuda_get_params on a model created without parameters");
	lc_copy(ret_params, m->params, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, m->stream);
}

extern "C" void llama_cuda_get_grads(llama_cuda_t *m, float *ret_grads)
{
	if (!m->grads)
		s_misuse("llama_cuda_get_grads on a model created without a gradient buffer");
	lc_copy(ret_grads, m->grads, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, m->stream);
}

extern "C" void llama_cuda_set_moments(llama_cuda_t *m, const float *mom1, const float *mom2)
{
	if (!m->mom1)
		s_misuse("llama_cuda_set_moments on a model created without AdamW moments");
	lc_copy(m->mom1, mom1, m->n_params * sizeof(float), cudaMemcpyHostToDevice, m->stream);
	lc_copy(m->mom2, mom2, m->n_params * sizeof(float), cudaMemcpyHostToDevice, m->stream);
}

extern "C" void llama_cuda_get_moments(llama_cuda_t *m, float *ret_mom1, float *ret_mom2)
{
	if (!m->mom1)
		s_misuse("llama_cuda_get_moments on a model created without AdamW moments");
	lc_copy(ret_mom1, m->mom1, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, m->stream);
	lc_copy(ret_mom2, m->mom2, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, m->stream);
}

extern "C" void llama_cuda_params_written(llama_cuda_t *m)
{
	if (m->params)
		cuda_to_bf16(m->params16, m->params, m->n_params, m->stream);
}

extern "C" void llama_cuda_sync(llama_cuda_t *m)
{
	CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

extern "C" void llama_cuda_get_logits(llama_cuda_t *m, float *ret_logits)
{
	const size_t n = (size_t)m->B * m->T * (size_t)m->vl;
	uint16_t *h16 = (uint16_t *)ret_logits + n; /* the back half, widened from the front */
	lc_copy(h16, m->a.logits, n * sizeof(uint16_t), cudaMemcpyDeviceToHost, m->stream);
	for (size_t i = 0; i < n; i++) {
		uint32_t bits = (uint32_t)h16[i] << 16;
		memcpy(&ret_logits[i], &bits, sizeof bits);
	}
}

extern "C" void llama_cuda_set_grads_ready(llama_cuda_t *m, model_grads_ready_fn fn, void *ctx)
{
	if (fn && !m->grads)
		s_misuse("llama_cuda_set_grads_ready on a model without a gradient buffer");
	m->ready_fn = fn;
	m->ready_ctx = ctx;
}

void lc_grads_ready(llama_cuda_t *m, int k, size_t lo, size_t hi)
{
	if (!m->ready_fn)
		return;
	CUDA_CHECK(cudaEventRecord(m->ready[k], m->stream));
	m->ready_fn(m->ready_ctx, (model_range_t){lo, hi}, (void *)m->ready[k]);
}

/* ---- streaming ---- */

/* A pass (forward or backward) starts: its fetches are order[pos .. end). */
void lc_pass(llama_cuda_t *m, bool backward)
{
	m->pos = backward ? m->n_fwd : 0;
	m->end = backward ? m->n_fwd + m->n_bwd : m->n_fwd;
}


view_t lc_pget(llama_cuda_t *m, size_t lo, size_t hi, bool need16)
{
	view_t v;
	if (m->streaming != MODEL_STREAM_ALL) {
		v.p = m->params + lo;
		v.p16 = m->params16 + lo;
		return v;
	}
	const size_t *at = m->order + 2 * (size_t)m->pos;
	if (m->pos >= m->end || at[0] != lo || at[1] != hi)
		s_misuse("llama_cuda: parameters fetched out of order");
	m->pos++;
	const bool last = m->pos >= m->end;
	const model_range_t r = {lo, hi}, next = {last ? 0 : at[2], last ? 0 : at[3]};
	v.p = m->st.fetch(m->st.ctx, r, next);
	v.p16 = NULL;
	if (need16) {
		cuda_to_bf16(m->fetched16, v.p, hi - lo, m->stream);
		v.p16 = m->fetched16;
	}
	return v;
}

/* the kernels that read a fetched range are enqueued: wait, hand it back */
void lc_pput(llama_cuda_t *m, view_t v)
{
	if (m->streaming != MODEL_STREAM_ALL)
		return;
	CUDA_CHECK(cudaStreamSynchronize(m->stream));
	m->st.release(m->st.ctx, v.p);
}

/* where backward adds the gradients [lo, hi): the buffer, or a zeroed bucket */
float *lc_gbegin(llama_cuda_t *m, size_t lo, size_t hi)
{
	if (m->streaming == MODEL_DENSE)
		return m->grads + lo;
	return m->st.grad_begin(m->st.ctx, (model_range_t){lo, hi});
}

/* the kernels adding into g are enqueued: a bucket goes back once they are done */
void lc_gend(llama_cuda_t *m, float *g, size_t lo, size_t hi)
{
	if (m->streaming == MODEL_DENSE)
		return;
	CUDA_CHECK(cudaStreamSynchronize(m->stream));
	m->st.grad_end(m->st.ctx, g, (model_range_t){lo, hi});
}

/* ---- GEMMs ---- */

/* C or C16 (M, N) = alpha op(A) @ op(B) [+ C or C_in], A's rows lda apart
 * and C's ldc apart (0: dense) */
void lc_gemm_ld(llama_cuda_t *m, int M, int N, int K, const uint16_t *A, int64_t lda, bool trans_a,
                      const uint16_t *B, bool trans_b, float *C, uint16_t *C16, int64_t ldc, bool accumulate,
                      const float *C_in, float alpha)
{
	cuda_gemm_args_t a;
	memset(&a, 0, sizeof a);
	a.M = M;
	a.N = N;
	a.K = K;
	a.A = A;
	a.lda = lda;
	a.ldc = ldc;
	a.trans_a = trans_a;
	a.B = B;
	a.trans_b = trans_b;
	a.C = C;
	a.C16 = C16;
	a.accumulate = accumulate;
	a.C_in = C_in;
	a.alpha = alpha;
	cuda_gemm_run(m->gemm, &a);
}

void lc_gemm(llama_cuda_t *m, int M, int N, int K, const uint16_t *A, bool trans_a, const uint16_t *B,
                   bool trans_b, float *C, uint16_t *C16, bool accumulate, const float *C_in, float alpha)
{
	lc_gemm_ld(m, M, N, K, A, 0, trans_a, B, trans_b, C, C16, 0, accumulate, C_in, alpha);
}

/* y (rows, out) = x (rows, in) @ W^T, W (out, in) bf16: fp32 y, or bf16 y16 */
void lc_linear(llama_cuda_t *m, int rows, int out, int in, const uint16_t *x, const uint16_t *W,
                     float *y, uint16_t *y16)
{
	lc_gemm(m, rows, out, in, x, false, W, true, y, y16, false, NULL, 1.0f);
}

/* dx16 (rows, in) = dy (rows, out) @ W, W (out, in) */
void lc_linear_dx(llama_cuda_t *m, int rows, int out, int in, const uint16_t *dy, const uint16_t *W,
                        float *dx, uint16_t *dx16, float alpha)
{
	lc_gemm(m, rows, in, out, dy, false, W, false, dx, dx16, false, NULL, alpha);
}

/* dW (out, in) += alpha dy^T (out, rows) @ x (rows, in) */
void lc_linear_dw(llama_cuda_t *m, int rows, int out, int in, const uint16_t *dy, const uint16_t *x,
                        float *dW, float alpha)
{
	lc_gemm(m, out, in, rows, dy, true, x, false, dW, NULL, true, NULL, alpha);
}

#define LAYER_SLICE(ptr, l, per_row) ((ptr) + (size_t)(l) * maxN * (per_row))

/* ---- forward ---- */

/* the token ids and the embedding-gradient index, through the pinned
 * staging buffer once the last upload has left it */
static void s_upload_ids(llama_cuda_t *m, const int32_t *inputs, const int32_t *targets, int N)
{
	const int V = m->cfg.vocab_size;
	for (int n = 0; n < N; n++)
		if (inputs[n] < 0 || inputs[n] >= V || (targets && (targets[n] < 0 || targets[n] >= V)))
			s_misuse("llama_cuda_forward: token id out of range");
	CUDA_CHECK(cudaEventSynchronize(m->staged));
	int32_t *h = m->host_ids;
	memcpy(h, inputs, (size_t)N * sizeof(int32_t));
	if (targets)
		memcpy(h + N, targets, (size_t)N * sizeof(int32_t));
	else
		memset(h + N, 0, (size_t)N * sizeof(int32_t));
	m->n_unique = cuda_embed_index_build(inputs, N, V, h + 2 * N, h + 3 * N, h + 4 * N + 1, m->host_counts);
	CUDA_CHECK(cudaMemcpyAsync(m->a.ids, h, (5 * (size_t)N + 1) * sizeof(int32_t), cudaMemcpyHostToDevice,
				   m->stream));
	CUDA_CHECK(cudaEventRecord(m->staged, m->stream));
}

extern "C" float llama_cuda_forward(llama_cuda_t *m, const int32_t *inputs, const int32_t *targets, int B,
                                    int T)
{
	const model_config_t *c = &m->cfg;
	const int L = c->n_layer, C = c->n_embd, V = c->vocab_size, H = c->n_head, KV = c->n_kv_head;
	const int D = m->D, Fd = m->Fd, hd = m->hd;
	const float eps = (float)c->norm_eps;
	if (B < 1 || B > m->max_B || T < 1 || T > m->max_T) {
		fprintf(stderr,
			"ringworker: fatal: llama_cuda_forward: batch %d x %d exceeds the model's %d x %d\n", B,
			T, m->max_B, m->max_T);
		exit(CUDA_EXIT_MISUSE);
	}
	const int N = B * T;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T;
	acts_t *a = &m->a;
	cudaStream_t s = m->stream;
	if (T % m->tp_size != 0) {
		fprintf(stderr, "ringworker: fatal: llama_cuda_forward: T %d is not divisible by the tensor-parallel size %d\n",
			T, m->tp_size);
		exit(CUDA_EXIT_MISUSE);
	}
	s_upload_ids(m, inputs, targets, N);
	m->B = B;
	m->T = T;
	m->have_targets = false;
	if (m->tp_size > 1)
		return lc_tp_forward(m, targets != NULL, B, T);
	lc_pass(m, false);
	const int rows = m->rows;
	/* the embedding: zeros plus each token's row (one exact add), per block */
	CUDA_CHECK(cudaMemsetAsync(a->encoded, 0, (size_t)N * C * sizeof(float), s));
	for (int v0 = 0; v0 < V; v0 += rows) {
		const int v1 = rows < V - v0 ? v0 + rows : V;
		view_t v = lc_pget(m, (size_t)v0 * C, (size_t)v1 * C, false);
		cuda_embed_tokens_add(a->encoded, a->ids, v.p, v0, v1, N, C, s);
		lc_pput(m, v);
	}
	const float *x = a->encoded;
	for (int l = 0; l < L; l++) {
		const size_t lo = m->layer0 + (size_t)l * m->layer_floats;
		view_t lp = lc_pget(m, lo, lo + m->layer_floats, true);
		const float *P = lp.p;
		const uint16_t *P16 = lp.p16;
		uint16_t *rms1 = LAYER_SLICE(a->rms1, l, C), *qkv16 = LAYER_SLICE(a->qkv16, l, D);
		uint16_t *atty = LAYER_SLICE(a->atty, l, C), *rms2 = LAYER_SLICE(a->rms2, l, C);
		uint16_t *gu16 = LAYER_SLICE(a->gu16, l, 2 * Fd), *hsw = LAYER_SLICE(a->hsw, l, Fd);
		float *res_attn = LAYER_SLICE(a->res_attn, l, C), *res_mlp = LAYER_SLICE(a->res_mlp, l, C);
		cuda_rmsnorm_forward(NULL, rms1, LAYER_SLICE(a->rstd1, l, 1), x, P + m->rel[LLAMA_T_ATTN_NORM], N,
				     C, eps, s);
		/* q, k, v in one GEMM (fp32), rotated into bf16 for the attention */
		lc_linear(m, N, D, C, rms1, P16 + m->rel[LLAMA_T_Q], a->qkv32, NULL);
		cuda_rope_forward(NULL, qkv16, a->qkv32, a->rope_cos, a->rope_sin, N, T, H, KV, hd, s);
		cuda_flash_forward(NULL, atty, LAYER_SLICE(a->lse, l, H), qkv16, B, T, C, H, KV, s);
		/* res_attn = x + atty @ Wo^T */
		lc_gemm(m, N, C, C, atty, false, P16 + m->rel[LLAMA_T_O], true, res_attn, NULL, true, x, 1.0f);
		cuda_rmsnorm_forward(NULL, rms2, LAYER_SLICE(a->rstd2, l, 1), res_attn,
				     P + m->rel[LLAMA_T_MLP_NORM], N, C, eps, s);
		lc_linear(m, N, 2 * Fd, C, rms2, P16 + m->rel[LLAMA_T_GATE], NULL, gu16);
		cuda_swiglu_forward(hsw, gu16, N, Fd, s);
		lc_gemm(m, N, C, Fd, hsw, false, P16 + m->rel[LLAMA_T_DOWN], true, res_mlp, NULL, true, res_attn,
		       1.0f);
		lc_pput(m, lp);
		x = res_mlp;
	}
	view_t np = lc_pget(m, m->off_norm, m->off_norm + (size_t)C, false);
	cuda_rmsnorm_forward(NULL, a->rmsf, a->rstdf, x, np.p, N, C, eps, s);
	lc_pput(m, np);
	/* logits (N, V) = rmsf @ W^T, per block of W's rows: the block's columns */
	for (int v0 = 0; v0 < V; v0 += rows) {
		const int nv = rows < V - v0 ? rows : V - v0;
		const size_t hlo = m->off_head + (size_t)v0 * C;
		view_t v = lc_pget(m, hlo, hlo + (size_t)nv * C, true);
		lc_gemm_ld(m, N, nv, C, a->rmsf, 0, false, v.p16, true, NULL, a->logits + v0, V, false, NULL, 1.0f);
		lc_pput(m, v);
	}
	if (!targets)
		return 0.0f;
	/* the losses, and dlogits for a loss scale of 1 (backward's LM-head
	 * products take the loss scale as alpha) */
	cuda_crossentropy_forward16(a->losses, NULL, NULL, a->dlogits, a->logits, a->ids + N, N, V, V,
				    1.0f / (float)N, s);
	cuda_mean(a->loss, a->losses, N, s);
	m->have_targets = true;
	float loss = 0.0f;
	lc_copy(&loss, a->loss, sizeof loss, cudaMemcpyDeviceToHost, s);
	return loss;
}

extern "C" void llama_cuda_zero_grad(llama_cuda_t *m)
{
	if (m->grads) /* streamed: every bucket comes zeroed */
		CUDA_CHECK(cudaMemsetAsync(m->grads, 0, m->n_params * sizeof(float), m->stream));
}

/* ---- backward ---- */

/* one layer's backward; dres holds d(layer output), and leaves with
 * d(layer input) */
static void s_layer_backward(llama_cuda_t *m, int l)
{
	const model_config_t *c = &m->cfg;
	const int C = c->n_embd, H = c->n_head, KV = c->n_kv_head, D = m->D, Fd = m->Fd, hd = m->hd;
	const int B = m->B, T = m->T, N = B * T;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T;
	acts_t *a = &m->a;
	cudaStream_t s = m->stream;
	const size_t lo = m->layer0 + (size_t)l * m->layer_floats, hi = lo + m->layer_floats;
	view_t lp = lc_pget(m, lo, hi, true);
	const float *P = lp.p;
	const uint16_t *P16 = lp.p16;
	float *G = lc_gbegin(m, lo, hi);
	const float *x = l == 0 ? a->encoded : LAYER_SLICE(a->res_mlp, l - 1, C);
	const uint16_t *rms1 = LAYER_SLICE(a->rms1, l, C), *qkv16 = LAYER_SLICE(a->qkv16, l, D);
	const uint16_t *atty = LAYER_SLICE(a->atty, l, C), *rms2 = LAYER_SLICE(a->rms2, l, C);
	const uint16_t *gu16 = LAYER_SLICE(a->gu16, l, 2 * Fd), *hsw = LAYER_SLICE(a->hsw, l, Fd);
	const float *res_attn = LAYER_SLICE(a->res_attn, l, C);
	/* MLP: res_mlp = res_attn + down(swiglu(gate_up(rms2(res_attn)))) */
	lc_linear_dw(m, N, C, Fd, a->dres16, hsw, G + m->rel[LLAMA_T_DOWN], 1.0f);
	lc_linear_dx(m, N, C, Fd, a->dres16, P16 + m->rel[LLAMA_T_DOWN], NULL, a->dh16, 1.0f);
	cuda_swiglu_backward(a->dgu16, a->dh16, gu16, N, Fd, s);
	lc_linear_dw(m, N, 2 * Fd, C, a->dgu16, rms2, G + m->rel[LLAMA_T_GATE], 1.0f);
	lc_linear_dx(m, N, 2 * Fd, C, a->dgu16, P16 + m->rel[LLAMA_T_GATE], NULL, a->dsmall16, 1.0f);
	cuda_rmsnorm_backward(a->dres, a->dres16, G + m->rel[LLAMA_T_MLP_NORM], NULL, a->dsmall16, res_attn,
			      LAYER_SLICE(a->rstd2, l, 1), P + m->rel[LLAMA_T_MLP_NORM], N, C, a->colsum, s);
	/* attention: res_attn = x + o(attn(rope(qkv(rms1(x))))) */
	lc_linear_dw(m, N, C, C, a->dres16, atty, G + m->rel[LLAMA_T_O], 1.0f);
	lc_linear_dx(m, N, C, C, a->dres16, P16 + m->rel[LLAMA_T_O], NULL, a->dsmall16, 1.0f);
	cuda_flash_backward(a->qkv32, NULL, NULL, NULL, a->dsmall16, qkv16, atty, LAYER_SLICE(a->lse, l, H),
			    &m->att_s, B, T, C, H, KV, s);
	cuda_rope_backward(NULL, a->dqkv16, a->qkv32, a->rope_cos, a->rope_sin, N, T, H, KV, hd, s);
	lc_linear_dw(m, N, D, C, a->dqkv16, rms1, G + m->rel[LLAMA_T_Q], 1.0f);
	lc_linear_dx(m, N, D, C, a->dqkv16, P16 + m->rel[LLAMA_T_Q], NULL, a->dsmall16, 1.0f);
	cuda_rmsnorm_backward(a->dres, a->dres16, G + m->rel[LLAMA_T_ATTN_NORM], NULL, a->dsmall16, x,
			      LAYER_SLICE(a->rstd1, l, 1), P + m->rel[LLAMA_T_ATTN_NORM], N, C, a->colsum, s);
	lc_gend(m, G, lo, hi);
	lc_pput(m, lp);
}

extern "C" void llama_cuda_backward(llama_cuda_t *m, float loss_scale)
{
	if (!m->have_targets)
		s_misuse("llama_cuda_backward without a forward with targets");
	if (m->tp_size > 1) {
		lc_tp_backward(m, loss_scale);
		return;
	}
	const model_config_t *c = &m->cfg;
	const int L = c->n_layer, C = c->n_embd, V = c->vocab_size;
	const int N = m->B * m->T;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T;
	acts_t *a = &m->a;
	cudaStream_t s = m->stream;
	lc_pass(m, true);
	const int rows = m->rows;
	/* the LM head (embed_tokens when tied), per block of W's rows (the
	 * block's columns of dlogits, rows V apart): dW += dlogits^T @ rmsf,
	 * and drmsf = dlogits @ W summed over the blocks, scaled by loss_scale */
	for (int v0 = 0; v0 < V; v0 += rows) {
		const int nv = rows < V - v0 ? rows : V - v0;
		const size_t hlo = m->off_head + (size_t)v0 * C, hhi = hlo + (size_t)nv * C;
		float *g = lc_gbegin(m, hlo, hhi);
		lc_gemm_ld(m, nv, C, N, a->dlogits + v0, V, true, a->rmsf, false, g, NULL, 0, true, NULL, loss_scale);
		lc_gend(m, g, hlo, hhi);
		view_t v = lc_pget(m, hlo, hhi, true);
		lc_gemm_ld(m, N, C, nv, a->dlogits + v0, V, false, v.p16, false, a->dsmall, NULL, 0, v0 > 0, NULL,
			  loss_scale);
		lc_pput(m, v);
	}
	{
		view_t w = lc_pget(m, m->off_norm, m->off_norm + (size_t)C, false);
		float *g = lc_gbegin(m, m->off_norm, m->off_norm + (size_t)C);
		CUDA_CHECK(cudaMemsetAsync(a->dres, 0, (size_t)N * C * sizeof(float), s));
		cuda_rmsnorm_backward(a->dres, a->dres16, g, a->dsmall, NULL, LAYER_SLICE(a->res_mlp, L - 1, C),
				      a->rstdf, w.p, N, C, a->colsum, s);
		lc_gend(m, g, m->off_norm, m->off_norm + (size_t)C);
		lc_pput(m, w);
	}
	lc_grads_ready(m, 0, m->off_norm, m->n_params); /* model.norm and an untied lm_head */
	for (int l = L - 1; l >= 0; l--) {
		s_layer_backward(m, l);
		const size_t lo = m->layer0 + (size_t)l * m->layer_floats;
		lc_grads_ready(m, L - l, lo, lo + m->layer_floats);
	}
	/* embed_tokens per block of rows: the run of the (sorted) distinct
	 * tokens inside each */
	const int32_t *d_uniq = a->ids + 2 * N, *d_starts = a->ids + 3 * N, *d_rows = a->ids + 4 * N + 1;
	const int32_t *h_uniq = m->host_ids + 2 * N;
	int k0 = 0;
	for (int v0 = 0; v0 < V; v0 += rows) {
		const int v1 = rows < V - v0 ? v0 + rows : V;
		int k1 = k0;
		while (k1 < m->n_unique && h_uniq[k1] < v1)
			k1++;
		float *g = lc_gbegin(m, (size_t)v0 * C, (size_t)v1 * C);
		cuda_embed_tokens_backward(g, v0, a->dres, d_uniq + k0, d_starts + k0, d_rows, k1 - k0, C, s);
		lc_gend(m, g, (size_t)v0 * C, (size_t)v1 * C);
		k0 = k1;
	}
	lc_grads_ready(m, L + 1, 0, m->layer0);
}

/* ---- the optimizer ---- */

extern "C" double llama_cuda_sum_squares(llama_cuda_t *m, const float *x, size_t n)
{
	cuda_sum_squares(m->a.sumsq, x, n, m->a.sumsq_scratch, m->stream);
	double ss = 0.0;
	lc_copy(&ss, m->a.sumsq, sizeof ss, cudaMemcpyDeviceToHost, m->stream);
	return ss;
}

extern "C" double llama_cuda_grad_norm(llama_cuda_t *m)
{
	if (!m->grads)
		s_misuse("llama_cuda_grad_norm on a model created without a gradient buffer");
	return sqrt(llama_cuda_sum_squares(m, m->grads, m->n_params));
}

/* AdamW on [lo, lo + n) at params (element 0 is parameter lo), per decay
 * segment (cuda_adamw_segments, GPT-2's too) */
static void s_adamw(llama_cuda_t *m, size_t lo, size_t n, float *params, uint16_t *params16,
                    const float *grads, float *mom1, float *mom2, const optim_adamw_t *hp, float grad_scale)
{
	if (lo > m->n_params || n > m->n_params - lo)
		s_misuse("llama_cuda_adamw_range past the end of the parameters");
	cuda_adamw_segments(m->segs, m->n_segs, lo, n, params, params16, grads, mom1, mom2, hp, grad_scale,
			    m->stream);
}

extern "C" void llama_cuda_adamw(llama_cuda_t *m, const optim_adamw_t *hp, float grad_scale)
{
	if (!m->mom1 || !m->grads || !m->params)
		s_misuse("llama_cuda_adamw on a model created without parameters, gradients or AdamW moments");
	s_adamw(m, 0, m->n_params, m->params, m->params16, m->grads, m->mom1, m->mom2, hp, grad_scale);
}

extern "C" void llama_cuda_adamw_range(llama_cuda_t *m, size_t lo, size_t n, float *params,
                                       const float *grads, float *mom1, float *mom2,
                                       const optim_adamw_t *hp, float grad_scale)
{
	s_adamw(m, lo, n, params, NULL, grads, mom1, mom2, hp, grad_scale);
}
