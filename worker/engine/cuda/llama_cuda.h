/*
 * llama_cuda: the Llama model (HF LlamaForCausalLM: RMSNorm, rotary
 * embeddings with Llama 3.1's scaling, grouped-query attention, SwiGLU, no
 * biases, tied or untied LM head) on one CUDA GPU: forward, backward, and
 * AdamW on device memory. The CPU row (worker/engine/llama.c) is its
 * numerical reference (tests/gpu/test_gpu_llama_step.c); the layout,
 * initial values and RoPE tables both use come from llama_layout.h, so the
 * flat fp32 buffer moves between them (and snapshots) as is.
 *
 * Precision as GPT-2's GPU row (gpt2_cuda.h): every GEMM takes bf16
 * operands and accumulates in fp32 (cuBLASLt); RMSNorm, RoPE, SwiGLU's
 * gate, softmax, cross-entropy, the residual stream, gradients and AdamW
 * are fp32, with fp32 master weights and a bf16 copy the GEMMs read.
 * Attention is always the fused kernel (cuda_flash_*, which reads each KV
 * head in place for its group of query heads), so the head size must be
 * 16, 32 or 64 (Llama 3.2 1B's and 3B's, and 3.1 8B's 128 not yet: create
 * refuses it by name).
 *
 * Memory: fp32 parameters, gradients and the two AdamW moments are flat
 * device buffers in llama_layout's order (the moments may be left out,
 * no_moments: the trainer keeps a ZeRO shard's); activations live in one
 * arena for (max_B, max_T).
 *
 * Streaming (model.h's model_streaming_t, ZeRO-2/3): with
 * MODEL_STREAM_GRADS there is no gradient buffer and backward hands its
 * gradients out range by range; with MODEL_STREAM_ALL no parameter
 * buffers either, and forward and backward fetch each range just before
 * its kernels (converted to bf16 in a buffer of the model's). The ranges
 * and their order are the CPU row's (llama.h): forward fetches the
 * embed_tokens blocks, layers 0..L-1, model.norm and the LM head's blocks
 * (lm_head's, or embed_tokens' again when tied); backward the LM head's
 * blocks, model.norm and layers L-1..0, and hands out gradients for the LM
 * head's blocks, model.norm, layers L-1..0 and the embed_tokens blocks
 * (tied: each of those blocks twice). A block is llama_stream_rows rows.
 * Every range is handed out in every backward, whatever the batch holds.
 *
 * Tensor parallelism (llama_cuda_new_tp; model.h, docs/training.md):
 * Megatron with sequence parallelism as the CPU row (llama.c): rank k of
 * t holds heads H/t and KV heads KV/t, F/t gate and up features, the
 * matching o_proj and down_proj columns, V padded / t rows of embed_tokens
 * and lm_head, and the residual stream and the norms at B T / t rows. The
 * normed input is all-gathered (bf16) before q/k/v and gate/up, the
 * row-parallel outputs reduce-scattered with the residual added
 * (cuda_tprow.h), the embedding reduce-scattered from each rank's
 * vocabulary rows, the cross-entropy vocabulary-parallel (cuda_tp.h), the
 * norms' gradients all-reduced (dense: once at the end of backward, whose
 * grads-ready callbacks then come all at once; streamed: per range before
 * it is handed out). Streaming as above with this rank's ranges.
 *
 * Threads, streams and errors as gpt2_cuda.h: one thread at a time, all
 * work on the model's stream, functions returning host values wait;
 * create fails with a negative errno and one line; later CUDA failures
 * exit 71, misuse 70.
 */
#ifndef RINGMASTER_ENGINE_LLAMA_CUDA_H
#define RINGMASTER_ENGINE_LLAMA_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "model.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct llama_cuda llama_cuda_t;

/*
 * A model for cfg and batches up to max_B x max_T on the current device;
 * parameters, gradients and moments zero. moments false: no AdamW state
 * (llama_cuda_adamw_range only). 0 with *ret_model, or -EINVAL (config:
 * llama_config_check's message, or a head size the fused attention lacks),
 * -ENODEV, -ENOMEM, -EIO with one line in err.
 */
int llama_cuda_new(const model_config_t *cfg, int max_B, int max_T, bool moments,
                   llama_cuda_t **ret_model, char *err, size_t errlen);

/* llama_cuda_new with streaming (see the top): stream is copied (its ctx
 * borrowed) and must have grad_begin and grad_end, and with
 * MODEL_STREAM_ALL fetch and release too; NULL with MODEL_DENSE. */
int llama_cuda_new_streamed(const model_config_t *cfg, int max_B, int max_T, bool moments,
                            model_streaming_t streaming, const model_stream_t *stream,
                            llama_cuda_t **ret_model, char *err, size_t errlen);
