/*
 * cudaemu_rt: the host side of cudaemu (see cudaemu.h): the kernel launcher,
 * whose blocks run as fibers, and the CUDA runtime calls that the GPU engine
 * and the GPU tests make, on host memory.
 *
 * Launches: one block at a time; its threads are fibers on stacks allocated
 * once and reused. On x86-64 a fiber switch is eight instructions of our own
 * (s_switch: the callee-saved registers, the stack pointer, MXCSR and the
 * x87 control word), since ucontext's swapcontext makes a system call per
 * switch (the signal mask) and made the model tests ten times slower;
 * elsewhere it is ucontext. Under AddressSanitizer every switch goes
 * through its fiber hooks, so the kernels run with their memory checked. The scheduler resumes every runnable fiber in
 * thread order (or reverse order, CUDAEMU_ORDER=reverse) until each has
 * ended or parked at a barrier, then releases the barriers that every live
 * thread of the block (__syncthreads) or of the warp (shuffles) has reached.
 * A pass that can neither run nor release anything is a deadlock. Launches
 * from several host threads are serialised by one mutex. Warp-wide calls
 * (shuffles, mma, ldmatrix) park once: each lane leaves its operands in one
 * of two slots (alternating call by call), the wait releases the warp when
 * all 32 have, and each lane computes its share from everyone's; a lane
 * can refill that slot only after the next call's wait, which the others
 * reach only once they have read it. cp.async copies queue per thread and
 * land at the wait_group that covers them.
 *
 * Memory: cudaMalloc is an aligned malloc filled with 0xff bytes, recorded
 * in a table, so copies and memsets are checked against the allocation they
 * touch (a device pointer outside every allocation is an error) and
 * cudaFree of an unknown pointer is caught. Errors in the engine's use of
 * the API, which real CUDA reports through a return code, are returned the
 * same way; errors CUDA would not catch but that are bugs anyway (a copy
 * past an allocation's end, a deadlock) print one line and exit 3.
 */
#include "cudaemu.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>

/* AddressSanitizer follows the switches between stacks through its fiber
 * hooks; without them it takes a fiber's stack for a corrupted main stack. */
/* A fiber that ended never returned from s_entry, so whatever redzones
 * s_entry's frame has stay poisoned on its stack: s_entry keeps no
 * addressable locals (its checks are calls), and the top of a stack, where
 * s_start lays out a new fiber's first frame, is unpoisoned (SAN_CLEAN)
 * before it is reused. */
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SAN_START(save, bottom, size) __sanitizer_start_switch_fiber((save), (bottom), (size))
#define SAN_FINISH(save, bottom, size) __sanitizer_finish_switch_fiber((save), (bottom), (size))
#define SAN_CLEAN(base, size) __asan_unpoison_memory_region((base), (size))
#else
#define SAN_START(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define SAN_FINISH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define SAN_CLEAN(base, size) ((void)(base), (void)(size))
#endif

#if defined(__x86_64__)
#define CUDAEMU_ASM_SWITCH 1
/* Save the callee-saved state on this stack, store the stack pointer in
 * *save, continue on the stack `to` (saved the same way, or made by
 * s_new_stack). */
extern "C" void cudaemu_switch(void **save, void *to);
asm(".text\n"
    ".globl cudaemu_switch\n"
    ".type cudaemu_switch,@function\n"
    "cudaemu_switch:\n"
    "\tpushq %rbp\n"
    "\tpushq %rbx\n"
    "\tpushq %r12\n"
    "\tpushq %r13\n"
    "\tpushq %r14\n"
    "\tpushq %r15\n"
    "\tsubq $8, %rsp\n"
    "\tstmxcsr (%rsp)\n"
    "\tfnstcw 4(%rsp)\n"
    "\tmovq %rsp, (%rdi)\n"
    "\tmovq %rsi, %rsp\n"
    "\tldmxcsr (%rsp)\n"
    "\tfldcw 4(%rsp)\n"
    "\taddq $8, %rsp\n"
    "\tpopq %r15\n"
    "\tpopq %r14\n"
    "\tpopq %r13\n"
    "\tpopq %r12\n"
    "\tpopq %rbx\n"
    "\tpopq %rbp\n"
    "\tret\n"
    ".size cudaemu_switch,.-cudaemu_switch\n");
#endif

#include <map>
#include <mutex>
#include <vector>

