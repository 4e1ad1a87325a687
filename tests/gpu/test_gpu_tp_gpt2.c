/*
 * test_gpu_tp_gpt2: the CUDA GPT-2 row with tensor parallelism (t = 2,
 * gpt2_cuda_tp.cu) against the CPU GPT-2 row without (t = 1, bf16 mode).
 * Two forked ranks, one GPU each (device = rank; on cudaemu two emulated
 * devices, CUDAEMU_DEVICES=2), meet through a directory KV, make an NCCL
 * comm (comm_nccl_new) and a TP group over it (tpcomm_init), and create
 * the row with model_create("gpt2", MODEL_DEVICE_CUDA, tp). The config is
 * tiny (2 layers, C 64, 4 heads of 16, V 67: wte padded to 68 rows, rank
 * 1's last local row is padding; T 16, B 3, so that rank 1's rows start
 * mid-sequence) and the parameters are the
 * CPU row's (seed 7), mapped onto each rank's local table with
 * tp_segments. Each rank writes its loss, its local gradient after one
 * backward and the losses of 4 AdamW steps (dev->adamw) to a file; the
 * parent (which never touches CUDA: a context does not survive fork)
 * maps them back to logical tensors and checks, for fused and GEMM
 * attention:
 *   - each rank's table is the CPU row's at t = 2 (gpt2_layout_tp: names,
 *     offsets, shapes, tp_split), checked in the rank;
 *   - the step-0 loss within LOSS_REL (5e-3 relative) of the CPU's, and
 *     every tensor's logical gradient within GRAD_BOUND (5e-2 normwise,
 *     ||g - c|| / ||c||), test_gpu_step.c's bounds and reasons: the GPU
 *     rounds every GEMM operand, the attention probabilities and the
 *     gradients into LayerNorm and attention to bf16 (2^-8 each) where the
 *     CPU's bf16 mode keeps fp32, a few roundings that compound; under TP
 *     the partial sums of the row-parallel layers are added in another
 *     order on top (fp32, far below that). A wrong head or qkv mapping, a
 *     missing all-reduce or a rank's rows swapped is an O(1) error in some
 *     tensor;
 *   - the replicated tensors' gradients (LayerNorms, the row-parallel
 *     biases, wpe) the same bits on both ranks, and the padded wte row's
 *     gradient exactly 0;
 *   - every step's loss within LOSS_REL of the CPU row's (optim.c's AdamW
 *     there, the same hyper-parameters);
 *   - FLOPs per token, gradient, state and activation bytes are the
 *     rank's (6 N_local + 6 L C/t T; below the same model's without TP);
 *   - both ranks counted the same collectives, as many as the steps make
 *     (forward: 2L + 2 all-gathers, 2L + 1 reduce-scatters, 1 all-reduce;
 *     backward: 4L + 2, 2L + 1 and 1).
 * Then streaming (ZeRO-2's and ZeRO-3's hooks, MODEL_STREAM_GRADS and
 * _ALL) at t = 2 with V 1001, so that each rank's 501 wte rows come in two
 * blocks, against the dense TP model on each rank: every local gradient
 * handed out once (wte's twice: LM head, embedding), no range over
 * max_range, the loss within STREAM_LOSS_REL (1e-4) and each tensor's
 * gradient within STREAM_GRAD_BOUND (1e-3 normwise; the LM head's dlnf is
 * summed over the blocks, last fp32 bits: test_gpu_step.c's bound), the
 * replicated gradients (all-reduced range by range) the same bits on both
 * ranks.
 * Skips (exit 77) without two usable GPUs.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "comm.h"
#include "gpt2.h"
#include "model.h"
#include "optim.h"
#include "step_util.h"
#include "tp.h"
#include "tp_harness.h"
#include "tpcomm.h"

#define RANKS 2
#define STEPS 4
#define BB 3
#define TT 16
#define LR 3e-3
#define LOSS_REL 5e-3
#define GRAD_BOUND 5e-2
#define STREAM_LOSS_REL 1e-4
#define STREAM_GRAD_BOUND 1e-3

static char s_dir[] = "/tmp/test-gpu-tp-gpt2.XXXXXX";
static const step_tokens_t s_tokens = {.seed = 4242, .jumps = 3, .mul = 7, .add = 2};

/* V 67 for the dense cases; V 1001 for the streamed ones, so that wte's
 * 501 local rows come in two blocks (a block is at most a layer's floats,
 * 393 rows of 64) */
