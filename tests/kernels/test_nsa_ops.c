// tests/kernels/test_nsa_ops.c — unit tests of the CPU backend's NSA ops
// (kernels/cpu/nsa_*.c) in both precisions, against the contract of kernels/ops.h
// and docs/design.md §3.
//
// Every kernel result is compared with something computed independently here:
//   * forwards: naive double-precision references that build each row's key set
//     from the definitions (visibility predicates, explicit interval counting),
//   * backwards: central finite differences in fp64 of L = <out, R>, R random,
//   * selection: a brute-force reference (dense p_cmp per head, Eq. 9 weights by
//     counting positions, group sum, full sort).
// plus the structural promises: empty compressed rows, causality, row
// independence (token-by-token == batched, bitwise), thread-count independence
// (bitwise), window >= T == dense causal attention.
//
// Tolerances (check_close: |got - ref| <= rtol * (|ref| + max|ref| of the tensor)):
//   fp32 forward vs fp64 reference   rtol 2e-5 (fp32 dots/exp over <= ~200 keys)
//   fp64 forward vs fp64 reference   rtol 1e-12
//   fp64 backward vs central FD      rtol 1e-6 (eps 1e-5: truncation ~1e-10,
//                                    cancellation ~1e-16 |L| / eps ~1e-10)
//   bitwise (memcmp) where the contract promises identical bits.
// Outputs are poisoned with NaN (sel_idx with INT32_MIN) before each call; NaN
// never passes check_close, so a value left unwritten fails.
//
// The kernels are reached through the backend table (kernels/ops.h, backend_get):
// "cpu" (fp32) and "cpu64" (fp64). Buffers are host memory, as the CPU backends' are.
#define _POSIX_C_SOURCE 200809L   // clock_gettime (gcc's -fopenmp declared it; clang's does not)
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "kernels/ops.h"

// ---- the kernels under test, both precisions ---------------------------------------

// PREC[0] the fp32 CPU backend ("cpu"), PREC[1] the fp64 one ("cpu64"): set by main
static const Backend *PREC[2];
#define F64 (PREC[1])
// the precision's name in check labels
static const char *prec_name(const Backend *be) { return be->act_bytes == 4 ? "f32" : "f64"; }
static const double TOL_FWD[2] = {2e-5, 1e-12};   // see the header comment
static const double TOL_FD = 1e-6;
static const double FD_EPS = 1e-5;

// Geometries of the forward tests: B, T, H, G, D, l, d, lsel, n, w.
static const int GEOMS[][10] = {
    {2, 45, 6, 2, 16, 8, 4, 8, 4, 7},        // H/G = 3, T % lsel != 0, w < lsel
    {1, 6, 2, 1, 8, 8, 4, 8, 3, 3},          // T < l: NC = 0, every cmp row empty
    {1, 77, 3, 3, 12, 16, 8, 16, 5, 20},     // H/G = 1, D % 16 != 0
    {2, 33, 4, 2, 5, 8, 2, 4, 6, 9},         // lsel < l (weights 1,2,...), D = 5
    {1, 200, 2, 1, 64, 32, 16, 64, 3, 50},   // the production block sizes, H/G = 2
    {1, 150, 4, 2, 20, 16, 4, 32, 8, 40},    // n larger than the early candidates
};
#define NGEOMS ((int)(sizeof GEOMS / sizeof GEOMS[0]))

static NsaGeom geom_of(const int *p) {
    NsaGeom g;
    nsa_geom_init(&g, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9]);
    return g;
}

// ---- host arrays, backend buffers ------------------------------------------------

static uint64_t rng_next(uint64_t *s) {   // splitmix64
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double urand(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53 * 2 - 1; }

static double *hnew(int64_t n) {
    double *x = calloc(n > 0 ? n : 1, sizeof(double));
    assert_non_null(x);
    return x;
}
// uniform in [-amp, amp), rounded to the precision of be (so references see
// exactly the values the kernel sees)
static double *hrand(const Backend *be, int64_t n, double amp, uint64_t *s) {
    double *x = hnew(n);
    for (int64_t i = 0; i < n; i++) {
        x[i] = amp * urand(s);
        if (be->act_bytes == 4) x[i] = (float)x[i];
    }
    return x;
}
static void hround(const Backend *be, double *x, int64_t n) {
    if (be->act_bytes == 4)
        for (int64_t i = 0; i < n; i++) x[i] = (float)x[i];
}

static void *dalloc(const Backend *be, int64_t n) {
    void *p = calloc(n > 0 ? n : 1, be->act_bytes);
    assert_non_null(p);
    return p;
}
static void dput(const Backend *be, void *d, const double *h, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (be->act_bytes == 4) ((float *)d)[i] = (float)h[i];
        else ((double *)d)[i] = h[i];
    }
}
static void dget(const Backend *be, double *h, const void *d, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        h[i] = be->act_bytes == 4 ? (double)((const float *)d)[i] : ((const double *)d)[i];
}
static void *dnew(const Backend *be, const double *h, int64_t n) {
    void *d = dalloc(be, n);
    dput(be, d, h, n);
    return d;
}
static void dpoison(const Backend *be, void *d, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (be->act_bytes == 4) ((float *)d)[i] = NAN;
        else ((double *)d)[i] = NAN;
    }
}
static double *dfetch(const Backend *be, const void *d, int64_t n) {   // new host copy
    double *h = hnew(n);
    dget(be, h, d, n);
    return h;
}
static int32_t *ialloc(int64_t n) {
    int32_t *p = calloc(n > 0 ? n : 1, sizeof(int32_t));
    assert_non_null(p);
    return p;
}
static void ipoison(int32_t *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[i] = INT32_MIN;
}

static int64_t nq(const NsaGeom *g) { return (int64_t)g->B * g->T * g->H * g->D; }
static int64_t nkv(const NsaGeom *g, int NK) { return (int64_t)g->B * NK * g->G * g->D; }
static int64_t nlse(const NsaGeom *g) { return (int64_t)g->B * g->T * g->H; }
static int64_t nsel(const NsaGeom *g) { return (int64_t)g->B * g->T * g->G * g->n; }

static double hdot(const double *a, const double *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// |got - ref| <= rtol * (|ref| + max|ref|) everywhere; -inf must match exactly;
// NaN never passes.
static void check_close(const char *what, const double *got, const double *ref, int64_t n,
                        double rtol) {
    double mx = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(ref[i]) && fabs(ref[i]) > mx) mx = fabs(ref[i]);
    for (int64_t i = 0; i < n; i++) {
        if (isinf(ref[i]) && got[i] == ref[i]) continue;
        if (!(fabs(got[i] - ref[i]) <= rtol * (fabs(ref[i]) + mx)))
            fail_msg("%s[%lld]: got %.17g, want %.17g (rtol %g, max|ref| %g)", what,
                     (long long)i, got[i], ref[i], rtol, mx);
    }
}
static void check_bitwise(const char *what, const void *a, const void *b, size_t bytes) {
    if (memcmp(a, b, bytes) != 0) fail_msg("%s: results differ bitwise", what);
}

// ---- references (double, from the definitions) --------------------------------------

// compressed blocks: i with [i*d, i*d+l) inside [0, T)
static int ref_nc(const NsaGeom *g) {
    int nc = 0;
    while (nc * g->d + g->l <= g->T) nc++;
    return nc;
}

static void ref_compress(double *Kc, const double *k, const NsaGeom *g) {
    const int G = g->G, D = g->D;
    for (int b = 0; b < g->B; b++)
        for (int i = 0; i < ref_nc(g); i++)
            for (int gr = 0; gr < G; gr++)
                for (int e = 0; e < D; e++) {
                    double s = 0;
                    for (int r = 0; r < g->l; r++)
                        s += k[(((int64_t)b * g->T + i * g->d + r) * G + gr) * D + e];
                    Kc[(((int64_t)b * g->NC + i) * G + gr) * D + e] = s / g->l;
                }
}

static void ref_gather(double *X, const double *k, const double *pe, const NsaGeom *g) {
    const int G = g->G, D = g->D, l = g->l;
    for (int b = 0; b < g->B; b++)
        for (int i = 0; i < ref_nc(g); i++)
            for (int gr = 0; gr < G; gr++)
                for (int r = 0; r < l; r++)
                    for (int e = 0; e < D; e++)
                        X[(((int64_t)b * g->NC + i) * G + gr) * l * D + r * D + e] =
                            k[(((int64_t)b * g->T + i * g->d + r) * G + gr) * D + e] + pe[r * D + e];
}

// Which key rows a query sees, straight from docs/design.md §3.
enum { VIS_CMP, VIS_SEL, VIS_WIN, VIS_CAUSAL };
typedef struct {
    int kind;
    const NsaGeom *g;
    const int32_t *sel;   // VIS_SEL: [B,T,G,n]
} Vis;

