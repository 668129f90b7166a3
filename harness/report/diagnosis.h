// harness/report/diagnosis.h — what every family's diagnosis and report section share: the
// diagnosis of HANG / CRASH / ERROR cases, the loss plot and per-step metric plots, and small
// helpers for naming cases and lists.
#ifndef NSA_HARNESS_REPORT_DIAGNOSIS_H
#define NSA_HARNESS_REPORT_DIAGNOSIS_H
#include <jansson.h>

#include "harness/core/result.h"
#include "common/util.h"

// Markdown list items for the HANG / CRASH / ERROR cases of sr (where each stopped).
void diagnose_generic(const ScenarioRun *sr, Str *md);
// The training loss of every case with metrics, as loss.svg under report_dir/<scenario>/.
void section_loss_plot(const ScenarioRun *sr, const char *report_dir, Str *md);
// A line chart of a per-step metric (metrics.jsonl key) of every case with
// metrics, written to report_dir/<scenario>/<file>; appends the image link.
void family_metric_plot(const ScenarioRun *sr, const char *report_dir, Str *md, const char *metric,
                        const char *file, const char *title, const char *ylabel, double scale);
// How many of sr's cases have verdict v.
int family_count_verdict(const ScenarioRun *sr, int v);
// Case i's label on the matrix axis `axis`, or NULL.
const char *family_label_on(const ScenarioRun *sr, int i, const char *axis);
// "`a`, `b`, … (N more)": at most max names (strings or numbers) of arr, appended to s.
void family_names_list(Str *s, const json_t *arr, int max);
#endif
