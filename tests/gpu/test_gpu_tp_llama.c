/*
 * test_gpu_tp_llama: the CUDA Llama row with tensor parallelism (t = 2,
 * Megatron with sequence parallelism; llama_cuda.h) against the CPU Llama
 * row without it (t = 1, fp32), on a tiny grouped-query config whose
 * vocabulary does not divide by 2: L 2, C 64, H 4 heads of 16, KV 2, F 128,
 * V 67 (padded to 68: rank 1 holds one padded row of embed_tokens and of
 * lm_head), T 16, B 2, untied and tied.
 *
 * Two ranks are forked, each on its own device (two GPUs, or
 * CUDAEMU_DEVICES=2 on the emulator), joined in an NCCL comm through a
 * directory KV (as test_gpu_ddp.c) and wrapped by tpcomm_init (the group
 * the trainer gives the model). Each creates the row through the registry
 * (model_create with opt.tp), sets its parameters from the CPU model's
 * logical ones mapped through tp_segments (engine/tp.h, the trainer's map;
 * padded rows 0), and runs STEPS steps of zero_grad, forward, backward and
 * dev->adamw on the same batches as the CPU row; results go to shared
 * memory. The parent never touches CUDA (a context does not survive fork).
 *
 * The case is an argument: "dense" (MODEL_DENSE), "grads"
 * (MODEL_STREAM_GRADS, ZeRO-2's hooks) or "all" (MODEL_STREAM_ALL, ZeRO-3's:
 * the fetched parameters are the rank's own device copy). Checked, with
 * test_gpu_llama_step.c's bounds and their reasons (every GEMM operand,
 * q/k/v after RoPE, probabilities and attention gradients rounded to bf16,
 * 2^-8 each, against the CPU row's fp32; with TP the gathered RMSNorm
 * outputs are the same bf16 operands, and the partial sums of the
 * row-parallel GEMMs are added in another order):
 *   - the local tensor table is the CPU row's llama_layout_tp at t = 2 (the
 *     flat layout the trainer maps snapshots and init with);
 *   - step 0's loss within LOSS_REL (5e-3) of the CPU's, the same bits on
 *     both ranks;
 *   - step 0's gradient, both ranks' parts mapped back to the logical
 *     layout: every tensor within GRAD_BOUND (5e-2 normwise) and the whole
 *     within it; padded rows' gradients exactly 0 (a wrong vocabulary
 *     offset or a missing all-reduce of a norm's gradient is an O(1)
 *     error);
 *   - the replicated tensors' (the norms') gradients bitwise equal on both
 *     ranks (all-reduced in backward);
 *   - every step's loss within LOSS_REL of the CPU row's (AdamW moves each
 *     parameter by ~lr a step; a wrong update or decay moves the loss by
 *     1e-2 within a few steps), and the parameters of the replicated
 *     tensors bitwise equal on both ranks at the end;
 *   - FLOPs a token the CPU row's at t = 2 (exactly: the same formula on
 *     the same local table); a rank's activation arena and parameter bytes
 *     below the same row's at t = 1 (streamed parameters: none at either);
 *   - the TP traffic counted (model_tp_comm: all-gathers, reduce-scatters
 *     and the all-reduces of the loss and the norms), no collective failed;
 *   - dense: the grads-ready ranges cover every parameter once; a second
 *     backward of the same batch without zero_grad gives exactly twice the
 *     gradient (the same bits added to themselves: micro-batches
 *     accumulate, the norms' included; tied embed_tokens left out, whose
 *     two parts are added in two roundings);
 *   - streamed (V 2001 instead, so that each rank's 1001 rows, one of
 *     them padding, come in two blocks of llama_stream_rows, 578): one
 *     step; every range at most max_range, each float's gradient handed
 *     out once (embed_tokens' twice when tied), the fetches in order (the
 *     model exits 70 otherwise).
 * Exit 77 ("no CUDA GPU" or "fewer than 2 GPUs") where it cannot run.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cuda_runtime.h>

#include "comm.h"
#include "llama_layout.h"
#include "model.h"
#include "optim.h"
#include "step_util.h"
#include "tp.h"
#include "tp_harness.h"
#include "tpcomm.h"

#define TPN 2
#define STEPS 4
#define BB 2
#define TT 16
#define LR 3e-3
#define GRAD_BOUND 5e-2
#define LOSS_REL 5e-3
#define STREAM_V 2001 /* 1001 rows a rank, in blocks of llama_stream_rows (578) */