static int visible(const Vis *v, int b, int t, int gr, int s) {
    const NsaGeom *g = v->g;
    switch (v->kind) {
    case VIS_CMP: return s * g->d + g->l - 1 <= t;   // compressed block s ends by t
    case VIS_WIN: return s <= t && s > t - g->w;
    case VIS_CAUSAL: return s <= t;
    default:
        if (s > t) return 0;
        for (int c = 0; c < g->n; c++)
            if (v->sel[(((int64_t)b * g->T + t) * g->G + gr) * g->n + c] == s / g->lsel) return 1;
        return 0;
    }
}

// Softmax attention of every query row over its visible keys among NK rows.
static void ref_attn(double *o, double *lse, const double *q, const double *K, const double *V,
                     int NK, const Vis *vis) {
    const NsaGeom *g = vis->g;
    const int H = g->H, G = g->G, D = g->D;
    double *s = hnew(NK);
    for (int b = 0; b < g->B; b++)
        for (int t = 0; t < g->T; t++)
            for (int h = 0; h < H; h++) {
                const int gr = h / (H / G);
                const int64_t row = ((int64_t)b * g->T + t) * H + h;
                double m = -INFINITY, sum = 0;
                for (int j = 0; j < NK; j++) {
                    s[j] = NAN;
                    if (!visible(vis, b, t, gr, j)) continue;
                    s[j] = g->scale * hdot(q + row * D, K + (((int64_t)b * NK + j) * G + gr) * D, D);
                    m = fmax(m, s[j]);
                }
                for (int e = 0; e < D; e++) o[row * D + e] = 0;
                for (int j = 0; j < NK; j++) {
                    if (isnan(s[j])) continue;
                    double p = exp(s[j] - m);
                    sum += p;
                    for (int e = 0; e < D; e++)
                        o[row * D + e] += p * V[(((int64_t)b * NK + j) * G + gr) * D + e];
                }
                for (int e = 0; e < D && sum > 0; e++) o[row * D + e] /= sum;
                lse[row] = sum > 0 ? m + log(sum) : -INFINITY;
            }
    free(s);
}

typedef struct {
    double s;
    int j;
} Cand;
static int cand_cmp(const void *a, const void *b) {   // score descending, index ascending
    const Cand *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return x->j - y->j;
}

// Brute-force selection. score (or NULL) receives the Eq. 9 group scores
// [B,T,G,NS].
static void ref_select(int32_t *sel, double *score, const double *q, const double *Kc,
                       const double *lse, const NsaGeom *g) {
    const int H = g->H, G = g->G, D = g->D, hpg = H / G, NC = ref_nc(g);
    const int NS = (g->T + g->lsel - 1) / g->lsel;
    double *sc = hnew(NS);
    Cand *cand = calloc(NS + 1, sizeof(Cand));
    int *chosen = calloc(NS + 1, sizeof(int));
    for (int b = 0; b < g->B; b++)
        for (int t = 0; t < g->T; t++)
            for (int gr = 0; gr < G; gr++) {
                const int cur = t / g->lsel;
                for (int j = 0; j < NS; j++) sc[j] = 0;
                for (int h = gr * hpg; h < (gr + 1) * hpg; h++) {
                    const int64_t row = ((int64_t)b * g->T + t) * H + h;
                    for (int i = 0; i < NC; i++) {
                        if (i * g->d + g->l - 1 > t) continue;
                        double p = exp(g->scale * hdot(q + row * D, Kc + (((int64_t)b * NC + i) * G + gr) * D, D)
                                       - lse[row]);
                        for (int x = i * g->d; x < i * g->d + g->l; x++)   // |block i ∩ block j|
                            sc[x / g->lsel] += p / g->d;
                    }
                }
                int nc = 0, nf = 0;
                for (int j = 0; j < NS; j++) {
                    chosen[j] = j == 0 || j == cur || j == cur - 1;
                    nf += chosen[j];
                    if (j >= 1 && j <= cur - 2) cand[nc++] = (Cand){sc[j], j};
                }
                qsort(cand, nc, sizeof(Cand), cand_cmp);
                for (int c = 0; c < nc && c < g->n - nf; c++) chosen[cand[c].j] = 1;
                int32_t *out = sel + (((int64_t)b * g->T + t) * G + gr) * g->n;
                int m = 0;
                for (int j = 0; j < NS; j++)
                    if (chosen[j]) out[m++] = j;
                while (m < g->n) out[m++] = -1;
                if (score)
                    memcpy(score + (((int64_t)b * g->T + t) * G + gr) * NS, sc, sizeof(double) * NS);
            }
    free(sc);
    free(cand);
    free(chosen);
}

// A kernel selection is valid when each row holds its forced blocks, as many
// candidates as the reference, -1 padding, ascending, and no unchosen candidate
// beats a chosen one by more than tol * (largest score of the row). With exact,
// it must also equal the reference.
static void check_selection(const int32_t *got, const int32_t *ref, const double *score,
                            const NsaGeom *g, double tol, int exact) {
    const int NS = (g->T + g->lsel - 1) / g->lsel;
    for (int64_t row = 0; row < (int64_t)g->B * g->T * g->G; row++) {
        const int t = (int)(row / g->G % g->T), cur = t / g->lsel;
        const int32_t *a = got + row * g->n, *r = ref + row * g->n;
        const double *sc = score + row * NS;
        int in[4096] = {0}, na = 0, nr = 0;
        assert_true(NS <= 4096);
        for (int c = 0; c < g->n; c++) {
            if (a[c] == -1) continue;
            if (a[c] < 0 || a[c] > cur || (c > 0 && a[c] <= a[c - 1]) || (c > 0 && a[c - 1] == -1))
                fail_msg("sel_idx row %lld slot %d: %d (t %d, cur %d)", (long long)row, c, a[c], t, cur);
            in[a[c]] = 1;
            na++;
        }
        for (int c = 0; c < g->n; c++) nr += r[c] >= 0;
        if (na != nr) fail_msg("sel_idx row %lld: %d blocks, want %d", (long long)row, na, nr);
        if (!in[0] || !in[cur] || (cur >= 1 && !in[cur - 1]))
            fail_msg("sel_idx row %lld: a forced block is missing", (long long)row);
        double mx = 0, lo = INFINITY, hi = -INFINITY;
        for (int j = 1; j <= cur - 2; j++) {
            mx = fmax(mx, sc[j]);
            if (in[j]) lo = fmin(lo, sc[j]);
            else hi = fmax(hi, sc[j]);
        }
        if (!(lo >= hi - tol * mx))
            fail_msg("sel_idx row %lld: chosen score %.17g < unchosen %.17g", (long long)row, lo, hi);
        if (exact && memcmp(a, r, sizeof(int32_t) * g->n) != 0)
            fail_msg("sel_idx row %lld differs from the brute-force reference", (long long)row);
    }
}

// ---- dispatch of the three attention branches -----------------------------------------

typedef struct {
    int br;                 // NSA_BR_CMP / SEL / WIN
    NsaGeom g;
    int NK;                 // key rows per sequence: NC for cmp, T otherwise
    const int32_t *sel;     // sel only
} Branch;

static void br_fwd(const Backend *be, const Branch *br, void *o, void *lse, const void *q,
                   const void *K, const void *V, int t0, int Tn) {
    if (br->br == NSA_BR_CMP) be->cmp_attn_fwd(o, lse, q, K, V, &br->g, t0, Tn);
    else if (br->br == NSA_BR_SEL) be->sel_attn_fwd(o, lse, q, K, V, br->sel, &br->g, t0, Tn);
    else be->win_attn_fwd(o, lse, q, K, V, &br->g, t0, Tn);
}
static void br_bwd(const Backend *be, const Branch *br, void *dq, void *dK, void *dV,
                   const void *dout, const void *q, const void *K, const void *V,
                   const void *o, const void *lse) {
    if (br->br == NSA_BR_CMP) be->cmp_attn_bwd(dq, dK, dV, dout, q, K, V, o, lse, &br->g);
    else if (br->br == NSA_BR_SEL) be->sel_attn_bwd(dq, dK, dV, dout, q, K, V, o, lse, br->sel, &br->g);
    else be->win_attn_bwd(dq, dK, dV, dout, q, K, V, o, lse, &br->g);
}

// Random inputs of one geometry in one precision: q (amplitude 2, for peaked
// softmaxes), raw k/v, compressed Kc/Vc (independent random), the reference
// cmp lse and the brute-force selection built from them.
typedef struct {
    NsaGeom g;
    double *q, *k, *v, *Kc, *Vc, *lse_cmp;
    int32_t *sel;
} Inputs;

