/*
 * train_dev_cuda: the training loop on a CUDA GPU (train_dev.h's "cuda"
 * row, builds with the CUDA engine): forward, backward, the norm, clipping
 * and AdamW run on the GPU through train_cuda.c, collectives go over an
 * NCCL comm on device memory (host values through a device buffer), and
 * t->model is the host mirror of the GPU's state: the CPU model's tensor
 * table (manifests), flat parameter buffer (initialisation, resume,
 * snapshots, reports) and FLOP count, never run. docs/gpu.md, "Training on
 * a GPU".
 *
 * Unsharded, the gradient all-reduce is overlapped with backward: the last
 * micro-step's backward starts an all-reduce of each layer's gradients as
 * soon as they are final (ln_f, the layers from the last, then the
 * embeddings), on the comm's stream behind an event on the model's, and
 * the strategy's reduce only waits for them. zero1 the same with a
 * reduce-scatter into train_cuda's shard buffer; the norm's partial sum
 * comes from that buffer and the pairs go through device memory, AdamW
 * steps the shard's range with the shard's m and v (the GPU model holds no
 * moments), and the all-gather writes the model's parameters in place
 * before their bf16 copy is refreshed. zero2 keeps the shard_t on device
 * memory (shard_mem_cuda) and the GPU model streams each range's gradients
 * to it; zero3's GPU model has no parameters either and fetches each range
 * from the shard_t (on the GPU); AdamW steps the shard_t's master shard,
 * and the mirror's buffer stands in for the host copy of that shard
 * (initialisation, snapshots, resume).
 */
#include "train_dev.h"

#include <stdlib.h>
#include <sysexits.h>

#include "shard_mem_cuda.h"
#include "strategy.h"
#include "train_cuda.h"
#include "train_tp.h"

/* The gradient hooks of the host mirror, which never runs backward:
 * reaching them is a programming error. */
static float *s_mirror_grad_begin(void *ctx, model_range_t r)
{
	(void)ctx;
	(void)r;
	fprintf(stderr, "ringworker: fatal: internal error: the host side of a GPU model ran backward\n");
	exit(EX_SOFTWARE);
}

static void s_mirror_grad_end(void *ctx, float *g, model_range_t r)
{
	(void)g;
	s_mirror_grad_begin(ctx, r);
}

/* Before the GPU model: the host mirror, made for 1 x 1 tokens (1 x t
 * with tensor parallelism: the TP rank's local table and buffer, whose T
 * divides by t) without a gradient buffer (MODEL_STREAM_GRADS) and never
 * run. */
static int s_create_model(train_t *t, const model_config_t *cfg)
{
	model_stream_t never = {t, NULL, NULL, s_mirror_grad_begin, s_mirror_grad_end};
	model_options_t mo = {.max_B = 1, .max_T = t->tp_size, .precision = MODEL_PRECISION_FP32,
			      .streaming = MODEL_STREAM_GRADS, .stream = &never,
			      .tp = train_tp_model(t)};
	return train_model_create(t, cfg, &mo);
}

/* The GPU model (train_cuda.h), once the shard layout is known (sharded:
 * the GPU holds its shard's moments only). */
static int s_create(train_t *t, const model_config_t *cfg, size_t n_vals)
{
	char err[512] = "";
	int code = RM_EXIT_USAGE;
	train_cuda_shard_t shard = {t->shard_lo, t->shard_len, t->shard_count, t->shard_counts,
				    t->zero};
	t->gpu = train_cuda_new(t->spec->model.arch, cfg, t->B, t->T, n_vals,
				t->sharded ? &shard : NULL, train_tp_model(t), &code, err, sizeof err);
	if (!t->gpu)
		return train_error(t, code, "%s", err);
	return RM_EXIT_OK;
}

static void s_free(train_t *t)
{
	train_cuda_free(t->gpu);
}

static void s_print_header(const train_t *t, FILE *f)
{
	size_t pb, gb, ob, mp, mg, ab;
	t->strategy->memory(t, &pb, &gb, &ob);
	train_cuda_model_bytes(t->gpu, &mp, &mg, &ab);
	fprintf(f,
		"parallel.device cuda: %s | bf16 matrix products, fp32 master weights and AdamW"
		" | attention %s | GPU memory: state %.2f MiB, activations %.2f MiB\n",
		train_cuda_device_name(t->gpu),
		train_cuda_fused_attention(t->gpu) ? "fused" : "gemm", (double)(pb + gb + ob) / 1048576.0,
		(double)ab / 1048576.0);
}

static void s_zero_grad(train_t *t)
{
	train_cuda_zero_grad(t->gpu);
}

static float s_forward(train_t *t)
{
	return train_cuda_forward(t->gpu, t->inputs, t->targets, t->B, t->T);
}

