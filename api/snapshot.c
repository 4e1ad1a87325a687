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
 * st_write(), and shard headers are read back by shard_check_header() in
 * snapshot_read.c. This file holds the writing side (shards, commit), finding
 * and retention, removal and export; snapshot_manifest.c checks and converts
 * the manifest, snapshot_read.c opens, verifies and reads snapshots, and
 * snapshot_internal.h is what they share.
 */
#include "snapshot_internal.h"

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

/* ---- writing helpers ---------------------------------------------------- */

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
	bool bf16; /* written as BF16 (rounded to nearest even), else F32 */
} st_entry_t;

/* fp32 to bf16, rounding to nearest even; NaN stays a (quiet) NaN. */
static uint16_t to_bf16(float f)
{
	uint32_t b;
	memcpy(&b, &f, 4);
	if ((b & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((b >> 16) | 0x40);
	return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1)) >> 16);
}

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
		const int64_t bytes = (entries[i].bf16 ? 2 : 4) * entries[i].numel;
		json_t *t = json_pack("{s:s, s:o, s:[I, I]}", "dtype", entries[i].bf16 ? "BF16" : "F32",
		                      "shape", shape, "data_offsets", (json_int_t)off,
		                      (json_int_t)(off + bytes));
		if (!t)
			goto oom;
		for (int d = 0; d < entries[i].ndim; d++)
			if (json_array_append_new(shape, json_integer(entries[i].shape[d])) != 0) {
				json_decref(t);
				goto oom;
			}
		if (json_object_set_new(header, entries[i].name, t) != 0)
			goto oom;
		off += bytes;
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

	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
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
		const void *out_data = data;
		size_t out_bytes = (size_t)entries[i].numel * 4;
		if (entries[i].bf16) { /* converted in place: fill's buffer is ours until the next call */
			uint16_t *h = (uint16_t *)(void *)data;
			for (int64_t k = 0; k < entries[i].numel; k++)
				h[k] = to_bf16(data[k]);
			out_bytes = (size_t)entries[i].numel * 2;
		}
		if ((rc = write_all(fd, out_data, out_bytes, hash)) < 0) {
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

/* Writes manifest.json into dir (plain write: the folder is not committed yet). */
static int manifest_write(const char *dir, const snap_manifest_t *m, char *err, size_t err_len)
{
	char *path = path_join(dir, SNAP_MANIFEST_NAME);
	json_t *root = snap_manifest_to_json(m);
	char *text = root ? json_dumps(root, JSON_INDENT(1)) : NULL;
	int fd = -1, rc;
	if (!path || !text) {
		rc = fail(err, err_len, -ENOMEM, "out of memory writing the manifest in %s", dir);
		goto out;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
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
	if ((rc = snap_manifest_check(manifest, "snapshot manifest", err, err_len)) < 0)
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
	return snap_export_hf_dtype(s, out_path, false, ret_info, err, err_len);
}

int snap_export_hf_dtype(snap_t *s, const char *out_path, bool bf16, snap_export_info_t *ret_info,
                         char *err, size_t err_len)
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
		                          .shape = {t->shape[0], t->shape[1]}, .numel = tensor_numel(t),
		                          .bf16 = bf16};
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
