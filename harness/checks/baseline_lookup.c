// harness/checks/baseline_lookup.c — what the regression checks (golden, perf_floor) share:
// finding a case's baseline, the command that records it.
//
// A case's baseline is its device class's. For `golden` only, a device without one for the
// case borrows the nearest other device's of the same profile (same backend, precision and
// config digest): the same architecture first, then the same build but for the GPU model, then
// the most recently recorded, then the device class in byte order (docs/regression.md,
// "Another GPU model: the nearest baseline"). Perf floors are never borrowed.
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/baseline.h"
#include "harness/checks/baseline_lookup.h"
#include "harness/core/check.h"
#include "harness/exec/runner.h"

// ---- shared -------------------------------------------------------------------------------------

// one_case: with the --case selector of r's case, else none (every case of its scenario).
static void record_command(const CaseResult *r, int one_case, char *out, size_t n) {
    const RunCtx *ctx = r->ctx;
    Str s = {0};
    char sel[600];
    snprintf(sel, sizeof sel, "%s/%s", r->s->name, r->c->name);
    char *const av[] = {"nsa-harness", "baseline", "record", (char *)r->s->path, "--profile",
                        (char *)(ctx ? ctx->profile : "ci"), one_case ? "--case" : NULL, sel, NULL};
    shell_join(&s, av);
    if (ctx && ctx->argv_extra && ctx->argv_extra[0]) str_printf(&s, " %s", ctx->argv_extra);
    snprintf(out, n, "%s", str_c(&s));
    str_free(&s);
}

void regression_record_command(const CaseResult *r, char *out, size_t n) { record_command(r, 1, out, n); }

void regression_record_scenario_command(const CaseResult *r, char *out, size_t n) { record_command(r, 0, out, n); }

// ---- the nearest baseline (golden only) -----------------------------------------------------------

typedef struct {
    char device[128];
    char path[2400];
    json_t *b;
    int same_arch, same_build;
    char arch[64];
    const char *arch_source;
    const char *recorded;   // borrowed from b
} Candidate;

// The fingerprint without the GPU's model name: what a device of the same architecture must
// share with the baseline's recording for a bitwise comparison.
static json_t *fingerprint_but_model(const json_t *fp) {
    json_t *c = json_is_object(fp) ? json_deep_copy(fp) : json_object();
    json_object_del(c, "gpu");
    return c;
}

int regression_same_build_but_model(const json_t *fp_now, const json_t *fp_base) {
    json_t *a = fingerprint_but_model(fp_now), *b = fingerprint_but_model(fp_base);
    const int eq = json_equal(a, b);
    json_decref(a);
    json_decref(b);
    return eq;
}

