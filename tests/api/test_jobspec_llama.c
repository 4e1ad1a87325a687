/*
 * Unit tests for the job spec's Llama fields (api/jobspec_model.c):
 * defaults and Llama's FFN width rule, the presets and explicit fields over
 * them, the errors naming fields and both numbers, the to_json round trip
 * with every field, a GPT-2 spec's unchanged JSON, and init.safetensors.
 * The harness is jobspec_harness.h (test_jobspec.c's).
 */
#include <errno.h>

#include "jobspec_harness.h"

#define LLAMA "{\"data\": {\"train\": \"t\"}, \"model\": {\"arch\": \"llama\""

static void test_llama_defaults(void)
{
	jobspec_t s;
	jobspec_error_t err = {0};
	CHECK(s_parse(LLAMA "}}", &s, &err) == 0);
	CHECK_STR(s.model.arch, "llama");
	CHECK(s.model.n_layer == 6 && s.model.n_embd == 384 && s.model.n_head == 6);
	CHECK(s.model.n_kv_head == 2);
	CHECK(s.model.ffn_dim == 1024); /* int(2 * 4 * 384 / 3) = 1024, a multiple of 256 */
	CHECK(s.model.vocab_size == 256 && s.model.seq_len == 256);
	CHECK(s.model.rope_theta == 500000.0);
	CHECK(s.model.rope_scaling.factor == 0);
	CHECK(s.model.norm_eps == 1e-5);
	CHECK(s.model.tie_embeddings == 0);
	CHECK_STR(s.model.preset, "");
	jobspec_free(&s);

	/* an explicit n_head is its own n_kv_head's default (plain multi-head) */
	CHECK(s_parse(LLAMA ", \"n_head\": 3, \"n_embd\": 96}}", &s, &err) == 0);
	CHECK(s.model.n_kv_head == 3);
	CHECK(s.model.ffn_dim == 256); /* int(2 * 384 / 3) = 256 */
	jobspec_free(&s);

	/* Llama's rule: 2/3 of 4C, times the multiplier, up to multiple_of */
	CHECK(s_parse(LLAMA ", \"n_embd\": 4096, \"n_head\": 32, \"ffn_dim_multiplier\": 1.3,"
		      " \"multiple_of\": 1024}}", &s, &err) == 0);
	CHECK(s.model.ffn_dim == 14336); /* Llama 3 8B's */
	jobspec_free(&s);
	CHECK(s_parse(LLAMA ", \"n_embd\": 100, \"n_head\": 10, \"multiple_of\": 7}}", &s, &err) == 0);
	CHECK(s.model.ffn_dim == 266); /* int(800 / 3) = 266 = 38 * 7 */
	jobspec_free(&s);

	/* every field given */
	CHECK(s_parse(LLAMA ", \"n_layer\": 2, \"n_head\": 4, \"n_kv_head\": 1, \"n_embd\": 64,"
		      " \"ffn_dim\": 100, \"rope_theta\": 10000, \"norm_eps\": 1e-6, \"tie_embeddings\": true,"
		      " \"rope_scaling\": {\"factor\": 8, \"low_freq_factor\": 1, \"high_freq_factor\": 4,"
		      " \"original_max_position\": 64}}}", &s, &err) == 0);
	CHECK(s.model.n_kv_head == 1 && s.model.ffn_dim == 100 && s.model.rope_theta == 10000);
	CHECK(s.model.norm_eps == 1e-6 && s.model.tie_embeddings == 1);
	CHECK(s.model.rope_scaling.factor == 8 && s.model.rope_scaling.low_freq_factor == 1 &&
	      s.model.rope_scaling.high_freq_factor == 4 &&
	      s.model.rope_scaling.original_max_position == 64);
	jobspec_free(&s);
}

