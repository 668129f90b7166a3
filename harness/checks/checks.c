// harness/checks/checks.c — the check table (see checks.h). Each check reads the
// artifacts the trainer wrote (metrics.jsonl, grad_trace.jsonl, gate_stats.jsonl,
// anomaly.json; formats in docs/diagnostics.md) and records findings: a one-line
// summary for the verdict table and Markdown details for the evidence section.
#define _POSIX_C_SOURCE 200809L
#include "harness/core/check.h"

#include "harness/checks/baseline_lookup.h"
#include "harness/core/family.h"
#include "harness/artifacts/locus.h"
#include "harness/artifacts/tensordiff.h"
#include "harness/artifacts/tensornames.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- helpers ----------------------------------------------------------------------------

static const char *const FINITE_KEYS[] = {"check", NULL};
static const char *const ARRIVAL_KEYS[] = {"check", "expect_missing", "match_trainer", "ddp_unused_ok", NULL};
static const char *const GATE_KEYS[] = {"check", "step", "fc2_gain", "fc2_std_tolerance", "min_output_std", NULL};
static const char *const DROP_KEYS[] = {"check", "min_drop", NULL};

void check_only_keys(const Scenario *s, const json_t *params, const char *jpath, const char *const *known,
                     Problems *ps) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)params, k, v) {
        int ok = 0;
        for (int i = 0; known[i]; i++) ok |= !strcmp(known[i], k);
        if (ok) continue;
        Str list = {0};
        for (int i = 1; known[i]; i++) str_printf(&list, "%s%s", i > 1 ? ", " : "", known[i]);
        char kp[256];
        snprintf(kp, sizeof kp, "%s.%s", jpath, k);
        scenario_problem(s, ps, kp, 1, "unknown key '%s' for check '%s' (known: %s)", k,
                         json_string_value(json_object_get(params, "check")), list.len ? str_c(&list) : "none");
        str_free(&list);
    }
}

// A number parameter in (lo, hi]; returns def when absent. The value may also be
// given per profile, {"ci": 0, "gpu": 2e-2}: then the profile being expanded
// (validation) or run (evaluation) picks it.
double check_num_param(const Scenario *s, const json_t *params, const char *jpath, const char *key, double def,
                       double lo, double hi, Problems *ps) {
    const json_t *v = json_object_get(params, key);
    if (!v) return def;
    char kp[400];
    snprintf(kp, sizeof kp, "%s.%s", jpath, key);
    if (json_is_object(v) && s) {
        const char *pk;
        json_t *pv;
        json_object_foreach((json_t *)v, pk, pv) {
            int known = 0;
            for (int p = 0; p < PROFILE_COUNT; p++) known |= !strcmp(pk, PROFILE_NAMES[p]);
            if (!known && ps) scenario_problem(s, ps, kp, 0, "%s: per-profile values take the keys ci and gpu, not '%s'", key, pk);
        }
        const json_t *pick = json_object_get(v, PROFILE_NAMES[s->cur_profile]);
        if (!pick) return def;
        size_t kl = strlen(kp);
        snprintf(kp + kl, sizeof kp - kl, ".%s", PROFILE_NAMES[s->cur_profile]);
        v = pick;
    }
    if (!json_is_number(v) || !(json_number_value(v) > lo) || json_number_value(v) > hi) {
        if (ps) {
            // what it got, and the range as a reader writes it (lo = -1e-300 means >= 0)
            char got[96], range[64];
            if (json_is_number(v)) snprintf(got, sizeof got, "%.17g", json_number_value(v));
            else snprintf(got, sizeof got, "%s", json_is_string(v) ? "a string" : json_is_boolean(v) ? "a boolean"
                                                 : json_is_null(v) ? "null" : json_is_array(v) ? "an array" : "an object");
            if (lo < 0 && lo > -1e-200) snprintf(range, sizeof range, "[0, %g]", hi);
            else snprintf(range, sizeof range, "(%g, %g]", lo, hi);
            scenario_problem(s, ps, kp, 0, "%s: expected a number in %s, got %s", key, range, got);
        }
        return def;
    }
    return json_number_value(v);
}


static void add_name_list(Str *s, const json_t *names, int max) {
    size_t i;
    json_t *n;
    json_array_foreach(names, i, n) {
        if ((int)i == max) {
            str_printf(s, ", … (%zu more)", json_array_size(names) - i);
            break;
        }
        str_printf(s, "%s%s", i ? ", " : "", json_string_value(n));
    }
}

// ---- finite: loss and gradient norm finite at every step ------------------------------------

static void finite_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps) {
    check_only_keys(s, params, jpath, FINITE_KEYS, ps);
}

static void finite_evaluate(const json_t *params, CaseResult *r, const ScenarioRun *sr) {
    (void)params;
    (void)sr;
    if (r->anomaly) {
        const json_t *a = r->anomaly, *pos = json_object_get(a, "position");
        Finding *f = result_finding(
            r, "finite", 0, "non-finite at step %d: %s (layer %d, branch %s, op %s, t=%d)",
            (int)json_number_or(a, "step", -1), json_string_value(json_object_get(a, "tensor")), (int)json_number_or(a, "layer", -1),
            json_string_value(json_object_get(a, "branch")) && json_string_value(json_object_get(a, "branch"))[0]
                ? json_string_value(json_object_get(a, "branch"))
                : "-",
            json_string_value(json_object_get(a, "op")), (int)json_number_or(pos, "t", -1));
        char *js = json_dumps(a, JSON_COMPACT);
        str_printf(&f->details, "- first non-finite tensor (anomaly.json): `%s`\n", js ? js : "?");
        free(js);
        json_object_set_new(r->facts, "first_nonfinite", json_deep_copy(a));
        return;
    }
    if (!r->metrics || json_array_size(r->metrics) == 0) {
        result_finding(r, "finite", 0, "no metrics were written (metrics.jsonl missing or empty)");
        return;
    }
    size_t i, n = json_array_size(r->metrics);
    json_t *m;
    double first = NAN, last = NAN;
    int skipped = 0;
    json_array_foreach(r->metrics, i, m) {
        if (json_is_true(json_object_get(m, "skipped"))) {   // fp16 overflow: a skipped step, not an error
            skipped++;
            continue;
        }
        double loss = json_number_or(m, "loss", NAN), gn = json_number_or(m, "grad_norm", NAN);
        if (!isfinite(loss) || !isfinite(gn) || json_is_true(json_object_get(m, "anomaly"))) {
            result_finding(r, "finite", 0, "step %d: loss %g, grad norm %g", (int)json_number_or(m, "step", -1), loss, gn);
            return;
        }
        if (isnan(first)) first = loss;
        last = loss;
    }
    result_finding(r, "finite", 1, "loss %.4g → %.4g over %zu steps, all finite%s", first, last, n,
                   skipped ? " (fp16 overflow steps skipped)" : "");
}

// ---- grad_arrival: exactly the expected parameters get no gradient ----------------------------

// The expect_missing patterns for a case: an array (or "trainer"), or an object whose first
// key (a case-name glob) matching the case gives the array.
static const json_t *patterns_for(const json_t *em, const char *case_name) {
    if (!em || !json_is_object(em)) return em;   // an array, or "trainer"
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)em, k, v) if (fnmatch(k, case_name, 0) == 0) return v;
    return NULL;
}

static int matches_any(const json_t *pats, const char *name) {
    size_t i;
    json_t *p;
    json_array_foreach(pats, i, p) if (fnmatch(json_string_value(p), name, 0) == 0) return 1;
    return 0;
}

