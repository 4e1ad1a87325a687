/*
 * comm_nccl: the GPU backend of comm.h, over NCCL, in plain C against the
 * CUDA runtime. Built only when meson found CUDA (cuda_enabled); the
 * design and its trade-offs are in docs/gpu-comm.md.
 *
 * Rendezvous: rank 0 makes the NCCL unique id and stores it in the comm_kv_t
 * under "nccl/id" (the coordinator's KV in a rank, a directory in tests);
 * the other ranks wait for it there. The communicator is made non-blocking
 * (ncclConfig_t.blocking = 0): every NCCL call returns at once, possibly
 * with ncclInProgress, and this file polls ncclCommGetAsyncError, so the
 * set-up and every collective are bounded by the comm's timeout; past it,
 * ncclCommAbort, and the comm fails with -ETIMEDOUT.
 *
 * Collectives run on the comm's own CUDA stream (created non-blocking at
 * set-up) on device buffers; each call enqueues its work, then polls
 * cudaStreamQuery (and NCCL's async error) until the stream is idle, so it
 * returns with the results in place, like Gloo's. Uneven counts:
 *
 *   reduce-scatter  equal counts: ncclReduceScatter. Uneven: one ncclReduce
 *                   per rank with a non-empty part, rooted at that rank, in
 *                   one ncclGroupStart/End. No scratch memory and no copies
 *                   (a padded ncclReduceScatter would need a second copy of
 *                   the whole input, which for ZeRO-2's gradients is as big
 *                   as the gradients), and on a ring each link carries the
 *                   same (W-1)/W of the data as a reduce-scatter would.
 *   all-gather      equal counts: ncclAllGather (in place when `in` is at
 *                   its own place in `out`). Uneven: one ncclBroadcast per
 *                   rank with a non-empty part, rooted at it, in one group,
 *                   each straight into its place in `out`; same reasons.
 *   all-reduce      ncclAllReduce in place.
 *   _async forms    the all-reduce and the reduce-scatter (whole, or a
 *                   range of it: comm.c turns a range into counts) are
 *                   enqueued behind the caller's event, and the call
 *                   returns; nccl_wait then waits for the stream like
 *                   every other call does.
 *   broadcast       ncclBroadcast in place, as bytes.
 *   barrier         an all-reduce of one float in a device scratch word.
 *
 * comm_cancel (any thread) sets a flag that the poll loops of the
 * collective in progress check: it aborts the communicator from its own
 * thread and fails with -ECANCELED, so a rank asked to rejoin does not wait
 * out the timeout for a peer that died (NCCL itself may never notice).
 *
 * Failures follow comm.h: the first one is sticky (the communicator is
 * aborted when NCCL or CUDA reports an error, since NCCL's state is then
 * unknown), comm_abort makes every later call -ECANCELED, and every error
 * is one line naming the NCCL or CUDA error string. Each call first makes
 * the comm's device current, so any thread may run the collectives (the
 * ZeRO-3 prefetch thread does), one at a time.
 */
#include "comm_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
/* nccl.h declares ncclGroupStart() and friends without (void); it is not a
 * system header here (/usr/local/cuda/include), so keep -Wstrict-prototypes
 * off for it alone. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#define ERR_BYTES 512
#define NCCL_ID_KEY "nccl/id"
/* Polls of a stream or of NCCL's state before each one sleeps NAP_NS:
 * short collectives return at once, long ones cost no core. */
#define SPIN_POLLS 200
#define NAP_NS 20000L

typedef struct {
	int rank;
	int size;
	int device;
	int timeout_ms;
	ncclComm_t nccl;
	bool nccl_gone;        /* ncclCommAbort or Destroy done: never touch nccl again */
	cudaStream_t stream;
	float *word;           /* device: one float, the barrier's all-reduce */
	int failed;            /* the first failure's code, sticky */
	bool aborted;          /* comm_abort ran */
	atomic_bool cancel;    /* comm_cancel asked, from any thread: the poll loops end it */
	const char *pending;   /* the last _async collective's name, for nccl_wait's errors */
	char first_err[ERR_BYTES];
	char err[ERR_BYTES];
} nccl_comm_t;

