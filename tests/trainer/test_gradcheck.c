// tests/trainer/test_gradcheck.c — every parameter tensor's analytic gradient vs
// central finite differences, in fp64 (backend "cpu64"), on the tiny config.
//
// Variants: phi {avg, mlp} x gate {softmax, sigmoid} x force_branch {none, cmp,
// sel, win}, gradient checkpointing on in half of them (every phi/gate/branch
// value is seen with and without), plus two sequential-prefill variants.
// Per tensor we check the element with the largest |gradient| and 3 random
// elements against the 4-point central difference
//   fd = (8 (L(p+h) - L(p-h)) - (L(p+2h) - L(p-2h))) / 12h,   h = 1e-3,
// whose truncation error is O(h^4) (~1e-12 relative) and rounding error
// ~1e-15/h. (Measured 2026-11-22: at h = 1e-4 rounding noise alone reached
// 1e-5..3e-4 on small elements; at h = 1e-3 with the floors below the worst
// element over all variants is 9.5e-7.)
// rel = |g - fd| / max(|g|, |fd|, 1e-3 * max|g| of the tensor, 1e-4 * max|g| of
// the model): small elements are judged against their tensor's gradient scale,
// and a tensor whose exact gradient is zero against the model's. One such tensor
// exists: blocks.L.attn.cmp_k.fc2.bias (phi=mlp) adds the same vector to every
// compressed key, which shifts all scores of a row equally: softmax and top-n
// are invariant, so its gradient is 0 up to rounding on both sides.
// Threshold: rel < 1e-5 (10x above the worst measured); a wrong backward is off
// by O(1e-1 .. 1). The finite differences are evaluated on a twin
// model without checkpointing (same weights): checkpointing changes backward
// only, and the twin keeps every layer's selections for the flip check below.
// The q and k projections are scaled up x4 so attention is peaked and top-n
// decisions have margins (near-uniform attention at init makes near-ties).
// Top-n selection is piecewise constant: an element whose perturbation changes any
// selection is skipped (counted; at most a few are allowed). Parameters that get
// no gradient by construction (force_branch) must have exactly zero gradient and
// a finite-difference slope of ~0.
// The table printed lists every tensor, its max rel error and samples checked;
// the test fails unless every parameter tensor of the model has been checked in
// at least one variant.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "trainer/model.h"
#include "trainer/rng.h"

#define REL_TOL 1e-5
static double FD_H = 1e-3;   // NSA_GC_H overrides (for studying the error floor)
#define SAMPLES 3

typedef struct {
    char name[96];       // tensor name with the layer replaced by L ("blocks.L.attn.q_proj.weight")
    double max_rel;
    int checked, skipped, zero_ok;
} Row;

static Row g_rows[128];
static int g_nrows;

