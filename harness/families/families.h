// harness/families/families.h — every family, one file of this folder each, named as its key in
// a scenario's "family" (harness/core/family.h: FamilyDef; the table: harness/families/families.c),
// and what their files share.
#ifndef NSA_HARNESS_FAMILIES_FAMILIES_H
#define NSA_HARNESS_FAMILIES_FAMILIES_H
#include "harness/core/family.h"
#include "harness/exec/runner.h"
#include "harness/report/diagnosis.h"

extern const FamilyDef family_branch_isolation;       // branch_isolation.c
extern const FamilyDef family_gate_init;              // gate_init.c
extern const FamilyDef family_gc_bisection;           // gc_bisection.c
extern const FamilyDef family_prefill_step5;          // prefill_step5.c
extern const FamilyDef family_seqlen_nan_sweep;       // seqlen_nan_sweep.c
extern const FamilyDef family_ddp_onestep;            // ddp_onestep.c
extern const FamilyDef family_cross_trainer_parity;   // cross_trainer_parity.c
extern const FamilyDef family_golden_regression;      // golden_regression.c
extern const FamilyDef family_perf_floor;             // perf_floor.c
extern const FamilyDef family_selftest;               // selftest.c

// The self-test's file schema, the detections (selftest_detections.c): its `load` hook.
int selftest_load(ScenarioLoader *ld);
#endif
