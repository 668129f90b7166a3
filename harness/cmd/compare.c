// harness/cmd/compare.c — nsa-harness compare A B: two reports of `nsa-harness run`
// side by side (docs/compare.md).
//
// Cases are matched by scenario and case name. Per case: the verdict change, the
// loss curve (step by step), the median step time and tok/s, the peak backend
// memory (peak_mem_bytes, else mem_bytes), the step-1 tensors when both cases
// dumped them (tensordiff.h, grouped by layer and model part with locus.h) and
// the golden_* facts. Stages:
// options -> load both summaries -> pair the cases -> measure each pair (its two
// metrics.jsonl and step1.safetensors) -> judge -> plots -> Markdown.
//
// B regressed when a case went from PASS/SKIP (or absent) to FAIL/HANG/CRASH/ERROR,
// a case of A that B lists did not run there, or — for a case that passed
// in A — a metric moved past its tolerance. Exit 1 then, 0 otherwise, 2 for usage
// errors and unreadable or invalid inputs.
#define _POSIX_C_SOURCE 200809L
#include "harness/cmd/commands.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/cmd/options.h"
#include "harness/artifacts/locus.h"
#include "harness/report/plot.h"
#include "harness/report/report_in.h"
#include "harness/core/result.h"
#include "harness/artifacts/tensordiff.h"
#include "common/exit_codes.h"
#include "common/util.h"

#define DUMP_NAME "step1.safetensors"
#define MAX_PLOTTED_CASES 8    // the palette's colours
#define MAX_LISTED_TENSORS 40

// ---- options ------------------------------------------------------------------------------

typedef struct {
    const char *a_arg, *b_arg;   // the two reports as given
    const char *out_file;        // --out FILE (NULL: Markdown to stdout)
    const char *plots_dir;       // --plots DIR
    double loss_tol, time_tol, mem_tol, tensor_tol;
} CompareOptions;

static const CmdOption COMPARE_ROWS[] = {
    {NULL, NULL, 0, 0,
     "usage: nsa-harness compare A B [options]\n"
     "\n"
     "Compares two reports written by nsa-harness run (report folders, or their summary.json\n"
     "files), B against A, case by case (matched by scenario and case name): the verdict\n"
     "change, the loss curve step by step, the median step time and tok/s, the peak backend\n"
     "memory (the largest peak_mem_bytes; mem_bytes in reports without it), the step-1\n"
     "tensors where both cases dumped step1.safetensors (differing tensors largest relative\n"
     "difference first, grouped by layer and model part) and the golden_* facts. Each case's\n"
     "artifacts are read from its \"dir\" in summary.json, relative to the report folder.\n"
     "Markdown goes to stdout.\n"
     "\n"
     "options:\n"},
    {"out", "FILE", OPT_OUT, 0,
     "write the Markdown to FILE instead (atomically) and the loss plots beside it: <FILE's stem>_<scenario>.svg, "
     "one per scenario whose loss curves differ, A solid and B dashed"},
    {"plots", "DIR", OPT_PLOTS, 0,
     "write the loss plots to DIR (without --out: compare_<scenario>.svg); without --out or --plots no plot is "
     "written"},
    {"loss-tol", "REL", OPT_LOSS_TOL, 0,
     "largest relative difference allowed at any step of the loss curve (default 0: the CPU and CUDA backends are "
     "bitwise deterministic, so the same build on the same machine gives identical curves)"},
    {"time-tol", "REL", OPT_TIME_TOL, 0,
     "median step time up or median tok/s down by more than REL is a regression (default 0.10; inf: timing is "
     "shown, not judged)"},
    {"mem-tol", "REL", OPT_MEM_TOL, 0, "peak memory up by more than REL (default 0: an exact counter)"},
    {"tensor-tol", "REL", OPT_TENSOR_TOL, 0,
     "step-1 tensors: largest difference relative to A's largest magnitude (default 0: bitwise)"},
    CMD_OPT_HELP,
    {NULL, NULL, 0, 0,
     "\n"
     "B regressed against A when a case's verdict went from PASS or SKIP (or from absent) to\n"
     "FAIL, HANG, CRASH or ERROR; when a case of A that B lists did not run there; or,\n"
     "for a case that passed in A, when its loss curve, step time, tok/s, peak memory or\n"
     "step-1 tensors moved past the tolerance. Changes between PASS and SKIP, between two\n"
     "failing verdicts, and of golden_* facts are reported, not judged. A case of A that B\n"
     "does not list (B ran fewer cases: --filter, --case, other scenarios) is listed apart under\n"
     "\"Absent from B\", not compared and not a regression by itself.\n"
     "\n"
     "exit codes: 0 no regression; 1 B regressed against A; 2 usage error, or a report that is\n"
     "missing, unreadable or not a valid summary.json (named with line:column)\n"},
};
const CmdOptions CMD_COMPARE_OPTIONS = {"compare", "compare", COMPARE_ROWS,
                                        (int)(sizeof COMPARE_ROWS / sizeof COMPARE_ROWS[0]), NULL};

void usage_compare(FILE *f) { cmd_options_help(&CMD_COMPARE_OPTIONS, f); }

// A relative tolerance: a number >= 0, or inf. -1 (message printed) when it is not.
static int parse_tolerance(const char *flag, const char *value, double *out) {
    char *end = NULL;
    errno = 0;
    double v = value[0] ? strtod(value, &end) : NAN;
    if (!end || *end || errno == ERANGE || isnan(v) || v < 0) {
        cmd_log("compare", LOG_ERROR, "%s '%s': expected a relative tolerance, a number >= 0 (e.g. 0.05) or inf", flag, value);
        return -1;
    }
    *out = v;
    return 0;
}

typedef struct {
    CompareOptions *o;
    int n_pos;
} CompareParse;

