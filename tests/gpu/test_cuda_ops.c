// tests/gpu/test_cuda_ops.c — every op of the CUDA backend against the CPU reference
// backend (ggml test-backend-ops style).
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
static void report_tp(const char *op, const char *shape, const TP *t) { report(op, shape, tp_err(t), g_tol); }

// ============================================================================================
// dense ops
// ============================================================================================
static void test_matmul(int M, int N, int K, int ldi, int ldo, int with_bias) {
    if (!want("matmul")) return;
    char sh[96];
    snprintf(sh, sizeof sh, "M%d N%d K%d ldi%d ldo%d%s", M, N, K, ldi, ldo, with_bias ? " bias" : "");
    TP inp = tp_new((int64_t)M * ldi, 1), w = tp_new((int64_t)N * K, 0), bias = tp_new(N, 0);
    TP out = tp_new((int64_t)M * ldo, 1);
    tp_rand(&inp, 1.0, 0);
    tp_rand(&w, 0.1, 1);
    tp_rand(&bias, 0.5, 1);
    tp_poison(&out);
    CPU->matmul_fwd(out.c, ldo, inp.c, ldi, w.c, with_bias ? bias.c : NULL, M, N, K);
    GPU->matmul_fwd(out.g, ldo, inp.g, ldi, w.g, with_bias ? bias.g : NULL, M, N, K);
    // only the M x N region is defined: compare row by row
    double *a = malloc(sizeof(double) * (size_t)out.n), *b = malloc(sizeof(double) * (size_t)out.n);
    GPU->act_to_f64(a, out.g, out.n);
    CPU->act_to_f64(b, out.c, out.n);
    double num = 0, den = 0;
    int bad = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double x = a[(int64_t)m * ldo + n], y = b[(int64_t)m * ldo + n];
            if (!isfinite(x) || !isfinite(y)) bad = 1;
            num += (x - y) * (x - y);
            den += y * y;
        }
    report("matmul_fwd", sh, bad ? INFINITY : sqrt(num / den), g_tol);
    free(a);
    free(b);
    tp_free(&inp); tp_free(&w); tp_free(&bias); tp_free(&out);
}

static void test_matmul_bwd(int M, int N, int K, int acc) {
    if (!want("matmul")) return;
    char sh[96];
    snprintf(sh, sizeof sh, "M%d N%d K%d dinp%s", M, N, K, acc ? "+=" : "=");
    TP dout = tp_new((int64_t)M * N, 1), inp = tp_new((int64_t)M * K, 1), w = tp_new((int64_t)N * K, 0);
    TP dinp = tp_new((int64_t)M * K, 1), dw = tp_new((int64_t)N * K, 0), db = tp_new(N, 0);
    tp_rand(&dout, 1.0, 0);
    tp_rand(&inp, 1.0, 0);
    tp_rand(&w, 0.1, 1);
    if (acc) tp_rand(&dinp, 1.0, 0);
    else tp_poison(&dinp);
    tp_rand(&dw, 1.0, 0);
    tp_rand(&db, 1.0, 0);
    CPU->matmul_bwd(dinp.c, dw.c, db.c, dout.c, inp.c, w.c, M, N, K, acc);
    GPU->matmul_bwd(dinp.g, dw.g, db.g, dout.g, inp.g, w.g, M, N, K, acc);
    report_tp("matmul_bwd.dinp", sh, &dinp);
    report("matmul_bwd.dw", sh, tp_err(&dw), g_tol);
    report("matmul_bwd.dbias", sh, tp_err(&db), g_tol);
    tp_free(&dout); tp_free(&inp); tp_free(&w); tp_free(&dinp); tp_free(&dw); tp_free(&db);
}

// weights registered through params_changed: the GPU reads its own low-precision copy,
// refreshed by adamw; the result must follow the updated fp32 master weights
static void test_weight_copy(void) {
    if (!want("weight_copy")) return;
    const int M = 40, N = 48, K = 64, P = N * K + 100;
    TP par = tp_new(P, 0), inp = tp_new((int64_t)M * K, 1), out = tp_new((int64_t)M * N, 1);
    TP g = tp_new(P, 0), m = tp_new(P, 0), v = tp_new(P, 0);
    tp_rand(&par, 0.1, 1);
    tp_rand(&inp, 1.0, 0);
    tp_rand(&g, 1.0, 0);
    if (GPU->params_changed) GPU->params_changed(par.g, P);
    void *wc = (char *)par.c + 100 * 4, *wg = (char *)par.g + 100 * 4;
    CPU->matmul_fwd(out.c, N, inp.c, K, wc, NULL, M, N, K);
    GPU->matmul_fwd(out.g, N, inp.g, K, wg, NULL, M, N, K);
    report_tp("weight_copy.matmul", "registered params, offset 100", &out);
    CPU->adamw(par.c, g.c, m.c, v.c, P, 1e-2, 0.9, 0.95, 0.1, 0.05, 1e-8, 0.1);
    GPU->adamw(par.g, g.g, m.g, v.g, P, 1e-2, 0.9, 0.95, 0.1, 0.05, 1e-8, 0.1);
    tp_poison(&out);
    CPU->matmul_fwd(out.c, N, inp.c, K, wc, NULL, M, N, K);
    GPU->matmul_fwd(out.g, N, inp.g, K, wg, NULL, M, N, K);
    report_tp("weight_copy.after_adamw", "copy refreshed by adamw", &out);
    tp_free(&par); tp_free(&inp); tp_free(&out); tp_free(&g); tp_free(&m); tp_free(&v);
}

