/*
 * kernels: the non-GEMM layers of the GPT-2 engine in C with OpenMP, forward
 * and backward: embeddings, LayerNorm, causal attention, GELU, bias
 * gradients, cross-entropy, and fp32 -> bf16 conversion.
 *
 * Determinism: every reduction has an order fixed by the shapes alone.
 * Row-wise work (LayerNorm statistics, softmax, cross-entropy) is split over
 * threads by rows, and each row is reduced by one thread in a fixed lane
 * order. Reductions over the rows (bias and LayerNorm parameter gradients,
 * embedding gradients) are split over threads by column blocks, and each
 * column is summed over the rows serially. So no result depends on the
 * number of OpenMP threads. Private to worker/engine/.
 *
 * Shapes: N = B*T rows; C channels; H heads of hd = C/H channels each.
 * "Backward" functions ADD into gradients of parameters (d...w, d...b) and
 * into `dx` where they say so.
 */
#ifndef RINGMASTER_ENGINE_KERNELS_H
#define RINGMASTER_ENGINE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/*
 * The embedding, out (B, T, C) = wte[inputs] + wpe[t], in two parts so that
 * wte can come in blocks of rows (ZeRO-3): kernel_embed_positions sets out
 * to wpe[t], then kernel_embed_tokens adds w[token - v0] for the tokens in
 * [v0, v1), w holding rows v0..v1 of wte. Covering [0, V) in any number of
 * blocks gives the same bits as one.
 */
void kernel_embed_positions(float *out, const float *wpe, int B, int T, int C);
void kernel_embed_tokens(float *out, const int32_t *inputs, const float *w, int v0, int v1, int N,
                         int C);
/* dwpe (maxT, C) += sum over b of dout (B, T, C) */
void kernel_embed_positions_backward(float *dwpe, const float *dout, int B, int T, int C);
/* dw (v1 - v0, C) += dout rows scattered by token, for the tokens in [v0, v1);
 * each element summed in row order, so blocks give the same bits as one */
void kernel_embed_tokens_backward(float *dw, int v0, int v1, const float *dout,
                                  const int32_t *inputs, int N, int C);

/* out (N, C) = LayerNorm(x) * w + b, eps 1e-5; mean, rstd (N) kept for backward */
void kernel_layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w,
                              const float *b, int N, int C);
/* dx (N, C) += d/dx; dw, db (C) += d/dw, d/db; given dout (N, C) and the forward's x, mean, rstd */
void kernel_layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x,
                               const float *mean, const float *rstd, const float *w, int N, int C);

/*
 * Causal self-attention. qkv (B, T, 3C) holds q, k, v side by side (HF
 * c_attn order); att (B, H, T, T) gets the softmax probabilities (zero above
 * the diagonal); out (B, T, C) the heads' outputs side by side. scratch holds
 * kernel_attention_scratch_floats(B, T, C, H) floats.
 */
size_t kernel_attention_scratch_floats(int B, int T, int C, int H);
void kernel_attention_forward(float *out, float *att, const float *qkv, float *scratch, int B, int T,
                              int C, int H);
/* dqkv (B, T, 3C) = gradient of the attention (overwritten, not added) */
void kernel_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                               float *scratch, int B, int T, int C, int H);

/*
 * Grouped-query causal attention (Llama; GPT-2's is the case KV = H): qkv
 * (B, T, (H + 2 KV) hd) holds the H query heads, then the KV key heads,
 * then the KV value heads, each hd wide; query head h reads KV head
 * h / (H / KV) in place (no copies of shared heads). att (B, H, T, T) gets
 * the probabilities, out (B, T, H hd) the heads' outputs. The backward
 * overwrites dqkv (same layout); a shared head's dk and dv are summed over
 * its query heads in head order. scratch holds
 * kernel_gqa_attention_scratch_floats(B, T, H, hd) floats.
 */
size_t kernel_gqa_attention_scratch_floats(int B, int T, int H, int hd);
void kernel_gqa_attention_forward(float *out, float *att, const float *qkv, float *scratch, int B,
                                  int T, int H, int KV, int hd);
void kernel_gqa_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                   const float *att, float *scratch, int B, int T, int H, int KV,
                                   int hd);

/* out = gelu(x) (tanh approximation), n elements; out may be x */
void kernel_gelu_forward(float *out, const float *x, size_t n);
/* d (n) *= gelu'(x), in place */
void kernel_gelu_backward_inplace(float *d, const float *x, size_t n);

/* db (C) += sum over the N rows of dout (N, C) */
void kernel_bias_backward(float *db, const float *dout, int N, int C);

/*
 * Cross-entropy over logits (N, V) with targets (N): losses (N) and lse (N)
 * (log-sum-exp, kept for backward). Returns the mean loss, summed in order.
 */
float kernel_crossentropy_forward(float *losses, float *lse, const float *logits,
                                  const int32_t *targets, int N, int V);
/* logits (N, V) become dlogits = scale * (softmax - onehot(target)), in place */
void kernel_crossentropy_backward_inplace(float *logits, const float *lse, const int32_t *targets,
                                          int N, int V, float scale);

/*
 * Set flush-to-zero and denormals-are-zero (x86 MXCSR) on the calling thread
 * and on every OpenMP thread: denormal gradients and AdamW moments are
 * otherwise ~100x slower to compute with and change nothing that matters.
 * Persistent for those threads; no-op elsewhere.
 */
void kernel_flush_denormals(void);

/* dst (n) = bf16(src), round to nearest even; NaN stays NaN */
void kernel_to_bf16(uint16_t *dst, const float *src, size_t n);

/* dst (cols, rows) = bf16(src (rows, cols))^T: the conversion and a transpose
 * in one pass (oneDNN's bf16 GEMMs are faster on row-major operands); src's
 * rows are `ld` floats apart (ld >= cols) */
void kernel_to_bf16_transposed(uint16_t *dst, const float *src, size_t rows, size_t cols, size_t ld);

/* dst (rows, cols) dense = bf16(src (rows, cols)) with src's rows `ld` apart */
void kernel_to_bf16_rows(uint16_t *dst, const float *src, size_t rows, size_t cols, size_t ld);

#endif