/* With a comm, unsharded or zero1, the last micro-step's backward also
 * starts the gradient all-reduce or reduce-scatter layer by layer (the
 * strategy's reduce waits for it). Not with tensor parallelism: the
 * replicated tensors' gradients are final only at the end of backward, so
 * the strategy's reduce runs the whole collective then. */
static void s_backward(train_t *t, float loss_scale, bool last)
{
	bool overlap = last && !t->zero && t->tp_size <= 1;
	train_cuda_backward(t->gpu, loss_scale, overlap ? t->comm : NULL);
}

static int s_allreduce_host(train_t *t, float *buf, size_t n)
{
	return train_cuda_allreduce_host(t->gpu, t->comm, buf, n);
}

static int s_allgather_host(train_t *t, comm_t *comm, const float *in, float *out,
			    const size_t *counts)
{
	return train_cuda_allgather_host(t->gpu, comm, in, out, counts);
}

static void s_to_device(train_t *t)
{
	train_cuda_upload(t->gpu, model_params(t->model), t->adam_m, t->adam_v);
}

static void s_to_host(train_t *t)
{
	train_cuda_download(t->gpu, model_params(t->model), t->adam_m, t->adam_v);
}

/* zero3's gathered copy, else a copy from the GPU made each step only when
 * opt->report_params asks for it, else NULL. */
static const float *s_report_params(train_t *t)
{
	if (t->params_full)
		return t->params_full;
	if (!t->opt->report_params)
		return NULL;
	train_cuda_download(t->gpu, model_params(t->model), NULL, NULL);
	return model_params(t->model);
}

static void s_model_bytes(const train_t *t, size_t *ret_params, size_t *ret_grads,
			  size_t *ret_activations)
{
	train_cuda_model_bytes(t->gpu, ret_params, ret_grads, ret_activations);
}

/* Waiting for the all-reduce the last backward started range by range
 * (with TP: the whole all-reduce, over the data-parallel group). */
static int s_reduce_all(train_t *t)
{
	if (t->tp_size > 1)
		return t->comm ? train_cuda_allreduce_grads(t->gpu, t->comm) : 0;
	return train_cuda_reduce_wait(t->gpu);
}

static double s_clip_all(train_t *t, double clip)
{
	return train_cuda_clip(t->gpu, clip); /* the clipping is folded into AdamW */
}

/* The whole buffer, or the shard (train_cuda knows which). */
static void s_update(train_t *t, const optim_adamw_t *hp)
{
	train_cuda_update(t->gpu, hp);
}

static int s_reduce_scatter(train_t *t)
{
	return train_cuda_reduce_scatter(t->gpu, t->comm);
}

static double s_shard_sum_squares(train_t *t)
{
	return train_cuda_shard_sum_squares(t->gpu);
}

static void s_scale_shard(train_t *t, float factor)
{
	train_cuda_set_clip(t->gpu, factor); /* folded into AdamW */
}

static int s_gather_params(train_t *t)
{
	return train_cuda_gather_params(t->gpu, t->comm);
}

static int s_gather_replica(train_t *t)
{
	return train_cuda_gather_replica(t->gpu, t->comm, t->params_full);
}

static const float *s_grads(train_t *t, bool shard)
{
	return train_cuda_grads(t->gpu, shard);
}

static double s_sum_squares(train_t *t, const float *x, size_t n)
{
	return train_cuda_sum_squares(t->gpu, x, n);
}

static void s_scale_all(train_t *t, float factor)
{
	train_cuda_set_clip(t->gpu, factor); /* folded into AdamW */
}

const train_dev_t train_dev_cuda = {
	.name = "cuda",
	.mirror = true,
	.probe = train_cuda_probe,
	.shard_mem = &shard_mem_cuda, /* zero2's buffers next to the GPU's NCCL comm */
	.create_model = s_create_model,
	.create = s_create,
	.free = s_free,
	.print_header = s_print_header,
	.zero_grad = s_zero_grad,
	.forward = s_forward,
	.backward = s_backward,
	.allreduce_host = s_allreduce_host,
	.allgather_host = s_allgather_host,
	.to_device = s_to_device,
	.to_host = s_to_host,
	.report_params = s_report_params,
	.model_bytes = s_model_bytes,
	.reduce_all = s_reduce_all,
	.clip_all = s_clip_all,
	.update_all = s_update,
	.reduce_scatter = s_reduce_scatter,
	.shard_sum_squares = s_shard_sum_squares,
	.scale_shard = s_scale_shard,
	.update_shard = s_update,
	.gather_params = s_gather_params,
	.gather_replica = s_gather_replica,
	.grads = s_grads,
	.sum_squares = s_sum_squares,
	.scale_all = s_scale_all,
};