namespace {

enum fiber_state { RUNNABLE, AT_SYNC, AT_WARP, DONE };

/* one cp.async: bytes from src (zeros when !valid) into dst, at the wait */
struct cudaemu_copy {
	void *dst;
	const void *src;
	size_t bytes;
	bool valid;
};

struct fiber {
	char *stack;
	void *fake_stack; /* AddressSanitizer's, across a switch */
#ifdef CUDAEMU_ASM_SWITCH
	void *sp;
#else
	ucontext_t ctx;
#endif
	cudaemu::coords where;
	fiber_state state;
	int lane;
	int warp;
	/* shuffles, mma and ldmatrix: this lane's operands for the warp's collective
	 * call number `rounds`, in slot rounds % 2. One wait suffices: a lane
	 * writes a slot again two calls later, after a wait that every lane
	 * reaches only once it has read this call's operands. */
	struct wslot {
		uint32_t a[4], b[2];
		const void *row;
		uint64_t xchg;
	} slots[2];
	unsigned rounds;
	/* cp_async: copies not yet done, and where each committed group ends */
	std::vector<cudaemu_copy> copies;
	std::vector<size_t> group_ends;
};

struct sched {
	std::mutex lock;
	std::vector<fiber> fibers;
	char *stacks = nullptr;
	size_t n_stacks = 0;
#ifdef CUDAEMU_ASM_SWITCH
	void *main_sp;
#else
	ucontext_t main_ctx;
#endif
	int current = -1;
	const void *main_bottom = nullptr;
	size_t main_size = 0;
	const std::function<void()> *body = nullptr;
	const char *kernel = "";
	cudaError_t last_error = cudaSuccess;
	std::map<uintptr_t, size_t> allocs;
};

sched &S()
{
	static sched s;
	return s;
}

const size_t STACK_BYTES = 256 * 1024;

[[noreturn]] void s_die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "cudaemu: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(3);
}

/* Resume fiber i from the scheduler; back when it parks or ends. */
void s_resume(int i)
{
	sched &s = S();
	s.current = i;
	cudaemu::current = &s.fibers[i].where;
	void *fake = nullptr;
	SAN_START(&fake, s.fibers[i].stack, STACK_BYTES);
#ifdef CUDAEMU_ASM_SWITCH
	cudaemu_switch(&s.main_sp, s.fibers[i].sp);
#else
	swapcontext(&s.main_ctx, &s.fibers[i].ctx);
#endif
	SAN_FINISH(fake, nullptr, nullptr);
	cudaemu::current = nullptr;
	s.current = -1;
}

/* Back to the scheduler from the running fiber (for good when done). */
void s_yield(bool done)
{
	sched &s = S();
	fiber &f = s.fibers[s.current];
	SAN_START(done ? nullptr : &f.fake_stack, s.main_bottom, s.main_size);
#ifdef CUDAEMU_ASM_SWITCH
	cudaemu_switch(&f.sp, s.main_sp);
#else
	swapcontext(&f.ctx, &s.main_ctx);
#endif
	SAN_FINISH(f.fake_stack, &s.main_bottom, &s.main_size);
}

/* cp.async copies the running thread never waited for are a bug */
__attribute__((noinline)) void s_check_copies_landed()
{
	sched &s = S();
	if (!s.fibers[s.current].copies.empty())
		s_die("%s: a thread ended with %zu cp.async copies it never waited for", s.kernel,
		      s.fibers[s.current].copies.size());
}

void s_entry()
{
	sched &s = S();
	SAN_FINISH(nullptr, &s.main_bottom, &s.main_size);
	(*s.body)();
	s_check_copies_landed();
	s.fibers[s.current].state = DONE;
	s_yield(true);
	abort(); /* a finished fiber is never resumed */
}

/* Park the running fiber in state st and go back to the scheduler. */
void s_park(fiber_state st)
{
	sched &s = S();
	if (s.current < 0)
		s_die("a barrier or shuffle outside a kernel");
	s.fibers[s.current].state = st;
	s_yield(false);
}

