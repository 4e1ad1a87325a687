/*
 * cuda_kernels_priv: the launch shapes, warp reductions and bf16 helpers
 * the kernels of cuda_kernels.cu and cuda_crossentropy.cu share (see
 * cuda_kernels.cu's top for the conventions: grid-stride elementwise
 * loops, a warp per row or a block per row, xor-butterfly warp sums that
 * leave the same bits in every lane). Private to worker/engine/cuda/;
 * include it from a .cu file only.
 */
#ifndef RINGMASTER_ENGINE_CUDA_KERNELS_PRIV_H
#define RINGMASTER_ENGINE_CUDA_KERNELS_PRIV_H

#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>

#define WARP 32
#define ROW_BLOCK 256  /* threads of the warp-per-row kernels: 8 rows per block */
#define COL_ROWS 256   /* rows per chunk of the column reductions */
#define COL_TILE 32    /* columns per block of the column reductions */
#define COL_LANES 8    /* row lanes per block of the column reductions */
#define CE_BLOCK 512   /* threads per row of cross-entropy */
#define SUMSQ_GRID 512 /* blocks of the sum of squares, fixed */
#define SUMSQ_BLOCK 256

typedef __nv_bfloat16 bf16;

/* a loop over a register array must unroll completely for the array to
 * stay in registers */
#ifdef __CUDACC__
#define CK_UNROLL _Pragma("unroll")
#else
#define CK_UNROLL
#endif

static inline unsigned s_grid(size_t n, int block)
{
	size_t g = (n + (size_t)block - 1) / (size_t)block;
	return (unsigned)(g < 65535u * 16u ? (g ? g : 1) : 65535u * 16u);
}

__device__ __forceinline__ float s_warp_sum(float x)
{
	for (int o = WARP / 2; o > 0; o /= 2)
		x += __shfl_xor_sync(0xffffffffu, x, o);
	return x;
}

__device__ __forceinline__ float s_warp_max(float x)
{
	for (int o = WARP / 2; o > 0; o /= 2)
		x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
	return x;
}

static inline bf16 *s_b16(uint16_t *p)
{
	return reinterpret_cast<bf16 *>(p);
}

/* a, b, c, d rounded to bf16 into p[0..3] with two 4-byte stores (p 8-byte aligned) */
__device__ __forceinline__ void s_store4_bf16(bf16 *p, float a, float b, float c, float d)
{
	__nv_bfloat162 *q = reinterpret_cast<__nv_bfloat162 *>(p);
	q[0] = __floats2bfloat162_rn(a, b);
	q[1] = __floats2bfloat162_rn(c, d);
}

#endif
