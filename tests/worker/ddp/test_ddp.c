/*
 * test_ddp: data-parallel training (worker/train.c with a Gloo comm) checked
 * against one process. Each run forks W ranks that meet through a
 * file-system KV (worker/comm/comm_kv_dir.c) and call train_run on a tiny
 * GPT-2 (2 layers, 2 heads, 32 channels, bytes, seq_len 32) over text the
 * test writes; every rank records what on_step reports.
 *
 *   test_ddp equivalence   the same global batch of 8 as world 1 x batch 8
 *                          (with comm NULL and with a 1-rank comm), world 2 x
 *                          4 and world 4 x 2; and world 2 x 2 x 2 micro-steps
 *                          against one process with 4 x 2 micro-steps (the
 *                          validation set is eval_batches x batch_size x
 *                          world_size rows, so it follows the micro-batch):
 *                          per-step loss, grad norm and validation loss agree
 *                          with one process within DDP_REL_TOL (relative);
 *                          a 1-rank comm and comm NULL agree bit for bit;
 *                          world 2 run twice agrees bit for bit; every rank
 *                          of a run reports the same bits; quiet ranks print
 *                          nothing.
 *   test_ddp errors        parallel.world_size unlike the group's size
 *                          (RM_EXIT_SPEC, message names the field);
 *                          on_step asking to stop (RM_EXIT_ABORTED on
 *                          every rank); a rank dying after step 2 (the other
 *                          returns RM_EXIT_COMM with one line naming the
 *                          gradient all-reduce, long before the timeout).
 *   test_ddp zero W        (W = 2, 3 or 4; global batch 8, or 6 at W 3;
 *                          8 layers, so that one layer is an eighth of the
 *                          model) parallel.sharding zero1, zero2 and zero3
 *                          against none at the same world size and global
 *                          batch: per-step loss, grad norm and validation
 *                          loss within ZERO_REL_TOL (relative), final
 *                          parameters within ZERO_PARAM_TOL (largest
 *                          absolute difference over the largest absolute
 *                          parameter); every rank ends with the same
 *                          parameter bits; each mode run twice agrees bit for
 *                          bit. Memory from the trainer's own accounting:
 *                          AdamW state per rank is 1/W of none's (up to the
 *                          padding) in every mode; zero2 and zero3 hold
 *                          gradients of 1/W of the model plus three
 *                          layer-sized buffers (two buckets and the
 *                          reduce-scatter's output); zero3 holds parameters
 *                          of 1/W plus two layer-sized gather slots. At W = 3
 *                          the parameter count is not a multiple of 3 (so
 *                          the last shard is padded). W = 2 also checks that
 *                          a rank dying under zero1 and under zero3 makes the
 *                          other fail (RM_EXIT_COMM) naming the collective.
 *
 *   test_ddp profile       a job spec's profile (steps 3 to 6) with on_trace
 *                          set, under sharding none and zero2 at W = 2 with
 *                          2 micro-steps, and alone with 20 micro-steps:
 *                          every step's loss, grad norm, validation loss and
 *                          the final parameters are the bits of the same run
 *                          without profile; on_trace comes on every rank for
 *                          exactly steps 3..6, in order, each with the
 *                          phases of a step (zero_grad, data/forward/backward
 *                          per micro-step, grad_reduce, clip, optimizer,
 *                          param_gather under zero2, eval at step 4) in start
 *                          order, inside the step, never overlapping, the
 *                          busy ones lasting > 0; consecutive steps start
 *                          after the previous one's end on the wall clock;
 *                          past 17 micro-steps the micro-batch phases merge
 *                          into one "micro_batches" event and the events
 *                          stay within TRACE_MAX_EVENTS.
 *
 * The tolerance is what float sums in a different order give over 8 steps;
 * docs/training.md states it. The largest difference seen is printed.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "jobspec.h"
#include "comm_kv_dir.h"
#include "train.h"

#define DDP_REL_TOL 1e-5
#define ZERO_REL_TOL 1e-5
#define ZERO_PARAM_TOL 1e-5
#define MAX_RANKS 4
#define MAX_STEPS 16
#define STEPS 8

static int s_failures;

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			s_failures++;                                                \
		}                                                                    \
	} while (0)

/* What on_step saw at one step. */
typedef struct {
	double loss, grad_norm, val_loss, lr;
	uint64_t params_bytes, grads_bytes, optim_bytes, n_params, n_params_padded;
} step_rec_t;

