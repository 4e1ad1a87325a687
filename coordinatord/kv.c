/*
 * kv: the rendezvous key-value store of each live attempt (see kv.h).
 */
#include "kv.h"

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

static void kv_answer(fabric_t *f, attempt_t *at, int rank, const char *key, const char *value)
{
	char ident[WIRE_MAX_IDENTITY_BYTES + 1];
	fabric_rank_ident(ident, at->job_id, at->attempt, rank);
	fabric_send_to(f, ident, WIRE_KV_VALUE,
	               json_pack("{s:s, s:b, s:s}", "key", key, "found", value != NULL, "value", value ? value : ""));
}

void kv_on_set(fabric_t *f, attempt_t *at, int rank, const char *ident, json_t *p)
{
	const char *key = json_string_value(json_object_get(p, "key"));
	const char *value = json_string_value(json_object_get(p, "value"));
	size_t klen = strlen(key), vlen = strlen(value);
	if (klen == 0 || klen > KV_MAX_KEY_BYTES) {
		fabric_send_error(f, ident, strlen(ident), 400, "KV_SET: key must be 1 to 4096 bytes");
		return;
	}
	char *old = smap_get(&at->kv, key);
	size_t old_bytes = old ? klen + strlen(old) : 0;
	if ((!old && at->kv.n >= KV_MAX_KEYS) || at->kv_bytes - old_bytes + klen + vlen > KV_MAX_BYTES) {
		fabric_send_error(f, ident, strlen(ident), 413,
		                  "KV_SET: the attempt's key-value store is full (65536 keys, 64 MiB)");
		return;
	}
	char *copy = strdup(value);
	void *prev = NULL;
	if (!copy || smap_put(&at->kv, key, copy, &prev) < 0) {
		free(copy);
		fabric_send_error(f, ident, strlen(ident), 503, "KV_SET: the coordinator is out of memory");
		return;
	}
	free(prev);
	at->kv_bytes = at->kv_bytes - old_bytes + klen + vlen;
	fabric_send_to(f, ident, WIRE_KV_OK, json_pack("{s:s}", "key", key));
	/* wake the parked KV_GETs of this key */
	parked_t **pp = &at->parked;
	while (*pp) {
		parked_t *w = *pp;
		if (strcmp(w->key, key) == 0) {
			kv_answer(f, at, w->rank, key, copy);
			*pp = w->next;
			free(w->key);
			free(w);
			at->n_parked--;
		} else {
			pp = &w->next;
		}
	}
}

void kv_on_get(fabric_t *f, attempt_t *at, int rank, const char *ident, json_t *p)
{
	const char *key = json_string_value(json_object_get(p, "key"));
	json_int_t timeout_ms = json_integer_value(json_object_get(p, "timeout_ms"));
	if (timeout_ms < 0 || timeout_ms > KV_MAX_TIMEOUT_MS) {
		fabric_send_error(f, ident, strlen(ident), 400, "KV_GET: timeout_ms must be from 0 to 86400000");
		return;
	}
	const char *value = smap_get(&at->kv, key);
	if (value || timeout_ms == 0) {
		kv_answer(f, at, rank, key, value);
		return;
	}
	if (at->n_parked >= KV_MAX_PARKED) {
		fabric_send_error(f, ident, strlen(ident), 413, "KV_GET: too many waiting KV_GETs in this attempt");
		return;
	}
	parked_t *w = calloc(1, sizeof *w);
	char *kcopy = strdup(key);
	if (!w || !kcopy) {
		free(w);
		free(kcopy);
		fabric_send_error(f, ident, strlen(ident), 503, "KV_GET: the coordinator is out of memory");
		return;
	}
	w->rank = rank;
	w->key = kcopy;
	w->deadline_mono_us = clock_mono_us() + (int64_t)timeout_ms * 1000;
	w->next = at->parked;
	at->parked = w;
	at->n_parked++;
}

void kv_expire(fabric_t *f, int64_t now)
{
	size_t pos = 0;
	smap_slot_t *s;
	while ((s = smap_next(&f->attempts, &pos))) {
		attempt_t *at = s->value;
		parked_t **pp = &at->parked;
		while (*pp) {
			parked_t *w = *pp;
			if (w->deadline_mono_us <= now) {
				kv_answer(f, at, w->rank, w->key, NULL);
				*pp = w->next;
				free(w->key);
				free(w);
				at->n_parked--;
			} else {
				pp = &w->next;
			}
		}
	}
}

void kv_drop_parked(attempt_t *at)
{
	while (at->parked) {
		parked_t *p = at->parked;
		at->parked = p->next;
		free(p->key);
		free(p);
	}
	at->n_parked = 0;
}

void kv_free(attempt_t *at)
{
	size_t pos = 0;
	smap_slot_t *s;
	while ((s = smap_next(&at->kv, &pos)))
		free(s->value);
	smap_free(&at->kv);
	at->kv_bytes = 0;
	kv_drop_parked(at);
}