static int apply_compare_option(void *ctx, int id, const char *flag, const char *v) {
    CompareParse *P = ctx;
    CompareOptions *o = P->o;
    double *tol = id == OPT_LOSS_TOL ? &o->loss_tol : id == OPT_TIME_TOL ? &o->time_tol : id == OPT_MEM_TOL ? &o->mem_tol
                  : id == OPT_TENSOR_TOL ? &o->tensor_tol : NULL;
    if (tol) return parse_tolerance(flag, v, tol) ? HARNESS_EXIT_USAGE : CMD_GO_ON;
    if (id == OPT_OUT || id == OPT_PLOTS) {
        if (!v[0]) {
            cmd_log("compare", LOG_ERROR, "%s '': expected a path", flag);
            return HARNESS_EXIT_USAGE;
        }
        *(id == OPT_OUT ? &o->out_file : &o->plots_dir) = v;
    } else if (id == OPT_WORD) {
        if (P->n_pos == 2) {
            cmd_log("compare", LOG_ERROR, "one report too many: '%s' (compare takes A and B)", v);
            return HARNESS_EXIT_USAGE;
        }
        *(P->n_pos++ ? &o->b_arg : &o->a_arg) = v;
    }
    return CMD_GO_ON;
}

// 0, 1 (--help: printed), or -1 (usage error: printed)
static int parse_options(int argc, char **argv, CompareOptions *o) {
    *o = (CompareOptions){.time_tol = 0.10};
    CompareParse P = {o, 0};
    int rc = cmd_options_parse(&CMD_COMPARE_OPTIONS, argc, argv, apply_compare_option, NULL, &P);
    if (rc != CMD_GO_ON) return rc == HARNESS_EXIT_OK ? 1 : -1;
    if (P.n_pos != 2) {
        cmd_log("compare", LOG_ERROR, "expected two reports, A and B (got %d)\n\n", P.n_pos);
        usage_compare(stderr);
        return -1;
    }
    return 0;
}

// ---- a report: its summary.json, loaded and checked (harness/report/report_in.h, as `show` does) ----

static int report_load(ReportIn *r, const char *arg, const char *which) {
    char err[1200];
    if (report_in_load(r, arg, err, sizeof err) == 0) return 0;
    cmd_log("compare", LOG_ERROR, "%s: %s", which, err);
    return -1;
}

static const char *jstr(const json_t *o, const char *key) { return report_in_str(o, key); }


// ---- one case in one report: its verdict and measurements -------------------------------------

typedef struct {
    const json_t *obj;       // the case in summary.json; NULL when the report lacks it
    const char *verdict;     // PASS, FAIL, ...; NULL when absent or not run
    char dir[8200];          // its artifact folder
    int n;                   // steps recorded in metrics.jsonl
    double *step, *loss;     // [n]
    double ms_median, tok_s_median;   // NAN when not recorded
    double peak_mem, mem_max;         // the largest peak_mem_bytes, mem_bytes; NAN when not recorded
    int has_dump;            // DIR/step1.safetensors exists
} CaseSide;


// median of the finite values of a metric over the records; NAN when none
static double metric_median(const json_t *records, const char *key) {
    size_t n = json_array_size(records), m = 0;
    double *v = xcalloc(n + 1, sizeof(double));
    for (size_t i = 0; i < n; i++) {
        double x = json_number_or(json_array_get(records, i), key, NAN);
        if (isfinite(x)) v[m++] = x;
    }
    double med = median_d(v, (int)m);
    free(v);
    return med;
}

static void side_load(CaseSide *s, const ReportIn *rep, const json_t *obj) {
    memset(s, 0, sizeof *s);
    s->ms_median = s->tok_s_median = s->peak_mem = s->mem_max = NAN;
    s->obj = obj;
    if (!obj) return;
    s->verdict = jstr(obj, "verdict");
    // a case the run never reached: "PENDING" (partial report), or "ran": false (an
    // interrupted run lists it as SKIP); older reports wrote null
    if (json_is_false(json_object_get(obj, "ran")) || (s->verdict && !strcmp(s->verdict, "PENDING"))) s->verdict = NULL;
    path_join(s->dir, sizeof s->dir, rep->dir, jstr(obj, "dir"));
    if (!s->verdict) return;   // not run: no artifacts to read
    char p[8400];
    snprintf(p, sizeof p, "%s/%s", s->dir, DUMP_NAME);
    s->has_dump = file_exists(p);
    snprintf(p, sizeof p, "%s/metrics.jsonl", s->dir);
    json_t *records = read_jsonl(p, NULL);
    if (!records) return;
    s->n = (int)json_array_size(records);
    s->step = xcalloc((size_t)s->n + 1, sizeof(double));
    s->loss = xcalloc((size_t)s->n + 1, sizeof(double));
    for (int i = 0; i < s->n; i++) {
        const json_t *rec = json_array_get(records, (size_t)i);
        double st = json_number_or(rec, "step", NAN);
        s->step[i] = isfinite(st) ? st : i + 1;
        s->loss[i] = json_number_or(rec, "loss", NAN);
        double mem = json_number_or(rec, "mem_bytes", NAN), peak = json_number_or(rec, "peak_mem_bytes", NAN);
        if (isfinite(mem) && !(mem <= s->mem_max)) s->mem_max = mem;
        if (isfinite(peak) && !(peak <= s->peak_mem)) s->peak_mem = peak;
    }
    s->ms_median = metric_median(records, "ms");
    s->tok_s_median = metric_median(records, "tok_per_s");
    json_decref(records);
}

static void side_free(CaseSide *s) {
    free(s->step);
    free(s->loss);
}

static const char *side_verdict_text(const CaseSide *s) { return s->verdict ? s->verdict : s->obj ? "not run" : "absent"; }

// ---- a case in both reports ---------------------------------------------------------------------

// what moved past its tolerance (for a case that passed in A: a regression)
enum { BEYOND_LOSS = 1u, BEYOND_TIME = 2u, BEYOND_TOKS = 4u, BEYOND_MEM = 8u, BEYOND_TENSORS = 16u };

// ST_ABSENT: a case of A that B does not list (B ran fewer cases: --filter, --case, other
// scenarios). Not compared and not a regression; listed apart ("Absent from B").
typedef enum { ST_UNCHANGED, ST_CHANGED, ST_IMPROVED, ST_NEW, ST_REGRESSED, ST_ABSENT, ST_COUNT } CaseStatus;
static const char *const STATUS_NAMES[ST_COUNT] = {"unchanged", "changed", "improved", "new", "regressed", "absent from B"};

