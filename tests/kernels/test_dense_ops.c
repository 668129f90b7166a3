// tests/kernels/test_dense_ops.c — the CPU matrix product (kernels/cpu/gemm.c) and the
// dense ops (kernels/cpu/dense.c), both precisions.
//
// What is asserted, and why each check can fail on a wrong implementation:
//  * gemm against a naive double triple loop on fresh random non-zero inputs: all
//    four transpose cases, odd sizes on both sides of the micro-tile and K block,
//    strided lda/ldb/ldc (the padding of C must stay untouched), several alpha/beta,
//    and beta == 0 with C poisoned by NaN (C must not be read).
//  * gemm's determinism contract, bit for bit: a batched call equals one call per
//    row (through a buffer at another alignment), other M and N partitions, and
//    1, 2 or 3 OpenMP threads.
//  * every dense forward against a naive double reference computed from the exact
//    values the backend holds; every backward against the formula and, in f64,
//    against central finite differences of L = <out, R> (R random); "+=" outputs
//    start from random values, "=" outputs from NaN, so unwritten or wrongly
//    accumulated elements fail; a NaN never passes a comparison (all tests are
//    written as !(err <= tol)).
//  * row independence and thread-count independence of the ops that reduce.
//  * the fused K/V projection's split (kv_split_rope_fwd) and gather (kv_gather_rope_bwd)
//    against a plain loop: values moved exactly (bit for bit), keys against a double
//    RoPE of the same held values within the precision's tolerance (RoPE's two products
//    and one sum, rounded in real arithmetic: relative 1e-5 f32 / 1e-13 f64 with floor 1),
//    and bit for bit equal to rope_fwd / rope_bwd on the same data (what makes the fused
//    projection's forward bitwise the per-branch path's); rows outside [r0, r0+nr)
//    untouched, every dkv element written, one row at a time = all rows, and in f64 the
//    gather is the split's adjoint (<split(kv), R> = <kv, gather(R)> to 1e-13).
// Tolerances: results vs a double reference, relative 1e-5 (f32) / 1e-13 (f64), for
// gemm scaled by K/128 beyond K = 128 and measured against alpha*sum|a b| + |beta c|;
// finite differences 1e-6 relative to (|g| + max|g|).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

// cpu_ops.h declares one precision per translation unit: declare both here.
#define DECLARE_OPS(S, T)                                                                     \
    void gemm_##S(int, int, int, int, int, T, const T *, int64_t, const T *, int64_t, T, T *,   \
                  int64_t);                                                                   \
    void matmul_fwd_##S(void *, int64_t, const void *, int64_t, const void *, const void *,     \
                        int, int, int);                                                       \
    void matmul_bwd_##S(void *, void *, void *, const void *, const void *, const void *, int,   \
                        int, int, int);                                                       \
    void embedding_fwd_##S(void *, const int32_t *, const void *, int, int);                    \
    void embedding_bwd_##S(void *, const void *, const int32_t *, int, int);                    \
    void rmsnorm_fwd_##S(void *, void *, const void *, const void *, int, int, double);         \
    void rmsnorm_bwd_##S(void *, void *, const void *, const void *, const void *, const void *, \
                         int, int);                                                           \
    void rope_fwd_##S(void *, const void *, int, int, int, int, int, int);                      \
    void rope_bwd_##S(void *, const void *, int, int, int, int, int, int);                      \
    void rope_table_##S(void *, int, int, double);                                             \
    void kv_split_rope_fwd_##S(void *const *, const void *, const void *, int64_t, int64_t, int,  \
                               int, int);                                                     \
    void kv_gather_rope_bwd_##S(void *, const void *const *, const void *, int64_t, int64_t, int, \
                                int, int);                                                    \
    void swiglu_fwd_##S(void *, const void *, const void *, int64_t);                          \
    void swiglu_bwd_##S(void *, void *, const void *, const void *, const void *, int64_t);     \
    void silu_fwd_##S(void *, const void *, int64_t);                                          \
    void silu_bwd_##S(void *, const void *, const void *, int64_t);                            \
    void add_##S(void *, const void *, const void *, int64_t);                                 \
    void add_inplace_##S(void *, const void *, int64_t);                                       \
    void xent_fwd_bwd_##S(void *, void *, const void *, const int32_t *, int, int, double);      \
    double sumsq_param_##S(const void *, int64_t);                                             \
    void sumsq_params_##S(const void *, const int64_t *, const int64_t *, int, double *);        \
    void scale_param_##S(void *, double, int64_t);                                             \
    int64_t first_nonfinite_##S(const void *, int64_t);                                        \
    void adamw_##S(void *, const void *, void *, void *, int64_t, double, double, double,       \
                   double, double, double, double);                                            \
    void adamw_runs_##S(void *, const void *, void *, void *, const int64_t *, const int64_t *,  \
                        const double *, int, double, double, double, double, double, double);
DECLARE_OPS(f32, float)
DECLARE_OPS(f64, double)

// One precision of the backend: element size, tolerance, and its ops (all but gemm
// have the same signature in both precisions).
typedef struct {
    const char *name;
    int f64;
    size_t es;
    double tol;    // relative tolerance of a result against a double-precision reference
    void (*matmul_fwd)(void *, int64_t, const void *, int64_t, const void *, const void *, int, int, int);
    void (*matmul_bwd)(void *, void *, void *, const void *, const void *, const void *, int, int, int, int);
    void (*embedding_fwd)(void *, const int32_t *, const void *, int, int);
    void (*embedding_bwd)(void *, const void *, const int32_t *, int, int);
    void (*rmsnorm_fwd)(void *, void *, const void *, const void *, int, int, double);
    void (*rmsnorm_bwd)(void *, void *, const void *, const void *, const void *, const void *, int, int);
    void (*rope_fwd)(void *, const void *, int, int, int, int, int, int);
    void (*rope_bwd)(void *, const void *, int, int, int, int, int, int);
    void (*rope_table)(void *, int, int, double);
    void (*kv_split_rope_fwd)(void *const *, const void *, const void *, int64_t, int64_t, int, int, int);
    void (*kv_gather_rope_bwd)(void *, const void *const *, const void *, int64_t, int64_t, int, int, int);
    void (*swiglu_fwd)(void *, const void *, const void *, int64_t);
    void (*swiglu_bwd)(void *, void *, const void *, const void *, const void *, int64_t);
    void (*silu_fwd)(void *, const void *, int64_t);
    void (*silu_bwd)(void *, const void *, const void *, int64_t);
    void (*add)(void *, const void *, const void *, int64_t);
    void (*add_inplace)(void *, const void *, int64_t);
    void (*xent_fwd_bwd)(void *, void *, const void *, const int32_t *, int, int, double);
    double (*sumsq_param)(const void *, int64_t);
    void (*sumsq_params)(const void *, const int64_t *, const int64_t *, int, double *);
    void (*scale_param)(void *, double, int64_t);
    int64_t (*first_nonfinite)(const void *, int64_t);
    void (*adamw)(void *, const void *, void *, void *, int64_t, double, double, double, double,
                  double, double, double);
    void (*adamw_runs)(void *, const void *, void *, void *, const int64_t *, const int64_t *, const double *, int,
                       double, double, double, double, double, double);
} Prec;

#define PREC(S, F64, TOL, T)                                                                  \
    {#S, F64, sizeof(T), TOL, matmul_fwd_##S, matmul_bwd_##S, embedding_fwd_##S,              \
     embedding_bwd_##S, rmsnorm_fwd_##S, rmsnorm_bwd_##S, rope_fwd_##S, rope_bwd_##S,          \
     rope_table_##S, kv_split_rope_fwd_##S, kv_gather_rope_bwd_##S, swiglu_fwd_##S, swiglu_bwd_##S, silu_fwd_##S, silu_bwd_##S, add_##S,       \
     add_inplace_##S, xent_fwd_bwd_##S, sumsq_param_##S, sumsq_params_##S, scale_param_##S,                     \
     first_nonfinite_##S, adamw_##S, adamw_runs_##S}
static const Prec PRECS[2] = {PREC(f32, 0, 1e-5, float), PREC(f64, 1, 1e-13, double)};

// ---- helpers -----------------------------------------------------------------------------

static uint64_t rng;
// Every test starts from the same seed: its data do not depend on which tests ran
// before it (or on where an earlier one failed).
static int reset_rng(void **state) {
    (void)state;
    rng = 0x2545F4914F6CDD1Dull;
    return 0;
}
static double urand(void) {                   // uniform [0, 1)
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}
static double *dvec(int64_t n) { return xmalloc((size_t)n * sizeof(double)); }

// x rounded to the precision (what the backend will hold).
static double rp(const Prec *P, double x) { return P->f64 ? x : (double)(float)x; }

// n random non-zero values, magnitude in [lo, hi], random sign, rounded to P.
static double *rvec(const Prec *P, int64_t n, double lo, double hi) {
    double *x = dvec(n);
    for (int64_t i = 0; i < n; i++) {
        double v = lo + (hi - lo) * urand();
        x[i] = rp(P, urand() < 0.5 ? -v : v);
    }
    return x;
}

static void *rbuf(const Prec *P, int64_t n) { return xmalloc((size_t)n * P->es); }
static void put(const Prec *P, void *b, const double *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (P->f64) ((double *)b)[i] = x[i]; else ((float *)b)[i] = (float)x[i];
}
static void get(const Prec *P, double *x, const void *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = P->f64 ? ((const double *)b)[i] : ((const float *)b)[i];
}
static void *rbuf_from(const Prec *P, const double *x, int64_t n) {
    void *b = rbuf(P, n);
    put(P, b, x, n);
    return b;
}
static void poison(const Prec *P, void *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (P->f64) ((double *)b)[i] = NAN; else ((float *)b)[i] = NAN;
}
// Backend buffer -> fresh host double array.
static double *fetch(const Prec *P, const void *b, int64_t n) {
    double *x = dvec(n);
    get(P, x, b, n);
    return x;
}
static char *at(const Prec *P, void *b, int64_t i) { return (char *)b + i * (int64_t)P->es; }

static double rms(const double *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
    return n ? sqrt(s / n) : 0;
}
static double dotd(const double *a, const double *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// |got - ref| <= tol * (|ref| + floor) for every element; NaN never passes.
static void check(const char *what, const Prec *P, const double *got, const double *ref,
                  int64_t n, double tol, double floor) {
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - ref[i]);
        if (!(e <= tol * (fabs(ref[i]) + floor)))
            fail_msg("%s [%s]: element %lld: got %.17g, want %.17g (tol %.3g, floor %.3g)", what,
                     P->name, (long long)i, got[i], ref[i], tol, floor);
    }
}
// |got - ref| <= tol * scale[i] for every element (scale: the size of the terms that
// were summed, where cancellation makes |ref| a poor yardstick).
static void check_scaled(const char *what, const Prec *P, const double *got, const double *ref,
                         const double *scale, int64_t n, double tol) {
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(got[i] - ref[i]) <= tol * scale[i]))
            fail_msg("%s [%s]: element %lld: got %.17g, want %.17g (tol %.3g x %.3g)", what,
                     P->name, (long long)i, got[i], ref[i], tol, scale[i]);
}
static void check_exact(const char *what, const Prec *P, const double *got, const double *ref,
                        int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!(got[i] == ref[i]))
            fail_msg("%s [%s]: element %lld: got %.17g, want exactly %.17g", what, P->name,
                     (long long)i, got[i], ref[i]);
}
static void check_bits(const char *what, const Prec *P, const void *a, const void *b, int64_t n) {
    if (memcmp(a, b, (size_t)n * P->es) != 0) {
        for (int64_t i = 0; i < n; i++)
            if (memcmp((const char *)a + i * (int64_t)P->es, (const char *)b + i * (int64_t)P->es, P->es))
                fail_msg("%s [%s]: not bitwise equal at element %lld", what, P->name, (long long)i);
    }
}