// expect_missing "trainer": the expected set at each step is the trace record's own
// expected_missing (a map trainer's from its map, nsa-train's from its model), by exact name:
// a foreign trainer's names need no globs written for them.
static int is_trainer_word(const json_t *v) { return json_is_string(v) && !strcmp(json_string_value(v), "trainer"); }

static int named_in(const json_t *names, const char *name) {
    size_t i;
    json_t *p;
    json_array_foreach(names, i, p) if (json_is_string(p) && !strcmp(json_string_value(p), name)) return 1;
    return 0;
}

// Is `name` expected missing: by the record's own list (by_trainer) or the scenario's globs.
static int expected(const json_t *pats, int by_trainer, const char *name) {
    return by_trainer ? named_in(pats, name) : matches_any(pats, name);
}

static void arrival_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps) {
    check_only_keys(s, params, jpath, ARRIVAL_KEYS, ps);
    char kp[256];
    snprintf(kp, sizeof kp, "%s.match_trainer", jpath);
    const json_t *mt = json_object_get(params, "match_trainer");
    if (mt && !json_is_boolean(mt)) scenario_problem(s, ps, kp, 0, "match_trainer: expected true or false");
    const json_t *du = json_object_get(params, "ddp_unused_ok");
    snprintf(kp, sizeof kp, "%s.ddp_unused_ok", jpath);
    if (du && !json_is_boolean(du)) scenario_problem(s, ps, kp, 0, "ddp_unused_ok: expected true or false");
    const json_t *em = json_object_get(params, "expect_missing");
    snprintf(kp, sizeof kp, "%s.expect_missing", jpath);
    if (!em) {
        scenario_problem(s, ps, jpath, 0, "grad_arrival needs \"expect_missing\": the parameters (globs) that "
                                          "receive no gradient, [] for none, \"trainer\" for the trainer's own "
                                          "expected_missing, or per case {case glob: [...]}");
        return;
    }
    if (is_trainer_word(em)) return;
    enum { MAX_LISTS = 256, PATH_LEN = 320 };
    const json_t *lists[MAX_LISTS];
    int nl = 0;
    char (*paths)[PATH_LEN] = xcalloc(MAX_LISTS, PATH_LEN);
    if (json_is_array(em)) {
        lists[nl] = em;
        snprintf(paths[nl++], sizeof paths[0], "%s", kp);
    } else if (json_is_object(em)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)em, k, v) {
            if (nl == MAX_LISTS) break;
            char ep[PATH_LEN];
            snprintf(ep, sizeof ep, "%s[\"%s\"]", kp, k);
            int hit = 0;
            for (int c = 0; c < s->n_cases; c++) hit |= scenario_case_matches(&s->cases[c], k);
            if (!hit) scenario_problem(s, ps, ep, 1, "expect_missing: '%s' matches no case of this scenario", k);
            lists[nl] = v;
            snprintf(paths[nl++], sizeof paths[0], "%s", ep);
        }
        for (int c = 0; c < s->n_cases; c++)
            if (!patterns_for(em, s->cases[c].name))
                scenario_problem(s, ps, kp, 0, "expect_missing says nothing about case %s", s->cases[c].name);
    } else {
        scenario_problem(s, ps, kp, 0, "expect_missing: expected an array of parameter-name globs, \"trainer\" "
                                       "or an object {case glob: [globs]}");
        free(paths);
        return;
    }
    for (int i = 0; i < nl; i++) {
        if (is_trainer_word(lists[i])) continue;
        if (!json_is_array(lists[i])) {
            scenario_problem(s, ps, paths[i], 0, "expect_missing: expected an array of parameter-name globs or "
                                                 "\"trainer\"");
            continue;
        }
        size_t j;
        json_t *p;
        json_array_foreach(lists[i], j, p) {
            if (!json_is_string(p) || !json_string_value(p)[0]) {
                char ip[PATH_LEN + 32];
                snprintf(ip, sizeof ip, "%s[%zu]", paths[i], j);
                scenario_problem(s, ps, ip, 0, "expect_missing: expected a parameter name or glob (string)");
            }
        }
    }
    free(paths);
}

// Did the data-parallel layer of `rank` mark `name` ready at `step` although its
// gradient never arrived (find_unused / static_graph: a launched bucket lists it
// as missing)?
static int ddp_marked_unused(const CaseResult *r, int step, int rank, const char *name) {
    size_t i, j;
    json_t *b, *m;
    json_array_foreach(r->buckets, i, b) {
        if ((int)json_number_or(b, "step", -1) != step || (int)json_number_or(b, "rank", -1) != rank ||
            !json_is_true(json_object_get(b, "launched")))
            continue;
        json_array_foreach(json_object_get(b, "missing"), j, m) if (!strcmp(json_string_value(m), name)) return 1;
    }
    return 0;
}

