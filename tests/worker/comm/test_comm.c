/*
 * test_comm: the Gloo backend of worker/comm with real processes. Each case
 * forks W ranks on 127.0.0.1 that meet through a directory KV
 * (worker/comm/comm_kv_dir.c) in a fresh temporary directory, and checks
 * results exactly: the inputs are small integers held in floats, so every
 * sum is exact whatever its order.
 *
 *   test_comm collectives W   every collective, even and uneven counts (some
 *                             0), the reduce-scatter also in ranges (the
 *                             _async form, synchronous here), several
 *                             roots, barrier ordering, bitwise
 *                             agreement across ranks and across repeats
 *   test_comm join-timeout    rank 2 of 3 never starts: the others' join
 *                             fails within the timeout, naming rank 2
 *   test_comm op-timeout      a live peer that does not call the collective:
 *                             -ETIMEDOUT after comm_set_timeout's limit
 *   test_comm dead-peer       a rank _exits between collectives: the others'
 *                             next collective fails with -ECONNRESET long
 *                             before the timeout, and stays failed
 *   test_comm abort           comm_abort: -ECANCELED here, peers fail fast
 *
 * The parent waits for the children with a deadline and kills them if it
 * passes; each child also has an alarm, so nothing outlives the test.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "comm_kv_dir.h"

#define MAX_RANKS 8
#define HOST "127.0.0.1"

static int s_failures;
static int s_rank;

#define CHECK(cond)                                                                              \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			fprintf(stderr, "rank %d: FAIL %s:%d: %s\n", s_rank, __FILE__, __LINE__, \
				#cond);                                                          \
			s_failures++;                                                            \
		}                                                                                \
	} while (0)

#define CHECK_RC(c, expr)                                                                        \
	do {                                                                                     \
		int rc_ = (expr);                                                                \
		if (rc_ != 0) {                                                                  \
			fprintf(stderr, "rank %d: FAIL %s:%d: %s = %d (%s)\n", s_rank, __FILE__,  \
				__LINE__, #expr, rc_, comm_last_error(c));                       \
			s_failures++;                                                            \
		}                                                                                \
	} while (0)

static double s_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void s_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static comm_t *s_join(const char *dir, int rank, int W, int timeout_ms)
{
	comm_kv_t kv = comm_kv_dir_make(dir);
	char err[512];
	comm_t *c = comm_gloo_new(&kv, rank, W, HOST, timeout_ms, err, sizeof err);
	if (!c) {
		fprintf(stderr, "rank %d: FAIL: comm_gloo_new: %s\n", rank, err);
		s_failures++;
	}
	return c;
}

/* ---- collectives -------------------------------------------------------- */

static void s_check_allreduce(comm_t *c, size_t n)
{
	int W = comm_world_size(c), r = comm_rank(c);
	float *buf = malloc((n ? n : 1) * sizeof(float));
	for (size_t i = 0; i < n; i++)
		buf[i] = (float)((i % 1000) * (size_t)(r + 1) + (size_t)r);
	CHECK_RC(c, comm_allreduce_sum_f32(c, buf, n));
	size_t bad = 0;
	for (size_t i = 0; i < n; i++) {
		double want = (double)(i % 1000) * W * (W + 1) / 2 + (double)W * (W - 1) / 2;
		if (buf[i] != (float)want && bad++ < 3)
			fprintf(stderr, "rank %d: all-reduce n=%zu: [%zu] = %g, want %g\n", r, n, i,
				(double)buf[i], want);
	}
	CHECK(bad == 0);
	free(buf);
}

/* range 0: one comm_reduce_scatter_sum_f32; else the same in successive
 * ranges of `range` elements (the last one shorter) through
 * comm_reduce_scatter_range_sum_f32_async (synchronous on Gloo), then
 * comm_wait: the same result. */
