/*
 * snap_fixture: writes the snapshots that test_snapshot_export.py exports
 * with the real `ringctl export`. A tiny GPT-2 (n_layer 2, n_embd 32,
 * n_head 4, vocab 64, seq_len 16) with HF tensor names and shapes, random
 * GPT-2-like values, under ROOT/JOB/:
 *   step-00000007/  world size 3, intact (the one export must pick)
 *   step-00000009/  world size 2, the same weights, rank-1's shard corrupted
 *                   after commit (a flipped byte: checksum mismatch)
 *   step-00000011.tmp/  shards of an uncommitted snapshot (never chosen)
 * Usage: snap_fixture ROOT JOB. Exit 0 when all was written.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "snapshot.h"

enum { N_LAYER = 2, N_EMBD = 32, N_HEAD = 4, VOCAB = 64, SEQ = 16, MAX_TENSORS = 64 };

static uint64_t rng = 0x2545f4914f6cdd1dull;

static double uniform(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}

static float gaussian(float stddev)
{
	return (float)(stddev * sqrt(-2.0 * log(uniform())) * cos(2.0 * M_PI * uniform()));
}

static snap_tensor_t tensors[MAX_TENSORS];
static int n_tensors;
static int64_t n_params;

static void add(const char *name, int ndim, int64_t d0, int64_t d1)
{
	snap_tensor_t *t = &tensors[n_tensors++];
	snprintf(t->name, sizeof t->name, "%s", name);
	t->ndim = ndim;
	t->shape[0] = d0;
	t->shape[1] = ndim == 2 ? d1 : 0;
	t->offset = n_params;
	n_params += ndim == 2 ? d0 * d1 : d0;
}

/* The HF GPT-2 table, in the engine's flat order. */
static void build_table(void)
{
	const int64_t C = N_EMBD;
	char name[SNAP_NAME_MAX];
	add("wte.weight", 2, VOCAB, C);
	add("wpe.weight", 2, SEQ, C);
	for (int l = 0; l < N_LAYER; l++) {
		static const struct {
			const char *suffix;
			int ndim;
			int64_t d0, d1; /* in units of C */
		} block[] = {
			{"ln_1.weight", 1, 1, 0},        {"ln_1.bias", 1, 1, 0},
			{"attn.c_attn.weight", 2, 1, 3}, {"attn.c_attn.bias", 1, 3, 0},
			{"attn.c_proj.weight", 2, 1, 1}, {"attn.c_proj.bias", 1, 1, 0},
			{"ln_2.weight", 1, 1, 0},        {"ln_2.bias", 1, 1, 0},
			{"mlp.c_fc.weight", 2, 1, 4},    {"mlp.c_fc.bias", 1, 4, 0},
			{"mlp.c_proj.weight", 2, 4, 1},  {"mlp.c_proj.bias", 1, 1, 0},
		};
		for (size_t k = 0; k < sizeof block / sizeof block[0]; k++) {
			snprintf(name, sizeof name, "h.%d.%s", l, block[k].suffix);
			add(name, block[k].ndim, block[k].d0 * C, block[k].d1 * C);
		}
	}
	add("ln_f.weight", 1, C, 0);
	add("ln_f.bias", 1, C, 0);
}

static int write_shards(const char *dir, int64_t step, int world, const float *p, const float *m,
                        const float *v, snap_file_t *files)
{
	char err[512];
	int64_t s = (n_params + world - 1) / world;
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		perror(dir);
		return -1;
	}
	for (int r = 0; r < world; r++) {
		int64_t lo = r * s, count = n_params - lo < s ? n_params - lo : s;
		if (count < 0)
			count = 0;
		snap_shard_info_t info;
		if (snap_shard_write(dir, r, world, step, n_params, lo, count, p + lo, m + lo, v + lo, &info,
		                     err, sizeof err) != 0) {
			fprintf(stderr, "snap_fixture: %s\n", err);
			return -1;
		}
		files[r] = (snap_file_t){.rank = r, .lo = lo, .count = count, .bytes = info.bytes};
		strcpy(files[r].name, info.name);
		strcpy(files[r].xxh3, info.xxh3);
	}
	return 0;
}

