// harness/families/ddp_onestep.c — data-parallel one-step traces: per case, what every
// rank did with its gradients and its collectives, read across ranks.
//
// Sources (docs/ddp.md): each rank's gradient-arrival trace (grad_trace.jsonl),
// its bucket trace (buckets.jsonl: per bucket its parameters, whether it was
// launched, its collective sequence number, or the parameters missing), its
// compute/communication split (rank_times.jsonl) and its flight recorder
// (collective sequence numbers enqueued/started/completed). The decision tree:
// a rank that never launched a bucket is where the hang starts, and the
// parameters missing from that bucket are why; the ranks waiting inside the
// collective of the same sequence number are the victims. A trainer without a bucket
// trace (a map trainer through the probe writes neither buckets.jsonl nor
// rank_times.jsonl): the gradient trace fills the per-rank table, and the ranks'
// `[DDP] step=S rank=R no gradient: NAME ...` lines (printed the moment backward
// returns) name the rank and parameter where the hang starts. Whether find_unused
// passes for the same configuration tells an unused parameter (divergent control
// flow) from a broken gradient; whether both transports hang at the same
// collective tells the training graph from the transport.
//
// The numbers (docs/ddp.md, "Numbers: n ranks against one"): a data-parallel case is
// compared with one rank that trains the batch of all ranks (parity of the loss and the
// gradient norm, dump_match of the step-1 gradients the optimizer consumed). When they
// part, the step-1 gradients say how: every tensor by one factor (1/world: divided by the
// world size twice; world: summed, not averaged; another: the wrong count), only some
// tensors (their buckets; a factor of world: reduced twice; parameters a rank never
// produced: the ranks ran different graphs), or no common factor (the ranks did not
// average their own gradients: one rank's alone, the same data on every rank, another
// reduction); the loss of step 1 tells a forward on other data from a wrong loss mean.
#define _POSIX_C_SOURCE 200809L
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/safetensors.h"
#include "harness/families/families.h"

// how much of a rank's log is searched for its [DDP] no-gradient line
#define DDP_LOG_BYTES (256 * 1024)

// Each rank's first `[DDP] step=S rank=R no gradient: NAME[, NAME...]` line (a trainer without
// a bucket trace: the probe prints it when backward returns without those gradients):
// "rank R got no gradient for `a`, `b` at step S" into out; facts.ddp_no_gradient. Returns
// how many ranks said so.
static int no_gradient_lines(const CaseResult *r, Str *out, json_t *facts) {
    json_t *list = json_array();
    for (int k = 0; k < r->n_ranks; k++) {
        char *tail = read_tail(r->ranks[k].log_path, DDP_LOG_BYTES);
        char *save = NULL;
        for (char *ln = tail ? strtok_r(tail, "\n", &save) : NULL; ln; ln = strtok_r(NULL, "\n", &save)) {
            const char *tag = strstr(ln, "[DDP] step="), *ng = tag ? strstr(tag, " no gradient: ") : NULL;
            int step = -1, rank = -1;
            if (!ng || sscanf(tag, "[DDP] step=%d rank=%d", &step, &rank) != 2) continue;
            json_t *names = json_array();
            char *rest = (char *)ng + 14, *save2 = NULL;
            for (char *w = strtok_r(rest, ", \t\r", &save2); w; w = strtok_r(NULL, ", \t\r", &save2))
                json_array_append_new(names, json_string(w));
            if (out) {
                str_printf(out, "%srank %d got no gradient for ", json_array_size(list) ? "; " : "", rank);
                family_names_list(out, names, 4);
                str_printf(out, " at step %d", step);
            }
            json_array_append_new(list, json_pack("{s:i,s:i,s:o}", "step", step, "rank", rank, "params", names));
            break;   // its first: where it began
        }
        free(tail);
    }
    const int n = (int)json_array_size(list);
    if (facts) json_object_set_new(facts, "ddp_no_gradient", list);
    else json_decref(list);
    return n;
}

