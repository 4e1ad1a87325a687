/*
 * test_gpus: the agent's GPU discovery (worker/gpus.c).
 *
 *   test_gpus discover  the real NVML, whatever this machine has: without
 *                       libnvidia-ml.so.1 (no driver) 0 GPUs and one line
 *                       saying so; with it, every GPU has a name, a UUID
 *                       and memory, indices 0..n-1
 *   test_gpus fake      with tests/worker/gpus/fake_nvml.c first in
 *                       LD_LIBRARY_PATH (meson sets it): two GPUs described
 *                       exactly; a driver that does not load (0 GPUs, the
 *                       NVML error named); a GPU that cannot be described
 *                       (-EIO naming it); no GPU at all
 *   test_gpus filter    gpus_filter_visible: indices, UUIDs and UUID
 *                       prefixes, order, an invalid entry ending the list
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gpus.h"

static void test_discover(void)
{
	gpu_info_t g[GPUS_MAX];
	char err[256] = "untouched";
	int n = gpus_discover(g, GPUS_MAX, err, sizeof err);
	CHECK(n >= 0, "gpus_discover: %d (%s)", n, err);
	if (n == 0) {
		printf("no GPU here: %s\n", err);
		CHECK(err[0] != '\0' && strcmp(err, "untouched") != 0, "no reason given");
		CHECK(strstr(err, "NVIDIA driver") || strstr(err, "GPU"), "reason '%s' names neither", err);
		CHECK(strchr(err, '\n') == NULL, "reason is not one line: '%s'", err);
		return;
	}
	CHECK(err[0] == '\0', "GPUs found but err is '%s'", err);
	for (int i = 0; i < n; i++) {
		printf("GPU %d: %s, %llu bytes, %s\n", g[i].index, g[i].name,
		       (unsigned long long)g[i].memory_bytes, g[i].uuid);
		CHECK(g[i].index == i, "GPU %d has index %d", i, g[i].index);
		CHECK(g[i].name[0], "GPU %d has no name", i);
		CHECK(strncmp(g[i].uuid, "GPU-", 4) == 0, "GPU %d UUID '%s'", i, g[i].uuid);
		CHECK(g[i].memory_bytes >= (1ull << 30), "GPU %d memory %llu", i,
		      (unsigned long long)g[i].memory_bytes);
	}
}

#define H100 "NVIDIA H100 80GB HBM3|85520809984|GPU-11111111-2222-3333-4444-555555555555"
#define A100 "NVIDIA A100-SXM4-40GB|42949672960|GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"

static void test_fake(void)
{
	gpu_info_t g[GPUS_MAX];
	char err[256];

	setenv("FAKE_NVML_GPUS", H100 ";" A100, 1);
	unsetenv("FAKE_NVML_FAIL");
	int n = gpus_discover(g, GPUS_MAX, err, sizeof err);
	CHECK(n == 2, "two fake GPUs, got %d (%s): is fake_nvml first in LD_LIBRARY_PATH?", n, err);
	if (n == 2) {
		CHECK(g[0].index == 0 && g[1].index == 1, "indices %d %d", g[0].index, g[1].index);
		CHECK(strcmp(g[0].name, "NVIDIA H100 80GB HBM3") == 0, "name '%s'", g[0].name);
		CHECK(g[0].memory_bytes == 85520809984ull, "memory %llu", (unsigned long long)g[0].memory_bytes);
		CHECK(strcmp(g[1].uuid, "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee") == 0, "uuid '%s'", g[1].uuid);
		CHECK(err[0] == '\0', "err '%s'", err);
	}
	/* max caps the count */
	n = gpus_discover(g, 1, err, sizeof err);
	CHECK(n == 1 && strcmp(g[0].name, "NVIDIA H100 80GB HBM3") == 0, "max 1: %d", n);

	setenv("FAKE_NVML_FAIL", "init", 1);
	n = gpus_discover(g, GPUS_MAX, err, sizeof err);
	CHECK(n == 0, "driver not loaded: %d", n);
	CHECK(strstr(err, "nvmlInit") && strstr(err, "Driver Not Loaded"), "reason '%s'", err);

	setenv("FAKE_NVML_FAIL", "memory", 1);
	n = gpus_discover(g, GPUS_MAX, err, sizeof err);
	CHECK(n == -EIO, "undescribable GPU: %d", n);
	CHECK(strstr(err, "GPU 1") && strstr(err, "nvmlDeviceGetMemoryInfo"), "reason '%s'", err);

	unsetenv("FAKE_NVML_FAIL");
	setenv("FAKE_NVML_GPUS", "", 1);
	n = gpus_discover(g, GPUS_MAX, err, sizeof err);
	CHECK(n == 0 && strstr(err, "no GPU"), "no GPU: %d '%s'", n, err);
}

static int s_make(gpu_info_t *g)
{
	static const char *uuids[] = {"GPU-aa11", "GPU-bb22", "GPU-bb33", "GPU-cc44"};
	for (int i = 0; i < 4; i++) {
		memset(&g[i], 0, sizeof g[i]);
		g[i].index = i;
		snprintf(g[i].name, sizeof g[i].name, "gpu%d", i);
		snprintf(g[i].uuid, sizeof g[i].uuid, "%s", uuids[i]);
	}
	return 4;
}

/* The indices left after filtering with `visible`, as "a,b". */
static const char *s_after(const char *visible)
{
	static char buf[64];
	gpu_info_t g[GPUS_MAX];
	int n = gpus_filter_visible(g, s_make(g), visible);
	buf[0] = '\0';
	for (int i = 0; i < n; i++)
		snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%d", i ? "," : "", g[i].index);
	return buf;
}

static void test_filter(void)
{
	static const struct {
		const char *visible, *want;
	} cases[] = {
		{NULL, "0,1,2,3"},
		{"", ""},
		{"2", "2"},
		{"3,1", "3,1"},
		{" 1 , 2 ", "1,2"},
		{"0,7,1", "0"},       /* no GPU 7: the rest is ignored, as CUDA does */
		{"-1", ""},
		{"GPU-cc44,0", "3,0"},
		{"GPU-aa", "0"},      /* a unique prefix */
		{"GPU-bb", ""},       /* ambiguous */
		{"bb33", "2"},        /* without "GPU-" */
		{"1,1", "1"},
		{"MIG-aa11", ""},
		{"99999999", ""},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const char *got = s_after(cases[i].visible);
		CHECK(strcmp(got, cases[i].want) == 0, "CUDA_VISIBLE_DEVICES='%s': got '%s', want '%s'",
		      cases[i].visible ? cases[i].visible : "(unset)", got, cases[i].want);
	}
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: test_gpus discover|fake|filter\n");
		return 2;
	}
	if (strcmp(argv[1], "discover") == 0)
		test_discover();
	else if (strcmp(argv[1], "fake") == 0)
		test_fake();
	else if (strcmp(argv[1], "filter") == 0)
		test_filter();
	else
		return 2;
	if (!failures)
		printf("test_gpus %s: ok\n", argv[1]);
	return failures != 0;
}
