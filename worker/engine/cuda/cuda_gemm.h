/*
 * cuda_gemm: the GPU engine's GEMMs through cuBLASLt: bf16 operands, fp32
 * accumulation, fp32 or bf16 output, row-major like the CPU engine's
 * matmul.h; with bf16 output, GELU or GELU's backward can ride in the
 * GEMM's epilogue (the MLP's two big elementwise passes, which otherwise
 * read and write the (N, 4C) activations once more each).
 *
 * The engine's tensors are row-major and its linear weights are stored
 * (in, out) as in HF's Conv1D; cuBLASLt is column-major. A row-major
 * C (M, N) = A (M, K) @ B (K, N) is the column-major C^T = B^T A^T, so each
 * call swaps the operands and passes the same memory with the same leading
 * dimensions: no copy, no transpose kernel. One cuda_gemm_t per model holds
 * the cuBLASLt handle, a 32 MiB workspace (what NVIDIA recommends for
 * Hopper) and a cache of the algorithm chosen for each distinct problem
 * (the heuristic query costs tens of microseconds).
 *
 * Determinism: for a given problem the cache always hands back the same
 * algorithm, and cuBLASLt runs a given algorithm with the same reduction
 * order every time on GPUs of one architecture (its split-K schemes reduce
 * in a fixed order: the in-place one sequences its partial sums with
 * counters, the others reduce in the workspace), so results repeat bit for
 * bit. The workspace is used by one stream at a time (the model's).
 */
#ifndef RINGMASTER_ENGINE_CUDA_GEMM_H
#define RINGMASTER_ENGINE_CUDA_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuda_gemm cuda_gemm_t;

/* What happens to each element x of the product (+ bias) on its way out;
 * the GELU ones need bf16 output (C16) and an aux matrix. */
typedef enum {
	CUDA_GEMM_EPI_NONE = 0, /* C = x */
	CUDA_GEMM_EPI_GELU,     /* aux = x (GELU's input, kept for backward), C = gelu(x) */
	CUDA_GEMM_EPI_DGELU,    /* C = x * gelu'(aux): GELU's backward, no bias */
} cuda_gemm_epi_t;

/* A handle, its workspace and an empty cache, for work on `stream`
 * (borrowed; must outlive the cuda_gemm_t). NULL and one line in err when
 * cuBLASLt or the workspace cannot be had. */
cuda_gemm_t *cuda_gemm_create(cudaStream_t stream, char *err, size_t errlen);

/* Free everything; accepts NULL. */
void cuda_gemm_free(cuda_gemm_t *g);

/* One problem: see cuda_gemm_run. */
typedef struct {
	int M, N, K;
	const uint16_t *A; /* bf16: (M, K) row-major, or (K, M) when trans_a */
	int64_t lda;       /* row stride of A as stored; 0: dense (K, or M when trans_a) */
	bool trans_a;
	const uint16_t *B; /* bf16: (K, N) row-major, or (N, K) when trans_b */
	int64_t ldb;       /* 0: dense (N, or K when trans_b) */
	bool trans_b;
	float *C;          /* fp32 (M, N); NULL when C16 is the output */
	uint16_t *C16;     /* bf16 (M, N) output instead of C (one product, no accumulate) */
	int64_t ldc;       /* 0: dense (N); C16's and aux's too */
	const float *bias; /* fp32 (N), added to every row, with C; NULL: none */
	const uint16_t *bias16; /* bf16 (N), the same with C16 (cuBLASLt's bias has D's type) */
	cuda_gemm_epi_t epi;    /* with C16 only */
	uint16_t *aux;     /* bf16 (M, N), rows ldc apart: GELU's input, written by EPI_GELU,
			      read by EPI_DGELU; ldc a multiple of 8 */
	float alpha;       /* scales op(A) @ op(B) (set it: 0 gives C = [bias] [+ C]) */
	bool accumulate;   /* C += ... instead of C = ... */
	const float *C_in; /* with accumulate and one product: C = C_in + ..., C_in laid
			      out as C and not overlapping it (a residual kept apart);
			      NULL: C itself */
	int batch;         /* 0 or 1: one product; more: strided batch */
	int64_t stride_a, stride_b, stride_c; /* elements between batch members */
} cuda_gemm_args_t;

/*
 * C = alpha * op(A) @ op(B) [+ bias] [+ C or C_in], or C16 = epi(alpha *
 * op(A) @ op(B) [+ bias16]), enqueued on the stream. When cuBLASLt has no
 * algorithm with the epilogue (bias, GELU) the product runs without it and
 * a kernel applies it after (with C16: to the bf16-rounded product); with
 * none at all the product goes to cuBLAS's cublasGemmStridedBatchedEx
 * (cuda_gemm.cu). Exits through CUDA_EXIT_DEVICE with "cuBLASLt matmul
 * failed: <status>" (or cuBLAS's) when the library fails (a programming or
 * device error), and through CUDA_EXIT_MISUSE when C16 is combined with
 * accumulate or a batch, an epilogue is asked without C16, or C and C16
 * are both or neither given.
 */
void cuda_gemm_run(cuda_gemm_t *g, const cuda_gemm_args_t *a);

/* Number of problems whose algorithm is cached (for tests). */
int cuda_gemm_cache_size(const cuda_gemm_t *g);

#ifdef __cplusplus
}
#endif

#endif
