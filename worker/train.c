/*
 * train: the training loop (see train.h). One optimizer step is
 *
 *   train_compute_grads   zero grads; grad_accum x (data, forward, backward)
 *   train_reduce_grads    across ranks (nothing to do on one rank)
 *   train_clip_grads      global norm over the whole gradient, clip
 *   train_update_range    AdamW on [lo, hi) of the flat buffer
 *
 * kept apart so that data parallelism can put an all-reduce (or a
 * reduce-scatter) in the middle and ZeRO can update only its own range.
 * Every phase is timed with CLOCK_MONOTONIC.
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

#include "data.h"
#include "gpt2.h"
#include "optim.h"

#define ADAM_BETA1 0.9
#define ADAM_BETA2 0.95
#define ADAM_EPS 1e-8

/* Seconds spent per phase. */
typedef struct {
	double data_s;
	double forward_s;
	double backward_s;
	double optim_s;
} train_times_t;

typedef struct {
	const jobspec_t *spec; /* borrowed */
	const train_options_t *opt;
	int B, T, A;

	gpt2_t *model;
	size_t n_params;
	float *adam_m; /* (n_params) */
	float *adam_v; /* (n_params) */

	data_source_t *train_src;
	data_source_t *val_src; /* NULL without data.val */
	data_loader_t loader;
	data_sampler_t val_sampler;

	int32_t *inputs;  /* (B, T) */
	int32_t *targets; /* (B, T) */

	train_times_t times;
} train_t;

static double s_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int s_error(const train_t *t, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int s_error(const train_t *t, int code, const char *fmt, ...)
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
	}
	return DATA_FORMAT_NANOGPT;
}

/* A data path as the spec gives it, resolved against the data root.
 * Returns a malloc'ed string or NULL. */
static char *s_resolve(const char *root, const char *path)
{
	if (path[0] == '/' || !root || !root[0] || strcmp(root, ".") == 0)
		return strdup(path);
	size_t n = strlen(root) + strlen(path) + 2;
	char *s = malloc(n);
	if (s)
		snprintf(s, n, "%s%s%s", root, root[strlen(root) - 1] == '/' ? "" : "/", path);
	return s;
}

/* Open a data source and its sampler; returns a TRAIN_EXIT_* code. */
static int s_open_data(train_t *t, const char *field, const char *path, uint64_t seed,
                       data_source_t **ret_src, data_sampler_t *ret_sampler)
{
	char err[1024];
	char *full = s_resolve(t->opt->data_root, path);
	if (!full)
		return s_error(t, TRAIN_EXIT_NOMEM, "out of memory");
	int rc = data_source_open(full, s_data_format(t->spec->data.format), t->spec->model.vocab_size,
				  field, ret_src, err, sizeof err);
	free(full);
	if (rc < 0)
		return s_error(t, rc == -ENOMEM ? TRAIN_EXIT_NOMEM : TRAIN_EXIT_DATA, "%s%s", err,
			       rc == -ENOENT && t->opt->missing_data_hint ? t->opt->missing_data_hint : "");
	rc = data_sampler_init(ret_sampler, *ret_src, t->T, seed, field, err, sizeof err);
	if (rc < 0)
		return s_error(t, TRAIN_EXIT_DATA, "%s", err);
	return TRAIN_EXIT_OK;
}

