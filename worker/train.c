/*
 * train: the training loop (see train.h). It reads top to bottom like
 * llm.c's main: set up (data, model, buffers), resume or initialise, then
 * per optimizer step
 *
 *   train_compute_grads   zero grads; grad_accum x (data, forward, backward)
 *   train_reduce_grads    across ranks: the gradients (the strategy's
 *                         reduce) and the loss (nothing on one rank)
 *   strategy->clip        global gradient norm, clipped to train.grad_clip
 *   strategy->update      AdamW (whole buffer, or this rank's shard)
 *   train_gather_params   the strategy's gather (sharded modes)
 *   validation, the step's line and report, a snapshot when due
 *
 * What differs per parallel mode (none, zero1, zero2, zero3) is the
 * strategy object of the spec's parallel.sharding (strategy.h:
 * strategy_none.c, strategy_zero1.c, strategy_zero23.c); what differs per
 * device is the device row of parallel.device (train_dev.h:
 * train_dev_cpu.c, train_dev_cuda.c over train_cuda.c) and the model row of
 * model.arch behind it (worker/engine/model.h); snapshots and resume are
 * train_snap.c's. The loop asks none of them what it is.
 *
 * Every phase is timed with CLOCK_MONOTONIC, and bracketed by trace_begin /
 * trace_end (worker/trace.c: NVTX ranges, and on the spec's profile steps
 * the events handed to opt->on_trace).
 *
 * Data parallelism (opt->comm set, W ranks): each rank computes gradients on
 * its interleaved slice of the global batch with every backward scaled by
 * 1/(grad_accum * W), so the reduction's sum is already the mean gradient
 * of the global batch. Losses are gathered as one value per rank (an
 * all-reduce of a W-vector that is zero except at the rank's own slot) and
 * summed in rank order, so every rank reports the same loss and one rank
 * reports exactly what the single-process path does.
 *
 * Sharding (parallel.sharding zero1, zero2 or zero3, W ranks): the flat
 * buffer of N parameters is seen as padded to Np = W * S (S = ceil(N / W)),
 * and rank r owns [r * S, r * S + count_r) with count_r = clamp(N - r * S,
 * 0, S) real entries (the rest of the S-slot shard is zero padding, never
 * updated and never sent: the collectives take the counts, which sum to N).
 * s_setup_shards lays that out; the strategies say what each mode does
 * with it; docs/training.md has the details and the memory figures.
 */
#include "train.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#include "stinit.h"
#include "strategy.h"
#include "train_dev.h"
#include "train_impl.h"
#include "train_tp.h"

double train_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int train_error(const train_t *t, int code, const char *fmt, ...)
{
	va_list ap;
	fputs("ringworker: error: ", t->opt->log);
	va_start(ap, fmt);
	vfprintf(t->opt->log, fmt, ap);
	va_end(ap);
	fputc('\n', t->opt->log);
	fflush(t->opt->log);
	return code;
}

static data_format_t s_data_format(jobspec_format_t f)
{
	switch (f) {
	case JOBSPEC_FORMAT_NANOGPT: return DATA_FORMAT_NANOGPT;
	case JOBSPEC_FORMAT_LLMC: return DATA_FORMAT_LLMC;
	case JOBSPEC_FORMAT_TEXT: return DATA_FORMAT_TEXT;
	case JOBSPEC_FORMAT_UINT32: return DATA_FORMAT_UINT32;
	}
	return DATA_FORMAT_NANOGPT;
}

/* Open a data source and its sampler; returns a RM_EXIT_* code. */
static int s_open_data(train_t *t, const char *field, const char *path, uint64_t seed,
                       data_source_t **ret_src, data_sampler_t *ret_sampler)
{
	char err[1024];
	/* With a data root every file resolves beneath it (data.h); without
	 * one (`ringworker train` run by hand) the path is the user's own. */
	const char *root = t->opt->data_root && t->opt->data_root[0] ? t->opt->data_root : NULL;
	int rc = data_source_open(root, path, s_data_format(t->spec->data.format),
				  t->spec->model.vocab_size, field, ret_src, err, sizeof err);
	if (rc < 0)
		return train_error(t, rc == -ENOMEM ? RM_EXIT_NOMEM : RM_EXIT_DATA, "%s%s", err,
			       rc == -ENOENT && t->opt->missing_data_hint ? t->opt->missing_data_hint : "");
	rc = data_sampler_init(ret_sampler, *ret_src, t->T, seed, field, err, sizeof err);
	if (rc < 0)
		return train_error(t, RM_EXIT_DATA, "%s", err);
	return RM_EXIT_OK;
}

float *train_master(train_t *t)
{
	if (t->sharding == JOBSPEC_SHARDING_ZERO3 && !t->dev->mirror)
		return shard_params(t->zero);
	return model_params(t->model) + t->shard_lo;
}

/* The streaming mode of the spec's sharding (zero2: gradients, zero3:
 * parameters too; model.h). */
model_streaming_t train_streaming(const train_t *t)
{
	return t->sharding == JOBSPEC_SHARDING_ZERO2 ? MODEL_STREAM_GRADS
		: t->sharding == JOBSPEC_SHARDING_ZERO3 ? MODEL_STREAM_ALL : MODEL_DENSE;
}

