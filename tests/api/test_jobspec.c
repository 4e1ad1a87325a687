/*
 * Unit tests for api/jobspec: every field valid, missing (default), of the
 * wrong type and out of range; unknown fields; the cross-field rules; error
 * pointers and messages; the to_json round trip. A tiny harness: each CHECK
 * that fails prints file:line and the test goes on; the summary line is
 * "N passed, M failed" and the exit status is non-zero on any failure.
 */
#include "jobspec.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobspec_harness.h"

/* ---- tests (the harness: jobspec_harness.h) ---- */

static void test_minimal_gets_defaults(void)
{
	jobspec_t s;
	jobspec_error_t err;
	CHECK(s_parse(MINIMAL, &s, &err) == 0);
	CHECK_STR(s.name, "unnamed");
	CHECK_STR(s.model.arch, "gpt2");
	CHECK(s.model.n_layer == 6);
	CHECK(s.model.n_head == 6);
	CHECK(s.model.n_embd == 384);
	CHECK(s.model.vocab_size == 256);
	CHECK(s.model.seq_len == 256);
	CHECK_STR(s.data.train, "shards/train_*.bin");
	CHECK(s.data.val == NULL);
	CHECK(s.data.format == JOBSPEC_FORMAT_NANOGPT);
	CHECK(s.train.steps == 1000);
	CHECK(s.train.batch_size == 8);
	CHECK(s.train.grad_accum == 1);
	CHECK(s.train.lr == 6e-4);
	CHECK(s.train.warmup_steps == 100);
	CHECK(s.train.lr_schedule == JOBSPEC_SCHEDULE_COSINE);
	CHECK(s.train.min_lr == 6e-5);
	CHECK(s.train.weight_decay == 0.1);
	CHECK(s.train.grad_clip == 1.0);
	CHECK(s.train.seed == 1337);
	CHECK(s.train.eval_every == 100);
	CHECK(s.train.eval_batches == 8);
	CHECK(s.train.precision == JOBSPEC_PRECISION_FP32);
	CHECK(s.parallel.world_size == 1);
	CHECK(s.parallel.device == JOBSPEC_DEVICE_CPU);
	CHECK(s.parallel.sharding == JOBSPEC_SHARDING_NONE);
	CHECK(s.checkpoint.every_steps == 100);
	CHECK(s.checkpoint.keep_last == 3);
	CHECK(s.checkpoint.keep_every == 0);
	CHECK(s.restart.max_restarts == 3);
	CHECK(s.priority == 0);
	s_check_round_trip(&s);
	jobspec_free(&s);
}

static const char *const s_full =
	"{\"name\": \"gpt2-small run 7\","
	" \"model\": {\"arch\": \"gpt2\", \"n_layer\": 12, \"n_head\": 12, \"n_embd\": 768,"
	"            \"vocab_size\": 50257, \"seq_len\": 1024},"
	" \"data\": {\"train\": \"fineweb/train_*.bin\", \"val\": \"fineweb/val_*.bin\","
	"           \"format\": \"llmc\"},"
	" \"train\": {\"steps\": 19073, \"batch_size\": 16, \"grad_accum\": 4, \"lr\": 0.0018,"
	"            \"warmup_steps\": 700, \"lr_schedule\": \"constant\", \"min_lr\": 0,"
	"            \"weight_decay\": 0, \"grad_clip\": 0, \"seed\": 9007199254740991,"
	"            \"eval_every\": 0, \"eval_batches\": 20, \"precision\": \"bf16\"},"
	" \"parallel\": {\"world_size\": 8, \"device\": \"cuda\", \"sharding\": \"none\"},"
	" \"checkpoint\": {\"every_steps\": 0, \"keep_last\": 1, \"keep_every\": 5000},"
	" \"restart\": {\"max_restarts\": 0},"
	" \"priority\": -1000}";

static void test_full_spec(void)
{
	jobspec_t s;
	jobspec_error_t err;
	int rc = s_parse(s_full, &s, &err);
	CHECK(rc == 0);
	if (rc != 0) {
		fprintf(stderr, "  %s %s\n", err.pointer, err.message);
		return;
	}
	CHECK_STR(s.name, "gpt2-small run 7");
	CHECK(s.model.n_layer == 12 && s.model.n_head == 12 && s.model.n_embd == 768);
	CHECK(s.model.vocab_size == 50257 && s.model.seq_len == 1024);
	CHECK_STR(s.data.train, "fineweb/train_*.bin");
	CHECK_STR(s.data.val, "fineweb/val_*.bin");
	CHECK(s.data.format == JOBSPEC_FORMAT_LLMC);
	CHECK(s.train.steps == 19073 && s.train.batch_size == 16 && s.train.grad_accum == 4);
	CHECK(s.train.lr == 0.0018 && s.train.warmup_steps == 700);
	CHECK(s.train.lr_schedule == JOBSPEC_SCHEDULE_CONSTANT);
	CHECK(s.train.min_lr == 0 && s.train.weight_decay == 0 && s.train.grad_clip == 0);
	CHECK(s.train.seed == 9007199254740991ULL);
	CHECK(s.train.eval_every == 0 && s.train.eval_batches == 20);
	CHECK(s.train.precision == JOBSPEC_PRECISION_BF16);
	CHECK(s.parallel.world_size == 8 && s.parallel.device == JOBSPEC_DEVICE_CUDA);
	CHECK(s.parallel.sharding == JOBSPEC_SHARDING_NONE);
	CHECK(s.checkpoint.every_steps == 0 && s.checkpoint.keep_last == 1);
	CHECK(s.checkpoint.keep_every == 5000);
	CHECK(s.restart.max_restarts == 0);
	CHECK(s.priority == -1000);
	s_check_round_trip(&s);
	jobspec_free(&s);
}

/* One accepted value per field, checked through to_json. */
static const struct {
	const char *pointer;
	const char *value; /* JSON */
} s_valid_values[] = {
	{"/name", "\"x\""},
	{"/model/arch", "\"gpt2\""},
	{"/model/n_layer", "1"}, {"/model/n_layer", "1024"},
	{"/model/n_head", "1"}, {"/model/n_head", "128"},
	{"/model/n_embd", "6"}, {"/model/n_embd", "65532"},
	{"/model/vocab_size", "1"}, {"/model/vocab_size", "65536"},
	{"/model/seq_len", "1"}, {"/model/seq_len", "1048576"},
	{"/data/train", "\"a\""},
	{"/data/val", "\"val.bin\""}, {"/data/val", "null"},
	{"/data/format", "\"nanogpt\""}, {"/data/format", "\"llmc\""}, {"/data/format", "\"text\""},
	{"/train/steps", "100"}, {"/train/steps", "1000000000"},
	{"/train/batch_size", "1"}, {"/train/batch_size", "65536"},
	{"/train/grad_accum", "1"}, {"/train/grad_accum", "65536"},
	{"/train/lr", "10"}, {"/train/lr", "0.001"}, {"/train/lr", "1e-3"}, {"/train/lr", "1"},
	{"/train/warmup_steps", "0"}, {"/train/warmup_steps", "1000"},
	{"/train/lr_schedule", "\"cosine\""}, {"/train/lr_schedule", "\"constant\""},
	{"/train/min_lr", "0"}, {"/train/min_lr", "0.0006"},
	{"/train/weight_decay", "0"}, {"/train/weight_decay", "10"}, {"/train/weight_decay", "0.01"},
	{"/train/grad_clip", "0"}, {"/train/grad_clip", "1000000"}, {"/train/grad_clip", "0.5"},
	{"/train/seed", "0"}, {"/train/seed", "9007199254740991"},
	{"/train/eval_every", "0"}, {"/train/eval_every", "1000000000"},
	{"/train/eval_batches", "1"}, {"/train/eval_batches", "100000"},
	{"/train/precision", "\"fp32\""}, {"/train/precision", "\"bf16\""},
	{"/parallel/world_size", "1"}, {"/parallel/world_size", "65536"},
	{"/parallel/device", "\"cpu\""}, {"/parallel/device", "\"cuda\""},
	{"/parallel/sharding", "\"none\""}, {"/parallel/sharding", "\"zero1\""},
	{"/parallel/sharding", "\"zero2\""}, {"/parallel/sharding", "\"zero3\""},
	{"/checkpoint/every_steps", "0"}, {"/checkpoint/every_steps", "1000000000"},
	{"/checkpoint/keep_last", "1"}, {"/checkpoint/keep_last", "1000000"},
	{"/checkpoint/keep_every", "0"}, {"/checkpoint/keep_every", "1000000000"},
	{"/restart/max_restarts", "0"}, {"/restart/max_restarts", "1000"},
	{"/priority", "-1000"}, {"/priority", "1000"}, {"/priority", "0"},
};

