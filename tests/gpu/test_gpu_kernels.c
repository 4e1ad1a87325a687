/*
 * test_gpu_kernels: every GPU kernel and the cuBLASLt GEMM against the CPU
 * engine's reference (worker/engine/kernels.c, optim.c) or, where the CPU
 * has no separate function (the causal softmax, the GEMM), a reference in
 * double on the host, on fresh random inputs of odd sizes.
 *
 * Each check states its bound on rel_err = max|gpu - ref| / max|ref|
 * (gpu_util.h). Three kinds of bound:
 *   FP32 (1e-5; 2e-5 for sums over hundreds of rows): the same fp32 math in
 *     another order (warp and block trees instead of the CPU's 16 lanes),
 *     libm's expf/tanhf instead of the CPU's polynomial exp, and FMA
 *     contraction: a few ulp per element, far below any real bug (a wrong
 *     index or a missing term is an O(1) error).
 *   BF16 (4e-3 = 2^-8): an fp32 result rounded once to bf16 (unit roundoff
 *     2^-9) plus the fp32 error above.
 *   GEMM (5e-4): exact bf16 products summed in fp32 on tensor cores, against
 *     double sums of the same bf16 values; tensor-core accumulation is not
 *     IEEE round-to-nearest at every step, so this allows ~K ulp.
 *   ATTENTION (2e-2 forward, 3e-2 backward): the GPU rounds q, k, v, the
 *     probabilities (kept in bf16) and in backward dy and dpre to bf16 for
 *     its GEMMs while the CPU attention is all fp32: 4-6 bf16 roundings
 *     (2^-9 each) that compound through the softmax; expected around 5e-3.
 *     The fused attention (cuda_flash_*) rounds the same operands and
 *     keeps the same bounds; its log2-sum-exp2 is checked against one in
 *     double.
 * Exact checks: the embedding forward (one fp32 add), the embedding
 * gradients (the CPU's summation order), bf16 conversion (bit for bit) and
 * the bf16 parameter copy AdamW writes. Also checked: two runs of the
 * reductions give the same bits (no atomics).
 *
 * Skips (exit 77) with "no CUDA GPU: ...; skipping" where there is no GPU.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_attention.h"
#include "cuda_gemm.h"
#include "cuda_kernels.h"
#include "gpt2.h"
#include "gpu_util.h"
#include "kernels.h"
#include "optim.h"

#define FP32_BOUND 1e-5
#define FP32_SUM_BOUND 2e-5
#define BF16_BOUND 4e-3
#define GEMM_BOUND 5e-4
#define ATT_FWD_BOUND 2e-2
#define ATT_BWD_BOUND 3e-2

static int n_failed;

static void expect(const char *what, double err, double bound)
{
	int ok = err <= bound;
	printf("%s %-44s rel err %.3g (bound %.3g)\n", ok ? "ok  " : "FAIL", what, err, bound);
	if (!ok)
		n_failed++;
}

static void expect_true(const char *what, int ok)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
		n_failed++;
}

static size_t F(size_t n)
{
	return n * sizeof(float);
}

static float *download(const float *d, size_t n)
{
	float *h = malloc(F(n));
	gpu_get(h, d, F(n));
	return h;
}

static uint16_t *download16(const uint16_t *d, size_t n)
{
	uint16_t *h = malloc(n * sizeof(uint16_t));
	gpu_get(h, d, n * sizeof(uint16_t));
	return h;
}

/* bf16 copy of x (host) and x rounded to bf16 in place */
static uint16_t *to_bf16_rounding(float *x, size_t n)
{
	uint16_t *h = malloc(n * 2);
	kernel_to_bf16(h, x, n);
	for (size_t i = 0; i < n; i++)
		x[i] = bf16_to_float(h[i]);
	return h;
}

static int32_t *rand_tokens(int n, int V)
{
	int32_t *t = malloc((size_t)n * sizeof(int32_t));
	for (int i = 0; i < n; i++)
		t[i] = (int32_t)(rng_u32() % (uint32_t)V);
	return t;
}

static void test_embedding(void)
{
	const int B = 3, T = 17, C = 80, V = 7, N = B * T; /* V small: tokens repeat */
	float *wte = rand_floats((size_t)V * C, 1), *wpe = rand_floats((size_t)T * C, 1);
	int32_t *in = rand_tokens(N, V);
	float *ref = malloc(F((size_t)N * C));
	kernel_embed_positions(ref, wpe, B, T, C);
	kernel_embed_tokens(ref, in, wte, 0, V, N, C);
	float *d_wte = gpu_dup(wte, F((size_t)V * C)), *d_wpe = gpu_dup(wpe, F((size_t)T * C));
	int32_t *d_in = gpu_dup(in, (size_t)N * sizeof(int32_t));
	float *d_out = gpu_dup(NULL, F((size_t)N * C));
	cuda_embed_forward(d_out, d_in, d_wte, d_wpe, B, T, C, 0);
	float *out = download(d_out, (size_t)N * C);
	expect("embedding forward (exact)", rel_err(out, ref, (size_t)N * C), 0);

	/* backward, accumulating into random gradients */
	float *dout = rand_floats((size_t)N * C, 1);
	float *dwte = rand_floats((size_t)V * C, 1), *dwpe = rand_floats((size_t)T * C, 1);
	float *d_dout = gpu_dup(dout, F((size_t)N * C));
	float *d_dwte = gpu_dup(dwte, F((size_t)V * C)), *d_dwpe = gpu_dup(dwpe, F((size_t)T * C));
	kernel_embed_positions_backward(dwpe, dout, B, T, C);
	kernel_embed_tokens_backward(dwte, 0, V, dout, in, N, C);
	cuda_embed_positions_backward(d_dwpe, d_dout, B, T, C, 0);
	int32_t *uniq = malloc((size_t)N * 4), *starts = malloc((size_t)(N + 1) * 4),
		*rows = malloc((size_t)N * 4), *counts = malloc((size_t)(V + 1) * 4);
	int nu = cuda_embed_index_build(in, N, V, uniq, starts, rows, counts);
	int32_t *d_uniq = gpu_dup(uniq, (size_t)N * 4), *d_starts = gpu_dup(starts, (size_t)(N + 1) * 4),
		*d_rows = gpu_dup(rows, (size_t)N * 4);
	cuda_embed_tokens_backward(d_dwte, 0, d_dout, d_uniq, d_starts, d_rows, nu, C, 0);
	float *g_wpe = download(d_dwpe, (size_t)T * C), *g_wte = download(d_dwte, (size_t)V * C);
	expect("embedding backward, positions (exact)", rel_err(g_wpe, dwpe, (size_t)T * C), 0);
	expect("embedding backward, tokens (exact)", rel_err(g_wte, dwte, (size_t)V * C), 0);
	/* a block of wte rows [v0, v1) alone (streamed gradients): the sub-run of
	 * the index inside it, into a buffer holding only those rows */
	int v0 = V / 3, v1 = 2 * V / 3, k0 = 0, k1;
	while (k0 < nu && uniq[k0] < v0)
		k0++;
	for (k1 = k0; k1 < nu && uniq[k1] < v1;)
		k1++;
	float *blk = rand_floats((size_t)(v1 - v0) * C, 1);
	float *d_blk = gpu_dup(blk, F((size_t)(v1 - v0) * C));
	kernel_embed_tokens_backward(blk, v0, v1, dout, in, N, C);
	cuda_embed_tokens_backward(d_blk, v0, d_dout, d_uniq + k0, d_starts + k0, d_rows, k1 - k0, C, 0);
	float *g_blk = download(d_blk, (size_t)(v1 - v0) * C);
	expect("embedding backward, a block of token rows (exact)",
	       rel_err(g_blk, blk, (size_t)(v1 - v0) * C), 0);
	free(blk), free(g_blk);
	cudaFree(d_blk);
	free(wte), free(wpe), free(in), free(ref), free(out), free(dout), free(dwte), free(dwpe);
	free(uniq), free(starts), free(rows), free(counts), free(g_wpe), free(g_wte);
	cudaFree(d_wte), cudaFree(d_wpe), cudaFree(d_in), cudaFree(d_out), cudaFree(d_dout);
	cudaFree(d_dwte), cudaFree(d_dwpe), cudaFree(d_uniq), cudaFree(d_starts), cudaFree(d_rows);
}

