/*
 * llama_model: Llama's CPU row of the model registry (see llama_model.h):
 * each operation is the llama.c function of the same name (modelcpu.h).
 */
#include "llama_model.h"

#include "llama.h"
#include "modelcpu.h"

static int s_create(const model_config_t *cfg, const model_options_t *opt, void **ret_impl,
		    char *err, size_t errlen)
{
	llama_t *m = NULL;
	int rc = llama_new_tp(cfg, opt->max_B, opt->max_T, opt->precision, opt->streaming, opt->stream,
			      opt->tp, &m, err, errlen);
	if (rc == 0)
		*ret_impl = m;
	return rc;
}

static const model_tensor_t *s_tensors(const void *impl, int *ret_n)
{
	return llama_tensors(impl, ret_n);
}

static void s_init_range(const void *impl, uint64_t seed, size_t lo, size_t hi, float *out)
{
	llama_init_range_of(impl, seed, lo, hi, out);
}

static double s_flops_per_token(const void *impl, int T)
{
	return llama_model_flops(impl, T);
}

MODELCPU_ROW_OPS(llama)

const model_ops_t llama_model_cpu = MODELCPU_ROW("llama");
