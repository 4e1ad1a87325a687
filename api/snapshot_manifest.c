/*
 * snapshot_manifest: manifest.json of a snapshot (see snapshot.h and
 * docs/snapshots.md): the checks every manifest must pass, whether the
 * trainer built it or it was read from disk (ranges of the flat buffer that
 * tile it exactly, one file per rank, tensors inside the buffer and not
 * overlapping, ...), and its conversion to and from JSON. Reading treats the
 * JSON as hostile: every field is type-checked and named in the error.
 */
#include "snapshot_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	int64_t lo, count;
	int idx;
} span_t;

static int cmp_span(const void *a, const void *b)
{
	return cmp_i64(((const span_t *)a)->lo, ((const span_t *)b)->lo);
}

/* Checks m against every rule of the format; one line in err names the field. */
int snap_manifest_check(const snap_manifest_t *m, const char *where, char *err, size_t err_len)
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

json_t *snap_manifest_to_json(const snap_manifest_t *m)
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

/* Field readers for snap_manifest_from_json(); each names the field on failure. */
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

void snap_manifest_clear(snap_manifest_t *m)
{
	json_decref(m->data_cursor);
	json_decref(m->rng);
	json_decref(m->model);
	free(m->files);
	free(m->tensors);
	memset(m, 0, sizeof *m);
}

/* Fills m (owning what it points to) from root; the caller clears m on failure. */
int snap_manifest_from_json(json_t *root, const char *where, snap_manifest_t *m, char *err,
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
	return snap_manifest_check(m, where, err, err_len);
}
