/*
 * cudaemu_nccl: the NCCL calls of worker/comm/comm_nccl.c for the host
 * emulator (cudaemu.h), between processes on one machine, so that a cuda
 * job's rank path runs in CI at any world size: the unique id through the
 * KV, the non-blocking init and its polling, every collective (with the
 * grouped uneven reduce-scatter and all-gather), finalize and abort. Device
 * memory is host memory.
 *
 * A communicator is a shared file in /dev/shm named by the unique id: a
 * header (ranks joined, a barrier) and one slot of SLOT_BYTES per rank. A
 * collective runs when it is called, whatever the stream: each rank copies
 * its input into its slot, all meet at the barrier, each computes its
 * output from the slots (sums in rank order, in fp32), and all meet again
 * before a slot is reused. Calls inside ncclGroupStart/End run one by one
 * in the order made, which every rank shares. So results are exact
 * functions of the inputs, but sums are in rank order, not NCCL's ring
 * order.
 *
 * Non-blocking communicators (config->blocking == 0) report ncclInProgress
 * from init and from ncclCommGetAsyncError until every rank has joined, as
 * real NCCL does, so the caller's timeout applies. A collective waits for
 * its peers up to CUDAEMU_NCCL_TIMEOUT_MS (default 30000), then fails with
 * ncclSystemError and a last error saying which collective (real NCCL would
 * leave the stream pending and the caller's timeout would abort it; the
 * caller sees a failure either way). Only float sums and byte broadcasts are
 * emulated: what comm_nccl.c uses.
 */
#include <nccl.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <vector>

namespace {

const size_t SLOT_BYTES = (size_t)256 << 20; /* per rank, sparse */
const int MAX_RANKS = 16;

struct shared_hdr {
	int joined;
	int arrived;
	int generation;
	int nranks;
};

} /* namespace */

struct ncclComm {
	char name[NCCL_UNIQUE_ID_BYTES + 1];
	int rank, nranks;
	shared_hdr *hdr;
	char *slots;
	size_t map_bytes;
	bool unlinked;
	bool finalized;
};

namespace {

char s_last[512];

ncclResult_t s_usage(const char *fmt, const char *what)
{
	snprintf(s_last, sizeof s_last, fmt, what);
	return ncclInvalidUsage;
}

int64_t s_now_ms()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t s_timeout_ms()
{
	const char *e = getenv("CUDAEMU_NCCL_TIMEOUT_MS");
	return e && atoi(e) > 0 ? atoi(e) : 30000;
}

void s_nap()
{
	struct timespec ts = {0, 100000}; /* 0.1 ms */
	nanosleep(&ts, NULL);
}

/* Everyone has joined: the name can go (every rank has it mapped). */
void s_unlink_when_complete(ncclComm_t c)
{
	if (!c->unlinked && __atomic_load_n(&c->hdr->joined, __ATOMIC_SEQ_CST) >= c->nranks) {
		if (c->rank == 0)
			shm_unlink(c->name);
		c->unlinked = true;
	}
}

/* All ranks of c meet; false when a peer did not come in time. */
bool s_barrier(ncclComm_t c, const char *op)
{
	shared_hdr *h = c->hdr;
	int gen = __atomic_load_n(&h->generation, __ATOMIC_SEQ_CST);
	if (__atomic_add_fetch(&h->arrived, 1, __ATOMIC_SEQ_CST) == c->nranks) {
		__atomic_store_n(&h->arrived, 0, __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&h->generation, 1, __ATOMIC_SEQ_CST);
		return true;
	}
	int64_t deadline = s_now_ms() + s_timeout_ms();
	unsigned spins = 0;
	while (__atomic_load_n(&h->generation, __ATOMIC_SEQ_CST) == gen) {
		if (s_now_ms() > deadline) {
			snprintf(s_last, sizeof s_last,
				 "cudaemu: %s: rank %d of %d waited %lld ms for its peers", op, c->rank,
				 c->nranks, (long long)s_timeout_ms());
			return false;
		}
		if (++spins < 1000)
			sched_yield();
		else
			s_nap();
	}
	return true;
}

char *s_slot(ncclComm_t c, int r)
{
	return c->slots + (size_t)r * SLOT_BYTES;
}

ncclResult_t s_check(ncclComm_t c, const char *op, size_t bytes)
{
	if (!c)
		return s_usage("%s: NULL communicator", op);
	if (c->finalized)
		return s_usage("%s: the communicator was finalized", op);
	if (__atomic_load_n(&c->hdr->joined, __ATOMIC_SEQ_CST) < c->nranks)
		return s_usage("%s: the communicator is not initialized yet", op);
	if (bytes > SLOT_BYTES) {
		snprintf(s_last, sizeof s_last, "cudaemu: %s of %zu bytes: the emulator's limit is %zu",
			 op, bytes, SLOT_BYTES);
		return ncclInvalidUsage;
	}
	return ncclSuccess;
}

ncclResult_t s_sum_type(ncclDataType_t t, ncclRedOp_t op, const char *what)
{
	if (t != ncclFloat32 || op != ncclSum)
		return s_usage("%s: cudaemu emulates float sums only", what);
	return ncclSuccess;
}

/* out[i] = sum over ranks in order of slot[r][first + i], i < count */
void s_sum_slots(ncclComm_t c, float *out, size_t first, size_t count)
{
	std::vector<float> acc(count, 0.0f);
	for (int r = 0; r < c->nranks; r++) {
		const float *p = (const float *)s_slot(c, r) + first;
		for (size_t i = 0; i < count; i++)
			acc[i] += p[i];
	}
	memcpy(out, acc.data(), count * sizeof(float));
}

ncclResult_t s_fail_peers()
{
	return ncclSystemError;
}

} /* namespace */

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	memset(id, 0, sizeof *id);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(id->internal, sizeof id->internal, "/cudaemu-nccl-%d-%ld-%ld", (int)getpid(),
		 (long)ts.tv_sec, ts.tv_nsec);
	return ncclSuccess;
}

