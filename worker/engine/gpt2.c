/*
 * gpt2: the GPT-2 model on the CPU (see gpt2.h): the parameter table, the
 * activation arena, and forward and backward as a sequence of oneDNN GEMMs
 * (matmul.c) and C kernels (kernels.c).
 *
 * Layout. Parameters and gradients are two flat fp32 buffers in Hugging Face
 * order. Linear weights are stored (in, out) as in HF's Conv1D, so a layer is
 * y = x @ W + b: forward is a plain GEMM, dx = dy @ W^T and dW += x^T @ dy use
 * transposed memory descriptors. The LM head is tied to wte (V, C): logits =
 * x @ wte^T. Activations live in one 64-byte aligned arena sized for
 * (max_B, max_T) at create time; per-layer tensors are indexed with the max
 * sizes, so a smaller (B, T) simply uses the front of each slice. Backward
 * turns the logits into their gradient in place (the logits are not valid
 * after gpt2_backward) and recomputes GELU(fch) instead of keeping it.
 * Residual additions are fused into the projection GEMMs (oneDNN's sum
 * post-op: res = x, then res += y @ W + b).
 *
 * bf16 mode: the whole flat parameter buffer is converted to a bf16 copy at
 * each forward (same offsets), and each GEMM's activation operands are
 * converted into two bf16 scratch buffers; GEMMs accumulate and write fp32,
 * and everything else (master weights, gradients, the C kernels) stays fp32.
 *
 * Misuse that the contract rules out (a batch larger than the model was
 * created for, a token id out of range, backward without a forward with
 * targets) and oneDNN failures are bugs: they print a line and exit with
 * EX_SOFTWARE (70).
 *
 * Floating point: forward, backward and the optimizer set flush-to-zero and
 * denormals-are-zero on the calling thread and the OpenMP threads
 * (kernel_flush_denormals); denormal moments and gradients are otherwise
 * very slow and carry no information.
 *
 * Determinism. The C kernels reduce in an order fixed by the shapes alone
 * (kernels.h). oneDNN's GEMMs are deterministic run to run for a fixed shape
 * and thread count. Across thread counts, measured here with oneDNN 2.6 on
 * an AVX-512 machine: see DETERMINISM_NOTE below and
 * tests/worker/engine/test_determinism.c.
 */
#include "gpt2.h"
#include "gpt2_priv.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "initrand.h"
#include "kernels.h"
#include "matmul.h"
#include "modeltab.h"
#include "tp.h"

/*
 * DETERMINISM_NOTE. Guaranteed: same seed, same shapes, same thread count ->
 * bitwise identical results (the C kernels reduce in a fixed order, and a
 * oneDNN primitive for a fixed shape and thread count runs the same kernel
 * with the same blocking). Initialisation and the optimizer are independent
 * of the thread count. Measured, not guaranteed: with oneDNN 2.6
 * (brg:avx512_core kernels) training runs gave bitwise identical losses and
 * parameters with 1, 2 and 3 OpenMP threads, in fp32 and bf16, for GPT-2
 * shapes (2 layers, C 384 and 768, V 50257, B*T 256 and 512) and the test's
 * tiny model. oneDNN does not promise this: its matmul chooses blocking and
 * may split the K dimension by the number of threads, which reorders fp32
 * sums, so other shapes or another oneDNN build may differ in the last bits
 * between thread counts. On an AMD EPYC without AVX-512 (oneDNN's AVX2
 * kernels) the test model's 10 steps with 1 and 2 threads did differ, by
 * at most 2e-8 relative in the grad norm. test_determinism reports it
 * without asserting it; train-determinism bounds it at 1e-5.
 */

/* ---- allocation and layout ---- */

/* Carve `n` elements of `size` bytes from the arena at *off (64-byte aligned). */
static void *s_carve(char *base, size_t *off, size_t n, size_t size)
{
	void *p = base ? base + *off : NULL;
	*off += (n * size + 63) / 64 * 64;
	return p;
}

/* Lay out the arena for (max_B, max_T) on TP rank parts of tp ranks (1:
 * none): residual-stream tensors hold n = N/tp rows (sequence parallel),
 * the others all N rows of this rank's heads / features / vocabulary
 * block. With base NULL, only measures it. */
