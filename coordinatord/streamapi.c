/*
 * streamapi: Server-Sent Events over libmicrohttpd callback responses and
 * suspend/resume (see streamapi.h). One stream_t per open stream: its
 * cursor in the feed (the last seq it has passed), the bytes waiting to be
 * written, and whether it ends once they are out.
 *
 * Locking: s.lock guards the list of suspended streams. A reader that finds
 * nothing to send checks the feed's last seq and suspends itself while
 * holding s.lock; the waker takes the whole list under s.lock, then resumes
 * each outside it. A publish therefore either is seen by the reader's check
 * or finds the reader on the list: no wake-up is lost.
 */
#include "streamapi.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "feed.h"
#include "jobview.h"
#include "log.h"
#include "metrics.h"
#include "problem.h"

#define S_MAX_PENDING (256 * 1024) /* replay in slices of this much */

typedef enum { SK_JOB, SK_ALL, SK_LOGS } stream_kind_t;

typedef struct stream {
	struct stream *next; /* on the suspended list */
	bool suspended;
	struct MHD_Connection *conn;
	stream_kind_t kind;
	char job[STORE_ID_BYTES];
	int rank, attempt;   /* SK_LOGS filters; -1: all */
	int64_t listed_seq;  /* SK_LOGS: the last stored line sent before the feed's */
	int64_t n_listed;    /* SK_LOGS: stored lines sent so far */
	uint64_t cursor;
	sbuf_t out;
	size_t out_off;
	bool done;           /* end once `out` is written */
	bool resumed;        /* opened with a Last-Event-ID */
	int64_t last_write_us;
} stream_t;

static struct {
	pthread_mutex_t lock;
	stream_t *suspended;
	atomic_int open;
	int max;
	int64_t keepalive_us;
	atomic_bool closing;
	pthread_t ticker;
	bool ticking;
	pthread_mutex_t tick_lock;
	pthread_cond_t tick_cond;
} s = {.lock = PTHREAD_MUTEX_INITIALIZER, .tick_lock = PTHREAD_MUTEX_INITIALIZER,
       .tick_cond = PTHREAD_COND_INITIALIZER, .max = 256, .keepalive_us = 15000000};

/* Resume every suspended stream. */
static void s_wake_all(void)
{
	pthread_mutex_lock(&s.lock);
	stream_t *list = s.suspended;
	s.suspended = NULL;
	for (stream_t *t = list; t; t = t->next)
		t->suspended = false;
	pthread_mutex_unlock(&s.lock);
	while (list) {
		stream_t *next = list->next;
		list->next = NULL;
		MHD_resume_connection(list->conn);
		list = next;
	}
}

static void *s_tick(void *arg)
{
	(void)arg;
	int64_t period_us = s.keepalive_us < 1000000 ? s.keepalive_us / 2 : 1000000;
	pthread_mutex_lock(&s.tick_lock);
	while (!atomic_load(&s.closing)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		int64_t ns = ts.tv_nsec + (period_us % 1000000) * 1000;
		ts.tv_sec += (time_t)(period_us / 1000000 + ns / 1000000000);
		ts.tv_nsec = (long)(ns % 1000000000);
		pthread_cond_timedwait(&s.tick_cond, &s.tick_lock, &ts);
		pthread_mutex_unlock(&s.tick_lock);
		s_wake_all(); /* each due stream writes its keep-alive */
		pthread_mutex_lock(&s.tick_lock);
	}
	pthread_mutex_unlock(&s.tick_lock);
	return NULL;
}

int streamapi_init(int max_streams, int keepalive_ms)
{
	s.max = max_streams;
	s.keepalive_us = (int64_t)keepalive_ms * 1000;
	atomic_store(&s.closing, false);
	feed_set_notify(s_wake_all);
	int r = pthread_create(&s.ticker, NULL, s_tick, NULL);
	if (r != 0)
		return -r;
	s.ticking = true;
	return 0;
}

void streamapi_shutdown(void)
{
	atomic_store(&s.closing, true);
	feed_set_notify(NULL);
	if (s.ticking) {
		pthread_mutex_lock(&s.tick_lock);
		pthread_cond_broadcast(&s.tick_cond);
		pthread_mutex_unlock(&s.tick_lock);
		pthread_join(s.ticker, NULL);
		s.ticking = false;
	}
	s_wake_all();
}

/* ---- filling a stream from the feed ---- */

