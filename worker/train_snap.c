/*
 * train_snap: taking, reporting and resuming snapshots for the training
 * loop (see train_snap.h). Listing and retention of a job's folder are
 * api/snapshot.c's (snap_list_steps, snap_prune).
 */
#include "train_snap.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fsutil.h"
#include "snapshot.h"
#include "snapw.h"

struct tsnap {
	tsnap_setup_t cfg;           /* tensors: NULL (snap_tensors is the copy) */
	snapw_t *snapw;              /* opt->checkpoint_dir: the writer thread */
	snap_tensor_t *snap_tensors; /* (n_tensors) the model's table for manifests */
	int64_t snap_step;           /* step of the write in flight or unreported; 0: none */
	uint64_t snap_cursor;        /* the data cursor after that step */
	double load_ms;
	char skipped[1024];          /* snapshots passed over on resume */
};

static double s_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int s_error(const tsnap_t *s, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int s_error(const tsnap_t *s, int code, const char *fmt, ...)
{
	FILE *log = s->cfg.opt->log;
	va_list ap;
	fputs("ringworker: error: ", log);
	va_start(ap, fmt);
	vfprintf(log, fmt, ap);
	va_end(ap);
	fputc('\n', log);
	fflush(log);
	return code;
}

int tsnap_new(const tsnap_setup_t *setup, tsnap_t **ret_snap)
{
	tsnap_t *s = calloc(1, sizeof *s);
	if (!s) {
		fprintf(setup->opt->log, "ringworker: error: out of memory\n");
		return RM_EXIT_NOMEM;
	}
	s->cfg = *setup;
	s->cfg.tensors = NULL;
	*ret_snap = s;
	if (!setup->opt->checkpoint_dir)
		return RM_EXIT_OK;
	int n = setup->n_tensors;
	s->snap_tensors = calloc((size_t)n, sizeof *s->snap_tensors);
	s->snapw = snapw_new();
	if (!s->snap_tensors || !s->snapw)
		return s_error(s, RM_EXIT_NOMEM, "cannot start the snapshot writer: %s",
			       strerror(errno ? errno : ENOMEM));
	for (int i = 0; i < n; i++) {
		const model_tensor_t *g = &setup->tensors[i];
		snap_tensor_t *x = &s->snap_tensors[i];
		snprintf(x->name, sizeof x->name, "%s", g->name);
		x->ndim = g->ndim;
		x->shape[0] = g->shape[0];
		x->shape[1] = g->shape[1];
		x->offset = (int64_t)g->offset;
	}
	return RM_EXIT_OK;
}

void tsnap_free(tsnap_t *s)
{
	if (!s)
		return;
	snapw_free(s->snapw);
	free(s->snap_tensors);
	free(s);
}

double tsnap_load_ms(const tsnap_t *s)
{
	return s->load_ms;
}

const char *tsnap_skipped(const tsnap_t *s)
{
	return s->skipped;
}

bool tsnap_due(const tsnap_t *s, int64_t step, int64_t n_steps, float loss)
{
	const int64_t every = s->cfg.spec->checkpoint.every_steps;
	return s->cfg.opt->checkpoint_dir && every > 0 && isfinite(loss) &&
	       (step % every == 0 || step == n_steps);
}

void tsnap_range(const tsnap_t *s, int64_t *ret_lo, int64_t *ret_count)
{
	snap_shard_range((int64_t)s->cfg.n_params, s->cfg.world_size, s->cfg.rank, ret_lo, ret_count);
}

/* ---- taking ---- */

/* Everything a manifest of `step` says but its files. The JSON objects are
 * new references; s_manifest_clear drops them. */
static void s_manifest(const tsnap_t *s, int64_t step, uint64_t cursor, snap_manifest_t *m)
{
	const jobspec_t *sp = s->cfg.spec;
	memset(m, 0, sizeof *m);
	m->step = step;
	m->world_size = s->cfg.world_size;
	snprintf(m->sharding, sizeof m->sharding, "%s", jobspec_sharding_name(sp->parallel.sharding));
	m->n_params = (int64_t)s->cfg.n_params;
	m->adam_t = step;
	m->data_cursor = json_pack("{s:I, s:I}", "cursor", (json_int_t)cursor, "global_batch",
				   (json_int_t)s->cfg.global_batch);
	m->rng = json_pack("{s:I, s:s}", "seed", (json_int_t)sp->train.seed, "sampler",
			   "permutation of (seed, global sample index); no other random state");
	m->model = jobspec_model_json(sp); /* Llama: every field, for export's config.json */
	m->n_tensors = s->cfg.n_tensors;
	m->tensors = s->snap_tensors;
}

static void s_manifest_clear(snap_manifest_t *m)
{
	json_decref(m->data_cursor);
	json_decref(m->rng);
	json_decref(m->model);
}

/* One process alone: its shard is the whole snapshot; commit it and apply
 * retention. */
static void s_commit_alone(tsnap_t *s, const train_snapshot_t *snap)
{
	const char *dir = s->cfg.opt->checkpoint_dir;
	snap_manifest_t m = *snap->manifest;
	snap_file_t file = {.rank = 0, .lo = 0, .count = (int64_t)s->cfg.n_params,
			    .bytes = snap->shard->bytes};
	snprintf(file.name, sizeof file.name, "%s", snap->shard->name);
	memcpy(file.xxh3, snap->shard->xxh3, sizeof file.xxh3);
	m.n_files = 1;
	m.files = &file;
	char err[1024];
	if (snap_commit(snap->tmp_dir, snap->final_dir, &m, err, sizeof err) < 0) {
		s_error(s, 0, "snapshot of step %" PRId64 " not committed: %s", snap->step, err);
		return;
	}
	int64_t deleted[64];
	if (snap_prune(dir, s->cfg.spec->checkpoint.keep_last, s->cfg.spec->checkpoint.keep_every,
		       deleted, 64, err, sizeof err) < 0)
		s_error(s, 0, "snapshot retention in %s: %s", dir, err);
}

/* A snapshot of `step` this rank could not write: logged, and told to the
 * caller (it never commits; the previous one stays the latest). */
static void s_snapshot_failed(tsnap_t *s, int64_t step, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void s_snapshot_failed(tsnap_t *s, int64_t step, const char *fmt, ...)
{
	const train_options_t *opt = s->cfg.opt;
	char why[700];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	s_error(s, 0, "snapshot of step %" PRId64 " not written: %s", step, why);
	if (opt->on_snapshot_failed)
		opt->on_snapshot_failed(opt->on_snapshot_ctx, step, why);
}

/* Hand a finished write to the caller (or commit it alone). */
static void s_report(tsnap_t *s, const snapw_result_t *res)
{
	const train_options_t *opt = s->cfg.opt;
	if (res->status < 0) {
		s_snapshot_failed(s, res->step, "%s", res->error);
		return;
	}
	char name[SNAP_DIRNAME_MAX], tmp[4096 + 8], fin[4096];
	snap_step_dirname(res->step, name, sizeof name);
	snprintf(fin, sizeof fin, "%s/%s", opt->checkpoint_dir, name);
	snprintf(tmp, sizeof tmp, "%s.tmp", fin);
	snap_manifest_t m;
	s_manifest(s, res->step, s->snap_cursor, &m);
	train_snapshot_t snap = {res->step, tmp, fin, &res->shard, &m, (double)res->write_us / 1e3};
	if (opt->on_snapshot)
		opt->on_snapshot(opt->on_snapshot_ctx, &snap);
	else if (s->cfg.alone)
		s_commit_alone(s, &snap);
	s_manifest_clear(&m);
}

void tsnap_poll(tsnap_t *s, bool wait)
{
	if (!s || !s->snap_step)
		return;
	snapw_result_t res;
	int done = wait ? (snapw_wait(s->snapw, &res), 1) : snapw_poll(s->snapw, &res);
	if (done != 1)
		return;
	s->snap_step = 0;
	s_report(s, &res);
}

/* step-<N>.tmp of the job's folder into buf. */
static const char *s_tmp_dir(const tsnap_t *s, int64_t step, char *buf, size_t len)
{
	char name[SNAP_DIRNAME_MAX];
	snprintf(buf, len, "%s/%s.tmp", s->cfg.opt->checkpoint_dir,
		 snap_step_dirname(step, name, sizeof name));
	return buf;
}

bool tsnap_begin(tsnap_t *s, int64_t step)
{
	tsnap_poll(s, true); /* at most one in flight */
	char tmp[4096];
	s_tmp_dir(s, step, tmp, sizeof tmp);
	int rc = fs_mkdir_p(tmp, 0700); /* the weights are the job owner's: 0700 folders, 0600 files */
	if (rc < 0) {
		s_snapshot_failed(s, step, "cannot create %s: %s", tmp, strerror(-rc));
		return false;
	}
	return true;
}

void tsnap_submit(tsnap_t *s, int64_t step, const float *params, const float *adam_m,
                  const float *adam_v, uint64_t cursor)
{
	char tmp[4096];
	s_tmp_dir(s, step, tmp, sizeof tmp);
	int64_t lo, count;
	tsnap_range(s, &lo, &count);
	int rc = snapw_submit(s->snapw, tmp, s->cfg.rank, s->cfg.world_size, step,
			      (int64_t)s->cfg.n_params, lo, count, params, adam_m, adam_v);
	if (rc < 0) {
		s_snapshot_failed(s, step, "%s", strerror(-rc));
		return;
	}
	s->snap_step = step;
	s->snap_cursor = cursor;
}

/* ---- resuming ---- */

static void s_on_skip(int64_t step, const char *reason, void *ctx)
{
	tsnap_t *s = ctx;
	size_t n = strlen(s->skipped);
	snprintf(s->skipped + n, sizeof s->skipped - n, "%sstep %" PRId64 ": %s", n ? "; " : "", step,
		 reason);
	s_error(s, 0, "snapshot of step %" PRId64 " passed over: %s", step, reason);
}

/* Reads [lo, lo + count) of one of the snapshot's flat buffers. */
typedef struct {
	snap_t *s;
	const char *which;
	float *out;
	size_t lo;
	char err[1024];
} s_piece_t;

/* One run of a TP rank's local range, read from the logical layout. */
static int s_read_piece(void *ctx, size_t local_off, size_t logical_off, size_t n)
{
	s_piece_t *p = ctx;
	return snap_read_range(p->s, p->which, (int64_t)logical_off, (int64_t)n, p->out + (local_off - p->lo),
			       p->err, sizeof p->err);
}

/* [lo, lo + count) of `which` into out: of the snapshot's flat buffer, or
 * with a TP layout of this rank's local buffer (tplayout.h). */
static int s_read(const tsnap_t *t, snap_t *s, const char *which, int64_t lo, int64_t count,
		  float *out, const tplayout_t *layout)
{
	s_piece_t p = {.s = s, .which = which, .out = out, .lo = (size_t)lo};
	int rc = 0;
	if (count > 0 && layout)
		rc = tplayout_each_local(layout, (size_t)lo, (size_t)count, s_read_piece, &p);
	else if (count > 0)
		rc = snap_read_range(s, which, lo, count, out, p.err, sizeof p.err);
	if (rc < 0)
		return s_error(t, RM_EXIT_DATA, "cannot resume from %s: %s", snap_dir(s), p.err);
	return RM_EXIT_OK;
}

/* Rank 0, resuming with a bound: committed folders past it were renamed
 * but never recorded (rank 0 died in between); they will be written again,
 * so they go. */
static void s_remove_orphans(const tsnap_t *s, int64_t bound)
{
	const char *dir = s->cfg.opt->checkpoint_dir;
	int64_t *steps;
	char err[1024];
	int n = snap_list_steps(dir, &steps, err, sizeof err);
	for (int i = 0; i < n; i++) {
		if (steps[i] <= bound)
			continue;
		char name[SNAP_DIRNAME_MAX], path[4096];
		snprintf(path, sizeof path, "%s/%s", dir, snap_step_dirname(steps[i], name, sizeof name));
		if (snap_remove(path, err, sizeof err) < 0)
			s_error(s, 0, "cannot remove the unrecorded snapshot %s: %s", path, err);
		else
			fprintf(s->cfg.opt->log, "ringworker: removed the snapshot of step %" PRId64
				" (committed on disk, never recorded by the coordinator)\n", steps[i]);
	}
	free(steps);
}

/* opt->resume_dir: open it and check every file's size and checksum.
 * RM_EXIT_* code; *ret_snap set on success. The errors of snap_open and
 * snap_verify name the folder (or its manifest) already. */
static int s_open_resume_dir(const tsnap_t *t, snap_t **ret_snap)
{
	char err[1024];
	snap_t *s = NULL;
	if (snap_open(t->cfg.opt->resume_dir, &s, err, sizeof err) < 0)
		return s_error(t, RM_EXIT_DATA,
			       "cannot start from the snapshot named by resume_from: %s", err);
	if (snap_verify(s, err, sizeof err) < 0) {
		snap_close(s);
		return s_error(t, RM_EXIT_DATA,
			       "cannot start from the snapshot named by resume_from: %s", err);
	}
	*ret_snap = s;
	return RM_EXIT_OK;
}

/* The snapshot to resume from, open in *ret_snap (NULL: none, start
 * fresh), its folder in dir: the newest usable one of the job's own, else
 * opt->resume_dir. RM_EXIT_* code. */
static int s_open(tsnap_t *t, snap_t **ret_snap, char *dir, size_t dir_len)
{
	const train_options_t *opt = t->cfg.opt;
	const bool own = opt->resume && opt->checkpoint_dir;
	char err[1024];
	snap_t *s = NULL;
	bool found = false;
	*ret_snap = NULL;
	if (own) {
		int64_t step;
		int64_t bound = opt->resume_upto >= 0 ? opt->resume_upto : INT64_MAX;
		if (t->cfg.rank == 0 && opt->resume_upto >= 0)
			s_remove_orphans(t, bound);
		found = snap_find_latest_upto(opt->checkpoint_dir, bound, &step, dir, dir_len,
					      s_on_skip, t, err, sizeof err) == 0;
		if (found && snap_open(dir, &s, err, sizeof err) < 0)
			return s_error(t, RM_EXIT_DATA, "cannot resume: %s", err);
	}
	if (!found) {
		if (!opt->resume_dir)
			return RM_EXIT_OK; /* nothing committed yet: a fresh start */
		int rc = s_open_resume_dir(t, &s);
		if (rc != RM_EXIT_OK)
			return rc;
		snprintf(dir, dir_len, "%s", opt->resume_dir);
	}
	*ret_snap = s;
	return RM_EXIT_OK;
}

/* At any world size: each rank reads its own range of the flat buffers
 * (dest's), and the data cursor is a global sample index, taken as it is. */
int tsnap_resume(tsnap_t *t, const tsnap_dest_t *dest, int64_t *ret_start_step,
                 uint64_t *ret_cursor)
{
	const train_options_t *opt = t->cfg.opt;
	*ret_start_step = 1;
	const bool own = opt->resume && opt->checkpoint_dir;
	if (!own && !opt->resume_dir)
		return RM_EXIT_OK;
	double a = s_now_s();
	char dir[4096];
	snap_t *s = NULL;
	int rc = s_open(t, &s, dir, sizeof dir);
	if (rc != RM_EXIT_OK || !s)
		return rc;
	const snap_manifest_t *m = snap_manifest(s);
	const int64_t step = m->step; /* snap_open checked it against the folder's name */
	json_t *c = json_object_get(m->data_cursor, "cursor");
	if (m->n_params != (int64_t)t->cfg.n_params) {
		rc = s_error(t, RM_EXIT_SPEC,
			     "cannot resume from %s: it holds %" PRId64 " parameters but this model has"
			     " %zu: the model in the spec is not the one that wrote the snapshot",
			     dir, m->n_params, t->cfg.n_params);
	} else if (!json_is_integer(c) || json_integer_value(c) < 0) {
		rc = s_error(t, RM_EXIT_DATA, "cannot resume from %s: its manifest has no data cursor",
			     dir);
	} else {
		rc = s_read(t, s, "params", dest->params_lo, dest->params_count, dest->params, dest->layout);
		if (rc == RM_EXIT_OK)
			rc = s_read(t, s, "adam_m", dest->lo, dest->count, dest->adam_m, dest->layout);
		if (rc == RM_EXIT_OK)
			rc = s_read(t, s, "adam_v", dest->lo, dest->count, dest->adam_v, dest->layout);
	}
	if (rc == RM_EXIT_OK) {
		*ret_cursor = (uint64_t)json_integer_value(c);
		*ret_start_step = step + 1;
		t->load_ms = (s_now_s() - a) * 1e3;
		if (!opt->quiet)
			fprintf(opt->json ? opt->log : opt->out,
				"resumed from %s (step %" PRId64 ", %d ranks, %s) in %.0f ms\n", dir, step,
				m->world_size, m->sharding, t->load_ms);
	}
	snap_close(s);
	return rc;
}