static const step_tokens_t s_tokens = {.seed = 4242, .jumps = 1, .mul = 5, .add = 3};

static model_config_t s_config(bool tied)
{
	return step_llama_config(tied, 128, 67, 32, 8);
}

/* what a rank leaves in shared memory */
typedef struct {
	int status; /* 0 ok, else what failed (a line in why) */
	char why[800];
	float losses[STEPS];
	size_t n_local;
	int table_same;
	double sent;            /* model_tp_comm's sent_floats */
	uint64_t ag_calls, rs_calls, ar_calls;
	size_t ready_bad;       /* dense: parameters not covered once */
	size_t accum_bad;       /* dense: gradients of two backwards not 2x one's */
	size_t stream_bad, too_big; /* streamed */
	double flops;           /* model_flops_per_token(TT) at t = 2 */
	size_t act[2], param_bytes[2]; /* activation and parameter bytes at t = 2, 1 */
} rank_out_t;

typedef struct {
	rank_out_t r[TPN];
	size_t cap; /* floats in each of the arrays below */
} shared_t;

/* the rank's arrays after the struct: step 0's gradient, the final
 * parameters */
static float *s_grads_of(shared_t *sh, int rank)
{
	return (float *)(sh + 1) + (size_t)rank * 2 * sh->cap;
}

static float *s_params_of(shared_t *sh, int rank)
{
	return s_grads_of(sh, rank) + sh->cap;
}

/* ---- one rank ---- */

typedef struct {
	model_config_t cfg;
	model_streaming_t mode;
	const float *p0;          /* logical parameters */
	const model_tensor_t *ft; /* the logical table */
	int nt;
	const char *kv_dir;
	shared_t *sh;
} case_t;

#define RFAIL(...)                                                                                 \
	do {                                                                                       \
		snprintf(o->why, sizeof o->why, __VA_ARGS__);                                      \
		o->status = 1;                                                                     \
		return 1;                                                                          \
	} while (0)

/* the model's STEPS steps; step 0's gradient into grads (streamed: what the
 * hooks handed out) */
static void s_steps(const case_t *k, model_t *g, step_streamer_t *st, step_ready_t *rd, float *grads, rank_out_t *o)
{
	const model_device_ops_t *dev = model_dev(g);
	void *impl = model_impl(g);
	const size_t n = model_num_params(g);
	int32_t in[BB * TT], tg[BB * TT];
	for (int s = 0; s < STEPS; s++) {
		step_batch(&s_tokens, s, BB, TT, k->cfg.vocab_size, in, tg);
		if (rd)
			dev->set_grads_ready(impl, s == 0 ? step_ready : NULL, rd);
		model_zero_grad(g);
		o->losses[s] = model_forward(g, in, tg, BB, TT);
		model_backward(g, 1.0f);
		if (s == 0 && k->mode == MODEL_DENSE)
			gpu_get(grads, model_grads(g), n * sizeof(float));
		if (s == 0 && k->mode != MODEL_DENSE)
			memcpy(grads, st->acc, n * sizeof(float));
		if (k->mode != MODEL_DENSE)
			break; /* the streamed row has no optimizer of its own: one step */
		optim_adamw_t hp = step_adamw(LR, s);
		dev->adamw(impl, &hp, 1.0f);
	}
	if (k->mode != MODEL_DENSE)
		return;
	/* micro-batches: a second backward of the same batch adds exactly the
	 * same gradient (the norms' saved and added back around their
	 * all-reduce), so the sum is 2x one's, bit for bit */
	float *g1 = malloc(n * sizeof(float)), *g2 = malloc(n * sizeof(float));
	model_zero_grad(g);
	(void)model_forward(g, in, tg, BB, TT);
	model_backward(g, 1.0f);
	gpu_get(g1, model_grads(g), n * sizeof(float));
	(void)model_forward(g, in, tg, BB, TT);
	model_backward(g, 1.0f);
	gpu_get(g2, model_grads(g), n * sizeof(float));
	int nt = 0;
	const model_tensor_t *t = model_tensors(g, &nt);
	/* tied: embed_tokens adds the LM head's and the embedding's parts, in
	 * two roundings, so twice is not exact there */
	for (size_t i = k->cfg.tie_embeddings ? t[0].numel : 0; i < n; i++)
		o->accum_bad += g2[i] != 2.0f * g1[i];
	free(g1), free(g2);
}