// Central differences of a scalar loss w.r.t. each x[i] (x is what loss() reads),
// compared with the analytic gradient g: |fd - g| <= 1e-6 (|g| + max|g|).
typedef double (*LossFn)(void *ctx);
static void check_fd(const char *what, LossFn loss, void *ctx, double *x, int64_t n,
                     const double *g) {
    const double h = 1e-5;
    double gmax = 0;
    for (int64_t i = 0; i < n; i++) gmax = fmax(gmax, fabs(g[i]));
    for (int64_t i = 0; i < n; i++) {
        double x0 = x[i];
        x[i] = x0 + h;
        double lp = loss(ctx);
        x[i] = x0 - h;
        double lm = loss(ctx);
        x[i] = x0;
        double fd = (lp - lm) / (2 * h);
        if (!(fabs(fd - g[i]) <= 1e-6 * (fabs(g[i]) + gmax)))
            fail_msg("%s: finite difference at %lld: fd %.12g, analytic %.12g", what,
                     (long long)i, fd, g[i]);
    }
}

#ifdef _OPENMP
// Run fn(ctx) with t threads, restoring the previous setting.
static void with_threads(int t, void (*fn)(void *), void *ctx) {
    int saved = omp_get_max_threads();
    omp_set_num_threads(t);
    fn(ctx);
    omp_set_num_threads(saved);
}
#endif

// ---- gemm ------------------------------------------------------------------------------------

static void gemm_p(const Prec *P, int ta, int tb, int M, int N, int K, double alpha,
                   const void *A, int64_t lda, const void *B, int64_t ldb, double beta, void *C,
                   int64_t ldc) {
    if (P->f64) gemm_f64(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else gemm_f32(ta, tb, M, N, K, (float)alpha, A, lda, B, ldb, (float)beta, C, ldc);
}

static double gemm_tol(const Prec *P, int K) { return P->tol * fmax(1.0, K / 128.0); }

// One gemm call against the naive double reference; the padding columns of C
// (ldc > N) hold a sentinel that must survive; beta == 0 poisons C with NaN.
static void gemm_case(const Prec *P, int ta, int tb, int M, int N, int K, double alpha,
                      double beta, int padA, int padB, int padC) {
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int64_t lda = ac + padA, ldb = bc + padB, ldc = N + padC;
    double *A = rvec(P, ar * lda, 0.1, 1), *B = rvec(P, br * ldb, 0.1, 1);
    double *C0 = rvec(P, M * ldc, 0.1, 1);
    const double SENT = 7777.0;
    for (int m = 0; m < M; m++)
        for (int64_t n = 0; n < ldc; n++)
            if (n >= N) C0[m * ldc + n] = SENT;
            else if (beta == 0) C0[m * ldc + n] = NAN;
    void *a = rbuf_from(P, A, ar * lda), *b = rbuf_from(P, B, br * ldb), *c = rbuf_from(P, C0, M * ldc);
    gemm_p(P, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
    double *C = fetch(P, c, M * ldc);
    double tol = gemm_tol(P, K);
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            double s = 0, sa = 0;
            for (int k = 0; k < K; k++) {
                double x = ta ? A[k * lda + m] : A[m * lda + k];
                double y = tb ? B[n * ldb + k] : B[k * ldb + n];
                s += x * y;
                sa += fabs(x * y);
            }
            double c0 = C0[m * ldc + n];
            double ref = alpha * s + (beta == 0 ? 0 : beta * c0);
            double scale = fabs(alpha) * sa + (beta == 0 ? 0 : fabs(beta * c0));
            double got = C[m * ldc + n];
            if (!(fabs(got - ref) <= tol * scale))
                fail_msg("gemm [%s] ta=%d tb=%d M=%d N=%d K=%d alpha=%g beta=%g ld pad %d/%d/%d: "
                         "C[%d,%d] = %.17g, want %.17g (tol %.3g x %.3g)", P->name, ta, tb, M, N, K,
                         alpha, beta, padA, padB, padC, m, n, got, ref, tol, scale);
        }
        for (int64_t n = N; n < ldc; n++)
            if (!(C[m * ldc + n] == SENT))
                fail_msg("gemm [%s] ta=%d tb=%d M=%d N=%d K=%d: wrote padding C[%d,%lld]",
                         P->name, ta, tb, M, N, K, m, (long long)n);
    }
    free(A); free(B); free(C0); free(C); free(a); free(b); free(c);
}

static void test_gemm_vs_naive(void **state) {
    (void)state;
    static const int S[] = {1, 2, 3, 7, 17, 33, 65, 129};
    // (alpha, beta): overwrite, general, accumulate, scaled overwrite. All exact in f32.
    static const double AB[4][2] = {{1, 0}, {0.5, -1.25}, {-2, 1}, {0.75, 0}};
    for (int p = 0; p < 2; p++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                for (int i = 0; i < 8; i++)
                    for (int j = 0; j < 8; j++)
                        for (int k = 0; k < 8; k++) {
                            int c = (i + 2 * j + 3 * k) % 4;
                            gemm_case(&PRECS[p], ta, tb, S[i], S[j], S[k], AB[c][0], AB[c][1],
                                      (i + k) % 3 * 2, (j + k) % 3, (i + j) % 2 * 3);
                        }
                // K beyond the K block (256): exact multiples, remainders, several blocks;
                // M beyond one M block (the multi-block driver).
                static const int KB[] = {255, 256, 257, 513, 1000};
                static const int MN[][2] = {{1, 1}, {7, 33}, {65, 17}, {200, 40}};
                for (int k = 0; k < 5; k++)
                    for (int s = 0; s < 4; s++)
                        gemm_case(&PRECS[p], ta, tb, MN[s][0], MN[s][1], KB[k], AB[(k + s) % 4][0],
                                  AB[(k + s) % 4][1], 1, 2, 3);
                // N beyond one column panel (4096 f32 / 2048 f64 columns).
                gemm_case(&PRECS[p], ta, tb, 200, 4100, 20, 0.5, -1.25, 0, 1, 2);
                gemm_case(&PRECS[p], ta, tb, 3, 4100, 20, 1, 0, 0, 1, 2);
            }
}

// K == 0: C = beta * C, and beta == 0 writes zeros over NaN.
static void test_gemm_k0(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++) {
        const Prec *P = &PRECS[p];
        double *C0 = rvec(P, 12, 0.1, 1), ref[12];
        void *c = rbuf_from(P, C0, 12), *ab = rbuf(P, 1);
        gemm_p(P, 0, 0, 3, 4, 0, 1, ab, 1, ab, 4, 2, c, 4);
        double *C = fetch(P, c, 12);
        for (int i = 0; i < 12; i++) ref[i] = rp(P, 2 * C0[i]);
        check_exact("gemm K=0 beta=2", P, C, ref, 12);
        poison(P, c, 12);
        gemm_p(P, 0, 0, 3, 4, 0, 1, ab, 1, ab, 4, 0, c, 4);
        get(P, C, c, 12);
        for (int i = 0; i < 12; i++) ref[i] = 0;
        check_exact("gemm K=0 beta=0", P, C, ref, 12);
        free(C0); free(C); free(c); free(ab);
    }
}

// The determinism contract: results of one batched call against (a) one call per row
// of C through copies of A and C at another alignment (row-at-a-time prefill), (b)
// another partition of the rows, (c) a partition of the columns. Bitwise.
static void gemm_rows_case(const Prec *P, int ta, int tb, int M, int N, int K, double alpha,
                           double beta) {
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int64_t lda = ac + 1, ldb = bc + 2, ldc = N + 3;
    double *A = rvec(P, ar * lda, 0.1, 1), *B = rvec(P, br * ldb, 0.1, 1), *C0 = rvec(P, M * ldc, 0.1, 1);
    if (beta == 0)
        for (int64_t i = 0; i < M * ldc; i++) C0[i] = NAN;
    void *a = rbuf_from(P, A, ar * lda), *b = rbuf_from(P, B, br * ldb);
    void *full = rbuf_from(P, C0, M * ldc);
    gemm_p(P, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, full, ldc);

    // (a) one row per call; A and C one element off their original alignment.
    void *a1 = rbuf(P, ar * lda + 1), *c1 = rbuf(P, M * ldc + 1);
    put(P, at(P, a1, 1), A, ar * lda);
    put(P, at(P, c1, 1), C0, M * ldc);
    for (int m = 0; m < M; m++)
        gemm_p(P, ta, tb, 1, N, K, alpha, at(P, a1, 1 + (ta ? m : m * lda)), lda, b, ldb, beta,
               at(P, c1, 1 + m * ldc), ldc);
    for (int m = 0; m < M; m++)
        check_bits("gemm row-at-a-time vs batched", P, at(P, full, m * ldc), at(P, c1, 1 + m * ldc), N);

    // (b) rows in three calls of uneven size.
    void *cp = rbuf_from(P, C0, M * ldc);
    int cuts[4] = {0, M > 5 ? 5 : M / 2, M / 2 + 3 < M ? M / 2 + 3 : M, M};
    for (int s = 0; s < 3; s++)
        if (cuts[s + 1] > cuts[s])
            gemm_p(P, ta, tb, cuts[s + 1] - cuts[s], N, K, alpha,
                   at(P, a, ta ? cuts[s] : cuts[s] * lda), lda, b, ldb, beta, at(P, cp, cuts[s] * ldc), ldc);
    for (int m = 0; m < M; m++)
        check_bits("gemm M partition vs batched", P, at(P, full, m * ldc), at(P, cp, m * ldc), N);

    // (c) columns in three calls.
    void *cn = rbuf_from(P, C0, M * ldc);
    int ncut[4] = {0, 1, N / 2 + 3 < N ? N / 2 + 3 : N, N};
    for (int s = 0; s < 3; s++)
        if (ncut[s + 1] > ncut[s])
            gemm_p(P, ta, tb, M, ncut[s + 1] - ncut[s], K, alpha, a, lda,
                   at(P, b, tb ? ncut[s] * ldb : ncut[s]), ldb, beta, at(P, cn, ncut[s]), ldc);
    for (int m = 0; m < M; m++)
        check_bits("gemm N partition vs batched", P, at(P, full, m * ldc), at(P, cn, m * ldc), N);
    free(A); free(B); free(C0); free(a); free(b); free(full); free(a1); free(c1); free(cp); free(cn);
}