/* llama_cuda_new_streamed in TP group tp (model.h's model_tp_t on device
 * buffers; NULL or size 1: none): this rank's part of every tensor
 * (llama_layout_tp's table, the CPU row's at the same t and rank), the
 * residual stream at B T / t rows, llama.c's steps (see "Tensor
 * parallelism" at the top). -EINVAL also when a dimension does not
 * divide by t (tp_check's line). */
int llama_cuda_new_tp(const model_config_t *cfg, int max_B, int max_T, bool moments,
                      model_streaming_t streaming, const model_stream_t *stream,
                      const model_tp_t *tp, llama_cuda_t **ret_model, char *err, size_t errlen);
/* Free everything; accepts NULL. */
void llama_cuda_free(llama_cuda_t *m);

size_t llama_cuda_num_params(const llama_cuda_t *m);
/* The tensor table (borrowed), in llama_layout's order, and its length. */
const model_tensor_t *llama_cuda_tensors(const llama_cuda_t *m, int *ret_n);
size_t llama_cuda_max_range(const llama_cuda_t *m);
/* Device bytes: parameters with their bf16 copy, gradients, moments; the
 * activation arena. */
size_t llama_cuda_state_bytes(const llama_cuda_t *m);
size_t llama_cuda_activation_bytes(const llama_cuda_t *m);
cudaStream_t llama_cuda_stream(const llama_cuda_t *m);
/* The flat device buffers (borrowed; NULL when streamed). */
float *llama_cuda_params(llama_cuda_t *m);
float *llama_cuda_grads(llama_cuda_t *m);

/* Host copies (wait). set_params refreshes the bf16 copy. */
void llama_cuda_set_params(llama_cuda_t *m, const float *params);
void llama_cuda_get_params(llama_cuda_t *m, float *ret_params);
void llama_cuda_get_grads(llama_cuda_t *m, float *ret_grads);
void llama_cuda_set_moments(llama_cuda_t *m, const float *mom1, const float *mom2);
void llama_cuda_get_moments(llama_cuda_t *m, float *ret_mom1, float *ret_mom2);
/* The parameters were written on the device: refresh the bf16 copy. */
void llama_cuda_params_written(llama_cuda_t *m);
void llama_cuda_sync(llama_cuda_t *m);

/* Forward of host token ids (B, T) in [0, V); with targets the mean
 * cross-entropy, returned (waits), else 0 without waiting. */
float llama_cuda_forward(llama_cuda_t *m, const int32_t *inputs, const int32_t *targets, int B, int T);
/* The logits (B, T, V) of the last forward, widened from bf16 (waits);
 * with TP this rank's (B, T, V padded / t) vocabulary columns. */
void llama_cuda_get_logits(llama_cuda_t *m, float *ret_logits);
void llama_cuda_zero_grad(llama_cuda_t *m);
/* ADDS d(loss_scale * loss)/d(params) of the last forward with targets. */
void llama_cuda_backward(llama_cuda_t *m, float loss_scale);

/* fn is called during backward as each range becomes final, behind `ready`
 * (model.h's model_grads_ready_fn): model.norm with lm_head, layers
 * L-1 .. 0, embed_tokens; NULL: none. */
void llama_cuda_set_grads_ready(llama_cuda_t *m, model_grads_ready_fn fn, void *ctx);

/* sqrt of the sum of squares of the gradients; of n device floats (wait). */
double llama_cuda_grad_norm(llama_cuda_t *m);
double llama_cuda_sum_squares(llama_cuda_t *m, const float *x, size_t n);
/* AdamW as gpt2_cuda_adamw / gpt2_cuda_adamw_range (decay on the tensors
 * the table marks). Enqueued. */
void llama_cuda_adamw(llama_cuda_t *m, const optim_adamw_t *hp, float grad_scale);
void llama_cuda_adamw_range(llama_cuda_t *m, size_t lo, size_t n, float *params, const float *grads,
                            float *mom1, float *mom2, const optim_adamw_t *hp, float grad_scale);

/* llama_flops_per_token of the model's config; with TP this rank's share
 * (llama_model_flops's). */
double llama_cuda_flops_per_token(const llama_cuda_t *m, int T);
/* The TP group's traffic so far (model_tp_comm; zero without TP). */
void llama_cuda_tp_comm(const llama_cuda_t *m, model_tp_comm_t *ret);
/* Device bytes of the TP scratch (the replicated gradients'; 0 without
 * TP), part of llama_cuda_state_bytes. */
size_t llama_cuda_tp_bytes(const llama_cuda_t *m);

#ifdef __cplusplus
}
#endif

#endif
