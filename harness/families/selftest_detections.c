// harness/families/selftest_detections.c — the self-test family's file schema: detections.
//
// A self-test file (scenarios/selftest/, docs/scenarios.md) has its own top
// level: name, description, profiles (with only "run"), run.timeout_s and a list
// of detections. Each detection becomes one case (selftest.c runs it as a nested
// nsa-harness); loading checks every detection and loads the scenario it runs
// for the profile, so that the expected verdicts name cases that exist.
// Registered as the family's `load` hook (selftest.c; the registry: families.c), called by scenario_load.
#define _POSIX_C_SOURCE 200809L
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/scenario_load.h"
#include "harness/families/families.h"

static const char *const SELFTEST_KEYS[] = {"name", "description", "family", "profiles", "run", "detections", NULL};
static const char *const SELFTEST_PROFILE_KEYS[] = {"run", NULL};
static const char *const SELFTEST_RUN_KEYS[] = {"timeout_s", "trainer_cmd", NULL};
static const char *const DETECTION_KEYS[] = {"name", "scenario", "fault", "seeds", "filter", "set", "timeout_s",
                                             "timeout_scale", "profiles", "trainer_cmd", "expect", NULL};
static const char *const EXPECT_KEYS[] = {"exit", "verdicts", "contains", "facts", NULL};
static const char *const VERDICT_WORDS[] = {"PASS", "FAIL", "HANG", "CRASH", "SKIP", "ERROR", NULL};

#define PROBLEM(...) scenario_problem(s, ps, __VA_ARGS__)

static int in_list(const char *const *keys, const char *k) {
    for (int i = 0; keys[i]; i++)
        if (!strcmp(keys[i], k)) return 1;
    return 0;
}

// A detection's "profiles": 1 if it applies to profile p (default: every profile
// the file has), 0 if not, -1 if the list is bad (reported).
static int detection_applies(const Scenario *s, Problems *ps, const json_t *d, const char *dp, int p) {
    const json_t *dprof = json_object_get(d, "profiles");
    if (!dprof) return 1;
    int applies = 0, ok = json_is_array(dprof) && json_array_size(dprof) > 0;
    size_t i;
    json_t *x;
    json_array_foreach(dprof, i, x) {
        int known = 0;
        for (int q = 0; q < PROFILE_COUNT; q++)
            if (json_is_string(x) && !strcmp(json_string_value(x), PROFILE_NAMES[q])) {
                known = 1;
                applies |= q == p;
            }
        ok &= known;
    }
    if (!ok) {
        char kp[1000];
        snprintf(kp, sizeof kp, "%s.profiles", dp);
        PROBLEM(kp, 0, "profiles: expected a non-empty list of \"ci\" / \"gpu\"");
        return -1;
    }
    return applies;
}

// A trainer command (a detection's or the file's run.trainer_cmd, at jpath): a string that
// splits into words (harness/core/trainer_cmd.h).
static void check_trainer_cmd(const Scenario *s, Problems *ps, const json_t *tc, const char *jpath) {
    if (!tc) return;
    StrList words = {0};
    char err[200] = "";
    if (!json_is_string(tc)) PROBLEM(jpath, 0, "trainer_cmd: expected a command line (a string), passed as --trainer-cmd");
    else if (trainer_split_words(json_string_value(tc), &words, err, sizeof err) || !words.n)
        PROBLEM(jpath, 0, "trainer_cmd: %s", err[0] ? err : "the command is empty");
    strlist_free(&words);
}

