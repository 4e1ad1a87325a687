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

typedef cuda_segment_t segment_t;

typedef struct {
	float *encoded;
	uint16_t *rms1;
	float *rstd1;
	uint16_t *qkv16;
	float *lse;
	uint16_t *atty;
	float *res_attn;
	uint16_t *rms2;
	float *rstd2;
	uint16_t *gu16, *hsw;
	float *res_mlp;
	uint16_t *rmsf;
	float *rstdf;
	uint16_t *logits, *dlogits;
	float *losses, *loss;
	float *qkv32;
	uint16_t *dqkv16;
	float *dres;
	uint16_t *dres16;
	float *dsmall;
	uint16_t *dsmall16;
	uint16_t *dgu16, *dh16;
	float *colsum;
	double *sumsq, *sumsq_scratch;
	void *att_scratch;
	int32_t *ids; /* inputs (N), targets (N), uniq (N), starts (N + 1), rows (N) */
	float *rope_cos, *rope_sin;
} acts_t;

struct llama_cuda {
	model_config_t cfg;
	int max_B, max_T, hd, D, Fd;
	size_t n_params;
	model_tensor_t *tensors;
	int n_tensors;
	size_t max_range;
	size_t layer0, layer_floats, off_norm, off_head; /* off_head 0 when tied */
	size_t rel[LLAMA_LAYER_TENSORS]; /* a layer's tensors from its first float */
	segment_t *segs;
	int n_segs;

	cudaStream_t stream;
	cuda_gemm_t *gemm;
	cudaEvent_t staged;
	cudaEvent_t *ready; /* n_layer + 2 */
	model_grads_ready_fn ready_fn;
	void *ready_ctx;

	void *state;
	float *params, *grads, *mom1, *mom2;
	uint16_t *params16;
	size_t state_bytes;

	void *arena;
	size_t arena_bytes;
	acts_t a;
	cuda_attention_scratch_t att_s;

	int32_t *host_ids;
	int32_t *host_counts;
	int n_unique;
	int B, T;
	bool have_targets;
};

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

