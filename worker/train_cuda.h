/*
 * train_cuda: the GPU side of the training loop, for job specs with
 * parallel.device "cuda" (docs/gpu.md, "Training on a GPU"). Private to
 * worker/: the loop reaches it through the device row train_dev_cuda.c, and
 * it exists only in builds with CUDA (RINGMASTER_HAVE_CUDA_ENGINE, set by
 * worker/meson.build when cuda_enabled).
 *
 * train.c keeps the one training loop for both devices: the data loader and
 * its sample order, micro-batches, the lr schedule, validation, the step
 * reports, snapshots and resume. On cuda it hands the engine's work to this
 * module instead of the CPU model: forward and backward on the GPU
 * (the model's CUDA row, worker/engine/model.h), the gradient norm,
 * clipping and AdamW on the GPU, and the moves of the whole state between
 * the GPU and host buffers laid out like the CPU model's (the same flat
 * buffer and tensor table), which is
 * what initialisation, snapshots and resume read and write. So a snapshot
 * taken on a GPU is the same files as one taken on CPUs, and resumes on
 * either.
 *
 * The GPU used is device 0 as this process sees devices: a rank started by
 * the agent sees only its own GPU (CUDA_VISIBLE_DEVICES), and `ringworker
 * train` uses the first visible one.
 *
 * Errors: train_cuda_probe and train_cuda_new return a RM_EXIT_* code
 * with one line; afterwards CUDA failures are fatal in the engine (one line
 * on stderr, exit status 71, the CUDA row's).
 */
#ifndef RINGMASTER_WORKER_TRAIN_CUDA_H
#define RINGMASTER_WORKER_TRAIN_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "model.h"
#include "optim.h"
#include "shard.h"

typedef struct train_cuda train_cuda_t;

/*
 * Whether this process can train on a CUDA GPU, and makes device 0
 * current. RM_EXIT_OK, or RM_EXIT_USAGE with "parallel.device is cuda
 * but this worker has no usable CUDA GPU: <CUDA's reason>" in err (docs/gpu.md
 * says why that status).
 */
int train_cuda_probe(char *err, size_t errlen);

/*
 * ZeRO on the GPU (parallel.sharding zero1, zero2 or zero3; train.c's layout):
 * this rank owns parameters [lo, lo + count) and keeps their AdamW moments
 * in S = len device floats each (count <= len; the rest is zero padding);
 * counts (W entries, borrowed for the trainer's life) are every rank's
 * count, for the reduce-scatter and the all-gather. The reduced gradients
 * of the shard: zero1 (zero NULL), a device buffer of len floats of
 * train_cuda's, reduce-scattered into from the model's full gradient
 * buffer (range by range during the last backward, or by
 * train_cuda_reduce_scatter); zero2, the shard_grads of `zero` (borrowed;
 * a shard_t on device memory, shard_mem_cuda, with buffers of the model's
 * max_range floats), to which backward streams its gradients range by range: the
 * GPU model then has no gradient buffer at all. zero3: `zero` also keeps the master shard
 * of the parameters (shard_params), and the GPU model has no parameters
 * either: it fetches every range from the shard_t (an all-gather) just
 * before using it, and AdamW steps the master shard.
 */
typedef struct {
	size_t lo, len, count;
	const size_t *counts;
	shard_t *zero;
} train_cuda_shard_t;

/*
 * The GPU model of architecture `arch` (model.arch; its CUDA row in the
 * model registry) for batches of B sequences of T tokens on device 0, with
 * parameters, gradients and AdamW moments at zero, and a device buffer of
 * n_vals floats through which train_cuda_allreduce_host and
 * train_cuda_allgather_host send host values. With `shard` (NULL: none)
 * the moments are the shard's only, and the model's gradients are
 * reduce-scattered into a shard buffer (train_cuda_reduce_scatter) which
 * train_cuda_update steps. Returns NULL with one line in err and the exit
 * status in *ret_exit: RM_EXIT_USAGE (no usable GPU, as
 * train_cuda_probe), RM_EXIT_NOMEM (out of GPU memory, naming the
 * sizes), RM_EXIT_SPEC (a model the GPU engine refuses, or an
 * architecture without a CUDA row), as the model's error code says.
 * `tp` (NULL: none) is the tensor-parallel group the model computes in
 * (copied; its collectives take device buffers: an NCCL comm's).
 */
train_cuda_t *train_cuda_new(const char *arch, const model_config_t *cfg, int B, int T,
                             size_t n_vals, const train_cuda_shard_t *shard, const model_tp_t *tp,
                             int *ret_exit, char *err, size_t errlen);

/* Free everything; accepts NULL. */
void train_cuda_free(train_cuda_t *g);

/* The GPU's name ("NVIDIA H100 80GB HBM3"; borrowed). */
const char *train_cuda_device_name(const train_cuda_t *g);

/* Whether attention runs fused (RINGMASTER_CUDA_ATTENTION=fused in the
 * worker's environment and a head size the fused kernels are built for). */
bool train_cuda_fused_attention(const train_cuda_t *g);

/* Device bytes of the GPU model's own buffers: parameters with their bf16
 * copy, its gradient buffer (0 when streamed), and the activation arena.
 * AdamW's m and v (the model's unsharded, train_cuda's shard otherwise)
 * and a shard's reduced gradients are the strategy's to count
 * (strategy.h's memory). */
