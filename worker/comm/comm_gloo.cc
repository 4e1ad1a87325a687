/*
 * comm_gloo: the CPU backend of comm.h, a small C++ shim over Debian's
 * libgloo with its TCP transport.
 *
 * comm_gloo_new opens a TCP device on `host`, wraps the caller's comm_kv_t in
 * a gloo::rendezvous::Store (keys "gloo/<rank>", binary values) and connects
 * a full mesh with gloo::rendezvous::Context::connectFullMesh. The
 * collectives then run on that context:
 *
 *   all-reduce      gloo::allreduce, ring algorithm, pipelined in 4 MiB
 *                   segments
 *   reduce-scatter  a ring written here on Gloo's unbound buffers: W-1 steps,
 *                   chunk c is summed along the ring starting at rank c+1 and
 *                   ends, complete, at rank c; counts may differ per rank
 *   all-gather      a ring written here the same way (no arithmetic)
 *   broadcast       gloo::broadcast
 *   barrier         gloo::barrier
 *
 * Every sum is done in an order fixed by the world size and the element
 * count alone (never by arrival order), so results repeat bit for bit, and
 * every rank receives the same bits. Each collective gets the next tag of a
 * per-comm counter, which all ranks advance in step because they call the
 * collectives in the same order.
 *
 * comm_gloo_new ends with a barrier, so that no rank returns (and perhaps
 * exits at once) while a peer is still connecting to it.
 *
 * No C++ exception leaves this file: each entry point catches everything
 * and turns it into a negative errno with one line in comm_last_error().
 * A failed collective leaves Gloo's pairs in an unknown state (a late
 * message may still arrive for a slot), so the first failure is sticky: every
 * later collective fails at once with the same code.
 */
#include "comm_impl.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

namespace {

/* Slot prefixes of the rings written here; Gloo's own algorithms use small
 * prefixes, and tags are unique per collective anyway. */
constexpr uint8_t kReduceScatterPrefix = 0x71;
constexpr uint8_t kAllgatherPrefix = 0x72;

/* Gloo's ring all-reduce sends in segments of at most this size, two in
 * flight. Measured here (2 cores, shared, so noisy) on 120 MB of gradients
 * between 2 ranks on loopback: 90-110 ms with Gloo's default 1 MiB, 80-90
 * ms with 4 MiB, 70-100 ms with 16 MiB, over 400 ms with 64 MiB. Fixed, so
 * the reduction order (which depends on the segmenting) stays a function of
 * the world size and count. */
constexpr size_t kAllreduceSegmentBytes = 4u << 20;

/* Thrown by the store when a key does not appear in time. */
struct TimeoutError : public std::runtime_error {
	explicit TimeoutError(const std::string &msg) : std::runtime_error(msg) {}
};

/* Thrown by the store when the KV itself fails. */
struct KvError : public std::runtime_error {
	explicit KvError(const std::string &msg) : std::runtime_error(msg) {}
};

/* gloo::rendezvous::Store over a comm_kv_t. wait() fetches the values and
 * keeps them, so the get() that Gloo does next costs nothing. */
class KvStore : public gloo::rendezvous::Store {
public:
	KvStore(const comm_kv_t *kv, std::chrono::milliseconds timeout) : kv_(kv), timeout_(timeout) {}

	void set(const std::string &key, const std::vector<char> &data) override
	{
		std::string k = prefixed(key);
		int rc = kv_->set(kv_->ctx, k.c_str(), data.data(), data.size());
		if (rc < 0)
			throw KvError("rendezvous: storing key '" + k + "' failed: " + std::strerror(-rc));
	}

	std::vector<char> get(const std::string &key) override
	{
		auto it = cache_.find(key);
		if (it != cache_.end())
			return it->second;
		fetch(key, timeout_);
		return cache_[key];
	}

	void wait(const std::vector<std::string> &keys) override
	{
		wait(keys, timeout_);
	}