static model_config_t s_config(int V)
{
	model_config_t c;
	memset(&c, 0, sizeof c);
	c.n_layer = 2;
	c.n_embd = 64;
	c.n_head = 4;
	c.vocab_size = V;
	c.seq_len = TT;
	return c;
}

/* The CPU table at t = 1 (logical offsets) and t = 2 (local). */
typedef struct {
	model_tensor_t *t1, *t2;
	int n1, n2;
	size_t n_logical, n_local;
	int V;
} tables_t;

static void s_tables(const model_config_t *cfg, tables_t *tb)
{
	size_t mr;
	if (gpt2_layout_tp(cfg, 1, &tb->t1, &tb->n1, &mr) < 0 ||
	    gpt2_layout_tp(cfg, RANKS, &tb->t2, &tb->n2, &mr) < 0 || tb->n1 != tb->n2) {
		fprintf(stderr, "FAIL gpt2_layout_tp\n");
		exit(1);
	}
	tb->V = cfg->vocab_size;
	tb->n_logical = tb->t1[tb->n1 - 1].offset + tb->t1[tb->n1 - 1].numel;
	tb->n_local = tb->t2[tb->n2 - 1].offset + tb->t2[tb->n2 - 1].numel;
}

/* this rank's local buffer from the logical one, or back */
static void s_local(const tables_t *tb, int rank, float *local, float *logical, bool get)
{
	tp_map_tables(tb->t2, tb->t1, tb->n2, rank, RANKS, local, logical, !get, true);
}

/* what the parent hands its ranks */
typedef struct {
	bool fused;
	const char *kv_dir;
	const float *p0;
	const tables_t *tb;
	char (*paths)[4200]; /* rank r writes to paths[r] */
} rank_args_t;

typedef struct {
	float losses[STEPS];
	model_tp_comm_t vol;
	int table_ok;
	double flops;                        /* per token at TT */
	size_t grad_bytes, act_bytes, state; /* and act_bytes1, state1 of the */
	size_t act_bytes1, state1;           /* same model without TP */
} rank_out_t;

/* tp_rank_join, the reason on stderr where it fails */
static int s_join(const rank_args_t *a, int rank, tp_rank_t *rk)
{
	char err[512];
	int rc = tp_rank_join(rank, RANKS, a->kv_dir, rk, err, sizeof err);
	if (rc != 0)
		fprintf(stderr, "rank %d: %s\n", rank, err);
	return rc;
}

