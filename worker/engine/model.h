/*
 * model: the interface every model architecture provides to the trainer,
 * and the registry that picks an implementation by architecture and device.
 *
 * An architecture ("gpt2"; a Llama-style block next) registers one row of
 * operations per device it runs on (model_ops_t): create for a config,
 * batch and sequence length; free; its flat parameter and gradient buffers
 * and the tensor table that names their ranges (with shapes, offsets and
 * which ranges AdamW decays); forward; backward; FLOPs per token; the
 * ranges ZeRO-2/3 stream (model_stream_t); the bytes it holds. The trainer
 * (worker/train.c), sharding (worker/shard.c), the optimizer
 * (engine/optim.c) and snapshots speak only these terms, so a new
 * architecture is a new row (docs/training.md, "Where things go").
 *
 * Parameters live in one flat fp32 buffer in tensor-table order, and their
 * gradients in a second one of the same layout: a ZeRO shard is a
 * contiguous range, and a snapshot taken on one device resumes on another.
 *
 * Rows whose buffers live on a device (CUDA) also fill `dev`
 * (model_device_ops_t): the moves between the device and host buffers in
 * the same layout, AdamW and the norm on the device, and the events that
 * let a reduction overlap backward. On the CPU rows `dev` is NULL.
 *
 * Errors: model_create returns a negative errno (-EINVAL: a config the
 * model refuses; -ENOMEM: it does not fit in memory; -ENODEV: no usable
 * device; -ENOENT: no such architecture on that device; -EIO: another
 * device failure) with one line in err. Afterwards a model's failures are
 * fatal in the row (one line on stderr, a distinct exit status).
 */
#ifndef RINGMASTER_ENGINE_MODEL_H
#define RINGMASTER_ENGINE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct optim_adamw; /* optim.h */

typedef enum {
	MODEL_DEVICE_CPU = 0,
	MODEL_DEVICE_CUDA,
} model_device_t;

/* Llama 3.1's RoPE frequency scaling; factor 0 means none. */
typedef struct {
	double factor;             /* 8 for Llama 3.1 */
	double low_freq_factor;    /* 1 */
	double high_freq_factor;   /* 4 */
	int original_max_position; /* 8192 */
} model_rope_scaling_t;

/* The sizes of a transformer; each architecture reads what it uses
 * (GPT-2 the first five; Llama all but nothing of GPT-2's learned
 * positions: seq_len bounds T and sizes the RoPE tables). */
typedef struct {
	int n_layer;
	int n_head;
	int n_embd;
	int vocab_size;
	int seq_len; /* maximum T (size of the position embedding) */
	/* Llama only (zero for GPT-2): */
	int n_kv_head;           /* grouped-query attention: n_head % n_kv_head == 0 */
	int ffn_dim;             /* SwiGLU hidden width */
	double rope_theta;       /* RoPE base, 500000 in Llama 3 */
	model_rope_scaling_t rope_scaling;
	double norm_eps;         /* RMSNorm epsilon, 1e-5 */
	bool tie_embeddings;     /* the LM head is the token embedding */
} model_config_t;

typedef enum {
	MODEL_PRECISION_FP32 = 0,
	MODEL_PRECISION_BF16, /* bf16 GEMM inputs, fp32 accumulation, fp32 master weights */
} model_precision_t;

#define MODEL_TENSOR_NAME_MAX 64

