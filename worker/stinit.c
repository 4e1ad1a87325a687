/*
 * stinit: see stinit.h. The files are memory-mapped and their headers
 * parsed once (jansson, duplicates refused); each tensor of the model's
 * table is then bound to its bytes in one file, and ranges are converted
 * on demand. Little-endian hosts only, as the snapshot format.
 */
#include "stinit.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "data/beneath.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors files are little-endian; a big-endian host needs byte swapping here"
#endif

#define MAX_NDIM 8
#define MAX_NAME_BYTES 1024
#define MAX_INDEX_BYTES (64u << 20)

enum { DT_F32, DT_BF16, DT_F16, DT_OTHER };

typedef struct {
	char *name;
	char dtype_name[16];
	int dtype; /* DT_* */
	int ndim;
	int64_t shape[MAX_NDIM];
	uint64_t begin, end; /* bytes, relative to the data section */
} s_entry_t;

typedef struct {
	char *path; /* as the spec (or the index) names it */
	const uint8_t *map;
	size_t map_bytes;
	const uint8_t *data; /* after the header */
	size_t data_bytes;
	s_entry_t *entries;
	int n_entries;
} s_file_t;

struct stinit {
	s_file_t *files;
	int n_files;
	const model_tensor_t *tensors;
	int n_tensors;
	const uint8_t **src; /* (n_tensors) each tensor's first byte, NULL when absent */
	int *src_dtype;      /* (n_tensors) */
	int n_found;
};

__attribute__((format(printf, 4, 5)))
static int s_fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
	if (err && errlen) {
		int n = snprintf(err, errlen, "init.safetensors: ");
		va_list ap;
		va_start(ap, fmt);
		if (n > 0 && (size_t)n < errlen)
			vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return code;
}

/* "(4, 64)" */
static void s_shape_str(int ndim, const int64_t *shape, char *buf, size_t size)
{
	size_t used = (size_t)snprintf(buf, size, "(");
	for (int d = 0; d < ndim && used < size; d++)
		used += (size_t)snprintf(buf + used, size - used, "%s%" PRId64, d ? ", " : "", shape[d]);
	if (used < size)
		snprintf(buf + used, size - used, "%s)", ndim == 1 ? "," : "");
}

static int s_dtype(const char *name, int *ret_size)
{
	static const struct {
		const char *name;
		int size, dt;
	} table[] = {
		{"F32", 4, DT_F32}, {"BF16", 2, DT_BF16}, {"F16", 2, DT_F16}, {"F64", 8, DT_OTHER},
		{"I64", 8, DT_OTHER}, {"I32", 4, DT_OTHER}, {"I16", 2, DT_OTHER}, {"I8", 1, DT_OTHER},
		{"U64", 8, DT_OTHER}, {"U32", 4, DT_OTHER}, {"U16", 2, DT_OTHER}, {"U8", 1, DT_OTHER},
		{"BOOL", 1, DT_OTHER}, {"F8_E4M3", 1, DT_OTHER}, {"F8_E5M2", 1, DT_OTHER},
	};
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
		if (strcmp(name, table[i].name) == 0) {
			*ret_size = table[i].size;
			return table[i].dt;
		}
	}
	return -1;
}

static void s_file_clear(s_file_t *f)
{
	for (int i = 0; i < f->n_entries; i++)
		free(f->entries[i].name);
	free(f->entries);
	if (f->map)
		munmap((void *)f->map, f->map_bytes);
	free(f->path);
	memset(f, 0, sizeof *f);
}

