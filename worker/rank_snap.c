/*
 * rank_snap: rank 0's side of a snapshot's two-phase commit (see
 * rank_priv.h and rank.c's top): every rank reports its shard written;
 * rank 0 keeps what the manifest needs for the last SNAP_PENDING
 * snapshots, and on the coordinator's SNAPSHOT_COMMIT (all shards are in)
 * writes the manifest, renames step-N.tmp to step-N, prunes by the job's
 * retention and answers SNAPSHOT_COMMITTED.
 */
#include "rank_priv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exitcode.h"

void rank_snap_clear(pending_snap_t *ps)
{
	json_decref(ps->m.data_cursor);
	json_decref(ps->m.rng);
	json_decref(ps->m.model);
	free(ps->m.tensors);
	memset(ps, 0, sizeof *ps);
}

/* Rank 0: keep what the commit of this snapshot needs, in the oldest slot. */
static void s_pending_add(rank_t *r, const train_snapshot_t *snap)
{
	pthread_mutex_lock(&r->snap_lock);
	pending_snap_t *ps = &r->pending[0];
	for (int i = 0; i < SNAP_PENDING; i++)
		if (r->pending[i].step < ps->step)
			ps = &r->pending[i];
	rank_snap_clear(ps);
	ps->step = snap->step;
	snprintf(ps->tmp_dir, sizeof ps->tmp_dir, "%s", snap->tmp_dir);
	snprintf(ps->final_dir, sizeof ps->final_dir, "%s", snap->final_dir);
	ps->m = *snap->manifest;
	ps->m.data_cursor = json_deep_copy(snap->manifest->data_cursor);
	ps->m.rng = json_deep_copy(snap->manifest->rng);
	ps->m.model = json_deep_copy(snap->manifest->model);
	ps->m.tensors = malloc((size_t)snap->manifest->n_tensors * sizeof(snap_tensor_t));
	if (ps->m.tensors)
		memcpy(ps->m.tensors, snap->manifest->tensors,
		       (size_t)snap->manifest->n_tensors * sizeof(snap_tensor_t));
	else
		ps->m.n_tensors = 0; /* committed without a tensor table: no export */
	ps->m.files = NULL;
	ps->m.n_files = 0;
	pthread_mutex_unlock(&r->snap_lock);
}

/* Training thread: this rank's shard is on disk; tell the coordinator. */
int rank_snap_written(void *ctx, const train_snapshot_t *snap)
{
	rank_t *r = ctx;
	if (r->opt->rank == 0)
		s_pending_add(r, snap);
	pthread_mutex_lock(&r->snap_lock);
	r->last_reported = snap->step;
	pthread_mutex_unlock(&r->snap_lock);
	rank_send(r, WIRE_SNAPSHOT_WRITTEN,
	       json_pack("{s:I, s:s, s:I, s:s}", "step", (json_int_t)snap->step, "file",
	                 snap->shard->name, "bytes", (json_int_t)snap->shard->bytes, "xxh3",
	                 snap->shard->xxh3));
	fprintf(stderr, "ringworker rank: snapshot of step %lld written: %s (%lld bytes, %.0f ms)\n",
	        (long long)snap->step, snap->shard->name, (long long)snap->shard->bytes, snap->write_ms);
	return 0;
}

/* This rank could not write its shard of `step`: the coordinator records
 * an event, and that snapshot never commits. */
void rank_snap_failed(void *ctx, int64_t step, const char *error)
{
	rank_t *r = ctx;
	rank_send(r, WIRE_SNAPSHOT_FAILED, json_pack("{s:I, s:s, s:i}", "step", (json_int_t)step, "error", error,
	                                          "failure", (int)RM_FAILURE_IO));
}

