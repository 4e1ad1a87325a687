/*
 * ranks: the messages of rank processes (see ranks.h).
 */
#include "ranks.h"

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
#include "attempt.h"
#include "kv.h"
#include "snapcommit.h"
#include "traces.h"

/* "rank/<job>/<attempt>/<rank>" -> its parts. */
static bool parse_rank_ident(const char *ident, char job[STORE_ID_BYTES], int *ret_attempt, int *ret_rank)
{
	const char *p = ident + 5;
	const char *slash = strchr(p, '/');
	if (!slash || slash == p || (size_t)(slash - p) >= STORE_ID_BYTES)
		return false;
	memcpy(job, p, (size_t)(slash - p));
	job[slash - p] = '\0';
	const char *q = slash + 1;
	char *end;
	if (*q < '0' || *q > '9')
		return false;
	errno = 0;
	long att = strtol(q, &end, 10);
	if (errno || *end != '/' || att < 0 || att > INT_MAX)
		return false;
	q = end + 1;
	if (*q < '0' || *q > '9')
		return false;
	long rank = strtol(q, &end, 10);
	if (errno || *end || rank < 0 || rank > INT_MAX)
		return false;
	*ret_attempt = (int)att;
	*ret_rank = (int)rank;
	return true;
}

/* METRICS' memory figures (all four present: wire_decode checked the set)
 * into *ret; false when the message has none. */
static bool metrics_memory(const json_t *p, store_rank_memory_t *ret)
{
	json_t *pb = json_object_get(p, "params_bytes");
	if (!pb)
		return false;
	ret->params_bytes = (int64_t)json_integer_value(pb);
	ret->grads_bytes = (int64_t)json_integer_value(json_object_get(p, "grads_bytes"));
	ret->optim_bytes = (int64_t)json_integer_value(json_object_get(p, "optim_bytes"));
	ret->activations_bytes = (int64_t)json_integer_value(json_object_get(p, "activations_bytes"));
	return true;
}

/* A number field of METRICS, in ms (0 when absent). */
static double ms_field(const json_t *p, const char *name)
{
	json_t *v = json_object_get(p, name);
	return json_is_number(v) ? json_number_value(v) : 0.0;
}

/*
 * Rank 0 of an attempt placed by a restart sent its first METRICS: the job
 * has recovered. The `recovered` event (and the log line) give the cause,
 * the attempt, the snapshot step and where the time went, in ms:
 * detection (the failure -> the coordinator heard of it), respawn (-> the
 * new attempt's SPAWNs sent: the old ranks stopping and the backoff), start
 * (-> its rank 0 joined), rendezvous and snapshot load (as rank 0 measured
 * them), first step (the rest, up to this METRICS); total is their sum.
 */
static void report_recovered(fabric_t *f, attempt_t *at, const json_t *p)
{
	recovery_t *rec = at->rec;
	at->rec = NULL;
	int64_t now = clock_mono_us();
	json_t *rs = json_object_get(p, "resumed_from_step");
	int64_t step = json_is_integer(rs) ? (int64_t)json_integer_value(rs) : rec->resume_step;
	double detection = (double)rec->detection_us / 1e3;
	double total = detection + (double)(now - rec->failed_mono_us) / 1e3;
	double respawn = (double)(rec->spawned_mono_us - rec->failed_mono_us) / 1e3;
	double start = rec->joined0_mono_us ? (double)(rec->joined0_mono_us - rec->spawned_mono_us) / 1e3 : 0.0;
	double rendezvous = ms_field(p, "rendezvous_ms"), load = ms_field(p, "load_ms");
	double first = total - detection - respawn - start - rendezvous - load;
	if (first < 0)
		first = 0;
	char how[64];
	if (step > 0)
		snprintf(how, sizeof how, "resumed from snapshot step %lld", (long long)step);
	else
		snprintf(how, sizeof how, "started from step 0 (no snapshot)");
	char reason[REASON_BYTES + 512];
	snprintf(reason, sizeof reason,
	         "recovered from %s: attempt %d %s in %.0f ms (detection %.0f ms, respawn %.0f ms, start %.0f ms, "
	         "rendezvous %.0f ms, snapshot load %.0f ms, first step %.0f ms)",
	         rec->cause, at->attempt, how, total, detection, respawn, start, rendezvous, load, first);
	if (fabric_tx(f))
		fabric_wrote(f, store_event_insert(f->st, at->job_id, "recovered", NULL, NULL, reason, at->attempt, clock_wall_us()),
		             "recovered event");
	log_info("job %s: %s", at->job_id, reason);
	free(rec);
}

