// harness/checks/parity.c — the `parity` check: a per-step metric (loss, grad_norm) equals the
// reference case's at every step; the first diverging step.
#define _POSIX_C_SOURCE 200809L

#include "harness/checks/checks.h"
#include "harness/checks/reference.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const PARITY_KEYS[] = {"check", "reference", "metric", "tolerance", NULL};

static void parity_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps) {
    check_only_keys(s, params, jpath, PARITY_KEYS, ps);
    check_reference_validate(s, params, jpath, ps);
    const json_t *m = json_object_get(params, "metric");
    if (m && (!json_is_string(m) || (strcmp(json_string_value(m), "loss") && strcmp(json_string_value(m), "grad_norm")))) {
        char kp[256];
        snprintf(kp, sizeof kp, "%s.metric", jpath);
        scenario_problem(s, ps, kp, 0, "metric: expected \"loss\" or \"grad_norm\"");
    }
    check_tolerance_of(s, params, jpath, NULL, ps);
}

// Per-step parity of a metric with the reference case: the first step that
// differs (beyond the tolerance; 0 = bitwise) localises where two runs part.
static void parity_evaluate(const json_t *params, CaseResult *r, const ScenarioRun *sr) {
    const CaseResult *ref = check_reference_of(params, r, sr, "parity");
    if (!ref) return;
    const char *metric = json_is_string(json_object_get(params, "metric")) ? json_string_value(json_object_get(params, "metric")) : "loss";
    const double tol = check_tolerance_of(r->s, params, "", r->c->name, NULL);
    size_t na = r->metrics ? json_array_size(r->metrics) : 0, nb = ref->metrics ? json_array_size(ref->metrics) : 0;
    size_t n = na < nb ? na : nb;
    if (n == 0) {
        result_finding(r, "parity", 0, "no %s to compare (%zu steps here, %zu in %s)", metric, na, ref->c->name[0] ? nb : 0, ref->c->name);
        return;
    }
    int first = -1, ndiff = 0;
    double fa = 0, fb = 0, maxrel = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(r->metrics, i), *y = json_array_get(ref->metrics, i);
        double a = json_number_or(x, metric, NAN), b = json_number_or(y, metric, NAN);
        double m = fmax(fabs(a), fabs(b)), rel = m > 0 ? fabs(a - b) / m : 0;
        if (rel > maxrel || isnan(rel)) maxrel = isnan(rel) ? INFINITY : rel;
        if (!check_close_enough(a, b, tol)) {
            ndiff++;
            if (first < 0) {
                first = (int)json_number_or(x, "step", (double)i + 1);
                fa = a;
                fb = b;
            }
        }
    }
    // facts: parity_reference, parity_steps, parity_max_rel, first_diverging_step for the
    // loss; the same names + "_<metric>" for another metric (a scenario may check both)
    char sfx[32] = "", key[64];
    if (strcmp(metric, "loss")) snprintf(sfx, sizeof sfx, "_%s", metric);
#define PARITY_FACT(name, value) (snprintf(key, sizeof key, "%s%s", name, sfx), json_object_set_new(r->facts, key, value))
    PARITY_FACT("parity_reference", json_string(ref->c->name));
    PARITY_FACT("parity_steps", json_integer((json_int_t)n));
    PARITY_FACT("parity_max_rel", json_real(isfinite(maxrel) ? maxrel : -1));
    PARITY_FACT("parity_tolerance", json_real(tol));
    if (first >= 0) {
        PARITY_FACT("first_diverging_step", json_integer(first));
        Finding *f = result_finding(r, "parity", 0, "%s diverges from %s at step %d (%.9g vs %.9g); %d of %zu steps differ",
                                    metric, ref->c->name, first, fa, fb, ndiff, n);
        str_printf(&f->details, "- tolerance %s; max relative difference %.3g over %zu steps\n",
                   tol == 0 ? "0 (bitwise)" : "relative", maxrel, n);
        if (na != nb) str_printf(&f->details, "- step counts differ: %zu here, %zu in %s\n", na, nb, ref->c->name);
    } else {
        char how[96];
        if (tol == 0) snprintf(how, sizeof how, "bitwise");
        else snprintf(how, sizeof how, "within relative %g; max %.2g", tol, maxrel);
        result_finding(r, "parity", na == nb, "%s equal to %s at all %zu steps (%s)", metric, ref->c->name, n, how);
    }
#undef PARITY_FACT
}

const CheckDef check_parity = {
    .name = "parity",
    .summary = "a per-step metric (loss) equals the reference case's at every step; the first diverging step",
    .validate = parity_validate,
    .evaluate = parity_evaluate,
    .cross_case = 1,
};
