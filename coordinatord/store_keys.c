/*
 * store_keys: agent keys and join tokens (see store_keys.h). Rare
 * operations, so each statement is prepared, run and finalized here instead
 * of joining store.c's table of prepared statements.
 */
#include "store_internal.h"
#include "store_keys.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#define KEY_COLUMNS "id, name, public_key, coalesce(node, ''), created_at_us, " \
                    "coalesce(last_used_at_us, 0), coalesce(revoked_at_us, 0)"

static sqlite3_stmt *prepare(store_t *st, const char *sql)
{
	sqlite3_stmt *s = NULL;
	if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK)
		return NULL;
	return s;
}

static void key_from_row(sqlite3_stmt *s, store_key_t *k)
{
	memset(k, 0, sizeof *k);
	k->id = sqlite3_column_int64(s, 0);
	snprintf(k->name, sizeof k->name, "%s", (const char *)sqlite3_column_text(s, 1));
	snprintf(k->public_key, sizeof k->public_key, "%s", (const char *)sqlite3_column_text(s, 2));
	snprintf(k->node, sizeof k->node, "%s", (const char *)sqlite3_column_text(s, 3));
	k->created_at_us = sqlite3_column_int64(s, 4);
	k->last_used_at_us = sqlite3_column_int64(s, 5);
	k->revoked_at_us = sqlite3_column_int64(s, 6);
}

/* Step a prepared statement selecting one key; finalize it. */
static int one_key(sqlite3_stmt *s, store_key_t *ret)
{
	int rc = sqlite3_step(s);
	int r = 0;
	if (rc == SQLITE_ROW)
		key_from_row(s, ret);
	else
		r = rc == SQLITE_DONE ? -ENOENT : -EIO;
	sqlite3_finalize(s);
	return r;
}

/* Run a prepared statement without rows; finalize it. -ENOENT when it
 * changed nothing and `want_change`. */
static int run(store_t *st, sqlite3_stmt *s, bool want_change)
{
	int r = rc_done(sqlite3_step(s));
	sqlite3_finalize(s);
	if (r == 0 && want_change && sqlite3_changes(st->db) == 0)
		return -ENOENT;
	return r;
}

int store_key_add(store_t *st, const char *name, const char *public_key, const char *node,
                  int64_t now_us, int64_t *ret_id)
{
	sqlite3_stmt *s = prepare(st, "INSERT INTO agent_keys (name, public_key, node, created_at_us) "
	                              "VALUES (?1, ?2, ?3, ?4)");
	if (!s)
		return -EIO;
	sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, public_key, -1, SQLITE_STATIC);
	bind_text_or_null(s, 3, node);
	sqlite3_bind_int64(s, 4, now_us);
	int r = run(st, s, false);
	if (r == 0 && ret_id)
		*ret_id = sqlite3_last_insert_rowid(st->db);
	return r;
}

int store_key_by_public(store_t *st, const char *public_key, store_key_t *ret)
{
	sqlite3_stmt *s = prepare(st, "SELECT " KEY_COLUMNS " FROM agent_keys WHERE public_key = ?1");
	if (!s)
		return -EIO;
	sqlite3_bind_text(s, 1, public_key, -1, SQLITE_STATIC);
	return one_key(s, ret);
}

int store_key_get(store_t *st, int64_t id, store_key_t *ret)
{
	sqlite3_stmt *s = prepare(st, "SELECT " KEY_COLUMNS " FROM agent_keys WHERE id = ?1");
	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	return one_key(s, ret);
}

int store_key_for_node(store_t *st, const char *node, store_key_t *ret)
{
	sqlite3_stmt *s = prepare(st, "SELECT " KEY_COLUMNS " FROM agent_keys WHERE node = ?1 "
	                              "AND revoked_at_us IS NULL ORDER BY id LIMIT 1");
	if (!s)
		return -EIO;
	sqlite3_bind_text(s, 1, node, -1, SQLITE_STATIC);
	return one_key(s, ret);
}

int store_key_bind_node(store_t *st, int64_t id, const char *node)
{
	sqlite3_stmt *s = prepare(st, "UPDATE agent_keys SET node = ?2 WHERE id = ?1 AND node IS NULL");
	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_text(s, 2, node, -1, SQLITE_STATIC);
	return run(st, s, true);
}

int store_key_set_root(store_t *st, int64_t id, const char *root)
{
	sqlite3_stmt *s = prepare(st, "UPDATE agent_keys SET checkpoint_root = ?2 WHERE id = ?1 "
	                              "AND checkpoint_root IS NOT ?2");
	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	bind_text_or_null(s, 2, root);
	return run(st, s, false);
}

