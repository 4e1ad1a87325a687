/*
 * cuda_tprow: the CUDA rows' tensor-parallel plumbing (see cuda_tprow.h):
 * counted collectives after the model's stream, the reduce-scatter plus
 * residual, the replicated gradients' all-reduce. The arithmetic follows
 * engine/tp.c element for element.
 */
#include "cuda_tprow.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>

#include "cuda_check.h"

#define BLOCK 256

int cuda_tprow_init(cuda_tprow_t *s, const model_tp_t *g, cudaStream_t stream,
                    const model_tensor_t *t, int n, char *err, size_t errlen)
{
	memset(s, 0, sizeof *s);
	s->stream = stream;
	if (g)
		s->g = *g;
	else
		s->g.size = 1;
	if (s->g.size <= 1)
		return 0;
	s->rep = (model_range_t *)calloc((size_t)(n > 0 ? n : 1), sizeof *s->rep);
	if (!s->rep) {
		snprintf(err, errlen, "out of host memory for the tensor-parallel tables");
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++)
		if (t[i].tp_split == MODEL_TP_REPLICATED) {
			s->rep[s->n_rep++] = (model_range_t){t[i].offset, t[i].offset + t[i].numel};
			s->rep_n += t[i].numel;
		}
	size_t bytes = (s->rep_n ? s->rep_n : 1) * sizeof(float);
	if (cudaMalloc((void **)&s->rep_saved, bytes) != cudaSuccess ||
	    cudaMalloc((void **)&s->rep_pack, bytes) != cudaSuccess) {
		snprintf(err, errlen, "out of GPU memory: the replicated gradients need 2 x %.1f MiB",
			 (double)bytes / 1048576.0);
		cuda_tprow_free(s);
		return -ENOMEM;
	}
	return 0;
}

void cuda_tprow_free(cuda_tprow_t *s)
{
	if (s->rep_saved)
		cudaFree(s->rep_saved);
	if (s->rep_pack)
		cudaFree(s->rep_pack);
	free(s->rep);
	s->rep_saved = s->rep_pack = NULL;
	s->rep = NULL;
	s->n_rep = 0;
	s->rep_n = 0;
}

size_t cuda_tprow_bytes(const cuda_tprow_t *s)
{
	return s->g.size > 1 ? 2 * (s->rep_n ? s->rep_n : 1) * sizeof(float) : 0;
}

static void s_wait(cuda_tprow_t *s)
{
	CUDA_CHECK(cudaStreamSynchronize(s->stream));
}

void cuda_tprow_allgather(cuda_tprow_t *s, const void *in, void *out, size_t n_each,
                          size_t elem_bytes)
{
	const int t = s->g.size;
	if ((n_each * elem_bytes) % sizeof(float) != 0) {
		fprintf(stderr, "ringworker: fatal: internal error: a tensor-parallel all-gather of %zu"
			" elements of %zu bytes is not whole floats\n", n_each, elem_bytes);
		exit(CUDA_EXIT_MISUSE);
	}
	s->vol.allgather_floats += (uint64_t)t * n_each;
	s->vol.allgather_calls++;
	s->vol.sent_floats += (double)(t - 1) * (double)n_each;
	s_wait(s);
	s->g.allgather(s->g.ctx, (const float *)in, (float *)out, n_each * elem_bytes / sizeof(float));
}

void cuda_tprow_reduce_scatter(cuda_tprow_t *s, const float *in, float *out, size_t n_each)
{
	const int t = s->g.size;
	s->vol.reduce_scatter_floats += (uint64_t)t * n_each;
	s->vol.reduce_scatter_calls++;
	s->vol.sent_floats += (double)(t - 1) * (double)n_each;
	s_wait(s);
	s->g.reduce_scatter(s->g.ctx, in, out, n_each);
}

void cuda_tprow_allreduce(cuda_tprow_t *s, float *buf, size_t n)
{
	const int t = s->g.size;
	s->vol.allreduce_floats += n;
	s->vol.allreduce_calls++;
	s->vol.sent_floats += 2.0 * (double)(t - 1) / (double)t * (double)n;
	s_wait(s);
	s->g.allreduce(s->g.ctx, buf, n);
}

