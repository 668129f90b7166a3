// harness/checks/finite.c — the `finite` check: loss and gradient norm finite at every step; on a
// non-finite value, the first non-finite tensor (anomaly.json, docs/diagnostics.md).
#define _POSIX_C_SOURCE 200809L

#include "harness/checks/checks.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const FINITE_KEYS[] = {"check", NULL};

static void finite_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps) {
    check_only_keys(s, params, jpath, FINITE_KEYS, ps);
}

static void finite_evaluate(const json_t *params, CaseResult *r, const ScenarioRun *sr) {
    (void)params;
    (void)sr;
    if (r->anomaly) {
        const json_t *a = r->anomaly, *pos = json_object_get(a, "position");
        Finding *f = result_finding(
            r, "finite", 0, "non-finite at step %d: %s (layer %d, branch %s, op %s, t=%d)",
            (int)json_number_or(a, "step", -1), json_string_value(json_object_get(a, "tensor")), (int)json_number_or(a, "layer", -1),
            json_string_value(json_object_get(a, "branch")) && json_string_value(json_object_get(a, "branch"))[0]
                ? json_string_value(json_object_get(a, "branch"))
                : "-",
            json_string_value(json_object_get(a, "op")), (int)json_number_or(pos, "t", -1));
        char *js = json_dumps(a, JSON_COMPACT);
        str_printf(&f->details, "- first non-finite tensor (anomaly.json): `%s`\n", js ? js : "?");
        free(js);
        json_object_set_new(r->facts, "first_nonfinite", json_deep_copy(a));
        return;
    }
    if (!r->metrics || json_array_size(r->metrics) == 0) {
        result_finding(r, "finite", 0, "no metrics were written (metrics.jsonl missing or empty)");
        return;
    }
    size_t i, n = json_array_size(r->metrics);
    json_t *m;
    double first = NAN, last = NAN;
    int skipped = 0;
    json_array_foreach(r->metrics, i, m) {
        if (json_is_true(json_object_get(m, "skipped"))) {   // fp16 overflow: a skipped step, not an error
            skipped++;
            continue;
        }
        double loss = json_number_or(m, "loss", NAN), gn = json_number_or(m, "grad_norm", NAN);
        if (!isfinite(loss) || !isfinite(gn) || json_is_true(json_object_get(m, "anomaly"))) {
            result_finding(r, "finite", 0, "step %d: loss %g, grad norm %g", (int)json_number_or(m, "step", -1), loss, gn);
            return;
        }
        if (isnan(first)) first = loss;
        last = loss;
    }
    result_finding(r, "finite", 1, "loss %.4g → %.4g over %zu steps, all finite%s", first, last, n,
                   skipped ? " (fp16 overflow steps skipped)" : "");
}

const CheckDef check_finite = {
    .name = "finite",
    .summary = "loss and gradient norm finite at every step; on a non-finite value, the first non-finite tensor",
    .validate = finite_validate,
    .evaluate = finite_evaluate,
};