static void arrival_evaluate(const json_t *params, CaseResult *r, const ScenarioRun *sr) {
    (void)sr;
    const json_t *pats = patterns_for(json_object_get(params, "expect_missing"), r->c->name);
    const int by_trainer = is_trainer_word(pats);
    int match_trainer = !by_trainer && !json_is_false(json_object_get(params, "match_trainer"));
    int ddp_ok = json_is_true(json_object_get(params, "ddp_unused_ok"));
    json_t *marked = json_array();   // "rank R: name" marked ready by the DDP layer
    if (!r->grad_trace || json_array_size(r->grad_trace) == 0) {
        result_finding(r, "grad_arrival", 0, "no gradient-arrival trace (grad_trace.jsonl missing or empty)");
        return;
    }
    size_t i;
    json_t *rec;
    int n_params = 0, arrived = 0;
    json_t *exp_names = json_array();
    json_array_foreach(r->grad_trace, i, rec) {
        const json_t *missing = json_object_get(rec, "missing"), *order = json_object_get(rec, "order");
        const json_t *nonfin = json_object_get(rec, "nonfinite"), *texp = json_object_get(rec, "expected_missing");
        int step = (int)json_number_or(rec, "step", -1), rank = (int)json_number_or(rec, "rank", 0);
        if (by_trainer && !json_is_array(texp)) {
            result_finding(r, "grad_arrival", 0, "step %d rank %d: the trace record has no expected_missing "
                           "(expect_missing \"trainer\" compares with it)", step, rank);
            json_decref(exp_names);
            json_decref(marked);
            return;
        }
        const json_t *want = by_trainer ? texp : pats;
        n_params = (int)json_number_or(rec, "n_params", 0);
        arrived = (int)json_number_or(rec, "arrived", 0);
        json_t *unexpected = json_array(), *unexp_arrived = json_array();
        size_t j;
        json_t *n;
        json_array_foreach(missing, j, n) {
            if (expected(want, by_trainer, json_string_value(n))) continue;
            if (ddp_ok && ddp_marked_unused(r, step, rank, json_string_value(n))) {
                char tag[160];
                snprintf(tag, sizeof tag, "rank %d: %s", rank, json_string_value(n));
                int seen = 0;
                size_t q;
                json_t *x;
                json_array_foreach(marked, q, x) seen |= !strcmp(json_string_value(x), tag);
                if (!seen) json_array_append_new(marked, json_string(tag));
                continue;
            }
            json_array_append(unexpected, n);
        }
        json_array_foreach(order, j, n) if (expected(want, by_trainer, json_string_value(n)))
            json_array_append(unexp_arrived, n);
        // "trainer": missing must equal the record's set, so a name it expects is missing too
        if (by_trainer)
            json_array_foreach(texp, j, n) if (json_is_string(n) && !named_in(missing, json_string_value(n)) &&
                                               !named_in(unexp_arrived, json_string_value(n)))
                json_array_append(unexp_arrived, n);
        int trainer_disagrees = 0;
        if (match_trainer && json_is_array(texp)) {
            json_array_foreach(texp, j, n) trainer_disagrees |= !matches_any(pats, json_string_value(n));
            size_t k;
            json_t *m;
            json_array_foreach(missing, k, m) {
                if (!matches_any(pats, json_string_value(m))) continue;
                int in_t = 0;
                json_array_foreach(texp, j, n) in_t |= !strcmp(json_string_value(n), json_string_value(m));
                trainer_disagrees |= !in_t;
            }
        }
        if (i == 0) json_array_extend(exp_names, (json_t *)missing);
        int bad = json_array_size(unexpected) || json_array_size(unexp_arrived) || json_array_size(nonfin) ||
                  trainer_disagrees;
        if (bad) {
            Str sum = {0};
            if (json_array_size(nonfin)) {
                str_printf(&sum, "%zu non-finite gradient(s): ", json_array_size(nonfin));
                add_name_list(&sum, nonfin, 4);
            } else if (json_array_size(unexpected)) {
                str_printf(&sum, "%zu unexpected missing: ", json_array_size(unexpected));
                add_name_list(&sum, unexpected, 4);
            } else if (json_array_size(unexp_arrived)) {
                str_printf(&sum, "%zu expected-missing gradient(s) arrived: ", json_array_size(unexp_arrived));
                add_name_list(&sum, unexp_arrived, 4);
            } else {
                str_printf(&sum, "the trainer's expected-missing set differs from the scenario's");
            }
            Finding *f = result_finding(r, "grad_arrival", 0, "step %d rank %d: %s", step, rank, str_c(&sum));
            str_printf(&f->details, "- gradient arrival, step %d rank %d: %d/%d arrived, %zu missing\n", step, rank,
                       arrived, n_params, json_array_size(missing));
            if (json_array_size(unexpected)) {
                str_add(&f->details, "- missing but not expected: ");
                add_name_list(&f->details, unexpected, 1000);
                str_add(&f->details, "\n");
            }
            if (json_array_size(unexp_arrived)) {
                str_add(&f->details, "- expected missing but arrived: ");
                add_name_list(&f->details, unexp_arrived, 1000);
                str_add(&f->details, "\n");
            }
            if (json_array_size(nonfin)) {
                str_add(&f->details, "- non-finite: ");
                add_name_list(&f->details, nonfin, 1000);
                str_add(&f->details, "\n");
            }
            if (trainer_disagrees) {
                str_add(&f->details, "- the trainer's own expectation (`expected_missing`): ");
                add_name_list(&f->details, texp, 1000);
                str_add(&f->details, "\n");
            }
            json_object_set_new(r->facts, "unexpected_missing", unexpected);
            json_object_set_new(r->facts, "unexpected_arrived", unexp_arrived);
            json_object_set(r->facts, "nonfinite_grads", (json_t *)nonfin);
            json_object_set_new(r->facts, "arrival_step", json_integer(step));
            json_object_set_new(r->facts, "arrival_rank", json_integer(rank));
            json_decref(exp_names);
            json_decref(marked);
            str_free(&sum);
            return;
        }
        json_decref(unexpected);
        json_decref(unexp_arrived);
    }
    json_object_set_new(r->facts, "missing", exp_names);
    json_object_set_new(r->facts, "arrived", json_integer(arrived));
    json_object_set_new(r->facts, "n_params", json_integer(n_params));
    if (json_array_size(marked)) {
        Str m = {0};
        add_name_list(&m, marked, 4);
        result_finding(r, "grad_arrival", 1, "missing = expected in %zu record(s), except %zu unused parameter(s) the data-parallel "
                       "layer marked ready with a zero gradient: %s", json_array_size(r->grad_trace),
                       json_array_size(marked), str_c(&m));
        json_object_set_new(r->facts, "ddp_marked_unused", marked);
        str_free(&m);
        return;
    }
    json_decref(marked);
    result_finding(r, "grad_arrival", 1, "%d/%d grads arrived; missing = expected (%d) in %zu step(s)", arrived,
                   n_params, n_params - arrived, json_array_size(r->grad_trace));
}

// ---- gate_init: the gate starts neither zero nor uniform ---------------------------------------

static void gate_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps) {
    check_only_keys(s, params, jpath, GATE_KEYS, ps);
    if (!json_is_null(json_object_get(params, "fc2_gain")))   // null: fc2's std is not compared
        check_num_param(s, params, jpath, "fc2_gain", 0.1, 0, 100, ps);
    check_num_param(s, params, jpath, "fc2_std_tolerance", 0.3, 0, 10, ps);
    check_num_param(s, params, jpath, "min_output_std", 1e-4, 0, 1, ps);
    const json_t *st = json_object_get(params, "step");
    if (st && (!json_is_integer(st) || json_integer_value(st) < 1)) {
        char kp[256];
        snprintf(kp, sizeof kp, "%s.step", jpath);
        scenario_problem(s, ps, kp, 0, "step: expected a positive integer (the step whose forward is inspected)");
    }
    for (int c = 0; c < s->n_cases; c++)
        if (s->cases[c].cfg.steps < (st ? (int)json_integer_value(st) : 1))
            scenario_problem(s, ps, jpath, 0, "gate_init inspects step %lld but case %s trains %d step(s)",
                             st ? (long long)json_integer_value(st) : 1LL, s->cases[c].name, s->cases[c].cfg.steps);
}

// Xavier-uniform's std of a layer: U(-b, b), b = gain*sqrt(6/(fan_in+fan_out)), std = b/sqrt(3)
static double xavier_std(double gain, double fan_in, double fan_out) { return gain * sqrt(2.0 / (fan_in + fan_out)); }

// How far a uniform gate's recorded output may sit from the uniform value: the gate's outputs
// are the activation type's, so a zero-initialised gate in bf16 reads 1/3 rounded to bf16
// (0.333984375: 2^-9 relative) in every position; within the type's unit roundoff (bf16
// 2^-8, fp16 2^-11, relative), else 1e-6 (the statistics' printed digits).
static double uniform_gate_tolerance(const char *precision, double uniform_value) {
    const double u = !strcmp(precision, "bf16") ? 0x1p-8 : !strcmp(precision, "fp16") ? 0x1p-11 : 0;
    const double t = u * uniform_value;
    return t > 1e-6 ? t : 1e-6;
}