static void s_check_reduce_scatter(comm_t *c, const size_t *counts, size_t range)
{
	int W = comm_world_size(c), r = comm_rank(c);
	size_t n = 0, off = 0;
	for (int i = 0; i < W; i++) {
		if (i < r)
			off += counts[i];
		n += counts[i];
	}
	float *in = malloc((n ? n : 1) * sizeof(float));
	float *out = malloc((counts[r] ? counts[r] : 1) * sizeof(float));
	for (size_t j = 0; j < n; j++)
		in[j] = (float)((j % 100000) * (size_t)(r + 1));
	if (!range) {
		CHECK_RC(c, comm_reduce_scatter_sum_f32(c, in, out, counts));
	} else {
		for (size_t lo = 0; lo < n; lo += range)
			CHECK_RC(c, comm_reduce_scatter_range_sum_f32_async(
					    c, in, out, counts, lo, lo + range < n ? range : n - lo, NULL));
		CHECK_RC(c, comm_wait(c));
	}
	size_t bad = 0;
	for (size_t j = 0; j < counts[r]; j++) {
		double want = (double)((off + j) % 100000) * W * (W + 1) / 2;
		if (out[j] != (float)want && bad++ < 3)
			fprintf(stderr, "rank %d: reduce-scatter (ranges of %zu): out[%zu] = %g, want %g\n",
				r, range, j, (double)out[j], want);
	}
	CHECK(bad == 0);
	free(in);
	free(out);
}

static void s_check_allgather(comm_t *c, const size_t *counts)
{
	int W = comm_world_size(c), r = comm_rank(c);
	size_t n = 0;
	for (int i = 0; i < W; i++)
		n += counts[i];
	float *in = malloc((counts[r] ? counts[r] : 1) * sizeof(float));
	float *out = malloc((n ? n : 1) * sizeof(float));
	for (size_t j = 0; j < counts[r]; j++)
		in[j] = (float)(r * 1000000 + (int)(j % 500000));
	for (size_t j = 0; j < n; j++)
		out[j] = -1;
	CHECK_RC(c, comm_allgather_f32(c, in, out, counts));
	size_t bad = 0, k = 0;
	for (int i = 0; i < W; i++)
		for (size_t j = 0; j < counts[i]; j++, k++) {
			float want = (float)(i * 1000000 + (int)(j % 500000));
			if (out[k] != want && bad++ < 3)
				fprintf(stderr, "rank %d: all-gather: out[%zu] = %g, want %g\n", r, k,
					(double)out[k], (double)want);
		}
	CHECK(bad == 0);
	free(in);
	free(out);
}

static void s_check_broadcast(comm_t *c, size_t bytes, int root)
{
	int r = comm_rank(c);
	unsigned char *buf = malloc(bytes ? bytes : 1);
	for (size_t i = 0; i < bytes; i++)
		buf[i] = r == root ? (unsigned char)(i * 7 + (size_t)root) : 0xee;
	CHECK_RC(c, comm_broadcast(c, buf, bytes, root));
	size_t bad = 0;
	for (size_t i = 0; i < bytes; i++)
		bad += buf[i] != (unsigned char)(i * 7 + (size_t)root);
	CHECK(bad == 0);
	free(buf);
}

/* Everyone leaves a mark, meets at the barrier, then sees every mark. The
 * last rank is slow to arrive, so a barrier that does not wait fails. */
static void s_check_barrier(comm_t *c, const char *dir)
{
	int W = comm_world_size(c), r = comm_rank(c);
	char path[4096];
	if (r == W - 1)
		s_sleep_ms(300);
	snprintf(path, sizeof path, "%s/mark-%d", dir, r);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (f)
		fclose(f);
	CHECK_RC(c, comm_barrier(c));
	for (int i = 0; i < W; i++) {
		snprintf(path, sizeof path, "%s/mark-%d", dir, i);
		CHECK(access(path, F_OK) == 0);
	}
}

/* Sums of non-integers depend on their order: the result must still be the
 * same bits on every rank, and the same bits when repeated. */
static void s_check_repeatable(comm_t *c)
{
	int r = comm_rank(c);
	const size_t n = 300007;
	float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
	float *root = malloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		a[i] = sinf((float)i * 0.37f + (float)r) * 1e-3f + (float)r * 0.1f;
	memcpy(b, a, n * sizeof(float));
	CHECK_RC(c, comm_allreduce_sum_f32(c, a, n));
	CHECK_RC(c, comm_allreduce_sum_f32(c, b, n));
	CHECK(memcmp(a, b, n * sizeof(float)) == 0);
	memcpy(root, a, n * sizeof(float));
	CHECK_RC(c, comm_broadcast(c, root, n * sizeof(float), 0));
	CHECK(memcmp(a, root, n * sizeof(float)) == 0);
	free(a);
	free(b);
	free(root);
}

