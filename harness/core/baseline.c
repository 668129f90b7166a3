// harness/core/baseline.c — see baseline.h.
#define _POSIX_C_SOURCE 200809L
#include "harness/core/baseline.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/result.h"
#include "harness/artifacts/tensorstats.h"
#include "common/jsonutil.h"
#include "common/util.h"
#include "common/digest.h"
#include "common/jsonpos.h"
#include "common/safetensors.h"

// ---- where, and on what -------------------------------------------------------------------

void baseline_path(char *out, size_t n, const char *dir, const char *profile, const char *device_class,
                   const char *scenario, const char *case_dir) {
    snprintf(out, n, "%s/%s/%s/%s/%s.json", dir, profile, device_class, scenario, case_dir);
}

static const json_t *gpu0(const json_t *env) {
    return json_array_get(json_object_get(json_object_get(env, "cuda"), "devices"), 0);
}

static const char *str_or(const json_t *o, const char *key, const char *def) {
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : def;
}

// A GPU model's name as a device class: lower case, every run of other characters one '-'.
static void model_slug(const char *name, char *out, size_t n) {
    size_t k = 0;
    int dash = 0;
    for (const char *p = name; *p && k + 1 < n; p++) {
        if (isalnum((unsigned char)*p)) {
            if (dash && k) out[k++] = '-';
            if (k + 1 < n) out[k++] = (char)tolower((unsigned char)*p);
            dash = 0;
        } else dash = 1;
    }
    out[k] = '\0';
}

void baseline_device_class(const json_t *env, const char *backend, char *out, size_t n) {
    if (!strcmp(backend, "cuda")) {
        model_slug(str_or(gpu0(env), "name", "unknown-gpu"), out, n);
        return;
    }
    snprintf(out, n, "cpu-%s", str_or(json_object_get(env, "host"), "machine", "unknown"));
}

// ---- architectures: what "nearest" is measured by ----------------------------------------------

// GPU models by a word of their name (the device-class slug split at '-'), for a device
// whose --print-env has no compute capability (a Python trainer's nvidia-smi list) and for a
// baseline recorded before its architecture was: the compute capability of each.
static const struct {
    const char *word, *arch;
} MODEL_ARCH[] = {
    {"h100", "sm_90"}, {"h200", "sm_90"}, {"gh200", "sm_90"}, {"h800", "sm_90"}, {"h20", "sm_90"},
    {"a100", "sm_80"}, {"a800", "sm_80"}, {"a30", "sm_80"},
    {"a10", "sm_86"},  {"a10g", "sm_86"}, {"a40", "sm_86"},  {"a16", "sm_86"},  {"a2", "sm_86"},
    {"a4000", "sm_86"}, {"a4500", "sm_86"}, {"a5000", "sm_86"}, {"a6000", "sm_86"},
    {"l40", "sm_89"},  {"l40s", "sm_89"}, {"l4", "sm_89"},   {"l20", "sm_89"},  {"ada", "sm_89"},
    {"b200", "sm_100"}, {"b100", "sm_100"}, {"gb200", "sm_100"},
    {"v100", "sm_70"}, {"t4", "sm_75"},
};

const char *baseline_arch_of_model(const char *model) {
    char slug[256];
    model_slug(model ? model : "", slug, sizeof slug);
    const char *prev = "";
    for (char *save = NULL, *w = strtok_r(slug, "-", &save); w; prev = w, w = strtok_r(NULL, "-", &save)) {
        for (size_t i = 0; i < sizeof MODEL_ARCH / sizeof MODEL_ARCH[0]; i++)
            if (!strcmp(w, MODEL_ARCH[i].word)) return MODEL_ARCH[i].arch;
        // GeForce / workstation RTX by generation: rtx 20xx Turing, 30xx Ampere, 40xx Ada, 50xx Blackwell
        if (!strcmp(prev, "rtx") && strlen(w) == 4 && isdigit((unsigned char)w[0])) {
            switch (w[0]) {
            case '2': return "sm_75";
            case '3': return "sm_86";
            case '4': return "sm_89";
            case '5': return "sm_120";
            default: break;
            }
        }
    }
    return NULL;
}

