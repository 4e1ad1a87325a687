/*
 * bench_ddp_step: data-parallel training throughput of the real trainer.
 *
 * One process is one rank: it joins a Gloo group of --world ranks through a
 * directory KV (--kv, worker/comm/comm_kv_dir.c) and runs train_run (the
 * same loop as `ringworker train`) for --warmup + --steps steps of a GPT-2
 * of the given shape on a nanoGPT token file (--data, uint16 tokens below
 * --vocab), --batch sequences per rank. Each step is what a DDP rank does:
 * data, forward, backward, one all-reduce of the gradients and the loss,
 * global-norm clipping to 1.0, AdamW over the whole flat buffer (or, with
 * --sharding zero1|zero2|zero3, the ZeRO step of that mode). on_step
 * records every step's wall time; every rank then prints one JSON object:
 * its median and best ms/step over the timed steps, tokens/s of the whole
 * group at the median (batch x seq x world per step), achieved GFLOP/s, its
 * peak resident set size, and the bytes the trainer says it holds
 * (parameters, gradients, optimizer state, activations). Threads: OpenMP
 * (OMP_NUM_THREADS). With --checkpoint-dir DIR --checkpoint-every N each
 * rank also writes its snapshot shard every N steps (asynchronously, as in
 * a job; nothing is committed) and the JSON gives the mean step time too.
 * bench/ddp/run.sh runs it beside PyTorch DDP (bench/ddp/torch_ddp_step.py);
 * bench/zero/run.sh compares the sharding modes; bench/snapshot/run.sh
 * measures the snapshot overhead.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <omp.h>

#include "comm.h"
#include "comm_kv_dir.h"
#include "jobspec.h"
#include "train.h"

#define MAX_STEPS 10000

typedef struct {
	int world, rank;
	const char *kv_dir, *data;
	int layers, heads, embd, vocab, batch, seq, steps, warmup;
	const char *precision, *sharding;
	const char *checkpoint_dir;
	int checkpoint_every;
} options_t;

typedef struct {
	int n;
	double ms[MAX_STEPS];
	double last_loss;
	train_report_t last; /* memory figures; params not kept */
} record_t;

static int s_on_step(void *ctx, const train_report_t *r)
{
	record_t *rec = ctx;
	if (rec->n < MAX_STEPS)
		rec->ms[rec->n++] = r->ms;
	rec->last_loss = r->loss;
	rec->last = *r;
	rec->last.params = NULL;
	return 0;
}

