// harness/checks/growth.c — the `growth` check: no per-step trend in time or memory (leaks, state
// carried across steps).
#define _POSIX_C_SOURCE 200809L

#include "harness/checks/checks.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const GROWTH_KEYS[] = {"check", "metric", "skip", "window", "max_ratio", "max_bytes", NULL};

// ---- growth: no per-step trend in time or memory ---------------------------------------------------

static void growth_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps) {
    check_only_keys(s, params, jpath, GROWTH_KEYS, ps);
    const json_t *m = json_object_get(params, "metric");
    char kp[256];
    snprintf(kp, sizeof kp, "%s.metric", jpath);
    static const char *const metrics[] = {"ms", "mem_bytes", "rss_bytes", NULL};
    int ok = json_is_string(m);
    if (ok) {
        ok = 0;
        for (int i = 0; metrics[i]; i++) ok |= !strcmp(metrics[i], json_string_value(m));
    }
    if (!ok) scenario_problem(s, ps, m ? kp : jpath, 0, "growth needs \"metric\": \"ms\", \"mem_bytes\" or \"rss_bytes\"");
    const json_t *mr = json_object_get(params, "max_ratio"), *mb = json_object_get(params, "max_bytes");
    if (!mr && !mb) scenario_problem(s, ps, jpath, 0, "growth needs \"max_ratio\" (relative growth) and/or \"max_bytes\"");
    check_num_param(s, params, jpath, "max_ratio", 0, -1e-300, 1e6, ps);
    check_num_param(s, params, jpath, "max_bytes", 0, -1e-300, 1e18, ps);
    int skip = (int)check_num_param(s, params, jpath, "skip", 1, -1e-300, 1e6, ps);
    int window = (int)check_num_param(s, params, jpath, "window", 3, 0, 1e6, ps);
    static const char *const whole[] = {"skip", "window", NULL};   // step counts: whole numbers
    for (int k = 0; whole[k]; k++) {
        const json_t *v = json_object_get(params, whole[k]);
        if (json_is_real(v)) {
            snprintf(kp, sizeof kp, "%s.%s", jpath, whole[k]);
            scenario_problem(s, ps, kp, 0, "%s: expected a whole number of steps, got %.17g", whole[k], json_real_value(v));
        }
    }
    for (int c = 0; c < s->n_cases; c++)
        if (s->cases[c].cfg.steps < skip + 2 * window)
            scenario_problem(s, ps, jpath, 0, "growth compares the first and last %d steps after %d skipped: case %s "
                                              "trains only %d", window, skip, s->cases[c].name, s->cases[c].cfg.steps);
}

// Growth of a per-step metric after `skip` warm-up steps. The trend is the
// Theil–Sen slope (the median of the slopes between every pair of steps): it
// ignores up to ~29% of wild steps either way — a step slowed by another process
// on a shared CPU, one sped up by a clock boost on a GPU host — where a
// least-squares line or a window's min/median follows them. growth = slope x
// (steps - 1), relative to the median of the first `window` steps. For byte
// counts the difference of the last and first windows' medians also counts (a
// one-time allocation that stays is growth too), whichever is larger.
static void growth_evaluate(const json_t *params, CaseResult *r, const ScenarioRun *sr) {
    (void)sr;
    const char *metric = json_string_value(json_object_get(params, "metric"));
    const json_t *mr = json_object_get(params, "max_ratio"), *mb = json_object_get(params, "max_bytes");
    const double max_ratio = check_num_param(r->s, params, "", "max_ratio", INFINITY, -1e-300, 1e6, NULL);
    const double max_bytes = check_num_param(r->s, params, "", "max_bytes", INFINITY, -1e-300, 1e18, NULL);
    const int skip = (int)check_num_param(r->s, params, "", "skip", 1, -1e-300, 1e6, NULL);
    const int window = (int)check_num_param(r->s, params, "", "window", 3, 0, 1e6, NULL);
    int n = 0, total = r->metrics ? (int)json_array_size(r->metrics) : 0;
    double *v = xcalloc((size_t)total + 1, sizeof(double));
    for (int i = skip; i < total; i++) {
        double x = json_number_or(json_array_get(r->metrics, (size_t)i), metric, NAN);
        if (isfinite(x)) v[n++] = x;
    }
    char name[64];
    snprintf(name, sizeof name, "growth(%s)", metric);
    if (n < 2 * window) {
        result_finding(r, name, 0, "%d steps of %s after skipping %d; need %d", n, metric, skip, 2 * window);
        free(v);
        return;
    }
    double first = median_d(v, window), last = median_d(v + n - window, window);
    double *pairs = xmalloc(sizeof(double) * (size_t)n * (size_t)(n - 1) / 2 + sizeof(double));
    size_t np = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) pairs[np++] = (v[j] - v[i]) / (j - i);
    double slope = median_d(pairs, (int)np);
    free(pairs);
    const int bytes = strcmp(metric, "ms") != 0;
    double grow = slope * (n - 1);
    if (bytes && last - first > grow) grow = last - first;
    double ratio = first != 0 ? grow / fabs(first) : (grow != 0 ? INFINITY : 0);
    int bad = (mr && ratio > max_ratio) || (mb && grow > max_bytes);
    json_t *g = json_pack("{s:f,s:f,s:f,s:f}", "first", first, "last", last, "ratio", isfinite(ratio) ? ratio : -1, "slope", slope);
    char key[80];
    snprintf(key, sizeof key, "growth_%s", metric);
    json_object_set_new(r->facts, key, g);
    if (bytes && grow == 0)
        result_finding(r, name, !bad, "%s unchanged over %d steps: no leak", metric, n);
    else if (bytes)
        result_finding(r, name, !bad, "%s %s by %.0f B over %d steps (%+.1f%%, %+.0f B/step)", metric,
                       grow > 0 ? "grows" : "shrinks", fabs(grow), n, 100 * ratio, slope);
    else
        result_finding(r, name, !bad, "step time %.1f → %.1f ms, trend %+.0f%% over %d steps (Theil–Sen %+.2f ms/step)",
                       first, last, 100 * ratio, n, slope);
    free(v);
}

// A time metric is judged on a machine to itself.
static int growth_judges_time(const json_t *params) {
    const char *m = json_string_value(json_object_get(params, "metric"));
    return m && (!strcmp(m, "ms") || !strcmp(m, "step_ms") || !strcmp(m, "tok_per_s"));
}

const CheckDef check_growth = {
    .name = "growth",
    .summary = "no per-step growth of step time or memory beyond a threshold (leaks, state carried across steps)",
    .validate = growth_validate,
    .evaluate = growth_evaluate,
    .judges_time = growth_judges_time,
};
