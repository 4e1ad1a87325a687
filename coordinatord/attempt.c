/*
 * attempt: the life of a job's live attempt and its recovery (see
 * attempt.h and docs/coordinator.md "Recovery").
 */
#include "attempt.h"

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
#include "agents.h"
#include "kv.h"
#include "program.h"

void attempt_free(attempt_t *at)
{
	if (!at)
		return;
	kv_free(at);
	jobspec_free(&at->spec);
	json_decref(at->spec_json);
	for (int r = 0; at->ranks && r < at->world_size; r++)
		free(at->ranks[r].failed_reason);
	free(at->cause);
	free(at->rec);
	free(at->shards);
	free(at->sent_shards);
	free(at->ranks);
	free(at);
}

/*
 * End a live attempt: the job goes to `to` with `reason` (unless it is
 * already there in the store: cancel), its unfinished ranks become lost, and
 * with `kill` its connected ranks get ABORT and its agents KILL (rank -1).
 * Devices are freed and the scheduler runs again. `at` is freed.
 */
void attempt_end(fabric_t *f, attempt_t *at, store_job_state_t to, const char *reason, bool kill,
                        bool state_already_set)
{
	int64_t now = clock_wall_us();
	if (fabric_tx(f)) {
		if (!state_already_set)
			fabric_wrote(f, store_job_set_state(f->st, at->job_id, to, reason, now), "job state");
		fabric_wrote(f, store_rank_lose_attempt(f->st, at->job_id, at->attempt, now), "ranks lost");
	}
	if (kill) {
		char ident[WIRE_MAX_IDENTITY_BYTES + 1];
		for (int r = 0; r < at->world_size; r++) {
			if (!at->ranks[r].connected)
				continue;
			fabric_rank_ident(ident, at->job_id, at->attempt, r);
			fabric_send_to(f, ident, WIRE_ABORT,
			               json_pack("{s:s, s:i, s:s}", "job", at->job_id, "attempt", at->attempt, "reason",
			                         reason));
		}
		unsigned gen = ++f->mark_gen;
		for (int r = 0; r < at->world_size; r++) {
			agent_t *a = at->ranks[r].agent;
			if (!a || !a->alive || a->mark == gen)
				continue;
			a->mark = gen;
			fabric_send_to(f, a->ident, WIRE_KILL,
			               json_pack("{s:s, s:i, s:i}", "job", at->job_id, "attempt", at->attempt, "rank", -1));
		}
	}
	log_info("job %s attempt %d %s: %s", at->job_id, at->attempt, store_job_state_name(to), reason);
	for (int r = 0; r < at->world_size; r++) {
		rank_rt_t *rr = &at->ranks[r];
		device_t *d = rr->agent ? agents_device(rr->agent, rr->device_kind, rr->device_index) : NULL;
		if (d && d->owner == at)
			d->owner = NULL;
	}
	smap_del(&f->attempts, at->job_id);
	attempt_free(at);
	f->sched_dirty = true;
}

void attempt_fail(fabric_t *f, attempt_t *at, const char *cause)
{
	attempt_end(f, at, STORE_JOB_FAILED, cause, true, false);
}

attempt_verdict_t attempt_decide(bool retryable, int restarts, int max_restarts)
{
	if (!retryable)
		return ATTEMPT_FAIL_NOT_RETRYABLE;
	if (restarts >= max_restarts)
		return ATTEMPT_FAIL_EXHAUSTED;
	return ATTEMPT_RESTART;
}

/* The wait before restart number `n` (1 for the first): none for the first,
 * then restart_backoff_ms doubling, at most restart_backoff_max_ms. */
int64_t attempt_backoff_us(const fabric_options_t *opt, int n)
{
	if (n <= 1)
		return 0;
	int64_t ms = opt->restart_backoff_ms;
	for (int k = 2; k < n && ms < opt->restart_backoff_max_ms; k++)
		ms *= 2;
	if (ms > opt->restart_backoff_max_ms)
		ms = opt->restart_backoff_max_ms;
	return ms * 1000;
}

/* What a failure that no restart can fix is (api/exitcode.h), or NULL when
 * a restart may help (signals, collectives, memory, anything else). */
const char *attempt_not_retryable(rm_failure_t kind)
{
	return rm_failure_retryable(kind) ? NULL : rm_failure_describe(kind);
}

/* The failure kind of a FAILED or RANK_EXITED payload: its `failure` code
 * when it carries one this build knows, else what exit status `exit_code`
 * (signal `sig`) means (an older worker). */
rm_failure_t attempt_payload_failure(const json_t *p, int exit_code, int sig)
{
	json_t *v = json_object_get(p, "failure");
	if (json_is_integer(v) && rm_failure_valid(json_integer_value(v)))
		return (rm_failure_t)json_integer_value(v);
	return rm_exit_failure(exit_code, sig);
}

/* A rank of a failed attempt is gone once its agent reported its exit, or
 * the agent itself is gone. */
