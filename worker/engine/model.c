/*
 * model: the registry of model rows and the calls that dispatch to them
 * (see model.h). A new architecture or device adds its row to s_rows.
 */
#include "model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2_model.h"
#include "llama_model.h"
#ifdef RINGMASTER_HAVE_CUDA_ENGINE
#include "cuda/llama_cuda_model.h"
#endif

struct model {
	const model_ops_t *ops;
	void *impl;
};

static const model_ops_t *const s_rows[] = {
	&gpt2_model_cpu,
	&llama_model_cpu,
#ifdef RINGMASTER_HAVE_CUDA_ENGINE
	&gpt2_model_cuda,
	&llama_model_cuda,
#endif
};

static const char *s_device_name(model_device_t d)
{
	return d == MODEL_DEVICE_CUDA ? "cuda" : "cpu";
}

const model_ops_t *model_find(const char *arch, model_device_t device)
{
	for (size_t i = 0; i < sizeof s_rows / sizeof s_rows[0]; i++)
		if (s_rows[i]->device == device && strcmp(s_rows[i]->arch, arch) == 0)
			return s_rows[i];
	return NULL;
}

int model_create(const char *arch, model_device_t device, const model_config_t *cfg,
                 const model_options_t *opt, model_t **ret_model, char *err, size_t errlen)
{
	const model_ops_t *ops = model_find(arch, device);
	if (!ops) {
		snprintf(err, errlen, "model.arch '%s' has no implementation for parallel.device %s",
			 arch, s_device_name(device));
		return -ENOENT;
	}
	/* a row that reports TP communication runs tensor parallelism */
	if (opt->tp && opt->tp->size > 1 && !ops->tp_comm) {
		snprintf(err, errlen,
			 "parallel.tensor (%d) > 1 is not implemented for model.arch '%s' on"
			 " parallel.device %s",
			 opt->tp->size, arch, s_device_name(device));
		return -EINVAL;
	}
	model_t *m = calloc(1, sizeof *m);
	if (!m) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	m->ops = ops;
	int rc = ops->create(cfg, opt, &m->impl, err, errlen);
	if (rc < 0) {
		free(m);
		return rc;
	}
	*ret_model = m;
	return 0;
}

void model_free(model_t *m)
{
	if (!m)
		return;
	m->ops->free(m->impl);
	free(m);
}

const model_ops_t *model_ops(const model_t *m)
{
	return m->ops;
}

void *model_impl(model_t *m)
{
	return m->impl;
}

size_t model_num_params(const model_t *m)
{
	return m->ops->num_params(m->impl);
}

float *model_params(model_t *m)
{
	return m->ops->params(m->impl);
}

float *model_grads(model_t *m)
{
	return m->ops->grads(m->impl);
}

const model_tensor_t *model_tensors(const model_t *m, int *ret_n)
{
	return m->ops->tensors(m->impl, ret_n);
}

size_t model_max_range(const model_t *m)
{
	return m->ops->max_range(m->impl);
}

void model_init_params(model_t *m, uint64_t seed)
{
	m->ops->init_params(m->impl, seed);
}

void model_init_range(const model_t *m, uint64_t seed, size_t lo, size_t hi, float *out)
{
	m->ops->init_range(m->impl, seed, lo, hi, out);
}

void model_zero_grad(model_t *m)
{
	m->ops->zero_grad(m->impl);
}

float model_forward(model_t *m, const int32_t *inputs, const int32_t *targets, int B, int T)
{
	return m->ops->forward(m->impl, inputs, targets, B, T);
}

void model_backward(model_t *m, float loss_scale)
{
	m->ops->backward(m->impl, loss_scale);
}

double model_flops_per_token(const model_t *m, int T)
{
	return m->ops->flops_per_token(m->impl, T);
}

size_t model_param_bytes(const model_t *m)
{
	return m->ops->param_bytes(m->impl);
}

size_t model_grad_bytes(const model_t *m)
{
	return m->ops->grad_bytes(m->impl);
}

size_t model_activation_bytes(const model_t *m)
{
	return m->ops->activation_bytes(m->impl);
}

void model_tp_comm(const model_t *m, model_tp_comm_t *ret)
{
	*ret = (model_tp_comm_t){0};
	if (m->ops->tp_comm)
		m->ops->tp_comm(m->impl, ret);
}

const model_device_ops_t *model_dev(const model_t *m)
{
	return m->ops->dev;
}
