// harness/checks/loss_decrease.c — the `loss_decrease` check: training makes progress.
#define _POSIX_C_SOURCE 200809L

#include "harness/checks/checks.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const DROP_KEYS[] = {"check", "min_drop", NULL};

static void drop_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps) {
    check_only_keys(s, params, jpath, DROP_KEYS, ps);
    check_num_param(s, params, jpath, "min_drop", 0.0, -1e30, 1e30, ps);
    for (int c = 0; c < s->n_cases; c++)
        if (s->cases[c].cfg.steps < 2)
            scenario_problem(s, ps, jpath, 0, "loss_decrease needs at least 2 steps (case %s trains %d)",
                             s->cases[c].name, s->cases[c].cfg.steps);
}

static void drop_evaluate(const json_t *params, CaseResult *r, const ScenarioRun *sr) {
    (void)sr;
    double min_drop = check_num_param(r->s, params, "", "min_drop", 0.0, -1e30, 1e30, NULL);
    size_t n = r->metrics ? json_array_size(r->metrics) : 0;
    if (n < 2) {
        result_finding(r, "loss_decrease", 0, "fewer than 2 steps of metrics");
        return;
    }
    double first = json_number_or(json_array_get(r->metrics, 0), "loss", NAN), last = json_number_or(json_array_get(r->metrics, n - 1), "loss", NAN);
    int ok = isfinite(first) && isfinite(last) && last <= first - min_drop;
    result_finding(r, "loss_decrease", ok, "loss %.4f → %.4f (drop %.4f, required ≥ %g)", first, last, first - last, min_drop);
}

const CheckDef check_loss_decrease = {
    .name = "loss_decrease",
    .summary = "the last step's loss is at least min_drop below the first's",
    .validate = drop_validate,
    .evaluate = drop_evaluate,
};
