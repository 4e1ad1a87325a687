/*
 * test_cudaemu_blas: the host cuBLAS/cuBLASLt subset (cudaemu_blas.cc)
 * against naive double-precision references, and its argument checks.
 *
 * Products of small random bf16 (and fp32) matrices through cublasLtMatmul
 * (transposes, padded leading dimensions, strided batches, the bias
 * epilogue, in place and not, bf16 and fp32 D) and cublasGemmStridedBatchedEx
 * must match the reference within 1e-5 of the sum of the magnitudes of the
 * terms (fp32 accumulation of k exact bf16 products), plus half a bf16 ulp
 * for a bf16 D; both paths must agree bit for bit; padding around D must be
 * untouched; C must not be read when beta is 0. The GELU epilogues
 * (GELU_BIAS, GELU_AUX_BIAS, DGELU; bf16 and fp32 D) must match a host
 * computation of the same fp32 expressions in the same order bit for bit,
 * D and the aux matrix. Then each misuse the emulator exists to catch
 * must fail with the right status (the emulator prints one line per
 * failure on stderr, which is expected output here).
 * Exit status 0 when everything passes, 1 otherwise.
 */
#include <cublasLt.h>
#include <cublas_v2.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

static int s_failures;

#define EXPECT(cond, ...)                                                     \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);  \
			fprintf(stderr, __VA_ARGS__);                         \
			fprintf(stderr, "\n");                                \
			s_failures++;                                         \
		}                                                             \
	} while (0)

#define EXPECT_ST(call, want)                                                              \
	do {                                                                               \
		cublasStatus_t got_ = (call);                                              \
		EXPECT(got_ == (want), "%s returned %d, expected %d", #call, (int)got_, (int)(want)); \
	} while (0)

static uint64_t s_rng = 0x9e3779b97f4a7c15ull;

/* Uniform in [-1, 1). */
static float s_rand(void)
{
	s_rng ^= s_rng << 13;
	s_rng ^= s_rng >> 7;
	s_rng ^= s_rng << 17;
	return (float)((s_rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static float s_bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static uint16_t s_f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

/* A 256-byte aligned buffer (like cudaMalloc's), filled with 0xff bytes. */
struct buf {
	void *p = nullptr;
	size_t n_bytes = 0;
	explicit buf(size_t bytes)
	{
		n_bytes = bytes;
		p = aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
		memset(p, 0xff, (bytes + 255) / 256 * 256 + 256);
	}
	~buf() { free(p); }
	buf(const buf &) = delete;
	buf &operator=(const buf &) = delete;
};

static size_t s_bytes(cudaDataType t)
{
	return t == CUDA_R_16BF ? 2 : 4;
}

static double s_get(const void *p, cudaDataType t, int64_t off)
{
	if (t == CUDA_R_16BF)
		return s_bf16_to_f32(((const uint16_t *)p)[off]);
	return ((const float *)p)[off];
}

static void s_put(void *p, cudaDataType t, int64_t off, float v)
{
	if (t == CUDA_R_16BF)
		((uint16_t *)p)[off] = s_f32_to_bf16(v);
	else
		((float *)p)[off] = v;
}

/* One test problem, column-major as cuBLAS sees it. */
struct gemm_case {
	const char *name;
	int m, n, k;
	bool ta, tb;
	int batch;
	int pad;            /* added to every ld; batch strides get more */
	bool bias;          /* epilogue BIAS (Lt only) */
	bool bias_batched;  /* per-member bias, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE m */
	float alpha, beta;
	cudaDataType ab_type, cd_type;
	bool separate_c;    /* C and D distinct buffers (Lt only) */
};

/* The operands of a case, laid out and filled. */
struct gemm_data {
	const gemm_case &c;
	int64_t ar, ac, lda, sa, br, bc, ldb, sb, ldc, sc;
	size_t na, nb, nc;
	buf a, b, c0, bias;
	explicit gemm_data(const gemm_case &gc)
		: c(gc), ar(gc.ta ? gc.k : gc.m), ac(gc.ta ? gc.m : gc.k), lda((ar > 1 ? ar : 1) + gc.pad),
		  sa(gc.batch > 1 ? lda * ac + 5 * gc.pad : 0), br(gc.tb ? gc.n : gc.k),
		  bc(gc.tb ? gc.k : gc.n), ldb((br > 1 ? br : 1) + gc.pad), sb(gc.batch > 1 ? ldb * bc + 3 * gc.pad : 0),
		  ldc(gc.m + gc.pad), sc(gc.batch > 1 ? ldc * gc.n + 7 * gc.pad : 0),
		  na((size_t)((gc.batch - 1) * sa + lda * ac)), nb((size_t)((gc.batch - 1) * sb + ldb * bc)),
		  nc((size_t)((gc.batch - 1) * sc + ldc * gc.n)), a(na * s_bytes(gc.ab_type)),
		  b(nb * s_bytes(gc.ab_type)), c0(nc * s_bytes(gc.cd_type)),
		  bias((size_t)gc.m * gc.batch * s_bytes(gc.cd_type))
	{
		for (size_t i = 0; i < na; i++)
			s_put(a.p, gc.ab_type, (int64_t)i, s_rand());
		for (size_t i = 0; i < nb; i++)
			s_put(b.p, gc.ab_type, (int64_t)i, s_rand());
		/* C's elements random when read; padding and unread C stay 0xff */
		if (gc.beta != 0.0f)
			for (int bt = 0; bt < gc.batch; bt++)
				for (int j = 0; j < gc.n; j++)
					for (int i = 0; i < gc.m; i++)
						s_put(c0.p, gc.cd_type, bt * sc + j * ldc + i, s_rand());
		for (int i = 0; i < gc.m * gc.batch; i++)
			s_put(bias.p, gc.cd_type, i, s_rand());
	}
};

/* Compares D with the double reference, and the padding with C's. */
static void s_check_result(const gemm_data &g, const void *d, bool with_bias, const char *path)
{
	const gemm_case &c = g.c;
	int bad = 0;
	double worst = 0;
	std::vector<bool> in_matrix(g.nc, false);
	for (int bt = 0; bt < c.batch; bt++)
		for (int j = 0; j < c.n; j++)
			for (int i = 0; i < c.m; i++) {
				double sum = 0, mag = 0;
				for (int l = 0; l < c.k; l++) {
					int64_t ao = bt * g.sa + (c.ta ? i * g.lda + l : l * g.lda + i);
					int64_t bo = bt * g.sb + (c.tb ? l * g.ldb + j : j * g.ldb + l);
					double x = s_get(g.a.p, c.ab_type, ao) * s_get(g.b.p, c.ab_type, bo);
					sum += x;
					mag += fabs(x);
				}
				double ref = c.alpha * sum;
				mag *= fabs(c.alpha);
				int64_t co = bt * g.sc + j * g.ldc + i;
				in_matrix[(size_t)co] = true;
				if (c.beta != 0.0f) {
					double cv = c.beta * s_get(g.c0.p, c.cd_type, co);
					ref += cv;
					mag += fabs(cv);
				}
				if (with_bias) {
					double bv = s_get(g.bias.p, c.cd_type, (c.bias_batched ? bt * c.m : 0) + i);
					ref += bv;
					mag += fabs(bv);
				}
				double got = s_get(d, c.cd_type, co);
				double tol = 1e-5 * mag + 1e-6;
				if (c.cd_type == CUDA_R_16BF)
					tol += fabs(ref) / 256.0;
				double err = fabs(got - ref);
				if (!(err <= tol)) {
					if (bad++ < 3)
						fprintf(stderr, "  %s %s: D[%d](%d,%d) = %.9g, reference %.9g\n", c.name,
							path, bt, i, j, got, ref);
				} else if (err / (mag + 1e-30) > worst) {
					worst = err / (mag + 1e-30);
				}
			}
	size_t eb = s_bytes(c.cd_type);
	int touched = 0;
	for (size_t o = 0; o < g.nc; o++)
		if (!in_matrix[o] && memcmp((const char *)d + o * eb, (const char *)g.c0.p + o * eb, eb) != 0)
			touched++;
	EXPECT(bad == 0, "%s via %s: %d of %d elements off the reference", c.name, path, bad,
	       c.m * c.n * c.batch);
	EXPECT(touched == 0, "%s via %s: %d padding elements of D written", c.name, path, touched);
	printf("  %-28s %-26s ok=%d worst relative error %.2e\n", c.name, path, bad == 0 && touched == 0,
	       worst);
}

static cublasLtMatrixLayout_t s_layout(cudaDataType t, int64_t rows, int64_t cols, int64_t ld, int batch,
                                       int64_t stride)
{
	cublasLtMatrixLayout_t l = nullptr;
	EXPECT_ST(cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, ld), CUBLAS_STATUS_SUCCESS);
	if (batch > 1) {
		int32_t bc = batch;
		EXPECT_ST(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc),
			  CUBLAS_STATUS_SUCCESS);
		EXPECT_ST(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
							   sizeof stride),
			  CUBLAS_STATUS_SUCCESS);
	}
	return l;
}

static cublasLtMatmulDesc_t s_desc(bool ta, bool tb)
{
	cublasLtMatmulDesc_t op = nullptr;
	EXPECT_ST(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
	cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	EXPECT_ST(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa),
		  CUBLAS_STATUS_SUCCESS);
	EXPECT_ST(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob),
		  CUBLAS_STATUS_SUCCESS);
	return op;
}

