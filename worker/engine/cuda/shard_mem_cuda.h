/*
 * shard_mem_cuda: the shard_mem_t of worker/shard.h for CUDA device memory,
 * so that a shard_t (ZeRO-2/3 buffers) can live on the GPU that the NCCL
 * communicator works on.
 *
 * Every operation is synchronous from the caller's point of view, like the
 * host version: it runs on the calling thread's per-thread default stream
 * and waits for it, so a buffer is zeroed or summed when the call returns.
 * Allocation failure returns NULL (the shard_t reports it); other CUDA
 * errors are fatal (exit 71, cuda_check.h). Device: the current one.
 */
#ifndef RINGMASTER_ENGINE_SHARD_MEM_CUDA_H
#define RINGMASTER_ENGINE_SHARD_MEM_CUDA_H

#include "shard.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const shard_mem_t shard_mem_cuda;

#ifdef __cplusplus
}
#endif

#endif
