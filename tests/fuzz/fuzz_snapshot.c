/*
 * libFuzzer harness for the snapshot reader (api/snapshot.c): the manifest
 * parser and the safetensors header parser behind snap_open, snap_verify
 * and snap_read_range. The input is one snapshot folder packed as: a 4-byte
 * little-endian length N, N bytes of manifest.json, and the rest as the file
 * "rank-0-of-1.safetensors" (the one file a 1-rank snapshot has; a manifest
 * naming others makes snap_open refuse it, which is fine). The folder is
 * written under $TMPDIR (or /tmp) and opened. Whatever it holds, the reader
 * must refuse it with a message or accept it; an accepted snapshot must
 * verify or refuse with a message, and reading any of its tensors' ranges
 * must stay inside the file (AddressSanitizer) and succeed or refuse with a
 * message. Anything else aborts.
 */
#include "snapshot.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_READ_FLOATS 4096

static char s_dir[4096];

static int s_write(const char *name, const uint8_t *p, size_t n)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", s_dir, name);
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t w = n ? fwrite(p, 1, n, f) : 0;
	return fclose(f) == 0 && w == n ? 0 : -1;
}

/* A fresh folder for this process (replays and libFuzzer run one input at a
 * time in a process). */
static int s_setup(void)
{
	if (s_dir[0])
		return 0;
	const char *tmp = getenv("TMPDIR");
	snprintf(s_dir, sizeof s_dir, "%s/rm-fuzz-snapshot-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
	if (!mkdtemp(s_dir)) {
		perror("mkdtemp");
		abort();
	}
	return 0;
}

static void s_check_refusal(int rc, const char *err)
{
	if (rc >= 0)
		return;
	if (err[0] == '\0')
		abort(); /* a refusal without a message */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	s_setup();
	if (size < 4)
		return 0;
	size_t n = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 | (size_t)data[3] << 24;
	if (n > size - 4)
		n = size - 4;
	if (s_write("manifest.json", data + 4, n) < 0 ||
	    s_write("rank-0-of-1.safetensors", data + 4 + n, size - 4 - n) < 0) {
		perror(s_dir);
		abort();
	}
	char err[1024] = "";
	snap_t *s = NULL;
	int rc = snap_open(s_dir, &s, err, sizeof err);
	s_check_refusal(rc, err);
	if (rc < 0) {
		if (s)
			abort(); /* refused, yet a snapshot came back */
		return 0;
	}
	const snap_manifest_t *m = snap_manifest(s);
	if (!m || m->n_files != m->world_size)
		abort();
	err[0] = '\0';
	s_check_refusal(snap_verify(s, err, sizeof err), err);
	/* every buffer and every tensor, at the edges and past them */
	static float out[MAX_READ_FLOATS];
	const char *bufs[] = {"params", "adam_m", "adam_v", "nonesuch"};
	for (size_t b = 0; b < sizeof bufs / sizeof bufs[0]; b++) {
		int64_t los[] = {0, m->n_params - 1, m->n_params, -1};
		for (size_t k = 0; k < sizeof los / sizeof los[0]; k++) {
			int64_t count = m->n_params - los[k];
			if (count > MAX_READ_FLOATS)
				count = MAX_READ_FLOATS;
			if (count < 1)
				count = 1;
			err[0] = '\0';
			s_check_refusal(snap_read_range(s, bufs[b], los[k], count, out, err, sizeof err), err);
		}
	}
	snap_close(s);
	return 0;
}
