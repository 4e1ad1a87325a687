/*
 * cuda_attention: attention from batched GEMMs and the softmax kernels (see
 * cuda_attention.h). Each (batch, head) is one member of a strided batch:
 * q, k, v, dy and the outputs are (T, hd) blocks T*hd apart, the score
 * matrices (T, T) blocks T*T apart.
 */
#include "cuda_attention.h"

#include <math.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_kernels.h"

static size_t s_round(size_t bytes)
{
	return (bytes + 255) / 256 * 256;
}

extern "C" size_t cuda_attention_scratch_bytes(int max_B, int max_T, int C, int H, bool fused)
{
	size_t nc = (size_t)max_B * max_T * C, tt = (size_t)max_B * H * max_T * max_T;
	if (fused) /* dy, the row sums, the bias partial sums per 64-row tile */
		return s_round(nc * 2) + s_round((size_t)max_B * H * max_T * 4) +
		       s_round((size_t)max_B * ((max_T + 63) / 64) * 3 * C * 4);
	size_t common = 4 * s_round(nc * 2) + s_round(3 * nc * 4);
	return common + s_round(tt * 2) + s_round(tt * 4);
}

extern "C" void cuda_attention_scratch_carve(cuda_attention_scratch_t *s, void *base, int max_B,
                                             int max_T, int C, int H, bool fused)
{
	size_t nc = (size_t)max_B * max_T * C, tt = (size_t)max_B * H * max_T * max_T;
	char *p = (char *)base;
	if (fused) {
		s->q = s->k = s->v = NULL;
		s->f32 = NULL;
		s->dpre16 = NULL;
		s->scores = NULL;
		s->dy = (uint16_t *)p;
		p += s_round(nc * 2);
		s->rowdot = (float *)p;
		p += s_round((size_t)max_B * H * max_T * 4);
		s->bias_partial = (float *)p;
		return;
	}
	s->bias_partial = NULL;
	s->q = (uint16_t *)p;
	p += s_round(nc * 2);
	s->k = (uint16_t *)p;
	p += s_round(nc * 2);
	s->v = (uint16_t *)p;
	p += s_round(nc * 2);
	s->dy = (uint16_t *)p;
	p += s_round(nc * 2);
	s->f32 = (float *)p;
	p += s_round(3 * nc * 4);
	s->rowdot = NULL;
	s->dpre16 = (uint16_t *)p;
	p += s_round(tt * 2);
	s->scores = (float *)p;
}

/* C (T x n) per head = alpha * op(A) @ op(B), batch B*H */
static void s_bgemm(cuda_gemm_t *g, int M, int N, int K, const uint16_t *A, bool ta, int64_t sa,
                    const uint16_t *Bm, bool tb, int64_t sb, float *Cm, int64_t sc, float alpha,
                    int batch)
{
	cuda_gemm_args_t a;
	memset(&a, 0, sizeof a);
	a.M = M;
	a.N = N;
	a.K = K;
	a.A = A;
	a.trans_a = ta;
	a.B = Bm;
	a.trans_b = tb;
	a.C = Cm;
	a.alpha = alpha;
	a.batch = batch;
	a.stride_a = sa;
	a.stride_b = sb;
	a.stride_c = sc;
	cuda_gemm_run(g, &a);
}

extern "C" void cuda_attention_forward(cuda_gemm_t *g, float *out, uint16_t *out16, uint16_t *att16,
                                       const float *qkv, const cuda_attention_scratch_t *s, int B,
                                       int T, int C, int H, cudaStream_t stream)
{
	int hd = C / H, BH = B * H;
	int64_t thd = (int64_t)T * hd, tt = (int64_t)T * T;
	float scale = 1.0f / sqrtf((float)hd);
	cuda_attention_split(s->q, s->k, s->v, qkv, B, T, C, H, stream);
	/* scores (T, T) = scale * q (T, hd) @ k^T; att = softmax, in bf16 */
	s_bgemm(g, T, T, hd, s->q, false, thd, s->k, true, thd, s->scores, tt, scale, BH);
	cuda_softmax_causal_forward(NULL, att16, s->scores, BH, T, stream);
	/* y (T, hd) = att (T, T) @ v (T, hd) */
	s_bgemm(g, T, hd, T, att16, false, tt, s->v, false, thd, s->f32, thd, 1.0f, BH);
	cuda_heads_merge(out, out16, s->f32, B, T, C, H, stream);
}

extern "C" void cuda_attention_backward(cuda_gemm_t *g, float *dqkv, uint16_t *dqkv16,
                                        const float *dout, const float *qkv, const uint16_t *att16,
                                        const cuda_attention_scratch_t *s, int B, int T, int C,
                                        int H, cudaStream_t stream)
{
	int hd = C / H, BH = B * H;
	int64_t thd = (int64_t)T * hd, tt = (int64_t)T * T;
	size_t nc = (size_t)B * T * C;
	float scale = 1.0f / sqrtf((float)hd);
	float *dq = s->f32, *dk = s->f32 + nc, *dv = s->f32 + 2 * nc;
	float *datt = s->scores;
	cuda_attention_split(s->q, s->k, s->v, qkv, B, T, C, H, stream);
	cuda_heads_split(s->dy, dout, B, T, C, H, stream);
	/* dv (T, hd) = att^T (T, T) @ dy (T, hd) */
	s_bgemm(g, T, hd, T, att16, true, tt, s->dy, false, thd, dv, thd, 1.0f, BH);
	/* datt (T, T) = dy (T, hd) @ v^T */
	s_bgemm(g, T, T, hd, s->dy, false, thd, s->v, true, thd, datt, tt, 1.0f, BH);
	/* dpre = scale * att * (datt - <att, datt>) */
	cuda_softmax_causal_backward(s->dpre16, NULL, datt, att16, BH, T, scale, stream);
	/* dq (T, hd) = dpre (T, T) @ k (T, hd); dk (T, hd) = dpre^T @ q */
	s_bgemm(g, T, hd, T, s->dpre16, false, tt, s->k, false, thd, dq, thd, 1.0f, BH);
	s_bgemm(g, T, hd, T, s->dpre16, true, tt, s->q, false, thd, dk, thd, 1.0f, BH);
	cuda_attention_merge_grads(dqkv, dqkv16, dq, dk, dv, B, T, C, H, stream);
}
