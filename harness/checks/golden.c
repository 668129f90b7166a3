// harness/checks/golden.c — the `golden` check: a case against its baseline
// (docs/regression.md).
//
// The case is summarised by the same builder that records baselines
// (baseline_of_case), and the two summaries are compared:
//   - bitwise when the build fingerprints are the same (same compiler, flags, CPU
//     kernel ISA, libc, GPU model and CUDA/cuBLAS): every loss, grad norm, lr and
//     data digest equal, every dumped tensor's digest equal;
//   - otherwise within stated relative tolerances: `tolerance` for the per-step
//     loss and grad norm, `tensor_tolerance` for each dumped tensor's normwise
//     difference (estimated from its summary, harness/artifacts/tensorstats.h); lr within
//     1e-12, data digests always exact (integers have no tolerance).
// When they part, the finding walks the evidence in the order the code runs and
// names the cause: the initial weights (param digests), the data (a step's token
// digest), the forward (the first differing activation in dataflow order: its layer
// and branch), the backward (forward equal, gradients not: the highest layer with a
// differing gradient, backward runs top down), the LR schedule (lr of a step), or
// the optimizer update (step 1 equal, a later loss not). The differing tensors are
// listed largest first, grouped by layer and part (harness/artifacts/locus.h).
//
// A device with no baseline of its own for the case (an H200 where only an H100 recorded
// one) is compared with the nearest baseline of another device (harness/checks/baseline_lookup.h,
// BaselineMatch): one of the same architecture (compute capability) and the same build but for
// the GPU's model name bitwise first — the same kernels give the same bits — and, where the bits
// part, within the cross-device tolerances: the GEMM library chooses its kernels per GPU model
// (measured, an H200 against an H100's baselines, both sm_90: 8 of the 9 golden cases bitwise
// equal; sequential prefill's step-1 gradients 9e-5 apart, its forward bitwise equal); one of the
// same architecture with another build as `other_build` says; one of another architecture within
// the cross-device tolerances, never bitwise.
// The finding, its evidence, the facts and the regression table name the baseline's device
// and say "nearest".
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/baseline.h"
#include "harness/checks/baseline_lookup.h"
#include "harness/checks/checks.h"
#include "harness/artifacts/locus.h"
#include "harness/exec/runner.h"
#include "harness/artifacts/tensorstats.h"
#include "common/jsonutil.h"

static const char *const GOLDEN_KEYS[] = {"check", "tolerance", "tensor_tolerance", "other_build",
                                          "cross_device_tolerance", "cross_device_tensor_tolerance", NULL};
// Defaults (docs/regression.md says how they were measured): the worst honest
// difference between builds (compilers, -march, FMA) over the golden scenario was
// far below them, a one-token or one-term change far above.
#define GOLDEN_TOL_DEFAULT 1e-4
#define GOLDEN_TTOL_DEFAULT 1e-3
#define LR_TOL 1e-12
// Against a baseline recorded on another architecture (the nearest, when this device has
// none: docs/regression.md): per step and per tensor, "cross_device_tolerance" and
// "cross_device_tensor_tolerance" when the check does not say. The CPU backends: the
// tolerances of another build (another CPU architecture is another compiler's code). cuda:
// above the honest differences measured between kernel variants on one H100 (bf16, 24 steps:
// loss 1.0e-2, a tensor 1.6), so that another architecture's kernels do not fail honest runs;
// at these the curve catches gross changes, and data, LR and initial weights stay exact.
#define CROSS_TOL_CPU 1e-4
#define CROSS_TTOL_CPU 1e-3
#define CROSS_TOL_CUDA 1e-1
#define CROSS_TTOL_CUDA 2.0
// A tensor's difference is relative to max(its norm, NOISE_FLOOR x the norm of a
// tensor of its size and kind if the kind's norm were spread evenly): a gradient
// that is zero in exact arithmetic (the phi=mlp compressor's fc2 bias of the keys:
// softmax is invariant to it) is rounding noise, ~1e-11 in fp32, and must not read
// as a 100 % difference between two compilers (measured: 1.47 without the floor).
#define NOISE_FLOOR 1e-3

// "other_build": what a baseline recorded with another build fingerprint is worth:
// "tolerance" (compare within the tolerances) or "skip" (it cannot judge: SKIP naming
// the re-record command) — a string, or {"ci": ..., "gpu": ...}. Returns 1 for skip,
// 0 for tolerance, -1 for anything else.
static int other_build_skips(const Scenario *s, const json_t *params) {
    const json_t *v = json_object_get(params, "other_build");
    if (json_is_object(v)) v = json_object_get(v, PROFILE_NAMES[s->cur_profile]);
    if (!v) return 0;
    const char *t = json_string_value(v);
    return t && !strcmp(t, "skip") ? 1 : t && !strcmp(t, "tolerance") ? 0 : -1;
}

