// harness/core/scenario.c — strict loading, validation and case expansion of scenario
// files (see scenario.h; the schema is docs/scenarios.md).
//
// Validation walks the document by hand rather than with json_unpack: every
// problem must name the file:line:col of the offending key or value (jsonpos),
// every problem is reported (not only the first), and messages say what was
// expected and what was found. Overrides are finally validated by the trainer's
// own config loader (common/config.c, linked as a small library), case by case,
// and its problems (ConfigProblem: key, position, override index) are moved to
// where the offending value stands in the scenario file.
//
// The top level of a file, its checks and its family are read against the registries of checks
// and families by harness/core/scenario_load.c, which calls the expansion here. Loading keeps
// no state outside the ScenarioLoader it passes down, so a loader may load other scenarios
// while loading.
#define _POSIX_C_SOURCE 200809L
#include "harness/core/scenario.h"

#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonpos.h"
#include "common/jsonutil.h"

const char *const PROFILE_NAMES[PROFILE_COUNT] = {"ci", "gpu"};

static const char *const RUN_KEYS[] = {"steps", "world_size", "precision", "transport", "timeout_s",
                                       "stall_s", "env", "launcher", "hosts", "launcher_args", "trainers", "trainer",
                                       "init_weights", NULL};
static const char *const LAUNCHERS[] = {"local", "mpirun", "srun", "env", NULL};
static const char *const AXIS_KEYS[] = {"key", "values", "if_supported", NULL};
static const char *const REQUIRES_KEYS[] = {"gpus", NULL};
static const char *const TRANSPORTS[] = {"none", "mpi", "nccl", "gloo", NULL};
static const char *const PRECISIONS[] = {"fp32", "fp64", "bf16", "fp16", NULL};

#define DEFAULT_TIMEOUT_S 300.0

// ---- positions and problems ----------------------------------------------------------

int scenario_pos(const Scenario *s, const char *jpath, int want_key, int *line, int *col) {
    return s->text ? jsonpos_find(s->text, jpath, want_key, line, col) : -1;
}

// Report at jpath; if it is not in the text (a missing key), walk up to the
// enclosing value so the message still points somewhere useful.
static void vproblem(const Scenario *s, Problems *ps, const char *jpath, int want_key, const char *fmt,
                     va_list ap) {
    char path[512];
    snprintf(path, sizeof path, "%s", jpath);
    int line = 0, col = 0;
    for (;;) {
        if (scenario_pos(s, path, want_key, &line, &col) == 0) break;
        if (!path[0]) {
            line = col = 0;
            break;
        }
        // cut the last segment: .key, [i] or ["key"]
        size_t n = strlen(path);
        char *cut = NULL;
        if (n >= 2 && path[n - 1] == ']' && path[n - 2] == '"') {
            for (char *p = path + n - 3; p >= path; p--)
                if (p[0] == '[' && p[1] == '"') {
                    cut = p;
                    break;
                }
        }
        if (!cut) {
            char *dot = strrchr(path, '.'), *br = strrchr(path, '[');
            cut = br > dot ? br : dot;
        }
        if (cut) *cut = '\0';
        else path[0] = '\0';
        want_key = 0;
    }
    Str msg = {0};
    str_vprintf(&msg, fmt, ap);
    if (line > 0) problems_add(ps, line, col, "%s:%d:%d: %s", s->path, line, col, str_c(&msg));
    else problems_add(ps, 0, 0, "%s: %s", s->path, str_c(&msg));
    str_free(&msg);
}

void scenario_problem(const Scenario *s, Problems *ps, const char *jpath, int want_key, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vproblem(s, ps, jpath, want_key, fmt, ap);
    va_end(ap);
}
#define PROBLEM(...) scenario_problem(s, ps, __VA_ARGS__)

// A short description of a JSON value for messages: `string "x"`, `integer 4`, ...
void scenario_describe(const json_t *v, char *out, size_t n) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: snprintf(out, n, "an object"); break;
    case JSON_ARRAY: snprintf(out, n, "an array"); break;
    case JSON_STRING: snprintf(out, n, "string \"%.60s\"", json_string_value(v)); break;
    case JSON_INTEGER: snprintf(out, n, "integer %lld", (long long)json_integer_value(v)); break;
    case JSON_REAL: snprintf(out, n, "real %g", json_real_value(v)); break;
    case JSON_TRUE: snprintf(out, n, "true"); break;
    case JSON_FALSE: snprintf(out, n, "false"); break;
    default: snprintf(out, n, "null"); break;
    }
}

// The known keys as "a, b, c".
static void known_list(const char *const *keys, char *out, size_t n) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; keys[i] && used < n; i++)
        used += (size_t)snprintf(out + used, n - used, "%s%s", i ? ", " : "", keys[i]);
}

static int in_list(const char *const *keys, const char *k) {
    for (int i = 0; keys[i]; i++)
        if (!strcmp(keys[i], k)) return 1;
    return 0;
}

// jpath of a member: base.key, or base["key"] when the key needs quoting.
void scenario_member_path(char *out, size_t n, const char *base, const char *key) {
    int plain = key[0] && !strpbrk(key, ".[]\"");
    int len = plain ? snprintf(out, n, "%s%s%s", base, base[0] ? "." : "", key) : snprintf(out, n, "%s[\"%s\"]", base, key);
    if (len >= (int)n && n > 4) memcpy(out + n - 4, "...", 4);   // a path that long only names a place
}

// Every key of obj must be in `known`; reports the others at their key.
void scenario_check_keys(const Scenario *s, Problems *ps, const json_t *obj, const char *jpath,
                       const char *const *known, const char *where) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v) {
        if (in_list(known, k)) continue;
        char mp[512], list[512];
        scenario_member_path(mp, sizeof mp, jpath, k);
        known_list(known, list, sizeof list);
        PROBLEM(mp, 1, "unknown key '%s' in %s (known: %s)", k, where, list);
    }
}

// Typed getters: NULL/0 when absent (and not required) or wrong (reported).
const json_t *scenario_get_typed(const Scenario *s, Problems *ps, const json_t *obj, const char *jpath,
                               const char *key, int type, int required, const char *what) {
    const json_t *v = json_object_get(obj, key);
    char mp[512];
    scenario_member_path(mp, sizeof mp, jpath, key);
    if (!v) {
        if (required) PROBLEM(mp, 0, "missing required key '%s'", key);
        return NULL;
    }
    int ok = type == JSON_REAL ? json_is_number(v) : (int)json_typeof(v) == type;
    if (!ok) {
        char got[96];
        scenario_describe(v, got, sizeof got);
        PROBLEM(mp, 0, "%s: expected %s, got %s", key, what, got);
        return NULL;
    }
    return v;
}

static int name_ok(const char *n, size_t max) {
    size_t len = strlen(n);
    if (len == 0 || len > max) return 0;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
              *p == '-' || *p == '.'))
            return 0;
    return 1;
}

void scenario_read_name(Scenario *s, Problems *ps) {
    const json_t *v = scenario_get_typed(s, ps, s->root, "", "name", JSON_STRING, 1, "a string");
    if (!v) return;
    if (!name_ok(json_string_value(v), 63))
        PROBLEM("name", 0, "name: \"%.64s%s\": 1 to 63 characters from A-Z a-z 0-9 _ . -", json_string_value(v),
                strlen(json_string_value(v)) > 64 ? "…" : "");
    else snprintf(s->name, sizeof s->name, "%s", json_string_value(v));
}

// ---- overrides ---------------------------------------------------------------------------

typedef struct {
    Override *v;
    int n, cap;
} OvList;

static void ov_add(OvList *l, const char *key, const json_t *value, int line, int col) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->v = xrealloc(l->v, sizeof(Override) * (size_t)l->cap);
    }
    Override *o = &l->v[l->n++];
    snprintf(o->key, sizeof o->key, "%s", key);
    o->value = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!o->value) o->value = xstrdup("null");
    o->line = line;
    o->col = col;
}

static void ov_copy(OvList *dst, const OvList *src) {
    for (int i = 0; i < src->n; i++) {
        if (dst->n == dst->cap) {
            dst->cap = dst->cap ? 2 * dst->cap : 16;
            dst->v = xrealloc(dst->v, sizeof(Override) * (size_t)dst->cap);
        }
        dst->v[dst->n] = src->v[i];
        dst->v[dst->n].value = xstrdup(src->v[i].value);
        dst->n++;
    }
}

static void ov_free(OvList *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i].value);
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

