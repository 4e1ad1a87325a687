/*
 * test_gpu_tp_ce: the vocabulary-parallel cross-entropy kernels
 * (cuda_tp.h) for a TP group of t ranks simulated on one device: each
 * rank's kernels run on its slice of the vocabulary (padded to a multiple
 * of t, padded columns filled with huge values that must never be read),
 * and the group's all-gather and all-reduce are done on the host between
 * the steps, in rank order as a sum all-reduce would. Results are checked
 * against the plain cross-entropy of the full logits in double. Runs on a
 * GPU (gpu-tp-ce) and on the CPU through the emulator (cudaemu-tp-ce).
 * This proves the kernels and the combine, not the collectives or a CUDA
 * row with TP (which does not exist yet: docs/gpu.md).
 *
 * Bounds on rel_err = max|gpu - ref| / max|ref| (gpu_util.h):
 *   FP32 (1e-5): losses, lse and the fp32 gradient are fp32 arithmetic
 *     (expf, logf, warp sums of <= a few hundred terms) against double on
 *     the same inputs (bf16 logits: the same bf16 values in both): a few ulp.
 *   BF16 (4e-3 = 2^-8): the bf16 gradient, the fp32 one rounded once.
 * Exact checks: every rank gets the same loss bits (the combine is
 * replicated), padded columns' gradients are 0, and a second run gives
 * the same bits.
 * Skips (exit 77) where there is no GPU.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_tp.h"
#include "gpu_util.h"

#define FP32_BOUND 1e-5
#define BF16_BOUND 4e-3
#define MAX_T 4

static int n_failed;

static void s_check(const char *what, double err, double bound)
{
	bool ok = err <= bound;
	printf("%-44s rel_err %.3g (bound %.0e) %s\n", what, err, bound, ok ? "ok" : "FAILED");
	if (!ok)
		n_failed++;
}

static void s_exact(const char *what, bool ok)
{
	printf("%-44s %s\n", what, ok ? "ok" : "FAILED");
	if (!ok)
		n_failed++;
}

static uint16_t s_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even (no NaNs here) */
	return (uint16_t)(u >> 16);
}

/* The reference: lse, loss and scale * (softmax - onehot) over all V ids, in double. */
static void s_reference(const float *x, const int32_t *tg, int N, int V, float scale, float *lse,
                        float *loss, float *grad)
{
	for (int n = 0; n < N; n++) {
		const float *r = x + (size_t)n * V;
		double m = -INFINITY, s = 0;
		for (int v = 0; v < V; v++)
			m = r[v] > m ? r[v] : m;
		for (int v = 0; v < V; v++)
			s += exp((double)r[v] - m);
		double l = m + log(s);
		lse[n] = (float)l;
		loss[n] = (float)(l - r[tg[n]]);
		for (int v = 0; v < V; v++)
			grad[(size_t)n * V + v] =
				(float)(scale * (exp((double)r[v] - l) - (v == tg[n] ? 1.0 : 0.0)));
	}
}

typedef struct {
	int ncols, v0;
	float *logits;      /* device, fp32 (NULL in the bf16 case) */
	uint16_t *logits16; /* device, bf16 (NULL in the fp32 case) */
	float *mx, *all, *red, *lse, *loss, *d;
	uint16_t *d16;
} rank_t;

/* One run of the group; host results of every rank in loss/lse (t, N) and
 * the gradient, gathered back to (N, V), in grad / grad16 (as floats). */
