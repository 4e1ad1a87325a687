/*
 * cuda_check: the GPU engine's fail-fast checks, shared by its .cu files.
 *
 * A CUDA or cuBLASLt error inside a training step is a device or programming
 * error, not a user error: CUDA_CHECK and CUBLAS_CHECK print file:line, the
 * call, the library's own error string and a hint, then exit with
 * CUDA_EXIT_DEVICE (71, EX_OSERR), distinct from the engine's misuse exit
 * (70, EX_SOFTWARE), so the agent can tell the two apart (STYLE.md, llm.c's
 * cudaCheck). Constructors (gpt2_cuda_create) do not use them: they return
 * NULL with a message instead. Private to worker/engine/cuda/.
 */
#ifndef RINGMASTER_ENGINE_CUDA_CHECK_H
#define RINGMASTER_ENGINE_CUDA_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#define CUDA_EXIT_DEVICE 71
#define CUDA_EXIT_MISUSE 70

#define CUDA_CHECK(call)                                                                        \
	do {                                                                                    \
		cudaError_t cuda_check_rc_ = (call);                                            \
		if (cuda_check_rc_ != cudaSuccess) {                                            \
			fprintf(stderr,                                                         \
				"ringworker: fatal: CUDA error at %s:%d: %s: %s (check the GPU with " \
				"nvidia-smi; rerun with CUDA_LAUNCH_BLOCKING=1 to locate it)\n",        \
				__FILE__, __LINE__, #call, cudaGetErrorString(cuda_check_rc_));         \
			exit(CUDA_EXIT_DEVICE);                                                 \
		}                                                                               \
	} while (0)

/* After a kernel launch: a bad launch configuration is reported at once. */
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#endif