/* Make fiber f start at s_entry on its stack [base, base + bytes). */
void s_start(fiber &f, char *base, size_t bytes)
{
	SAN_CLEAN(base + bytes - 4096, 4096);
#ifdef CUDAEMU_ASM_SWITCH
	uintptr_t top = ((uintptr_t)(base + bytes)) & ~(uintptr_t)15;
	void **sp = (void **)top;
	*--sp = nullptr;             /* a return address slot: entry sees rsp = 8 mod 16 */
	*--sp = (void *)s_entry;     /* where cudaemu_switch's ret goes */
	for (int r = 0; r < 6; r++)  /* rbp rbx r12 r13 r14 r15 */
		*--sp = nullptr;
	uint32_t *fp = (uint32_t *)--sp;
	fp[0] = 0x1f80;              /* MXCSR: round to nearest, all exceptions masked */
	fp[1] = 0x037f;              /* x87 control word, its default */
	f.sp = sp;
#else
	getcontext(&f.ctx);
	f.ctx.uc_stack.ss_sp = base;
	f.ctx.uc_stack.ss_size = bytes;
	f.ctx.uc_link = nullptr;
	makecontext(&f.ctx, s_entry, 0);
#endif
}

void s_ensure_stacks(size_t n)
{
	sched &s = S();
	if (n <= s.n_stacks)
		return;
	if (s.stacks)
		munmap(s.stacks, s.n_stacks * STACK_BYTES);
	s.stacks = (char *)mmap(nullptr, n * STACK_BYTES, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (s.stacks == MAP_FAILED)
		s_die("cannot map %zu fiber stacks", n);
	s.n_stacks = n;
}

/* Run one block to completion. */
void s_run_block(dim3 grid, dim3 block, uint3 b, bool reverse)
{
	sched &s = S();
	int n = (int)(block.x * block.y * block.z);
	s.fibers.resize((size_t)n);
	s_ensure_stacks((size_t)n);
	for (int i = 0; i < n; i++) {
		fiber &f = s.fibers[i];
		f.where.thread.x = (unsigned)i % block.x;
		f.where.thread.y = ((unsigned)i / block.x) % block.y;
		f.where.thread.z = (unsigned)i / (block.x * block.y);
		f.where.block = b;
		f.where.block_dim = block;
		f.where.grid_dim = grid;
		f.state = RUNNABLE;
		f.lane = i % 32;
		f.warp = i / 32;
		f.rounds = 0;
		f.copies.clear();
		f.group_ends.clear();
		f.stack = s.stacks + (size_t)i * STACK_BYTES;
		f.fake_stack = nullptr;
		s_start(f, f.stack, STACK_BYTES);
	}
	int n_warps = (n + 31) / 32;
	for (;;) {
		bool ran = false;
		for (int k = 0; k < n; k++) {
			int i = reverse ? n - 1 - k : k;
			if (s.fibers[i].state != RUNNABLE)
				continue;
			s_resume(i);
			ran = true;
		}
		int live = 0, at_sync = 0;
		for (const fiber &f : s.fibers) {
			live += f.state != DONE;
			at_sync += f.state == AT_SYNC;
		}
		if (live == 0)
			return;
		bool released = false;
		if (at_sync == live) {
			for (fiber &f : s.fibers)
				if (f.state == AT_SYNC)
					f.state = RUNNABLE;
			released = true;
		}
		for (int w = 0; w < n_warps; w++) {
			int lo = w * 32, hi = lo + 32 < n ? lo + 32 : n;
			int waiting = 0, done = 0;
			for (int i = lo; i < hi; i++) {
				waiting += s.fibers[i].state == AT_WARP;
				done += s.fibers[i].state == DONE;
			}
			if (waiting == 0 || waiting + done < hi - lo)
				continue;
			if (done > 0 || hi - lo < 32)
				s_die("%s: a warp shuffle in block (%u,%u,%u) warp %d with %d of its 32 "
				      "lanes present (exited or missing lanes read undefined values)",
				      s.kernel, b.x, b.y, b.z, w, waiting);
			for (int i = lo; i < hi; i++)
				s.fibers[i].state = RUNNABLE;
			released = true;
		}
		if (!ran && !released)
			s_die("%s: deadlock in block (%u,%u,%u): %d live threads, %d at __syncthreads, "
			      "the rest at a warp shuffle",
			      s.kernel, b.x, b.y, b.z, live, at_sync);
	}
}

/* The allocation holding [p, p + bytes), or die naming what. */
void s_check_range(const void *p, size_t bytes, const char *what)
{
	sched &s = S();
	uintptr_t a = (uintptr_t)p;
	auto it = s.allocs.upper_bound(a);
	if (it == s.allocs.begin())
		s_die("%s: %p is not in any cudaMalloc allocation", what, p);
	--it;
	if (a + bytes > it->first + it->second)
		s_die("%s: %zu bytes at %p run past the end of a %zu-byte allocation (by %zu bytes)", what,
		      bytes, p, it->second, (size_t)(a + bytes - (it->first + it->second)));
}

bool s_is_device(const void *p)
{
	sched &s = S();
	uintptr_t a = (uintptr_t)p;
	auto it = s.allocs.upper_bound(a);
	if (it == s.allocs.begin())
		return false;
	--it;
	return a < it->first + it->second;
}

cudaError_t s_set(cudaError_t e)
{
	if (e != cudaSuccess)
		S().last_error = e;
	return e;
}

} /* namespace */

