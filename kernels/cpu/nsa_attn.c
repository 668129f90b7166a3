// kernels/cpu/nsa_attn.c — the three NSA attention branches (DESIGN.md §3):
//
//   cmp  query t attends to the compressed blocks Kc/Vc visible to it
//        (i < nsa_cmp_visible(g, t), i.e. blocks that end at or before t)
//   sel  query t attends to the raw keys of its selected blocks, causal inside
//        the current block: s in [j*lsel, min((j+1)*lsel, t+1)) per selected j
//   win  query t attends to the raw keys max(0, t-w+1) .. t
//
// All three are plain softmax attention of one query row over an explicit,
// ascending list of key positions, so one pair of row kernels does the math
// (attn_row_fwd / attn_row_bwd) and each branch only says which keys a row sees
// (the *_keys functions). Keys and values of a KV group are rows of a
// [B, T or NC, G, D] tensor: key position s of group gr in sequence b lives at
// base + s*G*D with base = K + (b*T + 0)*G*D + gr*D.
//
// Forward: work is split over (b, t, group) units; a unit builds its key list once
// and computes every head of the group. Each row's bits depend only on its own
// inputs, never on t0/Tn or the thread count.
//
// Backward: work is split over (b, group) pairs. The owner of a pair walks queries
// t ascending and heads ascending and is the only writer of that pair's dK/dV
// rows and of dq rows of its heads, so every gradient element is accumulated in
// one fixed order (no atomics).
#include "nsa_common.h"

// ---- row kernels --------------------------------------------------------------------
//
// One query row (b, t) of one KV group: the hpg = H/G heads of the group share the
// row's key list, so they are processed together key by key (each K/V row is
// loaded once for all heads while it is in L1). Heads of a group are consecutive
// in q/o/dq/dout ([B,T,H,D]: stride D) and in lse (stride 1). The arithmetic of
// each head is exactly that of a lone head: the head loop is innermost but no
// value crosses heads.

// Forward, for every head h of the group, over nk keys at positions pos[] (rows
// of K/V with stride ks):
//   s_j = sc * q_h·K_j,  m = max_j s_j,  sum = sum_j exp(s_j - m) (j ascending),
//   o_h = (sum_j exp(s_j - m) V_j) / sum,  lse_h = m + log(sum).
// No keys: o = 0, lse = -inf. p: scratch of hpg*nk + hpg reals.
static void attn_row_fwd(real *o, real *lse, const real *q, const real *K, const real *V,
                         int64_t ks, const int *pos, int nk, int hpg, int D, real sc, real *p) {
    nsa_zero(o, hpg * D);
    if (nk == 0) {
        for (int h = 0; h < hpg; h++) lse[h] = -INFINITY;
        return;
    }
    real *sum = p + (int64_t)hpg * nk;
    for (int j = 0; j < nk; j++) {   // scores, p[h*nk + j]
        const real *kj = K + pos[j] * ks;
        for (int h = 0; h < hpg; h++) p[h * nk + j] = sc * nsa_dot(q + h * D, kj, D);
    }
    for (int h = 0; h < hpg; h++) {   // max-subtracted exponentials
        real *ph = p + h * nk, m = -INFINITY, s = 0;
        for (int j = 0; j < nk; j++) m = ph[j] > m ? ph[j] : m;
        for (int j = 0; j < nk; j++) {
            ph[j] = R_EXP(ph[j] - m);
            s += ph[j];
        }
        sum[h] = s;
        lse[h] = m + R_LOG(s);
    }
    for (int j = 0; j < nk; j++) {   // weighted values
        const real *vj = V + pos[j] * ks;
        for (int h = 0; h < hpg; h++) nsa_axpy(o + h * D, p[h * nk + j], vj, D);
    }
    for (int h = 0; h < hpg; h++)
        for (int e = 0; e < D; e++) o[h * D + e] /= sum[h];
}

