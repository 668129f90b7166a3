// tests/harness/test_scenario.c — a scenario file loaded, validated and expanded
// (harness/core/scenario_load.h, harness/core/scenario.h): the matrix's cartesian product in
// axis order, the last axis fastest, with a profile's axes replacing or adding to the top
// level's and its overrides applied to every case; each case's config resolved by the trainer's
// config loader; a case derived from another; and the bad files of tests/bad_scenarios/, each
// problem as `file:line:col: message` at the place it names, the unknown check and family
// listing the registries' names.
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness/core/scenario.h"
#include "harness/core/scenario_load.h"

static char g_dir[256];

// Write text to g_dir/name, with "@CONFIG@" replaced by the absolute path of configs/tiny.json.
static const char *write_scenario(const char *name, const char *text) {
    static char path[512];
    char cwd[256], config[400];
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(config, sizeof config, "%s/configs/tiny.json", cwd);
    Str s = {0};
    for (const char *p = text; *p;) {
        const char *at = strstr(p, "@CONFIG@");
        if (!at) {
            str_add(&s, p);
            break;
        }
        str_printf(&s, "%.*s%s", (int)(at - p), p, config);
        p = at + 8;
    }
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(str_c(&s), f);
    fclose(f);
    str_free(&s);
    return path;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/nsa_test_scenario_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *const MATRIX =
    "{\n"
    "  \"name\": \"m\",\n"
    "  \"description\": \"a matrix\",\n"
    "  \"family\": \"seqlen_nan_sweep\",\n"
    "  \"config\": \"@CONFIG@\",\n"
    "  \"overrides\": {\"train.steps\": 1},\n"
    "  \"profiles\": {\n"
    "    \"ci\": {},\n"
    "    \"gpu\": {\"overrides\": {\"train.steps\": 3},\n"
    "            \"matrix\": {\"T\": {\"key\": \"train.seq_len\", \"values\": [32, 64, 128]},\n"
    "                       \"layers\": {\"key\": \"model.n_layers\", \"values\": [1, 2]}}}\n"
    "  },\n"
    "  \"matrix\": {\n"
    "    \"T\": {\"key\": \"train.seq_len\", \"values\": [32, 64]},\n"
    "    \"precision\": {\"values\": {\"fp32\": {\"train.backend\": \"cpu\"}, \"fp64\": {\"train.backend\": \"cpu64\"}}}\n"
    "  },\n"
    "  \"checks\": [{\"check\": \"finite\"}]\n"
    "}\n";

static void matrix_expands_in_axis_order(void **state) {
    (void)state;
    const char *path = write_scenario("matrix.json", MATRIX);
    Scenario s;
    Problems ps = {0};
    assert_int_equal(scenario_load(&s, path, PROFILE_CI, 1, NULL, 0, &ps), 0);
    assert_int_equal(ps.n, 0);
    assert_string_equal(s.name, "m");
    assert_string_equal(s.family, "seqlen_nan_sweep");
    assert_int_equal(s.n_axes, 2);
    assert_string_equal(s.axes[0].name, "T");
    assert_string_equal(s.axes[1].name, "precision");
    assert_int_equal(s.n_cases, 4);
    static const char *const names[] = {"T=32,precision=fp32", "T=32,precision=fp64", "T=64,precision=fp32",
                                        "T=64,precision=fp64"};
    for (int c = 0; c < 4; c++) {
        assert_string_equal(s.cases[c].name, names[c]);
        assert_int_equal(s.cases[c].cfg.seq_len, c < 2 ? 32 : 64);
        assert_string_equal(s.cases[c].cfg.backend, c % 2 ? "cpu64" : "cpu");
        assert_int_equal(s.cases[c].cfg.steps, 1);
        assert_string_equal(s.cases[c].labels[0], c < 2 ? "32" : "64");
    }
    assert_int_equal(s.n_checks, 1);
    assert_string_equal(s.checks[0].kind, "finite");
    assert_true(scenario_case_matches(&s.cases[1], "*precision=fp64"));
    assert_false(scenario_case_matches(&s.cases[0], "*precision=fp64"));
    scenario_free(&s);
    problems_free(&ps);
}

static void a_profile_replaces_and_adds_axes(void **state) {
    (void)state;
    const char *path = write_scenario("matrix.json", MATRIX);
    Scenario s;
    Problems ps = {0};
    assert_int_equal(scenario_load(&s, path, PROFILE_GPU, 0, NULL, 0, &ps), 0);
    // T replaced in place (3 values), precision kept, layers added last: 3 x 2 x 2
    assert_int_equal(s.n_axes, 3);
    assert_string_equal(s.axes[2].name, "layers");
    assert_int_equal(s.n_cases, 12);
    assert_string_equal(s.cases[0].name, "T=32,precision=fp32,layers=1");
    assert_string_equal(s.cases[1].name, "T=32,precision=fp32,layers=2");
    assert_string_equal(s.cases[11].name, "T=128,precision=fp64,layers=2");
    for (int c = 0; c < 12; c++) {
        assert_int_equal(s.cases[c].cfg.steps, 3);   // the profile's override
        assert_int_equal(s.cases[c].cfg.n_layers, c % 2 ? 2 : 1);
        static const int T[] = {32, 64, 128};
        assert_int_equal(s.cases[c].cfg.seq_len, T[c / 4]);
    }
    // --set overrides come after the scenario's own, in every case
    scenario_free(&s);
    const char *sets[] = {"train.steps=7"};
    assert_int_equal(scenario_load(&s, path, PROFILE_GPU, 0, sets, 1, &ps), 0);
    for (int c = 0; c < s.n_cases; c++) assert_int_equal(s.cases[c].cfg.steps, 7);
    scenario_free(&s);
    problems_free(&ps);
}

static void a_derived_case(void **state) {
    (void)state;
    const char *path = write_scenario("matrix.json", MATRIX);
    Scenario s;
    Problems ps = {0};
    assert_int_equal(scenario_load(&s, path, PROFILE_CI, 0, NULL, 0, &ps), 0);
    Override extra = {"model.n_layers", "1", 0, 0};
    Case d;
    char err[512] = "";
    assert_int_equal(scenario_derive_case(&s, &s.cases[3], "T=64,precision=fp64,one", &extra, 1, &d, err, sizeof err), 0);
    assert_string_equal(d.name, "T=64,precision=fp64,one");
    assert_int_equal(d.cfg.n_layers, 1);
    assert_int_equal(d.cfg.seq_len, 64);            // the base's overrides, then the extra ones
    assert_string_equal(d.cfg.backend, "cpu64");
    assert_int_equal(d.n_ov, s.cases[3].n_ov + 1);
    scenario_case_free(&d, s.n_axes);
    Override bad = {"train.steps", "0", 0, 0};
    assert_int_not_equal(scenario_derive_case(&s, &s.cases[0], "bad", &bad, 1, &d, err, sizeof err), 0);
    assert_non_null(strstr(err, "train.steps"));
    assert_null(strchr(err, '\n'));
    scenario_case_free(&d, s.n_axes);
    scenario_free(&s);
    problems_free(&ps);
}

// Load a file of tests/bad_scenarios/ (every profile, as `validate` does): it must fail with
// exactly the problems given, in order.
static void expect_problems(const char *file, const char *const *want, int n_want) {
    char path[256];
    snprintf(path, sizeof path, "tests/bad_scenarios/%s", file);
    Scenario s;
    Problems ps = {0};
    assert_int_equal(scenario_load(&s, path, PROFILE_CI, 1, NULL, 0, &ps), -1);
    problems_sort(&ps);
    if (ps.n != n_want)
        for (int i = 0; i < ps.n; i++) print_message("problem %d: %s\n", i, ps.v[i].text);
    assert_int_equal(ps.n, n_want);
    for (int i = 0; i < n_want; i++) {
        char full[600];
        snprintf(full, sizeof full, "%s:%s", path, want[i]);
        assert_string_equal(ps.v[i].text, full);
    }
    problems_free(&ps);
}

static void bad_files_name_the_place(void **state) {
    (void)state;
    expect_problems("unknown_check.json",
                    (const char *[]){"7:45: unknown check 'finitee' (known: finite, grad_arrival, gate_init, "
                                     "loss_decrease, parity, dump_match, growth, golden, perf_floor)"},
                    1);
    expect_problems("unknown_family.json",
                    (const char *[]){"4:13: unknown family 'branch_isolaton' (known: branch_isolation, gate_init, "
                                     "gc_bisection, prefill_step5, seqlen_nan_sweep, ddp_onestep, cross_trainer_parity, "
                                     "golden_regression, perf_floor, selftest)"},
                    1);
    expect_problems("syntax_error.json", (const char *[]){"7:10: '}' expected near '\"checks\"'"}, 1);
    expect_problems("override_rejected.json", (const char *[]){"6:44: nsa.w: expected a positive integer, got 0"}, 1);
    expect_problems("profile_override_rejected.json",
                    (const char *[]){"6:68: train.batch_size: expected a positive integer, got -1 (profile gpu)"}, 1);
    expect_problems("check_bad_param.json",
                    (const char *[]){"7:55: min_output_std: expected a number in (0, 1], got -1"}, 1);
    expect_problems("missing_checks.json",
                    (const char *[]){"1:1: missing required key 'checks' (a list of checks; see docs/scenarios.md)"}, 1);
    expect_problems("wrong_type_name.json", (const char *[]){"2:11: name: expected a string, got integer 5"}, 1);
    expect_problems("trainers_bad.json",
                    (const char *[]){"6:24: trainers: 'nsa-train' is reserved: it is the run's default trainer (the "
                                     "nsa-train beside nsa-harness, --trainer, --trainer-cmd or --trainer-map)",
                                     "7:29: trainers.q: unterminated ' quote at byte 9",
                                     "8:29: trainers.e: the command is empty"},
                    3);
}

// A check's own parameters are validated by the check, at their position in the file.
static void a_checks_parameters_are_its_own(void **state) {
    (void)state;
    const char *path = write_scenario("params.json",
                                      "{\"name\": \"p\", \"description\": \"d\", \"family\": \"prefill_step5\",\n"
                                      " \"config\": \"@CONFIG@\", \"profiles\": {\"ci\": {}},\n"
                                      " \"checks\": [{\"check\": \"finite\"},\n"
                                      "            {\"check\": \"parity\", \"reference\": \"nothing*\"},\n"
                                      "            {\"check\": \"growth\", \"metric\": \"ms\", \"colour\": 1}]}\n");
    Scenario s;
    Problems ps = {0};
    assert_int_equal(scenario_load(&s, path, PROFILE_CI, 0, NULL, 0, &ps), -1);
    problems_sort(&ps);
    // parity's reference must match a case; growth needs a threshold and knows no "colour"
    static const char *const want[] = {
        "4:46: reference 'nothing*' matches 0 cases of this scenario; it must match exactly one",
        "5:13: growth needs \"max_ratio\" (relative growth) and/or \"max_bytes\"",
        "5:49: unknown key 'colour' for check 'growth' (known: metric, skip, window, max_ratio, max_bytes)"};
    if (ps.n != 3)
        for (int i = 0; i < ps.n; i++) print_message("problem %d: %s\n", i, ps.v[i].text);
    assert_int_equal(ps.n, 3);
    for (int i = 0; i < 3; i++) {
        char full[700];
        snprintf(full, sizeof full, "%s:%s", path, want[i]);
        assert_string_equal(ps.v[i].text, full);
    }
    problems_free(&ps);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matrix_expands_in_axis_order),
        cmocka_unit_test(a_profile_replaces_and_adds_axes),
        cmocka_unit_test(a_derived_case),
        cmocka_unit_test(bad_files_name_the_place),
        cmocka_unit_test(a_checks_parameters_are_its_own),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
