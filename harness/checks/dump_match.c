// harness/checks/dump_match.c — the `dump_match` check: the step-1 dump equals the reference
// case's, tensor by tensor; the first differing tensor in the order a step computes them.
#define _POSIX_C_SOURCE 200809L

#include "harness/checks/checks.h"
#include "harness/checks/reference.h"
#include "harness/artifacts/locus.h"
#include "harness/artifacts/tensordiff.h"
#include "harness/artifacts/tensornames.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const DUMP_KEYS[] = {"check", "reference", "tensors", "except", "tolerance", NULL};

// dump_match's `except`: {case glob: [tensor globs]} — tensors not compared in the cases a
// glob matches (e.g. bf16's selected-block indices, which a near-tie may flip) — or, like
// `tolerance`, one such object per profile ({"gpu": {...}}; a profile it does not name leaves
// nothing out). The map of scenario s's current profile, or NULL.
static const json_t *dump_except_of(const Scenario *s, const json_t *params) {
    const json_t *ex = json_object_get(params, "except");
    if (json_is_object(ex) && (json_object_get(ex, "ci") || json_object_get(ex, "gpu")))
        ex = s ? json_object_get(ex, PROFILE_NAMES[s->cur_profile]) : NULL;
    return ex;
}

// Each case glob must match a case of the profile, each list be non-empty tensor globs.
static void dump_except_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps) {
    if (!json_object_get(params, "except")) return;
    const json_t *ex = dump_except_of(s, params);
    char kp[300];
    snprintf(kp, sizeof kp, "%s.except", jpath);
    if (!ex && json_is_object(json_object_get(params, "except"))) return;   // another profile's
    if (!json_is_object(ex)) {
        scenario_problem(s, ps, kp, 0, "except: expected an object {case glob: [tensor globs left out in those cases]}, "
                                       "or one per profile");
        return;
    }
    const char *cg;
    json_t *lst;
    json_object_foreach((json_t *)ex, cg, lst) {
        char ip[600];
        snprintf(ip, sizeof ip, "%s.%s", kp, cg);
        int hit = 0;
        for (int c = 0; c < s->n_cases && !hit; c++) hit = scenario_case_matches(&s->cases[c], cg);
        if (!hit) scenario_problem(s, ps, ip, 0, "except: '%s' matches no case of this profile", cg);
        int good = json_is_array(lst) && json_array_size(lst) > 0;
        size_t i;
        json_t *g;
        json_array_foreach(lst, i, g) good &= json_is_string(g) && json_string_value(g)[0] && json_string_value(g)[0] != '!';
        if (!good) scenario_problem(s, ps, ip, 0, "except: expected a non-empty list of tensor-name globs");
    }
}

// The globs dump_match compares for case c: `tensors`, then "!glob" for each tensor glob
// `except` leaves out of this case (tensordiff.c reads "!" as "not this"). A new reference,
// or NULL for every tensor.
static json_t *dump_globs_for(const Scenario *s, const json_t *params, const Case *c) {
    const json_t *t = json_object_get(params, "tensors"), *ex = dump_except_of(s, params);
    if (!json_is_object(ex)) return t ? json_incref((json_t *)t) : NULL;
    json_t *g = t ? json_deep_copy(t) : json_array();
    const char *cg;
    json_t *lst;
    json_object_foreach((json_t *)ex, cg, lst) {
        if (!scenario_case_matches(c, cg)) continue;
        size_t i;
        json_t *x;
        json_array_foreach(lst, i, x) json_array_append_new(g, json_sprintf("!%s", json_string_value(x)));
    }
    return g;
}