static Inputs inputs_new(const Backend *be, const NsaGeom *g, uint64_t seed) {
    Inputs in = {.g = *g};
    in.q = hrand(be, nq(g), 2, &seed);
    in.k = hrand(be, nkv(g, g->T), 1, &seed);
    in.v = hrand(be, nkv(g, g->T), 1, &seed);
    in.Kc = hrand(be, nkv(g, g->NC), 1, &seed);
    in.Vc = hrand(be, nkv(g, g->NC), 1, &seed);
    in.lse_cmp = hnew(nlse(g));
    double *o = hnew(nq(g));
    Vis vis = {VIS_CMP, &in.g, NULL};
    ref_attn(o, in.lse_cmp, in.q, in.Kc, in.Vc, g->NC, &vis);
    hround(be, in.lse_cmp, nlse(g));
    in.sel = ialloc(nsel(g));
    ref_select(in.sel, NULL, in.q, in.Kc, in.lse_cmp, &in.g);
    free(o);
    return in;
}
static void inputs_free(Inputs *in) {
    free(in->q); free(in->k); free(in->v); free(in->Kc); free(in->Vc);
    free(in->lse_cmp); free(in->sel);
}

// ---- (a) forwards vs references -------------------------------------------------------

static void test_compress_fwd(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++)
        for (int gi = 0; gi < NGEOMS; gi++) {
            const Backend *be = PREC[p];
            NsaGeom g = geom_of(GEOMS[gi]);
            assert_int_equal(g.NC, ref_nc(&g));
            uint64_t seed = 100 + gi;
            double *k = hrand(be, nkv(&g, g.T), 1, &seed), *pe = hrand(be, (int64_t)g.l * g.D, 1, &seed);
            const int64_t nc = nkv(&g, g.NC), nx = nc * g.l;
            double *ref = hnew(nc), *refx = hnew(nx);
            ref_compress(ref, k, &g);
            ref_gather(refx, k, pe, &g);
            void *dk = dnew(be, k, nkv(&g, g.T)), *dpe = dnew(be, pe, (int64_t)g.l * g.D);
            void *dKc = dalloc(be, nc), *dX = dalloc(be, nx);
            dpoison(be, dKc, nc);
            dpoison(be, dX, nx);
            be->compress_avg_fwd(dKc, dk, &g, 0, g.NC);
            be->block_gather_fwd(dX, dk, dpe, &g, 0, g.NC);
            double *got = dfetch(be, dKc, nc), *gotx = dfetch(be, dX, nx);
            check_close("compress_avg_fwd", got, ref, nc, TOL_FWD[p]);
            check_close("block_gather_fwd", gotx, refx, nx, TOL_FWD[p]);
            free(k); free(pe); free(ref); free(refx); free(dk); free(dpe); free(dKc); free(dX);
            free(got); free(gotx);
        }
}

// One branch forward on device vs ref_attn on the same (rounded) inputs.
static void check_branch_fwd(const Backend *be, int p, const Branch *br, const Inputs *in,
                             const double *K, const double *V, int vis_kind, const char *what) {
    const NsaGeom *g = &br->g;
    double *ro = hnew(nq(g)), *rl = hnew(nlse(g));
    Vis vis = {vis_kind, g, br->sel};
    ref_attn(ro, rl, in->q, K, V, br->NK, &vis);
    void *dq = dnew(be, in->q, nq(g)), *dK = dnew(be, K, nkv(g, br->NK)), *dV = dnew(be, V, nkv(g, br->NK));
    void *o = dalloc(be, nq(g)), *lse = dalloc(be, nlse(g));
    dpoison(be, o, nq(g));
    dpoison(be, lse, nlse(g));
    br_fwd(be, br, o, lse, dq, dK, dV, 0, g->T);
    double *go = dfetch(be, o, nq(g)), *gl = dfetch(be, lse, nlse(g));
    char name[64];
    snprintf(name, sizeof name, "%s o (%s)", what, prec_name(be));
    check_close(name, go, ro, nq(g), TOL_FWD[p]);
    snprintf(name, sizeof name, "%s lse (%s)", what, prec_name(be));
    check_close(name, gl, rl, nlse(g), TOL_FWD[p]);
    free(ro); free(rl); free(dq); free(dK); free(dV); free(o); free(lse); free(go); free(gl);
}

static void test_attn_fwd(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++)
        for (int gi = 0; gi < NGEOMS; gi++) {
            NsaGeom g = geom_of(GEOMS[gi]);
            Inputs in = inputs_new(PREC[p], &g, 200 + gi);
            Branch cmp = {NSA_BR_CMP, g, g.NC, NULL}, sel = {NSA_BR_SEL, g, g.T, in.sel},
                   win = {NSA_BR_WIN, g, g.T, NULL};
            check_branch_fwd(PREC[p], p, &cmp, &in, in.Kc, in.Vc, VIS_CMP, "cmp_attn_fwd");
            check_branch_fwd(PREC[p], p, &sel, &in, in.k, in.v, VIS_SEL, "sel_attn_fwd");
            check_branch_fwd(PREC[p], p, &win, &in, in.k, in.v, VIS_WIN, "win_attn_fwd");
            inputs_free(&in);
        }
}

// ---- (c) selection vs brute force ---------------------------------------------------------

// Runs select_blocks on the inputs and checks it against ref_select.
static void check_select(const Backend *be, int p, const NsaGeom *g, const double *q,
                         const double *Kc, const double *lse) {
    const int NS = (g->T + g->lsel - 1) / g->lsel;
    int32_t *ref = ialloc(nsel(g)), *got = ialloc(nsel(g));
    double *score = hnew((int64_t)g->B * g->T * g->G * NS);
    ref_select(ref, score, q, Kc, lse, g);
    void *dq = dnew(be, q, nq(g)), *dKc = dnew(be, Kc, nkv(g, g->NC)), *dl = dnew(be, lse, nlse(g));
    ipoison(got, nsel(g));
    be->select_blocks(got, dq, dKc, dl, g, 0, g->T);
    // fp64: the exact set; fp32: the set up to score rounding (p_cmp in fp32)
    check_selection(got, ref, score, g, p == 0 ? 1e-4 : 1e-12, p == 1);
    free(ref); free(got); free(score); free(dq); free(dKc); free(dl);
}

static void test_select_ref(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++)
        for (int gi = 0; gi < NGEOMS; gi++) {
            NsaGeom g = geom_of(GEOMS[gi]);
            Inputs in = inputs_new(PREC[p], &g, 300 + gi);
            check_select(PREC[p], p, &g, in.q, in.Kc, in.lse_cmp);
            inputs_free(&in);
        }
}

// q = 0 makes p_cmp uniform, so with l <= lsel every candidate block has exactly
// the same score: the lowest candidate indices must win. Also checks that all
// heads of a group share one selection (the layout has one row per group; here
// the group sum of equal heads must still tie).
static void test_select_ties(void **state) {
    (void)state;
    static const int geoms[][10] = {
        {1, 400, 4, 2, 16, 32, 16, 64, 5, 64},
        {2, 70, 3, 1, 8, 8, 4, 8, 6, 8},
    };
    for (int p = 0; p < 2; p++)
        for (int gi = 0; gi < 2; gi++) {
            const Backend *be = PREC[p];
            NsaGeom g = geom_of(geoms[gi]);
            uint64_t seed = 400 + gi;
            double *q = hnew(nq(&g)), *Kc = hrand(be, nkv(&g, g.NC), 1, &seed), *lse = hnew(nlse(&g));
            for (int64_t r = 0; r < nlse(&g); r++) {   // lse of a uniform softmax: log(nv)
                int t = (int)(r / g.H % g.T), nv = 0;
                while (nv < g.NC && nv * g.d + g.l - 1 <= t) nv++;
                lse[r] = nv ? log(nv) : -INFINITY;
            }
            hround(be, lse, nlse(&g));
            check_select(be, p, &g, q, Kc, lse);
            // and the expected answer written out: 0, 1 .. n-3 (as far as candidates
            // go), cur-1, cur
            int32_t *got = ialloc(nsel(&g));
            void *dq = dnew(be, q, nq(&g)), *dKc = dnew(be, Kc, nkv(&g, g.NC)), *dl = dnew(be, lse, nlse(&g));
            be->select_blocks(got, dq, dKc, dl, &g, 0, g.T);
            for (int64_t row = 0; row < (int64_t)g.B * g.T * g.G; row++) {
                int t = (int)(row / g.G % g.T), cur = t / g.lsel, want[64], m = 0;
                for (int j = 0; j <= cur; j++)
                    if (j == 0 || j >= cur - 1 || j <= g.n - 3) want[m++] = j;
                while (m < g.n) want[m++] = -1;
                for (int c = 0; c < g.n; c++)
                    if (got[row * g.n + c] != want[c])
                        fail_msg("tie row %lld (t %d) slot %d: got %d want %d", (long long)row, t, c,
                                 got[row * g.n + c], want[c]);
            }
            free(q); free(Kc); free(lse); free(got); free(dq); free(dKc); free(dl);
        }
}

