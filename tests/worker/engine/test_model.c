/*
 * test_model: the model interface and its registry (worker/engine/model.h)
 * on the CPU: GPT-2's CPU row is found by name, an unknown architecture is
 * -ENOENT naming it, creation reports the kind of failure by code (-EINVAL
 * for a config the model refuses, -ENOMEM for one that does not fit), and
 * a step through the interface (forward, backward, AdamW with the table's
 * decay ranges) gives the bits the direct gpt2_* calls give. gpt2_layout
 * gives the table and streamed max range of a model of the same config.
 * Tensor parallelism's refusals (model_options_t.tp): sizes that do not
 * divide, a GPU row without tp_comm (and none by one with it), a rank out
 * of range, each naming the number; and a
 * t = 2 part's table (local shape, full_shape, tp_split, the padding).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2.h"
#include "model.h"
#include "optim.h"

static int n_failed;

static void check(int ok, const char *what)
{
	if (!ok) {
		n_failed++;
		fprintf(stderr, "FAIL: %s\n", what);
	}
}

static model_config_t base(void)
{
	return (model_config_t){.n_layer = 2, .n_head = 2, .n_embd = 16, .vocab_size = 64, .seq_len = 16};
}

static void s_never(void *ctx, const float *in, float *out, size_t n)
{
	(void)ctx, (void)in, (void)out, (void)n;
	fprintf(stderr, "FAIL: a collective during create\n");
	exit(1);
}

static void s_never_ar(void *ctx, float *buf, size_t n)
{
	(void)ctx, (void)buf, (void)n;
	fprintf(stderr, "FAIL: a collective during create\n");
	exit(1);
}

/* model_create with a TP group of `size` (rank `rank`): rc, err filled */
static int s_tp_create(const char *arch, model_device_t dev, const model_config_t *cfg, int max_T,
                       int rank, int size, model_t **ret, char *err, size_t errlen)
{
	model_tp_t tp = {.rank = rank, .size = size, .sequence_parallel = true,
			 .allgather = s_never, .reduce_scatter = s_never, .allreduce = s_never_ar};
	model_options_t opt = {.max_B = 2, .max_T = max_T, .tp = &tp};
	*ret = NULL;
	return model_create(arch, dev, cfg, &opt, ret, err, errlen);
}

