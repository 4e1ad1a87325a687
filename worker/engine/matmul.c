/*
 * matmul: oneDNN matmul primitives cached by shape (see matmul.h).
 *
 * Written against the oneDNN 2.x C API (Debian 12's libdnnl-dev 2.6), where a
 * primitive is made from an operation descriptor (dnnl_matmul_desc_init) and
 * memory descriptors are plain structs. oneDNN is built with the OpenMP
 * runtime, so a primitive uses omp_get_max_threads() threads when it runs.
 *
 * Every primitive is created with the default "strict" floating-point mode,
 * so fp32 GEMMs never drop to bf16 behind our back. Accumulation into C uses
 * the sum post-op (C = C + A @ B), which is an elementwise add after the
 * GEMM and keeps results deterministic.
 *
 * bf16 where oneDNN has no bf16 matmul (CPUs without AVX-512, or under
 * ONEDNN_MAX_CPU_ISA=AVX2): the cache widens instead. Each run converts the
 * bf16 operands to fp32 scratch buffers laid out with the same strides and
 * runs an fp32 primitive on them. That is the same arithmetic: a product of
 * two bf16 values (8-bit significands) is exact in fp32, and the sums are
 * fp32 either way; only the order of the sums may differ, as it does
 * between oneDNN's kernels for different CPUs anyway. The conversion costs
 * O(MK + KN) against the GEMM's O(MNK).
 */
#include "matmul.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include <dnnl.h>
#include <omp.h>

#if DNNL_VERSION_MAJOR != 2
#error "worker/engine/matmul.c is written for the oneDNN 2.x C API (Debian 12: libdnnl-dev 2.6)"
#endif

typedef struct {
	int M, N, K;
	int64_t lda, ldc;
	bool trans_a, trans_b, has_bias, accumulate;
	dnnl_primitive_t prim;
	dnnl_memory_t src, weights, bias, dst;
} matmul_entry_t;

struct matmul_cache {
	bool bf16;
	bool widen; /* bf16 operands run as fp32 (no bf16 matmul on this CPU) */
	float *wide[2]; /* widen: A's and B's fp32 copies */
	size_t wide_cap[2];
	dnnl_engine_t engine;
	dnnl_stream_t stream;
	matmul_entry_t *entries;
	int n_entries;
	int cap_entries;
};

/* oneDNN failures here are bugs (bad shapes) or a broken library: fail loud. */
#define DNNL_CHECK(call)                                                                             \
	do {                                                                                         \
		dnnl_status_t s_status_ = (call);                                                    \
		if (s_status_ != dnnl_success) {                                                     \
			fprintf(stderr, "ringworker: fatal: %s:%d: %s failed with oneDNN status %d\n", \
				__FILE__, __LINE__, #call, (int)s_status_);                          \
			exit(EX_SOFTWARE);                                                                    \
		}                                                                                    \
	} while (0)

/* Whether oneDNN implements a bf16 x bf16 -> f32 matmul on this CPU (it
 * does not below AVX-512, or under ONEDNN_MAX_CPU_ISA=AVX2). */
static bool s_bf16_supported(dnnl_engine_t engine)
{
	dnnl_dims_t dims = {16, 16}, strides = {16, 1};
	dnnl_memory_desc_t in_md, out_md;
	if (dnnl_memory_desc_init_by_strides(&in_md, 2, dims, dnnl_bf16, strides) != dnnl_success ||
	    dnnl_memory_desc_init_by_strides(&out_md, 2, dims, dnnl_f32, strides) != dnnl_success)
		return false;
	dnnl_matmul_desc_t desc;
	if (dnnl_matmul_desc_init(&desc, &in_md, &in_md, NULL, &out_md) != dnnl_success)
		return false;
	dnnl_primitive_desc_t pd;
	if (dnnl_primitive_desc_create(&pd, &desc, NULL, engine, NULL) != dnnl_success)
		return false;
	dnnl_primitive_desc_destroy(pd);
	return true;
}

matmul_cache_t *matmul_cache_create(bool bf16, char *err, size_t errlen)
{
	matmul_cache_t *c = calloc(1, sizeof *c);
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	c->bf16 = bf16;
	if (dnnl_engine_create(&c->engine, dnnl_cpu, 0) != dnnl_success) {
		snprintf(err, errlen, "cannot create the oneDNN CPU engine");
		goto fail;
	}
	if (dnnl_stream_create(&c->stream, c->engine, dnnl_stream_default_flags) != dnnl_success) {
		snprintf(err, errlen, "cannot create a oneDNN stream");
		goto fail;
	}
	c->widen = bf16 && !s_bf16_supported(c->engine);
	return c;
fail:
	matmul_cache_free(c);
	return NULL;
}

static void s_entry_destroy(matmul_entry_t *e)
{
	dnnl_primitive_destroy(e->prim);
	dnnl_memory_destroy(e->src);
	dnnl_memory_destroy(e->weights);
	dnnl_memory_destroy(e->bias);
	dnnl_memory_destroy(e->dst);
}

void matmul_cache_free(matmul_cache_t *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->n_entries; i++)
		s_entry_destroy(&c->entries[i]);
	free(c->entries);
	free(c->wide[0]);
	free(c->wide[1]);
	if (c->stream)
		dnnl_stream_destroy(c->stream);
	if (c->engine)
		dnnl_engine_destroy(c->engine);
	free(c);
}

