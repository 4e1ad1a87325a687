/*
 * data: token streams for training, and the order in which samples are drawn
 * from them.
 *
 * A data source is one or more files (a path, or a glob(3) pattern whose
 * matches are taken in sorted order) of one format, memory-mapped and read as
 * one concatenated stream of token ids:
 *
 *   nanogpt  flat little-endian uint16 tokens (nanoGPT's train.bin)
 *   llmc     a header of 256 little-endian int32 (magic 20240520, version,
 *            token count), then that many tokens (llm.c's shards): uint16
 *            for version 1 (GPT-2), uint32 for version 2 (Llama 3); each
 *            file's header decides its width
 *   text     raw bytes, each byte one token (vocabulary 256)
 *   uint32   flat little-endian uint32 tokens (large vocabularies)
 *
 * Every token is checked against the vocabulary when the source is opened.
 *
 * Sampling. A sample is a window of T+1 tokens (T inputs, and the same shifted
 * by one as targets). The stream of N tokens is cut into
 * n_windows = floor((N-1)/T) non-overlapping windows; window w starts at token
 * w*T. Global sample i belongs to epoch e = i / n_windows and is window
 * perm_{seed,e}(i mod n_windows), where perm is a keyed Feistel bijection on
 * [0, n_windows). So the sample order is a function of (seed, i) alone.
 *
 * Batches. With B sequences per rank per micro-step, A micro-steps per
 * optimizer step and W ranks, a global batch holds GB = B*A*W samples: global
 * batch g is samples g*GB .. g*GB+GB-1. Rank r takes the interleaved slice of
 * it: its micro-step k, row b is sample g*GB + (k*B + b)*W + r. The W slices
 * together are exactly the global batch one rank with B*W (or A*W) would see.
 * The loader's cursor is the global sample index of the next global batch, a
 * plain integer that snapshots save and restore.
 *
 * Validation uses a fixed set of windows of the validation source, evenly
 * spread over it, independent of the seed and of training progress.
 */
#ifndef RINGMASTER_WORKER_DATA_H
#define RINGMASTER_WORKER_DATA_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
	DATA_FORMAT_NANOGPT = 0,
	DATA_FORMAT_LLMC,
	DATA_FORMAT_TEXT,
	DATA_FORMAT_UINT32,
} data_format_t;

#define DATA_LLMC_MAGIC 20240520
#define DATA_LLMC_VERSION 1        /* uint16 tokens */
#define DATA_LLMC_VERSION_UINT32 2 /* uint32 tokens (llm.c's Llama 3 shards) */
#define DATA_LLMC_HEADER_INTS 256
#define DATA_LLMC_HEADER_BYTES (DATA_LLMC_HEADER_INTS * 4)

typedef struct data_source data_source_t;

/*
 * Open the file or glob `pattern` in `format` and check every token against
 * `vocab_size`. `field` names the spec field in messages ("data.train").
 * `root` (the agent's --data-root) confines it: `pattern` must be relative,
 * without "..", and every file it names must resolve beneath `root`,
 * symbolic links included (beneath.h); `root` NULL: `pattern` is opened as
 * given (the user's own `ringworker train`). On success sets *ret_src (free
 * with data_source_free) and returns 0. On failure returns -ENOMEM when
 * memory ran out, another negative errno-style code for a data error
 * (-EXDEV the path leaves the root, -ENOENT missing file or no glob match,
 * -EINVAL bad header, size or token), and writes one line to `err` naming
 * the field and the path as given, never the file's bytes nor a glob match
 * outside the root.
 */
int data_source_open(const char *root, const char *pattern, data_format_t format, int vocab_size,
                     const char *field, data_source_t **ret_src, char *err, size_t errlen);

/* Unmap and free; accepts NULL. */
void data_source_free(data_source_t *src);

/* Tokens in the whole stream, and the files it is made of (sorted). */
uint64_t data_source_num_tokens(const data_source_t *src);
size_t data_source_num_files(const data_source_t *src);
const char *data_source_file(const data_source_t *src, size_t i); /* borrowed */

/* Copy tokens [pos, pos+n) of the stream into out; pos+n <= num_tokens. */
void data_source_read(const data_source_t *src, uint64_t pos, size_t n, int32_t *out);

/*
 * Keyed bijection on [0, n): a Feistel network on the smallest power of four
 * >= n, cycle-walked back into range. n >= 1.
 */
uint64_t data_permute(uint64_t i, uint64_t n, uint64_t key);

/* Windows of T+1 tokens over a source, drawn in a seeded order. */
typedef struct {
	const data_source_t *src; /* borrowed */
	int T;
	uint64_t seed;
	uint64_t n_windows;
} data_sampler_t;

/*
 * Set up sampling windows of T+1 tokens. Fails with -EINVAL and a message
 * ("model.seq_len (256) is longer than the data: data.train has 100 tokens,
 * needs at least 257") when the source holds fewer than T+1 tokens.
 */
int data_sampler_init(data_sampler_t *s, const data_source_t *src, int T, uint64_t seed,
                      const char *field, char *err, size_t errlen);

/* The window (0 .. n_windows-1) of global sample `index`. */
uint64_t data_sampler_window(const data_sampler_t *s, uint64_t index);

/* Global sample `index`: inputs (T) and targets (T). */
void data_sampler_get(const data_sampler_t *s, uint64_t index, int32_t *inputs, int32_t *targets);

/* Who takes which part of a global batch. */
typedef struct {
	int batch_size; /* B: rows per rank per micro-step */
	int grad_accum; /* A: micro-steps per optimizer step */
	int world_size; /* W */
	int rank;       /* r, 0 <= r < W */
} data_layout_t;

/* GB = B * A * W. */
uint64_t data_global_batch_size(const data_layout_t *l);

/* Global sample index of row b of micro-step k of global batch g, for l->rank. */
uint64_t data_sample_index(const data_layout_t *l, uint64_t g, int k, int b);

/* The training loader: a sampler, a layout and a cursor. */
typedef struct {
	data_sampler_t sampler;
	data_layout_t layout;
	uint64_t cursor; /* global sample index of the next global batch: a multiple of GB,
	                  * unless a snapshot of a run with another GB was resumed */
} data_loader_t;

/* Start at cursor 0. Borrows nothing beyond what `sampler` borrows. */
void data_loader_init(data_loader_t *l, const data_sampler_t *sampler, const data_layout_t *layout);

/* Micro-step k (0 <= k < A) of the global batch at the cursor for this
 * rank: inputs and targets, each (B, T). Sample b of micro-step k is global
 * sample cursor + (k * B + b) * W + rank (data_sample_index when the cursor
 * is a multiple of GB), so the samples go on exactly where the cursor points
 * whatever the global batch was before it. */
void data_loader_micro_batch(const data_loader_t *l, int k, int32_t *inputs, int32_t *targets);

/* Move the cursor to the next global batch. */
void data_loader_advance(data_loader_t *l);

/* The cursor (global sample index), and setting it back (resume). */
uint64_t data_loader_cursor(const data_loader_t *l);
void data_loader_seek(data_loader_t *l, uint64_t cursor);

/*
 * Validation batch k (0 <= k < n_batches) of B rows: rows use windows
 * floor(j * n_windows / (n_batches*B)) for j = k*B .. k*B+B-1 (or j mod
 * n_windows when there are fewer windows than rows), in stream order.
 */
void data_val_batch(const data_sampler_t *val, int n_batches, int B, int k, int32_t *inputs,
                    int32_t *targets);

const char *data_format_name(data_format_t f);

#endif
