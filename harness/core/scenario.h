// harness/core/scenario.h — a scenario file, validated and expanded into cases.
//
// (Loading a file, against the registries of checks and families: harness/core/scenario_load.h.)
//
// A scenario (scenarios/*.json, schema in docs/scenarios.md) names a model config
// and overrides, run settings, per-profile adjustments, a matrix of variations and
// a list of checks. Loading is strict: every problem (syntax, unknown key, wrong
// type, bad matrix, an override the config rejects, a check parameter out of
// range) is reported as `file:line:col: message`, all of them, sorted by position.
//
// Expansion: the matrix axes (in file order) form a cartesian product; each case
// is named `axis=label,axis=label` (or `default` without a matrix) and carries the
// full list of config overrides that makes it, each remembering where in the
// scenario file it came from, so that a value the config loader rejects is
// reported at that position.
#ifndef NSA_HARNESS_SCENARIO_H
#define NSA_HARNESS_SCENARIO_H
#include <jansson.h>

#include "common/util.h"
#include "common/config.h"
#include "harness/core/trainer_cmd.h"

enum { PROFILE_CI = 0, PROFILE_GPU = 1, PROFILE_COUNT };
extern const char *const PROFILE_NAMES[PROFILE_COUNT];   // "ci", "gpu"

typedef struct {
    char key[96];      // dotted config key, e.g. "nsa.force_branch"
    char *value;       // compact JSON text of the value
    int line, col;     // where the value stands in the scenario file
} Override;

typedef struct {
    int world_size;        // ranks (processes); 1 unless the scenario says otherwise
    char transport[8];     // "none" (1 rank), "mpi", "nccl", "gloo" (torch.distributed's host collectives)
    double timeout_s;      // wall-clock limit of the case (before --timeout-scale)
    double stall_s;        // heartbeat older than this => stalled (default: timeout_s)
    char **env;            // "NAME=value" strings added to the trainer's environment
    int n_env;
    char launcher[8];      // how the ranks start (harness/exec/launch.h): "local" (the trainer, or
                           // mpirun on this host), "mpirun" (with a hostfile), "srun", "env"
    char **hosts;          // launcher mpirun: "host" or "host:slots", written as a hostfile
    int n_hosts;
    char **launcher_args;  // extra arguments to mpirun (local over MPI, mpirun) or srun, before the
    int n_launcher_args;   // trainer's (e.g. "--mca", "plm_rsh_agent", "X"; "--mpi=pmix")
    char trainer[64];      // run.trainer (or a matrix value): "" or "nsa-train" = the run's default
                           // trainer; else a name of the scenario's run.trainers
    int trainer_line, trainer_col;   // where that name stands in the scenario file (0: not given)
    int init_shared;       // run.init_weights "shared": the case starts from nsa-train's step-0 weights
} RunSpec;

typedef struct {
    char name[256];        // "branch=cmp,precision=bf16", or "default"
    char dir[256];         // the name made safe for the file system
    char **labels;         // [n_axes] this case's label on each axis
    Override *ov;          // every override, in application order
    int n_ov;
    RunSpec run;
    NsaConfig cfg;         // the resolved, validated config of the case
    const json_t *spec;    // selftest: the detection object this case runs (borrowed), else NULL
    // an axis value listed in the axis's "if_supported" (docs/scenarios.md, "matrix"): the case
    // is planned only for a trainer whose --protocol-info lists it (features.<if_feature> holds
    // <if_value>); for any other trainer it is not part of the run (no SKIP). "" when not.
    char if_feature[16];   // "transports", "backends", "precisions", "ddp_modes"
    char if_what[16];      // "transport", "backend", "precision", "DDP mode" (for messages)
    char if_value[96];     // "gloo"
} Case;

typedef struct {
    char name[32];         // axis name, e.g. "branch"
} Axis;

typedef struct {
    const char *kind;      // the check's name ("grad_arrival"), from the check table
    const json_t *params;  // its object in the scenario document (borrowed)
    int index;             // position in "checks"
} CheckSpec;

