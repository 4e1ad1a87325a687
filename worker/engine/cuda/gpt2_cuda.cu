/*
 * gpt2_cuda: GPT-2 on one GPU (see gpt2_cuda.h): the parameter layout, the
 * activation arena, and forward and backward as a sequence of cuBLASLt
 * GEMMs (cuda_gemm.cu), attention (cuda_attention.cu) and kernels
 * (cuda_kernels.cu), in the order of the CPU engine's gpt2.c so that the two
 * can be read side by side.
 *
 * Layout. The tensor table is gpt2.c's (same order, offsets and decay
 * flags), rebuilt here from the config because the CPU model is not linked
 * in; tests/gpu/test_gpu_step.c checks that the two agree. Linear weights
 * are (in, out), so y = x @ W + b is a plain GEMM, dx = dy @ W^T and
 * dW += x^T @ dy use the transposed operands of cuda_gemm_run. The LM head
 * is tied to wte (V, C). Residual additions: res = x + y @ W + b in one
 * GEMM reading x as its C and writing res as its D (cuda_gemm_args_t's
 * C_in), as the CPU engine's sum post-op, without copying x first.
 *
 * Arena (per-layer tensors indexed with the max sizes, as in gpt2.c):
 *   encoded (N, C) f32; per layer: ln1 (N, C) bf16, ln1 mean/rstd (N),
 *   qkv (N, 3C) f32, att (B, H, T, T) bf16 (fused attention instead:
 *   qkv16 (N, 3C) bf16, the QKV GEMM's output that the flash kernels read
 *   in place, and att_lse (B, H, T) f32), atty (N, C) bf16, res2 (N, C) f32,
 *   ln2 (N, C) bf16, ln2 mean/rstd, fch (N, 4C) bf16 (before GELU),
 *   gelu (N, 4C) bf16, res3 (N, C) f32; lnf (N, C) bf16 and its mean/rstd;
 *   logits (N, V) bf16; dlogits (N, V) bf16; losses (N), the loss;
 *   backward scratch: dres (N, C) f32 + bf16, dbig (N, 4C) bf16 (and f32
 *   for GEMM attention's dqkv), dsmall (N, C) f32 (dlnf) and bf16 (the
 *   layers' dx of attention and MLP, as their GEMMs write them),
 *   column-sum partials, the sum of squares, attention scratch; token ids
 *   and the embedding-gradient index (int32).
 * Unlike the CPU engine, dlogits has a buffer of its own, so the logits
 * stay valid; forward with targets writes it (for a loss scale of 1) in the
 * cross-entropy kernel that reads the logits anyway, and backward's LM-head
 * products take the loss scale as their alpha. Inside the layers the
 * gradients GEMMs hand to kernels are bf16 (dx of the MLP and attention,
 * into LayerNorm's and attention's backward; the residual's gradient dres
 * stays fp32 beside its bf16 copy, which the bias gradients are summed
 * from), as the activations are. GELU's output is kept (bf16) instead
 * of recomputed. GELU runs in the FC GEMM's epilogue (fch, its
 * input, written beside its output) and its backward in the epilogue of
 * the GEMM that makes dgelu (reading fch), so the (N, 4C) activations are
 * not read and written again by kernels of their own; both are bf16, as
 * the GEMMs that read them want.
 *
 * Streaming (ZeRO-2/3, gpt2_cuda.h). Every kernel gets its parameters
 * from gpt2_cuda_p_params_get and its gradient destination from
 * gpt2_cuda_p_grad_begin, which are the model's own buffers, or a range
 * fetched from the caller and a zeroed bucket handed back by
 * gpt2_cuda_p_params_put / gpt2_cuda_p_grad_end. A layer's tensors are
 * addressed from the layer's first float (P, P16, G), so one code path
 * serves both. wte comes in blocks of rows when streamed: the embedding
 * adds each block's rows, and the LM head's GEMMs read and write the
 * block's columns of the logits and dlogits in place (rows the logits' ld
 * apart).
 *
 * Tensor parallelism (gpt2_cuda_new_tp, t > 1): the table, the flat
 * buffers and the arena are a TP rank's (gpt2.c's at the same t: split
 * tensors cut in t, wte's rows padded; the residual stream and the
 * LayerNorms at N/t rows, the rest at this rank's heads, features and
 * vocabulary rows), and forward and backward are gpt2_cuda_tp.cu's; the
 * struct and the helpers both files use are in gpt2_cuda_priv.h. With
 * t = 1 nothing here changes.
 */
#include <errno.h>
#include "gpt2_cuda.h"

#include <cuda_bf16.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_attention.h"
#include "cuda_check.h"
#include "cuda_gemm.h"
#include "cuda_kernels.h"

#include "gpt2_cuda_priv.h"
extern "C" {
#include "tp.h"
}

/* ---- layout ---- */

/* Parameters of a TP rank of t (1: none): wte's rows padded to a multiple
 * of t and cut in t, the layers' split matrices and biases in t
 * (model.h's tp_split), the rest whole. */
static size_t s_num_params(const gpt2_config_t *c, int t)
{
	size_t C = (size_t)c->n_embd, Cf = C / (size_t)t;
	size_t Vl = ((size_t)c->vocab_size + (size_t)t - 1) / (size_t)t;
	return Vl * C + (size_t)c->seq_len * C + (size_t)c->n_layer * (12 * C * Cf + 7 * Cf + 6 * C) +
	       2 * C;
}

/* gpt2.c's s_build_tensor_table at TP size m->tp, as offsets and decay
 * segments */
static bool s_build_table(gpt2_cuda_t *m)
{
	const gpt2_config_t *c = &m->cfg;
	size_t C = (size_t)c->n_embd, Cf = C / (size_t)m->tp;
	size_t sizes[N_LAYER_TENSORS] = {C, C, C * 3 * Cf, 3 * Cf, Cf * C, C, C, C, C * 4 * Cf, 4 * Cf, 4 * Cf * C, C};
	bool decay[N_LAYER_TENSORS] = {false, false, true, false, true, false,
				       false, false, true, false, true, false};
	size_t off = 0;
	int max_segs = 2 + N_LAYER_TENSORS * c->n_layer + 2;
	m->segs = (segment_t *)calloc((size_t)max_segs, sizeof *m->segs);
	if (!m->segs)
		return false;
	m->n_segs = 0;
#define ADD(n, dec)                                                                               \
	do {                                                                                      \
		if (m->n_segs > 0 && m->segs[m->n_segs - 1].decay == (dec))                       \
			m->segs[m->n_segs - 1].hi += (n);                                          \
		else {                                                                            \
			m->segs[m->n_segs].lo = off;                                               \
			m->segs[m->n_segs].hi = off + (n);                                         \
			m->segs[m->n_segs++].decay = (dec);                                        \
		}                                                                                 \
		off += (n);                                                                       \
	} while (0)
	ADD((size_t)m->Vl * C, true); /* wte */
	m->off_wpe = off;
	ADD((size_t)c->seq_len * C, true); /* wpe */
	for (int l = 0; l < c->n_layer; l++)
		for (int i = 0; i < N_LAYER_TENSORS; i++) {
			if (l == 0)
				m->offsets[i] = off;
			ADD(sizes[i], decay[i]);
		}
	m->layer_floats = 12 * C * Cf + 7 * Cf + 6 * C;
	m->off_lnf = off;
	ADD(C, false); /* ln_f.weight */
	ADD(C, false); /* ln_f.bias */
#undef ADD
	m->n_params = off;
	return off == s_num_params(c, m->tp);
}

/* Carve n elements of `size` bytes at *off (256-byte aligned: cuBLASLt's
 * fastest kernels want 16, the heuristic looks at up to 256). */
static void *s_carve(char *base, size_t *off, size_t n, size_t size)
{
	void *p = base ? base + *off : NULL;
	*off += (n * size + 255) / 256 * 256;
	return p;
}

