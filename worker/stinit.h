/*
 * stinit: a model's initial parameters from pretrained weights, a
 * safetensors file or a sharded set (`init.safetensors` in the job spec).
 *
 * A safetensors file is 8 bytes of little-endian header length N, N bytes
 * of a JSON object {name: {"dtype", "shape", "data_offsets": [begin, end]},
 * "__metadata__": {...}}, then the tensors' bytes (offsets relative to the
 * end of the header). A sharded set is a `model.safetensors.index.json`
 * whose "weight_map" names the file (beside the index) of each tensor.
 *
 * stinit_open maps the file(s) beneath the agent's data root (beneath.h:
 * no absolute path, no "..", no link out), checks every header and then
 * every tensor of the model's table: present, the same shape, dtype F32,
 * BF16 or F16; tensors the model does not have are refused by name (a
 * checkpoint of another architecture or shape must not load silently)
 * except the rotary `inv_freq` buffers some exporters write. With tied
 * embeddings the table has no lm_head.weight; a file's one with the
 * embedding's shape is ignored. stinit_read_range then converts any range
 * of the flat parameter buffer to fp32, so a ZeRO-3 rank reads only its
 * shard. Errors name the tensor, the file (as the spec gives it) and both
 * shapes; the file's bytes are never printed.
 */
#ifndef RINGMASTER_WORKER_STINIT_H
#define RINGMASTER_WORKER_STINIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"

typedef struct stinit stinit_t;

#define STINIT_MAX_HEADER_BYTES (100u << 20) /* the safetensors reference implementation's limit */

/*
 * Open `path` (a .safetensors file, or a name ending in ".index.json": a
 * sharded set's index) beneath `root` (NULL: as given, unconfined) and
 * check it against the model's table `tensors` (n_tensors entries,
 * borrowed until stinit_free). `tied`: the model ties lm_head to the token
 * embedding. On success sets *ret and returns 0; otherwise a negative errno
 * (-ENOENT, -EXDEV leaving the root, -EINVAL a bad header or a mismatch,
 * -ENOMEM) with one line in err beginning "init.safetensors: ".
 */
int stinit_open(const char *root, const char *path, const model_tensor_t *tensors, int n_tensors,
		bool tied, stinit_t **ret, char *err, size_t errlen);

/*
 * Write floats [lo, hi) of the flat parameter buffer (the table's offsets)
 * into out[0 .. hi-lo), converted from the file's dtype. Parts of the range
 * no tensor covers are left as they are. hi <= the table's end.
 */
void stinit_read_range(const stinit_t *st, size_t lo, size_t hi, float *out);

/* How many of the model's tensors were found, and in how many files. */
int stinit_num_tensors(const stinit_t *st);
int stinit_num_files(const stinit_t *st);

/* Unmap and free; accepts NULL. */
void stinit_free(stinit_t *st);

/*
 * Check one safetensors file held in memory (`data`, `size` bytes): its
 * header and every entry's dtype, shape and offsets against the data that
 * follows, without a model. 0, or -EINVAL/-ENOMEM with one line in err
 * naming `name`. What stinit_open runs on each file; the fuzz harness's
 * entry point.
 */
int stinit_check_buffer(const void *data, size_t size, const char *name, char *err, size_t errlen);

#endif
