/*
 * cuda_attention: causal multi-head self-attention on the GPU, forward and
 * backward, from cuBLASLt batched GEMMs (one product per (batch, head)) and
 * the softmax and permute kernels of cuda_kernels.h.
 *
 * Forward: q, k, v are split out of qkv (B, T, 3C) into bf16 (B, H, T, hd);
 * the scores q k^T / sqrt(hd) (fp32, scratch); att = their softmax over the
 * causal mask, kept in bf16 (B, H, T, T) for backward, with zeros above the
 * diagonal; y = att v; the heads are merged back into (B, T, C). The GEMMs
 * take bf16 operands and accumulate in fp32, so unlike the CPU engine
 * (whose attention is all fp32) q, k, v and att are rounded to bf16 on
 * their way into a product; tests/gpu states the resulting bounds. att is
 * kept in bf16 because at T = 1024 it is the largest activation of a layer
 * (its traffic dominates a step's memory traffic) and bf16 is what the
 * products read anyway; the softmax itself is computed in fp32. The full T x T score matrix is
 * computed and the upper triangle ignored: simple, and the GEMMs are at
 * tensor-core speed. Backward recomputes the bf16 q, k, v from qkv instead
 * of keeping them per layer.
 *
 * cuda_flash_* (cuda_flash.cu) compute the same attention fused, on tensor
 * cores, without the T x T matrices: forward keeps one log-sum-exp per row
 * (B, H, T) instead of att16, and backward recomputes the probabilities
 * from it. Head sizes 16, 32 and 64 (cuda_flash_supported).
 */
#ifndef RINGMASTER_ENGINE_CUDA_ATTENTION_H
#define RINGMASTER_ENGINE_CUDA_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "cuda_gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Scratch shared by every layer, for batches of up to N = B*T tokens with
 * up to B*H*T*T scores; carve it with cuda_attention_scratch_carve. */
typedef struct {
	uint16_t *q, *k, *v; /* (B, H, T, hd) bf16 each */
	uint16_t *dy;        /* (B, H, T, hd) bf16 */
	float *f32;          /* 3 * (B, H, T, hd): y in forward, dq, dk, dv in backward (GEMM path) */
	uint16_t *dpre16;    /* (B, H, T, T) bf16: the score gradient */
	float *scores;       /* (B, H, T, T): the scores in forward, datt in backward */
	float *rowdot;       /* fused: (B, H, T), rowsum(dy * y) in backward */
	float *bias_partial; /* fused: (B * ceil(T / 64), 3C), the qkv bias sums per tile */
} cuda_attention_scratch_t;

/* Bytes of scratch for max_B x max_T tokens (each part 256-byte aligned);
 * fused: for cuda_flash_backward (dy and rowdot only; q, k, v, f32, dpre16
 * and scores are NULL: the model keeps q, k, v per layer). */
size_t cuda_attention_scratch_bytes(int max_B, int max_T, int C, int H, bool fused);
/* Point s's parts into base (cuda_attention_scratch_bytes of device memory,
 * the same fused). */
void cuda_attention_scratch_carve(cuda_attention_scratch_t *s, void *base, int max_B, int max_T,
                                  int C, int H, bool fused);

/*
 * out / out16 (B, T, C) (either may be NULL) = attention of qkv (B, T, 3C);
 * att16 (B, H, T, T) gets the probabilities in bf16 (zero above the
 * diagonal), for backward.
 */
void cuda_attention_forward(cuda_gemm_t *g, float *out, uint16_t *out16, uint16_t *att16,
                            const float *qkv, const cuda_attention_scratch_t *s, int B, int T, int C,
                            int H, cudaStream_t stream);

/*
 * dqkv / dqkv16 (B, T, 3C) (either may be NULL; overwritten, not added) =
 * the gradient of the attention given dout (B, T, C) and the forward's qkv
 * and att16 (unchanged, so backward may run again).
 */
void cuda_attention_backward(cuda_gemm_t *g, float *dqkv, uint16_t *dqkv16, const float *dout,
                             const float *qkv, const uint16_t *att16,
                             const cuda_attention_scratch_t *s, int B, int T, int C, int H,
                             cudaStream_t stream);

/*
 * The fused kernels' tensor-core plumbing alone, one warp: d1 (16 x 8) =
 * a (16 x 16) @ b1 and d2 (16 x 8) = [a @ b1, a @ b2] (16 x 16, bf16) @ b3
 * (B fragments by ldmatrix from tiles holding B's columns as rows), and
 * d3 (16 x 16) = a @ [b1 b2] (by ldmatrix.trans from a tile holding B's
 * rows), all row-major, the b's given transposed in bt (24 x 16: rows 0-7
 * are b1's columns, 8-15 b2's, 16-23 b3's). For gpu-kernels: with small
 * integers the products are exact, so a fragment layout that is not the
 * hardware's shows as wrong elements.
 */
void cuda_flash_mma_probe(float *d1, float *d2, float *d3, const uint16_t *a, const uint16_t *bt,
                          cudaStream_t stream);

/* Whether cuda_flash_* are built for this head size (C / H in 16, 32, 64). */
bool cuda_flash_supported(int C, int H);

/*
 * The forward of cuda_attention_forward, fused: out / out16 (B, T, C)
 * (either may be NULL) = attention of qkv16 (B, T, C + 2 KV hd) bf16, q
 * (H heads), k and v (KV heads each) side by side as the QKV GEMM writes
 * them (16-byte aligned); query head h attends with KV head h / (H / KV)
 * (grouped-query attention, read in place; GPT-2 passes KV = H, rows 3C).
 * lse2 (B, H, T) gets each row's log2-sum-exp2 of the scores times
 * log2(e) / sqrt(hd), for backward. A head size cuda_flash_supported
 * refuses, or H not a multiple of KV, exits 70.
 */
void cuda_flash_forward(float *out, uint16_t *out16, float *lse2, const uint16_t *qkv16, int B, int T,
                        int C, int H, int KV, cudaStream_t stream);

/*
 * The backward of cuda_attention_backward, fused: dqkv / dqkv16 (qkv16's
 * layout, B, T, C + 2 KV hd) (either may be NULL; overwritten) from dout
 * (B, T, C), fp32 or (dout16, the other NULL) bf16, and the forward's
 * qkv16, output out16 (B, T, C) bf16 and lse2 (all unchanged); a KV head's
 * dk, dv sum over the query heads of its group. dbias (C + 2 KV hd),
 * unless NULL, ADDS dqkv's column sums (the qkv bias gradient, from the
 * fp32 values, whether or not dqkv is written); s (made with fused) holds
 * dy, the row sums and the bias partial sums meanwhile.
 */
void cuda_flash_backward(float *dqkv, uint16_t *dqkv16, float *dbias, const float *dout,
                         const uint16_t *dout16, const uint16_t *qkv16, const uint16_t *out16,
                         const float *lse2,
                         const cuda_attention_scratch_t *s, int B, int T, int C, int H, int KV,
                         cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