// A rank's gradient-arrival record, for a case without a bucket trace: the parameters it
// missed beyond its own expected_missing, "; no gradient: a, b" into md.
static void unexpected_missing(Str *md, const json_t *g) {
    const json_t *miss = json_object_get(g, "missing"), *exp = json_object_get(g, "expected_missing");
    json_t *names = json_array();
    size_t i, j;
    json_t *m, *e;
    json_array_foreach(miss, i, m) {
        int expected = 0;
        json_array_foreach(exp, j, e) expected |= json_equal(e, m);
        if (!expected) json_array_append(names, m);
    }
    if (json_array_size(names)) {
        str_add(md, "; no gradient: ");
        family_names_list(md, names, 4);
    }
    json_decref(names);
}

// The last step any bucket record of this case has.
static int last_bucket_step(const CaseResult *r) {
    int s = -1;
    size_t i;
    json_t *b;
    json_array_foreach(r->buckets, i, b) {
        int st = (int)json_number_or(b, "step", -1);
        if (st > s) s = st;
    }
    return s;
}

// Buckets never launched at the last traced step. Buckets launch in order, so
// behind one that cannot launch (parameters missing) the later ones queue: those
// with missing parameters are named, the queued ones counted.
// "rank R never launched bucket K (missing a, b) nor the N queued behind it".
// Returns how many buckets with missing parameters; fills facts.
static int unlaunched(const CaseResult *r, Str *out, json_t *facts) {
    int step = last_bucket_step(r), n = 0;
    size_t i;
    json_t *b;
    json_t *list = json_array();
    for (int rank = 0; rank < r->n_ranks; rank++) {
        int queued = 0, first_queued = -1, last_queued = -1, named = 0;
        json_array_foreach(r->buckets, i, b) {
            if ((int)json_number_or(b, "step", -1) != step || (int)json_number_or(b, "rank", -1) != rank ||
                json_is_true(json_object_get(b, "launched")))
                continue;
            int bucket = (int)json_number_or(b, "bucket", -1);
            const json_t *miss = json_object_get(b, "missing");
            if (!json_array_size(miss)) {
                if (named) {
                    queued++;
                    if (first_queued < 0) first_queued = bucket;
                    last_queued = bucket;
                }
                continue;
            }
            if (out) {
                str_printf(out, "%srank %d never launched bucket %d (missing ", n ? "; " : "", rank, bucket);
                family_names_list(out, miss, 4);
                str_add(out, ")");
            }
            json_array_append_new(list, json_pack("{s:i,s:i,s:i,s:O}", "step", step, "rank", rank, "bucket", bucket,
                                                  "missing", (json_t *)miss));
            n++;
            named = 1;
        }
        if (out && queued)
            str_printf(out, " and so none of the %d bucket%s queued behind it (%d–%d)", queued, queued == 1 ? "" : "s",
                       first_queued, last_queued);
    }
    if (facts) json_object_set_new(facts, "ddp_unlaunched", list);
    else json_decref(list);
    return n;
}

// The collective a bucket was launched as on the other ranks (same step and bucket).
static long long launched_as(const CaseResult *r, int step, int bucket, int *rank_out) {
    size_t i;
    json_t *b;
    json_array_foreach(r->buckets, i, b) {
        if ((int)json_number_or(b, "step", -1) == step && (int)json_number_or(b, "bucket", -1) == bucket &&
            json_is_true(json_object_get(b, "launched"))) {
            *rank_out = (int)json_number_or(b, "rank", -1);
            return (long long)json_number_or(b, "coll_seq", -1);
        }
    }
    return -1;
}

