/*
 * test_tp: tensor parallelism (model.h's model_tp_t, engine/tp.h) against
 * the same model without it, through the registry (model_create).
 *
 *   test_tp ARCH T [MODE]   ARCH gpt2 | llama | llama-tied, T tensor-parallel
 *                           ranks, MODE dense (default) | zero2 | zero3: the
 *                           TP model's buffers held as MODEL_DENSE,
 *                           MODEL_STREAM_GRADS or MODEL_STREAM_ALL through a
 *                           stream of this test's (parameters from a local
 *                           copy, gradients accumulated into one); bf16:
 *                           dense, both models computing GEMMs in bf16
 *
 * Forks T ranks that meet over Gloo (worker/comm, a directory KV, as
 * tests/worker/comm/test_comm.c) with worker/tpcomm's adapter. Each rank
 * first runs the t = 1 model itself (init from a seed, two micro-batches of
 * forward and backward accumulating), then its TP part with the t = 1
 * parameters sliced by tp_segments (and checks that the TP model's own
 * init gives exactly that slice), runs the same two micro-batches and
 * compares: both losses, the second batch's logits on its vocabulary
 * block, and every gradient element of its part mapped back to the
 * logical tensor; padded vocabulary rows stay zero; replicated gradients
 * are bitwise equal on every TP rank (all-gathered and compared); the
 * communication counters match the per-step formula.
 *
 * Tolerance: fp32 with the same operations in another summation order
 * (row-parallel GEMMs sum t partial products through the reduce-scatter,
 * LayerNorm / bias / embedding gradients are summed per rank then
 * all-reduced, the loss's sum-exp is summed per vocabulary block). Such
 * reorderings move a result by a few ulps of the largest terms summed, so
 * the losses must agree to 1e-5 relative and each tensor's gradient (and
 * the logits) to 1e-4 of that tensor's largest magnitude (+1e-7 absolute):
 * about 100x the differences seen, and a slicing or layout error (a wrong
 * head, a missing all-reduce) is off by O(1) of that magnitude.
 *
 * GPT-2: 2 layers, 4 heads, C 32; Llama: 2 layers, 8 heads on 4 KV heads,
 * C 64, FFN 96, RoPE with Llama 3.1 scaling, untied or tied; B 2, T 8.
 * bf16 (GEMM inputs rounded to 8 significant bits, so a reordered fp32 sum
 * before the rounding can move an input by one bf16 ulp, 2^-8 relative):
 * losses within 2e-3 relative, logits and gradients within 5e-2 of each
 * tensor's largest magnitude; a layout error is still off by O(1).
 *
 * The vocabulary (1001) divides by neither 2 nor 4, so the padded rows are
 * exercised, and streamed it takes two blocks per rank. The parent never runs OpenMP before forking (libgomp's
 * thread pool does not survive fork).
 */
#include <errno.h>
#include <math.h>
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
#include "gpt2.h"
#include "llama.h"
#include "model.h"
#include "tp.h"
#include "tpcomm.h"

#define B 2
#define T 8
#define N (B * T)
#define SEED 7
/* divides by neither 2 nor 4 (padding), and a TP rank's rows exceed one
 * streamed block, so the streamed modes take two wte / LM head blocks */
#define VOCAB 1001

static int s_failures;
static int s_rank;
static const char *s_arch;
static int s_tp;
static model_streaming_t s_mode = MODEL_DENSE;
static bool s_bf16; /* mode bf16: both models in bf16, looser tolerances */

/* The test's side of streaming: the TP part's parameters and its
 * accumulated gradients, and one range's zeroed gradient buffer. */
typedef struct {
	float *params, *grads, *buf;
} strm_t;

static strm_t s_strm;

static const float *s_fetch(void *ctx, model_range_t r, model_range_t next)
{
	(void)next;
	return ((strm_t *)ctx)->params + r.lo;
}

static void s_release(void *ctx, const float *p)
{
	(void)ctx, (void)p;
}

static float *s_grad_begin(void *ctx, model_range_t r)
{
	strm_t *st = ctx;
	memset(st->buf, 0, (r.hi - r.lo) * sizeof(float));
	return st->buf;
}

static void s_grad_end(void *ctx, float *g, model_range_t r)
{
	strm_t *st = ctx;
	for (size_t i = 0; i < r.hi - r.lo; i++)
		st->grads[r.lo + i] += g[i];
}

static const model_stream_t s_stream = {&s_strm, s_fetch, s_release, s_grad_begin, s_grad_end};

