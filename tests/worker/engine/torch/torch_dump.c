/*
 * torch_dump: writes what the PyTorch reference check (test_torch_reference.py)
 * compares the engine against.
 *
 * Builds a tiny GPT-2 (2 layers, 2 heads, C=32, V=64, T=16, B=2) from a seed
 * and writes, into the folder given with --out:
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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2.h"
#include "optim.h"

#define DUMP_MAGIC "ringmaster-torch-dump"
#define DUMP_VERSION 1

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

typedef struct {
	double lr;
	double grad_norm;
	float loss;
} step_record_t;

/* One training step as a trainer does it; returns the loss before the update. */
static step_record_t train_step(gpt2_t *model, const int32_t *inputs, const int32_t *targets, float *m,
                                float *v, int64_t step, int64_t n_steps)
{
	size_t n = gpt2_num_params(model);
	step_record_t r;
	gpt2_zero_grad(model);
	r.loss = gpt2_forward(model, inputs, targets, BATCH, T_LEN);
	gpt2_backward(model, 1.0f);
	r.grad_norm = sqrt(optim_sum_squares(gpt2_grads(model), n));
	if (r.grad_norm > GRAD_CLIP)
		optim_scale(gpt2_grads(model), n, (float)(GRAD_CLIP / (r.grad_norm + 1e-6)));
	r.lr = optim_lr_at(step, n_steps, WARMUP_STEPS, LR, MIN_LR, 1);
	optim_adamw_t hp = {
		.lr = r.lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
		.weight_decay = WEIGHT_DECAY, .t = step + 1,
	};
	optim_adamw_update(gpt2_tensors(model), gpt2_num_tensors(model), gpt2_params(model), gpt2_grads(model), m, v, 0, n, &hp);
	return r;
}

static void write_index(const char *dir, gpt2_t *model, const char *precision, uint64_t seed, float loss,
                        const step_record_t *steps, int n_steps)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/index.json", dir);
	FILE *f = fopen(path, "w");
	if (!f)
		die(path, strerror(errno));
	const gpt2_config_t *c = gpt2_config(model);
	fprintf(f, "{\n  \"magic\": \"%s\", \"version\": %d, \"precision\": \"%s\", \"seed\": %llu,\n",
	        DUMP_MAGIC, DUMP_VERSION, precision, (unsigned long long)seed);
	fprintf(f, "  \"config\": {\"n_layer\": %d, \"n_head\": %d, \"n_embd\": %d, \"vocab_size\": %d, "
	           "\"seq_len\": %d},\n", c->n_layer, c->n_head, c->n_embd, c->vocab_size, c->seq_len);
	fprintf(f, "  \"B\": %d, \"T\": %d, \"num_params\": %zu, \"loss\": %.9g,\n", BATCH, T_LEN,
	        gpt2_num_params(model), (double)loss);
	fprintf(f, "  \"tensors\": [\n");
	int n_tensors = gpt2_num_tensors(model);
	for (int i = 0; i < n_tensors; i++) {
		const gpt2_tensor_t *t = gpt2_tensor(model, i);
		fprintf(f, "    {\"name\": \"%s\", \"shape\": [", t->name);
		for (int d = 0; d < t->ndim; d++)
			fprintf(f, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
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
	fprintf(stderr, "usage: torch_dump --out DIR [--precision fp32|bf16] [--seed N] [--steps N]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *out = NULL;
	const char *precision_name = "fp32";
	uint64_t seed = 1337;
	int n_steps = 10;
	for (int i = 1; i < argc; i++) {
		if (i + 1 >= argc)
			usage();
		if (!strcmp(argv[i], "--out"))
			out = argv[++i];
		else if (!strcmp(argv[i], "--precision"))
			precision_name = argv[++i];
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
	gpt2_precision_t precision;
	if (!strcmp(precision_name, "fp32"))
		precision = GPT2_PRECISION_FP32;
	else if (!strcmp(precision_name, "bf16"))
		precision = GPT2_PRECISION_BF16;
	else
		die("--precision must be fp32 or bf16, got", precision_name);

	gpt2_config_t cfg = {
		.n_layer = N_LAYER, .n_head = N_HEAD, .n_embd = N_EMBD, .vocab_size = VOCAB, .seq_len = SEQ_LEN,
	};
	char err[256];
	gpt2_t *model = gpt2_create(&cfg, BATCH, T_LEN, precision, err, sizeof err);
	if (!model)
		die("gpt2_create", err);
	gpt2_init_params(model, seed);
	size_t n = gpt2_num_params(model);

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
	memcpy(initial, gpt2_params(model), n * sizeof *initial);

	gpt2_zero_grad(model);
	float loss = gpt2_forward(model, inputs, targets, BATCH, T_LEN);
	/* backward turns the logits into their gradient in place: write them now */
	write_file(out, "logits.f32", gpt2_logits(model), (size_t)BATCH * T_LEN * VOCAB * sizeof(float));
	gpt2_backward(model, 1.0f);
	printf("torch_dump: %zu parameters, %s, loss %.6f\n", n, precision_name, (double)loss);

	write_file(out, "params.f32", initial, n * sizeof(float));
	write_file(out, "inputs.i32", inputs, sizeof inputs);
	write_file(out, "targets.i32", targets, sizeof targets);
	write_file(out, "grads.f32", gpt2_grads(model), n * sizeof(float));

	step_record_t steps[MAX_STEPS];
	for (int s = 0; s < n_steps; s++) {
		steps[s] = train_step(model, inputs, targets, m, v, s, n_steps);
		printf("step %2d: lr %.3e grad norm %.4f loss %.6f\n", s, steps[s].lr, steps[s].grad_norm,
		       (double)steps[s].loss);
	}
	write_file(out, "final_params.f32", gpt2_params(model), n * sizeof(float));
	write_index(out, model, precision_name, seed, loss, steps, n_steps);

	free(v);
	free(m);
	free(initial);
	gpt2_free(model);
	return 0;
}
