/*
 * test_fabric: the coordinator's scheduling and recovery decisions, driven
 * through the real fabric modules against a real SQLite file (the store in
 * a temporary folder) and a real ZeroMQ ROUTER on inproc://, without
 * starting a process: the tests play the agents and ranks with DEALER
 * sockets that carry their identities, and read what the fabric decided
 * from the store and from the messages it sent.
 *
 * Covered: the plain decisions (attempt_decide, attempt_backoff_us,
 * placement_decide); gang placement packing ranks onto as few nodes as
 * possible, all or nothing, priority then FIFO; a failed rank with a
 * retryable failure restarting the job (first at once, the next after the
 * backoff), a non-retryable one failing it, the failure code winning over
 * the exit status, restarts exhausted failing the job, and a surviving rank
 * parked and kept (SPAWN adopt + REJOIN) on the restart.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <zmq.h>

#include "agents.h"
#include "attempt.h"
#include "exitcode.h"
#include "fabric.h"
#include "fabric_int.h"
#include "gang.h"
#include "placement.h"
#include "store.h"
#include "wire.h"
#include "check.h"

static void *s_zctx;
static int s_n_env;

/* One coordinator under test: a store file, a ROUTER, a fabric. */
typedef struct {
	char dir[64];
	char endpoint[64];
	store_t *st;
	void *router;
	fabric_t *f;
} env_t;

static const fabric_options_t s_opt = {
	.heartbeat_ms = 1000,
	.dead_after = 30,
	.metrics_every = 1,
	.restart_backoff_ms = 200,
	.restart_backoff_max_ms = 400,
	.restart_grace_ms = 0, /* ranks not reported gone are stopped at once */
};

/* A store with workers `nodes` (name, number of cpu devices), loaded into a
 * new fabric. */
static void env_open_with(env_t *e, int n_nodes, const char *const *nodes, const int *n_cpus,
                          const fabric_options_t *opt)
{
	memset(e, 0, sizeof *e);
	snprintf(e->dir, sizeof e->dir, "/tmp/test_fabric.XXXXXX");
	if (!mkdtemp(e->dir)) {
		perror("mkdtemp");
		exit(2);
	}
	char path[128], err[256];
	snprintf(path, sizeof path, "%s/ringmaster.db", e->dir);
	e->st = store_open(path, STORE_OPEN_WRITER, err, sizeof err);
	if (!e->st) {
		fprintf(stderr, "store_open: %s\n", err);
		exit(2);
	}
	for (int i = 0; i < n_nodes; i++) {
		char devs[1024];
		size_t len = 0;
		len += (size_t)snprintf(devs + len, sizeof devs - len, "[");
		for (int d = 0; d < n_cpus[i]; d++)
			len += (size_t)snprintf(devs + len, sizeof devs - len, "%s{\"kind\":\"cpu\",\"index\":%d}",
			                        d ? "," : "", d);
		snprintf(devs + len, sizeof devs - len, "]");
		CHECK(store_worker_register(e->st, nodes[i], devs, 1) == 0, "register %s", nodes[i]);
	}
	snprintf(e->endpoint, sizeof e->endpoint, "inproc://fabric-%d", s_n_env++);
	e->router = zmq_socket(s_zctx, ZMQ_ROUTER);
	int zero = 0;
	zmq_setsockopt(e->router, ZMQ_LINGER, &zero, sizeof zero);
	if (!e->router || zmq_bind(e->router, e->endpoint) != 0) {
		fprintf(stderr, "router: %s\n", zmq_strerror(errno));
		exit(2);
	}
	e->f = fabric_new(e->router, e->st, opt);
	CHECK(e->f && fabric_load(e->f, err, sizeof err) == 0, "load: %s", err);
}

static void env_open(env_t *e, int n_nodes, const char *const *nodes, const int *n_cpus)
{
	env_open_with(e, n_nodes, nodes, n_cpus, &s_opt);
}

static void env_close(env_t *e)
{
	fabric_flush(e->f);
	fabric_free(e->f);
	zmq_close(e->router);
	store_close(e->st);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", e->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", e->dir);
}

/* A peer (agent or rank) connected with `ident`. */
static void *peer(env_t *e, const char *ident)
{
	void *s = zmq_socket(s_zctx, ZMQ_DEALER);
	int zero = 0;
	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
	zmq_setsockopt(s, ZMQ_ROUTING_ID, ident, strlen(ident));
	if (zmq_connect(s, e->endpoint) != 0) {
		fprintf(stderr, "connect: %s\n", zmq_strerror(errno));
		exit(2);
	}
	return s;
}