static void test_valid_values(void)
{
	for (size_t i = 0; i < sizeof(s_valid_values) / sizeof(s_valid_values[0]); i++) {
		jobspec_t s;
		jobspec_error_t err;
		const char *ptr = s_valid_values[i].pointer, *val = s_valid_values[i].value;
		int rc = s_parse_with(ptr, val, &s, &err);
		CHECK(rc == 0);
		if (rc != 0) {
			fprintf(stderr, "  %s = %s refused: %s %s\n", ptr, val, err.pointer,
				err.message);
			continue;
		}
		/* The value comes back out of to_json at the same place. */
		json_t *j = jobspec_to_json(&s);
		json_t *want = json_loads(val, JSON_DECODE_ANY, NULL);
		char path[128];
		snprintf(path, sizeof(path), "%s", ptr + 1);
		char *slash = strchr(path, '/');
		json_t *got;
		if (slash) {
			*slash = '\0';
			got = json_object_get(json_object_get(j, path), slash + 1);
		} else {
			got = json_object_get(j, path);
		}
		bool same = got && (json_equal(got, want) ||
				    (json_is_number(got) && json_is_number(want) &&
				     json_number_value(got) == json_number_value(want)));
		CHECK(same);
		if (!same)
			fprintf(stderr, "  %s = %s did not come back from to_json\n", ptr, val);
		s_check_round_trip(&s);
		json_decref(want);
		json_decref(j);
		jobspec_free(&s);
	}
}

/* Refused values: the pointer and a piece of the message. */
static const struct {
	const char *pointer; /* where the value is set */
	const char *value;   /* JSON */
	const char *want_pointer;
	const char *want_message; /* substring */
} s_bad_values[] = {
	/* name */
	{"/name", "\"\"", "/name", "name must be a string of 1 to 256 bytes (got an empty string)"},
	{"/name", "42", "/name", "name must be a string of 1 to 256 bytes (got 42)"},
	{"/name", "null", "/name", "(got null)"},
	{"/name", "[\"a\"]", "/name", "(got an array)"},
	{"/name", "\"a\\u0000b\"", "", "\\u0000 (NUL) is not allowed in strings"},
	/* sections of the wrong type */
	{"/model", "[]", "/model", "model must be an object (got an array)"},
	{"/data", "\"x\"", "/data", "data must be an object (got the string \"x\")"},
	{"/train", "null", "/train", "train must be an object (got null)"},
	{"/parallel", "1", "/parallel", "parallel must be an object (got 1)"},
	{"/checkpoint", "true", "/checkpoint", "checkpoint must be an object (got true)"},
	{"/restart", "false", "/restart", "restart must be an object (got false)"},
	/* model */
	{"/model/arch", "\"gpt3\"", "/model/arch", "model.arch must be one of \"gpt2\", \"llama\" (got the string \"gpt3\")"},
	{"/model/arch", "\"GPT2\"", "/model/arch", "model.arch must be one of \"gpt2\", \"llama\""},
	{"/model/n_kv_head", "2", "/model/n_kv_head", "model.n_kv_head is a Llama field: set model.arch to \"llama\" or leave model.n_kv_head out (model.arch is \"gpt2\", the default)"},
	{"/model/tie_embeddings", "false", "/model/tie_embeddings", "model.tie_embeddings is a Llama field"},
	{"/model/rope_theta", "10000", "/model/rope_theta", "model.rope_theta is a Llama field"},
	{"/model/arch", "2", "/model/arch", "(got 2)"},
	{"/model/n_layer", "0", "/model/n_layer", "model.n_layer must be an integer between 1 and 1024 (got 0)"},
	{"/model/n_layer", "1025", "/model/n_layer", "(got 1025)"},
	{"/model/n_layer", "-1", "/model/n_layer", "(got -1)"},
	{"/model/n_layer", "6.0", "/model/n_layer", "(got 6, a real number"},
	{"/model/n_layer", "6.5", "/model/n_layer", "(got 6.5, a real number"},
	{"/model/n_layer", "6e0", "/model/n_layer", "a real number"},
	{"/model/n_layer", "\"6\"", "/model/n_layer", "(got the string \"6\")"},
	{"/model/n_layer", "null", "/model/n_layer", "(got null)"},
	{"/model/n_layer", "true", "/model/n_layer", "(got true)"},
	{"/model/n_layer", "{}", "/model/n_layer", "(got an object)"},
	{"/model/n_head", "0", "/model/n_head", "model.n_head must be an integer between 1 and 1024"},
	{"/model/n_head", "2048", "/model/n_head", "(got 2048)"},
	{"/model/n_embd", "0", "/model/n_embd", "model.n_embd must be an integer between 1 and 65536"},
	{"/model/n_embd", "65537", "/model/n_embd", "(got 65537)"},
	{"/model/n_embd", "9223372036854775807", "/model/n_embd", "(got 9223372036854775807)"},
	{"/model/n_embd", "-9223372036854775808", "/model/n_embd", "(got -9223372036854775808)"},
	{"/model/vocab_size", "0", "/model/vocab_size", "model.vocab_size must be an integer between 1 and 1048576"},
	{"/model/vocab_size", "1048577", "/model/vocab_size", "(got 1048577)"},
	{"/model/seq_len", "0", "/model/seq_len", "model.seq_len must be an integer between 1 and 1048576"},
	{"/model/seq_len", "4294967296", "/model/seq_len", "(got 4294967296)"},
	/* data */
	{"/data/train", "\"\"", "/data/train", "data.train must be a string of 1 to 4096 bytes (got an empty string)"},
	{"/data/train", "null", "/data/train", "data.train must be a string of 1 to 4096 bytes (got null)"},
	{"/data/train", "[\"a\", \"b\"]", "/data/train", "(got an array)"},
	{"/data/val", "\"\"", "/data/val", "data.val must be null or a string of 1 to 4096 bytes (got an empty string)"},
	{"/data/val", "7", "/data/val", "(got 7)"},
	{"/data/format", "\"bin\"", "/data/format", "data.format must be one of \"nanogpt\", \"llmc\", \"text\", \"uint32\" (got the string \"bin\")"},
	{"/data/format", "null", "/data/format", "(got null)"},
	{"/data/format", "\"\"", "/data/format", "(got the string \"\")"},
	/* train */
	{"/train/steps", "0", "/train/steps", "train.steps must be an integer between 1 and 1000000000 (got 0)"},
	{"/train/steps", "1000000001", "/train/steps", "train.steps must be an integer between 1 and 1000000000 (got 1000000001)"}, {"/train/steps", "1000000000000", "/train/steps", "(got 1000000000000)"},
	{"/train/steps", "1e6", "/train/steps", "(got 1000000, a real number"},
	{"/train/batch_size", "-3", "/train/batch_size", "train.batch_size must be an integer between 1 and 65536 (got -3)"},
	{"/train/batch_size", "65537", "/train/batch_size", "(got 65537)"},
	{"/train/batch_size", "0", "/train/batch_size", "(got 0)"},
	{"/train/grad_accum", "0", "/train/grad_accum", "train.grad_accum must be an integer between 1 and 65536"},
	{"/train/grad_accum", "\"4\"", "/train/grad_accum", "(got the string \"4\")"},
	{"/train/lr", "0", "/train/lr", "train.lr must be a number greater than 0 and at most 10 (got 0)"},
	{"/train/lr", "-0.001", "/train/lr", "(got -0.001)"},
	{"/train/lr", "10.5", "/train/lr", "(got 10.5)"},
	{"/train/lr", "1e308", "/train/lr", "(got 1e+308)"},
	{"/train/lr", "\"3e-4\"", "/train/lr", "(got the string \"3e-4\")"},
	{"/train/lr", "null", "/train/lr", "(got null)"},
	{"/train/warmup_steps", "-1", "/train/warmup_steps", "train.warmup_steps must be an integer between 0 and 1000000000"},
	{"/train/lr_schedule", "\"linear\"", "/train/lr_schedule", "train.lr_schedule must be one of \"cosine\", \"constant\""},
	{"/train/min_lr", "-1e-9", "/train/min_lr", "train.min_lr must be a number between 0 and 10 (got -1e-09)"},
	{"/train/weight_decay", "11", "/train/weight_decay", "train.weight_decay must be a number between 0 and 10 (got 11)"},
	{"/train/weight_decay", "-0.1", "/train/weight_decay", "(got -0.1)"},
	{"/train/grad_clip", "-1", "/train/grad_clip", "train.grad_clip must be a number between 0 and 1000000 (got -1)"},
	{"/train/grad_clip", "1e7", "/train/grad_clip", "(got 10000000)"},
	{"/train/seed", "-1", "/train/seed", "train.seed must be an integer between 0 and 9007199254740991 (got -1)"},
	{"/train/seed", "9007199254740992", "/train/seed", "(got 9007199254740992)"},
	{"/train/seed", "1.5", "/train/seed", "a real number"},
	{"/train/eval_every", "-1", "/train/eval_every", "train.eval_every must be an integer between 0 and 1000000000"},
	{"/train/eval_batches", "0", "/train/eval_batches", "train.eval_batches must be an integer between 1 and 100000 (got 0)"},
	{"/train/eval_batches", "100001", "/train/eval_batches", "(got 100001)"},
	{"/train/precision", "\"fp16\"", "/train/precision", "train.precision must be one of \"fp32\", \"bf16\" (got the string \"fp16\")"},
	/* parallel */
	{"/parallel/world_size", "0", "/parallel/world_size", "parallel.world_size must be an integer between 1 and 65536 (got 0)"},
	{"/parallel/world_size", "65537", "/parallel/world_size", "(got 65537)"},
	{"/parallel/device", "\"gpu\"", "/parallel/device", "parallel.device must be one of \"cpu\", \"cuda\" (got the string \"gpu\")"},
	{"/parallel/sharding", "\"zero4\"", "/parallel/sharding", "parallel.sharding must be one of \"none\", \"zero1\", \"zero2\", \"zero3\""},
	{"/parallel/sharding", "true", "/parallel/sharding", "(got true)"},
	/* checkpoint, restart, priority */
	{"/checkpoint/every_steps", "-100", "/checkpoint/every_steps", "checkpoint.every_steps must be an integer between 0 and 1000000000 (got -100)"},
	{"/checkpoint/keep_last", "0", "/checkpoint/keep_last", "checkpoint.keep_last must be an integer between 1 and 1000000 (got 0)"},
	{"/checkpoint/keep_every", "-1", "/checkpoint/keep_every", "checkpoint.keep_every must be an integer between 0 and 1000000000"},
	{"/restart/max_restarts", "1001", "/restart/max_restarts", "restart.max_restarts must be an integer between 0 and 1000 (got 1001)"},
	{"/restart/max_restarts", "-1", "/restart/max_restarts", "(got -1)"},
	{"/priority", "1001", "/priority", "priority must be an integer between -1000 and 1000 (got 1001)"},
	{"/priority", "-1001", "/priority", "(got -1001)"},
	{"/priority", "\"high\"", "/priority", "(got the string \"high\")"},
	/* unknown fields, at every level */
	{"/nmae", "\"x\"", "/nmae", "unknown field \"nmae\" at the top level; allowed fields: name, model, data, train, parallel, checkpoint, restart, priority"},
	{"/model/n_heads", "4", "/model/n_heads", "unknown field \"n_heads\" in model; allowed fields: arch, n_layer, n_head, n_embd, vocab_size, seq_len"},
	{"/data/path", "\"x\"", "/data/path", "unknown field \"path\" in data"},
	{"/train/learning_rate", "0.1", "/train/learning_rate", "unknown field \"learning_rate\" in train"},
	{"/parallel/nodes", "2", "/parallel/nodes", "unknown field \"nodes\" in parallel"},
	{"/checkpoint/dir", "\"/tmp\"", "/checkpoint/dir", "unknown field \"dir\" in checkpoint"},
	{"/restart/backoff", "1", "/restart/backoff", "unknown field \"backoff\" in restart"},
	{"/command", "\"rm -rf /\"", "/command", "unknown field \"command\""},
	{"/model/a~b", "1", "/model/a~0b", "unknown field \"a~b\" in model"},
	{"/model/", "1", "/model/", "unknown field \"\" in model"},
};