static void test_embedding(int N, int C, int V) {
    if (!want("embedding")) return;
    char sh[96];
    snprintf(sh, sizeof sh, "N%d C%d V%d", N, C, V);
    TP wte = tp_new((int64_t)V * C, 0), out = tp_new((int64_t)N * C, 1), dout = tp_new((int64_t)N * C, 1);
    TP dwte = tp_new((int64_t)V * C, 0);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)N);
    for (int i = 0; i < N; i++) tok[i] = (int32_t)(urand() * V) % V;
    int32_t *tc = CPU->alloc(sizeof(int32_t) * (size_t)N), *tg = GPU->alloc(sizeof(int32_t) * (size_t)N);
    memcpy(tc, tok, sizeof(int32_t) * (size_t)N);
    GPU->from_host(tg, tok, sizeof(int32_t) * (size_t)N);
    tp_rand(&wte, 1.0, 1);
    tp_poison(&out);
    CPU->embedding_fwd(out.c, tc, wte.c, N, C);
    GPU->embedding_fwd(out.g, tg, wte.g, N, C);
    report_tp("embedding_fwd", sh, &out);
    tp_rand(&dout, 1.0, 0);
    tp_rand(&dwte, 1.0, 0);
    CPU->embedding_bwd(dwte.c, dout.c, tc, N, C);
    GPU->embedding_bwd(dwte.g, dout.g, tg, N, C);
    report_tp("embedding_bwd", sh, &dwte);
    CPU->free(tc); GPU->free(tg); free(tok);
    tp_free(&wte); tp_free(&out); tp_free(&dout); tp_free(&dwte);
}

static void test_rmsnorm(int N, int C) {
    if (!want("rmsnorm")) return;
    char sh[96];
    snprintf(sh, sizeof sh, "N%d C%d", N, C);
    TP x = tp_new((int64_t)N * C, 1), w = tp_new(C, 0), out = tp_new((int64_t)N * C, 1), rstd = tp_new(N, 1);
    TP dout = tp_new((int64_t)N * C, 1), dx = tp_new((int64_t)N * C, 1), dw = tp_new(C, 0);
    tp_rand(&x, 2.0, 0);
    tp_rand(&w, 1.0, 0);
    tp_poison(&out);
    tp_poison(&rstd);
    CPU->rmsnorm_fwd(out.c, rstd.c, x.c, w.c, N, C, 1e-5);
    GPU->rmsnorm_fwd(out.g, rstd.g, x.g, w.g, N, C, 1e-5);
    report_tp("rmsnorm_fwd.out", sh, &out);
    report_tp("rmsnorm_fwd.rstd", sh, &rstd);
    tp_rand(&dout, 1.0, 0);
    tp_rand(&dx, 1.0, 0);
    tp_rand(&dw, 1.0, 0);
    CPU->rmsnorm_bwd(dx.c, dw.c, dout.c, x.c, w.c, rstd.c, N, C);
    GPU->rmsnorm_bwd(dx.g, dw.g, dout.g, x.g, w.g, rstd.g, N, C);
    report_tp("rmsnorm_bwd.dinp", sh, &dx);
    report_tp("rmsnorm_bwd.dw", sh, &dw);
    tp_free(&x); tp_free(&w); tp_free(&out); tp_free(&rstd); tp_free(&dout); tp_free(&dx); tp_free(&dw);
}

static void test_rope(int B, int T, int t0, int Tn, int nh, int D) {
    if (!want("rope")) return;
    char sh[96];
    snprintf(sh, sizeof sh, "B%d T%d rows[%d,%d) nh%d D%d", B, T, t0, t0 + Tn, nh, D);
    TP cs = tp_new((int64_t)T * D, 1), x = tp_new((int64_t)B * T * nh * D, 1);
    tp_poison(&cs);
    CPU->rope_table(cs.c, T, D, 10000.0);
    GPU->rope_table(cs.g, T, D, 10000.0);
    report_tp("rope_table", sh, &cs);
    tp_rand(&x, 1.0, 0);
    CPU->rope_fwd(x.c, cs.c, B, T, t0, Tn, nh, D);
    GPU->rope_fwd(x.g, cs.g, B, T, t0, Tn, nh, D);
    report_tp("rope_fwd", sh, &x);
    tp_rand(&x, 1.0, 0);
    CPU->rope_bwd(x.c, cs.c, B, T, t0, Tn, nh, D);
    GPU->rope_bwd(x.g, cs.g, B, T, t0, Tn, nh, D);
    report_tp("rope_bwd", sh, &x);
    tp_free(&cs); tp_free(&x);
}

