/*
 * gpt2_cuda: the GPT-2 model on one CUDA GPU: forward, backward, and AdamW
 * with global-norm clipping, on device memory. The same model, parameter
 * layout and arithmetic as the CPU engine (worker/engine/gpt2.h), which is
 * its numerical reference (tests/gpu/test_gpu_step.c).
 *
 * Memory: the fp32 master parameters, their gradients and the two AdamW
 * moments are four flat device buffers in the exact order and offsets of
 * gpt2.h's tensor table (HF GPT-2 names; a shard is a contiguous range), so
 * gpt2_cuda_set_params / gpt2_cuda_get_params move a CPU model's
 * gpt2_params() buffer (or a snapshot) as is. A bf16 copy of the parameters
 * (same offsets) is what the GEMMs read; it is refreshed by every AdamW step
 * and by gpt2_cuda_set_params. Under ZeRO the moments (and for ZeRO-2 the
 * gradients) may be left out (GPT2_CUDA_NO_*): the trainer then holds its
 * shard's. Activations live in one arena allocated at create time for
 * (max_B, max_T); a smaller batch uses the front of each slice.
 *
 * Precision: every GEMM (the linear layers, the LM head and the two
 * products of attention) takes bf16 operands and accumulates in fp32 on
 * cuBLASLt; LayerNorm, softmax, GELU, cross-entropy, the residual stream,
 * the gradients and AdamW are fp32. The activations a GEMM reads are kept
 * in bf16 only (LayerNorm and GELU outputs, the attention output, the
 * residual gradient's copy), the rest in fp32. docs/gpu.md has the details
 * and the measured tolerances.
 *
 * Determinism: no atomics in any reduction and a fixed cuBLASLt algorithm
 * per shape, so the same inputs give the same bits run to run on the same
 * GPU model (cuda_kernels.h, cuda_gemm.h).
 *
 * Threads and streams: a gpt2_cuda_t is used by one thread at a time; all
 * its work is enqueued on its own stream (gpt2_cuda_stream) on the device
 * that was current at create time. Functions that return a host value
 * (gpt2_cuda_loss, gpt2_cuda_step, the copies to the host) wait for the
 * stream; the others return as soon as the work is enqueued.
 *
 * Errors: create returns NULL with one line in err ("no CUDA GPU: ...",
 * "out of GPU memory: need ..."). Afterwards, CUDA and cuBLASLt failures are
 * fatal: one line on stderr and exit status 71; misuse the contract rules
 * out (a batch larger than created for, a token id out of range, backward
 * without a forward with targets) exits with 70 like the CPU engine.
 */
#ifndef RINGMASTER_ENGINE_GPT2_CUDA_H
#define RINGMASTER_ENGINE_GPT2_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "gpt2.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpt2_cuda gpt2_cuda_t;

/* What gpt2_cuda_create leaves out (ZeRO, worker/train_cuda.c). */
enum {
	/* no parameter buffers (fp32 and bf16): forward and backward fetch each
	 * range from the caller (gpt2_cuda_stream_params, ZeRO-3) */
	GPT2_CUDA_NO_PARAMS = 1u << 2,
	/* no AdamW state: the caller keeps m and v for the range it updates
	 * (a ZeRO shard) and steps with gpt2_cuda_adamw_range only */
	GPT2_CUDA_NO_MOMENTS = 1u << 0,
	/* no gradient buffer: backward streams its gradients range by range to
	 * the caller (gpt2_cuda_stream_grads, ZeRO-2) */
	GPT2_CUDA_NO_GRADS = 1u << 1,
	/* attention fused on tensor cores (cuda_flash_*, cuda_attention.h)
	 * instead of batched GEMMs over the T x T scores; ignored (the GEMM
	 * path runs) where the head size is not 16, 32 or 64 */
	GPT2_CUDA_FUSED_ATTENTION = 1u << 3,
};

/*
 * A model for batches of up to max_B sequences of up to max_T tokens
 * (max_T <= cfg->seq_len) on the current CUDA device. Allocates everything
 * once; parameters, gradients and moments start at zero. flags: 0, or
 * GPT2_CUDA_NO_* of what to leave out, and GPT2_CUDA_FUSED_ATTENTION. Returns NULL with one line in err: a
 * config error named like gpt2_create's, "no CUDA GPU: <reason>", or "out
 * of GPU memory: need X GiB for activations ...".
 */
