/*
 * test_errors: gpt2_create refuses bad configurations with one line naming
 * the field, and refuses a batch that cannot fit in memory up front (before
 * allocating anything) with a message naming the batch.
 */
#include <stdio.h>
#include <string.h>

#include "gpt2.h"

static int n_failed;

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
		n_failed++;
}

static gpt2_config_t base(void)
{
	gpt2_config_t cfg = {.n_layer = 2, .n_head = 3, .n_embd = 12, .vocab_size = 50, .seq_len = 16};
	return cfg;
}

/* gpt2_create must fail with a message containing `want` */
static void expect_error(const gpt2_config_t *cfg, int B, int T, const char *want, const char *what)
{
	char err[512] = "";
	gpt2_t *m = gpt2_create(cfg, B, T, GPT2_PRECISION_FP32, err, sizeof err);
	int ok = m == NULL && strstr(err, want) != NULL;
	char line[768];
	snprintf(line, sizeof line, "%s: \"%s\"", what, err);
	check(ok, line);
	gpt2_free(m);
}

int main(void)
{
	gpt2_config_t cfg = base();
	cfg.n_embd = 100;
	cfg.n_head = 3;
	expect_error(&cfg, 1, 16, "model.n_embd (100) must be divisible by model.n_head (3)",
		     "n_embd not divisible by n_head");

	cfg = base();
	cfg.n_layer = 0;
	expect_error(&cfg, 1, 16, "model.n_layer (0) must be positive", "zero layers");
	cfg = base();
	cfg.vocab_size = -5;
	expect_error(&cfg, 1, 16, "model.vocab_size (-5)", "negative vocabulary");
	cfg = base();
	expect_error(&cfg, 0, 16, "train.batch_size (0)", "zero batch");
	expect_error(&cfg, 1, 17, "model.seq_len (16)", "T above seq_len");

	cfg = base();
	cfg.seq_len = 65536;
	expect_error(&cfg, 65536, 65536, "batch does not fit in memory", "huge batch refused");
	expect_error(&cfg, 65536, 65536, "train.batch_size 65536", "the message names the batch size");
	expect_error(&cfg, 65536, 65536, "GiB for activations", "the message gives the size");

	cfg = base();
	cfg.n_embd = 32768;
	cfg.n_head = 1;
	cfg.vocab_size = 1 << 20;
	expect_error(&cfg, 1, 1, "does not fit in memory", "huge model refused");

	cfg = base();
	char err[256] = "";
	gpt2_t *m = gpt2_create(&cfg, 2, 16, GPT2_PRECISION_FP32, err, sizeof err);
	check(m != NULL && err[0] == '\0', "a valid configuration is accepted");
	check(gpt2_num_tensors(m) == 2 + 12 * 2 + 2, "tensor table size");
	check(gpt2_tensor_by_name(m, "h.1.mlp.c_proj.weight") != NULL &&
	      gpt2_tensor_by_name(m, "h.1.mlp.c_proj.weight")->shape[0] == 48 &&
	      gpt2_tensor_by_name(m, "h.1.mlp.c_proj.weight")->shape[1] == 12,
	      "c_proj.weight has HF shape (4C, C)");
	check(gpt2_tensor_by_name(m, "h.2.ln_1.weight") == NULL, "no tensor for a missing layer");
	const gpt2_tensor_t *last = gpt2_tensor(m, gpt2_num_tensors(m) - 1);
	check(last->offset + last->numel == gpt2_num_params(m) && strcmp(last->name, "ln_f.bias") == 0,
	      "ln_f.bias closes the flat buffer");
	check(gpt2_param_bytes(m) == gpt2_num_params(m) * 4, "param bytes count the flat buffer");
	check(gpt2_grad_bytes(m) == gpt2_num_params(m) * 4, "grad bytes count the flat buffer");
	check(gpt2_activation_bytes(m) > 0, "activation bytes count the arena");
	gpt2_free(m);
	gpt2_free(NULL);

	printf("%s\n", n_failed ? "test_errors: FAILED" : "test_errors: all passed");
	return n_failed ? 1 : 0;
}