// How the nested run is made: fault, seeds, set, filter, timeout_scale, timeout_s, trainer_cmd.
static void check_run_keys(const Scenario *s, Problems *ps, const json_t *d, const char *dp) {
    char kp[1000];
    snprintf(kp, sizeof kp, "%s.trainer_cmd", dp);
    check_trainer_cmd(s, ps, json_object_get(d, "trainer_cmd"), kp);
    const json_t *fault = json_object_get(d, "fault"), *seeds = json_object_get(d, "seeds");
    const json_t *sets = json_object_get(d, "set"), *filt = json_object_get(d, "filter");
    if (fault && !json_is_string(fault) && !json_is_array(fault)) {
        snprintf(kp, sizeof kp, "%s.fault", dp);
        PROBLEM(kp, 0, "fault: expected NAME[=ARG] or a list of them");
    }
    size_t i;
    json_t *x;
    json_array_foreach(fault, i, x) if (!json_is_string(x)) {
        snprintf(kp, sizeof kp, "%s.fault[%zu]", dp, i);
        PROBLEM(kp, 0, "fault: expected a string NAME[=ARG]");
    }
    if (seeds && (!json_is_array(seeds) || !json_array_size(seeds))) {
        snprintf(kp, sizeof kp, "%s.seeds", dp);
        PROBLEM(kp, 0, "seeds: expected a non-empty list of integers (one run each, --set train.seed=S)");
    }
    json_array_foreach(seeds, i, x) if (!json_is_integer(x) || json_integer_value(x) < 0) {
        snprintf(kp, sizeof kp, "%s.seeds[%zu]", dp, i);
        PROBLEM(kp, 0, "seeds: expected a non-negative integer");
    }
    if (sets && !json_is_array(sets)) {
        snprintf(kp, sizeof kp, "%s.set", dp);
        PROBLEM(kp, 0, "set: expected a list of \"section.key=value\" strings");
    }
    json_array_foreach(sets, i, x) if (!json_is_string(x) || !strchr(json_string_value(x), '=')) {
        snprintf(kp, sizeof kp, "%s.set[%zu]", dp, i);
        PROBLEM(kp, 0, "set: expected \"section.key=value\"");
    }
    if (filt && !json_is_string(filt) && !(json_is_array(filt) && json_array_size(filt) > 0)) {
        snprintf(kp, sizeof kp, "%s.filter", dp);
        PROBLEM(kp, 0, "filter: expected a case glob (string) or a non-empty list of them");
    }
    if (json_is_array(filt)) json_array_foreach(filt, i, x) if (!json_is_string(x)) {
        snprintf(kp, sizeof kp, "%s.filter[%zu]", dp, i);
        PROBLEM(kp, 0, "filter: expected a case glob (string)");
    }
    const json_t *tsc = json_object_get(d, "timeout_scale");
    if (tsc && (!json_is_number(tsc) || !(json_number_value(tsc) > 0) || json_number_value(tsc) > 1000)) {
        snprintf(kp, sizeof kp, "%s.timeout_scale", dp);
        PROBLEM(kp, 0, "timeout_scale: expected a number > 0 (passed as --timeout-scale, times the outer run's)");
    }
    const json_t *to = json_object_get(d, "timeout_s");
    if (to && (!json_is_number(to) || !(json_number_value(to) > 0))) {
        snprintf(kp, sizeof kp, "%s.timeout_s", dp);
        PROBLEM(kp, 0, "timeout_s: expected a positive number of seconds");
    }
}

// The scenario the detection runs, loaded (its own loader context, no --set) for
// profile p into *nested; 1 if it loads, else 0 (reported at "scenario").
// *adaptive: its family creates cases while running (FamilyDef.execute, GC
// bisection), so having none now is fine and any glob may match later.
static int load_nested(const Scenario *s, Problems *ps, const json_t *sc, const char *dp, int p, Scenario *nested,
                       int *adaptive) {
    char np[2048], kp[1000];
    path_join(np, sizeof np, s->dir, json_string_value(sc));
    Problems nps = {0};
    int ok = scenario_load(nested, np, p, 0, NULL, 0, &nps) == 0;
    const FamilyDef *fam = ok ? family_find(nested->family) : NULL;
    *adaptive = fam && fam->execute;
    snprintf(kp, sizeof kp, "%s.scenario", dp);
    if (!ok) PROBLEM(kp, 0, "scenario %s does not load: %s", np, nps.n ? nps.v[0].text : "?");
    else if (!nested->n_cases && !*adaptive) PROBLEM(kp, 0, "scenario %s has no '%s' profile", np, PROFILE_NAMES[p]);
    problems_free(&nps);
    return ok;
}

