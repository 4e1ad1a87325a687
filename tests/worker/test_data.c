/*
 * Unit tests for worker/data: the three file formats, globs, every data
 * error (with the file named in the message), the Feistel permutation, the
 * sample-order property (1 rank and W interleaved ranks see the same global
 * batch), the cursor, and validation batches. Files are written into a fresh
 * temporary directory. A tiny harness: a failed CHECK prints file:line and
 * the test goes on; the exit status is non-zero on any failure.
 */
#include "beneath.h"
#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int s_n_passed, s_n_failed;
static bool s_test_failed;
static const char *s_test_name;
static char s_dir[256];

#define CHECK(cond)                                                                   \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "%s:%d: %s: CHECK(%s) failed\n", __FILE__,     \
				__LINE__, s_test_name, #cond);                          \
			s_test_failed = true;                                         \
		}                                                                     \
	} while (0)

#define CHECK_CONTAINS(hay, needle)                                                   \
	do {                                                                          \
		if (!strstr((hay), (needle))) {                                       \
			fprintf(stderr, "%s:%d: %s: \"%s\" does not contain \"%s\"\n",   \
				__FILE__, __LINE__, s_test_name, (hay), (needle));     \
			s_test_failed = true;                                         \
		}                                                                     \
	} while (0)

static void s_run(const char *name, void (*fn)(void))
{
	s_test_name = name;
	s_test_failed = false;
	fn();
	if (s_test_failed) {
		s_n_failed++;
		fprintf(stderr, "FAIL %s\n", name);
	} else {
		s_n_passed++;
		fprintf(stderr, "ok   %s\n", name);
	}
}

/* s_dir/name, in a static buffer (one at a time). */
static const char *s_path(const char *name)
{
	static char buf[512];
	snprintf(buf, sizeof buf, "%s/%s", s_dir, name);
	return buf;
}

static void s_write(const char *name, const void *bytes, size_t n)
{
	FILE *f = fopen(s_path(name), "wb");
	if (!f) {
		perror(name);
		exit(1);
	}
	if (n && fwrite(bytes, 1, n, f) != n) {
		perror(name);
		exit(1);
	}
	fclose(f);
}

/* nanoGPT file of tokens first, first+1, ... (mod m). */
static void s_write_nanogpt(const char *name, size_t n, unsigned first, unsigned m)
{
	uint8_t *b = malloc(2 * n + 1);
	for (size_t i = 0; i < n; i++) {
		unsigned t = (first + (unsigned)i) % m;
		b[2 * i] = (uint8_t)t;
		b[2 * i + 1] = (uint8_t)(t >> 8);
	}
	s_write(name, b, 2 * n);
	free(b);
}

static void s_put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

/* llm.c shard; header fields and the actual token count can disagree. */
static void s_write_llmc(const char *name, uint32_t magic, uint32_t version, uint32_t count,
                         size_t n_actual, unsigned first)
{
	size_t bytes = DATA_LLMC_HEADER_BYTES + 2 * n_actual;
	uint8_t *b = calloc(1, bytes);
	s_put32(b, magic);
	s_put32(b + 4, version);
	s_put32(b + 8, count);
	for (size_t i = 0; i < n_actual; i++) {
		unsigned t = (first + (unsigned)i) % 50257;
		b[DATA_LLMC_HEADER_BYTES + 2 * i] = (uint8_t)t;
		b[DATA_LLMC_HEADER_BYTES + 2 * i + 1] = (uint8_t)(t >> 8);
	}
	s_write(name, b, bytes);
	free(b);
}

/* llm.c version-2 shard (uint32 tokens): first*1000 + i for token i. */
static void s_write_llmc32(const char *name, uint32_t count, size_t n_actual, uint32_t first)
{
	size_t bytes = DATA_LLMC_HEADER_BYTES + 4 * n_actual;
	uint8_t *b = calloc(1, bytes);
	s_put32(b, DATA_LLMC_MAGIC);
	s_put32(b + 4, DATA_LLMC_VERSION_UINT32);
	s_put32(b + 8, count);
	for (size_t i = 0; i < n_actual; i++)
		s_put32(b + DATA_LLMC_HEADER_BYTES + 4 * i, first * 1000 + (uint32_t)i);
	s_write(name, b, bytes);
	free(b);
}