#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		if (!(cond)) {                                                  \
			fprintf(stderr, "rank %d: FAIL: ", s_rank);             \
			fprintf(stderr, __VA_ARGS__);                           \
			fprintf(stderr, "\n");                                  \
			s_failures++;                                           \
		}                                                               \
	} while (0)

static model_config_t s_config(void)
{
	model_config_t c = {.n_layer = 2, .n_head = 4, .n_embd = 32, .vocab_size = VOCAB, .seq_len = 16};
	if (strncmp(s_arch, "llama", 5) == 0) {
		/* grouped-query: 2 query heads per KV head on every TP rank */
		c.n_head = 8;
		c.n_kv_head = 4;
		c.n_embd = 64;
		c.ffn_dim = 96;
		c.rope_theta = 10000.0;
		c.rope_scaling = (model_rope_scaling_t){4.0, 1.0, 4.0, 8};
		c.norm_eps = 1e-5;
		c.tie_embeddings = strcmp(s_arch, "llama-tied") == 0;
	}
	return c;
}

static const char *s_arch_name(void)
{
	return strncmp(s_arch, "llama", 5) == 0 ? "llama" : "gpt2";
}

static model_t *s_create(const model_tp_t *tp)
{
	model_config_t cfg = s_config();
	model_options_t opt = {.max_B = B, .max_T = T, .tp = tp};
	opt.precision = s_bf16 ? MODEL_PRECISION_BF16 : MODEL_PRECISION_FP32;
	if (tp) {
		opt.streaming = s_mode;
		opt.stream = s_mode == MODEL_DENSE ? NULL : &s_stream;
	}
	model_t *m = NULL;
	char err[256];
	if (model_create(s_arch_name(), MODEL_DEVICE_CPU, &cfg, &opt, &m, err, sizeof err) < 0) {
		CHECK(false, "model_create: %s", err);
		return NULL;
	}
	return m;
}

static void s_batch(int k, int32_t *in, int32_t *tg)
{
	uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(k + 1);
	for (int i = 0; i < N; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		in[i] = (int32_t)(x % VOCAB);
		tg[i] = (int32_t)((x >> 20) % VOCAB);
	}
}

/* The last forward's logits (the rows' own accessors; not in model.h). */
static const float *s_logits(model_t *m)
{
	return strcmp(s_arch_name(), "gpt2") == 0 ? gpt2_logits(model_impl(m))
						  : llama_logits(model_impl(m));
}

/* What both runs produce. */
typedef struct {
	float loss[2];
	float *logits; /* (N, V) of the second batch (t=1), or (N, Vl) local */
	float *grads;
	size_t n_params;
} result_t;

static void s_run(model_t *m, result_t *r, size_t logits_floats)
{
	int32_t in[N], tg[N];
	model_zero_grad(m);
	for (int k = 0; k < 2; k++) {
		s_batch(k, in, tg);
		r->loss[k] = model_forward(m, in, tg, B, T);
		if (k == 1) {
			r->logits = malloc(logits_floats * sizeof(float));
			memcpy(r->logits, s_logits(m), logits_floats * sizeof(float));
		}
		model_backward(m, 0.5f);
	}
	r->n_params = model_num_params(m);
	r->grads = malloc(r->n_params * sizeof(float));
	memcpy(r->grads, model_grads(m) ? model_grads(m) : s_strm.grads, r->n_params * sizeof(float));
}

/* ---- slicing and comparing through tp_segments ---- */

typedef struct {
	const float *logical; /* the t=1 tensor */
	float *local;         /* the TP part */
	double maxref, maxdiff;
	size_t covered;
} seg_ctx_t;

static void s_copy_seg(void *vctx, size_t local, size_t logical, size_t n)
{
	seg_ctx_t *c = vctx;
	memcpy(c->local + local, c->logical + logical, n * sizeof(float));
	c->covered += n;
}

static void s_cmp_seg(void *vctx, size_t local, size_t logical, size_t n)
{
	seg_ctx_t *c = vctx;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)c->local[local + i] - (double)c->logical[logical + i]);
		if (d > c->maxdiff || isnan(d))
			c->maxdiff = isnan(d) ? INFINITY : d;
		double a = fabs((double)c->logical[logical + i]);
		if (a > c->maxref)
			c->maxref = a;
	}
	c->covered += n;
}

static void s_slice(const model_tensor_t *lt, const model_tensor_t *tt, int n, const float *full,
                    float *local)
{
	for (int i = 0; i < n; i++) {
		seg_ctx_t c = {full + lt[i].offset, local + tt[i].offset, 0, 0, 0};
		memset(local + tt[i].offset, 0, tt[i].numel * sizeof(float));
		tp_segments(&tt[i], s_rank, s_tp, 0, tt[i].numel, s_copy_seg, &c);
	}
}