gpt2_cuda_t *gpt2_cuda_create(const gpt2_config_t *cfg, int max_B, int max_T, unsigned flags,
                              char *err, size_t errlen);

/*
 * gpt2_cuda_create reporting the kind of failure: 0 with *ret_model set,
 * or -EINVAL (a config error), -ENODEV (no CUDA GPU), -ENOMEM (out of GPU
 * or host memory) or -EIO (another CUDA failure), with err as above.
 */
int gpt2_cuda_new(const gpt2_config_t *cfg, int max_B, int max_T, unsigned flags,
                  gpt2_cuda_t **ret_model, char *err, size_t errlen);

/*
 * gpt2_cuda_new as TP rank tp->rank of a group of tp->size (NULL or size
 * 1: gpt2_cuda_new; model.h's model_tp_t, copied, ctx borrowed; its
 * collectives take device buffers): the local tensor table and flat
 * layout of gpt2_new_tp's model at the same rank (gpt2_layout_tp), and its
 * steps (gpt2_tp.c: sequence parallel, vocabulary-parallel embedding and
 * LM head, replicated gradients all-reduced in backward or, streamed, in
 * each range before it is handed out). Also -EINVAL when model.n_head or
 * max_T does not divide by tp->size, the number named in err. Every batch's
 * T must divide by tp->size (exit 70 otherwise); gpt2_cuda_get_logits is
 * not available (each rank holds its vocabulary block only).
 */
int gpt2_cuda_new_tp(const gpt2_config_t *cfg, int max_B, int max_T, unsigned flags,
                     const model_tp_t *tp, gpt2_cuda_t **ret_model, char *err, size_t errlen);

/* The TP communication so far (model.h's model_tp_comm_t; zeros without). */
void gpt2_cuda_tp_comm(const gpt2_cuda_t *m, model_tp_comm_t *ret);

/* Free everything; accepts NULL. */
void gpt2_cuda_free(gpt2_cuda_t *m);

const gpt2_config_t *gpt2_cuda_config(const gpt2_cuda_t *m);
size_t gpt2_cuda_num_params(const gpt2_cuda_t *m);
/* Device bytes: parameters with their bf16 copy, gradients and moments
 * (unless left out); the
 * activation arena (with scratch and the cuBLASLt workspace). */
size_t gpt2_cuda_state_bytes(const gpt2_cuda_t *m);
size_t gpt2_cuda_activation_bytes(const gpt2_cuda_t *m);
/* The stream all work goes to (borrowed), for events and NVTX ranges. */
cudaStream_t gpt2_cuda_stream(const gpt2_cuda_t *m);
/* Whether attention runs fused (GPT2_CUDA_FUSED_ATTENTION and a head size
 * cuda_flash_supported accepts). */
bool gpt2_cuda_fused_attention(const gpt2_cuda_t *m);

/* Copy num_params floats of parameters from the host (and refresh the bf16
 * copy) / to the host; gradients to the host; the AdamW moments to and
 * from the host (m, v: num_params floats each). Wait for the copy. What the
 * model was created without cannot be copied (exit 70). */
void gpt2_cuda_set_params(gpt2_cuda_t *m, const float *params);
void gpt2_cuda_get_params(gpt2_cuda_t *m, float *ret_params);
void gpt2_cuda_get_grads(gpt2_cuda_t *m, float *ret_grads);
void gpt2_cuda_set_moments(gpt2_cuda_t *m, const float *mom1, const float *mom2);
void gpt2_cuda_get_moments(gpt2_cuda_t *m, float *ret_mom1, float *ret_mom2);

/*
 * Forward pass on inputs (B, T) of token ids in [0, vocab_size) (host
 * memory; copied, so the caller may reuse them at once). With targets
 * (B, T) (host) it also computes the mean cross-entropy, read with
 * gpt2_cuda_loss, and keeps what backward needs.
 */
void gpt2_cuda_forward(gpt2_cuda_t *m, const int32_t *inputs, const int32_t *targets, int B, int T);