static const CaseResult *sibling(const ScenarioRun *sr, const CaseResult *r, const char *axis, const char *label) {
    // the case with the same labels except `axis`, which has `label`
    int ax = -1;
    for (int a = 0; a < sr->s->n_axes; a++)
        if (!strcmp(sr->s->axes[a].name, axis)) ax = a;
    if (ax < 0) return NULL;
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *q = &sr->results[i];
        int same = !strcmp(q->c->labels[ax], label);
        for (int a = 0; a < sr->s->n_axes && same; a++)
            if (a != ax) same = !strcmp(q->c->labels[a], r->c->labels[a]);
        if (same) return q;
    }
    return NULL;
}

// The finished case of this name, or NULL.
static const CaseResult *case_named(const ScenarioRun *sr, const char *name) {
    for (int i = 0; i < sr->done; i++)
        if (!strcmp(sr->results[i].c->name, name)) return &sr->results[i];
    return NULL;
}

// The case r's numbers were compared with (dump_match's or parity's reference) when it ran on
// fewer ranks than r — the one rank with the batch of all — else NULL (e.g. launchers.json
// compares launchers at one world size: not this comparison).
static const CaseResult *numbers_reference(const ScenarioRun *sr, const CaseResult *r) {
    const json_t *f = r->facts;
    const char *name = json_string_value(json_object_get(f, "dump_reference"));
    if (!name) name = json_string_value(json_object_get(f, "parity_reference"));
    if (!name) name = json_string_value(json_object_get(f, "parity_reference_grad_norm"));
    const CaseResult *ref = name ? case_named(sr, name) : NULL;
    if (!ref) return NULL;
    const int w = r->c->run.world_size > 0 ? r->c->run.world_size : 1;
    const int wr = ref->c->run.world_size > 0 ? ref->c->run.world_size : 1;
    return wr < w ? ref : NULL;
}

// The numbers against one rank, per case that compared (parity / dump_match facts): the
// largest relative difference of each and its tolerance.
static void rel_cell(Str *md, const json_t *f, const char *val, const char *tol) {
    const json_t *v = json_object_get(f, val), *t = json_object_get(f, tol);
    if (!json_is_number(v)) { str_add(md, " — |"); return; }
    double x = json_number_value(v);
    if (x < 0) str_add(md, " not finite");
    else if (x == 0) str_add(md, " 0 (bitwise)");
    else str_printf(md, " %.2g", x);
    if (json_is_number(t)) str_printf(md, " / %.2g", json_number_value(t));
    str_add(md, " |");
}

static void numbers_section(const ScenarioRun *sr, Str *md) {
    int any = 0;
    for (int i = 0; i < sr->done; i++) {
        const json_t *f = sr->results[i].facts;
        const CaseResult *ref = numbers_reference(sr, &sr->results[i]);
        if (!ref) continue;
        if (!any++)
            str_printf(md, "\n## %s — n ranks against one rank with the batch of all\n\nEach data-parallel case against "
                           "its reference (one rank, the same global batch): the largest relative difference over the "
                           "steps / the tolerance (loss, gradient norm), and the worst step-1 gradient (relative to the "
                           "tensor's largest magnitude) / the tolerance.\n\n| case | verdict | against | loss | grad norm | "
                           "step-1 gradients |\n|---|---|---|---|---|---|\n", sr->s->name);
        str_printf(md, "| %s | %s | %s |", sr->results[i].c->name, VERDICT_NAMES[sr->results[i].verdict], ref->c->name);
        rel_cell(md, f, "parity_max_rel", "parity_tolerance");
        rel_cell(md, f, "parity_max_rel_grad_norm", "parity_tolerance_grad_norm");
        rel_cell(md, f, "dump_worst_rel", "dump_tolerance");
        str_add(md, "\n");
    }
}