static int s_open(const char *name, data_format_t fmt, int vocab, data_source_t **src, char *err)
{
	return data_source_open(s_dir, name, fmt, vocab, "data.train", src, err, 512);
}

static void test_nanogpt(void)
{
	s_write_nanogpt("a.bin", 1000, 7, 50257);
	data_source_t *src = NULL;
	char err[512] = "";
	CHECK(s_open("a.bin", DATA_FORMAT_NANOGPT, 50257, &src, err) == 0);
	if (!src)
		return;
	CHECK(data_source_num_tokens(src) == 1000);
	CHECK(data_source_num_files(src) == 1);
	int32_t out[10];
	data_source_read(src, 990, 10, out);
	for (int i = 0; i < 10; i++)
		CHECK(out[i] == 7 + 990 + i);
	data_source_free(src);
}

static void test_nanogpt_high_tokens(void)
{
	uint8_t b[4] = {0xff, 0xff, 0x34, 0x12}; /* 65535, 0x1234 little-endian */
	s_write("hi.bin", b, sizeof b);
	data_source_t *src = NULL;
	char err[512] = "";
	CHECK(s_open("hi.bin", DATA_FORMAT_NANOGPT, 65536, &src, err) == 0);
	if (!src)
		return;
	int32_t out[2];
	data_source_read(src, 0, 2, out);
	CHECK(out[0] == 65535 && out[1] == 0x1234);
	data_source_free(src);
}

static void test_llmc(void)
{
	s_write_llmc("s.bin", DATA_LLMC_MAGIC, DATA_LLMC_VERSION, 500, 500, 100);
	data_source_t *src = NULL;
	char err[512] = "";
	CHECK(s_open("s.bin", DATA_FORMAT_LLMC, 50257, &src, err) == 0);
	if (!src)
		return;
	CHECK(data_source_num_tokens(src) == 500);
	int32_t out[3];
	data_source_read(src, 0, 3, out);
	CHECK(out[0] == 100 && out[1] == 101 && out[2] == 102);
	data_source_free(src);
}

static void s_expect_fail(const char *name, data_format_t fmt, int vocab, int code, const char *needle1,
                          const char *needle2);

/* Flat uint32 and llm.c's version 2: ids above uint16, checked against
 * the vocabulary; an llmc glob may mix versions 1 and 2 (each header
 * decides its file's width). */
static void test_uint32(void)
{
	uint8_t b[12];
	s_put32(b, 128255);
	s_put32(b + 4, 70000);
	s_put32(b + 8, 0);
	s_write("u.bin", b, sizeof b);
	data_source_t *src = NULL;
	char err[512] = "";
	CHECK(s_open("u.bin", DATA_FORMAT_UINT32, 128256, &src, err) == 0);
	if (src) {
		int32_t out[3];
		CHECK(data_source_num_tokens(src) == 3);
		data_source_read(src, 0, 3, out);
		CHECK(out[0] == 128255 && out[1] == 70000 && out[2] == 0);
		data_source_free(src);
	}
	s_expect_fail("u.bin", DATA_FORMAT_UINT32, 128255, -EINVAL, "u.bin",
		      "token id at byte offset 0 (token 0) that is not below model.vocab_size (128255)");
	s_write("u6.bin", b, 6);
	s_expect_fail("u6.bin", DATA_FORMAT_UINT32, 128256, -EINVAL, "u6.bin",
		      "6 bytes is not a whole number of uint32 tokens");

	s_write_llmc32("v2_a.bin", 300, 300, 100); /* 100000.. */
	s_write_llmc("v2_b.bin", DATA_LLMC_MAGIC, DATA_LLMC_VERSION, 5, 5, 7);
	src = NULL;
	CHECK(s_open("v2_?.bin", DATA_FORMAT_LLMC, 128256, &src, err) == 0);
	if (src) {
		int32_t out[4];
		CHECK(data_source_num_tokens(src) == 305);
		data_source_read(src, 298, 4, out);
		CHECK(out[0] == 100298 && out[1] == 100299 && out[2] == 7 && out[3] == 8);
		data_source_free(src);
	}
	s_expect_fail("v2_a.bin", DATA_FORMAT_LLMC, 100200, -EINVAL, "v2_a.bin",
		      "token id at byte offset 1824 (token 200)");
	s_write_llmc32("v2_trunc.bin", 300, 299, 1);
	s_expect_fail("v2_trunc.bin", DATA_FORMAT_LLMC, 128256, -EINVAL, "v2_trunc.bin",
		      "its header says 300 tokens (2224 bytes) but the file has 2220 bytes");
}

