/*
 * modelcpu: what the CPU models (gpt2.c, gpt2_tp.c, llama.c) share around
 * their forward and backward: arena memory, the machine's free memory, the
 * parameters fetched by range and gradients handed out by range (the
 * streaming modes of model.h), and the fp32 / bf16 GEMM on those
 * parameters. Each model embeds a modelcpu_params_t; what differs between
 * the models (layouts, ranges, kernels) stays in their own files.
 */
#ifndef RINGMASTER_ENGINE_MODELCPU_H
#define RINGMASTER_ENGINE_MODELCPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "matmul.h"
#include "model.h"

/* A model's parameters and gradients and the walk of a fetch order. */
typedef struct {
	size_t n_params;
	float *params;      /* (n_params); NULL under MODEL_STREAM_ALL */
	float *grads;       /* (n_params); NULL unless MODEL_DENSE */
	uint16_t *params16; /* bf16 copy: of params (n_params), or of the fetched range
	                     * (max_range) under MODEL_STREAM_ALL; NULL in fp32 */
	model_streaming_t mode;
	model_stream_t stream;
	const model_range_t *seq; /* the fetch order being walked */
	int seq_n, seq_pos;
	const float *held; /* the fetched range's parameters (MODEL_STREAM_ALL), else NULL */
	size_t held_n;
} modelcpu_params_t;

/* Bytes held for the parameters (fp32 and the bf16 copy; under
 * MODEL_STREAM_ALL the copy is of one range of at most max_range) and for
 * the gradients. */
size_t modelcpu_param_bytes(const modelcpu_params_t *p, size_t max_range);
size_t modelcpu_grad_bytes(const modelcpu_params_t *p);

/* Zero the model's own gradient buffer (MODEL_DENSE; else nothing). */
void modelcpu_zero_grad(modelcpu_params_t *p);

/*
 * 64-byte aligned memory (free() it); a buffer of a huge page or more is
 * aligned to 2 MiB and asked for transparent huge pages (madvise: Debian's
 * default THP mode only gives them on request), which cuts the first-touch
 * page faults of the parameters, gradients and activations by 512x (a
 * resumed rank's first step pays them) and the TLB misses of every step.
 * NULL when out of memory.
 */
void *modelcpu_alloc(size_t bytes);

/* Memory this machine can give us: MemAvailable, else the physical size. */
double modelcpu_available_bytes(void);

/* Print "ringworker: fatal: what" and exit(EX_SOFTWARE): a caller broke a
 * contract the model cannot recover from. */
_Noreturn void modelcpu_fatal(const char *what);

/* Start walking a fetch order (the forward's or the backward's). */
void modelcpu_seq_start(modelcpu_params_t *p, const model_range_t *seq, int n);

/*
 * The parameters of range r: the model's own buffer, or (MODEL_STREAM_ALL)
 * fetched through the stream with the next range of the order as the
 * prefetch hint, and converted to bf16 in bf16 mode. One range is held at a
 * time; modelcpu_release gives it back. A fetch out of the order is fatal
 * ("<who>: parameters fetched out of order").
 */
const float *modelcpu_fetch(modelcpu_params_t *p, model_range_t r, const char *who);
void modelcpu_release(modelcpu_params_t *p, const float *params);

/* Where the gradients of r go: the model's own buffer (accumulating), or a
 * zeroed buffer from the stream; modelcpu_grad_end hands it back once they
 * are final for this backward. */
float *modelcpu_grad_begin(modelcpu_params_t *p, model_range_t r);
void modelcpu_grad_end(modelcpu_params_t *p, float *g, model_range_t r);

/*
 * C (M, N) (+)= op(A) @ op(B) (+ bias), see matmul_run_ld (lda, ldc: row
 * strides, 0 for dense; bias may be NULL). In bf16 mode (p->params16 set),
 * A is converted into a16 (written row-major: oneDNN's bf16 kernels are
 * much slower on a transposed A), and B is taken from the bf16 parameter
 * copy when it points into the parameters, else converted into b16.
 */
void modelcpu_gemm(const modelcpu_params_t *p, matmul_cache_t *mm, uint16_t *a16, uint16_t *b16,
                   int M, int N, int K, const float *A, int64_t lda, bool trans_a, const float *B,
                   bool trans_b, const float *bias, float *C, int64_t ldc, bool accumulate);


/*
 * A CPU row of the model registry (model.h) whose operations are the
 * model's functions prefix_free, prefix_num_params, ... taking the model
 * (impl). MODELCPU_ROW_OPS(prefix) defines them as static s_free,
 * s_num_params, ...; the row writes s_create, s_tensors, s_init_range and
 * s_flops_per_token itself (their signatures differ between the models),
 * then MODELCPU_ROW(arch) is the row's model_ops_t initializer.
 */
#define MODELCPU_ROW_OPS(prefix)                                                                   \
	static void s_free(void *impl) { prefix##_free(impl); }                                    \
	static size_t s_num_params(const void *impl) { return prefix##_num_params(impl); }        \
	static float *s_params(void *impl) { return prefix##_params(impl); }                      \
	static float *s_grads(void *impl) { return prefix##_grads(impl); }                        \
	static size_t s_max_range(const void *impl) { return prefix##_max_range(impl); }          \
	static void s_init_params(void *impl, uint64_t seed) { prefix##_init_params(impl, seed); } \
	static void s_zero_grad(void *impl) { prefix##_zero_grad(impl); }                         \
	static float s_forward(void *impl, const int32_t *inputs, const int32_t *targets, int B,   \
	                       int T)                                                              \
	{                                                                                          \
		return prefix##_forward(impl, inputs, targets, B, T);                              \
	}                                                                                          \
	static void s_backward(void *impl, float scale) { prefix##_backward(impl, scale); }       \
	static size_t s_param_bytes(const void *impl) { return prefix##_param_bytes(impl); }      \
	static size_t s_grad_bytes(const void *impl) { return prefix##_grad_bytes(impl); }        \
	static size_t s_activation_bytes(const void *impl)                                         \
	{                                                                                          \
		return prefix##_activation_bytes(impl);                                            \
	}                                                                                          \
	static void s_tp_comm(const void *impl, model_tp_comm_t *ret) { prefix##_tp_comm(impl, ret); }

#define MODELCPU_ROW(arch_name)                                                                    \
	{                                                                                          \
		.arch = (arch_name), .device = MODEL_DEVICE_CPU, .create = s_create,               \
		.free = s_free, .num_params = s_num_params, .params = s_params, .grads = s_grads,  \
		.tensors = s_tensors, .max_range = s_max_range, .init_params = s_init_params,      \
		.init_range = s_init_range, .zero_grad = s_zero_grad, .forward = s_forward,        \
		.backward = s_backward, .flops_per_token = s_flops_per_token,                      \
		.param_bytes = s_param_bytes, .grad_bytes = s_grad_bytes,                          \
		.activation_bytes = s_activation_bytes, .dev = NULL, .tp_comm = s_tp_comm,        \
	}

#endif