int store_key_root(store_t *st, int64_t id, char *out, size_t n)
{
	sqlite3_stmt *s = prepare(st, "SELECT coalesce(checkpoint_root, '') FROM agent_keys WHERE id = ?1");
	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	int rc = sqlite3_step(s);
	int r = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : -EIO;
	if (r == 0)
		snprintf(out, n, "%s", (const char *)sqlite3_column_text(s, 0));
	sqlite3_finalize(s);
	return r;
}

int store_key_touch(store_t *st, int64_t id, int64_t now_us)
{
	sqlite3_stmt *s = prepare(st, "UPDATE agent_keys SET last_used_at_us = ?2 WHERE id = ?1");
	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, now_us);
	return run(st, s, true);
}

int store_key_revoke(store_t *st, int64_t id, int64_t now_us)
{
	store_key_t k;
	int r = store_key_get(st, id, &k);
	if (r < 0)
		return r;
	if (k.revoked_at_us)
		return -EALREADY;
	sqlite3_stmt *s = prepare(st, "UPDATE agent_keys SET revoked_at_us = ?2 WHERE id = ?1");
	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, now_us);
	return run(st, s, true);
}

int store_key_list(store_t *st, store_key_fn fn, void *userdata)
{
	sqlite3_stmt *s = prepare(st, "SELECT " KEY_COLUMNS " FROM agent_keys ORDER BY id");
	if (!s)
		return -EIO;
	int rc, r = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_key_t k;
		key_from_row(s, &k);
		r = fn(&k, userdata);
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_ROW)
		r = rc_done(rc);
	sqlite3_finalize(s);
	return r;
}

int store_join_token_add(store_t *st, const unsigned char hash[32], int uses, int64_t expires_at_us,
                         int64_t now_us)
{
	sqlite3_stmt *s = prepare(st, "INSERT INTO join_tokens (hash, uses_left, expires_at_us, created_at_us) "
	                              "VALUES (?1, ?2, ?3, ?4)");
	if (!s)
		return -EIO;
	sqlite3_bind_blob(s, 1, hash, 32, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, uses);
	sqlite3_bind_int64(s, 3, expires_at_us);
	sqlite3_bind_int64(s, 4, now_us);
	return run(st, s, false);
}

int store_join_token_use(store_t *st, const unsigned char hash[32], int64_t now_us)
{
	sqlite3_stmt *s = prepare(st, "SELECT uses_left, expires_at_us FROM join_tokens WHERE hash = ?1");
	if (!s)
		return -EIO;
	sqlite3_bind_blob(s, 1, hash, 32, SQLITE_STATIC);
	int rc = sqlite3_step(s);
	int64_t uses = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
	int64_t expires = rc == SQLITE_ROW ? sqlite3_column_int64(s, 1) : 0;
	sqlite3_finalize(s);
	if (rc == SQLITE_DONE)
		return -ENOENT;
	if (rc != SQLITE_ROW)
		return -EIO;
	if (uses <= 0)
		return -EUSERS;
	if (expires <= now_us)
		return -ETIME;
	s = prepare(st, "UPDATE join_tokens SET uses_left = uses_left - 1 WHERE hash = ?1 AND uses_left > 0");
	if (!s)
		return -EIO;
	sqlite3_bind_blob(s, 1, hash, 32, SQLITE_STATIC);
	return run(st, s, true);
}

int store_join_token_live(store_t *st, int64_t now_us)
{
	sqlite3_stmt *s = prepare(st, "SELECT 1 FROM join_tokens WHERE uses_left > 0 AND expires_at_us > ?1 LIMIT 1");
	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, now_us);
	int rc = sqlite3_step(s);
	sqlite3_finalize(s);
	if (rc == SQLITE_ROW)
		return 1;
	return rc == SQLITE_DONE ? 0 : -EIO;
}

int store_key_rank_node(store_t *st, const char *job_id, int attempt, int rank, char *ret_node, size_t len)
{
	sqlite3_stmt *s = prepare(st, "SELECT node FROM ranks WHERE job_id = ?1 AND attempt = ?2 AND rank = ?3");
	if (!s)
		return -EIO;
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, attempt);
	sqlite3_bind_int(s, 3, rank);
	int rc = sqlite3_step(s);
	int r = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : -EIO;
	if (r == 0)
		snprintf(ret_node, len, "%s", (const char *)sqlite3_column_text(s, 0));
	sqlite3_finalize(s);
	return r;
}
