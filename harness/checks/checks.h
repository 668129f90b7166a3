// harness/checks/checks.h — every check, one file of this folder each, named as its key in a
// scenario's "checks" (harness/core/check.h: CheckDef; the table: harness/checks/checks.c).
#ifndef NSA_HARNESS_CHECKS_CHECKS_H
#define NSA_HARNESS_CHECKS_CHECKS_H
#include "harness/core/check.h"

extern const CheckDef check_finite;          // finite.c
extern const CheckDef check_grad_arrival;    // grad_arrival.c
extern const CheckDef check_gate_init;       // gate_init.c
extern const CheckDef check_loss_decrease;   // loss_decrease.c
extern const CheckDef check_parity;          // parity.c
extern const CheckDef check_dump_match;      // dump_match.c
extern const CheckDef check_growth;          // growth.c
extern const CheckDef check_golden;          // golden.c
extern const CheckDef check_perf_floor;      // perf_floor.c
#endif