// A config key as the trainer's loader knows them: "section.key". The loader
// itself rejects unknown ones (the message is then moved here).
static int override_key_ok(const char *k) {
    const char *dot = strchr(k, '.');
    return dot && dot != k && dot[1] && !strchr(dot + 1, '.') && strlen(k) < 96;
}

// "overrides" object at jpath into l.
static void read_overrides(const Scenario *s, Problems *ps, const json_t *obj, const char *jpath, OvList *l) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v) {
        char mp[512];
        scenario_member_path(mp, sizeof mp, jpath, k);
        if (!override_key_ok(k)) {
            PROBLEM(mp, 1, "override key '%s': expected section.key (e.g. \"train.steps\", \"nsa.w\")", k);
            continue;
        }
        if (json_is_null(v)) {
            PROBLEM(mp, 0, "%s: null is not a value (leave the key out for the config's value)", k);
            continue;
        }
        int line = 0, col = 0;
        scenario_pos(s, mp, 0, &line, &col);
        ov_add(l, k, v, line, col);
    }
}

// ---- run -----------------------------------------------------------------------------------

typedef struct {
    RunSpec run;
    int have_stall;
    // run.steps / run.precision become config overrides
    OvList sugar;
    TrainerSpec *trainers;   // run.trainers (the top level's, then the profile's)
    int n_trainers;
} RunBuild;

static void run_defaults(RunBuild *rb) {
    memset(rb, 0, sizeof *rb);
    rb->run.world_size = 1;
    snprintf(rb->run.transport, sizeof rb->run.transport, "none");
    snprintf(rb->run.launcher, sizeof rb->run.launcher, "local");
    rb->run.timeout_s = DEFAULT_TIMEOUT_S;
}

static void env_set(RunSpec *r, const char *name, const char *value) {
    size_t nl = strlen(name);
    for (int i = 0; i < r->n_env; i++)
        if (!strncmp(r->env[i], name, nl) && r->env[i][nl] == '=') {
            free(r->env[i]);
            r->n_env--;
            memmove(&r->env[i], &r->env[i + 1], sizeof(char *) * (size_t)(r->n_env - i));
            break;
        }
    r->env = xrealloc(r->env, sizeof(char *) * (size_t)(r->n_env + 1));
    Str e = {0};
    str_printf(&e, "%s=%s", name, value);
    r->env[r->n_env++] = str_take(&e);
}

static char **strs_copy(char *const *src, int n) {
    char **d = n ? xcalloc((size_t)n, sizeof(char *)) : NULL;
    for (int i = 0; i < n; i++) d[i] = xstrdup(src[i]);
    return d;
}
static void strs_free(char ***v, int *n) {
    for (int i = 0; i < *n; i++) free((*v)[i]);
    free(*v);
    *v = NULL;
    *n = 0;
}

static void run_copy(RunSpec *dst, const RunSpec *src) {
    *dst = *src;
    dst->env = strs_copy(src->env, src->n_env);
    dst->hosts = strs_copy(src->hosts, src->n_hosts);
    dst->launcher_args = strs_copy(src->launcher_args, src->n_launcher_args);
}

static void run_free(RunSpec *r) {
    strs_free(&r->env, &r->n_env);
    strs_free(&r->hosts, &r->n_hosts);
    strs_free(&r->launcher_args, &r->n_launcher_args);
}

static void trainers_free(TrainerSpec **t, int *n) {
    for (int i = 0; i < *n; i++) trainer_spec_free(&(*t)[i]);
    free(*t);
    *t = NULL;
    *n = 0;
}

const TrainerSpec *scenario_trainer(const Scenario *s, const char *name) {
    for (int i = 0; i < s->n_trainers; i++)
        if (!strcmp(s->trainers[i].name, name)) return &s->trainers[i];
    return NULL;
}

// A trainer's name: what a matrix label and a case name can hold.
static int trainer_name_ok(const char *n) {
    if (!n[0] || strlen(n) >= 64) return 0;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("_.-", *p)))
            return 0;
    return 1;
}

// The slot of run.trainers' `name` (a name given again, a profile's, replaces the earlier
// trainer: its slot is freed), ready for trainer_spec_init*.
static TrainerSpec *trainer_slot(RunBuild *rb, const char *name) {
    for (int i = 0; i < rb->n_trainers; i++)
        if (!strcmp(rb->trainers[i].name, name)) {
            trainer_spec_free(&rb->trainers[i]);
            return &rb->trainers[i];
        }
    rb->trainers = xrealloc(rb->trainers, sizeof(TrainerSpec) * (size_t)(rb->n_trainers + 1));
    return &rb->trainers[rb->n_trainers++];
}

static const char *const TRAINER_MAP_KEYS[] = {"map", NULL};

// run.trainers.NAME as {"map": PATH} (the object v at np): a trainer map (docs/trainer-maps.md),
// PATH relative to the scenario's folder like config; the trainer is the probe's command
// `PROBE --map ABS_PATH` (harness/core/trainer_cmd.h). Its content is checked by the probe
// (`--check-map`) before a run and in `validate`, not here.
static void read_run_trainer_map(const Scenario *s, Problems *ps, const json_t *v, const char *np, const char *name,
                                 RunBuild *rb) {
    char where[128];
    snprintf(where, sizeof where, "run.trainers.%s", name);
    scenario_check_keys(s, ps, v, np, TRAINER_MAP_KEYS, where);
    const json_t *m = json_object_get(v, "map");
    char mp[800];
    scenario_member_path(mp, sizeof mp, np, "map");
    if (!json_is_string(m) || !json_string_value(m)[0]) {
        char got[96];
        if (m) scenario_describe(m, got, sizeof got);
        PROBLEM(m ? mp : np, 0, "trainers.%s: expected {\"map\": PATH} (the trainer map file, relative to the "
                                "scenario), %s%s", name, m ? "got " : "missing \"map\"", m ? got : "");
        return;
    }
    char path[2048], real[4096];
    if (trainer_map_path(s->dir, json_string_value(m), real, sizeof real)) {
        path_join(path, sizeof path, s->dir, json_string_value(m));
        PROBLEM(mp, 0, "trainers.%s.map: %s: %s", name, path, is_dir(path) ? "a folder, not a trainer map file"
                                                                          : "no such file");
        return;
    }
    trainer_spec_init_map(trainer_slot(rb, name), name, real);
}

// run.trainers (the object v at mp): each name -> a command, an array of words or one string
// split as a shell would (words that name relative paths are resolved against the scenario's
// folder), or {"map": PATH}. A name given again (a profile's) replaces the earlier trainer.
static void read_run_trainers(const Scenario *s, Problems *ps, const json_t *v, const char *mp, RunBuild *rb) {
    const char *name;
    json_t *cmd;
    json_object_foreach((json_t *)v, name, cmd) {
        char np[700];
        scenario_member_path(np, sizeof np, mp, name);
        if (!trainer_name_ok(name)) {
            PROBLEM(np, 1, "trainers: '%s' is not a trainer name (letters, digits, '_', '.', '-'; at most 63)", name);
            continue;
        }
        if (!strcmp(name, "nsa-train")) {
            PROBLEM(np, 1, "trainers: 'nsa-train' is reserved: it is the run's default trainer (the nsa-train "
                           "beside nsa-harness, --trainer, --trainer-cmd or --trainer-map)");
            continue;
        }
        if (json_is_object(cmd)) {   // {"map": PATH}: the probe runs the map's trainer
            read_run_trainer_map(s, ps, cmd, np, name, rb);
            continue;
        }
        StrList words = {0};
        int bad = 0;
        if (json_is_string(cmd)) {
            char err[200];
            if (trainer_split_words(json_string_value(cmd), &words, err, sizeof err)) {
                PROBLEM(np, 0, "trainers.%s: %s", name, err);
                bad = 1;
            }
        } else if (json_is_array(cmd)) {
            size_t i;
            json_t *w;
            json_array_foreach(cmd, i, w) {
                if (!json_is_string(w) || !json_string_value(w)[0]) {
                    char ip[800];
                    snprintf(ip, sizeof ip, "%s[%zu]", np, i);
                    PROBLEM(ip, 0, "trainers.%s[%zu]: expected a word of the command (a non-empty string)", name, i);
                    bad = 1;
                } else strlist_add(&words, json_string_value(w));
            }
        } else {
            char got[96];
            scenario_describe(cmd, got, sizeof got);
            PROBLEM(np, 0, "trainers.%s: expected a command (an array of words or one string) or {\"map\": PATH}, "
                           "got %s", name, got);
            bad = 1;
        }
        if (!bad && words.n == 0) {
            PROBLEM(np, 0, "trainers.%s: the command is empty", name);
            bad = 1;
        }
        if (!bad) {
            trainer_absolutize(&words, s->dir, 0);
            trainer_spec_init(trainer_slot(rb, name), name, words.v, 1);
        }
        strlist_free(&words);
    }
}