typedef struct {
	int W, B, A;
	bool use_comm;         /* false: comm NULL (W must be 1) */
	int spec_world;        /* parallel.world_size in the spec; 0: W */
	int stop_at_step;      /* on_step returns 1 here; 0: never */
	int die_rank, die_step; /* this rank _exits in on_step at this step; die_step 0: never */
	const char *sharding;  /* parallel.sharding; NULL: the default (none) */
	int n_layer;           /* 0: 2 */
	bool llama;            /* a Llama of the same size (GQA 2:1, SwiGLU 64) instead of GPT-2 */
	int profile_lo, profile_hi; /* the spec's profile and on_trace set; 0: none */
} run_cfg_t;

typedef struct {
	int rc[MAX_RANKS];
	int n_steps[MAX_RANKS];
	step_rec_t steps[MAX_RANKS][MAX_STEPS];
	char out_path[MAX_RANKS][4200];
	char log_path[MAX_RANKS][4200];
	double seconds;
	float *params; /* (n_params) rank 0's parameters after the last step, or NULL; malloc'ed */
	size_t n_params;
	bool params_same; /* every rank's final parameters equal rank 0's bit for bit */
} run_result_t;

static char s_dir[] = "/tmp/test-ddp.XXXXXX";

static double s_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Deterministic English-ish bytes, enough for a few hundred windows. */
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
		const char *w = words[(x >> 33) % (sizeof words / sizeof words[0])];
		written += (size_t)fprintf(f, "%s ", w);
	}
	fclose(f);
}

static int s_load_spec(const run_cfg_t *cfg, jobspec_t *spec)
{
	char json[2048];
	snprintf(json, sizeof json,
		 "{\"name\":\"ddp-test\","
		 "\"model\":{\"n_layer\":%d,\"n_head\":2,\"n_embd\":32,\"vocab_size\":256,\"seq_len\":32%s},"
		 "\"data\":{\"train\":\"train.txt\",\"val\":\"val.txt\",\"format\":\"text\"},"
		 "\"train\":{\"steps\":%d,\"batch_size\":%d,\"grad_accum\":%d,\"lr\":0.003,"
		 "\"warmup_steps\":2,\"lr_schedule\":\"cosine\",\"min_lr\":0.0003,\"weight_decay\":0.1,"
		 "\"grad_clip\":0.5,\"seed\":7,\"eval_every\":4,\"eval_batches\":2},"
		 "\"parallel\":{\"world_size\":%d,\"sharding\":\"%s\"}%s}",
		 cfg->n_layer ? cfg->n_layer : 2,
		 cfg->llama ? ",\"arch\":\"llama\",\"n_kv_head\":1,\"ffn_dim\":64,\"rope_theta\":10000" : "", STEPS, cfg->B, cfg->A, cfg->spec_world ? cfg->spec_world : cfg->W,
		 cfg->sharding ? cfg->sharding : "none", "");
	if (cfg->profile_lo) {
		size_t n = strlen(json) - 1; /* over the closing brace */
		snprintf(json + n, sizeof json - n, ",\"profile\":{\"start_step\":%d,\"end_step\":%d}}",
			 cfg->profile_lo, cfg->profile_hi);
	}
	jobspec_error_t err;
	if (jobspec_parse(json, strlen(json), spec, &err) < 0) {
		fprintf(stderr, "spec: %s: %s\n", err.pointer, err.message);
		return -1;
	}
	return 0;
}

typedef struct {
	const run_cfg_t *cfg;
	int rank;
	FILE *rec;
	const char *params_path; /* the final parameters go here */
	FILE *trace;             /* on_trace's steps, one line each */
} step_ctx_t;

/* One line per traced step: "step start_unix_us dur_us n name ts dur ...". */
static void s_on_trace(void *ctx, const trace_step_t *t)
{
	step_ctx_t *c = ctx;
	fprintf(c->trace, "%lld %lld %.3f %d", (long long)t->step, (long long)t->start_unix_us, t->dur_us,
		t->n_events);
	for (int i = 0; i < t->n_events; i++)
		fprintf(c->trace, " %s %.3f %.3f", t->events[i].name, t->events[i].ts_us, t->events[i].dur_us);
	fputc('\n', c->trace);
	fflush(c->trace);
}

