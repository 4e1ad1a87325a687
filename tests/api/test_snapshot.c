/*
 * test_snapshot: the snapshot format (api/snapshot.c). Shards written at one
 * world size read back bit for bit at others (elastic resume), including a
 * rank with an empty range; commit and the latest-snapshot search with its
 * fallback past a corrupt snapshot and its blindness to .tmp folders; every
 * kind of malformed shard and manifest refused with a message naming it;
 * retention; removal; a write over the file size limit (EFBIG) leaving no
 * partial file. Runs in a fresh temporary folder, removed at the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>
#include <xxhash.h>

#include "check.h"
#include "snapshot.h"

static char base[256];

/* ---- fixtures ------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t next_u32(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state >> 16);
}

/* Random bit patterns (NaNs included): the round trip must keep every bit. */
static float *random_floats(int64_t n)
{
	float *p = malloc((size_t)(n ? n : 1) * sizeof *p);
	for (int64_t i = 0; i < n; i++) {
		uint32_t u = next_u32();
		memcpy(&p[i], &u, 4);
	}
	return p;
}

typedef struct {
	int64_t n;
	float *buf[3]; /* params, adam_m, adam_v */
} flat_t;

static flat_t flat_new(int64_t n)
{
	flat_t f = {.n = n};
	for (int t = 0; t < 3; t++)
		f.buf[t] = random_floats(n);
	return f;
}

static void flat_free(flat_t *f)
{
	for (int t = 0; t < 3; t++)
		free(f->buf[t]);
}

static void shard_range(int64_t n, int world, int rank, int64_t *lo, int64_t *count)
{
	int64_t s = (n + world - 1) / world;
	*lo = rank * s;
	int64_t c = n - rank * s;
	*count = c < 0 ? 0 : (c > s ? s : c);
	int64_t lo2, count2;
	snap_shard_range(n, world, rank, &lo2, &count2);
	CHECK(lo2 == *lo && count2 == *count, "snap_shard_range(%lld, %d, %d)", (long long)n, world, rank);
}

static const char *const tnames[3] = {"params", "adam_m", "adam_v"};

/*
 * Writes a committed snapshot of f at world size W for step into job_dir
 * (created if needed), with a two-tensor table. Returns 0 on success.
 */
static int write_snapshot(const char *job_dir, int64_t step, int world, const flat_t *f)
{
	char tmp[512], fin[512], name[SNAP_DIRNAME_MAX], err[512];
	mkdir(job_dir, 0755);
	snap_step_dirname(step, name, sizeof name);
	snprintf(tmp, sizeof tmp, "%s/%s.tmp", job_dir, name);
	snprintf(fin, sizeof fin, "%s/%s", job_dir, name);
	if (mkdir(tmp, 0755) != 0)
		return -errno;
	snap_file_t *files = calloc((size_t)world, sizeof *files);
	for (int r = world - 1; r >= 0; r--) { /* any order */
		int64_t lo, count;
		snap_shard_info_t info;
		shard_range(f->n, world, r, &lo, &count);
		int rc = snap_shard_write(tmp, r, world, step, f->n, lo, count, f->buf[0] + lo,
		                          f->buf[1] + lo, f->buf[2] + lo, &info, err, sizeof err);
		CHECK(rc == 0, "shard %d: %s", r, err);
		if (rc != 0) {
			free(files);
			return rc;
		}
		files[r] = (snap_file_t){.rank = r, .lo = lo, .count = count, .bytes = info.bytes};
		strcpy(files[r].name, info.name);
		strcpy(files[r].xxh3, info.xxh3);
	}
	snap_tensor_t tensors[2] = {{.name = "a.weight", .ndim = 2, .shape = {2, 3}, .offset = 0},
	                            {.name = "b.bias", .ndim = 1, .shape = {f->n - 6}, .offset = 6}};
	snap_manifest_t m = {
		.step = step, .world_size = world, .sharding = "zero1", .n_params = f->n,
		.adam_t = step + 1,
		.data_cursor = json_pack("{s:I, s:i}", "sample", (json_int_t)step * 8, "epoch", 0),
		.rng = json_pack("{s:s}", "state", "0123456789abcdef"),
		.n_files = world, .files = files,
		.n_tensors = f->n > 6 ? 2 : 0, .tensors = tensors,
	};
	int rc = snap_commit(tmp, fin, &m, err, sizeof err);
	CHECK(rc == 0, "commit: %s", err);
	json_decref(m.data_cursor);
	json_decref(m.rng);
	free(files);
	return rc;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void rm_rf(const char *path)
{
	nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static bool exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
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
	size_t got = fread(data, 1, (size_t)len, fp);
	fclose(fp);
	data[got] = '\0';
	*ret_len = got;
	return data;
}

static void spit(const char *path, const void *data, size_t len)
{
	FILE *fp = fopen(path, "wb");
	CHECK(fp && fwrite(data, 1, len, fp) == len, "writing %s", path);
	if (fp)
		fclose(fp);
}

/* Rewrites manifest.json of dir after edit() changed its JSON. */
static void edit_manifest(const char *dir, void (*edit)(json_t *root, void *arg), void *arg)
{
	char path[512];
	snprintf(path, sizeof path, "%s/manifest.json", dir);
	json_t *root = json_load_file(path, 0, NULL);
	CHECK(root != NULL, "loading %s", path);
	edit(root, arg);
	CHECK(json_dump_file(root, path, JSON_INDENT(1)) == 0, "writing %s", path);
	json_decref(root);
}

/* Sets files[i].bytes/xxh3 of the manifest to those of the file as it is now. */
typedef struct {
	const char *dir;
	int file;
} refresh_arg_t;

static void refresh_file(json_t *root, void *varg)
{
	refresh_arg_t *a = varg;
	json_t *f = json_array_get(json_object_get(root, "files"), (size_t)a->file);
	char path[512], hex[17];
	size_t len = 0;
	snprintf(path, sizeof path, "%s/%s", a->dir, json_string_value(json_object_get(f, "name")));
	char *data = slurp(path, &len);
	snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits(data, len));
	json_object_set_new(f, "bytes", json_integer((json_int_t)len));
	json_object_set_new(f, "xxh3", json_string(hex));
	free(data);
}