static void s_set_bias(cublasLtMatmulDesc_t op, const void *bias, cudaDataType t, int64_t stride)
{
	cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
	int32_t bt = t;
	EXPECT_ST(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep),
		  CUBLAS_STATUS_SUCCESS);
	EXPECT_ST(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
		  CUBLAS_STATUS_SUCCESS);
	EXPECT_ST(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
		  CUBLAS_STATUS_SUCCESS);
	if (stride)
		EXPECT_ST(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &stride,
							 sizeof stride),
			  CUBLAS_STATUS_SUCCESS);
}

/* The engine's preference: 32 MiB workspace, alignments as given. */
static cublasLtMatmulPreference_t s_pref(uint32_t align)
{
	cublasLtMatmulPreference_t pref = nullptr;
	EXPECT_ST(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
	uint64_t ws = 32u << 20;
	EXPECT_ST(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
		  CUBLAS_STATUS_SUCCESS);
	const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
	for (int i = 0; i < 4; i++)
		EXPECT_ST(cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &align, sizeof align),
			  CUBLAS_STATUS_SUCCESS);
	return pref;
}

/* D via cublasLtMatmul, returned in *ret_d (nc elements, C's padding). */
static void s_run_lt(cublasLtHandle_t lt, const gemm_data &g, buf *ret_d)
{
	const gemm_case &c = g.c;
	cublasLtMatmulDesc_t op = s_desc(c.ta, c.tb);
	if (c.bias)
		s_set_bias(op, g.bias.p, c.cd_type, c.bias_batched ? c.m : 0);
	cublasLtMatrixLayout_t la = s_layout(c.ab_type, g.ar, g.ac, g.lda, c.batch, g.sa);
	cublasLtMatrixLayout_t lb = s_layout(c.ab_type, g.br, g.bc, g.ldb, c.batch, g.sb);
	cublasLtMatrixLayout_t lc = s_layout(c.cd_type, c.m, c.n, g.ldc, c.batch, g.sc);
	cublasLtMatmulPreference_t pref = s_pref(256);
	cublasLtMatmulHeuristicResult_t res;
	int n_res = -1;
	EXPECT_ST(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res, &n_res),
		  CUBLAS_STATUS_SUCCESS);
	EXPECT(n_res == 1, "%s: heuristic returned %d results", c.name, n_res);
	memcpy(ret_d->p, g.c0.p, g.nc * s_bytes(c.cd_type));
	buf c_sep(c.separate_c ? g.nc * s_bytes(c.cd_type) : 1);
	const void *cp = ret_d->p;
	if (c.separate_c) {
		memcpy(c_sep.p, g.c0.p, g.nc * s_bytes(c.cd_type));
		cp = c_sep.p;
	}
	char ws[64];
	EXPECT_ST(cublasLtMatmul(lt, op, &c.alpha, g.a.p, la, g.b.p, lb, &c.beta, cp, lc, ret_d->p, lc, &res.algo,
				 ws, sizeof ws, nullptr),
		  CUBLAS_STATUS_SUCCESS);
	cublasLtMatmulPreferenceDestroy(pref);
	cublasLtMatmulDescDestroy(op);
	cublasLtMatrixLayoutDestroy(la);
	cublasLtMatrixLayoutDestroy(lb);
	cublasLtMatrixLayoutDestroy(lc);
}

