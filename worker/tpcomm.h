/*
 * tpcomm: a tensor-parallel group for the engine (model.h's model_tp_t)
 * made of a comm_t (worker/comm: the TP sub-group comm_split gives the
 * rank, or any comm in tests and benchmarks). The engine's collectives
 * must not fail (model.h): a failed call leaves the output as it is and
 * the first error is kept here for the trainer to report after the step
 * (the comm itself fails every later call at once, comm.h).
 */
#ifndef RINGMASTER_WORKER_TPCOMM_H
#define RINGMASTER_WORKER_TPCOMM_H

#include <stddef.h>

#include "comm/comm.h"
#include "engine/model.h"

typedef struct {
	comm_t *comm;   /* borrowed */
	size_t *counts; /* (size) per-call counts */
	int size;
	int error;      /* the first failure's code (negative), 0 while none */
	char error_line[256];
} tpcomm_t;

/*
 * Set s up over comm (borrowed; it must outlive the model) and fill *ret
 * with its rank, size, sequence_parallel true and the three collectives,
 * ctx = s. 0, or -ENOMEM.
 */
int tpcomm_init(tpcomm_t *s, comm_t *comm, model_tp_t *ret);

/* Free what tpcomm_init allocated (not the comm); accepts a zeroed s. */
void tpcomm_free(tpcomm_t *s);

/* The first collective failure since tpcomm_init (0: none), with its line
 * (comm_last_error's) in s->error_line. */
int tpcomm_error(const tpcomm_t *s);

#endif