typedef struct {
    int compared;            // steps compared (the shorter curve)
    int n_differ;            // steps whose loss differs (at all)
    int first_step;          // the first of them (its "step"), 0 when none
    double first_a, first_b; // the loss there
    double max_rel;          // largest relative difference
} CurveDiff;

typedef struct {
    int done;                // both cases dumped step 1 and both files were read
    char note[1200];         // otherwise why not ("" when neither case dumped)
    int n_compared, n_differ, n_missing;
    Str md;                  // the differing tensors grouped by locus (Markdown bullets)
} TensorSummary;

typedef struct {
    const char *scenario, *name;
    CaseSide a, b;
    CurveDiff loss;
    TensorSummary tensors;
    const char *mem_key;     // the metric the peak memory is read from
    double mem_a, mem_b;     // the peak memory (NAN when not recorded)
    unsigned beyond;         // BEYOND_* bits
    int loss_moved, mem_moved, golden_moved;   // differs at all (not only past the tolerance)
    CaseStatus status;
    Str reasons;             // why regressed: "verdict PASS → FAIL, loss, tensors"
} CasePair;

static double rel_diff(double a, double b) {
    if (a == b || (isnan(a) && isnan(b))) return 0;
    double d = fabs(a - b), m = fmax(fabs(a), fabs(b));
    if (isnan(d) || isinf(d)) return INFINITY;
    return d / m;
}

static CurveDiff curve_diff(const CaseSide *a, const CaseSide *b) {
    CurveDiff c = {0};
    c.compared = a->n < b->n ? a->n : b->n;
    for (int i = 0; i < c.compared; i++) {
        double r = rel_diff(a->loss[i], b->loss[i]);
        if (r == 0) continue;
        if (!c.n_differ++) {
            c.first_step = (int)a->step[i];
            c.first_a = a->loss[i];
            c.first_b = b->loss[i];
        }
        if (r > c.max_rel) c.max_rel = r;
    }
    return c;
}

// The differing tensors as Markdown bullets, one per (layer, part) in the order of
// each group's largest difference.
static void tensor_groups_md(Str *md, const DumpDiff *d) {
    int n = d->n_differ < MAX_LISTED_TENSORS ? d->n_differ : MAX_LISTED_TENSORS;
    char (*labels)[64] = xcalloc((size_t)n + 1, sizeof *labels);
    for (int i = 0; i < n; i++) {
        Locus l = tensor_locus(d->differ[i].name);
        locus_label(&l, labels[i], sizeof labels[i]);
    }
    for (int i = 0; i < n; i++) {
        int first = 1;
        for (int k = 0; k < i && first; k++) first = strcmp(labels[k], labels[i]) != 0;
        if (!first) continue;
        int count = 0;
        for (int k = i; k < n; k++) count += !strcmp(labels[k], labels[i]);
        str_printf(md, "  - %s (%d):", labels[i], count);
        int shown = 0;
        for (int k = i; k < n; k++)
            if (!strcmp(labels[k], labels[i]))
                str_printf(md, "%s `%s` %.3g", shown++ ? "," : "", d->differ[k].name, d->differ[k].rel);
        str_add(md, "\n");
    }
    if (d->n_differ > n) str_printf(md, "  - … %d more (smaller differences)\n", d->n_differ - n);
    free(labels);
}

static void compare_dumps(TensorSummary *t, const CaseSide *a, const CaseSide *b, double tol) {
    memset(t, 0, sizeof *t);
    if (!a->has_dump || !b->has_dump) {
        if (a->has_dump || b->has_dump)
            snprintf(t->note, sizeof t->note, "step-1 dump only in %s", a->has_dump ? "A" : "B");
        return;
    }
    char pa[8400], pb[8400], err[1024];
    snprintf(pa, sizeof pa, "%s/%s", a->dir, DUMP_NAME);
    snprintf(pb, sizeof pb, "%s/%s", b->dir, DUMP_NAME);
    DumpDiff d;
    if (dumpdiff_files(&d, pb, pa, NULL, tol, err, sizeof err) != DUMPDIFF_OK) {
        snprintf(t->note, sizeof t->note, "step-1 dumps not compared: %s", err);
        dumpdiff_free(&d);
        return;
    }
    t->done = 1;
    t->n_compared = d.n_compared;
    t->n_differ = d.n_differ;
    t->n_missing = d.n_missing;
    tensor_groups_md(&t->md, &d);
    if (d.n_missing) str_printf(&t->md, "  - absent from B or with another shape/dtype: %s\n", str_c(&d.missing));
    dumpdiff_free(&d);
}

static int is_golden_key(const char *k) { return !strncmp(k, "golden_", 7); }

// Do the golden_* facts of the two cases differ?
static int golden_differs(const json_t *fa, const json_t *fb) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)fa, k, v) if (is_golden_key(k) && !json_equal(v, json_object_get(fb, k))) return 1;
    json_object_foreach((json_t *)fb, k, v) if (is_golden_key(k) && !json_object_get(fa, k)) return 1;
    return 0;
}

static void measure_pair(CasePair *p, const CompareOptions *o) {
    const CaseSide *a = &p->a, *b = &p->b;
    p->loss = curve_diff(a, b);
    p->loss_moved = p->loss.n_differ > 0 || (a->n && b->n && a->n != b->n);
    if (p->loss.max_rel > o->loss_tol) p->beyond |= BEYOND_LOSS;
    if ((b->ms_median - a->ms_median) / a->ms_median > o->time_tol) p->beyond |= BEYOND_TIME;
    if ((a->tok_s_median - b->tok_s_median) / a->tok_s_median > o->time_tol) p->beyond |= BEYOND_TOKS;
    // the allocator's high-water mark where both reports have it (newer trainers), else
    // the largest of the per-step allocated bytes
    int peak = isfinite(a->peak_mem) && isfinite(b->peak_mem);
    p->mem_key = peak ? "peak_mem_bytes" : "mem_bytes";
    p->mem_a = peak ? a->peak_mem : a->mem_max;
    p->mem_b = peak ? b->peak_mem : b->mem_max;
    p->mem_moved = isfinite(p->mem_a) && isfinite(p->mem_b) && p->mem_a != p->mem_b;
    if ((p->mem_b - p->mem_a) / p->mem_a > o->mem_tol) p->beyond |= BEYOND_MEM;
    compare_dumps(&p->tensors, a, b, o->tensor_tol);
    if (p->tensors.n_differ || p->tensors.n_missing) p->beyond |= BEYOND_TENSORS;
    p->golden_moved = golden_differs(a->obj ? json_object_get(a->obj, "facts") : NULL,
                                     b->obj ? json_object_get(b->obj, "facts") : NULL);
}

