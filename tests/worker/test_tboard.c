/*
 * test_tboard: worker/tboard.c's pure parts and one real file: CRC-32C
 * against the published check vectors (the CRC catalogue's "123456789" ->
 * 0xe3069283 and RFC 3720 B.4's 32-byte vectors), the TFRecord mask, an
 * event's bytes against ones worked out by hand from the protobuf wire
 * rules, the folder rule (tboard_job_dir), and a file written through the
 * writer thread read back record by record with its CRCs.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

#include "check.h"
#include "tboard.h"

static void test_crc(void)
{
	CHECK(tboard_crc32c("123456789", 9) == 0xe3069283u, "check value %08x", tboard_crc32c("123456789", 9));
	CHECK(tboard_crc32c("", 0) == 0, "empty input");
	uint8_t b[32];
	memset(b, 0, sizeof b);
	CHECK(tboard_crc32c(b, 32) == 0x8a9136aau, "32 zeros: %08x", tboard_crc32c(b, 32));
	memset(b, 0xff, sizeof b);
	CHECK(tboard_crc32c(b, 32) == 0x62a8ab43u, "32 0xff: %08x", tboard_crc32c(b, 32));
	for (int i = 0; i < 32; i++)
		b[i] = (uint8_t)i;
	CHECK(tboard_crc32c(b, 32) == 0x46dd794eu, "0..31: %08x", tboard_crc32c(b, 32));
	for (int i = 0; i < 32; i++)
		b[i] = (uint8_t)(31 - i);
	CHECK(tboard_crc32c(b, 32) == 0x113fdb5cu, "31..0: %08x", tboard_crc32c(b, 32));
	/* the mask: rotate right by 15, add the constant (mod 2^32) */
	CHECK(tboard_mask(0) == 0xa282ead8u, "mask(0)");
	CHECK(tboard_mask(0x00008000u) == 0xa282ead9u, "mask(1 << 15) rotates to 1");
	CHECK(tboard_mask(0xffffffffu) == 0xa282ead7u, "mask wraps");
}

static void test_encode(void)
{
	uint8_t buf[256];
	/* file_version event: 09 <wall_time f64 LE> 1a 0d "brain.Event:2" */
	size_t n = tboard_encode_event(buf, sizeof buf, 1.5, 0, TBOARD_FILE_VERSION, NULL, 0);
	const uint8_t want_fv[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x1a, 13, 'b', 'r', 'a', 'i', 'n', '.',
	                           'E', 'v', 'e', 'n', 't', ':', '2'};
	CHECK(n == sizeof want_fv && memcmp(buf, want_fv, n) == 0, "file_version event (%zu bytes)", n);
	/* step 300 (varint ac 02), one value {tag "loss" (0a 04 ...), simple_value 2.0f (15 00 00 00 40)}:
	 * Value is 11 bytes, Summary 0a 0b + 11 = 13 bytes, Event field 5: 2a 0d */
	tboard_scalar_t v[] = {{"loss", 2.0}};
	n = tboard_encode_event(buf, sizeof buf, 0.0, 300, NULL, v, 1);
	const uint8_t want_ev[] = {0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0xac, 0x02, 0x2a, 0x0d, 0x0a, 0x0b,
	                           0x0a, 0x04, 'l', 'o', 's', 's', 0x15, 0, 0, 0, 0x40};
	CHECK(n == sizeof want_ev && memcmp(buf, want_ev, n) == 0, "scalar event (%zu bytes)", n);
	CHECK(tboard_encode_event(buf, 10, 0.0, 1, NULL, v, 1) == 0, "too small a buffer");
	tboard_scalar_t bad[] = {{"", 1.0}};
	CHECK(tboard_encode_event(buf, sizeof buf, 0.0, 1, NULL, bad, 1) == 0, "an empty tag");
	/* framing: length 3, then the payload between two masked CRCs */
	uint8_t out[3 + 16];
	tboard_frame((const uint8_t *)"abc", 3, out);
	uint32_t lc, dc;
	memcpy(&lc, out + 8, 4);
	memcpy(&dc, out + 15, 4);
	CHECK(out[0] == 3 && out[1] == 0 && out[7] == 0, "length");
	CHECK(lc == tboard_mask(tboard_crc32c(out, 8)) && dc == tboard_mask(tboard_crc32c("abc", 3)), "CRCs");
	CHECK(memcmp(out + 12, "abc", 3) == 0, "payload");
}

