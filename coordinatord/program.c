/*
 * program: program jobs on the broker loop (see program.h; the wire shapes
 * are in api/wire.h, the job spec's "program" in api/jobspec.h).
 */
#include "program.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents.h"
#include "attempt.h"
#include "clock.h"
#include "log.h"

int program_parse_register(agent_t *a, const json_t *p, char *detail, size_t dlen)
{
	const json_t *progs = json_object_get(p, "programs"), *ports = json_object_get(p, "program_ports");
	const json_t *adv = json_object_get(p, "advertise");
	int lo = PROGRAM_DEFAULT_PORT_LO, hi = PROGRAM_DEFAULT_PORT_HI;
	if (ports) {
		const json_t *l = json_array_get(ports, 0), *h = json_array_get(ports, 1);
		if (json_array_size(ports) != 2 || !json_is_integer(l) || !json_is_integer(h) ||
		    json_integer_value(l) < 1024 || json_integer_value(h) > 65535 ||
		    json_integer_value(l) > json_integer_value(h)) {
			snprintf(detail, dlen, "REGISTER: program_ports must be [lo, hi] with 1024 <= lo <= hi <= 65535");
			return -EINVAL;
		}
		lo = (int)json_integer_value(l);
		hi = (int)json_integer_value(h);
	}
	if (adv && (!json_is_string(adv) || json_string_length(adv) == 0 || json_string_length(adv) >= sizeof a->advertise ||
	            strlen(json_string_value(adv)) != json_string_length(adv) ||
	            strspn(json_string_value(adv), "0123456789abcdefABCDEF.:-_%[]zZ" "ghijklmnopqrstuvwxy"
	                                           "GHIJKLMNOPQRSTUVWXY") != json_string_length(adv))) {
		snprintf(detail, dlen, "REGISTER: advertise must be a host name or address of 1 to %zu bytes",
		         sizeof a->advertise - 1);
		return -EINVAL;
	}
	a->programs = json_is_true(progs);
	a->port_lo = lo;
	a->port_hi = hi;
	snprintf(a->advertise, sizeof a->advertise, "%s", adv ? json_string_value(adv) : "");
	return 0;
}

char *program_register_json(const agent_t *a)
{
	json_t *j = json_pack("{s:b, s:[i, i]}", "programs", a->programs, "program_ports", a->port_lo, a->port_hi);
	if (j && a->advertise[0])
		json_object_set_new(j, "advertise", json_string(a->advertise));
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	return text;
}

int program_cap_free(agent_t *const *alive, int n_alive, const jobspec_t *spec, int kind, int *n_free,
                     long *ret_total)
{
	if (!jobspec_is_program(spec))
		return -1;
	int rpn = spec->parallel.ranks_per_node, n_allowing = 0;
	long total = 0;
	for (int i = 0; i < n_alive; i++) {
		if (!alive[i]->programs) {
			n_free[i] = 0;
			continue;
		}
		n_allowing++;
		long devs = 0;
		for (int d = 0; d < alive[i]->n_devices; d++)
			devs += alive[i]->devices[d].kind == kind;
		if (rpn > 0 && devs > rpn)
			devs = rpn;
		if (rpn > 0 && n_free[i] > rpn)
			n_free[i] = rpn;
		total += devs;
	}
	*ret_total = total;
	return n_allowing;
}

bool program_agents_ok(const attempt_t *at)
{
	for (int r = 0; r < at->world_size; r++)
		if (!at->ranks[r].agent || !at->ranks[r].agent->programs)
			return false;
	return true;
}

/* Whether live attempt `at` holds `port` on agent `a` (its rank 0's). */
static bool port_held(const attempt_t *at, const agent_t *a, int port)
{
	return at->program && at->master_port == port && at->world_size > 0 && at->ranks[0].agent == a;
}

int program_pick_port(fabric_t *f, const agent_t *a, const attempt_t *prev)
{
	bool prev_here = prev && prev->program && prev->master_port > 0 && prev->ranks[0].agent == a;
	for (int port = a->port_lo; port <= a->port_hi && port > 0; port++) {
		bool held = prev_here && prev->master_port == port;
		size_t pos = 0;
		smap_slot_t *s;
		while (!held && (s = smap_next(&f->attempts, &pos)))
			held = s->value != prev && port_held(s->value, a, port);
		if (!held)
			return port;
	}
	if (prev_here) {
		size_t pos = 0;
		smap_slot_t *s;
		while ((s = smap_next(&f->attempts, &pos)))
			if (s->value != prev && port_held(s->value, a, prev->master_port))
				return -ENOSPC;
		return prev->master_port;
	}
	return -ENOSPC;
}

