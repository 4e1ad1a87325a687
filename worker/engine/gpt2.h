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

#include "model.h"

#ifdef __cplusplus
extern "C" { /* the GPU engine (.cu) calls gpt2_config_check */
#endif

/* GPT-2's sizes are model.h's (every field used). */
typedef model_config_t gpt2_config_t;

typedef enum {
	GPT2_PRECISION_FP32 = 0,
	GPT2_PRECISION_BF16, /* bf16 GEMM inputs, fp32 accumulation, fp32 master weights */
} gpt2_precision_t;

/* One named view into the flat parameter buffer (HF GPT-2 names and
 * shapes: c_attn.weight is (C, 3C), wte is (V, C); decay on matrices and
 * embeddings, not biases or LayerNorm). */
typedef model_tensor_t gpt2_tensor_t;

typedef struct gpt2 gpt2_t;

/*
 * Streaming (model.h's MODEL_DENSE, MODEL_STREAM_GRADS, MODEL_STREAM_ALL
 * and model_stream_t) in GPT-2's ranges: a range is a whole layer, ln_f,
 * wpe, or a block of wte rows no larger than a layer (gpt2_max_range
 * floats at most). Forward fetches wpe, the wte blocks, layers 0..L-1,
 * ln_f and the wte blocks again (the tied LM head); backward the wte
 * blocks, ln_f and layers L-1..0, and hands out gradients for the wte
 * blocks (LM head), ln_f, layers L-1..0, wpe and the wte blocks again (the
 * embedding): a wte block gets two gradient ranges per backward. In
 * MODEL_DENSE the LM head is one block of all V rows and the results are
 * the same bits as before streaming existed.
 */

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
 * modes other than MODEL_DENSE, the stream's functions (copied; ctx
 * borrowed). Same errors as gpt2_create.
 */
gpt2_t *gpt2_create_streamed(const gpt2_config_t *cfg, int max_B, int max_T,
                             gpt2_precision_t precision, model_streaming_t mode,
                             const model_stream_t *stream, char *err, size_t errlen);

/*
 * gpt2_create_streamed reporting the kind of failure: 0 with *ret_model
 * set, or -EINVAL (a configuration or call the model refuses), -ENOMEM (it
 * does not fit in memory) or -EIO (oneDNN failed), with one line in err.
 */
int gpt2_new(const gpt2_config_t *cfg, int max_B, int max_T, gpt2_precision_t precision,
             model_streaming_t mode, const model_stream_t *stream, gpt2_t **ret_model, char *err,
             size_t errlen);

/*
 * gpt2_new as TP rank tp->rank of a group of tp->size (NULL or size 1:
 * none; model.h's model_tp_t, copied, ctx borrowed): this rank's parts of
 * the tensors (model.h's tp_split and "qkv" rule), sequence parallel. Also
 * -EINVAL when model.n_head or max_T does not divide by tp->size, the
 * number named in err. Streaming works on this rank's flat buffer, in the
 * same ranges and orders (the wte blocks are of local rows).
 */
int gpt2_new_tp(const gpt2_config_t *cfg, int max_B, int max_T, gpt2_precision_t precision,
                model_streaming_t mode, const model_stream_t *stream, const model_tp_t *tp,
                gpt2_t **ret_model, char *err, size_t errlen);

/* The TP communication so far (model.h's model_tp_comm_t). */
void gpt2_tp_comm(const gpt2_t *m, model_tp_comm_t *ret);

/*
 * The layout of a model of cfg without creating one: its tensor table
 * (malloc'ed, *ret_n entries, flat-buffer order) and gpt2_max_range of a
 * streamed model (the GPU engine's streaming uses the same ranges).
 * 0 or -ENOMEM.
 */
int gpt2_layout(const gpt2_config_t *cfg, gpt2_tensor_t **ret_tensors, int *ret_n,
                size_t *ret_max_range);

/* gpt2_layout of a TP rank of a group of tp_size (1: none): the local
 * table gpt2_new_tp makes (the same for every rank of the group). */
int gpt2_layout_tp(const gpt2_config_t *cfg, int tp_size, gpt2_tensor_t **ret_tensors, int *ret_n,
                   size_t *ret_max_range);

/* The largest range a streamed model fetches or hands out, in floats. */
size_t gpt2_max_range(const gpt2_t *m);

/* Free everything; accepts NULL. */
void gpt2_free(gpt2_t *m);

const gpt2_config_t *gpt2_config(const gpt2_t *m);

/* The flat buffers (borrowed; valid until gpt2_free); NULL when streamed
 * (gradients from MODEL_STREAM_GRADS, both with MODEL_STREAM_ALL). */
size_t gpt2_num_params(const gpt2_t *m);
float *gpt2_params(gpt2_t *m);
float *gpt2_grads(gpt2_t *m);

/* The named views, in flat-buffer order; gpt2_tensors is the table
 * (gpt2_num_tensors entries, borrowed). */
int gpt2_num_tensors(const gpt2_t *m);
const gpt2_tensor_t *gpt2_tensors(const gpt2_t *m);
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

/* The logits (B, T, V) of the last forward pass (borrowed); under TP
 * (B, T, V/t padded) of this rank's vocabulary block, its valid columns
 * first. Valid until the
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