static void gate_evaluate(const json_t *params, CaseResult *r, const ScenarioRun *sr) {
    (void)sr;
    // "fc2_gain": null: the trainer's init is its own, fc2's std is not compared (the uniform
    // gate and min_output_std still are)
    const int compare_fc2 = !json_is_null(json_object_get(params, "fc2_gain"));
    const double gain = check_num_param(r->s, params, "", "fc2_gain", 0.1, 0, 100, NULL);
    const double tol = check_num_param(r->s, params, "", "fc2_std_tolerance", 0.3, 0, 10, NULL);
    const double min_std = check_num_param(r->s, params, "", "min_output_std", 1e-4, 0, 1, NULL);
    const int want_step = json_is_integer(json_object_get(params, "step"))
                              ? (int)json_integer_value(json_object_get(params, "step")) : 1;
    const json_t *rec = NULL;
    size_t i;
    json_t *g;
    json_array_foreach(r->gate_stats, i, g) if ((int)json_number_or(g, "step", -1) == want_step) rec = g;
    if (!rec) {
        result_finding(r, "gate_init", 0, "no gate statistics for step %d (gate_stats.jsonl)", want_step);
        return;
    }
    if (!json_is_true(json_object_get(rec, "gated"))) {
        result_finding(r, "gate_init", 0, "the gate is bypassed in this case (force_branch): nothing to inspect");
        return;
    }
    const NsaConfig *cfg = &r->c->cfg;
    // fc2's fans: the config's (gate_hidden, 3 x KV groups), or a layer record's own
    // fc2_fan_in / fc2_fan_out (a map trainer's gate need not have nsa-train's shape)
    const int fan_in = cfg->gate_hidden, fan_out = 3 * cfg->n_kv_heads;
    const double want = xavier_std(gain, fan_in, fan_out);
    const int softmax = !strcmp(json_string_value(json_object_get(rec, "gate_act")) ? json_string_value(json_object_get(rec, "gate_act")) : "", "softmax");
    const double uniform_value = softmax ? 1.0 / 3.0 : 0.5;
    const double uniform_tol = uniform_gate_tolerance(cfg->precision, uniform_value);
    const json_t *layers = json_object_get(rec, "layers");
    json_t *bad_fc2 = json_array(), *uniform = json_array(), *collapsed = json_array(), *table = json_array();
    int own_fans = 0;
    json_array_foreach(layers, i, g) own_fans |= json_is_integer(json_object_get(g, "fc2_fan_in")) &&
                                                  json_is_integer(json_object_get(g, "fc2_fan_out"));
    double bad_want = want, first_want = want;   // the expectation of the first layer off it; of layer 0
    Str det = {0};
    if (!compare_fc2)
        str_add(&det, "| layer | fc2 weight std (not compared: fc2_gain null) | fc2 bias mean | out std cmp | out std sel | "
                      "out std win | out mean cmp / sel / win |\n|---|---|---|---|---|---|---|\n");
    else if (own_fans)
        str_printf(&det, "| layer | fc2 weight std / expected (±%.0f%%; the trainer's fc2 fans) | fc2 bias mean | out std cmp | "
                         "out std sel | out std win | out mean cmp / sel / win |\n|---|---|---|---|---|---|---|\n", tol * 100);
    else
        str_printf(&det, "| layer | fc2 weight std (expected %.4g ±%.0f%%) | fc2 bias mean | out std cmp | out std sel | "
                         "out std win | out mean cmp / sel / win |\n|---|---|---|---|---|---|---|\n",
                   want, tol * 100);
    json_array_foreach(layers, i, g) {
        int L = (int)json_number_or(g, "layer", -1);
        double wstd = json_number_or(g, "fc2_weight_std", NAN), bmean = json_number_or(g, "fc2_bias_mean", NAN);
        const json_t *fi = json_object_get(g, "fc2_fan_in"), *fo = json_object_get(g, "fc2_fan_out");
        const double want_l = json_is_integer(fi) && json_is_integer(fo)
                                  ? xavier_std(gain, (double)json_integer_value(fi), (double)json_integer_value(fo))
                                  : want;
        if (i == 0) first_want = want_l;
        const json_t *os = json_object_get(g, "out_std"), *om = json_object_get(g, "out_mean");
        double sd[3], mu[3];
        int all_low = 1, any_low = 0, all_uniform_value = 1;
        for (int b = 0; b < 3; b++) {
            sd[b] = json_number_value(json_array_get(os, (size_t)b));
            mu[b] = json_number_value(json_array_get(om, (size_t)b));
            if (!(sd[b] >= min_std)) any_low = 1;
            else all_low = 0;
            if (!(fabs(mu[b] - uniform_value) <= uniform_tol)) all_uniform_value = 0;
        }
        if (compare_fc2 && !(fabs(wstd - want_l) <= tol * want_l)) {
            if (!json_array_size(bad_fc2)) bad_want = want_l;
            json_array_append_new(bad_fc2, json_integer(L));
        }
        if (all_low && all_uniform_value) json_array_append_new(uniform, json_integer(L));
        else if (any_low) json_array_append_new(collapsed, json_integer(L));
        if (compare_fc2 && own_fans)
            str_printf(&det, "| %d | %.4g / %.4g | %.3g | %.3g | %.3g | %.3g | %.6f / %.6f / %.6f |\n", L, wstd, want_l,
                       bmean, sd[0], sd[1], sd[2], mu[0], mu[1], mu[2]);
        else
            str_printf(&det, "| %d | %.4g | %.3g | %.3g | %.3g | %.3g | %.6f / %.6f / %.6f |\n", L, wstd, bmean, sd[0],
                       sd[1], sd[2], mu[0], mu[1], mu[2]);
        json_t *row = json_pack("{s:i,s:f,s:[f,f,f],s:[f,f,f]}", "layer", L, "fc2_weight_std", isfinite(wstd) ? wstd : -1.0,
                                "out_std", sd[0], sd[1], sd[2], "out_mean", mu[0], mu[1], mu[2]);
        const json_t *fc2n = json_object_get(g, "fc2_name");   // another trainer's gate last layer (the probe)
        if (row && json_is_string(fc2n)) json_object_set_new(row, "fc2_name", json_copy((json_t *)fc2n));
        if (row) json_array_append_new(table, row);
    }
    json_object_set_new(r->facts, "gate_layers", table);
    json_object_set_new(r->facts, "gate_expected_fc2_std",
                        !compare_fc2 ? json_null() : json_real(json_array_size(bad_fc2) ? bad_want : first_want));
    json_object_set_new(r->facts, "gate_uniform_layers", json_deep_copy(uniform));
    json_object_set_new(r->facts, "gate_uniform_value", json_real(uniform_value));
    json_object_set_new(r->facts, "gate_bad_fc2_layers", json_deep_copy(bad_fc2));
    json_object_set_new(r->facts, "gate_collapsed_layers", json_deep_copy(collapsed));
    size_t nl = json_array_size(layers);
    Finding *f;
    if (json_array_size(uniform)) {
        Str ls = {0};
        json_t *x;
        size_t k;
        json_array_foreach(uniform, k, x) str_printf(&ls, "%s%lld", k ? ", " : "", (long long)json_integer_value(x));
        f = result_finding(r, "gate_init", 0, "uniform gate in %zu/%zu layers (%s): every output %.6f for cmp, sel, win, std 0",
                           json_array_size(uniform), nl, str_c(&ls), uniform_value);
        str_free(&ls);
    } else if (json_array_size(collapsed)) {
        f = result_finding(r, "gate_init", 0, "gate output std below %g in %zu/%zu layers", min_std,
                           json_array_size(collapsed), nl);
    } else if (json_array_size(bad_fc2)) {
        f = result_finding(r, "gate_init", 0, "fc2 weight std off the Xavier(gain %g) expectation %.4g in %zu/%zu layers",
                           gain, bad_want, json_array_size(bad_fc2), nl);
    } else {
        double lo = INFINITY, hi = 0, olo = INFINITY;
        json_array_foreach(layers, i, g) {
            double w = json_number_or(g, "fc2_weight_std", 0);
            lo = w < lo ? w : lo;
            hi = w > hi ? w : hi;
            for (int b = 0; b < 3; b++) {
                double s = json_number_value(json_array_get(json_object_get(g, "out_std"), (size_t)b));
                olo = s < olo ? s : olo;
            }
        }
        if (!compare_fc2)
            f = result_finding(r, "gate_init", 1, "fc2 std %.4g–%.4g (not compared: the trainer's own init); output std "
                               "≥ %.3g in all %zu layers", lo, hi, olo, nl);
        else if (own_fans)
            f = result_finding(r, "gate_init", 1, "fc2 std %.4g–%.4g (within %.0f%% of Xavier(gain %g) by the trainer's "
                               "fc2 fans); output std ≥ %.3g in all %zu layers", lo, hi, tol * 100, gain, olo, nl);
        else
            f = result_finding(r, "gate_init", 1, "fc2 std %.4g–%.4g (expected %.4g); output std ≥ %.3g in all %zu layers",
                               lo, hi, want, olo, nl);
    }
    if (json_array_size(bad_fc2) && !f->ok) {
        str_printf(&f->details, "- fc2 weight std outside %.4g ±%.0f%% in layers:", bad_want, tol * 100);
        json_t *x;
        size_t k;
        json_array_foreach(bad_fc2, k, x) str_printf(&f->details, " %lld", (long long)json_integer_value(x));
        str_add(&f->details, "\n");
    }
    str_add(&f->details, "\n");
    str_add(&f->details, str_c(&det));
    str_add(&f->details, "\n");
    str_free(&det);
    json_decref(bad_fc2);
    json_decref(uniform);
    json_decref(collapsed);
}