static void golden_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps) {
    check_only_keys(s, params, jpath, GOLDEN_KEYS, ps);
    if (other_build_skips(s, params) < 0) {
        char kp[256];
        snprintf(kp, sizeof kp, "%s.other_build", jpath);
        scenario_problem(s, ps, kp, 0, "other_build: expected \"tolerance\" or \"skip\" (or per profile {\"ci\": ..., \"gpu\": ...})");
    }
    check_num_param(s, params, jpath, "tolerance", GOLDEN_TOL_DEFAULT, 0, 1, ps);
    check_num_param(s, params, jpath, "tensor_tolerance", GOLDEN_TTOL_DEFAULT, 0, 10, ps);
    check_num_param(s, params, jpath, "cross_device_tolerance", CROSS_TOL_CPU, 0, 1, ps);
    check_num_param(s, params, jpath, "cross_device_tensor_tolerance", CROSS_TTOL_CPU, 0, 10, ps);
}

// ---- the comparison ---------------------------------------------------------------------------

typedef struct {
    const char *name;   // borrowed from the baseline
    double rel;         // estimated normwise relative difference
    Locus loc;
    int order;          // position in the dump (forward dataflow order for acts.*)
} TDiff;

enum { CAUSE_NONE, CAUSE_STEPS, CAUSE_INIT, CAUSE_DATA, CAUSE_FORWARD, CAUSE_BACKWARD, CAUSE_LR, CAUSE_OPTIMIZER,
       CAUSE_GATE };

typedef struct {
    int bitwise;
    int cross;             // against another device's baseline: the cross-device tolerances
    int other_model;       // ... of the same architecture (and build), not bitwise equal
    double tol, ttol;
    // the per-step curve
    int n_steps, n_steps_base, n_common;
    int first_step;        // first step that differs, -1 none: the curve's, or 1 when the
                           // step-1 dump differs (in tolerance mode a forward change can
                           // move the loss less than the tolerance for several steps)
    char first_what[16];   // "data", "lr", "loss", "grad_norm", "dump"
    int curve_first_step;  // first step whose loss, grad norm, lr or data differ, -1 none
    char curve_what[16];
    double first_now, first_base;
    int n_diff_steps;
    double worst_loss_rel;     // over every compared step
    double worst_tensor_rel;   // over every compared tensor (estimates; 0 when all digests agree)
    // the step-1 dump
    int have_dump;
    TDiff *diffs;          // differing tensors, largest first
    int n_diffs, n_compared;
    Str missing;           // baseline tensors absent from the case's dump
    int n_missing;
    const TDiff *first_act;   // first differing forward tensor in dataflow order
    int top_grad_layer;       // highest block with a differing gradient; -1 only outside blocks; -2 none
    int data_differs;         // inputs/targets of the dump differ
    Str param_diffs;          // initial weights that differ
    int n_param_diffs;
    int gate_first_step;      // first step whose gate statistics differ, -1 none
    int cause;
} GoldenDiff;

static int close_rel(double a, double b, double tol) {
    if (a == b) return 1;
    if (tol == 0 || !isfinite(a) || !isfinite(b)) return 0;
    double m = fmax(fabs(a), fabs(b));
    return fabs(a - b) <= tol * m;
}

static double num(const json_t *o, const char *k) { return json_number_or(o, k, NAN); }

static void compare_steps(GoldenDiff *g, const json_t *cur, const json_t *base) {
    const json_t *a = json_object_get(cur, "steps"), *b = json_object_get(base, "steps");
    g->n_steps = (int)json_array_size(a);
    g->n_steps_base = (int)json_array_size(b);
    g->n_common = g->n_steps < g->n_steps_base ? g->n_steps : g->n_steps_base;
    g->first_step = g->curve_first_step = -1;
    for (int i = 0; i < g->n_common; i++) {
        const json_t *x = json_array_get(a, (size_t)i), *y = json_array_get(b, (size_t)i);
        const char *dx = json_string_value(json_object_get(x, "data_digest"));
        const char *dy = json_string_value(json_object_get(y, "data_digest"));
        const char *what = NULL;
        double now = 0, was = 0;
        if (dx && dy && strcmp(dx, dy)) what = "data";
        else if (!close_rel(num(x, "lr"), num(y, "lr"), g->bitwise ? 0 : LR_TOL)) what = "lr";
        else if (!close_rel(num(x, "loss"), num(y, "loss"), g->bitwise ? 0 : g->tol)) what = "loss";
        else if (!close_rel(num(x, "grad_norm"), num(y, "grad_norm"), g->bitwise ? 0 : g->tol)) what = "grad_norm";
        double lr = fabs(num(x, "loss") - num(y, "loss")) / fmax(fabs(num(y, "loss")), 1e-300);
        if (isnan(lr)) lr = INFINITY;
        g->worst_loss_rel = fmax(g->worst_loss_rel, lr);
        if (!what) continue;
        g->n_diff_steps++;
        if (g->first_step >= 0) continue;
        g->first_step = g->curve_first_step = (int)json_integer_value(json_object_get(x, "step"));
        snprintf(g->first_what, sizeof g->first_what, "%s", what);
        snprintf(g->curve_what, sizeof g->curve_what, "%s", what);
        if (strcmp(what, "data")) {
            now = num(x, what);
            was = num(y, what);
        }
        g->first_now = now;
        g->first_base = was;
    }
}

