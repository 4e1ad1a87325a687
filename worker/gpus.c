/*
 * gpus: GPU discovery for the agent (see gpus.h), through NVML opened with
 * dlopen. Only the handful of NVML entry points below are used; their
 * types are declared here from NVML's stable C ABI (nvml.h is not needed
 * to build, so the worker builds the same on nodes without the driver).
 */
#include "gpus.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVML_LIB "libnvidia-ml.so.1"

/* From nvml.h: nvmlReturn_t is an int enum with 0 for success,
 * nvmlDevice_t an opaque pointer, nvmlMemory_t three byte counts. */
typedef int nvml_return_t;
typedef void *nvml_device_t;
typedef struct {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
} nvml_memory_t;

typedef struct {
	nvml_return_t (*init)(void);
	nvml_return_t (*shutdown)(void);
	const char *(*error_string)(nvml_return_t);
	nvml_return_t (*count)(unsigned int *);
	nvml_return_t (*handle)(unsigned int, nvml_device_t *);
	nvml_return_t (*name)(nvml_device_t, char *, unsigned int);
	nvml_return_t (*uuid)(nvml_device_t, char *, unsigned int);
	nvml_return_t (*memory)(nvml_device_t, nvml_memory_t *);
} nvml_t;

/* dlsym into a function pointer without the object-to-function pointer
 * cast ISO C does not define (POSIX guarantees the representation). */
static bool s_sym(void *lib, const char *name, void *ret_fn, size_t fn_bytes)
{
	void *p = dlsym(lib, name);
	if (!p)
		return false;
	memcpy(ret_fn, &p, fn_bytes);
	return true;
}

static const char *s_nvml_error(const nvml_t *n, nvml_return_t r)
{
	const char *s = n->error_string ? n->error_string(r) : NULL;
	return s ? s : "unknown NVML error";
}

int gpus_discover(gpu_info_t *out, int max, char *err, size_t errlen)
{
	if (errlen)
		err[0] = '\0';
	void *lib = dlopen(NVML_LIB, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *why = dlerror();
		snprintf(err, errlen, "no NVIDIA driver: %s", why ? why : NVML_LIB " not found");
		return 0;
	}
	nvml_t n = {0};
	const char *missing = NULL;
#define SYM(field, name) \
	if (!missing && !s_sym(lib, name, &n.field, sizeof n.field)) \
		missing = name;
	SYM(init, "nvmlInit_v2")
	SYM(shutdown, "nvmlShutdown")
	SYM(error_string, "nvmlErrorString")
	SYM(count, "nvmlDeviceGetCount_v2")
	SYM(handle, "nvmlDeviceGetHandleByIndex_v2")
	SYM(name, "nvmlDeviceGetName")
	SYM(uuid, "nvmlDeviceGetUUID")
	SYM(memory, "nvmlDeviceGetMemoryInfo")
#undef SYM
	if (missing) {
		snprintf(err, errlen, "no usable NVIDIA driver: %s has no %s (driver too old?)", NVML_LIB,
		         missing);
		dlclose(lib);
		return 0;
	}
	nvml_return_t r = n.init();
	if (r != 0) {
		snprintf(err, errlen, "no usable NVIDIA driver: nvmlInit: %s", s_nvml_error(&n, r));
		dlclose(lib);
		return 0;
	}
	int found = 0;
	unsigned int count = 0;
	r = n.count(&count);
	if (r != 0) {
		snprintf(err, errlen, "NVML cannot count the GPUs: %s", s_nvml_error(&n, r));
		goto out;
	}
	if (count == 0) {
		snprintf(err, errlen, "the NVIDIA driver sees no GPU");
		goto out;
	}
	for (unsigned int i = 0; i < count && found < max; i++) {
		gpu_info_t *g = &out[found];
		nvml_device_t dev = NULL;
		nvml_memory_t mem = {0};
		memset(g, 0, sizeof *g);
		const char *what = "nvmlDeviceGetHandleByIndex";
		if ((r = n.handle(i, &dev)) == 0) {
			what = "nvmlDeviceGetName";
			if ((r = n.name(dev, g->name, sizeof g->name)) == 0) {
				what = "nvmlDeviceGetUUID";
				if ((r = n.uuid(dev, g->uuid, sizeof g->uuid)) == 0) {
					what = "nvmlDeviceGetMemoryInfo";
					r = n.memory(dev, &mem);
				}
			}
		}
		if (r != 0) {
			snprintf(err, errlen, "GPU %u: %s: %s", i, what, s_nvml_error(&n, r));
			found = -EIO;
			goto out;
		}
		g->name[sizeof g->name - 1] = '\0';
		g->uuid[sizeof g->uuid - 1] = '\0';
		g->index = (int)i;
		g->memory_bytes = (uint64_t)mem.total;
		found++;
	}
out:
	n.shutdown();
	dlclose(lib);
	return found;
}