static void test_bad_values(void)
{
	for (size_t i = 0; i < sizeof(s_bad_values) / sizeof(s_bad_values[0]); i++) {
		jobspec_t s;
		memset(&s, 0xA5, sizeof(s));
		jobspec_t before = s;
		jobspec_error_t err;
		int rc = s_parse_with(s_bad_values[i].pointer, s_bad_values[i].value, &s, &err);
		CHECK(rc == -EINVAL);
		if (rc == 0) {
			fprintf(stderr, "  %s = %s accepted\n", s_bad_values[i].pointer,
				s_bad_values[i].value);
			jobspec_free(&s);
			continue;
		}
		CHECK(memcmp(&s, &before, sizeof(s)) == 0); /* untouched on failure */
		CHECK_STR(err.pointer, s_bad_values[i].want_pointer);
		CHECK_CONTAINS(err.message, s_bad_values[i].want_message);
	}
}

static void test_wrong_types_for_every_int_field(void)
{
	static const char *const int_fields[] = {
		"/model/n_layer", "/model/n_head", "/model/n_embd", "/model/vocab_size",
		"/model/seq_len", "/train/steps", "/train/batch_size", "/train/grad_accum",
		"/train/warmup_steps", "/train/seed", "/train/eval_every", "/train/eval_batches",
		"/parallel/world_size", "/checkpoint/every_steps", "/checkpoint/keep_last",
		"/checkpoint/keep_every", "/restart/max_restarts", "/priority"};
	static const char *const bad[] = {"1.5", "2.0", "\"2\"", "null", "true", "[2]", "{}",
					  "99999999999999999", "-99999999999999999", "1e300"};
	for (size_t f = 0; f < sizeof(int_fields) / sizeof(int_fields[0]); f++) {
		for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
			jobspec_t s;
			jobspec_error_t err;
			int rc = s_parse_with(int_fields[f], bad[b], &s, &err);
			CHECK(rc == -EINVAL);
			if (rc == 0) {
				fprintf(stderr, "  %s = %s accepted\n", int_fields[f], bad[b]);
				jobspec_free(&s);
				continue;
			}
			CHECK_STR(err.pointer, int_fields[f]);
			CHECK_CONTAINS(err.message, "must be an integer between");
		}
	}
}

static void test_wrong_types_for_every_real_and_enum_field(void)
{
	static const char *const fields[] = {
		"/train/lr", "/train/min_lr", "/train/weight_decay", "/train/grad_clip",
		"/model/arch", "/data/format", "/train/lr_schedule", "/train/precision",
		"/parallel/device", "/parallel/sharding", "/name", "/data/train"};
	static const char *const bad[] = {"null", "true", "false", "[]", "{}"};
	for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++) {
		for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
			jobspec_t s;
			jobspec_error_t err;
			int rc = s_parse_with(fields[f], bad[b], &s, &err);
			CHECK(rc == -EINVAL);
			if (rc == 0) {
				jobspec_free(&s);
				continue;
			}
			CHECK_STR(err.pointer, fields[f]);
			/* The message starts with the dotted field name. */
			char dotted[64];
			snprintf(dotted, sizeof(dotted), "%s", fields[f] + 1);
			for (char *p = dotted; *p; p++)
				if (*p == '/')
					*p = '.';
			CHECK(strncmp(err.message, dotted, strlen(dotted)) == 0 ||
			      strstr(err.message, "is required") != NULL);
		}
	}
}

static void test_missing_data_train(void)
{
	static const char *const docs[] = {"{}", "{\"data\": {}}",
					   "{\"data\": {\"val\": \"v.bin\"}}",
					   "{\"name\": \"x\", \"model\": {}}"};
	for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
		jobspec_t s;
		jobspec_error_t err;
		CHECK(s_parse(docs[i], &s, &err) == -EINVAL);
		CHECK_STR(err.pointer, "/data/train");
		CHECK_CONTAINS(err.message, "data.train is required");
	}
}

static void test_empty_sections_get_defaults(void)
{
	jobspec_t s;
	jobspec_error_t err;
	int rc = s_parse("{\"model\": {}, \"data\": {\"train\": \"t\", \"val\": null}, \"train\": {},"
			 " \"parallel\": {}, \"checkpoint\": {}, \"restart\": {}}",
			 &s, &err);
	CHECK(rc == 0);
	if (rc == 0) {
		CHECK(s.model.n_embd == 384 && s.train.steps == 1000 && s.restart.max_restarts == 3);
		CHECK(s.data.val == NULL);
		jobspec_free(&s);
	}
}

