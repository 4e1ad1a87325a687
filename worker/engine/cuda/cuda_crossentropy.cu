/*
 * cuda_crossentropy: the cross-entropy of the LM head's logits (fused with
 * its gradient) and the mean of the losses (see cuda_kernels.h, where they
 * are declared with the other kernels). One block per row; the row's
 * (max, sum of exp) pairs merge in a fixed tree, so every result is the
 * same bits run to run. The exponentials of k_crossentropy_cached are
 * ex2.approx (within 2 ulp; the tests' fp32 bounds hold); the others are
 * the accurate expf and logf.
 */
#include "cuda_kernels.h"

#include <cuda_bf16.h>

#include <math.h>

#include "cuda_check.h"
#include "cuda_kernels_priv.h"
#include "cuda_load.h"
#include "cuda_ptx.h"

/* (m, s): a running max and the sum of exp(x - m) so far; merging two
 * rescales the smaller side's sum to the larger max */
__device__ __forceinline__ void s_lse_merge(float &m, float &s, float m2, float s2)
{
	const float mx = fmaxf(m, m2);
	if (mx == -INFINITY)
		return; /* both empty */
	s = s * expf(m - mx) + s2 * expf(m2 - mx);
	m = mx;
}

__device__ __forceinline__ void s_lse_add(float &m, float &s, float x)
{
	if (x > m) {
		s = s * expf(m - x) + 1.0f;
		m = x;
	} else {
		s += expf(x - m);
	}
}

/* The row's loss (and lse, unless NULL), by thread 0; xt = the target's logit */
__device__ __forceinline__ void s_ce_loss(float *losses, float *lse, size_t n, float l, float xt)
{
	if (threadIdx.x != 0)
		return;
	if (lse)
		lse[n] = l;
	losses[n] = l - xt;
}

/* The gradient of logits v .. v + 3 of the row at `row`, given their
 * softmax probabilities p: (p - [v == t]) * scale, into dlogits and/or
 * dlogits16 (either may be NULL) */
__device__ __forceinline__ void s_ce_grad4(float *dlogits, bf16 *dlogits16, size_t row, int v, int t,
                                           float scale, float4 p)
{
	float d[4] = {p.x * scale, p.y * scale, p.z * scale, p.w * scale};
	if (t >= v && t < v + 4)
		d[t - v] -= scale;
	if (dlogits)
		*reinterpret_cast<float4 *>(dlogits + row + v) = make_float4(d[0], d[1], d[2], d[3]);
	if (dlogits16)
		s_store4_bf16(dlogits16 + row + v, d[0], d[1], d[2], d[3]);
}

/* the same for one logit */
__device__ __forceinline__ void s_ce_grad1(float *dlogits, bf16 *dlogits16, size_t row, int v, int t,
                                           float scale, float p)
{
	float d = p * scale;
	if (v == t)
		d -= scale;
	if (dlogits)
		dlogits[row + v] = d;
	if (dlogits16)
		dlogits16[row + v] = __float2bfloat16_rn(d);
}

/* One block per row. First pass: each thread keeps a running (max, sum)
 * over its float4 pieces of the row (when ld is a multiple of 4, so that
 * rows are 16-byte aligned) and the tail, and a fixed tree merges the
 * threads' pairs (the two-pass version, max then sum, was 4% of a GPT-2
 * 124M step's kernel time on an H200, bench/RESULTS.md). Second pass, when
 * a gradient is wanted: the same pieces again (a row is 200 KB at GPT-2's
 * vocabulary, still in L2) and the gradient written; the separate backward
 * kernel this replaces read the logits from memory once more and divided
 * a 64-bit index per element (5% of kernel time). */
