/*
 * fabric: the workers' side of the broker loop (see fabric.h for the
 * contract, fabric_int.h for the state and docs/coordinator.md for the
 * protocol choices).
 *
 * This file holds what the fabric's modules share and the entry points:
 * the lazy transaction of each loop iteration and the messages held until
 * its commit, the receiving of wire messages (routed to agents.c or
 * ranks.c by the sender's identity), the timers (fabric_tick: agents.c's
 * expiry and heartbeats, kv.c's and attempt.c's deadlines, then scheduler.c's
 * pass), and the memory state's life: new, free, and load from the store
 * after a restart.
 */
#include "fabric.h"
#include "feed.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <zmq.h>

#include "agents.h"
#include "attempt.h"
#include "clock.h"
#include "fabric_int.h"
#include "kv.h"
#include "log.h"
#include "metrics.h"
#include "program.h"
#include "ranks.h"
#include "scheduler.h"
#include "enroll.h"
#include "store_keys.h"

static const char *const s_kind_names[N_KINDS] = {"cpu", "cuda"};

const char *fabric_kind_name(int kind)
{
	return kind >= 0 && kind < N_KINDS ? s_kind_names[kind] : "?";
}

bool fabric_tx(fabric_t *f)
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
void fabric_wrote(fabric_t *f, int r, const char *what)
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
		if (r == 0)
			feed_collect(f->st); /* the streams see it once it is durable */
		f->in_tx = false;
		f->tx_failed = false;
		f->n_tx_writes = 0;
	}
	send_held(f);
}

/* Send `payload` (a new reference, consumed; NULL means out of memory) to
 * the peer `ident` (`ident_len` bytes): at once, or after the commit when a
 * transaction is open, keeping the order of everything sent. */
void fabric_send_raw(fabric_t *f, const void *ident, size_t ident_len, wire_type_t type, json_t *payload)
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

void fabric_send_to(fabric_t *f, const char *ident, wire_type_t type, json_t *payload)
{
	fabric_send_raw(f, ident, strlen(ident), type, payload);
}

void fabric_send_error(fabric_t *f, const void *ident, size_t ident_len, int code, const char *detail)
{
	if (log_enabled(LOG_DEBUG))
		log_debug("broker: ERROR %d to %.*s: %s", code, (int)ident_len, (const char *)ident, detail);
	fabric_send_raw(f, ident, ident_len, WIRE_ERROR, json_pack("{s:i, s:s}", "code", code, "detail", detail));
}

void fabric_rank_ident(char out[WIRE_MAX_IDENTITY_BYTES + 1], const char *job, int attempt, int rank)
{
	snprintf(out, WIRE_MAX_IDENTITY_BYTES + 1, "rank/%s/%d/%d", job, attempt, rank);
}

int fabric_kind_parse(const char *name)
{
	for (int k = 0; name && k < N_KINDS; k++)
		if (strcmp(name, fabric_kind_name(k)) == 0)
			return k;
	return -1;
}

void fabric_reason_add(char *buf, size_t *len, const char *fmt, ...)
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

void fabric_job_cancelled(fabric_t *f, const char *job_id, const char *reason)
{
	attempt_t *at = smap_get(&f->attempts, job_id);
	if (at)
		attempt_end(f, at, STORE_JOB_CANCELLED, reason, true, true);
	f->sched_dirty = true;
}

void fabric_mark_dirty(fabric_t *f)
{
	f->sched_dirty = true;
}

static bool decode_error(int r)
{
	return r == -EPROTO || r == -ENOENT || r == -EMSGSIZE || r == -EINVAL;
}

/* A message from a peer that may only ENROLL (or from no key at all with
 * --broker-auth on): refused with ERROR 401, logged (rate-limited). */
static void refuse_pending(fabric_t *f, const void *raw, size_t raw_len, const char *ident, wire_type_t type)
{
	const char *who = f->peer.kind == CURVE_PEER_PENDING ? f->peer.public_key : ident;
	curve_log_refusal(who, "refused %s from %.100s (key %s): the key is not enrolled; it may only ENROLL with a "
	                  "join token", type ? wire_type_name(type) : "a malformed message", ident,
	                  f->peer.kind == CURVE_PEER_PENDING ? f->peer.public_key : "none");
	fabric_send_error(f, raw, raw_len, 401,
	                  "this key is not enrolled: start the agent with --join-token (ringctl worker enroll prints one)");
}

/* ENROLL {node, token}: a pending key becomes an enrolled one (enroll.h).
 * An already enrolled key is told its enrollment again (its ENROLLED may
 * have been lost). */
