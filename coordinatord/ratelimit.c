/*
 * ratelimit: token buckets in a fixed table (see ratelimit.h). Levels are in
 * micro-tokens so that refill needs no floating point: a bucket refills
 * per_minute * 1e6 micro-tokens every 60e6 us, that is per_minute / 60
 * micro-tokens per microsecond.
 */
#include "ratelimit.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MICRO 1000000LL

typedef struct {
	char key[RATELIMIT_KEY_MAX + 1]; /* "" when the slot is free */
	int64_t level;                   /* micro-tokens at `at_us` */
	int64_t at_us;
} bucket_t;

struct ratelimit {
	pthread_mutex_t lock;
	int64_t per_minute;
	int64_t capacity; /* burst * MICRO */
	int n_slots;
	bucket_t slots[];
};

ratelimit_t *ratelimit_new(int per_minute, int burst, int n_slots)
{
	if (per_minute < 1 || burst < 1 || n_slots < 1)
		return NULL;
	ratelimit_t *rl = calloc(1, sizeof *rl + (size_t)n_slots * sizeof(bucket_t));
	if (!rl)
		return NULL;
	pthread_mutex_init(&rl->lock, NULL);
	rl->per_minute = per_minute;
	rl->capacity = (int64_t)burst * MICRO;
	rl->n_slots = n_slots;
	return rl;
}

void ratelimit_free(ratelimit_t *rl)
{
	if (!rl)
		return;
	pthread_mutex_destroy(&rl->lock);
	free(rl);
}

/* The bucket's level at now_us, refilled and capped. */
static int64_t level_at(const ratelimit_t *rl, const bucket_t *b, int64_t now_us)
{
	int64_t dt = now_us - b->at_us;
	if (dt <= 0)
		return b->level;
	/* the refill to full takes at most burst * 60 s: cap dt first so the
	 * product cannot overflow */
	int64_t full_us = (rl->capacity / rl->per_minute) * 60 + 60;
	if (dt > full_us)
		return rl->capacity;
	int64_t level = b->level + dt * rl->per_minute / 60;
	return level > rl->capacity ? rl->capacity : level;
}

/* The slot for key: its own, else a free or full one, else the one touched
 * longest ago (reset for key). */
static bucket_t *slot_for(ratelimit_t *rl, const char *key, int64_t now_us)
{
	bucket_t *spare = NULL, *oldest = &rl->slots[0];
	for (int i = 0; i < rl->n_slots; i++) {
		bucket_t *b = &rl->slots[i];
		if (b->key[0] && strcmp(b->key, key) == 0)
			return b;
		if (!spare && (!b->key[0] || level_at(rl, b, now_us) >= rl->capacity))
			spare = b;
		if (b->at_us < oldest->at_us)
			oldest = b;
	}
	bucket_t *b = spare ? spare : oldest;
	snprintf(b->key, sizeof b->key, "%s", key);
	b->level = rl->capacity;
	b->at_us = now_us;
	return b;
}

int ratelimit_take(ratelimit_t *rl, const char *key, int64_t now_us, int64_t *ret_retry_after_ms)
{
	char cut[RATELIMIT_KEY_MAX + 1];
	snprintf(cut, sizeof cut, "%s", key);
	pthread_mutex_lock(&rl->lock);
	bucket_t *b = slot_for(rl, cut, now_us);
	int64_t level = level_at(rl, b, now_us);
	b->at_us = now_us > b->at_us ? now_us : b->at_us;
	int r = 0;
	if (level >= MICRO) {
		b->level = level - MICRO;
	} else {
		b->level = level;
		/* micro-tokens missing / (per_minute / 60 per us), rounded up, in ms */
		int64_t wait_us = ((MICRO - level) * 60 + rl->per_minute - 1) / rl->per_minute;
		int64_t wait_ms = (wait_us + 999) / 1000;
		*ret_retry_after_ms = wait_ms > 0 ? wait_ms : 1;
		r = -EAGAIN;
	}
	pthread_mutex_unlock(&rl->lock);
	return r;
}
