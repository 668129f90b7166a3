// harness/report/report_in.c — see report_in.h.
#define _POSIX_C_SOURCE 200809L
#include "harness/report/report_in.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/result.h"
#include "common/jsonpos.h"
#include "common/util.h"

// "FILE:line:col: key: message" at a JSON path of the summary ("FILE: key: message" when
// the path is not found); the key is "summary" for the root. Returns -1.
static int problem(const ReportIn *r, const char *jpath, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int problem(const ReportIn *r, const char *jpath, char *err, size_t errlen, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line = 0, col = 0;
    const char *key = jpath[0] ? jpath : "summary";
    if (r->text && jsonpos_find(r->text, jpath, 0, &line, &col) == 0)
        set_err(err, errlen, "%s:%d:%d: %s: %s", r->summary, line, col, key, msg);
    else set_err(err, errlen, "%s: %s: %s", r->summary, key, msg);
    return -1;
}

static int is_verdict_name(const char *v) {
    for (int i = 0; i < V_COUNT; i++)
        if (!strcmp(v, VERDICT_NAMES[i])) return 1;
    return 0;
}

// What a value is, for "expected a string, got an object".
static const char *kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

typedef enum { T_STRING, T_BOOL, T_INT, T_NUMBER, T_OBJECT, T_ARRAY, T_INT_OR_NULL, T_OBJECT_OR_NULL } Want;
static const char *const WANT_TEXT[] = {"a string", "true or false", "an integer", "a number", "an object", "an array",
                                        "an integer or null", "an object or null"};

static int type_ok(const json_t *v, Want w) {
    switch (w) {
    case T_STRING: return json_is_string(v);
    case T_BOOL: return json_is_boolean(v);
    case T_INT: return json_is_integer(v);
    case T_NUMBER: return json_is_number(v);
    case T_OBJECT: return json_is_object(v);
    case T_ARRAY: return json_is_array(v);
    case T_INT_OR_NULL: return json_is_integer(v) || json_is_null(v);
    case T_OBJECT_OR_NULL: return json_is_object(v) || json_is_null(v);
    }
    return 0;
}

// o[key], when present, of the wanted type; required: present too. 0 or -1 (err).
static int check_key(const ReportIn *r, const json_t *o, const char *base, const char *key, Want w, int required,
                     char *err, size_t errlen) {
    const json_t *v = json_object_get(o, key);
    char jp[300];
    if (!v) {
        if (!required) return 0;
        return problem(r, base, err, errlen, "\"%s\" is missing (%s)", key, WANT_TEXT[w]);
    }
    if (type_ok(v, w)) return 0;
    snprintf(jp, sizeof jp, "%s%s%s", base, base[0] ? "." : "", key);
    return problem(r, jp, err, errlen, "expected %s, got %s", WANT_TEXT[w], kind(v));
}

// The keys a reader takes from each case.
static int check_cases(const ReportIn *r, char *err, size_t errlen) {
    size_t i;
    json_t *c;
    char jp[64];
    json_array_foreach(r->cases, i, c) {
        snprintf(jp, sizeof jp, "cases[%zu]", i);
        if (!json_is_object(c)) return problem(r, jp, err, errlen, "expected an object (a case), got %s", kind(c));
        static const char *const strings[] = {"scenario", "case", "dir"};
        for (int k = 0; k < 3; k++)
            if (check_key(r, c, jp, strings[k], T_STRING, 1, err, errlen)) return -1;
        const json_t *v = json_object_get(c, "verdict");
        if (v && !json_is_null(v) && !(json_is_string(v) && is_verdict_name(json_string_value(v)))) {
            snprintf(jp, sizeof jp, "cases[%zu].verdict", i);
            return problem(r, jp, err, errlen, "expected PASS, FAIL, HANG, CRASH, SKIP, ERROR, PENDING or null (not run)");
        }
        if (check_key(r, c, jp, "facts", T_OBJECT, 0, err, errlen) || check_key(r, c, jp, "summary", T_STRING, 0, err, errlen) ||
            check_key(r, c, jp, "ran", T_BOOL, 0, err, errlen))
            return -1;
    }
    return 0;
}

// The top level's other keys, where present, as report.c writes them.
static int check_top(const ReportIn *r, char *err, size_t errlen) {
    static const struct { const char *key; Want w; } keys[] = {
        {"started", T_STRING},  {"finished", T_BOOL},   {"interrupted", T_BOOL},  {"cases_done", T_INT},
        {"cases_total", T_INT}, {"wall_s", T_NUMBER},   {"git", T_OBJECT},        {"profile", T_STRING},
        {"faults", T_STRING},   {"command", T_STRING},  {"device", T_STRING},     {"exit_code", T_INT_OR_NULL},
        {"counts", T_OBJECT},   {"invalid_scenarios", T_ARRAY}, {"disk_full", T_OBJECT_OR_NULL}};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (check_key(r, r->root, "", keys[k].key, keys[k].w, 0, err, errlen)) return -1;
    const json_t *git = json_object_get(r->root, "git");
    if (git && (check_key(r, git, "git", "sha", T_STRING, 0, err, errlen) || check_key(r, git, "git", "dirty", T_BOOL, 0, err, errlen)))
        return -1;
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(r->root, "counts"), k, v) if (!json_is_integer(v)) {
        char jp[300];
        snprintf(jp, sizeof jp, "counts.%s", k);
        return problem(r, jp, err, errlen, "expected an integer, got %s", kind(v));
    }
    size_t i;
    json_array_foreach(json_object_get(r->root, "invalid_scenarios"), i, v) {
        char jp[64];
        snprintf(jp, sizeof jp, "invalid_scenarios[%zu]", i);
        if (!json_is_object(v)) return problem(r, jp, err, errlen, "expected an object, got %s", kind(v));
        if (check_key(r, v, jp, "file", T_STRING, 1, err, errlen) || check_key(r, v, jp, "problems", T_ARRAY, 0, err, errlen))
            return -1;
    }
    return 0;
}

