/*
 * cuda_gemm: row-major bf16 GEMMs with fp32 accumulation on cuBLASLt (see
 * cuda_gemm.h for the mapping to column-major and the determinism notes).
 *
 * Per call: build the operation and layout descriptors (host-only, cheap),
 * look the problem up in the algorithm cache (key: shapes, strides,
 * transposes, output type, bias, epilogue, accumulate, batch, and the
 * alignment of every pointer, since cuBLASLt's heuristic picks kernels by
 * it), run. When cuBLASLt has no algorithm with the epilogue (bias, GELU or
 * its backward) for a problem, the product runs without it and a small
 * kernel applies it after (k_add_bias, or cuda_gemm_epilogue16 for bf16
 * output); the decision is cached with the algorithm. When cuBLASLt has
 * no algorithm at all (an unusual shape or alignment), the problem goes to
 * cuBLAS's cublasGemmStridedBatchedEx (same types, same column-major
 * mapping), which takes any shape; that decision is cached too, so a shape
 * always runs the same code.
 */
#include "cuda_gemm.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_kernels.h"

#define GEMM_WORKSPACE_BYTES (32u << 20)
#define GEMM_CACHE_MAX 512

typedef struct {
	int M, N, K;
	int64_t lda, ldb, ldc;
	int trans_a, trans_b, has_bias, accumulate, batch, c16, epi;
	int64_t stride_a, stride_b, stride_c;
	uint32_t align_a, align_b, align_c, align_cin, align_bias, align_aux;
} gemm_key_t;

typedef struct {
	gemm_key_t key;
	cublasLtMatmulAlgo_t algo;
	bool epilogue_in_lt; /* bias / GELU applied by cuBLASLt, else by our kernel after */
	bool use_cublas; /* no cuBLASLt algorithm: cublasGemmStridedBatchedEx */
} gemm_entry_t;

struct cuda_gemm {
	cublasLtHandle_t lt;
	cublasHandle_t blas; /* created on first need */
	cudaStream_t stream;
	void *workspace;
	gemm_entry_t *cache; /* (GEMM_CACHE_MAX) */
	int n_cache;
};

static void s_fatal_status(const char *what, cublasStatus_t st, const char *file, int line)
{
	fprintf(stderr, "ringworker: fatal: cuBLASLt %s failed: %s (%d) at %s:%d\n", what,
		cublasLtGetStatusString(st), (int)st, file, line);
	exit(CUDA_EXIT_DEVICE);
}

#define LT_CHECK(what, call)                                                  \
	do {                                                                  \
		cublasStatus_t lt_st_ = (call);                               \
		if (lt_st_ != CUBLAS_STATUS_SUCCESS)                          \
			s_fatal_status(what, lt_st_, __FILE__, __LINE__);     \
	} while (0)

extern "C" cuda_gemm_t *cuda_gemm_create(cudaStream_t stream, char *err, size_t errlen)
{
	cuda_gemm_t *g = (cuda_gemm_t *)calloc(1, sizeof *g);
	if (!g) {
		snprintf(err, errlen, "out of host memory for the cuBLASLt handle");
		return NULL;
	}
	g->stream = stream;
	g->cache = (gemm_entry_t *)calloc(GEMM_CACHE_MAX, sizeof *g->cache);
	if (!g->cache) {
		snprintf(err, errlen, "out of host memory for the cuBLASLt algorithm cache");
		goto fail;
	}
	{
		cublasStatus_t st = cublasLtCreate(&g->lt);
		if (st != CUBLAS_STATUS_SUCCESS) {
			g->lt = NULL;
			snprintf(err, errlen, "cuBLASLt initialisation failed: %s",
				 cublasLtGetStatusString(st));
			goto fail;
		}
	}
	{
		cudaError_t rc = cudaMalloc(&g->workspace, GEMM_WORKSPACE_BYTES);
		if (rc != cudaSuccess) {
			g->workspace = NULL;
			(void)cudaGetLastError();
			snprintf(err, errlen, "out of GPU memory: need %u MiB for the cuBLASLt workspace: %s",
				 GEMM_WORKSPACE_BYTES >> 20, cudaGetErrorString(rc));
			goto fail;
		}
	}
	return g;
fail:
	cuda_gemm_free(g);
	return NULL;
}

extern "C" void cuda_gemm_free(cuda_gemm_t *g)
{
	if (!g)
		return;
	if (g->workspace)
		cudaFree(g->workspace);
	if (g->lt)
		cublasLtDestroy(g->lt);
	if (g->blas)
		cublasDestroy(g->blas);
	free(g->cache);
	free(g);
}

extern "C" int cuda_gemm_cache_size(const cuda_gemm_t *g)
{
	return g->n_cache;
}

