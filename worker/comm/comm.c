/*
 * comm: the public functions of comm.h, dispatched to the backend a comm_t
 * was built with (comm_impl.h). Gloo's constructor lives in comm_gloo.cc,
 * NCCL's in comm_nccl.c; this file knows neither.
 */
#include "comm_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sysexits.h>

comm_t *comm_make(const comm_ops_t *ops, void *impl, int rank, int world_size)
{
	comm_t *c = malloc(sizeof *c);
	if (!c)
		return NULL;
	*c = (comm_t){.ops = ops, .impl = impl, .rank = rank, .world_size = world_size};
	return c;
}

int comm_rank(const comm_t *c)
{
	return c->rank;
}

int comm_world_size(const comm_t *c)
{
	return c->world_size;
}

void *comm_nccl_stream(const comm_t *c)
{
	return c && c->ops->stream ? c->ops->stream(c->impl) : NULL;
}

void comm_set_timeout(comm_t *c, int timeout_ms)
{
	c->ops->set_timeout(c->impl, timeout_ms);
}

int comm_allreduce_sum_f32(comm_t *c, float *buf, size_t n)
{
	return c->ops->allreduce_sum_f32(c->impl, buf, n);
}

int comm_allreduce_sum_f32_async(comm_t *c, float *buf, size_t n, void *after_event)
{
	if (!c->ops->allreduce_sum_f32_async)
		return c->ops->allreduce_sum_f32(c->impl, buf, n);
	return c->ops->allreduce_sum_f32_async(c->impl, buf, n, after_event);
}

int comm_wait(comm_t *c)
{
	return c->ops->wait ? c->ops->wait(c->impl) : 0;
}

int comm_reduce_scatter_sum_f32(comm_t *c, const float *in, float *out, const size_t *counts)
{
	return c->ops->reduce_scatter_sum_f32(c->impl, in, out, counts);
}

/* Ranks whose range counts fit on the stack; more are malloc'ed. */
#define RANGE_STACK_RANKS 256

int comm_reduce_scatter_range_sum_f32_async(comm_t *c, const float *in, float *out,
                                            const size_t *counts, size_t lo, size_t n,
                                            void *after_event)
{
	int W = c->world_size;
	size_t total = 0;
	for (int r = 0; r < W; r++)
		total += counts[r];
	if (lo > total || n > total - lo) {
		fprintf(stderr,
		        "ringworker: fatal: comm_reduce_scatter_range_sum_f32_async: the range [%zu, "
		        "%zu + %zu) runs past the %zu elements of the counts\n",
		        lo, lo, n, total);
		exit(EX_SOFTWARE);
	}
	size_t stack[RANGE_STACK_RANKS];
	size_t *sub = W <= RANGE_STACK_RANKS ? stack : malloc((size_t)W * sizeof *sub);
	if (!sub)
		return -ENOMEM;
	/* Each rank's part of [lo, lo + n): the parts are contiguous and in
	 * rank order, so the range is a reduce-scatter of its own with these
	 * counts, from in + lo, into this rank's part from where the range
	 * enters it. */
	size_t off = 0, hi = lo + n, out_at = 0;
	for (int r = 0; r < W; r++) {
		size_t a = lo > off ? lo : off;
		size_t b = hi < off + counts[r] ? hi : off + counts[r];
		sub[r] = b > a ? b - a : 0;
		if (r == c->rank && sub[r])
			out_at = a - off;
		off += counts[r];
	}
	int rc;
	if (c->ops->reduce_scatter_sum_f32_async)
		rc = c->ops->reduce_scatter_sum_f32_async(c->impl, in + lo, out + out_at, sub,
		                                         after_event);
	else
		rc = c->ops->reduce_scatter_sum_f32(c->impl, in + lo, out + out_at, sub);
	if (sub != stack)
		free(sub);
	return rc;
}

int comm_allgather_f32(comm_t *c, const float *in, float *out, const size_t *counts)
{
	return c->ops->allgather_f32(c->impl, in, out, counts);
}

int comm_broadcast(comm_t *c, void *buf, size_t bytes, int root)
{
	return c->ops->broadcast(c->impl, buf, bytes, root);
}

int comm_barrier(comm_t *c)
{
	return c->ops->barrier(c->impl);
}

void comm_abort(comm_t *c)
{
	if (c)
		c->ops->abort(c->impl);
}

void comm_cancel(comm_t *c)
{
	if (c && c->ops->cancel)
		c->ops->cancel(c->impl);
}

const char *comm_last_error(const comm_t *c)
{
	return c->ops->last_error(c->impl);
}

void comm_free(comm_t *c)
{
	if (!c)
		return;
	c->ops->free(c->impl);
	free(c);
}
