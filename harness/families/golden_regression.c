// harness/families/golden_regression.c — the `golden_regression` family of the regression layer
// (docs/regression.md): cases against their golden baselines (the regression table of a run is
// harness/report/regression_table.c; the perf_floor family, harness/families/perf_floor.c).
//
// The golden check names, per case, the first diverging step and the first
// differing tensor. Read together, the cases say more: the golden scenario's
// variants each exercise a feature (a branch, the gate, phi = mlp, sigmoid,
// sequential prefill, checkpointing, a partial selection block), so when exactly
// the cases that exercise a feature differ — and none that does not — that
// feature's code is where the change is.
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness/families/families.h"
#include "harness/report/regression_table.h"
#include "common/nsa_names.h"   // NSA_BR_*, NSA_GATE_*: the config's enum values

// Was it compared with another device's baseline (the nearest: this device has none)?
static int golden_borrowed(const CaseResult *r) {
    const char *m = regression_fact_str(r, "golden_baseline_match");
    return regression_golden_compared(r) && m && !strcmp(m, "nearest") && regression_fact_str(r, "golden_baseline_device");
}
static int golden_differs(const CaseResult *r) {
    const char *c = regression_fact_str(r, "golden_cause");
    return c && strcmp(c, "none");
}

// ---- features of a case's config ----------------------------------------------------------------

typedef struct {
    const char *what;   // for the diagnosis
    int (*has)(const NsaConfig *c);
    const char *knobs[3];   // the config keys it depends on: a map trainer that maps none of
                            // them never varies it, so it explains nothing there
} Feature;

static int f_cmp_scores(const NsaConfig *c) { return c->force_branch < 0 || c->force_branch != NSA_BR_WIN; }
static int f_cmp_out(const NsaConfig *c) { return c->force_branch < 0 || c->force_branch == NSA_BR_CMP; }
static int f_sel(const NsaConfig *c) { return c->force_branch < 0 || c->force_branch == NSA_BR_SEL; }
static int f_win(const NsaConfig *c) { return c->force_branch < 0 || c->force_branch == NSA_BR_WIN; }
static int f_gate(const NsaConfig *c) { return c->force_branch < 0; }
static int f_mlp(const NsaConfig *c) { return c->phi == NSA_PHI_MLP && f_cmp_scores(c); }
static int f_sigmoid(const NsaConfig *c) { return c->force_branch < 0 && c->gate_act == NSA_GATE_SIGMOID; }
static int f_softmax(const NsaConfig *c) { return c->force_branch < 0 && c->gate_act == NSA_GATE_SOFTMAX; }
static int f_seq(const NsaConfig *c) { return c->prefill == NSA_PREFILL_SEQUENTIAL; }
static int f_ckpt(const NsaConfig *c) { return c->ckpt_end > c->ckpt_begin; }
static int f_partial(const NsaConfig *c) { return c->seq_len % c->l_sel != 0; }

static const Feature FEATURES[] = {
    {"the compressed branch (its keys/values and the scores that drive selection: every case that computes it)",
     f_cmp_scores, {"nsa.force_branch"}},
    {"the compressed branch's attention output (it reaches the loss only with all branches or force_branch=cmp)",
     f_cmp_out, {"nsa.force_branch"}},
    {"the selected-block branch", f_sel, {"nsa.force_branch"}},
    {"the sliding-window branch", f_win, {"nsa.force_branch"}},
    {"the gate MLP and the combine of the three branches", f_gate, {"nsa.force_branch"}},
    {"the phi=mlp compressor", f_mlp, {"nsa.phi", "nsa.force_branch"}},
    {"the sigmoid gate activation", f_sigmoid, {"nsa.gate_act", "nsa.force_branch"}},
    {"the softmax gate activation", f_softmax, {"nsa.gate_act", "nsa.force_branch"}},
    {"sequential prefill (the decode path and its caches)", f_seq, {"train.prefill"}},
    {"gradient checkpointing (the recompute of checkpointed layers)", f_ckpt, {"train.checkpoint_layers"}},
    {"a partial last selection block (T not a multiple of l')", f_partial, {"train.seq_len", "nsa.l_sel"}},
};

// 1 when case r's trainer honours every knob the feature depends on: always for a trainer
// without a knob list (nsa-train, a protocol trainer: the whole config), else (a map
// trainer's handshake, features.knobs) when each is a knob of its map. A map without
// nsa.gate_act runs its own gate whatever the config's default says.
static int feature_applies(const Feature *f, const CaseResult *r) {
    const json_t *info = json_object_get(json_object_get(json_object_get(r->env, "trainer"), "trainer_protocol"), "info");
    const json_t *knobs = json_object_get(json_object_get(info, "features"), "knobs");
    if (!json_is_object(knobs)) return 1;
    for (int k = 0; k < 3 && f->knobs[k]; k++)
        if (!json_object_get(knobs, f->knobs[k])) return 0;
    return 1;
}
#define N_FEATURES ((int)(sizeof FEATURES / sizeof FEATURES[0]))

