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
// (row_keys). Keys and values are [B, NK, G, D] tensors (NK = NC for cmp, T
// otherwise): key position s of group gr in sequence b is the row at
// (b*NK + s)*G*D + gr*D, i.e. rows of one (b, gr) are G*D apart.
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

// ---- per-thread scratch ----------------------------------------------------------------

// The backward goes through a row's keys in tiles of NSA_KTILE (see attn_row_bwd).
#define NSA_KTILE 16

typedef struct {
    int *pos;     // key positions of the current row                      [cap]
    int *act;     // heads of the row that saw keys (bwd)                  [hpg]
    real *p;      // fwd: scores, then exp(s - max), per head              [hpg * cap]
                  // bwd: p and ds of a tile, per head                     [2 * hpg * KTILE]
    real *acc;    // bwd: per-head dq accumulators                         [hpg * D]
    real *hval;   // per-head scalar: softmax sum (fwd) or Drow (bwd)      [hpg]
} Scratch;

static Scratch scratch_new(int cap, int hpg, int D) {
    Scratch w;
    int np = cap > 2 * NSA_KTILE ? cap : 2 * NSA_KTILE;
    w.pos = nsa_scratch(sizeof(int) * cap);
    w.act = nsa_scratch(sizeof(int) * hpg);
    w.p = nsa_scratch(sizeof(real) * hpg * np);
    w.acc = nsa_scratch(sizeof(real) * hpg * D);
    w.hval = nsa_scratch(sizeof(real) * hpg);
    return w;
}

static void scratch_free(Scratch *w) {
    free(w->pos);
    free(w->act);
    free(w->p);
    free(w->acc);
    free(w->hval);
}

// ---- row kernels --------------------------------------------------------------------
//
// One query row (b, t) of one KV group: the hpg = H/G heads of the group share the
// row's key list w->pos[0..nk), so they are processed together. Heads of a group
// are consecutive in q/o/dq/dout ([B,T,H,D]: stride D) and in lse (stride 1). The
// arithmetic of each head is exactly that of a lone head (no value crosses heads
// except dK/dV, which receive the heads in ascending order); the loop orders only
// decide which independent updates are interleaved, so that consecutive updates
// of one accumulator row are far apart (no store-to-load latency chains) and a
// K/V row is used by all heads while it is in L1.

// Forward, for every head h of the group, over the nk keys (rows of K/V at
// stride ks):
//   s_j = sc * q_h·K_j,  m = max_j s_j,  sum = sum_j exp(s_j - m) (nsa_sum order),
//   o_h = (sum_j exp(s_j - m) V_j) / sum,  lse_h = m + log(sum).
// No keys: o = 0, lse = -inf.
static void attn_row_fwd(real *o, real *lse, const real *q, const real *K, const real *V,
                         int64_t ks, int nk, int hpg, int D, real sc, Scratch *w) {
    nsa_zero(o, hpg * D);
    if (nk == 0) {
        for (int h = 0; h < hpg; h++) lse[h] = -INFINITY;
        return;
    }
    for (int j = 0; j < nk; j++) {   // scores p[h*nk + j]
        const real *kj = K + w->pos[j] * ks;
        for (int h = 0; h < hpg; h++) w->p[h * nk + j] = sc * nsa_dot(q + h * D, kj, D);
    }
    for (int h = 0; h < hpg; h++) {   // max-subtracted exponentials, their sum, lse
        real *ph = w->p + h * nk, m = -INFINITY;
        for (int j = 0; j < nk; j++) m = ph[j] > m ? ph[j] : m;
        for (int j = 0; j < nk; j++) ph[j] = nsa_exp(ph[j] - m);
        const real sum = nsa_sum(ph, nk);
        w->hval[h] = sum;
        lse[h] = m + R_LOG(sum);
    }
    for (int j = 0; j < nk; j++) {   // o_h += p_hj V_j, keys ascending
        const real *vj = V + w->pos[j] * ks;
        for (int h = 0; h < hpg; h++) nsa_axpy(o + h * D, w->p[h * nk + j], vj, D);
    }
    for (int h = 0; h < hpg; h++)
        for (int e = 0; e < D; e++) o[h * D + e] /= w->hval[h];
}

