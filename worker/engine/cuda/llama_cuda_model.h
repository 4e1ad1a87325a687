/*
 * llama_cuda_model: the registry row of Llama on CUDA (llama_cuda_model.c,
 * over llama_cuda.h), for worker/engine/model.c's table in builds with the
 * CUDA engine. Plain C: no CUDA header is needed to name the row.
 */
#ifndef RINGMASTER_ENGINE_LLAMA_CUDA_MODEL_H
#define RINGMASTER_ENGINE_LLAMA_CUDA_MODEL_H

#include "../model.h"

extern const model_ops_t llama_model_cuda;

#endif
