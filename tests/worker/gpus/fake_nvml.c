/*
 * fake_nvml: a stand-in libnvidia-ml.so.1 for the tests of GPU discovery
 * (worker/gpus.c) on machines without NVIDIA GPUs. It implements the eight
 * NVML entry points gpus.c uses and describes the GPUs listed in
 * FAKE_NVML_GPUS ("name|memory_bytes|uuid;name|memory_bytes|uuid"; unset or
 * empty: none). FAKE_NVML_FAIL=init makes nvmlInit_v2 fail (as with no
 * driver loaded), FAKE_NVML_FAIL=memory makes nvmlDeviceGetMemoryInfo fail
 * for the last GPU. A test puts this library's folder first in
 * LD_LIBRARY_PATH, so the real one (if any) is not the one dlopen finds.
 * Never installed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FAKE 16

typedef struct {
	char name[96];
	unsigned long long memory;
	char uuid[96];
} fake_gpu_t;

typedef struct {
	unsigned long long total, free, used;
} fake_memory_t;

/* NVML's return codes used here (nvml.h). */
enum { OK = 0, ERR_INVALID_ARGUMENT = 2, ERR_DRIVER_NOT_LOADED = 9, ERR_UNKNOWN = 999 };

static fake_gpu_t s_gpus[MAX_FAKE];
static unsigned s_n;
static int s_inits;

int nvmlInit_v2(void);
int nvmlShutdown(void);
const char *nvmlErrorString(int r);
int nvmlDeviceGetCount_v2(unsigned int *count);
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **dev);
int nvmlDeviceGetName(void *dev, char *name, unsigned int len);
int nvmlDeviceGetUUID(void *dev, char *uuid, unsigned int len);
int nvmlDeviceGetMemoryInfo(void *dev, fake_memory_t *mem);

static const char *s_fail(void)
{
	const char *f = getenv("FAKE_NVML_FAIL");
	return f ? f : "";
}

int nvmlInit_v2(void)
{
	if (strcmp(s_fail(), "init") == 0)
		return ERR_DRIVER_NOT_LOADED;
	s_n = 0;
	const char *spec = getenv("FAKE_NVML_GPUS");
	while (spec && *spec && s_n < MAX_FAKE) {
		size_t len = strcspn(spec, ";");
		char entry[256];
		if (len >= sizeof entry)
			return ERR_INVALID_ARGUMENT;
		memcpy(entry, spec, len);
		entry[len] = '\0';
		char *bar1 = strchr(entry, '|'), *bar2 = bar1 ? strchr(bar1 + 1, '|') : NULL;
		if (!bar2)
			return ERR_INVALID_ARGUMENT;
		*bar1 = *bar2 = '\0';
		fake_gpu_t *g = &s_gpus[s_n++];
		snprintf(g->name, sizeof g->name, "%.95s", entry);
		g->memory = strtoull(bar1 + 1, NULL, 10);
		snprintf(g->uuid, sizeof g->uuid, "%.95s", bar2 + 1);
		spec += len + (spec[len] == ';');
	}
	s_inits++;
	return OK;
}

int nvmlShutdown(void)
{
	s_inits--;
	return OK;
}

const char *nvmlErrorString(int r)
{
	switch (r) {
	case OK: return "Success";
	case ERR_INVALID_ARGUMENT: return "Invalid Argument";
	case ERR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	default: return "Unknown Error";
	}
}

int nvmlDeviceGetCount_v2(unsigned int *count)
{
	*count = s_n;
	return OK;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **dev)
{
	if (i >= s_n)
		return ERR_INVALID_ARGUMENT;
	*dev = &s_gpus[i];
	return OK;
}

int nvmlDeviceGetName(void *dev, char *name, unsigned int len)
{
	const fake_gpu_t *g = dev;
	if (strlen(g->name) + 1 > len)
		return ERR_INVALID_ARGUMENT;
	strcpy(name, g->name);
	return OK;
}

int nvmlDeviceGetUUID(void *dev, char *uuid, unsigned int len)
{
	const fake_gpu_t *g = dev;
	if (strlen(g->uuid) + 1 > len)
		return ERR_INVALID_ARGUMENT;
	strcpy(uuid, g->uuid);
	return OK;
}

int nvmlDeviceGetMemoryInfo(void *dev, fake_memory_t *mem)
{
	const fake_gpu_t *g = dev;
	if (strcmp(s_fail(), "memory") == 0 && g == &s_gpus[s_n - 1])
		return ERR_UNKNOWN;
	mem->total = g->memory;
	mem->free = g->memory;
	mem->used = 0;
	return OK;
}
