/*
 * libFuzzer harness for the job spec parser. Any input must be either refused
 * with a pointer and a message, or accepted; an accepted spec must survive
 * to_json -> text -> parse unchanged. Anything else aborts.
 */
#include "jobspec.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool s_same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool s_spec_equal(const jobspec_t *a, const jobspec_t *b)
{
	return s_same_str(a->name, b->name) && strcmp(a->model.arch, b->model.arch) == 0 &&
	       a->model.n_layer == b->model.n_layer && a->model.n_head == b->model.n_head &&
	       a->model.n_embd == b->model.n_embd && a->model.vocab_size == b->model.vocab_size &&
	       a->model.seq_len == b->model.seq_len && s_same_str(a->data.train, b->data.train) &&
	       s_same_str(a->data.val, b->data.val) && a->data.format == b->data.format &&
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
	       a->checkpoint.every_steps == b->checkpoint.every_steps &&
	       a->checkpoint.keep_last == b->checkpoint.keep_last &&
	       a->checkpoint.keep_every == b->checkpoint.keep_every &&
	       a->restart.max_restarts == b->restart.max_restarts && a->priority == b->priority;
}

static void s_die(const char *what)
{
	fprintf(stderr, "fuzz_jobspec: %s\n", what);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	jobspec_t spec, again;
	jobspec_error_t err;
	int rc;

	memset(&err, 0, sizeof(err));
	rc = jobspec_parse((const char *)data, size, &spec, &err);
	if (rc < 0) {
		/* Refusals are well formed: a pointer that is "" or starts with
		 * "/", and a message. */
		if (err.message[0] == '\0')
			s_die("refused without a message");
		if (err.pointer[0] != '\0' && err.pointer[0] != '/')
			s_die("refused with a malformed pointer");
		if (memchr(err.pointer, '\0', sizeof(err.pointer)) == NULL ||
		    memchr(err.message, '\0', sizeof(err.message)) == NULL)
			s_die("error strings not terminated");
		return 0;
	}

	json_t *j1 = jobspec_to_json(&spec);
	if (!j1)
		s_die("to_json failed");
	char *text = json_dumps(j1, JSON_COMPACT);
	if (!text)
		s_die("json_dumps failed");
	rc = jobspec_parse(text, strlen(text), &again, &err);
	if (rc < 0) {
		fprintf(stderr, "%s\n%s %s\n", text, err.pointer, err.message);
		s_die("to_json output refused");
	}
	if (!s_spec_equal(&spec, &again))
		s_die("round trip changed the spec");
	json_t *j2 = jobspec_to_json(&again);
	if (!j2 || !json_equal(j1, j2))
		s_die("round trip changed the JSON");

	json_decref(j2);
	json_decref(j1);
	free(text);
	jobspec_free(&again);
	jobspec_free(&spec);
	return 0;
}
