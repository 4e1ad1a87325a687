/*
 * snapcommit: the snapshot commit protocol on the coordinator's side (see
 * snapcommit.h; the protocol is in api/wire.h).
 */
#include "snapcommit.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "clock.h"
#include "exitcode.h"
#include "log.h"
#include "snapshot.h"

/* A shard's file name: 1 to SNAP_MAX_FILE_BYTES bytes, no '/', no NUL, not
 * "." or "..": it names a file inside the step's folder, nothing else. */
static bool snap_file_ok(const json_t *v)
{
	size_t n = json_string_length(v);
	const char *s = json_string_value(v);
	return n > 0 && n <= SNAP_MAX_FILE_BYTES && strlen(s) == n && !strchr(s, '/') && strcmp(s, ".") != 0 &&
	       strcmp(s, "..") != 0;
}

/* SNAPSHOT_COMMIT of the last complete set (sent_shards) to rank 0. */
static void snap_send_commit(fabric_t *f, attempt_t *at)
{
	json_t *files = json_array();
	for (int r = 0; files && r < at->world_size; r++) {
		const shard_t *sh = &at->sent_shards[r];
		if (json_array_append_new(files, json_pack("{s:i, s:s, s:I, s:s}", "rank", r, "file", sh->file,
		                                           "bytes", (json_int_t)sh->bytes, "xxh3", sh->xxh3)) < 0) {
			json_decref(files);
			files = NULL;
		}
	}
	char ident[WIRE_MAX_IDENTITY_BYTES + 1];
	fabric_rank_ident(ident, at->job_id, at->attempt, 0);
	fabric_send_to(f, ident, WIRE_SNAPSHOT_COMMIT,
	               files ? json_pack("{s:s, s:i, s:I, s:o}", "job", at->job_id, "attempt", at->attempt, "step",
	                                 (json_int_t)at->sent_step, "files", files)
	                     : NULL);
}

static int snap_unconfirmed_index(const attempt_t *at, int64_t step)
{
	for (int i = 0; i < at->n_unconfirmed; i++)
		if (at->unconfirmed[i] == step)
			return i;
	return -1;
}

/* The gathered set is complete: it becomes the sent set, its step awaits
 * rank 0's SNAPSHOT_COMMITTED, and rank 0 gets SNAPSHOT_COMMIT. */
static void snap_complete(fabric_t *f, attempt_t *at)
{
	shard_t *t = at->sent_shards;
	at->sent_shards = at->shards;
	at->shards = t;
	at->has_sent = true;
	at->sent_step = at->gather_step;
	at->gathering = false;
	at->n_gathered = 0;
	if (at->n_unconfirmed == SNAP_MAX_UNCONFIRMED) {
		log_warn("job %s attempt %d: rank 0 never confirmed snapshot step %lld: no longer awaited",
		         at->job_id, at->attempt, (long long)at->unconfirmed[0]);
		memmove(at->unconfirmed, at->unconfirmed + 1, (SNAP_MAX_UNCONFIRMED - 1) * sizeof at->unconfirmed[0]);
		at->n_unconfirmed--;
	}
	at->unconfirmed[at->n_unconfirmed++] = at->sent_step;
	log_info("job %s attempt %d: all %d rank(s) wrote snapshot step %lld: SNAPSHOT_COMMIT to rank 0",
	         at->job_id, at->attempt, at->world_size, (long long)at->sent_step);
	snap_send_commit(f, at);
}

/* 409 when `sh` (already reported by `rank` for `step`) differs from this report. */
static bool snap_same_report(fabric_t *f, const char *ident, int rank, int64_t step, const shard_t *sh,
                             const char *file, int64_t bytes, const char *xxh3)
{
	if (strcmp(sh->file, file) == 0 && sh->bytes == bytes && strcmp(sh->xxh3, xxh3) == 0)
		return true;
	char detail[600];
	snprintf(detail, sizeof detail, "SNAPSHOT_WRITTEN: rank %d already reported step %lld as %s (%lld bytes, xxh3 %s)",
	         rank, (long long)step, sh->file, (long long)sh->bytes, sh->xxh3);
	fabric_send_error(f, ident, strlen(ident), 409, detail);
	return false;
}