/* ---- tests --------------------------------------------------------------- */

static void check_reads(snap_t *s, const flat_t *f, const char *what)
{
	char err[512];
	float *out = malloc((size_t)f->n * sizeof *out + 4);
	/* The whole buffer, then the slicings of other world sizes. */
	for (int t = 0; t < 3; t++) {
		memset(out, 0, (size_t)f->n * 4);
		int rc = snap_read_range(s, tnames[t], 0, f->n, out, err, sizeof err);
		CHECK(rc == 0 && memcmp(out, f->buf[t], (size_t)f->n * 4) == 0, "%s: whole %s: %s", what,
		      tnames[t], rc ? err : "bits differ");
		for (int w = 1; w <= 5; w++)
			for (int r = 0; r < w; r++) {
				int64_t lo, count;
				shard_range(f->n, w, r, &lo, &count);
				if (count == 0)
					lo = 0;
				rc = snap_read_range(s, tnames[t], lo, count, out, err, sizeof err);
				CHECK(rc == 0 && memcmp(out, f->buf[t] + lo, (size_t)count * 4) == 0,
				      "%s: %s as rank %d of %d: %s", what, tnames[t], r, w, rc ? err : "bits differ");
			}
	}
	/* Odd ranges, many crossing shard boundaries. */
	for (int k = 0; k < 200; k++) {
		int64_t lo = next_u32() % (uint64_t)f->n;
		int64_t count = next_u32() % (uint64_t)(f->n - lo + 1);
		int t = k % 3;
		int rc = snap_read_range(s, tnames[t], lo, count, out, err, sizeof err);
		CHECK(rc == 0 && memcmp(out, f->buf[t] + lo, (size_t)count * 4) == 0,
		      "%s: %s [%lld, +%lld): %s", what, tnames[t], (long long)lo, (long long)count,
		      rc ? err : "bits differ");
	}
	/* Out of range and bad names are refused. */
	CHECK(snap_read_range(s, "params", f->n - 1, 2, out, err, sizeof err) == -EINVAL,
	      "%s: a range past the end must be refused", what);
	CHECK(snap_read_range(s, "grads", 0, 1, out, err, sizeof err) == -EINVAL && strstr(err, "grads"),
	      "%s: an unknown tensor must be refused, got: %s", what, err);
	free(out);
}

static void test_roundtrip(int64_t n, int world)
{
	char job[512], dir[512], err[512], what[64];
	snprintf(what, sizeof what, "n=%lld W=%d", (long long)n, world);
	snprintf(job, sizeof job, "%s/rt-%lld-%d", base, (long long)n, world);
	flat_t f = flat_new(n);
	CHECK(write_snapshot(job, 12, world, &f) == 0, "%s: write", what);
	snprintf(dir, sizeof dir, "%s/step-00000012", job);
	char tmpdir[600];
	snprintf(tmpdir, sizeof tmpdir, "%s.tmp", dir);
	CHECK(exists(dir) && !exists(tmpdir), "%s: step-00000012 committed, .tmp gone", what);

	snap_t *s = NULL;
	int rc = snap_open(dir, &s, err, sizeof err);
	CHECK(rc == 0, "%s: open: %s", what, err);
	if (rc != 0)
		goto out;
	const snap_manifest_t *m = snap_manifest(s);
	CHECK(m->step == 12 && m->world_size == world && m->n_params == n && m->adam_t == 13 &&
	      strcmp(m->sharding, "zero1") == 0 && m->n_files == world,
	      "%s: manifest fields round-trip", what);
	CHECK(json_integer_value(json_object_get(m->data_cursor, "sample")) == 96 &&
	      strcmp(json_string_value(json_object_get(m->rng, "state")), "0123456789abcdef") == 0,
	      "%s: data cursor and rng round-trip", what);
	if (n > 6)
		CHECK(m->n_tensors == 2 && strcmp(m->tensors[0].name, "a.weight") == 0 &&
		      m->tensors[0].ndim == 2 && m->tensors[0].shape[1] == 3 && m->tensors[1].offset == 6,
		      "%s: tensor table round-trips", what);
	CHECK(snap_verify(s, err, sizeof err) == 0, "%s: verify: %s", what, err);
	check_reads(s, &f, what);
	snap_close(s);

	/* The shard file is real safetensors: aligned header, F32 tensors, metadata. */
	char path[600];
	size_t len;
	snprintf(path, sizeof path, "%s/rank-0-of-%d.safetensors", dir, world);
	char *data = slurp(path, &len);
	uint64_t hlen;
	memcpy(&hlen, data, 8);
	CHECK(hlen % 8 == 0 && data[8] == '{' && 8 + hlen <= len, "%s: header length %llu", what,
	      (unsigned long long)hlen);
	json_t *h = json_loadb(data + 8, hlen, 0, NULL);
	json_t *md = json_object_get(h, "__metadata__");
	CHECK(h && strcmp(json_string_value(json_object_get(md, "format")), SNAP_SHARD_FORMAT) == 0 &&
	      strcmp(json_string_value(json_object_get(md, "step")), "12") == 0 &&
	      strcmp(json_string_value(json_object_get(json_object_get(h, "adam_m"), "dtype")), "F32") == 0,
	      "%s: shard header", what);
	json_decref(h);
	free(data);
	/* Issue 22: the weights are readable by their owner only (umask 0 would
	 * not widen them: the modes are given, not left to the umask). */
	struct stat st;
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "%s: shard mode %o", what,
	      (unsigned)(st.st_mode & 0777));
	snprintf(path, sizeof path, "%s/manifest.json", dir);
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "%s: manifest mode %o", what,
	      (unsigned)(st.st_mode & 0777));
