/*
 * shard_mem_cuda: device-memory operations for worker/shard.c (see
 * shard_mem_cuda.h): cudaMalloc + cudaMemset, cudaMemsetAsync, and an
 * elementwise add kernel, each waited for on cudaStreamPerThread.
 */
#include "shard_mem_cuda.h"

#include "cuda_check.h"
#include "cuda_kernels.h"

static void *s_alloc(size_t bytes)
{
	void *p = NULL;
	if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
		(void)cudaGetLastError();
		return NULL;
	}
	CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cudaStreamPerThread));
	CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
	return p;
}

static void s_free(void *p)
{
	if (p)
		CUDA_CHECK(cudaFree(p));
}

static void s_zero(float *p, size_t n)
{
	CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), cudaStreamPerThread));
	CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
}

static void s_add(float *dst, const float *src, size_t n)
{
	cuda_add(dst, src, n, cudaStreamPerThread);
	CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
}

extern "C" const shard_mem_t shard_mem_cuda = {s_alloc, s_free, s_zero, s_add};