/* One broker loop iteration: what waits on the ROUTER, the timers, the commit. */
static void loop_once(env_t *e)
{
	zmq_pollitem_t it = {.socket = e->router, .events = ZMQ_POLLIN};
	zmq_poll(&it, 1, 20);
	fabric_handle_wire(e->f);
	fabric_tick(e->f);
	fabric_flush(e->f);
}

/* `peer` sends `type` with `payload` (taken), and the fabric handles it. */
static void say(env_t *e, void *s, wire_type_t type, json_t *payload)
{
	CHECK(wire_send(s, NULL, 0, type, payload) == 0, "send %s", wire_type_name(type));
	json_decref(payload);
	loop_once(e);
}

/* The next message of `type` to `s` within a second (others are skipped):
 * its payload (new reference) or NULL. */
static json_t *expect(void *s, wire_type_t type)
{
	for (int k = 0; k < 100; k++) {
		zmq_pollitem_t it = {.socket = s, .events = ZMQ_POLLIN};
		if (zmq_poll(&it, 1, 10) <= 0)
			continue;
		wire_type_t t;
		json_t *p = NULL;
		char err[256];
		if (wire_recv(s, 0, NULL, NULL, &t, &p, err, sizeof err) != 0)
			continue;
		if (t == type)
			return p;
		json_decref(p);
	}
	return NULL;
}

/* Insert a queued job with `spec` (JSON) and return its id in `id`. */
static void add_job(env_t *e, const char *id, int priority, int world_size, const char *spec)
{
	static int64_t s_created = 1000;
	store_job_t j = {.priority = priority, .world_size = world_size, .created_at_us = ++s_created};
	snprintf(j.id, sizeof j.id, "%s", id);
	j.name = (char *)id;
	j.spec_json = (char *)spec;
	CHECK(store_job_insert(e->st, &j) == 0, "insert %s", id);
}

static store_job_state_t job_state(env_t *e, const char *id, int *ret_attempt, char *reason, size_t rlen)
{
	store_job_t j;
	memset(&j, 0, sizeof j);
	if (store_job_get(e->st, id, &j) != 0)
		return STORE_JOB_N_STATES;
	store_job_state_t s = j.state;
	if (ret_attempt)
		*ret_attempt = j.attempt;
	if (reason)
		snprintf(reason, rlen, "%s", j.state_reason ? j.state_reason : "");
	store_job_clear(&j);
	return s;
}

/* The nodes of an attempt's ranks, in rank order ("n2 n2 n1"). */
typedef struct {
	char text[512];
	int n;
} nodes_t;

static int collect_node(const store_rank_t *r, void *userdata)
{
	nodes_t *n = userdata;
	size_t len = strlen(n->text);
	snprintf(n->text + len, sizeof n->text - len, "%s%s:%d", n->n++ ? " " : "", r->node, r->device_index);
	return 0;
}

static void rank_nodes(env_t *e, const char *id, int attempt, nodes_t *ret)
{
	memset(ret, 0, sizeof *ret);
	store_rank_list_attempt(e->st, id, attempt, collect_node, ret);
}

static json_t *exited(const char *job, int attempt, int rank, int code, int failure)
{
	json_t *p = json_pack("{s:s, s:i, s:i, s:i, s:i, s:s}", "job", job, "attempt", attempt, "rank", rank,
	                      "exit_code", code, "signal", 0, "error", "");
	if (failure >= 0)
		json_object_set_new(p, "failure", json_integer(failure));
	return p;
}

#define SPEC(ws, restarts)                                                                      \
	"{\"data\":{\"train\":\"t.bin\"},\"parallel\":{\"world_size\":" #ws "},\"restart\":{\"max_restarts\":" \
	#restarts "}}"

/* ---- plain decisions ---- */