static int s_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int s_parse(int argc, char **argv, options_t *o)
{
	static const struct option opts[] = {
		{"world", required_argument, NULL, 'w'}, {"rank", required_argument, NULL, 'r'},
		{"kv", required_argument, NULL, 'k'},    {"data", required_argument, NULL, 'd'},
		{"layers", required_argument, NULL, 'L'}, {"heads", required_argument, NULL, 'H'},
		{"embd", required_argument, NULL, 'C'},  {"vocab", required_argument, NULL, 'V'},
		{"batch", required_argument, NULL, 'B'}, {"seq", required_argument, NULL, 'T'},
		{"steps", required_argument, NULL, 's'}, {"warmup", required_argument, NULL, 'u'},
		{"precision", required_argument, NULL, 'p'}, {"sharding", required_argument, NULL, 'z'},
		{"checkpoint-dir", required_argument, NULL, 'K'},
		{"checkpoint-every", required_argument, NULL, 'E'},
		{NULL, 0, NULL, 0},
	};
	*o = (options_t){.world = 1, .layers = 6, .heads = 6, .embd = 384, .vocab = 50257,
			 .batch = 8, .seq = 64, .steps = 10, .warmup = 3, .precision = "fp32",
			 .sharding = "none"};
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'w': o->world = atoi(optarg); break;
		case 'r': o->rank = atoi(optarg); break;
		case 'k': o->kv_dir = optarg; break;
		case 'd': o->data = optarg; break;
		case 'L': o->layers = atoi(optarg); break;
		case 'H': o->heads = atoi(optarg); break;
		case 'C': o->embd = atoi(optarg); break;
		case 'V': o->vocab = atoi(optarg); break;
		case 'B': o->batch = atoi(optarg); break;
		case 'T': o->seq = atoi(optarg); break;
		case 's': o->steps = atoi(optarg); break;
		case 'u': o->warmup = atoi(optarg); break;
		case 'p': o->precision = optarg; break;
		case 'z': o->sharding = optarg; break;
		case 'K': o->checkpoint_dir = optarg; break;
		case 'E': o->checkpoint_every = atoi(optarg); break;
		default: return -1;
		}
	}
	if (!o->kv_dir || !o->data || o->world < 1 || o->rank < 0 || o->rank >= o->world ||
	    o->steps < 1 || o->warmup < 0 || o->steps + o->warmup > MAX_STEPS)
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	options_t o;
	if (s_parse(argc, argv, &o) < 0) {
		fprintf(stderr, "usage: bench_ddp_step --world W --rank R --kv DIR --data FILE.bin [--layers 6]"
				" [--heads 6] [--embd 384] [--vocab 50257] [--batch 8] [--seq 64] [--steps 10]"
				" [--warmup 3] [--precision fp32|bf16] [--sharding none|zero1|zero2|zero3]"
				" [--checkpoint-dir DIR --checkpoint-every N]\n");
		return 1;
	}
	char json[2048];
	snprintf(json, sizeof json,
		 "{\"name\":\"bench-ddp\","
		 "\"model\":{\"n_layer\":%d,\"n_head\":%d,\"n_embd\":%d,\"vocab_size\":%d,\"seq_len\":%d},"
		 "\"data\":{\"train\":\"%s\",\"format\":\"nanogpt\"},"
		 "\"train\":{\"steps\":%d,\"batch_size\":%d,\"lr\":0.0006,\"warmup_steps\":1,"
		 "\"weight_decay\":0.1,\"grad_clip\":1.0,\"seed\":1337,\"eval_every\":0,\"precision\":\"%s\"},"
		 "\"parallel\":{\"world_size\":%d,\"sharding\":\"%s\"},"
		 "\"checkpoint\":{\"every_steps\":%d,\"keep_last\":1}}",
		 o.layers, o.heads, o.embd, o.vocab, o.seq, o.data, o.steps + o.warmup, o.batch,
		 o.precision, o.world, o.sharding, o.checkpoint_dir ? o.checkpoint_every : 0);
	jobspec_t spec = {0};
	jobspec_error_t jerr;
	if (jobspec_parse(json, strlen(json), &spec, &jerr) < 0) {
		fprintf(stderr, "bench_ddp_step: spec %s: %s\n", jerr.pointer, jerr.message);
		return 1;
	}
	comm_kv_t kv = comm_kv_dir_make(o.kv_dir);
	char err[512];
	comm_t *comm = comm_gloo_new(&kv, o.rank, o.world, "127.0.0.1", 120000, err, sizeof err);
	if (!comm) {
		fprintf(stderr, "bench_ddp_step: %s\n", err);
		jobspec_free(&spec);
		return 1;
	}
	static record_t rec;
	train_options_t opt = {
		.out = stderr,
		.log = stderr,
		.spec_name = "bench_ddp_step",
		.comm = comm,
		.rank = o.rank,
		.quiet = o.rank != 0,
		.on_step = s_on_step,
		.on_step_ctx = &rec,
		.checkpoint_dir = o.checkpoint_dir,
	};
	int rc = train_run(&spec, &opt);
	comm_free(comm);
	jobspec_free(&spec);
	if (rc != RM_EXIT_OK || rec.n != o.steps + o.warmup) {
		fprintf(stderr, "bench_ddp_step: rank %d: training failed (exit %d)\n", o.rank, rc);
		return 1;
	}
	int n = o.steps;
	double *t = rec.ms + o.warmup, mean = 0;
	for (int i = 0; i < n; i++)
		mean += t[i] / n;
	qsort(t, (size_t)n, sizeof *t, s_cmp_double);
	double median = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
	double tok_s = (double)o.batch * o.seq * o.world / (median * 1e-3);
	/* 6N + 6LCT per token (gpt2_flops_per_token), N with the tied LM head. */
	double C = o.embd, V = o.vocab, L = o.layers;
	double n_params = V * C + o.seq * C + L * (12 * C * C + 13 * C) + 2 * C;
	double flops_per_token = 6 * n_params + 6 * L * C * o.seq;
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	const double mib = 1048576.0;
	printf("{\"program\":\"ringmaster\",\"rank\":%d,\"precision\":\"%s\",\"sharding\":\"%s\","
	       "\"world\":%d,\"layers\":%d,\"heads\":%d,"
	       "\"embd\":%d,\"vocab\":%d,\"batch_per_rank\":%d,\"seq\":%d,\"threads_per_rank\":%d,"
	       "\"steps\":%d,\"warmup\":%d,\"checkpoint_every\":%d,\"median_ms\":%.2f,\"mean_ms\":%.2f,"
	       "\"min_ms\":%.2f,\"tokens_per_s\":%.1f,"
	       "\"gflops\":%.1f,\"peak_rss_mib\":%.1f,\"params_mib\":%.1f,\"grads_mib\":%.1f,"
	       "\"optim_mib\":%.1f,\"activations_mib\":%.1f,\"last_loss\":%.4f}\n",
	       o.rank, o.precision, o.sharding, o.world, o.layers, o.heads, o.embd, o.vocab, o.batch,
	       o.seq, omp_get_max_threads(), o.steps, o.warmup,
	       o.checkpoint_dir ? o.checkpoint_every : 0, median, mean, t[0], tok_s,
	       flops_per_token * tok_s / 1e9, (double)ru.ru_maxrss / 1024.0,
	       (double)rec.last.params_bytes / mib, (double)rec.last.grads_bytes / mib,
	       (double)rec.last.optim_bytes / mib, (double)rec.last.activations_bytes / mib,
	       rec.last_loss);
	fflush(stdout);
	return 0;
}
