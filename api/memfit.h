/*
 * memfit: how much memory one rank of a job needs, estimated from its spec
 * alone, so that the coordinator can refuse a job no node can hold (422 at
 * submission) or keep it queued, instead of starting ranks that the engine's
 * own check (exit 4) or the OOM killer stops.
 *
 * The model is GPT-2 as worker/engine/gpt2.c builds it (for model.arch
 * "llama", P and a layer are Llama's: docs/jobspec.md). With P parameters
 * (V*C + T*C + L*(12*C^2 + 13*C) + 2*C, for vocab_size V, seq_len T,
 * n_embd C, n_layer L), world size W and a shard of S = ceil(P/W) floats:
 *
 *   sharding  params            grads               AdamW (m, v)
 *   none      4P                4P                  8P
 *   zero1     4P                4P + 4S             8S
 *   zero2     4P                4S + one layer      8S
 *   zero3     4S + one layer    4S + one layer      8S
 *
 * (bf16 adds a 2P copy of the parameters where they are whole.) With
 * parallel.tensor t > 1, P is a TP rank's part ((P - R + padded vocabulary
 * rows) / t + R, R the replicated tensors), W the data-parallel size W / t,
 * "one layer" is a layer's local part (split matrices / t, replicated
 * norms and biases whole), and the activations are
 * the arena / t plus 8 B T C bytes (docs/jobspec.md "Memory"). Activations
 * are the engine's arena for train.batch_size x model.seq_len tokens, the
 * same formula as gpt2.c's. These are the figures ranks report in METRICS
 * (params/grads/optim/activations bytes); docs/jobspec.md states the
 * formula, and the cluster-memory-fit test checks the estimate against what
 * ranks report. It is an estimate of the training state: the process adds
 * its code, the data loader's mapped files and the allocator's slack.
 */
#ifndef RINGMASTER_API_MEMFIT_H
#define RINGMASTER_API_MEMFIT_H

#include <stddef.h>

#include "jobspec.h"

typedef struct {
	double n_params;          /* the model's parameters */
	double params_bytes;      /* one rank's, by the table above */
	double grads_bytes;
	double optim_bytes;
	double activations_bytes;
	double total_bytes;       /* the sum: what one rank needs */
} memfit_t;

/* The estimate for one rank of `spec` (in double: absurd specs cannot
 * overflow before they are refused). */
void memfit_estimate(const jobspec_t *spec, memfit_t *ret);

/* The estimate as one phrase for messages: "about 1.2 GiB per rank
 * (parameters 0.1, gradients 0.1, AdamW 0.2, activations 0.8 GiB)". */
void memfit_describe(const memfit_t *m, char *buf, size_t len);

#endif
