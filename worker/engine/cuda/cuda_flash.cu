/*
 * cuda_flash: fused causal attention on tensor cores (cuda_attention.h,
 * cuda_flash_*), the alternative to cuda_attention.cu's batched GEMMs over
 * the whole T x T square. Nothing T x T is stored: forward keeps one log-sum-
 * exp per row, backward recomputes the probabilities from it.
 *
 * Tiles: a block owns 64 rows (queries in forward and in the dq kernel,
 * keys in the dk/dv kernel): forward as 2 warps of 32 (two m16 tiles that
 * share every B fragment), backward as 4 warps of 16. It walks tiles of 64
 * keys (or queries) staged in shared memory, double-buffered: cp.async
 * brings tile i + 1 while tile i is used. Only tiles on or below the
 * diagonal are visited, so the masked half costs nothing, and masks are
 * applied on the diagonal (and last) tile only. Products are mma.sync
 * m16n8k16 (bf16 operands, fp32 accumulation, sm_80 and later), whose
 * fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16") let an
 * accumulator tile become the next product's A operand in registers: P
 * (16 x 64) after the softmax feeds P V directly. Staged tiles stay as
 * they are in memory (rows of HD, padded by 8 elements so that ldmatrix's
 * eight rows fall in distinct banks); B fragments come by ldmatrix, with
 * .trans where the tile holds B itself rather than its columns (V in P V,
 * q and dy in dk and dv, K in dS K). q, k and v are read in place from the
 * QKV GEMM's bf16 output (B, T, C + 2 KV HD): a head's rows are that far
 * apart, each one HD contiguous elements, so no kernel splits them into
 * heads first. Grouped-query attention (Llama): KV heads of K and V, each
 * read by H / KV query heads; query head h reads KV head h / (H / KV) in
 * place (GPT-2 is KV = H), so no K or V head is ever copied. The dk/dv
 * kernel owns a KV head and loops over the query heads of its group, so
 * each dk, dv element is still one fixed sequence of operations.
 *
 * Forward (per query tile): online softmax in base 2 (scores times
 * scale * log2 e), running max and sum per row, the output rescaled as the
 * max grows, divided by the sum at the end; lse2 = max + log2(sum) per row.
 * Backward: D = rowsum(dy * y) per row, with dy's split into heads
 * (k_flash_dy_rowdot; k_flash_rowdot after cuda_heads_split where dout's
 * rows are not aligned); then dk, dv per key
 * tile, looping over the query tiles at or after it; then dq per query tile
 * over the key tiles up to it; each writes its rows of dqkv (qkv16's layout)
 * directly, fp32 and bf16, as forward writes its output rows, and (when
 * asked) its block's column sums of them, the qkv bias gradient's partial
 * sums per (batch, 64-row tile), added in order by cuda_colsum_add: the
 * model then needs no fp32 dqkv at all. Two kernels instead of one with
 * atomic adds into dq, so that every result is a fixed sequence of
 * operations and the same bits run to run.
 *
 * Precision matches the GEMM path's: q, k, v, dy, the probabilities and the
 * score gradient enter products as bf16, softmax and accumulation are fp32.
 * Head sizes 16, 32 and 64 (cuda_flash_supported; every GPT-2 size has 64).
 */
#include "cuda_attention.h"

#include <cuda_bf16.h>

#include <math.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "cuda_load.h"
#include "cuda_ptx.h"

#define FA_TILE 64                 /* rows per block, keys or queries per staged tile */
#define FA_WARPS 4                 /* 16 rows each */
#define FA_THREADS (FA_WARPS * 32)
#define FA_PAD 8                   /* bf16 elements after each staged row */
#define LOG2E 1.4426950408889634f
/* q, k, v are read where the QKV GEMM wrote them: qkv16 (B, T, (H + 2 KV)
 * HD) rows, q's H heads then k's and v's KV heads; head h of batch b at
 * column h HD of its part (q at 0, k at H HD, v at (H + KV) HD); block
 * bh = b H + h for a query head, its KV head h / (H / KV) */
#define FA_LD(H, KV, HD) ((size_t)((H) + 2 * (KV)) * (HD))
#define FA_BASE(b, head, T, ld, HD) ((size_t)(b) * (T) * (ld) + (size_t)(head) * (HD))

typedef __nv_bfloat16 bf16;

/* Loops over fragments must unroll completely for their arrays to stay in
 * registers (an index the compiler cannot resolve puts the array in local
 * memory) */
#ifdef __CUDACC__
#define FA_UNROLL _Pragma("unroll")
#else
#define FA_UNROLL
#endif

/* d (16 x 8) += a (16 x 16) @ b (16 x 8): one warp-wide tensor-core product */
__device__ __forceinline__ void s_mma(float d[4], const uint32_t a[4], const uint32_t b[2])
{
#ifdef CUDAEMU_MMA_BF16_16816
	CUDAEMU_MMA_BF16_16816(d, a, b);
#else
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
		     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* two adjacent bf16 (the first at the lower address) as one register */
__device__ __forceinline__ uint32_t s_ld2(const uint16_t *p)
{
	return *reinterpret_cast<const uint32_t *>(p);
}

/* lo, hi rounded to bf16 in one register, lo in the low half */
__device__ __forceinline__ uint32_t s_pack(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
	uint32_t r;
	memcpy(&r, &v, sizeof r);
	return r;
}

/* ldmatrix.x4 (trans: .trans) for the warp: lane 8 i + j passes row j of
 * 8 x 8 matrix i (16 bytes of shared memory); r[i] gets lane l's piece of
 * matrix i: row l / 4, elements 2 (l % 4), +1 (of the transpose: column
 * l / 4, rows 2 (l % 4), +1), which is exactly one B fragment register */
template <bool TRANS> __device__ __forceinline__ void s_ldmatrix(uint32_t r[4], const uint16_t *row)
{
#ifdef CUDAEMU_LDMATRIX_X4
	CUDAEMU_LDMATRIX_X4(r, row, TRANS);
#else
	const unsigned a = (unsigned)__cvta_generic_to_shared(row);
	if (TRANS)
		asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
			     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
			     : "r"(a));
	else
		asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
			     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
			     : "r"(a));
