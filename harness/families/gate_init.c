// harness/families/gate_init.c — the `gate_init` family: the gate's initial weights and outputs per
// layer and branch.
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/nsa_names.h"
#include "harness/families/families.h"
#include "harness/report/plot.h"

static void gate_diagnose(const ScenarioRun *sr, Str *md) {
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        if (r->verdict != V_FAIL) continue;
        const json_t *f = r->facts, *uni = json_object_get(f, "gate_uniform_layers");
        const json_t *col = json_object_get(f, "gate_collapsed_layers"), *fc2 = json_object_get(f, "gate_bad_fc2_layers");
        double want = json_number_value(json_object_get(f, "gate_expected_fc2_std"));
        if (json_array_size(uni)) {
            const json_t *layers = json_object_get(f, "gate_layers");
            double w0 = json_number_value(json_object_get(json_array_get(layers, 0), "fc2_weight_std"));
            str_printf(md, "- **%s · %s**: the gate is exactly uniform in %zu of %zu layers (", sr->s->name, r->c->name,
                       json_array_size(uni), json_array_size(layers));
            family_names_list(md, uni, 24);
            str_printf(md, "): every output is %.6f for cmp, sel and win with zero spread", 
                       json_number_value(json_object_get(f, "gate_uniform_value")));
            if (json_array_size(fc2))
                str_printf(md, ", and gate.fc2's weights have std %.3g where Xavier(gain 0.1) gives %.4g", w0, want);
            str_add(md, ". The gate's last layer starts at zero, so its logits are constant: NSA begins as an "
                        "unweighted mean of the three branches and the gate learns only from that point. Check the "
                        "initialisation of ");
            const char *own = json_string_value(json_object_get(json_array_get(layers, 0), "fc2_name"));
            if (own) str_printf(md, "`%s` (the gate's last layer in the trainer's own names).\n", own);
            else str_add(md, "`blocks.*.attn.gate.fc2` (DESIGN: Xavier-uniform gain 0.1, bias 0).\n");
        } else if (json_array_size(col)) {
            str_printf(md, "- **%s · %s**: gate output spread below the threshold in layers ", sr->s->name, r->c->name);
            family_names_list(md, col, 24);
            str_add(md, ": the gate starts nearly uniform there (not exactly: fc2 is not zero).\n");
        } else if (json_array_size(fc2)) {
            str_printf(md, "- **%s · %s**: gate.fc2 init std outside the Xavier expectation %.4g in layers ", sr->s->name,
                       r->c->name, want);
            family_names_list(md, fc2, 24);
            str_add(md, ".\n");
        }
    }
}

static void gate_section(const ScenarioRun *sr, const char *report_dir, Str *md) {
    str_printf(md, "\n## %s — gate statistics at initialisation\n", sr->s->name);
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        const json_t *layers = json_object_get(r->facts, "gate_layers");
        if (!json_array_size(layers)) continue;
        int nl = (int)json_array_size(layers);
        const json_t *want = json_object_get(r->facts, "gate_expected_fc2_std");
        if (json_is_number(want))
            str_printf(md, "\n**%s** (%s): expected fc2 weight std %.4g\n\n", r->c->name, VERDICT_NAMES[r->verdict],
                       json_number_value(want));
        else   // "fc2_gain": null: the trainer's own init
            str_printf(md, "\n**%s** (%s): fc2 weight std not compared (fc2_gain null)\n\n", r->c->name,
                       VERDICT_NAMES[r->verdict]);
        str_add(md, "| layer | fc2 weight std | out std cmp | out std sel | out std win | out mean cmp / sel / win |\n"
                    "|---|---|---|---|---|---|\n");
        double *vals = xcalloc((size_t)nl * NSA_NBRANCH, sizeof(double));
        char **labels = xcalloc((size_t)nl, sizeof(char *));
        for (int L = 0; L < nl; L++) {
            const json_t *row = json_array_get(layers, (size_t)L);
            const json_t *sd = json_object_get(row, "out_std"), *mu = json_object_get(row, "out_mean");
            str_printf(md, "| %lld | %.4g |", (long long)json_integer_value(json_object_get(row, "layer")),
                       json_number_value(json_object_get(row, "fc2_weight_std")));
            for (int b = 0; b < NSA_NBRANCH; b++) {
                vals[L * NSA_NBRANCH + b] = json_number_value(json_array_get(sd, (size_t)b));
                str_printf(md, " %.3g |", vals[L * NSA_NBRANCH + b]);
            }
            str_printf(md, " %.6f / %.6f / %.6f |\n", json_number_value(json_array_get(mu, 0)),
                       json_number_value(json_array_get(mu, 1)), json_number_value(json_array_get(mu, 2)));
            Str lb = {0};
            str_printf(&lb, "L%lld", (long long)json_integer_value(json_object_get(row, "layer")));
            labels[L] = str_take(&lb);
        }
        char dir[4096], path[4600], title[700], fname[400];
        snprintf(dir, sizeof dir, "%s/%s", report_dir, sr->s->name);
        mkdir_p(dir);
        snprintf(fname, sizeof fname, "gate_%s.svg", r->c->dir);
        for (char *p = fname; *p; p++)
            if (*p == '=' || *p == ',') *p = '_';
        snprintf(path, sizeof path, "%s/%s", dir, fname);
        snprintf(title, sizeof title, "%s · %s: gate output std per layer and branch", sr->s->name, r->c->name);
        const char *bars[NSA_NBRANCH] = {nsa_branch_name(NSA_BR_CMP), nsa_branch_name(NSA_BR_SEL),
                                         nsa_branch_name(NSA_BR_WIN)};
        if (plot_bars(path, title, "std of gate output (log)", (const char *const *)labels, nl, bars, NSA_NBRANCH,
                      vals, 1) == 0)
            str_printf(md, "\n![gate output std, %s](%s/%s)\n", r->c->name, sr->s->name, fname);
        for (int L = 0; L < nl; L++) free(labels[L]);
        free(labels);
        free(vals);
    }
}

const FamilyDef family_gate_init = {
    .name = "gate_init",
    .summary = "the gate's initial weights and outputs per layer and branch: not zero, not uniform",
    .diagnose = gate_diagnose,
    .section = gate_section,
};
