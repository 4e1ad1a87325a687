/*
 * cuda_kernels: GPT-2's non-GEMM layers on the GPU (see cuda_kernels.h).
 *
 * Shapes of the launches: elementwise kernels use a grid-stride loop over
 * size_t indices; row kernels give one warp to a row (LayerNorm, softmax,
 * 8 rows per 256-thread block) or one block to a row (cross-entropy, whose
 * rows are V long). Warp sums use the xor butterfly, which leaves the same
 * bits in every lane (each step adds the same two values, in either order:
 * fp32 addition is commutative). Block sums go through shared memory as a
 * fixed binary tree. Column sums over rows are split into chunks of
 * COL_ROWS rows (LNB_ROWS in the fused LayerNorm backward): a first kernel
 * writes one partial per (chunk, column), a second adds them in a fixed
 * order (16 interleaved runs of chunks, then the runs in order). Nothing
 * uses atomics, so every result is the same bits run to run.
 *
 * Math: expf, logf, tanhf and 1/sqrtf are the accurate (not the __ fast)
 * versions; nvcc may contract a*b+c into an FMA, which is why results can
 * differ from the CPU's in the last bits (the tests' fp32 bounds allow it).
 * The cross-entropy and the mean are cuda_crossentropy.cu's; both files
 * share cuda_kernels_priv.h's launch helpers and warp reductions.
 */
#include "cuda_kernels.h"

#include <cuda_bf16.h>

#include <math.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_load.h"
#include "cuda_ptx.h"

#include "cuda_kernels_priv.h"

/* ---- embeddings ---- */

__global__ void k_embed_forward(float *out, const int32_t *inputs, const float *wte, const float *wpe,
                                int T, int C, size_t total)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t n = i / (size_t)C;
		int c = (int)(i % (size_t)C);
		int t = (int)(n % (size_t)T);
		out[i] = wte[(size_t)inputs[n] * C + c] + wpe[(size_t)t * C + c];
	}
}

extern "C" void cuda_embed_forward(float *out, const int32_t *inputs, const float *wte,
                                   const float *wpe, int B, int T, int C, cudaStream_t stream)
{
	size_t total = (size_t)B * T * C;
	k_embed_forward<<<s_grid(total, 256), 256, 0, stream>>>(out, inputs, wte, wpe, T, C, total);
	CUDA_CHECK_LAUNCH();
}

__global__ void k_embed_positions_forward(float *out, const float *wpe, int T, int C, size_t total)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t n = i / (size_t)C;
		int c = (int)(i % (size_t)C);
		out[i] = wpe[(n % (size_t)T) * C + c];
	}
}

extern "C" void cuda_embed_positions_forward(float *out, const float *wpe, int B, int T, int C,
                                             cudaStream_t stream)
{
	size_t total = (size_t)B * T * C;
	k_embed_positions_forward<<<s_grid(total, 256), 256, 0, stream>>>(out, wpe, T, C, total);
	CUDA_CHECK_LAUNCH();
}

__global__ void k_embed_tokens_add(float *out, const int32_t *inputs, const float *w, int v0, int v1,
                                   int C, size_t total)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t n = i / (size_t)C;
		int tok = inputs[n];
		if (tok >= v0 && tok < v1)
			out[i] += w[(size_t)(tok - v0) * C + i % (size_t)C];
	}
}

extern "C" void cuda_embed_tokens_add(float *out, const int32_t *inputs, const float *w, int v0,
                                      int v1, int N, int C, cudaStream_t stream)
{
	size_t total = (size_t)N * C;
	k_embed_tokens_add<<<s_grid(total, 256), 256, 0, stream>>>(out, inputs, w, v0, v1, C, total);
	CUDA_CHECK_LAUNCH();
}

__global__ void k_embed_positions_backward(float *dwpe, const float *dout, int B, int T, int C)
{
	size_t total = (size_t)T * C;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		float acc = dwpe[i];
		for (int b = 0; b < B; b++)
			acc += dout[(size_t)b * total + i];
		dwpe[i] = acc;
	}
}

extern "C" void cuda_embed_positions_backward(float *dwpe, const float *dout, int B, int T, int C,
                                              cudaStream_t stream)
{
	k_embed_positions_backward<<<s_grid((size_t)T * C, 256), 256, 0, stream>>>(dwpe, dout, B, T, C);
	CUDA_CHECK_LAUNCH();
}

extern "C" int cuda_embed_index_build(const int32_t *inputs, int N, int V, int32_t *uniq,
                                      int32_t *starts, int32_t *rows, int32_t *counts)
{
	memset(counts, 0, (size_t)(V + 1) * sizeof(int32_t));
	for (int n = 0; n < N; n++)
		counts[inputs[n] + 1]++;
	int n_unique = 0;
	for (int v = 0; v < V; v++) {
		if (counts[v + 1] > 0) {
			uniq[n_unique] = v;
			starts[n_unique] = counts[v];
			n_unique++;
		}
		counts[v + 1] += counts[v]; /* counts[v] = first slot of token v */
	}
	starts[n_unique] = N;
	for (int n = 0; n < N; n++) /* stable: rows of a token in increasing n */
		rows[counts[inputs[n]]++] = n;
	return n_unique;
}

/* one block per distinct token, threads over channels */
__global__ void k_embed_tokens_backward(float *dwte, int row0, const float *dout,
                                        const int32_t *uniq, const int32_t *starts,
                                        const int32_t *rows, int C)
{
	int k = blockIdx.x;
	float *g = dwte + (size_t)(uniq[k] - row0) * C;
	int r0 = starts[k], r1 = starts[k + 1];
	for (int c = threadIdx.x; c < C; c += blockDim.x) {
		float acc = g[c];
		for (int r = r0; r < r1; r++)
			acc += dout[(size_t)rows[r] * C + c];
		g[c] = acc;
	}
}