static size_t s_layout(acts_t *a, char *base, const gpt2_config_t *cfg, int max_B, int max_T,
                       bool bf16, int tp)
{
	size_t t = tp > 1 ? (size_t)tp : 1;
	size_t L = (size_t)cfg->n_layer, C = (size_t)cfg->n_embd, V = ((size_t)cfg->vocab_size + t - 1) / t;
	size_t H = (size_t)cfg->n_head / t, Cf = (size_t)cfg->n_embd / t;
	size_t N = (size_t)max_B * (size_t)max_T, n = (N + t - 1) / t;
	size_t f = sizeof(float);
	size_t off = 0;
	a->encoded = s_carve(base, &off, n * C, f);
	a->ln1 = s_carve(base, &off, L * n * C, f);
	a->ln1_mean = s_carve(base, &off, L * n, f);
	a->ln1_rstd = s_carve(base, &off, L * n, f);
	a->qkv = s_carve(base, &off, L * N * 3 * Cf, f);
	a->att = s_carve(base, &off, L * N * H * (size_t)max_T, f);
	a->atty = s_carve(base, &off, L * N * Cf, f);
	a->res2 = s_carve(base, &off, L * n * C, f);
	a->ln2 = s_carve(base, &off, L * n * C, f);
	a->ln2_mean = s_carve(base, &off, L * n, f);
	a->ln2_rstd = s_carve(base, &off, L * n, f);
	a->fch = s_carve(base, &off, L * N * 4 * Cf, f);
	a->res3 = s_carve(base, &off, L * n * C, f);
	a->lnf = s_carve(base, &off, n * C, f);
	a->lnf_mean = s_carve(base, &off, n, f);
	a->lnf_rstd = s_carve(base, &off, n, f);
	a->logits = s_carve(base, &off, N * V, f);
	a->lse = s_carve(base, &off, N, f);
	a->losses = s_carve(base, &off, N, f);
	a->dres = s_carve(base, &off, n * C, f);
	a->dbig = s_carve(base, &off, N * 4 * Cf, f);
	a->dsmall = s_carve(base, &off, N * C, f);
	a->att_scratch = s_carve(base, &off,
				 kernel_attention_scratch_floats(max_B, max_T, (int)Cf, (int)H), f);
	a->inputs = s_carve(base, &off, N, sizeof(int32_t));
	a->targets = s_carve(base, &off, N, sizeof(int32_t));
	a->full = a->dloc = a->ce_scratch = NULL;
	if (t > 1) {
		a->full = s_carve(base, &off, N * C, f);
		a->dloc = s_carve(base, &off, n * C, f);
		a->ce_scratch = s_carve(base, &off, tp_ce_scratch_floats((int)t, (int)N), f);
	}
	a->a16 = NULL;
	a->b16 = NULL;
	if (bf16) {
		size_t wide = V > 4 * Cf ? V : 4 * Cf;
		a->a16 = s_carve(base, &off, N * (wide > C ? wide : C), sizeof(uint16_t));
		a->b16 = s_carve(base, &off, N * (4 * Cf > C ? 4 * Cf : C), sizeof(uint16_t));
	}
	return off;
}

/* The same arena size as s_layout, in double so that absurd sizes cannot
 * overflow before they are refused. */
static double s_arena_bytes_estimate(const gpt2_config_t *cfg, double B, double T, bool bf16)
{
	double L = cfg->n_layer, C = cfg->n_embd, V = cfg->vocab_size, H = cfg->n_head;
	double N = B * T;
	double floats = N * (8 * C + V + 4) + B * C * (T + 16) + N * H * T +
	                L * N * (12 * C + 4 + H * T);
	double bytes = 4 * floats + 8 * N;
	if (bf16)
		bytes += 2 * N * ((V > 4 * C ? V : 4 * C) + 4 * C);
	return bytes + 64.0 * 32;
}

/* A tensor of logical shape (d0, d1), cut along `split` (-1: replicated)
 * across the model's tp_size ranks; dim 0 of wte is padded to a multiple
 * of tp_size (model.h). */
static void s_add_tensor(gpt2_t *m, const char *name, int ndim, int64_t d0, int64_t d1, bool decay,
                         int split)
{
	int64_t tp = m->tp_size > 1 ? m->tp_size : 1;
	modeltab_add(m->tensors, &m->n_tensors, &m->w.n_params, name, ndim, d0, d1, decay, split,
	             tp);
}

static void s_build_tensor_table(gpt2_t *m)
{
	const gpt2_config_t *c = &m->cfg;
	int64_t C = c->n_embd;
	char name[MODEL_TENSOR_NAME_MAX];
	const int R = MODEL_TP_REPLICATED;
	s_add_tensor(m, "wte.weight", 2, c->vocab_size, C, true, 0);
	s_add_tensor(m, "wpe.weight", 2, c->seq_len, C, true, R);
	for (int l = 0; l < c->n_layer; l++) {
#define LAYER_TENSOR(suffix, ndim, d0, d1, decay, split)                  \
	do {                                                              \
		snprintf(name, sizeof name, "h.%d." suffix, l);           \
		s_add_tensor(m, name, ndim, d0, d1, decay, split);        \
	} while (0)
		LAYER_TENSOR("ln_1.weight", 1, C, 0, false, R);
		LAYER_TENSOR("ln_1.bias", 1, C, 0, false, R);
		LAYER_TENSOR("attn.c_attn.weight", 2, C, 3 * C, true, 1);  /* the "qkv" rule */
		LAYER_TENSOR("attn.c_attn.bias", 1, 3 * C, 0, false, 0);   /* the "qkv" rule */
		LAYER_TENSOR("attn.c_proj.weight", 2, C, C, true, 0);
		LAYER_TENSOR("attn.c_proj.bias", 1, C, 0, false, R);
		LAYER_TENSOR("ln_2.weight", 1, C, 0, false, R);
		LAYER_TENSOR("ln_2.bias", 1, C, 0, false, R);
		LAYER_TENSOR("mlp.c_fc.weight", 2, C, 4 * C, true, 1);
		LAYER_TENSOR("mlp.c_fc.bias", 1, 4 * C, 0, false, 0);
		LAYER_TENSOR("mlp.c_proj.weight", 2, 4 * C, C, true, 0);
		LAYER_TENSOR("mlp.c_proj.bias", 1, C, 0, false, R);
#undef LAYER_TENSOR
	}
	s_add_tensor(m, "ln_f.weight", 1, C, 0, false, R);
	s_add_tensor(m, "ln_f.bias", 1, C, 0, false, R);
}

