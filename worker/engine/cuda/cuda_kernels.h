/*
 * cuda_kernels: GPT-2's non-GEMM layers on the GPU, forward and backward,
 * as C-callable launchers: embeddings, LayerNorm, GELU (tanh; as the
 * epilogue of a bf16 GEMM that cuBLASLt had no algorithm for), the causal
 * softmax of attention and the head (un)permutes around its GEMMs,
 * cross-entropy, bias gradients, AdamW, the global sum of squares, and
 * fp32 -> bf16 conversion. The GPU twin of worker/engine/kernels.c, which is
 * the numerical reference (tests/gpu/test_gpu_kernels.c checks every
 * launcher against it).
 *
 * Every pointer is device memory unless the comment says host. bf16 tensors
 * are passed as uint16_t bit patterns (the C side has no bf16 type); inside
 * they are __nv_bfloat16, rounded to nearest even, NaN kept. Where a
 * launcher takes an fp32 output and a bf16 output, either may be NULL: the
 * bf16 copy is what the next GEMM reads (cuBLASLt takes bf16 operands), the
 * fp32 one what the tests and fp32 consumers read. Launchers enqueue on
 * `stream` and return at once; a bad launch exits through CUDA_CHECK.
 *
 * Determinism: no atomics anywhere. Row reductions (LayerNorm statistics,
 * softmax, cross-entropy) are done by one warp or one block per row in a
 * fixed lane and tree order; column reductions over rows (bias and
 * LayerNorm parameter gradients, the embedding gradients) write per-chunk
 * partial sums that a second kernel adds in a fixed order; the sum of squares
 * uses a fixed grid. So two runs give the same bits, on any GPU of the same
 * architecture. Shapes as in kernels.h: N = B*T rows, C channels, H heads
 * of hd = C/H.
 */
#ifndef RINGMASTER_ENGINE_CUDA_KERNELS_H
#define RINGMASTER_ENGINE_CUDA_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "cuda_gemm.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out (B, T, C) = wte[inputs[b, t]] + wpe[t]; inputs (B, T) in [0, V) */
void cuda_embed_forward(float *out, const int32_t *inputs, const float *wte, const float *wpe, int B,
                        int T, int C, cudaStream_t stream);

/* The same in two parts, for parameters streamed a range at a time: out
 * (B, T, C) = wpe[t], then out[n] += w[inputs[n] - v0] for the tokens in
 * [v0, v1) (w: those rows of wte), block by block. Each element is one
 * fp32 addition of the same two values, so the bits are
 * cuda_embed_forward's. */
void cuda_embed_positions_forward(float *out, const float *wpe, int B, int T, int C,
                                  cudaStream_t stream);
void cuda_embed_tokens_add(float *out, const int32_t *inputs, const float *w, int v0, int v1, int N,
                           int C, cudaStream_t stream);

/* dwpe (T, C) += sum over b of dout (B, T, C), b in order */
void cuda_embed_positions_backward(float *dwpe, const float *dout, int B, int T, int C,
                                   cudaStream_t stream);

/*
 * The token-embedding gradient needs the rows of each token in order, which
 * the host knows at forward time: cuda_embed_index_build (host memory, all
 * arrays) sorts the N positions by token, stably: uniq[k] (k < n_unique) is
 * the k-th distinct token, its rows are rows[starts[k] .. starts[k + 1]).
 * counts holds V + 1 ints of scratch. Returns n_unique.
 */
int cuda_embed_index_build(const int32_t *inputs, int N, int V, int32_t *uniq, int32_t *starts,
                           int32_t *rows, int32_t *counts);
/* dwte[uniq[k] - row0] (C) += dout rows of that token, in row order (so
 * each element gets the CPU's summation order): dwte holds the rows from
 * token row0 on (0: all of wte; a block of rows for a streamed gradient),
 * and uniq, starts may be a sub-run of the index's (starts[k] indexes rows
 * as built); index arrays in device memory */
void cuda_embed_tokens_backward(float *dwte, int row0, const float *dout, const int32_t *uniq,
                                const int32_t *starts, const int32_t *rows, int n_unique, int C,
                                cudaStream_t stream);

/* out/out16 (N, C) = LayerNorm(x) * w + b, eps 1e-5; mean, rstd (N) for backward */
void cuda_layernorm_forward(float *out, uint16_t *out16, float *mean, float *rstd, const float *x,
                            const float *w, const float *b, int N, int C, cudaStream_t stream);

