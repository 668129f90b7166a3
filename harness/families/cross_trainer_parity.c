// harness/families/cross_trainer_parity.c — cross_trainer_parity: the same case under two trainers (our
// nsa-train and, e.g., the PyTorch trainer of adapters/torch) from the same start weights
// (run.init_weights "shared") and the same batch. The checks judge (parity of the per-step
// loss and grad norm with the reference trainer's case, dump_match of the step-1 logits,
// activations and every gradient); this file reads them together: a table of how far each
// trainer is from the reference, and, for a case that fails, where the two part — the first
// differing tensor in the order a step computes it, by layer and branch.
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness/families/families.h"

static const Finding *finding_of(const CaseResult *r, const char *check, const char *contains) {
    for (int i = 0; i < r->n_findings; i++)
        if (!strcmp(r->findings[i].check, check) && (!contains || strstr(r->findings[i].summary, contains)))
            return &r->findings[i];
    return NULL;
}

static void rel_cell(Str *md, const json_t *facts, const char *key) {
    const json_t *v = json_object_get(facts, key);
    if (!json_is_number(v)) str_add(md, "—");
    else if (json_number_value(v) < 0) str_add(md, "non-finite");
    else if (json_number_value(v) == 0) str_add(md, "0 (bitwise)");
    else str_printf(md, "%.2e", json_number_value(v));
}

static void parity_section(const ScenarioRun *sr, const char *report_dir, Str *md) {
    str_printf(md, "\n## %s — each trainer against the reference trainer, from the same weights and batch\n\n",
               sr->s->name);
    str_add(md, "Relative differences to the reference case (the same configuration under the reference trainer): "
                "the per-step loss and gradient norm (largest over the steps), and the step-1 tensors (logits, "
                "activations, every gradient: the largest relative difference of any tensor).\n\n");
    str_add(md, "| case | trainer | verdict | reference | loss | grad norm | tensors (worst) | tolerance | first differing "
                "tensor |\n|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        const json_t *f = r->facts;
        str_printf(md, "| %s | %s | %s | ", r->c->name, r->trainer[0] ? r->trainer : "nsa-train",
                   VERDICT_NAMES[r->verdict]);
        const json_t *ref = json_object_get(f, "dump_reference");
        if (!ref) ref = json_object_get(f, "parity_reference");
        str_add(md, json_is_string(ref) ? json_string_value(ref) : (r->is_reference ? "(is the reference)" : "—"));
        str_add(md, " | ");
        rel_cell(md, f, "parity_max_rel");
        str_add(md, " | ");
        rel_cell(md, f, "parity_max_rel_grad_norm");
        str_add(md, " | ");
        rel_cell(md, f, "dump_worst_rel");
        str_add(md, " | ");
        const json_t *tol = json_object_get(f, "dump_tolerance");
        if (json_is_number(tol)) str_printf(md, "%g", json_number_value(tol));
        else str_add(md, "—");
        str_add(md, " | ");
        const json_t *fd = json_object_get(f, "dump_first_differ");
        if (fd)
            str_printf(md, "`%s` (%s)", json_string_value(json_object_get(fd, "tensor")),
                       json_string_value(json_object_get(fd, "where")));
        else str_add(md, json_is_number(tol) ? "none" : "—");
        str_add(md, " |\n");
    }
    section_loss_plot(sr, report_dir, md);
}

static void parity_diagnose(const ScenarioRun *sr, Str *md) {
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        if (r->verdict != V_FAIL) continue;
        const json_t *f = r->facts, *fd = json_object_get(f, "dump_first_differ");
        const Finding *lp = finding_of(r, "parity", "loss"), *dm = finding_of(r, "dump_match", NULL);
        str_printf(md, "- **%s · %s** (trainer `%s`): ", sr->s->name, r->c->name, r->trainer[0] ? r->trainer : "nsa-train");
        if (fd) {
            str_printf(md, "the two trainers part first at `%s` (%s, relative %.2e against tolerance %g)",
                       json_string_value(json_object_get(fd, "tensor")), json_string_value(json_object_get(fd, "where")),
                       json_number_value(json_object_get(fd, "rel")), json_number_value(json_object_get(f, "dump_tolerance")));
            const char *t = json_string_value(json_object_get(fd, "tensor"));
            if (t && !strncmp(t, "grads.", 6))
                str_add(md, ": the forward agrees (logits and activations within tolerance), so the difference is in "
                            "the backward — the gradient of this tensor, computed after everything of the head side "
                            "agreed (gradients are listed from the head back to the embedding)");
            else if (t && !strncmp(t, "acts.", 5))
                str_add(md, ": the forward already differs there — every later activation, the logits and the gradients "
                            "inherit it; look at this layer's computation of that activation first");
            if (lp && lp->ok) str_add(md, "; the loss still agrees, which only the tensor-by-tensor comparison sees");
            str_add(md, ".\n");
        } else if (dm && !dm->ok) {
            str_printf(md, "%s.\n", dm->summary);
        } else if (lp && !lp->ok) {
            str_printf(md, "%s.\n", lp->summary);
        } else {
            str_add(md, "see its findings.\n");
        }
    }
}

const FamilyDef family_cross_trainer_parity = {
    .name = "cross_trainer_parity",
    .summary = "the same case under two trainers from the same weights and batch: loss, grad norm and "
               "every step-1 tensor against the reference trainer's; the first tensor where they part",
    .diagnose = parity_diagnose,
    .section = parity_section,
};