int gpt2_config_check(const gpt2_config_t *cfg, int max_B, int max_T, char *err, size_t errlen)
{
	if (modeltab_check_positive("model.n_layer", cfg->n_layer, err, errlen) ||
	    modeltab_check_positive("model.n_head", cfg->n_head, err, errlen) ||
	    modeltab_check_positive("model.n_embd", cfg->n_embd, err, errlen) ||
	    modeltab_check_positive("model.vocab_size", cfg->vocab_size, err, errlen) ||
	    modeltab_check_positive("model.seq_len", cfg->seq_len, err, errlen) ||
	    modeltab_check_positive("train.batch_size", max_B, err, errlen))
		return -1;
	if (cfg->n_embd % cfg->n_head != 0) {
		snprintf(err, errlen, "model.n_embd (%d) must be divisible by model.n_head (%d)",
			 cfg->n_embd, cfg->n_head);
		return -1;
	}
	if (max_T < 1 || max_T > cfg->seq_len) {
		snprintf(err, errlen, "the sequence length (%d) must be between 1 and model.seq_len (%d)",
			 max_T, cfg->seq_len);
		return -1;
	}
	return 0;
}

gpt2_t *gpt2_create(const gpt2_config_t *cfg, int max_B, int max_T, gpt2_precision_t precision,
                    char *err, size_t errlen)
{
	return gpt2_create_streamed(cfg, max_B, max_T, precision, MODEL_DENSE, NULL, err, errlen);
}

static model_range_t s_range(const gpt2_tensor_t *first, const gpt2_tensor_t *last)
{
	return (model_range_t){first->offset, last->offset + last->numel};
}

/* The wte block k: rows [k * wte_rows, min(V, (k + 1) * wte_rows)). */
model_range_t gpt2_p_chunk(const gpt2_t *m, int k, int *ret_v0, int *ret_v1)
{
	int V = (int)m->tensors[0].shape[0], C = m->cfg.n_embd;
	int v0 = k * m->wte_rows, v1 = v0 + m->wte_rows < V ? v0 + m->wte_rows : V;
	*ret_v0 = v0;
	*ret_v1 = v1;
	return (model_range_t){(size_t)v0 * (size_t)C, (size_t)v1 * (size_t)C};
}

/* The ranges and the order a step fetches them in. */
static bool s_build_ranges(gpt2_t *m)
{
	const int L = m->cfg.n_layer, C = m->cfg.n_embd, V = (int)m->tensors[0].shape[0];
	size_t layer = 12 * (size_t)C * C + 13 * (size_t)C;
	/* Streamed, a wte block is at most a layer, so that one buffer fits any range. */
	m->wte_rows = m->w.mode == MODEL_DENSE ? V : (int)(layer / (size_t)C < (size_t)V ? layer / (size_t)C : (size_t)V);
	if (m->wte_rows < 1)
		m->wte_rows = 1;
	m->n_chunks = (V + m->wte_rows - 1) / m->wte_rows;
	m->r_wpe = s_range(&m->tensors[1], &m->tensors[1]);
	m->r_lnf = s_range(&m->tensors[m->n_tensors - 2], &m->tensors[m->n_tensors - 1]);
	m->r_layers = calloc((size_t)L, sizeof *m->r_layers);
	m->n_seq_fwd = 1 + 2 * m->n_chunks + L + 1;
	m->n_seq_bwd = m->n_chunks + 1 + L;
	m->seq_fwd = calloc((size_t)m->n_seq_fwd, sizeof(model_range_t));
	m->seq_bwd = calloc((size_t)m->n_seq_bwd, sizeof(model_range_t));
	if (!m->r_layers || !m->seq_fwd || !m->seq_bwd)
		return false;
	int v0, v1;
	m->max_range = (size_t)m->wte_rows * (size_t)C;
	for (int l = 0; l < L; l++) {
		const gpt2_tensor_t *t = &m->tensors[2 + l * N_LAYER_TENSORS];
		m->r_layers[l] = s_range(t, t + N_LAYER_TENSORS - 1);
	}
	model_range_t all[] = {m->r_wpe, m->r_lnf, L > 0 ? m->r_layers[0] : m->r_lnf};
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		if (all[i].hi - all[i].lo > m->max_range)
			m->max_range = all[i].hi - all[i].lo;
	int f = 0, b = 0;
	m->seq_fwd[f++] = m->r_wpe;
	for (int k = 0; k < m->n_chunks; k++)
		m->seq_fwd[f++] = gpt2_p_chunk(m, k, &v0, &v1);
	for (int l = 0; l < L; l++)
		m->seq_fwd[f++] = m->r_layers[l];
	m->seq_fwd[f++] = m->r_lnf;
	for (int k = 0; k < m->n_chunks; k++) {
		m->seq_fwd[f++] = gpt2_p_chunk(m, k, &v0, &v1);
		m->seq_bwd[b++] = gpt2_p_chunk(m, k, &v0, &v1);
	}
	m->seq_bwd[b++] = m->r_lnf;
	for (int l = L - 1; l >= 0; l--)
		m->seq_bwd[b++] = m->r_layers[l];
	return true;
}