static void test_text(void)
{
	const char *txt = "hello, world\n\xc3\xa9";
	s_write("t.txt", txt, strlen(txt));
	data_source_t *src = NULL;
	char err[512] = "";
	CHECK(s_open("t.txt", DATA_FORMAT_TEXT, 256, &src, err) == 0);
	if (!src)
		return;
	CHECK(data_source_num_tokens(src) == strlen(txt));
	int32_t out[15];
	data_source_read(src, 0, 15, out);
	CHECK(out[0] == 'h' && out[12] == '\n' && out[13] == 0xc3 && out[14] == 0xa9);
	data_source_free(src);
}

static void test_glob_sorted_and_crossing(void)
{
	/* written out of order; the glob sorts them; one empty shard in between */
	s_write_nanogpt("g_002.bin", 10, 20, 50257);
	s_write_nanogpt("g_000.bin", 10, 0, 50257);
	s_write_nanogpt("g_001.bin", 10, 10, 50257);
	s_write("g_0015.bin", "", 0);
	data_source_t *src = NULL;
	char err[512] = "";
	CHECK(s_open("g_*.bin", DATA_FORMAT_NANOGPT, 50257, &src, err) == 0);
	if (!src)
		return;
	CHECK(data_source_num_files(src) == 4);
	CHECK(data_source_num_tokens(src) == 30);
	CHECK(strstr(data_source_file(src, 0), "g_000.bin") != NULL);
	CHECK(strstr(data_source_file(src, 3), "g_002.bin") != NULL);
	int32_t out[30];
	data_source_read(src, 0, 30, out);
	for (int i = 0; i < 30; i++)
		CHECK(out[i] == i);
	data_source_read(src, 8, 15, out); /* crosses two boundaries and the empty shard */
	for (int i = 0; i < 15; i++)
		CHECK(out[i] == 8 + i);
	data_source_free(src);
}

static void test_glob_llmc(void)
{
	s_write_llmc("l_a.bin", DATA_LLMC_MAGIC, 1, 5, 5, 0);
	s_write_llmc("l_b.bin", DATA_LLMC_MAGIC, 1, 5, 5, 5);
	data_source_t *src = NULL;
	char err[512] = "";
	CHECK(s_open("l_?.bin", DATA_FORMAT_LLMC, 50257, &src, err) == 0);
	if (!src)
		return;
	int32_t out[10];
	data_source_read(src, 0, 10, out);
	for (int i = 0; i < 10; i++)
		CHECK(out[i] == i);
	data_source_free(src);
}

/* An open that must fail: its code and a message naming `needle`. */
static void s_expect_fail(const char *name, data_format_t fmt, int vocab, int code,
                          const char *needle1, const char *needle2)
{
	data_source_t *src = NULL;
	char err[512] = "";
	int rc = s_open(name, fmt, vocab, &src, err);
	CHECK(rc == code);
	CHECK(src == NULL);
	CHECK_CONTAINS(err, "data.train");
	CHECK_CONTAINS(err, needle1);
	if (needle2)
		CHECK_CONTAINS(err, needle2);
	data_source_free(src);
}

