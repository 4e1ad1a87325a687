/*
 * cuda_llama_kernels: RMSNorm, rotary embeddings and SwiGLU on the GPU
 * (see cuda_llama_kernels.h). Element-wise kernels are grid-stride loops;
 * RMSNorm's row statistics are one warp per row (lanes over the columns,
 * then a fixed butterfly of shuffles), and its weight gradient sums
 * COLSUM_ROWS-row chunks per column into scratch, which cuda_colsum_add
 * adds in its fixed order. All arithmetic is fp32; bf16 only at the edges.
 */
#include "cuda_llama_kernels.h"

#include <cuda_bf16.h>

#include <math.h>

#include "cuda_check.h"
#include "cuda_kernels.h"

typedef __nv_bfloat16 bf16;

#define WARP 32
#define ROW_BLOCK 256      /* 8 warps, one row each */
#define COLSUM_ROWS 256    /* rows per partial sum of dw: cuda_colsum_scratch_floats' chunks */

static unsigned s_grid(size_t n, unsigned block)
{
	size_t g = (n + block - 1) / block;
	return (unsigned)(g < 65535 ? (g > 0 ? g : 1) : 65535);
}

static unsigned s_row_grid(int N)
{
	return (unsigned)((N + ROW_BLOCK / WARP - 1) / (ROW_BLOCK / WARP));
}