int matmul_cache_size(const matmul_cache_t *c)
{
	return c->n_entries;
}

/* A row-major (rows, cols) matrix, or its transpose when `trans` (stored as
 * (cols, rows)), as a 2-D memory descriptor of logical shape (rows, cols).
 * `ld` is the distance between stored rows (cols, or rows when trans, for a
 * dense matrix). */
static void s_md(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, bool trans, int64_t ld,
                 dnnl_data_type_t dt)
{
	dnnl_dims_t dims = {rows, cols};
	dnnl_dims_t strides = {ld, 1};
	if (trans) {
		strides[0] = 1;
		strides[1] = ld;
	}
	DNNL_CHECK(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides));
}

static matmul_entry_t *s_entry_create(matmul_cache_t *c, int M, int N, int K, int64_t lda,
                                      bool trans_a, bool trans_b, bool has_bias, int64_t ldc,
                                      bool accumulate)
{
	if (c->n_entries == c->cap_entries) {
		int cap = c->cap_entries ? 2 * c->cap_entries : 16;
		matmul_entry_t *e = realloc(c->entries, (size_t)cap * sizeof *e);
		if (!e) {
			fprintf(stderr, "ringworker: fatal: out of memory for a oneDNN primitive\n");
			exit(EX_SOFTWARE);
		}
		c->entries = e;
		c->cap_entries = cap;
	}
	matmul_entry_t *e = &c->entries[c->n_entries];
	memset(e, 0, sizeof *e);
	e->M = M;
	e->N = N;
	e->K = K;
	e->lda = lda;
	e->ldc = ldc;
	e->trans_a = trans_a;
	e->trans_b = trans_b;
	e->has_bias = has_bias;
	e->accumulate = accumulate;

	dnnl_data_type_t in_dt = c->bf16 && !c->widen ? dnnl_bf16 : dnnl_f32;
	dnnl_memory_desc_t src_md, wei_md, bias_md, dst_md;
	s_md(&src_md, M, K, trans_a, lda, in_dt);
	s_md(&wei_md, K, N, trans_b, trans_b ? K : N, in_dt);
	s_md(&bias_md, 1, N, false, N, dnnl_f32);
	s_md(&dst_md, M, N, false, ldc, dnnl_f32);

	dnnl_matmul_desc_t desc;
	DNNL_CHECK(dnnl_matmul_desc_init(&desc, &src_md, &wei_md, has_bias ? &bias_md : NULL, &dst_md));
	dnnl_primitive_attr_t attr;
	DNNL_CHECK(dnnl_primitive_attr_create(&attr));
	dnnl_post_ops_t post_ops = NULL;
	if (accumulate) {
		DNNL_CHECK(dnnl_post_ops_create(&post_ops));
		DNNL_CHECK(dnnl_post_ops_append_sum(post_ops, 1.0f));
		DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, post_ops));
	}
	dnnl_primitive_desc_t pd;
	DNNL_CHECK(dnnl_primitive_desc_create(&pd, &desc, attr, c->engine, NULL));
	DNNL_CHECK(dnnl_primitive_create(&e->prim, pd));
	dnnl_primitive_desc_destroy(pd);
	if (post_ops)
		dnnl_post_ops_destroy(post_ops);
	dnnl_primitive_attr_destroy(attr);

	DNNL_CHECK(dnnl_memory_create(&e->src, &src_md, c->engine, DNNL_MEMORY_NONE));
	DNNL_CHECK(dnnl_memory_create(&e->weights, &wei_md, c->engine, DNNL_MEMORY_NONE));
	DNNL_CHECK(dnnl_memory_create(&e->bias, &bias_md, c->engine, DNNL_MEMORY_NONE));
	DNNL_CHECK(dnnl_memory_create(&e->dst, &dst_md, c->engine, DNNL_MEMORY_NONE));
	c->n_entries++;
	return e;
}

