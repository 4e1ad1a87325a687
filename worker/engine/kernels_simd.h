/*
 * kernels_simd: the vectorizable building blocks the C kernels share
 * (kernels.c for GPT-2, kernels_llama.c for Llama): an exp that GCC
 * vectorizes, and lane-ordered sums, dots and maxima whose result does not
 * depend on the vector width or thread count (kernels.h says why). Static
 * inline, private to worker/engine/.
 */
#ifndef RINGMASTER_ENGINE_KERNELS_SIMD_H
#define RINGMASTER_ENGINE_KERNELS_SIMD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/*
 * The hot kernels are compiled three times (AVX-512, AVX2+FMA, baseline) and
 * picked at load time by the CPU (GCC function multi-versioning). Results
 * can differ in the last bits between those CPUs (FMA contraction), never
 * between runs or thread counts on one machine.
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define KERNEL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KERNEL_CLONES
#endif

#define LANES 16
#define COL_BLOCK 64 /* columns per task in column reductions */

/* exp(x) to about 1 ulp for x in [-87, 88] (clamped outside; NaN stays NaN);
 * vectorizable, unlike libm's expf without -ffast-math. */
static inline float s_expf(float x)
{
	x = x < -87.0f ? -87.0f : x;
	x = x > 88.0f ? 88.0f : x;
	/* x = k ln2 + r, |r| <= ln2/2; adding and removing 1.5 * 2^23 rounds to an integer */
	float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
	float r = x - k * 0.693145751953125f;
	r = r - k * 1.428606765330187e-6f;
	float p = 1.0f / 720.0f;
	p = p * r + 1.0f / 120.0f;
	p = p * r + 1.0f / 24.0f;
	p = p * r + 1.0f / 6.0f;
	p = p * r + 0.5f;
	p = p * r + 1.0f;
	p = p * r + 1.0f;
	int32_t ki = (int32_t)(k == k ? k : 0.0f);
	uint32_t bits = (uint32_t)(ki + 127) << 23;
	float scale;
	memcpy(&scale, &bits, sizeof scale);
	return p * scale;
}

static inline float s_lanes_total(const float *acc)
{
	float s = 0.0f;
	for (int k = 0; k < LANES; k++)
		s += acc[k];
	return s;
}

static inline float s_sum(const float *x, int n)
{
	float acc[LANES] = {0};
	int i = 0;
	for (; i + LANES <= n; i += LANES)
		for (int k = 0; k < LANES; k++)
			acc[k] += x[i + k];
	for (int k = 0; i < n; i++, k++)
		acc[k] += x[i];
	return s_lanes_total(acc);
}

static inline float s_dot(const float *a, const float *b, int n)
{
	float acc[LANES] = {0};
	int i = 0;
	for (; i + LANES <= n; i += LANES)
		for (int k = 0; k < LANES; k++)
			acc[k] += a[i + k] * b[i + k];
	for (int k = 0; i < n; i++, k++)
		acc[k] += a[i] * b[i];
	return s_lanes_total(acc);
}

static inline float s_max(const float *x, int n)
{
	float acc[LANES];
	for (int k = 0; k < LANES; k++)
		acc[k] = -INFINITY;
	int i = 0;
	for (; i + LANES <= n; i += LANES)
		for (int k = 0; k < LANES; k++)
			acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
	for (int k = 0; i < n; i++, k++)
		acc[k] = x[i] > acc[k] ? x[i] : acc[k];
	float m = -INFINITY;
	for (int k = 0; k < LANES; k++)
		m = acc[k] > m ? acc[k] : m;
	return m;
}

#endif
