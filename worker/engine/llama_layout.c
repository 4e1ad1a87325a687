/*
 * llama_layout: Llama's configuration check, tensor table, initialisation,
 * RoPE tables and FLOPs (see llama_layout.h). Pure C, no device.
 */
#include "llama_layout.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "initrand.h"
#include "modeltab.h"

static int s_check_scaling(const model_rope_scaling_t *s, char *err, size_t errlen)
{
	if (s->factor == 0.0)
		return 0;
	if (!(s->factor >= 1.0)) {
		snprintf(err, errlen, "model.rope_scaling.factor (%g) must be at least 1 (or 0: no scaling)",
			 s->factor);
		return -1;
	}
	if (!(s->low_freq_factor > 0.0) || !(s->high_freq_factor > s->low_freq_factor)) {
		snprintf(err, errlen,
			 "model.rope_scaling.low_freq_factor (%g) must be positive and below"
			 " model.rope_scaling.high_freq_factor (%g)",
			 s->low_freq_factor, s->high_freq_factor);
		return -1;
	}
	return modeltab_check_positive("model.rope_scaling.original_max_position",
	                               s->original_max_position, err, errlen);
}

int llama_config_check(const model_config_t *cfg, int max_B, int max_T, char *err, size_t errlen)
{
	if (modeltab_check_positive("model.n_layer", cfg->n_layer, err, errlen) ||
	    modeltab_check_positive("model.n_head", cfg->n_head, err, errlen) ||
	    modeltab_check_positive("model.n_kv_head", cfg->n_kv_head, err, errlen) ||
	    modeltab_check_positive("model.n_embd", cfg->n_embd, err, errlen) ||
	    modeltab_check_positive("model.ffn_dim", cfg->ffn_dim, err, errlen) ||
	    modeltab_check_positive("model.vocab_size", cfg->vocab_size, err, errlen) ||
	    modeltab_check_positive("model.seq_len", cfg->seq_len, err, errlen) ||
	    modeltab_check_positive("train.batch_size", max_B, err, errlen))
		return -1;
	if (cfg->n_embd % cfg->n_head != 0) {
		snprintf(err, errlen, "model.n_embd (%d) must be divisible by model.n_head (%d)",
			 cfg->n_embd, cfg->n_head);
		return -1;
	}
	if (cfg->n_head % cfg->n_kv_head != 0) {
		snprintf(err, errlen, "model.n_head (%d) must be a multiple of model.n_kv_head (%d)",
			 cfg->n_head, cfg->n_kv_head);
		return -1;
	}
	if ((cfg->n_embd / cfg->n_head) % 2 != 0) {
		snprintf(err, errlen,
			 "the head size model.n_embd / model.n_head (%d / %d = %d) must be even"
			 " (rotary embeddings rotate pairs of channels)",
			 cfg->n_embd, cfg->n_head, cfg->n_embd / cfg->n_head);
		return -1;
	}
	if (!(cfg->rope_theta > 0.0) || !(cfg->norm_eps > 0.0)) {
		snprintf(err, errlen, "%s (%g) must be positive",
			 cfg->rope_theta > 0.0 ? "model.norm_eps" : "model.rope_theta",
			 cfg->rope_theta > 0.0 ? cfg->norm_eps : cfg->rope_theta);
		return -1;
	}
	if (s_check_scaling(&cfg->rope_scaling, err, errlen) < 0)
		return -1;
	if (max_T < 1 || max_T > cfg->seq_len) {
		snprintf(err, errlen, "the sequence length (%d) must be between 1 and model.seq_len (%d)",
			 max_T, cfg->seq_len);
		return -1;
	}
	return 0;
}

size_t llama_layer_floats(const model_config_t *cfg)
{
	size_t C = (size_t)cfg->n_embd, F = (size_t)cfg->ffn_dim;
	size_t kv = (size_t)cfg->n_kv_head * (size_t)(cfg->n_embd / cfg->n_head);
	return 2 * C + 2 * C * C + 2 * kv * C + 3 * F * C;
}

int llama_stream_rows(const model_config_t *cfg)
{
	size_t rows = llama_layer_floats(cfg) / (size_t)cfg->n_embd;
	if (rows > (size_t)cfg->vocab_size)
		rows = (size_t)cfg->vocab_size;
	return rows < 1 ? 1 : (int)rows;
}

int llama_layout(const model_config_t *cfg, model_tensor_t **ret_tensors, int *ret_n,
                 size_t *ret_num_params, size_t *ret_max_range)
{
	return llama_layout_tp(cfg, 1, ret_tensors, ret_n, ret_num_params, ret_max_range);
}

