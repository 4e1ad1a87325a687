/*
 * test_llama_layout: Llama's shared layout module (llama_layout.h): the
 * configuration errors name their fields, the tensor table has HF's names,
 * shapes and a contiguous order (tied and untied), the streaming range
 * size, initialisation by ranges equals the whole (and its statistics),
 * the RoPE inverse frequencies with and without Llama 3.1 scaling against
 * the formula evaluated here independently, and the FLOPs rule.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama_layout.h"

static int n_failed;

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
		n_failed++;
}

static model_config_t base_cfg(void)
{
	model_config_t c = {.n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 16, .ffn_dim = 24,
			    .vocab_size = 37, .seq_len = 8, .rope_theta = 10000.0, .norm_eps = 1e-5};
	return c;
}

static void expect_error(model_config_t c, int T, const char *want)
{
	char err[256] = "";
	int rc = llama_config_check(&c, 2, T, err, sizeof err);
	char what[400];
	snprintf(what, sizeof what, "refused with \"%s\" (got \"%s\")", want, err);
	check(rc < 0 && strstr(err, want) != NULL, what);
}

static void config_errors(void)
{
	char err[256];
	model_config_t c = base_cfg();
	check(llama_config_check(&c, 2, 8, err, sizeof err) == 0, "base config accepted");
	c.n_kv_head = 5;
	c.n_head = 12;
	c.n_embd = 48;
	expect_error(c, 8, "model.n_head (12) must be a multiple of model.n_kv_head (5)");
	c = base_cfg();
	c.n_embd = 18;
	expect_error(c, 8, "model.n_embd (18) must be divisible by model.n_head (4)");
	c = base_cfg();
	c.n_embd = 12;
	expect_error(c, 8, "head size model.n_embd / model.n_head (12 / 4 = 3) must be even");
	c = base_cfg();
	c.n_kv_head = 0;
	expect_error(c, 8, "model.n_kv_head (0) must be positive");
	c = base_cfg();
	c.ffn_dim = -1;
	expect_error(c, 8, "model.ffn_dim (-1) must be positive");
	c = base_cfg();
	c.rope_theta = 0;
	expect_error(c, 8, "model.rope_theta (0) must be positive");
	c = base_cfg();
	c.norm_eps = 0;
	expect_error(c, 8, "model.norm_eps (0) must be positive");
	c = base_cfg();
	c.rope_scaling = (model_rope_scaling_t){.factor = 8, .low_freq_factor = 4, .high_freq_factor = 1,
						.original_max_position = 8192};
	expect_error(c, 8, "model.rope_scaling.low_freq_factor (4) must be positive and below"
			   " model.rope_scaling.high_freq_factor (1)");
	c.rope_scaling = (model_rope_scaling_t){.factor = 8, .low_freq_factor = 1, .high_freq_factor = 4};
	expect_error(c, 8, "model.rope_scaling.original_max_position (0) must be positive");
	c.rope_scaling = (model_rope_scaling_t){.factor = 0.5};
	expect_error(c, 8, "model.rope_scaling.factor (0.5) must be at least 1");
	c = base_cfg();
	expect_error(c, 9, "the sequence length (9) must be between 1 and model.seq_len (8)");
}

static void table(bool tied)
{
	model_config_t c = base_cfg();
	c.tie_embeddings = tied;
	model_tensor_t *t = NULL;
	int n = 0;
	size_t np = 0, mr = 0;
	check(llama_layout(&c, &t, &n, &np, &mr) == 0, "llama_layout");
	check(n == 1 + 9 * 2 + 1 + (tied ? 0 : 1), "tensor count");
	size_t off = 0;
	bool contiguous = true, fits = true;
	for (int i = 0; i < n; i++) {
		contiguous &= t[i].offset == off;
		off += t[i].numel;
		fits &= strlen(t[i].name) < MODEL_TENSOR_NAME_MAX - 1;
	}
	check(contiguous && off == np, "offsets contiguous, sum is num_params");
	check(fits, "names fit MODEL_TENSOR_NAME_MAX");
	/* hd 4: q (16, 16), k, v (8, 16), o (16, 16), gate/up (24, 16), down (16, 24) */
	size_t layer = 16 + 256 + 128 + 128 + 256 + 16 + 384 + 384 + 384;
	check(llama_layer_floats(&c) == layer, "layer floats");
	check(np == 37 * 16 + 2 * layer + 16 + (tied ? 0 : 37 * 16), "num_params");
	check(strcmp(t[0].name, "model.embed_tokens.weight") == 0 && t[0].shape[0] == 37 &&
		      t[0].shape[1] == 16 && t[0].decay,
	      "embed_tokens (V, C)");
	const model_tensor_t *k = &t[1 + 9 + LLAMA_T_K];
	check(strcmp(k->name, "model.layers.1.self_attn.k_proj.weight") == 0 && k->shape[0] == 8 &&
		      k->shape[1] == 16,
	      "layer 1 k_proj (KV*hd, C)");
	const model_tensor_t *d = &t[1 + LLAMA_T_DOWN];
	check(strcmp(d->name, "model.layers.0.mlp.down_proj.weight") == 0 && d->shape[0] == 16 &&
		      d->shape[1] == 24,
	      "down_proj (C, F)");
	const model_tensor_t *nrm = &t[1 + LLAMA_T_MLP_NORM];
	check(strcmp(nrm->name, "model.layers.0.post_attention_layernorm.weight") == 0 &&
		      nrm->ndim == 1 && !nrm->decay,
	      "post_attention_layernorm (C), no decay");
	const model_tensor_t *last = &t[n - 1];
	check(tied ? strcmp(last->name, "model.norm.weight") == 0
		   : strcmp(last->name, "lm_head.weight") == 0 && last->shape[0] == 37 && last->decay,
	      tied ? "tied: model.norm.weight is last" : "untied: lm_head.weight (V, C) is last");
	/* rows per block: layer / C = 121 > V, so all 37 rows; max range the layer */
	check(llama_stream_rows(&c) == 37 && mr == layer, "stream rows and max range");
	c.vocab_size = 1000;
	free(t);
	check(llama_layout(&c, &t, &n, &np, &mr) == 0 && llama_stream_rows(&c) == (int)(layer / 16) &&
		      mr == layer,
	      "large vocabulary: blocks of layer/C rows, max range a layer");

	/* init: ranges equal the whole */
	float *all = malloc(np * sizeof(float)), *part = malloc(np * sizeof(float));
	llama_init_range(&c, t, n, 7, 0, np, all);
	size_t cuts[] = {0, 5, 600, 16000, 16001, np};
	for (size_t i = 0; i + 1 < sizeof cuts / sizeof cuts[0]; i++)
		llama_init_range(&c, t, n, 7, cuts[i], cuts[i + 1], part + cuts[i]);
	check(memcmp(all, part, np * sizeof(float)) == 0, "init by ranges = init of the whole");
	llama_init_range(&c, t, n, 8, 0, np, part);
	check(memcmp(all, part, np * sizeof(float)) != 0, "another seed, other values");
	const model_tensor_t *e = &t[0], *o = &t[1 + LLAMA_T_O];
	double s2 = 0, so = 0;
	for (size_t i = 0; i < e->numel; i++)
		s2 += (double)all[e->offset + i] * all[e->offset + i];
	for (size_t i = 0; i < o->numel; i++)
		so += (double)all[o->offset + i] * all[o->offset + i];
	double sd = sqrt(s2 / e->numel), sdo = sqrt(so / o->numel);
	char what[128];
	snprintf(what, sizeof what, "embed std %.4f ~ 0.02, o_proj std %.4f ~ 0.01", sd, sdo);
	check(fabs(sd - 0.02) < 0.001 && fabs(sdo - 0.01) < 0.001, what);
	check(all[t[1].offset] == 1.0f && all[t[1].offset + 15] == 1.0f, "norms are 1");
	free(all);
	free(part);
	free(t);
}