int train_model_create(train_t *t, const model_config_t *cfg, const model_options_t *mo)
{
	char err[512] = "";
	int rc = model_create(t->spec->model.arch, MODEL_DEVICE_CPU, cfg, mo, &t->model, err,
			      sizeof err);
	if (rc < 0)
		return train_error(t, rc == -ENOMEM ? RM_EXIT_NOMEM : RM_EXIT_SPEC, "%s",
			       err[0] ? err : "cannot create the model");
	return RM_EXIT_OK;
}

int train_check_device(const jobspec_t *spec, char *err, size_t errlen)
{
	if (spec->parallel.device != JOBSPEC_DEVICE_CUDA)
		return RM_EXIT_OK;
	if (spec->train.precision != JOBSPEC_PRECISION_BF16) {
		snprintf(err, errlen,
			 "train.precision is %s but parallel.device cuda computes its matrix products in"
			 " bf16 (fp32 accumulation, master weights and AdamW): set train.precision to"
			 " \"bf16\"",
			 jobspec_precision_name(spec->train.precision));
		return RM_EXIT_SPEC;
	}
	const train_dev_t *dev = train_dev_find(spec->parallel.device);
	if (!dev) {
		/* Not a spec error: the same spec runs on a worker built with CUDA. */
		snprintf(err, errlen,
			 "parallel.device is cuda but this worker was built without CUDA (nvcc was not"
			 " found or -Dcuda=disabled at configure time; docs/gpu.md)");
		return RM_EXIT_USAGE;
	}
	return dev->probe(err, errlen);
}

/* Sharded: the layout of every rank's shard (train.h: S = ceil(N / W)),
 * the buffers of the norm's all-gather, zero1's reduced gradient, and for
 * zero2/zero3 the shard_t the model streams through. RM_EXIT_* code. */
static int s_setup_shards(train_t *t)
{
	char err[512] = "";
	model_streaming_t mode = train_streaming(t);
	size_t W = (size_t)t->W;
	t->shard_len = (t->n_params + W - 1) / W;
	t->shard_lo = (size_t)t->rank * t->shard_len;
	t->shard_counts = calloc(W, sizeof(size_t));
	t->norm_parts = calloc(2 * W, sizeof(float));
	t->norm_counts = calloc(W, sizeof(size_t));
	/* zero1's reduced gradient: on a device with a host mirror, the device's */
	const bool own = t->sharding == JOBSPEC_SHARDING_ZERO1 && !t->dev->mirror;
	if (own)
		t->grad_own = calloc(t->shard_len, sizeof(float));
	if (!t->shard_counts || !t->norm_parts || !t->norm_counts || (own && !t->grad_own))
		return train_error(t, RM_EXIT_NOMEM,
			       "the gradient shard of %.1f MiB does not fit in memory",
			       (double)t->shard_len * 4 / 1048576.0);
	for (size_t r = 0; r < W; r++) {
		size_t lo = r * t->shard_len;
		size_t n = lo < t->n_params ? t->n_params - lo : 0;
		t->shard_counts[r] = n < t->shard_len ? n : t->shard_len;
		t->norm_counts[r] = 2;
	}
	t->shard_count = t->shard_counts[t->rank];
	t->grad_shard = t->grad_own;
	if (mode != MODEL_DENSE) {
		t->zero = shard_new(t->comm, t->n_params, model_max_range(t->model),
				    mode == MODEL_STREAM_ALL, t->dev->shard_mem, err, sizeof err);
		if (!t->zero)
			return train_error(t, RM_EXIT_NOMEM, "%s", err);
		t->grad_shard = shard_grads(t->zero);
	}
	if (mode == MODEL_STREAM_ALL && t->opt->report_params) {
		t->params_full = calloc(t->n_params, sizeof(float));
		if (!t->params_full)
			return train_error(t, RM_EXIT_NOMEM, "out of memory");
	}
	return RM_EXIT_OK;
}