static void test_cross_field_rules(void)
{
	/* n_embd % n_head */
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"model\": {\"n_embd\": 100, \"n_head\": 3}}",
			 "/model/n_head", "model.n_embd (100) must be divisible by model.n_head (3)");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"model\": {\"n_head\": 5}}",
			 "/model/n_head", "model.n_embd (384, the default) must be divisible by model.n_head (5)");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"model\": {\"n_embd\": 100}}",
			 "/model/n_embd", "model.n_embd (100) must be divisible by model.n_head (6, the default)");
	s_expect_accepted("{\"data\": {\"train\": \"t\"}, \"model\": {\"n_embd\": 99, \"n_head\": 3}}");
	s_expect_accepted("{\"data\": {\"train\": \"t\"}, \"model\": {\"n_embd\": 7, \"n_head\": 7}}");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"model\": {\"n_embd\": 7, \"n_head\": 8}}",
			 "/model/n_head", "must be divisible");

	/* min_lr <= lr */
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"train\": {\"lr\": 0.001, \"min_lr\": 0.002}}",
			 "/train/min_lr", "train.min_lr (0.002) must be at most train.lr (0.001)");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"train\": {\"lr\": 1e-5}}",
			 "/train/lr", "train.min_lr (6e-05, the default) must be at most train.lr (1e-05)");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"train\": {\"min_lr\": 0.001}}",
			 "/train/min_lr", "train.min_lr (0.001) must be at most train.lr (0.0006, the default)");
	s_expect_accepted("{\"data\": {\"train\": \"t\"}, \"train\": {\"lr\": 0.001, \"min_lr\": 0.001}}");

	/* vocab_size per format */
	s_expect_refused("{\"data\": {\"train\": \"t\", \"format\": \"text\"}, \"model\": {\"vocab_size\": 257}}",
			 "/model/vocab_size", "model.vocab_size (257) must be at most 256 when data.format is \"text\"");
	s_expect_accepted("{\"data\": {\"train\": \"t\", \"format\": \"text\"}, \"model\": {\"vocab_size\": 256}}");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"model\": {\"vocab_size\": 65537}}",
			 "/model/vocab_size", "model.vocab_size (65537) must be at most 65536 when data.format is \"nanogpt\" (tokens are stored as uint16; use data.format \"uint32\"");
	/* llm.c's version-2 shards and uint32 hold any vocabulary (the reader checks each token) */
	s_expect_accepted("{\"data\": {\"train\": \"t\", \"format\": \"llmc\"}, \"model\": {\"vocab_size\": 100000}}");
	s_expect_accepted("{\"data\": {\"train\": \"t\", \"format\": \"uint32\"}, \"model\": {\"vocab_size\": 1048576}}");
	s_expect_accepted("{\"data\": {\"train\": \"t\", \"format\": \"llmc\"}, \"model\": {\"vocab_size\": 65536}}");

	/* warmup_steps <= steps */
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"train\": {\"steps\": 10, \"warmup_steps\": 11}}",
			 "/train/warmup_steps", "train.warmup_steps (11) must be at most train.steps (10)");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"train\": {\"steps\": 50}}",
			 "/train/steps", "train.warmup_steps (100, the default) must be at most train.steps (50); set train.warmup_steps to at most 50");
	s_expect_accepted("{\"data\": {\"train\": \"t\"}, \"train\": {\"steps\": 50, \"warmup_steps\": 50}}");
	s_expect_accepted("{\"data\": {\"train\": \"t\"}, \"train\": {\"steps\": 1, \"warmup_steps\": 0}}");

	/* eval without val is allowed (the evaluation is skipped). */
	s_expect_accepted("{\"data\": {\"train\": \"t\"}, \"train\": {\"eval_every\": 10}}");

	/* cuda: bf16 only (its default there); every sharding mode */
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"train\": {\"precision\": \"fp32\"},"
			 " \"parallel\": {\"device\": \"cuda\"}}",
			 "/train/precision", "train.precision \"fp32\" is not available with parallel.device \"cuda\"");
	s_expect_accepted("{\"data\": {\"train\": \"t\"}, \"parallel\": {\"device\": \"cuda\", \"sharding\": \"zero3\"}}");
	s_expect_accepted("{\"data\": {\"train\": \"t\"}, \"parallel\": {\"device\": \"cuda\", \"sharding\": \"zero2\"}}");
	s_expect_accepted("{\"data\": {\"train\": \"t\"}, \"parallel\": {\"device\": \"cuda\"}}");
	s_expect_accepted("{\"data\": {\"train\": \"t\"}, \"parallel\": {\"device\": \"cuda\", \"sharding\": \"zero1\"}}");
	jobspec_t s;
	jobspec_error_t err;
	CHECK(s_parse("{\"data\": {\"train\": \"t\"}, \"parallel\": {\"device\": \"cuda\"}}", &s, &err) == 0);
	CHECK(s.train.precision == JOBSPEC_PRECISION_BF16); /* the default on cuda */
	jobspec_free(&s);
	CHECK(s_parse("{\"data\": {\"train\": \"t\"}}", &s, &err) == 0);
	CHECK(s.train.precision == JOBSPEC_PRECISION_FP32); /* and on cpu */
	jobspec_free(&s);
}

/* parallel.tensor: world_size = tensor x data-parallel size, and every split
 * dimension divides by it; the errors name both numbers. */
static void test_tensor_parallel(void)
{
	jobspec_t s;
	jobspec_error_t err;
	char *text;

	CHECK(s_parse("{\"data\": {\"train\": \"t\"}}", &s, &err) == 0);
	CHECK(s.parallel.tensor == 1);
	json_t *doc = jobspec_to_json(&s);
	CHECK(json_object_get(json_object_get(doc, "parallel"), "tensor") == NULL); /* same JSON as before */
	json_decref(doc);
	jobspec_free(&s);

	const char *ok = "{\"data\": {\"train\": \"t\"}, \"model\": {\"n_head\": 4, \"n_embd\": 64,"
			 " \"seq_len\": 32}, \"parallel\": {\"world_size\": 4, \"tensor\": 2, \"sharding\": \"zero2\"}}";
	CHECK(s_parse(ok, &s, &err) == 0);
	CHECK(s.parallel.tensor == 2 && s.parallel.world_size == 4);
	doc = jobspec_to_json(&s);
	CHECK(json_integer_value(json_object_get(json_object_get(doc, "parallel"), "tensor")) == 2);
	text = json_dumps(doc, JSON_COMPACT);
	jobspec_t again;
	CHECK(s_parse(text, &again, &err) == 0);
	CHECK(s_spec_equal(&s, &again));
	jobspec_free(&again);
	free(text);
	json_decref(doc);
	jobspec_free(&s);
	/* the vocabulary needs no rule: the engine pads it (257 at t=2) */
	s_expect_accepted("{\"data\": {\"train\": \"t\"}, \"model\": {\"n_head\": 4, \"n_embd\": 64,"
			  " \"seq_len\": 32, \"vocab_size\": 257}, \"parallel\": {\"world_size\": 2, \"tensor\": 2}}");
	s_expect_accepted("{\"data\": {\"train\": \"t\"}, \"model\": {\"arch\": \"llama\", \"n_head\": 8,"
			  " \"n_kv_head\": 4, \"n_embd\": 64, \"ffn_dim\": 128, \"seq_len\": 32},"
			  " \"parallel\": {\"world_size\": 8, \"tensor\": 4}}");

	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"parallel\": {\"tensor\": 2}}", "/parallel/tensor",
			 "parallel.world_size (1, the default) must be a multiple of parallel.tensor (2)");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"parallel\": {\"world_size\": 6, \"tensor\": 4}}",
			 "/parallel/tensor", "parallel.world_size (6) must be a multiple of parallel.tensor (4):"
			 " world_size is tensor x the data-parallel size; set world_size to a multiple of 4 such as 8");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"parallel\": {\"world_size\": 4, \"tensor\": 4}}",
			 "/parallel/tensor", "model.n_head (6) must be divisible by parallel.tensor (4)");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"model\": {\"arch\": \"llama\", \"n_head\": 8,"
			 " \"n_kv_head\": 2, \"n_embd\": 64, \"ffn_dim\": 128, \"seq_len\": 32},"
			 " \"parallel\": {\"world_size\": 4, \"tensor\": 4}}",
			 "/parallel/tensor", "model.n_kv_head (2) must be divisible by parallel.tensor (4)");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"model\": {\"arch\": \"llama\", \"n_head\": 8,"
			 " \"n_kv_head\": 4, \"n_embd\": 64, \"ffn_dim\": 130, \"seq_len\": 32},"
			 " \"parallel\": {\"world_size\": 4, \"tensor\": 4}}",
			 "/parallel/tensor", "the MLP width (model.ffn_dim 130) must be divisible by parallel.tensor (4)");
	/* GPT-2's width 4 x n_embd divides by t whenever n_head does */
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"model\": {\"n_head\": 4, \"n_embd\": 64,"
			 " \"seq_len\": 30}, \"parallel\": {\"world_size\": 4, \"tensor\": 4}}",
			 "/parallel/tensor", "model.seq_len (30) must be divisible by parallel.tensor (4)");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"parallel\": {\"tensor\": 65}}",
			 "/parallel/tensor", "parallel.tensor");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"parallel\": {\"tensor\": 0}}",
			 "/parallel/tensor", "parallel.tensor");
	s_expect_refused("{\"program\": {\"argv\": [\"x\"]}, \"parallel\": {\"world_size\": 2, \"tensor\": 2}}",
			 "/parallel/tensor", "parallel.tensor (2) is for the built-in trainer");
}

