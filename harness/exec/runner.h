// harness/exec/runner.h — run one case under supervision and judge it.
//
// The case's trainer runs as a child process in its own process group, its
// output appended to ranks/rank_R.log. The runner polls (every 50 ms) the child's
// exit status and its flight recorder (trainer/flightrec.h), a memory-mapped file
// whose heartbeat advances at every recorded event — or, for a trainer that lists
// `heartbeat` instead (protocol 2), its heartbeat file ranks/rank_R.hb, a JSON line the
// trainer replaces at every phase change (its age: since the runner saw its seq change). A rank whose heartbeat is
// older than stall_s, or a case older than timeout_s, is stalled: it gets
// SIGUSR1 (it writes its symbolized stack and flight recorder to
// stacks/rank_R.txt and exits), then SIGTERM, then SIGKILL for its whole process
// group. The verdict is HANG. Whatever happened, the process group is killed
// and reaped before run_case returns: no process outlives its case.
#ifndef NSA_HARNESS_RUNNER_H
#define NSA_HARNESS_RUNNER_H
#include <signal.h>
#include <stdio.h>

#include "harness/core/result.h"
#include "harness/core/trainer_cmd.h"

typedef struct RunCtx {
    const char *trainer;                 // nsa-train
    const char *harness;                 // this executable (for reproduce commands)
    const char *report_dir;
    const char *profile;                 // "ci" / "gpu"
    double timeout_scale;                // --timeout-scale
    const char *const *faults;           // --fault values passed to every trainer
    int n_faults;
    int gpus;                            // usable CUDA devices (for requires.gpus)
    volatile sig_atomic_t *interrupted;  // set by the runner's SIGINT/SIGTERM handler
    FILE *console;                       // progress output
    int tty;                             // console is a terminal: a live line per case
    int index, total;                    // this case's step of the run's planned steps, for progress
    int sub;                             // > 0: a case its family created, sub-step of `index`
    // the regression layer (docs/regression.md)
    const char *baselines_dir;           // --baselines (default golden/baselines of the source tree)
    int recording;                       // `baseline record` runs: golden/perf_floor only note it
    const char *device;                  // the report's device line (RESULTS.md header)
    const char *argv_extra;              // every run option that shaped the cases, shell-quoted
                                         // (--set, --baselines, --trainer-map): for record commands
    const char *replay_args;             // every option that shaped a case (--set, --baselines,
                                         // --timeout-scale, --trainer, --fault): for reproduce commands
    // which trainer runs a case (docs/trainer-protocol.md "Choosing the trainer")
    const TrainerSpec *trainer_default;  // the run's default ("nsa-train"): the sibling nsa-train,
                                         // --trainer PATH, --trainer-cmd CMD or --trainer-map MAP;
                                         // NULL: {trainer}
    const char *trainer_cmd;             // --trainer-cmd as a shell line (absolute paths), or NULL
    const char *own_trainer;             // the nsa-train beside nsa-harness: it writes the shared start
                                         // weights of run.init_weights "shared"
    const char *trainer_map;             // --trainer-map's map (absolute), or NULL
    const char *tally;                   // progress: the run's elapsed time, ETA and verdicts so far
                                         // ("1 m 02 s elapsed, ETA ~3 m 10 s; 12 PASS, 1 SKIP"), or NULL
    // cases side by side (harness/exec/run_cases.h): what this case was given
    const char *cuda_devices;            // its GPUs as CUDA_VISIBLE_DEVICES ("2,3"), or NULL: the runner's
    int threads;                         // OpenMP threads of each rank (OMP_NUM_THREADS), or 0: the trainer's own
} RunCtx;

// A case still running prints a line every RUNNER_STILL_RUNNING_S seconds where the console
// is not a terminal (a terminal gets a live line instead): what it is doing, from its
// heartbeat. NSA_HARNESS_PROGRESS_S (a number from 0.1 to 3600) sets another period.
#define RUNNER_STILL_RUNNING_S 30.0

// The trainer that runs case c of scenario s: its run.trainer from the scenario's
// run.trainers, else the run's default. Never NULL.
const TrainerSpec *runner_case_trainer(const RunCtx *ctx, const Scenario *s, const Case *c);

// The environment a case gets when cases run side by side: CUDA_VISIBLE_DEVICES for its
// GPUs (ctx->cuda_devices) and OMP_NUM_THREADS (ctx->threads), each unless c's run.env sets it.
void runner_side_by_side_env(const RunCtx *ctx, const Case *c, StrList *env);

// Run (or skip) case r->c of scenario r->s; fills r. sr: the scenario's finished
// cases (cross-case checks compare with them). Never leaves a process behind.
void run_case(const RunCtx *ctx, CaseResult *r, const ScenarioRun *sr);
#endif
