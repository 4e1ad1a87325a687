/*
 * snapshot: writing, committing, validating, reading and exporting the
 * on-disk snapshot format described in snapshot.h and docs/snapshots.md.
 *
 * Every file is written the same way: to a hidden temporary name in the
 * destination folder, fsync'ed, renamed into place, and the folder fsync'ed,
 * so a crash leaves either the old state or the new one. Every byte read
 * from disk is treated as hostile: lengths and offsets are checked before
 * use, and a bad file is refused with a message naming it, never a crash.
 * The safetensors parts (shards and exports) are written by one function,
 * st_write(), and shard headers are read back by shard_check_header().
 */
#include "snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

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

/* ---- small helpers ---------------------------------------------------- */

__attribute__((format(printf, 4, 5)))
static int fail(char *err, size_t err_len, int code, const char *fmt, ...)
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
static int fail_errno(char *err, size_t err_len, int e, const char *what, const char *path)
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

static void hex64(uint64_t h, char out[SNAP_XXH3_HEX_LEN + 1])
{
	snprintf(out, SNAP_XXH3_HEX_LEN + 1, "%016" PRIx64, h);
}

static bool is_hex64(const char *s)
{
	if (strlen(s) != SNAP_XXH3_HEX_LEN)
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

/* Joins dir and name into a new string ("dir/name"); NULL when out of memory. */
static char *path_join(const char *dir, const char *name)
{
	char *p = NULL;
	if (asprintf(&p, "%s/%s", dir, name) < 0)
		return NULL;
	return p;
}

/* The folder part of path ("." when it has none), as a new string. */
static char *path_parent(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return strdup(".");
	if (slash == path)
		return strdup("/");
	return strndup(path, (size_t)(slash - path));
}

static int fsync_dir(const char *dir, char *err, size_t err_len)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return fail_errno(err, err_len, errno, "opening folder", dir);
	int rc = 0;
	if (fsync(fd) != 0 && errno != EINVAL)
		rc = fail_errno(err, err_len, errno, "syncing folder", dir);
	close(fd);
	return rc;
}