static void test_elementwise(int64_t n) {
    if (!want("elementwise")) return;
    char sh[96];
    snprintf(sh, sizeof sh, "n%lld", (long long)n);
    TP a = tp_new(n, 1), b = tp_new(n, 1), h = tp_new(n, 1), da = tp_new(n, 1), db = tp_new(n, 1);
    tp_rand(&a, 4.0, 0);
    tp_rand(&b, 2.0, 0);
    tp_poison(&h);
    CPU->swiglu_fwd(h.c, a.c, b.c, n);
    GPU->swiglu_fwd(h.g, a.g, b.g, n);
    report_tp("elementwise.swiglu_fwd", sh, &h);
    tp_rand(&h, 1.0, 0);
    tp_poison(&da);
    tp_poison(&db);
    CPU->swiglu_bwd(da.c, db.c, h.c, a.c, b.c, n);
    GPU->swiglu_bwd(da.g, db.g, h.g, a.g, b.g, n);
    report_tp("elementwise.swiglu_bwd.da", sh, &da);
    report_tp("elementwise.swiglu_bwd.db", sh, &db);
    tp_poison(&h);
    CPU->silu_fwd(h.c, a.c, n);
    GPU->silu_fwd(h.g, a.g, n);
    report_tp("elementwise.silu_fwd", sh, &h);
    tp_rand(&h, 1.0, 0);
    CPU->silu_bwd(h.c, h.c, a.c, n);   // in place, as the model calls it
    GPU->silu_bwd(h.g, h.g, a.g, n);
    report_tp("elementwise.silu_bwd(inplace)", sh, &h);
    tp_poison(&h);
    CPU->add(h.c, a.c, b.c, n);
    GPU->add(h.g, a.g, b.g, n);
    report_tp("elementwise.add", sh, &h);
    CPU->add_inplace(h.c, a.c, n);
    GPU->add_inplace(h.g, a.g, n);
    report_tp("elementwise.add_inplace", sh, &h);
    tp_free(&a); tp_free(&b); tp_free(&h); tp_free(&da); tp_free(&db);
}

static void test_xent(int N, int V) {
    if (!want("xent")) return;
    char sh[96];
    snprintf(sh, sizeof sh, "N%d V%d (row 1 ignored)", N, V);
    TP lg = tp_new((int64_t)N * V, 1), dl = tp_new((int64_t)N * V, 1), loss = tp_new(N, 1);
    int32_t *tgt = malloc(sizeof(int32_t) * (size_t)N);
    for (int i = 0; i < N; i++) tgt[i] = (int32_t)(urand() * V) % V;
    if (N > 1) tgt[1] = -1;
    int32_t *tc = CPU->alloc(sizeof(int32_t) * (size_t)N), *tg = GPU->alloc(sizeof(int32_t) * (size_t)N);
    memcpy(tc, tgt, sizeof(int32_t) * (size_t)N);
    GPU->from_host(tg, tgt, sizeof(int32_t) * (size_t)N);
    tp_rand(&lg, 6.0, 0);
    tp_poison(&dl);
    tp_poison(&loss);
    CPU->xent_fwd_bwd(loss.c, dl.c, lg.c, tc, N, V, 1.0 / N);
    GPU->xent_fwd_bwd(loss.g, dl.g, lg.g, tg, N, V, 1.0 / N);
    report_tp("xent.losses", sh, &loss);
    report_tp("xent.dlogits", sh, &dl);
    tp_poison(&loss);
    CPU->xent_fwd_bwd(loss.c, NULL, lg.c, tc, N, V, 1.0 / N);
    GPU->xent_fwd_bwd(loss.g, NULL, lg.g, tg, N, V, 1.0 / N);
    report_tp("xent.losses(fwd only)", sh, &loss);
    CPU->xent_fwd_bwd(loss.c, lg.c, lg.c, tc, N, V, 1.0 / N);
    GPU->xent_fwd_bwd(loss.g, lg.g, lg.g, tg, N, V, 1.0 / N);
    report_tp("xent.dlogits(in place)", sh, &lg);
    CPU->free(tc); GPU->free(tg); free(tgt);
    tp_free(&lg); tp_free(&dl); tp_free(&loss);
}

