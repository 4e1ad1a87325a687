/*
 * bench_gpu_step: how fast the GPU engine (gpt2_cuda) trains GPT-2, one
 * full step at a time, on one GPU.
 *
 * Builds GPT-2 124M by default (12 layers, 12 heads, 768 channels, vocab
 * 50257 as the CPU engine and the job spec take it, T 1024), initialises it
 * from a seed on the host (gpt2_init_params of a CPU model, copied over),
 * finds the largest micro-batch that fits in GPU memory (or takes --batch),
 * and times steps on random tokens: zero_grad, forward, backward, global-norm
 * clipping to 1.0 and AdamW, `--warmup` steps untimed first. Phases are timed
 * with CUDA events on the model's stream and wrapped in NVTX ranges
 * ("forward", "backward", "optimizer") for Nsight Systems.
 *
 * Prints one JSON object on stdout: the batch, the median and best step
 * time, tokens/s at the median (host wall clock, so every bubble counts),
 * MFU = tokens/s * FLOPs per token / peak with FLOPs per token = 6N + 6*L*C*T
 * (gpt2_flops_per_token's formula, the llm.c convention) and the peak given
 * by --peak-tflops (default 989: H100 SXM dense bf16), the median time of
 * each phase (GPU time between events), the peak GPU memory the model holds,
 * and the last loss. bench/gpu/run.sh turns it into a markdown block.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
/* nvtx3 casts dlsym's result to function pointers, which -Wpedantic
 * rejects in ISO C; the header is NVIDIA's, not ours */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include <nvtx3/nvToolsExt.h>
#pragma GCC diagnostic pop

#include "gpt2.h"
#include "gpt2_cuda.h"
#include "optim.h"
#include "../benchutil.h"

#define PROG "bench_gpu_step"

#define MAX_STEPS 10000
#define MAX_AUTO_BATCH 512
#define HEADROOM_BYTES (1ull << 30) /* kept free while probing the batch size */

typedef struct {
	gpt2_config_t cfg;
	int batch; /* 0: the largest that fits */
	int seq;
	int steps, warmup;
	double peak_tflops;
	uint64_t seed;
	unsigned flags; /* GPT2_CUDA_FUSED_ATTENTION or 0 */
} options_t;

static uint64_t s_rng_state;

static uint32_t rng_next(void)
{
	s_rng_state ^= s_rng_state >> 12;
	s_rng_state ^= s_rng_state << 25;
	s_rng_state ^= s_rng_state >> 27;
	return (uint32_t)((s_rng_state * 0x2545F4914F6CDD1DULL) >> 32);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: bench_gpu_step [--layers N] [--heads N] [--embd N] [--vocab N] [--seq N]\n"
		"                      [--batch N] [--steps N] [--warmup N] [--peak-tflops X] [--seed N]\n"
		"                      [--attention gemm|fused]\n"
		"  times full training steps of the GPU engine on the current CUDA device; prints JSON\n"
		"  defaults: GPT-2 124M (12 layers, 12 heads, 768 embd, vocab 50257), seq 1024,\n"
		"            the largest batch that fits, 20 steps after 3 warmup steps,\n"
		"            peak 989 TFLOP/s (H100 SXM dense bf16), attention fused (cuda_flash_* on\n"
		"            tensor cores; gemm: batched GEMMs over the T x T square)\n");
	exit(2);
}

