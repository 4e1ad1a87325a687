/*
 * rank: one rank process of a job attempt (see rank.h).
 *
 * Threads: the main thread joins, runs the rendezvous and trains. Once the
 * communicator is up a watcher thread reads the socket every
 * WATCH_INTERVAL_MS; the two share the socket under a mutex (ZeroMQ allows
 * a socket to move between threads across a full memory barrier, which the
 * mutex gives). The watcher only reads; on ABORT it exits the process.
 *
 * Snapshots (an agent given --checkpoint-root): the trainer writes this
 * rank's shard under <root>/<job>/step-N.tmp/ and on_snapshot sends
 * SNAPSHOT_WRITTEN. Rank 0 keeps what the manifest needs (a few snapshots'
 * worth, in `pending`); when the coordinator's SNAPSHOT_COMMIT arrives (all
 * shards are in), the watcher writes the manifest, renames the folder,
 * applies retention and answers SNAPSHOT_COMMITTED. At the start every rank
 * resumes from the newest good committed snapshot of the job, if any.
 *
 * Tensor parallelism (parallel.tensor t > 1): after the rendezvous the
 * world's communicator is split (comm_split, through the same store) into
 * this rank's tensor-parallel group (ranks r / t * t .. + t - 1, ranked by
 * r % t) and its data-parallel group (the ranks with its r % t, ranked by
 * r / t); the trainer gets both, the DP group as its `comm`.
 *
 * The log flood benchmark knob is worker/logflood.h's.
 */
#include "rank.h"
#include "rank_priv.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>
#include <zmq.h>

#include "beneath.h"
#include "comm.h"
#include "exitcode.h"
#include "fabric.h"
#include "jobspec.h"
#include "logflood.h"
#include "rankenv.h"
#include "snapshot.h"
#include "tboard.h"
#include "train.h"
#include "wire.h"

extern char **environ;