/* C via cublasGemmStridedBatchedEx, in place in *ret_d. */
static void s_run_blas(cublasHandle_t h, const gemm_data &g, buf *ret_d)
{
	const gemm_case &c = g.c;
	memcpy(ret_d->p, g.c0.p, g.nc * s_bytes(c.cd_type));
	EXPECT_ST(cublasGemmStridedBatchedEx(h, c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, c.tb ? CUBLAS_OP_T : CUBLAS_OP_N, c.m,
					     c.n, c.k, &c.alpha, g.a.p, c.ab_type, (int)g.lda, g.sa, g.b.p,
					     c.ab_type, (int)g.ldb, g.sb, &c.beta, ret_d->p, c.cd_type, (int)g.ldc,
					     g.sc, c.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
		  CUBLAS_STATUS_SUCCESS);
}

static void s_test_products(cublasLtHandle_t lt, cublasHandle_t h)
{
	const cudaDataType BF = CUDA_R_16BF, F = CUDA_R_32F;
	const gemm_case cases[] = {
		{"NN dense", 7, 5, 9, false, false, 1, 0, false, false, 1.0f, 0.0f, BF, F, false},
		{"TN bias accumulate padded", 6, 11, 13, true, false, 1, 3, true, false, 0.5f, 1.0f, BF, F, false},
		{"NT batched strided bias", 9, 4, 17, false, true, 3, 2, true, false, 1.0f, 0.0f, BF, F, false},
		{"TT batched per-member bias", 5, 8, 33, true, true, 4, 1, true, true, 1.25f, 1.0f, BF, F, false},
		{"NN separate C", 8, 6, 10, false, false, 2, 4, true, false, -1.0f, 0.75f, BF, F, true},
		{"TN bf16 D", 10, 3, 40, true, false, 2, 0, true, false, 1.0f, 1.0f, BF, BF, false},
		{"NT fp32 operands", 4, 7, 12, false, true, 3, 1, false, false, 2.0f, 0.5f, F, F, false},
		{"k = 0", 3, 4, 0, false, false, 1, 0, true, false, 1.0f, 1.0f, BF, F, false},
		{"alpha = 0", 3, 4, 5, true, true, 1, 0, false, false, 0.0f, 2.0f, BF, F, false},
	};
	for (const gemm_case &c : cases) {
		gemm_data g(c);
		buf d_lt(g.nc * s_bytes(c.cd_type)), d_blas(g.nc * s_bytes(c.cd_type));
		s_run_lt(lt, g, &d_lt);
		s_check_result(g, d_lt.p, c.bias, "cublasLtMatmul");
		s_run_blas(h, g, &d_blas);
		s_check_result(g, d_blas.p, false, "cublasGemmStridedBatchedEx");
		if (!c.bias)
			EXPECT(memcmp(d_lt.p, d_blas.p, g.nc * s_bytes(c.cd_type)) == 0,
			       "%s: cuBLASLt and cuBLAS results differ", c.name);
	}
}

/*
 * cuda_gemm.cu's mapping: row-major C (M, N) = A (M, K) @ B (K, N) + bias (N)
 * as column-major D (N x M) = B' (N x K) A' (K x M), the same memory.
 */
static void s_test_engine_mapping(cublasLtHandle_t lt)
{
	const int M = 6, N = 10, K = 7;
	buf a((size_t)M * K * 2), b((size_t)K * N * 2), c((size_t)M * N * 4), bias((size_t)N * 4);
	uint16_t *A = (uint16_t *)a.p, *B = (uint16_t *)b.p;
	float *C = (float *)c.p, *bv = (float *)bias.p;
	for (int i = 0; i < M * K; i++)
		A[i] = s_f32_to_bf16(s_rand());
	for (int i = 0; i < K * N; i++)
		B[i] = s_f32_to_bf16(s_rand());
	for (int i = 0; i < N; i++)
		bv[i] = s_rand();
	cublasLtMatmulDesc_t op = s_desc(false, false);
	s_set_bias(op, bv, CUDA_R_32F, 0);
	cublasLtMatrixLayout_t lb = s_layout(CUDA_R_16BF, N, K, N, 1, 0);
	cublasLtMatrixLayout_t la = s_layout(CUDA_R_16BF, K, M, K, 1, 0);
	cublasLtMatrixLayout_t lc = s_layout(CUDA_R_32F, N, M, N, 1, 0);
	cublasLtMatmulPreference_t pref = s_pref(256);
	cublasLtMatmulHeuristicResult_t res;
	int n_res = 0;
	EXPECT_ST(cublasLtMatmulAlgoGetHeuristic(lt, op, lb, la, lc, lc, pref, 1, &res, &n_res), CUBLAS_STATUS_SUCCESS);
	float alpha = 1.0f, beta = 0.0f;
	EXPECT_ST(cublasLtMatmul(lt, op, &alpha, B, lb, A, la, &beta, C, lc, C, lc, &res.algo, nullptr, 0, nullptr),
		  CUBLAS_STATUS_SUCCESS);
	int bad = 0;
	for (int m = 0; m < M; m++)
		for (int n = 0; n < N; n++) {
			double ref = bv[n], mag = fabs(bv[n]);
			for (int k = 0; k < K; k++) {
				double x = (double)s_bf16_to_f32(A[m * K + k]) * s_bf16_to_f32(B[k * N + n]);
				ref += x;
				mag += fabs(x);
			}
			if (!(fabs(C[m * N + n] - ref) <= 1e-5 * mag + 1e-6))
				bad++;
		}
	EXPECT(bad == 0, "engine mapping: %d of %d elements off the row-major reference", bad, M * N);
	printf("  %-28s %-26s ok=%d\n", "row-major (engine mapping)", "cublasLtMatmul", bad == 0);
	cublasLtMatmulPreferenceDestroy(pref);
	cublasLtMatmulDescDestroy(op);
	cublasLtMatrixLayoutDestroy(la);
	cublasLtMatrixLayoutDestroy(lb);
	cublasLtMatrixLayoutDestroy(lc);
}

/* Runs one Lt problem from explicit layouts; the status of the first call
 * that fails (heuristic, then matmul with a NULL algo). */
static cublasStatus_t s_try_lt(cublasLtHandle_t lt, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                               const void *A, cublasLtMatrixLayout_t lb, const void *B, cublasLtMatrixLayout_t lc,
                               const void *C, cublasLtMatrixLayout_t ld, void *D, cublasStatus_t *ret_heur)
{
	cublasLtMatmulPreference_t pref = s_pref(4);
	cublasLtMatmulHeuristicResult_t res;
	int n_res = 0;
	*ret_heur = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, ld, pref, 1, &res, &n_res);
	cublasLtMatmulPreferenceDestroy(pref);
	float alpha = 1.0f, beta = 1.0f;
	return cublasLtMatmul(lt, op, &alpha, A, la, B, lb, &beta, C, lc, D, ld, nullptr, nullptr, 0, nullptr);
}