extern "C" void cuda_embed_tokens_backward(float *dwte, int row0, const float *dout,
                                           const int32_t *uniq, const int32_t *starts,
                                           const int32_t *rows, int n_unique, int C,
                                           cudaStream_t stream)
{
	if (n_unique <= 0)
		return;
	k_embed_tokens_backward<<<n_unique, 256, 0, stream>>>(dwte, row0, dout, uniq, starts, rows, C);
	CUDA_CHECK_LAUNCH();
}

/* ---- LayerNorm ---- */

/* LayerNorm's row kernels read in float4 pieces when V4 (C a multiple of
 * 4 and every row pointer 16-byte aligned: s_ln_vec4), one float at a
 * time otherwise; the same math either way, a lane's partial sums taken
 * over different elements. */
static bool s_ln_vec4(int C, const void *p0, const void *p1, const void *p2, const void *p3,
                      const void *p16)
{
	return C % 4 == 0 && (uintptr_t)p0 % 16 == 0 && (uintptr_t)p1 % 16 == 0 &&
	       (uintptr_t)p2 % 16 == 0 && (uintptr_t)p3 % 16 == 0 && (uintptr_t)p16 % 8 == 0;
}

__device__ __forceinline__ float s_sum4(float4 v)
{
	return (v.x + v.y) + (v.z + v.w);
}

template <bool V4>
__global__ void k_layernorm_forward(float *out, bf16 *out16, float *mean, float *rstd,
                                    const float *x, const float *w, const float *b, int N, int C)
{
	int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
	int lane = threadIdx.x % WARP;
	if (row >= N)
		return;
	const float *xr = x + (size_t)row * C;
	float s = 0.0f;
	if (V4) {
		const float4 *x4 = reinterpret_cast<const float4 *>(xr);
		for (int c = lane; c < C / 4; c += WARP)
			s += s_sum4(x4[c]);
	} else {
		for (int c = lane; c < C; c += WARP)
			s += xr[c];
	}
	float mu = s_warp_sum(s) / (float)C;
	float ss = 0.0f;
	if (V4) {
		const float4 *x4 = reinterpret_cast<const float4 *>(xr);
		for (int c = lane; c < C / 4; c += WARP) {
			const float4 v = x4[c];
			const float4 d = make_float4(v.x - mu, v.y - mu, v.z - mu, v.w - mu);
			ss += (d.x * d.x + d.y * d.y) + (d.z * d.z + d.w * d.w);
		}
	} else {
		for (int c = lane; c < C; c += WARP) {
			float d = xr[c] - mu;
			ss += d * d;
		}
	}
	float rs = 1.0f / sqrtf(s_warp_sum(ss) / (float)C + 1e-5f);
	if (V4) {
		const float4 *x4 = reinterpret_cast<const float4 *>(xr);
		const float4 *w4 = reinterpret_cast<const float4 *>(w), *b4 = reinterpret_cast<const float4 *>(b);
		for (int c = lane; c < C / 4; c += WARP) {
			const float4 v = x4[c], wv = w4[c], bv = b4[c];
			const float4 o = make_float4((v.x - mu) * rs * wv.x + bv.x, (v.y - mu) * rs * wv.y + bv.y,
						     (v.z - mu) * rs * wv.z + bv.z, (v.w - mu) * rs * wv.w + bv.w);
			if (out)
				reinterpret_cast<float4 *>(out + (size_t)row * C)[c] = o;
			if (out16)
				s_store4_bf16(out16 + (size_t)row * C + 4 * c, o.x, o.y, o.z, o.w);
		}
	} else {
		for (int c = lane; c < C; c += WARP) {
			float o = (xr[c] - mu) * rs * w[c] + b[c];
			if (out)
				out[(size_t)row * C + c] = o;
			if (out16)
				out16[(size_t)row * C + c] = __float2bfloat16_rn(o);
		}
	}
	if (lane == 0) {
		mean[row] = mu;
		rstd[row] = rs;
	}
}

extern "C" void cuda_layernorm_forward(float *out, uint16_t *out16, float *mean, float *rstd,
                                       const float *x, const float *w, const float *b, int N, int C,
                                       cudaStream_t stream)
{
	int rows_per_block = ROW_BLOCK / WARP;
	unsigned grid = (unsigned)((N + rows_per_block - 1) / rows_per_block);
	bf16 *o16 = out16 ? s_b16(out16) : NULL;
	if (s_ln_vec4(C, x, w, b, out, out16))
		k_layernorm_forward<true><<<grid, ROW_BLOCK, 0, stream>>>(out, o16, mean, rstd, x, w, b, N, C);
	else
		k_layernorm_forward<false><<<grid, ROW_BLOCK, 0, stream>>>(out, o16, mean, rstd, x, w, b, N, C);
	CUDA_CHECK_LAUNCH();
}

/* LayerNorm backward's per-row pieces, shared by the row kernel and the
 * fused one so that both give the same bits: a lane's partial sums of
 * g = dout * w and g * xhat over one float4 piece, and the piece of dx */
__device__ __forceinline__ void s_lnb_sums4(float &sg, float &sgx, float4 xv, float4 dv, float4 wv,
                                            float mu, float rs)
{
	const float4 g = make_float4(dv.x * wv.x, dv.y * wv.y, dv.z * wv.z, dv.w * wv.w);
	sg += s_sum4(g);
	sgx += (g.x * (xv.x - mu) * rs + g.y * (xv.y - mu) * rs) +
	       (g.z * (xv.z - mu) * rs + g.w * (xv.w - mu) * rs);
}

__device__ __forceinline__ float4 s_lnb_dx4(float4 acc, float4 xv, float4 dv, float4 wv, float mu,
                                            float rs, float mean_g, float mean_gx)
{
	return make_float4(acc.x + rs * (dv.x * wv.x - mean_g - (xv.x - mu) * rs * mean_gx),
			   acc.y + rs * (dv.y * wv.y - mean_g - (xv.y - mu) * rs * mean_gx),
			   acc.z + rs * (dv.z * wv.z - mean_g - (xv.z - mu) * rs * mean_gx),
			   acc.w + rs * (dv.w * wv.w - mean_g - (xv.w - mu) * rs * mean_gx));
}