static int s_on_step(void *ctx, const train_report_t *r)
{
	step_ctx_t *c = ctx;
	step_rec_t rec = {r->loss, r->grad_norm, r->val_loss, r->lr, r->params_bytes, r->grads_bytes,
			  r->optim_bytes, r->n_params, r->n_params_padded};
	fwrite(&rec, sizeof rec, 1, c->rec);
	fflush(c->rec);
	if (r->step == STEPS) {
		FILE *f = fopen(c->params_path, "w");
		if (f) {
			fwrite(r->params, sizeof(float), r->n_params, f);
			fclose(f);
		}
	}
	if (c->cfg->die_step && r->step == c->cfg->die_step && c->rank == c->cfg->die_rank)
		_exit(99);
	return c->cfg->stop_at_step && r->step == c->cfg->stop_at_step;
}

static void s_params_path(int rank, const char *tag, char *path, size_t n)
{
	snprintf(path, n, "%s/%s-rank%d.params", s_dir, tag, rank);
}

static void s_paths(int rank, const char *tag, char *rec, char *out, char *log, size_t n)
{
	snprintf(rec, n, "%s/%s-rank%d.rec", s_dir, tag, rank);
	snprintf(out, n, "%s/%s-rank%d.out", s_dir, tag, rank);
	snprintf(log, n, "%s/%s-rank%d.log", s_dir, tag, rank);
}

static int s_rank_main(const run_cfg_t *cfg, int rank, const char *tag, const char *kv_dir)
{
	char rec_path[4200], out_path[4200], log_path[4200];
	s_paths(rank, tag, rec_path, out_path, log_path, sizeof rec_path);
	FILE *rec = fopen(rec_path, "w"), *out = fopen(out_path, "w"), *log = fopen(log_path, "w");
	if (!rec || !out || !log)
		return 100;
	jobspec_t spec = {0};
	if (s_load_spec(cfg, &spec) < 0)
		return 101;
	comm_t *comm = NULL;
	if (cfg->use_comm) {
		comm_kv_t kv = comm_kv_dir_make(kv_dir);
		char err[512];
		comm = comm_gloo_new(&kv, rank, cfg->W, "127.0.0.1", 20000, err, sizeof err);
		if (!comm) {
			fprintf(log, "%s\n", err);
			fclose(log);
			return 102;
		}
	}
	char params_path[4200], trace_path[4200];
	s_params_path(rank, tag, params_path, sizeof params_path);
	snprintf(trace_path, sizeof trace_path, "%s/%s-rank%d.trace", s_dir, tag, rank);
	step_ctx_t ctx = {cfg, rank, rec, params_path, NULL};
	if (cfg->profile_lo && !(ctx.trace = fopen(trace_path, "w")))
		return 103;
	train_options_t opt = {
		.data_root = s_dir,
		.out = out,
		.log = log,
		.spec_name = "test_ddp",
		.comm = comm,
		.rank = rank,
		.quiet = rank != 0,
		.on_step = s_on_step,
		.on_step_ctx = &ctx,
		.report_params = true,
		.on_trace = cfg->profile_lo ? s_on_trace : NULL,
		.on_trace_ctx = &ctx,
	};
	int rc = train_run(&spec, &opt);
	if (ctx.trace)
		fclose(ctx.trace);
	comm_free(comm);
	jobspec_free(&spec);
	fclose(rec);
	fclose(out);
	fclose(log);
	return rc;
}

/* A whole file, malloc'ed, into *ret_buf / *ret_n; 0 or -1. */
static int s_read_file(const char *path, char **ret_buf, size_t *ret_n)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc(n > 0 ? (size_t)n : 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	*ret_buf = buf;
	*ret_n = (size_t)n;
	return 0;
}

/* Rank 0's final parameters into res->params, and whether the other ranks'
 * are the same bits. */
static void s_read_params(const run_cfg_t *cfg, const char *tag, run_result_t *res)
{
	char path[4200];
	char *buf0 = NULL;
	size_t n0 = 0;
	s_params_path(0, tag, path, sizeof path);
	if (s_read_file(path, &buf0, &n0) < 0)
		return;
	res->params = (float *)(void *)buf0;
	res->n_params = n0 / sizeof(float);
	res->params_same = true;
	for (int r = 1; r < cfg->W; r++) {
		char *buf = NULL;
		size_t n = 0;
		s_params_path(r, tag, path, sizeof path);
		if (s_read_file(path, &buf, &n) < 0 || n != n0 || memcmp(buf, buf0, n0) != 0)
			res->params_same = false;
		free(buf);
	}
}

