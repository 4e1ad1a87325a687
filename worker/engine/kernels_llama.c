/*
 * kernels_llama: Llama's RMSNorm, RoPE and SwiGLU in C with OpenMP (see
 * kernels_llama.h), vectorizable without -ffast-math as kernels.c's.
 */
#include "kernels_llama.h"

#include <math.h>

#include "kernels_simd.h"

KERNEL_CLONES void kernel_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w,
                                          int N, int C, float eps)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const float *xr = x + (size_t)n * C;
		float *o = out + (size_t)n * C;
		float rs = 1.0f / sqrtf(s_dot(xr, xr, C) / (float)C + eps);
		for (int c = 0; c < C; c++)
			o[c] = xr[c] * rs * w[c];
		rstd[n] = rs;
	}
}

KERNEL_CLONES void kernel_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x,
                                           const float *rstd, const float *w, int N, int C)
{
	/* y = xhat * w, xhat = x * rs: dx = rs * (dy w - xhat * mean(dy w xhat)) */
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const float *xr = x + (size_t)n * C, *dr = dout + (size_t)n * C;
		float *dxr = dx + (size_t)n * C;
		float rs = rstd[n];
		float acc[LANES] = {0};
		int i = 0;
		for (; i + LANES <= C; i += LANES)
			for (int k = 0; k < LANES; k++)
				acc[k] += dr[i + k] * w[i + k] * (xr[i + k] * rs);
		for (int k = 0; i < C; i++, k++)
			acc[k] += dr[i] * w[i] * (xr[i] * rs);
		float mean_gx = s_lanes_total(acc) / (float)C;
		for (int c = 0; c < C; c++)
			dxr[c] += rs * (dr[c] * w[c] - (xr[c] * rs) * mean_gx);
	}
	int n_blocks = (C + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static)
	for (int blk = 0; blk < n_blocks; blk++) {
		int c0 = blk * COL_BLOCK, c1 = c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C;
		float aw[COL_BLOCK] = {0};
		for (int n = 0; n < N; n++) {
			const float *xr = x + (size_t)n * C, *dr = dout + (size_t)n * C;
			float rs = rstd[n];
			for (int c = c0; c < c1; c++)
				aw[c - c0] += dr[c] * (xr[c] * rs);
		}
		for (int c = c0; c < c1; c++)
			dw[c] += aw[c - c0];
	}
}

/* Rotate the heads of row n by +angle (sign 1) or -angle (sign -1);
 * inlined into each target clone of its callers (the OpenMP loop is in
 * the callers, so that its outlined body is cloned too). */
static inline __attribute__((always_inline)) void s_rope_row(float *x, size_t ld, int n_heads, int hd,
                                                             const float *cos, const float *sin,
                                                             int n, int T, float sign)
{
	int half = hd / 2;
	const float *cr = cos + (size_t)(n % T) * half, *sr = sin + (size_t)(n % T) * half;
	for (int h = 0; h < n_heads; h++) {
		float *a = x + (size_t)n * ld + (size_t)h * hd, *b = a + half;
		for (int j = 0; j < half; j++) {
			float c = cr[j], s = sign * sr[j];
			float x0 = a[j], x1 = b[j];
			a[j] = x0 * c - x1 * s;
			b[j] = x1 * c + x0 * s;
		}
	}
}

KERNEL_CLONES void kernel_rope_forward(float *x, size_t ld, int n_heads, int hd, const float *cos,
                                       const float *sin, int B, int T)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < B * T; n++)
		s_rope_row(x, ld, n_heads, hd, cos, sin, n, T, 1.0f);
}

KERNEL_CLONES void kernel_rope_backward(float *dx, size_t ld, int n_heads, int hd, const float *cos,
                                        const float *sin, int B, int T)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < B * T; n++)
		s_rope_row(dx, ld, n_heads, hd, cos, sin, n, T, -1.0f);
}

/* 1 / (1 + exp(-g)), vectorizable */
static inline float s_sigmoid(float g)
{
	return 1.0f / (1.0f + s_expf(-g));
}

KERNEL_CLONES void kernel_swiglu_forward(float *out, const float *gu, int N, int F)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const float *g = gu + (size_t)n * 2 * F, *u = g + F;
		float *o = out + (size_t)n * F;
		for (int i = 0; i < F; i++)
			o[i] = g[i] * s_sigmoid(g[i]) * u[i];
	}
}

KERNEL_CLONES void kernel_swiglu_backward(float *dgu, const float *dout, const float *gu, int N, int F)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const float *g = gu + (size_t)n * 2 * F, *u = g + F, *d = dout + (size_t)n * F;
		float *dg = dgu + (size_t)n * 2 * F, *du = dg + F;
		for (int i = 0; i < F; i++) {
			float sg = s_sigmoid(g[i]), silu = g[i] * sg;
			dg[i] = d[i] * u[i] * (sg + silu * (1.0f - sg));
			du[i] = d[i] * silu;
		}
	}
}