static void s_rank_collectives(const char *dir, int rank, int W)
{
	comm_t *c = s_join(dir, rank, W, 10000);
	if (!c)
		return;
	CHECK(comm_rank(c) == rank);
	CHECK(comm_world_size(c) == W);
	CHECK(strcmp(comm_last_error(c), "") == 0);

	/* Even and uneven sizes; 12 MB, so that Gloo's ring runs in several
	 * 4 MiB segments; fewer elements than ranks; nothing at all. */
	size_t sizes[] = {0, 1, 3, 1000, 3000017};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
		s_check_allreduce(c, sizes[i]);

	size_t even[MAX_RANKS], uneven[MAX_RANKS], holes[MAX_RANKS], big[MAX_RANKS];
	for (int i = 0; i < W; i++) {
		even[i] = 64;
		uneven[i] = 3 + 5 * (size_t)i;
		holes[i] = i % 2 == 1 ? 0 : 2 + (size_t)i; /* odd ranks get nothing */
		big[i] = 300000 + 17 * (size_t)i;
	}
	s_check_reduce_scatter(c, even, 0);
	s_check_reduce_scatter(c, uneven, 0);
	s_check_reduce_scatter(c, holes, 0);
	s_check_reduce_scatter(c, big, 0);
	s_check_reduce_scatter(c, even, 50); /* ranges across ranks' parts */
	s_check_reduce_scatter(c, uneven, 7);
	s_check_reduce_scatter(c, holes, 1);
	s_check_reduce_scatter(c, big, 100003);
	s_check_allgather(c, even);
	s_check_allgather(c, uneven);
	s_check_allgather(c, holes);
	s_check_allgather(c, big);

	s_check_broadcast(c, 1001, 0);
	s_check_broadcast(c, 1 << 20, W - 1);
	s_check_broadcast(c, 0, 0);
	s_check_barrier(c, dir);
	s_check_repeatable(c);

	/* A bad root is refused without touching the group. */
	char x = 0;
	CHECK(comm_broadcast(c, &x, 1, W) == -EINVAL);
	CHECK(strstr(comm_last_error(c), "root") != NULL);
	CHECK_RC(c, comm_barrier(c));
	comm_free(c);
}

/* ---- sub-groups ------------------------------------------------------- */

/* All-reduce of each member's (parent rank + 1) in a group: the sum over
 * the parent ranks that are members. */
static void s_check_group_sum(comm_t *g, float want)
{
	float x = (float)(s_rank + 1);
	CHECK_RC(g, comm_allreduce_sum_f32(g, &x, 1));
	if (x != want)
		fprintf(stderr, "rank %d: group sum %g, want %g\n", s_rank, (double)x, (double)want);
	CHECK(x == want);
}

/* W = 4 as a 2 x 2 grid: tensor-parallel pairs {0,1} {2,3} (colour r / 2),
 * data-parallel pairs {0,2} {1,3} (colour r % 2, keys reversed so that the
 * higher parent rank comes first), then only the even ranks. Every group
 * works, and beside the parent, whose collectives still run. */
