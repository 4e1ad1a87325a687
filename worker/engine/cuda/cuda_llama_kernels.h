/*
 * cuda_llama_kernels: the layers Llama adds to the GPU engine, forward and
 * backward, as C-callable launchers beside GPT-2's (cuda_kernels.h):
 * RMSNorm, rotary position embeddings (HF's rotate_half convention, the
 * order HF checkpoints store q_proj / k_proj rows in), and SwiGLU's gate.
 * Grouped-query attention is cuda_flash_* with KV < H (cuda_attention.h);
 * the GEMMs are cuda_gemm's. worker/engine/kernels_llama.c is the CPU
 * twin; tests/gpu/test_gpu_llama_kernels.c checks every launcher against a
 * plain C reference with a stated bound (on a GPU, and on the CPU through
 * tests/cudaemu).
 *
 * Conventions as cuda_kernels.h: device pointers, bf16 as uint16_t bit
 * patterns, an fp32 and a bf16 output of which either may be NULL,
 * launchers enqueue on `stream` and return at once. No atomics: row
 * reductions are one warp per row in a fixed order, RMSNorm's weight
 * gradient is per-chunk partial sums added by cuda_colsum_add, so results
 * repeat bit for bit. N = B*T rows.
 */
#ifndef RINGMASTER_ENGINE_CUDA_LLAMA_KERNELS_H
#define RINGMASTER_ENGINE_CUDA_LLAMA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out / out16 (N, C) = x / sqrt(mean(x^2) + eps) * w, in fp32; rstd (N)
 * gets 1 / sqrt(mean(x^2) + eps) for backward. */
void cuda_rmsnorm_forward(float *out, uint16_t *out16, float *rstd, const float *x, const float *w,
                          int N, int C, float eps, cudaStream_t stream);

/*
 * dx (N, C) += d/dx (dx16, unless NULL, = bf16 of the updated dx) and
 * dw (C) += d/dw, given dout (N, C) as fp32 (dout) or bf16 (dout16, the
 * other NULL), the forward's x and rstd, and w. scratch:
 * cuda_colsum_scratch_floats(N, C) floats.
 */
void cuda_rmsnorm_backward(float *dx, uint16_t *dx16, float *dw, const float *dout,
                           const uint16_t *dout16, const float *x, const float *rstd, const float *w,
                           int N, int C, float *scratch, cudaStream_t stream);

/*
 * Rotary embeddings on the QKV GEMM's output qkv (N, (H + 2 KV) hd) fp32
 * (q's H heads, then k's KV heads, then v's), row n at position n % T:
 * out / out16 (same layout; either may be NULL) = q and k heads rotated,
 * v copied. For j < hd/2, with c = cos[t][j], s = sin[t][j] (cos, sin
 * (T, hd/2) device tables, llama_rope_tables'):
 *   out[j] = x[j] c - x[j + hd/2] s,  out[j + hd/2] = x[j + hd/2] c + x[j] s.
 * cuda_rope_backward is its transpose (the rotation by -angle), for the
 * gradient dqkv of the same layout.
 */
void cuda_rope_forward(float *out, uint16_t *out16, const float *qkv, const float *cos,
                       const float *sin, int N, int T, int H, int KV, int hd, cudaStream_t stream);
void cuda_rope_backward(float *dx, uint16_t *dx16, const float *dout, const float *cos,
                        const float *sin, int N, int T, int H, int KV, int hd, cudaStream_t stream);

/*
 * SwiGLU: gu16 (N, 2F) bf16 holds gate (columns 0 .. F-1) and up (F ..
 * 2F-1), as one GEMM over gate_proj and up_proj (adjacent in the flat
 * buffer) writes them; h16 (N, F) = bf16(silu(gate) * up), in fp32.
 * Backward: dgu16 (N, 2F) = bf16 of (dh up silu'(gate), dh silu(gate))
 * from dh16 (N, F) bf16; silu(g) = g sigmoid(g), silu'(g) = sigmoid(g)
 * (1 + g (1 - sigmoid(g))).
 */
void cuda_swiglu_forward(uint16_t *h16, const uint16_t *gu16, int N, int F, cudaStream_t stream);
void cuda_swiglu_backward(uint16_t *dgu16, const uint16_t *dh16, const uint16_t *gu16, int N, int F,
                          cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