/* Fork cfg->W ranks (one process without comm), wait for them, read back
 * what each recorded. */
static void s_run(const run_cfg_t *cfg, const char *tag, run_result_t *res)
{
	free(res->params);
	memset(res, 0, sizeof *res);
	char kv_dir[4200];
	snprintf(kv_dir, sizeof kv_dir, "%s/kv-%s", s_dir, tag);
	if (mkdir(kv_dir, 0700) < 0) {
		perror(kv_dir);
		exit(2);
	}
	double t0 = s_now_s();
	pid_t pids[MAX_RANKS];
	for (int r = 0; r < cfg->W; r++) {
		pids[r] = fork();
		if (pids[r] < 0) {
			perror("fork");
			exit(2);
		}
		if (pids[r] == 0) {
			alarm(60);
			/* exit, not _exit: the leak checker of a sanitized build runs then. */
			exit(s_rank_main(cfg, r, tag, kv_dir));
		}
	}
	for (int r = 0; r < cfg->W; r++) {
		int status;
		if (waitpid(pids[r], &status, 0) < 0)
			res->rc[r] = -1;
		else
			res->rc[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	}
	res->seconds = s_now_s() - t0;
	for (int r = 0; r < cfg->W; r++) {
		char rec_path[4200];
		s_paths(r, tag, rec_path, res->out_path[r], res->log_path[r], sizeof rec_path);
		FILE *f = fopen(rec_path, "r");
		if (f) {
			res->n_steps[r] = (int)fread(res->steps[r], sizeof(step_rec_t), MAX_STEPS, f);
			fclose(f);
		}
	}
	s_read_params(cfg, tag, res);
}

static long s_file_size(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fclose(f);
	return n;
}

static bool s_file_has(const char *path, const char *needle)
{
	char buf[8192];
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	return strstr(buf, needle) != NULL;
}

static void s_dump_log(const run_result_t *res, int rank)
{
	char buf[4096];
	FILE *f = fopen(res->log_path[rank], "r");
	if (!f)
		return;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	if (n)
		fprintf(stderr, "rank %d log: %s", rank, buf);
}

/* A clean run of STEPS steps where every rank reported the same bits. */
static void s_check_clean(const run_cfg_t *cfg, const run_result_t *res, const char *tag)
{
	for (int r = 0; r < cfg->W; r++) {
		if (res->rc[r] != RM_EXIT_OK) {
			fprintf(stderr, "%s: rank %d exited %d\n", tag, r, res->rc[r]);
			s_dump_log(res, r);
			s_failures++;
		}
		CHECK(res->n_steps[r] == STEPS);
		CHECK(memcmp(res->steps[r], res->steps[0], sizeof res->steps[0]) == 0);
		if (r > 0) /* quiet */
			CHECK(s_file_size(res->out_path[r]) == 0);
	}
	CHECK(s_file_size(res->out_path[0]) > 0);
	fprintf(stderr, "%-12s W=%d B=%d A=%d: %.2f s, losses", tag, cfg->W, cfg->B, cfg->A, res->seconds);
	for (int s = 0; s < res->n_steps[0]; s++)
		fprintf(stderr, " %.6f", res->steps[0][s].loss);
	fputc('\n', stderr);
}

static double s_rel(double a, double b)
{
	if (a == b)
		return 0;
	return fabs(a - b) / fmax(fabs(a), fabs(b));
}

/* Largest relative difference of loss, grad norm and validation loss. */
static double s_compare(const run_result_t *a, const run_result_t *b)
{
	double worst = 0;
	for (int s = 0; s < STEPS; s++) {
		const step_rec_t *x = &a->steps[0][s], *y = &b->steps[0][s];
		worst = fmax(worst, s_rel(x->loss, y->loss));
		worst = fmax(worst, s_rel(x->grad_norm, y->grad_norm));
		CHECK(isnan(x->val_loss) == isnan(y->val_loss));
		if (!isnan(x->val_loss) && !isnan(y->val_loss))
			worst = fmax(worst, s_rel(x->val_loss, y->val_loss));
		CHECK(x->lr == y->lr);
	}
	return worst;
}

static void s_equivalence(void)
{
	static run_result_t single, single_a2, one, w2, w2_again, w4, w2a2;
	run_cfg_t c_single = {.W = 1, .B = 8, .A = 1, .use_comm = false};
	run_cfg_t c_one = {.W = 1, .B = 8, .A = 1, .use_comm = true};
	run_cfg_t c_w2 = {.W = 2, .B = 4, .A = 1, .use_comm = true};
	run_cfg_t c_w4 = {.W = 4, .B = 2, .A = 1, .use_comm = true};
	run_cfg_t c_single_a2 = {.W = 1, .B = 4, .A = 2, .use_comm = false};
	run_cfg_t c_w2a2 = {.W = 2, .B = 2, .A = 2, .use_comm = true};
	s_run(&c_single, "single", &single);
	s_check_clean(&c_single, &single, "single");
	s_run(&c_one, "comm1", &one);
	s_check_clean(&c_one, &one, "comm1");
	s_run(&c_w2, "w2", &w2);
	s_check_clean(&c_w2, &w2, "w2");
	s_run(&c_w2, "w2-again", &w2_again);
	s_check_clean(&c_w2, &w2_again, "w2-again");
	s_run(&c_w4, "w4", &w4);
	s_check_clean(&c_w4, &w4, "w4");
	s_run(&c_single_a2, "single-a2", &single_a2);
	s_check_clean(&c_single_a2, &single_a2, "single-a2");
	s_run(&c_w2a2, "w2a2", &w2a2);
	s_check_clean(&c_w2a2, &w2a2, "w2a2");

	/* Validation ran at steps 4 and 8. */
	CHECK(!isnan(single.steps[0][3].val_loss) && !isnan(single.steps[0][7].val_loss));
	CHECK(isnan(single.steps[0][0].val_loss));
	/* The loss fell: the runs train something. */
	CHECK(single.steps[0][STEPS - 1].loss < single.steps[0][0].loss);

	CHECK(memcmp(one.steps[0], single.steps[0], sizeof single.steps[0]) == 0);
	CHECK(memcmp(w2.steps[0], w2_again.steps[0], sizeof w2.steps[0]) == 0);
	CHECK(s_file_has(w2.out_path[0], "x 2 ranks"));

	double d2 = s_compare(&single, &w2), d4 = s_compare(&single, &w4),
	       d2a2 = s_compare(&single_a2, &w2a2);
	fprintf(stderr,
		"largest relative difference from one process (loss, grad norm, val loss over %d steps):"
		" world 2: %.3g, world 4: %.3g, world 2 x 2 micro-steps (against 1 x 2): %.3g"
		" (tolerance %.0e)\n",
		STEPS, d2, d4, d2a2, DDP_REL_TOL);
	CHECK(d2 <= DDP_REL_TOL);
	CHECK(d4 <= DDP_REL_TOL);
	CHECK(d2a2 <= DDP_REL_TOL);
}

/* Largest |a - b| over the largest |b|; 1 when the lengths differ. */
static double s_param_diff(const run_result_t *a, const run_result_t *b)
{
	if (!a->params || !b->params || a->n_params != b->n_params || a->n_params == 0)
		return 1;
	double worst = 0, scale = 0;
	for (size_t i = 0; i < a->n_params; i++) {
		worst = fmax(worst, fabs((double)a->params[i] - (double)b->params[i]));
		scale = fmax(scale, fabs((double)b->params[i]));
	}
	return worst / scale;
}

#define ZERO_LAYERS 8
#define ZERO_MODES 4

/* zero1, zero2 and zero3 against none at world size W (global batch 8 with
 * W 2 and 4, 6 with W 3: batch 2 per rank from W 3 on), GPT-2 or Llama. */
static void s_zero(int W, bool llama)
{
	static const char *modes[ZERO_MODES] = {"none", "zero1", "zero2", "zero3"};
	static run_result_t runs[ZERO_MODES], again;
	int B = W == 2 ? 4 : 2;
	run_cfg_t cfg[ZERO_MODES];
	for (int i = 0; i < ZERO_MODES; i++) {
		cfg[i] = (run_cfg_t){.W = W, .B = B, .A = 1, .use_comm = true, .sharding = modes[i],
				     .n_layer = ZERO_LAYERS, .llama = llama};
		s_run(&cfg[i], modes[i], &runs[i]);
		s_check_clean(&cfg[i], &runs[i], modes[i]);
		CHECK(runs[i].params != NULL);
		CHECK(runs[i].params_same);
		if (i == 0)
			continue;
		/* A rerun is the same bits: losses, norms and parameters. */
		char tag[64];
		snprintf(tag, sizeof tag, "%s-again", modes[i]);
		s_run(&cfg[i], tag, &again);
		s_check_clean(&cfg[i], &again, tag);
		CHECK(memcmp(runs[i].steps[0], again.steps[0], sizeof again.steps[0]) == 0);
		CHECK(s_param_diff(&runs[i], &again) == 0);
	}
	const run_result_t *none = &runs[0];
	CHECK(none->steps[0][STEPS - 1].loss < none->steps[0][0].loss);

	for (int i = 1; i < ZERO_MODES; i++) {
		double d = s_compare(none, &runs[i]), p = s_param_diff(&runs[i], none);
		fprintf(stderr,
			"world %d %s: largest relative difference from none (loss, grad norm, val loss"
			" over %d steps) %.3g (tolerance %.0e); final parameters, largest absolute"
			" difference over largest parameter %.3g (tolerance %.0e)\n",
			W, modes[i], STEPS, d, ZERO_REL_TOL, p, ZERO_PARAM_TOL);
		CHECK(d <= ZERO_REL_TOL);
		CHECK(p <= ZERO_PARAM_TOL);
	}

	/* Memory from the trainer's accounting. A layer of the test model is
	 * 12 C^2 + 13 C floats (GPT-2), or for the Llama q, o (C^2 each), k, v
	 * (C^2 / 2 each, one KV head of two), gate, up, down (64 C each) and two
	 * norms: the largest range the engine streams. */
	const step_rec_t *n = &none->steps[0][0];
	const uint64_t C = 32;
	const uint64_t layer = (llama ? 3 * C * C + 3 * 64 * C + 2 * C : 12 * C * C + 13 * C) * sizeof(float);
	const uint64_t S = n->n_params / (uint64_t)W + (n->n_params % (uint64_t)W != 0);
	const uint64_t full = n->n_params * sizeof(float), shard = S * sizeof(float);
	CHECK(n->optim_bytes == 2 * full);
	CHECK(n->params_bytes == full && n->grads_bytes == full);
	CHECK(n->n_params_padded == n->n_params);
	for (int i = 1; i < ZERO_MODES; i++) {
		const step_rec_t *z = &runs[i].steps[0][0];
		fprintf(stderr,
			"world %d %s: %" PRIu64 " params (padded %" PRIu64 "); bytes per rank, as a"
			" fraction of none's: params %.3f, grads %.3f, optimizer %.3f (1/W = %.3f, a layer"
			" %.3f)\n",
			W, modes[i], z->n_params, z->n_params_padded, (double)z->params_bytes / full,
			(double)z->grads_bytes / full, (double)z->optim_bytes / (2.0 * full), 1.0 / W,
			(double)layer / full);
		CHECK(z->n_params == n->n_params);
		CHECK(z->n_params_padded == S * (uint64_t)W);
		CHECK(z->n_params_padded >= z->n_params && z->n_params_padded < z->n_params + (uint64_t)W);
		CHECK(z->optim_bytes == 2 * shard);
		if (i == 1) { /* zero1: the full gradient, plus the reduced shard */
			CHECK(z->params_bytes == full);
			CHECK(z->grads_bytes == full + shard);
		} else { /* zero2, zero3: the shard, two buckets, the reduce-scatter's output */
			CHECK(z->grads_bytes == shard + 2 * layer + (shard < layer ? shard : layer));
		}
		if (i == 2)
			CHECK(z->params_bytes == full);
		if (i == 3) /* zero3: the shard and two gather slots */
			CHECK(z->params_bytes == shard + 2 * layer);
	}
	if (W == 3 && !llama) /* the last shard is padded */
		CHECK(n->n_params % 3 != 0);
	CHECK(s_file_has(runs[1].out_path[0], "parallel.sharding zero1: memory per rank: params "));
	CHECK(s_file_has(runs[3].out_path[0], "parallel.sharding zero3: memory per rank: params "));

	if (W == 2 && !llama) { /* the system's, not the model's: GPT-2 only */
		/* A rank dying: the other names the collective, long before the timeout. */
		static run_result_t res;
		static const struct {
			int mode;
			const char *message;
		} deaths[] = {
			{1, "ringworker: error: reduce-scatter of the gradients failed at step 3"},
			{3, "ringworker: error: ZeRO gathers and reduce-scatters failed at step 3"},
		};
		for (size_t k = 0; k < sizeof deaths / sizeof deaths[0]; k++) {
			run_cfg_t die = cfg[deaths[k].mode];
			die.die_rank = 1;
			die.die_step = 2;
			s_run(&die, deaths[k].mode == 1 ? "zero1-die" : "zero3-die", &res);
			CHECK(res.rc[1] == 99);
			CHECK(res.rc[0] == RM_EXIT_COMM);
			CHECK(res.n_steps[0] == 2);
			CHECK(s_file_has(res.log_path[0], deaths[k].message));
			CHECK(res.seconds < 15); /* the comm timeout is 20 s */
			if (res.rc[0] != RM_EXIT_COMM || !s_file_has(res.log_path[0], deaths[k].message))
				s_dump_log(&res, 0);
		}
	}
}

static void s_errors(void)
{
	static run_result_t res;

	run_cfg_t mismatch = {.W = 2, .B = 4, .A = 1, .use_comm = true, .spec_world = 4};
	s_run(&mismatch, "mismatch", &res);
	for (int r = 0; r < 2; r++) {
		if (res.rc[r] != RM_EXIT_SPEC)
			s_dump_log(&res, r);
		CHECK(res.rc[r] == RM_EXIT_SPEC);
		CHECK(s_file_has(res.log_path[r], "parallel.world_size is 4 but this rank's group has 2"));
	}

	run_cfg_t stop = {.W = 2, .B = 4, .A = 1, .use_comm = true, .stop_at_step = 2};
	s_run(&stop, "stop", &res);
	for (int r = 0; r < 2; r++) {
		CHECK(res.rc[r] == RM_EXIT_ABORTED);
		CHECK(res.n_steps[r] == 2);
		CHECK(s_file_size(res.log_path[r]) == 0);
	}

	run_cfg_t die = {.W = 2, .B = 4, .A = 1, .use_comm = true, .die_rank = 1, .die_step = 2};
	s_run(&die, "die", &res);
	CHECK(res.rc[1] == 99);
	CHECK(res.rc[0] == RM_EXIT_COMM);
	CHECK(res.n_steps[0] == 2);
	CHECK(s_file_has(res.log_path[0], "ringworker: error: all-reduce of the gradients failed at step 3"));
	CHECK(res.seconds < 15); /* the comm timeout is 20 s: the death was noticed */
	s_dump_log(&res, 0);
}

/* The trace file of one rank: every line checked, the steps it names
 * returned in *ret_steps (at most MAX_STEPS). */
static int s_check_trace_file(const run_cfg_t *cfg, const char *tag, int rank, int *ret_steps)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%s-rank%d.trace", s_dir, tag, rank);
	FILE *f = fopen(path, "r");
	CHECK(f != NULL);
	if (!f)
		return 0;
	char line[16384];
	int n_steps = 0;
	long long prev_end_us = 0;
	time_t now = time(NULL);
	while (fgets(line, sizeof line, f) && n_steps < MAX_STEPS) {
		long long step, start;
		double dur;
		int n, used;
		char *p = line;
		CHECK(sscanf(p, "%lld %lld %lf %d%n", &step, &start, &dur, &n, &used) == 4);
		p += used;
		ret_steps[n_steps++] = (int)step;
		CHECK(n >= 1 && n <= TRACE_MAX_EVENTS);
		CHECK(start / 1000000 > now - 3600 && start / 1000000 <= now + 1); /* the wall clock */
		CHECK(start >= prev_end_us);                                      /* after the step before */
		prev_end_us = start + (long long)dur;
		int n_micro = 0, n_merged = 0;
		bool seen[TRACE_N_PHASES] = {false};
		double end = 0;
		for (int i = 0; i < n; i++) {
			char name[64];
			double ts, d;
			CHECK(sscanf(p, " %63s %lf %lf%n", name, &ts, &d, &used) == 3);
			p += used;
			CHECK(ts >= end - 0.0015 && d >= 0 && ts + d <= dur + 0.0015); /* in order, inside the step */
			end = ts + d;
			int k;
			for (k = 0; k < TRACE_N_PHASES; k++)
				if (strcmp(name, trace_phase_name((trace_phase_t)k)) == 0)
					break;
			if (strcmp(name, TRACE_MERGED_NAME) == 0) {
				n_merged++;
				continue;
			}
			CHECK(k < TRACE_N_PHASES);
			if (k == TRACE_N_PHASES)
				continue;
			if (k == TRACE_DATA || k == TRACE_FORWARD || k == TRACE_BACKWARD)
				n_micro++;
			else
				CHECK(!seen[k]); /* one of each other phase */
			seen[k] = true;
			if (k == TRACE_FORWARD || k == TRACE_BACKWARD || k == TRACE_OPTIMIZER || k == TRACE_EVAL)
				CHECK(d > 0);
		}
		const bool many = 3 * cfg->A > TRACE_MAX_EVENTS - TRACE_N_PHASES;
		CHECK(many ? n_merged == 1 && n_micro == TRACE_MAX_EVENTS - TRACE_N_PHASES - 1
			   : n_merged == 0 && n_micro == 3 * cfg->A);
		CHECK(seen[TRACE_ZERO_GRAD] && seen[TRACE_DATA] && seen[TRACE_FORWARD] && seen[TRACE_BACKWARD] &&
		      seen[TRACE_CLIP] && seen[TRACE_OPTIMIZER]);
		CHECK(seen[TRACE_GRAD_REDUCE] == cfg->use_comm);
		CHECK(seen[TRACE_PARAM_GATHER] == (cfg->sharding && strcmp(cfg->sharding, "none") != 0));
		CHECK(seen[TRACE_EVAL] == (step % 4 == 0)); /* eval_every 4 */
		CHECK(!seen[TRACE_SNAPSHOT]);               /* no checkpoint_dir */
	}
	fclose(f);
	return n_steps;
}