/* Compare a TP part with the logical tensors, tensor by tensor. */
static void s_compare(const char *what, const model_tensor_t *lt, const model_tensor_t *tt, int n,
                      const float *full, float *local, double tol)
{
	double worst = 0;
	for (int i = 0; i < n; i++) {
		seg_ctx_t c = {full + lt[i].offset, local + tt[i].offset, 0, 0, 0};
		tp_segments(&tt[i], s_rank, s_tp, 0, tt[i].numel, s_cmp_seg, &c);
		double lim = tol * c.maxref + 1e-7;
		CHECK(c.maxdiff <= lim, "%s of %s differ by %.3g (limit %.3g, largest %.3g)", what,
		      tt[i].name, c.maxdiff, lim, c.maxref);
		if (c.maxref > 0 && c.maxdiff / c.maxref > worst)
			worst = c.maxdiff / c.maxref;
		/* whatever tp_segments did not cover is vocabulary padding: zero */
		if (c.covered != tt[i].numel) {
			size_t first = c.covered; /* padding rows come last in the part */
			for (size_t j = first; j < tt[i].numel; j++)
				if (local[tt[i].offset + j] != 0.0f) {
					CHECK(false, "%s of %s: padded element %zu is %g", what, tt[i].name, j,
					      (double)local[tt[i].offset + j]);
					break;
				}
		}
	}
	if (s_rank == 0)
		printf("%s %s t=%d: %s within %.0e of each tensor's largest (worst %.2e)\n", s_arch,
		       s_arch_name(), s_tp, what, tol, worst);
}

/* ---- one TP rank ---- */

static comm_t *s_join(const char *dir)
{
	comm_kv_t kv = comm_kv_dir_make(dir);
	char err[512];
	comm_t *c = comm_gloo_new(&kv, s_rank, s_tp, "127.0.0.1", 30000, err, sizeof err);
	CHECK(c != NULL, "comm_gloo_new: %s", err);
	return c;
}

/* Replicated gradients: the same bits on every rank. */
static void s_check_replicated(comm_t *c, const model_tensor_t *tt, int n, const float *g)
{
	size_t k = 0;
	for (int i = 0; i < n; i++)
		if (tt[i].tp_split == MODEL_TP_REPLICATED)
			k += tt[i].numel;
	float *mine = malloc(k * sizeof(float)), *all = malloc(k * (size_t)s_tp * sizeof(float));
	size_t *counts = malloc((size_t)s_tp * sizeof(size_t));
	size_t o = 0;
	for (int i = 0; i < n; i++)
		if (tt[i].tp_split == MODEL_TP_REPLICATED) {
			memcpy(mine + o, g + tt[i].offset, tt[i].numel * sizeof(float));
			o += tt[i].numel;
		}
	for (int r = 0; r < s_tp; r++)
		counts[r] = k;
	CHECK(comm_allgather_f32(c, mine, all, counts) == 0, "allgather");
	for (int r = 0; r < s_tp; r++)
		CHECK(memcmp(all + (size_t)r * k, mine, k * sizeof(float)) == 0,
		      "replicated gradients differ from rank %d's", r);
	printf("rank %d: %zu replicated gradient floats bitwise equal on the %d ranks\n", s_rank, k,
	       s_tp);
	free(mine);
	free(all);
	free(counts);
}

/* The collectives two micro-batches need (tp.c and the rows' comments):
 * per layer, forward 2 all-gathers + 2 reduce-scatters of (B, T, C),
 * backward 4 all-gathers (2 of them re-gathering the norms' outputs) + 2
 * reduce-scatters; around them the embedding, the final norm, the loss and
 * the replicated gradients' all-reduce. */