static void test_gemm_row_independence(void **state) {
    (void)state;
    static const double AB[3][2] = {{0.75, -0.5}, {1, 1}, {1.5, 0}};
    for (int p = 0; p < 2; p++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int c = 0; c < 3; c++) {
                    // M = 300 runs the multi-block driver batched and the small-M one per row.
                    gemm_rows_case(&PRECS[p], ta, tb, 300, 75, 600, AB[c][0], AB[c][1]);
                    gemm_rows_case(&PRECS[p], ta, tb, 13, 37, 257, AB[c][0], AB[c][1]);
                }
}

#ifdef _OPENMP
typedef struct { const Prec *P; int ta, tb, M, N, K; void *a, *b, *c; } GemmRun;
static void gemm_run(void *ctx) {
    GemmRun *r = ctx;
    int64_t lda = r->ta ? r->M : r->K, ldb = r->tb ? r->K : r->N;
    gemm_p(r->P, r->ta, r->tb, r->M, r->N, r->K, 0.5, r->a, lda, r->b, ldb, -1, r->c, r->N);
}
#endif

// 1, 2 and 3 threads give the same bits (shapes large enough to run in parallel,
// through both drivers).
static void test_gemm_threads(void **state) {
    (void)state;
#ifdef _OPENMP
    static const int SH[][3] = {{300, 75, 600}, {4, 2000, 600}, {1, 5000, 900}};
    for (int p = 0; p < 2; p++)
        for (int s = 0; s < 3; s++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++) {
                    const Prec *P = &PRECS[p];
                    int M = SH[s][0], N = SH[s][1], K = SH[s][2];
                    double *A = rvec(P, (int64_t)M * K, 0.1, 1), *B = rvec(P, (int64_t)K * N, 0.1, 1);
                    double *C0 = rvec(P, (int64_t)M * N, 0.1, 1);
                    GemmRun r = {P, ta, tb, M, N, K, rbuf_from(P, A, (int64_t)M * K),
                                 rbuf_from(P, B, (int64_t)K * N), NULL};
                    void *out[3];
                    for (int t = 0; t < 3; t++) {
                        r.c = out[t] = rbuf_from(P, C0, (int64_t)M * N);
                        with_threads(t + 1, gemm_run, &r);
                    }
                    check_bits("gemm 2 threads vs 1", P, out[0], out[1], (int64_t)M * N);
                    check_bits("gemm 3 threads vs 1", P, out[0], out[2], (int64_t)M * N);
                    free(A); free(B); free(C0); free(r.a); free(r.b);
                    for (int t = 0; t < 3; t++) free(out[t]);
                }
#else
    skip();
#endif
}

// ---- linear layer ------------------------------------------------------------------------------

typedef struct { int M, N, K; double *x, *w, *b, *R, *out; } MatmulCtx;
static double matmul_loss(void *ctx) {
    MatmulCtx *c = ctx;
    matmul_fwd_f64(c->out, c->N, c->x, c->K, c->w, c->b, c->M, c->N, c->K);
    return dotd(c->out, c->R, (int64_t)c->M * c->N);
}

static void test_matmul_fwd(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++) {
        const Prec *P = &PRECS[p];
        const int M = 5, N = 7, K = 300;
        const int64_t ldi = K + 3, ldo = N + 2;
        double *X = rvec(P, M * ldi, 0.1, 1), *W = rvec(P, N * K, 0.1, 1), *Bs = rvec(P, N, 0.1, 1);
        void *x = rbuf_from(P, X, M * ldi), *w = rbuf_from(P, W, N * K), *bias = rbuf_from(P, Bs, N);
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            void *out = rbuf(P, M * ldo);
            poison(P, out, M * ldo);
            for (int m = 0; m < M; m++)       // padding columns: sentinel that must survive
                for (int64_t n = N; n < ldo; n++) put(P, at(P, out, m * ldo + n), &(double){5}, 1);
            P->matmul_fwd(out, ldo, x, ldi, w, with_bias ? bias : NULL, M, N, K);
            double *O = fetch(P, out, M * ldo);
            for (int m = 0; m < M; m++) {
                for (int n = 0; n < N; n++) {
                    double s = with_bias ? Bs[n] : 0, sa = with_bias ? fabs(Bs[n]) : 0;
                    for (int k = 0; k < K; k++) {
                        s += X[m * ldi + k] * W[n * K + k];
                        sa += fabs(X[m * ldi + k] * W[n * K + k]);
                    }
                    double got = O[m * ldo + n];
                    if (!(fabs(got - s) <= gemm_tol(P, K) * sa))
                        fail_msg("matmul_fwd [%s] bias=%d out[%d,%d] = %.17g, want %.17g", P->name,
                                 with_bias, m, n, got, s);
                }
                for (int64_t n = N; n < ldo; n++)
                    if (!(O[m * ldo + n] == 5)) fail_msg("matmul_fwd [%s] wrote padding", P->name);
            }
            // Row independence: each row alone gives the same bits.
            void *row = rbuf(P, N);
            for (int m = 0; m < M; m++) {
                P->matmul_fwd(row, N, at(P, x, m * ldi), ldi, w, with_bias ? bias : NULL, 1, N, K);
                check_bits("matmul_fwd row vs batched", P, row, at(P, out, m * ldo), N);
            }
            free(O); free(out); free(row);
        }
        free(X); free(W); free(Bs); free(x); free(w); free(bias);
    }
}

// matmul_bwd against the formulas (M = 300 > one K block of the dw product), with
// "=" and "+=" dinp, "+=" dw and dbias, and NULL outputs.
static void test_matmul_bwd(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++) {
        const Prec *P = &PRECS[p];
        const int M = 300, N = 9, K = 11;
        double *DO = rvec(P, M * N, 0.1, 1), *X = rvec(P, M * K, 0.1, 1), *W = rvec(P, N * K, 0.1, 1);
        double *D0 = rvec(P, M * K, 0.1, 1), *W0 = rvec(P, N * K, 0.1, 1), *B0 = rvec(P, N, 0.1, 1);
        void *dout = rbuf_from(P, DO, M * N), *x = rbuf_from(P, X, M * K), *w = rbuf_from(P, W, N * K);
        for (int acc = 0; acc < 2; acc++) {
            void *dinp = rbuf_from(P, D0, M * K), *dw = rbuf_from(P, W0, N * K), *db = rbuf_from(P, B0, N);
            if (!acc) poison(P, dinp, M * K);
            P->matmul_bwd(dinp, dw, db, dout, x, w, M, N, K, acc);
            double *gi = fetch(P, dinp, M * K), *gw = fetch(P, dw, N * K), *gb = fetch(P, db, N);
            for (int m = 0; m < M; m++)
                for (int k = 0; k < K; k++) {
                    double s = acc ? D0[m * K + k] : 0, sa = fabs(s);
                    for (int n = 0; n < N; n++) {
                        s += DO[m * N + n] * W[n * K + k];
                        sa += fabs(DO[m * N + n] * W[n * K + k]);
                    }
                    if (!(fabs(gi[m * K + k] - s) <= gemm_tol(P, N) * sa))
                        fail_msg("matmul_bwd [%s] acc=%d dinp[%d,%d] = %.17g, want %.17g", P->name,
                                 acc, m, k, gi[m * K + k], s);
                }
            for (int n = 0; n < N; n++) {
                for (int k = 0; k < K; k++) {
                    double s = W0[n * K + k], sa = fabs(s);
                    for (int m = 0; m < M; m++) {
                        s += DO[m * N + n] * X[m * K + k];
                        sa += fabs(DO[m * N + n] * X[m * K + k]);
                    }
                    if (!(fabs(gw[n * K + k] - s) <= gemm_tol(P, M) * sa))
                        fail_msg("matmul_bwd [%s] dw[%d,%d] = %.17g, want %.17g", P->name, n, k,
                                 gw[n * K + k], s);
                }
                double s = B0[n], sa = fabs(s);
                for (int m = 0; m < M; m++) { s += DO[m * N + n]; sa += fabs(DO[m * N + n]); }
                if (!(fabs(gb[n] - s) <= P->tol * sa))
                    fail_msg("matmul_bwd [%s] dbias[%d] = %.17g, want %.17g", P->name, n, gb[n], s);
            }
            // Only dinp requested: the same dinp bits.
            void *dinp2 = rbuf_from(P, D0, M * K);
            if (!acc) poison(P, dinp2, M * K);
            P->matmul_bwd(dinp2, NULL, NULL, dout, x, w, M, N, K, acc);
            check_bits("matmul_bwd dinp alone vs with dw/dbias", P, dinp, dinp2, M * K);
            free(gi); free(gw); free(gb); free(dinp); free(dw); free(db); free(dinp2);
        }
        free(DO); free(X); free(W); free(D0); free(W0); free(B0); free(dout); free(x); free(w);
    }
}

