/*
 * jobspec_equal: field-by-field equality of two parsed job specs (strings
 * by content), shared by the unit tests' harness (jobspec_harness.h) and
 * the fuzzer's round-trip check (tests/fuzz/fuzz_jobspec.c), so that a
 * field added to jobspec_t is compared in both. Header-only.
 */
#ifndef RINGMASTER_TESTS_JOBSPEC_EQUAL_H
#define RINGMASTER_TESTS_JOBSPEC_EQUAL_H

#include <stdbool.h>
#include <string.h>

#include "jobspec.h"

static inline bool s_spec_equal(const jobspec_t *a, const jobspec_t *b)
{
#define SAME_STR(x, y) (((x) == NULL && (y) == NULL) || ((x) && (y) && strcmp((x), (y)) == 0))
	return SAME_STR(a->name, b->name) && strcmp(a->model.arch, b->model.arch) == 0 &&
	       a->model.n_layer == b->model.n_layer && a->model.n_head == b->model.n_head &&
	       a->model.n_embd == b->model.n_embd && a->model.vocab_size == b->model.vocab_size &&
	       a->model.seq_len == b->model.seq_len && SAME_STR(a->data.train, b->data.train) &&
	       SAME_STR(a->data.val, b->data.val) && a->data.format == b->data.format &&
	       a->train.steps == b->train.steps && a->train.batch_size == b->train.batch_size &&
	       a->train.grad_accum == b->train.grad_accum && a->train.lr == b->train.lr &&
	       a->train.warmup_steps == b->train.warmup_steps &&
	       a->train.lr_schedule == b->train.lr_schedule && a->train.min_lr == b->train.min_lr &&
	       a->train.weight_decay == b->train.weight_decay &&
	       a->train.grad_clip == b->train.grad_clip && a->train.seed == b->train.seed &&
	       a->train.eval_every == b->train.eval_every &&
	       a->train.eval_batches == b->train.eval_batches &&
	       a->train.precision == b->train.precision &&
	       a->parallel.world_size == b->parallel.world_size &&
	       a->parallel.device == b->parallel.device &&
	       a->parallel.sharding == b->parallel.sharding &&
	       a->parallel.ranks_per_node == b->parallel.ranks_per_node &&
	       a->parallel.tensor == b->parallel.tensor &&
	       a->program.argc == b->program.argc && SAME_STR(a->program.cwd, b->program.cwd) &&
	       a->checkpoint.every_steps == b->checkpoint.every_steps &&
	       a->checkpoint.keep_last == b->checkpoint.keep_last &&
	       a->checkpoint.keep_every == b->checkpoint.keep_every &&
	       a->restart.max_restarts == b->restart.max_restarts && a->priority == b->priority &&
	       SAME_STR(a->resume_from.job, b->resume_from.job) &&
	       a->resume_from.step == b->resume_from.step &&
	       a->profile.start_step == b->profile.start_step && a->profile.end_step == b->profile.end_step &&
	       a->model.n_kv_head == b->model.n_kv_head && a->model.ffn_dim == b->model.ffn_dim &&
	       a->model.rope_theta == b->model.rope_theta &&
	       a->model.rope_scaling.factor == b->model.rope_scaling.factor &&
	       a->model.rope_scaling.low_freq_factor == b->model.rope_scaling.low_freq_factor &&
	       a->model.rope_scaling.high_freq_factor == b->model.rope_scaling.high_freq_factor &&
	       a->model.rope_scaling.original_max_position == b->model.rope_scaling.original_max_position &&
	       a->model.norm_eps == b->model.norm_eps && a->model.tie_embeddings == b->model.tie_embeddings &&
	       strcmp(a->model.preset, b->model.preset) == 0 &&
	       SAME_STR(a->init.safetensors, b->init.safetensors);
#undef SAME_STR
}

#endif
