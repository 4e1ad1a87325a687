/*
 * comm: the public functions of comm.h, dispatched to the backend a comm_t
 * was built with (comm_impl.h). Gloo's constructor lives in comm_gloo.cc,
 * NCCL's in comm_nccl.c; this file knows neither.
 */
#include "comm_impl.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* ---- sub-groups ---- */

/* A KV whose keys are the inner one's under a prefix. */
typedef struct {
	const comm_kv_t *inner;
	char prefix[64];
} prefixed_kv_t;

static int s_prefixed_key(const prefixed_kv_t *p, const char *key, char **ret_key)
{
	size_t n = strlen(p->prefix) + strlen(key) + 1;
	char *k = malloc(n);
	if (!k)
		return -ENOMEM;
	snprintf(k, n, "%s%s", p->prefix, key);
	*ret_key = k;
	return 0;
}

static int s_prefixed_set(void *ctx, const char *key, const void *value, size_t n)
{
	prefixed_kv_t *p = ctx;
	char *k = NULL;
	int rc = s_prefixed_key(p, key, &k);
	if (rc == 0)
		rc = p->inner->set(p->inner->ctx, k, value, n);
	free(k);
	return rc;
}

static int s_prefixed_get(void *ctx, const char *key, int timeout_ms, void **ret_value, size_t *ret_n)
{
	prefixed_kv_t *p = ctx;
	char *k = NULL;
	int rc = s_prefixed_key(p, key, &k);
	if (rc == 0)
		rc = p->inner->get(p->inner->ctx, k, timeout_ms, ret_value, ret_n);
	free(k);
	return rc;
}

/* Rank `rank`'s place in its colour's group: the group's size and the
 * rank's index, ordered by (key, rank). `pairs` holds (colour, key) per rank. */
static void s_group_place(const int32_t *pairs, int world_size, int rank, int *ret_size,
                          int *ret_index)
{
	int32_t colour = pairs[2 * rank], key = pairs[2 * rank + 1];
	int size = 0, index = 0;
	for (int r = 0; r < world_size; r++) {
		if (pairs[2 * r] != colour)
			continue;
		size++;
		int32_t k = pairs[2 * r + 1];
		if (k < key || (k == key && r < rank))
			index++;
	}
	*ret_size = size;
	*ret_index = index;
}

comm_t *comm_split(comm_t *c, const comm_kv_t *kv, int colour, int key, char *err, size_t errlen)
{
	if (errlen)
		err[0] = '\0';
	int seq = c->n_splits++;
	if (!kv || !kv->set || !kv->get || !c->ops->allgather_bytes || !c->ops->sub_new) {
		snprintf(err, errlen, "comm: split: %s",
		         !kv || !kv->set || !kv->get ? "no rendezvous store" : "this backend cannot split");
		return NULL;
	}
	if (colour < 0)
		colour = COMM_NO_GROUP;
	int32_t mine[2] = {colour, key};
	int32_t *pairs = malloc((size_t)c->world_size * sizeof mine);
	if (!pairs) {
		snprintf(err, errlen, "comm: split: out of memory for %d ranks", c->world_size);
		return NULL;
	}
	int rc = c->ops->allgather_bytes(c->impl, mine, pairs, sizeof mine);
	if (rc < 0) {
		snprintf(err, errlen, "comm: split: exchanging colours failed: %s", comm_last_error(c));
		free(pairs);
		return NULL;
	}
	int size = 0, index = 0;
	s_group_place(pairs, c->world_size, c->rank, &size, &index);
	free(pairs);
	if (colour == COMM_NO_GROUP)
		return NULL;
	prefixed_kv_t p = {.inner = kv};
	snprintf(p.prefix, sizeof p.prefix, "split/%d/%d/", seq, colour);
	comm_kv_t sub_kv = {.ctx = &p, .set = s_prefixed_set, .get = s_prefixed_get};
	char why[384];
	comm_t *sub = c->ops->sub_new(c->impl, &sub_kv, index, size, why, sizeof why);
	if (!sub)
		snprintf(err, errlen, "comm: split %d, colour %d (rank %d of %d there): %s", seq, colour,
		         index, size, why);
	return sub;
}