// f64 gradients of L = <matmul_fwd(x, w, b), R> by central differences.
static void test_matmul_fd(void **state) {
    (void)state;
    const Prec *P = &PRECS[1];
    const int M = 3, N = 4, K = 5;
    MatmulCtx c = {M, N, K, rvec(P, M * K, 0.1, 1), rvec(P, N * K, 0.1, 1), rvec(P, N, 0.1, 1),
                   rvec(P, M * N, 0.1, 1), dvec(M * N)};
    double *dx = dvec(M * K), *W0 = rvec(P, N * K, 0.1, 1), *B0 = rvec(P, N, 0.1, 1);
    double *dw = dvec(N * K), *db = dvec(N);
    memcpy(dw, W0, sizeof(double) * N * K);
    memcpy(db, B0, sizeof(double) * N);
    matmul_bwd_f64(dx, dw, db, c.R, c.x, c.w, M, N, K, 0);
    for (int i = 0; i < N * K; i++) dw[i] -= W0[i];
    for (int i = 0; i < N; i++) db[i] -= B0[i];
    check_fd("matmul dinp", matmul_loss, &c, c.x, M * K, dx);
    check_fd("matmul dw", matmul_loss, &c, c.w, N * K, dw);
    check_fd("matmul dbias", matmul_loss, &c, c.b, N, db);
    free(c.x); free(c.w); free(c.b); free(c.R); free(c.out); free(dx); free(W0); free(B0); free(dw); free(db);
}

#ifdef _OPENMP
typedef struct { const Prec *P; int M, N, K; void *dout, *x, *w, *dinp, *dw, *db; } MatmulBwdRun;
static void matmul_bwd_run(void *ctx) {
    MatmulBwdRun *r = ctx;
    r->P->matmul_bwd(r->dinp, r->dw, r->db, r->dout, r->x, r->w, r->M, r->N, r->K, 1);
}
#endif

static void test_matmul_bwd_threads(void **state) {
    (void)state;
#ifdef _OPENMP
    for (int p = 0; p < 2; p++) {
        const Prec *P = &PRECS[p];
        const int M = 700, N = 130, K = 96;
        double *DO = rvec(P, M * N, 0.1, 1), *X = rvec(P, M * K, 0.1, 1), *W = rvec(P, N * K, 0.1, 1);
        double *D0 = rvec(P, M * K, 0.1, 1), *W0 = rvec(P, N * K, 0.1, 1), *B0 = rvec(P, N, 0.1, 1);
        MatmulBwdRun r[2];
        for (int t = 0; t < 2; t++) {
            r[t] = (MatmulBwdRun){P, M, N, K, rbuf_from(P, DO, M * N), rbuf_from(P, X, M * K),
                                  rbuf_from(P, W, N * K), rbuf_from(P, D0, M * K),
                                  rbuf_from(P, W0, N * K), rbuf_from(P, B0, N)};
            with_threads(t + 1, matmul_bwd_run, &r[t]);
        }
        check_bits("matmul_bwd dinp 2 threads vs 1", P, r[0].dinp, r[1].dinp, M * K);
        check_bits("matmul_bwd dw 2 threads vs 1", P, r[0].dw, r[1].dw, N * K);
        check_bits("matmul_bwd dbias 2 threads vs 1", P, r[0].db, r[1].db, N);
        for (int t = 0; t < 2; t++) {
            free(r[t].dout); free(r[t].x); free(r[t].w); free(r[t].dinp); free(r[t].dw); free(r[t].db);
        }
        free(DO); free(X); free(W); free(D0); free(W0); free(B0);
    }
#else
    skip();
#endif
}

// ---- embedding -------------------------------------------------------------------------------------

typedef struct { int N, C; const int32_t *tok; double *wte, *R, *out; } EmbCtx;
static double emb_loss(void *ctx) {
    EmbCtx *c = ctx;
    embedding_fwd_f64(c->out, c->tok, c->wte, c->N, c->C);
    return dotd(c->out, c->R, (int64_t)c->N * c->C);
}

#ifdef _OPENMP
typedef struct { const Prec *P; void *dwte, *dout; const int32_t *tok; int N, C; } EmbRun;
static void emb_bwd_run(void *ctx) {
    EmbRun *r = ctx;
    r->P->embedding_bwd(r->dwte, r->dout, r->tok, r->N, r->C);
}
#endif

static void test_embedding(void **state) {
    (void)state;
    static const int32_t tok[] = {3, 0, 10, 3, 3, 7, 0, 10, 5};
    const int N = 9, C = 70, V = 11;
    for (int p = 0; p < 2; p++) {
        const Prec *P = &PRECS[p];
        double *WTE = rvec(P, V * C, 0.1, 1), *G = rvec(P, N * C, 0.1, 1), *W0 = rvec(P, V * C, 0.1, 1);
        void *wte = rbuf_from(P, WTE, V * C), *out = rbuf(P, N * C);
        poison(P, out, N * C);
        P->embedding_fwd(out, tok, wte, N, C);
        double *O = fetch(P, out, N * C);
        for (int n = 0; n < N; n++) check_exact("embedding_fwd", P, O + n * C, WTE + tok[n] * C, C);
        // Backward: repeated tokens accumulate in n order, in the precision's arithmetic
        // (rp of a double sum of two values of the precision is their exact-rounded sum).
        void *dwte = rbuf_from(P, W0, V * C), *dout = rbuf_from(P, G, N * C);
        P->embedding_bwd(dwte, dout, tok, N, C);
        double *got = fetch(P, dwte, V * C), *ref = dvec(V * C);
        memcpy(ref, W0, sizeof(double) * V * C);
        for (int n = 0; n < N; n++)
            for (int i = 0; i < C; i++) ref[tok[n] * C + i] = rp(P, ref[tok[n] * C + i] + G[n * C + i]);
        check_exact("embedding_bwd", P, got, ref, V * C);
        free(WTE); free(G); free(W0); free(wte); free(out); free(O); free(dwte); free(dout); free(got); free(ref);
    }
    // f64 gradient by finite differences.
    const Prec *P = &PRECS[1];
    EmbCtx c = {N, C, tok, rvec(P, V * C, 0.1, 1), rvec(P, N * C, 0.1, 1), dvec(N * C)};
    double *g = dvec(V * C);
    memset(g, 0, sizeof(double) * V * C);
    embedding_bwd_f64(g, c.R, tok, N, C);
    check_fd("embedding dwte", emb_loss, &c, c.wte, V * C, g);
    free(c.wte); free(c.R); free(c.out); free(g);
#ifdef _OPENMP
    // Many repeats, large enough to run in parallel: 1 and 2 threads agree.
    for (int p = 0; p < 2; p++) {
        const Prec *Q = &PRECS[p];
        const int NN = 600;
        int32_t *tk = xmalloc(sizeof(int32_t) * NN);
        for (int n = 0; n < NN; n++) tk[n] = (n * 7) % V;
        double *G = rvec(Q, NN * C, 0.1, 1), *W0 = rvec(Q, V * C, 0.1, 1);
        EmbRun r[2];
        for (int t = 0; t < 2; t++) {
            r[t] = (EmbRun){Q, rbuf_from(Q, W0, V * C), rbuf_from(Q, G, NN * C), tk, NN, C};
            with_threads(t + 1, emb_bwd_run, &r[t]);
        }
        check_bits("embedding_bwd 2 threads vs 1", Q, r[0].dwte, r[1].dwte, V * C);
        for (int t = 0; t < 2; t++) { free(r[t].dwte); free(r[t].dout); }
        free(tk); free(G); free(W0);
    }
#endif
}

// ---- RMSNorm ---------------------------------------------------------------------------------

typedef struct { int N, C; double *x, *w, *R, *out, *rstd; } RmsCtx;
static const double RMS_EPS = 1e-5;
static double rms_loss(void *ctx) {
    RmsCtx *c = ctx;
    rmsnorm_fwd_f64(c->out, c->rstd, c->x, c->w, c->N, c->C, RMS_EPS);
    return dotd(c->out, c->R, (int64_t)c->N * c->C);
}

#ifdef _OPENMP
typedef struct { const Prec *P; int N, C; void *x, *w, *dout, *out, *rstd, *dinp, *dw; } RmsRun;
static void rms_run(void *ctx) {
    RmsRun *r = ctx;
    r->P->rmsnorm_fwd(r->out, r->rstd, r->x, r->w, r->N, r->C, RMS_EPS);
    r->P->rmsnorm_bwd(r->dinp, r->dw, r->dout, r->x, r->w, r->rstd, r->N, r->C);
}
#endif

