/*
 * test_tplayout: the mapping between a tensor-parallel rank's local parts
 * and the logical flat buffer (worker/tplayout.c) for tiny GPT-2 and Llama
 * models (untied and tied, a vocabulary that needs padding), at t = 1, 2,
 * 4: the logical table is the t = 1 model's own table; every logical
 * element comes back from the t local parts exactly (split tensors from
 * one rank each, replicated ones from every rank); padded vocabulary rows
 * are zero; GPT-2's c_attn follows the "qkv" rule; any sub-range maps like
 * the whole. The local tables are the engine's when it creates the model at
 * that t, else derived from model.h's rules (and then compared with the
 * engine's once it does). Exact equality: the mapping only copies floats.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "tplayout.h"

static int s_failed;

#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		if (!(cond)) {                                                  \
			fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                           \
			fputc('\n', stderr);                                    \
			s_failed++;                                             \
			return;                                                 \
		}                                                               \
	} while (0)

static void s_noop_gather(void *ctx, const float *in, float *out, size_t n)
{
	(void)ctx, (void)in, (void)out, (void)n;
}

static void s_noop_reduce(void *ctx, float *buf, size_t n)
{
	(void)ctx, (void)buf, (void)n;
}

/* The local table of rank k of t by model.h's rules, from the t = 1 table. */
static model_tensor_t *s_derive(const model_tensor_t *full, int n, int t)
{
	model_tensor_t *loc = calloc((size_t)n, sizeof *loc);
	size_t off = 0;
	for (int i = 0; i < n; i++) {
		loc[i] = full[i];
		if (full[i].tp_split == 0)
			loc[i].shape[0] = (full[i].full_shape[0] + t - 1) / t; /* vocabulary padded */
		else if (full[i].tp_split == 1)
			loc[i].shape[1] = full[i].full_shape[1] / t;
		loc[i].numel = (size_t)loc[i].shape[0] * (loc[i].ndim == 2 ? (size_t)loc[i].shape[1] : 1);
		loc[i].offset = off;
		off += loc[i].numel;
	}
	return loc;
}

/* The engine's own local table at rank k of t, when its row builds TP
 * models (NULL otherwise); *ret_m to free. */
static const model_tensor_t *s_engine_table(const char *arch, const model_config_t *cfg, int k, int t,
                                            model_t **ret_m)
{
	model_tp_t tp = {.rank = k, .size = t, .sequence_parallel = true, .allgather = s_noop_gather,
			 .reduce_scatter = s_noop_gather, .allreduce = s_noop_reduce};
	model_options_t o = {.max_B = 1, .max_T = cfg->seq_len, .tp = &tp};
	char err[256];
	*ret_m = NULL;
	if (model_create(arch, MODEL_DEVICE_CPU, cfg, &o, ret_m, err, sizeof err) < 0)
		return NULL;
	int n;
	return model_tensors(*ret_m, &n);
}

static const char *s_case;