out:
	flat_free(&f);
}

static int n_skips;
static int64_t skipped_step;
static char skip_reason[512];

static void on_skip(int64_t step, const char *reason, void *userdata)
{
	n_skips++;
	skipped_step = step;
	size_t used = strlen(skip_reason);
	snprintf(skip_reason + used, sizeof skip_reason - used, "%s; ", reason);
	(*(int *)userdata)++;
}

static void flip_byte(const char *path, long off)
{
	int fd = open(path, O_RDWR);
	unsigned char b;
	CHECK(fd >= 0 && pread(fd, &b, 1, off) == 1, "reading %s", path);
	b ^= 0x40;
	CHECK(pwrite(fd, &b, 1, off) == 1, "writing %s", path);
	close(fd);
}

static void test_corrupt_fallback(void)
{
	char job[512], dir[512], path[600], err[512];
	int64_t step = -1;
	int calls = 0;
	snprintf(job, sizeof job, "%s/fallback", base);
	flat_t f = flat_new(1000);
	write_snapshot(job, 10, 3, &f);
	write_snapshot(job, 20, 3, &f);

	CHECK(snap_find_latest(job, &step, dir, sizeof dir, on_skip, &calls, err, sizeof err) == 0 &&
	      step == 20 && calls == 0, "both intact: latest is 20 (got %lld, %d skips)", (long long)step, calls);

	snprintf(path, sizeof path, "%s/step-00000020/rank-1-of-3.safetensors", job);
	flip_byte(path, 500);
	snap_t *s = NULL;
	snprintf(dir, sizeof dir, "%s/step-00000020", job);
	CHECK(snap_open(dir, &s, err, sizeof err) == 0, "open of the corrupt one still works: %s", err);
	int rc = snap_verify(s, err, sizeof err);
	CHECK(rc == -EBADMSG && strstr(err, "rank-1-of-3.safetensors") && strstr(err, "checksum"),
	      "verify names the corrupt file, got %d: %s", rc, err);
	snap_close(s);

	n_skips = 0;
	skip_reason[0] = '\0';
	rc = snap_find_latest(job, &step, dir, sizeof dir, on_skip, &calls, err, sizeof err);
	CHECK(rc == 0 && step == 10 && strstr(dir, "step-00000010"), "falls back to 10 (got %lld): %s",
	      (long long)step, err);
	CHECK(calls == 1 && skipped_step == 20 && strstr(skip_reason, "rank-1-of-3.safetensors"),
	      "the callback reported step 20 with the file (%d calls): %s", calls, skip_reason);

	/* A manifest that names another step than its folder is passed over too. */
	char d10[600], d30[600];
	snprintf(d10, sizeof d10, "%s/step-00000010", job);
	snprintf(d30, sizeof d30, "%s/step-00000030", job);
	char cmd[1400];
	snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", d10, d30);
	CHECK(system(cmd) == 0, "copying step 10 to 30");
	calls = 0;
	skip_reason[0] = '\0';
	rc = snap_find_latest(job, &step, dir, sizeof dir, on_skip, &calls, err, sizeof err);
	CHECK(rc == 0 && step == 10 && calls == 2 && strstr(skip_reason, "manifest says step 10"),
	      "a mislabelled folder is passed over (step %lld, %d calls): %s", (long long)step, calls,
	      skip_reason);

	/* All corrupt: -ENOENT, saying so. */
	snprintf(path, sizeof path, "%s/step-00000010/rank-0-of-3.safetensors", job);
	CHECK(truncate(path, 100) == 0, "truncating %s", path);
	rm_rf(d30);
	rc = snap_find_latest(job, &step, dir, sizeof dir, NULL, NULL, err, sizeof err);
	CHECK(rc == -ENOENT && strstr(err, "corrupt"), "all corrupt: %d %s", rc, err);
	flat_free(&f);
}

