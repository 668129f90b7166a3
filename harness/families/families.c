// harness/families/families.c — the family table (see families.h): per family, the
// decision tree that turns the cases' findings into a diagnosis, and the report
// section with its tables and plots.
#define _POSIX_C_SOURCE 200809L
#include "harness/core/home.h"
#include "harness/core/family.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/nsa_names.h"
#include "harness/families/families.h"
#include "harness/report/plot.h"
#include "harness/artifacts/pystack.h"

// ---- helpers ------------------------------------------------------------------------------

static int count_verdict(const ScenarioRun *sr, int v) {
    int n = 0;
    for (int i = 0; i < sr->n; i++) n += sr->results[i].verdict == v;
    return n;
}

// The label of case i on the axis named `axis`, or NULL.
const char *family_label_on(const ScenarioRun *sr, int i, const char *axis) {
    for (int a = 0; a < sr->s->n_axes; a++)
        if (!strcmp(sr->s->axes[a].name, axis)) return sr->results[i].c->labels[a];
    return NULL;
}

void family_names_list(Str *s, const json_t *arr, int max) {
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
        if ((int)i == max) {
            str_printf(s, ", … (%zu more)", json_array_size(arr) - i);
            return;
        }
        if (json_is_string(v)) str_printf(s, "%s`%s`", i ? ", " : "", json_string_value(v));
        else str_printf(s, "%s%lld", i ? ", " : "", (long long)json_integer_value(v));
    }
}


// Frames that say how the stack was taken, how the thread waits or how the C library
// ends a process (abort on a corrupted heap: raise, abort, __libc_message,
// malloc_printerr), not where the program is: skipped when naming where a stack "stops".
static int uninteresting(const char *fn) {
    while (!strncmp(fn, "__GI_", 5)) fn += 5;   // glibc's internal aliases
    while (*fn == '_') fn++;
    static const char *const skip[] = {"libc_pause", "pause", "nanosleep", "clock_nanosleep", "restore_rt", "raise",
                                       "abort", "pthread_kill", "sleep", "usleep", "stackdump_", "on_fatal_signal",
                                       "on_stall_signal", "futex", "poll", "epoll_wait", "syscall", "sched_yield",
                                       "libc_message", "malloc_printerr", "fortify_fail", "chk_fail",
                                       "nap", "??", NULL};   // nap: the trainer's own polling sleep
    for (int i = 0; skip[i]; i++)
        if (!strncmp(fn, skip[i], strlen(skip[i]))) return 1;
    return 0;
}

// A frame of a shared library (the C library, libgcc, libgomp, libstdc++, MPI, CUDA...),
// by its module: "[libc.so.6]" in the symbolized section, "/usr/lib/.../libgomp.so.1 + 0x.."
// in the raw one. The trainer's own code is its executable (nsa-train), never a ".so".
static int library_frame(const char *ln) {
    const char *m = strrchr(ln, '[');   // symbolized: "... [module]"
    const char *end = m ? strchr(m, ']') : NULL;
    char mod[256];
    if (m && end) snprintf(mod, sizeof mod, "%.*s", (int)(end - m - 1), m + 1);
    else {   // raw: "0x...  /path/libX.so.N + 0x...": the file name of the path
        const char *plus = strstr(ln, " + "), *base = ln;
        for (const char *c = ln; plus && c < plus; c++)
            if (*c == '/' || *c == ' ') base = c + 1;
        snprintf(mod, sizeof mod, "%.*s", plus ? (int)(plus - base) : (int)strlen(base), base);
    }
    return strstr(mod, ".so") != NULL || !strncmp(mod, "ld-linux", 8) || !strncmp(mod, "linux-vdso", 10);
}