static int write_all(int fd, const void *buf, size_t n, XXH3_state_t *hash)
{
	const char *p = buf;
	if (hash && n)
		XXH3_64bits_update(hash, buf, n);
	while (n > 0) {
		size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
		ssize_t w = write(fd, p, chunk);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (w == 0)
			return -EIO;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Reads exactly n bytes at off; -EBADMSG when the file ends first. */
static int pread_all(int fd, void *buf, size_t n, int64_t off)
{
	char *p = buf;
	while (n > 0) {
		size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
		ssize_t r = pread(fd, p, chunk, (off_t)off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EBADMSG;
		p += r;
		n -= (size_t)r;
		off += r;
	}
	return 0;
}

static bool parse_i64(const char *s, int64_t *ret)
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

void snap_shard_range(int64_t n_params, int world_size, int rank, int64_t *ret_lo,
                      int64_t *ret_count)
{
	int64_t s = world_size > 0 ? (n_params + world_size - 1) / world_size : 0;
	int64_t lo = (int64_t)rank * s, count = n_params - lo;
	*ret_lo = lo;
	*ret_count = count < 0 ? 0 : (count > s ? s : count);
}

char *snap_step_dirname(int64_t step, char *buf, size_t buf_len)
{
	snprintf(buf, buf_len, "step-%08lld", (long long)step);
	return buf;
}

/* ---- safetensors writing ---------------------------------------------- */

typedef struct {
	const char *name;
	int ndim;
	int64_t shape[2];
	int64_t numel;
} st_entry_t;

/* Supplies the numel floats of entry i (pointer valid until the next call). */
typedef int (*st_fill_fn)(void *ctx, int i, const float **ret_data, char *err, size_t err_len);

/*
 * Writes a safetensors file at path: metadata (a string map, borrowed), then
 * the entries in order, their data from fill. Temp name + fsync + rename +
 * fsync of the folder; the temporary file is removed on failure.
 */
static int st_write(const char *path, const st_entry_t *entries, int n, json_t *metadata,
                    st_fill_fn fill, void *ctx, int64_t *ret_bytes, char *ret_hex, char *err,
                    size_t err_len)
{
	int rc = -ENOMEM;
	char *parent = path_parent(path);
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	char *tmp = NULL;
	json_t *header = json_object();
	char *text = NULL;
	XXH3_state_t *hash = XXH3_createState();
	int fd = -1;

	if (!parent || !header || !hash || asprintf(&tmp, "%s/.%s.tmp", parent, base) < 0) {
		tmp = NULL;
		rc = fail(err, err_len, -ENOMEM, "out of memory writing %s", path);
		goto out;
	}
	if (metadata && json_object_set(header, "__metadata__", metadata) != 0)
		goto oom;
	int64_t off = 0;
	for (int i = 0; i < n; i++) {
		json_t *shape = json_array();
		json_t *t = json_pack("{s:s, s:o, s:[I, I]}", "dtype", "F32", "shape", shape,
		                      "data_offsets", (json_int_t)off,
		                      (json_int_t)(off + 4 * entries[i].numel));
		if (!t)
			goto oom;
		for (int d = 0; d < entries[i].ndim; d++)
			if (json_array_append_new(shape, json_integer(entries[i].shape[d])) != 0) {
				json_decref(t);
				goto oom;
			}
		if (json_object_set_new(header, entries[i].name, t) != 0)
			goto oom;
		off += 4 * entries[i].numel;
	}
	text = json_dumps(header, JSON_COMPACT);
	if (!text)
		goto oom;
	size_t text_len = strlen(text);
	size_t header_len = (text_len + 7) & ~(size_t)7; /* data starts 8-aligned */
	char *padded = realloc(text, header_len);
	if (!padded)
		goto oom;
	text = padded;
	memset(text + text_len, ' ', header_len - text_len);

	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = fail_errno(err, err_len, errno, "creating", tmp);
		goto out;
	}
	XXH3_64bits_reset(hash);
	uint64_t len_le = header_len;
	if ((rc = write_all(fd, &len_le, 8, hash)) < 0 ||
	    (rc = write_all(fd, text, header_len, hash)) < 0) {
		rc = fail_errno(err, err_len, -rc, "writing", tmp);
		goto out_unlink;
	}
	for (int i = 0; i < n; i++) {
		if (entries[i].numel == 0)
			continue;
		const float *data = NULL;
		if ((rc = fill(ctx, i, &data, err, err_len)) < 0)
			goto out_unlink;
		if ((rc = write_all(fd, data, (size_t)entries[i].numel * 4, hash)) < 0) {
			rc = fail_errno(err, err_len, -rc, "writing", tmp);
			goto out_unlink;
		}
	}
	if (fsync(fd) != 0) {
		rc = fail_errno(err, err_len, errno, "syncing", tmp);
		goto out_unlink;
	}
	if (close(fd) != 0) {
		fd = -1;
		rc = fail_errno(err, err_len, errno, "closing", tmp);
		goto out_unlink;
	}
	fd = -1;
	if (rename(tmp, path) != 0) {
		rc = fail_errno(err, err_len, errno, "renaming into place", path);
		goto out_unlink;
	}
	if ((rc = fsync_dir(parent, err, err_len)) < 0)
		goto out;
	*ret_bytes = 8 + (int64_t)header_len + off;
	hex64(XXH3_64bits_digest(hash), ret_hex);
	rc = 0;
	goto out;

oom:
	rc = fail(err, err_len, -ENOMEM, "out of memory writing %s", path);
	goto out;
out_unlink:
	if (fd >= 0)
		close(fd);
	fd = -1;
	unlink(tmp);
out:
	if (fd >= 0)
		close(fd);
	XXH3_freeState(hash);
	free(text);
	json_decref(header);
	free(tmp);
	free(parent);
	return rc;
}

typedef struct {
	const float *data[3];
} shard_fill_t;

static int shard_fill(void *ctx, int i, const float **ret_data, char *err, size_t err_len)
{
	*ret_data = ((shard_fill_t *)ctx)->data[i];
	return 0;
}

static json_t *metadata_string(json_t *md, const char *key, int64_t v)
{
	char buf[32];
	snprintf(buf, sizeof buf, "%lld", (long long)v);
	if (json_object_set_new(md, key, json_string(buf)) != 0)
		return NULL;
	return md;
}

int snap_shard_write(const char *dir, int rank, int world_size, int64_t step, int64_t n_params,
                     int64_t lo, int64_t count, const float *params, const float *adam_m,
                     const float *adam_v, snap_shard_info_t *ret_info, char *err, size_t err_len)
{
	if (!dir || !ret_info || world_size < 1 || world_size > MAX_WORLD_SIZE || rank < 0 ||
	    rank >= world_size || step < 0 || n_params < 1 || n_params > MAX_N_PARAMS || lo < 0 ||
	    count < 0 || (count > 0 && lo + count > n_params) ||
	    (count > 0 && (!params || !adam_m || !adam_v)))
		return fail(err, err_len, -EINVAL,
		            "snapshot shard: bad arguments (rank %d of %d, step %lld, range [%lld, +%lld) of %lld)",
		            rank, world_size, (long long)step, (long long)lo, (long long)count,
		            (long long)n_params);

	snap_shard_info_t info;
	snprintf(info.name, sizeof info.name, "rank-%d-of-%d.safetensors", rank, world_size);
	char *path = path_join(dir, info.name);
	json_t *md = json_pack("{s:s}", "format", SNAP_SHARD_FORMAT);
	int rc;
	if (!path || !md || !metadata_string(md, "step", step) || !metadata_string(md, "rank", rank) ||
	    !metadata_string(md, "world_size", world_size) ||
	    !metadata_string(md, "n_params", n_params) || !metadata_string(md, "lo", lo) ||
	    !metadata_string(md, "count", count)) {
		rc = fail(err, err_len, -ENOMEM, "out of memory writing a snapshot shard in %s", dir);
		goto out;
	}
	st_entry_t entries[3];
	for (int i = 0; i < 3; i++)
		entries[i] = (st_entry_t){.name = shard_tensors[i], .ndim = 1, .shape = {count}, .numel = count};
	shard_fill_t ctx = {{params, adam_m, adam_v}};
	rc = st_write(path, entries, 3, md, shard_fill, &ctx, &info.bytes, info.xxh3, err, err_len);
	if (rc == 0)
		*ret_info = info;
out:
	json_decref(md);
	free(path);
	return rc;
}

/* ---- manifest --------------------------------------------------------- */

static int cmp_i64(int64_t a, int64_t b)
{
	return (a > b) - (a < b);
}

typedef struct {
	int64_t lo, count;
	int idx;
} span_t;

static int cmp_span(const void *a, const void *b)
{
	return cmp_i64(((const span_t *)a)->lo, ((const span_t *)b)->lo);
}

static int64_t tensor_numel(const snap_tensor_t *t)
{
	return t->ndim == 1 ? t->shape[0] : t->shape[0] * t->shape[1];
}

/* Checks m against every rule of the format; one line in err names the field. */
static int manifest_check(const snap_manifest_t *m, const char *where, char *err, size_t err_len)
{
	if (m->step < 0)
		return fail(err, err_len, -EINVAL, "%s: step must be >= 0 (got %lld)", where, (long long)m->step);
	if (m->world_size < 1 || m->world_size > MAX_WORLD_SIZE)
		return fail(err, err_len, -EINVAL, "%s: world_size must be in [1, %d] (got %d)", where,
		            MAX_WORLD_SIZE, m->world_size);
	if (m->n_params < 1 || m->n_params > MAX_N_PARAMS)
		return fail(err, err_len, -EINVAL, "%s: n_params must be in [1, 2^50] (got %lld)", where,
		            (long long)m->n_params);
	if (m->adam_t < 0)
		return fail(err, err_len, -EINVAL, "%s: adam_t must be >= 0 (got %lld)", where,
		            (long long)m->adam_t);
	if (!m->sharding[0] || !memchr(m->sharding, '\0', sizeof m->sharding))
		return fail(err, err_len, -EINVAL, "%s: sharding must be a non-empty string", where);
	if (m->data_cursor && !json_is_object(m->data_cursor))
		return fail(err, err_len, -EINVAL, "%s: data_cursor must be an object", where);
	if (m->rng && !json_is_object(m->rng))
		return fail(err, err_len, -EINVAL, "%s: rng must be an object", where);
	if (m->model && !json_is_object(m->model))
		return fail(err, err_len, -EINVAL, "%s: model must be an object", where);
	if (m->n_files != m->world_size || (m->n_files > 0 && !m->files))
		return fail(err, err_len, -EINVAL, "%s: files must list one file per rank (%d), got %d",
		            where, m->world_size, m->n_files);

	span_t *order = malloc(sizeof *order * (size_t)m->n_files);
	char *seen = calloc((size_t)m->world_size, 1);
	int rc = 0;
	if (!order || !seen) {
		rc = fail(err, err_len, -ENOMEM, "%s: out of memory", where);
		goto out;
	}
	int n_nonempty = 0;
	for (int i = 0; i < m->n_files; i++) {
		const snap_file_t *f = &m->files[i];
		char want[SNAP_NAME_MAX];
		if (f->rank < 0 || f->rank >= m->world_size || seen[f->rank]) {
			rc = fail(err, err_len, -EINVAL, "%s: files[%d].rank %d is out of range or repeated",
			          where, i, f->rank);
			goto out;
		}
		seen[f->rank] = 1;
		snprintf(want, sizeof want, "rank-%d-of-%d.safetensors", f->rank, m->world_size);
		if (!memchr(f->name, '\0', sizeof f->name) || strcmp(f->name, want) != 0) {
			rc = fail(err, err_len, -EINVAL, "%s: files[%d].name must be \"%s\"", where, i, want);
			goto out;
		}
		if (f->lo < 0 || f->count < 0 || (f->count > 0 && f->lo > m->n_params - f->count)) {
			rc = fail(err, err_len, -EINVAL,
			          "%s: files[%d] (%s) range [%lld, +%lld) is outside [0, n_params=%lld)", where,
			          i, f->name, (long long)f->lo, (long long)f->count, (long long)m->n_params);
			goto out;
		}
		if (f->bytes < 8 + 12 * f->count) {
			rc = fail(err, err_len, -EINVAL, "%s: files[%d] (%s) bytes %lld is too small for %lld floats",
			          where, i, f->name, (long long)f->bytes, (long long)f->count);
			goto out;
		}
		if (!memchr(f->xxh3, '\0', sizeof f->xxh3) || !is_hex64(f->xxh3)) {
			rc = fail(err, err_len, -EINVAL, "%s: files[%d] (%s) xxh3 must be 16 lowercase hex digits",
			          where, i, f->name);
			goto out;
		}
		if (f->count > 0)
			order[n_nonempty++] = (span_t){f->lo, f->count, i};
	}
	qsort(order, (size_t)n_nonempty, sizeof *order, cmp_span);
	int64_t end = 0;
	for (int k = 0; k < n_nonempty; k++) {
		const snap_file_t *f = &m->files[order[k].idx];
		if (f->lo != end) {
			rc = fail(err, err_len, -EINVAL,
			          "%s: the files do not cover [0, n_params) exactly: %s starts at %lld, expected %lld (%s)",
			          where, f->name, (long long)f->lo, (long long)end,
			          f->lo > end ? "a gap" : "an overlap");
			goto out;
		}
		end = f->lo + f->count;
	}
	if (end != m->n_params) {
		rc = fail(err, err_len, -EINVAL, "%s: the files cover [0, %lld), not [0, n_params=%lld)",
		          where, (long long)end, (long long)m->n_params);
		goto out;
	}

	if (m->n_tensors < 0 || (m->n_tensors > 0 && !m->tensors)) {
		rc = fail(err, err_len, -EINVAL, "%s: bad tensor table", where);
		goto out;
	}
	for (int i = 0; i < m->n_tensors; i++) {
		const snap_tensor_t *t = &m->tensors[i];
		if (!memchr(t->name, '\0', sizeof t->name) || !t->name[0] ||
		    strcmp(t->name, "__metadata__") == 0) {
			rc = fail(err, err_len, -EINVAL, "%s: tensors[%d].name must be a non-empty string", where, i);
			goto out;
		}
		if (t->ndim < 1 || t->ndim > 2 || t->shape[0] < 1 || t->shape[0] > MAX_N_PARAMS ||
		    (t->ndim == 2 && (t->shape[1] < 1 || t->shape[1] > MAX_N_PARAMS / t->shape[0]))) {
			rc = fail(err, err_len, -EINVAL, "%s: tensors[%d] (%s) must have 1 or 2 positive dims",
			          where, i, t->name);
			goto out;
		}
		if (t->offset < 0 || t->offset > m->n_params - tensor_numel(t)) {
			rc = fail(err, err_len, -EINVAL,
			          "%s: tensors[%d] (%s) at offset %lld with %lld elements ends past n_params %lld",
			          where, i, t->name, (long long)t->offset, (long long)tensor_numel(t),
			          (long long)m->n_params);
			goto out;
		}
		for (int j = 0; j < i; j++) {
			const snap_tensor_t *u = &m->tensors[j];
			if (strcmp(u->name, t->name) == 0) {
				rc = fail(err, err_len, -EINVAL, "%s: tensors[%d] repeats the name %s", where, i, t->name);
				goto out;
			}
			if (t->offset < u->offset + tensor_numel(u) && u->offset < t->offset + tensor_numel(t)) {
				rc = fail(err, err_len, -EINVAL, "%s: tensors %s and %s overlap in the flat buffer",
				          where, u->name, t->name);
				goto out;
			}
		}
	}
out:
	free(seen);
	free(order);
	return rc;
}

static json_t *manifest_to_json(const snap_manifest_t *m)
{
	json_t *files = json_array(), *tensors = json_array();
	json_t *cursor = m->data_cursor ? json_incref(m->data_cursor) : json_object();
	json_t *rng = m->rng ? json_incref(m->rng) : json_object();
	/* "o" takes the references to cursor and rng, also when json_pack fails. */
	json_t *root = json_pack("{s:s, s:I, s:i, s:s, s:I, s:I, s:o, s:o}", "format",
	                         SNAP_MANIFEST_FORMAT, "step", (json_int_t)m->step, "world_size",
	                         m->world_size, "sharding", m->sharding, "n_params",
	                         (json_int_t)m->n_params, "adam_t", (json_int_t)m->adam_t,
	                         "data_cursor", cursor, "rng", rng);
	if (!root || !files || !tensors)
		goto fail;
	if (m->model && json_object_set(root, "model", m->model) != 0)
		goto fail;
	for (int i = 0; i < m->n_files; i++) {
		const snap_file_t *f = &m->files[i];
		json_t *o = json_pack("{s:i, s:s, s:I, s:I, s:I, s:s}", "rank", f->rank, "name", f->name,
		                      "lo", (json_int_t)f->lo, "count", (json_int_t)f->count, "bytes",
		                      (json_int_t)f->bytes, "xxh3", f->xxh3);
		if (!o || json_array_append_new(files, o) != 0)
			goto fail;
	}
	for (int i = 0; i < m->n_tensors; i++) {
		const snap_tensor_t *t = &m->tensors[i];
		json_t *shape = t->ndim == 1 ? json_pack("[I]", (json_int_t)t->shape[0])
		                             : json_pack("[I, I]", (json_int_t)t->shape[0],
		                                         (json_int_t)t->shape[1]);
		json_t *o = shape ? json_pack("{s:s, s:o, s:I}", "name", t->name, "shape", shape,
		                              "offset", (json_int_t)t->offset)
		                  : NULL;
		if (!o || json_array_append_new(tensors, o) != 0)
			goto fail;
	}
	if (json_object_set(root, "files", files) != 0 || json_object_set(root, "tensors", tensors) != 0)
		goto fail;
	json_decref(files);
	json_decref(tensors);
	return root;
fail:
	json_decref(files);
	json_decref(tensors);
	json_decref(root);
	return NULL;
}

/* Field readers for manifest_from_json(); each names the field on failure. */
static int get_int(json_t *obj, const char *key, const char *ctx, int64_t *ret, char *err,
                   size_t err_len)
{
	json_t *v = json_object_get(obj, key);
	if (!json_is_integer(v))
		return fail(err, err_len, -EINVAL, "%s%s: expected an integer", ctx, key);
	*ret = json_integer_value(v);
	return 0;
}

static int get_str(json_t *obj, const char *key, const char *ctx, char *buf, size_t buf_len,
                   char *err, size_t err_len)
{
	json_t *v = json_object_get(obj, key);
	if (!json_is_string(v))
		return fail(err, err_len, -EINVAL, "%s%s: expected a string", ctx, key);
	if (json_string_length(v) >= buf_len || strlen(json_string_value(v)) != json_string_length(v))
		return fail(err, err_len, -EINVAL, "%s%s: string too long or holds a NUL", ctx, key);
	memcpy(buf, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

static void manifest_clear(snap_manifest_t *m)
{
	json_decref(m->data_cursor);
	json_decref(m->rng);
	json_decref(m->model);
	free(m->files);
	free(m->tensors);
	memset(m, 0, sizeof *m);
}

/* Fills m (owning what it points to) from root; the caller clears m on failure. */
static int manifest_from_json(json_t *root, const char *where, snap_manifest_t *m, char *err,
                              size_t err_len)
{
	char ctx[96];
	int64_t v = 0;
	int rc;
	char fmt[64];
	snprintf(ctx, sizeof ctx, "%s: ", where);
	if (!json_is_object(root))
		return fail(err, err_len, -EINVAL, "%s: not a JSON object", where);
	if ((rc = get_str(root, "format", ctx, fmt, sizeof fmt, err, err_len)) < 0)
		return rc;
	if (strcmp(fmt, SNAP_MANIFEST_FORMAT) != 0)
		return fail(err, err_len, -EINVAL, "%s: format is \"%s\", this build reads \"%s\"", where,
		            fmt, SNAP_MANIFEST_FORMAT);
	if ((rc = get_int(root, "step", ctx, &m->step, err, err_len)) < 0 ||
	    (rc = get_int(root, "world_size", ctx, &v, err, err_len)) < 0)
		return rc;
	if (v < 1 || v > MAX_WORLD_SIZE)
		return fail(err, err_len, -EINVAL, "%s: world_size must be in [1, %d]", where, MAX_WORLD_SIZE);
	m->world_size = (int)v;
	if ((rc = get_str(root, "sharding", ctx, m->sharding, sizeof m->sharding, err, err_len)) < 0 ||
	    (rc = get_int(root, "n_params", ctx, &m->n_params, err, err_len)) < 0 ||
	    (rc = get_int(root, "adam_t", ctx, &m->adam_t, err, err_len)) < 0)
		return rc;
	static const char *const objs[] = {"data_cursor", "rng"};
	for (int i = 0; i < 2; i++)
		if (!json_is_object(json_object_get(root, objs[i])))
			return fail(err, err_len, -EINVAL, "%s: %s: expected an object", where, objs[i]);
	m->data_cursor = json_incref(json_object_get(root, "data_cursor"));
	m->rng = json_incref(json_object_get(root, "rng"));
	json_t *model = json_object_get(root, "model");
	if (model && !json_is_null(model)) {
		if (!json_is_object(model))
			return fail(err, err_len, -EINVAL, "%s: model: expected an object", where);
		m->model = json_incref(model);
	}

	json_t *files = json_object_get(root, "files");
	if (!json_is_array(files) || json_array_size(files) != (size_t)m->world_size)
		return fail(err, err_len, -EINVAL, "%s: files: expected an array of %d entries (one per rank)",
		            where, m->world_size);
	m->n_files = m->world_size;
	m->files = calloc((size_t)m->n_files, sizeof *m->files);
	if (!m->files)
		return fail(err, err_len, -ENOMEM, "%s: out of memory", where);
	for (int i = 0; i < m->n_files; i++) {
		json_t *f = json_array_get(files, (size_t)i);
		snap_file_t *out = &m->files[i];
		snprintf(ctx, sizeof ctx, "%s: files[%d].", where, i);
		if (!json_is_object(f))
			return fail(err, err_len, -EINVAL, "%s: files[%d]: expected an object", where, i);
		if ((rc = get_int(f, "rank", ctx, &v, err, err_len)) < 0)
			return rc;
		if (v < 0 || v >= m->world_size)
			return fail(err, err_len, -EINVAL, "%srank: %lld is not in [0, %d)", ctx, (long long)v,
			            m->world_size);
		out->rank = (int)v;
		if ((rc = get_str(f, "name", ctx, out->name, sizeof out->name, err, err_len)) < 0 ||
		    (rc = get_int(f, "lo", ctx, &out->lo, err, err_len)) < 0 ||
		    (rc = get_int(f, "count", ctx, &out->count, err, err_len)) < 0 ||
		    (rc = get_int(f, "bytes", ctx, &out->bytes, err, err_len)) < 0 ||
		    (rc = get_str(f, "xxh3", ctx, out->xxh3, sizeof out->xxh3, err, err_len)) < 0)
			return rc;
	}

	json_t *tensors = json_object_get(root, "tensors");
	if (!json_is_array(tensors) || json_array_size(tensors) > (size_t)INT_MAX / 2)
		return fail(err, err_len, -EINVAL, "%s: tensors: expected an array", where);
	m->n_tensors = (int)json_array_size(tensors);
	m->tensors = calloc((size_t)m->n_tensors + 1, sizeof *m->tensors);
	if (!m->tensors)
		return fail(err, err_len, -ENOMEM, "%s: out of memory", where);
	for (int i = 0; i < m->n_tensors; i++) {
		json_t *t = json_array_get(tensors, (size_t)i);
		snap_tensor_t *out = &m->tensors[i];
		snprintf(ctx, sizeof ctx, "%s: tensors[%d].", where, i);
		if (!json_is_object(t))
			return fail(err, err_len, -EINVAL, "%s: tensors[%d]: expected an object", where, i);
		if ((rc = get_str(t, "name", ctx, out->name, sizeof out->name, err, err_len)) < 0 ||
		    (rc = get_int(t, "offset", ctx, &out->offset, err, err_len)) < 0)
			return rc;
		json_t *shape = json_object_get(t, "shape");
		size_t nd = json_array_size(shape);
		if (!json_is_array(shape) || nd < 1 || nd > 2)
			return fail(err, err_len, -EINVAL, "%sshape: expected an array of 1 or 2 integers", ctx);
		out->ndim = (int)nd;
		for (size_t d = 0; d < nd; d++) {
			json_t *dim = json_array_get(shape, d);
			if (!json_is_integer(dim))
				return fail(err, err_len, -EINVAL, "%sshape: expected integers", ctx);
			out->shape[d] = json_integer_value(dim);
		}
	}
	return manifest_check(m, where, err, err_len);
}

/* Writes manifest.json into dir (plain write: the folder is not committed yet). */
static int manifest_write(const char *dir, const snap_manifest_t *m, char *err, size_t err_len)
{
	char *path = path_join(dir, SNAP_MANIFEST_NAME);
	json_t *root = manifest_to_json(m);
	char *text = root ? json_dumps(root, JSON_INDENT(1)) : NULL;
	int fd = -1, rc;
	if (!path || !text) {
		rc = fail(err, err_len, -ENOMEM, "out of memory writing the manifest in %s", dir);
		goto out;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = fail_errno(err, err_len, errno, "creating", path);
		goto out;
	}
	size_t len = strlen(text);
	if ((rc = write_all(fd, text, len, NULL)) < 0 || (rc = write_all(fd, "\n", 1, NULL)) < 0) {
		rc = fail_errno(err, err_len, -rc, "writing", path);
		goto out_unlink;
	}
	if (fsync(fd) != 0) {
		rc = fail_errno(err, err_len, errno, "syncing", path);
		goto out_unlink;
	}
	rc = close(fd) != 0 ? fail_errno(err, err_len, errno, "closing", path) : 0;
	fd = -1;
	if (rc < 0)
		goto out_unlink;
	goto out;
out_unlink:
	unlink(path);
out:
	if (fd >= 0)
		close(fd);
	free(text);
	json_decref(root);
	free(path);
	return rc;
}

/* Whether final_dir is a committed snapshot with m's step and files. */
static bool already_committed(const char *final_dir, const snap_manifest_t *m)
{
	snap_t *s = NULL;
	char err[256];
	if (snap_open(final_dir, &s, err, sizeof err) != 0)
		return false;
	bool same = s->m.step == m->step && s->m.n_params == m->n_params &&
	            s->m.n_files == m->n_files;
	for (int i = 0; same && i < m->n_files; i++) {
		const snap_file_t *f = &m->files[i];
		bool found = false;
		for (int j = 0; j < s->m.n_files && !found; j++) {
			const snap_file_t *g = &s->m.files[j];
			found = g->rank == f->rank && g->lo == f->lo && g->count == f->count &&
			        g->bytes == f->bytes && strcmp(g->xxh3, f->xxh3) == 0;
		}
		same = found;
	}
	snap_close(s);
	return same;
}

int snap_commit(const char *tmp_dir, const char *final_dir, const snap_manifest_t *manifest,
                char *err, size_t err_len)
{
	int rc;
	if (!tmp_dir || !final_dir || !manifest)
		return fail(err, err_len, -EINVAL, "snapshot commit: missing argument");
	if ((rc = manifest_check(manifest, "snapshot manifest", err, err_len)) < 0)
		return rc;
	struct stat st;
	if (lstat(tmp_dir, &st) != 0 && errno == ENOENT && already_committed(final_dir, manifest))
		return 0;
	for (int i = 0; i < manifest->n_files; i++) {
		const snap_file_t *f = &manifest->files[i];
		char *path = path_join(tmp_dir, f->name);
		if (!path)
			return fail(err, err_len, -ENOMEM, "out of memory committing %s", final_dir);
		if (stat(path, &st) != 0) {
			rc = fail(err, err_len, -errno, "cannot commit %s: shard %s: %s", final_dir, path,
			          strerror(errno));
			free(path);
			return rc;
		}
		if ((int64_t)st.st_size != f->bytes) {
			rc = fail(err, err_len, -EINVAL, "cannot commit %s: shard %s is %lld bytes, reported %lld",
			          final_dir, path, (long long)st.st_size, (long long)f->bytes);
			free(path);
			return rc;
		}
		free(path);
	}
	if (lstat(final_dir, &st) == 0)
		return fail(err, err_len, -EEXIST, "cannot commit: %s already exists", final_dir);
	if ((rc = manifest_write(tmp_dir, manifest, err, err_len)) < 0)
		return rc;
	if ((rc = fsync_dir(tmp_dir, err, err_len)) < 0)
		return rc;
	if (rename(tmp_dir, final_dir) != 0)
		return fail_errno(err, err_len, errno, "committing (rename) to", final_dir);
	char *parent = path_parent(final_dir);
	if (!parent)
		return fail(err, err_len, -ENOMEM, "out of memory committing %s", final_dir);
	rc = fsync_dir(parent, err, err_len);
	free(parent);
	return rc;
}

/* ---- opening and reading ---------------------------------------------- */

static int read_small_file(const char *path, size_t max_bytes, char **ret_data, size_t *ret_len,
                           char *err, size_t err_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail(err, err_len, -errno, "cannot open %s: %s", path, strerror(errno));
	struct stat st;
	int rc = 0;
	char *data = NULL;
	if (fstat(fd, &st) != 0) {
		rc = fail_errno(err, err_len, errno, "reading", path);
		goto out;
	}
	if (!S_ISREG(st.st_mode) || (size_t)st.st_size > max_bytes) {
		rc = fail(err, err_len, -EINVAL, "%s: not a regular file of at most %zu bytes", path, max_bytes);
		goto out;
	}
	data = malloc((size_t)st.st_size + 1);
	if (!data) {
		rc = fail(err, err_len, -ENOMEM, "out of memory reading %s", path);
		goto out;
	}
	if ((rc = pread_all(fd, data, (size_t)st.st_size, 0)) < 0) {
		rc = rc == -EBADMSG ? fail(err, err_len, rc, "%s: shrank while being read", path)
		                    : fail_errno(err, err_len, -rc, "reading", path);
		goto out;
	}
	data[st.st_size] = '\0';
	*ret_data = data;
	*ret_len = (size_t)st.st_size;
	data = NULL;
out:
	free(data);
	close(fd);
	return rc;
}

int snap_open(const char *dir, snap_t **ret_snap, char *err, size_t err_len)
{
	if (!dir || !ret_snap)
		return fail(err, err_len, -EINVAL, "snap_open: missing argument");
	char *path = path_join(dir, SNAP_MANIFEST_NAME);
	snap_t *s = calloc(1, sizeof *s);
	char *text = NULL;
	size_t len = 0;
	json_t *root = NULL;
	int rc;
	if (!path || !s || !(s->dir = strdup(dir))) {
		rc = fail(err, err_len, -ENOMEM, "out of memory opening %s", dir);
		goto fail;
	}
	if ((rc = read_small_file(path, MAX_MANIFEST_BYTES, &text, &len, err, err_len)) < 0)
		goto fail;
	json_error_t jerr;
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		rc = fail(err, err_len, -EINVAL, "%s: bad JSON at line %d: %s", path, jerr.line, jerr.text);
		goto fail;
	}
	if ((rc = manifest_from_json(root, path, &s->m, err, err_len)) < 0)
		goto fail;
	s->fs = calloc((size_t)s->m.n_files, sizeof *s->fs);
	if (!s->fs) {
		rc = fail(err, err_len, -ENOMEM, "out of memory opening %s", dir);
		goto fail;
	}
	json_decref(root);
	free(text);
	free(path);
	*ret_snap = s;
	return 0;
fail:
	json_decref(root);
	free(text);
	free(path);
	snap_close(s);
	return rc;
}

void snap_close(snap_t *s)
{
	if (!s)
		return;
	manifest_clear(&s->m);
	free(s->fs);
	free(s->dir);
	free(s);
}

const snap_manifest_t *snap_manifest(const snap_t *s)
{
	return &s->m;
}

const char *snap_dir(const snap_t *s)
{
	return s->dir;
}

int snap_verify(snap_t *s, char *err, size_t err_len)
{
	int rc = 0;
	char *buf = malloc(IO_CHUNK_BYTES);
	XXH3_state_t *hash = XXH3_createState();
	if (!buf || !hash) {
		rc = fail(err, err_len, -ENOMEM, "out of memory verifying %s", s->dir);
		goto out;
	}
	for (int i = 0; i < s->m.n_files && rc == 0; i++) {
		const snap_file_t *f = &s->m.files[i];
		char *path = path_join(s->dir, f->name);
		int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
		struct stat st;
		if (!path) {
			rc = fail(err, err_len, -ENOMEM, "out of memory verifying %s", s->dir);
		} else if (fd < 0) {
			rc = fail(err, err_len, errno == ENOENT ? -EBADMSG : -errno,
			          "snapshot %s: shard %s cannot be opened: %s", s->dir, f->name, strerror(errno));
		} else if (fstat(fd, &st) != 0) {
			rc = fail_errno(err, err_len, errno, "reading", path);
		} else if ((int64_t)st.st_size != f->bytes) {
			rc = fail(err, err_len, -EBADMSG,
			          "snapshot %s: shard %s is %lld bytes, the manifest says %lld (truncated or replaced)",
			          s->dir, f->name, (long long)st.st_size, (long long)f->bytes);
		} else {
			XXH3_64bits_reset(hash);
			for (int64_t off = 0; off < f->bytes && rc == 0;) {
				size_t n = (size_t)(f->bytes - off) < IO_CHUNK_BYTES ? (size_t)(f->bytes - off)
				                                                     : IO_CHUNK_BYTES;
				int r = pread_all(fd, buf, n, off);
				if (r < 0)
					rc = r == -EBADMSG ? fail(err, err_len, r, "snapshot %s: shard %s shrank while being read",
					                          s->dir, f->name)
					                   : fail_errno(err, err_len, -r, "reading", path);
				XXH3_64bits_update(hash, buf, n);
				off += (int64_t)n;
			}
			char hex[SNAP_XXH3_HEX_LEN + 1];
			hex64(XXH3_64bits_digest(hash), hex);
			if (rc == 0 && strcmp(hex, f->xxh3) != 0)
				rc = fail(err, err_len, -EBADMSG,
				          "snapshot %s: checksum mismatch in %s (xxh3 %s, the manifest says %s): the file is corrupt",
				          s->dir, f->name, hex, f->xxh3);
		}
		if (fd >= 0)
			close(fd);
		free(path);
	}
out:
	XXH3_freeState(hash);
	free(buf);
	return rc;
}

static int tensor_index(const char *name)
{
	for (int i = 0; i < 3; i++)
		if (name && strcmp(name, shard_tensors[i]) == 0)
			return i;
	return -1;
}

/*
 * Checks the safetensors header of shard file i against the manifest and
 * records where its three tensors' data start. fd is open on the file.
 */
static int shard_check_header(snap_t *s, int i, int fd, const char *path, char *err, size_t err_len)
{
	const snap_file_t *f = &s->m.files[i];
	struct stat st;
	uint64_t header_len;
	char *text = NULL;
	json_t *root = NULL;
	int rc = 0;
	if (fstat(fd, &st) != 0)
		return fail_errno(err, err_len, errno, "reading", path);
	if ((int64_t)st.st_size != f->bytes)
		return fail(err, err_len, -EBADMSG,
		            "shard %s is %lld bytes, the manifest says %lld (truncated or replaced)", path,
		            (long long)st.st_size, (long long)f->bytes);
	if ((rc = pread_all(fd, &header_len, 8, 0)) < 0)
		return rc == -EBADMSG ? fail(err, err_len, rc, "shard %s: shorter than 8 bytes", path)
		                      : fail_errno(err, err_len, -rc, "reading", path);
	if (header_len < 2 || header_len > MAX_HEADER_BYTES || (int64_t)header_len > f->bytes - 8)
		return fail(err, err_len, -EBADMSG, "shard %s: header length %llu does not fit the file (%lld bytes)",
		            path, (unsigned long long)header_len, (long long)f->bytes);
	int64_t data_start = 8 + (int64_t)header_len;
	int64_t data_bytes = f->bytes - data_start;
	text = malloc(header_len);
	if (!text)
		return fail(err, err_len, -ENOMEM, "out of memory reading %s", path);
	if ((rc = pread_all(fd, text, header_len, 8)) < 0) {
		rc = fail_errno(err, err_len, rc == -EBADMSG ? EBADMSG : -rc, "reading", path);
		goto out;
	}
	json_error_t jerr;
	if (text[0] != '{' || !(root = json_loadb(text, header_len, JSON_REJECT_DUPLICATES, &jerr))) {
		rc = fail(err, err_len, -EBADMSG, "shard %s: the safetensors header is not a JSON object%s%s",
		          path, text[0] == '{' ? ": " : "", text[0] == '{' ? jerr.text : "");
		goto out;
	}
	if (!json_is_object(root) || json_object_size(root) != 4) {
		rc = fail(err, err_len, -EBADMSG,
		          "shard %s: the header must hold __metadata__, params, adam_m and adam_v only", path);
		goto out;
	}
	json_t *md = json_object_get(root, "__metadata__");
	const char *fmt = json_string_value(json_object_get(md, "format"));
	if (!json_is_object(md) || !fmt || strcmp(fmt, SNAP_SHARD_FORMAT) != 0) {
		rc = fail(err, err_len, -EBADMSG, "shard %s: __metadata__.format must be \"%s\"", path,
		          SNAP_SHARD_FORMAT);
		goto out;
	}
	const struct {
		const char *key;
		int64_t want;
	} fields[] = {{"step", s->m.step},         {"rank", f->rank}, {"world_size", s->m.world_size},
	              {"n_params", s->m.n_params}, {"lo", f->lo},     {"count", f->count}};
	for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
		int64_t v;
		if (!parse_i64(json_string_value(json_object_get(md, fields[k].key)), &v) ||
		    v != fields[k].want) {
			rc = fail(err, err_len, -EBADMSG,
			          "shard %s: __metadata__.%s must be \"%lld\" as in the manifest", path,
			          fields[k].key, (long long)fields[k].want);
			goto out;
		}
	}
	int64_t begin[3], end[3];
	for (int t = 0; t < 3; t++) {
		json_t *o = json_object_get(root, shard_tensors[t]);
		json_t *shape = json_object_get(o, "shape"), *offs = json_object_get(o, "data_offsets");
		const char *dtype = json_string_value(json_object_get(o, "dtype"));
		if (!json_is_object(o) || !dtype || strcmp(dtype, "F32") != 0) {
			rc = fail(err, err_len, -EBADMSG, "shard %s: tensor %s must have dtype \"F32\"%s%s", path,
			          shard_tensors[t], dtype ? ", not " : "", dtype ? dtype : "");
			goto out;
		}
		if (!json_is_array(shape) || json_array_size(shape) != 1 ||
		    !json_is_integer(json_array_get(shape, 0)) ||
		    json_integer_value(json_array_get(shape, 0)) != f->count) {
			rc = fail(err, err_len, -EBADMSG, "shard %s: tensor %s must have shape [%lld]", path,
			          shard_tensors[t], (long long)f->count);
			goto out;
		}
		if (!json_is_array(offs) || json_array_size(offs) != 2 ||
		    !json_is_integer(json_array_get(offs, 0)) || !json_is_integer(json_array_get(offs, 1))) {
			rc = fail(err, err_len, -EBADMSG, "shard %s: tensor %s: data_offsets must be [begin, end]",
			          path, shard_tensors[t]);
			goto out;
		}
		begin[t] = json_integer_value(json_array_get(offs, 0));
		end[t] = json_integer_value(json_array_get(offs, 1));
		if (begin[t] < 0 || end[t] < begin[t] || end[t] > data_bytes ||
		    end[t] - begin[t] != 4 * f->count) {
			rc = fail(err, err_len, -EBADMSG,
			          "shard %s: tensor %s: data_offsets [%lld, %lld] out of range (data section %lld bytes, %lld floats)",
			          path, shard_tensors[t], (long long)begin[t], (long long)end[t],
			          (long long)data_bytes, (long long)f->count);
			goto out;
		}
	}
	for (int a = 0; a < 3; a++)
		for (int b = a + 1; b < 3; b++)
			if (f->count > 0 && begin[a] < end[b] && begin[b] < end[a]) {
				rc = fail(err, err_len, -EBADMSG, "shard %s: tensors %s and %s overlap", path,
				          shard_tensors[a], shard_tensors[b]);
				goto out;
			}
	if (data_bytes != 12 * f->count) {
		rc = fail(err, err_len, -EBADMSG, "shard %s: data section is %lld bytes, expected %lld", path,
		          (long long)data_bytes, (long long)(12 * f->count));
		goto out;
	}
	for (int t = 0; t < 3; t++)
		s->fs[i].data_off[t] = data_start + begin[t];
	s->fs[i].checked = true;
out:
	json_decref(root);
	free(text);
	return rc;
}

int snap_read_range(snap_t *s, const char *tensor, int64_t lo, int64_t count, float *out,
                    char *err, size_t err_len)
{
	int t = tensor_index(tensor);
	if (t < 0)
		return fail(err, err_len, -EINVAL, "snapshot %s: no tensor \"%s\" (params, adam_m, adam_v)",
		            s->dir, tensor ? tensor : "(null)");
	if (lo < 0 || count < 0 || lo > s->m.n_params - count || (count > 0 && !out))
		return fail(err, err_len, -EINVAL, "snapshot %s: range [%lld, +%lld) is outside [0, %lld)",
		            s->dir, (long long)lo, (long long)count, (long long)s->m.n_params);
	for (int i = 0; i < s->m.n_files; i++) {
		const snap_file_t *f = &s->m.files[i];
		int64_t a = lo > f->lo ? lo : f->lo;
		int64_t b = lo + count < f->lo + f->count ? lo + count : f->lo + f->count;
		if (f->count == 0 || a >= b)
			continue;
		char *path = path_join(s->dir, f->name);
		if (!path)
			return fail(err, err_len, -ENOMEM, "out of memory reading %s", s->dir);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		int rc = 0;
		if (fd < 0)
			rc = fail(err, err_len, -errno, "cannot open shard %s: %s", path, strerror(errno));
		else if (!s->fs[i].checked)
			rc = shard_check_header(s, i, fd, path, err, err_len);
		if (rc == 0) {
			rc = pread_all(fd, out + (a - lo), (size_t)(b - a) * 4,
			               s->fs[i].data_off[t] + (a - f->lo) * 4);
			if (rc == -EBADMSG)
				rc = fail(err, err_len, rc, "shard %s: shorter than its header says", path);
			else if (rc < 0)
				rc = fail_errno(err, err_len, -rc, "reading", path);
		}
		if (fd >= 0)
			close(fd);
		free(path);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* ---- finding, retention, removal -------------------------------------- */

/* The step of a committed folder name "step-NNNNNNNN" (canonical form only). */
static bool parse_step_dirname(const char *name, int64_t *ret_step)
{
	char canon[SNAP_DIRNAME_MAX];
	int64_t step;
	if (strncmp(name, "step-", 5) != 0 || name[5] < '0' || name[5] > '9' ||
	    !parse_i64(name + 5, &step) || step < 0)
		return false;
	if (strcmp(snap_step_dirname(step, canon, sizeof canon), name) != 0)
		return false;
	*ret_step = step;
	return true;
}

static int cmp_step_desc(const void *a, const void *b)
{
	return cmp_i64(*(const int64_t *)b, *(const int64_t *)a);
}

int snap_find_latest(const char *job_dir, int64_t *ret_step, char *ret_dir, size_t ret_dir_len,
                     snap_skip_fn on_skip, void *userdata, char *err, size_t err_len)
{
	return snap_find_latest_upto(job_dir, INT64_MAX, ret_step, ret_dir, ret_dir_len, on_skip,
	                             userdata, err, err_len);
}

int snap_find_latest_upto(const char *job_dir, int64_t max_step, int64_t *ret_step, char *ret_dir,
                          size_t ret_dir_len, snap_skip_fn on_skip, void *userdata, char *err,
                          size_t err_len)
{
	DIR *d = opendir(job_dir);
	if (!d)
		return fail(err, err_len, errno == ENOENT ? -ENOENT : -errno,
		            "no snapshot folder %s: %s", job_dir, strerror(errno));
	int64_t *steps = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	int rc = 0;
	while ((e = readdir(d)) != NULL) {
		int64_t step;
		if (!parse_step_dirname(e->d_name, &step) || step > max_step)
			continue;
		if (n == cap) {
			size_t ncap = cap ? 2 * cap : 16;
			int64_t *p = realloc(steps, ncap * sizeof *p);
			if (!p) {
				rc = fail(err, err_len, -ENOMEM, "out of memory listing %s", job_dir);
				goto out;
			}
			steps = p;
			cap = ncap;
		}
		steps[n++] = step;
	}
	if (n == 0) {
		rc = fail(err, err_len, -ENOENT, "no committed snapshot in %s", job_dir);
		goto out;
	}
	qsort(steps, n, sizeof *steps, cmp_step_desc);
	for (size_t k = 0; k < n; k++) {
		char name[SNAP_DIRNAME_MAX], reason[512];
		char *path = path_join(job_dir, snap_step_dirname(steps[k], name, sizeof name));
		snap_t *s = NULL;
		if (!path) {
			rc = fail(err, err_len, -ENOMEM, "out of memory listing %s", job_dir);
			goto out;
		}
		int r = snap_open(path, &s, reason, sizeof reason);
		if (r == 0 && s->m.step != steps[k]) {
			snprintf(reason, sizeof reason, "%s: the manifest says step %lld", path,
			         (long long)s->m.step);
			r = -EBADMSG;
		}
		if (r == 0)
			r = snap_verify(s, reason, sizeof reason);
		snap_close(s);
		if (r == 0) {
			if (strlen(path) >= ret_dir_len) {
				rc = fail(err, err_len, -ENAMETOOLONG, "snapshot path too long: %s", path);
			} else {
				memcpy(ret_dir, path, strlen(path) + 1);
				*ret_step = steps[k];
			}
			free(path);
			goto out;
		}
		free(path);
		if (r == -ENOMEM) {
			rc = fail(err, err_len, r, "%s", reason);
			goto out;
		}
		if (on_skip)
			on_skip(steps[k], reason, userdata);
	}
	rc = fail(err, err_len, -ENOENT, "no usable snapshot in %s: all %zu committed ones are corrupt",
	          job_dir, n);
out:
	free(steps);
	closedir(d);
	return rc;
}

void snap_retention(const int64_t *steps, size_t n, int keep_last, int64_t keep_every,
                    bool *keep_mask)
{
	if (keep_last < 1)
		keep_last = 1;
	for (size_t i = 0; i < n; i++) {
		size_t newer = 0;
		for (size_t j = 0; j < n; j++)
			newer += steps[j] > steps[i];
		keep_mask[i] = newer < (size_t)keep_last || (keep_every > 0 && steps[i] % keep_every == 0);
	}
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return (flag == FTW_DP ? rmdir(path) : unlink(path)) != 0 ? -1 : 0;
}

int snap_remove(const char *dir, char *err, size_t err_len)
{
	static const char suffix[] = ".deleting";
	size_t len = strlen(dir);
	while (len > 1 && dir[len - 1] == '/')
		len--;
	char *src = strndup(dir, len);
	char *victim = NULL;
	int rc = 0;
	if (!src)
		return fail(err, err_len, -ENOMEM, "out of memory removing %s", dir);
	if (len >= sizeof suffix - 1 && strcmp(src + len - (sizeof suffix - 1), suffix) == 0) {
		victim = src;
		src = NULL;
	} else {
		if (asprintf(&victim, "%s%s", src, suffix) < 0) {
			victim = NULL;
			rc = fail(err, err_len, -ENOMEM, "out of memory removing %s", dir);
			goto out;
		}
		struct stat st;
		if (lstat(victim, &st) == 0 &&
		    nftw(victim, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) {
			rc = fail_errno(err, err_len, errno, "removing", victim);
			goto out;
		}
		if (rename(src, victim) != 0) {
			rc = fail_errno(err, err_len, errno, "renaming for removal", src);
			goto out;
		}
		char *parent = path_parent(src);
		if (parent)
			rc = fsync_dir(parent, err, err_len);
		free(parent);
		if (rc < 0)
			goto out;
	}
	if (nftw(victim, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
		rc = fail_errno(err, err_len, errno, "removing", victim);
out:
	free(victim);
	free(src);
	return rc;
}

/* ---- export ----------------------------------------------------------- */

typedef struct {
	snap_t *s;
	float *buf;
} export_fill_t;

static int export_fill(void *ctx, int i, const float **ret_data, char *err, size_t err_len)
{
	export_fill_t *x = ctx;
	const snap_tensor_t *t = &x->s->m.tensors[i];
	int rc = snap_read_range(x->s, "params", t->offset, tensor_numel(t), x->buf, err, err_len);
	*ret_data = x->buf;
	return rc;
}

int snap_export_hf(snap_t *s, const char *out_path, snap_export_info_t *ret_info, char *err,
                   size_t err_len)
{
	const snap_manifest_t *m = &s->m;
	if (m->n_tensors == 0)
		return fail(err, err_len, -EINVAL,
		            "snapshot %s has no tensor table in its manifest: nothing to export", s->dir);
	st_entry_t *entries = calloc((size_t)m->n_tensors, sizeof *entries);
	json_t *md = json_pack("{s:s}", "format", "pt");
	char *model_text = m->model ? json_dumps(m->model, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	export_fill_t x = {.s = s};
	int64_t max_numel = 0, total = 0;
	int rc;
	if (!entries || !md || !metadata_string(md, "ringmaster.step", m->step) ||
	    (m->model && (!model_text ||
	                  json_object_set_new(md, "ringmaster.model", json_string(model_text)) != 0))) {
		rc = fail(err, err_len, -ENOMEM, "out of memory exporting %s", s->dir);
		goto out;
	}
	for (int i = 0; i < m->n_tensors; i++) {
		const snap_tensor_t *t = &m->tensors[i];
		entries[i] = (st_entry_t){.name = t->name, .ndim = t->ndim,
		                          .shape = {t->shape[0], t->shape[1]}, .numel = tensor_numel(t)};
		if (entries[i].numel > max_numel)
			max_numel = entries[i].numel;
		total += entries[i].numel;
	}
	x.buf = malloc((size_t)max_numel * sizeof *x.buf);
	if (!x.buf) {
		rc = fail(err, err_len, -ENOMEM, "out of memory exporting %s (%lld floats for one tensor)",
		          s->dir, (long long)max_numel);
		goto out;
	}
	snap_export_info_t info = {.n_tensors = m->n_tensors, .n_params = total};
	char hex[SNAP_XXH3_HEX_LEN + 1];
	rc = st_write(out_path, entries, m->n_tensors, md, export_fill, &x, &info.bytes, hex, err, err_len);
	if (rc == 0 && ret_info)
		*ret_info = info;
out:
	free(x.buf);
	free(model_text);
	json_decref(md);
	free(entries);
	return rc;
}

/* ---- listing and pruning a job's folder (the trainer's and the rank's) ---- */

/* A committed folder's step: "step-N" in snap_step_dirname's form only
 * (never "step-N.tmp" or "step-N.deleting"). Uses public calls alone. */
static bool list_step_of(const char *name, int64_t *ret_step)
{
	long long st;
	int used = 0;
	char canon[SNAP_DIRNAME_MAX];
	if (sscanf(name, "step-%lld%n", &st, &used) != 1 || name[used] != '\0' || st < 0)
		return false;
	if (strcmp(snap_step_dirname((int64_t)st, canon, sizeof canon), name) != 0)
		return false;
	*ret_step = (int64_t)st;
	return true;
}

int snap_list_steps(const char *job_dir, int64_t **ret_steps, char *err, size_t err_len)
{
	*ret_steps = NULL;
	DIR *d = opendir(job_dir);
	if (!d) {
		int e = errno;
		snprintf(err, err_len, "cannot list %s: %s", job_dir, strerror(e));
		return -e;
	}
	int64_t *steps = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		int64_t st;
		if (!list_step_of(e->d_name, &st))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			int64_t *grown = realloc(steps, cap * sizeof *steps);
			if (!grown) {
				free(steps);
				closedir(d);
				snprintf(err, err_len, "out of memory");
				return -ENOMEM;
			}
			steps = grown;
		}
		steps[n++] = st;
	}
	closedir(d);
	*ret_steps = steps;
	return (int)n;
}

/* Finish the deletes a crash interrupted: `step-N.deleting` folders (a
 * snap_remove renamed them, then the process died) are never loaded; they
 * only take space. */
static void prune_finish_deletes(const char *job_dir)
{
	DIR *d = opendir(job_dir);
	if (!d)
		return;
	struct dirent *e;
	char path[4096], why[512];
	while ((e = readdir(d)) != NULL) {
		size_t n = strlen(e->d_name);
		if (strncmp(e->d_name, "step-", 5) != 0 || n < 9 ||
		    strcmp(e->d_name + n - 9, ".deleting") != 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", job_dir, e->d_name);
		(void)snap_remove(path, why, sizeof why);
	}
	closedir(d);
}

int snap_prune(const char *job_dir, int keep_last, int64_t keep_every, int64_t *ret_deleted,
               int max_deleted, char *err, size_t err_len)
{
	prune_finish_deletes(job_dir);
	int64_t *steps;
	int listed = snap_list_steps(job_dir, &steps, err, err_len);
	if (listed < 0)
		return listed;
	size_t n = (size_t)listed;
	bool *keep = calloc(n ? n : 1, sizeof(bool));
	if (!keep) {
		free(steps);
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	snap_retention(steps, n, keep_last, keep_every, keep);
	int deleted = 0, rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (keep[i])
			continue;
		char name[SNAP_DIRNAME_MAX], path[4096];
		snprintf(path, sizeof path, "%s/%s", job_dir, snap_step_dirname(steps[i], name, sizeof name));
		rc = snap_remove(path, err, err_len);
		if (rc == 0 && deleted < max_deleted)
			ret_deleted[deleted++] = steps[i];
	}
	free(keep);
	free(steps);
	return rc < 0 ? rc : deleted;
}