// Backward of attn_row_fwd with the saved lse (one pass over the keys):
//   p_j = exp(s_j - lse_h), Drow_h = do_h·o_h, ds_j = p_j (do_h·V_j - Drow_h)
//   dq_h += sc * sum_j ds_j K_j;  dK_j += sc * ds_j * q_h;  dV_j += p_j * do_h.
// Per tile of keys: p and ds for every (head, key), then the dq accumulators
// (keys ascending per head), then dK_j/dV_j (heads ascending per key).
// A head whose row saw no key (lse = -inf) contributes nothing.
static void attn_row_bwd(real *dq, real *dK, real *dV, const real *dout, const real *q,
                         const real *K, const real *V, const real *o, const real *lse,
                         int64_t ks, int nk, int hpg, int D, real sc, Scratch *w) {
    int na = 0;   // active heads
    for (int h = 0; h < hpg; h++)
        if (nk > 0 && lse[h] != -INFINITY) w->act[na++] = h;
    if (na == 0) return;
    real *P = w->p, *DS = w->p + na * NSA_KTILE;   // [na][KTILE] each
    for (int a = 0; a < na; a++) {
        const int h = w->act[a];
        w->hval[a] = nsa_dot(dout + h * D, o + h * D, D);   // Drow
        nsa_zero(w->acc + a * D, D);
    }
    for (int j0 = 0; j0 < nk; j0 += NSA_KTILE) {
        const int n = nk - j0 < NSA_KTILE ? nk - j0 : NSA_KTILE;
        const int *pos = w->pos + j0;
        for (int a = 0; a < na; a++) {   // p and ds of every (head, key) of the tile
            const int h = w->act[a];
            real *Pa = P + a * NSA_KTILE, *DSa = DS + a * NSA_KTILE;
            for (int jj = 0; jj < n; jj++) Pa[jj] = sc * nsa_dot(q + h * D, K + pos[jj] * ks, D) - lse[h];
            for (int jj = 0; jj < n; jj++) Pa[jj] = nsa_exp(Pa[jj]);
            for (int jj = 0; jj < n; jj++)
                DSa[jj] = Pa[jj] * (nsa_dot(dout + h * D, V + pos[jj] * ks, D) - w->hval[a]);
        }
        for (int jj = 0; jj < n; jj++)
            for (int a = 0; a < na; a++)
                nsa_axpy(w->acc + a * D, DS[a * NSA_KTILE + jj], K + pos[jj] * ks, D);
        for (int a = 0; a < na; a++) {
            const int h = w->act[a];
            for (int jj = 0; jj < n; jj++) {
                const int64_t off = pos[jj] * ks;
                nsa_axpy(dK + off, sc * DS[a * NSA_KTILE + jj], q + h * D, D);
                nsa_axpy(dV + off, P[a * NSA_KTILE + jj], dout + h * D, D);
            }
        }
    }
    for (int a = 0; a < na; a++) nsa_axpy(dq + w->act[a] * D, sc, w->acc + a * D, D);
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
        Scratch w = scratch_new(cap, hpg, D);
#pragma omp for schedule(dynamic, 4)
        for (int u = 0; u < units; u++) {
            int b = u / (Tn * G), t = t0 + (u / G) % Tn, gr = u % G;
            int nk = row_keys(ks, b, t, gr, w.pos);
            const int64_t kv = (int64_t)b * NK * kstride + gr * D;
            const int64_t row = ((int64_t)b * g->T + t) * H + gr * hpg;   // first head
            attn_row_fwd(o + row * D, lse + row, q + row * D, K + kv, V + kv, kstride, nk, hpg,
                         D, sc, &w);
        }
        scratch_free(&w);
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
        Scratch w = scratch_new(cap, hpg, D);
#pragma omp for schedule(static)
        for (int u = 0; u < g->B * G; u++) {
            int b = u / G, gr = u % G;
            const int64_t kv = (int64_t)b * NK * kstride + gr * D;
            for (int t = 0; t < g->T; t++) {
                int nk = row_keys(ks, b, t, gr, w.pos);
                const int64_t row = ((int64_t)b * g->T + t) * H + gr * hpg;   // first head
                attn_row_bwd(dq + row * D, dK + kv, dV + kv, dout + row * D, q + row * D, K + kv,
                             V + kv, o + row * D, lse + row, kstride, nk, hpg, D, sc, &w);
            }
        }
        scratch_free(&w);
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