static Row *row_for(const char *pname) {
    char generic[96];
    // blocks.<n>.rest -> blocks.L.rest, so the table has one row per tensor kind
    if (!strncmp(pname, "blocks.", 7)) {
        const char *rest = strchr(pname + 7, '.');
        snprintf(generic, sizeof generic, "blocks.L%s", rest ? rest : "");
    } else {
        snprintf(generic, sizeof generic, "%s", pname);
    }
    for (int i = 0; i < g_nrows; i++) if (!strcmp(g_rows[i].name, generic)) return &g_rows[i];
    Row *r = &g_rows[g_nrows++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", generic);
    return r;
}

// every concrete parameter name seen in any variant, and whether it was checked
static char g_seen[256][96];
static int g_seen_checked[256], g_nseen;
static void mark_seen(const char *name, int checked) {
    for (int i = 0; i < g_nseen; i++)
        if (!strcmp(g_seen[i], name)) { g_seen_checked[i] |= checked; return; }
    snprintf(g_seen[g_nseen], sizeof g_seen[0], "%s", name);
    g_seen_checked[g_nseen++] = checked;
}

typedef struct { const char *label; const char *sets[8]; int n; } Variant;

// concatenated selections of every layer (to detect a flipped top-n)
static void selections(const Model *m, int32_t *out) {
    int64_t per = (int64_t)m->B * m->T * m->G * m->cfg.n;
    for (int L = 0; L < m->L; L++)
        if (m->acts[L].sel_idx) memcpy(out + L * per, m->acts[L].sel_idx, sizeof(int32_t) * (size_t)per);
}

typedef struct {
    Model *m;                 // the twin used for loss evaluations
    const int32_t *in, *tg;
    double dscale;
    int32_t *sel0, *sel1;     // reference selections, scratch
    int64_t sel_n;
} Fd;

static void set_param(Model *m, int64_t e, double v) {
    m->be->param_from_f64((char *)m->param_mem + e * m->be->param_bytes, &v, 1);
}

// loss with element e set to v; *flip |= any layer's selection differs from sel0
static double loss_with(Fd *f, int64_t e, double v, int *flip) {
    set_param(f->m, e, v);
    double l = model_forward(f->m, f->in, f->tg, f->dscale);
    selections(f->m, f->sel1);
    *flip |= memcmp(f->sel0, f->sel1, sizeof(int32_t) * (size_t)f->sel_n) != 0;
    return l;
}

static double fd_slope(Fd *f, int64_t e, double orig, int *flip) {
    double p1 = loss_with(f, e, orig + FD_H, flip), m1 = loss_with(f, e, orig - FD_H, flip);
    double p2 = loss_with(f, e, orig + 2 * FD_H, flip), m2 = loss_with(f, e, orig - 2 * FD_H, flip);
    set_param(f->m, e, orig);
    return (8 * (p1 - m1) - (p2 - m2)) / (12 * FD_H);
}

static void build(Model *m, const NsaConfig *cfg) {
    char err[512];
    const Backend *be = backend_get("cpu64", NULL, NULL);
    assert_non_null(be);
    assert_int_equal(model_init(m, cfg, be, err, sizeof err), 0);
    assert_int_equal(model_alloc_acts(m, cfg->batch_size, cfg->seq_len, err, sizeof err), 0);
    model_init_weights(m, 1234);
    // sharpen attention: q and every k projection x4
    for (int i = 0; i < m->n_params; i++) {
        const char *n = m->params[i].name;
        if (!strstr(n, "q_proj") && !strstr(n, "k_proj")) continue;
        double *w = model_param_ptr(m, i);
        for (int64_t e = 0; e < m->params[i].numel; e++) w[e] *= 4.0;
    }
}

static double max_abs(const double *x, int64_t n) {
    double mx = 0;
    for (int64_t i = 0; i < n; i++) if (fabs(x[i]) > mx) mx = fabs(x[i]);
    return mx;
}

static void run_variant(const Variant *v, int *failures) {
    NsaConfig cfg, cfg_fd;
    char err[4096];
    const char *sets[16];
    int ns = 0;
    // B=2, T=80: 5 selection blocks of 16 (the last one partial), so rows late in the
    // sequence really choose among candidate blocks; window 32 < T slides.
    sets[ns++] = "train.batch_size=2";
    sets[ns++] = "train.seq_len=80";
    sets[ns++] = "train.backend=\"cpu64\"";
    sets[ns++] = "train.precision=\"fp64\"";
    for (int i = 0; i < v->n; i++) sets[ns++] = v->sets[i];
    int rc = config_load(&cfg, "configs/tiny.json", sets, ns, err, sizeof err);
    if (rc) fprintf(stderr, "%s", err);
    assert_int_equal(rc, 0);
    cfg_fd = cfg;
    cfg_fd.ckpt_begin = cfg_fd.ckpt_end = 0;
    Model m, mf;
    build(&m, &cfg);
    build(&mf, &cfg_fd);
    const Backend *be = m.be;
    const int B = cfg.batch_size, T = cfg.seq_len, N = B * T;
    int32_t *in = malloc(sizeof(int32_t) * N), *tg = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) {
        in[i] = (int32_t)rng_below(7, 1, (uint64_t)i, (uint64_t)cfg.vocab_size);
        tg[i] = (int32_t)rng_below(7, 2, (uint64_t)i, (uint64_t)cfg.vocab_size);
    }
    const double dscale = 1.0 / N;
    model_zero_grad(&m);
    model_forward(&m, in, tg, dscale);
    assert_int_equal(model_backward(&m), 0);
    double *grad = malloc(sizeof(double) * (size_t)m.n_elems);
    double *par = malloc(sizeof(double) * (size_t)m.n_elems);
    be->param_to_f64(grad, m.grad_mem, m.n_elems);
    be->param_to_f64(par, m.param_mem, m.n_elems);
    const double gmodel = max_abs(grad, m.n_elems);
    Fd f = {&mf, in, tg, dscale, NULL, NULL, (int64_t)m.L * B * T * m.G * cfg.n};
    f.sel0 = calloc((size_t)f.sel_n, sizeof(int32_t));
    f.sel1 = calloc((size_t)f.sel_n, sizeof(int32_t));
    model_forward(&mf, in, tg, dscale);
    selections(&mf, f.sel0);
    uint8_t *unused = malloc((size_t)m.n_params);
    model_expected_unused(&m, unused);

    printf("\n[%s]\n  %-44s %12s %8s %s\n", v->label, "tensor", "max rel err", "checked", "note");
    for (int p = 0; p < m.n_params; p++) {
        const ParamInfo *pi = &m.params[p];
        Row *row = row_for(pi->name);
        double max_rel = 0;
        int checked = 0, skipped = 0;
        // elements: the largest |grad| first, then 3 random ones
        int64_t idx[SAMPLES + 1];
        int64_t best = 0;
        for (int64_t e = 1; e < pi->numel; e++)
            if (fabs(grad[pi->offset + e]) > fabs(grad[pi->offset + best])) best = e;
        double gscale = fabs(grad[pi->offset + best]);
        idx[0] = best;
        for (int s = 0; s < SAMPLES; s++)
            idx[s + 1] = (int64_t)rng_below(99, (uint64_t)p, (uint64_t)s, (uint64_t)pi->numel);
        if (unused[p]) {
            // no path to the loss: gradient exactly zero, and the loss does not move
            int flip = 0;
            int64_t e = pi->offset + idx[1];
            double lp = loss_with(&f, e, par[e] + 1e-3, &flip), lm = loss_with(&f, e, par[e] - 1e-3, &flip);
            set_param(&mf, e, par[e]);
            int ok = gscale == 0.0 && lp == lm;
            printf("  %-44s %12s %8s %s\n", pi->name, ok ? "0 (exact)" : "NONZERO", "-", "expected unused");
            if (!ok) (*failures)++;
            row->zero_ok++;
            mark_seen(pi->name, ok);
            continue;
        }
        for (int s = 0; s <= SAMPLES; s++) {
            int64_t e = pi->offset + idx[s];
            int flip = 0;
            double fd = fd_slope(&f, e, par[e], &flip), g = grad[e];
            if (flip) { skipped++; continue; }
            double den = fmax(fmax(fabs(g), fabs(fd)), fmax(1e-3 * gscale, 1e-4 * gmodel));
            double rel = den > 0 ? fabs(g - fd) / den : 0.0;
            if (!(rel <= max_rel)) max_rel = rel;   // NaN propagates
            checked++;
        }
        int ok = checked > 0 && max_rel < REL_TOL;
        printf("  %-44s %12.3e %8d %s\n", pi->name, max_rel, checked,
               skipped ? "(some samples skipped: selection flipped)" : "");
        if (!ok) {
            (*failures)++;
            printf("  ^^^ FAIL: %s\n", checked ? "relative error above 1e-5" : "no sample could be checked");
        }
        if (!(max_rel <= row->max_rel)) row->max_rel = max_rel;
        row->checked += checked;
        row->skipped += skipped;
        mark_seen(pi->name, checked > 0);
    }
    free(f.sel0); free(f.sel1); free(unused); free(grad); free(par); free(in); free(tg);
    model_free(&m);
    model_free(&mf);
}

