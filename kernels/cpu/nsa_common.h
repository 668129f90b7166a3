// kernels/cpu/nsa_common.h — small helpers shared by the NSA kernels (nsa_*.c).
//
// Included by C files that are compiled twice (see real.h), so everything here
// is `static inline` and written in terms of `real`.
//
// Determinism: every reduction in the NSA kernels goes through nsa_dot / nsa_sum,
// whose summation order is fixed by the code alone (NSA_NACC interleaved partial
// sums combined by a fixed halving tree), or is a plain loop in a fixed order. So
// the same inputs give the same bits in every call, whatever the thread count or
// the number of rows in the call. Elementwise helpers (axpy, exp) involve no
// reduction at all, so vectorised and scalar code paths agree bit for bit.
#ifndef NSA_CPU_NSA_COMMON_H
#define NSA_CPU_NSA_COMMON_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_ops.h"

// Partial sums per dot product. 16 fills one 512-bit register of floats (two of
// doubles): GCC keeps them in vector registers and emits one FMA per 16 lanes.
#define NSA_NACC 16

// sum_e a[e]*b[e]. Element e of the full chunks of 16 goes into partial sum
// e mod 16, the D mod 16 tail elements into one more sum in order; the 16 partial
// sums are folded 8+8, 4+4, 2+2, 1+1 (written out so GCC keeps them in a register
// and folds with shuffles), then the tail sum is added.
static inline real nsa_dot_n(const real *a, const real *b, int D) {
    real acc[NSA_NACC] = {0}, tail = 0;
    int e = 0;
    for (; e + NSA_NACC <= D; e += NSA_NACC)
        for (int u = 0; u < NSA_NACC; u++) acc[u] += a[e + u] * b[e + u];
    for (; e < D; e++) tail += a[e] * b[e];
    for (int u = 0; u < 8; u++) acc[u] += acc[u + 8];
    for (int u = 0; u < 4; u++) acc[u] += acc[u + 4];
    for (int u = 0; u < 2; u++) acc[u] += acc[u + 2];
    return (acc[0] + acc[1]) + tail;
}

// D = 64 (the production head dim) gets its own fully unrolled copy of the same
// arithmetic; same for nsa_axpy.
static inline real nsa_dot(const real *a, const real *b, int D) {
    return D == 64 ? nsa_dot_n(a, b, 64) : nsa_dot_n(a, b, D);
}

// sum_j x[j] with the same fixed partial-sum scheme as nsa_dot.
static inline real nsa_sum(const real *x, int n) {
    real acc[NSA_NACC] = {0}, tail = 0;
    int j = 0;
    for (; j + NSA_NACC <= n; j += NSA_NACC)
        for (int u = 0; u < NSA_NACC; u++) acc[u] += x[j + u];
    for (; j < n; j++) tail += x[j];
    for (int u = 0; u < 8; u++) acc[u] += acc[u + 8];
    for (int u = 0; u < 4; u++) acc[u] += acc[u + 4];
    for (int u = 0; u < 2; u++) acc[u] += acc[u + 2];
    return (acc[0] + acc[1]) + tail;
}

// y[e] += a * x[e]
static inline void nsa_axpy_n(real *y, real a, const real *x, int D) {
    for (int e = 0; e < D; e++) y[e] += a * x[e];
}
static inline void nsa_axpy(real *y, real a, const real *x, int D) {
    if (D == 64) nsa_axpy_n(y, a, x, 64);
    else nsa_axpy_n(y, a, x, D);
}

static inline void nsa_zero(real *y, int D) {
    for (int e = 0; e < D; e++) y[e] = 0;
}

// exp(x) without a libm call, so that loops over arrays of scores vectorise.
// Cody-Waite reduction x = k*ln2 + r (|r| <= ln2/2; k from the round-to-nearest
// trick of adding 1.5*2^(mantissa bits)), Taylor polynomial of e^r in Horner form
// (degree 7 for float: truncation < 6e-9 relative; degree 13 for double: < 5e-18),
// times 2^k assembled in the exponent bits. Accurate to about 1 ulp; results below
// the normal range (x < -87.3 / -708.3) are flushed to 0, x above 88 / 709
// gives +inf, NaN stays NaN. Pure arithmetic on the argument: deterministic.
#ifdef NSA_REAL_F64
#define NSA_EXP_MAGIC 6755399441055744.0   // 1.5 * 2^52
#define NSA_EXP_LO (-708.3)
#define NSA_EXP_HI 709.0
#define NSA_LN2_HI 6.93147180369123816490e-01   // ln2 = HI + LO, k*HI exact (fdlibm)
#define NSA_LN2_LO 1.90821492927058770002e-10
typedef uint64_t nsa_ubits;
#define NSA_EXP_SHIFT 52
#define NSA_EXP_BIAS 1023
#else
#define NSA_EXP_MAGIC 12582912.0f   // 1.5 * 2^23
#define NSA_EXP_LO (-87.3f)
#define NSA_EXP_HI 88.0f
#define NSA_LN2_HI 0.693359375f                  // ln2 = HI + LO, k*HI exact (Cephes)
#define NSA_LN2_LO (-2.12194440e-4f)
typedef uint32_t nsa_ubits;
#define NSA_EXP_SHIFT 23
#define NSA_EXP_BIAS 127
#endif

static inline real nsa_exp(real x) {
    const real xc = x < NSA_EXP_LO ? NSA_EXP_LO : x > NSA_EXP_HI ? NSA_EXP_HI : x;
    const real t = xc * (real)1.4426950408889634074 + NSA_EXP_MAGIC;   // k in the low bits
    const real k = t - NSA_EXP_MAGIC;
    const real r = (xc - k * NSA_LN2_HI) - k * NSA_LN2_LO;
#ifdef NSA_REAL_F64
    real p = 1.0 / 6227020800.0;   // 1/13!
    static const double inv_fact[13] = {1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
                                        1.0 / 362880.0, 1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0,
                                        1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0};
    for (int i = 0; i < 13; i++) p = p * r + inv_fact[i];
#else
    real p = 1.0f / 5040.0f;   // 1/7!
    static const float inv_fact[7] = {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f,
                                      0.5f, 1.0f, 1.0f};
    for (int i = 0; i < 7; i++) p = p * r + inv_fact[i];
#endif
    nsa_ubits tb, kb;
    const real magic = NSA_EXP_MAGIC;
    memcpy(&tb, &t, sizeof t);
    memcpy(&kb, &magic, sizeof magic);
    nsa_ubits sb = (tb - kb + NSA_EXP_BIAS) << NSA_EXP_SHIFT;   // bits of 2^k
    real scale;
    memcpy(&scale, &sb, sizeof scale);
    real y = p * scale;
    return x < NSA_EXP_LO ? 0 : x > NSA_EXP_HI ? (real)INFINITY : y;
}

// malloc that aborts: kernel scratch is small (a few rows) and an op has no way
// to report failure.
static inline void *nsa_scratch(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "%s:%d: out of memory allocating %zu bytes of NSA scratch\n",
                __FILE__, __LINE__, bytes);
        exit(1);
    }
    return p;
}
#endif
