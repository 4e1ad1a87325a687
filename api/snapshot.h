/*
 * snapshot: the on-disk snapshot format, a contract between processes: rank
 * processes write it, rank 0 commits it, every rank reads it back on resume
 * (at any world size), and `ringctl export` turns it into one Hugging Face
 * safetensors file. docs/snapshots.md describes the format for humans.
 *
 * A snapshot of step N of a job is one folder `<job_dir>/step-<NNNNNNNN>/`
 * holding one `rank-<r>-of-<W>.safetensors` per rank (the range [lo, lo+count)
 * of the flat fp32 parameter buffer and of Adam's m and v, as three tensors
 * "params", "adam_m", "adam_v" in the real safetensors format) and
 * `manifest.json` (step, world size, data cursor, RNG state, per-file range,
 * size and XXH3-64, and the model's tensor table). Shards are written into
 * `step-N.tmp/`; the commit writes the manifest and renames the folder, so a
 * folder named `step-N` is complete by construction and a `.tmp` one is never
 * loaded. Checksums are verified before a snapshot is used.
 *
 * Because shards are ranges of one flat buffer, snap_read_range() can read any
 * range from whichever files overlap it: a snapshot taken by W ranks loads at
 * any other world size.
 *
 * Errors: functions return 0 (or a count) on success and a negative errno on
 * failure, with one line in `err` naming the path and what to do. Nothing
 * here keeps global state; a snap_t is used by one thread at a time.
 * Depends on libc, jansson and xxHash only.
 */
#ifndef RINGMASTER_API_SNAPSHOT_H
#define RINGMASTER_API_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define SNAP_SHARD_FORMAT "ringmaster-shard-1"       /* shard __metadata__.format */
#define SNAP_MANIFEST_FORMAT "ringmaster-snapshot-1" /* manifest.json "format" */
#define SNAP_MANIFEST_NAME "manifest.json"
#define SNAP_XXH3_HEX_LEN 16 /* XXH3-64 as 16 lowercase hex digits */
#define SNAP_NAME_MAX 96     /* file and tensor names, with the NUL */
#define SNAP_SHARDING_MAX 32
#define SNAP_DIRNAME_MAX 32  /* "step-%08lld" with the NUL */

/* One shard file as the manifest lists it. */
typedef struct {
	int rank;
	char name[SNAP_NAME_MAX];             /* "rank-<r>-of-<W>.safetensors" */
	int64_t lo;                           /* first element of the flat buffer */
	int64_t count;                        /* elements; 0 for a padding rank */
	int64_t bytes;                        /* file size */
	char xxh3[SNAP_XXH3_HEX_LEN + 1];     /* XXH3-64 of the whole file */
} snap_file_t;

/* One named view into the flat parameter buffer (the model's tensor table). */
typedef struct {
	char name[SNAP_NAME_MAX]; /* HF GPT-2 name, e.g. "h.0.attn.c_attn.weight" */
	int ndim;                 /* 1 or 2 */
	int64_t shape[2];         /* HF shape: c_attn.weight is (C, 3C) */
	int64_t offset;           /* in floats, into the flat buffer */
} snap_tensor_t;

/*
 * What manifest.json holds. Filled by the committer (every pointer borrowed
 * by snap_commit) or by snap_open (then owned by the snap_t).
 */
typedef struct {
	int64_t step;
	int world_size;                   /* ranks that wrote it; n_files == world_size */
	char sharding[SNAP_SHARDING_MAX]; /* "ddp", "zero1", ...: informative only */
	int64_t n_params;                 /* floats in the flat buffer */
	int64_t adam_t;                   /* optimizer steps taken (bias correction) */
	json_t *data_cursor;              /* opaque object from the trainer, or NULL ({}) */
	json_t *rng;                      /* opaque object from the trainer, or NULL ({}) */
	json_t *model;                    /* opaque object (model config), or NULL: optional */
	int n_files;
	snap_file_t *files;     /* one per rank, any order */
	int n_tensors;
	snap_tensor_t *tensors; /* may be empty (then no export) */
} snap_manifest_t;

/* What snap_shard_write() wrote. */
typedef struct {
	char name[SNAP_NAME_MAX]; /* file name inside dir */
	int64_t bytes;
	char xxh3[SNAP_XXH3_HEX_LEN + 1];
} snap_shard_info_t;

/* What snap_export_hf() wrote. */
typedef struct {
	int n_tensors;
	int64_t n_params; /* floats written */
	int64_t bytes;    /* file size */
} snap_export_info_t;

/* An opened, validated snapshot. */
typedef struct snap snap_t;

/* Called by snap_find_latest() for each committed snapshot it passes over. */
typedef void (*snap_skip_fn)(int64_t step, const char *reason, void *userdata);

/*
 * Writes "step-%08lld" for step into buf (at least SNAP_DIRNAME_MAX bytes).
 * Returns buf.
 */
