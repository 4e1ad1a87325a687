/*
 * gpt2: the GPT-2 model on the CPU: forward, backward, and the flat buffers
 * they work in.
 *
 * All parameters live in one flat fp32 buffer (and their gradients in a second
 * one of the same layout), in the order and with the names and shapes of the
 * Hugging Face GPT-2 checkpoint ("wte.weight", "h.0.ln_1.weight", ...). The
 * flat layout is what makes data-parallel reduction, ZeRO sharding and
 * snapshots simple: a shard is a contiguous range. Activations live in one
 * arena sized up front for the largest (B, T) the model was created for.
 *
 * Architecture: token + learned position embeddings, n_layer pre-LayerNorm
 * blocks (causal multi-head attention, 4x MLP with tanh GELU), final
 * LayerNorm, LM head tied to the token embedding, mean cross-entropy.
 * GEMMs go through oneDNN's matmul primitive (fp32, or bf16 inputs with fp32
 * accumulation when created with GPT2_PRECISION_BF16); the rest is C with
 * OpenMP. Every reduction has a fixed order that does not depend on the
 * number of threads, so results are bitwise reproducible.
 *
 * A gpt2_t is used by one thread at a time (it uses OpenMP inside).
 */
#ifndef RINGMASTER_ENGINE_GPT2_H
#define RINGMASTER_ENGINE_GPT2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* the GPU engine (.cu) calls gpt2_config_check */
#endif

typedef struct {
	int n_layer;
	int n_head;
	int n_embd;
	int vocab_size;
	int seq_len; /* maximum T (size of the position embedding) */
} gpt2_config_t;

typedef enum {
	GPT2_PRECISION_FP32 = 0,
	GPT2_PRECISION_BF16, /* bf16 GEMM inputs, fp32 accumulation, fp32 master weights */
} gpt2_precision_t;

#define GPT2_TENSOR_NAME_MAX 64

/* One named view into the flat parameter buffer. */
typedef struct {
	char name[GPT2_TENSOR_NAME_MAX]; /* HF GPT-2 name, e.g. "h.3.attn.c_attn.weight" */
	int ndim;
	int64_t shape[2];                /* HF shape: c_attn.weight is (C, 3C), wte is (V, C) */
	size_t offset;                   /* in floats, into the flat buffer */
	size_t numel;
	bool decay;                      /* AdamW weight decay applies (matrices and embeddings, not biases or LayerNorm) */
} gpt2_tensor_t;

typedef struct gpt2 gpt2_t;

/* A contiguous range [lo, hi) of the flat buffer, in floats. */
typedef struct {
	size_t lo, hi;
} gpt2_range_t;

/*
 * Who holds the parameters and gradients (ZeRO, worker/shard.h):
 *   GPT2_DENSE         the model owns both flat buffers (none, zero1)
 *   GPT2_STREAM_GRADS  the model owns the parameters; gradients are handed
 *                      out range by range through the stream during backward
 *                      (zero2), so no full gradient buffer exists
 *   GPT2_STREAM_ALL    parameters too are fetched range by range, just before
 *                      each use (zero3); gpt2_params is NULL
 * A range is a whole layer, ln_f, wpe, or a block of wte rows no larger than
 * a layer (gpt2_max_range floats at most). Forward fetches wpe, the wte
 * blocks, layers 0..L-1, ln_f and the wte blocks again (the tied LM head);
 * backward the wte blocks, ln_f and layers L-1..0, and hands out gradients
 * for the wte blocks (LM head), ln_f, layers L-1..0, wpe and the wte blocks
 * again (the embedding): a wte block gets two gradient ranges per backward.
 * In GPT2_DENSE the LM head is one block of all V rows and the results are
 * the same bits as before streaming existed.
 */
typedef enum {
	GPT2_DENSE = 0,
	GPT2_STREAM_GRADS,
	GPT2_STREAM_ALL,
} gpt2_streaming_t;

/* The trainer's side of streaming; called on the thread that runs forward
 * and backward, never with a range larger than gpt2_max_range. */
typedef struct {
	void *ctx;
	/* GPT2_STREAM_ALL: the parameters of r (valid until release), with the
	 * range the model will fetch next as a prefetch hint (empty when none).
	 * Must not fail: on a communication error return any buffer of the right
	 * size and report the error from elsewhere (the results are garbage). */
	const float *(*fetch)(void *ctx, gpt2_range_t r, gpt2_range_t next);
	void (*release)(void *ctx, const float *p);
	/* GPT2_STREAM_GRADS and _ALL: a zeroed buffer of r.hi - r.lo floats for
	 * the gradients of r; grad_end hands it back with this backward's
	 * gradients of r (scaled by loss_scale), to be reduced and accumulated. */
	float *(*grad_begin)(void *ctx, gpt2_range_t r);
	void (*grad_end)(void *ctx, float *g, gpt2_range_t r);
} gpt2_stream_t;