static int s_setup(train_t *t)
{
	const jobspec_t *spec = t->spec;
	char err[512] = "";

	int rc = train_check_device(spec, err, sizeof err);
	if (rc != RM_EXIT_OK)
		return train_error(t, rc, "%s", err);
	t->dev = train_dev_find(spec->parallel.device);
	const bool cuda = spec->parallel.device == JOBSPEC_DEVICE_CUDA;
	if (t->comm && cuda != (comm_nccl_stream(t->comm) != NULL))
		return train_error(t, RM_EXIT_USAGE,
			       "internal error: parallel.device is %s but the communicator is %s's",
			       jobspec_device_name(spec->parallel.device), cuda ? "Gloo" : "NCCL");
	if (t->comm) {
		if (spec->parallel.world_size != t->world_size)
			return train_error(t, RM_EXIT_SPEC,
				       "parallel.world_size is %d but this rank's group has %d ranks:"
				       " start as many ranks as the spec asks for",
				       spec->parallel.world_size, t->world_size);
		if (spec->parallel.tensor != t->tp_size)
			return train_error(t, RM_EXIT_USAGE,
				       "internal error: parallel.tensor is %d but the tensor-parallel group"
				       " has %d ranks", spec->parallel.tensor, t->tp_size);
		/* With TP every mode shards the LOCAL flat buffer over the DP comm
		 * (zero2/zero3 stream the TP layers' local ranges, engine/tp.h). */
		t->sharding = spec->parallel.sharding;
		t->sharded = t->sharding != JOBSPEC_SHARDING_NONE;
		if (t->opt->rank != t->rank)
			return train_error(t, RM_EXIT_USAGE,
				       "internal error: rank %d was given but the communicator says %d",
				       t->opt->rank, t->rank);
	}
	if (!t->comm && spec->parallel.tensor > 1)
		return train_error(t, RM_EXIT_SPEC,
			       "parallel.tensor is %d but this is one process: tensor parallelism runs as a"
			       " job's ranks (ringctl submit); leave parallel.tensor out to train here",
			       spec->parallel.tensor);
	t->strategy = strategy_for(t);
	rc = s_open_data(t, "data.train", spec->data.train, spec->train.seed, &t->train_src,
			 &t->loader.sampler);
	if (rc != RM_EXIT_OK)
		return rc;
	data_layout_t layout = {.batch_size = t->B, .grad_accum = t->A, .world_size = t->W,
				.rank = t->rank};
	data_sampler_t sampler = t->loader.sampler;
	data_loader_init(&t->loader, &sampler, &layout);
	if (spec->data.val) {
		rc = s_open_data(t, "data.val", spec->data.val, 0, &t->val_src, &t->val_sampler);
		if (rc != RM_EXIT_OK)
			return rc;
	}

	model_config_t cfg = {
		.n_layer = spec->model.n_layer,
		.n_head = spec->model.n_head,
		.n_embd = spec->model.n_embd,
		.vocab_size = spec->model.vocab_size,
		.seq_len = spec->model.seq_len,
		.n_kv_head = spec->model.n_kv_head,
		.ffn_dim = spec->model.ffn_dim,
		.rope_theta = spec->model.rope_theta,
		.rope_scaling = {.factor = spec->model.rope_scaling.factor,
				 .low_freq_factor = spec->model.rope_scaling.low_freq_factor,
				 .high_freq_factor = spec->model.rope_scaling.high_freq_factor,
				 .original_max_position = spec->model.rope_scaling.original_max_position},
		.norm_eps = spec->model.norm_eps,
		.tie_embeddings = spec->model.tie_embeddings != 0,
	};
	/* a value per rank and validation batch, or the norm's pair per rank */
	size_t n_vals = (size_t)t->W * (size_t)(spec->train.eval_batches > 2 ? spec->train.eval_batches : 2);
	if ((rc = train_tp_begin(t)) != RM_EXIT_OK)
		return rc;
	rc = t->dev->create_model(t, &cfg);
	if (rc != RM_EXIT_OK)
		return rc;
	t->n_params = model_num_params(t->model);
	if ((rc = train_tp_setup(t)) != RM_EXIT_OK)
		return rc;

	t->shard_len = t->n_params;
	t->shard_lo = 0;
	t->shard_count = t->n_params;
	if (t->sharded && (rc = s_setup_shards(t)) != RM_EXIT_OK)
		return rc;
	if ((rc = t->dev->create(t, &cfg, n_vals)) != RM_EXIT_OK)
		return rc;
	t->adam_m = calloc(t->shard_len, sizeof(float));
	t->adam_v = calloc(t->shard_len, sizeof(float));
	size_t bt = (size_t)t->B * (size_t)t->T;
	t->inputs = malloc(bt * sizeof(int32_t));
	t->targets = malloc(bt * sizeof(int32_t));
	t->rank_vals = calloc(n_vals, sizeof(float));
	if (!t->adam_m || !t->adam_v || !t->inputs || !t->targets || !t->rank_vals)
		return train_error(t, RM_EXIT_NOMEM,
			       "batch does not fit in memory: AdamW state of %.1f MiB (train.batch_size %d,"
			       " model.seq_len %d)",
			       2.0 * (double)t->shard_len * 4 / 1048576.0, t->B, t->T);
	return RM_EXIT_OK;
}

static void s_teardown(train_t *t)
{
	free(t->inputs);
	free(t->targets);
	free(t->rank_vals);
	free(t->adam_m);
	free(t->adam_v);
	free(t->shard_counts);
	free(t->grad_own);
	free(t->norm_parts);
	free(t->norm_counts);
	free(t->params_full);
	tsnap_free(t->snap);
	shard_free(t->zero);
	model_free(t->model);
	train_tp_free(t);
	if (t->dev)
		t->dev->free(t);
	data_source_free(t->val_src);
	data_source_free(t->train_src);
}

/*
 * Zero the gradients and accumulate grad_accum micro-batches of this rank's
 * slice of the global batch at the loader's cursor, each backward scaled by
 * 1/(grad_accum * W). Returns this rank's mean loss over the micro-batches.
 */