static void ddp_section(const ScenarioRun *sr, const char *report_dir, Str *md) {
    (void)report_dir;
    str_printf(md, "\n## %s — per rank\n\n| case | verdict | rank | grads arrived | buckets launched | collectives "
                   "enq / started / done | compute ms | comm wait ms |\n|---|---|---|---|---|---|---|---|\n", sr->s->name);
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        if (r->verdict == V_SKIP) {
            str_printf(md, "| %s | SKIP | — | — | — | — | — | — |\n", r->c->name);
            continue;
        }
        for (int k = 0; k < r->n_ranks; k++) {
            const RankResult *rk = &r->ranks[k];
            str_printf(md, "| %s | %s | %d | ", k == 0 ? r->c->name : "", k == 0 ? VERDICT_NAMES[r->verdict] : "", k);
            // gradient arrival: the rank's last record
            const json_t *g = NULL;
            size_t j;
            json_t *x;
            json_array_foreach(r->grad_trace, j, x) if ((int)json_number_or(x, "rank", -1) == k) g = x;
            if (g) str_printf(md, "%d/%d", (int)json_number_or(g, "arrived", 0), (int)json_number_or(g, "n_params", 0));
            else str_add(md, "—");
            if (g && !json_array_size(r->buckets)) {   // no bucket trace: what the gradient trace says
                str_printf(md, " (step %d", (int)json_number_or(g, "step", -1));
                unexpected_missing(md, g);
                str_add(md, ")");
            }
            // buckets at the last step
            int step = last_bucket_step(r), nb = 0, nl = 0;
            json_array_foreach(r->buckets, j, x) {
                if ((int)json_number_or(x, "rank", -1) != k || (int)json_number_or(x, "step", -1) != step) continue;
                nb++;
                nl += json_is_true(json_object_get(x, "launched"));
            }
            if (nb) str_printf(md, " | %d/%d (step %d) | ", nl, nb, step);
            else str_add(md, " | — | ");
            if (rk->have_state)
                str_printf(md, "%lld / %lld / %lld | ", rk->coll_enqueued, rk->coll_started, rk->coll_completed);
            else str_add(md, "— | ");
            double cm = 0, cw = 0;
            int n = 0;
            json_array_foreach(r->rank_times, j, x) {
                if ((int)json_number_or(x, "rank", -1) != k) continue;
                cm += json_number_or(x, "compute_ms", 0);
                cw += json_number_or(x, "comm_wait_ms", 0);
                n++;
            }
            if (n) str_printf(md, "%.1f | %.1f |\n", cm / n, cw / n);
            else str_add(md, "— | — |\n");
        }
    }
    str_add(md, "\nCompute and communication-wait times are per-step means; a rank whose wait is much longer than the "
                "others' waits for a slower (or stuck) rank.");
    int traced = 1;
    for (int i = 0; i < sr->n; i++)
        traced &= sr->results[i].verdict == V_SKIP || json_array_size(sr->results[i].buckets) > 0;
    if (!traced)
        str_add(md, " A case without a bucket trace (a trainer that writes no buckets.jsonl or rank_times.jsonl, "
                    "e.g. a map trainer through the probe) shows its gradient trace: the last step each rank traced "
                    "and the gradients it missed beyond its own expected set.");
    str_add(md, "\n");
    numbers_section(sr, md);
}

// ---- numbers: n ranks against one rank with the batch of all ---------------------------

// A FAIL that only the numbers checks (parity, dump_match) gave: the case ran to the end and
// its gradients arrived as expected; only its numbers differ from its reference's.
static int numbers_only_fail(const CaseResult *r) {
    int numbers = 0, other = 0;
    if (r->verdict != V_FAIL) return 0;
    for (int k = 0; k < r->n_findings; k++) {
        const Finding *f = &r->findings[k];
        if (f->ok) continue;
        if (!strcmp(f->check, "parity") || !strcmp(f->check, "dump_match")) numbers++;
        else other++;
    }
    return numbers && !other;
}

// metrics.jsonl's `key` at step `step` (NAN when absent)
static double metric_at(const CaseResult *r, int step, const char *key) {
    size_t i;
    json_t *m;
    json_array_foreach(r->metrics, i, m) if ((int)json_number_or(m, "step", -1) == step) return json_number_or(m, key, NAN);
    return NAN;
}

