/*
 * train_cuda: the GPU side of the training loop (see train_cuda.h). A thin
 * layer over the model's CUDA row (worker/engine/model.h: its operations
 * and the device ones, model_dev) that speaks
 * train.c's terms: RM_EXIT_* codes and their messages, the clipping rule
 * split from AdamW the way train.c splits its phases, and host values
 * (the per-rank losses) sent through a device buffer, since an NCCL comm
 * reduces device memory only.
 */
#include "train_cuda.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include <cuda_runtime.h>

#include "model.h"
#include "optim.h"
#include "train.h"

/* The engine's exit status for a CUDA failure after set-up (cuda_check.h). */
#define TRAIN_CUDA_EXIT_DEVICE 71

struct train_cuda {
	model_t *model;
	const model_device_ops_t *dev; /* the model's device operations */
	void *impl;                    /* and the object they take */
	float *vals;    /* device: (n_vals) host values on their way to a collective */
	size_t n_vals;
	bool sharded;
	train_cuda_shard_t shard;
	float *shard_state; /* device, sharded: m, v (and zero1's grads) of shard.len floats each */
	float *shard_grads, *shard_m, *shard_v; /* in shard_state, or zero2's shard_t's */
	float *shard_params; /* zero3: the shard_t's master shard; else NULL */
	float grad_scale; /* the clipping factor of the last train_cuda_clip or _set_clip */
	comm_t *reduce;   /* the comm of the last backward's overlapped all-reduce or
			   * zero1 reduce-scatter, until waited for; else NULL */
	int reduce_rc;    /* its first error */
	char name[256];
};

/* A CUDA failure after set-up: one line, exit 71, as the engine's CUDA_CHECK. */
static void s_check(cudaError_t rc, const char *what)
{
	if (rc == cudaSuccess)
		return;
	fprintf(stderr,
		"ringworker: fatal: CUDA error in the training loop: %s: %s (check the GPU with "
		"nvidia-smi; rerun with CUDA_LAUNCH_BLOCKING=1 to locate it)\n",
		what, cudaGetErrorString(rc));
	exit(TRAIN_CUDA_EXIT_DEVICE);
}

/* "no usable CUDA GPU": retryable (RM_EXIT_USAGE), never a spec error:
 * the spec is fine, this worker cannot run it (docs/gpu.md). */
static int s_no_gpu(const char *reason, char *err, size_t errlen)
{
	const char *visible = getenv("CUDA_VISIBLE_DEVICES");
	if (visible)
		snprintf(err, errlen,
			 "parallel.device is cuda but this worker has no usable CUDA GPU: %s"
			 " (CUDA_VISIBLE_DEVICES=%s)",
			 reason, visible);
	else
		snprintf(err, errlen, "parallel.device is cuda but this worker has no usable CUDA GPU: %s",
			 reason);
	return RM_EXIT_USAGE;
}

int train_cuda_probe(char *err, size_t errlen)
{
	int n = 0;
	cudaError_t rc = cudaGetDeviceCount(&n);
	if (rc == cudaSuccess && n == 0)
		return s_no_gpu("no CUDA device is visible", err, errlen);
	if (rc == cudaSuccess)
		rc = cudaSetDevice(0);
	if (rc != cudaSuccess) {
		(void)cudaGetLastError();
		return s_no_gpu(cudaGetErrorString(rc), err, errlen);
	}
	return RM_EXIT_OK;
}

/* zero2/zero3: the model's stream is the shard_t: backward's gradient
 * ranges go to it (the model hands each over once the kernels that write it
 * are done), and under zero3 each range of parameters is all-gathered by it
 * when the model needs it, the next one meanwhile. */
static float *s_stream_begin(void *ctx, model_range_t r)
{
	train_cuda_t *g = ctx;
	return shard_grad_begin(g->shard.zero, r.lo, r.hi);
}

static void s_stream_end(void *ctx, float *grads, model_range_t r)
{
	train_cuda_t *g = ctx;
	shard_grad_end(g->shard.zero, grads, r.lo, r.hi);
}