namespace cudaemu {

const coords *current;

const coords &cur_checked()
{
	s_die("threadIdx/blockIdx read outside a kernel");
}

void syncthreads()
{
	s_park(AT_SYNC);
}

int lane()
{
	sched &s = S();
	if (s.current < 0)
		s_die("a warp shuffle outside a kernel");
	return s.fibers[s.current].lane;
}

/* The calling lane's slot for its next warp-collective call, and the
 * warp's first fiber (every lane of it has filled the same slot once
 * s_warp_round returns) */
fiber::wslot &s_my_slot(const char *what)
{
	sched &s = S();
	if (s.current < 0)
		s_die("%s outside a kernel", what);
	fiber &f = s.fibers[s.current];
	return f.slots[f.rounds & 1];
}

const fiber *s_warp_round()
{
	sched &s = S();
	s_park(AT_WARP); /* every lane's operands are in place */
	return &s.fibers[(size_t)s.fibers[s.current].warp * 32];
}

void s_round_done()
{
	sched &s = S();
	s.fibers[s.current].rounds++;
}

uint64_t warp_exchange(unsigned mask, uint64_t mine, int src_lane)
{
	sched &s = S();
	if (mask != 0xffffffffu)
		s_die("%s: shuffle with mask %#x: only full-warp shuffles are emulated", s.kernel, mask);
	s_my_slot("a warp shuffle").xchg = mine;
	const fiber *warp = s_warp_round();
	const fiber &f = s.fibers[s.current];
	uint64_t got = warp[src_lane & 31].slots[f.rounds & 1].xchg;
	s_round_done();
	return got;
}

namespace {

float s_bf16_at(const uint32_t *regs, int reg, int half)
{
	uint32_t bits = (regs[reg] >> (16 * half)) << 16;
	float f;
	memcpy(&f, &bits, sizeof f);
	return f;
}

} /* namespace */

void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2])
{
	fiber::wslot &mine = s_my_slot("mma");
	memcpy(mine.a, a, sizeof mine.a);
	memcpy(mine.b, b, sizeof mine.b);
	const fiber *warp = s_warp_round();
	sched &s = S();
	const fiber &f = s.fibers[s.current];
	const unsigned slot = f.rounds & 1;
	const int g = f.lane / 4, tig = f.lane % 4;
	for (int e = 0; e < 4; e++) {
		const int row = g + (e >= 2 ? 8 : 0), col = 2 * tig + (e & 1);
		double sum = 0.0;
		for (int k = 0; k < 16; k++) {
			/* A (row, k): lane 4 (row % 8) + (k % 8) / 2, register
			 * (row >= 8) + 2 (k >= 8), half k & 1 */
			const fiber::wslot &fa = warp[4 * (row % 8) + (k % 8) / 2].slots[slot];
			float av = s_bf16_at(fa.a, (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0), k & 1);
			/* B (k, col): lane 4 col + (k % 8) / 2, register k >= 8 */
			const fiber::wslot &fb = warp[4 * col + (k % 8) / 2].slots[slot];
			float bv = s_bf16_at(fb.b, k >= 8 ? 1 : 0, k & 1);
			sum += (double)av * (double)bv;
		}
		d[e] = (float)((double)d[e] + sum);
	}
	s_round_done();
}