/*
 * Check a configuration for batches of up to max_B sequences of up to max_T
 * tokens (every size positive, n_embd divisible by n_head, 1 <= max_T <=
 * seq_len): 0, or -1 with one line in `err` naming the field. gpt2_create
 * and the GPU engine's create run it first.
 */
int gpt2_config_check(const gpt2_config_t *cfg, int max_B, int max_T, char *err, size_t errlen);

/*
 * Create a model for batches of up to max_B sequences of up to max_T tokens
 * (max_T <= cfg->seq_len). Allocates the parameters, the gradients and the
 * activation arena once. Returns NULL and writes one line to `err` (naming the
 * field: "model.n_embd (100) must be divisible by model.n_head (3)", or
 * "batch does not fit in memory: needs 93.1 GiB for activations") when the
 * configuration is invalid or the memory cannot be had.
 */
gpt2_t *gpt2_create(const gpt2_config_t *cfg, int max_B, int max_T, gpt2_precision_t precision,
                    char *err, size_t errlen);

/*
 * gpt2_create with the parameters and gradients held as `mode` says and, for
 * modes other than GPT2_DENSE, the stream's functions (copied; ctx
 * borrowed). Same errors as gpt2_create.
 */
gpt2_t *gpt2_create_streamed(const gpt2_config_t *cfg, int max_B, int max_T,
                             gpt2_precision_t precision, gpt2_streaming_t mode,
                             const gpt2_stream_t *stream, char *err, size_t errlen);

/* The largest range a streamed model fetches or hands out, in floats. */
size_t gpt2_max_range(const gpt2_t *m);

/* Free everything; accepts NULL. */
void gpt2_free(gpt2_t *m);

const gpt2_config_t *gpt2_config(const gpt2_t *m);

/* The flat buffers (borrowed; valid until gpt2_free); NULL when streamed
 * (gradients from GPT2_STREAM_GRADS, both with GPT2_STREAM_ALL). */
size_t gpt2_num_params(const gpt2_t *m);
float *gpt2_params(gpt2_t *m);
float *gpt2_grads(gpt2_t *m);

/* The named views, in flat-buffer order. */
int gpt2_num_tensors(const gpt2_t *m);
const gpt2_tensor_t *gpt2_tensor(const gpt2_t *m, int i);
const gpt2_tensor_t *gpt2_tensor_by_name(const gpt2_t *m, const char *name);

/* Bytes the model holds: its parameter buffer (with the bf16 copy), its
 * gradient buffer (0 when streamed), and the activation arena. */
size_t gpt2_param_bytes(const gpt2_t *m);
size_t gpt2_grad_bytes(const gpt2_t *m);
size_t gpt2_activation_bytes(const gpt2_t *m);

/*
 * GPT-2 initialisation from `seed` alone: weights normal(0, 0.02), residual
 * projections (attn.c_proj, mlp.c_proj) normal(0, 0.02/sqrt(2*n_layer)),
 * biases 0, LayerNorm weight 1 and bias 0. Same seed, same bits.
 */
void gpt2_init_params(gpt2_t *m, uint64_t seed);

/* The same initial values for params [lo, hi) only, into out (hi - lo
 * floats): the bits gpt2_init_params puts there (a ZeRO-3 shard). */
void gpt2_init_range(const gpt2_t *m, uint64_t seed, size_t lo, size_t hi, float *out);

/*
 * Forward pass on inputs (B, T) of token ids in [0, vocab_size). When targets
 * (B, T) is given, computes the mean cross-entropy and returns it, and keeps
 * what backward needs; without targets returns 0 and only the logits are
 * valid. B <= max_B, T <= max_T.
 */
float gpt2_forward(gpt2_t *m, const int32_t *inputs, const int32_t *targets, int B, int T);

/* The logits (B, T, V) of the last forward pass (borrowed). Valid until the
 * next gpt2_backward, which overwrites them in place with their gradient. */
const float *gpt2_logits(const gpt2_t *m);

/* Set every gradient to zero (nothing when the gradients are streamed). */
void gpt2_zero_grad(gpt2_t *m);

/*
 * Backward pass of the last forward (which must have had targets): ADDS
 * d(loss_scale * loss)/d(params) into the gradient buffer, so micro-batches
 * accumulate (pass loss_scale = 1/grad_accum).
 */
void gpt2_backward(gpt2_t *m, float loss_scale);

/* Training FLOPs per token, 6N + 6*L*C*T (the llm.c convention), for MFU. */
double gpt2_flops_per_token(const gpt2_t *m, int T);

#ifdef __cplusplus
}
#endif

#endif
