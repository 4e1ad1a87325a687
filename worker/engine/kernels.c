/*
 * kernels: GPT-2's non-GEMM layers in C with OpenMP (see kernels.h).
 *
 * Loops are written so that GCC vectorizes them without -ffast-math: inner
 * loops are axpy-shaped (no reduction), and reductions keep LANES partial
 * sums (lane k takes elements k, k+LANES, ...) added up in a fixed order at
 * the end, so the compiler needs no reassociation and the result is the
 * same for any vector width and any thread count. Attention is computed per
 * (batch, head) by one thread, with register blocks (4 query rows x 16 keys
 * for the scores, 64 channels for the weighted sums of rows) so that its
 * small matrix products run near the FMA rate instead of the load rate.
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "kernels_simd.h"

/* x[i] = exp(x[i] - shift) for i < n; returns their sum (lane order) */
static inline float s_exp_shift_sum(float *x, int n, float shift)
{
	float acc[LANES] = {0};
	int i = 0;
	for (; i + LANES <= n; i += LANES)
		for (int k = 0; k < LANES; k++) {
			float e = s_expf(x[i + k] - shift);
			x[i + k] = e;
			acc[k] += e;
		}
	for (int k = 0; i < n; i++, k++) {
		float e = s_expf(x[i] - shift);
		x[i] = e;
		acc[k] += e;
	}
	return s_lanes_total(acc);
}

/* sum of exp(x[i] - shift), x unchanged */
static inline float s_exp_sum(const float *x, int n, float shift)
{
	float acc[LANES] = {0};
	int i = 0;
	for (; i + LANES <= n; i += LANES)
		for (int k = 0; k < LANES; k++)
			acc[k] += s_expf(x[i + k] - shift);
	for (int k = 0; i < n; i++, k++)
		acc[k] += s_expf(x[i] - shift);
	return s_lanes_total(acc);
}

KERNEL_CLONES void kernel_embed_positions(float *out, const float *wpe, int B, int T, int C)
{
	int N = B * T;
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++)
		memcpy(out + (size_t)n * C, wpe + (size_t)(n % T) * C, (size_t)C * sizeof(float));
}

KERNEL_CLONES void kernel_embed_tokens(float *out, const int32_t *inputs, const float *w, int v0, int v1,
                         int N, int C)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		if (inputs[n] < v0 || inputs[n] >= v1)
			continue;
		const float *e = w + (size_t)(inputs[n] - v0) * C;
		float *o = out + (size_t)n * C;
		for (int c = 0; c < C; c++)
			o[c] = e[c] + o[c];
	}
}

KERNEL_CLONES void kernel_embed_positions_backward(float *dwpe, const float *dout, int B, int T, int C)
{
#pragma omp parallel for schedule(static)
	for (int t = 0; t < T; t++) {
		float *g = dwpe + (size_t)t * C;
		for (int b = 0; b < B; b++) {
			const float *d = dout + ((size_t)b * T + t) * C;
			for (int c = 0; c < C; c++)
				g[c] += d[c];
		}
	}
}

KERNEL_CLONES void kernel_embed_tokens_backward(float *dw, int v0, int v1, const float *dout,
                                  const int32_t *inputs, int N, int C)
{
	int n_blocks = (C + COL_BLOCK - 1) / COL_BLOCK;
	/* Tokens repeat, so split by columns: each element is summed in row order. */
#pragma omp parallel for schedule(static)
	for (int blk = 0; blk < n_blocks; blk++) {
		int c0 = blk * COL_BLOCK, c1 = c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C;
		for (int n = 0; n < N; n++) {
			if (inputs[n] < v0 || inputs[n] >= v1)
				continue;
			float *g = dw + (size_t)(inputs[n] - v0) * C;
			const float *d = dout + (size_t)n * C;
			for (int c = c0; c < c1; c++)
				g[c] += d[c];
		}
	}
}

