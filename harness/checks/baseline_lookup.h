// harness/checks/baseline_lookup.h — what the checks that compare a case with a known-good
// past share (docs/regression.md): `golden` (golden.c: the numerics: the loss curve, the
// step-1 dump, gate statistics) and `perf_floor` (perf_floor.c: tok/s, step time, peak memory,
// FLOPs), each against the case's baseline under golden/baselines/ (harness/core/baseline.h).
#ifndef NSA_HARNESS_CHECKS_BASELINE_LOOKUP_H
#define NSA_HARNESS_CHECKS_BASELINE_LOOKUP_H
#include <jansson.h>

#include "harness/core/result.h"
#include "harness/core/scenario.h"

// Which baseline a case is compared with (docs/regression.md, "Another GPU model: the
// nearest baseline"): its own device class's, or — for `golden` only, never for perf floors —
// when its device has none, the nearest recorded under the same profile: a device of the
// same architecture first (compared bitwise where the bits agree, else within the cross-device
// tolerances), else another architecture
// (compared within the cross-device tolerances, never bitwise).
typedef struct {
    int nearest;                // 0: this device's own baseline; 1: another device's
    int same_arch;              // nearest: recorded on the same architecture
    int same_build;             // nearest: its build fingerprint equals this run's but for the GPU model
    char own_device[128];       // this case's device class and architecture
    char own_arch[64];
    char own_path[2400];        // where this device's own baseline would be
    char device[128];           // the baseline's device class and architecture
    char arch[64];
    const char *arch_source;    // how the baseline's architecture is known (baseline_arch)
    Str others;                 // nearest: the candidates not taken and why ("; "-joined)
} BaselineMatch;

// Shared by both: the case's baseline file, loaded, or NULL after a SKIP finding
// (none recorded: the exact command that records it) or an ERROR finding (not a
// baseline; one recorded for another config digest: "re-record: ..."). path gets the
// file's path either way. Only this device's own baseline (perf floors are per device).
json_t *regression_baseline_for(CaseResult *r, const char *check, char *path, size_t n);
// The same, and where this device has no baseline for the case, the nearest other device's
// (m says which; NULL m: own only). Candidates of another backend or precision, of another
// config digest, or not a baseline are passed over (m->others says so).
json_t *regression_baseline_match(CaseResult *r, const char *check, char *path, size_t n, BaselineMatch *m);
// The case's baseline and the case summarised the same way (harness/core/baseline.h), for a
// regression check: 0 with both (json_decref them), or -1 after a finding — recording
// (nothing to compare), no usable baseline (SKIP / ERROR), or no summary (FAIL).
// m: as regression_baseline_match (NULL: own device only); str_free(&m->others) after.
int regression_prepare(CaseResult *r, const char *check, char *path, size_t n, json_t **base, json_t **cur,
                       BaselineMatch *m);
// The same, where the command that records a missing baseline gets record_extra after the
// run's own words (perf_floor with timings: "--repeat 5"; NULL: none).
int regression_prepare_with(CaseResult *r, const char *check, const char *record_extra, char *path, size_t n,
                            json_t **base, json_t **cur, BaselineMatch *m);
// 1 when two build fingerprints are equal but for the GPU's model name: a device of the same
// architecture reproduces the baseline's bits with such a build.
int regression_same_build_but_model(const json_t *fp_now, const json_t *fp_base);
// The command that (re)records the case's baseline, shell-quoted, into out.
void regression_record_command(const CaseResult *r, char *out, size_t n);
// The same for every case of the case's scenario (no --case).
void regression_record_scenario_command(const CaseResult *r, char *out, size_t n);
#endif
