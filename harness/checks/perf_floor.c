// harness/checks/perf_floor.c — what the regression checks share (finding a case's
// baseline, the command that records it) and the `perf_floor` check.
//
// A case's baseline is its device class's. For `golden` only, a device without one for the
// case borrows the nearest other device's of the same profile (same backend, precision and
// config digest): the same architecture first, then the same build but for the GPU model, then
// the most recently recorded, then the device class in byte order (docs/regression.md,
// "Another GPU model: the nearest baseline"). Perf floors are never borrowed.
//
// perf_floor compares a case's performance with the floor stored in its baseline
// for this device class (per GPU model; docs/regression.md):
//   tok_per_s   the median over the timed steps must be >= floor / (1 + tolerance)
//   step_ms     the median must be <= floor x (1 + tolerance)
//   peak_mem_bytes  the backend's peak allocation (an exact counter) must not exceed it
//   flops       the model FLOPs of a step must equal it (the work of a step changed)
// The timing tolerance comes from the run-to-run spread measured when the floor was
// recorded (`baseline record --repeat N`): max(min_tolerance, spread_factor x spread).
// Timings on a shared CPU are noise: the ci profile checks only the exact counters.
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

static int prepare(CaseResult *r, const char *check, const char *record_extra, char *path, size_t n, json_t **base,
                   json_t **cur, BaselineMatch *m) {
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
    return prepare(r, check, NULL, path, n, base, cur, m);
}

// ---- perf_floor ----------------------------------------------------------------------------------

static const char *const PERF_KEYS[] = {"check", "metrics", "min_tolerance", "spread_factor", NULL};
static const char *const PERF_METRICS[] = {"tok_per_s", "step_ms", "peak_mem_bytes", "flops", NULL};

static int known_metric(const char *m) {
    for (int i = 0; PERF_METRICS[i]; i++)
        if (!strcmp(PERF_METRICS[i], m)) return 1;
    return 0;
}

// The metric list of the profile: an array, or {"ci": [...], "gpu": [...]}.
static const json_t *metrics_for(const Scenario *s, const json_t *params) {
    const json_t *m = json_object_get(params, "metrics");
    if (json_is_object(m)) return json_object_get(m, PROFILE_NAMES[s->cur_profile]);
    return m;
}

static void check_metric_list(const Scenario *s, const json_t *list, const char *kp, Problems *ps) {
    if (!json_is_array(list) || json_array_size(list) == 0) {
        scenario_problem(s, ps, kp, 0, "metrics: expected a non-empty array of tok_per_s, step_ms, peak_mem_bytes, flops");
        return;
    }
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) if (!json_is_string(v) || !known_metric(json_string_value(v)))
        scenario_problem(s, ps, kp, 0, "metrics[%zu]: expected one of tok_per_s, step_ms, peak_mem_bytes, flops", i);
}

void perf_floor_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps) {
    check_only_keys(s, params, jpath, PERF_KEYS, ps);
    check_num_param(s, params, jpath, "min_tolerance", 0.03, 0, 1, ps);
    check_num_param(s, params, jpath, "spread_factor", 3, 0, 100, ps);
    const json_t *m = json_object_get(params, "metrics");
    char kp[256];
    snprintf(kp, sizeof kp, "%s.metrics", jpath);
    if (!m) {
        scenario_problem(s, ps, jpath, 0, "perf_floor needs \"metrics\": which of tok_per_s, step_ms, peak_mem_bytes, "
                                          "flops to hold (or per profile: {\"ci\": [...], \"gpu\": [...]})");
        return;
    }
    if (json_is_object(m)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)m, k, v) {
            int known = 0;
            for (int p = 0; p < PROFILE_COUNT; p++) known |= !strcmp(k, PROFILE_NAMES[p]);
            char ep[300];
            snprintf(ep, sizeof ep, "%s.%s", kp, k);
            if (!known) scenario_problem(s, ps, ep, 1, "metrics: per-profile lists take the keys ci and gpu, not '%s'", k);
            else check_metric_list(s, v, ep, ps);
        }
        if (!json_object_get(m, PROFILE_NAMES[s->cur_profile]))
            scenario_problem(s, ps, kp, 0, "metrics: no list for profile %s", PROFILE_NAMES[s->cur_profile]);
    } else check_metric_list(s, m, kp, ps);
}

typedef struct {
    Str lines;      // Markdown table rows
    Str failed;     // "; "-joined summaries of the metrics that failed
    Str held;
    int n_failed;
} PerfOutcome;

// A metric's value as the report prints it: the exact counters (peak memory, FLOPs) in
// full, the timings to 6 digits.
static void perf_value(char *out, size_t n, const char *metric, double v) {
    const int exact = !strcmp(metric, "peak_mem_bytes") || !strcmp(metric, "flops");
    snprintf(out, n, exact ? "%.15g" : "%.6g", v);
}

