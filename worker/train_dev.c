/*
 * train_dev: the registry of device rows (see train_dev.h). The CUDA row
 * exists in builds with the CUDA engine (RINGMASTER_HAVE_CUDA_ENGINE).
 */
#include "train_dev.h"

const train_dev_t *train_dev_find(jobspec_device_t device)
{
	switch (device) {
	case JOBSPEC_DEVICE_CPU:
		return &train_dev_cpu;
	case JOBSPEC_DEVICE_CUDA:
#ifdef RINGMASTER_HAVE_CUDA_ENGINE
		return &train_dev_cuda;
#else
		return NULL;
#endif
	}
	return NULL;
}