// The step-1 gradients of a case against its reference's, over the tensors dump_match found
// differing: per tensor the factor f = <a,b>/<b,b> that best maps the reference's onto the
// case's and the residual ||a - f b|| / ||a||; their range and the largest residual. n_grads:
// the reference dump's gradient tensors that are not all zero. 0, or -1 when a dump cannot
// be read.
typedef struct {
    int n_grads, n;
    double f_lo, f_hi, resid;
} GradFactors;

static int grad_factors(const char *cand, const char *ref, const json_t *differs, GradFactors *g) {
    StFile a, b;
    char err[512];
    memset(g, 0, sizeof *g);
    g->f_lo = INFINITY;
    g->f_hi = -INFINITY;
    st_init(&a);
    st_init(&b);
    if (st_read(&a, cand, err, sizeof err) || st_read(&b, ref, err, sizeof err)) {
        st_free(&a);
        st_free(&b);
        return -1;
    }
    for (int i = 0; i < b.n_tensors; i++) {   // gradients that are not all zero (a parameter no rank uses is)
        const StTensor *y = &b.tensors[i];
        if (strncmp(y->name, "grads.", 6)) continue;
        size_t n = y->nbytes / st_dtype_size(y->dtype), e = 0;
        while (e < n && st_elem_f64(y, e) == 0) e++;
        g->n_grads += e < n;
    }
    size_t k;
    json_t *nm;
    json_array_foreach(differs, k, nm) {
        const StTensor *x = st_find(&a, json_string_value(nm)), *y = st_find(&b, json_string_value(nm));
        if (!x || !y || x->nbytes != y->nbytes || x->dtype != y->dtype) continue;
        size_t n = y->nbytes / st_dtype_size(y->dtype);
        double ab = 0, bb = 0, aa = 0;
        for (size_t e = 0; e < n; e++) {
            double u = st_elem_f64(x, e), v = st_elem_f64(y, e);
            ab += u * v;
            bb += v * v;
            aa += u * u;
        }
        if (!(bb > 0) || !isfinite(ab) || !isfinite(aa)) continue;
        double f = ab / bb, rr = 0;
        for (size_t e = 0; e < n; e++) {
            double d = st_elem_f64(x, e) - f * st_elem_f64(y, e);
            rr += d * d;
        }
        g->n++;
        g->f_lo = fmin(g->f_lo, f);
        g->f_hi = fmax(g->f_hi, f);
        g->resid = fmax(g->resid, aa > 0 ? sqrt(rr / aa) : 0);
    }
    st_free(&a);
    st_free(&b);
    return 0;
}

// One factor maps the reference's differing gradients onto the case's (within 1e-3)?
static int common_factor(const GradFactors *g) {
    return g->n > 0 && g->resid < 1e-3 && g->f_hi - g->f_lo <= 1e-3 * fabs(g->f_hi);
}
static int near(double x, double want) { return fabs(x - want) <= 1e-3 * fabs(want); }

// The buckets (step 1, rank 0's records) that hold the differing gradients' parameters, into md.
static void name_buckets(const CaseResult *r, const json_t *differs, Str *md) {
    json_t *ks = json_array();
    int nb = 0;
    size_t i, j, k;
    json_t *b, *p, *nm;
    json_array_foreach(r->buckets, i, b) {
        if ((int)json_number_or(b, "step", -1) != 1 || (int)json_number_or(b, "rank", -1) != 0) continue;
        nb++;
        int hit = 0;
        json_array_foreach(json_object_get(b, "params"), j, p) {
            json_array_foreach(differs, k, nm) {
                const char *t = json_string_value(nm);
                hit |= t && !strncmp(t, "grads.", 6) && json_is_string(p) && !strcmp(t + 6, json_string_value(p));
            }
        }
        if (hit) json_array_append_new(ks, json_integer((json_int_t)json_number_or(b, "bucket", -1)));
    }
    if (json_array_size(ks)) {
        str_printf(md, " (bucket%s ", json_array_size(ks) == 1 ? "" : "s");
        family_names_list(md, ks, 6);
        str_printf(md, " of %d)", nb);
    }
    json_decref(ks);
}

