/*
 * agents: the node agents (see agents.h).
 */
#include "agents.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "clock.h"
#include "exitcode.h"
#include "log.h"
#include "attempt.h"
#include "feed.h"
#include "program.h"
#include "store_keys.h"

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
int agents_parse_devices(const json_t *arr, device_t **ret, int *ret_n, char *detail, size_t dlen)
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
		int kind = json_is_string(k) ? fabric_kind_parse(json_string_value(k)) : -1;
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
			snprintf(detail, dlen, "devices: %s %d is listed twice", fabric_kind_name(d[i].kind), d[i].index);
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
		if (json_array_append_new(arr, json_pack("{s:s, s:i}", "kind", fabric_kind_name(d[i].kind), "index",
		                                         d[i].index)) < 0) {
			json_decref(arr);
			arr = NULL;
		}
	char *s = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
	json_decref(arr);
	return s;
}

agent_t *agents_get_or_add(fabric_t *f, const char *node)
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

void agents_touch(agent_t *a)
{
	a->last_seen_mono_us = clock_mono_us();
	a->last_seen_wall_us = clock_wall_us();
	a->forgiven_us = 0;
	a->hb_dirty = true;
}

device_t *agents_device(agent_t *a, int kind, int index)
{
	for (int i = 0; i < a->n_devices; i++)
		if (a->devices[i].kind == kind && a->devices[i].index == index)
			return &a->devices[i];
	return NULL;
}

/*
 * --broker-auth on: bind `node` to the sender's key at its REGISTER. A key
 * speaks for one node (set at enrollment, or at its first REGISTER) and a
 * node for one live key. true when the sender may speak for `node`; false
 * when it was refused (answered 403 and logged).
 */
static bool bind_key(fabric_t *f, const char *ident, const char *node)
{
	char detail[512];
	store_key_t k, other;
	int r = store_key_get(f->st, f->peer.key_id, &k);
	if (r == 0 && k.revoked_at_us)
		r = -EACCES;
	if (r == 0 && k.node[0] && strcmp(k.node, node) != 0) {
		snprintf(detail, sizeof detail, "key %lld is enrolled for node %s, not %.100s", (long long)k.id, k.node, node);
		r = -EPERM;
	} else if (r == 0 && !k.node[0]) {
		if (store_key_for_node(f->st, node, &other) == 0 && other.id != k.id) {
			snprintf(detail, sizeof detail, "node %.100s is enrolled with another key (id %lld)", node,
			         (long long)other.id);
			r = -EPERM;
		} else if (fabric_tx(f)) {
			fabric_wrote(f, store_key_bind_node(f->st, k.id, node), "key bound to node");
			log_info("agent %s: key %lld bound to this node", node, (long long)k.id);
		}
	} else if (r < 0) {
		snprintf(detail, sizeof detail, "key %lld is not enrolled (revoked?)", (long long)f->peer.key_id);
	}
	if (r == 0)
		return true;
	char who[32];
	snprintf(who, sizeof who, "key:%lld", (long long)f->peer.key_id);
	curve_log_refusal(who, "refused REGISTER of agent/%.100s: %s", node, detail);
	fabric_send_error(f, ident, strlen(ident), 403, detail);
	return false;
}

/* After agent `a` (re)registered with `ranks` running: re-take the devices
 * of live attempts placed on it, KILL the ranks it runs that are not live,
 * SPAWN again those placed on it that it does not run yet, and fail the
 * attempts whose joined ranks it lost. */