static const json_t *find_tensor(const json_t *tensors, const char *name) {
    size_t i;
    json_t *t;
    json_array_foreach(tensors, i, t) if (!strcmp(json_string_value(json_object_get(t, "name")), name)) return t;
    return NULL;
}

static int tdiff_cmp(const void *pa, const void *pb) {
    const TDiff *a = pa, *b = pb;
    if (a->rel != b->rel) return a->rel < b->rel ? 1 : -1;
    return a->order - b->order;
}

// Tensors are compared against a noise floor of their kind: 0 gradients, 1
// activations (acts.*, logits), 2 anything else (inputs, targets, loss).
static int kind_of(const char *name) {
    if (!strncmp(name, "grads.", 6)) return 0;
    if (!strncmp(name, "acts.", 5) || !strcmp(name, "logits")) return 1;
    return 2;
}

static void compare_params(GoldenDiff *g, const json_t *cur_dump, const json_t *base_dump) {
    const json_t *pa = json_object_get(cur_dump, "param_digests"), *pb = json_object_get(base_dump, "param_digests");
    if (!json_is_object(pa) || !json_is_object(pb)) return;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)pb, k, v) {
        const char *now = json_string_value(json_object_get(pa, k));
        if (now && json_string_value(v) && !strcmp(now, json_string_value(v))) continue;
        if (g->n_param_diffs < 12) str_printf(&g->param_diffs, "%s`%s`", g->n_param_diffs ? ", " : "", k);
        g->n_param_diffs++;
    }
}

static void compare_dump(GoldenDiff *g, const json_t *cur, const json_t *base, const json_t *modules) {
    const json_t *da = json_object_get(cur, "dump"), *db = json_object_get(base, "dump");
    g->top_grad_layer = -2;
    if (!json_is_object(db)) return;
    g->have_dump = 1;
    if (!json_is_object(da)) {
        str_add(&g->missing, "the whole step-1 dump");
        g->n_missing = 1;
        return;
    }
    compare_params(g, da, db);
    const json_t *ta = json_object_get(da, "tensors"), *tb = json_object_get(db, "tensors");
    g->diffs = xcalloc(json_array_size(tb) + 1, sizeof(TDiff));
    // per kind (gradients, activations, the rest): the squared norms and elements of
    // the baseline's tensors, for each tensor's noise floor
    double sumsq[3] = {0, 0, 0}, total[3] = {0, 0, 0};
    size_t i;
    json_t *t;
    json_array_foreach(tb, i, t) {
        const char *name = json_string_value(json_object_get(t, "name"));
        TensorStats sb;
        char err[256];
        if (!name || tensor_stats_parse(t, &sb, err, sizeof err)) continue;
        int kind = kind_of(name);
        sumsq[kind] += sb.l2 * sb.l2;
        total[kind] += (double)sb.numel;
    }
    json_array_foreach(tb, i, t) {
        const char *name = json_string_value(json_object_get(t, "name"));
        const json_t *now = name ? find_tensor(ta, name) : NULL;
        TensorStats sa, sb;
        char err[256];
        if (!now || tensor_stats_parse(now, &sa, err, sizeof err) || tensor_stats_parse(t, &sb, err, sizeof err) ||
            !json_equal(json_object_get(now, "shape"), json_object_get(t, "shape"))) {
            if (g->n_missing < 12) str_printf(&g->missing, "%s`%s`", g->n_missing ? ", " : "", name ? name : "?");
            g->n_missing++;
            continue;
        }
        g->n_compared++;
        const int kind = kind_of(name);
        double rel = tensor_stats_rel(&sa, &sb, tensor_stats_floor(sumsq[kind], total[kind], sb.numel, NOISE_FLOOR));
        g->worst_tensor_rel = fmax(g->worst_tensor_rel, rel);
        int differs = g->bitwise ? rel > 0 : rel > g->ttol;
        if (!differs) continue;
        TDiff *d = &g->diffs[g->n_diffs++];
        d->name = name;
        d->rel = rel;
        d->loc = tensor_locus_in(name, modules);
        d->order = (int)i;
        if (!strcmp(d->loc.part, "data")) g->data_differs = 1;
        if (d->loc.is_grad && d->loc.layer > g->top_grad_layer) g->top_grad_layer = d->loc.layer;
        if (d->loc.is_grad && g->top_grad_layer == -2) g->top_grad_layer = -1;
    }
    // the first differing forward tensor in dataflow order: the first acts.* in file
    // order (the trainer dumps them layer by layer as the forward computes them),
    // else the head (logits, loss: the file holds them before the activations)
    const char *first = NULL;
    for (int k = 0; k < g->n_diffs && !first; k++)
        if (!strncmp(g->diffs[k].name, "acts.", 5)) first = g->diffs[k].name;
    for (int k = 0; k < g->n_diffs && !first; k++)
        if (!strcmp(g->diffs[k].name, "logits") || !strcmp(g->diffs[k].name, "loss")) first = g->diffs[k].name;
    qsort(g->diffs, (size_t)g->n_diffs, sizeof(TDiff), tdiff_cmp);
    for (int k = 0; k < g->n_diffs && first; k++)
        if (g->diffs[k].name == first) g->first_act = &g->diffs[k];
}