static void s_run(rank_t *rk, int t, int N, int ld, const int32_t *dtg, float scale, float *loss,
                  float *lse, float *grad, float *grad16, int V, bool *pad_zero)
{
	const cudaStream_t st = 0;
	float *hall = malloc((size_t)t * N * sizeof(float)), *hred = malloc(2 * (size_t)N * sizeof(float)),
	      *part = malloc(2 * (size_t)N * sizeof(float));
	for (int k = 0; k < t; k++)
		cuda_tp_ce_rowmax(rk[k].mx, rk[k].logits, rk[k].logits16, (size_t)ld, N, rk[k].ncols, st);
	for (int k = 0; k < t; k++) /* the all-gather */
		gpu_get(hall + (size_t)k * N, rk[k].mx, (size_t)N * sizeof(float));
	for (int k = 0; k < t; k++) {
		gpu_must(cudaMemcpy(rk[k].all, hall, (size_t)t * N * sizeof(float), cudaMemcpyHostToDevice),
			 "upload");
		cuda_tp_ce_maxof(rk[k].mx, rk[k].all, N, t, st);
		cuda_tp_ce_partials(rk[k].red, rk[k].logits, rk[k].logits16, (size_t)ld, dtg, rk[k].mx, N,
				    rk[k].ncols, rk[k].v0, st);
	}
	memset(hred, 0, 2 * (size_t)N * sizeof(float));
	for (int k = 0; k < t; k++) { /* the all-reduce (sum, in rank order) */
		gpu_get(part, rk[k].red, 2 * (size_t)N * sizeof(float));
		for (int i = 0; i < 2 * N; i++)
			hred[i] += part[i];
	}
	float *hd = malloc((size_t)N * ld * sizeof(float));
	uint16_t *hd16 = malloc((size_t)N * ld * sizeof(uint16_t));
	*pad_zero = true;
	for (int k = 0; k < t; k++) {
		gpu_must(cudaMemcpy(rk[k].red, hred, 2 * (size_t)N * sizeof(float), cudaMemcpyHostToDevice),
			 "upload");
		cuda_tp_ce_finish(rk[k].loss, rk[k].lse, rk[k].mx, rk[k].red, N, st);
		cuda_tp_ce_backward(rk[k].d, rk[k].d16, rk[k].logits, rk[k].logits16, (size_t)ld, rk[k].lse,
				    dtg, N, rk[k].ncols, rk[k].v0, scale, st);
		gpu_get(loss + (size_t)k * N, rk[k].loss, (size_t)N * sizeof(float));
		gpu_get(lse + (size_t)k * N, rk[k].lse, (size_t)N * sizeof(float));
		gpu_get(hd, rk[k].d, (size_t)N * ld * sizeof(float));
		gpu_get(hd16, rk[k].d16, (size_t)N * ld * sizeof(uint16_t));
		for (int n = 0; n < N; n++)
			for (int c = 0; c < ld; c++) {
				float g = hd[(size_t)n * ld + c], g16 = bf16_to_float(hd16[(size_t)n * ld + c]);
				if (c < rk[k].ncols) {
					grad[(size_t)n * V + rk[k].v0 + c] = g;
					grad16[(size_t)n * V + rk[k].v0 + c] = g16;
				} else if (g != 0.0f || g16 != 0.0f) {
					*pad_zero = false;
				}
			}
	}
	free(hd);
	free(hd16);
	free(hall);
	free(hred);
	free(part);
}