static int s_rank_main(void *ctx, int rank)
{
	const rank_args_t *a = ctx;
	const bool fused = a->fused;
	const float *p0 = a->p0;
	const tables_t *tb = a->tb;
	char err[512];
	tp_rank_t rk;
	int joined = s_join(a, rank, &rk);
	if (joined != 0)
		return joined;
	model_config_t cfg = s_config(tb->V);
	model_options_t mo = {.max_B = BB, .max_T = TT, .fused_attention = fused, .tp = &rk.tp};
	model_t *g = NULL;
	if (model_create("gpt2", MODEL_DEVICE_CUDA, &cfg, &mo, &g, err, sizeof err) < 0) {
		fprintf(stderr, "rank %d: model_create: %s\n", rank, err);
		return 13;
	}
	rank_out_t out;
	memset(&out, 0, sizeof out);
	int nt = 0;
	const model_tensor_t *t = model_tensors(g, &nt);
	out.table_ok = nt == tb->n2 && model_num_params(g) == tb->n_local;
	for (int i = 0; out.table_ok && i < nt; i++)
		out.table_ok = !strcmp(t[i].name, tb->t2[i].name) && t[i].offset == tb->t2[i].offset &&
			       t[i].numel == tb->t2[i].numel && t[i].shape[0] == tb->t2[i].shape[0] &&
			       t[i].shape[1] == tb->t2[i].shape[1] && t[i].tp_split == tb->t2[i].tp_split &&
			       t[i].decay == tb->t2[i].decay;
	out.flops = model_flops_per_token(g, TT);
	out.grad_bytes = model_grad_bytes(g);
	out.act_bytes = model_activation_bytes(g);
	out.state = model_dev(g)->state_bytes(model_impl(g));
	{
		model_options_t m1 = {.max_B = BB, .max_T = TT, .fused_attention = fused};
		model_t *g1 = NULL;
		if (model_create("gpt2", MODEL_DEVICE_CUDA, &cfg, &m1, &g1, err, sizeof err) < 0)
			return 17;
		out.act_bytes1 = model_activation_bytes(g1);
		out.state1 = model_dev(g1)->state_bytes(model_impl(g1));
		model_free(g1);
	}
	float *local = calloc(tb->n_local, sizeof(float)), *grads = calloc(tb->n_local, sizeof(float));
	s_local(tb, rank, local, (float *)p0, false);
	const model_device_ops_t *dev = model_dev(g);
	void *impl = model_impl(g);
	dev->set_params(impl, local);
	int32_t in[BB * TT], tg[BB * TT];
	for (int s = 0; s < STEPS; s++) {
		step_batch(&s_tokens, s, BB, TT, cfg.vocab_size, in, tg);
		model_zero_grad(g);
		out.losses[s] = model_forward(g, in, tg, BB, TT);
		model_backward(g, 1.0f);
		if (s == 0) {
			dev->sync(impl);
			if (cudaMemcpy(grads, model_grads(g), tb->n_local * sizeof(float),
				       cudaMemcpyDeviceToHost) != cudaSuccess)
				return 14;
		}
		optim_adamw_t hp = step_adamw(LR, s);
		dev->adamw(impl, &hp, 1.0f);
	}
	dev->sync(impl);
	model_tp_comm(g, &out.vol);
	int rc = tpcomm_error(&rk.tc) ? 15 : 0;
	FILE *f = fopen(a->paths[rank], "w");
	if (!f || fwrite(&out, sizeof out, 1, f) != 1 || fwrite(grads, sizeof(float), tb->n_local, f) != tb->n_local)
		rc = 16;
	if (f)
		fclose(f);
	model_free(g);
	tp_rank_leave(&rk);
	free(local);
	free(grads);
	return rc;
}

/* ---- streamed (ZeRO-2 and ZeRO-3's hooks) ---- */

/* The trainer's side of streaming in one process: zeroed device buckets
 * whose gradients are added into a host buffer (each element counted),
 * and parameters fetched from a device copy of the local ones. */
typedef struct {
	float *bucket, *host_tmp; /* (max_range) device, host */
	float *grads;             /* (n_local) host */
	int *count;               /* (n_local) times each gradient was handed out */
	const float *params;      /* (n_local) device */
	size_t max_range;
	int too_large;            /* ranges over max_range */
} stream_ctx_t;

static float *s_grad_begin(void *ctx, model_range_t r)
{
	stream_ctx_t *c = ctx;
	if (r.hi - r.lo > c->max_range) {
		c->too_large++;
		r.hi = r.lo + c->max_range;
	}
	if (cudaMemset(c->bucket, 0, (r.hi - r.lo) * sizeof(float)) != cudaSuccess ||
	    cudaDeviceSynchronize() != cudaSuccess)
		exit(20);
	return c->bucket;
}