/* Floats of scratch the column reductions below need for N rows of C. */
size_t cuda_colsum_scratch_floats(int N, int C);
/* out (C) += the sum over chunks of partial (n_chunks, C), in a fixed order
 * (16 interleaved runs of chunks, then the runs in order: the same bits
 * every call); the second half of the column sums, for partial sums made
 * elsewhere */
void cuda_colsum_add(float *out, const float *partial, int n_chunks, int C, cudaStream_t stream);

/*
 * dx (N, C) += d/dx (and dx16 = bf16 of the updated dx, when not NULL);
 * dw, db (C) += d/dw, d/db; given dout (N, C) and the forward's x, mean, rstd.
 * scratch: cuda_colsum_scratch_floats(N, C). Where C is a multiple of 128
 * up to 1024 and the rows are 16-byte aligned, one kernel makes dx and the
 * dw, db partial sums in a single read of dout and x.
 */
void cuda_layernorm_backward(float *dx, uint16_t *dx16, float *dw, float *db, const float *dout,
                             const float *x, const float *mean, const float *rstd, const float *w,
                             int N, int C, float *scratch, cudaStream_t stream);

/* the same with dout16 (N, C) in bf16 (the model's MLP and attention
 * gradients, as their GEMMs write them) */
void cuda_layernorm_backward16(float *dx, uint16_t *dx16, float *dw, float *db, const uint16_t *dout16,
                               const float *x, const float *mean, const float *rstd, const float *w,
                               int N, int C, float *scratch, cudaStream_t stream);

/* db (C) += sum over the N rows of dout (N, C); scratch as above */
void cuda_bias_backward(float *db, const float *dout, int N, int C, float *scratch,
                        cudaStream_t stream);

/* db (C) += sum over the N rows of dout16 (N, C) bf16, in
 * cuda_bias_backward's order; scratch as above */
void cuda_bias_backward16(float *db, const uint16_t *dout16, int N, int C, float *scratch,
                          cudaStream_t stream);

/*
 * The epilogue of a bf16-output GEMM (cuda_gemm.h) that cuBLASLt had no
 * algorithm for, applied to its product y (M, N) bf16, rows ld apart, in
 * place: EPI_NONE: y = y + bias; EPI_GELU: x = y [+ bias], aux = x,
 * y = gelu(x); EPI_DGELU: y = y * gelu'(aux). bias (N) bf16 may be NULL;
 * aux (M, N), rows ld apart, is needed by the GELU ones. Results rounded
 * to bf16.
 */
void cuda_gemm_epilogue16(cuda_gemm_epi_t epi, uint16_t *y, uint16_t *aux, const uint16_t *bias, int M,
                          int N, int64_t ld, cudaStream_t stream);


/*
 * Attention's data movement. qkv (B, T, 3C) holds q, k, v side by side
 * (HF c_attn order); the GEMMs want each head contiguous:
 * cuda_attention_split: q, k, v (B, H, T, hd) each = bf16 of qkv's parts.
 * cuda_heads_split:     y16 (B, H, T, hd) = bf16 of x (B, T, C).
 * cuda_heads_merge:     out/out16 (B, T, C) = y (B, H, T, hd) side by side.
 * cuda_attention_merge_grads: dqkv/dqkv16 (B, T, 3C) = dq, dk, dv (B, H, T, hd).
 */
void cuda_attention_split(uint16_t *q, uint16_t *k, uint16_t *v, const float *qkv, int B, int T,
                          int C, int H, cudaStream_t stream);
void cuda_heads_split(uint16_t *y16, const float *x, int B, int T, int C, int H, cudaStream_t stream);
/* cuda_heads_split of a bf16 x16 (B, T, C) */
void cuda_heads_split16(uint16_t *y16, const uint16_t *x16, int B, int T, int C, int H,
                        cudaStream_t stream);
void cuda_heads_merge(float *out, uint16_t *out16, const float *y, int B, int T, int C, int H,
                      cudaStream_t stream);
void cuda_attention_merge_grads(float *dqkv, uint16_t *dqkv16, const float *dq, const float *dk,
                                const float *dv, int B, int T, int C, int H, cudaStream_t stream);

/*
 * att / att16 (BH, T, T) (either may be NULL) = the softmax of the scaled
 * scores (BH, T, T) over j <= i in each row i, 0 above the diagonal.
 * scores may be att (in place).
 */
void cuda_softmax_causal_forward(float *att, uint16_t *att16, const float *scores, int BH, int T,
                                 cudaStream_t stream);
