// kernels/cpu/nsa_select.c — top-n block selection of the NSA selection branch
// (docs/design.md §3, paper Eq. 8-10).
//
// For query row t of KV group gr (every head h of the group):
//   p_cmp[h,i] = exp(scale * q[t,h]·Kc_i - lse[t,h])   for visible compressed blocks i
//                (the compressed branch's softmax probabilities, from its saved lse)
//   score[j]   = sum_{h in group} sum_i (overlap(i,j)/d) * p_cmp[h,i]          (Eq. 9)
// with overlap(i,j) = |[i*d, i*d+l) ∩ [j*lsel, (j+1)*lsel)| (nsa_overlap_num).
// Forced blocks: 0, cur = t/lsel and cur-1. The remaining n - #forced slots go to
// the highest scores among the complete, non-forced blocks j in [1, cur-2], exact
// ties to the lower index. Output: the chosen blocks ascending, -1 padded to n.
// One selection per (b, t, group), so all heads of a group read the same blocks.
//
// Scores are accumulated in double in a fixed order (heads ascending, blocks i
// ascending) in both precisions: selection is discrete, and the extra precision
// keeps the fp32 ranking close to the exact one. Selection passes no gradient.
#include "nsa_common.h"

// Eq. 9 scores of selection blocks 0..cur for row t: q points at the row's first
// head of the group, lse at that head's lse; heads are consecutive (stride D).
// Kc points at block 0 of the group; blocks are kstride apart.
static void block_scores(double *score, const real *q, const real *lse, const real *Kc,
                         int64_t kstride, const NsaGeom *g, int t) {
    const int cur = t / g->lsel, nv = nsa_cmp_visible(g, t), hpg = g->H / g->G;
    const real sc = (real)g->scale;
    for (int j = 0; j <= cur; j++) score[j] = 0;
    for (int h = 0; h < hpg; h++) {
        for (int i = 0; i < nv; i++) {
            real p = nsa_exp(sc * nsa_dot(q + h * g->D, Kc + i * kstride, g->D) - lse[h]);
            // blocks overlapping [i*d, i*d+l); all <= cur since the block ends <= t. The
            // cut to cur is that fact checked where score[] (NS entries) is written: a
            // visibility that is off gives other scores, never a write past the scratch
            int j0 = i * g->d / g->lsel, j1 = (i * g->d + g->l - 1) / g->lsel;
            if (j1 > cur) j1 = cur;
            for (int j = j0; j <= j1; j++)
                score[j] += (double)nsa_overlap_num(g, i, j) / g->d * p;
        }
    }
}

// Forced blocks plus the top scores among candidates 1 .. cur-2; writes n entries.
static void choose_blocks(int32_t *out, const double *score, unsigned char *taken,
                          const NsaGeom *g, int t) {
    const int cur = t / g->lsel;
    int nforced = 0;
    for (int j = 0; j <= cur; j++) {
        taken[j] = j == 0 || j >= cur - 1;   // forced: 0, cur-1, cur
        nforced += taken[j];
    }
    // n - nforced rounds of argmax; strict '>' scanning upwards keeps the lower
    // index on exact ties.
    for (int c = 0; c < g->n - nforced; c++) {
        int best = -1;
        for (int j = 1; j <= cur - 2; j++)
            if (!taken[j] && (best < 0 || score[j] > score[best])) best = j;
        if (best < 0) break;   // fewer candidates than slots: all taken
        taken[best] = 1;
    }
    int m = 0;
    for (int j = 0; j <= cur && m < g->n; j++)   // m < n only matters for n < 3 (invalid)
        if (taken[j]) out[m++] = j;
    while (m < g->n) out[m++] = -1;
}

void CPU_FN(select_blocks)(int32_t *sel_idx, const void *q_, const void *Kc_, const void *lse_,
                           const NsaGeom *g, int t0, int Tn) {
    const real *q = q_, *Kc = Kc_, *lse = lse_;
    const int H = g->H, G = g->G, D = g->D, hpg = H / G, units = g->B * Tn * G;
    const int64_t kstride = (int64_t)G * D;
#pragma omp parallel if (units > 1)
    {
        double *score = nsa_scratch(sizeof(double) * g->NS);
        unsigned char *taken = nsa_scratch(g->NS);
#pragma omp for schedule(dynamic, 8)
        for (int u = 0; u < units; u++) {
            int b = u / (Tn * G), t = t0 + (u / G) % Tn, gr = u % G;
            int64_t row = ((int64_t)b * g->T + t) * H + gr * hpg;   // first head of group
            block_scores(score, q + row * D, lse + row,
                         Kc + (int64_t)b * g->NC * kstride + gr * D, kstride, g, t);
            choose_blocks(sel_idx + (((int64_t)b * g->T + t) * G + gr) * g->n, score, taken, g, t);
        }
        free(score);
        free(taken);
    }
}
