// harness/exec/trainer_caps.c — see trainer_caps.h.
#define _POSIX_C_SOURCE 200809L
#include "harness/exec/trainer_caps.h"

#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <sys/wait.h>

#include "common/config.h"
#include "common/jsonutil.h"
#include "harness/core/check.h"
#include "harness/exec/launch.h"
#include "harness/exec/proc.h"

// What each NEED_* bit of the checks asks of the trainer, by the protocol's diagnostic name.
// (dump_tensors is no need: a trainer without it writes the whole dump, trainer_caps_dump_tensors.)
static const struct {
    unsigned need;
    const char *diagnostic;
} NEED_DIAGNOSTICS[] = {
    {NEED_GRAD_TRACE, "trace_grads"},
    {NEED_GATE_STATS, "gate_stats"},
    {NEED_DUMP | NEED_DUMP_ACTS, "dump_step"},
    {NEED_DUMP_ACTS, "dump_acts"},
};

// The handshake must be cheap (no config, no device, no world): a trainer gets this long.
#define PROBE_TIMEOUT_S 5.0

// `TRAINER --protocol-info`. A trainer that does not know the flag may do anything with it
// (nsa-train before the handshake exits 2; a wrapper script may start to train, or hang):
// it is stopped after PROBE_TIMEOUT_S like a case, its process group killed, and what it
// left outside its group (a setsid grandchild) is killed too — the runner is its subreaper.
static void query(TrainerCaps *tc, char *const *words) {
    char *out = NULL;
    StrList av = {0};
    for (int i = 0; words[i]; i++) strlist_add(&av, words[i]);
    strlist_add(&av, "--protocol-info");
    proc_become_subreaper();
    const int rc = proc_capture(av.v, PROBE_TIMEOUT_S, &out);
    strlist_free(&av);
    proc_kill_children();   // no process of the runner's is running yet: only what the probe left
    if (rc != 0) {   // it does not know the flag: what nsa-train did before the handshake
        if (rc == -2) snprintf(tc->note, sizeof tc->note, "no answer to --protocol-info within %.0f s: protocol 0",
                               PROBE_TIMEOUT_S);
        else snprintf(tc->note, sizeof tc->note, "no answer to --protocol-info (status %d): protocol 0", rc);
        free(out);
        return;
    }
    json_error_t je;
    json_t *info = json_loads(out ? out : "", 0, &je);
    const json_t *p = json_object_get(info, "protocol");
    if (!out || !out[strspn(out, " \t\r\n")]) {   // exit 0, silent: it ignored the flag
        snprintf(tc->note, sizeof tc->note, "printed nothing for --protocol-info: protocol 0");
    } else if (!json_is_object(info) || !json_is_integer(p) || json_integer_value(p) < 1 ||
               !json_is_object(json_object_get(info, "features"))) {
        snprintf(tc->note, sizeof tc->note, "the answer to --protocol-info is not the protocol's JSON object (%s): "
                 "taken as protocol 0", info ? "no integer \"protocol\" >= 1 or no \"features\" object" : je.text);
        tc->bad_answer = 1;
    } else {
        tc->protocol = (int)json_integer_value(p);
        tc->info = json_incref(info);
    }
    json_decref(info);
    free(out);
}

// the cache: one answer per trainer (its path, or its command's shell line)
// (cases side by side ask from their threads: one at a time, under g_caps_lock)
static pthread_mutex_t g_caps_lock = PTHREAD_MUTEX_INITIALIZER;
static const TrainerCaps *caps_cached_locked(const char *key, char *const *words) {
    // a run has a few trainers; a few slots serve a process that asks about several
    enum { SLOTS = 16 };
    static struct {
        char *path;
        TrainerCaps caps;
    } cache[SLOTS];
    static int n_cached;
    for (int i = 0; i < n_cached; i++)
        if (!strcmp(cache[i].path, key)) return &cache[i].caps;
    int k = n_cached < SLOTS ? n_cached++ : SLOTS - 1;   // full: the last slot is asked again
    if (cache[k].path) {
        free(cache[k].path);
        json_decref(cache[k].caps.info);
        json_decref(cache[k].caps.env);
    }
    cache[k].path = xstrdup(key);
    memset(&cache[k].caps, 0, sizeof cache[k].caps);
    query(&cache[k].caps, words);
    return &cache[k].caps;
}

static const TrainerCaps *caps_cached(const char *key, char *const *words) {
    pthread_mutex_lock(&g_caps_lock);
    const TrainerCaps *c = caps_cached_locked(key, words);
    pthread_mutex_unlock(&g_caps_lock);
    return c;
}

const TrainerCaps *trainer_caps_for(const char *trainer) {
    char *const words[] = {(char *)trainer, NULL};
    return caps_cached(trainer, words);
}