static int verdict_good(const char *v) { return v && (!strcmp(v, "PASS") || !strcmp(v, "SKIP")); }

// Is time judged as moved (either way, past the tolerance)?
static int time_moved(const CasePair *p, double tol) {
    const CaseSide *a = &p->a, *b = &p->b;
    return fabs(b->ms_median - a->ms_median) / a->ms_median > tol ||
           fabs(b->tok_s_median - a->tok_s_median) / a->tok_s_median > tol;
}

static void judge_pair(CasePair *p, const CompareOptions *o) {
    const char *va = p->a.verdict, *vb = p->b.verdict;
    int verdict_same = !strcmp(side_verdict_text(&p->a), side_verdict_text(&p->b));
    if (!p->b.obj) {   // B does not list it: nothing to compare, not a regression by itself
        p->status = ST_ABSENT;
        return;
    }
    if (va && !vb) str_printf(&p->reasons, "%s in B", side_verdict_text(&p->b));
    else if (vb && !verdict_good(vb) && (!va || verdict_good(va)))
        str_printf(&p->reasons, "verdict %s → %s", side_verdict_text(&p->a), vb);
    if (va && !strcmp(va, "PASS")) {   // A's metrics are a baseline
        static const struct { unsigned bit; const char *name; } metric[] = {
            {BEYOND_LOSS, "loss"}, {BEYOND_TIME, "step time"}, {BEYOND_TOKS, "tok/s"},
            {BEYOND_MEM, "peak memory"}, {BEYOND_TENSORS, "step-1 tensors"}};
        for (int k = 0; k < 5; k++)
            if (p->beyond & metric[k].bit) str_printf(&p->reasons, "%s%s", p->reasons.len ? ", " : "", metric[k].name);
    }
    if (p->reasons.len) p->status = ST_REGRESSED;
    else if (!p->a.obj) p->status = ST_NEW;
    else if (va && vb && !verdict_good(va) && verdict_good(vb)) p->status = ST_IMPROVED;
    else if (!verdict_same || p->loss_moved || p->mem_moved || time_moved(p, o->time_tol) || p->tensors.n_differ ||
             p->tensors.n_missing || p->golden_moved || p->tensors.note[0])
        p->status = ST_CHANGED;
    else p->status = ST_UNCHANGED;
}

// ---- pairing ---------------------------------------------------------------------------------------

typedef struct {
    CasePair *v;
    int n;
} Pairs;

static const json_t *find_case(const json_t *cases, const char *scenario, const char *name) {
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) if (!strcmp(jstr(c, "scenario"), scenario) && !strcmp(jstr(c, "case"), name)) return c;
    return NULL;
}

// A's cases in A's order, then the cases only B has, in B's order.
static Pairs pair_cases(const ReportIn *A, const ReportIn *B) {
    Pairs ps = {xcalloc(json_array_size(A->cases) + json_array_size(B->cases) + 1, sizeof(CasePair)), 0};
    size_t i;
    json_t *c;
    json_array_foreach(A->cases, i, c) {
        const char *sc = jstr(c, "scenario"), *nm = jstr(c, "case");
        if (find_case(A->cases, sc, nm) != c) continue;   // a duplicate: the first one counts
        CasePair *p = &ps.v[ps.n++];
        p->scenario = sc;
        p->name = nm;
        side_load(&p->a, A, c);
        side_load(&p->b, B, find_case(B->cases, sc, nm));
    }
    json_array_foreach(B->cases, i, c) {
        const char *sc = jstr(c, "scenario"), *nm = jstr(c, "case");
        if (find_case(A->cases, sc, nm) || find_case(B->cases, sc, nm) != c) continue;
        CasePair *p = &ps.v[ps.n++];
        p->scenario = sc;
        p->name = nm;
        side_load(&p->a, A, NULL);
        side_load(&p->b, B, c);
    }
    return ps;
}

static void pairs_free(Pairs *ps) {
    for (int i = 0; i < ps->n; i++) {
        side_free(&ps->v[i].a);
        side_free(&ps->v[i].b);
        str_free(&ps->v[i].tensors.md);
        str_free(&ps->v[i].reasons);
    }
    free(ps->v);
}

// ---- plots: per scenario, the loss curves that differ, A solid and B dashed ---------------------------

typedef struct {
    char scenario[256];
    char path[4400];         // where the SVG was written
    char link[4400];         // how the Markdown refers to it
    int n_cases, n_left_out;
} Plot;

static int plotted(const CasePair *p) { return p->loss_moved && p->a.n > 0 && p->b.n > 0; }

// One SVG for the scenario of pairs[first]; 0 or -1 (I/O, errno)
static int plot_scenario(const Pairs *ps, int first, const char *dir, const char *stem, const char *link_dir, Plot *pl) {
    const char *scen = ps->v[first].scenario;
    PlotSeries a[MAX_PLOTTED_CASES], b[MAX_PLOTTED_CASES];
    memset(pl, 0, sizeof *pl);
    snprintf(pl->scenario, sizeof pl->scenario, "%s", scen);
    for (int i = first; i < ps->n; i++) {
        const CasePair *p = &ps->v[i];
        if (strcmp(p->scenario, scen) || !plotted(p)) continue;
        if (pl->n_cases == MAX_PLOTTED_CASES) {
            pl->n_left_out++;
            continue;
        }
        a[pl->n_cases] = (PlotSeries){p->name, p->a.step, p->a.loss, p->a.n};
        b[pl->n_cases++] = (PlotSeries){p->name, p->b.step, p->b.loss, p->b.n};
    }
    char safe[256], file[600], title[400];
    safe_name(safe, sizeof safe, scen);
    snprintf(file, sizeof file, "%s_%s.svg", stem, safe);
    path_join(pl->path, sizeof pl->path, dir, file);
    path_join(pl->link, sizeof pl->link, link_dir, file);
    snprintf(title, sizeof title, "loss — %s (A solid, B dashed)", scen);
    return plot_overlay(pl->path, title, "step", "loss", a, b, pl->n_cases, "A", "B");
}

