// harness/core/scenario_load.c — a scenario file loaded (see scenario_load.h): its top level, its
// checks against the registry of checks (harness/core/check.h) and its family against the
// registry of families (harness/core/family.h), then every profile expanded into cases
// (harness/core/scenario.c) and each check's parameters validated by the check.
//
// A family whose files have a schema of their own registers a load hook in the
// family table (FamilyDef.load: the self-test, harness/families/selftest_detections.c);
// scenario_load hands such a file to it.
#define _POSIX_C_SOURCE 200809L
#include "harness/core/scenario_load.h"

#include <stdio.h>
#include <string.h>

#include "harness/core/check.h"
#include "harness/core/family.h"

static const char *const TOP_KEYS[] = {"name", "description", "family", "config", "overrides",
                                       "run", "profiles", "matrix", "exclude", "checks", NULL};
static const char *const PROFILE_KEYS[] = {"config", "overrides", "run", "matrix", "exclude", "requires", NULL};

#define PROBLEM(...) scenario_problem(s, ps, __VA_ARGS__)

static void read_checks(Scenario *s, Problems *ps) {
    const json_t *checks = json_object_get(s->root, "checks");
    if (!checks) {
        PROBLEM("", 0, "missing required key 'checks' (a list of checks; see docs/scenarios.md)");
        return;
    }
    if (!json_is_array(checks) || json_array_size(checks) == 0) {
        char got[96];
        scenario_describe(checks, got, sizeof got);
        PROBLEM("checks", 0, "checks: expected a non-empty array of check objects, got %s", got);
        return;
    }
    s->checks = xcalloc(json_array_size(checks), sizeof(CheckSpec));
    size_t i;
    json_t *c;
    json_array_foreach(checks, i, c) {
        char cp[64];
        snprintf(cp, sizeof cp, "checks[%zu]", i);
        if (!json_is_object(c)) {
            char got[96];
            scenario_describe(c, got, sizeof got);
            PROBLEM(cp, 0, "checks[%zu]: expected an object {\"check\": NAME, ...}, got %s", i, got);
            continue;
        }
        const json_t *k = json_object_get(c, "check");
        char kp[96];
        snprintf(kp, sizeof kp, "%s.check", cp);
        if (!k || !json_is_string(k)) {
            PROBLEM(k ? kp : cp, 0, "checks[%zu]: needs \"check\": the name of a check (%s)", i, check_names());
            continue;
        }
        const CheckDef *def = check_find(json_string_value(k));
        if (!def) {
            PROBLEM(kp, 0, "unknown check '%s' (known: %s)", json_string_value(k), check_names());
            continue;
        }
        s->checks[s->n_checks++] = (CheckSpec){def->name, c, (int)i};
    }
}

static void validate_checks(Scenario *s, Problems *ps) {
    for (int i = 0; i < s->n_checks; i++) {
        char cp[64];
        snprintf(cp, sizeof cp, "checks[%d]", s->checks[i].index);
        const CheckDef *def = check_find(s->checks[i].kind);
        def->validate(s, s->checks[i].params, cp, ps);
    }
}

// The scenario schema's top level: name, description, family, the types of
// config/overrides/run/matrix (their contents are read per profile), profiles, checks.
static void read_top_level(Scenario *s, Problems *ps) {
    const json_t *v;
    scenario_check_keys(s, ps, s->root, "", TOP_KEYS, "the scenario's top level");
    scenario_read_name(s, ps);
    if ((v = scenario_get_typed(s, ps, s->root, "", "description", JSON_STRING, 1, "a string"))) {
        if (!json_string_value(v)[0]) PROBLEM("description", 0, "description: say what the scenario proves");
        s->description = xstrdup(json_string_value(v));
    }
    if ((v = scenario_get_typed(s, ps, s->root, "", "family", JSON_STRING, 1, "a string"))) {
        if (!family_find(json_string_value(v)))
            PROBLEM("family", 0, "unknown family '%s' (known: %s)", json_string_value(v), family_names());
        else snprintf(s->family, sizeof s->family, "%s", json_string_value(v));
    }
    scenario_get_typed(s, ps, s->root, "", "config", JSON_STRING, 0, "a path (string)");
    scenario_get_typed(s, ps, s->root, "", "overrides", JSON_OBJECT, 0, "an object of \"section.key\": value");
    scenario_get_typed(s, ps, s->root, "", "run", JSON_OBJECT, 0, "an object");
    scenario_get_typed(s, ps, s->root, "", "matrix", JSON_OBJECT, 0, "an object of axes");
    scenario_read_profiles(s, ps, PROFILE_KEYS, "a profile");
    read_checks(s, ps);
}

// A file of the scenario schema; 0 or -1.
static int load_scenario_schema(ScenarioLoader *ld) {
    Scenario *s = ld->s;
    Problems *ps = ld->ps;
    read_top_level(s, ps);
    if (ps->n != ld->before) {   // structural problems: expansion would only add noise
        scenario_dedupe_problems(ps, ld->before);
        return -1;
    }
    Str seen = {0};
    // expand every profile the file has (validate) or just the selected one; the
    // selected profile goes last so its cases are the ones kept
    for (int p = 0; p < PROFILE_COUNT; p++) {
        if (p == ld->profile || !ld->all_profiles || !s->has_profile[p]) continue;
        if (scenario_expand_profile(ld, p, &seen) == 0) validate_checks(s, ps);
    }
    if (s->has_profile[ld->profile]) {
        if (scenario_expand_profile(ld, ld->profile, &seen) == 0) validate_checks(s, ps);
    } else {
        scenario_free_cases(s);
    }
    str_free(&seen);
    scenario_dedupe_problems(ps, ld->before);
    return ps->n != ld->before ? -1 : 0;
}

int scenario_load(Scenario *s, const char *path, int profile, int all_profiles, const char *const *sets,
                  int n_sets, Problems *ps) {
    memset(s, 0, sizeof *s);
    s->profile = profile;
    ScenarioLoader ld = {.s = s, .ps = ps, .profile = profile, .all_profiles = all_profiles, .sets = sets,
                         .n_sets = n_sets, .before = ps->n};
    int rc = scenario_open(s, path, ps);
    if (rc == 0) {
        // a family with a file schema of its own loads it (the self-test's detections)
        const json_t *fam = json_object_get(s->root, "family");
        const FamilyDef *def = json_is_string(fam) ? family_find(json_string_value(fam)) : NULL;
        rc = def && def->load ? def->load(&ld) : load_scenario_schema(&ld);
    }
    if (rc) scenario_free(s);
    return rc;
}