void ldmatrix_x4(uint32_t r[4], const void *row, bool trans)
{
	fiber::wslot &mine = s_my_slot("ldmatrix");
	if ((uintptr_t)row % 16 != 0)
		s_die("%s: ldmatrix row address %p is not 16-byte aligned", S().kernel, row);
	mine.row = row;
	const fiber *warp = s_warp_round();
	sched &s = S();
	const fiber &f = s.fibers[s.current];
	const unsigned slot = f.rounds & 1;
	const int lane = f.lane;
	for (int i = 0; i < 4; i++) {
		/* matrix i's rows come from lanes 8 i .. 8 i + 7; this lane gets
		 * row lane / 4, elements 2 (lane % 4) and + 1 of it, or of its
		 * transpose */
		uint16_t e[2];
		for (int h = 0; h < 2; h++) {
			const int rr = trans ? 2 * (lane % 4) + h : lane / 4;
			const int cc = trans ? lane / 4 : 2 * (lane % 4) + h;
			const uint16_t *src = (const uint16_t *)warp[8 * i + rr].slots[slot].row;
			e[h] = src[cc];
		}
		r[i] = (uint32_t)e[0] | (uint32_t)e[1] << 16;
	}
	s_round_done();
}

void cp_async(void *dst, const void *src, size_t bytes, bool valid)
{
	sched &s = S();
	if (s.current < 0)
		s_die("cp.async outside a kernel");
	if ((uintptr_t)dst % bytes != 0 || (valid && (uintptr_t)src % bytes != 0))
		s_die("%s: cp.async of %zu bytes from %p to %p: not aligned to its size", s.kernel, bytes,
		      src, dst);
	if (valid)
		s_check_range(src, bytes, "cp.async source");
	s.fibers[s.current].copies.push_back(cudaemu_copy{dst, src, bytes, valid});
}

void cp_async_commit()
{
	sched &s = S();
	if (s.current < 0)
		s_die("cp.async.commit_group outside a kernel");
	fiber &f = s.fibers[s.current];
	f.group_ends.push_back(f.copies.size());
}

void cp_async_wait(int newest_pending)
{
	sched &s = S();
	if (s.current < 0)
		s_die("cp.async.wait_group outside a kernel");
	fiber &f = s.fibers[s.current];
	/* every committed group but the newest `newest_pending` lands now, no
	 * sooner: a read of a tile before its wait sees the old bytes */
	const int groups = (int)f.group_ends.size();
	if (groups <= newest_pending)
		return;
	const size_t n = f.group_ends[(size_t)(groups - newest_pending - 1)];
	for (size_t i = 0; i < n; i++) {
		const cudaemu_copy &c = f.copies[i];
		if (c.valid)
			memcpy(c.dst, c.src, c.bytes);
		else
			memset(c.dst, 0, c.bytes);
	}
	f.copies.erase(f.copies.begin(), f.copies.begin() + (ptrdiff_t)n);
	f.group_ends.erase(f.group_ends.begin(), f.group_ends.begin() + (groups - newest_pending));
	for (size_t &e : f.group_ends)
		e -= n;
}

bool launch_impl(const char *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
		 const std::function<void()> &body)
{
	(void)stream;
	sched &s = S();
	std::lock_guard<std::mutex> g(s.lock);
	size_t threads = (size_t)block.x * block.y * block.z;
	if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 ||
	    grid.z == 0 || grid.y > 65535 || grid.z > 65535 || grid.x > 2147483647u) {
		fprintf(stderr, "cudaemu: %s: invalid launch: grid (%u,%u,%u) block (%u,%u,%u)\n", kernel,
			grid.x, grid.y, grid.z, block.x, block.y, block.z);
		s.last_error = cudaErrorInvalidConfiguration;
		return false;
	}
	if (smem > 48 * 1024) {
		fprintf(stderr, "cudaemu: %s: %zu bytes of dynamic shared memory (48 KiB without opt-in)\n",
			kernel, smem);
		s.last_error = cudaErrorInvalidValue;
		return false;
	}
	const char *order = getenv("CUDAEMU_ORDER");
	bool reverse = order && strcmp(order, "reverse") == 0;
	s.body = &body;
	s.kernel = kernel;
	for (unsigned z = 0; z < grid.z; z++)
		for (unsigned y = 0; y < grid.y; y++)
			for (unsigned x = 0; x < grid.x; x++) {
				unsigned bx = reverse ? grid.x - 1 - x : x;
				s_run_block(grid, block, make_uint3(bx, y, z), reverse);
			}
	s.body = nullptr;
	return true;
}

} /* namespace cudaemu */

/* ---- the runtime API ---- */

