// common/exit_codes.h — the exit codes of nsa-train and of nsa-harness, named once.
//
// The trainer returns NSA_EXIT_*; the runner (harness/exec/runner.c) interprets them from
// each rank's exit status, and must not include trainer headers, so they live here.
// The runner's own exit codes (nsa-harness run/list/validate/show/baseline/compare/
// bisect) are HARNESS_EXIT_*.
#ifndef NSA_COMMON_EXIT_CODES_H
#define NSA_COMMON_EXIT_CODES_H

// ---- nsa-train (and train_run's return values) ----------------------------------------------
enum {
    NSA_EXIT_OK = 0,
    NSA_EXIT_RUNTIME = 1,   // I/O failure, bad checkpoint, backend failure
    NSA_EXIT_USAGE = 2,     // bad flag or invalid config
    NSA_EXIT_ANOMALY = 3,   // a non-finite loss/activation/gradient (anomaly record written)
    NSA_EXIT_COMM_TIMEOUT = 4, // data parallel: a collective did not complete within --comm-timeout
    NSA_EXIT_DDP_CONTRACT = 5, // data parallel: static_graph's used-parameter set differs across ranks or steps
                               // (or its transport reported an error); [COMM-TIMEOUT] / [COMM-ERROR] printed
    NSA_EXIT_IO = 6,        // an artifact could not be written (disk full, I/O error): one line
                            // "[IO-ERROR] file=<path> errno=<n> <strerror text>" on stderr (trainer/ioerr.h);
                            // takes precedence over 0 and every other code a run ends with
};
// 128 + SIGUSR1 (Linux): a rank wrote its stall dump and exited (trainer/stackdump.h, which
// defines the same macro); the runner records it for a rank it asked for its stack
#define NSA_EXIT_STALL_DUMP 138


// ---- nsa-harness ----------------------------------------------------------------------------
enum {
    HARNESS_EXIT_OK = 0,            // every case passed (or skipped); compare: no regression
    HARNESS_EXIT_FAIL = 1,          // a case failed, hung or crashed; compare: B regressed against A;
                                    // baseline record: a case was not recorded
    HARNESS_EXIT_USAGE = 2,         // bad flag, invalid scenario, a case that could not run
    HARNESS_EXIT_BISECT_SKIP = 125, // run --bisect: this commit cannot be judged (git bisect's "skip")
    HARNESS_EXIT_INTERRUPTED = 130, // SIGINT/SIGTERM (128 + SIGINT)
};

// ---- the processes the runner forks (harness/exec/proc.c, exec/launch.c, cmd/bisect.c) ----
enum {
    CHILD_EXIT_CANNOT_OPEN = 126,   // the child could not open its log (before exec)
    CHILD_EXIT_CANNOT_EXEC = 127,   // exec failed, or the runner died before the child was set up
    EXIT_SIGNAL_BASE = 128,         // a process killed by signal S: shell status 128 + S
};
#endif
