/*
 * test_ratelimit: the submission rate's token buckets (ratelimit.c), with
 * time passed in: the burst, the refill rate, Retry-After, one key's bucket
 * independent of another's, and the fixed table reusing slots.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#include "ratelimit.h"
#include "check.h"

#define S 1000000LL /* one second in microseconds */

static void test_burst_and_rate(void)
{
	ratelimit_t *rl = ratelimit_new(60, 5, 16); /* 1 a second, 5 at once */
	CHECK(rl != NULL, "new");
	int64_t wait = -1, t = 1000 * S;
	for (int i = 0; i < 5; i++)
		CHECK(ratelimit_take(rl, "alice", t, &wait) == 0, "burst %d", i);
	CHECK(ratelimit_take(rl, "alice", t, &wait) == -EAGAIN, "6th at once refused");
	CHECK(wait >= 999 && wait <= 1001, "retry after about 1 s: %lld ms", (long long)wait);
	CHECK(ratelimit_take(rl, "bob", t, &wait) == 0, "another key has its own bucket");
	CHECK(ratelimit_take(rl, "alice", t + S / 2, &wait) == -EAGAIN && wait >= 499 && wait <= 501,
	      "half a token after 0.5 s: %lld ms", (long long)wait);
	CHECK(ratelimit_take(rl, "alice", t + S, &wait) == 0, "one token after 1 s");
	CHECK(ratelimit_take(rl, "alice", t + S, &wait) == -EAGAIN, "and only one");
	/* a long pause refills to the burst, never past it */
	t += 3600 * S;
	for (int i = 0; i < 5; i++)
		CHECK(ratelimit_take(rl, "alice", t, &wait) == 0, "refilled %d", i);
	CHECK(ratelimit_take(rl, "alice", t, &wait) == -EAGAIN, "capped at the burst");
	/* time going backwards takes nothing extra */
	CHECK(ratelimit_take(rl, "alice", t - 10 * S, &wait) == -EAGAIN, "clock step back");
	ratelimit_free(rl);
	CHECK(ratelimit_new(0, 5, 16) == NULL && ratelimit_new(60, 0, 16) == NULL, "rate and burst must be >= 1");
}

static void test_table_full(void)
{
	ratelimit_t *rl = ratelimit_new(1, 1, 4); /* 1 a minute */
	int64_t wait, t = 10 * S;
	char key[16];
	/* more keys than slots: memory stays bounded, each new key starts full */
	for (int i = 0; i < 100; i++) {
		snprintf(key, sizeof key, "k%d", i);
		CHECK(ratelimit_take(rl, key, t + i, &wait) == 0, "key %d", i);
	}
	/* the last few keys are still limited */
	CHECK(ratelimit_take(rl, "k99", t + 200, &wait) == -EAGAIN, "k99 still empty");
	CHECK(wait > 59000 && wait <= 60001, "a minute for one token: %lld", (long long)wait);
	/* a key longer than the limit is cut, not overflowed */
	char longkey[300];
	for (int i = 0; i < 299; i++)
		longkey[i] = 'x';
	longkey[299] = '\0';
	CHECK(ratelimit_take(rl, longkey, t + 300, &wait) == 0, "long key");
	CHECK(ratelimit_take(rl, longkey, t + 301, &wait) == -EAGAIN, "long key: same bucket");
	ratelimit_free(rl);
	ratelimit_free(NULL);
}

int main(void)
{
	test_burst_and_rate();
	test_table_full();
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("ratelimit: all checks passed\n");
	return 0;
}