// ---- (d) empty compressed rows -------------------------------------------------------------

static void test_cmp_empty_rows(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++) {
        const Backend *be = PREC[p];
        NsaGeom g = geom_of(GEOMS[0]);   // l = 8: rows t < 7 see no block
        Inputs in = inputs_new(be, &g, 500);
        uint64_t seed = 501;
        double *dout = hrand(be, nq(&g), 1, &seed), *base = hrand(be, nq(&g), 1, &seed);
        void *q = dnew(be, in.q, nq(&g)), *Kc = dnew(be, in.Kc, nkv(&g, g.NC)), *Vc = dnew(be, in.Vc, nkv(&g, g.NC));
        void *o = dalloc(be, nq(&g)), *lse = dalloc(be, nlse(&g)), *ddo = dnew(be, dout, nq(&g));
        void *dq = dnew(be, base, nq(&g)), *dKc = dalloc(be, nkv(&g, g.NC)), *dVc = dalloc(be, nkv(&g, g.NC));
        dpoison(be, o, nq(&g));
        dpoison(be, lse, nlse(&g));
        be->cmp_attn_fwd(o, lse, q, Kc, Vc, &g, 0, g.T);
        be->cmp_attn_bwd(dq, dKc, dVc, ddo, q, Kc, Vc, o, lse, &g);
        double *ho = dfetch(be, o, nq(&g)), *hl = dfetch(be, lse, nlse(&g)), *hdq = dfetch(be, dq, nq(&g));
        double *hdk = dfetch(be, dKc, nkv(&g, g.NC)), *hdv = dfetch(be, dVc, nkv(&g, g.NC));
        for (int64_t r = 0; r < nlse(&g); r++) {
            int t = (int)(r / g.H % g.T);
            assert_false(isnan(hl[r]));
            if (t >= g.l - 1) continue;
            assert_true(hl[r] == -INFINITY);
            for (int e = 0; e < g.D; e++) {
                assert_true(ho[r * g.D + e] == 0.0);
                assert_true(hdq[r * g.D + e] == base[r * g.D + e]);   // bitwise: nothing added
            }
        }
        for (int64_t i = 0; i < nq(&g); i++) assert_false(isnan(ho[i]) || isnan(hdq[i]));
        for (int64_t i = 0; i < nkv(&g, g.NC); i++) assert_true(isfinite(hdk[i]) && isfinite(hdv[i]));
        inputs_free(&in);
        free(dout); free(base); free(q); free(Kc); free(Vc); free(o); free(lse); free(ddo);
        free(dq); free(dKc); free(dVc); free(ho); free(hl); free(hdq); free(hdk); free(hdv);
    }
}

// ---- (e) causality -----------------------------------------------------------------------------

// Device outputs of the full forward pipeline: compress k/v -> cmp -> select ->
// sel -> win, all rows.
typedef struct {
    void *Kc, *Vc, *oc, *lc, *os, *ls, *ow, *lw;
    int32_t *sel;
} Pipe;

static Pipe pipe_run(const Backend *be, const NsaGeom *g, const double *q, const double *k,
                     const double *v) {
    Pipe P;
    void *dq = dnew(be, q, nq(g)), *dk = dnew(be, k, nkv(g, g->T)), *dv = dnew(be, v, nkv(g, g->T));
    P.Kc = dalloc(be, nkv(g, g->NC));
    P.Vc = dalloc(be, nkv(g, g->NC));
    P.oc = dalloc(be, nq(g)); P.os = dalloc(be, nq(g)); P.ow = dalloc(be, nq(g));
    P.lc = dalloc(be, nlse(g)); P.ls = dalloc(be, nlse(g)); P.lw = dalloc(be, nlse(g));
    P.sel = ialloc(nsel(g));
    be->compress_avg_fwd(P.Kc, dk, g, 0, g->NC);
    be->compress_avg_fwd(P.Vc, dv, g, 0, g->NC);
    be->cmp_attn_fwd(P.oc, P.lc, dq, P.Kc, P.Vc, g, 0, g->T);
    be->select_blocks(P.sel, dq, P.Kc, P.lc, g, 0, g->T);
    be->sel_attn_fwd(P.os, P.ls, dq, dk, dv, P.sel, g, 0, g->T);
    be->win_attn_fwd(P.ow, P.lw, dq, dk, dv, g, 0, g->T);
    free(dq); free(dk); free(dv);
    return P;
}
static void pipe_free(Pipe *P) {
    free(P->Kc); free(P->Vc); free(P->oc); free(P->lc); free(P->os); free(P->ls);
    free(P->ow); free(P->lw); free(P->sel);
}

static void test_causality(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++)
        for (int gi = 0; gi < NGEOMS; gi++) {
            const Backend *be = PREC[p];
            NsaGeom g = geom_of(GEOMS[gi]);
            Inputs in = inputs_new(be, &g, 600 + gi);
            Pipe A = pipe_run(be, &g, in.q, in.k, in.v);
            const int t0 = g.T / 2;
            uint64_t seed = 650 + gi;
            for (int b = 0; b < g.B; b++)   // new random values at every position > t0
                for (int t = t0 + 1; t < g.T; t++) {
                    for (int i = 0; i < g.H * g.D; i++)
                        in.q[((int64_t)b * g.T + t) * g.H * g.D + i] = 2 * urand(&seed);
                    for (int i = 0; i < g.G * g.D; i++) {
                        in.k[((int64_t)b * g.T + t) * g.G * g.D + i] = urand(&seed);
                        in.v[((int64_t)b * g.T + t) * g.G * g.D + i] = urand(&seed);
                    }
                }
            Pipe B = pipe_run(be, &g, in.q, in.k, in.v);
            const size_t ob = (size_t)(t0 + 1) * g.H * g.D * be->act_bytes,
                         lb = (size_t)(t0 + 1) * g.H * be->act_bytes,
                         sb = (size_t)(t0 + 1) * g.G * g.n * sizeof(int32_t);
            for (int b = 0; b < g.B; b++) {
                const size_t oo = (size_t)b * g.T * g.H * g.D * be->act_bytes,
                             lo = (size_t)b * g.T * g.H * be->act_bytes,
                             so = (size_t)b * g.T * g.G * g.n;
                check_bitwise("causal o_cmp", (char *)A.oc + oo, (char *)B.oc + oo, ob);
                check_bitwise("causal lse_cmp", (char *)A.lc + lo, (char *)B.lc + lo, lb);
                check_bitwise("causal sel_idx", A.sel + so, B.sel + so, sb);
                check_bitwise("causal o_sel", (char *)A.os + oo, (char *)B.os + oo, ob);
                check_bitwise("causal lse_sel", (char *)A.ls + lo, (char *)B.ls + lo, lb);
                check_bitwise("causal o_win", (char *)A.ow + oo, (char *)B.ow + oo, ob);
                check_bitwise("causal lse_win", (char *)A.lw + lo, (char *)B.lw + lo, lb);
            }
            pipe_free(&A);
            pipe_free(&B);
            inputs_free(&in);
        }
}

// ---- (f) a window covering every token is dense causal attention ---------------------------

static void test_window_dense(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++)
        for (int gi = 0; gi < NGEOMS; gi++)
            for (int extra = 0; extra <= 3; extra += 3) {
                int gp[10];
                memcpy(gp, GEOMS[gi], sizeof gp);
                gp[9] = gp[1] + extra;   // w = T, T + 3
                NsaGeom g = geom_of(gp);
                Inputs in = inputs_new(PREC[p], &g, 700 + gi);
                Branch win = {NSA_BR_WIN, g, g.T, NULL};
                check_branch_fwd(PREC[p], p, &win, &in, in.k, in.v, VIS_CAUSAL, "win(w>=T) vs dense");
                inputs_free(&in);
            }
}

