/*
 * matmul: the engine's GEMMs through oneDNN's matmul primitive, with the
 * primitives cached by shape.
 *
 * Creating a oneDNN primitive costs milliseconds (it picks and JIT-compiles a
 * kernel), so a cache keeps one per distinct (shape, transposition, bias,
 * accumulate) and a training step only looks them up. Transposed operands are
 * described with strides, never copied. Private to worker/engine/.
 */
#ifndef RINGMASTER_ENGINE_MATMUL_H
#define RINGMASTER_ENGINE_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct matmul_cache matmul_cache_t;

/*
 * A cache of matmul primitives on the CPU engine. With `bf16`, the A and B
 * operands of matmul_run are bf16 (uint16_t bit patterns) and the output stays
 * fp32 (fp32 accumulation); on a CPU where oneDNN has no bf16 matmul the
 * operands are widened to fp32 copies first (matmul.c says why that is the
 * same arithmetic). Returns NULL and writes `err` when oneDNN cannot be
 * initialised.
 */
matmul_cache_t *matmul_cache_create(bool bf16, char *err, size_t errlen);

/* Free the cache and its primitives; accepts NULL. */
void matmul_cache_free(matmul_cache_t *c);

/*
 * C (M, N) = op(A) (M, K) @ op(B) (K, N) [+ bias (N)] [+ C when accumulate].
 * A is stored row-major as (M, K), or as (K, M) when trans_a; B as (K, N), or
 * as (N, K) when trans_b; C as (M, N). A and B are float, or uint16_t bf16 in
 * a bf16 cache. bias may be NULL. Creates the primitive on first use of a
 * shape; exits with EX_SOFTWARE (70) and a message if oneDNN fails (a
 * programming or library error, not a user error).
 */
void matmul_run(matmul_cache_t *c, int M, int N, int K, const void *A, bool trans_a, const void *B,
                bool trans_b, const float *bias, float *C, bool accumulate);

/*
 * matmul_run on sub-matrices: A's stored rows are `lda` elements apart (0:
 * dense, K or M when trans_a) and C's rows `ldc` apart (0: dense, N), so a
 * block of columns of a wider matrix is used in place.
 */
void matmul_run_ld(matmul_cache_t *c, int M, int N, int K, const void *A, int64_t lda, bool trans_a,
                   const void *B, bool trans_b, const float *bias, float *C, int64_t ldc,
                   bool accumulate);

/* Number of primitives created so far (for tests). */
int matmul_cache_size(const matmul_cache_t *c);

#endif
