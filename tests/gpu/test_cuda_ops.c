// tests/gpu/test_cuda_ops.c — every op of the CUDA backend against the CPU reference
// backend (ggml test-backend-ops style).
//
// One engine (run_group) over tables of op cases: a group (matmul, rmsnorm, ..., the NSA
// ops) owns paired CPU/CUDA buffers sized from one row of RUNS (or one NSA shape); each
// of its cases fills inputs on both sides (setup), runs the op once per backend through
// one callback that sees that backend's table and buffers (run), and compares outputs
// with a tolerance (out) or through a case-specific check (err).
//
// For each precision of the CUDA backend (fp32, bf16, fp16) and, for the attention
// ops, each implementation (tensor-core "mma" where the shape allows, and "simple"),
// every op runs on fresh random inputs (never zero) that both backends see
// identically: activation inputs go through the CUDA activation type first and the
// rounded values are what the CPU gets; weights that the GPU reads through its bf16
// copy are rounded the same way. Outputs are poisoned (NaN, INT32_MIN) before each
// run. The GPU result is compared with the CPU's fp32 result:
//
//   err = ||gpu - cpu||_2 / ||cpu||_2   over the finite reference elements,
//   -inf reference elements (lse of rows without keys) must be -inf exactly,
//   any NaN/inf where the reference is finite fails (err = inf).
//
// Tolerances (normwise, stated once here and in docs/cuda.md):
//   fp32 1e-5  (same math, different summation order / exp implementation)
//   bf16 2e-2  (8-bit mantissa outputs and P/dS operands of the tensor-core products)
//   fp16 5e-3  (11-bit mantissa)
// Selection is discrete: sel_idx must equal the CPU's exactly, except rows where the
// CPU's own scores (recomputed here in fp64) have a near-tie at the decision
// boundary (relative gap < 1e-4), which are counted and reported.
//
// Prints one table row per (op, shape, dtype): op shape dtype err tol PASS/FAIL.
// Exit 0 all pass, 1 any failure, 77 no usable CUDA device (ctest SKIP).
// Usage: test_cuda_ops [--small] [--prec fp32|bf16|fp16] [--filter SUBSTRING]
#define _POSIX_C_SOURCE 200809L   // strtok_r
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_launch.h"
#include "kernels/ops.h"

static const Backend *CPU, *GPU;
static const char *g_dtname = "";
static int g_select_pad;   // the selection scoring's NSA_CUDA_SELECT_PAD mode of the current impl
static int g_select_pos;   // the selection scoring's NSA_CUDA_SELECT_POS of the current impl
static int g_dt = NSA_DT_F32;   // the activation type of the GPU backend under test
static double g_tol = 0;
static int g_fail = 0, g_rows = 0, g_small = 0;
static const char *g_filter = NULL;
static FILE *g_csv = NULL;

// ---- random numbers (xorshift), uniform in +-[0.05, 1] * scale: never zero ------------------
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}
static void fill_rand(double *x, int64_t n, double scale) {
    for (int64_t i = 0; i < n; i++) {
        double u = 0.05 + 0.95 * urand();
        x[i] = (urand() < 0.5 ? -u : u) * scale;
    }
}

// ---- paired buffers ------------------------------------------------------------------------
typedef struct {
    void *c, *g;   // CPU (host) and CUDA buffers
    int64_t n;
    int act;       // 1 activation type, 0 parameter type (fp32)
} TP;

static TP tp_new(int64_t n, int act) {
    TP t;
    t.n = n;
    t.act = act;
    size_t nn = (size_t)(n > 0 ? n : 1);
    t.c = CPU->alloc(nn * (size_t)CPU->act_bytes);
    t.g = GPU->alloc(nn * (size_t)(act ? GPU->act_bytes : GPU->param_bytes));
    return t;
}
static void tp_free(TP *t) {
    CPU->free(t->c);
    GPU->free(t->g);
}
// upload host values to both; activations are rounded through the GPU type first
// (round_param: parameters too, for weights the GPU reads through its low-precision copy)
static void tp_set(TP *t, double *h, int round_param) {
    if (t->n <= 0) return;
    if (t->act || round_param) {
        if (GPU->act_bytes != 4) {
            void *tmp = GPU->alloc((size_t)t->n * (size_t)GPU->act_bytes);
            GPU->act_from_f64(tmp, h, t->n);
            GPU->act_to_f64(h, tmp, t->n);
            GPU->free(tmp);
        } else {
            for (int64_t i = 0; i < t->n; i++) h[i] = (double)(float)h[i];
        }
    }
    if (t->act) GPU->act_from_f64(t->g, h, t->n);
    else GPU->param_from_f64(t->g, h, t->n);
    CPU->act_from_f64(t->c, h, t->n);
}
static void tp_rand(TP *t, double scale, int round_param) {
    double *h = malloc(sizeof(double) * (size_t)(t->n > 0 ? t->n : 1));
    fill_rand(h, t->n, scale);
    tp_set(t, h, round_param);
    free(h);
}
static void tp_poison(TP *t) {
    double *h = malloc(sizeof(double) * (size_t)(t->n > 0 ? t->n : 1));
    for (int64_t i = 0; i < t->n; i++) h[i] = NAN;
    if (t->act) GPU->act_from_f64(t->g, h, t->n);
    else GPU->param_from_f64(t->g, h, t->n);
    CPU->act_from_f64(t->c, h, t->n);
    free(h);
}
// copy the CPU values into the GPU buffer (rounded): "same inputs" for chained ops
static void tp_sync_from_cpu(TP *t) {
    double *h = malloc(sizeof(double) * (size_t)(t->n > 0 ? t->n : 1));
    CPU->act_to_f64(h, t->c, t->n);
    tp_set(t, h, 0);
    free(h);
}

// --filter a,b,c: run the checks whose group name contains one of the substrings
static int want(const char *op) {
    if (!g_filter) return 1;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", g_filter);
    for (char *save = NULL, *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save))
        if (strstr(op, p)) return 1;
    return 0;
}