static void test_errors(void)
{
	s_expect_fail("missing.bin", DATA_FORMAT_NANOGPT, 50257, -ENOENT, "missing.bin",
		      "No such file");
	s_expect_fail("nomatch_*.bin", DATA_FORMAT_NANOGPT, 50257, -ENOENT, "nomatch_*.bin",
		      "no file matches");
	s_write("odd.bin", "abc", 3);
	s_expect_fail("odd.bin", DATA_FORMAT_NANOGPT, 50257, -EINVAL, "odd.bin", "truncated");
	s_write("tiny.bin", "abcd", 4);
	s_expect_fail("tiny.bin", DATA_FORMAT_LLMC, 50257, -EINVAL, "tiny.bin", "too short");
	s_write_llmc("magic.bin", 12345, 1, 4, 4, 0);
	s_expect_fail("magic.bin", DATA_FORMAT_LLMC, 50257, -EINVAL, "magic.bin", "not an llm.c shard");
	s_write_llmc("ver.bin", DATA_LLMC_MAGIC, 7, 4, 4, 0);
	s_expect_fail("ver.bin", DATA_FORMAT_LLMC, 50257, -EINVAL, "ver.bin",
		      "version other than 1 (uint16 tokens) and 2 (uint32 tokens)");
	s_write_llmc("trunc.bin", DATA_LLMC_MAGIC, 1, 100, 50, 0);
	s_expect_fail("trunc.bin", DATA_FORMAT_LLMC, 50257, -EINVAL, "trunc.bin", "truncated");
	s_write_llmc("long.bin", DATA_LLMC_MAGIC, 1, 10, 50, 0);
	s_expect_fail("long.bin", DATA_FORMAT_LLMC, 50257, -EINVAL, "long.bin", "1124 bytes");
	s_write_nanogpt("vocab.bin", 600, 0, 50257);
	s_expect_fail("vocab.bin", DATA_FORMAT_NANOGPT, 512, -EINVAL, "vocab.bin",
		      "token id at byte offset 1024");
	s_write_llmc("vocabl.bin", DATA_LLMC_MAGIC, 1, 600, 600, 0);
	s_expect_fail("vocabl.bin", DATA_FORMAT_LLMC, 512, -EINVAL, "vocabl.bin",
		      "byte offset 2048");
	s_write("bytes.txt", "ab\x80", 3);
	s_expect_fail("bytes.txt", DATA_FORMAT_TEXT, 128, -EINVAL, "bytes.txt", "offset 2");
	/* a glob with one bad shard names that shard */
	s_write_nanogpt("m_0.bin", 10, 0, 50257);
	s_write("m_1.bin", "abc", 3);
	s_expect_fail("m_*.bin", DATA_FORMAT_NANOGPT, 50257, -EINVAL, "m_1.bin", NULL);
	/* a directory is not a data file */
	char dir[512];
	snprintf(dir, sizeof dir, "%s/adir", s_dir);
	CHECK(mkdir(dir, 0700) == 0);
	data_source_t *src = NULL;
	char err[512] = "";
	CHECK(s_open("adir", DATA_FORMAT_TEXT, 256, &src, err) < 0);
	CHECK_CONTAINS(err, "adir");
}

#define CHECK_LACKS(hay, needle)                                                      \
	do {                                                                          \
		if (strstr((hay), (needle))) {                                        \
			fprintf(stderr, "%s:%d: '%s' contains '%s'\n", __FILE__,     \
				__LINE__, (hay), (needle));                           \
			s_test_failed = true;                                         \
		}                                                                     \
	} while (0)

/* A file opened beneath `root` by both ways (openat2 and the walk):
 * the same answer from each, the code returned. */
static int s_beneath_both(const char *root, const char *path)
{
	int fd1 = -1, fd2 = -1;
	int rc1 = beneath_open(root, path, O_RDONLY, &fd1);
	int rc2 = beneath_open_walk(root, path, O_RDONLY, &fd2);
	if (rc1 != rc2)
		fprintf(stderr, "beneath '%s': openat2 %d, walk %d\n", path, rc1, rc2);
	CHECK(rc1 == rc2);
	if (fd1 >= 0)
		close(fd1);
	if (fd2 >= 0)
		close(fd2);
	return rc1;
}

/* A data source that must be refused as leaving the root: the field and
 * the path as given in the message, nothing of the target. */
static void s_expect_escape(const char *root, const char *path, data_format_t fmt)
{
	data_source_t *src = NULL;
	char err[512] = "";
	int rc = data_source_open(root, path, fmt, 256, "data.train", &src, err, sizeof err);
	CHECK(rc == -EXDEV);
	CHECK(src == NULL);
	CHECK_CONTAINS(err, "data.train");
	CHECK_CONTAINS(err, "leaves the data root");
	CHECK_LACKS(err, "root:");
	CHECK_LACKS(err, "passwd:");   /* no match outside the root is named */
	CHECK_LACKS(err, "outdir/secret"); /* the glob match outside */
	data_source_free(src);
}

/* Issue 22: absolute paths, "..", links and globs leading out of the data
 * root are refused; links that stay inside keep working; a wrong format
 * never shows the file's first bytes. */