static int s_setup(train_t *t)
{
	const jobspec_t *spec = t->spec;
	char err[512] = "";

	int rc = s_open_data(t, "data.train", spec->data.train, spec->train.seed, &t->train_src,
			     &t->loader.sampler);
	if (rc != TRAIN_EXIT_OK)
		return rc;
	data_layout_t layout = {.batch_size = t->B, .grad_accum = t->A, .world_size = 1, .rank = 0};
	data_sampler_t sampler = t->loader.sampler;
	data_loader_init(&t->loader, &sampler, &layout);
	if (spec->data.val) {
		rc = s_open_data(t, "data.val", spec->data.val, 0, &t->val_src, &t->val_sampler);
		if (rc != TRAIN_EXIT_OK)
			return rc;
	}

	gpt2_config_t cfg = {
		.n_layer = spec->model.n_layer,
		.n_head = spec->model.n_head,
		.n_embd = spec->model.n_embd,
		.vocab_size = spec->model.vocab_size,
		.seq_len = spec->model.seq_len,
	};
	gpt2_precision_t precision = spec->train.precision == JOBSPEC_PRECISION_BF16
		? GPT2_PRECISION_BF16 : GPT2_PRECISION_FP32;
	t->model = gpt2_create(&cfg, t->B, t->T, precision, err, sizeof err);
	if (!t->model) {
		/* The spec was validated, so what is left is mostly memory. */
		bool memory = strstr(err, "memory") || strstr(err, "fit");
		return s_error(t, memory ? TRAIN_EXIT_NOMEM : TRAIN_EXIT_SPEC, "%s",
			       err[0] ? err : "cannot create the model");
	}
	gpt2_init_params(t->model, spec->train.seed);
	t->n_params = gpt2_num_params(t->model);

	t->adam_m = calloc(t->n_params, sizeof(float));
	t->adam_v = calloc(t->n_params, sizeof(float));
	size_t bt = (size_t)t->B * (size_t)t->T;
	t->inputs = malloc(bt * sizeof(int32_t));
	t->targets = malloc(bt * sizeof(int32_t));
	if (!t->adam_m || !t->adam_v || !t->inputs || !t->targets)
		return s_error(t, TRAIN_EXIT_NOMEM,
			       "batch does not fit in memory: AdamW state of %.1f MiB (train.batch_size %d,"
			       " model.seq_len %d)",
			       2.0 * (double)t->n_params * 4 / 1048576.0, t->B, t->T);
	return TRAIN_EXIT_OK;
}

static void s_teardown(train_t *t)
{
	free(t->inputs);
	free(t->targets);
	free(t->adam_m);
	free(t->adam_v);
	gpt2_free(t->model);
	data_source_free(t->val_src);
	data_source_free(t->train_src);
}

/*
 * Zero the gradients and accumulate grad_accum micro-batches of the global
 * batch at the loader's cursor, each backward scaled by 1/grad_accum. Returns
 * the mean loss over the micro-batches.
 */
static float train_compute_grads(train_t *t)
{
	double z = s_now_s();
	gpt2_zero_grad(t->model);
	t->times.backward_s += s_now_s() - z; /* zeroing counts as backward work */
	double loss_sum = 0;
	for (int k = 0; k < t->A; k++) {
		double a = s_now_s();
		data_loader_micro_batch(&t->loader, k, t->inputs, t->targets);
		double b = s_now_s();
		float loss = gpt2_forward(t->model, t->inputs, t->targets, t->B, t->T);
		double c = s_now_s();
		gpt2_backward(t->model, 1.0f / (float)t->A);
		double d = s_now_s();
		loss_sum += loss;
		t->times.data_s += b - a;
		t->times.forward_s += c - b;
		t->times.backward_s += d - c;
	}
	data_loader_advance(&t->loader);
	return (float)(loss_sum / t->A);
}

/* Across ranks: an all-reduce (DDP) or reduce-scatter (ZeRO-2) of the
 * gradients goes here. One rank holds the whole sum already. */
static void train_reduce_grads(train_t *t)
{
	(void)t;
}

/* The global gradient norm (before clipping); scales the gradients down to
 * train.grad_clip when that is set and exceeded. */
static double train_clip_grads(train_t *t)
{
	float *g = gpt2_grads(t->model);
	double norm = sqrt(optim_sum_squares(g, t->n_params));
	double clip = t->spec->train.grad_clip;
	if (clip > 0 && isfinite(norm) && norm > clip)
		optim_scale(g, t->n_params, (float)(clip / norm));
	return norm;
}

/* AdamW on params[lo, hi) for 1-based step `step` at learning rate lr. */
static void train_update_range(train_t *t, size_t lo, size_t hi, double lr, int64_t step)
{
	optim_adamw_t hp = {
		.lr = lr,
		.beta1 = ADAM_BETA1,
		.beta2 = ADAM_BETA2,
		.eps = ADAM_EPS,
		.weight_decay = t->spec->train.weight_decay,
		.t = step,
	};
	optim_adamw_update(t->model, gpt2_params(t->model), gpt2_grads(t->model), t->adam_m, t->adam_v,
			   lo, hi, &hp);
}