static int64_t s_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void s_nap(unsigned *polls)
{
	if (++*polls < SPIN_POLLS)
		return;
	struct timespec ts = {0, NAP_NS};
	nanosleep(&ts, NULL);
}

/* A negative errno for an NCCL result. */
static int s_nccl_code(ncclResult_t r)
{
	switch (r) {
	case ncclRemoteError:
	case ncclSystemError: /* a socket to a peer failed: mostly a peer gone */
		return -ECONNRESET;
	case ncclInvalidArgument:
	case ncclInvalidUsage:
		return -EINVAL;
	default:
		return -EIO;
	}
}

static void s_abort_nccl(nccl_comm_t *c)
{
	if (c->nccl && !c->nccl_gone) {
		/* With a non-blocking comm the reclaim may finish in NCCL's own
		 * thread (ncclInProgress); the handle is not used again either way. */
		(void)ncclCommAbort(c->nccl);
		c->nccl_gone = true;
	}
}

/* Record "op: why" as the last error and, unless it is -EINVAL, as the
 * sticky first failure. Returns `code`. */
static int s_fail(nccl_comm_t *c, const char *op, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int s_fail(nccl_comm_t *c, const char *op, int code, const char *fmt, ...)
{
	char why[ERR_BYTES];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	snprintf(c->err, sizeof c->err, "%s: %.480s", op, why);
	if (code != -EINVAL && !c->failed) {
		c->failed = code;
		memcpy(c->first_err, c->err, sizeof c->err);
	}
	return code;
}

/* An NCCL error `r` in `op`: the comm is aborted (its state is unknown)
 * and the failure is sticky; an invalid argument found after the work may
 * have been enqueued is -EIO then, the comm being gone. */
static int s_fail_nccl(nccl_comm_t *c, const char *op, ncclResult_t r)
{
	const char *detail = c->nccl && !c->nccl_gone ? ncclGetLastError(c->nccl) : NULL;
	int code = s_nccl_code(r);
	s_fail(c, op, code == -EINVAL ? -EIO : code, "NCCL error: %s%s%s", ncclGetErrorString(r),
	       detail && detail[0] ? ": " : "", detail ? detail : "");
	s_abort_nccl(c);
	return c->failed;
}

static int s_fail_cuda(nccl_comm_t *c, const char *op, cudaError_t e, const char *what)
{
	s_fail(c, op, -EIO, "CUDA error in %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
	s_abort_nccl(c);
	return -EIO;
}

static int s_fail_timeout(nccl_comm_t *c, const char *op)
{
	s_abort_nccl(c);
	return s_fail(c, op, -ETIMEDOUT,
	              "no progress within %d ms (a rank that did not call it, or a hung or stopped "
	              "peer); the NCCL communicator was aborted",
	              c->timeout_ms);
}

/* comm_cancel was asked: abort (on this, the collectives' thread) and fail. */
static int s_cancelled(nccl_comm_t *c, const char *op)
{
	s_abort_nccl(c);
	return s_fail(c, op, -ECANCELED,
	              "cancelled: the rank was asked to stop its step (comm_cancel); the NCCL "
	              "communicator was aborted");
}

/* The checks every collective starts with; 0 to go on. */
static int s_begin(nccl_comm_t *c, const char *op)
{
	if (c->aborted)
		return s_fail(c, op, -ECANCELED, "the communicator was aborted");
	if (c->failed) {
		char first[ERR_BYTES];
		memcpy(first, c->first_err, sizeof first);
		snprintf(c->err, sizeof c->err, "%s: the communicator failed earlier (%.400s)", op, first);
		return c->failed;
	}
	cudaError_t e = cudaSetDevice(c->device);
	if (e != cudaSuccess)
		return s_fail_cuda(c, op, e, "cudaSetDevice");
	return 0;
}

/* After one NCCL call (or ncclGroupEnd) returned `r`: wait while NCCL says
 * ncclInProgress, up to `deadline_ms`. 0 when the work is enqueued. A
 * single call refused as invalid with the comm intact is -EINVAL and not
 * sticky (nothing was enqueued). */
static int s_settle(nccl_comm_t *c, const char *op, ncclResult_t r, int64_t deadline_ms)
{
	if (r != ncclSuccess && r != ncclInProgress) {
		ncclResult_t st = ncclSuccess;
		if ((r == ncclInvalidArgument || r == ncclInvalidUsage) &&
		    ncclCommGetAsyncError(c->nccl, &st) == ncclSuccess && st == ncclSuccess)
			/* Refused before anything was enqueued: the comm is intact. */
			return s_fail(c, op, -EINVAL, "NCCL refused the call: %s: %s", ncclGetErrorString(r),
			              ncclGetLastError(c->nccl));
		return s_fail_nccl(c, op, r);
	}
	unsigned polls = 0;
	ncclResult_t st = r;
	while (st == ncclInProgress) {
		ncclResult_t q = ncclCommGetAsyncError(c->nccl, &st);
		if (q != ncclSuccess)
			return s_fail_nccl(c, op, q);
		if (st == ncclInProgress) {
			if (atomic_load(&c->cancel))
				return s_cancelled(c, op);
			if (s_now_ms() >= deadline_ms)
				return s_fail_timeout(c, op);
			s_nap(&polls);
		}
	}
	return st == ncclSuccess ? 0 : s_fail_nccl(c, op, st);
}

/* Wait until the comm's stream is idle, up to `deadline_ms`. */
static int s_wait_stream(nccl_comm_t *c, const char *op, int64_t deadline_ms)
{
	unsigned polls = 0;
	for (;;) {
		cudaError_t e = cudaStreamQuery(c->stream);
		if (e == cudaSuccess)
			return 0;
		if (e != cudaErrorNotReady)
			return s_fail_cuda(c, op, e, "the collective's stream");
		ncclResult_t st = ncclSuccess;
		ncclResult_t q = ncclCommGetAsyncError(c->nccl, &st);
		if (q != ncclSuccess)
			return s_fail_nccl(c, op, q);
		if (st != ncclSuccess && st != ncclInProgress)
			return s_fail_nccl(c, op, st);
		if (atomic_load(&c->cancel))
			return s_cancelled(c, op);
		if (s_now_ms() >= deadline_ms)
			return s_fail_timeout(c, op);
		s_nap(&polls);
	}
}

/* Enqueue-and-wait tail shared by the collectives. */
static int s_finish(nccl_comm_t *c, const char *op, ncclResult_t r, int64_t deadline_ms)
{
	int rc = s_settle(c, op, r, deadline_ms);
	return rc < 0 ? rc : s_wait_stream(c, op, deadline_ms);
}

/* Whether all counts are equal; *ret_n is their sum. */
static bool s_counts(const nccl_comm_t *c, const size_t *counts, size_t *ret_n)
{
	bool equal = true;
	size_t n = 0;
	for (int i = 0; i < c->size; i++) {
		n += counts[i];
		equal = equal && counts[i] == counts[0];
	}
	*ret_n = n;
	return equal;
}

/* ---- the operations ---- */

/* Make the comm's stream wait for `after_event` (a cudaEvent_t; NULL: no
 * wait). 0 or the error. */
static int s_after(nccl_comm_t *c, const char *op, void *after_event)
{
	if (!after_event)
		return 0;
	cudaError_t e = cudaStreamWaitEvent(c->stream, (cudaEvent_t)after_event, 0);
	return e == cudaSuccess ? 0 : s_fail_cuda(c, op, e, "cudaStreamWaitEvent");
}

/* The all-reduce enqueued on the comm's stream, behind after_event when it
 * is not NULL; *ret_deadline is the bound it started under. 0 or the error. */
static int s_allreduce_enqueue(nccl_comm_t *c, float *buf, size_t n, void *after_event,
                               int64_t *ret_deadline)
{
	const char *op = "all-reduce";
	*ret_deadline = s_now_ms() + c->timeout_ms;
	int rc = s_begin(c, op);
	if (rc < 0 || n == 0)
		return rc;
	rc = s_after(c, op, after_event);
	if (rc < 0)
		return rc;
	return s_settle(c, op, ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, c->nccl, c->stream),
	                *ret_deadline);
}

static int nccl_allreduce_sum_f32(void *impl, float *buf, size_t n)
{
	nccl_comm_t *c = impl;
	int64_t deadline;
	int rc = s_allreduce_enqueue(c, buf, n, NULL, &deadline);
	return rc < 0 || n == 0 ? rc : s_wait_stream(c, "all-reduce", deadline);
}

/* Enqueued behind after_event and not waited for: nccl_wait finishes it. */
static int nccl_allreduce_sum_f32_async(void *impl, float *buf, size_t n, void *after_event)
{
	nccl_comm_t *c = impl;
	int64_t deadline;
	c->pending = "all-reduce";
	return s_allreduce_enqueue(c, buf, n, after_event, &deadline);
}

static void nccl_cancel(void *impl)
{
	nccl_comm_t *c = impl;
	atomic_store(&c->cancel, true);
}

static int nccl_wait(void *impl)
{
	nccl_comm_t *c = impl;
	const char *op = c->pending ? c->pending : "started collectives";
	c->pending = NULL;
	int rc = s_begin(c, op);
	if (rc < 0)
		return rc;
	return s_wait_stream(c, op, s_now_ms() + c->timeout_ms);
}

/* The reduce-scatter enqueued on the comm's stream behind after_event
 * (NULL: no wait); *ret_deadline is the bound it started under. 0 or the
 * error. */
static int s_reduce_scatter_enqueue(nccl_comm_t *c, const float *in, float *out,
                                    const size_t *counts, void *after_event, int64_t *ret_deadline)
{
	const char *op = "reduce-scatter";
	*ret_deadline = s_now_ms() + c->timeout_ms;
	int rc = s_begin(c, op);
	if (rc < 0)
		return rc;
	size_t n;
	bool equal = s_counts(c, counts, &n);
	if (n == 0)
		return 0;
	rc = s_after(c, op, after_event);
	if (rc < 0)
		return rc;
	if (equal)
		return s_settle(c, op,
		                ncclReduceScatter(in, out, counts[0], ncclFloat, ncclSum, c->nccl, c->stream),
		                *ret_deadline);
	/* Uneven: a reduce to each rank of its part. Calls inside a group only
	 * queue work; ncclGroupEnd reports, and must run even after a refusal. */
	ncclResult_t first = ncclGroupStart();
	if (first != ncclSuccess)
		return s_fail_nccl(c, op, first);
	size_t offset = 0;
	for (int i = 0; i < c->size; i++) {
		if (counts[i]) {
			ncclResult_t r = ncclReduce(in + offset, out, counts[i], ncclFloat, ncclSum, i, c->nccl,
			                            c->stream);
			if (r != ncclSuccess && r != ncclInProgress && first == ncclSuccess)
				first = r;
		}
		offset += counts[i];
	}
	ncclResult_t end = ncclGroupEnd();
	if (first != ncclSuccess) /* part of the group may have gone out: fatal */
		return s_fail_nccl(c, op, first);
	return s_settle(c, op, end, *ret_deadline);
}

static int nccl_reduce_scatter_sum_f32(void *impl, const float *in, float *out, const size_t *counts)
{
	nccl_comm_t *c = impl;
	int64_t deadline;
	int rc = s_reduce_scatter_enqueue(c, in, out, counts, NULL, &deadline);
	return rc < 0 ? rc : s_wait_stream(c, "reduce-scatter", deadline);
}

/* Enqueued behind after_event and not waited for: nccl_wait finishes it. */
static int nccl_reduce_scatter_sum_f32_async(void *impl, const float *in, float *out,
                                             const size_t *counts, void *after_event)
{
	nccl_comm_t *c = impl;
	int64_t deadline;
	c->pending = "reduce-scatter";
	return s_reduce_scatter_enqueue(c, in, out, counts, after_event, &deadline);
}

static int nccl_allgather_f32(void *impl, const float *in, float *out, const size_t *counts)
{
	nccl_comm_t *c = impl;
	const char *op = "all-gather";
	int rc = s_begin(c, op);
	if (rc < 0)
		return rc;
	size_t n;
	bool equal = s_counts(c, counts, &n);
	if (n == 0)
		return 0;
	int64_t deadline = s_now_ms() + c->timeout_ms;
	if (equal)
		return s_finish(c, op, ncclAllGather(in, out, counts[0], ncclFloat, c->nccl, c->stream),
		                deadline);
	/* Uneven: each rank broadcasts its part into its place in `out`. The
	 * root's send buffer is `in`, which may be that very place (in place). */
	ncclResult_t first = ncclGroupStart();
	if (first != ncclSuccess)
		return s_fail_nccl(c, op, first);
	size_t offset = 0;
	for (int i = 0; i < c->size; i++) {
		if (counts[i]) {
			const float *send = i == c->rank ? in : out + offset;
			ncclResult_t r = ncclBroadcast(send, out + offset, counts[i], ncclFloat, i, c->nccl,
			                               c->stream);
			if (r != ncclSuccess && r != ncclInProgress && first == ncclSuccess)
				first = r;
		}
		offset += counts[i];
	}
	ncclResult_t end = ncclGroupEnd();
	if (first != ncclSuccess) /* part of the group may have gone out: fatal */
		return s_fail_nccl(c, op, first);
	return s_finish(c, op, end, deadline);
}

static int nccl_broadcast(void *impl, void *buf, size_t bytes, int root)
{
	nccl_comm_t *c = impl;
	if (root < 0 || root >= c->size)
		return s_fail(c, "broadcast", -EINVAL, "root %d is not a rank of world size %d", root, c->size);
	const char *op = "broadcast";
	int rc = s_begin(c, op);
	if (rc < 0 || bytes == 0)
		return rc;
	int64_t deadline = s_now_ms() + c->timeout_ms;
	return s_finish(c, op, ncclBroadcast(buf, buf, bytes, ncclUint8, root, c->nccl, c->stream),
	                deadline);
}

static int nccl_barrier(void *impl)
{
	nccl_comm_t *c = impl;
	const char *op = "barrier";
	int rc = s_begin(c, op);
	if (rc < 0)
		return rc;
	int64_t deadline = s_now_ms() + c->timeout_ms;
	return s_finish(c, op, ncclAllReduce(c->word, c->word, 1, ncclFloat, ncclSum, c->nccl, c->stream),
	                deadline);
}

/* comm_split's exchange: host bytes staged through device memory. */
static int nccl_allgather_bytes(void *impl, const void *in, void *out, size_t bytes)
{
	nccl_comm_t *c = impl;
	const char *op = "all-gather";
	int rc = s_begin(c, op);
	if (rc < 0 || bytes == 0)
		return rc;
	size_t total = bytes * (size_t)c->size;
	uint8_t *dev = NULL;
	cudaError_t e = cudaMalloc((void **)&dev, total);
	if (e != cudaSuccess)
		return s_fail_cuda(c, op, e, "cudaMalloc");
	if ((e = cudaMemcpy(dev + (size_t)c->rank * bytes, in, bytes, cudaMemcpyHostToDevice)) !=
	    cudaSuccess) {
		(void)cudaFree(dev);
		return s_fail_cuda(c, op, e, "cudaMemcpy");
	}
	int64_t deadline = s_now_ms() + c->timeout_ms;
	rc = s_finish(c, op,
	              ncclAllGather(dev + (size_t)c->rank * bytes, dev, bytes, ncclUint8, c->nccl, c->stream),
	              deadline);
	if (rc == 0 && (e = cudaMemcpy(out, dev, total, cudaMemcpyDeviceToHost)) != cudaSuccess)
		rc = s_fail_cuda(c, op, e, "cudaMemcpy");
	(void)cudaFree(dev);
	return rc;
}

static comm_t *nccl_sub_new(void *impl, const comm_kv_t *kv, int rank, int size, char *err,
                            size_t errlen)
{
	nccl_comm_t *c = impl;
	return comm_nccl_new(kv, rank, size, c->device, c->timeout_ms, err, errlen);
}

static void nccl_set_timeout(void *impl, int timeout_ms)
{
	nccl_comm_t *c = impl;
	if (timeout_ms > 0)
		c->timeout_ms = timeout_ms;
}

static void nccl_abort(void *impl)
{
	nccl_comm_t *c = impl;
	if (c->aborted)
		return;
	c->aborted = true;
	/* ncclCommAbort stops NCCL's kernels and proxy threads, so peers
	 * blocked with this rank see an error or their own timeout. */
	s_abort_nccl(c);
}

static const char *nccl_last_error(const void *impl)
{
	return ((const nccl_comm_t *)impl)->err;
}

static void *nccl_stream(const void *impl)
{
	return (void *)((const nccl_comm_t *)impl)->stream;
}

/* Destroy what `c` holds: a healthy communicator is finalized (bounded by
 * the timeout) and destroyed, any other aborted. Accepts half-built ones. */
static void nccl_free(void *impl)
{
	nccl_comm_t *c = impl;
	if (!c)
		return;
	(void)cudaSetDevice(c->device);
	if (c->nccl && !c->nccl_gone) {
		bool clean = !c->failed;
		if (clean) {
			ncclResult_t r = ncclCommFinalize(c->nccl);
			int64_t deadline = s_now_ms() + c->timeout_ms;
			unsigned polls = 0;
			ncclResult_t st = r;
			while (st == ncclInProgress && s_now_ms() < deadline) {
				if (ncclCommGetAsyncError(c->nccl, &st) != ncclSuccess)
					break;
				s_nap(&polls);
			}
			clean = (r == ncclSuccess || r == ncclInProgress) && st == ncclSuccess;
		}
		if (clean)
			(void)ncclCommDestroy(c->nccl);
		else
			(void)ncclCommAbort(c->nccl);
		c->nccl_gone = true;
	}
	if (c->word)
		(void)cudaFree(c->word);
	if (c->stream)
		(void)cudaStreamDestroy(c->stream);
	free(c);
}

static const comm_ops_t s_nccl_ops = {
	.allreduce_sum_f32 = nccl_allreduce_sum_f32,
	.reduce_scatter_sum_f32 = nccl_reduce_scatter_sum_f32,
	.allgather_f32 = nccl_allgather_f32,
	.broadcast = nccl_broadcast,
	.barrier = nccl_barrier,
	.set_timeout = nccl_set_timeout,
	.abort = nccl_abort,
	.last_error = nccl_last_error,
	.stream = nccl_stream,
	.free = nccl_free,
	.allreduce_sum_f32_async = nccl_allreduce_sum_f32_async,
	.reduce_scatter_sum_f32_async = nccl_reduce_scatter_sum_f32_async,
	.wait = nccl_wait,
	.cancel = nccl_cancel,
	.allgather_bytes = nccl_allgather_bytes,
	.sub_new = nccl_sub_new,
};

/* ---- construction ---- */

int comm_nccl_available(char *err, size_t errlen)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		snprintf(err, errlen, "CUDA driver not usable: %s (%s)", cudaGetErrorString(e),
		         cudaGetErrorName(e));
		return -ENODEV;
	}
	if (n < 1) {
		const char *vis = getenv("CUDA_VISIBLE_DEVICES");
		snprintf(err, errlen, "no CUDA device visible%s%s%s", vis ? " (CUDA_VISIBLE_DEVICES=" : "",
		         vis ? vis : "", vis ? ")" : "");
		return -ENODEV;
	}
	if (errlen)
		err[0] = '\0';
	return 0;
}

