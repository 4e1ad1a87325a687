/*
 * store_jobs: the jobs table and what hangs off each job row: the job
 * states' names, inserting, reading, listing and counting jobs, state
 * changes with their event, the event log, idempotency keys of POST
 * /v1/jobs, and the job's attempt and restart counters (see store.h for
 * the contracts). Every state change writes its event in the same call, so
 * a caller's transaction holds both or neither.
 */
#include "store_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

static const char *const state_names[STORE_JOB_N_STATES] = {
	[STORE_JOB_QUEUED] = "queued",         [STORE_JOB_SCHEDULED] = "scheduled",
	[STORE_JOB_RUNNING] = "running",       [STORE_JOB_RECOVERING] = "recovering",
	[STORE_JOB_SUCCEEDED] = "succeeded",   [STORE_JOB_FAILED] = "failed",
	[STORE_JOB_CANCELLED] = "cancelled",
};

const char *store_job_state_name(store_job_state_t s)
{
	if ((int)s < 0 || s >= STORE_JOB_N_STATES)
		return NULL;
	return state_names[s];
}

int store_job_state_parse(const char *name, store_job_state_t *ret_state)
{
	for (int i = 0; name && i < STORE_JOB_N_STATES; i++) {
		if (strcmp(name, state_names[i]) == 0) {
			*ret_state = (store_job_state_t)i;
			return 0;
		}
	}
	return -EINVAL;
}

bool store_job_state_is_final(store_job_state_t s)
{
	return s == STORE_JOB_SUCCEEDED || s == STORE_JOB_FAILED || s == STORE_JOB_CANCELLED;
}

void store_job_clear(store_job_t *job)
{
	if (!job)
		return;
	free(job->name);
	free(job->spec_json);
	free(job->state_reason);
	free(job->submitted_by);
	free(job->cancelled_by);
	job->name = job->spec_json = job->state_reason = job->submitted_by = job->cancelled_by = NULL;
}

void store_event_clear(store_event_t *ev)
{
	if (!ev)
		return;
	free(ev->type);
	free(ev->from_state);
	free(ev->to_state);
	free(ev->reason);
	free(ev->actor);
	ev->type = ev->from_state = ev->to_state = ev->reason = ev->actor = NULL;
}

/* An event with its actor (a token's name, or NULL). */
static int event_insert_actor(store_t *st, const char *job_id, const char *type, const char *from_state,
                              const char *to_state, const char *reason, int attempt, int64_t at_us,
                              const char *actor)
{
	sqlite3_stmt *s = stmt(st, ST_EVENT_INSERT);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, at_us);
	sqlite3_bind_text(s, 3, type, -1, SQLITE_STATIC);
	bind_text_or_null(s, 4, from_state);
	bind_text_or_null(s, 5, to_state);
	bind_text_or_null(s, 6, reason);
	sqlite3_bind_int(s, 7, attempt);
	bind_text_or_null(s, 8, actor);
	return step_done(s);
}

int store_event_insert(store_t *st, const char *job_id, const char *type, const char *from_state,
                       const char *to_state, const char *reason, int attempt, int64_t at_us)
{
	return event_insert_actor(st, job_id, type, from_state, to_state, reason, attempt, at_us, NULL);
}

int store_job_insert(store_t *st, store_job_t *job)
{
	const char *state = store_job_state_name(job->state);
	if (!state || !job->name || !job->spec_json)
		return -EINVAL;
	sqlite3_stmt *s = stmt(st, ST_JOB_INSERT);
	sqlite3_bind_text(s, 1, job->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, job->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, state, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 4, job->priority);
	sqlite3_bind_int(s, 5, job->world_size);
	sqlite3_bind_text(s, 6, job->spec_json, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 7, job->attempt);
	sqlite3_bind_int64(s, 8, job->created_at_us);
	bind_text_or_null(s, 9, job->state_reason);
	bind_text_or_null(s, 10, job->submitted_by);
	int r = step_done(s);
	if (r < 0)
		return r;
	job->seq = sqlite3_last_insert_rowid(st->db);
	job->updated_at_us = job->created_at_us;
	return event_insert_actor(st, job->id, "submitted", NULL, state, NULL, job->attempt, job->created_at_us,
	                          job->submitted_by);
}