static void test_job_dir(void)
{
	char out[256];
	CHECK(tboard_job_dir("runs", "/tb", "/ck", "j1", out, sizeof out) == 0 && strcmp(out, "/tb/runs/j1") == 0,
	      "spec dir beneath the TensorBoard root: %s", out);
	CHECK(tboard_job_dir(NULL, "/tb", "/ck", "j1", out, sizeof out) == 0 && strcmp(out, "/tb/j1") == 0,
	      "the agent-wide default: %s", out);
	CHECK(tboard_job_dir("runs", NULL, "/ck", "j1", out, sizeof out) == 0 && strcmp(out, "/ck/runs/j1") == 0,
	      "beneath the checkpoint root: %s", out);
	CHECK(tboard_job_dir(NULL, NULL, "/ck", "j1", out, sizeof out) == -ENOENT, "no section, no root");
	CHECK(tboard_job_dir("runs", NULL, NULL, "j1", out, sizeof out) == -ENOENT, "a section, no root");
	CHECK(tboard_job_dir("../x", "/tb", NULL, "j1", out, sizeof out) == -EINVAL, "'..'");
	CHECK(tboard_job_dir("runs", "/tb", NULL, "a/b", out, sizeof out) == -EINVAL, "a job id with '/'");
	CHECK(tboard_job_dir("runs", "/tb", NULL, "..", out, sizeof out) == -EINVAL, "a job id '..'");
	CHECK(tboard_job_dir("runs", "/tb", NULL, "j1", out, 8) == -ENAMETOOLONG, "too long");
}

static uint64_t s_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static void test_file(void)
{
	char root[] = "/tmp/tboard-test-XXXXXX", dir[128], path[512], err[512];
	CHECK(mkdtemp(root) != NULL, "mkdtemp");
	snprintf(dir, sizeof dir, "%s/a/b", root);
	tboard_t *tb = tboard_open(dir, path, sizeof path, err, sizeof err);
	CHECK(tb != NULL, "open: %s", err);
	if (!tb)
		return;
	CHECK(strstr(path, "/events.out.tfevents.") != NULL, "file name %s", path);
	for (int step = 1; step <= 100; step++) {
		tboard_scalar_t v[] = {{"loss", 5.0 / step}, {"val_loss", step % 10 ? NAN : 1.0}};
		tboard_scalars(tb, step, 1e9 + step, v, 2);
	}
	CHECK(tboard_close(tb, err, sizeof err) == 0 && !err[0], "dropped events: %s", err);
	FILE *f = fopen(path, "rb");
	CHECK(f != NULL, "reopen %s", path);
	if (!f)
		return;
	static uint8_t blob[1 << 16];
	size_t n = fread(blob, 1, sizeof blob, f);
	fclose(f);
	size_t off = 0;
	int records = 0, with_val = 0;
	while (off + 16 <= n) {
		uint64_t len = s_le64(blob + off);
		uint32_t lc, dc;
		memcpy(&lc, blob + off + 8, 4);
		CHECK(lc == tboard_mask(tboard_crc32c(blob + off, 8)), "record %d's length CRC", records);
		if (off + 16 + len > n)
			break;
		memcpy(&dc, blob + off + 12 + len, 4);
		CHECK(dc == tboard_mask(tboard_crc32c(blob + off + 12, len)), "record %d's data CRC", records);
		with_val += memmem(blob + off + 12, len, "val_loss", 8) != NULL;
		off += 16 + len;
		records++;
	}
	CHECK(off == n, "the file ends on a record (%zu of %zu bytes)", off, n);
	CHECK(records == 101, "records %d: the file_version and 100 steps", records);
	CHECK(with_val == 10, "val_loss (finite only) in %d events", with_val);
	CHECK(memmem(blob, n, TBOARD_FILE_VERSION, strlen(TBOARD_FILE_VERSION)) == blob + 12 + 11,
	      "file_version in the first record");
	unlink(path);
	snprintf(path, sizeof path, "%s/a/b", root);
	rmdir(path);
	snprintf(path, sizeof path, "%s/a", root);
	rmdir(path);
	rmdir(root);
	/* a folder that cannot be made: NULL and one line */
	CHECK(tboard_open("/proc/no/such", path, sizeof path, err, sizeof err) == NULL && strstr(err, "/proc/no"),
	      "an impossible folder: %s", err);
	CHECK(tboard_close(NULL, err, sizeof err) == 0, "close(NULL)");
}

int main(void)
{
	test_crc();
	test_encode();
	test_job_dir();
	test_file();
	if (failures == 0)
		printf("ok\n");
	return failures != 0;
}
