// tests/harness/test_result.c — what a case produced and how a run counts its cases
// (harness/core/result.h, harness/core/counts.h): a case's verdict from its findings (a failed
// check beats a check that could not judge, ERROR beats SKIP, none is PASS), findings keep their
// check and text, a finished case found by glob (only among the finished ones), numbers the
// trainer writes as strings, a rank's host named only when ranks ran on several; and the plan's
// and the run's counts, where an adaptive family's base case counts once however many steps it
// ran.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness/core/counts.h"
#include "harness/core/result.h"

static Scenario g_s;
static Case g_c;

static void verdict_of_findings(void **state) {
    (void)state;
    CaseResult r;
    result_init(&r, &g_s, &g_c);
    assert_int_equal(result_verdict_of_findings(&r), V_PASS);   // nothing found: PASS
    result_finding(&r, "finite", 1, "all %d steps finite", 3);
    assert_int_equal(result_verdict_of_findings(&r), V_PASS);
    assert_string_equal(r.findings[0].check, "finite");
    assert_string_equal(r.findings[0].summary, "all 3 steps finite");
    result_finding_verdict(&r, "golden", V_SKIP, "no baseline");
    assert_int_equal(result_verdict_of_findings(&r), V_SKIP);
    result_finding_verdict(&r, "perf_floor", V_ERROR, "another config");
    assert_int_equal(result_verdict_of_findings(&r), V_ERROR);
    result_finding_verdict(&r, "golden", V_SKIP, "no baseline again");   // a later SKIP does not hide the ERROR
    assert_int_equal(result_verdict_of_findings(&r), V_ERROR);
    Finding *f = result_finding(&r, "parity", 0, "step %d differs", 2);
    str_add(&f->details, "details");
    assert_int_equal(result_verdict_of_findings(&r), V_FAIL);   // a failed check beats them all
    assert_int_equal(r.n_findings, 5);
    assert_string_equal(r.findings[4].summary, "step 2 differs");
    assert_string_equal(str_c(&r.findings[4].details), "details");
    result_free(&r);
    assert_int_equal(r.n_findings, 0);
    assert_null(r.findings);
    assert_string_equal(VERDICT_NAMES[V_PENDING], "PENDING");
}

static void run_find_among_finished(void **state) {
    (void)state;
    Case cases[3];
    memset(cases, 0, sizeof cases);
    snprintf(cases[0].name, sizeof cases[0].name, "ckpt=off");
    snprintf(cases[1].name, sizeof cases[1].name, "ckpt=on");
    snprintf(cases[2].name, sizeof cases[2].name, "ckpt=on,layers=0-1");
    CaseResult res[3];
    for (int i = 0; i < 3; i++) result_init(&res[i], &g_s, &cases[i]);
    ScenarioRun sr = {.s = &g_s, .results = res, .n = 3, .cap = 3, .done = 2};
    assert_ptr_equal(scenario_run_find(&sr, "ckpt=off"), &res[0]);
    assert_ptr_equal(scenario_run_find(&sr, "ckpt=on*"), &res[1]);   // the first match
    assert_null(scenario_run_find(&sr, "*layers*"));                  // not finished yet
    sr.done = 3;
    assert_ptr_equal(scenario_run_find(&sr, "*layers*"), &res[2]);
    assert_null(scenario_run_find(&sr, "ckpt"));                       // a glob, not a prefix
    for (int i = 0; i < 3; i++) result_free(&res[i]);
}

static void numbers_and_hosts(void **state) {
    (void)state;
    json_t *o = json_pack("{s:f,s:i,s:s,s:s,s:s}", "a", 1.5, "b", 3, "c", "nan", "d", "-inf", "e", "x");
    assert_true(json_number_or(o, "a", 0) == 1.5);
    assert_true(json_number_or(o, "b", 0) == 3);
    assert_true(isnan(json_number_or(o, "c", 0)));
    assert_true(isinf(json_number_or(o, "d", 0)) && json_number_or(o, "d", 0) < 0);
    assert_true(json_number_or(o, "missing", 7) == 7);
    json_decref(o);
    CaseResult r;
    result_init(&r, &g_s, &g_c);
    RankResult ranks[2];
    memset(ranks, 0, sizeof ranks);
    snprintf(ranks[0].host, sizeof ranks[0].host, "node-a");
    snprintf(ranks[1].host, sizeof ranks[1].host, "node-a");
    r.ranks = ranks;
    r.n_ranks = 2;
    assert_string_equal(result_rank_host(&r, 1), "");   // one host: not worth naming
    snprintf(ranks[1].host, sizeof ranks[1].host, "node-b");
    assert_string_equal(result_rank_host(&r, 1), " on node-b");
    assert_string_equal(result_rank_host(&r, 0), " on node-a");
    assert_string_equal(result_rank_host(&r, 2), "");
    r.ranks = NULL;
    result_free(&r);
}

static void counts_of_a_plan_and_a_run(void **state) {
    (void)state;
    Scenario s[3];
    memset(s, 0, sizeof s);
    snprintf(s[0].name, sizeof s[0].name, "branch");
    snprintf(s[0].family, sizeof s[0].family, "branch_isolation");
    snprintf(s[1].name, sizeof s[1].name, "gcb");
    snprintf(s[1].family, sizeof s[1].family, "gc_bisection");   // adaptive: an execute hook
    snprintf(s[2].name, sizeof s[2].name, "none_selected");
    snprintf(s[2].family, sizeof s[2].family, "gate_init");
    ScenarioRun runs[3];
    memset(runs, 0, sizeof runs);
    runs[0] = (ScenarioRun){.s = &s[0], .n = 4};
    runs[1] = (ScenarioRun){.s = &s[1], .n = 1, .planned_bases = 1};
    runs[2] = (ScenarioRun){.s = &s[2], .n = 0};
    Str out = {0};
    int n_scen = -1;
    assert_int_equal(counts_planned(runs, 3, &n_scen, &out), 5);
    assert_int_equal(n_scen, 2);   // a scenario with no case selected is not counted
    assert_string_equal(str_c(&out), "5 cases (+ gcb's bisection steps) in 2 scenarios");
    str_free(&out);
    assert_int_equal(counts_steps(runs, 3, &out), 0);   // not more steps than bases yet
    assert_int_equal(out.len, 0);
    runs[1].n = 3;   // the bisection made two more cases
    assert_int_equal(counts_planned(runs, 3, NULL, NULL), 5);   // the plan does not change
    assert_int_equal(counts_steps(runs, 3, &out), 2);
    assert_string_equal(str_c(&out), "; gcb's 1 ran as 3 bisection steps");
    str_free(&out);
    // a family without an execute hook counts every case it has
    runs[0].n = 1;
    runs[1].n = 0;
    runs[1].planned_bases = 0;
    assert_int_equal(counts_planned(runs, 3, &n_scen, &out), 1);
    assert_string_equal(str_c(&out), "1 case in 1 scenario");
    str_free(&out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(verdict_of_findings),
        cmocka_unit_test(run_find_among_finished),
        cmocka_unit_test(numbers_and_hosts),
        cmocka_unit_test(counts_of_a_plan_and_a_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