/* Fill a job from a row of the job SELECTs. -ENOMEM or -EIO on failure. */
static int job_from_row(sqlite3_stmt *s, store_job_t *job)
{
	memset(job, 0, sizeof *job);
	job->seq = sqlite3_column_int64(s, 0);
	const char *id = (const char *)sqlite3_column_text(s, 1);
	snprintf(job->id, sizeof job->id, "%s", id ? id : "");
	job->name = column_strdup(s, 2);
	if (store_job_state_parse((const char *)sqlite3_column_text(s, 3), &job->state) < 0)
		job->state = STORE_JOB_FAILED; /* cannot happen: a CHECK constraint guards it */
	job->priority = sqlite3_column_int(s, 4);
	job->world_size = sqlite3_column_int(s, 5);
	job->spec_json = column_strdup(s, 6);
	job->attempt = sqlite3_column_int(s, 7);
	job->created_at_us = sqlite3_column_int64(s, 8);
	job->updated_at_us = sqlite3_column_int64(s, 9);
	job->state_reason = column_strdup(s, 10);
	job->restarts = sqlite3_column_int(s, 11);
	job->submitted_by = column_strdup(s, 12);
	job->cancelled_by = column_strdup(s, 13);
	if (!job->name || !job->spec_json ||
	    (!job->state_reason && sqlite3_column_type(s, 10) != SQLITE_NULL) ||
	    (!job->submitted_by && sqlite3_column_type(s, 12) != SQLITE_NULL) ||
	    (!job->cancelled_by && sqlite3_column_type(s, 13) != SQLITE_NULL)) {
		store_job_clear(job);
		return -ENOMEM;
	}
	return 0;
}

int store_job_get(store_t *st, const char *job_id, store_job_t *ret_job)
{
	sqlite3_stmt *s = stmt(st, ST_JOB_GET);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	int rc = sqlite3_step(s);
	int r;
	if (rc == SQLITE_ROW)
		r = job_from_row(s, ret_job);
	else
		r = rc == SQLITE_DONE ? -ENOENT : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	sqlite3_reset(s);
	return r;
}

/* A state change and its event, with the event's actor (may be NULL). */
static int set_state_actor(store_t *st, const char *job_id, store_job_state_t to, const char *reason,
                           int64_t now_us_, const char *actor)
{
	store_job_t old;
	int r = store_job_get(st, job_id, &old);
	if (r < 0)
		return r;
	const char *from = store_job_state_name(old.state);
	int attempt = old.attempt;
	store_job_clear(&old);
	const char *to_name = store_job_state_name(to);
	if (!to_name)
		return -EINVAL;
	sqlite3_stmt *s = stmt(st, ST_JOB_SET_STATE);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, to_name, -1, SQLITE_STATIC);
	bind_text_or_null(s, 3, reason);
	sqlite3_bind_int64(s, 4, now_us_);
	int rc = sqlite3_step(s);
	r = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	sqlite3_reset(s);
	if (r < 0)
		return r;
	return event_insert_actor(st, job_id, "state", from, to_name, reason, attempt, now_us_, actor);
}

int store_job_set_state(store_t *st, const char *job_id, store_job_state_t to, const char *reason,
                        int64_t now_us_)
{
	return set_state_actor(st, job_id, to, reason, now_us_, NULL);
}

