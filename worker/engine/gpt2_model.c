/*
 * gpt2_model: GPT-2's CPU row of the model registry (see gpt2_model.h):
 * each operation is the gpt2.c function of the same name (modelcpu.h).
 */
#include "gpt2_model.h"

#include "gpt2.h"
#include "modelcpu.h"

static int s_create(const model_config_t *cfg, const model_options_t *opt, void **ret_impl,
		    char *err, size_t errlen)
{
	gpt2_precision_t precision = opt->precision == MODEL_PRECISION_BF16 ? GPT2_PRECISION_BF16
									   : GPT2_PRECISION_FP32;
	gpt2_t *m = NULL;
	int rc = gpt2_new_tp(cfg, opt->max_B, opt->max_T, precision, opt->streaming, opt->stream,
			     opt->tp, &m, err, errlen);
	if (rc == 0)
		*ret_impl = m;
	return rc;
}

static const model_tensor_t *s_tensors(const void *impl, int *ret_n)
{
	*ret_n = gpt2_num_tensors(impl);
	return gpt2_tensors(impl);
}

static void s_init_range(const void *impl, uint64_t seed, size_t lo, size_t hi, float *out)
{
	gpt2_init_range(impl, seed, lo, hi, out);
}

static double s_flops_per_token(const void *impl, int T)
{
	return gpt2_flops_per_token(impl, T);
}

MODELCPU_ROW_OPS(gpt2)

const model_ops_t gpt2_model_cpu = MODELCPU_ROW("gpt2");