typedef struct {
    char path[1024];       // as given
    char dir[1024];        // its directory (relative paths inside are relative to it)
    char *text;            // file contents (for positions)
    json_t *root;          // the parsed document
    char name[64];
    char family[32];
    char *description;
    int profile;           // PROFILE_* the cases were expanded for
    int cur_profile;       // the profile being expanded now (validation), then = profile
    int has_profile[PROFILE_COUNT];
    int requires_gpus;     // of the selected profile
    char config_path[1024];   // resolved config file of the selected profile
    Axis *axes;
    int n_axes;
    Case *cases;
    int n_cases;
    CheckSpec *checks;
    int n_checks;
    TrainerSpec *trainers;    // run.trainers of the selected profile: name -> command (words
    int n_trainers;           // resolved against the scenario's folder)
} Scenario;

// The scenario's trainer named `name` (run.trainers), or NULL ("nsa-train" and "" are the
// run's default, never in the table).
const TrainerSpec *scenario_trainer(const Scenario *s, const char *name);

void scenario_free(Scenario *s);

// A case created while running (GC bisection's ranges): `base` plus `extra`
// overrides, named `name`, its config resolved by the config loader. Returns 0,
// or -1 with the loader's message in err.
int scenario_derive_case(const Scenario *s, const Case *base, const char *name, const Override *extra, int n_extra,
                         Case *out, char *err, size_t errlen);
void scenario_case_free(Case *c, int n_axes);

// Where a JSON path of the scenario document is (jsonpos syntax); 0 or -1.
int scenario_pos(const Scenario *s, const char *jpath, int want_key, int *line, int *col);
// Report a problem at a JSON path of the scenario (falls back to the enclosing
// value, then to the file).
void scenario_problem(const Scenario *s, Problems *ps, const char *jpath, int want_key, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

// ---- loading, for a family whose files have a schema of their own ----------------------
// (FamilyDef.load: the self-test's detections). What loading one file needs,
// passed down rather than kept in statics, so a loader may load other files
// while loading (a self-test checks the scenarios its detections run).
typedef struct {
    Scenario *s;               // the file being loaded: path, dir, text and root are read
    Problems *ps;              // where its problems go
    int profile;               // the profile whose cases are kept
    int all_profiles;          // validate every profile the file defines as well
    const char *const *sets;   // run --set overrides, applied to every case
    int n_sets;
    int before;                // ps->n when loading began
} ScenarioLoader;

// Every key of obj must be in `known` (NULL-terminated); the others are reported
// at their key as "unknown key 'k' in <where> (known: ...)".
void scenario_check_keys(const Scenario *s, Problems *ps, const json_t *obj, const char *jpath,
                         const char *const *known, const char *where);
// obj[key] if present and of `type` (JSON_REAL: any number), else NULL; a wrong
// type is reported ("key: expected <what>, got ..."), and a missing key if required.
const json_t *scenario_get_typed(const Scenario *s, Problems *ps, const json_t *obj, const char *jpath,
                                 const char *key, int type, int required, const char *what);
// The jsonpos path of a member: base.key, or base["key"] when the key needs quoting.
void scenario_member_path(char *out, size_t n, const char *base, const char *key);
// The top-level "name" (required; 1 to 63 such characters) into s->name.
void scenario_read_name(Scenario *s, Problems *ps);
// The "profiles" object: known profile names, each an object with `known_keys`;
// sets s->has_profile.
void scenario_read_profiles(Scenario *s, Problems *ps, const char *const *known_keys, const char *what);
// Read and parse the file at path into s (path, dir, text, root); 0, or -1 with the problem
// reported (not a regular file, too large, not JSON, not an object).
int scenario_open(Scenario *s, const char *path, Problems *ps);
// Expand profile p of the file ld->s into its cases: its config and overrides, run settings,
// --set overrides, requires, matrix and exclude, each case's config through the trainer's
// config loader. seen: the config files reported already. 0, or -1 with problems.
int scenario_expand_profile(ScenarioLoader *ld, int p, Str *seen);
// A JSON value for a message: "integer 5", "string \"x\"", "an array", ...
void scenario_describe(const json_t *v, char *out, size_t n);
// Drop s's cases and axes.
void scenario_free_cases(Scenario *s);
// Drop problems from index `from` on whose text repeats an earlier one.
void scenario_dedupe_problems(Problems *ps, int from);

// The case whose name matches a glob (fnmatch), first match; NULL if none.
int scenario_case_matches(const Case *c, const char *glob);
#endif
