// harness/checks/grad_arrival.c — the `grad_arrival` check: exactly the expected parameters get no
// gradient (grad_trace.jsonl, per case and rank), none non-finite.
#define _POSIX_C_SOURCE 200809L

#include "harness/checks/checks.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const ARRIVAL_KEYS[] = {"check", "expect_missing", "match_trainer", "ddp_unused_ok", NULL};

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

const CheckDef check_grad_arrival = {
    .name = "grad_arrival",
    .summary = "exactly the expected parameters receive no gradient (per case), none non-finite",
    .needs = NEED_GRAD_TRACE,
    .validate = arrival_validate,
    .evaluate = arrival_evaluate,
};
