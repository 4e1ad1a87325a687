/*
 * train_tp: tensor parallelism in the training loop (see train_tp.h).
 */
#include "train_tp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "stinit.h"
#include "train_dev.h"
#include "tpcomm.h"

struct train_tp {
	model_tp_t tp;        /* handed to the model */
	tpcomm_t adapter;     /* tp's collectives over the TP comm (worker/tpcomm.h) */
	int errors_seen;      /* adapter's error already reported */
	size_t *counts;       /* (t) scratch for the trainer's own TP collectives */
	tplayout_t *layouts;  /* (t) every TP rank's layout */
	model_range_t *repl;  /* (n_repl) replicated tensors' local ranges, in order */
	int n_repl;
};

static size_t *s_counts(struct train_tp *x, size_t n_each)
{
	for (int i = 0; i < x->tp.size; i++)
		x->counts[i] = n_each;
	return x->counts;
}

int train_tp_begin(train_t *t)
{
	if (t->tp_size <= 1)
		return RM_EXIT_OK;
	struct train_tp *x = calloc(1, sizeof *x);
	if (!x || !(x->counts = calloc((size_t)t->tp_size, sizeof(size_t))) ||
	    tpcomm_init(&x->adapter, t->tp_comm, &x->tp) < 0) {
		if (x)
			free(x->counts);
		free(x);
		return train_error(t, RM_EXIT_NOMEM, "out of memory");
	}
	t->tpx = x;
	return RM_EXIT_OK;
}

const model_tp_t *train_tp_model(const train_t *t)
{
	return t->tpx ? &t->tpx->tp : NULL;
}

int train_tp_setup(train_t *t)
{
	struct train_tp *x = t->tpx;
	if (!x)
		return RM_EXIT_OK;
	int n;
	const model_tensor_t *tensors = model_tensors(t->model, &n);
	x->layouts = calloc((size_t)t->tp_size, sizeof *x->layouts);
	x->repl = calloc((size_t)(n > 0 ? n : 1), sizeof *x->repl);
	if (!x->layouts || !x->repl)
		return train_error(t, RM_EXIT_NOMEM, "out of memory");
	for (int k = 0; k < t->tp_size; k++) {
		char err[512];
		int rc = tplayout_build(tensors, n, k, t->tp_size, &x->layouts[k], err, sizeof err);
		if (rc < 0)
			return train_error(t, rc == -ENOMEM ? RM_EXIT_NOMEM : RM_EXIT_SPEC,
				       "internal error: the model's tensor-parallel table: %s", err);
	}
	for (int i = 0; i < n; i++)
		if (tensors[i].tp_split == MODEL_TP_REPLICATED)
			x->repl[x->n_repl++] = (model_range_t){tensors[i].offset,
							       tensors[i].offset + tensors[i].numel};
	return RM_EXIT_OK;
}

void train_tp_free(train_t *t)
{
	struct train_tp *x = t->tpx;
	if (!x)
		return;
	for (int k = 0; x->layouts && k < t->tp_size; k++)
		tplayout_free(&x->layouts[k]);
	free(x->layouts);
	free(x->repl);
	free(x->counts);
	tpcomm_free(&x->adapter);
	free(x);
	t->tpx = NULL;
}

const tplayout_t *train_tp_layout(const train_t *t)
{
	return t->tpx && t->tpx->layouts ? &t->tpx->layouts[t->tp_rank] : NULL;
}

bool train_tp_failed(train_t *t)
{
	if (!t->tpx || t->tpx->errors_seen || tpcomm_error(&t->tpx->adapter) == 0)
		return false;
	t->tpx->errors_seen = 1; /* the comm fails every later call: reported once */
	return true;
}

/* ---- the gradient norm ---- */

double train_tp_sum_squares(train_t *t, bool shard)
{
	const struct train_tp *x = t->tpx;
	const float *g = t->dev->grads(t, shard);
	size_t lo = shard ? t->shard_lo : 0, count = shard ? t->shard_count : t->n_params;
	if (!x || t->tp_rank == 0)
		return t->dev->sum_squares(t, g, count);
	double sum = 0;
	size_t at = lo, hi = lo + count;
	for (int i = 0; i < x->n_repl && at < hi; i++) { /* the pieces between replicated tensors */
		size_t a = x->repl[i].lo, b = x->repl[i].hi;
		if (b <= at)
			continue;
		size_t end = a < hi ? a : hi;
		if (end > at)
			sum += t->dev->sum_squares(t, g + (at - lo), end - at);
		at = b > at ? b : at;
	}
	if (at < hi)
		sum += t->dev->sum_squares(t, g + (at - lo), hi - at);
	return sum;
}

int train_tp_sum(train_t *t, double part, double *ret_sum)
{
	float mine[2] = {(float)part, 0};
	mine[1] = (float)(part - (double)mine[0]);
	float *all = malloc(2 * (size_t)t->tp_size * sizeof(float));
	if (!all)
		return -ENOMEM;
	int rc = t->dev->allgather_host(t, t->tp_comm, mine, all, s_counts(t->tpx, 2));
	double sum = 0;
	for (int k = 0; rc == 0 && k < t->tp_size; k++)
		sum += (double)all[2 * k] + (double)all[2 * k + 1];
	free(all);
	if (rc == 0)
		*ret_sum = sum;
	return rc;
}

