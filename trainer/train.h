// trainer/train.h — the training loop behind nsa-train.
#ifndef NSA_TRAINER_TRAIN_H
#define NSA_TRAINER_TRAIN_H
#include "trainer/comm.h"
#include "common/config.h"

// Exit codes of nsa-train (and train_run's return values).
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

typedef struct {
    NsaConfig cfg;
    const char *out_dir;      // metrics.jsonl, anomaly.json go here (created); NULL: "."
    const char *resume;       // checkpoint to resume from, or NULL
    int allow_config_change;  // --allow-config-change: resume a checkpoint of another config (warning, not exit 2)
    const char *save;         // checkpoint written at the end (and at save_every), or NULL
    int save_every;           // also save every N steps (0: only at the end)
    int stop_after;           // stop after this step (0: run to cfg.steps); the LR schedule still uses cfg.steps
    const char *dump_step;    // safetensors dump of step 1 (batch, logits, loss, grads), or NULL
    int dump_acts;            // --dump-acts: the dump also holds the forward's activations (trainer/actdump.h)
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