	void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout) override
	{
		auto deadline = std::chrono::steady_clock::now() + timeout;
		for (const auto &key : keys) {
			if (cache_.count(key))
				continue;
			auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
				deadline - std::chrono::steady_clock::now());
			fetch(key, std::max(left, std::chrono::milliseconds(0)));
		}
	}

private:
	static std::string prefixed(const std::string &key)
	{
		return "gloo/" + key;
	}

	void fetch(const std::string &key, std::chrono::milliseconds timeout)
	{
		std::string k = prefixed(key);
		void *value = nullptr;
		size_t n = 0;
		int ms = (int)std::min<long long>(timeout.count(), 0x7fffffff);
		int rc = kv_->get(kv_->ctx, k.c_str(), ms, &value, &n);
		if (rc == -ETIMEDOUT)
			throw TimeoutError("rendezvous: key '" + k + "' did not appear within " +
					   std::to_string(timeout_.count()) + " ms (has rank " + key +
					   " started?)");
		if (rc < 0)
			throw KvError("rendezvous: reading key '" + k + "' failed: " + std::strerror(-rc));
		const char *p = static_cast<const char *>(value);
		cache_[key] = std::vector<char>(p, p + n);
		std::free(value);
	}

	const comm_kv_t *kv_;
	std::chrono::milliseconds timeout_;
	std::map<std::string, std::vector<char>> cache_;
};

/* One line: Gloo's "[file:line] " prefix dropped, newlines flattened. */
std::string one_line(const char *what)
{
	std::string s = what ? what : "unknown error";
	while (!s.empty() && s[0] == '[') {
		size_t end = s.find("] ");
		if (end == std::string::npos)
			break;
		s.erase(0, end + 2);
	}
	std::replace(s.begin(), s.end(), '\n', ' ');
	return s;
}

bool says_timeout(const std::string &s)
{
	return s.find("imed out") != std::string::npos || s.find("imeout") != std::string::npos;
}

void sum_f32(void *c, const void *a, const void *b, size_t n)
{
	float *out = static_cast<float *>(c);
	const float *x = static_cast<const float *>(a);
	const float *y = static_cast<const float *>(b);
	for (size_t i = 0; i < n; i++)
		out[i] = x[i] + y[i];
}

/* The backend's state (comm_impl.h's `impl`). */
struct GlooComm {
	int rank = 0;
	int size = 1;
	std::chrono::milliseconds timeout{30000};
	std::shared_ptr<gloo::rendezvous::Context> ctx;
	uint32_t tag = 0;
	int failed = 0; /* the first failure's code, sticky */
	std::atomic<bool> aborted{false};
	std::string err;
	std::vector<float> scratch; /* reduce-scatter: two chunks */
	std::string host;           /* where this rank listens (comm_split's groups too) */
};

/* Record a failure of `op` ("op: why", why made one line) and return its
 * code. Never throws: out of memory leaves the message empty. */
int fail(GlooComm *c, const char *op, int code, const char *why) noexcept
{
	c->failed = code;
	try {
		c->err = std::string(op) + ": " + one_line(why);
	} catch (...) {
		c->err.clear();
	}
	return code;
}

/* A failure from an exception's text: -ETIMEDOUT when Gloo says it timed
 * out, `code` otherwise. */
int fail_from(GlooComm *c, const char *op, int code, const char *what) noexcept
{
	if (c->aborted.load())
		return fail(c, op, -ECANCELED, "the communicator was aborted");
	bool timeout = false;
	try {
		timeout = says_timeout(what ? what : "");
	} catch (...) {
	}
	return fail(c, op, timeout ? -ETIMEDOUT : code, what);
}

/* Run one collective: the sticky-failure and abort checks, then `body`,
 * with every exception turned into a code and a line. */