/* ---- the logical layout: snapshots and initialisation ---- */

/* zero3: the parameters are the shard_t's master shard (the model has none). */
static bool s_zero3(const train_t *t)
{
	return t->sharding == JOBSPEC_SHARDING_ZERO3 && t->zero && !t->dev->mirror;
}

/* zero3 with a host mirror (the GPU): the mirror's buffer holds the master
 * shard's range only (train_dev_cuda.c), the rest is stale. */
static bool s_zero3_mirror(const train_t *t)
{
	return t->sharding == JOBSPEC_SHARDING_ZERO3 && t->zero && t->dev->mirror;
}

/* The whole local buffer of a DP-sharded `shard` into full (n_local), on
 * host memory (the device row stages a collective through its own). */
static int s_dp_whole(train_t *t, const float *shard, float *full)
{
	if (!t->sharded) {
		memcpy(full, shard, t->n_params * sizeof(float));
		return 0;
	}
	const float *mine = t->shard_count ? shard : full; /* an empty shard sends nothing */
	return t->dev->allgather_host(t, t->comm, mine, full, t->shard_counts);
}

int train_tp_snapshot(train_t *t, int64_t lo, int64_t count, float **ret_p, float **ret_m, float **ret_v)
{
	struct train_tp *x = t->tpx;
	const size_t n = t->n_params, T = (size_t)t->tp_size;
	float *whole = malloc(n * sizeof(float)), *all = malloc(T * n * sizeof(float));
	float *out[3] = {NULL, NULL, NULL};
	int rc = whole && all ? 0 : -ENOMEM;
	for (int i = 0; i < 3 && rc == 0 && count > 0; i++)
		if (!(out[i] = malloc((size_t)count * sizeof(float))))
			rc = -ENOMEM;
	/* params are whole on every rank (zero1/zero2's gather ran) or, zero3,
	 * the DP shards of the master; m and v are DP shards */
	const bool zero3 = s_zero3(t) || s_zero3_mirror(t);
	const float *p0 = s_zero3(t) ? shard_params(t->zero)
		: s_zero3_mirror(t) ? model_params(t->model) + t->shard_lo : model_params(t->model);
	const float *src[3] = {p0, t->adam_m, t->adam_v};
	for (int i = 0; i < 3 && rc == 0; i++) {
		if (i == 0 && !zero3)
			memcpy(whole, src[0], n * sizeof(float));
		else
			rc = s_dp_whole(t, src[i], whole);
		if (rc == 0)
			rc = t->dev->allgather_host(t, t->tp_comm, whole, all, s_counts(x, n));
		for (int k = 0; rc == 0 && count > 0 && k < t->tp_size; k++)
			tplayout_to_logical(&x->layouts[k], all + (size_t)k * n, (size_t)lo, (size_t)count, k == 0,
					    out[i]);
	}
	free(whole);
	free(all);
	if (rc < 0) {
		for (int i = 0; i < 3; i++)
			free(out[i]);
		return rc;
	}
	*ret_p = out[0];
	*ret_m = out[1];
	*ret_v = out[2];
	return 0;
}

typedef struct {
	const stinit_t *st;
	float *out; /* local element lo */
	size_t lo;
} s_st_t;

static int s_st_piece(void *ctx, size_t local_off, size_t logical_off, size_t n)
{
	s_st_t *c = ctx;
	stinit_read_range(c->st, logical_off, logical_off + n, c->out + (local_off - c->lo));
	return 0;
}

int train_tp_init_pretrained(train_t *t)
{
	const tplayout_t *l = train_tp_layout(t);
	const char *path = t->spec->init.safetensors;
	const char *root = t->opt->data_root && t->opt->data_root[0] ? t->opt->data_root : NULL;
	char err[1024];
	stinit_t *st = NULL;
	int rc = stinit_open(root, path, l->logical, l->n_tensors, t->spec->model.tie_embeddings != 0, &st,
			     err, sizeof err);
	if (rc < 0)
		return train_error(t, rc == -ENOMEM ? RM_EXIT_NOMEM : RM_EXIT_DATA, "%s", err);
	/* zero3: only this rank's DP shard of the local buffer, into the master */
	s_st_t c = {.st = st, .out = model_params(t->model), .lo = 0};
	size_t count = l->n_local;
	if (s_zero3(t)) {
		c = (s_st_t){.st = st, .out = shard_params(t->zero), .lo = t->shard_lo};
		count = t->shard_count;
	}
	if (count > 0)
		tplayout_each_local(l, c.lo, count, s_st_piece, &c);
	if (t->world_rank == 0)
		fprintf(t->opt->json ? t->opt->log : t->opt->out, "init: %d tensors from %s (%d file%s)\n",
			stinit_num_tensors(st), path, stinit_num_files(st), stinit_num_files(st) == 1 ? "" : "s");
	stinit_free(st);
	return RM_EXIT_OK;
}