/* The logits' and dlogits' row stride: the vocabulary rounded up to 64
 * entries. cuBLASLt has fast kernels only for aligned rows and a vocabulary
 * dimension to match: at the spec's vocabulary, 50257, its LM-head GEMMs
 * fell back to a generic kernel and a GPT-2 124M step on an H200 took
 * 632 ms against 458 at 50304 (bench/RESULTS.md). So the model with its
 * own parameters and gradients (s_vocab_gemm) runs them over all ld
 * columns: the padding columns of the logits multiply the rows that follow
 * wte in params16 (wpe's) and are never read; the dlogits' padding columns
 * are zeroed once at create and never written, so the products that use
 * them add exact zeros to the gradients that follow wte and to dlnf. */
size_t gpt2_cuda_p_logits_ld(int V)
{
	return ((size_t)V + 63) / 64 * 64;
}

/* How many vocabulary columns the LM head's GEMMs run over: ld where the
 * model holds its parameters and gradients whole (no streaming) and enough
 * of them follow wte, else V. */
static int s_vocab_gemm(const gpt2_cuda_t *m);

/* The arena for (max_B, max_T) on a TP rank of t (1: none), as in gpt2.c:
 * the residual stream and the LayerNorms hold n = N/t rows (sequence
 * parallel), the rest all N rows of this rank's H/t heads, 4C/t features
 * and Vl vocabulary rows. With base NULL, only measures it. */
static size_t s_layout(acts_t *a, char *base, const gpt2_config_t *cfg, int max_B, int max_T,
                       bool fused, int t)
{
	size_t L = (size_t)cfg->n_layer, C = (size_t)cfg->n_embd;
	size_t V = ((size_t)cfg->vocab_size + (size_t)t - 1) / (size_t)t;
	size_t H = (size_t)cfg->n_head / (size_t)t, Cf = C / (size_t)t;
	size_t N = (size_t)max_B * (size_t)max_T, n = (N + (size_t)t - 1) / (size_t)t;
	size_t f = sizeof(float), h = sizeof(uint16_t);
	size_t off = 0;
	a->encoded = (float *)s_carve(base, &off, n * C, f);
	a->ln1 = (uint16_t *)s_carve(base, &off, L * n * C, h);
	a->ln1_mean = (float *)s_carve(base, &off, L * n, f);
	a->ln1_rstd = (float *)s_carve(base, &off, L * n, f);
	if (fused) {
		a->qkv = NULL;
		a->qkv16 = (uint16_t *)s_carve(base, &off, L * N * 3 * Cf, h);
		a->att = NULL;
		a->att_lse = (float *)s_carve(base, &off, L * N * H, f);
	} else {
		a->qkv = (float *)s_carve(base, &off, L * N * 3 * Cf, f);
		a->qkv16 = NULL;
		a->att = (uint16_t *)s_carve(base, &off, L * N * H * (size_t)max_T, h);
		a->att_lse = NULL;
	}
	a->atty = (uint16_t *)s_carve(base, &off, L * N * Cf, h);
	a->res2 = (float *)s_carve(base, &off, L * n * C, f);
	a->ln2 = (uint16_t *)s_carve(base, &off, L * n * C, h);
	a->ln2_mean = (float *)s_carve(base, &off, L * n, f);
	a->ln2_rstd = (float *)s_carve(base, &off, L * n, f);
	a->fch = (uint16_t *)s_carve(base, &off, L * N * 4 * Cf, h);
	a->gelu = (uint16_t *)s_carve(base, &off, L * N * 4 * Cf, h);
	a->res3 = (float *)s_carve(base, &off, L * n * C, f);
	a->lnf = (uint16_t *)s_carve(base, &off, n * C, h);
	a->lnf_mean = (float *)s_carve(base, &off, n, f);
	a->lnf_rstd = (float *)s_carve(base, &off, n, f);
	a->logits = (uint16_t *)s_carve(base, &off, N * gpt2_cuda_p_logits_ld((int)V), h);
	a->dlogits = (uint16_t *)s_carve(base, &off, N * gpt2_cuda_p_logits_ld((int)V), h);
	a->losses = (float *)s_carve(base, &off, N, f);
	a->loss = (float *)s_carve(base, &off, 1, f);
	a->dres = (float *)s_carve(base, &off, n * C, f);
	a->dres16 = (uint16_t *)s_carve(base, &off, n * C, h);
	a->dbig = fused ? NULL : (float *)s_carve(base, &off, N * 4 * Cf, f);
	a->dbig16 = (uint16_t *)s_carve(base, &off, N * 4 * Cf, h);
	a->dsmall = (float *)s_carve(base, &off, N * C, f);
	a->dsmall16 = (uint16_t *)s_carve(base, &off, N * C, h);
	size_t cs = cuda_colsum_scratch_floats((int)N, (int)(4 * Cf));
	if (t > 1 && cuda_colsum_scratch_floats((int)N, (int)C) > cs)
		cs = cuda_colsum_scratch_floats((int)N, (int)C);
	a->colsum = (float *)s_carve(base, &off, cs, f);
	a->sumsq = (double *)s_carve(base, &off, 1, sizeof(double));
	a->sumsq_scratch = (double *)s_carve(base, &off, cuda_sum_squares_scratch(), sizeof(double));
	a->att_scratch = s_carve(base, &off,
				 cuda_attention_scratch_bytes(max_B, max_T, (int)Cf, (int)H, fused), 1);
	a->ids = (int32_t *)s_carve(base, &off, 5 * N + 1, sizeof(int32_t));
	a->full16 = NULL;
	a->dloc = a->ce = NULL;
	if (t > 1) {
		a->full16 = (uint16_t *)s_carve(base, &off, N * C, h);
		a->dloc = (float *)s_carve(base, &off, n * C, f);
		a->ce = (float *)s_carve(base, &off, ((size_t)t + 4) * N, f);
	}
	return off;
}

/* A bound in double on the arena's size, so that absurd shapes are refused
 * before s_layout's size_t arithmetic could overflow. */
static double s_arena_bound(const gpt2_config_t *cfg, double B, double T)
{
	double L = cfg->n_layer, C = cfg->n_embd, V = cfg->vocab_size, H = cfg->n_head;
	return B * T * ((L + 2) * (64 * C + 8 * H * T + 64) + 6 * (V + 64)) + 1e9;
}

/* ---- create and free ---- */

/* A call the contract rules out: one line, exit 70 (gpt2_cuda.h). */
void gpt2_cuda_p_misuse(const char *what)
{
	fprintf(stderr, "ringworker: fatal: %s\n", what);
	exit(CUDA_EXIT_MISUSE);
}


static const double GIB = 1073741824.0;

extern "C" gpt2_cuda_t *gpt2_cuda_create(const gpt2_config_t *cfg, int max_B, int max_T,
                                         unsigned flags, char *err, size_t errlen)
{
	gpt2_cuda_t *m = NULL;
	(void)gpt2_cuda_new(cfg, max_B, max_T, flags, &m, err, errlen);
	return m;
}

extern "C" int gpt2_cuda_new(const gpt2_config_t *cfg, int max_B, int max_T, unsigned flags,
                             gpt2_cuda_t **ret_model, char *err, size_t errlen)
{
	return gpt2_cuda_new_tp(cfg, max_B, max_T, flags, NULL, ret_model, err, errlen);
}

/* gpt2.c's rules for a TP group (heads and the sequence divide by t), and
 * the group's device side: the replicated tensors of the local table. */
static int s_tp_check(const gpt2_config_t *cfg, int max_T, const model_tp_t *tp, char *err,
                      size_t errlen)
{
	static const char *const names[] = {"model.n_head", "the sequence length (sequence parallelism)"};
	int dims[] = {cfg->n_head, max_T};
	return tp_check(tp, names, dims, tp && tp->size > 1 ? 2 : 0, err, errlen);
}