template <bool V4, typename TD>
__global__ void k_layernorm_backward_rows(float *dx, bf16 *dx16, const TD *dout, const float *x,
                                          const float *mean, const float *rstd, const float *w,
                                          int N, int C)
{
	int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
	int lane = threadIdx.x % WARP;
	if (row >= N)
		return;
	const float *xr = x + (size_t)row * C;
	const TD *dr = dout + (size_t)row * C;
	float *dxr = dx + (size_t)row * C;
	float mu = mean[row], rs = rstd[row];
	float sg = 0.0f, sgx = 0.0f;
	if (V4) {
		const float4 *x4 = reinterpret_cast<const float4 *>(xr), *w4 = reinterpret_cast<const float4 *>(w);
		for (int c = lane; c < C / 4; c += WARP)
			s_lnb_sums4(sg, sgx, x4[c], cuda_ld4f(dr + 4 * c), w4[c], mu, rs);
	} else {
		for (int c = lane; c < C; c += WARP) {
			float g = cuda_ldf(dr + c) * w[c];
			sg += g;
			sgx += g * (xr[c] - mu) * rs;
		}
	}
	float mean_g = s_warp_sum(sg) / (float)C;
	float mean_gx = s_warp_sum(sgx) / (float)C;
	if (V4) {
		const float4 *x4 = reinterpret_cast<const float4 *>(xr), *w4 = reinterpret_cast<const float4 *>(w);
		float4 *dx4 = reinterpret_cast<float4 *>(dxr);
		for (int c = lane; c < C / 4; c += WARP) {
			const float4 r = s_lnb_dx4(dx4[c], x4[c], cuda_ld4f(dr + 4 * c), w4[c], mu, rs, mean_g,
						   mean_gx);
			dx4[c] = r;
			if (dx16)
				s_store4_bf16(dx16 + (size_t)row * C + 4 * c, r.x, r.y, r.z, r.w);
		}
	} else {
		for (int c = lane; c < C; c += WARP) {
			float xhat = (xr[c] - mu) * rs;
			float d = dxr[c] + rs * (cuda_ldf(dr + c) * w[c] - mean_g - xhat * mean_gx);
			dxr[c] = d;
			if (dx16)
				dx16[(size_t)row * C + c] = __float2bfloat16_rn(d);
		}
	}
}

/*
 * LayerNorm backward in one pass for C = 128 N4 (float4 pieces, N4 a
 * lane): block = ROW_BLOCK / WARP warps over a chunk of LNB_ROWS rows,
 * warp w taking rows w, w + 8, ...; each row's dx as the row kernel makes
 * it (the same bits), while the lane keeps the chunk's partial sums of
 * dout * xhat (dw) and dout (db) for its columns in registers; then the
 * warps' sums are added in order into p0, p1 [chunk][C]. The row kernel
 * plus k_colsum_partial read dout and x twice from memory; this reads
 * them once.
 */