// ---- (f2) key lists never leave the key rows ----------------------------
//
// A selected block index outside [0, NS) (the padding is -1) selects no key: forward and
// backward give bitwise the results of -1 in its place, and nothing outside q/k/v/dk/dv
// is touched. Among the indices are ones whose key position sel * lsel overflows 32 bits
// (the kernel once computed it in int: INT32_MAX / lsel + 1 wrapped to a large negative
// position, a read and, in the backward, a write far outside k/v: SIGSEGV, or ASan's
// report in the sanitizer build). The window's and the compressed branch's lists come
// from the same spans, cut to the key rows; the rows with exactly w keys (t >= w - 1)
// are in every geometry of test_attn_fwd, which the sanitizer stage runs under ASan.
static void test_sel_indices_outside(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++) {
        const Backend *be = PREC[p];
        NsaGeom g = geom_of(GEOMS[0]);
        Inputs in = inputs_new(be, &g, 750);
        const int32_t bad[] = {g.NS, g.NS + 7, INT32_MAX, INT32_MAX / g.lsel + 1, -5, INT32_MIN};
        const int nbad = (int)(sizeof bad / sizeof bad[0]);
        const int64_t ns = nsel(&g), Q = nq(&g), KV = nkv(&g, g.T), L = nlse(&g);
        int32_t *with_bad = ialloc(ns), *clean = ialloc(ns);
        for (int64_t row = 0; row < ns / g.n; row++) {   // one slot per row gets an index outside
            memcpy(with_bad + row * g.n, in.sel + row * g.n, sizeof(int32_t) * g.n);
            memcpy(clean + row * g.n, in.sel + row * g.n, sizeof(int32_t) * g.n);
            const int c = (int)(row % g.n);
            with_bad[row * g.n + c] = bad[row % nbad];
            clean[row * g.n + c] = -1;
        }
        void *dq = dnew(be, in.q, Q), *dk = dnew(be, in.k, KV), *dv = dnew(be, in.v, KV);
        uint64_t seed = 751;
        double *R = hrand(be, Q, 1, &seed);
        void *dout = dnew(be, R, Q);
        void *o[2], *lse[2], *gq[2], *gk[2], *gv[2];
        for (int v = 0; v < 2; v++) {
            Branch br = {NSA_BR_SEL, g, g.T, v ? clean : with_bad};
            o[v] = dalloc(be, Q);
            lse[v] = dalloc(be, L);
            gq[v] = dalloc(be, Q);
            gk[v] = dalloc(be, KV);
            gv[v] = dalloc(be, KV);
            br_fwd(be, &br, o[v], lse[v], dq, dk, dv, 0, g.T);
            br_bwd(be, &br, gq[v], gk[v], gv[v], dout, dq, dk, dv, o[v], lse[v]);
        }
        const size_t eb = (size_t)be->act_bytes;
        check_bitwise("sel_attn_fwd o, indices outside [0, NS) vs -1", o[0], o[1], eb * Q);
        check_bitwise("sel_attn_fwd lse, indices outside [0, NS) vs -1", lse[0], lse[1], eb * L);
        check_bitwise("sel_attn_bwd dq, indices outside [0, NS) vs -1", gq[0], gq[1], eb * Q);
        check_bitwise("sel_attn_bwd dk, indices outside [0, NS) vs -1", gk[0], gk[1], eb * KV);
        check_bitwise("sel_attn_bwd dv, indices outside [0, NS) vs -1", gv[0], gv[1], eb * KV);
        // and the clean selection is still the reference's attention
        Branch ref = {NSA_BR_SEL, g, g.T, clean};
        check_branch_fwd(be, p, &ref, &in, in.k, in.v, VIS_SEL, "sel_attn_fwd (slots set to -1)");
        for (int v = 0; v < 2; v++) {
            free(o[v]); free(lse[v]); free(gq[v]); free(gk[v]); free(gv[v]);
        }
        free(dq); free(dk); free(dv); free(dout); free(R); free(with_bad); free(clean);
        inputs_free(&in);
    }
}

// ---- (g) row independence and thread-count independence ------------------------------------

// Runs a forward op over rows [t0, t0+Tn) (or blocks for compress); which op is
// chosen by `op`; the device inputs of one Inputs set.
enum { OP_CAVG, OP_GATHER, OP_CMP, OP_SELECT, OP_SEL, OP_WIN, NOPS };
typedef struct {
    const Backend *be;
    NsaGeom g;
    void *q, *k, *v, *Kc, *Vc, *lse, *pe;
    int32_t *sel;
} Dev;

static Dev dev_new(const Backend *be, const Inputs *in, uint64_t seed) {
    const NsaGeom *g = &in->g;
    Dev d = {.be = be, .g = *g};
    double *pe = hrand(be, (int64_t)g->l * g->D, 1, &seed), *lse = hnew(nlse(g));
    memcpy(lse, in->lse_cmp, sizeof(double) * nlse(g));
    d.q = dnew(be, in->q, nq(g));
    d.k = dnew(be, in->k, nkv(g, g->T));
    d.v = dnew(be, in->v, nkv(g, g->T));
    d.Kc = dnew(be, in->Kc, nkv(g, g->NC));
    d.Vc = dnew(be, in->Vc, nkv(g, g->NC));
    d.lse = dnew(be, lse, nlse(g));
    d.pe = dnew(be, pe, (int64_t)g->l * g->D);
    d.sel = in->sel;
    free(pe);
    free(lse);
    return d;
}
static void dev_free(Dev *d) {
    free(d->q); free(d->k); free(d->v); free(d->Kc); free(d->Vc); free(d->lse); free(d->pe);
}

// Output sizes (elements) of an op: o/X/Kc, lse (0 if none); select writes ints.
static void op_sizes(const NsaGeom *g, int op, int64_t *n0, int64_t *n1) {
    *n1 = nlse(g);
    if (op == OP_CAVG) *n0 = nkv(g, g->NC), *n1 = 0;
    else if (op == OP_GATHER) *n0 = nkv(g, g->NC) * g->l, *n1 = 0;
    else if (op == OP_SELECT) *n0 = nsel(g), *n1 = 0;
    else *n0 = nq(g);
}
static void op_run(const Dev *d, int op, void *out0, void *out1, int r0, int nr) {
    const Backend *be = d->be;
    const NsaGeom *g = &d->g;
    switch (op) {
    case OP_CAVG: be->compress_avg_fwd(out0, d->k, g, r0, nr); break;
    case OP_GATHER: be->block_gather_fwd(out0, d->k, d->pe, g, r0, nr); break;
    case OP_CMP: be->cmp_attn_fwd(out0, out1, d->q, d->Kc, d->Vc, g, r0, nr); break;
    case OP_SELECT: be->select_blocks(out0, d->q, d->Kc, d->lse, g, r0, nr); break;
    case OP_SEL: be->sel_attn_fwd(out0, out1, d->q, d->k, d->v, d->sel, g, r0, nr); break;
    default: be->win_attn_fwd(out0, out1, d->q, d->k, d->v, g, r0, nr); break;
    }
}

static void test_row_independence(void **state) {
    (void)state;
    static const char *names[NOPS] = {"compress_avg_fwd", "block_gather_fwd", "cmp_attn_fwd",
                                      "select_blocks", "sel_attn_fwd", "win_attn_fwd"};
    for (int p = 0; p < 2; p++)
        for (int gi = 0; gi < NGEOMS; gi++) {
            const Backend *be = PREC[p];
            NsaGeom g = geom_of(GEOMS[gi]);
            Inputs in = inputs_new(be, &g, 800 + gi);
            Dev d = dev_new(be, &in, 801 + gi);
            for (int op = 0; op < NOPS; op++) {
                int64_t n0, n1;
                op_sizes(&g, op, &n0, &n1);
                const int rows = op <= OP_GATHER ? g.NC : g.T;   // blocks or query rows
                const size_t es = op == OP_SELECT ? sizeof(int32_t) : (size_t)be->act_bytes;
                // all at once, one at a time, chunks of 3
                char *out0[3], *out1[3];
                for (int c = 0; c < 3; c++) {
                    out0[c] = calloc(n0 + 1, es);
                    out1[c] = calloc(n1 + 1, be->act_bytes);
                    memset(out0[c], 0xff, n0 * es);   // NaN / -1 pattern: unwritten shows
                    memset(out1[c], 0xff, n1 * be->act_bytes);
                }
                op_run(&d, op, out0[0], out1[0], 0, rows);
                for (int r = 0; r < rows; r++) op_run(&d, op, out0[1], out1[1], r, 1);
                for (int r = 0; r < rows; r += 3) op_run(&d, op, out0[2], out1[2], r, rows - r < 3 ? rows - r : 3);
                for (int c = 1; c < 3; c++) {
                    check_bitwise(names[op], out0[0], out0[c], n0 * es);
                    check_bitwise(names[op], out1[0], out1[c], n1 * be->act_bytes);
                }
                for (int c = 0; c < 3; c++) {
                    free(out0[c]);
                    free(out1[c]);
                }
            }
            dev_free(&d);
            inputs_free(&in);
        }
}

