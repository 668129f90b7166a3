// tests/harness/test_registry.c — the registry of named parts (harness/core/registry.h) and the
// two tables it serves: the checks (harness/checks/checks.c) and the families
// (harness/families/families.c). find by exact name, at by index in table order, NULL past the
// end and for an unknown name, the names in table order as every "known: ..." message says
// them; and the callbacks through which the loader and the runner see a check or a family
// (cross-case checks, what a check needs of the trainer, which checks judge wall-clock time,
// the dump tensors a scenario reads, a family's hooks).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness/core/check.h"
#include "harness/core/family.h"
#include "harness/core/registry.h"

// ---- the registry itself, on a table of its own ----------------------------------------------

typedef struct {
    const char *name;
    int value;
} Part;

static const Part ALPHA = {"alpha", 1}, BETA = {"beta", 2}, ALPHA_LONG = {"alpha_long", 3};
static const void *const PARTS[] = {&ALPHA, &BETA, &ALPHA_LONG};

static void registry_find_at_names(void **state) {
    (void)state;
    Registry r = {"part", PARTS, 3, {0}};
    assert_ptr_equal(registry_find(&r, "beta"), &BETA);
    assert_ptr_equal(registry_find(&r, "alpha"), &ALPHA);   // exact, not a prefix of alpha_long
    assert_ptr_equal(registry_find(&r, "alpha_long"), &ALPHA_LONG);
    assert_null(registry_find(&r, "alph"));
    assert_null(registry_find(&r, "gamma"));
    assert_null(registry_find(&r, ""));
    assert_null(registry_find(&r, NULL));
    assert_ptr_equal(registry_at(&r, 0), &ALPHA);
    assert_ptr_equal(registry_at(&r, 2), &ALPHA_LONG);
    assert_null(registry_at(&r, 3));
    assert_null(registry_at(&r, -1));
    assert_string_equal(registry_names(&r), "alpha, beta, alpha_long");
    assert_string_equal(registry_names(&r), "alpha, beta, alpha_long");   // the same text again
    assert_string_equal(registry_name_of(registry_at(&r, 1)), "beta");
    Registry empty = {"part", PARTS, 0, {0}};
    assert_null(registry_find(&empty, "alpha"));
    assert_null(registry_at(&empty, 0));
    assert_string_equal(registry_names(&empty), "");
}

// ---- the checks ------------------------------------------------------------------------------

static const char *const CHECK_ORDER[] = {"finite", "grad_arrival", "gate_init", "loss_decrease", "parity",
                                          "dump_match", "growth", "golden", "perf_floor"};

static void checks_in_table_order(void **state) {
    (void)state;
    const int n = (int)(sizeof CHECK_ORDER / sizeof CHECK_ORDER[0]);
    for (int i = 0; i < n; i++) {
        const CheckDef *d = check_at(i);
        assert_non_null(d);
        assert_string_equal(d->name, CHECK_ORDER[i]);
        assert_ptr_equal(check_find(CHECK_ORDER[i]), d);
        assert_non_null(d->summary);
        assert_true(d->summary[0] != '\0');
        assert_non_null(d->validate);
        assert_non_null(d->evaluate);
    }
    assert_null(check_at(n));
    assert_null(check_at(-1));
    assert_null(check_find("finitee"));
    assert_null(check_find("FINITE"));
    assert_string_equal(check_names(),
                        "finite, grad_arrival, gate_init, loss_decrease, parity, dump_match, growth, golden, perf_floor");
}

static void check_properties(void **state) {
    (void)state;
    // the cross-case checks take a reference
    for (int i = 0; check_at(i); i++) {
        const char *n = check_at(i)->name;
        assert_int_equal(check_at(i)->cross_case, !strcmp(n, "parity") || !strcmp(n, "dump_match"));
    }
    // what they ask of the trainer
    assert_int_equal(check_find("grad_arrival")->needs, NEED_GRAD_TRACE);
    assert_int_equal(check_find("gate_init")->needs, NEED_GATE_STATS);
    assert_int_equal(check_find("dump_match")->needs, NEED_DUMP);
    assert_int_equal(check_find("golden")->needs, NEED_DUMP | NEED_DUMP_ACTS | NEED_GATE_STATS);
    assert_int_equal(check_find("finite")->needs, 0);
    // which judge wall-clock time: perf_floor always, growth of a time metric only
    json_t *ms = json_pack("{s:s}", "metric", "ms"), *tok = json_pack("{s:s}", "metric", "tok_per_s");
    json_t *mem = json_pack("{s:s}", "metric", "mem_bytes"), *none = json_object();
    assert_true(check_judges_time("perf_floor", none));
    assert_true(check_judges_time("growth", ms));
    assert_true(check_judges_time("growth", tok));
    assert_false(check_judges_time("growth", mem));
    assert_false(check_judges_time("growth", none));
    assert_false(check_judges_time("parity", ms));
    assert_false(check_judges_time("finite", none));
    assert_false(check_judges_time("no_such_check", ms));
    assert_false(check_judges_time(NULL, ms));
    json_decref(ms);
    json_decref(tok);
    json_decref(mem);
    json_decref(none);
}

// A scenario of the given checks (their objects in one array), enough for the check queries.
static void scenario_of(Scenario *s, json_t *checks, const char *family) {
    memset(s, 0, sizeof *s);
    snprintf(s->family, sizeof s->family, "%s", family);
    s->n_checks = (int)json_array_size(checks);
    s->checks = calloc((size_t)s->n_checks, sizeof(CheckSpec));
    for (int i = 0; i < s->n_checks; i++) {
        const json_t *c = json_array_get(checks, (size_t)i);
        s->checks[i] = (CheckSpec){check_find(json_string_value(json_object_get(c, "check")))->name, c, i};
    }
}

