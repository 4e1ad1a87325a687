/*
 * scheduler: the scheduling pass (see scheduler.h).
 */
#include "scheduler.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "agents.h"
#include "capacity.h"
#include "attempt.h"
#include "clock.h"
#include "gang.h"
#include "log.h"
#include "memfit.h"
#include "placement.h"
#include "program.h"

/* A queued job as the pass sees it. */
typedef struct {
	char id[STORE_ID_BYTES];
	int world_size;
	int attempt;
	int restarts;
	queued_spec_t *qs; /* borrowed from f->queued; NULL for a restart */
} queued_t;

typedef struct {
	fabric_t *f;
	queued_t *jobs;
	size_t n, cap;
} queue_t;

static void queued_spec_free(queued_spec_t *qs)
{
	if (!qs)
		return;
	jobspec_free(&qs->spec);
	json_decref(qs->json);
	free(qs);
}

void scheduler_free(fabric_t *f)
{
	size_t pos = 0;
	smap_slot_t *s;
	while ((s = smap_next(&f->queued, &pos)))
		queued_spec_free(s->value);
	smap_free(&f->queued);
}

/* The parsed spec of queued `job`: kept from an earlier pass, or parsed
 * now (once per job). NULL on out-of-memory. */
static queued_spec_t *spec_of(fabric_t *f, const store_job_t *job)
{
	queued_spec_t *qs = smap_get(&f->queued, job->id);
	if (qs)
		return qs;
	qs = calloc(1, sizeof *qs);
	if (!qs)
		return NULL;
	qs->json = json_loads(job->spec_json ? job->spec_json : "", 0, NULL);
	qs->ok = qs->json && jobspec_from_json(qs->json, &qs->spec, NULL) == 0;
	if (smap_put(&f->queued, job->id, qs, NULL) < 0) {
		queued_spec_free(qs);
		return NULL;
	}
	return qs;
}

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
	e->qs = spec_of(q->f, job);
	if (!e->qs)
		return -ENOMEM;
	e->qs->mark = q->f->sched_gen;
	q->n++;
	return 0;
}

/* Forget the specs of jobs that left the queue (cancelled) since the last
 * pass that listed it. */
