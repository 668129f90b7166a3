// harness/report/regression_table.h — the regression table of a run (RESULTS.md and the
// golden_regression and perf_floor families' sections; docs/regression.md): every case a golden
// or perf_floor check compared — first diverging step, cause, where; metric vs floor — read from
// the facts those checks record.
#ifndef NSA_HARNESS_REPORT_REGRESSION_TABLE_H
#define NSA_HARNESS_REPORT_REGRESSION_TABLE_H
#include "harness/core/result.h"

// The table of runs[0 .. n_runs) into md; nothing when no case was compared.
void regression_table(const ScenarioRun *runs, int n_runs, Str *md);
// Did the golden check compare this case with a baseline (it finished, PASS or FAIL)?
int regression_golden_compared(const CaseResult *r);
// A string fact of the case (CaseResult.facts[k]), or NULL.
const char *regression_fact_str(const CaseResult *r, const char *k);
#endif