static void test_gradcheck_all_variants(void **state) {
    (void)state;
    if (getenv("NSA_GC_H")) FD_H = atof(getenv("NSA_GC_H"));
    static const char *phis[2] = {"avg", "mlp"}, *acts[2] = {"softmax", "sigmoid"};
    static const char *fbs[4] = {"none", "cmp", "sel", "win"};
    int failures = 0;
    for (int p = 0; p < 2; p++)
        for (int a = 0; a < 2; a++)
            for (int f = 0; f < 4; f++) {
                Variant v = {0};
                char label[128], s_phi[64], s_act[64], s_fb[64];
                int ck = (p + a + f) % 2;   // each value of each axis appears with and without
                snprintf(label, sizeof label, "phi=%s gate=%s force_branch=%s checkpoint=%s", phis[p], acts[a],
                         fbs[f], ck ? "[0,2)" : "off");
                v.label = label;
                snprintf(s_phi, sizeof s_phi, "nsa.phi=\"%s\"", phis[p]);
                snprintf(s_act, sizeof s_act, "nsa.gate_act=\"%s\"", acts[a]);
                snprintf(s_fb, sizeof s_fb, "nsa.force_branch=\"%s\"", fbs[f]);
                v.sets[v.n++] = s_phi;
                v.sets[v.n++] = s_act;
                v.sets[v.n++] = s_fb;
                if (ck) v.sets[v.n++] = "train.checkpoint_layers=[0,2]";
                run_variant(&v, &failures);
            }
    Variant seq = {"phi=mlp gate=softmax sequential prefill checkpoint=[1,2)",
                   {"nsa.phi=\"mlp\"", "train.prefill=\"sequential\"", "train.checkpoint_layers=[1,2]"}, 3};
    run_variant(&seq, &failures);
    Variant tied = {"tied embeddings", {"model.tie_embeddings=true"}, 1};
    run_variant(&tied, &failures);

    printf("\nSummary over all variants (threshold %.0e):\n  %-40s %12s %8s %8s %8s\n", REL_TOL, "tensor",
           "max rel err", "checked", "skipped", "zero-ok");
    for (int i = 0; i < g_nrows; i++)
        printf("  %-40s %12.3e %8d %8d %8d\n", g_rows[i].name, g_rows[i].max_rel, g_rows[i].checked,
               g_rows[i].skipped, g_rows[i].zero_ok);
    int uncovered = 0;
    for (int i = 0; i < g_nseen; i++)
        if (!g_seen_checked[i]) { printf("  NOT CHECKED: %s\n", g_seen[i]); uncovered++; }
    printf("%d parameter tensors seen, %d uncovered, %d failures\n", g_nseen, uncovered, failures);
    assert_int_equal(uncovered, 0);
    assert_int_equal(failures, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck_all_variants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