static int s_tp_init(gpt2_cuda_t *m, const model_tp_t *tp, char *err, size_t errlen)
{
	if (m->tp <= 1)
		return 0;
	model_tensor_t *t = NULL;
	int n = 0;
	size_t max_range = 0;
	if (gpt2_layout_tp(&m->cfg, m->tp, &t, &n, &max_range) < 0) {
		snprintf(err, errlen, "out of host memory");
		return -ENOMEM;
	}
	int rc = n > 0 && t[n - 1].offset + t[n - 1].numel == m->n_params ? 0 : -EIO;
	if (rc < 0)
		snprintf(err, errlen, "internal error: the GPU's tensor-parallel layout is not gpt2.c's");
	else
		rc = cuda_tprow_init(&m->tpr, tp, m->stream, t, n, err, errlen);
	free(t);
	return rc;
}

/* Point the fp32 buffers the model holds into its state allocation, one
 * after the other (n_f32 floats), then the bf16 copy. */
static void s_point_state(gpt2_cuda_t *m, bool params, bool grads, bool moments, size_t n_f32)
{
	float *next = (float *)m->state;
	if (params) {
		m->params = next;
		next += m->n_params;
	}
	if (grads) {
		m->grads = next;
		next += m->n_params;
	}
	if (moments) {
		m->mom1 = next;
		m->mom2 = next + m->n_params;
	}
	if (params)
		m->params16 = (uint16_t *)((float *)m->state + n_f32);
}

extern "C" int gpt2_cuda_new_tp(const gpt2_config_t *cfg, int max_B, int max_T, unsigned flags,
                                const model_tp_t *tp, gpt2_cuda_t **ret_model, char *err,
                                size_t errlen)
{
	int code = -EIO;
	if (gpt2_config_check(cfg, max_B, max_T, err, errlen) < 0 ||
	    s_tp_check(cfg, max_T, tp, err, errlen) < 0)
		return -EINVAL;
	const int t = tp && tp->size > 1 ? tp->size : 1;
	int n_dev = 0;
	cudaError_t rc = cudaGetDeviceCount(&n_dev);
	if (rc != cudaSuccess || n_dev == 0) {
		(void)cudaGetLastError();
		snprintf(err, errlen, "no CUDA GPU: %s",
			 rc != cudaSuccess ? cudaGetErrorString(rc) : "no device found");
		return -ENODEV;
	}
	double n_params = (double)s_num_params(cfg, t);
	const bool params = !(flags & GPT2_CUDA_NO_PARAMS), grads = !(flags & GPT2_CUDA_NO_GRADS),
		   moments = !(flags & GPT2_CUDA_NO_MOMENTS);
	/* fp32: params, grads, m, v unless left out; the bf16 copy with params */
	const size_t n_f32 = s_num_params(cfg, t) * ((params ? 1 : 0) + (grads ? 1 : 0) + (moments ? 2 : 0));
	double state = (double)n_f32 * 4.0 + (params ? n_params * 2.0 : 0.0);
	if (s_arena_bound(cfg, max_B, max_T) > 1e17 || (double)max_B * max_T > 2147483647.0 / 8) {
		snprintf(err, errlen,
			 "out of GPU memory: train.batch_size %d x model.seq_len %d tokens is far beyond "
			 "any GPU's memory; lower train.batch_size or model.seq_len",
			 max_B, max_T);
		return -ENOMEM;
	}
	const bool fused = (flags & GPT2_CUDA_FUSED_ATTENTION) &&
			   cuda_flash_supported(cfg->n_embd, cfg->n_head);
	acts_t probe;
	double act = (double)s_layout(&probe, NULL, cfg, max_B, max_T, fused, t) + (32 << 20);
	size_t free_b = 0, total_b = 0;
	rc = cudaMemGetInfo(&free_b, &total_b);
	if (rc != cudaSuccess) {
		(void)cudaGetLastError();
		snprintf(err, errlen, "no CUDA GPU: %s", cudaGetErrorString(rc));
		return -ENODEV;
	}
	if (state + act > (double)free_b) {
		snprintf(err, errlen,
			 "out of GPU memory: need %.1f GiB for activations (train.batch_size %d x "
			 "model.seq_len %d tokens) and %.1f GiB for parameters, gradients and AdamW state, "
			 "but %.1f GiB is free; lower train.batch_size or model.seq_len",
			 act / GIB, max_B, max_T, state / GIB, (double)free_b / GIB);
		return -ENOMEM;
	}

	gpt2_cuda_t *m = (gpt2_cuda_t *)calloc(1, sizeof *m);
	if (!m) {
		snprintf(err, errlen, "out of host memory");
		return -ENOMEM;
	}
	m->cfg = *cfg;
	m->max_B = max_B;
	m->max_T = max_T;
	m->fused = fused;
	m->tp = t;
	m->Vl = (cfg->vocab_size + t - 1) / t;
	size_t N = (size_t)max_B * (size_t)max_T;
	if (!s_build_table(m)) {
		snprintf(err, errlen, "out of host memory");
		code = -ENOMEM;
		goto fail;
	}
	if ((rc = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking)) != cudaSuccess ||
	    (rc = cudaEventCreateWithFlags(&m->staged, cudaEventDisableTiming)) != cudaSuccess) {
		snprintf(err, errlen, "no CUDA GPU: %s", cudaGetErrorString(rc));
		code = -ENODEV;
		goto fail_cuda;
	}
	m->gemm = cuda_gemm_create(m->stream, err, errlen);
	if (!m->gemm) {
		code = -ENOMEM; /* its handle, cache or workspace (cuBLASLt fails to start for want of memory too) */
		goto fail;
	}
	m->state_bytes = n_f32 * sizeof(float) + (params ? (m->n_params * 2 + 255) / 256 * 256 : 256);
	if ((rc = cudaMalloc(&m->state, m->state_bytes)) != cudaSuccess) {
		m->state = NULL;
		snprintf(err, errlen,
			 "out of GPU memory: need %.1f GiB for %zu parameters, their gradients and AdamW "
			 "state: %s",
			 (double)m->state_bytes / GIB, m->n_params, cudaGetErrorString(rc));
		code = -ENOMEM;
		goto fail_cuda;
	}
	s_point_state(m, params, grads, moments, n_f32);
	if ((rc = cudaMemset(m->state, 0, m->state_bytes)) != cudaSuccess) {
		snprintf(err, errlen, "CUDA error clearing the parameters: %s", cudaGetErrorString(rc));
		goto fail_cuda;
	}
	m->arena_bytes = s_layout(&m->a, NULL, cfg, max_B, max_T, fused, t);
	if ((rc = cudaMalloc(&m->arena, m->arena_bytes)) != cudaSuccess) {
		m->arena = NULL;
		snprintf(err, errlen,
			 "out of GPU memory: need %.1f GiB for activations (train.batch_size %d x "
			 "model.seq_len %d tokens): %s; lower train.batch_size or model.seq_len",
			 (double)m->arena_bytes / GIB, max_B, max_T, cudaGetErrorString(rc));
		code = -ENOMEM;
		goto fail_cuda;
	}
	s_layout(&m->a, (char *)m->arena, cfg, max_B, max_T, fused, t);
	if ((rc = cudaMemset(m->a.dlogits, 0, N * gpt2_cuda_p_logits_ld(m->Vl) * sizeof(uint16_t))) !=
	    cudaSuccess) {
		snprintf(err, errlen, "CUDA error clearing the activations: %s", cudaGetErrorString(rc));
		goto fail_cuda;
	}
	cuda_attention_scratch_carve(&m->att_s, m->a.att_scratch, max_B, max_T, cfg->n_embd / t,
				     cfg->n_head / t, fused);
	if ((rc = cudaMallocHost(&m->host_ids, (5 * N + 1) * sizeof(int32_t))) != cudaSuccess) {
		m->host_ids = NULL;
		snprintf(err, errlen, "out of pinned host memory for %zu token ids: %s", 5 * N + 1,
			 cudaGetErrorString(rc));
		code = -ENOMEM;
		goto fail_cuda;
	}
	m->host_counts = (int32_t *)calloc((size_t)cfg->vocab_size + 1, sizeof(int32_t));
	m->ready = (cudaEvent_t *)calloc((size_t)cfg->n_layer + 2, sizeof *m->ready);
	if (!m->host_counts || !m->ready) {
		snprintf(err, errlen, "out of host memory");
		code = -ENOMEM;
		goto fail;
	}
	for (int i = 0; i < cfg->n_layer + 2; i++)
		if ((rc = cudaEventCreateWithFlags(&m->ready[i], cudaEventDisableTiming)) != cudaSuccess) {
			m->ready[i] = NULL;
			snprintf(err, errlen, "cannot create CUDA events: %s", cudaGetErrorString(rc));
			goto fail_cuda;
		}
	if ((code = s_tp_init(m, tp, err, errlen)) < 0)
		goto fail;
	*ret_model = m;
	return 0;