// The features whose cases are exactly the differing ones.
static void feature_inference(const ScenarioRun *sr, Str *md) {
    int compared = 0, differ = 0;
    for (int i = 0; i < sr->n; i++) {
        compared += regression_golden_compared(&sr->results[i]);
        differ += regression_golden_compared(&sr->results[i]) && golden_differs(&sr->results[i]);
    }
    if (differ == 0 || compared < 2) return;
    if (differ == compared) {
        str_printf(md, "- **%s**: every variant differs from its baseline (%d of %d): the change is in code every "
                       "configuration runs (embedding, projections, norms, SwiGLU, head, loss, the optimizer, the data "
                       "order) — the per-case causes below say which stage.\n",
                   sr->s->name, differ, compared);
        return;
    }
    Str hits = {0};
    for (int f = 0; f < N_FEATURES; f++) {
        int with = 0, match = 1;
        for (int i = 0; i < sr->n && match; i++) {
            const CaseResult *r = &sr->results[i];
            if (!regression_golden_compared(r)) continue;
            if (!feature_applies(&FEATURES[f], r)) {
                match = 0;
                break;
            }
            int has = FEATURES[f].has(&r->c->cfg);
            with += has;
            match = has == golden_differs(r);
        }
        if (match && with > 0) str_printf(&hits, "%s%s", hits.len ? "; or " : "", FEATURES[f].what);
    }
    Str list = {0};
    for (int i = 0; i < sr->n; i++)
        if (regression_golden_compared(&sr->results[i]) && golden_differs(&sr->results[i]))
            str_printf(&list, "%s%s", list.len ? ", " : "", sr->results[i].c->name);
    if (hits.len)
        str_printf(md, "- **%s**: exactly the variants that run %s differ from their baselines (%s), and none of the "
                       "others: the change is there.\n",
                   sr->s->name, str_c(&hits), str_c(&list));
    else
        str_printf(md, "- **%s**: %d of %d variants differ (%s); no single feature of the variants explains that set "
                       "— see each case's first differing tensor.\n",
                   sr->s->name, differ, compared, str_c(&list));
    str_free(&hits);
    str_free(&list);
}

// ---- golden_regression ----------------------------------------------------------------------------

static void golden_diagnose(const ScenarioRun *sr, Str *md) {
    int missing = 0, stale = 0;
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        const char *b = regression_fact_str(r, "golden_baseline");
        missing += b && !strcmp(b, "missing");
        stale += b && !strcmp(b, "stale");
    }
    if (missing)
        str_printf(md, "- **%s**: %d case%s have no baseline for this profile and device: nothing was compared (SKIP); "
                       "each SKIP names the `nsa-harness baseline record` command that records it.\n",
                   sr->s->name, missing, missing == 1 ? "" : "s");
    if (stale)
        str_printf(md, "- **%s**: %d baseline%s were recorded for another config (ERROR \"re-record\"): the scenario or "
                       "its config changed since; re-record and say why in the commit.\n",
                   sr->s->name, stale, stale == 1 ? "" : "s");
    // cases compared with another device's baseline (this device has none): a line per baseline device
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        const char *dev = regression_fact_str(r, "golden_baseline_device");
        if (!golden_borrowed(r)) continue;
        int seen = 0, n = 0;
        for (int k = 0; k < i && !seen; k++)
            seen = golden_borrowed(&sr->results[k]) && !strcmp(regression_fact_str(&sr->results[k], "golden_baseline_device"), dev);
        if (seen) continue;
        for (int k = i; k < sr->n; k++)
            n += golden_borrowed(&sr->results[k]) && !strcmp(regression_fact_str(&sr->results[k], "golden_baseline_device"), dev);
        const char *arch = regression_fact_str(r, "golden_baseline_arch"), *own = regression_fact_str(r, "golden_device_arch");
        const char *own_dev = regression_fact_str(r, "golden_device");
        const int same = arch && own && !strcmp(arch, own);
        // (the command is a fact of the case: the run's context is gone when the report is written)
        const char *cmd = regression_fact_str(r, "golden_record_command");
        str_printf(md, "- **%s**: %d case%s had no baseline for this device (%s, %s) and %s compared with the nearest, "
                       "%s's (%s architecture, %s): %s. Record this device's own, on it: `%s`.\n",
                   sr->s->name, n, n == 1 ? "" : "s", own_dev ? own_dev : "?", own ? own : "?", n == 1 ? "was" : "were", dev,
                   same ? "the same" : "another", arch ? arch : "?",
                   same ? "bitwise where the bits agree, else within the cross-device tolerances"
                        : "within the cross-device tolerances, never bitwise",
                   cmd ? cmd : "nsa-harness baseline record");
    }
    feature_inference(sr, md);
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        if (!regression_golden_compared(r) || !golden_differs(r)) continue;
        for (int k = 0; k < r->n_findings; k++)
            if (!strcmp(r->findings[k].check, "golden") && !r->findings[k].ok)
                str_printf(md, "- **%s · %s**: %s.\n", sr->s->name, r->c->name, r->findings[k].summary);
    }
}

static void golden_section(const ScenarioRun *sr, const char *report_dir, Str *md) {
    str_printf(md, "\n## %s — against the golden baselines\n\n", sr->s->name);
    regression_table(sr, 1, md);
    int skipped = 0;
    for (int i = 0; i < sr->n; i++) skipped += !regression_golden_compared(&sr->results[i]);
    if (skipped) str_printf(md, "\n%d case%s not compared (no baseline, a stale one, or the case did not finish).\n", skipped,
                            skipped == 1 ? "" : "s");
    section_loss_plot(sr, report_dir, md);
}

const FamilyDef family_golden_regression = {
    .name = "golden_regression",
    .summary = "every numerics-bearing variant of the model against its golden baseline: the first "
               "diverging step, the first differing tensor, the feature the differing variants share",
    .diagnose = golden_diagnose,
    .section = golden_section,
};