static void on_enroll(fabric_t *f, const void *raw, size_t raw_len, json_t *p)
{
	char detail[512];
	int64_t key_id = 0;
	int status;
	const char *node = json_string_value(json_object_get(p, "node"));
	if (!f->opt.auth) {
		fabric_send_error(f, raw, raw_len, 400, "ENROLL: this broker runs with --broker-auth off: no enrollment");
		return;
	}
	if (f->peer.kind == CURVE_PEER_AGENT) {
		store_key_t k;
		if (store_key_get(f->st, f->peer.key_id, &k) < 0 || strcmp(k.node, node) != 0) {
			snprintf(detail, sizeof detail, "ENROLL: this key is already enrolled for another node");
			fabric_send_error(f, raw, raw_len, 409, detail);
			return;
		}
		fabric_send_raw(f, raw, raw_len, WIRE_ENROLLED,
		                json_pack("{s:I, s:s}", "key_id", (json_int_t)k.id, "node", k.node));
		return;
	}
	if (!fabric_tx(f)) {
		fabric_send_error(f, raw, raw_len, 503, "ENROLL: the coordinator cannot write to its database; retry later");
		return;
	}
	status = enroll_on_enroll(f->st, f->peer.public_key, p, &key_id, detail, sizeof detail);
	if (status != 0) {
		curve_log_refusal(f->peer.public_key, "refused ENROLL of node %.64s by key %s: %s", node,
		                  f->peer.public_key, detail);
		fabric_send_error(f, raw, raw_len, status, detail);
		return;
	}
	f->n_tx_writes++;
	log_info("workers: node %s enrolled with key %lld (%s)", node, (long long)key_id, f->peer.public_key);
	fabric_send_raw(f, raw, raw_len, WIRE_ENROLLED, json_pack("{s:I, s:s}", "key_id", (json_int_t)key_id, "node", node));
}

void fabric_handle_wire(fabric_t *f)
{
	for (int k = 0; k < MAX_BATCH; k++) {
		unsigned char raw[WIRE_MAX_IDENTITY_BYTES + 1];
		size_t raw_len = 0;
		wire_type_t type = 0;
		json_t *p = NULL;
		char err[256] = "";
		char user_id[128] = "";
		int r = wire_recv_peer(f->router, ZMQ_DONTWAIT, raw, &raw_len, user_id, sizeof user_id, &type, &p, err,
		                       sizeof err);
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
		curve_peer_parse(user_id, &f->peer);
		if (f->opt.auth && f->peer.kind != CURVE_PEER_AGENT) {
			/* a pending key may only ENROLL; nothing else is read */
			if (r == 0 && f->peer.kind == CURVE_PEER_PENDING && type == WIRE_ENROLL)
				on_enroll(f, raw, raw_len, p);
			else
				refuse_pending(f, raw, raw_len, text ? ident : "(binary identity)", r == 0 ? type : 0);
			json_decref(p);
			continue;
		}
		if (r < 0) {
			/* any message counts as a heartbeat, even one we refuse */
			agent_t *a = is_agent ? smap_get(&f->agents, ident + 6) : NULL;
			if (a && a->alive)
				agents_touch(a);
			fabric_send_error(f, raw, raw_len, wire_error_code(r), err[0] ? err : "malformed message");
			continue;
		}
		if (type == WIRE_ERROR) {
			/* never answered (no ERROR ping-pong); it still counts as a heartbeat */
			agent_t *a = is_agent ? smap_get(&f->agents, ident + 6) : NULL;
			if (a && a->alive)
				agents_touch(a);
			log_warn("broker: %.100s says ERROR %lld: %.300s", text ? ident : "(binary identity)",
			         (long long)json_integer_value(json_object_get(p, "code")),
			         json_string_value(json_object_get(p, "detail"))); /* both required by wire_decode */
		} else if (type == WIRE_ENROLL) {
			on_enroll(f, raw, raw_len, p);
		} else if (is_agent)
			agents_on_message(f, ident, ident + 6, type, p);
		else if (text && strncmp(ident, "rank/", 5) == 0)
			ranks_on_message(f, ident, type, p);
		else
			fabric_send_error(f, raw, raw_len, 400,
			                  "unknown peer: connect with the identity agent/<node> or rank/<job>/<attempt>/<rank>");
		json_decref(p);
	}
}

void fabric_deaf(fabric_t *f, int64_t deaf_us)
{
	/* Shorter gaps are the loop's ordinary work: what arrived meanwhile is
	 * read in the next iteration, well inside the dead_after window. */
	if (deaf_us < (int64_t)f->opt.heartbeat_ms * 1000)
		return;
	log_warn("the broker loop heard nothing for %.1f s (busy or stopped): the agents have as long again, "
	         "plus the liveness window, to be heard from", (double)deaf_us / 1e6);
	agents_deaf(f, deaf_us, DEAF_FORGIVEN_MAX_US, clock_mono_us());
}