static void dump_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps) {
    check_only_keys(s, params, jpath, DUMP_KEYS, ps);
    check_reference_validate(s, params, jpath, ps);
    dump_except_validate(s, params, jpath, ps);
    check_tolerance_of(s, params, jpath, NULL, ps);
    const json_t *t = json_object_get(params, "tensors");
    char kp[256];
    snprintf(kp, sizeof kp, "%s.tensors", jpath);
    if (t && (!json_is_array(t) || json_array_size(t) == 0))
        scenario_problem(s, ps, kp, 0, "tensors: expected a non-empty array of tensor-name globs (e.g. [\"logits\"], [\"grads.*\"])");
    size_t i;
    json_t *g;
    json_array_foreach(t, i, g) {
        char ip[300];
        snprintf(ip, sizeof ip, "%s[%zu]", kp, i);
        if (!json_is_string(g)) {
            scenario_problem(s, ps, ip, 0, "tensors[%zu]: expected a string", i);
            continue;
        }
        // a glob that matches no tensor any case's dump holds can never hold: say so now,
        // not after training
        for (int c = 0; c < s->n_cases; c++) {
            StrList names = {0};
            dump_tensor_names(&s->cases[c].cfg, (checks_needs(s) & NEED_DUMP_ACTS) != 0, &names);
            int hit = 0;
            for (int k = 0; k < names.n && !hit; k++) hit = fnmatch(json_string_value(g), names.v[k], 0) == 0;
            strlist_free(&names);
            if (!hit) {
                scenario_problem(s, ps, ip, 0, "tensors[%zu]: '%s' matches no tensor of case %s's step dump (logits, loss, "
                                               "inputs, targets, grads.<parameter>%s; `nsa-harness list --tensors` lists them)",
                                 i, json_string_value(g), s->cases[c].name,
                                 checks_needs(s) & NEED_DUMP_ACTS ? ", acts.blocks.<L>.<activation>" : "");
                break;
            }
        }
    }
}

// Step-1 dumps (safetensors: batch, logits, loss, every gradient) compared tensor
// by tensor with the reference case's (tensordiff.h): bitwise with tolerance 0, else
// relative to the reference tensor's largest magnitude.
static void dump_evaluate(const json_t *params, CaseResult *r, const ScenarioRun *sr) {
    const CaseResult *ref = check_reference_of(params, r, sr, "dump_match");
    if (!ref) return;
    const double tol = check_tolerance_of(r->s, params, "", r->c->name, NULL);
    json_t *globs = dump_globs_for(r->s, params, r->c);
    DumpDiff d;
    char err[1024];
    int rc = dumpdiff_files(&d, r->dump_path, ref->dump_path, globs, tol, err, sizeof err);
    if (rc == DUMPDIFF_NO_CAND) result_finding(r, "dump_match", 0, "no step dump: %s", err);
    if (rc == DUMPDIFF_NO_REF) result_finding(r, "dump_match", 0, "no step dump for %s: %s", ref->c->name, err);
    if (rc != DUMPDIFF_OK) {
        dumpdiff_free(&d);
        json_decref(globs);
        return;
    }
    json_t *names = json_array(), *layers = json_array();
    for (int i = 0; i < d.n_differ; i++) json_array_append_new(names, json_string(d.differ[i].name));
    for (int i = 0; i < d.n_layers; i++) json_array_append_new(layers, json_integer(d.layers[i]));
    json_object_set_new(r->facts, "dump_reference", json_string(ref->c->name));
    json_object_set_new(r->facts, "dump_differs", names);
    json_object_set_new(r->facts, "dump_differ_layers", layers);
    json_object_set_new(r->facts, "dump_worst_rel", json_real(isfinite(d.worst) ? d.worst : -1));
    json_object_set_new(r->facts, "dump_tolerance", json_real(tol));
    const int nd = d.n_differ;
    // the first differing tensor in the order a step computes them (locus.h), where it sits, by how much
    char where[96] = "", first_rel[160] = "";
    if (d.first) {
        tensor_where(d.first->name, where, sizeof where);
        if (d.first->rel <= 1e-300) snprintf(first_rel, sizeof first_rel, "equal values, different bits (tolerance 0: bitwise)");
        else if (tol == 0) snprintf(first_rel, sizeof first_rel, "relative %.2e > 0 (bitwise)", d.first->rel);
        else snprintf(first_rel, sizeof first_rel, "relative %.2e > %g", d.first->rel, tol);
        json_t *fd = json_object();
        Locus lc = tensor_locus(d.first->name);
        json_object_set_new(fd, "tensor", json_string(d.first->name));
        json_object_set_new(fd, "layer", json_integer(lc.layer));
        json_object_set_new(fd, "where", json_string(where));
        json_object_set_new(fd, "rel", json_real(isfinite(d.first->rel) ? d.first->rel : -1));
        json_object_set_new(r->facts, "dump_first_differ", fd);
    }
    if (d.n_compared == 0) {
        result_finding(r, "dump_match", 0, "no tensor of the step dumps matched %s", globs ? "the tensors globs" : "");
    } else if (nd || d.n_missing) {
        Finding *f;
        if (nd)
            f = result_finding(r, "dump_match", 0, "%d of %d tensors differ from %s; first differing tensor: `%s` (%s): %s; "
                               "worst %s: relative %.3g", nd, d.n_compared, ref->c->name, d.first->name, where, first_rel,
                               d.differ[0].name, d.differ[0].rel);
        else f = result_finding(r, "dump_match", 0, "tensors missing or reshaped relative to %s", ref->c->name);
        if (nd) {
            str_printf(&f->details, "- tolerance %s; differing tensors in the order a step computes them (the "
                                    "forward's activations and logits, then the gradients from the head back to the "
                                    "embedding):", tol == 0 ? "0 (bitwise)" : "relative");
            for (int i = 0; i < nd && i < 24; i++) {
                const TensorDiff *t = &d.differ[d.model_order[i]];
                char w[96];
                tensor_where(t->name, w, sizeof w);
                str_printf(&f->details, "%s `%s` (%s) %.3g", i ? "," : "", t->name, w, t->rel);
            }
            if (nd > 24) str_printf(&f->details, ", … (%d more)", nd - 24);
            str_add(&f->details, "\n- largest first:");
            for (int i = 0; i < nd && i < 8; i++) str_printf(&f->details, "%s `%s` %.3g", i ? "," : "", d.differ[i].name, d.differ[i].rel);
            if (nd > 8) str_printf(&f->details, ", … (%d more)", nd - 8);
            str_add(&f->details, "\n");
        }
        if (d.n_missing) str_printf(&f->details, "- missing or with another shape/dtype here: %s\n", str_c(&d.missing));
    } else {
        char how[96];
        if (tol == 0) snprintf(how, sizeof how, "bitwise");
        else snprintf(how, sizeof how, "within relative %g; worst %.2g", tol, d.worst);
        if (d.n_compared == 1)
            result_finding(r, "dump_match", 1, "step-1 %s equal to %s's (%s)", d.ref.tensors[0].name[0] ? d.last_compared : "tensor",
                           ref->c->name, how);
        else
            result_finding(r, "dump_match", 1, "%d tensors equal to %s (%s)", d.n_compared, ref->c->name, how);
    }
    dumpdiff_free(&d);
    json_decref(globs);
}

