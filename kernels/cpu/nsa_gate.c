// kernels/cpu/nsa_gate.c — the NSA output gate (docs/design.md §3):
//
//   gate_act_*  g = act(logits) over [N, G, 3]: softmax over the three branch
//               logits of each (row, group), or elementwise sigmoid (paper).
//   combine_*   o[r,h,:] = sum_b g[r, group(h), b] * o_b[r,h,:] over the branches
//               b = cmp, sel, win whose output pointer is non-NULL.
//               gate == NULL is the one-hot gate of a forced branch: o = o_b.
//
// All loops are per row (or per triple) with a fixed order, so results do not
// depend on the thread count.
#include "nsa_common.h"

// ---- gate activation -------------------------------------------------------------

// softmax over each triple (max-subtracted), or sigmoid of every element
void CPU_FN(gate_act_fwd)(void *gate_, const void *logits_, int64_t NG, int act) {
    real *gate = gate_;
    const real *x = logits_;
#pragma omp parallel for schedule(static) if (NG > 4096)
    for (int64_t i = 0; i < NG; i++) {
        const real *xi = x + 3 * i;
        real *gi = gate + 3 * i;
        if (act == NSA_GATE_SIGMOID) {
            for (int b = 0; b < 3; b++) gi[b] = 1 / (1 + R_EXP(-xi[b]));
        } else {
            real m = xi[0] > xi[1] ? xi[0] : xi[1];
            m = m > xi[2] ? m : xi[2];
            real e0 = R_EXP(xi[0] - m), e1 = R_EXP(xi[1] - m), e2 = R_EXP(xi[2] - m);
            real s = e0 + e1 + e2;
            gi[0] = e0 / s;
            gi[1] = e1 / s;
            gi[2] = e2 / s;
        }
    }
}

// softmax: dx_b = g_b (dg_b - sum_c g_c dg_c);  sigmoid: dx = dg g (1 - g). Overwrites.
void CPU_FN(gate_act_bwd)(void *dlogits_, const void *dgate_, const void *gate_, int64_t NG,
                          int act) {
    real *dx = dlogits_;
    const real *dg = dgate_, *gate = gate_;
#pragma omp parallel for schedule(static) if (NG > 4096)
    for (int64_t i = 0; i < NG; i++) {
        const real *gi = gate + 3 * i, *dgi = dg + 3 * i;
        real *dxi = dx + 3 * i;
        if (act == NSA_GATE_SIGMOID) {
            for (int b = 0; b < 3; b++) dxi[b] = dgi[b] * gi[b] * (1 - gi[b]);
        } else {
            real dot = gi[0] * dgi[0] + gi[1] * dgi[1] + gi[2] * dgi[2];
            for (int b = 0; b < 3; b++) dxi[b] = gi[b] * (dgi[b] - dot);
        }
    }
}

// ---- combine -----------------------------------------------------------------------

// o[r,h,:] = sum over non-NULL branches (cmp, sel, win order) of w_b * o_b[r,h,:],
// w_b = gate[r, group(h), b], or 1 when gate is NULL (one-hot: o = o_b exactly).
void CPU_FN(combine_fwd)(void *o_, const void *gate_, const void *o_cmp, const void *o_sel,
                         const void *o_win, int64_t N, int H, int G, int D) {
    real *o = o_;
    const real *gate = gate_;
    const real *br[NSA_NBRANCH] = {o_cmp, o_sel, o_win};
    const int hpg = H / G;
#pragma omp parallel for schedule(static) if (N > 16)
    for (int64_t r = 0; r < N; r++) {
        for (int h = 0; h < H; h++) {
            const int64_t off = (r * H + h) * D;
            real *out = o + off;
            int first = 1;   // the first branch assigns (so one-hot copies o_b bit for bit)
            for (int b = 0; b < NSA_NBRANCH; b++) {
                if (!br[b]) continue;
                real w = gate ? gate[(r * G + h / hpg) * NSA_NBRANCH + b] : 1;
                const real *src = br[b] + off;
                if (first)
                    for (int e = 0; e < D; e++) out[e] = w * src[e];
                else
                    nsa_axpy(out, w, src, D);
                first = 0;
            }
            if (first) nsa_zero(out, D);   // no branch at all
        }
    }
}

// do_b = w_b * dout (overwrite; NULL do_b skipped; gate NULL: do_b = dout).
// dgate[r,g,b] = sum_{h in g, ascending} dout[r,h,:]·o_b[r,h,:] (overwrite; 0 for a
// NULL o_b; dgate may be NULL). The formula holds for the one-hot gate too.
void CPU_FN(combine_bwd)(void *do_cmp, void *do_sel, void *do_win, void *dgate_,
                         const void *dout_, const void *gate_, const void *o_cmp,
                         const void *o_sel, const void *o_win, int64_t N, int H, int G, int D) {
    real *dgate = dgate_;
    const real *dout = dout_, *gate = gate_;
    real *dbr[NSA_NBRANCH] = {do_cmp, do_sel, do_win};
    const real *br[NSA_NBRANCH] = {o_cmp, o_sel, o_win};
    const int hpg = H / G;
#pragma omp parallel for schedule(static) if (N > 16)
    for (int64_t r = 0; r < N; r++) {
        for (int b = 0; b < NSA_NBRANCH; b++) {
            if (!dbr[b]) continue;
            for (int h = 0; h < H; h++) {
                const int64_t off = (r * H + h) * D;
                real w = gate ? gate[(r * G + h / hpg) * NSA_NBRANCH + b] : 1;
                for (int e = 0; e < D; e++) dbr[b][off + e] = w * dout[off + e];
            }
        }
        if (!dgate) continue;
        for (int gr = 0; gr < G; gr++) {
            for (int b = 0; b < NSA_NBRANCH; b++) {
                real acc = 0;
                for (int h = gr * hpg; br[b] && h < (gr + 1) * hpg; h++) {
                    const int64_t off = (r * H + h) * D;
                    acc += nsa_dot(dout + off, br[b] + off, D);
                }
                dgate[(r * G + gr) * NSA_NBRANCH + b] = acc;
            }
        }
    }
}
