/*
 * shard: ZeRO-2/3 gathers and reduce-scatters on a thread of their own (see
 * shard.h).
 *
 * Queue. Operations are numbered by a ticket (1, 2, ...) as they are queued;
 * the thread runs them in ticket order and `done` counts those finished, so
 * waiting for an operation is waiting for done >= its ticket. At most four
 * are outstanding (two slots, two buckets), so a small ring holds them.
 *
 * Slots (ZeRO-3). Each of the two slots is assigned a range when a gather
 * into it is queued, and keeps it until it is reassigned or invalidated; a
 * fetch of an assigned range waits for that gather instead of queueing one.
 * A new range goes to the slot not holding the prefetch hint, else the one
 * assigned longer ago: decisions read only assignments and tickets, never
 * whether a gather has finished, so every rank makes the same ones.
 *
 * Buckets. grad_begin takes the buckets in turn, waiting for the older
 * reduce-scatter of that bucket to finish before zeroing it.
 */
#include "shard.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QCAP 8

typedef enum { OP_GATHER, OP_REDUCE } op_kind_t;

typedef struct {
	op_kind_t kind;
	int buf; /* slot or bucket index */
	size_t lo, hi;
} op_t;

struct shard {
	comm_t *comm;
	const shard_mem_t *mem;
	int W, rank;
	size_t n, S, lo, count, max_range;
	size_t *counts;    /* (W) */
	size_t *op_counts; /* (W) the running operation's counts (thread only) */

	float *grads;  /* (S) */
	float *params; /* (S) or NULL */
	float *rs_out; /* (min(S, max_range)) the reduce-scatter's output */

	float *slot[2];
	size_t slot_lo[2], slot_hi[2];
	bool slot_assigned[2];
	uint64_t slot_ticket[2];
	int held; /* slot being read by the engine, or -1 */

	float *bucket[2];
	uint64_t bucket_ticket[2];
	int next_bucket;

	pthread_t thread;
	bool thread_started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	op_t queue[QCAP];
	uint64_t queued; /* tickets handed out */
	uint64_t done;   /* operations finished (run or skipped) */
	int error;       /* first failure, negative errno; 0 */
	bool stop;
};

/* ---- host memory ---- */

static void *s_host_alloc(size_t bytes)
{
	size_t rounded = (bytes + 63) / 64 * 64;
	void *p = aligned_alloc(64, rounded ? rounded : 64);
	if (p)
		memset(p, 0, rounded ? rounded : 64);
	return p;
}

static void s_host_zero(float *p, size_t n)
{
#pragma omp parallel for simd schedule(static)
	for (size_t i = 0; i < n; i++)
		p[i] = 0.0f;
}

/* Called on the shard's thread while the training thread runs its OpenMP
 * team: a second team would oversubscribe the cores, so this one is serial. */
static void s_host_add(float *dst, const float *src, size_t n)
{
#pragma omp simd
	for (size_t i = 0; i < n; i++)
		dst[i] += src[i];
}

const shard_mem_t shard_mem_host = {s_host_alloc, free, s_host_zero, s_host_add};

/* ---- the thread ---- */

/* The part of [lo, hi) in rank r's shard, as [*a, *a + return). */
static size_t s_overlap(const shard_t *s, int r, size_t lo, size_t hi, size_t *a)
{
	size_t r_lo = (size_t)r * s->S, r_hi = r_lo + s->counts[r];
	size_t x = lo > r_lo ? lo : r_lo, y = hi < r_hi ? hi : r_hi;
	*a = x;
	return y > x ? y - x : 0;
}

static int s_run(shard_t *s, const op_t *op)
{
	for (int r = 0; r < s->W; r++) {
		size_t a;
		s->op_counts[r] = s_overlap(s, r, op->lo, op->hi, &a);
	}
	size_t mine_at;
	size_t mine = s_overlap(s, s->rank, op->lo, op->hi, &mine_at);
	if (op->kind == OP_GATHER) {
		const float *in = mine ? s->params + (mine_at - s->lo) : s->params;
		return comm_allgather_f32(s->comm, in, s->slot[op->buf], s->op_counts);
	}
	int rc = comm_reduce_scatter_sum_f32(s->comm, s->bucket[op->buf], s->rs_out, s->op_counts);
	if (rc == 0 && mine)
		s->mem->add(s->grads + (mine_at - s->lo), s->rs_out, mine);
	return rc;
}

