/*
 * llama_model: Llama's CPU row of the model registry (model.h), over
 * llama.h.
 */
#ifndef RINGMASTER_ENGINE_LLAMA_MODEL_H
#define RINGMASTER_ENGINE_LLAMA_MODEL_H

#include "model.h"

extern const model_ops_t llama_model_cpu;

#endif
