// common/nsa_names.h — the NSA vocabulary shared by every layer: the three branch
// indices and their names, the gate activations, and what "gated" means.
//
// One definition, so the config loader (common/config.c), the kernels
// (kernels/ops.h includes this), the trainer and the harness spell a branch the
// same way: "cmp" (compressed), "sel" (selected), "win" (sliding window), in the
// order of the gate's columns.
#ifndef NSA_COMMON_NSA_NAMES_H
#define NSA_COMMON_NSA_NAMES_H

#ifdef __cplusplus
extern "C" {
#endif

// Branch indices, used for gate columns and for naming.
enum { NSA_BR_CMP = 0, NSA_BR_SEL = 1, NSA_BR_WIN = 2, NSA_NBRANCH = 3 };

enum { NSA_GATE_SOFTMAX = 0, NSA_GATE_SIGMOID = 1 };

// "cmp", "sel", "win" for NSA_BR_CMP/SEL/WIN; "?" for anything else (a name never
// NULL, so it can go straight into a printf).
static inline const char *nsa_branch_name(int br) {
    static const char *const names[NSA_NBRANCH] = {"cmp", "sel", "win"};
    return br >= 0 && br < NSA_NBRANCH ? names[br] : "?";
}

// A config's force_branch (-1 none, else NSA_BR_*): the gate MLP runs and mixes the
// three branches only when no branch is forced.
static inline int nsa_gated(int force_branch) { return force_branch < 0; }

#ifdef __cplusplus
}
#endif
#endif