static void s_profile(void)
{
	static run_result_t off, on;
	const run_cfg_t cfgs[] = {
		{.W = 2, .B = 2, .A = 2, .use_comm = true, .sharding = "none"},
		{.W = 2, .B = 2, .A = 2, .use_comm = true, .sharding = "zero2"},
		{.W = 1, .B = 1, .A = 20, .use_comm = false},
	};
	for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
		run_cfg_t cfg = cfgs[i];
		char tag[32];
		snprintf(tag, sizeof tag, "prof%zu-off", i);
		s_run(&cfg, tag, &off);
		s_check_clean(&cfg, &off, tag);
		cfg.profile_lo = 3;
		cfg.profile_hi = 6;
		snprintf(tag, sizeof tag, "prof%zu-on", i);
		s_run(&cfg, tag, &on);
		s_check_clean(&cfg, &on, tag);
		/* not one bit changed by tracing */
		for (int r = 0; r < cfg.W; r++)
			CHECK(memcmp(on.steps[r], off.steps[r], sizeof on.steps[r]) == 0);
		CHECK(on.params && off.params && on.n_params == off.n_params &&
		      memcmp(on.params, off.params, on.n_params * sizeof(float)) == 0);
		for (int r = 0; r < cfg.W; r++) {
			int steps[MAX_STEPS];
			int n = s_check_trace_file(&cfg, tag, r, steps);
			CHECK(n == 4 && steps[0] == 3 && steps[1] == 4 && steps[2] == 5 && steps[3] == 6);
		}
	}
	free(on.params);
	free(off.params);
}