template <typename F> int run(GlooComm *c, const char *op, F body)
{
	if (c->aborted.load())
		return fail(c, op, -ECANCELED, "the communicator was aborted");
	if (c->failed) {
		int code = c->failed;
		try {
			std::string first = c->err;
			fail(c, op, code, ("the communicator failed earlier (" + first + ")").c_str());
		} catch (...) {
		}
		return code;
	}
	try {
		body();
		return 0;
	} catch (const std::bad_alloc &) {
		return fail(c, op, -ENOMEM, "out of memory");
	} catch (const gloo::IoException &e) {
		return fail_from(c, op, -ECONNRESET, e.what());
	} catch (const std::exception &e) {
		return fail_from(c, op, -EIO, e.what());
	} catch (...) {
		return fail(c, op, -EIO, "unknown C++ exception");
	}
}

void wait_recv(gloo::transport::UnboundBuffer &b, std::chrono::milliseconds timeout)
{
	if (!b.waitRecv(timeout))
		throw gloo::IoException("receive aborted");
}

void wait_send(gloo::transport::UnboundBuffer &b, std::chrono::milliseconds timeout)
{
	if (!b.waitSend(timeout))
		throw gloo::IoException("send aborted");
}

void gloo_set_timeout(void *impl, int timeout_ms)
{
	GlooComm *c = static_cast<GlooComm *>(impl);
	if (timeout_ms > 0)
		c->timeout = std::chrono::milliseconds(timeout_ms);
}

int gloo_allreduce_sum_f32(void *impl, float *buf, size_t n)
{
	GlooComm *c = static_cast<GlooComm *>(impl);
	return run(c, "all-reduce", [&] {
		uint32_t tag = c->tag++;
		if (c->size == 1 || n == 0)
			return;
		gloo::AllreduceOptions opts(c->ctx);
		opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
		opts.setOutput(buf, n);
		opts.setReduceFunction(sum_f32);
		opts.setMaxSegmentSize(kAllreduceSegmentBytes);
		opts.setTag(tag);
		opts.setTimeout(c->timeout);
		gloo::allreduce(opts);
	});
}

int gloo_reduce_scatter_sum_f32(void *impl, const float *in, float *out, const size_t *counts)
{
	GlooComm *c = static_cast<GlooComm *>(impl);
	return run(c, "reduce-scatter", [&] {
		uint32_t tag = c->tag++;
		const int W = c->size, r = c->rank;
		std::vector<size_t> offset(W + 1, 0);
		size_t max_count = 0;
		for (int i = 0; i < W; i++) {
			offset[i + 1] = offset[i] + counts[i];
			max_count = std::max(max_count, counts[i]);
		}
		if (W == 1) {
			if (counts[0])
				std::memcpy(out, in, counts[0] * sizeof(float));
			return;
		}
		if (c->scratch.size() < 2 * max_count)
			c->scratch.assign(2 * max_count, 0.0f);
		float *acc = c->scratch.data();          /* the partial sum this rank sends on */
		float *recv = c->scratch.data() + max_count; /* the partial sum from the left */
		const int right = (r + 1) % W, left = (r + W - 1) % W;
		const uint64_t slot = gloo::Slot::build(kReduceScatterPrefix, tag);
		/* Step s: send chunk (r-s-1) mod W, receive chunk (r-s-2) mod W
		 * and add this rank's part of it. After W-1 steps the chunk
		 * received is r, complete. */
		for (int s = 0; s < W - 1; s++) {
			int cs = ((r - s - 1) % W + W) % W;
			int cr = ((r - s - 2) % W + W) % W;
			/* At step 0 this rank's own data goes out as it is. */
			float *src = s == 0 ? const_cast<float *>(in) + offset[cs] : acc;
			std::unique_ptr<gloo::transport::UnboundBuffer> sb, rb;
			if (counts[cs]) {
				sb = c->ctx->createUnboundBuffer(src, counts[cs] * sizeof(float));
				sb->send(right, slot);
			}
			if (counts[cr]) {
				rb = c->ctx->createUnboundBuffer(recv, counts[cr] * sizeof(float));
				rb->recv(left, slot);
				wait_recv(*rb, c->timeout);
			}
			if (sb)
				wait_send(*sb, c->timeout);
			float *dst = s == W - 2 ? out : acc;
			sum_f32(dst, recv, in + offset[cr], counts[cr]);
		}
	});
}

