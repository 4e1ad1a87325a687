/*
 * tp_harness: how the GPU tests run forked ranks over NCCL
 * (test_gpu_tp_gpt2.c, test_gpu_tp_llama.c; test_gpu_ddp.c its probe). The
 * parent never touches CUDA (a context does not survive fork): it asks a
 * child how many devices there are (tp_probe), makes the directory KV the
 * ranks meet through and forks one child a rank (tp_fork_ranks). Each rank
 * takes device `rank`, makes its NCCL comm and the tensor-parallel group
 * over it (tp_rank_join, the group the trainer gives the model), maps its
 * part of the logical parameters with tp_map_tables (tp_segments, as the
 * trainer does) and leaves its results where the parent reads them (a file
 * or shared memory, the test's own). Include it in one test .c file (its
 * helpers are static).
 */
#ifndef RINGMASTER_TESTS_GPU_TP_HARNESS_H
#define RINGMASTER_TESTS_GPU_TP_HARNESS_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "comm.h"
#include "comm_kv_dir.h"
#include "model.h"
#include "tp.h"
#include "tpcomm.h"

/* A child's answer: how many CUDA devices it sees with NCCL usable, or 0
 * with the reason in why (n bytes). */
static inline int tp_probe(char *why, size_t n)
{
	int fd[2];
	if (pipe(fd) < 0) {
		perror("pipe");
		exit(2);
	}
	pid_t pid = fork();
	if (pid == 0) {
		close(fd[0]);
		char err[512];
		int count = 0;
		if (comm_nccl_available(err, sizeof err) == 0 && cudaGetDeviceCount(&count) == cudaSuccess)
			dprintf(fd[1], "%d", count);
		else
			dprintf(fd[1], "0 %s", err);
		_exit(0);
	}
	close(fd[1]);
	char buf[600] = "";
	ssize_t got = read(fd[0], buf, sizeof buf - 1);
	close(fd[0]);
	waitpid(pid, NULL, 0);
	buf[got > 0 ? got : 0] = '\0';
	const char *space = strchr(buf, ' ');
	snprintf(why, n, "%s", space ? space + 1 : "no answer from the probe");
	return atoi(buf);
}

/* a rank's membership: its NCCL comm and the TP group over it */
typedef struct {
	comm_t *comm;
	tpcomm_t tc;
	model_tp_t tp; /* what the model is given (opt.tp) */
} tp_rank_t;

/* Rank `rank` of `size` (in a forked child): device `rank`, an NCCL comm
 * (the ranks meet in the directory KV kv_dir) and the TP group over it,
 * into rk. 0, or the step that failed with the reason in err: 10
 * cudaSetDevice, 11 comm_nccl_new, 12 tpcomm_init. */
static inline int tp_rank_join(int rank, int size, const char *kv_dir, tp_rank_t *rk, char *err, size_t n)
{
	static const char prefix[] = "comm_nccl_new: ";
	memset(rk, 0, sizeof *rk);
	if (cudaSetDevice(rank) != cudaSuccess) {
		snprintf(err, n, "cudaSetDevice(%d) failed", rank);
		return 10;
	}
	comm_kv_t kv = comm_kv_dir_make(kv_dir);
	const size_t k = n > sizeof prefix ? sizeof prefix - 1 : 0; /* the reason after the prefix */
	memcpy(err, prefix, k);
	rk->comm = comm_nccl_new(&kv, rank, size, rank, 60000, err + k, n - k);
	if (!rk->comm)
		return 11;
	if (tpcomm_init(&rk->tc, rk->comm, &rk->tp) < 0) {
		snprintf(err, n, "tpcomm_init failed");
		return 12;
	}
	return 0;
}

/* what tp_rank_join made, freed */
static inline void tp_rank_leave(tp_rank_t *rk)
{
	tpcomm_free(&rk->tc);
	comm_free(rk->comm);
}

/* a rank's body, run in its child: the child's exit status */
typedef int (*tp_rank_fn)(void *ctx, int rank);

/* Makes the directory kv_dir (exit 2 where it cannot), forks `size` ranks
 * that each exit with fn(ctx, rank), and waits for them all: rc[r] is rank
 * r's exit status, 128 + the signal where one killed it. */
static inline void tp_fork_ranks(int size, const char *kv_dir, tp_rank_fn fn, void *ctx, int *rc)
{
	if (mkdir(kv_dir, 0700) < 0) {
		perror(kv_dir);
		exit(2);
	}
	pid_t pids[16];
	if (size > 16)
		exit(2);
	for (int r = 0; r < size; r++) {
		fflush(stdout);
		pids[r] = fork();
		if (pids[r] < 0) {
			perror("fork");
			exit(2);
		}
		if (pids[r] == 0)
			_exit(fn(ctx, r));
	}
	for (int r = 0; r < size; r++) {
		int status = 0;
		waitpid(pids[r], &status, 0);
		rc[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	}
}

/* one tensor's local <-> logical copy (tp_segments' callback) */
typedef struct {
	float *local;   /* at the tensor's local start */
	float *logical; /* at the tensor's logical start */
	bool to_local;
} tp_map_ctx_t;

static inline void tp_map_seg(void *vctx, size_t local, size_t logical, size_t n)
{
	tp_map_ctx_t *c = vctx;
	if (c->to_local)
		memcpy(c->local + local, c->logical + logical, n * sizeof(float));
	else
		memcpy(c->logical + logical, c->local + local, n * sizeof(float));
}

/* Every tensor of the local table lt (rank's part at t = size) to
 * (to_local) or from the logical buffer laid out by the full table ft (nt
 * tensors each, in the same order), through tp_segments (the trainer's
 * map; padded rows untouched); replicated tensors only where
 * replicated_too. */
static inline void tp_map_tables(const model_tensor_t *lt, const model_tensor_t *ft, int nt, int rank, int size,
                                 float *local, float *logical, bool to_local, bool replicated_too)
{
	for (int i = 0; i < nt; i++) {
		if (!replicated_too && lt[i].tp_split == MODEL_TP_REPLICATED)
			continue;
		tp_map_ctx_t c = {local + lt[i].offset, logical + ft[i].offset, to_local};
		tp_segments(&lt[i], rank, size, 0, lt[i].numel, tp_map_seg, &c);
	}
}

/* rm -rf dir (the test's scratch directory); a line on stderr where that
 * fails */
static inline void tp_remove_dir(const char *dir)
{
	char cmd[4200 + 16];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

#endif