static void s_test_misuse(cublasLtHandle_t lt, cublasHandle_t h)
{
	printf("misuse (each expected failure prints one cudaemu line on stderr):\n");
	buf a(4096), b(4096), c(8192), big(65536);
	cublasStatus_t heur;
	cublasLtMatmulDesc_t op = s_desc(false, false);

	/* op(A) 8 x 4, op(B) 5 x 6: k mismatch */
	{
		cublasLtMatrixLayout_t la = s_layout(CUDA_R_16BF, 8, 4, 8, 1, 0);
		cublasLtMatrixLayout_t lb = s_layout(CUDA_R_16BF, 5, 6, 5, 1, 0);
		cublasLtMatrixLayout_t lc = s_layout(CUDA_R_32F, 8, 6, 8, 1, 0);
		EXPECT_ST(s_try_lt(lt, op, la, a.p, lb, b.p, lc, c.p, lc, c.p, &heur), CUBLAS_STATUS_INVALID_VALUE);
		EXPECT(heur == CUBLAS_STATUS_INVALID_VALUE, "k mismatch: heuristic returned %d", (int)heur);
		cublasLtMatrixLayoutDestroy(la);
		cublasLtMatrixLayoutDestroy(lb);
		cublasLtMatrixLayoutDestroy(lc);
	}
	/* D 8 x 6 but op(A) has 7 rows */
	{
		cublasLtMatrixLayout_t la = s_layout(CUDA_R_16BF, 7, 4, 8, 1, 0);
		cublasLtMatrixLayout_t lb = s_layout(CUDA_R_16BF, 4, 6, 4, 1, 0);
		cublasLtMatrixLayout_t lc = s_layout(CUDA_R_32F, 8, 6, 8, 1, 0);
		EXPECT_ST(s_try_lt(lt, op, la, a.p, lb, b.p, lc, c.p, lc, c.p, &heur), CUBLAS_STATUS_INVALID_VALUE);
		cublasLtMatrixLayoutDestroy(la);
		cublasLtMatrixLayoutDestroy(lb);
		cublasLtMatrixLayoutDestroy(lc);
	}
	/* a transpose that makes shapes disagree: A 8 x 4 with TRANSA=T is 4 x 8 */
	{
		cublasLtMatmulDesc_t opt = s_desc(true, false);
		cublasLtMatrixLayout_t la = s_layout(CUDA_R_16BF, 8, 4, 8, 1, 0);
		cublasLtMatrixLayout_t lb = s_layout(CUDA_R_16BF, 4, 6, 4, 1, 0);
		cublasLtMatrixLayout_t lc = s_layout(CUDA_R_32F, 8, 6, 8, 1, 0);
		EXPECT_ST(s_try_lt(lt, opt, la, a.p, lb, b.p, lc, c.p, lc, c.p, &heur), CUBLAS_STATUS_INVALID_VALUE);
		cublasLtMatrixLayoutDestroy(la);
		cublasLtMatrixLayoutDestroy(lb);
		cublasLtMatrixLayoutDestroy(lc);
		cublasLtMatmulDescDestroy(opt);
	}
	/* ld < rows; C and D of different shapes; batch counts; in place with two layouts */
	{
		cublasLtMatrixLayout_t la = s_layout(CUDA_R_16BF, 8, 4, 8, 1, 0);
		cublasLtMatrixLayout_t lb = s_layout(CUDA_R_16BF, 4, 6, 3, 1, 0); /* ld 3 < 4 rows */
		cublasLtMatrixLayout_t lb_ok = s_layout(CUDA_R_16BF, 4, 6, 4, 1, 0);
		cublasLtMatrixLayout_t lc = s_layout(CUDA_R_32F, 8, 6, 8, 1, 0);
		cublasLtMatrixLayout_t lc2 = s_layout(CUDA_R_32F, 8, 5, 8, 1, 0);
		cublasLtMatrixLayout_t lc_ld = s_layout(CUDA_R_32F, 8, 6, 9, 1, 0);
		cublasLtMatrixLayout_t lb_batch = s_layout(CUDA_R_16BF, 4, 6, 4, 2, 24);
		EXPECT_ST(s_try_lt(lt, op, la, a.p, lb, b.p, lc, c.p, lc, c.p, &heur), CUBLAS_STATUS_INVALID_VALUE);
		EXPECT_ST(s_try_lt(lt, op, la, a.p, lb_ok, b.p, lc2, c.p, lc, c.p, &heur), CUBLAS_STATUS_INVALID_VALUE);
		EXPECT_ST(s_try_lt(lt, op, la, a.p, lb_batch, b.p, lc, c.p, lc, c.p, &heur),
			  CUBLAS_STATUS_INVALID_VALUE);
		EXPECT_ST(s_try_lt(lt, op, la, a.p, lb_ok, b.p, lc_ld, c.p, lc, c.p, &heur),
			  CUBLAS_STATUS_INVALID_VALUE);
		/* the control: the same problem, well formed, succeeds */
		memset(c.p, 0, c.n_bytes);
		EXPECT_ST(s_try_lt(lt, op, la, a.p, lb_ok, b.p, lc, c.p, lc, c.p, &heur), CUBLAS_STATUS_SUCCESS);
		/* D overlapping A; D's batch members overlapping (stride 40 < 8 x 6) */
		EXPECT_ST(s_try_lt(lt, op, la, a.p, lb_ok, b.p, lc, a.p, lc, a.p, &heur), CUBLAS_STATUS_INVALID_VALUE);
		cublasLtMatrixLayout_t la2 = s_layout(CUDA_R_16BF, 8, 4, 8, 2, 32);
		cublasLtMatrixLayout_t lb2 = s_layout(CUDA_R_16BF, 4, 6, 4, 2, 24);
		cublasLtMatrixLayout_t lc2b = s_layout(CUDA_R_32F, 8, 6, 8, 2, 40);
		EXPECT_ST(s_try_lt(lt, op, la2, a.p, lb2, b.p, lc2b, c.p, lc2b, c.p, &heur),
			  CUBLAS_STATUS_INVALID_VALUE);
		EXPECT(heur == CUBLAS_STATUS_SUCCESS, "overlapping batches are a runtime check, heuristic gave %d",
		       (int)heur);
		cublasLtMatrixLayoutDestroy(la);
		cublasLtMatrixLayoutDestroy(lb);
		cublasLtMatrixLayoutDestroy(lb_ok);
		cublasLtMatrixLayoutDestroy(lc);
		cublasLtMatrixLayoutDestroy(lc2);
		cublasLtMatrixLayoutDestroy(lc_ld);
		cublasLtMatrixLayoutDestroy(lb_batch);
		cublasLtMatrixLayoutDestroy(la2);
		cublasLtMatrixLayoutDestroy(lb2);
		cublasLtMatrixLayoutDestroy(lc2b);
	}
	/* D and A interleaved column slices of one buffer (ld 16, rows 8):
	 * disjoint, so allowed */
	{
		float *base = (float *)big.p;
		memset(big.p, 0, big.n_bytes);
		cublasLtMatrixLayout_t la = s_layout(CUDA_R_32F, 8, 4, 16, 1, 0);
		cublasLtMatrixLayout_t lb = s_layout(CUDA_R_32F, 4, 6, 4, 1, 0);
		cublasLtMatrixLayout_t ld = s_layout(CUDA_R_32F, 8, 6, 16, 1, 0);
		memset(b.p, 0, b.n_bytes);
		EXPECT_ST(s_try_lt(lt, op, la, base, lb, b.p, ld, base + 8, ld, base + 8, &heur),
			  CUBLAS_STATUS_SUCCESS);
		cublasLtMatrixLayoutDestroy(la);
		cublasLtMatrixLayoutDestroy(lb);
		cublasLtMatrixLayoutDestroy(ld);
	}
	/* attribute sizes and unsupported features */
	{
		int64_t wide = CUBLAS_OP_T;
		EXPECT_ST(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide),
			  CUBLAS_STATUS_INVALID_VALUE);
		cublasLtEpilogue_t relu = CUBLASLT_EPILOGUE_RELU;
		EXPECT_ST(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &relu, sizeof relu),
			  CUBLAS_STATUS_NOT_SUPPORTED);
		cublasLtMatrixLayout_t l = s_layout(CUDA_R_16BF, 4, 4, 4, 1, 0);
		int64_t bc = 2;
		EXPECT_ST(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc),
			  CUBLAS_STATUS_INVALID_VALUE);
		cublasLtMatrixLayoutDestroy(l);
		cublasLtMatrixLayout_t l8 = nullptr;
		EXPECT_ST(cublasLtMatrixLayoutCreate(&l8, CUDA_R_8I, 4, 4, 4), CUBLAS_STATUS_NOT_SUPPORTED);
	}
	cublasLtMatmulDescDestroy(op);

	/* the bias epilogue without a bias pointer; a pointer less aligned than the algorithm's */
	{
		cublasLtMatmulDesc_t opb = s_desc(false, false);
		s_set_bias(opb, nullptr, CUDA_R_32F, 0);
		cublasLtMatrixLayout_t la = s_layout(CUDA_R_16BF, 8, 4, 8, 1, 0);
		cublasLtMatrixLayout_t lb = s_layout(CUDA_R_16BF, 4, 6, 4, 1, 0);
		cublasLtMatrixLayout_t lc = s_layout(CUDA_R_32F, 8, 6, 8, 1, 0);
		EXPECT_ST(s_try_lt(lt, opb, la, a.p, lb, b.p, lc, c.p, lc, c.p, &heur), CUBLAS_STATUS_INVALID_VALUE);
		cublasLtMatmulDescDestroy(opb);
		cublasLtMatmulDesc_t opn = s_desc(false, false);
		cublasLtMatmulPreference_t pref = s_pref(256);
		cublasLtMatmulHeuristicResult_t res;
		int n_res = 0;
		EXPECT_ST(cublasLtMatmulAlgoGetHeuristic(lt, opn, la, lb, lc, lc, pref, 1, &res, &n_res),
			  CUBLAS_STATUS_SUCCESS);
		float alpha = 1.0f, beta = 0.0f;
		EXPECT_ST(cublasLtMatmul(lt, opn, &alpha, (const uint16_t *)a.p + 1, la, b.p, lb, &beta, c.p, lc, c.p,
					 lc, &res.algo, nullptr, 0, nullptr),
			  CUBLAS_STATUS_INVALID_VALUE);
		EXPECT_ST(cublasLtMatmul(nullptr, opn, &alpha, a.p, la, b.p, lb, &beta, c.p, lc, c.p, lc, &res.algo,
					 nullptr, 0, nullptr),
			  CUBLAS_STATUS_NOT_INITIALIZED);
		/* CUDAEMU_LT_NO_ALGO: none at all, or none for the bias epilogue */
		setenv("CUDAEMU_LT_NO_ALGO", "1", 1);
		n_res = -1;
		cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, opn, la, lb, lc, lc, pref, 1, &res, &n_res);
		EXPECT(st != CUBLAS_STATUS_SUCCESS || n_res == 0, "CUDAEMU_LT_NO_ALGO=1 still found an algorithm");
		EXPECT(n_res == 0, "CUDAEMU_LT_NO_ALGO=1: %d results", n_res);
		setenv("CUDAEMU_LT_NO_ALGO", "bias", 1);
		EXPECT_ST(cublasLtMatmulAlgoGetHeuristic(lt, opn, la, lb, lc, lc, pref, 1, &res, &n_res),
			  CUBLAS_STATUS_SUCCESS);
		EXPECT(n_res == 1, "CUDAEMU_LT_NO_ALGO=bias: no algorithm without a bias");
		cublasLtMatmulDesc_t opb2 = s_desc(false, false);
		s_set_bias(opb2, c.p, CUDA_R_32F, 0);
		n_res = -1;
		cublasLtMatmulAlgoGetHeuristic(lt, opb2, la, lb, lc, lc, pref, 1, &res, &n_res);
		EXPECT(n_res == 0, "CUDAEMU_LT_NO_ALGO=bias: %d results with the bias epilogue", n_res);
		unsetenv("CUDAEMU_LT_NO_ALGO");
		cublasLtMatmulDescDestroy(opb2);
		cublasLtMatmulDescDestroy(opn);
		cublasLtMatmulPreferenceDestroy(pref);
		cublasLtMatrixLayoutDestroy(la);
		cublasLtMatrixLayoutDestroy(lb);
		cublasLtMatrixLayoutDestroy(lc);
	}

	/* cuBLAS: leading dimensions, overlapping batch members, types, handle */
	{
		float alpha = 1.0f, beta = 0.0f;
		EXPECT_ST(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 6, 4, &alpha, a.p, CUDA_R_16BF, 7, 0,
						     b.p, CUDA_R_16BF, 4, 0, &beta, c.p, CUDA_R_32F, 8, 0, 1,
						     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
			  CUBLAS_STATUS_INVALID_VALUE); /* lda 7 < m 8 */
		EXPECT_ST(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_T, 8, 6, 4, &alpha, a.p, CUDA_R_16BF, 8, 0,
						     b.p, CUDA_R_16BF, 4, 0, &beta, c.p, CUDA_R_32F, 8, 0, 1,
						     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
			  CUBLAS_STATUS_INVALID_VALUE); /* op(B) = B^T: ldb 4 < n 6 */
		EXPECT_ST(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 6, 4, &alpha, a.p, CUDA_R_16BF, 8, 0,
						     b.p, CUDA_R_16BF, 4, 0, &beta, c.p, CUDA_R_32F, 7, 0, 1,
						     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
			  CUBLAS_STATUS_INVALID_VALUE); /* ldc 7 < m 8 */
		EXPECT_ST(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 6, 4, &alpha, a.p, CUDA_R_16BF, 8, 32,
						     b.p, CUDA_R_16BF, 4, 24, &beta, c.p, CUDA_R_32F, 8, 0, 2,
						     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
			  CUBLAS_STATUS_INVALID_VALUE); /* strideC 0 with 2 members */
		EXPECT_ST(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 6, 4, &alpha, a.p, CUDA_R_16BF, 8, 0,
						     b.p, CUDA_R_32F, 4, 0, &beta, c.p, CUDA_R_32F, 8, 0, 1,
						     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
			  CUBLAS_STATUS_NOT_SUPPORTED); /* bf16 A with fp32 B */
		EXPECT_ST(cublasGemmStridedBatchedEx(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 8, 6, 4, &alpha, a.p, CUDA_R_16BF,
						     8, 0, b.p, CUDA_R_16BF, 4, 0, &beta, c.p, CUDA_R_32F, 8, 0, 1,
						     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
			  CUBLAS_STATUS_NOT_INITIALIZED);
		EXPECT_ST(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 6, 4, &alpha, a.p, CUDA_R_16BF, 8, 32,
						     b.p, CUDA_R_16BF, 4, 24, &beta, c.p, CUDA_R_32F, 8, 48, 2,
						     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
			  CUBLAS_STATUS_SUCCESS); /* the control */
	}
}