void program_note_port(fabric_t *f, const attempt_t *at)
{
	if (!at->program || !fabric_tx(f))
		return;
	const agent_t *a0 = at->ranks[0].agent;
	char reason[600];
	snprintf(reason, sizeof reason, "MASTER_PORT %d on node %.255s (%.255s)", at->master_port, a0->node,
	         a0->advertise[0] ? a0->advertise : "127.0.0.1");
	fabric_wrote(f, store_event_insert(f->st, at->job_id, "program_port", NULL, NULL, reason, at->attempt,
	                                   clock_wall_us()),
	             "program_port event");
}

typedef struct {
	int attempt;
	int port;
	int64_t last_id;
} port_scan_t;

static int scan_port_event(const store_event_t *ev, void *userdata)
{
	port_scan_t *ps = userdata;
	int port;
	ps->last_id = ev->id;
	if (ev->attempt == ps->attempt && ev->type && strcmp(ev->type, "program_port") == 0 && ev->reason &&
	    sscanf(ev->reason, "MASTER_PORT %d", &port) == 1 && port > 0 && port <= 65535)
		ps->port = port;
	return 0;
}

void program_restore_port(fabric_t *f, attempt_t *at)
{
	if (!at->program)
		return;
	port_scan_t ps = {.attempt = at->attempt};
	bool more = true;
	for (int pages = 0; more && pages < 1000; pages++) {
		int64_t after = ps.last_id;
		if (store_event_list(f->st, at->job_id, after, 1000, scan_port_event, &ps, &more) < 0 || ps.last_id == after)
			break;
	}
	at->master_port = ps.port;
}

void program_spawn_fields(const attempt_t *at, int rank, json_t *sp)
{
	if (!at->program || !sp)
		return;
	const agent_t *mine = at->ranks[rank].agent;
	int local_rank = 0, local_world = 0, group_rank = 0, n_groups = 0;
	for (int r = 0; r < at->world_size; r++) {
		const agent_t *ar = at->ranks[r].agent;
		bool first_on_node = true;
		for (int q = 0; q < r && first_on_node; q++)
			first_on_node = at->ranks[q].agent != ar;
		if (first_on_node) {
			if (ar == mine)
				group_rank = n_groups;
			n_groups++;
		}
		if (ar == mine) {
			local_rank += r < rank;
			local_world++;
		}
	}
	const jobspec_t *s = &at->spec;
	json_t *argv = json_array(), *env = json_object();
	for (int i = 0; argv && i < s->program.argc; i++)
		json_array_append_new(argv, json_string(s->program.argv[i]));
	for (int i = 0; env && i < s->program.n_env; i++)
		json_object_set_new(env, s->program.env_names[i], json_string(s->program.env_values[i]));
	const agent_t *a0 = at->ranks[0].agent;
	const char *addr = a0 && a0->advertise[0] ? a0->advertise : "127.0.0.1";
	json_object_set_new(sp, "program",
	                    json_pack("{s:o*, s:o, s:o*}", "argv", argv, "cwd",
	                              s->program.cwd ? json_string(s->program.cwd) : json_null(), "env", env));
	json_object_set_new(sp, "torch",
	                    json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s}", "master_addr", addr,
	                              "master_port", at->master_port, "local_rank", local_rank, "local_world_size",
	                              local_world, "group_rank", group_rank, "group_world_size", n_groups,
	                              "restart_count", at->restarts, "max_restarts", at->max_restarts, "run_id",
	                              at->job_id));
}

/* The live program attempt and the rank a message names, checked: the
 * sender is the rank's agent, the attempt is the live one and not failed.
 * NULL (answered or ignored) otherwise. */
static attempt_t *live_rank(fabric_t *f, agent_t *a, json_t *p, const char *what, int *ret_rank)
{
	const char *job = json_string_value(json_object_get(p, "job"));
	json_int_t att = json_integer_value(json_object_get(p, "attempt"));
	json_int_t rank = json_integer_value(json_object_get(p, "rank"));
	if (att < 0 || att > INT_MAX || rank < 0 || rank > INT_MAX) {
		char detail[128];
		snprintf(detail, sizeof detail, "%s: attempt and rank must be integers >= 0", what);
		fabric_send_error(f, a->ident, strlen(a->ident), 400, detail);
		return NULL;
	}
	if (!agents_owns_rank(f, a, job, (int)att, (int)rank, what))
		return NULL;
	attempt_t *at = smap_get(&f->attempts, job);
	if (!at || at->attempt != att || rank >= at->world_size || at->failed || !at->program) {
		log_debug("agent %s: %s for rank %lld of job %.40s attempt %lld, not a live program rank: ignored",
		          a->node, what, (long long)rank, job, (long long)att);
		return NULL;
	}
	*ret_rank = (int)rank;
	return at;
}