gpt2_t *gpt2_create_streamed(const gpt2_config_t *cfg, int max_B, int max_T,
                             gpt2_precision_t precision, model_streaming_t mode,
                             const model_stream_t *stream, char *err, size_t errlen)
{
	gpt2_t *m = NULL;
	(void)gpt2_new(cfg, max_B, max_T, precision, mode, stream, &m, err, errlen);
	return m;
}

int gpt2_new(const gpt2_config_t *cfg, int max_B, int max_T, gpt2_precision_t precision,
             model_streaming_t mode, const model_stream_t *stream, gpt2_t **ret_model, char *err,
             size_t errlen)
{
	return gpt2_new_tp(cfg, max_B, max_T, precision, mode, stream, NULL, ret_model, err, errlen);
}

/* The TP group's rules for GPT-2: heads and the sequence divide by t. */
static int s_tp_check(const gpt2_config_t *cfg, int max_T, const model_tp_t *tp, char *err,
                      size_t errlen)
{
	static const char *const names[] = {"model.n_head", "the sequence length (sequence parallelism)"};
	int dims[] = {cfg->n_head, max_T};
	return tp_check(tp, names, dims, tp && tp->size > 1 ? 2 : 0, err, errlen);
}

int gpt2_new_tp(const gpt2_config_t *cfg, int max_B, int max_T, gpt2_precision_t precision,
                model_streaming_t mode, const model_stream_t *stream, const model_tp_t *tp,
                gpt2_t **ret_model, char *err, size_t errlen)
{
	if (mode != MODEL_DENSE && (!stream || !stream->grad_begin || !stream->grad_end ||
				   (mode == MODEL_STREAM_ALL && (!stream->fetch || !stream->release)))) {
		snprintf(err, errlen, "internal error: a streamed model needs its stream functions");
		return -EINVAL;
	}
	if (gpt2_config_check(cfg, max_B, max_T, err, errlen) < 0 ||
	    s_tp_check(cfg, max_T, tp, err, errlen) < 0)
		return -EINVAL;
	bool bf16 = precision == GPT2_PRECISION_BF16;
	double C = cfg->n_embd, V = cfg->vocab_size, L = cfg->n_layer;
	double n_params = V * C + (double)cfg->seq_len * C + L * (12 * C * C + 13 * C) + 2 * C;
	/* parameters, gradients, and the trainer's two AdamW moments; plus the bf16
	 * copy. Streamed, the trainer holds shards and the model less: counted as
	 * the parameter replica alone (ZeRO-2), or nothing (ZeRO-3). */
	double state_bytes = mode == MODEL_DENSE ? n_params * (16.0 + (bf16 ? 2.0 : 0.0))
		: mode == MODEL_STREAM_GRADS ? n_params * (4.0 + (bf16 ? 2.0 : 0.0)) : 0.0;
	double act_bytes = s_arena_bytes_estimate(cfg, max_B, max_T, bf16);
	double avail = modelcpu_available_bytes();
	if (state_bytes > avail) {
		snprintf(err, errlen,
			 "model does not fit in memory: needs %.1f GiB for %.0f parameters, their gradients"
			 " and AdamW state, but %.1f GiB is available; lower model.n_layer, model.n_embd or"
			 " model.vocab_size",
			 state_bytes / 1073741824.0, n_params, avail / 1073741824.0);
		return -ENOMEM;
	}
	if (state_bytes + act_bytes > avail || (double)max_B * max_T > 2147483647.0 / 4) {
		snprintf(err, errlen,
			 "batch does not fit in memory: needs %.1f GiB for activations (train.batch_size %d"
			 " x model.seq_len %d tokens) and %.1f GiB for parameters, gradients and AdamW"
			 " state, but %.1f GiB is available; lower train.batch_size or model.seq_len",
			 act_bytes / 1073741824.0, max_B, max_T, state_bytes / 1073741824.0,
			 avail / 1073741824.0);
		return -ENOMEM;
	}

	gpt2_t *m = calloc(1, sizeof *m);
	if (!m)
		goto fail_nomem;
	m->cfg = *cfg;
	m->max_B = max_B;
	m->max_T = max_T;
	m->precision = precision;
	m->tp_size = tp && tp->size > 1 ? tp->size : 1;
	m->w.mode = mode;
	if (stream)
		m->w.stream = *stream;
	m->tensors = calloc((size_t)(2 + N_LAYER_TENSORS * cfg->n_layer + 2), sizeof *m->tensors);
	if (!m->tensors)
		goto fail_nomem;
	s_build_tensor_table(m);
	if (!s_build_ranges(m))
		goto fail_nomem;
	if (mode != MODEL_STREAM_ALL) {
		m->w.params = modelcpu_alloc(m->w.n_params * sizeof(float));
		if (!m->w.params)
			goto fail_nomem;
		memset(m->w.params, 0, m->w.n_params * sizeof(float));
	}
	if (mode == MODEL_DENSE) {
		m->w.grads = modelcpu_alloc(m->w.n_params * sizeof(float));
		if (!m->w.grads)
			goto fail_nomem;
		memset(m->w.grads, 0, m->w.n_params * sizeof(float));
	}
	if (bf16) {
		size_t n16 = mode == MODEL_STREAM_ALL ? m->max_range : m->w.n_params;
		m->w.params16 = modelcpu_alloc(n16 * sizeof(uint16_t));
		if (!m->w.params16)
			goto fail_nomem;
	}
	m->arena_bytes = s_layout(&m->a, NULL, cfg, max_B, max_T, bf16, m->tp_size);
	m->arena = modelcpu_alloc(m->arena_bytes);
	if (!m->arena)
		goto fail_nomem;
	s_layout(&m->a, m->arena, cfg, max_B, max_T, bf16, m->tp_size);
	if (tp_init(&m->tp, tp, m->tensors, m->n_tensors) < 0)
		goto fail_nomem;
	m->mm = matmul_cache_create(bf16, err, errlen);
	if (!m->mm)
		goto fail;
	*ret_model = m;
	return 0;

fail_nomem:
	snprintf(err, errlen,
		 "batch does not fit in memory: cannot allocate %.1f GiB for activations"
		 " (train.batch_size %d x model.seq_len %d tokens) and %.1f GiB for parameters and"
		 " gradients; lower train.batch_size or model.seq_len",
		 act_bytes / 1073741824.0, max_B, max_T, n_params * 8.0 / 1073741824.0);
	gpt2_free(m);
	return -ENOMEM;
fail:
	gpt2_free(m);
	return -EIO;
}