static void prune_specs(fabric_t *f)
{
	size_t pos = 0;
	smap_slot_t *s;
	while ((s = smap_next(&f->queued, &pos))) {
		queued_spec_t *qs = s->value;
		if (qs->mark == f->sched_gen)
			continue;
		smap_del(&f->queued, s->key);
		queued_spec_free(qs);
	}
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

/* parallel.ranks_per_node of a built-in job (`rpn` > 0): at most that many
 * of its ranks on one node; *total (the ranks the alive agents could hold at
 * all) is capped the same way. Program jobs get this in program_cap_free. */
static void cap_per_node(agent_t **alive, int n_alive, int kind, int rpn, int *n_free, long *total)
{
	if (rpn <= 0)
		return;
	*total = 0;
	for (int a = 0; a < n_alive; a++) {
		long devs = 0;
		for (int d = 0; d < alive[a]->n_devices; d++)
			devs += alive[a]->devices[d].kind == kind;
		*total += devs < rpn ? devs : rpn;
		if (n_free[a] > rpn)
			n_free[a] = rpn;
	}
}

/* The job's state reason for the placement `pl` of `q` (REASON_BYTES). */
static void placed_reason(const queued_t *q, const placement_t *pl, const attempt_t *prev, int tensor, char *reason)
{
	char where[REASON_BYTES];
	size_t wlen = 0, rlen = 0;
	where[0] = reason[0] = '\0';
	placement_describe(pl, where, &wlen);
	fabric_reason_add(reason, &rlen, "placed %d rank(s) on %d node(s):%s", q->world_size, pl->n_nodes, where);
	if (tensor > 1)
		placement_describe_groups(pl, tensor, reason, &rlen);
	if (prev)
		fabric_reason_add(reason, &rlen, "; restart %d of %d after %s; %d rank(s) rejoin in their process",
		                         prev->restarts, prev->max_restarts, prev->cause ? prev->cause : "a failure", pl->n_kept);
}

/* The store rows of a placed attempt `at` (replacing `prev`, may be NULL). */
static void write_placed(fabric_t *f, const attempt_t *at, const attempt_t *prev, const char *reason)
{
	int64_t now = clock_wall_us();
	if (!fabric_tx(f))
		return;
	if (prev)
		fabric_wrote(f, store_rank_lose_attempt(f->st, prev->job_id, prev->attempt, now), "ranks lost");
	fabric_wrote(f, store_job_set_attempt(f->st, at->job_id, at->attempt, now), "job attempt");
	for (int r = 0; r < at->world_size; r++) {
		store_rank_t sr = {.attempt = at->attempt,
		                   .rank = r,
		                   .node = at->ranks[r].agent->node,
		                   .device_kind = fabric_kind_name(at->kind),
		                   .device_index = at->ranks[r].device_index,
		                   .state = "placed"};
		snprintf(sr.job_id, sizeof sr.job_id, "%s", at->job_id);
		fabric_wrote(f, store_rank_insert(f->st, &sr, now), "rank insert");
	}
	fabric_wrote(f, store_job_set_state(f->st, at->job_id, STORE_JOB_SCHEDULED, reason, now), "job scheduled");
}

/* SPAWN to each rank's agent; a kept survivor of `prev` is adopted: its
 * agent hands the process over and the rank hears REJOIN. */
static void send_spawns(fabric_t *f, attempt_t *at, const attempt_t *prev, const placement_t *pl)
{
	for (int r = 0; r < at->world_size; r++) {
		json_t *sp = attempt_spawn_payload(at, r);
		if (prev && r < pl->n_prev && pl->keep[r]) {
			char ident[WIRE_MAX_IDENTITY_BYTES + 1];
			at->ranks[r].adopted_from = prev->attempt;
			json_object_set_new(sp, "adopt", json_integer(prev->attempt));
			fabric_send_to(f, at->ranks[r].agent->ident, WIRE_SPAWN, sp);
			fabric_rank_ident(ident, prev->job_id, prev->attempt, r);
			fabric_send_to(f, ident, WIRE_REJOIN, json_pack("{s:s, s:i}", "job", at->job_id, "attempt", at->attempt));
			continue;
		}
		fabric_send_to(f, at->ranks[r].agent->ident, WIRE_SPAWN, sp);
	}
}

/*
 * Apply the placement `pl` of `q` (devices of `pl->kind`): the new attempt
 * takes the devices and the spec, the job goes queued -> scheduled (or, with
 * `prev`, the failed attempt of a job being restarted, its devices already
 * released, recovering -> scheduled: `prev` is replaced and freed, its
 * parked survivors kept or stopped as `pl` says). Each rank's agent gets its
 * SPAWN. A queued job's spec moves from f->queued to the attempt.
 */
static void apply_placement(fabric_t *f, const queued_t *q, const placement_t *pl, attempt_t *prev, int master_port,
                            int tensor)
{
	attempt_t *at = calloc(1, sizeof *at);
	rank_rt_t *ranks = calloc((size_t)q->world_size, sizeof *ranks);
	recovery_t *rec = prev ? calloc(1, sizeof *rec) : NULL;
	if (!at || !ranks || (prev && !rec)) {
		free(at);
		free(ranks);
		free(rec);
		log_error("broker: out of memory placing job %s", q->id);
		return;
	}
	snprintf(at->job_id, sizeof at->job_id, "%s", q->id);
	at->attempt = q->attempt + 1;
	at->world_size = q->world_size;
	at->kind = pl->kind;
	at->state = STORE_JOB_SCHEDULED;
	at->ranks = ranks;
	at->restarts = prev ? prev->restarts : q->restarts;
	for (int r = 0; r < q->world_size; r++) {
		agent_t *a = pl->ranks[r].agent;
		agents_device(a, pl->kind, pl->ranks[r].device_index)->owner = at;
		ranks[r] = (rank_rt_t){.agent = a, .device_kind = pl->kind, .device_index = pl->ranks[r].device_index};
	}
	for (int r = 0; r < pl->n_prev; r++)
		if (pl->stop[r])
			attempt_stop_rank(f, prev, r, "not placed on its device again: replaced by a new process");
	char reason[REASON_BYTES];
	placed_reason(q, pl, prev, tensor, reason);
	void *old_value = NULL;
	if (smap_put(&f->attempts, at->job_id, at, &old_value) < 0) {
		for (int r = 0; r < q->world_size; r++)
			agents_device(ranks[r].agent, pl->kind, ranks[r].device_index)->owner = NULL;
		free(rec);
		attempt_free(at);
		log_error("broker: out of memory placing job %s", q->id);
		return;
	}
	/* the spec moves to the attempt: from the failed one, or from the queue */
	if (prev) {
		at->spec = prev->spec;
		at->spec_json = prev->spec_json;
		memset(&prev->spec, 0, sizeof prev->spec);
		prev->spec_json = NULL;
	} else {
		at->spec = q->qs->spec;
		at->spec_json = q->qs->json;
		memset(&q->qs->spec, 0, sizeof q->qs->spec);
		q->qs->json = NULL;
		smap_del(&f->queued, q->id);
		free(q->qs);
	}
	at->max_restarts = at->spec.restart.max_restarts;
	at->program = jobspec_is_program(&at->spec);
	at->master_port = at->program ? master_port : 0;
	write_placed(f, at, prev, reason);
	program_note_port(f, at); /* a program's MASTER_PORT, kept for a coordinator restart */
	log_info("job %s attempt %d scheduled: %s", at->job_id, at->attempt, reason);
	send_spawns(f, at, prev, pl);
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

/* Decide the placement of `q` and apply it; false when it does not fit. */
static bool place(fabric_t *f, const queued_t *q, int kind, agent_t **alive, int n_alive, const int *take,
                  attempt_t *prev)
{
	placement_t pl;
	int r = placement_decide(alive, n_alive, take, kind, q->world_size, prev, &pl);
	if (r < 0) {
		if (r == -ENOMEM)
			log_error("broker: out of memory placing job %s", q->id);
		return false;
	}
	/* a program job's MASTER_PORT, reserved on rank 0's node before anything changes */
	const jobspec_t *spec = prev ? &prev->spec : &q->qs->spec;
	int port = 0;
	if (jobspec_is_program(spec) && (port = program_pick_port(f, pl.ranks[0].agent, prev)) < 0) {
		log_debug("job %s waits: every port of node %s's program_ports %d-%d is held by another job", q->id,
		         pl.ranks[0].agent->node, pl.ranks[0].agent->port_lo, pl.ranks[0].agent->port_hi);
		placement_clear(&pl);
		return false;
	}
	apply_placement(f, q, &pl, prev, port, spec->parallel.tensor);
	placement_clear(&pl);
	return true;
}

/*
 * The memory fit (issue 22): cap each alive agent's free devices of `kind`
 * by the ranks of `est_bytes` its memory holds (an agent that did not say
 * is not limited). Returns the ranks the alive agents could hold at all,
 * devices and memory both counted (what `total` is without memory).
 */
static long cap_by_memory(agent_t **alive, int n_alive, int kind, double est_bytes, int *n_free)
{
	long total = 0;
	for (int a = 0; a < n_alive; a++) {
		long devs = 0;
		for (int d = 0; d < alive[a]->n_devices; d++)
			devs += alive[a]->devices[d].kind == kind;
		if (alive[a]->memory_bytes > 0 && est_bytes > 0) {
			double fit = floor((double)alive[a]->memory_bytes / est_bytes);
			if (fit < n_free[a])
				n_free[a] = (int)fit;
			if (fit < devs)
				devs = (long)fit;
		}
		total += devs;
	}
	return total;
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
			attempt_release_devices(at);
		queued_t q = {.world_size = at->world_size, .attempt = at->attempt, .restarts = at->restarts, .qs = NULL};
		snprintf(q.id, sizeof q.id, "%s", at->job_id);
		if (attempt_same_devices_free(at) && (!at->program || program_agents_ok(at))) {
			place(f, &q, at->kind, alive, n_alive, NULL, at);
			continue;
		}
		long total = 0;
		for (int a = 0; a < n_alive; a++) {
			n_free[a] = count_free(alive[a], at->kind);
			for (int d = 0; d < alive[a]->n_devices; d++)
				total += alive[a]->devices[d].kind == at->kind;
		}
		if (at->program)
			program_cap_free(alive, n_alive, &at->spec, at->kind, n_free, &total);
		else
			cap_per_node(alive, n_alive, at->kind, at->spec.parallel.ranks_per_node, n_free, &total);
		if (!at->program && at->kind == KIND_CPU) { /* a restart fits memory as a first placement does */
			memfit_t est;
			memfit_estimate(&at->spec, &est);
			long by_mem = cap_by_memory(alive, n_alive, at->kind, est.total_bytes, n_free);
			total = by_mem < total ? by_mem : total; /* ranks_per_node counted too */
		}
		if (!blocked[at->kind] && gang_pack_groups(n_free, n_alive, at->world_size, at->spec.parallel.tensor, take) > 0) {
			place(f, &q, at->kind, alive, n_alive, take, at);
			continue;
		}
		if (total >= at->world_size)
			blocked[at->kind] = true;
		log_debug("job %s: restart waits for %d free %s device(s)", at->job_id, at->world_size,
		          fabric_kind_name(at->kind));
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
 * devices of its kind at all (`total`), or they are in use. The texts hold
 * no live count (how many workers, how many devices): an agent registering
 * or dying would otherwise rewrite the reason, an event and a log line of
 * every queued job (issue 22: 4,000 queued jobs and 500 registrations wrote
 * 2.65 million events). So a job gets one event per change of its reason's
 * class, not one per change of the cluster. Placement replaces the reason.
 */
static void queue_wait_reason(fabric_t *f, const queued_t *q, int kind, long total,
                              const memfit_t *mem_short, bool no_program_agent)
{
	char reason[512];
	if (no_program_agent) {
		snprintf(reason, sizeof reason, "%s", PROGRAM_NO_AGENT_REASON);
	} else if (mem_short) {
		char est[256];
		memfit_describe(mem_short, est, sizeof est);
		snprintf(reason, sizeof reason,
		         "waiting: the alive workers do not have the memory for the job's %d rank(s): each"
		         " needs %s (docs/jobspec.md, \"Memory\")",
		         q->world_size, est);
	} else if (total < q->world_size)
		snprintf(reason, sizeof reason,
		         "waiting: the job needs %d %s device(s), more than the alive workers have%s",
		         q->world_size, fabric_kind_name(kind),
		         kind == KIND_CUDA && total == 0
		                 ? " (no alive worker offers a GPU; an agent offers the NVIDIA GPUs it finds, see "
		                   "--gpus in docs/workers.md)"
		                 : " (GET /v1/workers lists them)");
	else
		snprintf(reason, sizeof reason,
		         "waiting for %d free %s device(s): the alive workers have enough, now in use",
		         q->world_size, fabric_kind_name(kind));
	store_job_t job;
	if (store_job_get(f->st, q->id, &job) < 0)
		return;
	bool write = job.state == STORE_JOB_QUEUED && (!job.state_reason || strcmp(job.state_reason, reason) != 0);
	store_job_clear(&job);
	if (!write)
		return;
	if (fabric_tx(f))
		fabric_wrote(f, store_job_set_state(f->st, q->id, STORE_JOB_QUEUED, reason, clock_wall_us()), "job waiting");
	log_info("job %s %s", q->id, reason);
}

/* Publish the alive CPU workers' memory for jobapi's check at submission. */
static void publish_capacity(agent_t **alive, int n_alive)
{
	capacity_t c = {.all_known = true};
	for (int a = 0; a < n_alive; a++) {
		bool cpu = false;
		for (int d = 0; d < alive[a]->n_devices; d++)
			cpu |= alive[a]->devices[d].kind == KIND_CPU;
		if (!cpu)
			continue;
		c.n_workers++;
		if (alive[a]->memory_bytes <= 0)
			c.all_known = false;
		else if (alive[a]->memory_bytes > c.largest_bytes) {
			c.largest_bytes = alive[a]->memory_bytes;
			snprintf(c.largest_node, sizeof c.largest_node, "%s", alive[a]->node);
		}
	}
	capacity_publish(&c);
}

/*
 * One scheduling pass. Queued jobs are taken by priority, then submission
 * order. A job that fits is placed. A job that does not fit waits; while it
 * could fit on the alive nodes' devices of its kind once some are freed, no
 * later job of that kind is placed in this pass (so a wide job is not starved
 * by a stream of narrow ones); a job wider than all alive devices of its kind
 * does not hold the others back. Jobs of the other kind are not affected.
 */
/* Delete the rows of workers dead for longer than dead_worker_retention_s,
 * at most once a minute (or once per retention period when that is
 * shorter): agents that come and go (autoscaling, restarts
 * under new names) must not grow the table without end (issue 22). */
static void prune_dead_workers(fabric_t *f)
{
	int64_t now = clock_mono_us();
	if (f->opt.dead_worker_retention_s <= 0 || now < f->next_prune_us)
		return;
	int period_s = f->opt.dead_worker_retention_s < 60 ? f->opt.dead_worker_retention_s : 60;
	f->next_prune_us = now + (int64_t)period_s * 1000000;
	int n = 0;
	int64_t before = clock_wall_us() - (int64_t)f->opt.dead_worker_retention_s * 1000000;
	if (!fabric_tx(f))
		return;
	fabric_wrote(f, store_worker_prune_dead(f->st, before, &n), "prune dead workers");
	if (n > 0)
		log_info("deleted %d dead worker row(s) last heard of more than %d s ago", n,
		         f->opt.dead_worker_retention_s);
}

void scheduler_run(fabric_t *f)
{
	f->sched_dirty = false;
	f->next_sched_us = clock_mono_us() + SCHED_PERIOD_US;
	prune_dead_workers(f);
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
	publish_capacity(alive, n_alive);
	if (n_alive == 0) {
		restart_due(f, alive, 0, blocked); /* nothing fits: they wait, their devices released */
		free(alive);
		return;
	}
	qsort(alive, (size_t)n_alive, sizeof *alive, agent_by_node);
	restart_due(f, alive, n_alive, blocked);
	queue_t q = {.f = f};
	f->sched_gen++;
	int r = store_job_list_queued(f->st, collect_queued, &q);
	if (r < 0)
		log_error("broker: cannot read the queued jobs: %s", strerror(-r));
	else
		prune_specs(f);
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
		int kind = job->qs->spec.parallel.device == JOBSPEC_DEVICE_CUDA ? KIND_CUDA : KIND_CPU;
		if (!job->qs->ok) {
			log_error("job %s: its stored spec cannot be read; failing it", job->id);
			if (fabric_tx(f))
				fabric_wrote(f, store_job_set_state(f->st, job->id, STORE_JOB_FAILED,
				                                    "the stored job spec cannot be read", clock_wall_us()),
				             "job failed");
			continue;
		}
		if (blocked[kind])
			continue;
		long total = 0;
		for (int a = 0; a < n_alive; a++) {
			n_free[a] = count_free(alive[a], kind);
			for (int d = 0; d < alive[a]->n_devices; d++)
				total += alive[a]->devices[d].kind == kind;
		}
		/* host memory bounds CPU ranks; a cuda rank's state is on its GPU */
		memfit_t est = {0};
		long fit = total;
		int n_allowing = program_cap_free(alive, n_alive, &job->qs->spec, kind, n_free, &total);
		if (n_allowing < 0) {
			cap_per_node(alive, n_alive, kind, job->qs->spec.parallel.ranks_per_node, n_free, &total);
			fit = total;
		}
		if (n_allowing >= 0) {
			fit = total; /* a program's memory is its own business */
		} else if (kind == KIND_CPU) {
			memfit_estimate(&job->qs->spec, &est);
			long by_mem = cap_by_memory(alive, n_alive, kind, est.total_bytes, n_free);
			fit = by_mem < total ? by_mem : total; /* ranks_per_node counted too */
		}
		int used = gang_pack_groups(n_free, n_alive, job->world_size, job->qs->spec.parallel.tensor, take);
		if (used > 0 && place(f, job, kind, alive, n_alive, take, NULL))
			continue;
		bool mem_short = total >= job->world_size && fit < job->world_size;
		queue_wait_reason(f, job, kind, total, mem_short ? &est : NULL, n_allowing == 0);
		if (fit >= job->world_size)
			blocked[kind] = true;
	}
	free(n_free);
	free(take);
out:
	free(q.jobs);
	free(alive);
}
