/*
 * llama_layout: what every Llama row shares without computing anything on
 * a device: the configuration check, the tensor table (flat-buffer order,
 * Hugging Face LlamaForCausalLM names and (out, in) shapes), the streaming
 * range size, the deterministic initialisation, the RoPE cos/sin tables
 * (HF's rotate_half layout, Llama 3.1 frequency scaling) and the FLOPs per
 * token. The CPU row (llama.c) and the CUDA row use these, so they agree
 * bit for bit on layout, initial values and rotary angles.
 *
 * The table (L layers, C = n_embd, H heads, KV kv heads, hd = C / H,
 * F = ffn_dim, V = vocab_size):
 *   model.embed_tokens.weight                      (V, C)     decay
 *   per layer l:
 *     model.layers.l.input_layernorm.weight          (C)
 *     model.layers.l.self_attn.q_proj.weight         (H*hd, C)  decay
 *     model.layers.l.self_attn.k_proj.weight         (KV*hd, C) decay
 *     model.layers.l.self_attn.v_proj.weight         (KV*hd, C) decay
 *     model.layers.l.self_attn.o_proj.weight         (C, H*hd)  decay
 *     model.layers.l.post_attention_layernorm.weight (C)
 *     model.layers.l.mlp.gate_proj.weight            (F, C)     decay
 *     model.layers.l.mlp.up_proj.weight              (F, C)     decay
 *     model.layers.l.mlp.down_proj.weight            (C, F)     decay
 *   model.norm.weight                              (C)
 *   lm_head.weight                                 (V, C)     decay (absent when tied)
 *
 * Streaming ranges (ZeRO-2/3): a whole layer, model.norm, or a block of at
 * most llama_stream_rows rows of embed_tokens or of lm_head (no larger
 * than a layer). llama_layout's max range is the largest of these.
 */
#ifndef RINGMASTER_ENGINE_LLAMA_LAYOUT_H
#define RINGMASTER_ENGINE_LLAMA_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tensors per layer, and their order within a layer. */
#define LLAMA_LAYER_TENSORS 9
enum {
	LLAMA_T_ATTN_NORM, LLAMA_T_Q, LLAMA_T_K, LLAMA_T_V, LLAMA_T_O,
	LLAMA_T_MLP_NORM, LLAMA_T_GATE, LLAMA_T_UP, LLAMA_T_DOWN,
};

/*
 * Check cfg for batches of up to max_B sequences of up to max_T tokens:
 * every size positive, n_embd divisible by n_head, n_head a multiple of
 * n_kv_head, an even head size (RoPE rotates pairs), rope_theta and
 * norm_eps positive, rope_scaling either off (factor 0) or complete
 * (factor >= 1, 0 < low_freq_factor < high_freq_factor,
 * original_max_position > 0), 1 <= max_T <= seq_len. 0, or -1 with one
 * line in err naming the fields and their values: "model.n_head (12) must
 * be a multiple of model.n_kv_head (5)".
 */
int llama_config_check(const model_config_t *cfg, int max_B, int max_T, char *err, size_t errlen);

/*
 * The tensor table of a (checked) cfg: malloc'ed, *ret_n entries in
 * flat-buffer order; *ret_num_params floats in all; *ret_max_range the
 * largest streaming range (see the top). 0 or -ENOMEM.
 */
int llama_layout(const model_config_t *cfg, model_tensor_t **ret_tensors, int *ret_n,
                 size_t *ret_num_params, size_t *ret_max_range);

/*
 * llama_layout for TP rank parts of a group of tp ranks (model.h's
 * tp_split and full_shape: q/k/v, gate/up and the vocabulary rows split on
 * dim 0, o_proj and down_proj on dim 1, the vocabulary padded to a
 * multiple of tp; norms replicated). cfg's n_head, n_kv_head and ffn_dim
 * must divide by tp (llama_tp_check). *ret_max_range is the t = 1 one (no
 * streaming under TP). llama_layout is this with tp 1.
 */
int llama_layout_tp(const model_config_t *cfg, int tp, model_tensor_t **ret_tensors, int *ret_n,
                    size_t *ret_num_params, size_t *ret_max_range);

/* Floats in one layer's range. */
size_t llama_layer_floats(const model_config_t *cfg);

/* Rows of embed_tokens / lm_head in one streamed block: the rows that fit in
 * a layer's range (at least 1, at most V). */
int llama_stream_rows(const model_config_t *cfg);

/*
 * Initial parameters [lo, hi) of the table t (n_tensors entries, from
 * llama_layout of cfg) into out (hi - lo floats), from seed alone: norms 1,
 * embeddings and matrices normal(0, 0.02), o_proj and down_proj
 * normal(0, 0.02 / sqrt(2 * n_layer)); tensor i draws from initrand key i.
 * Any range gives the bits of the whole.
 */
void llama_init_range(const model_config_t *cfg, const model_tensor_t *t, int n_tensors,
                      uint64_t seed, size_t lo, size_t hi, float *out);

/*
 * The rotary inverse frequencies (hd/2 doubles): inv_freq[j] =
 * rope_theta^(-2j/hd), with Llama 3.1's scaling applied when
 * rope_scaling.factor > 0 (wavelengths below original/high_freq_factor
 * kept, above original/low_freq_factor divided by factor, smoothly
 * interpolated between).
 */
void llama_rope_inv_freq(const model_config_t *cfg, double *ret_inv_freq);

/*
 * cos and sin of p * inv_freq[j] for positions p in [0, T) and j in
 * [0, hd/2), each (T, hd/2) row-major floats, computed in double.
 */
void llama_rope_tables(const model_config_t *cfg, int T, float *ret_cos, float *ret_sin);

/*
 * Training FLOPs per token at sequence length T, torchtitan's count:
 * 6 * N + 12 * n_layer * n_embd * T, N = num_params less the token
 * embedding's V * C when the LM head is untied (tied, the embedding is
 * the LM head's matrix and counted).
 */
double llama_flops_per_token(const model_config_t *cfg, size_t num_params, int T);

#ifdef __cplusplus
}
#endif

#endif