static void test_param_ops(int64_t n) {
    if (!want("param")) return;
    char sh[96];
    snprintf(sh, sizeof sh, "n%lld", (long long)n);
    TP x = tp_new(n, 0), g = tp_new(n, 0), m = tp_new(n, 0), v = tp_new(n, 0);
    tp_rand(&x, 1.0, 0);
    double sc = CPU->sumsq_param(x.c, n), sg = GPU->sumsq_param(x.g, n);
    report("sumsq_param", sh, fabs(sg - sc) / sc, 1e-12);   // fp64 accumulation on both
    CPU->scale_param(x.c, 0.37, n);
    GPU->scale_param(x.g, 0.37, n);
    report("scale_param", sh, tp_err(&x), 0.0 + 1e-12);
    tp_rand(&g, 1.0, 0);
    tp_rand(&m, 0.1, 0);
    double *h = malloc(sizeof(double) * (size_t)n);
    fill_rand(h, n, 0.1);
    for (int64_t i = 0; i < n; i++) h[i] = h[i] * h[i];   // v >= 0
    tp_set(&v, h, 0);
    CPU->adamw(x.c, g.c, m.c, v.c, n, 3e-3, 0.9, 0.95, 0.19, 0.0975, 1e-8, 0.1);
    GPU->adamw(x.g, g.g, m.g, v.g, n, 3e-3, 0.9, 0.95, 0.19, 0.0975, 1e-8, 0.1);
    report("adamw.p", sh, tp_err(&x), 1e-6);   // fp64 math on both, one rounding
    report("adamw.m", sh, tp_err(&m), 1e-6);
    report("adamw.v", sh, tp_err(&v), 1e-6);
    // first non-finite: plant an inf and a NaN
    for (int64_t i = 0; i < n; i++) h[i] = 1.0;
    h[n / 2] = INFINITY;
    h[n - 3] = NAN;
    GPU->param_from_f64(x.g, h, n);
    int64_t f = GPU->first_nonfinite_param(x.g, n);
    report("first_nonfinite_param", sh, f == n / 2 ? 0 : INFINITY, 0);
    TP a = tp_new(n, 1);
    GPU->act_from_f64(a.g, h, n);
    f = GPU->first_nonfinite_act(a.g, n);
    report("first_nonfinite_act", sh, f == n / 2 ? 0 : INFINITY, 0);
    for (int64_t i = 0; i < n; i++) h[i] = 1.0;
    GPU->act_from_f64(a.g, h, n);
    f = GPU->first_nonfinite_act(a.g, n);
    report("first_nonfinite_act(none)", sh, f == -1 ? 0 : INFINITY, 0);
    free(h);
    tp_free(&a); tp_free(&x); tp_free(&g); tp_free(&m); tp_free(&v);
}

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

