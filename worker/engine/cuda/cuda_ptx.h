/*
 * cuda_ptx: PTX the engine's .cu files use directly where CUDA C++ has no
 * function that compiles to it, each with the hook cudaemu (tests/cudaemu)
 * replaces it by on the CPU. Device code only; include from .cu files.
 */
#ifndef RINGMASTER_ENGINE_CUDA_PTX_H
#define RINGMASTER_ENGINE_CUDA_PTX_H

#include <math.h>

/* 2^x by the special-function unit alone: ex2.approx.ftz, within 2 ulp,
 * subnormal results flushed to 0 (probabilities that small may be). The
 * accurate exp2f adds range handling around the same instruction. */
__device__ __forceinline__ float cuda_ex2_approx(float x)
{
#ifdef CUDAEMU_EX2_APPROX
	return CUDAEMU_EX2_APPROX(x);
#else
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
	return y;
#endif
}

#endif