fail_cuda:
	(void)cudaGetLastError();
fail:
	gpt2_cuda_free(m);
	return code;
}

extern "C" void gpt2_cuda_free(gpt2_cuda_t *m)
{
	if (!m)
		return;
	if (m->stream)
		cudaStreamSynchronize(m->stream);
	cuda_gemm_free(m->gemm);
	cuda_tprow_free(&m->tpr);
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
	if (m->stream)
		cudaStreamDestroy(m->stream);
	if (m->ready)
		for (int i = 0; i < m->cfg.n_layer + 2; i++)
			if (m->ready[i])
				cudaEventDestroy(m->ready[i]);
	free(m->ready);
	free(m->host_counts);
	free(m->segs);
	free(m);
}

extern "C" void gpt2_cuda_set_grads_ready(gpt2_cuda_t *m, gpt2_cuda_grads_ready_fn fn, void *ctx)
{
	if (fn && !m->grads)
		gpt2_cuda_p_misuse("gpt2_cuda_set_grads_ready on a model without a gradient buffer");
	m->ready_fn = fn;
	m->ready_ctx = ctx;
}

extern "C" void gpt2_cuda_stream_grads(gpt2_cuda_t *m, gpt2_cuda_grad_begin_fn begin,
                                       gpt2_cuda_grad_end_fn end, void *ctx, size_t max_range)
{
	const size_t C = (size_t)m->cfg.n_embd;
	if (m->grads || !begin || !end)
		gpt2_cuda_p_misuse("gpt2_cuda_stream_grads needs a model created with GPT2_CUDA_NO_GRADS and both"
			 " functions");
	if (max_range < m->layer_floats || max_range < (size_t)m->cfg.seq_len * C || max_range < C)
		gpt2_cuda_p_misuse("gpt2_cuda_stream_grads: max_range holds less than a layer, wpe or a wte row");
	m->stream_begin = begin;
	m->stream_end = end;
	m->stream_ctx = ctx;
	size_t rows = max_range / C;
	m->wte_rows = rows < (size_t)m->Vl ? (int)rows : m->Vl; /* local rows (padded) under TP */
}

/* Where backward adds the gradients [lo, hi): the model's buffer, or a
 * zeroed bucket of the gradient stream. */
float *gpt2_cuda_p_grad_begin(gpt2_cuda_t *m, size_t lo, size_t hi)
{
	if (!m->stream_begin)
		return m->grads + lo;
	return m->stream_begin(m->stream_ctx, lo, hi);
}

/* The kernels that add into g are enqueued: hand a streamed bucket back
 * behind an event (the callback waits for it before it returns). */
void gpt2_cuda_p_grad_end(gpt2_cuda_t *m, float *g, size_t lo, size_t hi)
{
	if (!m->stream_end)
		return;
	CUDA_CHECK(cudaEventRecord(m->ready[0], m->stream));
	m->stream_end(m->stream_ctx, g, lo, hi, m->ready[0]);
}

extern "C" int gpt2_cuda_stream_params(gpt2_cuda_t *m, gpt2_cuda_params_fetch_fn fetch,
                                       gpt2_cuda_params_release_fn release, void *ctx,
                                       char *err, size_t errlen)
{
	if (m->params || !m->stream_begin || !fetch || !release)
		gpt2_cuda_p_misuse("gpt2_cuda_stream_params needs a model created with GPT2_CUDA_NO_PARAMS whose"
			 " gradients are streamed, and both functions");
	size_t max_range = m->wte_rows * (size_t)m->cfg.n_embd;
	size_t lw = m->layer_floats, wpe = (size_t)m->cfg.seq_len * m->cfg.n_embd;
	max_range = max_range > lw ? max_range : lw;
	max_range = max_range > wpe ? max_range : wpe;
	cudaError_t rc = cudaMalloc((void **)&m->fetched16, max_range * sizeof(uint16_t));
	if (rc != cudaSuccess) {
		m->fetched16 = NULL;
		(void)cudaGetLastError();
		snprintf(err, errlen, "out of GPU memory: %.1f MiB for the bf16 copy of a fetched range: %s",
			 (double)max_range * 2 / 1048576.0, cudaGetErrorString(rc));
		return -1;
	}
	/* the fetch orders (gpt2.h): forward wpe, wte blocks, layers, ln_f, wte
	 * blocks; backward wte blocks, ln_f, layers from the last */
	const int L = m->cfg.n_layer, V = m->Vl, C = m->cfg.n_embd; /* wte's local rows */
	const int blocks = (V + m->wte_rows - 1) / m->wte_rows;
	m->n_fwd = 1 + 2 * blocks + L + 1;
	m->n_bwd = blocks + 1 + L;
	m->order = (size_t *)calloc(2 * (size_t)(m->n_fwd + m->n_bwd), sizeof(size_t));
	if (!m->order) {
		snprintf(err, errlen, "out of host memory");
		return -1;
	}
	size_t *o = m->order;
	const size_t first_layer = m->off_wpe + (size_t)m->cfg.seq_len * C;
#define PUSH(lo, hi) (*o++ = (lo), *o++ = (hi))
#define PUSH_BLOCKS()                                                                       \
	for (int v0 = 0; v0 < V; v0 += m->wte_rows)                                          \
		PUSH((size_t)v0 * C, (size_t)(m->wte_rows < V - v0 ? v0 + m->wte_rows : V) * C)
	PUSH(m->off_wpe, first_layer);
	PUSH_BLOCKS();
	for (int l = 0; l < L; l++)
		PUSH(first_layer + (size_t)l * m->layer_floats, first_layer + (size_t)(l + 1) * m->layer_floats);
	PUSH(m->off_lnf, m->off_lnf + 2 * (size_t)C);
	PUSH_BLOCKS();
	PUSH_BLOCKS();
	PUSH(m->off_lnf, m->off_lnf + 2 * (size_t)C);
	for (int l = L - 1; l >= 0; l--)
		PUSH(first_layer + (size_t)l * m->layer_floats, first_layer + (size_t)(l + 1) * m->layer_floats);
#undef PUSH_BLOCKS
#undef PUSH
	m->fetch = fetch;
	m->release = release;
	m->fetch_ctx = ctx;
	return 0;
}

/* A pass (forward or backward) starts: its fetches are order[pos .. end). */
void gpt2_cuda_p_pass(gpt2_cuda_t *m, bool backward)
{
	m->pos = backward ? m->n_fwd : 0;
	m->end = backward ? m->n_fwd + m->n_bwd : m->n_fwd;
}

/* Parameters [lo, hi) for the kernels about to be enqueued: fp32, and with
 * need16 bf16 (both indexed from lo). The model's own buffers, or a range
 * fetched from the stream (converted to bf16 in fetched16). */
params_view_t gpt2_cuda_p_params_get(gpt2_cuda_t *m, size_t lo, size_t hi, bool need16)
{
	params_view_t v;
	if (!m->fetch) {
		if (!m->params)
			gpt2_cuda_p_misuse("gpt2_cuda: forward or backward on a model without parameters before"
				 " gpt2_cuda_stream_params");
		v.p = m->params + lo;
		v.p16 = m->params16 + lo;
		return v;
	}
	const size_t *at = m->order + 2 * (size_t)m->pos;
	if (m->pos >= m->end || at[0] != lo || at[1] != hi)
		gpt2_cuda_p_misuse("gpt2_cuda: parameters fetched out of order");
	m->pos++;
	/* the pass's next range, for the caller to gather meanwhile */
	const bool last = m->pos >= m->end;
	v.p = m->fetch(m->fetch_ctx, lo, hi, last ? 0 : at[2], last ? 0 : at[3]);
	v.p16 = NULL;
	if (need16) {
		cuda_to_bf16(m->fetched16, v.p, hi - lo, m->stream);
		v.p16 = m->fetched16;
	}
	return v;
}