/*
 * SNAPSHOT_FAILED: a rank could not write its shard of `step` (a full or
 * failing disk). The reports gathered for that step are dropped (it never
 * commits; the previous snapshot stays the latest) and the job gets one
 * `snapshot_failed` event per step.
 */
void snapcommit_on_failed(fabric_t *f, attempt_t *at, int rank, json_t *p)
{
	int64_t step = (int64_t)json_integer_value(json_object_get(p, "step"));
	const char *error = json_string_value(json_object_get(p, "error"));
	if (at->gathering && at->gather_step == step) {
		at->gathering = false;
		at->n_gathered = 0;
	}
	if (at->has_failed_snap && step <= at->failed_snap_step)
		return; /* this step's event is written (another rank's report) */
	at->has_failed_snap = true;
	at->failed_snap_step = step;
	char reason[REASON_BYTES];
	if (at->has_committed)
		snprintf(reason, sizeof reason, "snapshot of step %lld failed on rank %d: %.300s; the latest "
		         "committed snapshot stays step %lld", (long long)step, rank, error,
		         (long long)at->committed_step);
	else
		snprintf(reason, sizeof reason, "snapshot of step %lld failed on rank %d: %.300s; no snapshot of "
		         "this attempt is committed", (long long)step, rank, error);
	json_t *kind = json_object_get(p, "failure");
	log_warn("job %s attempt %d: %s (failure: %s)", at->job_id, at->attempt, reason,
	         json_is_integer(kind) ? rm_failure_name((rm_failure_t)json_integer_value(kind)) : "not given");
	if (fabric_tx(f))
		fabric_wrote(f, store_event_insert(f->st, at->job_id, "snapshot_failed", NULL, NULL, reason, at->attempt,
		                                   clock_wall_us()),
		             "snapshot_failed event");
}

void snapcommit_on_written(fabric_t *f, attempt_t *at, int rank, const char *ident, json_t *p)
{
	int64_t step = (int64_t)json_integer_value(json_object_get(p, "step"));
	json_t *file = json_object_get(p, "file");
	int64_t bytes = (int64_t)json_integer_value(json_object_get(p, "bytes"));
	const char *xxh3 = json_string_value(json_object_get(p, "xxh3"));
	if (!snap_file_ok(file)) {
		fabric_send_error(f, ident, strlen(ident), 400,
		                  "SNAPSHOT_WRITTEN: file must be a plain file name of 1 to 255 bytes (no '/', not . or ..)");
		return;
	}
	const char *name = json_string_value(file);
	if (at->has_sent && step == at->sent_step) {
		/* a repeat of a complete set: rank 0 may have lost its commit */
		if (snap_same_report(f, ident, rank, step, &at->sent_shards[rank], name, bytes, xxh3) &&
		    snap_unconfirmed_index(at, step) >= 0)
			snap_send_commit(f, at);
		return;
	}
	if ((at->has_committed && step <= at->committed_step) || (at->has_sent && step < at->sent_step) ||
	    (at->gathering && step < at->gather_step) || (at->has_failed_snap && step <= at->failed_snap_step)) {
		log_debug("job %s attempt %d: rank %d reports snapshot step %lld, older than the one in flight or "
		          "committed: ignored", at->job_id, at->attempt, rank, (long long)step);
		return;
	}
	if (!at->shards) {
		at->shards = calloc((size_t)at->world_size, sizeof *at->shards);
		at->sent_shards = calloc((size_t)at->world_size, sizeof *at->sent_shards);
		if (!at->shards || !at->sent_shards) {
			free(at->shards);
			free(at->sent_shards);
			at->shards = at->sent_shards = NULL;
			fabric_send_error(f, ident, strlen(ident), 503, "SNAPSHOT_WRITTEN: the coordinator is out of memory");
			return;
		}
	}
	if (!at->gathering || step > at->gather_step) {
		if (at->gathering)
			log_warn("job %s attempt %d: snapshot step %lld never completed (%d of %d rank(s) reported): "
			         "dropped for step %lld", at->job_id, at->attempt, (long long)at->gather_step,
			         at->n_gathered, at->world_size, (long long)step);
		memset(at->shards, 0, (size_t)at->world_size * sizeof *at->shards);
		at->gathering = true;
		at->gather_step = step;
		at->n_gathered = 0;
	}
	shard_t *sh = &at->shards[rank];
	if (sh->reported) {
		snap_same_report(f, ident, rank, step, sh, name, bytes, xxh3); /* a repeat: idempotent */
		return;
	}
	sh->reported = true;
	sh->bytes = bytes;
	snprintf(sh->xxh3, sizeof sh->xxh3, "%s", xxh3);
	snprintf(sh->file, sizeof sh->file, "%s", name);
	if (++at->n_gathered == at->world_size)
		snap_complete(f, at);
}

