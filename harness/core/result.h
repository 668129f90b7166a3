// harness/core/result.h — what running one case produced: per-rank outcomes, the
// artifacts read back, the checks' findings and the verdict.
#ifndef NSA_HARNESS_RESULT_H
#define NSA_HARNESS_RESULT_H
#include <jansson.h>

#include "harness/core/scenario.h"
#include "common/util.h"

// A case's verdict. V_PENDING is never a result: it is what the reports show for a
// case the run has not reached yet (harness/report/report.h: report_row_verdict).
enum { V_PASS, V_FAIL, V_HANG, V_CRASH, V_SKIP, V_ERROR, V_PENDING, V_COUNT };
extern const char *const VERDICT_NAMES[V_COUNT];   // "PASS", "FAIL", ..., "PENDING"

typedef struct {
    int rank;
    int pid;                 // on its host
    char host[48];           // its host, from its flight recorder ("" until it is read)
    int remote;              // host is not the runner's: signalled through the launcher
    int exited;              // the process ended (by exit or signal)
    int exit_code;           // valid when exited && !term_signal
    int term_signal;         // the signal that ended it, or 0
    int stalled;             // the watchdog judged it stalled
    int dumped;              // it answered SIGUSR1 with a stack dump
    double heartbeat_age_s;  // at the moment the case ended (or was judged stalled)
    // last flight-recorder state (have_state: the recorder was readable)
    int have_state;
    char phase[16];
    int step;
    int layer;
    char op[48];
    long long coll_enqueued, coll_started, coll_completed;
    char coll_name[48];
    // a hang: every live rank is asked for its stack, stalled or waiting
    int signalled;           // got SIGUSR1 from the watchdog
    long long wait_seq;      // the oldest collective it enqueued and has not completed, 0 if none
    long long wait_step;     // the step that collective belongs to
    char wait_name[48];      // its name ("allreduce b11")
    char stack_top[256];     // the first frame of nsa-train's own code in its stack dump, or ""
    char log_path[2112];     // ranks/rank_R.log
    char stack_path[2112];   // stacks/rank_R.txt
    char fr_path[2112];      // ranks/rank_R.fr (flight recorder)
    char hb_path[2112];      // ranks/rank_R.hb (heartbeat file, for a trainer that lists `heartbeat`)
    int heartbeat_file;      // its liveness came from the heartbeat file (no collective counters)
} RankResult;

typedef struct {
    char check[32];          // the check that found it
    int ok;
    int verdict;             // V_PASS: judged by ok; V_SKIP / V_ERROR: the check could not
                             // judge (no baseline to compare with; a baseline of another
                             // config): the case is SKIP / ERROR unless a check failed
    char *summary;           // one line for the verdict table
    Str details;             // Markdown for the evidence section
} Finding;

typedef struct {
    const Scenario *s;
    const Case *c;
    int verdict;             // V_*
    char summary[768];       // the evidence cell of the verdict table
    Str evidence;            // Markdown: evidence of a non-PASS case (runner + findings)
    double wall_s;
    int launcher_exit;       // exit status of what the runner started (the trainer, or mpirun)
    char dir[2048];          // the case's artifact directory
    char rel_dir[1024];      // the same, relative to the report directory
    char repro[2048];        // a command that reruns just this case
    RankResult *ranks;
    int n_ranks;
    Finding *findings;
    int n_findings;
    // artifacts, parsed (NULL when absent): arrays of JSONL records, one object
    json_t *metrics, *grad_trace, *gate_stats, *anomaly;
    json_t *buckets, *rank_times;   // data parallel: buckets.jsonl, rank_times.jsonl (every rank's records)
    char dump_path[2112];    // step-1 dump (safetensors) when a check needs it, else ""
    int is_reference;        // another case's cross-case check compares against this one
    json_t *facts;           // structured outcomes (for diagnosis and summary.json)
    json_t *env;             // the trainer's --print-env for this case (env.json), or NULL
    const struct RunCtx *ctx;   // how the run was asked for (runner.h), while it runs
    char trainer[64];        // the name of the trainer that ran it ("nsa-train": the run's default), "" before
    int finished;            // it ran (or was judged unable to): final, shown once every case before it is
} CaseResult;

// The results of one scenario's cases, in the order they run (the matrix's, with
// reference cases first; a family's execute hook may append cases it creates).
// Cases not run yet have no artifacts.
typedef struct ScenarioRun {
    const Scenario *s;
    CaseResult *results;   // [cap]
    int n;                 // planned (and created) cases
    int cap;
    int done;              // the finished cases the reports show: results[0 .. done) (cases side by side
                           // may finish out of order: one shows once every case before it has)
    Case **owned;          // cases created while running (freed with the run)
    int n_owned;
    int planned_bases;     // a family that creates its cases while it runs (execute): the base
                           // cases planned, each one step of the plan however many cases it makes
    int n_left_out;        // cases of the selection not part of the run: their "if_supported" value
    char left_out_why[300];   // is one their trainer lacks (docs/scenarios.md "matrix"), and why
} ScenarioRun;

// The finished case whose name matches glob exactly one way: fnmatch, first match; NULL if none.
const CaseResult *scenario_run_find(const ScenarioRun *sr, const char *glob);

void result_init(CaseResult *r, const Scenario *s, const Case *c);
void result_free(CaseResult *r);
// Record a check's outcome; details may be NULL. Returns the finding for more details.
Finding *result_finding(CaseResult *r, const char *check, int ok, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// A finding that makes the case SKIP or ERROR (verdict V_SKIP / V_ERROR) when no
// check failed: the check could not judge the case, and says why.
Finding *result_finding_verdict(CaseResult *r, const char *check, int verdict, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// The case's verdict from its findings: FAIL if one failed, else ERROR, else SKIP
// if one says so, else PASS.
int result_verdict_of_findings(const CaseResult *r);
// " on HOST" for rank k when the case's ranks ran on more than one host (their flight
// recorders say which), else "": how a verdict names the node of a rank.
const char *result_rank_host(const CaseResult *r, int k);
// o[key] as a number: a JSON number, or a string strtod reads ("nan", "inf" as the
// trainer writes them); def when absent
double json_number_or(const json_t *o, const char *key, double def);
// JSONL file -> array of objects (lines that do not parse are skipped and counted
// into *bad if non-NULL). NULL if the file does not exist.
json_t *read_jsonl(const char *path, int *bad);
#endif