static void test_confinement(void)
{
	char root[600], path[700], target[700];
	snprintf(root, sizeof root, "%s/jail", s_dir);
	CHECK(mkdir(root, 0700) == 0);
	snprintf(path, sizeof path, "%s/secret.txt", s_dir);
	s_write("secret.txt", "root:x:0:0:secret\n", 18);
	snprintf(path, sizeof path, "%s/sub", root);
	CHECK(mkdir(path, 0700) == 0);
	snprintf(path, sizeof path, "%s/sub/in.txt", root);
	FILE *f = fopen(path, "w");
	for (int i = 0; f && i < 200; i++)
		fputs("abcdefgh", f);
	if (f)
		fclose(f);
	struct {
		const char *name, *target;
	} links[] = {
		{"up", "../secret.txt"},         /* a relative link climbing out */
		{"passwd", "/etc/passwd"},       /* an absolute link */
		{"proc", "/proc/self/fd/0"},     /* a magic link */
		{"outdir", ".."},                /* a folder link out, for a glob */
		{"cur", "sub"},                  /* inside: works */
		{"sub/back", "../sub/in.txt"},   /* inside through "..": works */
		{"loop", "loop"},                /* itself */
	};
	for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", root, links[i].name);
		snprintf(target, sizeof target, "%s", links[i].target);
		CHECK(symlink(target, path) == 0);
	}
	/* the module, both ways */
	CHECK(s_beneath_both(root, "sub/in.txt") == 0);
	CHECK(s_beneath_both(root, "./sub//in.txt") == 0);
	CHECK(s_beneath_both(root, "cur/in.txt") == 0);
	CHECK(s_beneath_both(root, "sub/back") == 0);
	CHECK(s_beneath_both(root, "/etc/passwd") == -EXDEV);
	CHECK(s_beneath_both(root, "../secret.txt") == -EXDEV);
	CHECK(s_beneath_both(root, "sub/../../secret.txt") == -EXDEV);
	CHECK(s_beneath_both(root, "up") == -EXDEV);
	CHECK(s_beneath_both(root, "passwd") == -EXDEV);
	CHECK(s_beneath_both(root, "outdir/secret.txt") == -EXDEV);
	CHECK(s_beneath_both(root, "loop") == -ELOOP);
	CHECK(s_beneath_both(root, "absent") == -ENOENT);
	CHECK(s_beneath_both(root, "") == -EXDEV);
	int rc = s_beneath_both(root, "proc");
	CHECK(rc == -EXDEV || rc == -ELOOP);
	CHECK(!beneath_path_ok("a/../b") && !beneath_path_ok("/a") && !beneath_path_ok("..")
	      && beneath_path_ok("a/..b") && beneath_path_ok("a/b.."));
	/* the data source */
	s_expect_escape(root, "/etc/passwd", DATA_FORMAT_TEXT);
	s_expect_escape(root, "../secret.txt", DATA_FORMAT_TEXT);
	s_expect_escape(root, "up", DATA_FORMAT_TEXT);
	s_expect_escape(root, "passwd", DATA_FORMAT_TEXT);
	s_expect_escape(root, "outdir/*.txt", DATA_FORMAT_TEXT);
	/* refused before anything is listed: no "no file matches" to tell
	 * what does or does not exist outside */
	s_expect_escape(root, "outdir/nothing-like-this-*.xyz", DATA_FORMAT_TEXT);
	s_expect_escape(root, "*/secret.txt", DATA_FORMAT_TEXT); /* a wildcard through the link */
	s_expect_escape(root, "/etc/pass*", DATA_FORMAT_TEXT);
	s_expect_escape(root, "sub/../../*.txt", DATA_FORMAT_TEXT);
	data_source_t *src = NULL;
	char err[512] = "";
	CHECK(data_source_open(root, "cur/in.txt", DATA_FORMAT_TEXT, 256, "data.train", &src, err,
			       sizeof err) == 0);
	CHECK(src && data_source_num_tokens(src) == 1600);
	data_source_free(src);
	src = NULL;
	CHECK(data_source_open(root, "cur/*.txt", DATA_FORMAT_TEXT, 256, "data.train", &src, err,
			       sizeof err) == 0);
	CHECK(src && data_source_num_files(src) == 1 &&
	      strcmp(data_source_file(src, 0), "cur/in.txt") == 0);
	data_source_free(src);
	/* "root:x:0:0" read as an llm.c header: the error says what is wrong,
	 * not what the bytes are (its magic read as a number is 1953460082) */
	snprintf(path, sizeof path, "%s/fake.bin", root);
	f = fopen(path, "w");
	for (int i = 0; f && i < 200; i++)
		fputs("root:x:0:0:root:/root:/bin/bash\n", f);
	if (f)
		fclose(f);
	src = NULL;
	CHECK(data_source_open(root, "fake.bin", DATA_FORMAT_LLMC, 50257, "data.train", &src, err,
			       sizeof err) == -EINVAL);
	CHECK_CONTAINS(err, "not an llm.c shard");
	CHECK_LACKS(err, "1953460082");
	CHECK_LACKS(err, "root:");
	/* a root folder whose name has glob characters is taken literally */
	char odd[700];
	snprintf(odd, sizeof odd, "%s/odd[1]", s_dir);
	CHECK(mkdir(odd, 0700) == 0);
	snprintf(path, sizeof path, "%s/odd[1]/t.txt", s_dir);
	f = fopen(path, "w");
	if (f) {
		fputs("hello world", f);
		fclose(f);
	}
	src = NULL;
	CHECK(data_source_open(odd, "*.txt", DATA_FORMAT_TEXT, 256, "data.train", &src, err,
			       sizeof err) == 0);
	CHECK(src && strcmp(data_source_file(src, 0), "t.txt") == 0);
	data_source_free(src);
}