char *snap_step_dirname(int64_t step, char *buf, size_t buf_len);

/*
 * The range of the flat buffer that rank holds at world_size ranks, the
 * trainer's ZeRO layout: S = ceil(n_params / world_size), lo = rank * S,
 * count = clamp(n_params - lo, 0, S) (a trailing rank may hold nothing).
 * Rank 0 uses it to fill snap_file_t.lo/count from SNAPSHOT_COMMIT.
 */
void snap_shard_range(int64_t n_params, int world_size, int rank, int64_t *ret_lo,
                      int64_t *ret_count);

/*
 * Writes this rank's shard `<dir>/rank-<rank>-of-<world_size>.safetensors`:
 * count floats from each of params, adam_m, adam_v (the range [lo, lo+count)
 * of the flat buffers; the pointers point at element lo, may be NULL when
 * count is 0). Writes to a hidden temporary name, fsyncs it, renames it into
 * place and fsyncs dir; on failure the partial file is removed. dir must
 * exist. Fills *ret_info (name, bytes, XXH3 of the whole file) on success.
 * Errors: -EINVAL for bad arguments, -ENOSPC ("disk full"), -EFBIG, or the
 * errno of the failing call, with one line in err naming the path.
 */
int snap_shard_write(const char *dir, int rank, int world_size, int64_t step, int64_t n_params,
                     int64_t lo, int64_t count, const float *params, const float *adam_m,
                     const float *adam_v, snap_shard_info_t *ret_info, char *err, size_t err_len);

/*
 * Commits a snapshot: checks manifest (the same checks as snap_open, and
 * every listed file present in tmp_dir with its size), writes
 * tmp_dir/manifest.json and fsyncs it, renames tmp_dir to final_dir and
 * fsyncs final_dir's parent. Everything in manifest is borrowed.
 * Idempotent: when tmp_dir is gone and final_dir already holds this very
 * snapshot (same step, files, sizes and checksums in its manifest), returns
 * 0, so a repeated SNAPSHOT_COMMIT is answered again. Errors: -EINVAL (a bad
 * manifest, named), -ENOENT (a shard missing), -EEXIST (final_dir holds
 * something else), or an errno from the file system.
 */
int snap_commit(const char *tmp_dir, const char *final_dir, const snap_manifest_t *manifest,
                char *err, size_t err_len);

/*
 * Opens the snapshot folder dir: reads manifest.json and checks every field
 * (format, types, ranges; one file per rank whose ranges cover [0, n_params)
 * exactly without overlap; tensors inside the buffer, not overlapping).
 * Shard files are not read here. On success *ret_snap is a new snap_t
 * (free it with snap_close). Errors: -ENOENT (no manifest), -EINVAL (a bad
 * manifest: err names the field), -ENOMEM.
 */
int snap_open(const char *dir, snap_t **ret_snap, char *err, size_t err_len);

/* Frees s; accepts NULL. */
void snap_close(snap_t *s);

/* The manifest (borrowed; valid until snap_close). */
const snap_manifest_t *snap_manifest(const snap_t *s);

/* The folder s was opened from (borrowed). */
const char *snap_dir(const snap_t *s);

/*
 * Reads every shard file and compares its size and XXH3-64 with the
 * manifest. Returns 0 when all match, -EBADMSG naming the first file that
 * does not (or the errno of a failed read).
 */
int snap_verify(snap_t *s, char *err, size_t err_len);

/*
 * Fills out[0..count) with elements [lo, lo+count) of the flat buffer
 * `tensor` ("params", "adam_m" or "adam_v"), reading from the shard files
 * that overlap the range. Each file's safetensors header is checked once
 * (dtype F32, shape [count], offsets in range and covering the data, metadata
 * agreeing with the manifest, file size). Does not verify checksums: call
 * snap_verify first. Errors: -EINVAL (bad tensor name or range), -EBADMSG (a
 * malformed shard, named), or the errno of a failed read.
 */
int snap_read_range(snap_t *s, const char *tensor, int64_t lo, int64_t count, float *out,
                    char *err, size_t err_len);

/*
 * Finds the newest usable snapshot of a job: among the committed folders
 * `step-N` of job_dir (never `step-N.tmp` or `step-N.deleting`), newest
 * first, the first whose manifest opens, names the folder's step, and whose
 * checksums verify. Each one passed over is reported through on_skip (may
 * be NULL) with its step and the reason. On success writes the step to
 * *ret_step and the folder's path to ret_dir. Returns 0, -ENOENT when job_dir
 * holds no usable snapshot (err says which: no folder, none committed, all
 * corrupt), -ENAMETOOLONG if ret_dir is too small.
 */
int snap_find_latest(const char *job_dir, int64_t *ret_step, char *ret_dir, size_t ret_dir_len,
                     snap_skip_fn on_skip, void *userdata, char *err, size_t err_len);

