// harness/core/scenario_load.h — a scenario file loaded, validated and expanded: its top level,
// its checks (each a check of the registry, harness/core/check.h, whose validate hook sees its
// parameters) and its family (of the registry of families, harness/core/family.h; a family with
// a file schema of its own loads the file itself). The model it fills is harness/core/scenario.h.
#ifndef NSA_HARNESS_SCENARIO_LOAD_H
#define NSA_HARNESS_SCENARIO_LOAD_H
#include "harness/core/scenario.h"

// Load, validate and expand `path` for `profile`. Every problem is appended to ps
// (already "file:line:col: message"). Returns 0 if the scenario is valid; -1
// otherwise (the scenario is then freed). With all_profiles, every profile the
// file defines is expanded and validated too (used by `validate`), and the
// cases kept are those of `profile` (none if the file lacks it).
// sets: "section.key=value" overrides from the command line (run --set), applied
// to every case after the scenario's own; problems with them name the flag.
int scenario_load(Scenario *s, const char *path, int profile, int all_profiles, const char *const *sets,
                  int n_sets, Problems *ps);
#endif