// Backward of attn_row_fwd with the saved lse (one pass over the keys):
//   p_j = exp(s_j - lse_h), Drow = do_h·o_h, ds_j = p_j (do_h·V_j - Drow)
//   dq_h += sc * sum_j ds_j K_j;  dK_j += sc * ds_j * q_h;  dV_j += p_j * do_h.
// Keys go in tiles of NSA_KTILE, heads outer within a tile: the tile's K/V/dK/dV
// rows stay in L1 for all heads, and consecutive updates of one dK_j/dV_j are a
// tile apart (no store-to-load chain). Each dK_j/dV_j still receives the heads in
// ascending order. A head whose row saw no key (lse = -inf) contributes nothing.
// acc: scratch of hpg*D + hpg reals.
#define NSA_KTILE 16
static void attn_row_bwd(real *dq, real *dK, real *dV, const real *dout, const real *q,
                         const real *K, const real *V, const real *o, const real *lse,
                         int64_t ks, const int *pos, int nk, int hpg, int D, real sc, real *acc) {
    if (nk == 0) return;
    real *Drow = acc + (int64_t)hpg * D;
    nsa_zero(acc, hpg * D);
    for (int h = 0; h < hpg; h++) Drow[h] = nsa_dot(dout + h * D, o + h * D, D);
    for (int j0 = 0; j0 < nk; j0 += NSA_KTILE) {
        const int j1 = j0 + NSA_KTILE < nk ? j0 + NSA_KTILE : nk;
        for (int h = 0; h < hpg; h++) {
            if (lse[h] == -INFINITY) continue;
            const real *qh = q + h * D, *doh = dout + h * D;
            for (int j = j0; j < j1; j++) {
                const int64_t off = pos[j] * ks;
                const real p = R_EXP(sc * nsa_dot(qh, K + off, D) - lse[h]);
                const real ds = p * (nsa_dot(doh, V + off, D) - Drow[h]);
                nsa_axpy(acc + h * D, ds, K + off, D);
                nsa_axpy(dK + off, sc * ds, qh, D);
                nsa_axpy(dV + off, p, doh, D);
            }
        }
    }
    for (int h = 0; h < hpg; h++) nsa_axpy(dq + h * D, sc, acc + h * D, D);
}

// ---- key lists of the branches ---------------------------------------------------------

// Which branch, plus what its key list needs. Key positions index rows of the
// branch's K/V (compressed blocks for cmp, tokens for sel/win).
typedef enum { BR_CMP, BR_SEL, BR_WIN } Branch;

typedef struct {
    Branch br;
    const NsaGeom *g;
    const int32_t *sel_idx;   // sel only
} KeySet;

// Most keys any row of the branch can see (size of the per-thread scratch).
static int keys_capacity(const KeySet *ks) {
    const NsaGeom *g = ks->g;
    switch (ks->br) {
    case BR_CMP: return g->NC;
    case BR_SEL: return g->n * g->lsel;   // n blocks of <= lsel keys, even if repeated
    default: return g->w < 0 ? 0 : g->w < g->T ? g->w : g->T;
    }
}

// Fill pos[] with the ascending key positions of query (b, t, group gr); returns
// their count.
static int row_keys(const KeySet *ks, int b, int t, int gr, int *pos) {
    const NsaGeom *g = ks->g;
    int nk = 0;
    if (ks->br == BR_CMP) {
        int nv = nsa_cmp_visible(g, t);
        for (int i = 0; i < nv; i++) pos[nk++] = i;
    } else if (ks->br == BR_WIN) {
        int lo = t - g->w + 1 > 0 ? t - g->w + 1 : 0;
        for (int s = lo; s <= t; s++) pos[nk++] = s;
    } else {
        const int32_t *sel = ks->sel_idx + (((int64_t)b * g->T + t) * g->G + gr) * g->n;
        for (int c = 0; c < g->n; c++) {
            if (sel[c] < 0) continue;   // -1 padding
            int s0 = sel[c] * g->lsel, s1 = s0 + g->lsel < t + 1 ? s0 + g->lsel : t + 1;
            for (int s = s0; s < s1; s++) pos[nk++] = s;
        }
    }
    return nk;
}

// ---- drivers ---------------------------------------------------------------------------