void baseline_device_arch(const json_t *env, const char *backend, char *out, size_t n) {
    if (!strcmp(backend, "cuda")) {
        const char *sm = str_or(gpu0(env), "sm", NULL), *name = str_or(gpu0(env), "name", NULL);
        const char *table = name ? baseline_arch_of_model(name) : NULL;
        snprintf(out, n, "%s", sm && !strncmp(sm, "sm_", 3) ? sm : table ? table : "unknown");
        return;
    }
    snprintf(out, n, "%s", str_or(json_object_get(env, "host"), "machine", "unknown"));
}

void baseline_arch(const json_t *b, char *out, size_t n, const char **source) {
    const json_t *p = json_object_get(b, "provenance");
    const char *rec = json_string_value(json_object_get(b, "device_arch"));
    const char *sm = json_string_value(json_object_get(json_object_get(p, "fingerprint"), "sm"));
    const char *dev = str_or(b, "device_class", "");
    const char *backend = str_or(p, "backend", "");
    const char *src = "unknown", *arch = "unknown";
    const char *table = baseline_arch_of_model(dev);
    if (rec && strcmp(rec, "unknown")) {
        src = "its device_arch";
        arch = rec;
    } else if (sm && !strncmp(sm, "sm_", 3)) {
        src = "its build fingerprint";
        arch = sm;
    } else if (!strcmp(backend, "cuda") && table) {
        src = "the model-name table";
        arch = table;
    } else if (strcmp(backend, "cuda") && !strncmp(dev, "cpu-", 4) && dev[4]) {
        src = "its device class";
        arch = dev + 4;
    }
    snprintf(out, n, "%s", arch);
    if (source) *source = src;
}

json_t *baseline_fingerprint(const json_t *env, const char *backend, const char *precision) {
    const json_t *b = json_object_get(env, "build");
    json_t *fp = json_object();
    json_object_set_new(fp, "backend", json_string(backend));
    json_object_set_new(fp, "precision", json_string(precision));
    // a Python trainer (the probe's or the PyTorch adapter's --print-env: build.python,
    // build.torch) has no compiler keys of its own: its numerics are torch's build and the
    // machine it runs on. Only such a trainer gets these keys, so nsa-train's fingerprints
    // (and every baseline recorded with them) stay what they were.
    const int python = json_is_string(json_object_get(b, "python")) || json_is_string(json_object_get(b, "torch"));
    // the CPU kernels' flags and ISA decide the CPU backends' numerics only: a cuda run
    // computes nothing with them (a GPU model's baseline holds on another host CPU)
    static const char *const build_keys[] = {"c_compiler", "c_flags", "libc", "build_type", "kernel_flags", "kernel_isa", NULL};
    const int n_keys = strcmp(backend, "cuda") ? 6 : 4;
    for (int i = 0; i < n_keys; i++) {
        const json_t *v = json_object_get(b, build_keys[i]);
        if (python && !json_is_string(v)) continue;   // keys it never had are not part of its build
        json_object_set_new(fp, build_keys[i], json_is_string(v) ? json_copy((json_t *)v) : json_null());
    }
    if (python) {
        // torch picks its CPU kernels by the instruction set it finds at run time (AVX2,
        // AVX-512) and splits reductions over as many threads as there are cores: the CPU
        // model and the core count decide bits on the CPU backends, not on cuda
        const json_t *h = json_object_get(env, "host");
        json_object_set_new(fp, "python", json_string(str_or(b, "python", "?")));
        json_object_set_new(fp, "torch", json_string(str_or(b, "torch", "?")));
        json_object_set_new(fp, "machine", json_string(str_or(h, "machine", "?")));
        if (strcmp(backend, "cuda")) {
            json_object_set_new(fp, "cpu_model", json_string(str_or(h, "cpu_model", "?")));
            const json_t *cores = json_object_get(h, "cores");
            json_object_set_new(fp, "cores", json_is_integer(cores) ? json_copy((json_t *)cores) : json_null());
        }
    }
    if (!strcmp(backend, "cuda")) {
        const json_t *c = json_object_get(env, "cuda"), *d = gpu0(env);
        json_object_set_new(fp, "gpu", json_string(str_or(d, "name", "?")));
        json_object_set_new(fp, "sm", json_string(str_or(d, "sm", "?")));
        json_object_set_new(fp, "cuda_runtime", json_string(str_or(c, "runtime", "?")));
        json_object_set_new(fp, "cublas", json_string(str_or(c, "cublas", "?")));
    }
    return fp;
}