// The rank whose gradient-arrival trace at step 1 misses every differing parameter, or -1.
static int rank_missing_all(const CaseResult *r, const json_t *differs) {
    size_t i, j, k;
    json_t *g, *m, *nm;
    json_array_foreach(r->grad_trace, i, g) {
        if ((int)json_number_or(g, "step", -1) != 1) continue;
        int all = json_array_size(differs) > 0;
        json_array_foreach(differs, k, nm) {
            const char *t = json_string_value(nm);
            int found = 0;
            json_array_foreach(json_object_get(g, "missing"), j, m)
                found |= t && !strncmp(t, "grads.", 6) && json_is_string(m) && !strcmp(t + 6, json_string_value(m));
            all &= found;
        }
        if (all) return (int)json_number_or(g, "rank", -1);
    }
    return -1;
}

// "- **scenario · case**: W ranks do not train like one rank with the batch of all (`ref`): how."
static void numbers_diagnose(const ScenarioRun *sr, const CaseResult *r, Str *md) {
    const json_t *f = r->facts;
    const CaseResult *ref = numbers_reference(sr, r);
    if (!ref) return;
    const int W = r->c->run.world_size > 0 ? r->c->run.world_size : r->n_ranks;
    str_printf(md, "- **%s · %s**: %d ranks do not train like one rank with the batch of %s (`%s`): ", sr->s->name,
               r->c->name, W, W == 2 ? "both" : "all", ref->c->name);
    const double l1 = metric_at(r, 1, "loss"), l1r = metric_at(ref, 1, "loss");
    const double g1 = metric_at(r, 1, "grad_norm"), g1r = metric_at(ref, 1, "grad_norm");
    const int loss_step1 = (int)json_number_or(f, "first_diverging_step", 0) == 1;
    const json_t *differs = json_object_get(f, "dump_differs");
    GradFactors g;
    int have = json_array_size(differs) && r->dump_path[0] && ref->dump_path[0] &&
               grad_factors(r->dump_path, ref->dump_path, differs, &g) == 0 && g.n > 0;
    const int nd = (int)json_array_size(differs);
    const int rk = have ? rank_missing_all(r, differs) : -1;
    if (rk >= 0) {
        str_printf(md, "only %d of %d step-1 gradients differ from one rank's: ", nd, g.n_grads);
        family_names_list(md, differs, 4);
        name_buckets(r, differs, md);
        str_printf(md, "; rank %d produced no gradient for %s at step 1 (its gradient-arrival trace): the ranks ran "
                       "different graphs and the reduction averaged that rank's zero in — the numbers differ as they "
                       "must, the reduction itself is not at fault", rk, nd == 1 ? "it" : "them");
    } else if (have && common_factor(&g)) {
        const double fc = 0.5 * (g.f_lo + g.f_hi);
        if (nd >= g.n_grads) {
            str_printf(md, "every step-1 gradient (%d tensors) is %.4g× one rank's (grad norm %.6g vs %.6g)", nd, fc, g1, g1r);
            if (near(fc * W, 1))
                str_printf(md, ": 1/%d, the world size — the mean over the ranks is divided by the world size once too "
                               "often (the loss scale holds 1/world and the all-reduce sums: nothing else may divide)", W);
            else if (near(fc, W))
                str_printf(md, ": %d×, the world size — the ranks' gradients are summed, not averaged (the loss scale's "
                               "1/world is missing)", W);
            else
                str_printf(md, ": one scale for every tensor — the mean is taken over the wrong count (as if over %.3g "
                               "ranks' sequences instead of %d)", W / fc, W);
        } else {
            str_printf(md, "only %d of %d step-1 gradients differ, each %.4g× one rank's: ", nd, g.n_grads, fc);
            family_names_list(md, differs, 4);
            name_buckets(r, differs, md);
            if (near(fc, W))
                str_printf(md, "; %d×, the world size: that gradient was summed over the ranks once more (a bucket "
                               "reduced twice)", W);
            else str_add(md, "; the reduction of those parameters is wrong");
        }
    } else if (have) {
        str_printf(md, "%d of %d step-1 gradients differ from one rank's and not by one factor (worst `%s`, relative "
                   "%.3g)", nd, g.n_grads, json_string_value(json_array_get(differs, 0)),
                   json_number_or(f, "dump_worst_rel", NAN));
        if (loss_step1) {
            str_printf(md, ", and the loss of step 1 already differs (%.9g vs %.9g): the ranks' forward did not see the "
                           "sequences of one rank's batch (each rank must read its own slice of the global batch)", l1, l1r);
        } else {
            str_add(md, ": the ranks did not average their own gradients — one rank's gradients used alone, the same data "
                        "on every rank, a reduction other than the sum");
            if (r->c->cfg.grad_accum > 1)
                str_printf(md, ", or a reduction before the step's last micro-batch (grad_accum %d: only the last may "
                               "reduce)", r->c->cfg.grad_accum);
        }
    } else if (loss_step1) {
        str_printf(md, "the loss of step 1 is %.4g× one rank's (%.9g vs %.9g) while the step-1 gradients agree", l1 / l1r,
                   l1, l1r);
        if (near(l1 / l1r, W)) str_add(md, ": the loss is summed over the ranks, not averaged");
        else str_add(md, ": the loss mean over the ranks is wrong");
    } else if (json_object_get(f, "first_diverging_step_grad_norm")) {
        str_printf(md, "the gradient norm parts at step %d (%.9g vs %.9g at step 1) while the step-1 gradients agree: "
                       "the norm is not computed from the reduced gradients",
                   (int)json_number_or(f, "first_diverging_step_grad_norm", 0), g1, g1r);
    } else if (json_object_get(f, "first_diverging_step")) {
        str_printf(md, "the loss parts at step %d while the step-1 gradients and gradient norm agree: the update differs "
                       "(optimizer state, learning rate, clipping)", (int)json_number_or(f, "first_diverging_step", 0));
    } else {
        str_add(md, "see the parity and dump_match findings below");
    }
    str_add(md, ".\n");
}

