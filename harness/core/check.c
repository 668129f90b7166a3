// harness/core/check.c — see check.h: the checks as the loader and the runner see them, through
// the registry of checks; the parameter helpers every check's validate and evaluate use.
#define _POSIX_C_SOURCE 200809L

#include "harness/core/check.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/family.h"

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

// How close reference candidate q is to case c: the axes on which their labels agree
// first (a reference per precision picks the one of c's precision), then the length of
// their names' common prefix (the generated cases of a GC bisection).
int check_reference_score(const Scenario *s, const Case *c, const Case *q) {
    int same = 0, k = 0;
    for (int a = 0; c->labels && q->labels && a < s->n_axes; a++)
        same += c->labels[a] && q->labels[a] && !strcmp(c->labels[a], q->labels[a]);
    while (k < 1000 && q->name[k] && q->name[k] == c->name[k]) k++;
    return same * 1000 + k;
}

const CheckDef *check_find(const char *name) { return registry_find(&check_registry, name); }
const CheckDef *check_at(int i) { return registry_at(&check_registry, i); }
const char *check_names(void) { return registry_names(&check_registry); }

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
        // ref matches; is it the closest of the cases that match (check_reference_of's choice)?
        int best = -1, at = -1;
        for (int k = 0; k < s->n_cases; k++) {
            if (fnmatch(g, s->cases[k].name, 0) != 0) continue;
            int sc = check_reference_score(s, &s->cases[c], &s->cases[k]);
            if (sc > best) { best = sc; at = k; }
        }
        if (at == ref) return 1;
    }
    return 0;
}

unsigned checks_needs(const Scenario *s) {
    unsigned n = 0;
    for (int i = 0; i < s->n_checks; i++) {
        const CheckDef *d = check_find(s->checks[i].kind);
        n |= d->needs;
        if (d->needs_of) n |= d->needs_of(s->checks[i].params);
    }
    return n;
}

int check_judges_time(const char *kind, const json_t *params) {
    const CheckDef *d = check_find(kind);
    return d && d->judges_time && d->judges_time(params);
}

void check_glob_list_add(Str *out, const char *glob) {
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
        // a check that says no tensors reads every one (golden; dump_match without "tensors")
        if (!d->dump_tensors || !d->dump_tensors(cs->params, out)) {
            str_free(out);
            return 0;
        }
    }
    const FamilyDef *fam = family_find(s->family);
    if (fam && fam->dump_reads) check_glob_list_add(out, fam->dump_reads);
    return out->len > 0 ? 1 : (str_free(out), 0);
}
