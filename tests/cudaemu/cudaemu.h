/*
 * cudaemu: runs the GPU engine's CUDA C++ on the CPU, so that its kernels and
 * the model around them are exercised in CI, on machines without a GPU.
 *
 * This is a test harness, not a second engine: the .cu files of
 * worker/engine/cuda are compiled by g++ as they are (cudaemu_launch.py only
 * rewrites `k<<<grid, block, smem, stream>>>(args)` into
 * `cudaemu::launch(k, grid, block, smem, stream)(args)`), with this header
 * included first (-include), and linked against cudaemu_rt.cc (the CUDA
 * runtime calls the engine and the GPU tests make) and cudaemu_blas.cc (the
 * cuBLAS and cuBLASLt calls) instead of NVIDIA's libraries. The real
 * headers from the toolkit give the types and the bf16 conversions.
 *
 * Execution model: device memory is host memory; every launch runs at once
 * and to completion on the calling thread (streams and events are
 * bookkeeping). Each block runs as blockDim threads, each a fiber
 * with its own stack; __syncthreads() parks a fiber until every
 * live thread of its block has arrived, a warp shuffle parks it until its
 * 32 lanes have stored their values. Between barriers the fibers run one
 * after another, in thread order, or in reverse order with
 * CUDAEMU_ORDER=reverse: a missing barrier shows up as a wrong result in
 * one of the two orders, which is why the suite runs both.
 *
 * The fused attention's PTX (mma.sync, ldmatrix, cp.async) is emulated
 * through hooks the kernels call where they would use inline assembly
 * (CUDAEMU_MMA_BF16_16816 and the others below).
 *
 * What it checks beyond the results: launch limits (1024 threads per block,
 * 48 KiB of dynamic shared memory, grid dimensions), a shuffle with a lane
 * of its warp missing or exited, a deadlock at a barrier (threads waiting at
 * different barriers), every cudaMemcpy/cudaMemset range against its
 * allocation, and memory the engine reads before writing: cudaMalloc fills
 * new buffers with 0xff bytes (NaN as floats and bf16), as real device
 * memory holds whatever was there. Each failure is one line on stderr and
 * exit status 3. What it cannot check: races between blocks, the memory
 * model, timing, and the real libraries' own behaviour.
 */
#ifndef RINGMASTER_TESTS_CUDAEMU_H
#define RINGMASTER_TESTS_CUDAEMU_H

#include <cuda_runtime.h>
#include <cuda_bf16.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>

namespace cudaemu {

/* The running thread's coordinates. */
struct coords {
	uint3 thread;
	uint3 block;
	dim3 block_dim;
	dim3 grid_dim;
};

/* The running thread's coordinates, set by the scheduler at every switch
 * (NULL outside a kernel). */
extern const coords *current;
const coords &cur_checked();
static inline const coords &cur()
{
	return current ? *current : cur_checked();
}
void syncthreads();
/* Store 8 bytes for this lane, wait for the warp, read lane `src`'s. */
uint64_t warp_exchange(unsigned mask, uint64_t mine, int src_lane);
int lane();

/* mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 for the calling
 * warp: d (16 x 8, fp32) += a (16 x 16, bf16) @ b (16 x 8, bf16), each
 * lane holding the fragments the PTX ISA assigns it (groupID = lane / 4,
 * tig = lane % 4; a: {row g, cols 2tig..+1}, {row g+8, same}, {row g,
 * cols 2tig+8..+9}, {row g+8, same}, low half first; b: {rows 2tig..+1,
 * col g}, {rows 2tig+8..+9, col g}; d: {row g, cols 2tig..+1}, {row g+8,
 * same}). Every lane of the warp must call it, as on the GPU; the sums
 * are exact products added in double, then rounded once. */
void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]);

/* ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 for the calling warp:
 * lane 8 i + j gives in `row` the address of row j of matrix i (8 bf16, 16
 * bytes, 16-byte aligned); lane l gets in r[i] elements 2 (l % 4) and + 1
 * (the first in the low half) of row l / 4 of matrix i, or with trans of
 * its transpose. Every lane must call it. */
void ldmatrix_x4(uint32_t r[4], const void *row, bool trans);

/* cp.async (4, 8 or 16 bytes, zeros when !valid; src must then lie in a
 * cudaMalloc allocation), commit_group and wait_group: the copies happen at
 * the wait that covers them, not at the call, so a tile read before its
 * wait reads stale bytes; a thread that ends with copies pending fails. */
void cp_async(void *dst, const void *src, size_t bytes, bool valid);
void cp_async_commit();
void cp_async_wait(int newest_pending);

/* Run body once per thread of grid x block; false (and cudaGetLastError set)
 * when the configuration is invalid. */
bool launch_impl(const char *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
		 const std::function<void()> &body);

template <typename T> T shfl_xor(unsigned mask, T v, int lane_mask)
{
	static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
	uint64_t bits = 0;
	memcpy(&bits, &v, sizeof v);
	uint64_t got = warp_exchange(mask, bits, lane() ^ lane_mask);
	T r;
	memcpy(&r, &got, sizeof r);
	return r;
}

template <typename T> T shfl(unsigned mask, T v, int src_lane)
{
	uint64_t bits = 0;
	memcpy(&bits, &v, sizeof v);
	uint64_t got = warp_exchange(mask, bits, src_lane & 31);
	T r;
	memcpy(&r, &got, sizeof r);
	return r;
}

template <typename... P> struct launcher {
	void (*kernel)(P...);
	const char *name;
	dim3 grid, block;
	size_t smem;
	cudaStream_t stream;

	void operator()(P... args) const
	{
		void (*k)(P...) = kernel;
		launch_impl(name, grid, block, smem, stream, [&]() { k(args...); });
	}
};

template <typename... P>
launcher<P...> launch_named(const char *name, void (*kernel)(P...), dim3 grid, dim3 block,
			    size_t smem = 0, cudaStream_t stream = 0)
{
	return launcher<P...>{kernel, name, grid, block, smem, stream};
}

} /* namespace cudaemu */

#define CUDAEMU_LAUNCH(k, ...) cudaemu::launch_named(#k, k, __VA_ARGS__)

/* CUDA's language, on the host. */
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#undef __restrict__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define threadIdx (cudaemu::cur().thread)
#define blockIdx (cudaemu::cur().block)
#define blockDim (cudaemu::cur().block_dim)
#define gridDim (cudaemu::cur().grid_dim)
#define __syncthreads() cudaemu::syncthreads()
#define __shfl_xor_sync(mask, v, m) cudaemu::shfl_xor((mask), (v), (m))
#define __shfl_sync(mask, v, l) cudaemu::shfl((mask), (v), (l))
/* the engine's tensor-core instructions (cuda_flash.cu), emulated */
#define CUDAEMU_MMA_BF16_16816(d, a, b) cudaemu::mma_bf16_16816((d), (a), (b))
#define CUDAEMU_LDMATRIX_X4(r, row, trans) cudaemu::ldmatrix_x4((r), (row), (trans))
#define CUDAEMU_CP_ASYNC(dst, src, bytes, valid) cudaemu::cp_async((dst), (src), (bytes), (valid))
#define CUDAEMU_CP_COMMIT() cudaemu::cp_async_commit()
#define CUDAEMU_CP_WAIT(n) cudaemu::cp_async_wait(n)
#define CUDAEMU_EX2_APPROX(x) exp2f(x) /* the GPU's is within 2 ulp, flushing subnormals */

static inline float rsqrtf(float x)
{
	return 1.0f / sqrtf(x);
}

template <typename T> static inline T __ldg(const T *p)
{
	return *p;
}

#endif