static float train_compute_grads(train_t *t)
{
	double z = train_now_s();
	trace_begin(&t->trace, TRACE_ZERO_GRAD);
	t->dev->zero_grad(t);
	if (t->zero)
		shard_zero_grads(t->zero);
	trace_end(&t->trace, TRACE_ZERO_GRAD);
	t->times.backward_s += train_now_s() - z; /* zeroing counts as backward work */
	double loss_sum = 0;
	for (int k = 0; k < t->A; k++) {
		double a = train_now_s();
		trace_begin(&t->trace, TRACE_DATA);
		data_loader_micro_batch(&t->loader, k, t->inputs, t->targets);
		trace_end(&t->trace, TRACE_DATA);
		double b = train_now_s();
		trace_begin(&t->trace, TRACE_FORWARD);
		float loss = t->dev->forward(t);
		trace_end(&t->trace, TRACE_FORWARD);
		double c = train_now_s();
		trace_begin(&t->trace, TRACE_BACKWARD);
		t->dev->backward(t, 1.0f / (float)(t->A * t->W), k == t->A - 1);
		trace_end(&t->trace, TRACE_BACKWARD);
		double d = train_now_s();
		loss_sum += loss;
		t->times.data_s += b - a;
		t->times.forward_s += c - b;
		t->times.backward_s += d - c;
	}
	data_loader_advance(&t->loader);
	return (float)(loss_sum / t->A);
}

/*
 * The mean over ranks of one value per rank, the same bits on every rank:
 * n values per rank are all-reduced as a (W * n) vector holding this rank's
 * values at [rank * n, rank * n + n) and zeros elsewhere, then summed in
 * order in double and divided by W * n. With one rank and no comm, the
 * plain mean of `vals`. Returns 0 or the comm's error.
 */
static int s_mean_over_ranks(train_t *t, const float *vals, int n, double *ret_mean)
{
	size_t total = (size_t)t->W * (size_t)n;
	memset(t->rank_vals, 0, total * sizeof(float));
	memcpy(t->rank_vals + (size_t)t->rank * (size_t)n, vals, (size_t)n * sizeof(float));
	if (t->comm) {
		int rc = t->dev->allreduce_host(t, t->rank_vals, total);
		if (rc < 0)
			return rc;
	}
	double sum = 0;
	for (size_t i = 0; i < total; i++)
		sum += t->rank_vals[i];
	*ret_mean = sum / (double)total;
	return 0;
}

int train_comm_error(train_t *t, const char *what, int64_t step)
{
	int rc = train_error(t, RM_EXIT_COMM,
			 "%s failed at step %" PRId64 " (rank %d of %d): %s: a peer rank died, hung or"
			 " timed out",
			 what, step, t->world_rank, t->world_size, comm_last_error(t->comm));
	comm_abort(t->comm);
	if (t->tp_comm)
		comm_abort(t->tp_comm);
	return rc;
}

/* A collective inside the model (tensor parallelism) that failed. */
static int s_tp_error(train_t *t, const char *what, int64_t step)
{
	int rc = train_error(t, RM_EXIT_COMM,
			 "%s failed at step %" PRId64 " (rank %d of %d): %s: a peer rank died, hung or"
			 " timed out",
			 what, step, t->world_rank, t->world_size, comm_last_error(t->tp_comm));
	comm_abort(t->tp_comm);
	comm_abort(t->comm);
	return rc;
}

/*
 * Across ranks: the sum (already the mean, see train_compute_grads) of the
 * gradients by one all-reduce of the flat buffer, or when sharded by one
 * reduce-scatter into grad_shard; and the loss averaged over ranks into
 * *loss. One rank holds both already. Returns a RM_EXIT_* code.
 */
static int train_reduce_grads(train_t *t, int64_t step, float *loss)
{
	if (train_tp_failed(t))
		return s_tp_error(t, "a tensor-parallel collective of forward or backward", step);
	if (!t->comm)
		return RM_EXIT_OK;
	double a = train_now_s();
	trace_begin(&t->trace, TRACE_GRAD_REDUCE); /* an error return leaves it to the next phase */
	if (t->strategy->reduce(t) < 0)
		return train_comm_error(t, t->strategy->reduce_what, step);
	double mean;
	if (s_mean_over_ranks(t, loss, 1, &mean) < 0)
		return train_comm_error(t, "all-reduce of the loss", step);
	*loss = (float)mean;
	trace_end(&t->trace, TRACE_GRAD_REDUCE);
	t->times.comm_s += train_now_s() - a;
	return RM_EXIT_OK;
}

/* AdamW's hyperparameters for 1-based step `step` at learning rate lr. */
static optim_adamw_t s_adamw(const train_t *t, double lr, int64_t step)
{
	optim_adamw_t hp = {
		.lr = lr,
		.beta1 = ADAM_BETA1,
		.beta2 = ADAM_BETA2,
		.eps = ADAM_EPS,
		.weight_decay = t->spec->train.weight_decay,
		.t = step,
	};
	return hp;
}

/* After the update, the strategy's gather (the parameters all-gathered,
 * or zero3's cached ranges forgotten), timed as communication. Returns a
 * RM_EXIT_* code. */
static int train_gather_params(train_t *t, int64_t step)
{
	if (!t->strategy->gather)
		return RM_EXIT_OK;
	double a = train_now_s();
	trace_begin(&t->trace, TRACE_PARAM_GATHER);
	if (t->strategy->gather(t) < 0)
		return train_comm_error(t, "all-gather of the parameters", step);
	trace_end(&t->trace, TRACE_PARAM_GATHER);
	t->times.comm_s += train_now_s() - a;
	return RM_EXIT_OK;
}

/* zero3 with opt->report_params: the whole replica gathered from the shards
 * into params_full (a test's view; training never needs it). Returns a
 * RM_EXIT_* code. */
static int s_gather_replica(train_t *t, int64_t step)
{
	if (t->dev->gather_replica(t) < 0)
		return train_comm_error(t, "all-gather of the parameters for the report", step);
	return RM_EXIT_OK;
}

