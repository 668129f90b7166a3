// harness/exec/trainer_caps.h — what the trainer says it supports (docs/trainer-protocol.md
// "Capability handshake"), and the case that needs what it lacks.
//
// Once per run (nsa-harness run, where the trainer's --print-env is checked) the runner
// asks `TRAINER --protocol-info` (5 s at most). A trainer that answers is protocol >= 1 and
// its "features" lists are what it supports. A trainer that does not answer (it exits
// non-zero, e.g. an nsa-train built before the handshake, which `bisect` builds from old
// commits; it prints nothing; it takes longer) is protocol 0: everything nsa-train had
// before the handshake, so nothing is skipped.
// A case that needs a feature the lists lack is a SKIP naming it:
//   "the trainer does not support fault 'prefill_state_leak' (--protocol-info)".
#ifndef NSA_HARNESS_TRAINER_CAPS_H
#define NSA_HARNESS_TRAINER_CAPS_H
#include <jansson.h>
#include <stddef.h>

#include "harness/core/scenario.h"
#include "harness/core/trainer_cmd.h"

typedef struct {
    int protocol;      // 0: no handshake (everything nsa-train had before it); else the answer's "protocol"
    json_t *info;      // the answer (NULL for protocol 0)
    int bad_answer;    // it exited 0 but did not print the protocol's JSON object (taken as protocol 0)
    char note[512];    // why it is protocol 0 ("" when it answered)
    char unusable[700];   // a scenario's trainer whose --print-env failed: why (its cases SKIP), else ""
    json_t *env;       // its run-level --print-env answer (trainer_caps_set_env), or NULL
} TrainerCaps;

// The capabilities of `trainer`, asked once per path per process (cached: later calls with
// the same path return the same object). Never NULL.
const TrainerCaps *trainer_caps_for(const char *trainer);
// The same for a trainer given as a command (`CMD... --protocol-info`), cached by its shell line.
const TrainerCaps *trainer_caps_of(const TrainerSpec *t);

// A scenario's trainer that cannot run here (its --print-env failed: e.g. the PyTorch
// adapter without torch): its cases are a SKIP saying why.
void trainer_caps_mark_unusable(const TrainerSpec *t, const char *why);

// Keep the trainer's run-level --print-env answer (a new reference is taken): no trainer is
// asked again per case (runner.c write_case_env; each ask is a CUDA context for nsa-train on
// a GPU machine, an interpreter start and a torch import for a Python trainer).
void trainer_caps_set_env(const TrainerSpec *t, json_t *env);

// How the runner watches a rank of this trainer (docs/trainer-protocol.md "Liveness"): the
// flight recorder (protocol 0, or `flight_recorder` listed), else the heartbeat file
// (`heartbeat` listed), else nothing (the case's age stands for the heartbeat's).
typedef enum { LIVE_NONE, LIVE_FLIGHT_RECORDER, LIVE_HEARTBEAT } Liveness;
Liveness trainer_caps_liveness(const TrainerCaps *tc);
// 1 if the trainer takes --stack-file (protocol 0, or `stack_dump` listed).
int trainer_caps_stack_dump(const TrainerCaps *tc);
// 1 if the trainer takes --dump-tensors GLOBS (`dump_tensors` listed; never assumed of
// protocol 0): the runner then asks for only the tensors the scenario reads (checks_dump_select).
int trainer_caps_dump_tensors(const TrainerCaps *tc);

// 1 if the trainer supports `name` of feature list `feature` ("backends", "faults", ...):
// protocol 0 supports everything; a protocol >= 1 answer without that list supports nothing of it.
int trainer_caps_has(const TrainerCaps *tc, const char *feature, const char *name);

// The first feature case c needs that the trainer does not list, as the SKIP summary
// ("the trainer does not support <what> '<name>' (--protocol-info)"): 1 with why filled,
// else 0. needs: the scenario's checks' NEED_* bits (checks_needs); faults: the run's
// --fault values (NAME[=ARG]). Also the config's data.kind (features.data; absent = every
// kind) and run.init_weights "shared" (diagnostic init_weights; protocol 0 lacks it).
// A trainer whose answer has features.knobs ({knob: [allowed values] or null}: a map
// trainer's, docs/trainer-maps.md) SKIPs a case with an override (scenario, profile, matrix,
// --set) of a key it lacks, "the trainer map has no knob 'train.prefill'", or of a value its
// list lacks, "the trainer map's knob 'nsa.force_branch' has no value 'cmp'"; a multi-rank
// case's transport is the knob 'transport'.
int trainer_caps_case_missing(const TrainerCaps *tc, const Case *c, unsigned needs, const char *const *faults,
                              int n_faults, char *why, size_t n);

// A trainer given by a trainer map (t->map): its probe checks the map, `PROBE --map MAP
// --check-map` (5 s at most, like the handshake; it needs no torch). 0 when it exits 0; else
// -1 with the probe's own output in probe_lines (its problems, `MAP:line:col: message`) and
// why in `why`: it rejects the map, could not be started, or did not answer in time. Not a
// map trainer: 0.
int trainer_caps_check_map(const TrainerSpec *t, Str *probe_lines, char *why, size_t n);

// {"protocol": N, "info": <answer or null>, "note": "..."} for env.json (a new reference).
json_t *trainer_caps_json(const TrainerCaps *tc);
#endif