static void test_rmsnorm(void **state) {
    (void)state;
    const int N = 6, C = 77;
    for (int p = 0; p < 2; p++) {
        const Prec *P = &PRECS[p];
        double *X = rvec(P, N * C, 0.05, 2), *W = rvec(P, C, 0.5, 1.5), *DY = rvec(P, N * C, 0.1, 1);
        double *D0 = rvec(P, N * C, 0.1, 1), *W0 = rvec(P, C, 0.1, 1);
        void *x = rbuf_from(P, X, N * C), *w = rbuf_from(P, W, C), *dy = rbuf_from(P, DY, N * C);
        void *out = rbuf(P, N * C), *rstd = rbuf(P, N);
        poison(P, out, N * C);
        poison(P, rstd, N);
        P->rmsnorm_fwd(out, rstd, x, w, N, C, RMS_EPS);
        double *O = fetch(P, out, N * C), *Rs = fetch(P, rstd, N);
        double *refo = dvec(N * C), refr[6];
        for (int n = 0; n < N; n++) {
            double ss = 0;
            for (int i = 0; i < C; i++) ss += X[n * C + i] * X[n * C + i];
            refr[n] = 1 / sqrt(ss / C + RMS_EPS);
            for (int i = 0; i < C; i++) refo[n * C + i] = X[n * C + i] * refr[n] * W[i];
        }
        check("rmsnorm_fwd rstd", P, Rs, refr, N, P->tol, 0);
        check("rmsnorm_fwd out", P, O, refo, N * C, P->tol, 0);
        // Each row alone gives the same bits.
        void *o1 = rbuf(P, C), *r1 = rbuf(P, 1);
        for (int n = 0; n < N; n++) {
            P->rmsnorm_fwd(o1, r1, at(P, x, n * C), w, 1, C, RMS_EPS);
            check_bits("rmsnorm_fwd row vs batched", P, o1, at(P, out, n * C), C);
            check_bits("rmsnorm_fwd rstd row vs batched", P, r1, at(P, rstd, n), 1);
        }
        // Backward against the formula, with the rstd the forward stored; "+=" outputs.
        void *dinp = rbuf_from(P, D0, N * C), *dw = rbuf_from(P, W0, C);
        P->rmsnorm_bwd(dinp, dw, dy, x, w, rstd, N, C);
        double *gi = fetch(P, dinp, N * C), *gw = fetch(P, dw, C);
        double *refi = dvec(N * C), *refw = dvec(C);
        memcpy(refw, W0, sizeof(double) * C);
        for (int n = 0; n < N; n++) {
            double r = Rs[n], dot = 0;
            for (int i = 0; i < C; i++) dot += DY[n * C + i] * W[i] * X[n * C + i] * r;
            for (int i = 0; i < C; i++) {
                double xh = X[n * C + i] * r;
                refi[n * C + i] = D0[n * C + i] + r * (DY[n * C + i] * W[i] - xh * dot / C);
                refw[i] += DY[n * C + i] * xh;
            }
        }
        check("rmsnorm_bwd dinp", P, gi, refi, N * C, P->tol, rms(refi, N * C));
        check("rmsnorm_bwd dw", P, gw, refw, C, P->tol, rms(refw, C));
        free(X); free(W); free(DY); free(D0); free(W0); free(x); free(w); free(dy); free(out);
        free(rstd); free(O); free(Rs); free(refo); free(o1); free(r1); free(dinp); free(dw);
        free(gi); free(gw); free(refi); free(refw);
    }
    // f64 gradients by finite differences.
    const Prec *P = &PRECS[1];
    RmsCtx c = {N, C, rvec(P, N * C, 0.05, 2), rvec(P, C, 0.5, 1.5), rvec(P, N * C, 0.1, 1),
                dvec(N * C), dvec(N)};
    rms_loss(&c);                          // rstd of the unperturbed input
    double *dx = dvec(N * C), *dw = dvec(C);
    memset(dx, 0, sizeof(double) * N * C);
    memset(dw, 0, sizeof(double) * C);
    rmsnorm_bwd_f64(dx, dw, c.R, c.x, c.w, c.rstd, N, C);
    check_fd("rmsnorm dinp", rms_loss, &c, c.x, N * C, dx);
    check_fd("rmsnorm dw", rms_loss, &c, c.w, C, dw);
    free(c.x); free(c.w); free(c.R); free(c.out); free(c.rstd); free(dx); free(dw);
#ifdef _OPENMP
    for (int p = 0; p < 2; p++) {         // parallel-sized: 1 and 2 threads agree
        const Prec *Q = &PRECS[p];
        const int NN = 512;
        double *X = rvec(Q, NN * C, 0.05, 2), *W = rvec(Q, C, 0.5, 1.5), *DY = rvec(Q, NN * C, 0.1, 1);
        RmsRun r[2];
        for (int t = 0; t < 2; t++) {
            r[t] = (RmsRun){Q, NN, C, rbuf_from(Q, X, NN * C), rbuf_from(Q, W, C), rbuf_from(Q, DY, NN * C),
                            rbuf(Q, NN * C), rbuf(Q, NN), rbuf_from(Q, DY, NN * C), rbuf_from(Q, W, C)};
            with_threads(t + 1, rms_run, &r[t]);
        }
        check_bits("rmsnorm_fwd 2 threads vs 1", Q, r[0].out, r[1].out, NN * C);
        check_bits("rmsnorm_bwd dinp 2 threads vs 1", Q, r[0].dinp, r[1].dinp, NN * C);
        check_bits("rmsnorm_bwd dw 2 threads vs 1", Q, r[0].dw, r[1].dw, C);
        for (int t = 0; t < 2; t++) {
            free(r[t].x); free(r[t].w); free(r[t].dout); free(r[t].out); free(r[t].rstd);
            free(r[t].dinp); free(r[t].dw);
        }
        free(X); free(W); free(DY);
    }
#endif
}

// ---- RoPE -----------------------------------------------------------------------------------------

enum { RB = 2, RT = 9, RH = 3, RD = 10, RT0 = 2, RTN = 5, RTMAX = 12 };
static const double THETA = 10000;
typedef struct { double *x, *cs, *R, *y; } RopeCtx;
static const int64_t ROPE_N = (int64_t)RB * RT * RH * RD;
static double rope_loss(void *ctx) {
    RopeCtx *c = ctx;
    memcpy(c->y, c->x, sizeof(double) * ROPE_N);
    rope_fwd_f64(c->y, c->cs, RB, RT, RT0, RTN, RH, RD);
    return dotd(c->y, c->R, ROPE_N);
}

static void test_rope(void **state) {
    (void)state;
    const int half = RD / 2;
    for (int p = 0; p < 2; p++) {
        const Prec *P = &PRECS[p];
        // Table: cos/sin(p * theta^(-2i/D)) from double, rounded once.
        void *cs = rbuf(P, RTMAX * half * 2);
        poison(P, cs, RTMAX * half * 2);
        P->rope_table(cs, RTMAX, RD, THETA);
        double *CS = fetch(P, cs, RTMAX * half * 2), *refcs = dvec(RTMAX * half * 2);
        for (int t = 0; t < RTMAX; t++)
            for (int i = 0; i < half; i++) {
                double ang = t * pow(THETA, -2.0 * i / RD);
                refcs[(t * half + i) * 2] = rp(P, cos(ang));
                refcs[(t * half + i) * 2 + 1] = rp(P, sin(ang));
            }
        check("rope_table", P, CS, refcs, RTMAX * half * 2, P->f64 ? 1e-15 : 1e-7, 1e-30);
        // Forward on rows t0 .. t0+Tn-1 of each sequence; the other rows untouched.
        double *X = rvec(P, ROPE_N, 0.1, 1);
        void *x = rbuf_from(P, X, ROPE_N);
        P->rope_fwd(x, cs, RB, RT, RT0, RTN, RH, RD);
        double *Y = fetch(P, x, ROPE_N), *ref = dvec(ROPE_N);
        memcpy(ref, X, sizeof(double) * ROPE_N);
        for (int b = 0; b < RB; b++)
            for (int t = RT0; t < RT0 + RTN; t++)
                for (int h = 0; h < RH; h++) {
                    double *r = ref + ((b * RT + t) * RH + h) * RD;
                    const double *xs = X + ((b * RT + t) * RH + h) * RD;
                    for (int i = 0; i < half; i++) {
                        double c = CS[(t * half + i) * 2], s = CS[(t * half + i) * 2 + 1];
                        r[i] = xs[i] * c - xs[i + half] * s;
                        r[i + half] = xs[i + half] * c + xs[i] * s;
                    }
                }
        check("rope_fwd", P, Y, ref, ROPE_N, P->tol, 1);
        for (int64_t i = 0; i < ROPE_N; i++) {
            int t = (int)(i / (RH * RD)) % RT;
            if ((t < RT0 || t >= RT0 + RTN) && !(Y[i] == X[i]))
                fail_msg("rope_fwd [%s] touched row t=%d outside [t0, t0+Tn)", P->name, t);
        }
        // Row at a time gives the same bits.
        void *x1 = rbuf_from(P, X, ROPE_N);
        for (int t = RT0; t < RT0 + RTN; t++) P->rope_fwd(x1, cs, RB, RT, t, 1, RH, RD);
        check_bits("rope_fwd row at a time vs batched", P, x1, x, ROPE_N);
        // The inverse rotation undoes the forward one, to rounding.
        P->rope_bwd(x, cs, RB, RT, RT0, RTN, RH, RD);
        double *Z = fetch(P, x, ROPE_N);
        check("rope_bwd(rope_fwd(x))", P, Z, X, ROPE_N, P->f64 ? 1e-15 : 1e-6, 1);
        free(cs); free(CS); free(refcs); free(X); free(x); free(Y); free(ref); free(x1); free(Z);
    }
    // f64: the gradient of <rope_fwd(x), R> is rope_bwd(R) (all rows; untouched ones pass R).
    const Prec *P = &PRECS[1];
    RopeCtx c = {rvec(P, ROPE_N, 0.1, 1), dvec(RTMAX * half * 2), rvec(P, ROPE_N, 0.1, 1), dvec(ROPE_N)};
    rope_table_f64(c.cs, RTMAX, RD, THETA);
    double *g = dvec(ROPE_N);
    memcpy(g, c.R, sizeof(double) * ROPE_N);
    rope_bwd_f64(g, c.cs, RB, RT, RT0, RTN, RH, RD);
    check_fd("rope dx", rope_loss, &c, c.x, ROPE_N, g);
    free(c.x); free(c.cs); free(c.R); free(c.y); free(g);
}

// ---- SwiGLU / SiLU ---------------------------------------------------------------------------------

static double silu_ref(double a) { return a / (1 + exp(-a)); }
static double dsilu_ref(double a) {
    double s = 1 / (1 + exp(-a));
    return s * (1 + a * (1 - s));
}

typedef struct { int64_t n; double *a, *b, *R, *h; } GluCtx;
static double swiglu_loss(void *ctx) {
    GluCtx *c = ctx;
    swiglu_fwd_f64(c->h, c->a, c->b, c->n);
    return dotd(c->h, c->R, c->n);
}
static double silu_loss(void *ctx) {
    GluCtx *c = ctx;
    silu_fwd_f64(c->h, c->a, c->n);
    return dotd(c->h, c->R, c->n);
}

