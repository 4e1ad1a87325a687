/*
 * store_tokens: the API tokens' rows (schema 007; see store.h for the
 * contracts). Only a hash of each token is here: auth.c makes tokens, hashes
 * what a caller presents and looks the hash up with store_token_by_hash;
 * the writer inserts, revokes and records the last use.
 */
#include "store_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

static void bind_time_or_null(sqlite3_stmt *s, int i, int64_t at_us)
{
	if (at_us)
		sqlite3_bind_int64(s, i, at_us);
	else
		sqlite3_bind_null(s, i);
}

int store_token_insert(store_t *st, store_token_t *t)
{
	if (!t->name[0] || !t->role[0])
		return -EINVAL;
	sqlite3_stmt *s = stmt(st, ST_TOKEN_INSERT);
	sqlite3_bind_text(s, 1, t->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, t->role, -1, SQLITE_STATIC);
	sqlite3_bind_blob(s, 3, t->hash, sizeof t->hash, SQLITE_STATIC);
	sqlite3_bind_text(s, 4, t->prefix, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 5, t->created_at_us);
	bind_time_or_null(s, 6, t->expires_at_us);
	int r = step_done(s);
	if (r == 0)
		t->id = sqlite3_last_insert_rowid(st->db);
	return r;
}

int store_token_revoke(store_t *st, int64_t id, int64_t now_us)
{
	sqlite3_stmt *s = stmt(st, ST_TOKEN_REVOKE);
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, now_us);
	return step_update(st, s);
}

int store_token_touch(store_t *st, int64_t id, int64_t now_us)
{
	sqlite3_stmt *s = stmt(st, ST_TOKEN_TOUCH);
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, now_us);
	return step_done(s);
}

/* A row of the token SELECTs into *t. */
static void token_from_row(sqlite3_stmt *s, store_token_t *t)
{
	memset(t, 0, sizeof *t);
	t->id = sqlite3_column_int64(s, 0);
	const char *name = (const char *)sqlite3_column_text(s, 1);
	const char *role = (const char *)sqlite3_column_text(s, 2);
	const char *prefix = (const char *)sqlite3_column_text(s, 3);
	snprintf(t->name, sizeof t->name, "%s", name ? name : "");
	snprintf(t->role, sizeof t->role, "%s", role ? role : "");
	snprintf(t->prefix, sizeof t->prefix, "%s", prefix ? prefix : "");
	if (sqlite3_column_bytes(s, 4) == (int)sizeof t->hash)
		memcpy(t->hash, sqlite3_column_blob(s, 4), sizeof t->hash);
	t->created_at_us = sqlite3_column_int64(s, 5);
	t->expires_at_us = sqlite3_column_int64(s, 6); /* NULL reads as 0: never */
	t->last_used_at_us = sqlite3_column_int64(s, 7);
	t->revoked_at_us = sqlite3_column_int64(s, 8);
}

/* Step a one-row token SELECT: 0 and *ret, -ENOENT, or a store error. */
static int token_one(sqlite3_stmt *s, store_token_t *ret)
{
	int rc = sqlite3_step(s);
	int r;
	if (rc == SQLITE_ROW) {
		token_from_row(s, ret);
		r = 0;
	} else {
		r = rc == SQLITE_DONE ? -ENOENT : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	}
	sqlite3_reset(s);
	return r;
}

int store_token_by_hash(store_t *st, const unsigned char hash[32], store_token_t *ret)
{
	sqlite3_stmt *s = stmt(st, ST_TOKEN_BY_HASH);
	sqlite3_bind_blob(s, 1, hash, 32, SQLITE_STATIC);
	return token_one(s, ret);
}

int store_token_get(store_t *st, int64_t id, store_token_t *ret)
{
	sqlite3_stmt *s = stmt(st, ST_TOKEN_GET);
	sqlite3_bind_int64(s, 1, id);
	return token_one(s, ret);
}

int store_token_list(store_t *st, store_token_fn fn, void *userdata)
{
	sqlite3_stmt *s = stmt(st, ST_TOKEN_LIST);
	int rc, r = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_token_t t;
		token_from_row(s, &t);
		r = fn(&t, userdata);
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_DONE)
		r = sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	sqlite3_reset(s);
	return r;
}

int store_token_count(store_t *st, int64_t *ret_count)
{
	sqlite3_stmt *s = stmt(st, ST_TOKEN_COUNT);
	int rc = sqlite3_step(s);
	int r = rc == SQLITE_ROW ? 0 : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	if (r == 0)
		*ret_count = sqlite3_column_int64(s, 0);
	sqlite3_reset(s);
	return r;
}
