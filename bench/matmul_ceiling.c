/*
 * matmul_ceiling: how fast oneDNN's matmul runs on this machine, the ceiling
 * that the training benchmark's "% of matmul ceiling" column divides by.
 *
 * Times C (M, N) = A (M, K) @ B (K, N) with plain row-major layouts (as the
 * engine uses them) in fp32, and in bf16 (bf16 A and B, fp32 C: the engine's
 * bf16 mode), at a few shapes: large squares, where the library is at its
 * best, and one GPT-2 124M MLP GEMM at B*T = 256 rows. Each shape runs
 * `--warmup` untimed and `--repeats` timed executions; the median is reported.
 * Threads: oneDNN's OpenMP runtime, so OMP_NUM_THREADS.
 *
 * Prints one JSON object: per precision the ceiling (the best median GFLOP/s
 * over the shapes) and every measurement with oneDNN's implementation name.
 * Where oneDNN has no bf16 matmul (no AVX-512), the engine widens bf16
 * operands to fp32 (worker/engine/matmul.c), so the bf16 runs are fp32
 * GEMMs too and their implementation name starts with "widened to fp32: ".
 */
#include <dnnl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "benchutil.h"

#define DNNL_CHECK(call)                                                                           \
	do {                                                                                       \
		dnnl_status_t s_ = (call);                                                         \
		if (s_ != dnnl_success) {                                                          \
			fprintf(stderr, "%s:%d: %s failed (oneDNN status %d); is this CPU supported "  \
			                "for this data type?\n", __FILE__, __LINE__, #call, (int)s_);  \
			exit(3);                                                                   \
		}                                                                                  \
	} while (0)

#define MAX_REPEATS 1000

typedef struct {
	int64_t m, n, k;
} shape_t;

typedef struct {
	double median_ms;
	double gflops;
	char impl[64];
} result_t;

static uint16_t f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	u += 0x7FFFu + ((u >> 16) & 1u); /* round to nearest even; inputs are finite */
	return (uint16_t)(u >> 16);
}

static void fill(dnnl_memory_t mem, int64_t n, dnnl_data_type_t dt, uint32_t seed)
{
	void *p;
	DNNL_CHECK(dnnl_memory_get_data_handle(mem, &p));
	uint32_t x = seed * 2654435761u + 1u;
	for (int64_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		float f = (float)(x >> 8) / 16777216.0f - 0.5f;
		if (dt == dnnl_bf16)
			((uint16_t *)p)[i] = f32_to_bf16(f);
		else
			((float *)p)[i] = f;
	}
}

static result_t bench_matmul(dnnl_engine_t eng, dnnl_stream_t st, shape_t s, dnnl_data_type_t in_dt,
                             int warmup, int repeats)
{
	dnnl_memory_desc_t a_md, b_md, c_md;
	dnnl_dims_t a_dims = {s.m, s.k}, b_dims = {s.k, s.n}, c_dims = {s.m, s.n};
	DNNL_CHECK(dnnl_memory_desc_init_by_tag(&a_md, 2, a_dims, in_dt, dnnl_ab));
	DNNL_CHECK(dnnl_memory_desc_init_by_tag(&b_md, 2, b_dims, in_dt, dnnl_ab));
	DNNL_CHECK(dnnl_memory_desc_init_by_tag(&c_md, 2, c_dims, dnnl_f32, dnnl_ab));
	dnnl_matmul_desc_t desc;
	DNNL_CHECK(dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md));
	dnnl_primitive_desc_t pd;
	DNNL_CHECK(dnnl_primitive_desc_create(&pd, &desc, NULL, eng, NULL));
	dnnl_primitive_t prim;
	DNNL_CHECK(dnnl_primitive_create(&prim, pd));

	result_t r;
	const char *impl = NULL;
	DNNL_CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
	snprintf(r.impl, sizeof r.impl, "%s", impl ? impl : "?");

	dnnl_memory_t a, b, c;
	DNNL_CHECK(dnnl_memory_create(&a, &a_md, eng, DNNL_MEMORY_ALLOCATE));
	DNNL_CHECK(dnnl_memory_create(&b, &b_md, eng, DNNL_MEMORY_ALLOCATE));
	DNNL_CHECK(dnnl_memory_create(&c, &c_md, eng, DNNL_MEMORY_ALLOCATE));
	fill(a, s.m * s.k, in_dt, 1);
	fill(b, s.k * s.n, in_dt, 2);

	dnnl_exec_arg_t args[3] = {
		{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c},
	};
	double times[MAX_REPEATS];
	for (int i = 0; i < warmup + repeats; i++) {
		double t0 = bench_now_ms();
		DNNL_CHECK(dnnl_primitive_execute(prim, st, 3, args));
		DNNL_CHECK(dnnl_stream_wait(st));
		if (i >= warmup)
			times[i - warmup] = bench_now_ms() - t0;
	}
	qsort(times, (size_t)repeats, sizeof times[0], bench_cmp_double);
	r.median_ms = repeats % 2 ? times[repeats / 2] : 0.5 * (times[repeats / 2 - 1] + times[repeats / 2]);
	r.gflops = 2.0 * (double)s.m * (double)s.n * (double)s.k / (r.median_ms * 1e-3) / 1e9;

	dnnl_memory_destroy(c);
	dnnl_memory_destroy(b);
	dnnl_memory_destroy(a);
	dnnl_primitive_destroy(prim);
	dnnl_primitive_desc_destroy(pd);
	return r;
}