// The end of a hang's diagnosis: where it starts, and what the sibling cases (find_unused,
// the other transport) say about it; the sentence's end.
static void ddp_siblings(const ScenarioRun *sr, int i, const CaseResult *r, Str *md) {
    str_printf(md, ". The %s starts in the backward of the rank(s) that never produced those gradients",
               r->verdict == V_HANG ? "hang" : "failure");
    const CaseResult *fu = sibling(sr, r, "mode", "find_unused");
    if (fu && fu->verdict == V_PASS)
        str_printf(md, "; with find_unused the same configuration passes (`%s`), so the parameters are unused on "
                       "those ranks' graph this step (divergent control flow, or a branch that is off): mark unused "
                       "parameters ready (find_unused) or make every rank run the same graph", fu->c->name);
    else if (fu && numbers_only_fail(fu))
        str_printf(md, "; with find_unused the same configuration runs to the end (`%s`; only its numbers differ from "
                       "one rank's), so the parameters are unused on those ranks' graph this step (divergent control "
                       "flow, or a branch that is off): mark unused parameters ready (find_unused) or make every rank "
                       "run the same graph", fu->c->name);
    else if (fu && fu->verdict != V_SKIP)
        str_printf(md, "; find_unused does not help (`%s` is %s): the gradient is not merely unused, it is lost",
                   fu->c->name, VERDICT_NAMES[fu->verdict]);
    const char *tr = family_label_on(sr, i, "transport");
    if (tr) {
        const CaseResult *ot = sibling(sr, r, "transport", !strcmp(tr, "nccl") ? "mpi" : "nccl");
        if (ot && ot->verdict == V_HANG)
            str_printf(md, "; both transports hang the same way (`%s` too): the training graph, not the transport", ot->c->name);
        else if (ot && ot->verdict == V_PASS)
            str_printf(md, "; the %s transport passes the same configuration (`%s`): suspect the %s transport",
                       !strcmp(tr, "nccl") ? "mpi" : "nccl", ot->c->name, tr);
    }
    str_add(md, ".\n");
}

