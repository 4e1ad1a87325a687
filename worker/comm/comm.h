/*
 * comm: collectives between the ranks of one job attempt, behind one C
 * interface with two backends: Gloo on CPUs (worker/comm/comm_gloo.cc, a
 * small C++ shim over Debian's libgloo with its TCP transport) and NCCL on
 * CUDA GPUs (worker/comm/comm_nccl.c, built when meson finds CUDA; see
 * docs/gpu-comm.md). A comm_t is a small object with its backend's table of
 * operations (comm_impl.h); comm.c dispatches the functions below, so
 * callers (train.c, shard.c, rank.c, the tests and benchmarks) do not care
 * which backend they hold.
 *
 * Rendezvous goes through a key-value store given as a comm_kv_t: in a rank
 * process it is the coordinator's KV (KV_SET / KV_GET over the wire), in
 * tests and benchmarks a directory (comm_kv_dir.h). Gloo's rendezvous::Store
 * is implemented over it; NCCL's unique id travels through it.
 *
 * Every collective is blocking and must be called by all ranks in the same
 * order. Reductions are sums in an order fixed by the world size and the
 * counts alone, so a run repeated with the same world size gives bitwise
 * identical results, and every rank receives the same bits (with NCCL: on
 * the same machines, since NCCL picks its algorithm from the topology and
 * the size; pinning NCCL_ALGO and NCCL_PROTO makes that choice explicit).
 * Errors: a negative errno-style code (-ETIMEDOUT when a peer does not answer
 * within the timeout, -ECONNRESET when a peer went away, -ECANCELED after
 * comm_abort, -EINVAL for a bad argument), with one line retrievable by
 * comm_last_error(). Apart from -EINVAL, the first failure is final: a failed
 * collective may leave messages in flight, so every later collective on the
 * same comm fails at once with the same code; free it and build a new one
 * (the next attempt) to go on.
 *
 * Buffers: with Gloo, the float and void buffers are host memory. With
 * NCCL they are device memory of the comm's GPU (cudaMalloc'ed; host
 * pointers are a programmer error that NCCL reports as -EINVAL or a CUDA
 * fault), and the `counts` arrays stay in host memory. Every NCCL
 * collective is enqueued on the comm's own CUDA stream (comm_nccl_stream)
 * and the call then waits for that stream, polling, for at most the
 * timeout, so it is synchronous with respect to the host exactly like
 * Gloo's: when it returns 0 the results are in place and the buffers may be
 * reused. Work the caller enqueued on other streams is not ordered against
 * it: synchronize it (or make the comm's stream wait on an event) before
 * the call.
 */
#ifndef RINGMASTER_WORKER_COMM_H
#define RINGMASTER_WORKER_COMM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The rendezvous store. Keys and values are opaque bytes to comm; values
 * may contain NUL bytes. */
typedef struct {
	void *ctx;
	/* Store `value` (n bytes) under `key`, replacing any earlier value.
	 * 0 or a negative errno. */
	int (*set)(void *ctx, const char *key, const void *value, size_t n);
	/* Wait up to timeout_ms for `key` to exist, then return a malloc'ed copy
	 * of its value (caller frees) in *ret_value / *ret_n. 0, -ETIMEDOUT, or
	 * another negative errno. */
	int (*get)(void *ctx, const char *key, int timeout_ms, void **ret_value, size_t *ret_n);
} comm_kv_t;

typedef struct comm comm_t;

/*
 * Join the group of `world_size` ranks as `rank` and connect every pair
 * (full mesh). `host` is the address this rank listens on for its peers (an
 * IP literal or a name other ranks can reach, e.g. "127.0.0.1"); `kv` is
 * borrowed and used only during this call (keys "gloo/<rank>", binary
 * values; it must be fresh for each group, e.g. per job attempt, or a rank
 * would read the addresses of an earlier group). Waits up to `timeout_ms` for the peers; the same timeout then
 * bounds every collective until comm_set_timeout changes it. Ends with a
 * barrier, so when it returns on any rank every rank has connected.
 * Returns NULL with one line in `err` on failure (a peer that never joined
 * is named). Sets SIGPIPE to SIG_IGN if it was SIG_DFL, so that writing to
 * a dead peer is an error code rather than the end of the process.
 */