static void s_check_tp(void)
{
	char err[512] = "";
	model_t *m = NULL;
	model_config_t cfg = base();
	int rc = s_tp_create("gpt2", MODEL_DEVICE_CPU, &cfg, 16, 0, 4, &m, err, sizeof err);
	check(rc == -EINVAL && strstr(err, "model.n_head (2) must be divisible by parallel.tensor (4)"),
	      "tp: gpt2 n_head not divisible, named");
	rc = s_tp_create("gpt2", MODEL_DEVICE_CPU, &cfg, 15, 0, 2, &m, err, sizeof err);
	check(rc == -EINVAL && strstr(err, "sequence length") && strstr(err, "(15)"),
	      "tp: a sequence length not divisible, named");
	rc = s_tp_create("gpt2", MODEL_DEVICE_CPU, &cfg, 16, 2, 2, &m, err, sizeof err);
	check(rc == -EINVAL && strstr(err, "parallel.tensor"), "tp: rank out of range");
	/* a GPU row without tp_comm refuses, naming both; one with it does not
	 * refuse for TP (it may fail later for want of a GPU) */
	static const char *const archs[] = {"gpt2", "llama"};
	for (int i = 0; i < 2; i++) {
		const model_ops_t *ops = model_find(archs[i], MODEL_DEVICE_CUDA);
		if (!ops)
			continue;
		model_config_t c = base();
		c.n_head = 4;
		c.n_kv_head = 2;
		c.ffn_dim = 32;
		err[0] = '\0';
		rc = s_tp_create(archs[i], MODEL_DEVICE_CUDA, &c, 16, 0, 2, &m, err, sizeof err);
		bool refused = rc == -EINVAL && strstr(err, "parallel.tensor (2)") &&
			       strstr(err, "parallel.device cuda");
		check(ops->tp_comm ? !refused : refused,
		      "tp: a GPU row refuses, naming parallel.tensor and parallel.device, iff it has no tp_comm");
		model_free(m);
		m = NULL;
	}
	model_config_t ll = base();
	ll.n_head = 4;
	ll.n_kv_head = 2;
	ll.ffn_dim = 32;
	ll.rope_theta = 10000;
	ll.norm_eps = 1e-5;
	rc = s_tp_create("llama", MODEL_DEVICE_CPU, &ll, 16, 0, 4, &m, err, sizeof err);
	check(rc == -EINVAL && strstr(err, "model.n_kv_head (2) must be divisible by parallel.tensor (4)"),
	      "tp: llama n_kv_head not divisible, named");
	ll.n_kv_head = 4;
	ll.ffn_dim = 30;
	rc = s_tp_create("llama", MODEL_DEVICE_CPU, &ll, 16, 0, 4, &m, err, sizeof err);
	check(rc == -EINVAL && strstr(err, "model.ffn_dim (30) must be divisible by parallel.tensor (4)"),
	      "tp: llama ffn_dim not divisible, named");

	/* a valid t = 2 part: V 63 pads to 64, 32 rows each */
	cfg.vocab_size = 63;
	rc = s_tp_create("gpt2", MODEL_DEVICE_CPU, &cfg, 16, 1, 2, &m, err, sizeof err);
	check(rc == 0, "tp: a valid t=2 GPT-2 part is created");
	if (rc != 0)
		return;
	int n;
	const model_tensor_t *t = model_tensors(m, &n);
	check(t[0].shape[0] == 32 && t[0].full_shape[0] == 63 && t[0].tp_split == 0,
	      "tp: wte is 32 of 63 (padded) rows, split on dim 0");
	check(t[1].tp_split == MODEL_TP_REPLICATED && t[1].shape[0] == 16, "tp: wpe replicated");
	check(t[4].shape[0] == 16 && t[4].shape[1] == 24 && t[4].full_shape[1] == 48 &&
	      t[4].tp_split == 1, "tp: c_attn.weight is (C, 3C/t), qkv-ruled on dim 1");
	check(t[6].shape[0] == 8 && t[6].full_shape[0] == 16 && t[6].tp_split == 0,
	      "tp: attn.c_proj.weight row-parallel on dim 0");
	model_tp_comm_t v;
	model_tp_comm(m, &v);
	check(v.allgather_calls == 0 && v.sent_floats == 0, "tp: no communication before a step");
	model_free(m);
}

