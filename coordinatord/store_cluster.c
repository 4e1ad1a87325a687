/*
 * store_cluster: the cluster as the coordinator last saw it: worker nodes
 * (registration, heartbeats, alive or dead) and the ranks of each attempt
 * (placement, state changes, loss of an attempt, the active ranks, and each
 * rank's reported memory). See store.h for the contracts.
 */
#include "store_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

int store_worker_register(store_t *st, const char *node, const char *devices_json, int64_t now_us_)
{
	sqlite3_stmt *s = stmt(st, ST_WORKER_REGISTER);
	sqlite3_bind_text(s, 1, node, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, devices_json ? devices_json : "[]", -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, now_us_);
	return step_done(s);
}

int store_worker_set_programs(store_t *st, const char *node, const char *program_json)
{
	sqlite3_stmt *s = stmt(st, ST_WORKER_SET_PROGRAMS);
	sqlite3_bind_text(s, 1, node, -1, SQLITE_STATIC);
	if (program_json)
		sqlite3_bind_text(s, 2, program_json, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(s, 2);
	return step_update(st, s);
}

int store_worker_set_state(store_t *st, const char *node, const char *state)
{
	if (!state || (strcmp(state, "alive") != 0 && strcmp(state, "dead") != 0))
		return -EINVAL;
	sqlite3_stmt *s = stmt(st, ST_WORKER_SET_STATE);
	sqlite3_bind_text(s, 1, node, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, state, -1, SQLITE_STATIC);
	return step_update(st, s);
}

int store_worker_heartbeat(store_t *st, const char *node, int64_t at_us)
{
	sqlite3_stmt *s = stmt(st, ST_WORKER_HEARTBEAT);
	sqlite3_bind_text(s, 1, node, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, at_us);
	return step_update(st, s);
}

int store_worker_list(store_t *st, store_worker_fn fn, void *userdata)
{
	sqlite3_stmt *s = stmt(st, ST_WORKER_LIST);
	int rc, r = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_worker_t w = {
			.node = (const char *)sqlite3_column_text(s, 0),
			.state = (const char *)sqlite3_column_text(s, 1),
			.devices_json = (const char *)sqlite3_column_text(s, 2),
			.has_heartbeat = sqlite3_column_type(s, 3) != SQLITE_NULL,
			.last_heartbeat_us = sqlite3_column_int64(s, 3),
			.registered_at_us = sqlite3_column_int64(s, 4),
			.program_json = (const char *)sqlite3_column_text(s, 5),
		};
		if (!w.node || !w.state) {
			r = -ENOMEM;
			break;
		}
		if (!w.devices_json)
			w.devices_json = "[]";
		r = fn(&w, userdata);
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_ROW)
		r = rc_done(rc);
	sqlite3_reset(s);
	return r;
}

int store_worker_count_by_state(store_t *st, int64_t *ret_alive, int64_t *ret_dead)
{
	int64_t alive = 0, dead = 0;
	sqlite3_stmt *s = stmt(st, ST_WORKER_COUNT);
	int rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		const char *state = (const char *)sqlite3_column_text(s, 0);
		if (state && strcmp(state, "alive") == 0)
			alive = sqlite3_column_int64(s, 1);
		else if (state && strcmp(state, "dead") == 0)
			dead = sqlite3_column_int64(s, 1);
	}
	sqlite3_reset(s);
	int r = rc_done(rc);
	if (r == 0) {
		*ret_alive = alive;
		*ret_dead = dead;
	}
	return r;
}

int store_worker_prune_dead(store_t *st, int64_t before_us, int *ret_n)
{
	sqlite3_stmt *s = stmt(st, ST_WORKER_PRUNE);
	sqlite3_bind_int64(s, 1, before_us);
	int r = step_done(s);
	if (r == 0 && ret_n)
		*ret_n = sqlite3_changes(st->db);
	return r;
}

static bool rank_state_valid(const char *state)
{
	static const char *const names[] = {"placed", "joined", "done", "exited", "lost"};
	for (size_t i = 0; state && i < sizeof names / sizeof names[0]; i++)
		if (strcmp(state, names[i]) == 0)
			return true;
	return false;
}

int store_rank_insert(store_t *st, const store_rank_t *r, int64_t now_us_)
{
	const char *state = r->state ? r->state : "placed";
	if (!r->node || !r->device_kind || !rank_state_valid(state))
		return -EINVAL;
	sqlite3_stmt *s = stmt(st, ST_RANK_INSERT);
	sqlite3_bind_text(s, 1, r->job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, r->attempt);
	sqlite3_bind_int(s, 3, r->rank);
	sqlite3_bind_text(s, 4, r->node, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 5, r->device_kind, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 6, r->device_index);
	sqlite3_bind_text(s, 7, state, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 8, now_us_);
	return step_done(s);
}