static void test_short_data(void)
{
	s_write_nanogpt("short.bin", 16, 0, 50257);
	data_source_t *src = NULL;
	char err[512] = "";
	CHECK(s_open("short.bin", DATA_FORMAT_NANOGPT, 50257, &src, err) == 0);
	if (!src)
		return;
	data_sampler_t s;
	CHECK(data_sampler_init(&s, src, 16, 1, "data.train", err, sizeof err) == -EINVAL);
	CHECK_CONTAINS(err, "model.seq_len (16) is longer than the data");
	CHECK_CONTAINS(err, "data.train has 16 tokens");
	CHECK(data_sampler_init(&s, src, 15, 1, "data.train", err, sizeof err) == 0);
	CHECK(s.n_windows == 1);
	data_source_free(src);
}

static void test_permute_bijection(void)
{
	static const uint64_t sizes[] = {1, 2, 3, 4, 5, 15, 16, 17, 100, 1000, 4097};
	for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
		uint64_t n = sizes[si];
		uint8_t *seen = calloc(n, 1);
		size_t fixed = 0;
		for (uint64_t i = 0; i < n; i++) {
			uint64_t p = data_permute(i, n, 42);
			CHECK(p < n);
			if (p < n) {
				CHECK(!seen[p]);
				seen[p] = 1;
			}
			fixed += p == i;
		}
		if (n >= 100)
			CHECK(fixed < n / 10); /* it actually shuffles */
		free(seen);
	}
	/* different keys give different orders */
	int same = 0;
	for (uint64_t i = 0; i < 1000; i++)
		same += data_permute(i, 1000, 1) == data_permute(i, 1000, 2);
	CHECK(same < 50);
}

static void test_epochs(void)
{
	s_write_nanogpt("ep.bin", 8 * 50 + 1, 0, 50257);
	data_source_t *src = NULL;
	char err[512] = "";
	CHECK(s_open("ep.bin", DATA_FORMAT_NANOGPT, 50257, &src, err) == 0);
	if (!src)
		return;
	data_sampler_t s;
	CHECK(data_sampler_init(&s, src, 8, 7, "data.train", err, sizeof err) == 0);
	CHECK(s.n_windows == 50);
	/* each epoch visits every window once, in a different order */
	int differ = 0;
	for (uint64_t e = 0; e < 3; e++) {
		uint8_t seen[50] = {0};
		for (uint64_t i = 0; i < 50; i++) {
			uint64_t w = data_sampler_window(&s, e * 50 + i);
			CHECK(w < 50 && !seen[w]);
			if (w < 50)
				seen[w] = 1;
			if (e > 0)
				differ += w != data_sampler_window(&s, i);
		}
	}
	CHECK(differ > 50);
	/* a sample is the window's tokens; targets shifted by one */
	int32_t in[8], tg[8];
	data_sampler_get(&s, 3, in, tg);
	uint64_t w = data_sampler_window(&s, 3);
	for (int t = 0; t < 8; t++) {
		CHECK(in[t] == (int32_t)(w * 8) + t);
		CHECK(tg[t] == in[t] + 1);
	}
	data_source_free(src);
}