#ifdef _OPENMP
// Every NSA op (forward and backward) with `threads` threads; the results are
// appended into one byte buffer for comparison.
static char *run_all_ops(const Dev *d, const double *dout_h, int threads, size_t *bytes) {
    const Backend *be = d->be;
    const NsaGeom *g = &d->g;
    const size_t es = be->act_bytes;
    const int64_t Q = nq(g), KV = nkv(g, g->T), KC = nkv(g, g->NC), X = KC * g->l, L = nlse(g);
    // outputs: o,lse x3; Kc; X; sel; dq,dk,dv x2 (sel, win); dq,dKc,dVc (cmp);
    // dk (cavg), dk,dpe (gather)
    const size_t total = es * (3 * (Q + L) + KC + X + 2 * (Q + 2 * KV) + Q + 2 * KC + KV + KV +
                               (int64_t)g->l * g->D) + sizeof(int32_t) * nsel(g);
    char *buf = calloc(total, 1), *at = buf;
    assert_non_null(buf);
#define TAKE(n, sz) (at += (size_t)(n) * (sz), at - (size_t)(n) * (sz))
    omp_set_num_threads(threads);
    void *dout = dnew(be, dout_h, Q);
    void *oc = TAKE(Q, es), *lc = TAKE(L, es), *os = TAKE(Q, es), *ls = TAKE(L, es);
    void *ow = TAKE(Q, es), *lw = TAKE(L, es), *Kc = TAKE(KC, es), *Xb = TAKE(X, es);
    int32_t *sel = (int32_t *)(buf + total - sizeof(int32_t) * nsel(g));   // last: alignment
    be->compress_avg_fwd(Kc, d->k, g, 0, g->NC);
    be->block_gather_fwd(Xb, d->k, d->pe, g, 0, g->NC);
    be->cmp_attn_fwd(oc, lc, d->q, d->Kc, d->Vc, g, 0, g->T);
    be->select_blocks(sel, d->q, d->Kc, lc, g, 0, g->T);
    be->sel_attn_fwd(os, ls, d->q, d->k, d->v, sel, g, 0, g->T);
    be->win_attn_fwd(ow, lw, d->q, d->k, d->v, g, 0, g->T);
    void *dq1 = TAKE(Q, es), *dk1 = TAKE(KV, es), *dv1 = TAKE(KV, es);
    be->sel_attn_bwd(dq1, dk1, dv1, dout, d->q, d->k, d->v, os, ls, sel, g);
    void *dq2 = TAKE(Q, es), *dk2 = TAKE(KV, es), *dv2 = TAKE(KV, es);
    be->win_attn_bwd(dq2, dk2, dv2, dout, d->q, d->k, d->v, ow, lw, g);
    void *dq3 = TAKE(Q, es), *dKc = TAKE(KC, es), *dVc = TAKE(KC, es);
    be->cmp_attn_bwd(dq3, dKc, dVc, dout, d->q, d->Kc, d->Vc, oc, lc, g);
    void *dk4 = TAKE(KV, es);
    be->compress_avg_bwd(dk4, dKc, g);
    void *dk5 = TAKE(KV, es), *dpe = TAKE((int64_t)g->l * g->D, es);
    be->block_gather_bwd(dk5, dpe, Xb, g);
#undef TAKE
    assert_true((size_t)(at - buf) == total - sizeof(int32_t) * nsel(g));
    free(dout);
    *bytes = total;
    return buf;
}
#endif

static void test_threads_bitwise(void **state) {
    (void)state;
#ifdef _OPENMP
    const int saved = omp_get_max_threads();
    for (int p = 0; p < 2; p++) {
        const Backend *be = PREC[p];
        int gp[10] = {2, 150, 6, 2, 24, 16, 8, 32, 5, 40};
        NsaGeom g = geom_of(gp);
        Inputs in = inputs_new(be, &g, 900);
        Dev d = dev_new(be, &in, 901);
        uint64_t seed = 902;
        double *dout = hrand(be, nq(&g), 1, &seed);
        size_t n1, n2, n3;
        char *a = run_all_ops(&d, dout, 1, &n1), *b = run_all_ops(&d, dout, 2, &n2),
             *c = run_all_ops(&d, dout, 3, &n3);
        check_bitwise("all NSA ops, 1 vs 2 threads", a, b, n1);
        check_bitwise("all NSA ops, 1 vs 3 threads", a, c, n1);
        free(a); free(b); free(c); free(dout);
        dev_free(&d);
        inputs_free(&in);
    }
    omp_set_num_threads(saved);
#else
    print_message("SKIP thread-count test: built without OpenMP\n");
#endif
}

// ---- (b) backwards vs finite differences (fp64) ------------------------------------------

typedef struct {
    const char *name;
    double *x;            // the host input, perturbed in place
    const double *grad;   // analytic dL/dx from the kernel
    int64_t n;
} FdParam;

// Central differences of loss(ctx) for every element of every parameter.
static void fd_check(double (*loss)(void *), void *ctx, const FdParam *ps, int np) {
    for (int k = 0; k < np; k++) {
        double *fd = hnew(ps[k].n);
        for (int64_t i = 0; i < ps[k].n; i++) {
            const double x0 = ps[k].x[i];
            ps[k].x[i] = x0 + FD_EPS;
            double lp = loss(ctx);
            ps[k].x[i] = x0 - FD_EPS;
            double lm = loss(ctx);
            ps[k].x[i] = x0;
            fd[i] = (lp - lm) / (2 * FD_EPS);
        }
        check_close(ps[k].name, ps[k].grad, fd, ps[k].n, TOL_FD);
        free(fd);
    }
}

typedef struct {
    Branch br;
    double *q, *K, *V, *R;
} AttnCtx;

static double attn_loss(void *ctx) {   // L = <o, R>, fp64 kernel forward
    AttnCtx *c = ctx;
    const NsaGeom *g = &c->br.g;
    void *q = dnew(F64, c->q, nq(g)), *K = dnew(F64, c->K, nkv(g, c->br.NK)), *V = dnew(F64, c->V, nkv(g, c->br.NK));
    void *o = dalloc(F64, nq(g)), *lse = dalloc(F64, nlse(g));
    br_fwd(F64, &c->br, o, lse, q, K, V, 0, g->T);
    double L = hdot(o, c->R, nq(g));
    free(q); free(K); free(V); free(o); free(lse);
    return L;
}

// Analytic gradients of <o, R> from the kernel's backward, accumulated onto
// random base values (checks "+="), minus the base.
static void attn_fd_case(const Branch *br, uint64_t seed) {
    const NsaGeom *g = &br->g;
    const int64_t Q = nq(g), KV = nkv(g, br->NK);
    AttnCtx c = {*br, hrand(F64, Q, 2, &seed), hrand(F64, KV, 1, &seed), hrand(F64, KV, 1, &seed),
                 hrand(F64, Q, 1, &seed)};
    double *base[3] = {hrand(F64, Q, 1, &seed), hrand(F64, KV, 1, &seed), hrand(F64, KV, 1, &seed)};
    void *q = dnew(F64, c.q, Q), *K = dnew(F64, c.K, KV), *V = dnew(F64, c.V, KV), *R = dnew(F64, c.R, Q);
    void *o = dalloc(F64, Q), *lse = dalloc(F64, nlse(g));
    void *dq = dnew(F64, base[0], Q), *dK = dnew(F64, base[1], KV), *dV = dnew(F64, base[2], KV);
    br_fwd(F64, br, o, lse, q, K, V, 0, g->T);
    br_bwd(F64, br, dq, dK, dV, R, q, K, V, o, lse);
    double *gq = dfetch(F64, dq, Q), *gK = dfetch(F64, dK, KV), *gV = dfetch(F64, dV, KV);
    for (int64_t i = 0; i < Q; i++) gq[i] -= base[0][i];
    for (int64_t i = 0; i < KV; i++) gK[i] -= base[1][i], gV[i] -= base[2][i];
    FdParam ps[3] = {{"dq", c.q, gq, Q}, {"dK", c.K, gK, KV}, {"dV", c.V, gV, KV}};
    fd_check(attn_loss, &c, ps, 3);
    free(c.q); free(c.K); free(c.V); free(c.R);
    for (int i = 0; i < 3; i++) free(base[i]);
    free(q); free(K); free(V); free(R); free(o); free(lse); free(dq); free(dK); free(dV);
    free(gq); free(gK); free(gV);
}

static void test_attn_bwd_fd(void **state) {
    (void)state;
    static const int geoms[][10] = {
        {2, 37, 4, 2, 6, 8, 4, 8, 3, 5},    // H/G = 2, rows t < 7 without cmp blocks
        {1, 29, 3, 1, 5, 4, 2, 4, 4, 6},    // H/G = 3
    };
    for (int gi = 0; gi < 2; gi++) {
        NsaGeom g = geom_of(geoms[gi]);
        Inputs in = inputs_new(F64, &g, 1000 + gi);   // for a selection to hold fixed
        Branch cmp = {NSA_BR_CMP, g, g.NC, NULL}, sel = {NSA_BR_SEL, g, g.T, in.sel},
               win = {NSA_BR_WIN, g, g.T, NULL};
        attn_fd_case(&cmp, 1010 + gi);
        attn_fd_case(&sel, 1020 + gi);
        attn_fd_case(&win, 1030 + gi);
        inputs_free(&in);
    }
}