static void test_tmp_never_chosen(void)
{
	char job[512], dir[512], err[512], cmd[1400];
	int64_t step = -1;
	snprintf(job, sizeof job, "%s/tmpjob", base);

	int rc = snap_find_latest(job, &step, dir, sizeof dir, NULL, NULL, err, sizeof err);
	CHECK(rc == -ENOENT && strstr(err, "no snapshot folder"), "missing job folder: %d %s", rc, err);
	mkdir(job, 0755);
	rc = snap_find_latest(job, &step, dir, sizeof dir, NULL, NULL, err, sizeof err);
	CHECK(rc == -ENOENT && strstr(err, "no committed snapshot"), "empty job folder: %d %s", rc, err);

	flat_t f = flat_new(50);
	write_snapshot(job, 5, 2, &f);
	/* A complete-looking but uncommitted step 7, a deleting step 9, odd names. */
	snprintf(cmd, sizeof cmd,
	         "cd '%s' && cp -r step-00000005 step-00000007.tmp && cp -r step-00000005 step-00000009.deleting"
	         " && mkdir step-8 step-00000011x && cp -r step-00000005 step-0000000000012.tmp",
	         job);
	CHECK(system(cmd) == 0, "making decoys");
	rc = snap_find_latest(job, &step, dir, sizeof dir, NULL, NULL, err, sizeof err);
	CHECK(rc == 0 && step == 5, ".tmp/.deleting never chosen: got %lld (%s)", (long long)step, err);
	CHECK(snap_find_latest(job, &step, dir, 8, NULL, NULL, err, sizeof err) == -ENAMETOOLONG,
	      "a small ret_dir is refused");
	flat_free(&f);
}

/* ---- malformed shards ----------------------------------------------------- */

/* Writes a W=1 snapshot of n floats at dir job/step-00000001; returns its path. */
static void fresh_single(const char *name, flat_t *f, char *dir, size_t dir_len)
{
	char job[512];
	snprintf(job, sizeof job, "%s/%s", base, name);
	write_snapshot(job, 1, 1, f);
	snprintf(dir, dir_len, "%s/step-00000001", job);
}

/* Replaces the shard of a W=1 snapshot with header text + n*12 data bytes. */
static void replace_shard(const char *dir, const char *header, uint64_t claimed_len, size_t data_bytes)
{
	char path[600];
	snprintf(path, sizeof path, "%s/rank-0-of-1.safetensors", dir);
	size_t hl = strlen(header);
	size_t total = 8 + hl + data_bytes;
	char *buf = calloc(1, total);
	memcpy(buf, &claimed_len, 8);
	memcpy(buf + 8, header, hl);
	spit(path, buf, total);
	free(buf);
	refresh_arg_t a = {dir, 0};
	edit_manifest(dir, refresh_file, &a);
}

static void expect_read_error(const char *dir, const char *what, const char *needle)
{
	char err[512] = "";
	float out[8];
	snap_t *s = NULL;
	int rc = snap_open(dir, &s, err, sizeof err);
	CHECK(rc == 0, "%s: open: %s", what, err);
	if (rc)
		return;
	rc = snap_verify(s, err, sizeof err);
	CHECK(rc == 0, "%s: verify (checksums were refreshed): %s", what, err);
	rc = snap_read_range(s, "params", 0, 2, out, err, sizeof err);
	CHECK(rc == -EBADMSG && strstr(err, "rank-0-of-1.safetensors") && strstr(err, needle),
	      "%s: want -EBADMSG mentioning \"%s\", got %d: %s", what, needle, rc, err);
	snap_close(s);
}

