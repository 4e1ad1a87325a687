/*
 * tp: what the CPU rows' tensor parallelism shares (model.h's model_tp_t,
 * Megatron-style with sequence parallelism; docs/training.md "Tensor
 * parallelism"): the collectives with their volume counted, the map from a
 * TP rank's part of a tensor to the logical tensor (tp_split, full_shape and
 * GPT-2's "qkv" rule), the all-reduce of replicated tensors' gradients at
 * the end of backward, the vocabulary-parallel cross-entropy (max, sum-exp
 * and target logit combined over the group; the full logits are never
 * gathered) and the position-embedding pieces of sequence parallelism.
 *
 * Sequence parallelism here cuts the flattened (B*T) rows of the residual
 * stream in t contiguous blocks (rank k: rows [k n, (k+1) n), n = B*T/t),
 * so an all-gather is a plain concatenation; T must divide by t (the
 * contract's rule, which makes B*T divide by t for every B).
 *
 * With size 1 nothing here is called by the rows (their t = 1 code is
 * unchanged). Private to worker/engine/, except tp_segments and tp_is_qkv:
 * the trainer's logical (unsharded) snapshot layout may map a TP rank's
 * part with them (the one definition of the "qkv" rule and the padding).
 */
#ifndef RINGMASTER_ENGINE_TP_H
#define RINGMASTER_ENGINE_TP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct {
	model_tp_t g;        /* the group (copied); g.size 1: none */
	model_tp_comm_t vol; /* what was sent so far */
	/* replicated gradients: saved values and the packed all-reduce buffer */
	float *rep_saved, *rep_pack;
	size_t rep_n;
} tp_t;

/*
 * Check a TP group for a model: size >= 1, 0 <= rank < size, the three
 * collectives set when size > 1, and each (name, value) pair of `dims`
 * (n_dims of them: "model.n_head", 12, ...) divisible by size. 0, or -1
 * with one line in err naming the number: "model.n_head (12) must be
 * divisible by parallel.tensor (5)".
 */
int tp_check(const model_tp_t *g, const char *const *dim_names, const int *dims, int n_dims,
             char *err, size_t errlen);

/* Set s up for group g (NULL: size 1) and the table's replicated tensors
 * (scratch allocated). 0 or -ENOMEM. */
int tp_init(tp_t *s, const model_tp_t *g, const model_tensor_t *t, int n);
void tp_free(tp_t *s);

/* The collectives of model.h, counted in s->vol. */
void tp_allgather(tp_t *s, const float *in, float *out, size_t n_each);
void tp_reduce_scatter(tp_t *s, const float *in, float *out, size_t n_each);
void tp_allreduce(tp_t *s, float *buf, size_t n);

/*
 * The map of TP rank `rank` of `size`: calls fn(ctx, local, logical, n) for
 * each run of n consecutive elements of tensor t's local part, starting at
 * local element `local` (from the tensor's start), that are the logical
 * tensor's elements logical .. logical + n - 1 (row-major, full_shape),
 * restricted to local elements [lo, hi). Padded vocabulary rows have no
 * logical element and are skipped. GPT-2's c_attn weight and bias follow
 * the "qkv" rule of model.h.
 */
typedef void (*tp_segment_fn)(void *ctx, size_t local, size_t logical, size_t n);
void tp_segments(const model_tensor_t *t, int rank, int size, size_t lo, size_t hi,
                 tp_segment_fn fn, void *ctx);

/* Whether t is GPT-2's c_attn weight or bias (the "qkv" rule). */
bool tp_is_qkv(const model_tensor_t *t);

/* Replicated gradients: tp_rep_begin saves and zeroes them (grads is the
 * model's flat gradient buffer, tensor table t of n), tp_rep_end all-reduces
 * this backward's part over the group (one call) and adds the saved values
 * back, so micro-batches accumulate as without TP. */
void tp_rep_begin(tp_t *s, const model_tensor_t *t, int n, float *grads);
void tp_rep_end(tp_t *s, const model_tensor_t *t, int n, float *grads);

/* Streamed gradients (ZeRO-2/3): the replicated tensors inside range r,
 * whose gradients are at g (element 0 = flat index r.lo, this backward's
 * only), all-reduced over the group in place (one call; none when r holds
 * no replicated tensor). */
void tp_rep_range(tp_t *s, const model_tensor_t *t, int n, model_range_t r, float *g);

/*
 * Vocabulary-parallel cross-entropy over local logits (N rows `ld` apart;
 * the first `ncols` columns are vocabulary ids v0 .. v0 + ncols - 1, the
 * rest padding) with targets (N) in [0, V): lse (N) for backward, losses
 * (N); the mean loss, the same on every rank. scratch holds
 * tp_ce_scratch_floats(size, N) floats.
 */
size_t tp_ce_scratch_floats(int size, int N);
float tp_crossentropy_forward(tp_t *s, float *losses, float *lse, const float *logits, size_t ld,
                              const int32_t *targets, int N, int ncols, int v0, float *scratch);
/* logits become scale * (softmax - onehot(target)) on their ncols columns */
void tp_crossentropy_backward(float *logits, size_t ld, const float *lse, const int32_t *targets,
                              int N, int ncols, int v0, float scale);

/* dwpe[(row0 + i) % T] += dout[i] for local rows i < n (sequence parallel
 * GPT-2), each column summed in row order. */
void tp_positions_backward(float *dwpe, const float *dout, int row0, int n, int T, int C);

/* After a row-parallel layer: out (n, C) = this rank's rows of the sum
 * over the group of part (N, C) (reduce-scatter), + res (n, C) (the
 * residual) + bias (C; NULL: none, added once, not per rank). */
void tp_rs_residual(tp_t *s, float *out, const float *part, const float *res, const float *bias,
                    int n, int C);

#endif