static void on_metrics(fabric_t *f, attempt_t *at, int rank, json_t *p)
{
	const char *skipped = json_string_value(json_object_get(p, "snapshot_skipped"));
	if (rank == 0 && skipped && skipped[0] && fabric_tx(f)) {
		/* rank 0's first METRICS: it passed over newer snapshots on load */
		char reason[REASON_BYTES];
		snprintf(reason, sizeof reason, "attempt %d passed over corrupt or unreadable snapshot(s): %.700s",
		         at->attempt, skipped);
		log_warn("job %s: %s", at->job_id, reason);
		fabric_wrote(f, store_event_insert(f->st, at->job_id, "snapshot_skipped", NULL, NULL, reason, at->attempt,
		                                   clock_wall_us()),
		             "snapshot_skipped event");
	}
	if (rank == 0 && at->rec)
		report_recovered(f, at, p);
	store_rank_memory_t mem;
	rank_rt_t *rr = &at->ranks[rank];
	if (metrics_memory(p, &mem) &&
	    (!rr->has_memory || memcmp(&mem, &rr->memory, sizeof mem) != 0) && fabric_tx(f)) {
		rr->has_memory = true;
		rr->memory = mem;
		fabric_wrote(f, store_rank_set_memory(f->st, at->job_id, at->attempt, rank, &mem), "rank memory");
	}
	/* Rank 0's loss is the global mean: its rows are the job's. Other ranks'
	 * rows (and memory-only messages) store no metrics row. */
	if (rank != 0 || !json_object_get(p, "loss"))
		return;
	store_metric_t m;
	memset(&m, 0, sizeof m);
	snprintf(m.job_id, sizeof m.job_id, "%s", at->job_id);
	m.attempt = at->attempt;
	m.rank = rank;
	m.step = (int64_t)json_integer_value(json_object_get(p, "step"));
	m.loss = json_number_value(json_object_get(p, "loss"));
	m.lr = json_number_value(json_object_get(p, "lr"));
	m.grad_norm = json_number_value(json_object_get(p, "grad_norm"));
	m.tokens_per_s = json_number_value(json_object_get(p, "tokens_per_s"));
	m.ms = json_number_value(json_object_get(p, "ms"));
	json_t *vl = json_object_get(p, "val_loss");
	m.has_val_loss = json_is_number(vl);
	m.val_loss = m.has_val_loss ? json_number_value(vl) : NAN;
	m.at_us = clock_wall_us();
	/* Rows lost while the coordinator was down (or in its buffers when it
	 * died) show as a prev_step past the last stored row: ask rank 0 for
	 * them again (wire.h, METRICS_RESEND), once per gap. */
	if (at->last_metric_step < 0 &&
	    store_metric_last_step(f->st, at->job_id, at->attempt, &at->last_metric_step) < 0)
		at->last_metric_step = 0;
	json_t *prev = json_object_get(p, "prev_step");
	int64_t from = at->last_metric_step + 1;
	if (json_is_integer(prev) && json_integer_value(prev) >= from && at->resend_from != from) {
		char ident[WIRE_MAX_IDENTITY_BYTES + 1];
		fabric_rank_ident(ident, at->job_id, at->attempt, 0);
		fabric_send_to(f, ident, WIRE_METRICS_RESEND,
		               json_pack("{s:I, s:I}", "from_step", (json_int_t)from, "to_step",
		                         (json_int_t)json_integer_value(prev)));
		at->resend_from = from;
		log_info("job %s attempt %d: metrics rows from step %lld to %lld missing; asked rank 0 to "
		         "send them again", at->job_id, at->attempt, (long long)from,
		         (long long)json_integer_value(prev));
	}
	if (m.step > at->last_metric_step)
		at->last_metric_step = m.step;
	if (fabric_tx(f))
		fabric_wrote(f, store_metric_insert(f->st, &m), "metrics row");
}

