/*
 * torch_dump: writes what the PyTorch reference check (test_torch_reference.py)
 * compares the engine against.
 *
 * Builds a tiny model through the architecture's CPU row of the model
 * registry from a seed: --arch gpt2 (default: 2 layers, 2 heads, C=32,
 * V=64, T=16, B=2) or --arch llama (2 layers, 4 heads sharing 2 KV heads,
 * C=32, FFN 48, V=64, T=16, B=2, rope_theta 100 with Llama 3.1 scaling
 * (factor 8, low 1, high 4, original 32: hd 8 gives one kept, one smoothed
 * and two divided frequencies), untied or with --tied), and writes, into
 * the folder given with --out:
 *
 *   params.f32        initial flat parameter buffer, little-endian float32
 *   inputs.i32        (B, T) token ids, int32
 *   targets.i32       (B, T) next-token targets, int32
 *   logits.f32        (B, T, V) logits of one forward pass
 *   grads.f32         flat gradient buffer of one backward pass (loss scale 1)
 *   final_params.f32  flat parameters after the AdamW steps
 *   index.json        magic/version, config, B, T, the tensor table (name,
 *                     shape, offset and numel in floats, decay flag), the
 *                     loss, and per AdamW step its lr, grad norm and loss
 *
 * The AdamW steps start again from the initial parameters and train on the
 * same batch: zero_grad, forward, backward, clip the global gradient norm to
 * 1.0 (torch's clip_grad_norm_: scale by 1/(norm + 1e-6) when above), update
 * the whole range with lr from optim_lr_at (warmup, then cosine).
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2.h"
#include "gpt2_model.h"
#include "llama.h"
#include "llama_model.h"
#include "optim.h"

#define DUMP_MAGIC "ringmaster-torch-dump"
#define DUMP_VERSION 2

enum { N_LAYER = 2, N_HEAD = 2, N_EMBD = 32, VOCAB = 64, SEQ_LEN = 16, BATCH = 2, T_LEN = 16 };

#define MAX_STEPS 100

static const double LR = 3e-3;
static const double MIN_LR = 3e-4;
static const int64_t WARMUP_STEPS = 3;
static const double WEIGHT_DECAY = 0.1;
static const double GRAD_CLIP = 1.0;

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "torch_dump: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
	exit(2);
}

static void write_file(const char *dir, const char *name, const void *buf, size_t n_bytes)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (!f)
		die(path, strerror(errno));
	if (fwrite(buf, 1, n_bytes, f) != n_bytes || fclose(f) != 0)
		die(path, "write failed (disk full?)");
}

static uint64_t s_rng_state;

static uint32_t rng_next(void)
{
	/* xorshift64* */
	s_rng_state ^= s_rng_state >> 12;
	s_rng_state ^= s_rng_state << 25;
	s_rng_state ^= s_rng_state >> 27;
	return (uint32_t)((s_rng_state * 0x2545F4914F6CDD1DULL) >> 32);
}

/* The model under test: its registry row and object. */
typedef struct {
	const char *arch;
	const model_ops_t *ops;
	void *impl;
	model_config_t cfg;
} dmodel_t;

static const float *model_logits(const dmodel_t *d)
{
	return strcmp(d->arch, "gpt2") == 0 ? gpt2_logits(d->impl) : llama_logits(d->impl);
}

typedef struct {
	double lr;
	double grad_norm;
	float loss;
} step_record_t;

/* One training step as a trainer does it; returns the loss before the update. */
static step_record_t train_step(dmodel_t *d, const int32_t *inputs, const int32_t *targets, float *m,
                                float *v, int64_t step, int64_t n_steps)
{
	const model_ops_t *ops = d->ops;
	size_t n = ops->num_params(d->impl);
	float *grads = ops->grads(d->impl);
	step_record_t r;
	ops->zero_grad(d->impl);
	r.loss = ops->forward(d->impl, inputs, targets, BATCH, T_LEN);
	ops->backward(d->impl, 1.0f);
	r.grad_norm = sqrt(optim_sum_squares(grads, n));
	if (r.grad_norm > GRAD_CLIP)
		optim_scale(grads, n, (float)(GRAD_CLIP / (r.grad_norm + 1e-6)));
	r.lr = optim_lr_at(step, n_steps, WARMUP_STEPS, LR, MIN_LR, 1);
	optim_adamw_t hp = {
		.lr = r.lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
		.weight_decay = WEIGHT_DECAY, .t = step + 1,
	};
	int n_tensors;
	const model_tensor_t *tab = ops->tensors(d->impl, &n_tensors);
	optim_adamw_update(tab, n_tensors, ops->params(d->impl), grads, m, v, 0, n, &hp);
	return r;
}