/*
 * Mean loss over the fixed validation set: eval_batches batches of B rows on
 * one rank; with W ranks the same rows as one rank with B * W would see, cut
 * into W * eval_batches batches of B rows of which rank r takes r, r + W,
 * ... and every rank gets the mean over all of them. Returns a
 * RM_EXIT_* code and the loss in *ret_loss.
 */
static int train_eval(train_t *t, int64_t step, float *ret_loss)
{
	int n = t->spec->train.eval_batches;
	if (!t->comm) {
		double sum = 0;
		for (int k = 0; k < n; k++) {
			data_val_batch(&t->val_sampler, n, t->B, k, t->inputs, t->targets);
			sum += t->dev->forward(t);
		}
		*ret_loss = (float)(sum / n);
		return RM_EXIT_OK;
	}
	/* Batch k of this rank is global batch k * W + rank. */
	float *losses = malloc((size_t)n * sizeof(float));
	if (!losses)
		return train_error(t, RM_EXIT_NOMEM, "out of memory");
	for (int k = 0; k < n; k++) {
		data_val_batch(&t->val_sampler, n * t->W, t->B, k * t->W + t->rank, t->inputs, t->targets);
		losses[k] = t->dev->forward(t);
	}
	if (train_tp_failed(t)) {
		free(losses);
		return s_tp_error(t, "a tensor-parallel collective of validation", step);
	}
	double a = train_now_s();
	double mean;
	int rc = t->zero ? shard_sync(t->zero) : 0;
	if (rc == 0)
		rc = s_mean_over_ranks(t, losses, n, &mean);
	free(losses);
	if (rc < 0)
		return train_comm_error(t, "all-reduce of the validation loss", step);
	t->times.comm_s += train_now_s() - a;
	*ret_loss = (float)mean;
	return RM_EXIT_OK;
}

/* A float for JSON: shortest round-trip form, null when not finite. */
static void s_json_num(FILE *f, const char *key, double v, const char *fmt)
{
	fprintf(f, ",\"%s\":", key);
	if (isfinite(v))
		fprintf(f, fmt, v);
	else
		fputs("null", f);
}

static void s_print_step(const train_t *t, int64_t step, int64_t n_steps, float loss, double lr,
                         double norm, double tok_s, double ms, bool has_val, float val_loss)
{
	FILE *out = t->opt->out;
	if (t->opt->json) {
		fprintf(out, "{\"step\":%" PRId64, step);
		s_json_num(out, "loss", loss, "%.9g");
		s_json_num(out, "lr", lr, "%.9g");
		s_json_num(out, "grad_norm", norm, "%.9g");
		s_json_num(out, "tokens_per_s", tok_s, "%.1f");
		s_json_num(out, "ms", ms, "%.3f");
		if (has_val)
			s_json_num(out, "val_loss", val_loss, "%.9g");
		fputs("}\n", out);
	} else {
		fprintf(out, "step %" PRId64 "/%" PRId64 " | loss %.4f | lr %.2e | norm %.2f | %.0f tok/s | %.1f ms",
			step, n_steps, loss, lr, norm, tok_s, ms);
		if (has_val)
			fprintf(out, " | val %.4f", val_loss);
		fputc('\n', out);
	}
	fflush(out);
}

/* The model's parameters (with TP: the logical count, not this rank's). */
static size_t s_logical_params(const train_t *t)
{
	const tplayout_t *l = train_tp_layout(t);
	return l ? l->n_logical : t->n_params;
}

static void s_print_header(const train_t *t, int64_t n_steps)
{
	const jobspec_t *s = t->spec;
	FILE *f = t->opt->json ? t->opt->log : t->opt->out;
	char ranks[64] = "";
	if (t->tp_size > 1)
		snprintf(ranks, sizeof ranks, " x %d ranks (tensor %d x data %d)", t->world_size, t->tp_size,
			 t->W);
	else if (t->comm)
		snprintf(ranks, sizeof ranks, " x %d ranks", t->W);
	fprintf(f,
		"ringworker train: %s (%s) | %s %d layers, %d heads, %d channels, vocab %d, seq_len %d"
		" | %.2fM params | batch %d x %d micro-steps%s | %" PRId64 " steps | %d threads\n",
		s->name ? s->name : "job", t->opt->spec_name ? t->opt->spec_name : "spec",
		s->model.arch, s->model.n_layer, s->model.n_head, s->model.n_embd, s->model.vocab_size, s->model.seq_len,
		(double)s_logical_params(t) / 1e6, t->B, t->A, ranks, n_steps, omp_get_max_threads());
	t->dev->print_header(t, f);
	fprintf(f, "data.train: %" PRIu64 " tokens in %zu file(s), %" PRIu64 " windows of %d",
		data_source_num_tokens(t->train_src), data_source_num_files(t->train_src),
		t->loader.sampler.n_windows, t->T + 1);
	if (t->val_src)
		fprintf(f, " | data.val: %" PRIu64 " tokens in %zu file(s)",
			data_source_num_tokens(t->val_src), data_source_num_files(t->val_src));
	fputc('\n', f);
	if (t->comm) {
		size_t pb, gb, ob;
		t->strategy->memory(t, &pb, &gb, &ob);
		fprintf(f,
			"parallel.sharding %s: memory per rank: params %.2f MiB, grads %.2f MiB,"
			" optimizer %.2f MiB\n",
			jobspec_sharding_name(s->parallel.sharding),
			(double)pb / 1048576.0,
			(double)gb / 1048576.0, (double)ob / 1048576.0);
	}
	fflush(f);
}