/*
 * Tensor parallelism (Megatron-style, with sequence parallelism; issue 24).
 * A model created with a model_tp_t of size t > 1 holds only this TP rank's
 * part of each split tensor: the flat buffers and the tensor table (offset,
 * numel, shape) are LOCAL; full_shape is the logical (HF, unpadded) shape
 * and tp_split says how the logical tensor is cut:
 *   -1  replicated: every TP rank holds all of it (norms, GPT-2's
 *       row-parallel biases and wpe); its gradient is all-reduced over the
 *       TP group inside backward, so the TP ranks stay equal.
 *    0  dim 0 cut in t equal blocks, rank k holding rows
 *       [k * shape[0], (k + 1) * shape[0]) of the logical tensor (Llama's
 *       q/k/v_proj (heads), gate/up_proj, the vocabulary-parallel
 *       embeddings and LM head; GPT-2's mlp.c_proj.weight (4C, C) and
 *       attn.c_proj.weight (C, C): row-parallel = input features = dim 0 in
 *       HF's Conv1D (in, out) layout).
 *       A 1-D split tensor has tp_split 0: GPT-2's mlp.c_fc.bias (4C)
 *       and attn.c_attn.bias (3C, "qkv" rule below).
 *    1  dim 1 cut likewise (Llama's o_proj and down_proj (out, in): input
 *       features; GPT-2's mlp.c_fc.weight (C, 4C): output features),
 *       EXCEPT GPT-2's attn.c_attn.weight (C, 3C), which follows the "qkv"
 *       rule:
 * GPT-2 "qkv" rule: the logical c_attn columns are [q | k | v], C each,
 * head h owning columns h*hd .. (h+1)*hd - 1 of each third. TP rank k of t
 * holds heads [k H/t, (k+1) H/t), so its local c_attn is (C, 3C/t) =
 * [q_k | k_k | v_k] with local column j of part p (p = 0 q, 1 k, 2 v;
 * 0 <= j < C/t) = logical column p*C + k*C/t + j. The bias likewise.
 * (A tensor is "qkv"-ruled iff its name ends in "attn.c_attn.weight" or
 * "attn.c_attn.bias"; engine/tp.h's tp_segments maps local to logical.)
 * Vocabulary: the embedding / LM head rows are padded to Vp, the next
 * multiple of t (shape[0] = Vp / t; full_shape[0] = V). Padded rows are
 * zero, their logits are -inf to the loss, their gradients stay zero, and
 * they are never in a snapshot (the logical tensor has V rows).
 * With t = 1 (or no tp) full_shape = shape and tp_split says what would be
 * cut.
 */
#define MODEL_TP_REPLICATED (-1)

/* One named view into the flat parameter buffer. */
typedef struct {
	char name[MODEL_TENSOR_NAME_MAX]; /* the architecture's HF name, e.g. "h.3.attn.c_attn.weight" */
	int ndim;
	int64_t shape[2];                 /* HF shape of this TP rank's part (the whole when t = 1) */
	size_t offset;                    /* in floats, into the flat buffer */
	size_t numel;                     /* of the local part */
	bool decay;                       /* AdamW weight decay applies (matrices and embeddings, not biases or norms) */
	int tp_split;                     /* -1 replicated on every TP rank, 0 or 1: the dim split across TP ranks */
	int64_t full_shape[2];            /* the logical (HF, unpadded) shape; shape[] is this rank's part */
} model_tensor_t;

/*
 * The TP group a model computes in (model_options_t.tp). The collectives
 * work on float buffers in the model's memory (host for the CPU rows,
 * device for the CUDA rows: an NCCL comm's), block, and are called in the same order on
 * every TP rank. They must not fail: on a comm error they fill anything
 * and the trainer reports the comm's error after the step (results are
 * garbage). worker/tpcomm.h makes one from a comm_t.
 *   allgather:      out (size * n_each) = the ranks' in (n_each) in rank order
 *   reduce_scatter: out (n_each) = rank's block of the sum of the ranks'
 *                   in (size * n_each)
 *   allreduce:      buf (n) = the sum over the ranks, the same bits on each
 */
typedef struct {
	void *ctx;
	int rank, size;            /* this rank in the TP group; size 1: no TP */
	bool sequence_parallel;    /* true (the only mode implemented) */
	void (*allgather)(void *ctx, const float *in, float *out, size_t n_each);
	void (*reduce_scatter)(void *ctx, const float *in, float *out, size_t n_each);
	void (*allreduce)(void *ctx, float *buf, size_t n);
} model_tp_t;

/*
 * TP communication a model has done since it was created (model_tp_comm),
 * in floats of the collectives' LOGICAL size: an all-gather or a
 * reduce-scatter of a (B, T, C) tensor counts B*T*C (each rank sends
 * (t-1)/t of it on a ring), an all-reduce of n floats counts n (each rank
 * sends 2(t-1)/t n on a ring). sent_floats is what this rank sends on a
 * ring algorithm, all kinds together. All zero without TP.
 */
typedef struct {
	uint64_t allgather_floats, allgather_calls;
	uint64_t reduce_scatter_floats, reduce_scatter_calls;
	uint64_t allreduce_floats, allreduce_calls;
	double sent_floats;
} model_tp_comm_t;

/* A contiguous range [lo, hi) of the flat buffer, in floats. */
typedef struct {
	size_t lo, hi;
} model_range_t;

