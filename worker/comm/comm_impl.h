/*
 * comm_impl: what a backend of comm.h provides, private to worker/comm/.
 * A comm_t is the backend's operations table, the rank and world size (which
 * never change), and the backend's own state; comm.c's public functions
 * check nothing and dispatch, so each backend keeps comm.h's contract
 * (sticky first failure, -ECANCELED after abort, one-line errors) itself.
 */
#ifndef RINGMASTER_WORKER_COMM_IMPL_H
#define RINGMASTER_WORKER_COMM_IMPL_H

#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One backend's operations; `impl` is the state its constructor gave
 * comm_make. Each has the contract of the comm.h function of the same name.
 * `stream` may be NULL (no stream: comm_nccl_stream says NULL). */
typedef struct {
	int (*allreduce_sum_f32)(void *impl, float *buf, size_t n);
	int (*reduce_scatter_sum_f32)(void *impl, const float *in, float *out, const size_t *counts);
	int (*allgather_f32)(void *impl, const float *in, float *out, const size_t *counts);
	int (*broadcast)(void *impl, void *buf, size_t bytes, int root);
	int (*barrier)(void *impl);
	void (*set_timeout)(void *impl, int timeout_ms);
	void (*abort)(void *impl);
	const char *(*last_error)(const void *impl);
	void *(*stream)(const void *impl);
	/* Free the state (after closing or aborting what it holds). */
	void (*free)(void *impl);
	/* comm_allreduce_sum_f32_async, comm_reduce_scatter_range_sum_f32_async
	 * (comm.c hands it the range's counts) and comm_wait; NULL where every
	 * collective is synchronous (Gloo): comm.c then runs the plain one. */
	int (*allreduce_sum_f32_async)(void *impl, float *buf, size_t n, void *after_event);
	int (*reduce_scatter_sum_f32_async)(void *impl, const float *in, float *out,
	                                    const size_t *counts, void *after_event);
	int (*wait)(void *impl);
	/* comm_cancel; NULL: not supported (a no-op) */
	void (*cancel)(void *impl);
	/* comm_split's two backend steps. allgather_bytes: each rank gives
	 * `bytes` host bytes at `in`; `out` (host, world_size * bytes)
	 * receives every rank's in rank order (NCCL stages them through
	 * device memory). sub_new: a new comm of the same backend (the same
	 * listening host or CUDA device, the parent's current timeout) for
	 * `rank` of `size`, meeting through `kv`; NULL with one line in err. */
	int (*allgather_bytes)(void *impl, const void *in, void *out, size_t bytes);
	comm_t *(*sub_new)(void *impl, const comm_kv_t *kv, int rank, int size, char *err,
	                   size_t errlen);
} comm_ops_t;

struct comm {
	const comm_ops_t *ops; /* static, borrowed */
	void *impl;            /* owned: ops->free frees it */
	int rank;
	int world_size;
	int n_splits; /* comm_split calls so far: each one's KV keys are its own */
};

/*
 * A comm_t for a backend's state `impl`. Returns NULL when out of memory;
 * `impl` stays the caller's then (free it), otherwise the comm_t owns it
 * and comm_free hands it to ops->free.
 */
comm_t *comm_make(const comm_ops_t *ops, void *impl, int rank, int world_size);

#ifdef __cplusplus
}
#endif

#endif