void fabric_tick(fabric_t *f)
{
	int64_t now = clock_mono_us();
	if (now >= f->next_expiry_us) {
		agents_expire(f, now);
		f->next_expiry_us = now + EXPIRY_CHECK_US;
	}
	if (now >= f->next_hb_us) {
		agents_heartbeat(f);
		f->next_hb_us = now + (int64_t)f->opt.heartbeat_ms * 1000;
	}
	kv_expire(f, now);
	attempt_expire(f, now);
	size_t pos = 0;
	smap_slot_t *s;
	while ((s = smap_next(&f->attempts, &pos))) {
		const attempt_t *at = s->value;
		if (at->failed && at->drained && !at->released && at->restart_at_us <= now)
			f->sched_dirty = true; /* its backoff is over: restart it */
	}
	if (f->sched_dirty || now >= f->next_sched_us)
		scheduler_run(f);
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
		free(a->ckpt_root);
		free(a);
	}
	smap_free(&f->agents);
	scheduler_free(f);
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
	if (!json_is_array(arr) || agents_parse_devices(arr, &devs, &n, detail, sizeof detail) < 0) {
		json_decref(arr);
		log_warn("worker %s: stored devices cannot be read; it must register again", w->node);
		return 0;
	}
	json_decref(arr);
	agent_t *a = agents_get_or_add(c->f, w->node);
	if (!a) {
		free(devs);
		return -ENOMEM;
	}
	free(a->devices);
	a->devices = devs;
	a->n_devices = n;
	a->alive = true;
	/* what its last REGISTER said about programs (schema 009) */
	json_t *prog = w->program_json ? json_loads(w->program_json, 0, NULL) : NULL;
	if (!prog || program_parse_register(a, prog, detail, sizeof detail) < 0) {
		a->programs = false;
		a->port_lo = PROGRAM_DEFAULT_PORT_LO;
		a->port_hi = PROGRAM_DEFAULT_PORT_HI;
	}
	json_decref(prog);
	store_key_t k;
	if (c->f->opt.auth && store_key_for_node(c->f->st, w->node, &k) == 0) {
		a->key_id = k.id; /* its ranks may speak before it registers again */
		char root[4096];
		if (store_key_root(c->f->st, k.id, root, sizeof root) == 0 && root[0]) {
			free(a->ckpt_root);
			a->ckpt_root = strdup(root);
		}
	}
	a->last_seen_mono_us = clock_mono_us(); /* dead_after intervals from now to speak again */
	a->last_seen_wall_us = w->has_heartbeat ? w->last_heartbeat_us : clock_wall_us();
	return 0;
}

/* The stored spec of a loaded attempt, parsed once. Specs are validated at
 * submit; one that cannot be read is sent as {} and gets jobspec's
 * defaults. 0 or -ENOMEM. */
static int load_spec(attempt_t *at, const char *spec_json)
{
	at->spec_json = json_loads(spec_json ? spec_json : "", 0, NULL);
	if (at->spec_json && jobspec_from_json(at->spec_json, &at->spec, NULL) == 0)
		return 0;
	json_decref(at->spec_json);
	jobspec_free(&at->spec);
	at->spec_json = json_object();
	json_t *minimal = json_pack("{s:{s:s}}", "data", "train", "-");
	int r = minimal && at->spec_json ? jobspec_from_json(minimal, &at->spec, NULL) : -ENOMEM;
	json_decref(minimal);
	return r < 0 ? -ENOMEM : 0;
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
		if (!at || !at->ranks || load_spec(at, job.spec_json) < 0 ||
		    smap_put(&f->attempts, sr->job_id, at, NULL) < 0) {
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
		at->max_restarts = at->spec.restart.max_restarts;
		at->program = jobspec_is_program(&at->spec); /* its master_port is not known (0) */
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
	rr->device_kind = fabric_kind_parse(sr->device_kind);
	rr->device_index = sr->device_index;
	at->kind = rr->device_kind;
	agent_t *a = smap_get(&f->agents, sr->node);
	rr->agent = a && a->alive ? a : NULL;
	if (!rr->agent) {
		/* remember the node for the failure message: keep a dead agent entry */
		a = agents_get_or_add(f, sr->node);
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
		program_restore_port(f, at); /* a program attempt's MASTER_PORT, from its event */
		if (at->failed) {
			n_live++;
			continue;
		}
		for (int k = 0; k < at->world_size && !cause[0]; k++) {
			rank_rt_t *rr = &at->ranks[k];
			device_t *d = rr->agent && rr->agent->alive && rr->device_kind >= 0
			                  ? agents_device(rr->agent, rr->device_kind, rr->device_index)
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