/* The mean loss of the last forward with targets (waits for it). */
float gpt2_cuda_loss(gpt2_cuda_t *m);

/* The logits (B, T, V) of the last forward into host memory (waits), as
 * fp32 widened from the bf16 the model keeps them in. They stay valid
 * through backward. */
void gpt2_cuda_get_logits(gpt2_cuda_t *m, float *ret_logits);

/* Set every gradient to zero (nothing when they are streamed). */
void gpt2_cuda_zero_grad(gpt2_cuda_t *m);

/* Backward of the last forward (which must have had targets): ADDS
 * d(loss_scale * loss)/d(params) into the gradients. */
void gpt2_cuda_backward(gpt2_cuda_t *m, float loss_scale);

/*
 * Gradients ready, for a reduction overlapped with backward (worker/train.c):
 * with fn set, gpt2_cuda_backward calls fn(ctx, offset, n, ready) on the
 * calling thread each time the gradients of floats [offset, offset + n) of
 * the flat buffer are final for that backward: every kernel that writes
 * them is enqueued on the model's stream and `ready` (an event the model
 * owns) is recorded on it after them. In backward's order: ln_f, layers
 * L-1 .. 0 (one whole layer each), then wte and wpe together ([0, first
 * layer)); the ranges cover the buffer once. The event is recorded again by
 * the next backward: wait on it (cudaStreamWaitEvent) before fn returns.
 * fn NULL (the default): none.
 */
typedef void (*gpt2_cuda_grads_ready_fn)(void *ctx, size_t offset, size_t n, cudaEvent_t ready);
void gpt2_cuda_set_grads_ready(gpt2_cuda_t *m, gpt2_cuda_grads_ready_fn fn, void *ctx);

/*
 * Gradients streamed (ZeRO-2): on a model created with GPT2_CUDA_NO_GRADS,
 * every backward hands its gradients out range by range, in gpt2.h's order
 * for MODEL_STREAM_GRADS: the wte blocks (the LM head), ln_f, layers
 * L-1 .. 0, wpe, and the wte blocks again (the embedding), every range in
 * every backward whatever the batch holds. For each, begin(ctx, lo, hi)
 * returns a zeroed device buffer of hi - lo floats for gradients [lo, hi);
 * backward enqueues the kernels that add d(loss_scale * loss)/d(params of
 * the range) into it, records `ready` on the model's stream after them and
 * calls end(ctx, g, lo, hi, ready), which must wait for the event before it
 * reads g (the event is recorded again for the next range). A wte block is
 * max_range / C rows (the last one fewer); max_range must hold a whole
 * layer, wpe (seq_len x C) and a row of C (exit 70 otherwise), and
 * gpt2_max_range of the CPU model of the same config does.
 */
typedef float *(*gpt2_cuda_grad_begin_fn)(void *ctx, size_t lo, size_t hi);
typedef void (*gpt2_cuda_grad_end_fn)(void *ctx, float *g, size_t lo, size_t hi,
                                      cudaEvent_t ready);
void gpt2_cuda_stream_grads(gpt2_cuda_t *m, gpt2_cuda_grad_begin_fn begin,
                            gpt2_cuda_grad_end_fn end, void *ctx, size_t max_range);

/*
 * Parameters streamed too (ZeRO-3): on a model created with
 * GPT2_CUDA_NO_PARAMS whose gradients are streamed (gpt2_cuda_stream_grads
 * first, which sets the blocks), forward and backward fetch every range of
 * parameters just before its kernels: fetch(ctx, lo, hi, next_lo, next_hi)
 * returns device memory holding parameters [lo, hi) (fp32), valid until
 * release(ctx, p), which the model calls once the kernels that read it are
 * done (it waits for its stream); [next_lo, next_hi) is the range the pass
 * fetches next (empty after its last), to be gathered meanwhile. Forward
 * fetches wpe, the wte blocks (the embedding), layers 0 .. L-1, ln_f and
 * the wte blocks again (the LM head); backward the wte blocks, ln_f and
 * layers L-1 .. 0: gpt2.h's order for MODEL_STREAM_ALL, whatever the batch
 * holds (a fetch out of that order exits 70). The ranges GEMMs read are
 * converted to bf16 in a buffer of the model's. Returns 0, or -1 with "out
 * of GPU memory: ..." in err when that buffer cannot be had.
 */