/*
 * snap_find_latest among the snapshots of steps <= max_step only (a resume
 * bounded by the coordinator's record of what was committed: a folder
 * renamed whose commit never reached the coordinator is not used).
 */
int snap_find_latest_upto(const char *job_dir, int64_t max_step, int64_t *ret_step, char *ret_dir,
                          size_t ret_dir_len, snap_skip_fn on_skip, void *userdata, char *err,
                          size_t err_len);

/*
 * Retention, a pure function: sets keep_mask[i] for the snapshots to keep
 * among steps[0..n) (any order, distinct): the keep_last newest plus every
 * step divisible by keep_every (0: none of those). keep_last below 1 counts
 * as 1: the newest committed snapshot is the resume point and is never given
 * up. O(n^2), fine for the few hundred snapshots a job keeps.
 */
void snap_retention(const int64_t *steps, size_t n, int keep_last, int64_t keep_every,
                    bool *keep_mask);

/*
 * Deletes the snapshot folder dir: renames it to `<dir>.deleting` first (so a
 * crash never leaves a half-deleted folder with a committed name), then
 * removes it and what it holds. A dir already ending in `.deleting` is just
 * removed (finishing an interrupted delete). Returns 0 or a negative errno.
 */
int snap_remove(const char *dir, char *err, size_t err_len);

/*
 * Exports the model weights of s as one safetensors file at out_path: every
 * tensor of the manifest's tensor table under its own name and shape, F32,
 * in table order, `__metadata__` {"format": "pt"} (plus "ringmaster.step"
 * and, when the manifest has one, "ringmaster.model" as JSON text), assembled
 * from the params ranges of all shards. Written to a temporary name, fsynced
 * and renamed. Does not verify checksums (call snap_verify first). Fills
 * *ret_info when not NULL. Errors: -EINVAL (no tensor table), errors of
 * snap_read_range, or the errno of a failed write (ENOSPC: "disk full").
 */
int snap_export_hf(snap_t *s, const char *out_path, snap_export_info_t *ret_info, char *err,
                   size_t err_len);

/* As snap_export_hf, with `bf16`: every tensor as BF16 (rounded to nearest
 * even from the fp32 master weights), half the bytes. */
int snap_export_hf_dtype(snap_t *s, const char *out_path, bool bf16, snap_export_info_t *ret_info,
                         char *err, size_t err_len);

/* Whether a manifest's model object (the job spec's model section) is a
 * Llama's ("arch": "llama"); false for NULL. */
bool snap_model_is_llama(const json_t *model);

/*
 * Hugging Face's config.json for a Llama manifest model object (borrowed):
 * LlamaForCausalLM, hidden_size, intermediate_size, heads, layers,
 * num_key_value_heads, vocab_size, max_position_embeddings (seq_len),
 * rms_norm_eps, rope_theta, rope_scaling ({"rope_type": "llama3", ...} or
 * null), tie_word_embeddings, torch_dtype "float32" ("bfloat16" with
 * `bf16`), hidden_act "silu", no
 * biases. New reference in *ret_config. -EINVAL with a line in err when a
 * field is missing or the model is not a Llama.
 */
int snap_hf_llama_config(const json_t *model, bool bf16, json_t **ret_config, char *err,
                         size_t err_len);

/*
 * A Llama snapshot exported as a Hugging Face model folder out_dir (created
 * 0700 when missing; an existing folder is written into): model.safetensors
 * (snap_export_hf_dtype, F32 or with `bf16` BF16) and config.json
 * (snap_hf_llama_config), each written to a
 * temporary name and renamed, then the folder synced. Errors as
 * snap_export_hf and snap_hf_llama_config; -ENOTDIR when out_dir exists
 * and is not a folder.
 */
int snap_export_hf_dir(snap_t *s, const char *out_dir, bool bf16, snap_export_info_t *ret_info,
                       char *err, size_t err_len);

/*
 * The steps of the committed `step-N` folders of job_dir (snap_step_dirname's
 * form; not `.tmp` or `.deleting` ones), unordered, malloc'ed into
 * *ret_steps (free it; NULL when none). Returns how many, or a negative
 * errno with one line in err.
 */
int snap_list_steps(const char *job_dir, int64_t **ret_steps, char *err, size_t err_len);

/*
 * Retention applied to a job's folder: of its committed snapshots keep
 * those snap_retention keeps (the keep_last newest and every step divisible
 * by keep_every), delete the others (snap_remove), and finish any delete a
 * crash interrupted (`step-N.deleting` folders). The steps deleted go to
 * ret_deleted (at most max_deleted of them are listed). Returns how many
 * it listed there, or a negative errno with one line in err.
 */
int snap_prune(const char *job_dir, int keep_last, int64_t keep_every, int64_t *ret_deleted,
               int max_deleted, char *err, size_t err_len);

#endif
