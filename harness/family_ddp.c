// harness/family_ddp.c — data-parallel one-step traces: per case, what every
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
#define _POSIX_C_SOURCE 200809L
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/family_impl.h"

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

void ddp_section(const ScenarioRun *sr, const char *report_dir, Str *md) {
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

void ddp_diagnose(const ScenarioRun *sr, Str *md) {
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
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