static void on_join(fabric_t *f, attempt_t *at, int rank, const char *ident, json_t *p)
{
	const char *job = json_string_value(json_object_get(p, "job"));
	json_int_t att = json_integer_value(json_object_get(p, "attempt"));
	json_int_t rk = json_integer_value(json_object_get(p, "rank"));
	if (strcmp(job, at->job_id) != 0 || att != at->attempt || rk != rank) {
		fabric_send_error(f, ident, strlen(ident), 400, "JOIN: job, attempt and rank must match the identity");
		return;
	}
	rank_rt_t *rr = &at->ranks[rank];
	if (!rr->joined) {
		rr->joined = true;
		at->n_joined++;
		if (fabric_tx(f))
			fabric_wrote(f, store_rank_set_state(f->st, at->job_id, at->attempt, rank, "joined", false, 0, 0,
			                                     clock_wall_us()),
			             "rank joined");
	}
	/* the snapshot to resume from: the job's latest committed one, for every
	 * attempt; without one, the spec's resume_from (another job's) */
	int64_t step = 0;
	char *path = NULL;
	int r = store_checkpoint_latest(f->st, at->job_id, &step, &path);
	if (r < 0 && r != -ENOENT)
		log_error("store: cannot read the latest checkpoint of job %s: %s", at->job_id, strerror(-r));
	const char *src = at->spec.resume_from.job;
	if (r == -ENOENT && src) {
		step = at->spec.resume_from.step;
		r = store_checkpoint_get(f->st, src, step, &path);
		if (r < 0) {
			/* checked at submission, removed since (the other job's
			 * retention): starting fresh would not be what was asked */
			char reason[REASON_BYTES];
			snprintf(reason, sizeof reason,
			         "resume_from: job %.40s has no committed checkpoint at step %lld any more (%s); "
			         "submit again naming one of its checkpoints",
			         src, (long long)step, r == -ENOENT ? "removed since the job was submitted"
			                                                       : strerror(-r));
			attempt_fail(f, at, reason);
			return;
		}
	}
	json_t *resume = r == 0 ? json_pack("{s:I, s:s}", "step", (json_int_t)step, "path", path) : json_null();
	free(path);
	if (rank == 0 && at->rec && !at->rec->joined0_mono_us) {
		at->rec->joined0_mono_us = clock_mono_us();
		at->rec->has_resume = r == 0;
		at->rec->resume_step = r == 0 ? step : 0;
	}
	fabric_send_to(f, ident, WIRE_JOINED,
	               resume ? json_pack("{s:s, s:i, s:i, s:i, s:O, s:i, s:o}", "job", at->job_id, "attempt", at->attempt,
	                                  "rank", rank, "world_size", at->world_size, "spec", at->spec_json, "metrics_every",
	                                  f->opt.metrics_every, "resume", resume)
	                      : NULL);
	if (at->n_joined == at->world_size && at->state == STORE_JOB_SCHEDULED) {
		char reason[200];
		snprintf(reason, sizeof reason, "all %d rank(s) joined", at->world_size);
		at->state = STORE_JOB_RUNNING;
		if (fabric_tx(f))
			fabric_wrote(f, store_job_set_state(f->st, at->job_id, STORE_JOB_RUNNING, reason, clock_wall_us()), "job running");
		log_info("job %s attempt %d running: %s", at->job_id, at->attempt, reason);
	}
}

static void on_done(fabric_t *f, attempt_t *at, int rank, json_t *p)
{
	rank_rt_t *rr = &at->ranks[rank];
	if (rr->done)
		return;
	rr->done = true;
	at->n_done++;
	if (fabric_tx(f))
		fabric_wrote(f, store_rank_set_state(f->st, at->job_id, at->attempt, rank, "done", false, 0, 0, clock_wall_us()),
		             "rank done");
	if (at->n_done < at->world_size)
		return;
	char reason[256];
	snprintf(reason, sizeof reason, "all %d rank(s) done at step %lld (loss %.6g)", at->world_size,
	         (long long)json_integer_value(json_object_get(p, "step")),
	         json_number_value(json_object_get(p, "loss")));
	attempt_end(f, at, STORE_JOB_SUCCEEDED, reason, false, false);
}

/*
 * FAILED {reason, exit_code?}: whether a restart can help depends on the exit
 * status. With exit_code, or with no restart left, decide now; otherwise wait
 * (FAILED_EXIT_GRACE_US) for the agent's RANK_EXITED, which carries it.
 */
static void on_failed(fabric_t *f, attempt_t *at, int rank, json_t *p)
{
	rank_rt_t *rr = &at->ranks[rank];
	const char *reason = json_string_value(json_object_get(p, "reason"));
	json_t *code = json_object_get(p, "exit_code");
	char cause[REASON_BYTES];
	snprintf(cause, sizeof cause, "rank %d failed: %s", rank, reason);
	if (json_is_integer(code) || json_object_get(p, "failure") || at->restarts >= at->max_restarts) {
		int c = json_is_integer(code) ? (int)json_integer_value(code) : RM_EXIT_USAGE;
		attempt_failed(f, at, cause, attempt_not_retryable(attempt_payload_failure(p, c, 0)), 0);
		return;
	}
	if (rr->failed_reason)
		return; /* a repeat */
	rr->failed_reason = strdup(reason);
	if (!rr->failed_reason) {
		attempt_failed(f, at, cause, NULL, 0);
		return;
	}
	rr->failed_deadline_us = clock_mono_us() + FAILED_EXIT_GRACE_US;
}