static void test_decide(void)
{
	CHECK(attempt_decide(true, 0, 3) == ATTEMPT_RESTART, "first failure restarts");
	CHECK(attempt_decide(true, 2, 3) == ATTEMPT_RESTART, "third failure restarts");
	CHECK(attempt_decide(true, 3, 3) == ATTEMPT_FAIL_EXHAUSTED, "restarts exhausted");
	CHECK(attempt_decide(true, 0, 0) == ATTEMPT_FAIL_EXHAUSTED, "no restarts allowed");
	CHECK(attempt_decide(false, 0, 3) == ATTEMPT_FAIL_NOT_RETRYABLE, "not retryable");
	CHECK(attempt_backoff_us(&s_opt, 1) == 0, "the first restart at once");
	CHECK(attempt_backoff_us(&s_opt, 2) == 200000, "then the backoff");
	CHECK(attempt_backoff_us(&s_opt, 3) == 400000, "doubling");
	CHECK(attempt_backoff_us(&s_opt, 9) == 400000, "up to the maximum");
	CHECK(attempt_not_retryable(RM_FAILURE_SPEC) && !attempt_not_retryable(RM_FAILURE_COMM), "kinds");
	json_t *p = json_pack("{s:i}", "failure", (int)RM_FAILURE_COMM);
	CHECK(attempt_payload_failure(p, RM_EXIT_DATA, 0) == RM_FAILURE_COMM, "the code wins over the status");
	json_object_set_new(p, "failure", json_integer(999));
	CHECK(attempt_payload_failure(p, RM_EXIT_DATA, 0) == RM_FAILURE_DATA, "an unknown code: the status");
	json_object_del(p, "failure");
	CHECK(attempt_payload_failure(p, -1, 9) == RM_FAILURE_SIGNAL, "no code: the status");
	json_decref(p);
}

static void test_placement_decide(void)
{
	device_t d1[4] = {{0, 0, NULL}, {0, 1, NULL}, {0, 2, NULL}, {0, 3, NULL}};
	device_t d2[3] = {{0, 0, NULL}, {0, 1, NULL}, {0, 2, NULL}};
	agent_t a1 = {.node = "n1", .devices = d1, .n_devices = 4, .alive = true};
	agent_t a2 = {.node = "n2", .devices = d2, .n_devices = 3, .alive = true};
	attempt_t other;
	memset(&other, 0, sizeof other);
	d1[0].owner = &other; /* n1 has 3 free: 1, 2, 3 */
	agent_t *alive[2] = {&a1, &a2};
	int take[2] = {2, 3};
	placement_t pl;
	CHECK(placement_decide(alive, 2, take, 0, 5, NULL, &pl) == 0, "decide");
	/* the node taking most first, each node's free devices in order */
	CHECK(pl.n_nodes == 2 && pl.ranks[0].agent == &a2 && pl.ranks[2].agent == &a2 && pl.ranks[3].agent == &a1 &&
	              pl.ranks[3].device_index == 1 && pl.ranks[4].device_index == 2,
	      "node by node, most first");
	CHECK(d1[1].owner == NULL, "deciding takes nothing");
	placement_clear(&pl);
	int too_many[2] = {4, 0};
	CHECK(placement_decide(alive, 2, too_many, 0, 4, NULL, &pl) == -ENOSPC, "n1 has 3 free, not 4");

	/* a restart: rank 0 parked on its device is kept, rank 1 parked
	 * elsewhere is stopped, rank 2 gone is neither */
	rank_rt_t old[3] = {
		{.agent = &a2, .device_kind = 0, .device_index = 0, .rejoin = true, .parked = true},
		{.agent = &a2, .device_kind = 0, .device_index = 1, .rejoin = true, .parked = true},
		{.agent = &a1, .device_kind = 0, .device_index = 1, .exited = true},
	};
	attempt_t prev;
	memset(&prev, 0, sizeof prev);
	prev.world_size = 3;
	prev.ranks = old;
	int take2[2] = {0, 3};
	CHECK(placement_decide(alive, 2, take2, 0, 3, &prev, &pl) == 0, "restart decide");
	CHECK(pl.n_prev == 3 && pl.keep[0] && !pl.stop[0] && pl.keep[1] && !pl.keep[2] && !pl.stop[2] &&
	              pl.n_kept == 2,
	      "kept on n2: %d %d %d", pl.keep[0], pl.keep[1], pl.keep[2]);
	placement_clear(&pl);
	d2[1].owner = &other; /* n2's device 1 taken: rank 1 goes to device 2 */
	CHECK(placement_decide(alive, 2, take2, 0, 3, &prev, &pl) == -ENOSPC, "only 2 free on n2");
	int take3[2] = {1, 2};
	CHECK(placement_decide(alive, 2, take3, 0, 3, &prev, &pl) == 0, "restart elsewhere");
	CHECK(pl.keep[0] && pl.stop[1] && !pl.keep[1] && pl.n_kept == 1, "rank 1 not on its device: stopped");
	placement_clear(&pl);
}

