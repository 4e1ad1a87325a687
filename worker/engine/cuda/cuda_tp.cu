/*
 * cuda_tp: the vocabulary-parallel cross-entropy's kernels (see
 * cuda_tp.h). One warp per row: lanes stride over the columns, then a
 * fixed butterfly of shuffles, so every rank's partial results repeat bit
 * for bit. All arithmetic is fp32; bf16 only at the edges.
 */
#include "cuda_tp.h"

#include <cuda_bf16.h>

#include <math.h>

#include "cuda_check.h"
#include "cuda_kernels_priv.h" /* WARP, ROW_BLOCK (8 warps, one row each), the warp reductions */

static unsigned s_row_grid(int N)
{
	return (unsigned)((N + ROW_BLOCK / WARP - 1) / (ROW_BLOCK / WARP));
}

__device__ __forceinline__ float s_f(const float *p, size_t i)
{
	return p[i];
}

__device__ __forceinline__ float s_f(const bf16 *p, size_t i)
{
	return __bfloat162float(p[i]);
}

template <typename TL>
__global__ void k_rowmax(float *mx, const TL *x, size_t ld, int N, int ncols)
{
	const int row = (int)(blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP),
		  lane = (int)threadIdx.x % WARP;
	if (row >= N)
		return;
	const TL *xr = x + (size_t)row * ld;
	float m = -INFINITY;
	for (int c = lane; c < ncols; c += WARP)
		m = fmaxf(m, s_f(xr, (size_t)c));
	m = s_warp_max(m);
	if (lane == 0)
		mx[row] = m;
}

extern "C" void cuda_tp_ce_rowmax(float *mx, const float *logits, const uint16_t *logits16, size_t ld,
                                  int N, int ncols, cudaStream_t stream)
{
	if (N <= 0)
		return;
	if (logits)
		k_rowmax<float><<<s_row_grid(N), ROW_BLOCK, 0, stream>>>(mx, logits, ld, N, ncols);
	else
		k_rowmax<bf16><<<s_row_grid(N), ROW_BLOCK, 0, stream>>>(
			mx, reinterpret_cast<const bf16 *>(logits16), ld, N, ncols);
	CUDA_CHECK_LAUNCH();
}

__global__ void k_maxof(float *mx, const float *all, int N, int t)
{
	const int n = (int)(blockIdx.x * blockDim.x + threadIdx.x);
	if (n >= N)
		return;
	float m = -INFINITY;
	for (int r = 0; r < t; r++)
		m = fmaxf(m, all[(size_t)r * N + n]);
	mx[n] = m;
}

extern "C" void cuda_tp_ce_maxof(float *mx, const float *all, int N, int t, cudaStream_t stream)
{
	if (N <= 0)
		return;
	k_maxof<<<s_grid((size_t)N, ROW_BLOCK), ROW_BLOCK, 0, stream>>>(mx, all, N, t);
	CUDA_CHECK_LAUNCH();
}

template <typename TL>
__global__ void k_partials(float *red, const TL *x, size_t ld, const int32_t *targets, const float *mx,
                           int N, int ncols, int v0)
{
	const int row = (int)(blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP),
		  lane = (int)threadIdx.x % WARP;
	if (row >= N)
		return;
	const TL *xr = x + (size_t)row * ld;
	const float m = mx[row];
	float s = 0.0f;
	for (int c = lane; c < ncols; c += WARP)
		s += expf(s_f(xr, (size_t)c) - m);
	s = s_warp_sum(s);
	if (lane == 0) {
		const int tg = targets[row] - v0;
		red[row] = s;
		red[N + row] = tg >= 0 && tg < ncols ? s_f(xr, (size_t)tg) : 0.0f;
	}
}

extern "C" void cuda_tp_ce_partials(float *red, const float *logits, const uint16_t *logits16, size_t ld,
                                    const int32_t *targets, const float *mx, int N, int ncols, int v0,
                                    cudaStream_t stream)
{
	if (N <= 0)
		return;
	if (logits)
		k_partials<float><<<s_row_grid(N), ROW_BLOCK, 0, stream>>>(red, logits, ld, targets, mx, N,
									  ncols, v0);
	else
		k_partials<bf16><<<s_row_grid(N), ROW_BLOCK, 0, stream>>>(
			red, reinterpret_cast<const bf16 *>(logits16), ld, targets, mx, N, ncols, v0);
	CUDA_CHECK_LAUNCH();
}

__global__ void k_finish(float *losses, float *lse, const float *mx, const float *red, int N)
{
	const int n = (int)(blockIdx.x * blockDim.x + threadIdx.x);
	if (n >= N)
		return;
	const float l = mx[n] + logf(red[n]);
	lse[n] = l;
	losses[n] = l - red[N + n];
}

extern "C" void cuda_tp_ce_finish(float *losses, float *lse, const float *mx, const float *red, int N,
                                  cudaStream_t stream)
{
	if (N <= 0)
		return;
	k_finish<<<s_grid((size_t)N, ROW_BLOCK), ROW_BLOCK, 0, stream>>>(losses, lse, mx, red, N);
	CUDA_CHECK_LAUNCH();
}

template <typename TL>
__global__ void k_backward(float *d, bf16 *d16, const TL *x, size_t ld, const float *lse,
                           const int32_t *targets, int N, int ncols, int v0, float scale)
{
	const int row = (int)(blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP),
		  lane = (int)threadIdx.x % WARP;
	if (row >= N)
		return;
	const size_t at = (size_t)row * ld;
	const float l = lse[row];
	const int tg = targets[row] - v0;
	for (int c = lane; c < (int)ld; c += WARP) {
		float g = 0.0f;
		if (c < ncols)
			g = expf(s_f(x + at, (size_t)c) - l) * scale - (c == tg ? scale : 0.0f);
		if (d)
			d[at + c] = g;
		if (d16)
			d16[at + c] = __float2bfloat16_rn(g);
	}
}

extern "C" void cuda_tp_ce_backward(float *dlogits, uint16_t *dlogits16, const float *logits,
                                    const uint16_t *logits16, size_t ld, const float *lse,
                                    const int32_t *targets, int N, int ncols, int v0, float scale,
                                    cudaStream_t stream)
{
	if (N <= 0)
		return;
	bf16 *d16 = reinterpret_cast<bf16 *>(dlogits16);
	if (logits)
		k_backward<float><<<s_row_grid(N), ROW_BLOCK, 0, stream>>>(dlogits, d16, logits, ld, lse,
									  targets, N, ncols, v0, scale);
	else
		k_backward<bf16><<<s_row_grid(N), ROW_BLOCK, 0, stream>>>(
			dlogits, d16, reinterpret_cast<const bf16 *>(logits16), ld, lse, targets, N, ncols, v0,
			scale);
	CUDA_CHECK_LAUNCH();
}