int gloo_allgather_f32(void *impl, const float *in, float *out, const size_t *counts)
{
	GlooComm *c = static_cast<GlooComm *>(impl);
	return run(c, "all-gather", [&] {
		uint32_t tag = c->tag++;
		const int W = c->size, r = c->rank;
		std::vector<size_t> offset(W + 1, 0);
		for (int i = 0; i < W; i++)
			offset[i + 1] = offset[i] + counts[i];
		if (counts[r])
			std::memmove(out + offset[r], in, counts[r] * sizeof(float));
		const int right = (r + 1) % W, left = (r + W - 1) % W;
		const uint64_t slot = gloo::Slot::build(kAllgatherPrefix, tag);
		/* Step s: pass block (r-s) mod W on, take block (r-s-1) mod W. */
		for (int s = 0; s < W - 1; s++) {
			int bs = ((r - s) % W + W) % W;
			int br = ((r - s - 1) % W + W) % W;
			std::unique_ptr<gloo::transport::UnboundBuffer> sb, rb;
			if (counts[bs]) {
				sb = c->ctx->createUnboundBuffer(out + offset[bs], counts[bs] * sizeof(float));
				sb->send(right, slot);
			}
			if (counts[br]) {
				rb = c->ctx->createUnboundBuffer(out + offset[br], counts[br] * sizeof(float));
				rb->recv(left, slot);
				wait_recv(*rb, c->timeout);
			}
			if (sb)
				wait_send(*sb, c->timeout);
		}
	});
}

int gloo_broadcast(void *impl, void *buf, size_t bytes, int root)
{
	GlooComm *c = static_cast<GlooComm *>(impl);
	if (root < 0 || root >= c->size) {
		char why[128];
		std::snprintf(why, sizeof why, "broadcast: root %d is not a rank of world size %d", root,
			      c->size);
		try {
			c->err = why;
		} catch (...) {
		}
		return -EINVAL;
	}
	return run(c, "broadcast", [&] {
		uint32_t tag = c->tag++;
		if (c->size == 1 || bytes == 0)
			return;
		gloo::BroadcastOptions opts(c->ctx);
		opts.setOutput(static_cast<uint8_t *>(buf), bytes);
		opts.setRoot(root);
		opts.setTag(tag);
		opts.setTimeout(c->timeout);
		gloo::broadcast(opts);
	});
}

int gloo_barrier(void *impl)
{
	GlooComm *c = static_cast<GlooComm *>(impl);
	return run(c, "barrier", [&] {
		uint32_t tag = c->tag++;
		if (c->size == 1)
			return;
		gloo::BarrierOptions opts(c->ctx);
		opts.setTag(tag);
		opts.setTimeout(c->timeout);
		gloo::barrier(opts);
	});
}

void gloo_abort(void *impl)
{
	GlooComm *c = static_cast<GlooComm *>(impl);
	if (c->aborted.exchange(true))
		return;
	/* Closing our ends makes peers blocked in a collective with us fail at
	 * once instead of waiting out their timeout. */
	try {
		if (c->ctx)
			c->ctx->closeConnections();
	} catch (...) {
	}
}

const char *gloo_last_error(const void *impl)
{
	return static_cast<const GlooComm *>(impl)->err.c_str();
}

void gloo_free(void *impl)
{
	GlooComm *c = static_cast<GlooComm *>(impl);
	if (!c)
		return;
	try {
		delete c;
	} catch (...) {
	}
}

int gloo_allgather_bytes(void *impl, const void *in, void *out, size_t bytes)
{
	GlooComm *c = static_cast<GlooComm *>(impl);
	return run(c, "all-gather", [&] {
		uint32_t tag = c->tag++;
		std::memcpy(static_cast<uint8_t *>(out) + (size_t)c->rank * bytes, in, bytes);
		if (c->size == 1 || bytes == 0)
			return;
		gloo::AllgatherOptions opts(c->ctx);
		opts.setInput(static_cast<uint8_t *>(const_cast<void *>(in)), bytes);
		opts.setOutput(static_cast<uint8_t *>(out), bytes * (size_t)c->size);
		opts.setTag(tag);
		opts.setTimeout(c->timeout);
		gloo::allgather(opts);
	});
}

