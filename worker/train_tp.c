/*
 * train_tp: tensor parallelism in the training loop (see train_tp.h).
 */
#include "train_tp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "stinit.h"

struct train_tp {
	model_tp_t tp;        /* handed to the model */
	comm_t *comm;         /* the TP comm (borrowed) */
	size_t *counts;       /* (t) scratch for the collectives' counts */
	bool failed;          /* a collective inside the model failed */
	tplayout_t *layouts;  /* (t) every TP rank's layout */
	model_range_t *repl;  /* (n_repl) replicated tensors' local ranges, in order */
	int n_repl;
};

/* ---- the model's collectives over the TP comm ---- */

static size_t *s_counts(struct train_tp *x, size_t n_each)
{
	for (int i = 0; i < x->tp.size; i++)
		x->counts[i] = n_each;
	return x->counts;
}

static void s_allgather(void *ctx, const float *in, float *out, size_t n_each)
{
	struct train_tp *x = ctx;
	if (!x->failed && comm_allgather_f32(x->comm, in, out, s_counts(x, n_each)) < 0)
		x->failed = true;
}

static void s_reduce_scatter(void *ctx, const float *in, float *out, size_t n_each)
{
	struct train_tp *x = ctx;
	if (!x->failed && comm_reduce_scatter_sum_f32(x->comm, in, out, s_counts(x, n_each)) < 0)
		x->failed = true;
}

static void s_allreduce(void *ctx, float *buf, size_t n)
{
	struct train_tp *x = ctx;
	if (!x->failed && comm_allreduce_sum_f32(x->comm, buf, n) < 0)
		x->failed = true;
}

int train_tp_begin(train_t *t)
{
	if (t->tp_size <= 1)
		return RM_EXIT_OK;
	struct train_tp *x = calloc(1, sizeof *x);
	if (!x || !(x->counts = calloc((size_t)t->tp_size, sizeof(size_t)))) {
		free(x);
		return train_error(t, RM_EXIT_NOMEM, "out of memory");
	}
	x->comm = t->tp_comm;
	x->tp = (model_tp_t){.ctx = x, .rank = t->tp_rank, .size = t->tp_size, .sequence_parallel = true,
			     .allgather = s_allgather, .reduce_scatter = s_reduce_scatter,
			     .allreduce = s_allreduce};
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
	free(x);
	t->tpx = NULL;
}

const tplayout_t *train_tp_layout(const train_t *t)
{
	return t->tpx && t->tpx->layouts ? &t->tpx->layouts[t->tp_rank] : NULL;
}

bool train_tp_failed(train_t *t)
{
	if (!t->tpx)
		return false;
	bool f = t->tpx->failed;
	t->tpx->failed = false;
	return f;
}

/* ---- the gradient norm ---- */

double train_tp_sum_squares(const train_t *t, const float *g, size_t lo, size_t count)
{
	const struct train_tp *x = t->tpx;
	if (!x || t->tp_rank == 0)
		return optim_sum_squares(g, count);
	double sum = 0;
	size_t at = lo, hi = lo + count;
	for (int i = 0; i < x->n_repl && at < hi; i++) { /* the pieces between replicated tensors */
		size_t a = x->repl[i].lo, b = x->repl[i].hi;
		if (b <= at)
			continue;
		size_t end = a < hi ? a : hi;
		if (end > at)
			sum += optim_sum_squares(g + (at - lo), end - at);
		at = b > at ? b : at;
	}
	if (at < hi)
		sum += optim_sum_squares(g + (at - lo), hi - at);
	return sum;
}

int train_tp_sum(train_t *t, double part, double *ret_sum)
{
	float mine[2] = {(float)part, 0};
	mine[1] = (float)(part - (double)mine[0]);
	float *all = malloc(2 * (size_t)t->tp_size * sizeof(float));
	if (!all)
		return -ENOMEM;
	int rc = comm_allgather_f32(t->tp_comm, mine, all, s_counts(t->tpx, 2));
	double sum = 0;
	for (int k = 0; rc == 0 && k < t->tp_size; k++)
		sum += (double)all[2 * k] + (double)all[2 * k + 1];
	free(all);
	if (rc == 0)
		*ret_sum = sum;
	return rc;
}

/* ---- the logical layout: snapshots and initialisation ---- */

/* The whole local buffer of a DP-sharded `shard` into full (n_local). */
static int s_dp_whole(train_t *t, const float *shard, float *full)
{
	if (!t->sharded) {
		memcpy(full, shard, t->n_params * sizeof(float));
		return 0;
	}
	const float *mine = t->shard_count ? shard : full; /* an empty shard sends nothing */
	return comm_allgather_f32(t->comm, mine, full, t->shard_counts);
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
	/* params are whole on every rank (zero1's gather ran); m and v are DP shards */
	const float *src[3] = {model_params(t->model), t->adam_m, t->adam_v};
	for (int i = 0; i < 3 && rc == 0; i++) {
		if (i == 0)
			memcpy(whole, src[0], n * sizeof(float));
		else
			rc = s_dp_whole(t, src[i], whole);
		if (rc == 0)
			rc = comm_allgather_f32(t->tp_comm, whole, all, s_counts(x, n));
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

int train_tp_init(train_t *t, const model_config_t *cfg)
{
	const tplayout_t *l = train_tp_layout(t);
	model_t *one = NULL;
	model_options_t mo = {.max_B = 1, .max_T = 1};
	char err[512] = "";
	int rc = model_create(t->spec->model.arch, MODEL_DEVICE_CPU, cfg, &mo, &one, err, sizeof err);
	if (rc < 0)
		return train_error(t, rc == -ENOMEM ? RM_EXIT_NOMEM : RM_EXIT_SPEC,
			       "the t = 1 model for the initial values: %s", err);
	float *logical = model_params(one);
	model_init_params(one, t->spec->train.seed);
	const char *path = t->spec->init.safetensors;
	if (path) {
		const char *root = t->opt->data_root && t->opt->data_root[0] ? t->opt->data_root : NULL;
		stinit_t *st = NULL;
		rc = stinit_open(root, path, l->logical, l->n_tensors, t->spec->model.tie_embeddings != 0, &st,
				 err, sizeof err);
		if (rc < 0) {
			model_free(one);
			return train_error(t, rc == -ENOMEM ? RM_EXIT_NOMEM : RM_EXIT_DATA, "%s", err);
		}
		stinit_read_range(st, 0, l->n_logical, logical);
		if (t->world_rank == 0)
			fprintf(t->opt->json ? t->opt->log : t->opt->out, "init: %d tensors from %s (%d file%s)\n",
				stinit_num_tensors(st), path, stinit_num_files(st),
				stinit_num_files(st) == 1 ? "" : "s");
		stinit_free(st);
	}
	tplayout_from_logical(l, logical, 0, l->n_local, model_params(t->model));
	model_free(one);
	return RM_EXIT_OK;
}