// Ranking (docs/regression.md): the same architecture first; among equals, the same build but
// for the GPU model (a bitwise comparison is possible); then the most recently recorded; then
// the device class in byte order. Deterministic for any set of folders.
static int candidate_better(const Candidate *a, const Candidate *b) {
    if (a->same_arch != b->same_arch) return a->same_arch > b->same_arch;
    if (a->same_build != b->same_build) return a->same_build > b->same_build;
    const int t = strcmp(a->recorded ? a->recorded : "", b->recorded ? b->recorded : "");
    if (t) return t > 0;
    return strcmp(a->device, b->device) < 0;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// The nearest usable baseline of another device class under <baselines>/<profile>/, or NULL.
static json_t *nearest_baseline(CaseResult *r, char *path, size_t n, BaselineMatch *m) {
    const RunCtx *ctx = r->ctx;
    char root[2400];
    snprintf(root, sizeof root, "%s/%s", ctx->baselines_dir, ctx->profile);
    DIR *d = opendir(root);
    if (!d) return NULL;
    StrList names = {0};
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && strcmp(e->d_name, m->own_device)) strlist_add(&names, e->d_name);
    closedir(d);
    qsort(names.v, (size_t)names.n, sizeof(char *), name_cmp);
    json_t *fp_now = baseline_fingerprint(r->env, r->c->cfg.backend, r->c->cfg.precision);
    Candidate best;
    memset(&best, 0, sizeof best);
    for (int i = 0; i < names.n; i++) {
        Candidate c;
        memset(&c, 0, sizeof c);
        snprintf(c.device, sizeof c.device, "%s", names.v[i]);
        baseline_path(c.path, sizeof c.path, ctx->baselines_dir, ctx->profile, c.device, r->s->name, r->c->dir);
        if (!file_exists(c.path)) continue;
        char err[2048];
        if (!(c.b = baseline_load(c.path, err, sizeof err))) {
            str_printf(&m->others, "%s%s (not a baseline: %s)", m->others.len ? "; " : "", c.device, err);
            continue;
        }
        const json_t *p = json_object_get(c.b, "provenance");
        const char *be = json_string_value(json_object_get(p, "backend")), *pr = json_string_value(json_object_get(p, "precision"));
        const char *digest = json_string_value(json_object_get(c.b, "config_digest"));
        const char *why = NULL;
        char whybuf[256];
        if (!be || strcmp(be, r->c->cfg.backend) || !pr || strcmp(pr, r->c->cfg.precision)) {
            snprintf(whybuf, sizeof whybuf, "recorded with backend %s, precision %s", be ? be : "?", pr ? pr : "?");
            why = whybuf;
        } else if (strcmp(digest, r->c->cfg.digest)) {
            snprintf(whybuf, sizeof whybuf, "recorded for config digest %s, this case's is %s", digest, r->c->cfg.digest);
            why = whybuf;
        }
        if (why) {
            str_printf(&m->others, "%s%s (%s)", m->others.len ? "; " : "", c.device, why);
            json_decref(c.b);
            continue;
        }
        baseline_arch(c.b, c.arch, sizeof c.arch, &c.arch_source);
        c.same_arch = strcmp(c.arch, "unknown") && !strcmp(c.arch, m->own_arch);
        c.same_build = c.same_arch && regression_same_build_but_model(fp_now, json_object_get(p, "fingerprint"));
        c.recorded = json_string_value(json_object_get(p, "recorded"));
        if (!best.b || candidate_better(&c, &best)) {
            if (best.b) {
                str_printf(&m->others, "%s%s (%s, nearer one taken)", m->others.len ? "; " : "", best.device, best.arch);
                json_decref(best.b);
            }
            best = c;
        } else {
            str_printf(&m->others, "%s%s (%s, nearer one taken)", m->others.len ? "; " : "", c.device, c.arch);
            json_decref(c.b);
        }
    }
    json_decref(fp_now);
    strlist_free(&names);
    if (!best.b) return NULL;
    m->nearest = 1;
    m->same_arch = best.same_arch;
    m->same_build = best.same_build;
    snprintf(m->device, sizeof m->device, "%s", best.device);
    snprintf(m->arch, sizeof m->arch, "%s", best.arch);
    m->arch_source = best.arch_source;
    snprintf(path, n, "%s", best.path);
    return best.b;
}

// ---- the case's baseline --------------------------------------------------------------------------

// record_extra: words the record command gets after the run's own (perf_floor with timings:
// "--repeat 5", the spread of five runs sets the timing tolerance), or NULL.
static json_t *baseline_find(CaseResult *r, const char *check, const char *record_extra, char *path, size_t n,
                             BaselineMatch *m);

json_t *regression_baseline_for(CaseResult *r, const char *check, char *path, size_t n) {
    return baseline_find(r, check, NULL, path, n, NULL);
}

json_t *regression_baseline_match(CaseResult *r, const char *check, char *path, size_t n, BaselineMatch *m) {
    return baseline_find(r, check, NULL, path, n, m);
}