static void test_bad_shards(void)
{
	char dir[512], err[512], path[600];
	flat_t f = flat_new(8);
	const char *md = "\"__metadata__\":{\"format\":\"ringmaster-shard-1\",\"step\":\"1\",\"rank\":\"0\","
	                 "\"world_size\":\"1\",\"n_params\":\"8\",\"lo\":\"0\",\"count\":\"8\"}";
	char header[1024];

	/* Truncated: verify names it, and read_range refuses too. */
	fresh_single("trunc", &f, dir, sizeof dir);
	snprintf(path, sizeof path, "%s/rank-0-of-1.safetensors", dir);
	CHECK(truncate(path, 60) == 0, "truncating %s", path);
	snap_t *s = NULL;
	snap_open(dir, &s, err, sizeof err);
	int rc = snap_verify(s, err, sizeof err);
	CHECK(rc == -EBADMSG && strstr(err, "rank-0-of-1.safetensors") && strstr(err, "truncated"),
	      "truncated: %d %s", rc, err);
	float out[8];
	rc = snap_read_range(s, "params", 0, 8, out, err, sizeof err);
	CHECK(rc == -EBADMSG && strstr(err, "truncated"), "truncated read: %d %s", rc, err);
	snap_close(s);

	/* Missing shard. */
	fresh_single("missing", &f, dir, sizeof dir);
	snprintf(path, sizeof path, "%s/rank-0-of-1.safetensors", dir);
	unlink(path);
	snap_open(dir, &s, err, sizeof err);
	rc = snap_verify(s, err, sizeof err);
	CHECK(rc < 0 && strstr(err, "rank-0-of-1.safetensors"), "missing shard: %d %s", rc, err);
	snap_close(s);

	/* Bad JSON. */
	fresh_single("badjson", &f, dir, sizeof dir);
	replace_shard(dir, "{\"params\": {\"dtype\": ", 24, 96);
	expect_read_error(dir, "bad JSON header", "not a JSON object");
	fresh_single("notobj", &f, dir, sizeof dir);
	replace_shard(dir, "[1,2,3]                 ", 24, 96);
	expect_read_error(dir, "array header", "not a JSON object");

	/* Header length beyond the file. */
	fresh_single("hugelen", &f, dir, sizeof dir);
	replace_shard(dir, "{}      ", (uint64_t)1 << 62, 96);
	expect_read_error(dir, "huge header length", "does not fit");

	/* Out-of-range offsets. */
	snprintf(header, sizeof header,
	         "{%s,\"params\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]},"
	         "\"adam_m\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[32,64]},"
	         "\"adam_v\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[90,122]}}", md);
	fresh_single("offsets", &f, dir, sizeof dir);
	replace_shard(dir, header, strlen(header), 96);
	expect_read_error(dir, "offsets past the data", "out of range");

	/* Negative and overlapping offsets. */
	snprintf(header, sizeof header,
	         "{%s,\"params\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[-4,28]},"
	         "\"adam_m\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[32,64]},"
	         "\"adam_v\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[64,96]}}", md);
	fresh_single("negoff", &f, dir, sizeof dir);
	replace_shard(dir, header, strlen(header), 96);
	expect_read_error(dir, "negative offset", "out of range");
	snprintf(header, sizeof header,
	         "{%s,\"params\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]},"
	         "\"adam_m\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[16,48]},"
	         "\"adam_v\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[64,96]}}", md);
	fresh_single("overlap", &f, dir, sizeof dir);
	replace_shard(dir, header, strlen(header), 96);
	expect_read_error(dir, "overlapping tensors", "overlap");

	/* Wrong dtype, wrong shape. */
	snprintf(header, sizeof header,
	         "{%s,\"params\":{\"dtype\":\"F16\",\"shape\":[8],\"data_offsets\":[0,32]},"
	         "\"adam_m\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[32,64]},"
	         "\"adam_v\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[64,96]}}", md);
	fresh_single("dtype", &f, dir, sizeof dir);
	replace_shard(dir, header, strlen(header), 96);
	expect_read_error(dir, "F16 dtype", "dtype \"F32\", not F16");
	snprintf(header, sizeof header,
	         "{%s,\"params\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,32]},"
	         "\"adam_m\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[32,64]},"
	         "\"adam_v\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[64,96]}}", md);
	fresh_single("shape", &f, dir, sizeof dir);
	replace_shard(dir, header, strlen(header), 96);
	expect_read_error(dir, "2-D shape", "shape [8]");

	/* Metadata disagreeing with the manifest; a tensor missing. */
	snprintf(header, sizeof header,
	         "{\"__metadata__\":{\"format\":\"ringmaster-shard-1\",\"step\":\"2\",\"rank\":\"0\","
	         "\"world_size\":\"1\",\"n_params\":\"8\",\"lo\":\"0\",\"count\":\"8\"},"
	         "\"params\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]},"
	         "\"adam_m\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[32,64]},"
	         "\"adam_v\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[64,96]}}");
	fresh_single("mdstep", &f, dir, sizeof dir);
	replace_shard(dir, header, strlen(header), 96);
	expect_read_error(dir, "metadata step", "__metadata__.step");
	snprintf(header, sizeof header,
	         "{%s,\"params\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]},"
	         "\"adam_m\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[32,64]},"
	         "\"grads\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[64,96]}}", md);
	fresh_single("notensor", &f, dir, sizeof dir);
	replace_shard(dir, header, strlen(header), 96);
	expect_read_error(dir, "adam_v missing", "adam_v");

	/* Trailing bytes after the data. */
	snprintf(header, sizeof header,
	         "{%s,\"params\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]},"
	         "\"adam_m\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[32,64]},"
	         "\"adam_v\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[64,96]}}", md);
	fresh_single("trailing", &f, dir, sizeof dir);
	replace_shard(dir, header, strlen(header), 100);
	expect_read_error(dir, "trailing bytes", "data section");

	/* The same header with exact data is accepted: the cases above fail for their reason. */
	fresh_single("good", &f, dir, sizeof dir);
	replace_shard(dir, header, strlen(header), 96);
	snap_open(dir, &s, err, sizeof err);
	rc = snap_read_range(s, "adam_m", 0, 8, out, err, sizeof err);
	CHECK(rc == 0, "a hand-written unpadded header is accepted: %s", err);
	snap_close(s);
	flat_free(&f);
}

