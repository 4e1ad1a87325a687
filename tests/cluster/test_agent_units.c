/*
 * test_agent_units: the agent's pure helpers. agent_cpu_share splits the
 * node's CPUs between device slots (contiguous near-equal runs; round robin
 * when there are more slots than CPUs); agent_route_address finds the local
 * address of the route to the coordinator. ranklog (the rank output lines
 * the agent forwards in LOGS): lines split per stream, cut at
 * RANKLOG_LINE_MAX_BYTES with the rest of the line discarded, invalid UTF-8
 * replaced, the batch due at RANKLOG_BATCH_LINES lines or after
 * RANKLOG_BATCH_MS, the rate cap dropping and counting lines within one
 * second and letting them through the next.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "agent.h"
#include "ranklog.h"
#include "check.h"

static void set_of(cpu_set_t *s, const int *cpus, int n)
{
	CPU_ZERO(s);
	for (int i = 0; i < n; i++)
		CPU_SET(cpus[i], s);
}

/* The CPUs of slot `slot` of `n_slots` as a string "a,b,c". */
static const char *share(const cpu_set_t *avail, int slot, int n_slots, int *ret_n)
{
	static char buf[256];
	cpu_set_t out;
	*ret_n = agent_cpu_share(avail, slot, n_slots, &out);
	buf[0] = '\0';
	size_t off = 0;
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &out))
			off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%d", off ? "," : "", i);
	return buf;
}

static void test_cpu_share(void)
{
	cpu_set_t avail;
	int n;
	const int eight[] = {0, 1, 2, 3, 4, 5, 6, 7};
	set_of(&avail, eight, 8);
	CHECK(strcmp(share(&avail, 0, 1, &n), "0,1,2,3,4,5,6,7") == 0 && n == 8, "one slot gets all");
	CHECK(strcmp(share(&avail, 0, 2, &n), "0,1,2,3") == 0 && n == 4, "slot 0 of 2: %s", share(&avail, 0, 2, &n));
	CHECK(strcmp(share(&avail, 1, 2, &n), "4,5,6,7") == 0 && n == 4, "slot 1 of 2");
	/* 8 CPUs over 3 slots: 2, 3, 3 (floor(8*i/3) boundaries 0, 2, 5, 8). */
	CHECK(strcmp(share(&avail, 0, 3, &n), "0,1") == 0 && n == 2, "slot 0 of 3: %s", share(&avail, 0, 3, &n));
	CHECK(strcmp(share(&avail, 1, 3, &n), "2,3,4") == 0 && n == 3, "slot 1 of 3: %s", share(&avail, 1, 3, &n));
	CHECK(strcmp(share(&avail, 2, 3, &n), "5,6,7") == 0 && n == 3, "slot 2 of 3: %s", share(&avail, 2, 3, &n));

	/* Slots cover every CPU exactly once. */
	for (int slots = 1; slots <= 8; slots++) {
		int seen[8] = {0};
		for (int s = 0; s < slots; s++) {
			cpu_set_t out;
			int k = agent_cpu_share(&avail, s, slots, &out);
			CHECK(k >= 1, "slot %d of %d is empty", s, slots);
			for (int c = 0; c < 8; c++)
				seen[c] += CPU_ISSET(c, &out) ? 1 : 0;
		}
		for (int c = 0; c < 8; c++)
			CHECK(seen[c] == 1, "cpu %d used %d times with %d slots", c, seen[c], slots);
	}

	/* A sparse affinity (the agent runs under taskset 2,5,9). */
	const int sparse[] = {2, 5, 9};
	set_of(&avail, sparse, 3);
	CHECK(strcmp(share(&avail, 0, 3, &n), "2") == 0 && n == 1, "sparse 0");
	CHECK(strcmp(share(&avail, 2, 3, &n), "9") == 0 && n == 1, "sparse 2");
	/* More slots than CPUs: round robin, one thread each. */
	CHECK(strcmp(share(&avail, 3, 5, &n), "2") == 0 && n == 1, "oversubscribed 3 of 5: %s", share(&avail, 3, 5, &n));
	CHECK(strcmp(share(&avail, 4, 5, &n), "5") == 0 && n == 1, "oversubscribed 4 of 5");

	cpu_set_t out;
	CHECK(agent_cpu_share(&avail, 3, 3, &out) == -EINVAL, "slot out of range");
	CHECK(agent_cpu_share(&avail, -1, 3, &out) == -EINVAL, "negative slot");
	CPU_ZERO(&avail);
	CHECK(agent_cpu_share(&avail, 0, 1, &out) == -EINVAL, "no CPUs");
}

static void test_route_address(void)
{
	char addr[64], err[256];
	int rc = agent_route_address("tcp://127.0.0.1:5555", addr, sizeof addr, err, sizeof err);
	CHECK(rc == 0 && strcmp(addr, "127.0.0.1") == 0, "loopback: rc %d addr %s err %s", rc, addr, err);
	rc = agent_route_address("tcp://localhost:5555", addr, sizeof addr, err, sizeof err);
	CHECK(rc == 0 && (strcmp(addr, "127.0.0.1") == 0 || strcmp(addr, "::1") == 0),
	      "localhost: rc %d addr %s err %s", rc, addr, err);
	rc = agent_route_address("tcp://[::1]:5555", addr, sizeof addr, err, sizeof err);
	/* Hosts without IPv6 have no route to ::1; then the error must say so. */
	CHECK((rc == 0 && strcmp(addr, "::1") == 0) || (rc < 0 && strstr(err, "::1")),
	      "[::1]: rc %d addr %s err %s", rc, addr, err);
	rc = agent_route_address("127.0.0.1:5555", addr, sizeof addr, err, sizeof err);
	CHECK(rc == -EINVAL && strstr(err, "tcp://HOST:PORT"), "no scheme: rc %d err %s", rc, err);
	rc = agent_route_address("tcp://127.0.0.1", addr, sizeof addr, err, sizeof err);
	CHECK(rc == -EINVAL, "no port: rc %d", rc);
	rc = agent_route_address("tcp://no-such-host.invalid:5555", addr, sizeof addr, err, sizeof err);
	CHECK(rc < 0 && strstr(err, "--advertise"), "unresolvable: rc %d err %s", rc, err);
}

