/*
 * train_dev_cpu: the training loop on the CPU (train_dev.h's "cpu" row):
 * the model of the spec's architecture runs on the host (model.h's CPU
 * row), every buffer is host memory, and collectives go over a Gloo comm.
 * Under zero2/zero3 the model streams through the shard_t (worker/shard.c).
 */
#include "train_dev.h"

#include <math.h>

#include "train_tp.h"

/* The model_stream_t of zero2/zero3: the shard_t behind the engine's calls. */
static const float *s_stream_fetch(void *ctx, model_range_t r, model_range_t next)
{
	train_t *t = ctx;
	return shard_fetch(t->zero, r.lo, r.hi, next.lo, next.hi);
}

static void s_stream_release(void *ctx, const float *p)
{
	train_t *t = ctx;
	shard_release(t->zero, p);
}

static float *s_stream_grad_begin(void *ctx, model_range_t r)
{
	train_t *t = ctx;
	return shard_grad_begin(t->zero, r.lo, r.hi);
}

static void s_stream_grad_end(void *ctx, float *g, model_range_t r)
{
	train_t *t = ctx;
	shard_grad_end(t->zero, g, r.lo, r.hi);
}

static int s_probe(char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	return RM_EXIT_OK;
}

/* The CPU model for the spec. */
static int s_create_model(train_t *t, const model_config_t *cfg)
{
	model_stream_t stream = {t, s_stream_fetch, s_stream_release, s_stream_grad_begin,
				 s_stream_grad_end};
	model_options_t mo = {
		.max_B = t->B,
		.max_T = t->T,
		.precision = t->spec->train.precision == JOBSPEC_PRECISION_BF16 ? MODEL_PRECISION_BF16
										 : MODEL_PRECISION_FP32,
		.streaming = train_streaming(t),
		.stream = &stream,
		.tp = train_tp_model(t),
	};
	return train_model_create(t, cfg, &mo);
}

static int s_create(train_t *t, const model_config_t *cfg, size_t n_vals)
{
	(void)t;
	(void)cfg;
	(void)n_vals;
	return RM_EXIT_OK;
}

static void s_free(train_t *t)
{
	(void)t;
}

static void s_print_header(const train_t *t, FILE *f)
{
	(void)t;
	(void)f;
}

static void s_zero_grad(train_t *t)
{
	model_zero_grad(t->model);
}

static float s_forward(train_t *t)
{
	return model_forward(t->model, t->inputs, t->targets, t->B, t->T);
}

/* On the CPU the all-reduce is one fused call after the last micro-step
 * (docs/training.md says why), so `last` changes nothing. */
static void s_backward(train_t *t, float loss_scale, bool last)
{
	(void)last;
	model_backward(t->model, loss_scale);
}

static int s_allreduce_host(train_t *t, float *buf, size_t n)
{
	return comm_allreduce_sum_f32(t->comm, buf, n);
}

static int s_allgather_host(train_t *t, comm_t *comm, const float *in, float *out,
			    const size_t *counts)
{
	(void)t;
	return comm_allgather_f32(comm, in, out, counts);
}

static void s_state_noop(train_t *t)
{
	(void)t;
}

/* report->params: zero3's gathered copy, or the model's buffer. */
static const float *s_report_params(train_t *t)
{
	if (t->params_full)
		return t->params_full;
	return model_params(t->model);
}

static void s_model_bytes(const train_t *t, size_t *ret_params, size_t *ret_grads,
			  size_t *ret_activations)
{
	*ret_params = model_param_bytes(t->model);
	*ret_grads = model_grad_bytes(t->model);
	*ret_activations = model_activation_bytes(t->model);
}

static int s_reduce_all(train_t *t)
{
	return comm_allreduce_sum_f32(t->comm, model_grads(t->model), t->n_params);
}

static double s_clip_all(train_t *t, double clip)
{
	float *g = model_grads(t->model);
	double norm = sqrt(optim_sum_squares(g, t->n_params));
	if (clip > 0 && isfinite(norm) && norm > clip)
		optim_scale(g, t->n_params, (float)(clip / norm));
	return norm;
}

static void s_update_all(train_t *t, const optim_adamw_t *hp)
{
	int n_tensors;
	const model_tensor_t *tensors = model_tensors(t->model, &n_tensors);
	optim_adamw_update(tensors, n_tensors, model_params(t->model), model_grads(t->model),
			   t->adam_m, t->adam_v, t->shard_lo, t->shard_lo + t->shard_count, hp);
}

static int s_reduce_scatter(train_t *t)
{
	return comm_reduce_scatter_sum_f32(t->comm, model_grads(t->model), t->grad_shard,
					   t->shard_counts);
}

static double s_shard_sum_squares(train_t *t)
{
	return optim_sum_squares(t->grad_shard, t->shard_count);
}

static void s_scale_shard(train_t *t, float factor)
{
	if (factor != 1.0f)
		optim_scale(t->grad_shard, t->shard_count, factor);
}

static const float *s_grads(train_t *t, bool shard)
{
	return shard ? t->grad_shard : model_grads(t->model);
}

static double s_sum_squares(train_t *t, const float *x, size_t n)
{
	(void)t;
	return optim_sum_squares(x, n);
}

static void s_scale_all(train_t *t, float factor)
{
	if (factor != 1.0f)
		optim_scale(model_grads(t->model), t->n_params, factor);
}

static void s_update_shard(train_t *t, const optim_adamw_t *hp)
{
	if (t->shard_count == 0)
		return;
	int n_tensors;
	const model_tensor_t *tensors = model_tensors(t->model, &n_tensors);
	optim_adamw_update_shard(tensors, n_tensors, train_master(t), t->grad_shard, t->adam_m,
				 t->adam_v, t->shard_lo, t->shard_lo + t->shard_count, hp);
}

static int s_gather_params(train_t *t)
{
	float *p = model_params(t->model);
	/* An empty last shard may start past the end of the buffer. */
	const float *mine = t->shard_count ? p + t->shard_lo : p;
	return comm_allgather_f32(t->comm, mine, p, t->shard_counts);
}

static int s_gather_replica(train_t *t)
{
	const float *mine = t->shard_count ? shard_params(t->zero) : t->params_full;
	return comm_allgather_f32(t->comm, mine, t->params_full, t->shard_counts);
}

const train_dev_t train_dev_cpu = {
	.name = "cpu",
	.mirror = false,
	.probe = s_probe,
	.shard_mem = &shard_mem_host,
	.create_model = s_create_model,
	.create = s_create,
	.free = s_free,
	.print_header = s_print_header,
	.zero_grad = s_zero_grad,
	.forward = s_forward,
	.backward = s_backward,
	.allreduce_host = s_allreduce_host,
	.allgather_host = s_allgather_host,
	.to_device = s_state_noop,
	.to_host = s_state_noop,
	.report_params = s_report_params,
	.model_bytes = s_model_bytes,
	.reduce_all = s_reduce_all,
	.clip_all = s_clip_all,
	.update_all = s_update_all,
	.reduce_scatter = s_reduce_scatter,
	.shard_sum_squares = s_shard_sum_squares,
	.scale_shard = s_scale_shard,
	.update_shard = s_update_shard,
	.gather_params = s_gather_params,
	.gather_replica = s_gather_replica,
	.grads = s_grads,
	.sum_squares = s_sum_squares,
	.scale_all = s_scale_all,
};