/* ---- malformed manifests ------------------------------------------------- */

typedef struct {
	const char *path; /* "files.1.lo" style: key or array index at each level */
	json_t *value;    /* new value (stolen), or NULL to delete */
} set_arg_t;

static void set_field(json_t *root, void *varg)
{
	set_arg_t *a = varg;
	char buf[128];
	snprintf(buf, sizeof buf, "%s", a->path);
	json_t *node = root;
	char *save = NULL, *tok = strtok_r(buf, ".", &save), *next;
	for (; (next = strtok_r(NULL, ".", &save)) != NULL; tok = next)
		node = json_is_array(node) ? json_array_get(node, (size_t)atoi(tok)) : json_object_get(node, tok);
	if (json_is_array(node))
		json_array_set_new(node, (size_t)atoi(tok), a->value);
	else if (a->value)
		json_object_set_new(node, tok, a->value);
	else
		json_object_del(node, tok);
}

static void expect_open_error(const char *name, const char *field, json_t *value, int want,
                              const char *needle)
{
	char dir[512], err[512] = "";
	flat_t f = flat_new(30);
	char job[512];
	snprintf(job, sizeof job, "%s/m-%s", base, name);
	write_snapshot(job, 3, 3, &f);
	snprintf(dir, sizeof dir, "%s/step-00000003", job);
	set_arg_t a = {field, value};
	edit_manifest(dir, set_field, &a);
	snap_t *s = NULL;
	int rc = snap_open(dir, &s, err, sizeof err);
	CHECK(rc == want && !s && strstr(err, needle), "manifest %s: want %d mentioning \"%s\", got %d: %s",
	      name, want, needle, rc, err);
	snap_close(s);
	flat_free(&f);
}

static void test_bad_manifests(void)
{
	expect_open_error("format", "format", json_string("ringmaster-snapshot-9"), -EINVAL, "format");
	expect_open_error("nostep", "step", NULL, -EINVAL, "step");
	expect_open_error("strstep", "step", json_string("3"), -EINVAL, "step: expected an integer");
	expect_open_error("world", "world_size", json_integer(4), -EINVAL, "files");
	expect_open_error("nparams", "n_params", json_integer(31), -EINVAL, "cover");
	expect_open_error("gap", "files.1.lo", json_integer(11), -EINVAL, "a gap");
	expect_open_error("overlap", "files.1.lo", json_integer(9), -EINVAL, "an overlap");
	expect_open_error("dupe", "files.1.rank", json_integer(0), -EINVAL, "repeated");
	expect_open_error("name", "files.0.name", json_string("../../etc/passwd"), -EINVAL,
	                  "files[0].name must be \"rank-0-of-3.safetensors\"");
	expect_open_error("hex", "files.2.xxh3", json_string("ABCDEF0123456789"), -EINVAL, "xxh3");
	expect_open_error("neg", "files.2.count", json_integer(-1), -EINVAL, "files[2]");
	expect_open_error("cursor", "data_cursor", json_string("x"), -EINVAL, "data_cursor");
	expect_open_error("tshape", "tensors.0.shape", json_pack("[i,i,i]", 1, 2, 3), -EINVAL, "shape");
	expect_open_error("toff", "tensors.1.offset", json_integer(7), -EINVAL, "ends past n_params");
	expect_open_error("tover", "tensors.1.offset", json_integer(5), -EINVAL, "overlap");
	expect_open_error("tdupe", "tensors.1.name", json_string("a.weight"), -EINVAL, "repeats");

	/* Not JSON at all; no manifest. */
	char dir[512], path[600], err[512];
	flat_t f = flat_new(30);
	snprintf(dir, sizeof dir, "%s/m-garbage", base);
	write_snapshot(dir, 3, 3, &f);
	snprintf(path, sizeof path, "%s/step-00000003/manifest.json", dir);
	spit(path, "{\"format\": \"ringm", 17);
	snprintf(dir, sizeof dir, "%s/m-garbage/step-00000003", base);
	snap_t *s = NULL;
	int rc = snap_open(dir, &s, err, sizeof err);
	CHECK(rc == -EINVAL && strstr(err, "bad JSON") && strstr(err, "manifest.json"), "garbage: %d %s", rc, err);
	unlink(path);
	rc = snap_open(dir, &s, err, sizeof err);
	CHECK(rc == -ENOENT && strstr(err, "manifest.json"), "no manifest: %d %s", rc, err);
	flat_free(&f);
}