static void s_rank_split(const char *dir, int rank, int W)
{
	comm_t *c = s_join(dir, rank, W, 10000);
	if (!c)
		return;
	comm_kv_t kv = comm_kv_dir_make(dir);
	char err[512];
	comm_t *tp = comm_split(c, &kv, rank / 2, rank % 2, err, sizeof err);
	if (!tp)
		fprintf(stderr, "rank %d: FAIL: tensor-parallel split: %s\n", rank, err);
	comm_t *dp = comm_split(c, &kv, rank % 2, -rank, err, sizeof err);
	if (!dp)
		fprintf(stderr, "rank %d: FAIL: data-parallel split: %s\n", rank, err);
	comm_t *even = comm_split(c, &kv, rank % 2 == 0 ? 7 : COMM_NO_GROUP, 0, err, sizeof err);
	CHECK(tp && dp);
	if (tp && dp) {
		CHECK(comm_world_size(tp) == 2 && comm_rank(tp) == rank % 2);
		CHECK(comm_world_size(dp) == 2 && comm_rank(dp) == 1 - rank / 2);
		s_check_group_sum(tp, (float)(rank / 2 * 4 + 3)); /* 1+2 or 3+4 */
		s_check_group_sum(dp, (float)(rank % 2 * 2 + 4)); /* 1+3 or 2+4 */
		s_check_allreduce(c, 1000);
		/* Uneven parts along a group, as the sequence-parallel gathers. */
		s_check_allgather(tp, (const size_t[]){5, 9});
		s_check_reduce_scatter(dp, (const size_t[]){3, 0}, 0);
	}
	if (rank % 2 == 0) {
		CHECK(even && comm_world_size(even) == 2 && comm_rank(even) == rank / 2);
		if (even)
			s_check_group_sum(even, 4.0f); /* 1+3 */
	} else {
		CHECK(even == NULL && err[0] == '\0');
	}
	comm_free(even);
	comm_free(tp);
	comm_free(dp);
	CHECK_RC(c, comm_barrier(c));
	comm_free(c);
}

/* ---- failures ----------------------------------------------------------- */

static void s_rank_join_timeout(const char *dir, int rank, int W)
{
	(void)W;
	comm_kv_t kv = comm_kv_dir_make(dir);
	char err[512] = "";
	double t0 = s_now_s();
	comm_t *c = comm_gloo_new(&kv, rank, 3, HOST, 500, err, sizeof err);
	double dt = s_now_s() - t0;
	CHECK(c == NULL);
	comm_free(c);
	fprintf(stderr, "rank %d: join failed after %.2f s: %s\n", rank, dt, err);
	CHECK(strstr(err, "rank 2") != NULL);
	CHECK(dt >= 0.4 && dt < 5.0);
}

static void s_rank_op_timeout(const char *dir, int rank, int W)
{
	comm_t *c = s_join(dir, rank, W, 10000);
	if (!c)
		return;
	float v[4] = {1, 2, 3, 4};
	CHECK_RC(c, comm_allreduce_sum_f32(c, v, 4));
	if (rank == 0) {
		comm_set_timeout(c, 300);
		double t0 = s_now_s();
		int rc = comm_allreduce_sum_f32(c, v, 4);
		double dt = s_now_s() - t0;
		fprintf(stderr, "rank 0: all-reduce gave %d after %.2f s: %s\n", rc, dt,
			comm_last_error(c));
		CHECK(rc == -ETIMEDOUT);
		CHECK(strstr(comm_last_error(c), "all-reduce") != NULL);
		CHECK(dt >= 0.25 && dt < 3.0);
		/* The failure is final. */
		CHECK(comm_barrier(c) == -ETIMEDOUT);
		CHECK(strstr(comm_last_error(c), "barrier") != NULL);
	} else {
		/* Alive, but late: rank 0 gives up before this call. */
		s_sleep_ms(1500);
		comm_set_timeout(c, 3000);
		int rc = comm_allreduce_sum_f32(c, v, 4);
		CHECK(rc < 0);
	}
	comm_free(c);
}

static void s_rank_dead_peer(const char *dir, int rank, int W)
{
	comm_t *c = s_join(dir, rank, W, 20000);
	if (!c)
		return;
	float v[1000];
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < 1000; i++)
			v[i] = 1;
		CHECK_RC(c, comm_allreduce_sum_f32(c, v, 1000));
		CHECK(v[999] == (float)W);
	}
	if (rank == W - 1) {
		s_sleep_ms(200); /* let the last round's bytes drain, then die without a word */
		_exit(s_failures ? 1 : 0);
	}
	double t0 = s_now_s();
	int rc = comm_allreduce_sum_f32(c, v, 1000);
	double dt = s_now_s() - t0;
	fprintf(stderr, "rank %d: all-reduce after a peer died gave %d after %.2f s: %s\n", rank, rc, dt,
		comm_last_error(c));
	CHECK(rc == -ECONNRESET);
	CHECK(dt < 5.0); /* the timeout is 20 s: the death is noticed, not waited out */
	CHECK(strstr(comm_last_error(c), "all-reduce") != NULL);
	CHECK(comm_barrier(c) == -ECONNRESET);
	comm_free(c);
}