// An array of non-empty strings (run.hosts, run.launcher_args) into *out (replacing it).
static void read_strings(const Scenario *s, Problems *ps, const json_t *v, const char *mp, const char *key,
                         const char *what, char ***out, int *n) {
    if (!json_is_array(v)) {
        char got[96];
        scenario_describe(v, got, sizeof got);
        PROBLEM(mp, 0, "%s: expected an array of %s, got %s", key, what, got);
        return;
    }
    strs_free(out, n);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e) || !json_string_value(e)[0] || strlen(json_string_value(e)) > 1000) {
            char ip[600];
            snprintf(ip, sizeof ip, "%s[%zu]", mp, i);
            PROBLEM(ip, 0, "%s[%zu]: expected %s (a non-empty string)", key, i, what);
            continue;
        }
        *out = xrealloc(*out, sizeof(char *) * (size_t)(*n + 1));
        (*out)[(*n)++] = xstrdup(json_string_value(e));
    }
}

// run.env (the object v at jpath's "env"): variable names and string values into rb.
static void read_run_env(const Scenario *s, Problems *ps, const json_t *v, const char *jpath, RunBuild *rb) {
    char mp[512];
    const char *k;
    json_t *e;
    char ep[512];
    scenario_member_path(ep, sizeof ep, jpath, "env");
    json_object_foreach((json_t *)v, k, e) {
        scenario_member_path(mp, sizeof mp, ep, k);
        int name_valid = k[0] && !strchr(k, '=') && !(k[0] >= '0' && k[0] <= '9');
        for (const char *p = k; *p && name_valid; p++)
            name_valid = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_';
        if (!name_valid) {
            PROBLEM(mp, 1, "env: '%s' is not an environment variable name", k);
            continue;
        }
        if (!json_is_string(e)) {
            char got[96];
            scenario_describe(e, got, sizeof got);
            PROBLEM(mp, 0, "env.%s: expected a string, got %s", k, got);
            continue;
        }
        env_set(&rb->run, k, json_string_value(e));
    }
}

// run.hosts and run.launcher_args.
static void read_run_lists(const Scenario *s, Problems *ps, const json_t *obj, const char *jpath, RunBuild *rb) {
    char mp[512];
    const json_t *v;
    if ((v = json_object_get(obj, "hosts"))) {
        scenario_member_path(mp, sizeof mp, jpath, "hosts");
        read_strings(s, ps, v, mp, "hosts", "host names (\"node1\" or \"node1:4\" with its slots)", &rb->run.hosts,
                     &rb->run.n_hosts);
        for (int i = 0; i < rb->run.n_hosts; i++)
            if (strpbrk(rb->run.hosts[i], " \t\n#")) {
                PROBLEM(mp, 0, "hosts[%d]: '%.64s' is not a host name (no spaces or '#'; \"host:slots\" for slots)", i,
                        rb->run.hosts[i]);
                break;
            }
    }
    if ((v = json_object_get(obj, "launcher_args"))) {
        scenario_member_path(mp, sizeof mp, jpath, "launcher_args");
        read_strings(s, ps, v, mp, "launcher_args", "launcher arguments", &rb->run.launcher_args, &rb->run.n_launcher_args);
    }
}

// Apply a "run" object (top level or a profile's) over rb.
static void read_run(const Scenario *s, Problems *ps, const json_t *obj, const char *jpath, RunBuild *rb) {
    scenario_check_keys(s, ps, obj, jpath, RUN_KEYS, "'run'");
    char mp[512];
    const json_t *v;
    if ((v = scenario_get_typed(s, ps, obj, jpath, "steps", JSON_INTEGER, 0, "a positive integer"))) {
        scenario_member_path(mp, sizeof mp, jpath, "steps");
        if (json_integer_value(v) < 1 || json_integer_value(v) > 1000000000)
            PROBLEM(mp, 0, "steps: expected a positive integer, got %lld", (long long)json_integer_value(v));
        else {
            int line = 0, col = 0;
            scenario_pos(s, mp, 0, &line, &col);
            ov_add(&rb->sugar, "train.steps", v, line, col);
        }
    }
    if ((v = scenario_get_typed(s, ps, obj, jpath, "world_size", JSON_INTEGER, 0, "a positive integer"))) {
        scenario_member_path(mp, sizeof mp, jpath, "world_size");
        if (json_integer_value(v) < 1 || json_integer_value(v) > 4096)
            PROBLEM(mp, 0, "world_size: expected an integer from 1 to 4096, got %lld",
                    (long long)json_integer_value(v));
        else rb->run.world_size = (int)json_integer_value(v);
    }
    if ((v = scenario_get_typed(s, ps, obj, jpath, "precision", JSON_STRING, 0, "a string"))) {
        scenario_member_path(mp, sizeof mp, jpath, "precision");
        if (!in_list(PRECISIONS, json_string_value(v)))
            PROBLEM(mp, 0, "precision: expected one of \"fp32\", \"fp64\", \"bf16\", \"fp16\", got \"%s\"",
                    json_string_value(v));
        else {
            int line = 0, col = 0;
            scenario_pos(s, mp, 0, &line, &col);
            ov_add(&rb->sugar, "train.precision", v, line, col);
        }
    }
    if ((v = scenario_get_typed(s, ps, obj, jpath, "transport", JSON_STRING, 0, "a string"))) {
        scenario_member_path(mp, sizeof mp, jpath, "transport");
        if (!in_list(TRANSPORTS, json_string_value(v)))
            PROBLEM(mp, 0, "transport: expected one of \"none\", \"mpi\", \"nccl\", \"gloo\", got \"%s\"",
                    json_string_value(v));
        else snprintf(rb->run.transport, sizeof rb->run.transport, "%s", json_string_value(v));
    }
    if ((v = scenario_get_typed(s, ps, obj, jpath, "timeout_s", JSON_REAL, 0, "a positive number of seconds"))) {
        scenario_member_path(mp, sizeof mp, jpath, "timeout_s");
        double t = json_number_value(v);
        if (!(t > 0) || t > 7 * 24 * 3600.0) PROBLEM(mp, 0, "timeout_s: expected a positive number of seconds, got %g", t);
        else rb->run.timeout_s = t;
    }
    if ((v = scenario_get_typed(s, ps, obj, jpath, "stall_s", JSON_REAL, 0, "a positive number of seconds"))) {
        scenario_member_path(mp, sizeof mp, jpath, "stall_s");
        double t = json_number_value(v);
        if (!(t > 0) || t > 7 * 24 * 3600.0) PROBLEM(mp, 0, "stall_s: expected a positive number of seconds, got %g", t);
        else {
            rb->run.stall_s = t;
            rb->have_stall = 1;
        }
    }
    if ((v = scenario_get_typed(s, ps, obj, jpath, "launcher", JSON_STRING, 0, "a string"))) {
        scenario_member_path(mp, sizeof mp, jpath, "launcher");
        if (!in_list(LAUNCHERS, json_string_value(v)))
            PROBLEM(mp, 0, "launcher: expected one of \"local\", \"mpirun\", \"srun\", \"env\", got \"%.64s\"",
                    json_string_value(v));
        else snprintf(rb->run.launcher, sizeof rb->run.launcher, "%s", json_string_value(v));
    }
    read_run_lists(s, ps, obj, jpath, rb);
    if ((v = scenario_get_typed(s, ps, obj, jpath, "env", JSON_OBJECT, 0, "an object of strings")))
        read_run_env(s, ps, v, jpath, rb);
    if ((v = scenario_get_typed(s, ps, obj, jpath, "trainers", JSON_OBJECT, 0, "an object {name: command}"))) {
        scenario_member_path(mp, sizeof mp, jpath, "trainers");
        read_run_trainers(s, ps, v, mp, rb);
    }
    if ((v = scenario_get_typed(s, ps, obj, jpath, "trainer", JSON_STRING, 0, "a trainer name (string)"))) {
        scenario_member_path(mp, sizeof mp, jpath, "trainer");
        snprintf(rb->run.trainer, sizeof rb->run.trainer, "%.63s", json_string_value(v));
        scenario_pos(s, mp, 0, &rb->run.trainer_line, &rb->run.trainer_col);
    }
    if ((v = scenario_get_typed(s, ps, obj, jpath, "init_weights", JSON_STRING, 0, "\"shared\" or \"own\""))) {
        scenario_member_path(mp, sizeof mp, jpath, "init_weights");
        if (!strcmp(json_string_value(v), "shared")) rb->run.init_shared = 1;
        else if (!strcmp(json_string_value(v), "own")) rb->run.init_shared = 0;
        else PROBLEM(mp, 0, "init_weights: expected \"shared\" (nsa-train's step-0 weights, --init-weights) or "
                            "\"own\" (the trainer's own init), got \"%.64s\"", json_string_value(v));
    }
}

