/*
 * gpt2_model: GPT-2's rows of the model registry (model.h): the CPU row
 * over gpt2.c and, in builds with the CUDA engine, the CUDA row over
 * cuda/gpt2_cuda.h (cuda/gpt2_cuda_model.c). Only model.c names them.
 */
#ifndef RINGMASTER_ENGINE_GPT2_MODEL_H
#define RINGMASTER_ENGINE_GPT2_MODEL_H

#include "model.h"

extern const model_ops_t gpt2_model_cpu;
extern const model_ops_t gpt2_model_cuda;

#endif
