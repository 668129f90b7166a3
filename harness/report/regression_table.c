// harness/report/regression_table.c — see regression_table.h.
#define _POSIX_C_SOURCE 200809L
#include "harness/report/regression_table.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *regression_fact_str(const CaseResult *r, const char *k) {
    return json_string_value(json_object_get(r->facts, k));
}

int regression_golden_compared(const CaseResult *r) {
    const char *c = regression_fact_str(r, "golden_cause");
    return c != NULL && (r->verdict == V_PASS || r->verdict == V_FAIL);
}

static void golden_row(Str *md, const char *scenario, const CaseResult *r) {
    const json_t *step = json_object_get(r->facts, "golden_first_diverging_step");
    const char *where = regression_fact_str(r, "golden_locus"), *first = regression_fact_str(r, "golden_first_tensor");
    str_add(md, "| ");
    str_add_md_cell(md, scenario);
    str_add(md, " | ");
    str_add_md_cell(md, r->c->name);
    str_printf(md, " | %s | golden (%s", VERDICT_NAMES[r->verdict],
               regression_fact_str(r, "golden_mode") ? regression_fact_str(r, "golden_mode") : "—");
    // a baseline of another device standing in for this one's: which (docs/regression.md)
    const char *match = regression_fact_str(r, "golden_baseline_match"), *bdev = regression_fact_str(r, "golden_baseline_device");
    if (match && !strcmp(match, "nearest") && bdev) {
        str_add(md, "; nearest baseline: ");
        str_add_md_cell(md, bdev);
    }
    str_add(md, ") | ");
    if (json_is_integer(step)) str_printf(md, "%lld", (long long)json_integer_value(step));
    else str_add(md, "—");
    str_printf(md, " | %s | ", regression_fact_str(r, "golden_cause") ? regression_fact_str(r, "golden_cause") : "—");
    str_add_md_cell(md, where ? where : "—");
    if (first) {
        str_add(md, " (`");
        str_add_md_cell(md, first);
        str_add(md, "`)");
    }
    double w = json_number_or(r->facts, "golden_worst_loss_rel", NAN);
    if (isfinite(w) && w >= 0) str_printf(md, " | %.3g |\n", w);
    else str_add(md, " | — |\n");
}

static void perf_row_md(Str *md, const char *scenario, const CaseResult *r) {
    static const char *const metrics[] = {"tok_per_s", "step_ms", "peak_mem_bytes", "flops", NULL};
    for (int m = 0; metrics[m]; m++) {
        char key[64];
        snprintf(key, sizeof key, "perf_%s", metrics[m]);
        const json_t *f = json_object_get(r->facts, key);
        if (!f) continue;
        double now = json_number_or(f, "now", NAN), floor = json_number_or(f, "floor", NAN);
        str_add(md, "| ");
        str_add_md_cell(md, scenario);
        str_add(md, " | ");
        str_add_md_cell(md, r->c->name);
        char change[48];
        fmt_rel_change(change, sizeof change, now, floor);
        const int exact = m >= 2;   // peak_mem_bytes, flops: counters, in full
        str_printf(md, exact ? " | %s | %s | %.15g vs %.15g%s | %s |\n" : " | %s | %s | %.6g vs %.6g%s | %s |\n",
                   VERDICT_NAMES[r->verdict], metrics[m], now, floor,
                   json_is_true(json_object_get(f, "ok")) ? "" : " **(fails)**", change);
    }
}

void regression_table(const ScenarioRun *runs, int n_runs, Str *md) {
    Str golden = {0}, perf = {0};
    for (int s = 0; s < n_runs; s++)
        for (int i = 0; i < runs[s].n; i++) {
            const CaseResult *r = &runs[s].results[i];
            if (regression_golden_compared(r)) golden_row(&golden, runs[s].s->name, r);
            perf_row_md(&perf, runs[s].s->name, r);
        }
    if (golden.len)
        str_printf(md, "| scenario | case | verdict | check | first diverging step | cause | where | worst loss Δ (rel) |\n"
                       "|---|---|---|---|---|---|---|---|\n%s", str_c(&golden));
    if (perf.len)
        str_printf(md, "%s| scenario | case | verdict | metric | now vs floor | change |\n|---|---|---|---|---|---|\n%s",
                   golden.len ? "\n" : "", str_c(&perf));
    str_free(&golden);
    str_free(&perf);
}