static const float *s_fetch(void *ctx, model_range_t r, model_range_t next)
{
	train_cuda_t *g = ctx;
	return shard_fetch(g->shard.zero, r.lo, r.hi, next.lo, next.hi);
}

static void s_release(void *ctx, const float *p)
{
	train_cuda_t *g = ctx;
	shard_release(g->shard.zero, p);
}

/* The GPU model of the spec's architecture (model.h's CUDA row), with the
 * shard_t behind its streaming under zero2 and zero3. RM_EXIT_* code. */
static int s_create_model(train_cuda_t *g, const char *arch, const model_config_t *cfg, int B,
			  int T, const train_cuda_shard_t *shard, const model_tp_t *tp, char *err,
			  size_t errlen)
{
	/* attention: fused on tensor cores (the default; head sizes 16, 32
	 * and 64, others fall back to GEMMs) or batched GEMMs over the T x T
	 * square, chosen on the worker's host (docs/gpu.md) */
	const char *attention = getenv("RINGMASTER_CUDA_ATTENTION");
	if (attention && *attention && strcmp(attention, "gemm") != 0 && strcmp(attention, "fused") != 0) {
		snprintf(err, errlen, "RINGMASTER_CUDA_ATTENTION must be gemm or fused (got '%s')",
			 attention);
		return RM_EXIT_SPEC;
	}
	model_stream_t stream = {g, s_fetch, s_release, s_stream_begin, s_stream_end};
	model_options_t opt = {
		.max_B = B,
		.max_T = T,
		.precision = MODEL_PRECISION_BF16,
		.streaming = !shard || !shard->zero ? MODEL_DENSE
			: shard_params(shard->zero) ? MODEL_STREAM_ALL : MODEL_STREAM_GRADS,
		.stream = &stream,
		.no_moments = shard != NULL,
		.fused_attention = !attention || strcmp(attention, "gemm") != 0,
		.tp = tp,
	};
	char why[512] = "";
	int rc = model_create(arch, MODEL_DEVICE_CUDA, cfg, &opt, &g->model, why, sizeof why);
	if (rc == -ENODEV) {
		const char *reason = strncmp(why, "no CUDA GPU: ", 13) == 0 ? why + 13 : why;
		return s_no_gpu(reason, err, errlen);
	}
	if (rc < 0) {
		snprintf(err, errlen, "%s", why[0] ? why : "cannot create the GPU model");
		return rc == -ENOMEM ? RM_EXIT_NOMEM : RM_EXIT_SPEC;
	}
	g->dev = model_dev(g->model);
	g->impl = model_impl(g->model);
	return RM_EXIT_OK;
}