KERNEL_CLONES void kernel_layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w,
                              const float *b, int N, int C)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const float *xr = x + (size_t)n * C;
		float *o = out + (size_t)n * C;
		float mu = s_sum(xr, C) / (float)C;
		float acc[LANES] = {0};
		int i = 0;
		for (; i + LANES <= C; i += LANES)
			for (int k = 0; k < LANES; k++) {
				float d = xr[i + k] - mu;
				acc[k] += d * d;
			}
		for (int k = 0; i < C; i++, k++) {
			float d = xr[i] - mu;
			acc[k] += d * d;
		}
		float rs = 1.0f / sqrtf(s_lanes_total(acc) / (float)C + 1e-5f);
		for (int c = 0; c < C; c++)
			o[c] = (xr[c] - mu) * rs * w[c] + b[c];
		mean[n] = mu;
		rstd[n] = rs;
	}
}

KERNEL_CLONES void kernel_layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x,
                               const float *mean, const float *rstd, const float *w, int N, int C)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const float *xr = x + (size_t)n * C, *dr = dout + (size_t)n * C;
		float *dxr = dx + (size_t)n * C;
		float mu = mean[n], rs = rstd[n];
		float acc_g[LANES] = {0}, acc_gx[LANES] = {0};
		int i = 0;
		for (; i + LANES <= C; i += LANES)
			for (int k = 0; k < LANES; k++) {
				float g = dr[i + k] * w[i + k];
				acc_g[k] += g;
				acc_gx[k] += g * (xr[i + k] - mu) * rs;
			}
		for (int k = 0; i < C; i++, k++) {
			float g = dr[i] * w[i];
			acc_g[k] += g;
			acc_gx[k] += g * (xr[i] - mu) * rs;
		}
		float mean_g = s_lanes_total(acc_g) / (float)C;
		float mean_gx = s_lanes_total(acc_gx) / (float)C;
		for (int c = 0; c < C; c++) {
			float xhat = (xr[c] - mu) * rs;
			dxr[c] += rs * (dr[c] * w[c] - mean_g - xhat * mean_gx);
		}
	}
	int n_blocks = (C + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static)
	for (int blk = 0; blk < n_blocks; blk++) {
		int c0 = blk * COL_BLOCK, c1 = c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C;
		float aw[COL_BLOCK] = {0}, ab[COL_BLOCK] = {0};
		for (int n = 0; n < N; n++) {
			const float *xr = x + (size_t)n * C, *dr = dout + (size_t)n * C;
			float mu = mean[n], rs = rstd[n];
			for (int c = c0; c < c1; c++) {
				aw[c - c0] += dr[c] * (xr[c] - mu) * rs;
				ab[c - c0] += dr[c];
			}
		}
		for (int c = c0; c < c1; c++) {
			dw[c] += aw[c - c0];
			db[c] += ab[c - c0];
		}
	}
}

/* Columns of a padded transposed head (kt, vt): T rounded up to 16, so the
 * blocked loops below always read whole 16-column chunks. */
static int s_padded(int T)
{
	return (T + 15) / 16 * 16;
}

size_t kernel_attention_scratch_floats(int B, int T, int C, int H)
{
	return kernel_gqa_attention_scratch_floats(B, T, H, C / H);
}

/*
 * out[r][j] = sum over d < hd of a[r][d] * bt[d * ldb + j], for 4 rows r and
 * j < n (bt rows padded to a multiple of 16 columns). 16 columns of 4 rows
 * accumulate in registers over d, in order.
 */
static inline void s_rows4_times_bt(float *const out[4], const float *const a[4], const float *bt,
                                    int ldb, int hd, int n)
{
	for (int jc = 0; jc < n; jc += 16) {
		float acc[4][16] = {{0}};
		for (int d = 0; d < hd; d++) {
			const float *b = bt + (size_t)d * ldb + jc;
			float a0 = a[0][d], a1 = a[1][d], a2 = a[2][d], a3 = a[3][d];
			for (int k = 0; k < 16; k++) {
				acc[0][k] += a0 * b[k];
				acc[1][k] += a1 * b[k];
				acc[2][k] += a2 * b[k];
				acc[3][k] += a3 * b[k];
			}
		}
		int w = n - jc < 16 ? n - jc : 16;
		for (int r = 0; r < 4; r++)
			for (int k = 0; k < w; k++)
				out[r][jc + k] = acc[r][k];
	}
}

/* out[d] (+)= sum over j in [j0, j1) of w[j * ldw] * rows[j * ld + d], d < hd,
 * summed in j order (64 or 16 channels at a time in registers); with add,
 * that sum is added to out[d] afterwards, else it replaces it. */