comm_t *comm_gloo_new(const comm_kv_t *kv, int rank, int world_size, const char *host,
                      int timeout_ms, char *err, size_t errlen);

/* comm_nccl_available and comm_nccl_new exist only in builds with CUDA:
 * meson adds -DRINGMASTER_HAVE_NCCL to comm's dependency then, so nothing
 * in a CPU-only build can call them. */
#ifdef RINGMASTER_HAVE_NCCL
/*
 * Whether this process can use a CUDA GPU for the NCCL backend: 0 when the
 * CUDA driver answers and at least one device is visible, else a negative
 * errno (-ENODEV) with one line in `err` naming the CUDA error (e.g. "CUDA
 * driver not usable: CUDA driver version is insufficient for CUDA runtime
 * version"). Tests use it to skip where there is no GPU.
 */
int comm_nccl_available(char *err, size_t errlen);

/*
 * Join the NCCL group of `world_size` ranks as `rank` on CUDA device
 * `device` (an index as this process sees devices: with the agent's
 * CUDA_VISIBLE_DEVICES, 0). Rank 0 makes NCCL's unique id and stores it in
 * `kv` under "nccl/id" (128 binary bytes); the others wait for it there up
 * to `timeout_ms`. `kv` is borrowed and used only during this call, and
 * must be fresh for each group, as for Gloo. The communicator is
 * non-blocking, so its set-up and every later collective are bounded by
 * the timeout (comm_set_timeout changes it): a rank that never joins, or a
 * collective a peer never calls, ends in ncclCommAbort and -ETIMEDOUT.
 * Creates the comm's CUDA stream (non-blocking, with respect to the legacy
 * default stream) on `device`. Returns NULL with one line in `err` on
 * failure (the NCCL or CUDA error string included).
 */
comm_t *comm_nccl_new(const comm_kv_t *kv, int rank, int world_size, int device, int timeout_ms,
                      char *err, size_t errlen);
#endif

/* The NCCL comm's CUDA stream (a cudaStream_t) as void *, so that an
 * engine can order its kernels against the collectives; NULL for Gloo.
 * Borrowed: valid until comm_free. */
void *comm_nccl_stream(const comm_t *c);

int comm_rank(const comm_t *c);
int comm_world_size(const comm_t *c);

/* How long a collective may wait for its peers (timeout_ms > 0; others are
 * ignored). A collective waits for the slowest rank to arrive, so this must
 * exceed the spread of step times between ranks. */
void comm_set_timeout(comm_t *c, int timeout_ms);

/* In place: buf (n floats) becomes the element-wise sum over ranks. */
int comm_allreduce_sum_f32(comm_t *c, float *buf, size_t n);

/*
 * The all-reduce above, started and not waited for, so that the caller can
 * go on computing (the GPU trainer reduces each layer's gradients while
 * backward goes on to the next). NCCL: the collective is enqueued on the
 * comm's stream behind `after_event` (a cudaEvent_t recorded on the
 * caller's stream once buf is written; NULL: no wait) and the call returns;
 * buf must not be touched until comm_wait returned 0. Gloo (no stream): it
 * runs the synchronous all-reduce and ignores the event. Started
 * collectives are in the same order on every rank, like all the others.
 * 0 or the error, as the synchronous call.
 */
int comm_allreduce_sum_f32_async(comm_t *c, float *buf, size_t n, void *after_event);

/* Wait for every collective started with an _async call, bounded by the
 * comm's timeout; 0 when their results are in place, else the error (the
 * comm then failed, as after a failed synchronous call). */
int comm_wait(comm_t *c);

/* `in` (n floats, the same n on every rank) is summed over ranks; this rank
 * receives its part: elements [offset, offset + counts[rank]) where offset is
 * the sum of counts[0..rank), into `out` (counts[rank] floats, not inside
 * `in`). The counts (world_size of them) sum to n and are the same on every
 * rank; some may be 0. */
