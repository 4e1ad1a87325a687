/*
 * bench_snapshot_write: how fast one rank's snapshot shard reaches the disk.
 *
 * Writes a shard of --params floats (the flat parameter range and AdamW's m
 * and v: 12 bytes per parameter) with snap_shard_write (api/snapshot.h:
 * safetensors, XXH3-64 of the file, fsync of the file and of its folder,
 * atomic rename) into --dir, --repeats times, and prints one JSON object:
 * the bytes, each write's seconds and MB/s, and the median. The values are
 * a fixed pattern (the content does not change the work).
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "snapshot.h"

static double s_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int s_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"params", required_argument, NULL, 'n'},
		{"repeats", required_argument, NULL, 'r'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = NULL;
	long long n = 30000000;
	int repeats = 3, c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'n': n = atoll(optarg); break;
		case 'r': repeats = atoi(optarg); break;
		default: dir = NULL; n = 0; break;
		}
	}
	if (!dir || n < 1 || repeats < 1 || repeats > 100) {
		fprintf(stderr, "usage: bench_snapshot_write --dir DIR [--params N] [--repeats R]\n");
		return 1;
	}
	float *p = malloc((size_t)n * sizeof(float)), *m = malloc((size_t)n * sizeof(float)),
	      *v = malloc((size_t)n * sizeof(float));
	if (!p || !m || !v) {
		fprintf(stderr, "bench_snapshot_write: out of memory for %lld parameters\n", n);
		return 1;
	}
	for (long long i = 0; i < n; i++) {
		p[i] = (float)(i % 1000) * 1e-3f;
		m[i] = p[i] * 0.5f;
		v[i] = p[i] * p[i];
	}
	double secs[100];
	int64_t bytes = 0;
	for (int k = 0; k < repeats; k++) {
		char err[1024];
		snap_shard_info_t info;
		double a = s_now_s();
		if (snap_shard_write(dir, 0, 1, k + 1, n, 0, n, p, m, v, &info, err, sizeof err) < 0) {
			fprintf(stderr, "bench_snapshot_write: %s\n", err);
			return 1;
		}
		secs[k] = s_now_s() - a;
		bytes = info.bytes;
	}
	printf("{\"params\":%lld,\"bytes\":%lld,\"seconds\":[", n, (long long)bytes);
	for (int k = 0; k < repeats; k++)
		printf("%s%.3f", k ? "," : "", secs[k]);
	qsort(secs, (size_t)repeats, sizeof secs[0], s_cmp);
	double med = repeats % 2 ? secs[repeats / 2] : 0.5 * (secs[repeats / 2 - 1] + secs[repeats / 2]);
	printf("],\"median_s\":%.3f,\"median_mb_s\":%.1f}\n", med, (double)bytes / med / 1e6);
	free(p);
	free(m);
	free(v);
	return 0;
}