int store_job_cancel(store_t *st, const char *job_id, const char *actor, const char *reason, int64_t now_us_)
{
	int r = set_state_actor(st, job_id, STORE_JOB_CANCELLED, reason, now_us_, actor);
	if (r < 0)
		return r;
	sqlite3_stmt *s = stmt(st, ST_JOB_SET_CANCELLED_BY);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	bind_text_or_null(s, 2, actor);
	return step_update(st, s);
}

int store_job_count_queued_by(store_t *st, const char *name, int64_t *ret_count)
{
	sqlite3_stmt *s = stmt(st, ST_JOB_COUNT_QUEUED_BY);
	sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
	int rc = sqlite3_step(s);
	int r = rc == SQLITE_ROW ? 0 : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	if (r == 0)
		*ret_count = sqlite3_column_int64(s, 0);
	sqlite3_reset(s);
	return r;
}

int store_idem_get(store_t *st, const char *key, unsigned char ret_body_hash[32], int *ret_status,
                   char **ret_body, char *ret_job_id)
{
	sqlite3_stmt *s = stmt(st, ST_IDEM_GET);
	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	int rc = sqlite3_step(s);
	int r = 0;
	if (rc == SQLITE_ROW) {
		if (sqlite3_column_bytes(s, 0) != 32) {
			r = -EIO;
		} else {
			memcpy(ret_body_hash, sqlite3_column_blob(s, 0), 32);
			*ret_status = sqlite3_column_int(s, 1);
			*ret_body = column_strdup(s, 2);
			const char *id = (const char *)sqlite3_column_text(s, 3);
			snprintf(ret_job_id, STORE_ID_BYTES, "%s", id ? id : "");
			if (!*ret_body)
				r = -ENOMEM;
		}
	} else {
		r = rc == SQLITE_DONE ? -ENOENT : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	}
	sqlite3_reset(s);
	return r;
}

int store_idem_put(store_t *st, const char *key, const unsigned char body_hash[32], int status,
                   const char *body, const char *job_id, int64_t now_us_)
{
	sqlite3_stmt *s = stmt(st, ST_IDEM_PUT);
	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_blob(s, 2, body_hash, 32, SQLITE_STATIC);
	sqlite3_bind_int(s, 3, status);
	sqlite3_bind_text(s, 4, body, -1, SQLITE_STATIC);
	bind_text_or_null(s, 5, job_id);
	sqlite3_bind_int64(s, 6, now_us_);
	return step_done(s);
}

int store_job_list(store_t *st, const store_job_state_t *state, int64_t after_seq, int limit,
                   store_job_fn fn, void *userdata, bool *ret_more)
{
	if (limit < 0)
		return -EINVAL;
	sqlite3_stmt *s = stmt(st, state ? ST_JOB_LIST_STATE : ST_JOB_LIST);
	sqlite3_bind_int64(s, 1, after_seq);
	sqlite3_bind_int64(s, 2, (int64_t)limit + 1); /* one more row tells whether more follow */
	if (state) {
		const char *name = store_job_state_name(*state);
		if (!name)
			return -EINVAL;
		sqlite3_bind_text(s, 3, name, -1, SQLITE_STATIC);
	}
	int n = 0, r = 0, rc;
	bool more = false;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if (n == limit) {
			more = true;
			break;
		}
		store_job_t job;
		r = job_from_row(s, &job);
		if (r < 0)
			break;
		r = fn(&job, userdata);
		store_job_clear(&job);
		n++;
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_ROW && rc != SQLITE_DONE)
		r = sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	sqlite3_reset(s);
	if (ret_more)
		*ret_more = more;
	return r;
}