/*
 * The property the distributed loop relies on: for each global batch, the
 * union of what W ranks get (each with B rows and A micro-steps) equals, row
 * for row by global sample index, what 1 rank gets with B*W rows; and the
 * same samples come out in every layout.
 */
static void test_ranks_same_global_batch(void)
{
	s_write_nanogpt("ranks.bin", 4 * 997 + 1, 0, 50257);
	data_source_t *src = NULL;
	char err[512] = "";
	CHECK(s_open("ranks.bin", DATA_FORMAT_NANOGPT, 50257, &src, err) == 0);
	if (!src)
		return;
	data_sampler_t s;
	CHECK(data_sampler_init(&s, src, 4, 99, "data.train", err, sizeof err) == 0);
	enum { B = 2, A = 3, T = 4 };
	for (int W = 2; W <= 4; W++) {
		/* one rank: B*W rows, A micro-steps */
		data_layout_t one = {.batch_size = B * W, .grad_accum = A, .world_size = 1, .rank = 0};
		data_loader_t l1;
		data_loader_init(&l1, &s, &one);
		size_t gb = (size_t)(B * A * W);
		int32_t *ref_in = malloc(gb * T * sizeof(int32_t));
		int32_t *ref_tg = malloc(gb * T * sizeof(int32_t));
		int32_t *got_in = malloc(gb * T * sizeof(int32_t));
		int32_t *got_tg = malloc(gb * T * sizeof(int32_t));
		int32_t *mb_in = malloc((size_t)B * W * T * sizeof(int32_t));
		int32_t *mb_tg = malloc((size_t)B * W * T * sizeof(int32_t));
		data_loader_t lr[4];
		for (int r = 0; r < W; r++) {
			data_layout_t lay = {.batch_size = B, .grad_accum = A, .world_size = W, .rank = r};
			data_loader_init(&lr[r], &s, &lay);
		}
		for (int step = 0; step < 300; step++) { /* several epochs */
			/* 1 rank: global sample j of the batch is at (k, b) with j = k*B*W + b */
			for (int k = 0; k < A; k++) {
				data_loader_micro_batch(&l1, k, mb_in, mb_tg);
				memcpy(ref_in + (size_t)k * B * W * T, mb_in, (size_t)B * W * T * sizeof(int32_t));
				memcpy(ref_tg + (size_t)k * B * W * T, mb_tg, (size_t)B * W * T * sizeof(int32_t));
			}
			/* W ranks: rank r's (k, b) is global sample j = (k*B + b)*W + r */
			for (int r = 0; r < W; r++)
				for (int k = 0; k < A; k++) {
					data_loader_micro_batch(&lr[r], k, mb_in, mb_tg);
					for (int b = 0; b < B; b++) {
						size_t j = (size_t)((k * B + b) * W + r);
						memcpy(got_in + j * T, mb_in + (size_t)b * T, T * sizeof(int32_t));
						memcpy(got_tg + j * T, mb_tg + (size_t)b * T, T * sizeof(int32_t));
					}
				}
			CHECK(memcmp(ref_in, got_in, gb * T * sizeof(int32_t)) == 0);
			CHECK(memcmp(ref_tg, got_tg, gb * T * sizeof(int32_t)) == 0);
			/* and that equals the samples g*GB .. g*GB+GB-1 */
			for (size_t j = 0; j < gb; j++) {
				int32_t in[T], tg[T];
				data_sampler_get(&s, (uint64_t)step * gb + j, in, tg);
				CHECK(memcmp(in, ref_in + j * T, sizeof in) == 0);
			}
			data_loader_advance(&l1);
			for (int r = 0; r < W; r++)
				data_loader_advance(&lr[r]);
		}
		CHECK(data_loader_cursor(&l1) == 300 * gb);
		free(ref_in);
		free(ref_tg);
		free(got_in);
		free(got_tg);
		free(mb_in);
		free(mb_tg);
	}
	data_source_free(src);
}

