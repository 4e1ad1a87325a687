/*
 * gpu_util: what the GPU tests share: the probe that skips (exit 77, meson's
 * SKIP) with one clear line where no CUDA GPU is usable, device buffers
 * filled from host arrays, random inputs, bf16 on the host, and the
 * normwise relative error every bound in these tests is stated in:
 *
 *   rel_err(gpu, ref) = max_i |gpu_i - ref_i| / max_i |ref_i|
 *
 * (the largest error relative to the largest reference value, so that
 * near-zero entries do not make the measure meaningless). Include it in one
 * test .c file (its helpers are static).
 */
#ifndef RINGMASTER_TESTS_GPU_UTIL_H
#define RINGMASTER_TESTS_GPU_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#define GPU_TEST_SKIP 77

/* Exit 77 with "no CUDA GPU: <reason>; skipping" unless a device works. */
static inline void gpu_probe_or_skip(const char *test)
{
	int n = 0;
	cudaError_t rc = cudaGetDeviceCount(&n);
	if (rc == cudaSuccess && n == 0)
		rc = cudaErrorNoDevice;
	if (rc == cudaSuccess)
		rc = cudaFree(0);
	if (rc != cudaSuccess) {
		printf("%s: no CUDA GPU: %s; skipping\n", test, cudaGetErrorString(rc));
		exit(GPU_TEST_SKIP);
	}
	struct cudaDeviceProp prop;
	if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
		printf("%s: on %s (sm_%d%d)\n", test, prop.name, prop.major, prop.minor);
}

static inline void gpu_must(cudaError_t rc, const char *what)
{
	if (rc != cudaSuccess) {
		fprintf(stderr, "CUDA error in the test (%s): %s\n", what, cudaGetErrorString(rc));
		exit(1);
	}
}

/* A device copy of n bytes of host memory (zeroed when src is NULL),
 * complete when this returns: cudaMemset may return before it is done, and
 * the engine's kernels run on a non-blocking stream that does not wait for
 * it (a streamed gradient bucket could be summed into before it is
 * zeroed). */
static inline void *gpu_dup(const void *src, size_t bytes)
{
	void *p = NULL;
	gpu_must(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
	if (src)
		gpu_must(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice), "upload");
	else
		gpu_must(cudaMemset(p, 0, bytes), "memset");
	gpu_must(cudaDeviceSynchronize(), "gpu_dup");
	return p;
}

static inline void gpu_get(void *dst, const void *src, size_t bytes)
{
	gpu_must(cudaDeviceSynchronize(), "kernel");
	gpu_must(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "download");
}

static uint64_t s_rng = 0x9e3779b97f4a7c15ull;

static inline uint32_t rng_u32(void)
{
	s_rng ^= s_rng >> 12;
	s_rng ^= s_rng << 25;
	s_rng ^= s_rng >> 27;
	return (uint32_t)((s_rng * 0x2545F4914F6CDD1DULL) >> 32);
}

static inline float rng_normal(void)
{
	double u1 = ((double)rng_u32() + 1.0) / 4294967297.0, u2 = (double)rng_u32() / 4294967296.0;
	return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

/* n floats of normal(0, std) (malloc'ed) */
static inline float *rand_floats(size_t n, float std)
{
	float *x = malloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		x[i] = rng_normal() * std;
	return x;
}

static inline float bf16_to_float(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static inline double rel_err(const float *gpu, const float *ref, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)gpu[i] - (double)ref[i]);
		if (!(d <= num)) /* NaN counts as an infinite error */
			num = isnan(d) ? INFINITY : d;
		if (fabs((double)ref[i]) > den)
			den = fabs((double)ref[i]);
	}
	return num / (den > 0 ? den : 1e-30);
}

/* rel_err of a bf16 device result against an fp32 host reference */
static inline double rel_err_bf16(const uint16_t *gpu16, const float *ref, size_t n)
{
	float *g = malloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		g[i] = bf16_to_float(gpu16[i]);
	double e = rel_err(g, ref, n);
	free(g);
	return e;
}

#endif