/*
 * Who holds the parameters and gradients (ZeRO, worker/shard.h):
 *   MODEL_DENSE         the model owns both flat buffers (none, zero1)
 *   MODEL_STREAM_GRADS  the model owns the parameters; gradients are handed
 *                       out range by range through the stream during
 *                       backward (zero2), so no full gradient buffer exists
 *   MODEL_STREAM_ALL    parameters too are fetched range by range, just
 *                       before each use (zero3); model_params is NULL
 * A range is at most model_max_range floats; which ranges and in which
 * order is the architecture's (gpt2.h for GPT-2: a layer, the final norm,
 * the position embedding, or a block of token-embedding rows). In
 * MODEL_DENSE the results are the same bits as without streaming.
 */
typedef enum {
	MODEL_DENSE = 0,
	MODEL_STREAM_GRADS,
	MODEL_STREAM_ALL,
} model_streaming_t;

/* The trainer's side of streaming; called on the thread that runs forward
 * and backward, never with a range larger than model_max_range. Buffers are
 * in the model's device memory. */
typedef struct {
	void *ctx;
	/* MODEL_STREAM_ALL: the parameters of r (valid until release), with the
	 * range the model will fetch next as a prefetch hint (empty when none).
	 * Must not fail: on a communication error return any buffer of the right
	 * size and report the error from elsewhere (the results are garbage). */
	const float *(*fetch)(void *ctx, model_range_t r, model_range_t next);
	void (*release)(void *ctx, const float *p);
	/* MODEL_STREAM_GRADS and _ALL: a zeroed buffer of r.hi - r.lo floats for
	 * the gradients of r; grad_end hands it back with this backward's
	 * gradients of r (scaled by loss_scale, finished: a device row waits for
	 * its kernels first), to be reduced and accumulated. */
	float *(*grad_begin)(void *ctx, model_range_t r);
	void (*grad_end)(void *ctx, float *g, model_range_t r);
} model_stream_t;

/* How to create a model. */
typedef struct {
	int max_B, max_T;             /* the largest batch (max_T <= seq_len) */
	model_precision_t precision;  /* CPU rows; CUDA computes GEMMs in bf16 always */
	model_streaming_t streaming;
	const model_stream_t *stream; /* copied (ctx borrowed); NULL with MODEL_DENSE */
	bool no_moments;              /* device rows: no AdamW state (the trainer keeps a shard's) */
	bool fused_attention;         /* CUDA: fused attention where the head size allows */
	/* Tensor parallelism (copied; ctx borrowed): NULL or size 1 for none.
	 * Rows whose table has tp_comm take it (model_create refuses the
	 * others); with size > 1 the batch's T must divide by size. A device
	 * row calls the collectives on device buffers (an NCCL comm's). */
	const model_tp_t *tp;
} model_options_t;

/* Gradients of [r.lo, r.hi) are final for this backward, behind `ready` (a
 * device event of the model's, recorded again later: wait on it before
 * returning). */
typedef void (*model_grads_ready_fn)(void *ctx, model_range_t r, void *ready);

/* What a device-resident row adds (see the top). */
typedef struct {
	/* num_params floats of parameters from / to host memory (refreshing
	 * any low-precision copy); AdamW's moments likewise. Wait. */
	void (*set_params)(void *impl, const float *params);
	void (*get_params)(void *impl, float *ret_params);
	void (*set_moments)(void *impl, const float *m, const float *v);
	void (*get_moments)(void *impl, float *ret_m, float *ret_v);
	/* The stream all the model's work goes to (a cudaStream_t), and a wait
	 * for it. */
	void *(*stream)(const void *impl);
	void (*sync)(void *impl);
	/* The parameters were written on the device by someone else (finished):
	 * refresh the low-precision copy (enqueued). */
	void (*params_written)(void *impl);
	/* fn (NULL: none) is called during backward as each range of gradients
	 * becomes final (the model's own buffer, MODEL_DENSE). */
	void (*set_grads_ready)(void *impl, model_grads_ready_fn fn, void *ctx);
	/* sqrt of the sum of squares of the gradient buffer; the sum of squares
	 * of n device floats x, in an order fixed by n. Wait. */
	double (*grad_norm)(void *impl);
	double (*sum_squares)(void *impl, const float *x, size_t n);
	/* AdamW over all parameters (the model's moments), gradients times
	 * grad_scale; or over [lo, lo + n) with buffers the caller holds
	 * (element 0 is parameter lo). Enqueued. */
	void (*adamw)(void *impl, const struct optim_adamw *hp, float grad_scale);
	void (*adamw_range)(void *impl, size_t lo, size_t n, float *params, const float *grads,
	                    float *m, float *v, const struct optim_adamw *hp, float grad_scale);
	/* Whether attention runs fused; device bytes of parameters (with their
	 * low-precision copy), gradients and moments as created. */
	bool (*fused_attention)(const void *impl);
	size_t (*state_bytes)(const void *impl);
} model_device_ops_t;