void program_on_rank_started(fabric_t *f, agent_t *a, json_t *p)
{
	int rank;
	attempt_t *at = live_rank(f, a, p, "RANK_STARTED", &rank);
	if (!at)
		return;
	rank_rt_t *rr = &at->ranks[rank];
	if (rr->joined || rr->exited)
		return;
	rr->joined = true; /* stored as "joined": a coordinator restart keeps it */
	at->n_joined++;
	if (fabric_tx(f))
		fabric_wrote(f, store_rank_set_state(f->st, at->job_id, at->attempt, rank, "joined", false, 0, 0,
		                                     clock_wall_us()),
		             "rank started");
	if (at->n_joined == at->world_size && at->state == STORE_JOB_SCHEDULED) {
		char reason[200];
		snprintf(reason, sizeof reason, "all %d rank(s) started", at->world_size);
		at->state = STORE_JOB_RUNNING;
		if (fabric_tx(f))
			fabric_wrote(f, store_job_set_state(f->st, at->job_id, STORE_JOB_RUNNING, reason, clock_wall_us()),
			             "job running");
		log_info("job %s attempt %d running: %s", at->job_id, at->attempt, reason);
	}
}

/* A row's optional real `name` (0 when absent); false when present but not
 * a finite number. */
static bool row_real(const json_t *row, const char *name, double *ret)
{
	const json_t *v = json_object_get(row, name);
	*ret = 0;
	if (!v)
		return true;
	if (!json_is_number(v) || !isfinite(json_number_value(v)))
		return false;
	*ret = json_number_value(v);
	return true;
}

void program_on_metrics(fabric_t *f, agent_t *a, json_t *p)
{
	int rank;
	attempt_t *at = live_rank(f, a, p, "PROGRAM_METRICS", &rank);
	if (!at || rank != 0)
		return; /* other ranks' rows are not the job's */
	const json_t *row = json_object_get(p, "row"), *step = json_object_get(row, "step");
	store_metric_t m;
	memset(&m, 0, sizeof m);
	double mfu;
	if (!json_is_integer(step) || json_integer_value(step) < 0 || !json_is_number(json_object_get(row, "loss")) ||
	    !row_real(row, "loss", &m.loss) || !row_real(row, "lr", &m.lr) ||
	    !row_real(row, "grad_norm", &m.grad_norm) || !row_real(row, "tokens_per_s", &m.tokens_per_s) ||
	    !row_real(row, "ms", &m.ms) || !row_real(row, "val_loss", &m.val_loss) || !row_real(row, "mfu", &mfu)) {
		fabric_send_error(f, a->ident, strlen(a->ident), 400,
		                  "PROGRAM_METRICS: row must be {step: integer >= 0, loss: number, optional val_loss, lr, "
		                  "grad_norm, tokens_per_s, ms, mfu: finite numbers}");
		return;
	}
	snprintf(m.job_id, sizeof m.job_id, "%s", at->job_id);
	m.attempt = at->attempt;
	m.rank = 0;
	m.step = (int64_t)json_integer_value(step);
	m.has_val_loss = json_object_get(row, "val_loss") != NULL;
	if (!m.has_val_loss)
		m.val_loss = NAN;
	m.at_us = clock_wall_us();
	if (m.step > at->last_metric_step)
		at->last_metric_step = m.step;
	if (fabric_tx(f))
		fabric_wrote(f, store_metric_insert(f->st, &m), "program metrics row");
}

void program_rank_exited(fabric_t *f, attempt_t *at, int rank, int code, int sig, const char *error,
                         int64_t detection_us)
{
	rank_rt_t *rr = &at->ranks[rank];
	char cause[REASON_BYTES];
	if (code == 0 && sig == 0) {
		if (rr->done)
			return;
		rr->done = true;
		at->n_done++;
		if (fabric_tx(f))
			fabric_wrote(f, store_rank_set_state(f->st, at->job_id, at->attempt, rank, "done", true, 0, 0,
			                                     clock_wall_us()),
			             "rank done");
		if (at->n_done < at->world_size)
			return;
		snprintf(cause, sizeof cause, "all %d rank(s) of the program exited with status 0", at->world_size);
		attempt_end(f, at, STORE_JOB_SUCCEEDED, cause, false, false);
		return;
	}
	if (sig != 0)
		snprintf(cause, sizeof cause, "rank %d of the program exited: killed by signal %d", rank, sig);
	else if (error && error[0])
		snprintf(cause, sizeof cause, "rank %d of the program exited with status %d: %.1500s", rank, code, error);
	else
		snprintf(cause, sizeof cause, "rank %d of the program exited with status %d", rank, code);
	/* no deterministic-refusal shortcut: a user program's status means
	 * nothing to the coordinator, so every failure is retried */
	attempt_failed(f, at, cause, NULL, detection_us);
}