const TrainerCaps *trainer_caps_of(const TrainerSpec *t) {
    if (!t->is_cmd && t->words.n == 1) return trainer_caps_for(t->words.v[0]);
    return caps_cached(t->display, t->words.v);
}

void trainer_caps_mark_unusable(const TrainerSpec *t, const char *why) {
    TrainerCaps *tc = (TrainerCaps *)trainer_caps_of(t);   // the cache's own slot
    snprintf(tc->unusable, sizeof tc->unusable, "%s", why);
}

void trainer_caps_set_env(const TrainerSpec *t, json_t *env) {
    TrainerCaps *tc = (TrainerCaps *)trainer_caps_of(t);   // the cache's own slot
    json_decref(tc->env);
    tc->env = json_incref(env);
}

Liveness trainer_caps_liveness(const TrainerCaps *tc) {
    if (tc->protocol < 1 || trainer_caps_has(tc, "diagnostics", "flight_recorder")) return LIVE_FLIGHT_RECORDER;
    if (trainer_caps_has(tc, "diagnostics", "heartbeat")) return LIVE_HEARTBEAT;
    return LIVE_NONE;
}

int trainer_caps_stack_dump(const TrainerCaps *tc) { return trainer_caps_has(tc, "diagnostics", "stack_dump"); }
int trainer_caps_dump_tensors(const TrainerCaps *tc) {
    return tc->protocol >= 1 && trainer_caps_has(tc, "diagnostics", "dump_tensors");
}

int trainer_caps_has(const TrainerCaps *tc, const char *feature, const char *name) {
    if (tc->protocol < 1) return 1;
    const json_t *list = json_object_get(json_object_get(tc->info, "features"), feature);
    size_t i;
    const json_t *v;
    json_array_foreach(list, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), name)) return 1;
    return 0;
}

// train.prefill's name for the case: its config's canonical JSON says it
static void prefill_name(const NsaConfig *cfg, char *out, size_t n) {
    char *js = config_to_json(cfg);
    json_t *root = js ? json_loads(js, 0, NULL) : NULL;
    const char *name = json_string_value(json_object_get(json_object_get(root, "train"), "prefill"));
    snprintf(out, n, "%s", name ? name : "?");
    json_decref(root);
    free(js);
}

static int missing(const TrainerCaps *tc, const char *feature, const char *what, const char *name, char *why, size_t n) {
    if (trainer_caps_has(tc, feature, name)) return 0;
    snprintf(why, n, "the trainer does not support %s '%s' (--protocol-info): a trainer that lists it runs this case",
             what, name);
    return 1;
}

// features.knobs (a map trainer's): 1 with why when the knob `key` is missing, or its list of
// values lacks `value` (compact JSON text, as Override.value; NULL: any value); else 0. Values
// compare as json_value_text writes them: a string as its string, others as their JSON text.
static int knob_missing(const json_t *knobs, const char *key, const char *value, char *why, size_t n) {
    const json_t *allowed = json_object_get(knobs, key);
    if (!allowed) {
        snprintf(why, n, "the trainer map has no knob '%s': a knob for it in the map runs this case (docs/trainer-maps.md)",
                 key);
        return 1;
    }
    if (!json_is_array(allowed) || !value) return 0;   // null: every value
    json_t *jv = json_loads(value, JSON_DECODE_ANY, NULL);
    char want[512], have[512];
    if (jv) json_value_text(jv, want, sizeof want);
    else snprintf(want, sizeof want, "%s", value);
    json_decref(jv);
    size_t i;
    const json_t *a;
    json_array_foreach(allowed, i, a) {
        json_value_text(a, have, sizeof have);
        if (!strcmp(have, want)) return 0;
    }
    snprintf(why, n, "the trainer map's knob '%s' has no value '%s': where the script supports it, the value in the "
                     "knob's list runs this case (docs/trainer-maps.md)", key, want);
    return 1;
}