static void s_check_arch(const char *arch, const model_config_t *cfg, int t, int *ret_engine)
{
	model_t *m1;
	model_options_t o = {.max_B = 1, .max_T = cfg->seq_len};
	char err[256];
	if (model_create(arch, MODEL_DEVICE_CPU, cfg, &o, &m1, err, sizeof err) < 0) {
		fprintf(stderr, "%s: model_create: %s\n", s_case, err);
		s_failed++;
		return;
	}
	int n;
	const model_tensor_t *full = model_tensors(m1, &n);
	const size_t N = model_num_params(m1);
	float *logical = malloc(N * sizeof(float)), *back = calloc(N, sizeof(float));
	for (size_t i = 0; i < N; i++)
		logical[i] = (float)(i + 1);
	float **parts = calloc((size_t)t, sizeof(float *));
	tplayout_t *lay = calloc((size_t)t, sizeof(tplayout_t));
	model_tensor_t *derived = s_derive(full, n, t);
	for (int k = 0; k < t; k++) {
		model_t *mk;
		const model_tensor_t *loc = s_engine_table(arch, cfg, k, t, &mk);
		if (loc && t > 1) {
			(*ret_engine)++;
			for (int i = 0; i < n; i++)
				if (memcmp(loc[i].shape, derived[i].shape, sizeof loc[i].shape) ||
				    loc[i].offset != derived[i].offset || loc[i].tp_split != derived[i].tp_split) {
					fprintf(stderr, "%s: t=%d rank %d: the engine's %s is (%lld, %lld) at %zu, the"
						" rules say (%lld, %lld) at %zu\n", s_case, t, k, loc[i].name,
						(long long)loc[i].shape[0], (long long)loc[i].shape[1], loc[i].offset,
						(long long)derived[i].shape[0], (long long)derived[i].shape[1],
						derived[i].offset);
					s_failed++;
					break;
				}
		}
		int rc = tplayout_build(loc ? loc : derived, n, k, t, &lay[k], err, sizeof err);
		model_free(mk);
		if (rc < 0) {
			fprintf(stderr, "%s: tplayout_build t=%d rank %d: %s\n", s_case, t, k, err);
			s_failed++;
			goto out;
		}
		if (lay[k].n_logical != N || lay[k].n_tensors != n) {
			fprintf(stderr, "%s: logical size %zu, the t=1 model has %zu\n", s_case, lay[k].n_logical, N);
			s_failed++;
			goto out;
		}
		for (int i = 0; i < n; i++)
			if (lay[k].logical[i].offset != full[i].offset ||
			    memcmp(lay[k].logical[i].shape, full[i].shape, sizeof full[i].shape) ||
			    strcmp(lay[k].logical[i].name, full[i].name)) {
				fprintf(stderr, "%s: logical %s is not the t=1 table's\n", s_case, full[i].name);
				s_failed++;
				goto out;
			}
		parts[k] = malloc(lay[k].n_local * sizeof(float));
		tplayout_from_logical(&lay[k], logical, 0, lay[k].n_local, parts[k]);
	}
	/* the logical buffer back from the parts, split tensors once, replicated ones from rank 0 */
	for (int k = 0; k < t; k++)
		tplayout_to_logical(&lay[k], parts[k], 0, N, k == 0, back);
	for (size_t i = 0; i < N; i++)
		if (back[i] != logical[i]) {
			fprintf(stderr, "%s t=%d: logical element %zu came back as %g, not %g\n", s_case, t, i,
				(double)back[i], (double)logical[i]);
			s_failed++;
			goto out;
		}
	/* each element of a split tensor on exactly one rank; padding only in vocabulary rows */
	for (int k = 0; k < t; k++) {
		size_t covered = 0;
		for (size_t r = 0; r < lay[k].n_runs; r++)
			covered += lay[k].runs[r].n;
		size_t zeros = 0;
		for (size_t i = 0; i < lay[k].n_local; i++)
			zeros += parts[k][i] == 0.0f;
		if (covered + zeros != lay[k].n_local) {
			fprintf(stderr, "%s t=%d rank %d: %zu of %zu local floats mapped, %zu zero\n", s_case, t, k,
				covered, lay[k].n_local, zeros);
			s_failed++;
			goto out;
		}
	}
	/* a sub-range maps like the whole */
	size_t lo = N / 3, count = N / 3 + 7;
	float *range = calloc(count, sizeof(float));
	for (int k = 0; k < t; k++)
		tplayout_to_logical(&lay[k], parts[k], lo, count, k == 0, range);
	if (memcmp(range, logical + lo, count * sizeof(float))) {
		fprintf(stderr, "%s t=%d: the range [%zu, %zu) differs\n", s_case, t, lo, lo + count);
		s_failed++;
	}
	free(range);
	float *sub = malloc(lay[t - 1].n_local * sizeof(float));
	size_t llo = lay[t - 1].n_local / 2, lcount = lay[t - 1].n_local - llo;
	tplayout_from_logical(&lay[t - 1], logical, llo, lcount, sub);
	if (memcmp(sub, parts[t - 1] + llo, lcount * sizeof(float))) {
		fprintf(stderr, "%s t=%d: a local sub-range differs\n", s_case, t);
		s_failed++;
	}
	free(sub);
	/* GPT-2's qkv rule, element by element on the last rank */
	for (int i = 0; i < n && t > 1; i++) {
		const model_tensor_t *g = &full[i], *l = &lay[t - 1].logical[i];
		(void)l;
		if (strcmp(g->name, "h.0.attn.c_attn.weight") != 0)
			continue;
		const size_t C = (size_t)g->shape[0], k = (size_t)t - 1, hc = C / (size_t)t;
		const model_tensor_t *d = &derived[i];
		for (size_t row = 0; row < C; row++)
			for (size_t p = 0; p < 3; p++)
				for (size_t j = 0; j < hc; j++) {
					float want = logical[g->offset + row * 3 * C + p * C + k * hc + j];
					float got = parts[t - 1][d->offset + row * 3 * hc + p * hc + j];
					if (want != got) {
						fprintf(stderr, "%s: c_attn (%zu, part %zu, %zu) is %g, not %g\n", s_case, row,
							p, j, (double)got, (double)want);
						s_failed++;
						goto out;
					}
				}
	}
out:
	for (int k = 0; k < t; k++) {
		free(parts[k]);
		tplayout_free(&lay[k]);
	}
	free(parts);
	free(lay);
	free(derived);
	free(logical);
	free(back);
	model_free(m1);
}

/* A table that breaks the rules is refused, naming the tensor. */
static void test_bad_table(void)
{
	model_tensor_t x[1] = {{.name = "w", .ndim = 2, .shape = {3, 4}, .numel = 12, .tp_split = 1,
				.full_shape = {3, 9}}};
	tplayout_t l;
	char err[256] = "";
	CHECK(tplayout_build(x, 1, 0, 2, &l, err, sizeof err) == -EINVAL && strstr(err, "w"), "%s", err);
	x[0].offset = 5;
	x[0].full_shape[1] = 8;
	CHECK(tplayout_build(x, 1, 0, 2, &l, err, sizeof err) == -EINVAL && strstr(err, "starts at 5"), "%s",
	      err);
	CHECK(tplayout_build(x, 1, 2, 2, &l, err, sizeof err) == -EINVAL, "rank 2 of 2");
}

int main(void)
{
	const model_config_t gpt2 = {.n_layer = 2, .n_head = 4, .n_embd = 16, .vocab_size = 11, .seq_len = 8};
	const model_config_t llama = {.n_layer = 2, .n_head = 4, .n_embd = 16, .vocab_size = 11, .seq_len = 8,
				      .n_kv_head = 4, .ffn_dim = 24, .rope_theta = 10000, .norm_eps = 1e-5};
	model_config_t llama_tied = llama;
	llama_tied.tie_embeddings = true;
	int engine = 0;
	const int ts[] = {1, 2, 4};
	for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
		s_case = "gpt2";
		s_check_arch("gpt2", &gpt2, ts[i], &engine);
		s_case = "llama";
		s_check_arch("llama", &llama, ts[i], &engine);
		s_case = "llama tied";
		s_check_arch("llama", &llama_tied, ts[i], &engine);
	}
	test_bad_table();
	printf("tplayout: %s (%d engine tables at t > 1 compared with the rules)\n",
	       s_failed ? "FAILED" : "ok", engine);
	return s_failed ? 1 : 0;
}