static void rope(void)
{
	model_config_t c = base_cfg();
	c.n_embd = 64;
	c.n_head = 2; /* hd 32, 16 frequencies */
	c.rope_theta = 500000.0;
	double inv[16];
	llama_rope_inv_freq(&c, inv);
	bool ok = true;
	for (int j = 0; j < 16; j++)
		ok &= fabs(inv[j] - 1.0 / pow(500000.0, j / 16.0)) <= 1e-15 * (1.0 / pow(500000.0, j / 16.0));
	check(ok, "unscaled inv_freq = theta^(-2j/hd)");
	/* Llama 3.1 scaling with a small original context so that all three
	 * bands occur: orig 64, low 1, high 4: wavelengths < 16 kept, > 64
	 * divided by 8, between interpolated. */
	c.rope_scaling = (model_rope_scaling_t){8.0, 1.0, 4.0, 64};
	llama_rope_inv_freq(&c, inv);
	int kept = 0, scaled = 0, smooth = 0;
	ok = true;
	for (int j = 0; j < 16; j++) {
		double f = 1.0 / pow(500000.0, j / 16.0), wl = 2 * M_PI / f, want;
		if (wl < 16) {
			want = f;
			kept++;
		} else if (wl > 64) {
			want = f / 8;
			scaled++;
		} else {
			double s = (64 / wl - 1) / 3;
			want = (1 - s) * f / 8 + s * f;
			smooth++;
		}
		ok &= fabs(inv[j] - want) <= 1e-14 * want;
	}
	char what[128];
	snprintf(what, sizeof what, "scaled inv_freq (%d kept, %d smoothed, %d divided)", kept, smooth,
		 scaled);
	check(ok && kept > 0 && scaled > 0 && smooth > 0, what);
	float cs[8 * 16], sn[8 * 16];
	llama_rope_tables(&c, 8, cs, sn);
	ok = cs[0] == 1.0f && sn[0] == 0.0f;
	for (int p = 0; p < 8; p++)
		for (int j = 0; j < 16; j++)
			ok &= cs[p * 16 + j] == (float)cos(p * inv[j]) && sn[p * 16 + j] == (float)sin(p * inv[j]);
	check(ok, "cos/sin tables (T, hd/2) of p * inv_freq");
}

static void flops(void)
{
	model_config_t c = base_cfg();
	double want = 6.0 * (1000 - 37 * 16) + 12.0 * 2 * 16 * 8;
	check(llama_flops_per_token(&c, 1000, 8) == want, "untied: 6(N - VC) + 12LCT");
	c.tie_embeddings = true;
	check(llama_flops_per_token(&c, 1000, 8) == 6.0 * 1000 + 12.0 * 2 * 16 * 8, "tied: 6N + 12LCT");
}

int main(void)
{
	config_errors();
	table(false);
	table(true);
	rope();
	flops();
	if (n_failed) {
		printf("%d check(s) failed\n", n_failed);
		return 1;
	}
	printf("all checks passed\n");
	return 0;
}