/* ---- scheduling against the store ---- */

static void test_gang_packing(void)
{
	const char *nodes[] = {"n1", "n2", "n3"};
	int cpus[] = {2, 4, 1};
	env_t e;
	env_open(&e, 3, nodes, cpus);
	add_job(&e, "j-wide", 0, 8, SPEC(8, 3));
	add_job(&e, "j-four", 0, 4, SPEC(4, 3));
	add_job(&e, "j-three", 0, 3, SPEC(3, 3));
	loop_once(&e);
	char reason[512];
	int att = -1;
	/* 8 ranks, 7 devices: all or nothing, and it does not hold the others back */
	CHECK(job_state(&e, "j-wide", &att, reason, sizeof reason) == STORE_JOB_QUEUED && att == 0 &&
	              strstr(reason, "needs 8 cpu device(s)") && strstr(reason, "more than the alive workers have") && !strstr(reason, "7"),
	      "j-wide waits: %s", reason);
	nodes_t n;
	rank_nodes(&e, "j-wide", 1, &n);
	CHECK(n.n == 0, "no rank of j-wide placed: %s", n.text);
	/* 4 ranks: one node (n2), not 2 + 1 + 1 */
	CHECK(job_state(&e, "j-four", &att, reason, sizeof reason) == STORE_JOB_SCHEDULED && att == 1,
	      "j-four scheduled: %s", reason);
	rank_nodes(&e, "j-four", 1, &n);
	CHECK(strcmp(n.text, "n2:0 n2:1 n2:2 n2:3") == 0, "j-four on n2: %s", n.text);
	/* 3 ranks on what is left (n1: 2, n3: 1): the larger first */
	CHECK(job_state(&e, "j-three", &att, reason, sizeof reason) == STORE_JOB_SCHEDULED, "j-three: %s", reason);
	rank_nodes(&e, "j-three", 1, &n);
	CHECK(strcmp(n.text, "n1:0 n1:1 n3:0") == 0, "j-three on n1 then n3: %s", n.text);
	env_close(&e);
}

static void test_priority_then_fifo(void)
{
	const char *nodes[] = {"n1"};
	int cpus[] = {2};
	env_t e;
	env_open(&e, 1, nodes, cpus);
	add_job(&e, "j-low1", 0, 2, SPEC(2, 3));
	add_job(&e, "j-high", 5, 2, SPEC(2, 3));
	add_job(&e, "j-low2", 0, 2, SPEC(2, 3));
	loop_once(&e);
	CHECK(job_state(&e, "j-high", NULL, NULL, 0) == STORE_JOB_SCHEDULED, "the higher priority first");
	CHECK(job_state(&e, "j-low1", NULL, NULL, 0) == STORE_JOB_QUEUED, "j-low1 waits");
	CHECK(job_state(&e, "j-low2", NULL, NULL, 0) == STORE_JOB_QUEUED, "j-low2 waits");
	/* j-high ends (cancelled): its devices go to the first submitted */
	CHECK(store_job_set_state(e.st, "j-high", STORE_JOB_CANCELLED, "test", 2) == 0, "cancel");
	fabric_job_cancelled(e.f, "j-high", "test");
	loop_once(&e);
	CHECK(job_state(&e, "j-low1", NULL, NULL, 0) == STORE_JOB_SCHEDULED, "then FIFO: j-low1");
	CHECK(job_state(&e, "j-low2", NULL, NULL, 0) == STORE_JOB_QUEUED, "j-low2 still waits");
	env_close(&e);
}

/* A job that does not fit now but could once devices are freed holds back
 * the later (narrower) jobs of its kind. */
static void test_wide_job_not_starved(void)
{
	const char *nodes[] = {"n1"};
	int cpus[] = {2};
	env_t e;
	env_open(&e, 1, nodes, cpus);
	add_job(&e, "j-one", 0, 1, SPEC(1, 3));
	add_job(&e, "j-two", 0, 2, SPEC(2, 3));
	add_job(&e, "j-narrow", 0, 1, SPEC(1, 3));
	loop_once(&e);
	char reason[512];
	CHECK(job_state(&e, "j-one", NULL, NULL, 0) == STORE_JOB_SCHEDULED, "j-one runs");
	CHECK(job_state(&e, "j-two", NULL, reason, sizeof reason) == STORE_JOB_QUEUED &&
	              strstr(reason, "waiting for 2 free cpu device(s)"),
	      "j-two waits: %s", reason);
	CHECK(job_state(&e, "j-narrow", NULL, NULL, 0) == STORE_JOB_QUEUED, "j-narrow is held back behind j-two");
	env_close(&e);
}

