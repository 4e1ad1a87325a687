/*
 * tpcomm: model_tp_t over a comm_t (see tpcomm.h).
 */
#include "tpcomm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static void s_note(tpcomm_t *s, int rc)
{
	if (rc == 0 || s->error != 0)
		return;
	s->error = rc;
	snprintf(s->error_line, sizeof s->error_line, "%s", comm_last_error(s->comm));
}

static void s_counts(tpcomm_t *s, size_t n_each)
{
	for (int i = 0; i < s->size; i++)
		s->counts[i] = n_each;
}

static void s_allgather(void *ctx, const float *in, float *out, size_t n_each)
{
	tpcomm_t *s = ctx;
	s_counts(s, n_each);
	s_note(s, comm_allgather_f32(s->comm, in, out, s->counts));
}

static void s_reduce_scatter(void *ctx, const float *in, float *out, size_t n_each)
{
	tpcomm_t *s = ctx;
	s_counts(s, n_each);
	s_note(s, comm_reduce_scatter_sum_f32(s->comm, in, out, s->counts));
}

static void s_allreduce(void *ctx, float *buf, size_t n)
{
	tpcomm_t *s = ctx;
	s_note(s, comm_allreduce_sum_f32(s->comm, buf, n));
}

int tpcomm_init(tpcomm_t *s, comm_t *comm, model_tp_t *ret)
{
	s->comm = comm;
	s->size = comm_world_size(comm);
	s->error = 0;
	s->error_line[0] = '\0';
	s->counts = calloc((size_t)s->size, sizeof *s->counts);
	if (!s->counts)
		return -ENOMEM;
	*ret = (model_tp_t){
		.ctx = s,
		.rank = comm_rank(comm),
		.size = s->size,
		.sequence_parallel = true,
		.allgather = s_allgather,
		.reduce_scatter = s_reduce_scatter,
		.allreduce = s_allreduce,
	};
	return 0;
}

void tpcomm_free(tpcomm_t *s)
{
	free(s->counts);
	s->counts = NULL;
}

int tpcomm_error(const tpcomm_t *s)
{
	return s->error;
}