/* Mean loss over the fixed validation batches. */
static float train_eval(train_t *t)
{
	int n = t->spec->train.eval_batches;
	double sum = 0;
	for (int k = 0; k < n; k++) {
		data_val_batch(&t->val_sampler, n, t->B, k, t->inputs, t->targets);
		sum += gpt2_forward(t->model, t->inputs, t->targets, t->B, t->T);
	}
	return (float)(sum / n);
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

static void s_print_header(const train_t *t, int64_t n_steps)
{
	const jobspec_t *s = t->spec;
	FILE *f = t->opt->json ? t->opt->log : t->opt->out;
	fprintf(f,
		"ringworker train: %s (%s) | gpt2 %d layers, %d heads, %d channels, vocab %d, seq_len %d"
		" | %.2fM params | batch %d x %d micro-steps | %" PRId64 " steps | %d threads\n",
		s->name ? s->name : "job", t->opt->spec_name ? t->opt->spec_name : "spec",
		s->model.n_layer, s->model.n_head, s->model.n_embd, s->model.vocab_size, s->model.seq_len,
		(double)t->n_params / 1e6, t->B, t->A, n_steps, omp_get_max_threads());
	fprintf(f, "data.train: %" PRIu64 " tokens in %zu file(s), %" PRIu64 " windows of %d",
		data_source_num_tokens(t->train_src), data_source_num_files(t->train_src),
		t->loader.sampler.n_windows, t->T + 1);
	if (t->val_src)
		fprintf(f, " | data.val: %" PRIu64 " tokens in %zu file(s)",
			data_source_num_tokens(t->val_src), data_source_num_files(t->val_src));
	fputc('\n', f);
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
	};
	int rc = s_setup(&t);
	if (rc != TRAIN_EXIT_OK) {
		s_teardown(&t);
		return rc;
	}

	const int64_t total = spec->train.steps;
	const int64_t n_steps = opt->steps > 0 ? opt->steps : total;
	const bool do_eval = t.val_src && spec->train.eval_every > 0;
	const double tokens_per_step = (double)t.B * t.T * t.A;
	s_print_header(&t, n_steps);

	double started = s_now_s(), step_s_sum = 0;
	float loss = NAN, best_val = INFINITY;
	int64_t best_val_step = 0;
	for (int64_t step = 1; step <= n_steps; step++) {
		double t0 = s_now_s();
		loss = train_compute_grads(&t);
		train_reduce_grads(&t);
		double t1 = s_now_s();
		double norm = train_clip_grads(&t);
		/* Past train.steps (--steps longer than the spec) the lr stays at its last value. */
		int64_t sched_step = step - 1 < total ? step - 1 : total - 1;
		double lr = optim_lr_at(sched_step, total, spec->train.warmup_steps, spec->train.lr,
					spec->train.min_lr,
					spec->train.lr_schedule == JOBSPEC_SCHEDULE_COSINE);
		train_update_range(&t, 0, t.n_params, lr, step);
		double t2 = s_now_s();
		t.times.optim_s += t2 - t1;
		double step_s = t2 - t0;
		step_s_sum += step_s;

		bool has_val = do_eval && (step % spec->train.eval_every == 0 || step == n_steps);
		float val_loss = has_val ? train_eval(&t) : NAN;
		if (has_val && val_loss < best_val) {
			best_val = val_loss;
			best_val_step = step;
		}
		s_print_step(&t, step, n_steps, loss, lr, norm, tokens_per_step / step_s, step_s * 1e3,
			     has_val, val_loss);
		if (!isfinite(loss)) {
			rc = s_error(&t, TRAIN_EXIT_DIVERGED,
				     "the loss is not finite at step %" PRId64
				     ": training diverged; lower train.lr or set train.grad_clip",
				     step);
			break;
		}
	}

	double wall_s = s_now_s() - started;
	if (rc == TRAIN_EXIT_OK) {
		FILE *f = opt->json ? opt->log : opt->out;
		double busy = t.times.data_s + t.times.forward_s + t.times.backward_s + t.times.optim_s;
		if (busy <= 0)
			busy = 1;
		fprintf(f, "done: %" PRId64 " steps in %.1f s | final loss %.4f", n_steps, wall_s, loss);
		if (best_val_step > 0)
			fprintf(f, " | best val loss %.4f (step %" PRId64 ")", best_val, best_val_step);
		double tok_s = tokens_per_step * (double)n_steps / step_s_sum;
		fprintf(f,
			" | mean %.0f tok/s, %.1f GFLOP/s | %zu params | time: data %.1f%%, forward %.1f%%,"
			" backward %.1f%%, optimizer %.1f%%\n",
			tok_s, tok_s * gpt2_flops_per_token(t.model, t.T) / 1e9, t.n_params,
			100 * t.times.data_s / busy, 100 * t.times.forward_s / busy,
			100 * t.times.backward_s / busy, 100 * t.times.optim_s / busy);
		fflush(f);
	}
	s_teardown(&t);
	return rc;
}
