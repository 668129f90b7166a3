// harness/report/report.h — the run's reports: RESULTS.md (for people), summary.json
// (for programs), junit.xml (for CI systems) and, when $GITHUB_STEP_SUMMARY is
// set, the verdict table appended there. All three files are rewritten after
// every case (write to a temporary, then rename), so a run that is killed leaves
// a complete, readable report of the cases done so far, marked partial.
#ifndef NSA_HARNESS_REPORT_H
#define NSA_HARNESS_REPORT_H
#include <jansson.h>

#include "harness/core/family.h"

typedef struct {
    char file[1024];
    char *problems;          // newline-separated "file:line:col: message"
} InvalidScenario;

typedef struct {
    char dir[2048];          // the report directory
    char started[32];        // UTC ISO time
    double t0;               // mono_s() at the start
    char sha[48];
    int dirty;
    const char *profile;
    const char *faults;      // injected faults ("a, b"), or "" 
    char *command;           // the runner's command line
    char device[512];        // one-line device summary
    ScenarioRun *runs;
    int n_runs;
    InvalidScenario *invalid;
    int n_invalid;
    const json_t *env;       // the top-level env.json object
    int done, total;         // cases finished / planned
    int finished;            // the run ended normally
    int interrupted;
    int exit_code;           // valid when finished or interrupted
    // the disk holding dir ran out of space (harness/report/outdir.h): no case started after
    // it; the cases not run are ERROR "not run: disk full ..."
    int disk_full;
    int disk_full_after;     // cases done when it was found
    char disk_full_why[5000];   // "the disk holding DIR (tmpfs mounted on /x) is full: 12 KiB free"
} Report;

// Rewrite RESULTS.md, summary.json and junit.xml. Returns 0 or -1 (I/O; errno).
int report_write(const Report *rp);
// Append the verdict table to $GITHUB_STEP_SUMMARY if set. 0 or -1.
int report_github_summary(const Report *rp);
// The verdict row k of a scenario run shows in every report (RESULTS.md, summary.json,
// junit.xml, the step summary), in every state of the run: a case that ran shows its
// verdict; one not reached yet is PENDING while the run goes on, and SKIP (its summary
// says "not run: interrupted") once the run stopped. *summary: the row's text.
int report_row_verdict(const Report *rp, const ScenarioRun *sr, int k, const char **summary);
// Counts of the rows' verdicts over every case, run or not (invalid scenarios count
// as ERROR): what every report's totals say.
void report_counts(const Report *rp, int counts[V_COUNT]);
#endif
