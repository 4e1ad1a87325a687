/*
 * ranklog: what one rank prints, cut into lines and batched for the
 * coordinator's job logs (the agent's LOGS messages, api/wire.h).
 *
 * The agent reads each rank's stdout and stderr from two non-blocking pipes
 * and feeds the bytes here. A ranklog_t splits them into lines (without the
 * newline; a line longer than RANKLOG_LINE_MAX_BYTES is cut there and the
 * rest of it, up to its newline, is discarded), makes each valid UTF-8
 * (a byte that is not becomes '?'), and appends it to the rank's batch with
 * the stream and the time it was read. A batch is due once it holds
 * RANKLOG_BATCH_LINES lines or RANKLOG_BATCH_BYTES bytes of text, or its
 * first line is RANKLOG_BATCH_MS old. Past RANKLOG_RATE_LINES lines or
 * RANKLOG_RATE_BYTES bytes in one second (a fixed one-second window) the
 * rank's further lines of that second are dropped and counted; the count
 * travels with the next batch. Every line still goes to the agent's own
 * log through the callback, as before (with the last error line).
 */
#ifndef RINGMASTER_WORKER_RANKLOG_H
#define RINGMASTER_WORKER_RANKLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define RANKLOG_LINE_MAX_BYTES 4096
#define RANKLOG_BATCH_LINES 256
#define RANKLOG_BATCH_BYTES (64 * 1024)
#define RANKLOG_BATCH_MS 200
#define RANKLOG_RATE_LINES 2000
#define RANKLOG_RATE_BYTES (1024 * 1024)
/* After a read that found data, the agent leaves that pipe alone this long:
 * a rank printing in a loop wakes it at most ~100 times a second instead of
 * once per write (a pipe holds 64 KiB: at 1 MiB/s that is 60 ms, so the rank
 * never waits on it). Lines read together share their time. */
#define RANKLOG_DRAIN_INTERVAL_MS 10

typedef enum { RANKLOG_STDOUT = 0, RANKLOG_STDERR = 1 } ranklog_stream_t;

typedef struct {
	char buf[RANKLOG_LINE_MAX_BYTES + 1];
	size_t len;
	bool cut; /* the line reached the cap: discard up to its newline */
} ranklog_partial_t;

typedef struct {
	ranklog_partial_t part[2];  /* by ranklog_stream_t */
	json_t *lines;              /* the batch: [{stream, time_us, text}], NULL when empty */
	size_t batch_bytes;
	int64_t batch_since_us;     /* when its first line (or drop) came */
	int64_t dropped;            /* since the last batch taken */
	int64_t window_start_us;    /* the rate window */
	int64_t window_lines, window_bytes;
} ranklog_t;

/* Called for every complete line (NUL-terminated, valid UTF-8 or not). */
typedef void (*ranklog_line_fn)(void *cls, ranklog_stream_t stream, const char *line);

/* Start empty. */
void ranklog_init(ranklog_t *rl);

/* Release the batch. */
void ranklog_clear(ranklog_t *rl);

/* Feed `n` bytes read from `stream` at wall time `now_us`: each complete line
 * goes to `fn` and into the batch (or is dropped past the rate cap). */
void ranklog_feed(ranklog_t *rl, ranklog_stream_t stream, const char *buf, size_t n, int64_t now_us,
                  ranklog_line_fn fn, void *cls);

/* End of `stream` (its pipe closed): a last line without newline counts. */
void ranklog_eof(ranklog_t *rl, ranklog_stream_t stream, int64_t now_us, ranklog_line_fn fn, void *cls);

/* Whether a batch should go now; `now_us` the wall clock. */
bool ranklog_due(const ranklog_t *rl, int64_t now_us);

/* When the pending batch becomes due (wall clock); INT64_MAX when empty. */
int64_t ranklog_deadline_us(const ranklog_t *rl);

/* Whether anything (lines or a drop count) waits to be sent. */
bool ranklog_pending(const ranklog_t *rl);

/* Take the batch: a new LOGS payload {job, attempt, rank, lines, dropped}
 * (NULL when out of memory; the batch is then lost and counted nowhere). The
 * ranklog_t starts a new, empty batch. */
json_t *ranklog_take(ranklog_t *rl, const char *job, int attempt, int rank);

#endif