/* One row of the registry: an architecture on a device. `impl` is the
 * row's own object. */
typedef struct {
	const char *arch;      /* model.arch in the job spec: "gpt2" */
	model_device_t device;
	int (*create)(const model_config_t *cfg, const model_options_t *opt, void **ret_impl,
	              char *err, size_t errlen);
	void (*free)(void *impl);
	size_t (*num_params)(const void *impl);
	float *(*params)(void *impl);
	float *(*grads)(void *impl);
	const model_tensor_t *(*tensors)(const void *impl, int *ret_n);
	size_t (*max_range)(const void *impl);
	void (*init_params)(void *impl, uint64_t seed);
	void (*init_range)(const void *impl, uint64_t seed, size_t lo, size_t hi, float *out);
	void (*zero_grad)(void *impl);
	float (*forward)(void *impl, const int32_t *inputs, const int32_t *targets, int B, int T);
	void (*backward)(void *impl, float loss_scale);
	double (*flops_per_token)(const void *impl, int T);
	size_t (*param_bytes)(const void *impl);
	size_t (*grad_bytes)(const void *impl);
	size_t (*activation_bytes)(const void *impl);
	const model_device_ops_t *dev; /* NULL on the CPU */
	/* The TP communication so far (NULL: the row has no TP; zeros). */
	void (*tp_comm)(const void *impl, model_tp_comm_t *ret);
} model_ops_t;

typedef struct model model_t;

/* The row for arch on device, or NULL when there is none (borrowed,
 * static). */
const model_ops_t *model_find(const char *arch, model_device_t device);

/*
 * A model of architecture `arch` on `device` for cfg and opt. 0 with
 * *ret_model set, or a negative errno (see the top) with one line in err
 * naming the field or the memory it lacks.
 */
int model_create(const char *arch, model_device_t device, const model_config_t *cfg,
                 const model_options_t *opt, model_t **ret_model, char *err, size_t errlen);

/* Free everything; accepts NULL. */
void model_free(model_t *m);

const model_ops_t *model_ops(const model_t *m);
/* The row's object, for its own calls (m->ops->dev). */
void *model_impl(model_t *m);

/* The flat buffers (borrowed, in the model's device memory; NULL when
 * streamed: gradients from MODEL_STREAM_GRADS, both with MODEL_STREAM_ALL). */
size_t model_num_params(const model_t *m);
float *model_params(model_t *m);
float *model_grads(model_t *m);

/* The tensor table in flat-buffer order (borrowed) and its length. */
const model_tensor_t *model_tensors(const model_t *m, int *ret_n);

/* The largest range a streamed model fetches or hands out, in floats. */
size_t model_max_range(const model_t *m);

/* Initial parameters from seed alone, into the model's buffer, or [lo, hi)
 * of them into out: the same bits. Host rows only (NULL in a device row's
 * table: the trainer initialises a host model and uploads, dev->set_params). */
void model_init_params(model_t *m, uint64_t seed);
void model_init_range(const model_t *m, uint64_t seed, size_t lo, size_t hi, float *out);

/* Zero the gradients (nothing when streamed). */
void model_zero_grad(model_t *m);

/* Forward of inputs and targets (B, T) of host token ids; the mean loss
 * (a device row waits for it). */
float model_forward(model_t *m, const int32_t *inputs, const int32_t *targets, int B, int T);

/* Backward of the last forward: ADDS d(loss_scale * loss)/d(params) to the
 * gradients (or streams them). */
void model_backward(model_t *m, float loss_scale);

/* Training FLOPs per token at sequence length T, for MFU. */
double model_flops_per_token(const model_t *m, int T);

/* Bytes the model holds: parameters (with any low-precision copy),
 * gradients (0 when streamed), activations. */
size_t model_param_bytes(const model_t *m);
size_t model_grad_bytes(const model_t *m);
size_t model_activation_bytes(const model_t *m);

/* The TP communication m has done since it was created (all zero
 * without TP); see model_tp_comm_t. */
void model_tp_comm(const model_t *m, model_tp_comm_t *ret);

/* The device operations of m's row (borrowed), or NULL on the CPU. */
const model_device_ops_t *model_dev(const model_t *m);

#ifdef __cplusplus
}
#endif

#endif
