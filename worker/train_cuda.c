/*
 * train_cuda: the GPU side of the training loop (see train_cuda.h). A thin
 * layer over the GPU engine (worker/engine/cuda/gpt2_cuda.h) that speaks
 * train.c's terms: TRAIN_EXIT_* codes and their messages, the clipping rule
 * split from AdamW the way train.c splits its phases, and host values
 * (the per-rank losses) sent through a device buffer, since an NCCL comm
 * reduces device memory only.
 */
#include "train_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include <cuda_runtime.h>

#include "gpt2_cuda.h"
#include "train.h"

/* The engine's exit status for a CUDA failure after set-up (cuda_check.h). */
#define TRAIN_CUDA_EXIT_DEVICE 71

struct train_cuda {
	gpt2_cuda_t *model;
	float *vals;    /* device: (n_vals) host values on their way to a collective */
	size_t n_vals;
	float grad_scale; /* the clipping factor of the last train_cuda_clip */
	comm_t *reduce;   /* the overlapped all-reduce of the last backward, if any */
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

/* "no usable CUDA GPU": retryable (TRAIN_EXIT_USAGE), never a spec error:
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
	return TRAIN_EXIT_USAGE;
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
	return TRAIN_EXIT_OK;
}

train_cuda_t *train_cuda_new(const gpt2_config_t *cfg, int B, int T, size_t n_vals, int *ret_exit,
                             char *err, size_t errlen)
{
	int rc = train_cuda_probe(err, errlen);
	if (rc != TRAIN_EXIT_OK) {
		*ret_exit = rc;
		return NULL;
	}
	train_cuda_t *g = calloc(1, sizeof *g);
	if (!g) {
		snprintf(err, errlen, "out of host memory");
		*ret_exit = TRAIN_EXIT_NOMEM;
		return NULL;
	}
	struct cudaDeviceProp prop;
	if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
		snprintf(g->name, sizeof g->name, "%s", prop.name);
	else
		snprintf(g->name, sizeof g->name, "CUDA device 0");
	(void)cudaGetLastError();

	char why[512] = "";
	g->model = gpt2_cuda_create(cfg, B, T, why, sizeof why);
	if (!g->model) {
		if (strncmp(why, "no CUDA GPU: ", 13) == 0) {
			*ret_exit = s_no_gpu(why + 13, err, errlen);
		} else {
			snprintf(err, errlen, "%s", why[0] ? why : "cannot create the GPU model");
			*ret_exit = strstr(why, "memory") ? TRAIN_EXIT_NOMEM : TRAIN_EXIT_SPEC;
		}
		goto fail;
	}
	g->n_vals = n_vals ? n_vals : 1;
	cudaError_t crc = cudaMalloc((void **)&g->vals, g->n_vals * sizeof(float));
	if (crc != cudaSuccess) {
		g->vals = NULL;
		(void)cudaGetLastError();
		snprintf(err, errlen, "out of GPU memory: %zu floats for the per-rank losses: %s",
			 g->n_vals, cudaGetErrorString(crc));
		*ret_exit = TRAIN_EXIT_NOMEM;
		goto fail;
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
	gpt2_cuda_free(g->model);
	if (g->vals)
		cudaFree(g->vals);
	free(g);
}

const char *train_cuda_device_name(const train_cuda_t *g)
{
	return g->name;
}

void train_cuda_memory(const train_cuda_t *g, size_t *ret_params, size_t *ret_grads,
                       size_t *ret_optim, size_t *ret_activations)
{
	size_t n = gpt2_cuda_num_params(g->model);
	size_t state = gpt2_cuda_state_bytes(g->model); /* params, grads, m, v (fp32) and the bf16 copy */
	*ret_grads = n * sizeof(float);
	*ret_optim = 2 * n * sizeof(float);
	*ret_params = state - *ret_grads - *ret_optim;
	*ret_activations = gpt2_cuda_activation_bytes(g->model);
}

void train_cuda_upload(train_cuda_t *g, const float *params, const float *adam_m,
                       const float *adam_v)
{
	gpt2_cuda_set_params(g->model, params);
	gpt2_cuda_set_moments(g->model, adam_m, adam_v);
}

void train_cuda_download(train_cuda_t *g, float *ret_params, float *ret_adam_m,
                         float *ret_adam_v)
{
	gpt2_cuda_get_params(g->model, ret_params);
	if (ret_adam_m && ret_adam_v)
		gpt2_cuda_get_moments(g->model, ret_adam_m, ret_adam_v);
}

void train_cuda_zero_grad(train_cuda_t *g)
{
	gpt2_cuda_zero_grad(g->model);
}

float train_cuda_forward(train_cuda_t *g, const int32_t *inputs, const int32_t *targets, int B,
                         int T)
{
	gpt2_cuda_forward(g->model, inputs, targets, B, T);
	return gpt2_cuda_loss(g->model);
}

/* gpt2_cuda's callback: a range of gradients is final, reduce it behind
 * the event. After a failure the rest is not started (comm_wait reports). */
static void s_grads_ready(void *ctx, size_t offset, size_t n, cudaEvent_t ready)
{
	train_cuda_t *g = ctx;
	if (g->reduce_rc < 0)
		return;
	int rc = comm_allreduce_sum_f32_async(g->reduce, gpt2_cuda_grads(g->model) + offset, n, ready);
	if (rc < 0)
		g->reduce_rc = rc;
}

void train_cuda_backward(train_cuda_t *g, float scale, comm_t *reduce)
{
	g->reduce = reduce;
	g->reduce_rc = 0;
	gpt2_cuda_set_grads_ready(g->model, reduce ? s_grads_ready : NULL, g);
	gpt2_cuda_backward(g->model, scale);
	gpt2_cuda_set_grads_ready(g->model, NULL, NULL);
	gpt2_cuda_sync(g->model);
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
	double norm = gpt2_cuda_grad_norm(g->model);
	g->grad_scale = 1.0f;
	if (grad_clip > 0 && isfinite(norm) && norm > grad_clip)
		g->grad_scale = (float)(grad_clip / norm);
	return norm;
}

void train_cuda_update(train_cuda_t *g, const optim_adamw_t *hp)
{
	gpt2_cuda_adamw(g->model, hp, g->grad_scale);
}

int train_cuda_allreduce_host(train_cuda_t *g, comm_t *comm, float *buf, size_t n)
{
	if (n > g->n_vals) {
		fprintf(stderr, "ringworker: fatal: train_cuda_allreduce_host: %zu values, room for %zu\n",
			n, g->n_vals);
		exit(EX_SOFTWARE);
	}
	/* The comm's stream is not ordered against the model's: each copy is
	 * finished (its stream synchronized; a plain cudaMemcpy from pageable
	 * memory may return before its DMA lands) before the next step reads it. */
	cudaStream_t s = gpt2_cuda_stream(g->model);
	s_check(cudaMemcpyAsync(g->vals, buf, n * sizeof(float), cudaMemcpyHostToDevice, s),
		"copying the per-rank values to the GPU");
	s_check(cudaStreamSynchronize(s), "copying the per-rank values to the GPU");
	int rc = comm_allreduce_sum_f32(comm, g->vals, n);
	if (rc < 0)
		return rc;
	s_check(cudaMemcpyAsync(buf, g->vals, n * sizeof(float), cudaMemcpyDeviceToHost, s),
		"copying the reduced values back");
	s_check(cudaStreamSynchronize(s), "copying the reduced values back");
	return 0;
}
