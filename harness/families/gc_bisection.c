// harness/families/gc_bisection.c — gradient checkpointing, bisected.
//
// For each base case of the scenario: a baseline without checkpointing
// ("ckpt=off"), then checkpointing of every layer ("ckpt=[0,L)"). A range
// "fails" when its case is not PASS: a check failed (typically dump_match: the
// step-1 gradients differ from the baseline's, bitwise on a deterministic
// backend), or it hung, crashed or went non-finite. A failing range [a,b) with
// b-a > 1 is split at m = (a+b)/2 and both halves run, depth first, lower half
// first: the search ends at single layers. A failing single layer is a culprit;
// a failing range whose halves both pass is reported as a culprit range (the
// failure needs the layers together). At most about 2·log2(L) runs per culprit.
// Peak memory per range (metrics mem_bytes: parameters, gradients, optimizer
// state and activations on the backend) shows what checkpointing saves.
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/families/families.h"

const char *const *gcb_generated_names(void) {
    static const char *const names[] = {"ckpt=off", NULL};
    return names;
}

static int range_of(const CaseResult *r, int *a, int *b) {
    const json_t *rg = json_object_get(r->facts, "gcb_range");
    if (!json_is_array(rg)) return -1;
    *a = (int)json_integer_value(json_array_get(rg, 0));
    *b = (int)json_integer_value(json_array_get(rg, 1));
    return 0;
}

static int run_range(FamilyExec *fx, const Case *base, const char *prefix, int a, int b, int parent) {
    char name[300], value[64];
    if (a == b) snprintf(name, sizeof name, "%sckpt=off", prefix);
    else snprintf(name, sizeof name, "%sckpt=[%d,%d)", prefix, a, b);
    snprintf(value, sizeof value, "[%d,%d]", a, b);
    Override ov;
    memset(&ov, 0, sizeof ov);
    snprintf(ov.key, sizeof ov.key, "train.checkpoint_layers");
    ov.value = value;
    int k = fx->run_variant(fx, base, name, &ov, 1);
    CaseResult *r = &fx->sr->results[k];
    json_object_set_new(r->facts, "gcb_range", json_pack("[i,i]", a, b));
    json_object_set_new(r->facts, "gcb_parent", json_integer(parent));
    json_object_set_new(r->facts, "gcb_base", json_string(base->name));
    return k;
}

static void gcb_execute(FamilyExec *fx) {
    for (int bi = 0; bi < fx->n_bases && !fx->interrupted(fx); bi++) {
        const Case *base = fx->bases[bi];
        const int L = base->cfg.n_layers;
        char prefix[280] = "";
        if (strcmp(base->name, "default")) snprintf(prefix, sizeof prefix, "%s,", base->name);
        int kb = run_range(fx, base, prefix, 0, 0, -1);
        if (fx->sr->results[kb].verdict != V_PASS) continue;   // no baseline, nothing to compare with
        // depth-first over failing ranges, lower half first
        int cap = 4 * L + 8, top = 0;
        int(*stack)[3] = xcalloc((size_t)cap, sizeof *stack);
        stack[top][0] = 0;
        stack[top][1] = L;
        stack[top++][2] = -1;
        while (top > 0 && !fx->interrupted(fx)) {
            top--;
            int a = stack[top][0], b = stack[top][1], parent = stack[top][2];
            int k = run_range(fx, base, prefix, a, b, parent);
            if (fx->sr->results[k].verdict == V_PASS || b - a < 2 || top + 2 > cap) continue;
            int m = (a + b) / 2;
            stack[top][0] = m; stack[top][1] = b; stack[top++][2] = k;   // upper half runs second
            stack[top][0] = a; stack[top][1] = m; stack[top++][2] = k;
        }
        free(stack);
    }
}

// ---- reading the search back ---------------------------------------------------------------

// Culprits of one base: failing single layers, and failing ranges whose two
// halves both passed. Appended to out as [a,b] pairs.
static void culprits(const ScenarioRun *sr, const char *base, json_t *out) {
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        int a, b;
        if (range_of(r, &a, &b) || a == b || r->verdict == V_PASS) continue;
        if (strcmp(json_string_value(json_object_get(r->facts, "gcb_base")), base)) continue;
        int kids = 0, kids_pass = 0;
        for (int j = 0; j < sr->n; j++)
            if (json_integer_value(json_object_get(sr->results[j].facts, "gcb_parent")) == i &&
                json_object_get(sr->results[j].facts, "gcb_parent")) {
                kids++;
                kids_pass += sr->results[j].verdict == V_PASS;
            }
        if (b - a == 1 || (kids == 2 && kids_pass == 2)) json_array_append_new(out, json_pack("[i,i,i]", a, b, i));
    }
}