static void s_check_volume(model_t *m, const model_tensor_t *tt, int n)
{
	model_tp_comm_t v;
	model_tp_comm(m, &v);
	model_config_t c = s_config();
	uint64_t L = (uint64_t)c.n_layer, BTC = (uint64_t)N * (uint64_t)c.n_embd, t = (uint64_t)s_tp;
	uint64_t rep = 0;
	for (int i = 0; i < n; i++)
		if (tt[i].tp_split == MODEL_TP_REPLICATED)
			rep += tt[i].numel;
	/* forward: (embedding RS), 2L AG + 2L RS, final-norm AG, the loss's max AG (N t) and AR (2N);
	 * backward: final-norm AG, its RS, 4L AG + 2L RS, the embedding's AG, replicated AR */
	uint64_t ag_calls = 2 * (2 * L + 1 + 1 + 1 + 4 * L + 1);
	uint64_t ag = 2 * ((2 * L + 1 + 4 * L + 1 + 1) * BTC + (uint64_t)N * t);
	uint64_t rs_calls = 2 * (1 + 2 * L + 1 + 2 * L);
	uint64_t rs = rs_calls * BTC;
	uint64_t ar = 2 * (2 * (uint64_t)N + rep);
	CHECK(v.allgather_calls == ag_calls && v.allgather_floats == ag,
	      "all-gathers: %llu calls of %llu floats, want %llu of %llu",
	      (unsigned long long)v.allgather_calls, (unsigned long long)v.allgather_floats,
	      (unsigned long long)ag_calls, (unsigned long long)ag);
	CHECK(v.reduce_scatter_calls == rs_calls && v.reduce_scatter_floats == rs,
	      "reduce-scatters: %llu calls of %llu floats, want %llu of %llu",
	      (unsigned long long)v.reduce_scatter_calls, (unsigned long long)v.reduce_scatter_floats,
	      (unsigned long long)rs_calls, (unsigned long long)rs);
	CHECK(v.allreduce_calls == 4 && v.allreduce_floats == ar,
	      "all-reduces: %llu calls of %llu floats, want 4 of %llu",
	      (unsigned long long)v.allreduce_calls, (unsigned long long)v.allreduce_floats,
	      (unsigned long long)ar);
}

static void s_rank_main(const char *dir)
{
	/* the reference */
	model_t *ref = s_create(NULL);
	if (!ref)
		return;
	model_config_t cfg = s_config();
	const size_t V = (size_t)cfg.vocab_size;
	model_init_params(ref, SEED);
	/* biases start at 0 and norms at 1: move every parameter a little so
	 * that each one matters to the comparison */
	float *p = model_params(ref);
	uint64_t x = 88172645463325252ull;
	for (size_t i = 0; i < model_num_params(ref); i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] += (float)((double)(x >> 11) / 9007199254740992.0 - 0.5) * 0.1f;
	}
	result_t want = {0};
	s_run(ref, &want, (size_t)N * V);
	int nl;
	const model_tensor_t *lt = model_tensors(ref, &nl);

	/* the TP part */
	comm_t *c = s_join(dir);
	if (!c)
		return;
	tpcomm_t tc;
	model_tp_t tp;
	CHECK(tpcomm_init(&tc, c, &tp) == 0, "tpcomm_init");
	model_t *m = s_create(&tp);
	if (!m)
		return;
	int nt;
	const model_tensor_t *tt = model_tensors(m, &nt);
	size_t np = model_num_params(m);
	s_strm.params = calloc(np, sizeof(float));
	s_strm.grads = calloc(np, sizeof(float));
	s_strm.buf = malloc(model_max_range(m) * sizeof(float));
	float *mp = model_params(m) ? model_params(m) : s_strm.params;
	CHECK(nt == nl, "tensor counts %d and %d", nt, nl);
	for (int i = 0; i < nt; i++)
		CHECK(strcmp(tt[i].name, lt[i].name) == 0 && tt[i].full_shape[0] == lt[i].shape[0] &&
		      tt[i].full_shape[1] == lt[i].shape[1] && tt[i].tp_split == lt[i].tp_split,
		      "tensor %d: %s (%lld, %lld) against %s", i, tt[i].name,
		      (long long)tt[i].full_shape[0], (long long)tt[i].full_shape[1], lt[i].name);
	/* the TP model's own init is the slice of the logical init */
	model_init_range(m, SEED, 0, np, mp);
	float *sliced = malloc(model_num_params(m) * sizeof(float));
	float *p_init = malloc(model_num_params(ref) * sizeof(float));
	model_init_range(ref, SEED, 0, model_num_params(ref), p_init);
	s_slice(lt, tt, nt, p_init, sliced);
	free(p_init);
	CHECK(memcmp(sliced, mp, np * sizeof(float)) == 0,
	      "the TP model's init is not the slice of the t=1 init");
	/* then the perturbed parameters the reference ran with */
	s_slice(lt, tt, nt, p, mp);
	free(sliced);

	result_t got = {0};
	size_t Vl = (size_t)tt[0].shape[0];
	s_run(m, &got, (size_t)N * Vl);
	for (int k = 0; k < 2; k++)
		CHECK(fabsf(got.loss[k] - want.loss[k]) <= (s_bf16 ? 2e-3f : 1e-5f) * fabsf(want.loss[k]),
		      "loss of batch %d: %.9g, t=1 %.9g", k, (double)got.loss[k], (double)want.loss[k]);
	if (s_rank == 0)
		printf("%s t=%d %s: losses %.7f %.7f, t=1 %.7f %.7f\n", s_arch, s_tp,
		       s_bf16 ? "bf16" : s_mode == MODEL_DENSE ? "dense"
		       : s_mode == MODEL_STREAM_GRADS ? "zero2" : "zero3",
		       (double)got.loss[0], (double)got.loss[1], (double)want.loss[0],
		       (double)want.loss[1]);
	/* logits of this rank's vocabulary block */
	size_t v0 = (size_t)s_rank * Vl, nv = v0 < V ? (V - v0 < Vl ? V - v0 : Vl) : 0;
	double maxref = 0, maxdiff = 0;
	for (size_t i = 0; i < (size_t)N; i++)
		for (size_t j = 0; j < nv; j++) {
			double a = want.logits[i * V + v0 + j], d = fabs(got.logits[i * Vl + j] - a);
			maxref = fabs(a) > maxref ? fabs(a) : maxref;
			maxdiff = d > maxdiff || isnan(d) ? (isnan(d) ? INFINITY : d) : maxdiff;
		}
	double tol = s_bf16 ? 5e-2 : 1e-4;
	CHECK(maxdiff <= tol * maxref + 1e-7, "logits differ by %.3g (largest %.3g)", maxdiff, maxref);
	s_compare("gradients", lt, tt, nt, want.grads, got.grads, tol);
	s_check_replicated(c, tt, nt, got.grads);
	if (s_mode == MODEL_DENSE) /* streamed, the replicated sums go range by range */
		s_check_volume(m, tt, nt);
	CHECK(tpcomm_error(&tc) == 0, "a collective failed: %s", tc.error_line);

	free(want.logits);
	free(want.grads);
	free(got.logits);
	free(got.grads);
	model_free(m);
	model_free(ref);
	free(s_strm.params);
	free(s_strm.grads);
	free(s_strm.buf);
	tpcomm_free(&tc);
	comm_free(c);
}