static void test_swiglu_silu(void **state) {
    (void)state;
    const int64_t n = 1003;
    for (int p = 0; p < 2; p++) {
        const Prec *P = &PRECS[p];
        double *A = rvec(P, n, 0.01, 6), *B = rvec(P, n, 0.1, 1), *DH = rvec(P, n, 0.1, 1);
        A[0] = -100; A[1] = 100; A[2] = -30; A[3] = 40;   // saturation: finite, no NaN
        void *a = rbuf_from(P, A, n), *b = rbuf_from(P, B, n), *dh = rbuf_from(P, DH, n);
        void *h = rbuf(P, n), *da = rbuf(P, n), *db = rbuf(P, n);
        double *ref = dvec(n), *ref2 = dvec(n);
        poison(P, h, n);
        P->swiglu_fwd(h, a, b, n);
        double *H = fetch(P, h, n);
        for (int64_t i = 0; i < n; i++) ref[i] = silu_ref(A[i]) * B[i];
        // floor 1e-30: f32 flushes silu(-100) ~ -4e-42 (a denormal) to -0.
        check("swiglu_fwd", P, H, ref, n, P->tol, 1e-30);
        poison(P, da, n);
        poison(P, db, n);
        P->swiglu_bwd(da, db, dh, a, b, n);
        double *DA = fetch(P, da, n), *DB = fetch(P, db, n);
        for (int64_t i = 0; i < n; i++) {
            ref[i] = DH[i] * B[i] * dsilu_ref(A[i]);
            ref2[i] = DH[i] * silu_ref(A[i]);
        }
        check("swiglu_bwd da", P, DA, ref, n, P->tol, rms(ref, n));
        check("swiglu_bwd db", P, DB, ref2, n, P->tol, rms(ref2, n));
        poison(P, h, n);
        P->silu_fwd(h, a, n);
        get(P, H, h, n);
        for (int64_t i = 0; i < n; i++) ref[i] = silu_ref(A[i]);
        check("silu_fwd", P, H, ref, n, P->tol, 1e-30);
        poison(P, da, n);
        P->silu_bwd(da, dh, a, n);
        get(P, DA, da, n);
        for (int64_t i = 0; i < n; i++) ref[i] = DH[i] * dsilu_ref(A[i]);
        check("silu_bwd", P, DA, ref, n, P->tol, rms(ref, n));
        free(A); free(B); free(DH); free(a); free(b); free(dh); free(h); free(da); free(db);
        free(ref); free(ref2); free(H); free(DA); free(DB);
    }
    const Prec *P = &PRECS[1];
    const int64_t m = 200;
    GluCtx c = {m, rvec(P, m, 0.01, 5), rvec(P, m, 0.1, 1), rvec(P, m, 0.1, 1), dvec(m)};
    double *ga = dvec(m), *gb = dvec(m);
    swiglu_bwd_f64(ga, gb, c.R, c.a, c.b, m);
    check_fd("swiglu da", swiglu_loss, &c, c.a, m, ga);
    check_fd("swiglu db", swiglu_loss, &c, c.b, m, gb);
    silu_bwd_f64(ga, c.R, c.a, m);
    check_fd("silu dinp", silu_loss, &c, c.a, m, ga);
    free(c.a); free(c.b); free(c.R); free(c.h); free(ga); free(gb);
}

static void test_add(void **state) {
    (void)state;
    const int64_t n = 40001;                  // parallel-sized, odd
    for (int p = 0; p < 2; p++) {
        const Prec *P = &PRECS[p];
        double *A = rvec(P, n, 0.1, 1), *B = rvec(P, n, 0.1, 1), *ref = dvec(n);
        void *a = rbuf_from(P, A, n), *b = rbuf_from(P, B, n), *o = rbuf(P, n);
        for (int64_t i = 0; i < n; i++) ref[i] = rp(P, A[i] + B[i]);
        poison(P, o, n);
        P->add(o, a, b, n);
        double *O = fetch(P, o, n);
        check_exact("add", P, O, ref, n);
        P->add_inplace(a, b, n);
        get(P, O, a, n);
        check_exact("add_inplace", P, O, ref, n);
        free(A); free(B); free(ref); free(a); free(b); free(o); free(O);
    }
}

// ---- cross-entropy -------------------------------------------------------------------------------

typedef struct { int N, V; double *logits; const int32_t *tg; double dscale, *losses; } XentCtx;
static double xent_loss(void *ctx) {
    XentCtx *c = ctx;
    xent_fwd_bwd_f64(c->losses, NULL, c->logits, c->tg, c->N, c->V, c->dscale);
    double s = 0;
    for (int n = 0; n < c->N; n++) s += c->losses[n];
    return c->dscale * s;
}

// Reference: losses and (softmax - onehot) * dscale in double. The probabilities are
// exp(x - max) / s: exp(x - lse) would carry the rounding of lse = max + log(s), an ulp
// of the logits (1.8e-12 at |x| ~ 1e4), into every probability.
static void xent_ref(const double *X, const int32_t *tg, int N, int V, double dscale,
                     double *loss, double *d) {
    for (int n = 0; n < N; n++) {
        const double *x = X + (int64_t)n * V;
        if (tg[n] < 0) {
            loss[n] = 0;
            for (int i = 0; i < V; i++) d[(int64_t)n * V + i] = 0;
            continue;
        }
        double mx = x[0], s = 0;
        for (int i = 1; i < V; i++) mx = fmax(mx, x[i]);
        for (int i = 0; i < V; i++) s += exp(x[i] - mx);
        double lse = mx + log(s);
        loss[n] = lse - x[tg[n]];
        for (int i = 0; i < V; i++)
            d[(int64_t)n * V + i] = (exp(x[i] - mx) / s - (i == tg[n])) * dscale;
    }
}

#ifdef _OPENMP
typedef struct { const Prec *P; void *loss, *d, *x; const int32_t *tg; int N, V; } XentRun;
static void xent_run(void *ctx) {
    XentRun *r = ctx;
    r->P->xent_fwd_bwd(r->loss, r->d, r->x, r->tg, r->N, r->V, 0.5);
}
#endif

static void test_xent(void **state) {
    (void)state;
    static const int32_t tg[] = {3, -1, 0, 36, 17};
    const int N = 5, V = 37;
    const double dscale = 0.25;
    for (int p = 0; p < 2; p++) {
        const Prec *P = &PRECS[p];
        double *X = rvec(P, N * V, 0.01, 3), *rl = dvec(N), *rd = dvec(N * V);
        xent_ref(X, tg, N, V, dscale, rl, rd);
        void *x = rbuf_from(P, X, N * V), *loss = rbuf(P, N), *d = rbuf(P, N * V);
        poison(P, loss, N);
        poison(P, d, N * V);
        P->xent_fwd_bwd(loss, d, x, tg, N, V, dscale);
        double *L = fetch(P, loss, N), *D = fetch(P, d, N * V);
        check("xent losses", P, L, rl, N, P->tol, 0);
        check("xent dlogits", P, D, rd, N * V, P->tol, dscale / V);
        // Ignored row (target -1): loss and gradient exactly zero.
        check_exact("xent ignored row loss", P, L + 1, rl + 1, 1);
        check_exact("xent ignored row dlogits", P, D + V, rd + V, V);
        // Forward only: the same loss bits.
        void *loss2 = rbuf(P, N);
        poison(P, loss2, N);
        P->xent_fwd_bwd(loss2, NULL, x, tg, N, V, dscale);
        check_bits("xent forward-only losses", P, loss, loss2, N);
        // In place (dlogits == logits): the same bits as out of place.
        void *xi = rbuf_from(P, X, N * V);
        poison(P, loss2, N);
        P->xent_fwd_bwd(loss2, xi, xi, tg, N, V, dscale);
        check_bits("xent in-place losses", P, loss, loss2, N);
        check_bits("xent in-place dlogits", P, d, xi, N * V);
        // Row at a time: the same bits.
        for (int n = 0; n < N; n++) {
            P->xent_fwd_bwd(loss2, xi, at(P, x, n * V), tg + n, 1, V, dscale);
            check_bits("xent row loss vs batched", P, loss2, at(P, loss, n), 1);
            check_bits("xent row dlogits vs batched", P, xi, at(P, d, n * V), V);
        }
        // Huge logits (|x| ~ 1e4, spread of 2e4): finite, and still accurate.
        double *HX = dvec(N * V), *hl = dvec(N), *hd = dvec(N * V);
        for (int i = 0; i < N * V; i++) HX[i] = rp(P, (urand() * 2 - 1) * 1e4);
        xent_ref(HX, tg, N, V, dscale, hl, hd);
        put(P, x, HX, N * V);
        P->xent_fwd_bwd(loss, d, x, tg, N, V, dscale);
        get(P, L, loss, N);
        get(P, D, d, N * V);
        check("xent huge logits losses", P, L, hl, N, P->tol, 1);
        check("xent huge logits dlogits", P, D, hd, N * V, P->tol, dscale / V);
        free(X); free(rl); free(rd); free(x); free(loss); free(d); free(L); free(D); free(loss2);
        free(xi); free(HX); free(hl); free(hd);
    }
    const Prec *P = &PRECS[1];
    XentCtx c = {N, V, rvec(P, N * V, 0.01, 3), tg, dscale, dvec(N)};
    double *g = dvec(N * V);
    xent_fwd_bwd_f64(c.losses, g, c.logits, tg, N, V, dscale);
    check_fd("xent dlogits", xent_loss, &c, c.logits, N * V, g);
    free(c.logits); free(c.losses); free(g);
#ifdef _OPENMP
    for (int p = 0; p < 2; p++) {          // parallel-sized: 1 and 2 threads agree
        const Prec *Q = &PRECS[p];
        const int NN = 64, VV = 600;
        int32_t tt[64];
        for (int n = 0; n < NN; n++) tt[n] = n % 5 == 4 ? -1 : (n * 37) % VV;
        double *XX = rvec(Q, NN * VV, 0.01, 3);
        XentRun r[2];
        for (int t = 0; t < 2; t++) {
            r[t] = (XentRun){Q, rbuf(Q, NN), rbuf(Q, NN * VV), rbuf_from(Q, XX, NN * VV), tt, NN, VV};
            with_threads(t + 1, xent_run, &r[t]);
        }
        check_bits("xent losses 2 threads vs 1", Q, r[0].loss, r[1].loss, NN);
        check_bits("xent dlogits 2 threads vs 1", Q, r[0].d, r[1].d, NN * VV);
        for (int t = 0; t < 2; t++) { free(r[t].loss); free(r[t].d); free(r[t].x); }
        free(XX);
    }
#endif
}

// ---- parameter reductions and AdamW ------------------------------------------------------------------

#ifdef _OPENMP
typedef struct { const Prec *P; const void *x; int64_t n; double s; } SumsqRun;
static void sumsq_run(void *ctx) {
    SumsqRun *r = ctx;
    r->s = r->P->sumsq_param(r->x, r->n);
}
#endif

