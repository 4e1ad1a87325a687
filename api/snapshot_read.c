/*
 * snapshot_read: opening a committed snapshot (its manifest, read with a
 * size cap and checked), verifying every shard's size and XXH3-64 against
 * the manifest, and reading any range of params, adam_m or adam_v from
 * whichever shards overlap it, whatever world size wrote them. Each shard's
 * safetensors header is checked against the manifest on its first read
 * (shard_check_header()); a bad file is refused with a message naming it.
 */
#include "snapshot_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

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
	if ((rc = snap_manifest_from_json(root, path, &s->m, err, err_len)) < 0)
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
	snap_manifest_clear(&s->m);
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