int gpt2_layout(const gpt2_config_t *cfg, gpt2_tensor_t **ret_tensors, int *ret_n,
                size_t *ret_max_range)
{
	return gpt2_layout_tp(cfg, 1, ret_tensors, ret_n, ret_max_range);
}

int gpt2_layout_tp(const gpt2_config_t *cfg, int tp_size, gpt2_tensor_t **ret_tensors, int *ret_n,
                   size_t *ret_max_range)
{
	gpt2_t *m = calloc(1, sizeof *m);
	if (!m)
		return -ENOMEM;
	m->cfg = *cfg;
	m->tp_size = tp_size > 1 ? tp_size : 1;
	m->w.mode = MODEL_STREAM_GRADS;
	m->tensors = calloc((size_t)(2 + N_LAYER_TENSORS * cfg->n_layer + 2), sizeof *m->tensors);
	if (!m->tensors || (s_build_tensor_table(m), !s_build_ranges(m))) {
		gpt2_free(m);
		return -ENOMEM;
	}
	*ret_tensors = m->tensors;
	*ret_n = m->n_tensors;
	*ret_max_range = m->max_range;
	m->tensors = NULL;
	gpt2_free(m);
	return 0;
}

void gpt2_free(gpt2_t *m)
{
	if (!m)
		return;
	matmul_cache_free(m->mm);
	tp_free(&m->tp);
	free(m->arena);
	free(m->w.params16);
	free(m->w.grads);
	free(m->w.params);
	free(m->r_layers);
	free(m->seq_fwd);
	free(m->seq_bwd);
	free(m->tensors);
	free(m);
}

const gpt2_config_t *gpt2_config(const gpt2_t *m)
{
	return &m->cfg;
}

size_t gpt2_num_params(const gpt2_t *m)
{
	return m->w.n_params;
}

float *gpt2_params(gpt2_t *m)
{
	return m->w.params;
}

float *gpt2_grads(gpt2_t *m)
{
	return m->w.grads;
}

int gpt2_num_tensors(const gpt2_t *m)
{
	return m->n_tensors;
}

const gpt2_tensor_t *gpt2_tensors(const gpt2_t *m)
{
	return m->tensors;
}

const gpt2_tensor_t *gpt2_tensor(const gpt2_t *m, int i)
{
	return i >= 0 && i < m->n_tensors ? &m->tensors[i] : NULL;
}

const gpt2_tensor_t *gpt2_tensor_by_name(const gpt2_t *m, const char *name)
{
	for (int i = 0; i < m->n_tensors; i++)
		if (strcmp(m->tensors[i].name, name) == 0)
			return &m->tensors[i];
	return NULL;
}

size_t gpt2_activation_bytes(const gpt2_t *m)
{
	return m->arena_bytes;
}

size_t gpt2_param_bytes(const gpt2_t *m)
{
	return modelcpu_param_bytes(&m->w, m->max_range);
}

size_t gpt2_grad_bytes(const gpt2_t *m)
{
	return modelcpu_grad_bytes(&m->w);
}

size_t gpt2_max_range(const gpt2_t *m)
{
	return m->max_range;
}

double gpt2_flops_per_token(const gpt2_t *m, int T)
{
	int t = m->tp_size > 1 ? m->tp_size : 1;
	return 6.0 * (double)m->w.n_params + 6.0 * m->cfg.n_layer * m->cfg.n_embd / t * (double)T;
}

void gpt2_tp_comm(const gpt2_t *m, model_tp_comm_t *ret)
{
	*ret = m->tp.vol;
}

/* ---- initialisation ---- */

/* The logical elements [from, from + n) of tensor i into p. */
typedef struct {
	const gpt2_t *m;
	int i;
	uint64_t seed;
	float *out;  /* where local element `skip` of the tensor goes */
	size_t skip;
} init_ctx_t;