/* One header entry `v` named `key`; `data_bytes` follow the header. */
static int s_parse_entry(const char *name, const char *key, const json_t *v, size_t data_bytes,
			 s_entry_t *e, char *err, size_t errlen)
{
	const json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
	const json_t *offs = json_object_get(v, "data_offsets");
	if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs) ||
	    json_array_size(offs) != 2 || json_object_size(v) != 3)
		return s_fail(err, errlen, -EINVAL,
			      "'%s': the header's entry \"%s\" is not {\"dtype\", \"shape\", \"data_offsets\": [begin, end]}",
			      name, key);
	int size = 0;
	e->dtype = s_dtype(json_string_value(dt), &size);
	if (e->dtype < 0)
		return s_fail(err, errlen, -EINVAL, "'%s': tensor \"%s\" has an unknown dtype", name, key);
	snprintf(e->dtype_name, sizeof e->dtype_name, "%s", json_string_value(dt));
	if (json_array_size(shape) > MAX_NDIM)
		return s_fail(err, errlen, -EINVAL, "'%s': tensor \"%s\" has more than %d dimensions", name,
			      key, MAX_NDIM);
	e->ndim = (int)json_array_size(shape);
	uint64_t numel = 1;
	for (int d = 0; d < e->ndim; d++) {
		const json_t *x = json_array_get(shape, (size_t)d);
		if (!json_is_integer(x) || json_integer_value(x) < 0 ||
		    json_integer_value(x) > ((json_int_t)1 << 40))
			return s_fail(err, errlen, -EINVAL, "'%s': tensor \"%s\" has a bad shape", name, key);
		e->shape[d] = json_integer_value(x);
		numel *= (uint64_t)e->shape[d];
		if (numel > ((uint64_t)1 << 48))
			return s_fail(err, errlen, -EINVAL, "'%s': tensor \"%s\" is too large", name, key);
	}
	const json_t *b = json_array_get(offs, 0), *en = json_array_get(offs, 1);
	if (!json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 ||
	    json_integer_value(en) < json_integer_value(b) ||
	    (uint64_t)json_integer_value(en) > data_bytes)
		return s_fail(err, errlen, -EINVAL,
			      "'%s': tensor \"%s\" has data_offsets outside the file's %zu data bytes", name,
			      key, data_bytes);
	e->begin = (uint64_t)json_integer_value(b);
	e->end = (uint64_t)json_integer_value(en);
	if (e->end - e->begin != numel * (uint64_t)size)
		return s_fail(err, errlen, -EINVAL,
			      "'%s': tensor \"%s\" has %" PRIu64 " bytes but its shape and dtype %s need %" PRIu64,
			      name, key, e->end - e->begin, e->dtype_name, numel * (uint64_t)size);
	e->name = strdup(key);
	return e->name ? 0 : s_fail(err, errlen, -ENOMEM, "out of memory");
}

/* Parse the header of `data` (the whole file) into f's entries. */
static int s_parse(const uint8_t *data, size_t size, const char *name, s_file_t *f, char *err,
		   size_t errlen)
{
	if (size < 8)
		return s_fail(err, errlen, -EINVAL, "'%s' is too short for a safetensors file (%zu bytes)",
			      name, size);
	uint64_t n = 0;
	memcpy(&n, data, 8);
	if (n > STINIT_MAX_HEADER_BYTES || n > size - 8)
		return s_fail(err, errlen, -EINVAL,
			      "'%s' is not a safetensors file: its header length %" PRIu64
			      " is beyond the file's %zu bytes or the %u-byte limit", name, n, size,
			      STINIT_MAX_HEADER_BYTES);
	json_error_t jerr;
	json_t *h = json_loadb((const char *)data + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
	if (!h || !json_is_object(h)) {
		json_decref(h);
		return s_fail(err, errlen, -EINVAL,
			      "'%s' is not a safetensors file: its header is not a JSON object", name);
	}
	f->data = data + 8 + n;
	f->data_bytes = size - 8 - (size_t)n;
	f->entries = calloc(json_object_size(h) + 1, sizeof *f->entries);
	int rc = f->entries ? 0 : s_fail(err, errlen, -ENOMEM, "out of memory");
	const char *key;
	json_t *v;
	json_object_foreach(h, key, v) {
		if (rc < 0)
			break;
		if (strcmp(key, "__metadata__") == 0) {
			if (!json_is_object(v))
				rc = s_fail(err, errlen, -EINVAL, "'%s': __metadata__ must be an object", name);
			continue;
		}
		if (strlen(key) > MAX_NAME_BYTES || strlen(key) == 0) {
			rc = s_fail(err, errlen, -EINVAL, "'%s': a tensor name is empty or over %d bytes",
				    name, MAX_NAME_BYTES);
			continue;
		}
		rc = s_parse_entry(name, key, v, f->data_bytes, &f->entries[f->n_entries], err, errlen);
		if (rc == 0)
			f->n_entries++;
	}
	json_decref(h);
	return rc;
}

int stinit_check_buffer(const void *data, size_t size, const char *name, char *err, size_t errlen)
{
	s_file_t f = {0};
	int rc = s_parse(data, size, name, &f, err, errlen);
	s_file_clear(&f);
	return rc;
}

/* Open `path` beneath root and map it whole. */
static int s_map(const char *root, const char *path, const uint8_t **ret_map, size_t *ret_size,
		 char *err, size_t errlen)
{
	int fd = -1;
	int rc = beneath_open(root, path, O_RDONLY, &fd);
	if (rc < 0)
		return s_fail(err, errlen, rc == -ELOOP ? -EXDEV : rc, "cannot open '%s': %s", path,
			      rc == -EXDEV || rc == -ELOOP
				      ? "it leads out of the agent's --data-root (absolute, '..' or a symbolic link)"
				      : strerror(-rc));
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return s_fail(err, errlen, -EINVAL, "'%s' is not a regular file", path);
	}
	void *p = NULL;
	if (st.st_size > 0) {
		p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (p == MAP_FAILED) {
			int e = errno;
			close(fd);
			return s_fail(err, errlen, -e, "cannot map '%s': %s", path, strerror(e));
		}
	}
	close(fd);
	*ret_map = p;
	*ret_size = (size_t)st.st_size;
	return 0;
}