static bool s_match(const feed_entry_t *e, void *cls)
{
	stream_t *t = cls;
	if (t->out.len - t->out_off > S_MAX_PENDING)
		return false;
	bool take;
	switch (t->kind) {
	case SK_ALL: take = e->type == FEED_JOB || e->type == FEED_WORKER; break;
	case SK_JOB:
		take = strcmp(e->job_id, t->job) == 0 && e->type != FEED_JOB && e->type != FEED_WORKER;
		break;
	default:
		take = strcmp(e->job_id, t->job) == 0 &&
		       ((e->type == FEED_LOG && e->line_seq > t->listed_seq && (t->rank < 0 || e->rank == t->rank) &&
		         (t->attempt < 0 || e->attempt == t->attempt)) ||
		        e->type == FEED_END);
	}
	if (!take)
		return true;
	sbuf_append(&t->out, e->frame, e->frame_len);
	if (e->type == FEED_END) {
		t->done = true;
		return false;
	}
	return true;
}

static void s_reset_frame(stream_t *t)
{
	sbuf_printf(&t->out, "id: %" PRIu64 "\nevent: reset\ndata: {}\n\n", t->cursor);
}

/* Move what the feed holds past the cursor into `out`. */
static void s_fill(stream_t *t)
{
	uint64_t last;
	int r = feed_read(t->cursor, s_match, t, &last);
	if (r == -ESTALE) {
		t->cursor = feed_last_seq();
		s_reset_frame(t);
		return;
	}
	t->cursor = last;
	if (atomic_load(&s.closing))
		t->done = true;
}

static ssize_t s_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	stream_t *t = cls;
	for (;;) {
		if (t->out.failed)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (t->out.len > t->out_off) {
			size_t n = t->out.len - t->out_off;
			n = n < max ? n : max;
			memcpy(buf, t->out.data + t->out_off, n);
			t->out_off += n;
			if (t->out_off == t->out.len) {
				sbuf_reset(&t->out);
				t->out_off = 0;
			}
			t->last_write_us = clock_mono_us();
			return (ssize_t)n;
		}
		if (t->done)
			return MHD_CONTENT_READER_END_OF_STREAM;
		s_fill(t);
		if (t->out.len > t->out_off || t->done)
			continue;
		if (clock_mono_us() - t->last_write_us >= s.keepalive_us) {
			sbuf_puts(&t->out, ": keep-alive\n\n");
			continue;
		}
		pthread_mutex_lock(&s.lock);
		if (feed_last_seq() > t->cursor || atomic_load(&s.closing)) {
			pthread_mutex_unlock(&s.lock);
			continue;
		}
		t->suspended = true;
		t->next = s.suspended;
		s.suspended = t;
		MHD_suspend_connection(t->conn);
		pthread_mutex_unlock(&s.lock);
		return 0;
	}
}

static void s_free(void *cls)
{
	stream_t *t = cls;
	pthread_mutex_lock(&s.lock);
	for (stream_t **p = &s.suspended; *p; p = &(*p)->next) {
		if (*p == t) {
			*p = t->next;
			break;
		}
	}
	pthread_mutex_unlock(&s.lock);
	sbuf_free(&t->out);
	free(t);
	atomic_fetch_sub(&s.open, 1);
	metrics_stream_opened(-1);
}

/* ---- opening a stream ---- */

static enum MHD_Result s_too_many(request_t *rq)
{
	metrics_stream_rejected();
	char detail[160];
	snprintf(detail, sizeof detail, "%d streams are open, the most this server allows (max_streams); retry later",
	         s.max);
	size_t len;
	char *body = problem_dumps(503, detail, NULL, &len);
	if (!body)
		return MHD_NO;
	struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/problem+json");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "5");
	enum MHD_Result r = MHD_queue_response(rq->conn, 503, resp);
	MHD_destroy_response(resp);
	metrics_record(rq->label, rq->method, 503, clock_mono_us() - rq->start_us);
	return r;
}

/* The Last-Event-ID (header, else ?last_event_id=): 1 and *ret when given
 * and valid, 0 when absent, -1 when malformed. */
static int s_last_event_id(request_t *rq, uint64_t *ret)
{
	const char *v = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Last-Event-ID");
	if (!v)
		v = MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, "last_event_id");
	if (!v)
		return 0;
	char *end;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-')
		return -1;
	*ret = n;
	return 1;
}

/* A new stream (counted against the cap), or NULL with the answer given. */
static stream_t *s_new(request_t *rq, stream_kind_t kind, enum MHD_Result *ret_answer)
{
	uint64_t last_id = 0;
	int has_id = s_last_event_id(rq, &last_id);
	if (has_id < 0) {
		*ret_answer = request_bad_request(rq, "Last-Event-ID must be a sequence number (an integer >= 0)",
		                                  "last_event_id");
		return NULL;
	}
	if (atomic_fetch_add(&s.open, 1) >= s.max) {
		atomic_fetch_sub(&s.open, 1);
		*ret_answer = s_too_many(rq);
		return NULL;
	}
	stream_t *t = calloc(1, sizeof *t);
	if (!t) {
		atomic_fetch_sub(&s.open, 1);
		*ret_answer = request_problem(rq, 500, "out of memory", NULL);
		return NULL;
	}
	metrics_stream_opened(1);
	t->conn = rq->conn;
	t->kind = kind;
	t->rank = t->attempt = -1;
	snprintf(t->job, sizeof t->job, "%s", rq->id);
	t->last_write_us = clock_mono_us();
	uint64_t now = feed_last_seq();
	t->resumed = has_id;
	if (has_id && last_id <= now) {
		t->cursor = last_id;
	} else {
		t->cursor = now;
		if (has_id)
			s_reset_frame(t);
	}
	return t;
}