static void s_rank_abort(const char *dir, int rank, int W)
{
	comm_t *c = s_join(dir, rank, W, 20000);
	if (!c)
		return;
	CHECK_RC(c, comm_barrier(c));
	float v[16] = {0};
	if (rank == 0) {
		comm_abort(c);
		CHECK(comm_allreduce_sum_f32(c, v, 16) == -ECANCELED);
		CHECK(strstr(comm_last_error(c), "abort") != NULL);
		CHECK(comm_barrier(c) == -ECANCELED);
		s_sleep_ms(4000); /* stay alive: peers must notice the abort, not our exit */
	} else {
		double t0 = s_now_s();
		int rc = comm_allreduce_sum_f32(c, v, 16);
		double dt = s_now_s() - t0;
		fprintf(stderr, "rank %d: all-reduce with an aborted peer gave %d after %.2f s: %s\n", rank,
			rc, dt, comm_last_error(c));
		CHECK(rc == -ECONNRESET);
		CHECK(dt < 3.5);
	}
	comm_free(c);
}

/* ---- driver ------------------------------------------------------------- */

typedef void (*rank_fn)(const char *dir, int rank, int W);

/* Fork n_procs ranks running fn; returns the number of ranks that failed. */
static int s_run(rank_fn fn, int n_procs, int W, int deadline_s)
{
	char dir[] = "/tmp/test-comm.XXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	pid_t pids[MAX_RANKS];
	for (int r = 0; r < n_procs; r++) {
		pids[r] = fork();
		if (pids[r] < 0) {
			perror("fork");
			return 1;
		}
		if (pids[r] == 0) {
			s_rank = r;
			alarm((unsigned)deadline_s);
			fn(dir, r, W);
			/* exit, not _exit: the leak checker of a sanitized build runs then. */
			exit(s_failures ? 1 : 0);
		}
	}
	int bad = 0;
	double deadline = s_now_s() + deadline_s + 2;
	for (int left = n_procs; left > 0;) {
		int status;
		pid_t p = waitpid(-1, &status, WNOHANG);
		if (p > 0) {
			left--;
			if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
				fprintf(stderr, "a rank failed (status 0x%x)\n", status);
				bad++;
			}
			continue;
		}
		if (s_now_s() > deadline) {
			fprintf(stderr, "ranks still running after %d s: killing them\n", deadline_s);
			for (int r = 0; r < n_procs; r++)
				kill(pids[r], SIGKILL);
			while (wait(NULL) > 0)
				;
			bad++;
			break;
		}
		s_sleep_ms(10);
	}
	char cmd[256];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return bad;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: test_comm collectives W | split | join-timeout | op-timeout | dead-peer | abort\n");
		return 2;
	}
	const char *what = argv[1];
	int bad;
	if (strcmp(what, "collectives") == 0 && argc == 3) {
		int W = atoi(argv[2]);
		if (W < 1 || W > MAX_RANKS)
			return 2;
		bad = s_run(s_rank_collectives, W, W, 40);
	} else if (strcmp(what, "split") == 0) {
		bad = s_run(s_rank_split, 4, 4, 40);
	} else if (strcmp(what, "join-timeout") == 0) {
		bad = s_run(s_rank_join_timeout, 2, 3, 15); /* rank 2 of 3 never starts */
	} else if (strcmp(what, "op-timeout") == 0) {
		bad = s_run(s_rank_op_timeout, 2, 2, 15);
	} else if (strcmp(what, "dead-peer") == 0) {
		bad = s_run(s_rank_dead_peer, 3, 3, 15);
	} else if (strcmp(what, "abort") == 0) {
		bad = s_run(s_rank_abort, 3, 3, 15);
	} else {
		fprintf(stderr, "test_comm: unknown case '%s'\n", what);
		return 2;
	}
	if (bad)
		fprintf(stderr, "test_comm %s: %d rank(s) failed\n", what, bad);
	else
		fprintf(stderr, "test_comm %s: ok\n", what);
	return bad ? 1 : 0;
}