// ---- loss_decrease: training makes progress ----------------------------------------------------

static void drop_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps) {
    check_only_keys(s, params, jpath, DROP_KEYS, ps);
    check_num_param(s, params, jpath, "min_drop", 0.0, -1e30, 1e30, ps);
    for (int c = 0; c < s->n_cases; c++)
        if (s->cases[c].cfg.steps < 2)
            scenario_problem(s, ps, jpath, 0, "loss_decrease needs at least 2 steps (case %s trains %d)",
                             s->cases[c].name, s->cases[c].cfg.steps);
}

static void drop_evaluate(const json_t *params, CaseResult *r, const ScenarioRun *sr) {
    (void)sr;
    double min_drop = check_num_param(r->s, params, "", "min_drop", 0.0, -1e30, 1e30, NULL);
    size_t n = r->metrics ? json_array_size(r->metrics) : 0;
    if (n < 2) {
        result_finding(r, "loss_decrease", 0, "fewer than 2 steps of metrics");
        return;
    }
    double first = json_number_or(json_array_get(r->metrics, 0), "loss", NAN), last = json_number_or(json_array_get(r->metrics, n - 1), "loss", NAN);
    int ok = isfinite(first) && isfinite(last) && last <= first - min_drop;
    result_finding(r, "loss_decrease", ok, "loss %.4f → %.4f (drop %.4f, required ≥ %g)", first, last, first - last, min_drop);
}

// ---- cross-case checks: a reference case ------------------------------------------------------

static const char *const PARITY_KEYS[] = {"check", "reference", "metric", "tolerance", NULL};
static const char *const DUMP_KEYS[] = {"check", "reference", "tensors", "except", "tolerance", NULL};
static const char *const GROWTH_KEYS[] = {"check", "metric", "skip", "window", "max_ratio", "max_bytes", NULL};

// How close reference candidate q is to case c: the axes on which their labels agree
// first (a reference per precision picks the one of c's precision), then the length of
// their names' common prefix (the generated cases of a GC bisection).
static int reference_score(const Scenario *s, const Case *c, const Case *q) {
    int same = 0, k = 0;
    for (int a = 0; c->labels && q->labels && a < s->n_axes; a++)
        same += c->labels[a] && q->labels[a] && !strcmp(c->labels[a], q->labels[a]);
    while (k < 1000 && q->name[k] && q->name[k] == c->name[k]) k++;
    return same * 1000 + k;
}

// "reference": a case glob that matches exactly one case of the scenario (or a case its
// family creates), or one case per value of the other axes (each other case then has
// exactly one closest by reference_score).

static void reference_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps) {
    const json_t *ref = json_object_get(params, "reference");
    char kp[256];
    snprintf(kp, sizeof kp, "%s.reference", jpath);
    if (!ref || !json_is_string(ref) || !json_string_value(ref)[0]) {
        scenario_problem(s, ps, ref ? kp : jpath, 0, "%s needs \"reference\": the case (name or glob) it compares with",
                         json_string_value(json_object_get(params, "check")));
        return;
    }
    const char *g = json_string_value(ref);
    int hits = 0, gen = 0;
    for (int c = 0; c < s->n_cases; c++) hits += scenario_case_matches(&s->cases[c], g);
    const FamilyDef *fam = family_find(s->family);
    if (fam && fam->generated_names)
        for (const char *const *n = fam->generated_names(); n && *n; n++) gen += fnmatch(g, *n, 0) == 0;
    if (hits + gen == 0 || (hits + gen > 1 && gen)) {
        scenario_problem(s, ps, kp, 0, "reference '%s' matches %d cases of this scenario; it must match exactly one", g,
                         hits + gen);
        return;
    }
    // several references (one per value of the other axes, e.g. "*trainer=nsa-train" over a
    // precision axis): every other case must have exactly one closest (reference_score)
    for (int c = 0; hits > 1 && c < s->n_cases; c++) {
        const Case *x = &s->cases[c];
        if (scenario_case_matches(x, g)) continue;
        int best = -1, n_best = 0, first = -1, second = -1;
        for (int k = 0; k < s->n_cases; k++) {
            if (!scenario_case_matches(&s->cases[k], g)) continue;
            int sc = reference_score(s, x, &s->cases[k]);
            if (sc > best) { best = sc; n_best = 1; first = k; }
            else if (sc == best && ++n_best == 2) second = k;
        }
        if (n_best > 1) {
            scenario_problem(s, ps, kp, 0, "reference '%s' matches %d cases, and case %s is as close to %s as to %s: "
                             "the reference must leave one case per value of the other axes", g, hits, x->name,
                             s->cases[first].name, s->cases[second].name);
            return;
        }
    }
}

// The reference result for case r, or NULL with a finding explaining why.
static const CaseResult *reference_of(const json_t *params, CaseResult *r, const ScenarioRun *sr, const char *check) {
    const char *g = json_string_value(json_object_get(params, "reference"));
    if (fnmatch(g, r->c->name, 0) == 0) return NULL;   // this is the reference: nothing to compare
    // several finished cases may match (one reference per base case, e.g. the
    // baselines of a GC bisection over a matrix, or one per precision): the one whose
    // labels agree with this case's on the most axes, then whose name shares the
    // longest prefix with this case's, is its own (reference_score)
    const CaseResult *ref = NULL;
    int best = 0;
    for (int i = 0; i < sr->done; i++) {
        const CaseResult *q = &sr->results[i];
        if (q == r || fnmatch(g, q->c->name, 0) != 0) continue;
        int k = reference_score(r->s, r->c, q->c);
        if (!ref || k > best) {
            ref = q;
            best = k;
        }
    }
    if (!ref) {
        result_finding(r, check, 0, "reference case %s has not run (filtered out?)", g);
        return NULL;
    }
    if (ref->verdict == V_HANG || ref->verdict == V_CRASH || ref->verdict == V_ERROR || ref->verdict == V_SKIP) {
        result_finding(r, check, 0, "reference case %s did not finish (%s): nothing to compare with", ref->c->name,
                       VERDICT_NAMES[ref->verdict]);
        return NULL;
    }
    return ref;
}

