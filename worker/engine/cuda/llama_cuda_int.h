/*
 * llama_cuda_int: what llama_cuda.cu (the model, t = 1, and everything
 * around forward and backward) shares with llama_cuda_tp.cu (forward and
 * backward with tensor parallelism): the model's struct, its activation
 * arena and the helpers for parameters, gradients and GEMMs. Private to
 * those two files.
 */
#ifndef RINGMASTER_ENGINE_LLAMA_CUDA_INT_H
#define RINGMASTER_ENGINE_LLAMA_CUDA_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "cuda_attention.h"
#include "cuda_kernels.h"
#include "cuda_gemm.h"
#include "cuda_tprow.h"
#include "llama_cuda.h"
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
	/* tensor parallelism only (t > 1): the gathered (N, C) bf16 operand,
	 * a reduce-scattered (n, C) gradient, the cross-entropy's maxima (N),
	 * gathered maxima (t N), partial sums (2 N) and lse (N) */
	uint16_t *full16;
	float *dloc, *ce_mx, *ce_all, *ce_red, *ce_lse;
	float *rope_cos, *rope_sin;
} acts_t;

struct llama_cuda {
	model_config_t cfg;
	int max_B, max_T, hd, D, Fd; /* D, Fd: this TP rank's QKV width and FFN features */
	int tp_size;                 /* TP ranks (1: none) */
	int vl;                      /* vocabulary rows held: V, or V padded / t */
	cuda_tprow_t tp;             /* the TP group (size 1: none) */
	size_t n_params;
	model_tensor_t *tensors;
	int n_tensors;
	size_t max_range;
	size_t layer0, layer_floats, off_norm, off_head; /* off_head 0 when tied */
	size_t rel[LLAMA_LAYER_TENSORS]; /* a layer's tensors from its first float */
	segment_t *segs;
	int n_segs;

	model_streaming_t streaming;
	model_stream_t st;   /* streamed: the caller's functions */
	int rows;            /* rows of embed_tokens / lm_head a block (V when dense) */
	uint16_t *fetched16; /* MODEL_STREAM_ALL: (max_range) bf16 of the range fetched */
	size_t *order;       /* MODEL_STREAM_ALL: forward's then backward's fetches, */
	int n_fwd, n_bwd;    /*   as [lo, hi) pairs */
	int pos, end;        /* the pass's next fetch and its last */

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

/* parameters [lo, hi) for the kernels about to be enqueued, fp32 and (need16)
 * bf16, indexed from lo: the model's buffers, or a fetched range */
typedef struct {
	const float *p;
	const uint16_t *p16;
} view_t;

/* the parameters [lo, hi) (lc_pget, then lc_pput once the kernels reading
 * them are enqueued); the gradient destination [lo, hi) (lc_gbegin, then
 * lc_gend); MODEL_STREAM_ALL's fetches follow the order of lc_pass */
void lc_pass(llama_cuda_t *m, bool backward);
view_t lc_pget(llama_cuda_t *m, size_t lo, size_t hi, bool need16);
void lc_pput(llama_cuda_t *m, view_t v);
float *lc_gbegin(llama_cuda_t *m, size_t lo, size_t hi);
void lc_gend(llama_cuda_t *m, float *g, size_t lo, size_t hi);
/* the registered grads-ready callback for range k ([lo, hi)) */
void lc_grads_ready(llama_cuda_t *m, int k, size_t lo, size_t hi);
/* a copy on stream s, waited for */
void lc_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s);

/* C or C16 (M, N) = alpha op(A) @ op(B) [+ C or C_in], A's rows lda apart
 * and C's ldc apart (0: dense) */
void lc_gemm_ld(llama_cuda_t *m, int M, int N, int K, const uint16_t *A, int64_t lda, bool trans_a,
                const uint16_t *B, bool trans_b, float *C, uint16_t *C16, int64_t ldc, bool accumulate,
                const float *C_in, float alpha);
void lc_gemm(llama_cuda_t *m, int M, int N, int K, const uint16_t *A, bool trans_a, const uint16_t *B,
             bool trans_b, float *C, uint16_t *C16, bool accumulate, const float *C_in, float alpha);
/* y (rows, out) = x (rows, in) @ W^T; dx (rows, in) = alpha dy @ W; dW
 * (out, in) += alpha dy^T @ x */
void lc_linear(llama_cuda_t *m, int rows, int out, int in, const uint16_t *x, const uint16_t *W,
               float *y, uint16_t *y16);
void lc_linear_dx(llama_cuda_t *m, int rows, int out, int in, const uint16_t *dy, const uint16_t *W,
                  float *dx, uint16_t *dx16, float alpha);
void lc_linear_dw(llama_cuda_t *m, int rows, int out, int in, const uint16_t *dy, const uint16_t *x,
                  float *dW, float alpha);

/* Forward and backward with tensor parallelism (llama_cuda_tp.cu), called
 * by llama_cuda_forward / _backward when tp_size > 1, once the token ids
 * are on the device. */
float lc_tp_forward(llama_cuda_t *m, bool targets, int B, int T);
void lc_tp_backward(llama_cuda_t *m, float loss_scale);

#endif
