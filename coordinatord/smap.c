/*
 * smap: string -> pointer hash map (see smap.h). FNV-1a hashing.
 */
#include "smap.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static char s_tombstone;
#define TOMBSTONE (&s_tombstone)

static uint64_t hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ull;
	}
	return h;
}

/* The slot holding `key`, or NULL. */
static smap_slot_t *find(const smap_t *m, const char *key)
{
	if (!m->cap)
		return NULL;
	size_t mask = m->cap - 1;
	for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
		smap_slot_t *s = &m->slots[i];
		if (!s->key)
			return NULL;
		if (s->key != TOMBSTONE && strcmp(s->key, key) == 0)
			return s;
	}
}

void *smap_get(const smap_t *m, const char *key)
{
	smap_slot_t *s = find(m, key);
	return s ? s->value : NULL;
}

static int grow(smap_t *m)
{
	size_t cap = m->cap ? m->cap * 2 : 16;
	if (m->n * 2 < m->cap)
		cap = m->cap; /* mostly tombstones: rehash at the same size */
	smap_slot_t *slots = calloc(cap, sizeof *slots);
	if (!slots)
		return -ENOMEM;
	for (size_t i = 0; i < m->cap; i++) {
		smap_slot_t *s = &m->slots[i];
		if (!s->key || s->key == TOMBSTONE)
			continue;
		size_t j = hash(s->key) & (cap - 1);
		while (slots[j].key)
			j = (j + 1) & (cap - 1);
		slots[j] = *s;
	}
	free(m->slots);
	m->slots = slots;
	m->cap = cap;
	m->n_used = m->n;
	return 0;
}

int smap_put(smap_t *m, const char *key, void *value, void **ret_old)
{
	smap_slot_t *s = find(m, key);
	if (s) {
		if (ret_old)
			*ret_old = s->value;
		s->value = value;
		return 0;
	}
	if ((m->n_used + 1) * 4 > m->cap * 3 && grow(m) < 0)
		return -ENOMEM;
	char *copy = strdup(key);
	if (!copy)
		return -ENOMEM;
	size_t mask = m->cap - 1;
	size_t i = hash(key) & mask;
	while (m->slots[i].key && m->slots[i].key != TOMBSTONE)
		i = (i + 1) & mask;
	if (!m->slots[i].key)
		m->n_used++;
	m->slots[i].key = copy;
	m->slots[i].value = value;
	m->n++;
	if (ret_old)
		*ret_old = NULL;
	return 0;
}

void *smap_del(smap_t *m, const char *key)
{
	smap_slot_t *s = find(m, key);
	if (!s)
		return NULL;
	void *v = s->value;
	free(s->key);
	s->key = TOMBSTONE;
	s->value = NULL;
	m->n--;
	return v;
}

smap_slot_t *smap_next(const smap_t *m, size_t *pos)
{
	while (*pos < m->cap) {
		smap_slot_t *s = &m->slots[(*pos)++];
		if (s->key && s->key != TOMBSTONE)
			return s;
	}
	return NULL;
}

void smap_free(smap_t *m)
{
	for (size_t i = 0; i < m->cap; i++)
		if (m->slots[i].key && m->slots[i].key != TOMBSTONE)
			free(m->slots[i].key);
	free(m->slots);
	m->slots = NULL;
	m->cap = m->n = m->n_used = 0;
}