/* The kernels that read a fetched range are enqueued: wait for them, then
 * hand it back (the next fetch reuses fetched16 and may reuse the slot). */
void gpt2_cuda_p_params_put(gpt2_cuda_t *m, params_view_t v)
{
	if (!m->fetch)
		return;
	CUDA_CHECK(cudaStreamSynchronize(m->stream));
	m->release(m->fetch_ctx, v.p);
}

/* Gradients [offset, offset + n) are final once the enqueued work is done:
 * record event k and tell the callback. */
void gpt2_cuda_p_grads_ready(gpt2_cuda_t *m, int k, size_t offset, size_t n)
{
	if (!m->ready_fn)
		return;
	CUDA_CHECK(cudaEventRecord(m->ready[k], m->stream));
	m->ready_fn(m->ready_ctx, offset, n, m->ready[k]);
}

extern "C" const gpt2_config_t *gpt2_cuda_config(const gpt2_cuda_t *m)
{
	return &m->cfg;
}

extern "C" size_t gpt2_cuda_num_params(const gpt2_cuda_t *m)
{
	return m->n_params;
}

extern "C" size_t gpt2_cuda_state_bytes(const gpt2_cuda_t *m)
{
	return m->state_bytes + cuda_tprow_bytes(&m->tpr);
}

extern "C" void gpt2_cuda_tp_comm(const gpt2_cuda_t *m, model_tp_comm_t *ret)
{
	*ret = m->tp > 1 ? m->tpr.vol : model_tp_comm_t{};
}

extern "C" size_t gpt2_cuda_activation_bytes(const gpt2_cuda_t *m)
{
	return m->arena_bytes;
}

extern "C" cudaStream_t gpt2_cuda_stream(const gpt2_cuda_t *m)
{
	return m->stream;
}

extern "C" bool gpt2_cuda_fused_attention(const gpt2_cuda_t *m)
{
	return m->fused;
}

extern "C" double gpt2_cuda_flops_per_token(const gpt2_cuda_t *m, int T)
{
	return 6.0 * (double)m->n_params + 6.0 * m->cfg.n_layer * (m->cfg.n_embd / m->tp) * (double)T;
}

/* ---- host copies ---- */

static void s_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s)
{
	CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
	CUDA_CHECK(cudaStreamSynchronize(s));
}

