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

/* tensor-parallel groups: whole groups per node when they fit, else plain packing */
static void test_pack_groups(void)
{
	int take[8];
	/* plain packing would give 3 + 1 (group 1 across nodes); whole groups give 2 + 2 */
	int a[] = {3, 3};
	CHECK(gang_pack_groups(a, 2, 4, 2, take) == 2 && take[0] == 2 && take[1] == 2,
	      "whole groups: %d %d", take[0], take[1]);
	CHECK(gang_pack(a, 2, 4, take) == 2 && take[0] == 3 && take[1] == 1, "plain: %d %d", take[0], take[1]);
	/* 8 ranks in groups of 4 on {6, 4, 2}: 4 + 4, never 6 + 2 */
	int b[] = {6, 4, 2};
	CHECK(gang_pack_groups(b, 3, 8, 4, take) == 2 && take[0] == 4 && take[1] == 4 && take[2] == 0,
	      "groups of 4: %d %d %d", take[0], take[1], take[2]);
	/* groups of 4 cannot stay whole on {3, 3, 2}: plain packing, 3 + 3 + 2 */
	int c[] = {3, 3, 2};
	CHECK(gang_pack_groups(c, 3, 8, 4, take) == 3 && take[0] == 3 && take[1] == 3 && take[2] == 2,
	      "split: %d %d %d", take[0], take[1], take[2]);
	CHECK(gang_pack_groups(c, 3, 9, 4, take) == -ENOSPC, "does not fit at all");
	/* group 1, or a world that is not a multiple: gang_pack */
	CHECK(gang_pack_groups(a, 2, 4, 1, take) == 2 && take[0] == 3 && take[1] == 1, "group 1");
	CHECK(gang_pack_groups(a, 2, 3, 2, take) == 1 && take[0] == 3, "3 ranks in groups of 2");

	int n = -1;
	int whole[] = {0, 0, 1, 1, 1, 1, 2, 2};
	CHECK(gang_group_split(whole, 8, 2, &n) == -1 && n == 0, "pairs each on one node");
	CHECK(gang_group_split(whole, 8, 4, &n) == 0 && n == 2, "groups of 4: 0 and 1 span (%d)", n);
	int one_off[] = {0, 0, 0, 1, 1, 1};
	CHECK(gang_group_split(one_off, 6, 2, &n) == 1 && n == 1, "group 1 (ranks 2-3) spans");
	CHECK(gang_group_split(one_off, 6, 1, &n) == -1 && n == 0, "no groups");
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
	test_pack_groups();
	test_smap();
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("gang, smap: all checks passed\n");
	return 0;
}
