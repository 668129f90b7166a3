// harness/core/result.c — see result.h.
#define _POSIX_C_SOURCE 200809L
#include "harness/core/result.h"

#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const VERDICT_NAMES[V_COUNT] = {"PASS", "FAIL", "HANG", "CRASH", "SKIP", "ERROR", "PENDING"};

const CaseResult *scenario_run_find(const ScenarioRun *sr, const char *glob) {
    for (int i = 0; i < sr->done; i++)
        if (fnmatch(glob, sr->results[i].c->name, 0) == 0) return &sr->results[i];
    return NULL;
}

void result_init(CaseResult *r, const Scenario *s, const Case *c) {
    memset(r, 0, sizeof *r);
    r->s = s;
    r->c = c;
    r->verdict = V_PASS;
    r->facts = json_object();
}

void result_free(CaseResult *r) {
    str_free(&r->evidence);
    for (int i = 0; i < r->n_findings; i++) {
        free(r->findings[i].summary);
        str_free(&r->findings[i].details);
    }
    free(r->findings);
    free(r->ranks);
    json_decref(r->metrics);
    json_decref(r->grad_trace);
    json_decref(r->gate_stats);
    json_decref(r->anomaly);
    json_decref(r->buckets);
    json_decref(r->rank_times);
    json_decref(r->facts);
    json_decref(r->env);
    memset(r, 0, sizeof *r);
}

static Finding *add_finding(CaseResult *r, const char *check, int ok, int verdict, const char *fmt, va_list ap) {
    r->findings = xrealloc(r->findings, sizeof(Finding) * (size_t)(r->n_findings + 1));
    Finding *f = &r->findings[r->n_findings++];
    memset(f, 0, sizeof *f);
    snprintf(f->check, sizeof f->check, "%s", check);
    f->ok = ok;
    f->verdict = verdict;
    Str s = {0};
    str_vprintf(&s, fmt, ap);
    f->summary = str_take(&s);
    return f;
}

Finding *result_finding(CaseResult *r, const char *check, int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    Finding *f = add_finding(r, check, ok, V_PASS, fmt, ap);
    va_end(ap);
    return f;
}

Finding *result_finding_verdict(CaseResult *r, const char *check, int verdict, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    Finding *f = add_finding(r, check, 1, verdict, fmt, ap);
    va_end(ap);
    return f;
}

int result_verdict_of_findings(const CaseResult *r) {
    int v = V_PASS;
    for (int i = 0; i < r->n_findings; i++) {
        const Finding *f = &r->findings[i];
        if (!f->ok) return V_FAIL;
        if (f->verdict == V_ERROR) v = V_ERROR;
        else if (f->verdict == V_SKIP && v != V_ERROR) v = V_SKIP;
    }
    return v;
}

double json_number_or(const json_t *o, const char *key, double def) {
    const json_t *v = json_object_get(o, key);
    if (json_is_number(v)) return json_number_value(v);
    if (json_is_string(v)) return strtod(json_string_value(v), NULL);
    return def;
}

json_t *read_jsonl(const char *path, int *bad) {
    size_t len = 0;
    char *text = read_file(path, &len);
    if (!text) return NULL;
    json_t *arr = json_array();
    int nbad = 0;
    char *save = NULL;
    for (char *ln = strtok_r(text, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
        if (!ln[0]) continue;
        json_t *v = json_loads(ln, 0, NULL);
        if (v && json_is_object(v)) json_array_append_new(arr, v);
        else {
            json_decref(v);
            nbad++;   // a torn last line of a killed run, typically
        }
    }
    free(text);
    if (bad) *bad = nbad;
    return arr;
}

const char *result_rank_host(const CaseResult *r, int k) {
    static __thread char buf[80];
    int several = 0;
    for (int i = 1; i < r->n_ranks && !several; i++)
        several = r->ranks[i].host[0] && r->ranks[0].host[0] && strcmp(r->ranks[i].host, r->ranks[0].host) != 0;
    if (!several || k < 0 || k >= r->n_ranks || !r->ranks[k].host[0]) return "";
    snprintf(buf, sizeof buf, " on %s", r->ranks[k].host);
    return buf;
}