// "expect": the verdicts (their globs must match a case of the nested scenario
// when it loaded and its cases are known up front), contains, facts, exit.
static void check_expect(const Scenario *s, Problems *ps, const json_t *ex, const char *dp, const Scenario *nested) {
    char ep[600], kp[1000];
    snprintf(ep, sizeof ep, "%s.expect", dp);
    scenario_check_keys(s, ps, ex, ep, EXPECT_KEYS, "'expect'");
    const json_t *vd = scenario_get_typed(s, ps, ex, ep, "verdicts", JSON_OBJECT, 1, "an object {case glob: verdict}");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)vd, k, v) {
        char vp[800], vp2[900];
        scenario_member_path(vp, sizeof vp, ep, "verdicts");
        scenario_member_path(vp2, sizeof vp2, vp, k);
        if (!json_is_string(v) || !in_list(VERDICT_WORDS, json_string_value(v)))
            PROBLEM(vp2, 0, "expected a verdict: PASS, FAIL, HANG, CRASH, SKIP or ERROR");
        if (nested) {
            int hit = 0;
            for (int c = 0; c < nested->n_cases; c++) hit |= fnmatch(k, nested->cases[c].name, 0) == 0;
            if (!hit) PROBLEM(vp2, 1, "'%s' matches no case of %s", k, nested->path);
        }
    }
    size_t i;
    json_t *x;
    const json_t *ct = json_object_get(ex, "contains");
    if (ct && !json_is_array(ct)) {
        snprintf(kp, sizeof kp, "%s.contains", ep);
        PROBLEM(kp, 0, "contains: expected a list of strings RESULTS.md must contain");
    }
    json_array_foreach(ct, i, x) if (!json_is_string(x)) {
        snprintf(kp, sizeof kp, "%s.contains[%zu]", ep, i);
        PROBLEM(kp, 0, "contains: expected a string");
    }
    const json_t *fa = json_object_get(ex, "facts");
    if (fa && !json_is_object(fa)) {
        snprintf(kp, sizeof kp, "%s.facts", ep);
        PROBLEM(kp, 0, "facts: expected an object {case glob: {fact: value}}");
    }
    const json_t *xc = json_object_get(ex, "exit");
    if (xc && (!json_is_integer(xc) || json_integer_value(xc) < 0 || json_integer_value(xc) > 255)) {
        snprintf(kp, sizeof kp, "%s.exit", ep);
        PROBLEM(kp, 0, "exit: expected the nested run's exit code (0-255)");
    }
}

// The detection's case (named by it, unique), appended to s->cases[*n_cases].
// Its timeout: the detection's, else the profile's run.timeout_s, else the file's, else 600 s.
static void add_detection_case(Scenario *s, Problems *ps, const json_t *d, const char *name, const char *dp, int p,
                               int *n_cases) {
    for (int c = 0; c < *n_cases; c++)
        if (!strcmp(s->cases[c].name, name)) {
            char kp[1000];
            snprintf(kp, sizeof kp, "%s.name", dp);
            PROBLEM(kp, 0, "detection name '%s' is used twice", name);
        }
    Case *c = &s->cases[(*n_cases)++];
    snprintf(c->name, sizeof c->name, "%s", name);
    safe_name(c->dir, sizeof c->dir, c->name);
    c->spec = d;
    c->run.world_size = 1;
    snprintf(c->run.transport, sizeof c->run.transport, "none");
    const json_t *to = json_object_get(d, "timeout_s");
    const json_t *rt = json_object_get(json_object_get(s->root, "run"), "timeout_s");
    const json_t *prt = json_object_get(json_object_get(json_object_get(json_object_get(s->root, "profiles"),
                                                                        PROFILE_NAMES[p]), "run"), "timeout_s");
    c->run.timeout_s = to && json_is_number(to) ? json_number_value(to)
                       : prt && json_is_number(prt) ? json_number_value(prt)
                       : rt && json_is_number(rt) ? json_number_value(rt) : 600;
    c->run.stall_s = c->run.timeout_s;
}