static options_t parse_options(int argc, char **argv)
{
	options_t o = {
		.cfg = {.n_layer = 12, .n_head = 12, .n_embd = 768, .vocab_size = 50257, .seq_len = 1024},
		.batch = 0, .seq = 1024, .steps = 20, .warmup = 3, .peak_tflops = 989.0, .seed = 1337,
		.flags = GPT2_CUDA_FUSED_ATTENTION,
	};
	for (int i = 1; i < argc; i++) {
		const char *flag = argv[i];
		if (!strcmp(flag, "--help") || !strcmp(flag, "-h") || i + 1 >= argc)
			usage();
		const char *val = argv[++i];
		if (!strcmp(flag, "--layers"))
			o.cfg.n_layer = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--heads"))
			o.cfg.n_head = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--embd"))
			o.cfg.n_embd = bench_parse_int(PROG, flag, val, 1);
		else if (!strcmp(flag, "--vocab"))
			o.cfg.vocab_size = bench_parse_int(PROG, flag, val, 2);
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
		else if (!strcmp(flag, "--attention")) {
			if (strcmp(val, "gemm") != 0 && strcmp(val, "fused") != 0) {
				fprintf(stderr, "bench_gpu_step: --attention must be gemm or fused (got '%s')\n",
					val);
				exit(2);
			}
			o.flags = strcmp(val, "fused") == 0 ? GPT2_CUDA_FUSED_ATTENTION : 0;
		}
		else if (!strcmp(flag, "--peak-tflops")) {
			char *end;
			o.peak_tflops = strtod(val, &end);
			if (*val == '\0' || *end != '\0' || !(o.peak_tflops > 0)) {
				fprintf(stderr, "bench_gpu_step: --peak-tflops must be a positive number (got '%s')\n",
					val);
				exit(2);
			}
		} else {
			fprintf(stderr, "bench_gpu_step: unknown option '%s'\n", flag);
			usage();
		}
	}
	if (o.steps > MAX_STEPS) {
		fprintf(stderr, "bench_gpu_step: --steps must be at most %d (got %d)\n", MAX_STEPS, o.steps);
		exit(2);
	}
	o.cfg.seq_len = o.seq;
	return o;
}

/* The model at --batch, or at the largest batch that fits with
 * HEADROOM_BYTES left over (the first batch tried that fits, going down). */
