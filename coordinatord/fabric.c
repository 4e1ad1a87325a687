/*
 * fabric: agents, attempts, rendezvous and scheduling on the broker loop
 * (see fabric.h for the contract and docs/coordinator.md for the protocol
 * choices).
 *
 * Memory model: agents live in `agents` (by node) for the life of the fabric,
 * dead ones included, so pointers to them stay valid. A live attempt (the
 * current attempt of a scheduled or running job) lives in `attempts` (by job
 * id) from placement until the job reaches a final state; its ranks point at
 * their agents and hold their devices until then. When it fails with
 * restarts left (recovery, docs/coordinator.md), it stays there marked
 * `failed` while its job is recovering: its ranks' messages are refused, it
 * keeps its devices until its restart is due, and the next attempt replaces
 * it in `attempts` when placed.
 */
#include "fabric.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <zmq.h>

#include "clock.h"
#include "exitcode.h"
#include "log.h"
#include "metrics.h"
#include "gang.h"
#include "smap.h"
#include "snapshot.h"
#include "traces.h"
#include "wire.h"

#define KIND_CPU 0
#define KIND_CUDA 1
#define N_KINDS 2
#define MAX_DEVICES 4096
#define MAX_BATCH 512              /* wire messages per fabric_handle_wire */
#define EXPIRY_CHECK_US 100000     /* how often agents' silence is checked */
#define SCHED_PERIOD_US 1000000    /* scheduling pass even without a change */
#define KV_MAX_KEY_BYTES 4096
#define KV_MAX_KEYS 65536
#define KV_MAX_BYTES (64u << 20)   /* keys + values of one attempt */
#define KV_MAX_PARKED 65536
#define KV_MAX_TIMEOUT_MS 86400000 /* one day */
#define REASON_BYTES 2048
#define SNAP_MAX_FILE_BYTES 255     /* a shard's file name */
#define SNAP_MAX_PATH_BYTES 4096    /* a committed folder's path */
#define SNAP_MAX_DELETED 65536      /* steps in one SNAPSHOT_COMMITTED's deleted list */
#define SNAP_MAX_UNCONFIRMED 8      /* SNAPSHOT_COMMITs awaiting rank 0's answer, per attempt */
/* A rank's DONE and its agent's RANK_EXITED travel on different connections:
 * a clean exit (status 0) before DONE fails the job only if DONE has not
 * come this long after it. */
#define CLEAN_EXIT_GRACE_US 2000000
/* A rank's FAILED and its agent's RANK_EXITED (with the exit status that
 * tells whether a retry can help) travel on different connections too: a
 * FAILED without exit_code waits this long for the status. */
#define FAILED_EXIT_GRACE_US 2000000
#define DEFAULT_MAX_RESTARTS 3     /* the job spec's default, for a spec without it */

static const char *const s_kind_names[N_KINDS] = {"cpu", "cuda"};

typedef struct attempt attempt_t;

/* What an attempt placed by a restart reports in its `recovered` event. */
typedef struct {
	char cause[REASON_BYTES];
	int failed_attempt;
	int64_t failed_mono_us;  /* the failure handled */
	int64_t detection_us;    /* the failure -> the coordinator heard of it */
	int64_t spawned_mono_us; /* SPAWNs of the new attempt sent */
	int64_t joined0_mono_us; /* its rank 0 joined (0: not yet) */
	bool has_resume;
	int64_t resume_step;     /* the snapshot offered in rank 0's JOINED */
} recovery_t;

typedef struct {
	int kind;
	int index;
	attempt_t *owner; /* NULL when free */
} device_t;

typedef struct {
	char node[WIRE_MAX_IDENTITY_BYTES + 1];
	char ident[WIRE_MAX_IDENTITY_BYTES + 1]; /* "agent/<node>" */
	device_t *devices; /* sorted by (kind, index) */
	int n_devices;
	bool alive;
	bool hb_dirty;     /* last_seen_wall_us not yet written to the store */
	unsigned mark;     /* scratch for "each agent once" walks */
	int64_t last_seen_mono_us;
	int64_t last_seen_wall_us;
} agent_t;

typedef struct {
	agent_t *agent;
	int device_kind;
	int device_index;
	bool connected; /* it has sent a message: it can be told to ABORT */
	bool joined, done, exited;
	bool rejoin;    /* failed attempt: asked to park and rejoin the next one in its process */
	bool parked;    /* ... and it answered PARKED */
	int adopted_from; /* a survivor of that attempt kept as this rank (0: a new process) */
	bool reported;  /* scratch for REGISTER reconciliation */
	int64_t clean_exit_deadline_us; /* exited with status 0 before DONE: wait for it until then */
	int64_t failed_deadline_us;     /* sent FAILED without exit_code: wait for its exit status until then */
	char *failed_reason;            /* that FAILED's reason (malloc'ed) */
	bool has_memory; /* memory as last written to the store (rewritten only when it changes) */
	store_rank_memory_t memory;
} rank_rt_t;

/* One rank's SNAPSHOT_WRITTEN for the snapshot in flight. */
typedef struct {
	bool reported;
	int64_t bytes;
	char xxh3[17];
	char file[SNAP_MAX_FILE_BYTES + 1];
} shard_t;

typedef struct parked {
	struct parked *next;
	int rank;
	char *key;
	int64_t deadline_mono_us;
} parked_t;

struct attempt {
	char job_id[STORE_ID_BYTES];
	int attempt;
	int world_size;
	int kind;
	store_job_state_t state; /* scheduled or running */
	json_t *spec;            /* the stored spec, sent in JOINED */
	rank_rt_t *ranks;        /* world_size entries */
	int n_joined, n_done;
	smap_t kv;               /* key -> malloc'ed value */
	size_t kv_bytes;
	parked_t *parked;
	int n_parked;
	/* snapshots (the protocol is in wire.h): the set of reports being
	 * gathered (one step at a time), the last complete set (its
	 * SNAPSHOT_COMMIT is sent again on a repeated report), and the steps
	 * sent to rank 0 in a SNAPSHOT_COMMIT that it has not confirmed yet */
	shard_t *shards;         /* world_size entries, allocated at the first report */
	shard_t *sent_shards;    /* world_size entries: the last complete set */
	bool gathering;
	int64_t gather_step;
	int n_gathered;
	bool has_sent;
	int64_t sent_step;       /* the step of sent_shards */
	int64_t unconfirmed[SNAP_MAX_UNCONFIRMED];
	int n_unconfirmed;
	/* metrics rows: the highest step stored for this attempt (-1: not read
	 * from the store yet, after a coordinator restart), and the from_step of
	 * the last METRICS_RESEND sent (0: none) */
	int64_t last_metric_step;
	int64_t resend_from;
	bool has_failed_snap;    /* a SNAPSHOT_FAILED was recorded as an event, for failed_snap_step */
	int64_t failed_snap_step;
	bool has_committed;      /* committed_step was recorded by this attempt */
	int64_t committed_step;  /* the highest it recorded */
	/* recovery (docs/coordinator.md "Recovery"): the job's restarts so far
	 * and its spec's limit; once the attempt has failed with restarts left,
	 * `failed` is set (its ranks are being stopped, their messages refused),
	 * then `drained` when every rank is gone or the grace is over, then it
	 * is replaced by the next attempt at restart_at_us (devices permitting);
	 * `released` once its devices were given back for that placement */
	int restarts, max_restarts;
	bool failed, drained, released;
	char *cause;             /* malloc'ed: why it failed */
	int64_t failed_mono_us;  /* when the coordinator handled the failure */
	int64_t detection_us;    /* from the failure to the coordinator hearing of it */
	int64_t drain_deadline_us, restart_at_us;
	recovery_t *rec;         /* attempts placed by a restart, until rank 0's first METRICS */
};

/* A message held until the transaction of its iteration is committed. */
typedef struct outmsg {
	struct outmsg *next;
	wire_type_t type;
	json_t *payload;
	char ident[WIRE_MAX_IDENTITY_BYTES + 1];
	size_t ident_len;
} outmsg_t;

struct fabric {
	void *router;
	store_t *st;
	fabric_options_t opt;
	int64_t dead_after_us;
	smap_t agents;   /* node -> agent_t* */
	smap_t attempts; /* job id -> attempt_t* */
	bool in_tx;
	bool tx_failed;
	int n_tx_writes;
	bool sched_dirty;
	unsigned mark_gen;
	int64_t next_hb_us, next_expiry_us, next_sched_us;
	outmsg_t *out_head, *out_tail; /* sent after the commit, in order */
};

static int kind_parse(const char *name)
{
	for (int k = 0; name && k < N_KINDS; k++)
		if (strcmp(name, s_kind_names[k]) == 0)
			return k;
	return -1;
}

/* ---- store writes: one lazy transaction per loop iteration ---- */

static bool tx(fabric_t *f)
{
	if (f->in_tx)
		return true;
	int r = store_begin(f->st);
	if (r < 0) {
		log_error("store: cannot begin a transaction: %s", store_errmsg(f->st));
		return false;
	}
	f->in_tx = true;
	f->tx_failed = false;
	f->n_tx_writes = 0;
	return true;
}

/* Note the outcome of one write inside the transaction. */
static void wrote(fabric_t *f, int r, const char *what)
{
	f->n_tx_writes++;
	if (r < 0 && r != -ENOENT) {
		log_error("store: %s failed (%s): %s", what, strerror(-r), store_errmsg(f->st));
		f->tx_failed = true;
	}
}

static void send_now(fabric_t *f, const void *ident, size_t ident_len, wire_type_t type, const json_t *payload)
{
	int r = wire_send(f->router, ident, ident_len, type, payload);
	if (r < 0 && log_enabled(LOG_DEBUG))
		log_debug("broker: %s to %.*s not sent: %s", wire_type_name(type), (int)ident_len,
		          (const char *)ident, strerror(-r));
}

/* Send the held messages (after the commit: a peer never hears of a state
 * that a reader of the database cannot see yet). */
static void send_held(fabric_t *f)
{
	while (f->out_head) {
		outmsg_t *m = f->out_head;
		f->out_head = m->next;
		send_now(f, m->ident, m->ident_len, m->type, m->payload);
		json_decref(m->payload);
		free(m);
	}
	f->out_tail = NULL;
}

void fabric_flush(fabric_t *f)
{
	if (!f)
		return;
	if (f->in_tx) {
		int r = f->tx_failed ? -EIO : store_commit(f->st);
		if (r < 0) {
			if (!f->tx_failed)
				log_error("store: commit of %d write(s) failed: %s", f->n_tx_writes, store_errmsg(f->st));
			store_rollback(f->st);
		}
		metrics_record_commit(f->n_tx_writes, r == 0);
		f->in_tx = false;
		f->tx_failed = false;
		f->n_tx_writes = 0;
	}
	send_held(f);
}

/* ---- sending ---- */

/* Send `payload` (a new reference, consumed; NULL means out of memory) to
 * the peer `ident` (`ident_len` bytes): at once, or after the commit when a
 * transaction is open, keeping the order of everything sent. */
static void send_raw(fabric_t *f, const void *ident, size_t ident_len, wire_type_t type, json_t *payload)
{
	if (!payload) {
		log_error("broker: out of memory building %s for %.*s", wire_type_name(type), (int)ident_len,
		          (const char *)ident);
		return;
	}
	if (!f->in_tx && !f->out_head) {
		send_now(f, ident, ident_len, type, payload);
		json_decref(payload);
		return;
	}
	outmsg_t *m = malloc(sizeof *m);
	if (!m) {
		send_now(f, ident, ident_len, type, payload);
		json_decref(payload);
		return;
	}
	m->next = NULL;
	m->type = type;
	m->payload = payload;
	if (ident_len > WIRE_MAX_IDENTITY_BYTES)
		ident_len = WIRE_MAX_IDENTITY_BYTES;
	memcpy(m->ident, ident, ident_len);
	m->ident_len = ident_len;
	if (f->out_tail)
		f->out_tail->next = m;
	else
		f->out_head = m;
	f->out_tail = m;
}

static void send_to(fabric_t *f, const char *ident, wire_type_t type, json_t *payload)
{
	send_raw(f, ident, strlen(ident), type, payload);
}

static void send_error(fabric_t *f, const void *ident, size_t ident_len, int code, const char *detail)
{
	if (log_enabled(LOG_DEBUG))
		log_debug("broker: ERROR %d to %.*s: %s", code, (int)ident_len, (const char *)ident, detail);
	send_raw(f, ident, ident_len, WIRE_ERROR, json_pack("{s:i, s:s}", "code", code, "detail", detail));
}

static void rank_ident(char out[WIRE_MAX_IDENTITY_BYTES + 1], const char *job, int attempt, int rank)
{
	snprintf(out, WIRE_MAX_IDENTITY_BYTES + 1, "rank/%s/%d/%d", job, attempt, rank);
}

/* ---- attempts ---- */

static void attempt_free(attempt_t *at)
{
	if (!at)
		return;
	size_t pos = 0;
	smap_slot_t *s;
	while ((s = smap_next(&at->kv, &pos)))
		free(s->value);
	smap_free(&at->kv);
	while (at->parked) {
		parked_t *p = at->parked;
		at->parked = p->next;
		free(p->key);
		free(p);
	}
	json_decref(at->spec);
	for (int r = 0; at->ranks && r < at->world_size; r++)
		free(at->ranks[r].failed_reason);
	free(at->cause);
	free(at->rec);
	free(at->shards);
	free(at->sent_shards);
	free(at->ranks);
	free(at);
}

static device_t *agent_device(agent_t *a, int kind, int index)
{
	for (int i = 0; i < a->n_devices; i++)
		if (a->devices[i].kind == kind && a->devices[i].index == index)
			return &a->devices[i];
	return NULL;
}

