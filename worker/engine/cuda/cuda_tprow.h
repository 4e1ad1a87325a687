/*
 * cuda_tprow: what the CUDA rows' tensor parallelism shares (the GPU twin
 * of engine/tp.h's tp_t; Megatron-style with sequence parallelism, the
 * same local tensor tables and the same steps as the CPU rows): the
 * group's collectives on device buffers with their volume counted, the
 * reduce-scatter that ends a row-parallel layer with the residual (and a
 * replicated bias) added, and the replicated tensors' gradients all-reduced
 * at the end of backward.
 *
 * Ordering. The group's collectives (model.h's model_tp_t over a comm_t,
 * worker/tpcomm.h) take device buffers when the comm is NCCL's, enqueue on
 * the comm's own stream and return when it is done (comm.h). Nothing orders
 * them against the model's stream, so every call here first waits for the
 * model's stream (the buffers it wrote are finished), then runs the
 * collective; work enqueued afterwards on the model's stream starts after
 * it returned. Simple and correct; overlap is a later refinement.
 *
 * The vocabulary-parallel cross-entropy's kernels are cuda_tp.h's; its two
 * collectives (an all-gather of N maxima, an all-reduce of 2N floats) go
 * through cuda_tprow_allgather / _allreduce.
 *
 * With a group of size 1 nothing here is called by the rows.
 */
#ifndef RINGMASTER_ENGINE_CUDA_TPROW_H
#define RINGMASTER_ENGINE_CUDA_TPROW_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
	model_tp_t g;        /* the group (copied); g.size 1: none */
	model_tp_comm_t vol; /* what was sent so far (model_tp_comm_t's units) */
	cudaStream_t stream; /* the model's */
	/* replicated tensors: local ranges (n_rep) and device scratch */
	model_range_t *rep;
	int n_rep;
	size_t rep_n;                /* floats in all of them */
	float *rep_saved, *rep_pack; /* device, rep_n each */
} cuda_tprow_t;

/*
 * Set s up for group g (NULL or size 1: none, nothing allocated) on the
 * model's stream, with the replicated tensors (tp_split -1) of table t (n
 * entries, local offsets). 0, or -ENOMEM with one line in err (host or
 * device memory).
 */
int cuda_tprow_init(cuda_tprow_t *s, const model_tp_t *g, cudaStream_t stream,
                    const model_tensor_t *t, int n, char *err, size_t errlen);

/* Free what init allocated; accepts a zeroed or freed s. */
void cuda_tprow_free(cuda_tprow_t *s);

/* Device bytes init allocated (for the row's state_bytes). */
size_t cuda_tprow_bytes(const cuda_tprow_t *s);

/*
 * The collectives, on device buffers, after the model's stream (see the
 * top); counted in s->vol by elements, whatever their width.
 *   allgather: out (size * n_each elements of elem_bytes, 4 or 2: bf16 bit
 *              patterns move as they are) = the ranks' in, in rank order.
 *              n_each * elem_bytes must be a multiple of 4.
 *   reduce_scatter: out (n_each floats) = this rank's block of the sum of
 *              the ranks' in (size * n_each floats)
 *   allreduce: buf (n floats) = the sum over the ranks, the same bits on each
 */
void cuda_tprow_allgather(cuda_tprow_t *s, const void *in, void *out, size_t n_each,
                          size_t elem_bytes);
void cuda_tprow_reduce_scatter(cuda_tprow_t *s, const float *in, float *out, size_t n_each);
void cuda_tprow_allreduce(cuda_tprow_t *s, float *buf, size_t n);

/*
 * The end of a row-parallel layer (sequence parallel): out (n, C) = this
 * rank's rows of the sum over the group of part (size * n rows, C), then
 * + res (n, C) + bias (C; NULL: none; replicated, added once), each
 * element as (sum + (res + bias)) like tp_rs_residual; out16 (NULL: none)
 * gets out in bf16. out receives the collective, so it must alias
 * neither part nor res. Enqueued after the collective.
 */
void cuda_tprow_rs_residual(cuda_tprow_t *s, float *out, uint16_t *out16, const float *part,
                            const float *res, const float *bias, int n, int C);

/*
 * Replicated gradients in the model's own flat gradient buffer (dense):
 * rep_begin saves and zeroes them (enqueued), rep_end all-reduces this
 * backward's part over the group (one collective) and adds the saved
 * values back (enqueued), so micro-batches accumulate as without TP.
 */
void cuda_tprow_rep_begin(cuda_tprow_t *s, float *grads);
void cuda_tprow_rep_end(cuda_tprow_t *s, float *grads);

/*
 * Streamed gradients (ZeRO-2/3): the replicated tensors inside range r,
 * whose gradients are at g (element 0 = flat index r.lo; this backward's
 * only, on the device), all-reduced over the group in place (one
 * collective; none when r holds no replicated tensor).
 */
void cuda_tprow_rep_range(cuda_tprow_t *s, model_range_t r, float *g);

#ifdef __cplusplus
}
#endif

#endif