static void register_reconcile(fabric_t *f, agent_t *a, const char *node, json_t *ranks)
{
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
			device_t *d = agents_device(a, rr->device_kind, rr->device_index);
			if (d)
				d->owner = lat;
			else if (!cause[0] && !lat->failed)
				snprintf(cause, sizeof cause, "rank %d lost: node %s registered again without %s %d", r,
				         node, fabric_kind_name(rr->device_kind), rr->device_index);
		}
		if (cause[0])
			attempt_failed(f, lat, cause, NULL, 0);
	}

	/* Reconcile the ranks it runs: ranks of attempts that are not live here get KILL. */
	size_t i;
	json_t *e;
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
		fabric_send_to(f, a->ident, WIRE_KILL,
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
			attempt_check_drained(f, lat, clock_mono_us());
			continue;
		}
		for (int r = 0; r < lat->world_size; r++) {
			rank_rt_t *rr = &lat->ranks[r];
			if (rr->agent != a || rr->reported || rr->done || rr->exited)
				continue;
			if (!rr->joined && lat->program && lat->master_port == 0) {
				/* its MASTER_PORT died with the coordinator: the gang restarts */
				if (!cause[0])
					snprintf(cause, sizeof cause, "rank %d of the program was not started when the "
					         "coordinator restarted", r);
			} else if (!rr->joined) {
				fabric_send_to(f, a->ident, WIRE_SPAWN, attempt_spawn_payload(lat, r));
			} else if (!cause[0]) {
				snprintf(cause, sizeof cause, "rank %d lost: agent %s registered again without it", r, node);
			}
		}
		if (cause[0])
			attempt_failed(f, lat, cause, NULL, 0);
	}
}

static void on_register(fabric_t *f, const char *ident, const char *node, json_t *p)
{
	char detail[512];
	const char *pnode = json_string_value(json_object_get(p, "node"));
	if (strcmp(pnode, node) != 0) {
		snprintf(detail, sizeof detail, "REGISTER node \"%.100s\" does not match the identity agent/%.100s",
		         pnode, node);
		fabric_send_error(f, ident, strlen(ident), 400, detail);
		return;
	}
	if (f->opt.auth && !bind_key(f, ident, node))
		return;
	json_t *root = json_object_get(p, "checkpoint_root");
	if (root && (json_string_length(root) == 0 || json_string_length(root) > 4000 ||
	             json_string_value(root)[0] != '/' || strlen(json_string_value(root)) != json_string_length(root))) {
		fabric_send_error(f, ident, strlen(ident), 400,
		                  "REGISTER: checkpoint_root must be an absolute path of at most 4000 bytes, without NUL");
		return;
	}
	device_t *devs = NULL;
	int n_devs = 0;
	if (agents_parse_devices(json_object_get(p, "devices"), &devs, &n_devs, detail, sizeof detail) < 0) {
		fabric_send_error(f, ident, strlen(ident), 400, detail);
		return;
	}
	agent_t probe = {0};
	if (program_parse_register(&probe, p, detail, sizeof detail) < 0) {
		free(devs);
		fabric_send_error(f, ident, strlen(ident), 400, detail);
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
			fabric_send_error(f, ident, strlen(ident), 400, detail);
			return;
		}
	}
	char *dev_json = devices_json(devs, n_devs);
	agent_t *a = dev_json ? agents_get_or_add(f, node) : NULL;
	if (!a) {
		free(dev_json);
		free(devs);
		fabric_send_error(f, ident, strlen(ident), 503, "the coordinator is out of memory");
		return;
	}
	bool was_alive = a->alive;
	a->key_id = f->opt.auth ? f->peer.key_id : 0;
	free(a->ckpt_root);
	a->ckpt_root = root ? strdup(json_string_value(root)) : NULL;
	if (f->opt.auth && fabric_tx(f)) /* kept for a restart of the coordinator */
		fabric_wrote(f, store_key_set_root(f->st, a->key_id, a->ckpt_root), "key checkpoint root");
	free(a->devices);
	a->devices = devs;
	a->n_devices = n_devs;
	a->alive = true;
	json_t *mem = json_object_get(p, "memory_bytes"); /* optional: the memory fit (issue 22) */
	a->memory_bytes = json_is_integer(mem) && json_integer_value(mem) > 0 ? json_integer_value(mem) : 0;
	a->programs = probe.programs;
	a->port_lo = probe.port_lo;
	a->port_hi = probe.port_hi;
	memcpy(a->advertise, probe.advertise, sizeof a->advertise);
	agents_touch(a);
	a->hb_dirty = false; /* written by the register itself */
	if (fabric_tx(f)) {
		fabric_wrote(f, store_worker_register(f->st, node, dev_json, a->last_seen_wall_us), "worker register");
		char *prog = program_register_json(a); /* kept for a restart of the coordinator */
		fabric_wrote(f, prog ? store_worker_set_programs(f->st, node, prog) : -ENOMEM, "worker programs");
		free(prog);
		feed_worker_changed(node); /* GET /v1/stream's `worker`, once committed */
	}
	free(dev_json);
	log_info("agent %s registered (%s): %d device(s), %zu running rank(s)", node,
	         was_alive ? "again" : "alive", n_devs, json_array_size(ranks));
	fabric_send_to(f, ident, WIRE_REGISTERED,
	               json_pack("{s:i, s:i}", "heartbeat_ms", f->opt.heartbeat_ms, "dead_after", f->opt.dead_after));

	register_reconcile(f, a, node, ranks);
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