// The first frame of a stack file worth naming, as "function (file:line)" with
// the source directory stripped; a Python trainer's (faulthandler) from its Current
// thread block (harness/artifacts/pystack.h); else from the symbolized section when there is one,
// else the raw "module + offset". The first frame of the trainer's own code: a crash
// inside a library (free() aborting on a heap that an overflow corrupted, a segfault in
// libgomp) names where our code called it; only a stack with no frame of our code names
// the library's. 0 or -1.
static int top_frame(const char *stack_path, char *out, size_t n) {
    char *text = read_file(stack_path, NULL);
    if (!text) return -1;
    if (pystack_top(text, harness_home(), out, n) == 0) {   // a Python trainer's faulthandler dump
        free(text);
        return 0;
    }
    int found = -1, symbolized = strstr(text, "symbolized") != NULL, in_sym = 0;
    char lib[1400] = "";   // the first frame worth naming, in a library: named if no frame of ours is
    char *save = NULL;
    for (char *ln = strtok_r(text, "\n", &save); ln && found < 0; ln = strtok_r(NULL, "\n", &save)) {
        if (strstr(ln, "symbolized")) in_sym = 1;
        if (symbolized && !in_sym) continue;
        while (*ln == ' ') ln++;
        if (ln[0] != '#') continue;
        char *p = ln + 1;
        while (*p >= '0' && *p <= '9') p++;
        while (*p == ' ') p++;
        const int in_lib = library_frame(p);
        char name[1400];
        if (symbolized) {
            // "func at file:line (discriminator k)  [module]"
            char fn[256] = "", loc[1024] = "";
            char *at = strstr(p, " at ");
            if (!at) continue;
            snprintf(fn, sizeof fn, "%.*s", (int)(at - p), p);
            if (uninteresting(fn)) continue;
            snprintf(loc, sizeof loc, "%s", at + 4);
            char *cut = strstr(loc, " (discriminator");
            if (!cut) cut = strstr(loc, "  [");
            if (cut) *cut = '\0';
            const char *rel = loc;
            size_t sl = strlen(harness_home());
            if (sl && !strncmp(loc, harness_home(), sl) && loc[sl] == '/') rel = loc + sl + 1;
            snprintf(name, sizeof name, "%s (%s)", fn, rel);
        } else {
            snprintf(name, sizeof name, "%s", p);
        }
        if (in_lib) {
            if (!lib[0]) snprintf(lib, sizeof lib, "%s", name);
            continue;
        }
        snprintf(out, n, "%s", name);
        found = 0;
    }
    if (found < 0 && lib[0]) {
        snprintf(out, n, "%s", lib);
        found = 0;
    }
    free(text);
    return found;
}

void diagnose_generic(const ScenarioRun *sr, Str *md) {
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        if (r->verdict == V_HANG) {
            for (int k = 0; k < r->n_ranks; k++) {
                const RankResult *rk = &r->ranks[k];
                if (!rk->stalled) continue;
                str_printf(md, "- **%s · %s HANG**: rank %d stalled", sr->s->name, r->c->name, rk->rank);
                if (rk->have_state) {
                    str_printf(md, " in phase `%s` at step %d", rk->phase, rk->step);
                    if (rk->layer >= 0) str_printf(md, ", layer %d", rk->layer);
                    if (rk->op[0]) str_printf(md, ", op `%s`", rk->op);
                    if (rk->coll_enqueued || rk->coll_completed)
                        str_printf(md, ", collective seq enqueued %lld / started %lld / completed %lld", rk->coll_enqueued,
                                   rk->coll_started, rk->coll_completed);
                } else {
                    str_add(md, " before its flight recorder appeared (start-up)");
                }
                str_printf(md, "; no heartbeat for %.1f s", rk->heartbeat_age_s);
                char fr[1400];
                if (rk->dumped && top_frame(rk->stack_path, fr, sizeof fr) == 0)
                    str_printf(md, "; its stack stops in `%s`", fr);
                else if (!rk->dumped)
                    str_add(md, "; it did not answer SIGUSR1 with a stack (killed)");
                str_add(md, ".\n");
            }
        } else if (r->verdict == V_CRASH) {
            const RankResult *rk = r->n_ranks ? &r->ranks[0] : NULL;
            for (int k = 0; k < r->n_ranks; k++)
                if (r->ranks[k].term_signal || (r->ranks[k].exited && r->ranks[k].exit_code)) {
                    rk = &r->ranks[k];
                    break;
                }
            str_printf(md, "- **%s · %s CRASH**: %s", sr->s->name, r->c->name, r->summary);
            char fr[1400];
            if (rk && top_frame(rk->stack_path, fr, sizeof fr) == 0) str_printf(md, "; the stack stops in `%s`", fr);
            str_add(md, ".\n");
        } else if (r->verdict == V_ERROR) {
            str_printf(md, "- **%s · %s ERROR**: %s.\n", sr->s->name, r->c->name, r->summary);
        }
    }
}