typedef const float *(*gpt2_cuda_params_fetch_fn)(void *ctx, size_t lo, size_t hi, size_t next_lo,
                                                  size_t next_hi);
typedef void (*gpt2_cuda_params_release_fn)(void *ctx, const float *p);
int gpt2_cuda_stream_params(gpt2_cuda_t *m, gpt2_cuda_params_fetch_fn fetch,
                            gpt2_cuda_params_release_fn release, void *ctx, char *err,
                            size_t errlen);

/* sqrt of the sum of squares of all gradients (in double; waits). Needs the
 * gradient buffer. */
double gpt2_cuda_grad_norm(gpt2_cuda_t *m);

/* The sum of squares of n floats of device memory x, in double, in an
 * order fixed by n alone (waits). x is read on the model's stream. */
double gpt2_cuda_sum_squares(gpt2_cuda_t *m, const float *x, size_t n);

/* The flat fp32 parameters (NULL when streamed): num_params floats of
 * device memory in gpt2.h's layout (borrowed), for the all-gather of ZeRO
 * shards in place
 * (worker/train_cuda.c). Whoever writes them (on another stream, finished
 * before) calls gpt2_cuda_params_written, which refreshes the bf16 copy the
 * GEMMs read (enqueued). */
float *gpt2_cuda_params(gpt2_cuda_t *m);
void gpt2_cuda_params_written(gpt2_cuda_t *m);

/* The flat gradient buffer (NULL when streamed): num_params floats of
 * device memory in gpt2.h's layout (borrowed, valid until gpt2_cuda_free),
 * for an all-reduce in place
 * (worker/train.c). Work on the model's stream that writes it must be
 * finished first (gpt2_cuda_sync). */
float *gpt2_cuda_grads(gpt2_cuda_t *m);

/* Wait until all work enqueued on the model's stream is done. */
void gpt2_cuda_sync(gpt2_cuda_t *m);

/*
 * AdamW over all parameters with hp (decay on the tensors gpt2.h marks),
 * each gradient multiplied by grad_scale first (1: none; the clipping
 * factor folded in), then the bf16 copy refreshed. Enqueued; returns at
 * once. gpt2_cuda_step is gpt2_cuda_grad_norm, the clipping factor, and
 * this. Only on a model created with gradients and moments.
 */
void gpt2_cuda_adamw(gpt2_cuda_t *m, const optim_adamw_t *hp, float grad_scale);

/*
 * AdamW on parameters [lo, lo + n) only, with parameters, gradients and
 * moments the caller holds: params, grads, mom1 and mom2 are device arrays
 * of n floats whose element 0 belongs to parameter lo (a ZeRO shard; params
 * may be gpt2_cuda_params(m) + lo). The arithmetic, the decay per tensor
 * and grad_scale as gpt2_cuda_adamw; the bf16 copy is not touched (after
 * writing the model's parameters, gpt2_cuda_params_written). Enqueued.
 */
void gpt2_cuda_adamw_range(gpt2_cuda_t *m, size_t lo, size_t n, float *params, const float *grads,
                           float *mom1, float *mom2, const optim_adamw_t *hp, float grad_scale);

/*
 * The optimizer step of `ringworker train` on one rank: the global gradient
 * norm (returned, before clipping), gradients scaled to grad_clip when it is
 * > 0 and exceeded (and the norm is finite), then AdamW over all parameters
 * with hp (decay on the tensors gpt2.h marks), then the bf16 copy refreshed.
 * Waits for the norm only.
 */
double gpt2_cuda_step(gpt2_cuda_t *m, const optim_adamw_t *hp, double grad_clip);

/* Training FLOPs per token, 6N + 6*L*C*T (gpt2_flops_per_token's formula;
 * under TP this rank's: N its parameters, C / t its channels). */
double gpt2_cuda_flops_per_token(const gpt2_cuda_t *m, int T);

#ifdef __cplusplus
}
#endif

#endif