// compare elements [off, off+n) (all if n < 0)
static double tp_err_range(const TP *t, int64_t off, int64_t n, int *bad_inf) {
    if (n < 0) n = t->n - off;
    double *a = malloc(sizeof(double) * (size_t)(t->n > 0 ? t->n : 1));
    double *b = malloc(sizeof(double) * (size_t)(t->n > 0 ? t->n : 1));
    if (t->act) GPU->act_to_f64(a, t->g, t->n);
    else GPU->param_to_f64(a, t->g, t->n);
    CPU->act_to_f64(b, t->c, t->n);
    double num = 0, den = 0;
    int bad = 0;
    for (int64_t i = off; i < off + n; i++) {
        if (isinf(b[i]) && b[i] < 0) {
            if (!(isinf(a[i]) && a[i] < 0)) bad = 1;
            continue;
        }
        if (!isfinite(b[i])) { bad = 1; continue; }   // the reference itself must be finite
        if (!isfinite(a[i])) { bad = 1; continue; }
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    free(a);
    free(b);
    if (bad_inf) *bad_inf = bad;
    if (bad) return INFINITY;
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}
static double tp_err(const TP *t) { return tp_err_range(t, 0, -1, NULL); }

static void report(const char *op, const char *shape, double err, double tol) {
    int pass = err <= tol;   // NaN/inf never pass
    if (!pass) g_fail++;
    g_rows++;
    printf("%-28s %-44s %-12s %10.3e %8.1e  %s\n", op, shape, g_dtname, err, tol, pass ? "PASS" : "FAIL");
    if (g_csv) fprintf(g_csv, "%s,%s,%s,%.6e,%.1e,%s\n", op, shape, g_dtname, err, tol, pass ? "PASS" : "FAIL");
    fflush(stdout);
}

// ============================================================================================
// the engine
// ============================================================================================
// A group of op cases shares one context: paired buffers in numbered slots, sized by the
// group's `open` from its parameters (one row of RUNS), an int32 buffer (tokens, targets,
// selection) on both sides and host scratch. Its cases run in order; each case:
//   setup  fills inputs and poisons outputs on both sides identically (NULL: none),
//   run    the op, written once: called with the CPU backend and its buffers (gpu 0), then
//          with the CUDA backend and its buffers (gpu 1) (NULL: none),
//   then   each listed output is compared normwise (tp_err) with the case's tolerance, or
//          `err` computes a case-specific error (and may extend the shape label).
// A case with no output and no err only prepares state for the cases after it.
enum { NSLOT = 16 };
typedef struct {
    const int *p;           // the group's parameters (RUNS[i].p, or the NSA shape)
    NsaGeom g;              // NSA groups: the geometry
    int impl;               // NSA groups: 0 simple, 1 mma, 2 mma with one position per selection tile
    TP t[NSLOT];
    void *shadow[NSLOT];    // unaligned cases: the masked slots' CUDA buffers copied one element in
    int use_shadow;         // S() hands the CUDA side the shadows
    int32_t *ic, *ig, *ih;  // int32 buffer: CPU, CUDA, host copy
    int64_t ni;             // its elements
    double *h;              // host scratch
    char shape[160];        // the shape column of the report
} Ctx;
#define TOL_PREC (-1.0)     // the precision's tolerance (g_tol)
enum { ONLY_SIMPLE = 1, ONLY_NOT_MMA1 = 2, ONLY_NC = 4, ONLY_WS = 8, ONLY_ROWS = 16, ONLY_MMA = 32 };   // case conditions (NSA groups)
typedef struct {
    int slot;
    const char *name;
    int if_nc;              // compared only when g.NC > 0
} Out;
#define OUT(s, nm) {.slot = (s), .name = (nm)}
#define OUT_IF_NC(s, nm) {.slot = (s), .name = (nm), .if_nc = 1}
// A case with `unaligned` (a mask of slots, bit i for slot i) runs on the CUDA side a second
// time with those slots replaced by copies placed one element into fresh allocations (no
// longer 16-byte aligned, so the op takes its one-element kernels), starting from the same
// inputs; each listed output must then have the same bits on both paths ("<name> [1-element
// path]", tolerance 0), as the 16-byte kernels promise. (Rope tables stay: a copy would lose
// the fp32 shadow the backend keeps beside them.)
typedef struct {
    const char *filter;     // --filter: the case runs when this matches (NULL: always)
    int only;               // ONLY_* conditions, all must hold
    void (*setup)(Ctx *c);
    void (*run)(Ctx *c, const Backend *be, int gpu);
    Out out[3];             // compared outputs (name NULL ends)
    double (*err)(Ctx *c, char *shape, size_t n);   // or: a case-specific check, reported as `name`
    const char *name;
    double tol;             // TOL_PREC or a fixed tolerance
    int arg;                // a constant the callbacks read (gate activation, rows branch)
    unsigned unaligned;     // slots to misalign for the one-element path, bit for bit (above)
} OpCase;
typedef struct {
    const char *filter[2];  // --filter: the group runs when one matches (NULL: always; its cases filter)
    void (*open)(Ctx *c);   // shape label and buffers from c->p
    const OpCase *cases;
    int ncases;
} Group;
#define CASES(a) a, (int)(sizeof a / sizeof a[0])
// the CPU or the CUDA side of a slot / of the int32 buffer
#define S(slot) (gpu ? gpu_buf(c, slot) : c->t[slot].c)
#define SI (gpu ? c->ig : c->ic)
static const OpCase *g_case;   // the case running (its `arg`)

static void *gpu_buf(const Ctx *c, int slot) { return c->use_shadow && c->shadow[slot] ? c->shadow[slot] : c->t[slot].g; }
static size_t tp_elem_bytes(const TP *t) { return (size_t)(t->act ? GPU->act_bytes : GPU->param_bytes); }
// the shadows: the masked slots' CUDA buffers as they are now, one element into fresh allocations
static void shadows_make(Ctx *c, unsigned mask) {
    for (int i = 0; i < NSLOT; i++) {
        if (!c->t[i].g || !(mask >> i & 1)) continue;
        const size_t eb = tp_elem_bytes(&c->t[i]);
        char *b = GPU->alloc((size_t)(c->t[i].n + 1) * eb);
        GPU->copy(b + eb, c->t[i].g, (size_t)c->t[i].n * eb);
        c->shadow[i] = b + eb;
    }
}
static void shadows_free(Ctx *c) {
    for (int i = 0; i < NSLOT; i++)
        if (c->shadow[i]) GPU->free((char *)c->shadow[i] - tp_elem_bytes(&c->t[i]));
    memset(c->shadow, 0, sizeof c->shadow);
}
// the fraction of elements of a slot whose bits differ between the buffer and its shadow
static double shadow_diff(const Ctx *c, int slot) {
    const TP *t = &c->t[slot];
    const size_t eb = tp_elem_bytes(t), n = (size_t)t->n;
    unsigned char *a = malloc(n * eb + 1), *b = malloc(n * eb + 1);
    GPU->to_host(a, t->g, n * eb);
    GPU->to_host(b, c->shadow[slot], n * eb);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(a + i * eb, b + i * eb, eb) != 0;
    free(a);
    free(b);
    return n ? (double)bad / (double)n : 0.0;
}
static void ctx_ints(Ctx *c, int64_t n) {
    c->ni = n;
    c->ic = CPU->alloc(sizeof(int32_t) * (size_t)n);
    c->ig = GPU->alloc(sizeof(int32_t) * (size_t)n);
    c->ih = malloc(sizeof(int32_t) * (size_t)n);
}
static void ctx_ints_upload(Ctx *c) {   // the host ints to both sides
    memcpy(c->ic, c->ih, sizeof(int32_t) * (size_t)c->ni);
    GPU->from_host(c->ig, c->ih, sizeof(int32_t) * (size_t)c->ni);
}
static void ctx_close(Ctx *c) {
    for (int i = 0; i < NSLOT; i++)
        if (c->t[i].c) tp_free(&c->t[i]);
    if (c->ic) { CPU->free(c->ic); GPU->free(c->ig); free(c->ih); }
    free(c->h);
}

static int case_wanted(const Ctx *c, const OpCase *k) {
    if (k->filter && !want(k->filter)) return 0;
    if ((k->only & ONLY_SIMPLE) && c->impl != 0) return 0;
    if ((k->only & ONLY_NOT_MMA1) && c->impl == 2) return 0;
    if ((k->only & ONLY_NC) && c->g.NC <= 0) return 0;
    if ((k->only & ONLY_WS) && c->impl != 7) return 0;
    if ((k->only & ONLY_ROWS) && c->impl != 5) return 0;
    if ((k->only & ONLY_MMA) && c->impl != 1) return 0;
    // the warp-specialised kernel choices (impls 7, 8) change only the window and compressed backward
    if (c->impl >= 7 && k->filter && strcmp(k->filter, "cmp_attn") && strcmp(k->filter, "win_attn")) return 0;
    return 1;
}
static void run_group(const Group *gr, const int *p, int impl) {
    if (gr->filter[0] && !want(gr->filter[0]) && !(gr->filter[1] && want(gr->filter[1]))) return;
    Ctx c;
    memset(&c, 0, sizeof c);
    c.p = p;
    c.impl = impl;
    gr->open(&c);
    for (int i = 0; i < gr->ncases; i++) {
        const OpCase *k = &gr->cases[i];
        if (!case_wanted(&c, k)) continue;
        g_case = k;
        const double tol = k->tol == TOL_PREC ? g_tol : k->tol;
        if (k->setup) k->setup(&c);
        if (k->run) {
            if (k->unaligned) shadows_make(&c, k->unaligned);
            k->run(&c, CPU, 0);
            k->run(&c, GPU, 1);
            if (k->unaligned) {
                c.use_shadow = 1;
                k->run(&c, GPU, 1);
                c.use_shadow = 0;
            }
        }
        if (k->err) {
            char sh[320];
            snprintf(sh, sizeof sh, "%s", c.shape);
            double e = k->err(&c, sh, sizeof sh);
            report(k->name, sh, e, tol);
        }
        for (int o = 0; o < 3 && k->out[o].name; o++) {
            if (k->out[o].if_nc && c.g.NC <= 0) continue;
            report(k->out[o].name, c.shape, tp_err(&c.t[k->out[o].slot]), tol);
            if (k->unaligned && k->run) {
                char nm[96];
                snprintf(nm, sizeof nm, "%s [1-element path]", k->out[o].name);
                report(nm, c.shape, shadow_diff(&c, k->out[o].slot), 0);
            }
        }
        if (k->unaligned) shadows_free(&c);
    }
    ctx_close(&c);
}

// ============================================================================================
// dense ops
// ============================================================================================
// ---- matmul_fwd: p = M N K ldi ldo bias ----
enum { MM_INP, MM_W, MM_BIAS, MM_OUT };
static void mm_open(Ctx *c) {
    const int *p = c->p;
    snprintf(c->shape, sizeof c->shape, "M%d N%d K%d ldi%d ldo%d%s", p[0], p[1], p[2], p[3], p[4], p[5] ? " bias" : "");
    c->t[MM_INP] = tp_new((int64_t)p[0] * p[3], 1);
    c->t[MM_W] = tp_new((int64_t)p[1] * p[2], 0);
    c->t[MM_BIAS] = tp_new(p[1], 0);
    c->t[MM_OUT] = tp_new((int64_t)p[0] * p[4], 1);
}
static void mm_setup(Ctx *c) {
    tp_rand(&c->t[MM_INP], 1.0, 0);
    tp_rand(&c->t[MM_W], 0.1, 1);
    tp_rand(&c->t[MM_BIAS], 0.5, 1);
    tp_poison(&c->t[MM_OUT]);
}
static void mm_run(Ctx *c, const Backend *be, int gpu) {
    const int *p = c->p;
    be->matmul_fwd(S(MM_OUT), p[4], S(MM_INP), p[3], S(MM_W), p[5] ? S(MM_BIAS) : NULL, p[0], p[1], p[2]);
}
// only the M x N region of the ldo-strided output is defined: compare row by row
static double mm_err(Ctx *c, char *shape, size_t n) {
    (void)shape; (void)n;
    const int M = c->p[0], N = c->p[1], ldo = c->p[4];
    const TP *out = &c->t[MM_OUT];
    double *a = malloc(sizeof(double) * (size_t)out->n), *b = malloc(sizeof(double) * (size_t)out->n);
    GPU->act_to_f64(a, out->g, out->n);
    CPU->act_to_f64(b, out->c, out->n);
    double num = 0, den = 0;
    int bad = 0;
    for (int m = 0; m < M; m++)
        for (int j = 0; j < N; j++) {
            double x = a[(int64_t)m * ldo + j], y = b[(int64_t)m * ldo + j];
            if (!isfinite(x) || !isfinite(y)) bad = 1;
            num += (x - y) * (x - y);
            den += y * y;
        }
    free(a);
    free(b);
    return bad ? INFINITY : sqrt(num / den);
}
static const OpCase MATMUL_CASES[] = {
    {.setup = mm_setup, .run = mm_run, .err = mm_err, .name = "matmul_fwd", .tol = TOL_PREC},
};
static const Group G_MATMUL = {{"matmul", NULL}, mm_open, CASES(MATMUL_CASES)};

// ---- matmul_bwd: p = M N K acc ----
enum { MB_DOUT, MB_INP, MB_W, MB_DINP, MB_DW, MB_DB };
static void mb_open(Ctx *c) {
    const int M = c->p[0], N = c->p[1], K = c->p[2];
    snprintf(c->shape, sizeof c->shape, "M%d N%d K%d dinp%s", M, N, K, c->p[3] ? "+=" : "=");
    c->t[MB_DOUT] = tp_new((int64_t)M * N, 1);
    c->t[MB_INP] = tp_new((int64_t)M * K, 1);
    c->t[MB_W] = tp_new((int64_t)N * K, 0);
    c->t[MB_DINP] = tp_new((int64_t)M * K, 1);
    c->t[MB_DW] = tp_new((int64_t)N * K, 0);
    c->t[MB_DB] = tp_new(N, 0);
}
static void mb_setup(Ctx *c) {
    tp_rand(&c->t[MB_DOUT], 1.0, 0);
    tp_rand(&c->t[MB_INP], 1.0, 0);
    tp_rand(&c->t[MB_W], 0.1, 1);
    if (c->p[3]) tp_rand(&c->t[MB_DINP], 1.0, 0);
    else tp_poison(&c->t[MB_DINP]);
    tp_rand(&c->t[MB_DW], 1.0, 0);
    tp_rand(&c->t[MB_DB], 1.0, 0);
}
static void mb_run(Ctx *c, const Backend *be, int gpu) {
    be->matmul_bwd(S(MB_DINP), S(MB_DW), S(MB_DB), S(MB_DOUT), S(MB_INP), S(MB_W), c->p[0], c->p[1], c->p[2], c->p[3]);
}
static const OpCase MATMUL_BWD_CASES[] = {
    {.setup = mb_setup, .run = mb_run, .tol = TOL_PREC,
     .out = {OUT(MB_DINP, "matmul_bwd.dinp"), OUT(MB_DW, "matmul_bwd.dw"), OUT(MB_DB, "matmul_bwd.dbias")}},
};
static const Group G_MATMUL_BWD = {{"matmul", NULL}, mb_open, CASES(MATMUL_BWD_CASES)};

// ---- weights registered through params_changed: the GPU reads its own low-precision copy,
// refreshed by adamw; the result must follow the updated fp32 master weights ----
enum { WC_M = 40, WC_N = 48, WC_K = 64, WC_P = WC_N * WC_K + 100 };
enum { WC_PAR, WC_INP, WC_OUT, WC_G, WC_MOM, WC_VAR };
static void wc_open(Ctx *c) {
    c->t[WC_PAR] = tp_new(WC_P, 0);
    c->t[WC_INP] = tp_new((int64_t)WC_M * WC_K, 1);
    c->t[WC_OUT] = tp_new((int64_t)WC_M * WC_N, 1);
    c->t[WC_G] = tp_new(WC_P, 0);
    c->t[WC_MOM] = tp_new(WC_P, 0);
    c->t[WC_VAR] = tp_new(WC_P, 0);
}
static void wc_setup(Ctx *c) {
    tp_rand(&c->t[WC_PAR], 0.1, 1);
    tp_rand(&c->t[WC_INP], 1.0, 0);
    tp_rand(&c->t[WC_G], 1.0, 0);
    if (GPU->params_changed) GPU->params_changed(c->t[WC_PAR].g, WC_P);
}
static void wc_matmul(Ctx *c, const Backend *be, int gpu) {   // the weights at offset 100
    be->matmul_fwd(S(WC_OUT), WC_N, S(WC_INP), WC_K, (char *)S(WC_PAR) + 100 * 4, NULL, WC_M, WC_N, WC_K);
}
static void wc_adamw(Ctx *c, const Backend *be, int gpu) {
    be->adamw(S(WC_PAR), S(WC_G), S(WC_MOM), S(WC_VAR), WC_P, 1e-2, 0.9, 0.95, 0.1, 0.05, 1e-8, 0.1);
}
// an update that covers the weights' first 1900 elements only (the aligned copy of the
// misaligned weights overlaps it in part: refreshed whole after the update)
static void wc_adamw_part(Ctx *c, const Backend *be, int gpu) {
    be->adamw(S(WC_PAR), S(WC_G), S(WC_MOM), S(WC_VAR), 2000, 1e-2, 0.9, 0.95, 0.1, 0.05, 1e-8, 0.1);
}
// two runs, the second [60, WC_P) holding the weights [100, WC_P) after a gap (cut there)
static void wc_adamw_runs(Ctx *c, const Backend *be, int gpu) {
    const int64_t off[2] = {0, 60}, len[2] = {60, WC_P - 60};
    const double wd[2] = {0.0, 0.1};
    be->adamw_runs(S(WC_PAR), S(WC_G), S(WC_MOM), S(WC_VAR), off, len, wd, 2, 1e-2, 0.9, 0.95, 0.1, 0.05, 1e-8);
}
static void wc_after_adamw(Ctx *c) {
    tp_poison(&c->t[WC_OUT]);
    snprintf(c->shape, sizeof c->shape, "copy refreshed by adamw");
}
static const OpCase WEIGHT_COPY_CASES[] = {
    {.setup = wc_setup, .run = wc_matmul, .tol = TOL_PREC, .out = {OUT(WC_OUT, "weight_copy.matmul")}},
    {.run = wc_adamw},
    {.setup = wc_after_adamw, .run = wc_matmul, .tol = TOL_PREC, .out = {OUT(WC_OUT, "weight_copy.after_adamw")}},
    {.run = wc_adamw_part},
    {.setup = wc_after_adamw, .run = wc_matmul, .tol = TOL_PREC, .out = {OUT(WC_OUT, "weight_copy.after_adamw(part)")}},
    {.run = wc_adamw_runs},
    {.setup = wc_after_adamw, .run = wc_matmul, .tol = TOL_PREC, .out = {OUT(WC_OUT, "weight_copy.after_adamw_runs")}},
};
static void wc_open_labelled(Ctx *c) {
    wc_open(c);
    snprintf(c->shape, sizeof c->shape, "registered params, offset 100");
}
static const Group G_WEIGHT_COPY = {{"weight_copy", NULL}, wc_open_labelled, CASES(WEIGHT_COPY_CASES)};

// ---- embedding: p = N C V ----
enum { EM_WTE, EM_OUT, EM_DOUT, EM_DWTE };
static void em_open(Ctx *c) {
    const int N = c->p[0], C = c->p[1], V = c->p[2];
    snprintf(c->shape, sizeof c->shape, "N%d C%d V%d", N, C, V);
    c->t[EM_WTE] = tp_new((int64_t)V * C, 0);
    c->t[EM_OUT] = tp_new((int64_t)N * C, 1);
    c->t[EM_DOUT] = tp_new((int64_t)N * C, 1);
    c->t[EM_DWTE] = tp_new((int64_t)V * C, 0);
    ctx_ints(c, N);
}
static void em_setup_fwd(Ctx *c) {
    const int N = c->p[0], V = c->p[2];
    for (int i = 0; i < N; i++) c->ih[i] = (int32_t)(urand() * V) % V;
    ctx_ints_upload(c);
    tp_rand(&c->t[EM_WTE], 1.0, 1);
    tp_poison(&c->t[EM_OUT]);
}
static void em_run_fwd(Ctx *c, const Backend *be, int gpu) { be->embedding_fwd(S(EM_OUT), SI, S(EM_WTE), c->p[0], c->p[1]); }
static void em_setup_bwd(Ctx *c) {
    tp_rand(&c->t[EM_DOUT], 1.0, 0);
    tp_rand(&c->t[EM_DWTE], 1.0, 0);
}
static void em_run_bwd(Ctx *c, const Backend *be, int gpu) { be->embedding_bwd(S(EM_DWTE), S(EM_DOUT), SI, c->p[0], c->p[1]); }
static const OpCase EMBEDDING_CASES[] = {
    {.setup = em_setup_fwd, .run = em_run_fwd, .tol = TOL_PREC, .out = {OUT(EM_OUT, "embedding_fwd")}},
    {.setup = em_setup_bwd, .run = em_run_bwd, .tol = TOL_PREC, .out = {OUT(EM_DWTE, "embedding_bwd")}},
};
static const Group G_EMBEDDING = {{"embedding", NULL}, em_open, CASES(EMBEDDING_CASES)};

// ---- rmsnorm: p = N C ----
enum { RN_X, RN_W, RN_OUT, RN_RSTD, RN_DOUT, RN_DX, RN_DW };
static void rn_open(Ctx *c) {
    const int N = c->p[0], C = c->p[1];
    snprintf(c->shape, sizeof c->shape, "N%d C%d", N, C);
    c->t[RN_X] = tp_new((int64_t)N * C, 1);
    c->t[RN_W] = tp_new(C, 0);
    c->t[RN_OUT] = tp_new((int64_t)N * C, 1);
    c->t[RN_RSTD] = tp_new(N, 1);
    c->t[RN_DOUT] = tp_new((int64_t)N * C, 1);
    c->t[RN_DX] = tp_new((int64_t)N * C, 1);
    c->t[RN_DW] = tp_new(C, 0);
}
static void rn_setup_fwd(Ctx *c) {
    tp_rand(&c->t[RN_X], 2.0, 0);
    tp_rand(&c->t[RN_W], 1.0, 0);
    tp_poison(&c->t[RN_OUT]);
    tp_poison(&c->t[RN_RSTD]);
}
static void rn_run_fwd(Ctx *c, const Backend *be, int gpu) {
    be->rmsnorm_fwd(S(RN_OUT), S(RN_RSTD), S(RN_X), S(RN_W), c->p[0], c->p[1], 1e-5);
}
static void rn_setup_bwd(Ctx *c) {
    tp_rand(&c->t[RN_DOUT], 1.0, 0);
    tp_rand(&c->t[RN_DX], 1.0, 0);
    tp_rand(&c->t[RN_DW], 1.0, 0);
}
static void rn_run_bwd(Ctx *c, const Backend *be, int gpu) {
    be->rmsnorm_bwd(S(RN_DX), S(RN_DW), S(RN_DOUT), S(RN_X), S(RN_W), S(RN_RSTD), c->p[0], c->p[1]);
}
static const OpCase RMSNORM_CASES[] = {
    {.setup = rn_setup_fwd, .run = rn_run_fwd, .tol = TOL_PREC,
     .out = {OUT(RN_OUT, "rmsnorm_fwd.out"), OUT(RN_RSTD, "rmsnorm_fwd.rstd")}},
    {.setup = rn_setup_bwd, .run = rn_run_bwd, .tol = TOL_PREC,
     .out = {OUT(RN_DX, "rmsnorm_bwd.dinp"), OUT(RN_DW, "rmsnorm_bwd.dw")}},
};
static const Group G_RMSNORM = {{"rmsnorm", NULL}, rn_open, CASES(RMSNORM_CASES)};

// ---- rope: p = B T t0 Tn nh D ----
enum { RP_CS, RP_X };
static void rp_open(Ctx *c) {
    const int *p = c->p;
    snprintf(c->shape, sizeof c->shape, "B%d T%d rows[%d,%d) nh%d D%d", p[0], p[1], p[2], p[2] + p[3], p[4], p[5]);
    c->t[RP_CS] = tp_new((int64_t)p[1] * p[5], 1);
    c->t[RP_X] = tp_new((int64_t)p[0] * p[1] * p[4] * p[5], 1);
}
static void rp_poison_cs(Ctx *c) { tp_poison(&c->t[RP_CS]); }
static void rp_rand_x(Ctx *c) { tp_rand(&c->t[RP_X], 1.0, 0); }
static void rp_run_table(Ctx *c, const Backend *be, int gpu) { be->rope_table(S(RP_CS), c->p[1], c->p[5], 10000.0); }
static void rp_run_fwd(Ctx *c, const Backend *be, int gpu) {
    const int *p = c->p;
    be->rope_fwd(S(RP_X), S(RP_CS), p[0], p[1], p[2], p[3], p[4], p[5]);
}
static void rp_run_bwd(Ctx *c, const Backend *be, int gpu) {
    const int *p = c->p;
    be->rope_bwd(S(RP_X), S(RP_CS), p[0], p[1], p[2], p[3], p[4], p[5]);
}
static const OpCase ROPE_CASES[] = {
    {.setup = rp_poison_cs, .run = rp_run_table, .tol = TOL_PREC, .out = {OUT(RP_CS, "rope_table")}},
    {.setup = rp_rand_x, .run = rp_run_fwd, .tol = TOL_PREC, .unaligned = 1u << RP_X, .out = {OUT(RP_X, "rope_fwd")}},
    {.setup = rp_rand_x, .run = rp_run_bwd, .tol = TOL_PREC, .unaligned = 1u << RP_X, .out = {OUT(RP_X, "rope_bwd")}},
};
static const Group G_ROPE = {{"rope", NULL}, rp_open, CASES(ROPE_CASES)};

// ---- the fused K/V projection's split / gather: p = B T G D r0 nr ----
// The six [B,T,G,D] buffers live in two slots, keys k_cmp|k_sel|k_win and values
// v_cmp|v_sel|v_win, each buffer at its offset there; rows [r0, r0+nr) of B*T.
enum { KV_CS, KV_KV, KV_K, KV_V, KV_DKV };
static void kv_open(Ctx *c) {
    const int *p = c->p;
    const int64_t rows = (int64_t)p[0] * p[1], GD = (int64_t)p[2] * p[3];
    snprintf(c->shape, sizeof c->shape, "B%d T%d G%d D%d rows[%d,%d)", p[0], p[1], p[2], p[3], p[4], p[4] + p[5]);
    c->t[KV_CS] = tp_new((int64_t)p[1] * p[3], 1);
    c->t[KV_KV] = tp_new((int64_t)p[5] * 6 * GD, 1);
    c->t[KV_K] = tp_new(3 * rows * GD, 1);
    c->t[KV_V] = tp_new(3 * rows * GD, 1);
    c->t[KV_DKV] = tp_new((int64_t)p[5] * 6 * GD, 1);
}
// the six buffers of one side, in ops.h order k_cmp, v_cmp, k_sel, v_sel, k_win, v_win
static void kv_bufs(Ctx *c, int gpu, void **b) {
    const int64_t n = (int64_t)c->p[0] * c->p[1] * c->p[2] * c->p[3];
    const size_t eb = (size_t)(gpu ? GPU->act_bytes : CPU->act_bytes);
    for (int j = 0; j < 3; j++) {
        b[2 * j] = (char *)S(KV_K) + (size_t)j * n * eb;
        b[2 * j + 1] = (char *)S(KV_V) + (size_t)j * n * eb;
    }
}
static void kv_poison_cs(Ctx *c) { tp_poison(&c->t[KV_CS]); }
static void kv_run_table(Ctx *c, const Backend *be, int gpu) { be->rope_table(S(KV_CS), c->p[1], c->p[3], 10000.0); }
static void kv_setup_split(Ctx *c) {   // rows outside [r0, r0+nr) keep these values
    tp_rand(&c->t[KV_KV], 1.0, 0);
    tp_rand(&c->t[KV_K], 1.0, 0);
    tp_rand(&c->t[KV_V], 1.0, 0);
}
static void kv_run_split(Ctx *c, const Backend *be, int gpu) {
    void *b[6];
    kv_bufs(c, gpu, b);
    be->kv_split_rope_fwd(b, S(KV_KV), S(KV_CS), c->p[4], c->p[5], c->p[1], c->p[2], c->p[3]);
}
static void kv_setup_gather(Ctx *c) {
    tp_rand(&c->t[KV_K], 1.0, 0);
    tp_rand(&c->t[KV_V], 1.0, 0);
    tp_poison(&c->t[KV_DKV]);
}
static void kv_run_gather(Ctx *c, const Backend *be, int gpu) {
    void *b[6];
    kv_bufs(c, gpu, b);
    const void *src[6] = {b[0], b[1], b[2], b[3], b[4], b[5]};
    be->kv_gather_rope_bwd(S(KV_DKV), src, S(KV_CS), c->p[4], c->p[5], c->p[1], c->p[2], c->p[3]);
}
#define KV_UNALIGNED (1u << KV_KV | 1u << KV_K | 1u << KV_V | 1u << KV_DKV)
static const OpCase KV_CASES[] = {
    {.setup = kv_poison_cs, .run = kv_run_table},   // each side's own table, as the model has it
    {.setup = kv_setup_split, .run = kv_run_split, .tol = TOL_PREC, .unaligned = KV_UNALIGNED,
     .out = {OUT(KV_K, "kv_split_rope_fwd.k"), OUT(KV_V, "kv_split_rope_fwd.v")}},
    {.setup = kv_setup_gather, .run = kv_run_gather, .tol = TOL_PREC, .unaligned = KV_UNALIGNED,
     .out = {OUT(KV_DKV, "kv_gather_rope_bwd")}},
};
static const Group G_KV = {{"kv_split_rope", "kv_gather_rope"}, kv_open, CASES(KV_CASES)};

// ---- elementwise: p = n ----
enum { EW_A, EW_B, EW_H, EW_DA, EW_DB };
static void ew_open(Ctx *c) {
    const int64_t n = c->p[0];
    snprintf(c->shape, sizeof c->shape, "n%lld", (long long)n);
    for (int s = EW_A; s <= EW_DB; s++) c->t[s] = tp_new(n, 1);
}
static void ew_setup_swiglu(Ctx *c) {
    tp_rand(&c->t[EW_A], 4.0, 0);
    tp_rand(&c->t[EW_B], 2.0, 0);
    tp_poison(&c->t[EW_H]);
}
static void ew_setup_swiglu_bwd(Ctx *c) {
    tp_rand(&c->t[EW_H], 1.0, 0);
    tp_poison(&c->t[EW_DA]);
    tp_poison(&c->t[EW_DB]);
}
static void ew_poison_h(Ctx *c) { tp_poison(&c->t[EW_H]); }
static void ew_rand_h(Ctx *c) { tp_rand(&c->t[EW_H], 1.0, 0); }
static void ew_swiglu_fwd(Ctx *c, const Backend *be, int gpu) { be->swiglu_fwd(S(EW_H), S(EW_A), S(EW_B), c->p[0]); }
static void ew_swiglu_bwd(Ctx *c, const Backend *be, int gpu) {
    be->swiglu_bwd(S(EW_DA), S(EW_DB), S(EW_H), S(EW_A), S(EW_B), c->p[0]);
}
static void ew_silu_fwd(Ctx *c, const Backend *be, int gpu) { be->silu_fwd(S(EW_H), S(EW_A), c->p[0]); }
// in place, as the model calls it
static void ew_silu_bwd(Ctx *c, const Backend *be, int gpu) { be->silu_bwd(S(EW_H), S(EW_H), S(EW_A), c->p[0]); }
static void ew_add(Ctx *c, const Backend *be, int gpu) { be->add(S(EW_H), S(EW_A), S(EW_B), c->p[0]); }
static void ew_add_inplace(Ctx *c, const Backend *be, int gpu) { be->add_inplace(S(EW_H), S(EW_A), c->p[0]); }
static const OpCase ELEMENTWISE_CASES[] = {
    {.setup = ew_setup_swiglu, .run = ew_swiglu_fwd, .tol = TOL_PREC, .out = {OUT(EW_H, "elementwise.swiglu_fwd")}},
    {.setup = ew_setup_swiglu_bwd, .run = ew_swiglu_bwd, .tol = TOL_PREC,
     .out = {OUT(EW_DA, "elementwise.swiglu_bwd.da"), OUT(EW_DB, "elementwise.swiglu_bwd.db")}},
    {.setup = ew_poison_h, .run = ew_silu_fwd, .tol = TOL_PREC, .out = {OUT(EW_H, "elementwise.silu_fwd")}},
    {.setup = ew_rand_h, .run = ew_silu_bwd, .tol = TOL_PREC, .out = {OUT(EW_H, "elementwise.silu_bwd(inplace)")}},
    {.setup = ew_poison_h, .run = ew_add, .tol = TOL_PREC, .out = {OUT(EW_H, "elementwise.add")}},
    {.run = ew_add_inplace, .tol = TOL_PREC, .out = {OUT(EW_H, "elementwise.add_inplace")}},
};
static const Group G_ELEMENTWISE = {{"elementwise", NULL}, ew_open, CASES(ELEMENTWISE_CASES)};

// ---- xent: p = N V (row 1's target is -1: ignored) ----
enum { XE_LG, XE_DL, XE_LOSS };
static void xe_open(Ctx *c) {
    const int N = c->p[0], V = c->p[1];
    snprintf(c->shape, sizeof c->shape, "N%d V%d (row 1 ignored)", N, V);
    c->t[XE_LG] = tp_new((int64_t)N * V, 1);
    c->t[XE_DL] = tp_new((int64_t)N * V, 1);
    c->t[XE_LOSS] = tp_new(N, 1);
    ctx_ints(c, N);
}
static void xe_setup(Ctx *c) {
    const int N = c->p[0], V = c->p[1];
    for (int i = 0; i < N; i++) c->ih[i] = (int32_t)(urand() * V) % V;
    if (N > 1) c->ih[1] = -1;
    ctx_ints_upload(c);
    tp_rand(&c->t[XE_LG], 6.0, 0);
    tp_poison(&c->t[XE_DL]);
    tp_poison(&c->t[XE_LOSS]);
}
static void xe_poison_loss(Ctx *c) { tp_poison(&c->t[XE_LOSS]); }
static void xe_run(Ctx *c, const Backend *be, int gpu) {
    const int N = c->p[0];
    be->xent_fwd_bwd(S(XE_LOSS), S(XE_DL), S(XE_LG), SI, N, c->p[1], 1.0 / N);
}
static void xe_run_fwd_only(Ctx *c, const Backend *be, int gpu) {
    const int N = c->p[0];
    be->xent_fwd_bwd(S(XE_LOSS), NULL, S(XE_LG), SI, N, c->p[1], 1.0 / N);
}
static void xe_run_in_place(Ctx *c, const Backend *be, int gpu) {
    const int N = c->p[0];
    be->xent_fwd_bwd(S(XE_LOSS), S(XE_LG), S(XE_LG), SI, N, c->p[1], 1.0 / N);
}
#define XE_UNALIGNED (1u << XE_LG | 1u << XE_DL | 1u << XE_LOSS)
static const OpCase XENT_CASES[] = {
    {.setup = xe_setup, .run = xe_run, .tol = TOL_PREC, .unaligned = XE_UNALIGNED,
     .out = {OUT(XE_LOSS, "xent.losses"), OUT(XE_DL, "xent.dlogits")}},
    {.setup = xe_poison_loss, .run = xe_run_fwd_only, .tol = TOL_PREC, .unaligned = XE_UNALIGNED,
     .out = {OUT(XE_LOSS, "xent.losses(fwd only)")}},
    {.run = xe_run_in_place, .tol = TOL_PREC, .unaligned = XE_UNALIGNED, .out = {OUT(XE_LG, "xent.dlogits(in place)")}},
};
static const Group G_XENT = {{"xent", NULL}, xe_open, CASES(XENT_CASES)};

// ---- parameter-buffer ops: p = n ----
enum { PO_X, PO_G, PO_M, PO_V, PO_A };
static void po_open(Ctx *c) {
    const int64_t n = c->p[0];
    snprintf(c->shape, sizeof c->shape, "n%lld", (long long)n);
    for (int s = PO_X; s <= PO_V; s++) c->t[s] = tp_new(n, 0);
    c->t[PO_A] = tp_new(n, 1);
    c->h = malloc(sizeof(double) * (size_t)n);
}
static void po_rand_x(Ctx *c) { tp_rand(&c->t[PO_X], 1.0, 0); }
static double po_sumsq_err(Ctx *c, char *shape, size_t n) {   // fp64 accumulation on both
    (void)shape; (void)n;
    const TP *x = &c->t[PO_X];
    double sc = CPU->sumsq_param(x->c, x->n), sg = GPU->sumsq_param(x->g, x->n);
    return fabs(sg - sc) / sc;
}
// sumsq_params (CUDA): each segment bit for bit as the GPU's sumsq_param of it, empty ones
// in the middle and at the end
static double po_sumsq_many_err(Ctx *c, char *shape, size_t sn) {
    (void)shape; (void)sn;
    const TP *x = &c->t[PO_X];
    const int64_t n = x->n, off[5] = {0, 7, 7, n / 3, n}, len[5] = {7, 0, n / 3 - 7, n - n / 3, 0};
    double out[5];
    GPU->sumsq_params(x->g, off, len, 5, out);
    for (int k = 0; k < 5; k++)
        if (!(out[k] == GPU->sumsq_param((const float *)x->g + off[k], len[k]))) return INFINITY;
    return 0;
}
static void po_scale(Ctx *c, const Backend *be, int gpu) { be->scale_param(S(PO_X), 0.37, c->p[0]); }
static void po_setup_adamw(Ctx *c) {
    const int64_t n = c->p[0];
    tp_rand(&c->t[PO_G], 1.0, 0);
    tp_rand(&c->t[PO_M], 0.1, 0);
    fill_rand(c->h, n, 0.1);
    for (int64_t i = 0; i < n; i++) c->h[i] = c->h[i] * c->h[i];   // v >= 0
    tp_set(&c->t[PO_V], c->h, 0);
}
static void po_adamw(Ctx *c, const Backend *be, int gpu) {
    be->adamw(S(PO_X), S(PO_G), S(PO_M), S(PO_V), c->p[0], 3e-3, 0.9, 0.95, 0.19, 0.0975, 1e-8, 0.1);
}
// adamw (CUDA) over [0, n) (16-byte quads from element 0) against the same state updated as
// [0, 1) and [1, n - 1) (3 single elements, quads, a single tail): bit for bit, so the quad and
// single-element paths do the same arithmetic
static double po_adamw_quads_err(Ctx *c, char *shape, size_t sn) {
    (void)shape; (void)sn;
    const int64_t n = c->p[0];
    double *st = malloc(sizeof(double) * (size_t)n * 7);
    for (int s = PO_X; s <= PO_V; s++) GPU->param_to_f64(st + s * n, c->t[s].g, n);
    GPU->adamw(c->t[PO_X].g, c->t[PO_G].g, c->t[PO_M].g, c->t[PO_V].g, n, 3e-3, 0.9, 0.95, 0.19, 0.0975, 1e-8, 0.1);
    for (int s = 0; s < 3; s++) GPU->param_to_f64(st + (4 + s) * n, c->t[s == 0 ? PO_X : s == 1 ? PO_M : PO_V].g, n);
    for (int s = PO_X; s <= PO_V; s++) GPU->param_from_f64(c->t[s].g, st + s * n, n);
    const int64_t cut[3] = {0, 1, n - 1};
    for (int k = 0; k < 2; k++) {
        float *x = (float *)c->t[PO_X].g + cut[k], *g = (float *)c->t[PO_G].g + cut[k];
        float *m = (float *)c->t[PO_M].g + cut[k], *v = (float *)c->t[PO_V].g + cut[k];
        GPU->adamw(x, g, m, v, cut[k + 1] - cut[k], 3e-3, 0.9, 0.95, 0.19, 0.0975, 1e-8, 0.1);
    }
    double err = 0;
    for (int s = 0; s < 3; s++) {
        GPU->param_to_f64(c->h, c->t[s == 0 ? PO_X : s == 1 ? PO_M : PO_V].g, n);
        for (int64_t i = 0; i < n - 1; i++)
            if (!(c->h[i] == st[(4 + s) * n + i])) err = INFINITY;
    }
    free(st);
    return err;
}
// adamw_runs (CUDA): runs of one launch (a tiny misaligned run of single elements, an empty
// one, runs with a head, quads over several blocks and a tail, each its own weight decay)
// bit for bit as one adamw call per run; elements outside every run untouched
static double po_adamw_runs_err(Ctx *c, char *shape, size_t sn) {
    (void)shape; (void)sn;
    const int64_t n = c->p[0];
    const int64_t off[4] = {1, 3, 3, n / 2}, len[4] = {2, 0, n / 4, n / 2 - 1};
    const double wd[4] = {0.1, 0.5, 0.0, 0.2};
    double *st = malloc(sizeof(double) * (size_t)n * 7);
    for (int s = PO_X; s <= PO_V; s++) GPU->param_to_f64(st + s * n, c->t[s].g, n);
    GPU->adamw_runs(c->t[PO_X].g, c->t[PO_G].g, c->t[PO_M].g, c->t[PO_V].g, off, len, wd, 4, 3e-3, 0.9, 0.95, 0.19, 0.0975, 1e-8);
    for (int s = 0; s < 3; s++) GPU->param_to_f64(st + (4 + s) * n, c->t[s == 0 ? PO_X : s == 1 ? PO_M : PO_V].g, n);
    for (int s = PO_X; s <= PO_V; s++) GPU->param_from_f64(c->t[s].g, st + s * n, n);
    for (int r = 0; r < 4; r++) {
        float *x = (float *)c->t[PO_X].g + off[r], *g = (float *)c->t[PO_G].g + off[r];
        float *m = (float *)c->t[PO_M].g + off[r], *v = (float *)c->t[PO_V].g + off[r];
        GPU->adamw(x, g, m, v, len[r], 3e-3, 0.9, 0.95, 0.19, 0.0975, 1e-8, wd[r]);
    }
    double err = 0;
    for (int s = 0; s < 3; s++) {
        GPU->param_to_f64(c->h, c->t[s == 0 ? PO_X : s == 1 ? PO_M : PO_V].g, n);
        for (int64_t i = 0; i < n; i++) {
            if (!(c->h[i] == st[(4 + s) * n + i])) err = INFINITY;
            const int in = (i >= 1 && i < 3 + n / 4) || (i >= n / 2 && i < n - 1);
            if (!in && !(c->h[i] == st[(s == 0 ? PO_X : s == 1 ? PO_M : PO_V) * n + i])) err = INFINITY;
        }
    }
    free(st);
    return err;
}
// first non-finite (CUDA only): an inf at n/2 and a NaN at n-3, then none
static double po_nonfinite_param(Ctx *c, char *shape, size_t sn) {
    (void)shape; (void)sn;
    const int64_t n = c->p[0];
    for (int64_t i = 0; i < n; i++) c->h[i] = 1.0;
    c->h[n / 2] = INFINITY;
    c->h[n - 3] = NAN;
    GPU->param_from_f64(c->t[PO_X].g, c->h, n);
    return GPU->first_nonfinite_param(c->t[PO_X].g, n) == n / 2 ? 0 : INFINITY;
}
static double po_nonfinite_act(Ctx *c, char *shape, size_t sn) {
    (void)shape; (void)sn;
    const int64_t n = c->p[0];
    GPU->act_from_f64(c->t[PO_A].g, c->h, n);
    return GPU->first_nonfinite_act(c->t[PO_A].g, n) == n / 2 ? 0 : INFINITY;
}
static double po_nonfinite_none(Ctx *c, char *shape, size_t sn) {
    (void)shape; (void)sn;
    const int64_t n = c->p[0];
    for (int64_t i = 0; i < n; i++) c->h[i] = 1.0;
    GPU->act_from_f64(c->t[PO_A].g, c->h, n);
    return GPU->first_nonfinite_act(c->t[PO_A].g, n) == -1 ? 0 : INFINITY;
}
static const OpCase PARAM_CASES[] = {
    {.setup = po_rand_x, .err = po_sumsq_err, .name = "sumsq_param", .tol = 1e-12},
    {.setup = po_rand_x, .err = po_sumsq_many_err, .name = "sumsq_params", .tol = 0},
    {.run = po_scale, .tol = 0.0 + 1e-12, .out = {OUT(PO_X, "scale_param")}},
    {.setup = po_setup_adamw, .run = po_adamw, .tol = 1e-6,   // fp64 math on both, one rounding
     .out = {OUT(PO_X, "adamw.p"), OUT(PO_M, "adamw.m"), OUT(PO_V, "adamw.v")}},
    {.setup = po_setup_adamw, .err = po_adamw_quads_err, .name = "adamw(quads = singles)", .tol = 0},
    {.setup = po_setup_adamw, .err = po_adamw_runs_err, .name = "adamw_runs = adamw per run", .tol = 0},
    {.err = po_nonfinite_param, .name = "first_nonfinite_param", .tol = 0},
    {.err = po_nonfinite_act, .name = "first_nonfinite_act", .tol = 0},
    {.err = po_nonfinite_none, .name = "first_nonfinite_act(none)", .tol = 0},
};
static const Group G_PARAM = {{"param", NULL}, po_open, CASES(PARAM_CASES)};

// ---- gate activation and combine: p = N H G D ----
enum { GC_LG, GC_GATE, GC_DG, GC_DL, GC_OB0, GC_OB1, GC_OB2, GC_DOB0, GC_DOB1, GC_DOB2, GC_O, GC_DOUT };
static void gc_open(Ctx *c) {
    const int64_t N = c->p[0], H = c->p[1], G = c->p[2], D = c->p[3];
    snprintf(c->shape, sizeof c->shape, "N%lld H%d G%d D%d", (long long)N, c->p[1], c->p[2], c->p[3]);
    const int64_t NG = N * G, NO = N * H * D;
    for (int s = GC_LG; s <= GC_DL; s++) c->t[s] = tp_new(NG * 3, 1);
    for (int s = GC_OB0; s <= GC_DOUT; s++) c->t[s] = tp_new(NO, 1);
}
// arg: 0 softmax, 1 sigmoid
static void gc_setup_act(Ctx *c) {
    tp_rand(&c->t[GC_LG], 3.0, 0);
    tp_poison(&c->t[GC_GATE]);
}
static void gc_act_fwd(Ctx *c, const Backend *be, int gpu) {
    be->gate_act_fwd(S(GC_GATE), S(GC_LG), (int64_t)c->p[0] * c->p[2], g_case->arg);
}
static void gc_setup_act_bwd(Ctx *c) {
    tp_sync_from_cpu(&c->t[GC_GATE]);
    tp_rand(&c->t[GC_DG], 1.0, 0);
    tp_poison(&c->t[GC_DL]);
}
static void gc_act_bwd(Ctx *c, const Backend *be, int gpu) {
    be->gate_act_bwd(S(GC_DL), S(GC_DG), S(GC_GATE), (int64_t)c->p[0] * c->p[2], g_case->arg);
}
static void gc_setup_combine(Ctx *c) {
    for (int b = 0; b < 3; b++) tp_rand(&c->t[GC_OB0 + b], 1.0, 0);
    tp_poison(&c->t[GC_O]);
}
static void gc_combine(Ctx *c, const Backend *be, int gpu) {
    be->combine_fwd(S(GC_O), S(GC_GATE), S(GC_OB0), S(GC_OB1), S(GC_OB2), c->p[0], c->p[1], c->p[2], c->p[3]);
}
static void gc_poison_o(Ctx *c) { tp_poison(&c->t[GC_O]); }
static void gc_combine_one_hot(Ctx *c, const Backend *be, int gpu) {
    be->combine_fwd(S(GC_O), NULL, NULL, S(GC_OB1), NULL, c->p[0], c->p[1], c->p[2], c->p[3]);
}
static void gc_setup_combine_bwd(Ctx *c) {
    tp_rand(&c->t[GC_DOUT], 1.0, 0);
    for (int b = 0; b < 3; b++) tp_poison(&c->t[GC_DOB0 + b]);
    tp_poison(&c->t[GC_DG]);
}
static void gc_combine_bwd(Ctx *c, const Backend *be, int gpu) {
    be->combine_bwd(S(GC_DOB0), S(GC_DOB1), S(GC_DOB2), S(GC_DG), S(GC_DOUT), S(GC_GATE), S(GC_OB0), S(GC_OB1),
                    S(GC_OB2), c->p[0], c->p[1], c->p[2], c->p[3]);
}
#define GC_UNALIGNED 0xffffu   // every slot
static const OpCase GATE_COMBINE_CASES[] = {
    {.setup = gc_setup_act, .run = gc_act_fwd, .tol = TOL_PREC, .arg = 0, .out = {OUT(GC_GATE, "gate_act(softmax)_fwd")}},
    {.setup = gc_setup_act_bwd, .run = gc_act_bwd, .tol = TOL_PREC, .arg = 0, .out = {OUT(GC_DL, "gate_act(softmax)_bwd")}},
    {.setup = gc_setup_act, .run = gc_act_fwd, .tol = TOL_PREC, .arg = 1, .out = {OUT(GC_GATE, "gate_act(sigmoid)_fwd")}},
    {.setup = gc_setup_act_bwd, .run = gc_act_bwd, .tol = TOL_PREC, .arg = 1, .out = {OUT(GC_DL, "gate_act(sigmoid)_bwd")}},
    {.setup = gc_setup_combine, .run = gc_combine, .tol = TOL_PREC, .unaligned = GC_UNALIGNED, .out = {OUT(GC_O, "combine_fwd")}},
    {.setup = gc_poison_o, .run = gc_combine_one_hot, .tol = TOL_PREC, .unaligned = GC_UNALIGNED,
     .out = {OUT(GC_O, "combine_fwd(one-hot sel)")}},
    {.setup = gc_setup_combine_bwd, .run = gc_combine_bwd, .tol = TOL_PREC, .unaligned = GC_UNALIGNED,
     .out = {OUT(GC_DOB0, "combine_bwd.do_cmp"), OUT(GC_DOB2, "combine_bwd.do_win"), OUT(GC_DG, "combine_bwd.dgate")}},
};
static const Group G_GATE_COMBINE = {{"gate", "combine"}, gc_open, CASES(GATE_COMBINE_CASES)};

// ============================================================================================
// NSA ops
// ============================================================================================
typedef struct {
    int B, T, H, G, D, l, d, lsel, n, w;
} Shape;

static void shape_str(char *s, size_t n, const NsaGeom *g) {
    snprintf(s, n, "B%d T%d H%d G%d D%d l%d d%d l'%d n%d w%d", g->B, g->T, g->H, g->G, g->D, g->l, g->d, g->lsel,
             g->n, g->w);
}

// fp64 Eq. 9 scores of row (b,t,group) from the CPU's inputs, for judging near-ties
static void host_scores(double *score, const double *q, const double *Kc, const double *lse, const NsaGeom *g, int b,
                        int t, int gr) {
    const int hpg = g->H / g->G, cur = t / g->lsel, nv = nsa_cmp_visible(g, t);
    for (int j = 0; j <= cur; j++) score[j] = 0;
    for (int h = 0; h < hpg; h++) {
        int64_t row = ((int64_t)b * g->T + t) * g->H + gr * hpg + h;
        for (int i = 0; i < nv; i++) {
            double dot = 0;
            for (int e = 0; e < g->D; e++)
                dot += q[row * g->D + e] * Kc[(((int64_t)b * g->NC + i) * g->G + gr) * g->D + e];
            double p = exp(g->scale * dot - lse[row]);
            for (int j = 0; j <= cur; j++) score[j] += (double)nsa_overlap_num(g, i, j) / g->d * p;
        }
    }
}

// The NSA group runs once per (precision, implementation, shape): c->impl is the
// implementation (0 simple, 1 mma, 2 mma with one position per selection tile).
enum { NS_Q, NS_K, NS_V, NS_KC, NS_VC, NS_O, NS_LSE, NS_DOUT, NS_DQ, NS_DK, NS_DV, NS_DKC, NS_DVC, NS_X, NS_PE, NS_DPE };
static void nsa_open(Ctx *c) {
    const Shape *s = (const Shape *)c->p;
    NsaGeom *g = &c->g;
    nsa_geom_init(g, s->B, s->T, s->H, s->G, s->D, s->l, s->d, s->lsel, s->n, s->w);
    shape_str(c->shape, sizeof c->shape, g);
    const int64_t NQ = (int64_t)g->B * g->T * g->H * g->D, NK = (int64_t)g->B * g->T * g->G * g->D;
    const int64_t NCK = (int64_t)g->B * g->NC * g->G * g->D, NL = (int64_t)g->B * g->T * g->H;
    const int64_t NX = (int64_t)g->B * g->NC * g->G * g->l * g->D;
    const int64_t NC1 = NCK > 0 ? NCK : 1;
    const int64_t n[NSLOT] = {[NS_Q] = NQ, [NS_K] = NK, [NS_V] = NK, [NS_KC] = NC1, [NS_VC] = NC1, [NS_O] = NQ,
                              [NS_LSE] = NL, [NS_DOUT] = NQ, [NS_DQ] = NQ, [NS_DK] = NK, [NS_DV] = NK,
                              [NS_DKC] = NC1, [NS_DVC] = NC1, [NS_X] = NX, [NS_PE] = (int64_t)g->l * g->D,
                              [NS_DPE] = (int64_t)g->l * g->D};
    for (int i = NS_Q; i <= NS_DPE; i++) c->t[i] = tp_new(n[i], i != NS_PE && i != NS_DPE);
    ctx_ints(c, (int64_t)g->B * g->T * g->G * g->n);   // the selection
}
static void ns_rand_qkv(Ctx *c) {
    tp_rand(&c->t[NS_Q], 1.0, 0);
    tp_rand(&c->t[NS_K], 1.0, 0);
    tp_rand(&c->t[NS_V], 1.0, 0);
}
// ---- layout-only ops: once per precision (impl 0) ----
static void ns_poison_kc(Ctx *c) { tp_poison(&c->t[NS_KC]); }
static void ns_compress_fwd(Ctx *c, const Backend *be, int gpu) { be->compress_avg_fwd(S(NS_KC), S(NS_K), &c->g, 0, c->g.NC); }
static void ns_setup_compress_bwd(Ctx *c) {
    tp_rand(&c->t[NS_DKC], 1.0, 0);
    tp_rand(&c->t[NS_DK], 1.0, 0);
}
static void ns_compress_bwd(Ctx *c, const Backend *be, int gpu) { be->compress_avg_bwd(S(NS_DK), S(NS_DKC), &c->g); }
static void ns_setup_gather(Ctx *c) {
    tp_rand(&c->t[NS_PE], 0.5, 0);
    tp_poison(&c->t[NS_X]);
}
static void ns_gather_fwd(Ctx *c, const Backend *be, int gpu) {
    be->block_gather_fwd(S(NS_X), S(NS_K), S(NS_PE), &c->g, 0, c->g.NC);
}
static void ns_setup_gather_bwd(Ctx *c) {
    tp_rand(&c->t[NS_X], 1.0, 0);
    tp_rand(&c->t[NS_DK], 1.0, 0);
    tp_rand(&c->t[NS_DPE], 1.0, 0);
}
static void ns_gather_bwd(Ctx *c, const Backend *be, int gpu) { be->block_gather_bwd(S(NS_DK), S(NS_DPE), S(NS_X), &c->g); }
// compressed keys for the attention ops: the CPU's compression of k, shared
static void ns_shared_kc(Ctx *c) {
    CPU->compress_avg_fwd(c->t[NS_KC].c, c->t[NS_K].c, &c->g, 0, c->g.NC);
    CPU->compress_avg_fwd(c->t[NS_VC].c, c->t[NS_V].c, &c->g, 0, c->g.NC);
    tp_sync_from_cpu(&c->t[NS_KC]);
    tp_sync_from_cpu(&c->t[NS_VC]);
}
// ---- compressed branch ----
static void ns_poison_o_lse(Ctx *c) {
    tp_poison(&c->t[NS_O]);
    tp_poison(&c->t[NS_LSE]);
}
static void ns_cmp_fwd(Ctx *c, const Backend *be, int gpu) {
    be->cmp_attn_fwd(S(NS_O), S(NS_LSE), S(NS_Q), S(NS_KC), S(NS_VC), &c->g, 0, c->g.T);
}
// reference lse / o of the cmp branch for selection and the backward (CPU values)
static void ns_shared_cmp_o(Ctx *c) {
    CPU->cmp_attn_fwd(c->t[NS_O].c, c->t[NS_LSE].c, c->t[NS_Q].c, c->t[NS_KC].c, c->t[NS_VC].c, &c->g, 0, c->g.T);
    tp_sync_from_cpu(&c->t[NS_O]);
    tp_sync_from_cpu(&c->t[NS_LSE]);
}
static void ns_setup_cmp_bwd(Ctx *c) {
    tp_rand(&c->t[NS_DOUT], 1.0, 0);
    tp_rand(&c->t[NS_DQ], 1.0, 0);
    tp_rand(&c->t[NS_DKC], 1.0, 0);
    tp_rand(&c->t[NS_DVC], 1.0, 0);
}
static void ns_cmp_bwd(Ctx *c, const Backend *be, int gpu) {
    be->cmp_attn_bwd(S(NS_DQ), S(NS_DKC), S(NS_DVC), S(NS_DOUT), S(NS_Q), S(NS_KC), S(NS_VC), S(NS_O), S(NS_LSE), &c->g);
}
// ---- selection ----
// the CPU's selection (outputs poisoned with INT32_MIN on both sides first)
static void ns_cpu_select(Ctx *c) {
    for (int64_t i = 0; i < c->ni; i++) c->ih[i] = INT32_MIN;
    ctx_ints_upload(c);
    CPU->select_blocks(c->ic, c->t[NS_Q].c, c->t[NS_KC].c, c->t[NS_LSE].c, &c->g, 0, c->g.T);
}
// CUDA-core (impl 0) and tensor-core (impl 1) selection against the CPU's: sel_idx must be
// equal except rows with a near-tie (relative score gap <= 1e-4) at the decision boundary
static double ns_select_err(Ctx *c, char *shape, size_t shn) {
    const NsaGeom g = c->g;
    const TP *q = &c->t[NS_Q], *Kc = &c->t[NS_KC], *lse = &c->t[NS_LSE];
    const int32_t *sel_c = c->ic;
    int32_t *sel_h = c->ih;
    const int64_t NQ = q->n, NCK = (int64_t)g.B * g.NC * g.G * g.D, NL = lse->n;
    GPU->select_blocks(c->ig, q->g, Kc->g, lse->g, &g, 0, g.T);
    GPU->to_host(sel_h, c->ig, sizeof(int32_t) * (size_t)c->ni);
    int64_t rows = (int64_t)g.B * g.T * g.G, mism = 0, ties = 0;
    double *qh = malloc(sizeof(double) * (size_t)NQ), *kh = malloc(sizeof(double) * (size_t)(NCK > 0 ? NCK : 1));
    double *lh = malloc(sizeof(double) * (size_t)NL), *score = malloc(sizeof(double) * (size_t)(g.NS + 1));
    CPU->act_to_f64(qh, q->c, NQ);
    if (NCK > 0) CPU->act_to_f64(kh, Kc->c, NCK);
    CPU->act_to_f64(lh, lse->c, NL);
    for (int64_t r = 0; r < rows; r++) {
        if (!memcmp(sel_h + r * g.n, sel_c + r * g.n, sizeof(int32_t) * (size_t)g.n)) continue;
        mism++;
        // near-tie? the score of every block in the symmetric difference must be
        // within 1e-4 (relative) of the score of some block in the other set
        int b = (int)(r / ((int64_t)g.T * g.G)), t = (int)((r / g.G) % g.T), gr = (int)(r % g.G);
        host_scores(score, qh, kh, lh, &g, b, t, gr);
        int ok = 1;
        for (int k = 0; k < g.n; k++) {
            int jg = sel_h[r * g.n + k];
            if (jg < 0 || jg > t / g.lsel) { if (jg != -1 || sel_c[r * g.n + k] != -1) ok = 0; continue; }
            int found = 0;
            for (int k2 = 0; k2 < g.n; k2++) found |= sel_c[r * g.n + k2] == jg;
            if (found) continue;
            int near = 0;
            for (int k2 = 0; k2 < g.n; k2++) {
                int jc = sel_c[r * g.n + k2];
                if (jc >= 0 && fabs(score[jc] - score[jg]) <= 1e-4 * fabs(score[jc])) near = 1;
            }
            if (!near) ok = 0;
        }
        ties += ok;
    }
    free(qh); free(kh); free(lh); free(score);
    // PAD 2 adds each position's heads in the P tile's order, and so does POS (64 positions of one
    // head a tile, where it runs): the same blocks as the P tile without either, row for row, near
    // ties included. Checked: this impl's run (PAD 2, POS as the impl sets it) and PAD 2 without
    // POS, each against PAD 0 without POS.
    int64_t pad_diff = 0;
    if (g_select_pad == 2) {
        int32_t *sel_p = malloc(sizeof(int32_t) * (size_t)c->ni * 2), *sel_2 = sel_p + c->ni;
        nsa_cuda_set_select_pos(0);
        GPU->select_blocks(c->ig, q->g, Kc->g, lse->g, &g, 0, g.T);
        GPU->to_host(sel_2, c->ig, sizeof(int32_t) * (size_t)c->ni);
        nsa_cuda_set_select_pad(0);
        GPU->select_blocks(c->ig, q->g, Kc->g, lse->g, &g, 0, g.T);
        GPU->to_host(sel_p, c->ig, sizeof(int32_t) * (size_t)c->ni);
        nsa_cuda_set_select_pad(2);
        nsa_cuda_set_select_pos(g_select_pos);
        for (int64_t r = 0; r < rows; r++) {
            pad_diff += memcmp(sel_p + r * g.n, sel_h + r * g.n, sizeof(int32_t) * (size_t)g.n) != 0;
            pad_diff += memcmp(sel_p + r * g.n, sel_2 + r * g.n, sizeof(int32_t) * (size_t)g.n) != 0;
        }
        free(sel_p);
    }
    char base[160], padn[48] = "";
    snprintf(base, sizeof base, "%s", shape);
    if (g_select_pad == 2) snprintf(padn, sizeof padn, ", %lld differ from the P tile's", (long long)pad_diff);
    snprintf(shape, shn, "%s (%lld rows, %lld differ, %lld near-ties%s)", base, (long long)rows, (long long)mism,
             (long long)ties, padn);
    return (double)(mism - ties + pad_diff);
}
// the attention ops use the CPU's selection on both sides
static void ns_shared_sel(Ctx *c) { GPU->from_host(c->ig, c->ic, sizeof(int32_t) * (size_t)c->ni); }
static void ns_sel_fwd(Ctx *c, const Backend *be, int gpu) {
    be->sel_attn_fwd(S(NS_O), S(NS_LSE), S(NS_Q), S(NS_K), S(NS_V), SI, &c->g, 0, c->g.T);
}
// sel_attn_fwd (CUDA) with NaN keys and values at the last position T - 1: every row of an
// earlier tile keeps its bits (a key after a tile's last position is zeroed, not just masked,
// so it cannot reach a row even as 0 * NaN). A tile of two positions (impls mma / mma-sync,
// heads per group <= 8) holds T - 2 and T - 1 when T is even: there row T - 2 shares the
// products with key T - 1 and takes its NaN through 0 * NaN, as every tiled attention kernel
// does for the keys its tile loads (docs/cuda.md), so that row is not judged.
static double ns_sel_nan_err(Ctx *c, char *shape, size_t shn) {
    (void)shape; (void)shn;
    const int gpu = 1;
    const NsaGeom g = c->g;
    // rows [0, tend) are judged: those of tiles before the last position's (its tile's rows
    // share their products with its keys, and take NaN as 0 x NaN)
    const int ptile = gpu && c->impl >= 1 ? nsa_cuda_sel_tile_positions(g_dt, &g) : 1;
    const int tend = (g.T - 1) / ptile * ptile;
    const TP *k = &c->t[NS_K], *v = &c->t[NS_V], *o = &c->t[NS_O];
    double *kv = malloc(sizeof(double) * (size_t)(2 * k->n + 2 * o->n));
    double *vv = kv + k->n, *o0 = vv + k->n, *o1 = o0 + o->n;
    GPU->act_to_f64(kv, k->g, k->n);
    GPU->act_to_f64(vv, v->g, v->n);
    ns_sel_fwd(c, GPU, 1);
    GPU->act_to_f64(o0, o->g, o->n);
    double *kn = malloc(sizeof(double) * (size_t)k->n * 2), *vn = kn + k->n;
    memcpy(kn, kv, sizeof(double) * (size_t)k->n);
    memcpy(vn, vv, sizeof(double) * (size_t)k->n);
    for (int b = 0; b < g.B; b++)
        for (int64_t i = 0; i < (int64_t)g.G * g.D; i++) {
            const int64_t e = ((int64_t)b * g.T + g.T - 1) * g.G * g.D + i;
            kn[e] = vn[e] = NAN;
        }
    GPU->act_from_f64(k->g, kn, k->n);
    GPU->act_from_f64(v->g, vn, v->n);
    GPU->sel_attn_fwd(S(NS_O), S(NS_LSE), S(NS_Q), S(NS_K), S(NS_V), SI, &c->g, 0, c->g.T);
    GPU->act_to_f64(o1, o->g, o->n);
    GPU->act_from_f64(k->g, kv, k->n);   // the inputs back for the cases after this one
    GPU->act_from_f64(v->g, vv, v->n);
    double err = 0;
    for (int b = 0; b < g.B; b++)
        for (int64_t i = 0; i < (int64_t)tend * g.H * g.D; i++) {
            const int64_t e = (int64_t)b * g.T * g.H * g.D + i;
            if (memcmp(&o0[e], &o1[e], sizeof(double)) != 0) err = INFINITY;
        }
    free(kn);
    free(kv);
    return err;
}
// a backward's inputs: the CPU's forward outputs on both sides, random dO and gradients to add to
static void ns_setup_bwd(Ctx *c) {
    tp_sync_from_cpu(&c->t[NS_O]);
    tp_sync_from_cpu(&c->t[NS_LSE]);
    tp_rand(&c->t[NS_DOUT], 1.0, 0);
    tp_rand(&c->t[NS_DQ], 1.0, 0);
    tp_rand(&c->t[NS_DK], 1.0, 0);
    tp_rand(&c->t[NS_DV], 1.0, 0);
}
static void ns_sel_bwd(Ctx *c, const Backend *be, int gpu) {
    be->sel_attn_bwd(S(NS_DQ), S(NS_DK), S(NS_DV), S(NS_DOUT), S(NS_Q), S(NS_K), S(NS_V), S(NS_O), S(NS_LSE), SI, &c->g);
}
static void ns_win_fwd(Ctx *c, const Backend *be, int gpu) {
    be->win_attn_fwd(S(NS_O), S(NS_LSE), S(NS_Q), S(NS_K), S(NS_V), &c->g, 0, c->g.T);
}
static void ns_win_bwd(Ctx *c, const Backend *be, int gpu) {
    be->win_attn_bwd(S(NS_DQ), S(NS_DK), S(NS_DV), S(NS_DOUT), S(NS_Q), S(NS_K), S(NS_V), S(NS_O), S(NS_LSE), &c->g);
}
// Two settings that promise the same bits, from the same inputs (the gradients to add to
// included): the forward's O and lse, the backward's dQ, dK and dV. arg % 3: the branch (0 cmp,
// 1 sel, 2 win); arg / 3: the settings. 0: the warp-specialised kernels' tiles by TMA
// (NSA_CUDA_ROWS_TMA=1: the rows kernels' K/V chunks, NSA_CUDA_DKDV_TMA=1: k_dkdv_ws's Q/dO row
// tiles) against cp.async (both 0): the same tiles in the same order; on impl mma-ws (cmp, win),
// which forces those kernels wherever D is a multiple of 64, and on mma-rows (sel: the rows
// kernels). 1: the 64-key dK/dV kernel's 64-row tiles at D 128 (NSA_CUDA_DKDV_RT64=1) against
// 32 (0): the same rows in the same order through the same k-steps; on impl mma (sel). 2: the
// warp-specialised rows forward's consumers in turns (NSA_CUDA_FWD_PINGPONG=1) against together
// (0): the same products in the same order; on impl mma-ws (cmp, win).
// the impls' own settings of those (main): the TMA tiles everywhere but in mma-ws, the 64-row
// dK/dV tiles everywhere but in mma-tiles, the consumers in turns in mma-tiles (on its 64-key
// chunks, where the default has them off) and not in mma-ws (its 128-key chunks, where the
// default has them on)
static int impl_tma(int impl) { return impl != 7; }
static int impl_dkdv_rt64(int impl) { return impl != 4; }
static int impl_fwd_pingpong(int impl) { return impl == 4 ? 1 : impl == 7 ? 0 : -1; }
static void ns_same_set(int which, int on) {
    if (which == 1) {
        nsa_cuda_set_dkdv_rt64(on);
        return;
    }
    if (which == 2) {
        nsa_cuda_set_fwd_pingpong(on);
        return;
    }
    nsa_cuda_set_rows_tma(on);
    nsa_cuda_set_dkdv_tma(on);
}
static double ns_same_err(Ctx *c, char *shape, size_t shn) {
    (void)shape; (void)shn;
    const int br = g_case->arg % 3, which = g_case->arg / 3;
    const int slots[5] = {NS_O, NS_LSE, NS_DQ, br == 0 ? NS_DKC : NS_DK, br == 0 ? NS_DVC : NS_DV};
    if (br == 0 && c->g.NC <= 0) return 0;
    int64_t n = 0, off[6];
    for (int i = 0; i < 5; i++) off[i] = n, n += c->t[slots[i]].n;
    off[5] = n;
    double *in = malloc(sizeof(double) * (size_t)n * 3), *r[2] = {in + n, in + 2 * n};
    for (int i = 0; i < 5; i++) GPU->act_to_f64(in + off[i], c->t[slots[i]].g, c->t[slots[i]].n);
    for (int pass = 0; pass < 2; pass++) {
        ns_same_set(which, pass == 0);
        if (br == 0) ns_cmp_fwd(c, GPU, 1);
        else if (br == 1) ns_sel_fwd(c, GPU, 1);
        else ns_win_fwd(c, GPU, 1);
        for (int i = 0; i < 2; i++) GPU->act_to_f64(r[pass] + off[i], c->t[slots[i]].g, c->t[slots[i]].n);
        for (int i = 0; i < 5; i++) GPU->act_from_f64(c->t[slots[i]].g, in + off[i], c->t[slots[i]].n);
        if (br == 0) ns_cmp_bwd(c, GPU, 1);
        else if (br == 1) ns_sel_bwd(c, GPU, 1);
        else ns_win_bwd(c, GPU, 1);
        for (int i = 2; i < 5; i++) GPU->act_to_f64(r[pass] + off[i], c->t[slots[i]].g, c->t[slots[i]].n);
        for (int i = 2; i < 5; i++) GPU->act_from_f64(c->t[slots[i]].g, in + off[i], c->t[slots[i]].n);
    }
    // the impl's own settings
    if (which == 2) nsa_cuda_set_fwd_pingpong(impl_fwd_pingpong(c->impl));
    else ns_same_set(which, which == 1 ? impl_dkdv_rt64(c->impl) : impl_tma(c->impl));
    const double err = memcmp(r[0], r[1], sizeof(double) * (size_t)n) ? INFINITY : 0;
    free(in);
    return err;
}
// ---- row-range forwards (sequential prefill's calls): rows [t0, t0+Tn) written, the rest
// untouched; arg: the branch (0 cmp, 1 sel, 2 win) ----
static void ns_rows(const Ctx *c, int *t0, int *Tn) {
    *t0 = c->g.T / 3;
    *Tn = c->g.T / 4 > 0 ? c->g.T / 4 : 1;
}
static void ns_rows_fwd(Ctx *c, const Backend *be, int gpu) {
    int t0, Tn;
    ns_rows(c, &t0, &Tn);
    if (g_case->arg == 0) be->cmp_attn_fwd(S(NS_O), S(NS_LSE), S(NS_Q), S(NS_KC), S(NS_VC), &c->g, t0, Tn);
    else if (g_case->arg == 1) be->sel_attn_fwd(S(NS_O), S(NS_LSE), S(NS_Q), S(NS_K), S(NS_V), SI, &c->g, t0, Tn);
    else be->win_attn_fwd(S(NS_O), S(NS_LSE), S(NS_Q), S(NS_K), S(NS_V), &c->g, t0, Tn);
}
static double ns_rows_err(Ctx *c, char *shape, size_t shn) {
    const NsaGeom g = c->g;
    const TP *o = &c->t[NS_O];
    int t0, Tn;
    ns_rows(c, &t0, &Tn);
    char base[160];
    snprintf(base, sizeof base, "%s", shape);
    snprintf(shape, shn, "%s rows[%d,%d)", base, t0, t0 + Tn);
    double err = 0;
    int untouched = 1;
    double *a = malloc(sizeof(double) * (size_t)o->n);
    GPU->act_to_f64(a, o->g, o->n);
    for (int b = 0; b < g.B; b++) {
        int64_t r0 = ((int64_t)b * g.T + t0) * g.H * g.D;
        double e = tp_err_range(o, r0, (int64_t)Tn * g.H * g.D, NULL);
        err = e > err ? e : err;
        for (int t = 0; t < g.T; t++) {
            if (t >= t0 && t < t0 + Tn) continue;
            if (!isnan(a[((int64_t)b * g.T + t) * g.H * g.D])) untouched = 0;
        }
    }
    free(a);
    return untouched ? err : INFINITY;
}
static const OpCase NSA_CASES[] = {
    {.setup = ns_rand_qkv},
    {.filter = "compress", .only = ONLY_SIMPLE, .setup = ns_poison_kc, .run = ns_compress_fwd, .tol = TOL_PREC,
     .out = {OUT_IF_NC(NS_KC, "compress_avg_fwd")}},
    // the 16-byte kernel on aligned buffers, the scalar one one element in: the same bits
    {.filter = "compress", .only = ONLY_SIMPLE, .setup = ns_setup_compress_bwd, .run = ns_compress_bwd,
     .tol = TOL_PREC, .unaligned = (1u << NS_DK) | (1u << NS_DKC), .out = {OUT(NS_DK, "compress_avg_bwd")}},
    {.filter = "compress", .only = ONLY_SIMPLE | ONLY_NC, .setup = ns_setup_gather, .run = ns_gather_fwd,
     .tol = TOL_PREC, .out = {OUT(NS_X, "block_gather_fwd")}},
    {.filter = "compress", .only = ONLY_SIMPLE | ONLY_NC, .setup = ns_setup_gather_bwd, .run = ns_gather_bwd,
     .tol = TOL_PREC, .out = {OUT(NS_DK, "block_gather_bwd.dk"), OUT(NS_DPE, "block_gather_bwd.dpe")}},
    {.setup = ns_shared_kc},
    {.filter = "cmp_attn", .setup = ns_poison_o_lse, .run = ns_cmp_fwd, .tol = TOL_PREC,
     .out = {OUT(NS_O, "cmp_attn_fwd.o"), OUT(NS_LSE, "cmp_attn_fwd.lse")}},
    {.setup = ns_shared_cmp_o},
    {.filter = "cmp_attn", .setup = ns_setup_cmp_bwd, .run = ns_cmp_bwd, .tol = TOL_PREC,
     .out = {OUT(NS_DQ, "cmp_attn_bwd.dq"), OUT_IF_NC(NS_DKC, "cmp_attn_bwd.dKc"), OUT_IF_NC(NS_DVC, "cmp_attn_bwd.dVc")}},
    {.filter = "cmp_attn", .only = ONLY_WS | ONLY_NC, .setup = ns_setup_cmp_bwd, .err = ns_same_err,
     .name = "cmp_attn(TMA tiles = cp.async)", .tol = 0, .arg = 0},
    {.filter = "cmp_attn", .only = ONLY_WS | ONLY_NC, .setup = ns_setup_cmp_bwd, .err = ns_same_err,
     .name = "cmp_attn(forward consumers in turns = together)", .tol = 0, .arg = 6},
    {.setup = ns_cpu_select},
    {.filter = "select", .only = ONLY_NOT_MMA1, .err = ns_select_err, .name = "select_blocks", .tol = 0},
    {.setup = ns_shared_sel},
    {.filter = "sel_attn", .setup = ns_poison_o_lse, .run = ns_sel_fwd, .tol = TOL_PREC,
     .out = {OUT(NS_O, "sel_attn_fwd.o"), OUT(NS_LSE, "sel_attn_fwd.lse")}},
    {.filter = "sel_attn", .err = ns_sel_nan_err, .name = "sel_attn_fwd(NaN at the last key)", .tol = 0},
    {.filter = "sel_attn", .setup = ns_setup_bwd, .run = ns_sel_bwd, .tol = TOL_PREC,
     .out = {OUT(NS_DQ, "sel_attn_bwd.dq"), OUT(NS_DK, "sel_attn_bwd.dk"), OUT(NS_DV, "sel_attn_bwd.dv")}},
    {.filter = "sel_attn", .only = ONLY_ROWS, .setup = ns_setup_bwd, .err = ns_same_err,
     .name = "sel_attn(TMA tiles = cp.async)", .tol = 0, .arg = 1},
    {.filter = "sel_attn", .only = ONLY_MMA, .setup = ns_setup_bwd, .err = ns_same_err,
     .name = "sel_attn(64-row dK/dV tiles = 32)", .tol = 0, .arg = 4},
    {.filter = "win_attn", .setup = ns_poison_o_lse, .run = ns_win_fwd, .tol = TOL_PREC,
     .out = {OUT(NS_O, "win_attn_fwd.o"), OUT(NS_LSE, "win_attn_fwd.lse")}},
    {.filter = "win_attn", .setup = ns_setup_bwd, .run = ns_win_bwd, .tol = TOL_PREC,
     .out = {OUT(NS_DQ, "win_attn_bwd.dq"), OUT(NS_DK, "win_attn_bwd.dk"), OUT(NS_DV, "win_attn_bwd.dv")}},
    {.filter = "win_attn", .only = ONLY_WS, .setup = ns_setup_bwd, .err = ns_same_err,
     .name = "win_attn(TMA tiles = cp.async)", .tol = 0, .arg = 2},
    {.filter = "win_attn", .only = ONLY_WS, .setup = ns_setup_bwd, .err = ns_same_err,
     .name = "win_attn(forward consumers in turns = together)", .tol = 0, .arg = 8},
    {.filter = "rows", .setup = ns_poison_o_lse, .run = ns_rows_fwd, .err = ns_rows_err, .name = "cmp_attn_fwd(rows)",
     .tol = TOL_PREC, .arg = 0},
    {.filter = "rows", .setup = ns_poison_o_lse, .run = ns_rows_fwd, .err = ns_rows_err, .name = "sel_attn_fwd(rows)",
     .tol = TOL_PREC, .arg = 1},
    {.filter = "rows", .setup = ns_poison_o_lse, .run = ns_rows_fwd, .err = ns_rows_err, .name = "win_attn_fwd(rows)",
     .tol = TOL_PREC, .arg = 2},
};
static const Group G_NSA = {{NULL, NULL}, nsa_open, CASES(NSA_CASES)};

// ============================================================================================
// the runs: each dense group with its parameters, in order, for every precision; then the
// NSA group for every implementation and shape
// ============================================================================================
typedef struct {
    const Group *group;
    int p[6];
    int big;   // left out with --small
} Run;
static const Run RUNS[] = {
    {&G_MATMUL, {64, 96, 80, 80, 96, 1}, 0},
    {&G_MATMUL, {33, 40, 17, 20, 45, 0}, 0},
    {&G_MATMUL, {7, 3, 130, 130, 3, 1}, 0},
    {&G_MATMUL, {512, 768, 768, 768, 768, 0}, 1},
    {&G_MATMUL, {300, 6, 192, 192, 6, 1}, 0},   // the gate MLP's fc2 (N = 3 G: rows of 12 bytes)
    {&G_MATMUL_BWD, {64, 96, 80, 0}, 0},
    {&G_MATMUL_BWD, {300, 7, 33, 1}, 0},
    {&G_MATMUL_BWD, {1000, 6, 192, 0}, 0},    // the gate MLP's fc2 (N = 3 G: rows of 12 bytes)
    {&G_MATMUL_BWD, {1024, 768, 256, 1}, 1},
    {&G_MATMUL_BWD, {1024, 768, 768, 1}, 1},   // the fused K/V projection of m7c_125m (6*G*D = 768), dinp +=
    {&G_WEIGHT_COPY, {0}, 0},
    {&G_EMBEDDING, {200, 48, 17}, 0},
    {&G_EMBEDDING, {64, 20, 1000}, 0},
    {&G_RMSNORM, {37, 768}, 0},
    {&G_RMSNORM, {5, 64}, 0},
    {&G_ROPE, {2, 20, 3, 10, 3, 16}, 0},
    {&G_ROPE, {1, 33, 0, 33, 2, 64}, 0},
    {&G_KV, {2, 20, 2, 16, 0, 40}, 0},        // all rows (batched prefill), tiny-like
    {&G_KV, {2, 20, 3, 64, 27, 1}, 0},        // one row of sequence 1 (sequential prefill)
    {&G_KV, {2, 33, 2, 64, 25, 30}, 0},       // a range across sequences
    {&G_KV, {4, 2048, 2, 64, 0, 8192}, 1},    // m7c_125m at batch 4
    {&G_ELEMENTWISE, {1000}, 0},
    {&G_ELEMENTWISE, {1003}, 0},
    {&G_XENT, {7, 300}, 0},
    {&G_XENT, {5, 4104}, 0},   // bf16/fp16: whole 16-byte vectors, a last tile of 8 elements
    {&G_XENT, {64, 50304}, 1},
    {&G_PARAM, {5000}, 0},
    {&G_PARAM, {1 << 20}, 1},
    {&G_GATE_COMBINE, {37, 12, 2, 64}, 0},
    {&G_GATE_COMBINE, {9, 4, 4, 16}, 0},
    {&G_GATE_COMBINE, {5, 32, 2, 128}, 0},   // 2048 elements a (row, group): 8 chunks of combine_bwd
};
static const Shape SHAPES[] = {
    {2, 64, 4, 2, 16, 8, 4, 16, 4, 32},        // tiny-like, group of 2
    {1, 100, 2, 2, 64, 32, 16, 64, 3, 40},     // group of 1, T not a multiple of l'
    {1, 300, 12, 2, 64, 32, 16, 64, 16, 128},  // m7c heads (group of 6), n > available blocks
    {1, 200, 32, 2, 128, 32, 16, 64, 4, 64},   // group of 16, D 128 (paper-style)
    {2, 20, 4, 1, 16, 32, 16, 64, 4, 8},       // T < l: every compressed row empty
    {1, 150, 6, 2, 64, 16, 8, 32, 5, 24},      // l' = 32, group of 3
    {1, 50, 6, 3, 32, 16, 8, 32, 4, 16},       // D = 32: simple kernels only
    {1, 90, 40, 1, 16, 8, 4, 16, 5, 20},       // group of 40 (> 16 heads per tile)
    {1, 160, 4, 2, 64, 32, 16, 64, 3, 48},     // group of 2: two rows tiles' 64 positions in one selection mask
    {1, 2200, 16, 1, 128, 32, 16, 64, 4, 256}, // D 128, 136 compressed keys: two 128-key chunks, one partial
    {2, 1024, 12, 2, 64, 32, 16, 64, 16, 512}, // m7c geometry at T = 1024
    // 128 selection blocks of 16: the streaming top-n's 64-slot ring wraps and its lists fill
    // over many merges (group of 6: on by default; group of 16: where impls force it)
    {1, 2048, 6, 1, 64, 8, 4, 16, 8, 64},
    {1, 2048, 16, 1, 64, 8, 4, 16, 8, 64},
    {1, 200, 24, 2, 64, 32, 16, 64, 5, 48},    // group of 12: the scoring's heads padded to 16 where asked
    // l' = 96: six 16-key chunks a block, so the cp.async selection kernels' chunk index by
    // division, not by shift; three of 32 for the TMA kernels' cursor
    {1, 600, 16, 1, 128, 32, 16, 96, 5, 96},
    // D 128 at a small size (the sanitizers' --small runs keep it): the D 128 code of the
    // warp-specialised kernels (the forward's overlap and 128-key chunks, the TMA selection dQ);
    // 41 rows tiles of 4 positions, so the last forward CTA's second consumer has none
    {1, 164, 16, 1, 128, 32, 16, 64, 4, 96},
};
#define NSHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))
static int shape_is_big(int si) { return si == 2 || si == 3 || si == 7 || (si >= 9 && si <= 15); }   // the last: small

int main(int argc, char **argv) {
    const char *only_prec = NULL;
    // a line a case, even into a file: a run cut short (a hang under a sanitizer, a timeout)
    // shows the last case that finished
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--small")) g_small = 1;
        else if (!strcmp(argv[i], "--prec") && i + 1 < argc) only_prec = argv[++i];
        else if (!strcmp(argv[i], "--filter") && i + 1 < argc) g_filter = argv[++i];
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc) g_csv = fopen(argv[++i], "w");
    }
    const char *why = NULL;
    if (!nsa_cuda_init(&why)) {
        printf("SKIP: %s\n", why ? why : "no usable CUDA device");
        return 77;
    }
    CPU = backend_get("cpu", NULL, NULL);
    const char *precs[3] = {"fp32", "bf16", "fp16"};
    const double tols[3] = {1e-5, 2e-2, 5e-3};
    printf("%-28s %-44s %-12s %10s %8s  %s\n", "op", "shape", "dtype", "err", "tol", "result");
    for (int p = 0; p < 3; p++) {
        if (only_prec && strcmp(only_prec, precs[p])) continue;
        GPU = backend_get("cuda", precs[p], &why);
        if (!GPU) {
            printf("SKIP: cuda %s: %s\n", precs[p], why);
            return 77;
        }
        g_tol = tols[p];
        g_dt = p == 0 ? NSA_DT_F32 : p == 1 ? NSA_DT_BF16 : NSA_DT_F16;
        char dn[32];
        snprintf(dn, sizeof dn, "%s", precs[p]);
        g_dtname = dn;
        nsa_cuda_set_attn_impl(1);
        for (size_t r = 0; r < sizeof RUNS / sizeof RUNS[0]; r++)
            if (!(g_small && RUNS[r].big)) run_group(RUNS[r].group, RUNS[r].p, 0);
        // impl 0: simple kernels; 1: tensor cores as a run picks them (the selection branch on
        // the rows kernels or on its own tiles by shape, tiles of 2 positions where heads per
        // group <= 8; the warpgroup-MMA kernels where this build and device have them);
        // 2: tensor cores, selection on tiles of one position; 3: tensor cores without the
        // warpgroup-MMA kernels (mma.sync only; run only where those exist); 4: selection on its
        // tiles (never the rows kernels); 5 and 6: selection on the rows kernels wherever they can
        // (l' a multiple of 64), with and without warpgroup MMA; 7 and 8: the window and
        // compressed forward, dK/dV and dQ on the warp-specialised kernels wherever they can (D 64
        // and 128; 7: the selection on the rows kernels wherever it can, its forward and dQ on the
        // warp-specialised ones) and never (k_rows_fwd, the 64-key dK/dV kernel, k_rows_dq), only
        // their cases. Per impl besides (the tables below): the selection's top-n kept as its
        // scoring goes (NSA_CUDA_SELECT_STREAM, the default) or the scan at the end (6, 8); the
        // scoring's heads through the P tile (NSA_CUDA_SELECT_PAD 0), padded with butterfly sums
        // (1) or padded in the P tile's order (2, the default, also checked against 0: the same
        // blocks row for row); the dK/dV row chunks from each key chunk's first row
        // (NSA_CUDA_DKDV_ALIGN 0), at the group's multiples on the warp-specialised kernel (1, the
        // default) or on the 64-key kernel too (2); the scoring on tiles of 64 positions of one
        // head (NSA_CUDA_SELECT_POS 0 in mma-ws, else 1: wherever it can, the test's lengths being
        // short of the default's); the selection's dQ on its TMA kernel by shape
        // (NSA_CUDA_SEL_DQ_TMA -1, the default: 0, 1, 3), with 1 or 2 warps (2; 4, 7) or never (the
        // others) and the TMA feed's stages (NSA_CUDA_SEL_TMA_NST: 4 in 2, 3 in 4 and 7, else the
        // default 2); the warp-specialised dK/dV's row tiles by TMA, the rows kernels' K/V chunks
        // and the scoring's K chunks (NSA_CUDA_DKDV_TMA, NSA_CUDA_ROWS_TMA 0 in 7: every tile by
        // cp.async, else the default 1); the 64-key dK/dV's 64-row tiles at D 128 (NSA_CUDA_DKDV_RT64
        // 0 in 4: 32-row tiles, else the default 1); the warp-specialised rows forward's key chunks
        // at D 128 (NSA_CUDA_FWD_KC128: 128 keys in 7, 64 in 4, else the default) and its consumers
        // in turns (NSA_CUDA_FWD_PINGPONG: on in 4, off in 7, else the default: on the 128-key
        // chunks only)
        static const char *impl_name[9] = {"simple",   "mma",           "mma1",    "mma-sync",  "mma-tiles",
                                           "mma-rows", "mma-sync-rows", "mma-ws",  "mma-no-ws"};
        static const int impl_sel_rows[9] = {-1, -1, 0, -1, 0, 1, 1, 1, -1};
        static const int impl_dkdv_ws[9] = {-1, -1, -1, -1, -1, -1, -1, 1, 0};
        static const int impl_select_stream[9] = {1, 1, 1, 1, 1, 1, 0, 1, 0};
        static const int impl_select_pad[9] = {1, 2, 0, 2, 0, 1, 0, 1, 2};
        static const int impl_select_pos[9] = {1, 1, 1, 1, 1, 1, 1, 0, 1};
        static const int impl_dkdv_align[9] = {1, 1, 0, 2, 0, 1, 1, 1, 2};
        static const int impl_sel_dq_tma[9] = {-1, -1, 1, -1, 2, 0, 0, 2, 0};
        static const int impl_sel_tma_nst[9] = {2, 2, 4, 2, 3, 2, 2, 3, 2};
        static const int impl_fwd_kc128[9] = {-1, -1, -1, -1, 0, -1, -1, 1, -1};
        const int have_wgmma = nsa_cuda_set_wgmma(1);
        for (int impl = 0; impl < 9; impl++) {
            if (impl >= 1 && p == 0) continue;   // fp32 always uses the simple kernels
            if ((impl == 3 || impl == 6 || impl >= 7) && !have_wgmma) continue;
            nsa_cuda_set_attn_impl(impl >= 1 ? 0 : 1);
            nsa_cuda_set_sel_pack(impl != 2);
            nsa_cuda_set_sel_rows(impl_sel_rows[impl]);
            nsa_cuda_set_wgmma(impl != 3 && impl != 6);
            nsa_cuda_set_dkdv_ws(impl_dkdv_ws[impl]);
            nsa_cuda_set_dq_ws(impl_dkdv_ws[impl]);
            nsa_cuda_set_fwd_ws(impl_dkdv_ws[impl]);
            nsa_cuda_set_select_stream(impl_select_stream[impl]);
            g_select_pad = impl_select_pad[impl];
            nsa_cuda_set_select_pad(g_select_pad);
            g_select_pos = impl_select_pos[impl];
            nsa_cuda_set_select_pos(g_select_pos);
            nsa_cuda_set_dkdv_align(impl_dkdv_align[impl]);
            nsa_cuda_set_sel_dq_tma(impl_sel_dq_tma[impl]);
            nsa_cuda_set_sel_tma_nst(impl_sel_tma_nst[impl]);
            nsa_cuda_set_dkdv_tma(impl_tma(impl));
            nsa_cuda_set_rows_tma(impl_tma(impl));
            nsa_cuda_set_dkdv_rt64(impl_dkdv_rt64(impl));
            nsa_cuda_set_fwd_kc128(impl_fwd_kc128[impl]);
            nsa_cuda_set_fwd_pingpong(impl_fwd_pingpong(impl));
            snprintf(dn, sizeof dn, "%s/%s", precs[p], impl_name[impl]);
            for (int si = 0; si < NSHAPES; si++) {
                if (g_small && shape_is_big(si)) continue;
                if (impl >= 1 && SHAPES[si].D == 32) continue;   // not a tensor-core shape
                if (impl == 2 && SHAPES[si].H / SHAPES[si].G > 8) continue;   // no packing there anyway
                if ((impl == 5 || impl == 6) && SHAPES[si].lsel % 64) continue;   // no rows path there
                if (impl >= 7 && SHAPES[si].D % 64) continue;                      // no warp-specialised dK/dV
                run_group(&G_NSA, (const int *)&SHAPES[si], impl);
            }
        }
        nsa_cuda_set_attn_impl(0);
        nsa_cuda_set_sel_pack(1);
        nsa_cuda_set_sel_rows(-1);
        nsa_cuda_set_wgmma(1);
        nsa_cuda_set_dkdv_ws(-1);
        nsa_cuda_set_dq_ws(-1);
        nsa_cuda_set_fwd_ws(-1);
        nsa_cuda_set_select_stream(1);
        g_select_pad = 2;
        nsa_cuda_set_select_pad(2);
        g_select_pos = -1;
        nsa_cuda_set_select_pos(-1);
        nsa_cuda_set_dkdv_align(1);
        nsa_cuda_set_sel_dq_tma(-1);
        nsa_cuda_set_sel_tma_nst(2);
        nsa_cuda_set_dkdv_tma(1);
        nsa_cuda_set_rows_tma(1);
        nsa_cuda_set_dkdv_rt64(1);
        nsa_cuda_set_fwd_kc128(-1);
        nsa_cuda_set_fwd_pingpong(-1);
        printf("warpgroup-MMA (sm_90a) kernels: %s\n", have_wgmma ? "on" : "not in this build or device");
    }
    printf("\n%d checks, %d failed\n", g_rows, g_fail);
    if (g_csv) fclose(g_csv);
    return g_fail ? 1 : 0;
}