/* widen: the stored span of a bf16 operand of `rows` stored rows of
 * `cols` elements, `ld` apart, as fp32 in scratch buffer `which` (the same
 * offsets, so the same strides describe it). */
static const float *s_widen(matmul_cache_t *c, int which, const uint16_t *x, int64_t rows,
                            int64_t cols, int64_t ld)
{
	size_t n = rows > 0 && cols > 0 ? (size_t)((rows - 1) * ld + cols) : 1;
	if (n > c->wide_cap[which]) {
		float *p = realloc(c->wide[which], n * sizeof(float));
		if (!p) {
			fprintf(stderr, "ringworker: fatal: out of memory for an fp32 copy of %zu bf16"
			                " matrix elements\n", n);
			exit(EX_SOFTWARE);
		}
		c->wide[which] = p;
		c->wide_cap[which] = n;
	}
	uint32_t *w = (uint32_t *)c->wide[which];
#pragma omp parallel for schedule(static)
	for (size_t i = 0; i < n; i++)
		w[i] = (uint32_t)x[i] << 16; /* bf16 is the top half of an fp32 */
	return c->wide[which];
}

void matmul_run(matmul_cache_t *c, int M, int N, int K, const void *A, bool trans_a, const void *B,
                bool trans_b, const float *bias, float *C, bool accumulate)
{
	matmul_run_ld(c, M, N, K, A, 0, trans_a, B, trans_b, bias, C, 0, accumulate);
}

void matmul_run_ld(matmul_cache_t *c, int M, int N, int K, const void *A, int64_t lda, bool trans_a,
                   const void *B, bool trans_b, const float *bias, float *C, int64_t ldc,
                   bool accumulate)
{
	if (lda == 0)
		lda = trans_a ? M : K;
	if (ldc == 0)
		ldc = N;
	bool has_bias = bias != NULL;
	matmul_entry_t *e = NULL;
	for (int i = 0; i < c->n_entries; i++) {
		matmul_entry_t *x = &c->entries[i];
		if (x->M == M && x->N == N && x->K == K && x->lda == lda && x->ldc == ldc &&
		    x->trans_a == trans_a && x->trans_b == trans_b && x->has_bias == has_bias &&
		    x->accumulate == accumulate) {
			e = x;
			break;
		}
	}
	if (!e)
		e = s_entry_create(c, M, N, K, lda, trans_a, trans_b, has_bias, ldc, accumulate);

	if (c->widen) {
		A = s_widen(c, 0, A, trans_a ? K : M, trans_a ? M : K, lda);
		B = s_widen(c, 1, B, trans_b ? N : K, trans_b ? K : N, trans_b ? K : N);
	}
	/* oneDNN takes non-const handles; it does not write the inputs. */
	DNNL_CHECK(dnnl_memory_set_data_handle(e->src, (void *)(uintptr_t)A));
	DNNL_CHECK(dnnl_memory_set_data_handle(e->weights, (void *)(uintptr_t)B));
	DNNL_CHECK(dnnl_memory_set_data_handle(e->dst, C));
	dnnl_exec_arg_t args[4] = {
		{DNNL_ARG_SRC, e->src},
		{DNNL_ARG_WEIGHTS, e->weights},
		{DNNL_ARG_DST, e->dst},
		{DNNL_ARG_BIAS, e->bias},
	};
	int n_args = 3;
	if (has_bias) {
		DNNL_CHECK(dnnl_memory_set_data_handle(e->bias, (void *)(uintptr_t)bias));
		n_args = 4;
	}
	DNNL_CHECK(dnnl_primitive_execute(e->prim, c->stream, n_args, args));
	DNNL_CHECK(dnnl_stream_wait(c->stream));
}
