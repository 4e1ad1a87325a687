/*
 * initrand: the engine's deterministic random initialisation, shared by
 * every architecture (gpt2.c, llama_layout.c) so that the CPU and GPU rows
 * of a model start from the same bits.
 *
 * A value depends only on (seed, key, index): no state, no order, no thread
 * count. So any range of a tensor can be computed alone (a ZeRO-3 shard) and
 * equals the same range of the whole. Private to worker/engine/.
 */
#ifndef RINGMASTER_ENGINE_INITRAND_H
#define RINGMASTER_ENGINE_INITRAND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Elements [from, to) of a tensor of normal(0, std) values drawn from
 * (seed, key), into x[0 .. to - from): element i is the cosine (even i) or
 * sine (odd i) half of Box-Muller pair i / 2, each pair from a splitmix64
 * hash of (seed, key, i / 2). Any range gives the bits of the whole.
 */
void initrand_normal(float *x, size_t from, size_t to, uint64_t seed, uint64_t key, double std);

#ifdef __cplusplus
}
#endif

#endif
