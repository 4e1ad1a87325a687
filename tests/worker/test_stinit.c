/*
 * Unit tests for worker/stinit (init.safetensors): real safetensors files
 * written into a temporary data root for a tiny Llama's tensor table
 * (llama_layout): F32, BF16 and F16 values converted exactly, any range of
 * the flat buffer, a sharded set through model.safetensors.index.json, and
 * the refusals: bad headers, a missing tensor, a wrong shape or dtype, a
 * tensor the model does not have, paths that leave the root. Each error
 * must name the tensor, the file and (for shapes) both shapes.
 */
#include "stinit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "engine/llama_layout.h"

static int s_n_passed, s_n_failed;
static int s_failed;
static const char *s_name;
static char s_dir[512];

#define CHECK(c)                                                                             \
	do {                                                                                 \
		if (!(c)) {                                                                  \
			fprintf(stderr, "%s:%d: %s: CHECK(%s) failed\n", __FILE__, __LINE__,  \
				s_name, #c);                                                 \
			s_failed = 1;                                                        \
		}                                                                            \
	} while (0)

#define CHECK_CONTAINS(hay, needle)                                                          \
	do {                                                                                 \
		if (!strstr((hay), (needle))) {                                              \
			fprintf(stderr, "%s:%d: %s: \"%s\" does not contain \"%s\"\n", __FILE__, \
				__LINE__, s_name, (hay), (needle));                          \
			s_failed = 1;                                                        \
		}                                                                            \
	} while (0)

static void s_run(const char *name, void (*fn)(void))
{
	s_name = name;
	s_failed = 0;
	fn();
	if (s_failed) {
		s_n_failed++;
		fprintf(stderr, "FAIL %s\n", name);
	} else {
		s_n_passed++;
		printf("ok   %s\n", name);
	}
}

/* The tiny Llama: 2 layers, C 8, 2 heads, 1 KV head, F 12, V 10. */
static model_config_t s_cfg(bool tied)
{
	return (model_config_t){.n_layer = 2, .n_head = 2, .n_embd = 8, .vocab_size = 10, .seq_len = 16,
				.n_kv_head = 1, .ffn_dim = 12, .rope_theta = 10000, .norm_eps = 1e-5,
				.tie_embeddings = tied};
}

static model_tensor_t *s_table;
static int s_n;
static size_t s_np;

static void s_layout(bool tied)
{
	free(s_table);
	model_config_t c = s_cfg(tied);
	size_t max_range;
	if (llama_layout(&c, &s_table, &s_n, &s_np, &max_range) != 0) {
		fprintf(stderr, "llama_layout failed\n");
		exit(2);
	}
}

/* The value of flat element i: exact in bf16 and f16 (small multiples of 1/8). */
static float s_value(size_t i)
{
	return (float)((int)(i % 61) - 30) / 8.0f;
}

enum { F32, BF16, F16, I32 };

static void s_put(uint8_t *p, float v, int dt)
{
	uint32_t bits;
	memcpy(&bits, &v, 4);
	if (dt == F32 || dt == I32) {
		memcpy(p, &bits, 4);
	} else if (dt == BF16) {
		uint16_t h = (uint16_t)(bits >> 16); /* exact for these values */
		memcpy(p, &h, 2);
	} else { /* f16 of a normal float with few mantissa bits */
		uint32_t sign = (bits >> 16) & 0x8000, exp = (bits >> 23) & 0xff, man = bits & 0x7fffff;
		uint16_t h = v == 0 ? (uint16_t)sign : (uint16_t)(sign | (exp - 112) << 10 | man >> 13);
		memcpy(p, &h, 2);
	}
}

/* Write the table's tensors [first, last) to `name` in dtype dt; `skip`
 * leaves one out, `extra` adds a tensor of that name and shape (4,). The
 * shape of tensor `bad_shape` (>= 0) is written transposed. */
static void s_write(const char *name, int first, int last, int dt, int skip, const char *extra,
		    int bad_shape)
{
	static const char *const dt_names[] = {"F32", "BF16", "F16", "I32"};
	const int w = dt == F32 || dt == I32 ? 4 : 2;
	json_t *h = json_object();
	json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
	size_t off = 0;
	for (int t = first; t < last; t++) {
		if (t == skip)
			continue;
		const model_tensor_t *mt = &s_table[t];
		json_t *shape = mt->ndim == 1 ? json_pack("[I]", (json_int_t)mt->shape[0])
			: t == bad_shape ? json_pack("[I, I]", (json_int_t)mt->shape[1], (json_int_t)mt->shape[0] + 1)
					 : json_pack("[I, I]", (json_int_t)mt->shape[0], (json_int_t)mt->shape[1]);
		size_t numel = t == bad_shape ? (size_t)mt->shape[1] * (size_t)(mt->shape[0] + 1) : mt->numel;
		json_object_set_new(h, mt->name, json_pack("{s:s, s:o, s:[I, I]}", "dtype", dt_names[dt],
							   "shape", shape, "data_offsets", (json_int_t)off,
							   (json_int_t)(off + numel * (size_t)w)));
		off += numel * (size_t)w;
	}
	if (extra) {
		json_object_set_new(h, extra, json_pack("{s:s, s:[i], s:[I, I]}", "dtype", "F32", "shape", 4,
							"data_offsets", (json_int_t)off, (json_int_t)(off + 16)));
		off += 16;
	}
	char *text = json_dumps(h, JSON_COMPACT);
	uint64_t n = strlen(text);
	uint8_t *data = calloc(1, off + 1);
	size_t pos = 0;
	for (int t = first; t < last; t++) {
		if (t == skip)
			continue;
		size_t numel = t == bad_shape ? (size_t)s_table[t].shape[1] * (size_t)(s_table[t].shape[0] + 1)
					      : s_table[t].numel;
		for (size_t i = 0; i < numel; i++, pos += (size_t)w)
			s_put(data + pos, s_value(s_table[t].offset + (i < s_table[t].numel ? i : 0)), dt);
	}
	char path[1024];
	snprintf(path, sizeof path, "%s/%s", s_dir, name);
	FILE *f = fopen(path, "wb");
	fwrite(&n, 8, 1, f);
	fwrite(text, 1, n, f);
	fwrite(data, 1, off, f);
	fclose(f);
	free(data);
	free(text);
	json_decref(h);
}

static void s_write_raw(const char *name, const void *bytes, size_t n)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/%s", s_dir, name);
	FILE *f = fopen(path, "wb");
	fwrite(bytes, 1, n, f);
	fclose(f);
}