int store_rank_set_state(store_t *st, const char *job_id, int attempt, int rank, const char *state,
                         bool has_exit, int exit_code, int signal, int64_t now_us_)
{
	if (!rank_state_valid(state))
		return -EINVAL;
	sqlite3_stmt *s = stmt(st, ST_RANK_SET_STATE);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, attempt);
	sqlite3_bind_int(s, 3, rank);
	sqlite3_bind_text(s, 4, state, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 5, has_exit);
	sqlite3_bind_int(s, 6, exit_code);
	sqlite3_bind_int(s, 7, signal);
	sqlite3_bind_int64(s, 8, now_us_);
	return step_update(st, s);
}

int store_rank_lose_attempt(store_t *st, const char *job_id, int attempt, int64_t now_us_)
{
	sqlite3_stmt *s = stmt(st, ST_RANK_LOSE_ATTEMPT);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, attempt);
	sqlite3_bind_int64(s, 3, now_us_);
	return step_done(s);
}

int store_rank_list_active(store_t *st, store_rank_fn fn, void *userdata)
{
	sqlite3_stmt *s = stmt(st, ST_RANK_LIST_ACTIVE);
	int rc, r = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_rank_t rk;
		memset(&rk, 0, sizeof rk);
		const char *id = (const char *)sqlite3_column_text(s, 0);
		snprintf(rk.job_id, sizeof rk.job_id, "%s", id ? id : "");
		rk.attempt = sqlite3_column_int(s, 1);
		rk.rank = sqlite3_column_int(s, 2);
		rk.node = (const char *)sqlite3_column_text(s, 3);
		rk.device_kind = (const char *)sqlite3_column_text(s, 4);
		rk.device_index = sqlite3_column_int(s, 5);
		rk.state = (const char *)sqlite3_column_text(s, 6);
		if (!rk.node || !rk.device_kind || !rk.state) {
			r = -ENOMEM;
			break;
		}
		r = fn(&rk, userdata);
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_ROW)
		r = rc_done(rc);
	sqlite3_reset(s);
	return r;
}

int store_rank_set_memory(store_t *st, const char *job_id, int attempt, int rank,
                          const store_rank_memory_t *m)
{
	if (m->params_bytes < 0 || m->grads_bytes < 0 || m->optim_bytes < 0 || m->activations_bytes < 0)
		return -EINVAL;
	sqlite3_stmt *s = stmt(st, ST_RANK_SET_MEMORY);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, attempt);
	sqlite3_bind_int(s, 3, rank);
	sqlite3_bind_int64(s, 4, m->params_bytes);
	sqlite3_bind_int64(s, 5, m->grads_bytes);
	sqlite3_bind_int64(s, 6, m->optim_bytes);
	sqlite3_bind_int64(s, 7, m->activations_bytes);
	return step_update(st, s);
}

/* Walk the rows of a rank SELECT with the memory columns (7..10). */
static int rank_walk(sqlite3_stmt *s, store_rank_fn fn, void *userdata)
{
	int rc, r = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_rank_t rk;
		memset(&rk, 0, sizeof rk);
		const char *id = (const char *)sqlite3_column_text(s, 0);
		snprintf(rk.job_id, sizeof rk.job_id, "%s", id ? id : "");
		rk.attempt = sqlite3_column_int(s, 1);
		rk.rank = sqlite3_column_int(s, 2);
		rk.node = (const char *)sqlite3_column_text(s, 3);
		rk.device_kind = (const char *)sqlite3_column_text(s, 4);
		rk.device_index = sqlite3_column_int(s, 5);
		rk.state = (const char *)sqlite3_column_text(s, 6);
		rk.has_memory = sqlite3_column_type(s, 7) != SQLITE_NULL;
		rk.memory.params_bytes = sqlite3_column_int64(s, 7);
		rk.memory.grads_bytes = sqlite3_column_int64(s, 8);
		rk.memory.optim_bytes = sqlite3_column_int64(s, 9);
		rk.memory.activations_bytes = sqlite3_column_int64(s, 10);
		if (!rk.node || !rk.device_kind || !rk.state) {
			r = -ENOMEM;
			break;
		}
		r = fn(&rk, userdata);
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_ROW)
		r = rc_done(rc);
	sqlite3_reset(s);
	return r;
}

int store_rank_list_attempt(store_t *st, const char *job_id, int attempt, store_rank_fn fn,
                            void *userdata)
{
	sqlite3_stmt *s = stmt(st, ST_RANK_LIST_ATTEMPT);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, attempt);
	return rank_walk(s, fn, userdata);
}

int store_rank_list_memory_running(store_t *st, store_rank_fn fn, void *userdata)
{
	return rank_walk(stmt(st, ST_RANK_LIST_MEMORY_RUNNING), fn, userdata);
}