static void test_llama_presets(void)
{
	jobspec_t s;
	jobspec_error_t err = {0};
	/* a preset implies arch llama */
	CHECK(s_parse("{\"data\": {\"train\": \"t\", \"format\": \"uint32\"}, \"model\": {\"preset\": \"llama3.2-1b\"}}",
		      &s, &err) == 0);
	CHECK_STR(s.model.arch, "llama");
	CHECK_STR(s.model.preset, "llama3.2-1b");
	CHECK(s.model.n_layer == 16 && s.model.n_embd == 2048 && s.model.n_head == 32);
	CHECK(s.model.n_kv_head == 8 && s.model.ffn_dim == 8192 && s.model.vocab_size == 128256);
	CHECK(s.model.tie_embeddings == 1 && s.model.rope_theta == 500000.0 && s.model.seq_len == 2048);
	CHECK(s.model.rope_scaling.factor == 32 && s.model.rope_scaling.low_freq_factor == 1 &&
	      s.model.rope_scaling.high_freq_factor == 4 &&
	      s.model.rope_scaling.original_max_position == 8192);
	s_check_round_trip(&s);
	jobspec_free(&s);
	/* explicit fields override the preset's; null removes its scaling */
	CHECK(s_parse("{\"data\": {\"train\": \"t\", \"format\": \"uint32\"}, \"model\": {\"preset\": \"llama3.1-8b\","
		      " \"arch\": \"llama\", \"n_layer\": 2, \"seq_len\": 128, \"rope_scaling\": null}}", &s, &err) == 0);
	CHECK(s.model.n_layer == 2 && s.model.n_embd == 4096 && s.model.ffn_dim == 14336);
	CHECK(s.model.seq_len == 128 && s.model.rope_scaling.factor == 0 && s.model.tie_embeddings == 0);
	s_check_round_trip(&s);
	jobspec_free(&s);
	CHECK(s_parse("{\"data\": {\"train\": \"t\", \"format\": \"uint32\"}, \"model\": {\"preset\": \"llama3.2-3b\"}}",
		      &s, &err) == 0);
	CHECK(s.model.n_layer == 28 && s.model.n_embd == 3072 && s.model.n_head == 24);
	jobspec_free(&s);
	CHECK(s_parse("{\"data\": {\"train\": \"t\"}, \"model\": {\"preset\": \"llama-124m\"}}", &s, &err) == 0);
	CHECK(s.model.n_layer == 12 && s.model.n_embd == 768 && s.model.n_kv_head == 4 &&
	      s.model.ffn_dim == 2048 && s.model.vocab_size == 32000 && s.model.tie_embeddings == 0);
	jobspec_free(&s);
	/* the preset's vocabulary needs a uint32 format */
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"model\": {\"preset\": \"llama3.2-1b\"}}",
			 "/model/vocab_size", "model.vocab_size (128256, the preset's) must be at most 65536");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"model\": {\"preset\": \"llama-7b\"}}",
			 "/model/preset", "model.preset must be one of \"llama3.2-1b\", \"llama3.2-3b\", \"llama3.1-8b\", \"llama-124m\" (got the string \"llama-7b\")");
	s_expect_refused("{\"data\": {\"train\": \"t\"}, \"model\": {\"preset\": \"llama-124m\", \"arch\": \"gpt2\"}}",
			 "/model/preset", "model.preset is a Llama field");
}

static void test_llama_errors(void)
{
	s_expect_refused(LLAMA ", \"n_embd\": 770, \"n_head\": 12}}",
			 "/model/n_head", "model.n_embd (770) must be divisible by model.n_head (12)");
	s_expect_refused(LLAMA ", \"n_embd\": 768, \"n_head\": 12, \"n_kv_head\": 5}}",
			 "/model/n_kv_head", "model.n_head (12) must be a multiple of model.n_kv_head (5)");
	s_expect_refused(LLAMA ", \"n_head\": 5}}",
			 "/model/n_head", "model.n_embd (384, the default) must be divisible");
	s_expect_refused(LLAMA ", \"n_kv_head\": 4}}",
			 "/model/n_kv_head", "model.n_head (6, the default) must be a multiple of model.n_kv_head (4)");
	s_expect_refused(LLAMA ", \"n_embd\": 36, \"n_head\": 4}}",
			 "/model/n_head", "model.n_embd / model.n_head (36 / 4 = 9) must be even");
	s_expect_refused(LLAMA ", \"ffn_dim\": 100, \"multiple_of\": 64}}",
			 "/model/multiple_of", "give either model.ffn_dim or the rule's fields, not both");
	s_expect_refused(LLAMA ", \"ffn_dim\": 0}}",
			 "/model/ffn_dim", "model.ffn_dim must be an integer between 1 and 524288 (got 0)");
	s_expect_refused(LLAMA ", \"rope_theta\": 0}}",
			 "/model/rope_theta", "model.rope_theta must be a number greater than 0");
	s_expect_refused(LLAMA ", \"norm_eps\": -1}}", "/model/norm_eps", "model.norm_eps must be");
	s_expect_refused(LLAMA ", \"tie_embeddings\": 1}}",
			 "/model/tie_embeddings", "model.tie_embeddings must be true or false (got 1)");
	s_expect_refused(LLAMA ", \"rope_scaling\": {\"factor\": 8}}}",
			 "/model/rope_scaling/low_freq_factor", "model.rope_scaling.low_freq_factor is required");
	s_expect_refused(LLAMA ", \"rope_scaling\": 8}}",
			 "/model/rope_scaling", "model.rope_scaling must be null or an object");
	s_expect_refused(LLAMA ", \"rope_scaling\": {\"factor\": 8, \"low_freq_factor\": 1,"
			 " \"high_freq_factor\": 4, \"original_max_position\": 0}}}",
			 "/model/rope_scaling/original_max_position",
			 "model.rope_scaling.original_max_position must be an integer between 1 and");
	s_expect_refused(LLAMA ", \"rope_scaling\": {\"factor\": 8, \"low_freq_factor\": 4,"
			 " \"high_freq_factor\": 4, \"original_max_position\": 8192}}}",
			 "/model/rope_scaling/high_freq_factor",
			 "model.rope_scaling.high_freq_factor (4) must be greater than model.rope_scaling.low_freq_factor (4)");
	s_expect_refused(LLAMA ", \"rope_scaling\": {\"factor\": 8, \"low\": 1}}}",
			 "/model/rope_scaling/low", "unknown field \"low\"");
}