/* The config in index.json: GPT-2's five fields, and Llama's for llama. */
static void write_config(FILE *f, const dmodel_t *d)
{
	const model_config_t *c = &d->cfg;
	fprintf(f, "  \"arch\": \"%s\",\n", d->arch);
	fprintf(f, "  \"config\": {\"n_layer\": %d, \"n_head\": %d, \"n_embd\": %d, \"vocab_size\": %d, "
	           "\"seq_len\": %d", c->n_layer, c->n_head, c->n_embd, c->vocab_size, c->seq_len);
	if (strcmp(d->arch, "llama") == 0)
		fprintf(f, ", \"n_kv_head\": %d, \"ffn_dim\": %d, \"rope_theta\": %.17g, \"norm_eps\": %.17g, "
		           "\"tie_embeddings\": %s, \"rope_scaling\": {\"factor\": %.17g, "
		           "\"low_freq_factor\": %.17g, \"high_freq_factor\": %.17g, "
		           "\"original_max_position\": %d}",
		        c->n_kv_head, c->ffn_dim, c->rope_theta, c->norm_eps,
		        c->tie_embeddings ? "true" : "false", c->rope_scaling.factor,
		        c->rope_scaling.low_freq_factor, c->rope_scaling.high_freq_factor,
		        c->rope_scaling.original_max_position);
	fprintf(f, "},\n");
}

static void write_index(const char *dir, const dmodel_t *d, const char *precision, uint64_t seed,
                        float loss, const step_record_t *steps, int n_steps)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/index.json", dir);
	FILE *f = fopen(path, "w");
	if (!f)
		die(path, strerror(errno));
	fprintf(f, "{\n  \"magic\": \"%s\", \"version\": %d, \"precision\": \"%s\", \"seed\": %llu,\n",
	        DUMP_MAGIC, DUMP_VERSION, precision, (unsigned long long)seed);
	write_config(f, d);
	fprintf(f, "  \"B\": %d, \"T\": %d, \"num_params\": %zu, \"loss\": %.9g,\n", BATCH, T_LEN,
	        d->ops->num_params(d->impl), (double)loss);
	fprintf(f, "  \"tensors\": [\n");
	int n_tensors;
	const model_tensor_t *tab = d->ops->tensors(d->impl, &n_tensors);
	for (int i = 0; i < n_tensors; i++) {
		const model_tensor_t *t = &tab[i];
		fprintf(f, "    {\"name\": \"%s\", \"shape\": [", t->name);
		for (int k = 0; k < t->ndim; k++)
			fprintf(f, "%s%lld", k ? ", " : "", (long long)t->shape[k]);
		fprintf(f, "], \"offset\": %zu, \"numel\": %zu, \"decay\": %s}%s\n", t->offset, t->numel,
		        t->decay ? "true" : "false", i + 1 < n_tensors ? "," : "");
	}
	fprintf(f, "  ],\n  \"train\": {\"steps\": %d, \"warmup_steps\": %lld, \"lr\": %.17g, "
	           "\"min_lr\": %.17g, \"weight_decay\": %.17g, \"grad_clip\": %.17g,\n",
	        n_steps, (long long)WARMUP_STEPS, LR, MIN_LR, WEIGHT_DECAY, GRAD_CLIP);
	const char *keys[] = {"lrs", "grad_norms", "losses"};
	for (int k = 0; k < 3; k++) {
		fprintf(f, "    \"%s\": [", keys[k]);
		for (int s = 0; s < n_steps; s++) {
			double x = k == 0 ? steps[s].lr : k == 1 ? steps[s].grad_norm : (double)steps[s].loss;
			fprintf(f, "%s%.17g", s ? ", " : "", x);
		}
		fprintf(f, "]%s\n", k < 2 ? "," : "");
	}
	fprintf(f, "  }\n}\n");
	if (fclose(f) != 0)
		die(path, "write failed (disk full?)");
}

static void usage(void)
{
	fprintf(stderr, "usage: torch_dump --out DIR [--arch gpt2|llama] [--tied] [--precision fp32|bf16]"
	                " [--seed N] [--steps N]\n");
	exit(2);
}