void baseline_fingerprint_id(const json_t *fp, char out[17]) {
    char *js = json_dumps(fp, JSON_COMPACT | JSON_SORT_KEYS);
    digest64_hex(digest64(js, strlen(js), 0), out);
    free(js);
}

// ---- a case summarised ------------------------------------------------------------------------

static json_t *steps_of(const json_t *metrics) {
    json_t *steps = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(metrics, i, m) {
        json_t *s = json_object();
        json_object_set_new(s, "step", json_integer((json_int_t)json_number_or(m, "step", (double)i + 1)));
        static const char *const keys[] = {"loss", "grad_norm", "lr", NULL};
        for (int k = 0; keys[k]; k++) {
            double v = json_number_or(m, keys[k], NAN);
            // non-finite values are kept as the trainer writes them: strings
            json_object_set_new(s, keys[k], json_real_or_name(v));
        }
        const json_t *dd = json_object_get(m, "data_digest");
        json_object_set_new(s, "data_digest", json_is_string(dd) ? json_copy((json_t *)dd) : json_null());
        if (json_is_true(json_object_get(m, "skipped"))) json_object_set_new(s, "skipped", json_true());
        json_array_append_new(steps, s);
    }
    return steps;
}

static json_t *dump_of(const char *path, char *err, size_t errlen) {
    StFile f;
    if (st_read(&f, path, err, errlen)) return NULL;
    json_t *tensors = json_array();
    for (int i = 0; i < f.n_tensors; i++) {
        TensorStats s;
        tensor_stats(&f.tensors[i], &s);
        json_array_append_new(tensors, tensor_stats_json(&f.tensors[i], &s));
    }
    json_t *d = json_pack("{s:i,s:o}", "step", 1, "tensors", tensors);
    const char *pd = st_meta(&f, "param_digests");
    json_t *pj = pd ? json_loads(pd, JSON_REJECT_DUPLICATES, NULL) : NULL;
    json_object_set_new(d, "param_digests", pj && json_is_object(pj) ? pj : json_null());
    if (pj && !json_is_object(pj)) json_decref(pj);
    st_free(&f);
    return d;
}


// The median of a metric over the steps after `skip` warm-up steps (all steps
// when there are no more than that).
static double step_median(const json_t *metrics, const char *key, int skip) {
    size_t n = json_array_size(metrics);
    double *v = xcalloc(n + 1, sizeof(double));
    int k = 0;
    for (size_t i = n > (size_t)skip ? (size_t)skip : 0; i < n; i++) {
        double x = json_number_or(json_array_get(metrics, i), key, NAN);
        if (isfinite(x)) v[k++] = x;
    }
    double m = median_d(v, k);
    free(v);
    return m;
}

// {"median": m, "runs": [per-run medians], "spread": (max - min) / m}
static json_t *timing(json_t *const *metrics, int n_runs, const char *key, int skip) {
    double *v = xcalloc((size_t)n_runs + 1, sizeof(double));
    json_t *runs = json_array();
    int k = 0;
    for (int i = 0; i < n_runs; i++) {
        double m = step_median(metrics[i], key, skip);
        json_array_append_new(runs, json_real(isfinite(m) ? m : -1));
        if (isfinite(m)) v[k++] = m;
    }
    double med = median_d(v, k), lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < k; i++) {
        lo = fmin(lo, v[i]);
        hi = fmax(hi, v[i]);
    }
    double spread = k ? (hi - lo) / med : 0;
    free(v);
    return json_pack("{s:f,s:o,s:f}", "median", isfinite(med) ? med : -1, "runs", runs, "spread",
                     isfinite(spread) ? spread : 0);
}

