/*
 * gpt2_cuda_priv: what gpt2_cuda.cu (the model, its layout, streaming and
 * the t = 1 passes) shares with gpt2_cuda_tp.cu (the tensor-parallel
 * passes): the model's struct, the activation arena's pointers, the layer
 * tensor indices, and the helpers both call (GEMMs, parameter fetches,
 * gradient buckets). Private to those two files.
 */
#ifndef RINGMASTER_ENGINE_CUDA_GPT2_CUDA_PRIV_H
#define RINGMASTER_ENGINE_CUDA_GPT2_CUDA_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_attention.h"
#include "cuda_gemm.h"
#include "cuda_kernels.h"
#include "cuda_tprow.h"
#include "gpt2_cuda.h"

#define N_LAYER_TENSORS 12
enum {
	T_LN1_W, T_LN1_B, T_QKV_W, T_QKV_B, T_PROJ_W, T_PROJ_B,
	T_LN2_W, T_LN2_B, T_FC_W, T_FC_B, T_FCPROJ_W, T_FCPROJ_B,
};

typedef cuda_segment_t segment_t; /* a run of tensors with the same decay flag */

typedef struct {
	float *encoded;
	uint16_t *ln1;
	float *ln1_mean, *ln1_rstd;
	float *qkv;        /* per layer; NULL with fused attention */
	uint16_t *qkv16;   /* fused attention only: (N, 3C) per layer */
	uint16_t *att;     /* NULL with fused attention */
	float *att_lse;    /* fused attention only */
	uint16_t *atty;
	float *res2;
	uint16_t *ln2;
	float *ln2_mean, *ln2_rstd;
	uint16_t *fch;
	uint16_t *gelu;
	float *res3;
	uint16_t *lnf;
	float *lnf_mean, *lnf_rstd;
	uint16_t *logits;
	uint16_t *dlogits;
	float *losses, *loss;
	float *dres;
	uint16_t *dres16;
	float *dbig;
	uint16_t *dbig16;
	float *dsmall;
	uint16_t *dsmall16;
	float *colsum;
	double *sumsq, *sumsq_scratch;
	void *att_scratch;
	int32_t *ids; /* inputs (N), targets (N), uniq (N), starts (N + 1), rows (N) */
	/* tensor parallelism only (t > 1; NULL otherwise) */
	uint16_t *full16; /* (N, C) bf16: an all-gathered LayerNorm output or dres16 */
	float *dloc;      /* (n, C): a reduce-scattered input gradient */
	float *ce;        /* (N) max, (t N) gathered maxima, (2 N) sums, (N) lse */
} acts_t;

struct gpt2_cuda {
	gpt2_config_t cfg;
	int max_B, max_T;
	size_t n_params;
	size_t offsets[N_LAYER_TENSORS]; /* offsets of layer 0's tensors; a layer is `layer_floats` on */
	size_t layer_floats, off_wpe, off_lnf;
	segment_t *segs;
	int n_segs;

	cudaStream_t stream;
	cuda_gemm_t *gemm;
	cudaEvent_t staged; /* the last upload of token ids has been read */
	cudaEvent_t *ready; /* n_layer + 2: gradient ranges final (gpt2_cuda_set_grads_ready) */
	gpt2_cuda_grads_ready_fn ready_fn;
	void *ready_ctx;
	gpt2_cuda_grad_begin_fn stream_begin; /* gradients streamed (no grads buffer): */
	gpt2_cuda_grad_end_fn stream_end;     /* gpt2_cuda_stream_grads */
	void *stream_ctx;
	int wte_rows;                         /* rows of wte per streamed block */
	gpt2_cuda_params_fetch_fn fetch;      /* parameters streamed (no params buffer): */
	gpt2_cuda_params_release_fn release;  /* gpt2_cuda_stream_params */
	void *fetch_ctx;
	uint16_t *fetched16;                  /* (max_range) bf16 of the range fetched */
	size_t *order;                        /* streamed: forward's then backward's fetch */
	int n_fwd, n_bwd;                     /*   order, as [lo, hi) pairs */
	int pos, end;                         /* the next fetch of the pass, and its last */