// "tolerance" of parity and dump_match: a number in [0, 1], per profile ({"ci": x, "gpu": y}),
// and within a profile optionally per case: an object of case-name globs -> numbers, the
// first glob (in file order) that matches the case wins, e.g. {"*precision=fp32*": 1e-4,
// "*precision=bf16*": 3e-2}; every case of the scenario must match one. validate: s and ps
// (problems reported, returns 0); evaluate: the case's name (returns its tolerance).
static double tolerance_of(const Scenario *s, const json_t *params, const char *jpath, const char *case_name,
                           Problems *ps) {
    const json_t *v = json_object_get(params, "tolerance");
    const json_t *pick = v;
    char kp[400];
    snprintf(kp, sizeof kp, "%s.tolerance", jpath);
    if (json_is_object(v) && (json_object_get(v, "ci") || json_object_get(v, "gpu"))) {
        pick = s ? json_object_get(v, PROFILE_NAMES[s->cur_profile]) : NULL;
        size_t kl = strlen(kp);
        if (s) snprintf(kp + kl, sizeof kp - kl, ".%s", PROFILE_NAMES[s->cur_profile]);
    }
    if (!json_is_object(pick)) return check_num_param(s, params, jpath, "tolerance", 0, -1e-300, 1, ps);
    const char *g;
    json_t *t;
    json_object_foreach((json_t *)pick, g, t) {
        if (ps && (!json_is_number(t) || json_number_value(t) < 0 || json_number_value(t) > 1))
            scenario_problem(s, ps, kp, 0, "tolerance for cases '%s': expected a number in [0, 1]", g);
        if (case_name && fnmatch(g, case_name, 0) == 0) return json_number_value(t);
    }
    for (int c = 0; ps && c < s->n_cases; c++) {
        int hit = 0;
        json_object_foreach((json_t *)pick, g, t) hit |= scenario_case_matches(&s->cases[c], g);
        if (!hit) {
            scenario_problem(s, ps, kp, 0, "tolerance: case %s matches none of its case globs", s->cases[c].name);
            break;
        }
    }
    return 0;
}

static int close_enough(double a, double b, double tol) {
    if (tol == 0) return a == b || (isnan(a) && isnan(b));
    double m = fmax(fabs(a), fabs(b));
    return fabs(a - b) <= tol * (m > 0 ? m : 1);
}

static void parity_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps) {
    check_only_keys(s, params, jpath, PARITY_KEYS, ps);
    reference_validate(s, params, jpath, ps);
    const json_t *m = json_object_get(params, "metric");
    if (m && (!json_is_string(m) || (strcmp(json_string_value(m), "loss") && strcmp(json_string_value(m), "grad_norm")))) {
        char kp[256];
        snprintf(kp, sizeof kp, "%s.metric", jpath);
        scenario_problem(s, ps, kp, 0, "metric: expected \"loss\" or \"grad_norm\"");
    }
    tolerance_of(s, params, jpath, NULL, ps);
}

// Per-step parity of a metric with the reference case: the first step that
// differs (beyond the tolerance; 0 = bitwise) localises where two runs part.
static void parity_evaluate(const json_t *params, CaseResult *r, const ScenarioRun *sr) {
    const CaseResult *ref = reference_of(params, r, sr, "parity");
    if (!ref) return;
    const char *metric = json_is_string(json_object_get(params, "metric")) ? json_string_value(json_object_get(params, "metric")) : "loss";
    const double tol = tolerance_of(r->s, params, "", r->c->name, NULL);
    size_t na = r->metrics ? json_array_size(r->metrics) : 0, nb = ref->metrics ? json_array_size(ref->metrics) : 0;
    size_t n = na < nb ? na : nb;
    if (n == 0) {
        result_finding(r, "parity", 0, "no %s to compare (%zu steps here, %zu in %s)", metric, na, ref->c->name[0] ? nb : 0, ref->c->name);
        return;
    }
    int first = -1, ndiff = 0;
    double fa = 0, fb = 0, maxrel = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(r->metrics, i), *y = json_array_get(ref->metrics, i);
        double a = json_number_or(x, metric, NAN), b = json_number_or(y, metric, NAN);
        double m = fmax(fabs(a), fabs(b)), rel = m > 0 ? fabs(a - b) / m : 0;
        if (rel > maxrel || isnan(rel)) maxrel = isnan(rel) ? INFINITY : rel;
        if (!close_enough(a, b, tol)) {
            ndiff++;
            if (first < 0) {
                first = (int)json_number_or(x, "step", (double)i + 1);
                fa = a;
                fb = b;
            }
        }
    }
    // facts: parity_reference, parity_steps, parity_max_rel, first_diverging_step for the
    // loss; the same names + "_<metric>" for another metric (a scenario may check both)
    char sfx[32] = "", key[64];
    if (strcmp(metric, "loss")) snprintf(sfx, sizeof sfx, "_%s", metric);
#define PARITY_FACT(name, value) (snprintf(key, sizeof key, "%s%s", name, sfx), json_object_set_new(r->facts, key, value))
    PARITY_FACT("parity_reference", json_string(ref->c->name));
    PARITY_FACT("parity_steps", json_integer((json_int_t)n));
    PARITY_FACT("parity_max_rel", json_real(isfinite(maxrel) ? maxrel : -1));
    PARITY_FACT("parity_tolerance", json_real(tol));
    if (first >= 0) {
        PARITY_FACT("first_diverging_step", json_integer(first));
        Finding *f = result_finding(r, "parity", 0, "%s diverges from %s at step %d (%.9g vs %.9g); %d of %zu steps differ",
                                    metric, ref->c->name, first, fa, fb, ndiff, n);
        str_printf(&f->details, "- tolerance %s; max relative difference %.3g over %zu steps\n",
                   tol == 0 ? "0 (bitwise)" : "relative", maxrel, n);
        if (na != nb) str_printf(&f->details, "- step counts differ: %zu here, %zu in %s\n", na, nb, ref->c->name);
    } else {
        char how[96];
        if (tol == 0) snprintf(how, sizeof how, "bitwise");
        else snprintf(how, sizeof how, "within relative %g; max %.2g", tol, maxrel);
        result_finding(r, "parity", na == nb, "%s equal to %s at all %zu steps (%s)", metric, ref->c->name, n, how);
    }
#undef PARITY_FACT
}

// dump_match's `except`: {case glob: [tensor globs]} — tensors not compared in the cases a
// glob matches (e.g. bf16's selected-block indices, which a near-tie may flip) — or, like
// `tolerance`, one such object per profile ({"gpu": {...}}; a profile it does not name leaves
// nothing out). The map of scenario s's current profile, or NULL.
static const json_t *dump_except_of(const Scenario *s, const json_t *params) {
    const json_t *ex = json_object_get(params, "except");
    if (json_is_object(ex) && (json_object_get(ex, "ci") || json_object_get(ex, "gpu")))
        ex = s ? json_object_get(ex, PROFILE_NAMES[s->cur_profile]) : NULL;
    return ex;
}

// Each case glob must match a case of the profile, each list be non-empty tensor globs.
static void dump_except_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps) {
    if (!json_object_get(params, "except")) return;
    const json_t *ex = dump_except_of(s, params);
    char kp[300];
    snprintf(kp, sizeof kp, "%s.except", jpath);
    if (!ex && json_is_object(json_object_get(params, "except"))) return;   // another profile's
    if (!json_is_object(ex)) {
        scenario_problem(s, ps, kp, 0, "except: expected an object {case glob: [tensor globs left out in those cases]}, "
                                       "or one per profile");
        return;
    }
    const char *cg;
    json_t *lst;
    json_object_foreach((json_t *)ex, cg, lst) {
        char ip[600];
        snprintf(ip, sizeof ip, "%s.%s", kp, cg);
        int hit = 0;
        for (int c = 0; c < s->n_cases && !hit; c++) hit = scenario_case_matches(&s->cases[c], cg);
        if (!hit) scenario_problem(s, ps, ip, 0, "except: '%s' matches no case of this profile", cg);
        int good = json_is_array(lst) && json_array_size(lst) > 0;
        size_t i;
        json_t *g;
        json_array_foreach(lst, i, g) good &= json_is_string(g) && json_string_value(g)[0] && json_string_value(g)[0] != '!';
        if (!good) scenario_problem(s, ps, ip, 0, "except: expected a non-empty list of tensor-name globs");
    }
}