static int node_is_root(const ScenarioRun *sr, int node) {
    return json_integer_value(json_object_get(sr->results[node].facts, "gcb_parent")) < 0;
}

static void tree(const ScenarioRun *sr, int node, const char *indent, int last, Str *md) {
    const CaseResult *r = &sr->results[node];
    int a = -1, b = -1;   // every node of the tree carries its range; -1 shows one that does not
    range_of(r, &a, &b);
    str_printf(md, "%s%s[%d,%d) %s", indent, node_is_root(sr, node) ? "" : (last ? "└── " : "├── "), a, b,
               VERDICT_NAMES[r->verdict]);
    const json_t *layers = json_object_get(r->facts, "dump_differ_layers");
    if (r->verdict == V_FAIL && json_array_size(layers)) {
        str_printf(md, " — gradients differ (%zu tensors; layers ", json_array_size(json_object_get(r->facts, "dump_differs")));
        family_names_list(md, layers, 12);
        str_add(md, ")");
    } else if (r->verdict != V_PASS) {
        str_printf(md, " — %.120s", r->summary);
    }
    int kids[2], nk = 0;
    for (int j = 0; j < sr->n && nk < 2; j++) {
        const json_t *p = json_object_get(sr->results[j].facts, "gcb_parent");
        if (p && json_integer_value(p) == node) kids[nk++] = j;
    }
    if (nk == 0 && r->verdict != V_PASS && b - a == 1) str_add(md, "   ← culprit");
    else if (nk == 2 && sr->results[kids[0]].verdict == V_PASS && sr->results[kids[1]].verdict == V_PASS &&
             r->verdict != V_PASS)
        str_add(md, "   ← culprit range (its halves pass)");
    str_add(md, "\n");
    char sub[512];
    snprintf(sub, sizeof sub, "%s%s", indent, node_is_root(sr, node) ? "" : (last ? "    " : "│   "));
    for (int c = 0; c < nk; c++) tree(sr, kids[c], sub, c == nk - 1, md);
}

static double peak_mem(const CaseResult *r, const char *key) {
    double m = NAN;
    size_t i;
    json_t *rec;
    json_array_foreach(r->metrics, i, rec) {
        double v = json_number_or(rec, key, NAN);
        if (isfinite(v) && !(v <= m)) m = v;
    }
    return m;
}

// The bases that ran, in order (a base's results share gcb_base).
static int bases_of(const ScenarioRun *sr, const char **out, int max) {
    int n = 0;
    for (int i = 0; i < sr->n && n < max; i++) {
        const char *b = json_string_value(json_object_get(sr->results[i].facts, "gcb_base"));
        if (!b) continue;
        int seen = 0;
        for (int k = 0; k < n; k++) seen |= !strcmp(out[k], b);
        if (!seen) out[n++] = b;
    }
    return n;
}