static void test_sumsq_scale(void **state) {
    (void)state;
    const int64_t n = 3 * 16384 + 12345;       // several chunks and a tail
    for (int p = 0; p < 2; p++) {
        const Prec *P = &PRECS[p];
        // Small integers: every partial sum is exact, so any order gives the exact value.
        double *X = dvec(n), exact = 0;
        for (int64_t i = 0; i < n; i++) {
            X[i] = (double)(i % 7) - 3;
            exact += X[i] * X[i];
        }
        void *x = rbuf_from(P, X, n);
        double s = P->sumsq_param(x, n);
        if (!(s == exact)) fail_msg("sumsq_param [%s] integers: %.17g, want %.17g", P->name, s, exact);
        if (!(P->sumsq_param(x, 0) == 0)) fail_msg("sumsq_param [%s] n=0", P->name);
        // Random values against a double sum (rounding only).
        double *Y = rvec(P, n, 0.001, 1), ref = 0;
        for (int64_t i = 0; i < n; i++) ref += Y[i] * Y[i];
        put(P, x, Y, n);
        s = P->sumsq_param(x, n);
        if (!(fabs(s - ref) <= 1e-12 * ref))
            fail_msg("sumsq_param [%s] random: %.17g, want %.17g", P->name, s, ref);
        // sumsq_params: each segment bit for bit as sumsq_param of it (an empty one is 0)
        {
            const int64_t off[4] = {0, 100, 100, n - 5}, len[4] = {100, 0, n - 105, 5};
            double out[4];
            P->sumsq_params(x, off, len, 4, out);
            for (int k = 0; k < 4; k++) {
                const double want = P->sumsq_param((const char *)x + off[k] * P->es, len[k]);
                if (!(out[k] == want)) fail_msg("sumsq_params [%s] segment %d: %.17g, want %.17g", P->name, k, out[k], want);
            }
        }
#ifdef _OPENMP
        SumsqRun r[3];
        for (int t = 0; t < 3; t++) {
            r[t] = (SumsqRun){P, x, n, 0};
            with_threads(t + 1, sumsq_run, &r[t]);
        }
        if (!(r[0].s == r[1].s && r[0].s == r[2].s))
            fail_msg("sumsq_param [%s] depends on the thread count", P->name);
#endif
        // scale_param: product in double, rounded once.
        double *ref2 = dvec(n);
        for (int64_t i = 0; i < n; i++) ref2[i] = rp(P, Y[i] * 0.3);
        P->scale_param(x, 0.3, n);
        double *Z = fetch(P, x, n);
        check_exact("scale_param", P, Z, ref2, n);
        free(X); free(x); free(Y); free(ref2); free(Z);
    }
}

static void test_first_nonfinite(void **state) {
    (void)state;
    const int64_t n = 100003;
    for (int p = 0; p < 2; p++) {
        const Prec *P = &PRECS[p];
        double *X = rvec(P, n, 0.1, 1);
        X[17] = P->f64 ? DBL_MAX : FLT_MAX;     // largest finite values are finite
        X[99999] = P->f64 ? -DBL_MAX : -FLT_MAX;
        void *x = rbuf_from(P, X, n);
        struct { int64_t i1, i2; double v1, v2; int64_t want; } cases[] = {
            {-1, -1, 0, 0, -1},
            {70000, 90000, NAN, INFINITY, 70000},
            {90000, 70000, NAN, -INFINITY, 70000},
            {5, 70000, -INFINITY, NAN, 5},
            {0, 1, NAN, NAN, 0},
            {n - 1, -1, INFINITY, 0, n - 1},
            {16384, 16383, NAN, NAN, 16383},    // both sides of a chunk boundary
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            put(P, x, X, n);
            if (cases[c].i1 >= 0) put(P, at(P, x, cases[c].i1), &cases[c].v1, 1);
            if (cases[c].i2 >= 0) put(P, at(P, x, cases[c].i2), &cases[c].v2, 1);
            int64_t got = P->first_nonfinite(x, n);
            if (got != cases[c].want)
                fail_msg("first_nonfinite [%s] case %zu: %lld, want %lld", P->name, c,
                         (long long)got, (long long)cases[c].want);
        }
        if (P->first_nonfinite(x, 0) != -1) fail_msg("first_nonfinite [%s] n=0", P->name);
        free(X); free(x);
    }
}

// adamw_runs: each run bit for bit as adamw on it (its own weight decay), elements outside
// every run untouched, an empty run ignored
static void test_adamw_runs(void **state) {
    (void)state;
    const int64_t n = 9001;
    const int64_t off[4] = {1, 3, 3, 5000}, len[4] = {2, 0, 4101, 4000};
    const double wd[4] = {0.1, 0.5, 0.0, 0.2};
    for (int p = 0; p < 2; p++) {
        const Prec *P = &PRECS[p];
        double *Pp = rvec(P, n, 0.1, 1), *G = rvec(P, n, 0.001, 1), *M = rvec(P, n, 0.001, 0.1);
        double *V = rvec(P, n, 1e-6, 1e-2);
        for (int64_t i = 0; i < n; i++) V[i] = fabs(V[i]);
        void *buf[2][4];
        for (int k = 0; k < 2; k++) {
            buf[k][0] = rbuf_from(P, Pp, n);
            buf[k][1] = rbuf_from(P, G, n);
            buf[k][2] = rbuf_from(P, M, n);
            buf[k][3] = rbuf_from(P, V, n);
        }
        P->adamw_runs(buf[0][0], buf[0][1], buf[0][2], buf[0][3], off, len, wd, 4, 1e-3, 0.9, 0.95, 0.271, 0.142625, 1e-6);
        for (int r = 0; r < 4; r++) {
            char *b[4];
            for (int k = 0; k < 4; k++) b[k] = (char *)buf[1][k] + off[r] * P->es;
            P->adamw(b[0], b[1], b[2], b[3], len[r], 1e-3, 0.9, 0.95, 0.271, 0.142625, 1e-6, wd[r]);
        }
        static const char *what[4] = {"p", "g", "m", "v"};
        for (int k = 0; k < 4; k++)
            if (memcmp(buf[0][k], buf[1][k], (size_t)n * P->es))
                fail_msg("adamw_runs [%s]: %s differs from per-run adamw", P->name, what[k]);
        double *gp = fetch(P, buf[0][0], n);
        for (int64_t i = 0; i < n; i++) {
            const int in = (i >= 1 && i < 3) || (i >= 3 && i < 4104) || (i >= 5000 && i < 9000);
            if (!in && gp[i] != Pp[i]) fail_msg("adamw_runs [%s]: element %lld outside every run changed", P->name, (long long)i);
            if (in && gp[i] == Pp[i]) fail_msg("adamw_runs [%s]: element %lld inside a run unchanged", P->name, (long long)i);
        }
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 4; j++) free(buf[k][j]);
        free(Pp); free(G); free(M); free(V); free(gp);
    }
}

static void test_adamw(void **state) {
    (void)state;
    const int64_t n = 40001;
    const double lr = 1e-3, b1 = 0.9, b2 = 0.95, bc1 = 1 - pow(b1, 3), bc2 = 1 - pow(b2, 3);
    const double eps = 1e-6, wd = 0.1;
    for (int p = 0; p < 2; p++) {
        const Prec *P = &PRECS[p];
        double *Pp = rvec(P, n, 0.1, 1), *G = rvec(P, n, 0.001, 1), *M = rvec(P, n, 0.001, 0.1);
        double *V = rvec(P, n, 1e-6, 1e-2);
        for (int64_t i = 0; i < n; i++) V[i] = fabs(V[i]);
        G[0] = 0; V[0] = 0; M[0] = 0;           // zero state and gradient: eps and wd only
        G[1] = 0; V[1] = 0;                     // eps dominates the denominator
        void *pp = rbuf_from(P, Pp, n), *g = rbuf_from(P, G, n), *m = rbuf_from(P, M, n);
        void *v = rbuf_from(P, V, n);
        P->adamw(pp, g, m, v, n, lr, b1, b2, bc1, bc2, eps, wd);
        double *rpp = dvec(n), *rm = dvec(n), *rv = dvec(n), *sp = dvec(n), *sm = dvec(n);
        for (int64_t i = 0; i < n; i++) {
            rm[i] = b1 * M[i] + (1 - b1) * G[i];
            rv[i] = b2 * V[i] + (1 - b2) * G[i] * G[i];
            double step = (rm[i] / bc1) / (sqrt(rv[i] / bc2) + eps);
            rpp[i] = Pp[i] - lr * (step + wd * Pp[i]);
            sm[i] = fabs(b1 * M[i]) + fabs((1 - b1) * G[i]);   // m = sum of terms of either sign
            sp[i] = fabs(Pp[i]) + lr * (fabs(step) + fabs(wd * Pp[i]));
        }
        double *gp = fetch(P, pp, n), *gm = fetch(P, m, n), *gv = fetch(P, v, n);
        // Stored values are the formula rounded once (f32: within an ulp or so; the
        // update lr * step ~ 1e-3 |p| must be right to ~1e-4 of itself in f32).
        double tol = P->f64 ? 1e-14 : 2.5e-7;
        check_scaled("adamw p", P, gp, rpp, sp, n, tol);
        check_scaled("adamw m", P, gm, rm, sm, n, tol);
        check("adamw v", P, gv, rv, n, tol, 1e-300);
        free(Pp); free(G); free(M); free(V); free(pp); free(g); free(m); free(v);
        free(rpp); free(rm); free(rv); free(sp); free(sm); free(gp); free(gm); free(gv);
    }
}

// ---- the fused K/V projection's split and gather ----------------------------------------------

enum { KB = 2, KT = 9, KG = 3, KD = 10, KR0 = 5, KNR = 11 };   // rows [5, 16): crosses sequences
#define KV_ROWS ((int64_t)KB * KT)
#define KV_GD ((int64_t)KG * KD)
#define KV_ROW (6 * KV_GD)   // one row of the fused [rows, 6*G*D] buffer

// double reference of one head's RoPE at position t (inverse: rotation by -angle)
static void kv_rope_ref(double *dst, const double *src, const double *CS, int t, int inverse) {
    const int half = KD / 2;
    for (int i = 0; i < half; i++) {
        double c = CS[(t * half + i) * 2], sn = CS[(t * half + i) * 2 + 1] * (inverse ? -1 : 1);
        dst[i] = src[i] * c - src[i + half] * sn;
        dst[i + half] = src[i + half] * c + src[i] * sn;
    }
}