void family_metric_plot(const ScenarioRun *sr, const char *report_dir, Str *md, const char *metric,
                        const char *file, const char *title, const char *ylabel, double scale) {
    PlotSeries *ser = xcalloc((size_t)sr->n + 1, sizeof(PlotSeries));
    double **buf = xcalloc((size_t)sr->n + 1, sizeof(double *));
    int ns = 0, maxn = 0;
    for (int i = 0; i < sr->n; i++) {
        const json_t *m = sr->results[i].metrics;
        if (!m || json_array_size(m) == 0) continue;
        int n = (int)json_array_size(m);
        buf[i] = xcalloc((size_t)2 * n, sizeof(double));
        for (int k = 0; k < n; k++) {
            const json_t *rec = json_array_get(m, (size_t)k);
            buf[i][k] = json_number_or(rec, "step", k + 1);
            buf[i][n + k] = json_number_or(rec, metric, NAN) * scale;
        }
        ser[ns++] = (PlotSeries){sr->results[i].c->name, buf[i], buf[i] + n, n};
        if (n > maxn) maxn = n;
    }
    if (ns && maxn >= 2) {
        char dir[4096], path[4400], t[300];
        snprintf(dir, sizeof dir, "%s/%s", report_dir, sr->s->name);
        mkdir_p(dir);
        snprintf(path, sizeof path, "%s/%s", dir, file);
        snprintf(t, sizeof t, "%s: %s", sr->s->name, title);
        if (plot_lines(path, t, "step", ylabel, ser, ns) == 0)
            str_printf(md, "\n![%s, %s](%s/%s)\n", title, sr->s->name, sr->s->name, file);
    }
    for (int i = 0; i < sr->n; i++) free(buf[i]);
    free(buf);
    free(ser);
}

void section_loss_plot(const ScenarioRun *sr, const char *report_dir, Str *md) {
    family_metric_plot(sr, report_dir, md, "loss", "loss.svg", "training loss", "loss", 1.0);
}

// ---- branch_isolation ------------------------------------------------------------------------

