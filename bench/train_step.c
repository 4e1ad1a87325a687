/*
 * bench_train_step: how fast the CPU engine trains, one full step at a time.
 *
 * Builds a model of the architecture (--arch gpt2, the default, or llama)
 * and shape given on the command line through its CPU row of the model
 * registry, initialises it from a seed, and times full training steps on random token batches: zero_grad,
 * forward, backward, global-norm clipping to 1.0, and an AdamW update over
 * the whole flat range (what one rank of `ringworker train` does with no
 * gradient accumulation). `--warmup` steps run untimed first. Prints one JSON
 * object: the median and best ms/step, tokens/s at the median, achieved
 * GFLOP/s (the row's flops_per_token: GPT-2's 6N + 6LCT, Llama's
 * torchtitan count 6N + 12LCT, N without the untied embedding), and the peak resident set size. Threads:
 * OpenMP, so OMP_NUM_THREADS. bench/run-train-bench.sh runs it beside PyTorch.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <omp.h>

#include "gpt2_model.h"
#include "llama_model.h"
#include "optim.h"
#include "benchutil.h"

#define PROG "bench_train_step"

#define MAX_STEPS 10000

typedef struct {
	const char *arch;
	model_config_t cfg;
	int batch;
	int seq;
	int steps;
	int warmup;
	model_precision_t precision;
	const char *precision_name;
	uint64_t seed;
} options_t;

static uint64_t s_rng_state;

static uint32_t rng_next(void)
{
	/* xorshift64* */
	s_rng_state ^= s_rng_state >> 12;
	s_rng_state ^= s_rng_state << 25;
	s_rng_state ^= s_rng_state >> 27;
	return (uint32_t)((s_rng_state * 0x2545F4914F6CDD1DULL) >> 32);
}

static void usage(void)
{
	fprintf(stderr,
	        "usage: bench_train_step [--arch gpt2|llama] [--layers N] [--heads N] [--embd N]\n"
	        "                        [--vocab N] [--batch N] [--seq N] [--steps N] [--warmup N]\n"
	        "                        [--precision fp32|bf16] [--seed N]\n"
	        "                        llama: [--kv-heads N] [--ffn N] [--rope-theta X] [--tied 0|1]\n"
	        "  times full training steps of the CPU engine; prints JSON\n"
	        "  defaults: GPT-2 124M (12 layers, 12 heads, 768 embd, vocab 50257), batch 4,\n"
	        "            seq 64, 10 steps after 3 warmup steps, fp32; llama: KV heads = heads,\n"
	        "            FFN = Llama's rule (8C/3 up to a multiple of 256), theta 500000, untied\n");
	exit(2);
}

static options_t parse_options(int argc, char **argv)
{
	options_t o = {
		.arch = "gpt2",
		.cfg = {.n_layer = 12, .n_head = 12, .n_embd = 768, .vocab_size = 50257, .seq_len = 64,
			.rope_theta = 500000.0, .norm_eps = 1e-5},
		.batch = 4, .seq = 64, .steps = 10, .warmup = 3,
		.precision = MODEL_PRECISION_FP32, .precision_name = "fp32", .seed = 1337,
	};
	for (int i = 1; i < argc; i++) {
		const char *flag = argv[i];
		if (!strcmp(flag, "--help") || !strcmp(flag, "-h") || i + 1 >= argc)
			usage();
		const char *val = argv[++i];
		if (!strcmp(flag, "--arch"))
			o.arch = val;
		else if (!strcmp(flag, "--kv-heads"))
			o.cfg.n_kv_head = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--ffn"))
			o.cfg.ffn_dim = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--rope-theta"))
			o.cfg.rope_theta = (double)bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--tied"))
			o.cfg.tie_embeddings = bench_parse_int(PROG, flag, val, 0) != 0;
		else if (!strcmp(flag, "--layers"))
			o.cfg.n_layer = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--heads"))
			o.cfg.n_head = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--embd"))
			o.cfg.n_embd = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--vocab"))
			o.cfg.vocab_size = bench_parse_int(PROG, flag, val, 2);
		else if (!strcmp(flag, "--batch"))
			o.batch = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--seq"))
			o.seq = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--steps"))
			o.steps = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--warmup"))
			o.warmup = bench_parse_int(PROG, flag, val, 0);
		else if (!strcmp(flag, "--seed"))
			o.seed = (uint64_t)bench_parse_int(PROG, flag, val, 0);
		else if (!strcmp(flag, "--precision")) {
			o.precision_name = val;
			if (!strcmp(val, "fp32"))
				o.precision = MODEL_PRECISION_FP32;
			else if (!strcmp(val, "bf16"))
				o.precision = MODEL_PRECISION_BF16;
			else {
				fprintf(stderr, "bench_train_step: --precision must be fp32 or bf16 (got '%s')\n", val);
				exit(2);
			}
		} else {
			fprintf(stderr, "bench_train_step: unknown option '%s'\n", flag);
			usage();
		}
	}
	if (o.steps > MAX_STEPS) {
		fprintf(stderr, "bench_train_step: --steps must be at most %d (got %d)\n", MAX_STEPS, o.steps);
		exit(2);
	}
	o.cfg.seq_len = o.seq;
	if (strcmp(o.arch, "gpt2") && strcmp(o.arch, "llama")) {
		fprintf(stderr, "bench_train_step: --arch must be gpt2 or llama (got '%s')\n", o.arch);
		exit(2);
	}
	if (!strcmp(o.arch, "llama")) {
		if (!o.cfg.n_kv_head)
			o.cfg.n_kv_head = o.cfg.n_head;
		if (!o.cfg.ffn_dim) /* Llama's rule: int(2 * 4C / 3) up to a multiple of 256 */
			o.cfg.ffn_dim = (8 * o.cfg.n_embd / 3 + 255) / 256 * 256;
	}
	return o;
}