// Numbers of a gate-statistics record, compared leaf by leaf.
static int json_close(const json_t *a, const json_t *b, double tol) {
    if (json_is_number(a) && json_is_number(b)) return close_rel(json_number_value(a), json_number_value(b), tol);
    if (json_is_array(a) && json_is_array(b)) {
        if (json_array_size(a) != json_array_size(b)) return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!json_close(json_array_get(a, i), json_array_get(b, i), tol)) return 0;
        return 1;
    }
    if (json_is_object(a) && json_is_object(b)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)b, k, v) if (!json_close(json_object_get(a, k), v, tol)) return 0;
        return json_object_size(a) == json_object_size(b);
    }
    return json_equal(a, b);
}

static void compare_gates(GoldenDiff *g, const json_t *cur, const json_t *base) {
    const json_t *a = json_object_get(cur, "gate_stats"), *b = json_object_get(base, "gate_stats");
    g->gate_first_step = -1;
    if (!json_is_array(b)) return;
    for (size_t i = 0; i < json_array_size(b); i++) {
        const json_t *y = json_array_get(b, i), *x = json_array_get(a, i);
        if (x && json_close(x, y, g->bitwise ? 0 : g->ttol)) continue;
        g->gate_first_step = (int)json_number_or(y, "step", (double)i + 1);
        return;
    }
}

static void classify(GoldenDiff *g) {
    int step1_equal = g->first_step != 1;
    if (g->n_param_diffs) g->cause = CAUSE_INIT;
    else if (g->data_differs || (g->first_step >= 0 && !strcmp(g->first_what, "data"))) g->cause = CAUSE_DATA;
    else if (g->first_act) g->cause = CAUSE_FORWARD;
    else if (g->top_grad_layer > -2) g->cause = CAUSE_BACKWARD;
    else if (g->first_step >= 0 && !strcmp(g->first_what, "lr")) g->cause = CAUSE_LR;
    else if (g->first_step == 1) g->cause = !strcmp(g->first_what, "loss") ? CAUSE_FORWARD : CAUSE_BACKWARD;
    else if (g->first_step > 1 && step1_equal) g->cause = CAUSE_OPTIMIZER;
    else if (g->n_steps != g->n_steps_base || g->n_missing) g->cause = CAUSE_STEPS;
    else if (g->gate_first_step >= 0) g->cause = CAUSE_GATE;
    else g->cause = CAUSE_NONE;
}

// ---- the finding ---------------------------------------------------------------------------------

// "layer 1 sel: `a` 3e-2, `b` 1e-3; layer 0 attn: ..." — groups by (layer, part), the
// group with the largest difference first, at most max_groups.
static void add_groups(Str *md, const GoldenDiff *g, int max_groups) {
    char *used = xcalloc((size_t)g->n_diffs + 1, 1);
    int groups = 0;
    for (int i = 0; i < g->n_diffs && groups < max_groups; i++) {
        if (used[i]) continue;
        const Locus *L = &g->diffs[i].loc;
        char label[64];
        locus_label(L, label, sizeof label);
        int n = 0, shown = 0;
        for (int k = i; k < g->n_diffs; k++)
            if (!used[k] && g->diffs[k].loc.layer == L->layer && !strcmp(g->diffs[k].loc.part, L->part)) n++;
        str_printf(md, "  - **%s** (%d tensor%s):", label, n, n == 1 ? "" : "s");
        for (int k = i; k < g->n_diffs; k++) {
            if (used[k] || g->diffs[k].loc.layer != L->layer || strcmp(g->diffs[k].loc.part, L->part)) continue;
            used[k] = 1;
            if (shown++ < 8) str_printf(md, "%s `%s` %.3g", shown > 1 ? "," : "", g->diffs[k].name, g->diffs[k].rel);
        }
        if (shown > 8) str_printf(md, ", … (%d more)", shown - 8);
        str_add(md, "\n");
        groups++;
    }
    int left = 0;
    for (int i = 0; i < g->n_diffs; i++) left += !used[i];
    if (left) str_printf(md, "  - … %d more tensor%s in other groups\n", left, left == 1 ? "" : "s");
    free(used);
}

