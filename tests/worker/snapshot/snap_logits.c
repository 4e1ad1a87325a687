/*
 * snap_logits: the engine's logits for the weights of a committed snapshot,
 * for test_export_logits.py, which compares them with PyTorch's on the
 * `ringctl export` of the same snapshot.
 *
 *   snap_logits SNAPSHOT_DIR OUT.bin
 *
 * Takes the model config from the manifest's "model" object, creates an fp32
 * gpt2_t for it, opens and verifies the snapshot (snap_open + snap_verify),
 * checks that its tensor table is the engine's (names, shapes, offsets),
 * reads the whole "params" flat buffer into the model with snap_read_range,
 * and runs a forward pass without targets on a fixed batch: B = 2 sequences
 * of T = min(16, seq_len) tokens drawn from an LCG (below) mod vocab_size.
 *
 * OUT.bin, little-endian, no padding:
 *
 *   offset 0   char[8]  "RMLOGIT1"
 *          8   uint32   version (1)
 *         12   int32    B
 *         16   int32    T
 *         20   int32    V (vocab_size)
 *         24   int32    tokens[B][T]
 *   24+4*B*T   float32  logits[B][T][V]
 *
 * Exit status 0 on success; 2 on a usage error; 1 on any other failure, with
 * one line on stderr naming what was wrong.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gpt2.h"
#include "snapshot.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "OUT.bin is written in host byte order and documented as little-endian"
#endif

#define LOGITS_MAGIC "RMLOGIT1"
#define LOGITS_VERSION 1u
#define LOGITS_B 2
#define LOGITS_T_MAX 16

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "snap_logits: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
	exit(1);
}

/* The model config from the manifest's "model" object, as the trainer writes
 * it ({"arch": "gpt2", "n_layer", "n_head", "n_embd", "vocab_size", "seq_len"}). */
static gpt2_config_t config_from_manifest(const snap_manifest_t *man, const char *dir)
{
	if (!man->model)
		die(dir, "manifest.json has no \"model\" object: this snapshot does not say which model it holds");
	gpt2_config_t cfg;
	const char *arch = NULL;
	json_error_t jerr;
	if (json_unpack_ex(man->model, &jerr, 0, "{s?s, s:i, s:i, s:i, s:i, s:i}", "arch", &arch,
	                   "n_layer", &cfg.n_layer, "n_head", &cfg.n_head, "n_embd", &cfg.n_embd,
	                   "vocab_size", &cfg.vocab_size, "seq_len", &cfg.seq_len) != 0) {
		char msg[256 + JSON_ERROR_TEXT_LENGTH];
		snprintf(msg, sizeof msg, "manifest.json \"model\" needs integers n_layer, n_head, n_embd, "
		         "vocab_size, seq_len (%s)", jerr.text);
		die(dir, msg);
	}
	if (arch && strcmp(arch, "gpt2") != 0)
		die("manifest.json model.arch is not \"gpt2\", the only model the engine runs", arch);
	return cfg;
}

/* The manifest's tensor table must be the engine's own, entry for entry. */
static void check_tensor_table(const snap_manifest_t *man, const gpt2_t *model)
{
	char msg[512];
	int n = gpt2_num_tensors(model);
	if (man->n_tensors != n) {
		snprintf(msg, sizeof msg, "the manifest lists %d tensors, the engine has %d for this config",
		         man->n_tensors, n);
		die("tensor table", msg);
	}
	for (int i = 0; i < n; i++) {
		const snap_tensor_t *s = &man->tensors[i];
		const gpt2_tensor_t *t = gpt2_tensor(model, i);
		bool same = strcmp(s->name, t->name) == 0 && s->ndim == t->ndim &&
		            s->offset == (int64_t)t->offset;
		for (int d = 0; same && d < t->ndim; d++)
			same = s->shape[d] == t->shape[d];
		if (!same) {
			snprintf(msg, sizeof msg, "entry %d is \"%s\" (ndim %d, offset %lld) in the manifest, "
			         "\"%s\" (ndim %d, offset %zu) in the engine", i, s->name, s->ndim,
			         (long long)s->offset, t->name, t->ndim, t->offset);
			die("tensor table", msg);
		}
	}
}

static void write_out(const char *path, int B, int T, int V, const int32_t *tokens, const float *logits)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		die(path, strerror(errno));
	uint32_t version = LOGITS_VERSION;
	int32_t dims[3] = {B, T, V};
	size_t n_tokens = (size_t)B * T;
	size_t n_logits = n_tokens * (size_t)V;
	bool ok = fwrite(LOGITS_MAGIC, 1, 8, f) == 8 && fwrite(&version, sizeof version, 1, f) == 1 &&
	          fwrite(dims, sizeof dims, 1, f) == 1 &&
	          fwrite(tokens, sizeof *tokens, n_tokens, f) == n_tokens &&
	          fwrite(logits, sizeof *logits, n_logits, f) == n_logits;
	if (fclose(f) != 0)
		ok = false;
	if (!ok)
		die(path, "write failed (disk full?)");
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: snap_logits SNAPSHOT_DIR OUT.bin\n");
		return 2;
	}
	const char *dir = argv[1];
	const char *out_path = argv[2];
	char err[512];

	snap_t *snap = NULL;
	if (snap_open(dir, &snap, err, sizeof err) != 0)
		die("snap_open", err);
	if (snap_verify(snap, err, sizeof err) != 0)
		die("snap_verify", err);
	const snap_manifest_t *man = snap_manifest(snap);
	gpt2_config_t cfg = config_from_manifest(man, dir);

	int B = LOGITS_B;
	int T = cfg.seq_len < LOGITS_T_MAX ? cfg.seq_len : LOGITS_T_MAX;
	gpt2_t *model = gpt2_create(&cfg, B, T, GPT2_PRECISION_FP32, err, sizeof err);
	if (!model)
		die("gpt2_create", err);
	if (man->n_params != (int64_t)gpt2_num_params(model)) {
		snprintf(err, sizeof err, "the snapshot holds %lld parameters, the engine has %zu for this config",
		         (long long)man->n_params, gpt2_num_params(model));
		die(dir, err);
	}
	check_tensor_table(man, model);
	if (snap_read_range(snap, "params", 0, man->n_params, gpt2_params(model), err, sizeof err) != 0)
		die("snap_read_range", err);

	/* (B, T) token ids: the LCG of the C library's rand() example, mod V. */
	int32_t tokens[LOGITS_B * LOGITS_T_MAX];
	uint32_t x = 12345;
	for (int i = 0; i < B * T; i++) {
		x = x * 1103515245u + 12345u;
		tokens[i] = (int32_t)((x >> 16) % (uint32_t)cfg.vocab_size);
	}
	gpt2_forward(model, tokens, NULL, B, T);
	write_out(out_path, B, T, cfg.vocab_size, tokens, gpt2_logits(model));
	printf("snap_logits: step %lld, %lld parameters, logits (%d, %d, %d) written to %s\n",
	       (long long)man->step, (long long)man->n_params, B, T, cfg.vocab_size, out_path);

	gpt2_free(model);
	snap_close(snap);
	return 0;
}