template <typename TL>
__global__ void k_crossentropy_forward(float *losses, float *lse, float *dlogits, bf16 *dlogits16,
                                       const TL *logits, const int32_t *targets, int V, int ld,
                                       float scale)
{
	__shared__ float shm[CE_BLOCK], shs[CE_BLOCK];
	const size_t n = blockIdx.x, row = n * (size_t)ld;
	const TL *x = logits + row;
	float m = -INFINITY, sum = 0.0f;
	const int V4 = ld % 4 == 0 ? V / 4 : 0; /* rows aligned for 4-wide loads, else all scalar */
	for (int i = threadIdx.x; i < V4; i += blockDim.x) {
		const float4 v = cuda_ld4f(x + 4 * i);
		s_lse_add(m, sum, v.x);
		s_lse_add(m, sum, v.y);
		s_lse_add(m, sum, v.z);
		s_lse_add(m, sum, v.w);
	}
	for (int v = 4 * V4 + threadIdx.x; v < V; v += blockDim.x)
		s_lse_add(m, sum, cuda_ldf(x + v));
	shm[threadIdx.x] = m;
	shs[threadIdx.x] = sum;
	__syncthreads();
	for (int o = blockDim.x / 2; o > 0; o /= 2) {
		if ((int)threadIdx.x < o) {
			float a = shm[threadIdx.x], b = shs[threadIdx.x];
			s_lse_merge(a, b, shm[threadIdx.x + o], shs[threadIdx.x + o]);
			shm[threadIdx.x] = a;
			shs[threadIdx.x] = b;
		}
		__syncthreads();
	}
	const float l = shm[0] + logf(shs[0]);
	const int t = targets[n];
	s_ce_loss(losses, lse, n, l, cuda_ldf(x + t));
	if (!dlogits && !dlogits16)
		return;
	for (int i = threadIdx.x; i < V4; i += blockDim.x) {
		const float4 xv = cuda_ld4f(x + 4 * i);
		s_ce_grad4(dlogits, dlogits16, row, 4 * i, t, scale,
			   make_float4(expf(xv.x - l), expf(xv.y - l), expf(xv.z - l), expf(xv.w - l)));
	}
	for (int v = 4 * V4 + threadIdx.x; v < V; v += blockDim.x)
		s_ce_grad1(dlogits, dlogits16, row, v, t, scale, expf(cuda_ldf(x + v) - l));
}

#define CE_CACHE 25 /* float4 pieces a thread holds: 25 * 4 * CE_BLOCK = 51200 logits */
#define LOG2E_F 1.4426950408889634f

/* The cross-entropy of rows that fit in registers (ld a multiple of 4 and
 * V <= 4 * CE_CACHE * CE_BLOCK + 3: GPT-2's 50257 and 50304 do), with as
 * many whole warps per row as it takes (blockDim.x <= CE_BLOCK): each
 * thread loads its float4 pieces (and one element of the tail) once, so
 * the logits are read from memory once, not twice as k_crossentropy_forward
 * does; then the max, the sum of 2^((x - max) log2 e) and the gradient come
 * from registers, each reduction a fixed tree (the same bits run to run). */
template <typename TL>
__global__ void __launch_bounds__(CE_BLOCK)
	k_crossentropy_cached(float *losses, float *lse, float *dlogits, bf16 *dlogits16,
			      const TL *logits, const int32_t *targets, int V, int ld, float scale)
{
	__shared__ float shr[CE_BLOCK / WARP];
	const int threads = (int)blockDim.x, warps = threads / WARP;
	__shared__ float bcast;
	const size_t n = blockIdx.x, row = n * (size_t)ld;
	const TL *x = logits + row;
	const int V4 = V / 4, tail = V - 4 * V4, lane = (int)threadIdx.x % WARP,
		  warp = (int)threadIdx.x / WARP;
	float4 c[CE_CACHE];
	float m = -INFINITY;
CK_UNROLL
	for (int j = 0; j < CE_CACHE; j++) {
		const int i = (int)threadIdx.x + j * threads;
		c[j] = i < V4 ? cuda_ld4f(x + 4 * i) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
		m = fmaxf(m, fmaxf(fmaxf(c[j].x, c[j].y), fmaxf(c[j].z, c[j].w)));
	}
	const float xt = (int)threadIdx.x < tail ? cuda_ldf(x + 4 * V4 + threadIdx.x) : -INFINITY;
	m = fmaxf(m, xt);
	/* the row's max: warps by shuffles, then the warps' in order */
	for (int o = WARP / 2; o > 0; o /= 2)
		m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
	if (lane == 0)
		shr[warp] = m;
	__syncthreads();
	if (threadIdx.x == 0) {
		float r = shr[0];
		for (int w = 1; w < warps; w++)
			r = fmaxf(r, shr[w]);
		bcast = r;
	}
	__syncthreads();
	m = bcast;
	const float ml = m * LOG2E_F;
	float sum = 0.0f;
CK_UNROLL
	for (int j = 0; j < CE_CACHE; j++) /* -inf pieces add 2^-inf = 0 */
		sum += (cuda_ex2_approx(fmaf(c[j].x, LOG2E_F, -ml)) + cuda_ex2_approx(fmaf(c[j].y, LOG2E_F, -ml))) +
		       (cuda_ex2_approx(fmaf(c[j].z, LOG2E_F, -ml)) + cuda_ex2_approx(fmaf(c[j].w, LOG2E_F, -ml)));
	sum += cuda_ex2_approx(fmaf(xt, LOG2E_F, -ml));
	sum = s_warp_sum(sum);
	__syncthreads(); /* every thread has read bcast */
	if (lane == 0)
		shr[warp] = sum;
	__syncthreads();
	if (threadIdx.x == 0) {
		float r = 0.0f;
		for (int w = 0; w < warps; w++)
			r += shr[w];
		bcast = r;
	}
	__syncthreads();
	const float l = m + logf(bcast);
	const int t = targets[n];
	s_ce_loss(losses, lse, n, l, cuda_ldf(x + t));
	if (!dlogits && !dlogits16)
		return;
	const float ll = l * LOG2E_F;
CK_UNROLL
	for (int j = 0; j < CE_CACHE; j++) {
		const int i = (int)threadIdx.x + j * threads;
		if (i >= V4)
			break;
		s_ce_grad4(dlogits, dlogits16, row, 4 * i, t, scale,
			   make_float4(cuda_ex2_approx(fmaf(c[j].x, LOG2E_F, -ll)),
				       cuda_ex2_approx(fmaf(c[j].y, LOG2E_F, -ll)),
				       cuda_ex2_approx(fmaf(c[j].z, LOG2E_F, -ll)),
				       cuda_ex2_approx(fmaf(c[j].w, LOG2E_F, -ll))));
	}
	if ((int)threadIdx.x < tail)
		s_ce_grad1(dlogits, dlogits16, row, 4 * V4 + (int)threadIdx.x, t, scale,
			   cuda_ex2_approx(fmaf(xt, LOG2E_F, -ll)));
}

