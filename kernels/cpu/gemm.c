// kernels/cpu/gemm.c — the CPU matrix product C = alpha * op(A) op(B) + beta * C.
//
// Own code rather than a BLAS, for one reason: the determinism contract of
// cpu_ops.h. C[m,n] must depend only on row m of op(A), column n of op(B), C[m,n],
// alpha, beta and K, so that computing a sequence token by token (M = 1 per call)
// gives bit for bit what one batched call gives, and so that 1 or 16 threads agree.
// A BLAS picks its blocking, kernels and thread split from M, N and the thread
// count, and so changes the summation order of an element with them.
//
// The arithmetic every element goes through, whatever its position:
//   for each K block [p, p+kc) of the fixed compile-time size GEMM_KC (last one
//   shorter), in ascending order:
//     acc = 0;  acc = fma(a[k], b[k], acc) for k ascending
//     C   = fma(alpha, acc, base),  base = 0        first block, beta == 0 (C not read)
//                                   base = beta*C   first block, beta != 0
//                                   base = C        later blocks
// fma is a fused multiply-add (one rounding). It is spelled out with intrinsics on
// x86 with FMA/AVX-512 rather than left to -ffp-contract=fast: contraction is decided
// per compiled copy of the code (inlining, unswitching, cloning), and an early
// version whose C update was left to the compiler fused it in the 8-row kernel but
// not in the 1-row one, so row-at-a-time results differed from batched ones in the
// last bit. Only GEMM_KC enters the arithmetic; MR, NR, MC, NC and the thread split
// are pure scheduling, so builds for different vector widths agree bit for bit as
// long as both have FMA (checked: GCC AVX2+FMA, GCC AVX-512 and Clang AVX-512 builds
// give identical results; a build without FMA rounds every product and differs).
//
// Structure (the GotoBLAS/BLIS scheme):
//   * op(A) is packed into MR-row slivers (a[k*MR + i]) and op(B) into NR-column
//     slivers (b[k*NR + j], zero-padded to NR), each for one K block. Packing makes
//     the four transpose cases one kernel and makes every load unit-stride.
//   * The micro-kernel keeps an mr x NR tile of accumulators in vector registers
//     (mr <= MR rows, a compile-time constant per instantiation, so the M edge costs
//     no wasted work and M = 1 runs a 1-row kernel) and walks the K block once.
//     An N-edge tile (fewer than NR valid columns) runs the same kernel on a local
//     NR-wide copy of C, so edge elements see exactly the arithmetic of interior ones.
//   * Cache blocking: a B sliver (KC x NR, 32 KiB) stays in L1 while the MR-row
//     slivers of an MC x KC block of A stream from L2; the KC x NC panel of B lives
//     in L2/L3 and is reused by all MC blocks.
//   * Threads: in a parallel step every tile of C is updated by exactly one thread,
//     and K blocks of one tile are applied in order (separated by barriers), so the
//     split among threads never changes a bit.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#define GEMM_OMP(x) _Pragma(#x)
#else
#define GEMM_OMP(x)
#endif
#include "cpu_ops.h"

// The one constant that enters the arithmetic (see the header). 256 keeps a
// KC x NR sliver of B at 32 KiB (L1) in both precisions.
#define GEMM_KC 256

