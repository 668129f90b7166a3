// harness/checks/gate_init.c — the `gate_init` check: the gate starts neither zero nor uniform
// (gate_stats.jsonl: fc2's initial spread against Xavier, the gate outputs per layer and branch).
#define _POSIX_C_SOURCE 200809L

#include "harness/checks/checks.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const GATE_KEYS[] = {"check", "step", "fc2_gain", "fc2_std_tolerance", "min_output_std", NULL};

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

const CheckDef check_gate_init = {
    .name = "gate_init",
    .summary = "gate fc2 init matches Xavier(gain), gate outputs not uniform/collapsed per layer and branch",
    .needs = NEED_GATE_STATS,
    .validate = gate_validate,
    .evaluate = gate_evaluate,
};