/* The unique id: made and published by rank 0, read by the others. */
static int s_unique_id(const comm_kv_t *kv, int rank, int timeout_ms, ncclUniqueId *ret_id, char *err,
                       size_t errlen)
{
	if (rank == 0) {
		ncclResult_t r = ncclGetUniqueId(ret_id);
		if (r != ncclSuccess) {
			snprintf(err, errlen, "comm: ncclGetUniqueId failed: %s: %s", ncclGetErrorString(r),
			         ncclGetLastError(NULL));
			return -EIO;
		}
		int rc = kv->set(kv->ctx, NCCL_ID_KEY, ret_id, sizeof *ret_id);
		if (rc < 0)
			snprintf(err, errlen, "comm: rendezvous: storing key '%s' failed: %s", NCCL_ID_KEY,
			         strerror(-rc));
		return rc;
	}
	void *value = NULL;
	size_t n = 0;
	int rc = kv->get(kv->ctx, NCCL_ID_KEY, timeout_ms, &value, &n);
	if (rc == -ETIMEDOUT) {
		snprintf(err, errlen,
		         "comm: rendezvous: key '%s' did not appear within %d ms (has rank 0 started?)",
		         NCCL_ID_KEY, timeout_ms);
		return rc;
	}
	if (rc < 0) {
		snprintf(err, errlen, "comm: rendezvous: reading key '%s' failed: %s", NCCL_ID_KEY,
		         strerror(-rc));
		return rc;
	}
	if (n != sizeof *ret_id) {
		snprintf(err, errlen, "comm: rendezvous: key '%s' holds %zu bytes, not an NCCL id (%zu)",
		         NCCL_ID_KEY, n, sizeof *ret_id);
		free(value);
		return -EPROTO;
	}
	memcpy(ret_id, value, sizeof *ret_id);
	free(value);
	return 0;
}