static int s_rank_main(void *ctx, int rank)
{
	const case_t *k = ctx;
	rank_out_t *o = &k->sh->r[rank];
	char err[512];
	tp_rank_t rk;
	if (tp_rank_join(rank, TPN, k->kv_dir, &rk, err, sizeof err) != 0)
		RFAIL("%s", err);
	/* the local table and parameters */
	model_tensor_t *lt = NULL;
	int nl = 0;
	size_t n = 0, max_range = 0;
	if (llama_layout_tp(&k->cfg, TPN, &lt, &nl, &n, &max_range) < 0 || nl != k->nt || n > k->sh->cap)
		RFAIL("llama_layout_tp failed");
	float *lp = calloc(n, sizeof(float));
	tp_map_tables(lt, k->ft, nl, rank, TPN, lp, (float *)(uintptr_t)k->p0, true, true);
	float *d_full = gpu_dup(lp, n * sizeof(float));
	step_streamer_t st = {n, max_range, d_full, calloc(n, sizeof(float)), calloc(n, sizeof(int)), 0};
	model_stream_t fns = step_stream(&st);
	model_options_t mo = {.max_B = BB, .max_T = TT, .fused_attention = true, .tp = &rk.tp,
			      .streaming = k->mode, .stream = k->mode == MODEL_DENSE ? NULL : &fns,
			      .no_moments = k->mode != MODEL_DENSE};
	model_t *g = NULL;
	if (model_create("llama", MODEL_DEVICE_CUDA, &k->cfg, &mo, &g, err, sizeof err) < 0)
		RFAIL("model_create: %s", err);
	int ng = 0;
	const model_tensor_t *gt = model_tensors(g, &ng);
	o->table_same = ng == nl && model_num_params(g) == n;
	for (int i = 0; o->table_same && i < nl; i++)
		o->table_same = !strcmp(gt[i].name, lt[i].name) && gt[i].offset == lt[i].offset &&
				gt[i].numel == lt[i].numel && gt[i].tp_split == lt[i].tp_split;
	o->n_local = n;
	o->flops = model_flops_per_token(g, TT);
	o->act[0] = model_activation_bytes(g);
	o->param_bytes[0] = model_param_bytes(g);
	{
		model_options_t m1 = mo;
		m1.tp = NULL;
		model_t *g1 = NULL;
		if (model_create("llama", MODEL_DEVICE_CUDA, &k->cfg, &m1, &g1, err, sizeof err) < 0)
			RFAIL("model_create at t = 1: %s", err);
		o->act[1] = model_activation_bytes(g1);
		o->param_bytes[1] = model_param_bytes(g1);
		model_free(g1);
	}
	if (k->mode != MODEL_STREAM_ALL)
		model_dev(g)->set_params(model_impl(g), lp);
	step_ready_t rd = {n, calloc(n, sizeof(int))};
	s_steps(k, g, &st, k->mode == MODEL_DENSE ? &rd : NULL, s_grads_of(k->sh, rank), o);
	if (k->mode == MODEL_DENSE) {
		for (size_t i = 0; i < n; i++)
			o->ready_bad += rd.seen[i] != 1;
		model_dev(g)->get_params(model_impl(g), s_params_of(k->sh, rank));
	} else {
		const size_t embed = (size_t)lt[0].numel;
		for (size_t i = 0; i < n; i++)
			o->stream_bad += st.count[i] != (k->cfg.tie_embeddings && i < embed ? 2 : 1);
		o->too_big = st.too_big;
	}
	model_tp_comm_t vol;
	model_tp_comm(g, &vol);
	o->sent = vol.sent_floats;
	o->ag_calls = vol.allgather_calls;
	o->rs_calls = vol.reduce_scatter_calls;
	o->ar_calls = vol.allreduce_calls;
	if (tpcomm_error(&rk.tc))
		RFAIL("a collective failed: %s", rk.tc.error_line);
	model_free(g);
	cudaFree(d_full);
	tp_rank_leave(&rk);
	free(lp), free(lt), free(rd.seen), free(st.acc), free(st.count);
	o->status = 0;
	return 0;
}

/* ---- the parent ---- */

static char s_dir[4096];