/*
 * End a live attempt: the job goes to `to` with `reason` (unless it is
 * already there in the store: cancel), its unfinished ranks become lost, and
 * with `kill` its connected ranks get ABORT and its agents KILL (rank -1).
 * Devices are freed and the scheduler runs again. `at` is freed.
 */
static void end_attempt(fabric_t *f, attempt_t *at, store_job_state_t to, const char *reason, bool kill,
                        bool state_already_set)
{
	int64_t now = clock_wall_us();
	if (tx(f)) {
		if (!state_already_set)
			wrote(f, store_job_set_state(f->st, at->job_id, to, reason, now), "job state");
		wrote(f, store_rank_lose_attempt(f->st, at->job_id, at->attempt, now), "ranks lost");
	}
	if (kill) {
		char ident[WIRE_MAX_IDENTITY_BYTES + 1];
		for (int r = 0; r < at->world_size; r++) {
			if (!at->ranks[r].connected)
				continue;
			rank_ident(ident, at->job_id, at->attempt, r);
			send_to(f, ident, WIRE_ABORT,
			        json_pack("{s:s, s:i, s:s}", "job", at->job_id, "attempt", at->attempt, "reason",
			                  reason));
		}
		unsigned gen = ++f->mark_gen;
		for (int r = 0; r < at->world_size; r++) {
			agent_t *a = at->ranks[r].agent;
			if (!a || !a->alive || a->mark == gen)
				continue;
			a->mark = gen;
			send_to(f, a->ident, WIRE_KILL,
			        json_pack("{s:s, s:i, s:i}", "job", at->job_id, "attempt", at->attempt, "rank", -1));
		}
	}
	log_info("job %s attempt %d %s: %s", at->job_id, at->attempt, store_job_state_name(to), reason);
	for (int r = 0; r < at->world_size; r++) {
		rank_rt_t *rr = &at->ranks[r];
		device_t *d = rr->agent ? agent_device(rr->agent, rr->device_kind, rr->device_index) : NULL;
		if (d && d->owner == at)
			d->owner = NULL;
	}
	smap_del(&f->attempts, at->job_id);
	attempt_free(at);
	f->sched_dirty = true;
}

static void fail_attempt(fabric_t *f, attempt_t *at, const char *cause)
{
	end_attempt(f, at, STORE_JOB_FAILED, cause, true, false);
}

/* ---- recovery (docs/coordinator.md "Recovery") ---- */

/* The wait before restart number `n` (1 for the first): none for the first,
 * then restart_backoff_ms doubling, at most restart_backoff_max_ms. */
static int64_t backoff_us(const fabric_t *f, int n)
{
	if (n <= 1)
		return 0;
	int64_t ms = f->opt.restart_backoff_ms;
	for (int k = 2; k < n && ms < f->opt.restart_backoff_max_ms; k++)
		ms *= 2;
	if (ms > f->opt.restart_backoff_max_ms)
		ms = f->opt.restart_backoff_max_ms;
	return ms * 1000;
}

/* The job spec's restart.max_restarts (the default when absent). */
static int spec_max_restarts(const json_t *spec)
{
	json_t *v = json_object_get(json_object_get(spec, "restart"), "max_restarts");
	if (!json_is_integer(v))
		return DEFAULT_MAX_RESTARTS;
	json_int_t n = json_integer_value(v);
	return n < 0 ? 0 : n > INT_MAX ? INT_MAX : (int)n;
}

/* What a failure that no restart can fix is (api/exitcode.h), or NULL when
 * a restart may help (signals, collectives, memory, anything else). */
static const char *not_retryable(rm_failure_t kind)
{
	return rm_failure_retryable(kind) ? NULL : rm_failure_describe(kind);
}

/* The failure kind of a FAILED or RANK_EXITED payload: its `failure` code
 * when it carries one this build knows, else what exit status `exit_code`
 * (signal `sig`) means (an older worker). */
static rm_failure_t payload_failure(const json_t *p, int exit_code, int sig)
{
	json_t *v = json_object_get(p, "failure");
	if (json_is_integer(v) && rm_failure_valid(json_integer_value(v)))
		return (rm_failure_t)json_integer_value(v);
	return rm_exit_failure(exit_code, sig);
}

/* A rank of a failed attempt is gone once its agent reported its exit, or
 * the agent itself is gone. */
static bool rank_gone(const rank_rt_t *rr)
{
	return rr->exited || !rr->agent || !rr->agent->alive;
}

/* A parked rank that can be kept for the next attempt. */
static bool rank_kept(const rank_rt_t *rr)
{
	return rr->rejoin && rr->parked && !rank_gone(rr);
}

/* The ABORT that asks a survivor of the failed attempt `at` to park. */
static json_t *rejoin_abort(const attempt_t *at)
{
	char reason[REASON_BYTES + 16];
	snprintf(reason, sizeof reason, "recovering: %s", at->cause ? at->cause : "attempt failed");
	return json_pack("{s:s, s:i, s:s, s:b}", "job", at->job_id, "attempt", at->attempt, "reason", reason,
	                 "rejoin", 1);
}

/* Stop rank r of the failed attempt `at` for good: a plain ABORT on its
 * identity and a KILL of just that rank to its agent. */
static void stop_rank(fabric_t *f, attempt_t *at, int r, const char *reason)
{
	rank_rt_t *rr = &at->ranks[r];
	char ident[WIRE_MAX_IDENTITY_BYTES + 1];
	if (rr->connected) {
		rank_ident(ident, at->job_id, at->attempt, r);
		send_to(f, ident, WIRE_ABORT,
		        json_pack("{s:s, s:i, s:s}", "job", at->job_id, "attempt", at->attempt, "reason", reason));
	}
	if (rr->agent && rr->agent->alive && !rr->exited)
		send_to(f, rr->agent->ident, WIRE_KILL,
		        json_pack("{s:s, s:i, s:i}", "job", at->job_id, "attempt", at->attempt, "rank", r));
	rr->rejoin = false;
}

/* A failed attempt whose ranks are all gone or parked (or whose grace is
 * over: the others are stopped) waits out its backoff; the scheduling pass
 * then restarts it. */
static void check_drained(fabric_t *f, attempt_t *at, int64_t now)
{
	if (!at->failed || at->drained)
		return;
	int n_left = 0;
	for (int r = 0; r < at->world_size; r++)
		n_left += !rank_gone(&at->ranks[r]) && !rank_kept(&at->ranks[r]);
	if (n_left > 0 && now < at->drain_deadline_us)
		return;
	for (int r = 0; r < at->world_size && n_left > 0; r++)
		if (!rank_gone(&at->ranks[r]) && !rank_kept(&at->ranks[r]))
			stop_rank(f, at, r, "did not park within the restart grace: replaced by a new process");
	at->drained = true;
	int64_t wait = backoff_us(f, at->restarts);
	at->restart_at_us = now + wait;
	if (n_left > 0)
		log_warn("job %s attempt %d: %d rank(s) not reported gone after %.1f s: restarting anyway",
		         at->job_id, at->attempt, n_left, (double)f->opt.restart_grace_ms / 1e3);
	log_info("job %s attempt %d: every rank is gone: restart %d of %d in %lld ms", at->job_id, at->attempt,
	         at->restarts, at->max_restarts, (long long)(wait / 1000));
	f->sched_dirty = true;
}

/*
 * A rank of the live attempt `at` failed (`cause`), `detection_us` after it
 * happened. With restarts left and a failure a restart can help
 * (`not_retryable` NULL), the job goes `recovering`: the attempt's ranks get
 * ABORT ("recovering: CAUSE") and their agents KILL, its messages are
 * refused from now on, and once its ranks are gone and the backoff is over
 * the scheduler places the next attempt. Otherwise the job fails. An attempt
 * that has failed already is left alone. `at` may be freed.
 */
static void attempt_failed(fabric_t *f, attempt_t *at, const char *cause, const char *not_retryable,
                           int64_t detection_us)
{
	if (at->failed)
		return;
	char reason[REASON_BYTES];
	if (not_retryable) {
		snprintf(reason, sizeof reason, "%s (%s: not retried)", cause, not_retryable);
		fail_attempt(f, at, reason);
		return;
	}
	if (at->restarts >= at->max_restarts) {
		snprintf(reason, sizeof reason, "restart.max_restarts (%d) reached: %s", at->max_restarts, cause);
		fail_attempt(f, at, reason);
		return;
	}
	int64_t now = clock_mono_us(), now_wall = clock_wall_us();
	at->failed = true;
	at->restarts++;
	at->failed_mono_us = now;
	at->detection_us = detection_us > 0 ? detection_us : 0;
	at->drain_deadline_us = now + (int64_t)f->opt.restart_grace_ms * 1000;
	free(at->cause);
	at->cause = strdup(cause);
	at->state = STORE_JOB_RECOVERING;
	while (at->parked) {
		parked_t *p = at->parked;
		at->parked = p->next;
		free(p->key);
		free(p);
	}
	at->n_parked = 0;
	snprintf(reason, sizeof reason, "attempt %d failed: %s; restart %d of %d (backoff %lld ms)", at->attempt,
	         cause, at->restarts, at->max_restarts, (long long)(backoff_us(f, at->restarts) / 1000));
	if (tx(f)) {
		wrote(f, store_job_set_state(f->st, at->job_id, STORE_JOB_RECOVERING, cause, now_wall), "job recovering");
		wrote(f, store_job_set_restarts(f->st, at->job_id, at->restarts, now_wall), "job restarts");
		wrote(f, store_event_insert(f->st, at->job_id, "recovering", NULL, NULL, reason, at->attempt, now_wall),
		      "recovering event");
	}
	log_warn("job %s recovering: %s", at->job_id, reason);
	/* Survivors (connected, on a live agent, not exited) park in their
	 * process for the next attempt; the others are stopped. */
	char abort_reason[REASON_BYTES + 16];
	snprintf(abort_reason, sizeof abort_reason, "recovering: %s", cause);
	char ident[WIRE_MAX_IDENTITY_BYTES + 1];
	for (int r = 0; r < at->world_size; r++) {
		rank_rt_t *rr = &at->ranks[r];
		if (rr->connected && !rank_gone(rr)) {
			rr->rejoin = true;
			rank_ident(ident, at->job_id, at->attempt, r);
			send_to(f, ident, WIRE_ABORT, rejoin_abort(at));
		} else if (!rr->exited) {
			stop_rank(f, at, r, abort_reason);
		}
	}
	check_drained(f, at, now);
}

void fabric_job_cancelled(fabric_t *f, const char *job_id, const char *reason)
{
	attempt_t *at = smap_get(&f->attempts, job_id);
	if (at)
		end_attempt(f, at, STORE_JOB_CANCELLED, reason, true, true);
	f->sched_dirty = true;
}

void fabric_mark_dirty(fabric_t *f)
{
	f->sched_dirty = true;
}

/* ---- agents ---- */

static int device_cmp(const void *x, const void *y)
{
	const device_t *a = x, *b = y;
	if (a->kind != b->kind)
		return a->kind - b->kind;
	return (a->index > b->index) - (a->index < b->index);
}

/*
 * Parse REGISTER's devices into a sorted array. 0 and *ret (malloc'ed, may be
 * NULL when empty) or -EINVAL with `detail` naming the field.
 */