static void *s_thread(void *arg)
{
	shard_t *s = arg;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (s->done == s->queued && !s->stop)
			pthread_cond_wait(&s->cv, &s->mu);
		if (s->done == s->queued)
			break;
		op_t op = s->queue[s->done % QCAP];
		bool skip = s->error != 0;
		pthread_mutex_unlock(&s->mu);
		int rc = skip ? 0 : s_run(s, &op);
		if (rc < 0)
			comm_abort(s->comm);
		pthread_mutex_lock(&s->mu);
		if (rc < 0 && s->error == 0)
			s->error = rc;
		s->done++;
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static uint64_t s_queue(shard_t *s, op_kind_t kind, int buf, size_t lo, size_t hi)
{
	pthread_mutex_lock(&s->mu);
	while (s->queued - s->done >= QCAP)
		pthread_cond_wait(&s->cv, &s->mu);
	s->queue[s->queued % QCAP] = (op_t){kind, buf, lo, hi};
	uint64_t ticket = ++s->queued;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return ticket;
}

static void s_wait(shard_t *s, uint64_t ticket)
{
	pthread_mutex_lock(&s->mu);
	while (s->done < ticket)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
}

/* ---- life ---- */

shard_t *shard_new(comm_t *comm, size_t n_params, size_t max_range, bool shard_params,
                   const shard_mem_t *mem, char *err, size_t errlen)
{
	shard_t *s = calloc(1, sizeof *s);
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->comm = comm;
	s->mem = mem ? mem : &shard_mem_host;
	s->W = comm_world_size(comm);
	s->rank = comm_rank(comm);
	s->n = n_params;
	s->S = (n_params + (size_t)s->W - 1) / (size_t)s->W;
	s->lo = (size_t)s->rank * s->S;
	s->max_range = max_range < n_params ? max_range : n_params;
	s->held = -1;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->counts = calloc((size_t)s->W, sizeof(size_t));
	s->op_counts = calloc((size_t)s->W, sizeof(size_t));
	if (!s->counts || !s->op_counts)
		goto nomem;
	for (int r = 0; r < s->W; r++) {
		size_t lo = (size_t)r * s->S;
		size_t left = lo < n_params ? n_params - lo : 0;
		s->counts[r] = left < s->S ? left : s->S;
	}
	s->count = s->counts[s->rank];
	size_t rs = s->S < s->max_range ? s->S : s->max_range;
	s->grads = s->mem->alloc(s->S * sizeof(float));
	s->rs_out = s->mem->alloc(rs * sizeof(float));
	s->bucket[0] = s->mem->alloc(s->max_range * sizeof(float));
	s->bucket[1] = s->mem->alloc(s->max_range * sizeof(float));
	if (!s->grads || !s->rs_out || !s->bucket[0] || !s->bucket[1])
		goto nomem;
	if (shard_params) {
		s->params = s->mem->alloc(s->S * sizeof(float));
		s->slot[0] = s->mem->alloc(s->max_range * sizeof(float));
		s->slot[1] = s->mem->alloc(s->max_range * sizeof(float));
		if (!s->params || !s->slot[0] || !s->slot[1])
			goto nomem;
	}
	if (pthread_create(&s->thread, NULL, s_thread, s) != 0) {
		snprintf(err, errlen, "cannot start the sharding thread");
		shard_free(s);
		return NULL;
	}
	s->thread_started = true;
	return s;
nomem:
	snprintf(err, errlen,
		 "the ZeRO shard (%.1f MiB) and its buffers (%.1f MiB each) do not fit in memory",
		 (double)s->S * 4 / 1048576.0, (double)s->max_range * 4 / 1048576.0);
	shard_free(s);
	return NULL;
}

void shard_free(shard_t *s)
{
	if (!s)
		return;
	if (s->thread_started) {
		pthread_mutex_lock(&s->mu);
		s->stop = true;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->thread, NULL);
	}
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	const shard_mem_t *mem = s->mem;
	mem->free(s->grads);
	mem->free(s->params);
	mem->free(s->rs_out);
	for (int i = 0; i < 2; i++) {
		mem->free(s->slot[i]);
		mem->free(s->bucket[i]);
	}
	free(s->counts);
	free(s->op_counts);
	free(s);
}