/*
 * The GELU the emulator documents (the engine's tanh form), and its
 * derivative times d, written out here as the reference: same fp32 terms
 * in the same order, so a correct emulator agrees bit for bit.
 */
static float s_ref_gelu(float v)
{
	const float K = 0.7978845608028654f;
	const float u = K * (v + 0.044715f * v * v * v);
	return 0.5f * v * (1.0f + tanhf(u));
}

static float s_ref_gelu_grad(float d, float v)
{
	const float K = 0.7978845608028654f;
	const float u = K * (v + 0.044715f * v * v * v);
	const float th = tanhf(u);
	const float du = K * (1.0f + 3.0f * 0.044715f * v * v);
	return d * (0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du);
}

/* The stored bits of element off, and those of v rounded to type t. */
static uint32_t s_bits(const void *p, cudaDataType t, int64_t off)
{
	if (t == CUDA_R_16BF)
		return ((const uint16_t *)p)[off];
	uint32_t u;
	memcpy(&u, (const float *)p + off, sizeof u);
	return u;
}

static uint32_t s_round_bits(float v, cudaDataType t)
{
	if (t == CUDA_R_16BF)
		return s_f32_to_bf16(v);
	uint32_t u;
	memcpy(&u, &v, sizeof u);
	return u;
}

static void s_set_epilogue(cublasLtMatmulDesc_t op, cublasLtEpilogue_t ep)
{
	EXPECT_ST(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep),
		  CUBLAS_STATUS_SUCCESS);
}

