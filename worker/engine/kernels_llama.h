/*
 * kernels_llama: the non-GEMM layers Llama adds to the CPU engine, forward
 * and backward: RMSNorm, rotary position embeddings (Hugging Face's
 * rotate_half layout) and SwiGLU. Attention is kernels.h's grouped-query
 * kernel, cross-entropy and the embedding kernels are GPT-2's.
 *
 * Determinism as in kernels.h: row-wise work is split over threads by rows
 * and each row reduced in a fixed lane order; the RMSNorm weight gradient
 * is split by column blocks, each column summed over the rows in order. No
 * result depends on the number of OpenMP threads. "Backward" functions ADD
 * into parameter gradients and into dx where they say so. Private to
 * worker/engine/.
 */
#ifndef RINGMASTER_ENGINE_KERNELS_LLAMA_H
#define RINGMASTER_ENGINE_KERNELS_LLAMA_H

#include <stddef.h>

/* out (N, C) = x / sqrt(mean(x^2) + eps) * w; rstd (N) kept for backward */
void kernel_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C,
                            float eps);
/* dx (N, C) += d/dx and dw (C) += d/dw, given dout (N, C) and the forward's x and rstd */
void kernel_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x,
                             const float *rstd, const float *w, int N, int C);

/*
 * Rotary embedding in place on the first n_heads heads (hd channels each)
 * of every row of x (B*T rows, `ld` floats apart): the row of token t of a
 * sequence is rotated by position t, with cos, sin (T, hd/2) from
 * llama_rope_tables. For j < hd/2 the pair (x[j], x[j + hd/2]) becomes
 * (x[j] cos - x[j + hd/2] sin, x[j + hd/2] cos + x[j] sin).
 * kernel_rope_backward applies the inverse (transposed) rotation to a
 * gradient of the same layout.
 */
void kernel_rope_forward(float *x, size_t ld, int n_heads, int hd, const float *cos,
                         const float *sin, int B, int T);
void kernel_rope_backward(float *dx, size_t ld, int n_heads, int hd, const float *cos,
                          const float *sin, int B, int T);

/*
 * SwiGLU on gu (N, 2F), gate in columns [0, F) and up in [F, 2F) (the
 * gate_proj and up_proj rows are adjacent in the flat buffer, so one GEMM
 * computes both): out (N, F) = silu(gate) * up.
 */
void kernel_swiglu_forward(float *out, const float *gu, int N, int F);
/* dgu (N, 2F) = gradient of kernel_swiglu_forward given dout (N, F) (overwritten) */
void kernel_swiglu_backward(float *dgu, const float *dout, const float *gu, int N, int F);

#endif