static void cause_text(Str *s, const GoldenDiff *g, const CaseResult *r, const json_t *base) {
    char label[64];
    switch (g->cause) {
    case CAUSE_INIT:
        str_printf(s, "the initial weights differ (%d tensor%s: %s): the initialisation changed", g->n_param_diffs,
                   g->n_param_diffs == 1 ? "" : "s", str_c(&g->param_diffs));
        break;
    case CAUSE_DATA:
        str_printf(s, "the data order changed: the tokens of step %d differ from the baseline's",
                   g->first_step > 0 ? g->first_step : 1);
        break;
    case CAUSE_FORWARD:
        if (g->first_act) {
            locus_label(&g->first_act->loc, label, sizeof label);
            str_printf(s, "the forward changed: the first differing activation in dataflow order is `%s` (%s)",
                       g->first_act->name, label);
        } else str_printf(s, "the forward changed: step 1's loss differs (%s)", g->have_dump ? "no step-1 tensor differs "
                          "beyond the tensor tolerance to localise it" : "no step dump to localise it");
        break;
    case CAUSE_BACKWARD:
        if (g->top_grad_layer >= 0)
            str_printf(s, "the backward changed: step 1's forward is %s the baseline's, its gradients are not; the "
                          "highest layer with a differing gradient is %d (backward runs top down: the change is there)",
                       g->bitwise ? "bitwise equal to" : "within tolerance of", g->top_grad_layer);
        else if (g->top_grad_layer == -1)
            str_add(s, "the backward changed outside the blocks (LM head, final norm or embedding): step 1's forward "
                       "equals the baseline's, those gradients do not");
        else str_printf(s, "the backward changed: step 1's grad norm differs (%s)", g->have_dump ? "no step-1 tensor "
                        "differs beyond the tensor tolerance to localise it" : "no step dump to localise it");
        break;
    case CAUSE_LR:
        str_printf(s, "the LR schedule changed: lr at step %d is %.17g, the baseline's %.17g", g->first_step, g->first_now,
                   g->first_base);
        break;
    case CAUSE_OPTIMIZER: {
        const json_t *prev = json_array_get(json_object_get(base, "steps"), (size_t)(g->first_step - 2));
        double gn = num(prev, "grad_norm"), clip = r->c->cfg.grad_clip;
        str_printf(s, "the optimizer update changed: step 1's forward and gradients %s the baseline's, the loss first "
                      "differs at step %d, so the update of step %d differs (AdamW moments, bias correction, weight "
                      "decay, or clipping — ",
                   g->bitwise ? "are bitwise equal to" : "are within tolerance of", g->first_step, g->first_step - 1);
        if (clip > 0) str_printf(s, "%s at step %d: grad norm %.4g %s clip %g)", gn > clip ? "active" : "inactive",
                                 g->first_step - 1, gn, gn > clip ? ">" : "<=", clip);
        else str_add(s, "off in this config)");
        break;
    }
    case CAUSE_STEPS:
        str_printf(s, "the run differs in shape: %d steps here, %d in the baseline%s%s", g->n_steps, g->n_steps_base,
                   g->n_missing ? "; missing tensors: " : "", str_c(&g->missing));
        break;
    case CAUSE_GATE:
        str_printf(s, "only the gate statistics differ, first at step %d", g->gate_first_step);
        break;
    default: break;
    }
}

// A fingerprint value as the finding shows it: strings bare, numbers as JSON writes them.
static void fp_value(Str *s, const json_t *v) {
    if (json_is_string(v)) str_add(s, json_string_value(v));
    else if (json_is_integer(v)) str_printf(s, "%lld", (long long)json_integer_value(v));
    else if (!v) str_add(s, "absent");
    else str_add(s, "null");
}

// "kernel_isa, libc": the fingerprint keys whose values differ (also a key only one side has:
// a baseline recorded before a key was part of the fingerprint). but_model: leave the GPU's
// model name out (a nearest baseline of the same architecture: it differs by definition).
static void fingerprint_delta(Str *s, const json_t *now, const json_t *was, int but_model) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)was, k, v) if (!(but_model && !strcmp(k, "gpu")) && !json_equal(v, json_object_get(now, k))) {
        str_printf(s, "%s%s (`", s->len ? ", " : "", k);
        fp_value(s, v);
        str_add(s, "` → `");
        fp_value(s, json_object_get(now, k));
        str_add(s, "`)");
    }
    json_object_foreach((json_t *)now, k, v) if (!json_object_get(was, k) && json_is_object(was)) {
        str_printf(s, "%s%s (`absent` → `", s->len ? ", " : "", k);
        fp_value(s, v);
        str_add(s, "`)");
    }
}

