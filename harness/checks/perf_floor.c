// harness/checks/perf_floor.c — the `perf_floor` check: a case's performance against the floor
// stored in its baseline for this device class (per GPU model; docs/regression.md):
//   tok_per_s   the median over the timed steps must be >= floor / (1 + tolerance)
//   step_ms     the median must be <= floor x (1 + tolerance)
//   peak_mem_bytes  the backend's peak allocation (an exact counter) must not exceed it
//   flops       the model FLOPs of a step must equal it (the work of a step changed)
// The timing tolerance comes from the run-to-run spread measured when the floor was
// recorded (`baseline record --repeat N`): max(min_tolerance, spread_factor x spread).
// Timings on a shared CPU are noise: the ci profile checks only the exact counters.
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/baseline.h"
#include "harness/checks/baseline_lookup.h"
#include "harness/checks/checks.h"
#include "harness/exec/runner.h"

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

static void perf_floor_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps) {
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

static void perf_floor_evaluate(const json_t *params, CaseResult *r, const ScenarioRun *sr) {
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
    if (regression_prepare_with(r, "perf_floor", timed ? "--repeat 5" : NULL, path, sizeof path, &base, &cur, NULL)) return;
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

// Timings are judged on a machine to itself.
static int perf_floor_judges_time(const json_t *params) { return 1; }

const CheckDef check_perf_floor = {
    .name = "perf_floor",
    .summary = "tok/s, step time, peak memory and FLOPs per step hold the case's floor for this device",
    .validate = perf_floor_validate,
    .evaluate = perf_floor_evaluate,
    .judges_time = perf_floor_judges_time,
};
