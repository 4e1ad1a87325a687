/*
 * cudaemu_nccl: the NCCL calls of worker/comm/comm_nccl.c for the host
 * emulator (cudaemu.h), at world size 1 only: a communicator of one rank,
 * whose collectives copy their input to their output (the sum, gather or
 * broadcast over one rank), with device memory being host memory. This lets
 * a cuda job's rank path (the unique id through the KV, the non-blocking
 * init and its polling, every collective and its completion check,
 * finalize, abort) run in CI. A communicator of more than one rank is
 * refused with ncclInvalidUsage and a last-error text saying so: the
 * multi-rank logic is covered by the Gloo tests and, on GPUs, by
 * gpu-nccl-w2.
 *
 * Non-blocking communicators (config->blocking == 0) report ncclInProgress
 * from init and from the first ncclCommGetAsyncError after it, so the
 * caller's polling loop runs at least once, as it does on real NCCL.
 */
#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ncclComm {
	int pending_polls;
	bool aborted;
	bool finalized;
};

namespace {

char s_last[256];
int s_group_depth;

ncclResult_t s_usage(const char *fmt, const char *what)
{
	snprintf(s_last, sizeof s_last, fmt, what);
	return ncclInvalidUsage;
}

size_t s_type_bytes(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8:
	case ncclUint8:
		return 1;
	case ncclFloat16:
	case ncclBfloat16:
		return 2;
	case ncclInt32:
	case ncclUint32:
	case ncclFloat32:
		return 4;
	case ncclInt64:
	case ncclUint64:
	case ncclFloat64:
		return 8;
	default:
		return 0;
	}
}

ncclResult_t s_copy(const char *op, const void *send, void *recv, size_t count, ncclDataType_t t,
		    int root, ncclComm_t comm)
{
	if (!comm)
		return s_usage("%s: NULL communicator", op);
	if (comm->aborted || comm->finalized)
		return s_usage("%s: the communicator was finalized or aborted", op);
	if (root != 0)
		return s_usage("%s: root out of range for a 1-rank communicator", op);
	size_t b = s_type_bytes(t);
	if (!b)
		return s_usage("%s: unknown data type", op);
	if (count && (!send || !recv))
		return s_usage("%s: NULL buffer", op);
	if (send != recv && count)
		memmove(recv, send, count * b);
	return ncclSuccess;
}

} /* namespace */

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	memset(id, 0, sizeof *id);
	snprintf(id->internal, sizeof id->internal, "cudaemu-%d", rand());
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
	(void)id;
	*comm = NULL;
	if (nranks != 1 || rank != 0) {
		snprintf(s_last, sizeof s_last,
			 "cudaemu: NCCL is emulated at world size 1 only (asked for rank %d of %d)", rank,
			 nranks);
		return ncclInvalidUsage;
	}
	ncclComm_t c = (ncclComm_t)calloc(1, sizeof *c);
	if (!c)
		return ncclSystemError;
	bool nonblocking = config && config->blocking == 0;
	c->pending_polls = nonblocking ? 1 : 0;
	*comm = c;
	return nonblocking ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	return ncclCommInitRankConfig(comm, nranks, id, rank, NULL);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error)
{
	if (!comm)
		return s_usage("%s: NULL communicator", "ncclCommGetAsyncError");
	if (comm->pending_polls > 0) {
		comm->pending_polls--;
		*async_error = ncclInProgress;
	} else {
		*async_error = ncclSuccess;
	}
	return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	*count = 1;
	return comm ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	*rank = 0;
	return comm ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	if (!comm)
		return s_usage("%s: NULL communicator", "ncclCommFinalize");
	comm->finalized = true;
	return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	free(comm);
	return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	free(comm);
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
	s_group_depth++;
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
	if (s_group_depth == 0)
		return s_usage("%s: without ncclGroupStart", "ncclGroupEnd");
	s_group_depth--;
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
			   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	(void)op;
	(void)stream;
	return s_copy("ncclAllReduce", send, recv, count, t, 0, comm);
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
			int root, ncclComm_t comm, cudaStream_t stream)
{
	(void)op;
	(void)stream;
	return s_copy("ncclReduce", send, recv, count, t, root, comm);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t t,
			       ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	(void)op;
	(void)stream;
	return s_copy("ncclReduceScatter", send, recv, recvcount, t, 0, comm);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t t,
			   ncclComm_t comm, cudaStream_t stream)
{
	(void)stream;
	return s_copy("ncclAllGather", send, recv, sendcount, t, 0, comm);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
			   ncclComm_t comm, cudaStream_t stream)
{
	(void)stream;
	return s_copy("ncclBroadcast", send, recv, count, t, root, comm);
}

} /* extern "C" */
