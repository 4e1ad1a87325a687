/*
 * modelcpu: the CPU models' shared memory, streaming and GEMM helpers (see
 * modelcpu.h). Moved here unchanged from gpt2.c and llama.c, which had
 * each their copy.
 */
#include "modelcpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sysexits.h>
#include <unistd.h>

#include "kernels.h"

#define HUGE_PAGE (2u << 20)

void *modelcpu_alloc(size_t bytes)
{
	if (bytes < HUGE_PAGE) {
		size_t rounded = (bytes + 63) / 64 * 64;
		return aligned_alloc(64, rounded ? rounded : 64);
	}
	size_t rounded = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
	void *p = aligned_alloc(HUGE_PAGE, rounded);
#ifdef MADV_HUGEPAGE
	if (p)
		(void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
	return p;
}

double modelcpu_available_bytes(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	if (f) {
		char line[256];
		unsigned long long kib;
		while (fgets(line, sizeof line, f)) {
			if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
				fclose(f);
				return (double)kib * 1024.0;
			}
		}
		fclose(f);
	}
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	return pages > 0 && page > 0 ? (double)pages * (double)page : 1e18;
}

_Noreturn void modelcpu_fatal(const char *what)
{
	fprintf(stderr, "ringworker: fatal: %s\n", what);
	exit(EX_SOFTWARE);
}

size_t modelcpu_param_bytes(const modelcpu_params_t *p, size_t max_range)
{
	size_t n16 = p->mode == MODEL_STREAM_ALL ? max_range : p->n_params;
	return (p->params ? p->n_params * sizeof(float) : 0) + (p->params16 ? n16 * sizeof(uint16_t) : 0);
}

size_t modelcpu_grad_bytes(const modelcpu_params_t *p)
{
	return p->grads ? p->n_params * sizeof(float) : 0;
}

void modelcpu_zero_grad(modelcpu_params_t *p)
{
	float *g = p->grads;
	if (!g)
		return;
	size_t n = p->n_params;
#pragma omp parallel for schedule(static)
	for (size_t i = 0; i < n; i++)
		g[i] = 0.0f;
}

void modelcpu_seq_start(modelcpu_params_t *p, const model_range_t *seq, int n)
{
	p->seq = seq;
	p->seq_n = n;
	p->seq_pos = 0;
}

const float *modelcpu_fetch(modelcpu_params_t *p, model_range_t r, const char *who)
{
	if (p->mode != MODEL_STREAM_ALL)
		return p->params + r.lo;
	if (p->held || p->seq_pos >= p->seq_n || p->seq[p->seq_pos].lo != r.lo ||
	    p->seq[p->seq_pos].hi != r.hi) {
		char what[96];
		snprintf(what, sizeof what, "%s: parameters fetched out of order", who);
		modelcpu_fatal(what);
	}
	p->seq_pos++;
	model_range_t next = p->seq_pos < p->seq_n ? p->seq[p->seq_pos] : (model_range_t){0, 0};
	const float *f = p->stream.fetch(p->stream.ctx, r, next);
	p->held = f;
	p->held_n = r.hi - r.lo;
	if (p->params16)
		kernel_to_bf16(p->params16, f, p->held_n);
	return f;
}

void modelcpu_release(modelcpu_params_t *p, const float *params)
{
	if (p->mode != MODEL_STREAM_ALL)
		return;
	p->stream.release(p->stream.ctx, params);
	p->held = NULL;
}

float *modelcpu_grad_begin(modelcpu_params_t *p, model_range_t r)
{
	if (p->mode == MODEL_DENSE)
		return p->grads + r.lo;
	return p->stream.grad_begin(p->stream.ctx, r);
}

void modelcpu_grad_end(modelcpu_params_t *p, float *g, model_range_t r)
{
	if (p->mode != MODEL_DENSE)
		p->stream.grad_end(p->stream.ctx, g, r);
}

/* The bf16 copy of B when B points into parameters that have one. */
static const uint16_t *s_bf16_param(const modelcpu_params_t *p, const float *B)
{
	uintptr_t b = (uintptr_t)B;
	uintptr_t lo = (uintptr_t)(p->mode == MODEL_STREAM_ALL ? p->held : p->params);
	size_t n = p->mode == MODEL_STREAM_ALL ? p->held_n : p->n_params;
	if (lo && b >= lo && b < lo + n * sizeof(float))
		return p->params16 + (b - lo) / sizeof(float);
	return NULL;
}

void modelcpu_gemm(const modelcpu_params_t *p, matmul_cache_t *mm, uint16_t *a16, uint16_t *b16,
                   int M, int N, int K, const float *A, int64_t lda, bool trans_a, const float *B,
                   bool trans_b, const float *bias, float *C, int64_t ldc, bool accumulate)
{
	if (!p->params16) {
		matmul_run_ld(mm, M, N, K, A, lda, trans_a, B, trans_b, bias, C, ldc, accumulate);
		return;
	}
	if (trans_a)
		kernel_to_bf16_transposed(a16, A, (size_t)K, (size_t)M, lda ? (size_t)lda : (size_t)M);
	else if (lda && lda != K)
		kernel_to_bf16_rows(a16, A, (size_t)M, (size_t)K, (size_t)lda);
	else
		kernel_to_bf16(a16, A, (size_t)M * K);
	const uint16_t *bp = s_bf16_param(p, B);
	if (!bp) {
		kernel_to_bf16(b16, B, (size_t)K * N);
		bp = b16;
	}
	matmul_run_ld(mm, M, N, K, a16, 0, false, bp, trans_b, bias, C, ldc, accumulate);
}
