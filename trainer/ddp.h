// trainer/ddp.h — data parallel: gradient buckets reduced as they become ready
// (DESIGN 4, docs/ddp.md).
//
// Buckets cover the parameters in REVERSE parameter order (the order their
// gradients become final in backward), each up to train.bucket_mb MiB of the
// gradient dtype; parameters are contiguous in the gradient buffer, so a bucket is
// one contiguous range and is reduced in place. A bucket's allreduce (sum; the loss
// scale already holds 1/world) is launched from the model's grad_ready hook as soon
// as all its parameters have arrived and every lower-numbered bucket has been
// launched (the same launch order on every rank), and progressed from the same hook
// while backward goes on. At the end of backward each rank waits (bounded by the
// collective timeout) for all its buckets. Modes (train.ddp_mode):
//   default       every parameter must arrive; a bucket with a missing parameter is
//                 never launched, so every rank ends up waiting: a hang, reported as
//                 one (exit 4 after the timeout, or the runner's watchdog first)
//   find_unused   at the end of backward, parameters that did not arrive are marked
//                 ready (their gradient: zero) and the remaining buckets launch
//   static_graph  the set that arrives is recorded at the first step and compared
//                 across ranks; from the second step a bucket waits only for
//                 recorded parameters, and any difference (on any rank) is exit 1
//                 naming the rank(s) and parameter(s)
// With grad_accum > 1 only the step's last micro-batch reduces (no_sync before).
#ifndef NSA_TRAINER_DDP_H
#define NSA_TRAINER_DDP_H
#include <stddef.h>
#include <stdint.h>
#include "trainer/comm.h"
#include "trainer/model.h"

struct Faults;

typedef struct {
    int mode;              // NSA_DDP_* (config.h)
    double bucket_mb;      // bucket size cap, MiB of the gradient dtype
    double timeout_s;      // --comm-timeout
    const char *out_dir;   // buckets.jsonl, rank_times.jsonl
    struct Faults *faults; // hang=R:S:comm, or NULL
} DdpOpts;

typedef struct Ddp Ddp;

// Build the bucket layout, check it (and the config digest) against every other
// rank, open the communicators. NULL on failure with err filled and *rc the exit
// code (NSA_EXIT_RUNTIME, NSA_EXIT_USAGE, NSA_EXIT_COMM_TIMEOUT).
Ddp *ddp_open(Model *m, const CommWorld *w, const DdpOpts *o, int *rc, char *err, size_t errlen);
void ddp_close(Ddp *d, int clean);   // clean: every collective completed (else NCCL abort)

int ddp_n_buckets(const Ddp *d);
void ddp_begin_step(Ddp *d, int64_t step);
// Before each micro-batch's backward: reduce = 1 for the step's last micro-batch.
void ddp_begin_backward(Ddp *d, int reduce);
// The model's grad_ready hook (call it with the Ddp as ctx, after any trace hook).
void ddp_grad_ready(Ddp *d, int param_id);
// After the last micro-batch's backward: mode handling, then wait for every bucket.
// Returns 0, NSA_EXIT_RUNTIME (static_graph difference: message printed) or
// NSA_EXIT_COMM_TIMEOUT ([COMM-TIMEOUT]/[COMM-ERROR] printed, bucket records written).
int ddp_finish_backward(Ddp *d) __attribute__((noinline));
// The wait itself (named in stack dumps of a rank stalled in it).
int ddp_comm_wait(Ddp *d) __attribute__((noinline));
// *v = mean over ranks of *v (control plane). 0 or NSA_EXIT_COMM_TIMEOUT.
int ddp_mean(Ddp *d, double *v, const char *what);
// End of run: the weights are bitwise identical on every rank (FNV-1a of the
// parameter bytes, allgathered). 0, NSA_EXIT_RUNTIME (differ: printed) or
// NSA_EXIT_COMM_TIMEOUT.
int ddp_check_weights(Ddp *d, int64_t step);
// Milliseconds this rank spent waiting for collectives in the current step.
double ddp_comm_wait_ms(const Ddp *d);
// OUT/rank_times.jsonl: {"step","rank","compute_ms","comm_wait_ms"}, one write(2).
void ddp_write_rank_times(Ddp *d, int64_t step, double step_ms);
#endif
