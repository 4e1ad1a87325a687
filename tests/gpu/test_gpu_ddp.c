/*
 * test_gpu_ddp: the trainer (worker/train.c) with parallel.device "cuda" as
 * ranks of an NCCL group, the way rank.c runs it under an agent: forked
 * ranks meet through a directory KV (comm_kv_dir.h), each makes its comm
 * with comm_nccl_new on device 0 of what it sees (CUDA_VISIBLE_DEVICES set
 * to one GPU per rank, as the agent does) and calls train_run. Every rank
 * records what on_step reports.
 *
 *   - world 1 over NCCL against no comm at all: the gradient all-reduce on
 *     device memory and the losses sent through the device are identities
 *     at one rank, so every step's loss, grad norm and validation loss and
 *     the final parameters are the same bits;
 *   - with two or more GPUs, world 2 x batch 2 against world 1 x batch 4
 *     (the same global batch): losses and validation losses within
 *     LOSS_REL_TOL and grad norms within NORM_REL_TOL (relative), and both
 *     ranks report the same bits and end with the same parameters. With one
 *     GPU this part says so and is not run (NCCL runs one rank per GPU);
 *   - the memory figures come from the GPU engine: parameters 6 bytes per
 *     parameter (fp32 and bf16, rounded up), gradients 4, AdamW 8, and a
 *     non-zero activation arena;
 *   - parallel.sharding zero1, zero2 and zero3 (the shard's gradients,
 *     moments and zero3's parameters on the GPU, train_cuda.h) at world 1
 *     against no comm, and with two
 *     GPUs at world 2 against world 2 unsharded: every step within
 *     ZERO1_REL_TOL or ZERO2_REL_TOL (below), both ranks the
 *     same bits and parameters, and the memory figures of a shard: AdamW 8
 *     bytes per parameter of the shard (S = ceil(N / W)); zero1's gradients
 *     4 per parameter plus 4 per shard slot, zero2's no full buffer (the
 *     parameters alone are 6 bytes per parameter: the model holds none),
 *     zero3's parameters less than a replica's (at world 2);
 *   - zero1's reduce-scatter is started by the last backward itself
 *     (s_overlap_main, on train_cuda at world 1).
 *
 * The model is gpu-step's (2 layers, 4 heads, 64 channels, bytes, seq_len
 * 32), 8 steps, 2 micro-steps, validation every 4. The tolerances are
 * gpu-train's: at world 2 each GEMM sees half the rows, so the sums run in
 * another order and bf16 rounds differently (docs/gpu.md). Where no GPU is
 * usable it prints "gpu-ddp: no CUDA GPU: <reason>; skipping" and exits 77.
 * The parent never touches CUDA (a CUDA context does not survive fork): a
 * child probes.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "comm.h"
#include "comm_kv_dir.h"
#include "jobspec.h"
#include "gpt2.h"
#include "tp_harness.h"
#include "train.h"
#include "train_cuda.h"

#define SKIP 77
#define STEPS 8
#define MAX_RANKS 2
#define LOSS_REL_TOL 5e-3
#define NORM_REL_TOL 5e-2
/* zero1 changes only the norm's order of summation (measured on cudaemu:
 * 8.4e-16, the same parameter bits); zero2 sums wte's two parts (LM head,
 * embedding) and, with gradient accumulation, the micro-steps apart, where
 * unsharded adds them up in the model's buffer, and bf16 rounding of the
 * parameters carries such last-bit differences on (measured: 2.3e-5 over 8
 * steps; 1.8e-5 with one micro-step); zero3 as zero2 (ZERO2_REL_TOL). */
#define ZERO1_REL_TOL 1e-5
#define ZERO2_REL_TOL 1e-3

static int s_failures;

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			s_failures++;                                                \
		}                                                                    \
	} while (0)

typedef struct {
	double loss, grad_norm, val_loss;
	uint64_t params_bytes, grads_bytes, optim_bytes, activations_bytes, n_params;
} step_rec_t;

typedef struct {
	int W, B;
	bool use_comm;
	const char *sharding; /* NULL: none */
} run_cfg_t;

typedef struct {
	int rc[MAX_RANKS];
	int n_steps[MAX_RANKS];
	step_rec_t steps[MAX_RANKS][STEPS];
	float *params[MAX_RANKS]; /* (n_params) after the last step; malloc'ed */
	size_t n_params;
} run_result_t;