static void test_layernorm(int N, int C)
{
	char name[96];
	size_t n = (size_t)N * C;
	float *x = rand_floats(n, 2), *w = rand_floats((size_t)C, 1), *b = rand_floats((size_t)C, 1);
	for (size_t i = 0; i < n; i++)
		x[i] += 0.5f; /* a mean to remove */
	float *out = malloc(F(n)), *mean = malloc(F((size_t)N)), *rstd = malloc(F((size_t)N));
	kernel_layernorm_forward(out, mean, rstd, x, w, b, N, C);
	float *d_x = gpu_dup(x, F(n)), *d_w = gpu_dup(w, F((size_t)C)), *d_b = gpu_dup(b, F((size_t)C));
	float *d_out = gpu_dup(NULL, F(n)), *d_mean = gpu_dup(NULL, F((size_t)N)),
	      *d_rstd = gpu_dup(NULL, F((size_t)N));
	uint16_t *d_out16 = gpu_dup(NULL, n * 2);
	cuda_layernorm_forward(d_out, d_out16, d_mean, d_rstd, d_x, d_w, d_b, N, C, 0);
	float *g = download(d_out, n), *gm = download(d_mean, (size_t)N), *gr = download(d_rstd, (size_t)N);
	uint16_t *g16 = download16(d_out16, n);
	snprintf(name, sizeof name, "layernorm forward %dx%d fp32", N, C);
	expect(name, rel_err(g, out, n), FP32_BOUND);
	snprintf(name, sizeof name, "layernorm forward %dx%d bf16", N, C);
	expect(name, rel_err_bf16(g16, out, n), BF16_BOUND);
	snprintf(name, sizeof name, "layernorm mean, rstd %dx%d", N, C);
	expect(name, fmax(rel_err(gm, mean, (size_t)N), rel_err(gr, rstd, (size_t)N)), FP32_BOUND);

	/* backward: dx, dw, db accumulate into random values */
	float *dout = rand_floats(n, 1), *dx = rand_floats(n, 1);
	float *dw = rand_floats((size_t)C, 1), *db = rand_floats((size_t)C, 1);
	float *d_dout = gpu_dup(dout, F(n)), *d_dx = gpu_dup(dx, F(n));
	float *d_dw = gpu_dup(dw, F((size_t)C)), *d_db = gpu_dup(db, F((size_t)C));
	float *d_scr = gpu_dup(NULL, F(cuda_colsum_scratch_floats(N, C)));
	uint16_t *d_dx16 = gpu_dup(NULL, n * 2);
	kernel_layernorm_backward(dx, dw, db, dout, x, mean, rstd, w, N, C);
	cuda_layernorm_backward(d_dx, d_dx16, d_dw, d_db, d_dout, d_x, d_mean, d_rstd, d_w, N, C, d_scr, 0);
	float *gdx = download(d_dx, n), *gdw = download(d_dw, (size_t)C), *gdb = download(d_db, (size_t)C);
	uint16_t *gdx16 = download16(d_dx16, n);
	snprintf(name, sizeof name, "layernorm backward dx %dx%d fp32", N, C);
	expect(name, rel_err(gdx, dx, n), FP32_BOUND);
	snprintf(name, sizeof name, "layernorm backward dx %dx%d bf16", N, C);
	expect(name, rel_err_bf16(gdx16, dx, n), BF16_BOUND);
	snprintf(name, sizeof name, "layernorm backward dw, db %dx%d fp32", N, C);
	expect(name, fmax(rel_err(gdw, dw, (size_t)C), rel_err(gdb, db, (size_t)C)), FP32_SUM_BOUND);

	/* the same again from the same inputs: the same bits */
	float *dw2 = rand_floats((size_t)C, 1);
	gpu_must(cudaMemcpy(d_dw, dw2, F((size_t)C), cudaMemcpyHostToDevice), "upload");
	gpu_must(cudaMemcpy(d_db, dw2, F((size_t)C), cudaMemcpyHostToDevice), "upload");
	cuda_layernorm_backward(d_dx, NULL, d_dw, d_db, d_dout, d_x, d_mean, d_rstd, d_w, N, C, d_scr, 0);
	float *a1 = download(d_dw, (size_t)C);
	gpu_must(cudaMemcpy(d_dw, dw2, F((size_t)C), cudaMemcpyHostToDevice), "upload");
	cuda_layernorm_backward(d_dx, NULL, d_dw, d_db, d_dout, d_x, d_mean, d_rstd, d_w, N, C, d_scr, 0);
	float *a2 = download(d_dw, (size_t)C);
	snprintf(name, sizeof name, "layernorm backward %dx%d repeats bit for bit", N, C);
	expect_true(name, memcmp(a1, a2, F((size_t)C)) == 0);

	/* dout in bf16 (cuda_layernorm_backward16): the same bits as fp32 dout
	 * holding the same values */
	float *dx0 = rand_floats(n, 1), *dw0 = rand_floats((size_t)C, 1), *r[2][3];
	uint16_t *h16 = to_bf16_rounding(dout, n), *d_dout16 = gpu_dup(h16, n * 2);
	gpu_must(cudaMemcpy(d_dout, dout, F(n), cudaMemcpyHostToDevice), "upload");
	for (int k = 0; k < 2; k++) {
		gpu_must(cudaMemcpy(d_dx, dx0, F(n), cudaMemcpyHostToDevice), "upload");
		gpu_must(cudaMemcpy(d_dw, dw0, F((size_t)C), cudaMemcpyHostToDevice), "upload");
		gpu_must(cudaMemcpy(d_db, dw0, F((size_t)C), cudaMemcpyHostToDevice), "upload");
		if (k == 0)
			cuda_layernorm_backward(d_dx, NULL, d_dw, d_db, d_dout, d_x, d_mean, d_rstd, d_w, N, C,
						d_scr, 0);
		else
			cuda_layernorm_backward16(d_dx, NULL, d_dw, d_db, d_dout16, d_x, d_mean, d_rstd, d_w, N,
						  C, d_scr, 0);
		r[k][0] = download(d_dx, n), r[k][1] = download(d_dw, (size_t)C), r[k][2] = download(d_db, (size_t)C);
	}
	snprintf(name, sizeof name, "layernorm backward %dx%d from bf16 dout: the same bits", N, C);
	expect_true(name, memcmp(r[0][0], r[1][0], F(n)) == 0 && memcmp(r[0][1], r[1][1], F((size_t)C)) == 0 &&
				  memcmp(r[0][2], r[1][2], F((size_t)C)) == 0);
	for (int k = 0; k < 2; k++)
		free(r[k][0]), free(r[k][1]), free(r[k][2]);
	free(dx0), free(dw0), free(h16);
	cudaFree(d_dout16);

	free(x), free(w), free(b), free(out), free(mean), free(rstd), free(g), free(gm), free(gr);
	free(g16), free(dout), free(dx), free(dw), free(db), free(gdx), free(gdw), free(gdb), free(gdx16);
	free(dw2), free(a1), free(a2);
	cudaFree(d_x), cudaFree(d_w), cudaFree(d_b), cudaFree(d_out), cudaFree(d_mean), cudaFree(d_rstd);
	cudaFree(d_out16), cudaFree(d_dout), cudaFree(d_dx), cudaFree(d_dw), cudaFree(d_db);
	cudaFree(d_scr), cudaFree(d_dx16);
}

static void test_bias_backward(void)
{
	const int N = 300, C = 200; /* two row chunks, a partial column tile */
	float *dout = rand_floats((size_t)N * C, 1), *db = rand_floats((size_t)C, 1);
	float *d_dout = gpu_dup(dout, F((size_t)N * C)), *d_db = gpu_dup(db, F((size_t)C));
	float *d_scr = gpu_dup(NULL, F(cuda_colsum_scratch_floats(N, C)));
	kernel_bias_backward(db, dout, N, C);
	cuda_bias_backward(d_db, d_dout, N, C, d_scr, 0);
	float *g = download(d_db, (size_t)C);
	expect("bias backward 300x200 fp32", rel_err(g, db, (size_t)C), FP32_SUM_BOUND);
	/* bf16 dout: the same bits as fp32 dout holding the same values, also
	 * one element off 8-byte alignment (one column at a time) */
	uint16_t *h16 = to_bf16_rounding(dout, (size_t)N * C), *d16 = gpu_dup(NULL, ((size_t)N * C + 1) * 2);
	float *zero = calloc((size_t)C, sizeof(float));
	gpu_must(cudaMemcpy(d_dout, dout, F((size_t)N * C), cudaMemcpyHostToDevice), "upload");
	float *want[3];
	for (int k = 0; k < 3; k++) {
		gpu_must(cudaMemcpy(d16 + (k == 2), h16, (size_t)N * C * 2, cudaMemcpyHostToDevice), "upload");
		gpu_must(cudaMemcpy(d_db, zero, F((size_t)C), cudaMemcpyHostToDevice), "upload");
		if (k == 0)
			cuda_bias_backward(d_db, d_dout, N, C, d_scr, 0);
		else
			cuda_bias_backward16(d_db, d16 + (k == 2), N, C, d_scr, 0);
		want[k] = download(d_db, (size_t)C);
	}
	expect_true("bias backward 300x200 from bf16 dout: the same bits, aligned or not",
		    memcmp(want[0], want[1], F((size_t)C)) == 0 && memcmp(want[0], want[2], F((size_t)C)) == 0);
	free(want[0]), free(want[1]), free(want[2]), free(h16), free(zero);
	cudaFree(d16);
	free(dout), free(db), free(g);
	cudaFree(d_dout), cudaFree(d_db), cudaFree(d_scr);
}

