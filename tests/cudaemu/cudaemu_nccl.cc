/*
 * cudaemu_nccl: the NCCL calls of worker/comm/comm_nccl.c for the host
 * emulator (cudaemu.h), between processes on one machine, so that a cuda
 * job's rank path runs in CI at any world size: the unique id through the
 * KV, the non-blocking init and its polling, every collective (with the
 * grouped uneven reduce-scatter and all-gather), finalize and abort. Device
 * memory is host memory.
 *
 * A communicator is a shared file in /dev/shm named by the unique id: a
 * header (ranks joined, a barrier) and one slot of SLOT_BYTES per rank.
 * Collectives are asynchronous, as on a GPU: a call queues the operation
 * on its communicator and returns; it makes progress whenever the caller
 * polls (ncclCommGetAsyncError, cudaStreamQuery or cudaStreamSynchronize on
 * any stream, through cudaemu_nccl_busy), one operation at a time in the
 * order made: the rank copies its input into its slot and arrives at the
 * barrier; once all have arrived it computes its output from the slots
 * (sums in rank order, in fp32) and arrives again; once all have, the slot
 * is free for the next. So the caller's own timeout and cancellation work
 * as with real NCCL (a peer that died leaves the operation pending, it is
 * not an error), and results are exact functions of the inputs, summed in
 * rank order rather than NCCL's ring order. Calls inside
 * ncclGroupStart/End queue in the order made, which every rank shares.
 *
 * Non-blocking communicators (config->blocking == 0) report ncclInProgress
 * from init and from ncclCommGetAsyncError until every rank has joined, as
 * real NCCL does. Only float sums and byte or float broadcasts are
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

#include <deque>
#include <mutex>
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

enum op_kind { OP_ALLREDUCE, OP_REDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER, OP_BROADCAST };

/* A queued collective: phase 0 not started, 1 deposited and waiting at the
 * first barrier (generation gen), 2 output written, waiting at the second. */
struct pending_op {
	op_kind kind;
	const void *send;
	void *recv;
	size_t count; /* elements: the per-rank part for reduce-scatter and all-gather */
	size_t unit;  /* bytes per element */
	int root;
	cudaStream_t stream;
	int phase;
	int gen;
};