static int s_open(const char *path, bool tied, stinit_t **st, char *err)
{
	s_layout(tied);
	return stinit_open(s_dir, path, s_table, s_n, tied, st, err, 1024);
}

static void s_expect_values(const stinit_t *st, size_t lo, size_t hi)
{
	float *out = calloc(hi - lo + 1, sizeof *out);
	stinit_read_range(st, lo, hi, out);
	int bad = 0;
	for (size_t i = lo; i < hi; i++)
		bad += out[i - lo] != s_value(i);
	CHECK(bad == 0);
	free(out);
}

static void test_f32_whole_and_ranges(void)
{
	s_layout(false);
	s_write("m.safetensors", 0, s_n, F32, -1, NULL, -1);
	stinit_t *st = NULL;
	char err[1024] = "";
	CHECK(s_open("m.safetensors", false, &st, err) == 0);
	if (!st) {
		fprintf(stderr, "  %s\n", err);
		return;
	}
	CHECK(stinit_num_tensors(st) == s_n && stinit_num_files(st) == 1);
	s_expect_values(st, 0, s_np);
	/* a ZeRO-3 rank's shard: ranges that cut tensors anywhere */
	s_expect_values(st, 7, 93);
	s_expect_values(st, s_np / 3, 2 * s_np / 3);
	s_expect_values(st, s_np - 1, s_np);
	stinit_free(st);
}

static void test_bf16_f16(void)
{
	for (int dt = BF16; dt <= F16; dt++) {
		s_layout(false);
		s_write("h.safetensors", 0, s_n, dt, -1, NULL, -1);
		stinit_t *st = NULL;
		char err[1024] = "";
		CHECK(s_open("h.safetensors", false, &st, err) == 0);
		if (!st) {
			fprintf(stderr, "  %s\n", err);
			continue;
		}
		s_expect_values(st, 0, s_np); /* every value is exact in 16 bits */
		s_expect_values(st, 11, 200);
		stinit_free(st);
	}
}