ncclResult_t ncclGetVersion(int *version)
{
	*version = NCCL_VERSION_CODE;
	return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
				    ncclConfig_t *config)
{
	*comm = NULL;
	if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) {
		snprintf(s_last, sizeof s_last, "cudaemu: rank %d of %d (at most %d ranks emulated)",
			 rank, nranks, MAX_RANKS);
		return ncclInvalidArgument;
	}
	if (strncmp(id.internal, "/cudaemu-nccl-", 14) != 0)
		return s_usage("%s: not a unique id from ncclGetUniqueId", "ncclCommInitRankConfig");
	ncclComm_t c = (ncclComm_t)calloc(1, sizeof *c);
	if (!c)
		return ncclSystemError;
	snprintf(c->name, sizeof c->name, "%s", id.internal);
	c->rank = rank;
	c->nranks = nranks;
	c->map_bytes = 4096 + (size_t)nranks * SLOT_BYTES;
	int fd = shm_open(c->name, O_CREAT | O_RDWR, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)c->map_bytes) != 0) {
		snprintf(s_last, sizeof s_last, "cudaemu: shm_open/ftruncate %s: %s", c->name,
			 strerror(errno));
		if (fd >= 0)
			close(fd);
		free(c);
		return ncclSystemError;
	}
	void *p = mmap(NULL, c->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		snprintf(s_last, sizeof s_last, "cudaemu: mmap %s: %s", c->name, strerror(errno));
		free(c);
		return ncclSystemError;
	}
	c->hdr = (shared_hdr *)p;
	c->slots = (char *)p + 4096;
	__atomic_add_fetch(&c->hdr->joined, 1, __ATOMIC_SEQ_CST);
	*comm = c;
	if (config && config->blocking == 0) {
		s_unlink_when_complete(c);
		return c->unlinked ? ncclSuccess : ncclInProgress;
	}
	int64_t deadline = s_now_ms() + s_timeout_ms();
	while (__atomic_load_n(&c->hdr->joined, __ATOMIC_SEQ_CST) < nranks) {
		if (s_now_ms() > deadline) {
			snprintf(s_last, sizeof s_last, "cudaemu: init: rank %d waited for its peers", rank);
			return ncclSystemError;
		}
		s_nap();
	}
	s_unlink_when_complete(c);
	return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	return ncclCommInitRankConfig(comm, nranks, id, rank, NULL);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error)
{
	if (!comm)
		return s_usage("%s: NULL communicator", "ncclCommGetAsyncError");
	s_unlink_when_complete(comm);
	*async_error = __atomic_load_n(&comm->hdr->joined, __ATOMIC_SEQ_CST) < comm->nranks
			       ? ncclInProgress
			       : ncclSuccess;
	return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	if (!comm)
		return ncclInvalidArgument;
	*count = comm->nranks;
	return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	if (!comm)
		return ncclInvalidArgument;
	*rank = comm->rank;
	return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	if (!comm)
		return s_usage("%s: NULL communicator", "ncclCommFinalize");
	comm->finalized = true;
	return ncclSuccess;
}

