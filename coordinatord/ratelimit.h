/*
 * ratelimit: token buckets keyed by a caller's name, for the per-token limit
 * on job submissions (--submit-rate, --submit-burst; config.h).
 *
 * Each key owns a bucket of `burst` tokens that refills at `per_minute`
 * tokens a minute; a submission takes one, and one that finds the bucket
 * empty is refused with the time until a token is back (http.c answers 429
 * with Retry-After). The table has a fixed number of slots: a bucket that
 * has refilled to full is the same as no bucket, so its slot is reused, and
 * when every slot is in use the one touched longest ago is. Memory stays
 * bounded whatever the callers send. Time comes in as an argument: the
 * decisions are testable without a clock. Thread-safe (one mutex).
 */
#ifndef RINGMASTER_COORDINATORD_RATELIMIT_H
#define RINGMASTER_COORDINATORD_RATELIMIT_H

#include <stdint.h>

typedef struct ratelimit ratelimit_t;

/* Keys longer than this are cut (a token name is at most 64 bytes, an
 * address 45). */
#define RATELIMIT_KEY_MAX 95

/* A limiter of `n_slots` buckets; NULL when out of memory or when
 * per_minute < 1 or burst < 1. */
ratelimit_t *ratelimit_new(int per_minute, int burst, int n_slots);
void ratelimit_free(ratelimit_t *rl);

/*
 * Take one token from `key`'s bucket at time `now_us` (monotonic). Returns 0
 * when taken, or -EAGAIN with *ret_retry_after_ms, the wait until a token is
 * back (at least 1).
 */
int ratelimit_take(ratelimit_t *rl, const char *key, int64_t now_us, int64_t *ret_retry_after_ms);

#endif