// The globs dump_match compares for case c: `tensors`, then "!glob" for each tensor glob
// `except` leaves out of this case (tensordiff.c reads "!" as "not this"). A new reference,
// or NULL for every tensor.
static json_t *dump_globs_for(const Scenario *s, const json_t *params, const Case *c) {
    const json_t *t = json_object_get(params, "tensors"), *ex = dump_except_of(s, params);
    if (!json_is_object(ex)) return t ? json_incref((json_t *)t) : NULL;
    json_t *g = t ? json_deep_copy(t) : json_array();
    const char *cg;
    json_t *lst;
    json_object_foreach((json_t *)ex, cg, lst) {
        if (!scenario_case_matches(c, cg)) continue;
        size_t i;
        json_t *x;
        json_array_foreach(lst, i, x) json_array_append_new(g, json_sprintf("!%s", json_string_value(x)));
    }
    return g;
}

static void dump_validate(const Scenario *s, const json_t *params, const char *jpath, Problems *ps) {
    check_only_keys(s, params, jpath, DUMP_KEYS, ps);
    reference_validate(s, params, jpath, ps);
    dump_except_validate(s, params, jpath, ps);
    tolerance_of(s, params, jpath, NULL, ps);
    const json_t *t = json_object_get(params, "tensors");
    char kp[256];
    snprintf(kp, sizeof kp, "%s.tensors", jpath);
    if (t && (!json_is_array(t) || json_array_size(t) == 0))
        scenario_problem(s, ps, kp, 0, "tensors: expected a non-empty array of tensor-name globs (e.g. [\"logits\"], [\"grads.*\"])");
    size_t i;
    json_t *g;
    json_array_foreach(t, i, g) {
        char ip[300];
        snprintf(ip, sizeof ip, "%s[%zu]", kp, i);
        if (!json_is_string(g)) {
            scenario_problem(s, ps, ip, 0, "tensors[%zu]: expected a string", i);
            continue;
        }
        // a glob that matches no tensor any case's dump holds can never hold: say so now,
        // not after training
        for (int c = 0; c < s->n_cases; c++) {
            StrList names = {0};
            dump_tensor_names(&s->cases[c].cfg, (checks_needs(s) & NEED_DUMP_ACTS) != 0, &names);
            int hit = 0;
            for (int k = 0; k < names.n && !hit; k++) hit = fnmatch(json_string_value(g), names.v[k], 0) == 0;
            strlist_free(&names);
            if (!hit) {
                scenario_problem(s, ps, ip, 0, "tensors[%zu]: '%s' matches no tensor of case %s's step dump (logits, loss, "
                                               "inputs, targets, grads.<parameter>%s; `nsa-harness list --tensors` lists them)",
                                 i, json_string_value(g), s->cases[c].name,
                                 checks_needs(s) & NEED_DUMP_ACTS ? ", acts.blocks.<L>.<activation>" : "");
                break;
            }
        }
    }
}

// Step-1 dumps (safetensors: batch, logits, loss, every gradient) compared tensor
// by tensor with the reference case's (tensordiff.h): bitwise with tolerance 0, else
// relative to the reference tensor's largest magnitude.
static void dump_evaluate(const json_t *params, CaseResult *r, const ScenarioRun *sr) {
    const CaseResult *ref = reference_of(params, r, sr, "dump_match");
    if (!ref) return;
    const double tol = tolerance_of(r->s, params, "", r->c->name, NULL);
    json_t *globs = dump_globs_for(r->s, params, r->c);
    DumpDiff d;
    char err[1024];
    int rc = dumpdiff_files(&d, r->dump_path, ref->dump_path, globs, tol, err, sizeof err);
    if (rc == DUMPDIFF_NO_CAND) result_finding(r, "dump_match", 0, "no step dump: %s", err);
    if (rc == DUMPDIFF_NO_REF) result_finding(r, "dump_match", 0, "no step dump for %s: %s", ref->c->name, err);
    if (rc != DUMPDIFF_OK) {
        dumpdiff_free(&d);
        json_decref(globs);
        return;
    }
    json_t *names = json_array(), *layers = json_array();
    for (int i = 0; i < d.n_differ; i++) json_array_append_new(names, json_string(d.differ[i].name));
    for (int i = 0; i < d.n_layers; i++) json_array_append_new(layers, json_integer(d.layers[i]));
    json_object_set_new(r->facts, "dump_reference", json_string(ref->c->name));
    json_object_set_new(r->facts, "dump_differs", names);
    json_object_set_new(r->facts, "dump_differ_layers", layers);
    json_object_set_new(r->facts, "dump_worst_rel", json_real(isfinite(d.worst) ? d.worst : -1));
    json_object_set_new(r->facts, "dump_tolerance", json_real(tol));
    const int nd = d.n_differ;
    // the first differing tensor in the order a step computes them (locus.h), where it sits, by how much
    char where[96] = "", first_rel[160] = "";
    if (d.first) {
        tensor_where(d.first->name, where, sizeof where);
        if (d.first->rel <= 1e-300) snprintf(first_rel, sizeof first_rel, "equal values, different bits (tolerance 0: bitwise)");
        else if (tol == 0) snprintf(first_rel, sizeof first_rel, "relative %.2e > 0 (bitwise)", d.first->rel);
        else snprintf(first_rel, sizeof first_rel, "relative %.2e > %g", d.first->rel, tol);
        json_t *fd = json_object();
        Locus lc = tensor_locus(d.first->name);
        json_object_set_new(fd, "tensor", json_string(d.first->name));
        json_object_set_new(fd, "layer", json_integer(lc.layer));
        json_object_set_new(fd, "where", json_string(where));
        json_object_set_new(fd, "rel", json_real(isfinite(d.first->rel) ? d.first->rel : -1));
        json_object_set_new(r->facts, "dump_first_differ", fd);
    }
    if (d.n_compared == 0) {
        result_finding(r, "dump_match", 0, "no tensor of the step dumps matched %s", globs ? "the tensors globs" : "");
    } else if (nd || d.n_missing) {
        Finding *f;
        if (nd)
            f = result_finding(r, "dump_match", 0, "%d of %d tensors differ from %s; first differing tensor: `%s` (%s): %s; "
                               "worst %s: relative %.3g", nd, d.n_compared, ref->c->name, d.first->name, where, first_rel,
                               d.differ[0].name, d.differ[0].rel);
        else f = result_finding(r, "dump_match", 0, "tensors missing or reshaped relative to %s", ref->c->name);
        if (nd) {
            str_printf(&f->details, "- tolerance %s; differing tensors in the order a step computes them (the "
                                    "forward's activations and logits, then the gradients from the head back to the "
                                    "embedding):", tol == 0 ? "0 (bitwise)" : "relative");
            for (int i = 0; i < nd && i < 24; i++) {
                const TensorDiff *t = &d.differ[d.model_order[i]];
                char w[96];
                tensor_where(t->name, w, sizeof w);
                str_printf(&f->details, "%s `%s` (%s) %.3g", i ? "," : "", t->name, w, t->rel);
            }
            if (nd > 24) str_printf(&f->details, ", … (%d more)", nd - 24);
            str_add(&f->details, "\n- largest first:");
            for (int i = 0; i < nd && i < 8; i++) str_printf(&f->details, "%s `%s` %.3g", i ? "," : "", d.differ[i].name, d.differ[i].rel);
            if (nd > 8) str_printf(&f->details, ", … (%d more)", nd - 8);
            str_add(&f->details, "\n");
        }
        if (d.n_missing) str_printf(&f->details, "- missing or with another shape/dtype here: %s\n", str_c(&d.missing));
    } else {
        char how[96];
        if (tol == 0) snprintf(how, sizeof how, "bitwise");
        else snprintf(how, sizeof how, "within relative %g; worst %.2g", tol, d.worst);
        if (d.n_compared == 1)
            result_finding(r, "dump_match", 1, "step-1 %s equal to %s's (%s)", d.ref.tensors[0].name[0] ? d.last_compared : "tensor",
                           ref->c->name, how);
        else
            result_finding(r, "dump_match", 1, "%d tensors equal to %s (%s)", d.n_compared, ref->c->name, how);
    }
    dumpdiff_free(&d);
    json_decref(globs);
}

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