/*
 * Whether rank `rank` of `job`'s attempt `att` was placed on agent `a`
 * (the live attempt's placement, else the ranks table). A report about
 * another agent's rank or an unknown one is refused: ERROR 403, logged,
 * nothing changed.
 */
bool agents_owns_rank(fabric_t *f, agent_t *a, const char *job, int att, int rank, const char *what)
{
	attempt_t *at = smap_get(&f->attempts, job);
	bool own;
	const char *placed = "nowhere";
	char node[WIRE_MAX_IDENTITY_BYTES + 1];
	if (at && at->attempt == att && rank < at->world_size) {
		own = at->ranks[rank].agent == a;
		if (at->ranks[rank].agent)
			placed = at->ranks[rank].agent->node;
	} else if (store_key_rank_node(f->st, job, att, rank, node, sizeof node) == 0) {
		own = strcmp(node, a->node) == 0;
		placed = node;
	} else {
		own = false;
	}
	if (own)
		return true;
	char who[300], detail[400];
	snprintf(who, sizeof who, "%s:%s", a->ident, what);
	snprintf(detail, sizeof detail, "%s: rank %d of job %.40s attempt %d is not placed on node %.64s", what, rank,
	         job, att, a->node);
	curve_log_refusal(who, "refused %s from agent %s about rank %d of job %.40s attempt %d (placed on %.64s)", what,
	                  a->node, rank, job, att, placed);
	fabric_send_error(f, a->ident, strlen(a->ident), 403, detail);
	return false;
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
		fabric_send_error(f, a->ident, strlen(a->ident), 400, "RANK_EXITED: attempt, rank, exit_code or signal out of range");
		return;
	}
	attempt_t *at = smap_get(&f->attempts, job);
	if (!agents_owns_rank(f, a, job, (int)att, (int)rank, "RANK_EXITED"))
		return;
	if (fabric_tx(f))
		fabric_wrote(f, store_rank_set_state(f->st, job, (int)att, (int)rank, "exited", true, (int)code, (int)sig,
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
		attempt_check_drained(f, at, clock_mono_us()); /* one of a failed attempt's ranks is gone */
		return;
	}
	if (rr->done)
		return; /* its work was reported complete */
	/* the agent's clock at waitpid: how long the news took to get here */
	json_t *exited_at = json_object_get(p, "exited_at_us");
	int64_t detection_us = json_is_integer(exited_at) ? clock_wall_us() - (int64_t)json_integer_value(exited_at) : 0;
	if (at->program) {
		program_rank_exited(f, at, (int)rank, (int)code, (int)sig, error, detection_us);
		return;
	}
	char cause[REASON_BYTES];
	if (rr->failed_reason) {
		/* the rank said why in its FAILED; its exit status says whether to retry */
		snprintf(cause, sizeof cause, "rank %lld failed: %s", (long long)rank, rr->failed_reason);
		attempt_failed(f, at, cause, attempt_not_retryable(attempt_payload_failure(p, (int)code, (int)sig)), detection_us);
		return;
	}
	if (code == 0 && sig == 0) {
		rr->clean_exit_deadline_us = clock_mono_us() + CLEAN_EXIT_GRACE_US;
		return;
	}
	describe_exit(cause, sizeof cause, (int)rank, (int)code, (int)sig, error);
	attempt_failed(f, at, cause, attempt_not_retryable(attempt_payload_failure(p, (int)code, (int)sig)), detection_us);
}

