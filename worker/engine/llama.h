/*
 * llama: the Llama (3 / 3.1) model on the CPU: forward, backward, and the
 * flat buffers they work in.
 *
 * Parameters live in one flat fp32 buffer in llama_layout.h's order with
 * Hugging Face LlamaForCausalLM's names and (out, in) shapes, gradients in
 * a second one of the same layout; activations in one arena sized for the
 * largest (B, T) the model was created for, as gpt2.h's.
 *
 * Architecture: token embedding; n_layer pre-RMSNorm blocks of causal
 * grouped-query attention (RoPE on q and k in HF's rotate_half layout,
 * Llama 3.1 frequency scaling, query head h reads KV head h / (H / KV) in
 * place) and a SwiGLU MLP; final RMSNorm; an LM head (lm_head, or the
 * embedding when tied); mean cross-entropy. No biases. y = x @ W^T for
 * every projection. GEMMs through oneDNN (fp32, or bf16 inputs with fp32
 * accumulation); the rest C with OpenMP, each reduction in an order fixed
 * by the shapes, so results are bitwise reproducible (gpt2.c's
 * DETERMINISM_NOTE applies unchanged).
 *
 * Streaming (model.h) in Llama's ranges (llama_layout.h): forward fetches
 * the embed_tokens blocks, layers 0..L-1, model.norm and the LM head's
 * blocks (lm_head's, or embed_tokens' again when tied); backward the LM
 * head's blocks, model.norm and layers L-1..0, and hands out gradients for
 * the LM head's blocks, model.norm, layers L-1..0 and the embed_tokens
 * blocks (tied: a block gets two gradient ranges per backward). In
 * MODEL_DENSE each of embed_tokens and lm_head is one block of all V rows.
 *
 * A llama_t is used by one thread at a time (it uses OpenMP inside).
 * Misuse the contract rules out (a batch larger than created for, a token
 * out of range, backward without a forward with targets) and oneDNN
 * failures print a line and exit with EX_SOFTWARE (70).
 */
#ifndef RINGMASTER_ENGINE_LLAMA_H
#define RINGMASTER_ENGINE_LLAMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct llama llama_t;

/*
 * Create a model of cfg (llama_config_check's rules) for batches of up to
 * max_B x max_T, in `precision`, holding parameters and gradients as `mode`
 * says (stream copied, its ctx borrowed; NULL with MODEL_DENSE). 0 with
 * *ret_model set, or -EINVAL (a configuration the model refuses, the field
 * named in err), -ENOMEM (does not fit in memory) or -EIO (oneDNN failed).
 */
int llama_new(const model_config_t *cfg, int max_B, int max_T, model_precision_t precision,
              model_streaming_t mode, const model_stream_t *stream, llama_t **ret_model, char *err,
              size_t errlen);

/*
 * llama_new as TP rank tp->rank of a group of tp->size (NULL or size 1:
 * none; model.h's model_tp_t, copied, ctx borrowed): this rank's parts of
 * the tensors (llama_layout_tp), sequence parallel. Also -EINVAL when
 * model.n_head, model.n_kv_head, model.ffn_dim or max_T does not divide by
 * tp->size, the number named in err. Streaming works on this rank's flat
 * buffer in the same ranges and orders (blocks of local vocabulary rows).
 */
int llama_new_tp(const model_config_t *cfg, int max_B, int max_T, model_precision_t precision,
                 model_streaming_t mode, const model_stream_t *stream, const model_tp_t *tp,
                 llama_t **ret_model, char *err, size_t errlen);

/* The TP communication so far (model.h's model_tp_comm_t). */
void llama_tp_comm(const llama_t *m, model_tp_comm_t *ret);

/* Free everything; accepts NULL. */
void llama_free(llama_t *m);

/* The flat buffers (borrowed), NULL when streamed as model.h says; the
 * tensor table (borrowed, *ret_n entries); the largest streamed range. */
size_t llama_num_params(const llama_t *m);
float *llama_params(llama_t *m);
float *llama_grads(llama_t *m);
const model_tensor_t *llama_tensors(const llama_t *m, int *ret_n);
size_t llama_max_range(const llama_t *m);

/* Bytes held: parameters (with the bf16 copy), gradients, activations. */
size_t llama_param_bytes(const llama_t *m);
size_t llama_grad_bytes(const llama_t *m);
size_t llama_activation_bytes(const llama_t *m);

/* llama_init_range (llama_layout.h) into the model's buffer, or [lo, hi)
 * of it into out. */
void llama_init_params(llama_t *m, uint64_t seed);
void llama_init_range_of(const llama_t *m, uint64_t seed, size_t lo, size_t hi, float *out);

/*
 * Forward of inputs (B, T) in [0, vocab_size): with targets, the mean
 * cross-entropy (and what backward needs is kept); without, 0 and only the
 * logits are valid. B <= max_B, T <= max_T.
 */
float llama_forward(llama_t *m, const int32_t *inputs, const int32_t *targets, int B, int T);

/* The logits (B, T, V) of the last forward (borrowed; under TP (B, T,
 * V/t padded) of this rank's vocabulary block, valid columns first); llama_backward
 * overwrites them with their gradient. */
const float *llama_logits(const llama_t *m);

/* Zero the gradients (nothing when streamed). */
void llama_zero_grad(llama_t *m);

/* Backward of the last forward (with targets): ADDS d(loss_scale *
 * loss)/d(params) to the gradients, or streams them. */
void llama_backward(llama_t *m, float loss_scale);

/* llama_flops_per_token (llama_layout.h) of this model. */
double llama_model_flops(const llama_t *m, int T);

#endif