/*
 * dpre (BH, T, T) = scale * att * (datt - <att, datt>) per row over j <= i,
 * 0 above the diagonal, from the bf16 probabilities att16 (what the forward
 * kept), as bf16 (dpre16) and/or fp32 (dpre); NULL skips one. dpre16 may be
 * att16 (in place: each element is read before it is written, by the same
 * thread).
 */
void cuda_softmax_causal_backward(uint16_t *dpre16, float *dpre, const float *datt,
                                  const uint16_t *att16, int BH, int T, float scale,
                                  cudaStream_t stream);

/*
 * Cross-entropy over logits (N, V), rows ld >= V apart, with targets (N):
 * losses (N) and lse (N, may be NULL); and, unless dlogits and dlogits16
 * are both NULL, its gradient in the same kernel, dlogits (N, V) = scale * (softmax(logits) - onehot(target)),
 * as fp32 (dlogits) and/or bf16 (dlogits16), rows ld apart too: the
 * gradient needs nothing backward knows that forward does not, so the
 * model writes it while the row is still in cache (llm.c's fused
 * classifier). The columns past V are neither read nor written.
 * cuda_mean: out (one float) = mean of x (n), summed in double in a fixed
 * order.
 */
void cuda_crossentropy_forward(float *losses, float *lse, float *dlogits, uint16_t *dlogits16,
                               const float *logits, const int32_t *targets, int N, int V, int ld,
                               float scale, cudaStream_t stream);
/* the same for bf16 logits (what the model's LM head writes: half the
 * bytes of fp32 to write and read back, at GPT-2's vocabulary the largest
 * activation of a step); the arithmetic is fp32 as above */
void cuda_crossentropy_forward16(float *losses, float *lse, float *dlogits, uint16_t *dlogits16,
                                 const uint16_t *logits16, const int32_t *targets, int N, int V, int ld,
                                 float scale, cudaStream_t stream);
void cuda_mean(float *out, const float *x, int n, cudaStream_t stream);

/* dst (n) = bf16(src) */
void cuda_to_bf16(uint16_t *dst, const float *src, size_t n, cudaStream_t stream);

/* dst (n) += src (n) */
void cuda_add(float *dst, const float *src, size_t n, cudaStream_t stream);

/* Doubles of scratch cuda_sum_squares needs. */
size_t cuda_sum_squares_scratch(void);
/* out (one double) = sum of x[i]^2 over n, in double, in an order fixed by n alone */
void cuda_sum_squares(double *out, const float *x, size_t n, double *scratch, cudaStream_t stream);

/*
 * AdamW on n elements (PyTorch's form, the arithmetic of optim.c): with
 * g = grads[i] * grad_scale (the clipping factor),
 * m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
 * p = p * keep - step * m / (sqrt(v) * inv_sqrt_bc2 + eps);
 * params16 (NULL: none) gets bf16(p). step = lr / (1 - b1^t),
 * inv_sqrt_bc2 = 1 / sqrt(1 - b2^t), keep = 1 - lr * wd where decay applies.
 */
void cuda_adamw(float *params, uint16_t *params16, const float *grads, float *m, float *v, size_t n,
                float b1, float b2, float step, float inv_sqrt_bc2, float eps, float keep,
                float grad_scale, cudaStream_t stream);

/* A run of the flat buffer whose tensors share AdamW's decay flag:
 * [lo, hi) in floats (a model's table, merged where adjacent flags agree). */
typedef struct {
	size_t lo, hi;
	bool decay;
} cuda_segment_t;

/*
 * A model's AdamW step on parameters [lo, lo + n) of its flat buffer
 * (n_segs segments cover it): params, grads, m, v are device arrays whose
 * element 0 is parameter lo; params16 (NULL: none) gets the bf16 copy.
 * optim.c's constants from hp (step = lr / (1 - b1^t), 1 / sqrt(1 - b2^t),
 * keep = 1 - lr wd on decayed segments, 1 elsewhere), gradients times
 * grad_scale; one cuda_adamw per segment part. The GPT-2 and Llama rows'
 * optimizer (gpt2_cuda.cu, llama_cuda.cu).
 */
void cuda_adamw_segments(const cuda_segment_t *segs, int n_segs, size_t lo, size_t n, float *params,
                         uint16_t *params16, const float *grads, float *m, float *v,
                         const optim_adamw_t *hp, float grad_scale, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