// "cmp" for "out/cmp.md"; "compare" without --out
static void plot_stem(char *out, size_t n, const char *out_file) {
    const char *base = out_file ? path_basename(out_file) : "compare";
    const char *dot = strrchr(base, '.');
    size_t len = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    snprintf(out, n, "%.*s", (int)len, len ? base : "compare");
}

// Writes one SVG per scenario with a differing loss curve (when --out or --plots says
// where). Returns the number of plots (in *plots), or -1 (message printed).
static int write_plots(const Pairs *ps, const CompareOptions *o, Plot **plots) {
    *plots = NULL;
    if (!o->out_file && !o->plots_dir) return 0;
    char dir[4096], stem[256];
    if (o->plots_dir) snprintf(dir, sizeof dir, "%s", o->plots_dir);
    else path_dirname(o->out_file, dir, sizeof dir);
    plot_stem(stem, sizeof stem, o->out_file);
    if (mkdir_p(dir)) {
        cmd_log("compare", LOG_ERROR, "cannot create %s: %s", dir, strerror(errno));
        return -1;
    }
    // --out alone: the SVGs lie beside FILE, so it links them by name
    const char *link_dir = o->plots_dir ? o->plots_dir : "";
    int n = 0;
    *plots = xcalloc((size_t)ps->n + 1, sizeof(Plot));
    for (int i = 0; i < ps->n; i++) {
        if (!plotted(&ps->v[i])) continue;
        int seen = 0;
        for (int k = 0; k < n; k++) seen |= !strcmp((*plots)[k].scenario, ps->v[i].scenario);
        if (seen) continue;
        if (plot_scenario(ps, i, dir, stem, link_dir, &(*plots)[n])) {
            cmd_log("compare", LOG_ERROR, "cannot write %s: %s", (*plots)[n].path, strerror(errno));
            return -1;
        }
        n++;
    }
    return n;
}

// ---- Markdown ---------------------------------------------------------------------------------------

static void report_row(Str *md, const char *label, const ReportIn *A, const ReportIn *B,
                       void (*cell)(Str *, const ReportIn *)) {
    str_printf(md, "| %s | ", label);
    cell(md, A);
    str_add(md, " | ");
    cell(md, B);
    str_add(md, " |\n");
}
static void cell_path(Str *md, const ReportIn *r) {
    str_add(md, "`");
    str_add_md_cell(md, r->arg);
    str_add(md, "`");
}
static void cell_started(Str *md, const ReportIn *r) {
    const char *s = jstr(r->root, "started");
    str_add_md_cell(md, s ? s : "?");
    if (!json_is_true(json_object_get(r->root, "finished")))
        str_add(md, json_is_true(json_object_get(r->root, "interrupted")) ? " (interrupted)" : " (partial)");
}
static void cell_git(Str *md, const ReportIn *r) {
    const json_t *g = json_object_get(r->root, "git");
    const char *sha = jstr(g, "sha");
    str_printf(md, "`%s`%s", sha ? sha : "?", json_is_true(json_object_get(g, "dirty")) ? " (dirty)" : "");
}
static void cell_profile(Str *md, const ReportIn *r) {
    const char *p = jstr(r->root, "profile"), *d = jstr(r->root, "device");
    str_add_md_cell(md, p ? p : "?");
    str_add(md, " · ");
    str_add_md_cell(md, d && d[0] ? d : "?");
}
static void cell_faults(Str *md, const ReportIn *r) {
    const char *f = jstr(r->root, "faults");
    str_add_md_cell(md, f && f[0] ? f : "—");
}
static void cell_counts(Str *md, const ReportIn *r) {
    int c[V_COUNT + 1] = {0};
    size_t i;
    json_t *x;
    json_array_foreach(r->cases, i, x) {
        const char *v = jstr(x, "verdict");
        int k = V_COUNT;   // not run
        for (int j = 0; v && j < V_COUNT; j++)
            if (!strcmp(v, VERDICT_NAMES[j])) k = j;
        c[k]++;
    }
    str_printf(md, "%zu", json_array_size(r->cases));
    const char *sep = " (";
    for (int j = 0; j <= V_COUNT; j++)
        if (c[j]) {
            str_printf(md, "%s%d %s", sep, c[j], j < V_COUNT ? VERDICT_NAMES[j] : "not run");
            sep = ", ";
        }
    if (sep[0] == ',') str_add(md, ")");
}

static void fmt_tol(char *out, size_t n, double tol, const char *zero_means) {
    if (tol == 0) snprintf(out, n, "0 (%s)", zero_means);
    else if (isinf(tol)) snprintf(out, n, "inf (not judged)");
    else snprintf(out, n, "%g (%g %%)", tol, tol * 100);
}

static void md_header(Str *md, const ReportIn *A, const ReportIn *B, const CompareOptions *o) {
    str_add(md, "# nsa-harness compare\n\n| | A | B |\n|---|---|---|\n");
    report_row(md, "report", A, B, cell_path);
    report_row(md, "started", A, B, cell_started);
    report_row(md, "git", A, B, cell_git);
    report_row(md, "profile · device", A, B, cell_profile);
    report_row(md, "faults", A, B, cell_faults);
    report_row(md, "cases", A, B, cell_counts);
    char l[64], t[64], m[64], x[64];
    fmt_tol(l, sizeof l, o->loss_tol, "bitwise");
    fmt_tol(t, sizeof t, o->time_tol, "any change");
    fmt_tol(m, sizeof m, o->mem_tol, "exact");
    fmt_tol(x, sizeof x, o->tensor_tol, "bitwise");
    str_printf(md, "\nTolerances (relative): loss %s · step time and tok/s %s · peak memory %s · step-1 tensors %s\n", l, t,
               m, x);
}