/* ---- recovery ---- */

static void test_retry_then_not_retryable(void)
{
	const char *nodes[] = {"n1"};
	int cpus[] = {2};
	env_t e;
	env_open(&e, 1, nodes, cpus);
	void *agent = peer(&e, "agent/n1");
	add_job(&e, "j-r", 0, 2, SPEC(2, 3));
	loop_once(&e);
	json_t *sp = expect(agent, WIRE_SPAWN);
	CHECK(sp && json_integer_value(json_object_get(sp, "attempt")) == 1, "SPAWN of attempt 1");
	json_decref(sp);

	/* a collective failed (retryable): recovering, then attempt 2 at once */
	say(&e, agent, WIRE_RANK_EXITED, exited("j-r", 1, 1, RM_EXIT_COMM, RM_FAILURE_COMM));
	char reason[512];
	int att = 0;
	store_job_state_t s = job_state(&e, "j-r", &att, reason, sizeof reason);
	CHECK((s == STORE_JOB_RECOVERING || s == STORE_JOB_SCHEDULED), "after a comm failure: %s",
	      store_job_state_name(s));
	loop_once(&e);
	s = job_state(&e, "j-r", &att, reason, sizeof reason);
	CHECK(s == STORE_JOB_SCHEDULED && att == 2 && strstr(reason, "restart 1 of 3"), "restarted: %s %d %s",
	      store_job_state_name(s), att, reason);

	/* again: the second restart waits for the backoff (200 ms) */
	say(&e, agent, WIRE_RANK_EXITED, exited("j-r", 2, 0, -1, RM_FAILURE_SIGNAL));
	loop_once(&e);
	s = job_state(&e, "j-r", &att, NULL, 0);
	CHECK(s == STORE_JOB_RECOVERING && att == 2, "waits out the backoff: %s %d", store_job_state_name(s), att);
	struct timespec ts = {0, 250 * 1000000L};
	nanosleep(&ts, NULL);
	loop_once(&e);
	s = job_state(&e, "j-r", &att, reason, sizeof reason);
	CHECK(s == STORE_JOB_SCHEDULED && att == 3 && strstr(reason, "restart 2 of 3"), "restart 2: %s %d %s",
	      store_job_state_name(s), att, reason);

	/* a spec error is not retried, restarts left or not */
	say(&e, agent, WIRE_RANK_EXITED, exited("j-r", 3, 0, RM_EXIT_SPEC, RM_FAILURE_SPEC));
	s = job_state(&e, "j-r", &att, reason, sizeof reason);
	CHECK(s == STORE_JOB_FAILED && strstr(reason, "a job spec error: not retried"), "failed: %s %s",
	      store_job_state_name(s), reason);
	zmq_close(agent);
	env_close(&e);
}

static void test_failure_code_and_old_payloads(void)
{
	const char *nodes[] = {"n1"};
	int cpus[] = {2};
	env_t e;
	env_open(&e, 1, nodes, cpus);
	void *agent = peer(&e, "agent/n1");
	add_job(&e, "j-old", 0, 1, SPEC(1, 3));
	add_job(&e, "j-code", 0, 1, SPEC(1, 3));
	loop_once(&e);
	/* an old agent: no failure code, the exit status says "data" */
	say(&e, agent, WIRE_RANK_EXITED, exited("j-old", 1, 0, RM_EXIT_DATA, -1));
	char reason[512];
	store_job_state_t s = job_state(&e, "j-old", NULL, reason, sizeof reason);
	CHECK(s == STORE_JOB_FAILED && strstr(reason, "a data error: not retried"), "old payload: %s %s",
	      store_job_state_name(s), reason);
	/* the code decides, not the status */
	say(&e, agent, WIRE_RANK_EXITED, exited("j-code", 1, 0, RM_EXIT_DATA, RM_FAILURE_COMM));
	s = job_state(&e, "j-code", NULL, reason, sizeof reason);
	CHECK(s == STORE_JOB_RECOVERING || s == STORE_JOB_SCHEDULED, "the code says comm: %s %s",
	      store_job_state_name(s), reason);
	zmq_close(agent);
	env_close(&e);
}