/* The largest power of two (at most 256) that divides the address. */
static uint32_t s_align(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	uint32_t al = 256;
	while (al > 1 && a % al != 0)
		al /= 2;
	return al;
}

/* bias (N) added to each of the M rows of C (row stride ldc) */
__global__ void k_add_bias(float *C, const float *bias, int M, int N, int64_t ldc, int batch,
                           int64_t stride_c)
{
	size_t total = (size_t)batch * M * N;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		int n = (int)(i % (size_t)N);
		size_t r = i / (size_t)N;
		int m = (int)(r % (size_t)M);
		size_t b = r / (size_t)M;
		C[b * stride_c + (size_t)m * ldc + n] += bias[n];
	}
}

static void s_set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void *v,
                  size_t size)
{
	LT_CHECK("descriptor attribute", cublasLtMatmulDescSetAttribute(d, attr, v, size));
}

static cublasLtMatrixLayout_t s_layout(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld,
                                       int batch, int64_t stride)
{
	cublasLtMatrixLayout_t l;
	LT_CHECK("matrix layout", cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld));
	if (batch > 1) {
		int32_t bc = batch;
		LT_CHECK("matrix layout",
			 cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
		LT_CHECK("matrix layout",
			 cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
							  sizeof stride));
	}
	return l;
}

