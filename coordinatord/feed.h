/*
 * feed: the change feed behind the Server-Sent Events streams
 * (GET /v1/jobs/{id}/stream, GET /v1/stream, GET /v1/jobs/{id}/logs?follow=1;
 * coordinatord/streamapi.c).
 *
 * After each transaction of the writer thread commits, feed_collect() reads
 * what it stored (event rows, metrics rows, log lines: store_feed.c) and
 * publishes each change as one entry with the next sequence number (one
 * monotonic uint64 for the whole coordinator, from 1 at each start) and its
 * whole SSE frame ("id: SEQ\nevent: TYPE\ndata: JSON\n\n") rendered once for
 * every reader. Entries live in a bounded ring (FEED_CAPACITY); a reader that
 * asks for entries older than the ring holds is told to reset. Thread-safe:
 * the writer publishes, HTTP threads read under one mutex; after publishing,
 * the notify function (streamapi's wake-up) is called without the lock.
 *
 * Entries: per job "state" {job, state, reason, attempt} and "event" (the
 * event row as GET /v1/jobs/{id}/events shows it) for each event row (state
 * only for transitions), "metrics" (as GET /v1/jobs/{id}/metrics), "log" (a
 * log line as GET /v1/jobs/{id}/logs), "end" {job, state} when the job
 * reaches a final state; global "job" (the job object as GET /v1/jobs lists
 * it) on creation and every state change, and "worker".
 */
#ifndef RINGMASTER_COORDINATORD_FEED_H
#define RINGMASTER_COORDINATORD_FEED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "store.h"

#define FEED_CAPACITY 65536

typedef enum {
	FEED_STATE = 0,
	FEED_EVENT,
	FEED_METRICS,
	FEED_LOG,
	FEED_END,
	FEED_JOB,
	FEED_WORKER,
	FEED_N_TYPES
} feed_type_t;

typedef struct {
	uint64_t seq;
	feed_type_t type;
	char job_id[STORE_ID_BYTES]; /* "" for a worker */
	int rank, attempt;           /* of a log line; -1 otherwise */
	int64_t line_seq;            /* of a log line: its stored seq; 0 otherwise */
	char *frame;                 /* the SSE frame, owned by the feed */
	size_t frame_len;
} feed_entry_t;

/* Start empty with room for `capacity` entries (0: FEED_CAPACITY); the
 * writer's store `st` gives the ids already stored, which are not published.
 * 0 or -ENOMEM. */
int feed_init(store_t *st, size_t capacity);

/* Drop every entry. */
void feed_free(void);

/* Writer, after a commit: publish what was stored since the last call. */
void feed_collect(store_t *st);

/* Writer, inside a transaction: worker `node` registered or was lost; its
 * object (as GET /v1/workers shows it) is published after the commit. */
void feed_worker_changed(const char *node);

/* Called (without the feed's lock) after entries were published. */
void feed_set_notify(void (*fn)(void));

/* The last sequence number published (0: none yet). */
uint64_t feed_last_seq(void);

/* Under the feed's lock, hand `fn` every entry with seq > after, oldest
 * first; `fn` returns false to stop. Returns 0 and sets *ret_last to the
 * last seq handed over (after, when none); -ESTALE when entries after
 * `after` have left the ring or `after` is past the last seq (a reader
 * from before a restart): the reader must reset. */
typedef bool (*feed_fn)(const feed_entry_t *e, void *cls);
int feed_read(uint64_t after, feed_fn fn, void *cls, uint64_t *ret_last);

/* A log line as the API shows it (GET /v1/jobs/{id}/logs, `log` events):
 * {seq, rank, attempt, stream, time, text}; a new reference, NULL when out
 * of memory. */
json_t *feed_log_line_json(const store_log_line_t *l);

/* Counters for /metrics. */
uint64_t feed_published_total(void);

#endif
