/*
 * llama_model: Llama's CPU row of the model registry (see llama_model.h):
 * each operation is the llama.c function of the same name.
 */
#include "llama_model.h"

#include "llama.h"

static int s_create(const model_config_t *cfg, const model_options_t *opt, void **ret_impl,
		    char *err, size_t errlen)
{
	llama_t *m = NULL;
	int rc = llama_new_tp(cfg, opt->max_B, opt->max_T, opt->precision, opt->streaming, opt->stream,
			      opt->tp, &m, err, errlen);
	if (rc == 0)
		*ret_impl = m;
	return rc;
}

static void s_free(void *impl)
{
	llama_free(impl);
}

static size_t s_num_params(const void *impl)
{
	return llama_num_params(impl);
}

static float *s_params(void *impl)
{
	return llama_params(impl);
}

static float *s_grads(void *impl)
{
	return llama_grads(impl);
}

static const model_tensor_t *s_tensors(const void *impl, int *ret_n)
{
	return llama_tensors(impl, ret_n);
}

static size_t s_max_range(const void *impl)
{
	return llama_max_range(impl);
}

static void s_init_params(void *impl, uint64_t seed)
{
	llama_init_params(impl, seed);
}

static void s_init_range(const void *impl, uint64_t seed, size_t lo, size_t hi, float *out)
{
	llama_init_range_of(impl, seed, lo, hi, out);
}

static void s_zero_grad(void *impl)
{
	llama_zero_grad(impl);
}

static float s_forward(void *impl, const int32_t *inputs, const int32_t *targets, int B, int T)
{
	return llama_forward(impl, inputs, targets, B, T);
}

static void s_backward(void *impl, float loss_scale)
{
	llama_backward(impl, loss_scale);
}

static double s_flops_per_token(const void *impl, int T)
{
	return llama_model_flops(impl, T);
}

static size_t s_param_bytes(const void *impl)
{
	return llama_param_bytes(impl);
}

static size_t s_grad_bytes(const void *impl)
{
	return llama_grad_bytes(impl);
}

static size_t s_activation_bytes(const void *impl)
{
	return llama_activation_bytes(impl);
}

static void s_tp_comm(const void *impl, model_tp_comm_t *ret)
{
	llama_tp_comm(impl, ret);
}

const model_ops_t llama_model_cpu = {
	.arch = "llama",
	.device = MODEL_DEVICE_CPU,
	.create = s_create,
	.free = s_free,
	.num_params = s_num_params,
	.params = s_params,
	.grads = s_grads,
	.tensors = s_tensors,
	.max_range = s_max_range,
	.init_params = s_init_params,
	.init_range = s_init_range,
	.zero_grad = s_zero_grad,
	.forward = s_forward,
	.backward = s_backward,
	.flops_per_token = s_flops_per_token,
	.param_bytes = s_param_bytes,
	.grad_bytes = s_grad_bytes,
	.activation_bytes = s_activation_bytes,
	.dev = NULL,
	.tp_comm = s_tp_comm,
};