/* The model of --arch (and --tied) from seed, in precision. */
static dmodel_t make_model(const char *arch, bool tied, model_precision_t precision, uint64_t seed)
{
	dmodel_t d = {.arch = arch, .ops = &gpt2_model_cpu};
	d.cfg = (model_config_t){
		.n_layer = N_LAYER, .n_head = N_HEAD, .n_embd = N_EMBD, .vocab_size = VOCAB, .seq_len = SEQ_LEN,
	};
	if (!strcmp(arch, "llama")) {
		d.ops = &llama_model_cpu;
		d.cfg.n_head = 4;
		d.cfg.n_kv_head = 2;
		d.cfg.ffn_dim = 48;
		d.cfg.rope_theta = 100.0;
		d.cfg.rope_scaling = (model_rope_scaling_t){8.0, 1.0, 4.0, 32};
		d.cfg.norm_eps = 1e-5;
		d.cfg.tie_embeddings = tied;
	} else if (strcmp(arch, "gpt2") || tied) {
		die("--arch must be gpt2 or llama (--tied: llama only), got", arch);
	}
	model_options_t opt = {.max_B = BATCH, .max_T = T_LEN, .precision = precision};
	char err[256];
	if (d.ops->create(&d.cfg, &opt, &d.impl, err, sizeof err) < 0)
		die("create", err);
	d.ops->init_params(d.impl, seed);
	return d;
}

int main(int argc, char **argv)
{
	const char *out = NULL;
	const char *precision_name = "fp32";
	const char *arch = "gpt2";
	bool tied = false;
	uint64_t seed = 1337;
	int n_steps = 10;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--tied")) {
			tied = true;
			continue;
		}
		if (i + 1 >= argc)
			usage();
		if (!strcmp(argv[i], "--out"))
			out = argv[++i];
		else if (!strcmp(argv[i], "--precision"))
			precision_name = argv[++i];
		else if (!strcmp(argv[i], "--arch"))
			arch = argv[++i];
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--steps"))
			n_steps = atoi(argv[++i]);
		else
			usage();
	}
	if (!out)
		usage();
	if (n_steps < 1 || n_steps > MAX_STEPS)
		die("--steps must be in [1, 100]", NULL);
	model_precision_t precision;
	if (!strcmp(precision_name, "fp32"))
		precision = MODEL_PRECISION_FP32;
	else if (!strcmp(precision_name, "bf16"))
		precision = MODEL_PRECISION_BF16;
	else
		die("--precision must be fp32 or bf16, got", precision_name);

	dmodel_t d = make_model(arch, tied, precision, seed);
	const model_ops_t *ops = d.ops;
	size_t n = ops->num_params(d.impl);

	int32_t inputs[BATCH * T_LEN];  /* (B, T) */
	int32_t targets[BATCH * T_LEN]; /* (B, T) */
	s_rng_state = seed * 0x9E3779B97F4A7C15ULL + 1;
	int32_t stream[BATCH * T_LEN + 1];
	for (int i = 0; i < BATCH * T_LEN + 1; i++)
		stream[i] = (int32_t)(rng_next() % VOCAB);
	for (int i = 0; i < BATCH * T_LEN; i++) {
		inputs[i] = stream[i];
		targets[i] = stream[i + 1];
	}

	float *initial = malloc(n * sizeof *initial);
	float *m = calloc(n, sizeof *m);
	float *v = calloc(n, sizeof *v);
	if (!initial || !m || !v)
		die("out of memory", NULL);
	memcpy(initial, ops->params(d.impl), n * sizeof *initial);

	ops->zero_grad(d.impl);
	float loss = ops->forward(d.impl, inputs, targets, BATCH, T_LEN);
	/* backward turns the logits into their gradient in place: write them now */
	write_file(out, "logits.f32", model_logits(&d), (size_t)BATCH * T_LEN * VOCAB * sizeof(float));
	ops->backward(d.impl, 1.0f);
	printf("torch_dump: %s%s, %zu parameters, %s, loss %.6f\n", arch, tied ? " (tied)" : "", n,
	       precision_name, (double)loss);

	write_file(out, "params.f32", initial, n * sizeof(float));
	write_file(out, "inputs.i32", inputs, sizeof inputs);
	write_file(out, "targets.i32", targets, sizeof targets);
	write_file(out, "grads.f32", ops->grads(d.impl), n * sizeof(float));

	step_record_t steps[MAX_STEPS];
	for (int s = 0; s < n_steps; s++) {
		steps[s] = train_step(&d, inputs, targets, m, v, s, n_steps);
		printf("step %2d: lr %.3e grad norm %.4f loss %.6f\n", s, steps[s].lr, steps[s].grad_norm,
		       (double)steps[s].loss);
	}
	write_file(out, "final_params.f32", ops->params(d.impl), n * sizeof(float));
	write_index(out, &d, precision_name, seed, loss, steps, n_steps);

	free(v);
	free(m);
	free(initial);
	ops->free(d.impl);
	return 0;
}
