/*
 * benchutil: the small helpers the C benchmarks share (bench/train_step.c,
 * bench/matmul_ceiling.c, bench/gpu/gpu_step.c, bench/gpu/llama_step.c):
 * a monotonic clock in milliseconds, the median of a sample, and an
 * integer flag's parser. Header-only (static inline): each benchmark is
 * one .c file.
 */
#ifndef RINGMASTER_BENCH_BENCHUTIL_H
#define RINGMASTER_BENCH_BENCHUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* CLOCK_MONOTONIC in milliseconds. */
static inline double bench_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* qsort comparator for doubles, ascending. */
static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The median of x[0..n) (n >= 1); sorts x. */
static inline double bench_median(double *x, int n)
{
	qsort(x, (size_t)n, sizeof *x, bench_cmp_double);
	return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* The integer s of flag (min to 1e9), or "<prog>: <flag> must be ..." and
 * exit(2). */
static inline int bench_parse_int(const char *prog, const char *flag, const char *s, int min)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || v < min || v > 1000000000) {
		fprintf(stderr, "%s: %s must be an integer >= %d (got '%s')\n", prog, flag, min, s);
		exit(2);
	}
	return (int)v;
}

#endif