/* The live checkpoint steps of a job, gathered by store_checkpoint_list. */
typedef struct {
	int64_t *steps;
	size_t n, cap;
} step_list_t;

static int collect_step(const store_checkpoint_t *c, void *userdata)
{
	step_list_t *l = userdata;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		int64_t *grown = realloc(l->steps, cap * sizeof *grown);
		if (!grown)
			return -ENOMEM;
		l->steps = grown;
		l->cap = cap;
	}
	l->steps[l->n++] = c->step;
	return 0;
}

/*
 * Retention over the job's recorded checkpoints, by the rule rank 0 applies
 * to the folders (snap_retention: checkpoint.keep_last newest plus every
 * keep_every-th): rows rank 0's report did not name are marked deleted too,
 * so that a report lost with a dying rank 0 cannot leave a deleted
 * snapshot listed for ever. Inside the caller's transaction.
 */
static void retain_checkpoints(fabric_t *f, attempt_t *at, int64_t now, char *reason, size_t *rlen,
                               int *n_gone)
{
	step_list_t l = {0};
	if (store_checkpoint_list(f->st, at->job_id, collect_step, &l) < 0 || l.n == 0) {
		free(l.steps);
		return;
	}
	bool *keep = calloc(l.n, sizeof *keep);
	if (keep) {
		snap_retention(l.steps, l.n, at->spec.checkpoint.keep_last, at->spec.checkpoint.keep_every, keep);
		for (size_t i = 0; i < l.n; i++) {
			if (keep[i])
				continue;
			int r = store_checkpoint_delete(f->st, at->job_id, l.steps[i], now);
			fabric_wrote(f, r, "checkpoint deleted");
			if (r == 0)
				fabric_reason_add(reason, rlen, "%s%lld", (*n_gone)++ ? ", " : "; retention deleted step(s) ",
				                  (long long)l.steps[i]);
		}
	}
	free(keep);
	free(l.steps);
}

