/*
 * test_nccl: the NCCL backend of worker/comm (comm_nccl.c) on real GPUs.
 * Built only where meson found CUDA; registered as gpu-nccl-*, so
 * `meson test --suite worker` runs it and it skips (exit 77, one line
 * "no CUDA GPU: <reason>; skipping") where no GPU is usable.
 *
 *   test_nccl collectives W   W forked ranks, rank r on CUDA device r, meet
 *                             through a directory KV (worker/comm/
 *                             comm_kv_dir.c); every collective on device
 *                             buffers checked exactly against sums computed
 *                             on the host (inputs are small integers held in
 *                             floats, so every sum is exact whatever its
 *                             order): all-reduce, reduce-scatter and
 *                             all-gather with equal, uneven (W > 1) and all-0
 *                             counts, all-gather in place, broadcast of an
 *                             odd byte count from every root, barrier, a bad
 *                             root (-EINVAL, the comm still usable), the
 *                             _async all-reduce and reduce-scatter in
 *                             ranges behind an event (together, the whole
 *                             collective's result), then
 *                             comm_abort: -ECANCELED and a line saying so.
 *                             Skips when fewer than W GPUs are visible.
 *   test_nccl cancel          two GPUs: rank 1 stops taking part after one
 *                             all-reduce; rank 0's next one, cancelled from
 *                             another thread after 0.5 s (comm_cancel, what
 *                             a rank asked to rejoin does), fails with
 *                             -ECANCELED within a second, not the timeout.
 *   test_nccl join-timeout    one GPU: rank 1 of 2 alone times out waiting
 *                             for NCCL's id in the KV; rank 0 of 2 alone
 *                             gets NULL from the non-blocking set-up within
 *                             its timeout (aborted), not a hang.
 *
 * The ranks are child processes: CUDA must not be initialized before a
 * fork, so the parent never touches it. The parent waits with a deadline
 * and kills the children if it passes; each child also has an alarm.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "comm.h"
#include "comm_kv_dir.h"

#define MAX_RANKS 8
#define EXIT_SKIP 77
#define TIMEOUT_MS 20000

static int s_failures;
static int s_rank;

#define CHECK(cond)                                                                              \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			fprintf(stderr, "rank %d: FAIL %s:%d: %s\n", s_rank, __FILE__, __LINE__, \
			        #cond);                                                          \
			s_failures++;                                                            \
		}                                                                                \
	} while (0)

#define CHECK_RC(c, expr)                                                                        \
	do {                                                                                     \
		int rc_ = (expr);                                                                \
		if (rc_ != 0) {                                                                  \
			fprintf(stderr, "rank %d: FAIL %s:%d: %s = %d (%s)\n", s_rank, __FILE__,  \
			        __LINE__, #expr, rc_, comm_last_error(c));                       \
			s_failures++;                                                            \
		}                                                                                \
	} while (0)

/* A CUDA call the test itself makes: a failure ends the rank. */
#define CUDA_OK(expr)                                                                            \
	do {                                                                                     \
		cudaError_t e_ = (expr);                                                         \
		if (e_ != cudaSuccess) {                                                         \
			fprintf(stderr, "rank %d: FAIL %s:%d: %s: %s\n", s_rank, __FILE__,        \
			        __LINE__, #expr, cudaGetErrorString(e_));                        \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)

static double s_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Device copies of host data (h NULL: uninitialized) and back. n may be 0
 * (one float is allocated so that the pointer is a real device pointer). */
static float *s_to_device(const float *h, size_t n)
{
	float *d = NULL;
	CUDA_OK(cudaMalloc((void **)&d, (n ? n : 1) * sizeof(float)));
	if (n && h)
		CUDA_OK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
	return d;
}

static void s_to_host(float *h, const float *d, size_t n)
{
	if (n)
		CUDA_OK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
}

static size_t s_sum(const size_t *counts, int W)
{
	size_t n = 0;
	for (int i = 0; i < W; i++)
		n += counts[i];
	return n;
}

/* ---- collectives -------------------------------------------------------- */

static void s_check_allreduce(comm_t *c, size_t n)
{
	int W = comm_world_size(c), r = comm_rank(c);
	float *h = malloc((n ? n : 1) * sizeof(float));
	for (size_t i = 0; i < n; i++)
		h[i] = (float)((i % 1000) * (size_t)(r + 1)) - 500.0f;
	float *d = s_to_device(h, n);
	CHECK_RC(c, comm_allreduce_sum_f32(c, d, n));
	s_to_host(h, d, n);
	size_t bad = 0;
	for (size_t i = 0; i < n; i++) {
		double want = (double)(i % 1000) * W * (W + 1) / 2 - 500.0 * W;
		if (h[i] != (float)want && bad++ < 3)
			fprintf(stderr, "rank %d: all-reduce n=%zu: [%zu] = %g, want %g\n", r, n, i,
			        (double)h[i], want);
	}
	CHECK(bad == 0);
	CUDA_OK(cudaFree(d));
	free(h);
}

/* A reduce-scatter's host buffers for this rank: the input (n = the sum
 * of counts: small integers times rank + 1, so every sum is exact) and
 * this rank's part of the output, all -1; *ret_off is where that part
 * starts. */
static void s_rs_host(const comm_t *c, const size_t *counts, size_t *ret_n, size_t *ret_off,
                      float **ret_in, float **ret_out)
{
	int W = comm_world_size(c), r = comm_rank(c);
	size_t n = s_sum(counts, W), off = 0;
	for (int i = 0; i < r; i++)
		off += counts[i];
	float *h_in = malloc((n ? n : 1) * sizeof(float));
	float *h_out = malloc((counts[r] ? counts[r] : 1) * sizeof(float));
	for (size_t j = 0; j < n; j++)
		h_in[j] = (float)((j % 100000) * (size_t)(r + 1));
	for (size_t j = 0; j < counts[r]; j++)
		h_out[j] = -1;
	*ret_n = n;
	*ret_off = off;
	*ret_in = h_in;
	*ret_out = h_out;
}

static void s_check_reduce_scatter(comm_t *c, const size_t *counts)
{
	int W = comm_world_size(c), r = comm_rank(c);
	size_t n, off;
	float *h_in, *h_out;
	s_rs_host(c, counts, &n, &off, &h_in, &h_out);
	float *d_in = s_to_device(h_in, n), *d_out = s_to_device(h_out, counts[r]);
	CHECK_RC(c, comm_reduce_scatter_sum_f32(c, d_in, d_out, counts));
	s_to_host(h_out, d_out, counts[r]);
	size_t bad = 0;
	for (size_t j = 0; j < counts[r]; j++) {
		double want = (double)((off + j) % 100000) * W * (W + 1) / 2;
		if (h_out[j] != (float)want && bad++ < 3)
			fprintf(stderr, "rank %d: reduce-scatter: out[%zu] = %g, want %g\n", r, j,
			        (double)h_out[j], want);
	}
	CHECK(bad == 0);
	/* The input is left as it was. */
	float *h_back = malloc((n ? n : 1) * sizeof(float));
	s_to_host(h_back, d_in, n);
	CHECK(n == 0 || memcmp(h_back, h_in, n * sizeof(float)) == 0);
	free(h_back);
	CUDA_OK(cudaFree(d_in));
	CUDA_OK(cudaFree(d_out));
	free(h_in);
	free(h_out);
}

/* The _async forms, started behind an event recorded on another stream
 * after that stream wrote the input, then waited for together: the
 * all-reduce in pieces, and the reduce-scatter of `counts` in ranges cut
 * at `cuts` (ascending, inside [0, n]; ranges that straddle ranks and
 * empty ones), which together give the whole collective's result. With
 * `partial`, only the first range runs: the rest of this rank's part keeps
 * its -1s. */
static void s_check_async(comm_t *c, const size_t *counts, const size_t *cuts, int n_cuts,
                          bool partial)
{
	int W = comm_world_size(c), r = comm_rank(c);
	size_t n, off;
	float *h_in, *h_out;
	s_rs_host(c, counts, &n, &off, &h_in, &h_out);
	float *d_in = s_to_device(NULL, n), *d_out = s_to_device(h_out, counts[r]);
	float *d_sum = s_to_device(NULL, n);
	cudaStream_t st;
	cudaEvent_t ready;
	CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CUDA_OK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
	if (n) {
		CUDA_OK(cudaMemcpyAsync(d_in, h_in, n * sizeof(float), cudaMemcpyHostToDevice, st));
		CUDA_OK(cudaMemcpyAsync(d_sum, h_in, n * sizeof(float), cudaMemcpyHostToDevice, st));
	}
	CUDA_OK(cudaEventRecord(ready, st));
	size_t lo = 0;
	for (int k = 0; k <= n_cuts && !(partial && k > 0); k++) {
		size_t hi = k < n_cuts ? cuts[k] : n;
		CHECK_RC(c, comm_reduce_scatter_range_sum_f32_async(c, d_in, d_out, counts, lo, hi - lo,
		                                                    ready));
		CHECK_RC(c, comm_allreduce_sum_f32_async(c, d_sum + lo, hi - lo, ready));
		lo = hi;
	}
	size_t end = partial ? (n_cuts ? cuts[0] : n) : n;
	CHECK_RC(c, comm_wait(c));
	s_to_host(h_out, d_out, counts[r]);
	size_t bad = 0;
	for (size_t j = 0; j < counts[r]; j++) {
		double want = off + j < end ? (double)((off + j) % 100000) * W * (W + 1) / 2 : -1.0;
		if (h_out[j] != (float)want && bad++ < 3)
			fprintf(stderr, "rank %d: reduce-scatter in ranges%s: out[%zu] = %g, want %g\n", r,
			        partial ? " (the first only)" : "", j, (double)h_out[j], want);
	}
	float *h_sum = malloc((n ? n : 1) * sizeof(float));
	s_to_host(h_sum, d_sum, n);
	for (size_t j = 0; j < n; j++) {
		double want = j < end ? (double)(j % 100000) * W * (W + 1) / 2 : (double)h_in[j];
		if (h_sum[j] != (float)want && bad++ < 3)
			fprintf(stderr, "rank %d: all-reduce in pieces%s: [%zu] = %g, want %g\n", r,
			        partial ? " (the first only)" : "", j, (double)h_sum[j], want);
	}
	CHECK(bad == 0);
	CUDA_OK(cudaEventDestroy(ready));
	CUDA_OK(cudaStreamDestroy(st));
	CUDA_OK(cudaFree(d_in));
	CUDA_OK(cudaFree(d_out));
	CUDA_OK(cudaFree(d_sum));
	free(h_in);
	free(h_out);
	free(h_sum);
}

/* in_place: `in` is this rank's own place inside `out`. */
static void s_check_allgather(comm_t *c, const size_t *counts, bool in_place)
{
	int W = comm_world_size(c), r = comm_rank(c);
	size_t n = s_sum(counts, W), off = 0;
	for (int i = 0; i < r; i++)
		off += counts[i];
	float *h_in = malloc((counts[r] ? counts[r] : 1) * sizeof(float));
	float *h_out = malloc((n ? n : 1) * sizeof(float));
	for (size_t j = 0; j < counts[r]; j++)
		h_in[j] = (float)(r * 1000000 + (int)(j % 500000));
	for (size_t j = 0; j < n; j++)
		h_out[j] = -1;
	if (in_place)
		memcpy(h_out + off, h_in, counts[r] * sizeof(float));
	float *d_out = s_to_device(h_out, n);
	float *d_in = in_place ? NULL : s_to_device(h_in, counts[r]);
	CHECK_RC(c, comm_allgather_f32(c, in_place ? d_out + off : d_in, d_out, counts));
	s_to_host(h_out, d_out, n);
	size_t bad = 0, k = 0;
	for (int i = 0; i < W; i++)
		for (size_t j = 0; j < counts[i]; j++, k++) {
			float want = (float)(i * 1000000 + (int)(j % 500000));
			if (h_out[k] != want && bad++ < 3)
				fprintf(stderr, "rank %d: all-gather%s: out[%zu] = %g, want %g\n", r,
				        in_place ? " in place" : "", k, (double)h_out[k], (double)want);
		}
	CHECK(bad == 0);
	if (d_in)
		CUDA_OK(cudaFree(d_in));
	CUDA_OK(cudaFree(d_out));
	free(h_in);
	free(h_out);
}

static void s_check_broadcast(comm_t *c, size_t bytes, int root)
{
	int r = comm_rank(c);
	unsigned char *h = malloc(bytes ? bytes : 1);
	for (size_t i = 0; i < bytes; i++)
		h[i] = r == root ? (unsigned char)(i * 7 + (size_t)root) : 0xee;
	void *d = NULL;
	CUDA_OK(cudaMalloc(&d, bytes ? bytes : 1));
	CUDA_OK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
	CHECK_RC(c, comm_broadcast(c, d, bytes, root));
	memset(h, 0, bytes);
	CUDA_OK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
	size_t bad = 0;
	for (size_t i = 0; i < bytes; i++)
		bad += h[i] != (unsigned char)(i * 7 + (size_t)root);
	CHECK(bad == 0);
	CUDA_OK(cudaFree(d));
	free(h);
}

/* 0 when this process sees a GPU for each of the W ranks; else EXIT_SKIP
 * (rank 0 says why: NCCL runs one rank per GPU). */
static int s_gpus_or_skip(int rank, int W)
{
	char why[512];
	if (comm_nccl_available(why, sizeof why) < 0) {
		if (rank == 0)
			printf("no CUDA GPU: %s; skipping\n", why);
		return EXIT_SKIP;
	}
	int n_gpus = 0;
	CUDA_OK(cudaGetDeviceCount(&n_gpus));
	if (n_gpus < W) {
		if (rank == 0)
			printf("no CUDA GPU for every rank: %d rank(s), %d GPU(s) visible (NCCL runs one rank "
			       "per GPU); skipping\n",
			       W, n_gpus);
		return EXIT_SKIP;
	}
	return 0;
}

static int s_rank_collectives(const char *dir, int rank, int W)
{
	s_rank = rank;
	if (s_gpus_or_skip(rank, W))
		return EXIT_SKIP;
	comm_kv_t kv = comm_kv_dir_make(dir);
	char err[512];
	double t0 = s_now_s();
	comm_t *c = comm_nccl_new(&kv, rank, W, rank, TIMEOUT_MS, err, sizeof err);
	if (!c) {
		fprintf(stderr, "rank %d: FAIL: comm_nccl_new: %s\n", rank, err);
		return 1;
	}
	fprintf(stderr, "rank %d: NCCL comm of %d on device %d in %.2f s\n", rank, W, rank, s_now_s() - t0);
	CHECK(comm_rank(c) == rank);
	CHECK(comm_world_size(c) == W);
	CHECK(comm_nccl_stream(c) != NULL);
	CHECK(strcmp(comm_last_error(c), "") == 0);

	s_check_allreduce(c, 0);
	s_check_allreduce(c, 1);
	s_check_allreduce(c, 4099);
	s_check_allreduce(c, (size_t)3 << 20); /* 12 MiB: several NCCL chunks */

	size_t equal[MAX_RANKS], uneven[MAX_RANKS], zeros[MAX_RANKS], one_zero[MAX_RANKS];
	for (int i = 0; i < W; i++) {
		equal[i] = 1537;
		uneven[i] = (size_t)(3 * i + 5) * 1000 + (size_t)i;
		zeros[i] = 0;
		one_zero[i] = i == W - 1 ? 0 : 777 + (size_t)i;
	}
	if (W == 1)
		one_zero[0] = 0; /* W = 1: the only count is 0 */
	const size_t *sets[] = {equal, uneven, zeros, one_zero};
	for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
		s_check_reduce_scatter(c, sets[s]);
		s_check_allgather(c, sets[s], false);
		s_check_allgather(c, sets[s], true);
	}
	/* Ranges cut inside ranks' parts, at their edges, and empty ones. */
	size_t n_uneven = s_sum(uneven, W);
	size_t cuts[] = {0, 1, 1, 2500, uneven[0], uneven[0] + 3, n_uneven / 2 + 1, n_uneven - 1};
	for (size_t k = 1; k < sizeof cuts / sizeof cuts[0]; k++) /* W 1: inside [0, n], ascending */
		cuts[k] = cuts[k] > n_uneven ? n_uneven : cuts[k] < cuts[k - 1] ? cuts[k - 1] : cuts[k];
	s_check_async(c, uneven, cuts, (int)(sizeof cuts / sizeof cuts[0]), false);
	s_check_async(c, uneven, cuts + 3, 1, true);
	s_check_async(c, equal, (const size_t[]){1537 * (size_t)W / 3}, 1, false);
	s_check_async(c, zeros, NULL, 0, false);
	for (int root = 0; root < W; root++) {
		s_check_broadcast(c, 1001, root);
		s_check_broadcast(c, 0, root);
	}
	CHECK_RC(c, comm_barrier(c));

	/* A bad root is refused before anything is sent: -EINVAL, not sticky. */
	unsigned char byte = 0, *d_byte = NULL;
	CUDA_OK(cudaMalloc((void **)&d_byte, 1));
	CHECK(comm_broadcast(c, d_byte, 1, W) == -EINVAL);
	CHECK(strstr(comm_last_error(c), "root") != NULL);
	CUDA_OK(cudaMemcpy(d_byte, &byte, 1, cudaMemcpyHostToDevice));
	CHECK_RC(c, comm_broadcast(c, d_byte, 1, 0));
	CHECK_RC(c, comm_barrier(c));
	CUDA_OK(cudaFree(d_byte));

	/* Abort: every later call fails at once with -ECANCELED. Every rank
	 * is past its last collective with the others here. */
	comm_abort(c);
	comm_abort(c); /* twice is harmless */
	float *d = s_to_device((const float[]){1.0f}, 1);
	double a = s_now_s();
	CHECK(comm_allreduce_sum_f32(c, d, 1) == -ECANCELED);
	CHECK(comm_barrier(c) == -ECANCELED);
	CHECK(comm_allgather_f32(c, d, d, (const size_t[MAX_RANKS]){1}) == -ECANCELED);
	CHECK(s_now_s() - a < 1.0);
	CHECK(strstr(comm_last_error(c), "aborted") != NULL);
	fprintf(stderr, "rank %d: after abort: %s\n", rank, comm_last_error(c));
	CUDA_OK(cudaFree(d));
	comm_free(c);
	return s_failures ? 1 : 0;
}

/* The sum over a group of each member's (parent rank + 1), on the device. */
static void s_check_group_sum(comm_t *g, float want)
{
	float x = (float)(s_rank + 1);
	float *d = s_to_device(&x, 1);
	CHECK_RC(g, comm_allreduce_sum_f32(g, d, 1));
	s_to_host(&x, d, 1);
	if (x != want)
		fprintf(stderr, "rank %d: group sum %g, want %g\n", s_rank, (double)x, (double)want);
	CHECK(x == want);
	CUDA_OK(cudaFree(d));
}

/* W = 4 as a 2 x 2 grid, as test_comm.c's split case: tensor-parallel
 * pairs (colour r / 2), data-parallel pairs (colour r % 2, keys reversed),
 * then the even ranks only; each group's collectives, and the parent's. */
static int s_rank_split(const char *dir, int rank, int W)
{
	s_rank = rank;
	if (s_gpus_or_skip(rank, W))
		return EXIT_SKIP;
	comm_kv_t kv = comm_kv_dir_make(dir);
	char err[512];
	comm_t *c = comm_nccl_new(&kv, rank, W, rank, TIMEOUT_MS, err, sizeof err);
	if (!c) {
		fprintf(stderr, "rank %d: FAIL: comm_nccl_new: %s\n", rank, err);
		return 1;
	}
	comm_t *tp = comm_split(c, &kv, rank / 2, rank % 2, err, sizeof err);
	if (!tp)
		fprintf(stderr, "rank %d: FAIL: tensor-parallel split: %s\n", rank, err);
	comm_t *dp = comm_split(c, &kv, rank % 2, -rank, err, sizeof err);
	if (!dp)
		fprintf(stderr, "rank %d: FAIL: data-parallel split: %s\n", rank, err);
	comm_t *even = comm_split(c, &kv, rank % 2 == 0 ? 7 : COMM_NO_GROUP, 0, err, sizeof err);
	CHECK(tp && dp);
	if (tp && dp) {
		CHECK(comm_world_size(tp) == 2 && comm_rank(tp) == rank % 2);
		CHECK(comm_world_size(dp) == 2 && comm_rank(dp) == 1 - rank / 2);
		CHECK(comm_nccl_stream(tp) != NULL);
		s_check_group_sum(tp, (float)(rank / 2 * 4 + 3));
		s_check_group_sum(dp, (float)(rank % 2 * 2 + 4));
		s_check_allreduce(c, 4099);
		s_check_allgather(tp, (const size_t[]){5, 9}, false);
		s_check_reduce_scatter(dp, (const size_t[]){3, 0});
	}
	if (rank % 2 == 0) {
		CHECK(even && comm_world_size(even) == 2 && comm_rank(even) == rank / 2);
		if (even)
			s_check_group_sum(even, 4.0f);
	} else {
		CHECK(even == NULL && err[0] == '\0');
	}
	comm_free(even);
	comm_free(tp);
	comm_free(dp);
	CHECK_RC(c, comm_barrier(c));
	comm_free(c);
	return s_failures ? 1 : 0;
}

/* One GPU: a group whose other rank never comes. */
static int s_rank_join_timeout(const char *dir)
{
	s_rank = 0;
	char why[512];
	if (comm_nccl_available(why, sizeof why) < 0) {
		printf("no CUDA GPU: %s; skipping\n", why);
		return EXIT_SKIP;
	}
	comm_kv_t kv = comm_kv_dir_make(dir);
	char err[512];
	/* Rank 1 alone: rank 0 never publishes the id. */
	double t0 = s_now_s();
	comm_t *c = comm_nccl_new(&kv, 1, 2, 0, 1500, err, sizeof err);
	double took = s_now_s() - t0;
	CHECK(c == NULL);
	CHECK(strstr(err, "nccl/id") != NULL && strstr(err, "rank 0") != NULL);
	CHECK(took >= 1.4 && took < 10);
	fprintf(stderr, "rank 1 of 2 alone, after %.2f s: %s\n", took, err);
	comm_free(c);

	/* Rank 0 alone: the id is published, the set-up waits for rank 1. */
	t0 = s_now_s();
	c = comm_nccl_new(&kv, 0, 2, 0, 3000, err, sizeof err);
	took = s_now_s() - t0;
	CHECK(c == NULL);
	CHECK(strstr(err, "within 3000 ms") != NULL);
	CHECK(took >= 2.9 && took < 20);
	fprintf(stderr, "rank 0 of 2 alone, after %.2f s: %s\n", took, err);
	comm_free(c);

	/* The process can still make a working comm afterwards. */
	char dir2[4096];
	snprintf(dir2, sizeof dir2, "%s/again", dir);
	CHECK(mkdir(dir2, 0700) == 0);
	comm_kv_t kv2 = comm_kv_dir_make(dir2);
	c = comm_nccl_new(&kv2, 0, 1, 0, TIMEOUT_MS, err, sizeof err);
	CHECK(c != NULL);
	if (c) {
		s_check_allreduce(c, 100);
		comm_free(c);
	} else {
		fprintf(stderr, "FAIL: comm_nccl_new after the timeouts: %s\n", err);
	}
	return s_failures ? 1 : 0;
}

/* comm_cancel from another thread: the all-reduce in progress ends. */
typedef struct {
	comm_t *c;
	int delay_ms;
} cancel_arg_t;

static void *s_cancel_later(void *p)
{
	cancel_arg_t *a = p;
	struct timespec ts = {a->delay_ms / 1000, (long)(a->delay_ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
	comm_cancel(a->c);
	return NULL;
}

/* Two ranks: both all-reduce once; then rank 1 stops taking part (as a
 * rank that died), and rank 0's next all-reduce, which would wait for the
 * whole timeout, ends within a second of comm_cancel from another thread,
 * with -ECANCELED and a line saying so; later calls fail the same way. */
static int s_rank_cancel(const char *dir, int rank, int W)
{
	s_rank = rank;
	if (s_gpus_or_skip(rank, W))
		return EXIT_SKIP;
	comm_kv_t kv = comm_kv_dir_make(dir);
	char err[512];
	comm_t *c = comm_nccl_new(&kv, rank, W, rank, 60000, err, sizeof err);
	if (!c) {
		fprintf(stderr, "rank %d: FAIL: comm_nccl_new: %s\n", rank, err);
		return 1;
	}
	s_check_allreduce(c, 1000);
	if (rank == 1) {
		sleep(5); /* gone, as far as rank 0 can tell; then leaves */
		comm_free(c);
		return s_failures ? 1 : 0;
	}
	float *buf = NULL;
	CUDA_OK(cudaMalloc((void **)&buf, 1000 * sizeof(float)));
	pthread_t th;
	cancel_arg_t a = {c, 500};
	CHECK(pthread_create(&th, NULL, s_cancel_later, &a) == 0);
	double t0 = s_now_s();
	int rc = comm_allreduce_sum_f32(c, buf, 1000);
	double took = s_now_s() - t0;
	pthread_join(th, NULL);
	fprintf(stderr, "rank 0: all-reduce with a gone peer, cancelled after 0.5 s: %d after %.2f s: %s\n", rc,
	        took, comm_last_error(c));
	CHECK(rc == -ECANCELED);
	CHECK(took >= 0.4 && took < 3.0);
	CHECK(strstr(comm_last_error(c), "cancelled") != NULL);
	CHECK(comm_allreduce_sum_f32(c, buf, 1000) < 0);
	cudaFree(buf);
	comm_free(c);
	return s_failures ? 1 : 0;
}

/* ---- the parent ---------------------------------------------------------- */

static void s_rm_rf(const char *dir)
{
	pid_t pid = fork();
	if (pid == 0) {
		execlp("rm", "rm", "-rf", dir, (char *)NULL);
		_exit(127);
	}
	if (pid > 0)
		waitpid(pid, NULL, 0);
}

/* Run `n` children (rank i runs fn(dir, i, n)), wait up to `limit_s`.
 * Returns 0 (all passed), 77 (any skipped, none failed) or 1. */
static int s_run(int n, int (*fn)(const char *, int, int), int limit_s)
{
	char dir[] = "/tmp/test_nccl.XXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	fflush(NULL);
	pid_t pids[MAX_RANKS];
	for (int i = 0; i < n; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			alarm((unsigned)limit_s + 5);
			int rc = fn(dir, i, n);
			fflush(NULL);
			_exit(rc);
		}
	}
	int failed = 0, skipped = 0, left = n;
	double deadline = s_now_s() + limit_s;
	while (left > 0 && s_now_s() < deadline) {
		int status;
		pid_t pid = waitpid(-1, &status, WNOHANG);
		if (pid <= 0) {
			struct timespec ts = {0, 20000000};
			nanosleep(&ts, NULL);
			continue;
		}
		left--;
		int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		if (code == EXIT_SKIP)
			skipped++;
		else if (code != 0) {
			fprintf(stderr, "FAIL: a rank ended with status %d\n", code);
			failed++;
		}
	}
	if (left > 0) {
		fprintf(stderr, "FAIL: %d rank(s) still running after %d s; killed\n", left, limit_s);
		for (int i = 0; i < n; i++)
			kill(pids[i], SIGKILL);
		while (waitpid(-1, NULL, 0) > 0)
			;
		failed++;
	}
	s_rm_rf(dir);
	return failed ? 1 : skipped ? EXIT_SKIP : 0;
}

static int s_join_timeout_child(const char *dir, int rank, int n)
{
	(void)rank;
	(void)n;
	return s_rank_join_timeout(dir);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int rc;
	if (argc == 3 && strcmp(argv[1], "collectives") == 0) {
		int W = atoi(argv[2]);
		if (W < 1 || W > MAX_RANKS) {
			fprintf(stderr, "usage: test_nccl collectives W (1..%d)\n", MAX_RANKS);
			return 2;
		}
		rc = s_run(W, s_rank_collectives, 90);
	} else if (argc == 2 && strcmp(argv[1], "join-timeout") == 0) {
		rc = s_run(1, s_join_timeout_child, 90);
	} else if (argc == 2 && strcmp(argv[1], "split") == 0) {
		rc = s_run(4, s_rank_split, 90);
	} else if (argc == 2 && strcmp(argv[1], "cancel") == 0) {
		rc = s_run(2, s_rank_cancel, 90);
	} else {
		fprintf(stderr, "usage: test_nccl collectives W | split | join-timeout | cancel\n");
		return 2;
	}
	if (rc == 0)
		printf("test_nccl %s: ok\n", argv[1]);
	return rc;
}