// Which baseline judged the case: its device, "own" or "nearest", both architectures.
static void match_facts(CaseResult *r, const BaselineMatch *m) {
    json_t *f = r->facts;
    json_object_set_new(f, "golden_baseline_device", json_string(m->device));
    json_object_set_new(f, "golden_baseline_match", json_string(m->nearest ? "nearest" : "own"));
    json_object_set_new(f, "golden_baseline_arch", json_string(m->arch));
    json_object_set_new(f, "golden_device", json_string(m->own_device));
    json_object_set_new(f, "golden_device_arch", json_string(m->own_arch));
    if (m->nearest) {   // what ends the borrowing: this device's own baselines of the scenario
        char cmd[2048];
        regression_record_scenario_command(r, cmd, sizeof cmd);
        json_object_set_new(f, "golden_record_command", json_string(cmd));
    }
}

// "the baseline" (this device's own), or "the nearest baseline (nvidia-h100-80gb-hbm3, same
// architecture sm_90)": how a finding names what it compared with.
static void baseline_name(char *out, size_t n, const BaselineMatch *m) {
    if (!m->nearest) snprintf(out, n, "the baseline");
    else if (m->same_arch) snprintf(out, n, "the nearest baseline (%s, same architecture %s)", m->device, m->arch);
    else snprintf(out, n, "the nearest baseline (%s, another architecture: %s, this device %s)", m->device, m->arch,
                  m->own_arch);
}

// The evidence line of a nearest baseline: whose it is, how its architecture is known, how it
// was compared, and the command that records this device's own.
static void nearest_details(Str *md, const BaselineMatch *m, const CaseResult *r) {
    if (!m->nearest) return;
    char cmd[2048];
    regression_record_command(r, cmd, sizeof cmd);
    str_printf(md, "- nearest baseline: this device (%s, %s) has none for this case (`%s`); %s's stands in, recorded on "
                   "%s architecture (%s, from %s): %s; record this device's own with `%s`\n",
               m->own_device, m->own_arch, m->own_path, m->device, m->same_arch ? "the same" : "another", m->arch,
               m->arch_source ? m->arch_source : "?",
               m->same_arch ? "compared bitwise where the build is the same but for the GPU model and the bits agree, "
                              "else within the cross-device tolerances"
                            : "compared within the cross-device tolerances, never bitwise",
               cmd);
    if (m->others.len) str_printf(md, "- other candidates: %s\n", str_c(&m->others));
}

static void record_facts(CaseResult *r, const GoldenDiff *g, const char *path) {
    static const char *const CAUSES[] = {"none", "steps", "init", "data", "forward", "backward", "lr", "optimizer", "gate"};
    json_t *f = r->facts;
    json_object_set_new(f, "golden_baseline", json_string(path));
    json_object_set_new(f, "golden_mode", json_string(g->bitwise ? "bitwise" : g->cross ? "cross_device" : "tolerance"));
    json_object_set_new(f, "golden_cause", json_string(CAUSES[g->cause]));
    json_object_set_new(f, "golden_first_diverging_step", g->first_step >= 0 ? json_integer(g->first_step) : json_null());
    json_object_set_new(f, "golden_worst_loss_rel", json_real(isfinite(g->worst_loss_rel) ? g->worst_loss_rel : -1));
    json_object_set_new(f, "golden_worst_tensor_rel", json_real(isfinite(g->worst_tensor_rel) ? g->worst_tensor_rel : -1));
    json_object_set_new(f, "golden_tensors_compared", json_integer(g->n_compared));
    json_t *names = json_array();
    for (int i = 0; i < g->n_diffs && i < 32; i++) json_array_append_new(names, json_string(g->diffs[i].name));
    json_object_set_new(f, "golden_differing_tensors", names);
    json_object_set_new(f, "golden_n_differing_tensors", json_integer(g->n_diffs));
    if (g->first_act) {
        char label[64];
        locus_label(&g->first_act->loc, label, sizeof label);
        json_object_set_new(f, "golden_first_tensor", json_string(g->first_act->name));
        json_object_set_new(f, "golden_locus", json_string(label));
    } else if (g->top_grad_layer >= 0) {
        json_object_set_new(f, "golden_locus", json_sprintf("layer %d backward", g->top_grad_layer));
    }
}

