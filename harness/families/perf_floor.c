// harness/families/perf_floor.c — the `perf_floor` family of the regression layer
// (docs/regression.md): cases against the performance floors recorded for this device.
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "harness/families/families.h"
#include "harness/report/regression_table.h"

static void perf_diagnose(const ScenarioRun *sr, Str *md) {
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        const char *b = regression_fact_str(r, "perf_floor_baseline");
        if (b && !strcmp(b, "missing"))
            str_printf(md, "- **%s · %s**: no performance floor for this device model: SKIP (floors are per device "
                           "model, never borrowed from another's; the finding names the record command; measure the "
                           "spread with `--repeat 5`).\n",
                       sr->s->name, r->c->name);
        for (int k = 0; k < r->n_findings; k++)
            if (!strcmp(r->findings[k].check, "perf_floor") && !r->findings[k].ok)
                str_printf(md, "- **%s · %s**: %s.\n", sr->s->name, r->c->name, r->findings[k].summary);
    }
}

static void perf_section(const ScenarioRun *sr, const char *report_dir, Str *md) {
    str_printf(md, "\n## %s — against the performance floors\n\n", sr->s->name);
    regression_table(sr, 1, md);
    family_metric_plot(sr, report_dir, md, "ms", "step_time.svg", "step time", "ms", 1.0);
}

const FamilyDef family_perf_floor = {
    .name = "perf_floor",
    .summary = "tok/s, step time, peak memory and FLOPs per step against the floors recorded for this device",
    .diagnose = perf_diagnose,
    .section = perf_section,
};