static void test_nsa(const Shape *s, int impl_mma) {
    NsaGeom g;
    nsa_geom_init(&g, s->B, s->T, s->H, s->G, s->D, s->l, s->d, s->lsel, s->n, s->w);
    char sh[128];
    shape_str(sh, sizeof sh, &g);
    const int64_t NQ = (int64_t)g.B * g.T * g.H * g.D, NK = (int64_t)g.B * g.T * g.G * g.D;
    const int64_t NCK = (int64_t)g.B * g.NC * g.G * g.D, NL = (int64_t)g.B * g.T * g.H;
    const int64_t NX = (int64_t)g.B * g.NC * g.G * g.l * g.D;
    TP q = tp_new(NQ, 1), k = tp_new(NK, 1), v = tp_new(NK, 1), Kc = tp_new(NCK > 0 ? NCK : 1, 1);
    TP Vc = tp_new(NCK > 0 ? NCK : 1, 1), o = tp_new(NQ, 1), lse = tp_new(NL, 1), dout = tp_new(NQ, 1);
    TP dq = tp_new(NQ, 1), dk = tp_new(NK, 1), dv = tp_new(NK, 1), dKc = tp_new(NCK > 0 ? NCK : 1, 1);
    TP dVc = tp_new(NCK > 0 ? NCK : 1, 1);
    const int64_t NSEL = (int64_t)g.B * g.T * g.G * g.n;
    int32_t *sel_c = CPU->alloc(sizeof(int32_t) * (size_t)NSEL), *sel_g = GPU->alloc(sizeof(int32_t) * (size_t)NSEL);
    int32_t *sel_h = malloc(sizeof(int32_t) * (size_t)NSEL);
    tp_rand(&q, 1.0, 0);
    tp_rand(&k, 1.0, 0);
    tp_rand(&v, 1.0, 0);

    if (!impl_mma) {   // layout-only ops: once per precision (impl 0)
        if (want("compress")) {
            tp_poison(&Kc);
            CPU->compress_avg_fwd(Kc.c, k.c, &g, 0, g.NC);
            GPU->compress_avg_fwd(Kc.g, k.g, &g, 0, g.NC);
            if (g.NC > 0) report_tp("compress_avg_fwd", sh, &Kc);
            tp_rand(&dKc, 1.0, 0);
            tp_rand(&dk, 1.0, 0);
            CPU->compress_avg_bwd(dk.c, dKc.c, &g);
            GPU->compress_avg_bwd(dk.g, dKc.g, &g);
            report_tp("compress_avg_bwd", sh, &dk);
            if (g.NC > 0) {
                TP X = tp_new(NX, 1), pe = tp_new((int64_t)g.l * g.D, 0), dpe = tp_new((int64_t)g.l * g.D, 0);
                tp_rand(&pe, 0.5, 0);
                tp_poison(&X);
                CPU->block_gather_fwd(X.c, k.c, pe.c, &g, 0, g.NC);
                GPU->block_gather_fwd(X.g, k.g, pe.g, &g, 0, g.NC);
                report_tp("block_gather_fwd", sh, &X);
                tp_rand(&X, 1.0, 0);
                tp_rand(&dk, 1.0, 0);
                tp_rand(&dpe, 1.0, 0);
                CPU->block_gather_bwd(dk.c, dpe.c, X.c, &g);
                GPU->block_gather_bwd(dk.g, dpe.g, X.g, &g);
                report_tp("block_gather_bwd.dk", sh, &dk);
                report_tp("block_gather_bwd.dpe", sh, &dpe);
                tp_free(&X); tp_free(&pe); tp_free(&dpe);
            }
        }
    }
    // compressed keys for the attention ops: the CPU's compression of k, shared
    CPU->compress_avg_fwd(Kc.c, k.c, &g, 0, g.NC);
    CPU->compress_avg_fwd(Vc.c, v.c, &g, 0, g.NC);
    tp_sync_from_cpu(&Kc);
    tp_sync_from_cpu(&Vc);

    // ---- compressed branch ----
    if (want("cmp_attn")) {
        tp_poison(&o);
        tp_poison(&lse);
        CPU->cmp_attn_fwd(o.c, lse.c, q.c, Kc.c, Vc.c, &g, 0, g.T);
        GPU->cmp_attn_fwd(o.g, lse.g, q.g, Kc.g, Vc.g, &g, 0, g.T);
        report_tp("cmp_attn_fwd.o", sh, &o);
        report_tp("cmp_attn_fwd.lse", sh, &lse);
    }
    // reference lse / o of the cmp branch for selection and the backward (CPU values)
    CPU->cmp_attn_fwd(o.c, lse.c, q.c, Kc.c, Vc.c, &g, 0, g.T);
    tp_sync_from_cpu(&o);
    tp_sync_from_cpu(&lse);
    if (want("cmp_attn")) {
        tp_rand(&dout, 1.0, 0);
        tp_rand(&dq, 1.0, 0);
        tp_rand(&dKc, 1.0, 0);
        tp_rand(&dVc, 1.0, 0);
        CPU->cmp_attn_bwd(dq.c, dKc.c, dVc.c, dout.c, q.c, Kc.c, Vc.c, o.c, lse.c, &g);
        GPU->cmp_attn_bwd(dq.g, dKc.g, dVc.g, dout.g, q.g, Kc.g, Vc.g, o.g, lse.g, &g);
        report_tp("cmp_attn_bwd.dq", sh, &dq);
        if (g.NC > 0) {
            report_tp("cmp_attn_bwd.dKc", sh, &dKc);
            report_tp("cmp_attn_bwd.dVc", sh, &dVc);
        }
    }

    // ---- selection ----
    for (int64_t i = 0; i < NSEL; i++) sel_h[i] = INT32_MIN;
    memcpy(sel_c, sel_h, sizeof(int32_t) * (size_t)NSEL);
    GPU->from_host(sel_g, sel_h, sizeof(int32_t) * (size_t)NSEL);
    CPU->select_blocks(sel_c, q.c, Kc.c, lse.c, &g, 0, g.T);
    if (impl_mma != 2 && want("select")) {   // CUDA-core (impl 0) and tensor-core (impl 1) selection
        GPU->select_blocks(sel_g, q.g, Kc.g, lse.g, &g, 0, g.T);
        GPU->to_host(sel_h, sel_g, sizeof(int32_t) * (size_t)NSEL);
        int64_t rows = (int64_t)g.B * g.T * g.G, mism = 0, ties = 0;
        double *qh = malloc(sizeof(double) * (size_t)NQ), *kh = malloc(sizeof(double) * (size_t)(NCK > 0 ? NCK : 1));
        double *lh = malloc(sizeof(double) * (size_t)NL), *score = malloc(sizeof(double) * (size_t)(g.NS + 1));
        CPU->act_to_f64(qh, q.c, NQ);
        if (NCK > 0) CPU->act_to_f64(kh, Kc.c, NCK);
        CPU->act_to_f64(lh, lse.c, NL);
        for (int64_t r = 0; r < rows; r++) {
            if (!memcmp(sel_h + r * g.n, sel_c + r * g.n, sizeof(int32_t) * (size_t)g.n)) continue;
            mism++;
            // near-tie? the score of every block in the symmetric difference must be
            // within 1e-4 (relative) of the score of some block in the other set
            int b = (int)(r / ((int64_t)g.T * g.G)), t = (int)((r / g.G) % g.T), gr = (int)(r % g.G);
            host_scores(score, qh, kh, lh, &g, b, t, gr);
            int ok = 1;
            for (int c = 0; c < g.n; c++) {
                int jg = sel_h[r * g.n + c];
                if (jg < 0 || jg > t / g.lsel) { if (jg != -1 || sel_c[r * g.n + c] != -1) ok = 0; continue; }
                int found = 0;
                for (int c2 = 0; c2 < g.n; c2++) found |= sel_c[r * g.n + c2] == jg;
                if (found) continue;
                int near = 0;
                for (int c2 = 0; c2 < g.n; c2++) {
                    int jc = sel_c[r * g.n + c2];
                    if (jc >= 0 && fabs(score[jc] - score[jg]) <= 1e-4 * fabs(score[jc])) near = 1;
                }
                if (!near) ok = 0;
            }
            ties += ok;
        }
        free(qh); free(kh); free(lh); free(score);
        char extra[320];
        snprintf(extra, sizeof extra, "%s (%lld rows, %lld differ, %lld near-ties)", sh, (long long)rows, (long long)mism,
                 (long long)ties);
        report("select_blocks", extra, (double)(mism - ties), 0);
    }
    // the attention ops use the CPU's selection on both sides
    GPU->from_host(sel_g, sel_c, sizeof(int32_t) * (size_t)NSEL);

    if (want("sel_attn")) {
        tp_poison(&o);
        tp_poison(&lse);
        CPU->sel_attn_fwd(o.c, lse.c, q.c, k.c, v.c, sel_c, &g, 0, g.T);
        GPU->sel_attn_fwd(o.g, lse.g, q.g, k.g, v.g, sel_g, &g, 0, g.T);
        report_tp("sel_attn_fwd.o", sh, &o);
        report_tp("sel_attn_fwd.lse", sh, &lse);
        tp_sync_from_cpu(&o);
        tp_sync_from_cpu(&lse);
        tp_rand(&dout, 1.0, 0);
        tp_rand(&dq, 1.0, 0);
        tp_rand(&dk, 1.0, 0);
        tp_rand(&dv, 1.0, 0);
        CPU->sel_attn_bwd(dq.c, dk.c, dv.c, dout.c, q.c, k.c, v.c, o.c, lse.c, sel_c, &g);
        GPU->sel_attn_bwd(dq.g, dk.g, dv.g, dout.g, q.g, k.g, v.g, o.g, lse.g, sel_g, &g);
        report_tp("sel_attn_bwd.dq", sh, &dq);
        report_tp("sel_attn_bwd.dk", sh, &dk);
        report_tp("sel_attn_bwd.dv", sh, &dv);
    }
    if (want("win_attn")) {
        tp_poison(&o);
        tp_poison(&lse);
        CPU->win_attn_fwd(o.c, lse.c, q.c, k.c, v.c, &g, 0, g.T);
        GPU->win_attn_fwd(o.g, lse.g, q.g, k.g, v.g, &g, 0, g.T);
        report_tp("win_attn_fwd.o", sh, &o);
        report_tp("win_attn_fwd.lse", sh, &lse);
        tp_sync_from_cpu(&o);
        tp_sync_from_cpu(&lse);
        tp_rand(&dout, 1.0, 0);
        tp_rand(&dq, 1.0, 0);
        tp_rand(&dk, 1.0, 0);
        tp_rand(&dv, 1.0, 0);
        CPU->win_attn_bwd(dq.c, dk.c, dv.c, dout.c, q.c, k.c, v.c, o.c, lse.c, &g);
        GPU->win_attn_bwd(dq.g, dk.g, dv.g, dout.g, q.g, k.g, v.g, o.g, lse.g, &g);
        report_tp("win_attn_bwd.dq", sh, &dq);
        report_tp("win_attn_bwd.dk", sh, &dk);
        report_tp("win_attn_bwd.dv", sh, &dv);
    }
    // row-range forwards (sequential prefill's calls): rows [t0, t0+Tn) written, the rest untouched
    if (want("rows")) {
        int t0 = g.T / 3, Tn = g.T / 4 > 0 ? g.T / 4 : 1;
        char rs[160];
        snprintf(rs, sizeof rs, "%s rows[%d,%d)", sh, t0, t0 + Tn);
        for (int br = 0; br < 3; br++) {
            static const char *nm[3] = {"cmp_attn_fwd(rows)", "sel_attn_fwd(rows)", "win_attn_fwd(rows)"};
            tp_poison(&o);
            tp_poison(&lse);
            if (br == 0) {
                CPU->cmp_attn_fwd(o.c, lse.c, q.c, Kc.c, Vc.c, &g, t0, Tn);
                GPU->cmp_attn_fwd(o.g, lse.g, q.g, Kc.g, Vc.g, &g, t0, Tn);
            } else if (br == 1) {
                CPU->sel_attn_fwd(o.c, lse.c, q.c, k.c, v.c, sel_c, &g, t0, Tn);
                GPU->sel_attn_fwd(o.g, lse.g, q.g, k.g, v.g, sel_g, &g, t0, Tn);
            } else {
                CPU->win_attn_fwd(o.c, lse.c, q.c, k.c, v.c, &g, t0, Tn);
                GPU->win_attn_fwd(o.g, lse.g, q.g, k.g, v.g, &g, t0, Tn);
            }
            double err = 0;
            int untouched = 1;
            double *a = malloc(sizeof(double) * (size_t)NQ);
            GPU->act_to_f64(a, o.g, NQ);
            for (int b = 0; b < g.B; b++) {
                int64_t r0 = ((int64_t)b * g.T + t0) * g.H * g.D;
                double e = tp_err_range(&o, r0, (int64_t)Tn * g.H * g.D, NULL);
                err = e > err ? e : err;
                for (int t = 0; t < g.T; t++) {
                    if (t >= t0 && t < t0 + Tn) continue;
                    if (!isnan(a[((int64_t)b * g.T + t) * g.H * g.D])) untouched = 0;
                }
            }
            free(a);
            report(nm[br], rs, untouched ? err : INFINITY, g_tol);
        }
    }
    CPU->free(sel_c); GPU->free(sel_g); free(sel_h);
    tp_free(&q); tp_free(&k); tp_free(&v); tp_free(&Kc); tp_free(&Vc); tp_free(&o); tp_free(&lse);
    tp_free(&dout); tp_free(&dq); tp_free(&dk); tp_free(&dv); tp_free(&dKc); tp_free(&dVc);
}