static int s_n_cb;

static void s_count(void *cls, ranklog_stream_t stream, const char *line)
{
	(void)cls;
	(void)stream;
	(void)line;
	s_n_cb++;
}

static const char *s_text(const json_t *p, size_t i)
{
	return json_string_value(json_object_get(json_array_get(json_object_get(p, "lines"), i), "text"));
}

static void test_ranklog(void)
{
	ranklog_t rl;
	ranklog_init(&rl);
	int64_t t = 1000000000;
	CHECK(!ranklog_pending(&rl) && ranklog_deadline_us(&rl) == INT64_MAX, "empty");
	/* lines of two streams interleave by line, partial lines wait */
	ranklog_feed(&rl, RANKLOG_STDOUT, "step 1\nste", 10, t, s_count, NULL);
	ranklog_feed(&rl, RANKLOG_STDERR, "warn\n", 5, t, s_count, NULL);
	ranklog_feed(&rl, RANKLOG_STDOUT, "p 2\n\xff\xc3(ok\n", 10, t, s_count, NULL);
	CHECK(s_n_cb == 4, "callbacks %d", s_n_cb);
	CHECK(!ranklog_due(&rl, t + 1000), "due too early");
	CHECK(ranklog_due(&rl, t + RANKLOG_BATCH_MS * 1000), "not due after %d ms", RANKLOG_BATCH_MS);
	json_t *p = ranklog_take(&rl, "j-1", 2, 1);
	CHECK(p && json_array_size(json_object_get(p, "lines")) == 4, "4 lines");
	CHECK(strcmp(s_text(p, 0), "step 1") == 0 && strcmp(s_text(p, 1), "warn") == 0 &&
	      strcmp(s_text(p, 2), "step 2") == 0 && strcmp(s_text(p, 3), "?" "?(ok") == 0,
	      "texts %s|%s|%s|%s", s_text(p, 0), s_text(p, 1), s_text(p, 2), s_text(p, 3));
	CHECK(strcmp(json_string_value(json_object_get(json_array_get(json_object_get(p, "lines"), 1), "stream")),
	              "stderr") == 0, "stream of line 1");
	CHECK(json_integer_value(json_object_get(p, "attempt")) == 2 && json_integer_value(json_object_get(p, "rank")) == 1 &&
	      json_integer_value(json_object_get(p, "dropped")) == 0, "header");
	json_decref(p);
	/* a long line: cut, the rest up to the newline discarded */
	static char big[RANKLOG_LINE_MAX_BYTES * 3];
	memset(big, 'x', sizeof big);
	ranklog_feed(&rl, RANKLOG_STDOUT, big, sizeof big, t, NULL, NULL);
	ranklog_feed(&rl, RANKLOG_STDOUT, "\nnext\n", 6, t, NULL, NULL);
	p = ranklog_take(&rl, "j", 1, 0);
	CHECK(json_array_size(json_object_get(p, "lines")) == 2 && strlen(s_text(p, 0)) == RANKLOG_LINE_MAX_BYTES &&
	      strcmp(s_text(p, 1), "next") == 0, "cut line: %zu lines", json_array_size(json_object_get(p, "lines")));
	json_decref(p);
	/* batch full at RANKLOG_BATCH_LINES */
	for (int i = 0; i < RANKLOG_BATCH_LINES; i++)
		ranklog_feed(&rl, RANKLOG_STDOUT, "l\n", 2, t + 1, NULL, NULL);
	CHECK(ranklog_due(&rl, t + 1), "a full batch is not due");
	json_decref(ranklog_take(&rl, "j", 1, 0));
	/* the rate cap: one second from t+2 s */
	ranklog_clear(&rl);
	int64_t w = t + 2000000;
	for (int i = 0; i < RANKLOG_RATE_LINES + 50; i++)
		ranklog_feed(&rl, RANKLOG_STDOUT, "flood\n", 6, w + i, NULL, NULL);
	p = ranklog_take(&rl, "j", 1, 0);
	CHECK((int)json_array_size(json_object_get(p, "lines")) == RANKLOG_RATE_LINES &&
	      json_integer_value(json_object_get(p, "dropped")) == 50, "capped: %zu lines, %lld dropped",
	      json_array_size(json_object_get(p, "lines")), (long long)json_integer_value(json_object_get(p, "dropped")));
	json_decref(p);
	ranklog_feed(&rl, RANKLOG_STDOUT, "again\n", 6, w + 1000000, NULL, NULL);
	p = ranklog_take(&rl, "j", 1, 0);
	CHECK(json_array_size(json_object_get(p, "lines")) == 1 && json_integer_value(json_object_get(p, "dropped")) == 0,
	      "the next second lets lines through");
	json_decref(p);
	ranklog_clear(&rl);
}

int main(void)
{
	test_cpu_share();
	test_route_address();
	test_ranklog();
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("ok\n");
	return 0;
}