static void s_set_aux(cublasLtMatmulDesc_t op, const void *aux, int64_t ld, int64_t stride)
{
	EXPECT_ST(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux),
		  CUBLAS_STATUS_SUCCESS);
	EXPECT_ST(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld),
		  CUBLAS_STATUS_SUCCESS);
	EXPECT_ST(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &stride,
						 sizeof stride),
		  CUBLAS_STATUS_SUCCESS);
}

/* One GELU-epilogue problem: bf16 A (m x k) and B (k x n), D in place over
 * C with two rows of padding, the aux matrix with its own ld. */
struct gelu_case {
	const char *name;
	cublasLtEpilogue_t epilogue;
	bool bias;         /* expected to add the bias (a pointer is always set) */
	int aux;           /* 0: none, 1: written (GELU input), 2: read (DGELU) */
	int m, n, k, batch;
	int64_t aux_ld;
	float alpha, beta;
	cudaDataType d_type;
	bool aux_type_set; /* AUX_DATA_TYPE set to D's type, not left at -1 */
};

static void s_run_gelu_case(cublasLtHandle_t lt, const gelu_case &c)
{
	const cudaDataType BF = CUDA_R_16BF, dt = c.d_type;
	const size_t eb = s_bytes(dt);
	const int64_t m = c.m, n = c.n, k = c.k, nb = c.batch;
	const int64_t sa = m * k, sb = k * n, ldd = m + 2, sd = ldd * n, ldx = c.aux_ld, sx = ldx * n;
	buf a((size_t)(sa * nb) * 2), b((size_t)(sb * nb) * 2), d((size_t)(sd * nb) * eb),
		c0((size_t)(sd * nb) * eb), bias((size_t)(m * nb) * eb), aux((size_t)(sx * nb) * eb),
		aux0((size_t)(sx * nb) * eb);
	for (int64_t i = 0; i < sa * nb; i++)
		s_put(a.p, BF, i, s_rand());
	for (int64_t i = 0; i < sb * nb; i++)
		s_put(b.p, BF, i, s_rand());
	if (c.beta != 0.0f)
		for (int64_t bt = 0; bt < nb; bt++)
			for (int64_t j = 0; j < n; j++)
				for (int64_t i = 0; i < m; i++)
					s_put(c0.p, dt, bt * sd + j * ldd + i, s_rand());
	for (int64_t i = 0; i < m * nb; i++)
		s_put(bias.p, dt, i, s_rand());
	if (c.aux == 2) /* GELU inputs over the curved part, [-3, 3) */
		for (int64_t i = 0; i < sx * nb; i++)
			s_put(aux0.p, dt, i, 3.0f * s_rand());
	memcpy(aux.p, aux0.p, aux.n_bytes);
	memcpy(d.p, c0.p, d.n_bytes);

	cublasLtMatmulDesc_t op = s_desc(false, false);
	s_set_bias(op, bias.p, dt, nb > 1 ? m : 0);
	s_set_epilogue(op, c.epilogue);
	if (c.aux)
		s_set_aux(op, aux.p, ldx, sx);
	if (c.aux_type_set) {
		int32_t at = dt;
		EXPECT_ST(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at,
							 sizeof at),
			  CUBLAS_STATUS_SUCCESS);
	}
	cublasLtMatrixLayout_t la = s_layout(BF, m, k, m, c.batch, sa);
	cublasLtMatrixLayout_t lb = s_layout(BF, k, n, k, c.batch, sb);
	cublasLtMatrixLayout_t ld = s_layout(dt, m, n, ldd, c.batch, sd);
	cublasLtMatmulPreference_t pref = s_pref(256);
	cublasLtMatmulHeuristicResult_t res;
	int n_res = -1;
	EXPECT_ST(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &res, &n_res),
		  CUBLAS_STATUS_SUCCESS);
	EXPECT(n_res == 1, "%s: heuristic returned %d results", c.name, n_res);
	EXPECT_ST(cublasLtMatmul(lt, op, &c.alpha, a.p, la, b.p, lb, &c.beta, d.p, ld, d.p, ld, &res.algo, nullptr,
				 0, nullptr),
		  CUBLAS_STATUS_SUCCESS);

	int bad_d = 0, bad_aux = 0;
	std::vector<bool> in_d((size_t)(sd * nb), false), in_aux((size_t)(sx * nb), false);
	for (int64_t bt = 0; bt < nb; bt++)
		for (int64_t j = 0; j < n; j++)
			for (int64_t i = 0; i < m; i++) {
				float acc = 0.0f;
				for (int64_t l = 0; l < k; l++)
					acc += (float)s_get(a.p, BF, bt * sa + l * m + i) *
					       (float)s_get(b.p, BF, bt * sb + j * k + l);
				float x = c.alpha * acc;
				const int64_t od = bt * sd + j * ldd + i, ox = bt * sx + j * ldx + i;
				if (c.beta != 0.0f)
					x += c.beta * (float)s_get(c0.p, dt, od);
				if (c.bias)
					x += (float)s_get(bias.p, dt, (nb > 1 ? bt * m : 0) + i);
				float want = c.aux == 2 ? s_ref_gelu_grad(x, (float)s_get(aux0.p, dt, ox)) : s_ref_gelu(x);
				in_d[(size_t)od] = true;
				if (s_bits(d.p, dt, od) != s_round_bits(want, dt) && bad_d++ < 3)
					fprintf(stderr, "  %s: D[%d](%d,%d) = %.9g, reference %.9g\n", c.name, (int)bt,
						(int)i, (int)j, s_get(d.p, dt, od), (double)want);
				if (c.aux == 1) {
					in_aux[(size_t)ox] = true;
					if (s_bits(aux.p, dt, ox) != s_round_bits(x, dt) && bad_aux++ < 3)
						fprintf(stderr, "  %s: aux[%d](%d,%d) = %.9g, GELU input %.9g\n", c.name,
							(int)bt, (int)i, (int)j, s_get(aux.p, dt, ox), (double)x);
				}
			}
	int touched = 0;
	for (int64_t o = 0; o < sd * nb; o++)
		if (!in_d[(size_t)o] && s_bits(d.p, dt, o) != s_bits(c0.p, dt, o))
			touched++;
	for (int64_t o = 0; o < sx * nb; o++)
		if (!in_aux[(size_t)o] && s_bits(aux.p, dt, o) != s_bits(aux0.p, dt, o))
			touched++;
	EXPECT(bad_d == 0, "%s: %d of %d elements of D off the host GELU", c.name, bad_d, (int)(m * n * nb));
	EXPECT(bad_aux == 0, "%s: %d of %d aux elements are not the rounded GELU input", c.name, bad_aux,
	       (int)(m * n * nb));
	EXPECT(touched == 0, "%s: %d padding elements of D or aux written (or DGELU's aux input)", c.name,
	       touched);
	printf("  %-34s %-20s ok=%d\n", c.name, "cublasLtMatmul", bad_d == 0 && bad_aux == 0 && touched == 0);
	cublasLtMatmulPreferenceDestroy(pref);
	cublasLtMatmulDescDestroy(op);
	cublasLtMatrixLayoutDestroy(la);
	cublasLtMatrixLayoutDestroy(lb);
	cublasLtMatrixLayoutDestroy(ld);
}

