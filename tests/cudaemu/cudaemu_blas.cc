/*
 * cudaemu_blas: the cuBLAS and cuBLASLt calls of the GPU engine
 * (worker/engine/cuda/cuda_gemm.cu), on the host, for cudaemu (cudaemu.h).
 * Linked instead of libcublas/libcublasLt; the prototypes and types are the
 * toolkit's own (cublasLt.h, cublas_v2.h), so the engine compiles unchanged.
 *
 * Semantics are the documented ones: column-major matrices described by
 * (type, rows, cols, ld, batch count, batch stride), D = alpha * op(A) op(B)
 * + beta * C [+ bias broadcast along D's columns], strided batches, C == D
 * in place. Operands are bf16 or fp32, C/D bf16 or fp32, compute and scale
 * fp32. Each dot product is accumulated in fp32 in k order, then scaled,
 * C and the bias added, and the result rounded (to nearest even for bf16)
 * into D. C is not read when beta is 0, nor A and B when alpha is 0.
 *
 * Epilogues: DEFAULT, BIAS, and the GELU family. With x the fp32 value
 * above (bias included for the _BIAS ones), GELU and GELU_BIAS store
 * gelu(x); GELU_AUX and GELU_AUX_BIAS also store x, rounded, into the aux
 * matrix (the GELU input the backward pass needs; D is gelu of the fp32 x,
 * not of the rounded aux); DGELU reads z from the aux matrix and stores
 * x * gelu'(z), without a bias. The aux matrix is m x n column-major like
 * D, of D's type, at EPILOGUE_AUX_POINTER with EPILOGUE_AUX_LD and
 * EPILOGUE_AUX_BATCH_STRIDE. cuBLASLt does not document which GELU it
 * computes; this uses the tanh approximation written as the engine's own
 * kernels write it (s_gelu, s_gelu_grad in cuda_kernels.cu), so that the
 * cuBLASLt path and the engine's fallback agree here up to rounding.
 *
 * What it checks, because a wrong leading dimension or a shape mismatch in
 * the engine is what it exists to catch: the arguments cuBLAS/cuBLASLt check
 * (null handles and descriptors, attribute sizes, ld >= rows, op(A) m x k,
 * op(B) k x n, C and D m x n, equal batch counts, supported types and
 * epilogues, an aux ld >= m and divisible by 8, an aux batch stride
 * divisible by 8, an aux pointer for the epilogues that use one), plus what
 * the real libraries leave undefined: an in-place C/D with differing
 * layouts, D overlapping A, B, the bias, the aux matrix or itself across
 * batch members, a written aux matrix overlapping an input or itself across
 * batch members, and data pointers less aligned than the preference the
 * algorithm was chosen under. A failed check prints one line on stderr,
 * "cudaemu: <function>: <what>", and returns CUBLAS_STATUS_INVALID_VALUE
 * (an unsupported feature: CUBLAS_STATUS_NOT_SUPPORTED), as the libraries
 * report misuse. Every element read or written is at an offset computed
 * from its layout and checked to lie in the layout's extent; when the
 * runtime side defines cudaemu_blas_check_range (weak here), each extent is
 * also checked against the cudaMalloc allocation holding it.
 *
 * cublasLtMatmulAlgoGetHeuristic returns one dummy algorithm, so the
 * engine's cuBLASLt path runs; CUDAEMU_LT_NO_ALGO=1 makes it find none
 * (CUBLAS_STATUS_NOT_SUPPORTED, 0 results), sending the engine to
 * cublasGemmStridedBatchedEx, and CUDAEMU_LT_NO_ALGO=epilogue (or its older
 * name, bias) finds none for any epilogue but DEFAULT (the engine then adds
 * the bias and applies GELU with its own kernels).
 * Streams are recorded and ignored: every call runs to completion on the
 * calling thread.
 */
#include <cublasLt.h>
#include <cublas_v2.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

/*
 * Optional hook, defined by the runtime side of the emulator (which owns
 * the cudaMalloc table): [p, p + n_bytes) must lie in one allocation; it
 * reports and exits if not. `what` names the operand and the call.
 */
extern "C" void cudaemu_blas_check_range(const void *p, size_t n_bytes, const char *what)
	__attribute__((weak));

/* The handles' types are incomplete in the headers; these are ours. */
struct cublasLtContext {
	uint32_t magic;
};

struct cublasContext {
	uint32_t magic;
	cudaStream_t stream;
};