/* Map and parse one file into st->files (appended). */
static int s_add_file(stinit_t *st, const char *root, const char *path, char *err, size_t errlen)
{
	s_file_t *grown = realloc(st->files, (size_t)(st->n_files + 1) * sizeof *grown);
	if (!grown)
		return s_fail(err, errlen, -ENOMEM, "out of memory");
	st->files = grown;
	s_file_t *f = &st->files[st->n_files];
	memset(f, 0, sizeof *f);
	f->path = strdup(path);
	if (!f->path)
		return s_fail(err, errlen, -ENOMEM, "out of memory");
	st->n_files++;
	int rc = s_map(root, path, &f->map, &f->map_bytes, err, errlen);
	if (rc == 0)
		rc = s_parse(f->map, f->map_bytes, path, f, err, errlen);
	return rc;
}

/* A sharded set: read the index, then each file its weight_map names
 * (beside the index), each once. */
static int s_add_index(stinit_t *st, const char *root, const char *path, char *err, size_t errlen)
{
	const uint8_t *map = NULL;
	size_t size = 0;
	int rc = s_map(root, path, &map, &size, err, errlen);
	if (rc < 0)
		return rc;
	json_error_t jerr;
	json_t *idx = size <= MAX_INDEX_BYTES
			      ? json_loadb((const char *)map, size, JSON_REJECT_DUPLICATES, &jerr)
			      : NULL;
	if (map)
		munmap((void *)map, size);
	const json_t *wm = json_object_get(idx, "weight_map");
	if (!json_is_object(wm)) {
		json_decref(idx);
		return s_fail(err, errlen, -EINVAL,
			      "'%s' is not a safetensors index: no \"weight_map\" object of tensor names to"
			      " file names", path);
	}
	const char *slash = strrchr(path, '/');
	int dir_len = slash ? (int)(slash - path) + 1 : 0;
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)wm, key, v) {
		const char *file = json_string_value(v);
		if (!file || !file[0] || strstr(file, "..") || file[0] == '/') {
			rc = s_fail(err, errlen, -EINVAL,
				    "'%s': weight_map's file for \"%.200s\" must be a file name beside the index",
				    path, key);
			break;
		}
		char full[4096];
		if (snprintf(full, sizeof full, "%.*s%s", dir_len, path, file) >= (int)sizeof full) {
			rc = s_fail(err, errlen, -ENAMETOOLONG, "'%s': a file name is too long", path);
			break;
		}
		bool have = false;
		for (int i = 0; i < st->n_files && !have; i++)
			have = strcmp(st->files[i].path, full) == 0;
		if (!have && (rc = s_add_file(st, root, full, err, errlen)) < 0)
			break;
	}
	json_decref(idx);
	return rc;
}

/* Find `name` in the files: file index and entry, or -1. */
static int s_find(const stinit_t *st, const char *name, const s_entry_t **ret_e)
{
	for (int i = 0; i < st->n_files; i++)
		for (int k = 0; k < st->files[i].n_entries; k++)
			if (strcmp(st->files[i].entries[k].name, name) == 0) {
				*ret_e = &st->files[i].entries[k];
				return i;
			}
	return -1;
}

static bool s_is_rotary_buffer(const char *name)
{
	size_t n = strlen(name), k = strlen("rotary_emb.inv_freq");
	return n >= k && strcmp(name + n - k, "rotary_emb.inv_freq") == 0;
}

