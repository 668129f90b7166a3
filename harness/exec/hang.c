// harness/exec/hang.c — see hang.h.
#define _POSIX_C_SOURCE 200809L
#include "harness/core/home.h"
#include "harness/exec/hang.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/flightrec_layout.h"
#include "harness/artifacts/pystack.h"


void hang_read_wait(const volatile void *fr_header, RankResult *rk) {
    const volatile FrHeader *h = fr_header;
    rk->wait_seq = 0;
    rk->wait_step = 0;
    rk->wait_name[0] = '\0';
    if (!h) return;
    FrEvent *ev = malloc(sizeof(FrEvent) * FR_RING);   // (cases side by side read their rings at once)
    if (!ev) return;
    int n = 0;
    FrState st;
    fr_read_events(h, ev, FR_RING, &n, &st);
    if (st.coll_enqueued <= st.coll_completed) {
        free(ev);
        return;
    }
    const int64_t seq = st.coll_completed + 1;
    rk->wait_seq = seq;
    for (int i = n - 1; i >= 0; i--)   // the newest record of that collective's enqueue
        if (ev[i].kind == FR_KIND_COLLECTIVE && ev[i].coll_seq == seq && ev[i].aux == FR_COLL_ENQUEUED) {
            snprintf(rk->wait_name, sizeof rk->wait_name, "%.*s", FR_OP_LEN, ev[i].op);
            rk->wait_step = ev[i].step;
            free(ev);
            return;
        }
    free(ev);
    snprintf(rk->wait_name, sizeof rk->wait_name, "seq %lld (older than the ring)", (long long)seq);
}

// "fault_hang (trainer/faults.c:306)" from a symbolized line
// "  #3  fault_hang at /src/trainer/faults.c:306  [nsa-train]"; the path is cut to its
// last two components.
static void short_frame(const char *line, char *out, size_t n) {
    const char *p = line;
    while (*p == ' ' || *p == '#' || (*p >= '0' && *p <= '9')) p++;
    const char *at = strstr(p, " at ");
    if (!at) {
        snprintf(out, n, "%.*s", (int)strcspn(p, "["), p);
        return;
    }
    const char *path = at + 4, *end = path + strcspn(path, " \n");
    const char *tail = end, *slashes = NULL;
    int seen = 0;
    while (tail > path && seen < 2) {
        tail--;
        if (*tail == '/') {
            seen++;
            slashes = tail;
        }
    }
    const char *shown = seen == 2 ? slashes + 1 : path;
    snprintf(out, n, "%.*s (%.*s)", (int)(at - p), p, (int)(end - shown), shown);
}

void hang_read_stack_top(RankResult *rk) {
    rk->stack_top[0] = '\0';
    char *text = read_file(rk->stack_path, NULL);   // a Python trainer's faulthandler dump?
    const int py = text && pystack_top(text, harness_home(), rk->stack_top, sizeof rk->stack_top) == 0;
    const int readable = text != NULL;   // a regular file within read_file's limit
    free(text);
    if (py || !readable) return;
    FILE *f = fopen(rk->stack_path, "r");
    if (!f) return;
    char line[2048];
    int in_symbols = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "symbolized")) in_symbols = 1;
        else if (in_symbols && strstr(line, "[nsa-train]")) {
            // the innermost frame of our own code; a frame inlined into it follows as
            // "(inlined by) caller at file:line": name the caller too, it says more
            short_frame(line, rk->stack_top, sizeof rk->stack_top);
            char next[2048];
            if (fgets(next, sizeof next, f) && strstr(next, "(inlined by)")) {
                char caller[200];
                short_frame(strstr(next, "(inlined by)") + 12, caller, sizeof caller);
                size_t l = strlen(rk->stack_top);
                snprintf(rk->stack_top + l, sizeof rk->stack_top - l, " in %s", caller);
            }
            break;
        }
    }
    fclose(f);
}

// The parameters of bucket `b` (any record of it: the layout is the same every step).
static const json_t *bucket_params(const CaseResult *r, int b) {
    size_t i;
    json_t *rec;
    json_array_foreach(r->buckets, i, rec) if ((int)json_number_or(rec, "bucket", -1) == b)
        return json_object_get(rec, "params");
    return NULL;
}

static void rank_list(Str *s, const int *ranks, int n) {
    for (int i = 0; i < n; i++) str_printf(s, "%s%d", i ? (i == n - 1 ? " and " : ", ") : "", ranks[i]);
}