static void perf_row(PerfOutcome *o, const char *metric, double now, double floor, const char *rule, int ok,
                     const char *note) {
    char change[48], vn[48], vf[48];
    fmt_rel_change(change, sizeof change, now, floor);   // -0.047 %, never a -0.0 % that hides the change
    perf_value(vn, sizeof vn, metric, now);
    perf_value(vf, sizeof vf, metric, floor);
    str_printf(&o->lines, "| %s | %s | %s | %s | %s | %s%s%s |\n", metric, vn, vf, change, rule, ok ? "ok" : "**FAIL**",
               note && note[0] ? " — " : "", note ? note : "");
    Str *s = ok ? &o->held : &o->failed;
    str_printf(s, "%s%s %s vs floor %s (%s)", s->len ? "; " : "", metric, vn, vf, change);
    o->n_failed += !ok;
}

static void perf_compare_one(PerfOutcome *o, const char *metric, const json_t *cur, const json_t *base, double tol_min,
                             double factor, json_t *facts) {
    char rule[96], note[160] = "";
    int ok = 1;
    double now, floor;
    if (!strcmp(metric, "tok_per_s") || !strcmp(metric, "step_ms")) {
        const json_t *tb = json_object_get(base, metric);
        now = json_number_or(json_object_get(cur, metric), "median", NAN);
        floor = json_number_or(tb, "median", NAN);
        double spread = json_number_or(tb, "spread", 0), tol = fmax(tol_min, factor * spread);
        if (!strcmp(metric, "tok_per_s")) {   // the same ratio as step time, the other way
            ok = now >= floor / (1 + tol);
            snprintf(rule, sizeof rule, "≥ floor / (1 + %.3g)", tol);
        } else {
            ok = now <= floor * (1 + tol);
            snprintf(rule, sizeof rule, "≤ floor × (1 + %.3g)", tol);
        }
        snprintf(note, sizeof note, "tolerance max(%g, %g × spread %.3g over %lld runs)", tol_min, factor, spread,
                 (long long)json_integer_value(json_object_get(base, "runs")));
    } else if (!strcmp(metric, "peak_mem_bytes")) {
        now = json_number_or(cur, metric, NAN);
        floor = json_number_or(base, metric, NAN);
        ok = now <= floor;
        snprintf(rule, sizeof rule, "≤ floor (exact)");
        if (ok && now < floor) snprintf(note, sizeof note, "below the floor by %.0f B: re-record to tighten it", floor - now);
    } else {   // flops: the work of a step, exactly
        now = json_number_or(cur, "flops_per_step", NAN);
        floor = json_number_or(base, "flops_per_step", NAN);
        ok = now == floor;
        snprintf(rule, sizeof rule, "= floor (exact)");
    }
    if (!isfinite(now) || !isfinite(floor)) {
        ok = 0;
        snprintf(note, sizeof note, "not measured %s", !isfinite(now) ? "in this run" : "in the baseline");
    }
    perf_row(o, metric, now, floor, rule, ok, note);
    char key[64];
    snprintf(key, sizeof key, "perf_%s", metric);
    json_object_set_new(facts, key, json_pack("{s:f,s:f,s:b}", "now", isfinite(now) ? now : -1, "floor",
                                              isfinite(floor) ? floor : -1, "ok", ok));
}

void perf_floor_evaluate(const json_t *params, CaseResult *r, const ScenarioRun *sr) {
    (void)sr;
    char path[2400];
    json_t *base, *cur;
    // perf floors are never borrowed from another device (no BaselineMatch); a floor with
    // timings is recorded from 5 runs, whose spread sets the timing tolerance
    const json_t *list = metrics_for(r->s, params);
    int timed = 0;
    size_t i;
    json_t *m;
    json_array_foreach(list, i, m) timed |= json_is_string(m) && (!strcmp(json_string_value(m), "tok_per_s") ||
                                                                  !strcmp(json_string_value(m), "step_ms"));
    if (prepare(r, "perf_floor", timed ? "--repeat 5" : NULL, path, sizeof path, &base, &cur, NULL)) return;
    const json_t *bperf = json_object_get(base, "perf");
    const double tol_min = check_num_param(r->s, params, "", "min_tolerance", 0.03, 0, 1, NULL);
    const double factor = check_num_param(r->s, params, "", "spread_factor", 3, 0, 100, NULL);
    PerfOutcome o;
    memset(&o, 0, sizeof o);
    json_array_foreach(list, i, m)
        perf_compare_one(&o, json_string_value(m), json_object_get(cur, "perf"), bperf, tol_min, factor, r->facts);
    const json_t *pb = json_object_get(base, "provenance");
    Finding *f = o.n_failed
                     ? result_finding(r, "perf_floor", 0, "below the floor: %s", str_c(&o.failed))
                     : result_finding(r, "perf_floor", 1, "holds the floor: %s", str_c(&o.held));
    str_printf(&f->details, "- floor `%s` (recorded %s at %s on %s)\n\n| metric | now | floor | change | rule | |\n"
                            "|---|---|---|---|---|---|\n%s\n",
               path, json_string_value(json_object_get(pb, "recorded")), json_string_value(json_object_get(pb, "commit")),
               json_string_value(json_object_get(pb, "device")), str_c(&o.lines));
    str_free(&o.lines);
    str_free(&o.failed);
    str_free(&o.held);
    json_decref(cur);
    json_decref(base);
}
