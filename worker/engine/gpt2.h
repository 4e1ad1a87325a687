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

/* Free everything; accepts NULL. */
void gpt2_free(gpt2_t *m);

const gpt2_config_t *gpt2_config(const gpt2_t *m);

/* The flat buffers (borrowed; valid until gpt2_free). */
size_t gpt2_num_params(const gpt2_t *m);
float *gpt2_params(gpt2_t *m);
float *gpt2_grads(gpt2_t *m);

/* The named views, in flat-buffer order. */
int gpt2_num_tensors(const gpt2_t *m);
const gpt2_tensor_t *gpt2_tensor(const gpt2_t *m, int i);
const gpt2_tensor_t *gpt2_tensor_by_name(const gpt2_t *m, const char *name);

/* Bytes held for parameters, gradients and activations. */
size_t gpt2_activation_bytes(const gpt2_t *m);

/*
 * GPT-2 initialisation from `seed` alone: weights normal(0, 0.02), residual
 * projections (attn.c_proj, mlp.c_proj) normal(0, 0.02/sqrt(2*n_layer)),
 * biases 0, LayerNorm weight 1 and bias 0. Same seed, same bits.
 */
void gpt2_init_params(gpt2_t *m, uint64_t seed);

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

/* Set every gradient to zero. */
void gpt2_zero_grad(gpt2_t *m);

/*
 * Backward pass of the last forward (which must have had targets): ADDS
 * d(loss_scale * loss)/d(params) into the gradient buffer, so micro-batches
 * accumulate (pass loss_scale = 1/grad_accum).
 */
void gpt2_backward(gpt2_t *m, float loss_scale);

/* Training FLOPs per token, 6N + 6*L*C*T (the llm.c convention), for MFU. */
double gpt2_flops_per_token(const gpt2_t *m, int T);

#endif
