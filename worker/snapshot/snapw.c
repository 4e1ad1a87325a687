/*
 * snapw: one writer thread per rank, fed through a single slot guarded by a
 * mutex and two condition variables. The slot moves IDLE -> QUEUED (submit,
 * caller thread) -> RUNNING (writer) -> DONE (writer) -> IDLE (poll/wait,
 * caller thread). The buffers belong to the slot: the caller fills them only
 * in IDLE, the writer reads them only in QUEUED/RUNNING, so no copy is ever
 * read while it is being written.
 */
#include "snapw.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

typedef enum { SLOT_IDLE, SLOT_QUEUED, SLOT_RUNNING, SLOT_DONE } slot_state_t;

struct snapw {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t work; /* signalled: QUEUED, or quit */
	pthread_cond_t done; /* signalled: DONE */
	slot_state_t state;
	bool quit;

	/* the job (written by the caller in IDLE) */
	char dir[PATH_MAX];
	int rank, world_size;
	int64_t step, n_params, lo, count;
	float *buf;          /* (3, cap): params, adam_m, adam_v copies */
	int64_t cap;         /* floats per copy */

	snapw_result_t result; /* written by the writer before DONE */
};

static int64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The writer thread runs at nice +10 (Linux: a thread's own niceness), so
 * that on a machine whose cores the training threads keep busy it takes the
 * CPU they leave rather than slowing their steps; the write then takes
 * longer, which only delays the next snapshot. */
#define SNAPW_NICE 10

static void *writer_main(void *arg)
{
	snapw_t *w = arg;
	(void)setpriority(PRIO_PROCESS, (id_t)gettid(), SNAPW_NICE);
	pthread_mutex_lock(&w->lock);
	for (;;) {
		while (w->state != SLOT_QUEUED && !w->quit)
			pthread_cond_wait(&w->work, &w->lock);
		if (w->state != SLOT_QUEUED)
			break; /* quit with nothing queued */
		w->state = SLOT_RUNNING;
		pthread_mutex_unlock(&w->lock);

		/* The job fields and buffers are ours until DONE. */
		snapw_result_t r = {.step = w->step, .rank = w->rank};
		int64_t t0 = now_us();
		const float *p = w->buf, *m = w->buf + w->cap, *v = w->buf + 2 * w->cap;
		r.status = snap_shard_write(w->dir, w->rank, w->world_size, w->step, w->n_params, w->lo,
		                            w->count, p, m, v, &r.shard, r.error, sizeof r.error);
		if (r.status == 0)
			r.error[0] = '\0';
		r.write_us = now_us() - t0;

		pthread_mutex_lock(&w->lock);
		w->result = r;
		w->state = SLOT_DONE;
		pthread_cond_broadcast(&w->done);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

snapw_t *snapw_new(void)
{
	snapw_t *w = calloc(1, sizeof *w);
	if (!w)
		return NULL;
	if (pthread_mutex_init(&w->lock, NULL) != 0)
		goto fail_lock;
	if (pthread_cond_init(&w->work, NULL) != 0)
		goto fail_work;
	if (pthread_cond_init(&w->done, NULL) != 0)
		goto fail_done;
	int e = pthread_create(&w->thread, NULL, writer_main, w);
	if (e != 0) {
		errno = e;
		goto fail_thread;
	}
	return w;

fail_thread:
	pthread_cond_destroy(&w->done);
fail_done:
	pthread_cond_destroy(&w->work);
fail_work:
	pthread_mutex_destroy(&w->lock);
fail_lock:
	free(w);
	return NULL;
}

int snapw_submit(snapw_t *w, const char *dir, int rank, int world_size, int64_t step,
                 int64_t n_params, int64_t lo, int64_t count, const float *params,
                 const float *adam_m, const float *adam_v)
{
	if (!w || !dir || strlen(dir) >= sizeof w->dir || count < 0 ||
	    (count > 0 && (!params || !adam_m || !adam_v)))
		return -EINVAL;
	pthread_mutex_lock(&w->lock);
	slot_state_t state = w->state;
	pthread_mutex_unlock(&w->lock);
	if (state != SLOT_IDLE)
		return -EBUSY;

	/* IDLE: the writer does not touch the job fields; fill them unlocked. */
	if (count > w->cap) {
		if ((uint64_t)count > SIZE_MAX / (3 * sizeof(float)))
			return -ENOMEM;
		float *nb = malloc((size_t)count * 3 * sizeof(float));
		if (!nb)
			return -ENOMEM;
		free(w->buf);
		w->buf = nb;
		w->cap = count;
	}
	if (count > 0) {
		memcpy(w->buf, params, (size_t)count * sizeof(float));
		memcpy(w->buf + w->cap, adam_m, (size_t)count * sizeof(float));
		memcpy(w->buf + 2 * w->cap, adam_v, (size_t)count * sizeof(float));
	}
	strcpy(w->dir, dir);
	w->rank = rank;
	w->world_size = world_size;
	w->step = step;
	w->n_params = n_params;
	w->lo = lo;
	w->count = count;

	pthread_mutex_lock(&w->lock);
	w->state = SLOT_QUEUED;
	pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->lock);
	return 0;
}

/* Hands out the result of a DONE slot; call with the lock held. */
static int take_result(snapw_t *w, snapw_result_t *ret_result)
{
	if (w->state != SLOT_DONE)
		return 0;
	if (ret_result)
		*ret_result = w->result;
	w->state = SLOT_IDLE;
	return 1;
}

int snapw_poll(snapw_t *w, snapw_result_t *ret_result)
{
	pthread_mutex_lock(&w->lock);
	int r = take_result(w, ret_result);
	pthread_mutex_unlock(&w->lock);
	return r;
}

int snapw_wait(snapw_t *w, snapw_result_t *ret_result)
{
	pthread_mutex_lock(&w->lock);
	while (w->state == SLOT_QUEUED || w->state == SLOT_RUNNING)
		pthread_cond_wait(&w->done, &w->lock);
	int r = take_result(w, ret_result);
	pthread_mutex_unlock(&w->lock);
	return r;
}

void snapw_free(snapw_t *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	while (w->state == SLOT_QUEUED || w->state == SLOT_RUNNING)
		pthread_cond_wait(&w->done, &w->lock);
	w->quit = true;
	pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->done);
	pthread_cond_destroy(&w->work);
	pthread_mutex_destroy(&w->lock);
	free(w->buf);
	free(w);
}