static void test_gate_combine(int64_t N, int H, int G, int D) {
    if (!want("gate") && !want("combine")) return;
    char sh[96];
    snprintf(sh, sizeof sh, "N%lld H%d G%d D%d", (long long)N, H, G, D);
    const int64_t NG = N * G, NO = N * H * D;
    TP lg = tp_new(NG * 3, 1), gate = tp_new(NG * 3, 1), dg = tp_new(NG * 3, 1), dl = tp_new(NG * 3, 1);
    TP ob[3] = {tp_new(NO, 1), tp_new(NO, 1), tp_new(NO, 1)}, dob[3] = {tp_new(NO, 1), tp_new(NO, 1), tp_new(NO, 1)};
    TP o = tp_new(NO, 1), dout = tp_new(NO, 1);
    for (int act = 0; act < 2; act++) {
        const char *an = act ? "gate_act(sigmoid)" : "gate_act(softmax)";
        char nm[64];
        tp_rand(&lg, 3.0, 0);
        tp_poison(&gate);
        CPU->gate_act_fwd(gate.c, lg.c, NG, act);
        GPU->gate_act_fwd(gate.g, lg.g, NG, act);
        snprintf(nm, sizeof nm, "%s_fwd", an);
        report_tp(nm, sh, &gate);
        tp_sync_from_cpu(&gate);
        tp_rand(&dg, 1.0, 0);
        tp_poison(&dl);
        CPU->gate_act_bwd(dl.c, dg.c, gate.c, NG, act);
        GPU->gate_act_bwd(dl.g, dg.g, gate.g, NG, act);
        snprintf(nm, sizeof nm, "%s_bwd", an);
        report_tp(nm, sh, &dl);
    }
    for (int b = 0; b < 3; b++) tp_rand(&ob[b], 1.0, 0);
    tp_poison(&o);
    CPU->combine_fwd(o.c, gate.c, ob[0].c, ob[1].c, ob[2].c, N, H, G, D);
    GPU->combine_fwd(o.g, gate.g, ob[0].g, ob[1].g, ob[2].g, N, H, G, D);
    report_tp("combine_fwd", sh, &o);
    tp_poison(&o);
    CPU->combine_fwd(o.c, NULL, NULL, ob[1].c, NULL, N, H, G, D);
    GPU->combine_fwd(o.g, NULL, NULL, ob[1].g, NULL, N, H, G, D);
    report_tp("combine_fwd(one-hot sel)", sh, &o);
    tp_rand(&dout, 1.0, 0);
    for (int b = 0; b < 3; b++) tp_poison(&dob[b]);
    tp_poison(&dg);
    CPU->combine_bwd(dob[0].c, dob[1].c, dob[2].c, dg.c, dout.c, gate.c, ob[0].c, ob[1].c, ob[2].c, N, H, G, D);
    GPU->combine_bwd(dob[0].g, dob[1].g, dob[2].g, dg.g, dout.g, gate.g, ob[0].g, ob[1].g, ob[2].g, N, H, G, D);
    report_tp("combine_bwd.do_cmp", sh, &dob[0]);
    report_tp("combine_bwd.do_win", sh, &dob[2]);
    report_tp("combine_bwd.dgate", sh, &dg);
    for (int b = 0; b < 3; b++) { tp_free(&ob[b]); tp_free(&dob[b]); }
    tp_free(&lg); tp_free(&gate); tp_free(&dg); tp_free(&dl); tp_free(&o); tp_free(&dout);
}

