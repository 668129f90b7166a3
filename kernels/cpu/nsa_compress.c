// kernels/cpu/nsa_compress.c — the compression phi of the NSA compressed branch
// (docs/design.md §3): compressed block i covers tokens [i*d, i*d + l).
//
//   compress_avg_*   phi = avg: mean pooling of the l keys (or values) of a block.
//   block_gather_*   phi = mlp, first step: gather each block's l rows of k into one
//                    row of l*D features and add the intra-block position embedding
//                    pe[l,D]; the MLP itself (matmuls, SiLU) is done by dense ops.
//
// Forward ops work on a block range [i0, i0+Ni) and compute each block with the
// same code whatever the range, so compressing block by block as tokens arrive
// (sequential prefill) gives the batched result bit for bit.
//
// Backward ops accumulate into dk (+=). A token belongs to up to ceil(l/d) blocks;
// the thread that owns token s's dk row sums that token's contributions over its
// blocks in ascending block order, then adds the sum once: no two threads write
// the same row, and the order never depends on scheduling.
#include "nsa_common.h"

// Blocks containing token s: i*d <= s < i*d + l and 0 <= i < NC.
static inline void blocks_of_token(const NsaGeom *g, int s, int *ilo, int *ihi) {
    int lo = s - g->l + 1;
    *ilo = lo <= 0 ? 0 : (lo + g->d - 1) / g->d;   // ceil((s-l+1)/d), clamped at 0
    int hi = s / g->d;
    *ihi = hi < g->NC - 1 ? hi : g->NC - 1;        // inclusive; empty when ilo > ihi
}

// ---- phi = avg --------------------------------------------------------------------

// Kc[b,i,gr,:] = (sum_{r=0..l-1, ascending} k[b,i*d+r,gr,:]) / l
void CPU_FN(compress_avg_fwd)(void *Kc_, const void *k_, const NsaGeom *g, int i0, int Ni) {
    real *Kc = Kc_;
    const real *k = k_;
    const int G = g->G, D = g->D, rowlen = G * D;
    const real l = (real)g->l;
#pragma omp parallel for schedule(static) if (g->B * Ni > 1)
    for (int u = 0; u < g->B * Ni; u++) {
        int b = u / Ni, i = i0 + u % Ni;
        const real *kb = k + ((int64_t)b * g->T + (int64_t)i * g->d) * rowlen;
        real *out = Kc + ((int64_t)b * g->NC + i) * rowlen;
        for (int gr = 0; gr < G; gr++) {
            real *o = out + gr * D;
            nsa_zero(o, D);
            for (int r = 0; r < g->l; r++) nsa_axpy(o, 1, kb + (int64_t)r * rowlen + gr * D, D);
            for (int e = 0; e < D; e++) o[e] /= l;
        }
    }
}

// dk[b,s,gr,:] += sum_{i containing s, ascending} dKc[b,i,gr,:] / l
void CPU_FN(compress_avg_bwd)(void *dk_, const void *dKc_, const NsaGeom *g) {
    real *dk = dk_;
    const real *dKc = dKc_;
    const int G = g->G, D = g->D, rowlen = G * D;
    const real l = (real)g->l;
#pragma omp parallel
    {
        real *acc = nsa_scratch(sizeof(real) * D);
#pragma omp for schedule(static)
        for (int u = 0; u < g->B * g->T; u++) {
            int b = u / g->T, s = u % g->T, ilo, ihi;
            blocks_of_token(g, s, &ilo, &ihi);
            if (ilo > ihi) continue;   // token in no block (tail of the sequence)
            for (int gr = 0; gr < G; gr++) {
                nsa_zero(acc, D);
                for (int i = ilo; i <= ihi; i++) {
                    const real *src = dKc + ((int64_t)b * g->NC + i) * rowlen + gr * D;
                    for (int e = 0; e < D; e++) acc[e] += src[e] / l;
                }
                nsa_axpy(dk + (int64_t)u * rowlen + gr * D, 1, acc, D);
            }
        }
        free(acc);
    }
}

// ---- phi = mlp: block gather + position embedding ---------------------------------

// X[(b*NC+i)*G+gr, r*D+e] = k[b,i*d+r,gr,e] + pe[r,e]
void CPU_FN(block_gather_fwd)(void *X_, const void *k_, const void *pe_, const NsaGeom *g,
                              int i0, int Ni) {
    real *X = X_;
    const real *k = k_, *pe = pe_;
    const int G = g->G, D = g->D, rowlen = G * D;
#pragma omp parallel for schedule(static) if (g->B * Ni > 1)
    for (int u = 0; u < g->B * Ni; u++) {
        int b = u / Ni, i = i0 + u % Ni;
        const real *kb = k + ((int64_t)b * g->T + (int64_t)i * g->d) * rowlen;
        for (int gr = 0; gr < G; gr++) {
            real *x = X + (((int64_t)b * g->NC + i) * G + gr) * g->l * D;
            for (int r = 0; r < g->l; r++) {
                const real *src = kb + (int64_t)r * rowlen + gr * D;
                for (int e = 0; e < D; e++) x[r * D + e] = src[e] + pe[r * D + e];
            }
        }
    }
}

// dk[b,s,gr,:] += sum_{i containing s, ascending} dX[(b*NC+i)*G+gr, (s-i*d)*D : +D]
// dpe[r,:]     += sum_{rows ascending} dX[row, r*D : +D]
void CPU_FN(block_gather_bwd)(void *dk_, void *dpe_, const void *dX_, const NsaGeom *g) {
    real *dk = dk_, *dpe = dpe_;
    const real *dX = dX_;
    const int G = g->G, D = g->D, rowlen = G * D;
    const int64_t xrow = (int64_t)g->l * D, nrows = (int64_t)g->B * g->NC * G;
#pragma omp parallel
    {
        real *acc = nsa_scratch(sizeof(real) * D);
        // dk: thread owns token rows
#pragma omp for schedule(static)
        for (int u = 0; u < g->B * g->T; u++) {
            int b = u / g->T, s = u % g->T, ilo, ihi;
            blocks_of_token(g, s, &ilo, &ihi);
            if (ilo > ihi) continue;
            for (int gr = 0; gr < G; gr++) {
                nsa_zero(acc, D);
                for (int i = ilo; i <= ihi; i++) {
                    const real *src = dX + (((int64_t)b * g->NC + i) * G + gr) * xrow
                                         + (int64_t)(s - i * g->d) * D;
                    nsa_axpy(acc, 1, src, D);
                }
                nsa_axpy(dk + (int64_t)u * rowlen + gr * D, 1, acc, D);
            }
        }
        // dpe: thread owns position rows r. (NULL dpe: no position-embedding gradient
        // wanted; not promised by ops.h but harmless.)
        if (dpe) {
#pragma omp for schedule(static)
            for (int r = 0; r < g->l; r++) {
                nsa_zero(acc, D);
                for (int64_t row = 0; row < nrows; row++) nsa_axpy(acc, 1, dX + row * xrow + r * D, D);
                nsa_axpy(dpe + r * D, 1, acc, D);
            }
        }
        free(acc);
    }
}