static void md_verdict_line(Str *md, const Pairs *ps) {
    int count[ST_COUNT] = {0};
    for (int i = 0; i < ps->n; i++) count[ps->v[i].status]++;
    const int compared = ps->n - count[ST_ABSENT];
    if (count[ST_REGRESSED]) {
        str_printf(md, "\n**B regressed against A: %d case%s regressed**:", count[ST_REGRESSED],
                   count[ST_REGRESSED] == 1 ? "" : "s");
        int k = 0;
        for (int i = 0; i < ps->n; i++)
            if (ps->v[i].status == ST_REGRESSED) str_printf(md, "%s `%s/%s`", k++ ? "," : "", ps->v[i].scenario, ps->v[i].name);
        str_add(md, ".");
    } else if (!compared) {
        str_add(md, "\n**Nothing compared**: no case of A is in B.");
    } else {
        str_add(md, "\n**No regression.**");
    }
    str_printf(md, " %d case%s compared", compared, compared == 1 ? "" : "s");
    const char *sep = ": ";
    for (int s = 0; s < ST_COUNT; s++)
        if (count[s] && s != ST_ABSENT) {
            str_printf(md, "%s%d %s", sep, count[s], STATUS_NAMES[s]);
            sep = ", ";
        }
    str_add(md, ".");
    if (count[ST_ABSENT])
        str_printf(md, " %d case%s of A %s absent from B: not compared, not a regression (see *Absent from B*).",
                   count[ST_ABSENT], count[ST_ABSENT] == 1 ? "" : "s", count[ST_ABSENT] == 1 ? "is" : "are");
    str_add(md, "\n");
}

// The cases of A that B does not list, per scenario: "- `gate_init` (2): `gate=softmax` PASS, ..."
static void md_absent(Str *md, const Pairs *ps) {
    int n = 0;
    for (int i = 0; i < ps->n; i++) n += ps->v[i].status == ST_ABSENT;
    if (!n) return;
    str_printf(md, "\n## Absent from B\n\n%d case%s of A %s not in B (B ran fewer cases: a `--filter`, a `--case`, "
                   "other scenarios). %s not compared and %s not make B regressed; a case B lists but did not run "
                   "does.\n\n",
               n, n == 1 ? "" : "s", n == 1 ? "is" : "are", n == 1 ? "It is" : "They are", n == 1 ? "does" : "do");
    for (int i = 0; i < ps->n; i++) {
        const CasePair *p = &ps->v[i];
        if (p->status != ST_ABSENT) continue;
        int first = 1, count = 0;
        for (int k = 0; k < i && first; k++) first = !(ps->v[k].status == ST_ABSENT && !strcmp(ps->v[k].scenario, p->scenario));
        if (!first) continue;
        for (int k = i; k < ps->n; k++) count += ps->v[k].status == ST_ABSENT && !strcmp(ps->v[k].scenario, p->scenario);
        str_add(md, "- `");
        str_add_md_cell(md, p->scenario);
        str_printf(md, "` (%d):", count);
        int shown = 0;
        for (int k = i; k < ps->n; k++) {
            const CasePair *q = &ps->v[k];
            if (q->status != ST_ABSENT || strcmp(q->scenario, p->scenario)) continue;
            str_printf(md, "%s `", shown++ ? "," : "");
            str_add_md_cell(md, q->name);
            str_printf(md, "` %s", side_verdict_text(&q->a));
        }
        str_add(md, "\n");
    }
}

static void cell_median(Str *md, double a, double b, int judged, const char *fmt) {
    if (!isfinite(a) || !isfinite(b)) {
        str_add(md, "—");
        return;
    }
    char sa[32], sb[32];
    snprintf(sa, sizeof sa, fmt, a);
    snprintf(sb, sizeof sb, fmt, b);
    char change[48];
    fmt_rel_change(change, sizeof change, b, a);
    str_printf(md, "%s%s → %s (%s)%s", judged ? "**" : "", sa, sb, change, judged ? "**" : "");
}

static void cell_loss(Str *md, const CasePair *p) {
    if (!p->a.n || !p->b.n) str_add(md, "—");
    else if (!p->loss.n_differ) str_printf(md, "= (%d steps)", p->loss.compared);
    else str_printf(md, "%s≠ from step %d, max rel %.3g%s", p->beyond & BEYOND_LOSS ? "**" : "", p->loss.first_step,
                    p->loss.max_rel, p->beyond & BEYOND_LOSS ? "**" : "");
    if (p->a.n && p->b.n && p->a.n != p->b.n) str_printf(md, " (%d vs %d steps)", p->a.n, p->b.n);
}

static void cell_mem(Str *md, const CasePair *p) {
    double a = p->mem_a, b = p->mem_b;
    if (!isfinite(a) || !isfinite(b)) str_add(md, "—");
    else if (a == b) str_printf(md, "= %.0f", a);
    else {
        char change[48];
        fmt_rel_change(change, sizeof change, b, a);
        str_printf(md, "%s%.0f → %.0f (%s)%s", p->beyond & BEYOND_MEM ? "**" : "", a, b, change, p->beyond & BEYOND_MEM ? "**" : "");
    }
}

static void cell_tensors(Str *md, const TensorSummary *t, int judged) {
    if (!t->done) str_add(md, "—");
    else if (!t->n_differ && !t->n_missing) str_printf(md, "= (%d)", t->n_compared);
    else {
        str_printf(md, "%s%d of %d differ", judged ? "**" : "", t->n_differ, t->n_compared);
        if (t->n_missing) str_printf(md, ", %d absent/reshaped", t->n_missing);
        if (judged) str_add(md, "**");
    }
}