static char s_dir[] = "/tmp/test-gpu-ddp.XXXXXX";
static char s_visible[MAX_RANKS][256]; /* CUDA_VISIBLE_DEVICES of rank r */

static void s_write_text(const char *path, uint64_t seed, size_t n)
{
	static const char *words[] = {"the", "ring", "master", "trains", "a", "small", "model",
				      "on", "bytes", "of", "text", "and", "every", "rank", "sums",
				      "its", "gradients", "with", "others", "\n"};
	FILE *f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(2);
	}
	uint64_t x = seed;
	size_t written = 0;
	while (written < n) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		written += (size_t)fprintf(f, "%s ", words[(x >> 33) % (sizeof words / sizeof words[0])]);
	}
	fclose(f);
}

static int s_load_spec(const run_cfg_t *cfg, jobspec_t *spec)
{
	char json[1200];
	snprintf(json, sizeof json,
		 "{\"name\":\"gpu-ddp\","
		 "\"model\":{\"n_layer\":2,\"n_head\":4,\"n_embd\":64,\"vocab_size\":256,\"seq_len\":32},"
		 "\"data\":{\"train\":\"train.txt\",\"val\":\"val.txt\",\"format\":\"text\"},"
		 "\"train\":{\"steps\":%d,\"batch_size\":%d,\"grad_accum\":2,\"lr\":0.003,"
		 "\"warmup_steps\":2,\"min_lr\":0.0003,\"grad_clip\":1.0,\"seed\":1234,"
		 "\"eval_every\":4,\"eval_batches\":2,\"precision\":\"bf16\"},"
		 "\"parallel\":{\"world_size\":%d,\"device\":\"cuda\",\"sharding\":\"%s\"}}",
		 STEPS, cfg->B, cfg->W, cfg->sharding ? cfg->sharding : "none");
	jobspec_error_t err;
	if (jobspec_parse(json, strlen(json), spec, &err) < 0) {
		fprintf(stderr, "spec: %s: %s\n", err.pointer, err.message);
		return -1;
	}
	return 0;
}

typedef struct {
	FILE *rec;
	const char *params_path;
} step_ctx_t;

static int s_on_step(void *ctx, const train_report_t *r)
{
	step_ctx_t *c = ctx;
	step_rec_t rec = {r->loss, r->grad_norm, r->val_loss, r->params_bytes, r->grads_bytes,
			  r->optim_bytes, r->activations_bytes, r->n_params};
	fwrite(&rec, sizeof rec, 1, c->rec);
	fflush(c->rec);
	if (r->step == STEPS && r->params) {
		FILE *f = fopen(c->params_path, "w");
		if (f) {
			fwrite(r->params, sizeof(float), r->n_params, f);
			fclose(f);
		}
	}
	return 0;
}

static void s_path(char *out, size_t n, const char *tag, int rank, const char *what)
{
	snprintf(out, n, "%s/%s-rank%d.%s", s_dir, tag, rank, what);
}

/* One rank, in its own process: its GPU, its comm, train_run. */
static int s_rank_main(const run_cfg_t *cfg, int rank, const char *tag, const char *kv_dir)
{
	if (s_visible[rank][0])
		setenv("CUDA_VISIBLE_DEVICES", s_visible[rank], 1);
	char rec_path[4200], log_path[4200], params_path[4200];
	s_path(rec_path, sizeof rec_path, tag, rank, "rec");
	s_path(log_path, sizeof log_path, tag, rank, "log");
	s_path(params_path, sizeof params_path, tag, rank, "params");
	FILE *rec = fopen(rec_path, "w"), *log = fopen(log_path, "w"), *out = fopen("/dev/null", "w");
	if (!rec || !log || !out)
		return 100;
	jobspec_t spec = {0};
	if (s_load_spec(cfg, &spec) < 0)
		return 101;
	comm_t *comm = NULL;
	if (cfg->use_comm) {
		comm_kv_t kv = comm_kv_dir_make(kv_dir);
		char err[512];
		comm = comm_nccl_new(&kv, rank, cfg->W, 0, 60000, err, sizeof err);
		if (!comm) {
			fprintf(log, "%s\n", err);
			fclose(log);
			return 102;
		}
	}
	step_ctx_t ctx = {rec, params_path};
	train_options_t opt = {
		.data_root = s_dir,
		.out = out,
		.log = log,
		.spec_name = "test_gpu_ddp",
		.comm = comm,
		.rank = rank,
		.quiet = rank != 0,
		.on_step = s_on_step,
		.on_step_ctx = &ctx,
		.report_params = true,
	};
	int rc = train_run(&spec, &opt);
	comm_free(comm);
	jobspec_free(&spec);
	fclose(rec);
	fclose(log);
	fclose(out);
	return rc;
}