/*
 * GELU on the GPU is a GEMM epilogue (cuda_gemm.h); where cuBLASLt has no
 * algorithm for it, cuda_gemm_epilogue16 applies it to the bf16 product.
 * That kernel on its own, rows ld > N apart: bf16 inputs are exact, so
 * the results are one bf16 rounding from kernels.c's GELU (and GELU's
 * input copied to aux exactly); the padding columns are left alone.
 */
static void test_gelu(void)
{
	const int M = 301, N = 99, ld = 104;
	const size_t n = (size_t)M * N, np = (size_t)M * ld;
	float *x = rand_floats(n, 2), *dy = rand_floats(n, 1), *bias = rand_floats((size_t)N, 1);
	uint16_t *x16 = to_bf16_rounding(x, n), *dy16 = to_bf16_rounding(dy, n);
	uint16_t *b16 = to_bf16_rounding(bias, (size_t)N);
	uint16_t *px = malloc(np * 2), *pdy = malloc(np * 2);
	for (size_t i = 0; i < np; i++)
		px[i] = pdy[i] = 0x7fc0; /* NaN in the padding */
	for (int r = 0; r < M; r++) {
		memcpy(px + (size_t)r * ld, x16 + (size_t)r * N, (size_t)N * 2);
		memcpy(pdy + (size_t)r * ld, dy16 + (size_t)r * N, (size_t)N * 2);
	}
	/* forward with the bias: GELU's input is x + bias (fp32 sum of bf16s) */
	float *xb = malloc(F(n)), *ref = malloc(F(n)), *dref = malloc(F(n));
	for (size_t i = 0; i < n; i++)
		xb[i] = x[i] + bias[i % (size_t)N];
	kernel_gelu_forward(ref, xb, n);
	memcpy(dref, dy, F(n));
	kernel_gelu_backward_inplace(dref, x, n);
	uint16_t *d_y = gpu_dup(px, np * 2), *d_aux = gpu_dup(NULL, np * 2), *d_b = gpu_dup(b16, (size_t)N * 2);
	gpu_must(cudaMemset(d_aux, 0xff, np * 2), "fill");
	cuda_gemm_epilogue16(CUDA_GEMM_EPI_GELU, d_y, d_aux, d_b, M, N, ld, 0);
	uint16_t *gy = download16(d_y, np), *gaux = download16(d_aux, np);
	uint16_t *ry = malloc(n * 2), *raux = malloc(n * 2);
	bool pad_ok = true;
	for (int r = 0; r < M; r++) {
		memcpy(ry + (size_t)r * N, gy + (size_t)r * ld, (size_t)N * 2);
		memcpy(raux + (size_t)r * N, gaux + (size_t)r * ld, (size_t)N * 2);
		for (int c = N; c < ld; c++)
			pad_ok = pad_ok && gy[(size_t)r * ld + c] == 0x7fc0 && gaux[(size_t)r * ld + c] == 0xffff;
	}
	expect("gelu (epilogue kernel) forward + bias, bf16", rel_err_bf16(ry, ref, n), BF16_BOUND);
	expect("gelu (epilogue kernel): aux = GELU's input, bf16", rel_err_bf16(raux, xb, n), BF16_BOUND);
	/* backward: dy * gelu'(x), x from aux */
	gpu_must(cudaMemcpy(d_y, pdy, np * 2, cudaMemcpyHostToDevice), "upload");
	gpu_must(cudaMemcpy(d_aux, px, np * 2, cudaMemcpyHostToDevice), "upload");
	cuda_gemm_epilogue16(CUDA_GEMM_EPI_DGELU, d_y, d_aux, NULL, M, N, ld, 0);
	free(gy);
	gy = download16(d_y, np);
	for (int r = 0; r < M; r++) {
		memcpy(ry + (size_t)r * N, gy + (size_t)r * ld, (size_t)N * 2);
		for (int c = N; c < ld; c++)
			pad_ok = pad_ok && gy[(size_t)r * ld + c] == 0x7fc0;
	}
	expect("gelu (epilogue kernel) backward, bf16", rel_err_bf16(ry, dref, n), BF16_BOUND);
	expect_true("gelu (epilogue kernel): row padding left alone", pad_ok);
	free(x), free(dy), free(bias), free(x16), free(dy16), free(b16), free(px), free(pdy), free(xb);
	free(ref), free(dref), free(gy), free(gaux), free(ry), free(raux);
	cudaFree(d_y), cudaFree(d_aux), cudaFree(d_b);
}

/* softmax over j <= i of each row, in double; zeros above the diagonal */
static void ref_softmax(float *p, const float *s, int BH, int T)
{
	for (size_t r = 0; r < (size_t)BH * T; r++) {
		int i = (int)(r % (size_t)T);
		const float *sr = s + r * T;
		double mx = -INFINITY, sum = 0;
		for (int j = 0; j <= i; j++)
			mx = sr[j] > mx ? sr[j] : mx;
		for (int j = 0; j <= i; j++)
			sum += exp((double)sr[j] - mx);
		for (int j = 0; j < T; j++)
			p[r * T + j] = j <= i ? (float)(exp((double)sr[j] - mx) / sum) : 0.0f;
	}
}

static void test_softmax(void)
{
	const int BH = 6, T = 45;
	const size_t n = (size_t)BH * T * T;
	const float scale = 0.25f;
	float *s = rand_floats(n, 2), *p = malloc(F(n));
	ref_softmax(p, s, BH, T);
	float *d_s = gpu_dup(s, F(n)), *d_att = gpu_dup(NULL, F(n));
	uint16_t *d_att16 = gpu_dup(NULL, n * 2);
	cuda_softmax_causal_forward(d_att, d_att16, d_s, BH, T, 0);
	float *g = download(d_att, n);
	uint16_t *g16 = download16(d_att16, n);
	expect("causal softmax forward fp32", rel_err(g, p, n), FP32_BOUND);
	expect("causal softmax forward bf16", rel_err_bf16(g16, p, n), BF16_BOUND);
	int zeros = 1;
	for (size_t r = 0; r < (size_t)BH * T; r++)
		for (int j = (int)(r % (size_t)T) + 1; j < T; j++)
			zeros &= g[r * T + j] == 0.0f && g16[r * T + j] == 0;
	expect_true("causal softmax: exact zeros above the diagonal", zeros);
	cuda_softmax_causal_forward(d_s, NULL, d_s, BH, T, 0); /* in place */
	float *gi = download(d_s, n);
	expect_true("causal softmax in place: the same bits", memcmp(gi, g, F(n)) == 0);

	/* backward from the GPU's bf16 probabilities (what the model keeps);
	 * the reference in double from the same bf16 values */
	float *p16 = malloc(F(n));
	for (size_t i = 0; i < n; i++)
		p16[i] = bf16_to_float(g16[i]);
	float *datt = rand_floats(n, 1), *ref = malloc(F(n));
	for (size_t r = 0; r < (size_t)BH * T; r++) {
		int i = (int)(r % (size_t)T);
		double pdp = 0;
		for (int j = 0; j <= i; j++)
			pdp += (double)p16[r * T + j] * datt[r * T + j];
		for (int j = 0; j < T; j++)
			ref[r * T + j] = j <= i ? (float)(p16[r * T + j] * (datt[r * T + j] - pdp) * scale) : 0.0f;
	}
	float *d_datt = gpu_dup(datt, F(n)), *d_dpre = gpu_dup(NULL, F(n));
	uint16_t *d_dpre16 = gpu_dup(NULL, n * 2);
	cuda_softmax_causal_backward(d_dpre16, d_dpre, d_datt, d_att16, BH, T, scale, 0);
	float *gd = download(d_dpre, n);
	uint16_t *gd16 = download16(d_dpre16, n);
	expect("causal softmax backward fp32", rel_err(gd, ref, n), FP32_SUM_BOUND);
	expect("causal softmax backward bf16", rel_err_bf16(gd16, ref, n), BF16_BOUND);
	cuda_softmax_causal_backward(d_att16, NULL, d_datt, d_att16, BH, T, scale, 0); /* in place */
	uint16_t *gi16 = download16(d_att16, n);
	expect_true("causal softmax backward in place: the same bits", memcmp(gi16, gd16, n * 2) == 0);
	free(s), free(p), free(g), free(g16), free(gi), free(p16), free(datt), free(ref), free(gd);
	free(gd16), free(gi16);
	cudaFree(d_s), cudaFree(d_att), cudaFree(d_att16), cudaFree(d_datt), cudaFree(d_dpre);
	cudaFree(d_dpre16);
}