static enum MHD_Result s_start(request_t *rq, stream_t *t)
{
	struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, s_reader, t, s_free);
	if (!resp) {
		s_free(t);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	enum MHD_Result r = MHD_queue_response(rq->conn, 200, resp);
	MHD_destroy_response(resp);
	metrics_record(rq->label, rq->method, 200, clock_mono_us() - rq->start_us);
	return r;
}

/* The job (read now) when it exists: 0, -ENOENT or another error. For a
 * final job, the replay then its state and end go into `t` and it ends. */
static int s_job_now(request_t *rq, stream_t *t, bool state_frame)
{
	store_t *st = request_reader(rq);
	if (!st)
		return -EIO;
	store_job_t job;
	memset(&job, 0, sizeof job);
	int r = store_job_get(st, rq->id, &job);
	if (r < 0)
		return r;
	const char *state = store_job_state_name(job.state);
	bool final = store_job_state_is_final(job.state);
	if (final)
		s_fill(t); /* what it missed, if anything; then its end below */
	if ((state_frame || final) && !t->done) {
		json_t *doc = json_pack("{s:s, s:s, s:o, s:i}", "job", job.id, "state", state, "reason",
		                        jobview_string(job.state_reason), "attempt", job.attempt);
		char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
		json_decref(doc);
		if (state_frame && text)
			sbuf_printf(&t->out, "id: %" PRIu64 "\nevent: state\ndata: %s\n\n", t->cursor, text);
		free(text);
		if (final) {
			sbuf_printf(&t->out, "id: %" PRIu64 "\nevent: end\ndata: {\"job\":\"%s\",\"state\":\"%s\"}\n\n",
			            t->cursor, job.id, state);
			t->done = true;
		}
	}
	store_job_clear(&job);
	return 0;
}

enum MHD_Result streamapi_job(request_t *rq)
{
	if (!request_plausible_id(rq->id))
		return request_job_not_found(rq);
	enum MHD_Result answer;
	stream_t *t = s_new(rq, SK_JOB, &answer);
	if (!t)
		return answer;
	int r = s_job_now(rq, t, !t->resumed); /* a resumed stream has seen the state */
	if (r < 0) {
		s_free(t);
		return r == -ENOENT ? request_job_not_found(rq) : request_db_unavailable(rq);
	}
	return s_start(rq, t);
}

enum MHD_Result streamapi_all(request_t *rq)
{
	enum MHD_Result answer;
	stream_t *t = s_new(rq, SK_ALL, &answer);
	if (!t)
		return answer;
	return s_start(rq, t);
}

static int s_line_fn(const store_log_line_t *l, void *cls)
{
	stream_t *t = cls;
	json_t *doc = feed_log_line_json(l);
	char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	if (!text)
		return -ENOMEM;
	sbuf_printf(&t->out, "event: log\ndata: %s\n\n", text);
	free(text);
	t->listed_seq = l->seq;
	t->n_listed++;
	return 0;
}

/* The stored lines `q` asks for, every page of them, into `t`. A line that
 * was committed after the feed cursor was taken is both stored and in the
 * feed: s_match passes over feed lines up to the last one listed here, so
 * it is sent once. 0 or a negative errno. */
static int s_list_stored(store_t *st, const char *job_id, const store_log_query_t *q, stream_t *t)
{
	store_log_query_t page = *q;
	for (;;) {
		int64_t before = t->n_listed;
		int r = store_log_list(st, job_id, &page, s_line_fn, t);
		if (r < 0 || q->tail > 0 || page.limit <= 0 || t->n_listed - before < page.limit)
			return r;
		page.since = t->listed_seq;
	}
}

enum MHD_Result streamapi_logs(request_t *rq, const store_log_query_t *q)
{
	enum MHD_Result answer;
	stream_t *t = s_new(rq, SK_LOGS, &answer);
	if (!t)
		return answer;
	t->rank = q->rank;
	t->attempt = q->attempt;
	t->listed_seq = q->since;
	store_t *st = request_reader(rq);
	/* the lines stored so far (without ids: page them with since=), then
	 * the feed's from the cursor taken before reading them, less those
	 * already listed */
	int r = st ? s_list_stored(st, rq->id, q, t) : -EIO;
	if (r == 0)
		r = s_job_now(rq, t, false);
	if (r < 0) {
		s_free(t);
		return r == -ENOENT ? request_job_not_found(rq) : request_db_unavailable(rq);
	}
	return s_start(rq, t);
}