/* ---- snapshots (train_snap.c) ---- */

/* With TP: this rank's range of the LOGICAL layout, assembled over both
 * groups before anything that may differ between ranks (tsnap_begin's
 * folder), then queued. RM_EXIT_* code (the assembly's collectives). */
static int s_snapshot_take_tp(train_t *t, int64_t step)
{
	int64_t lo, count;
	tsnap_range(t->snap, &lo, &count);
	float *p, *m, *v;
	t->dev->to_host(t);
	int rc = train_tp_snapshot(t, lo, count, &p, &m, &v);
	if (rc == -ENOMEM)
		return train_error(t, RM_EXIT_NOMEM, "the snapshot of step %" PRId64 " does not fit in memory",
			       step);
	if (rc < 0)
		return train_comm_error(t, "the snapshot's gather of the logical tensors", step);
	if (tsnap_begin(t->snap, step))
		tsnap_submit(t->snap, step, p, m, v, data_loader_cursor(&t->loader));
	free(p);
	free(m);
	free(v);
	return RM_EXIT_OK;
}

/* Copy this rank's state after `step` to the host and queue its write. */
static void s_snapshot_take(train_t *t, int64_t step)
{
	if (!tsnap_begin(t->snap, step))
		return;
	t->dev->to_host(t);
	int64_t lo, count;
	tsnap_range(t->snap, &lo, &count);
	const float *p = NULL, *m = NULL, *v = NULL;
	if (count > 0) {
		/* sharded: the shard arrays start at lo; none: everything is whole */
		p = t->sharded ? train_master(t) : model_params(t->model) + lo;
		m = t->sharded ? t->adam_m : t->adam_m + lo;
		v = t->sharded ? t->adam_v : t->adam_v + lo;
	}
	tsnap_submit(t->snap, step, p, m, v, data_loader_cursor(&t->loader));
}

/* opt->resume or opt->resume_dir: the state from a snapshot, if there is
 * one: all of params (zero3 on the CPU: the master shard's range), and
 * AdamW's state of this rank's shard. RM_EXIT_* code. */
static int s_resume(train_t *t)
{
	const bool zero3_shard = t->sharding == JOBSPEC_SHARDING_ZERO3 && !t->dev->mirror;
	int64_t lo = (int64_t)t->shard_lo, count = (int64_t)t->shard_count;
	tsnap_dest_t dest = {
		.params = zero3_shard ? shard_params(t->zero) : model_params(t->model),
		.params_lo = zero3_shard ? lo : 0,
		.params_count = zero3_shard ? count : (int64_t)t->n_params,
		.adam_m = t->adam_m,
		.adam_v = t->adam_v,
		.lo = lo,
		.count = count,
		.layout = train_tp_layout(t),
	};
	uint64_t cursor = 0;
	int rc = tsnap_resume(t->snap, &dest, &t->start_step, &cursor);
	if (rc == RM_EXIT_OK && t->start_step > 1)
		data_loader_seek(&t->loader, cursor);
	return rc;
}

/* The initial parameters from train.seed (not when resuming: the snapshot
 * has them). zero3: the master shard, the bits the replica would have (on
 * the GPU the host model's whole buffer, whose shard range goes up). */
static void s_init_params(train_t *t)
{
	uint64_t seed = t->spec->train.seed;
	if (t->sharding != JOBSPEC_SHARDING_ZERO3 || !t->zero || t->dev->mirror)
		model_init_params(t->model, seed);
	else if (t->shard_count)
		model_init_range(t->model, seed, t->shard_lo, t->shard_lo + t->shard_count,
				shard_params(t->zero));
}

/* init.safetensors: the pretrained weights over the seeded ones, into the
 * same buffer s_init_params filled (zero3: only this rank's shard range is
 * read). Only when no snapshot was resumed: a restarted or resumed job's
 * snapshot already holds what training made of them. RM_EXIT_* code. */
static int s_init_pretrained(train_t *t)
{
	const char *path = t->spec->init.safetensors;
	FILE *f = t->opt->json ? t->opt->log : t->opt->out;
	if (!path)
		return RM_EXIT_OK;
	if (t->start_step > 1) {
		if (t->rank == 0)
			fprintf(f, "init: skipped %s, resuming the snapshot of step %" PRId64 "\n", path,
				t->start_step - 1);
		return RM_EXIT_OK;
	}
	if (t->tp_size > 1)
		return train_tp_init_pretrained(t);
	int n;
	const model_tensor_t *tensors = model_tensors(t->model, &n);
	const char *root = t->opt->data_root && t->opt->data_root[0] ? t->opt->data_root : NULL;
	char err[1024];
	stinit_t *st = NULL;
	int rc = stinit_open(root, path, tensors, n, t->spec->model.tie_embeddings != 0, &st, err,
			     sizeof err);
	if (rc < 0)
		return train_error(t, rc == -ENOMEM ? RM_EXIT_NOMEM : RM_EXIT_DATA, "%s", err);
	if (t->sharding != JOBSPEC_SHARDING_ZERO3 || !t->zero || t->dev->mirror)
		stinit_read_range(st, 0, t->n_params, model_params(t->model));
	else if (t->shard_count)
		stinit_read_range(st, t->shard_lo, t->shard_lo + t->shard_count, shard_params(t->zero));
	if (t->rank == 0)
		fprintf(f, "init: %d tensors from %s (%d file%s)\n", stinit_num_tensors(st), path,
			stinit_num_files(st), stinit_num_files(st) == 1 ? "" : "s");
	stinit_free(st);
	return RM_EXIT_OK;
}