train_cuda_t *train_cuda_new(const char *arch, const model_config_t *cfg, int B, int T,
                             size_t n_vals, const train_cuda_shard_t *shard, const model_tp_t *tp,
                             int *ret_exit, char *err, size_t errlen)
{
	int rc = train_cuda_probe(err, errlen);
	if (rc != RM_EXIT_OK) {
		*ret_exit = rc;
		return NULL;
	}
	train_cuda_t *g = calloc(1, sizeof *g);
	if (!g) {
		snprintf(err, errlen, "out of host memory");
		*ret_exit = RM_EXIT_NOMEM;
		return NULL;
	}
	struct cudaDeviceProp prop;
	if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
		snprintf(g->name, sizeof g->name, "%s", prop.name);
	else
		snprintf(g->name, sizeof g->name, "CUDA device 0");
	(void)cudaGetLastError();

	if (shard)
		g->shard = *shard; /* the model's stream reads g->shard.zero */
	rc = s_create_model(g, arch, cfg, B, T, shard, tp, err, errlen);
	if (rc != RM_EXIT_OK) {
		*ret_exit = rc;
		goto fail;
	}
	g->n_vals = n_vals ? n_vals : 1;
	cudaError_t crc = cudaMalloc((void **)&g->vals, g->n_vals * sizeof(float));
	if (crc != cudaSuccess) {
		g->vals = NULL;
		(void)cudaGetLastError();
		snprintf(err, errlen, "out of GPU memory: %zu floats for the per-rank losses: %s",
			 g->n_vals, cudaGetErrorString(crc));
		*ret_exit = RM_EXIT_NOMEM;
		goto fail;
	}
	if (shard) {
		g->sharded = true;
		size_t len = shard->len ? shard->len : 1;
		size_t bytes = (shard->zero ? 2 : 3) * len * sizeof(float);
		crc = cudaMalloc((void **)&g->shard_state, bytes);
		if (crc == cudaSuccess)
			crc = cudaMemset(g->shard_state, 0, bytes);
		if (crc != cudaSuccess) {
			(void)cudaGetLastError();
			snprintf(err, errlen,
				 "out of GPU memory: %.1f MiB for the ZeRO-1 shard's gradients and AdamW"
				 " state: %s",
				 (double)bytes / 1048576.0, cudaGetErrorString(crc));
			*ret_exit = RM_EXIT_NOMEM;
			goto fail;
		}
		g->shard_m = g->shard_state;
		g->shard_v = g->shard_state + len;
		g->shard_grads = shard->zero ? shard_grads(shard->zero) : g->shard_state + 2 * len;
		g->shard_params = shard->zero ? shard_params(shard->zero) : NULL;
	}
	g->grad_scale = 1.0f;
	return g;

fail:
	train_cuda_free(g);
	return NULL;
}

void train_cuda_free(train_cuda_t *g)
{
	if (!g)
		return;
	model_free(g->model);
	if (g->vals)
		cudaFree(g->vals);
	if (g->shard_state)
		cudaFree(g->shard_state);
	free(g);
}

bool train_cuda_fused_attention(const train_cuda_t *g)
{
	return g->dev->fused_attention(g->impl);
}

const char *train_cuda_device_name(const train_cuda_t *g)
{
	return g->name;
}

void train_cuda_model_bytes(const train_cuda_t *g, size_t *ret_params, size_t *ret_grads,
                            size_t *ret_activations)
{
	/* the model row's: params with the bf16 copy (its m and v, unsharded,
	 * count as the optimizer's), grads unless streamed */
	*ret_params = model_param_bytes(g->model);
	*ret_grads = model_grad_bytes(g->model);
	*ret_activations = model_activation_bytes(g->model);
}

/* n floats between host and device on the model's stream, finished before
 * it returns (a plain cudaMemcpy from pageable memory may return before
 * its DMA lands, and the comm's stream is not ordered against the model's). */
static void s_copy(train_cuda_t *g, void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
		   const char *what)
{
	cudaStream_t s = g->dev->stream(g->impl);
	s_check(cudaMemcpyAsync(dst, src, n * sizeof(float), kind, s), what);
	s_check(cudaStreamSynchronize(s), what);
}

void train_cuda_upload(train_cuda_t *g, const float *params, const float *adam_m,
                       const float *adam_v)
{
	if (g->shard_params)
		s_copy(g, g->shard_params, params + g->shard.lo, g->shard.count, cudaMemcpyHostToDevice,
		       "copying the parameter shard to the GPU");
	else
		g->dev->set_params(g->impl, params);
	if (!g->sharded) {
		g->dev->set_moments(g->impl, adam_m, adam_v);
		return;
	}
	s_copy(g, g->shard_m, adam_m, g->shard.len, cudaMemcpyHostToDevice,
	       "copying AdamW's m of the shard to the GPU");
	s_copy(g, g->shard_v, adam_v, g->shard.len, cudaMemcpyHostToDevice,
	       "copying AdamW's v of the shard to the GPU");
}

