/*
 * snapshot_internal: what the snapshot format's source files share, and
 * nothing outside api/snapshot*.c includes: the format's limits, the snap_t
 * layout, the manifest functions of snapshot_manifest.c, and the small
 * helpers every part uses (one-line errors in `err`, paths, hex digests,
 * integers). The helpers are static inline so that each part keeps the
 * short names it had when the format was one file.
 *
 * The parts: snapshot.c writes shards (the safetensors writer st_write()),
 * commits, finds, retains, removes and exports snapshots;
 * snapshot_manifest.c checks and converts manifest.json; snapshot_read.c
 * opens, verifies and reads committed snapshots.
 */
#ifndef RINGMASTER_API_SNAPSHOT_INTERNAL_H
#define RINGMASTER_API_SNAPSHOT_INTERNAL_H

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "snapshot.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "snapshot files store little-endian floats; a big-endian host needs byte swapping here"
#endif

#define MAX_HEADER_BYTES (100 << 20)   /* the safetensors reference implementation's limit */
#define MAX_MANIFEST_BYTES (64 << 20)
#define MAX_N_PARAMS ((int64_t)1 << 50) /* keeps every byte count far from overflow */
#define MAX_WORLD_SIZE (1 << 20)
#define IO_CHUNK_BYTES ((size_t)4 << 20)

static const char *const shard_tensors[3] = {"params", "adam_m", "adam_v"};

struct snap {
	char *dir;
	snap_manifest_t m;
	struct {
		bool checked;        /* header validated against the manifest */
		int64_t data_off[3]; /* file offset of params, adam_m, adam_v */
	} *fs;                   /* (n_files) */
};

__attribute__((format(printf, 4, 5)))
static inline int fail(char *err, size_t err_len, int code, const char *fmt, ...)
{
	if (err && err_len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, err_len, fmt, ap);
		va_end(ap);
	}
	return code;
}

/* One line for a failed system call on path, with advice for the usual ones. */
static inline int fail_errno(char *err, size_t err_len, int e, const char *what, const char *path)
{
	switch (e) {
	case ENOSPC:
		return fail(err, err_len, -e,
		            "disk full %s %s: free space on that file system (or keep fewer snapshots) and retry",
		            what, path);
	case EDQUOT:
		return fail(err, err_len, -e, "disk quota exceeded %s %s: raise the quota or free space",
		            what, path);
	case EFBIG:
		return fail(err, err_len, -e,
		            "file too large %s %s: over the file size limit (ulimit -f) or the file system's maximum",
		            what, path);
	default:
		return fail(err, err_len, -e, "%s %s: %s", what, path, strerror(e));
	}
}

static inline void hex64(uint64_t h, char out[SNAP_XXH3_HEX_LEN + 1])
{
	snprintf(out, SNAP_XXH3_HEX_LEN + 1, "%016" PRIx64, h);
}

static inline bool is_hex64(const char *s)
{
	if (strlen(s) != SNAP_XXH3_HEX_LEN)
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

/* Joins dir and name into a new string ("dir/name"); NULL when out of memory. */
static inline char *path_join(const char *dir, const char *name)
{
	char *p = NULL;
	if (asprintf(&p, "%s/%s", dir, name) < 0)
		return NULL;
	return p;
}

static inline bool parse_i64(const char *s, int64_t *ret)
{
	if (!s || !*s || (*s != '-' && (*s < '0' || *s > '9')))
		return false;
	errno = 0;
	char *end = NULL;
	long long v = strtoll(s, &end, 10);
	if (errno || *end)
		return false;
	*ret = v;
	return true;
}

static inline int cmp_i64(int64_t a, int64_t b)
{
	return (a > b) - (a < b);
}

static inline int64_t tensor_numel(const snap_tensor_t *t)
{
	return t->ndim == 1 ? t->shape[0] : t->shape[0] * t->shape[1];
}

/*
 * The manifest (snapshot_manifest.c). snap_manifest_check() checks m against
 * every rule of the format, one line in err naming the field (`where` starts
 * it). snap_manifest_to_json() returns a new object, or NULL when out of
 * memory. snap_manifest_from_json() fills m from root, m owning what it
 * points to, then checks it; the caller clears m on failure too.
 * snap_manifest_clear() frees what m owns and zeroes it.
 */
int snap_manifest_check(const snap_manifest_t *m, const char *where, char *err, size_t err_len);
json_t *snap_manifest_to_json(const snap_manifest_t *m);
int snap_manifest_from_json(json_t *root, const char *where, snap_manifest_t *m, char *err,
                            size_t err_len);
void snap_manifest_clear(snap_manifest_t *m);

#endif
