/*
 * tplayout: where a tensor-parallel rank's local parameters sit in the
 * LOGICAL (unsplit, t = 1) flat buffer of the architecture, the one place
 * that mapping lives (issue 24). Snapshots, export and elastic resume read
 * and write only the logical layout, so a snapshot taken at parallel.tensor
 * t resumes at any other t and data-parallel size; the trainer
 * (worker/train_tp.c) uses this module to assemble the logical ranges it
 * writes, to read a snapshot (or init.safetensors) back into its local
 * parts, and the manifests get its logical tensor table.
 *
 * The rules are model.h's (tp_split, full_shape, GPT-2's "qkv" rule for
 * attn.c_attn, vocabulary rows padded to a multiple of t): a local tensor
 * maps to one or more runs of consecutive elements, each run contiguous in
 * both buffers. The logical buffer holds the tensors in table order, each
 * of full_shape's size, with no gaps (what the t = 1 table is). Padded
 * vocabulary rows have no logical counterpart (no run covers them).
 * Replicated tensors (tp_split -1) map identically on every TP rank; their
 * runs are flagged, so that a writer takes them from one TP rank only.
 */
#ifndef RINGMASTER_WORKER_TPLAYOUT_H
#define RINGMASTER_WORKER_TPLAYOUT_H

#include <stdbool.h>
#include <stddef.h>

#include "model.h"

/* local[local .. local + n) is logical[logical .. logical + n). */
typedef struct {
	size_t local, logical, n;
	bool replicated;
} tplayout_run_t;

typedef struct {
	int tp_rank, tp_size;
	size_t n_local;          /* floats of the local flat buffer */
	size_t n_logical;        /* floats of the logical flat buffer */
	tplayout_run_t *runs;    /* (n_runs) by local offset, adjacent runs merged */
	size_t n_runs;
	model_tensor_t *logical; /* (n_tensors) the logical table: shape = full_shape, logical offsets */
	int n_tensors;
} tplayout_t;

/*
 * The layout of TP rank `tp_rank` of `tp_size` for the local tensor table
 * `local` (n entries, model_tensors of a model created with that TP group;
 * every TP rank's table has the same shapes, so any rank's table builds any
 * rank's layout). 0 with *ret filled (free with tplayout_free), or -EINVAL
 * with one line in err (a table that breaks model.h's rules: a split dim
 * not a multiple of its part, a tensor not where the table says), -ENOMEM.
 */
int tplayout_build(const model_tensor_t *local, int n, int tp_rank, int tp_size, tplayout_t *ret,
                   char *err, size_t errlen);

/* Free what tplayout_build allocated; accepts a zeroed or freed layout. */
void tplayout_free(tplayout_t *l);

/*
 * Copy the local buffer `local` (n_local floats) into the logical range
 * [lo, lo + count) held by `out` (out[0] is logical element lo): every run
 * that meets the range, replicated runs only when `with_replicated`.
 * Elements no run covers are left as they are.
 */
void tplayout_to_logical(const tplayout_t *l, const float *local, size_t lo, size_t count,
                         bool with_replicated, float *out);

/*
 * Call fn(ctx, local_off, logical_off, n) for each piece of a run inside
 * the local range [lo, lo + count), in local order (replicated runs too):
 * where reading the logical layout into a local range gets its data.
 * Stops at, and returns, the first negative value fn returns; else 0.
 */
int tplayout_each_local(const tplayout_t *l, size_t lo, size_t count,
                        int (*fn)(void *ctx, size_t local_off, size_t logical_off, size_t n),
                        void *ctx);

/*
 * Copy the logical buffer `logical` (n_logical floats) into the local
 * range [lo, lo + count) held by `out` (out[0] is local element lo);
 * elements no run covers (padded vocabulary rows) are set to zero.
 */
void tplayout_from_logical(const tplayout_t *l, const float *logical, size_t lo, size_t count,
                           float *out);

#endif
