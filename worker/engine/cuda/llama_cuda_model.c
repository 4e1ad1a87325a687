/*
 * llama_cuda_model: Llama's CUDA row of the model registry (model.h) over
 * the GPU engine (llama_cuda.h). The tensor table, ranges, initial values
 * and FLOPs are llama_layout's, shared with the CPU row, so the trainer
 * initialises a host model and uploads it (dev->set_params) and snapshots
 * move between the two. Streaming (ZeRO-2/3) and no_moments (ZeRO-1/2/3:
 * the trainer keeps a shard's moments) go to llama_cuda as they are.
 * Compiled with the trainer in builds with the CUDA engine (and its
 * emulator).
 */
#include "llama_cuda_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "llama_cuda.h"
#include "optim.h"

typedef struct {
	llama_cuda_t *m;
	bool moments, grads;
} row_t;

static void s_free(void *impl)
{
	row_t *r = impl;
	if (!r)
		return;
	llama_cuda_free(r->m);
	free(r);
}

static int s_create(const model_config_t *cfg, const model_options_t *opt, void **ret_impl,
		    char *err, size_t errlen)
{
	row_t *r = calloc(1, sizeof *r);
	if (!r) {
		snprintf(err, errlen, "out of host memory");
		return -ENOMEM;
	}
	r->moments = !opt->no_moments;
	r->grads = opt->streaming == MODEL_DENSE;
	int rc = llama_cuda_new_tp(cfg, opt->max_B, opt->max_T, r->moments, opt->streaming, opt->stream,
				   opt->tp, &r->m, err, errlen);
	if (rc < 0) {
		free(r);
		return rc;
	}
	*ret_impl = r;
	return 0;
}

#define M(impl) (((row_t *)(impl))->m)
#define CM(impl) (((const row_t *)(impl))->m)

static size_t s_num_params(const void *impl) { return llama_cuda_num_params(CM(impl)); }
static float *s_params(void *impl) { return llama_cuda_params(M(impl)); }
static float *s_grads(void *impl) { return llama_cuda_grads(M(impl)); }
static size_t s_max_range(const void *impl) { return llama_cuda_max_range(CM(impl)); }
static void s_zero_grad(void *impl) { llama_cuda_zero_grad(M(impl)); }
static void s_backward(void *impl, float loss_scale) { llama_cuda_backward(M(impl), loss_scale); }
static size_t s_state_bytes(const void *impl) { return llama_cuda_state_bytes(CM(impl)); }
static size_t s_activation_bytes(const void *impl) { return llama_cuda_activation_bytes(CM(impl)); }

static const model_tensor_t *s_tensors(const void *impl, int *ret_n)
{
	return llama_cuda_tensors(CM(impl), ret_n);
}

static float s_forward(void *impl, const int32_t *inputs, const int32_t *targets, int B, int T)
{
	return llama_cuda_forward(M(impl), inputs, targets, B, T);
}

static double s_flops_per_token(const void *impl, int T)
{
	return llama_cuda_flops_per_token(CM(impl), T);
}

static void s_tp_comm(const void *impl, model_tp_comm_t *ret)
{
	llama_cuda_tp_comm(CM(impl), ret);
}

static size_t s_grad_bytes(const void *impl)
{
	const row_t *r = impl;
	return r->grads ? llama_cuda_num_params(r->m) * sizeof(float) : 0;
}

static size_t s_param_bytes(const void *impl)
{
	const row_t *r = impl;
	size_t n = llama_cuda_num_params(r->m) * sizeof(float);
	return s_state_bytes(impl) - llama_cuda_tp_bytes(r->m) - s_grad_bytes(impl) - (r->moments ? 2 * n : 0);
}

/* ---- model_device_ops_t ---- */

static void s_set_params(void *impl, const float *p) { llama_cuda_set_params(M(impl), p); }
static void s_get_params(void *impl, float *p) { llama_cuda_get_params(M(impl), p); }
static void s_set_moments(void *impl, const float *m, const float *v) { llama_cuda_set_moments(M(impl), m, v); }
static void s_get_moments(void *impl, float *m, float *v) { llama_cuda_get_moments(M(impl), m, v); }
static void *s_stream(const void *impl) { return llama_cuda_stream(CM(impl)); }
static void s_sync(void *impl) { llama_cuda_sync(M(impl)); }
static void s_params_written(void *impl) { llama_cuda_params_written(M(impl)); }
static double s_grad_norm(void *impl) { return llama_cuda_grad_norm(M(impl)); }

static void s_set_grads_ready(void *impl, model_grads_ready_fn fn, void *ctx)
{
	llama_cuda_set_grads_ready(M(impl), fn, ctx);
}

static double s_sum_squares(void *impl, const float *x, size_t n)
{
	return llama_cuda_sum_squares(M(impl), x, n);
}

static void s_adamw(void *impl, const struct optim_adamw *hp, float grad_scale)
{
	llama_cuda_adamw(M(impl), hp, grad_scale);
}

static void s_adamw_range(void *impl, size_t lo, size_t n, float *params, const float *grads,
			  float *m, float *v, const struct optim_adamw *hp, float grad_scale)
{
	llama_cuda_adamw_range(M(impl), lo, n, params, grads, m, v, hp, grad_scale);
}

static bool s_fused_attention(const void *impl)
{
	(void)impl;
	return true; /* Llama's GPU attention is always the fused kernel */
}

static const model_device_ops_t s_dev = {
	.set_params = s_set_params,
	.get_params = s_get_params,
	.set_moments = s_set_moments,
	.get_moments = s_get_moments,
	.stream = s_stream,
	.sync = s_sync,
	.params_written = s_params_written,
	.set_grads_ready = s_set_grads_ready,
	.grad_norm = s_grad_norm,
	.sum_squares = s_sum_squares,
	.adamw = s_adamw,
	.adamw_range = s_adamw_range,
	.fused_attention = s_fused_attention,
	.state_bytes = s_state_bytes,
};

const model_ops_t llama_model_cuda = {
	.arch = "llama",
	.device = MODEL_DEVICE_CUDA,
	.create = s_create,
	.free = s_free,
	.num_params = s_num_params,
	.params = s_params,
	.grads = s_grads,
	.tensors = s_tensors,
	.max_range = s_max_range,
	.init_params = NULL, /* initialised on the host, then set_params */
	.init_range = NULL,
	.zero_grad = s_zero_grad,
	.forward = s_forward,
	.backward = s_backward,
	.flops_per_token = s_flops_per_token,
	.param_bytes = s_param_bytes,
	.grad_bytes = s_grad_bytes,
	.activation_bytes = s_activation_bytes,
	.tp_comm = s_tp_comm,
	.dev = &s_dev,
};