// Forward of rows t0 .. t0+Tn-1 of every (b, head). K/V have NK rows per sequence.
static void attn_fwd(const KeySet *ks, real *o, real *lse, const real *q, const real *K,
                     const real *V, int NK, int t0, int Tn) {
    const NsaGeom *g = ks->g;
    const int H = g->H, G = g->G, D = g->D, hpg = H / G, cap = keys_capacity(ks);
    const int64_t kstride = (int64_t)G * D;
    const real sc = (real)g->scale;
    const int units = g->B * Tn * G;
#pragma omp parallel if (units > 1)
    {
        int *pos = nsa_scratch(sizeof(int) * cap);
        real *p = nsa_scratch(sizeof(real) * hpg * (cap + 1));
#pragma omp for schedule(dynamic, 4)
        for (int u = 0; u < units; u++) {
            int b = u / (Tn * G), t = t0 + (u / G) % Tn, gr = u % G;
            int nk = row_keys(ks, b, t, gr, pos);
            const int64_t kv = (int64_t)b * NK * kstride + gr * D;
            const int64_t row = ((int64_t)b * g->T + t) * H + gr * hpg;   // first head
            attn_row_fwd(o + row * D, lse + row, q + row * D, K + kv, V + kv, kstride, pos, nk,
                         hpg, D, sc, p);
        }
        free(pos);
        free(p);
    }
}

// Backward over all rows: dq, dK, dV +=. One thread per (b, group) pair.
static void attn_bwd(const KeySet *ks, real *dq, real *dK, real *dV, const real *dout,
                     const real *q, const real *K, const real *V, const real *o,
                     const real *lse, int NK) {
    const NsaGeom *g = ks->g;
    const int H = g->H, G = g->G, D = g->D, hpg = H / G, cap = keys_capacity(ks);
    const int64_t kstride = (int64_t)G * D;
    const real sc = (real)g->scale;
#pragma omp parallel if (g->B * G > 1)
    {
        int *pos = nsa_scratch(sizeof(int) * cap);
        real *acc = nsa_scratch(sizeof(real) * hpg * (D + 1));
#pragma omp for schedule(static)
        for (int u = 0; u < g->B * G; u++) {
            int b = u / G, gr = u % G;
            const int64_t kv = (int64_t)b * NK * kstride + gr * D;
            for (int t = 0; t < g->T; t++) {
                int nk = row_keys(ks, b, t, gr, pos);
                const int64_t row = ((int64_t)b * g->T + t) * H + gr * hpg;   // first head
                attn_row_bwd(dq + row * D, dK + kv, dV + kv, dout + row * D, q + row * D, K + kv,
                             V + kv, o + row * D, lse + row, kstride, pos, nk, hpg, D, sc, acc);
            }
        }
        free(pos);
        free(acc);
    }
}

// ---- the ops ---------------------------------------------------------------------------

void CPU_FN(cmp_attn_fwd)(void *o, void *lse, const void *q, const void *Kc, const void *Vc,
                          const NsaGeom *g, int t0, int Tn) {
    KeySet ks = {BR_CMP, g, NULL};
    attn_fwd(&ks, o, lse, q, Kc, Vc, g->NC, t0, Tn);
}

void CPU_FN(cmp_attn_bwd)(void *dq, void *dKc, void *dVc, const void *dout, const void *q,
                          const void *Kc, const void *Vc, const void *o, const void *lse,
                          const NsaGeom *g) {
    KeySet ks = {BR_CMP, g, NULL};
    attn_bwd(&ks, dq, dKc, dVc, dout, q, Kc, Vc, o, lse, g->NC);
}

void CPU_FN(sel_attn_fwd)(void *o, void *lse, const void *q, const void *k, const void *v,
                          const int32_t *sel_idx, const NsaGeom *g, int t0, int Tn) {
    KeySet ks = {BR_SEL, g, sel_idx};
    attn_fwd(&ks, o, lse, q, k, v, g->T, t0, Tn);
}

void CPU_FN(sel_attn_bwd)(void *dq, void *dk, void *dv, const void *dout, const void *q,
                          const void *k, const void *v, const void *o, const void *lse,
                          const int32_t *sel_idx, const NsaGeom *g) {
    KeySet ks = {BR_SEL, g, sel_idx};
    attn_bwd(&ks, dq, dk, dv, dout, q, k, v, o, lse, g->T);
}

void CPU_FN(win_attn_fwd)(void *o, void *lse, const void *q, const void *k, const void *v,
                          const NsaGeom *g, int t0, int Tn) {
    KeySet ks = {BR_WIN, g, NULL};
    attn_fwd(&ks, o, lse, q, k, v, g->T, t0, Tn);
}

void CPU_FN(win_attn_bwd)(void *dq, void *dk, void *dv, const void *dout, const void *q,
                          const void *k, const void *v, const void *o, const void *lse,
                          const NsaGeom *g) {
    KeySet ks = {BR_WIN, g, NULL};
    attn_bwd(&ks, dq, dk, dv, dout, q, k, v, o, lse, g->T);
}