// ---- matrix -----------------------------------------------------------------------------------

// One value of an axis: its label and what it sets.
typedef struct {
    char label[96];
    OvList ov;            // config overrides
    int world_size;       // 0 = unchanged
    char transport[8];    // "" = unchanged
    char launcher[8];     // "" = unchanged
    char trainer[64];     // "" = unchanged
    int trainer_line, trainer_col;
    int if_supported;     // listed in the axis's "if_supported"
} AxisValue;

typedef struct {
    char name[32];
    char jpath[512];      // where the axis is (for problems)
    AxisValue *vals;
    int n_vals;
    const char *if_feature, *if_what;   // "if_supported": the trainer's feature list its values need
} AxisBuild;

// The keys an axis's "if_supported" can go with: the feature list of --protocol-info that
// names the values a trainer supports (docs/trainer-protocol.md).
static const struct { const char *key, *feature, *what; } IF_SUPPORTED_KEYS[] = {
    {"run.transport", "transports", "transport"}, {"train.backend", "backends", "backend"},
    {"train.precision", "precisions", "precision"}, {"train.ddp_mode", "ddp_modes", "DDP mode"}};

static void axis_free(AxisBuild *a) {
    for (int i = 0; i < a->n_vals; i++) ov_free(&a->vals[i].ov);
    free(a->vals);
    a->vals = NULL;
    a->n_vals = 0;
}

// A "run.X" key inside the matrix (sets run settings rather than the config).
static int apply_run_key(const Scenario *s, Problems *ps, const char *mp, const char *key, const json_t *v,
                         AxisValue *av) {
    if (!strcmp(key, "run.world_size")) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 4096) {
            char got[96];
            scenario_describe(v, got, sizeof got);
            PROBLEM(mp, 0, "run.world_size: expected an integer from 1 to 4096, got %s", got);
        } else av->world_size = (int)json_integer_value(v);
        return 1;
    }
    if (!strcmp(key, "run.transport")) {
        if (!json_is_string(v) || !in_list(TRANSPORTS, json_string_value(v))) {
            char got[96];
            scenario_describe(v, got, sizeof got);
            PROBLEM(mp, 0, "run.transport: expected one of \"none\", \"mpi\", \"nccl\", \"gloo\", got %s", got);
        } else snprintf(av->transport, sizeof av->transport, "%s", json_string_value(v));
        return 1;
    }
    if (!strcmp(key, "run.launcher")) {
        if (!json_is_string(v) || !in_list(LAUNCHERS, json_string_value(v))) {
            char got[96];
            scenario_describe(v, got, sizeof got);
            PROBLEM(mp, 0, "run.launcher: expected one of \"local\", \"mpirun\", \"srun\", \"env\", got %s", got);
        } else snprintf(av->launcher, sizeof av->launcher, "%s", json_string_value(v));
        return 1;
    }
    if (!strcmp(key, "run.trainer")) {
        if (!json_is_string(v) || !json_string_value(v)[0] || strlen(json_string_value(v)) >= 64) {
            char got[96];
            scenario_describe(v, got, sizeof got);
            PROBLEM(mp, 0, "run.trainer: expected a trainer name (\"nsa-train\" or a name of run.trainers), got %s", got);
        } else {
            snprintf(av->trainer, sizeof av->trainer, "%s", json_string_value(v));
            scenario_pos(s, mp, 0, &av->trainer_line, &av->trainer_col);
        }
        return 1;
    }
    if (!strncmp(key, "run.", 4)) {
        PROBLEM(mp, 1, "'%s': the matrix can vary run.world_size, run.transport, run.launcher and run.trainer "
                       "(run.steps and run.precision: use train.steps and train.precision)", key);
        return 1;
    }
    return 0;
}

static int axis_name_ok(const char *n) {
    if (!n[0] || strlen(n) >= 32) return 0;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_')) return 0;
    return 1;
}

// An axis's "values" as a list (at vp), each setting config key (or run.X) `key`.
// 0, or -1 when the axis is unusable (reported).
static int read_axis_list(const Scenario *s, Problems *ps, const char *name, const json_t *key, const char *kp,
                          const json_t *vals, const char *vp, AxisBuild *out) {
    if (!key) {
        PROBLEM(vp, 0, "bad matrix: axis '%s': a list of values needs \"key\" (the config key they set); "
                       "or give \"values\" as an object of labelled overrides", name);
        return -1;
    }
    const char *k = json_string_value(key);
    if (strncmp(k, "run.", 4) && !override_key_ok(k)) {
        PROBLEM(kp, 0, "bad matrix: axis '%s': key '%s': expected section.key (e.g. \"nsa.w\") or "
                       "run.world_size / run.transport / run.launcher / run.trainer", name, k);
        return -1;
    }
    if (json_array_size(vals) == 0) {
        PROBLEM(vp, 0, "bad matrix: axis '%s' has no values", name);
        return -1;
    }
    out->vals = xcalloc(json_array_size(vals), sizeof(AxisValue));
    size_t i;
    json_t *v;
    json_array_foreach(vals, i, v) {
        char ip[600];
        snprintf(ip, sizeof ip, "%s[%zu]", vp, i);
        if (json_is_object(v) || json_is_null(v)) {
            char got[96];
            scenario_describe(v, got, sizeof got);
            PROBLEM(ip, 0, "bad matrix: axis '%s': values[%zu]: expected a string, number, boolean or "
                           "array, got %s", name, i, got);
            continue;
        }
        AxisValue *av = &out->vals[out->n_vals];
        json_value_text(v, av->label, sizeof av->label);   // the label: strings unquoted, others compact JSON
        int dup = 0;
        for (int j = 0; j < out->n_vals; j++) dup |= !strcmp(out->vals[j].label, av->label);
        if (dup) {
            PROBLEM(ip, 0, "bad matrix: axis '%s': value %s appears twice", name, av->label);
            continue;
        }
        if (!apply_run_key(s, ps, ip, k, v, av)) {
            int line = 0, col = 0;
            scenario_pos(s, ip, 0, &line, &col);
            ov_add(&av->ov, k, v, line, col);
        }
        out->n_vals++;
    }
    return 0;
}

// An axis's "values" as an object of labelled overrides (at vp). 0, or -1 when
// the axis is unusable (reported).
static int read_axis_labelled(const Scenario *s, Problems *ps, const char *name, const json_t *key, const char *kp,
                              const json_t *vals, const char *vp, AxisBuild *out) {
    if (key) {
        PROBLEM(kp, 1, "bad matrix: axis '%s': \"key\" goes with a list of values; labelled values "
                       "(an object) name their keys themselves", name);
        return -1;
    }
    if (json_object_size(vals) == 0) {
        PROBLEM(vp, 0, "bad matrix: axis '%s' has no values", name);
        return -1;
    }
    out->vals = xcalloc(json_object_size(vals), sizeof(AxisValue));
    const char *label;
    json_t *set;
    json_object_foreach((json_t *)vals, label, set) {
        char lp[600];
        scenario_member_path(lp, sizeof lp, vp, label);
        if (!label[0] || strlen(label) >= 96 || strpbrk(label, ",/=")) {
            PROBLEM(lp, 1, "bad matrix: axis '%s': label '%s' (non-empty, at most 95 bytes, no ',' '/' '=')",
                    name, label);
            continue;
        }
        if (!json_is_object(set)) {
            char got[96];
            scenario_describe(set, got, sizeof got);
            PROBLEM(lp, 0, "bad matrix: axis '%s': value '%s': expected an object of overrides, got %s", name,
                    label, got);
            continue;
        }
        AxisValue *av = &out->vals[out->n_vals++];
        snprintf(av->label, sizeof av->label, "%s", label);
        const char *ok;
        json_t *ov;
        json_object_foreach(set, ok, ov) {
            char op[700];
            scenario_member_path(op, sizeof op, lp, ok);
            if (apply_run_key(s, ps, op, ok, ov, av)) continue;
            if (!override_key_ok(ok)) {
                PROBLEM(op, 1, "override key '%s': expected section.key (e.g. \"train.steps\")", ok);
                continue;
            }
            if (json_is_null(ov)) {
                PROBLEM(op, 0, "%s: null is not a value", ok);
                continue;
            }
            int line = 0, col = 0;
            scenario_pos(s, op, 0, &line, &col);
            ov_add(&av->ov, ok, ov, line, col);
        }
    }
    return 0;
}

