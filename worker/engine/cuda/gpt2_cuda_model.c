/*
 * gpt2_cuda_model: GPT-2's CUDA row of the model registry (model.h,
 * gpt2_model.h) over the GPU engine (gpt2_cuda.h). It maps the model
 * options onto gpt2_cuda's flags (streaming leaves out the gradients, and
 * the parameters under MODEL_STREAM_ALL; no_moments the AdamW state), gives
 * the GPU model the tensor table and ranges of the CPU one (gpt2_layout),
 * and speaks model.h's streaming contract: a range of gradients is handed
 * to the trainer only once the kernels that wrote it are done. With
 * opt->tp of size t > 1 it is TP rank tp->rank (gpt2_cuda_new_tp) and its
 * table the CPU row's local one at the same t (gpt2_layout_tp). Compiled
 * with the trainer in builds with the CUDA engine (and its emulator).
 */
#include "gpt2_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "gpt2.h"
#include "gpt2_cuda.h"
#include "optim.h"

/* The engine's exit status for a CUDA failure after set-up (cuda_check.h). */
#define GPT2_CUDA_MODEL_EXIT_DEVICE 71

typedef struct {
	gpt2_cuda_t *m;
	model_tensor_t *tensors; /* (n_tensors) gpt2_layout's */
	int n_tensors;
	size_t max_range;
	bool grads, moments; /* the model holds them */
	model_stream_t stream;
	model_grads_ready_fn ready_fn;
	void *ready_ctx;
} row_t;

static void s_check(cudaError_t rc, const char *what)
{
	if (rc == cudaSuccess)
		return;
	fprintf(stderr,
		"ringworker: fatal: CUDA error in the training loop: %s: %s (check the GPU with "
		"nvidia-smi; rerun with CUDA_LAUNCH_BLOCKING=1 to locate it)\n",
		what, cudaGetErrorString(rc));
	exit(GPT2_CUDA_MODEL_EXIT_DEVICE);
}

static float *s_grad_begin(void *ctx, size_t lo, size_t hi)
{
	row_t *r = ctx;
	return r->stream.grad_begin(r->stream.ctx, (model_range_t){lo, hi});
}

static void s_grad_end(void *ctx, float *g, size_t lo, size_t hi, cudaEvent_t ready)
{
	row_t *r = ctx;
	s_check(cudaEventSynchronize(ready), "waiting for a range of gradients");
	r->stream.grad_end(r->stream.ctx, g, (model_range_t){lo, hi});
}

static const float *s_fetch(void *ctx, size_t lo, size_t hi, size_t next_lo, size_t next_hi)
{
	row_t *r = ctx;
	return r->stream.fetch(r->stream.ctx, (model_range_t){lo, hi}, (model_range_t){next_lo, next_hi});
}

static void s_release(void *ctx, const float *p)
{
	row_t *r = ctx;
	r->stream.release(r->stream.ctx, p);
}

static void s_free(void *impl)
{
	row_t *r = impl;
	if (!r)
		return;
	gpt2_cuda_free(r->m);
	free(r->tensors);
	free(r);
}

static int s_create(const model_config_t *cfg, const model_options_t *opt, void **ret_impl,
		    char *err, size_t errlen)
{
	if (opt->streaming != MODEL_DENSE && (!opt->stream || !opt->stream->grad_begin ||
					       !opt->stream->grad_end ||
					       (opt->streaming == MODEL_STREAM_ALL &&
						(!opt->stream->fetch || !opt->stream->release)))) {
		snprintf(err, errlen, "internal error: a streamed model needs its stream functions");
		return -EINVAL;
	}
	row_t *r = calloc(1, sizeof *r);
	if (!r) {
		snprintf(err, errlen, "out of host memory");
		return -ENOMEM;
	}
	unsigned flags = 0;
	if (opt->no_moments)
		flags |= GPT2_CUDA_NO_MOMENTS;
	if (opt->fused_attention)
		flags |= GPT2_CUDA_FUSED_ATTENTION;
	if (opt->streaming != MODEL_DENSE)
		flags |= GPT2_CUDA_NO_GRADS;
	if (opt->streaming == MODEL_STREAM_ALL)
		flags |= GPT2_CUDA_NO_PARAMS;
	r->grads = opt->streaming == MODEL_DENSE;
	r->moments = !opt->no_moments;
	int rc = gpt2_cuda_new_tp(cfg, opt->max_B, opt->max_T, flags, opt->tp, &r->m, err, errlen);
	if (rc < 0)
		goto fail;
	rc = gpt2_layout_tp(cfg, opt->tp ? opt->tp->size : 1, &r->tensors, &r->n_tensors, &r->max_range);
	if (rc < 0) {
		snprintf(err, errlen, "out of host memory");
		goto fail;
	}
	if (opt->streaming != MODEL_DENSE) {
		r->stream = *opt->stream;
		gpt2_cuda_stream_grads(r->m, s_grad_begin, s_grad_end, r, r->max_range);
	}
	if (opt->streaming == MODEL_STREAM_ALL &&
	    gpt2_cuda_stream_params(r->m, s_fetch, s_release, r, err, errlen) < 0) {
		rc = -ENOMEM;
		goto fail;
	}
	*ret_impl = r;
	return 0;
fail:
	s_free(r);
	return rc;
}