static json_t *baseline_find(CaseResult *r, const char *check, const char *record_extra, char *path, size_t n,
                             BaselineMatch *m) {
    const RunCtx *ctx = r->ctx;
    path[0] = '\0';
    if (!ctx || !ctx->baselines_dir) {
        result_finding_verdict(r, check, V_ERROR, "no baselines folder was given to the run");
        return NULL;
    }
    if (!r->env) {
        result_finding_verdict(r, check, V_ERROR, "the case has no environment record (env.json): its device class is unknown");
        return NULL;
    }
    char dev[128], cmd[2048], key[64];
    baseline_device_class(r->env, r->c->cfg.backend, dev, sizeof dev);
    baseline_path(path, n, ctx->baselines_dir, ctx->profile, dev, r->s->name, r->c->dir);
    regression_record_command(r, cmd, sizeof cmd);
    if (record_extra) {
        size_t l = strlen(cmd);
        snprintf(cmd + l, sizeof cmd - l, " %s", record_extra);
    }
    snprintf(key, sizeof key, "%s_baseline", check);
    if (m) {
        snprintf(m->own_device, sizeof m->own_device, "%s", dev);
        baseline_device_arch(r->env, r->c->cfg.backend, m->own_arch, sizeof m->own_arch);
        snprintf(m->own_path, sizeof m->own_path, "%s", path);
        snprintf(m->device, sizeof m->device, "%s", dev);
        snprintf(m->arch, sizeof m->arch, "%s", m->own_arch);
        m->arch_source = "this device";
    }
    if (!file_exists(path)) {
        json_t *near = m ? nearest_baseline(r, path, n, m) : NULL;
        if (near) {
            json_object_set_new(r->facts, key, json_string(path));
            return near;
        }
        json_object_set_new(r->facts, key, json_string("missing"));
        const int perf = !strcmp(check, "perf_floor");
        Finding *f;
        if (perf) {
            // floors are per device class (per GPU model): another model's speed and memory say
            // nothing of this one's, so a floor is never borrowed (docs/regression.md)
            f = result_finding_verdict(r, check, V_SKIP,
                                       "no performance floor for %s on %s (profile %s): perf floors are per device model "
                                       "and never borrowed from another device's — record this device's own, on this "
                                       "%s, with `%s`",
                                       r->c->name, dev, ctx->profile, dev, cmd);
        } else if (m && m->others.len) {   // other devices' baselines, none usable: say why
            f = result_finding_verdict(r, check, V_SKIP, "no baseline for %s on %s (profile %s): record one with `%s` "
                                       "(no other device's could stand in: %s)",
                                       r->c->name, dev, ctx->profile, cmd, str_c(&m->others));
        } else {
            f = result_finding_verdict(r, check, V_SKIP, "no baseline for %s on %s (profile %s): record one with `%s`",
                                       r->c->name, dev, ctx->profile, cmd);
        }
        str_printf(&f->details, "- looked for `%s`\n", path);
        if (m && !m->others.len)
            str_printf(&f->details, "- no other device has a baseline of this case under `%s/%s/` to stand in\n",
                       ctx->baselines_dir, ctx->profile);
        return NULL;
    }
    char err[2048];
    json_t *b = baseline_load(path, err, sizeof err);
    if (!b) {
        result_finding_verdict(r, check, V_ERROR, "invalid baseline: %s", err);
        return NULL;
    }
    const char *digest = json_string_value(json_object_get(b, "config_digest"));
    if (strcmp(digest, r->c->cfg.digest)) {
        json_object_set_new(r->facts, key, json_string("stale"));
        Finding *f = result_finding_verdict(
            r, check, V_ERROR,
            "re-record: %s was recorded for config digest %s, this case's config digest is %s (the scenario, its "
            "config or a --set changed since): `%s`",
            path, digest, r->c->cfg.digest, cmd);
        str_add(&f->details, "- a baseline only judges the config it was recorded with; say in the commit why the "
                             "config changed\n");
        json_decref(b);
        return NULL;
    }
    json_object_set_new(r->facts, key, json_string(path));
    return b;
}

int regression_prepare_with(CaseResult *r, const char *check, const char *record_extra, char *path, size_t n,
                            json_t **base, json_t **cur, BaselineMatch *m) {
    *base = *cur = NULL;
    if (r->ctx && r->ctx->recording) {
        result_finding(r, check, 1, "recording the baseline: not compared");
        return -1;
    }
    if (!(*base = baseline_find(r, check, record_extra, path, n, m))) return -1;
    const Case *c = r->c;
    const int warmup = (int)json_integer_value(json_object_get(json_object_get(*base, "perf"), "warmup_steps"));
    BaselineMeta meta = {r->s->name, c->name, c->dir, r->ctx->profile, c->cfg.digest, c->cfg.backend, c->cfg.precision,
                         NULL, NULL, 0, NULL, warmup, NULL, NULL};
    char err[1024];
    const char *dirs[1] = {r->dir};
    if (!(*cur = baseline_of_case(dirs, 1, r->env, &meta, err, sizeof err))) {
        result_finding(r, check, 0, "cannot summarise this case: %s", err);
        json_decref(*base);
        *base = NULL;
        return -1;
    }
    return 0;
}

int regression_prepare(CaseResult *r, const char *check, char *path, size_t n, json_t **base, json_t **cur,
                       BaselineMatch *m) {
    return regression_prepare_with(r, check, NULL, path, n, base, cur, m);
}