// One detection (its object d at dp): a scenario run (nested nsa-harness) with
// faults and seeds, and what its report must say; validated against the nested
// scenario's cases for profile p.
static void read_detection(Scenario *s, Problems *ps, const json_t *d, const char *dp, int p, int *n_cases) {
    scenario_check_keys(s, ps, d, dp, DETECTION_KEYS, "a detection");
    if (detection_applies(s, ps, d, dp, p) <= 0) return;
    const json_t *nm = scenario_get_typed(s, ps, d, dp, "name", JSON_STRING, 1, "a string");
    const json_t *sc = scenario_get_typed(s, ps, d, dp, "scenario", JSON_STRING, 1, "a path (string)");
    const json_t *ex = scenario_get_typed(s, ps, d, dp, "expect", JSON_OBJECT, 1, "an object");
    check_run_keys(s, ps, d, dp);
    Scenario nested;
    int nested_ok = 0, adaptive = 0;
    if (sc) nested_ok = load_nested(s, ps, sc, dp, p, &nested, &adaptive);
    if (ex) check_expect(s, ps, ex, dp, nested_ok && !adaptive ? &nested : NULL);
    if (nested_ok) scenario_free(&nested);
    if (nm) add_detection_case(s, ps, d, json_string_value(nm), dp, p, n_cases);
}

// name, description, run and profiles; 0 or -1.
static int read_selftest_top_level(Scenario *s, Problems *ps) {
    int before = ps->n;
    scenario_check_keys(s, ps, s->root, "", SELFTEST_KEYS, "a self-test file's top level");
    scenario_read_name(s, ps);
    const json_t *v;
    if ((v = scenario_get_typed(s, ps, s->root, "", "description", JSON_STRING, 1, "a string")))
        s->description = xstrdup(json_string_value(v));
    snprintf(s->family, sizeof s->family, "selftest");
    const json_t *run = scenario_get_typed(s, ps, s->root, "", "run", JSON_OBJECT, 0, "an object");
    if (run) {
        scenario_check_keys(s, ps, run, "run", SELFTEST_RUN_KEYS, "a self-test's 'run'");
        const json_t *t = scenario_get_typed(s, ps, run, "run", "timeout_s", JSON_REAL, 0, "a positive number");
        if (t && !(json_number_value(t) > 0)) PROBLEM("run.timeout_s", 0, "timeout_s: expected a positive number");
        check_trainer_cmd(s, ps, json_object_get(run, "trainer_cmd"), "run.trainer_cmd");
    }
    scenario_read_profiles(s, ps, SELFTEST_PROFILE_KEYS, "a self-test profile");
    return ps->n == before ? 0 : -1;
}

// Every detection for profile p into s->cases (replacing any).
static void expand_detections(Scenario *s, Problems *ps, const json_t *dets, int p) {
    scenario_free_cases(s);
    s->cur_profile = p;
    s->cases = xcalloc(json_array_size(dets) + 1, sizeof(Case));
    int n = 0;
    size_t i;
    json_t *d;
    json_array_foreach(dets, i, d) {
        char dp[64];
        snprintf(dp, sizeof dp, "detections[%zu]", i);
        if (!json_is_object(d)) {
            PROBLEM(dp, 0, "detections[%zu]: expected an object", i);
            continue;
        }
        read_detection(s, ps, d, dp, p, &n);
    }
    s->n_cases = n;
}

int selftest_load(ScenarioLoader *ld) {
    Scenario *s = ld->s;
    Problems *ps = ld->ps;
    int top_ok = read_selftest_top_level(s, ps) == 0;
    const json_t *dets = scenario_get_typed(s, ps, s->root, "", "detections", JSON_ARRAY, 1, "a list of detections");
    if (!top_ok || ps->n != ld->before) return -1;
    if (!json_array_size(dets)) {
        PROBLEM("detections", 0, "detections: name at least one");
        return -1;
    }
    // every other profile first (validation), the selected one last: its cases are kept
    for (int p = 0; p < PROFILE_COUNT; p++)
        if (p != ld->profile && ld->all_profiles && s->has_profile[p]) expand_detections(s, ps, dets, p);
    if (s->has_profile[ld->profile]) expand_detections(s, ps, dets, ld->profile);
    else scenario_free_cases(s);
    s->cur_profile = ld->profile;
    scenario_dedupe_problems(ps, ld->before);
    return ps->n != ld->before ? -1 : 0;
}