/* Rows of n floats, ld apart (the columns past n set to pad); and back. */
static float *pad_rows(const float *x, int rows, int n, int ld, float pad)
{
	float *p = malloc(F((size_t)rows * ld));
	for (int r = 0; r < rows; r++)
		for (int c = 0; c < ld; c++)
			p[(size_t)r * ld + c] = c < n ? x[(size_t)r * n + c] : pad;
	return p;
}

/* The device's padded rows, compacted; *pad_ok = the padding still zero. */
static float *download_rows(const float *d, int rows, int n, int ld, bool *pad_ok)
{
	float *all = download(d, (size_t)rows * ld), *x = malloc(F((size_t)rows * n));
	*pad_ok = true;
	for (int r = 0; r < rows; r++)
		for (int c = 0; c < ld; c++) {
			float v = all[(size_t)r * ld + c];
			if (c < n)
				x[(size_t)r * n + c] = v;
			else if (v != 0.0f)
				*pad_ok = false;
		}
	free(all);
	return x;
}

static uint16_t *download16_rows(const uint16_t *d, int rows, int n, int ld)
{
	uint16_t *all = download16(d, (size_t)rows * ld), *x = malloc((size_t)rows * n * 2);
	for (int r = 0; r < rows; r++)
		memcpy(x + (size_t)r * n, all + (size_t)r * ld, (size_t)n * 2);
	free(all);
	return x;
}

/* Rows ld > V apart, as the GPU model lays its logits out; the padding
 * holds NaN, which would poison every row that read it. The kernels read
 * float4 pieces where ld is a multiple of 4, then V's last V % 4 one by
 * one; other ld one by one throughout: the cases cover all three. */
/* cuda_crossentropy_forward, or its bf16-logits twin when d_logits16 is
 * given */
static void ce_run(const float *d_logits, const uint16_t *d_logits16, float *losses, float *lse,
                   float *dl, uint16_t *dl16, const int32_t *tg, int N, int V, int ld, float scale)
{
	if (d_logits16)
		cuda_crossentropy_forward16(losses, lse, dl, dl16, d_logits16, tg, N, V, ld, scale, 0);
	else
		cuda_crossentropy_forward(losses, lse, dl, dl16, d_logits, tg, N, V, ld, scale, 0);
}

/* b16: the logits rounded to bf16 first (the reference sees the rounded
 * values) and handed over as bf16, NaN in the padding likewise */
static void crossentropy_case(int N, int V, int ld, bool b16)
{
	char what[128];
	const char *kind = b16 ? "bf16 logits" : "fp32 logits";
	const size_t n = (size_t)N * V, np = (size_t)N * ld;
	float *logits = rand_floats(n, 3);
	if (b16)
		free(to_bf16_rounding(logits, n));
	int32_t *tg = rand_tokens(N, V);
	float *losses = malloc(F((size_t)N)), *lse = malloc(F((size_t)N));
	float mean = kernel_crossentropy_forward(losses, lse, logits, tg, N, V);
	float *padded = pad_rows(logits, N, V, ld, NAN);
	float *d_logits = gpu_dup(padded, F(np));
	uint16_t *d_logits16 = NULL;
	if (b16) {
		uint16_t *p16 = malloc(np * 2);
		kernel_to_bf16(p16, padded, np);
		d_logits16 = gpu_dup(p16, np * 2);
		free(p16);
	}
	int32_t *d_tg = gpu_dup(tg, (size_t)N * 4);
	float *d_losses = gpu_dup(NULL, F((size_t)N)), *d_lse = gpu_dup(NULL, F((size_t)N)),
	      *d_mean = gpu_dup(NULL, F(1));
	const float scale = 1.0f / N;
	float *d_d = gpu_dup(NULL, F(np));
	uint16_t *d_d16 = gpu_dup(NULL, np * 2);
	ce_run(d_logits, d_logits16, d_losses, d_lse, d_d, d_d16, d_tg, N, V, ld, scale);
	cuda_mean(d_mean, d_losses, N, 0);
	float *gl = download(d_losses, (size_t)N), *gs = download(d_lse, (size_t)N), *gm = download(d_mean, 1);
	snprintf(what, sizeof what, "cross-entropy V %d ld %d, %s: forward losses fp32", V, ld, kind);
	expect(what, rel_err(gl, losses, (size_t)N), FP32_BOUND);
	snprintf(what, sizeof what, "cross-entropy V %d ld %d, %s: forward lse fp32", V, ld, kind);
	expect(what, rel_err(gs, lse, (size_t)N), FP32_BOUND);
	snprintf(what, sizeof what, "cross-entropy V %d ld %d, %s: mean loss fp32", V, ld, kind);
	expect(what, rel_err(gm, &mean, 1), FP32_BOUND);

	kernel_crossentropy_backward_inplace(logits, lse, tg, N, V, scale);
	bool pad_ok;
	float *gd = download_rows(d_d, N, V, ld, &pad_ok);
	uint16_t *gd16 = download16_rows(d_d16, N, V, ld);
	snprintf(what, sizeof what, "cross-entropy V %d ld %d, %s: gradient fp32", V, ld, kind);
	expect(what, rel_err(gd, logits, n), FP32_BOUND);
	snprintf(what, sizeof what, "cross-entropy V %d ld %d, %s: gradient bf16", V, ld, kind);
	expect(what, rel_err_bf16(gd16, logits, n), BF16_BOUND);
	snprintf(what, sizeof what, "cross-entropy V %d ld %d, %s: gradient leaves the row padding alone",
		 V, ld, kind);
	expect_true(what, pad_ok);
	/* without a gradient: the losses alone, the same bits */
	float *d_l2 = gpu_dup(NULL, F((size_t)N));
	ce_run(d_logits, d_logits16, d_l2, d_lse, NULL, NULL, d_tg, N, V, ld, scale);
	float *gl2 = download(d_l2, (size_t)N);
	snprintf(what, sizeof what, "cross-entropy V %d ld %d, %s: losses without a gradient, same bits", V, ld, kind);
	expect_true(what, memcmp(gl2, gl, F((size_t)N)) == 0);
	free(gl2);
	cudaFree(d_l2);
	free(logits), free(tg), free(losses), free(lse), free(gl), free(gs), free(gm), free(gd), free(gd16);
	free(padded);
	cudaFree(d_logits), cudaFree(d_tg), cudaFree(d_losses), cudaFree(d_lse), cudaFree(d_mean);
	cudaFree(d_d), cudaFree(d_d16), cudaFree(d_logits16);
}

static void test_crossentropy(void)
{
	for (int b16 = 0; b16 < 2; b16++) {
		crossentropy_case(19, 1000, 1024, b16); /* 4-wide pieces only */
		crossentropy_case(7, 1003, 1024, b16);  /* and a tail of 3 */
		crossentropy_case(5, 999, 1001, b16);   /* rows not aligned for 4-wide loads */
		crossentropy_case(3, 50257, 50304, b16); /* GPT-2's rows, held in registers whole */
		crossentropy_case(2, 51300, 51300, b16); /* rows too long for the registers */
	}
}

static void test_conversions_and_sums(void)
{
	const size_t n = 77777;
	float *x = rand_floats(n, 3);
	x[0] = 0.0f, x[1] = -0.0f, x[2] = INFINITY, x[3] = -INFINITY, x[4] = 3.0e38f, x[5] = 1.5e-38f;
	x[6] = 1.00390625f; /* a tie: 1 + 2^-8, rounds to even */
	uint16_t *ref = malloc(n * 2);
	kernel_to_bf16(ref, x, n);
	float *d_x = gpu_dup(x, F(n));
	uint16_t *d_16 = gpu_dup(NULL, n * 2);
	cuda_to_bf16(d_16, d_x, n, 0);
	uint16_t *g = download16(d_16, n);
	expect_true("fp32 -> bf16 bit for bit as kernel_to_bf16", memcmp(g, ref, n * 2) == 0);

	x[2] = x[3] = x[4] = 1.0f; /* finite again for the sums */
	gpu_must(cudaMemcpy(d_x, x, F(n), cudaMemcpyHostToDevice), "upload");
	double *d_ss = gpu_dup(NULL, sizeof(double)), *d_scr = gpu_dup(NULL, cuda_sum_squares_scratch() * 8);
	double ss1 = 0, ss2 = 0, ref_ss = optim_sum_squares(x, n);
	cuda_sum_squares(d_ss, d_x, n, d_scr, 0);
	gpu_get(&ss1, d_ss, sizeof ss1);
	cuda_sum_squares(d_ss, d_x, n, d_scr, 0);
	gpu_get(&ss2, d_ss, sizeof ss2);
	expect("sum of squares (double) vs optim_sum_squares", fabs(ss1 - ref_ss) / ref_ss, 1e-12);
	expect_true("sum of squares repeats bit for bit", memcmp(&ss1, &ss2, sizeof ss1) == 0);

	float *y = rand_floats(n, 1), *sum = malloc(F(n));
	for (size_t i = 0; i < n; i++)
		sum[i] = x[i] + y[i];
	float *d_y = gpu_dup(y, F(n));
	cuda_add(d_x, d_y, n, 0);
	float *gs = download(d_x, n);
	expect("add (exact)", rel_err(gs, sum, n), 0);
	free(x), free(ref), free(g), free(y), free(sum), free(gs);
	cudaFree(d_x), cudaFree(d_16), cudaFree(d_ss), cudaFree(d_scr), cudaFree(d_y);
}

