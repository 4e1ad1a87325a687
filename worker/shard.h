/*
 * shard: ZeRO-2 and ZeRO-3 data movement over a comm_t, independent of the
 * model and of the device.
 *
 * The flat buffer of n_params floats is cut into W equal shards of S =
 * ceil(n_params / W) slots: rank r owns [r * S, r * S + count_r) with count_r
 * = clamp(n_params - r * S, 0, S) real entries (the same layout as zero1 in
 * worker/train.c). A shard_t holds, for its rank,
 *   - the reduced gradient of its shard (S floats), into which every
 *     gradient range handed over by the engine is reduce-scattered and
 *     added (ZeRO-2 and ZeRO-3), through two bucket buffers, so that one
 *     range is being reduced while the engine fills the next;
 *   - with sharded parameters (ZeRO-3), the master copy of its shard of the
 *     parameters (S floats), and two gather slots: a range of the parameters
 *     is all-gathered into a slot when the engine fetches it, and the range
 *     it names as next is gathered into the other slot meanwhile.
 * Every buffer is at most `max_range` floats, so the memory per rank is
 * about 1/W of the model plus a few layers.
 *
 * The collectives run on one thread of the shard_t's own, in the order they
 * were queued; the caller (the training thread) queues them and waits only
 * when it needs a result. Which collective is queued depends only on the
 * sequence of calls, never on timing, so every rank queues the same ones in
 * the same order. Any other collective on the same comm must wait for
 * shard_sync, which drains the queue. The first failed collective is
 * final: every later one is skipped, buffers keep whatever they held, and
 * shard_sync returns the error (the comm is aborted so that peers fail at
 * once).
 *
 * Device independence: every byte the shard_t allocates, zeroes or adds goes
 * through a shard_mem_t (host memory by default; the CUDA path gives device
 * functions), and collectives through comm.h.
 */
#ifndef RINGMASTER_WORKER_SHARD_H
#define RINGMASTER_WORKER_SHARD_H

#include <stdbool.h>
#include <stddef.h>

#include "comm.h"

/* Memory operations on the device the buffers live on. */
typedef struct {
	void *(*alloc)(size_t bytes);                       /* zeroed; NULL when out of memory */
	void (*free)(void *p);                              /* accepts NULL */
	void (*zero)(float *p, size_t n);
	void (*add)(float *dst, const float *src, size_t n); /* dst[i] += src[i] */
} shard_mem_t;

/* Host memory with OpenMP loops. */
extern const shard_mem_t shard_mem_host;

typedef struct shard shard_t;

/*
 * The shard of rank comm_rank(comm) of comm_world_size(comm) ranks over
 * n_params floats, with buffers of max_range floats (the largest range
 * that will be fetched or reduced). shard_params: keep a parameter shard and
 * gather slots (ZeRO-3). `comm` is borrowed and used only by the shard_t's
 * thread from here until shard_sync returns, and again after each call that
 * queues work. Returns NULL and one line in err when memory or the thread
 * cannot be had.
 */
shard_t *shard_new(comm_t *comm, size_t n_params, size_t max_range, bool shard_params,
                   const shard_mem_t *mem, char *err, size_t errlen);

/* Drain the queue, stop the thread, free; accepts NULL. */
void shard_free(shard_t *s);

size_t shard_len(const shard_t *s);           /* S */
size_t shard_lo(const shard_t *s);            /* rank * S */
size_t shard_count(const shard_t *s);         /* this rank's real entries */
const size_t *shard_counts(const shard_t *s); /* (W) every rank's real entries */

/* This rank's reduced gradient (S floats; padding stays zero) and, with
 * shard_params, its master parameters (S floats), else NULL. Touch them
 * only after shard_sync. */
float *shard_grads(shard_t *s);
float *shard_params(shard_t *s);

/* Zero the reduced gradient (call before a step's first backward, after
 * shard_sync). */
void shard_zero_grads(shard_t *s);

/*
 * Parameters [r.lo, r.hi) gathered from every rank's shard (ZeRO-3): waits
 * for the gather (queued now, or earlier as a prefetch), then queues a
 * gather of `next` (when non-empty and not already held) into the other
 * slot. The pointer stays valid until shard_release. One range is held at a
 * time.
 */
const float *shard_fetch(shard_t *s, size_t lo, size_t hi, size_t next_lo, size_t next_hi);
void shard_release(shard_t *s, const float *p);

/* A zeroed bucket for gradients [lo, hi) (waits while both buckets are
 * being reduced), and the hand-over that queues its reduce-scatter into
 * shard_grads (summed over ranks, added to what the shard holds). */
float *shard_grad_begin(shard_t *s, size_t lo, size_t hi);
void shard_grad_end(shard_t *s, float *g, size_t lo, size_t hi);

/* Wait for every queued collective. Returns 0, or the first failure's
 * negative errno (comm_last_error says what), and then again on every call. */
int shard_sync(shard_t *s);

/* After the parameter shard changed (an optimizer step): drain, and forget
 * every gathered range. */
int shard_invalidate(shard_t *s);

/* Bytes held (the same from creation to free): parameters (shard and gather
 * slots; 0 without shard_params) and gradients (reduced shard, buckets and
 * the reduce-scatter's output). */
size_t shard_param_bytes(const shard_t *s);
size_t shard_grad_bytes(const shard_t *s);

#endif