struct ncclComm {
	char name[NCCL_UNIQUE_ID_BYTES + 1];
	int rank, nranks;
	shared_hdr *hdr;
	char *slots;
	size_t map_bytes;
	bool unlinked;
	bool finalized;
	std::deque<pending_op> *queue;
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

std::mutex s_lock; /* the live communicators and their queues */
std::vector<ncclComm_t> s_live;

void s_nap()
{
	struct timespec ts = {0, 50000}; /* 50 us */
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

/* Arrive at the barrier; returns the generation to wait past. */
int s_arrive(ncclComm_t c)
{
	shared_hdr *h = c->hdr;
	int gen = __atomic_load_n(&h->generation, __ATOMIC_SEQ_CST);
	if (__atomic_add_fetch(&h->arrived, 1, __ATOMIC_SEQ_CST) == c->nranks) {
		__atomic_store_n(&h->arrived, 0, __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&h->generation, 1, __ATOMIC_SEQ_CST);
	}
	return gen;
}

bool s_passed(ncclComm_t c, int gen)
{
	return __atomic_load_n(&c->hdr->generation, __ATOMIC_SEQ_CST) != gen;
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

/* Write op's output from the slots (every rank has deposited). */
void s_compute(ncclComm_t c, const pending_op &op)
{
	size_t bytes = op.count * op.unit;
	switch (op.kind) {
	case OP_ALLREDUCE:
		s_sum_slots(c, (float *)op.recv, 0, op.count);
		break;
	case OP_REDUCE:
		if (c->rank == op.root)
			s_sum_slots(c, (float *)op.recv, 0, op.count);
		break;
	case OP_REDUCE_SCATTER:
		s_sum_slots(c, (float *)op.recv, (size_t)c->rank * op.count, op.count);
		break;
	case OP_ALLGATHER:
		for (int k = 0; k < c->nranks; k++)
			memcpy((char *)op.recv + (size_t)k * bytes, s_slot(c, k), bytes);
		break;
	case OP_BROADCAST:
		if (c->rank != op.root || op.recv != op.send)
			memcpy(op.recv, s_slot(c, op.root), bytes);
		break;
	}
}

/* Advance c's queue as far as it goes without waiting (s_lock held). */
void s_progress(ncclComm_t c)
{
	while (!c->queue->empty()) {
		pending_op &op = c->queue->front();
		if (op.phase == 0) {
			size_t in_bytes = op.count * op.unit *
					  (op.kind == OP_REDUCE_SCATTER ? (size_t)c->nranks : 1);
			if (op.kind != OP_BROADCAST || c->rank == op.root)
				memcpy(s_slot(c, op.kind == OP_BROADCAST ? op.root : c->rank), op.send, in_bytes);
			op.gen = s_arrive(c);
			op.phase = 1;
		}
		if (op.phase == 1) {
			if (!s_passed(c, op.gen))
				return;
			s_compute(c, op);
			op.gen = s_arrive(c);
			op.phase = 2;
		}
		if (!s_passed(c, op.gen))
			return;
		c->queue->pop_front();
	}
}

ncclResult_t s_enqueue(ncclComm_t c, const pending_op &op)
{
	std::lock_guard<std::mutex> g(s_lock);
	c->queue->push_back(op);
	s_progress(c);
	return ncclSuccess;
}

} /* namespace */

extern "C" {

/* cudaemu_rt.cc's hook: advance every communicator; whether an operation
 * queued on `stream` (any stream when NULL) is still pending. */
bool cudaemu_nccl_busy(cudaStream_t stream)
{
	std::lock_guard<std::mutex> g(s_lock);
	bool busy = false;
	for (ncclComm_t c : s_live) {
		s_progress(c);
		for (const pending_op &op : *c->queue)
			busy = busy || !stream || op.stream == stream;
	}
	return busy;
}

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
	c->queue = new std::deque<pending_op>();
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
		delete c->queue;
		free(c);
		return ncclSystemError;
	}
	void *p = mmap(NULL, c->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		snprintf(s_last, sizeof s_last, "cudaemu: mmap %s: %s", c->name, strerror(errno));
		delete c->queue;
		free(c);
		return ncclSystemError;
	}
	c->hdr = (shared_hdr *)p;
	c->slots = (char *)p + 4096;
	__atomic_add_fetch(&c->hdr->joined, 1, __ATOMIC_SEQ_CST);
	{
		std::lock_guard<std::mutex> g(s_lock);
		s_live.push_back(c);
	}
	*comm = c;
	if (config && config->blocking == 0) {
		s_unlink_when_complete(c);
		return c->unlinked ? ncclSuccess : ncclInProgress;
	}
	int64_t deadline = s_now_ms() + 30000;
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
	{
		std::lock_guard<std::mutex> g(s_lock);
		s_progress(comm);
	}
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
	{
		std::lock_guard<std::mutex> g(s_lock);
		for (size_t i = 0; i < s_live.size(); i++)
			if (s_live[i] == comm) {
				s_live.erase(s_live.begin() + (long)i);
				break;
			}
	}
	munmap(comm->hdr, comm->map_bytes);
	delete comm->queue;
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
	const char *what = "ncclAllReduce";
	ncclResult_t r = s_check(comm, what, count * sizeof(float));
	if (r == ncclSuccess)
		r = s_sum_type(t, op, what);
	if (r != ncclSuccess)
		return r;
	return s_enqueue(comm, {OP_ALLREDUCE, send, recv, count, sizeof(float), 0, stream, 0, 0});
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
			int root, ncclComm_t comm, cudaStream_t stream)
{
	const char *what = "ncclReduce";
	ncclResult_t r = s_check(comm, what, count * sizeof(float));
	if (r == ncclSuccess)
		r = s_sum_type(t, op, what);
	if (r == ncclSuccess && (root < 0 || root >= comm->nranks))
		r = s_usage("%s: root out of range", what);
	if (r != ncclSuccess)
		return r;
	return s_enqueue(comm, {OP_REDUCE, send, recv, count, sizeof(float), root, stream, 0, 0});
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t t,
			       ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	const char *what = "ncclReduceScatter";
	ncclResult_t r = s_check(comm, what, recvcount * (size_t)(comm ? comm->nranks : 1) * sizeof(float));
	if (r == ncclSuccess)
		r = s_sum_type(t, op, what);
	if (r != ncclSuccess)
		return r;
	return s_enqueue(comm, {OP_REDUCE_SCATTER, send, recv, recvcount, sizeof(float), 0, stream, 0, 0});
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t t,
			   ncclComm_t comm, cudaStream_t stream)
{
	const char *what = "ncclAllGather";
	size_t unit = t == ncclUint8 || t == ncclInt8 ? 1 : t == ncclFloat32 ? 4 : 0;
	if (!unit)
		return s_usage("%s: cudaemu emulates bytes and floats only", what);
	ncclResult_t r = s_check(comm, what, sendcount * unit);
	if (r != ncclSuccess)
		return r;
	return s_enqueue(comm, {OP_ALLGATHER, send, recv, sendcount, unit, 0, stream, 0, 0});
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
			   ncclComm_t comm, cudaStream_t stream)
{
	const char *what = "ncclBroadcast";
	size_t unit = t == ncclUint8 || t == ncclInt8 ? 1 : t == ncclFloat32 ? 4 : 0;
	if (!unit)
		return s_usage("%s: cudaemu emulates bytes and floats only", what);
	ncclResult_t r = s_check(comm, what, count * unit);
	if (r == ncclSuccess && (root < 0 || root >= comm->nranks))
		r = s_usage("%s: root out of range", what);
	if (r != ncclSuccess)
		return r;
	return s_enqueue(comm, {OP_BROADCAST, send, recv, count, unit, root, stream, 0, 0});
}

} /* extern "C" */