static void golden_finding(CaseResult *r, GoldenDiff *g, const json_t *cur, const json_t *base, const char *path,
                           const BaselineMatch *m) {
    const json_t *pb = json_object_get(base, "provenance"), *pa = json_object_get(cur, "provenance");
    const char *commit = json_string_value(json_object_get(pb, "commit"));
    const char *when = json_string_value(json_object_get(pb, "recorded"));
    char mode[200], bname[400];
    baseline_name(bname, sizeof bname, m);
    if (g->bitwise && m->nearest) snprintf(mode, sizeof mode, "bitwise: same build fingerprint but for the GPU model");
    else if (g->bitwise) snprintf(mode, sizeof mode, "bitwise: same build fingerprint");
    else if (g->cross && g->other_model)
        snprintf(mode, sizeof mode, "cross-device tolerance %g per step, %g per tensor: another GPU model of the same "
                 "architecture, not bitwise equal (its GEMM library may choose other kernels)", g->tol, g->ttol);
    else if (g->cross)
        snprintf(mode, sizeof mode, "cross-device tolerance %g per step, %g per tensor: recorded on another architecture",
                 g->tol, g->ttol);
    else snprintf(mode, sizeof mode, "tolerance %g per step, %g per tensor: build fingerprint differs", g->tol, g->ttol);
    record_facts(r, g, path);
    Finding *f;
    if (g->cause == CAUSE_NONE) {
        f = result_finding(r, "golden", 1, "%s %s: %d steps, %d tensors (%s)",
                           g->bitwise ? "bitwise equal to" : g->cross ? "within the cross-device tolerance of"
                                                                      : "within tolerance of",
                           bname, g->n_common, g->n_compared,
                           g->bitwise ? "same build" : g->cross && g->other_model ? "another GPU model, not bitwise"
                                                     : g->cross ? "another architecture" : "other build");
    } else {
        Str cause = {0};
        cause_text(&cause, g, r, base);
        if (g->first_step >= 0 && !strcmp(g->first_what, "dump"))
            f = result_finding(r, "golden", 0, "diverges from %s at step 1 (%d of %d step-1 tensors differ%s): %s", bname,
                               g->n_diffs, g->n_compared, g->curve_first_step > 0 ? "" : "; the loss curve stays within "
                               "tolerance", str_c(&cause));
        else if (g->first_step >= 0 && strcmp(g->first_what, "data"))
            f = result_finding(r, "golden", 0, "diverges from %s at step %d (%s %.9g vs %.9g): %s", bname, g->first_step,
                               g->first_what, g->first_now, g->first_base, str_c(&cause));
        else if (g->first_step >= 0)
            f = result_finding(r, "golden", 0, "diverges from %s at step %d: %s", bname, g->first_step, str_c(&cause));
        else f = result_finding(r, "golden", 0, "differs from %s: %s", bname, str_c(&cause));
        str_free(&cause);
    }
    Str *md = &f->details;
    str_printf(md, "- baseline `%s` (recorded %s at %s); comparison %s\n", path, when ? when : "?",
               commit ? commit : "?", mode);
    nearest_details(md, m, r);
    if (!g->bitwise) {
        Str d = {0};
        fingerprint_delta(&d, json_object_get(pa, "fingerprint"), json_object_get(pb, "fingerprint"),
                          m->nearest && m->same_arch);
        str_printf(md, "- build fingerprint differences: %s\n", d.len ? str_c(&d) : "no key differs, the ids do");
        str_free(&d);
    }
    if (g->curve_first_step >= 0)
        str_printf(md, "- steps: %d of %d differ, the first at step %d (%s); worst loss difference %.3g relative\n",
                   g->n_diff_steps, g->n_common, g->curve_first_step, g->curve_what, g->worst_loss_rel);
    if (g->n_steps != g->n_steps_base) str_printf(md, "- %d steps here, %d in the baseline\n", g->n_steps, g->n_steps_base);
    if (g->n_param_diffs) str_printf(md, "- initial weights that differ: %s\n", str_c(&g->param_diffs));
    if (g->have_dump && g->n_diffs) {
        str_printf(md, "- step-1 dump: %d of %d tensors differ; largest first, grouped by layer and part:\n", g->n_diffs,
                   g->n_compared);
        add_groups(md, g, 8);
    } else if (g->have_dump) str_printf(md, "- step-1 dump: all %d tensors equal\n", g->n_compared);
    if (g->n_missing) str_printf(md, "- missing or reshaped here: %s\n", str_c(&g->missing));
    if (g->gate_first_step >= 0) str_printf(md, "- gate statistics differ from step %d\n", g->gate_first_step);
    if (g->cause != CAUSE_NONE) {
        char cmd[2048];
        regression_record_command(r, cmd, sizeof cmd);
        if (m->nearest)
            str_printf(md, "- if this change is intended, record this device's own baseline (and say why in the commit): "
                           "`%s` (%s's own is re-recorded on that device)\n", cmd, m->device);
        else str_printf(md, "- if this change is intended, re-record the baseline (and say why in the commit): `%s`\n", cmd);
    }
}

// The trainer map of a map trainer's case (env.json's trainer.map, read again: its
// `modules` name the branch and gate modules of the trainer's parameter names), or NULL.
static json_t *trainer_map_of(const CaseResult *r) {
    const char *path = json_string_value(json_object_get(json_object_get(r->env, "trainer"), "map"));
    return path ? json_load_path(path, 0, NULL) : NULL;
}