#define LNB_ROWS 64
#define LNB_MAX_N4 8 /* C up to 1024 */
template <int N4, typename TD>
__global__ void __launch_bounds__(ROW_BLOCK)
	k_layernorm_backward_fused(float *dx, bf16 *dx16, float *p0, float *p1, const TD *dout,
				   const float *x, const float *mean, const float *rstd,
				   const float *w, int N, int C)
{
	__shared__ float red[ROW_BLOCK / WARP][N4 * 4 * WARP];
	const int lane = (int)threadIdx.x % WARP, warp = (int)threadIdx.x / WARP;
	const int chunk = (int)blockIdx.x, r0 = chunk * LNB_ROWS;
	const int r1 = r0 + LNB_ROWS < N ? r0 + LNB_ROWS : N;
	const float4 *w4 = reinterpret_cast<const float4 *>(w);
	float4 aw[N4], ab[N4];
	CK_UNROLL
	for (int j = 0; j < N4; j++)
		aw[j] = ab[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
	for (int row = r0 + warp; row < r1; row += ROW_BLOCK / WARP) {
		const float4 *x4 = reinterpret_cast<const float4 *>(x + (size_t)row * C);
		const TD *dr = dout + (size_t)row * C;
		float4 *dx4 = reinterpret_cast<float4 *>(dx + (size_t)row * C);
		float4 xv[N4], dv[N4];
		const float mu = mean[row], rs = rstd[row];
		float sg = 0.0f, sgx = 0.0f;
		CK_UNROLL
		for (int j = 0; j < N4; j++) {
			xv[j] = x4[lane + WARP * j];
			dv[j] = cuda_ld4f(dr + 4 * (lane + WARP * j));
		}
		CK_UNROLL
		for (int j = 0; j < N4; j++)
			s_lnb_sums4(sg, sgx, xv[j], dv[j], w4[lane + WARP * j], mu, rs);
		const float mean_g = s_warp_sum(sg) / (float)C, mean_gx = s_warp_sum(sgx) / (float)C;
		CK_UNROLL
		for (int j = 0; j < N4; j++) {
			const int c = lane + WARP * j;
			const float4 r = s_lnb_dx4(dx4[c], xv[j], dv[j], w4[c], mu, rs, mean_g, mean_gx);
			dx4[c] = r;
			if (dx16)
				s_store4_bf16(dx16 + (size_t)row * C + 4 * c, r.x, r.y, r.z, r.w);
			aw[j].x += dv[j].x * ((xv[j].x - mu) * rs);
			aw[j].y += dv[j].y * ((xv[j].y - mu) * rs);
			aw[j].z += dv[j].z * ((xv[j].z - mu) * rs);
			aw[j].w += dv[j].w * ((xv[j].w - mu) * rs);
			ab[j].x += dv[j].x;
			ab[j].y += dv[j].y;
			ab[j].z += dv[j].z;
			ab[j].w += dv[j].w;
		}
	}
	for (int k = 0; k < 2; k++) { /* dw's sums, then db's, through the one buffer */
		CK_UNROLL
		for (int j = 0; j < N4; j++)
			reinterpret_cast<float4 *>(red[warp])[lane + WARP * j] = k == 0 ? aw[j] : ab[j];
		__syncthreads();
		float *p = k == 0 ? p0 : p1;
		for (int c = (int)threadIdx.x; c < C; c += ROW_BLOCK) {
			float sum = 0.0f;
			for (int y = 0; y < ROW_BLOCK / WARP; y++)
				sum += red[y][c];
			p[(size_t)chunk * C + c] = sum;
		}
		__syncthreads(); /* red is written again */
	}
}

/*
 * Column partial sums: block (tile of COL_TILE columns, V4: of 4 COL_TILE
 * columns, four adjacent ones a thread, read as float4; chunk of COL_ROWS
 * rows), threads COL_TILE x COL_LANES; lane y takes rows y, y + COL_LANES,
 * ... of the chunk, then the lanes are added in order (so V4 or not, the
 * same bits). With LN, p0 gets sum dout * xhat and p1 sum dout; without,
 * p0 gets sum dout.
 */
template <bool LN, bool V4, typename TD>
__global__ void k_colsum_partial(float *p0, float *p1, const TD *dout, const float *x,
                                 const float *mean, const float *rstd, int N, int C)
{
	constexpr int W = V4 ? 4 : 1; /* columns per thread */
	__shared__ float sh0[COL_LANES][COL_TILE * W];
	__shared__ float sh1[COL_LANES][COL_TILE * W];
	const int c = (blockIdx.x * COL_TILE + threadIdx.x) * W;
	const int chunk = blockIdx.y;
	const int r0 = chunk * COL_ROWS, r1 = r0 + COL_ROWS < N ? r0 + COL_ROWS : N;
	float a0[W], a1[W];
	for (int j = 0; j < W; j++)
		a0[j] = a1[j] = 0.0f;
	if (c < C) {
		for (int r = r0 + threadIdx.y; r < r1; r += COL_LANES) {
			const size_t at = (size_t)r * C + c;
			float d[W], xv[W];
			if constexpr (V4) {
				const float4 dv = cuda_ld4f(dout + at);
				d[0] = dv.x, d[1] = dv.y, d[2] = dv.z, d[3] = dv.w;
				if (LN) {
					const float4 v = *reinterpret_cast<const float4 *>(x + at);
					xv[0] = v.x, xv[1] = v.y, xv[2] = v.z, xv[3] = v.w;
				}
			} else {
				d[0] = cuda_ldf(dout + at);
				if (LN)
					xv[0] = x[at];
			}
			for (int j = 0; j < W; j++) {
				if (LN) {
					a0[j] += d[j] * ((xv[j] - mean[r]) * rstd[r]);
					a1[j] += d[j];
				} else {
					a0[j] += d[j];
				}
			}
		}
	}
	for (int j = 0; j < W; j++) {
		sh0[threadIdx.y][threadIdx.x * W + j] = a0[j];
		sh1[threadIdx.y][threadIdx.x * W + j] = a1[j];
	}
	__syncthreads();
	if (threadIdx.y == 0 && c < C) {
		for (int j = 0; j < W; j++) {
			float s0 = 0.0f, s1 = 0.0f;
			for (int y = 0; y < COL_LANES; y++) {
				s0 += sh0[y][threadIdx.x * W + j];
				s1 += sh1[y][threadIdx.x * W + j];
			}
			p0[(size_t)chunk * C + c + j] = s0;
			if (LN)
				p1[(size_t)chunk * C + c + j] = s1;
		}
	}
}

/* k_colsum_partial's launch: V4 where C and the pointers allow */
template <bool LN, typename TD>
static void s_colsum_partial(float *p0, float *p1, const TD *dout, const float *x,
                             const float *mean, const float *rstd, int N, int C,
                             cudaStream_t stream)
{
	const bool v4 = C % 4 == 0 && (uintptr_t)dout % (4 * sizeof(TD)) == 0 &&
			(!LN || (uintptr_t)x % 16 == 0);
	const int cols = v4 ? 4 * COL_TILE : COL_TILE;
	dim3 grid((unsigned)((C + cols - 1) / cols), (unsigned)((N + COL_ROWS - 1) / COL_ROWS));
	if (v4)
		k_colsum_partial<LN, true, TD><<<grid, dim3(COL_TILE, COL_LANES), 0, stream>>>(
			p0, p1, dout, x, mean, rstd, N, C);
	else
		k_colsum_partial<LN, false, TD><<<grid, dim3(COL_TILE, COL_LANES), 0, stream>>>(
			p0, p1, dout, x, mean, rstd, N, C);
	CUDA_CHECK_LAUNCH();
}

/* out[c] += the sum over chunks of p[chunk][c]: block (COL_TILE columns,
 * FIN_LANES lanes), lane y adding chunks y, y + FIN_LANES, ... in order,
 * then the lanes' sums added in order (a thread per column walking every
 * chunk alone took most of a millisecond per step at GPT-2's batch of 190) */
#define FIN_LANES 16
__global__ void k_colsum_finish(float *out0, float *out1, const float *p0, const float *p1,
                                int n_chunks, int C)
{
	__shared__ float sh0[FIN_LANES][COL_TILE], sh1[FIN_LANES][COL_TILE];
	const int c = (int)(blockIdx.x * COL_TILE + threadIdx.x);
	float s0 = 0.0f, s1 = 0.0f;
	if (c < C)
		for (int k = (int)threadIdx.y; k < n_chunks; k += FIN_LANES) {
			s0 += p0[(size_t)k * C + c];
			if (out1)
				s1 += p1[(size_t)k * C + c];
		}
	sh0[threadIdx.y][threadIdx.x] = s0;
	sh1[threadIdx.y][threadIdx.x] = s1;
	__syncthreads();
	if (threadIdx.y != 0 || c >= C)
		return;
	s0 = s1 = 0.0f;
	for (int y = 0; y < FIN_LANES; y++) {
		s0 += sh0[y][threadIdx.x];
		s1 += sh1[y][threadIdx.x];
	}
	out0[c] += s0;
	if (out1)
		out1[c] += s1;
}

static void s_colsum_finish(float *out0, float *out1, const float *p0, const float *p1, int n_chunks,
                            int C, cudaStream_t stream)
{
	k_colsum_finish<<<(unsigned)((C + COL_TILE - 1) / COL_TILE), dim3(COL_TILE, FIN_LANES), 0, stream>>>(
		out0, out1, p0, p1, n_chunks, C);
	CUDA_CHECK_LAUNCH();
}

static int s_chunks(int N)
{
	return (N + COL_ROWS - 1) / COL_ROWS;
}

extern "C" void cuda_colsum_add(float *out, const float *partial, int n_chunks, int C,
                                cudaStream_t stream)
{
	s_colsum_finish(out, NULL, partial, NULL, n_chunks, C, stream);
}

extern "C" size_t cuda_colsum_scratch_floats(int N, int C)
{
	/* two sums per column: of COL_ROWS-row chunks, or of the fused
	 * LayerNorm backward's LNB_ROWS-row ones */
	const int rows = COL_ROWS < LNB_ROWS ? COL_ROWS : LNB_ROWS;
	return 2 * (size_t)((N + rows - 1) / rows) * (size_t)C;
}

template <typename TD>
static void s_layernorm_backward(float *dx, uint16_t *dx16, float *dw, float *db, const TD *dout,
                                 const float *x, const float *mean, const float *rstd, const float *w,
                                 int N, int C, float *scratch, cudaStream_t stream)
{
	bf16 *d16 = dx16 ? s_b16(dx16) : NULL;
	/* the fp32 rows 16-byte aligned; dout's 4 elements, 8 bytes for bf16 */
	const bool v4 = s_ln_vec4(C, dx, x, w, NULL, dx16) && (uintptr_t)dout % (4 * sizeof(TD)) == 0;
	if (v4 && C % (4 * WARP) == 0 && C / (4 * WARP) <= LNB_MAX_N4) {
		const int n_chunks = (N + LNB_ROWS - 1) / LNB_ROWS;
		float *p0 = scratch, *p1 = scratch + (size_t)n_chunks * C;
#define LNB(N4)                                                                                   \
	case N4:                                                                                  \
		k_layernorm_backward_fused<N4, TD><<<(unsigned)n_chunks, ROW_BLOCK, 0, stream>>>(     \
			dx, d16, p0, p1, dout, x, mean, rstd, w, N, C);                           \
		break
		switch (C / (4 * WARP)) {
			LNB(1);
			LNB(2);
			LNB(3);
			LNB(4);
			LNB(5);
			LNB(6);
			LNB(7);
			LNB(8);
		}
#undef LNB
		CUDA_CHECK_LAUNCH();
		s_colsum_finish(dw, db, p0, p1, n_chunks, C, stream);
		return;
	}
	int rows_per_block = ROW_BLOCK / WARP;
	unsigned grid_rows = (unsigned)((N + rows_per_block - 1) / rows_per_block);
	if (v4)
		k_layernorm_backward_rows<true, TD><<<grid_rows, ROW_BLOCK, 0, stream>>>(dx, d16, dout, x, mean,
											 rstd, w, N, C);
	else
		k_layernorm_backward_rows<false, TD><<<grid_rows, ROW_BLOCK, 0, stream>>>(dx, d16, dout, x,
											  mean, rstd, w, N, C);
	CUDA_CHECK_LAUNCH();
	int n_chunks = s_chunks(N);
	float *p0 = scratch, *p1 = scratch + (size_t)n_chunks * C;
	s_colsum_partial<true>(p0, p1, dout, x, mean, rstd, N, C, stream);
	s_colsum_finish(dw, db, p0, p1, n_chunks, C, stream);
}

extern "C" void cuda_layernorm_backward(float *dx, uint16_t *dx16, float *dw, float *db,
                                        const float *dout, const float *x, const float *mean,
                                        const float *rstd, const float *w, int N, int C,
                                        float *scratch, cudaStream_t stream)
{
	s_layernorm_backward(dx, dx16, dw, db, dout, x, mean, rstd, w, N, C, scratch, stream);
}

extern "C" void cuda_layernorm_backward16(float *dx, uint16_t *dx16, float *dw, float *db,
                                          const uint16_t *dout16, const float *x, const float *mean,
                                          const float *rstd, const float *w, int N, int C,
                                          float *scratch, cudaStream_t stream)
{
	s_layernorm_backward(dx, dx16, dw, db, reinterpret_cast<const bf16 *>(dout16), x, mean, rstd, w, N,
			     C, scratch, stream);
}

extern "C" void cuda_bias_backward(float *db, const float *dout, int N, int C, float *scratch,
                                   cudaStream_t stream)
{
	int n_chunks = s_chunks(N);
	s_colsum_partial<false>(scratch, NULL, dout, NULL, NULL, NULL, N, C, stream);
	s_colsum_finish(db, NULL, scratch, NULL, n_chunks, C, stream);
}

extern "C" void cuda_bias_backward16(float *db, const uint16_t *dout16, int N, int C, float *scratch,
                                     cudaStream_t stream)
{
	s_colsum_partial<false>(scratch, NULL, reinterpret_cast<const bf16 *>(dout16), NULL, NULL, NULL, N, C,
				stream);
	s_colsum_finish(db, NULL, scratch, NULL, s_chunks(N), C, stream);
}

/* ---- GELU ---- */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

__device__ __forceinline__ float s_gelu(float v)
{
	const float u = GELU_K * (v + 0.044715f * v * v * v);
	return 0.5f * v * (1.0f + tanhf(u));
}

/* d * gelu'(v) */
__device__ __forceinline__ float s_gelu_grad(float d, float v)
{
	const float u = GELU_K * (v + 0.044715f * v * v * v);
	const float th = tanhf(u);
	const float du = GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
	return d * (0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du);
}

/* cuda_gemm_epilogue16: one element a thread-step, grid-stride over M x N */
__global__ void k_gemm_epilogue16(cuda_gemm_epi_t epi, bf16 *y, bf16 *aux, const bf16 *bias, int M, int N,
                                  int64_t ld)
{
	const size_t total = (size_t)M * (size_t)N;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		const int n = (int)(i % (size_t)N);
		const size_t at = (i / (size_t)N) * (size_t)ld + (size_t)n;
		float x = __bfloat162float(y[at]);
		if (epi == CUDA_GEMM_EPI_DGELU) {
			y[at] = __float2bfloat16_rn(s_gelu_grad(x, __bfloat162float(aux[at])));
			continue;
		}
		if (bias)
			x += __bfloat162float(bias[n]);
		if (epi == CUDA_GEMM_EPI_GELU) {
			aux[at] = __float2bfloat16_rn(x);
			x = s_gelu(x);
		}
		y[at] = __float2bfloat16_rn(x);
	}
}

