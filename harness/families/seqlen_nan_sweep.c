// harness/families/seqlen_nan_sweep.c — the sequence-length NaN sweep: a grid of sequence
// lengths (rows, the cases' train.seq_len) by precision (columns, the cases'
// resolved train.precision); each cell is a case whose `finite` check names the
// first non-finite tensor. The diagnosis looks for the arithmetic of the failing
// lengths: all multiples of some K and no other length is a length-dependent
// defect, not noise.
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/families/families.h"

static int icmp(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }
static long long gcd(long long a, long long b) { return b ? gcd(b, a % b) : a; }

// distinct sorted lengths; distinct precisions in first-seen order
static int lengths(const ScenarioRun *sr, int *out) {
    int n = 0;
    for (int i = 0; i < sr->n; i++) {
        int T = sr->results[i].c->cfg.seq_len, seen = 0;
        for (int k = 0; k < n; k++) seen |= out[k] == T;
        if (!seen) out[n++] = T;
    }
    qsort(out, (size_t)n, sizeof(int), icmp);
    return n;
}
static int precisions(const ScenarioRun *sr, const char **out) {
    int n = 0;
    for (int i = 0; i < sr->n; i++) {
        const char *p = sr->results[i].c->cfg.precision;
        int seen = 0;
        for (int k = 0; k < n; k++) seen |= !strcmp(out[k], p);
        if (!seen) out[n++] = p;
    }
    return n;
}

static void sweep_section(const ScenarioRun *sr, const char *report_dir, Str *md) {
    (void)report_dir;
    int *T = xcalloc((size_t)sr->n + 1, sizeof(int));
    const char **P = xcalloc((size_t)sr->n + 1, sizeof(char *));
    int nt = lengths(sr, T), np = precisions(sr, P);
    str_printf(md, "\n## %s — grid\n\n| T \\\\ precision |", sr->s->name);
    for (int p = 0; p < np; p++) str_printf(md, " %s |", P[p]);
    str_add(md, "\n|---|");
    for (int p = 0; p < np; p++) str_add(md, "---|");
    str_add(md, "\n");
    for (int t = 0; t < nt; t++) {
        str_printf(md, "| %d |", T[t]);
        for (int p = 0; p < np; p++) {
            const CaseResult *cell = NULL;
            for (int i = 0; i < sr->n; i++)
                if (sr->results[i].c->cfg.seq_len == T[t] && !strcmp(sr->results[i].c->cfg.precision, P[p])) cell = &sr->results[i];
            if (!cell) str_add(md, " |");
            else if (cell->verdict == V_PASS) str_add(md, " ✓ |");
            else if (cell->verdict == V_FAIL) {
                const json_t *nf = json_object_get(cell->facts, "first_nonfinite");
                if (nf)
                    str_printf(md, " ✗ `%s` t=%lld |", json_string_value(json_object_get(nf, "tensor")),
                               (long long)json_number_or(json_object_get(nf, "position"), "t", -1));
                else str_add(md, " ✗ |");
            } else str_printf(md, " %s |", VERDICT_NAMES[cell->verdict]);
        }
        str_add(md, "\n");
    }
    str_add(md, "\n✓: forward, loss and every gradient finite; ✗: the first non-finite tensor and its position.\n");
    free(T);
    free(P);
}

static void sweep_diagnose(const ScenarioRun *sr, Str *md) {
    const char **P = xcalloc((size_t)sr->n + 1, sizeof(char *));
    int np = precisions(sr, P);
    for (int p = 0; p < np; p++) {
        long long g = 0;
        int nbad = 0, ntot = 0, misfit = 0;
        const CaseResult *first = NULL;
        Str bad = {0};
        for (int i = 0; i < sr->n; i++) {
            const CaseResult *r = &sr->results[i];
            if (strcmp(r->c->cfg.precision, P[p]) || r->verdict == V_SKIP) continue;
            ntot++;
            if (r->verdict != V_FAIL) continue;   // HANG/CRASH/ERROR cells say something else (generic diagnosis)
            nbad++;
            g = gcd(g, r->c->cfg.seq_len);
            str_printf(&bad, "%s%d", bad.len ? ", " : "", r->c->cfg.seq_len);
            if (!first || r->c->cfg.seq_len < first->c->cfg.seq_len) first = r;
        }
        if (!nbad) {
            str_free(&bad);
            continue;
        }
        // does the failing set equal "every tested length that is a multiple of g"?
        for (int i = 0; i < sr->n && g > 1; i++) {
            const CaseResult *r = &sr->results[i];
            if (strcmp(r->c->cfg.precision, P[p]) || r->verdict == V_SKIP) continue;
            if (r->verdict != V_PASS && r->verdict != V_FAIL) continue;
            misfit |= (r->c->cfg.seq_len % g == 0) != (r->verdict == V_FAIL);
        }
        str_printf(md, "- **%s · %s**: %d of %d lengths fail (T = %s)", sr->s->name, P[p], nbad, ntot, str_c(&bad));
        if (g > 1 && !misfit && nbad < ntot)
            str_printf(md, ": exactly the tested lengths that are multiples of **%lld**, and no other — a defect that "
                           "depends on T (a block count, a tiling or a mask derived from the length), not noise", g);
        const json_t *nf = first ? json_object_get(first->facts, "first_nonfinite") : NULL;
        if (nf)
            str_printf(md, ". First non-finite tensor at T = %d: `%s` (layer %lld, branch %s, op `%s`, t = %lld)",
                       first->c->cfg.seq_len, json_string_value(json_object_get(nf, "tensor")),
                       (long long)json_number_or(nf, "layer", -1), json_string_value(json_object_get(nf, "branch")),
                       json_string_value(json_object_get(nf, "op")),
                       (long long)json_number_or(json_object_get(nf, "position"), "t", -1));
        str_add(md, ".\n");
        str_free(&bad);
    }
    free(P);
}

const FamilyDef family_seqlen_nan_sweep = {
    .name = "seqlen_nan_sweep",
    .summary = "sequence lengths x precisions: forward, loss and gradients finite; the first non-finite tensor",
    .diagnose = sweep_diagnose,
    .section = sweep_section,
};
