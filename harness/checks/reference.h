// harness/checks/reference.h — what the cross-case checks (parity, dump_match) share: their
// "reference" case glob and their "tolerance".
#ifndef NSA_HARNESS_CHECKS_REFERENCE_H
#define NSA_HARNESS_CHECKS_REFERENCE_H
#include "harness/core/check.h"

// "reference": a case glob that matches exactly one case of the scenario (or a case its
// family creates), or one case per value of the other axes (each other case then has
// exactly one closest by check_reference_score). Problems go to ps.
void check_reference_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps);
// The reference result for case r, or NULL with a finding of `check` explaining why (or, when
// r is the reference itself, NULL and nothing to compare).
const CaseResult *check_reference_of(const json_t *params, CaseResult *r, const ScenarioRun *sr, const char *check);
// "tolerance": a number in [0, 1], per profile, and within a profile optionally per case glob.
// validate: s and ps (problems reported, returns 0); evaluate: the case's name (its tolerance).
double check_tolerance_of(const Scenario *s, const json_t *params, const char *jpath, const char *case_name,
                          Problems *ps);
// a and b equal within the relative tolerance tol (0: bitwise, NaN equal to NaN)
int check_close_enough(double a, double b, double tol);
#endif
