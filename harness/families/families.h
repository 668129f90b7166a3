// harness/families/families.h — the families that live in files of their own
// (family_*.c, selftest.c), for the table in families.c. Shared helpers too.
#ifndef NSA_HARNESS_FAMILY_IMPL_H
#define NSA_HARNESS_FAMILY_IMPL_H
#include "harness/core/family.h"
#include "harness/exec/runner.h"

// gc_bisection (family_gc_bisection.c)
void gcb_execute(FamilyExec *fx);
void gcb_diagnose(const ScenarioRun *sr, Str *md);
void gcb_section(const ScenarioRun *sr, const char *report_dir, Str *md);
const char *const *gcb_generated_names(void);

// prefill_step5 (family_prefill.c)
void prefill_diagnose(const ScenarioRun *sr, Str *md);
void prefill_section(const ScenarioRun *sr, const char *report_dir, Str *md);

// seqlen_nan_sweep (family_seqlen.c)
void sweep_diagnose(const ScenarioRun *sr, Str *md);
void sweep_section(const ScenarioRun *sr, const char *report_dir, Str *md);

// ddp_onestep (family_ddp.c)
void ddp_diagnose(const ScenarioRun *sr, Str *md);
void ddp_section(const ScenarioRun *sr, const char *report_dir, Str *md);

// cross_trainer_parity (family_parity.c)
void parity_diagnose(const ScenarioRun *sr, Str *md);
void parity_section(const ScenarioRun *sr, const char *report_dir, Str *md);

// golden_regression and perf_floor (family_regression.c)
void golden_diagnose(const ScenarioRun *sr, Str *md);
void golden_section(const ScenarioRun *sr, const char *report_dir, Str *md);
void perf_diagnose(const ScenarioRun *sr, Str *md);
void perf_section(const ScenarioRun *sr, const char *report_dir, Str *md);

// selftest (selftest.c; its file schema, the detections, in family_selftest.c)
int selftest_load(ScenarioLoader *ld);
void selftest_run_case(const RunCtx *ctx, CaseResult *r);
void selftest_needs(const Scenario *s, const Case *c, const char *profile, int gpus_here, int *gpus, int *exclusive,
                    int *ranks);
void selftest_diagnose(const ScenarioRun *sr, Str *md);
void selftest_section(const ScenarioRun *sr, const char *report_dir, Str *md);

// helpers (families.c)
const char *family_label_on(const ScenarioRun *sr, int i, const char *axis);
void family_names_list(Str *s, const json_t *arr, int max);
// A line chart of a per-step metric (metrics.jsonl key) of every case with
// metrics, written to report_dir/<scenario>/<file>; appends the image link.
void family_metric_plot(const ScenarioRun *sr, const char *report_dir, Str *md, const char *metric,
                        const char *file, const char *title, const char *ylabel, double scale);
#endif