static void scenario_needs_and_dump_selection(void **state) {
    (void)state;
    Scenario s;
    Str sel = {0};
    // dump_match of gradients only: the dump, not the activations; its globs ("!" ones only narrow)
    json_t *a = json_loads("[{\"check\": \"finite\"}, {\"check\": \"dump_match\", \"reference\": \"x\","
                           " \"tensors\": [\"grads.*\", \"!grads.tok_emb*\", \"logits\", \"grads.*\"]}]", 0, NULL);
    scenario_of(&s, a, "branch_isolation");
    assert_int_equal(checks_needs(&s), NEED_DUMP);
    assert_int_equal(checks_dump_select(&s, &sel), 1);
    assert_string_equal(str_c(&sel), "grads.*,logits");
    free(s.checks);
    // activations asked for: --dump-acts too; the family's own reads are added (ddp_onestep: grads.*)
    json_t *b = json_loads("[{\"check\": \"dump_match\", \"reference\": \"x\", \"tensors\": [\"acts.*\"]}]", 0, NULL);
    scenario_of(&s, b, "ddp_onestep");
    assert_int_equal(checks_needs(&s), NEED_DUMP | NEED_DUMP_ACTS);
    assert_int_equal(checks_dump_select(&s, &sel), 1);
    assert_string_equal(str_c(&sel), "acts.*,grads.*");
    free(s.checks);
    // golden reads the whole dump: no selection
    json_t *c = json_loads("[{\"check\": \"dump_match\", \"reference\": \"x\", \"tensors\": [\"logits\"]},"
                           " {\"check\": \"golden\"}]", 0, NULL);
    scenario_of(&s, c, "golden_regression");
    assert_int_equal(checks_dump_select(&s, &sel), 0);
    assert_int_equal(sel.len, 0);
    free(s.checks);
    // dump_match without tensors, or with "!" globs only, or a glob with a comma: all of it
    const char *whole[] = {"[{\"check\": \"dump_match\", \"reference\": \"x\"}]",
                           "[{\"check\": \"dump_match\", \"reference\": \"x\", \"tensors\": [\"!logits\"]}]",
                           "[{\"check\": \"dump_match\", \"reference\": \"x\", \"tensors\": [\"a,b\"]}]"};
    for (int i = 0; i < 3; i++) {
        json_t *w = json_loads(whole[i], 0, NULL);
        scenario_of(&s, w, "branch_isolation");
        assert_int_equal(checks_dump_select(&s, &sel), 0);
        free(s.checks);
        json_decref(w);
    }
    // no check reads the dump: nothing asked, nothing selected
    json_t *d = json_loads("[{\"check\": \"finite\"}, {\"check\": \"growth\", \"metric\": \"ms\"}]", 0, NULL);
    scenario_of(&s, d, "ddp_onestep");
    assert_int_equal(checks_needs(&s), 0);
    assert_int_equal(checks_dump_select(&s, &sel), 0);
    free(s.checks);
    str_free(&sel);
    json_decref(a);
    json_decref(b);
    json_decref(c);
    json_decref(d);
}

// ---- the families ----------------------------------------------------------------------------

static void families_in_table_order(void **state) {
    (void)state;
    static const char *const order[] = {"branch_isolation", "gate_init", "gc_bisection", "prefill_step5",
                                        "seqlen_nan_sweep", "ddp_onestep", "cross_trainer_parity",
                                        "golden_regression", "perf_floor", "selftest"};
    const int n = (int)(sizeof order / sizeof order[0]);
    for (int i = 0; i < n; i++) {
        const FamilyDef *f = family_at(i);
        assert_non_null(f);
        assert_string_equal(f->name, order[i]);
        assert_ptr_equal(family_find(order[i]), f);
        assert_non_null(f->diagnose);
        assert_non_null(f->section);
    }
    assert_null(family_at(n));
    assert_null(family_find("branch_isolaton"));
    assert_null(family_find(""));
    assert_string_equal(family_names(), "branch_isolation, gate_init, gc_bisection, prefill_step5, seqlen_nan_sweep, "
                                        "ddp_onestep, cross_trainer_parity, golden_regression, perf_floor, selftest");
    // the optional hooks are where they belong, and only there
    for (int i = 0; family_at(i); i++) {
        const FamilyDef *f = family_at(i);
        assert_int_equal(f->execute != NULL, !strcmp(f->name, "gc_bisection"));
        assert_int_equal(f->generated_names != NULL, !strcmp(f->name, "gc_bisection"));
        assert_int_equal(f->load != NULL, !strcmp(f->name, "selftest"));
        assert_int_equal(f->run_case != NULL, !strcmp(f->name, "selftest"));
        assert_int_equal(f->needs != NULL, !strcmp(f->name, "selftest"));
        assert_int_equal(f->dump_reads != NULL, !strcmp(f->name, "ddp_onestep"));
    }
    // the registry's lists are distinct: a check's name is no family's lookup
    assert_null(check_find("gc_bisection"));
    assert_ptr_not_equal((const void *)family_find("perf_floor"), (const void *)check_find("perf_floor"));
    assert_string_equal(family_find("perf_floor")->name, check_find("perf_floor")->name);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(registry_find_at_names),
        cmocka_unit_test(checks_in_table_order),
        cmocka_unit_test(check_properties),
        cmocka_unit_test(scenario_needs_and_dump_selection),
        cmocka_unit_test(families_in_table_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