extern "C" void cuda_gemm_epilogue16(cuda_gemm_epi_t epi, uint16_t *y, uint16_t *aux, const uint16_t *bias,
                                     int M, int N, int64_t ld, cudaStream_t stream)
{
	k_gemm_epilogue16<<<s_grid((size_t)M * (size_t)N, 256), 256, 0, stream>>>(
		epi, s_b16(y), aux ? s_b16(aux) : NULL, reinterpret_cast<const bf16 *>(bias), M, N, ld);
	CUDA_CHECK_LAUNCH();
}

/* ---- attention data movement ---- */

/* The head layout's index of channel c of row (b, t): (B, H, T, hd). The
 * kernels below run one block per row (b, t), its threads across the row's
 * channels: every division is by a 32-bit int once per element, where a
 * flat index took four 64-bit divisions and moduli (on an H200 these
 * kernels ran at a fifth to a half of the memory bandwidth). */
__device__ __forceinline__ size_t s_head_at(int b, int t, int c, int T, int H, int hd)
{
	int h = c / hd, d = c - h * hd;
	return (((size_t)b * H + h) * T + t) * hd + d;
}

#define ROW_BLOCK 256

/* V4: four channels at a time (float4 in, 8 bytes of bf16 out), when C and
 * hd are multiples of 4 and the pointers aligned (s_heads_vec4) */