bool attempt_rank_gone(const rank_rt_t *rr)
{
	return rr->exited || !rr->agent || !rr->agent->alive;
}

/* A parked rank that can be kept for the next attempt. */
bool attempt_rank_kept(const rank_rt_t *rr)
{
	return rr->rejoin && rr->parked && !attempt_rank_gone(rr);
}

/* The ABORT that asks a survivor of the failed attempt `at` to park. */
json_t *attempt_rejoin_abort(const attempt_t *at)
{
	char reason[REASON_BYTES + 16];
	snprintf(reason, sizeof reason, "recovering: %s", at->cause ? at->cause : "attempt failed");
	return json_pack("{s:s, s:i, s:s, s:b}", "job", at->job_id, "attempt", at->attempt, "reason", reason,
	                 "rejoin", 1);
}

/* Stop rank r of the failed attempt `at` for good: a plain ABORT on its
 * identity and a KILL of just that rank to its agent. */
void attempt_stop_rank(fabric_t *f, attempt_t *at, int r, const char *reason)
{
	rank_rt_t *rr = &at->ranks[r];
	char ident[WIRE_MAX_IDENTITY_BYTES + 1];
	if (rr->connected) {
		fabric_rank_ident(ident, at->job_id, at->attempt, r);
		fabric_send_to(f, ident, WIRE_ABORT,
		               json_pack("{s:s, s:i, s:s}", "job", at->job_id, "attempt", at->attempt, "reason", reason));
	}
	if (rr->agent && rr->agent->alive && !rr->exited)
		fabric_send_to(f, rr->agent->ident, WIRE_KILL,
		               json_pack("{s:s, s:i, s:i}", "job", at->job_id, "attempt", at->attempt, "rank", r));
	rr->rejoin = false;
}

/* A failed attempt whose ranks are all gone or parked (or whose grace is
 * over: the others are stopped) waits out its backoff; the scheduling pass
 * then restarts it. */
void attempt_check_drained(fabric_t *f, attempt_t *at, int64_t now)
{
	if (!at->failed || at->drained)
		return;
	int n_left = 0;
	for (int r = 0; r < at->world_size; r++)
		n_left += !attempt_rank_gone(&at->ranks[r]) && !attempt_rank_kept(&at->ranks[r]);
	if (n_left > 0 && now < at->drain_deadline_us)
		return;
	for (int r = 0; r < at->world_size && n_left > 0; r++)
		if (!attempt_rank_gone(&at->ranks[r]) && !attempt_rank_kept(&at->ranks[r]))
			attempt_stop_rank(f, at, r, "did not park within the restart grace: replaced by a new process");
	at->drained = true;
	int64_t wait = attempt_backoff_us(&f->opt, at->restarts);
	at->restart_at_us = now + wait;
	if (n_left > 0)
		log_warn("job %s attempt %d: %d rank(s) not reported gone after %.1f s: restarting anyway",
		         at->job_id, at->attempt, n_left, (double)f->opt.restart_grace_ms / 1e3);
	log_info("job %s attempt %d: every rank is gone: restart %d of %d in %lld ms", at->job_id, at->attempt,
	         at->restarts, at->max_restarts, (long long)(wait / 1000));
	f->sched_dirty = true;
}

/*
 * A rank of the live attempt `at` failed (`cause`), `detection_us` after it
 * happened. With restarts left and a failure a restart can help
 * (`not_retryable` NULL), the job goes `recovering`: the attempt's ranks get
 * ABORT ("recovering: CAUSE") and their agents KILL, its messages are
 * refused from now on, and once its ranks are gone and the backoff is over
 * the scheduler places the next attempt. Otherwise the job fails. An attempt
 * that has failed already is left alone. `at` may be freed.
 */