/* PARKED from a survivor of a failed attempt: it waits for the next one. */
static void on_parked(fabric_t *f, attempt_t *at, int rank, json_t *p)
{
	rank_rt_t *rr = &at->ranks[rank];
	if (rr->parked)
		return;
	rr->parked = true;
	log_info("job %s attempt %d: rank %d parked after step %lld, kept for the next attempt", at->job_id,
	         at->attempt, rank, (long long)json_integer_value(json_object_get(p, "step")));
	attempt_check_drained(f, at, clock_mono_us());
}

/*
 * --broker-auth on: a rank speaks with the key of the agent it was placed
 * on. For the live attempt's ranks the sender's key must be that agent's;
 * anything else is refused (ERROR 403, logged, nothing changed). Messages
 * for other attempts only ever get ABORTs or errors below, whoever sends
 * them. A rank that joined and hears from another key lost its connection
 * to that key (ROUTER handover hands the identity to the newest
 * connection): its attempt fails as on a rank's death, so that the job
 * restarts instead of waiting forever on a rank nobody hears.
 */
static bool rank_key_matches(fabric_t *f, const char *ident, wire_type_t type, attempt_t *at, int att, int rank)
{
	if (!at || att != at->attempt)
		return true;
	rank_rt_t *rr = rank < at->world_size ? &at->ranks[rank] : NULL;
	int64_t owner = rr && rr->agent ? rr->agent->key_id : 0;
	if (owner && owner == f->peer.key_id)
		return true;
	char who[300], cause[REASON_BYTES];
	snprintf(who, sizeof who, "%s:%lld", ident, (long long)f->peer.key_id);
	curve_log_refusal(who, "refused %s on identity %s from key %lld: the rank is placed on %s (key %lld)",
	                  wire_type_name(type), ident, (long long)f->peer.key_id,
	                  rr && rr->agent ? rr->agent->node : "no node", (long long)owner);
	fabric_send_error(f, ident, strlen(ident), 403, "this rank identity belongs to another agent's key");
	if (owner && rr->joined && !rr->done && !at->failed) {
		snprintf(cause, sizeof cause, "rank %d lost: its identity was taken over by key %lld", rank,
		         (long long)f->peer.key_id);
		attempt_failed(f, at, cause, NULL, 0);
	}
	return false;
}