void train_cuda_download(train_cuda_t *g, float *ret_params, float *ret_adam_m,
                         float *ret_adam_v)
{
	if (g->shard_params)
		s_copy(g, ret_params + g->shard.lo, g->shard_params, g->shard.count,
		       cudaMemcpyDeviceToHost, "copying the parameter shard from the GPU");
	else
		g->dev->get_params(g->impl, ret_params);
	if (!ret_adam_m || !ret_adam_v)
		return;
	if (!g->sharded) {
		g->dev->get_moments(g->impl, ret_adam_m, ret_adam_v);
		return;
	}
	s_copy(g, ret_adam_m, g->shard_m, g->shard.len, cudaMemcpyDeviceToHost,
	       "copying AdamW's m of the shard from the GPU");
	s_copy(g, ret_adam_v, g->shard_v, g->shard.len, cudaMemcpyDeviceToHost,
	       "copying AdamW's v of the shard from the GPU");
}

void train_cuda_zero_grad(train_cuda_t *g)
{
	model_zero_grad(g->model);
}

float train_cuda_forward(train_cuda_t *g, const int32_t *inputs, const int32_t *targets, int B,
                         int T)
{
	return model_forward(g->model, inputs, targets, B, T);
}

/* The model's callback: a range of gradients is final: all-reduce it
 * (unsharded) or reduce-scatter it into the shard's gradients (zero1),
 * behind the event. After a failure the rest is not started (comm_wait
 * reports). */
static void s_grads_ready(void *ctx, model_range_t r, void *ready)
{
	train_cuda_t *g = ctx;
	size_t offset = r.lo, n = r.hi - r.lo;
	if (g->reduce_rc < 0)
		return;
	float *grads = model_grads(g->model);
	int rc = g->sharded ? comm_reduce_scatter_range_sum_f32_async(g->reduce, grads, g->shard_grads,
								      g->shard.counts, offset, n, ready)
			    : comm_allreduce_sum_f32_async(g->reduce, grads + offset, n, ready);
	if (rc < 0)
		g->reduce_rc = rc;
}

void train_cuda_backward(train_cuda_t *g, float scale, comm_t *reduce)
{
	if (reduce && g->sharded && g->shard.zero) {
		/* zero2/3 stream their gradients to the shard_t instead */
		fprintf(stderr, "ringworker: fatal: train_cuda_backward: a comm to reduce over with "
				"zero2 or zero3\n");
		exit(EX_SOFTWARE);
	}
	g->reduce = reduce;
	g->reduce_rc = 0;
	g->dev->set_grads_ready(g->impl, reduce ? s_grads_ready : NULL, g);
	model_backward(g->model, scale);
	g->dev->set_grads_ready(g->impl, NULL, NULL);
	g->dev->sync(g->impl);
}

int train_cuda_reduce_wait(train_cuda_t *g)
{
	if (!g->reduce)
		return 0;
	int rc = g->reduce_rc < 0 ? g->reduce_rc : comm_wait(g->reduce);
	g->reduce = NULL;
	return rc;
}

double train_cuda_clip(train_cuda_t *g, double grad_clip)
{
	double norm = g->dev->grad_norm(g->impl);
	g->grad_scale = 1.0f;
	if (grad_clip > 0 && isfinite(norm) && norm > grad_clip)
		g->grad_scale = (float)(grad_clip / norm);
	return norm;
}

int train_cuda_reduce_scatter(train_cuda_t *g, comm_t *comm)
{
	if (g->reduce) /* started range by range by the last backward */
		return train_cuda_reduce_wait(g);
	g->dev->sync(g->impl); /* backward has written the gradients */
	return comm_reduce_scatter_sum_f32(comm, model_grads(g->model), g->shard_grads,
					   g->shard.counts);
}

double train_cuda_shard_sum_squares(train_cuda_t *g)
{
	return g->dev->sum_squares(g->impl, g->shard_grads, g->shard.count);
}

void train_cuda_set_clip(train_cuda_t *g, float factor)
{
	g->grad_scale = factor;
}