// ---- vector type and micro-tile shape ------------------------------------------------
// GCC/Clang vector extensions: portable to every target those compilers support
// (SSE, AVX, AVX-512, NEON, ...); the width follows the predefined ISA macros. A
// compiler without them gets vreal = real (VL = 1), i.e. plain scalar loops.
// Registers: MR*NV accumulators + NV B vectors + 1 broadcast must fit the register
// file (32 with AVX-512, 16 with AVX/SSE).
//
// vbcast(a): a in every lane. vfma(a, b, c) = a*b + c with one rounding, lane by
// lane: explicit (intrinsics) where the ISA macros say FMA exists, see the header
// for why. Elsewhere a plain a*b + c, which is exactly the arithmetic of the header
// without FMA hardware (x86-64 before Haswell, generic SSE builds: nothing can be
// fused). On other FMA hardware (e.g. AArch64) fusion is left to the compiler, and
// the row-independence tests of tests/kernels/test_dense_ops.c vouch for the build.
#if defined(__GNUC__) || defined(__clang__)
#if defined(__AVX512F__)
#define GEMM_AVX512 1            // also enables the transposing B packer below
#define GEMM_VBYTES 64
#define GEMM_MR 8
#elif defined(__AVX__)
#define GEMM_VBYTES 32
#define GEMM_MR 6
#else
#define GEMM_VBYTES 16
#define GEMM_MR 6
#endif
typedef real vreal __attribute__((vector_size(GEMM_VBYTES)));
#define GEMM_VL ((int)(GEMM_VBYTES / sizeof(real)))
#define GEMM_NV 2
#define GEMM_INLINE static inline __attribute__((always_inline))
#define VZERO ((vreal){0})
#if defined(__AVX512F__) || (defined(__AVX__) && defined(__FMA__))
#include <immintrin.h>
#endif
#if defined(__AVX512F__) && defined(NSA_REAL_F64)
#define vbcast(a) ((vreal)_mm512_set1_pd(a))
#define vfma(a, b, c) ((vreal)_mm512_fmadd_pd((__m512d)(a), (__m512d)(b), (__m512d)(c)))
#elif defined(__AVX512F__)
#define vbcast(a) ((vreal)_mm512_set1_ps(a))
#define vfma(a, b, c) ((vreal)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#elif defined(__AVX__) && defined(__FMA__) && defined(NSA_REAL_F64)
#define vbcast(a) ((vreal)_mm256_set1_pd(a))
#define vfma(a, b, c) ((vreal)_mm256_fmadd_pd((__m256d)(a), (__m256d)(b), (__m256d)(c)))
#elif defined(__AVX__) && defined(__FMA__)
#define vbcast(a) ((vreal)_mm256_set1_ps(a))
#define vfma(a, b, c) ((vreal)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#else
// A scalar operand of a vector op is broadcast. (+0 is exact except -0 -> +0,
// harmless for a factor of a product.)
#define vbcast(a) (VZERO + (a))
#define vfma(a, b, c) ((a) * (b) + (c))
#endif
#else
typedef real vreal;
#define GEMM_VL 1
#define GEMM_NV 8
#define GEMM_MR 4
#define GEMM_INLINE static inline
#define VZERO ((real)0)
#define vbcast(a) (a)
#define vfma(a, b, c) ((a) * (b) + (c))
#endif
#define GEMM_NR (GEMM_VL * GEMM_NV)
// MC x KC block of packed A: ~192 KiB, well inside a 1 MiB+ L2 (multiple of MR).
#define GEMM_MC ((196608 / (GEMM_KC * (int)sizeof(real))) / GEMM_MR * GEMM_MR)
// KC x NC panel of packed B: 4 MiB, shared by the threads (L3).
#define GEMM_NC ((4194304 / (GEMM_KC * (int)sizeof(real))) / GEMM_NR * GEMM_NR)

// The base the tile of C is updated from after a K block (see the header).
enum { UPD_SET = 0, UPD_SCALE = 1, UPD_ADD = 2 };

// ---- micro-kernel ---------------------------------------------------------------------
// C[0:mr, 0:NR] (row stride ldc) <- update(acc), acc = A sliver x B sliver over kc.
// ap: packed A sliver a[k*MR + i]; bp: packed B sliver b[k*NR + j] (64-byte aligned).
// Called with a literal mr so that the accumulator array is fully unrolled into
// registers. Every element of every tile is computed by this code.
GEMM_INLINE void ukernel(const int mr, int kc, const real *restrict ap,
                         const real *restrict bp, real *restrict c, int64_t ldc,
                         real alpha, real beta, int upd) {
    vreal acc[GEMM_MR][GEMM_NV];
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < GEMM_NV; v++) acc[i][v] = VZERO;
    const vreal *bv = (const vreal *)bp;
    for (int k = 0; k < kc; k++) {
        vreal b[GEMM_NV];
        for (int v = 0; v < GEMM_NV; v++) b[v] = bv[k * GEMM_NV + v];
        for (int i = 0; i < mr; i++) {
            vreal a = vbcast(ap[k * GEMM_MR + i]);
            for (int v = 0; v < GEMM_NV; v++) acc[i][v] = vfma(a, b[v], acc[i][v]);
        }
    }
    // C rows are not aligned in general: load/store through memcpy (one unaligned
    // vector move each).
    vreal va = vbcast(alpha), vb = vbcast(beta);
    for (int i = 0; i < mr; i++) {
        for (int v = 0; v < GEMM_NV; v++) {
            real *cp = c + i * ldc + v * GEMM_VL;
            vreal base = VZERO;
            if (upd != UPD_SET) {
                memcpy(&base, cp, sizeof base);
                if (upd == UPD_SCALE) base = vb * base;
            }
            vreal cv = vfma(va, acc[i][v], base);
            memcpy(cp, &cv, sizeof cv);
        }
    }
}

