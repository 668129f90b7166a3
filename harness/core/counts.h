// harness/core/counts.h — how many cases a run has, said the same way everywhere: the run's first
// and last console lines, RESULTS.md's counts line and `list`. A family that creates its cases
// while it runs (an `execute` hook: gc_bisection's bisection) is planned as one case per base
// case, as `list` shows it, and runs as one or more steps each: the plan says
// "66 cases (+ gc_bisection's bisection steps)", and a finished run
// "66 cases; gc_bisection's 1 ran as 2 bisection steps" beside its 67 verdicts.
#ifndef NSA_HARNESS_COUNTS_H
#define NSA_HARNESS_COUNTS_H
#include "common/util.h"
#include "harness/core/result.h"

// Of the scenario runs runs[0 .. n_runs): the planned cases (each base of an adaptive family
// counts one), the scenarios with at least one, and "66 cases (+ gc_bisection's bisection
// steps) in 10 scenarios" into out (when not NULL).
int counts_planned(const ScenarioRun *runs, int n_runs, int *n_scenarios, Str *out);
// After (or while) running: "; gc_bisection's 1 ran as 2 bisection steps" for each adaptive
// family that made more steps than bases, into out (nothing when none did). Returns how many
// verdicts there are beyond the planned cases.
int counts_steps(const ScenarioRun *runs, int n_runs, Str *out);
#endif
