// harness/exec/run_cases.h — running a run's planned cases, one at a time or several at once.
//
// With jobs = 1 every case runs in the report's order in this thread, as it always has.
// With jobs > 1 (`nsa-harness run -j N`, `-j auto`) independent cases run side by side,
// each in a thread of this process that starts and supervises its trainer processes as
// one case alone would (harness/exec/runner.h), under the scheduler of harness/exec/schedule.h:
//   - a case on the GPU holds as many GPUs as it has ranks; its ranks see only those, and up to
//     cases_per_gpu cases share one GPU (--cases-per-gpu, auto: one per 24 GiB of memory);
//     a case needing more GPUs than are free holds back cases needing fewer;
//   - cores are divided: each case's ranks get OMP_NUM_THREADS of max(1, cores / jobs)
//     (a W-rank case W times that, within the machine), so cases never oversubscribe them;
//   - a case that compares with another (parity, dump_match: its reference) starts after it;
//   - timing-sensitive cases — a perf_floor check, a growth check of a time metric, a
//     self-test detection of a hang or with a scaled-down timeout — run last, one at a time,
//     with the machine to themselves;
//   - a scenario whose family creates its cases as it runs (gc_bisection) is one job: its
//     cases run one after the other;
//   - other runs on the machine: a running case of a run on GPUs (with -j 1 too) holds its
//     GPUs' lock files (and one of each GPU's cases_per_gpu slot files) and the machine's
//     (shared; exclusively for a timing-sensitive case), so runs side by side never put more
//     cases on a GPU than it takes ($NSA_HARNESS_LOCK_DIR, else $TMPDIR, else /tmp).
// The reports keep the plan's order whatever finishes first: a case shows in RESULTS.md,
// summary.json and junit.xml once every case before it in its scenario has finished (until
// then it is PENDING), and the console line of each case carries its place in the plan.
#ifndef NSA_HARNESS_RUN_CASES_H
#define NSA_HARNESS_RUN_CASES_H
#include <signal.h>
#include <stdio.h>

#include "harness/report/report.h"
#include "harness/exec/runner.h"
#include "common/util.h"

typedef struct {
    Report *rp;
    const RunCtx *ctx;                    // the run's context; each case gets its own copy
    FILE *con;                            // progress lines, or NULL (--quiet)
    int tty;                              // con is a terminal
    const StrList *filters, *exact;       // --filter, --case (the bases of a family that creates cases)
    int jobs;                             // cases at a time (>= 1)
    int cases_per_gpu;                    // cases that may share one GPU (>= 1)
    volatile sig_atomic_t *interrupted;   // Ctrl-C: no case starts after it
} RunCasesOpts;

// Is the case selected: no --filter and no --case given, a --filter pattern matches (fnmatch
// on the case, scenario/case or the scenario; without * ? [ a substring of scenario/case), or
// a --case names exactly "scenario/case"?
int case_selected(const StrList *filters, const StrList *exact, const char *scenario, const char *cname);

// Run every planned case (and the cases families create) until done or interrupted,
// rewriting the report after each.
void run_cases_all(const RunCasesOpts *o);

// Rewrite the report; on a full disk from the folder's ballast (harness/report/outdir.h). 0 or -1 (errno).
int run_write_report(Report *rp);

// The GPUs a case holds when cases run side by side (0: a case of the CPU), whether it must
// have the machine to itself, and its ranks. gpus_here: the run's usable GPUs.
void run_case_needs(const Scenario *s, const Case *c, const char *profile, int gpus_here, int *gpus, int *exclusive,
                    int *ranks);
#endif