int main(int argc, char **argv)
{
	options_t o = parse_options(argc, argv);
	char err[256];
	const model_ops_t *ops = !strcmp(o.arch, "llama") ? &llama_model_cpu : &gpt2_model_cpu;
	model_options_t mo = {.max_B = o.batch, .max_T = o.seq, .precision = o.precision};
	void *model = NULL;
	if (ops->create(&o.cfg, &mo, &model, err, sizeof err) < 0) {
		fprintf(stderr, "bench_train_step: %s\n", err);
		return 1;
	}
	ops->init_params(model, o.seed);
	size_t n = ops->num_params(model);
	float *grads = ops->grads(model), *params = ops->params(model);
	int n_tensors;
	const model_tensor_t *tensors = ops->tensors(model, &n_tensors);
	size_t n_tokens = (size_t)o.batch * (size_t)o.seq;
	float *m = calloc(n, sizeof *m);
	float *v = calloc(n, sizeof *v);
	int32_t *inputs = malloc(n_tokens * sizeof *inputs);   /* (B, T) */
	int32_t *targets = malloc(n_tokens * sizeof *targets); /* (B, T) */
	double *times_ms = malloc((size_t)o.steps * sizeof *times_ms);
	if (!m || !v || !inputs || !targets || !times_ms) {
		fprintf(stderr, "bench_train_step: out of memory for the optimizer state (%zu parameters)\n", n);
		return 1;
	}
	s_rng_state = o.seed * 0x9E3779B97F4A7C15ULL + 1;

	float loss = 0.0f;
	double grad_norm = 0.0;
	int total = o.warmup + o.steps;
	for (int step = 0; step < total; step++) {
		for (size_t i = 0; i < n_tokens; i++) {
			inputs[i] = (int32_t)(rng_next() % (uint32_t)o.cfg.vocab_size);
			targets[i] = (int32_t)(rng_next() % (uint32_t)o.cfg.vocab_size);
		}
		double t0 = bench_now_ms();
		ops->zero_grad(model);
		loss = ops->forward(model, inputs, targets, o.batch, o.seq);
		ops->backward(model, 1.0f);
		grad_norm = sqrt(optim_sum_squares(grads, n));
		if (grad_norm > 1.0)
			optim_scale(grads, n, (float)(1.0 / (grad_norm + 1e-6)));
		optim_adamw_t hp = {
			.lr = optim_lr_at(step, total, o.warmup, 6e-4, 6e-5, 1),
			.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .t = step + 1,
		};
		optim_adamw_update(tensors, n_tensors, params, grads, m, v, 0, n, &hp);
		double dt = bench_now_ms() - t0;
		if (step >= o.warmup)
			times_ms[step - o.warmup] = dt;
		fprintf(stderr, "step %d: %.1f ms, loss %.4f\n", step, dt, (double)loss);
	}

	qsort(times_ms, (size_t)o.steps, sizeof times_ms[0], bench_cmp_double);
	double median_ms = o.steps % 2 ? times_ms[o.steps / 2]
	                               : 0.5 * (times_ms[o.steps / 2 - 1] + times_ms[o.steps / 2]);
	double tok_s = (double)n_tokens / (median_ms * 1e-3);
	double flops_per_token = ops->flops_per_token(model, o.seq);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);

	printf("{\"program\": \"ringmaster\", \"arch\": \"%s\", \"kv_heads\": %d, \"ffn\": %d, "
	       "\"tied\": %s, \"precision\": \"%s\", \"layers\": %d, \"heads\": %d, "
	       "\"embd\": %d, \"vocab\": %d, \"batch\": %d, \"seq\": %d, \"threads\": %d, "
	       "\"num_params\": %zu, \"steps\": %d, \"warmup\": %d, \"median_ms\": %.2f, \"min_ms\": %.2f, "
	       "\"tokens_per_s\": %.1f, \"flops_per_token\": %.0f, \"gflops\": %.1f, "
	       "\"peak_rss_mib\": %.1f, \"last_loss\": %.4f}\n",
	       o.arch, o.cfg.n_kv_head, o.cfg.ffn_dim, o.cfg.tie_embeddings ? "true" : "false",
	       o.precision_name, o.cfg.n_layer, o.cfg.n_head, o.cfg.n_embd, o.cfg.vocab_size, o.batch, o.seq,
	       omp_get_max_threads(), n, o.steps, o.warmup, median_ms, times_ms[0], tok_s, flops_per_token,
	       flops_per_token * tok_s / 1e9, (double)ru.ru_maxrss / 1024.0, (double)loss);

	free(times_ms);
	free(targets);
	free(inputs);
	free(v);
	free(m);
	ops->free(model);
	return 0;
}