/* LOGS: a rank's output lines, stored in this loop's transaction
 * (coordinatord/store_logs.c). Lines of an unknown job are dropped. */
static void on_logs(fabric_t *f, const char *ident, json_t *p)
{
	const char *job = json_string_value(json_object_get(p, "job"));
	json_int_t attempt = json_integer_value(json_object_get(p, "attempt"));
	json_int_t rank = json_integer_value(json_object_get(p, "rank"));
	if (attempt < 0 || attempt > INT32_MAX || rank < 0 || rank > INT32_MAX) {
		fabric_send_error(f, ident, strlen(ident), 400, "LOGS: attempt and rank must be integers >= 0");
		return;
	}
	agent_t *a = smap_get(&f->agents, ident + 6);
	if (!a || !agents_owns_rank(f, a, job, (int)attempt, (int)rank, "LOGS"))
		return;
	if (!fabric_tx(f))
		return;
	int r = store_log_append(f->st, job, (int)attempt, (int)rank, json_object_get(p, "lines"),
	                         json_integer_value(json_object_get(p, "dropped")), STORE_LOG_MAX_LINES, NULL, NULL);
	if (r == -ENOENT)
		log_warn("LOGS from %.100s for unknown job %.64s: dropped", ident, job);
	else
		fabric_wrote(f, r, "job logs");
}

void agents_on_message(fabric_t *f, const char *ident, const char *node, wire_type_t type, json_t *p)
{
	if (type == WIRE_REGISTER) {
		on_register(f, ident, node, p);
		return;
	}
	if (type != WIRE_HEARTBEAT && type != WIRE_RANK_EXITED && type != WIRE_LOGS && type != WIRE_RANK_STARTED &&
	    type != WIRE_PROGRAM_METRICS) {
		char detail[200];
		snprintf(detail, sizeof detail,
		         "an agent sends REGISTER, HEARTBEAT, RANK_EXITED, LOGS, RANK_STARTED or PROGRAM_METRICS, not %s",
		         wire_type_name(type));
		fabric_send_error(f, ident, strlen(ident), 400, detail);
		return;
	}
	agent_t *a = smap_get(&f->agents, node);
	if (!a || !a->alive) {
		char detail[400];
		snprintf(detail, sizeof detail, "agent %.200s is %s: send REGISTER", node,
		         a ? "declared dead" : "not registered");
		fabric_send_error(f, ident, strlen(ident), 404, detail);
		return;
	}
	if (f->opt.auth && a->key_id != f->peer.key_id) {
		/* another key speaks as this agent: its connection took the
		 * identity over (ROUTER handover); the real agent hears no more
		 * heartbeats and reconnects with its own key */
		char who[300];
		snprintf(who, sizeof who, "%s:%lld", ident, (long long)f->peer.key_id);
		curve_log_refusal(who, "refused %s on identity %s from key %lld: the node is bound to key %lld "
		                  "(an identity takeover?)", wire_type_name(type), ident, (long long)f->peer.key_id,
		                  (long long)a->key_id);
		fabric_send_error(f, ident, strlen(ident), 403, "this identity belongs to another key");
		return;
	}
	agents_touch(a);
	if (type == WIRE_RANK_EXITED)
		on_rank_exited(f, a, p);
	else if (type == WIRE_LOGS)
		on_logs(f, ident, p);
	else if (type == WIRE_RANK_STARTED)
		program_on_rank_started(f, a, p);
	else if (type == WIRE_PROGRAM_METRICS)
		program_on_metrics(f, a, p);
}

/* Declare agent `a` dead for `cause`: its row, its attempts' failure
 * (detection `detection_us` ago), its devices freed. */