static inline void s_weighted_rows(float *out, const float *w, size_t ldw, const float *rows, size_t ld,
                                   int j0, int j1, int hd, int add)
{
	int dc = 0;
	for (; dc + 64 <= hd; dc += 64) { /* 4 independent vector chains */
		float acc[64] = {0};
		for (int j = j0; j < j1; j++) {
			float s = w[(size_t)j * ldw];
			const float *r = rows + (size_t)j * ld + dc;
			for (int k = 0; k < 64; k++)
				acc[k] += s * r[k];
		}
		for (int k = 0; k < 64; k++)
			out[dc + k] = add ? out[dc + k] + acc[k] : acc[k];
	}
	for (; dc + 16 <= hd; dc += 16) {
		float acc[16] = {0};
		for (int j = j0; j < j1; j++) {
			float s = w[(size_t)j * ldw];
			const float *r = rows + (size_t)j * ld + dc;
			for (int k = 0; k < 16; k++)
				acc[k] += s * r[k];
		}
		for (int k = 0; k < 16; k++)
			out[dc + k] = add ? out[dc + k] + acc[k] : acc[k];
	}
	for (; dc < hd; dc++) {
		float acc = 0.0f;
		for (int j = j0; j < j1; j++)
			acc += w[(size_t)j * ldw] * rows[(size_t)j * ld + dc];
		out[dc] = add ? out[dc] + acc : acc;
	}
}

/* dst (hd, Tp) = the (T, hd) head at src (row stride ld), transposed; zero
 * padding past T */
static void s_transpose_head(float *dst, const float *src, size_t ld, int T, int hd)
{
	int Tp = s_padded(T);
	for (int d = 0; d < hd; d++) {
		float *o = dst + (size_t)d * Tp;
		for (int j = 0; j < T; j++)
			o[j] = src[(size_t)j * ld + d];
		for (int j = T; j < Tp; j++)
			o[j] = 0.0f;
	}
}

void kernel_attention_forward(float *out, float *att, const float *qkv, float *scratch, int B, int T,
                              int C, int H)
{
	kernel_gqa_attention_forward(out, att, qkv, scratch, B, T, H, H, C / H);
}

void kernel_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                               float *scratch, int B, int T, int C, int H)
{
	kernel_gqa_attention_backward(dqkv, dout, qkv, att, scratch, B, T, H, H, C / H);
}

size_t kernel_gqa_attention_scratch_floats(int B, int T, int H, int hd)
{
	return (size_t)B * H * hd * (size_t)s_padded(T) + (size_t)B * H * (size_t)T * T;
}

KERNEL_CLONES void kernel_gqa_attention_forward(float *out, float *att, const float *qkv, float *scratch,
                                                int B, int T, int H, int KV, int hd)
{
	int Tp = s_padded(T), rep = H / KV;
	size_t C = (size_t)H * hd, ld = C + 2 * (size_t)KV * hd;
	float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(static)
	for (int bh = 0; bh < B * H; bh++) {
		int b = bh / H, h = bh % H, g = h / rep;
		const float *qb = qkv + (size_t)b * T * ld + (size_t)h * hd;
		const float *kb = qkv + (size_t)b * T * ld + C + (size_t)g * hd;
		const float *vb = kb + (size_t)KV * hd;
		float *kt = scratch + (size_t)bh * hd * Tp; /* (hd, Tp): the KV head's K transposed */
		float *p = att + (size_t)bh * T * T;       /* (T, T) */
		s_transpose_head(kt, kb, ld, T, hd);
		/* scores, 4 query rows at a time, up to the causal edge of the last
		 * (rows past T repeat row T-1; entries above the diagonal are
		 * overwritten by the softmax below) */
		for (int i0 = 0; i0 < T; i0 += 4) {
			const float *q[4];
			float *srow[4];
			for (int r = 0; r < 4; r++) {
				int i = i0 + r < T ? i0 + r : T - 1;
				q[r] = qb + (size_t)i * ld;
				srow[r] = p + (size_t)i * T;
			}
			int n = i0 + 4 < T ? i0 + 4 : T;
			s_rows4_times_bt(srow, q, kt, Tp, hd, n);
		}
		for (int i = 0; i < T; i++) {
			float *s = p + (size_t)i * T;
			for (int j = 0; j <= i; j++)
				s[j] *= scale;
			float mx = s_max(s, i + 1);
			float inv = 1.0f / s_exp_shift_sum(s, i + 1, mx);
			for (int j = 0; j <= i; j++)
				s[j] *= inv;
			for (int j = i + 1; j < T; j++)
				s[j] = 0.0f;
			s_weighted_rows(out + ((size_t)b * T + i) * C + (size_t)h * hd, s, 1, vb, ld, 0, i + 1,
					hd, 0);
		}
	}
}