static int parse_devices(const json_t *arr, device_t **ret, int *ret_n, char *detail, size_t dlen)
{
	size_t n = json_array_size(arr);
	if (n > MAX_DEVICES) {
		snprintf(detail, dlen, "devices: %zu entries, at most %d", n, MAX_DEVICES);
		return -EINVAL;
	}
	device_t *d = n ? calloc(n, sizeof *d) : NULL;
	if (n && !d) {
		snprintf(detail, dlen, "out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(arr, i);
		json_t *k = json_object_get(e, "kind"), *ix = json_object_get(e, "index");
		int kind = json_is_string(k) ? kind_parse(json_string_value(k)) : -1;
		if (!json_is_object(e) || kind < 0) {
			snprintf(detail, dlen, "devices[%zu].kind must be \"cpu\" or \"cuda\"", i);
			free(d);
			return -EINVAL;
		}
		if (!json_is_integer(ix) || json_integer_value(ix) < 0 || json_integer_value(ix) > 65535) {
			snprintf(detail, dlen, "devices[%zu].index must be an integer from 0 to 65535", i);
			free(d);
			return -EINVAL;
		}
		d[i].kind = kind;
		d[i].index = (int)json_integer_value(ix);
	}
	if (n)
		qsort(d, n, sizeof *d, device_cmp);
	for (size_t i = 1; i < n; i++) {
		if (d[i].kind == d[i - 1].kind && d[i].index == d[i - 1].index) {
			snprintf(detail, dlen, "devices: %s %d is listed twice", s_kind_names[d[i].kind], d[i].index);
			free(d);
			return -EINVAL;
		}
	}
	*ret = d;
	*ret_n = (int)n;
	return 0;
}

static char *devices_json(const device_t *d, int n)
{
	json_t *arr = json_array();
	for (int i = 0; arr && i < n; i++)
		if (json_array_append_new(arr, json_pack("{s:s, s:i}", "kind", s_kind_names[d[i].kind], "index",
		                                         d[i].index)) < 0) {
			json_decref(arr);
			arr = NULL;
		}
	char *s = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
	json_decref(arr);
	return s;
}

static agent_t *agent_get_or_add(fabric_t *f, const char *node)
{
	agent_t *a = smap_get(&f->agents, node);
	if (a)
		return a;
	a = calloc(1, sizeof *a);
	if (!a)
		return NULL;
	snprintf(a->node, sizeof a->node, "%s", node);
	snprintf(a->ident, sizeof a->ident, "agent/%s", node);
	if (smap_put(&f->agents, node, a, NULL) < 0) {
		free(a);
		return NULL;
	}
	return a;
}

static void touch_agent(agent_t *a)
{
	a->last_seen_mono_us = clock_mono_us();
	a->last_seen_wall_us = clock_wall_us();
	a->hb_dirty = true;
}

static json_t *spawn_payload(const attempt_t *at, int rank)
{
	return json_pack("{s:s, s:i, s:i, s:i, s:{s:s, s:i}}", "job", at->job_id, "attempt", at->attempt,
	                 "rank", rank, "world_size", at->world_size, "device", "kind",
	                 s_kind_names[at->ranks[rank].device_kind], "index", at->ranks[rank].device_index);
}

static void on_register(fabric_t *f, const char *ident, const char *node, json_t *p)
{
	char detail[512];
	const char *pnode = json_string_value(json_object_get(p, "node"));
	if (strcmp(pnode, node) != 0) {
		snprintf(detail, sizeof detail, "REGISTER node \"%.100s\" does not match the identity agent/%.100s",
		         pnode, node);
		send_error(f, ident, strlen(ident), 400, detail);
		return;
	}
	device_t *devs = NULL;
	int n_devs = 0;
	if (parse_devices(json_object_get(p, "devices"), &devs, &n_devs, detail, sizeof detail) < 0) {
		send_error(f, ident, strlen(ident), 400, detail);
		return;
	}
	json_t *ranks = json_object_get(p, "ranks");
	size_t i;
	json_t *e;
	json_array_foreach(ranks, i, e)
	{
		json_t *j = json_object_get(e, "job"), *at = json_object_get(e, "attempt"),
		       *rk = json_object_get(e, "rank");
		if (!json_is_string(j) || !json_is_integer(at) || !json_is_integer(rk)) {
			snprintf(detail, sizeof detail,
			         "ranks[%zu] must be {job: string, attempt: integer, rank: integer, pid: integer}", i);
			free(devs);
			send_error(f, ident, strlen(ident), 400, detail);
			return;
		}
	}
	char *dev_json = devices_json(devs, n_devs);
	agent_t *a = dev_json ? agent_get_or_add(f, node) : NULL;
	if (!a) {
		free(dev_json);
		free(devs);
		send_error(f, ident, strlen(ident), 503, "the coordinator is out of memory");
		return;
	}
	bool was_alive = a->alive;
	free(a->devices);
	a->devices = devs;
	a->n_devices = n_devs;
	a->alive = true;
	touch_agent(a);
	a->hb_dirty = false; /* written by the register itself */
	if (tx(f))
		wrote(f, store_worker_register(f->st, node, dev_json, a->last_seen_wall_us), "worker register");
	free(dev_json);
	log_info("agent %s registered (%s): %d device(s), %zu running rank(s)", node,
	         was_alive ? "again" : "alive", n_devs, json_array_size(ranks));
	send_to(f, ident, WIRE_REGISTERED,
	        json_pack("{s:i, s:i}", "heartbeat_ms", f->opt.heartbeat_ms, "dead_after", f->opt.dead_after));

	/* Re-take the devices of live attempts placed here; a placed device the
	 * agent no longer has fails its job. */
	size_t pos = 0;
	smap_slot_t *s;
	while ((s = smap_next(&f->attempts, &pos))) {
		attempt_t *lat = s->value;
		char cause[REASON_BYTES] = "";
		for (int r = 0; r < lat->world_size; r++) {
			rank_rt_t *rr = &lat->ranks[r];
			rr->reported = false;
			if (rr->agent != a || lat->released)
				continue;
			device_t *d = agent_device(a, rr->device_kind, rr->device_index);
			if (d)
				d->owner = lat;
			else if (!cause[0] && !lat->failed)
				snprintf(cause, sizeof cause, "rank %d lost: node %s registered again without %s %d", r,
				         node, s_kind_names[rr->device_kind], rr->device_index);
		}
		if (cause[0])
			attempt_failed(f, lat, cause, NULL, 0);
	}

	/* Reconcile the ranks it runs: ranks of attempts that are not live here get KILL. */
	json_array_foreach(ranks, i, e)
	{
		const char *job = json_string_value(json_object_get(e, "job"));
		json_int_t att = json_integer_value(json_object_get(e, "attempt"));
		json_int_t rank = json_integer_value(json_object_get(e, "rank"));
		attempt_t *lat = smap_get(&f->attempts, job);
		bool keep = lat && !lat->failed && lat->attempt == att && rank >= 0 && rank < lat->world_size &&
		            lat->ranks[rank].agent == a;
		if (keep) {
			lat->ranks[rank].reported = true;
			continue;
		}
		if (lat && lat->failed && lat->attempt == att && rank >= 0 && rank < lat->world_size &&
		    lat->ranks[rank].agent == a)
			lat->ranks[rank].reported = true; /* still running: killed now, gone once reported exited */
		log_info("agent %s runs rank %lld of job %.40s attempt %lld, which is not live: KILL", node,
		         (long long)rank, job, (long long)att);
		send_to(f, a->ident, WIRE_KILL,
		        json_pack("{s:s, s:I, s:I}", "job", job, "attempt", (json_int_t)att, "rank", (json_int_t)rank));
	}
	/* Ranks placed here that it does not report: not yet joined -> SPAWN again
	 * (the first SPAWN may have crossed the REGISTER); joined -> lost. Ranks
	 * of a failed attempt that it does not report are gone. */
	pos = 0;
	while ((s = smap_next(&f->attempts, &pos))) {
		attempt_t *lat = s->value;
		char cause[REASON_BYTES] = "";
		if (lat->failed) {
			for (int r = 0; r < lat->world_size; r++) {
				rank_rt_t *rr = &lat->ranks[r];
				if (rr->agent == a && !rr->reported)
					rr->exited = true;
			}
			check_drained(f, lat, clock_mono_us());
			continue;
		}
		for (int r = 0; r < lat->world_size; r++) {
			rank_rt_t *rr = &lat->ranks[r];
			if (rr->agent != a || rr->reported || rr->done || rr->exited)
				continue;
			if (!rr->joined) {
				send_to(f, a->ident, WIRE_SPAWN, spawn_payload(lat, r));
			} else if (!cause[0]) {
				snprintf(cause, sizeof cause, "rank %d lost: agent %s registered again without it", r, node);
			}
		}
		if (cause[0])
			attempt_failed(f, lat, cause, NULL, 0);
	}
	f->sched_dirty = true;
}

static void describe_exit(char *out, size_t n, int rank, int exit_code, int sig, const char *error)
{
	if (sig != 0)
		snprintf(out, n, "rank %d exited: killed by signal %d", rank, sig);
	else if (error && error[0])
		snprintf(out, n, "rank %d exited with status %d: %s", rank, exit_code, error);
	else
		snprintf(out, n, "rank %d exited with status %d", rank, exit_code);
}

static void on_rank_exited(fabric_t *f, agent_t *a, json_t *p)
{
	const char *job = json_string_value(json_object_get(p, "job"));
	json_int_t att = json_integer_value(json_object_get(p, "attempt"));
	json_int_t rank = json_integer_value(json_object_get(p, "rank"));
	json_int_t code = json_integer_value(json_object_get(p, "exit_code"));
	json_int_t sig = json_integer_value(json_object_get(p, "signal"));
	const char *error = json_string_value(json_object_get(p, "error"));
	if (att < 0 || att > INT_MAX || rank < 0 || rank > INT_MAX || code < INT_MIN || code > INT_MAX ||
	    sig < 0 || sig > INT_MAX) {
		send_error(f, a->ident, strlen(a->ident), 400, "RANK_EXITED: attempt, rank, exit_code or signal out of range");
		return;
	}
	attempt_t *at = smap_get(&f->attempts, job);
	if (tx(f))
		wrote(f, store_rank_set_state(f->st, job, (int)att, (int)rank, "exited", true, (int)code, (int)sig,
		                              clock_wall_us()),
		      "rank exited");
	if (!at || at->attempt != att || rank >= at->world_size) {
		log_debug("agent %s: rank %lld of job %.40s attempt %lld exited (not live)", a->node,
		          (long long)rank, job, (long long)att);
		return;
	}
	rank_rt_t *rr = &at->ranks[rank];
	if (rr->agent != a) {
		log_warn("agent %s reports rank %lld of job %s, placed on %s: ignored", a->node, (long long)rank,
		         at->job_id, rr->agent ? rr->agent->node : "?");
		return;
	}
	rr->exited = true;
	if (at->failed) {
		check_drained(f, at, clock_mono_us()); /* one of a failed attempt's ranks is gone */
		return;
	}
	if (rr->done)
		return; /* its work was reported complete */
	/* the agent's clock at waitpid: how long the news took to get here */
	json_t *exited_at = json_object_get(p, "exited_at_us");
	int64_t detection_us = json_is_integer(exited_at) ? clock_wall_us() - (int64_t)json_integer_value(exited_at) : 0;
	char cause[REASON_BYTES];
	if (rr->failed_reason) {
		/* the rank said why in its FAILED; its exit status says whether to retry */
		snprintf(cause, sizeof cause, "rank %lld failed: %s", (long long)rank, rr->failed_reason);
		attempt_failed(f, at, cause, not_retryable(payload_failure(p, (int)code, (int)sig)), detection_us);
		return;
	}
	if (code == 0 && sig == 0) {
		rr->clean_exit_deadline_us = clock_mono_us() + CLEAN_EXIT_GRACE_US;
		return;
	}
	describe_exit(cause, sizeof cause, (int)rank, (int)code, (int)sig, error);
	attempt_failed(f, at, cause, not_retryable(payload_failure(p, (int)code, (int)sig)), detection_us);
}

static void on_agent(fabric_t *f, const char *ident, const char *node, wire_type_t type, json_t *p)
{
	if (type == WIRE_REGISTER) {
		on_register(f, ident, node, p);
		return;
	}
	if (type != WIRE_HEARTBEAT && type != WIRE_RANK_EXITED) {
		char detail[200];
		snprintf(detail, sizeof detail, "an agent sends REGISTER, HEARTBEAT or RANK_EXITED, not %s",
		         wire_type_name(type));
		send_error(f, ident, strlen(ident), 400, detail);
		return;
	}
	agent_t *a = smap_get(&f->agents, node);
	if (!a || !a->alive) {
		char detail[400];
		snprintf(detail, sizeof detail, "agent %.200s is %s: send REGISTER", node,
		         a ? "declared dead" : "not registered");
		send_error(f, ident, strlen(ident), 404, detail);
		return;
	}
	touch_agent(a);
	if (type == WIRE_RANK_EXITED)
		on_rank_exited(f, a, p);
}

/* ---- ranks ---- */

/* "rank/<job>/<attempt>/<rank>" -> its parts. */
static bool parse_rank_ident(const char *ident, char job[STORE_ID_BYTES], int *ret_attempt, int *ret_rank)
{
	const char *p = ident + 5;
	const char *slash = strchr(p, '/');
	if (!slash || slash == p || (size_t)(slash - p) >= STORE_ID_BYTES)
		return false;
	memcpy(job, p, (size_t)(slash - p));
	job[slash - p] = '\0';
	const char *q = slash + 1;
	char *end;
	if (*q < '0' || *q > '9')
		return false;
	errno = 0;
	long att = strtol(q, &end, 10);
	if (errno || *end != '/' || att < 0 || att > INT_MAX)
		return false;
	q = end + 1;
	if (*q < '0' || *q > '9')
		return false;
	long rank = strtol(q, &end, 10);
	if (errno || *end || rank < 0 || rank > INT_MAX)
		return false;
	*ret_attempt = (int)att;
	*ret_rank = (int)rank;
	return true;
}

static void kv_answer(fabric_t *f, attempt_t *at, int rank, const char *key, const char *value)
{
	char ident[WIRE_MAX_IDENTITY_BYTES + 1];
	rank_ident(ident, at->job_id, at->attempt, rank);
	send_to(f, ident, WIRE_KV_VALUE,
	        json_pack("{s:s, s:b, s:s}", "key", key, "found", value != NULL, "value", value ? value : ""));
}

static void on_kv_set(fabric_t *f, attempt_t *at, int rank, const char *ident, json_t *p)
{
	const char *key = json_string_value(json_object_get(p, "key"));
	const char *value = json_string_value(json_object_get(p, "value"));
	size_t klen = strlen(key), vlen = strlen(value);
	if (klen == 0 || klen > KV_MAX_KEY_BYTES) {
		send_error(f, ident, strlen(ident), 400, "KV_SET: key must be 1 to 4096 bytes");
		return;
	}
	char *old = smap_get(&at->kv, key);
	size_t old_bytes = old ? klen + strlen(old) : 0;
	if ((!old && at->kv.n >= KV_MAX_KEYS) || at->kv_bytes - old_bytes + klen + vlen > KV_MAX_BYTES) {
		send_error(f, ident, strlen(ident), 413,
		           "KV_SET: the attempt's key-value store is full (65536 keys, 64 MiB)");
		return;
	}
	char *copy = strdup(value);
	void *prev = NULL;
	if (!copy || smap_put(&at->kv, key, copy, &prev) < 0) {
		free(copy);
		send_error(f, ident, strlen(ident), 503, "KV_SET: the coordinator is out of memory");
		return;
	}
	free(prev);
	at->kv_bytes = at->kv_bytes - old_bytes + klen + vlen;
	send_to(f, ident, WIRE_KV_OK, json_pack("{s:s}", "key", key));
	/* wake the parked KV_GETs of this key */
	parked_t **pp = &at->parked;
	while (*pp) {
		parked_t *w = *pp;
		if (strcmp(w->key, key) == 0) {
			kv_answer(f, at, w->rank, key, copy);
			*pp = w->next;
			free(w->key);
			free(w);
			at->n_parked--;
		} else {
			pp = &w->next;
		}
	}
}

static void on_kv_get(fabric_t *f, attempt_t *at, int rank, const char *ident, json_t *p)
{
	const char *key = json_string_value(json_object_get(p, "key"));
	json_int_t timeout_ms = json_integer_value(json_object_get(p, "timeout_ms"));
	if (timeout_ms < 0 || timeout_ms > KV_MAX_TIMEOUT_MS) {
		send_error(f, ident, strlen(ident), 400, "KV_GET: timeout_ms must be from 0 to 86400000");
		return;
	}
	const char *value = smap_get(&at->kv, key);
	if (value || timeout_ms == 0) {
		kv_answer(f, at, rank, key, value);
		return;
	}
	if (at->n_parked >= KV_MAX_PARKED) {
		send_error(f, ident, strlen(ident), 413, "KV_GET: too many waiting KV_GETs in this attempt");
		return;
	}
	parked_t *w = calloc(1, sizeof *w);
	char *kcopy = strdup(key);
	if (!w || !kcopy) {
		free(w);
		free(kcopy);
		send_error(f, ident, strlen(ident), 503, "KV_GET: the coordinator is out of memory");
		return;
	}
	w->rank = rank;
	w->key = kcopy;
	w->deadline_mono_us = clock_mono_us() + (int64_t)timeout_ms * 1000;
	w->next = at->parked;
	at->parked = w;
	at->n_parked++;
}

/* METRICS' memory figures (all four present: wire_decode checked the set)
 * into *ret; false when the message has none. */
static bool metrics_memory(const json_t *p, store_rank_memory_t *ret)
{
	json_t *pb = json_object_get(p, "params_bytes");
	if (!pb)
		return false;
	ret->params_bytes = (int64_t)json_integer_value(pb);
	ret->grads_bytes = (int64_t)json_integer_value(json_object_get(p, "grads_bytes"));
	ret->optim_bytes = (int64_t)json_integer_value(json_object_get(p, "optim_bytes"));
	ret->activations_bytes = (int64_t)json_integer_value(json_object_get(p, "activations_bytes"));
	return true;
}

/* A number field of METRICS, in ms (0 when absent). */
static double ms_field(const json_t *p, const char *name)
{
	json_t *v = json_object_get(p, name);
	return json_is_number(v) ? json_number_value(v) : 0.0;
}

/*
 * Rank 0 of an attempt placed by a restart sent its first METRICS: the job
 * has recovered. The `recovered` event (and the log line) give the cause,
 * the attempt, the snapshot step and where the time went, in ms:
 * detection (the failure -> the coordinator heard of it), respawn (-> the
 * new attempt's SPAWNs sent: the old ranks stopping and the backoff), start
 * (-> its rank 0 joined), rendezvous and snapshot load (as rank 0 measured
 * them), first step (the rest, up to this METRICS); total is their sum.
 */
static void report_recovered(fabric_t *f, attempt_t *at, const json_t *p)
{
	recovery_t *rec = at->rec;
	at->rec = NULL;
	int64_t now = clock_mono_us();
	json_t *rs = json_object_get(p, "resumed_from_step");
	int64_t step = json_is_integer(rs) ? (int64_t)json_integer_value(rs) : rec->resume_step;
	double detection = (double)rec->detection_us / 1e3;
	double total = detection + (double)(now - rec->failed_mono_us) / 1e3;
	double respawn = (double)(rec->spawned_mono_us - rec->failed_mono_us) / 1e3;
	double start = rec->joined0_mono_us ? (double)(rec->joined0_mono_us - rec->spawned_mono_us) / 1e3 : 0.0;
	double rendezvous = ms_field(p, "rendezvous_ms"), load = ms_field(p, "load_ms");
	double first = total - detection - respawn - start - rendezvous - load;
	if (first < 0)
		first = 0;
	char how[64];
	if (step > 0)
		snprintf(how, sizeof how, "resumed from snapshot step %lld", (long long)step);
	else
		snprintf(how, sizeof how, "started from step 0 (no snapshot)");
	char reason[REASON_BYTES + 512];
	snprintf(reason, sizeof reason,
	         "recovered from %s: attempt %d %s in %.0f ms (detection %.0f ms, respawn %.0f ms, start %.0f ms, "
	         "rendezvous %.0f ms, snapshot load %.0f ms, first step %.0f ms)",
	         rec->cause, at->attempt, how, total, detection, respawn, start, rendezvous, load, first);
	if (tx(f))
		wrote(f, store_event_insert(f->st, at->job_id, "recovered", NULL, NULL, reason, at->attempt, clock_wall_us()),
		      "recovered event");
	log_info("job %s: %s", at->job_id, reason);
	free(rec);
}

static void on_metrics(fabric_t *f, attempt_t *at, int rank, json_t *p)
{
	const char *skipped = json_string_value(json_object_get(p, "snapshot_skipped"));
	if (rank == 0 && skipped && skipped[0] && tx(f)) {
		/* rank 0's first METRICS: it passed over newer snapshots on load */
		char reason[REASON_BYTES];
		snprintf(reason, sizeof reason, "attempt %d passed over corrupt or unreadable snapshot(s): %.700s",
		         at->attempt, skipped);
		log_warn("job %s: %s", at->job_id, reason);
		wrote(f, store_event_insert(f->st, at->job_id, "snapshot_skipped", NULL, NULL, reason, at->attempt,
		                            clock_wall_us()),
		      "snapshot_skipped event");
	}
	if (rank == 0 && at->rec)
		report_recovered(f, at, p);
	store_rank_memory_t mem;
	rank_rt_t *rr = &at->ranks[rank];
	if (metrics_memory(p, &mem) &&
	    (!rr->has_memory || memcmp(&mem, &rr->memory, sizeof mem) != 0) && tx(f)) {
		rr->has_memory = true;
		rr->memory = mem;
		wrote(f, store_rank_set_memory(f->st, at->job_id, at->attempt, rank, &mem), "rank memory");
	}
	/* Rank 0's loss is the global mean: its rows are the job's. Other ranks'
	 * rows (and memory-only messages) store no metrics row. */
	if (rank != 0 || !json_object_get(p, "loss"))
		return;
	store_metric_t m;
	memset(&m, 0, sizeof m);
	snprintf(m.job_id, sizeof m.job_id, "%s", at->job_id);
	m.attempt = at->attempt;
	m.rank = rank;
	m.step = (int64_t)json_integer_value(json_object_get(p, "step"));
	m.loss = json_number_value(json_object_get(p, "loss"));
	m.lr = json_number_value(json_object_get(p, "lr"));
	m.grad_norm = json_number_value(json_object_get(p, "grad_norm"));
	m.tokens_per_s = json_number_value(json_object_get(p, "tokens_per_s"));
	m.ms = json_number_value(json_object_get(p, "ms"));
	json_t *vl = json_object_get(p, "val_loss");
	m.has_val_loss = json_is_number(vl);
	m.val_loss = m.has_val_loss ? json_number_value(vl) : NAN;
	m.at_us = clock_wall_us();
	/* Rows lost while the coordinator was down (or in its buffers when it
	 * died) show as a prev_step past the last stored row: ask rank 0 for
	 * them again (wire.h, METRICS_RESEND), once per gap. */
	if (at->last_metric_step < 0 &&
	    store_metric_last_step(f->st, at->job_id, at->attempt, &at->last_metric_step) < 0)
		at->last_metric_step = 0;
	json_t *prev = json_object_get(p, "prev_step");
	int64_t from = at->last_metric_step + 1;
	if (json_is_integer(prev) && json_integer_value(prev) >= from && at->resend_from != from) {
		char ident[WIRE_MAX_IDENTITY_BYTES + 1];
		rank_ident(ident, at->job_id, at->attempt, 0);
		send_to(f, ident, WIRE_METRICS_RESEND,
		        json_pack("{s:I, s:I}", "from_step", (json_int_t)from, "to_step",
		                  (json_int_t)json_integer_value(prev)));
		at->resend_from = from;
		log_info("job %s attempt %d: metrics rows from step %lld to %lld missing; asked rank 0 to "
		         "send them again", at->job_id, at->attempt, (long long)from,
		         (long long)json_integer_value(prev));
	}
	if (m.step > at->last_metric_step)
		at->last_metric_step = m.step;
	if (tx(f))
		wrote(f, store_metric_insert(f->st, &m), "metrics row");
}

/* ---- snapshot commits (the protocol is in wire.h) ---- */

/* Append to a bounded reason string. */
static void reason_add(char *buf, size_t *len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void reason_add(char *buf, size_t *len, const char *fmt, ...)
{
	if (*len >= REASON_BYTES - 1)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf + *len, REASON_BYTES - *len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	*len += (size_t)n;
	if (*len >= REASON_BYTES - 1) {
		*len = REASON_BYTES - 1;
		memcpy(buf + REASON_BYTES - 4, "...", 4);
	}
}

/* A shard's file name: 1 to SNAP_MAX_FILE_BYTES bytes, no '/', no NUL, not
 * "." or "..": it names a file inside the step's folder, nothing else. */
static bool snap_file_ok(const json_t *v)
{
	size_t n = json_string_length(v);
	const char *s = json_string_value(v);
	return n > 0 && n <= SNAP_MAX_FILE_BYTES && strlen(s) == n && !strchr(s, '/') && strcmp(s, ".") != 0 &&
	       strcmp(s, "..") != 0;
}

/* SNAPSHOT_COMMIT of the last complete set (sent_shards) to rank 0. */
static void snap_send_commit(fabric_t *f, attempt_t *at)
{
	json_t *files = json_array();
	for (int r = 0; files && r < at->world_size; r++) {
		const shard_t *sh = &at->sent_shards[r];
		if (json_array_append_new(files, json_pack("{s:i, s:s, s:I, s:s}", "rank", r, "file", sh->file,
		                                           "bytes", (json_int_t)sh->bytes, "xxh3", sh->xxh3)) < 0) {
			json_decref(files);
			files = NULL;
		}
	}
	char ident[WIRE_MAX_IDENTITY_BYTES + 1];
	rank_ident(ident, at->job_id, at->attempt, 0);
	send_to(f, ident, WIRE_SNAPSHOT_COMMIT,
	        files ? json_pack("{s:s, s:i, s:I, s:o}", "job", at->job_id, "attempt", at->attempt, "step",
	                          (json_int_t)at->sent_step, "files", files)
	              : NULL);
}

static int snap_unconfirmed_index(const attempt_t *at, int64_t step)
{
	for (int i = 0; i < at->n_unconfirmed; i++)
		if (at->unconfirmed[i] == step)
			return i;
	return -1;
}

/* The gathered set is complete: it becomes the sent set, its step awaits
 * rank 0's SNAPSHOT_COMMITTED, and rank 0 gets SNAPSHOT_COMMIT. */
static void snap_complete(fabric_t *f, attempt_t *at)
{
	shard_t *t = at->sent_shards;
	at->sent_shards = at->shards;
	at->shards = t;
	at->has_sent = true;
	at->sent_step = at->gather_step;
	at->gathering = false;
	at->n_gathered = 0;
	if (at->n_unconfirmed == SNAP_MAX_UNCONFIRMED) {
		log_warn("job %s attempt %d: rank 0 never confirmed snapshot step %lld: no longer awaited",
		         at->job_id, at->attempt, (long long)at->unconfirmed[0]);
		memmove(at->unconfirmed, at->unconfirmed + 1, (SNAP_MAX_UNCONFIRMED - 1) * sizeof at->unconfirmed[0]);
		at->n_unconfirmed--;
	}
	at->unconfirmed[at->n_unconfirmed++] = at->sent_step;
	log_info("job %s attempt %d: all %d rank(s) wrote snapshot step %lld: SNAPSHOT_COMMIT to rank 0",
	         at->job_id, at->attempt, at->world_size, (long long)at->sent_step);
	snap_send_commit(f, at);
}

/* 409 when `sh` (already reported by `rank` for `step`) differs from this report. */
static bool snap_same_report(fabric_t *f, const char *ident, int rank, int64_t step, const shard_t *sh,
                             const char *file, int64_t bytes, const char *xxh3)
{
	if (strcmp(sh->file, file) == 0 && sh->bytes == bytes && strcmp(sh->xxh3, xxh3) == 0)
		return true;
	char detail[600];
	snprintf(detail, sizeof detail, "SNAPSHOT_WRITTEN: rank %d already reported step %lld as %s (%lld bytes, xxh3 %s)",
	         rank, (long long)step, sh->file, (long long)sh->bytes, sh->xxh3);
	send_error(f, ident, strlen(ident), 409, detail);
	return false;
}

/*
 * SNAPSHOT_FAILED: a rank could not write its shard of `step` (a full or
 * failing disk). The reports gathered for that step are dropped (it never
 * commits; the previous snapshot stays the latest) and the job gets one
 * `snapshot_failed` event per step.
 */
static void on_snapshot_failed(fabric_t *f, attempt_t *at, int rank, json_t *p)
{
	int64_t step = (int64_t)json_integer_value(json_object_get(p, "step"));
	const char *error = json_string_value(json_object_get(p, "error"));
	if (at->gathering && at->gather_step == step) {
		at->gathering = false;
		at->n_gathered = 0;
	}
	if (at->has_failed_snap && step <= at->failed_snap_step)
		return; /* this step's event is written (another rank's report) */
	at->has_failed_snap = true;
	at->failed_snap_step = step;
	char reason[REASON_BYTES];
	if (at->has_committed)
		snprintf(reason, sizeof reason, "snapshot of step %lld failed on rank %d: %.300s; the latest "
		         "committed snapshot stays step %lld", (long long)step, rank, error,
		         (long long)at->committed_step);
	else
		snprintf(reason, sizeof reason, "snapshot of step %lld failed on rank %d: %.300s; no snapshot of "
		         "this attempt is committed", (long long)step, rank, error);
	json_t *kind = json_object_get(p, "failure");
	log_warn("job %s attempt %d: %s (failure: %s)", at->job_id, at->attempt, reason,
	         json_is_integer(kind) ? rm_failure_name((rm_failure_t)json_integer_value(kind)) : "not given");
	if (tx(f))
		wrote(f, store_event_insert(f->st, at->job_id, "snapshot_failed", NULL, NULL, reason, at->attempt,
		                            clock_wall_us()),
		      "snapshot_failed event");
}

static void on_snapshot_written(fabric_t *f, attempt_t *at, int rank, const char *ident, json_t *p)
{
	int64_t step = (int64_t)json_integer_value(json_object_get(p, "step"));
	json_t *file = json_object_get(p, "file");
	int64_t bytes = (int64_t)json_integer_value(json_object_get(p, "bytes"));
	const char *xxh3 = json_string_value(json_object_get(p, "xxh3"));
	if (!snap_file_ok(file)) {
		send_error(f, ident, strlen(ident), 400,
		           "SNAPSHOT_WRITTEN: file must be a plain file name of 1 to 255 bytes (no '/', not . or ..)");
		return;
	}
	const char *name = json_string_value(file);
	if (at->has_sent && step == at->sent_step) {
		/* a repeat of a complete set: rank 0 may have lost its commit */
		if (snap_same_report(f, ident, rank, step, &at->sent_shards[rank], name, bytes, xxh3) &&
		    snap_unconfirmed_index(at, step) >= 0)
			snap_send_commit(f, at);
		return;
	}
	if ((at->has_committed && step <= at->committed_step) || (at->has_sent && step < at->sent_step) ||
	    (at->gathering && step < at->gather_step) || (at->has_failed_snap && step <= at->failed_snap_step)) {
		log_debug("job %s attempt %d: rank %d reports snapshot step %lld, older than the one in flight or "
		          "committed: ignored", at->job_id, at->attempt, rank, (long long)step);
		return;
	}
	if (!at->shards) {
		at->shards = calloc((size_t)at->world_size, sizeof *at->shards);
		at->sent_shards = calloc((size_t)at->world_size, sizeof *at->sent_shards);
		if (!at->shards || !at->sent_shards) {
			free(at->shards);
			free(at->sent_shards);
			at->shards = at->sent_shards = NULL;
			send_error(f, ident, strlen(ident), 503, "SNAPSHOT_WRITTEN: the coordinator is out of memory");
			return;
		}
	}
	if (!at->gathering || step > at->gather_step) {
		if (at->gathering)
			log_warn("job %s attempt %d: snapshot step %lld never completed (%d of %d rank(s) reported): "
			         "dropped for step %lld", at->job_id, at->attempt, (long long)at->gather_step,
			         at->n_gathered, at->world_size, (long long)step);
		memset(at->shards, 0, (size_t)at->world_size * sizeof *at->shards);
		at->gathering = true;
		at->gather_step = step;
		at->n_gathered = 0;
	}
	shard_t *sh = &at->shards[rank];
	if (sh->reported) {
		snap_same_report(f, ident, rank, step, sh, name, bytes, xxh3); /* a repeat: idempotent */
		return;
	}
	sh->reported = true;
	sh->bytes = bytes;
	snprintf(sh->xxh3, sizeof sh->xxh3, "%s", xxh3);
	snprintf(sh->file, sizeof sh->file, "%s", name);
	if (++at->n_gathered == at->world_size)
		snap_complete(f, at);
}

/* The live checkpoint steps of a job, gathered by store_checkpoint_list. */
typedef struct {
	int64_t *steps;
	size_t n, cap;
} step_list_t;

static int collect_step(const store_checkpoint_t *c, void *userdata)
{
	step_list_t *l = userdata;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		int64_t *grown = realloc(l->steps, cap * sizeof *grown);
		if (!grown)
			return -ENOMEM;
		l->steps = grown;
		l->cap = cap;
	}
	l->steps[l->n++] = c->step;
	return 0;
}

/* An integer of the spec's checkpoint section, or its default. */
static int64_t spec_checkpoint_int(const json_t *spec, const char *key, int64_t dflt)
{
	json_t *v = json_object_get(json_object_get(spec, "checkpoint"), key);
	return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

/*
 * Retention over the job's recorded checkpoints, by the rule rank 0 applies
 * to the folders (snap_retention: checkpoint.keep_last newest plus every
 * keep_every-th): rows rank 0's report did not name are marked deleted too,
 * so that a report lost with a dying rank 0 cannot leave a deleted
 * snapshot listed for ever. Inside the caller's transaction.
 */
static void retain_checkpoints(fabric_t *f, attempt_t *at, int64_t now, char *reason, size_t *rlen,
                               int *n_gone)
{
	step_list_t l = {0};
	if (store_checkpoint_list(f->st, at->job_id, collect_step, &l) < 0 || l.n == 0) {
		free(l.steps);
		return;
	}
	bool *keep = calloc(l.n, sizeof *keep);
	if (keep) {
		snap_retention(l.steps, l.n, (int)spec_checkpoint_int(at->spec, "keep_last", 3),
		               spec_checkpoint_int(at->spec, "keep_every", 0), keep);
		for (size_t i = 0; i < l.n; i++) {
			if (keep[i])
				continue;
			int r = store_checkpoint_delete(f->st, at->job_id, l.steps[i], now);
			wrote(f, r, "checkpoint deleted");
			if (r == 0)
				reason_add(reason, rlen, "%s%lld", (*n_gone)++ ? ", " : "; retention deleted step(s) ",
				           (long long)l.steps[i]);
		}
	}
	free(keep);
	free(l.steps);
}

static void on_snapshot_committed(fabric_t *f, attempt_t *at, int rank, const char *ident, json_t *p)
{
	char detail[512];
	int64_t step = (int64_t)json_integer_value(json_object_get(p, "step"));
	int64_t bytes = (int64_t)json_integer_value(json_object_get(p, "bytes"));
	json_t *path = json_object_get(p, "path");
	json_t *deleted = json_object_get(p, "deleted");
	if (rank != 0) {
		send_error(f, ident, strlen(ident), 400, "SNAPSHOT_COMMITTED: only rank 0 commits snapshots");
		return;
	}
	size_t plen = json_string_length(path);
	if (plen == 0 || plen > SNAP_MAX_PATH_BYTES || strlen(json_string_value(path)) != plen) {
		send_error(f, ident, strlen(ident), 400, "SNAPSHOT_COMMITTED: path must be 1 to 4096 bytes, without NUL");
		return;
	}
	size_t n_deleted = json_array_size(deleted), i;
	json_t *e;
	if (n_deleted > SNAP_MAX_DELETED) {
		send_error(f, ident, strlen(ident), 413, "SNAPSHOT_COMMITTED: deleted lists more than 65536 steps");
		return;
	}
	json_array_foreach(deleted, i, e)
	{
		if (!json_is_integer(e) || json_integer_value(e) < 0) {
			snprintf(detail, sizeof detail, "SNAPSHOT_COMMITTED: deleted[%zu] must be an integer >= 0", i);
			send_error(f, ident, strlen(ident), 400, detail);
			return;
		}
	}
	int pending = snap_unconfirmed_index(at, step);
	if (pending < 0 && at->has_committed && step == at->committed_step)
		return; /* a repeat: recorded already */
	if (pending < 0) {
		snprintf(detail, sizeof detail,
		         "SNAPSHOT_COMMITTED: step %lld of attempt %d was not sent in a SNAPSHOT_COMMIT (not every rank "
		         "reported it written)",
		         (long long)step, at->attempt);
		send_error(f, ident, strlen(ident), 409, detail);
		return;
	}
	int64_t now = clock_wall_us();
	char reason[REASON_BYTES];
	size_t rlen = 0;
	reason_add(reason, &rlen, "snapshot step %lld committed: %d file(s), %lld bytes", (long long)step,
	           at->world_size, (long long)bytes);
	if (tx(f)) {
		store_checkpoint_t c = {
			.step = step,
			.attempt = at->attempt,
			.world_size = at->world_size,
			.bytes = bytes,
			.path = json_string_value(path),
			.committed_at_us = now,
		};
		snprintf(c.job_id, sizeof c.job_id, "%s", at->job_id);
		wrote(f, store_checkpoint_commit(f->st, &c), "checkpoint commit");
		int n_gone = 0;
		json_array_foreach(deleted, i, e)
		{
			int64_t old = (int64_t)json_integer_value(e);
			if (old == step)
				continue; /* never the one just committed */
			int r = store_checkpoint_delete(f->st, at->job_id, old, now);
			wrote(f, r, "checkpoint deleted");
			if (r == 0)
				reason_add(reason, &rlen, "%s%lld", n_gone++ ? ", " : "; retention deleted step(s) ",
				           (long long)old);
		}
		retain_checkpoints(f, at, now, reason, &rlen, &n_gone);
		wrote(f, store_event_insert(f->st, at->job_id, "checkpoint", NULL, NULL, reason, at->attempt, now),
		      "checkpoint event");
	}
	log_info("job %s attempt %d: %s", at->job_id, at->attempt, reason);
	memmove(at->unconfirmed + pending, at->unconfirmed + pending + 1,
	        (size_t)(at->n_unconfirmed - pending - 1) * sizeof at->unconfirmed[0]);
	at->n_unconfirmed--;
	if (!at->has_committed || step > at->committed_step)
		at->committed_step = step;
	at->has_committed = true;
}

static void on_join(fabric_t *f, attempt_t *at, int rank, const char *ident, json_t *p)
{
	const char *job = json_string_value(json_object_get(p, "job"));
	json_int_t att = json_integer_value(json_object_get(p, "attempt"));
	json_int_t rk = json_integer_value(json_object_get(p, "rank"));
	if (strcmp(job, at->job_id) != 0 || att != at->attempt || rk != rank) {
		send_error(f, ident, strlen(ident), 400, "JOIN: job, attempt and rank must match the identity");
		return;
	}
	rank_rt_t *rr = &at->ranks[rank];
	if (!rr->joined) {
		rr->joined = true;
		at->n_joined++;
		if (tx(f))
			wrote(f, store_rank_set_state(f->st, at->job_id, at->attempt, rank, "joined", false, 0, 0,
			                              clock_wall_us()),
			      "rank joined");
	}
	/* the snapshot to resume from: the job's latest committed one, for every
	 * attempt; without one, the spec's resume_from (another job's) */
	int64_t step = 0;
	char *path = NULL;
	int r = store_checkpoint_latest(f->st, at->job_id, &step, &path);
	if (r < 0 && r != -ENOENT)
		log_error("store: cannot read the latest checkpoint of job %s: %s", at->job_id, strerror(-r));
	const json_t *from = json_object_get(at->spec, "resume_from");
	if (r == -ENOENT && from) {
		const char *src = json_string_value(json_object_get(from, "job"));
		step = (int64_t)json_integer_value(json_object_get(from, "step"));
		r = src ? store_checkpoint_get(f->st, src, step, &path) : -EINVAL;
		if (r < 0) {
			/* checked at submission, removed since (the other job's
			 * retention): starting fresh would not be what was asked */
			char reason[REASON_BYTES];
			snprintf(reason, sizeof reason,
			         "resume_from: job %.40s has no committed checkpoint at step %lld any more (%s); "
			         "submit again naming one of its checkpoints",
			         src ? src : "?", (long long)step, r == -ENOENT ? "removed since the job was submitted"
			                                                       : strerror(-r));
			fail_attempt(f, at, reason);
			return;
		}
	}
	json_t *resume = r == 0 ? json_pack("{s:I, s:s}", "step", (json_int_t)step, "path", path) : json_null();
	free(path);
	if (rank == 0 && at->rec && !at->rec->joined0_mono_us) {
		at->rec->joined0_mono_us = clock_mono_us();
		at->rec->has_resume = r == 0;
		at->rec->resume_step = r == 0 ? step : 0;
	}
	send_to(f, ident, WIRE_JOINED,
	        resume ? json_pack("{s:s, s:i, s:i, s:i, s:O, s:i, s:o}", "job", at->job_id, "attempt", at->attempt,
	                           "rank", rank, "world_size", at->world_size, "spec", at->spec, "metrics_every",
	                           f->opt.metrics_every, "resume", resume)
	               : NULL);
	if (at->n_joined == at->world_size && at->state == STORE_JOB_SCHEDULED) {
		char reason[200];
		snprintf(reason, sizeof reason, "all %d rank(s) joined", at->world_size);
		at->state = STORE_JOB_RUNNING;
		if (tx(f))
			wrote(f, store_job_set_state(f->st, at->job_id, STORE_JOB_RUNNING, reason, clock_wall_us()), "job running");
		log_info("job %s attempt %d running: %s", at->job_id, at->attempt, reason);
	}
}

static void on_done(fabric_t *f, attempt_t *at, int rank, json_t *p)
{
	rank_rt_t *rr = &at->ranks[rank];
	if (rr->done)
		return;
	rr->done = true;
	at->n_done++;
	if (tx(f))
		wrote(f, store_rank_set_state(f->st, at->job_id, at->attempt, rank, "done", false, 0, 0, clock_wall_us()),
		      "rank done");
	if (at->n_done < at->world_size)
		return;
	char reason[256];
	snprintf(reason, sizeof reason, "all %d rank(s) done at step %lld (loss %.6g)", at->world_size,
	         (long long)json_integer_value(json_object_get(p, "step")),
	         json_number_value(json_object_get(p, "loss")));
	end_attempt(f, at, STORE_JOB_SUCCEEDED, reason, false, false);
}

/*
 * FAILED {reason, exit_code?}: whether a restart can help depends on the exit
 * status. With exit_code, or with no restart left, decide now; otherwise wait
 * (FAILED_EXIT_GRACE_US) for the agent's RANK_EXITED, which carries it.
 */
static void on_failed(fabric_t *f, attempt_t *at, int rank, json_t *p)
{
	rank_rt_t *rr = &at->ranks[rank];
	const char *reason = json_string_value(json_object_get(p, "reason"));
	json_t *code = json_object_get(p, "exit_code");
	char cause[REASON_BYTES];
	snprintf(cause, sizeof cause, "rank %d failed: %s", rank, reason);
	if (json_is_integer(code) || json_object_get(p, "failure") || at->restarts >= at->max_restarts) {
		int c = json_is_integer(code) ? (int)json_integer_value(code) : RM_EXIT_USAGE;
		attempt_failed(f, at, cause, not_retryable(payload_failure(p, c, 0)), 0);
		return;
	}
	if (rr->failed_reason)
		return; /* a repeat */
	rr->failed_reason = strdup(reason);
	if (!rr->failed_reason) {
		attempt_failed(f, at, cause, NULL, 0);
		return;
	}
	rr->failed_deadline_us = clock_mono_us() + FAILED_EXIT_GRACE_US;
}

/* PARKED from a survivor of a failed attempt: it waits for the next one. */
static void on_parked(fabric_t *f, attempt_t *at, int rank, json_t *p)
{
	rank_rt_t *rr = &at->ranks[rank];
	if (rr->parked)
		return;
	rr->parked = true;
	log_info("job %s attempt %d: rank %d parked after step %lld, kept for the next attempt", at->job_id,
	         at->attempt, rank, (long long)json_integer_value(json_object_get(p, "step")));
	check_drained(f, at, clock_mono_us());
}

static void on_rank(fabric_t *f, const char *ident, wire_type_t type, json_t *p)
{
	char job[STORE_ID_BYTES], detail[512];
	int att, rank;
	if (!parse_rank_ident(ident, job, &att, &rank)) {
		send_error(f, ident, strlen(ident), 400, "a rank's identity must be rank/<job>/<attempt>/<rank>");
		return;
	}
	if (type != WIRE_JOIN && type != WIRE_KV_SET && type != WIRE_KV_GET && type != WIRE_METRICS &&
	    type != WIRE_DONE && type != WIRE_FAILED && type != WIRE_SNAPSHOT_WRITTEN &&
	    type != WIRE_SNAPSHOT_COMMITTED && type != WIRE_SNAPSHOT_FAILED && type != WIRE_PARKED && type != WIRE_TRACE) {
		snprintf(detail, sizeof detail,
		         "a rank sends JOIN, KV_SET, KV_GET, METRICS, TRACE, SNAPSHOT_WRITTEN, SNAPSHOT_COMMITTED, "
		         "SNAPSHOT_FAILED, PARKED, DONE or FAILED, not %s",
		         wire_type_name(type));
		send_error(f, ident, strlen(ident), 400, detail);
		return;
	}
	bool snapshot = type == WIRE_SNAPSHOT_WRITTEN || type == WIRE_SNAPSHOT_COMMITTED ||
	                type == WIRE_SNAPSHOT_FAILED;
	attempt_t *at = smap_get(&f->attempts, job);
	if (snapshot && (!at || att != at->attempt || at->failed)) {
		/* never recorded: only the live attempt's snapshots can commit */
		if (at && att == at->attempt)
			snprintf(detail, sizeof detail, "%s: attempt %d of job %s failed (%s): the job is recovering",
			         wire_type_name(type), att, job, at->cause ? at->cause : "?");
		else if (at)
			snprintf(detail, sizeof detail, "%s: attempt %d of job %s is stale: the live attempt is %d",
			         wire_type_name(type), att, job, at->attempt);
		else
			snprintf(detail, sizeof detail, "%s: job %s has no live attempt (attempt %d is over)",
			         wire_type_name(type), job, att);
		send_error(f, ident, strlen(ident), 409, detail);
		return;
	}
	if (!at) {
		store_job_t sj;
		memset(&sj, 0, sizeof sj);
		int r = store_job_get(f->st, job, &sj);
		if (r == -ENOENT) {
			snprintf(detail, sizeof detail, "no job %s", job);
			send_error(f, ident, strlen(ident), 404, detail);
			return;
		}
		if (r < 0) {
			send_error(f, ident, strlen(ident), 503, "the coordinator cannot read its database");
			return;
		}
		snprintf(detail, sizeof detail, "job %s is %s (attempt %d); attempt %d has no live ranks", job,
		         store_job_state_name(sj.state), sj.attempt, att);
		store_job_clear(&sj);
		send_to(f, ident, WIRE_ABORT, json_pack("{s:s, s:i, s:s}", "job", job, "attempt", att, "reason", detail));
		return;
	}
	if (att != at->attempt) {
		if (att > 0 && att < at->attempt && rank < at->world_size && at->ranks[rank].adopted_from == att) {
			/* a kept survivor still finishing its step in the attempt it
			 * leaves: dropped (an ABORT would end the process kept) */
			log_debug("job %s: rank %d's %s of attempt %d, which it is leaving: dropped", job, rank,
			          wire_type_name(type), att);
			return;
		}
		snprintf(detail, sizeof detail, "attempt %d of job %s is stale: the live attempt is %d", att, job,
		         at->attempt);
		send_to(f, ident, WIRE_ABORT, json_pack("{s:s, s:i, s:s}", "job", job, "attempt", att, "reason", detail));
		return;
	}
	if (at->failed) {
		rank_rt_t *rr = rank < at->world_size ? &at->ranks[rank] : NULL;
		if (rr && rr->rejoin) {
			if (type == WIRE_PARKED)
				on_parked(f, at, rank, p);
			else if (!rr->parked)
				send_to(f, ident, WIRE_ABORT, rejoin_abort(at)); /* the ask, again */
			return; /* a parked rank's late messages: nothing to say */
		}
		snprintf(detail, sizeof detail, "recovering: %s", at->cause ? at->cause : "attempt failed");
		send_to(f, ident, WIRE_ABORT, json_pack("{s:s, s:i, s:s}", "job", job, "attempt", att, "reason", detail));
		return;
	}
	if (type == WIRE_PARKED) {
		snprintf(detail, sizeof detail, "PARKED: attempt %d of job %s has not failed", att, job);
		send_error(f, ident, strlen(ident), 409, detail);
		return;
	}
	if (rank >= at->world_size) {
		snprintf(detail, sizeof detail, "job %s has ranks 0 to %d, not %d", job, at->world_size - 1, rank);
		send_error(f, ident, strlen(ident), 404, detail);
		return;
	}
	at->ranks[rank].connected = true;
	switch (type) {
	case WIRE_JOIN: on_join(f, at, rank, ident, p); break;
	case WIRE_KV_SET: on_kv_set(f, at, rank, ident, p); break;
	case WIRE_KV_GET: on_kv_get(f, at, rank, ident, p); break;
	case WIRE_METRICS: on_metrics(f, at, rank, p); break;
	case WIRE_SNAPSHOT_WRITTEN: on_snapshot_written(f, at, rank, ident, p); break;
	case WIRE_SNAPSHOT_COMMITTED: on_snapshot_committed(f, at, rank, ident, p); break;
	case WIRE_SNAPSHOT_FAILED: on_snapshot_failed(f, at, rank, p); break;
	case WIRE_DONE: on_done(f, at, rank, p); break;
	case WIRE_FAILED: on_failed(f, at, rank, p); break;
	case WIRE_TRACE: /* stored in this loop's transaction; coordinatord/traces.c */
		if (tx(f) && traces_record(f->st, at->job_id, at->attempt, rank, p, detail, sizeof detail) == -EINVAL)
			send_error(f, ident, strlen(ident), 400, detail);
		break;
	default: break;
	}
}

/* ---- receiving ---- */

static bool decode_error(int r)
{
	return r == -EPROTO || r == -ENOENT || r == -EMSGSIZE || r == -EINVAL;
}

void fabric_handle_wire(fabric_t *f)
{
	for (int k = 0; k < MAX_BATCH; k++) {
		unsigned char raw[WIRE_MAX_IDENTITY_BYTES + 1];
		size_t raw_len = 0;
		wire_type_t type = 0;
		json_t *p = NULL;
		char err[256] = "";
		int r = wire_recv(f->router, ZMQ_DONTWAIT, raw, &raw_len, &type, &p, err, sizeof err);
		if (r == -EAGAIN || r == -EINTR)
			return;
		if (r < 0 && !decode_error(r)) {
			log_error("broker: receive failed: %s", strerror(-r));
			return;
		}
		if (raw_len > WIRE_MAX_IDENTITY_BYTES)
			raw_len = WIRE_MAX_IDENTITY_BYTES;
		char ident[WIRE_MAX_IDENTITY_BYTES + 1];
		memcpy(ident, raw, raw_len);
		ident[raw_len] = '\0';
		bool text = memchr(raw, '\0', raw_len) == NULL;
		bool is_agent = text && strncmp(ident, "agent/", 6) == 0 && ident[6] != '\0';
		if (r < 0) {
			/* any message counts as a heartbeat, even one we refuse */
			agent_t *a = is_agent ? smap_get(&f->agents, ident + 6) : NULL;
			if (a && a->alive)
				touch_agent(a);
			send_error(f, raw, raw_len, wire_error_code(r), err[0] ? err : "malformed message");
			continue;
		}
		if (type == WIRE_ERROR) {
			/* never answered (no ERROR ping-pong); it still counts as a heartbeat */
			agent_t *a = is_agent ? smap_get(&f->agents, ident + 6) : NULL;
			if (a && a->alive)
				touch_agent(a);
			log_warn("broker: %.100s says ERROR %lld: %.300s", text ? ident : "(binary identity)",
			         (long long)json_integer_value(json_object_get(p, "code")),
			         json_string_value(json_object_get(p, "detail"))); /* both required by wire_decode */
		} else if (is_agent)
			on_agent(f, ident, ident + 6, type, p);
		else if (text && strncmp(ident, "rank/", 5) == 0)
			on_rank(f, ident, type, p);
		else
			send_error(f, raw, raw_len, 400,
			           "unknown peer: connect with the identity agent/<node> or rank/<job>/<attempt>/<rank>");
		json_decref(p);
	}
}

/* ---- scheduling ---- */

typedef struct {
	char id[STORE_ID_BYTES];
	int world_size;
	int attempt;
	int restarts;
	char *spec_json;
} queued_t;

typedef struct {
	queued_t *jobs;
	size_t n, cap;
} queue_t;

static int collect_queued(const store_job_t *job, void *userdata)
{
	queue_t *q = userdata;
	if (q->n == q->cap) {
		size_t cap = q->cap ? q->cap * 2 : 16;
		queued_t *j = realloc(q->jobs, cap * sizeof *j);
		if (!j)
			return -ENOMEM;
		q->jobs = j;
		q->cap = cap;
	}
	queued_t *e = &q->jobs[q->n];
	snprintf(e->id, sizeof e->id, "%s", job->id);
	e->world_size = job->world_size;
	e->attempt = job->attempt;
	e->restarts = job->restarts;
	e->spec_json = strdup(job->spec_json);
	if (!e->spec_json)
		return -ENOMEM;
	q->n++;
	return 0;
}

static int agent_by_node(const void *x, const void *y)
{
	const agent_t *a = *(agent_t *const *)x, *b = *(agent_t *const *)y;
	return strcmp(a->node, b->node);
}

static int count_free(const agent_t *a, int kind)
{
	int n = 0;
	for (int i = 0; i < a->n_devices; i++)
		n += a->devices[i].kind == kind && !a->devices[i].owner;
	return n;
}

/*
 * Place `q` (its spec `spec`, taken) on devices of `kind`: with `take`,
 * take[i] ranks on alive[i], ranks going to the nodes in order of how many
 * they take (most first); without (`take` NULL), rank r on the device that
 * rank r of `prev` had. `prev`, the failed attempt of a job being restarted
 * (its devices already released), is replaced by the new attempt and freed:
 * the job goes recovering -> scheduled; a queued job goes queued ->
 * scheduled. Each rank's agent gets its SPAWN.
 */
static void place(fabric_t *f, const queued_t *q, int kind, json_t *spec, agent_t **alive, int n_alive,
                  const int *take, attempt_t *prev)
{
	attempt_t *at = calloc(1, sizeof *at);
	rank_rt_t *ranks = calloc((size_t)q->world_size, sizeof *ranks);
	int *order = malloc((size_t)(n_alive ? n_alive : 1) * sizeof *order);
	recovery_t *rec = prev ? calloc(1, sizeof *rec) : NULL;
	if (!at || !ranks || !order || (prev && !rec)) {
		free(at);
		free(ranks);
		free(order);
		free(rec);
		json_decref(spec);
		log_error("broker: out of memory placing job %s", q->id);
		return;
	}
	snprintf(at->job_id, sizeof at->job_id, "%s", q->id);
	at->attempt = q->attempt + 1;
	at->world_size = q->world_size;
	at->kind = kind;
	at->state = STORE_JOB_SCHEDULED;
	at->spec = spec;
	at->ranks = ranks;
	at->restarts = prev ? prev->restarts : q->restarts;
	at->max_restarts = spec_max_restarts(spec);

	int rank = 0;
	if (take) {
		int n_order = 0;
		for (int i = 0; i < n_alive; i++)
			if (take[i] > 0)
				order[n_order++] = i;
		/* most ranks first, then node order (insertion sort: n_order is small) */
		for (int i = 1; i < n_order; i++)
			for (int j = i; j > 0 && take[order[j]] > take[order[j - 1]]; j--) {
				int t = order[j];
				order[j] = order[j - 1];
				order[j - 1] = t;
			}
		for (int k = 0; k < n_order; k++) {
			agent_t *a = alive[order[k]];
			int want = take[order[k]];
			for (int i = 0; i < a->n_devices && want > 0; i++) {
				device_t *d = &a->devices[i];
				if (d->kind != kind || d->owner)
					continue;
				d->owner = at;
				ranks[rank++] = (rank_rt_t){.agent = a, .device_kind = kind, .device_index = d->index};
				want--;
			}
		}
	} else {
		for (; rank < q->world_size; rank++) {
			const rank_rt_t *old = &prev->ranks[rank];
			device_t *d = agent_device(old->agent, kind, old->device_index);
			d->owner = at; /* checked free by the caller */
			ranks[rank] = (rank_rt_t){.agent = old->agent, .device_kind = kind, .device_index = d->index};
		}
	}
	free(order);
	/* the placement, node by node (ranks are numbered node by node) */
	char where[REASON_BYTES];
	size_t wlen = 0;
	int n_nodes = 0;
	where[0] = '\0';
	for (int r = 0; r < rank; r++) {
		bool first = r == 0 || ranks[r].agent != ranks[r - 1].agent;
		if (first) {
			n_nodes++;
			reason_add(where, &wlen, "%s %s [", r ? "]" : "", ranks[r].agent->node);
		}
		reason_add(where, &wlen, "%s%d:%s%d", first ? "" : " ", r, s_kind_names[kind], ranks[r].device_index);
	}
	reason_add(where, &wlen, "]");
	/* Survivors of `prev` parked on the device their rank number gets again
	 * are kept (adopted); the other parked ones are stopped. */
	int n_kept = 0;
	for (int r = 0; prev && r < prev->world_size; r++) {
		const rank_rt_t *old = &prev->ranks[r];
		if (!rank_kept(old))
			continue;
		if (r < rank && ranks[r].agent == old->agent && ranks[r].device_kind == old->device_kind &&
		    ranks[r].device_index == old->device_index)
			n_kept++;
		else
			stop_rank(f, prev, r, "not placed on its device again: replaced by a new process");
	}
	char reason[REASON_BYTES];
	size_t rlen = 0;
	reason[0] = '\0';
	reason_add(reason, &rlen, "placed %d rank(s) on %d node(s):%s", q->world_size, n_nodes, where);
	if (prev)
		reason_add(reason, &rlen, "; restart %d of %d after %s; %d rank(s) rejoin in their process",
		           prev->restarts, prev->max_restarts, prev->cause ? prev->cause : "a failure", n_kept);
	void *old_value = NULL;
	if (smap_put(&f->attempts, at->job_id, at, &old_value) < 0) {
		for (int r = 0; r < rank; r++) {
			device_t *d = agent_device(ranks[r].agent, kind, ranks[r].device_index);
			if (d)
				d->owner = NULL;
		}
		free(rec);
		attempt_free(at);
		log_error("broker: out of memory placing job %s", q->id);
		return;
	}
	int64_t now = clock_wall_us();
	if (tx(f)) {
		if (prev)
			wrote(f, store_rank_lose_attempt(f->st, prev->job_id, prev->attempt, now), "ranks lost");
		wrote(f, store_job_set_attempt(f->st, at->job_id, at->attempt, now), "job attempt");
		for (int r = 0; r < at->world_size; r++) {
			store_rank_t sr = {.attempt = at->attempt,
			                   .rank = r,
			                   .node = ranks[r].agent->node,
			                   .device_kind = s_kind_names[kind],
			                   .device_index = ranks[r].device_index,
			                   .state = "placed"};
			snprintf(sr.job_id, sizeof sr.job_id, "%s", at->job_id);
			wrote(f, store_rank_insert(f->st, &sr, now), "rank insert");
		}
		wrote(f, store_job_set_state(f->st, at->job_id, STORE_JOB_SCHEDULED, reason, now), "job scheduled");
	}
	log_info("job %s attempt %d scheduled: %s", at->job_id, at->attempt, reason);
	for (int r = 0; r < at->world_size; r++) {
		json_t *sp = spawn_payload(at, r);
		if (prev && r < prev->world_size && rank_kept(&prev->ranks[r])) {
			/* the agent hands the process over; the rank hears REJOIN */
			char ident[WIRE_MAX_IDENTITY_BYTES + 1];
			ranks[r].adopted_from = prev->attempt;
			json_object_set_new(sp, "adopt", json_integer(prev->attempt));
			send_to(f, ranks[r].agent->ident, WIRE_SPAWN, sp);
			rank_ident(ident, prev->job_id, prev->attempt, r);
			send_to(f, ident, WIRE_REJOIN,
			        json_pack("{s:s, s:i}", "job", at->job_id, "attempt", at->attempt));
			continue;
		}
		send_to(f, ranks[r].agent->ident, WIRE_SPAWN, sp);
	}
	if (prev) {
		snprintf(rec->cause, sizeof rec->cause, "%s", prev->cause ? prev->cause : "a failure");
		rec->failed_attempt = prev->attempt;
		rec->failed_mono_us = prev->failed_mono_us;
		rec->detection_us = prev->detection_us;
		rec->spawned_mono_us = clock_mono_us();
		at->rec = rec;
	}
	if (old_value && old_value != at)
		attempt_free(old_value);
}

/* Give back the devices a failed attempt still holds (before its restart). */
static void release_devices(attempt_t *at)
{
	for (int r = 0; r < at->world_size; r++) {
		rank_rt_t *rr = &at->ranks[r];
		device_t *d = rr->agent ? agent_device(rr->agent, rr->device_kind, rr->device_index) : NULL;
		if (d && d->owner == at)
			d->owner = NULL;
	}
	at->released = true;
}

/* Whether every rank of `at` can go back on its device (its agent alive,
 * the device free). */
static bool same_devices_free(const attempt_t *at)
{
	for (int r = 0; r < at->world_size; r++) {
		const rank_rt_t *rr = &at->ranks[r];
		if (!rr->agent || !rr->agent->alive || rr->device_kind != at->kind)
			return false;
		device_t *d = agent_device(rr->agent, rr->device_kind, rr->device_index);
		if (!d || d->owner)
			return false;
	}
	return true;
}

/*
 * Restart the failed attempts whose ranks are gone and whose backoff is
 * over, before any queued job: on the same devices when they are all free
 * on alive agents, else with the normal gang placement. One that does not
 * fit waits (recovering) and, like a waiting queued job, holds back the
 * queued jobs of its kind while it could fit once devices are freed.
 */
static void restart_due(fabric_t *f, agent_t **alive, int n_alive, bool blocked[N_KINDS])
{
	int64_t now = clock_mono_us();
	size_t n = 0, pos = 0;
	smap_slot_t *s;
	while ((s = smap_next(&f->attempts, &pos)))
		n++;
	if (n == 0)
		return;
	char(*ids)[STORE_ID_BYTES] = malloc(n * sizeof *ids);
	int *n_free = malloc((size_t)(n_alive ? n_alive : 1) * sizeof *n_free);
	int *take = malloc((size_t)(n_alive ? n_alive : 1) * sizeof *take);
	if (!ids || !n_free || !take)
		goto out;
	size_t n_due = 0;
	pos = 0;
	while ((s = smap_next(&f->attempts, &pos))) {
		attempt_t *at = s->value;
		if (at->failed && at->drained && at->restart_at_us <= now)
			snprintf(ids[n_due++], STORE_ID_BYTES, "%s", at->job_id);
	}
	/* placing inserts into f->attempts: not while walking it */
	for (size_t i = 0; i < n_due; i++) {
		attempt_t *at = smap_get(&f->attempts, ids[i]);
		if (!at || at->kind < 0 || at->kind >= N_KINDS)
			continue;
		if (!at->released)
			release_devices(at);
		queued_t q = {.world_size = at->world_size, .attempt = at->attempt, .restarts = at->restarts};
		snprintf(q.id, sizeof q.id, "%s", at->job_id);
		if (same_devices_free(at)) {
			place(f, &q, at->kind, json_incref(at->spec), alive, n_alive, NULL, at);
			continue;
		}
		long total = 0;
		for (int a = 0; a < n_alive; a++) {
			n_free[a] = count_free(alive[a], at->kind);
			for (int d = 0; d < alive[a]->n_devices; d++)
				total += alive[a]->devices[d].kind == at->kind;
		}
		if (!blocked[at->kind] && gang_pack(n_free, n_alive, at->world_size, take) > 0) {
			place(f, &q, at->kind, json_incref(at->spec), alive, n_alive, take, at);
			continue;
		}
		if (total >= at->world_size)
			blocked[at->kind] = true;
		log_debug("job %s: restart waits for %d free %s device(s)", at->job_id, at->world_size,
		          s_kind_names[at->kind]);
	}
out:
	free(ids);
	free(n_free);
	free(take);
}

/*
 * Say why queued job `q` (of device kind `kind`) was not placed, as its
 * state_reason with a "state" event queued -> queued, when that differs
 * from the stored one: either the alive workers do not have `world_size`
 * devices of its kind at all (`total`), or they are in use. The texts
 * depend on the cluster's devices, not on which are free at the moment,
 * so a waiting job gets one event per change of the cluster, not one per
 * scheduling pass. Placement replaces the reason.
 */
static void queue_wait_reason(fabric_t *f, const queued_t *q, int kind, long total, int n_alive)
{
	char reason[512];
	if (total < q->world_size)
		snprintf(reason, sizeof reason,
		         "waiting: the job needs %d %s device(s) and the %d alive worker(s) have %ld%s", q->world_size,
		         s_kind_names[kind], n_alive, total,
		         kind == KIND_CUDA && total == 0
		                 ? " (no alive worker offers a GPU; an agent offers the NVIDIA GPUs it finds, see "
		                   "--gpus in docs/workers.md)"
		                 : "");
	else
		snprintf(reason, sizeof reason, "waiting for %d free %s device(s): the alive workers have %ld, now in use",
		         q->world_size, s_kind_names[kind], total);
	store_job_t job;
	if (store_job_get(f->st, q->id, &job) < 0)
		return;
	bool write = job.state == STORE_JOB_QUEUED && (!job.state_reason || strcmp(job.state_reason, reason) != 0);
	store_job_clear(&job);
	if (!write)
		return;
	if (tx(f))
		wrote(f, store_job_set_state(f->st, q->id, STORE_JOB_QUEUED, reason, clock_wall_us()), "job waiting");
	log_info("job %s %s", q->id, reason);
}

/*
 * One scheduling pass. Queued jobs are taken by priority, then submission
 * order. A job that fits is placed. A job that does not fit waits; while it
 * could fit on the alive nodes' devices of its kind once some are freed, no
 * later job of that kind is placed in this pass (so a wide job is not starved
 * by a stream of narrow ones); a job wider than all alive devices of its kind
 * does not hold the others back. Jobs of the other kind are not affected.
 */
static void schedule(fabric_t *f)
{
	f->sched_dirty = false;
	f->next_sched_us = clock_mono_us() + SCHED_PERIOD_US;
	agent_t **alive = malloc((f->agents.n ? f->agents.n : 1) * sizeof *alive);
	if (!alive)
		return;
	int n_alive = 0;
	size_t pos = 0;
	smap_slot_t *s;
	while ((s = smap_next(&f->agents, &pos))) {
		agent_t *a = s->value;
		if (a->alive && a->n_devices > 0)
			alive[n_alive++] = a;
	}
	bool blocked[N_KINDS] = {false, false};
	if (n_alive == 0) {
		restart_due(f, alive, 0, blocked); /* nothing fits: they wait, their devices released */
		free(alive);
		return;
	}
	qsort(alive, (size_t)n_alive, sizeof *alive, agent_by_node);
	restart_due(f, alive, n_alive, blocked);
	queue_t q = {0};
	int r = store_job_list_queued(f->st, collect_queued, &q);
	if (r < 0)
		log_error("broker: cannot read the queued jobs: %s", strerror(-r));
	if (q.n == 0 || r < 0)
		goto out;
	int *n_free = malloc((size_t)n_alive * sizeof *n_free);
	int *take = malloc((size_t)n_alive * sizeof *take);
	if (!n_free || !take) {
		free(n_free);
		free(take);
		goto out;
	}
	for (size_t i = 0; i < q.n; i++) {
		queued_t *job = &q.jobs[i];
		json_t *spec = json_loads(job->spec_json, 0, NULL);
		const char *dev = json_string_value(json_object_get(json_object_get(spec, "parallel"), "device"));
		int kind = kind_parse(dev ? dev : "cpu");
		if (!spec || kind < 0) {
			json_decref(spec);
			log_error("job %s: its stored spec cannot be read; failing it", job->id);
			if (tx(f))
				wrote(f, store_job_set_state(f->st, job->id, STORE_JOB_FAILED,
				                             "the stored job spec cannot be read", clock_wall_us()),
				      "job failed");
			continue;
		}
		if (blocked[kind]) {
			json_decref(spec);
			continue;
		}
		long total = 0;
		for (int a = 0; a < n_alive; a++) {
			n_free[a] = count_free(alive[a], kind);
			for (int d = 0; d < alive[a]->n_devices; d++)
				total += alive[a]->devices[d].kind == kind;
		}
		int used = gang_pack(n_free, n_alive, job->world_size, take);
		if (used > 0) {
			place(f, job, kind, spec, alive, n_alive, take, NULL); /* takes spec */
			continue;
		}
		json_decref(spec);
		queue_wait_reason(f, job, kind, total, n_alive);
		if (total >= job->world_size)
			blocked[kind] = true;
	}
	free(n_free);
	free(take);
out:
	for (size_t i = 0; i < q.n; i++)
		free(q.jobs[i].spec_json);
	free(q.jobs);
	free(alive);
}

/* ---- timers ---- */

static void expire_agents(fabric_t *f, int64_t now)
{
	size_t pos = 0;
	smap_slot_t *s;
	while ((s = smap_next(&f->agents, &pos))) {
		agent_t *a = s->value;
		if (!a->alive || now - a->last_seen_mono_us <= f->dead_after_us)
			continue;
		a->alive = false;
		char cause[REASON_BYTES];
		snprintf(cause, sizeof cause, "node %s lost: no heartbeat for %.1f s", a->node,
		         (double)f->dead_after_us / 1e6);
		log_warn("agent %s declared dead: no message for %.1f s", a->node,
		         (double)(now - a->last_seen_mono_us) / 1e6);
		if (tx(f)) {
			if (a->hb_dirty)
				wrote(f, store_worker_heartbeat(f->st, a->node, a->last_seen_wall_us), "worker heartbeat");
			wrote(f, store_worker_set_state(f->st, a->node, "dead"), "worker dead");
		}
		a->hb_dirty = false;
		size_t jpos = 0;
		smap_slot_t *js;
		while ((js = smap_next(&f->attempts, &jpos))) {
			attempt_t *at = js->value;
			if (at->failed) {
				check_drained(f, at, now); /* its ranks there are gone */
				continue;
			}
			for (int r = 0; r < at->world_size; r++) {
				if (at->ranks[r].agent == a && !at->ranks[r].done) {
					/* detection: the time since its last message */
					attempt_failed(f, at, cause, NULL, now - a->last_seen_mono_us);
					break;
				}
			}
		}
		for (int i = 0; i < a->n_devices; i++)
			a->devices[i].owner = NULL;
		f->sched_dirty = true;
	}
}

static void heartbeat_agents(fabric_t *f)
{
	size_t pos = 0;
	smap_slot_t *s;
	bool any_dirty = false;
	while ((s = smap_next(&f->agents, &pos))) {
		agent_t *a = s->value;
		if (!a->alive)
			continue;
		send_to(f, a->ident, WIRE_HEARTBEAT, json_pack("{s:s}", "node", a->node));
		any_dirty |= a->hb_dirty;
	}
	if (!any_dirty || !tx(f))
		return;
	pos = 0;
	while ((s = smap_next(&f->agents, &pos))) {
		agent_t *a = s->value;
		if (!a->hb_dirty)
			continue;
		wrote(f, store_worker_heartbeat(f->st, a->node, a->last_seen_wall_us), "worker heartbeat");
		a->hb_dirty = false;
	}
}

/* Ranks that exited cleanly without DONE, or sent FAILED without their exit
 * status coming, whose grace has passed; failed attempts whose grace for
 * their ranks to go is over. */
static void expire_clean_exits(fabric_t *f, int64_t now)
{
	size_t pos = 0;
	smap_slot_t *s;
	while ((s = smap_next(&f->attempts, &pos))) {
		attempt_t *at = s->value;
		if (at->failed) {
			check_drained(f, at, now);
			continue;
		}
		for (int r = 0; r < at->world_size; r++) {
			rank_rt_t *rr = &at->ranks[r];
			char cause[REASON_BYTES];
			if (rr->failed_deadline_us && rr->failed_deadline_us <= now) {
				snprintf(cause, sizeof cause, "rank %d failed: %s", r, rr->failed_reason);
				attempt_failed(f, at, cause, NULL, 0); /* may free at: go on with the next attempt */
				break;
			}
			if (rr->clean_exit_deadline_us && !rr->done && rr->clean_exit_deadline_us <= now) {
				snprintf(cause, sizeof cause, "rank %d exited with status 0 before reporting DONE", r);
				attempt_failed(f, at, cause, NULL, 0); /* may free at: go on with the next attempt */
				break;
			}
		}
	}
}

static void expire_kv_gets(fabric_t *f, int64_t now)
{
	size_t pos = 0;
	smap_slot_t *s;
	while ((s = smap_next(&f->attempts, &pos))) {
		attempt_t *at = s->value;
		parked_t **pp = &at->parked;
		while (*pp) {
			parked_t *w = *pp;
			if (w->deadline_mono_us <= now) {
				kv_answer(f, at, w->rank, w->key, NULL);
				*pp = w->next;
				free(w->key);
				free(w);
				at->n_parked--;
			} else {
				pp = &w->next;
			}
		}
	}
}

void fabric_tick(fabric_t *f)
{
	int64_t now = clock_mono_us();
	if (now >= f->next_expiry_us) {
		expire_agents(f, now);
		f->next_expiry_us = now + EXPIRY_CHECK_US;
	}
	if (now >= f->next_hb_us) {
		heartbeat_agents(f);
		f->next_hb_us = now + (int64_t)f->opt.heartbeat_ms * 1000;
	}
	expire_kv_gets(f, now);
	expire_clean_exits(f, now);
	size_t pos = 0;
	smap_slot_t *s;
	while ((s = smap_next(&f->attempts, &pos))) {
		const attempt_t *at = s->value;
		if (at->failed && at->drained && !at->released && at->restart_at_us <= now)
			f->sched_dirty = true; /* its backoff is over: restart it */
	}
	if (f->sched_dirty || now >= f->next_sched_us)
		schedule(f);
}

long fabric_timeout_ms(fabric_t *f)
{
	int64_t now = clock_mono_us();
	int64_t next = f->next_hb_us;
	if (f->next_expiry_us < next)
		next = f->next_expiry_us;
	if (f->next_sched_us < next)
		next = f->next_sched_us;
	if (f->sched_dirty)
		next = now;
	size_t pos = 0;
	smap_slot_t *s;
	while ((s = smap_next(&f->attempts, &pos))) {
		attempt_t *at = s->value;
		for (parked_t *w = at->parked; w; w = w->next)
			if (w->deadline_mono_us < next)
				next = w->deadline_mono_us;
		if (at->failed) {
			int64_t d = at->drained ? at->restart_at_us : at->drain_deadline_us;
			if (d < next && !at->released)
				next = d;
			continue;
		}
		for (int r = 0; r < at->world_size; r++) {
			int64_t d = at->ranks[r].clean_exit_deadline_us;
			if (d && !at->ranks[r].done && d < next)
				next = d;
			d = at->ranks[r].failed_deadline_us;
			if (d && d < next)
				next = d;
		}
	}
	if (next <= now)
		return 0;
	return (long)((next - now + 999) / 1000);
}

/* ---- life ---- */

fabric_t *fabric_new(void *router, store_t *st, const fabric_options_t *opt)
{
	fabric_t *f = calloc(1, sizeof *f);
	if (!f)
		return NULL;
	f->router = router;
	f->st = st;
	f->opt = *opt;
	f->dead_after_us = (int64_t)opt->dead_after * opt->heartbeat_ms * 1000;
	int64_t now = clock_mono_us();
	f->next_hb_us = now;
	f->next_expiry_us = now + EXPIRY_CHECK_US;
	f->next_sched_us = now;
	f->sched_dirty = true;
	return f;
}

void fabric_free(fabric_t *f)
{
	if (!f)
		return;
	size_t pos = 0;
	smap_slot_t *s;
	while ((s = smap_next(&f->attempts, &pos)))
		attempt_free(s->value);
	smap_free(&f->attempts);
	pos = 0;
	while ((s = smap_next(&f->agents, &pos))) {
		agent_t *a = s->value;
		free(a->devices);
		free(a);
	}
	smap_free(&f->agents);
	while (f->out_head) {
		outmsg_t *m = f->out_head;
		f->out_head = m->next;
		json_decref(m->payload);
		free(m);
	}
	free(f);
}

typedef struct {
	fabric_t *f;
	int r;
} load_ctx_t;

static int load_worker(const store_worker_t *w, void *userdata)
{
	load_ctx_t *c = userdata;
	if (strcmp(w->state, "alive") != 0)
		return 0;
	json_t *arr = json_loads(w->devices_json, 0, NULL);
	device_t *devs = NULL;
	int n = 0;
	char detail[256];
	if (!json_is_array(arr) || parse_devices(arr, &devs, &n, detail, sizeof detail) < 0) {
		json_decref(arr);
		log_warn("worker %s: stored devices cannot be read; it must register again", w->node);
		return 0;
	}
	json_decref(arr);
	agent_t *a = agent_get_or_add(c->f, w->node);
	if (!a) {
		free(devs);
		return -ENOMEM;
	}
	free(a->devices);
	a->devices = devs;
	a->n_devices = n;
	a->alive = true;
	a->last_seen_mono_us = clock_mono_us(); /* dead_after intervals from now to speak again */
	a->last_seen_wall_us = w->has_heartbeat ? w->last_heartbeat_us : clock_wall_us();
	return 0;
}

static int load_rank(const store_rank_t *sr, void *userdata)
{
	load_ctx_t *c = userdata;
	fabric_t *f = c->f;
	attempt_t *at = smap_get(&f->attempts, sr->job_id);
	if (!at) {
		store_job_t job;
		memset(&job, 0, sizeof job);
		int r = store_job_get(f->st, sr->job_id, &job);
		if (r < 0)
			return r;
		at = calloc(1, sizeof *at);
		if (at) {
			at->ranks = calloc((size_t)job.world_size, sizeof *at->ranks);
			at->last_metric_step = -1; /* read from the store at its first row */
		}
		if (at) {
			at->spec = json_loads(job.spec_json, 0, NULL);
			if (!at->spec) /* validated at submit; an unreadable one is sent as {} */
				at->spec = json_object();
		}
		if (!at || !at->ranks || !at->spec || smap_put(&f->attempts, sr->job_id, at, NULL) < 0) {
			attempt_free(at);
			store_job_clear(&job);
			return -ENOMEM;
		}
		snprintf(at->job_id, sizeof at->job_id, "%s", job.id);
		at->attempt = job.attempt;
		at->world_size = job.world_size;
		at->state = job.state == STORE_JOB_RUNNING ? STORE_JOB_RUNNING : STORE_JOB_SCHEDULED;
		at->kind = -1;
		at->restarts = job.restarts;
		at->max_restarts = spec_max_restarts(at->spec);
		if (job.state == STORE_JOB_RECOVERING) {
			/* its attempt had failed; its ranks are killed when their
			 * agents register again: restart it without waiting */
			at->state = STORE_JOB_RECOVERING;
			at->failed = at->drained = true;
			at->failed_mono_us = clock_mono_us();
			at->restart_at_us = at->failed_mono_us;
			at->cause = strdup(job.state_reason ? job.state_reason : "a failure before the coordinator restarted");
		}
		for (int r2 = 0; r2 < at->world_size; r2++)
			at->ranks[r2].device_index = -1;
		store_job_clear(&job);
	}
	if (sr->rank >= at->world_size)
		return 0;
	rank_rt_t *rr = &at->ranks[sr->rank];
	rr->device_kind = kind_parse(sr->device_kind);
	rr->device_index = sr->device_index;
	at->kind = rr->device_kind;
	agent_t *a = smap_get(&f->agents, sr->node);
	rr->agent = a && a->alive ? a : NULL;
	if (!rr->agent) {
		/* remember the node for the failure message: keep a dead agent entry */
		a = agent_get_or_add(f, sr->node);
		rr->agent = a;
	}
	rr->joined = strcmp(sr->state, "joined") == 0 || strcmp(sr->state, "done") == 0;
	rr->connected = rr->joined;
	rr->done = strcmp(sr->state, "done") == 0;
	rr->exited = strcmp(sr->state, "exited") == 0 || strcmp(sr->state, "lost") == 0;
	at->n_joined += rr->joined;
	at->n_done += rr->done;
	return 0;
}

int fabric_load(fabric_t *f, char *err, size_t errlen)
{
	load_ctx_t c = {.f = f};
	int r = store_worker_list(f->st, load_worker, &c);
	if (r == 0)
		r = store_rank_list_active(f->st, load_rank, &c);
	if (r < 0) {
		snprintf(err, errlen, "cannot load workers and ranks from the database: %s", strerror(-r));
		return r;
	}
	/* Attempts whose ranks are not all on alive nodes' devices are lost. */
	size_t pos = 0;
	smap_slot_t *s;
	int n_live = 0;
	while ((s = smap_next(&f->attempts, &pos))) {
		attempt_t *at = s->value;
		char cause[REASON_BYTES] = "";
		if (at->failed) {
			n_live++;
			continue;
		}
		for (int k = 0; k < at->world_size && !cause[0]; k++) {
			rank_rt_t *rr = &at->ranks[k];
			device_t *d = rr->agent && rr->agent->alive && rr->device_kind >= 0
			                  ? agent_device(rr->agent, rr->device_kind, rr->device_index)
			                  : NULL;
			if (!rr->agent)
				snprintf(cause, sizeof cause, "rank %d has no placement in the database", k);
			else if (!d)
				snprintf(cause, sizeof cause, "node %s lost: not alive when the coordinator restarted",
				         rr->agent->node);
			else if (rr->exited && !rr->done)
				snprintf(cause, sizeof cause, "rank %d was lost while the coordinator was down", k);
			else
				d->owner = at;
		}
		if (cause[0])
			attempt_failed(f, at, cause, NULL, 0); /* may free at */
		else
			n_live++;
	}
	fabric_flush(f);
	if (f->agents.n || n_live)
		log_info("broker: restored %zu agent(s) and %d live attempt(s) from the database", f->agents.n, n_live);
	return 0;
}