// The activations are dumped too (--dump-acts) when one of the "tensors" globs starts with
// "acts." (the cross-trainer parity localises a forward difference by layer and branch that way).
static unsigned dump_needs_of(const json_t *params) {
    size_t i;
    json_t *g;
    json_array_foreach(json_object_get(params, "tensors"), i, g)
        if (json_is_string(g) && !strncmp(json_string_value(g), "acts.", 5)) return NEED_DUMP_ACTS;
    return 0;
}

// The tensors it compares, as --dump-tensors globs: its "tensors" ("!" globs only narrow, so
// they add nothing); the whole dump without "tensors", with "!" globs only, or with a glob
// that --dump-tensors' comma-separated list cannot say.
static int dump_tensors_of(const json_t *params, Str *globs) {
    const json_t *t = json_object_get(params, "tensors");
    if (!json_is_array(t) || !json_array_size(t)) return 0;
    int positive = 0;
    size_t k;
    json_t *g;
    json_array_foreach(t, k, g) {
        const char *glob = json_string_value(g);
        if (!glob) return 0;
        if (!glob[0] || glob[0] == '!') continue;   // matches nothing; a "not this" only narrows
        if (strchr(glob, ',')) return 0;            // not to be said in --dump-tensors' list
        check_glob_list_add(globs, glob);
        positive = 1;
    }
    return positive;
}

const CheckDef check_dump_match = {
    .name = "dump_match",
    .summary = "the step-1 dump (logits, activations, gradients) equals the reference case's, tensor by tensor; "
               "the first differing tensor in the order a step computes them, by layer and branch",
    .needs = NEED_DUMP,
    .validate = dump_validate,
    .evaluate = dump_evaluate,
    .cross_case = 1,
    .needs_of = dump_needs_of,
    .dump_tensors = dump_tensors_of,
};