int llama_layout_tp(const model_config_t *cfg, int tp, model_tensor_t **ret_tensors, int *ret_n,
                    size_t *ret_num_params, size_t *ret_max_range)
{
	const int R = MODEL_TP_REPLICATED;
	int L = cfg->n_layer;
	int64_t C = cfg->n_embd, V = cfg->vocab_size, F = cfg->ffn_dim;
	int64_t q = C, kv = (int64_t)cfg->n_kv_head * (C / cfg->n_head);
	model_tensor_t *tab = calloc((size_t)(LLAMA_LAYER_TENSORS * L + 3), sizeof *tab);
	if (!tab)
		return -ENOMEM;
	int n = 0;
	size_t off = 0;
	char name[MODEL_TENSOR_NAME_MAX];
	modeltab_add(tab, &n, &off, "model.embed_tokens.weight", 2, V, C, true, 0, tp);
	for (int l = 0; l < L; l++) {
#define LAYER(suffix, ndim, d0, d1, decay, split)                                   \
	do {                                                                        \
		snprintf(name, sizeof name, "model.layers.%d." suffix, l);          \
		modeltab_add(tab, &n, &off, name, ndim, d0, d1, decay, split, tp);         \
	} while (0)
		LAYER("input_layernorm.weight", 1, C, 0, false, R);
		LAYER("self_attn.q_proj.weight", 2, q, C, true, 0);
		LAYER("self_attn.k_proj.weight", 2, kv, C, true, 0);
		LAYER("self_attn.v_proj.weight", 2, kv, C, true, 0);
		LAYER("self_attn.o_proj.weight", 2, C, q, true, 1);
		LAYER("post_attention_layernorm.weight", 1, C, 0, false, R);
		LAYER("mlp.gate_proj.weight", 2, F, C, true, 0);
		LAYER("mlp.up_proj.weight", 2, F, C, true, 0);
		LAYER("mlp.down_proj.weight", 2, C, F, true, 1);
#undef LAYER
	}
	modeltab_add(tab, &n, &off, "model.norm.weight", 1, C, 0, false, R, tp);
	if (!cfg->tie_embeddings)
		modeltab_add(tab, &n, &off, "lm_head.weight", 2, V, C, true, 0, tp);
	size_t block = (size_t)llama_stream_rows(cfg) * (size_t)C;
	size_t layer = llama_layer_floats(cfg);
	*ret_tensors = tab;
	*ret_n = n;
	*ret_num_params = off;
	*ret_max_range = block > layer ? block : layer;
	if ((size_t)C > *ret_max_range)
		*ret_max_range = (size_t)C;
	return 0;
}

void llama_init_range(const model_config_t *cfg, const model_tensor_t *tab, int n_tensors,
                      uint64_t seed, size_t lo, size_t hi, float *out)
{
	double resid_std = 0.02 / sqrt(2.0 * cfg->n_layer);
	for (int i = 0; i < n_tensors; i++) {
		const model_tensor_t *t = &tab[i];
		size_t a = t->offset > lo ? t->offset : lo;
		size_t b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
		if (a >= b)
			continue;
		float *p = out + (a - lo);
		if (t->ndim == 1) {
			for (size_t k = 0; k < b - a; k++)
				p[k] = 1.0f;
			continue;
		}
		bool resid = strstr(t->name, "o_proj.weight") || strstr(t->name, "down_proj.weight");
		initrand_normal(p, a - t->offset, b - t->offset, seed, (uint64_t)i,
				resid ? resid_std : 0.02);
	}
}

/* inv_freq[j], scaled as llama_rope_inv_freq says */
static double s_inv_freq(const model_config_t *cfg, int j)
{
	int hd = cfg->n_embd / cfg->n_head;
	const model_rope_scaling_t *s = &cfg->rope_scaling;
	double f = pow(cfg->rope_theta, -(2.0 * j) / hd);
	if (s->factor > 0.0) {
		double wavelen = 2.0 * M_PI / f;
		double orig = s->original_max_position;
		double low_wl = orig / s->low_freq_factor, high_wl = orig / s->high_freq_factor;
		if (wavelen > low_wl) {
			f = f / s->factor;
		} else if (wavelen >= high_wl) {
			double smooth = (orig / wavelen - s->low_freq_factor) /
					(s->high_freq_factor - s->low_freq_factor);
			f = (1.0 - smooth) * f / s->factor + smooth * f;
		}
	}
	return f;
}

void llama_rope_inv_freq(const model_config_t *cfg, double *inv)
{
	int hd = cfg->n_embd / cfg->n_head;
	for (int j = 0; j < hd / 2; j++)
		inv[j] = s_inv_freq(cfg, j);
}

void llama_rope_tables(const model_config_t *cfg, int T, float *ret_cos, float *ret_sin)
{
	int half = cfg->n_embd / cfg->n_head / 2;
	/* one frequency at a time: no buffer to allocate (and fail) */
	for (int j = 0; j < half; j++) {
		double inv = s_inv_freq(cfg, j);
		for (int p = 0; p < T; p++) {
			double ang = (double)p * inv;
			ret_cos[(size_t)p * half + j] = (float)cos(ang);
			ret_sin[(size_t)p * half + j] = (float)sin(ang);
		}
	}
}

double llama_flops_per_token(const model_config_t *cfg, size_t num_params, int T)
{
	double n = (double)num_params;
	if (!cfg->tie_embeddings)
		n -= (double)cfg->vocab_size * cfg->n_embd;
	return 6.0 * n + 12.0 * cfg->n_layer * cfg->n_embd * (double)T;
}
