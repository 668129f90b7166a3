// harness/families/branch_isolation.c — the `branch_isolation` family: each NSA branch alone and
// all together; which branch's gradients go missing or turn non-finite.
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/nsa_names.h"
#include "harness/families/families.h"
#include "harness/report/plot.h"

static void branch_diagnose(const ScenarioRun *sr, Str *md) {
    int fails = family_count_verdict(sr, V_FAIL);
    if (!fails) return;
    // Which branch configurations fail, and with which unexpected parameters?
    int single_fails = 0, single_total = 0;
    const json_t *common = NULL;   // unexpected-missing set shared by every failing case
    int common_same = 1;
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        const char *br = family_label_on(sr, i, "branch");
        int is_none = br && !strcmp(br, "none");
        if (!is_none) single_total++;
        if (r->verdict != V_FAIL) continue;
        if (!is_none) single_fails++;
        const json_t *u = json_object_get(r->facts, "unexpected_missing");
        if (!common) common = u;
        else if (!u || !json_equal(u, common)) common_same = 0;
    }
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        if (r->verdict != V_FAIL) continue;
        const json_t *nf = json_object_get(r->facts, "first_nonfinite");
        if (nf) {
            str_printf(md, "- **%s · %s**: non-finite values, first in `%s` (layer %lld, branch %s, op `%s`)", sr->s->name,
                       r->c->name, json_string_value(json_object_get(nf, "tensor")),
                       (long long)json_integer_value(json_object_get(nf, "layer")),
                       json_string_value(json_object_get(nf, "branch")), json_string_value(json_object_get(nf, "op")));
            str_add(md, fails == 1 ? " — only this branch configuration produces them, so the defect is in "
                                     "the computation of that branch.\n"
                                   : ".\n");
        }
    }
    if (common && common_same && json_array_size(common) && fails > 1) {
        str_printf(md, "- **%s**: ", sr->s->name);
        family_names_list(md, common, 6);
        str_printf(md, " receive%s no gradient in every failing configuration (%d of %d): the parameter is cut "
                       "off from the loss whatever branch runs — a dropped or detached gradient, not a branch's math.\n",
                   json_array_size(common) == 1 ? "s" : "", fails, sr->n);
        return;
    }
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        const json_t *u = json_object_get(r->facts, "unexpected_missing");
        const json_t *a = json_object_get(r->facts, "unexpected_arrived");
        if (r->verdict != V_FAIL || (!json_array_size(u) && !json_array_size(a))) continue;
        const char *br = family_label_on(sr, i, "branch");
        str_printf(md, "- **%s · %s**: ", sr->s->name, r->c->name);
        if (json_array_size(u)) {
            family_names_list(md, u, 6);
            str_add(md, " get no gradient although they should");
        }
        if (json_array_size(a)) {
            str_add(md, json_array_size(u) ? "; and " : "");
            family_names_list(md, a, 6);
            str_add(md, " get a gradient although this configuration cannot reach them");
        }
        if (br && !strcmp(br, "none") && single_fails == 0 && single_total > 0)
            str_add(md, ". Every branch alone passes, so each branch's own backward is sound: look at what only the "
                        "gated combination has — the gate MLP's backward and the combine.\n");
        else if (br && strcmp(br, "none"))
            str_printf(md, ". Only the `%s` branch runs here: its backward (or its projections) is where the gradient "
                           "stops.\n", br);
        else str_add(md, ".\n");
    }
}

static void branch_section(const ScenarioRun *sr, const char *report_dir, Str *md) {
    str_printf(md, "\n## %s — gradient arrival per branch configuration\n\n", sr->s->name);
    str_add(md, "| case | verdict | arrived | missing (as expected) | unexpected | loss |\n|---|---|---|---|---|---|\n");
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        const json_t *f = r->facts;
        str_printf(md, "| %s | %s | ", r->c->name, VERDICT_NAMES[r->verdict]);
        if (json_object_get(f, "n_params"))
            str_printf(md, "%lld/%lld", (long long)json_integer_value(json_object_get(f, "arrived")),
                       (long long)json_integer_value(json_object_get(f, "n_params")));
        else str_add(md, "—");
        str_add(md, " | ");
        const json_t *miss = json_object_get(f, "missing");
        if (miss) str_printf(md, "%zu", json_array_size(miss));
        else str_add(md, "—");
        str_add(md, " | ");
        const json_t *u = json_object_get(f, "unexpected_missing");
        if (json_array_size(u)) family_names_list(md, u, 3);
        else str_add(md, u ? "none" : "—");
        str_add(md, " | ");
        const json_t *m = r->metrics;
        if (m && json_array_size(m)) {
            const json_t *l0 = json_object_get(json_array_get(m, 0), "loss");
            const json_t *l1 = json_object_get(json_array_get(m, json_array_size(m) - 1), "loss");
            if (json_is_number(l0) && json_is_number(l1))
                str_printf(md, "%.4f → %.4f", json_number_value(l0), json_number_value(l1));
        }
        str_add(md, " |\n");
    }
    section_loss_plot(sr, report_dir, md);
}

const FamilyDef family_branch_isolation = {
    .name = "branch_isolation",
    .summary = "each NSA branch alone and all together: finite, and exactly the expected gradients missing",
    .diagnose = branch_diagnose,
    .section = branch_section,
};