static double s_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 4 || (strcmp(argv[1], "gpt2") && strcmp(argv[1], "llama") &&
				     strcmp(argv[1], "llama-tied")) ||
	    atoi(argv[2]) < 1 || atoi(argv[2]) > 8 ||
	    (argc == 4 && strcmp(argv[3], "dense") && strcmp(argv[3], "zero2") &&
	     strcmp(argv[3], "zero3") && strcmp(argv[3], "bf16"))) {
		fprintf(stderr, "usage: test_tp gpt2|llama|llama-tied T (1..8) [dense|zero2|zero3|bf16]\n");
		return 2;
	}
	s_bf16 = argc == 4 && strcmp(argv[3], "bf16") == 0;
	if (argc == 4)
		s_mode = strcmp(argv[3], "zero2") == 0 ? MODEL_STREAM_GRADS
			: strcmp(argv[3], "zero3") == 0 ? MODEL_STREAM_ALL : MODEL_DENSE;
	s_arch = argv[1];
	s_tp = atoi(argv[2]);
	char dir[] = "/tmp/test-tp.XXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	pid_t pids[8];
	for (int r = 0; r < s_tp; r++) {
		pids[r] = fork();
		if (pids[r] < 0) {
			perror("fork");
			return 1;
		}
		if (pids[r] == 0) {
			s_rank = r;
			alarm(100);
			s_rank_main(dir);
			exit(s_failures ? 1 : 0);
		}
	}
	int bad = 0;
	double deadline = s_now_s() + 110;
	for (int left = s_tp; left > 0;) {
		int status;
		pid_t p = waitpid(-1, &status, WNOHANG);
		if (p > 0) {
			left--;
			if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
				fprintf(stderr, "a rank failed (status 0x%x)\n", status);
				bad++;
			}
			continue;
		}
		if (s_now_s() > deadline) {
			fprintf(stderr, "ranks still running: killing them\n");
			for (int r = 0; r < s_tp; r++)
				kill(pids[r], SIGKILL);
			while (wait(NULL) > 0)
				;
			bad++;
			break;
		}
		struct timespec ts = {0, 10 * 1000000L};
		nanosleep(&ts, NULL);
	}
	char cmd[256];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	printf("%s\n", bad ? "FAIL" : "PASS");
	return bad ? 1 : 0;
}