static float *s_read_floats(const char *path, size_t *ret_n)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	float *buf = malloc(n > 0 ? (size_t)n : 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		fclose(f);
		return NULL;
	}
	fclose(f);
	*ret_n = (size_t)n / sizeof(float);
	return buf;
}

static void s_run(const run_cfg_t *cfg, const char *tag, run_result_t *res)
{
	memset(res, 0, sizeof *res);
	char kv_dir[4200];
	snprintf(kv_dir, sizeof kv_dir, "%s/kv-%s", s_dir, tag);
	if (mkdir(kv_dir, 0700) < 0) {
		perror(kv_dir);
		exit(2);
	}
	pid_t pids[MAX_RANKS];
	for (int r = 0; r < cfg->W; r++) {
		pids[r] = fork();
		if (pids[r] < 0) {
			perror("fork");
			exit(2);
		}
		if (pids[r] == 0)
			_exit(s_rank_main(cfg, r, tag, kv_dir));
	}
	for (int r = 0; r < cfg->W; r++) {
		int status;
		waitpid(pids[r], &status, 0);
		res->rc[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		char path[4200];
		s_path(path, sizeof path, tag, r, "rec");
		FILE *f = fopen(path, "r");
		if (f) {
			res->n_steps[r] = (int)fread(res->steps[r], sizeof(step_rec_t), STEPS, f);
			fclose(f);
		}
		s_path(path, sizeof path, tag, r, "params");
		size_t n = 0;
		res->params[r] = s_read_floats(path, &n);
		if (r == 0)
			res->n_params = n;
		if (res->rc[r] != RM_EXIT_OK) {
			s_path(path, sizeof path, tag, r, "log");
			fprintf(stderr, "%s: rank %d exited with %d; its log (%s):\n", tag, r, res->rc[r], path);
			char cmd[4300];
			snprintf(cmd, sizeof cmd, "cat '%s' >&2", path);
			if (system(cmd) != 0)
				fprintf(stderr, "(cannot show it)\n");
		}
	}
}

static void s_free(run_result_t *res)
{
	for (int r = 0; r < MAX_RANKS; r++)
		free(res->params[r]);
}

static bool s_same_bits(const step_rec_t *a, const step_rec_t *b)
{
	return memcmp(&a->loss, &b->loss, sizeof a->loss) == 0 &&
	       memcmp(&a->grad_norm, &b->grad_norm, sizeof a->grad_norm) == 0 &&
	       memcmp(&a->val_loss, &b->val_loss, sizeof a->val_loss) == 0;
}

static double s_rel(double a, double b)
{
	return fabs(a - b) / fmax(fabs(b), 1e-30);
}

/* tp_probe's answer: how many GPUs this process sees (their CUDA_VISIBLE_DEVICES
 * entries into s_visible), or 0 with the reason in `why`. */
static int s_probe(char *why, size_t n)
{
	int count = tp_probe(why, n);
	/* rank r sees the r-th GPU of this process's own list */
	const char *list = getenv("CUDA_VISIBLE_DEVICES");
	for (int r = 0; r < count && r < MAX_RANKS; r++) {
		if (!list) {
			snprintf(s_visible[r], sizeof s_visible[r], "%d", r);
			continue;
		}
		const char *p = list;
		for (int k = 0; k < r && p; k++) {
			p = strchr(p, ',');
			if (p)
				p++;
		}
		size_t len = p ? strcspn(p, ",") : 0;
		snprintf(s_visible[r], sizeof s_visible[r], "%.*s", (int)len, p ? p : "");
	}
	return count;
}

/* Run b (zero1 or zero2, `mode`) against a (unsharded, the same world):
 * both within ZERO1_REL_TOL or ZERO2_REL_TOL at every step, b's ranks the same bits and
 * parameters, and b's memory figures those of a shard of S = ceil(N / W)
 * slots. */
static void s_check_sharded(const run_result_t *a, const run_result_t *b, int W, const char *what,
			    const char *mode)
{
	const bool zero1 = strcmp(mode, "zero1") == 0, zero3 = strcmp(mode, "zero3") == 0;
	double worst = 0;
	for (int r = 0; r < W; r++) {
		CHECK(b->rc[r] == RM_EXIT_OK && b->n_steps[r] == STEPS);
		CHECK(b->params[r] && b->n_params == a->n_params);
		if (r > 0 && b->params[0] && b->params[r])
			CHECK(memcmp(b->params[0], b->params[r], b->n_params * sizeof(float)) == 0);
	}
	for (int s = 0; s < STEPS && s < a->n_steps[0] && s < b->n_steps[0]; s++) {
		const step_rec_t *x = &a->steps[0][s], *y = &b->steps[0][s];
		for (int r = 1; r < W && s < b->n_steps[r]; r++)
			CHECK(s_same_bits(y, &b->steps[r][s]));
		double e = fmax(s_rel(y->loss, x->loss), s_rel(y->grad_norm, x->grad_norm));
		if (!isnan(x->val_loss))
			e = fmax(e, s_rel(y->val_loss, x->val_loss));
		worst = fmax(worst, e);
		if (e > (zero1 ? ZERO1_REL_TOL : ZERO2_REL_TOL)) {
			fprintf(stderr, "step %d: %s %s loss %.9g norm %.9g val %.9g, none %.9g %.9g %.9g\n",
				s + 1, what, mode, y->loss, y->grad_norm, y->val_loss, x->loss, x->grad_norm,
				x->val_loss);
			s_failures++;
		}
		size_t n = y->n_params, S = (n + (size_t)W - 1) / (size_t)W;
		/* zero3: the master shard and two gather slots, no replica (which
		 * at world 1, the shard being all of it, is no saving) */
		CHECK(n > 0 && (zero3 ? y->params_bytes >= 4 * S && (W == 1 || y->params_bytes < 6 * n)
				      : y->params_bytes >= 6 * n && y->params_bytes < 6 * n + 256));
		CHECK(y->optim_bytes == 8 * S);
		CHECK(zero1 ? y->grads_bytes == 4 * n + 4 * S : y->grads_bytes > 4 * S);
	}
	size_t differ = 0;
	for (size_t i = 0; a->params[0] && b->params[0] && i < a->n_params && i < b->n_params; i++)
		differ += memcmp(&a->params[0][i], &b->params[0][i], sizeof(float)) != 0;
	printf("gpu-ddp: %s %s against unsharded: largest relative difference %.2e;"
	       " %zu of %zu final parameters differ in their bits\n",
	       what, mode, worst, differ, a->n_params);
}

/* zero1, zero2 and zero3 at world W x batch B, each checked against `plain`,
 * the unsharded run of the same global batch. */
static void s_run_sharded(const run_result_t *plain, int W, int B)
{
	static const char *const modes[] = {"zero1", "zero2", "zero3"};
	for (int i = 0; i < 3; i++) {
		run_cfg_t cfg = {.W = W, .B = B, .use_comm = true, .sharding = modes[i]};
		run_result_t z;
		char tag[32], what[32];
		snprintf(tag, sizeof tag, "%s-w%d", modes[i], W);
		snprintf(what, sizeof what, "NCCL world %d", W);
		s_run(&cfg, tag, &z);
		s_check_sharded(plain, &z, W, what, modes[i]);
		s_free(&z);
	}
}

/*
 * zero1's overlap, on train_cuda itself at NCCL world 1 (the shard is the
 * whole buffer), in a child: a backward not given the comm starts nothing
 * (comm_wait, then the shard's gradients are still zero); the synchronous
 * reduce-scatter then fills the shard (sum of squares `ref`); a backward
 * at half the scale given the comm has started the reduce-scatter itself,
 * so comm_wait alone leaves the shard at a quarter of `ref` (halving is
 * exact); train_cuda_reduce_scatter then only waits and changes nothing.
 */
static int s_overlap_main(const char *kv_dir)
{
	if (s_visible[0][0])
		setenv("CUDA_VISIBLE_DEVICES", s_visible[0], 1);
	enum { B = 2, T = 32 };
	const gpt2_config_t cfg = {.n_layer = 2, .n_head = 4, .n_embd = 64, .vocab_size = 256,
				   .seq_len = T};
	char err[512];
	gpt2_t *host = gpt2_create(&cfg, B, T, GPT2_PRECISION_BF16, err, sizeof err);
	if (!host) {
		fprintf(stderr, "overlap: %s\n", err);
		return 1;
	}
	gpt2_init_params(host, 1234);
	size_t n = gpt2_num_params(host);
	comm_kv_t kv = comm_kv_dir_make(kv_dir);
	comm_t *comm = comm_nccl_new(&kv, 0, 1, 0, 60000, err, sizeof err);
	if (!comm) {
		fprintf(stderr, "overlap: %s\n", err);
		return 1;
	}
	const size_t counts[1] = {n};
	const train_cuda_shard_t shard = {.lo = 0, .len = n, .count = n, .counts = counts};
	int code = 0;
	train_cuda_t *g = train_cuda_new("gpt2", &cfg, B, T, 1, &shard, NULL, &code, err, sizeof err);
	float *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
	if (!g || !m || !v) {
		fprintf(stderr, "overlap: %s\n", g ? "out of memory" : err);
		return 1;
	}
	train_cuda_upload(g, gpt2_params(host), m, v);
	int32_t in[B * T], tg[B * T];
	for (int i = 0; i < B * T; i++) {
		in[i] = (i * 37 + 11) % 256;
		tg[i] = (i * 53 + 7) % 256;
	}

	train_cuda_zero_grad(g);
	train_cuda_forward(g, in, tg, B, T);
	train_cuda_backward(g, 1.0f, NULL);
	CHECK(comm_wait(comm) == 0);
	CHECK(train_cuda_shard_sum_squares(g) == 0.0);
	CHECK(train_cuda_reduce_scatter(g, comm) == 0);
	const double ref = train_cuda_shard_sum_squares(g);
	CHECK(ref > 0);

	train_cuda_zero_grad(g);
	train_cuda_forward(g, in, tg, B, T);
	train_cuda_backward(g, 0.5f, comm);
	CHECK(comm_wait(comm) == 0);
	const double started = train_cuda_shard_sum_squares(g);
	CHECK(fabs(started - 0.25 * ref) <= 1e-6 * ref);
	CHECK(train_cuda_reduce_scatter(g, comm) == 0);
	CHECK(train_cuda_shard_sum_squares(g) == started);
	printf("gpu-ddp: zero1 at NCCL world 1: after a backward at half the scale given the comm,"
	       " comm_wait alone leaves the shard's sum of squares at %.9g of a quarter of the"
	       " synchronous reduce-scatter's (1: backward started the reduce-scatter)\n",
	       started / (0.25 * ref));
	fflush(stdout); /* the child ends with _exit */
	train_cuda_free(g);
	comm_free(comm);
	gpt2_free(host);
	free(m);
	free(v);
	return s_failures ? 1 : 0;
}

/* s_overlap_main in its own process (CUDA must not start in the parent). */
static void s_run_overlap(void)
{
	char kv_dir[4200];
	snprintf(kv_dir, sizeof kv_dir, "%s/kv-overlap", s_dir);
	if (mkdir(kv_dir, 0700) < 0) {
		perror(kv_dir);
		exit(2);
	}
	fflush(stdout); /* or the child would print the parent's buffer again */
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		exit(2);
	}
	if (pid == 0)
		_exit(s_overlap_main(kv_dir));
	int status;
	waitpid(pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "FAIL: the zero1 overlap check (status %d)\n", status);
		s_failures++;
	}
}