/* AdamW on a tiny CPU model's flat buffer, decay by its tensor table */
static void test_adamw(void)
{
	gpt2_config_t cfg = {.n_layer = 1, .n_head = 2, .n_embd = 8, .vocab_size = 11, .seq_len = 5};
	char err[256];
	gpt2_t *model = gpt2_create(&cfg, 1, 5, GPT2_PRECISION_FP32, err, sizeof err);
	if (!model) {
		printf("FAIL gpt2_create: %s\n", err);
		n_failed++;
		return;
	}
	size_t n = gpt2_num_params(model);
	float *p = rand_floats(n, 1), *g = rand_floats(n, 1), *m = rand_floats(n, 0.1f), *v = malloc(F(n));
	for (size_t i = 0; i < n; i++)
		v[i] = fabsf(rng_normal()) * 0.01f;
	float *d_p = gpu_dup(p, F(n)), *d_g = gpu_dup(g, F(n)), *d_m = gpu_dup(m, F(n)), *d_v = gpu_dup(v, F(n));
	uint16_t *d_p16 = gpu_dup(NULL, n * 2);
	optim_adamw_t hp = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .t = 3};
	const float grad_scale = 0.75f;
	/* the CPU: clip by scaling the gradients, then update */
	optim_scale(g, n, grad_scale);
	optim_adamw_update(gpt2_tensors(model), gpt2_num_tensors(model), p, g, m, v, 0, n, &hp);
	const float step = (float)(hp.lr / (1.0 - pow(hp.beta1, (double)hp.t)));
	const float ibc2 = (float)(1.0 / sqrt(1.0 - pow(hp.beta2, (double)hp.t)));
	for (int i = 0; i < gpt2_num_tensors(model); i++) {
		const gpt2_tensor_t *t = gpt2_tensor(model, i);
		float keep = t->decay ? (float)(1.0 - hp.lr * hp.weight_decay) : 1.0f;
		cuda_adamw(d_p + t->offset, d_p16 + t->offset, d_g + t->offset, d_m + t->offset,
			   d_v + t->offset, t->numel, 0.9f, 0.95f, step, ibc2, 1e-8f, keep, grad_scale, 0);
	}
	float *gp = download(d_p, n), *gm = download(d_m, n), *gv = download(d_v, n);
	uint16_t *gp16 = download16(d_p16, n), *ref16 = malloc(n * 2);
	expect("adamw params vs optim_adamw_update", rel_err(gp, p, n), FP32_BOUND);
	expect("adamw m, v vs optim_adamw_update", fmax(rel_err(gm, m, n), rel_err(gv, v, n)), FP32_BOUND);
	kernel_to_bf16(ref16, gp, n);
	expect_true("adamw bf16 copy = bf16(updated params)", memcmp(gp16, ref16, n * 2) == 0);
	gpt2_free(model);
	free(p), free(g), free(m), free(v), free(gp), free(gm), free(gv), free(gp16), free(ref16);
	cudaFree(d_p), cudaFree(d_g), cudaFree(d_m), cudaFree(d_v), cudaFree(d_p16);
}

/* ---- GEMM ---- */

/* apart: with acc, the matrix added comes from C_in and C starts as NaN */
static void gemm_case_ex(cuda_gemm_t *gm, const char *name, int M, int N, int K, bool ta, bool tb,
                         bool bias, bool acc, float alpha, int batch, bool apart)
{
	int nb = batch > 1 ? batch : 1;
	size_t na = (size_t)M * K, nbm = (size_t)K * N, nc = (size_t)M * N;
	float *A = rand_floats(na * nb, 1), *Bm = rand_floats(nbm * nb, 1), *Cm = rand_floats(nc * nb, 1);
	float *bv = rand_floats((size_t)N, 1);
	uint16_t *A16 = to_bf16_rounding(A, na * nb), *B16 = to_bf16_rounding(Bm, nbm * nb);
	float *ref = malloc(F(nc * nb));
	for (int b = 0; b < nb; b++)
		for (int i = 0; i < M; i++)
			for (int j = 0; j < N; j++) {
				double s = 0;
				for (int k = 0; k < K; k++) {
					double a = ta ? A[b * na + (size_t)k * M + i] : A[b * na + (size_t)i * K + k];
					double bb = tb ? Bm[b * nbm + (size_t)j * K + k] : Bm[b * nbm + (size_t)k * N + j];
					s += a * bb;
				}
				s *= alpha;
				if (bias)
					s += bv[j];
				if (acc)
					s += Cm[b * nc + (size_t)i * N + j];
				ref[b * nc + (size_t)i * N + j] = (float)s;
			}
	uint16_t *d_A = gpu_dup(A16, na * nb * 2), *d_B = gpu_dup(B16, nbm * nb * 2);
	float *d_C = gpu_dup(apart ? NULL : Cm, F(nc * nb)), *d_bias = gpu_dup(bv, F((size_t)N));
	float *d_Cin = apart ? gpu_dup(Cm, F(nc * nb)) : NULL;
	cuda_gemm_args_t a;
	memset(&a, 0, sizeof a);
	a.M = M, a.N = N, a.K = K, a.A = d_A, a.trans_a = ta, a.B = d_B, a.trans_b = tb, a.C = d_C;
	a.bias = bias ? d_bias : NULL;
	a.alpha = alpha;
	a.accumulate = acc;
	a.C_in = d_Cin;
	a.batch = batch;
	a.stride_a = (int64_t)na, a.stride_b = (int64_t)nbm, a.stride_c = (int64_t)nc;
	cuda_gemm_run(gm, &a);
	float *g = download(d_C, nc * nb);
	expect(name, rel_err(g, ref, nc * nb), GEMM_BOUND);
	if (apart) {
		float *cin = download(d_Cin, nc * nb);
		expect_true("gemm: C_in left as it was", memcmp(cin, Cm, F(nc * nb)) == 0);
		free(cin);
		cudaFree(d_Cin);
	}
	free(A), free(Bm), free(Cm), free(bv), free(A16), free(B16), free(ref), free(g);
	cudaFree(d_A), cudaFree(d_B), cudaFree(d_C), cudaFree(d_bias);
}

static void gemm_case(cuda_gemm_t *gm, const char *name, int M, int N, int K, bool ta, bool tb,
                      bool bias, bool acc, float alpha, int batch)
{
	gemm_case_ex(gm, name, M, N, K, ta, tb, bias, acc, alpha, batch, false);
}

/*
 * bf16 output: C16 (M, N) = epi(A @ op(B) [+ bias16]) against the host's
 * product of the same bf16 operands, then kernels.c's GELU (forward, or
 * backward with a random aux as GELU's input). N not a multiple of 8 gives
 * cuBLASLt no GELU epilogue (its aux ld must be), so cuda_gemm's own
 * epilogue kernel runs on the product rounded to bf16: two roundings,
 * hence twice bf16's bound (a missing or wrong epilogue is off by O(1)). With DGELU, the
 * FC bias's gradient from the bf16 result (cuda_bias_backward16) is
 * checked against kernels.c's column sums of the same values.
 */