static void branch_diagnose(const ScenarioRun *sr, Str *md) {
    int fails = count_verdict(sr, V_FAIL);
    if (!fails) return;
    // Which branch configurations fail, and with which unexpected parameters?
    int single_fails = 0, single_total = 0;
    const json_t *common = NULL;   // unexpected-missing set shared by every failing case
    int common_same = 1;
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        const char *br = family_label_on(sr, i, "branch");
        int is_none = br && !strcmp(br, "none");
        if (!is_none) single_total++;
        if (r->verdict != V_FAIL) continue;
        if (!is_none) single_fails++;
        const json_t *u = json_object_get(r->facts, "unexpected_missing");
        if (!common) common = u;
        else if (!u || !json_equal(u, common)) common_same = 0;
    }
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        if (r->verdict != V_FAIL) continue;
        const json_t *nf = json_object_get(r->facts, "first_nonfinite");
        if (nf) {
            str_printf(md, "- **%s · %s**: non-finite values, first in `%s` (layer %lld, branch %s, op `%s`)", sr->s->name,
                       r->c->name, json_string_value(json_object_get(nf, "tensor")),
                       (long long)json_integer_value(json_object_get(nf, "layer")),
                       json_string_value(json_object_get(nf, "branch")), json_string_value(json_object_get(nf, "op")));
            str_add(md, fails == 1 ? " — only this branch configuration produces them, so the defect is in "
                                     "the computation of that branch.\n"
                                   : ".\n");
        }
    }
    if (common && common_same && json_array_size(common) && fails > 1) {
        str_printf(md, "- **%s**: ", sr->s->name);
        family_names_list(md, common, 6);
        str_printf(md, " receive%s no gradient in every failing configuration (%d of %d): the parameter is cut "
                       "off from the loss whatever branch runs — a dropped or detached gradient, not a branch's math.\n",
                   json_array_size(common) == 1 ? "s" : "", fails, sr->n);
        return;
    }
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        const json_t *u = json_object_get(r->facts, "unexpected_missing");
        const json_t *a = json_object_get(r->facts, "unexpected_arrived");
        if (r->verdict != V_FAIL || (!json_array_size(u) && !json_array_size(a))) continue;
        const char *br = family_label_on(sr, i, "branch");
        str_printf(md, "- **%s · %s**: ", sr->s->name, r->c->name);
        if (json_array_size(u)) {
            family_names_list(md, u, 6);
            str_add(md, " get no gradient although they should");
        }
        if (json_array_size(a)) {
            str_add(md, json_array_size(u) ? "; and " : "");
            family_names_list(md, a, 6);
            str_add(md, " get a gradient although this configuration cannot reach them");
        }
        if (br && !strcmp(br, "none") && single_fails == 0 && single_total > 0)
            str_add(md, ". Every branch alone passes, so each branch's own backward is sound: look at what only the "
                        "gated combination has — the gate MLP's backward and the combine.\n");
        else if (br && strcmp(br, "none"))
            str_printf(md, ". Only the `%s` branch runs here: its backward (or its projections) is where the gradient "
                           "stops.\n", br);
        else str_add(md, ".\n");
    }
}

static void branch_section(const ScenarioRun *sr, const char *report_dir, Str *md) {
    str_printf(md, "\n## %s — gradient arrival per branch configuration\n\n", sr->s->name);
    str_add(md, "| case | verdict | arrived | missing (as expected) | unexpected | loss |\n|---|---|---|---|---|---|\n");
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        const json_t *f = r->facts;
        str_printf(md, "| %s | %s | ", r->c->name, VERDICT_NAMES[r->verdict]);
        if (json_object_get(f, "n_params"))
            str_printf(md, "%lld/%lld", (long long)json_integer_value(json_object_get(f, "arrived")),
                       (long long)json_integer_value(json_object_get(f, "n_params")));
        else str_add(md, "—");
        str_add(md, " | ");
        const json_t *miss = json_object_get(f, "missing");
        if (miss) str_printf(md, "%zu", json_array_size(miss));
        else str_add(md, "—");
        str_add(md, " | ");
        const json_t *u = json_object_get(f, "unexpected_missing");
        if (json_array_size(u)) family_names_list(md, u, 3);
        else str_add(md, u ? "none" : "—");
        str_add(md, " | ");
        const json_t *m = r->metrics;
        if (m && json_array_size(m)) {
            const json_t *l0 = json_object_get(json_array_get(m, 0), "loss");
            const json_t *l1 = json_object_get(json_array_get(m, json_array_size(m) - 1), "loss");
            if (json_is_number(l0) && json_is_number(l1))
                str_printf(md, "%.4f → %.4f", json_number_value(l0), json_number_value(l1));
        }
        str_add(md, " |\n");
    }
    section_loss_plot(sr, report_dir, md);
}

// ---- gate_init ----------------------------------------------------------------------------------