template <typename TL>
static void s_crossentropy(float *losses, float *lse, float *dlogits, uint16_t *dlogits16, const TL *logits,
                           const int32_t *targets, int N, int V, int ld, float scale, cudaStream_t stream)
{
	bf16 *d16 = dlogits16 ? s_b16(dlogits16) : NULL;
	if (ld % 4 == 0 && V / 4 <= CE_CACHE * CE_BLOCK) {
		/* as few whole warps as hold the row: CE_BLOCK at GPT-2's
		 * vocabulary, one warp for a byte-level one */
		int threads = (V / 4 + CE_CACHE - 1) / CE_CACHE;
		threads = (threads + WARP - 1) / WARP * WARP;
		threads = threads < WARP ? WARP : threads;
		k_crossentropy_cached<TL><<<(unsigned)N, (unsigned)threads, 0, stream>>>(
			losses, lse, dlogits, d16, logits, targets, V, ld, scale);
	} else {
		k_crossentropy_forward<TL><<<(unsigned)N, CE_BLOCK, 0, stream>>>(losses, lse, dlogits, d16,
										  logits, targets, V, ld, scale);
	}
	CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_crossentropy_forward(float *losses, float *lse, float *dlogits,
                                          uint16_t *dlogits16, const float *logits,
                                          const int32_t *targets, int N, int V, int ld, float scale,
                                          cudaStream_t stream)
{
	s_crossentropy(losses, lse, dlogits, dlogits16, logits, targets, N, V, ld, scale, stream);
}

extern "C" void cuda_crossentropy_forward16(float *losses, float *lse, float *dlogits,
                                            uint16_t *dlogits16, const uint16_t *logits16,
                                            const int32_t *targets, int N, int V, int ld, float scale,
                                            cudaStream_t stream)
{
	s_crossentropy(losses, lse, dlogits, dlogits16, reinterpret_cast<const bf16 *>(logits16), targets, N,
		       V, ld, scale, stream);
}

#define MEAN_BLOCK 1024

__global__ void k_mean(float *out, const float *x, int n)
{
	__shared__ double sh[MEAN_BLOCK];
	double s = 0.0;
	for (int i = threadIdx.x; i < n; i += MEAN_BLOCK)
		s += (double)x[i];
	sh[threadIdx.x] = s;
	__syncthreads();
	for (int o = MEAN_BLOCK / 2; o > 0; o /= 2) {
		if ((int)threadIdx.x < o)
			sh[threadIdx.x] += sh[threadIdx.x + o];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		*out = (float)(sh[0] / n);
}

extern "C" void cuda_mean(float *out, const float *x, int n, cudaStream_t stream)
{
	k_mean<<<1, MEAN_BLOCK, 0, stream>>>(out, x, n);
	CUDA_CHECK_LAUNCH();
}