int report_in_load(ReportIn *r, const char *arg, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    r->arg = arg;
    if (is_dir(arg)) {
        snprintf(r->dir, sizeof r->dir, "%s", arg);
        path_join(r->summary, sizeof r->summary, arg, "summary.json");
        if (!file_exists(r->summary)) {
            set_err(err, errlen, "report folder %s has no summary.json (not written by nsa-harness run?)", arg);
            return -1;
        }
    } else if (file_exists(arg)) {
        snprintf(r->summary, sizeof r->summary, "%s", arg);
        path_dirname(arg, r->dir, sizeof r->dir);
    } else {
        set_err(err, errlen, "%s: no such report folder or summary.json", arg);
        return -1;
    }
    size_t len = 0;
    char why[300];
    r->text = read_file_limited(r->summary, 0, 0, &len, why, sizeof why);
    if (!r->text) {
        set_err(err, errlen, "%s: %s", r->summary, why);
        return -1;
    }
    json_error_t je;
    r->root = json_loadb(r->text, len, JSON_REJECT_DUPLICATES, &je);
    if (!r->root) {
        if (je.line > 0) set_err(err, errlen, "%s:%d:%d: %s", r->summary, je.line, je.column, je.text);
        else set_err(err, errlen, "%s: %s", r->summary, je.text);
        return -1;
    }
    const json_t *fmt = json_object_get(r->root, "format");
    if (!json_is_object(r->root))
        return problem(r, "", err, errlen, "expected a report summary (an object with \"format\": \"" SUMMARY_FORMAT "\"), got %s",
                       kind(r->root));
    if (!fmt) return problem(r, "", err, errlen, "not a report summary: no \"format\" (expected \"format\": \"" SUMMARY_FORMAT "\")");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), SUMMARY_FORMAT)) {
        char *got = json_dumps(fmt, JSON_COMPACT | JSON_ENCODE_ANY);
        problem(r, "format", err, errlen, "not a report summary: expected \"" SUMMARY_FORMAT "\", got %.80s%s",
                got ? got : "?", got && strlen(got) > 80 ? "…" : "");
        free(got);
        return -1;
    }
    r->cases = json_object_get(r->root, "cases");
    if (!r->cases) return problem(r, "", err, errlen, "\"cases\" is missing (an array of cases)");
    if (!json_is_array(r->cases)) return problem(r, "cases", err, errlen, "expected an array, got %s", kind(r->cases));
    return check_cases(r, err, errlen) || check_top(r, err, errlen) ? -1 : 0;
}

void report_in_free(ReportIn *r) {
    json_decref(r->root);
    free(r->text);
    r->root = NULL;
    r->text = NULL;
}

const char *report_in_str(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}