void ranks_on_message(fabric_t *f, const char *ident, wire_type_t type, json_t *p)
{
	char job[STORE_ID_BYTES], detail[512];
	int att, rank;
	if (!parse_rank_ident(ident, job, &att, &rank)) {
		fabric_send_error(f, ident, strlen(ident), 400, "a rank's identity must be rank/<job>/<attempt>/<rank>");
		return;
	}
	if (type != WIRE_JOIN && type != WIRE_KV_SET && type != WIRE_KV_GET && type != WIRE_METRICS &&
	    type != WIRE_DONE && type != WIRE_FAILED && type != WIRE_SNAPSHOT_WRITTEN &&
	    type != WIRE_SNAPSHOT_COMMITTED && type != WIRE_SNAPSHOT_FAILED && type != WIRE_PARKED && type != WIRE_TRACE) {
		snprintf(detail, sizeof detail,
		         "a rank sends JOIN, KV_SET, KV_GET, METRICS, TRACE, SNAPSHOT_WRITTEN, SNAPSHOT_COMMITTED, "
		         "SNAPSHOT_FAILED, PARKED, DONE or FAILED, not %s",
		         wire_type_name(type));
		fabric_send_error(f, ident, strlen(ident), 400, detail);
		return;
	}
	bool snapshot = type == WIRE_SNAPSHOT_WRITTEN || type == WIRE_SNAPSHOT_COMMITTED ||
	                type == WIRE_SNAPSHOT_FAILED;
	attempt_t *at = smap_get(&f->attempts, job);
	if (f->opt.auth && !rank_key_matches(f, ident, type, at, att, rank))
		return;
	if (snapshot && (!at || att != at->attempt || at->failed)) {
		/* never recorded: only the live attempt's snapshots can commit */
		if (at && att == at->attempt)
			snprintf(detail, sizeof detail, "%s: attempt %d of job %s failed (%s): the job is recovering",
			         wire_type_name(type), att, job, at->cause ? at->cause : "?");
		else if (at)
			snprintf(detail, sizeof detail, "%s: attempt %d of job %s is stale: the live attempt is %d",
			         wire_type_name(type), att, job, at->attempt);
		else
			snprintf(detail, sizeof detail, "%s: job %s has no live attempt (attempt %d is over)",
			         wire_type_name(type), job, att);
		fabric_send_error(f, ident, strlen(ident), 409, detail);
		return;
	}
	if (!at) {
		store_job_t sj;
		memset(&sj, 0, sizeof sj);
		int r = store_job_get(f->st, job, &sj);
		if (r == -ENOENT) {
			snprintf(detail, sizeof detail, "no job %s", job);
			fabric_send_error(f, ident, strlen(ident), 404, detail);
			return;
		}
		if (r < 0) {
			fabric_send_error(f, ident, strlen(ident), 503, "the coordinator cannot read its database");
			return;
		}
		snprintf(detail, sizeof detail, "job %s is %s (attempt %d); attempt %d has no live ranks", job,
		         store_job_state_name(sj.state), sj.attempt, att);
		store_job_clear(&sj);
		fabric_send_to(f, ident, WIRE_ABORT, json_pack("{s:s, s:i, s:s}", "job", job, "attempt", att, "reason", detail));
		return;
	}
	if (att != at->attempt) {
		if (att > 0 && att < at->attempt && rank < at->world_size && at->ranks[rank].adopted_from == att) {
			/* a kept survivor still finishing its step in the attempt it
			 * leaves: dropped (an ABORT would end the process kept) */
			log_debug("job %s: rank %d's %s of attempt %d, which it is leaving: dropped", job, rank,
			          wire_type_name(type), att);
			return;
		}
		snprintf(detail, sizeof detail, "attempt %d of job %s is stale: the live attempt is %d", att, job,
		         at->attempt);
		fabric_send_to(f, ident, WIRE_ABORT, json_pack("{s:s, s:i, s:s}", "job", job, "attempt", att, "reason", detail));
		return;
	}
	if (at->failed) {
		rank_rt_t *rr = rank < at->world_size ? &at->ranks[rank] : NULL;
		if (rr && rr->rejoin) {
			if (type == WIRE_PARKED)
				on_parked(f, at, rank, p);
			else if (!rr->parked)
				fabric_send_to(f, ident, WIRE_ABORT, attempt_rejoin_abort(at)); /* the ask, again */
			return; /* a parked rank's late messages: nothing to say */
		}
		snprintf(detail, sizeof detail, "recovering: %s", at->cause ? at->cause : "attempt failed");
		fabric_send_to(f, ident, WIRE_ABORT, json_pack("{s:s, s:i, s:s}", "job", job, "attempt", att, "reason", detail));
		return;
	}
	if (type == WIRE_PARKED) {
		snprintf(detail, sizeof detail, "PARKED: attempt %d of job %s has not failed", att, job);
		fabric_send_error(f, ident, strlen(ident), 409, detail);
		return;
	}
	if (rank >= at->world_size) {
		snprintf(detail, sizeof detail, "job %s has ranks 0 to %d, not %d", job, at->world_size - 1, rank);
		fabric_send_error(f, ident, strlen(ident), 404, detail);
		return;
	}
	at->ranks[rank].connected = true;
	switch (type) {
	case WIRE_JOIN: on_join(f, at, rank, ident, p); break;
	case WIRE_KV_SET: kv_on_set(f, at, rank, ident, p); break;
	case WIRE_KV_GET: kv_on_get(f, at, rank, ident, p); break;
	case WIRE_METRICS: on_metrics(f, at, rank, p); break;
	case WIRE_SNAPSHOT_WRITTEN: snapcommit_on_written(f, at, rank, ident, p); break;
	case WIRE_SNAPSHOT_COMMITTED: snapcommit_on_committed(f, at, rank, ident, p); break;
	case WIRE_SNAPSHOT_FAILED: snapcommit_on_failed(f, at, rank, p); break;
	case WIRE_DONE: on_done(f, at, rank, p); break;
	case WIRE_FAILED: on_failed(f, at, rank, p); break;
	case WIRE_TRACE: /* stored in this loop's transaction; coordinatord/traces.c */
		if (fabric_tx(f) && traces_record(f->st, at->job_id, at->attempt, rank, p, detail, sizeof detail) == -EINVAL)
			fabric_send_error(f, ident, strlen(ident), 400, detail);
		break;
	default: break;
	}
}
