// kernels/cpu/nsa_attn.c — the three NSA attention branches (docs/design.md §3):
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
//
// Memory safety does not depend on the key-list arithmetic being right: a row's keys are
// counted from the same spans that fill the list (row_keys), the scratch is grown to that
// count before it is filled (scratch_reserve), and every span is cut to the key rows that
// exist, [0, NK). A bound that is off (a window of w+1 keys, a selected block past the
// sequence) gives wrong keys, so wrong numbers that the tests name, never a write past the
// scratch or an index outside K/V (a scratch sized for exactly w keys let such a window
// write past it, and fp64 runs aborted in free()).

// The backward goes through a row's keys in tiles of NSA_KTILE (see attn_row_bwd).
#define NSA_KTILE 16

typedef struct {
    int cap;      // keys pos and p have room for (scratch_reserve grows it)
    int hpg;
    int *pos;     // key positions of the current row                      [cap]
    int (*span)[2];   // the current row's key spans [s0, s1)              [nspan]
    int *act;     // heads of the row that saw keys (bwd)                  [hpg]
    real *p;      // fwd: scores, then exp(s - max), per head              [hpg * cap]
                  // bwd: p and ds of a tile, per head                     [2 * hpg * KTILE]
    real *acc;    // bwd: per-head dq accumulators                         [hpg * D]
    real *hval;   // per-head scalar: softmax sum (fwd) or Drow (bwd)      [hpg]
} Scratch;

// Room for nk keys: pos[nk] and p[hpg * max(nk, 2 * KTILE)]. Contents are not kept
// (called before a row's list is filled).
static void scratch_reserve(Scratch *w, int nk) {
    if (nk <= w->cap && w->pos) return;
    free(w->pos);
    free(w->p);
    w->cap = nk > w->cap ? nk : w->cap;
    const int np = w->cap > 2 * NSA_KTILE ? w->cap : 2 * NSA_KTILE;
    w->pos = nsa_scratch(sizeof(int) * (size_t)w->cap);
    w->p = nsa_scratch(sizeof(real) * (size_t)w->hpg * (size_t)np);
}

// cap: the keys a row is expected to see at most (keys_capacity), a first size only.
static Scratch scratch_new(int cap, int nspan, int hpg, int D) {
    Scratch w;
    w.cap = cap > 0 ? cap : 1;
    w.hpg = hpg;
    w.pos = NULL;
    w.p = NULL;
    scratch_reserve(&w, w.cap);
    w.span = nsa_scratch(sizeof *w.span * (size_t)(nspan > 0 ? nspan : 1));
    w.act = nsa_scratch(sizeof(int) * hpg);
    w.acc = nsa_scratch(sizeof(real) * hpg * D);
    w.hval = nsa_scratch(sizeof(real) * hpg);
    return w;
}