// One instantiation per row count: the M edge of a problem (and M = 1) runs a kernel
// of exactly its height instead of a padded MR-row one.
static void ukernel_mr(int mr, int kc, const real *restrict ap, const real *restrict bp,
                       real *restrict c, int64_t ldc, real alpha, real beta, int upd) {
#define UK(n) case n: ukernel(n, kc, ap, bp, c, ldc, alpha, beta, upd); break;
    switch (mr) {
    UK(1) UK(2) UK(3) UK(4)
#if GEMM_MR > 4
    UK(5) UK(6)
#endif
#if GEMM_MR > 6
    UK(7) UK(8)
#endif
    default: break;
    }
#undef UK
}

// Apply the kernel to rows [0, mr) and columns [0, nr) of C at c. A full-width tile
// is updated in place; an N-edge tile goes through a local NR-wide copy (C is read
// only when the update reads it), so it gets the very same kernel code.
static void tile(int mr, int nr, int kc, const real *ap, const real *bp, real *c,
                 int64_t ldc, real alpha, real beta, int upd) {
    if (nr == GEMM_NR) {
        ukernel_mr(mr, kc, ap, bp, c, ldc, alpha, beta, upd);
        return;
    }
    real t[GEMM_MR * GEMM_NR];
    memset(t, 0, sizeof t);
    if (upd != UPD_SET)
        for (int i = 0; i < mr; i++) memcpy(t + i * GEMM_NR, c + i * ldc, (size_t)nr * sizeof(real));
    ukernel_mr(mr, kc, ap, bp, t, GEMM_NR, alpha, beta, upd);
    for (int i = 0; i < mr; i++) memcpy(c + i * ldc, t + i * GEMM_NR, (size_t)nr * sizeof(real));
}

// ---- packing ----------------------------------------------------------------------------
// Rows [m0, m0+mc) x K block [k0, k0+kc) of op(A) into MR-row slivers, sliver s at
// dst + s*MR*kc, element (i, k) at k*MR + i. Rows past the edge are not written
// (the edge kernel does not read them).
static void pack_a(int transA, const real *A, int64_t lda, int m0, int mc, int k0, int kc,
                   real *restrict dst) {
    for (int s = 0; s * GEMM_MR < mc; s++) {
        int mr = mc - s * GEMM_MR < GEMM_MR ? mc - s * GEMM_MR : GEMM_MR;
        real *d = dst + (size_t)s * GEMM_MR * kc;
        int r0 = m0 + s * GEMM_MR;
        if (!transA) {           // A[M,K]: row r contiguous in k
            for (int i = 0; i < mr; i++) {
                const real *src = A + (int64_t)(r0 + i) * lda + k0;
                for (int k = 0; k < kc; k++) d[k * GEMM_MR + i] = src[k];
            }
        } else {                 // A[K,M]: for each k, the rows are contiguous
            for (int k = 0; k < kc; k++) {
                const real *src = A + (int64_t)(k0 + k) * lda + r0;
                for (int i = 0; i < mr; i++) d[k * GEMM_MR + i] = src[i];
            }
        }
    }
}

