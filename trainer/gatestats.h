// trainer/gatestats.h — per-layer gate statistics (`nsa-train --gate-stats`).
//
// Per optimizer step, from the forward of the step's FIRST micro-batch (so before
// that step's optimizer update), for every layer:
//   gate.fc2 weight [3G, gate_hidden] and bias [3G]: mean and std;
//   the gate outputs (LayerActs.gate, [N = B*T rows, G groups, 3 branches]) per
//   branch (cmp, sel, win): mean, std, min, max over all rows and groups.
// std is the population standard deviation. Values are copied to the host with
// the backend's act_to_f64 / param_to_f64, so any backend works.
//
// When: the model's diagnostics hook fires MODEL_EV_LAYER_FWD_DONE right after
// each layer's forward has produced all T rows — before the next layer runs, so
// even checkpointed layers (whose activations share one scratch) are measured
// from their own forward. Sequential prefill fires it after the layer's last
// token. The recompute inside backward is never measured.
//
// One JSON record per step is appended to OUT/gate_stats.jsonl with a single
// write(2) (format in docs/diagnostics.md).
#ifndef NSA_TRAINER_GATESTATS_H
#define NSA_TRAINER_GATESTATS_H
#include <stddef.h>
#include <stdint.h>
#include "trainer/model.h"

typedef struct {
    int have;                       // filled during this step's first forward
    double fc2_w_mean, fc2_w_std;   // gate.fc2.weight
    double fc2_b_mean, fc2_b_std;   // gate.fc2.bias
    double out_mean[3], out_std[3], out_min[3], out_max[3];   // per branch cmp, sel, win
} GateLayerStats;

typedef struct {
    int fd;                 // OUT/gate_stats.jsonl (O_APPEND), -1 = no file (tests)
    char path[1100];        // its path (for [IO-ERROR], trainer/ioerr.h)
    int rank;
    int armed;              // collect during the next forward
    int n_layers;
    GateLayerStats *layers; // [n_layers]
    double *host;           // host scratch
    size_t host_n;
} GateStats;

// out_dir NULL: keep the statistics in memory only (tests).
int gatestats_open(GateStats *gs, const char *out_dir, int rank, int n_layers, char *err, size_t errlen);
// Start of a step: measure the next forward.
void gatestats_arm(GateStats *gs);
// MODEL_EV_LAYER_FWD_DONE while armed: measure layer L from m->acts[L].
void gatestats_layer(GateStats *gs, const Model *m, int L);
// After the first micro-batch's forward: build the record, append it (if a file
// is open), disarm. Returns the record as compact JSON (caller frees), or NULL.
char *gatestats_finish_step(GateStats *gs, const Model *m, int64_t step);
void gatestats_close(GateStats *gs);
#endif
