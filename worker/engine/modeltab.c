/*
 * modeltab: shared pieces of the models' tensor tables (see modeltab.h),
 * formerly gpt2.c's s_add_tensor / s_check_positive and llama_layout.c's
 * s_add / s_positive.
 */
#include "modeltab.h"

#include <stdio.h>

void modeltab_add(model_tensor_t *tab, int *n, size_t *off, const char *name, int ndim, int64_t d0,
                  int64_t d1, bool decay, int split, int64_t tp)
{
	model_tensor_t *t = &tab[(*n)++];
	snprintf(t->name, sizeof t->name, "%s", name);
	t->ndim = ndim;
	t->full_shape[0] = d0;
	t->full_shape[1] = ndim == 2 ? d1 : 0;
	t->tp_split = split;
	t->shape[0] = split == 0 ? (d0 + tp - 1) / tp : d0;
	t->shape[1] = ndim == 2 ? (split == 1 ? d1 / tp : d1) : 0;
	t->numel = (size_t)t->shape[0] * (size_t)(ndim == 2 ? t->shape[1] : 1);
	t->offset = *off;
	t->decay = decay;
	*off += t->numel;
}

int modeltab_check_positive(const char *field, int v, char *err, size_t errlen)
{
	if (v > 0)
		return 0;
	snprintf(err, errlen, "%s (%d) must be positive", field, v);
	return -1;
}