// Compare the case's summary with the baseline's in g's mode (bitwise, tol, ttol set): the curve,
// the step-1 dump, the gate statistics; then the cause.
static void golden_compare(GoldenDiff *g, const json_t *cur, const json_t *base, CaseResult *r) {
    compare_steps(g, cur, base);
    json_t *map = trainer_map_of(r);
    compare_dump(g, cur, base, json_object_get(map, "modules"));
    json_decref(map);
    compare_gates(g, cur, base);
    if (g->n_diffs > 0 && (g->first_step < 0 || g->first_step > 1)) {   // step 1 differs already
        g->first_step = 1;
        snprintf(g->first_what, sizeof g->first_what, "dump");
    }
    classify(g);
}
static void golden_diff_free(GoldenDiff *g) {
    free(g->diffs);
    str_free(&g->missing);
    str_free(&g->param_diffs);
    memset(g, 0, sizeof *g);
}

static void golden_evaluate(const json_t *params, CaseResult *r, const ScenarioRun *sr) {
    (void)sr;
    char path[2400];
    json_t *base, *cur;
    BaselineMatch m;
    memset(&m, 0, sizeof m);
    if (regression_prepare(r, "golden", path, sizeof path, &base, &cur, &m)) {
        str_free(&m.others);
        return;
    }
    match_facts(r, &m);
    GoldenDiff g;
    memset(&g, 0, sizeof g);
    const json_t *fpa = json_object_get(json_object_get(cur, "provenance"), "fingerprint");
    const json_t *fpb = json_object_get(json_object_get(base, "provenance"), "fingerprint");
    const char *ida = json_string_value(json_object_get(json_object_get(cur, "provenance"), "fingerprint_id"));
    const char *idb = json_string_value(json_object_get(json_object_get(base, "provenance"), "fingerprint_id"));
    if (m.nearest && !m.same_arch) g.cross = 1;          // another architecture: never bitwise
    else if (m.nearest) g.bitwise = m.same_build;        // as on its own device, the GPU model aside
    else g.bitwise = ida && idb && !strcmp(ida, idb);
    int compared = 0;
    if (g.bitwise && m.nearest) {   // another GPU model: bitwise where it took the same kernels, else cross-device
        golden_compare(&g, cur, base, r);
        compared = g.cause == CAUSE_NONE;
        if (!compared) {
            golden_diff_free(&g);
            g.cross = g.other_model = 1;
        }
    }
    if (!g.bitwise && !g.cross && other_build_skips(r->s, params) == 1) {
        Str d = {0};
        fingerprint_delta(&d, fpa, fpb, m.nearest);
        char cmd[2048], bname[400];
        regression_record_command(r, cmd, sizeof cmd);
        baseline_name(bname, sizeof bname, &m);
        json_object_set_new(r->facts, "golden_baseline", json_string("other_build"));
        Finding *f = result_finding_verdict(
            r, "golden", V_SKIP,
            "%s was recorded with another build (%s): on this profile only a bitwise comparison judges — "
            "%s with this build from a known-good commit: `%s`",
            bname, d.len ? str_c(&d) : "fingerprint differs",
            m.nearest ? "record this device's own baseline" : "re-record it", cmd);
        str_add(&f->details, "- measured on an H100: honest kernel differences (another tiling, the reference attention "
                             "kernels) move bf16 training as far in 24 steps as a one-line change does, so a tolerance "
                             "cannot separate them (docs/regression.md)\n");
        nearest_details(&f->details, &m, r);
        str_free(&d);
        str_free(&m.others);
        json_decref(cur);
        json_decref(base);
        return;
    }
    const int cuda = !strcmp(r->c->cfg.backend, "cuda");
    if (g.cross) {
        g.tol = check_num_param(r->s, params, "", "cross_device_tolerance", cuda ? CROSS_TOL_CUDA : CROSS_TOL_CPU, 0, 1,
                                NULL);
        g.ttol = check_num_param(r->s, params, "", "cross_device_tensor_tolerance", cuda ? CROSS_TTOL_CUDA : CROSS_TTOL_CPU,
                                 0, 10, NULL);
    } else if (!g.bitwise) {
        g.tol = check_num_param(r->s, params, "", "tolerance", GOLDEN_TOL_DEFAULT, 0, 1, NULL);
        g.ttol = check_num_param(r->s, params, "", "tensor_tolerance", GOLDEN_TTOL_DEFAULT, 0, 10, NULL);
    }
    if (!compared) golden_compare(&g, cur, base, r);
    golden_finding(r, &g, cur, base, path, &m);
    golden_diff_free(&g);
    str_free(&m.others);
    json_decref(cur);
    json_decref(base);
}

const CheckDef check_golden = {
    .name = "golden",
    .summary = "the loss curve, step-1 dump and gate statistics equal the case's baseline (bitwise on the same build, "
               "else within tolerance); the first diverging step and the tensors by layer and branch",
    .needs = NEED_DUMP | NEED_DUMP_ACTS | NEED_GATE_STATS,
    .validate = golden_validate,
    .evaluate = golden_evaluate,
};