static void test_document_level_errors(void)
{
	s_expect_refused("[]", "", "the job spec must be a JSON object (got an array)");
	s_expect_refused("\"spec\"", "", "the job spec must be a JSON object (got the string \"spec\")");
	s_expect_refused("null", "", "must be a JSON object (got null)");
	s_expect_refused("42", "", "must be a JSON object (got 42)");
	s_expect_refused("", "", "invalid JSON at line");
	s_expect_refused("{\"data\": {\"train\": \"t\"}", "", "invalid JSON at line 1, column");
	s_expect_refused("{\n  \"data\": {\"train\": \"t\"},\n  \"name\": nope\n}", "",
			 "invalid JSON at line 3, column");
	s_expect_refused("{\"data\": {\"train\": \"t\"}} trailing", "", "invalid JSON");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"name\": \"a\", \"name\": \"b\"}", "",
			 "duplicate object key");
	s_expect_refused("{\"data\": {\"train\": \"t\", \"train\": \"u\"}}", "", "duplicate object key");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"name\": \"a\\u0000b\"}", "", "invalid JSON");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"name\": \"\xff\xfe\"}", "", "invalid JSON");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"name\": \"\\ud800\"}", "", "invalid JSON");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"train\": {\"lr\": NaN}}", "", "invalid JSON");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"train\": {\"lr\": Infinity}}", "", "invalid JSON");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"train\": {\"lr\": 1e999}}", "", "invalid JSON");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"train\": {\"steps\": 99999999999999999999}}", "",
			 "invalid JSON");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, /* comment */ \"name\": \"x\"}", "", "invalid JSON");
}

static void test_names_kept_exactly(void)
{
	static const char *const names[] = {
		"Robert'); DROP TABLE jobs;--",
		"x' OR '1'='1",
		"50% \\\"quoted\\\" back\\\\slash; -- /* */ `tick` $(echo) <b>&amp;",
		"\xe6\xa8\xa1\xe5\x9e\x8b \xf0\x9f\x9a\x80 \xc3\xbc \xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d", /* 模型 🚀 ü שלום */
		"tab\\tnewline\\n",
		" leading and trailing spaces ",
	};
	static const char *const expected[] = {
		"Robert'); DROP TABLE jobs;--",
		"x' OR '1'='1",
		"50% \"quoted\" back\\slash; -- /* */ `tick` $(echo) <b>&amp;",
		"\xe6\xa8\xa1\xe5\x9e\x8b \xf0\x9f\x9a\x80 \xc3\xbc \xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d",
		"tab\tnewline\n",
		" leading and trailing spaces ",
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char doc[512];
		jobspec_t s;
		jobspec_error_t err;
		snprintf(doc, sizeof(doc), "{\"name\": \"%s\", \"data\": {\"train\": \"%s\"}}", names[i],
			 names[i]);
		int rc = s_parse(doc, &s, &err);
		CHECK(rc == 0);
		if (rc != 0) {
			fprintf(stderr, "  %s: %s\n", doc, err.message);
			continue;
		}
		CHECK_STR(s.name, expected[i]);
		CHECK_STR(s.data.train, expected[i]);
		s_check_round_trip(&s);
		jobspec_free(&s);
	}
}

static void test_name_lengths(void)
{
	char name[400];
	char doc[600];
	jobspec_t s;
	jobspec_error_t err;

	memset(name, 'n', sizeof(name));
	name[256] = '\0';
	snprintf(doc, sizeof(doc), "{\"name\": \"%s\", \"data\": {\"train\": \"t\"}}", name);
	CHECK(s_parse(doc, &s, &err) == 0);
	CHECK(strlen(s.name) == 256);
	jobspec_free(&s);

	memset(name, 'n', sizeof(name));
	name[300] = '\0';
	snprintf(doc, sizeof(doc), "{\"name\": \"%s\", \"data\": {\"train\": \"t\"}}", name);
	CHECK(s_parse(doc, &s, &err) == -EINVAL);
	CHECK_STR(err.pointer, "/name");
	CHECK_CONTAINS(err.message, "name must be a string of 1 to 256 bytes (got 300 bytes)");

	/* 86 three-byte characters = 258 bytes: refused by bytes, not characters. */
	name[0] = '\0';
	for (int i = 0; i < 86; i++)
		strcat(name, "\xe6\xa8\xa1");
	snprintf(doc, sizeof(doc), "{\"name\": \"%s\", \"data\": {\"train\": \"t\"}}", name);
	CHECK(s_parse(doc, &s, &err) == -EINVAL);
	CHECK_CONTAINS(err.message, "(got 258 bytes)");
}

static void test_path_lengths(void)
{
	size_t n = 5000;
	char *path = malloc(n + 1);
	char *doc = malloc(2 * n + 100);
	jobspec_t s;
	jobspec_error_t err;

	memset(path, 'p', n);
	path[4096] = '\0';
	snprintf(doc, 2 * n + 100, "{\"data\": {\"train\": \"%s\", \"val\": \"%s\"}}", path, path);
	CHECK(s_parse(doc, &s, &err) == 0);
	CHECK(strlen(s.data.train) == 4096 && strlen(s.data.val) == 4096);
	jobspec_free(&s);

	memset(path, 'p', n);
	path[4097] = '\0';
	snprintf(doc, 2 * n + 100, "{\"data\": {\"train\": \"%s\"}}", path);
	CHECK(s_parse(doc, &s, &err) == -EINVAL);
	CHECK_STR(err.pointer, "/data/train");
	CHECK_CONTAINS(err.message, "(got 4097 bytes)");

	snprintf(doc, 2 * n + 100, "{\"data\": {\"train\": \"t\", \"val\": \"%s\"}}", path);
	CHECK(s_parse(doc, &s, &err) == -EINVAL);
	CHECK_STR(err.pointer, "/data/val");
	free(path);
	free(doc);
}

static void test_long_unknown_key(void)
{
	/* A key too long for the pointer buffer: the pointer falls back to the
	 * enclosing object and the message shows an excerpt. */
	char key[1000];
	char doc[1200];
	jobspec_t s;
	jobspec_error_t err;
	memset(key, 'k', sizeof(key));
	key[999] = '\0';
	snprintf(doc, sizeof(doc), "{\"data\": {\"train\": \"t\"}, \"model\": {\"%s\": 1}}", key);
	CHECK(s_parse(doc, &s, &err) == -EINVAL);
	CHECK_STR(err.pointer, "/model");
	CHECK_CONTAINS(err.message, "unknown field \"kkkk");
	CHECK_CONTAINS(err.message, "...\" in model");

	/* "/" in a key is escaped as ~1 in the pointer. */
	snprintf(doc, sizeof(doc), "{\"data\": {\"train\": \"t\", \"a/b\": 1}}");
	CHECK(s_parse(doc, &s, &err) == -EINVAL);
	CHECK_STR(err.pointer, "/data/a~1b");
	/* Control characters in a key do not reach the message. */
	snprintf(doc, sizeof(doc), "{\"data\": {\"train\": \"t\"}, \"a\\nb\": 1}");
	CHECK(s_parse(doc, &s, &err) == -EINVAL);
	CHECK_CONTAINS(err.message, "unknown field \"a?b\"");
}