static void s_test_gelu(cublasLtHandle_t lt)
{
	/* the reference is GELU: against the tanh form in double, and its
	 * derivative against a central difference of that */
	int off = 0;
	for (double v = -4.0; v <= 4.0; v += 0.25) {
		double g = 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
		double h = 1e-4, vp = v + h, vm = v - h;
		double gp = 0.5 * vp * (1.0 + tanh(0.7978845608028654 * (vp + 0.044715 * vp * vp * vp)));
		double gm = 0.5 * vm * (1.0 + tanh(0.7978845608028654 * (vm + 0.044715 * vm * vm * vm)));
		if (fabs(s_ref_gelu((float)v) - g) > 1e-6 + 1e-6 * fabs(g) ||
		    fabs(s_ref_gelu_grad(2.0f, (float)v) - 2.0 * (gp - gm) / (2 * h)) > 1e-5)
			off++;
	}
	EXPECT(off == 0, "the test's GELU reference is off the tanh-form GELU at %d points", off);

	const cudaDataType BF = CUDA_R_16BF, F = CUDA_R_32F;
	const gelu_case cases[] = {
		{"GELU_AUX_BIAS bf16, aux ld 16", CUBLASLT_EPILOGUE_GELU_AUX_BIAS, true, 1, 10, 6, 19, 1, 16, 1.0f,
		 0.0f, BF, false},
		{"GELU_AUX_BIAS bf16 batched, beta", CUBLASLT_EPILOGUE_GELU_AUX_BIAS, true, 1, 9, 5, 12, 2, 16, 0.75f,
		 0.5f, BF, true},
		{"GELU_AUX bf16 (bias ignored)", CUBLASLT_EPILOGUE_GELU_AUX, false, 1, 8, 3, 7, 1, 8, 1.0f, 0.0f, BF,
		 false},
		{"GELU_BIAS bf16, no aux", CUBLASLT_EPILOGUE_GELU_BIAS, true, 0, 7, 5, 13, 1, 0, 1.0f, 0.0f, BF, false},
		{"GELU fp32", CUBLASLT_EPILOGUE_GELU, false, 0, 6, 4, 9, 1, 0, 1.5f, 1.0f, F, false},
		{"DGELU bf16 (bias ignored)", CUBLASLT_EPILOGUE_DGELU, false, 2, 12, 7, 11, 1, 16, 1.0f, 0.0f, BF,
		 false},
		{"DGELU fp32 batched, beta", CUBLASLT_EPILOGUE_DGELU, false, 2, 5, 4, 9, 3, 8, 1.0f, 1.0f, F, true},
		{"GELU_AUX_BIAS fp32, aux ld m", CUBLASLT_EPILOGUE_GELU_AUX_BIAS, true, 1, 8, 6, 21, 1, 8, 1.0f, 0.0f,
		 F, false},
		{"GELU_AUX_BIAS fp32 batched", CUBLASLT_EPILOGUE_GELU_AUX_BIAS, true, 1, 11, 3, 5, 2, 24, 1.0f, 0.25f,
		 F, true},
	};
	printf("GELU epilogues against the host GELU, bit for bit:\n");
	for (const gelu_case &c : cases)
		s_run_gelu_case(lt, c);
}