static void gemm16_case(cuda_gemm_t *gm, const char *name, int M, int N, int K, bool tb, bool bias,
                        cuda_gemm_epi_t epi)
{
	size_t na = (size_t)M * K, nbm = (size_t)K * N, nc = (size_t)M * N;
	float *A = rand_floats(na, 1), *Bm = rand_floats(nbm, 1), *bv = rand_floats((size_t)N, 1);
	float *pre = rand_floats(nc, 2); /* DGELU's aux: GELU's input */
	uint16_t *A16 = to_bf16_rounding(A, na), *B16 = to_bf16_rounding(Bm, nbm);
	uint16_t *bv16 = to_bf16_rounding(bv, (size_t)N), *pre16 = to_bf16_rounding(pre, nc);
	float *x = malloc(F(nc)), *ref = malloc(F(nc));
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			double sum = 0;
			for (int k = 0; k < K; k++)
				sum += (double)A[(size_t)i * K + k] *
				       (tb ? Bm[(size_t)j * K + k] : Bm[(size_t)k * N + j]);
			x[(size_t)i * N + j] = (float)(sum + (bias ? bv[j] : 0.0));
		}
	memcpy(ref, x, F(nc));
	if (epi == CUDA_GEMM_EPI_GELU)
		kernel_gelu_forward(ref, x, nc);
	else if (epi == CUDA_GEMM_EPI_DGELU)
		kernel_gelu_backward_inplace(ref, pre, nc);
	uint16_t *d_A = gpu_dup(A16, na * 2), *d_B = gpu_dup(B16, nbm * 2), *d_bias = gpu_dup(bv16, (size_t)N * 2);
	uint16_t *d_C = gpu_dup(NULL, nc * 2), *d_aux = gpu_dup(epi == CUDA_GEMM_EPI_DGELU ? pre16 : NULL, nc * 2);
	cuda_gemm_args_t a;
	memset(&a, 0, sizeof a);
	a.M = M, a.N = N, a.K = K, a.A = d_A, a.B = d_B, a.trans_b = tb, a.C16 = d_C, a.alpha = 1.0f;
	a.bias16 = bias ? d_bias : NULL;
	a.epi = epi;
	a.aux = epi != CUDA_GEMM_EPI_NONE ? d_aux : NULL;
	cuda_gemm_run(gm, &a);
	uint16_t *g = download16(d_C, nc);
	expect(name, rel_err_bf16(g, ref, nc), 2 * BF16_BOUND);
	if (epi == CUDA_GEMM_EPI_GELU) {
		uint16_t *aux = download16(d_aux, nc);
		expect("  its aux: GELU's input (bf16)", rel_err_bf16(aux, x, nc), 2 * BF16_BOUND);
		free(aux);
	}
	if (epi == CUDA_GEMM_EPI_DGELU) {
		float *gv = malloc(F(nc)), *db = rand_floats((size_t)N, 1), *dbr = malloc(F((size_t)N));
		memcpy(dbr, db, F((size_t)N));
		for (size_t i = 0; i < nc; i++)
			gv[i] = bf16_to_float(g[i]);
		kernel_bias_backward(dbr, gv, M, N);
		float *d_db = gpu_dup(db, F((size_t)N)), *d_scr = gpu_dup(NULL, F(cuda_colsum_scratch_floats(M, N)));
		cuda_bias_backward16(d_db, d_C, M, N, d_scr, 0);
		float *gdb = download(d_db, (size_t)N);
		expect("  bias gradient of the bf16 result", rel_err(gdb, dbr, (size_t)N), FP32_SUM_BOUND);
		free(gv), free(db), free(dbr), free(gdb);
		cudaFree(d_db), cudaFree(d_scr);
	}
	free(A), free(Bm), free(bv), free(pre), free(A16), free(B16), free(bv16), free(pre16), free(x),
		free(ref), free(g);
	cudaFree(d_A), cudaFree(d_B), cudaFree(d_bias), cudaFree(d_C), cudaFree(d_aux);
}

static void test_gemm(void)
{
	char err[256];
	cudaStream_t s;
	gpu_must(cudaStreamCreate(&s), "stream");
	cuda_gemm_t *gm = cuda_gemm_create(s, err, sizeof err);
	if (!gm) {
		printf("FAIL cuda_gemm_create: %s\n", err);
		n_failed++;
		return;
	}
	gemm_case(gm, "gemm NN + bias (33x70x48)", 33, 70, 48, false, false, true, false, 1, 0);
	gemm_case(gm, "gemm NT accumulate (40x24x64)", 40, 24, 64, false, true, false, true, 1, 0);
	gemm_case(gm, "gemm TN accumulate (64x96x37)", 64, 96, 37, true, false, false, true, 1, 0);
	gemm_case(gm, "gemm TT (16x17x32)", 16, 17, 32, true, true, false, false, 1, 0);
	gemm_case_ex(gm, "gemm NN + bias + a residual apart (C_in, 96x64x80)", 96, 64, 80, false, false,
		     true, true, 1, 0, true);
	gemm_case(gm, "gemm NT accumulate, alpha 0 (C = C)", 40, 24, 64, false, true, false, true, 0, 0);
	gemm_case(gm, "gemm NN + bias + accumulate (128x384x768)", 128, 384, 768, false, false, true, true,
		  1, 0);
	gemm_case(gm, "gemm batched NT, alpha 0.25 (6 x 45x45x16)", 45, 45, 16, false, true, false, false,
		  0.25f, 6);
	gemm_case(gm, "gemm batched TN (6 x 45x16x45)", 45, 16, 45, true, false, false, false, 1, 6);
	gemm16_case(gm, "gemm bf16 out NN + bias (48x96x64)", 48, 96, 64, false, true, CUDA_GEMM_EPI_NONE);
	gemm16_case(gm, "gemm bf16 out NN + bias + GELU (64x256x96)", 64, 256, 96, false, true,
		    CUDA_GEMM_EPI_GELU);
	gemm16_case(gm, "gemm bf16 out NN + GELU, no bias (40x128x32)", 40, 128, 32, false, false,
		    CUDA_GEMM_EPI_GELU);
	gemm16_case(gm, "gemm bf16 out NN + bias + GELU, N 70 (33x70x48)", 33, 70, 48, false, true,
		    CUDA_GEMM_EPI_GELU);
	gemm16_case(gm, "gemm bf16 out NT + GELU backward (64x256x96)", 64, 256, 96, true, false,
		    CUDA_GEMM_EPI_DGELU);
	gemm16_case(gm, "gemm bf16 out NT + GELU backward, N 70 (33x70x48)", 33, 70, 48, true, false,
		    CUDA_GEMM_EPI_DGELU);
	int cached = cuda_gemm_cache_size(gm);
	gemm_case(gm, "gemm NN + bias again (cached algorithm)", 33, 70, 48, false, false, true, false, 1, 0);
	expect_true("gemm: a repeated problem reuses its cached algorithm",
		    cuda_gemm_cache_size(gm) == cached);
	cuda_gemm_free(gm);
	cudaStreamDestroy(s);
}

/* ---- attention (GEMMs + kernels) against the CPU's fp32 attention ---- */

static void attention_case(int B, int T, int C, int H)
{
	const int N = B * T;
	printf("     attention (batched GEMMs), B %d T %d C %d H %d: head size %d\n", B, T, C, H, C / H);
	const size_t nqkv = (size_t)N * 3 * C, nc = (size_t)N * C, natt = (size_t)B * H * T * T;
	char err[256];
	float *qkv = rand_floats(nqkv, 1);
	float *out = malloc(F(nc)), *att = malloc(F(natt));
	float *scr = malloc(F(kernel_attention_scratch_floats(B, T, C, H)));
	kernel_attention_forward(out, att, qkv, scr, B, T, C, H);
	cudaStream_t s;
	gpu_must(cudaStreamCreate(&s), "stream");
	cuda_gemm_t *gm = cuda_gemm_create(s, err, sizeof err);
	if (!gm) {
		printf("FAIL cuda_gemm_create: %s\n", err);
		n_failed++;
		return;
	}
	void *d_scr = gpu_dup(NULL, cuda_attention_scratch_bytes(B, T, C, H, false));
	cuda_attention_scratch_t as;
	cuda_attention_scratch_carve(&as, d_scr, B, T, C, H, false);
	float *d_qkv = gpu_dup(qkv, F(nqkv)), *d_out = gpu_dup(NULL, F(nc));
	uint16_t *d_att16 = gpu_dup(NULL, natt * 2);
	uint16_t *d_out16 = gpu_dup(NULL, nc * 2);
	cuda_attention_forward(gm, d_out, d_out16, d_att16, d_qkv, &as, B, T, C, H, s);
	float *g = download(d_out, nc);
	uint16_t *g16 = download16(d_out16, nc), *ga16 = download16(d_att16, natt);
	expect("attention forward out (bf16 GEMMs) fp32", rel_err(g, out, nc), ATT_FWD_BOUND);
	expect("attention forward out, bf16 copy", rel_err_bf16(g16, out, nc), ATT_FWD_BOUND);
	expect("attention forward probabilities (bf16)", rel_err_bf16(ga16, att, natt), ATT_FWD_BOUND);

	float *dout = rand_floats(nc, 1), *dqkv = malloc(F(nqkv));
	kernel_attention_backward(dqkv, dout, qkv, att, scr, B, T, C, H);
	float *d_dout = gpu_dup(dout, F(nc)), *d_dqkv = gpu_dup(NULL, F(nqkv));
	uint16_t *d_dqkv16 = gpu_dup(NULL, nqkv * 2);
	/* from the CPU's probabilities (in bf16, as the model keeps them), so
	 * that mostly backward's own rounding counts */
	uint16_t *att16 = malloc(natt * 2);
	kernel_to_bf16(att16, att, natt);
	gpu_must(cudaMemcpy(d_att16, att16, natt * 2, cudaMemcpyHostToDevice), "upload");
	cuda_attention_backward(gm, d_dqkv, d_dqkv16, d_dout, d_qkv, d_att16, &as, B, T, C, H, s);
	float *gd = download(d_dqkv, nqkv);
	uint16_t *gd16 = download16(d_dqkv16, nqkv);
	uint16_t *att16_after = download16(d_att16, natt);
	expect_true("attention backward leaves the probabilities unchanged",
		    memcmp(att16, att16_after, natt * 2) == 0);
	/* q, k and v parts separately: their scales differ */
	const char *part[3] = {"dq", "dk", "dv"};
	for (int p = 0; p < 3; p++) {
		float *a = malloc(F(nc)), *r = malloc(F(nc));
		for (int n = 0; n < N; n++)
			for (int c = 0; c < C; c++) {
				a[(size_t)n * C + c] = gd[(size_t)n * 3 * C + (size_t)p * C + c];
				r[(size_t)n * C + c] = dqkv[(size_t)n * 3 * C + (size_t)p * C + c];
			}
		char name[64];
		snprintf(name, sizeof name, "attention backward %s", part[p]);
		expect(name, rel_err(a, r, nc), ATT_BWD_BOUND);
		free(a), free(r);
	}
	expect("attention backward dqkv, bf16 copy", rel_err_bf16(gd16, dqkv, nqkv), ATT_BWD_BOUND);
	cuda_gemm_free(gm);
	cudaStreamDestroy(s);
	free(qkv), free(out), free(att), free(scr), free(g), free(ga16), free(g16), free(dout), free(dqkv);
	free(gd), free(gd16), free(att16), free(att16_after);
	cudaFree(d_scr), cudaFree(d_qkv), cudaFree(d_out), cudaFree(d_att16), cudaFree(d_out16);
	cudaFree(d_dout), cudaFree(d_dqkv), cudaFree(d_dqkv16);
}