static void scratch_free(Scratch *w) {
    free(w->pos);
    free(w->span);
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
// branch's K/V (compressed blocks for cmp, tokens for sel/win): NK of them per sequence.
typedef enum { BR_CMP, BR_SEL, BR_WIN } Branch;

typedef struct {
    Branch br;
    const NsaGeom *g;
    const int32_t *sel_idx;   // sel only
    int NK;                   // key rows per sequence (g->NC for cmp, g->T otherwise)
} KeySet;

// Keys a row of the branch is expected to see at most: the scratch's first size
// (row_keys grows it if a row has more).
static int keys_capacity(const KeySet *ks) {
    const NsaGeom *g = ks->g;
    switch (ks->br) {
    case BR_CMP: return g->NC;
    case BR_SEL: return g->n * g->lsel;   // n blocks of <= lsel keys, even if repeated
    default: return g->w < 0 ? 0 : g->w < g->T ? g->w : g->T;
    }
}

// Most spans a row's key list has (the size of Scratch.span).
static int spans_capacity(const KeySet *ks) { return ks->br == BR_SEL ? ks->g->n : 1; }

// Span [s0, s1) cut to the key rows that exist, [0, NK), into *sp; 1 if any key is
// left, else 0.
static int put_span(int64_t s0, int64_t s1, int NK, int *sp) {
    if (s0 < 0) s0 = 0;
    if (s1 > NK) s1 = NK;
    if (s1 <= s0) return 0;
    sp[0] = (int)s0;
    sp[1] = (int)s1;
    return 1;
}

// The key spans [s0, s1) of query (b, t, group gr), ascending, into sp; returns their
// count (<= spans_capacity). Bounds are computed in 64 bits and every span is cut to
// [0, NK): a selected block index outside [0, NS) (-1 is the padding) selects nothing.
static int row_spans(const KeySet *ks, int b, int t, int gr, int (*sp)[2]) {
    const NsaGeom *g = ks->g;
    if (ks->br == BR_CMP) return put_span(0, nsa_cmp_visible(g, t), ks->NK, sp[0]);
    if (ks->br == BR_WIN) return put_span((int64_t)t - g->w + 1, (int64_t)t + 1, ks->NK, sp[0]);
    const int32_t *sel = ks->sel_idx + (((int64_t)b * g->T + t) * g->G + gr) * g->n;
    int ns = 0;
    for (int c = 0; c < g->n; c++) {
        if (sel[c] < 0) continue;   // -1 padding
        const int64_t s0 = (int64_t)sel[c] * g->lsel, s1 = s0 + g->lsel < (int64_t)t + 1 ? s0 + g->lsel : (int64_t)t + 1;
        ns += put_span(s0, s1, ks->NK, sp[ns]);
    }
    return ns;
}

// w->pos[0..nk) = the ascending key positions of query (b, t, group gr); returns nk.
// The scratch is sized from the same spans that fill it.
static int row_keys(const KeySet *ks, int b, int t, int gr, Scratch *w) {
    const int ns = row_spans(ks, b, t, gr, w->span);
    int64_t n = 0;
    for (int i = 0; i < ns; i++) n += w->span[i][1] - w->span[i][0];
    if (n > INT32_MAX) n = INT32_MAX;   // n spans of <= NK keys: only for absurd geometries
    scratch_reserve(w, (int)n);
    int nk = 0;
    for (int i = 0; i < ns; i++)
        for (int s = w->span[i][0]; s < w->span[i][1] && nk < (int)n; s++) w->pos[nk++] = s;
    return nk;
}

// ---- drivers ---------------------------------------------------------------------------

// Forward of rows t0 .. t0+Tn-1 of every (b, head). K/V have ks->NK rows per sequence.
static void attn_fwd(const KeySet *ks, real *o, real *lse, const real *q, const real *K,
                     const real *V, int t0, int Tn) {
    const NsaGeom *g = ks->g;
    const int NK = ks->NK;
    const int H = g->H, G = g->G, D = g->D, hpg = H / G, cap = keys_capacity(ks), nspan = spans_capacity(ks);
    const int64_t kstride = (int64_t)G * D;
    const real sc = (real)g->scale;
    const int units = g->B * Tn * G;
#pragma omp parallel if (units > 1)
    {
        Scratch w = scratch_new(cap, nspan, hpg, D);
#pragma omp for schedule(dynamic, 4)
        for (int u = 0; u < units; u++) {
            int b = u / (Tn * G), t = t0 + (u / G) % Tn, gr = u % G;
            int nk = row_keys(ks, b, t, gr, &w);
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
                     const real *lse) {
    const NsaGeom *g = ks->g;
    const int NK = ks->NK;
    const int H = g->H, G = g->G, D = g->D, hpg = H / G, cap = keys_capacity(ks), nspan = spans_capacity(ks);
    const int64_t kstride = (int64_t)G * D;
    const real sc = (real)g->scale;
#pragma omp parallel if (g->B * G > 1)
    {
        Scratch w = scratch_new(cap, nspan, hpg, D);
#pragma omp for schedule(static)
        for (int u = 0; u < g->B * G; u++) {
            int b = u / G, gr = u % G;
            const int64_t kv = (int64_t)b * NK * kstride + gr * D;
            for (int t = 0; t < g->T; t++) {
                int nk = row_keys(ks, b, t, gr, &w);
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
    KeySet ks = {BR_CMP, g, NULL, g->NC};
    attn_fwd(&ks, o, lse, q, Kc, Vc, t0, Tn);
}

void CPU_FN(cmp_attn_bwd)(void *dq, void *dKc, void *dVc, const void *dout, const void *q,
                          const void *Kc, const void *Vc, const void *o, const void *lse,
                          const NsaGeom *g) {
    KeySet ks = {BR_CMP, g, NULL, g->NC};
    attn_bwd(&ks, dq, dKc, dVc, dout, q, Kc, Vc, o, lse);
}

void CPU_FN(sel_attn_fwd)(void *o, void *lse, const void *q, const void *k, const void *v,
                          const int32_t *sel_idx, const NsaGeom *g, int t0, int Tn) {
    KeySet ks = {BR_SEL, g, sel_idx, g->T};
    attn_fwd(&ks, o, lse, q, k, v, t0, Tn);
}

void CPU_FN(sel_attn_bwd)(void *dq, void *dk, void *dv, const void *dout, const void *q,
                          const void *k, const void *v, const void *o, const void *lse,
                          const int32_t *sel_idx, const NsaGeom *g) {
    KeySet ks = {BR_SEL, g, sel_idx, g->T};
    attn_bwd(&ks, dq, dk, dv, dout, q, k, v, o, lse);
}

void CPU_FN(win_attn_fwd)(void *o, void *lse, const void *q, const void *k, const void *v,
                          const NsaGeom *g, int t0, int Tn) {
    KeySet ks = {BR_WIN, g, NULL, g->T};
    attn_fwd(&ks, o, lse, q, k, v, t0, Tn);
}

void CPU_FN(win_attn_bwd)(void *dq, void *dk, void *dv, const void *dout, const void *q,
                          const void *k, const void *v, const void *o, const void *lse,
                          const NsaGeom *g) {
    KeySet ks = {BR_WIN, g, NULL, g->T};
    attn_bwd(&ks, dq, dk, dv, dout, q, k, v, o, lse);
}