static void test_llama_round_trip(void)
{
	static const char *const docs[] = {
		LLAMA "}}",
		LLAMA ", \"n_layer\": 2, \"n_head\": 4, \"n_kv_head\": 2, \"n_embd\": 64, \"ffn_dim\": 96,"
		" \"rope_theta\": 10000.5, \"norm_eps\": 1e-6, \"tie_embeddings\": true,"
		" \"rope_scaling\": {\"factor\": 8, \"low_freq_factor\": 1, \"high_freq_factor\": 4,"
		" \"original_max_position\": 64}}, \"init\": {\"safetensors\": \"w/model.safetensors\"}}",
		LLAMA ", \"ffn_dim_multiplier\": 1.5}}",
	};
	for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
		jobspec_t s;
		jobspec_error_t err = {0};
		int rc = s_parse(docs[i], &s, &err);
		CHECK(rc == 0);
		if (rc != 0) {
			fprintf(stderr, "  %s: %s %s\n", docs[i], err.pointer, err.message);
			continue;
		}
		s_check_round_trip(&s);
		json_t *j = jobspec_to_json(&s);
		CHECK(json_object_size(json_object_get(j, "model")) == 12); /* every Llama field */
		json_decref(j);
		jobspec_free(&s);
	}
}

/* A GPT-2 spec renders exactly the JSON it did before Llama. */
static void test_gpt2_json_unchanged(void)
{
	jobspec_t s;
	jobspec_error_t err;
	CHECK(s_parse(MINIMAL, &s, &err) == 0);
	json_t *j = jobspec_to_json(&s);
	char *text = json_dumps(json_object_get(j, "model"), JSON_COMPACT);
	CHECK_STR(text, "{\"arch\":\"gpt2\",\"n_layer\":6,\"n_head\":6,\"n_embd\":384,\"vocab_size\":256,\"seq_len\":256}");
	CHECK(json_object_get(j, "init") == NULL);
	free(text);
	json_decref(j);
	jobspec_free(&s);
}

static void test_init(void)
{
	jobspec_t s;
	jobspec_error_t err = {0};
	CHECK(s_parse(LLAMA "}, \"init\": {\"safetensors\": \"ft/model.safetensors.index.json\"}}", &s, &err) == 0);
	CHECK_STR(s.init.safetensors, "ft/model.safetensors.index.json");
	CHECK(jobspec_check_paths(&s, &err) == 0);
	jobspec_free(&s);
	CHECK(s.init.safetensors == NULL);
	s_expect_refused(LLAMA "}, \"init\": {}}", "/init/safetensors", "init.safetensors is required");
	s_expect_refused(LLAMA "}, \"init\": {\"safetensors\": \"\"}}", "/init/safetensors", "(got an empty string)");
	s_expect_refused(LLAMA "}, \"init\": {\"hf\": \"x\"}}", "/init/hf", "unknown field \"hf\" in init");
	s_expect_refused(LLAMA "}, \"init\": \"x\"}", "/init", "init must be an object");
	s_expect_refused("{\"program\": {\"argv\": [\"/bin/true\"]}, \"init\": {\"safetensors\": \"x\"}}",
			 "/init", "a program job has no init");
	CHECK(s_parse(LLAMA "}, \"init\": {\"safetensors\": \"../w.safetensors\"}}", &s, &err) == 0);
	CHECK(jobspec_check_paths(&s, &err) == -EINVAL);
	CHECK_STR(err.pointer, "/init/safetensors");
	CHECK_CONTAINS(err.message, "init.safetensors must be a path relative to the agent's --data-root");
	jobspec_free(&s);
}

int main(void)
{
	s_run("llama_defaults", test_llama_defaults);
	s_run("llama_presets", test_llama_presets);
	s_run("llama_errors", test_llama_errors);
	s_run("llama_round_trip", test_llama_round_trip);
	s_run("gpt2_json_unchanged", test_gpt2_json_unchanged);
	s_run("init", test_init);

	printf("%d passed, %d failed\n", s_n_passed, s_n_failed);
	return s_n_failed ? 1 : 0;
}