static void s_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void s_err(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("ringworker rank: error: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	fflush(stderr);
}

static double s_unix_now(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

void rank_send(rank_t *r, wire_type_t type, json_t *payload)
{
	if (!payload)
		return;
	if (r->watching)
		pthread_mutex_lock(&r->lock);
	int rc = fabric_send(r->fab, type, payload);
	if (r->watching)
		pthread_mutex_unlock(&r->lock);
	if (rc < 0)
		s_err("could not send %s to the coordinator: %s", wire_type_name(type), strerror(-rc));
	json_decref(payload);
}

static void s_note_rejoin(rank_t *r, const json_t *p);

/* Whether an ABORT asks the rank to park and rejoin the next attempt. */
static bool s_abort_rejoins(const json_t *p)
{
	return json_is_true(json_object_get(p, "rejoin"));
}

/*
 * Send the rank's last word (DONE or FAILED) and wait until the coordinator
 * has handled it. The agent reports our exit on another connection as soon
 * as we are gone, and the coordinator's ROUTER may read the two connections
 * in either order; a KV_GET that answers at once, sent after the last word,
 * comes back only once the coordinator has read everything before it. Any
 * answer (KV_VALUE, ERROR, ABORT for a finished attempt) will do; after
 * FLUSH_TIMEOUT_MS we give up and exit anyway. Main thread, watcher stopped.
 */
#define FLUSH_TIMEOUT_MS 2000

static void s_send_final(rank_t *r, wire_type_t type, json_t *payload)
{
	rank_send(r, type, payload);
	rank_send(r, WIRE_KV_GET, json_pack("{s:s, s:i}", "key", "ringworker/flush", "timeout_ms", 0));
	int64_t deadline = fabric_now_us() + (int64_t)FLUSH_TIMEOUT_MS * 1000;
	for (;;) {
		int64_t left_us = deadline - fabric_now_us();
		if (left_us <= 0)
			return;
		wire_type_t got;
		json_t *p = NULL;
		char why[256];
		int rc = fabric_recv(r->fab, (int)((left_us + 999) / 1000), &got, &p, why, sizeof why);
		if (rc == -EAGAIN)
			continue;
		if (rc == 0 && got == WIRE_ABORT && s_abort_rejoins(p))
			atomic_store(&r->rejoin_asked, true);
		if (rc == 0 && got == WIRE_REJOIN)
			s_note_rejoin(r, p);
		json_decref(p);
		if (rc < 0 || got == WIRE_KV_VALUE || got == WIRE_ERROR || got == WIRE_ABORT)
			return;
	}
}

/* FAILED with the exit status the process is about to end with and the
 * failure kind it means (api/exitcode.h), so that the coordinator knows at
 * once whether a restart can help. */
static void s_send_failed(rank_t *r, const char *reason, int exit_code)
{
	s_send_final(r, WIRE_FAILED,
	             json_pack("{s:s, s:i, s:i}", "reason", reason, "exit_code", exit_code, "failure",
	                       (int)rm_exit_failure(exit_code, 0)));
}

/* An ABORT for this attempt ends the process at once, unless it asks the
 * rank to rejoin the next attempt: then the flag is set (once training has
 * started; before, the rank exits and is respawned like any other). */
static void s_check_abort(rank_t *r, wire_type_t type, const json_t *p)
{
	if (type != WIRE_ABORT)
		return;
	if (s_abort_rejoins(p) && r->watching) {
		if (!atomic_exchange(&r->rejoin_asked, true)) {
			fprintf(stderr, "ringworker rank: asked to rejoin the next attempt: %s\n",
			        json_string_value(json_object_get(p, "reason")));
			fflush(stderr);
			/* A collective with the failed peer may never end on its own
			 * (NCCL): end it now; the step is lost either way. */
			comm_cancel(r->comm);
			comm_cancel(r->tp_comm);
			comm_cancel(r->dp_comm);
		}
		return;
	}
	fprintf(stderr, "ringworker rank: aborted by the coordinator: %s\n",
	        json_string_value(json_object_get(p, "reason")));
	fflush(stderr);
	_exit(RM_EXIT_ABORTED);
}

/*
 * Wait up to timeout_ms for a message of type `want` (and, when `key` is not
 * NULL, with that key). ABORT exits; ERROR replies fail the wait with
 * -EPROTO (message in `err`); anything else is logged and skipped.
 */
static int s_wait_for(rank_t *r, wire_type_t want, const char *key, int timeout_ms,
                      json_t **ret_payload, char *err, size_t errlen)
{
	int64_t deadline = fabric_now_us() + (int64_t)timeout_ms * 1000;
	for (;;) {
		int64_t left_us = deadline - fabric_now_us();
		if (left_us <= 0) {
			snprintf(err, errlen, "no %s from the coordinator at %s within %d ms",
			         wire_type_name(want), fabric_endpoint(r->fab), timeout_ms);
			return -ETIMEDOUT;
		}
		wire_type_t type;
		json_t *p = NULL;
		char why[256];
		int rc = fabric_recv(r->fab, (int)((left_us + 999) / 1000), &type, &p, why, sizeof why);
		if (rc == -EAGAIN)
			continue;
		if (rc == -EPROTO || rc == -ENOENT || rc == -EMSGSIZE || rc == -EINVAL) {
			fprintf(stderr, "ringworker rank: refused a message from the coordinator: %s\n", why);
			continue;
		}
		if (rc < 0) {
			snprintf(err, errlen, "receive failed: %s", zmq_strerror(-rc));
			return rc;
		}
		s_check_abort(r, type, p);
		if (type == WIRE_ERROR) {
			snprintf(err, errlen, "the coordinator answered ERROR %lld: %s",
			         (long long)json_integer_value(json_object_get(p, "code")),
			         json_string_value(json_object_get(p, "detail")));
			json_decref(p);
			return -EPROTO;
		}
		const char *got_key = json_string_value(json_object_get(p, "key"));
		if (type == want && (!key || (got_key && strcmp(got_key, key) == 0))) {
			*ret_payload = p;
			return 0;
		}
		fprintf(stderr, "ringworker rank: unexpected %s while waiting for %s; ignored\n",
		        wire_type_name(type), wire_type_name(want));
		json_decref(p);
	}
}

/* ---- the rendezvous store over the coordinator's KV ---- */

static int s_kv_set(void *ctx, const char *key, const void *value, size_t n)
{
	rank_t *r = ctx;
	size_t b64_len = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
	char *b64 = malloc(b64_len);
	if (!b64)
		return -ENOMEM;
	sodium_bin2base64(b64, b64_len, value, n, sodium_base64_VARIANT_ORIGINAL);
	json_t *p = json_pack("{s:s, s:s}", "key", key, "value", b64);
	free(b64);
	if (!p)
		return -ENOMEM;
	rank_send(r, WIRE_KV_SET, p);
	char err[512];
	json_t *ok = NULL;
	int rc = s_wait_for(r, WIRE_KV_OK, key, KV_SET_TIMEOUT_MS, &ok, err, sizeof err);
	if (rc < 0) {
		s_err("KV_SET %s: %s", key, err);
		return rc == -ETIMEDOUT ? -ETIMEDOUT : -EIO;
	}
	json_decref(ok);
	return 0;
}

static int s_kv_get(void *ctx, const char *key, int timeout_ms, void **ret_value, size_t *ret_n)
{
	rank_t *r = ctx;
	rank_send(r, WIRE_KV_GET, json_pack("{s:s, s:i}", "key", key, "timeout_ms", timeout_ms));
	char err[512];
	json_t *p = NULL;
	int rc = s_wait_for(r, WIRE_KV_VALUE, key, timeout_ms + KV_GET_SLACK_MS, &p, err, sizeof err);
	if (rc < 0) {
		s_err("KV_GET %s: %s", key, err);
		return rc == -ETIMEDOUT ? -ETIMEDOUT : -EIO;
	}
	if (!json_is_true(json_object_get(p, "found"))) {
		json_decref(p);
		return -ETIMEDOUT;
	}
	const char *b64 = json_string_value(json_object_get(p, "value"));
	size_t b64_len = strlen(b64);
	unsigned char *bin = malloc(b64_len / 4 * 3 + 3);
	size_t n = 0;
	if (!bin) {
		json_decref(p);
		return -ENOMEM;
	}
	if (sodium_base642bin(bin, b64_len / 4 * 3 + 3, b64, b64_len, NULL, &n, NULL,
	                      sodium_base64_VARIANT_ORIGINAL) != 0) {
		s_err("KV_GET %s: the value is not base64", key);
		free(bin);
		json_decref(p);
		return -EIO;
	}
	json_decref(p);
	*ret_value = bin;
	*ret_n = n;
	return 0;
}

/* ---- the trainer's log: through to stderr, the last error line kept ---- */

static ssize_t s_log_write(void *cookie, const char *buf, size_t size)
{
	rank_t *r = cookie;
	for (size_t i = 0; i < size; i++) {
		if (buf[i] == '\n' || r->line_len == sizeof r->line - 1) {
			r->line[r->line_len] = '\0';
			fprintf(stderr, "%s\n", r->line);
			if (strcasestr(r->line, "error")) {
				size_t n = strlen(r->line);
				n = n < sizeof r->last_error ? n : sizeof r->last_error - 1;
				memcpy(r->last_error, r->line, n);
				r->last_error[n] = '\0';
			}
			r->line_len = 0;
			if (buf[i] == '\n')
				continue;
		}
		r->line[r->line_len++] = buf[i];
	}
	fflush(stderr);
	return (ssize_t)size;
}

/* ---- while training ---- */

static void s_resend(rank_t *r, int64_t from_step, int64_t to_step);

/* *ts = now + ms on CLOCK_REALTIME (pthread_mutex_timedlock's clock). */
static void s_deadline(struct timespec *ts, long ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/*
 * The step-time watchdog, on the watcher thread: a step that has not ended
 * opt->step_timeout_ms (automatic: the larger of twice the comm timeout and
 * RANK_WATCHDOG_FACTOR x the longest step so far) after the previous one
 * means the training thread is stuck where no collective timeout reaches
 * (a compute or I/O hang, a deadlock). The rank cannot rejoin with a stuck
 * thread: it reports FAILED and exits with RM_EXIT_WATCHDOG, and the job
 * recovers without it.
 */
static void s_watchdog(rank_t *r)
{
	int64_t end = atomic_load(&r->step_end_us);
	if (end == 0)
		return;
	const rank_options_t *o = r->opt;
	int64_t longest = atomic_load(&r->longest_step_us);
	int64_t limit_us = (int64_t)o->step_timeout_ms * 1000;
	if (limit_us <= 0) {
		/* twice the comm timeout: a collective that times out fails first,
		 * and its rank parks and rejoins instead of being replaced */
		limit_us = 2 * (int64_t)(o->comm_timeout_ms > 0 ? o->comm_timeout_ms : RANK_COMM_TIMEOUT_MS) * 1000;
		if (longest * RANK_WATCHDOG_FACTOR > limit_us)
			limit_us = longest * RANK_WATCHDOG_FACTOR;
	}
	int64_t now = fabric_now_us();
	if (now - end <= limit_us)
		return;
	int64_t step = atomic_load(&r->done_step);
	char reason[ERROR_MAX_BYTES];
	snprintf(reason, sizeof reason,
	         "ringworker rank: error: watchdog: step %lld of rank %d has not ended %.1f s after step %lld "
	         "(the bound is %.1f s; the longest step so far took %.2f s): the training thread is stuck",
	         (long long)step + 1, o->rank, (double)(now - end) / 1e6, (long long)step,
	         (double)limit_us / 1e6, (double)longest / 1e6);
	fprintf(stderr, "%s\n", reason);
	fflush(stderr);
	/* FAILED, unless the stuck thread holds the socket's lock (frozen inside
	 * a send): then the exit status and the line above (the agent passes it
	 * on in RANK_EXITED) tell the coordinator instead. */
	struct timespec until;
	s_deadline(&until, 200); /* a send holds it for microseconds */
	if (pthread_mutex_timedlock(&r->lock, &until) != 0)
		_exit(RM_EXIT_WATCHDOG);
	pthread_mutex_unlock(&r->lock);
	s_send_failed(r, reason, RM_EXIT_WATCHDOG);
	_exit(RM_EXIT_WATCHDOG);
}

/* REJOIN {attempt}: the attempt this rank becomes once training stopped. */
static void s_note_rejoin(rank_t *r, const json_t *p)
{
	json_int_t a = json_integer_value(json_object_get(p, "attempt"));
	if (a > r->opt->attempt && a < INT_MAX)
		atomic_store(&r->rejoin_attempt, (int)a);
}

/* Once asked to rejoin, answer PARKED (once): the coordinator then places
 * the next attempt without waiting for this rank's step to end, and this
 * process is kept for it (it stops training at the step's end, or when its
 * collective fails because a peer died). Any thread not holding the lock. */
static void s_send_parked(rank_t *r)
{
	if (!atomic_load(&r->rejoin_asked) || atomic_exchange(&r->parked_sent, true))
		return;
	int64_t step = atomic_load(&r->done_step);
	rank_send(r, WIRE_PARKED, json_pack("{s:I}", "step", (json_int_t)step));
	fprintf(stderr, "ringworker rank: parking after step %lld, to rejoin the next attempt\n", (long long)step);
	fflush(stderr);
}

static void *s_watch(void *arg)
{
	rank_t *r = arg;
	while (!atomic_load(&r->stop_watch)) {
		s_watchdog(r);
		json_t *commit = NULL;
		int64_t resend_from = -1, resend_to = -1;
		/* the training thread holds the lock while it sends; if it is stuck
		 * there, the watchdog must still run */
		bool locked = false;
		while (!locked && !atomic_load(&r->stop_watch)) {
			struct timespec until;
			s_deadline(&until, WATCH_INTERVAL_MS);
			locked = pthread_mutex_timedlock(&r->lock, &until) == 0;
			if (!locked)
				s_watchdog(r);
		}
		if (!locked)
			break;
		for (;;) {
			wire_type_t type;
			json_t *p = NULL;
			char why[256];
			int rc = fabric_recv(r->fab, 0, &type, &p, why, sizeof why);
			if (rc == -EAGAIN)
				break;
			if (rc < 0) {
				fprintf(stderr, "ringworker rank: refused a message from the coordinator: %s\n",
				        why);
				if (rc != -EPROTO && rc != -ENOENT && rc != -EMSGSIZE && rc != -EINVAL)
					break;
				continue;
			}
			s_check_abort(r, type, p);
			if (type == WIRE_ERROR)
				fprintf(stderr, "ringworker rank: the coordinator answered ERROR %lld: %s\n",
				        (long long)json_integer_value(json_object_get(p, "code")),
				        json_string_value(json_object_get(p, "detail")));
			if (type == WIRE_SNAPSHOT_COMMIT && !commit)
				commit = json_incref(p);
			if (type == WIRE_REJOIN)
				s_note_rejoin(r, p);
			if (type == WIRE_METRICS_RESEND) {
				resend_from = json_integer_value(json_object_get(p, "from_step"));
				resend_to = json_integer_value(json_object_get(p, "to_step"));
			}
			json_decref(p);
			if (commit)
				break; /* one commit at a time: a second one stays queued for the next pass */
		}
		pthread_mutex_unlock(&r->lock);
		s_send_parked(r); /* sends, so outside the socket's lock */
		if (resend_from >= 0)
			s_resend(r, resend_from, resend_to); /* sends, so outside the socket's lock */
		if (commit) {
			rank_snap_commit(r, commit); /* sends, so outside the socket's lock */
			json_decref(commit);
			continue;
		}
		struct timespec ts = {0, WATCH_INTERVAL_MS * 1000000L};
		nanosleep(&ts, NULL);
	}
	return NULL;
}

/* jansson refuses NaN and infinities, and the wire wants numbers: a
 * non-finite value (a diverged loss, which stops training anyway) goes out
 * as -1. */
static json_t *s_real(double v)
{
	return json_real(isfinite(v) ? v : -1.0);
}

/* Add what this rank holds in memory (constant over the run) to a METRICS
 * payload; the coordinator shows it per rank (wire.h, METRICS). */
static void s_put_memory(json_t *p, const train_report_t *t)
{
	if (!p)
		return;
	json_object_set_new(p, "params_bytes", json_integer((json_int_t)t->params_bytes));
	json_object_set_new(p, "grads_bytes", json_integer((json_int_t)t->grads_bytes));
	json_object_set_new(p, "optim_bytes", json_integer((json_int_t)t->optim_bytes));
	json_object_set_new(p, "activations_bytes", json_integer((json_int_t)t->activations_bytes));
}

/* Rank 0: number this row (prev_step) and keep it for a METRICS_RESEND. */
static void s_keep_row(rank_t *r, json_t *p, int64_t step)
{
	if (!p)
		return;
	json_object_set_new(p, "prev_step", json_integer((json_int_t)r->prev_row_step));
	r->prev_row_step = step;
	pthread_mutex_lock(&r->sent_lock);
	json_t **slot = &r->sent[r->n_sent++ % METRICS_KEPT];
	json_decref(*slot);
	*slot = json_incref(p);
	pthread_mutex_unlock(&r->sent_lock);
}

/* Watcher: the coordinator lost the rows of steps from_step..to_step; send
 * them again, oldest first (those still kept). */
static void s_resend(rank_t *r, int64_t from_step, int64_t to_step)
{
	json_t *again[METRICS_KEPT];
	size_t n = 0;
	pthread_mutex_lock(&r->sent_lock);
	size_t first = r->n_sent > METRICS_KEPT ? r->n_sent - METRICS_KEPT : 0;
	for (size_t i = first; i < r->n_sent; i++) {
		json_t *p = r->sent[i % METRICS_KEPT];
		json_int_t step = json_integer_value(json_object_get(p, "step"));
		if (step >= from_step && step <= to_step)
			again[n++] = json_incref(p);
	}
	pthread_mutex_unlock(&r->sent_lock);
	fprintf(stderr, "ringworker rank: the coordinator lost metrics of steps %lld to %lld; sending %zu"
	        " row(s) again\n", (long long)from_step, (long long)to_step, n);
	for (size_t i = 0; i < n; i++)
		rank_send(r, WIRE_METRICS, again[i]);
}

/* The first METRICS of an attempt says where it started: the snapshot step
 * (0: from scratch), the time loading it took and the rendezvous time. */
static void s_put_resume(const rank_t *r, json_t *p, const train_report_t *t, bool first)
{
	if (!p || !first)
		return;
	json_object_set_new(p, "resumed_from_step", json_integer((json_int_t)t->resumed_from_step));
	json_object_set_new(p, "load_ms", json_real(t->load_ms));
	json_object_set_new(p, "rendezvous_ms", json_real(r->rendezvous_ms));
	if (t->snapshot_skipped && t->snapshot_skipped[0])
		json_object_set_new(p, "snapshot_skipped", json_string(t->snapshot_skipped));
}

/* Rank 0's TensorBoard event of step t (tags as the REST metrics' fields,
 * and the job's model TFLOP/s and MFU when the agent knows its peak). */
static void s_tboard_step(rank_t *r, const train_report_t *t)
{
	if (!r->tb)
		return;
	double tflops = t->tokens_per_s * t->flops_per_token / 1e12;
	double peak = r->opt->peak_tflops * r->opt->world_size;
	const tboard_scalar_t v[] = {{"loss", t->loss}, {"val_loss", t->val_loss}, {"lr", t->lr},
	                             {"grad_norm", t->grad_norm}, {"tokens_per_s", t->tokens_per_s},
	                             {"tflops", t->flops_per_token > 0 ? tflops : NAN},
	                             {"mfu", peak > 0 && t->flops_per_token > 0 ? tflops / peak : NAN}};
	tboard_scalars(r->tb, t->step, s_unix_now(), v, (int)(sizeof v / sizeof v[0]));
}

static int s_on_step(void *ctx, const train_report_t *t)
{
	rank_t *r = ctx;
	s_tboard_step(r, t); /* rank 0 with TensorBoard files only */
	if (atomic_load(&r->rejoin_asked))
		return 1; /* stop: the attempt failed elsewhere, park for the next */
	/* the watchdog: this step's length, and the next one's start (none
	 * after the last step: rank 0 may wait for its last commit) */
	int64_t now = fabric_now_us(), prev = atomic_load(&r->step_end_us);
	int64_t len = prev ? now - prev : (int64_t)(t->ms * 1e3);
	if (len > atomic_load(&r->longest_step_us))
		atomic_store(&r->longest_step_us, len);
	atomic_store(&r->step_end_us, t->step >= r->last_step ? 0 : now);
	bool val = !isnan(t->val_loss);
	bool first = r->done_step == 0; /* steps are 1-based: no step reported yet */
	r->done_step = t->step;
	r->done_loss = t->loss;
	/* Rank 0's loss is the mean over ranks: its rows are the job's, with its
	 * memory. The other ranks (and rank 0 when its first step is not a
	 * metrics step) send their memory once, at their first step, in a
	 * memory-only METRICS (no loss: the coordinator stores no row). */
	if (r->opt->rank == 0 && (t->step % r->metrics_every == 0 || val || t->step == r->last_step)) {
		json_t *p = json_pack("{s:I, s:o, s:o, s:o, s:o, s:o}", "step", (json_int_t)t->step,
		                      "loss", s_real(t->loss), "lr", s_real(t->lr),
		                      "grad_norm", s_real(t->grad_norm), "tokens_per_s",
		                      s_real(t->tokens_per_s), "ms", s_real(t->ms));
		if (p && val && isfinite(t->val_loss))
			json_object_set_new(p, "val_loss", s_real(t->val_loss));
		s_put_memory(p, t);
		s_put_resume(r, p, t, first);
		s_keep_row(r, p, t->step);
		rank_send(r, WIRE_METRICS, p);
	} else if (first) {
		/* rank 0's first report, memory-only or not, also says where the
		 * attempt started (the coordinator's `recovered` event) */
		json_t *p = json_pack("{s:I}", "step", (json_int_t)t->step);
		s_put_memory(p, t);
		if (r->opt->rank == 0)
			s_put_resume(r, p, t, true);
		rank_send(r, WIRE_METRICS, p);
	}
	return 0;
}

/* Another job's snapshot folder, as this agent reaches it: the last two
 * components of `path` ("<job>/step-<N>", as the coordinator recorded it)
 * beneath this agent's `root`, whatever came before them. The rank never
 * opens a folder outside its --checkpoint-root, whoever names it. false
 * when there is no root or the two components are not plain names. */
static bool s_rebase_snapshot(const char *path, const char *root, char *out, size_t out_len)
{
	if (!root || !root[0])
		return false;
	size_t n = strlen(path);
	while (n > 0 && path[n - 1] == '/')
		n--;
	size_t end = n, slashes = 0, start = n;
	for (; start > 0; start--) {
		if (path[start - 1] == '/' && ++slashes == 2)
			break;
	}
	char tail[300];
	if (end - start >= sizeof tail || end == start)
		return false;
	memcpy(tail, path + start, end - start);
	tail[end - start] = '\0';
	const char *step = strchr(tail, '/');
	if (!step || step == tail || !beneath_path_ok(tail) || strncmp(step + 1, "step-", 5) != 0)
		return false;
	int k = snprintf(out, out_len, "%s/%s", root, tail);
	return k > 0 && (size_t)k < out_len;
}

/* Whether the committed folder `path` (<root>/<job>/step-N) is one of
 * `job`'s own: its parent folder is named after the job. Job ids are unique,
 * so this does not depend on how an agent spells its --checkpoint-root. */
static bool s_own_snapshot(const char *path, const char *job)
{
	size_t n = strlen(path), len = strlen(job);
	while (n > 0 && path[n - 1] == '/')
		n--; /* trailing slashes */
	while (n > 0 && path[n - 1] != '/')
		n--; /* step-N */
	while (n > 0 && path[n - 1] == '/')
		n--;
	size_t end = n;
	while (n > 0 && path[n - 1] != '/')
		n--; /* the parent's name */
	return end - n == len && memcmp(path + n, job, len) == 0;
}

/* Training thread, a step of the spec's profile range: its phases go to
 * the coordinator as one TRACE (wire.h), which serves them as a Chrome
 * trace (docs/profiling.md). A trace that cannot be sent is logged and
 * training goes on. */
static void s_on_trace(void *ctx, const trace_step_t *t)
{
	rank_t *r = ctx;
	json_t *events = json_array();
	for (int i = 0; events && i < t->n_events; i++) {
		const trace_event_t *e = &t->events[i];
		if (json_array_append_new(events, json_pack("{s:s, s:f, s:f}", "name", e->name, "ts_us",
		                                            e->ts_us, "dur_us", e->dur_us)) < 0) {
			json_decref(events);
			events = NULL;
		}
	}
	json_t *p = events ? json_pack("{s:I, s:I, s:f, s:o}", "step", (json_int_t)t->step,
	                               "start_unix_us", (json_int_t)t->start_unix_us, "dur_us",
	                               t->dur_us, "events", events)
	                   : NULL;
	if (!p)
		s_err("the trace of step %lld is not sent: out of memory", (long long)t->step);
	rank_send(r, WIRE_TRACE, p);
}

/* JOIN and wait for JOINED; the spec goes to *ret_spec. 0 or an exit code. */
static int s_join(rank_t *r, jobspec_t *ret_spec)
{
	const rank_options_t *o = r->opt;
	rank_send(r, WIRE_JOIN,
	       json_pack("{s:s, s:i, s:i}", "job", o->job, "attempt", o->attempt, "rank", o->rank));
	char err[512];
	json_t *p = NULL;
	int rc = s_wait_for(r, WIRE_JOINED, NULL, RANK_JOIN_TIMEOUT_MS, &p, err, sizeof err);
	if (rc < 0) {
		s_err("JOIN %s/%d/%d: %s", o->job, o->attempt, o->rank, err);
		return RM_EXIT_COMM;
	}
	int world = (int)json_integer_value(json_object_get(p, "world_size"));
	int every = (int)json_integer_value(json_object_get(p, "metrics_every"));
	r->metrics_every = every > 0 ? every : 1;
	const json_t *resume = json_object_get(p, "resume");
	r->resume_upto = json_is_object(resume) ? json_integer_value(json_object_get(resume, "step")) : 0;
	const char *resume_path = json_string_value(json_object_get(resume, "path"));
	if (resume_path && !s_own_snapshot(resume_path, o->job)) {
		/* another job's snapshot (the spec's resume_from): this job has
		 * none of its own recorded, so none of its own folders counts */
		if (!s_rebase_snapshot(resume_path, o->checkpoint_root, r->resume_dir,
		                       sizeof r->resume_dir)) {
			char reason[ERROR_MAX_BYTES];
			snprintf(reason, sizeof reason,
			         "ringworker rank: error: resume_from: the snapshot '%.200s' is not a"
			         " <job>/step-<N> folder of the agent's --checkpoint-root", resume_path);
			fprintf(stderr, "%s\n", reason);
			s_send_failed(r, reason, RM_EXIT_DATA);
			json_decref(p);
			return RM_EXIT_DATA;
		}
		r->resume_upto = 0;
	}
	jobspec_error_t jerr = {0};
	rc = jobspec_from_json(json_object_get(p, "spec"), ret_spec, &jerr);
	json_decref(p);
	if (rc < 0) {
		char reason[700];
		snprintf(reason, sizeof reason, "ringworker rank: error: the job spec from the coordinator is invalid: %s",
		         jerr.message);
		fprintf(stderr, "%s\n", reason);
		s_send_failed(r, reason, RM_EXIT_SPEC);
		return RM_EXIT_SPEC;
	}
	if (world != o->world_size) {
		char reason[256];
		snprintf(reason, sizeof reason,
		         "ringworker rank: error: JOINED says world size %d, the agent said %d", world,
		         o->world_size);
		fprintf(stderr, "%s\n", reason);
		s_send_failed(r, reason, RM_EXIT_USAGE);
		jobspec_free(ret_spec);
		return RM_EXIT_USAGE;
	}
	const char *paths[2][2] = {{"data.train", ret_spec->data.train}, {"data.val", ret_spec->data.val}};
	for (int i = 0; i < 2; i++) {
		if (!paths[i][1] || beneath_path_ok(paths[i][1]))
			continue;
		char reason[ERROR_MAX_BYTES];
		snprintf(reason, sizeof reason,
		         "ringworker rank: error: %s '%.200s' is outside the data root: give a path relative "
		         "to the agent's --data-root, without '..'",
		         paths[i][0], paths[i][1]);
		fprintf(stderr, "%s\n", reason);
		s_send_failed(r, reason, RM_EXIT_DATA); /* a refused path is a data error (issue 22) */
		jobspec_free(ret_spec);
		return RM_EXIT_DATA;
	}
	r->last_step = ret_spec->train.steps;
	return 0;
}

/*
 * After training stopped on a failed collective (rc RM_EXIT_COMM) or on
 * ABORT {rejoin: true}: keep the process for the next attempt. Waits (up to
 * PARK_ASK_MS) to be asked to rejoin unless it was already, answers PARKED
 * unless the watcher did, and waits (up to PARK_TIMEOUT_MS) for REJOIN
 * unless it came already. Returns the attempt to rejoin, or 0 to exit (a
 * plain ABORT: the job failed or this rank is not kept; no answer in time).
 * Main thread, watcher stopped, communicator freed.
 */
static int s_park(rank_t *r)
{
	const rank_options_t *o = r->opt;
	int64_t t0 = fabric_now_us();
	int64_t deadline = t0 + (int64_t)PARK_ASK_MS * 1000;
	bool waiting_rejoin = false;
	for (;;) {
		s_send_parked(r);
		if (!waiting_rejoin && atomic_load(&r->parked_sent)) {
			waiting_rejoin = true;
			deadline = fabric_now_us() + (int64_t)PARK_TIMEOUT_MS * 1000;
		}
		int next = atomic_load(&r->rejoin_attempt);
		if (waiting_rejoin && next > o->attempt) {
			fprintf(stderr, "ringworker rank: rejoining job %s as rank %d of attempt %d, %.0f ms after "
			        "training stopped\n", o->job, o->rank, next, (double)(fabric_now_us() - t0) / 1e3);
			fflush(stderr);
			return next;
		}
		int64_t left_us = deadline - fabric_now_us();
		if (left_us <= 0) {
			fprintf(stderr, "ringworker rank: %s within %d s: exiting\n",
			        waiting_rejoin ? "no REJOIN from the coordinator" : "not asked to rejoin",
			        (waiting_rejoin ? PARK_TIMEOUT_MS : PARK_ASK_MS) / 1000);
			return 0;
		}
		wire_type_t type;
		json_t *p = NULL;
		char why[256];
		int rc = fabric_recv(r->fab, (int)((left_us + 999) / 1000), &type, &p, why, sizeof why);
		if (rc == -EAGAIN)
			continue;
		if (rc < 0) {
			if (rc == -EPROTO || rc == -ENOENT || rc == -EMSGSIZE || rc == -EINVAL) {
				fprintf(stderr, "ringworker rank: refused a message from the coordinator: %s\n", why);
				continue;
			}
			s_err("parked: receive failed: %s", zmq_strerror(-rc));
			return 0;
		}
		if (type == WIRE_ABORT && !s_abort_rejoins(p)) {
			fprintf(stderr, "ringworker rank: aborted by the coordinator: %s\n",
			        json_string_value(json_object_get(p, "reason")));
			json_decref(p);
			return 0;
		}
		if (type == WIRE_ABORT)
			atomic_store(&r->rejoin_asked, true);
		if (type == WIRE_REJOIN)
			s_note_rejoin(r, p);
		json_decref(p);
	}
}

/* A failed set-up: the line on stderr and in FAILED; returns code. */
static int s_setup_failed(rank_t *r, int code, const char *what, const char *err)
{
	char reason[700];
	snprintf(reason, sizeof reason, "ringworker rank: error: rank %d: %s%s", r->opt->rank, what, err);
	fprintf(stderr, "%s\n", reason);
	s_send_failed(r, reason, code);
	return code;
}

/*
 * The attempt's communicators, met through the coordinator's store: the
 * world (Gloo, or NCCL on a cuda rank), and with tensor parallelism
 * (docs/training.md "2D parallelism") its TP groups of t consecutive
 * ranks and DP groups of the ranks with one TP index. RM_EXIT_OK with all
 * three set (*ret_tp and *ret_dp NULL without TP), or the failure's code,
 * reported, with nothing left open.
 */
static int s_comms_join(rank_t *r, const jobspec_t *spec, comm_kv_t *kv, comm_t **ret_world,
                        comm_t **ret_tp, comm_t **ret_dp)
{
	const rank_options_t *o = r->opt;
	const char *host = o->host ? o->host : "127.0.0.1";
	int timeout_ms = o->comm_timeout_ms > 0 ? o->comm_timeout_ms : RANK_COMM_TIMEOUT_MS;
	char err[512];
	comm_t *comm;
#ifdef RINGMASTER_HAVE_NCCL
	if (spec->parallel.device == JOBSPEC_DEVICE_CUDA) /* device 0: the agent's CUDA_VISIBLE_DEVICES */
		comm = comm_nccl_new(kv, o->rank, o->world_size, 0, timeout_ms, err, sizeof err);
	else
#endif
		comm = comm_gloo_new(kv, o->rank, o->world_size, host, timeout_ms, err, sizeof err);
	if (!comm)
		return s_setup_failed(r, RM_EXIT_COMM, "rendezvous failed: ", err);
	comm_t *tp_comm = NULL, *dp_comm = NULL;
	const int tp = spec->parallel.tensor > 1 ? spec->parallel.tensor : 1;
	if (tp > 1) {
		tp_comm = comm_split(comm, kv, o->rank / tp, o->rank % tp, err, sizeof err);
		if (tp_comm)
			dp_comm = comm_split(comm, kv, o->rank % tp, o->rank / tp, err, sizeof err);
		if (!dp_comm) {
			comm_free(tp_comm);
			comm_free(comm);
			return s_setup_failed(r, RM_EXIT_COMM,
			                      "the tensor- and data-parallel groups did not form: ", err);
		}
	}
	*ret_world = comm;
	*ret_tp = tp_comm;
	*ret_dp = dp_comm;
	return RM_EXIT_OK;
}

static int s_train(rank_t *r, const jobspec_t *spec)
{
	const rank_options_t *o = r->opt;
	comm_kv_t kv = {.ctx = r, .set = s_kv_set, .get = s_kv_get};
	char err[512];
	/* A cuda rank on a node without a usable GPU fails before the rendezvous. */
	int usable = train_check_device(spec, err, sizeof err);
	if (usable != RM_EXIT_OK)
		return s_setup_failed(r, usable, "", err);
	double t0 = s_unix_now();
	comm_t *comm = NULL, *tp_comm = NULL, *dp_comm = NULL;
	int joined = s_comms_join(r, spec, &kv, &comm, &tp_comm, &dp_comm);
	if (joined != RM_EXIT_OK)
		return joined;
	const int tp = spec->parallel.tensor > 1 ? spec->parallel.tensor : 1;
	double t1 = s_unix_now();
	r->rendezvous_ms = (t1 - t0) * 1e3;
	fprintf(stderr, "ringworker rank: communicator ready at %.6f (rank %d of %d, rendezvous %.1f ms)\n",
	        t1, o->rank, o->world_size, (t1 - t0) * 1e3);
	fflush(stderr);

	cookie_io_functions_t io = {.write = s_log_write};
	FILE *log = fopencookie(r, "w", io);
	if (!log) {
		comm_free(dp_comm);
		comm_free(tp_comm);
		comm_free(comm);
		s_send_failed(r, "ringworker rank: error: out of memory", RM_EXIT_NOMEM);
		return RM_EXIT_NOMEM;
	}
	setvbuf(log, NULL, _IOLBF, 0);
	train_options_t topt = {
		.data_root = o->data_root ? o->data_root : ".", /* confined even without a root */
		.out = stdout,
		.log = log,
		.spec_name = spec->name,
		.comm = dp_comm ? dp_comm : comm,
		.rank = dp_comm ? o->rank / tp : o->rank,
		.tp_comm = tp_comm,
		.world_rank = o->rank,
		.quiet = o->rank != 0,
		.on_step = s_on_step,
		.on_step_ctx = r,
		.on_trace = s_on_trace, .on_trace_ctx = r, /* the spec's profile steps */
	};
	r->spec = spec;
	if (o->checkpoint_root && (strchr(o->job, '/') || !beneath_path_ok(o->job) || strcmp(o->job, ".") == 0)) {
		/* the job's folder is <root>/<job>: a job id is a plain name */
		s_err("the job id '%.64s' is not a plain name: no snapshots outside --checkpoint-root",
		      o->job);
	} else if (o->checkpoint_root) {
		int n = snprintf(r->job_dir, sizeof r->job_dir, "%s/%s", o->checkpoint_root, o->job);
		if (n < 0 || (size_t)n >= sizeof r->job_dir)
			r->job_dir[0] = '\0';
	}
	if (r->job_dir[0] && spec->checkpoint.every_steps > 0) {
		topt.checkpoint_dir = r->job_dir;
		topt.on_snapshot = rank_snap_written;
		topt.on_snapshot_failed = rank_snap_failed;
		topt.on_snapshot_ctx = r;
		topt.resume = true;
		topt.resume_upto = r->resume_upto;
	}
	if (r->resume_dir[0])
		topt.resume_dir = r->resume_dir; /* also with snapshots off */

	pthread_mutex_init(&r->lock, NULL);
	pthread_mutex_init(&r->snap_lock, NULL);
	pthread_mutex_init(&r->sent_lock, NULL);
	atomic_store(&r->stop_watch, false);
	/* the watcher may cancel them; cleared once it is joined */
	r->comm = comm;
	r->tp_comm = tp_comm;
	r->dp_comm = dp_comm;
	if (pthread_create(&r->watcher, NULL, s_watch, r) == 0)
		r->watching = true;
	else
		fprintf(stderr, "ringworker rank: no watcher thread; ABORT is read only at exit\n");

	logflood_t flood;
	bool flooding = logflood_start(&flood, o->rank);
	if (o->rank == 0) /* TensorBoard files (tboard.h): a warning at worst, never the job */
		r->tb = tboard_open_job(spec->tensorboard.dir, o->tensorboard_root, o->checkpoint_root, o->job, stderr);
	int rc = train_run(spec, &topt);
	tboard_close_job(r->tb, stderr);
	r->tb = NULL;
	if (flooding) {
		logflood_stop(&flood);
	}
	fflush(stdout);
	fclose(log);
	if (rc == RM_EXIT_OK && r->watching)
		rank_snap_wait_last(r);

	if (r->watching) {
		atomic_store(&r->stop_watch, true);
		pthread_join(r->watcher, NULL);
		r->watching = false;
	}
	r->comm = r->tp_comm = r->dp_comm = NULL;
	bool asked = atomic_load(&r->rejoin_asked);
	if (rc == RM_EXIT_COMM || (rc == RM_EXIT_ABORTED && asked)) {
		/* Drop the communicators first: peers still blocked with this rank
		 * fail at once and park too. */
		comm_free(dp_comm);
		comm_free(tp_comm);
		dp_comm = tp_comm = NULL;
		comm_free(comm);
		comm = NULL;
		if (rc == RM_EXIT_COMM && !asked) {
			char reason[ERROR_MAX_BYTES + 64];
			snprintf(reason, sizeof reason, "%s",
			         r->last_error[0] ? r->last_error : "ringworker rank: error: a collective failed");
			s_send_failed(r, reason, rc);
		}
		r->next_attempt = s_park(r);
	} else if (rc == RM_EXIT_OK) {
		/* The last step's report went out as METRICS; DONE repeats it. */
		s_send_final(r, WIRE_DONE, json_pack("{s:I, s:o}", "step", (json_int_t)r->done_step,
		                                      "loss", s_real(r->done_loss)));
	} else if (rc != RM_EXIT_ABORTED) {
		char reason[ERROR_MAX_BYTES + 64];
		if (r->last_error[0])
			snprintf(reason, sizeof reason, "%s", r->last_error);
		else
			snprintf(reason, sizeof reason, "ringworker rank: error: training stopped with exit status %d",
			         rc);
		s_send_failed(r, reason, rc);
	}
	pthread_mutex_destroy(&r->lock);
	pthread_mutex_destroy(&r->snap_lock);
	pthread_mutex_destroy(&r->sent_lock);
	for (int i = 0; i < SNAP_PENDING; i++)
		rank_snap_clear(&r->pending[i]);
	for (size_t i = 0; i < METRICS_KEPT; i++)
		json_decref(r->sent[i]);
	comm_free(dp_comm);
	comm_free(tp_comm);
	comm_free(comm);
	return rc;
}

/* One attempt of the rank, on its own connection (identity
 * rank/<job>/<attempt>/<rank>). The attempt to rejoin in this process goes
 * to *ret_next (0: none). An exit code. */
static int s_attempt(const rank_options_t *opt, void *zctx, int *ret_next)
{
	*ret_next = 0;
	rank_t *r = calloc(1, sizeof *r); /* large (the kept rows): not on the stack */
	if (!r) {
		s_err("out of memory");
		return RM_EXIT_NOMEM;
	}
	r->opt = opt;
	r->zctx = zctx;
	r->metrics_every = 1;
	atomic_init(&r->rejoin_asked, false);
	atomic_init(&r->parked_sent, false);
	atomic_init(&r->rejoin_attempt, 0);
	atomic_init(&r->stop_watch, false);
	char identity[WIRE_MAX_IDENTITY_BYTES + 1], err[256];
	int n = snprintf(identity, sizeof identity, "rank/%s/%d/%d", opt->job, opt->attempt, opt->rank);
	int rc;
	if (n < 0 || (size_t)n >= sizeof identity) {
		s_err("job id '%s' is too long", opt->job);
		rc = RM_EXIT_USAGE;
		goto out;
	}
	r->fab = fabric_new(zctx, opt->coordinator, identity, err, sizeof err);
	if (!r->fab) {
		s_err("%s", err);
		rc = RM_EXIT_USAGE;
		goto out;
	}
	jobspec_t spec = {0};
	rc = s_join(r, &spec);
	if (rc == 0) {
		rc = s_train(r, &spec);
		jobspec_free(&spec);
		*ret_next = r->next_attempt;
	}
	fabric_free(r->fab);
out:
	free(r);
	return rc;
}

int rank_run(const rank_options_t *opt)
{
	if (sodium_init() < 0) {
		s_err("libsodium failed to initialise");
		return RM_EXIT_USAGE;
	}
	void *zctx = zmq_ctx_new();
	if (!zctx) {
		s_err("cannot create a ZeroMQ context: %s", zmq_strerror(errno));
		return RM_EXIT_USAGE;
	}
	/* what NCCL, Gloo and OpenMP were told (agent defaults, job env, the
	 * agent's own): one line in the job's logs */
	rankenv_log(stderr, "ringworker rank: ", environ);
	rank_options_t cur = *opt;
	int rc, next;
	/* A survivor of a failed attempt rejoins the next one in this process. */
	while ((rc = s_attempt(&cur, zctx, &next)) != RM_EXIT_OK && next > cur.attempt)
		cur.attempt = next;
	zmq_ctx_term(zctx);
	return rc;
}