static void test_kv_split_gather(void **state) {
    (void)state;
    const int half = KD / 2;
    for (int p = 0; p < 2; p++) {
        const Prec *P = &PRECS[p];
        void *cs = rbuf(P, KT * half * 2);
        P->rope_table(cs, KT, KD, THETA);
        double *CS = fetch(P, cs, KT * half * 2);
        char what[96];

        // ---- split, rows [KR0, KR0+KNR) of a full-size kv (rows r0.. of the call are
        // rows 0.. of its kv argument)
        double *KVF = rvec(P, KV_ROWS * KV_ROW, 0.1, 1);
        void *kvf = rbuf_from(P, KVF, KV_ROWS * KV_ROW);
        double *OLD[6];
        void *dst[6], *full[6], *one[6];
        for (int j = 0; j < 6; j++) {
            OLD[j] = rvec(P, KV_ROWS * KV_GD, 0.1, 1);   // what rows outside the range keep
            dst[j] = rbuf_from(P, OLD[j], KV_ROWS * KV_GD);
            full[j] = rbuf_from(P, OLD[j], KV_ROWS * KV_GD);
            one[j] = rbuf_from(P, OLD[j], KV_ROWS * KV_GD);
        }
        P->kv_split_rope_fwd(dst, at(P, kvf, KR0 * KV_ROW), cs, KR0, KNR, KT, KG, KD);
        for (int j = 0; j < 6; j++) {
            double *got = fetch(P, dst[j], KV_ROWS * KV_GD), *ref = dvec(KV_ROWS * KV_GD);
            memcpy(ref, OLD[j], sizeof(double) * (size_t)(KV_ROWS * KV_GD));
            for (int64_t r = KR0; r < KR0 + KNR; r++)
                for (int h = 0; h < KG; h++) {
                    const double *src = KVF + r * KV_ROW + j * KV_GD + h * KD;
                    if (j & 1) memcpy(ref + r * KV_GD + h * KD, src, sizeof(double) * KD);
                    else kv_rope_ref(ref + r * KV_GD + h * KD, src, CS, (int)(r % KT), 0);
                }
            snprintf(what, sizeof what, "kv_split_rope_fwd part %d", j);
            if (j & 1) check_exact(what, P, got, ref, KV_ROWS * KV_GD);
            else check(what, P, got, ref, KV_ROWS * KV_GD, P->tol, 1);
            for (int64_t e = 0; e < KV_ROWS * KV_GD; e++) {
                int64_t r = e / KV_GD;
                if ((r < KR0 || r >= KR0 + KNR) && !(got[e] == OLD[j][e]))
                    fail_msg("kv_split_rope_fwd [%s] part %d touched row %lld outside [r0, r0+nr)", P->name, j,
                             (long long)r);
            }
            free(got); free(ref);
        }
        // all rows at once; one row at a time gives the same bits, and so does the
        // sub-range above; keys are rope_fwd's bits (a plain copy, then rope_fwd)
        P->kv_split_rope_fwd(full, kvf, cs, 0, KV_ROWS, KT, KG, KD);
        for (int64_t r = 0; r < KV_ROWS; r++) P->kv_split_rope_fwd(one, at(P, kvf, r * KV_ROW), cs, r, 1, KT, KG, KD);
        for (int j = 0; j < 6; j++) {
            snprintf(what, sizeof what, "kv_split_rope_fwd part %d row at a time vs all rows", j);
            check_bits(what, P, one[j], full[j], KV_ROWS * KV_GD);
            snprintf(what, sizeof what, "kv_split_rope_fwd part %d rows [r0, r0+nr) vs all rows", j);
            check_bits(what, P, at(P, dst[j], KR0 * KV_GD), at(P, full[j], KR0 * KV_GD), KNR * KV_GD);
            void *k = rbuf(P, KV_ROWS * KV_GD);
            for (int64_t r = 0; r < KV_ROWS; r++)
                memcpy(at(P, k, r * KV_GD), at(P, kvf, r * KV_ROW + j * KV_GD), (size_t)KV_GD * P->es);
            if (!(j & 1)) P->rope_fwd(k, cs, KB, KT, 0, KT, KG, KD);
            snprintf(what, sizeof what, "kv_split_rope_fwd part %d vs copy%s", j, j & 1 ? "" : " + rope_fwd");
            check_bits(what, P, full[j], k, KV_ROWS * KV_GD);
            free(k);
        }

        // ---- gather, rows [KR0, KR0+KNR): every dkv element written, src unchanged
        double *SRC[6];
        const void *src[6];
        void *srcb[6];
        for (int j = 0; j < 6; j++) {
            SRC[j] = rvec(P, KV_ROWS * KV_GD, 0.1, 1);
            srcb[j] = rbuf_from(P, SRC[j], KV_ROWS * KV_GD);
            src[j] = srcb[j];
        }
        void *dkv = rbuf(P, KNR * KV_ROW), *dkvf = rbuf(P, KV_ROWS * KV_ROW), *dkv1 = rbuf(P, KV_ROWS * KV_ROW);
        poison(P, dkv, KNR * KV_ROW);
        poison(P, dkvf, KV_ROWS * KV_ROW);
        poison(P, dkv1, KV_ROWS * KV_ROW);
        P->kv_gather_rope_bwd(dkv, src, cs, KR0, KNR, KT, KG, KD);
        double *got = fetch(P, dkv, KNR * KV_ROW), *ref = dvec(KNR * KV_ROW);
        for (int64_t i = 0; i < KNR; i++)
            for (int j = 0; j < 6; j++)
                for (int h = 0; h < KG; h++) {
                    const double *g = SRC[j] + (KR0 + i) * KV_GD + h * KD;
                    double *o = ref + i * KV_ROW + j * KV_GD + h * KD;
                    if (j & 1) memcpy(o, g, sizeof(double) * KD);
                    else kv_rope_ref(o, g, CS, (int)((KR0 + i) % KT), 1);
                }
        for (int64_t i = 0; i < KNR; i++)
            for (int j = 0; j < 6; j++) {
                snprintf(what, sizeof what, "kv_gather_rope_bwd row %lld part %d", (long long)i, j);
                if (j & 1) check_exact(what, P, got + i * KV_ROW + j * KV_GD, ref + i * KV_ROW + j * KV_GD, KV_GD);
                else check(what, P, got + i * KV_ROW + j * KV_GD, ref + i * KV_ROW + j * KV_GD, KV_GD, P->tol, 1);
            }
        for (int j = 0; j < 6; j++) {
            double *after = fetch(P, srcb[j], KV_ROWS * KV_GD);
            check_exact("kv_gather_rope_bwd leaves src unchanged", P, after, SRC[j], KV_ROWS * KV_GD);
            free(after);
        }
        // all rows; row at a time; the sub-range; keys are rope_bwd's bits
        P->kv_gather_rope_bwd(dkvf, src, cs, 0, KV_ROWS, KT, KG, KD);
        for (int64_t r = 0; r < KV_ROWS; r++) P->kv_gather_rope_bwd(at(P, dkv1, r * KV_ROW), src, cs, r, 1, KT, KG, KD);
        check_bits("kv_gather_rope_bwd row at a time vs all rows", P, dkv1, dkvf, KV_ROWS * KV_ROW);
        check_bits("kv_gather_rope_bwd rows [r0, r0+nr) vs all rows", P, dkv, at(P, dkvf, KR0 * KV_ROW), KNR * KV_ROW);
        for (int j = 0; j < 6; j += 2) {
            void *k = rbuf_from(P, SRC[j], KV_ROWS * KV_GD);
            P->rope_bwd(k, cs, KB, KT, 0, KT, KG, KD);
            for (int64_t r = 0; r < KV_ROWS; r++) {
                snprintf(what, sizeof what, "kv_gather_rope_bwd part %d row %lld vs rope_bwd", j, (long long)r);
                check_bits(what, P, at(P, dkvf, r * KV_ROW + j * KV_GD), at(P, k, r * KV_GD), KV_GD);
            }
            free(k);
        }

        // ---- f64: the gather is the split's adjoint, <split(kv), R> = <kv, gather(R)>
        if (P->f64) {
            double lhs = 0, rhs = 0, scale = 0;
            double *DKVF = fetch(P, dkvf, KV_ROWS * KV_ROW);
            for (int j = 0; j < 6; j++) {
                double *F = fetch(P, full[j], KV_ROWS * KV_GD);
                lhs += dotd(F, SRC[j], KV_ROWS * KV_GD);
                for (int64_t e = 0; e < KV_ROWS * KV_GD; e++) scale += fabs(F[e] * SRC[j][e]);
                free(F);
            }
            rhs = dotd(KVF, DKVF, KV_ROWS * KV_ROW);
            if (!(fabs(lhs - rhs) <= 1e-13 * scale))
                fail_msg("kv_gather_rope_bwd is not the adjoint of kv_split_rope_fwd: %.17g vs %.17g", lhs, rhs);
            free(DKVF);
        }
        for (int j = 0; j < 6; j++) {
            free(dst[j]); free(full[j]); free(one[j]); free(OLD[j]); free(SRC[j]); free(srcb[j]);
        }
        free(got); free(ref); free(dkv); free(dkvf); free(dkv1);
        free(KVF); free(kvf); free(CS); free(cs);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_gemm_vs_naive, reset_rng),
        cmocka_unit_test_setup(test_gemm_k0, reset_rng),
        cmocka_unit_test_setup(test_gemm_row_independence, reset_rng),
        cmocka_unit_test_setup(test_gemm_threads, reset_rng),
        cmocka_unit_test_setup(test_matmul_fwd, reset_rng),
        cmocka_unit_test_setup(test_matmul_bwd, reset_rng),
        cmocka_unit_test_setup(test_matmul_fd, reset_rng),
        cmocka_unit_test_setup(test_matmul_bwd_threads, reset_rng),
        cmocka_unit_test_setup(test_embedding, reset_rng),
        cmocka_unit_test_setup(test_rmsnorm, reset_rng),
        cmocka_unit_test_setup(test_rope, reset_rng),
        cmocka_unit_test_setup(test_kv_split_gather, reset_rng),
        cmocka_unit_test_setup(test_swiglu_silu, reset_rng),
        cmocka_unit_test_setup(test_add, reset_rng),
        cmocka_unit_test_setup(test_xent, reset_rng),
        cmocka_unit_test_setup(test_sumsq_scale, reset_rng),
        cmocka_unit_test_setup(test_first_nonfinite, reset_rng),
        cmocka_unit_test_setup(test_adamw, reset_rng),
        cmocka_unit_test_setup(test_adamw_runs, reset_rng),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
