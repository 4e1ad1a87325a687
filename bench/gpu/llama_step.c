/*
 * bench_gpu_llama_step: how fast the GPU engine trains Llama (llama_cuda),
 * one full step at a time, on one GPU: bench_gpu_step's method (gpu_step.c)
 * for the Llama row.
 *
 * Builds Llama 3.2 1B's published shape by default (16 layers, dim 2048,
 * 32 heads, 8 KV heads, FFN 8192, vocabulary 128256, tied embeddings, RoPE
 * theta 500000 with Llama 3.1 scaling 32 / 1 / 4 / 8192), T 2048,
 * initialises it on the host (llama_init_range, the CPU row's values) and
 * copies it over, finds the largest micro-batch that fits (or takes
 * --batch), and times steps on random tokens: zero_grad, forward,
 * backward, global-norm clipping to 1.0 and AdamW, --warmup untimed first.
 *
 * Prints one JSON object: batch, median and best step, tokens/s at the
 * median, MFU counted two ways against --peak-tflops (default 989, H100
 * SXM dense bf16): "mfu" with torchtitan's FLOPs per token (6N + 12 L C T,
 * N without the token embedding unless tied: llama_flops_per_token, what
 * the dashboard shows) and "mfu_6n" with this project's GPT-2 formula
 * (6N + 6 L C T over all parameters); the phases' median GPU times and
 * the GPU memory. bench/gpu/run-llama.sh adds PyTorch's peer.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "llama_cuda.h"
#include "llama_layout.h"
#include "optim.h"
#include "../benchutil.h"

#define PROG "bench_gpu_llama_step"

#define MAX_STEPS 10000
#define MAX_AUTO_BATCH 64
#define HEADROOM_BYTES (1ull << 30)

typedef struct {
	model_config_t cfg;
	int batch, seq, steps, warmup;
	double peak_tflops;
	uint64_t seed;
} options_t;

static void usage(void)
{
	fprintf(stderr,
		"usage: bench_gpu_llama_step [--layers N] [--heads N] [--kv-heads N] [--embd N] [--ffn N]\n"
		"                            [--vocab N] [--tied 0|1] [--seq N] [--batch N] [--steps N]\n"
		"                            [--warmup N] [--peak-tflops X] [--seed N]\n"
		"  defaults: Llama 3.2 1B (16 layers, 32 heads, 8 KV heads, dim 2048, FFN 8192,\n"
		"            vocab 128256, tied), seq 2048, the largest batch that fits, 20 steps\n"
		"            after 3 warmup steps, peak 989 TFLOP/s\n");
	exit(2);
}

static options_t parse_options(int argc, char **argv)
{
	options_t o = {.batch = 0, .seq = 2048, .steps = 20, .warmup = 3, .peak_tflops = 989.0, .seed = 1337};
	model_config_t *c = &o.cfg;
	c->n_layer = 16;
	c->n_embd = 2048;
	c->n_head = 32;
	c->n_kv_head = 8;
	c->ffn_dim = 8192;
	c->vocab_size = 128256;
	c->rope_theta = 500000.0;
	c->rope_scaling = (model_rope_scaling_t){32.0, 1.0, 4.0, 8192};
	c->norm_eps = 1e-5;
	c->tie_embeddings = true;
	for (int i = 1; i < argc; i++) {
		const char *flag = argv[i];
		if (!strcmp(flag, "--help") || !strcmp(flag, "-h") || i + 1 >= argc)
			usage();
		const char *val = argv[++i];
		if (!strcmp(flag, "--layers"))
			c->n_layer = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--heads"))
			c->n_head = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--kv-heads"))
			c->n_kv_head = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--embd"))
			c->n_embd = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--ffn"))
			c->ffn_dim = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--vocab"))
			c->vocab_size = bench_parse_int(PROG, flag, val, 2);
		else if (!strcmp(flag, "--tied"))
			c->tie_embeddings = bench_parse_int(PROG, flag, val, 0) != 0;
		else if (!strcmp(flag, "--seq"))
			o.seq = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--batch"))
			o.batch = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--steps"))
			o.steps = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--warmup"))
			o.warmup = bench_parse_int(PROG, flag, val, 0);
		else if (!strcmp(flag, "--seed"))
			o.seed = (uint64_t)bench_parse_int(PROG, flag, val, 0);
		else if (!strcmp(flag, "--peak-tflops")) {
			char *end;
			o.peak_tflops = strtod(val, &end);
			if (*val == '\0' || *end != '\0' || !(o.peak_tflops > 0)) {
				fprintf(stderr, "bench_gpu_llama_step: --peak-tflops must be positive (got '%s')\n", val);
				exit(2);
			}
		} else {
			fprintf(stderr, "bench_gpu_llama_step: unknown option '%s'\n", flag);
			usage();
		}
	}
	if (o.steps > MAX_STEPS) {
		fprintf(stderr, "bench_gpu_llama_step: --steps must be at most %d\n", MAX_STEPS);
		exit(2);
	}
	c->seq_len = o.seq;
	return o;
}

/* the model at --batch, or the largest batch that fits with HEADROOM left */
static llama_cuda_t *create_model(const options_t *o, int *ret_batch)
{
	char err[512];
	llama_cuda_t *m = NULL;
	if (o->batch > 0) {
		if (llama_cuda_new(&o->cfg, o->batch, o->seq, true, &m, err, sizeof err) < 0) {
			fprintf(stderr, "bench_gpu_llama_step: %s\n", err);
			exit(1);
		}
		*ret_batch = o->batch;
		return m;
	}
	void *headroom = NULL;
	if (cudaMalloc(&headroom, HEADROOM_BYTES) != cudaSuccess) {
		(void)cudaGetLastError();
		headroom = NULL;
	}
	int b = MAX_AUTO_BATCH, rc = -1;
	for (; b >= 1; b--) {
		rc = llama_cuda_new(&o->cfg, b, o->seq, true, &m, err, sizeof err);
		if (rc != -ENOMEM) /* out of memory: try a smaller batch */
			break;
	}
	if (headroom)
		cudaFree(headroom);
	if (rc < 0) {
		fprintf(stderr, "bench_gpu_llama_step: %s\n", err);
		exit(1);
	}
	*ret_batch = b;
	return m;
}