/* the CPU row at t = 1: p0, step 0's gradient and every step's loss */
static model_t *s_cpu(const model_config_t *cfg, float *losses, float **ret_p0, float **ret_g0)
{
	model_options_t co = {.max_B = BB, .max_T = TT, .precision = MODEL_PRECISION_FP32};
	model_t *c = step_model("llama", MODEL_DEVICE_CPU, cfg, &co, "CPU llama");
	model_init_params(c, 7);
	const size_t n = model_num_params(c);
	int nt = 0;
	const model_tensor_t *tc = model_tensors(c, &nt);
	*ret_p0 = malloc(n * sizeof(float));
	*ret_g0 = malloc(n * sizeof(float));
	memcpy(*ret_p0, model_params(c), n * sizeof(float));
	step_cpu_steps(c, tc, nt, &s_tokens, BB, TT, cfg->vocab_size, STEPS, LR, losses, *ret_g0);
	return c;
}

static void s_noop_ag(void *ctx, const float *in, float *out, size_t n) { (void)ctx, (void)in, (void)out, (void)n; }
static void s_noop_ar(void *ctx, float *buf, size_t n) { (void)ctx, (void)buf, (void)n; }

/* the CPU row's FLOPs a token at t = 2, rank 0 (created only: its
 * collectives are never called) */
static double s_cpu_flops_t2(const model_config_t *cfg)
{
	model_tp_t tp = {.rank = 0, .size = TPN, .sequence_parallel = true, .allgather = s_noop_ag,
			 .reduce_scatter = s_noop_ag, .allreduce = s_noop_ar};
	model_options_t co = {.max_B = BB, .max_T = TT, .precision = MODEL_PRECISION_FP32, .tp = &tp};
	model_t *c = step_model("llama", MODEL_DEVICE_CPU, cfg, &co, "CPU llama at t = 2");
	double f = model_flops_per_token(c, TT);
	model_free(c);
	return f;
}

/* step 0's gradient: both ranks' parts to logical, per tensor and whole;
 * padded rows 0; replicated tensors the same bits on both ranks */
static void s_check_grads(shared_t *sh, const model_tensor_t *ft, int nt, const float *gc, size_t n,
                          const model_config_t *cfg)
{
	model_tensor_t *lt = NULL;
	int nl = 0;
	size_t nloc = 0, mr = 0;
	if (llama_layout_tp(cfg, TPN, &lt, &nl, &nloc, &mr) < 0)
		exit(1);
	float *gg = calloc(n, sizeof(float));
	for (int r = 0; r < TPN; r++)
		tp_map_tables(lt, ft, nl, r, TPN, s_grads_of(sh, r), gg, false, r == 0);
	double num = 0, den = 0, worst = 0;
	int worst_i = 0;
	for (int i = 0; i < nt; i++) {
		double tn = 0, td = 0;
		for (size_t k = ft[i].offset; k < ft[i].offset + ft[i].numel; k++) {
			tn += ((double)gg[k] - gc[k]) * ((double)gg[k] - gc[k]);
			td += (double)gc[k] * gc[k];
		}
		num += tn;
		den += td;
		double e = sqrt(tn / (td > 0 ? td : 1e-30));
		if (e > worst || isnan(e)) {
			worst = isnan(e) ? INFINITY : e;
			worst_i = i;
		}
	}
	printf("     worst tensor: %s\n", ft[worst_i].name);
	expect(worst <= GRAD_BOUND, "step 0 gradient: worst tensor's rel err %.3g (bound %.3g)", worst, GRAD_BOUND);
	const double gerr = sqrt(num / den);
	expect(gerr <= GRAD_BOUND, "step 0 gradient: normwise rel err %.3g (bound %.3g)", gerr, GRAD_BOUND);
	/* rank 1's padded rows (the last row of embed_tokens and lm_head) */
	size_t pad_bad = 0, rep_diff = 0, rep_n = 0;
	const float *g1 = s_grads_of(sh, 1);
	const int C = cfg->n_embd, vl = (cfg->vocab_size + TPN - 1) / TPN, padded = vl * TPN - cfg->vocab_size;
	for (int i = 0; i < nl; i++) {
		const bool vocab = !strcmp(lt[i].name, "model.embed_tokens.weight") ||
				   !strcmp(lt[i].name, "lm_head.weight");
		for (size_t k = (size_t)(vl - padded) * C; vocab && k < (size_t)vl * C; k++)
			pad_bad += g1[lt[i].offset + k] != 0.0f;
		if (lt[i].tp_split == MODEL_TP_REPLICATED) {
			rep_n += lt[i].numel;
			rep_diff += memcmp(s_grads_of(sh, 0) + lt[i].offset, g1 + lt[i].offset,
					   lt[i].numel * sizeof(float)) != 0;
		}
	}
	expect(pad_bad == 0, "padded vocabulary rows' gradients 0 (%g nonzero of %g)", (double)pad_bad,
	       (double)padded * C * (cfg->tie_embeddings ? 1 : 2));
	expect(rep_diff == 0 && rep_n > 0, "replicated gradients bitwise equal on both ranks (%g tensors differ; %g floats)",
	       (double)rep_diff, (double)rep_n);
	free(gg), free(lt);
}