static bool s_heads_vec4(int C, int H, const void *src, const void *d0, const void *d1,
                         const void *d2)
{
	return C % 4 == 0 && (C / H) % 4 == 0 && (uintptr_t)src % 16 == 0 && (uintptr_t)d0 % 8 == 0 &&
	       (uintptr_t)d1 % 8 == 0 && (uintptr_t)d2 % 8 == 0;
}

template <bool V4>
__global__ void k_attention_split(bf16 *q, bf16 *k, bf16 *v, const float *qkv, int T, int C, int H)
{
	const int b = (int)(blockIdx.x / (unsigned)T), t = (int)(blockIdx.x % (unsigned)T), hd = C / H;
	const float *src = qkv + (size_t)blockIdx.x * 3 * (size_t)C;
	if (V4) {
		for (int c = 4 * threadIdx.x; c < C; c += 4 * blockDim.x) {
			const size_t at = s_head_at(b, t, c, T, H, hd);
			const float4 vq = *reinterpret_cast<const float4 *>(src + c);
			const float4 vk = *reinterpret_cast<const float4 *>(src + C + c);
			const float4 vv = *reinterpret_cast<const float4 *>(src + 2 * C + c);
			s_store4_bf16(q + at, vq.x, vq.y, vq.z, vq.w);
			s_store4_bf16(k + at, vk.x, vk.y, vk.z, vk.w);
			s_store4_bf16(v + at, vv.x, vv.y, vv.z, vv.w);
		}
	} else {
		for (int c = threadIdx.x; c < C; c += blockDim.x) {
			size_t at = s_head_at(b, t, c, T, H, hd);
			q[at] = __float2bfloat16_rn(src[c]);
			k[at] = __float2bfloat16_rn(src[C + c]);
			v[at] = __float2bfloat16_rn(src[2 * C + c]);
		}
	}
}

extern "C" void cuda_attention_split(uint16_t *q, uint16_t *k, uint16_t *v, const float *qkv, int B,
                                     int T, int C, int H, cudaStream_t stream)
{
	const unsigned grid = (unsigned)B * (unsigned)T;
	if (s_heads_vec4(C, H, qkv, q, k, v))
		k_attention_split<true><<<grid, ROW_BLOCK, 0, stream>>>(s_b16(q), s_b16(k), s_b16(v), qkv, T,
									 C, H);
	else
		k_attention_split<false><<<grid, ROW_BLOCK, 0, stream>>>(s_b16(q), s_b16(k), s_b16(v), qkv, T,
									  C, H);
	CUDA_CHECK_LAUNCH();
}

template <bool V4, typename TX>
__global__ void k_heads_split(bf16 *y16, const TX *x, int T, int C, int H)
{
	const int b = (int)(blockIdx.x / (unsigned)T), t = (int)(blockIdx.x % (unsigned)T), hd = C / H;
	const TX *src = x + (size_t)blockIdx.x * C;
	if (V4) {
		for (int c = 4 * threadIdx.x; c < C; c += 4 * blockDim.x) {
			const float4 val = cuda_ld4f(src + c);
			s_store4_bf16(y16 + s_head_at(b, t, c, T, H, hd), val.x, val.y, val.z, val.w);
		}
	} else {
		for (int c = threadIdx.x; c < C; c += blockDim.x)
			y16[s_head_at(b, t, c, T, H, hd)] = __float2bfloat16_rn(cuda_ldf(src + c));
	}
}