static void s_init_segment(void *vctx, size_t local, size_t logical, size_t n)
{
	const init_ctx_t *c = vctx;
	const gpt2_tensor_t *t = &c->m->tensors[c->i];
	float *p = c->out + (local - c->skip);
	if (t->ndim == 2) {
		bool resid = strstr(t->name, "c_proj.weight") != NULL;
		double resid_std = 0.02 / sqrt(2.0 * c->m->cfg.n_layer);
		initrand_normal(p, logical, logical + n, c->seed, (uint64_t)c->i,
			      resid ? resid_std : 0.02);
	} else {
		const char *dot = strrchr(t->name, '.');
		bool is_ln = strstr(t->name, "ln_") != NULL;
		float v = is_ln && strcmp(dot, ".weight") == 0 ? 1.0f : 0.0f;
		for (size_t k = 0; k < n; k++)
			p[k] = v;
	}
}

/* Under TP a local element gets its logical element's value (tp_segments)
 * and padded vocabulary rows 0; with t = 1 the one segment is the tensor. */
void gpt2_init_range(const gpt2_t *m, uint64_t seed, size_t lo, size_t hi, float *out)
{
	for (int i = 0; i < m->n_tensors; i++) {
		const gpt2_tensor_t *t = &m->tensors[i];
		size_t a = t->offset > lo ? t->offset : lo;
		size_t b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
		if (a >= b)
			continue;
		init_ctx_t c = {m, i, seed, out + (a - lo), a - t->offset};
		if (m->tp_size > 1)
			memset(out + (a - lo), 0, (b - a) * sizeof(float));
		tp_segments(t, m->tp.g.rank, m->tp_size, a - t->offset, b - t->offset, s_init_segment, &c);
	}
}

void gpt2_init_params(gpt2_t *m, uint64_t seed)
{
	if (m->w.params)
		gpt2_init_range(m, seed, 0, m->w.n_params, m->w.params);
}

/* ---- forward and backward ---- */

void gpt2_p_seq_start(gpt2_t *m, const model_range_t *seq, int n)
{
	modelcpu_seq_start(&m->w, seq, n);
}

const float *gpt2_p_fetch(gpt2_t *m, model_range_t r)
{
	return modelcpu_fetch(&m->w, r, "gpt2");
}

void gpt2_p_release(gpt2_t *m, const float *p)
{
	modelcpu_release(&m->w, p);
}

float *gpt2_p_grad_begin(gpt2_t *m, model_range_t r)
{
	return modelcpu_grad_begin(&m->w, r);
}

void gpt2_p_grad_end(gpt2_t *m, float *g, model_range_t r)
{
	modelcpu_grad_end(&m->w, g, r);
}

void gpt2_p_gemm(gpt2_t *m, int M, int N, int K, const float *A, int64_t lda, bool trans_a,
                 const float *B, bool trans_b, const float *bias, float *C, int64_t ldc,
                 bool accumulate)
{
	modelcpu_gemm(&m->w, m->mm, m->a.a16, m->a.b16, M, N, K, A, lda, trans_a, B, trans_b, bias,
	              C, ldc, accumulate);
}