#ifdef GEMM_AVX512
// In-register transpose of a VL x VL block (16x16 floats / 8x8 doubles) for packing
// B[N,K] (transB): rows of B (contiguous in k) become rows of the sliver (contiguous
// in n). Four (three) shuffle stages; the last two transpose the 4x4 grid of 128-bit
// lanes. Packing only moves values, so this changes no arithmetic; it exists because
// with M = 1 the scalar transpose costs several times the multiply itself.
// src: row i at src + i*lds; dst: row k at dst + k*GEMM_NR (64-byte aligned).
static void transpose_block(const real *src, int64_t lds, real *dst) {
#ifdef NSA_REAL_F64
    __m512d r[8], t[8];
    for (int i = 0; i < 8; i++) r[i] = _mm512_loadu_pd(src + i * lds);
    for (int i = 0; i < 4; i++) {         // t[2g+c], lane L: rows 2g, 2g+1 at column 2L+c
        t[2 * i] = _mm512_unpacklo_pd(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_pd(r[2 * i], r[2 * i + 1]);
    }
    for (int c = 0; c < 2; c++) {         // 4x4 transpose of lanes of t[c], t[2+c], ...
        __m512d x0 = _mm512_shuffle_f64x2(t[c], t[2 + c], 0x44);
        __m512d x1 = _mm512_shuffle_f64x2(t[c], t[2 + c], 0xEE);
        __m512d y0 = _mm512_shuffle_f64x2(t[4 + c], t[6 + c], 0x44);
        __m512d y1 = _mm512_shuffle_f64x2(t[4 + c], t[6 + c], 0xEE);
        _mm512_store_pd(dst + (0 + c) * GEMM_NR, _mm512_shuffle_f64x2(x0, y0, 0x88));
        _mm512_store_pd(dst + (2 + c) * GEMM_NR, _mm512_shuffle_f64x2(x0, y0, 0xDD));
        _mm512_store_pd(dst + (4 + c) * GEMM_NR, _mm512_shuffle_f64x2(x1, y1, 0x88));
        _mm512_store_pd(dst + (6 + c) * GEMM_NR, _mm512_shuffle_f64x2(x1, y1, 0xDD));
    }
#else
    __m512 r[16], t[16], u[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * lds);
    for (int i = 0; i < 8; i++) {         // lane L: rows 2i, 2i+1 interleaved
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; g++) {         // u[4g+c], lane L: rows 4g..4g+3 at column 4L+c
        __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
        __m512d e = _mm512_castps_pd(t[4 * g + 2]), f = _mm512_castps_pd(t[4 * g + 3]);
        u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, e));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, e));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, f));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, f));
    }
    for (int c = 0; c < 4; c++) {         // 4x4 transpose of lanes of u[c], u[4+c], ...
        __m512 x0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
        __m512 x1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
        __m512 y0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
        __m512 y1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
        _mm512_store_ps(dst + (0 + c) * GEMM_NR, _mm512_shuffle_f32x4(x0, y0, 0x88));
        _mm512_store_ps(dst + (4 + c) * GEMM_NR, _mm512_shuffle_f32x4(x0, y0, 0xDD));
        _mm512_store_ps(dst + (8 + c) * GEMM_NR, _mm512_shuffle_f32x4(x1, y1, 0x88));
        _mm512_store_ps(dst + (12 + c) * GEMM_NR, _mm512_shuffle_f32x4(x1, y1, 0xDD));
    }
#endif
}
#endif

// Columns [n0+s*NR, +NR) x K block [k0, k0+kc) of op(B) into one NR-column sliver at
// dst (element (k, j) at k*NR + j), columns past the edge zeroed.
static void pack_b_sliver(int transB, const real *B, int64_t ldb, int n0, int nr, int k0,
                          int kc, real *restrict dst) {
    if (!transB) {               // B[K,N]: for each k, the columns are contiguous
        for (int k = 0; k < kc; k++) {
            const real *src = B + (int64_t)(k0 + k) * ldb + n0;
            real *d = dst + k * GEMM_NR;
            for (int j = 0; j < nr; j++) d[j] = src[j];
            for (int j = nr; j < GEMM_NR; j++) d[j] = 0;
        }
    } else {                     // B[N,K]: column n of op(B) is row n, contiguous in k
        int k = 0;
#ifdef GEMM_AVX512
        if (nr == GEMM_NR)           // full sliver: VL x VL blocks, then the k tail
            for (; k + GEMM_VL <= kc; k += GEMM_VL)
                for (int h = 0; h < GEMM_NV; h++)
                    transpose_block(B + (int64_t)(n0 + h * GEMM_VL) * ldb + k0 + k, ldb,
                                    dst + k * GEMM_NR + h * GEMM_VL);
#endif
        for (int j = 0; j < nr; j++) {
            const real *src = B + (int64_t)(n0 + j) * ldb + k0;
            for (int kk = k; kk < kc; kk++) dst[kk * GEMM_NR + j] = src[kk];
        }
        for (int kk = 0; kk < kc; kk++)
            for (int j = nr; j < GEMM_NR; j++) dst[kk * GEMM_NR + j] = 0;
    }
}

// ---- scratch buffers ----------------------------------------------------------------------
// Per-thread, grow-only, 64-byte aligned (packed slivers are read as aligned vectors).
// Kept for the life of the thread: gemm is called thousands of times per step with
// the same shapes, and a fresh multi-MiB allocation per call costs page faults.
// Small M: the caller's slot 0 holds packed A, shared by its team; each thread's
// slot 1 its current B sliver. Large M: the caller's slot 1 holds the panel of
// packed B, shared by its team; each thread's slot 0 its block of A.
static _Thread_local real *scratch_p[2];
static _Thread_local size_t scratch_cap[2];