void snapcommit_on_committed(fabric_t *f, attempt_t *at, int rank, const char *ident, json_t *p)
{
	char detail[512];
	int64_t step = (int64_t)json_integer_value(json_object_get(p, "step"));
	int64_t bytes = (int64_t)json_integer_value(json_object_get(p, "bytes"));
	json_t *path = json_object_get(p, "path");
	json_t *deleted = json_object_get(p, "deleted");
	if (rank != 0) {
		fabric_send_error(f, ident, strlen(ident), 400, "SNAPSHOT_COMMITTED: only rank 0 commits snapshots");
		return;
	}
	size_t plen = json_string_length(path);
	if (plen == 0 || plen > SNAP_MAX_PATH_BYTES || strlen(json_string_value(path)) != plen) {
		fabric_send_error(f, ident, strlen(ident), 400, "SNAPSHOT_COMMITTED: path must be 1 to 4096 bytes, without NUL");
		return;
	}
	/* The folder is the coordinator's to name: <root>/<job>/step-N under
	 * the checkpoint root rank 0's agent reported at REGISTER. A message
	 * naming another folder is refused and nothing is recorded. */
	const agent_t *a0 = at->ranks[0].agent;
	char expected[SNAP_MAX_PATH_BYTES + 1], step_dir[32];
	if (a0 && a0->ckpt_root) {
		snprintf(expected, sizeof expected, "%s/%s/%s", a0->ckpt_root, at->job_id,
		         snap_step_dirname(step, step_dir, sizeof step_dir));
	} else if (f->opt.auth) {
		expected[0] = '\0';
	} else {
		snprintf(expected, sizeof expected, "%s", json_string_value(path)); /* --broker-auth off: as sent */
	}
	if (strcmp(expected, json_string_value(path)) != 0) {
		char who[128];
		snprintf(who, sizeof who, "%s:snapshot-path", ident);
		curve_log_refusal(who, "refused SNAPSHOT_COMMITTED of job %s step %lld from %s: path %.200s is not %s",
		                  at->job_id, (long long)step, ident, json_string_value(path),
		                  expected[0] ? expected : "derivable (its agent reported no checkpoint_root)");
		fabric_send_error(f, ident, strlen(ident), 400,
		                  "SNAPSHOT_COMMITTED: path is not the snapshot folder the coordinator derives "
		                  "(<checkpoint root>/<job>/step-<NNNNNNNN>)");
		return;
	}
	size_t n_deleted = json_array_size(deleted), i;
	json_t *e;
	if (n_deleted > SNAP_MAX_DELETED) {
		fabric_send_error(f, ident, strlen(ident), 413, "SNAPSHOT_COMMITTED: deleted lists more than 65536 steps");
		return;
	}
	json_array_foreach(deleted, i, e)
	{
		if (!json_is_integer(e) || json_integer_value(e) < 0) {
			snprintf(detail, sizeof detail, "SNAPSHOT_COMMITTED: deleted[%zu] must be an integer >= 0", i);
			fabric_send_error(f, ident, strlen(ident), 400, detail);
			return;
		}
	}
	int pending = snap_unconfirmed_index(at, step);
	if (pending < 0 && at->has_committed && step == at->committed_step)
		return; /* a repeat: recorded already */
	if (pending < 0) {
		snprintf(detail, sizeof detail,
		         "SNAPSHOT_COMMITTED: step %lld of attempt %d was not sent in a SNAPSHOT_COMMIT (not every rank "
		         "reported it written)",
		         (long long)step, at->attempt);
		fabric_send_error(f, ident, strlen(ident), 409, detail);
		return;
	}
	int64_t now = clock_wall_us();
	char reason[REASON_BYTES];
	size_t rlen = 0;
	fabric_reason_add(reason, &rlen, "snapshot step %lld committed: %d file(s), %lld bytes", (long long)step,
	                  at->world_size, (long long)bytes);
	if (fabric_tx(f)) {
		store_checkpoint_t c = {
			.step = step,
			.attempt = at->attempt,
			.world_size = at->world_size,
			.bytes = bytes,
			.path = expected,
			.committed_at_us = now,
		};
		snprintf(c.job_id, sizeof c.job_id, "%s", at->job_id);
		fabric_wrote(f, store_checkpoint_commit(f->st, &c), "checkpoint commit");
		int n_gone = 0;
		json_array_foreach(deleted, i, e)
		{
			int64_t old = (int64_t)json_integer_value(e);
			if (old == step)
				continue; /* never the one just committed */
			int r = store_checkpoint_delete(f->st, at->job_id, old, now);
			fabric_wrote(f, r, "checkpoint deleted");
			if (r == 0)
				fabric_reason_add(reason, &rlen, "%s%lld", n_gone++ ? ", " : "; retention deleted step(s) ",
				                  (long long)old);
		}
		retain_checkpoints(f, at, now, reason, &rlen, &n_gone);
		fabric_wrote(f, store_event_insert(f->st, at->job_id, "checkpoint", NULL, NULL, reason, at->attempt, now),
		             "checkpoint event");
	}
	log_info("job %s attempt %d: %s", at->job_id, at->attempt, reason);
	memmove(at->unconfirmed + pending, at->unconfirmed + pending + 1,
	        (size_t)(at->n_unconfirmed - pending - 1) * sizeof at->unconfirmed[0]);
	at->n_unconfirmed--;
	if (!at->has_committed || step > at->committed_step)
		at->committed_step = step;
	at->has_committed = true;
}