/* The GPU `entry` names: an NVML index, or a UUID or a unique prefix of one
 * ("GPU-" may be left out, as CUDA allows). -1 when none. */
static int s_match(const gpu_info_t *gpus, int n, const char *entry, size_t len)
{
	if (len == 0)
		return -1;
	bool digits = true;
	for (size_t i = 0; i < len; i++)
		digits = digits && entry[i] >= '0' && entry[i] <= '9';
	if (digits) {
		if (len > 5)
			return -1;
		long v = strtol(entry, NULL, 10);
		for (int i = 0; i < n; i++)
			if (gpus[i].index == v)
				return i;
		return -1;
	}
	if (len >= 4 && strncmp(entry, "GPU-", 4) != 0 && strncmp(entry, "MIG-", 4) != 0) {
		/* A bare UUID: compare after the "GPU-" prefix. */
		int hit = -1;
		for (int i = 0; i < n; i++)
			if (strncmp(gpus[i].uuid, "GPU-", 4) == 0 && strncmp(gpus[i].uuid + 4, entry, len) == 0) {
				if (hit >= 0)
					return -1; /* ambiguous */
				hit = i;
			}
		return hit;
	}
	int hit = -1;
	for (int i = 0; i < n; i++)
		if (strncmp(gpus[i].uuid, entry, len) == 0) {
			if (hit >= 0)
				return -1;
			hit = i;
		}
	return hit;
}

int gpus_filter_visible(gpu_info_t *gpus, int n, const char *visible)
{
	if (!visible)
		return n;
	gpu_info_t kept[GPUS_MAX];
	bool taken[GPUS_MAX] = {false};
	int k = 0;
	const char *p = visible;
	while (k < n && k < GPUS_MAX) {
		while (*p == ' ')
			p++;
		size_t len = strcspn(p, ",");
		size_t trimmed = len;
		while (trimmed > 0 && p[trimmed - 1] == ' ')
			trimmed--;
		int i = s_match(gpus, n < GPUS_MAX ? n : GPUS_MAX, p, trimmed);
		if (i < 0)
			break; /* CUDA ignores everything from an invalid entry on */
		if (!taken[i]) {
			taken[i] = true;
			kept[k++] = gpus[i];
		}
		if (p[len] != ',')
			break;
		p += len + 1;
	}
	memcpy(gpus, kept, (size_t)k * sizeof *gpus);
	return k;
}

int gpus_select(int want, gpu_info_t *gpus, char *note, size_t notelen, FILE *log)
{
	if (want < 0) {
		snprintf(note, notelen, "--gpus none");
		return 0;
	}
	char err[256];
	int n = gpus_discover(gpus, GPUS_MAX, err, sizeof err);
	if (n < 0) {
		if (want > 0) {
			fprintf(log, "ringworker agent: error: --gpus %d: GPU discovery failed: %s\n", want, err);
			return -ENODEV;
		}
		snprintf(note, notelen, "GPU discovery failed: %.200s", err);
		return 0;
	}
	const char *visible = getenv("CUDA_VISIBLE_DEVICES");
	int found = n;
	n = gpus_filter_visible(gpus, n, visible);
	if (n == 0)
		snprintf(note, notelen, "%s", err[0] ? err : "");
	if (n == 0 && found > 0)
		snprintf(note, notelen, "CUDA_VISIBLE_DEVICES=%.120s names none of the %d GPU(s) found", visible,
		         found);
	if (want > 0) {
		if (n < want) {
			fprintf(log, "ringworker agent: error: --gpus %d, but this node has %d usable GPU(s)%s%s\n", want,
			        n, n == 0 ? ": " : "", n == 0 ? note : "");
			return -ENODEV;
		}
		n = want;
	}
	return n;
}