#endif
}

/* cp.async of BYTES (4 or 16) from global src to shared dst, zeros when
 * !valid (src is then not read); the copy lands at the s_cp_wait that
 * covers its group */
template <int BYTES> __device__ __forceinline__ void s_cp(void *dst, const void *src, bool valid)
{
#ifdef CUDAEMU_CP_ASYNC
	CUDAEMU_CP_ASYNC(dst, src, BYTES, valid);
#else
	const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
	if (BYTES == 16)
		asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
			     "r"(valid ? 16 : 0));
	else
		asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src),
			     "r"(valid ? 4 : 0));
#endif
}

/* the copies issued since the last commit become one group */
__device__ __forceinline__ void s_cp_commit()
{
#ifdef CUDAEMU_CP_COMMIT
	CUDAEMU_CP_COMMIT();
#else
	asm volatile("cp.async.commit_group;\n" ::);
#endif
}

/* wait until at most N committed groups (the newest) are in flight */
template <int N> __device__ __forceinline__ void s_cp_wait()
{
#ifdef CUDAEMU_CP_WAIT
	CUDAEMU_CP_WAIT(N);
#else
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

/* A fragments of rows r0 .. r0 + 15 of a (T, HD) matrix whose rows are ld
 * apart (zeros past T): register i of chunk kk holds row r0 + g + 8 (i & 1),
 * columns 16 kk + 8 (i >> 1) + 2 tig, +1 */
template <int HD>
__device__ __forceinline__ void s_load_a(uint32_t a[HD / 16][4], const uint16_t *m, int r0, int T,
                                         int g, int tig, int ld)
{
	FA_UNROLL
	for (int kk = 0; kk < HD / 16; kk++)
		FA_UNROLL
		for (int i = 0; i < 4; i++) {
			const int r = r0 + g + (i & 1) * 8, c = kk * 16 + (i >> 1) * 8 + 2 * tig;
			a[kk][i] = r < T ? s_ld2(m + (r * ld + c)) : 0u;
		}
}

/* rows r0 .. r0 + 63 of a (T, HD) matrix whose rows are ld apart (a
 * multiple of 8; T ld < 2^31, s_require) into sh by cp.async (not
 * committed), zeros past T */
template <int HD, int THREADS = FA_THREADS>
__device__ __forceinline__ void s_stage_rows(uint16_t (*sh)[HD + FA_PAD], const uint16_t *m, int r0,
                                             int T, int ld)
{
	constexpr int CHUNKS = HD / 8; /* 16-byte pieces of a row */
	for (int w = threadIdx.x; w < FA_TILE * CHUNKS; w += THREADS) {
		const int r = w / CHUNKS, c = (w % CHUNKS) * 8;
		const bool in = r0 + r < T;
		s_cp<16>(&sh[r][c], m + (in ? (r0 + r) * ld + c : 0), in);
	}
}

/* B fragments for two n-tiles at once (b[0..1]: n0 .. n0 + 7, b[2..3]:
 * n0 + 8 .. n0 + 15) of a chunk of 16 k from k0, from a tile sh whose row
 * n holds B's column n (sh[n][k]: K for q k^T) */
template <int W>
__device__ __forceinline__ void s_frag_b_nk(uint32_t b[4], uint16_t (*sh)[W], int n0, int k0, int lane)
{
	s_ldmatrix<false>(b, &sh[n0 + (lane & 7) + 8 * (lane >> 4)][k0 + 8 * ((lane >> 3) & 1)]);
}

/* the same from a tile holding B itself (sh[k][n]: V for p v), through
 * ldmatrix's transpose: no transposed copy of the tile is staged */
template <int W>
__device__ __forceinline__ void s_frag_b_kn(uint32_t b[4], uint16_t (*sh)[W], int k0, int n0, int lane)
{
	s_ldmatrix<true>(b, &sh[k0 + (lane & 7) + 8 * ((lane >> 3) & 1)][n0 + 8 * (lane >> 4)]);
}

/* acc[m] (16 x 64) = a[m] (16 x HD, A fragments) @ sh^T for MT tiles of
 * 16 rows, sh holding 64 rows of HD: the score-shaped products (q k^T,
 * dy v^T and their transposes); each B fragment serves all MT */
template <int HD, int MT>
__device__ __forceinline__ void s_times_rows_m(float acc[MT][FA_TILE / 8][4],
                                               const uint32_t a[MT][HD / 16][4],
                                               uint16_t (*sh)[HD + FA_PAD], int lane)
{
	FA_UNROLL
	for (int m = 0; m < MT; m++)
		FA_UNROLL
		for (int nt = 0; nt < FA_TILE / 8; nt++)
			acc[m][nt][0] = acc[m][nt][1] = acc[m][nt][2] = acc[m][nt][3] = 0.0f;
	FA_UNROLL
	for (int nt = 0; nt < FA_TILE / 8; nt += 2)
		FA_UNROLL
		for (int kk = 0; kk < HD / 16; kk++) {
			uint32_t b[4];
			s_frag_b_nk(b, sh, nt * 8, kk * 16, lane);
			FA_UNROLL
			for (int m = 0; m < MT; m++) {
				s_mma(acc[m][nt], a[m][kk], b);
				s_mma(acc[m][nt + 1], a[m][kk], b + 2);
			}
		}
}

/* acc[m] (16 x HD) += a[m] (chunk kk of a 16 x 64 A operand, given per
 * chunk) @ rows 16 kk .. 16 kk + 15 of sh (64 x HD, row-major): the
 * value-shaped products (p v, dS k and their transposes) */
template <int HD, int MT>
__device__ __forceinline__ void s_times_tile_m(float acc[MT][HD / 8][4], const uint32_t a[MT][4],
                                               uint16_t (*sh)[HD + FA_PAD], int kk, int lane)
{
	FA_UNROLL
	for (int dt = 0; dt < HD / 8; dt += 2) {
		uint32_t b[4];
		s_frag_b_kn(b, sh, kk * 16, dt * 8, lane);
		FA_UNROLL
		for (int m = 0; m < MT; m++) {
			s_mma(acc[m][dt], a[m], b);
			s_mma(acc[m][dt + 1], a[m], b + 2);
		}
	}
}

/* the two for one tile of 16 rows */
template <int HD>
__device__ __forceinline__ void s_times_rows(float acc[FA_TILE / 8][4], const uint32_t a[HD / 16][4],
                                             uint16_t (*sh)[HD + FA_PAD], int lane)
{
	s_times_rows_m<HD, 1>(reinterpret_cast<float(*)[FA_TILE / 8][4]>(acc),
			      reinterpret_cast<const uint32_t(*)[HD / 16][4]>(a), sh, lane);
}

template <int HD>
__device__ __forceinline__ void s_times_tile(float acc[HD / 8][4], const uint32_t a[4],
                                             uint16_t (*sh)[HD + FA_PAD], int kk, int lane)
{
	s_times_tile_m<HD, 1>(reinterpret_cast<float(*)[HD / 8][4]>(acc),
			      reinterpret_cast<const uint32_t(*)[4]>(a), sh, kk, lane);
}

/* Accumulator tiles x[2 kk], x[2 kk + 1] (16 x 16 together) as the A
 * fragment of chunk kk, in bf16 */
__device__ __forceinline__ void s_acc_to_a(uint32_t a[4], const float x0[4], const float x1[4])
{
	a[0] = s_pack(x0[0], x0[1]);
	a[1] = s_pack(x0[2], x0[3]);
	a[2] = s_pack(x1[0], x1[1]);
	a[3] = s_pack(x1[2], x1[3]);
}

/* Forward: grid (B*H, query tiles), the last tile (the most keys) first;
 * FA_FWD_WARPS warps of 32 queries, two tiles of 16 (FA_FWD_MT) that share
 * every K and V fragment read from shared memory. q, k, v (B*H, T, HD);
 * out/out16 (B, T, C) rows, either may be NULL; lse2 (B*H, T). K and V
 * tiles are double-buffered: tile kt + 1 is on its way (cp.async) while
 * tile kt is used. */
#define FA_FWD_MT 2
#define FA_FWD_WARPS (FA_TILE / (16 * FA_FWD_MT))
#define FA_FWD_THREADS (FA_FWD_WARPS * 32)
template <int HD>
__global__ void __launch_bounds__(FA_FWD_THREADS)
	k_flash_forward(float *out, bf16 *out16, float *lse2, const uint16_t *q, const uint16_t *k,
			const uint16_t *v, int T, int H, int KV, float scale_log2)
{
	constexpr int MT = FA_FWD_MT, NT = FA_FWD_THREADS;
	__shared__ __align__(16) uint16_t ks[2][FA_TILE][HD + FA_PAD];
	__shared__ __align__(16) uint16_t vs[2][FA_TILE][HD + FA_PAD];
	const int bh = (int)blockIdx.x, qt = (int)(gridDim.y - 1 - blockIdx.y);
	const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, g = lane / 4,
		  tig = lane % 4;
	const int ld = (int)FA_LD(H, KV, HD);
	const size_t base = FA_BASE(bh / H, bh % H, T, ld, HD);
	const size_t kvbase = FA_BASE(bh / H, (bh % H) / (H / KV), T, ld, HD);
	const int r0 = qt * FA_TILE + warp * 16 * MT; /* this warp's first query */
	s_stage_rows<HD, NT>(ks[0], k + kvbase, 0, T, ld);
	s_stage_rows<HD, NT>(vs[0], v + kvbase, 0, T, ld);
	s_cp_commit();
	uint32_t qa[MT][HD / 16][4];
	FA_UNROLL
	for (int m = 0; m < MT; m++)
		s_load_a<HD>(qa[m], q + base, r0 + 16 * m, T, g, tig, ld);
	float o[MT][HD / 8][4];
	/* per tile m, rows g and g + 8: the running max of the raw scores
	 * and the sum of 2^(score * scale_log2 - max * scale_log2) */
	float mx[MT][2], sum[MT][2];
	FA_UNROLL
	for (int m = 0; m < MT; m++) {
		FA_UNROLL
		for (int dt = 0; dt < HD / 8; dt++)
			o[m][dt][0] = o[m][dt][1] = o[m][dt][2] = o[m][dt][3] = 0.0f;
		mx[m][0] = mx[m][1] = -INFINITY;
		sum[m][0] = sum[m][1] = 0.0f;
	}
	for (int kt = 0; kt <= qt; kt++) {
		const int buf = kt & 1;
		if (kt < qt) {
			s_stage_rows<HD, NT>(ks[buf ^ 1], k + kvbase, (kt + 1) * FA_TILE, T, ld);
			s_stage_rows<HD, NT>(vs[buf ^ 1], v + kvbase, (kt + 1) * FA_TILE, T, ld);
			s_cp_commit();
			s_cp_wait<1>();
		} else {
			s_cp_wait<0>();
		}
		__syncthreads(); /* tile kt is in for every thread's copies */
		float s[MT][FA_TILE / 8][4];
		s_times_rows_m<HD, MT>(s, qa, ks[buf], lane);
		if (kt == qt) /* the diagonal tile: keys after the query masked (keys past T occur only here) */
			FA_UNROLL
			for (int m = 0; m < MT; m++)
				FA_UNROLL
				for (int nt = 0; nt < FA_TILE / 8; nt++)
					FA_UNROLL
					for (int e = 0; e < 4; e++) {
						const int row = r0 + 16 * m + g + (e >> 1) * 8,
							  col = kt * FA_TILE + nt * 8 + 2 * tig + (e & 1);
						if (col > row || col >= T)
							s[m][nt][e] = -INFINITY;
					}
		FA_UNROLL
		for (int m = 0; m < MT; m++) {
			/* each row's new max; every row has key kt * 64 <= row
			 * unmasked, so the max is finite */
			float nmx[2] = {mx[m][0], mx[m][1]};
			FA_UNROLL
			for (int nt = 0; nt < FA_TILE / 8; nt++)
				FA_UNROLL
				for (int e = 0; e < 4; e++)
					nmx[e >> 1] = fmaxf(nmx[e >> 1], s[m][nt][e]);
			float mxs[2];
			FA_UNROLL
			for (int h = 0; h < 2; h++) {
				/* the 4 lanes of a group hold a row between them */
				nmx[h] = fmaxf(nmx[h], __shfl_xor_sync(0xffffffffu, nmx[h], 1));
				nmx[h] = fmaxf(nmx[h], __shfl_xor_sync(0xffffffffu, nmx[h], 2));
				const float alpha = cuda_ex2_approx((mx[m][h] - nmx[h]) * scale_log2);
				mx[m][h] = nmx[h];
				mxs[h] = nmx[h] * scale_log2;
				sum[m][h] *= alpha;
				FA_UNROLL
				for (int dt = 0; dt < HD / 8; dt++) {
					o[m][dt][2 * h] *= alpha;
					o[m][dt][2 * h + 1] *= alpha;
				}
			}
			FA_UNROLL
			for (int nt = 0; nt < FA_TILE / 8; nt++)
				FA_UNROLL
				for (int e = 0; e < 4; e++) {
					const float p = cuda_ex2_approx(fmaf(s[m][nt][e], scale_log2, -mxs[e >> 1]));
					sum[m][e >> 1] += p;
					s[m][nt][e] = p;
				}
		}
		/* o (16 x HD) += p (16 x 64) @ v (64 x HD), per tile */
		FA_UNROLL
		for (int kk = 0; kk < FA_TILE / 16; kk++) {
			uint32_t pa[MT][4];
			FA_UNROLL
			for (int m = 0; m < MT; m++)
				s_acc_to_a(pa[m], s[m][2 * kk], s[m][2 * kk + 1]);
			s_times_tile_m<HD, MT>(o, pa, vs[buf], kk, lane);
		}
		__syncthreads(); /* every warp is done with buf before it is refilled */
	}
	const int C = H * HD, b = bh / H, head = bh % H;
	FA_UNROLL
	for (int m = 0; m < MT; m++)
		FA_UNROLL
		for (int h = 0; h < 2; h++) {
			sum[m][h] += __shfl_xor_sync(0xffffffffu, sum[m][h], 1);
			sum[m][h] += __shfl_xor_sync(0xffffffffu, sum[m][h], 2);
			const int row = r0 + 16 * m + g + h * 8;
			if (row >= T)
				continue;
			const float inv = 1.0f / sum[m][h];
			const size_t at = ((size_t)b * T + row) * C + (size_t)head * HD;
			FA_UNROLL
			for (int dt = 0; dt < HD / 8; dt++) {
				const int d = dt * 8 + 2 * tig;
				const float y0 = o[m][dt][2 * h] * inv, y1 = o[m][dt][2 * h + 1] * inv;
				if (out) {
					out[at + d] = y0;
					out[at + d + 1] = y1;
				}
				if (out16)
					*reinterpret_cast<__nv_bfloat162 *>(out16 + at + d) =
						__floats2bfloat162_rn(y0, y1);
			}
			if (tig == 0)
				lse2[(size_t)bh * T + row] = mx[m][h] * scale_log2 + log2f(sum[m][h]);
		}
}

/* D (B*H, T) = rowsum(dy * y): one warp per row, dy (B*H, T, HD) bf16 and
 * y16 (B, T, C) bf16 */
template <int HD>
__global__ void k_flash_rowdot(float *D, const bf16 *dy, const bf16 *y16, int T, int H, int rows)
{
	const int row = (int)(blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32), lane = threadIdx.x % 32;
	if (row >= rows)
		return;
	const int bh = row / T, t = row % T, b = bh / H, head = bh % H;
	const bf16 *a = dy + (size_t)row * HD, *y = y16 + ((size_t)b * T + t) * H * HD + (size_t)head * HD;
	float acc = 0.0f;
	for (int d = lane; d < HD; d += 32)
		acc += __bfloat162float(a[d]) * __bfloat162float(y[d]);
	FA_UNROLL
	for (int o = 16; o > 0; o /= 2)
		acc += __shfl_xor_sync(0xffffffffu, acc, o);
	if (lane == 0)
		D[row] = acc;
}

/* dy's head split and D together: one block per row (b, t) of dout (B, T, C)
 * fp32 or bf16, thread i its channels 4 i .. 4 i + 3 (one load; dout rows
 * 16-byte aligned for fp32, 8 for bf16, y16's 8, C / 4 <= 1024): dy
 * (B*H, T, HD) = bf16 of them,
 * and D (B*H, T) = the sum over the head's HD / 4 threads (adjacent, within
 * a warp) of bf16(dout) * y16, the head split and k_flash_rowdot in one
 * read of dout. */
template <int HD, typename TD>
__global__ void k_flash_dy_rowdot(bf16 *dy, float *D, const TD *dout, const bf16 *y16, int T, int H)
{
	constexpr int GROUP = HD / 4; /* threads of a head: 4, 8 or 16 */
	const int C = H * HD, t = (int)(blockIdx.x % (unsigned)T), b = (int)(blockIdx.x / (unsigned)T);
	const int c = 4 * (int)threadIdx.x, head = c / HD, d = c - head * HD;
	const bool in = c < C;
	float acc = 0.0f;
	if (in) {
		const size_t row = (size_t)blockIdx.x * C;
		const float4 g = cuda_ld4f(dout + row + c);
		const __nv_bfloat162 g01 = __floats2bfloat162_rn(g.x, g.y), g23 = __floats2bfloat162_rn(g.z, g.w);
		const __nv_bfloat162 *y = reinterpret_cast<const __nv_bfloat162 *>(y16 + row + c);
		const float2 a = __bfloat1622float2(g01), bb = __bfloat1622float2(g23);
		const float2 y0 = __bfloat1622float2(y[0]), y1 = __bfloat1622float2(y[1]);
		acc = (a.x * y0.x + a.y * y0.y) + (bb.x * y1.x + bb.y * y1.y);
		__nv_bfloat162 *out = reinterpret_cast<__nv_bfloat162 *>(
			dy + (((size_t)b * H + head) * T + t) * HD + d);
		out[0] = g01;
		out[1] = g23;
	}
	FA_UNROLL
	for (int o = GROUP / 2; o > 0; o /= 2)
		acc += __shfl_xor_sync(0xffffffffu, acc, o);
	if (in && d == 0)
		D[((size_t)b * H + head) * T + t] = acc;
}

/* A pair of gradient values (columns col, col + 1 of a row: the part's
 * first column + head HD + d) into row (b, t) of dqkv / dqkv16 (B, T, ld),
 * either may be NULL */
__device__ __forceinline__ void s_put_grad(float *dqkv, bf16 *dqkv16, int b, int t, int T, int ld,
                                           int col, float g0, float g1)
{
	const size_t at = ((size_t)b * T + t) * (size_t)ld + (size_t)col;
	if (dqkv) {
		dqkv[at] = g0;
		dqkv[at + 1] = g1;
	}
	if (dqkv16)
		*reinterpret_cast<__nv_bfloat162 *>(dqkv16 + at) = __floats2bfloat162_rn(g0, g1);
}

/* The column sums of a block's 64 rows of an accumulator set x (each warp
 * 16 rows: g and g + 8 of each lane, valid[h] false for rows past T), times
 * mul, into partial[c0 + col] (HD columns): the warp's rows by shuffles
 * over the 8 groups, then the 4 warps in order through red. Every thread
 * of the block calls it. */
template <int HD>
__device__ __forceinline__ void s_block_colsum(float *partial, float (*red)[HD],
                                               const float x[HD / 8][4], const bool valid[2],
                                               float mul, int warp, int g, int tig)
{
	FA_UNROLL
	for (int dt = 0; dt < HD / 8; dt++)
		FA_UNROLL
		for (int j = 0; j < 2; j++) {
			float v = (valid[0] ? x[dt][j] * mul : 0.0f) + (valid[1] ? x[dt][2 + j] * mul : 0.0f);
			v += __shfl_xor_sync(0xffffffffu, v, 4);
			v += __shfl_xor_sync(0xffffffffu, v, 8);
			v += __shfl_xor_sync(0xffffffffu, v, 16);
			if (g == 0)
				red[warp][dt * 8 + 2 * tig + j] = v;
		}
	__syncthreads();
	for (int c = threadIdx.x; c < HD; c += FA_THREADS) {
		float s = 0.0f;
		FA_UNROLL
		for (int w = 0; w < FA_WARPS; w++)
			s += red[w][c];
		partial[c] = s;
	}
	__syncthreads(); /* red may be written again */
}

/* lse2 and D of queries q0 .. q0 + 63 into ls, ds by cp.async (not
 * committed); zeros past T, where every probability is masked */
__device__ __forceinline__ void s_stage_rowstats(float *ls, float *ds, const float *lse2,
                                                 const float *D, size_t at, int q0, int T)
{
	for (int i = threadIdx.x; i < 2 * FA_TILE; i += FA_THREADS) {
		const int r = i % FA_TILE;
		const bool in = q0 + r < T;
		const size_t src = in ? at + (size_t)(q0 + r) : 0;
		if (i < FA_TILE)
			s_cp<4>(&ls[r], lse2 + src, in);
		else
			s_cp<4>(&ds[r], D + src, in);
	}
}

/* dk, dv into dqkv / dqkv16: grid (B*KV, key tiles), key tile blockIdx.y
 * (the first has the most queries after it), KV head blockIdx.x % KV; the
 * query heads of its group in order, each over the query tiles at or after
 * the key tile. The q and dy tiles (and their rows' lse2 and D) are
 * double-buffered like forward's K and V. */
template <int HD>
__global__ void __launch_bounds__(FA_THREADS)
	k_flash_backward_kv(float *dqkv, bf16 *dqkv16, float *bias_partial, const uint16_t *q,
			    const uint16_t *k, const uint16_t *v, const uint16_t *dy, const float *lse2,
			    const float *D, int T, int H, int KV, float scale_log2, float scale)
{
	__shared__ __align__(16) uint16_t qs[2][FA_TILE][HD + FA_PAD];
	__shared__ __align__(16) uint16_t dys[2][FA_TILE][HD + FA_PAD];
	__shared__ __align__(16) float ls[2][FA_TILE], ds[2][FA_TILE];
	const int bkv = (int)blockIdx.x, kt = (int)blockIdx.y, n_tiles = (int)gridDim.y;
	const int b = bkv / KV, kvh = bkv % KV, group = H / KV;
	const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, g = lane / 4,
		  tig = lane % 4;
	const int ld = (int)FA_LD(H, KV, HD);
	const size_t kvbase = FA_BASE(b, kvh, T, ld, HD);
	const int k0 = kt * FA_TILE + warp * 16; /* this warp's first key */
	uint32_t ka[HD / 16][4], va[HD / 16][4];
	s_load_a<HD>(ka, k + kvbase, k0, T, g, tig, ld);
	s_load_a<HD>(va, v + kvbase, k0, T, g, tig, ld);
	float dka[HD / 8][4], dva[HD / 8][4];
	FA_UNROLL
	for (int dt = 0; dt < HD / 8; dt++)
		FA_UNROLL
		for (int e = 0; e < 4; e++)
			dka[dt][e] = dva[dt][e] = 0.0f;
	for (int j = 0; j < group; j++) {
		const int bh = b * H + kvh * group + j;
		const size_t base = FA_BASE(b, bh % H, T, ld, HD), rows_at = (size_t)bh * T;
		const uint16_t *dyb = dy + rows_at * HD; /* dy: (B*H, T, HD) */
		s_stage_rows<HD>(qs[0], q + base, kt * FA_TILE, T, ld);
		s_stage_rows<HD>(dys[0], dyb, kt * FA_TILE, T, HD);
		s_stage_rowstats(ls[0], ds[0], lse2, D, rows_at, kt * FA_TILE, T);
		s_cp_commit();
		for (int qt = kt; qt < n_tiles; qt++) {
			const int q0 = qt * FA_TILE, buf = (qt - kt) & 1;
			if (qt + 1 < n_tiles) {
				s_stage_rows<HD>(qs[buf ^ 1], q + base, q0 + FA_TILE, T, ld);
				s_stage_rows<HD>(dys[buf ^ 1], dyb, q0 + FA_TILE, T, HD);
				s_stage_rowstats(ls[buf ^ 1], ds[buf ^ 1], lse2, D, rows_at, q0 + FA_TILE, T);
				s_cp_commit();
				s_cp_wait<1>();
			} else {
				s_cp_wait<0>();
			}
			__syncthreads();
			/* s^T (16 keys x 64 queries) = k q^T, dp^T = v dy^T */
			float st[FA_TILE / 8][4], dpt[FA_TILE / 8][4];
			s_times_rows<HD>(st, ka, qs[buf], lane);
			s_times_rows<HD>(dpt, va, dys[buf], lane);
			/* p^T, and dS^T = p^T (dp^T - D); masked on the diagonal tile
			 * (query before key) and on the last (queries past T) */
			FA_UNROLL
			for (int nt = 0; nt < FA_TILE / 8; nt++)
				FA_UNROLL
				for (int e = 0; e < 4; e++)
					st[nt][e] = cuda_ex2_approx(
						fmaf(st[nt][e], scale_log2, -ls[buf][nt * 8 + 2 * tig + (e & 1)]));
			if (qt == kt || q0 + FA_TILE > T)
				FA_UNROLL
				for (int nt = 0; nt < FA_TILE / 8; nt++)
					FA_UNROLL
					for (int e = 0; e < 4; e++) {
						const int key = k0 + g + (e >> 1) * 8,
							  qi = q0 + nt * 8 + 2 * tig + (e & 1);
						if (qi < key || qi >= T)
							st[nt][e] = 0.0f;
					}
			FA_UNROLL
			for (int nt = 0; nt < FA_TILE / 8; nt++)
				FA_UNROLL
				for (int e = 0; e < 4; e++)
					dpt[nt][e] = st[nt][e] * (dpt[nt][e] - ds[buf][nt * 8 + 2 * tig + (e & 1)]);
			/* dv (16 x HD) += p^T @ dy, dk += dS^T @ q */
			FA_UNROLL
			for (int kk = 0; kk < FA_TILE / 16; kk++) {
				uint32_t pa[4], sa[4];
				s_acc_to_a(pa, st[2 * kk], st[2 * kk + 1]);
				s_acc_to_a(sa, dpt[2 * kk], dpt[2 * kk + 1]);
				s_times_tile<HD>(dva, pa, dys[buf], kk, lane);
				s_times_tile<HD>(dka, sa, qs[buf], kk, lane);
			}
			__syncthreads(); /* every warp is done with buf before it is refilled */
		}
	}
	const int C = H * HD, kcol = C + kvh * HD, vcol = C + (KV + kvh) * HD;
	FA_UNROLL
	for (int h = 0; h < 2; h++) {
		const int key = k0 + g + h * 8;
		if (key >= T)
			continue;
		FA_UNROLL
		for (int dt = 0; dt < HD / 8; dt++) {
			const int d = dt * 8 + 2 * tig;
			s_put_grad(dqkv, dqkv16, b, key, T, ld, kcol + d, dka[dt][2 * h] * scale,
				   dka[dt][2 * h + 1] * scale);
			s_put_grad(dqkv, dqkv16, b, key, T, ld, vcol + d, dva[dt][2 * h], dva[dt][2 * h + 1]);
		}
	}
	if (!bias_partial)
		return; /* the whole block: the argument is the same for all */
	/* this block's rows of the k and v bias gradients: chunk (b, key tile)
	 * of partial (B * key tiles, ld) */
	__shared__ float red[FA_WARPS][HD];
	const bool valid[2] = {k0 + g < T, k0 + g + 8 < T};
	float *row = bias_partial + ((size_t)b * n_tiles + kt) * ld;
	s_block_colsum<HD>(row + kcol, red, dka, valid, scale, warp, g, tig);
	s_block_colsum<HD>(row + vcol, red, dva, valid, 1.0f, warp, g, tig);
}

/* dq into dqkv / dqkv16: grid (B*H, query tiles), the last first; the K
 * and V tiles double-buffered */
/* three blocks (12 warps) an SM, as before q, k and v were read in place:
 * their runtime row stride took it to 174 registers, and two */
template <int HD>
__global__ void __launch_bounds__(FA_THREADS, 3)
	k_flash_backward_q(float *dqkv, bf16 *dqkv16, float *bias_partial, const uint16_t *q,
			   const uint16_t *k, const uint16_t *v, const uint16_t *dy, const float *lse2,
			   const float *D, int T, int H, int KV, float scale_log2, float scale)
{
	__shared__ __align__(16) uint16_t ks[2][FA_TILE][HD + FA_PAD];
	__shared__ __align__(16) uint16_t vs[2][FA_TILE][HD + FA_PAD];
	const int bh = (int)blockIdx.x, qt = (int)(gridDim.y - 1 - blockIdx.y);
	const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, g = lane / 4,
		  tig = lane % 4;
	const int ld = (int)FA_LD(H, KV, HD);
	const size_t base = FA_BASE(bh / H, bh % H, T, ld, HD);
	const size_t kvbase = FA_BASE(bh / H, (bh % H) / (H / KV), T, ld, HD);
	const int r0 = qt * FA_TILE + warp * 16;
	s_stage_rows<HD>(ks[0], k + kvbase, 0, T, ld);
	s_stage_rows<HD>(vs[0], v + kvbase, 0, T, ld);
	s_cp_commit();
	uint32_t qa[HD / 16][4], dya[HD / 16][4];
	s_load_a<HD>(qa, q + base, r0, T, g, tig, ld);
	s_load_a<HD>(dya, dy + (size_t)bh * T * HD, r0, T, g, tig, HD);
	float lrow[2], drow[2];
	FA_UNROLL
	for (int h = 0; h < 2; h++) {
		const int row = r0 + g + h * 8;
		lrow[h] = row < T ? lse2[(size_t)bh * T + row] : INFINITY;
		drow[h] = row < T ? D[(size_t)bh * T + row] : 0.0f;
	}
	float dqa[HD / 8][4];
	FA_UNROLL
	for (int dt = 0; dt < HD / 8; dt++)
		dqa[dt][0] = dqa[dt][1] = dqa[dt][2] = dqa[dt][3] = 0.0f;
	for (int kt = 0; kt <= qt; kt++) {
		const int buf = kt & 1;
		if (kt < qt) {
			s_stage_rows<HD>(ks[buf ^ 1], k + kvbase, (kt + 1) * FA_TILE, T, ld);
			s_stage_rows<HD>(vs[buf ^ 1], v + kvbase, (kt + 1) * FA_TILE, T, ld);
			s_cp_commit();
			s_cp_wait<1>();
		} else {
			s_cp_wait<0>();
		}
		__syncthreads();
		/* s (16 x 64) = q k^T, dp = dy v^T */
		float s[FA_TILE / 8][4], dp[FA_TILE / 8][4];
		s_times_rows<HD>(s, qa, ks[buf], lane);
		s_times_rows<HD>(dp, dya, vs[buf], lane);
		FA_UNROLL
		for (int nt = 0; nt < FA_TILE / 8; nt++)
			FA_UNROLL
			for (int e = 0; e < 4; e++)
				s[nt][e] = cuda_ex2_approx(fmaf(s[nt][e], scale_log2, -lrow[e >> 1]));
		if (kt == qt) /* the diagonal tile */
			FA_UNROLL
			for (int nt = 0; nt < FA_TILE / 8; nt++)
				FA_UNROLL
				for (int e = 0; e < 4; e++) {
					const int row = r0 + g + (e >> 1) * 8,
						  col = kt * FA_TILE + nt * 8 + 2 * tig + (e & 1);
					if (col > row || col >= T)
						s[nt][e] = 0.0f;
				}
		FA_UNROLL
		for (int nt = 0; nt < FA_TILE / 8; nt++)
			FA_UNROLL
			for (int e = 0; e < 4; e++)
				dp[nt][e] = s[nt][e] * (dp[nt][e] - drow[e >> 1]);
		/* dq (16 x HD) += dS (16 x 64) @ k (64 x HD) */
		FA_UNROLL
		for (int kk = 0; kk < FA_TILE / 16; kk++) {
			uint32_t sa[4];
			s_acc_to_a(sa, dp[2 * kk], dp[2 * kk + 1]);
			s_times_tile<HD>(dqa, sa, ks[buf], kk, lane);
		}
		__syncthreads(); /* every warp is done with buf before it is refilled */
	}
	FA_UNROLL
	for (int h = 0; h < 2; h++) {
		const int row = r0 + g + h * 8;
		if (row >= T)
			continue;
		FA_UNROLL
		for (int dt = 0; dt < HD / 8; dt++)
			s_put_grad(dqkv, dqkv16, bh / H, row, T, ld, (bh % H) * HD + dt * 8 + 2 * tig,
				   dqa[dt][2 * h] * scale, dqa[dt][2 * h + 1] * scale);
	}
	if (!bias_partial)
		return;
	__shared__ float red[FA_WARPS][HD];
	const bool valid[2] = {r0 + g < T, r0 + g + 8 < T};
	s_block_colsum<HD>(bias_partial + ((size_t)(bh / H) * gridDim.y + qt) * ld + (size_t)(bh % H) * HD,
			   red, dqa, valid, scale, warp, g, tig);
}

/* The fragment plumbing alone, for gpu-kernels (cuda_flash_mma_probe):
 * x = a @ b1 and y = a @ b2 through s_load_a, s_frag_b_nk and s_mma, then
 * d2 = [x y] @ b3 through s_acc_to_a, as p v uses it; d1 gets x; d3 =
 * a @ [b1 b2] through s_times_tile from a row-major copy (ldmatrix.trans). */
__global__ void k_flash_mma_probe(float *d1, float *d2, float *d3, const uint16_t *a,
                                  const uint16_t *bt)
{
	__shared__ __align__(16) uint16_t sh[32][16 + FA_PAD];  /* b1, b2, b3 transposed, zeros */
	__shared__ __align__(16) uint16_t shk[16][16 + FA_PAD]; /* [b1 b2] itself */
	const int lane = (int)threadIdx.x, g = lane / 4, tig = lane % 4;
	for (int i = lane; i < 32 * 16; i += 32)
		sh[i / 16][i % 16] = i < 24 * 16 ? bt[i] : 0;
	for (int i = lane; i < 16 * 16; i += 32)
		shk[i / 16][i % 16] = bt[(i % 16) * 16 + i / 16];
	__syncthreads();
	uint32_t af[1][4], b[4], pa[4];
	s_load_a<16>(af, a, 0, 16, g, tig, 16);
	float x[4] = {0.0f, 0.0f, 0.0f, 0.0f}, y[4] = {0.0f, 0.0f, 0.0f, 0.0f}, z[4] = {0.0f, 0.0f, 0.0f, 0.0f};
	float w[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
	s_frag_b_nk(b, sh, 0, 0, lane); /* b1 and b2 */
	s_mma(x, af[0], b);
	s_mma(y, af[0], b + 2);
	s_acc_to_a(pa, x, y);
	s_frag_b_nk(b, sh, 16, 0, lane); /* b3 and zeros */
	s_mma(z, pa, b);
	s_times_tile<16>(w, af[0], shk, 0, lane);
	FA_UNROLL
	for (int e = 0; e < 4; e++) {
		const int row = g + (e >> 1) * 8, col = 2 * tig + (e & 1);
		d1[row * 8 + col] = x[e];
		d2[row * 8 + col] = z[e];
		d3[row * 16 + col] = w[0][e];
		d3[row * 16 + 8 + col] = w[1][e];
	}
}

extern "C" void cuda_flash_mma_probe(float *d1, float *d2, float *d3, const uint16_t *a,
                                     const uint16_t *bt, cudaStream_t stream)
{
	k_flash_mma_probe<<<1, 32, 0, stream>>>(d1, d2, d3, a, bt);
	CUDA_CHECK_LAUNCH();
}

extern "C" bool cuda_flash_supported(int C, int H)
{
	if (H < 1 || C % H != 0)
		return false;
	const int hd = C / H;
	return hd == 16 || hd == 32 || hd == 64;
}

static void s_require(int T, int C, int H, int KV)
{
	if (KV < 1 || H % KV != 0) {
		fprintf(stderr,
			"ringworker: fatal: fused attention with %d query heads and %d KV heads: the "
			"query heads must be a multiple of the KV heads\n",
			H, KV);
		exit(CUDA_EXIT_MISUSE);
	}
	if (!cuda_flash_supported(C, H)) {
		fprintf(stderr,
			"ringworker: fatal: fused attention with a head size of %d (n_embd %d / n_head "
			"%d): only 16, 32 and 64 are built\n",
			H > 0 ? C / H : 0, C, H);
		exit(CUDA_EXIT_MISUSE);
	}
	if ((long long)T * (C + 2LL * KV * (C / H)) >= 2147483647LL) { /* a head's rows are addressed in int */
		fprintf(stderr,
			"ringworker: fatal: fused attention over %d x %lld elements a sequence: more "
			"than 2^31\n",
			T, (long long)C + 2LL * KV * (C / H));
		exit(CUDA_EXIT_MISUSE);
	}
}

#define FA_DISPATCH(hd, launch)                                                                   \
	do {                                                                                      \
		if ((hd) == 16)                                                                   \
			launch(16);                                                               \
		else if ((hd) == 32)                                                              \
			launch(32);                                                               \
		else                                                                              \
			launch(64);                                                               \
	} while (0)

extern "C" void cuda_flash_forward(float *out, uint16_t *out16, float *lse2, const uint16_t *qkv16,
                                   int B, int T, int C, int H, int KV, cudaStream_t stream)
{
	s_require(T, C, H, KV);
	const int hd = C / H;
	const uint16_t *q = qkv16, *k = qkv16 + C, *v = qkv16 + C + KV * hd;
	const float scale_log2 = LOG2E / sqrtf((float)hd);
	const dim3 grid((unsigned)(B * H), (unsigned)((T + FA_TILE - 1) / FA_TILE));
	bf16 *o16 = reinterpret_cast<bf16 *>(out16);
#define FWD(HD)                                                                                  \
	k_flash_forward<HD><<<grid, FA_FWD_THREADS, 0, stream>>>(out, o16, lse2, q, k, v, T, H, KV, scale_log2)
	FA_DISPATCH(hd, FWD);
#undef FWD
	CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_flash_backward(float *dqkv, uint16_t *dqkv16, float *dbias, const float *dout,
                                    const uint16_t *dout16, const uint16_t *qkv16,
                                    const uint16_t *out16, const float *lse2,
                                    const cuda_attention_scratch_t *s, int B, int T, int C, int H,
                                    int KV, cudaStream_t stream)
{
	s_require(T, C, H, KV);
	const int hd = C / H, rows = B * H * T;
	const uint16_t *q = qkv16, *k = qkv16 + C, *v = qkv16 + C + KV * hd;
	const float scale = 1.0f / sqrtf((float)hd), scale_log2 = LOG2E * scale;
	bf16 *d16 = reinterpret_cast<bf16 *>(dqkv16);
	const bf16 *y16 = reinterpret_cast<const bf16 *>(out16);
	if (!dout == !dout16) {
		fprintf(stderr, "ringworker: fatal: cuda_flash_backward: exactly one of dout and dout16\n");
		exit(CUDA_EXIT_MISUSE);
	}
	const bf16 *g16 = reinterpret_cast<const bf16 *>(dout16);
	const bool dout_aligned = dout ? (uintptr_t)dout % 16 == 0 : (uintptr_t)dout16 % 8 == 0;
	if (C % 4 == 0 && C / 4 <= 1024 && dout_aligned && (uintptr_t)out16 % 8 == 0) {
		const unsigned threads = (unsigned)((C / 4 + 31) / 32 * 32);
		bf16 *dy16 = reinterpret_cast<bf16 *>(s->dy);
#define DYROW(HD)                                                                                       \
	do {                                                                                            \
		if (dout)                                                                               \
			k_flash_dy_rowdot<HD, float><<<(unsigned)(B * T), threads, 0, stream>>>(dy16, s->rowdot, dout, \
											 y16, T, H);            \
		else                                                                                    \
			k_flash_dy_rowdot<HD, bf16><<<(unsigned)(B * T), threads, 0, stream>>>(dy16, s->rowdot, g16,  \
											 y16, T, H);            \
	} while (0)
		FA_DISPATCH(hd, DYROW);
#undef DYROW
	} else {
		if (dout)
			cuda_heads_split(s->dy, dout, B, T, C, H, stream);
		else
			cuda_heads_split16(s->dy, dout16, B, T, C, H, stream);
		const bf16 *dy16 = reinterpret_cast<const bf16 *>(s->dy);
#define ROWDOT(HD) \
	k_flash_rowdot<HD><<<(unsigned)((rows + 7) / 8), 256, 0, stream>>>(s->rowdot, dy16, y16, T, H, rows)
		FA_DISPATCH(hd, ROWDOT);
#undef ROWDOT
	}
	CUDA_CHECK_LAUNCH();
	const int n_tiles = (T + FA_TILE - 1) / FA_TILE;
	const dim3 grid((unsigned)(B * H), (unsigned)n_tiles), grid_kv((unsigned)(B * KV), (unsigned)n_tiles);
	float *part = dbias ? s->bias_partial : NULL;
#define DKV(HD)                                                                                   \
	k_flash_backward_kv<HD><<<grid_kv, FA_THREADS, 0, stream>>>(dqkv, d16, part, q, k, v, s->dy,   \
								    lse2, s->rowdot, T, H, KV,         \
								    scale_log2, scale)
	FA_DISPATCH(hd, DKV);
#undef DKV
	CUDA_CHECK_LAUNCH();
#define DQ(HD)                                                                                   \
	k_flash_backward_q<HD><<<grid, FA_THREADS, 0, stream>>>(dqkv, d16, part, q, k, v, s->dy,       \
								lse2, s->rowdot, T, H, KV, scale_log2, \
								scale)
	FA_DISPATCH(hd, DQ);
#undef DQ
	CUDA_CHECK_LAUNCH();
	if (dbias) /* the chunks (b, tile) in order */
		cuda_colsum_add(dbias, part, B * n_tiles, C + 2 * KV * hd, stream);
}