// "if_supported": [values of the axis]: the cases of those values are planned only for a
// trainer that supports them (a list axis whose key is in IF_SUPPORTED_KEYS). Problems go to ps.
static void read_axis_if_supported(const Scenario *s, Problems *ps, const char *name, const json_t *ax,
                                   const char *jpath, AxisBuild *out) {
    const json_t *ifs = json_object_get(ax, "if_supported");
    if (!ifs) return;
    char ip[600];
    scenario_member_path(ip, sizeof ip, jpath, "if_supported");
    const char *key = json_string_value(json_object_get(ax, "key"));
    for (size_t k = 0; key && k < sizeof IF_SUPPORTED_KEYS / sizeof *IF_SUPPORTED_KEYS; k++)
        if (!strcmp(key, IF_SUPPORTED_KEYS[k].key)) {
            out->if_feature = IF_SUPPORTED_KEYS[k].feature;
            out->if_what = IF_SUPPORTED_KEYS[k].what;
        }
    if (!out->if_feature) {
        PROBLEM(ip, 1, "bad matrix: axis '%s': if_supported goes with a list axis whose key is run.transport, "
                       "train.backend, train.precision or train.ddp_mode", name);
        return;
    }
    if (!json_is_array(ifs) || json_array_size(ifs) == 0) {
        PROBLEM(ip, 0, "bad matrix: axis '%s': if_supported: expected a non-empty list of the axis's values", name);
        return;
    }
    size_t i;
    json_t *v;
    json_array_foreach(ifs, i, v) {
        char label[96] = "", vp[700];
        snprintf(vp, sizeof vp, "%s[%zu]", ip, i);
        if (json_is_string(v)) json_value_text(v, label, sizeof label);
        int found = 0;
        for (int j = 0; j < out->n_vals; j++)
            if (label[0] && !strcmp(out->vals[j].label, label)) out->vals[j].if_supported = found = 1;
        if (!found) PROBLEM(vp, 0, "bad matrix: axis '%s': if_supported[%zu]: not one of the axis's values", name, i);
    }
}

// Parse one axis (its object at jpath). Returns 0 if usable.
static int read_axis(const Scenario *s, Problems *ps, const char *name, const json_t *ax, const char *jpath,
                     AxisBuild *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    snprintf(out->jpath, sizeof out->jpath, "%s", jpath);
    if (!axis_name_ok(name)) {
        PROBLEM(jpath, 1, "bad matrix: axis name '%s' (letters, digits and _ only, at most 31)", name);
        return -1;
    }
    if (!json_is_object(ax)) {
        char got[96];
        scenario_describe(ax, got, sizeof got);
        PROBLEM(jpath, 0, "bad matrix: axis '%s': expected an object {\"key\": ..., \"values\": [...]} or "
                          "{\"values\": {label: {overrides}}}, got %s", name, got);
        return -1;
    }
    int before = ps->n;
    scenario_check_keys(s, ps, ax, jpath, AXIS_KEYS, "a matrix axis");
    const json_t *key = json_object_get(ax, "key"), *vals = json_object_get(ax, "values");
    char kp[512], vp[512];
    scenario_member_path(kp, sizeof kp, jpath, "key");
    scenario_member_path(vp, sizeof vp, jpath, "values");
    if (!vals) {
        PROBLEM(jpath, 0, "bad matrix: axis '%s' has no \"values\"", name);
        return -1;
    }
    if (key && !json_is_string(key)) {
        char got[96];
        scenario_describe(key, got, sizeof got);
        PROBLEM(kp, 0, "bad matrix: axis '%s': key: expected a string, got %s", name, got);
        return -1;
    }
    int rc;
    if (json_is_array(vals)) rc = read_axis_list(s, ps, name, key, kp, vals, vp, out);
    else if (json_is_object(vals)) rc = read_axis_labelled(s, ps, name, key, kp, vals, vp, out);
    else {
        char got[96];
        scenario_describe(vals, got, sizeof got);
        PROBLEM(vp, 0, "bad matrix: axis '%s': values: expected an array or an object, got %s", name, got);
        return -1;
    }
    if (!rc) read_axis_if_supported(s, ps, name, ax, jpath, out);
    return rc || ps->n != before ? -1 : 0;
}

// ---- config validation per case -----------------------------------------------------------------

// Where a config problem goes in the scenario's report: a problem with an
// override at that override's position in the scenario (or, for a run --set,
// the flag); one of the config file at its own position there; anything else
// (a missing config file) at the scenario's "config" value. `line` gets the
// sort position (0 for a flag, past the end for the config's own problems).
static void place_config_problem(const Scenario *s, const Case *c, const ConfigProblems *cps, int i,
                                 const char *const *sets, const char *config_jpath, const char *tag, Str *out,
                                 int *line, int *col) {
    const ConfigProblem *p = &cps->v[i];
    *line = *col = 0;
    if (p->override >= 0) {
        const Override *o = &c->ov[p->override];
        Str msg = {0};
        if (p->key[0]) str_printf(&msg, "%s: ", p->key);
        str_add(&msg, p->message);
        *line = o->line;
        *col = o->col;
        if (o->line > 0) str_printf(out, "%s:%d:%d: %s%s", s->path, o->line, o->col, str_c(&msg), tag);
        else str_printf(out, "--set %s: %s (scenario %s%s)", sets[p->override], str_c(&msg), s->path, tag);
        str_free(&msg);
        return;
    }
    char *text = config_problem_text(cps, i, sets);
    if (p->line > 0) {
        str_printf(out, "%s (the config of %s%s)", text, s->path, tag);
        *line = 1 << 29;
    } else {
        scenario_pos(s, config_jpath, 0, line, col);
        str_printf(out, "%s:%d:%d: config: %s", s->path, *line, *col, text);
        if (!*line) *line = 1 << 29;
    }
    free(text);
}

// Run the trainer's config loader on the case's overrides; move its problems to
// the scenario positions of the overrides they name. `seen` dedupes problems that
// every case shares (an overrides typo would otherwise repeat once per case).
static int resolve_config(const Scenario *s, Problems *ps, Case *c, const char *config_path,
                          const char *config_jpath, int profile, Str *seen) {
    // "(profile gpu, case x=1)": which expansion the problem belongs to, when it is not obvious
    char tag[400] = "";
    if (profile != s->profile && s->n_axes) snprintf(tag, sizeof tag, " (profile %s, case %s)", PROFILE_NAMES[profile], c->name);
    else if (profile != s->profile) snprintf(tag, sizeof tag, " (profile %s)", PROFILE_NAMES[profile]);
    else if (s->n_axes) snprintf(tag, sizeof tag, " (case %s)", c->name);
    char **sets = xcalloc((size_t)c->n_ov + 1, sizeof(char *));
    for (int i = 0; i < c->n_ov; i++) {
        Str o = {0};
        str_printf(&o, "%s=%s", c->ov[i].key, c->ov[i].value);
        sets[i] = str_take(&o);
    }
    ConfigProblems cps = {0};
    int rc = config_load_problems(&c->cfg, config_path, (const char *const *)sets, c->n_ov, &cps);
    for (int i = 0; i < cps.n; i++) {
        Str one = {0};
        int line, col;
        place_config_problem(s, c, &cps, i, (const char *const *)sets, config_jpath, tag, &one, &line, &col);
        // dedupe on the message without the case name
        const char *txt = str_c(&one);
        const char *cs = tag[0] ? strstr(txt, tag) : NULL;
        Str key = {0};
        str_addn(&key, txt, cs ? (size_t)(cs - txt) : strlen(txt));
        str_add(&key, "\n");
        if (!strstr(str_c(seen), str_c(&key))) {
            str_add(seen, str_c(&key));
            problems_add(ps, line, col, "%s", txt);
        }
        str_free(&key);
        str_free(&one);
    }
    if (cps.oom) {
        int line = 0, col = 0;
        scenario_pos(s, config_jpath, 0, &line, &col);
        problems_add(ps, line ? line : 1 << 29, col, "%s:%d:%d: config: out of memory while loading the config",
                     s->path, line, col);
    }
    config_problems_free(&cps);
    for (int i = 0; i < c->n_ov; i++) free(sets[i]);
    free(sets);
    return rc;
}

// ---- cases ---------------------------------------------------------------------------------------

