// trainer/faults.h — opt-in fault injection (`nsa-train --fault NAME[=ARG]`).
//
// Each fault reproduces one failure class from DESIGN 5 so that the harness can
// prove that the check meant for it catches it. Nothing here is active unless a
// --fault flag asks for it: the model carries a `struct Faults *` that is NULL
// without faults, and every hook in model.c / train.c is a pointer test.
// The table of faults (name, argument syntax, what it breaks, which harness
// family catches it, when it has no effect) is in faults.c; `nsa-train
// --list-faults` prints it and docs/diagnostics.md explains each one.
#ifndef NSA_TRAINER_FAULTS_H
#define NSA_TRAINER_FAULTS_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/config.h"
#include "trainer/model.h"

#define FAULT_MAX_DROP 16

// The hook points a fault acts at (a row of the fault table, faults.c, names its own).
// A hook returns at once when no active fault acts there.
enum {
    FAULT_AT_INIT_WEIGHTS = 1 << 0,   // faults_after_init_weights (train.c)
    FAULT_AT_BEGIN_STEP = 1 << 1,     // faults_begin_step (train.c)
    FAULT_AT_PHASE = 1 << 2,          // faults_on_phase (train.c, ddp.c)
    FAULT_AT_GRAD = 1 << 3,           // faults_grad_dropped, faults_after_backward (model.c)
    FAULT_AT_BRANCH_FWD = 1 << 4,     // faults_after_branch_fwd (model.c)
    FAULT_AT_PREFILL_CMP = 1 << 5,    // faults_keep_stale_cmp (model.c)
    FAULT_AT_RECOMPUTE = 1 << 6,      // faults_before_recompute, faults_after_recompute (model.c)
    FAULT_AT_FORWARD_END = 1 << 7,    // faults_after_forward (model.c)
};

// Adding a fault: its state below, its row (and argument parser) in faults.c's table,
// its effect in the hook(s) the row names.
typedef struct Faults {
    int n_active;              // faults asked for (0: none)
    char desc[512];            // the --fault values as given, space-separated
    uint32_t given;            // bit i: the table's fault i was given (a "once" fault is refused twice)
    unsigned hooks;            // FAULT_AT_*: the hook points of the faults given
    // gate_zero_init
    int gate_zero_init;
    // hang=RANK:STEP:PHASE (phase: FR_PHASE_DATA/FORWARD/BACKWARD/OPTIMIZER/COMM)
    int hang, hang_rank, hang_phase;
    int64_t hang_step;
    // crash=RANK:STEP
    int crash, crash_rank;
    int64_t crash_step;
    // drop_grad=PARAM (repeatable, one parameter each)
    int n_drop;
    char drop_names[FAULT_MAX_DROP][80];
    // divergent_unused=RANK[:PARAM]: PARAM unused on rank RANK only ("" = the default parameter)
    int divergent, divergent_rank;
    char divergent_name[80];
    // nan_at_seqlen=K (0: off)
    int nan_seqlen;
    // prefill_state_leak
    int prefill_leak;
    // gc_recompute_mismatch=LAYER, clobber_activation=LAYER (-1: off)
    int gc_mismatch_layer;
    int clobber_layer;

    // ---- run state (faults_bind, faults_begin_step) ------------------------------
    int rank;                  // this process's --rank
    int64_t step;              // current optimizer step
    int64_t steps_begun;       // steps this process has started (resume-safe "from step 2")
    int stale_cmp;             // prefill_state_leak: this step reuses the previous step's compressed blocks
    uint8_t *drop;             // [n_params] 1 = gradient dropped (drop_grad, divergent_unused on its rank);
                               // NULL when none
    int divergent_id;          // divergent_unused: the resolved parameter (every rank), -1 if off
    char divergent_param[80];  // its name
    int n_params;
    void *gc_saved;            // gc_recompute_mismatch: the layer input saved around the recompute
    size_t leaked_bytes;       // prefill_state_leak: bytes leaked so far
} Faults;

// All faults off.
void faults_init(Faults *f);
// Parse one --fault value "NAME[=ARG]" and switch it on. Returns 0, or -1 with
// err filled ("--fault VALUE: why"); the caller exits 2.
int faults_parse(Faults *f, const char *spec, char *err, size_t errlen);
// Checks that need the config (layer indices in range). 0 or -1 with err.
int faults_check_config(const Faults *f, const NsaConfig *cfg, char *err, size_t errlen);
// Print the table of faults (`nsa-train --list-faults`).
void faults_list(FILE *out);
// The name of the fault table's row i (0, 1, ...), NULL past the end.
const char *faults_name(int i);
// One line naming the active faults ("hang=0:2:backward drop_grad=..."), "" if none.
void faults_describe(const Faults *f, char *buf, size_t n);

// Attach to a model (m->faults = f) and resolve parameter names: an unknown
// drop_grad name is an error (-1, err names it and a few valid names).
int faults_bind(Faults *f, Model *m, int rank, char *err, size_t errlen);
void faults_unbind(Faults *f, Model *m);

// ---- hooks (each called only when m->faults / the Faults pointer is non-NULL) ----
// train.c, after model_init_weights: gate_zero_init.
void faults_after_init_weights(Faults *f, Model *m);
// train.c, at the start of every optimizer step: prefill_state_leak bookkeeping
// and its per-step leak.
void faults_begin_step(Faults *f, Model *m, int64_t step);
// train.c, on entering a phase (FR_PHASE_*): hang and crash.
void faults_on_phase(const Faults *f, int phase, int64_t step);
// model.c hooks:
int faults_grad_dropped(const Faults *f, int param_id);                       // drop_grad
void faults_after_backward(Model *m);                                         // drop_grad
void faults_after_branch_fwd(Model *m, int layer, int branch, void *o, int t0, int Tn); // nan_at_seqlen
int faults_keep_stale_cmp(Model *m, int layer, int t0, int Tn);               // prefill_state_leak
void faults_before_recompute(Model *m, int layer);                            // gc_recompute_mismatch
void faults_after_recompute(Model *m, int layer);
void faults_after_forward(Model *m);                                          // clobber_activation

// The functions a stack dump of a hung / crashed rank names. Never inlined (nor, with
// gcc, cloned into a renamed copy; clang has no noclone and does not clone).
#ifdef __clang__
void fault_hang(void) __attribute__((noinline, noreturn));
void fault_crash(void) __attribute__((noinline));
#else
void fault_hang(void) __attribute__((noinline, noclone, noreturn));
void fault_crash(void) __attribute__((noinline, noclone));
#endif
#endif
