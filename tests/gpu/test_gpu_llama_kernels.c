/*
 * test_gpu_llama_kernels: Llama's GPU kernels (cuda_llama_kernels.h:
 * RMSNorm, rotary embeddings, SwiGLU; and grouped-query attention, the
 * fused attention with fewer KV heads than query heads) against plain C
 * references in double, on random inputs of odd sizes. Runs on a GPU
 * (gpu-llama-kernels) and on the CPU through the emulator
 * (cudaemu-llama-kernels).
 *
 * Bounds on rel_err = max|gpu - ref| / max|ref| (gpu_util.h):
 *   FP32 (1e-5): the same fp32 arithmetic as the double reference, in
 *     another order (a warp's butterfly, rsqrtf, FMA contraction): a few
 *     ulp per element.
 *   FP32_SUM (5e-5): RMSNorm's weight gradient, fp32 sums over 256-row
 *     chunks (error grows with the rows summed: ~sqrt(n) to n ulp).
 *   BF16 (4e-3 = 2^-8): an fp32 result rounded once to bf16 (2^-8) plus
 *     the above; SwiGLU's inputs are bf16 in both, so one rounding.
 *   ATTENTION (2e-2 forward, 3e-2 backward): as test_gpu_kernels.c: the
 *     probabilities, dy and the score gradient enter tensor-core products
 *     as bf16 while the reference is double on the same bf16 q, k, v.
 * Exact checks: GQA forward equals the fused attention run with the KV
 * heads copied out to H heads (the same operations on the same values),
 * RoPE backward after forward gives the input back within FP32, and two
 * runs of the backward kernels give the same bits (no atomics).
 * Skips (exit 77) where there is no GPU.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_attention.h"
#include "cuda_kernels.h"
#include "cuda_llama_kernels.h"
#include "gpu_util.h"

#define FP32_BOUND 1e-5
#define FP32_SUM_BOUND 5e-5
#define BF16_BOUND 4e-3
#define ATT_FWD_BOUND 2e-2
#define ATT_BWD_BOUND 3e-2

static int n_failed;

static void expect(const char *what, double err, double bound)
{
	int ok = err <= bound;
	printf("%s %-52s rel err %.3g (bound %.3g)\n", ok ? "ok  " : "FAIL", what, err, bound);
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

static float *download16f(const uint16_t *d, size_t n)
{
	uint16_t *h = malloc(n * 2);
	gpu_get(h, d, n * 2);
	float *f = malloc(F(n));
	for (size_t i = 0; i < n; i++)
		f[i] = bf16_to_float(h[i]);
	free(h);
	return f;
}

/* round to nearest even, as the GPU's __float2bfloat16_rn (finite values) */
static uint16_t f2bf(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

/* x rounded to bf16 in place, and the bits (malloc'ed) */
static uint16_t *round_bf16(float *x, size_t n)
{
	uint16_t *h = malloc(n * 2);
	for (size_t i = 0; i < n; i++) {
		h[i] = f2bf(x[i]);
		x[i] = bf16_to_float(h[i]);
	}
	return h;
}

/* ---- RMSNorm ---- */

static void rmsnorm_case(int N, int C, bool b16)
{
	const float eps = 1e-5f;
	char what[96];
	float *x = rand_floats((size_t)N * C, 1.5f), *w = rand_floats(C, 1.0f);
	float *dout = rand_floats((size_t)N * C, 1.0f), *dx0 = rand_floats((size_t)N * C, 0.5f),
	      *dw0 = rand_floats(C, 0.5f);
	uint16_t *dout16 = b16 ? round_bf16(dout, (size_t)N * C) : NULL;
	double *ry = malloc(sizeof(double) * N * C), *rr = malloc(sizeof(double) * N);
	float *ref_y = malloc(F((size_t)N * C)), *ref_r = malloc(F(N)), *ref_dx = malloc(F((size_t)N * C)),
	      *ref_dw = malloc(F(C));
	double *dw = calloc(C, sizeof(double));
	for (int n = 0; n < N; n++) {
		const float *xr = x + (size_t)n * C, *dr = dout + (size_t)n * C;
		double ss = 0;
		for (int c = 0; c < C; c++)
			ss += (double)xr[c] * xr[c];
		double r = 1.0 / sqrt(ss / C + eps), dot = 0;
		rr[n] = r;
		ref_r[n] = (float)r;
		for (int c = 0; c < C; c++) {
			ry[(size_t)n * C + c] = xr[c] * r * w[c];
			ref_y[(size_t)n * C + c] = (float)ry[(size_t)n * C + c];
			dot += (double)dr[c] * w[c] * xr[c];
			dw[c] += (double)dr[c] * xr[c] * r;
		}
		for (int c = 0; c < C; c++)
			ref_dx[(size_t)n * C + c] =
				(float)(dx0[(size_t)n * C + c] + r * dr[c] * w[c] - xr[c] * dot * r * r * r / C);
	}
	for (int c = 0; c < C; c++)
		ref_dw[c] = (float)(dw0[c] + dw[c]);
	float *d_x = gpu_dup(x, F((size_t)N * C)), *d_w = gpu_dup(w, F(C)), *d_y = gpu_dup(NULL, F((size_t)N * C)),
	      *d_r = gpu_dup(NULL, F(N)), *d_dout = gpu_dup(dout, F((size_t)N * C)),
	      *d_dx = gpu_dup(dx0, F((size_t)N * C)), *d_dw = gpu_dup(dw0, F(C)),
	      *d_scr = gpu_dup(NULL, F(cuda_colsum_scratch_floats(N, C)));
	uint16_t *d_y16 = gpu_dup(NULL, (size_t)N * C * 2), *d_dx16 = gpu_dup(NULL, (size_t)N * C * 2);
	uint16_t *d_dout16 = b16 ? gpu_dup(dout16, (size_t)N * C * 2) : NULL;
	cuda_rmsnorm_forward(d_y, d_y16, d_r, d_x, d_w, N, C, eps, 0);
	float *y = download(d_y, (size_t)N * C), *y16 = download16f(d_y16, (size_t)N * C), *r = download(d_r, N);
	snprintf(what, sizeof what, "rmsnorm %dx%d forward", N, C);
	expect(what, rel_err(y, ref_y, (size_t)N * C), FP32_BOUND);
	snprintf(what, sizeof what, "rmsnorm %dx%d forward bf16", N, C);
	expect(what, rel_err(y16, ref_y, (size_t)N * C), BF16_BOUND);
	snprintf(what, sizeof what, "rmsnorm %dx%d rstd", N, C);
	expect(what, rel_err(r, ref_r, N), FP32_BOUND);
	cuda_rmsnorm_backward(d_dx, d_dx16, d_dw, b16 ? NULL : d_dout, d_dout16, d_x, d_r, d_w, N, C, d_scr, 0);
	float *gdx = download(d_dx, (size_t)N * C), *gdx16 = download16f(d_dx16, (size_t)N * C),
	      *gdw = download(d_dw, C);
	snprintf(what, sizeof what, "rmsnorm %dx%d backward dx (dout %s)", N, C, b16 ? "bf16" : "fp32");
	expect(what, rel_err(gdx, ref_dx, (size_t)N * C), FP32_BOUND);
	snprintf(what, sizeof what, "rmsnorm %dx%d backward dx bf16 copy", N, C);
	expect(what, rel_err(gdx16, ref_dx, (size_t)N * C), BF16_BOUND);
	snprintf(what, sizeof what, "rmsnorm %dx%d backward dw", N, C);
	expect(what, rel_err(gdw, ref_dw, C), FP32_SUM_BOUND);
	/* the same again from the same start: the same bits */
	gpu_must(cudaMemcpy(d_dx, dx0, F((size_t)N * C), cudaMemcpyHostToDevice), "upload");
	gpu_must(cudaMemcpy(d_dw, dw0, F(C), cudaMemcpyHostToDevice), "upload");
	cuda_rmsnorm_backward(d_dx, NULL, d_dw, b16 ? NULL : d_dout, d_dout16, d_x, d_r, d_w, N, C, d_scr, 0);
	float *gdx2 = download(d_dx, (size_t)N * C), *gdw2 = download(d_dw, C);
	snprintf(what, sizeof what, "rmsnorm %dx%d backward twice, same bits", N, C);
	expect_true(what, !memcmp(gdx, gdx2, F((size_t)N * C)) && !memcmp(gdw, gdw2, F(C)));
	free(x), free(w), free(dout), free(dx0), free(dw0), free(dout16), free(ry), free(rr), free(ref_y);
	free(ref_r), free(ref_dx), free(ref_dw), free(dw), free(y), free(y16), free(r), free(gdx), free(gdx16);
	free(gdw), free(gdx2), free(gdw2);
	cudaFree(d_x), cudaFree(d_w), cudaFree(d_y), cudaFree(d_r), cudaFree(d_dout), cudaFree(d_dx);
	cudaFree(d_dw), cudaFree(d_scr), cudaFree(d_y16), cudaFree(d_dx16), cudaFree(d_dout16);
}

/* ---- RoPE ---- */

/* cos, sin (T, hd/2) of theta with Llama 3.1's scaling, in double as the
 * contract states (CONTRACT23), stored as float */
static void rope_tables(int T, int hd, double theta, double factor, double lo_f, double hi_f, double orig,
                        float *cs, float *sn)
{
	for (int j = 0; j < hd / 2; j++) {
		double inv = pow(theta, -2.0 * j / hd);
		if (factor > 0) {
			double wl = 2 * M_PI / inv, low_wl = orig / lo_f, high_wl = orig / hi_f;
			if (wl > low_wl)
				inv = inv / factor;
			else if (wl >= high_wl) {
				double sm = (orig / wl - lo_f) / (hi_f - lo_f);
				inv = (1 - sm) * inv / factor + sm * inv;
			}
		}
		for (int t = 0; t < T; t++) {
			cs[(size_t)t * (hd / 2) + j] = (float)cos(t * inv);
			sn[(size_t)t * (hd / 2) + j] = (float)sin(t * inv);
		}
	}
}

static void rope_case(int B, int T, int H, int KV, int hd)
{
	const int N = B * T, W = (H + 2 * KV) * hd, half = hd / 2;
	const size_t n = (size_t)N * W;
	char what[96];
	float *cs = malloc(F((size_t)T * half)), *sn = malloc(F((size_t)T * half));
	rope_tables(T, hd, 500000.0, 8.0, 1.0, 4.0, 64.0, cs, sn);
	float *x = rand_floats(n, 1.0f), *ref = malloc(F(n)), *refb = malloc(F(n));
	for (int r = 0; r < N; r++) {
		const int t = r % T;
		const float *xr = x + (size_t)r * W;
		float *o = ref + (size_t)r * W, *ob = refb + (size_t)r * W;
		memcpy(o, xr, F(W));
		memcpy(ob, xr, F(W));
		for (int h = 0; h < H + KV; h++)
			for (int j = 0; j < half; j++) {
				double c = cs[(size_t)t * half + j], s = sn[(size_t)t * half + j];
				double x0 = xr[h * hd + j], x1 = xr[h * hd + j + half];
				o[h * hd + j] = (float)(x0 * c - x1 * s);
				o[h * hd + j + half] = (float)(x1 * c + x0 * s);
				ob[h * hd + j] = (float)(x0 * c + x1 * s);
				ob[h * hd + j + half] = (float)(x1 * c - x0 * s);
			}
	}
	float *d_cs = gpu_dup(cs, F((size_t)T * half)), *d_sn = gpu_dup(sn, F((size_t)T * half));
	float *d_x = gpu_dup(x, F(n)), *d_y = gpu_dup(NULL, F(n)), *d_z = gpu_dup(NULL, F(n));
	uint16_t *d_y16 = gpu_dup(NULL, n * 2);
	cuda_rope_forward(d_y, d_y16, d_x, d_cs, d_sn, N, T, H, KV, hd, 0);
	float *y = download(d_y, n), *y16 = download16f(d_y16, n);
	snprintf(what, sizeof what, "rope B%d T%d H%d KV%d hd%d forward", B, T, H, KV, hd);
	expect(what, rel_err(y, ref, n), FP32_BOUND);
	snprintf(what, sizeof what, "rope B%d T%d H%d KV%d hd%d forward bf16", B, T, H, KV, hd);
	expect(what, rel_err(y16, ref, n), BF16_BOUND);
	cuda_rope_backward(d_z, NULL, d_x, d_cs, d_sn, N, T, H, KV, hd, 0);
	float *z = download(d_z, n);
	snprintf(what, sizeof what, "rope B%d T%d H%d KV%d hd%d backward", B, T, H, KV, hd);
	expect(what, rel_err(z, refb, n), FP32_BOUND);
	cuda_rope_backward(d_z, NULL, d_y, d_cs, d_sn, N, T, H, KV, hd, 0);
	free(z);
	z = download(d_z, n);
	snprintf(what, sizeof what, "rope B%d T%d: backward of forward is the input", B, T);
	expect(what, rel_err(z, x, n), FP32_BOUND);
	free(cs), free(sn), free(x), free(ref), free(refb), free(y), free(y16), free(z);
	cudaFree(d_cs), cudaFree(d_sn), cudaFree(d_x), cudaFree(d_y), cudaFree(d_z), cudaFree(d_y16);
}

/* ---- SwiGLU ---- */

static void swiglu_case(int N, int Fd)
{
	const size_t n = (size_t)N * Fd;
	char what[96];
	float *gu = rand_floats(2 * n, 2.0f), *dh = rand_floats(n, 1.0f);
	uint16_t *gu16 = round_bf16(gu, 2 * n), *dh16 = round_bf16(dh, n);
	float *ref_h = malloc(F(n)), *ref_d = malloc(F(2 * n));
	for (int r = 0; r < N; r++)
		for (int f = 0; f < Fd; f++) {
			double g = gu[(size_t)r * 2 * Fd + f], u = gu[(size_t)r * 2 * Fd + Fd + f];
			double sg = 1.0 / (1.0 + exp(-g)), d = dh[(size_t)r * Fd + f];
			ref_h[(size_t)r * Fd + f] = (float)(g * sg * u);
			ref_d[(size_t)r * 2 * Fd + f] = (float)(d * u * sg * (1 + g * (1 - sg)));
			ref_d[(size_t)r * 2 * Fd + Fd + f] = (float)(d * g * sg);
		}
	uint16_t *d_gu = gpu_dup(gu16, 2 * n * 2), *d_dh = gpu_dup(dh16, n * 2), *d_h = gpu_dup(NULL, n * 2),
		 *d_dgu = gpu_dup(NULL, 2 * n * 2);
	cuda_swiglu_forward(d_h, d_gu, N, Fd, 0);
	cuda_swiglu_backward(d_dgu, d_dh, d_gu, N, Fd, 0);
	float *h = download16f(d_h, n), *dgu = download16f(d_dgu, 2 * n);
	snprintf(what, sizeof what, "swiglu %dx%d forward", N, Fd);
	expect(what, rel_err(h, ref_h, n), BF16_BOUND);
	snprintf(what, sizeof what, "swiglu %dx%d backward", N, Fd);
	expect(what, rel_err(dgu, ref_d, 2 * n), BF16_BOUND);
	free(gu), free(dh), free(gu16), free(dh16), free(ref_h), free(ref_d), free(h), free(dgu);
	cudaFree(d_gu), cudaFree(d_dh), cudaFree(d_h), cudaFree(d_dgu);
}

/* ---- grouped-query attention ---- */

/* forward and backward in double: qkv (B, T, W) (bf16 values), dout (B, T,
 * C); out (B, T, C), dqkv (B, T, W) */
static void ref_gqa(float *out, float *dqkv, const float *qkv, const float *dout, int B, int T, int H,
                    int KV, int hd)
{
	const int C = H * hd, W = C + 2 * KV * hd, grp = H / KV;
	const double scale = 1.0 / sqrt(hd);
	double *p = malloc(sizeof(double) * T), *dp = malloc(sizeof(double) * T);
	double *dq = calloc((size_t)B * T * W, sizeof(double));
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++) {
			const int kv = h / grp;
			for (int i = 0; i < T; i++) {
				const float *qi = qkv + ((size_t)b * T + i) * W + h * hd;
				const float *di = dout + ((size_t)b * T + i) * C + h * hd;
				double mx = -INFINITY, sum = 0, pd = 0;
				for (int j = 0; j <= i; j++) {
					const float *kj = qkv + ((size_t)b * T + j) * W + C + kv * hd;
					double s = 0;
					for (int d = 0; d < hd; d++)
						s += (double)qi[d] * kj[d];
					p[j] = s * scale;
					mx = p[j] > mx ? p[j] : mx;
				}
				for (int j = 0; j <= i; j++)
					sum += (p[j] = exp(p[j] - mx));
				for (int d = 0; d < hd; d++) {
					double o = 0;
					for (int j = 0; j <= i; j++)
						o += p[j] / sum * qkv[((size_t)b * T + j) * W + C + (KV + kv) * hd + d];
					out[((size_t)b * T + i) * C + h * hd + d] = (float)o;
				}
				for (int j = 0; j <= i; j++) {
					p[j] /= sum;
					const float *vj = qkv + ((size_t)b * T + j) * W + C + (KV + kv) * hd;
					double s = 0;
					for (int d = 0; d < hd; d++)
						s += (double)di[d] * vj[d];
					dp[j] = s;
					pd += p[j] * s;
				}
				for (int j = 0; j <= i; j++) {
					const double ds = p[j] * (dp[j] - pd) * scale;
					const float *kj = qkv + ((size_t)b * T + j) * W + C + kv * hd;
					for (int d = 0; d < hd; d++) {
						dq[((size_t)b * T + i) * W + h * hd + d] += ds * kj[d];
						dq[((size_t)b * T + j) * W + C + kv * hd + d] += ds * qi[d];
						dq[((size_t)b * T + j) * W + C + (KV + kv) * hd + d] += p[j] * di[d];
					}
				}
			}
		}
	for (size_t i = 0; i < (size_t)B * T * W; i++)
		dqkv[i] = (float)dq[i];
	free(p), free(dp), free(dq);
}