static void agent_dead(fabric_t *f, agent_t *a, const char *cause, int64_t now, int64_t detection_us)
{
	a->alive = false;
	if (fabric_tx(f)) {
		if (a->hb_dirty)
			fabric_wrote(f, store_worker_heartbeat(f->st, a->node, a->last_seen_wall_us), "worker heartbeat");
		fabric_wrote(f, store_worker_set_state(f->st, a->node, "dead"), "worker dead");
		feed_worker_changed(a->node);
	}
	a->hb_dirty = false;
	size_t jpos = 0;
	smap_slot_t *js;
	while ((js = smap_next(&f->attempts, &jpos))) {
		attempt_t *at = js->value;
		if (at->failed) {
			attempt_check_drained(f, at, now); /* its ranks there are gone */
			continue;
		}
		for (int r = 0; r < at->world_size; r++) {
			if (at->ranks[r].agent == a && !at->ranks[r].done) {
				attempt_failed(f, at, cause, NULL, detection_us);
				break;
			}
		}
	}
	for (int i = 0; i < a->n_devices; i++)
		a->devices[i].owner = NULL;
	f->sched_dirty = true;
}

void agents_expire(fabric_t *f, int64_t now)
{
	size_t pos = 0;
	smap_slot_t *s;
	while ((s = smap_next(&f->agents, &pos))) {
		agent_t *a = s->value;
		if (!a->alive || now - a->last_seen_mono_us <= f->dead_after_us)
			continue;
		char cause[REASON_BYTES];
		snprintf(cause, sizeof cause, "node %s lost: no heartbeat for %.1f s", a->node,
		         (double)f->dead_after_us / 1e6);
		log_warn("agent %s declared dead: no message for %.1f s", a->node,
		         (double)(now - a->last_seen_mono_us) / 1e6);
		/* detection: the time since its last message */
		agent_dead(f, a, cause, now, now - a->last_seen_mono_us);
	}
}

void agents_deaf(fabric_t *f, int64_t deaf_us, int64_t cap_us, int64_t now)
{
	size_t pos = 0;
	smap_slot_t *s;
	while ((s = smap_next(&f->agents, &pos))) {
		agent_t *a = s->value;
		int64_t grace = deaf_us;
		if (grace > cap_us - a->forgiven_us)
			grace = cap_us - a->forgiven_us;
		int64_t add = now + grace - a->last_seen_mono_us;
		if (!a->alive || add <= 0)
			continue;
		a->last_seen_mono_us += add; /* may lie ahead of now: the grace */
		a->forgiven_us += add;
	}
}

void fabric_key_revoked(fabric_t *f, int64_t key_id)
{
	size_t pos = 0;
	smap_slot_t *s;
	int64_t now = clock_mono_us();
	while ((s = smap_next(&f->agents, &pos))) {
		agent_t *a = s->value;
		if (a->key_id != key_id)
			continue;
		a->key_id = 0; /* its connection's messages match no key now */
		if (!a->alive)
			continue;
		char cause[REASON_BYTES];
		snprintf(cause, sizeof cause, "node %s lost: its key %lld was revoked", a->node, (long long)key_id);
		log_warn("agent %s dropped: its key %lld was revoked", a->node, (long long)key_id);
		agent_dead(f, a, cause, now, 0);
	}
	fabric_flush(f);
}

void agents_heartbeat(fabric_t *f)
{
	size_t pos = 0;
	smap_slot_t *s;
	bool any_dirty = false;
	while ((s = smap_next(&f->agents, &pos))) {
		agent_t *a = s->value;
		if (!a->alive)
			continue;
		fabric_send_to(f, a->ident, WIRE_HEARTBEAT, json_pack("{s:s}", "node", a->node));
		any_dirty |= a->hb_dirty;
	}
	if (!any_dirty || !fabric_tx(f))
		return;
	pos = 0;
	while ((s = smap_next(&f->agents, &pos))) {
		agent_t *a = s->value;
		if (!a->hb_dirty)
			continue;
		fabric_wrote(f, store_worker_heartbeat(f->st, a->node, a->last_seen_wall_us), "worker heartbeat");
		a->hb_dirty = false;
	}
}