/* Whether oneDNN has a bf16 x bf16 -> f32 matmul on this CPU. */
static bool bf16_supported(dnnl_engine_t eng)
{
	dnnl_memory_desc_t in_md, out_md;
	dnnl_dims_t dims = {16, 16};
	dnnl_matmul_desc_t desc;
	dnnl_primitive_desc_t pd;
	if (dnnl_memory_desc_init_by_tag(&in_md, 2, dims, dnnl_bf16, dnnl_ab) != dnnl_success ||
	    dnnl_memory_desc_init_by_tag(&out_md, 2, dims, dnnl_f32, dnnl_ab) != dnnl_success ||
	    dnnl_matmul_desc_init(&desc, &in_md, &in_md, NULL, &out_md) != dnnl_success ||
	    dnnl_primitive_desc_create(&pd, &desc, NULL, eng, NULL) != dnnl_success)
		return false;
	dnnl_primitive_desc_destroy(pd);
	return true;
}

static void usage(void)
{
	fprintf(stderr, "usage: matmul_ceiling [--repeats N] [--warmup N]\n"
	                "  times oneDNN matmul in fp32 and bf16; prints JSON\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int repeats = 9, warmup = 2;
	for (int i = 1; i < argc; i++) {
		if (i + 1 < argc && !strcmp(argv[i], "--repeats"))
			repeats = atoi(argv[++i]);
		else if (i + 1 < argc && !strcmp(argv[i], "--warmup"))
			warmup = atoi(argv[++i]);
		else
			usage();
	}
	if (repeats < 1 || repeats > MAX_REPEATS || warmup < 0) {
		fprintf(stderr, "matmul_ceiling: --repeats must be in [1, %d] and --warmup >= 0\n", MAX_REPEATS);
		return 2;
	}

	dnnl_engine_t eng;
	dnnl_stream_t st;
	DNNL_CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
	DNNL_CHECK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));

	static const shape_t shapes[] = {
		{1024, 1024, 1024},
		{2048, 2048, 2048},
		{256, 3072, 768}, /* GPT-2 124M mlp.c_fc at B*T = 256 */
	};
	static const struct {
		const char *name;
		dnnl_data_type_t dt;
	} precisions[] = {{"fp32", dnnl_f32}, {"bf16", dnnl_bf16}};
	const int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
	const bool widen = !bf16_supported(eng);

	printf("{");
	for (int p = 0; p < 2; p++) {
		double best = 0.0;
		printf("%s\n  \"%s\": {\"runs\": [", p ? "," : "", precisions[p].name);
		for (int i = 0; i < n_shapes; i++) {
			const bool wide = p == 1 && widen;
			result_t r = bench_matmul(eng, st, shapes[i], wide ? dnnl_f32 : precisions[p].dt,
			                          warmup, repeats);
			if (wide) {
				char impl[sizeof r.impl];
				snprintf(impl, sizeof impl, "%s", r.impl);
				snprintf(r.impl, sizeof r.impl, "widened to fp32: %.*s",
				         (int)sizeof r.impl - 24, impl);
			}
			if (r.gflops > best)
				best = r.gflops;
			printf("%s\n    {\"m\": %lld, \"n\": %lld, \"k\": %lld, \"median_ms\": %.3f, "
			       "\"gflops\": %.1f, \"impl\": \"%s\"}", i ? "," : "", (long long)shapes[i].m,
			       (long long)shapes[i].n, (long long)shapes[i].k, r.median_ms, r.gflops, r.impl);
			fflush(stdout);
		}
		printf("],\n    \"ceiling_gflops\": %.1f}", best);
	}
	printf("\n}\n");

	dnnl_stream_destroy(st);
	dnnl_engine_destroy(eng);
	return 0;
}
