// trainer/trace.h — gradient-arrival trace (`nsa-train --trace-grads`).
//
// The model calls grad_ready(param) when a parameter's gradient is final for the
// current backward (model.c). Per optimizer step this records:
//   order          the arrival order during the FIRST micro-batch's backward
//   arrived        the union over all micro-batches of the step
//   missing        parameters whose notification never came
//   expected_missing  what model_expected_unused says gets no gradient (force_branch)
//   nonfinite      parameters whose gradient (after all micro-batches) holds a
//                  NaN or Inf element
//   zero           arrived, but every gradient element is exactly 0
// and, at the end of the step's backward (before the anomaly check, so a
// non-finite gradient is on record before the run halts), appends one JSON line
// to OUT/grad_trace.jsonl with ONE write(2) on an O_APPEND fd (several ranks may
// share the file) and prints the [GRAD-TRACE] lines to stdout, flushed.
// Formats: docs/diagnostics.md.
#ifndef NSA_TRAINER_TRACE_H
#define NSA_TRAINER_TRACE_H
#include <stddef.h>
#include <stdint.h>
#include "trainer/model.h"

typedef struct {
    const Model *m;
    int fd;                  // OUT/grad_trace.jsonl, -1 = no file (tests)
    char path[1100];         // its path (for [IO-ERROR], trainer/ioerr.h)
    int print;               // print the [GRAD-TRACE] lines
    int rank;
    int n_params;
    int active;              // between gradtrace_begin_step and gradtrace_end_step
    int micro;               // micro-batch index within the step
    int64_t step;
    uint8_t *arrived;        // [n_params] union over the step's micro-batches
    uint8_t *seen0;          // [n_params] arrived in micro-batch 0
    int *order;              // [n_params] first micro-batch's arrival order
    int n_order;
    uint8_t *expected;       // [n_params] model_expected_unused
    uint8_t *nonfinite;      // [n_params] result of the last gradtrace_end_step
    uint8_t *zero;           // [n_params]
    int n_arrived, n_missing, n_nonfinite;
    double *host;            // chunk buffer for the gradient scans
} GradTrace;

// out_dir NULL: no file (tests). print: stdout lines.
int gradtrace_open(GradTrace *tr, const Model *m, const char *out_dir, int rank, int print, char *err, size_t errlen);
void gradtrace_begin_step(GradTrace *tr, int64_t step);
void gradtrace_begin_micro(GradTrace *tr, int micro);
// The model's GradReadyFn: ctx is the GradTrace.
void gradtrace_ready(void *ctx, int param_id);
// After the step's last backward: scan the gradients, build the sets, write the
// record and the stdout lines. Returns the record (compact JSON, caller frees).
char *gradtrace_end_step(GradTrace *tr);
void gradtrace_close(GradTrace *tr);
#endif