comm_t *gloo_sub_new(void *impl, const comm_kv_t *kv, int rank, int size, char *err, size_t errlen)
{
	GlooComm *c = static_cast<GlooComm *>(impl);
	return comm_gloo_new(kv, rank, size, c->host.c_str(), (int)c->timeout.count(), err, errlen);
}

const comm_ops_t kGlooOps = {
	gloo_allreduce_sum_f32,
	gloo_reduce_scatter_sum_f32,
	gloo_allgather_f32,
	gloo_broadcast,
	gloo_barrier,
	gloo_set_timeout,
	gloo_abort,
	gloo_last_error,
	nullptr, /* no stream */
	gloo_free,
	nullptr, /* no async all-reduce: comm.c runs the synchronous one */
	nullptr, /* nor reduce-scatter */
	nullptr, /* nothing to wait for */
	nullptr, /* no cancel: a peer's closed connection fails the collective */
	gloo_allgather_bytes,
	gloo_sub_new,
};

} // namespace

extern "C" {

comm_t *comm_gloo_new(const comm_kv_t *kv, int rank, int world_size, const char *host,
                      int timeout_ms, char *err, size_t errlen)
{
	if (errlen)
		err[0] = '\0';
	if (!kv || !kv->set || !kv->get || world_size < 1 || rank < 0 || rank >= world_size ||
	    !host || !host[0] || timeout_ms <= 0) {
		std::snprintf(err, errlen,
			      "comm: bad arguments (rank %d of world size %d, host '%s', timeout %d ms)", rank,
			      world_size, host ? host : "(null)", timeout_ms);
		return nullptr;
	}
	/* A peer that dies makes our next write fail with EPIPE; that must be an
	 * error code, not a signal that kills the rank. */
	struct sigaction sa;
	if (sigaction(SIGPIPE, nullptr, &sa) == 0 && sa.sa_handler == SIG_DFL)
		std::signal(SIGPIPE, SIG_IGN);

	GlooComm *c = nullptr;
	try {
		c = new GlooComm();
		c->rank = rank;
		c->size = world_size;
		c->timeout = std::chrono::milliseconds(timeout_ms);
		c->host = host;
		gloo::transport::tcp::attr attr;
		attr.hostname = host;
		auto dev = gloo::transport::tcp::CreateDevice(attr);
		auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
		ctx->setTimeout(c->timeout);
		KvStore store(kv, c->timeout);
		ctx->connectFullMesh(store, dev);
		c->ctx = std::move(ctx);
		/* connectFullMesh can return on one rank while a peer is still
		 * finishing its side; a rank that then exits at once would make
		 * that peer's join fail. Meeting once here means that when any
		 * rank returns, every rank has connected. */
		if (world_size > 1) {
			gloo::BarrierOptions opts(c->ctx);
			opts.setTag(c->tag++);
			opts.setTimeout(c->timeout);
			gloo::barrier(opts);
		}
		comm_t *wrapped = comm_make(&kGlooOps, c, rank, world_size);
		if (!wrapped)
			throw std::bad_alloc();
		return wrapped;
	} catch (const std::bad_alloc &) {
		std::snprintf(err, errlen, "comm: out of memory while connecting %d ranks", world_size);
	} catch (const std::exception &e) {
		std::snprintf(err, errlen, "comm: rank %d of %d on %s could not connect to its peers: %s", rank,
			      world_size, host, one_line(e.what()).c_str());
	} catch (...) {
		std::snprintf(err, errlen, "comm: unknown C++ exception while connecting");
	}
	delete c;
	return nullptr;
}

} // extern "C"