size_t shard_len(const shard_t *s) { return s->S; }
size_t shard_lo(const shard_t *s) { return s->lo; }
size_t shard_count(const shard_t *s) { return s->count; }
const size_t *shard_counts(const shard_t *s) { return s->counts; }
float *shard_grads(shard_t *s) { return s->grads; }
float *shard_params(shard_t *s) { return s->params; }

void shard_zero_grads(shard_t *s)
{
	s->mem->zero(s->grads, s->S);
}

/* ---- parameters ---- */

static int s_slot_of(const shard_t *s, size_t lo, size_t hi)
{
	for (int k = 0; k < 2; k++)
		if (s->slot_assigned[k] && s->slot_lo[k] == lo && s->slot_hi[k] == hi)
			return k;
	return -1;
}

/* Queue a gather of [lo, hi) into slot k once the slot's last gather is done. */
static void s_assign(shard_t *s, int k, size_t lo, size_t hi)
{
	s_wait(s, s->slot_ticket[k]);
	s->slot_assigned[k] = true;
	s->slot_lo[k] = lo;
	s->slot_hi[k] = hi;
	s->slot_ticket[k] = s_queue(s, OP_GATHER, k, lo, hi);
}

const float *shard_fetch(shard_t *s, size_t lo, size_t hi, size_t next_lo, size_t next_hi)
{
	int k = s_slot_of(s, lo, hi);
	if (k < 0) {
		int nk = next_hi > next_lo ? s_slot_of(s, next_lo, next_hi) : -1;
		if (nk >= 0)
			k = 1 - nk;
		else
			k = s->slot_ticket[0] <= s->slot_ticket[1] ? 0 : 1;
		s_assign(s, k, lo, hi);
	}
	s_wait(s, s->slot_ticket[k]);
	s->held = k;
	if (next_hi > next_lo && s_slot_of(s, next_lo, next_hi) < 0)
		s_assign(s, 1 - k, next_lo, next_hi);
	return s->slot[k];
}

void shard_release(shard_t *s, const float *p)
{
	(void)p;
	s->held = -1;
}

/* ---- gradients ---- */

float *shard_grad_begin(shard_t *s, size_t lo, size_t hi)
{
	int b = s->next_bucket;
	s->next_bucket = 1 - b;
	s_wait(s, s->bucket_ticket[b]);
	s->mem->zero(s->bucket[b], hi - lo);
	return s->bucket[b];
}

void shard_grad_end(shard_t *s, float *g, size_t lo, size_t hi)
{
	int b = g == s->bucket[0] ? 0 : 1;
	s->bucket_ticket[b] = s_queue(s, OP_REDUCE, b, lo, hi);
}

/* ---- sync ---- */

int shard_sync(shard_t *s)
{
	pthread_mutex_lock(&s->mu);
	while (s->done < s->queued)
		pthread_cond_wait(&s->cv, &s->mu);
	int rc = s->error;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int shard_invalidate(shard_t *s)
{
	int rc = shard_sync(s);
	s->slot_assigned[0] = s->slot_assigned[1] = false;
	return rc;
}

size_t shard_param_bytes(const shard_t *s)
{
	return s->params ? (s->S + 2 * s->max_range) * sizeof(float) : 0;
}

size_t shard_grad_bytes(const shard_t *s)
{
	size_t rs = s->S < s->max_range ? s->S : s->max_range;
	return (s->S + 2 * s->max_range + rs) * sizeof(float);
}