static int snapshot(const char *job_dir, int64_t step, int world, bool commit, const float *p,
                    const float *m, const float *v)
{
	char name[SNAP_DIRNAME_MAX], tmp[4096], fin[4096], err[512];
	snap_file_t files[8];
	snap_step_dirname(step, name, sizeof name);
	snprintf(tmp, sizeof tmp, "%s/%s.tmp", job_dir, name);
	snprintf(fin, sizeof fin, "%s/%s", job_dir, name);
	if (write_shards(tmp, step, world, p, m, v, files) != 0)
		return -1;
	if (!commit)
		return 0;
	snap_manifest_t man = {
		.step = step, .world_size = world, .sharding = "zero1", .n_params = n_params,
		.adam_t = step,
		.data_cursor = json_pack("{s:I}", "sample", (json_int_t)step * 4),
		.rng = json_pack("{s:I}", "seed", (json_int_t)1337),
		.model = json_pack("{s:i, s:i, s:i, s:i, s:i}", "n_layer", N_LAYER, "n_head", N_HEAD,
		                   "n_embd", N_EMBD, "vocab_size", VOCAB, "seq_len", SEQ),
		.n_files = world, .files = files, .n_tensors = n_tensors, .tensors = tensors,
	};
	int rc = snap_commit(tmp, fin, &man, err, sizeof err);
	json_decref(man.data_cursor);
	json_decref(man.rng);
	json_decref(man.model);
	if (rc != 0) {
		fprintf(stderr, "snap_fixture: %s\n", err);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: snap_fixture ROOT JOB\n");
		return 64;
	}
	char job_dir[4096];
	snprintf(job_dir, sizeof job_dir, "%s/%s", argv[1], argv[2]);
	mkdir(argv[1], 0755);
	if (mkdir(job_dir, 0755) != 0 && errno != EEXIST) {
		perror(job_dir);
		return 1;
	}
	build_table();
	float *p = malloc((size_t)n_params * sizeof *p);
	float *m = malloc((size_t)n_params * sizeof *m);
	float *v = malloc((size_t)n_params * sizeof *v);
	for (int i = 0; i < n_tensors; i++) {
		const snap_tensor_t *t = &tensors[i];
		int64_t numel = t->ndim == 2 ? t->shape[0] * t->shape[1] : t->shape[0];
		bool ln_weight = strstr(t->name, "ln_") && strstr(t->name, ".weight");
		for (int64_t k = 0; k < numel; k++)
			p[t->offset + k] = ln_weight ? 1.0f + gaussian(0.1f) : gaussian(0.02f);
	}
	for (int64_t k = 0; k < n_params; k++) {
		m[k] = gaussian(1e-3f);
		v[k] = fabsf(gaussian(1e-6f));
	}
	int rc = snapshot(job_dir, 7, 3, true, p, m, v) || snapshot(job_dir, 9, 2, true, p, m, v) ||
	         snapshot(job_dir, 11, 1, false, p, m, v);
	if (rc == 0) {
		/* Corrupt step 9 after its commit: one flipped byte in the data of rank 1. */
		char path[4200];
		snprintf(path, sizeof path, "%s/step-00000009/rank-1-of-2.safetensors", job_dir);
		int fd = open(path, O_RDWR);
		unsigned char b = 0;
		if (fd < 0 || pread(fd, &b, 1, 1000) != 1 || (b ^= 1, pwrite(fd, &b, 1, 1000) != 1)) {
			perror(path);
			rc = 1;
		}
		if (fd >= 0)
			close(fd);
	}
	free(p);
	free(m);
	free(v);
	if (rc == 0)
		printf("snap_fixture: %lld parameters in %d tensors under %s\n", (long long)n_params,
		       n_tensors, job_dir);
	return rc != 0;
}
