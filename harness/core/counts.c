// harness/core/counts.c — see counts.h.
#include "harness/core/counts.h"

#include "harness/core/family.h"

static int adaptive(const ScenarioRun *sr) {
    const FamilyDef *fam = family_find(sr->s->family);
    return fam && fam->execute;
}

int counts_planned(const ScenarioRun *runs, int n_runs, int *n_scenarios, Str *out) {
    int planned = 0, scen = 0;
    Str steps = {0};
    for (int i = 0; i < n_runs; i++) {
        const ScenarioRun *sr = &runs[i];
        const int n = adaptive(sr) ? sr->planned_bases : sr->n;
        planned += n;
        scen += n > 0;
        if (adaptive(sr) && n > 0) str_printf(&steps, "%s%s's", steps.len ? ", " : "", sr->s->name);
    }
    if (n_scenarios) *n_scenarios = scen;
    if (out) {
        str_printf(out, "%d case%s", planned, planned == 1 ? "" : "s");
        if (steps.len) str_printf(out, " (+ %s bisection steps)", str_c(&steps));
        str_printf(out, " in %d scenario%s", scen, scen == 1 ? "" : "s");
    }
    str_free(&steps);
    return planned;
}

int counts_steps(const ScenarioRun *runs, int n_runs, Str *out) {
    int extra = 0;
    for (int i = 0; i < n_runs; i++) {
        const ScenarioRun *sr = &runs[i];
        if (!adaptive(sr) || sr->n <= sr->planned_bases) continue;
        extra += sr->n - sr->planned_bases;
        if (out)
            str_printf(out, "; %s's %d ran as %d bisection step%s", sr->s->name, sr->planned_bases, sr->n,
                       sr->n == 1 ? "" : "s");
    }
    return extra;
}