/* One query head's part of the attention backward: ds (T, T) and dq; dk and
 * dv of its KV head added to (add) or written (first head of the group).
 * Always inlined, so that it is compiled into each of the caller's
 * target_clones (FMA and AVX-512 where the CPU has them). */
static inline __attribute__((always_inline)) void s_gqa_head_backward(float *dqb, float *dkb, float *dvb, const float *qb,
                                       const float *kb, const float *dy, size_t ldy, const float *p,
                                       const float *vt, float *ds, size_t ld, int T, int hd,
                                       float scale, int add)
{
	int Tp = s_padded(T);
	/* dp = dy V^T, 4 rows at a time */
	for (int i0 = 0; i0 < T; i0 += 4) {
		const float *g[4];
		float *drow[4];
		for (int r = 0; r < 4; r++) {
			int i = i0 + r < T ? i0 + r : T - 1;
			g[r] = dy + (size_t)i * ldy;
			drow[r] = ds + (size_t)i * T;
		}
		s_rows4_times_bt(drow, g, vt, Tp, hd, i0 + 4 < T ? i0 + 4 : T);
	}
	/* softmax backward: ds = p * (dp - <p, dp>) * scale; then dq = ds K */
	for (int i = 0; i < T; i++) {
		const float *pr = p + (size_t)i * T;
		float *dr = ds + (size_t)i * T;
		float pdp = s_dot(pr, dr, i + 1);
		for (int j = 0; j <= i; j++)
			dr[j] = pr[j] * (dr[j] - pdp) * scale;
		for (int j = i + 1; j < T; j++)
			dr[j] = 0.0f;
		s_weighted_rows(dqb + (size_t)i * ld, dr, 1, kb, ld, 0, i + 1, hd, 0);
	}
	/* dk_j = sum over i >= j of ds[i][j] q_i; dv_j = sum over i >= j of p[i][j] dy_i */
	for (int j = 0; j < T; j++) {
		s_weighted_rows(dkb + (size_t)j * ld, ds + j, (size_t)T, qb, ld, j, T, hd, add);
		s_weighted_rows(dvb + (size_t)j * ld, p + j, (size_t)T, dy, ldy, j, T, hd, add);
	}
}