static json_t *perf_of(json_t *const *metrics, int n_runs, int skip) {
    const json_t *m0 = metrics[0];
    double peak = 0, mem = 0;
    int has_peak = 0;
    size_t i;
    json_t *m;
    json_array_foreach(m0, i, m) {
        peak = fmax(peak, json_number_or(m, "peak_mem_bytes", 0));
        has_peak |= json_is_number(json_object_get(m, "peak_mem_bytes"));
        mem = json_number_or(m, "mem_bytes", mem);
    }
    json_t *p = json_object();
    // a counter the trainer does not write (a probe trainer: no allocator high-water mark, no
    // model FLOPs) is null, "not measured" to perf_floor, rather than a floor of 0
    json_object_set_new(p, "peak_mem_bytes", has_peak ? json_integer((json_int_t)peak) : json_null());
    json_object_set_new(p, "mem_bytes", json_integer((json_int_t)mem));
    const json_t *flops = json_object_get(json_array_get(m0, 0), "flops");
    json_object_set_new(p, "flops_per_step", json_is_number(flops) ? json_real(json_number_value(flops)) : json_null());
    json_object_set_new(p, "warmup_steps", json_integer(skip));
    json_object_set_new(p, "timed_steps", json_integer((json_int_t)(json_array_size(m0) > (size_t)skip
                                                                      ? json_array_size(m0) - (size_t)skip
                                                                      : json_array_size(m0))));
    json_object_set_new(p, "runs", json_integer(n_runs));
    json_object_set_new(p, "step_ms", timing(metrics, n_runs, "ms", skip));
    json_object_set_new(p, "tok_per_s", timing(metrics, n_runs, "tok_per_s", skip));
    return p;
}

static json_t *provenance_of(const json_t *env, const BaselineMeta *meta) {
    json_t *fp = baseline_fingerprint(env, meta->backend, meta->precision);
    char id[17];
    baseline_fingerprint_id(fp, id);
    char when[32];
    utc_iso(when, sizeof when);
    json_t *p = json_object();
    json_object_set_new(p, "commit", meta->commit ? json_string(meta->commit) : json_null());
    json_object_set_new(p, "dirty", meta->dirty < 0 ? json_null() : json_boolean(meta->dirty));
    json_object_set_new(p, "recorded", json_string(when));
    json_object_set_new(p, "device", json_string(meta->device ? meta->device : "?"));
    json_object_set_new(p, "backend", json_string(meta->backend));
    json_object_set_new(p, "precision", json_string(meta->precision));
    json_object_set_new(p, "fingerprint", fp);
    json_object_set_new(p, "fingerprint_id", json_string(id));
    json_object_set_new(p, "trainer_git_sha", json_string(str_or(json_object_get(env, "build"), "git_sha", "?")));
    if (meta->trainer_map) {   // a map trainer: commit/dirty above are its own; what ran it
        json_object_set_new(p, "trainer_map", json_string(meta->trainer_map));
        json_object_set_new(p, "harness_commit", meta->harness_commit ? json_string(meta->harness_commit) : json_null());
    }
    json_object_set_new(p, "command", json_string(meta->command ? meta->command : ""));
    const json_t *cmd = json_object_get(env, "command");
    if (cmd) json_object_set(p, "trainer_command", (json_t *)cmd);
    return p;
}

json_t *baseline_of_case(const char *const *case_dirs, int n_dirs, const json_t *env, const BaselineMeta *meta,
                         char *err, size_t errlen) {
    json_t **metrics = xcalloc((size_t)n_dirs + 1, sizeof(json_t *));
    char p[2400];
    for (int i = 0; i < n_dirs; i++) {
        snprintf(p, sizeof p, "%s/metrics.jsonl", case_dirs[i]);
        metrics[i] = read_jsonl(p, NULL);
        if (!metrics[i] || json_array_size(metrics[i]) == 0) {
            snprintf(err, errlen, "%s: no metrics (missing or empty)", p);
            for (int k = 0; k <= i; k++) json_decref(metrics[k]);
            free(metrics);
            return NULL;
        }
    }
    char dev[128];
    baseline_device_class(env, meta->backend, dev, sizeof dev);
    json_t *b = json_object();
    json_object_set_new(b, "format", json_string(BASELINE_FORMAT));
    json_object_set_new(b, "scenario", json_string(meta->scenario));
    json_object_set_new(b, "case", json_string(meta->case_name));
    json_object_set_new(b, "profile", json_string(meta->profile));
    json_object_set_new(b, "device_class", json_string(dev));
    // the architecture (compute capability on cuda, the host's machine on the CPU): a device
    // without a baseline of its own compares with the nearest (docs/regression.md)
    char arch[64];
    baseline_device_arch(env, meta->backend, arch, sizeof arch);
    json_object_set_new(b, "device_arch", json_string(arch));
    json_object_set_new(b, "config_digest", json_string(meta->config_digest));
    json_object_set_new(b, "provenance", provenance_of(env, meta));
    json_object_set_new(b, "steps", steps_of(metrics[0]));
    snprintf(p, sizeof p, "%s/step1.safetensors", case_dirs[0]);
    json_t *dump = NULL;
    if (file_exists(p)) {
        char derr[1024];
        dump = dump_of(p, derr, sizeof derr);
        if (!dump) {
            snprintf(err, errlen, "%s", derr);
            json_decref(b);
            b = NULL;
            goto out;
        }
    }
    json_object_set_new(b, "dump", dump ? dump : json_null());
    snprintf(p, sizeof p, "%s/gate_stats.jsonl", case_dirs[0]);
    json_t *gs = read_jsonl(p, NULL);
    json_object_set_new(b, "gate_stats", gs ? gs : json_null());
    json_object_set_new(b, "perf", perf_of(metrics, n_dirs, meta->perf_skip));
out:
    for (int i = 0; i < n_dirs; i++) json_decref(metrics[i]);
    free(metrics);
    return b;
}