void scenario_case_free(Case *c, int n_axes) {
    for (int i = 0; i < c->n_ov; i++) free(c->ov[i].value);
    free(c->ov);
    if (c->labels)
        for (int a = 0; a < n_axes; a++) free(c->labels[a]);
    free(c->labels);
    run_free(&c->run);
}

void scenario_free_cases(Scenario *s) {
    for (int i = 0; i < s->n_cases; i++) scenario_case_free(&s->cases[i], s->n_axes);
    free(s->cases);
    s->cases = NULL;
    s->n_cases = 0;
    free(s->axes);
    s->axes = NULL;
    s->n_axes = 0;
}

// ---- expansion of one profile, stage by stage --------------------------------------------------
// config -> overrides and run settings -> requires -> matrix -> cases (the
// cartesian product) -> exclude -> the launchers' contracts -> each case's config
// through the trainer's loader.

// What expanding one profile builds before it makes cases.
typedef struct {
    int p;                  // PROFILE_*
    const json_t *prof;     // its object in "profiles" (NULL: the file lacks it)
    char pp[64];            // "profiles.<name>"
    char cjp[96];           // where the config path stands: "config" or "profiles.<name>.config"
    OvList base;            // every case's overrides: the file's, the profile's, run sugar, run --set
    RunBuild rb;            // run settings before the matrix varies them
    AxisBuild *axes;        // the matrix: top-level axes, a profile's axis of the same name replacing one
    int n_axes;
} ProfileBuild;

static void profile_build_free(ProfileBuild *pb) {
    for (int a = 0; a < pb->n_axes; a++) axis_free(&pb->axes[a]);
    free(pb->axes);
    ov_free(&pb->base);
    ov_free(&pb->rb.sugar);
    run_free(&pb->rb.run);
    trainers_free(&pb->rb.trainers, &pb->rb.n_trainers);
}

// The config: the profile's, else the top level's, into s->config_path. 0 or -1
// (missing; a wrong type was reported when reading the top level).
static int profile_config(ScenarioLoader *ld, ProfileBuild *pb) {
    Scenario *s = ld->s;
    Problems *ps = ld->ps;
    const json_t *cfgv = pb->prof ? json_object_get(pb->prof, "config") : NULL;
    snprintf(pb->cjp, sizeof pb->cjp, "%s.config", pb->pp);
    if (!cfgv) {
        cfgv = json_object_get(s->root, "config");
        snprintf(pb->cjp, sizeof pb->cjp, "config");
    }
    if (!cfgv || !json_is_string(cfgv)) {
        if (!json_object_get(s->root, "config"))
            PROBLEM("", 0, "missing required key 'config' (the model config file, relative to the scenario)");
        return -1;
    }
    path_join(s->config_path, sizeof s->config_path, s->dir, json_string_value(cfgv));
    return 0;
}

// Overrides (top level, then the profile's: later ones win in the config
// loader) and run settings (defaults, top level, the profile's); run.steps and
// run.precision become overrides after them.
static void profile_overrides_and_run(ScenarioLoader *ld, ProfileBuild *pb) {
    Scenario *s = ld->s;
    Problems *ps = ld->ps;
    const json_t *o;
    if ((o = json_object_get(s->root, "overrides")) && json_is_object(o)) read_overrides(s, ps, o, "overrides", &pb->base);
    if (pb->prof && (o = json_object_get(pb->prof, "overrides"))) {
        char op[96];
        snprintf(op, sizeof op, "%s.overrides", pb->pp);
        if (json_is_object(o)) read_overrides(s, ps, o, op, &pb->base);
    }
    run_defaults(&pb->rb);
    if ((o = json_object_get(s->root, "run")) && json_is_object(o)) read_run(s, ps, o, "run", &pb->rb);
    if (pb->prof && (o = json_object_get(pb->prof, "run"))) {
        char rp[96];
        snprintf(rp, sizeof rp, "%s.run", pb->pp);
        if (json_is_object(o)) read_run(s, ps, o, rp, &pb->rb);
        else {
            char got[96];
            scenario_describe(o, got, sizeof got);
            PROBLEM(rp, 0, "run: expected an object, got %s", got);
        }
    }
    if (!pb->rb.have_stall) pb->rb.run.stall_s = pb->rb.run.timeout_s;
    ov_copy(&pb->base, &pb->rb.sugar);
}

// Command-line --set: after the scenario's own overrides (line 0: reported as the flag).
static void profile_command_line_sets(ScenarioLoader *ld, ProfileBuild *pb) {
    Problems *ps = ld->ps;
    for (int i = 0; i < ld->n_sets; i++) {
        const char *set = ld->sets[i];
        const char *eq = strchr(set, '=');
        char key[96];
        snprintf(key, sizeof key, "%.*s", eq ? (int)(eq - set) : 0, set);
        json_error_t je;
        json_t *v = eq ? json_loads(eq + 1, JSON_DECODE_ANY, &je) : NULL;
        if (!v && eq && strstr(je.text, "overflow")) {   // 1e999: a number no double holds
            problems_add(ps, 0, 0, "--set %s: %s is out of the range of a number (|x| < 1.8e308)", set, eq + 1);
            continue;
        }
        if (!v && eq) v = json_string(eq + 1);
        if (!eq || !override_key_ok(key) || !v) {
            problems_add(ps, 0, 0, "--set %s: expected section.key=value (e.g. --set train.seed=7)", set);
            json_decref(v);
            continue;
        }
        ov_add(&pb->base, key, v, 0, i);
        json_decref(v);
    }
}

// The profile's "requires" into s->requires_gpus.
static void profile_requires(ScenarioLoader *ld, const ProfileBuild *pb) {
    Scenario *s = ld->s;
    Problems *ps = ld->ps;
    const json_t *o;
    s->requires_gpus = 0;
    if (!pb->prof || !(o = json_object_get(pb->prof, "requires"))) return;
    char rq[96];
    snprintf(rq, sizeof rq, "%s.requires", pb->pp);
    if (!json_is_object(o)) {
        char got[96];
        scenario_describe(o, got, sizeof got);
        PROBLEM(rq, 0, "requires: expected an object, got %s", got);
        return;
    }
    scenario_check_keys(s, ps, o, rq, REQUIRES_KEYS, "'requires'");
    const json_t *g = scenario_get_typed(s, ps, o, rq, "gpus", JSON_INTEGER, 0, "a non-negative integer");
    if (!g) return;
    char gp[128];
    snprintf(gp, sizeof gp, "%s.gpus", rq);
    if (json_integer_value(g) < 0 || json_integer_value(g) > 4096)
        PROBLEM(gp, 0, "gpus: expected an integer from 0 to 4096, got %lld", (long long)json_integer_value(g));
    else s->requires_gpus = (int)json_integer_value(g);
}

// The matrix: top-level axes, then the profile's (one of the same name replaces
// it, new ones append). 1 if every axis is usable.
static int profile_matrix(ScenarioLoader *ld, ProfileBuild *pb) {
    Scenario *s = ld->s;
    Problems *ps = ld->ps;
    int matrix_ok = 1;
    for (int pass = 0; pass < 2; pass++) {
        const json_t *m = pass == 0 ? json_object_get(s->root, "matrix")
                                    : (pb->prof ? json_object_get(pb->prof, "matrix") : NULL);
        if (!m) continue;
        char mp[96];
        if (pass == 0) snprintf(mp, sizeof mp, "matrix");
        else snprintf(mp, sizeof mp, "%s.matrix", pb->pp);
        if (!json_is_object(m)) {
            char got[96];
            scenario_describe(m, got, sizeof got);
            PROBLEM(mp, 0, "bad matrix: expected an object of axes, got %s", got);
            matrix_ok = 0;
            continue;
        }
        const char *an;
        json_t *ax;
        json_object_foreach((json_t *)m, an, ax) {
            char ap[512];
            scenario_member_path(ap, sizeof ap, mp, an);
            AxisBuild b;
            if (read_axis(s, ps, an, ax, ap, &b)) {
                axis_free(&b);
                matrix_ok = 0;
                continue;
            }
            int slot = pb->n_axes;
            for (int i = 0; i < pb->n_axes; i++)
                if (!strcmp(pb->axes[i].name, an)) slot = i;
            if (slot == pb->n_axes) {
                pb->axes = xrealloc(pb->axes, sizeof(AxisBuild) * (size_t)(pb->n_axes + 1));
                pb->n_axes++;
            } else axis_free(&pb->axes[slot]);
            pb->axes[slot] = b;
        }
    }
    return matrix_ok;
}