static size_t s_num_params(const void *impl)
{
	const row_t *r = impl;
	return gpt2_cuda_num_params(r->m);
}

static float *s_params(void *impl)
{
	row_t *r = impl;
	return gpt2_cuda_params(r->m);
}

static float *s_grads(void *impl)
{
	row_t *r = impl;
	return gpt2_cuda_grads(r->m);
}

static const model_tensor_t *s_tensors(const void *impl, int *ret_n)
{
	const row_t *r = impl;
	*ret_n = r->n_tensors;
	return r->tensors;
}

static size_t s_max_range(const void *impl)
{
	const row_t *r = impl;
	return r->max_range;
}

static void s_zero_grad(void *impl)
{
	row_t *r = impl;
	gpt2_cuda_zero_grad(r->m);
}

static float s_forward(void *impl, const int32_t *inputs, const int32_t *targets, int B, int T)
{
	row_t *r = impl;
	gpt2_cuda_forward(r->m, inputs, targets, B, T);
	return gpt2_cuda_loss(r->m);
}

static void s_backward(void *impl, float loss_scale)
{
	row_t *r = impl;
	gpt2_cuda_backward(r->m, loss_scale);
}

static double s_flops_per_token(const void *impl, int T)
{
	const row_t *r = impl;
	return gpt2_cuda_flops_per_token(r->m, T);
}

static size_t s_state_bytes(const void *impl)
{
	const row_t *r = impl;
	return gpt2_cuda_state_bytes(r->m);
}

static size_t s_grad_bytes(const void *impl)
{
	const row_t *r = impl;
	return r->grads ? gpt2_cuda_num_params(r->m) * sizeof(float) : 0;
}

static size_t s_param_bytes(const void *impl)
{
	const row_t *r = impl;
	size_t moments = r->moments ? 2 * gpt2_cuda_num_params(r->m) * sizeof(float) : 0;
	return s_state_bytes(impl) - s_grad_bytes(impl) - moments;
}

static size_t s_activation_bytes(const void *impl)
{
	const row_t *r = impl;
	return gpt2_cuda_activation_bytes(r->m);
}

/* ---- model_device_ops_t ---- */

static void s_set_params(void *impl, const float *params)
{
	row_t *r = impl;
	gpt2_cuda_set_params(r->m, params);
}

static void s_get_params(void *impl, float *ret_params)
{
	row_t *r = impl;
	gpt2_cuda_get_params(r->m, ret_params);
}

static void s_set_moments(void *impl, const float *m, const float *v)
{
	row_t *r = impl;
	gpt2_cuda_set_moments(r->m, m, v);
}

static void s_get_moments(void *impl, float *ret_m, float *ret_v)
{
	row_t *r = impl;
	gpt2_cuda_get_moments(r->m, ret_m, ret_v);
}

static void *s_stream(const void *impl)
{
	const row_t *r = impl;
	return gpt2_cuda_stream(r->m);
}

static void s_sync(void *impl)
{
	row_t *r = impl;
	gpt2_cuda_sync(r->m);
}

static void s_params_written(void *impl)
{
	row_t *r = impl;
	gpt2_cuda_params_written(r->m);
}

static void s_grads_ready(void *ctx, size_t offset, size_t n, cudaEvent_t ready)
{
	row_t *r = ctx;
	r->ready_fn(r->ready_ctx, (model_range_t){offset, offset + n}, ready);
}

static void s_set_grads_ready(void *impl, model_grads_ready_fn fn, void *ctx)
{
	row_t *r = impl;
	r->ready_fn = fn;
	r->ready_ctx = ctx;
	gpt2_cuda_set_grads_ready(r->m, fn ? s_grads_ready : NULL, fn ? r : NULL);
}

static double s_grad_norm(void *impl)
{
	row_t *r = impl;
	return gpt2_cuda_grad_norm(r->m);
}

static double s_sum_squares(void *impl, const float *x, size_t n)
{
	row_t *r = impl;
	return gpt2_cuda_sum_squares(r->m, x, n);
}

static void s_adamw(void *impl, const struct optim_adamw *hp, float grad_scale)
{
	row_t *r = impl;
	gpt2_cuda_adamw(r->m, hp, grad_scale);
}

static void s_adamw_range(void *impl, size_t lo, size_t n, float *params, const float *grads,
			  float *m, float *v, const struct optim_adamw *hp, float grad_scale)
{
	row_t *r = impl;
	gpt2_cuda_adamw_range(r->m, lo, n, params, grads, m, v, hp, grad_scale);
}

static bool s_fused_attention(const void *impl)
{
	const row_t *r = impl;
	return gpt2_cuda_fused_attention(r->m);
}

static void s_tp_comm(const void *impl, model_tp_comm_t *ret)
{
	const row_t *r = impl;
	gpt2_cuda_tp_comm(r->m, ret);
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

const model_ops_t gpt2_model_cuda = {
	.arch = "gpt2",
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
	.dev = &s_dev,
	.tp_comm = s_tp_comm,
};
