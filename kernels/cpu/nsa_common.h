// kernels/cpu/nsa_common.h — small helpers shared by the NSA kernels (nsa_*.c).
//
// Included by C files that are compiled twice (see real.h), so everything here
// is `static inline` and written in terms of `real`.
//
// Determinism: every reduction over D in the NSA kernels goes through nsa_dot,
// whose summation order is fixed by the code alone (NSA_NACC interleaved partial
// sums combined by a fixed halving tree). It therefore gives the same bits for the
// same inputs in every call, whatever the thread count or the number of rows in
// the call. Elementwise helpers (axpy) involve no reduction at all.
#ifndef NSA_CPU_NSA_COMMON_H
#define NSA_CPU_NSA_COMMON_H
#include <stdio.h>
#include <stdlib.h>
#include "cpu_ops.h"

// Partial sums per dot product. 16 fills one 512-bit register of floats (two of
// doubles): GCC keeps them in vector registers and emits one FMA per 16 lanes.
#define NSA_NACC 16

// sum_e a[e]*b[e]. Element e of the full chunks of 16 goes into partial sum
// e mod 16, the D mod 16 tail elements into one more sum in order; the 16 partial
// sums are folded 8+8, 4+4, 2+2, 1+1 (written out so GCC keeps them in a register
// and folds with shuffles), then the tail sum is added.
static inline real nsa_dot(const real *a, const real *b, int D) {
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

// y[e] += a * x[e]
static inline void nsa_axpy(real *y, real a, const real *x, int D) {
    for (int e = 0; e < D; e++) y[e] += a * x[e];
}

// y[e] += c[r] * x[r][e] for r = 0 .. n-1 in order: per element exactly the chain
// of n successive nsa_axpy calls, but each 16-element chunk of y stays in a
// register while the n rows stream through (no store/reload of y per row). The
// `omp simd` keeps GCC from vectorising across r with gathers instead.
static inline void nsa_axpy_rows(real *y, const real *c, const real *const *x, int n, int D) {
    int e = 0;
    for (; e + NSA_NACC <= D; e += NSA_NACC) {
        real a[NSA_NACC];
        for (int u = 0; u < NSA_NACC; u++) a[u] = y[e + u];
        for (int r = 0; r < n; r++) {
            const real *xr = x[r] + e, cr = c[r];
#pragma omp simd
            for (int u = 0; u < NSA_NACC; u++) a[u] += cr * xr[u];
        }
        for (int u = 0; u < NSA_NACC; u++) y[e + u] = a[u];
    }
    for (; e < D; e++)
        for (int r = 0; r < n; r++) y[e] += c[r] * x[r][e];
}

static inline void nsa_zero(real *y, int D) {
    for (int e = 0; e < D; e++) y[e] = 0;
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