static void test_sharded_index(void)
{
	s_layout(false);
	int mid = s_n / 2;
	if (system("mkdir -p \"$STINIT_DIR/ckpt\"") != 0)
		CHECK(0);
	s_write("ckpt/model-00001-of-00002.safetensors", 0, mid, BF16, -1, NULL, -1);
	s_write("ckpt/model-00002-of-00002.safetensors", mid, s_n, F32, -1, NULL, -1);
	json_t *wm = json_object();
	for (int t = 0; t < s_n; t++)
		json_object_set_new(wm, s_table[t].name,
				    json_string(t < mid ? "model-00001-of-00002.safetensors"
							: "model-00002-of-00002.safetensors"));
	json_t *idx = json_pack("{s:{s:i}, s:o}", "metadata", "total_size", 0, "weight_map", wm);
	char *text = json_dumps(idx, JSON_INDENT(2));
	s_write_raw("ckpt/model.safetensors.index.json", text, strlen(text));
	free(text);
	json_decref(idx);
	stinit_t *st = NULL;
	char err[1024] = "";
	CHECK(s_open("ckpt/model.safetensors.index.json", false, &st, err) == 0);
	if (!st) {
		fprintf(stderr, "  %s\n", err);
		return;
	}
	CHECK(stinit_num_files(st) == 2 && stinit_num_tensors(st) == s_n);
	s_expect_values(st, 0, s_np);
	stinit_free(st);

	/* an index naming a file outside its folder */
	const char *evil = "{\"weight_map\": {\"model.norm.weight\": \"../../etc/passwd\"}}";
	s_write_raw("ckpt/evil.index.json", evil, strlen(evil));
	CHECK(s_open("ckpt/evil.index.json", false, &st, err) == -EINVAL);
	CHECK_CONTAINS(err, "must be a file name beside the index");
	s_write_raw("ckpt/none.index.json", "{}", 2);
	CHECK(s_open("ckpt/none.index.json", false, &st, err) == -EINVAL);
	CHECK_CONTAINS(err, "no \"weight_map\" object");
}

static void test_mismatches(void)
{
	s_layout(false);
	stinit_t *st = NULL;
	char err[1024] = "";
	/* missing: tensor 3 is layer 0's k_proj */
	s_write("miss.safetensors", 0, s_n, F32, 3, NULL, -1);
	CHECK(s_open("miss.safetensors", false, &st, err) == -EINVAL);
	CHECK_CONTAINS(err, "init.safetensors: tensor \"model.layers.0.self_attn.k_proj.weight\" is missing from"
		       " 'miss.safetensors' (the model needs it with shape (4, 8))");
	/* wrong shape: both shapes named */
	s_write("shape.safetensors", 0, s_n, F32, -1, NULL, 2);
	CHECK(s_open("shape.safetensors", false, &st, err) == -EINVAL);
	CHECK_CONTAINS(err, "tensor \"model.layers.0.self_attn.q_proj.weight\" in 'shape.safetensors' has shape"
		       " (8, 9) but the model's is (8, 8)");
	/* wrong dtype */
	s_write("int.safetensors", 0, s_n, I32, -1, NULL, -1);
	CHECK(s_open("int.safetensors", false, &st, err) == -EINVAL);
	CHECK_CONTAINS(err, "tensor \"model.embed_tokens.weight\" in 'int.safetensors' has dtype I32; F32, BF16"
		       " and F16 are accepted");
	/* a tensor the model does not have; the rotary buffer is allowed */
	s_write("extra.safetensors", 0, s_n, F32, -1, "model.layers.2.mlp.up_proj.weight", -1);
	CHECK(s_open("extra.safetensors", false, &st, err) == -EINVAL);
	CHECK_CONTAINS(err, "'extra.safetensors' has tensor \"model.layers.2.mlp.up_proj.weight\" that the model"
		       " does not have");
	s_write("rot.safetensors", 0, s_n, F32, -1, "model.layers.0.self_attn.rotary_emb.inv_freq", -1);
	CHECK(s_open("rot.safetensors", false, &st, err) == 0);
	stinit_free(st);
	st = NULL;
	/* tied: the untied file's lm_head (the embedding's shape) is ignored */
	s_write("untied.safetensors", 0, s_n, F32, -1, NULL, -1);
	CHECK(s_open("untied.safetensors", true, &st, err) == 0);
	if (st)
		s_expect_values(st, 0, s_np); /* the tied table is a prefix of the untied one */
	stinit_free(st);
	st = NULL;
	/* untied model, tied file: lm_head missing */
	s_layout(true);
	int n_tied = s_n;
	s_write("tied.safetensors", 0, n_tied, F32, -1, NULL, -1);
	CHECK(s_open("tied.safetensors", false, &st, err) == -EINVAL);
	CHECK_CONTAINS(err, "tensor \"lm_head.weight\" is missing from 'tied.safetensors' (the model needs it with"
		       " shape (10, 8))");
}

