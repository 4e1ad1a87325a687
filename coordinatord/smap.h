/*
 * smap: a hash map from NUL-terminated strings to pointers, for the broker
 * loop's in-memory state (agents by node, live attempts by job id, the
 * rendezvous keys of an attempt).
 *
 * Open addressing with linear probing and tombstones; the table doubles when
 * it is 3/4 full (counting tombstones). Keys are copied; values are borrowed
 * (the caller owns what they point to). Not thread-safe: one owner thread.
 */
#ifndef RINGMASTER_COORDINATORD_SMAP_H
#define RINGMASTER_COORDINATORD_SMAP_H

#include <stddef.h>

typedef struct {
	char *key; /* NULL: empty; SMAP_TOMBSTONE: deleted */
	void *value;
} smap_slot_t;

typedef struct {
	smap_slot_t *slots;
	size_t cap;    /* 0 or a power of two */
	size_t n;      /* live entries */
	size_t n_used; /* live + tombstones */
} smap_t;

/* An empty map; zero-initialising an smap_t is the same. */
#define SMAP_INIT {NULL, 0, 0, 0}

/* The value for `key`, or NULL. */
void *smap_get(const smap_t *m, const char *key);

/* Insert or replace. 0, or -ENOMEM (the map is unchanged). *ret_old (may be
 * NULL) receives the replaced value, or NULL for a new key. */
int smap_put(smap_t *m, const char *key, void *value, void **ret_old);

/* Remove `key`; returns its value, or NULL if absent. */
void *smap_del(smap_t *m, const char *key);

/* Iterate: start with *pos = 0; returns the next live slot or NULL at the
 * end. Do not insert while iterating; smap_del of the current key is fine. */
smap_slot_t *smap_next(const smap_t *m, size_t *pos);

/* Free the table and the copied keys (not the values). */
void smap_free(smap_t *m);

#endif