/* The snapshot state: the writer thread when snapshots are on, and the
 * tensor table for manifests. */
static int s_snapshot_setup(train_t *t)
{
	tsnap_setup_t setup = {
		.spec = t->spec,
		.opt = t->opt,
		.world_size = t->world_size,
		.rank = t->world_rank,
		.alone = !t->comm,
		.global_batch = (int64_t)t->B * t->A * t->W,
		.n_params = t->n_params,
	};
	setup.tensors = model_tensors(t->model, &setup.n_tensors);
	const tplayout_t *l = train_tp_layout(t);
	if (l) { /* snapshots hold the logical layout */
		setup.n_params = l->n_logical;
		setup.tensors = l->logical;
	}
	return tsnap_new(&setup, &t->snap);
}

/* Everything before the first step: the model, data and buffers, the
 * snapshot state, then the state itself (resumed, or initialised from
 * train.seed) on the device. RM_EXIT_* code. */
static int s_start(train_t *t)
{
	int rc = s_setup(t);
	if (rc == RM_EXIT_OK)
		rc = s_snapshot_setup(t);
	if (rc == RM_EXIT_OK)
		rc = s_resume(t);
	if (rc == RM_EXIT_OK && t->start_step == 1)
		s_init_params(t);
	if (rc == RM_EXIT_OK)
		rc = s_init_pretrained(t);
	if (rc == RM_EXIT_OK)
		t->dev->to_device(t);
	return rc;
}

/* opt->on_step with `report` (its step's figures filled in) completed by
 * what this rank holds; *ret_stop when it asks to stop. RM_EXIT_* code
 * (zero3's gathered replica for the report may fail). */
static int s_report_step(train_t *t, train_report_t *report, bool *ret_stop)
{
	const train_options_t *opt = t->opt;
	if (!opt->on_step)
		return RM_EXIT_OK;
	if (t->params_full) {
		int rc = s_gather_replica(t, report->step);
		if (rc != RM_EXIT_OK)
			return rc;
	}
	report->params = t->dev->report_params(t);
	report->n_params = t->n_params;
	report->n_params_padded = t->shard_len * (size_t)(t->sharded ? t->W : 1);
	report->snapshot_skipped = tsnap_skipped(t->snap);
	if (report->step == t->start_step && t->start_step > 1) {
		report->resumed_from_step = t->start_step - 1;
		report->load_ms = tsnap_load_ms(t->snap);
	}
	size_t unused;
	t->strategy->memory(t, &report->params_bytes, &report->grads_bytes, &report->optim_bytes);
	t->dev->model_bytes(t, &unused, &unused, &report->activations_bytes);
	*ret_stop = opt->on_step(opt->on_step_ctx, report) != 0;
	return RM_EXIT_OK;
}

/* The summary line after the last step. */
static void s_print_summary(const train_t *t, int64_t steps_run, double wall_s, float loss,
			    float best_val, int64_t best_val_step, double tok_s)
{
	FILE *f = t->opt->json ? t->opt->log : t->opt->out;
	double busy = t->times.data_s + t->times.forward_s + t->times.backward_s + t->times.comm_s +
		      t->times.optim_s;
	if (busy <= 0)
		busy = 1;
	fprintf(f, "done: %" PRId64 " steps in %.1f s | final loss %.4f", steps_run, wall_s, loss);
	if (best_val_step > 0)
		fprintf(f, " | best val loss %.4f (step %" PRId64 ")", best_val, best_val_step);
	fprintf(f,
		" | mean %.0f tok/s, %.1f GFLOP/s | %zu params | time: data %.1f%%, forward %.1f%%,"
		" backward %.1f%%, ",
		tok_s, tok_s * model_flops_per_token(t->model, t->T) / 1e9, t->n_params,
		100 * t->times.data_s / busy, 100 * t->times.forward_s / busy,
		100 * t->times.backward_s / busy);
	if (t->comm)
		fprintf(f, "communication %.1f%%, ", 100 * t->times.comm_s / busy);
	fprintf(f, "optimizer %.1f%%\n", 100 * t->times.optim_s / busy);
	fflush(f);
}