static void gate_diagnose(const ScenarioRun *sr, Str *md) {
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        if (r->verdict != V_FAIL) continue;
        const json_t *f = r->facts, *uni = json_object_get(f, "gate_uniform_layers");
        const json_t *col = json_object_get(f, "gate_collapsed_layers"), *fc2 = json_object_get(f, "gate_bad_fc2_layers");
        double want = json_number_value(json_object_get(f, "gate_expected_fc2_std"));
        if (json_array_size(uni)) {
            const json_t *layers = json_object_get(f, "gate_layers");
            double w0 = json_number_value(json_object_get(json_array_get(layers, 0), "fc2_weight_std"));
            str_printf(md, "- **%s · %s**: the gate is exactly uniform in %zu of %zu layers (", sr->s->name, r->c->name,
                       json_array_size(uni), json_array_size(layers));
            family_names_list(md, uni, 24);
            str_printf(md, "): every output is %.6f for cmp, sel and win with zero spread", 
                       json_number_value(json_object_get(f, "gate_uniform_value")));
            if (json_array_size(fc2))
                str_printf(md, ", and gate.fc2's weights have std %.3g where Xavier(gain 0.1) gives %.4g", w0, want);
            str_add(md, ". The gate's last layer starts at zero, so its logits are constant: NSA begins as an "
                        "unweighted mean of the three branches and the gate learns only from that point. Check the "
                        "initialisation of ");
            const char *own = json_string_value(json_object_get(json_array_get(layers, 0), "fc2_name"));
            if (own) str_printf(md, "`%s` (the gate's last layer in the trainer's own names).\n", own);
            else str_add(md, "`blocks.*.attn.gate.fc2` (DESIGN: Xavier-uniform gain 0.1, bias 0).\n");
        } else if (json_array_size(col)) {
            str_printf(md, "- **%s · %s**: gate output spread below the threshold in layers ", sr->s->name, r->c->name);
            family_names_list(md, col, 24);
            str_add(md, ": the gate starts nearly uniform there (not exactly: fc2 is not zero).\n");
        } else if (json_array_size(fc2)) {
            str_printf(md, "- **%s · %s**: gate.fc2 init std outside the Xavier expectation %.4g in layers ", sr->s->name,
                       r->c->name, want);
            family_names_list(md, fc2, 24);
            str_add(md, ".\n");
        }
    }
}

static void gate_section(const ScenarioRun *sr, const char *report_dir, Str *md) {
    str_printf(md, "\n## %s — gate statistics at initialisation\n", sr->s->name);
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        const json_t *layers = json_object_get(r->facts, "gate_layers");
        if (!json_array_size(layers)) continue;
        int nl = (int)json_array_size(layers);
        const json_t *want = json_object_get(r->facts, "gate_expected_fc2_std");
        if (json_is_number(want))
            str_printf(md, "\n**%s** (%s): expected fc2 weight std %.4g\n\n", r->c->name, VERDICT_NAMES[r->verdict],
                       json_number_value(want));
        else   // "fc2_gain": null: the trainer's own init
            str_printf(md, "\n**%s** (%s): fc2 weight std not compared (fc2_gain null)\n\n", r->c->name,
                       VERDICT_NAMES[r->verdict]);
        str_add(md, "| layer | fc2 weight std | out std cmp | out std sel | out std win | out mean cmp / sel / win |\n"
                    "|---|---|---|---|---|---|\n");
        double *vals = xcalloc((size_t)nl * NSA_NBRANCH, sizeof(double));
        char **labels = xcalloc((size_t)nl, sizeof(char *));
        for (int L = 0; L < nl; L++) {
            const json_t *row = json_array_get(layers, (size_t)L);
            const json_t *sd = json_object_get(row, "out_std"), *mu = json_object_get(row, "out_mean");
            str_printf(md, "| %lld | %.4g |", (long long)json_integer_value(json_object_get(row, "layer")),
                       json_number_value(json_object_get(row, "fc2_weight_std")));
            for (int b = 0; b < NSA_NBRANCH; b++) {
                vals[L * NSA_NBRANCH + b] = json_number_value(json_array_get(sd, (size_t)b));
                str_printf(md, " %.3g |", vals[L * NSA_NBRANCH + b]);
            }
            str_printf(md, " %.6f / %.6f / %.6f |\n", json_number_value(json_array_get(mu, 0)),
                       json_number_value(json_array_get(mu, 1)), json_number_value(json_array_get(mu, 2)));
            Str lb = {0};
            str_printf(&lb, "L%lld", (long long)json_integer_value(json_object_get(row, "layer")));
            labels[L] = str_take(&lb);
        }
        char dir[4096], path[4600], title[700], fname[400];
        snprintf(dir, sizeof dir, "%s/%s", report_dir, sr->s->name);
        mkdir_p(dir);
        snprintf(fname, sizeof fname, "gate_%s.svg", r->c->dir);
        for (char *p = fname; *p; p++)
            if (*p == '=' || *p == ',') *p = '_';
        snprintf(path, sizeof path, "%s/%s", dir, fname);
        snprintf(title, sizeof title, "%s · %s: gate output std per layer and branch", sr->s->name, r->c->name);
        const char *bars[NSA_NBRANCH] = {nsa_branch_name(NSA_BR_CMP), nsa_branch_name(NSA_BR_SEL),
                                         nsa_branch_name(NSA_BR_WIN)};
        if (plot_bars(path, title, "std of gate output (log)", (const char *const *)labels, nl, bars, NSA_NBRANCH,
                      vals, 1) == 0)
            str_printf(md, "\n![gate output std, %s](%s/%s)\n", r->c->name, sr->s->name, fname);
        for (int L = 0; L < nl; L++) free(labels[L]);
        free(labels);
        free(vals);
    }
}