extern "C" void gpt2_cuda_set_params(gpt2_cuda_t *m, const float *params)
{
	if (!m->params)
		gpt2_cuda_p_misuse("gpt2_cuda_set_params on a model created without parameters");
	s_copy(m->params, params, m->n_params * sizeof(float), cudaMemcpyHostToDevice, m->stream);
	cuda_to_bf16(m->params16, m->params, m->n_params, m->stream);
	CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

extern "C" void gpt2_cuda_get_params(gpt2_cuda_t *m, float *ret_params)
{
	if (!m->params)
		gpt2_cuda_p_misuse("gpt2_cuda_get_params on a model created without parameters");
	s_copy(ret_params, m->params, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, m->stream);
}

extern "C" void gpt2_cuda_get_grads(gpt2_cuda_t *m, float *ret_grads)
{
	if (!m->grads)
		gpt2_cuda_p_misuse("gpt2_cuda_get_grads on a model created without a gradient buffer");
	s_copy(ret_grads, m->grads, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, m->stream);
}

extern "C" void gpt2_cuda_set_moments(gpt2_cuda_t *m, const float *mom1, const float *mom2)
{
	if (!m->mom1)
		gpt2_cuda_p_misuse("gpt2_cuda_set_moments on a model created without AdamW moments");
	s_copy(m->mom1, mom1, m->n_params * sizeof(float), cudaMemcpyHostToDevice, m->stream);
	s_copy(m->mom2, mom2, m->n_params * sizeof(float), cudaMemcpyHostToDevice, m->stream);
}

extern "C" void gpt2_cuda_get_moments(gpt2_cuda_t *m, float *ret_mom1, float *ret_mom2)
{
	if (!m->mom1)
		gpt2_cuda_p_misuse("gpt2_cuda_get_moments on a model created without AdamW moments");
	s_copy(ret_mom1, m->mom1, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, m->stream);
	s_copy(ret_mom2, m->mom2, m->n_params * sizeof(float), cudaMemcpyDeviceToHost, m->stream);
}

extern "C" void gpt2_cuda_get_logits(gpt2_cuda_t *m, float *ret_logits)
{
	if (m->tp > 1)
		gpt2_cuda_p_misuse("gpt2_cuda_get_logits under tensor parallelism (each rank holds its"
				   " vocabulary block)");
	const size_t V = (size_t)m->cfg.vocab_size, n = (size_t)m->B * m->T * V;
	/* bf16 rows into the back half of the caller's floats, widened from the front */
	uint16_t *h16 = (uint16_t *)ret_logits + n;
	CUDA_CHECK(cudaMemcpy2DAsync(h16, V * sizeof(uint16_t), m->a.logits,
				     gpt2_cuda_p_logits_ld((int)V) * sizeof(uint16_t), V * sizeof(uint16_t),
				     (size_t)m->B * m->T, cudaMemcpyDeviceToHost, m->stream));
	CUDA_CHECK(cudaStreamSynchronize(m->stream));
	for (size_t i = 0; i < n; i++) {
		uint32_t bits = (uint32_t)h16[i] << 16;
		memcpy(&ret_logits[i], &bits, sizeof bits);
	}
}

/* ---- forward and backward ---- */

static int s_vocab_gemm(const gpt2_cuda_t *m)
{
	const size_t V = (size_t)m->cfg.vocab_size, C = (size_t)m->cfg.n_embd, ld = gpt2_cuda_p_logits_ld((int)V);
	if (!m->params || !m->grads || m->stream_begin || m->n_params < ld * C)
		return (int)V;
	return (int)ld;
}

/* One problem for cuda_gemm_run: C (M, N) = alpha op(A) @ op(B) [+ bias]
 * [+ C], with A's and C's stored rows lda and ldc apart (0: dense). */
static cuda_gemm_args_t s_args(int M, int N, int K, const uint16_t *A, int64_t lda, bool trans_a,
                               const uint16_t *B, bool trans_b, const float *bias, float *C,
                               int64_t ldc, bool accumulate, float alpha)
{
	cuda_gemm_args_t a;
	memset(&a, 0, sizeof a);
	a.M = M;
	a.N = N;
	a.K = K;
	a.A = A;
	a.lda = lda;
	a.trans_a = trans_a;
	a.B = B;
	a.trans_b = trans_b;
	a.C = C;
	a.ldc = ldc;
	a.bias = bias;
	a.alpha = alpha;
	a.accumulate = accumulate;
	return a;
}

/* s_args's problem, run: for a block of columns used in place */
void gpt2_cuda_p_gemm_ld(gpt2_cuda_t *m, int M, int N, int K, const uint16_t *A, int64_t lda,
                      bool trans_a, const uint16_t *B, bool trans_b, const float *bias, float *C,
                      int64_t ldc, bool accumulate, float alpha)
{
	cuda_gemm_args_t a = s_args(M, N, K, A, lda, trans_a, B, trans_b, bias, C, ldc, accumulate, alpha);
	cuda_gemm_run(m->gemm, &a);
}

/* the same, dense operands */
void gpt2_cuda_p_gemm(gpt2_cuda_t *m, int M, int N, int K, const uint16_t *A, bool trans_a,
                   const uint16_t *B, bool trans_b, const float *bias, float *C, bool accumulate)
{
	gpt2_cuda_p_gemm_ld(m, M, N, K, A, 0, trans_a, B, trans_b, bias, C, 0, accumulate, 1.0f);
}

/* C16 (M, N) = epi(A (M, K) @ op(B) [+ bias16]), bf16 output, rows ldc
 * apart (0: dense), as aux's for the GELU epilogues */
void gpt2_cuda_p_gemm16(gpt2_cuda_t *m, int M, int N, int K, const uint16_t *A, const uint16_t *B,
                     bool trans_b, const uint16_t *bias16, uint16_t *C16, int64_t ldc, cuda_gemm_epi_t epi,
                     uint16_t *aux)
{
	cuda_gemm_args_t a = s_args(M, N, K, A, 0, false, B, trans_b, NULL, NULL, ldc, false, 1.0f);
	a.C16 = C16;
	a.bias16 = bias16;
	a.epi = epi;
	a.aux = aux;
	cuda_gemm_run(m->gemm, &a);
}

/* C (M, N) = res + A (M, K) @ B (K, N) + bias, dense: a residual branch
 * added to the stream it leaves (res) into a buffer of its own (C) */
static void s_gemm_residual(gpt2_cuda_t *m, int M, int N, int K, const uint16_t *A, const uint16_t *B,
                            const float *bias, float *C, const float *res)
{
	cuda_gemm_args_t a = s_args(M, N, K, A, 0, false, B, false, bias, C, 0, true, 1.0f);
	a.C_in = res;
	cuda_gemm_run(m->gemm, &a);
}

#define LAYER_SLICE(ptr, l, per_row) ((ptr) + (size_t)(l) * maxN * (per_row))

extern "C" void gpt2_cuda_forward(gpt2_cuda_t *m, const int32_t *inputs, const int32_t *targets, int B,
                                  int T)
{
	const int L = m->cfg.n_layer, C = m->cfg.n_embd, V = m->cfg.vocab_size, H = m->cfg.n_head;
	if (B < 1 || B > m->max_B || T < 1 || T > m->max_T) {
		fprintf(stderr,
			"ringworker: fatal: gpt2_cuda_forward: batch %d x %d exceeds the model's %d x %d\n", B,
			T, m->max_B, m->max_T);
		exit(CUDA_EXIT_MISUSE);
	}
	const int N = B * T;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T;
	for (int n = 0; n < N; n++)
		if (inputs[n] < 0 || inputs[n] >= V || (targets && (targets[n] < 0 || targets[n] >= V)))
			gpt2_cuda_p_misuse("gpt2_cuda_forward: token id out of range");
	acts_t *a = &m->a;
	cudaStream_t s = m->stream;

	/* token ids and the embedding-gradient index, through the pinned
	 * staging buffer once the previous upload has left it */
	CUDA_CHECK(cudaEventSynchronize(m->staged));
	int32_t *h = m->host_ids;
	memcpy(h, inputs, (size_t)N * sizeof(int32_t));
	if (targets)
		memcpy(h + N, targets, (size_t)N * sizeof(int32_t));
	else
		memset(h + N, 0, (size_t)N * sizeof(int32_t));
	m->n_unique = cuda_embed_index_build(inputs, N, V, h + 2 * N, h + 3 * N, h + 4 * N + 1,
					     m->host_counts);
	CUDA_CHECK(cudaMemcpyAsync(a->ids, h, (5 * (size_t)N + 1) * sizeof(int32_t), cudaMemcpyHostToDevice, s));
	CUDA_CHECK(cudaEventRecord(m->staged, s));
	const int32_t *d_inputs = a->ids, *d_targets = a->ids + N;
	m->B = B;
	m->T = T;
	m->have_targets = false;
	if (m->tp > 1) {
		if (T % m->tp != 0)
			gpt2_cuda_p_misuse("gpt2_cuda_forward: T is not divisible by the tensor-parallel ranks");
		gpt2_cuda_tp_forward(m, targets != NULL);
		return;
	}

	gpt2_cuda_p_pass(m, false);
	/* wte blocks of the LM head and the embedding: all V rows at once unless
	 * the parameters are streamed */
	const int rows = m->fetch ? m->wte_rows : V;
	const size_t wpe_hi = m->off_wpe + (size_t)m->cfg.seq_len * C;
	if (!m->fetch) {
		cuda_embed_forward(a->encoded, d_inputs, m->params, m->params + m->off_wpe, B, T, C, s);
	} else { /* wpe, then each wte block's rows added (the same sums) */
		params_view_t v = gpt2_cuda_p_params_get(m, m->off_wpe, wpe_hi, false);
		cuda_embed_positions_forward(a->encoded, v.p, B, T, C, s);
		gpt2_cuda_p_params_put(m, v);
		for (int v0 = 0; v0 < V; v0 += rows) {
			const int v1 = rows < V - v0 ? v0 + rows : V;
			v = gpt2_cuda_p_params_get(m, (size_t)v0 * C, (size_t)v1 * C, false);
			cuda_embed_tokens_add(a->encoded, d_inputs, v.p, v0, v1, N, C, s);
			gpt2_cuda_p_params_put(m, v);
		}
	}
	const size_t first_layer = wpe_hi; /* after wte and wpe */
	const float *x = a->encoded;
	for (int l = 0; l < L; l++) {
		uint16_t *ln1 = LAYER_SLICE(a->ln1, l, C), *ln2 = LAYER_SLICE(a->ln2, l, C);
		float *qkv = m->fused ? NULL : LAYER_SLICE(a->qkv, l, 3 * C);
		uint16_t *qkv16 = m->fused ? LAYER_SLICE(a->qkv16, l, 3 * C) : NULL;
		uint16_t *atty = LAYER_SLICE(a->atty, l, C);
		uint16_t *att = m->fused ? NULL : LAYER_SLICE(a->att, l, (size_t)H * m->max_T);
		float *att_lse = m->fused ? LAYER_SLICE(a->att_lse, l, H) : NULL;
		float *res2 = LAYER_SLICE(a->res2, l, C), *res3 = LAYER_SLICE(a->res3, l, C);
		uint16_t *fch = LAYER_SLICE(a->fch, l, 4 * C);
		uint16_t *gelu = LAYER_SLICE(a->gelu, l, 4 * C);
		const size_t lo = first_layer + (size_t)l * m->layer_floats;
		params_view_t lp = gpt2_cuda_p_params_get(m, lo, lo + m->layer_floats, true);
#define P(which) (lp.p + (m->offsets[(which)] - m->offsets[T_LN1_W]))
#define P16(which) (lp.p16 + (m->offsets[(which)] - m->offsets[T_LN1_W]))
		cuda_layernorm_forward(NULL, ln1, LAYER_SLICE(a->ln1_mean, l, 1),
				       LAYER_SLICE(a->ln1_rstd, l, 1), x, P(T_LN1_W), P(T_LN1_B), N, C, s);
		if (m->fused) { /* q, k, v in bf16, read by the flash kernels as they lie */
			gpt2_cuda_p_gemm16(m, N, 3 * C, C, ln1, P16(T_QKV_W), false, P16(T_QKV_B), qkv16, 0,
				 CUDA_GEMM_EPI_NONE, NULL);
			cuda_flash_forward(NULL, atty, att_lse, qkv16, B, T, C, H, H, s);
		} else {
			gpt2_cuda_p_gemm(m, N, 3 * C, C, ln1, false, P16(T_QKV_W), false, P(T_QKV_B), qkv, false);
			cuda_attention_forward(m->gemm, NULL, atty, att, qkv, &m->att_s, B, T, C, H, s);
		}
		s_gemm_residual(m, N, C, C, atty, P16(T_PROJ_W), P(T_PROJ_B), res2, x);
		cuda_layernorm_forward(NULL, ln2, LAYER_SLICE(a->ln2_mean, l, 1),
				       LAYER_SLICE(a->ln2_rstd, l, 1), res2, P(T_LN2_W), P(T_LN2_B), N, C, s);
		gpt2_cuda_p_gemm16(m, N, 4 * C, C, ln2, P16(T_FC_W), false, P16(T_FC_B), gelu, 0, CUDA_GEMM_EPI_GELU,
			 fch);
		s_gemm_residual(m, N, C, 4 * C, gelu, P16(T_FCPROJ_W), P(T_FCPROJ_B), res3, res2);
#undef P
#undef P16
		gpt2_cuda_p_params_put(m, lp);
		x = res3;
	}
	params_view_t fp = gpt2_cuda_p_params_get(m, m->off_lnf, m->off_lnf + 2 * (size_t)C, false);
	cuda_layernorm_forward(NULL, a->lnf, a->lnf_mean, a->lnf_rstd, x, fp.p, fp.p + C, N, C, s);
	gpt2_cuda_p_params_put(m, fp);
	/* logits (N, V) = lnf (N, C) @ wte^T, wte (V, C): per block of rows,
	 * the block's columns of the logits (rows ld apart) */
	const int64_t ld = (int64_t)gpt2_cuda_p_logits_ld(V);
	for (int v0 = 0; v0 < V; v0 += rows) {
		const int nv = rows < V - v0 ? rows : v0 == 0 ? s_vocab_gemm(m) : V - v0;
		params_view_t v = gpt2_cuda_p_params_get(m, (size_t)v0 * C, (size_t)(v0 + nv) * C, true);
		gpt2_cuda_p_gemm16(m, N, nv, C, a->lnf, v.p16, true, NULL, a->logits + v0, ld, CUDA_GEMM_EPI_NONE, NULL);
		gpt2_cuda_p_params_put(m, v);
	}
	if (!targets)
		return;
	/* the losses, and dlogits for a loss scale of 1 (backward scales the
	 * LM head's products by its loss_scale) */
	cuda_crossentropy_forward16(a->losses, NULL, NULL, a->dlogits, a->logits, d_targets, N, V, (int)ld,
				    1.0f / (float)N, s);
	cuda_mean(a->loss, a->losses, N, s);
	m->have_targets = true;
}

extern "C" float gpt2_cuda_loss(gpt2_cuda_t *m)
{
	float loss = 0.0f;
	s_copy(&loss, m->a.loss, sizeof loss, cudaMemcpyDeviceToHost, m->stream);
	return loss;
}

extern "C" void gpt2_cuda_zero_grad(gpt2_cuda_t *m)
{
	if (m->grads) /* streamed: every bucket comes zeroed */
		CUDA_CHECK(cudaMemsetAsync(m->grads, 0, m->n_params * sizeof(float), m->stream));
}

extern "C" void gpt2_cuda_backward(gpt2_cuda_t *m, float loss_scale)
{
	if (!m->have_targets)
		gpt2_cuda_p_misuse("gpt2_cuda_backward without a forward with targets");
	const int L = m->cfg.n_layer, C = m->cfg.n_embd, V = m->cfg.vocab_size, H = m->cfg.n_head;
	const int B = m->B, T = m->T, N = B * T;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T;
	acts_t *a = &m->a;
	cudaStream_t s = m->stream;
	const int32_t *d_uniq = a->ids + 2 * N, *d_starts = a->ids + 3 * N, *d_rows = a->ids + 4 * N + 1;
	if (m->tp > 1) {
		gpt2_cuda_tp_backward(m, loss_scale);
		return;
	}

	gpt2_cuda_p_pass(m, true);
	const int64_t ld = (int64_t)gpt2_cuda_p_logits_ld(V); /* dlogits' row stride */
	/* forward wrote dlogits for a loss scale of 1: the LM head's products
	 * take loss_scale as their alpha */
	/* dwte (V, C) += dlogits^T @ lnf (N, C): one GEMM, or per block of wte
	 * rows when streamed (dlogits' columns of the block); and
	 * dlnf (N, C) = dlogits @ wte: one GEMM over the model's wte, or summed
	 * over the blocks when the parameters are streamed */
	const int rows = m->stream_begin ? m->wte_rows : V;
	for (int v0 = 0; v0 < V; v0 += rows) {
		const int nv = rows < V - v0 ? rows : v0 == 0 ? s_vocab_gemm(m) : V - v0;
		const size_t lo = (size_t)v0 * C, hi = lo + (size_t)nv * C;
		float *g = gpt2_cuda_p_grad_begin(m, lo, hi);
		gpt2_cuda_p_gemm_ld(m, nv, C, N, a->dlogits + v0, ld, true, a->lnf, false, NULL, g, 0, true, loss_scale);
		gpt2_cuda_p_grad_end(m, g, lo, hi);
		if (!m->fetch)
			continue;
		params_view_t v = gpt2_cuda_p_params_get(m, lo, hi, true);
		gpt2_cuda_p_gemm_ld(m, N, C, nv, a->dlogits + v0, ld, false, v.p16, false, NULL, a->dsmall, 0,
			  v0 > 0, loss_scale);
		gpt2_cuda_p_params_put(m, v);
	}
	if (!m->fetch)
		gpt2_cuda_p_gemm_ld(m, N, C, s_vocab_gemm(m), a->dlogits, ld, false, m->params16, false, NULL,
			  a->dsmall, 0, false, loss_scale);
	{
		params_view_t w = gpt2_cuda_p_params_get(m, m->off_lnf, m->off_lnf + 2 * (size_t)C, false);
		float *g = gpt2_cuda_p_grad_begin(m, m->off_lnf, m->off_lnf + 2 * (size_t)C);
		CUDA_CHECK(cudaMemsetAsync(a->dres, 0, (size_t)N * C * sizeof(float), s));
		cuda_layernorm_backward(a->dres, a->dres16, g, g + C, a->dsmall,
					LAYER_SLICE(a->res3, L - 1, C), a->lnf_mean, a->lnf_rstd, w.p, N, C,
					a->colsum, s);
		gpt2_cuda_p_grad_end(m, g, m->off_lnf, m->off_lnf + 2 * (size_t)C);
		gpt2_cuda_p_params_put(m, w);
	}
	gpt2_cuda_p_grads_ready(m, 0, m->off_lnf, 2 * (size_t)C);
	const size_t first_layer = m->off_wpe + (size_t)m->cfg.seq_len * C; /* after wte and wpe */
	for (int l = L - 1; l >= 0; l--) {
		const float *x = l == 0 ? a->encoded : LAYER_SLICE(a->res3, l - 1, C);
		uint16_t *ln1 = LAYER_SLICE(a->ln1, l, C), *ln2 = LAYER_SLICE(a->ln2, l, C);
		float *qkv = m->fused ? NULL : LAYER_SLICE(a->qkv, l, 3 * C);
		const uint16_t *qkv16 = m->fused ? LAYER_SLICE(a->qkv16, l, 3 * C) : NULL;
		uint16_t *atty = LAYER_SLICE(a->atty, l, C);
		uint16_t *att = m->fused ? NULL : LAYER_SLICE(a->att, l, (size_t)H * m->max_T);
		float *att_lse = m->fused ? LAYER_SLICE(a->att_lse, l, H) : NULL;
		float *res2 = LAYER_SLICE(a->res2, l, C);
		uint16_t *fch = LAYER_SLICE(a->fch, l, 4 * C);
		uint16_t *gelu = LAYER_SLICE(a->gelu, l, 4 * C);
		const size_t lo = first_layer + (size_t)l * m->layer_floats, hi = lo + m->layer_floats;
		/* layer l's parameters and gradients, its first tensor's at 0 */
		params_view_t lp = gpt2_cuda_p_params_get(m, lo, hi, true);
		float *lg = gpt2_cuda_p_grad_begin(m, lo, hi);
#define P(which) (lp.p + (m->offsets[(which)] - m->offsets[T_LN1_W]))
#define P16(which) (lp.p16 + (m->offsets[(which)] - m->offsets[T_LN1_W]))
#define G(which) (lg + (m->offsets[(which)] - m->offsets[T_LN1_W]))
		/* MLP: res3 = res2 + gelu(ln2 @ Wfc + bfc) @ Wp + bp; dres holds d res3 */
		gpt2_cuda_p_gemm(m, 4 * C, C, N, gelu, true, a->dres16, false, NULL, G(T_FCPROJ_W), true);
		cuda_bias_backward16(G(T_FCPROJ_B), a->dres16, N, C, a->colsum, s);
		/* GELU's backward in the product's epilogue, then the FC bias's gradient */
		gpt2_cuda_p_gemm16(m, N, 4 * C, C, a->dres16, P16(T_FCPROJ_W), true, NULL, a->dbig16, 0,
			 CUDA_GEMM_EPI_DGELU, fch);
		cuda_bias_backward16(G(T_FC_B), a->dbig16, N, 4 * C, a->colsum, s);
		gpt2_cuda_p_gemm(m, C, 4 * C, N, ln2, true, a->dbig16, false, NULL, G(T_FC_W), true);
		gpt2_cuda_p_gemm16(m, N, C, 4 * C, a->dbig16, P16(T_FC_W), true, NULL, a->dsmall16, 0, CUDA_GEMM_EPI_NONE,
			 NULL);
		cuda_layernorm_backward16(a->dres, a->dres16, G(T_LN2_W), G(T_LN2_B), a->dsmall16, res2,
					  LAYER_SLICE(a->ln2_mean, l, 1), LAYER_SLICE(a->ln2_rstd, l, 1),
					  P(T_LN2_W), N, C, a->colsum, s);

		/* attention: res2 = x + attn(ln1 @ Wqkv + bqkv) @ Wproj + bproj; dres holds d res2 */
		gpt2_cuda_p_gemm(m, C, C, N, atty, true, a->dres16, false, NULL, G(T_PROJ_W), true);
		cuda_bias_backward16(G(T_PROJ_B), a->dres16, N, C, a->colsum, s);
		if (m->fused) { /* dqkv in bf16 only, its bias gradient summed on the way */
			gpt2_cuda_p_gemm16(m, N, C, C, a->dres16, P16(T_PROJ_W), true, NULL, a->dsmall16, 0,
				 CUDA_GEMM_EPI_NONE, NULL);
			cuda_flash_backward(NULL, a->dbig16, G(T_QKV_B), NULL, a->dsmall16, qkv16, atty,
					    att_lse, &m->att_s, B, T, C, H, H, s);
		} else {
			gpt2_cuda_p_gemm(m, N, C, C, a->dres16, false, P16(T_PROJ_W), true, NULL, a->dsmall, false);
			cuda_attention_backward(m->gemm, a->dbig, a->dbig16, a->dsmall, qkv, att, &m->att_s,
						B, T, C, H, s);
			cuda_bias_backward(G(T_QKV_B), a->dbig, N, 3 * C, a->colsum, s);
		}
		gpt2_cuda_p_gemm(m, C, 3 * C, N, ln1, true, a->dbig16, false, NULL, G(T_QKV_W), true);
		gpt2_cuda_p_gemm16(m, N, C, 3 * C, a->dbig16, P16(T_QKV_W), true, NULL, a->dsmall16, 0, CUDA_GEMM_EPI_NONE,
			 NULL);
		cuda_layernorm_backward16(a->dres, a->dres16, G(T_LN1_W), G(T_LN1_B), a->dsmall16, x,
					  LAYER_SLICE(a->ln1_mean, l, 1), LAYER_SLICE(a->ln1_rstd, l, 1),
					  P(T_LN1_W), N, C, a->colsum, s);
#undef P
#undef P16
#undef G
		gpt2_cuda_p_grad_end(m, lg, lo, hi);
		gpt2_cuda_p_params_put(m, lp);
		gpt2_cuda_p_grads_ready(m, L - l, lo, m->layer_floats);
	}
	{
		const size_t lo = m->off_wpe, hi = lo + (size_t)m->cfg.seq_len * C;
		float *g = gpt2_cuda_p_grad_begin(m, lo, hi);
		cuda_embed_positions_backward(g, a->dres, B, T, C, s);
		gpt2_cuda_p_grad_end(m, g, lo, hi);
	}
	/* the embedding's part of dwte, per block of rows as the LM head's: the
	 * run of the (sorted) distinct tokens inside each */
	const int32_t *h_uniq = m->host_ids + 2 * N;
	int k0 = 0;
	for (int v0 = 0; v0 < V; v0 += rows) {
		const int v1 = rows < V - v0 ? v0 + rows : V;
		int k1 = k0;
		while (k1 < m->n_unique && h_uniq[k1] < v1)
			k1++;
		const size_t lo = (size_t)v0 * C, hi = (size_t)v1 * C;
		float *g = gpt2_cuda_p_grad_begin(m, lo, hi);
		cuda_embed_tokens_backward(g, v0, a->dres, d_uniq + k0, d_starts + k0, d_rows, k1 - k0, C,
					   s);
		gpt2_cuda_p_grad_end(m, g, lo, hi);
		k0 = k1;
	}
	gpt2_cuda_p_grads_ready(m, L + 1, 0, first_layer); /* wte, wpe */
}

extern "C" double gpt2_cuda_sum_squares(gpt2_cuda_t *m, const float *x, size_t n)
{
	cuda_sum_squares(m->a.sumsq, x, n, m->a.sumsq_scratch, m->stream);
	double ss = 0.0;
	s_copy(&ss, m->a.sumsq, sizeof ss, cudaMemcpyDeviceToHost, m->stream);
	return ss;
}

extern "C" double gpt2_cuda_grad_norm(gpt2_cuda_t *m)
{
	if (!m->grads)
		gpt2_cuda_p_misuse("gpt2_cuda_grad_norm on a model created without a gradient buffer");
	return sqrt(gpt2_cuda_sum_squares(m, m->grads, m->n_params));
}

extern "C" float *gpt2_cuda_params(gpt2_cuda_t *m)
{
	return m->params;
}

extern "C" void gpt2_cuda_params_written(gpt2_cuda_t *m)
{
	if (m->params)
		cuda_to_bf16(m->params16, m->params, m->n_params, m->stream);
}

extern "C" float *gpt2_cuda_grads(gpt2_cuda_t *m)
{
	return m->grads;
}

extern "C" void gpt2_cuda_sync(gpt2_cuda_t *m)
{
	CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

extern "C" double gpt2_cuda_step(gpt2_cuda_t *m, const optim_adamw_t *hp, double grad_clip)
{
	double norm = gpt2_cuda_grad_norm(m);
	float grad_scale = 1.0f;
	if (grad_clip > 0 && isfinite(norm) && norm > grad_clip)
		grad_scale = (float)(grad_clip / norm);
	gpt2_cuda_adamw(m, hp, grad_scale);
	return norm;
}

/* AdamW on parameters [lo, lo + n) at params (element 0 is parameter lo),
 * with grads and moments indexed the same; params16 (NULL: none) gets the
 * bf16 of the results. */
static void s_adamw(gpt2_cuda_t *m, size_t lo, size_t n, float *params, uint16_t *params16,
                    const float *grads, float *mom1, float *mom2, const optim_adamw_t *hp,
                    float grad_scale)
{
	if (lo > m->n_params || n > m->n_params - lo)
		gpt2_cuda_p_misuse("gpt2_cuda_adamw_range past the end of the parameters");
	cuda_adamw_segments(m->segs, m->n_segs, lo, n, params, params16, grads, mom1, mom2, hp, grad_scale,
			    m->stream);
}

extern "C" void gpt2_cuda_adamw(gpt2_cuda_t *m, const optim_adamw_t *hp, float grad_scale)
{
	if (!m->mom1 || !m->grads || !m->params)
		gpt2_cuda_p_misuse("gpt2_cuda_adamw on a model created without parameters, gradients or AdamW"
			 " moments");
	s_adamw(m, 0, m->n_params, m->params, m->params16, m->grads, m->mom1, m->mom2, hp, grad_scale);
}

extern "C" void gpt2_cuda_adamw_range(gpt2_cuda_t *m, size_t lo, size_t n, float *params,
                                      const float *grads, float *mom1, float *mom2,
                                      const optim_adamw_t *hp, float grad_scale)
{
	s_adamw(m, lo, n, params, NULL, grads, mom1, mom2, hp, grad_scale);
}