int trainer_caps_case_missing(const TrainerCaps *tc, const Case *c, unsigned needs, const char *const *faults,
                              int n_faults, char *why, size_t n) {
    if (tc->unusable[0]) {
        snprintf(why, n, "%s", tc->unusable);
        return 1;
    }
    if (c->run.init_shared && (tc->protocol < 1 || !trainer_caps_has(tc, "diagnostics", "init_weights"))) {
        snprintf(why, n, "the trainer does not support diagnostic 'init_weights' (--protocol-info)");
        return 1;
    }
    if (tc->protocol < 1) return 0;
    const NsaConfig *cfg = &c->cfg;
    const LaunchKind kind = launch_kind(&c->run);
    // features.knobs (a map trainer): every override of the case goes through a knob of the map
    const json_t *knobs = json_object_get(json_object_get(tc->info, "features"), "knobs");
    if (json_is_object(knobs)) {
        for (int i = 0; i < c->n_ov; i++)
            if (knob_missing(knobs, c->ov[i].key, c->ov[i].value, why, n)) return 1;
        if (launch_is_multi(kind)) {
            char tv[32];
            snprintf(tv, sizeof tv, "\"%s\"", strcmp(c->run.transport, "none") ? c->run.transport : "mpi");
            if (knob_missing(knobs, "transport", tv, why, n)) return 1;
        }
    }
    if (missing(tc, "backends", "backend", cfg->backend, why, n)) return 1;
    if (missing(tc, "precisions", "precision", cfg->precision, why, n)) return 1;
    char pf[32];
    prefill_name(cfg, pf, sizeof pf);
    if (missing(tc, "prefill", "prefill", pf, why, n)) return 1;
    // features.data (protocol 2): the data kinds it implements; absent = every kind
    const json_t *data = json_object_get(json_object_get(tc->info, "features"), "data");
    if (data && missing(tc, "data", "data", config_data_name(cfg->data_kind), why, n)) return 1;
    // as the runner starts the ranks (runner.c trainer_argv): several ranks run a transport
    // (mpi unless the scenario says nccl) and a bootstrap (env, slurm for srun over nccl, else mpi)
    if (launch_is_multi(kind)) {
        const char *transport = strcmp(c->run.transport, "none") ? c->run.transport : "mpi";
        if (missing(tc, "transports", "transport", transport, why, n)) return 1;
        const char *boot = kind == LAUNCH_ENV                                             ? "env"
                           : kind == LAUNCH_SRUN && !strcmp(c->run.transport, "nccl") ? "slurm"
                                                                                        : "mpi";
        if (missing(tc, "bootstraps", "bootstrap", boot, why, n)) return 1;
        if (missing(tc, "ddp_modes", "ddp mode", config_ddp_mode_name(cfg->ddp_mode), why, n)) return 1;
    }
    for (int i = 0; i < n_faults; i++) {
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(faults[i], "="), faults[i]);
        if (missing(tc, "faults", "fault", name, why, n)) return 1;
    }
    for (size_t i = 0; i < sizeof NEED_DIAGNOSTICS / sizeof NEED_DIAGNOSTICS[0]; i++)
        if ((needs & NEED_DIAGNOSTICS[i].need) && missing(tc, "diagnostics", "diagnostic", NEED_DIAGNOSTICS[i].diagnostic, why, n))
            return 1;
    return 0;
}

int trainer_caps_check_map(const TrainerSpec *t, Str *probe_lines, char *why, size_t n) {
    if (!t->map) return 0;
    StrList av = {0};
    trainer_spec_argv(t, &av);
    strlist_add(&av, "--check-map");
    char *out = NULL;
    proc_become_subreaper();
    const int rc = proc_capture_all(av.v, PROBE_TIMEOUT_S, &out);
    strlist_free(&av);
    proc_kill_children();   // as after the handshake: only what the probe left
    const char *probe = t->words.v[0];
    if (rc == -1)
        snprintf(why, n, "cannot start the probe %s to check the trainer map (set NSA_PROBE to the probe; "
                         "default: the source tree's probe/nsa-probe)", probe);
    else if (rc == -2)
        snprintf(why, n, "the probe %s did not answer --check-map within %.0f s", probe, PROBE_TIMEOUT_S);
    else if (rc != 0)
        snprintf(why, n, "the probe rejects the trainer map (`%s --map %s --check-map` %s %d)", probe, t->map,
                 WIFSIGNALED(rc) ? "got signal" : "exited", WIFSIGNALED(rc) ? WTERMSIG(rc) : WEXITSTATUS(rc));
    const char *text = out ? out + strspn(out, " \t\r\n") : "";
    if (rc != 0 && rc != -1 && text[0]) {
        str_add(probe_lines, text);
        if (text[strlen(text) - 1] != '\n') str_add(probe_lines, "\n");
    }
    free(out);
    return rc == 0 ? 0 : -1;
}

json_t *trainer_caps_json(const TrainerCaps *tc) {
    json_t *o = json_object();
    json_object_set_new(o, "protocol", json_integer(tc->protocol));
    pthread_mutex_lock(&g_caps_lock);   // (cases side by side share the answer: one reference at a time)
    json_object_set_new(o, "info", tc->info ? json_incref(tc->info) : json_null());
    pthread_mutex_unlock(&g_caps_lock);
    if (tc->note[0]) json_object_set_new(o, "note", json_string(tc->note));
    return o;
}