void hang_forensics(CaseResult *r, Str *ev) {
    const int W = r->n_ranks;
    if (W < 2) return;
    // the table: where every rank is
    str_add(ev, "\n| rank | answered SIGUSR1 | phase · step · layer · op | collectives enqueued / started / completed | "
                "waiting in | stack (innermost frame of the trainer's own code) |\n|---|---|---|---|---|---|\n");
    for (int k = 0; k < W; k++) {
        const RankResult *q = &r->ranks[k];
        str_printf(ev, "| %d%s | %s | ", q->rank, result_rank_host(r, k), q->dumped ? "yes, stack written" : q->signalled ? "no stack" : "not asked");
        if (q->have_state && q->heartbeat_file)
            str_printf(ev, "%s · %d · %d · %s | — (heartbeat file: no collective counters) | ", q->phase, q->step, q->layer,
                       q->op[0] ? q->op : "-");
        else if (q->have_state)
            str_printf(ev, "%s · %d · %d · %s | %lld / %lld / %lld | ", q->phase, q->step, q->layer, q->op[0] ? q->op : "-",
                       q->coll_enqueued, q->coll_started, q->coll_completed);
        else str_add(ev, "no flight recorder | — | ");
        if (q->wait_seq) str_printf(ev, "seq %lld: %s (step %lld) | ", q->wait_seq, q->wait_name, q->wait_step);
        else str_add(ev, "— | ");
        str_add_md_cell(ev, q->stack_top[0] ? q->stack_top : "—");
        str_add(ev, " |\n");
    }
    // the collective the waiting ranks are in: the oldest one any of them waits for
    long long seq = 0;
    const RankResult *w0 = NULL;
    for (int k = 0; k < W; k++) {
        const RankResult *q = &r->ranks[k];
        if (q->wait_seq && (!seq || q->wait_seq < seq)) {
            seq = q->wait_seq;
            w0 = q;
        }
    }
    if (!seq) return;
    int *waiting = xcalloc((size_t)W, sizeof(int)), *absent = xcalloc((size_t)W, sizeof(int));
    int nw = 0, na = 0;
    json_t *jw = json_array(), *ja = json_array();
    for (int k = 0; k < W; k++) {
        const RankResult *q = &r->ranks[k];
        if (!q->have_state) continue;
        if (q->coll_enqueued < seq) {
            absent[na++] = q->rank;
            json_array_append_new(ja, json_integer(q->rank));
        } else if (q->coll_completed < seq) {
            waiting[nw++] = q->rank;
            json_array_append_new(jw, json_integer(q->rank));
        }
    }
    json_object_set_new(r->facts, "hang_wait_seq", json_integer(seq));
    json_object_set_new(r->facts, "hang_wait_collective", json_string(w0->wait_name));
    json_object_set_new(r->facts, "hang_waiting_ranks", jw);
    json_object_set_new(r->facts, "hang_never_joined", ja);
    Str c = {0};
    str_add(&c, "- **who never joined**: rank");
    str_add(&c, nw == 1 ? " " : "s ");
    rank_list(&c, waiting, nw);
    str_printf(&c, " wait%s in collective seq %lld, `%s` of step %lld", nw == 1 ? "s" : "", seq, w0->wait_name,
               w0->wait_step);
    int b = -1;
    if (sscanf(w0->wait_name, "allreduce b%d", &b) == 1) {
        const json_t *ps = bucket_params(r, b);
        if (ps) {
            str_printf(&c, " (gradient bucket %d: ", b);
            size_t i;
            json_t *p;
            json_array_foreach(ps, i, p) {
                if (i == 6) {
                    str_printf(&c, ", … %zu more", json_array_size(ps) - 6);
                    break;
                }
                str_printf(&c, "%s`%s`", i ? ", " : "", json_string_value(p));
            }
            str_add(&c, ")");
            json_object_set(r->facts, "hang_bucket_params", (json_t *)ps);
        }
    }
    if (na) {
        str_add(&c, "; rank");
        str_add(&c, na == 1 ? " " : "s ");
        rank_list(&c, absent, na);
        str_printf(&c, " never enqueued it:");
        for (int i = 0; i < na; i++) {
            const RankResult *q = &r->ranks[absent[i]];
            str_printf(&c, "%s rank %d%s reached seq %lld (`%s`) and is in %s of step %d", i ? ";" : "", q->rank,
                       result_rank_host(r, q->rank), q->coll_enqueued, q->coll_name, q->phase, q->step);
            if (q->layer >= 0) str_printf(&c, ", layer %d", q->layer);
            if (q->stack_top[0]) str_printf(&c, ", at %s", q->stack_top);
        }
    } else {
        str_add(&c, "; every rank enqueued it: the collective itself does not complete (the transport, not the "
                    "training graph — compare with the other transport)");
    }
    str_add(&c, ".\n");
    str_add(ev, str_c(&c));
    str_free(&c);
    free(waiting);
    free(absent);
}