int store_event_list(store_t *st, const char *job_id, int64_t after_id, int limit, store_event_fn fn,
                     void *userdata, bool *ret_more)
{
	if (limit < 0)
		return -EINVAL;
	int rc = job_exists(st, job_id);
	if (rc != 0)
		return rc;

	sqlite3_stmt *s = stmt(st, ST_EVENT_LIST);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, after_id);
	sqlite3_bind_int64(s, 3, (int64_t)limit + 1);
	int n = 0, r = 0;
	bool more = false;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if (n == limit) {
			more = true;
			break;
		}
		store_event_t ev;
		memset(&ev, 0, sizeof ev);
		ev.id = sqlite3_column_int64(s, 0);
		const char *jid = (const char *)sqlite3_column_text(s, 1);
		snprintf(ev.job_id, sizeof ev.job_id, "%s", jid ? jid : "");
		ev.at_us = sqlite3_column_int64(s, 2);
		ev.type = column_strdup(s, 3);
		ev.from_state = column_strdup(s, 4);
		ev.to_state = column_strdup(s, 5);
		ev.reason = column_strdup(s, 6);
		ev.attempt = sqlite3_column_int(s, 7);
		ev.actor = column_strdup(s, 8);
		if (!ev.type) {
			store_event_clear(&ev);
			r = -ENOMEM;
			break;
		}
		r = fn(&ev, userdata);
		store_event_clear(&ev);
		n++;
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_ROW && rc != SQLITE_DONE)
		r = sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	sqlite3_reset(s);
	if (ret_more)
		*ret_more = more;
	return r;
}

int store_job_count_by_state(store_t *st, int64_t ret_counts[STORE_JOB_N_STATES])
{
	for (int i = 0; i < STORE_JOB_N_STATES; i++)
		ret_counts[i] = 0;
	sqlite3_stmt *s = stmt(st, ST_JOB_COUNT_BY_STATE);
	int rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_job_state_t state;
		if (store_job_state_parse((const char *)sqlite3_column_text(s, 0), &state) == 0)
			ret_counts[state] = sqlite3_column_int64(s, 1);
	}
	sqlite3_reset(s);
	return rc == SQLITE_DONE ? 0 : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
}

int store_job_count(store_t *st, int64_t *ret_count)
{
	sqlite3_stmt *s = stmt(st, ST_JOB_COUNT);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*ret_count = sqlite3_column_int64(s, 0);
	sqlite3_reset(s);
	return rc == SQLITE_ROW ? 0 : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
}

int store_job_set_attempt(store_t *st, const char *job_id, int attempt, int64_t now_us_)
{
	sqlite3_stmt *s = stmt(st, ST_JOB_SET_ATTEMPT);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, attempt);
	sqlite3_bind_int64(s, 3, now_us_);
	return step_update(st, s);
}

int store_job_list_queued(store_t *st, store_job_fn fn, void *userdata)
{
	sqlite3_stmt *s = stmt(st, ST_JOB_LIST_QUEUED);
	int rc, r = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_job_t job;
		r = job_from_row(s, &job);
		if (r < 0)
			break;
		r = fn(&job, userdata);
		store_job_clear(&job);
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_ROW)
		r = rc_done(rc);
	sqlite3_reset(s);
	return r;
}

/* ---- restarts (schema 004) ---- */

int store_job_set_restarts(store_t *st, const char *job_id, int restarts, int64_t now_us_)
{
	if (restarts < 0)
		return -EINVAL;
	sqlite3_stmt *s = stmt(st, ST_JOB_SET_RESTARTS);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, restarts);
	sqlite3_bind_int64(s, 3, now_us_);
	int rc = sqlite3_step(s);
	int r = rc == SQLITE_DONE ? 0 : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	sqlite3_reset(s);
	if (r == 0 && sqlite3_changes(st->db) == 0)
		r = -ENOENT;
	return r;
}

int store_job_list_restarts(store_t *st, store_restarts_fn fn, void *userdata)
{
	sqlite3_stmt *s = stmt(st, ST_JOB_LIST_RESTARTS);
	int r = 0, rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		const char *id = (const char *)sqlite3_column_text(s, 0);
		r = fn(id ? id : "", sqlite3_column_int(s, 1), userdata);
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_DONE && rc != SQLITE_ROW)
		r = sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	sqlite3_reset(s);
	return r;
}