/* The GELU epilogues' argument checks, with a D of 16 x 6 bf16 (ld 16). */
static void s_test_gelu_misuse(cublasLtHandle_t lt)
{
	printf("GELU epilogue misuse:\n");
	const cudaDataType BF = CUDA_R_16BF;
	buf a(4096), b(4096), c(4096), bias(256), aux(8192);
	memset(a.p, 0, a.n_bytes);
	memset(b.p, 0, b.n_bytes);
	memset(c.p, 0, c.n_bytes);
	memset(bias.p, 0, bias.n_bytes);
	memset(aux.p, 0, aux.n_bytes);
	cublasStatus_t heur;
	cublasLtMatrixLayout_t la = s_layout(BF, 16, 4, 16, 1, 0);
	cublasLtMatrixLayout_t lb = s_layout(BF, 4, 6, 4, 1, 0);
	cublasLtMatrixLayout_t lc = s_layout(BF, 16, 6, 16, 1, 0);
	cublasLtMatrixLayout_t la2 = s_layout(BF, 16, 4, 16, 2, 64);
	cublasLtMatrixLayout_t lb2 = s_layout(BF, 4, 6, 4, 2, 24);
	cublasLtMatrixLayout_t lc2 = s_layout(BF, 16, 6, 16, 2, 96);

	cublasLtMatmulDesc_t op = s_desc(false, false);
	s_set_bias(op, bias.p, BF, 0);
	s_set_epilogue(op, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
	/* the control */
	s_set_aux(op, aux.p, 16, 0);
	EXPECT_ST(s_try_lt(lt, op, la, a.p, lb, b.p, lc, c.p, lc, c.p, &heur), CUBLAS_STATUS_SUCCESS);
	/* a NULL aux pointer: the heuristic does not dereference it, the matmul would */
	s_set_aux(op, nullptr, 16, 0);
	EXPECT_ST(s_try_lt(lt, op, la, a.p, lb, b.p, lc, c.p, lc, c.p, &heur), CUBLAS_STATUS_INVALID_VALUE);
	EXPECT(heur == CUBLAS_STATUS_SUCCESS, "NULL aux pointer: heuristic returned %d", (int)heur);
	/* AUX_LD below m (16), not a multiple of 8, or never set */
	s_set_aux(op, aux.p, 8, 0);
	EXPECT_ST(s_try_lt(lt, op, la, a.p, lb, b.p, lc, c.p, lc, c.p, &heur), CUBLAS_STATUS_INVALID_VALUE);
	EXPECT(heur == CUBLAS_STATUS_INVALID_VALUE, "AUX_LD 8 < m 16: heuristic returned %d", (int)heur);
	s_set_aux(op, aux.p, 20, 0);
	EXPECT_ST(s_try_lt(lt, op, la, a.p, lb, b.p, lc, c.p, lc, c.p, &heur), CUBLAS_STATUS_INVALID_VALUE);
	EXPECT(heur == CUBLAS_STATUS_INVALID_VALUE, "AUX_LD 20: heuristic returned %d", (int)heur);
	s_set_aux(op, aux.p, 0, 0);
	EXPECT_ST(s_try_lt(lt, op, la, a.p, lb, b.p, lc, c.p, lc, c.p, &heur), CUBLAS_STATUS_INVALID_VALUE);
	/* aux overlapping D, by a column */
	s_set_aux(op, (uint16_t *)c.p + 5 * 16, 16, 0);
	EXPECT_ST(s_try_lt(lt, op, la, a.p, lb, b.p, lc, c.p, lc, c.p, &heur), CUBLAS_STATUS_INVALID_VALUE);
	/* batched: AUX_BATCH_STRIDE 100 not a multiple of 8; 64 < 16 x 6, members overlapping */
	s_set_aux(op, aux.p, 16, 100);
	EXPECT_ST(s_try_lt(lt, op, la2, a.p, lb2, b.p, lc2, c.p, lc2, c.p, &heur), CUBLAS_STATUS_INVALID_VALUE);
	s_set_aux(op, aux.p, 16, 64);
	EXPECT_ST(s_try_lt(lt, op, la2, a.p, lb2, b.p, lc2, c.p, lc2, c.p, &heur), CUBLAS_STATUS_INVALID_VALUE);
	s_set_aux(op, aux.p, 16, 96);
	EXPECT_ST(s_try_lt(lt, op, la2, a.p, lb2, b.p, lc2, c.p, lc2, c.p, &heur), CUBLAS_STATUS_SUCCESS);
	/* AUX_DATA_TYPE other than D's: accepted by the descriptor, refused with D */
	s_set_aux(op, aux.p, 16, 0);
	int32_t at = CUDA_R_32F;
	EXPECT_ST(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof at),
		  CUBLAS_STATUS_SUCCESS);
	EXPECT_ST(s_try_lt(lt, op, la, a.p, lb, b.p, lc, c.p, lc, c.p, &heur), CUBLAS_STATUS_NOT_SUPPORTED);
	EXPECT(heur == CUBLAS_STATUS_NOT_SUPPORTED, "AUX_DATA_TYPE fp32 for bf16 D: heuristic returned %d",
	       (int)heur);
	at = CUDA_R_8I;
	EXPECT_ST(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof at),
		  CUBLAS_STATUS_NOT_SUPPORTED);
	at = -1;
	EXPECT_ST(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof at),
		  CUBLAS_STATUS_SUCCESS);
	/* attribute sizes */
	int32_t ld32 = 16;
	EXPECT_ST(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld32, sizeof ld32),
		  CUBLAS_STATUS_INVALID_VALUE);
	EXPECT_ST(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ld32, sizeof ld32),
		  CUBLAS_STATUS_INVALID_VALUE);
	cublasLtMatmulDescDestroy(op);

	/* DGELU: a NULL aux input; aux overlapping D */
	cublasLtMatmulDesc_t opd = s_desc(false, false);
	s_set_epilogue(opd, CUBLASLT_EPILOGUE_DGELU);
	s_set_aux(opd, nullptr, 16, 0);
	EXPECT_ST(s_try_lt(lt, opd, la, a.p, lb, b.p, lc, c.p, lc, c.p, &heur), CUBLAS_STATUS_INVALID_VALUE);
	s_set_aux(opd, c.p, 16, 0);
	EXPECT_ST(s_try_lt(lt, opd, la, a.p, lb, b.p, lc, c.p, lc, c.p, &heur), CUBLAS_STATUS_INVALID_VALUE);
	s_set_aux(opd, aux.p, 16, 0);
	EXPECT_ST(s_try_lt(lt, opd, la, a.p, lb, b.p, lc, c.p, lc, c.p, &heur), CUBLAS_STATUS_SUCCESS);

	/* CUDAEMU_LT_NO_ALGO=epilogue (and its old name, bias): no algorithm
	 * for any epilogue but DEFAULT */
	cublasLtMatmulDesc_t opg = s_desc(false, false);
	s_set_bias(opg, bias.p, BF, 0);
	s_set_epilogue(opg, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
	s_set_aux(opg, aux.p, 16, 0);
	cublasLtMatmulDesc_t opn = s_desc(false, false);
	cublasLtMatmulPreference_t pref = s_pref(256);
	cublasLtMatmulHeuristicResult_t res;
	int n_res = -1;
	const char *modes[2] = {"epilogue", "bias"};
	for (int i = 0; i < 2; i++) {
		setenv("CUDAEMU_LT_NO_ALGO", modes[i], 1);
		n_res = -1;
		EXPECT_ST(cublasLtMatmulAlgoGetHeuristic(lt, opg, la, lb, lc, lc, pref, 1, &res, &n_res),
			  CUBLAS_STATUS_NOT_SUPPORTED);
		EXPECT(n_res == 0, "CUDAEMU_LT_NO_ALGO=%s: %d results for GELU_AUX_BIAS", modes[i], n_res);
		n_res = -1;
		cublasLtMatmulAlgoGetHeuristic(lt, opd, la, lb, lc, lc, pref, 1, &res, &n_res);
		EXPECT(n_res == 0, "CUDAEMU_LT_NO_ALGO=%s: %d results for DGELU", modes[i], n_res);
		n_res = -1;
		EXPECT_ST(cublasLtMatmulAlgoGetHeuristic(lt, opn, la, lb, lc, lc, pref, 1, &res, &n_res),
			  CUBLAS_STATUS_SUCCESS);
		EXPECT(n_res == 1, "CUDAEMU_LT_NO_ALGO=%s: %d results for DEFAULT", modes[i], n_res);
	}
	unsetenv("CUDAEMU_LT_NO_ALGO");
	n_res = -1;
	EXPECT_ST(cublasLtMatmulAlgoGetHeuristic(lt, opg, la, lb, lc, lc, pref, 1, &res, &n_res),
		  CUBLAS_STATUS_SUCCESS);
	EXPECT(n_res == 1, "CUDAEMU_LT_NO_ALGO unset: %d results for GELU_AUX_BIAS", n_res);
	cublasLtMatmulPreferenceDestroy(pref);
	cublasLtMatmulDescDestroy(opg);
	cublasLtMatmulDescDestroy(opd);
	cublasLtMatmulDescDestroy(opn);
	cublasLtMatrixLayoutDestroy(la);
	cublasLtMatrixLayoutDestroy(lb);
	cublasLtMatrixLayoutDestroy(lc);
	cublasLtMatrixLayoutDestroy(la2);
	cublasLtMatrixLayoutDestroy(lb2);
	cublasLtMatrixLayoutDestroy(lc2);
}

int main(void)
{
	cublasLtHandle_t lt = nullptr;
	cublasHandle_t h = nullptr;
	if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS || cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
		fprintf(stderr, "FAIL: cannot create the handles\n");
		return 1;
	}
	EXPECT_ST(cublasSetStream(h, nullptr), CUBLAS_STATUS_SUCCESS);
	EXPECT(strcmp(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED), cublasLtGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)) == 0,
	       "status strings differ");
	unsetenv("CUDAEMU_LT_NO_ALGO");
	printf("products against double references:\n");
	s_test_products(lt, h);
	s_test_engine_mapping(lt);
	s_test_gelu(lt);
	s_test_misuse(lt, h);
	s_test_gelu_misuse(lt);
	EXPECT_ST(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
	EXPECT_ST(cublasLtDestroy(lt), CUBLAS_STATUS_SUCCESS);
	if (s_failures) {
		printf("test_cudaemu_blas: %d failures\n", s_failures);
		return 1;
	}
	printf("test_cudaemu_blas: all passed\n");
	return 0;
}