static void test_attention(void)
{
	attention_case(2, 33, 64, 4); /* head size 16: q, k, v split 4 channels at a time */
	attention_case(1, 9, 18, 3);  /* head size 6: one channel at a time */
}

/* ---- fused attention (cuda_flash_*) against the CPU's fp32 attention ---- */

/* q, k, v part p (0, 1, 2) of dqkv (N, 3C) as (N, C) */
static float *qkv_part(const float *dqkv, int N, int C, int p)
{
	float *a = malloc(F((size_t)N * C));
	for (int n = 0; n < N; n++)
		memcpy(a + (size_t)n * C, dqkv + (size_t)n * 3 * C + (size_t)p * C, F((size_t)C));
	return a;
}

/* One shape: T past one 64-row tile where it says, so that the diagonal
 * tile, the tiles below it and the rows past T of the last tile all run. */
static void flash_case(int B, int T, int C, int H)
{
	const int N = B * T, hd = C / H;
	const size_t nqkv = (size_t)N * 3 * C, nc = (size_t)N * C, natt = (size_t)B * H * T * T;
	const size_t nrows = (size_t)B * H * T;
	char what[96];
	float *qkv = rand_floats(nqkv, 1);
	float *out = malloc(F(nc)), *att = malloc(F(natt));
	float *scr = malloc(F(kernel_attention_scratch_floats(B, T, C, H)));
	kernel_attention_forward(out, att, qkv, scr, B, T, C, H);
	/* the log2-sum-exp2 per row, in double from qkv */
	float *lse = malloc(F(nrows));
	const double scale = 1.0 / sqrt((double)hd);
	double *sc = malloc((size_t)T * sizeof(double));
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++)
			for (int i = 0; i < T; i++) {
				const float *qi = qkv + ((size_t)b * T + i) * 3 * C + (size_t)h * hd;
				double mx = -INFINITY, sum = 0.0;
				for (int j = 0; j <= i; j++) {
					const float *kj = qkv + ((size_t)b * T + j) * 3 * C + C + (size_t)h * hd;
					double d = 0.0;
					for (int c = 0; c < hd; c++)
						d += (double)qi[c] * kj[c];
					sc[j] = d * scale;
					mx = sc[j] > mx ? sc[j] : mx;
				}
				for (int j = 0; j <= i; j++)
					sum += exp(sc[j] - mx);
				lse[((size_t)b * H + h) * T + i] = (float)((mx + log(sum)) / log(2.0));
			}
	free(sc);
	cudaStream_t s;
	gpu_must(cudaStreamCreate(&s), "stream");
	void *d_scr = gpu_dup(NULL, cuda_attention_scratch_bytes(B, T, C, H, true));
	cuda_attention_scratch_t as;
	cuda_attention_scratch_carve(&as, d_scr, B, T, C, H, true);
	float *d_qkv = gpu_dup(qkv, F(nqkv)), *d_out = gpu_dup(NULL, F(nc)), *d_lse = gpu_dup(NULL, F(nrows));
	uint16_t *d_out16 = gpu_dup(NULL, nc * 2), *d_qkv16 = gpu_dup(NULL, nqkv * 2);
	cuda_to_bf16(d_qkv16, d_qkv, nqkv, s); /* as the model's QKV GEMM writes them */
	cuda_flash_forward(d_out, d_out16, d_lse, d_qkv16, B, T, C, H, H, s);
	float *g = download(d_out, nc), *glse = download(d_lse, nrows);
	uint16_t *g16 = download16(d_out16, nc);
	snprintf(what, sizeof what, "fused attention T %d hd %d: out fp32", T, hd);
	expect(what, rel_err(g, out, nc), ATT_FWD_BOUND);
	snprintf(what, sizeof what, "fused attention T %d hd %d: out bf16", T, hd);
	expect(what, rel_err_bf16(g16, out, nc), ATT_FWD_BOUND);
	snprintf(what, sizeof what, "fused attention T %d hd %d: log2-sum-exp2", T, hd);
	expect(what, rel_err(glse, lse, nrows), ATT_FWD_BOUND);

	float *dout = rand_floats(nc, 1), *dqkv = malloc(F(nqkv));
	kernel_attention_backward(dqkv, dout, qkv, att, scr, B, T, C, H);
	float *d_dout = gpu_dup(dout, F(nc)), *d_dqkv = gpu_dup(NULL, F(nqkv));
	uint16_t *d_dqkv16 = gpu_dup(NULL, nqkv * 2);
	cuda_flash_backward(d_dqkv, d_dqkv16, NULL, d_dout, NULL, d_qkv16, d_out16, d_lse, &as, B, T, C,
			    H, H, s);
	float *gd = download(d_dqkv, nqkv);
	uint16_t *gd16 = download16(d_dqkv16, nqkv);
	const char *part[3] = {"dq", "dk", "dv"};
	for (int p = 0; p < 3; p++) {
		float *a = qkv_part(gd, N, C, p), *r = qkv_part(dqkv, N, C, p);
		snprintf(what, sizeof what, "fused attention T %d hd %d: backward %s", T, hd, part[p]);
		expect(what, rel_err(a, r, nc), ATT_BWD_BOUND);
		free(a), free(r);
	}
	snprintf(what, sizeof what, "fused attention T %d hd %d: backward bf16 copy", T, hd);
	expect(what, rel_err_bf16(gd16, dqkv, nqkv), ATT_BWD_BOUND);
	/* no atomics: a second backward gives the same bits */
	gpu_must(cudaMemset(d_dqkv, 0, F(nqkv)), "clear");
	cuda_flash_backward(d_dqkv, NULL, NULL, d_dout, NULL, d_qkv16, d_out16, d_lse, &as, B, T, C, H, H, s);
	float *gd2 = download(d_dqkv, nqkv);
	snprintf(what, sizeof what, "fused attention T %d hd %d: backward twice, same bits", T, hd);
	expect_true(what, memcmp(gd, gd2, F(nqkv)) == 0);
	/* dout one float off 16-byte alignment: dy's split and D by the two
	 * separate kernels, not the fused one; D's sums in another order */
	float *d_dout1 = gpu_dup(NULL, F(nc + 1));
	gpu_must(cudaMemcpy(d_dout1 + 1, dout, F(nc), cudaMemcpyHostToDevice), "upload");
	cuda_flash_backward(d_dqkv, NULL, NULL, d_dout1 + 1, NULL, d_qkv16, d_out16, d_lse, &as, B, T, C,
			    H, H, s);
	float *gd3 = download(d_dqkv, nqkv);
	snprintf(what, sizeof what, "fused attention T %d hd %d: backward, dout unaligned", T, hd);
	expect(what, rel_err(gd3, gd, nqkv), FP32_SUM_BOUND);
	free(gd3);
	cudaFree(d_dout1);
	/* dout in bf16, as the model hands it: the kernels round dout to bf16
	 * before using it, so the same bits; one element off 8-byte alignment,
	 * the separate kernels again */
	uint16_t *dout16 = malloc(nc * 2), *d_dout16 = gpu_dup(NULL, (nc + 1) * 2);
	kernel_to_bf16(dout16, dout, nc);
	gpu_must(cudaMemcpy(d_dout16, dout16, nc * 2, cudaMemcpyHostToDevice), "upload");
	cuda_flash_backward(d_dqkv, NULL, NULL, NULL, d_dout16, d_qkv16, d_out16, d_lse, &as, B, T, C, H, H, s);
	gd3 = download(d_dqkv, nqkv);
	snprintf(what, sizeof what, "fused attention T %d hd %d: backward from bf16 dout, same bits", T, hd);
	expect_true(what, memcmp(gd3, gd, F(nqkv)) == 0);
	free(gd3);
	gpu_must(cudaMemcpy(d_dout16 + 1, dout16, nc * 2, cudaMemcpyHostToDevice), "upload");
	cuda_flash_backward(d_dqkv, NULL, NULL, NULL, d_dout16 + 1, d_qkv16, d_out16, d_lse, &as, B, T, C, H,
			    H, s);
	gd3 = download(d_dqkv, nqkv);
	snprintf(what, sizeof what, "fused attention T %d hd %d: backward, bf16 dout unaligned", T, hd);
	expect(what, rel_err(gd3, gd, nqkv), FP32_SUM_BOUND);
	free(gd3), free(dout16);
	cudaFree(d_dout16);
	/* the qkv bias gradient summed inside, with no fp32 dqkv written: added
	 * to random values, against the column sums of the fp32 dqkv above (the
	 * same values in another order) and of the CPU's */
	float *db0 = rand_floats((size_t)3 * C, 1), *want = malloc(F((size_t)3 * C)),
	      *want_cpu = malloc(F((size_t)3 * C));
	for (int c = 0; c < 3 * C; c++) {
		double sum_gpu = 0.0, sum_cpu = 0.0;
		for (int n = 0; n < N; n++) {
			sum_gpu += gd[(size_t)n * 3 * C + c];
			sum_cpu += dqkv[(size_t)n * 3 * C + c];
		}
		want[c] = (float)(db0[c] + sum_gpu);
		want_cpu[c] = (float)(db0[c] + sum_cpu);
	}
	float *d_db = gpu_dup(db0, F((size_t)3 * C));
	gpu_must(cudaMemset(d_dqkv16, 0xff, nqkv * 2), "fill");
	cuda_flash_backward(NULL, d_dqkv16, d_db, d_dout, NULL, d_qkv16, d_out16, d_lse, &as, B, T, C, H,
			    H, s);
	float *gdb = download(d_db, (size_t)3 * C);
	uint16_t *gd16b = download16(d_dqkv16, nqkv);
	snprintf(what, sizeof what, "fused attention T %d hd %d: qkv bias gradient (fp32 sums)", T, hd);
	expect(what, rel_err(gdb, want, (size_t)3 * C), FP32_SUM_BOUND);
	snprintf(what, sizeof what, "fused attention T %d hd %d: qkv bias gradient against the CPU", T,
		 hd);
	expect(what, rel_err(gdb, want_cpu, (size_t)3 * C), ATT_BWD_BOUND);
	snprintf(what, sizeof what, "fused attention T %d hd %d: bf16 dqkv alone, the same bits", T, hd);
	expect_true(what, memcmp(gd16b, gd16, nqkv * 2) == 0);
	free(db0), free(want), free(want_cpu), free(gdb), free(gd16b);
	cudaFree(d_db);
	cudaStreamDestroy(s);
	free(qkv), free(out), free(att), free(scr), free(lse), free(g), free(glse), free(g16);
	free(dout), free(dqkv), free(gd), free(gd16), free(gd2);
	cudaFree(d_scr), cudaFree(d_qkv), cudaFree(d_out), cudaFree(d_lse), cudaFree(d_out16);
	cudaFree(d_qkv16), cudaFree(d_dout), cudaFree(d_dqkv), cudaFree(d_dqkv16);
}

