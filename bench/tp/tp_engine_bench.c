/*
 * tp_engine_bench: the CPU engine's tensor parallelism (model.h's
 * model_tp_t) at real model shapes: per-rank memory from the model's own
 * byte counters, and the communication and time of real training steps
 * with t ranks forked over Gloo (worker/tpcomm).
 *
 *   tp_engine_bench memory SHAPE B T
 *       for t = 1, 2, 4: one line of JSON per t with the bytes a TP rank
 *       holds: parameters, gradients, AdamW moments (2 x 4 bytes per local
 *       parameter, the trainer's, before any ZeRO sharding), activations
 *       (the model's arena). Creating a model needs no collective, so no
 *       ranks are forked: the group's functions are never called.
 *   tp_engine_bench step SHAPE B T t STEPS
 *       forks t ranks (t = 1: one process, no TP), runs STEPS
 *       forward+backward steps after one warm-up, and prints rank 0's JSON:
 *       seconds per step (median), the TP collectives per step (floats of
 *       their logical size, model_tp_comm_t) and the formula,
 *       8 L B T C per step (forward and backward: two all-gathers and two
 *       reduce-scatters of (B, T, C) per layer).
 *
 * SHAPE: gpt2-124m (12 L, 12 H, C 768, V 50257) or llama-124m (12 L,
 * 12 H, 4 KV heads, C 768, FFN 2048, V 32000, untied). The numbers go to
 * /work/wt/notes/RESULTS-27T1.md via bench/tp/engine.sh.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/comm_kv_dir.h"
#include "model.h"
#include "tpcomm.h"

static const char *s_shape;

static model_config_t s_config(const char **ret_arch)
{
	model_config_t c = {.n_layer = 12, .n_head = 12, .n_embd = 768, .seq_len = 1024};
	if (strcmp(s_shape, "llama-124m") == 0) {
		*ret_arch = "llama";
		c.vocab_size = 32000;
		c.n_kv_head = 4;
		c.ffn_dim = 2048;
		c.rope_theta = 500000.0;
		c.norm_eps = 1e-5;
		c.seq_len = 8192;
	} else {
		*ret_arch = "gpt2";
		c.vocab_size = 50257;
	}
	return c;
}

static void s_never(void *ctx, const float *in, float *out, size_t n)
{
	(void)ctx, (void)in, (void)out, (void)n;
	fprintf(stderr, "tp_engine_bench: a collective in memory mode\n");
	exit(1);
}

static void s_never_ar(void *ctx, float *buf, size_t n)
{
	(void)ctx, (void)buf, (void)n;
	fprintf(stderr, "tp_engine_bench: a collective in memory mode\n");
	exit(1);
}

static model_t *s_create(int B, int T, const model_tp_t *tp)
{
	const char *arch;
	model_config_t cfg = s_config(&arch);
	model_options_t opt = {.max_B = B, .max_T = T, .tp = tp};
	model_t *m = NULL;
	char err[256];
	if (model_create(arch, MODEL_DEVICE_CPU, &cfg, &opt, &m, err, sizeof err) < 0) {
		fprintf(stderr, "tp_engine_bench: %s\n", err);
		exit(1);
	}
	return m;
}

static int s_memory(int B, int T)
{
	for (int t = 1; t <= 4; t *= 2) {
		model_tp_t tp = {.rank = 0, .size = t, .sequence_parallel = true, .allgather = s_never,
				 .reduce_scatter = s_never, .allreduce = s_never_ar};
		model_t *m = s_create(B, T, t > 1 ? &tp : NULL);
		size_t np = model_num_params(m);
		printf("{\"shape\": \"%s\", \"B\": %d, \"T\": %d, \"t\": %d, \"params\": %zu,"
		       " \"param_bytes\": %zu, \"grad_bytes\": %zu, \"adamw_bytes\": %zu,"
		       " \"activation_bytes\": %zu}\n",
		       s_shape, B, T, t, np, model_param_bytes(m), model_grad_bytes(m), 8 * np,
		       model_activation_bytes(m));
		model_free(m);
	}
	return 0;
}

static double s_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int s_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void s_rank(const char *dir, int rank, int t, int B, int T, int steps)
{
	comm_t *c = NULL;
	tpcomm_t tc = {0};
	model_tp_t tp;
	if (t > 1) {
		comm_kv_t kv = comm_kv_dir_make(dir);
		char err[512];
		c = comm_gloo_new(&kv, rank, t, "127.0.0.1", 120000, err, sizeof err);
		if (!c || tpcomm_init(&tc, c, &tp) < 0) {
			fprintf(stderr, "rank %d: %s\n", rank, c ? "out of memory" : err);
			exit(1);
		}
	}
	model_t *m = s_create(B, T, t > 1 ? &tp : NULL);
	model_init_params(m, 1);
	const char *arch;
	model_config_t cfg = s_config(&arch);
	int32_t *in = malloc((size_t)B * T * sizeof(int32_t)), *tg = malloc((size_t)B * T * sizeof(int32_t));
	for (int i = 0; i < B * T; i++) {
		in[i] = (int32_t)((i * 7919u) % (unsigned)cfg.vocab_size);
		tg[i] = (int32_t)((i * 104729u + 1) % (unsigned)cfg.vocab_size);
	}
	double *dt = malloc((size_t)steps * sizeof(double));
	model_tp_comm_t v0 = {0}, v1;
	float loss = 0;
	for (int s = -1; s < steps; s++) {
		if (s == 0)
			model_tp_comm(m, &v0);
		double a = s_now();
		model_zero_grad(m);
		loss = model_forward(m, in, tg, B, T);
		model_backward(m, 1.0f);
		if (s >= 0)
			dt[s] = s_now() - a;
	}
	model_tp_comm(m, &v1);
	qsort(dt, (size_t)steps, sizeof *dt, s_cmp);
	if (rank == 0) {
		double k = steps;
		double formula = 8.0 * cfg.n_layer * (double)B * T * cfg.n_embd;
		printf("{\"shape\": \"%s\", \"B\": %d, \"T\": %d, \"t\": %d, \"loss\": %.6f,"
		       " \"step_s_median\": %.4f, \"allgather_floats\": %.0f, \"allgather_calls\": %.0f,"
		       " \"reduce_scatter_floats\": %.0f, \"reduce_scatter_calls\": %.0f,"
		       " \"allreduce_floats\": %.0f, \"allreduce_calls\": %.0f,"
		       " \"ring_sent_floats\": %.0f, \"formula_8LBTC\": %.0f,"
		       " \"activation_bytes\": %zu, \"param_bytes\": %zu}\n",
		       s_shape, B, T, t, (double)loss, dt[steps / 2],
		       (double)(v1.allgather_floats - v0.allgather_floats) / k,
		       (double)(v1.allgather_calls - v0.allgather_calls) / k,
		       (double)(v1.reduce_scatter_floats - v0.reduce_scatter_floats) / k,
		       (double)(v1.reduce_scatter_calls - v0.reduce_scatter_calls) / k,
		       (double)(v1.allreduce_floats - v0.allreduce_floats) / k,
		       (double)(v1.allreduce_calls - v0.allreduce_calls) / k,
		       (v1.sent_floats - v0.sent_floats) / k, formula, model_activation_bytes(m),
		       model_param_bytes(m));
	}
	if (t > 1 && tpcomm_error(&tc) != 0) {
		fprintf(stderr, "rank %d: collective failed: %s\n", rank, tc.error_line);
		exit(1);
	}
	model_free(m);
	if (c) {
		tpcomm_free(&tc);
		comm_free(c);
	}
	free(in);
	free(tg);
	free(dt);
}

static int s_step(int B, int T, int t, int steps)
{
	char dir[] = "/tmp/tp-bench.XXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	int bad = 0;
	for (int r = 0; r < t; r++) {
		pid_t p = fork();
		if (p < 0) {
			perror("fork");
			return 1;
		}
		if (p == 0) {
			s_rank(dir, r, t, B, T, steps);
			exit(0);
		}
	}
	int status;
	while (wait(&status) > 0)
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			bad++;
	char cmd[256];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc >= 5 && strcmp(argv[1], "memory") == 0) {
		s_shape = argv[2];
		return s_memory(atoi(argv[3]), atoi(argv[4]));
	}
	if (argc >= 7 && strcmp(argv[1], "step") == 0) {
		s_shape = argv[2];
		int t = atoi(argv[5]), steps = atoi(argv[6]);
		if (t < 1 || t > 8 || steps < 1) {
			fprintf(stderr, "tp_engine_bench: t in 1..8, STEPS >= 1\n");
			return 2;
		}
		return s_step(atoi(argv[3]), atoi(argv[4]), t, steps);
	}
	fprintf(stderr, "usage: tp_engine_bench memory gpt2-124m|llama-124m B T\n"
			"       tp_engine_bench step gpt2-124m|llama-124m B T t STEPS\n");
	return 2;
}