__device__ __forceinline__ float s_warp_sum(float v)
{
	for (int o = WARP / 2; o > 0; o /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float s_f(const float *p, size_t i)
{
	return p[i];
}

__device__ __forceinline__ float s_f(const bf16 *p, size_t i)
{
	return __bfloat162float(p[i]);
}

/* ---- RMSNorm ---- */

__global__ void k_rmsnorm_forward(float *out, bf16 *out16, float *rstd, const float *x, const float *w,
                                  int N, int C, float eps)
{
	const int row = (int)(blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP),
		  lane = (int)threadIdx.x % WARP;
	if (row >= N)
		return;
	const float *xr = x + (size_t)row * C;
	float ss = 0.0f;
	for (int c = lane; c < C; c += WARP)
		ss += xr[c] * xr[c];
	ss = s_warp_sum(ss);
	const float r = rsqrtf(ss / (float)C + eps);
	for (int c = lane; c < C; c += WARP) {
		const float y = xr[c] * r * w[c];
		if (out)
			out[(size_t)row * C + c] = y;
		if (out16)
			out16[(size_t)row * C + c] = __float2bfloat16_rn(y);
	}
	if (lane == 0)
		rstd[row] = r;
}

extern "C" void cuda_rmsnorm_forward(float *out, uint16_t *out16, float *rstd, const float *x,
                                     const float *w, int N, int C, float eps, cudaStream_t stream)
{
	k_rmsnorm_forward<<<s_row_grid(N), ROW_BLOCK, 0, stream>>>(out, reinterpret_cast<bf16 *>(out16),
								      rstd, x, w, N, C, eps);
	CUDA_CHECK_LAUNCH();
}

/* y = x r w: dx = r (dout w) - x r^3 / C sum(dout w x), one warp a row */
template <typename TD>
__global__ void k_rmsnorm_backward_dx(float *dx, bf16 *dx16, const TD *dout, const float *x,
                                      const float *rstd, const float *w, int N, int C)
{
	const int row = (int)(blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP),
		  lane = (int)threadIdx.x % WARP;
	if (row >= N)
		return;
	const size_t at = (size_t)row * C;
	float dot = 0.0f;
	for (int c = lane; c < C; c += WARP)
		dot += s_f(dout, at + c) * w[c] * x[at + c];
	dot = s_warp_sum(dot);
	const float r = rstd[row], k = dot * r * r * r / (float)C;
	for (int c = lane; c < C; c += WARP) {
		const float d = dx[at + c] + (r * s_f(dout, at + c) * w[c] - x[at + c] * k);
		dx[at + c] = d;
		if (dx16)
			dx16[at + c] = __float2bfloat16_rn(d);
	}
}

/* partial[chunk][c] = sum over the chunk's rows, in order, of dout x rstd */
template <typename TD>
__global__ void k_rmsnorm_backward_dw(float *partial, const TD *dout, const float *x, const float *rstd,
                                      int N, int C)
{
	const int c = (int)(blockIdx.x * blockDim.x + threadIdx.x), chunk = (int)blockIdx.y;
	if (c >= C)
		return;
	const int r0 = chunk * COLSUM_ROWS, r1 = r0 + COLSUM_ROWS < N ? r0 + COLSUM_ROWS : N;
	float s = 0.0f;
	for (int r = r0; r < r1; r++) {
		const size_t at = (size_t)r * C + c;
		s += s_f(dout, at) * x[at] * rstd[r];
	}
	partial[(size_t)chunk * C + c] = s;
}

template <typename TD>
static void s_rmsnorm_backward(float *dx, uint16_t *dx16, float *dw, const TD *dout, const float *x,
                               const float *rstd, const float *w, int N, int C, float *scratch,
                               cudaStream_t stream)
{
	k_rmsnorm_backward_dx<TD><<<s_row_grid(N), ROW_BLOCK, 0, stream>>>(
		dx, reinterpret_cast<bf16 *>(dx16), dout, x, rstd, w, N, C);
	CUDA_CHECK_LAUNCH();
	const int n_chunks = (N + COLSUM_ROWS - 1) / COLSUM_ROWS;
	k_rmsnorm_backward_dw<TD><<<dim3((unsigned)((C + 127) / 128), (unsigned)n_chunks), 128, 0, stream>>>(
		scratch, dout, x, rstd, N, C);
	CUDA_CHECK_LAUNCH();
	cuda_colsum_add(dw, scratch, n_chunks, C, stream);
}

extern "C" void cuda_rmsnorm_backward(float *dx, uint16_t *dx16, float *dw, const float *dout,
                                      const uint16_t *dout16, const float *x, const float *rstd,
                                      const float *w, int N, int C, float *scratch, cudaStream_t stream)
{
	if (!dout == !dout16) {
		fprintf(stderr, "ringworker: fatal: cuda_rmsnorm_backward: exactly one of dout and dout16\n");
		exit(CUDA_EXIT_MISUSE);
	}
	if (dout)
		s_rmsnorm_backward<float>(dx, dx16, dw, dout, x, rstd, w, N, C, scratch, stream);
	else
		s_rmsnorm_backward<bf16>(dx, dx16, dw, reinterpret_cast<const bf16 *>(dout16), x, rstd, w, N,
					 C, scratch, stream);
}

/* ---- rotary embeddings ---- */

/* one thread per pair (row, head of q or k, j) or per v element pair;
 * sign -1 rotates by -angle (backward) */
__global__ void k_rope(float *out, bf16 *out16, const float *in, const float *cos, const float *sin,
                       int N, int T, int H, int KV, int hd, float sign)
{
	const int half = hd / 2, W = (H + 2 * KV) * hd; /* a row's width */
	const size_t per_row = (size_t)W / 2;           /* pairs a row: (H + KV) half rotated, KV half copied */
	const size_t total = (size_t)N * per_row;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		const int n = (int)(i / per_row), p = (int)(i % per_row);
		const size_t row = (size_t)n * W;
		size_t a, b;
		float y0, y1;
		if (p < (H + KV) * half) { /* q or k head p / half, pair j */
			const int head = p / half, j = p % half, t = n % T;
			a = row + (size_t)head * hd + j;
			b = a + half;
			const float c = cos[(size_t)t * half + j], s = sign * sin[(size_t)t * half + j];
			const float x0 = in[a], x1 = in[b];
			y0 = x0 * c - x1 * s;
			y1 = x1 * c + x0 * s;
		} else { /* v: two adjacent elements copied */
			a = row + (size_t)(H + KV) * hd + 2 * (size_t)(p - (H + KV) * half);
			b = a + 1;
			y0 = in[a];
			y1 = in[b];
		}
		if (out) {
			out[a] = y0;
			out[b] = y1;
		}
		if (out16) {
			out16[a] = __float2bfloat16_rn(y0);
			out16[b] = __float2bfloat16_rn(y1);
		}
	}
}

static void s_rope(float *out, uint16_t *out16, const float *in, const float *cos, const float *sin,
                   int N, int T, int H, int KV, int hd, float sign, cudaStream_t stream)
{
	const size_t total = (size_t)N * (size_t)(H + 2 * KV) * (size_t)hd / 2;
	k_rope<<<s_grid(total, 256), 256, 0, stream>>>(out, reinterpret_cast<bf16 *>(out16), in, cos, sin, N,
						      T, H, KV, hd, sign);
	CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_rope_forward(float *out, uint16_t *out16, const float *qkv, const float *cos,
                                  const float *sin, int N, int T, int H, int KV, int hd,
                                  cudaStream_t stream)
{
	s_rope(out, out16, qkv, cos, sin, N, T, H, KV, hd, 1.0f, stream);
}

extern "C" void cuda_rope_backward(float *dx, uint16_t *dx16, const float *dout, const float *cos,
                                   const float *sin, int N, int T, int H, int KV, int hd,
                                   cudaStream_t stream)
{
	s_rope(dx, dx16, dout, cos, sin, N, T, H, KV, hd, -1.0f, stream);
}

/* ---- SwiGLU ---- */

__device__ __forceinline__ float s_sigmoid(float g)
{
	return 1.0f / (1.0f + expf(-g));
}

__global__ void k_swiglu_forward(bf16 *h, const bf16 *gu, int N, int F)
{
	const size_t total = (size_t)N * F;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		const size_t n = i / (size_t)F, f = i % (size_t)F, at = n * 2 * (size_t)F + f;
		const float g = __bfloat162float(gu[at]), u = __bfloat162float(gu[at + F]);
		h[i] = __float2bfloat16_rn(g * s_sigmoid(g) * u);
	}
}

__global__ void k_swiglu_backward(bf16 *dgu, const bf16 *dh, const bf16 *gu, int N, int F)
{
	const size_t total = (size_t)N * F;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		const size_t n = i / (size_t)F, f = i % (size_t)F, at = n * 2 * (size_t)F + f;
		const float g = __bfloat162float(gu[at]), u = __bfloat162float(gu[at + F]);
		const float d = __bfloat162float(dh[i]), sg = s_sigmoid(g);
		dgu[at] = __float2bfloat16_rn(d * u * sg * (1.0f + g * (1.0f - sg)));
		dgu[at + F] = __float2bfloat16_rn(d * g * sg);
	}
}

extern "C" void cuda_swiglu_forward(uint16_t *h16, const uint16_t *gu16, int N, int F, cudaStream_t stream)
{
	k_swiglu_forward<<<s_grid((size_t)N * F, 256), 256, 0, stream>>>(
		reinterpret_cast<bf16 *>(h16), reinterpret_cast<const bf16 *>(gu16), N, F);
	CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_swiglu_backward(uint16_t *dgu16, const uint16_t *dh16, const uint16_t *gu16, int N,
                                     int F, cudaStream_t stream)
{
	k_swiglu_backward<<<s_grid((size_t)N * F, 256), 256, 0, stream>>>(
		reinterpret_cast<bf16 *>(dgu16), reinterpret_cast<const bf16 *>(dh16),
		reinterpret_cast<const bf16 *>(gu16), N, F);
	CUDA_CHECK_LAUNCH();
}