void attempt_failed(fabric_t *f, attempt_t *at, const char *cause, const char *not_retryable,
                           int64_t detection_us)
{
	if (at->failed)
		return;
	char reason[REASON_BYTES];
	switch (attempt_decide(not_retryable == NULL, at->restarts, at->max_restarts)) {
	case ATTEMPT_FAIL_NOT_RETRYABLE:
		snprintf(reason, sizeof reason, "%s (%s: not retried)", cause, not_retryable);
		attempt_fail(f, at, reason);
		return;
	case ATTEMPT_FAIL_EXHAUSTED:
		snprintf(reason, sizeof reason, "restart.max_restarts (%d) reached: %s", at->max_restarts, cause);
		attempt_fail(f, at, reason);
		return;
	case ATTEMPT_RESTART: break;
	}
	int64_t now = clock_mono_us(), now_wall = clock_wall_us();
	at->failed = true;
	at->restarts++;
	at->failed_mono_us = now;
	at->detection_us = detection_us > 0 ? detection_us : 0;
	at->drain_deadline_us = now + (int64_t)f->opt.restart_grace_ms * 1000;
	free(at->cause);
	at->cause = strdup(cause);
	at->state = STORE_JOB_RECOVERING;
	kv_drop_parked(at);
	snprintf(reason, sizeof reason, "attempt %d failed: %s; restart %d of %d (backoff %lld ms)", at->attempt,
	         cause, at->restarts, at->max_restarts, (long long)(attempt_backoff_us(&f->opt, at->restarts) / 1000));
	if (fabric_tx(f)) {
		fabric_wrote(f, store_job_set_state(f->st, at->job_id, STORE_JOB_RECOVERING, cause, now_wall), "job recovering");
		fabric_wrote(f, store_job_set_restarts(f->st, at->job_id, at->restarts, now_wall), "job restarts");
		fabric_wrote(f, store_event_insert(f->st, at->job_id, "recovering", NULL, NULL, reason, at->attempt, now_wall),
		             "recovering event");
	}
	log_warn("job %s recovering: %s", at->job_id, reason);
	/* Survivors (connected, on a live agent, not exited) park in their
	 * process for the next attempt; the others are stopped. */
	char abort_reason[REASON_BYTES + 16];
	snprintf(abort_reason, sizeof abort_reason, "recovering: %s", cause);
	char ident[WIRE_MAX_IDENTITY_BYTES + 1];
	for (int r = 0; r < at->world_size; r++) {
		rank_rt_t *rr = &at->ranks[r];
		if (rr->connected && !attempt_rank_gone(rr)) {
			rr->rejoin = true;
			fabric_rank_ident(ident, at->job_id, at->attempt, r);
			fabric_send_to(f, ident, WIRE_ABORT, attempt_rejoin_abort(at));
		} else if (!rr->exited) {
			attempt_stop_rank(f, at, r, abort_reason);
		}
	}
	attempt_check_drained(f, at, now);
}

json_t *attempt_spawn_payload(const attempt_t *at, int rank)
{
	json_t *sp = json_pack("{s:s, s:i, s:i, s:i, s:{s:s, s:i}}", "job", at->job_id, "attempt", at->attempt,
	                       "rank", rank, "world_size", at->world_size, "device", "kind",
	                       fabric_kind_name(at->ranks[rank].device_kind), "index", at->ranks[rank].device_index);
	program_spawn_fields(at, rank, sp); /* a program job's program and torch objects */
	const jobspec_t *s = &at->spec;
	if (sp && s->env.n > 0) { /* issue 25: the job's env, for every job */
		json_t *env = json_object();
		for (int i = 0; env && i < s->env.n; i++)
			json_object_set_new(env, s->env.names[i], json_string(s->env.values[i]));
		json_object_set_new(sp, "env", env);
	}
	return sp;
}

/* Give back the devices a failed attempt still holds (before its restart). */
void attempt_release_devices(attempt_t *at)
{
	for (int r = 0; r < at->world_size; r++) {
		rank_rt_t *rr = &at->ranks[r];
		device_t *d = rr->agent ? agents_device(rr->agent, rr->device_kind, rr->device_index) : NULL;
		if (d && d->owner == at)
			d->owner = NULL;
	}
	at->released = true;
}

/* Whether every rank of `at` can go back on its device (its agent alive,
 * the device free). */
bool attempt_same_devices_free(const attempt_t *at)
{
	for (int r = 0; r < at->world_size; r++) {
		const rank_rt_t *rr = &at->ranks[r];
		if (!rr->agent || !rr->agent->alive || rr->device_kind != at->kind)
			return false;
		device_t *d = agents_device(rr->agent, rr->device_kind, rr->device_index);
		if (!d || d->owner)
			return false;
	}
	return true;
}

/* Ranks that exited cleanly without DONE, or sent FAILED without their exit
 * status coming, whose grace has passed; failed attempts whose grace for
 * their ranks to go is over. */
void attempt_expire(fabric_t *f, int64_t now)
{
	size_t pos = 0;
	smap_slot_t *s;
	while ((s = smap_next(&f->attempts, &pos))) {
		attempt_t *at = s->value;
		if (at->failed) {
			attempt_check_drained(f, at, now);
			continue;
		}
		for (int r = 0; r < at->world_size; r++) {
			rank_rt_t *rr = &at->ranks[r];
			char cause[REASON_BYTES];
			if (rr->failed_deadline_us && rr->failed_deadline_us <= now) {
				snprintf(cause, sizeof cause, "rank %d failed: %s", r, rr->failed_reason);
				attempt_failed(f, at, cause, NULL, 0); /* may free at: go on with the next attempt */
				break;
			}
			if (rr->clean_exit_deadline_us && !rr->done && rr->clean_exit_deadline_us <= now) {
				snprintf(cause, sizeof cause, "rank %d exited with status 0 before reporting DONE", r);
				attempt_failed(f, at, cause, NULL, 0); /* may free at: go on with the next attempt */
				break;
			}
		}
	}
}