typedef struct {
    NsaGeom g;
    double *k, *pe, *R;
    int gather;   // 0: compress_avg, 1: block_gather
} CmpCtx;

static double compress_loss(void *ctx) {   // L = <Kc, R> or <X, R>
    CmpCtx *c = ctx;
    const int64_t n = nkv(&c->g, c->g.NC) * (c->gather ? c->g.l : 1);
    void *k = dnew(F64, c->k, nkv(&c->g, c->g.T)), *pe = dnew(F64, c->pe, (int64_t)c->g.l * c->g.D);
    void *out = dalloc(F64, n);
    if (c->gather) F64->block_gather_fwd(out, k, pe, &c->g, 0, c->g.NC);
    else F64->compress_avg_fwd(out, k, &c->g, 0, c->g.NC);
    double L = hdot(out, c->R, n);
    free(k); free(pe); free(out);
    return L;
}

static void test_compress_bwd_fd(void **state) {
    (void)state;
    static const int geoms[][10] = {{2, 37, 4, 2, 6, 8, 4, 8, 3, 5}, {1, 30, 2, 1, 3, 6, 2, 6, 3, 4}};
    for (int gi = 0; gi < 2; gi++)
        for (int gather = 0; gather < 2; gather++) {
            NsaGeom g = geom_of(geoms[gi]);
            uint64_t seed = 1100 + gi;
            const int64_t KV = nkv(&g, g.T), PE = (int64_t)g.l * g.D, n = nkv(&g, g.NC) * (gather ? g.l : 1);
            CmpCtx c = {g, hrand(F64, KV, 1, &seed), hrand(F64, PE, 1, &seed), hrand(F64, n, 1, &seed), gather};
            double *bk = hrand(F64, KV, 1, &seed), *bpe = hrand(F64, PE, 1, &seed);
            void *dR = dnew(F64, c.R, n), *dk = dnew(F64, bk, KV), *dpe = dnew(F64, bpe, PE);
            if (gather) F64->block_gather_bwd(dk, dpe, dR, &g);
            else F64->compress_avg_bwd(dk, dR, &g);
            double *gk = dfetch(F64, dk, KV), *gpe = dfetch(F64, dpe, PE);
            for (int64_t i = 0; i < KV; i++) gk[i] -= bk[i];
            for (int64_t i = 0; i < PE; i++) gpe[i] -= bpe[i];
            FdParam ps[2] = {{gather ? "block_gather dk" : "compress_avg dk", c.k, gk, KV},
                             {"block_gather dpe", c.pe, gpe, PE}};
            fd_check(compress_loss, &c, ps, gather ? 2 : 1);
            free(c.k); free(c.pe); free(c.R); free(bk); free(bpe); free(dR); free(dk); free(dpe);
            free(gk); free(gpe);
        }
}

// ---- gate activation and combine -------------------------------------------------------------

typedef struct {
    int64_t NG;
    int act;
    double *x, *R;
} GateCtx;

static double gate_loss(void *ctx) {   // L = <act(x), R>
    GateCtx *c = ctx;
    void *x = dnew(F64, c->x, 3 * c->NG), *gt = dalloc(F64, 3 * c->NG);
    F64->gate_act_fwd(gt, x, c->NG, c->act);
    double L = hdot(gt, c->R, 3 * c->NG);
    free(x); free(gt);
    return L;
}

static void test_gate_act(void **state) {
    (void)state;
    for (int act = 0; act < 2; act++) {
        // forward vs the definition, both precisions (logits up to +-30: the softmax
        // must subtract the max, the sigmoid must not produce NaN)
        for (int p = 0; p < 2; p++) {
            const Backend *be = PREC[p];
            const int64_t NG = 301;
            uint64_t seed = 1200 + act;
            double *x = hrand(be, 3 * NG, 30, &seed), *ref = hnew(3 * NG);
            for (int64_t i = 0; i < NG; i++) {
                const double *xi = x + 3 * i;
                if (act == NSA_GATE_SIGMOID) {
                    for (int b = 0; b < 3; b++) ref[3 * i + b] = 1 / (1 + exp(-xi[b]));
                } else {
                    double s = exp(xi[0]) + exp(xi[1]) + exp(xi[2]);
                    for (int b = 0; b < 3; b++) ref[3 * i + b] = exp(xi[b]) / s;
                }
            }
            void *dx = dnew(be, x, 3 * NG), *gt = dalloc(be, 3 * NG);
            dpoison(be, gt, 3 * NG);
            be->gate_act_fwd(gt, dx, NG, act);
            double *got = dfetch(be, gt, 3 * NG);
            check_close(act ? "gate sigmoid" : "gate softmax", got, ref, 3 * NG, TOL_FWD[p]);
            free(x); free(ref); free(dx); free(gt); free(got);
        }
        // backward vs FD (fp64), dlogits poisoned: it must be overwritten
        const int64_t NG = 40;
        uint64_t seed = 1210 + act;
        GateCtx c = {NG, act, hrand(F64, 3 * NG, 3, &seed), hrand(F64, 3 * NG, 1, &seed)};
        void *x = dnew(F64, c.x, 3 * NG), *gt = dalloc(F64, 3 * NG), *R = dnew(F64, c.R, 3 * NG);
        void *dx = dalloc(F64, 3 * NG);
        F64->gate_act_fwd(gt, x, NG, act);
        dpoison(F64, dx, 3 * NG);
        F64->gate_act_bwd(dx, R, gt, NG, act);
        double *gx = dfetch(F64, dx, 3 * NG);
        FdParam ps[1] = {{act ? "gate sigmoid dlogits" : "gate softmax dlogits", c.x, gx, 3 * NG}};
        fd_check(gate_loss, &c, ps, 1);
        free(c.x); free(c.R); free(x); free(gt); free(R); free(dx); free(gx);
    }
}

typedef struct {
    int64_t N;
    int H, G, D;
    double *gate, *ob[3], *R;   // ob[b] NULL: branch absent
} CombCtx;

static void *dnew_or_null(const Backend *be, const double *h, int64_t n) {
    return h ? dnew(be, h, n) : NULL;
}

static double combine_loss(void *ctx) {   // L = <o, R>
    CombCtx *c = ctx;
    const int64_t n = c->N * c->H * c->D;
    void *gt = dnew_or_null(F64, c->gate, c->N * c->G * 3), *o = dalloc(F64, n), *ob[3];
    for (int b = 0; b < 3; b++) ob[b] = dnew_or_null(F64, c->ob[b], n);
    F64->combine_fwd(o, gt, ob[0], ob[1], ob[2], c->N, c->H, c->G, c->D);
    double L = hdot(o, c->R, n);
    free(gt); free(o);
    for (int b = 0; b < 3; b++) free(ob[b]);
    return L;
}

