// trainer/train.h — the training loop behind nsa-train.
#ifndef NSA_TRAINER_TRAIN_H
#define NSA_TRAINER_TRAIN_H
#include "trainer/comm.h"
#include "common/config.h"
#include "common/exit_codes.h"

// Exit codes of nsa-train (and train_run's return values): NSA_EXIT_* in common/exit_codes.h.

typedef struct {
    NsaConfig cfg;
    const char *out_dir;      // metrics.jsonl, anomaly.json go here (created); NULL: "."
    const char *resume;       // checkpoint to resume from, or NULL
    int allow_config_change;  // --allow-config-change: resume a checkpoint of another config (warning, not exit 2)
    const char *init_weights; // --init-weights FILE: start from these parameters instead of the seeded init, or NULL
    const char *write_init;   // --write-init FILE: write the step-0 parameters and return 0 without training, or NULL
    const char *save;         // checkpoint written at the end (and at save_every), or NULL
    int save_every;           // also save every N steps (0: only at the end)
    int stop_after;           // stop after this step (0: run to cfg.steps); the LR schedule still uses cfg.steps
    const char *dump_step;    // safetensors dump of step 1 (batch, logits, loss, grads), or NULL
    int dump_acts;            // --dump-acts: the dump also holds the forward's activations (trainer/actdump.h)
    const char *dump_tensors; // --dump-tensors: comma-separated globs of the tensors the dump holds, or NULL: all
    int quiet;                // no per-step lines on stdout
    // diagnostics (docs/diagnostics.md); all off by default, and free when off
    int rank;                 // --rank: recorded in traces and the flight recorder; rank-targeted faults
    int trace_grads;          // --trace-grads: OUT/grad_trace.jsonl + [GRAD-TRACE] lines on stdout
    int gate_stats;           // --gate-stats: OUT/gate_stats.jsonl
    const char *flight_recorder; // --flight-recorder FILE (memory-mapped, trainer/flightrec.h), or NULL
    struct Faults *faults;    // --fault NAME[=ARG] (trainer/faults.h), or NULL
    // data parallel (docs/ddp.md): world from comm_world_init; NULL or transport none = one process
    const CommWorld *world;
    double comm_timeout_s;    // --comm-timeout (default 300)
} TrainOpts;

// Runs training; prints one line per step and appends metrics.jsonl. Returns an
// NSA_EXIT_* code; on failure a message has been printed to stderr.
int train_run(const TrainOpts *opts);
#endif