static void test_bad_headers(void)
{
	stinit_t *st = NULL;
	char err[1024] = "";
	s_write_raw("short.safetensors", "abc", 3);
	CHECK(s_open("short.safetensors", false, &st, err) == -EINVAL);
	CHECK_CONTAINS(err, "'short.safetensors' is too short for a safetensors file (3 bytes)");
	uint8_t big[16] = {0xff, 0xff, 0xff, 0, 0, 0, 0, 0, '{', '}'};
	s_write_raw("len.safetensors", big, sizeof big);
	CHECK(s_open("len.safetensors", false, &st, err) == -EINVAL);
	CHECK_CONTAINS(err, "its header length 16777215 is beyond the file's 16 bytes");
	uint8_t nj[12] = {4, 0, 0, 0, 0, 0, 0, 0, '[', '1', ']', ' '};
	s_write_raw("notobj.safetensors", nj, sizeof nj);
	CHECK(s_open("notobj.safetensors", false, &st, err) == -EINVAL);
	CHECK_CONTAINS(err, "its header is not a JSON object");
	const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
	uint8_t buf[128] = {0};
	uint64_t n = strlen(h);
	memcpy(buf, &n, 8);
	memcpy(buf + 8, h, n);
	s_write_raw("trunc.safetensors", buf, 8 + n + 4); /* 4 of 8 data bytes */
	CHECK(s_open("trunc.safetensors", false, &st, err) == -EINVAL);
	CHECK_CONTAINS(err, "tensor \"a\" has data_offsets outside the file's 4 data bytes");
	const char *h2 = "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}";
	n = strlen(h2);
	memcpy(buf, &n, 8);
	memcpy(buf + 8, h2, n);
	s_write_raw("count.safetensors", buf, 8 + n + 8);
	CHECK(s_open("count.safetensors", false, &st, err) == -EINVAL);
	CHECK_CONTAINS(err, "tensor \"a\" has 8 bytes but its shape and dtype F32 need 12");
	const char *h3 = "{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}";
	n = strlen(h3);
	memcpy(buf, &n, 8);
	memcpy(buf + 8, h3, n);
	s_write_raw("dtype.safetensors", buf, 8 + n + 8);
	CHECK(s_open("dtype.safetensors", false, &st, err) == -EINVAL);
	CHECK_CONTAINS(err, "tensor \"a\" has an unknown dtype");
	CHECK(s_open("nothere.safetensors", false, &st, err) == -ENOENT);
	CHECK_CONTAINS(err, "cannot open 'nothere.safetensors'");
}

static void test_escaping_paths(void)
{
	stinit_t *st = NULL;
	char err[1024] = "";
	CHECK(s_open("../outside.safetensors", false, &st, err) == -EXDEV);
	CHECK_CONTAINS(err, "leads out of the agent's --data-root");
	CHECK(s_open("/etc/passwd", false, &st, err) == -EXDEV);
	char link[1024];
	snprintf(link, sizeof link, "%s/link.safetensors", s_dir);
	CHECK(symlink("/etc/passwd", link) == 0);
	CHECK(s_open("link.safetensors", false, &st, err) == -EXDEV);
	CHECK_CONTAINS(err, "'link.safetensors'");
	CHECK(strstr(err, "root:") == NULL); /* never the file's bytes */
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(s_dir, sizeof s_dir, "%s/test_stinit.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(s_dir)) {
		perror("mkdtemp");
		return 1;
	}
	setenv("STINIT_DIR", s_dir, 1);
	s_run("f32_whole_and_ranges", test_f32_whole_and_ranges);
	s_run("bf16_f16", test_bf16_f16);
	s_run("sharded_index", test_sharded_index);
	s_run("mismatches", test_mismatches);
	s_run("bad_headers", test_bad_headers);
	s_run("escaping_paths", test_escaping_paths);
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", s_dir);
	free(s_table);
	printf("%d passed, %d failed\n", s_n_passed, s_n_failed);
	return s_n_failed ? 1 : 0;
}