/* the initial parameters, as the CPU row draws them */
static void init_params(llama_cuda_t *m, const options_t *o)
{
	int n_t = 0;
	const model_tensor_t *t = llama_cuda_tensors(m, &n_t);
	size_t n = llama_cuda_num_params(m);
	float *p = malloc(n * sizeof(float));
	if (!p) {
		fprintf(stderr, "bench_gpu_llama_step: out of host memory\n");
		exit(1);
	}
	llama_init_range(&o->cfg, t, n_t, o->seed, 0, n, p);
	llama_cuda_set_params(m, p);
	free(p);
}

int main(int argc, char **argv)
{
	options_t o = parse_options(argc, argv);
	struct cudaDeviceProp prop;
	int dev = 0;
	cudaError_t rc = cudaGetDevice(&dev);
	if (rc == cudaSuccess)
		rc = cudaGetDeviceProperties(&prop, dev);
	if (rc != cudaSuccess) {
		fprintf(stderr, "bench_gpu_llama_step: no CUDA GPU: %s\n", cudaGetErrorString(rc));
		return 1;
	}
	int B = 0;
	llama_cuda_t *m = create_model(&o, &B);
	const int T = o.seq;
	fprintf(stderr, "bench_gpu_llama_step: %s, batch %d x %d, %.2f GiB of parameter state, %.2f GiB of activations\n",
		prop.name, B, T, (double)llama_cuda_state_bytes(m) / 1073741824.0,
		(double)llama_cuda_activation_bytes(m) / 1073741824.0);
	init_params(m, &o);
	const size_t N = (size_t)B * T;
	int32_t *in = malloc(N * sizeof(int32_t)), *tg = malloc(N * sizeof(int32_t));
	double *step_ms = malloc((size_t)o.steps * 4 * sizeof(double));
	if (!in || !tg || !step_ms) {
		fprintf(stderr, "bench_gpu_llama_step: out of host memory\n");
		return 1;
	}
	double *fwd_ms = step_ms + o.steps, *bwd_ms = fwd_ms + o.steps, *opt_ms = bwd_ms + o.steps;
	cudaStream_t s = llama_cuda_stream(m);
	cudaEvent_t ev[4];
	for (int i = 0; i < 4; i++)
		cudaEventCreate(&ev[i]);
	uint64_t r = o.seed * 2654435761u + 1;
	float loss = 0.0f;
	for (int it = 0; it < o.warmup + o.steps; it++) {
		for (size_t i = 0; i < N; i++) {
			r = r * 6364136223846793005ull + 1442695040888963407ull;
			in[i] = (int32_t)((r >> 33) % (uint64_t)o.cfg.vocab_size);
			tg[i] = (int32_t)((r >> 13) % (uint64_t)o.cfg.vocab_size);
		}
		optim_adamw_t hp = {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
				    .t = it + 1};
		double t0 = bench_now_ms();
		cudaEventRecord(ev[0], s);
		llama_cuda_zero_grad(m);
		loss = llama_cuda_forward(m, in, tg, B, T);
		cudaEventRecord(ev[1], s);
		llama_cuda_backward(m, 1.0f);
		cudaEventRecord(ev[2], s);
		const double norm = llama_cuda_grad_norm(m);
		llama_cuda_adamw(m, &hp, isfinite(norm) && norm > 1.0 ? (float)(1.0 / norm) : 1.0f);
		cudaEventRecord(ev[3], s);
		cudaEventSynchronize(ev[3]);
		const double t1 = bench_now_ms();
		if (it >= o.warmup) {
			const int k = it - o.warmup;
			float f, b, p;
			cudaEventElapsedTime(&f, ev[0], ev[1]);
			cudaEventElapsedTime(&b, ev[1], ev[2]);
			cudaEventElapsedTime(&p, ev[2], ev[3]);
			step_ms[k] = t1 - t0;
			fwd_ms[k] = f;
			bwd_ms[k] = b;
			opt_ms[k] = p;
		}
		fprintf(stderr, "step %d: loss %.4f, %.1f ms\n", it, loss, t1 - t0);
	}
	double best = step_ms[0];
	for (int k = 1; k < o.steps; k++)
		best = step_ms[k] < best ? step_ms[k] : best;
	const double med = bench_median(step_ms, o.steps), tok_s = (double)N / (med / 1e3);
	const double fpt = llama_cuda_flops_per_token(m, T);
	const double n_all = (double)llama_cuda_num_params(m);
	const double fpt_6n = 6.0 * n_all + 6.0 * o.cfg.n_layer * o.cfg.n_embd * (double)T;
	size_t free_b = 0, total_b = 0;
	cudaMemGetInfo(&free_b, &total_b);
	printf("{\"arch\": \"llama\", \"device\": \"%s\", \"layers\": %d, \"heads\": %d, \"kv_heads\": %d, "
	       "\"embd\": %d, \"ffn\": %d, \"vocab\": %d, \"tied\": %s, \"attention\": \"fused\", "
	       "\"params\": %.0f, \"batch\": %d, \"seq\": %d, \"steps\": %d, \"warmup\": %d, "
	       "\"median_step_ms\": %.3f, \"best_step_ms\": %.3f, \"tokens_per_s\": %.0f, "
	       "\"flops_per_token\": %.6g, \"flops_per_token_6n\": %.6g, \"peak_tflops\": %.1f, "
	       "\"mfu\": %.4f, \"mfu_6n\": %.4f, \"forward_ms\": %.3f, \"backward_ms\": %.3f, "
	       "\"optimizer_ms\": %.3f, \"model_gib\": %.2f, \"gpu_used_gib\": %.2f, \"gpu_total_gib\": %.2f, "
	       "\"last_loss\": %.4f}\n",
	       prop.name, o.cfg.n_layer, o.cfg.n_head, o.cfg.n_kv_head, o.cfg.n_embd, o.cfg.ffn_dim,
	       o.cfg.vocab_size, o.cfg.tie_embeddings ? "true" : "false", n_all, B, T, o.steps, o.warmup, med,
	       best, tok_s, fpt, fpt_6n, o.peak_tflops, tok_s * fpt / (o.peak_tflops * 1e12),
	       tok_s * fpt_6n / (o.peak_tflops * 1e12), bench_median(fwd_ms, o.steps), bench_median(bwd_ms, o.steps),
	       bench_median(opt_ms, o.steps),
	       (double)(llama_cuda_state_bytes(m) + llama_cuda_activation_bytes(m)) / 1073741824.0,
	       (double)(total_b - free_b) / 1073741824.0, (double)total_b / 1073741824.0, loss);
	for (int i = 0; i < 4; i++)
		cudaEventDestroy(ev[i]);
	llama_cuda_free(m);
	free(in), free(tg), free(step_ms);
	return 0;
}