int comm_reduce_scatter_sum_f32(comm_t *c, const float *in, float *out, const size_t *counts);

/*
 * Elements [lo, lo + n) of the reduce-scatter above, started and not waited
 * for, as comm_allreduce_sum_f32_async (the GPU trainer's ZeRO-1 reduces
 * each layer's gradients while backward goes on to the next). `in`, `out`
 * and `counts` are the whole reduce-scatter's; only the range is summed,
 * and the part of it inside this rank's part lands at its place in `out`
 * (the rest of `out` is untouched). Ranges that tile [0, sum of counts)
 * give the whole reduce-scatter's result. NCCL: enqueued on the comm's
 * stream behind `after_event`; neither buffer may be touched until
 * comm_wait returned 0. Gloo: synchronous. 0 or the error, as the
 * synchronous call (-ENOMEM, with comm_last_error unchanged, when the
 * range's counts cannot be allocated past 256 ranks). A range that runs
 * past the sum of the counts is a programming error: one line on stderr
 * and exit 70 (EX_SOFTWARE).
 */
int comm_reduce_scatter_range_sum_f32_async(comm_t *c, const float *in, float *out,
                                            const size_t *counts, size_t lo, size_t n,
                                            void *after_event);

/* Each rank gives its part `in` (counts[rank] floats); `out` (sum of counts)
 * receives every rank's part in rank order. `in` is either outside `out` or
 * exactly at its own place in it (out + the sum of counts[0..rank)), the
 * in-place case; any other overlap is undefined. */
int comm_allgather_f32(comm_t *c, const float *in, float *out, const size_t *counts);

/* `bytes` bytes of buf from `root` to every rank. */
int comm_broadcast(comm_t *c, void *buf, size_t bytes, int root);

int comm_barrier(comm_t *c);

/* Make every later collective on this comm fail with -ECANCELED, and close
 * the connections so that peers blocked in a collective with this rank fail
 * at once (-ECONNRESET) instead of waiting out their timeout. Call it from
 * the thread that runs the collectives (not thread- or signal-safe). */
void comm_abort(comm_t *c);

/* From any thread, while another may be inside a collective on c: make
 * that collective, and every later one, fail with -ECANCELED within
 * milliseconds (NCCL: the communicator is aborted by the collective's own
 * thread). A rank asked to rejoin the next attempt calls it, so that it
 * does not wait out the timeout for a peer that is gone. Gloo: a no-op (its
 * collectives fail at once when a peer's connection closes). */
void comm_cancel(comm_t *c);

/*
 * A sub-group of c, as MPI_Comm_split: every rank of c calls it (in the
 * same order relative to c's collectives) with a `colour` and a `key`; the
 * ranks that gave the same colour form one new comm, ranked by key (ties
 * by their rank in c). A negative colour (COMM_NO_GROUP) joins no group:
 * the call then returns NULL with err "" (the other ranks still need the
 * call). The colours and keys travel in one collective on c; each group
 * then meets through `kv` (borrowed, used during the call; the keys of
 * the n-th split of c are "split/<n>/<colour>/..." so one attempt's store
 * serves every split) and is built as c was: the same backend, host or
 * CUDA device, and c's current timeout, which bounds its set-up and its
 * collectives like the world's. Tensor parallelism splits the world into
 * tensor-parallel groups (colour: the data-parallel index) and
 * data-parallel groups (colour: the tensor-parallel index).
 * Returns the new comm (free it with comm_free, before or after c), or
 * NULL with one line in err: c's collective failed (c's error), or the
 * group did not form within the timeout (the missing rank named).
 */
#define COMM_NO_GROUP (-1)
comm_t *comm_split(comm_t *c, const comm_kv_t *kv, int colour, int key, char *err, size_t errlen);

/* The last error's one-line description ("" if none); borrowed. */
const char *comm_last_error(const comm_t *c);

/* Close the connections and free; accepts NULL. */
void comm_free(comm_t *c);

#ifdef __cplusplus
}
#endif

#endif