static void md_changes_table(Str *md, const Pairs *ps) {
    str_add(md, "\n## Changes\n\n");
    int listed = 0;
    for (int i = 0; i < ps->n; i++) listed += ps->v[i].status != ST_UNCHANGED && ps->v[i].status != ST_ABSENT;
    if (!listed) {
        str_add(md, "None: every case has the same verdict, the same loss curve, the same peak memory and step-1 "
                    "tensors, and step time and tok/s within the tolerance.\n");
        return;
    }
    str_add(md, "Bold: past the tolerance. Unchanged cases are not listed.\n\n"
                "| scenario | case | verdict A → B | loss | step ms (median) | tok/s (median) | peak memory (bytes) | step-1 tensors | status |\n"
                "|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < ps->n; i++) {
        const CasePair *p = &ps->v[i];
        if (p->status == ST_UNCHANGED || p->status == ST_ABSENT) continue;
        const char *va = side_verdict_text(&p->a), *vb = side_verdict_text(&p->b);
        str_add(md, "| ");
        str_add_md_cell(md, p->scenario);
        str_add(md, " | ");
        str_add_md_cell(md, p->name);
        if (!strcmp(va, vb)) str_printf(md, " | %s | ", va);
        else str_printf(md, " | %s → **%s** | ", va, vb);
        cell_loss(md, p);
        str_add(md, " | ");
        cell_median(md, p->a.ms_median, p->b.ms_median, !!(p->beyond & BEYOND_TIME), "%.2f");
        str_add(md, " | ");
        cell_median(md, p->a.tok_s_median, p->b.tok_s_median, !!(p->beyond & BEYOND_TOKS), "%.0f");
        str_add(md, " | ");
        cell_mem(md, p);
        str_add(md, " | ");
        cell_tensors(md, &p->tensors, !!(p->beyond & BEYOND_TENSORS));
        str_printf(md, " | %s%s%s", p->status == ST_REGRESSED ? "**" : "", STATUS_NAMES[p->status],
                   p->status == ST_REGRESSED ? "**" : "");
        if (p->reasons.len) {
            str_add(md, ": ");
            str_add_md_cell(md, str_c(&p->reasons));
        }
        str_add(md, " |\n");
    }
}

static void md_case_verdict(Str *md, const CasePair *p) {
    const char *va = side_verdict_text(&p->a), *vb = side_verdict_text(&p->b);
    if (!strcmp(va, vb)) str_printf(md, "- verdict: %s in both\n", va);
    else str_printf(md, "- verdict: %s → **%s**\n", va, vb);
    for (int k = 0; k < 2; k++) {
        const CaseSide *s = k ? &p->b : &p->a;
        const char *sum = s->obj && s->verdict ? jstr(s->obj, "summary") : NULL;
        if (sum && (strcmp(va, vb) || k == 1)) {
            str_printf(md, "  - %s: ", k ? "B" : "A");
            str_add_md_cell(md, sum);
            str_add(md, "\n");
        }
    }
}

static void md_case_loss(Str *md, const CasePair *p, const CompareOptions *o) {
    const CaseSide *a = &p->a, *b = &p->b;
    if (!a->n || !b->n) {
        str_printf(md, "- loss: no metrics.jsonl in %s\n", !a->n && !b->n ? "either" : !a->n ? "A" : "B");
        return;
    }
    if (p->loss.n_differ)
        str_printf(md, "- loss: %d of %d steps differ, first at step %d (%.9g → %.9g); largest relative difference %.3g, "
                       "%s the tolerance %g\n",
                   p->loss.n_differ, p->loss.compared, p->loss.first_step, p->loss.first_a, p->loss.first_b,
                   p->loss.max_rel, p->beyond & BEYOND_LOSS ? "past" : "within", o->loss_tol);
    else str_printf(md, "- loss: equal at all %d steps compared\n", p->loss.compared);
    if (a->n != b->n) str_printf(md, "  - the curves have %d (A) and %d (B) steps\n", a->n, b->n);
    str_printf(md, "  - last step: %.9g → %.9g\n", a->loss[a->n - 1], b->loss[b->n - 1]);
}

static void md_case_perf(Str *md, const CasePair *p) {
    str_add(md, "- step time median (ms): ");
    cell_median(md, p->a.ms_median, p->b.ms_median, !!(p->beyond & BEYOND_TIME), "%.3f");
    str_add(md, "; tok/s median: ");
    cell_median(md, p->a.tok_s_median, p->b.tok_s_median, !!(p->beyond & BEYOND_TOKS), "%.1f");
    str_printf(md, "\n- peak memory (largest %s): ", p->mem_key);
    cell_mem(md, p);
    str_add(md, "\n");
}

static void md_case_tensors(Str *md, const CasePair *p, const CompareOptions *o) {
    const TensorSummary *t = &p->tensors;
    if (!t->done) {
        if (t->note[0]) str_printf(md, "- step-1 tensors: %s\n", t->note);
        return;
    }
    if (!t->n_differ && !t->n_missing) {
        str_printf(md, "- step-1 tensors: all %d equal (%s)\n", t->n_compared, o->tensor_tol == 0 ? "bitwise" : "within tolerance");
        return;
    }
    str_printf(md, "- step-1 tensors (`%s`, B against A, relative to A's largest magnitude, tolerance %g): %d of %d differ, "
                   "largest first, by layer and part:\n",
               DUMP_NAME, o->tensor_tol, t->n_differ, t->n_compared);
    str_add(md, str_c(&t->md));
}

static void md_case_details(Str *md, const Pairs *ps, const CompareOptions *o, const Plot *plots, int n_plots) {
    for (int i = 0; i < ps->n; i++) {
        const CasePair *p = &ps->v[i];
        if (p->status == ST_UNCHANGED || p->status == ST_ABSENT) continue;
        str_printf(md, "\n### %s / %s — %s\n\n", p->scenario, p->name, STATUS_NAMES[p->status]);
        if (p->reasons.len) str_printf(md, "- regressed: %s\n", str_c(&p->reasons));
        md_case_verdict(md, p);
        md_case_loss(md, p, o);
        md_case_perf(md, p);
        md_case_tensors(md, p, o);
        if (p->golden_moved) str_add(md, "- golden_* facts differ (see Golden-regression facts)\n");
        for (int k = 0; k < n_plots; k++)
            if (plotted(p) && !strcmp(plots[k].scenario, p->scenario)) str_printf(md, "- loss curves: `%s`\n", plots[k].link);
    }
}

static void golden_cell(Str *md, const json_t *v) {
    if (!v) {
        str_add(md, "—");
        return;
    }
    char *js = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    size_t n = js ? strlen(js) : 0;
    str_add(md, "`");
    if (n > 300) {
        js[297] = '\0';
        str_add_md_cell(md, js);
        str_add(md, "…");
    } else str_add_md_cell(md, js ? js : "?");
    str_add(md, "`");
    free(js);
}