// ---- files ----------------------------------------------------------------------------------

// A problem at a JSON path of the file, as "path:line:col: why".
static void at(char *err, size_t errlen, const char *path, const char *text, const char *jpath, const char *why) {
    int line = 1, col = 1;
    if (text) jsonpos_find(text, jpath, 0, &line, &col);
    snprintf(err, errlen, "%s:%d:%d: %s", path, line, col, why);
}

json_t *baseline_load(const char *path, char *err, size_t errlen) {
    char *text = read_file(path, NULL);
    if (!text) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return NULL;
    }
    json_error_t je;
    json_t *b = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!b) {
        snprintf(err, errlen, "%s:%d:%d: %s", path, je.line, je.column, je.text);
        free(text);
        return NULL;
    }
    const char *why = NULL, *where = "";
    static const char *const strings[] = {"scenario", "case", "profile", "device_class", "config_digest", NULL};
    if (!json_is_object(b)) why = "expected a baseline object";
    else if (!json_is_string(json_object_get(b, "format")) ||
             strcmp(json_string_value(json_object_get(b, "format")), BASELINE_FORMAT)) {
        why = "format: expected \"" BASELINE_FORMAT "\"";
        where = "format";
    }
    for (int i = 0; !why && strings[i]; i++)
        if (!json_is_string(json_object_get(b, strings[i]))) {
            why = "expected a string here (a required key of a baseline)";
            where = strings[i];
        }
    if (!why && !json_is_string(json_object_get(json_object_get(b, "provenance"), "fingerprint_id"))) {
        why = "provenance.fingerprint_id: expected a string";
        where = "provenance";
    }
    if (!why && !json_is_array(json_object_get(b, "steps"))) {
        why = "steps: expected an array of step records";
        where = "steps";
    }
    if (!why && !json_is_object(json_object_get(b, "perf"))) {
        why = "perf: expected an object";
        where = "perf";
    }
    const json_t *dump = json_object_get(b, "dump");
    if (!why && dump && !json_is_null(dump) && !json_is_array(json_object_get(dump, "tensors"))) {
        why = "dump.tensors: expected an array of tensor summaries";
        where = "dump";
    }
    if (why) {
        at(err, errlen, path, text, where, why);
        json_decref(b);
        b = NULL;
    }
    free(text);
    return b;
}

int baseline_write(const char *path, const json_t *b, char *err, size_t errlen) {
    char dir[2400];
    path_dirname(path, dir, sizeof dir);
    if (mkdir_p(dir)) {
        snprintf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
        return -1;
    }
    char *js = json_dumps(b, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    if (!js) {
        snprintf(err, errlen, "%s: cannot serialise the baseline", path);
        return -1;
    }
    Str s = {0};
    str_add(&s, js);
    str_add(&s, "\n");
    int rc = write_file_atomic(path, str_c(&s), s.len);
    if (rc) snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    str_free(&s);
    free(js);
    return rc;
}