// ---- the table ---------------------------------------------------------------------------------------

static const FamilyDef FAMILIES[] = {
    {"branch_isolation", "each NSA branch alone and all together: finite, and exactly the expected gradients missing",
     branch_diagnose, branch_section, NULL, NULL, NULL, NULL, NULL, NULL},
    {"gate_init", "the gate's initial weights and outputs per layer and branch: not zero, not uniform",
     gate_diagnose, gate_section, NULL, NULL, NULL, NULL, NULL, NULL},
    {"gc_bisection", "gradient checkpointing vs none, then a binary search over layer ranges down to the culprit layer",
     gcb_diagnose, gcb_section, gcb_execute, NULL, gcb_generated_names, NULL, NULL, NULL},
    {"prefill_step5", "sequential vs batched prefill over many steps: per-step parity, decode parity, no growth",
     prefill_diagnose, prefill_section, NULL, NULL, NULL, NULL, NULL, NULL},
    {"seqlen_nan_sweep", "sequence lengths x precisions: forward, loss and gradients finite; the first non-finite tensor",
     sweep_diagnose, sweep_section, NULL, NULL, NULL, NULL, NULL, NULL},
    {"ddp_onestep", "data parallel over mpi/nccl x default/find_unused/static_graph: per-rank arrival, buckets, collectives",
     ddp_diagnose, ddp_section, NULL, NULL, NULL, NULL, NULL, "grads.*"},
    {"cross_trainer_parity", "the same case under two trainers from the same weights and batch: loss, grad norm and "
                             "every step-1 tensor against the reference trainer's; the first tensor where they part",
     parity_diagnose, parity_section, NULL, NULL, NULL, NULL, NULL, NULL},
    {"golden_regression", "every numerics-bearing variant of the model against its golden baseline: the first "
                          "diverging step, the first differing tensor, the feature the differing variants share",
     golden_diagnose, golden_section, NULL, NULL, NULL, NULL, NULL, NULL},
    {"perf_floor", "tok/s, step time, peak memory and FLOPs per step against the floors recorded for this device",
     perf_diagnose, perf_section, NULL, NULL, NULL, NULL, NULL, NULL},
    {"selftest", "each family against the faults it must catch and against none: verdicts and localisation",
     selftest_diagnose, selftest_section, NULL, selftest_run_case, NULL, selftest_load, selftest_needs, NULL},
};
#define N_FAMILIES ((int)(sizeof FAMILIES / sizeof FAMILIES[0]))

const FamilyDef *family_find(const char *name) {
    for (int i = 0; i < N_FAMILIES; i++)
        if (!strcmp(FAMILIES[i].name, name)) return &FAMILIES[i];
    return NULL;
}
const FamilyDef *family_at(int i) { return i >= 0 && i < N_FAMILIES ? &FAMILIES[i] : NULL; }
const char *family_names(void) {
    static char buf[512];
    if (!buf[0]) {
        size_t used = 0;
        for (int i = 0; i < N_FAMILIES; i++)
            used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s", i ? ", " : "", FAMILIES[i].name);
    }
    return buf;
}