static int has_golden(const json_t *facts) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)facts, k, v) if (is_golden_key(k)) return 1;
    return 0;
}

// one row per golden_* fact of a case, A's keys then those only B has
static void golden_rows(Str *md, const CasePair *p, const json_t *fa, const json_t *fb) {
    for (int side = 0; side < 2; side++) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)(side ? fb : fa), k, v) {
            if (!is_golden_key(k) || (side && json_object_get(fa, k))) continue;
            const json_t *va = json_object_get(fa, k), *vb = json_object_get(fb, k);
            str_add(md, "| ");
            str_add_md_cell(md, p->scenario);
            str_add(md, " | ");
            str_add_md_cell(md, p->name);
            str_printf(md, " | `%s` | ", k);
            golden_cell(md, va);
            str_add(md, " | ");
            if (va && vb && json_equal(va, vb)) str_add(md, "=");
            else golden_cell(md, vb);
            str_add(md, " |\n");
        }
    }
}

// The golden_* facts of the listed cases, key by key in A and B; the unchanged cases'
// (equal on both sides) only counted.
static void md_golden(Str *md, const Pairs *ps) {
    int listed = 0, unchanged = 0;
    for (int i = 0; i < ps->n; i++) {
        const CasePair *p = &ps->v[i];
        if (p->status == ST_ABSENT) continue;
        const json_t *fa = p->a.obj ? json_object_get(p->a.obj, "facts") : NULL;
        const json_t *fb = p->b.obj ? json_object_get(p->b.obj, "facts") : NULL;
        if (!has_golden(fa) && !has_golden(fb)) continue;
        if (p->status == ST_UNCHANGED) {
            unchanged++;
            continue;
        }
        if (!listed++) str_add(md, "\n## Golden-regression facts\n\n| scenario | case | fact | A | B |\n|---|---|---|---|---|\n");
        golden_rows(md, p, fa, fb);
    }
    if (!unchanged) return;
    if (!listed) str_add(md, "\n## Golden-regression facts\n");
    str_printf(md, "\nThe golden_* facts of %d unchanged case%s are equal in A and B (not shown).\n", unchanged,
               unchanged == 1 ? "" : "s");
}

static void md_plots(Str *md, const Pairs *ps, const CompareOptions *o, const Plot *plots, int n_plots) {
    int scenarios = 0;
    for (int i = 0; i < ps->n; i++) {
        if (!plotted(&ps->v[i])) continue;
        int first = 1;
        for (int k = 0; k < i; k++) first &= !(plotted(&ps->v[k]) && !strcmp(ps->v[k].scenario, ps->v[i].scenario));
        scenarios += first;
    }
    if (!scenarios) return;
    str_add(md, "\n## Loss curves\n\n");
    if (!o->out_file && !o->plots_dir) {
        str_printf(md, "Loss curves differ in %d scenario%s; no plot written (give --out FILE or --plots DIR).\n", scenarios,
                   scenarios == 1 ? "" : "s");
        return;
    }
    str_add(md, "A solid, B dashed; one plot per scenario, the cases whose loss curve differs");
    if (o->plots_dir) str_printf(md, " (written to `%s`)", o->plots_dir);
    str_add(md, ".\n\n");
    for (int k = 0; k < n_plots; k++) {
        str_printf(md, "![loss %s](%s)\n", plots[k].scenario, plots[k].link);
        if (plots[k].n_left_out)
            str_printf(md, "\n(%d more case%s of %s not plotted: %d colours)\n", plots[k].n_left_out,
                       plots[k].n_left_out == 1 ? "" : "s", plots[k].scenario, MAX_PLOTTED_CASES);
    }
}

// ---- the command ------------------------------------------------------------------------------------

static int regressions(const Pairs *ps) {
    int n = 0;
    for (int i = 0; i < ps->n; i++) n += ps->v[i].status == ST_REGRESSED;
    return n;
}

static int emit(const Str *md, const CompareOptions *o, int n_regressed, int n_plots) {
    if (!o->out_file) {
        fputs(str_c(md), stdout);
        return 0;
    }
    char dir[4096];
    path_dirname(o->out_file, dir, sizeof dir);
    if (mkdir_p(dir) || write_file_atomic(o->out_file, str_c(md), md->len)) {
        cmd_log("compare", LOG_ERROR, "cannot write %s: %s", o->out_file, strerror(errno));
        return -1;
    }
    printf("nsa-harness compare: %s; wrote %s and %d plot%s\n",
           n_regressed ? "B regressed against A" : "no regression", o->out_file, n_plots, n_plots == 1 ? "" : "s");
    return 0;
}

int cmd_compare(int argc, char **argv) {
    CompareOptions o;
    int prc = parse_options(argc, argv, &o);
    if (prc) return prc > 0 ? HARNESS_EXIT_OK : HARNESS_EXIT_USAGE;
    ReportIn A, B;
    int bad_a = report_load(&A, o.a_arg, "A"), bad_b = report_load(&B, o.b_arg, "B");   // both named if both are bad
    if (bad_a || bad_b) {
        report_in_free(&A);
        report_in_free(&B);
        return HARNESS_EXIT_USAGE;
    }
    Pairs ps = pair_cases(&A, &B);
    for (int i = 0; i < ps.n; i++) {
        measure_pair(&ps.v[i], &o);
        judge_pair(&ps.v[i], &o);
    }
    Plot *plots = NULL;
    int n_plots = write_plots(&ps, &o, &plots);
    int rc = HARNESS_EXIT_USAGE;
    if (n_plots >= 0) {
        Str md = {0};
        md_header(&md, &A, &B, &o);
        md_verdict_line(&md, &ps);
        md_changes_table(&md, &ps);
        md_absent(&md, &ps);
        md_case_details(&md, &ps, &o, plots, n_plots);
        md_golden(&md, &ps);
        md_plots(&md, &ps, &o, plots, n_plots);
        if (emit(&md, &o, regressions(&ps), n_plots) == 0) rc = regressions(&ps) ? HARNESS_EXIT_FAIL : HARNESS_EXIT_OK;
        str_free(&md);
    }
    free(plots);
    pairs_free(&ps);
    report_in_free(&A);
    report_in_free(&B);
    return rc;
}
