/*
 * gpus: the node's NVIDIA GPUs as the agent advertises them (count, name,
 * memory, UUID), found through NVML. libnvidia-ml.so.1 comes with the
 * driver, not the toolkit, so it is opened with dlopen at run time: the
 * agent has no link-time CUDA dependency and runs the same binary on CPU
 * nodes, where discovery finds 0 GPUs and says why.
 */
#ifndef RINGMASTER_WORKER_GPUS_H
#define RINGMASTER_WORKER_GPUS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define GPUS_MAX 64
#define GPUS_NAME_BYTES 96 /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */
#define GPUS_UUID_BYTES 96 /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */

typedef struct {
	int index;                  /* NVML's index: PCI bus order */
	char name[GPUS_NAME_BYTES]; /* "NVIDIA H100 80GB HBM3" */
	char uuid[GPUS_UUID_BYTES]; /* "GPU-8f6b...": what CUDA_VISIBLE_DEVICES takes */
	uint64_t memory_bytes;      /* total device memory */
} gpu_info_t;

/*
 * Find up to `max` GPUs into out[0..]. Returns how many (0 or more), in
 * NVML index order. When there is no usable NVML (library missing, driver
 * not loaded, no device) it returns 0 with one line in `err` saying why
 * ("no NVIDIA driver: libnvidia-ml.so.1: cannot open shared object
 * file..."); `err` is "" when GPUs were found. A device NVML lists but
 * cannot describe is a negative errno (-EIO) with the NVML error named.
 * NVML is initialized and shut down within the call.
 */
int gpus_discover(gpu_info_t *out, int max, char *err, size_t errlen);

/*
 * Keep only the GPUs that `visible` names (the agent's own
 * CUDA_VISIBLE_DEVICES, e.g. set by Slurm or a container runtime), in the
 * order listed: a comma-separated list of NVML indices (PCI bus order, as
 * with CUDA_DEVICE_ORDER=PCI_BUS_ID) or UUIDs ("GPU-..." or a unique
 * prefix of one). NULL keeps all; "" or "-1"-style entries (anything that
 * matches no GPU) end the list, as CUDA does. Compacts gpus[] in place and
 * returns the new count.
 */
int gpus_filter_visible(gpu_info_t *gpus, int n, const char *visible);

/*
 * The GPUs an agent advertises, as its --gpus says: `want` -1 none ("--gpus
 * none"), 0 every GPU found (gpus_discover, then gpus_filter_visible with
 * the agent's CUDA_VISIBLE_DEVICES), N > 0 the first N found. Fills `gpus`
 * (GPUS_MAX entries) and returns their count; when that is 0, `note`
 * (notelen bytes) says why. -ENODEV (with one "ringworker agent: error:"
 * line on `log`) when N asks for more GPUs than there are.
 */
int gpus_select(int want, gpu_info_t *gpus, char *note, size_t notelen, FILE *log);

#endif