/* out[i] = sum[i] + (res[i] + bias[i % C]) as tp_rs_residual adds them */
__global__ void k_rs_residual(float *out, __nv_bfloat16 *out16, const float *sum, const float *res,
			      const float *bias, size_t total, int C)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= total)
		return;
	float v = sum[i] + (res[i] + (bias ? bias[i % (size_t)C] : 0.0f));
	out[i] = v;
	if (out16)
		out16[i] = __float2bfloat16(v);
}

void cuda_tprow_rs_residual(cuda_tprow_t *s, float *out, uint16_t *out16, const float *part,
                            const float *res, const float *bias, int n, int C)
{
	const size_t total = (size_t)n * (size_t)C;
	if (out == res) {
		fprintf(stderr, "ringworker: fatal: internal error: cuda_tprow_rs_residual's out aliases"
			" res\n");
		exit(CUDA_EXIT_MISUSE);
	}
	cuda_tprow_reduce_scatter(s, part, out, total);
	if (total == 0)
		return;
	k_rs_residual<<<(unsigned)((total + BLOCK - 1) / BLOCK), BLOCK, 0, s->stream>>>(
		out, (__nv_bfloat16 *)out16, out, res, bias, total, C);
	CUDA_CHECK_LAUNCH();
}

static void s_copy(float *dst, const float *src, size_t n, cudaStream_t stream)
{
	if (n)
		CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
}

__global__ void k_sum_into(float *g, const float *a, const float *b, size_t n)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		g[i] = a[i] + b[i];
}

void cuda_tprow_rep_begin(cuda_tprow_t *s, float *grads)
{
	size_t o = 0;
	for (int i = 0; i < s->n_rep; i++) {
		size_t k = s->rep[i].hi - s->rep[i].lo;
		s_copy(s->rep_saved + o, grads + s->rep[i].lo, k, s->stream);
		if (k)
			CUDA_CHECK(cudaMemsetAsync(grads + s->rep[i].lo, 0, k * sizeof(float), s->stream));
		o += k;
	}
}

void cuda_tprow_rep_end(cuda_tprow_t *s, float *grads)
{
	size_t o = 0;
	for (int i = 0; i < s->n_rep; i++) {
		size_t k = s->rep[i].hi - s->rep[i].lo;
		s_copy(s->rep_pack + o, grads + s->rep[i].lo, k, s->stream);
		o += k;
	}
	cuda_tprow_allreduce(s, s->rep_pack, s->rep_n);
	o = 0;
	for (int i = 0; i < s->n_rep; i++) {
		size_t k = s->rep[i].hi - s->rep[i].lo;
		if (k) {
			k_sum_into<<<(unsigned)((k + BLOCK - 1) / BLOCK), BLOCK, 0, s->stream>>>(
				grads + s->rep[i].lo, s->rep_saved + o, s->rep_pack + o, k);
			CUDA_CHECK_LAUNCH();
		}
		o += k;
	}
}

void cuda_tprow_rep_range(cuda_tprow_t *s, model_range_t r, float *g)
{
	size_t o = 0;
	for (int i = 0; i < s->n_rep; i++)
		if (s->rep[i].lo >= r.lo && s->rep[i].hi <= r.hi) {
			s_copy(s->rep_pack + o, g + (s->rep[i].lo - r.lo), s->rep[i].hi - s->rep[i].lo, s->stream);
			o += s->rep[i].hi - s->rep[i].lo;
		}
	if (o == 0)
		return;
	cuda_tprow_allreduce(s, s->rep_pack, o);
	o = 0;
	for (int i = 0; i < s->n_rep; i++)
		if (s->rep[i].lo >= r.lo && s->rep[i].hi <= r.hi) {
			s_copy(g + (s->rep[i].lo - r.lo), s->rep_pack + o, s->rep[i].hi - s->rep[i].lo, s->stream);
			o += s->rep[i].hi - s->rep[i].lo;
		}
}
