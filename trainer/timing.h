// trainer/timing.h — where nsa-train's time goes from exec to exit (NSA_TRAIN_TIMING=1).
//
// With NSA_TRAIN_TIMING=1 in the environment nsa-train prints one line to stderr at the end of
// the run and writes the same as OUT/timing.json (rank R > 0: timing.rankR.json):
//
//   nsa-train: timing: exec→main 0.012 s, args+config 0.003 s, backend init 0.41 s (driver
//   0.05, CUDA context 0.29, ...), model alloc 0.05 s, weight init 0.33 s, optimizer state
//   0.00 s, data 0.01 s, first step 0.80 s (forward 0.40, backward 0.30, update 0.10), later
//   steps 0.006 s mean (19), finish 0.02 s, total 1.7 s
//
// exec→main is measured from the process's start time (/proc/self/stat's starttime against
// CLOCK_BOOTTIME, in clock ticks: 10 ms resolution on most kernels) to main's first line; the
// phases after it are CLOCK_MONOTONIC marks in main and the training loop; "backend init" is
// split by the backend's own accounting (Backend.startup_times: the CUDA backend's driver,
// context, stream, first kernel launch, cuBLASLt load, handle and workspace; the GEMM plans it
// made during the run, with their host time, come last); a sequential-prefill run adds its graph
// counters (captures, nodes, capture time, replays, eager forwards). Without the variable (or
// with 0) nothing is printed or written, and the marks cost a clock_gettime each.
#ifndef NSA_TRAINER_TIMING_H
#define NSA_TRAINER_TIMING_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/ops.h"
#include "trainer/model.h"

// the end of each phase, in order
enum {
    TM_MAIN,        // main's first line
    TM_CONFIG,      // args, world, config: the backend is about to start
    TM_BACKEND,     // backend started
    TM_MODEL,       // parameters and activations allocated (faults bound)
    TM_WEIGHTS,     // initial weights written (seeded, --init-weights)
    TM_OPTIM,       // optimizer state allocated
    TM_DATA,        // data, diagnostics, resume, metrics file: the first step starts
    TM_LOOP,        // the last step ended
    TM_FINISH,      // everything closed and freed
    TM_COUNT
};

// First thing in main: remembers main's time and reads NSA_TRAIN_TIMING (0 or 1). Returns 0, or
// -1 with err naming the variable and its value when it is set to anything else.
int timing_init(char *err, size_t errlen);
int timing_on(void);
void timing_mark(int which);
// one optimizer step's wall time, and its host-side parts (forward, backward: all micro-batches)
void timing_step(double secs, double fwd, double bwd);
// what the report asks of the backend (startup_times) and of the model (graph counters); the
// model's counters are copied now (call before the model is freed)
void timing_backend(const Backend *be);
void timing_model(const Model *m);
// the line on stderr and DIR/timing.json (rank 0) or DIR/timing.rankR.json; dir NULL: the line
// only. A file that cannot be written is io_error (trainer/ioerr.h). No-op when off.
void timing_report(const char *dir, int rank);
#endif