	void *state;                 /* one allocation: params, grads, m, v (f32), params16 */
	float *params, *grads, *mom1, *mom2; /* NULL when left out */
	uint16_t *params16;                  /* NULL with params */
	size_t state_bytes;

	void *arena;
	size_t arena_bytes;
	acts_t a;
	cuda_attention_scratch_t att_s;

	int32_t *host_ids;    /* pinned: the same layout as a.ids */
	int32_t *host_counts; /* (V + 1) */
	int n_unique;

	int B, T;
	bool have_targets;
	bool fused; /* attention by cuda_flash_* (GPT2_CUDA_FUSED_ATTENTION) */

	/* tensor parallelism (gpt2_cuda_new_tp): t ranks, this one's local wte
	 * rows Vl (padded; V when t = 1) and the group (cuda_tprow.h) */
	int tp, Vl;
	cuda_tprow_t tpr;
};

/* The view of a parameter range: fp32 and (when asked for) bf16, both
 * indexed from the range's first float. */
typedef struct {
	const float *p;
	const uint16_t *p16;
} params_view_t;

/* A call the contract rules out: one line, exit 70 (gpt2_cuda.h). */
void gpt2_cuda_p_misuse(const char *what);
/* The logits' row stride for V columns (rounded up to 64). */
size_t gpt2_cuda_p_logits_ld(int V);
/* A pass (forward or backward) starts: its fetch order when streamed. */
void gpt2_cuda_p_pass(gpt2_cuda_t *m, bool backward);
/* Parameters [lo, hi) for the kernels about to be enqueued (need16: the
 * bf16 copy too), and their release once those are enqueued. */
params_view_t gpt2_cuda_p_params_get(gpt2_cuda_t *m, size_t lo, size_t hi, bool need16);
void gpt2_cuda_p_params_put(gpt2_cuda_t *m, params_view_t v);
/* Where backward adds the gradients [lo, hi), and the hand-back of a
 * streamed bucket after the kernels that add into it. */
float *gpt2_cuda_p_grad_begin(gpt2_cuda_t *m, size_t lo, size_t hi);
void gpt2_cuda_p_grad_end(gpt2_cuda_t *m, float *g, size_t lo, size_t hi);
/* Gradients [offset, offset + n) final: event k and the ready callback. */
void gpt2_cuda_p_grads_ready(gpt2_cuda_t *m, int k, size_t offset, size_t n);
/* C (M, N) = alpha op(A) @ op(B) [+ bias] [+ C], A's and C's rows lda and
 * ldc apart (0: dense); gpt2_cuda_p_gemm: dense, alpha 1. */
void gpt2_cuda_p_gemm_ld(gpt2_cuda_t *m, int M, int N, int K, const uint16_t *A, int64_t lda,
                         bool trans_a, const uint16_t *B, bool trans_b, const float *bias, float *C,
                         int64_t ldc, bool accumulate, float alpha);
void gpt2_cuda_p_gemm(gpt2_cuda_t *m, int M, int N, int K, const uint16_t *A, bool trans_a,
                      const uint16_t *B, bool trans_b, const float *bias, float *C, bool accumulate);
/* C16 (M, N) = epi(A @ op(B) [+ bias16]) in bf16, rows ldc apart (0:
 * dense), aux for the GELU epilogues */
void gpt2_cuda_p_gemm16(gpt2_cuda_t *m, int M, int N, int K, const uint16_t *A, const uint16_t *B,
                        bool trans_b, const uint16_t *bias16, uint16_t *C16, int64_t ldc,
                        cuda_gemm_epi_t epi, uint16_t *aux);

/* The tensor-parallel passes (gpt2_cuda_tp.cu), called by gpt2_cuda_forward
 * and _backward when tp > 1 once the token ids are on the device. */
void gpt2_cuda_tp_forward(gpt2_cuda_t *m, bool targets);
void gpt2_cuda_tp_backward(gpt2_cuda_t *m, float loss_scale);

#endif