static void test_commit_errors(void)
{
	char tmp[512], fin[512], err[512];
	snprintf(tmp, sizeof tmp, "%s/commit/step-00000001.tmp", base);
	snprintf(fin, sizeof fin, "%s/commit/step-00000001", base);
	char job[512];
	snprintf(job, sizeof job, "%s/commit", base);
	mkdir(job, 0755);
	mkdir(tmp, 0755);
	float p[4] = {1, 2, 3, 4};
	snap_shard_info_t info;
	CHECK(snap_shard_write(tmp, 0, 2, 1, 6, 0, 4, p, p, p, &info, err, sizeof err) == 0, "%s", err);
	snap_file_t files[2] = {{.rank = 0, .lo = 0, .count = 4, .bytes = info.bytes},
	                        {.rank = 1, .lo = 4, .count = 2, .bytes = 100}};
	strcpy(files[0].name, info.name);
	strcpy(files[0].xxh3, info.xxh3);
	strcpy(files[1].name, "rank-1-of-2.safetensors");
	strcpy(files[1].xxh3, "0000000000000000");
	snap_manifest_t m = {.step = 1, .world_size = 2, .sharding = "ddp", .n_params = 6,
	                     .n_files = 2, .files = files};
	int rc = snap_commit(tmp, fin, &m, err, sizeof err);
	CHECK(rc == -ENOENT && strstr(err, "rank-1-of-2.safetensors"), "a missing shard: %d %s", rc, err);
	CHECK(!exists(fin), "nothing committed");
	files[1].count = 1;
	rc = snap_commit(tmp, fin, &m, err, sizeof err);
	CHECK(rc == -EINVAL && strstr(err, "cover"), "a short coverage: %d %s", rc, err);

	CHECK(snap_shard_write(tmp, 1, 2, 1, 6, 4, 2, p, p, p, &info, err, sizeof err) == 0, "%s", err);
	files[1].count = 2;
	files[1].bytes = info.bytes;
	strcpy(files[1].xxh3, info.xxh3);
	mkdir(fin, 0755);
	rc = snap_commit(tmp, fin, &m, err, sizeof err);
	CHECK(rc == -EEXIST, "committing over an existing folder: %d %s", rc, err);
	rmdir(fin);
	rc = snap_commit(tmp, fin, &m, err, sizeof err);
	CHECK(rc == 0 && exists(fin) && !exists(tmp), "commit: %d %s", rc, err);
	rc = snap_commit(tmp, fin, &m, err, sizeof err);
	CHECK(rc == 0, "a repeated commit of the same snapshot succeeds: %d %s", rc, err);
	strcpy(files[1].xxh3, "0123456789abcdef");
	rc = snap_commit(tmp, fin, &m, err, sizeof err);
	CHECK(rc == -ENOENT, "a repeated commit of different files does not: %d %s", rc, err);
	strcpy(files[1].xxh3, info.xxh3);

	/* Bad shard arguments. */
	rc = snap_shard_write(fin, 2, 2, 1, 6, 0, 1, p, p, p, &info, err, sizeof err);
	CHECK(rc == -EINVAL, "rank >= world_size refused");
	rc = snap_shard_write(fin, 0, 2, 1, 6, 4, 3, p, p, p, &info, err, sizeof err);
	CHECK(rc == -EINVAL, "a range past n_params refused");
	rc = snap_shard_write("/nonexistent/dir", 0, 1, 1, 4, 0, 4, p, p, p, &info, err, sizeof err);
	CHECK(rc == -ENOENT && strstr(err, "/nonexistent/dir"), "a missing folder: %d %s", rc, err);
}

static void test_retention(void)
{
	int64_t steps[] = {300, 100, 1000, 500, 200, 900, 700, 400, 800, 600};
	size_t n = sizeof steps / sizeof steps[0];
	bool keep[10];
	char got[256];

	snap_retention(steps, n, 2, 500, keep);
	for (size_t i = 0; i < n; i++)
		CHECK(keep[i] == (steps[i] == 500 || steps[i] == 900 || steps[i] == 1000),
		      "last 2 + every 500: step %lld kept=%d", (long long)steps[i], keep[i]);
	snap_retention(steps, n, 3, 0, keep);
	for (size_t i = 0; i < n; i++)
		CHECK(keep[i] == (steps[i] >= 800), "last 3: step %lld kept=%d", (long long)steps[i], keep[i]);
	snap_retention(steps, n, 0, 0, keep);
	for (size_t i = 0; i < n; i++)
		CHECK(keep[i] == (steps[i] == 1000), "keep_last 0 still keeps the newest: step %lld", (long long)steps[i]);
	snap_retention(steps, n, 100, 0, keep);
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += keep[i];
	CHECK(k == n, "keep_last above n keeps all (%zu)", k);
	snap_retention(steps, n, 1, 300, keep);
	got[0] = '\0';
	for (size_t i = 0; i < n; i++)
		if (keep[i])
			snprintf(got + strlen(got), sizeof got - strlen(got), "%lld ", (long long)steps[i]);
	CHECK(strcmp(got, "300 1000 900 600 ") == 0, "last 1 + every 300: %s", got);
	snap_retention(steps, 0, 1, 1, keep); /* n = 0: nothing to do, no crash */
}

