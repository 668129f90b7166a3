// harness/families/families.c — the registry of families: every family of this folder, in the
// order `nsa-harness list --families` shows them. Per family: the decision tree that turns the
// cases' findings into a diagnosis, and the report section with its tables and plots.
#include "harness/families/families.h"

static const void *const FAMILIES[] = {
    &family_branch_isolation, &family_gate_init,        &family_gc_bisection,
    &family_prefill_step5,    &family_seqlen_nan_sweep, &family_ddp_onestep,
    &family_cross_trainer_parity, &family_golden_regression, &family_perf_floor,
    &family_selftest,
};

Registry family_registry = {"family", FAMILIES, (int)(sizeof FAMILIES / sizeof FAMILIES[0]), {0}};
