/*
 * test_cudaemu_self: the emulator's own behaviour (cudaemu.h), so that a
 * passing cudaemu-kernels run means something: thread and block
 * coordinates, a block reduction through shared memory and one through warp
 * shuffles give the right sums in both thread orders; the same reduction
 * with its __syncthreads() left out gives a wrong sum in at least one order
 * (the reason the suite runs both); a deadlock, a shuffle with exited lanes,
 * a copy past an allocation's end and an oversized block are each caught.
 * The cases that end the process run in a forked child and must exit 3
 * with the expected line. Compiled like the engine: cudaemu_launch.py, then
 * g++ with cudaemu.h included first.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int s_failed;

static void s_check(bool ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
		s_failed = 1;
}

__global__ void k_coords(int *out)
{
	int i = (blockIdx.y * gridDim.x + blockIdx.x) * (blockDim.x * blockDim.y) +
		threadIdx.y * blockDim.x + threadIdx.x;
	out[i] = (int)(blockIdx.x * 1000 + blockIdx.y * 100 + threadIdx.y * 10 + threadIdx.x);
}

template <bool SYNC> __global__ void k_block_sum(float *out, const float *x)
{
	__shared__ float sh[256];
	sh[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];
	if (SYNC)
		__syncthreads();
	for (int o = 128; o > 0; o /= 2) {
		if ((int)threadIdx.x < o)
			sh[threadIdx.x] += sh[threadIdx.x + o];
		if (SYNC)
			__syncthreads();
	}
	if (threadIdx.x == 0)
		out[blockIdx.x] = sh[0];
}

__global__ void k_warp_sum(float *out, const float *x)
{
	float v = x[blockIdx.x * blockDim.x + threadIdx.x];
	for (int o = 16; o > 0; o /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

__global__ void k_deadlock(float *out)
{
	if (threadIdx.x < 16)
		__syncthreads();
	else
		out[0] = __shfl_xor_sync(0xffffffffu, out[0], 1);
}

__global__ void k_exited_lanes(float *out)
{
	if (threadIdx.x >= 16)
		return;
	out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

/* Run f in a child; true when it exits 3 and its stderr holds `expect`. */
static bool s_dies_with(void (*f)(void), const char *expect)
{
	int pipefd[2];
	if (pipe(pipefd) != 0)
		return false;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(pipefd[1], 2);
		close(pipefd[0]);
		f();
		_exit(0);
	}
	close(pipefd[1]);
	char buf[4096];
	size_t n = 0;
	ssize_t r;
	while (n < sizeof buf - 1 && (r = read(pipefd[0], buf + n, sizeof buf - 1 - n)) > 0)
		n += (size_t)r;
	buf[n] = 0;
	close(pipefd[0]);
	int st = 0;
	waitpid(pid, &st, 0);
	bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 3 && strstr(buf, expect);
	if (!ok)
		fprintf(stderr, "  child status %d, stderr: %s", st, buf);
	return ok;
}

static float *s_dev_floats(size_t n)
{
	float *p = NULL;
	cudaMalloc((void **)&p, n * sizeof *p);
	return p;
}

static void s_do_deadlock(void)
{
	float *d = s_dev_floats(32);
	k_deadlock<<<1, 32>>>(d);
}

static void s_do_exited(void)
{
	float *d = s_dev_floats(32);
	k_exited_lanes<<<1, 32>>>(d);
}

static void s_do_overrun(void)
{
	float *d = s_dev_floats(10);
	float h[11] = {0};
	cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
}

/* The block sum of 4 blocks of 256 in the current thread order. */
static bool s_block_sums_right(bool sync)
{
	float h[1024], want[4] = {0}, got[4];
	for (int i = 0; i < 1024; i++) {
		h[i] = (float)(i % 17);
		want[i / 256] += h[i];
	}
	float *x = s_dev_floats(1024), *out = s_dev_floats(4);
	cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice);
	if (sync)
		k_block_sum<true><<<4, 256>>>(out, x);
	else
		k_block_sum<false><<<4, 256>>>(out, x);
	cudaMemcpy(got, out, sizeof got, cudaMemcpyDeviceToHost);
	cudaFree(x);
	cudaFree(out);
	return memcmp(got, want, sizeof got) == 0;
}

int main(void)
{
	int *d = NULL, h[2 * 3 * 4 * 2];
	cudaMalloc((void **)&d, sizeof h);
	k_coords<<<dim3(2, 3), dim3(4, 2)>>>(d);
	cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
	bool coords_ok = true;
	for (int by = 0; by < 3; by++)
		for (int bx = 0; bx < 2; bx++)
			for (int ty = 0; ty < 2; ty++)
				for (int tx = 0; tx < 4; tx++) {
					int i = (by * 2 + bx) * 8 + ty * 4 + tx;
					coords_ok &= h[i] == bx * 1000 + by * 100 + ty * 10 + tx;
				}
	s_check(coords_ok, "threadIdx, blockIdx, blockDim, gridDim in 2-D");

	bool missed_any = false;
	for (int order = 0; order < 2; order++) {
		setenv("CUDAEMU_ORDER", order ? "reverse" : "forward", 1);
		s_check(s_block_sums_right(true), order ? "block sum, reverse order" : "block sum, in order");
		missed_any |= !s_block_sums_right(false);
	}
	s_check(missed_any, "block sum without __syncthreads is wrong in one of the two orders");

	float hx[64], hout[64];
	for (int i = 0; i < 64; i++)
		hx[i] = (float)i;
	float *x = s_dev_floats(64), *out = s_dev_floats(64);
	cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice);
	k_warp_sum<<<1, 64>>>(out, x);
	cudaMemcpy(hout, out, sizeof hout, cudaMemcpyDeviceToHost);
	s_check(hout[0] == 496.0f && hout[31] == 496.0f && hout[32] == 1520.0f && hout[63] == 1520.0f,
		"warp sum by xor shuffles, every lane");

	k_warp_sum<<<1, 2048>>>(out, x);
	s_check(cudaGetLastError() == cudaErrorInvalidConfiguration, "a 2048-thread block is refused");
	s_check(cudaGetLastError() == cudaSuccess, "cudaGetLastError clears the error");

	cudaFree(d);
	cudaFree(x);
	cudaFree(out);

	s_check(s_dies_with(s_do_deadlock, "deadlock"), "a deadlock (half a warp at a shuffle, half at __syncthreads) is caught");
	s_check(s_dies_with(s_do_exited, "lanes present"), "a shuffle with exited lanes is caught");
	s_check(s_dies_with(s_do_overrun, "run past the end"), "a copy past an allocation is caught");
	return s_failed;
}