static void s_grad_end(void *ctx, float *g, model_range_t r)
{
	stream_ctx_t *c = ctx;
	size_t n = r.hi - r.lo < c->max_range ? r.hi - r.lo : c->max_range;
	if (cudaMemcpy(c->host_tmp, g, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess)
		exit(21);
	for (size_t i = 0; i < n; i++) {
		c->grads[r.lo + i] += c->host_tmp[i];
		c->count[r.lo + i]++;
	}
}

static const float *s_fetch(void *ctx, model_range_t r, model_range_t next)
{
	stream_ctx_t *c = ctx;
	(void)next;
	return c->params + r.lo;
}

static void s_release(void *ctx, const float *p)
{
	(void)ctx;
	(void)p;
}

/* What a rank writes per mode: the loss, the coverage faults, then the
 * local gradient (n_local floats). */
typedef struct {
	float loss;
	int bad_cover, too_large;
} stream_out_t;

/* One forward and backward in mode on this rank; 0 or an exit code. */
static int s_stream_one(model_streaming_t mode, const model_tp_t *tp, const tables_t *tb,
                        const float *local, const float *dev_local, FILE *f)
{
	char err[512];
	model_config_t cfg = s_config(tb->V);
	stream_ctx_t c = {0};
	c.grads = calloc(tb->n_local, sizeof(float));
	c.count = calloc(tb->n_local, sizeof(int));
	c.params = dev_local;
	model_stream_t st = {&c, s_fetch, s_release, s_grad_begin, s_grad_end};
	model_options_t mo = {.max_B = BB, .max_T = TT, .fused_attention = true, .tp = tp,
			      .streaming = mode, .stream = mode == MODEL_DENSE ? NULL : &st,
			      .no_moments = true};
	model_t *g = NULL;
	if (model_create("gpt2", MODEL_DEVICE_CUDA, &cfg, &mo, &g, err, sizeof err) < 0) {
		fprintf(stderr, "model_create (streaming %d): %s\n", (int)mode, err);
		return 30;
	}
	c.max_range = model_max_range(g);
	if (cudaMalloc((void **)&c.bucket, c.max_range * sizeof(float)) != cudaSuccess)
		return 31;
	c.host_tmp = malloc(c.max_range * sizeof(float));
	const model_device_ops_t *dev = model_dev(g);
	if (mode != MODEL_STREAM_ALL)
		dev->set_params(model_impl(g), local);
	int32_t in[BB * TT], tg[BB * TT];
	step_batch(&s_tokens, 0, BB, TT, cfg.vocab_size, in, tg);
	model_zero_grad(g);
	stream_out_t out = {model_forward(g, in, tg, BB, TT), 0, 0};
	model_backward(g, 1.0f);
	dev->sync(model_impl(g));
	if (mode == MODEL_DENSE) {
		if (cudaMemcpy(c.grads, model_grads(g), tb->n_local * sizeof(float),
			       cudaMemcpyDeviceToHost) != cudaSuccess)
			return 32;
	} else { /* each gradient handed out once, wte's twice (LM head, embedding) */
		for (size_t i = 0; i < tb->n_local; i++)
			out.bad_cover += c.count[i] != (i < tb->t2[0].numel ? 2 : 1);
	}
	out.too_large = c.too_large;
	int rc = fwrite(&out, sizeof out, 1, f) == 1 &&
		 fwrite(c.grads, sizeof(float), tb->n_local, f) == tb->n_local ? 0 : 33;
	model_free(g);
	cudaFree(c.bucket);
	free(c.host_tmp);
	free(c.grads);
	free(c.count);
	return rc;
}

static int s_stream_rank_main(void *ctx, int rank)
{
	const rank_args_t *a = ctx;
	const float *p0 = a->p0;
	const tables_t *tb = a->tb;
	tp_rank_t rk;
	int joined = s_join(a, rank, &rk);
	if (joined != 0)
		return joined;
	float *local = calloc(tb->n_local, sizeof(float)), *dev_local = NULL;
	s_local(tb, rank, local, (float *)p0, false);
	if (cudaMalloc((void **)&dev_local, tb->n_local * sizeof(float)) != cudaSuccess ||
	    cudaMemcpy(dev_local, local, tb->n_local * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
		return 13;
	FILE *f = fopen(a->paths[rank], "w");
	int rc = f ? 0 : 14;
	const model_streaming_t modes[] = {MODEL_DENSE, MODEL_STREAM_GRADS, MODEL_STREAM_ALL};
	for (int i = 0; rc == 0 && i < 3; i++)
		rc = s_stream_one(modes[i], &rk.tp, tb, local, dev_local, f);
	if (f)
		fclose(f);
	if (rc == 0 && tpcomm_error(&rk.tc))
		rc = 15;
	cudaFree(dev_local);
	free(local);
	tp_rank_leave(&rk);
	return rc;
}

/* the streamed modes against the dense one, per rank, on each rank's
 * local gradient: STREAM_LOSS_REL and STREAM_GRAD_BOUND */
static void s_stream_case(const tables_t *tb, const float *p0)
{
	printf("-- t %d, streamed (V %d: wte in blocks)\n", RANKS, tb->V);
	char kv_dir[4200], paths[RANKS][4200];
	snprintf(kv_dir, sizeof kv_dir, "%s/kv-stream", s_dir);
	for (int r = 0; r < RANKS; r++)
		snprintf(paths[r], sizeof paths[r], "%s/stream-rank%d", s_dir, r);
	rank_args_t args = {false, kv_dir, p0, tb, paths};
	int rc[RANKS], bad = 0;
	tp_fork_ranks(RANKS, kv_dir, s_stream_rank_main, &args, rc);
	for (int r = 0; r < RANKS; r++) {
		expect(rc[r] == 0, "rank %g exited with %g", r, rc[r]);
		bad += rc[r] != 0;
	}
	if (bad)
		return;
	const size_t n = tb->n_local;
	float *g[RANKS][3];
	stream_out_t o[RANKS][3];
	for (int r = 0; r < RANKS; r++) {
		FILE *f = fopen(paths[r], "r");
		for (int k = 0; k < 3; k++) {
			g[r][k] = malloc(n * sizeof(float));
			if (!f || fread(&o[r][k], sizeof o[r][k], 1, f) != 1 || fread(g[r][k], sizeof(float), n, f) != n) {
				fprintf(stderr, "FAIL cannot read %s\n", paths[r]);
				exit(1);
			}
		}
		fclose(f);
	}
	static const char *const names[] = {"dense", "zero2 (gradients streamed)", "zero3 (parameters too)"};
	for (int k = 1; k < 3; k++) {
		printf("   %s\n", names[k]);
		double worst = 0, lrel = 0;
		int cover = 0, large = 0;
		size_t rep_diff = 0;
		for (int r = 0; r < RANKS; r++) {
			lrel = fmax(lrel, fabs(o[r][k].loss - o[r][0].loss) / fabs(o[r][0].loss));
			cover += o[r][k].bad_cover;
			large += o[r][k].too_large;
			for (int i = 0; i < tb->n2; i++) {
				double d = 0, c = 0;
				for (size_t j = tb->t2[i].offset; j < tb->t2[i].offset + tb->t2[i].numel; j++) {
					d += ((double)g[r][k][j] - g[r][0][j]) * ((double)g[r][k][j] - g[r][0][j]);
					c += (double)g[r][0][j] * g[r][0][j];
				}
				worst = fmax(worst, c > 0 ? sqrt(d / c) : sqrt(d));
				if (r == 1 && tb->t2[i].tp_split == MODEL_TP_REPLICATED)
					for (size_t j = tb->t2[i].offset; j < tb->t2[i].offset + tb->t2[i].numel; j++)
						rep_diff += memcmp(&g[0][k][j], &g[1][k][j], sizeof(float)) != 0;
			}
		}
		expect(cover == 0 && large == 0,
		       "every gradient handed out once (wte twice), no range over max_range (%g, %g wrong)",
		       cover, large);
		expect(lrel <= STREAM_LOSS_REL, "loss against dense: rel err %.3g (bound %.3g)", lrel,
		       STREAM_LOSS_REL);
		expect(worst <= STREAM_GRAD_BOUND, "gradient against dense, worst tensor: %.3g (bound %.3g)",
		       worst, STREAM_GRAD_BOUND);
		expect(rep_diff == 0, "replicated gradients the same bits on both ranks (%g differ, %g ranks)",
		       (double)rep_diff, RANKS);
	}
	for (int r = 0; r < RANKS; r++)
		for (int k = 0; k < 3; k++)
			free(g[r][k]);
}

/* the CPU row at t = 1: step 0's loss and gradient, every step's loss */
static void s_cpu(const model_config_t *cfg, const tables_t *tb, float *p0, float *ret_grad,
                  float *ret_losses)
{
	model_options_t co = {.max_B = BB, .max_T = TT, .precision = MODEL_PRECISION_BF16};
	model_t *c = step_model("gpt2", MODEL_DEVICE_CPU, cfg, &co, "CPU gpt2");
	model_init_params(c, 7);
	memcpy(p0, model_params(c), model_num_params(c) * sizeof(float));
	step_cpu_steps(c, tb->t1, tb->n1, &s_tokens, BB, TT, cfg->vocab_size, STEPS, LR, ret_losses, ret_grad);
	model_free(c);
}

static void s_read(const char *path, rank_out_t *out, float *grads, size_t n)
{
	FILE *f = fopen(path, "r");
	if (!f || fread(out, sizeof *out, 1, f) != 1 || fread(grads, sizeof(float), n, f) != n) {
		fprintf(stderr, "FAIL cannot read %s\n", path);
		exit(1);
	}
	fclose(f);
}

/* the per-tensor normwise errors of the assembled gradient */
static void s_check_grads(const tables_t *tb, const float *gl, const float *ref)
{
	double worst = 0, num = 0, den = 0;
	int worst_i = 0;
	for (int i = 0; i < tb->n1; i++) {
		double d = 0, r = 0;
		for (size_t k = 0; k < tb->t1[i].numel; k++) {
			double a = gl[tb->t1[i].offset + k], b = ref[tb->t1[i].offset + k];
			d += (a - b) * (a - b);
			r += b * b;
		}
		num += d;
		den += r;
		double e = r > 0 ? sqrt(d / r) : sqrt(d);
		if (e > worst) {
			worst = e;
			worst_i = i;
		}
	}
	printf("     worst tensor %s\n", tb->t1[worst_i].name);
	expect(worst <= GRAD_BOUND, "step 0 gradient, worst tensor: normwise err %.3g (bound %.3g)",
	       worst, GRAD_BOUND);
	expect(sqrt(num / den) <= GRAD_BOUND, "step 0 gradient, whole: normwise err %.3g (bound %.3g)",
	       sqrt(num / den), GRAD_BOUND);
}

static void s_case(bool fused, const tables_t *tb, float *p0, const float *ref_grad,
                   const float *ref_losses)
{
	const int L = s_config(tb->V).n_layer;
	printf("-- t %d, %s attention\n", RANKS, fused ? "fused" : "gemm");
	char kv_dir[4200], paths[RANKS][4200];
	snprintf(kv_dir, sizeof kv_dir, "%s/kv-%s", s_dir, fused ? "fused" : "gemm");
	for (int r = 0; r < RANKS; r++)
		snprintf(paths[r], sizeof paths[r], "%s/%s-rank%d", s_dir, fused ? "fused" : "gemm", r);
	rank_args_t args = {fused, kv_dir, p0, tb, paths};
	int rc[RANKS];
	tp_fork_ranks(RANKS, kv_dir, s_rank_main, &args, rc);
	for (int r = 0; r < RANKS; r++)
		expect(rc[r] == 0, "rank %g exited with %g", r, rc[r]);
	if (rc[0] || rc[1])
		return;
	rank_out_t out[RANKS];
	float *gr[RANKS], *gl = calloc(tb->n_logical, sizeof(float));
	for (int r = 0; r < RANKS; r++) {
		gr[r] = malloc(tb->n_local * sizeof(float));
		s_read(paths[r], &out[r], gr[r], tb->n_local);
		expect(out[r].table_ok, "rank %g: the table is the CPU row's at t %g", r, RANKS);
		s_local(tb, r, gr[r], gl, true);
	}
	const double rel0 = fabs(out[0].losses[0] - ref_losses[0]) / fabs(ref_losses[0]);
	expect(rel0 <= LOSS_REL, "step 0 loss: rel err %.3g (bound %.3g)", rel0, LOSS_REL);
	expect(!memcmp(out[0].losses, out[1].losses, sizeof out[0].losses),
	       "both ranks the same loss bits over %g steps at t %g", STEPS, RANKS);
	s_check_grads(tb, gl, ref_grad);
	size_t rep_diff = 0, rep_n = 0;
	for (int i = 0; i < tb->n2; i++)
		if (tb->t2[i].tp_split == MODEL_TP_REPLICATED) {
			rep_n += tb->t2[i].numel;
			for (size_t k = 0; k < tb->t2[i].numel; k++)
				rep_diff += memcmp(&gr[0][tb->t2[i].offset + k], &gr[1][tb->t2[i].offset + k],
						   sizeof(float)) != 0;
		}
	expect(rep_n > 0 && rep_diff == 0, "replicated gradients the same bits on both ranks (%g of %g differ)",
	       (double)rep_diff, (double)rep_n);
	/* wte (Vl, C): rank 1's rows past V - Vl are padding */
	const size_t C = (size_t)tb->t2[0].shape[1], Vl = (size_t)tb->t2[0].shape[0];
	const size_t valid = (size_t)tb->t1[0].shape[0] - Vl;
	double pad = 0;
	for (size_t k = valid * C; k < Vl * C; k++)
		pad += fabs(gr[1][k]);
	expect(valid < Vl && pad == 0, "padded wte rows (%g) have gradient 0 (sum |g| %g)",
	       (double)(Vl - valid), pad);
	double worst = 0;
	for (int s = 0; s < STEPS; s++) {
		double e = fabs(out[0].losses[s] - ref_losses[s]) / fabs(ref_losses[s]);
		worst = e > worst ? e : worst;
	}
	expect(worst <= LOSS_REL, "%g AdamW steps: worst loss rel err %.3g", STEPS, worst);
	printf("     losses: gpu %.6f .. %.6f, cpu %.6f .. %.6f\n", out[0].losses[0],
	       out[0].losses[STEPS - 1], ref_losses[0], ref_losses[STEPS - 1]);
	const double C2 = (double)s_config(tb->V).n_embd / RANKS;
	const double flops = 6.0 * (double)tb->n_local + 6.0 * L * C2 * TT;
	expect(out[0].flops == flops && out[1].flops == flops,
	       "FLOPs per token are the rank's: %g (6 N_local + 6 L C/t T = %g)", out[0].flops, flops);
	expect(out[0].grad_bytes == 4 * tb->n_local && out[0].state < out[0].state1,
	       "gradient bytes 4 per local parameter (%g); state bytes below t 1's (%g)",
	       (double)out[0].grad_bytes, (double)out[0].state);
	expect(out[0].act_bytes > 0 && out[0].act_bytes < out[0].act_bytes1,
	       "activation bytes %g, below t 1's %g", (double)out[0].act_bytes, (double)out[0].act_bytes1);
	const model_tp_comm_t *v = &out[0].vol;
	expect(!memcmp(&out[0].vol, &out[1].vol, sizeof out[0].vol),
	       "both ranks counted the same collectives (%g all-gathers, %g reduce-scatters)",
	       (double)v->allgather_calls, (double)v->reduce_scatter_calls);
	expect(v->allgather_calls == (uint64_t)STEPS * (6 * L + 4) &&
	       v->reduce_scatter_calls == (uint64_t)STEPS * (4 * L + 2) &&
	       v->allreduce_calls == (uint64_t)STEPS * 2 && v->sent_floats > 0,
	       "collectives per step as the layers make them (%g all-reduces over %g steps)",
	       (double)v->allreduce_calls, STEPS);
	for (int r = 0; r < RANKS; r++)
		free(gr[r]);
	free(gl);
}

int main(void)
{
	char why[600];
	int n_gpus = tp_probe(why, sizeof why);
	if (n_gpus < RANKS) {
		printf("gpu-tp-gpt2: no CUDA GPU: %d usable, %d needed%s%s; skipping\n", n_gpus, RANKS,
		       n_gpus ? "" : ": ", n_gpus ? "" : why);
		return GPU_TEST_SKIP;
	}
	if (!mkdtemp(s_dir)) {
		perror("mkdtemp");
		return 2;
	}
	model_config_t cfg = s_config(67);
	tables_t tb;
	s_tables(&cfg, &tb);
	float *p0 = malloc(tb.n_logical * sizeof(float)), *ref = malloc(tb.n_logical * sizeof(float));
	float ref_losses[STEPS];
	s_cpu(&cfg, &tb, p0, ref, ref_losses);
	s_case(true, &tb, p0, ref, ref_losses);
	s_case(false, &tb, p0, ref, ref_losses);
	free(p0);
	free(ref);
	free(tb.t1);
	free(tb.t2);
	/* streamed: a larger vocabulary, the CPU row's initial parameters */
	cfg = s_config(1001);
	s_tables(&cfg, &tb);
	p0 = malloc(tb.n_logical * sizeof(float));
	{
		model_options_t co = {.max_B = BB, .max_T = TT};
		model_t *c = step_model("gpt2", MODEL_DEVICE_CPU, &cfg, &co, "CPU gpt2");
		model_init_params(c, 7);
		memcpy(p0, model_params(c), tb.n_logical * sizeof(float));
		model_free(c);
	}
	s_stream_case(&tb, p0);
	free(p0);
	free(tb.t1);
	free(tb.t2);
	tp_remove_dir(s_dir);
	printf("%s\n", n_failed ? "FAILED" : "all passed");
	return n_failed ? 1 : 0;
}