/* Watcher, rank 0: every shard of a snapshot is in (SNAPSHOT_COMMIT). */
void rank_snap_commit(rank_t *r, const json_t *p)
{
	int64_t step = json_integer_value(json_object_get(p, "step"));
	const json_t *files = json_object_get(p, "files");
	pthread_mutex_lock(&r->snap_lock);
	pending_snap_t *ps = NULL;
	for (int i = 0; i < SNAP_PENDING; i++)
		if (r->pending[i].step == step)
			ps = &r->pending[i];
	if (!ps || r->opt->rank != 0) {
		pthread_mutex_unlock(&r->snap_lock);
		fprintf(stderr, "ringworker rank: SNAPSHOT_COMMIT for step %lld, which this rank does not"
		                " hold; ignored\n", (long long)step);
		return;
	}
	size_t n = json_array_size(files);
	snap_file_t *f = calloc(n ? n : 1, sizeof *f);
	int64_t total = 0;
	char err[1024] = "";
	int rc = f ? 0 : -ENOMEM;
	for (size_t i = 0; f && i < n; i++) {
		const json_t *x = json_array_get(files, i);
		f[i].rank = (int)json_integer_value(json_object_get(x, "rank"));
		snprintf(f[i].name, sizeof f[i].name, "%s", json_string_value(json_object_get(x, "file")));
		snap_shard_range(ps->m.n_params, ps->m.world_size, f[i].rank, &f[i].lo, &f[i].count);
		f[i].bytes = json_integer_value(json_object_get(x, "bytes"));
		snprintf(f[i].xxh3, sizeof f[i].xxh3, "%s", json_string_value(json_object_get(x, "xxh3")));
		total += f[i].bytes;
	}
	snap_manifest_t m = ps->m;
	m.files = f;
	m.n_files = (int)n;
	if (rc == 0)
		rc = snap_commit(ps->tmp_dir, ps->final_dir, &m, err, sizeof err);
	char final_dir[sizeof ps->final_dir];
	snprintf(final_dir, sizeof final_dir, "%s", ps->final_dir);
	if (rc == 0) {
		ps->committed = true;
		if (step > r->last_committed)
			r->last_committed = step;
	}
	pthread_mutex_unlock(&r->snap_lock);
	free(f);
	if (rc < 0) {
		fprintf(stderr, "ringworker rank: error: snapshot of step %lld not committed: %s\n",
		        (long long)step, err);
		return;
	}
	int64_t deleted[64];
	int n_deleted = snap_prune(r->job_dir, r->spec->checkpoint.keep_last, r->spec->checkpoint.keep_every,
	                           deleted, 64, err, sizeof err);
	if (n_deleted < 0) {
		fprintf(stderr, "ringworker rank: error: snapshot retention: %s\n", err);
		n_deleted = 0;
	}
	json_t *del = json_array();
	for (int i = 0; i < n_deleted; i++)
		json_array_append_new(del, json_integer((json_int_t)deleted[i]));
	rank_send(r, WIRE_SNAPSHOT_COMMITTED,
	       json_pack("{s:I, s:I, s:s, s:o}", "step", (json_int_t)step, "bytes", (json_int_t)total,
	                 "path", final_dir, "deleted", del));
	fprintf(stderr, "ringworker rank: snapshot of step %lld committed: %s (%lld bytes)\n",
	        (long long)step, final_dir, (long long)total);
}

/* Rank 0 at the end: wait (the watcher commits) until the last snapshot
 * reported is committed, so that the final state is never left behind. */
void rank_snap_wait_last(rank_t *r)
{
	if (r->opt->rank != 0 || !r->job_dir[0])
		return;
	for (int waited = 0; waited < SNAP_FINAL_COMMIT_MS; waited += WATCH_INTERVAL_MS) {
		pthread_mutex_lock(&r->snap_lock);
		bool done = r->last_committed >= r->last_reported;
		pthread_mutex_unlock(&r->snap_lock);
		if (done)
			return;
		struct timespec ts = {0, WATCH_INTERVAL_MS * 1000000L};
		nanosleep(&ts, NULL);
	}
	fprintf(stderr, "ringworker rank: error: the snapshot of step %lld was not committed within %d s\n",
	        (long long)r->last_reported, SNAP_FINAL_COMMIT_MS / 1000);
}
