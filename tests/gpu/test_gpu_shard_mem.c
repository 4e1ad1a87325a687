/*
 * test_gpu_shard_mem: shard_mem_cuda, the device-memory shard_mem_t of
 * worker/shard.h: alloc returns zeroed device memory (and NULL, not a crash,
 * for an impossible size), add sums elementwise (exact: one fp32 add per
 * element, the host version's arithmetic), zero clears, free accepts NULL.
 * Skips (exit 77) with "no CUDA GPU: ...; skipping" where there is no GPU.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "shard_mem_cuda.h"

static int n_failed;

static void expect_true(const char *what, int ok)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
		n_failed++;
}

int main(void)
{
	gpu_probe_or_skip("gpu-shard-mem");
	const shard_mem_t *mem = &shard_mem_cuda;
	const size_t n = 1000003;
	float *a = mem->alloc(n * sizeof(float)), *b = mem->alloc(n * sizeof(float));
	expect_true("alloc gives device memory", a && b);
	if (!a || !b)
		return 1;
	float *h = malloc(n * sizeof(float)), *x = rand_floats(n, 1), *y = rand_floats(n, 1);
	gpu_get(h, a, n * sizeof(float));
	int zero = 1;
	for (size_t i = 0; i < n; i++)
		zero &= h[i] == 0.0f;
	expect_true("alloc zeroes", zero);
	gpu_must(cudaMemcpy(a, x, n * sizeof(float), cudaMemcpyHostToDevice), "upload");
	gpu_must(cudaMemcpy(b, y, n * sizeof(float), cudaMemcpyHostToDevice), "upload");
	mem->add(a, b, n);
	gpu_get(h, a, n * sizeof(float));
	int exact = 1;
	for (size_t i = 0; i < n; i++)
		exact &= h[i] == x[i] + y[i];
	expect_true("add: a[i] + b[i] exactly", exact);
	mem->zero(a, n / 2);
	gpu_get(h, a, n * sizeof(float));
	int half = 1;
	for (size_t i = 0; i < n; i++)
		half &= i < n / 2 ? h[i] == 0.0f : h[i] == x[i] + y[i];
	expect_true("zero clears exactly the first n floats", half);
	expect_true("alloc of an impossible size returns NULL", mem->alloc((size_t)1 << 62) == NULL);
	mem->free(a);
	mem->free(b);
	mem->free(NULL);
	expect_true("no CUDA error left behind", cudaGetLastError() == cudaSuccess);
	free(h), free(x), free(y);
	printf("gpu-shard-mem: %d failed\n", n_failed);
	return n_failed ? 1 : 0;
}