int main(int argc, char **argv)
{
	const bool zero_llama = argc == 3 && strcmp(argv[1], "zero-llama") == 0;
	int zero_w = argc == 3 && (strcmp(argv[1], "zero") == 0 || zero_llama) ? atoi(argv[2]) : 0;
	if (!(argc == 2 && (!strcmp(argv[1], "equivalence") || !strcmp(argv[1], "errors") ||
			    !strcmp(argv[1], "profile"))) &&
	    !(zero_w >= 2 && zero_w <= MAX_RANKS)) {
		fprintf(stderr, "usage: test_ddp equivalence | errors | profile | zero 2|3|4 | zero-llama 2|3|4\n");
		return 2;
	}
	if (!mkdtemp(s_dir)) {
		perror("mkdtemp");
		return 2;
	}
	char path[4200];
	snprintf(path, sizeof path, "%s/train.txt", s_dir);
	s_write_text(path, 1, 60000);
	snprintf(path, sizeof path, "%s/val.txt", s_dir);
	s_write_text(path, 2, 8000);

	if (zero_w)
		s_zero(zero_w, zero_llama);
	else if (strcmp(argv[1], "equivalence") == 0)
		s_equivalence();
	else if (strcmp(argv[1], "profile") == 0)
		s_profile();
	else
		s_errors();

	char cmd[4300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", s_dir);
	fprintf(stderr, "test_ddp %s: %s\n", argv[1], s_failures ? "FAILED" : "ok");
	return s_failures ? 1 : 0;
}