static void s_release(ncclComm_t comm)
{
	if (!comm)
		return;
	if (!comm->unlinked && comm->rank == 0)
		shm_unlink(comm->name); /* never completed: nobody else needs the name */
	munmap(comm->hdr, comm->map_bytes);
	free(comm);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	s_release(comm);
	return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	s_release(comm);
	return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
	switch (r) {
	case ncclSuccess:
		return "no error";
	case ncclInvalidUsage:
		return "invalid usage";
	case ncclInvalidArgument:
		return "invalid argument";
	case ncclSystemError:
		return "unhandled system error";
	case ncclInProgress:
		return "operation in progress";
	default:
		return "cudaemu: unexpected NCCL result";
	}
}

const char *ncclGetLastError(ncclComm_t comm)
{
	(void)comm;
	return s_last;
}

ncclResult_t ncclGroupStart(void)
{
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
			   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	(void)stream;
	const char *what = "ncclAllReduce";
	ncclResult_t r = s_check(comm, what, count * sizeof(float));
	if (r == ncclSuccess)
		r = s_sum_type(t, op, what);
	if (r != ncclSuccess)
		return r;
	memcpy(s_slot(comm, comm->rank), send, count * sizeof(float));
	if (!s_barrier(comm, what))
		return s_fail_peers();
	s_sum_slots(comm, (float *)recv, 0, count);
	return s_barrier(comm, what) ? ncclSuccess : s_fail_peers();
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
			int root, ncclComm_t comm, cudaStream_t stream)
{
	(void)stream;
	const char *what = "ncclReduce";
	ncclResult_t r = s_check(comm, what, count * sizeof(float));
	if (r == ncclSuccess)
		r = s_sum_type(t, op, what);
	if (r == ncclSuccess && (root < 0 || root >= comm->nranks))
		r = s_usage("%s: root out of range", what);
	if (r != ncclSuccess)
		return r;
	memcpy(s_slot(comm, comm->rank), send, count * sizeof(float));
	if (!s_barrier(comm, what))
		return s_fail_peers();
	if (comm->rank == root)
		s_sum_slots(comm, (float *)recv, 0, count);
	return s_barrier(comm, what) ? ncclSuccess : s_fail_peers();
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t t,
			       ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	(void)stream;
	const char *what = "ncclReduceScatter";
	ncclResult_t r = s_check(comm, what, recvcount * (size_t)(comm ? comm->nranks : 1) * sizeof(float));
	if (r == ncclSuccess)
		r = s_sum_type(t, op, what);
	if (r != ncclSuccess)
		return r;
	memcpy(s_slot(comm, comm->rank), send, recvcount * (size_t)comm->nranks * sizeof(float));
	if (!s_barrier(comm, what))
		return s_fail_peers();
	s_sum_slots(comm, (float *)recv, (size_t)comm->rank * recvcount, recvcount);
	return s_barrier(comm, what) ? ncclSuccess : s_fail_peers();
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t t,
			   ncclComm_t comm, cudaStream_t stream)
{
	(void)stream;
	const char *what = "ncclAllGather";
	if (t != ncclFloat32)
		return s_usage("%s: cudaemu emulates floats only", what);
	size_t bytes = sendcount * sizeof(float);
	ncclResult_t r = s_check(comm, what, bytes);
	if (r != ncclSuccess)
		return r;
	memcpy(s_slot(comm, comm->rank), send, bytes);
	if (!s_barrier(comm, what))
		return s_fail_peers();
	for (int k = 0; k < comm->nranks; k++)
		memcpy((char *)recv + (size_t)k * bytes, s_slot(comm, k), bytes);
	return s_barrier(comm, what) ? ncclSuccess : s_fail_peers();
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
			   ncclComm_t comm, cudaStream_t stream)
{
	(void)stream;
	const char *what = "ncclBroadcast";
	size_t unit = t == ncclUint8 || t == ncclInt8 ? 1 : t == ncclFloat32 ? 4 : 0;
	if (!unit)
		return s_usage("%s: cudaemu emulates bytes and floats only", what);
	size_t bytes = count * unit;
	ncclResult_t r = s_check(comm, what, bytes);
	if (r == ncclSuccess && (root < 0 || root >= comm->nranks))
		r = s_usage("%s: root out of range", what);
	if (r != ncclSuccess)
		return r;
	if (comm->rank == root)
		memcpy(s_slot(comm, root), send, bytes);
	if (!s_barrier(comm, what))
		return s_fail_peers();
	if (comm->rank != root || recv != send)
		memcpy(recv, s_slot(comm, root), bytes);
	return s_barrier(comm, what) ? ncclSuccess : s_fail_peers();
}

} /* extern "C" */