static size_t s_layout(acts_t *a, char *base, const model_config_t *cfg, int max_B, int max_T)
{
	const size_t L = (size_t)cfg->n_layer, C = (size_t)cfg->n_embd, V = (size_t)cfg->vocab_size;
	const size_t H = (size_t)cfg->n_head, hd = C / H, D = C + 2 * (size_t)cfg->n_kv_head * hd;
	const size_t Fd = (size_t)cfg->ffn_dim, N = (size_t)max_B * (size_t)max_T;
	const size_t f = sizeof(float), h = sizeof(uint16_t);
	size_t off = 0;
	a->encoded = (float *)s_carve(base, &off, N * C, f);
	a->rms1 = (uint16_t *)s_carve(base, &off, L * N * C, h);
	a->rstd1 = (float *)s_carve(base, &off, L * N, f);
	a->qkv16 = (uint16_t *)s_carve(base, &off, L * N * D, h);
	a->lse = (float *)s_carve(base, &off, L * N * H, f);
	a->atty = (uint16_t *)s_carve(base, &off, L * N * C, h);
	a->res_attn = (float *)s_carve(base, &off, L * N * C, f);
	a->rms2 = (uint16_t *)s_carve(base, &off, L * N * C, h);
	a->rstd2 = (float *)s_carve(base, &off, L * N, f);
	a->gu16 = (uint16_t *)s_carve(base, &off, L * N * 2 * Fd, h);
	a->hsw = (uint16_t *)s_carve(base, &off, L * N * Fd, h);
	a->res_mlp = (float *)s_carve(base, &off, L * N * C, f);
	a->rmsf = (uint16_t *)s_carve(base, &off, N * C, h);
	a->rstdf = (float *)s_carve(base, &off, N, f);
	a->logits = (uint16_t *)s_carve(base, &off, N * V, h);
	a->dlogits = (uint16_t *)s_carve(base, &off, N * V, h);
	a->losses = (float *)s_carve(base, &off, N, f);
	a->loss = (float *)s_carve(base, &off, 1, f);
	a->qkv32 = (float *)s_carve(base, &off, N * D, f);
	a->dqkv16 = (uint16_t *)s_carve(base, &off, N * D, h);
	a->dres = (float *)s_carve(base, &off, N * C, f);
	a->dres16 = (uint16_t *)s_carve(base, &off, N * C, h);
	a->dsmall = (float *)s_carve(base, &off, N * C, f);
	a->dsmall16 = (uint16_t *)s_carve(base, &off, N * C, h);
	a->dgu16 = (uint16_t *)s_carve(base, &off, N * 2 * Fd, h);
	a->dh16 = (uint16_t *)s_carve(base, &off, N * Fd, h);
	a->colsum = (float *)s_carve(base, &off, cuda_colsum_scratch_floats((int)N, (int)C), f);
	a->sumsq = (double *)s_carve(base, &off, 1, sizeof(double));
	a->sumsq_scratch = (double *)s_carve(base, &off, cuda_sum_squares_scratch(), sizeof(double));
	a->att_scratch = s_carve(base, &off, cuda_attention_scratch_bytes(max_B, max_T, (int)C, (int)H, true), 1);
	a->ids = (int32_t *)s_carve(base, &off, 5 * N + 1, sizeof(int32_t));
	a->rope_cos = (float *)s_carve(base, &off, (size_t)max_T * (hd / 2), f);
	a->rope_sin = (float *)s_carve(base, &off, (size_t)max_T * (hd / 2), f);
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
	m->layer_floats = llama_layer_floats(c);
	m->layer0 = m->tensors[1].offset;
	for (int i = 0; i < LLAMA_LAYER_TENSORS; i++)
		m->rel[i] = m->tensors[1 + i].offset - m->layer0;
	m->off_norm = m->layer0 + (size_t)c->n_layer * m->layer_floats;
	m->off_head = c->tie_embeddings ? 0 : m->off_norm + (size_t)c->n_embd;
	return m->rel[LLAMA_T_K] == m->rel[LLAMA_T_Q] + (size_t)c->n_embd * (size_t)c->n_embd &&
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

/* the state buffers: params, grads, [m, v] (f32), params16 */
static int s_alloc_state(llama_cuda_t *m, bool moments, char *err, size_t errlen)
{
	const size_t n_f32 = m->n_params * (moments ? 4 : 2);
	m->state_bytes = n_f32 * sizeof(float) + (m->n_params * 2 + 255) / 256 * 256;
	cudaError_t rc = cudaMalloc(&m->state, m->state_bytes);
	if (rc != cudaSuccess) {
		m->state = NULL;
		snprintf(err, errlen,
			 "out of GPU memory: need %.1f GiB for %zu parameters, their gradients and AdamW "
			 "state: %s",
			 (double)m->state_bytes / GIB, m->n_params, cudaGetErrorString(rc));
		return -ENOMEM;
	}
	m->params = (float *)m->state;
	m->grads = m->params + m->n_params;
	if (moments) {
		m->mom1 = m->grads + m->n_params;
		m->mom2 = m->mom1 + m->n_params;
	}
	m->params16 = (uint16_t *)((float *)m->state + n_f32);
	if ((rc = cudaMemset(m->state, 0, m->state_bytes)) != cudaSuccess) {
		snprintf(err, errlen, "CUDA error clearing the parameters: %s", cudaGetErrorString(rc));
		return -EIO;
	}
	return 0;
}

/* the arena, the RoPE tables, pinned ids and the events */
static int s_alloc_rest(llama_cuda_t *m, char *err, size_t errlen)
{
	const model_config_t *cfg = &m->cfg;
	const size_t N = (size_t)m->max_B * (size_t)m->max_T, half = (size_t)m->hd / 2;
	m->arena_bytes = s_layout(&m->a, NULL, cfg, m->max_B, m->max_T);
	cudaError_t rc = cudaMalloc(&m->arena, m->arena_bytes);
	if (rc != cudaSuccess) {
		m->arena = NULL;
		snprintf(err, errlen,
			 "out of GPU memory: need %.1f GiB for activations (train.batch_size %d x "
			 "model.seq_len %d tokens): %s; lower train.batch_size or model.seq_len",
			 (double)m->arena_bytes / GIB, m->max_B, m->max_T, cudaGetErrorString(rc));
		return -ENOMEM;
	}
	s_layout(&m->a, (char *)m->arena, cfg, m->max_B, m->max_T);
	cuda_attention_scratch_carve(&m->att_s, m->a.att_scratch, m->max_B, m->max_T, cfg->n_embd,
				     cfg->n_head, true);
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
	int code = s_check(cfg, max_B, max_T, err, errlen);
	if (code < 0)
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
	m->hd = cfg->n_embd / cfg->n_head;
	m->D = cfg->n_embd + 2 * cfg->n_kv_head * m->hd;
	m->Fd = cfg->ffn_dim;
	code = -ENOMEM;
	if (llama_layout(cfg, &m->tensors, &m->n_tensors, &m->n_params, &m->max_range) < 0 ||
	    !s_build_table(m)) {
		snprintf(err, errlen, "out of host memory");
		goto fail;
	}
	{
		acts_t probe;
		double act = (double)s_layout(&probe, NULL, cfg, max_B, max_T) + (32 << 20);
		double state = (double)m->n_params * ((moments ? 16.0 : 8.0) + 2.0);
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
	if (!m->gemm)
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
	if (m->arena)
		cudaFree(m->arena);
	if (m->state)
		cudaFree(m->state);
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
extern "C" size_t llama_cuda_state_bytes(const llama_cuda_t *m) { return m->state_bytes; }
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
	return llama_flops_per_token(&m->cfg, m->n_params, T);
}

static void s_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s)
{
	CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
	CUDA_CHECK(cudaStreamSynchronize(s));
}

extern "C" void llama_cuda_set_params(llama_cuda_t *m, const float *params)
{
	s_copy(m->params, params, m->n_params * sizeof(float), cudaMemcpyHostToDevice, m->stream);
	llama_cuda_params_written(m);
	CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

extern "C" void llama_cuda_get_params(llama_cuda_t *m, float *ret_params)
{
	s_copy(ret_params, m->params, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, m->stream);
}

extern "C" void llama_cuda_get_grads(llama_cuda_t *m, float *ret_grads)
{
	s_copy(ret_grads, m->grads, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, m->stream);
}

extern "C" void llama_cuda_set_moments(llama_cuda_t *m, const float *mom1, const float *mom2)
{
	if (!m->mom1)
		s_misuse("llama_cuda_set_moments on a model created without AdamW moments");
	s_copy(m->mom1, mom1, m->n_params * sizeof(float), cudaMemcpyHostToDevice, m->stream);
	s_copy(m->mom2, mom2, m->n_params * sizeof(float), cudaMemcpyHostToDevice, m->stream);
}

extern "C" void llama_cuda_get_moments(llama_cuda_t *m, float *ret_mom1, float *ret_mom2)
{
	if (!m->mom1)
		s_misuse("llama_cuda_get_moments on a model created without AdamW moments");
	s_copy(ret_mom1, m->mom1, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, m->stream);
	s_copy(ret_mom2, m->mom2, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, m->stream);
}

extern "C" void llama_cuda_params_written(llama_cuda_t *m)
{
	cuda_to_bf16(m->params16, m->params, m->n_params, m->stream);
}

extern "C" void llama_cuda_sync(llama_cuda_t *m)
{
	CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

extern "C" void llama_cuda_get_logits(llama_cuda_t *m, float *ret_logits)
{
	const size_t n = (size_t)m->B * m->T * (size_t)m->cfg.vocab_size;
	uint16_t *h16 = (uint16_t *)ret_logits + n; /* the back half, widened from the front */
	s_copy(h16, m->a.logits, n * sizeof(uint16_t), cudaMemcpyDeviceToHost, m->stream);
	for (size_t i = 0; i < n; i++) {
		uint32_t bits = (uint32_t)h16[i] << 16;
		memcpy(&ret_logits[i], &bits, sizeof bits);
	}
}

extern "C" void llama_cuda_set_grads_ready(llama_cuda_t *m, model_grads_ready_fn fn, void *ctx)
{
	m->ready_fn = fn;
	m->ready_ctx = ctx;
}

static void s_grads_ready(llama_cuda_t *m, int k, size_t lo, size_t hi)
{
	if (!m->ready_fn)
		return;
	CUDA_CHECK(cudaEventRecord(m->ready[k], m->stream));
	m->ready_fn(m->ready_ctx, (model_range_t){lo, hi}, (void *)m->ready[k]);
}

/* ---- GEMMs ---- */

/* C or C16 (M, N) = alpha op(A) @ op(B) [+ C or C_in] */
static void s_gemm(llama_cuda_t *m, int M, int N, int K, const uint16_t *A, bool trans_a, const uint16_t *B,
                   bool trans_b, float *C, uint16_t *C16, bool accumulate, const float *C_in, float alpha)
{
	cuda_gemm_args_t a;
	memset(&a, 0, sizeof a);
	a.M = M;
	a.N = N;
	a.K = K;
	a.A = A;
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

/* y (rows, out) = x (rows, in) @ W^T, W (out, in) bf16: fp32 y, or bf16 y16 */
static void s_linear(llama_cuda_t *m, int rows, int out, int in, const uint16_t *x, const uint16_t *W,
                     float *y, uint16_t *y16)
{
	s_gemm(m, rows, out, in, x, false, W, true, y, y16, false, NULL, 1.0f);
}

/* dx16 (rows, in) = dy (rows, out) @ W, W (out, in) */
static void s_linear_dx(llama_cuda_t *m, int rows, int out, int in, const uint16_t *dy, const uint16_t *W,
                        float *dx, uint16_t *dx16, float alpha)
{
	s_gemm(m, rows, in, out, dy, false, W, false, dx, dx16, false, NULL, alpha);
}

/* dW (out, in) += alpha dy^T (out, rows) @ x (rows, in) */
static void s_linear_dw(llama_cuda_t *m, int rows, int out, int in, const uint16_t *dy, const uint16_t *x,
                        float *dW, float alpha)
{
	s_gemm(m, out, in, rows, dy, true, x, false, dW, NULL, true, NULL, alpha);
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
	s_upload_ids(m, inputs, targets, N);
	m->B = B;
	m->T = T;
	m->have_targets = false;
	/* the embedding: zeros plus each token's row (one exact add) */
	CUDA_CHECK(cudaMemsetAsync(a->encoded, 0, (size_t)N * C * sizeof(float), s));
	cuda_embed_tokens_add(a->encoded, a->ids, m->params, 0, V, N, C, s);
	const float *x = a->encoded;
	for (int l = 0; l < L; l++) {
		const size_t lo = m->layer0 + (size_t)l * m->layer_floats;
		const float *P = m->params + lo;
		const uint16_t *P16 = m->params16 + lo;
		uint16_t *rms1 = LAYER_SLICE(a->rms1, l, C), *qkv16 = LAYER_SLICE(a->qkv16, l, D);
		uint16_t *atty = LAYER_SLICE(a->atty, l, C), *rms2 = LAYER_SLICE(a->rms2, l, C);
		uint16_t *gu16 = LAYER_SLICE(a->gu16, l, 2 * Fd), *hsw = LAYER_SLICE(a->hsw, l, Fd);
		float *res_attn = LAYER_SLICE(a->res_attn, l, C), *res_mlp = LAYER_SLICE(a->res_mlp, l, C);
		cuda_rmsnorm_forward(NULL, rms1, LAYER_SLICE(a->rstd1, l, 1), x, P + m->rel[LLAMA_T_ATTN_NORM], N,
				     C, eps, s);
		/* q, k, v in one GEMM (fp32), rotated into bf16 for the attention */
		s_linear(m, N, D, C, rms1, P16 + m->rel[LLAMA_T_Q], a->qkv32, NULL);
		cuda_rope_forward(NULL, qkv16, a->qkv32, a->rope_cos, a->rope_sin, N, T, H, KV, hd, s);
		cuda_flash_forward(NULL, atty, LAYER_SLICE(a->lse, l, H), qkv16, B, T, C, H, KV, s);
		/* res_attn = x + atty @ Wo^T */
		s_gemm(m, N, C, C, atty, false, P16 + m->rel[LLAMA_T_O], true, res_attn, NULL, true, x, 1.0f);
		cuda_rmsnorm_forward(NULL, rms2, LAYER_SLICE(a->rstd2, l, 1), res_attn,
				     P + m->rel[LLAMA_T_MLP_NORM], N, C, eps, s);
		s_linear(m, N, 2 * Fd, C, rms2, P16 + m->rel[LLAMA_T_GATE], NULL, gu16);
		cuda_swiglu_forward(hsw, gu16, N, Fd, s);
		s_gemm(m, N, C, Fd, hsw, false, P16 + m->rel[LLAMA_T_DOWN], true, res_mlp, NULL, true, res_attn,
		       1.0f);
		x = res_mlp;
	}
	cuda_rmsnorm_forward(NULL, a->rmsf, a->rstdf, x, m->params + m->off_norm, N, C, eps, s);
	s_linear(m, N, V, C, a->rmsf, m->params16 + m->off_head, NULL, a->logits);
	if (!targets)
		return 0.0f;
	/* the losses, and dlogits for a loss scale of 1 (backward's LM-head
	 * products take the loss scale as alpha) */
	cuda_crossentropy_forward16(a->losses, NULL, NULL, a->dlogits, a->logits, a->ids + N, N, V, V,
				    1.0f / (float)N, s);
	cuda_mean(a->loss, a->losses, N, s);
	m->have_targets = true;
	float loss = 0.0f;
	s_copy(&loss, a->loss, sizeof loss, cudaMemcpyDeviceToHost, s);
	return loss;
}

extern "C" void llama_cuda_zero_grad(llama_cuda_t *m)
{
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
	const size_t lo = m->layer0 + (size_t)l * m->layer_floats;
	const float *P = m->params + lo;
	const uint16_t *P16 = m->params16 + lo;
	float *G = m->grads + lo;
	const float *x = l == 0 ? a->encoded : LAYER_SLICE(a->res_mlp, l - 1, C);
	const uint16_t *rms1 = LAYER_SLICE(a->rms1, l, C), *qkv16 = LAYER_SLICE(a->qkv16, l, D);
	const uint16_t *atty = LAYER_SLICE(a->atty, l, C), *rms2 = LAYER_SLICE(a->rms2, l, C);
	const uint16_t *gu16 = LAYER_SLICE(a->gu16, l, 2 * Fd), *hsw = LAYER_SLICE(a->hsw, l, Fd);
	const float *res_attn = LAYER_SLICE(a->res_attn, l, C);
	/* MLP: res_mlp = res_attn + down(swiglu(gate_up(rms2(res_attn)))) */
	s_linear_dw(m, N, C, Fd, a->dres16, hsw, G + m->rel[LLAMA_T_DOWN], 1.0f);
	s_linear_dx(m, N, C, Fd, a->dres16, P16 + m->rel[LLAMA_T_DOWN], NULL, a->dh16, 1.0f);
	cuda_swiglu_backward(a->dgu16, a->dh16, gu16, N, Fd, s);
	s_linear_dw(m, N, 2 * Fd, C, a->dgu16, rms2, G + m->rel[LLAMA_T_GATE], 1.0f);
	s_linear_dx(m, N, 2 * Fd, C, a->dgu16, P16 + m->rel[LLAMA_T_GATE], NULL, a->dsmall16, 1.0f);
	cuda_rmsnorm_backward(a->dres, a->dres16, G + m->rel[LLAMA_T_MLP_NORM], NULL, a->dsmall16, res_attn,
			      LAYER_SLICE(a->rstd2, l, 1), P + m->rel[LLAMA_T_MLP_NORM], N, C, a->colsum, s);
	/* attention: res_attn = x + o(attn(rope(qkv(rms1(x))))) */
	s_linear_dw(m, N, C, C, a->dres16, atty, G + m->rel[LLAMA_T_O], 1.0f);
	s_linear_dx(m, N, C, C, a->dres16, P16 + m->rel[LLAMA_T_O], NULL, a->dsmall16, 1.0f);
	cuda_flash_backward(a->qkv32, NULL, NULL, NULL, a->dsmall16, qkv16, atty, LAYER_SLICE(a->lse, l, H),
			    &m->att_s, B, T, C, H, KV, s);
	cuda_rope_backward(NULL, a->dqkv16, a->qkv32, a->rope_cos, a->rope_sin, N, T, H, KV, hd, s);
	s_linear_dw(m, N, D, C, a->dqkv16, rms1, G + m->rel[LLAMA_T_Q], 1.0f);
	s_linear_dx(m, N, D, C, a->dqkv16, P16 + m->rel[LLAMA_T_Q], NULL, a->dsmall16, 1.0f);
	cuda_rmsnorm_backward(a->dres, a->dres16, G + m->rel[LLAMA_T_ATTN_NORM], NULL, a->dsmall16, x,
			      LAYER_SLICE(a->rstd1, l, 1), P + m->rel[LLAMA_T_ATTN_NORM], N, C, a->colsum, s);
}

extern "C" void llama_cuda_backward(llama_cuda_t *m, float loss_scale)
{
	if (!m->have_targets)
		s_misuse("llama_cuda_backward without a forward with targets");
	const model_config_t *c = &m->cfg;
	const int L = c->n_layer, C = c->n_embd, V = c->vocab_size;
	const int N = m->B * m->T;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T;
	acts_t *a = &m->a;
	cudaStream_t s = m->stream;
	/* the LM head (embed_tokens when tied): dW += dlogits^T @ rmsf, and
	 * drmsf = dlogits @ W, both scaled by loss_scale */
	s_linear_dw(m, N, V, C, a->dlogits, a->rmsf, m->grads + m->off_head, loss_scale);
	s_linear_dx(m, N, V, C, a->dlogits, m->params16 + m->off_head, a->dsmall, NULL, loss_scale);
	CUDA_CHECK(cudaMemsetAsync(a->dres, 0, (size_t)N * C * sizeof(float), s));
	cuda_rmsnorm_backward(a->dres, a->dres16, m->grads + m->off_norm, a->dsmall, NULL,
			      LAYER_SLICE(a->res_mlp, L - 1, C), a->rstdf, m->params + m->off_norm, N, C,
			      a->colsum, s);
	s_grads_ready(m, 0, m->off_norm, m->n_params); /* model.norm and an untied lm_head */
	for (int l = L - 1; l >= 0; l--) {
		s_layer_backward(m, l);
		const size_t lo = m->layer0 + (size_t)l * m->layer_floats;
		s_grads_ready(m, L - l, lo, lo + m->layer_floats);
	}
	const int32_t *d_uniq = a->ids + 2 * N, *d_starts = a->ids + 3 * N, *d_rows = a->ids + 4 * N + 1;
	cuda_embed_tokens_backward(m->grads, 0, a->dres, d_uniq, d_starts, d_rows, m->n_unique, C, s);
	s_grads_ready(m, L + 1, 0, m->layer0);
}

/* ---- the optimizer ---- */

extern "C" double llama_cuda_sum_squares(llama_cuda_t *m, const float *x, size_t n)
{
	cuda_sum_squares(m->a.sumsq, x, n, m->a.sumsq_scratch, m->stream);
	double ss = 0.0;
	s_copy(&ss, m->a.sumsq, sizeof ss, cudaMemcpyDeviceToHost, m->stream);
	return ss;
}

extern "C" double llama_cuda_grad_norm(llama_cuda_t *m)
{
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
	if (!m->mom1)
		s_misuse("llama_cuda_adamw on a model created without AdamW moments");
	s_adamw(m, 0, m->n_params, m->params, m->params16, m->grads, m->mom1, m->mom2, hp, grad_scale);
}

extern "C" void llama_cuda_adamw_range(llama_cuda_t *m, size_t lo, size_t n, float *params,
                                       const float *grads, float *mom1, float *mom2,
                                       const optim_adamw_t *hp, float grad_scale)
{
	s_adamw(m, lo, n, params, NULL, grads, mom1, mom2, hp, grad_scale);
}