namespace {

const uint32_t LT_MAGIC = 0x4c54484eu;     /* "LTHN" */
const uint32_t BLAS_MAGIC = 0x424c4153u;   /* "BLAS" */
const uint32_t LAYOUT_MAGIC = 0x4c41594fu; /* "LAYO" */
const uint32_t DESC_MAGIC = 0x44455343u;   /* "DESC" */
const uint32_t PREF_MAGIC = 0x50524546u;   /* "PREF" */
const uint64_t ALGO_MAGIC = 0x63756461656d7531ull; /* "cudaemu1" */
const uint32_t DEAD_MAGIC = 0xdeaddeadu;

/* Behind a cublasLtMatrixLayout_t (the header's opaque struct is not used). */
struct emu_layout {
	uint32_t magic;
	int32_t type; /* cudaDataType */
	int32_t order;
	uint64_t rows, cols;
	int64_t ld;
	int32_t batch_count;
	int64_t batch_stride; /* elements */
	int64_t plane_offset;
	uint32_t batch_mode;
};

/* Behind a cublasLtMatmulDesc_t. */
struct emu_desc {
	uint32_t magic;
	int32_t compute_type; /* cublasComputeType_t */
	int32_t scale_type;   /* cudaDataType */
	int32_t pointer_mode;
	int32_t trans_a, trans_b, trans_c;
	uint32_t epilogue;
	const void *bias;
	int64_t bias_batch_stride;
	int32_t bias_type; /* -1: D's type */
	void *aux;         /* the GELU input: written by GELU_AUX*, read by DGELU */
	int64_t aux_ld, aux_batch_stride;
	int32_t aux_type; /* -1: D's type */
};

/* Behind a cublasLtMatmulPreference_t. */
struct emu_pref {
	uint32_t magic;
	uint32_t search_mode;
	uint64_t max_workspace_bytes;
	uint32_t reduction_scheme_mask;
	uint32_t min_align[4]; /* A, B, C, D, in bytes */
	float max_waves;
	uint64_t impl_mask;
};

/* The dummy algorithm's words in cublasLtMatmulAlgo_t::data. */
enum { ALGO_WORD_MAGIC = 0, ALGO_WORD_ALIGN = 1 /* 4 words: A, B, C, D */ };

void s_say(const char *fn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void s_say(const char *fn, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "cudaemu: %s: ", fn);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
}

const char *s_status_string(cublasStatus_t st)
{
	switch (st) {
	case CUBLAS_STATUS_SUCCESS:
		return "the operation completed successfully";
	case CUBLAS_STATUS_NOT_INITIALIZED:
		return "the library was not initialized";
	case CUBLAS_STATUS_ALLOC_FAILED:
		return "the resource allocation failed";
	case CUBLAS_STATUS_INVALID_VALUE:
		return "an invalid numeric value was used as an argument";
	case CUBLAS_STATUS_ARCH_MISMATCH:
		return "an absent device architectural feature is required";
	case CUBLAS_STATUS_MAPPING_ERROR:
		return "an access to GPU memory space failed";
	case CUBLAS_STATUS_EXECUTION_FAILED:
		return "the GPU program failed to execute";
	case CUBLAS_STATUS_INTERNAL_ERROR:
		return "an internal operation failed";
	case CUBLAS_STATUS_NOT_SUPPORTED:
		return "the functionality requested is not supported";
	case CUBLAS_STATUS_LICENSE_ERROR:
		return "the functionality requested requires some license and an error was detected when "
		       "trying to check the current licensing";
	}
	return "unknown error";
}

const char *s_type_name(int32_t t)
{
	switch (t) {
	case CUDA_R_16BF:
		return "CUDA_R_16BF";
	case CUDA_R_32F:
		return "CUDA_R_32F";
	case CUDA_R_16F:
		return "CUDA_R_16F";
	case CUDA_R_64F:
		return "CUDA_R_64F";
	}
	return "an unsupported cudaDataType";
}

size_t s_type_bytes(int32_t t)
{
	return t == CUDA_R_16BF ? 2 : 4;
}

const char *s_op_name(int32_t op)
{
	return op == CUBLAS_OP_N ? "N" : op == CUBLAS_OP_T ? "T" : op == CUBLAS_OP_C ? "C" : "?";
}

float s_bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* Round to nearest even; NaN stays a (quiet) NaN. */
uint16_t s_f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x0040u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

/*
 * One operand as the computation sees it: element (i, j) of batch member b
 * is at base + (b * stride + j * ld + i) elements; every such offset lies
 * in [lo, hi), the layout's extent.
 */
struct mat_view {
	const char *name;
	unsigned char *base;
	int32_t type;
	int64_t rows, cols, ld, stride;
	int32_t batch;
	int64_t lo, hi;
};

/* Fill v's extent; false (and a message) when it does not fit in int64. */
bool s_view_init(mat_view *v, const char *fn, const char *name, const void *base, int32_t type,
                 int64_t rows, int64_t cols, int64_t ld, int64_t stride, int32_t batch)
{
	v->name = name;
	v->base = (unsigned char *)base;
	v->type = type;
	v->rows = rows;
	v->cols = cols;
	v->ld = ld;
	v->stride = batch > 1 ? stride : 0;
	v->batch = batch;
	v->lo = v->hi = 0;
	if (rows <= 0 || cols <= 0 || batch <= 0)
		return true;
	int64_t last, span, lo = 0, hi;
	if (__builtin_mul_overflow(cols - 1, ld, &last) || __builtin_add_overflow(last, rows, &last) ||
	    __builtin_mul_overflow((int64_t)(batch - 1), v->stride, &span)) {
		s_say(fn, "%s: the extent of %lld x %lld (ld %lld, batch %d, stride %lld) overflows", name,
		      (long long)rows, (long long)cols, (long long)ld, batch, (long long)stride);
		return false;
	}
	if (span < 0)
		lo = span;
	else if (__builtin_add_overflow(last, span, &last)) {
		s_say(fn, "%s: the extent overflows", name);
		return false;
	}
	hi = last;
	v->lo = lo;
	v->hi = hi;
	return true;
}

[[noreturn]] void s_out_of_extent(const mat_view &v, int32_t b, int64_t i, int64_t j)
{
	fprintf(stderr,
		"cudaemu: internal error: %s element (%lld, %lld) of batch member %d lies outside its "
		"layout's extent\n",
		v.name, (long long)i, (long long)j, b);
	abort();
}

int64_t s_offset(const mat_view &v, int32_t b, int64_t i, int64_t j)
{
	int64_t off = (int64_t)b * v.stride + j * v.ld + i;
	if (i < 0 || i >= v.rows || j < 0 || j >= v.cols || b < 0 || b >= v.batch || off < v.lo ||
	    off >= v.hi)
		s_out_of_extent(v, b, i, j);
	return off;
}

float s_load(const mat_view &v, int32_t b, int64_t i, int64_t j)
{
	int64_t off = s_offset(v, b, i, j);
	if (v.type == CUDA_R_16BF) {
		uint16_t h;
		memcpy(&h, v.base + off * 2, 2);
		return s_bf16_to_f32(h);
	}
	float f;
	memcpy(&f, v.base + off * 4, 4);
	return f;
}

void s_store(const mat_view &v, int32_t b, int64_t i, int64_t j, float x)
{
	int64_t off = s_offset(v, b, i, j);
	if (v.type == CUDA_R_16BF) {
		uint16_t h = s_f32_to_bf16(x);
		memcpy(v.base + off * 2, &h, 2);
	} else {
		memcpy(v.base + off * 4, &x, 4);
	}
}

/* Byte range [*lo, *hi) of the extent; empty when the view is. */
void s_byte_range(const mat_view &v, uintptr_t *lo, uintptr_t *hi)
{
	size_t eb = s_type_bytes(v.type);
	*lo = (uintptr_t)v.base + (uintptr_t)(v.lo * (int64_t)eb);
	*hi = (uintptr_t)v.base + (uintptr_t)(v.hi * (int64_t)eb);
}

/* Calls fn(byte offset) for the first byte of every element of v. */
template <typename F> void s_each_element(const mat_view &v, F fn)
{
	size_t eb = s_type_bytes(v.type);
	for (int32_t b = 0; b < v.batch; b++)
		for (int64_t j = 0; j < v.cols; j++)
			for (int64_t i = 0; i < v.rows; i++)
				fn((uintptr_t)v.base + (uintptr_t)(s_offset(v, b, i, j) * (int64_t)eb));
}

/* Whether an element of x shares a byte with an element of y. Exact:
 * extents that interleave without touching (column slices of one buffer)
 * do not count. */
bool s_views_overlap(const mat_view &x, const mat_view &y)
{
	uintptr_t xlo, xhi, ylo, yhi;
	s_byte_range(x, &xlo, &xhi);
	s_byte_range(y, &ylo, &yhi);
	uintptr_t lo = xlo > ylo ? xlo : ylo, hi = xhi < yhi ? xhi : yhi;
	if (xlo == xhi || ylo == yhi || lo >= hi)
		return false;
	std::vector<bool> used(hi - lo, false);
	size_t xb = s_type_bytes(x.type), yb = s_type_bytes(y.type);
	s_each_element(x, [&](uintptr_t p) {
		for (size_t k = 0; k < xb; k++)
			if (p + k >= lo && p + k < hi)
				used[p + k - lo] = true;
	});
	bool hit = false;
	s_each_element(y, [&](uintptr_t p) {
		for (size_t k = 0; k < yb && !hit; k++)
			if (p + k >= lo && p + k < hi && used[p + k - lo])
				hit = true;
	});
	return hit;
}

/* Whether two members of a strided batch share an element (an output
 * written twice). Member t apart starts t * |stride| elements on; with that
 * distance q columns and r rows, it meets the first member's column q
 * (r < rows) or q + 1 (r + rows > ld). */
bool s_batch_overlaps(const mat_view &v)
{
	if (v.batch <= 1 || v.rows <= 0 || v.cols <= 0)
		return false;
	int64_t s = v.stride < 0 ? -v.stride : v.stride;
	if (s == 0)
		return true;
	int64_t one = (v.cols - 1) * v.ld + v.rows; /* extent of one member */
	for (int64_t t = 1; t < v.batch; t++) {
		int64_t d = t * s;
		if (d >= one)
			break;
		int64_t q = v.ld > 0 ? d / v.ld : 0, r = v.ld > 0 ? d % v.ld : d;
		if ((r < v.rows && q < v.cols) || (r + v.rows > v.ld && q + 1 < v.cols))
			return true;
	}
	return false;
}

/* The allocation check, when the runtime provides one. */
void s_check_alloc(const char *fn, const mat_view &v)
{
	if (!cudaemu_blas_check_range || v.lo == v.hi)
		return;
	uintptr_t lo, hi;
	s_byte_range(v, &lo, &hi);
	char what[128];
	snprintf(what, sizeof what, "%s: %s", fn, v.name);
	cudaemu_blas_check_range((const void *)lo, hi - lo, what);
}

/* The pointwise function after the bias, from the epilogue. */
enum act_kind { ACT_NONE, ACT_GELU, ACT_DGELU };

/* A problem ready to run: shapes checked, views built. */
struct gemm_problem {
	const char *fn;
	int64_t m, n, k;
	int32_t batch;
	int32_t op_a, op_b;
	mat_view a, b, c, d;
	float alpha, beta;
	uint32_t epilogue; /* cublasLtEpilogue_t (0 on the cuBLAS path) */
	bool has_bias;
	mat_view bias; /* rows m, cols 1, stride = bias batch stride */
	act_kind act;
	bool aux_out, aux_in; /* aux written (GELU_AUX*) or read (DGELU) */
	mat_view aux;         /* m x n, ld and stride from the descriptor */
};

/* The engine's GELU (cuda_kernels.cu's s_gelu and s_gelu_grad, the tanh
 * approximation), term for term, so both compute the same fp32 value. */
const float GELU_K = 0.7978845608028654f; /* sqrt(2 / pi) */

float s_gelu(float v)
{
	const float u = GELU_K * (v + 0.044715f * v * v * v);
	return 0.5f * v * (1.0f + tanhf(u));
}

/* d * gelu'(v) */
float s_gelu_grad(float d, float v)
{
	const float u = GELU_K * (v + 0.044715f * v * v * v);
	const float th = tanhf(u);
	const float du = GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
	return d * (0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du);
}

/*
 * Checks that hold for every path once shapes agree: D's batch members
 * apart, D apart from A, B and the bias, C either D itself (same layout) or
 * apart from D, every pointer present that is read, every extent inside its
 * allocation. CUBLAS_STATUS_SUCCESS or INVALID_VALUE with one line said.
 */
cublasStatus_t s_check_memory(const gemm_problem &p)
{
	const char *fn = p.fn;
	bool reads_ab = p.alpha != 0.0f && p.k > 0;
	bool reads_c = p.beta != 0.0f;
	if (p.d.hi > p.d.lo && !p.d.base) {
		s_say(fn, "D is NULL");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (reads_ab && p.a.hi > p.a.lo && !p.a.base) {
		s_say(fn, "A is NULL");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (reads_ab && p.b.hi > p.b.lo && !p.b.base) {
		s_say(fn, "B is NULL");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (reads_c && p.c.hi > p.c.lo && !p.c.base) {
		s_say(fn, "C is NULL and beta is not 0");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (s_batch_overlaps(p.d)) {
		s_say(fn,
		      "the %d members of %s's batch overlap (batch stride %lld for %lld x %lld with ld %lld): "
		      "outputs would be written twice",
		      p.d.batch, p.d.name, (long long)p.d.stride, (long long)p.d.rows, (long long)p.d.cols,
		      (long long)p.d.ld);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (reads_ab && s_views_overlap(p.d, p.a)) {
		s_say(fn, "D overlaps A: the product would read what it writes");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (reads_ab && s_views_overlap(p.d, p.b)) {
		s_say(fn, "D overlaps B: the product would read what it writes");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (p.has_bias && s_views_overlap(p.d, p.bias)) {
		s_say(fn, "D overlaps the bias vector");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	/* DGELU reads aux while writing D, GELU_AUX writes both: either way
	 * a shared element is a race on the GPU */
	if ((p.aux_out || p.aux_in) && s_views_overlap(p.d, p.aux)) {
		s_say(fn, "D overlaps the epilogue's aux matrix (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER)");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (p.aux_out) {
		if (s_batch_overlaps(p.aux)) {
			s_say(fn,
			      "the %d members of the aux matrix's batch overlap (CUBLASLT_MATMUL_DESC_EPILOGUE_"
			      "AUX_BATCH_STRIDE %lld for %lld x %lld with ld %lld): outputs would be written twice",
			      p.aux.batch, (long long)p.aux.stride, (long long)p.aux.rows, (long long)p.aux.cols,
			      (long long)p.aux.ld);
			return CUBLAS_STATUS_INVALID_VALUE;
		}
		if ((reads_ab && (s_views_overlap(p.aux, p.a) || s_views_overlap(p.aux, p.b))) ||
		    (reads_c && s_views_overlap(p.aux, p.c)) ||
		    (p.has_bias && s_views_overlap(p.aux, p.bias))) {
			s_say(fn, "the aux matrix the epilogue writes overlaps A, B, C or the bias: the product "
				  "would read what it writes");
			return CUBLAS_STATUS_INVALID_VALUE;
		}
	}
	if (reads_c && p.c.base != p.d.base && s_views_overlap(p.d, p.c)) {
		s_say(fn, "C and D overlap without being the same matrix (in place needs C == D)");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (reads_ab) {
		s_check_alloc(fn, p.a);
		s_check_alloc(fn, p.b);
	}
	if (reads_c)
		s_check_alloc(fn, p.c);
	if (p.has_bias)
		s_check_alloc(fn, p.bias);
	if (p.aux_out || p.aux_in)
		s_check_alloc(fn, p.aux);
	s_check_alloc(fn, p.d);
	return CUBLAS_STATUS_SUCCESS;
}

/*
 * D = alpha * op(A) op(B) + beta * C [+ bias], then the epilogue's GELU,
 * member by member. op(A)'s rows and op(B)'s columns are unpacked to fp32
 * first, so the inner loop is a plain fp32 dot product in k order. C is
 * read before D is written at the same element, so C == D is safe.
 */
void s_gemm_run(const gemm_problem &p)
{
	const int64_t m = p.m, n = p.n, k = p.k;
	const bool product = p.alpha != 0.0f && k > 0;
	std::vector<float> ap, bp;
	if (product) {
		ap.resize((size_t)(m * k)); /* (m, k): op(A) by rows */
		bp.resize((size_t)(n * k)); /* (n, k): op(B) by columns */
	}
	for (int32_t b = 0; b < p.batch; b++) {
		if (product) {
			for (int64_t i = 0; i < m; i++)
				for (int64_t l = 0; l < k; l++)
					ap[(size_t)(i * k + l)] = p.op_a == CUBLAS_OP_N ? s_load(p.a, b, i, l)
										   : s_load(p.a, b, l, i);
			for (int64_t j = 0; j < n; j++)
				for (int64_t l = 0; l < k; l++)
					bp[(size_t)(j * k + l)] = p.op_b == CUBLAS_OP_N ? s_load(p.b, b, l, j)
										   : s_load(p.b, b, j, l);
		}
		for (int64_t j = 0; j < n; j++) {
			for (int64_t i = 0; i < m; i++) {
				float t = 0.0f;
				if (product) {
					const float *x = &ap[(size_t)(i * k)], *y = &bp[(size_t)(j * k)];
					float acc = 0.0f;
					for (int64_t l = 0; l < k; l++)
						acc += x[l] * y[l];
					t = p.alpha * acc;
				}
				if (p.beta != 0.0f)
					t += p.beta * s_load(p.c, b, i, j);
				if (p.has_bias)
					t += s_load(p.bias, b, i, 0);
				if (p.aux_out)
					s_store(p.aux, b, i, j, t);
				if (p.act == ACT_GELU)
					t = s_gelu(t);
				else if (p.act == ACT_DGELU)
					t = s_gelu_grad(t, s_load(p.aux, b, i, j));
				s_store(p.d, b, i, j, t);
			}
		}
	}
}

/* Operand types cuBLAS(Lt) accepts with fp32 compute and scale: A and B
 * both bf16 or both fp32; C bf16 or fp32 for bf16 operands, fp32 for fp32. */
cublasStatus_t s_check_types(const char *fn, int32_t ta, int32_t tb, int32_t tc)
{
	bool ok = ta == tb && ((ta == CUDA_R_16BF && (tc == CUDA_R_16BF || tc == CUDA_R_32F)) ||
			       (ta == CUDA_R_32F && tc == CUDA_R_32F));
	if (!ok) {
		s_say(fn, "types A %s, B %s, C %s are not supported (bf16 or fp32 operands, fp32 compute)",
		      s_type_name(ta), s_type_name(tb), s_type_name(tc));
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	return CUBLAS_STATUS_SUCCESS;
}

bool s_op_valid(int32_t op)
{
	return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

emu_layout *s_layout(cublasLtMatrixLayout_t l)
{
	emu_layout *e = reinterpret_cast<emu_layout *>(l);
	return e && e->magic == LAYOUT_MAGIC ? e : nullptr;
}

emu_desc *s_desc(cublasLtMatmulDesc_t d)
{
	emu_desc *e = reinterpret_cast<emu_desc *>(d);
	return e && e->magic == DESC_MAGIC ? e : nullptr;
}

emu_pref *s_pref(cublasLtMatmulPreference_t p)
{
	emu_pref *e = reinterpret_cast<emu_pref *>(p);
	return e && e->magic == PREF_MAGIC ? e : nullptr;
}

/* One attribute's size against what the library stores. */
bool s_size_ok(const char *fn, const char *attr, const void *buf, size_t got, size_t want)
{
	if (!buf) {
		s_say(fn, "%s: buf is NULL", attr);
		return false;
	}
	if (got != want) {
		s_say(fn, "%s: sizeInBytes is %zu, the attribute holds %zu bytes", attr, got, want);
		return false;
	}
	return true;
}

bool s_same_layout(const emu_layout *x, const emu_layout *y)
{
	return x->type == y->type && x->rows == y->rows && x->cols == y->cols && x->ld == y->ld &&
	       x->batch_count == y->batch_count &&
	       (x->batch_count == 1 || x->batch_stride == y->batch_stride);
}

/* "A 64 x 32 (ld 64, batch 1)" into buf. */
const char *s_describe(char *buf, size_t len, const char *name, const emu_layout *l)
{
	snprintf(buf, len, "%s %llu x %llu (ld %lld, batch %d)", name, (unsigned long long)l->rows,
		 (unsigned long long)l->cols, (long long)l->ld, l->batch_count);
	return buf;
}

/* The epilogues the emulator runs, as its messages list them. */
const char *const EPILOGUES_SUPPORTED = "CUBLASLT_EPILOGUE_DEFAULT, _BIAS, _GELU, _GELU_BIAS, _GELU_AUX, "
					"_GELU_AUX_BIAS or _DGELU";

bool s_epilogue_supported(uint32_t e)
{
	switch (e) {
	case CUBLASLT_EPILOGUE_DEFAULT:
	case CUBLASLT_EPILOGUE_BIAS:
	case CUBLASLT_EPILOGUE_GELU:
	case CUBLASLT_EPILOGUE_GELU_BIAS:
	case CUBLASLT_EPILOGUE_GELU_AUX:
	case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
	case CUBLASLT_EPILOGUE_DGELU:
		return true;
	}
	return false;
}

/*
 * The epilogue's bias and aux matrix into p (m, n, batch set): the types,
 * AUX_LD and AUX_BATCH_STRIDE as cuBLASLt requires them, then the views.
 * SUCCESS, or INVALID_VALUE / NOT_SUPPORTED with one line said.
 */
cublasStatus_t s_lt_epilogue(const char *fn, const emu_desc *op, int32_t d_type, gemm_problem *p)
{
	const uint32_t e = op->epilogue;
	if (!s_epilogue_supported(e)) {
		s_say(fn, "epilogue %u is not supported (%s)", e, EPILOGUES_SUPPORTED);
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	p->epilogue = e;
	p->act = e == CUBLASLT_EPILOGUE_DGELU ? ACT_DGELU
		 : e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
				 e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS
			 ? ACT_GELU
			 : ACT_NONE;
	p->aux_out = e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
	p->aux_in = e == CUBLASLT_EPILOGUE_DGELU;
	/* the _BIAS epilogues are the ones with BIAS's bit; DGELU (192) has
	 * none, so a bias pointer set for it is not read */
	p->has_bias = (e & CUBLASLT_EPILOGUE_BIAS) != 0;
	if (p->has_bias) {
		int32_t bt = op->bias_type == -1 ? d_type : op->bias_type;
		if (bt != d_type) {
			s_say(fn, "bias type %s with D of type %s is not supported (bias has D's type)",
			      s_type_name(bt), s_type_name(d_type));
			return CUBLAS_STATUS_NOT_SUPPORTED;
		}
		if (!s_view_init(&p->bias, fn, "bias", op->bias, bt, p->m, 1, p->m, op->bias_batch_stride,
				 p->batch))
			return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (!p->aux_out && !p->aux_in)
		return CUBLAS_STATUS_SUCCESS;
	int32_t at = op->aux_type == -1 ? d_type : op->aux_type;
	if (at != d_type) {
		s_say(fn,
		      "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE %s with D of type %s is not supported (the "
		      "GELU input has D's type)",
		      s_type_name(at), s_type_name(d_type));
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	if (op->aux_ld < p->m || op->aux_ld % 8 != 0) {
		s_say(fn,
		      "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD is %lld: it must be at least D's %lld rows and "
		      "divisible by 8",
		      (long long)op->aux_ld, (long long)p->m);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (p->batch > 1 && op->aux_batch_stride % 8 != 0) {
		s_say(fn, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE is %lld: it must be divisible by 8",
		      (long long)op->aux_batch_stride);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (!s_view_init(&p->aux, fn, "aux", op->aux, at, p->m, p->n, op->aux_ld, op->aux_batch_stride,
			 p->batch))
		return CUBLAS_STATUS_INVALID_VALUE;
	return CUBLAS_STATUS_SUCCESS;
}

/*
 * The cuBLASLt problem from its descriptors (pointers may be NULL for the
 * heuristic): everything cuBLASLt validates, then the views. SUCCESS, or
 * INVALID_VALUE / NOT_SUPPORTED with one line said.
 */
cublasStatus_t s_lt_problem(const char *fn, cublasLtMatmulDesc_t op_desc, cublasLtMatrixLayout_t adesc,
                            cublasLtMatrixLayout_t bdesc, cublasLtMatrixLayout_t cdesc,
                            cublasLtMatrixLayout_t ddesc, const void *a, const void *b, const void *c,
                            void *d, gemm_problem *ret)
{
	const emu_desc *op = s_desc(op_desc);
	if (!op) {
		s_say(fn, "the matmul descriptor is NULL or not from cublasLtMatmulDescCreate");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	const emu_layout *la = s_layout(adesc), *lb = s_layout(bdesc), *lc = s_layout(cdesc),
			 *ld = s_layout(ddesc);
	const char *names[4] = {"Adesc", "Bdesc", "Cdesc", "Ddesc"};
	const emu_layout *all[4] = {la, lb, lc, ld};
	for (int i = 0; i < 4; i++)
		if (!all[i]) {
			s_say(fn, "%s is NULL or not from cublasLtMatrixLayoutCreate", names[i]);
			return CUBLAS_STATUS_INVALID_VALUE;
		}
	if (op->compute_type != CUBLAS_COMPUTE_32F && op->compute_type != CUBLAS_COMPUTE_32F_PEDANTIC) {
		s_say(fn, "compute type %d is not supported (CUBLAS_COMPUTE_32F only)", op->compute_type);
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	if (op->scale_type != CUDA_R_32F) {
		s_say(fn, "scale type %s is not supported (CUDA_R_32F only)", s_type_name(op->scale_type));
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	if (op->pointer_mode != CUBLASLT_POINTER_MODE_HOST) {
		s_say(fn, "pointer mode %d is not supported (CUBLASLT_POINTER_MODE_HOST only)",
		      op->pointer_mode);
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	if (!s_op_valid(op->trans_a) || !s_op_valid(op->trans_b)) {
		s_say(fn, "TRANSA %d / TRANSB %d: not a cublasOperation_t", op->trans_a, op->trans_b);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (op->trans_c != CUBLAS_OP_N) {
		s_say(fn, "TRANSC must be CUBLAS_OP_N (got %d)", op->trans_c);
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	for (int i = 0; i < 4; i++) {
		const emu_layout *l = all[i];
		if (l->order != CUBLASLT_ORDER_COL || l->plane_offset != 0 || l->batch_mode != 0) {
			s_say(fn, "%s: only column-major, non-planar, strided-batch layouts are supported",
			      names[i]);
			return CUBLAS_STATUS_NOT_SUPPORTED;
		}
		if (l->rows > INT32_MAX || l->cols > INT32_MAX) {
			s_say(fn, "%s: %llu x %llu exceeds int32", names[i], (unsigned long long)l->rows,
			      (unsigned long long)l->cols);
			return CUBLAS_STATUS_NOT_SUPPORTED;
		}
		if (l->ld < 0 || (uint64_t)l->ld < l->rows) {
			s_say(fn, "%s: ld %lld is less than rows %llu (column-major: ld >= rows)", names[i],
			      (long long)l->ld, (unsigned long long)l->rows);
			return CUBLAS_STATUS_INVALID_VALUE;
		}
		if (l->batch_count < 1) {
			s_say(fn, "%s: batch count %d must be at least 1", names[i], l->batch_count);
			return CUBLAS_STATUS_INVALID_VALUE;
		}
	}
	cublasStatus_t st = s_check_types(fn, la->type, lb->type, lc->type);
	if (st != CUBLAS_STATUS_SUCCESS)
		return st;
	if (lc->type != ld->type) {
		s_say(fn, "C is %s but D is %s: they must have one type", s_type_name(lc->type),
		      s_type_name(ld->type));
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}

	char x[96], y[96];
	const int64_t m = (int64_t)ld->rows, n = (int64_t)ld->cols;
	if (lc->rows != ld->rows || lc->cols != ld->cols) {
		s_say(fn, "%s but %s: C and D must be m x n alike", s_describe(x, sizeof x, "C", lc),
		      s_describe(y, sizeof y, "D", ld));
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	const bool ta = op->trans_a != CUBLAS_OP_N, tb = op->trans_b != CUBLAS_OP_N;
	const int64_t a_m = (int64_t)(ta ? la->cols : la->rows), k = (int64_t)(ta ? la->rows : la->cols);
	if (a_m != m) {
		s_say(fn, "op(A) is %lld x %lld (%s, TRANSA=%s) but D has %lld rows: op(A) must be m x k",
		      (long long)a_m, (long long)k, s_describe(x, sizeof x, "A", la), s_op_name(op->trans_a),
		      (long long)m);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	const int64_t b_k = (int64_t)(tb ? lb->cols : lb->rows), b_n = (int64_t)(tb ? lb->rows : lb->cols);
	if (b_k != k || b_n != n) {
		s_say(fn,
		      "op(B) is %lld x %lld (%s, TRANSB=%s) but must be k x n = %lld x %lld (k from op(A), "
		      "n from D)",
		      (long long)b_k, (long long)b_n, s_describe(x, sizeof x, "B", lb), s_op_name(op->trans_b),
		      (long long)k, (long long)n);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (la->batch_count != ld->batch_count || lb->batch_count != ld->batch_count ||
	    lc->batch_count != ld->batch_count) {
		s_say(fn, "batch counts differ: A %d, B %d, C %d, D %d", la->batch_count, lb->batch_count,
		      lc->batch_count, ld->batch_count);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (c == d && c && !s_same_layout(lc, ld)) {
		s_say(fn, "in place (C == D) but %s and %s differ: in place needs one layout",
		      s_describe(x, sizeof x, "C", lc), s_describe(y, sizeof y, "D", ld));
		return CUBLAS_STATUS_INVALID_VALUE;
	}

	gemm_problem p;
	memset(&p, 0, sizeof p);
	p.fn = fn;
	p.m = m;
	p.n = n;
	p.k = k;
	p.batch = ld->batch_count;
	p.op_a = op->trans_a == CUBLAS_OP_N ? CUBLAS_OP_N : CUBLAS_OP_T;
	p.op_b = op->trans_b == CUBLAS_OP_N ? CUBLAS_OP_N : CUBLAS_OP_T;
	st = s_lt_epilogue(fn, op, ld->type, &p);
	if (st != CUBLAS_STATUS_SUCCESS)
		return st;
	if (!s_view_init(&p.a, fn, "A", a, la->type, (int64_t)la->rows, (int64_t)la->cols, la->ld,
			 la->batch_stride, p.batch) ||
	    !s_view_init(&p.b, fn, "B", b, lb->type, (int64_t)lb->rows, (int64_t)lb->cols, lb->ld,
			 lb->batch_stride, p.batch) ||
	    !s_view_init(&p.c, fn, "C", c, lc->type, m, n, lc->ld, lc->batch_stride, p.batch) ||
	    !s_view_init(&p.d, fn, "D", d, ld->type, m, n, ld->ld, ld->batch_stride, p.batch))
		return CUBLAS_STATUS_INVALID_VALUE;
	*ret = p;
	return CUBLAS_STATUS_SUCCESS;
}

/* Largest power of two (at most 256) dividing the address. */
uint32_t s_align_of(const void *ptr)
{
	uintptr_t a = (uintptr_t)ptr;
	uint32_t al = 256;
	while (al > 1 && a % al != 0)
		al /= 2;
	return al;
}

/* What CUDAEMU_LT_NO_ALGO asks: 0 (find algorithms), 1 (none), 2 (none
 * for an epilogue other than DEFAULT; "bias" is its name from when BIAS
 * was the only other one). */
int s_no_algo_mode(void)
{
	const char *e = getenv("CUDAEMU_LT_NO_ALGO");
	if (!e || !*e || strcmp(e, "0") == 0)
		return 0;
	return strcmp(e, "epilogue") == 0 || strcmp(e, "bias") == 0 ? 2 : 1;
}

} /* namespace */

extern "C" {

/* ---- cuBLASLt ---- */

/* Status text, as cuBLAS words it; never NULL. */
const char *cublasLtGetStatusString(cublasStatus_t status)
{
	return s_status_string(status);
}

/* A new handle in *lightHandle (free with cublasLtDestroy). */
cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle)
{
	if (!lightHandle) {
		s_say("cublasLtCreate", "lightHandle is NULL");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	cublasLtContext *h = new cublasLtContext;
	h->magic = LT_MAGIC;
	*lightHandle = h;
	return CUBLAS_STATUS_SUCCESS;
}

/* Frees the handle; NOT_INITIALIZED for NULL or a foreign pointer. */
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle)
{
	if (!lightHandle || lightHandle->magic != LT_MAGIC) {
		s_say("cublasLtDestroy", "not a handle from cublasLtCreate");
		return CUBLAS_STATUS_NOT_INITIALIZED;
	}
	lightHandle->magic = DEAD_MAGIC;
	delete lightHandle;
	return CUBLAS_STATUS_SUCCESS;
}

/* A column-major rows x cols layout of `type` with leading dimension ld,
 * batch 1; free with cublasLtMatrixLayoutDestroy. Types: bf16, fp32 (else
 * NOT_SUPPORTED). Shapes are checked where the layout is used. */
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld)
{
	if (!matLayout) {
		s_say("cublasLtMatrixLayoutCreate", "matLayout is NULL");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (type != CUDA_R_16BF && type != CUDA_R_32F) {
		s_say("cublasLtMatrixLayoutCreate", "cudaDataType %d is not supported (CUDA_R_16BF, CUDA_R_32F)",
		      (int)type);
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	emu_layout *l = new emu_layout;
	memset(l, 0, sizeof *l);
	l->magic = LAYOUT_MAGIC;
	l->type = type;
	l->order = CUBLASLT_ORDER_COL;
	l->rows = rows;
	l->cols = cols;
	l->ld = ld;
	l->batch_count = 1;
	*matLayout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
	return CUBLAS_STATUS_SUCCESS;
}

/* Frees the layout; accepts NULL. */
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout)
{
	if (!matLayout)
		return CUBLAS_STATUS_SUCCESS;
	emu_layout *l = s_layout(matLayout);
	if (!l) {
		s_say("cublasLtMatrixLayoutDestroy", "not a layout from cublasLtMatrixLayoutCreate");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	l->magic = DEAD_MAGIC;
	delete l;
	return CUBLAS_STATUS_SUCCESS;
}

/* Sets one layout attribute; INVALID_VALUE when buf is NULL or its size is
 * not the attribute's, NOT_SUPPORTED for values the emulator lacks. */
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr, const void *buf,
                                                size_t sizeInBytes)
{
	const char *fn = "cublasLtMatrixLayoutSetAttribute";
	emu_layout *l = s_layout(matLayout);
	if (!l) {
		s_say(fn, "not a layout from cublasLtMatrixLayoutCreate");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	switch (attr) {
	case CUBLASLT_MATRIX_LAYOUT_TYPE: {
		uint32_t v;
		if (!s_size_ok(fn, "CUBLASLT_MATRIX_LAYOUT_TYPE", buf, sizeInBytes, sizeof v))
			return CUBLAS_STATUS_INVALID_VALUE;
		memcpy(&v, buf, sizeof v);
		if (v != CUDA_R_16BF && v != CUDA_R_32F) {
			s_say(fn, "type %s is not supported", s_type_name((int32_t)v));
			return CUBLAS_STATUS_NOT_SUPPORTED;
		}
		l->type = (int32_t)v;
		return CUBLAS_STATUS_SUCCESS;
	}
	case CUBLASLT_MATRIX_LAYOUT_ORDER:
		if (!s_size_ok(fn, "CUBLASLT_MATRIX_LAYOUT_ORDER", buf, sizeInBytes, sizeof l->order))
			return CUBLAS_STATUS_INVALID_VALUE;
		memcpy(&l->order, buf, sizeof l->order);
		if (l->order != CUBLASLT_ORDER_COL) {
			s_say(fn, "order %d is not supported (CUBLASLT_ORDER_COL only)", l->order);
			l->order = CUBLASLT_ORDER_COL;
			return CUBLAS_STATUS_NOT_SUPPORTED;
		}
		return CUBLAS_STATUS_SUCCESS;
	case CUBLASLT_MATRIX_LAYOUT_ROWS:
		if (!s_size_ok(fn, "CUBLASLT_MATRIX_LAYOUT_ROWS", buf, sizeInBytes, sizeof l->rows))
			return CUBLAS_STATUS_INVALID_VALUE;
		memcpy(&l->rows, buf, sizeof l->rows);
		return CUBLAS_STATUS_SUCCESS;
	case CUBLASLT_MATRIX_LAYOUT_COLS:
		if (!s_size_ok(fn, "CUBLASLT_MATRIX_LAYOUT_COLS", buf, sizeInBytes, sizeof l->cols))
			return CUBLAS_STATUS_INVALID_VALUE;
		memcpy(&l->cols, buf, sizeof l->cols);
		return CUBLAS_STATUS_SUCCESS;
	case CUBLASLT_MATRIX_LAYOUT_LD:
		if (!s_size_ok(fn, "CUBLASLT_MATRIX_LAYOUT_LD", buf, sizeInBytes, sizeof l->ld))
			return CUBLAS_STATUS_INVALID_VALUE;
		memcpy(&l->ld, buf, sizeof l->ld);
		return CUBLAS_STATUS_SUCCESS;
	case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
		if (!s_size_ok(fn, "CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT", buf, sizeInBytes,
			       sizeof l->batch_count))
			return CUBLAS_STATUS_INVALID_VALUE;
		memcpy(&l->batch_count, buf, sizeof l->batch_count);
		return CUBLAS_STATUS_SUCCESS;
	case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
		if (!s_size_ok(fn, "CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET", buf, sizeInBytes,
			       sizeof l->batch_stride))
			return CUBLAS_STATUS_INVALID_VALUE;
		memcpy(&l->batch_stride, buf, sizeof l->batch_stride);
		return CUBLAS_STATUS_SUCCESS;
	case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: {
		int64_t v;
		if (!s_size_ok(fn, "CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET", buf, sizeInBytes, sizeof v))
			return CUBLAS_STATUS_INVALID_VALUE;
		memcpy(&v, buf, sizeof v);
		if (v != 0) {
			s_say(fn, "planar layouts (CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET %lld) are not supported",
			      (long long)v);
			return CUBLAS_STATUS_NOT_SUPPORTED;
		}
		return CUBLAS_STATUS_SUCCESS;
	}
	case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE: {
		uint32_t v;
		if (!s_size_ok(fn, "CUBLASLT_MATRIX_LAYOUT_BATCH_MODE", buf, sizeInBytes, sizeof v))
			return CUBLAS_STATUS_INVALID_VALUE;
		memcpy(&v, buf, sizeof v);
		if (v != 0) {
			s_say(fn, "batch mode %u is not supported (strided batches only)", v);
			return CUBLAS_STATUS_NOT_SUPPORTED;
		}
		return CUBLAS_STATUS_SUCCESS;
	}
	}
	s_say(fn, "layout attribute %d is not supported", (int)attr);
	return CUBLAS_STATUS_NOT_SUPPORTED;
}

/* A matmul descriptor (TRANSA = TRANSB = N, default epilogue, host scalars);
 * free with cublasLtMatmulDescDestroy. The compute and scale types are
 * checked where the descriptor is used (CUBLAS_COMPUTE_32F, CUDA_R_32F). */
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType)
{
	if (!matmulDesc) {
		s_say("cublasLtMatmulDescCreate", "matmulDesc is NULL");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	emu_desc *d = new emu_desc;
	memset(d, 0, sizeof *d);
	d->magic = DESC_MAGIC;
	d->compute_type = computeType;
	d->scale_type = scaleType;
	d->pointer_mode = CUBLASLT_POINTER_MODE_HOST;
	d->trans_a = d->trans_b = d->trans_c = CUBLAS_OP_N;
	d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
	d->bias_type = -1;
	d->aux_type = -1;
	*matmulDesc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
	return CUBLAS_STATUS_SUCCESS;
}

/* Frees the descriptor; accepts NULL. */
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc)
{
	if (!matmulDesc)
		return CUBLAS_STATUS_SUCCESS;
	emu_desc *d = s_desc(matmulDesc);
	if (!d) {
		s_say("cublasLtMatmulDescDestroy", "not a descriptor from cublasLtMatmulDescCreate");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	d->magic = DEAD_MAGIC;
	delete d;
	return CUBLAS_STATUS_SUCCESS;
}

/* Sets one descriptor attribute. Supported: COMPUTE_TYPE, SCALE_TYPE,
 * POINTER_MODE (host), TRANSA, TRANSB, TRANSC, EPILOGUE (DEFAULT, BIAS,
 * GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU), BIAS_POINTER,
 * BIAS_BATCH_STRIDE, BIAS_DATA_TYPE, EPILOGUE_AUX_POINTER, _AUX_LD,
 * _AUX_BATCH_STRIDE, _AUX_DATA_TYPE; anything else is NOT_SUPPORTED.
 * INVALID_VALUE when buf is NULL or its size is wrong. */
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr, const void *buf,
                                              size_t sizeInBytes)
{
	const char *fn = "cublasLtMatmulDescSetAttribute";
	emu_desc *d = s_desc(matmulDesc);
	if (!d) {
		s_say(fn, "not a descriptor from cublasLtMatmulDescCreate");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	int32_t *i32 = nullptr;
	const char *name = nullptr;
	switch (attr) {
	case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
		i32 = &d->compute_type, name = "CUBLASLT_MATMUL_DESC_COMPUTE_TYPE";
		break;
	case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
		i32 = &d->scale_type, name = "CUBLASLT_MATMUL_DESC_SCALE_TYPE";
		break;
	case CUBLASLT_MATMUL_DESC_POINTER_MODE:
		i32 = &d->pointer_mode, name = "CUBLASLT_MATMUL_DESC_POINTER_MODE";
		break;
	case CUBLASLT_MATMUL_DESC_TRANSA:
		i32 = &d->trans_a, name = "CUBLASLT_MATMUL_DESC_TRANSA";
		break;
	case CUBLASLT_MATMUL_DESC_TRANSB:
		i32 = &d->trans_b, name = "CUBLASLT_MATMUL_DESC_TRANSB";
		break;
	case CUBLASLT_MATMUL_DESC_TRANSC:
		i32 = &d->trans_c, name = "CUBLASLT_MATMUL_DESC_TRANSC";
		break;
	case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: {
		int32_t v;
		if (!s_size_ok(fn, "CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE", buf, sizeInBytes, sizeof v))
			return CUBLAS_STATUS_INVALID_VALUE;
		memcpy(&v, buf, sizeof v);
		if (v != -1 && v != CUDA_R_16BF && v != CUDA_R_32F) {
			s_say(fn, "bias type %s (%d) is not supported", s_type_name(v), v);
			return CUBLAS_STATUS_NOT_SUPPORTED;
		}
		d->bias_type = v;
		return CUBLAS_STATUS_SUCCESS;
	}
	case CUBLASLT_MATMUL_DESC_EPILOGUE: {
		uint32_t v;
		if (!s_size_ok(fn, "CUBLASLT_MATMUL_DESC_EPILOGUE", buf, sizeInBytes, sizeof v))
			return CUBLAS_STATUS_INVALID_VALUE;
		memcpy(&v, buf, sizeof v);
		if (!s_epilogue_supported(v)) {
			s_say(fn, "epilogue %u is not supported (%s)", v, EPILOGUES_SUPPORTED);
			return CUBLAS_STATUS_NOT_SUPPORTED;
		}
		d->epilogue = v;
		return CUBLAS_STATUS_SUCCESS;
	}
	case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
		if (!s_size_ok(fn, "CUBLASLT_MATMUL_DESC_BIAS_POINTER", buf, sizeInBytes, sizeof d->bias))
			return CUBLAS_STATUS_INVALID_VALUE;
		memcpy(&d->bias, buf, sizeof d->bias);
		return CUBLAS_STATUS_SUCCESS;
	case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
		if (!s_size_ok(fn, "CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE", buf, sizeInBytes,
			       sizeof d->bias_batch_stride))
			return CUBLAS_STATUS_INVALID_VALUE;
		memcpy(&d->bias_batch_stride, buf, sizeof d->bias_batch_stride);
		return CUBLAS_STATUS_SUCCESS;
	case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
		if (!s_size_ok(fn, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER", buf, sizeInBytes, sizeof d->aux))
			return CUBLAS_STATUS_INVALID_VALUE;
		memcpy(&d->aux, buf, sizeof d->aux);
		return CUBLAS_STATUS_SUCCESS;
	case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
		if (!s_size_ok(fn, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD", buf, sizeInBytes, sizeof d->aux_ld))
			return CUBLAS_STATUS_INVALID_VALUE;
		memcpy(&d->aux_ld, buf, sizeof d->aux_ld);
		return CUBLAS_STATUS_SUCCESS;
	case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
		if (!s_size_ok(fn, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE", buf, sizeInBytes,
			       sizeof d->aux_batch_stride))
			return CUBLAS_STATUS_INVALID_VALUE;
		memcpy(&d->aux_batch_stride, buf, sizeof d->aux_batch_stride);
		return CUBLAS_STATUS_SUCCESS;
	case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: {
		/* whether it is D's type is checked where D is known */
		int32_t v;
		if (!s_size_ok(fn, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE", buf, sizeInBytes, sizeof v))
			return CUBLAS_STATUS_INVALID_VALUE;
		memcpy(&v, buf, sizeof v);
		if (v != -1 && v != CUDA_R_16BF && v != CUDA_R_32F) {
			s_say(fn, "aux type %s (%d) is not supported (-1, CUDA_R_16BF or CUDA_R_32F, as D)",
			      s_type_name(v), v);
			return CUBLAS_STATUS_NOT_SUPPORTED;
		}
		d->aux_type = v;
		return CUBLAS_STATUS_SUCCESS;
	}
	default:
		s_say(fn, "matmul attribute %d is not supported by cudaemu", (int)attr);
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	if (!s_size_ok(fn, name, buf, sizeInBytes, sizeof *i32))
		return CUBLAS_STATUS_INVALID_VALUE;
	memcpy(i32, buf, sizeof *i32);
	return CUBLAS_STATUS_SUCCESS;
}

/* A preference (no workspace, 256-byte alignments); free with
 * cublasLtMatmulPreferenceDestroy. */
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
	if (!pref) {
		s_say("cublasLtMatmulPreferenceCreate", "pref is NULL");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	emu_pref *p = new emu_pref;
	memset(p, 0, sizeof *p);
	p->magic = PREF_MAGIC;
	p->reduction_scheme_mask = 0xffffffffu;
	for (int i = 0; i < 4; i++)
		p->min_align[i] = 256;
	p->impl_mask = ~(uint64_t)0;
	*pref = reinterpret_cast<cublasLtMatmulPreference_t>(p);
	return CUBLAS_STATUS_SUCCESS;
}

/* Frees the preference; accepts NULL. */
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
	if (!pref)
		return CUBLAS_STATUS_SUCCESS;
	emu_pref *p = s_pref(pref);
	if (!p) {
		s_say("cublasLtMatmulPreferenceDestroy", "not a preference from cublasLtMatmulPreferenceCreate");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	p->magic = DEAD_MAGIC;
	delete p;
	return CUBLAS_STATUS_SUCCESS;
}

/* Sets one preference attribute (all documented ones are accepted; the
 * minimum alignments are enforced by cublasLtMatmul). INVALID_VALUE when buf
 * is NULL, its size is wrong, or an alignment is not a power of two. */
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t sizeInBytes)
{
	const char *fn = "cublasLtMatmulPreferenceSetAttribute";
	emu_pref *p = s_pref(pref);
	if (!p) {
		s_say(fn, "not a preference from cublasLtMatmulPreferenceCreate");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	void *dst = nullptr;
	size_t want = 0;
	const char *name = nullptr;
	int align_slot = -1;
	switch (attr) {
	case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
		dst = &p->search_mode, want = sizeof p->search_mode, name = "CUBLASLT_MATMUL_PREF_SEARCH_MODE";
		break;
	case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
		dst = &p->max_workspace_bytes, want = sizeof p->max_workspace_bytes,
		name = "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES";
		break;
	case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
		dst = &p->reduction_scheme_mask, want = sizeof p->reduction_scheme_mask,
		name = "CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK";
		break;
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
		align_slot = 0, name = "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES";
		break;
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
		align_slot = 1, name = "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES";
		break;
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
		align_slot = 2, name = "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES";
		break;
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
		align_slot = 3, name = "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES";
		break;
	case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT:
		dst = &p->max_waves, want = sizeof p->max_waves, name = "CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT";
		break;
	case CUBLASLT_MATMUL_PREF_IMPL_MASK:
		dst = &p->impl_mask, want = sizeof p->impl_mask, name = "CUBLASLT_MATMUL_PREF_IMPL_MASK";
		break;
	default:
		s_say(fn, "preference attribute %d is not supported", (int)attr);
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	if (align_slot >= 0) {
		uint32_t v;
		if (!s_size_ok(fn, name, buf, sizeInBytes, sizeof v))
			return CUBLAS_STATUS_INVALID_VALUE;
		memcpy(&v, buf, sizeof v);
		if (v == 0 || (v & (v - 1)) != 0) {
			s_say(fn, "%s: %u is not a power of two", name, v);
			return CUBLAS_STATUS_INVALID_VALUE;
		}
		p->min_align[align_slot] = v;
		return CUBLAS_STATUS_SUCCESS;
	}
	if (!s_size_ok(fn, name, buf, sizeInBytes, want))
		return CUBLAS_STATUS_INVALID_VALUE;
	memcpy(dst, buf, want);
	return CUBLAS_STATUS_SUCCESS;
}

/*
 * Validates the problem as cublasLtMatmul would (minus the data pointers)
 * and returns one algorithm in heuristicResultsArray[0] (*returnAlgoCount =
 * 1; no workspace; it remembers the preference's minimum alignments, which
 * cublasLtMatmul then enforces). With CUDAEMU_LT_NO_ALGO set (module
 * comment) it finds none: NOT_SUPPORTED and *returnAlgoCount = 0.
 */
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int *returnAlgoCount)
{
	const char *fn = "cublasLtMatmulAlgoGetHeuristic";
	if (!lightHandle || lightHandle->magic != LT_MAGIC) {
		s_say(fn, "the handle is NULL or not from cublasLtCreate");
		return CUBLAS_STATUS_NOT_INITIALIZED;
	}
	if (requestedAlgoCount < 1 || !heuristicResultsArray || !returnAlgoCount) {
		s_say(fn, "requestedAlgoCount %d < 1, or a NULL output", requestedAlgoCount);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	*returnAlgoCount = 0;
	const emu_pref *pref = s_pref(preference);
	if (!pref) {
		s_say(fn, "the preference is NULL or not from cublasLtMatmulPreferenceCreate");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	gemm_problem p;
	cublasStatus_t st = s_lt_problem(fn, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, nullptr, nullptr,
					 nullptr, nullptr, &p);
	if (st != CUBLAS_STATUS_SUCCESS)
		return st;
	int mode = s_no_algo_mode();
	if (mode == 1 || (mode == 2 && p.epilogue != CUBLASLT_EPILOGUE_DEFAULT))
		return CUBLAS_STATUS_NOT_SUPPORTED;
	cublasLtMatmulHeuristicResult_t *r = &heuristicResultsArray[0];
	memset(r, 0, sizeof *r);
	r->algo.data[ALGO_WORD_MAGIC] = ALGO_MAGIC;
	for (int i = 0; i < 4; i++)
		r->algo.data[ALGO_WORD_ALIGN + i] = pref->min_align[i];
	r->workspaceSize = 0;
	r->state = CUBLAS_STATUS_SUCCESS;
	r->wavesCount = 1.0f;
	*returnAlgoCount = 1;
	return CUBLAS_STATUS_SUCCESS;
}

/*
 * D = alpha * op(A) op(B) + beta * C [+ bias], on the calling thread; the
 * stream is ignored, `alpha` and `beta` are host floats. C may be D (with
 * the same layout). algo may be NULL, or one from
 * cublasLtMatmulAlgoGetHeuristic, whose alignments the pointers must meet.
 * Errors as the module comment says; D is untouched on error.
 */
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                              cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
                              cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspaceSizeInBytes,
                              cudaStream_t stream)
{
	const char *fn = "cublasLtMatmul";
	(void)stream;
	(void)workspace;
	(void)workspaceSizeInBytes; /* the dummy algorithm needs none */
	if (!lightHandle || lightHandle->magic != LT_MAGIC) {
		s_say(fn, "the handle is NULL or not from cublasLtCreate");
		return CUBLAS_STATUS_NOT_INITIALIZED;
	}
	if (!alpha || !beta) {
		s_say(fn, "alpha or beta is NULL");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	gemm_problem p;
	cublasStatus_t st = s_lt_problem(fn, computeDesc, Adesc, Bdesc, Cdesc, Ddesc, A, B, C, D, &p);
	if (st != CUBLAS_STATUS_SUCCESS)
		return st;
	memcpy(&p.alpha, alpha, sizeof p.alpha);
	memcpy(&p.beta, beta, sizeof p.beta);
	if (p.has_bias && !p.bias.base && p.m > 0) {
		s_say(fn, "the bias epilogue is set but CUBLASLT_MATMUL_DESC_BIAS_POINTER is NULL");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if ((p.aux_out || p.aux_in) && !p.aux.base && p.aux.hi > p.aux.lo) {
		s_say(fn, "epilogue %u %s an aux matrix but CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER is NULL",
		      p.epilogue, p.aux_out ? "writes" : "reads");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (algo) {
		if (algo->data[ALGO_WORD_MAGIC] != ALGO_MAGIC) {
			s_say(fn, "the algorithm did not come from cublasLtMatmulAlgoGetHeuristic");
			return CUBLAS_STATUS_INVALID_VALUE;
		}
		const char *names[4] = {"A", "B", "C", "D"};
		const void *ptrs[4] = {A, B, p.beta != 0.0f ? C : nullptr, D};
		for (int i = 0; i < 4; i++) {
			uint64_t want = algo->data[ALGO_WORD_ALIGN + i];
			if (ptrs[i] && s_align_of(ptrs[i]) < want) {
				s_say(fn,
				      "%s (%p) is %u-byte aligned but the algorithm was chosen for %llu-byte "
				      "alignment (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%s_BYTES)",
				      names[i], ptrs[i], s_align_of(ptrs[i]), (unsigned long long)want, names[i]);
				return CUBLAS_STATUS_INVALID_VALUE;
			}
		}
	}
	st = s_check_memory(p);
	if (st != CUBLAS_STATUS_SUCCESS)
		return st;
	s_gemm_run(p);
	return CUBLAS_STATUS_SUCCESS;
}

/* ---- cuBLAS (cublas_v2.h maps cublasCreate etc. to the _v2 names) ---- */

/* Status text; never NULL. */
const char *cublasGetStatusString(cublasStatus_t status)
{
	return s_status_string(status);
}

/* A new handle in *handle, on the default stream (free with cublasDestroy). */
cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
	if (!handle) {
		s_say("cublasCreate", "handle is NULL");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	cublasContext *h = new cublasContext;
	h->magic = BLAS_MAGIC;
	h->stream = nullptr;
	*handle = h;
	return CUBLAS_STATUS_SUCCESS;
}

/* Frees the handle; NOT_INITIALIZED for NULL or a foreign pointer. */
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
	if (!handle || handle->magic != BLAS_MAGIC) {
		s_say("cublasDestroy", "not a handle from cublasCreate");
		return CUBLAS_STATUS_NOT_INITIALIZED;
	}
	handle->magic = DEAD_MAGIC;
	delete handle;
	return CUBLAS_STATUS_SUCCESS;
}

/* Records the stream (work runs at once anyway). */
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId)
{
	if (!handle || handle->magic != BLAS_MAGIC) {
		s_say("cublasSetStream", "not a handle from cublasCreate");
		return CUBLAS_STATUS_NOT_INITIALIZED;
	}
	handle->stream = streamId;
	return CUBLAS_STATUS_SUCCESS;
}

/*
 * C = alpha * op(A) op(B) + beta * C for batchCount column-major problems
 * strideA/B/C elements apart (strides unused for one), op(A) m x k, op(B)
 * k x n, C m x n; host float scalars, CUBLAS_COMPUTE_32F, bf16 or fp32
 * operands as cublasLtMatmul. INVALID_VALUE (one line said) for a bad
 * operation, negative sizes, lda < max(1, rows of A as stored), likewise
 * ldb and ldc, or the memory checks of the module comment; NOT_SUPPORTED
 * for other types or compute types.
 */
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void *alpha, const void *A,
                                          cudaDataType Atype, int lda, long long int strideA, const void *B,
                                          cudaDataType Btype, int ldb, long long int strideB, const void *beta,
                                          void *C, cudaDataType Ctype, int ldc, long long int strideC,
                                          int batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
	const char *fn = "cublasGemmStridedBatchedEx";
	if (!handle || handle->magic != BLAS_MAGIC) {
		s_say(fn, "the handle is NULL or not from cublasCreate");
		return CUBLAS_STATUS_NOT_INITIALIZED;
	}
	if (!s_op_valid(transa) || !s_op_valid(transb)) {
		s_say(fn, "transa %d / transb %d: not a cublasOperation_t", (int)transa, (int)transb);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (m < 0 || n < 0 || k < 0 || batchCount < 0) {
		s_say(fn, "negative size: m %d, n %d, k %d, batchCount %d", m, n, k, batchCount);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
	const int a_rows = ta ? k : m, b_rows = tb ? n : k;
	if (lda < (a_rows > 1 ? a_rows : 1)) {
		s_say(fn, "lda %d < %d, the rows of A as stored (transa=%s, m %d, k %d)", lda,
		      a_rows > 1 ? a_rows : 1, s_op_name(transa), m, k);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (ldb < (b_rows > 1 ? b_rows : 1)) {
		s_say(fn, "ldb %d < %d, the rows of B as stored (transb=%s, k %d, n %d)", ldb,
		      b_rows > 1 ? b_rows : 1, s_op_name(transb), k, n);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (ldc < (m > 1 ? m : 1)) {
		s_say(fn, "ldc %d < %d, the rows of C (m)", ldc, m > 1 ? m : 1);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (computeType != CUBLAS_COMPUTE_32F && computeType != CUBLAS_COMPUTE_32F_PEDANTIC) {
		s_say(fn, "compute type %d is not supported (CUBLAS_COMPUTE_32F only)", (int)computeType);
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	cublasStatus_t st = s_check_types(fn, Atype, Btype, Ctype);
	if (st != CUBLAS_STATUS_SUCCESS)
		return st;
	if (!((algo >= CUBLAS_GEMM_DEFAULT && algo <= CUBLAS_GEMM_ALGO23) ||
	      (algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP))) {
		s_say(fn, "algo %d is not a cublasGemmAlgo_t", (int)algo);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (!alpha || !beta) {
		s_say(fn, "alpha or beta is NULL");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (m == 0 || n == 0 || batchCount == 0)
		return CUBLAS_STATUS_SUCCESS;

	gemm_problem p;
	memset(&p, 0, sizeof p);
	p.fn = fn;
	p.m = m;
	p.n = n;
	p.k = k;
	p.batch = batchCount;
	p.op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
	p.op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	memcpy(&p.alpha, alpha, sizeof p.alpha);
	memcpy(&p.beta, beta, sizeof p.beta);
	if (!s_view_init(&p.a, fn, "A", A, Atype, a_rows, ta ? m : k, lda, strideA, batchCount) ||
	    !s_view_init(&p.b, fn, "B", B, Btype, b_rows, tb ? k : n, ldb, strideB, batchCount) ||
	    !s_view_init(&p.c, fn, "C", C, Ctype, m, n, ldc, strideC, batchCount) ||
	    !s_view_init(&p.d, fn, "C", C, Ctype, m, n, ldc, strideC, batchCount))
		return CUBLAS_STATUS_INVALID_VALUE;
	st = s_check_memory(p);
	if (st != CUBLAS_STATUS_SUCCESS)
		return st;
	s_gemm_run(p);
	return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */
