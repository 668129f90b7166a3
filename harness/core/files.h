// harness/core/files.h — the runner's scenario arguments to files.
#ifndef NSA_HARNESS_FILES_H
#define NSA_HARNESS_FILES_H
#include "common/util.h"   // StrList

// Scenario arguments to files: each file as given; each directory expands to the *.json
// files directly in it (not hidden, not folders), sorted. n == 0: default_arg alone.
// run, list and validate take their arguments alike through this. Returns 0, or -1 after
// printing "nsa-harness: DIR: why" for a directory it cannot read or that holds no *.json
// (the others are still collected).
int collect_json_files(StrList *out, char *const *args, int n, const char *default_arg);
#endif