/* Bind each table tensor to its bytes; refuse what does not fit. */
static int s_bind(stinit_t *st, const char *path, bool tied, char *err, size_t errlen)
{
	char a[128], b[128];
	for (int t = 0; t < st->n_tensors; t++) {
		const model_tensor_t *mt = &st->tensors[t];
		const s_entry_t *e = NULL;
		int fi = s_find(st, mt->name, &e);
		s_shape_str(mt->ndim, mt->shape, a, sizeof a);
		if (fi < 0)
			return s_fail(err, errlen, -EINVAL,
				      "tensor \"%s\" is missing from '%s' (the model needs it with shape %s)",
				      mt->name, path, a);
		s_shape_str(e->ndim, e->shape, b, sizeof b);
		bool same = e->ndim == mt->ndim;
		for (int d = 0; same && d < e->ndim; d++)
			same = e->shape[d] == mt->shape[d];
		if (!same)
			return s_fail(err, errlen, -EINVAL,
				      "tensor \"%s\" in '%s' has shape %s but the model's is %s",
				      mt->name, st->files[fi].path, b, a);
		if (e->dtype == DT_OTHER)
			return s_fail(err, errlen, -EINVAL,
				      "tensor \"%s\" in '%s' has dtype %s; F32, BF16 and F16 are accepted",
				      mt->name, st->files[fi].path, e->dtype_name);
		st->src[t] = st->files[fi].data + e->begin;
		st->src_dtype[t] = e->dtype;
		st->n_found++;
	}
	/* nothing the model does not have, but the known non-parameters */
	const model_tensor_t *embed = NULL;
	for (int t = 0; t < st->n_tensors; t++)
		if (strcmp(st->tensors[t].name, "model.embed_tokens.weight") == 0)
			embed = &st->tensors[t];
	for (int i = 0; i < st->n_files; i++) {
		for (int k = 0; k < st->files[i].n_entries; k++) {
			const s_entry_t *e = &st->files[i].entries[k];
			bool known = s_is_rotary_buffer(e->name);
			for (int t = 0; t < st->n_tensors && !known; t++)
				known = strcmp(st->tensors[t].name, e->name) == 0;
			if (!known && tied && embed && strcmp(e->name, "lm_head.weight") == 0 &&
			    e->ndim == 2 && e->shape[0] == embed->shape[0] && e->shape[1] == embed->shape[1])
				known = true; /* tied: the embedding is the head */
			if (!known)
				return s_fail(err, errlen, -EINVAL,
					      "'%s' has tensor \"%.200s\" that the model does not have (a"
					      " checkpoint of another architecture or shape?)",
					      st->files[i].path, e->name);
		}
	}
	return 0;
}

int stinit_open(const char *root, const char *path, const model_tensor_t *tensors, int n_tensors,
		bool tied, stinit_t **ret, char *err, size_t errlen)
{
	stinit_t *st = calloc(1, sizeof *st);
	if (!st)
		return s_fail(err, errlen, -ENOMEM, "out of memory");
	st->tensors = tensors;
	st->n_tensors = n_tensors;
	st->src = calloc((size_t)n_tensors + 1, sizeof *st->src);
	st->src_dtype = calloc((size_t)n_tensors + 1, sizeof *st->src_dtype);
	int rc = st->src && st->src_dtype ? 0 : s_fail(err, errlen, -ENOMEM, "out of memory");
	const size_t n = strlen(path), k = strlen(".index.json");
	const bool index = n > k && strcmp(path + n - k, ".index.json") == 0;
	if (rc == 0)
		rc = index ? s_add_index(st, root, path, err, errlen) : s_add_file(st, root, path, err, errlen);
	if (rc == 0)
		rc = s_bind(st, path, tied, err, errlen);
	if (rc < 0) {
		stinit_free(st);
		return rc;
	}
	*ret = st;
	return 0;
}

/* IEEE half to float, subnormals, infinities and NaN included. */
static float s_half(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
	if (exp == 0x1f) {
		bits = sign | 0x7f800000u | man << 13;
	} else if (exp != 0) {
		bits = sign | (exp + 112) << 23 | man << 13;
	} else if (man == 0) {
		bits = sign;
	} else { /* subnormal: normalise */
		int e = -1;
		do {
			man <<= 1;
			e++;
		} while (!(man & 0x400));
		bits = sign | (uint32_t)(112 - e) << 23 | (man & 0x3ff) << 13;
	}
	float f;
	memcpy(&f, &bits, 4);
	return f;
}

void stinit_read_range(const stinit_t *st, size_t lo, size_t hi, float *out)
{
	for (int t = 0; t < st->n_tensors; t++) {
		const model_tensor_t *mt = &st->tensors[t];
		size_t a = mt->offset > lo ? mt->offset : lo;
		size_t b = mt->offset + mt->numel < hi ? mt->offset + mt->numel : hi;
		if (a >= b || !st->src[t])
			continue;
		const uint8_t *p = st->src[t];
		float *o = out + (a - lo);
		size_t i0 = a - mt->offset, n = b - a;
		switch (st->src_dtype[t]) {
		case DT_F32:
			memcpy(o, p + 4 * i0, 4 * n);
			break;
		case DT_BF16:
			for (size_t i = 0; i < n; i++) {
				uint16_t h;
				memcpy(&h, p + 2 * (i0 + i), 2);
				uint32_t bits = (uint32_t)h << 16;
				memcpy(&o[i], &bits, 4);
			}
			break;
		default:
			for (size_t i = 0; i < n; i++) {
				uint16_t h;
				memcpy(&h, p + 2 * (i0 + i), 2);
				o[i] = s_half(h);
			}
			break;
		}
	}
}

int stinit_num_tensors(const stinit_t *st) { return st->n_found; }
int stinit_num_files(const stinit_t *st) { return st->n_files; }

void stinit_free(stinit_t *st)
{
	if (!st)
		return;
	for (int i = 0; i < st->n_files; i++)
		s_file_clear(&st->files[i]);
	free(st->files);
	free(st->src);
	free(st->src_dtype);
	free(st);
}