template <typename TX>
static void s_heads_split(uint16_t *y16, const TX *x, int B, int T, int C, int H, cudaStream_t stream)
{
	const unsigned grid = (unsigned)B * (unsigned)T;
	const bool v4 = C % 4 == 0 && (C / H) % 4 == 0 && (uintptr_t)x % (4 * sizeof(TX)) == 0 &&
			(uintptr_t)y16 % 8 == 0;
	if (v4)
		k_heads_split<true, TX><<<grid, ROW_BLOCK, 0, stream>>>(s_b16(y16), x, T, C, H);
	else
		k_heads_split<false, TX><<<grid, ROW_BLOCK, 0, stream>>>(s_b16(y16), x, T, C, H);
	CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_heads_split(uint16_t *y16, const float *x, int B, int T, int C, int H,
                                 cudaStream_t stream)
{
	s_heads_split(y16, x, B, T, C, H, stream);
}

extern "C" void cuda_heads_split16(uint16_t *y16, const uint16_t *x16, int B, int T, int C, int H,
                                   cudaStream_t stream)
{
	s_heads_split(y16, reinterpret_cast<const bf16 *>(x16), B, T, C, H, stream);
}

__global__ void k_heads_merge(float *out, bf16 *out16, const float *y, int T, int C, int H)
{
	const int b = (int)(blockIdx.x / (unsigned)T), t = (int)(blockIdx.x % (unsigned)T), hd = C / H;
	const size_t row = (size_t)blockIdx.x * C;
	for (int c = threadIdx.x; c < C; c += blockDim.x) {
		float val = y[s_head_at(b, t, c, T, H, hd)];
		if (out)
			out[row + c] = val;
		if (out16)
			out16[row + c] = __float2bfloat16_rn(val);
	}
}

extern "C" void cuda_heads_merge(float *out, uint16_t *out16, const float *y, int B, int T, int C,
                                 int H, cudaStream_t stream)
{
	k_heads_merge<<<(unsigned)B * (unsigned)T, ROW_BLOCK, 0, stream>>>(
		out, out16 ? s_b16(out16) : NULL, y, T, C, H);
	CUDA_CHECK_LAUNCH();
}

__global__ void k_attention_merge_grads(float *dqkv, bf16 *dqkv16, const float *dq, const float *dk,
                                        const float *dv, int T, int C, int H)
{
	const int b = (int)(blockIdx.x / (unsigned)T), t = (int)(blockIdx.x % (unsigned)T), hd = C / H;
	const size_t row = (size_t)blockIdx.x * 3 * (size_t)C;
	for (int c = threadIdx.x; c < C; c += blockDim.x) {
		size_t at = s_head_at(b, t, c, T, H, hd);
		float vq = dq[at], vk = dk[at], vv = dv[at];
		if (dqkv) {
			dqkv[row + c] = vq;
			dqkv[row + C + c] = vk;
			dqkv[row + 2 * C + c] = vv;
		}
		if (dqkv16) {
			dqkv16[row + c] = __float2bfloat16_rn(vq);
			dqkv16[row + C + c] = __float2bfloat16_rn(vk);
			dqkv16[row + 2 * C + c] = __float2bfloat16_rn(vv);
		}
	}
}

extern "C" void cuda_attention_merge_grads(float *dqkv, uint16_t *dqkv16, const float *dq,
                                           const float *dk, const float *dv, int B, int T, int C,
                                           int H, cudaStream_t stream)
{
	k_attention_merge_grads<<<(unsigned)B * (unsigned)T, ROW_BLOCK, 0, stream>>>(
		dqkv, dqkv16 ? s_b16(dqkv16) : NULL, dq, dk, dv, T, C, H);
	CUDA_CHECK_LAUNCH();
}

/* ---- causal softmax ---- */

__global__ void k_softmax_causal_forward(float *att, bf16 *att16, const float *scores, int BH, int T)
{
	size_t row = (size_t)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
	int lane = threadIdx.x % WARP;
	if (row >= (size_t)BH * T)
		return;
	int i = (int)(row % (size_t)T);
	const float *s = scores + row * T;
	float mx = -INFINITY;
	for (int j = lane; j <= i; j += WARP)
		mx = fmaxf(mx, s[j]);
	mx = s_warp_max(mx);
	float sum = 0.0f;
	for (int j = lane; j <= i; j += WARP)
		sum += expf(s[j] - mx);
	float inv = 1.0f / s_warp_sum(sum);
	for (int j = lane; j < T; j += WARP) {
		float p = j <= i ? expf(s[j] - mx) * inv : 0.0f;
		if (att)
			att[row * T + j] = p;
		if (att16)
			att16[row * T + j] = __float2bfloat16_rn(p);
	}
}

extern "C" void cuda_softmax_causal_forward(float *att, uint16_t *att16, const float *scores, int BH,
                                            int T, cudaStream_t stream)
{
	size_t rows = (size_t)BH * T;
	size_t rows_per_block = ROW_BLOCK / WARP;
	k_softmax_causal_forward<<<(unsigned)((rows + rows_per_block - 1) / rows_per_block), ROW_BLOCK, 0,
				   stream>>>(att, att16 ? s_b16(att16) : NULL, scores, BH, T);
	CUDA_CHECK_LAUNCH();
}

__global__ void k_softmax_causal_backward(bf16 *dpre16, float *dpre, const float *datt,
                                          const bf16 *att16, int BH, int T, float scale)
{
	size_t row = (size_t)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
	int lane = threadIdx.x % WARP;
	if (row >= (size_t)BH * T)
		return;
	int i = (int)(row % (size_t)T);
	const bf16 *p = att16 + row * T;
	const float *dp = datt + row * T;
	float s = 0.0f;
	for (int j = lane; j <= i; j += WARP)
		s += __bfloat162float(p[j]) * dp[j];
	float pdp = s_warp_sum(s);
	for (int j = lane; j < T; j += WARP) {
		float d = j <= i ? __bfloat162float(p[j]) * (dp[j] - pdp) * scale : 0.0f;
		if (dpre)
			dpre[row * T + j] = d;
		if (dpre16)
			dpre16[row * T + j] = __float2bfloat16_rn(d);
	}
}

extern "C" void cuda_softmax_causal_backward(uint16_t *dpre16, float *dpre, const float *datt,
                                             const uint16_t *att16, int BH, int T, float scale,
                                             cudaStream_t stream)
{
	size_t rows = (size_t)BH * T;
	size_t rows_per_block = ROW_BLOCK / WARP;
	k_softmax_causal_backward<<<(unsigned)((rows + rows_per_block - 1) / rows_per_block), ROW_BLOCK,
				    0, stream>>>(dpre16 ? s_b16(dpre16) : NULL, dpre, datt,
						 reinterpret_cast<const bf16 *>(att16), BH, T, scale);
	CUDA_CHECK_LAUNCH();
}

/* ---- conversions, sums, AdamW ---- */

__global__ void k_to_bf16(bf16 *dst, const float *src, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = __float2bfloat16_rn(src[i]);
}

extern "C" void cuda_to_bf16(uint16_t *dst, const float *src, size_t n, cudaStream_t stream)
{
	k_to_bf16<<<s_grid(n, 256), 256, 0, stream>>>(s_b16(dst), src, n);
	CUDA_CHECK_LAUNCH();
}

__global__ void k_add(float *dst, const float *src, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] += src[i];
}