// Case ci of the cartesian product: the base overrides and run settings, then
// each axis's value (the last axis varies fastest, so cases list in reading order).
static void make_case(const ProfileBuild *pb, size_t ci, Case *c) {
    int n_axes = pb->n_axes;
    OvList ovs = {0};
    ov_copy(&ovs, &pb->base);
    run_copy(&c->run, &pb->rb.run);
    c->labels = xcalloc((size_t)n_axes + 1, sizeof(char *));
    Str name = {0};
    size_t rest = ci;
    size_t *idx = xcalloc((size_t)n_axes + 1, sizeof(size_t));
    for (int a = n_axes - 1; a >= 0; a--) {
        idx[a] = rest % (size_t)pb->axes[a].n_vals;
        rest /= (size_t)pb->axes[a].n_vals;
    }
    for (int a = 0; a < n_axes; a++) {
        const AxisValue *av = &pb->axes[a].vals[idx[a]];
        str_printf(&name, "%s%s=%s", a ? "," : "", pb->axes[a].name, av->label);
        c->labels[a] = xstrdup(av->label);
        ov_copy(&ovs, &av->ov);
        if (av->world_size) c->run.world_size = av->world_size;
        if (av->transport[0]) snprintf(c->run.transport, sizeof c->run.transport, "%s", av->transport);
        if (av->launcher[0]) snprintf(c->run.launcher, sizeof c->run.launcher, "%s", av->launcher);
        if (av->trainer[0]) {
            snprintf(c->run.trainer, sizeof c->run.trainer, "%s", av->trainer);
            c->run.trainer_line = av->trainer_line;
            c->run.trainer_col = av->trainer_col;
        }
        if (av->if_supported && !c->if_feature[0]) {
            snprintf(c->if_feature, sizeof c->if_feature, "%s", pb->axes[a].if_feature);
            snprintf(c->if_what, sizeof c->if_what, "%s", pb->axes[a].if_what);
            snprintf(c->if_value, sizeof c->if_value, "%s", av->label);
        }
    }
    free(idx);
    snprintf(c->name, sizeof c->name, "%s", n_axes ? str_c(&name) : "default");
    str_free(&name);
    safe_name(c->dir, sizeof c->dir, c->name);
    c->ov = ovs.v;
    c->n_ov = ovs.n;
}

// s->axes and every case of the product into s->cases.
static void make_cases(Scenario *s, const ProfileBuild *pb, size_t n_cases) {
    s->axes = xcalloc((size_t)pb->n_axes + 1, sizeof(Axis));
    s->n_axes = pb->n_axes;
    for (int a = 0; a < pb->n_axes; a++) snprintf(s->axes[a].name, sizeof s->axes[a].name, "%s", pb->axes[a].name);
    s->cases = xcalloc(n_cases, sizeof(Case));
    for (size_t ci = 0; ci < n_cases; ci++) make_case(pb, ci, &s->cases[s->n_cases++]);
}

// Drop the cases whose labels match every entry of the exclude object e (at ep).
static void exclude_one(ScenarioLoader *ld, const json_t *e, const char *ep, size_t i) {
    Scenario *s = ld->s;
    Problems *ps = ld->ps;
    int w = 0, hit = 0;
    for (int ci = 0; ci < s->n_cases; ci++) {
        Case *c = &s->cases[ci];
        int match = 1;
        const char *ax;
        json_t *g;
        json_object_foreach((json_t *)e, ax, g) {
            for (int a = 0; a < s->n_axes; a++)
                if (!strcmp(s->axes[a].name, ax) && fnmatch(json_string_value(g), c->labels[a], 0) != 0) match = 0;
        }
        if (match) {
            scenario_case_free(c, s->n_axes);
            hit = 1;
        } else s->cases[w++] = *c;
    }
    s->n_cases = w;
    if (!hit) PROBLEM(ep, 0, "exclude[%zu] removes no case", i);
}

// "exclude": [{axis: label glob, ...}, ...] at the top level and in the profile:
// a case whose labels match every entry of one object is dropped. 1 if all is well.
static int profile_exclude(ScenarioLoader *ld, const ProfileBuild *pb) {
    Scenario *s = ld->s;
    Problems *ps = ld->ps;
    int before_ex = ps->n;
    const json_t *exl[2] = {json_object_get(s->root, "exclude"), pb->prof ? json_object_get(pb->prof, "exclude") : NULL};
    char expath[2][96];
    snprintf(expath[0], sizeof expath[0], "exclude");
    snprintf(expath[1], sizeof expath[1], "%s.exclude", pb->pp);
    for (int w = 0; w < 2; w++) {
        const json_t *ex = exl[w];
        if (!ex) continue;
        if (!json_is_array(ex)) {
            PROBLEM(expath[w], 0, "exclude: expected a list of objects {axis: label glob}");
            continue;
        }
        size_t i;
        json_t *e;
        json_array_foreach(ex, i, e) {
            char ep[256];
            snprintf(ep, sizeof ep, "%s[%zu]", expath[w], i);
            if (!json_is_object(e) || !json_object_size(e)) {
                PROBLEM(ep, 0, "exclude[%zu]: expected a non-empty object {axis: label glob}", i);
                continue;
            }
            const char *ax;
            json_t *g;
            json_object_foreach(e, ax, g) {
                int found = 0;
                for (int a = 0; a < s->n_axes; a++) found |= !strcmp(s->axes[a].name, ax);
                char kp[300];
                scenario_member_path(kp, sizeof kp, ep, ax);
                if (!found) PROBLEM(kp, 1, "exclude: '%s' is not an axis of the matrix", ax);
                else if (!json_is_string(g)) PROBLEM(kp, 0, "exclude: expected a label (or glob) string");
            }
            if (ps->n == before_ex) exclude_one(ld, e, ep, i);
        }
    }
    if (ps->n != before_ex) return 0;
    if (s->n_cases == 0) {
        PROBLEM("exclude", 0, "exclude removes every case");
        return 0;
    }
    return 1;
}

// Every case's run settings against the launchers' contracts (harness/exec/launch.h,
// docs/scenarios.md). 1 if all hold.
static int check_launch_contracts(ScenarioLoader *ld) {
    Scenario *s = ld->s;
    Problems *ps = ld->ps;
    int ok = 1;
    for (int ci = 0; ci < s->n_cases; ci++) {
        const Case *c = &s->cases[ci];
        if (c->run.world_size > 1 && !strcmp(c->run.transport, "none")) {
            PROBLEM("run.world_size", 0, "world_size %d needs a transport (\"mpi\", \"nccl\" or \"gloo\")%s%s",
                    c->run.world_size, s->n_axes ? ": case " : "", s->n_axes ? c->name : "");
            ok = 0;
        }
        const char *L = c->run.launcher, *why = NULL;
        if (!strcmp(L, "env") && strcmp(c->run.transport, "nccl") && strcmp(c->run.transport, "gloo"))
            why = "launcher \"env\" starts the ranks without MPI: it needs transport \"nccl\" or \"gloo\" (the \"mpi\" "
                  "transport needs an MPI launcher: local, mpirun or srun)";
        else if (!strcmp(c->run.transport, "gloo") && strcmp(L, "local") && strcmp(L, "env"))
            why = "transport \"gloo\" (torch.distributed) joins its world from the env launcher's variables: "
                  "launcher \"local\" or \"env\"";
        else if ((!strcmp(L, "mpirun") || !strcmp(L, "srun")) && !strcmp(c->run.transport, "none"))
            why = "launchers \"mpirun\" and \"srun\" start a data-parallel job: they need transport \"mpi\" or \"nccl\"";
        else if (c->run.n_hosts && strcmp(L, "mpirun"))
            why = "hosts: only launcher \"mpirun\" takes a host list";
        else if (!strcmp(L, "mpirun") && !c->run.n_hosts)
            why = "launcher \"mpirun\" needs \"hosts\" (for one host, launcher \"local\")";
        else if (c->run.n_launcher_args &&
                 (!strcmp(L, "env") || (!strcmp(L, "local") && !strcmp(c->run.transport, "none"))))
            why = "launcher_args: arguments of mpirun or srun, and this case starts neither (launcher \"env\", "
                  "or \"local\" with one rank and no transport)";
        if (why) {
            PROBLEM("run", 0, "%s%s%s", why, s->n_axes ? ": case " : "", s->n_axes ? c->name : "");
            ok = 0;
        }
    }
    return ok;
}