static void gcb_section(const ScenarioRun *sr, const char *report_dir, Str *md) {
    (void)report_dir;
    const char *bases[64];
    int nb = bases_of(sr, bases, 64);
    for (int bi = 0; bi < nb; bi++) {
        str_printf(md, "\n## %s — bisection%s%s\n\n", sr->s->name, strcmp(bases[bi], "default") ? " of " : "",
                   strcmp(bases[bi], "default") ? bases[bi] : "");
        int baseline = -1;
        for (int i = 0; i < sr->n; i++) {
            int a, b;
            if (range_of(&sr->results[i], &a, &b) == 0 && a == b &&
                !strcmp(json_string_value(json_object_get(sr->results[i].facts, "gcb_base")), bases[bi]))
                baseline = i;
        }
        if (baseline >= 0 && sr->results[baseline].verdict != V_PASS)
            str_printf(md, "The baseline without checkpointing is %s (%s): there is nothing to compare the "
                           "checkpointed runs with.\n", VERDICT_NAMES[sr->results[baseline].verdict],
                       sr->results[baseline].summary);
        str_add(md, "Search tree (each range checkpointed alone, compared with the baseline `ckpt=off`):\n\n```\n");
        for (int i = 0; i < sr->n; i++) {
            int a, b;
            if (range_of(&sr->results[i], &a, &b) || a == b) continue;
            if (strcmp(json_string_value(json_object_get(sr->results[i].facts, "gcb_base")), bases[bi])) continue;
            if (node_is_root(sr, i)) tree(sr, i, "", 1, md);
        }
        str_add(md, "```\n");
        json_t *cul = json_array();
        culprits(sr, bases[bi], cul);
        if (json_array_size(cul)) {
            str_add(md, "\n**Culprit:** ");
            size_t k;
            json_t *c;
            json_array_foreach(cul, k, c) {
                int a = (int)json_integer_value(json_array_get(c, 0)), b = (int)json_integer_value(json_array_get(c, 1));
                if (b - a == 1) str_printf(md, "%slayer %d", k ? ", " : "", a);
                else str_printf(md, "%slayers %d–%d together", k ? ", " : "", a, b - 1);
            }
            str_add(md, "\n");
        } else if (baseline >= 0 && sr->results[baseline].verdict == V_PASS) {
            str_add(md, "\nNo culprit: checkpointing every layer gives the baseline's gradients.\n");
        }
        json_decref(cul);
        // memory per range
        double base_mem = baseline >= 0 ? peak_mem(&sr->results[baseline], "mem_bytes") : NAN;
        str_add(md, "\n| range | verdict | peak backend memory | vs baseline | peak RSS |\n|---|---|---|---|---|\n");
        for (int i = 0; i < sr->n; i++) {
            const CaseResult *r = &sr->results[i];
            int a, b;
            if (range_of(r, &a, &b) || strcmp(json_string_value(json_object_get(r->facts, "gcb_base")), bases[bi])) continue;
            double m = peak_mem(r, "mem_bytes"), rss = peak_mem(r, "rss_bytes");
            if (a == b) str_add(md, "| off (baseline) |");
            else str_printf(md, "| [%d,%d) |", a, b);
            str_printf(md, " %s | ", VERDICT_NAMES[r->verdict]);
            if (isfinite(m)) str_printf(md, "%.2f MiB", m / 1048576.0);
            else str_add(md, "—");
            str_add(md, " | ");
            if (isfinite(m) && isfinite(base_mem) && a != b) str_printf(md, "%+.1f %%", 100 * (m - base_mem) / base_mem);
            else str_add(md, "—");
            str_add(md, " | ");
            if (isfinite(rss)) str_printf(md, "%.1f MiB", rss / 1048576.0);
            else str_add(md, "—");
            str_add(md, " |\n");
        }
    }
}

static void gcb_diagnose(const ScenarioRun *sr, Str *md) {
    const char *bases[64];
    int nb = bases_of(sr, bases, 64);
    for (int bi = 0; bi < nb; bi++) {
        json_t *cul = json_array();
        culprits(sr, bases[bi], cul);
        size_t k;
        json_t *c;
        json_array_foreach(cul, k, c) {
            int a = (int)json_integer_value(json_array_get(c, 0)), b = (int)json_integer_value(json_array_get(c, 1));
            const CaseResult *r = &sr->results[json_integer_value(json_array_get(c, 2))];
            str_printf(md, "- **%s%s%s**: ", sr->s->name, strcmp(bases[bi], "default") ? " · " : "",
                       strcmp(bases[bi], "default") ? bases[bi] : "");
            if (b - a == 1) str_printf(md, "checkpointing **layer %d** alone ", a);
            else str_printf(md, "checkpointing layers %d–%d together (not either half) ", a, b - 1);
            if (r->verdict == V_FAIL && json_array_size(json_object_get(r->facts, "dump_differs"))) {
                const json_t *layers = json_object_get(r->facts, "dump_differ_layers");
                const json_t *names = json_object_get(r->facts, "dump_differs");
                str_printf(md, "changes the gradients (bisection over %d runs). ", sr->n);
                int only_self = json_array_size(layers) == 1 && json_integer_value(json_array_get(layers, 0)) == a;
                if (only_self && b - a == 1) {
                    str_printf(md, "Only layer %d's own gradients differ (", a);
                    family_names_list(md, names, 4);
                    str_add(md, "): a saved activation that only those gradients read differs between the two runs. "
                                "Either the recompute produces it differently, or, without checkpointing, it was "
                                "overwritten between the forward and this layer's backward (checkpointing recomputes "
                                "it and so heals it).\n");
                } else {
                    str_printf(md, "The differing gradients reach layers ");
                    family_names_list(md, layers, 12);
                    str_printf(md, ": the recomputed activations of layer %d differ from its forward's and the "
                                   "difference flows back through every layer below. Look at what the recompute of "
                                   "this layer reads that the forward did not (state, RNG, a buffer reused in between).\n", a);
                }
            } else {
                str_printf(md, "makes the run %s: %s.\n", VERDICT_NAMES[r->verdict], r->summary);
            }
        }
        json_decref(cul);
    }
}

const FamilyDef family_gc_bisection = {
    .name = "gc_bisection",
    .summary = "gradient checkpointing vs none, then a binary search over layer ranges down to the culprit layer",
    .diagnose = gcb_diagnose,
    .section = gcb_section,
    .execute = gcb_execute,
    .generated_names = gcb_generated_names,
};