static void test_unknown_field_reported_before_other_errors(void)
{
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"model\": {\"n_layer\": 0, \"n_layers\": 4}}",
			 "/model/n_layers", "unknown field \"n_layers\" in model");
}

static void test_len_is_respected(void)
{
	/* Not NUL-terminated: bytes after `len` are never read. */
	const char *text = MINIMAL "garbage";
	char *copy = malloc(strlen(MINIMAL));
	memcpy(copy, text, strlen(MINIMAL));
	jobspec_t s;
	jobspec_error_t err;
	CHECK(jobspec_parse(copy, strlen(MINIMAL), &s, &err) == 0);
	jobspec_free(&s);
	free(copy);
	CHECK(jobspec_parse(text, strlen(text), &s, &err) == -EINVAL);
	/* A NULL error pointer is allowed. */
	CHECK(jobspec_parse("{}", 2, &s, NULL) == -EINVAL);
	CHECK(jobspec_parse(NULL, 0, &s, &err) == -EINVAL);
}

static void test_from_json(void)
{
	jobspec_t s;
	jobspec_error_t err;
	CHECK(jobspec_from_json(NULL, &s, &err) == -EINVAL);
	CHECK_STR(err.pointer, "");

	/* A value built in memory may hold NUL bytes; they are refused. */
	json_t *doc = json_pack("{s:{s:s#}}", "data", "train", "a\0b", (size_t)3);
	CHECK(doc != NULL);
	CHECK(jobspec_from_json(doc, &s, &err) == -EINVAL);
	CHECK_STR(err.pointer, "/data/train");
	CHECK_CONTAINS(err.message, "must not contain NUL bytes");
	json_decref(doc);

	doc = json_pack("{s:{s:s}, s:I}", "data", "train", "t", "priority", (json_int_t)7);
	CHECK(jobspec_from_json(doc, &s, &err) == 0);
	CHECK(s.priority == 7);
	jobspec_free(&s);
	json_decref(doc);
}

static void test_to_json_has_every_field(void)
{
	jobspec_t s;
	jobspec_error_t err;
	CHECK(s_parse(MINIMAL, &s, &err) == 0);
	json_t *j = jobspec_to_json(&s);
	CHECK(json_object_size(j) == 8);
	CHECK(json_object_size(json_object_get(j, "model")) == 6);
	CHECK(json_object_size(json_object_get(j, "data")) == 3);
	CHECK(json_is_null(json_object_get(json_object_get(j, "data"), "val")));
	CHECK(json_object_size(json_object_get(j, "train")) == 13);
	CHECK(json_object_size(json_object_get(j, "parallel")) == 3);
	CHECK(json_object_size(json_object_get(j, "checkpoint")) == 3);
	CHECK(json_object_size(json_object_get(j, "restart")) == 1);
	CHECK(json_is_integer(json_object_get(json_object_get(j, "train"), "steps")));
	CHECK(json_is_real(json_object_get(json_object_get(j, "train"), "lr")));
	CHECK_STR(json_string_value(json_object_get(json_object_get(j, "parallel"), "sharding")), "none");
	json_decref(j);
	jobspec_free(&s);
}

static void test_round_trip_awkward_reals(void)
{
	static const char *const lrs[] = {"0.1", "0.30000000000000004", "1e-300", "5e-324",
					  "9.999999999999998", "3", "6e-4"};
	for (size_t i = 0; i < sizeof(lrs) / sizeof(lrs[0]); i++) {
		jobspec_t s;
		jobspec_error_t err;
		char doc[256];
		snprintf(doc, sizeof(doc),
			 "{\"data\": {\"train\": \"t\"}, \"train\": {\"lr\": %s, \"min_lr\": 0,"
			 " \"weight_decay\": %s, \"grad_clip\": %s}}",
			 lrs[i], lrs[i], lrs[i]);
		int rc = s_parse(doc, &s, &err);
		CHECK(rc == 0);
		if (rc != 0) {
			fprintf(stderr, "  %s: %s\n", lrs[i], err.message);
			continue;
		}
		CHECK(s.train.lr == strtod(lrs[i], NULL));
		s_check_round_trip(&s);
		jobspec_free(&s);
	}
}

static void test_free_is_idempotent(void)
{
	jobspec_t s = {0};
	jobspec_free(&s);
	jobspec_free(NULL);
	jobspec_error_t err;
	CHECK(s_parse(MINIMAL, &s, &err) == 0);
	jobspec_free(&s);
	jobspec_free(&s);
	CHECK(s.name == NULL && s.data.train == NULL && s.data.val == NULL);
	CHECK(s_parse("{\"data\": {\"train\": \"t\"}, \"resume_from\": {\"job\": \"j-a\", \"step\": 1}}",
		      &s, &err) == 0);
	jobspec_free(&s);
	jobspec_free(&s);
	CHECK(s.resume_from.job == NULL);
}

/* resume_from: optional; both fields required inside; unknown keys refused;
 * step >= 1 and below train.steps; rendered only when given. */
static void test_resume_from(void)
{
	jobspec_t s;
	jobspec_error_t err;
	CHECK(s_parse(MINIMAL, &s, &err) == 0);
	CHECK(s.resume_from.job == NULL && s.resume_from.step == 0);
	json_t *j = jobspec_to_json(&s);
	CHECK(json_object_get(j, "resume_from") == NULL);
	json_decref(j);
	jobspec_free(&s);

	const char *doc = "{\"data\": {\"train\": \"t\"}, \"train\": {\"steps\": 20, \"warmup_steps\": 2},"
			  " \"resume_from\": {\"step\": 10, \"job\": \"j-rpngkrejf7a5xndd53hx\"}}";
	CHECK(s_parse(doc, &s, &err) == 0);
	CHECK_STR(s.resume_from.job, "j-rpngkrejf7a5xndd53hx");
	CHECK(s.resume_from.step == 10);
	j = jobspec_to_json(&s);
	json_t *rf = json_object_get(j, "resume_from");
	CHECK(json_object_size(rf) == 2);
	CHECK_STR(json_string_value(json_object_get(rf, "job")), "j-rpngkrejf7a5xndd53hx");
	CHECK(json_integer_value(json_object_get(rf, "step")) == 10);
	json_decref(j);
	s_check_round_trip(&s);
	jobspec_free(&s);
	s_expect_accepted("{\"data\": {\"train\": \"t\"}, \"resume_from\": {\"job\": \"j-x\", \"step\": 999}}");

	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"resume_from\": {\"job\": \"j-x\"}}",
			 "/resume_from/step", "resume_from.step is required");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"resume_from\": {\"step\": 5}}",
			 "/resume_from/job", "resume_from.job is required");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"resume_from\": {}}",
			 "/resume_from/job", "resume_from.job is required");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"resume_from\": {\"job\": \"j-x\", \"step\": 5,"
			 " \"path\": \"/x\"}}",
			 "/resume_from/path", "unknown field \"path\" in resume_from; allowed fields: job, step");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"resume_from\": {\"job\": \"j-x\", \"step\": 0}}",
			 "/resume_from/step", "resume_from.step must be an integer between 1 and");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"resume_from\": {\"job\": \"j-x\", \"step\": 5.0}}",
			 "/resume_from/step", "a real number");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"resume_from\": {\"job\": \"j-x\", \"step\": \"5\"}}",
			 "/resume_from/step", "resume_from.step must be an integer");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"resume_from\": {\"job\": \"\", \"step\": 5}}",
			 "/resume_from/job", "resume_from.job must be a string of 1 to 64 bytes (got an empty string)");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"resume_from\": {\"job\": 7, \"step\": 5}}",
			 "/resume_from/job", "resume_from.job must be a string");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"resume_from\": null}",
			 "/resume_from", "resume_from must be an object (got null)");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"resume_from\": \"j-x\"}",
			 "/resume_from", "resume_from must be an object");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"train\": {\"steps\": 400, \"warmup_steps\": 2},"
			 " \"resume_from\": {\"job\": \"j-x\", \"step\": 400}}",
			 "/resume_from/step", "resume_from.step (400) must be less than train.steps (400)");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"resume_from\": {\"job\": \"j-x\", \"step\": 1000}}",
			 "/resume_from/step", "train.steps (1000, the default)");
}