/* the columns [c0, c0 + w) of rows of width W */
static float *cols(const float *x, int rows, int W, int c0, int w)
{
	float *o = malloc(F((size_t)rows * w));
	for (int r = 0; r < rows; r++)
		memcpy(o + (size_t)r * w, x + (size_t)r * W + c0, F(w));
	return o;
}

static void gqa_case(int B, int T, int H, int KV, int hd)
{
	const int C = H * hd, W = C + 2 * KV * hd, N = B * T, grp = H / KV;
	const size_t nq = (size_t)N * W, nc = (size_t)N * C;
	char what[112];
	float *qkv = rand_floats(nq, 1.0f), *dout = rand_floats(nc, 1.0f);
	uint16_t *qkv16 = round_bf16(qkv, nq);
	float *ref_out = malloc(F(nc)), *ref_d = malloc(F(nq));
	ref_gqa(ref_out, ref_d, qkv, dout, B, T, H, KV, hd);
	cuda_attention_scratch_t as;
	void *d_scr = gpu_dup(NULL, cuda_attention_scratch_bytes(B, T, C, H, true));
	cuda_attention_scratch_carve(&as, d_scr, B, T, C, H, true);
	uint16_t *d_qkv16 = gpu_dup(qkv16, nq * 2), *d_out16 = gpu_dup(NULL, nc * 2);
	float *d_out = gpu_dup(NULL, F(nc)), *d_lse = gpu_dup(NULL, F((size_t)B * H * T));
	float *d_dout = gpu_dup(dout, F(nc)), *d_dqkv = gpu_dup(NULL, F(nq));
	cuda_flash_forward(d_out, d_out16, d_lse, d_qkv16, B, T, C, H, KV, 0);
	float *out = download(d_out, nc);
	snprintf(what, sizeof what, "gqa B%d T%d H%d KV%d hd%d forward", B, T, H, KV, hd);
	expect(what, rel_err(out, ref_out, nc), ATT_FWD_BOUND);
	cuda_flash_backward(d_dqkv, NULL, NULL, d_dout, NULL, d_qkv16, d_out16, d_lse, &as, B, T, C, H, KV, 0);
	float *gd = download(d_dqkv, nq);
	const char *part[3] = {"dq", "dk", "dv"};
	const int c0[3] = {0, C, C + KV * hd}, w[3] = {C, KV * hd, KV * hd};
	for (int p = 0; p < 3; p++) {
		float *a = cols(gd, N, W, c0[p], w[p]), *r = cols(ref_d, N, W, c0[p], w[p]);
		snprintf(what, sizeof what, "gqa B%d T%d H%d KV%d hd%d backward %s", B, T, H, KV, hd, part[p]);
		expect(what, rel_err(a, r, (size_t)N * w[p]), ATT_BWD_BOUND);
		free(a), free(r);
	}
	gpu_must(cudaMemset(d_dqkv, 0, F(nq)), "clear");
	cuda_flash_backward(d_dqkv, NULL, NULL, d_dout, NULL, d_qkv16, d_out16, d_lse, &as, B, T, C, H, KV, 0);
	float *gd2 = download(d_dqkv, nq);
	snprintf(what, sizeof what, "gqa H%d KV%d backward twice, same bits", H, KV);
	expect_true(what, memcmp(gd, gd2, F(nq)) == 0);
	/* the same attention with the KV heads copied out to H heads (rows 3C):
	 * forward gives the same bits; each dk, dv of the copies summed over
	 * the group is GQA's in another order */
	const size_t n3 = (size_t)N * 3 * C;
	uint16_t *x16 = malloc(n3 * 2);
	for (int r = 0; r < N; r++)
		for (int h = 0; h < H; h++)
			for (int d = 0; d < hd; d++) {
				const size_t src = (size_t)r * W, dst = (size_t)r * 3 * C;
				x16[dst + h * hd + d] = qkv16[src + h * hd + d];
				x16[dst + C + h * hd + d] = qkv16[src + C + (h / grp) * hd + d];
				x16[dst + 2 * C + h * hd + d] = qkv16[src + C + (KV + h / grp) * hd + d];
			}
	uint16_t *d_x16 = gpu_dup(x16, n3 * 2);
	float *d_out2 = gpu_dup(NULL, F(nc)), *d_dx = gpu_dup(NULL, F(n3));
	cuda_flash_forward(d_out2, d_out16, d_lse, d_x16, B, T, C, H, H, 0);
	float *out2 = download(d_out2, nc);
	snprintf(what, sizeof what, "gqa H%d KV%d forward = copied heads, same bits", H, KV);
	expect_true(what, memcmp(out, out2, F(nc)) == 0);
	cuda_flash_backward(d_dx, NULL, NULL, d_dout, NULL, d_x16, d_out16, d_lse, &as, B, T, C, H, H, 0);
	float *dx = download(d_dx, n3), *sum = calloc(nq, sizeof(float));
	for (int r = 0; r < N; r++)
		for (int h = 0; h < H; h++)
			for (int d = 0; d < hd; d++) {
				const size_t src = (size_t)r * 3 * C, dst = (size_t)r * W;
				sum[dst + h * hd + d] = dx[src + h * hd + d];
				sum[dst + C + (h / grp) * hd + d] += dx[src + C + h * hd + d];
				sum[dst + C + (KV + h / grp) * hd + d] += dx[src + 2 * C + h * hd + d];
			}
	snprintf(what, sizeof what, "gqa H%d KV%d backward = copied heads summed", H, KV);
	expect(what, rel_err(gd, sum, nq), FP32_SUM_BOUND);
	free(qkv), free(dout), free(qkv16), free(ref_out), free(ref_d), free(out), free(gd), free(gd2);
	free(x16), free(out2), free(dx), free(sum);
	cudaFree(d_scr), cudaFree(d_qkv16), cudaFree(d_out16), cudaFree(d_out), cudaFree(d_lse);
	cudaFree(d_dout), cudaFree(d_dqkv), cudaFree(d_x16), cudaFree(d_out2), cudaFree(d_dx);
}

int main(void)
{
	gpu_probe_or_skip("gpu-llama-kernels");
	rmsnorm_case(37, 96, false);
	rmsnorm_case(300, 200, true);
	rope_case(2, 37, 4, 2, 32);
	rope_case(1, 20, 2, 1, 16);
	swiglu_case(37, 136);
	gqa_case(2, 100, 4, 2, 32);
	gqa_case(1, 70, 4, 1, 16);
	gqa_case(1, 65, 2, 2, 64);
	if (n_failed) {
		printf("%d check(s) failed\n", n_failed);
		return 1;
	}
	printf("all checks passed\n");
	return 0;
}