/* N rows, vocabulary V over t ranks, rows ld >= the padded slice apart */
static void s_case(int N, int V, int t, int extra_ld, bool bf16)
{
	const int vl = (V + t - 1) / t, ld = vl + extra_ld;
	const float scale = 1.0f / (float)N;
	float *x = rand_floats((size_t)N * V, 2.0f);
	int32_t *tg = malloc((size_t)N * sizeof(int32_t));
	for (int n = 0; n < N; n++)
		tg[n] = (int32_t)(rng_u32() % (uint32_t)V);
	tg[0] = V - 1; /* the last real id (on the rank with padding) */
	if (N > 2 && t > 1) { /* the ids on either side of the first slice boundary */
		tg[1] = vl - 1;
		tg[2] = vl;
	}
	if (bf16) /* the reference sees the same bf16 values */
		for (size_t i = 0; i < (size_t)N * V; i++)
			x[i] = bf16_to_float(s_to_bf16(x[i]));
	float *rlse = malloc((size_t)N * sizeof(float)), *rloss = malloc((size_t)N * sizeof(float)),
	      *rgrad = malloc((size_t)N * V * sizeof(float));
	s_reference(x, tg, N, V, scale, rlse, rloss, rgrad);

	rank_t rk[MAX_T];
	for (int k = 0; k < t; k++) {
		rank_t *r = &rk[k];
		r->v0 = k * vl;
		r->ncols = V - r->v0 < vl ? V - r->v0 : vl;
		float *loc = malloc((size_t)N * ld * sizeof(float));
		uint16_t *loc16 = malloc((size_t)N * ld * sizeof(uint16_t));
		for (int n = 0; n < N; n++)
			for (int c = 0; c < ld; c++) {
				/* padded columns: huge, so reading one breaks max and sums */
				float v = c < r->ncols ? x[(size_t)n * V + r->v0 + c] : 1e4f;
				loc[(size_t)n * ld + c] = v;
				loc16[(size_t)n * ld + c] = s_to_bf16(v);
			}
		r->logits = bf16 ? NULL : gpu_dup(loc, (size_t)N * ld * sizeof(float));
		r->logits16 = bf16 ? gpu_dup(loc16, (size_t)N * ld * sizeof(uint16_t)) : NULL;
		free(loc);
		free(loc16);
		r->mx = gpu_dup(NULL, (size_t)N * sizeof(float));
		r->all = gpu_dup(NULL, (size_t)t * N * sizeof(float));
		r->red = gpu_dup(NULL, 2 * (size_t)N * sizeof(float));
		r->lse = gpu_dup(NULL, (size_t)N * sizeof(float));
		r->loss = gpu_dup(NULL, (size_t)N * sizeof(float));
		r->d = gpu_dup(NULL, (size_t)N * ld * sizeof(float));
		r->d16 = gpu_dup(NULL, (size_t)N * ld * sizeof(uint16_t));
	}
	int32_t *dtg = gpu_dup(tg, (size_t)N * sizeof(int32_t));
	float *loss = malloc((size_t)t * N * sizeof(float)), *lse = malloc((size_t)t * N * sizeof(float)),
	      *grad = calloc((size_t)N * V, sizeof(float)), *grad16 = calloc((size_t)N * V, sizeof(float));
	float *loss2 = malloc((size_t)t * N * sizeof(float)), *lse2 = malloc((size_t)t * N * sizeof(float)),
	      *gradb = calloc((size_t)N * V, sizeof(float)), *grad16b = calloc((size_t)N * V, sizeof(float));
	bool pad_zero, pad_zero2;
	s_run(rk, t, N, ld, dtg, scale, loss, lse, grad, grad16, V, &pad_zero);
	s_run(rk, t, N, ld, dtg, scale, loss2, lse2, gradb, grad16b, V, &pad_zero2);

	char name[96];
	const char *ty = bf16 ? "bf16" : "fp32";
	snprintf(name, sizeof name, "ce N=%d V=%d t=%d ld=%d %s loss", N, V, t, ld, ty);
	s_check(name, rel_err(loss, rloss, (size_t)N), FP32_BOUND);
	snprintf(name, sizeof name, "ce N=%d V=%d t=%d ld=%d %s lse", N, V, t, ld, ty);
	s_check(name, rel_err(lse, rlse, (size_t)N), FP32_BOUND);
	snprintf(name, sizeof name, "ce N=%d V=%d t=%d ld=%d %s dlogits", N, V, t, ld, ty);
	s_check(name, rel_err(grad, rgrad, (size_t)N * V), FP32_BOUND);
	snprintf(name, sizeof name, "ce N=%d V=%d t=%d ld=%d %s dlogits16", N, V, t, ld, ty);
	s_check(name, rel_err(grad16, rgrad, (size_t)N * V), BF16_BOUND);
	bool same = true;
	for (int k = 1; k < t; k++)
		same = same && !memcmp(loss, loss + (size_t)k * N, (size_t)N * sizeof(float)) &&
		       !memcmp(lse, lse + (size_t)k * N, (size_t)N * sizeof(float));
	s_exact("  every rank: the same loss and lse bits", same);
	s_exact("  padded columns' gradient 0", pad_zero && pad_zero2);
	s_exact("  a second run: the same bits",
		!memcmp(loss, loss2, (size_t)t * N * sizeof(float)) &&
			!memcmp(grad, gradb, (size_t)N * V * sizeof(float)) &&
			!memcmp(grad16, grad16b, (size_t)N * V * sizeof(float)));

	for (int k = 0; k < t; k++) {
		cudaFree(rk[k].logits);
		cudaFree(rk[k].logits16);
		cudaFree(rk[k].mx);
		cudaFree(rk[k].all);
		cudaFree(rk[k].red);
		cudaFree(rk[k].lse);
		cudaFree(rk[k].loss);
		cudaFree(rk[k].d);
		cudaFree(rk[k].d16);
	}
	cudaFree(dtg);
	free(x);
	free(tg);
	free(rlse);
	free(rloss);
	free(rgrad);
	free(loss);
	free(lse);
	free(grad);
	free(grad16);
	free(loss2);
	free(lse2);
	free(gradb);
	free(grad16b);
}

int main(void)
{
	gpu_probe_or_skip("gpu-tp-ce");
	s_case(37, 67, 2, 0, false);  /* V odd: one padded id on rank 1 */
	s_case(37, 67, 2, 3, true);   /* bf16 logits, rows wider than the slice */
	s_case(20, 301, 4, 1, false); /* t=4, three padded ids */
	s_case(9, 5, 1, 0, false);    /* t=1: the plain cross-entropy */
	if (n_failed) {
		printf("%d check(s) failed\n", n_failed);
		return 1;
	}
	printf("all checks passed\n");
	return 0;
}