/* profile: optional (absent: both 0, not rendered); both fields required
 * inside; integers >= 1; start_step <= end_step <= train.steps; at most
 * JOBSPEC_MAX_PROFILE_STEPS steps; rendered only when given. */
static void test_profile(void)
{
	jobspec_t s;
	jobspec_error_t err;
	CHECK(s_parse(MINIMAL, &s, &err) == 0);
	CHECK(s.profile.start_step == 0 && s.profile.end_step == 0);
	json_t *j = jobspec_to_json(&s);
	CHECK(json_object_get(j, "profile") == NULL);
	json_decref(j);
	jobspec_free(&s);

	const char *doc = "{\"data\": {\"train\": \"t\"}, \"train\": {\"steps\": 20, \"warmup_steps\": 2},"
			  " \"profile\": {\"end_step\": 4, \"start_step\": 2}}";
	CHECK(s_parse(doc, &s, &err) == 0);
	CHECK(s.profile.start_step == 2 && s.profile.end_step == 4);
	j = jobspec_to_json(&s);
	json_t *pr = json_object_get(j, "profile");
	CHECK(json_object_size(pr) == 2);
	CHECK(json_integer_value(json_object_get(pr, "start_step")) == 2);
	CHECK(json_integer_value(json_object_get(pr, "end_step")) == 4);
	json_decref(j);
	s_check_round_trip(&s);
	jobspec_free(&s);

	/* the edges: one step, the last step, exactly the cap */
	s_expect_accepted("{\"data\": {\"train\": \"t\"}, \"profile\": {\"start_step\": 1, \"end_step\": 1}}");
	s_expect_accepted("{\"data\": {\"train\": \"t\"}, \"profile\": {\"start_step\": 1000, \"end_step\": 1000}}");
	s_expect_accepted("{\"data\": {\"train\": \"t\"}, \"profile\": {\"start_step\": 1, \"end_step\": 1000}}");
	s_expect_accepted("{\"data\": {\"train\": \"t\"}, \"train\": {\"steps\": 5000},"
			  " \"profile\": {\"start_step\": 4001, \"end_step\": 5000}}");

	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"profile\": {\"start_step\": 2}}",
			 "/profile/end_step", "profile.end_step is required");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"profile\": {\"end_step\": 2}}",
			 "/profile/start_step", "profile.start_step is required");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"profile\": {}}",
			 "/profile/start_step", "profile.start_step is required");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"profile\": {\"start_step\": 2, \"end_step\": 4,"
			 " \"ranks\": [0]}}",
			 "/profile/ranks", "unknown field \"ranks\" in profile; allowed fields: start_step, end_step");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"profile\": {\"start_step\": 0, \"end_step\": 4}}",
			 "/profile/start_step", "profile.start_step must be an integer between 1 and");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"profile\": {\"start_step\": 2, \"end_step\": -4}}",
			 "/profile/end_step", "profile.end_step must be an integer between 1 and");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"profile\": {\"start_step\": 2.0, \"end_step\": 4}}",
			 "/profile/start_step", "a real number");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"profile\": {\"start_step\": 2, \"end_step\": \"4\"}}",
			 "/profile/end_step", "profile.end_step must be an integer");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"profile\": null}",
			 "/profile", "profile must be an object (got null)");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"profile\": [2, 4]}",
			 "/profile", "profile must be an object (got an array)");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"profile\": {\"start_step\": 5, \"end_step\": 4}}",
			 "/profile/start_step", "profile.start_step (5) must be at most profile.end_step (4)");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"train\": {\"steps\": 20, \"warmup_steps\": 2},"
			 " \"profile\": {\"start_step\": 2, \"end_step\": 21}}",
			 "/profile/end_step", "profile.end_step (21) must be at most train.steps (20)");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"profile\": {\"start_step\": 999, \"end_step\": 1001}}",
			 "/profile/end_step", "train.steps (1000, the default)");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"train\": {\"steps\": 5000},"
			 " \"profile\": {\"start_step\": 10, \"end_step\": 1010}}",
			 "/profile/end_step",
			 "profile.end_step (1010) must be at most 1009: a profile covers at most 1000 steps (got 1001");
}

static void test_load_file(void)
{
	char path[] = "/tmp/test_jobspec_XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK(write(fd, s_full, strlen(s_full)) == (ssize_t)strlen(s_full));
	close(fd);
	jobspec_t s;
	jobspec_error_t err;
	CHECK(jobspec_load_file(path, &s, &err) == 0);
	CHECK(s.parallel.world_size == 8);
	jobspec_free(&s);
	unlink(path);

	CHECK(jobspec_load_file("/nonexistent/spec.json", &s, &err) == -ENOENT);
	CHECK_STR(err.pointer, "");
	CHECK_CONTAINS(err.message, "/nonexistent/spec.json");
	CHECK(jobspec_load_file("/", &s, &err) < 0); /* a directory */
}

/* Issue 22: data paths must stay beneath the agent's --data-root. */
static void test_check_paths(void)
{
	static const struct {
		const char *pointer, *value;
		bool ok;
	} cases[] = {
		{"/data/train", "\"a/b.bin\"", true},
		{"/data/train", "\"shards/*.bin\"", true},
		{"/data/train", "\"a..b/c..\"", true},
		{"/data/val", "null", true},
		{"/data/train", "\"/etc/passwd\"", false},
		{"/data/train", "\"../etc/passwd\"", false},
		{"/data/train", "\"a/../../etc/passwd\"", false},
		{"/data/train", "\"a/..\"", false},
		{"/data/train", "\"/etc/pass*\"", false},
		{"/data/val", "\"/etc/passwd\"", false},
		{"/data/val", "\"x/../../y\"", false},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		jobspec_t s;
		jobspec_error_t err = {0};
		CHECK(s_parse_with(cases[i].pointer, cases[i].value, &s, &err) == 0);
		int rc = jobspec_check_paths(&s, &err);
		CHECK((rc == 0) == cases[i].ok);
		if (!cases[i].ok) {
			CHECK(rc == -EINVAL);
			CHECK(strcmp(err.pointer, cases[i].pointer) == 0);
			CHECK(strstr(err.message, cases[i].pointer[6] == 't' ? "data.train" : "data.val"));
			CHECK(strstr(err.message, "relative to the agent's --data-root"));
		}
		jobspec_free(&s);
	}
}

/* The user's own program (issue 26): accepted shapes, refusals naming the
 * field, the trainer's sections refused, round trip, program.cwd beneath. */