static void test_restarts_exhausted(void)
{
	const char *nodes[] = {"n1"};
	int cpus[] = {1};
	env_t e;
	env_open(&e, 1, nodes, cpus);
	void *agent = peer(&e, "agent/n1");
	add_job(&e, "j-x", 0, 1, SPEC(1, 0));
	loop_once(&e);
	say(&e, agent, WIRE_RANK_EXITED, exited("j-x", 1, 0, RM_EXIT_COMM, RM_FAILURE_COMM));
	char reason[512];
	store_job_state_t s = job_state(&e, "j-x", NULL, reason, sizeof reason);
	CHECK(s == STORE_JOB_FAILED && strstr(reason, "restart.max_restarts (0) reached"), "exhausted: %s %s",
	      store_job_state_name(s), reason);
	zmq_close(agent);
	env_close(&e);
}

static void test_survivor_kept(void)
{
	const char *nodes[] = {"n1"};
	int cpus[] = {2};
	env_t e;
	fabric_options_t opt = s_opt;
	opt.restart_grace_ms = 10000; /* time for the survivor to park */
	env_open_with(&e, 1, nodes, cpus, &opt);
	void *agent = peer(&e, "agent/n1");
	add_job(&e, "j-k", 0, 2, SPEC(2, 3));
	loop_once(&e);
	void *r0 = peer(&e, "rank/j-k/1/0");
	say(&e, r0, WIRE_JOIN, json_pack("{s:s, s:i, s:i}", "job", "j-k", "attempt", 1, "rank", 0));
	json_t *joined = expect(r0, WIRE_JOINED);
	CHECK(joined && json_integer_value(json_object_get(json_object_get(json_object_get(joined, "spec"), "restart"),
	                                                   "max_restarts")) == 3,
	      "JOINED carries the stored spec");
	json_decref(joined);
	/* rank 1 dies: rank 0 (connected, alive) is asked to park */
	say(&e, agent, WIRE_RANK_EXITED, exited("j-k", 1, 1, RM_EXIT_COMM, RM_FAILURE_COMM));
	json_t *ab = expect(r0, WIRE_ABORT);
	CHECK(ab && json_is_true(json_object_get(ab, "rejoin")), "ABORT rejoin to the survivor");
	json_decref(ab);
	CHECK(job_state(&e, "j-k", NULL, NULL, 0) == STORE_JOB_RECOVERING, "recovering until rank 0 parks");
	say(&e, r0, WIRE_PARKED, json_pack("{s:i}", "step", 5));
	loop_once(&e);
	int att = 0;
	char reason[512];
	store_job_state_t s = job_state(&e, "j-k", &att, reason, sizeof reason);
	CHECK(s == STORE_JOB_SCHEDULED && att == 2 && strstr(reason, "1 rank(s) rejoin in their process"),
	      "restarted keeping rank 0: %s %d %s", store_job_state_name(s), att, reason);
	/* the agent hands rank 0's process over (adopt), a new process for rank 1 */
	int adopted = -1, fresh = -1;
	for (int k = 0; k < 4 && (adopted < 0 || fresh < 0); k++) {
		json_t *sp = expect(agent, WIRE_SPAWN);
		if (!sp)
			break;
		if (json_integer_value(json_object_get(sp, "attempt")) == 2) {
			int rank = (int)json_integer_value(json_object_get(sp, "rank"));
			if (json_object_get(sp, "adopt"))
				adopted = rank;
			else
				fresh = rank;
		}
		json_decref(sp);
	}
	CHECK(adopted == 0 && fresh == 1, "SPAWN adopt for rank 0 (%d), new for rank 1 (%d)", adopted, fresh);
	json_t *rj = expect(r0, WIRE_REJOIN);
	CHECK(rj && json_integer_value(json_object_get(rj, "attempt")) == 2, "REJOIN on the old identity");
	json_decref(rj);
	zmq_close(r0);
	zmq_close(agent);
	env_close(&e);
}

int main(void)
{
	s_zctx = zmq_ctx_new();
	test_decide();
	test_placement_decide();
	test_gang_packing();
	test_priority_then_fifo();
	test_wide_job_not_starved();
	test_retry_then_not_retryable();
	test_failure_code_and_old_payloads();
	test_restarts_exhausted();
	test_survivor_kept();
	zmq_ctx_term(s_zctx);
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	else
		printf("all checks passed\n");
	return failures != 0;
}