static real *scratch(int slot, size_t n) {
    if (n > scratch_cap[slot]) {
        free(scratch_p[slot]);
        size_t bytes = (n * sizeof(real) + 63) & ~(size_t)63;
        scratch_p[slot] = aligned_alloc(64, bytes);
        if (!scratch_p[slot]) {
            fprintf(stderr, "%s:%d: gemm: out of memory (%zu bytes)\n", __FILE__, __LINE__, bytes);
            exit(1);
        }
        scratch_cap[slot] = n;
    }
    return scratch_p[slot];
}

// ---- drivers -----------------------------------------------------------------------------
typedef struct {
    int transA, transB, M, N, K;
    real alpha, beta;
    const real *A, *B;
    int64_t lda, ldb, ldc;
    real *C;
    int upd0;                    // update of the first K block (UPD_SET/SCALE/ADD)
} GemmArgs;

// Small M (M <= MC: one block of rows, e.g. every call of row-at-a-time prefill).
// There is no reuse of B across blocks of rows to organise, so each thread owns a
// range of NR-column slivers of C outright, walks all K blocks for it, and packs each
// B sliver just before use (it is then still in L1). op(A) (at most MC rows) is packed
// once for all K blocks, by the team, into apanel: K block p at p * mslv*MR*KC.
static void gemm_small_m(const GemmArgs *g, real *apanel) {
    int nsl = (g->N + GEMM_NR - 1) / GEMM_NR;
    int nkb = (g->K + GEMM_KC - 1) / GEMM_KC;
    int mslv = (g->M + GEMM_MR - 1) / GEMM_MR;
    size_t ablk = (size_t)mslv * GEMM_MR * GEMM_KC;
    int nth = 1;
#ifdef _OPENMP
    nth = omp_get_num_threads();
#endif
    GEMM_OMP(omp for schedule(static))
    for (int p = 0; p < nkb; p++) {
        int kc = g->K - p * GEMM_KC < GEMM_KC ? g->K - p * GEMM_KC : GEMM_KC;
        pack_a(g->transA, g->A, g->lda, 0, g->M, p * GEMM_KC, kc, apanel + p * ablk);
    }
    // 4 items per thread: dynamic scheduling then evens out threads slowed by others.
    int items = nth == 1 ? 1 : (nsl < 4 * nth ? nsl : 4 * nth);
    real *bp = scratch(1, (size_t)GEMM_KC * GEMM_NR);
    GEMM_OMP(omp for schedule(dynamic, 1))
    for (int it = 0; it < items; it++) {
        int s0 = (int)((int64_t)nsl * it / items), s1 = (int)((int64_t)nsl * (it + 1) / items);
        for (int p = 0; p < nkb; p++) {
            int pc = p * GEMM_KC, kc = g->K - pc < GEMM_KC ? g->K - pc : GEMM_KC;
            int upd = p == 0 ? g->upd0 : UPD_ADD;
            const real *ap = apanel + p * ablk;
            for (int s = s0; s < s1; s++) {
                int n0 = s * GEMM_NR, nr = g->N - n0 < GEMM_NR ? g->N - n0 : GEMM_NR;
                pack_b_sliver(g->transB, g->B, g->ldb, n0, nr, pc, kc, bp);
                for (int i = 0; i < mslv; i++) {
                    int m0 = i * GEMM_MR, mr = g->M - m0 < GEMM_MR ? g->M - m0 : GEMM_MR;
                    tile(mr, nr, kc, ap + (size_t)i * GEMM_MR * kc, bp, g->C + (int64_t)m0 * g->ldc + n0,
                         g->ldc, g->alpha, g->beta, upd);
                }
            }
        }
    }
}

