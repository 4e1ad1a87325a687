/*
 * test_snapw: the asynchronous snapshot writer (worker/snapshot/snapw.c).
 * A submitted shard is copied at once (the sources are overwritten right
 * after submit and the file still holds the old values), written by the
 * thread with the same bytes and checksum as a direct snap_shard_write, and
 * handed out once by poll/wait; a second submit while one is in flight or
 * uncollected gets -EBUSY; buffers are reused across snapshots of different
 * sizes; errors come back in the result; free waits for a write in flight.
 */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "snapshot.h"
#include "snapw.h"

static char base[256];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static float *pattern(int64_t n, float seed)
{
	float *p = malloc((size_t)n * sizeof *p);
	for (int64_t i = 0; i < n; i++)
		p[i] = seed + (float)i * 0.25f;
	return p;
}

static char *slurp(const char *path, size_t *ret_len)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return NULL;
	fseek(fp, 0, SEEK_END);
	long len = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	char *data = malloc((size_t)len + 1);
	*ret_len = fread(data, 1, (size_t)len, fp);
	fclose(fp);
	return data;
}

/* Polls (never blocking) until the result arrives; 10 s at most. */
static int poll_until_done(snapw_t *w, snapw_result_t *r)
{
	for (int i = 0; i < 10000; i++) {
		int got = snapw_poll(w, r);
		if (got)
			return got;
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	return 0;
}

static void test_copy_and_match(void)
{
	char async_dir[512], direct_dir[512], err[512];
	snprintf(async_dir, sizeof async_dir, "%s/async", base);
	snprintf(direct_dir, sizeof direct_dir, "%s/direct", base);
	mkdir(async_dir, 0755);
	mkdir(direct_dir, 0755);

	const int64_t n = 1 << 20, lo = 1000, count = 300000; /* a 3.6 MB shard */
	float *p = pattern(n, 1.0f), *m = pattern(n, 2.0f), *v = pattern(n, 3.0f);
	/* The expected file: a direct write of the same data. */
	snap_shard_info_t want;
	CHECK(snap_shard_write(direct_dir, 1, 4, 50, n, lo, count, p + lo, m + lo, v + lo, &want, err,
	                       sizeof err) == 0, "direct write: %s", err);

	snapw_t *w = snapw_new();
	CHECK(w != NULL, "snapw_new");
	snapw_result_t r;
	CHECK(snapw_poll(w, &r) == 0, "nothing submitted: poll gives 0");
	CHECK(snapw_wait(w, &r) == 0, "nothing submitted: wait gives 0 at once");

	int rc = snapw_submit(w, async_dir, 1, 4, 50, n, lo, count, p + lo, m + lo, v + lo);
	CHECK(rc == 0, "submit: %d", rc);
	/* Overwrite the sources at once: the writer must have its own copy. */
	for (int64_t i = 0; i < n; i++)
		p[i] = m[i] = v[i] = -7.0f;
	rc = snapw_submit(w, async_dir, 1, 4, 51, n, lo, count, p + lo, m + lo, v + lo);
	CHECK(rc == -EBUSY, "a second submit while one is in flight: %d", rc);

	int got = poll_until_done(w, &r);
	CHECK(got == 1 && r.status == 0, "poll: got %d status %d %s", got, r.status, r.error);
	CHECK(r.step == 50 && r.rank == 1 && strcmp(r.shard.name, want.name) == 0 &&
	      r.shard.bytes == want.bytes && strcmp(r.shard.xxh3, want.xxh3) == 0,
	      "the async result matches the direct write (%s %lld %s vs %s %lld %s)", r.shard.name,
	      (long long)r.shard.bytes, r.shard.xxh3, want.name, (long long)want.bytes, want.xxh3);
	CHECK(r.write_us >= 0 && r.error[0] == '\0', "timing and no error");
	CHECK(snapw_poll(w, &r) == 0, "the result is handed out once");

	char a[600], b[600];
	size_t la, lb;
	snprintf(a, sizeof a, "%s/%s", async_dir, want.name);
	snprintf(b, sizeof b, "%s/%s", direct_dir, want.name);
	char *da = slurp(a, &la), *db = slurp(b, &lb);
	CHECK(da && db && la == lb && memcmp(da, db, la) == 0, "the two files are byte-identical");
	free(da);
	free(db);

	/* Reuse: a smaller shard, then a bigger one (the buffers grow), via wait. */
	for (int k = 0; k < 2; k++) {
		int64_t c = k == 0 ? 10 : 500000;
		float *q = pattern(c, (float)k);
		snap_shard_info_t d;
		char dir2[600];
		snprintf(dir2, sizeof dir2, "%s/reuse%d", base, k);
		mkdir(dir2, 0755);
		CHECK(snapw_submit(w, dir2, 0, 2, 60 + k, 2 * c, 0, c, q, q, q) == 0, "reuse submit %d", k);
		CHECK(snap_shard_write(direct_dir, 0, 2, 60 + k, 2 * c, 0, c, q, q, q, &d, err, sizeof err) == 0,
		      "direct %d: %s", k, err);
		free(q); /* the writer holds its own copy */
		CHECK(snapw_wait(w, &r) == 1 && r.status == 0 && r.step == 60 + k &&
		      strcmp(r.shard.xxh3, d.xxh3) == 0 && r.shard.bytes == d.bytes,
		      "reuse %d: status %d %s", k, r.status, r.error);
	}

	/* An error comes back in the result, not as a crash. */
	CHECK(snapw_submit(w, "/nonexistent/snapw", 0, 1, 70, 4, 0, 4, p, m, v) == 0, "submit to a missing dir");
	CHECK(snapw_wait(w, &r) == 1 && r.status == -ENOENT && strstr(r.error, "/nonexistent/snapw") &&
	      r.step == 70, "error result: %d %s", r.status, r.error);

	/* An uncollected result blocks the next submit (no result is ever lost). */
	CHECK(snapw_submit(w, async_dir, 1, 4, 80, n, lo, 100, p, m, v) == 0, "submit 80");
	struct timespec settle = {0, 300000000}; /* a 1.2 kB write is done by then, uncollected */
	nanosleep(&settle, NULL);
	CHECK(snapw_submit(w, async_dir, 1, 4, 81, n, lo, 100, p, m, v) == -EBUSY,
	      "submit before the last result was collected");
	CHECK(snapw_wait(w, &r) == 1 && r.step == 80 && r.status == 0, "the result of 80: %s", r.error);
	CHECK(snapw_submit(w, async_dir, 1, 4, 81, n, lo, 100, p, m, v) == 0, "submit 81 once collected");
	CHECK(snapw_wait(w, &r) == 1 && r.step == 81, "the result of 81");

	/* Bad arguments. */
	CHECK(snapw_submit(w, async_dir, 0, 1, 1, 4, 0, -1, p, m, v) == -EINVAL, "negative count");
	CHECK(snapw_submit(w, async_dir, 0, 1, 1, 4, 0, 4, NULL, m, v) == -EINVAL, "NULL source");

	/* free waits for a write in flight. */
	CHECK(snapw_submit(w, async_dir, 2, 4, 90, n, lo, count, p, m, v) == 0, "submit 90");
	snapw_free(w);
	snprintf(a, sizeof a, "%s/rank-2-of-4.safetensors", async_dir);
	struct stat st;
	CHECK(stat(a, &st) == 0 && st.st_size == want.bytes, "the write in flight finished before free");
	snapw_free(NULL);
	free(p);
	free(m);
	free(v);
}

int main(void)
{
	const char *tmpdir = getenv("TMPDIR");
	snprintf(base, sizeof base, "%s/test-snapw-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	test_copy_and_match();
	if (failures == 0)
		nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	else
		fprintf(stderr, "test files kept in %s\n", base);
	printf("%s: %d failure(s)\n", failures ? "FAIL" : "ok", failures);
	return failures != 0;
}