extern "C" void cuda_add(float *dst, const float *src, size_t n, cudaStream_t stream)
{
	k_add<<<s_grid(n, 256), 256, 0, stream>>>(dst, src, n);
	CUDA_CHECK_LAUNCH();
}

/* A fixed grid: thread (block g, lane l) takes elements g*SUMSQ_BLOCK + l,
 * then + SUMSQ_GRID*SUMSQ_BLOCK, ...; blocks and then the partials are added
 * as fixed trees. */
__global__ void k_sum_squares_partial(double *partial, const float *x, size_t n)
{
	__shared__ double sh[SUMSQ_BLOCK];
	double s = 0.0;
	for (size_t i = blockIdx.x * (size_t)SUMSQ_BLOCK + threadIdx.x; i < n;
	     i += (size_t)SUMSQ_GRID * SUMSQ_BLOCK)
		s += (double)x[i] * (double)x[i];
	sh[threadIdx.x] = s;
	__syncthreads();
	for (int o = SUMSQ_BLOCK / 2; o > 0; o /= 2) {
		if ((int)threadIdx.x < o)
			sh[threadIdx.x] += sh[threadIdx.x + o];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		partial[blockIdx.x] = sh[0];
}

__global__ void k_sum_squares_finish(double *out, const double *partial)
{
	__shared__ double sh[SUMSQ_GRID];
	sh[threadIdx.x] = partial[threadIdx.x];
	__syncthreads();
	for (int o = SUMSQ_GRID / 2; o > 0; o /= 2) {
		if ((int)threadIdx.x < o)
			sh[threadIdx.x] += sh[threadIdx.x + o];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		*out = sh[0];
}

extern "C" size_t cuda_sum_squares_scratch(void)
{
	return SUMSQ_GRID;
}

extern "C" void cuda_sum_squares(double *out, const float *x, size_t n, double *scratch,
                                 cudaStream_t stream)
{
	k_sum_squares_partial<<<SUMSQ_GRID, SUMSQ_BLOCK, 0, stream>>>(scratch, x, n);
	CUDA_CHECK_LAUNCH();
	k_sum_squares_finish<<<1, SUMSQ_GRID, 0, stream>>>(out, scratch);
	CUDA_CHECK_LAUNCH();
}

__global__ void k_adamw(float *params, bf16 *params16, const float *grads, float *m, float *v,
                        size_t n, float b1, float b2, float step, float inv_sqrt_bc2, float eps,
                        float keep, float grad_scale)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float g = grads[i] * grad_scale;
		float mi = b1 * m[i] + (1.0f - b1) * g;
		float vi = b2 * v[i] + (1.0f - b2) * g * g;
		m[i] = mi;
		v[i] = vi;
		float p = params[i] * keep - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
		params[i] = p;
		if (params16)
			params16[i] = __float2bfloat16_rn(p);
	}
}

extern "C" void cuda_adamw(float *params, uint16_t *params16, const float *grads, float *m, float *v,
                           size_t n, float b1, float b2, float step, float inv_sqrt_bc2, float eps,
                           float keep, float grad_scale, cudaStream_t stream)
{
	if (n == 0)
		return;
	k_adamw<<<s_grid(n, 256), 256, 0, stream>>>(params, params16 ? s_b16(params16) : NULL, grads, m,
						    v, n, b1, b2, step, inv_sqrt_bc2, eps, keep,
						    grad_scale);
	CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_adamw_segments(const cuda_segment_t *segs, int n_segs, size_t lo, size_t n,
                                    float *params, uint16_t *params16, const float *grads, float *m,
                                    float *v, const optim_adamw_t *hp, float grad_scale,
                                    cudaStream_t stream)
{
	/* optim.c's constants, computed the same way */
	const float b1 = (float)hp->beta1, b2 = (float)hp->beta2;
	const float step = (float)(hp->lr / (1.0 - pow(hp->beta1, (double)hp->t)));
	const float inv_sqrt_bc2 = (float)(1.0 / sqrt(1.0 - pow(hp->beta2, (double)hp->t)));
	const float eps = (float)hp->eps;
	const float keep_decay = (float)(1.0 - hp->lr * hp->weight_decay);
	const size_t hi = lo + n;
	for (int i = 0; i < n_segs; i++) {
		/* the part of segment i inside [lo, hi); k indexes the caller's arrays */
		const cuda_segment_t *sg = &segs[i];
		const size_t a = sg->lo > lo ? sg->lo : lo, b = sg->hi < hi ? sg->hi : hi;
		if (a >= b)
			continue;
		const size_t k = a - lo;
		cuda_adamw(params + k, params16 ? params16 + k : NULL, grads + k, m + k, v + k, b - a, b1, b2,
			   step, inv_sqrt_bc2, eps, sg->decay ? keep_decay : 1.0f, grad_scale, stream);
	}
}