static gpt2_cuda_t *create_model(const options_t *o, int *ret_batch)
{
	char err[512];
	if (o->batch > 0) {
		gpt2_cuda_t *m = gpt2_cuda_create(&o->cfg, o->batch, o->seq, o->flags, err, sizeof err);
		if (!m) {
			fprintf(stderr, "bench_gpu_step: %s\n", err);
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
	gpt2_cuda_t *m = NULL;
	int b = MAX_AUTO_BATCH;
	for (; b >= 1 && !m; b--) {
		m = gpt2_cuda_create(&o->cfg, b, o->seq, o->flags, err, sizeof err);
		if (!m && strncmp(err, "out of GPU memory", 17) != 0)
			break; /* not a size problem: no GPU, bad config */
	}
	if (headroom)
		cudaFree(headroom);
	if (!m) {
		fprintf(stderr, "bench_gpu_step: %s\n", err);
		exit(1);
	}
	*ret_batch = b + 1;
	return m;
}

int main(int argc, char **argv)
{
	options_t o = parse_options(argc, argv);
	s_rng_state = o.seed * 2654435761u + 1;
	int dev = 0;
	struct cudaDeviceProp prop;
	cudaError_t rc = cudaGetDevice(&dev);
	if (rc == cudaSuccess)
		rc = cudaGetDeviceProperties(&prop, dev);
	if (rc != cudaSuccess) {
		fprintf(stderr, "bench_gpu_step: no CUDA GPU: %s\n", cudaGetErrorString(rc));
		return 1;
	}
	int B = 0;
	gpt2_cuda_t *m = create_model(&o, &B);
	const int T = o.seq;
	fprintf(stderr, "bench_gpu_step: %s, batch %d x %d tokens, attention %s, %.2f GiB of parameter state, %.2f GiB of activations\n",
		prop.name, B, T, gpt2_cuda_fused_attention(m) ? "fused" : "gemm", (double)gpt2_cuda_state_bytes(m) / 1073741824.0,
		(double)gpt2_cuda_activation_bytes(m) / 1073741824.0);

	/* the initial parameters of the CPU engine, copied over */
	{
		char err[512];
		gpt2_t *cpu = gpt2_create(&o.cfg, 1, 1, GPT2_PRECISION_FP32, err, sizeof err);
		if (!cpu) {
			fprintf(stderr, "bench_gpu_step: host model for the initial parameters: %s\n", err);
			return 1;
		}
		if (gpt2_num_params(cpu) != gpt2_cuda_num_params(m)) {
			fprintf(stderr, "bench_gpu_step: parameter layouts differ (cpu %zu, gpu %zu)\n",
				gpt2_num_params(cpu), gpt2_cuda_num_params(m));
			return 1;
		}
		gpt2_init_params(cpu, o.seed);
		gpt2_cuda_set_params(m, gpt2_params(cpu));
		gpt2_free(cpu);
	}

	size_t N = (size_t)B * T;
	int32_t *in = malloc(N * sizeof(int32_t)), *tg = malloc(N * sizeof(int32_t));
	double *step_ms = malloc((size_t)o.steps * sizeof(double));
	double *fwd_ms = malloc((size_t)o.steps * sizeof(double));
	double *bwd_ms = malloc((size_t)o.steps * sizeof(double));
	double *opt_ms = malloc((size_t)o.steps * sizeof(double));
	if (!in || !tg || !step_ms || !fwd_ms || !bwd_ms || !opt_ms) {
		fprintf(stderr, "bench_gpu_step: out of host memory\n");
		return 1;
	}
	cudaStream_t s = gpt2_cuda_stream(m);
	cudaEvent_t ev[4];
	for (int i = 0; i < 4; i++)
		cudaEventCreate(&ev[i]);
	float loss = 0.0f;
	for (int it = 0; it < o.warmup + o.steps; it++) {
		for (size_t i = 0; i < N; i++) {
			in[i] = (int32_t)(rng_next() % (uint32_t)o.cfg.vocab_size);
			tg[i] = (int32_t)(rng_next() % (uint32_t)o.cfg.vocab_size);
		}
		optim_adamw_t hp = {.lr = 6e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
				    .weight_decay = 0.1, .t = it + 1};
		double t0 = bench_now_ms();
		cudaEventRecord(ev[0], s);
		nvtxRangePushA("forward");
		gpt2_cuda_zero_grad(m);
		gpt2_cuda_forward(m, in, tg, B, T);
		nvtxRangePop();
		cudaEventRecord(ev[1], s);
		nvtxRangePushA("backward");
		gpt2_cuda_backward(m, 1.0f);
		nvtxRangePop();
		cudaEventRecord(ev[2], s);
		nvtxRangePushA("optimizer");
		gpt2_cuda_step(m, &hp, 1.0);
		nvtxRangePop();
		cudaEventRecord(ev[3], s);
		loss = gpt2_cuda_loss(m);
		cudaEventSynchronize(ev[3]);
		double t1 = bench_now_ms();
		if (it >= o.warmup) {
			int k = it - o.warmup;
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
	rc = cudaGetLastError();
	if (rc != cudaSuccess) {
		fprintf(stderr, "bench_gpu_step: CUDA error: %s\n", cudaGetErrorString(rc));
		return 1;
	}
	double best = step_ms[0];
	for (int k = 1; k < o.steps; k++)
		best = step_ms[k] < best ? step_ms[k] : best;
	double med = bench_median(step_ms, o.steps);
	double tok_s = (double)N / (med / 1e3);
	double fpt = gpt2_cuda_flops_per_token(m, T);
	double mfu = tok_s * fpt / (o.peak_tflops * 1e12);
	size_t free_b = 0, total_b = 0;
	cudaMemGetInfo(&free_b, &total_b);
	printf("{\"device\": \"%s\", \"layers\": %d, \"heads\": %d, \"embd\": %d, \"vocab\": %d, "
	       "\"attention\": \"%s\", \"params\": %zu, \"batch\": %d, \"seq\": %d, \"tokens_per_step\": %zu, \"steps\": %d, "
	       "\"warmup\": %d, \"median_step_ms\": %.3f, \"best_step_ms\": %.3f, \"tokens_per_s\": %.0f, "
	       "\"flops_per_token\": %.6g, \"peak_tflops\": %.1f, \"mfu\": %.4f, "
	       "\"forward_ms\": %.3f, \"backward_ms\": %.3f, \"optimizer_ms\": %.3f, "
	       "\"model_gib\": %.2f, \"gpu_used_gib\": %.2f, \"gpu_total_gib\": %.2f, \"last_loss\": %.4f}\n",
	       prop.name, o.cfg.n_layer, o.cfg.n_head, o.cfg.n_embd, o.cfg.vocab_size,
	       gpt2_cuda_fused_attention(m) ? "fused" : "gemm", gpt2_cuda_num_params(m), B, T, N, o.steps, o.warmup, med, best, tok_s, fpt, o.peak_tflops,
	       mfu, bench_median(fwd_ms, o.steps), bench_median(bwd_ms, o.steps), bench_median(opt_ms, o.steps),
	       (double)(gpt2_cuda_state_bytes(m) + gpt2_cuda_activation_bytes(m)) / 1073741824.0,
	       (double)(total_b - free_b) / 1073741824.0, (double)total_b / 1073741824.0, loss);
	for (int i = 0; i < 4; i++)
		cudaEventDestroy(ev[i]);
	gpt2_cuda_free(m);
	free(in), free(tg), free(step_ms), free(fwd_ms), free(bwd_ms), free(opt_ms);
	return 0;
}
