/*
 * gpt2_priv: what gpt2.c (the model, t = 1 forward and backward) and
 * gpt2_tp.c (its tensor-parallel forward and backward) share: the model's
 * struct, the activation arena, and the helpers that fetch parameters and
 * hand out gradients by range (streaming, model.h) and run GEMMs. Private
 * to worker/engine/gpt2*.c.
 */
#ifndef RINGMASTER_ENGINE_GPT2_PRIV_H
#define RINGMASTER_ENGINE_GPT2_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpt2.h"
#include "matmul.h"
#include "modelcpu.h"
#include "tp.h"

#define N_LAYER_TENSORS 12

/* Tensor indices within a layer, in HF order. */
enum {
	T_LN1_W, T_LN1_B, T_QKV_W, T_QKV_B, T_PROJ_W, T_PROJ_B,
	T_LN2_W, T_LN2_B, T_FC_W, T_FC_B, T_FCPROJ_W, T_FCPROJ_B,
};

typedef struct {
	float *encoded;                       /* (B, T, C) */
	float *ln1, *ln1_mean, *ln1_rstd;     /* (L, B, T, C), (L, B, T), (L, B, T) */
	float *qkv;                           /* (L, B, T, 3C) */
	float *att;                           /* (L, B, H, T, T) */
	float *atty;                          /* (L, B, T, C) */
	float *res2;                          /* (L, B, T, C) */
	float *ln2, *ln2_mean, *ln2_rstd;     /* (L, B, T, C), (L, B, T), (L, B, T) */
	float *fch;                           /* (L, B, T, 4C) before GELU */
	float *res3;                          /* (L, B, T, C) */
	float *lnf, *lnf_mean, *lnf_rstd;     /* (B, T, C), (B, T), (B, T) */
	float *logits;                        /* (B, T, V); dlogits after backward */
	float *lse;                           /* (B, T) */
	float *losses;                        /* (B, T) */
	float *dres;                          /* (B, T, C) gradient of the residual stream */
	float *dbig;                          /* (B, T, 4C) GELU output / dfch / dqkv */
	float *dsmall;                        /* (B, T, C) dln / datty */
	float *att_scratch;                   /* kernel_attention_scratch_floats */
	float *full, *dloc, *ce_scratch;      /* TP only: (B, T, C) gathered, (n, C), the loss's */
	int32_t *inputs, *targets;            /* (B, T) copies for backward */
	uint16_t *a16, *b16;                  /* bf16 GEMM operands: (B*T*max(V, 4C)), (B*T*4C) */
} acts_t;

struct gpt2 {
	gpt2_config_t cfg;
	int max_B, max_T;
	gpt2_precision_t precision;
	int tp_size; /* TP ranks (0 or 1: none); the tensor table is this rank's part */
	tp_t tp;     /* the group (tp.h) */

	int n_tensors;
	gpt2_tensor_t *tensors; /* (n_tensors) */
	modelcpu_params_t w;    /* parameters, gradients, streaming (modelcpu.h) */

	/* Ranges (see gpt2.h): wte comes in blocks of wte_rows rows. */
	int wte_rows, n_chunks;
	size_t max_range;
	model_range_t r_wpe, r_lnf;
	model_range_t *r_layers; /* (n_layer) */
	/* The ranges fetched by a forward, then by a backward, in order: the
	 * next one is the prefetch hint of each fetch. */
	model_range_t *seq_fwd, *seq_bwd;
	int n_seq_fwd, n_seq_bwd;

	void *arena;
	size_t arena_bytes;
	acts_t a;

	matmul_cache_t *mm;

	int B, T;             /* of the last forward */
	bool have_targets;    /* last forward had targets, backward may run */
};

/* Start walking a fetch order (the forward's or the backward's). */
void gpt2_p_seq_start(gpt2_t *m, const model_range_t *seq, int n);

/*
 * The parameters of range r: the model's own buffer, or (MODEL_STREAM_ALL)
 * fetched through the stream with the next range of the order as the
 * prefetch hint, and converted to bf16 in bf16 mode. One range is held at a
 * time; gpt2_p_release gives it back.
 */
const float *gpt2_p_fetch(gpt2_t *m, model_range_t r);
void gpt2_p_release(gpt2_t *m, const float *p);

/* Where the gradients of r go: the model's own buffer (accumulating), or a
 * zeroed buffer from the stream; gpt2_p_grad_end hands it back once they
 * are final for this backward. */
float *gpt2_p_grad_begin(gpt2_t *m, model_range_t r);
void gpt2_p_grad_end(gpt2_t *m, float *g, model_range_t r);

/* The wte block k: local rows [k * wte_rows, min(Vl, (k + 1) * wte_rows)). */
model_range_t gpt2_p_chunk(const gpt2_t *m, int k, int *ret_v0, int *ret_v1);

/*
 * C (M, N) (+)= op(A) @ op(B) (+ bias), see matmul_run_ld (lda, ldc: row
 * strides, 0 for dense). In bf16 mode, B is taken from the bf16 parameter
 * copy when it points into the parameters, else converted like A into a
 * scratch buffer.
 */
void gpt2_p_gemm(gpt2_t *m, int M, int N, int K, const float *A, int64_t lda, bool trans_a,
                 const float *B, bool trans_b, const float *bias, float *C, int64_t ldc,
                 bool accumulate);

/* A tensor of layer l inside a fetched or gradient range starting at lo. */
static inline float *gpt2_p_at(const gpt2_t *m, const float *base, size_t lo, int l, int which)
{
	return (float *)(uintptr_t)base + (m->tensors[2 + l * N_LAYER_TENSORS + which].offset - lo);
}

/* Per-layer slices of the activations (max-sized strides): of all N rows,
 * and of a TP rank's maxn residual-stream rows. */
#define LAYER_SLICE(ptr, l, per_row) ((ptr) + (size_t)(l) * maxN * (per_row))
#define LOCAL_SLICE(ptr, l, per_row) ((ptr) + (size_t)(l) * maxn * (per_row))

/* Tensor-parallel forward and backward (gpt2_tp.c; tp_size > 1): as
 * gpt2_forward and gpt2_backward after their checks. */
float gpt2_tp_forward(gpt2_t *m, const int32_t *inputs, const int32_t *targets, int B, int T);
void gpt2_tp_backward(gpt2_t *m, float loss_scale);

#endif