KERNEL_CLONES void kernel_gqa_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                                 const float *att, float *scratch, int B, int T, int H,
                                                 int KV, int hd)
{
	int Tp = s_padded(T), rep = H / KV;
	size_t C = (size_t)H * hd, ld = C + 2 * (size_t)KV * hd;
	float scale = 1.0f / sqrtf((float)hd);
	float *ds_all = scratch + (size_t)B * C * Tp;
	/* by (batch, KV head): the group's query heads in order, so the shared
	 * dk and dv are summed over them in a fixed order */
#pragma omp parallel for schedule(static)
	for (int bg = 0; bg < B * KV; bg++) {
		int b = bg / KV, g = bg % KV;
		const float *kb = qkv + (size_t)b * T * ld + C + (size_t)g * hd;
		float *dkb = dqkv + (size_t)b * T * ld + C + (size_t)g * hd;
		float *vt = scratch + (size_t)bg * hd * Tp; /* (hd, Tp) */
		s_transpose_head(vt, kb + (size_t)KV * hd, ld, T, hd);
		for (int r = 0; r < rep; r++) {
			int h = g * rep + r, bh = b * H + h;
			size_t qoff = (size_t)b * T * ld + (size_t)h * hd;
			s_gqa_head_backward(dqkv + qoff, dkb, dkb + (size_t)KV * hd, qkv + qoff, kb,
					    dout + (size_t)b * T * C + (size_t)h * hd, C,
					    att + (size_t)bh * T * T, vt, ds_all + (size_t)bh * T * T, ld, T,
					    hd, scale, r > 0);
		}
	}
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

KERNEL_CLONES void kernel_gelu_forward(float *out, const float *x, size_t n)
{
#pragma omp parallel for simd schedule(static)
	for (size_t i = 0; i < n; i++) {
		float v = x[i];
		float u = GELU_K * (v + 0.044715f * v * v * v);
		float th = 1.0f - 2.0f / (1.0f + s_expf(2.0f * u)); /* tanh(u) */
		out[i] = 0.5f * v * (1.0f + th);
	}
}

KERNEL_CLONES void kernel_gelu_backward_inplace(float *d, const float *x, size_t n)
{
#pragma omp parallel for simd schedule(static)
	for (size_t i = 0; i < n; i++) {
		float v = x[i];
		float u = GELU_K * (v + 0.044715f * v * v * v);
		float th = 1.0f - 2.0f / (1.0f + s_expf(2.0f * u));
		float du = GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
		d[i] *= 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du;
	}
}

KERNEL_CLONES void kernel_bias_backward(float *db, const float *dout, int N, int C)
{
	int n_blocks = (C + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static)
	for (int blk = 0; blk < n_blocks; blk++) {
		int c0 = blk * COL_BLOCK, c1 = c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C;
		float acc[COL_BLOCK] = {0};
		for (int n = 0; n < N; n++) {
			const float *d = dout + (size_t)n * C;
			for (int c = c0; c < c1; c++)
				acc[c - c0] += d[c];
		}
		for (int c = c0; c < c1; c++)
			db[c] += acc[c - c0];
	}
}

KERNEL_CLONES float kernel_crossentropy_forward(float *losses, float *lse, const float *logits,
                                  const int32_t *targets, int N, int V)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const float *x = logits + (size_t)n * V;
		float mx = s_max(x, V);
		float l = mx + logf(s_exp_sum(x, V, mx));
		lse[n] = l;
		losses[n] = l - x[targets[n]];
	}
	double sum = 0;
	for (int n = 0; n < N; n++)
		sum += losses[n];
	return (float)(sum / N);
}

KERNEL_CLONES void kernel_crossentropy_backward_inplace(float *logits, const float *lse, const int32_t *targets,
                                          int N, int V, float scale)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		float *x = logits + (size_t)n * V;
		float l = lse[n];
		for (int v = 0; v < V; v++)
			x[v] = s_expf(x[v] - l) * scale;
		x[targets[n]] -= scale;
	}
}

static inline uint16_t s_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
	uint32_t nan = (u >> 16) | 0x40u;
	return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

#define TILE 32

KERNEL_CLONES void kernel_to_bf16_transposed(uint16_t *dst, const float *src, size_t rows, size_t cols,
                                           size_t ld)
{
	size_t n_tiles = (cols + TILE - 1) / TILE;
	/* by tiles of TILE source columns (= destination rows) */
#pragma omp parallel for schedule(static)
	for (size_t tc = 0; tc < n_tiles; tc++) {
		size_t c0 = tc * TILE, c1 = c0 + TILE < cols ? c0 + TILE : cols;
		for (size_t r0 = 0; r0 < rows; r0 += TILE) {
			size_t r1 = r0 + TILE < rows ? r0 + TILE : rows;
			for (size_t c = c0; c < c1; c++)
				for (size_t r = r0; r < r1; r++)
					dst[c * rows + r] = s_bf16(src[r * ld + c]);
		}
	}
}

KERNEL_CLONES void kernel_to_bf16(uint16_t *dst, const float *src, size_t n)
{
#pragma omp parallel for simd schedule(static)
	for (size_t i = 0; i < n; i++)
		dst[i] = s_bf16(src[i]);
}

KERNEL_CLONES void kernel_to_bf16_rows(uint16_t *dst, const float *src, size_t rows, size_t cols,
                                     size_t ld)
{
#pragma omp parallel for schedule(static)
	for (size_t r = 0; r < rows; r++)
		for (size_t c = 0; c < cols; c++)
			dst[r * cols + c] = s_bf16(src[r * ld + c]);
}

void kernel_flush_denormals(void)
{
#if defined(__SSE__)
#pragma omp parallel
	_mm_setcsr(_mm_getcsr() | 0x8040u); /* FTZ (bit 15) | DAZ (bit 6) */
#endif
}