void train_cuda_update(train_cuda_t *g, const optim_adamw_t *hp)
{
	if (!g->sharded)
		g->dev->adamw(g->impl, hp, g->grad_scale);
	else if (g->shard.count)
		g->dev->adamw_range(g->impl, g->shard.lo, g->shard.count,
				    g->shard_params ? g->shard_params
						    : model_params(g->model) + g->shard.lo,
				    g->shard_grads, g->shard_m, g->shard_v, hp, g->grad_scale);
}

int train_cuda_gather_replica(train_cuda_t *g, comm_t *comm, float *ret_params)
{
	size_t n = model_num_params(g->model);
	float *all = NULL;
	s_check(cudaMalloc((void **)&all, n * sizeof(float)), "allocating the gathered replica");
	const float *mine = g->shard.count ? g->shard_params : all;
	int rc = comm_allgather_f32(comm, mine, all, g->shard.counts);
	if (rc == 0)
		s_copy(g, ret_params, all, n, cudaMemcpyDeviceToHost, "copying the gathered replica");
	cudaFree(all);
	return rc;
}

int train_cuda_gather_params(train_cuda_t *g, comm_t *comm)
{
	g->dev->sync(g->impl); /* AdamW has written this rank's range */
	float *p = model_params(g->model);
	/* An empty last shard may start past the end of the buffer. */
	const float *mine = g->shard.count ? p + g->shard.lo : p;
	int rc = comm_allgather_f32(comm, mine, p, g->shard.counts);
	if (rc < 0)
		return rc;
	g->dev->params_written(g->impl);
	return 0;
}

/* More host values than train_cuda_new made room for: a programming error. */
static void s_room(const char *what, size_t n, size_t room)
{
	if (n <= room)
		return;
	fprintf(stderr, "ringworker: fatal: %s: %zu values, room for %zu\n", what, n, room);
	exit(EX_SOFTWARE);
}

int train_cuda_allreduce_host(train_cuda_t *g, comm_t *comm, float *buf, size_t n)
{
	s_room("train_cuda_allreduce_host", n, g->n_vals);
	s_copy(g, g->vals, buf, n, cudaMemcpyHostToDevice, "copying the per-rank values to the GPU");
	int rc = comm_allreduce_sum_f32(comm, g->vals, n);
	if (rc < 0)
		return rc;
	s_copy(g, buf, g->vals, n, cudaMemcpyDeviceToHost, "copying the reduced values back");
	return 0;
}

int train_cuda_allgather_host(train_cuda_t *g, comm_t *comm, const float *in, float *out,
                              const size_t *counts)
{
	int W = comm_world_size(comm), rank = comm_rank(comm);
	size_t total = 0, at = 0;
	for (int r = 0; r < W; r++) {
		if (r == rank)
			at = total;
		total += counts[r];
	}
	/* the values buffer, or one as large as this gather (snapshots under
	 * tensor parallelism gather whole buffers) */
	float *dev = g->vals;
	if (total > g->n_vals)
		s_check(cudaMalloc((void **)&dev, total * sizeof(float)), "allocating a gather's buffer");
	/* in place: this rank's values already at their place in the output */
	s_copy(g, dev + at, in, counts[rank], cudaMemcpyHostToDevice,
	       "copying the per-rank values to the GPU");
	int rc = comm_allgather_f32(comm, dev + at, dev, counts);
	if (rc == 0)
		s_copy(g, out, dev, total, cudaMemcpyDeviceToHost, "copying the gathered values back");
	if (dev != g->vals)
		cudaFree(dev);
	return rc;
}

int train_cuda_allreduce_grads(train_cuda_t *g, comm_t *comm)
{
	g->dev->sync(g->impl); /* backward has written the gradients */
	return comm_allreduce_sum_f32(comm, model_grads(g->model), model_num_params(g->model));
}

const float *train_cuda_grads(train_cuda_t *g, bool shard)
{
	return shard ? g->shard_grads : model_grads(g->model);
}

double train_cuda_sum_squares(train_cuda_t *g, const float *x, size_t n)
{
	return n ? g->dev->sum_squares(g->impl, x, n) : 0.0;
}