void train_cuda_model_bytes(const train_cuda_t *g, size_t *ret_params, size_t *ret_grads,
                            size_t *ret_activations);

/* The whole state from host buffers in the CPU model's layout: num_params
 * floats of parameters (the bf16 copy refreshed; zero3: only the shard's
 * range is read) and AdamW's m and v, of num_params floats each or,
 * sharded, the shard's len. Waits. */
void train_cuda_upload(train_cuda_t *g, const float *params, const float *adam_m,
                       const float *adam_v);

/* The parameters, and unless adam_m and adam_v are NULL the moments, into
 * host buffers sized as train_cuda_upload's (zero3: only the shard's range
 * of the parameters is written). Waits. */
void train_cuda_download(train_cuda_t *g, float *ret_params, float *ret_adam_m,
                         float *ret_adam_v);

void train_cuda_zero_grad(train_cuda_t *g);

/* Forward of inputs and targets (B, T) (host token ids); returns the mean
 * loss (waits for it). */
float train_cuda_forward(train_cuda_t *g, const int32_t *inputs, const int32_t *targets, int B,
                         int T);

/* Backward of the last forward: adds d(scale * loss)/d(params) to the
 * gradients (zero2: hands them to the shard_t range by range, whose
 * reduce-scatters shard_sync waits for). Waits, so that the gradients may
 * go to a collective and the phase's time is the GPU's. With `reduce` (an
 * NCCL comm; NULL: none; unsharded or zero1 only), the gradients also go
 * over it as backward makes each layer's final, overlapped with the rest
 * of backward: unsharded, all-reduced in place
 * (comm_allreduce_sum_f32_async); zero1, reduce-scattered into the shard's
 * gradients (comm_reduce_scatter_range_sum_f32_async).
 * train_cuda_reduce_wait, or for zero1 train_cuda_reduce_scatter, finishes
 * that. */
void train_cuda_backward(train_cuda_t *g, float scale, comm_t *reduce);

/* Wait for the collectives the last train_cuda_backward started; 0 (also
 * when it started none) or the comm's error. */
int train_cuda_reduce_wait(train_cuda_t *g);

/* The global gradient norm (before clipping; waits), and the clipping
 * factor the next train_cuda_update applies: grad_clip / norm when
 * grad_clip > 0, the norm is finite and above it, else 1 (train.c's rule on
 * the CPU). Unsharded only. */
double train_cuda_clip(train_cuda_t *g, double grad_clip);

/* zero1: the reduce-scatter (sum) over comm of the model's gradients
 * into the shard's (waits): waiting for the one the last backward started
 * range by range when it was given the comm, else the whole buffer at
 * once. 0 or the comm's error. */
int train_cuda_reduce_scatter(train_cuda_t *g, comm_t *comm);

/* Sharded: the sum of squares of the shard's reduced gradients (double;
 * waits), and the clipping factor the next train_cuda_update applies
 * (train.c works it out from every rank's sum). */
double train_cuda_shard_sum_squares(train_cuda_t *g);
void train_cuda_set_clip(train_cuda_t *g, float factor);

/* AdamW with hp and the clipping factor of the last train_cuda_clip or
 * train_cuda_set_clip: over all parameters, or sharded over the shard's
 * range with its gradients and moments; enqueued (the next forward or copy
 * waits for it). */
void train_cuda_update(train_cuda_t *g, const optim_adamw_t *hp);

/* zero1, zero2: every rank's updated range into every rank's parameters,
 * an all-gather over comm in place, and the bf16 copy refreshed. 0 or the
 * comm's error. */
int train_cuda_gather_params(train_cuda_t *g, comm_t *comm);

/* zero3: the whole replica, all-gathered from every rank's master shard
 * through a device buffer of num_params floats made for the call, into
 * host memory (a test's view, train_options_t.report_params). 0 or the
 * comm's error. */
int train_cuda_gather_replica(train_cuda_t *g, comm_t *comm, float *ret_params);

/*
 * comm_allreduce_sum_f32 of n host floats (n <= the n_vals of
 * train_cuda_new) over an NCCL comm, through the device buffer: the
 * per-rank losses, in place. 0 or the comm's negative errno.
 */
int train_cuda_allreduce_host(train_cuda_t *g, comm_t *comm, float *buf, size_t n);

/* comm_allgather_f32 of host floats the same way: this rank's
 * counts[rank] floats `in` into `out` (the sum of counts; above n_vals
 * through a device buffer allocated for the call). */
int train_cuda_allgather_host(train_cuda_t *g, comm_t *comm, const float *in, float *out,
                              const size_t *counts);

/* The all-reduce (sum) of the model's whole gradient buffer over comm,
 * after backward's kernels (tensor parallelism's unsharded reduce, which
 * cannot overlap backward). 0 or the comm's error. */
int train_cuda_allreduce_grads(train_cuda_t *g, comm_t *comm);

/* The gradients on the device: the shard's reduced ones (`shard`) or the
 * model's whole buffer (borrowed). */
const float *train_cuda_grads(train_cuda_t *g, bool shard);

/* The sum of squares of n device floats x (0 when n is 0). Waits. */
double train_cuda_sum_squares(train_cuda_t *g, const float *x, size_t n);

#endif