extern "C" {

/* cudaemu_blas.cc's hook: every GEMM operand's extent inside its allocation. */
void cudaemu_blas_check_range(const void *p, size_t n_bytes, const char *what)
{
	std::lock_guard<std::mutex> g(S().lock);
	s_check_range(p, n_bytes, what);
}

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = S().last_error;
	S().last_error = cudaSuccess;
	return e;
}

cudaError_t cudaPeekAtLastError(void)
{
	return S().last_error;
}

const char *cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return "no error";
	case cudaErrorInvalidValue:
		return "invalid argument";
	case cudaErrorMemoryAllocation:
		return "out of memory";
	case cudaErrorInvalidConfiguration:
		return "invalid configuration argument";
	case cudaErrorNoDevice:
		return "no CUDA-capable device is detected";
	default:
		return "cudaemu: unexpected error";
	}
}

const char *cudaGetErrorName(cudaError_t e)
{
	return cudaGetErrorString(e);
}

/* The emulated GPUs: CUDAEMU_DEVICES of them (default 1), or as many as
 * CUDA_VISIBLE_DEVICES lists when that is set (each rank of a multi-GPU
 * test sees its own). They share the host's memory. */
static int s_device_count(void)
{
	const char *visible = getenv("CUDA_VISIBLE_DEVICES");
	if (visible) {
		int n = 0;
		for (const char *p = visible; *p;) {
			size_t len = strcspn(p, ",");
			n += len > 0;
			p += len;
			if (*p == ',')
				p++;
		}
		return n;
	}
	const char *e = getenv("CUDAEMU_DEVICES");
	return e && atoi(e) > 0 ? atoi(e) : 1;
}

static int s_device;

cudaError_t cudaGetDeviceCount(int *count)
{
	*count = s_device_count();
	return *count ? cudaSuccess : s_set(cudaErrorNoDevice);
}

cudaError_t cudaGetDevice(int *device)
{
	*device = s_device;
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
	if (device < 0 || device >= s_device_count())
		return s_set(cudaErrorInvalidDevice);
	s_device = device;
	return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	if (device < 0 || device >= s_device_count())
		return s_set(cudaErrorInvalidDevice);
	memset(prop, 0, sizeof *prop);
	snprintf(prop->name, sizeof prop->name, "cudaemu (the CPU)");
	prop->major = 9;
	prop->minor = 0;
	prop->totalGlobalMem = (size_t)8 << 30;
	prop->multiProcessorCount = 1;
	prop->warpSize = 32;
	prop->maxThreadsPerBlock = 1024;
	prop->sharedMemPerBlock = 48 * 1024;
	return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
	*free_bytes = (size_t)6 << 30;
	*total = (size_t)8 << 30;
	return cudaSuccess;
}

cudaError_t cudaMalloc(void **ptr, size_t bytes)
{
	sched &s = S();
	std::lock_guard<std::mutex> g(s.lock);
	/* exactly `bytes` (256-byte aligned, as cudaMalloc's are), so that under
	 * AddressSanitizer a kernel reading one element past a buffer is caught */
	void *p = NULL;
	if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0) {
		*ptr = nullptr;
		return s_set(cudaErrorMemoryAllocation);
	}
	memset(p, 0xff, bytes ? bytes : 1);
	s.allocs[(uintptr_t)p] = bytes ? bytes : 1;
	*ptr = p;
	return cudaSuccess;
}

cudaError_t cudaFree(void *ptr)
{
	if (!ptr)
		return cudaSuccess;
	sched &s = S();
	std::lock_guard<std::mutex> g(s.lock);
	auto it = s.allocs.find((uintptr_t)ptr);
	if (it == s.allocs.end())
		s_die("cudaFree(%p): not a pointer cudaMalloc returned", ptr);
	s.allocs.erase(it);
	free(ptr);
	return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t bytes)
{
	*ptr = malloc(bytes ? bytes : 1);
	return *ptr ? cudaSuccess : s_set(cudaErrorMemoryAllocation);
}

cudaError_t cudaHostAlloc(void **ptr, size_t bytes, unsigned int flags)
{
	(void)flags;
	return cudaMallocHost(ptr, bytes);
}