int main(int argc, char **argv) {
    const char *only_prec = NULL;
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
    static const Shape shapes[] = {
        {2, 64, 4, 2, 16, 8, 4, 16, 4, 32},        // tiny-like, group of 2
        {1, 100, 2, 2, 64, 32, 16, 64, 3, 40},     // group of 1, T not a multiple of l'
        {1, 300, 12, 2, 64, 32, 16, 64, 16, 128},  // m7c heads (group of 6), n > available blocks
        {1, 200, 32, 2, 128, 32, 16, 64, 4, 64},   // group of 16, D 128 (paper-style)
        {2, 20, 4, 1, 16, 32, 16, 64, 4, 8},       // T < l: every compressed row empty
        {1, 150, 6, 2, 64, 16, 8, 32, 5, 24},      // l' = 32, group of 3
        {1, 50, 6, 3, 32, 16, 8, 32, 4, 16},       // D = 32: simple kernels only
        {1, 90, 40, 1, 16, 8, 4, 16, 5, 20},       // group of 40 (> 16 heads per tile)
        {2, 1024, 12, 2, 64, 32, 16, 64, 16, 512}, // m7c geometry at T = 1024
    };
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
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
        char dn[32];
        snprintf(dn, sizeof dn, "%s", precs[p]);
        g_dtname = dn;
        nsa_cuda_set_attn_impl(1);
        test_matmul(64, 96, 80, 80, 96, 1);
        test_matmul(33, 40, 17, 20, 45, 0);
        test_matmul(7, 3, 130, 130, 3, 1);
        if (!g_small) test_matmul(512, 768, 768, 768, 768, 0);
        test_matmul_bwd(64, 96, 80, 0);
        test_matmul_bwd(300, 7, 33, 1);
        if (!g_small) test_matmul_bwd(1024, 768, 256, 1);
        test_weight_copy();
        test_embedding(200, 48, 17);
        test_embedding(64, 20, 1000);
        test_rmsnorm(37, 768);
        test_rmsnorm(5, 64);
        test_rope(2, 20, 3, 10, 3, 16);
        test_rope(1, 33, 0, 33, 2, 64);
        test_elementwise(1000);
        test_elementwise(1003);
        test_xent(7, 300);
        if (!g_small) test_xent(64, 50304);
        test_param_ops(5000);
        if (!g_small) test_param_ops(1 << 20);
        test_gate_combine(37, 12, 2, 64);
        test_gate_combine(9, 4, 4, 16);
        // impl 0: simple kernels; 1: tensor cores (selection tiles of 2 positions where
        // heads per group <= 8); 2: tensor cores, one position per selection tile
        for (int impl = 0; impl < 3; impl++) {
            if (impl >= 1 && p == 0) continue;   // fp32 always uses the simple kernels
            nsa_cuda_set_attn_impl(impl >= 1 ? 0 : 1);
            nsa_cuda_set_sel_pack(impl != 2);
            snprintf(dn, sizeof dn, "%s/%s", precs[p], impl == 0 ? "simple" : impl == 1 ? "mma" : "mma1");
            for (int si = 0; si < nshapes; si++) {
                if (g_small && (si == 2 || si == 3 || si == 7 || si == nshapes - 1)) continue;
                if (impl >= 1 && shapes[si].D == 32) continue;   // not a tensor-core shape
                if (impl == 2 && shapes[si].H / shapes[si].G > 8) continue;   // no packing there anyway
                test_nsa(&shapes[si], impl);
            }
        }
        nsa_cuda_set_attn_impl(0);
        nsa_cuda_set_sel_pack(1);
    }
    printf("\n%d checks, %d failed\n", g_rows, g_fail);
    if (g_csv) fclose(g_csv);
    return g_fail ? 1 : 0;
}