// Large M: for each NC panel of columns and each K block, the team packs the
// KC x NC panel of B together (shared), then splits the (block of rows x group of
// slivers) tiles of C among threads; each thread packs the block of A its tile
// needs. Barriers separate the K blocks, so each tile's K blocks are applied in
// order even when different threads own it in different blocks.
static void gemm_large_m(const GemmArgs *g, real *bpanel) {
    int nth = 1;
#ifdef _OPENMP
    nth = omp_get_num_threads();
#endif
    // Row blocks of at most MC rows, their count rounded up to a multiple of the
    // thread count so that equal blocks split evenly (2048 rows, 2 threads: 12 blocks
    // of 176 rather than 11 of 192, one thread idle for the last). Pure scheduling.
    int nb = (g->M + GEMM_MC - 1) / GEMM_MC;
    nb = (nb + nth - 1) / nth * nth;
    int mcb = ((g->M + nb - 1) / nb + GEMM_MR - 1) / GEMM_MR * GEMM_MR;
    int mblk = (g->M + mcb - 1) / mcb;
    real *ap = scratch(0, (size_t)GEMM_MC * GEMM_KC);
    for (int jc = 0; jc < g->N; jc += GEMM_NC) {
        int nc = g->N - jc < GEMM_NC ? g->N - jc : GEMM_NC;
        int nsl = (nc + GEMM_NR - 1) / GEMM_NR;
        // With fewer than 2 row blocks per thread, split the columns into groups as
        // well (each group re-packs its block of A, so no more than that).
        int ngrp = (2 * nth + mblk - 1) / mblk;
        if (ngrp > nsl) ngrp = nsl;
        int items = mblk * ngrp;
        for (int pc = 0; pc < g->K; pc += GEMM_KC) {
            int kc = g->K - pc < GEMM_KC ? g->K - pc : GEMM_KC;
            int upd = pc == 0 ? g->upd0 : UPD_ADD;
            GEMM_OMP(omp for schedule(static))
            for (int s = 0; s < nsl; s++) {
                int n0 = s * GEMM_NR, nr = nc - n0 < GEMM_NR ? nc - n0 : GEMM_NR;
                pack_b_sliver(g->transB, g->B, g->ldb, jc + n0, nr, pc, kc,
                              bpanel + (size_t)s * GEMM_NR * kc);
            }
            int packed_blk = -1;     // which M block of A this thread has in ap
            GEMM_OMP(omp for schedule(dynamic, 1))
            for (int it = 0; it < items; it++) {
                int ib = it / ngrp, grp = it % ngrp;
                int m0 = ib * mcb, mc = g->M - m0 < mcb ? g->M - m0 : mcb;
                if (packed_blk != ib) {
                    pack_a(g->transA, g->A, g->lda, m0, mc, pc, kc, ap);
                    packed_blk = ib;
                }
                int s0 = (int)((int64_t)nsl * grp / ngrp), s1 = (int)((int64_t)nsl * (grp + 1) / ngrp);
                for (int s = s0; s < s1; s++) {
                    int n0 = s * GEMM_NR, nr = nc - n0 < GEMM_NR ? nc - n0 : GEMM_NR;
                    const real *bp = bpanel + (size_t)s * GEMM_NR * kc;
                    for (int i = 0; i * GEMM_MR < mc; i++) {
                        int mr = mc - i * GEMM_MR < GEMM_MR ? mc - i * GEMM_MR : GEMM_MR;
                        tile(mr, nr, kc, ap + (size_t)i * GEMM_MR * kc, bp,
                             g->C + (int64_t)(m0 + i * GEMM_MR) * g->ldc + jc + n0, g->ldc,
                             g->alpha, g->beta, upd);
                    }
                }
            }
        }
    }
}

void CPU_FN(gemm)(int transA, int transB, int M, int N, int K, real alpha,
                  const real *A, int64_t lda, const real *B, int64_t ldb,
                  real beta, real *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {                // no K blocks: C = beta * C (C not read if beta == 0)
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++)
                C[(int64_t)m * ldc + n] = beta == 0 ? 0 : beta * C[(int64_t)m * ldc + n];
        return;
    }
    GemmArgs g = {transA, transB, M, N, K, alpha, beta, A, B, lda, ldb, ldc, C,
                  beta == 0 ? UPD_SET : UPD_SCALE};
    // Below ~4 MFLOP a parallel region costs more than it saves (the thread count
    // never changes results, so this is purely a speed choice).
    int par = 2.0 * M * N * K >= 4e6;
    (void)par;
    if (M <= GEMM_MC) {
        size_t mslv = (size_t)(M + GEMM_MR - 1) / GEMM_MR, nkb = (size_t)(K + GEMM_KC - 1) / GEMM_KC;
        real *apanel = scratch(0, nkb * mslv * GEMM_MR * GEMM_KC);
        GEMM_OMP(omp parallel if (par))
        gemm_small_m(&g, apanel);
    } else {
        size_t nc = N < GEMM_NC ? (size_t)(N + GEMM_NR - 1) / GEMM_NR * GEMM_NR : GEMM_NC;
        real *bpanel = scratch(1, nc * GEMM_KC);
        GEMM_OMP(omp parallel if (par))
        gemm_large_m(&g, bpanel);
    }
}