static void s_case(bool tied, model_streaming_t mode)
{
	model_config_t cfg = s_config(tied);
	if (mode != MODEL_DENSE)
		cfg.vocab_size = STREAM_V;
	printf("-- llama t=%d V %d %s embeddings, %s\n", TPN, cfg.vocab_size, tied ? "tied" : "untied",
	       mode == MODEL_DENSE ? "dense" : mode == MODEL_STREAM_GRADS ? "streamed gradients" : "streamed parameters");
	float lc[STEPS], *p0 = NULL, *gc = NULL;
	model_t *c = s_cpu(&cfg, lc, &p0, &gc);
	const size_t n = model_num_params(c);
	int nt = 0;
	const model_tensor_t *ft = model_tensors(c, &nt);
	const size_t cap = n; /* a rank's part is smaller than the whole */
	const size_t bytes = sizeof(shared_t) + (size_t)TPN * 2 * cap * sizeof(float);
	shared_t *sh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	memset(sh, 0, bytes);
	sh->cap = cap;
	char kv_dir[4200];
	snprintf(kv_dir, sizeof kv_dir, "%s/kv-%s-%d", s_dir, tied ? "tied" : "untied", (int)mode);
	case_t k = {cfg, mode, p0, ft, nt, kv_dir, sh};
	for (int r = 0; r < TPN; r++) {
		sh->r[r].status = 2;
		snprintf(sh->r[r].why, sizeof sh->r[r].why, "the rank did not finish");
	}
	int rc[TPN];
	tp_fork_ranks(TPN, kv_dir, s_rank_main, &k, rc);
	bool ok = true;
	for (int r = 0; r < TPN; r++)
		if (rc[r] != 0 || sh->r[r].status != 0) {
			printf("FAIL rank %d: exit %d: %s\n", r, rc[r], sh->r[r].why);
			ok = false;
		}
	if (!ok) {
		n_failed++;
		goto out;
	}
	expect(sh->r[0].table_same && sh->r[1].table_same,
	       "the local tables are llama_layout_tp's at t = 2 (%g + %g floats)", (double)sh->r[0].n_local,
	       (double)sh->r[1].n_local);
	const double l0 = fabs((double)sh->r[0].losses[0] - lc[0]) / lc[0];
	expect(l0 <= LOSS_REL, "step 0 loss: rel err %.3g (bound %.3g)", l0, LOSS_REL);
	expect(!memcmp(&sh->r[0].losses[0], &sh->r[1].losses[0], sizeof(float)),
	       "step 0 loss the same bits on both ranks (%.7g, %.7g)", sh->r[0].losses[0], sh->r[1].losses[0]);
	s_check_grads(sh, ft, nt, gc, n, &cfg);
	const double fc = s_cpu_flops_t2(&cfg);
	expect(sh->r[0].flops == fc, "FLOPs a token the CPU row's at t = 2 (%g, %g)", sh->r[0].flops, fc);
	printf("     rank 0 at t = 2 / t = 1: activations %zu / %zu bytes, parameters %zu / %zu bytes\n",
	       sh->r[0].act[0], sh->r[0].act[1], sh->r[0].param_bytes[0], sh->r[0].param_bytes[1]);
	/* MODEL_STREAM_ALL: no parameter buffer at either t */
	const bool pb = mode == MODEL_STREAM_ALL ? sh->r[0].param_bytes[0] == sh->r[0].param_bytes[1]
						 : sh->r[0].param_bytes[0] < sh->r[0].param_bytes[1];
	expect(sh->r[0].act[0] < sh->r[0].act[1] && pb,
	       "a rank's activations and parameters below t = 1's (%.3g, %.3g of them)",
	       (double)sh->r[0].act[0] / (double)sh->r[0].act[1],
	       (double)sh->r[0].param_bytes[0] / (double)sh->r[0].param_bytes[1]);
	if (mode == MODEL_DENSE) {
		double lerr = 0;
		for (int s = 0; s < STEPS; s++) {
			const double e = fabs((double)sh->r[0].losses[s] - lc[s]) / fabs((double)lc[s]);
			lerr = e > lerr ? e : lerr;
			printf("     step %d loss cpu %.6f gpu t=2 %.6f\n", s, lc[s], sh->r[0].losses[s]);
		}
		expect(lerr <= LOSS_REL, "every step's loss: max rel err %.3g (bound %.3g)", lerr, LOSS_REL);
		expect(!memcmp(sh->r[0].losses, sh->r[1].losses, sizeof sh->r[0].losses),
		       "every step's loss the same bits on both ranks (%g of %g steps)", (double)STEPS, (double)STEPS);
		expect(sh->r[0].accum_bad + sh->r[1].accum_bad == 0,
		       "two backwards accumulate: exactly twice one's gradient (%g + %g floats differ)",
		       (double)sh->r[0].accum_bad, (double)sh->r[1].accum_bad);
		expect(sh->r[0].ready_bad + sh->r[1].ready_bad == 0,
		       "grads-ready ranges cover every parameter once (%g + %g wrong)", (double)sh->r[0].ready_bad,
		       (double)sh->r[1].ready_bad);
		model_tensor_t *lt = NULL;
		int nl = 0;
		size_t nloc = 0, mr = 0;
		if (llama_layout_tp(&cfg, TPN, &lt, &nl, &nloc, &mr) < 0)
			exit(1);
		size_t diff = 0;
		for (int i = 0; i < nl; i++)
			if (lt[i].tp_split == MODEL_TP_REPLICATED)
				diff += memcmp(s_params_of(sh, 0) + lt[i].offset, s_params_of(sh, 1) + lt[i].offset,
					       lt[i].numel * sizeof(float)) != 0;
		expect(diff == 0, "replicated parameters the same bits on both ranks after %g steps (%g differ)",
		       (double)STEPS, (double)diff);
		free(lt);
	} else {
		expect(sh->r[0].stream_bad + sh->r[1].stream_bad == 0 && sh->r[0].too_big + sh->r[1].too_big == 0,
		       "every float's gradient handed out as due (%g wrong), ranges within max_range (%g too large)",
		       (double)(sh->r[0].stream_bad + sh->r[1].stream_bad), (double)(sh->r[0].too_big + sh->r[1].too_big));
	}
	printf("     tp traffic: %g floats sent by rank 0; %g all-gathers, %g reduce-scatters, %g all-reduces\n",
	       sh->r[0].sent, (double)sh->r[0].ag_calls, (double)sh->r[0].rs_calls, (double)sh->r[0].ar_calls);
	expect(sh->r[0].sent > 0 && sh->r[0].ag_calls > 0 && sh->r[0].rs_calls > 0 && sh->r[0].ar_calls > 0,
	       "the TP traffic counted (%g floats, %g all-reduces)", sh->r[0].sent, (double)sh->r[0].ar_calls);
out:
	munmap(sh, bytes);
	free(p0), free(gc);
	model_free(c);
}

