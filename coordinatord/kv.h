/*
 * kv: the rendezvous key-value store of each live attempt, served to its
 * ranks over the wire (KV_SET, KV_GET; api/wire.h).
 *
 * The keys live per (job, attempt) in the attempt (fabric_int.h: `kv`,
 * `kv_bytes`) and die with it: they are not persisted. A KV_GET of a key
 * not set yet, with a timeout, is parked and answered by the KV_SET of that
 * key or, found = false, by kv_expire() once its deadline passes. Limits:
 * keys of 1 to 4096 bytes, 65536 keys and 64 MiB per attempt, 65536 parked
 * KV_GETs, timeouts up to a day; anything over them gets ERROR 400/413.
 */
#ifndef RINGMASTER_COORDINATORD_KV_H
#define RINGMASTER_COORDINATORD_KV_H

#include <stdint.h>

#include <jansson.h>

#include "fabric_int.h"

/* KV_SET {key, value} from rank `rank` (identity `ident`) of `at`: store
 * it, answer KV_OK and wake the KV_GETs parked on that key. */
void kv_on_set(fabric_t *f, attempt_t *at, int rank, const char *ident, json_t *p);

/* KV_GET {key, timeout_ms}: answer KV_VALUE now, or park until the key is
 * set or the timeout passes. */
void kv_on_get(fabric_t *f, attempt_t *at, int rank, const char *ident, json_t *p);

/* Answer the parked KV_GETs of every live attempt whose deadline is past
 * (mono `now`) with found = false. */
void kv_expire(fabric_t *f, int64_t now);

/* Drop the parked KV_GETs of `at` unanswered (its ranks are being stopped). */
void kv_drop_parked(attempt_t *at);

/* Free the keys and parked KV_GETs of `at`. */
void kv_free(attempt_t *at);

#endif