int train_run(const jobspec_t *spec, const train_options_t *opt)
{
	train_t t = {
		.spec = spec,
		.opt = opt,
		.B = spec->train.batch_size,
		.T = spec->model.seq_len,
		.A = spec->train.grad_accum,
		.comm = opt->comm,
		.W = opt->comm ? comm_world_size(opt->comm) : 1,
		.rank = opt->comm ? comm_rank(opt->comm) : 0,
		.tp_comm = opt->tp_comm,
		.tp_size = opt->tp_comm ? comm_world_size(opt->tp_comm) : 1,
		.tp_rank = opt->tp_comm ? comm_rank(opt->tp_comm) : 0,
	};
	t.world_size = t.W * t.tp_size;
	t.world_rank = t.rank * t.tp_size + t.tp_rank;
	trace_init(&t.trace);
	int rc = s_start(&t);
	if (rc != RM_EXIT_OK) {
		s_teardown(&t);
		return rc;
	}

	const int64_t total = spec->train.steps;
	const int64_t n_steps = opt->steps > 0 ? opt->steps : total;
	const bool do_eval = t.val_src && spec->train.eval_every > 0;
	const double tokens_per_step = (double)t.B * t.T * t.A * t.W;
	const bool print = !opt->quiet;
	if (print)
		s_print_header(&t, n_steps);

	double started = train_now_s(), step_s_sum = 0;
	float loss = NAN, best_val = INFINITY;
	int64_t best_val_step = 0;
	for (int64_t step = t.start_step; step <= n_steps; step++) {
		tsnap_poll(t.snap, false);
		trace_step_begin(&t.trace, step, opt->on_trace && spec->profile.start_step > 0 &&
						 step >= spec->profile.start_step &&
						 step <= spec->profile.end_step);
		double t0 = train_now_s();
		loss = train_compute_grads(&t);
		rc = train_reduce_grads(&t, step, &loss);
		if (rc != RM_EXIT_OK)
			break;
		double t1 = train_now_s(), comm_before = t.times.comm_s;
		double norm = NAN;
		trace_begin(&t.trace, TRACE_CLIP);
		rc = t.strategy->clip(&t, step, &norm);
		if (rc != RM_EXIT_OK)
			break;
		trace_end(&t.trace, TRACE_CLIP);
		/* Past train.steps (--steps longer than the spec) the lr stays at its last value. */
		int64_t sched_step = step - 1 < total ? step - 1 : total - 1;
		double lr = optim_lr_at(sched_step, total, spec->train.warmup_steps, spec->train.lr,
					spec->train.min_lr,
					spec->train.lr_schedule == JOBSPEC_SCHEDULE_COSINE);
		trace_begin(&t.trace, TRACE_OPTIMIZER);
		optim_adamw_t hp = s_adamw(&t, lr, step);
		t.strategy->update(&t, &hp);
		trace_end(&t.trace, TRACE_OPTIMIZER);
		rc = train_gather_params(&t, step);
		if (rc != RM_EXIT_OK)
			break;
		double t2 = train_now_s();
		/* The norm's and the parameters' collectives count as communication. */
		t.times.optim_s += t2 - t1 - (t.times.comm_s - comm_before);
		double step_s = t2 - t0;
		step_s_sum += step_s;

		bool has_val = do_eval && (step % spec->train.eval_every == 0 || step == n_steps);
		float val_loss = NAN;
		if (has_val) {
			trace_begin(&t.trace, TRACE_EVAL);
			rc = train_eval(&t, step, &val_loss);
			if (rc != RM_EXIT_OK)
				break;
			trace_end(&t.trace, TRACE_EVAL);
		}
		if (has_val && val_loss < best_val) {
			best_val = val_loss;
			best_val_step = step;
		}
		if (print)
			s_print_step(&t, step, n_steps, loss, lr, norm, tokens_per_step / step_s,
				     step_s * 1e3, has_val, val_loss);
		if (tsnap_due(t.snap, step, n_steps, loss)) {
			trace_begin(&t.trace, TRACE_SNAPSHOT);
			if (t.tp_size > 1)
				rc = s_snapshot_take_tp(&t, step);
			else
				s_snapshot_take(&t, step);
			if (rc != RM_EXIT_OK)
				break;
			trace_end(&t.trace, TRACE_SNAPSHOT);
		}
		trace_step_t traced;
		if (trace_step_end(&t.trace, &traced))
			opt->on_trace(opt->on_trace_ctx, &traced);
		/* The step is reported even when it diverged. */
		bool stop = false;
		train_report_t report = {
			.step = step,
			.loss = loss,
			.lr = lr,
			.grad_norm = norm,
			.tokens_per_s = tokens_per_step / step_s,
			.ms = step_s * 1e3,
			.val_loss = val_loss,
			.flops_per_token = model_flops_per_token(t.model, t.T),
		};
		rc = s_report_step(&t, &report, &stop);
		if (rc != RM_EXIT_OK)
			break;
		if (!isfinite(loss)) {
			rc = train_error(&t, RM_EXIT_DIVERGED,
				     "the loss is not finite at step %" PRId64
				     ": training diverged; lower train.lr or set train.grad_clip",
				     step);
			break;
		}
		if (stop) {
			rc = RM_EXIT_ABORTED;
			break;
		}
	}

	trace_step_t unreported;
	trace_step_end(&t.trace, &unreported); /* a step cut short: its NVTX ranges end */
	if (rc == RM_EXIT_OK)
		tsnap_poll(t.snap, true); /* the last one, reported before returning */
	double wall_s = train_now_s() - started;
	const int64_t steps_run = n_steps - t.start_step + 1;
	if (rc == RM_EXIT_OK && print && steps_run > 0)
		s_print_summary(&t, steps_run, wall_s, loss, best_val, best_val_step,
				tokens_per_step * (double)steps_run / step_s_sum);
	s_teardown(&t);
	return rc;
}
