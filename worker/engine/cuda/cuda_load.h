/*
 * cuda_load: device helpers that read fp32 or bf16 tensors as fp32, so
 * that one kernel template serves both element types (the model keeps
 * some activations and gradients in bf16 to halve their traffic, the tests
 * and other callers hand fp32). Device code only; include from .cu files.
 */
#ifndef RINGMASTER_ENGINE_CUDA_LOAD_H
#define RINGMASTER_ENGINE_CUDA_LOAD_H

#include <cuda_bf16.h>

/* One element as fp32. */
__device__ __forceinline__ float cuda_ldf(const float *p)
{
	return *p;
}

__device__ __forceinline__ float cuda_ldf(const __nv_bfloat16 *p)
{
	return __bfloat162float(*p);
}

/* Four adjacent elements as fp32: p 16-byte aligned for fp32, 8 for bf16
 * (one load either way). */
__device__ __forceinline__ float4 cuda_ld4f(const float *p)
{
	return *reinterpret_cast<const float4 *>(p);
}

__device__ __forceinline__ float4 cuda_ld4f(const __nv_bfloat16 *p)
{
	const uint2 u = *reinterpret_cast<const uint2 *>(p);
	const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.x));
	const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.y));
	return make_float4(lo.x, lo.y, hi.x, hi.y);
}

#endif