float gpt2_forward(gpt2_t *m, const int32_t *inputs, const int32_t *targets, int B, int T)
{
	const int L = m->cfg.n_layer, C = m->cfg.n_embd, V = m->cfg.vocab_size, H = m->cfg.n_head;
	if (B < 1 || B > m->max_B || T < 1 || T > m->max_T) {
		fprintf(stderr, "ringworker: fatal: gpt2_forward: batch %d x %d exceeds the model's %d x %d\n",
			B, T, m->max_B, m->max_T);
		exit(EX_SOFTWARE);
	}
	const int N = B * T;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T;
	acts_t *a = &m->a;
	for (int n = 0; n < N; n++) {
		if (inputs[n] < 0 || inputs[n] >= V || (targets && (targets[n] < 0 || targets[n] >= V))) {
			fprintf(stderr, "ringworker: fatal: gpt2_forward: token id out of [0, %d)\n", V);
			exit(EX_SOFTWARE);
		}
	}
	kernel_flush_denormals();
	memcpy(a->inputs, inputs, (size_t)N * sizeof(int32_t));
	m->B = B;
	m->T = T;
	m->have_targets = false;
	if (m->w.params16 && m->w.mode != MODEL_STREAM_ALL)
		kernel_to_bf16(m->w.params16, m->w.params, m->w.n_params);
	if (m->tp_size > 1) {
		if (T % m->tp_size != 0) {
			fprintf(stderr, "ringworker: fatal: gpt2_forward: T %d is not divisible by the"
				" %d tensor-parallel ranks\n", T, m->tp_size);
			exit(EX_SOFTWARE);
		}
		return gpt2_tp_forward(m, inputs, targets, B, T);
	}
	gpt2_p_seq_start(m, m->seq_fwd, m->n_seq_fwd);

	/* encoded = wpe[t] + wte[token], wte by blocks of rows */
	const float *wpe = gpt2_p_fetch(m, m->r_wpe);
	kernel_embed_positions(a->encoded, wpe, B, T, C);
	gpt2_p_release(m, wpe);
	for (int k = 0; k < m->n_chunks; k++) {
		int v0, v1;
		const float *w = gpt2_p_fetch(m, gpt2_p_chunk(m, k, &v0, &v1));
		kernel_embed_tokens(a->encoded, inputs, w, v0, v1, N, C);
		gpt2_p_release(m, w);
	}
	const float *x = a->encoded;
	for (int l = 0; l < L; l++) {
		float *ln1 = LAYER_SLICE(a->ln1, l, C), *ln2 = LAYER_SLICE(a->ln2, l, C);
		float *qkv = LAYER_SLICE(a->qkv, l, 3 * C), *atty = LAYER_SLICE(a->atty, l, C);
		float *att = LAYER_SLICE(a->att, l, (size_t)H * m->max_T);
		float *res2 = LAYER_SLICE(a->res2, l, C), *res3 = LAYER_SLICE(a->res3, l, C);
		float *fch = LAYER_SLICE(a->fch, l, 4 * C);
		const model_range_t r = m->r_layers[l];
		const float *P = gpt2_p_fetch(m, r);
#define LP(which) gpt2_p_at(m, P, r.lo, l, (which))

		kernel_layernorm_forward(ln1, LAYER_SLICE(a->ln1_mean, l, 1), LAYER_SLICE(a->ln1_rstd, l, 1),
					 x, LP(T_LN1_W), LP(T_LN1_B), N, C);
		gpt2_p_gemm(m, N, 3 * C, C, ln1, 0, false, LP(T_QKV_W), false, LP(T_QKV_B), qkv, 0, false);
		kernel_attention_forward(atty, att, qkv, a->att_scratch, B, T, C, H);
		memcpy(res2, x, (size_t)N * C * sizeof(float));
		gpt2_p_gemm(m, N, C, C, atty, 0, false, LP(T_PROJ_W), false, LP(T_PROJ_B), res2, 0, true);
		kernel_layernorm_forward(ln2, LAYER_SLICE(a->ln2_mean, l, 1), LAYER_SLICE(a->ln2_rstd, l, 1),
					 res2, LP(T_LN2_W), LP(T_LN2_B), N, C);
		gpt2_p_gemm(m, N, 4 * C, C, ln2, 0, false, LP(T_FC_W), false, LP(T_FC_B), fch, 0, false);
		kernel_gelu_forward(a->dbig, fch, (size_t)N * 4 * C);
		memcpy(res3, res2, (size_t)N * C * sizeof(float));
		gpt2_p_gemm(m, N, C, 4 * C, a->dbig, 0, false, LP(T_FCPROJ_W), false, LP(T_FCPROJ_B), res3, 0,
		       true);
#undef LP
		gpt2_p_release(m, P);
		x = res3;
	}
	const float *lnf_p = gpt2_p_fetch(m, m->r_lnf);
	kernel_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, lnf_p, lnf_p + C, N, C);
	gpt2_p_release(m, lnf_p);
	/* logits (N, V) = lnf (N, C) @ wte^T, by blocks of wte's (V, C) rows:
	 * logits[:, v0:v1] = lnf @ wte[v0:v1]^T */
	for (int k = 0; k < m->n_chunks; k++) {
		int v0, v1;
		const float *w = gpt2_p_fetch(m, gpt2_p_chunk(m, k, &v0, &v1));
		gpt2_p_gemm(m, N, v1 - v0, C, a->lnf, 0, false, w, true, NULL, a->logits + v0, V, false);
		gpt2_p_release(m, w);
	}
	if (!targets)
		return 0.0f;
	memcpy(a->targets, targets, (size_t)N * sizeof(int32_t));
	m->have_targets = true;
	return kernel_crossentropy_forward(a->losses, a->lse, a->logits, targets, N, V);
}

const float *gpt2_logits(const gpt2_t *m)
{
	return m->a.logits;
}

void gpt2_zero_grad(gpt2_t *m)
{
	modelcpu_zero_grad(&m->w);
}