// One combine configuration: which branches are present (mask bit b), gated or
// one-hot (gate NULL). Forward vs the definition in both precisions, backward vs FD.
static void combine_case(int mask, int gated, uint64_t seed) {
    const int64_t N = 9;
    const int H = 6, G = 2, D = 7, hpg = H / G;
    const int64_t n = N * H * D, ng = N * G * 3;
    for (int p = 0; p < 2; p++) {
        const Backend *be = PREC[p];
        uint64_t s = seed;
        double *gate = gated ? hrand(be, ng, 1, &s) : NULL, *ob[3], *ref = hnew(n);
        for (int b = 0; b < 3; b++) ob[b] = (mask >> b & 1) ? hrand(be, n, 1, &s) : NULL;
        for (int64_t r = 0; r < N; r++)
            for (int h = 0; h < H; h++)
                for (int b = 0; b < 3; b++)
                    for (int e = 0; e < D && ob[b]; e++)
                        ref[(r * H + h) * D + e] +=
                            (gate ? gate[(r * G + h / hpg) * 3 + b] : 1) * ob[b][(r * H + h) * D + e];
        void *dg = dnew_or_null(be, gate, ng), *o = dalloc(be, n), *dob[3];
        for (int b = 0; b < 3; b++) dob[b] = dnew_or_null(be, ob[b], n);
        dpoison(be, o, n);
        be->combine_fwd(o, dg, dob[0], dob[1], dob[2], N, H, G, D);
        double *got = dfetch(be, o, n);
        check_close("combine_fwd", got, ref, n, TOL_FWD[p]);
        if (!gated)   // one-hot: o is the branch output, bit for bit
            for (int b = 0; b < 3; b++)
                if (dob[b]) check_bitwise("combine one-hot o", o, dob[b], n * be->act_bytes);
        free(gate); free(ref); free(dg); free(o); free(got);
        for (int b = 0; b < 3; b++) free(ob[b]), free(dob[b]);
    }
    // backward (fp64): do_b and dgate are overwritten (poisoned first)
    uint64_t s = seed + 1;
    CombCtx c = {N, H, G, D, gated ? hrand(F64, ng, 1, &s) : NULL, {NULL, NULL, NULL}, hrand(F64, n, 1, &s)};
    for (int b = 0; b < 3; b++) c.ob[b] = (mask >> b & 1) ? hrand(F64, n, 1, &s) : NULL;
    void *gt = dnew_or_null(F64, c.gate, ng), *R = dnew(F64, c.R, n), *dgate = dalloc(F64, ng);
    void *ob[3], *dob[3];
    for (int b = 0; b < 3; b++) {
        ob[b] = dnew_or_null(F64, c.ob[b], n);
        dob[b] = c.ob[b] ? dalloc(F64, n) : NULL;
        if (dob[b]) dpoison(F64, dob[b], n);
    }
    dpoison(F64, dgate, ng);
    F64->combine_bwd(dob[0], dob[1], dob[2], dgate, R, gt, ob[0], ob[1], ob[2], N, H, G, D);
    double *hdg = dfetch(F64, dgate, ng), *hdo[3];
    FdParam ps[4];
    int np = 0;
    if (gated) ps[np++] = (FdParam){"combine dgate", c.gate, hdg, ng};
    for (int b = 0; b < 3; b++) {
        hdo[b] = c.ob[b] ? dfetch(F64, dob[b], n) : NULL;
        if (hdo[b]) ps[np++] = (FdParam){"combine do_b", c.ob[b], hdo[b], n};
        if (hdo[b] && !gated) check_bitwise("combine one-hot do_b", dob[b], R, n * sizeof(double));
    }
    fd_check(combine_loss, &c, ps, np);
    // dgate of absent branches is exactly 0; with a one-hot gate the present
    // branch's column is still sum_h <dout, o_b> (checked against the definition)
    for (int64_t r = 0; r < N; r++)
        for (int gr = 0; gr < G; gr++)
            for (int b = 0; b < 3; b++) {
                double want = 0;
                for (int h = gr * hpg; h < (gr + 1) * hpg && c.ob[b]; h++)
                    want += hdot(c.R + (r * H + h) * D, c.ob[b] + (r * H + h) * D, D);
                double got = hdg[(r * G + gr) * 3 + b];
                if (!c.ob[b]) assert_true(got == 0.0);
                else if (!(fabs(got - want) <= 1e-12 * (1 + fabs(want))))
                    fail_msg("combine dgate[%lld,%d,%d] %.17g want %.17g", (long long)r, gr, b, got, want);
            }
    // dgate NULL is allowed
    F64->combine_bwd(dob[0], dob[1], dob[2], NULL, R, gt, ob[0], ob[1], ob[2], N, H, G, D);
    free(c.gate); free(c.R); free(gt); free(R); free(dgate); free(hdg);
    for (int b = 0; b < 3; b++) {
        free(c.ob[b]); free(ob[b]); free(dob[b]); free(hdo[b]);
    }
}

static void test_combine(void **state) {
    (void)state;
    combine_case(7, 1, 1300);   // all three branches, gated
    combine_case(5, 1, 1310);   // sel absent (NULL), gated
    combine_case(2, 1, 1320);   // only sel, gated
    combine_case(4, 0, 1330);   // one-hot win (gate NULL)
    combine_case(1, 0, 1340);   // one-hot cmp
}

// ---- timing at the production shape (prints, asserts only finiteness) ----------------------

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void test_timing_production(void **state) {
    (void)state;
    const Backend *be = PREC[0];   // fp32, the "cpu" backend
    NsaGeom g;
    nsa_geom_init(&g, 1, 2048, 12, 2, 64, 32, 16, 64, 16, 512);
    uint64_t seed = 1400;
    const int64_t Q = nq(&g), KV = nkv(&g, g.T), KC = nkv(&g, g.NC), L = nlse(&g);
    double *h = hrand(be, Q, 1, &seed);
    void *q = dnew(be, h, Q), *dout = dnew(be, h, Q);
    free(h);
    void *k[3], *v[3];
    for (int b = 0; b < 3; b++) {
        h = hrand(be, KV, 1, &seed);
        k[b] = dnew(be, h, KV);
        for (int64_t i = 0; i < KV; i++) h[i] = urand(&seed);
        v[b] = dnew(be, h, KV);
        free(h);
    }
    void *Kc = dalloc(be, KC), *Vc = dalloc(be, KC), *dKc = dalloc(be, KC), *dVc = dalloc(be, KC);
    void *o[3], *lse[3], *dq = dalloc(be, Q), *dk[3], *dv[3];
    for (int b = 0; b < 3; b++) {
        o[b] = dalloc(be, Q), lse[b] = dalloc(be, L), dk[b] = dalloc(be, KV), dv[b] = dalloc(be, KV);
    }
    int32_t *sel = ialloc(nsel(&g));
    double t[12];
    int nt = 0;
    t[nt++] = now_s();
    be->compress_avg_fwd(Kc, k[0], &g, 0, g.NC);
    be->compress_avg_fwd(Vc, v[0], &g, 0, g.NC);
    t[nt++] = now_s();
    be->cmp_attn_fwd(o[0], lse[0], q, Kc, Vc, &g, 0, g.T);
    t[nt++] = now_s();
    be->select_blocks(sel, q, Kc, lse[0], &g, 0, g.T);
    t[nt++] = now_s();
    be->sel_attn_fwd(o[1], lse[1], q, k[1], v[1], sel, &g, 0, g.T);
    t[nt++] = now_s();
    be->win_attn_fwd(o[2], lse[2], q, k[2], v[2], &g, 0, g.T);
    t[nt++] = now_s();
    be->cmp_attn_bwd(dq, dKc, dVc, dout, q, Kc, Vc, o[0], lse[0], &g);
    t[nt++] = now_s();
    be->compress_avg_bwd(dk[0], dKc, &g);
    be->compress_avg_bwd(dv[0], dVc, &g);
    t[nt++] = now_s();
    be->sel_attn_bwd(dq, dk[1], dv[1], dout, q, k[1], v[1], o[1], lse[1], sel, &g);
    t[nt++] = now_s();
    be->win_attn_bwd(dq, dk[2], dv[2], dout, q, k[2], v[2], o[2], lse[2], &g);
    t[nt++] = now_s();
    static const char *names[] = {"compress_avg_fwd x2", "cmp_attn_fwd", "select_blocks",
                                  "sel_attn_fwd", "win_attn_fwd", "cmp_attn_bwd",
                                  "compress_avg_bwd x2", "sel_attn_bwd", "win_attn_bwd"};
#ifdef _OPENMP
    const int threads = omp_get_max_threads();
#else
    const int threads = 1;
#endif
    print_message("NSA ops, fp32, B=1 T=2048 H=12 G=2 D=64 l=32 d=16 l'=64 n=16 w=512, %d thread(s):\n",
                  threads);
    for (int i = 0; i + 1 < nt; i++) print_message("  %-20s %8.1f ms\n", names[i], 1e3 * (t[i + 1] - t[i]));
    print_message("  %-20s %8.1f ms\n", "total", 1e3 * (t[nt - 1] - t[0]));
    double *hd = dfetch(be, dq, Q);
    for (int64_t i = 0; i < Q; i++) assert_true(isfinite(hd[i]));
    free(hd);
    free(q); free(dout); free(Kc); free(Vc); free(dKc); free(dVc); free(dq); free(sel);
    for (int b = 0; b < 3; b++) {
        free(k[b]); free(v[b]); free(o[b]); free(lse[b]); free(dk[b]); free(dv[b]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compress_fwd),
        cmocka_unit_test(test_attn_fwd),
        cmocka_unit_test(test_select_ref),
        cmocka_unit_test(test_select_ties),
        cmocka_unit_test(test_cmp_empty_rows),
        cmocka_unit_test(test_causality),
        cmocka_unit_test(test_window_dense),
        cmocka_unit_test(test_sel_indices_outside),
        cmocka_unit_test(test_row_independence),
        cmocka_unit_test(test_threads_bitwise),
        cmocka_unit_test(test_attn_bwd_fd),
        cmocka_unit_test(test_compress_bwd_fd),
        cmocka_unit_test(test_gate_act),
        cmocka_unit_test(test_combine),
        cmocka_unit_test(test_timing_production),
    };
    const char *why = NULL;
    PREC[0] = backend_get("cpu", NULL, &why);
    if (PREC[0]) PREC[1] = backend_get("cpu64", NULL, &why);
    if (!PREC[0] || !PREC[1]) {
        fprintf(stderr, "test_nsa_ops: no CPU backend: %s\n", why ? why : "?");
        return 1;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
