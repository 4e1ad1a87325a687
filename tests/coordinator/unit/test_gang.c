/*
 * test_gang: the scheduler's placement arithmetic (gang.c) and the broker
 * loop's string map (smap.c), without sockets or SQL.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gang.h"
#include "smap.h"
#include "check.h"

static void test_pack(void)
{
	int take[8];
	/* one node that fits takes the whole job, even when another has as many free */
	int a[] = {2, 4, 4};
	CHECK(gang_pack(a, 3, 4, take) == 1 && take[0] == 0 && take[1] == 4 && take[2] == 0,
	      "fits on one node (the first of the largest): %d %d %d", take[0], take[1], take[2]);
	/* most free first across nodes: 3 + 2 for 5 ranks, not 1 + 2 + 2 */
	int b[] = {1, 2, 3, 2};
	CHECK(gang_pack(b, 4, 5, take) == 2 && take[2] == 3 && take[1] == 2 && take[0] == 0 && take[3] == 0,
	      "two nodes: %d %d %d %d", take[0], take[1], take[2], take[3]);
	/* all or nothing */
	int c[] = {1, 1, 1};
	CHECK(gang_pack(c, 3, 4, take) == -ENOSPC && take[0] == 0 && take[1] == 0 && take[2] == 0,
	      "does not fit: nothing taken");
	CHECK(gang_pack(c, 3, 3, take) == 3 && take[0] == 1 && take[1] == 1 && take[2] == 1, "exactly fits");
	/* no nodes, bad sizes */
	CHECK(gang_pack(NULL, 0, 1, take) == -ENOSPC, "no nodes");
	CHECK(gang_pack(c, 3, 0, take) == -EINVAL, "world size 0");
	int d[] = {0, -1, 2};
	CHECK(gang_pack(d, 3, 2, take) == 1 && take[2] == 2 && take[0] == 0 && take[1] == 0, "zero and negative free");
}

static void test_smap(void)
{
	smap_t m = SMAP_INIT;
	CHECK(smap_get(&m, "x") == NULL, "empty");
	CHECK(smap_del(&m, "x") == NULL, "delete from empty");
	static int values[5000];
	char key[32];
	for (int i = 0; i < 5000; i++) {
		snprintf(key, sizeof key, "agent/sim-%d", i);
		void *old = &old;
		CHECK(smap_put(&m, key, &values[i], &old) == 0 && old == NULL, "put %d", i);
	}
	CHECK(m.n == 5000, "n %zu", m.n);
	for (int i = 0; i < 5000; i += 2) {
		snprintf(key, sizeof key, "agent/sim-%d", i);
		CHECK(smap_del(&m, key) == &values[i], "del %d", i);
	}
	for (int i = 0; i < 5000; i++) {
		snprintf(key, sizeof key, "agent/sim-%d", i);
		void *v = smap_get(&m, key);
		CHECK(i % 2 ? v == &values[i] : v == NULL, "get %d after deletes", i);
	}
	void *old = NULL;
	CHECK(smap_put(&m, "agent/sim-1", &values[0], &old) == 0 && old == &values[1], "replace returns the old value");
	size_t pos = 0, n = 0;
	while (smap_next(&m, &pos))
		n++;
	CHECK(n == 2500 && m.n == 2500, "iteration %zu", n);
	/* churn: many inserts and deletes keep working (tombstones are recycled) */
	for (int round = 0; round < 20; round++)
		for (int i = 0; i < 1000; i++) {
			snprintf(key, sizeof key, "k%d-%d", round, i);
			CHECK(smap_put(&m, key, &values[i], NULL) == 0, "churn put");
			CHECK(smap_del(&m, key) == &values[i], "churn del");
		}
	CHECK(m.n == 2500, "after churn %zu", m.n);
	smap_free(&m);
	CHECK(m.n == 0 && m.cap == 0, "freed");
}

int main(void)
{
	test_pack();
	test_smap();
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("gang, smap: all checks passed\n");
	return 0;
}
