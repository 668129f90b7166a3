// harness/checks/reference.c — see reference.h.
#define _POSIX_C_SOURCE 200809L

#include "harness/checks/reference.h"
#include "harness/core/family.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// "reference": a case glob that matches exactly one case of the scenario (or a case its
// family creates), or one case per value of the other axes (each other case then has
// exactly one closest by reference_score).

void check_reference_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps) {
    const json_t *ref = json_object_get(params, "reference");
    char kp[256];
    snprintf(kp, sizeof kp, "%s.reference", jpath);
    if (!ref || !json_is_string(ref) || !json_string_value(ref)[0]) {
        scenario_problem(s, ps, ref ? kp : jpath, 0, "%s needs \"reference\": the case (name or glob) it compares with",
                         json_string_value(json_object_get(params, "check")));
        return;
    }
    const char *g = json_string_value(ref);
    int hits = 0, gen = 0;
    for (int c = 0; c < s->n_cases; c++) hits += scenario_case_matches(&s->cases[c], g);
    const FamilyDef *fam = family_find(s->family);
    if (fam && fam->generated_names)
        for (const char *const *n = fam->generated_names(); n && *n; n++) gen += fnmatch(g, *n, 0) == 0;
    if (hits + gen == 0 || (hits + gen > 1 && gen)) {
        scenario_problem(s, ps, kp, 0, "reference '%s' matches %d cases of this scenario; it must match exactly one", g,
                         hits + gen);
        return;
    }
    // several references (one per value of the other axes, e.g. "*trainer=nsa-train" over a
    // precision axis): every other case must have exactly one closest (reference_score)
    for (int c = 0; hits > 1 && c < s->n_cases; c++) {
        const Case *x = &s->cases[c];
        if (scenario_case_matches(x, g)) continue;
        int best = -1, n_best = 0, first = -1, second = -1;
        for (int k = 0; k < s->n_cases; k++) {
            if (!scenario_case_matches(&s->cases[k], g)) continue;
            int sc = check_reference_score(s, x, &s->cases[k]);
            if (sc > best) { best = sc; n_best = 1; first = k; }
            else if (sc == best && ++n_best == 2) second = k;
        }
        if (n_best > 1) {
            scenario_problem(s, ps, kp, 0, "reference '%s' matches %d cases, and case %s is as close to %s as to %s: "
                             "the reference must leave one case per value of the other axes", g, hits, x->name,
                             s->cases[first].name, s->cases[second].name);
            return;
        }
    }
}

// The reference result for case r, or NULL with a finding explaining why.
const CaseResult *check_reference_of(const json_t *params, CaseResult *r, const ScenarioRun *sr, const char *check) {
    const char *g = json_string_value(json_object_get(params, "reference"));
    if (fnmatch(g, r->c->name, 0) == 0) return NULL;   // this is the reference: nothing to compare
    // several finished cases may match (one reference per base case, e.g. the
    // baselines of a GC bisection over a matrix, or one per precision): the one whose
    // labels agree with this case's on the most axes, then whose name shares the
    // longest prefix with this case's, is its own (reference_score)
    const CaseResult *ref = NULL;
    int best = 0;
    for (int i = 0; i < sr->done; i++) {
        const CaseResult *q = &sr->results[i];
        if (q == r || fnmatch(g, q->c->name, 0) != 0) continue;
        int k = check_reference_score(r->s, r->c, q->c);
        if (!ref || k > best) {
            ref = q;
            best = k;
        }
    }
    if (!ref) {
        result_finding(r, check, 0, "reference case %s has not run (filtered out?)", g);
        return NULL;
    }
    if (ref->verdict == V_HANG || ref->verdict == V_CRASH || ref->verdict == V_ERROR || ref->verdict == V_SKIP) {
        result_finding(r, check, 0, "reference case %s did not finish (%s): nothing to compare with", ref->c->name,
                       VERDICT_NAMES[ref->verdict]);
        return NULL;
    }
    return ref;
}

// "tolerance" of parity and dump_match: a number in [0, 1], per profile ({"ci": x, "gpu": y}),
// and within a profile optionally per case: an object of case-name globs -> numbers, the
// first glob (in file order) that matches the case wins, e.g. {"*precision=fp32*": 1e-4,
// "*precision=bf16*": 3e-2}; every case of the scenario must match one. validate: s and ps
// (problems reported, returns 0); evaluate: the case's name (returns its tolerance).
double check_tolerance_of(const Scenario *s, const json_t *params, const char *jpath, const char *case_name,
                           Problems *ps) {
    const json_t *v = json_object_get(params, "tolerance");
    const json_t *pick = v;
    char kp[400];
    snprintf(kp, sizeof kp, "%s.tolerance", jpath);
    if (json_is_object(v) && (json_object_get(v, "ci") || json_object_get(v, "gpu"))) {
        pick = s ? json_object_get(v, PROFILE_NAMES[s->cur_profile]) : NULL;
        size_t kl = strlen(kp);
        if (s) snprintf(kp + kl, sizeof kp - kl, ".%s", PROFILE_NAMES[s->cur_profile]);
    }
    if (!json_is_object(pick)) return check_num_param(s, params, jpath, "tolerance", 0, -1e-300, 1, ps);
    const char *g;
    json_t *t;
    json_object_foreach((json_t *)pick, g, t) {
        if (ps && (!json_is_number(t) || json_number_value(t) < 0 || json_number_value(t) > 1))
            scenario_problem(s, ps, kp, 0, "tolerance for cases '%s': expected a number in [0, 1]", g);
        if (case_name && fnmatch(g, case_name, 0) == 0) return json_number_value(t);
    }
    for (int c = 0; ps && c < s->n_cases; c++) {
        int hit = 0;
        json_object_foreach((json_t *)pick, g, t) hit |= scenario_case_matches(&s->cases[c], g);
        if (!hit) {
            scenario_problem(s, ps, kp, 0, "tolerance: case %s matches none of its case globs", s->cases[c].name);
            break;
        }
    }
    return 0;
}

int check_close_enough(double a, double b, double tol) {
    if (tol == 0) return a == b || (isnan(a) && isnan(b));
    double m = fmax(fabs(a), fabs(b));
    return fabs(a - b) <= tol * (m > 0 ? m : 1);
}