static void test_remove(void)
{
	char job[512], dir[512], err[512], del[600];
	snprintf(job, sizeof job, "%s/remove", base);
	flat_t f = flat_new(20);
	write_snapshot(job, 1, 2, &f);
	write_snapshot(job, 2, 2, &f);
	snprintf(dir, sizeof dir, "%s/step-00000001/", job);
	CHECK(snap_remove(dir, err, sizeof err) == 0, "remove: %s", err);
	snprintf(dir, sizeof dir, "%s/step-00000001", job);
	snprintf(del, sizeof del, "%s.deleting", dir);
	CHECK(!exists(dir) && !exists(del), "step 1 and its .deleting are gone");

	/* An interrupted delete (a .deleting left behind) is finished. */
	snprintf(dir, sizeof dir, "%s/step-00000002", job);
	snprintf(del, sizeof del, "%s.deleting", dir);
	CHECK(rename(dir, del) == 0, "simulating a crash mid-delete");
	CHECK(snap_remove(del, err, sizeof err) == 0 && !exists(del), "finishing: %s", err);
	CHECK(snap_remove(dir, err, sizeof err) == -ENOENT, "removing a missing folder: %s", err);
	flat_free(&f);
}

/* A write over RLIMIT_FSIZE fails with EFBIG, a clear message and no partial file. */
static void test_efbig(void)
{
	char dir[512];
	snprintf(dir, sizeof dir, "%s/efbig", base);
	mkdir(dir, 0755);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		char err[512];
		struct rlimit rl = {4096, 4096};
		signal(SIGXFSZ, SIG_IGN);
		if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
			_exit(3);
		int64_t n = 10000;
		float *p = calloc((size_t)n, sizeof *p);
		snap_shard_info_t info;
		int rc = snap_shard_write(dir, 0, 1, 1, n, 0, n, p, p, p, &info, err, sizeof err);
		fprintf(stderr, "efbig child: %d %s\n", rc, err);
		free(p);
		_exit(rc == -EFBIG && strstr(err, "file too large") && strstr(err, dir) ? 0 : 1);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "EFBIG reported clearly (status %d)", status);
	char cmd[600];
	snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", dir);
	CHECK(system(cmd) == 0, "no partial file left in %s", dir);
}

static void test_export_errors(void)
{
	char job[512], dir[512], err[512], out[600];
	snprintf(job, sizeof job, "%s/export", base);
	flat_t f = flat_new(6); /* write_snapshot gives n <= 6 no tensor table */
	write_snapshot(job, 4, 2, &f);
	snprintf(dir, sizeof dir, "%s/step-00000004", job);
	snprintf(out, sizeof out, "%s/model.safetensors", base);
	snap_t *s = NULL;
	snap_open(dir, &s, err, sizeof err);
	int rc = snap_export_hf(s, out, NULL, err, sizeof err);
	CHECK(rc == -EINVAL && strstr(err, "no tensor table") && !exists(out), "no table: %d %s", rc, err);
	snap_close(s);
	flat_free(&f);

	f = flat_new(40);
	write_snapshot(job, 5, 3, &f);
	snprintf(dir, sizeof dir, "%s/step-00000005", job);
	snap_open(dir, &s, err, sizeof err);
	snap_export_info_t info;
	rc = snap_export_hf(s, out, &info, err, sizeof err);
	CHECK(rc == 0 && info.n_tensors == 2 && info.n_params == 40, "export: %d %s", rc, err);
	size_t len;
	char *data = slurp(out, &len);
	uint64_t hlen;
	memcpy(&hlen, data, 8);
	CHECK((int64_t)len == info.bytes && hlen % 8 == 0 && 8 + hlen + 160 == len &&
	      memcmp(data + 8 + hlen, f.buf[0], 160) == 0,
	      "the export holds the params in table order");
	free(data);
	struct stat est;
	CHECK(stat(out, &est) == 0 && (est.st_mode & 0777) == 0600, "the exported weights are 0600: %o",
	      (unsigned)(est.st_mode & 0777));
	snprintf(out, sizeof out, "%s/no/such/dir/model.safetensors", base);
	rc = snap_export_hf(s, out, &info, err, sizeof err);
	CHECK(rc == -ENOENT && strstr(err, "no/such/dir"), "export to a missing folder: %d %s", rc, err);
	snap_close(s);
	flat_free(&f);
}

int main(void)
{
	const char *tmpdir = getenv("TMPDIR");
	snprintf(base, sizeof base, "%s/test-snapshot-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	char name[SNAP_DIRNAME_MAX];
	CHECK(strcmp(snap_step_dirname(42, name, sizeof name), "step-00000042") == 0, "dirname: %s", name);
	CHECK(strcmp(snap_step_dirname(123456789, name, sizeof name), "step-123456789") == 0, "dirname: %s", name);

	test_roundtrip(1000, 3); /* n not divisible by W */
	test_roundtrip(4, 3);    /* rank 2 holds nothing */
	test_roundtrip(1, 3);    /* ranks 1 and 2 hold nothing; rank 2's lo is past n */
	test_roundtrip(4096, 1);
	test_roundtrip(997, 8);
	test_corrupt_fallback();
	test_tmp_never_chosen();
	test_bad_shards();
	test_bad_manifests();
	test_commit_errors();
	test_retention();
	test_remove();
	test_efbig();
	test_export_errors();

	if (failures == 0)
		rm_rf(base);
	else
		fprintf(stderr, "test files kept in %s\n", base);
	printf("%s: %d failure(s)\n", failures ? "FAIL" : "ok", failures);
	return failures != 0;
}
