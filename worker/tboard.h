/*
 * tboard: TensorBoard event files from rank 0 (issue 25), so that
 * `tensorboard --logdir` shows a ringmaster job's scalars next to
 * torchtitan's.
 *
 * A file is a sequence of TFRecords (uint64 length, masked CRC32C of those
 * 8 bytes, the payload, masked CRC32C of the payload; little-endian; mask
 * ((crc >> 15) | (crc << 17)) + 0xa282ead8), each payload one serialized
 * tensorboard.Event (tensorboard/compat/proto/event.proto: wall_time = 1
 * double, step = 2 int64, file_version = 3 string, summary = 5 Summary;
 * summary.proto: Summary.value = 1 repeated Value, Value.tag = 1 string,
 * Value.simple_value = 2 float). The first event carries file_version
 * "brain.Event:2"; then one event per reported step with a simple_value
 * per scalar. The encoder is the few protobuf wire rules those fields need
 * (varint, fixed64, fixed32, length-delimited), written here.
 *
 * Training never waits for the disk: tboard_scalars encodes the event and
 * copies it into a bounded queue under a mutex held only for the copy; a
 * writer thread of this module write()s the queue to the file after every
 * event it is woken for. When the queue is full (the disk stalls for
 * longer than TBOARD_QUEUE_BYTES of events take to produce) the new event
 * is dropped and counted, never the training step. tboard_close writes
 * what is queued, waits for the thread and reports the drops.
 */
#ifndef RINGMASTER_WORKER_TBOARD_H
#define RINGMASTER_WORKER_TBOARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TBOARD_FILE_VERSION "brain.Event:2"
#define TBOARD_QUEUE_BYTES (1 << 20) /* events waiting for the disk at most */
#define TBOARD_MAX_SCALARS 16        /* scalars per event */
#define TBOARD_MAX_TAG 64            /* bytes of a tag */

typedef struct tboard tboard_t;

/* One scalar of a step: a tag ("loss") and its value. */
typedef struct {
	const char *tag;
	double value; /* written as a float (simple_value) */
} tboard_scalar_t;

/* CRC-32C (Castagnoli, reflected polynomial 0x82f63b78, initial value and
 * final xor 0xffffffff) of `n` bytes: "123456789" gives 0xe3069283. */
uint32_t tboard_crc32c(const void *data, size_t n);

/* The TFRecord mask of a CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t tboard_mask(uint32_t crc);

/*
 * Encode one Event into buf (cap bytes): wall_time, then step when
 * nonzero, then file_version when not NULL, else a summary with the n
 * scalars (n <= TBOARD_MAX_SCALARS, tags 1..TBOARD_MAX_TAG bytes).
 * Returns the payload's length, or 0 when it does not fit or an argument
 * is out of range.
 */
size_t tboard_encode_event(uint8_t *buf, size_t cap, double wall_time, int64_t step, const char *file_version,
                           const tboard_scalar_t *v, int n);

/* Frame a payload of n bytes as one TFRecord into out (n + 16 bytes). */
void tboard_frame(const uint8_t *payload, size_t n, uint8_t *out);

/*
 * The folder rank 0 of `job` writes to: <tb_root>/<spec_dir>/<job> with
 * the spec's tensorboard.dir, else <tb_root>/<job> (the agent-wide
 * default); without tb_root, <ckpt_root>/<spec_dir>/<job>. Returns 0 with
 * the path in out, -ENOENT when there is nothing to write (no spec_dir and
 * no tb_root; a spec_dir with neither root), -EINVAL when `job` is not a
 * plain name or spec_dir is not a relative path without '..',
 * -ENAMETOOLONG.
 */
int tboard_job_dir(const char *spec_dir, const char *tb_root, const char *ckpt_root, const char *job, char *out,
                   size_t len);

/*
 * Create `dir` (mkdir -p, 0755) and in it a new file
 * events.out.tfevents.<unix seconds>.<host>.<pid>.<n> (n counts the files
 * this process opened; O_EXCL, no link followed), write the file_version
 * event and start the writer thread. Returns the writer, or NULL with one
 * line in `err`. `ret_path` (may be NULL) gets the file's path.
 */
tboard_t *tboard_open(const char *dir, char *ret_path, size_t path_len, char *err, size_t errlen);

/*
 * What rank 0 does: tboard_job_dir, then tboard_open, saying on `log`
 * ("ringworker rank: ...") where the events go or, as a warning, why none
 * are written (a spec's dir without a root, a folder that cannot be made).
 * NULL when there is nothing to write or it failed: the job goes on.
 */
tboard_t *tboard_open_job(const char *spec_dir, const char *tb_root, const char *ckpt_root, const char *job,
                          FILE *log);

/* tboard_close, with a warning on `log` when events were dropped. */
void tboard_close_job(tboard_t *tb, FILE *log);

/*
 * Queue the event of `step` at `wall_time` (Unix seconds) with the n
 * scalars (non-finite values are left out). Never blocks on the disk; an
 * event that does not fit the queue is dropped and counted.
 */
void tboard_scalars(tboard_t *tb, int64_t step, double wall_time, const tboard_scalar_t *v, int n);

/*
 * Write what is queued, stop the writer thread and close the file.
 * Returns the number of events dropped (queue full or a write error;
 * `err`, when not NULL, gets the first write error or ""). NULL is fine.
 */
int64_t tboard_close(tboard_t *tb, char *err, size_t errlen);

#endif