int main(int argc, char **argv)
{
	const char *which = argc > 1 ? argv[1] : "dense";
	model_streaming_t mode = !strcmp(which, "grads") ? MODEL_STREAM_GRADS
				 : !strcmp(which, "all") ? MODEL_STREAM_ALL : MODEL_DENSE;
	if (mode == MODEL_DENSE && strcmp(which, "dense") != 0) {
		fprintf(stderr, "usage: %s [dense|grads|all]\n", argv[0]);
		return 2;
	}
	char why[600];
	int count = tp_probe(why, sizeof why);
	if (count == 0) {
		printf("gpu-tp-llama: no CUDA GPU: %s; skipping\n", why);
		return GPU_TEST_SKIP;
	}
	if (count < TPN) {
		printf("gpu-tp-llama: %d GPU(s), fewer than %d; skipping\n", count, TPN);
		return GPU_TEST_SKIP;
	}
	snprintf(s_dir, sizeof s_dir, "%s/tpllama-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(s_dir)) {
		perror("mkdtemp");
		return 2;
	}
	s_case(false, mode);
	s_case(true, mode);
	tp_remove_dir(s_dir);
	if (n_failed) {
		printf("%d check(s) failed\n", n_failed);
		return 1;
	}
	printf("all checks passed\n");
	return 0;
}
