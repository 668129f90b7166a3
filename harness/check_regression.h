// harness/check_regression.h — the checks that compare a case with a known-good
// past (docs/regression.md): `golden` (the numerics: the loss curve, the step-1
// dump, gate statistics) and `perf_floor` (tok/s, step time, peak memory, FLOPs),
// each against the case's baseline under golden/baselines/ (harness/baseline.h).
// checks.c lists them in its table.
#ifndef NSA_HARNESS_CHECK_REGRESSION_H
#define NSA_HARNESS_CHECK_REGRESSION_H
#include <jansson.h>

#include "harness/result.h"
#include "harness/scenario.h"

void golden_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps);
void golden_evaluate(const json_t *params, CaseResult *r, const ScenarioRun *sr);
void perf_floor_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps);
void perf_floor_evaluate(const json_t *params, CaseResult *r, const ScenarioRun *sr);

// Shared by both: the case's baseline file, loaded, or NULL after a SKIP finding
// (none recorded: the exact command that records it) or an ERROR finding (not a
// baseline; one recorded for another config digest: "re-record: ..."). path gets the
// file's path either way.
json_t *regression_baseline_for(CaseResult *r, const char *check, char *path, size_t n);
// The case's baseline and the case summarised the same way (harness/baseline.h), for a
// regression check: 0 with both (json_decref them), or -1 after a finding — recording
// (nothing to compare), no usable baseline (SKIP / ERROR), or no summary (FAIL).
int regression_prepare(CaseResult *r, const char *check, char *path, size_t n, json_t **base, json_t **cur);
// The command that (re)records the case's baseline, shell-quoted, into out.
void regression_record_command(const CaseResult *r, char *out, size_t n);
#endif