/* The best algorithm for the descriptors, or false when cuBLASLt has none. */
static bool s_heuristic(cuda_gemm_t *g, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                        cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, const gemm_key_t *k,
                        cublasLtMatmulAlgo_t *ret_algo)
{
	cublasLtMatmulPreference_t pref;
	LT_CHECK("preference", cublasLtMatmulPreferenceCreate(&pref));
	uint64_t ws = GEMM_WORKSPACE_BYTES;
	LT_CHECK("preference", cublasLtMatmulPreferenceSetAttribute(
				       pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
	/* cuBLASLt's operand A is our B and its B our A (cuda_gemm.h) */
	LT_CHECK("preference", cublasLtMatmulPreferenceSetAttribute(
				       pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k->align_b,
				       sizeof k->align_b));
	LT_CHECK("preference", cublasLtMatmulPreferenceSetAttribute(
				       pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k->align_a,
				       sizeof k->align_a));
	LT_CHECK("preference", cublasLtMatmulPreferenceSetAttribute(
				       pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k->align_cin,
				       sizeof k->align_cin));
	LT_CHECK("preference", cublasLtMatmulPreferenceSetAttribute(
				       pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k->align_c,
				       sizeof k->align_c));
	cublasLtMatmulHeuristicResult_t res;
	int n_res = 0;
	cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g->lt, op, la, lb, lc, lc, pref, 1, &res, &n_res);
	cublasLtMatmulPreferenceDestroy(pref);
	/* NOT_SUPPORTED (or INVALID_VALUE for an epilogue this build lacks):
	 * the caller tries without the epilogue, then cuBLAS, which reports a
	 * problem that is really invalid */
	if (st != CUBLAS_STATUS_SUCCESS || n_res == 0)
		return false;
	*ret_algo = res.algo;
	return true;
}

/* The same column-major problem on cuBLAS (any shape); the bias, if any,
 * is added by k_add_bias afterwards. */
static void s_run_cublas(cuda_gemm_t *g, const cuda_gemm_args_t *a, cublasOperation_t op_b,
                         cublasOperation_t op_a, int64_t lda, int64_t ldb, int64_t ldc, int batch,
                         float alpha, float beta)
{
	cublasStatus_t st;
	if (!g->blas) {
		st = cublasCreate(&g->blas);
		if (st != CUBLAS_STATUS_SUCCESS)
			s_fatal_status("(cuBLAS) create", st, __FILE__, __LINE__);
		st = cublasSetStream(g->blas, g->stream);
		if (st != CUBLAS_STATUS_SUCCESS)
			s_fatal_status("(cuBLAS) set stream", st, __FILE__, __LINE__);
	}
	st = cublasGemmStridedBatchedEx(g->blas, op_b, op_a, a->N, a->M, a->K, &alpha, a->B, CUDA_R_16BF,
					(int)ldb, batch > 1 ? a->stride_b : 0, a->A, CUDA_R_16BF, (int)lda,
					batch > 1 ? a->stride_a : 0, &beta,
					a->C16 ? (void *)a->C16 : (void *)a->C, a->C16 ? CUDA_R_16BF : CUDA_R_32F,
					(int)ldc,
					batch > 1 ? a->stride_c : 0, batch, CUBLAS_COMPUTE_32F,
					CUBLAS_GEMM_DEFAULT);
	if (st != CUBLAS_STATUS_SUCCESS) {
		fprintf(stderr,
			"ringworker: fatal: cuBLASLt matmul failed: no algorithm, and cuBLAS failed too: "
			"%s for bf16 %d x %d x %d (batch %d)\n",
			cublasGetStatusString(st), a->M, a->N, a->K, batch);
		exit(CUDA_EXIT_DEVICE);
	}
}

/* A call cuda_gemm.h rules out: one line, exit 70. */
static void s_misuse(const char *what)
{
	fprintf(stderr, "ringworker: fatal: cuda_gemm_run: %s\n", what);
	exit(CUDA_EXIT_MISUSE);
}

extern "C" void cuda_gemm_run(cuda_gemm_t *g, const cuda_gemm_args_t *a)
{
	const int M = a->M, N = a->N, K = a->K;
	if (!a->C == !a->C16)
		s_misuse("exactly one of C (fp32) and C16 (bf16) is the output");
	if (a->C16 && (a->accumulate || a->batch > 1 || a->bias))
		s_misuse("bf16 output (C16) takes one product, no accumulate, and its bias as bias16");
	if (!a->C16 && (a->epi != CUDA_GEMM_EPI_NONE || a->bias16 || a->aux))
		s_misuse("a GELU epilogue, bias16 or aux without bf16 output (C16)");
	if (a->epi != CUDA_GEMM_EPI_NONE && !a->aux)
		s_misuse("a GELU epilogue without its aux matrix");
	if (a->epi == CUDA_GEMM_EPI_DGELU && a->bias16)
		s_misuse("GELU's backward epilogue takes no bias");
	if (M <= 0 || N <= 0 || K <= 0)
		return;
	const int batch = a->batch > 1 ? a->batch : 1;
	const int64_t lda = a->lda ? a->lda : (a->trans_a ? M : K);
	const int64_t ldb = a->ldb ? a->ldb : (a->trans_b ? K : N);
	const int64_t ldc = a->ldc ? a->ldc : N;

	gemm_key_t key;
	memset(&key, 0, sizeof key);
	key.M = M;
	key.N = N;
	key.K = K;
	key.lda = lda;
	key.ldb = ldb;
	key.ldc = ldc;
	key.trans_a = a->trans_a;
	key.trans_b = a->trans_b;
	key.has_bias = a->bias != NULL || a->bias16 != NULL;
	key.accumulate = a->accumulate;
	key.batch = batch;
	key.c16 = a->C16 != NULL;
	key.epi = (int)a->epi;
	if (batch > 1) {
		key.stride_a = a->stride_a;
		key.stride_b = a->stride_b;
		key.stride_c = a->stride_c;
	}
	key.align_a = s_align(a->A);
	key.align_b = s_align(a->B);
	void *d_out = a->C16 ? (void *)a->C16 : (void *)a->C;
	const void *bias = a->C16 ? (const void *)a->bias16 : (const void *)a->bias;
	key.align_c = s_align(d_out);
	key.align_aux = a->aux ? s_align(a->aux) : 0;
	/* a C_in apart from C: cuBLASLt reads it as its C, writes our C as its D */
	const void *c_in = a->accumulate && a->C_in ? (const void *)a->C_in : (const void *)d_out;
	if (c_in != d_out && batch > 1) {
		fprintf(stderr, "ringworker: fatal: cuda_gemm_run: C_in with a batch of %d products\n",
			batch);
		exit(CUDA_EXIT_MISUSE);
	}
	key.align_cin = s_align(c_in);
	key.align_bias = bias ? s_align(bias) : 0;

	/*
	 * Column-major problem: D (N x M, ld ldc) = op(B') (N x K) @ op(A') (K x M)
	 * where B' is our B's memory and A' our A's. Our B (K, N) row-major is a
	 * column-major (N x K) matrix with ld N: no transpose; stored (N, K) it is
	 * (K x N) with ld K: transpose. Likewise for A.
	 */
	cublasOperation_t op_b = a->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasOperation_t op_a = a->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasLtMatrixLayout_t lb = a->trans_b ? s_layout(CUDA_R_16BF, K, N, ldb, batch, a->stride_b)
					       : s_layout(CUDA_R_16BF, N, K, ldb, batch, a->stride_b);
	cublasLtMatrixLayout_t la = a->trans_a ? s_layout(CUDA_R_16BF, M, K, lda, batch, a->stride_a)
					       : s_layout(CUDA_R_16BF, K, M, lda, batch, a->stride_a);
	const cudaDataType_t tc = a->C16 ? CUDA_R_16BF : CUDA_R_32F;
	cublasLtMatrixLayout_t lc = s_layout(tc, N, M, ldc, batch, a->stride_c);

	gemm_entry_t *e = NULL;
	for (int i = 0; i < g->n_cache; i++)
		if (memcmp(&g->cache[i].key, &key, sizeof key) == 0) {
			e = &g->cache[i];
			break;
		}
	gemm_entry_t fresh;
	memset(&fresh, 0, sizeof fresh); /* use_cublas is read whichever way fresh is filled */
	bool have_fresh = false;

	const bool has_epi = bias || a->epi != CUDA_GEMM_EPI_NONE;
	/* cuBLASLt's GELU aux needs rows a multiple of 8 elements apart */
	const bool lt_epi = has_epi && (a->epi == CUDA_GEMM_EPI_NONE || ldc % 8 == 0);
	cublasLtMatmulDesc_t op = NULL;
	for (int attempt = 0; attempt < 2; attempt++) {
		/* attempt 0: the epilogue in cuBLASLt (when there is one it takes); 1: without */
		bool epi = lt_epi && attempt == 0;
		if (e && e->epilogue_in_lt != epi)
			continue;
		LT_CHECK("descriptor", cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
		s_set(op, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b);
		s_set(op, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a);
		if (epi) {
			/* GELU's aux is laid out as D: (N x M) column-major, ld ldc */
			cublasLtEpilogue_t ep = a->epi == CUDA_GEMM_EPI_GELU
							? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
								: CUBLASLT_EPILOGUE_GELU_AUX)
						: a->epi == CUDA_GEMM_EPI_DGELU ? CUBLASLT_EPILOGUE_DGELU
										: CUBLASLT_EPILOGUE_BIAS;
			s_set(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep);
			if (bias) {
				cudaDataType_t bt = tc; /* D's type, as cuBLASLt documents */
				s_set(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
				s_set(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
			}
			if (a->epi != CUDA_GEMM_EPI_NONE) {
				s_set(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &a->aux, sizeof a->aux);
				s_set(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldc, sizeof ldc);
			}
		}
		if (e)
			break;
		if (s_heuristic(g, op, lb, la, lc, &key, &fresh.algo)) {
			fresh.key = key;
			fresh.epilogue_in_lt = epi;
			have_fresh = true;
			break;
		}
		cublasLtMatmulDescDestroy(op);
		op = NULL;
		if (!lt_epi)
			break;
	}
	if (!e && !have_fresh) {
		memset(&fresh, 0, sizeof fresh);
		fresh.key = key;
		fresh.use_cublas = true;
		have_fresh = true;
	}
	if (!e) {
		if (g->n_cache < GEMM_CACHE_MAX) {
			g->cache[g->n_cache] = fresh;
			e = &g->cache[g->n_cache++];
		} else {
			e = &fresh; /* a full cache still works, it just asks again */
		}
	}

	float alpha = a->alpha;
	float beta = a->accumulate ? 1.0f : 0.0f;
	if (e->use_cublas) {
		if (c_in != d_out) /* cuBLAS works in place: C_in first */
			CUDA_CHECK(cudaMemcpy2DAsync(a->C, (size_t)ldc * sizeof(float), c_in,
						     (size_t)ldc * sizeof(float), (size_t)N * sizeof(float),
						     (size_t)M, cudaMemcpyDeviceToDevice, g->stream));
		s_run_cublas(g, a, op_b, op_a, lda, ldb, ldc, batch, alpha, beta);
	} else {
		cublasStatus_t st = cublasLtMatmul(g->lt, op, &alpha, a->B, lb, a->A, la, &beta, c_in, lc,
						   d_out, lc, &e->algo, g->workspace, GEMM_WORKSPACE_BYTES,
						   g->stream);
		if (st != CUBLAS_STATUS_SUCCESS) {
			fprintf(stderr,
				"ringworker: fatal: cuBLASLt matmul failed: %s for bf16 %d x %d x %d (batch %d)\n",
				cublasLtGetStatusString(st), M, N, K, batch);
			exit(CUDA_EXIT_DEVICE);
		}
	}
	if (a->C16 && has_epi && !e->epilogue_in_lt) {
		cuda_gemm_epilogue16(a->epi, a->C16, a->aux, a->bias16, M, N, ldc, g->stream);
	} else if (a->bias && !e->epilogue_in_lt) {
		size_t total = (size_t)batch * M * N;
		size_t blocks = (total + 255) / 256;
		k_add_bias<<<(unsigned)(blocks < 65535u * 16u ? blocks : 65535u * 16u), 256, 0, g->stream>>>(
			a->C, a->bias, M, N, ldc, batch, batch > 1 ? a->stride_c : 0);
		CUDA_CHECK_LAUNCH();
	}
	if (op)
		cublasLtMatmulDescDestroy(op);
	cublasLtMatrixLayoutDestroy(la);
	cublasLtMatrixLayoutDestroy(lb);
	cublasLtMatrixLayoutDestroy(lc);
}