cudaError_t cudaFreeHost(void *ptr)
{
	free(ptr);
	return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
	{
		std::lock_guard<std::mutex> g(S().lock);
		bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
		bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
		if (kind == cudaMemcpyDefault) {
			dst_dev = s_is_device(dst);
			src_dev = s_is_device(src);
		}
		if (dst_dev)
			s_check_range(dst, bytes, "cudaMemcpy destination");
		if (src_dev)
			s_check_range(src, bytes, "cudaMemcpy source");
		if (!dst_dev && s_is_device(dst))
			s_die("cudaMemcpy: kind %d but the destination %p is device memory", (int)kind,
			      dst);
		if (!src_dev && s_is_device(src))
			s_die("cudaMemcpy: kind %d but the source %p is device memory", (int)kind, src);
	}
	if (bytes)
		memmove(dst, src, bytes);
	return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
			    cudaStream_t stream)
{
	(void)stream;
	return cudaMemcpy(dst, src, bytes, kind);
}

/* rows of width bytes, pitched: one cudaMemcpy per row (its checks too) */
cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
			 size_t height, enum cudaMemcpyKind kind)
{
	if (width > dpitch || width > spitch)
		s_die("cudaMemcpy2D: width %zu over a pitch (%zu, %zu)", width, dpitch, spitch);
	for (size_t r = 0; r < height; r++) {
		cudaError_t rc = cudaMemcpy((char *)dst + r * dpitch, (const char *)src + r * spitch,
					    width, kind);
		if (rc != cudaSuccess)
			return rc;
	}
	return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
			      size_t width, size_t height, enum cudaMemcpyKind kind,
			      cudaStream_t stream)
{
	(void)stream;
	return cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind);
}

cudaError_t cudaMemset(void *ptr, int value, size_t bytes)
{
	{
		std::lock_guard<std::mutex> g(S().lock);
		s_check_range(ptr, bytes, "cudaMemset");
	}
	memset(ptr, value, bytes);
	return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream)
{
	(void)stream;
	return cudaMemset(ptr, value, bytes);
}

/* cudaemu_nccl.cc's: advance the emulated NCCL operations; whether one on
 * `stream` (any, when NULL) is still pending. Absent (weak) without it. */
extern "C" bool cudaemu_nccl_busy(cudaStream_t stream) __attribute__((weak));

static void s_nap_us(long us)
{
	struct timespec ts = {0, us * 1000};
	nanosleep(&ts, NULL);
}

cudaError_t cudaDeviceSynchronize(void)
{
	while (cudaemu_nccl_busy && cudaemu_nccl_busy(NULL))
		s_nap_us(50);
	return cudaSuccess;
}

/* Streams and events: distinct non-null handles; all work is already done. */
static int s_handles[4096];
static int s_next_handle;

static void *s_new_handle(void)
{
	std::lock_guard<std::mutex> g(S().lock);
	return &s_handles[s_next_handle++ % 4096];
}

cudaError_t cudaStreamCreate(cudaStream_t *stream)
{
	*stream = (cudaStream_t)s_new_handle();
	return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
	(void)flags;
	return cudaStreamCreate(stream);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	return stream ? cudaSuccess : s_set(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	while (cudaemu_nccl_busy && cudaemu_nccl_busy(stream))
		s_nap_us(50);
	return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	return cudaemu_nccl_busy && cudaemu_nccl_busy(stream) ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	(void)stream;
	(void)flags;
	return event ? cudaSuccess : s_set(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
	*event = (cudaEvent_t)s_new_handle();
	return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	(void)flags;
	return cudaEventCreate(event);
}

/* When each event was recorded (host time: the work before it is done). */
static double s_event_ms[4096];

static double *s_event_slot(cudaEvent_t event)
{
	ptrdiff_t i = (int *)(void *)event - s_handles;
	return i >= 0 && i < 4096 ? &s_event_ms[i] : nullptr;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	(void)stream;
	double *slot = event ? s_event_slot(event) : nullptr;
	if (!slot)
		return s_set(cudaErrorInvalidResourceHandle);
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	*slot = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
	return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	double *a = start ? s_event_slot(start) : nullptr, *b = end ? s_event_slot(end) : nullptr;
	if (!a || !b)
		return s_set(cudaErrorInvalidResourceHandle);
	*ms = (float)(*b - *a);
	return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	return event ? cudaSuccess : s_set(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
	return event ? cudaSuccess : s_set(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	return event ? cudaSuccess : s_set(cudaErrorInvalidResourceHandle);
}

} /* extern "C" */