static void ddp_diagnose(const ScenarioRun *sr, Str *md) {
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        if (i < sr->done && numbers_only_fail(r)) numbers_diagnose(sr, r, md);
        if (r->verdict != V_HANG && r->verdict != V_CRASH) continue;
        Str why = {0};
        json_t *facts = ((CaseResult *)r)->facts;
        int n = r->verdict == V_HANG ? unlaunched(r, &why, facts) : 0;
        int told = 0;   // ranks with a [DDP] no-gradient line
        if (!n && !json_array_size(r->buckets) && (told = no_gradient_lines(r, &why, facts)) > 0) {
            // no bucket trace: the ranks' [DDP] no-gradient lines say where it starts
            str_printf(md, "- **%s · %s**: %s (%s `[DDP] ... no gradient` line%s, printed when backward returned); %s",
                       sr->s->name, r->c->name, str_c(&why), told == 1 ? "its" : "their", told == 1 ? "" : "s",
                       r->verdict == V_HANG ? "the other ranks wait for those gradients in the all-reduce"
                                            : "DistributedDataParallel's reduction could not finish, and the run "
                                              "failed (each rank's message and stack are in its evidence)");
            ddp_siblings(sr, i, r, md);
            str_free(&why);
            continue;
        }
        if (!n || r->verdict != V_HANG) {   // the generic diagnosis (phase, stack) is all there is
            str_free(&why);
            continue;
        }
        str_printf(md, "- **%s · %s**: %s", sr->s->name, r->c->name, str_c(&why));
        const json_t *first = json_array_get(json_object_get(facts, "ddp_unlaunched"), 0);
        int other = -1;
        long long seq = launched_as(r, (int)json_number_or(first, "step", -1), (int)json_number_or(first, "bucket", -1), &other);
        if (seq > 0)
            str_printf(md, "; rank %d launched that bucket as allreduce seq %lld and waits inside it for the ranks that "
                           "never joined", other, seq);
        else {
            // the waiting ranks never wrote that step's bucket records: their flight
            // recorders say which collective they are inside
            int said = 0;
            for (int k = 0; k < r->n_ranks; k++) {
                const RankResult *rk = &r->ranks[k];
                if (!rk->have_state || rk->coll_started <= rk->coll_completed) continue;
                str_printf(md, "%s rank %d is inside collective seq %lld (started, never completed)", said ? ";" : ";",
                           k, rk->coll_started);
                said = 1;
            }
            for (int k = 0; k < r->n_ranks && said; k++) {
                const RankResult *rk = &r->ranks[k];
                if (rk->have_state && rk->coll_started == rk->coll_completed)
                    str_printf(md, "; rank %d completed seq %lld and never started the next", k, rk->coll_completed);
            }
            if (!said) str_add(md, "; no rank launched it: every rank waits for it at the end of backward");
        }
        ddp_siblings(sr, i, r, md);
        str_free(&why);
    }
}

const FamilyDef family_ddp_onestep = {
    .name = "ddp_onestep",
    .summary = "data parallel over mpi/nccl x default/find_unused/static_graph: per-rank arrival, buckets, collectives",
    .diagnose = ddp_diagnose,
    .section = ddp_section,
    .dump_reads = "grads.*",
};