static uint16_t bf16_of_int(int v)
{
	float f = (float)v;
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return (uint16_t)(u >> 16); /* small integers are exact in bf16 */
}

/* cuda_flash_mma_probe on small integers: every product and sum exact */
static void test_mma_probe(void)
{
	int a[16][16], bt[24][16];
	uint16_t a16[256], bt16[384];
	for (int i = 0; i < 16; i++)
		for (int k = 0; k < 16; k++)
			a16[i * 16 + k] = bf16_of_int(a[i][k] = (int)(rng_u32() % 5) - 2);
	for (int n = 0; n < 24; n++)
		for (int k = 0; k < 16; k++)
			bt16[n * 16 + k] = bf16_of_int(bt[n][k] = (int)(rng_u32() % 5) - 2);
	int x[16][16], want1[16][8], want2[16][8];
	for (int i = 0; i < 16; i++)
		for (int n = 0; n < 16; n++) {
			x[i][n] = 0;
			for (int k = 0; k < 16; k++)
				x[i][n] += a[i][k] * bt[n][k];
		}
	for (int i = 0; i < 16; i++)
		for (int n = 0; n < 8; n++) {
			want1[i][n] = x[i][n];
			want2[i][n] = 0;
			for (int k = 0; k < 16; k++)
				want2[i][n] += x[i][k] * bt[16 + n][k];
		}
	uint16_t *d_a = gpu_dup(a16, sizeof a16), *d_bt = gpu_dup(bt16, sizeof bt16);
	float *d_1 = gpu_dup(NULL, 128 * sizeof(float)), *d_2 = gpu_dup(NULL, 128 * sizeof(float));
	float *d_3 = gpu_dup(NULL, 256 * sizeof(float));
	cuda_flash_mma_probe(d_1, d_2, d_3, d_a, d_bt, 0);
	float *g1 = download(d_1, 128), *g2 = download(d_2, 128), *g3 = download(d_3, 256);
	int bad1 = 0, bad2 = 0, bad3 = 0, first1 = -1, first2 = -1, first3 = -1;
	for (int e = 0; e < 128; e++) {
		if (g1[e] != (float)want1[e / 8][e % 8] && bad1++ == 0)
			first1 = e;
		if (g2[e] != (float)want2[e / 8][e % 8] && bad2++ == 0)
			first2 = e;
	}
	for (int e = 0; e < 256; e++)
		if (g3[e] != (float)x[e / 16][e % 16] && bad3++ == 0)
			first3 = e;
	if (bad1)
		printf("     mma probe: d1[%d][%d] = %g, want %d\n", first1 / 8, first1 % 8, g1[first1],
		       want1[first1 / 8][first1 % 8]);
	if (bad2)
		printf("     mma probe: d2[%d][%d] = %g, want %d\n", first2 / 8, first2 % 8, g2[first2],
		       want2[first2 / 8][first2 % 8]);
	if (bad3)
		printf("     mma probe: d3[%d][%d] = %g, want %d\n", first3 / 16, first3 % 16, g3[first3],
		       x[first3 / 16][first3 % 16]);
	expect_true("fused attention: mma.sync m16n8k16 through the kernels' A and B (ldmatrix) fragment loads, exact",
		    bad1 == 0);
	expect_true("fused attention: an accumulator pair as the next product's A fragment, exact",
		    bad2 == 0);
	expect_true("fused attention: B fragments by ldmatrix.trans from a row-major tile, exact",
		    bad3 == 0);
	free(g1), free(g2), free(g3);
	cudaFree(d_a), cudaFree(d_bt), cudaFree(d_1), cudaFree(d_2), cudaFree(d_3);
}

static void test_flash_attention(void)
{
	test_mma_probe();
	expect_true("fused attention: head sizes 16, 32, 64 built, 48 and 128 not",
		    cuda_flash_supported(64, 4) && cuda_flash_supported(64, 2) &&
			    cuda_flash_supported(768, 12) && !cuda_flash_supported(48, 1) &&
			    !cuda_flash_supported(256, 2) && !cuda_flash_supported(64, 3));
	flash_case(2, 33, 64, 4);  /* hd 16, one tile */
	flash_case(1, 150, 64, 2); /* hd 32, three tiles, 22 rows past T in the last */
	flash_case(2, 128, 128, 2); /* hd 64, two whole tiles */
}

int main(void)
{
	gpu_probe_or_skip("gpu-kernels");
	test_embedding();
	test_layernorm(37, 96);
	test_layernorm(300, 768);
	test_layernorm(13, 50); /* C not a multiple of 4: one float at a time */
	test_bias_backward();
	test_gelu();
	test_softmax();
	test_crossentropy();
	test_conversions_and_sums();
	test_adamw();
	test_gemm();
	test_attention();
	test_flash_attention();
	printf("%s: %d failed\n", "gpu-kernels", n_failed);
	return n_failed ? 1 : 0;
}
