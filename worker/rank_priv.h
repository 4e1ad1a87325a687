/*
 * rank_priv: what the rank process's two files share (worker/rank.c, the
 * join, rendezvous, watcher and training; worker/rank_snap.c, rank 0's
 * snapshot bookkeeping): the rank's state and its send to the
 * coordinator. Private to those two files.
 */
#ifndef RINGMASTER_WORKER_RANK_PRIV_H
#define RINGMASTER_WORKER_RANK_PRIV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "comm.h"
#include "fabric.h"
#include "jobspec.h"
#include "rank.h"
#include "snapshot.h"
#include "tboard.h"
#include "train.h"
#include "wire.h"

#define WATCH_INTERVAL_MS 20
#define KV_SET_TIMEOUT_MS 30000
#define KV_GET_SLACK_MS 5000 /* beyond the KV_GET's own timeout, for the reply to come */
#define ERROR_MAX_BYTES 512
#define SNAP_PENDING 4              /* rank 0: snapshots reported and not yet committed */
#define SNAP_FINAL_COMMIT_MS 60000  /* rank 0 waits this long for the last commit */
#define METRICS_KEPT 8192           /* rank 0: rows kept for a METRICS_RESEND */
#define PARK_ASK_MS 10000           /* after a failed collective: wait this long to be asked to rejoin */
#define PARK_TIMEOUT_MS 120000      /* parked: wait this long for REJOIN, then exit */

/* A snapshot rank 0 reported and may be asked to commit. */
typedef struct {
	int64_t step; /* 0: a free slot */
	bool committed;
	char tmp_dir[4200], final_dir[4200];
	snap_manifest_t m; /* files unset; data_cursor, rng, model and tensors owned here */
} pending_snap_t;

typedef struct {
	const rank_options_t *opt;
	void *zctx;
	fabric_t *fab;
	pthread_mutex_t lock; /* the socket, once the watcher runs */
	pthread_t watcher;
	bool watching;
	atomic_bool stop_watch;
	int metrics_every;
	int64_t last_step; /* train.steps */
	_Atomic int64_t done_step; /* the latest step reported (the watcher reads it too), */
	double done_loss;          /* and its loss (for DONE) */
	char last_error[ERROR_MAX_BYTES]; /* last line on the trainer's log saying "error" */
	char line[1024];                  /* the trainer's log line being written */
	size_t line_len;

	const jobspec_t *spec;
	char job_dir[4096]; /* <checkpoint root>/<job>; "" without snapshots */
	double rendezvous_ms;
	pthread_mutex_t snap_lock; /* pending and last_committed: training thread vs watcher */
	pthread_mutex_t sent_lock; /* sent: its own, so that a step's METRICS never waits
	                            * for a commit's fsync under snap_lock */
	json_t *sent[METRICS_KEPT]; /* rank 0: the last rows sent, a ring by n_sent */
	size_t n_sent;
	int64_t prev_row_step;      /* the step of the last row sent (0: none) */
	pending_snap_t pending[SNAP_PENDING];
	int64_t resume_upto;    /* JOINED's resume step (the latest recorded checkpoint); 0: none */
	char resume_dir[4096];  /* JOINED's resume folder when it is another job's (resume_from); "" if not */
	int64_t last_reported;  /* the newest snapshot step this rank reported */
	int64_t last_committed; /* rank 0: the newest it committed */
	/* rejoin: set by the watcher on ABORT {rejoin: true}; the next step's
	 * report then stops training, and the rank parks for REJOIN */
	atomic_bool rejoin_asked;
	/* while the watcher runs: the world's communicator and, with tensor
	 * parallelism, the TP and DP groups split from it (NULL: none), all
	 * cancelled when asked to rejoin (a collective blocked on any of them
	 * with a dead peer must end) */
	comm_t *comm, *tp_comm, *dp_comm;
	atomic_bool parked_sent;    /* PARKED went out (the watcher answers the ask at once) */
	_Atomic int rejoin_attempt; /* REJOIN's attempt, heard by the watcher or s_park; 0: none */
	int next_attempt;       /* the attempt to rejoin once training stopped; 0: exit */
	/* the watchdog (watcher thread): when the last step ended (0: not
	 * armed: before the first step, after the last) and the longest step */
	_Atomic int64_t step_end_us;
	_Atomic int64_t longest_step_us;
	tboard_t *tb; /* rank 0's TensorBoard writer (tboard.h); NULL: none */
} rank_t;

/* Send one message to the coordinator (payload consumed; NULL: nothing),
 * under the socket's lock once the watcher runs; a failure is logged. */
void rank_send(rank_t *r, wire_type_t type, json_t *payload);

/* ---- snapshots (rank_snap.c) ---- */

/* Free what a pending slot holds and mark it free. */
void rank_snap_clear(pending_snap_t *ps);

/* train.h's on_snapshot (training thread; ctx is the rank_t): this rank's
 * shard of snap->step is on disk: rank 0 keeps what the commit needs, and
 * SNAPSHOT_WRITTEN goes out. 0. */
int rank_snap_written(void *ctx, const train_snapshot_t *snap);

/* train.h's on_snapshot_failed: SNAPSHOT_FAILED for `step` (that snapshot
 * never commits). */
void rank_snap_failed(void *ctx, int64_t step, const char *error);

/* Watcher, rank 0: SNAPSHOT_COMMIT's payload p (every shard is in): write
 * the manifest, rename the folder, apply retention, answer
 * SNAPSHOT_COMMITTED. A repeated COMMIT is answered again; one for a step
 * this rank does not hold is logged and ignored. */
void rank_snap_commit(rank_t *r, const json_t *p);

/* Rank 0 at the end: wait (the watcher commits) until the last snapshot
 * reported is committed, at most SNAP_FINAL_COMMIT_MS. */
void rank_snap_wait_last(rank_t *r);

#endif
