/*
 * cuda_tp: the GPU kernels of tensor parallelism's vocabulary-parallel
 * cross-entropy (issue 24; the CPU twin is tp_crossentropy_forward /
 * _backward in worker/engine/tp.c, the same steps in the same order). Each
 * TP rank holds the logits of its vocabulary ids v0 .. v0 + ncols - 1 in
 * the first ncols of each row (rows ld apart; columns ncols .. ld - 1 are
 * padded ids). The full logits are never gathered: per row,
 *   1. cuda_tp_ce_rowmax: this rank's max       -> all-gather over the group
 *   2. cuda_tp_ce_maxof: the group's max of the gathered maxima
 *   3. cuda_tp_ce_partials: sum exp(x - max) and the target's logit (0 where
 *      the target is another rank's id)         -> all-reduce (sum) of 2N
 *   4. cuda_tp_ce_finish: lse = max + log(sum), loss = lse - target logit
 *   5. cuda_tp_ce_backward: scale * (softmax - onehot) on this rank's ids
 * The collectives between the steps are the caller's (model_tp_t on device
 * buffers, through cuda_tprow.h; Llama's row: llama_cuda_tp.cu).
 *
 * Conventions as cuda_kernels.h: device pointers, logits as fp32 (logits)
 * or bf16 bit patterns (logits16, the other NULL), launchers enqueue on
 * `stream` and return at once. One warp per row, each row's reductions a
 * fixed butterfly: results repeat bit for bit.
 */
#ifndef RINGMASTER_ENGINE_CUDA_TP_H
#define RINGMASTER_ENGINE_CUDA_TP_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* mx (N) = the max of each row's first ncols logits (-inf when ncols <= 0) */
void cuda_tp_ce_rowmax(float *mx, const float *logits, const uint16_t *logits16, size_t ld, int N,
                       int ncols, cudaStream_t stream);

/* mx (N) = max over r < t of all[r * N + n] (the all-gathered maxima) */
void cuda_tp_ce_maxof(float *mx, const float *all, int N, int t, cudaStream_t stream);

/* red (2N): red[n] = sum over the row's first ncols of exp(x - mx[n]);
 * red[N + n] = the logit of targets[n] if v0 <= targets[n] < v0 + ncols,
 * else 0 */
void cuda_tp_ce_partials(float *red, const float *logits, const uint16_t *logits16, size_t ld,
                         const int32_t *targets, const float *mx, int N, int ncols, int v0,
                         cudaStream_t stream);

/* lse (N) = mx + log(red[n]); losses (N) = lse - red[N + n] (red summed
 * over the group) */
void cuda_tp_ce_finish(float *losses, float *lse, const float *mx, const float *red, int N,
                       cudaStream_t stream);

/* dlogits / dlogits16 (N rows ld apart; either may be NULL) = scale *
 * (exp(x - lse) - onehot(target)) on the first ncols columns, 0 on the
 * padded columns ncols .. ld - 1 */
void cuda_tp_ce_backward(float *dlogits, uint16_t *dlogits16, const float *logits,
                         const uint16_t *logits16, size_t ld, const float *lse,
                         const int32_t *targets, int N, int ncols, int v0, float scale,
                         cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