int main(void)
{
	char err[512] = "";
	check(model_find("gpt2", MODEL_DEVICE_CPU) != NULL, "gpt2 has a CPU row");
	check(model_find("llama", MODEL_DEVICE_CPU) != NULL, "llama has a CPU row");
	s_check_tp();

	model_config_t cfg = base();
	model_options_t opt = {.max_B = 2, .max_T = 16, .precision = MODEL_PRECISION_FP32};
	model_t *m = NULL;
	int rc = model_create("nosuch", MODEL_DEVICE_CPU, &cfg, &opt, &m, err, sizeof err);
	check(rc == -ENOENT && strstr(err, "nosuch") != NULL, "unknown arch: -ENOENT naming it");

	cfg.n_head = 3;
	rc = model_create("gpt2", MODEL_DEVICE_CPU, &cfg, &opt, &m, err, sizeof err);
	check(rc == -EINVAL && strstr(err, "model.n_head") != NULL, "bad config: -EINVAL naming the field");

	/* Llama's row refuses through llama_config_check, naming both fields */
	cfg = base();
	cfg.n_head = 4;
	cfg.n_kv_head = 3;
	cfg.ffn_dim = 32;
	cfg.rope_theta = 10000;
	cfg.norm_eps = 1e-5;
	rc = model_create("llama", MODEL_DEVICE_CPU, &cfg, &opt, &m, err, sizeof err);
	check(rc == -EINVAL && strstr(err, "model.n_head (4) must be a multiple of model.n_kv_head (3)"),
	      "llama bad config: -EINVAL naming both fields");
	cfg.n_kv_head = 2;
	rc = model_create("llama", MODEL_DEVICE_CPU, &cfg, &opt, &m, err, sizeof err);
	check(rc == 0 && model_flops_per_token(m, 16) > 0 && model_max_range(m) > 0,
	      "llama: a valid config is created through the registry");
	model_free(m);
	m = NULL;
	cfg.n_embd = 32768; /* 2 layers of 32768^2 x (2 + 2/2 + 3) floats: ~200 GiB with AdamW */
	cfg.ffn_dim = 32768;
	cfg.vocab_size = 1 << 20;
	rc = model_create("llama", MODEL_DEVICE_CPU, &cfg, &opt, &m, err, sizeof err);
	check(rc == -ENOMEM && strstr(err, "does not fit in memory"), "llama: a model that does not fit: -ENOMEM");

	cfg = base();
	cfg.n_embd = 32768;
	cfg.n_head = 1;
	cfg.vocab_size = 1 << 20;
	opt.max_T = 1;
	opt.max_B = 1;
	cfg.seq_len = 1;
	rc = model_create("gpt2", MODEL_DEVICE_CPU, &cfg, &opt, &m, err, sizeof err);
	check(rc == -ENOMEM, "a model that does not fit: -ENOMEM");

	cfg = base();
	opt = (model_options_t){.max_B = 2, .max_T = 16, .precision = MODEL_PRECISION_FP32};
	rc = model_create("gpt2", MODEL_DEVICE_CPU, &cfg, &opt, &m, err, sizeof err);
	check(rc == 0 && m != NULL, "a valid config is created");
	if (rc != 0)
		return 1;
	gpt2_t *g = gpt2_create(&cfg, 2, 16, GPT2_PRECISION_FP32, err, sizeof err);
	check(g != NULL, "the direct model");
	size_t n = model_num_params(m);
	check(n == gpt2_num_params(g), "same size");
	int nt = 0;
	const model_tensor_t *tab = model_tensors(m, &nt);
	check(nt == gpt2_num_tensors(g) && strcmp(tab[nt - 1].name, "ln_f.bias") == 0, "same table");

	gpt2_tensor_t *lt = NULL;
	int ln = 0;
	size_t max_range = 0;
	check(gpt2_layout(&cfg, &lt, &ln, &max_range) == 0 && ln == nt &&
	      memcmp(lt, tab, (size_t)nt * sizeof *lt) == 0, "gpt2_layout gives the same table");
	size_t layer = 12 * 16 * 16 + 13 * 16;
	check(max_range == layer, "the streamed max range is a layer here");
	free(lt);

	model_init_params(m, 7);
	gpt2_init_params(g, 7);
	check(memcmp(model_params(m), gpt2_params(g), n * sizeof(float)) == 0, "same initial bits");
	float *part = malloc(100 * sizeof(float));
	model_init_range(m, 7, 50, 150, part);
	check(memcmp(part, gpt2_params(g) + 50, 100 * sizeof(float)) == 0, "init_range: the same bits");
	free(part);

	int32_t in[32], tg[32];
	for (int i = 0; i < 32; i++) {
		in[i] = (i * 37 + 11) % 64;
		tg[i] = (i * 53 + 7) % 64;
	}
	float *am = calloc(n, sizeof(float)), *av = calloc(n, sizeof(float));
	float *bm = calloc(n, sizeof(float)), *bv = calloc(n, sizeof(float));
	optim_adamw_t hp = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
			    .t = 1};
	for (int s = 0; s < 2; s++) {
		model_zero_grad(m);
		gpt2_zero_grad(g);
		float la = model_forward(m, in, tg, 2, 16);
		float lb = gpt2_forward(g, in, tg, 2, 16);
		check(la == lb, "same loss");
		model_backward(m, 1.0f);
		gpt2_backward(g, 1.0f);
		check(memcmp(model_grads(m), gpt2_grads(g), n * sizeof(float)) == 0, "same gradients");
		optim_adamw_update(tab, nt, model_params(m), model_grads(m), am, av, 0, n, &hp);
		optim_adamw_update(gpt2_tensors(g), gpt2_num_tensors(g), gpt2_params(g), gpt2_grads(g), bm,
				   bv, 0, n, &hp);
		check(memcmp(model_params(m), gpt2_params(g), n * sizeof(float)) == 0, "same update");
	}
	check(model_flops_per_token(m, 16) == gpt2_flops_per_token(g, 16), "same FLOPs");
	check(model_param_bytes(m) == gpt2_param_bytes(g) && model_grad_bytes(m) == gpt2_grad_bytes(g) &&
	      model_activation_bytes(m) == gpt2_activation_bytes(g), "same bytes");
	check(model_dev(m) == NULL, "the CPU row has no device operations");
	free(am);
	free(av);
	free(bm);
	free(bv);
	model_free(m);
	model_free(NULL);
	gpt2_free(g);
	printf("%s\n", n_failed ? "test_model: FAILED" : "test_model: all passed");
	return n_failed ? 1 : 0;
}