void gpt2_backward(gpt2_t *m, float loss_scale)
{
	if (!m->have_targets) {
		fprintf(stderr, "ringworker: fatal: gpt2_backward without a forward with targets\n");
		exit(EX_SOFTWARE);
	}
	m->have_targets = false; /* the logits become their gradient */
	kernel_flush_denormals();
	const int L = m->cfg.n_layer, C = m->cfg.n_embd, V = m->cfg.vocab_size, H = m->cfg.n_head;
	const int B = m->B, T = m->T, N = B * T;
	const size_t maxN = (size_t)m->max_B * (size_t)m->max_T;
	acts_t *a = &m->a;
	if (m->tp_size > 1) {
		gpt2_tp_backward(m, loss_scale);
		return;
	}
	gpt2_p_seq_start(m, m->seq_bwd, m->n_seq_bwd);

	kernel_crossentropy_backward_inplace(a->logits, a->lse, a->targets, N, V, loss_scale / (float)N);
	float *dlogits = a->logits;
	/* By blocks of wte's rows: dwte[v0:v1] (+)= dlogits[:, v0:v1]^T @ lnf (N, C),
	 * dlnf (N, C) (+)= dlogits[:, v0:v1] @ wte[v0:v1] */
	for (int k = 0; k < m->n_chunks; k++) {
		int v0, v1;
		model_range_t r = gpt2_p_chunk(m, k, &v0, &v1);
		const float *w = gpt2_p_fetch(m, r);
		float *g = gpt2_p_grad_begin(m, r);
		gpt2_p_gemm(m, v1 - v0, C, N, dlogits + v0, V, true, a->lnf, false, NULL, g, 0, true);
		gpt2_p_gemm(m, N, C, v1 - v0, dlogits + v0, V, false, w, false, NULL, a->dsmall, 0, k > 0);
		gpt2_p_grad_end(m, g, r);
		gpt2_p_release(m, w);
	}
	{
		const float *P = gpt2_p_fetch(m, m->r_lnf);
		float *G = gpt2_p_grad_begin(m, m->r_lnf);
		memset(a->dres, 0, (size_t)N * C * sizeof(float));
		kernel_layernorm_backward(a->dres, G, G + C, a->dsmall, LAYER_SLICE(a->res3, L - 1, C),
					  a->lnf_mean, a->lnf_rstd, P, N, C);
		gpt2_p_grad_end(m, G, m->r_lnf);
		gpt2_p_release(m, P);
	}

	for (int l = L - 1; l >= 0; l--) {
		const float *x = l == 0 ? a->encoded : LAYER_SLICE(a->res3, l - 1, C);
		float *ln1 = LAYER_SLICE(a->ln1, l, C), *ln2 = LAYER_SLICE(a->ln2, l, C);
		float *qkv = LAYER_SLICE(a->qkv, l, 3 * C), *atty = LAYER_SLICE(a->atty, l, C);
		float *att = LAYER_SLICE(a->att, l, (size_t)H * m->max_T);
		float *res2 = LAYER_SLICE(a->res2, l, C), *fch = LAYER_SLICE(a->fch, l, 4 * C);
		const model_range_t r = m->r_layers[l];
		const float *P = gpt2_p_fetch(m, r);
		float *G = gpt2_p_grad_begin(m, r);
#define LP(which) gpt2_p_at(m, P, r.lo, l, (which))
#define LG(which) gpt2_p_at(m, G, r.lo, l, (which))

		/* MLP: res3 = res2 + gelu(ln2 @ Wfc + bfc) @ Wp + bp; dres holds d res3 */
		kernel_gelu_forward(a->dbig, fch, (size_t)N * 4 * C);
		gpt2_p_gemm(m, 4 * C, C, N, a->dbig, 0, true, a->dres, false, NULL, LG(T_FCPROJ_W), 0, true);
		kernel_bias_backward(LG(T_FCPROJ_B), a->dres, N, C);
		gpt2_p_gemm(m, N, 4 * C, C, a->dres, 0, false, LP(T_FCPROJ_W), true, NULL, a->dbig, 0, false);
		kernel_gelu_backward_inplace(a->dbig, fch, (size_t)N * 4 * C);
		gpt2_p_gemm(m, C, 4 * C, N, ln2, 0, true, a->dbig, false, NULL, LG(T_FC_W), 0, true);
		kernel_bias_backward(LG(T_FC_B), a->dbig, N, 4 * C);
		gpt2_p_gemm(m, N, C, 4 * C, a->dbig, 0, false, LP(T_FC_W), true, NULL, a->dsmall, 0, false);
		kernel_layernorm_backward(a->dres, LG(T_LN2_W), LG(T_LN2_B), a->dsmall, res2,
					  LAYER_SLICE(a->ln2_mean, l, 1), LAYER_SLICE(a->ln2_rstd, l, 1),
					  LP(T_LN2_W), N, C);

		/* attention: res2 = x + attn(ln1 @ Wqkv + bqkv) @ Wproj + bproj; dres holds d res2 */
		gpt2_p_gemm(m, C, C, N, atty, 0, true, a->dres, false, NULL, LG(T_PROJ_W), 0, true);
		kernel_bias_backward(LG(T_PROJ_B), a->dres, N, C);
		gpt2_p_gemm(m, N, C, C, a->dres, 0, false, LP(T_PROJ_W), true, NULL, a->dsmall, 0, false);
		kernel_attention_backward(a->dbig, a->dsmall, qkv, att, a->att_scratch, B, T, C, H);
		gpt2_p_gemm(m, C, 3 * C, N, ln1, 0, true, a->dbig, false, NULL, LG(T_QKV_W), 0, true);
		kernel_bias_backward(LG(T_QKV_B), a->dbig, N, 3 * C);
		gpt2_p_gemm(m, N, C, 3 * C, a->dbig, 0, false, LP(T_QKV_W), true, NULL, a->dsmall, 0, false);
		kernel_layernorm_backward(a->dres, LG(T_LN1_W), LG(T_LN1_B), a->dsmall, x,
					  LAYER_SLICE(a->ln1_mean, l, 1), LAYER_SLICE(a->ln1_rstd, l, 1),
					  LP(T_LN1_W), N, C);
#undef LP
#undef LG
		gpt2_p_grad_end(m, G, r);
		gpt2_p_release(m, P);
	}
	/* The embedding needs no parameters, only somewhere for its gradients. */
	float *g = gpt2_p_grad_begin(m, m->r_wpe);
	kernel_embed_positions_backward(g, a->dres, B, T, C);
	gpt2_p_grad_end(m, g, m->r_wpe);
	for (int k = 0; k < m->n_chunks; k++) {
		int v0, v1;
		model_range_t r = gpt2_p_chunk(m, k, &v0, &v1);
		g = gpt2_p_grad_begin(m, r);
		kernel_embed_tokens_backward(g, v0, v1, a->dres, a->inputs, N, C);
		gpt2_p_grad_end(m, g, r);
	}
}
