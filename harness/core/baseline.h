// harness/core/baseline.h — golden baselines: what a known-good run of a case looked
// like, stored under golden/baselines/ so that a later run (another commit, another
// machine) can be compared with it (docs/regression.md).
//
// One JSON file per scenario, case, profile and device class:
//   <baselines>/<profile>/<device class>/<scenario>/<case dir>.json
// holding (format "nsa-harness-baseline-1"):
//   device_arch the device's architecture (compute capability "sm_90"; the CPU's machine):
//               a device without baselines of its own compares with the nearest
//   steps       every step's loss, grad_norm, lr and data_digest (metrics.jsonl)
//   dump        the step-1 dump summarised tensor by tensor in file order — inputs,
//               logits, the forward's activations in dataflow order, every gradient
//               (harness/artifacts/tensorstats.h: digest, norms, projections) — plus the
//               digests of the weights it was computed from
//   gate_stats  the gate statistics of every step (gate_stats.jsonl)
//   perf        peak backend memory, FLOPs per step, step time and tok/s (the median
//               over steps after a warm-up; with several runs, each run's median, the
//               median of them and their spread)
//   provenance  commit, dirty flag, date, device, backend/precision, the build
//               fingerprint (compiler, flags, the CPU kernels' ISA, libc, GPU model,
//               CUDA/cuBLAS) and its id, the config digest, the command
// The same builder summarises a case of the current run, so a check compares two
// objects of one shape.
#ifndef NSA_HARNESS_BASELINE_H
#define NSA_HARNESS_BASELINE_H
#include <jansson.h>
#include <stddef.h>

#define BASELINE_FORMAT "nsa-harness-baseline-1"

typedef struct {
    const char *scenario;       // scenario name
    const char *case_name;      // the case's name ("variant=base")
    const char *case_dir;       // its folder name (the file name of the baseline)
    const char *profile;        // "ci" / "gpu"
    const char *config_digest;  // the case's resolved config, digest by this tree's loader
    const char *backend, *precision;
    const char *device;         // the device line of the report ("CPU: AMD EPYC, 2 cores")
    const char *commit;         // git sha of the source tree, or NULL
    int dirty;                  // the tree had uncommitted changes (1), had none (0), unknown (-1)
    const char *command;        // what recorded it
    int perf_skip;              // warm-up steps left out of the step-time median
    // a map trainer's (docs/trainer-maps.md): commit and dirty are then its own work tree's
    const char *harness_commit; // this harness's source commit, or NULL (not a map trainer)
    const char *trainer_map;    // the trainer map's path, or NULL
} BaselineMeta;

// <dir>/<profile>/<device class>/<scenario>/<case dir>.json
void baseline_path(char *out, size_t n, const char *dir, const char *profile, const char *device_class,
                   const char *scenario, const char *case_dir);
// "cpu-x86_64" for the CPU backends; the GPU model for cuda ("nvidia-h100-80gb-hbm3"),
// from the trainer's --print-env
void baseline_device_class(const json_t *env, const char *backend, char *out, size_t n);
// The device's architecture, what "nearest" is measured by (docs/regression.md): on cuda the
// compute capability ("sm_90") of the trainer's --print-env (cuda.devices[0].sm), else the
// model-name table's (baseline_arch_of_model); on the CPU backends the host's machine
// ("x86_64"); "unknown" when neither says.
void baseline_device_arch(const json_t *env, const char *backend, char *out, size_t n);
// The compute capability of a GPU model by a word of its name ("NVIDIA H200" or its device
// class "nvidia-h200": "sm_90"; a100/a800/a30 sm_80, l40/l40s/l4 and RTX 40xx sm_89, b200
// sm_100, ...), or NULL for a model the table does not know.
const char *baseline_arch_of_model(const char *model);
// A baseline's architecture: its device_arch (written by `baseline record`), else its build
// fingerprint's sm, else (cuda) the model-name table by its device class, else (a CPU
// backend) its device class's machine; "unknown" when none says. *source (may be NULL)
// names which it was ("its device_arch", "its build fingerprint", "the model-name table",
// "its device class").
void baseline_arch(const json_t *b, char *out, size_t n, const char **source);
// The build fingerprint (an object: what decides whether two runs can be bitwise
// equal) and its id (digest64 of its canonical JSON).
json_t *baseline_fingerprint(const json_t *env, const char *backend, const char *precision);
void baseline_fingerprint_id(const json_t *fp, char out[17]);

// A case summarised from its folders: case_dirs[0] gives everything; the others
// (repeated runs of the same case) add their step times to perf. env: the trainer's
// --print-env for the case (its env.json). NULL with err on failure (no metrics).
json_t *baseline_of_case(const char *const *case_dirs, int n_dirs, const json_t *env, const BaselineMeta *meta,
                         char *err, size_t errlen);
// Read and check a baseline file: "path:line:col: why" in err and NULL when it is
// not a baseline (syntax, format, a required key missing or of the wrong type).
json_t *baseline_load(const char *path, char *err, size_t errlen);
// Write it (folders created, atomically, reals with 17 significant digits).
int baseline_write(const char *path, const json_t *b, char *err, size_t errlen);
#endif
