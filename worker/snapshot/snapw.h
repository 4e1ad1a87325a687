/*
 * snapw: the rank's asynchronous snapshot writer. The trainer hands it its
 * shard (the range [lo, lo+count) of the flat parameter buffer and of Adam's
 * m and v); snapw copies the three ranges into its own host buffers on the
 * caller's thread, returns at once, and a writer thread persists them with
 * snap_shard_write() (api/snapshot.h) while training goes on. The trainer
 * polls for the result and reports it to the coordinator
 * (SNAPSHOT_WRITTEN); the commit itself is rank 0's job, not snapw's.
 *
 * At most one snapshot is in flight. The buffers are kept and reused from
 * one snapshot to the next (grown when a shard gets bigger). A snapw_t is
 * driven by one caller thread; the writer thread is its own.
 */
#ifndef RINGMASTER_WORKER_SNAPW_H
#define RINGMASTER_WORKER_SNAPW_H

#include <stdint.h>

#include "snapshot.h"

typedef struct snapw snapw_t;

/* The outcome of one submitted write. */
typedef struct {
	int64_t step;
	int rank;
	int status;              /* 0, or the negative errno of snap_shard_write */
	char error[512];         /* one line when status < 0, else "" */
	snap_shard_info_t shard; /* name, bytes, xxh3 when status == 0 */
	int64_t write_us;        /* time the writer thread spent on it */
} snapw_result_t;

/* Starts the writer thread. Returns NULL (errno set) when it cannot. */
snapw_t *snapw_new(void);

/*
 * Copies count floats from each of params, adam_m, adam_v (pointing at
 * element lo of their flat buffers) and queues the write of
 * `<dir>/rank-<rank>-of-<world_size>.safetensors` for step. The sources may
 * be changed as soon as this returns; dir is copied too. Returns 0,
 * -EBUSY while an earlier write is in flight or its result has not been
 * collected by snapw_poll/snapw_wait (so no result is ever lost), -EINVAL
 * for bad arguments, -ENOMEM when the buffers cannot grow.
 */
int snapw_submit(snapw_t *w, const char *dir, int rank, int world_size, int64_t step,
                 int64_t n_params, int64_t lo, int64_t count, const float *params,
                 const float *adam_m, const float *adam_v);

/*
 * Non-blocking. Returns 1 and fills *ret_result when the submitted write has
 * finished (successfully or not; the result is handed out once), 0 when it
 * is still running or nothing was submitted since the last result.
 */
int snapw_poll(snapw_t *w, snapw_result_t *ret_result);

/*
 * Blocks until the submitted write finishes, then as snapw_poll. Returns 0
 * at once when nothing is pending.
 */
int snapw_wait(snapw_t *w, snapw_result_t *ret_result);

/* Waits for a write in flight, stops the thread and frees w; accepts NULL. */
void snapw_free(snapw_t *w);

#endif