comm_t *comm_nccl_new(const comm_kv_t *kv, int rank, int world_size, int device, int timeout_ms,
                      char *err, size_t errlen)
{
	if (errlen)
		err[0] = '\0';
	if (!kv || !kv->set || !kv->get || world_size < 1 || rank < 0 || rank >= world_size ||
	    device < 0 || timeout_ms <= 0) {
		snprintf(err, errlen,
		         "comm: bad arguments (rank %d of world size %d, CUDA device %d, timeout %d ms)", rank,
		         world_size, device, timeout_ms);
		return NULL;
	}
	int64_t deadline = s_now_ms() + timeout_ms;
	cudaError_t e = cudaSetDevice(device);
	if (e != cudaSuccess) {
		snprintf(err, errlen, "comm: rank %d cannot use CUDA device %d: %s (%s)", rank, device,
		         cudaGetErrorString(e), cudaGetErrorName(e));
		return NULL;
	}
	nccl_comm_t *c = calloc(1, sizeof *c);
	if (!c) {
		snprintf(err, errlen, "comm: out of memory");
		return NULL;
	}
	c->rank = rank;
	c->size = world_size;
	c->device = device;
	c->timeout_ms = timeout_ms;
	if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess ||
	    (e = cudaMalloc((void **)&c->word, sizeof(float))) != cudaSuccess ||
	    (e = cudaMemset(c->word, 0, sizeof(float))) != cudaSuccess) {
		snprintf(err, errlen, "comm: rank %d on CUDA device %d: %s (%s)", rank, device,
		         cudaGetErrorString(e), cudaGetErrorName(e));
		goto fail;
	}
	ncclUniqueId id;
	if (s_unique_id(kv, rank, timeout_ms, &id, err, errlen) < 0)
		goto fail;

	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	config.blocking = 0;
	ncclResult_t r = ncclCommInitRankConfig(&c->nccl, world_size, id, rank, &config);
	ncclResult_t st = r;
	unsigned polls = 0;
	while (st == ncclInProgress && c->nccl) {
		if (s_now_ms() >= deadline) {
			snprintf(err, errlen,
			         "comm: rank %d of %d: the NCCL communicator was not set up within %d ms (has every "
			         "rank started?); aborted",
			         rank, world_size, timeout_ms);
			goto fail;
		}
		if (ncclCommGetAsyncError(c->nccl, &st) != ncclSuccess)
			break;
		s_nap(&polls);
	}
	if (st != ncclSuccess) {
		snprintf(err, errlen, "comm: rank %d of %d on CUDA device %d: NCCL set-up failed: %s: %s", rank,
		         world_size, device, ncclGetErrorString(st), ncclGetLastError(c->nccl));
		goto fail;
	}
	comm_t *wrapped = comm_make(&s_nccl_ops, c, rank, world_size);
	if (wrapped)
		return wrapped;
	snprintf(err, errlen, "comm: out of memory");
fail:
	c->failed = -EIO; /* so that nccl_free aborts the half-made communicator */
	nccl_free(c);
	return NULL;
}