static void test_program(void)
{
	jobspec_t s;
	jobspec_error_t err = {0};
	const char *ok = "{\"name\": \"ddp\", \"program\": {\"argv\": [\"/usr/bin/python3\", \"ddp.py\", \"--epochs\", \"3\"],"
			 " \"cwd\": \"proj\", \"env\": {\"NCCL_DEBUG\": \"INFO\", \"TORCH_X\": \"\"}},"
			 " \"parallel\": {\"world_size\": 2, \"ranks_per_node\": 1}, \"restart\": {\"max_restarts\": 1}}";
	CHECK(s_parse(ok, &s, &err) == 0);
	CHECK(jobspec_is_program(&s));
	CHECK(s.program.argc == 4);
	CHECK_STR(s.program.argv[0], "/usr/bin/python3");
	CHECK_STR(s.program.argv[3], "3");
	CHECK_STR(s.program.cwd, "proj");
	CHECK(s.program.n_env == 2);
	CHECK_STR(s.program.env_names[0], "NCCL_DEBUG");
	CHECK_STR(s.program.env_values[1], "");
	CHECK(s.data.train == NULL);
	CHECK(s.parallel.ranks_per_node == 1);
	CHECK(jobspec_check_paths(&s, &err) == 0);
	json_t *j = jobspec_to_json(&s);
	CHECK(j && !json_object_get(j, "model") && !json_object_get(j, "data") &&
	      json_object_get(j, "program") && json_object_get(j, "restart"));
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	jobspec_t again = {0};
	CHECK(text && s_parse(text, &again, &err) == 0);
	CHECK(again.program.argc == 4 && again.program.n_env == 2 && again.parallel.ranks_per_node == 1);
	CHECK_STR(again.program.cwd, "proj");
	jobspec_free(&again);
	free(text);
	json_decref(j);
	jobspec_free(&s);
	jobspec_free(&s); /* idempotent */

	CHECK(s_parse("{\"program\": {\"argv\": [\"x\"]}}", &s, &err) == 0);
	CHECK(s.program.cwd == NULL && s.program.n_env == 0 && s.parallel.ranks_per_node == 0);
	jobspec_free(&s);

	static const struct {
		const char *doc, *pointer, *says;
	} bad[] = {
		{"{\"program\": {\"argv\": [\"x\"]}, \"model\": {}}", "/model", "a program job has no model"},
		{"{\"program\": {\"argv\": [\"x\"]}, \"data\": {\"train\": \"a\"}}", "/data", "a program job has no data"},
		{"{\"program\": {\"argv\": [\"x\"]}, \"train\": {}}", "/train", "a program job has no train"},
		{"{\"program\": {\"argv\": [\"x\"]}, \"checkpoint\": {}}", "/checkpoint", "a program job has no checkpoint"},
		{"{\"program\": {\"argv\": [\"x\"]}, \"resume_from\": {\"job\": \"j\", \"step\": 1}}", "/resume_from",
		 "a program job has no resume_from"},
		{"{\"program\": {}}", "/program/argv", "program.argv is required"},
		{"{\"program\": {\"argv\": []}}", "/program/argv", "1 to 256 strings"},
		{"{\"program\": {\"argv\": \"x\"}}", "/program/argv", "program.argv"},
		{"{\"program\": {\"argv\": [\"x\", \"\"]}}", "/program/argv/1", "program.argv[1]"},
		{"{\"program\": {\"argv\": [\"x\", 1]}}", "/program/argv/1", "program.argv[1]"},
		{"{\"program\": {\"argv\": [\"x\"], \"cwd\": 3}}", "/program/cwd", "program.cwd"},
		{"{\"program\": {\"argv\": [\"x\"], \"env\": []}}", "/program/env", "program.env must be an object"},
		{"{\"program\": {\"argv\": [\"x\"], \"env\": {\"A-B\": \"1\"}}}", "/program/env", "not a variable name"},
		{"{\"program\": {\"argv\": [\"x\"], \"env\": {\"9A\": \"1\"}}}", "/program/env", "not a variable name"},
		{"{\"program\": {\"argv\": [\"x\"], \"env\": {\"A\": 1}}}", "/program/env/A", "program.env.A"},
		{"{\"program\": {\"argv\": [\"x\"], \"argz\": 1}}", "/program/argz", "unknown field"},
		{"{\"program\": [\"x\"]}", "/program", "program must be an object"},
		{"{\"data\": {\"train\": \"a\"}, \"parallel\": {\"ranks_per_node\": 0}}", "/parallel/ranks_per_node",
		 "parallel.ranks_per_node"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		memset(&err, 0, sizeof err);
		CHECK(s_parse(bad[i].doc, &s, &err) == -EINVAL);
		CHECK_STR(err.pointer, bad[i].pointer);
		CHECK_CONTAINS(err.message, bad[i].says);
	}

	/* 257 arguments, an argument of 4097 bytes, 257 env names */
	json_t *doc = json_pack("{s:{s:[]}}", "program", "argv");
	json_t *argv = json_object_get(json_object_get(doc, "program"), "argv");
	for (int i = 0; i < 257; i++)
		json_array_append_new(argv, json_string("a"));
	text = json_dumps(doc, JSON_COMPACT);
	CHECK(s_parse(text, &s, &err) == -EINVAL);
	CHECK_STR(err.pointer, "/program/argv");
	free(text);
	json_array_clear(argv);
	char *big = malloc(4098);
	memset(big, 'a', 4097);
	big[4097] = '\0';
	json_array_append_new(argv, json_string(big));
	text = json_dumps(doc, JSON_COMPACT);
	CHECK(s_parse(text, &s, &err) == -EINVAL);
	CHECK_STR(err.pointer, "/program/argv/0");
	free(text);
	free(big);
	json_array_clear(argv);
	json_array_append_new(argv, json_string("x"));
	json_t *env = json_object();
	for (int i = 0; i < 257; i++) {
		char name[16];
		snprintf(name, sizeof name, "V%d", i);
		json_object_set_new(env, name, json_string("1"));
	}
	json_object_set_new(json_object_get(doc, "program"), "env", env);
	text = json_dumps(doc, JSON_COMPACT);
	CHECK(s_parse(text, &s, &err) == -EINVAL);
	CHECK_STR(err.pointer, "/program/env");
	free(text);
	json_decref(doc);

	/* program.cwd beneath the data root */
	static const char *const cwds[] = {"/etc", "../x", "a/../../b"};
	for (size_t i = 0; i < 3; i++) {
		char d[128];
		snprintf(d, sizeof d, "{\"program\": {\"argv\": [\"x\"], \"cwd\": \"%s\"}}", cwds[i]);
		CHECK(s_parse(d, &s, &err) == 0);
		CHECK(jobspec_check_paths(&s, &err) == -EINVAL);
		CHECK_STR(err.pointer, "/program/cwd");
		jobspec_free(&s);
	}
}

static void test_enum_names(void)
{
	CHECK_STR(jobspec_format_name(JOBSPEC_FORMAT_NANOGPT), "nanogpt");
	CHECK_STR(jobspec_format_name(JOBSPEC_FORMAT_LLMC), "llmc");
	CHECK_STR(jobspec_format_name(JOBSPEC_FORMAT_TEXT), "text");
	CHECK_STR(jobspec_format_name(JOBSPEC_FORMAT_UINT32), "uint32");
	CHECK_STR(jobspec_schedule_name(JOBSPEC_SCHEDULE_COSINE), "cosine");
	CHECK_STR(jobspec_schedule_name(JOBSPEC_SCHEDULE_CONSTANT), "constant");
	CHECK_STR(jobspec_precision_name(JOBSPEC_PRECISION_FP32), "fp32");
	CHECK_STR(jobspec_precision_name(JOBSPEC_PRECISION_BF16), "bf16");
	CHECK_STR(jobspec_device_name(JOBSPEC_DEVICE_CPU), "cpu");
	CHECK_STR(jobspec_device_name(JOBSPEC_DEVICE_CUDA), "cuda");
	CHECK_STR(jobspec_sharding_name(JOBSPEC_SHARDING_NONE), "none");
	CHECK_STR(jobspec_sharding_name(JOBSPEC_SHARDING_ZERO1), "zero1");
	CHECK_STR(jobspec_sharding_name(JOBSPEC_SHARDING_ZERO2), "zero2");
	CHECK_STR(jobspec_sharding_name(JOBSPEC_SHARDING_ZERO3), "zero3");
	CHECK_STR(jobspec_sharding_name((jobspec_sharding_t)42), "invalid");
	CHECK_STR(jobspec_device_name((jobspec_device_t)-1), "invalid");
}

int main(void)
{
	s_run("minimal_gets_defaults", test_minimal_gets_defaults);
	s_run("full_spec", test_full_spec);
	s_run("valid_values", test_valid_values);
	s_run("bad_values", test_bad_values);
	s_run("wrong_types_for_every_int_field", test_wrong_types_for_every_int_field);
	s_run("wrong_types_for_every_real_and_enum_field",
	      test_wrong_types_for_every_real_and_enum_field);
	s_run("missing_data_train", test_missing_data_train);
	s_run("empty_sections_get_defaults", test_empty_sections_get_defaults);
	s_run("cross_field_rules", test_cross_field_rules);
	s_run("tensor_parallel", test_tensor_parallel);
	s_run("document_level_errors", test_document_level_errors);
	s_run("names_kept_exactly", test_names_kept_exactly);
	s_run("name_lengths", test_name_lengths);
	s_run("path_lengths", test_path_lengths);
	s_run("long_unknown_key", test_long_unknown_key);
	s_run("unknown_field_reported_before_other_errors",
	      test_unknown_field_reported_before_other_errors);
	s_run("len_is_respected", test_len_is_respected);
	s_run("from_json", test_from_json);
	s_run("to_json_has_every_field", test_to_json_has_every_field);
	s_run("round_trip_awkward_reals", test_round_trip_awkward_reals);
	s_run("free_is_idempotent", test_free_is_idempotent);
	s_run("resume_from", test_resume_from);
	s_run("profile", test_profile);
	s_run("load_file", test_load_file);
	s_run("enum_names", test_enum_names);
	s_run("check_paths", test_check_paths);
	s_run("program", test_program);

	printf("%d passed, %d failed\n", s_n_passed, s_n_failed);
	return s_n_failed ? 1 : 0;
}