int main(void)
{
	char why[600];
	int n_gpus = s_probe(why, sizeof why);
	if (n_gpus < 1) {
		printf("gpu-ddp: no CUDA GPU: %s; skipping\n", why);
		return SKIP;
	}
	if (!mkdtemp(s_dir)) {
		perror("mkdtemp");
		return 2;
	}
	char path[4200];
	snprintf(path, sizeof path, "%s/train.txt", s_dir);
	s_write_text(path, 1, 40000);
	snprintf(path, sizeof path, "%s/val.txt", s_dir);
	s_write_text(path, 2, 4000);

	run_cfg_t alone_cfg = {.W = 1, .B = 4, .use_comm = false};
	run_cfg_t w1_cfg = {.W = 1, .B = 4, .use_comm = true};
	run_result_t alone, w1;
	s_run(&alone_cfg, "alone", &alone);
	s_run(&w1_cfg, "nccl-w1", &w1);
	CHECK(alone.rc[0] == RM_EXIT_OK && w1.rc[0] == RM_EXIT_OK);
	CHECK(alone.n_steps[0] == STEPS && w1.n_steps[0] == STEPS);
	for (int s = 0; s < STEPS && s < alone.n_steps[0] && s < w1.n_steps[0]; s++) {
		const step_rec_t *a = &alone.steps[0][s], *b = &w1.steps[0][s];
		if (!s_same_bits(a, b)) {
			fprintf(stderr, "step %d: alone loss %.9g norm %.9g val %.9g, NCCL world 1 %.9g %.9g %.9g\n",
				s + 1, a->loss, a->grad_norm, a->val_loss, b->loss, b->grad_norm, b->val_loss);
			s_failures++;
		}
		size_t n = a->n_params;
		CHECK(n > 0 && a->params_bytes >= 6 * n && a->params_bytes < 6 * n + 256);
		CHECK(a->grads_bytes == 4 * n && a->optim_bytes == 8 * n && a->activations_bytes > 0);
	}
	CHECK(alone.steps[0][0].loss - alone.steps[0][STEPS - 1].loss > 0.1);
	CHECK(alone.params[0] && w1.params[0] && alone.n_params == w1.n_params &&
	      memcmp(alone.params[0], w1.params[0], alone.n_params * sizeof(float)) == 0);
	printf("gpu-ddp: NCCL world 1 gives the bits of one process over %d steps\n", STEPS);

	s_run_sharded(&alone, 1, 4);
	s_run_overlap();

	if (n_gpus < 2) {
		printf("gpu-ddp: 1 GPU visible: world 2 not run (NCCL needs a GPU per rank)\n");
	} else {
		run_cfg_t w2_cfg = {.W = 2, .B = 2, .use_comm = true};
		run_result_t w2;
		s_run(&w2_cfg, "nccl-w2", &w2);
		CHECK(w2.rc[0] == RM_EXIT_OK && w2.rc[1] == RM_EXIT_OK);
		CHECK(w2.n_steps[0] == STEPS && w2.n_steps[1] == STEPS);
		double worst_loss = 0, worst_norm = 0;
		for (int s = 0; s < STEPS && s < w2.n_steps[0] && s < w2.n_steps[1]; s++) {
			const step_rec_t *a = &w2.steps[0][s], *b = &w2.steps[1][s], *ref = &alone.steps[0][s];
			CHECK(s_same_bits(a, b));
			double el = s_rel(a->loss, ref->loss), en = s_rel(a->grad_norm, ref->grad_norm);
			if (!isnan(ref->val_loss))
				el = fmax(el, s_rel(a->val_loss, ref->val_loss));
			worst_loss = fmax(worst_loss, el);
			worst_norm = fmax(worst_norm, en);
			if (el > LOSS_REL_TOL || en > NORM_REL_TOL) {
				fprintf(stderr, "step %d: world 2 loss %.9g norm %.9g val %.9g, world 1 %.9g %.9g %.9g\n",
					s + 1, a->loss, a->grad_norm, a->val_loss, ref->loss, ref->grad_norm,
					ref->val_loss);
				s_failures++;
			}
		}
		CHECK(w2.params[0] && w2.params[1] && w2.n_params == alone.n_params &&
		      memcmp(w2.params[0], w2.params[1], w2.n_params * sizeof(float)) == 0);
		printf("gpu-ddp: NCCL world 2 against world 1: largest relative difference %.2e (loss),"
		       " %.2e (grad norm)\n", worst_loss, worst_norm);
		s_run_sharded(&w2, 2, 2);
		s_free(&w2);
	}
	s_free(&alone);
	s_free(&w1);
	char cmd[4300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
	if (s_failures == 0 && system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", s_dir);
	printf("%s\n", s_failures ? "FAILED" : "ok");
	return s_failures ? 1 : 0;
}