// ---- the table -----------------------------------------------------------------------------------

static const CheckDef CHECKS[] = {
    {"finite", "loss and gradient norm finite at every step; on a non-finite value, the first non-finite tensor",
     0, finite_validate, finite_evaluate, 0},
    {"grad_arrival", "exactly the expected parameters receive no gradient (per case), none non-finite",
     NEED_GRAD_TRACE, arrival_validate, arrival_evaluate, 0},
    {"gate_init", "gate fc2 init matches Xavier(gain), gate outputs not uniform/collapsed per layer and branch",
     NEED_GATE_STATS, gate_validate, gate_evaluate, 0},
    {"loss_decrease", "the last step's loss is at least min_drop below the first's",
     0, drop_validate, drop_evaluate, 0},
    {"parity", "a per-step metric (loss) equals the reference case's at every step; the first diverging step",
     0, parity_validate, parity_evaluate, 1},
    {"dump_match", "the step-1 dump (logits, activations, gradients) equals the reference case's, tensor by tensor; "
                   "the first differing tensor in the order a step computes them, by layer and branch",
     NEED_DUMP, dump_validate, dump_evaluate, 1},
    {"growth", "no per-step growth of step time or memory beyond a threshold (leaks, state carried across steps)",
     0, growth_validate, growth_evaluate, 0},
    {"golden", "the loss curve, step-1 dump and gate statistics equal the case's baseline (bitwise on the same build, "
               "else within tolerance); the first diverging step and the tensors by layer and branch",
     NEED_DUMP | NEED_DUMP_ACTS | NEED_GATE_STATS, golden_validate, golden_evaluate, 0},
    {"perf_floor", "tok/s, step time, peak memory and FLOPs per step hold the case's floor for this device",
     0, perf_floor_validate, perf_floor_evaluate, 0},
};
#define N_CHECKS ((int)(sizeof CHECKS / sizeof CHECKS[0]))

const CheckDef *check_find(const char *name) {
    for (int i = 0; i < N_CHECKS; i++)
        if (!strcmp(CHECKS[i].name, name)) return &CHECKS[i];
    return NULL;
}
const CheckDef *check_at(int i) { return i >= 0 && i < N_CHECKS ? &CHECKS[i] : NULL; }
const char *check_names(void) {
    static char buf[512];
    if (!buf[0]) {
        size_t used = 0;
        for (int i = 0; i < N_CHECKS; i++)
            used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s", i ? ", " : "", CHECKS[i].name);
    }
    return buf;
}
const char *check_reference(const CheckSpec *cs) {
    const CheckDef *d = check_find(cs->kind);
    if (!d || !d->cross_case) return NULL;
    return json_string_value(json_object_get(cs->params, "reference"));
}

int is_reference_case(const Scenario *s, const char *name) {
    for (int i = 0; i < s->n_checks; i++) {
        const char *g = check_reference(&s->checks[i]);
        if (g && fnmatch(g, name, 0) == 0) return 1;
    }
    return 0;
}

int is_reference_of(const Scenario *s, int ref, int c) {
    for (int i = 0; i < s->n_checks; i++) {
        const char *g = check_reference(&s->checks[i]);
        if (!g || fnmatch(g, s->cases[ref].name, 0) != 0 || fnmatch(g, s->cases[c].name, 0) == 0) continue;
        // ref matches; is it the closest of the cases that match (reference_of's choice)?
        int best = -1, at = -1;
        for (int k = 0; k < s->n_cases; k++) {
            if (fnmatch(g, s->cases[k].name, 0) != 0) continue;
            int sc = reference_score(s, &s->cases[c], &s->cases[k]);
            if (sc > best) { best = sc; at = k; }
        }
        if (at == ref) return 1;
    }
    return 0;
}

// dump_match compares activations when one of its "tensors" globs starts with "acts.":
// the trainer is then asked for --dump-acts too (the cross-trainer parity localises a
// forward difference by layer and branch that way).
static int dump_wants_acts(const CheckSpec *cs) {
    if (strcmp(cs->kind, "dump_match")) return 0;
    size_t i;
    json_t *g;
    json_array_foreach(json_object_get(cs->params, "tensors"), i, g)
        if (json_is_string(g) && !strncmp(json_string_value(g), "acts.", 5)) return 1;
    return 0;
}

unsigned checks_needs(const Scenario *s) {
    unsigned n = 0;
    for (int i = 0; i < s->n_checks; i++) {
        n |= check_find(s->checks[i].kind)->needs;
        if (dump_wants_acts(&s->checks[i])) n |= NEED_DUMP_ACTS;
    }
    return n;
}

int check_judges_time(const char *kind, const json_t *params) {
    if (!kind) return 0;
    if (!strcmp(kind, "perf_floor")) return 1;
    const char *m = json_string_value(json_object_get(params, "metric"));
    return !strcmp(kind, "growth") && m && (!strcmp(m, "ms") || !strcmp(m, "step_ms") || !strcmp(m, "tok_per_s"));
}

// glob appended to the comma-separated list out unless it is there already
static void glob_list_add(Str *out, const char *glob) {
    const size_t n = strlen(glob);
    for (const char *p = out->len ? str_c(out) : ""; *p;) {
        const char *e = strchr(p, ',');
        const size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && !strncmp(p, glob, n)) return;
        p += k + (e != NULL);
    }
    str_printf(out, "%s%s", out->len ? "," : "", glob);
}

int checks_dump_select(const Scenario *s, Str *out) {
    str_free(out);
    if (!(checks_needs(s) & (NEED_DUMP | NEED_DUMP_ACTS))) return 0;
    for (int i = 0; i < s->n_checks; i++) {
        const CheckSpec *cs = &s->checks[i];
        const CheckDef *d = check_find(cs->kind);
        if (!d || !(d->needs & (NEED_DUMP | NEED_DUMP_ACTS))) continue;
        if (strcmp(cs->kind, "dump_match")) goto whole;   // golden: every tensor
        const json_t *t = json_object_get(cs->params, "tensors");
        if (!json_is_array(t) || !json_array_size(t)) goto whole;   // dump_match without tensors: every tensor
        int positive = 0;
        size_t k;
        json_t *g;
        json_array_foreach(t, k, g) {
            const char *glob = json_string_value(g);
            if (!glob) goto whole;
            if (!glob[0] || glob[0] == '!') continue;   // matches nothing; a "not this" only narrows
            if (strchr(glob, ',')) goto whole;          // not to be said in --dump-tensors' list
            glob_list_add(out, glob);
            positive = 1;
        }
        if (!positive) goto whole;   // only "not this" globs: every other tensor
    }
    const FamilyDef *fam = family_find(s->family);
    if (fam && fam->dump_reads) glob_list_add(out, fam->dump_reads);
    return out->len > 0 ? 1 : (str_free(out), 0);
whole:
    str_free(out);
    return 0;
}
