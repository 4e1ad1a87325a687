/*
 * modeltab: the pieces the models' tensor-table builders share (gpt2.c's
 * and llama_layout.c's): appending a tensor to a table with its cut across
 * tensor-parallel ranks, and the config fields' "must be positive" check.
 * No dependencies beyond model.h, so that the fuzzers that build a table
 * (tests/fuzz) can link it alone.
 */
#ifndef RINGMASTER_ENGINE_MODELTAB_H
#define RINGMASTER_ENGINE_MODELTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

/*
 * Append tab[(*n)++]: a tensor `name` of logical shape (d0, d1) (d1 unused
 * when ndim is 1) at offset *off, cut along `split` (0 or 1; -1:
 * replicated) across tp ranks, dim 0 padded to a multiple of tp (model.h);
 * advances *off by its local numel. The caller sized tab.
 */
void modeltab_add(model_tensor_t *tab, int *n, size_t *off, const char *name, int ndim, int64_t d0,
                  int64_t d1, bool decay, int split, int64_t tp);

/* 0 when v > 0; else -1 with "<field> (<v>) must be positive" in err. */
int modeltab_check_positive(const char *field, int v, char *err, size_t errlen);

#endif