// Every case's trainer (run.trainer, a matrix value) is "nsa-train" or a name of
// run.trainers; an unknown one is reported where it stands. 1 if all are known.
static int check_trainer_names(ScenarioLoader *ld, const ProfileBuild *pb) {
    Scenario *s = ld->s;
    Problems *ps = ld->ps;
    int ok = 1;
    for (int ci = 0; ci < s->n_cases; ci++) {
        const RunSpec *r = &s->cases[ci].run;
        if (!r->trainer[0] || !strcmp(r->trainer, "nsa-train")) continue;
        int known = 0;
        for (int i = 0; i < pb->rb.n_trainers; i++) known |= !strcmp(pb->rb.trainers[i].name, r->trainer);
        if (known) continue;
        Str names = {0};
        str_add(&names, "\"nsa-train\"");
        for (int i = 0; i < pb->rb.n_trainers; i++) str_printf(&names, ", \"%s\"", pb->rb.trainers[i].name);
        char msg[1200];
        snprintf(msg, sizeof msg, "%s:%d:%d: unknown trainer '%s' (known: %s; run.trainers names them)", s->path,
                 r->trainer_line, r->trainer_col, r->trainer, str_c(&names));
        str_free(&names);
        int dup = 0;   // every case of a matrix value says the same: once
        for (int i = 0; i < ps->n; i++) dup |= !strcmp(ps->v[i].text, msg);
        if (!dup) problems_add(ps, r->trainer_line, r->trainer_col, "%s", msg);
        ok = 0;
    }
    return ok;
}

// Expand the scenario for profile p into s->cases (replacing any). Returns 0 if
// every case is valid.
int scenario_expand_profile(ScenarioLoader *ld, int p, Str *seen) {
    Scenario *s = ld->s;
    Problems *ps = ld->ps;
    scenario_free_cases(s);
    s->cur_profile = p;
    ProfileBuild pb = {.p = p, .prof = json_object_get(json_object_get(s->root, "profiles"), PROFILE_NAMES[p])};
    snprintf(pb.pp, sizeof pb.pp, "profiles.%s", PROFILE_NAMES[p]);
    int before = ps->n;
    if (profile_config(ld, &pb)) return -1;
    profile_overrides_and_run(ld, &pb);
    profile_command_line_sets(ld, &pb);
    profile_requires(ld, &pb);
    int ok = profile_matrix(ld, &pb) && ps->n == before;
    size_t n_cases = 1;
    for (int a = 0; a < pb.n_axes; a++) n_cases *= (size_t)pb.axes[a].n_vals;
    if (ok && n_cases > 10000) {
        PROBLEM("matrix", 0, "bad matrix: %zu cases (more than 10000)", n_cases);
        ok = 0;
    }
    if (ok) {
        make_cases(s, &pb, n_cases);
        ok = profile_exclude(ld, &pb);
        ok &= check_launch_contracts(ld);
        ok &= check_trainer_names(ld, &pb);
        // every case that remains: its config through the trainer's loader
        for (int ci = 0; ci < s->n_cases && ok; ci++)
            if (resolve_config(s, ps, &s->cases[ci], s->config_path, pb.cjp, p, seen)) ok = 0;
        for (int ci = 0; ci < s->n_cases && !ok; ci++)   // report every case's problems, not the first only
            resolve_config(s, ps, &s->cases[ci], s->config_path, pb.cjp, p, seen);
    }
    // the profile's trainers stay with the scenario (the runner starts them)
    trainers_free(&s->trainers, &s->n_trainers);
    s->trainers = pb.rb.trainers;
    s->n_trainers = pb.rb.n_trainers;
    pb.rb.trainers = NULL;
    pb.rb.n_trainers = 0;
    profile_build_free(&pb);
    return ok ? 0 : -1;
}

// ---- the file ------------------------------------------------------------------------------

// Drop problems whose text repeats (validation runs per profile).
void scenario_dedupe_problems(Problems *ps, int from) {
    int w = from;
    for (int r = from; r < ps->n; r++) {
        int dup = 0;
        for (int j = 0; j < w && !dup; j++) dup = !strcmp(ps->v[j].text, ps->v[r].text);
        if (dup) free(ps->v[r].text);
        else ps->v[w++] = ps->v[r];
    }
    ps->n = w;
}

// The "profiles" object: known profile names, each an object with `known` keys;
// sets has_profile. A scenario profile's config and overrides are type-checked
// here, the rest when the profile is expanded.
void scenario_read_profiles(Scenario *s, Problems *ps, const char *const *known_keys, const char *what) {
    const json_t *profs = scenario_get_typed(s, ps, s->root, "", "profiles", JSON_OBJECT, 1, "an object");
    if (!profs) return;
    const char *pn;
    json_t *pv;
    json_object_foreach((json_t *)profs, pn, pv) {
        char pp[128];
        scenario_member_path(pp, sizeof pp, "profiles", pn);
        int known = -1;
        for (int p = 0; p < PROFILE_COUNT; p++)
            if (!strcmp(pn, PROFILE_NAMES[p])) known = p;
        if (known < 0) {
            PROBLEM(pp, 1, "unknown profile '%s' (known: ci, gpu)", pn);
            continue;
        }
        if (!json_is_object(pv)) {
            char got[96];
            scenario_describe(pv, got, sizeof got);
            PROBLEM(pp, 0, "profiles.%s: expected an object (may be empty), got %s", pn, got);
            continue;
        }
        scenario_check_keys(s, ps, pv, pp, known_keys, what);
        if (in_list(known_keys, "config")) {
            scenario_get_typed(s, ps, pv, pp, "config", JSON_STRING, 0, "a path (string)");
            scenario_get_typed(s, ps, pv, pp, "overrides", JSON_OBJECT, 0, "an object of \"section.key\": value");
        }
        s->has_profile[known] = 1;
    }
    if (json_object_size(profs) == 0) PROBLEM("profiles", 0, "profiles: name at least one of \"ci\", \"gpu\"");
}

// Read and parse the file; 0, or -1 with the problem reported.
int scenario_open(Scenario *s, const char *path, Problems *ps) {
    snprintf(s->path, sizeof s->path, "%s", path);
    path_dirname(path, s->dir, sizeof s->dir);
    size_t len = 0;
    char why[300];
    s->text = read_file_limited(path, 0, 0, &len, why, sizeof why);   // a file, at most 64 MiB: never a hang
    if (!s->text) {
        problems_add(ps, 0, 0, "%s: %s", path, why);
        return -1;
    }
    json_error_t je;
    s->root = json_loadb(s->text, len, JSON_REJECT_DUPLICATES, &je);
    if (!s->root) {
        problems_add(ps, je.line, je.column, "%s:%d:%d: %s", path, je.line, je.column, je.text);
        return -1;
    }
    if (!json_is_object(s->root)) {
        char got[96];
        scenario_describe(s->root, got, sizeof got);
        PROBLEM("", 0, "expected the scenario to be a JSON object, got %s", got);
        return -1;
    }
    return 0;
}

int scenario_derive_case(const Scenario *s, const Case *base, const char *name, const Override *extra, int n_extra,
                         Case *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    safe_name(out->dir, sizeof out->dir, name);
    out->labels = xcalloc((size_t)s->n_axes + 1, sizeof(char *));
    for (int a = 0; a < s->n_axes; a++) out->labels[a] = xstrdup(base->labels[a]);
    run_copy(&out->run, &base->run);
    out->n_ov = base->n_ov + n_extra;
    out->ov = xcalloc((size_t)out->n_ov + 1, sizeof(Override));
    const char **sets = xcalloc((size_t)out->n_ov + 1, sizeof(char *));
    for (int i = 0; i < out->n_ov; i++) {
        const Override *o = i < base->n_ov ? &base->ov[i] : &extra[i - base->n_ov];
        out->ov[i] = *o;
        out->ov[i].value = xstrdup(o->value);
        Str st = {0};
        str_printf(&st, "%s=%s", o->key, o->value);
        sets[i] = str_take(&st);
    }
    int rc = config_load(&out->cfg, s->config_path, sets, out->n_ov, err, errlen);
    for (int i = 0; i < out->n_ov; i++) free((char *)sets[i]);
    free(sets);
    if (rc && err && errlen) {   // one line is enough here
        char *nl = strchr(err, '\n');
        if (nl) *nl = '\0';
    }
    return rc;
}

void scenario_free(Scenario *s) {
    scenario_free_cases(s);
    trainers_free(&s->trainers, &s->n_trainers);
    free(s->checks);
    free(s->description);
    free(s->text);
    json_decref(s->root);
    memset(s, 0, sizeof *s);
}

int scenario_case_matches(const Case *c, const char *glob) { return fnmatch(glob, c->name, 0) == 0; }