static void test_cursor_resume(void)
{
	s_write_nanogpt("cur.bin", 1001, 0, 50257);
	data_source_t *src = NULL;
	char err[512] = "";
	CHECK(s_open("cur.bin", DATA_FORMAT_NANOGPT, 50257, &src, err) == 0);
	if (!src)
		return;
	data_sampler_t s;
	CHECK(data_sampler_init(&s, src, 10, 5, "data.train", err, sizeof err) == 0);
	data_layout_t lay = {.batch_size = 4, .grad_accum = 1, .world_size = 1, .rank = 0};
	data_loader_t a, b;
	data_loader_init(&a, &s, &lay);
	for (int i = 0; i < 37; i++)
		data_loader_advance(&a);
	uint64_t saved = data_loader_cursor(&a);
	CHECK(saved == 37 * 4);
	data_loader_init(&b, &s, &lay);
	data_loader_seek(&b, saved);
	int32_t ai[40], at[40], bi[40], bt[40];
	data_loader_micro_batch(&a, 0, ai, at);
	data_loader_micro_batch(&b, 0, bi, bt);
	CHECK(memcmp(ai, bi, sizeof ai) == 0 && memcmp(at, bt, sizeof at) == 0);

	/* An elastic resume: 37 global batches of 4 taken at world size 1, then
	 * 2 ranks of batch 3 (global batch 6, the cursor not a multiple of it)
	 * take samples 148, 149, ... exactly: rank r's row b of micro-step 0 is
	 * sample 148 + 2 b + r, no sample repeated or skipped. */
	for (int r = 0; r < 2; r++) {
		data_layout_t two = {.batch_size = 3, .grad_accum = 1, .world_size = 2, .rank = r};
		data_loader_t c;
		data_loader_init(&c, &s, &two);
		data_loader_seek(&c, saved);
		int32_t ci[30], ct[30], want_i[10], want_t[10];
		data_loader_micro_batch(&c, 0, ci, ct);
		for (int row = 0; row < 3; row++) {
			data_sampler_get(&s, saved + 2 * (uint64_t)row + (uint64_t)r, want_i, want_t);
			CHECK(memcmp(ci + 10 * row, want_i, sizeof want_i) == 0 &&
			      memcmp(ct + 10 * row, want_t, sizeof want_t) == 0);
		}
	}
	data_source_free(src);
}

static void test_val_batches(void)
{
	s_write_nanogpt("val.bin", 10 * 100 + 1, 0, 50257);
	data_source_t *src = NULL;
	char err[512] = "";
	CHECK(s_open("val.bin", DATA_FORMAT_NANOGPT, 50257, &src, err) == 0);
	if (!src)
		return;
	data_sampler_t s;
	CHECK(data_sampler_init(&s, src, 10, 1, "data.val", err, sizeof err) == 0);
	int32_t in[4 * 10], tg[4 * 10];
	/* 5 batches of 4 = 20 rows over 100 windows: windows 0, 5, 10, ... */
	data_val_batch(&s, 5, 4, 1, in, tg);
	CHECK(in[0] == 200 && in[10] == 250 && in[20] == 300 && in[30] == 350);
	CHECK(tg[9] == 210);
	/* more rows than windows: wraps */
	data_sampler_t s2;
	CHECK(data_sampler_init(&s2, src, 400, 1, "data.val", err, sizeof err) == 0);
	CHECK(s2.n_windows == 2);
	int32_t in2[4 * 400], tg2[4 * 400];
	data_val_batch(&s2, 1, 4, 0, in2, tg2);
	CHECK(in2[0] == 0 && in2[400] == 400 && in2[800] == 0 && in2[1200] == 400);
	data_source_free(src);
}

static void s_rm_rf(const char *dir)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(s_dir, sizeof s_dir, "%s/test_data.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(s_dir)) {
		perror("mkdtemp");
		return 1;
	}
	s_run("nanogpt", test_nanogpt);
	s_run("nanogpt_high_tokens", test_nanogpt_high_tokens);
	s_run("llmc", test_llmc);
	s_run("uint32", test_uint32);
	s_run("text", test_text);
	s_run("glob_sorted_and_crossing", test_glob_sorted_and_crossing);
	s_run("glob_llmc", test_glob_llmc);
	s_run("errors", test_errors);
	s_run("confinement", test_confinement);
	s_run("short_data", test_short_data);
	s_run("permute_bijection", test_permute_bijection);
	s_run("epochs", test_epochs);
	s_run("ranks_same_global_batch", test_ranks_same_global_batch);
	s_run("cursor_resume", test_cursor_resume);
	s_run("val_batches", test_val_batches);
	s_rm_rf(s_dir);
	fprintf(stderr, "%d passed, %d failed\n", s_n_passed, s_n_failed);
	return s_n_failed ? 1 : 0;
}
