// trainer/ddp.c — data-parallel gradient buckets (see ddp.h, docs/ddp.md).
//
// Life of a bucket in one reducing backward:
//   pending = its parameters (static_graph from step 2: the recorded ones)
//   grad_ready(p) ... pending reaches 0: ready (ready_ms)
//   launched in bucket order as soon as it and every lower bucket are ready: a
//     global per-rank collective sequence number (seq), FR_COLL_ENQUEUED
//   progressed by comm_test from every later grad_ready and from the wait:
//     FR_COLL_STARTED, FR_COLL_COMPLETED (in bucket order)
//   one OUT/buckets.jsonl record per bucket when the step's reduction is over
//     (before the wait when a bucket can never launch, or at a timeout).
// Waiting never blocks without a bound and never advances the flight-recorder
// heartbeat by itself: only a collective that makes progress is recorded.
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "trainer/ddp.h"
#include "trainer/faults.h"
#include "trainer/jsonl.h"
#include "trainer/flightrec.h"
#include "trainer/ioerr.h"
#include "common/exit_codes.h"

typedef struct {
    int id_lo, id_hi;        // parameters id_hi down to id_lo (bucket order)
    int64_t off, n;          // element range in the gradient buffer
    int pending;             // parameters still to arrive in this reducing backward
    int launched, completed, started_rec;
    int64_t seq;             // collective sequence number once launched
    double ready_t, launch_t, complete_t;   // CLOCK_MONOTONIC seconds, < 0: not (yet)
    char name[24];           // "allreduce b3"
} Bucket;

struct Ddp {
    Model *m;
    Comm *comm;
    int rank, world, mode, transport;
    double timeout_s, bucket_mb;
    struct Faults *faults;
    int nb;
    Bucket *b;
    int *param_bucket;       // [P]
    uint8_t *arrived;        // [P] in this reducing backward
    uint8_t *used;           // [P] static_graph: the set recorded at the first step
    int recorded;            // static_graph: used[] holds the record
    int armed;               // between ddp_begin_backward(reduce = 1) and ddp_finish_backward
    int warm;                // a reducing backward has completed in this process
    int defer;               // this backward launches nothing before its end (nccl, first one)
    int static_diff;         // static_graph: this step's set differs from the record (this rank)
    int next_launch;         // lowest bucket not launched
    int first_open;          // lowest bucket not completed
    int64_t seq;             // collectives this rank started (buckets and control plane)
    int64_t step;
    double t_bwd0;           // start of the reducing backward
    double wait_s;           // this step's time waiting for collectives
    int records_written;     // this step's buckets.jsonl records are out (or not wanted)
    int aborted;
    int fd_buckets, fd_times;
    char path_buckets[1100], path_times[1100];   // their paths, for [IO-ERROR] (trainer/ioerr.h)
    int eb;                  // gradient element bytes
    const char *dtype;       // "f32", "f64"
    int failed;              // an asynchronous launch/test error (err, failed_bucket)
    int failed_bucket;
    char err[1024];
};

// sleep *us microseconds, then double it up to 1 ms (a poll's backoff)
static void nap(long *us) {
    sleep_s((double)*us * 1e-6);
    if (*us < 1000) *us *= 2;
}

static const char *pname(const Ddp *d, int id) { return d->m->params[id].name; }

// "a,b,c" of the bucket's parameters in bucket order; only the missing ones if `missing`.
static char *bucket_names(const Ddp *d, const Bucket *b, int missing) {
    Str s = {0};
    for (int id = b->id_hi; id >= b->id_lo; id--) {
        if (missing && d->arrived[id]) continue;
        if (s.len) str_add(&s, ",");
        str_add(&s, pname(d, id));
    }
    return str_take(&s);
}

static json_t *ms_or_null(const Ddp *d, double t) {
    return t < 0 ? json_null() : json_real((double)(int64_t)((t - d->t_bwd0) * 1e6 + 0.5) / 1e3);
}

// One OUT/buckets.jsonl record per bucket for this step (format: docs/ddp.md).
static void write_records(Ddp *d) {
    if (d->records_written) return;
    d->records_written = 1;
    for (int k = 0; k < d->nb; k++) {
        const Bucket *b = &d->b[k];
        json_t *r = json_object();
        json_object_set_new(r, "step", json_integer(d->step));
        json_object_set_new(r, "rank", json_integer(d->rank));
        json_object_set_new(r, "bucket", json_integer(k));
        json_object_set_new(r, "elements", json_integer(b->n));
        json_object_set_new(r, "bytes", json_integer(b->n * d->eb));
        json_object_set_new(r, "dtype", json_string(d->dtype));
        json_t *ps = json_array(), *miss = json_array();
        for (int id = b->id_hi; id >= b->id_lo; id--) {
            json_array_append_new(ps, json_string(pname(d, id)));
            if (!d->arrived[id]) json_array_append_new(miss, json_string(pname(d, id)));
        }
        json_object_set_new(r, "params", ps);
        json_object_set_new(r, "ready_ms", ms_or_null(d, b->ready_t));
        json_object_set_new(r, "launched", json_boolean(b->launched));
        json_object_set_new(r, "coll_seq", b->launched ? json_integer(b->seq) : json_null());
        json_object_set_new(r, "launch_ms", ms_or_null(d, b->launched ? b->launch_t : -1));
        json_object_set_new(r, "complete_ms", ms_or_null(d, b->completed ? b->complete_t : -1));
        json_object_set_new(r, "missing", miss);
        char *js = json_dumps(r, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
        json_decref(r);
        jsonl_write(d->fd_buckets, js, d->path_buckets);   // a failure: io_error, exit 6 at the step's end
        free(js);
    }
}

static void fail(Ddp *d, int k, const char *why) {
    if (d->failed) return;
    d->failed = 1;
    d->failed_bucket = k;
    snprintf(d->err, sizeof d->err, "%s", why);
}

static void launch(Ddp *d, int k) {
    Bucket *b = &d->b[k];
    b->seq = ++d->seq;
    b->launched = 1;
    b->launch_t = mono_s();
    flightrec_collective(FR_COLL_ENQUEUED, b->seq, b->name, d->step);
    char *g = (char *)d->m->grad_mem + (size_t)b->off * (size_t)d->eb;
    if (comm_allreduce_start(d->comm, k, g, b->n, d->eb)) fail(d, k, comm_error(d->comm));
}

// Launch every ready bucket whose predecessors are launched (the same order on every rank).
static void try_launch(Ddp *d) {
    if (d->defer) return;
    while (!d->failed && d->next_launch < d->nb && d->b[d->next_launch].pending == 0) launch(d, d->next_launch++);
}

// Test the launched, incomplete buckets in order (so the recorder's counters only
// grow); stop at the first one still in flight.
static void progress(Ddp *d) {
    while (!d->failed && d->first_open < d->next_launch) {
        Bucket *b = &d->b[d->first_open];
        int started = 0;
        int r = comm_test(d->comm, d->first_open, &started);
        if (r < 0) { fail(d, d->first_open, comm_error(d->comm)); return; }
        if (started && !b->started_rec) {
            b->started_rec = 1;
            flightrec_collective(FR_COLL_STARTED, b->seq, b->name, d->step);
        }
        if (r == 0) return;
        b->completed = 1;
        b->complete_t = mono_s();
        flightrec_collective(FR_COLL_COMPLETED, b->seq, b->name, d->step);
        d->first_open++;
    }
}

// The lowest incomplete bucket did not complete: say which collective, which
// parameters, and why; write the step's records; abort the transport.
static int report_stuck(Ddp *d, int timed_out) {
    int k = d->failed ? d->failed_bucket : d->first_open;
    if (k >= d->nb) k = d->nb - 1;
    Bucket *b = &d->b[k];
    int64_t seq = b->launched ? b->seq : d->seq + 1 + (k - d->next_launch);
    char *names = bucket_names(d, b, 0);
    if (timed_out)
        fprintf(stderr, "[COMM-TIMEOUT] rank %d: collective seq %" PRId64 " (bucket %d: %s) not complete after %g s\n",
                d->rank, seq, k, names, d->timeout_s);
    else
        fprintf(stderr, "[COMM-ERROR] rank %d: collective seq %" PRId64 " (bucket %d: %s) failed: %s\n", d->rank, seq, k,
                names, d->err);
    free(names);
    if (!b->launched) {
        char *miss = bucket_names(d, b, 1);
        fprintf(stderr, "[COMM-TIMEOUT] rank %d: bucket %d was never launched on this rank: missing %s\n", d->rank, k,
                miss[0] ? miss : "(none: an earlier bucket was not launched)");
        free(miss);
    }
    fprintf(stderr,
            "[COMM-TIMEOUT] rank %d: step %" PRId64 " transport %s: %d of %d buckets launched, %d completed; "
            "collectives started by this rank: %" PRId64 "\n",
            d->rank, d->step, comm_transport_name(d->transport), d->next_launch, d->nb, d->first_open, d->seq);
    fflush(stderr);
    write_records(d);
    comm_abort(d->comm);
    d->aborted = 1;
    return NSA_EXIT_COMM_TIMEOUT;
}

int ddp_comm_wait(Ddp *d) {
    const double t0 = mono_s();
    long us = 10;
    for (;;) {
        progress(d);
        if (d->failed) return report_stuck(d, 0);
        if (d->first_open >= d->nb) break;   // every bucket launched and complete
        double el = mono_s() - t0;
        if (el > d->timeout_s) return report_stuck(d, 1);
        nap(&us);
    }
    d->wait_s += mono_s() - t0;
    return 0;
}

// A control-plane collective (host buffers), started and polled with the timeout.
// Never inlined: a stack dump of a rank waiting here names it.
static int ddp_ctrl_wait(Ddp *d, int op, const void *send, void *recv, int count, const char *what)
    __attribute__((noinline));
static int ddp_ctrl_wait(Ddp *d, int op, const void *send, void *recv, int count, const char *what) {
    const int64_t seq = ++d->seq;
    flightrec_state(FR_PHASE_COMM, d->step, -1, what);
    flightrec_collective(FR_COLL_ENQUEUED, seq, what, d->step);
    const double t0 = mono_s();
    if (comm_ctrl_start(d->comm, op, send, recv, count)) {
        fprintf(stderr, "[COMM-ERROR] rank %d: collective seq %" PRId64 " (%s) failed: %s\n", d->rank, seq, what,
                comm_error(d->comm));
        fflush(stderr);
        comm_abort(d->comm);
        d->aborted = 1;
        return NSA_EXIT_COMM_TIMEOUT;
    }
    flightrec_collective(FR_COLL_STARTED, seq, what, d->step);
    long us = 10;
    for (;;) {
        int r = comm_ctrl_test(d->comm);
        if (r == 1) break;
        double el = mono_s() - t0;
        if (r < 0 || el > d->timeout_s) {
            if (r < 0)
                fprintf(stderr, "[COMM-ERROR] rank %d: collective seq %" PRId64 " (%s) failed: %s\n", d->rank, seq, what,
                        comm_error(d->comm));
            else {
                char wt[512];   // the rendezvous star (env/slurm bootstrap) says whom it waits for
                comm_ctrl_waiting(d->comm, wt, sizeof wt);
                fprintf(stderr, "[COMM-TIMEOUT] rank %d: collective seq %" PRId64 " (%s) not complete after %g s%s%s%s\n",
                        d->rank, seq, what, d->timeout_s, wt[0] ? " (" : "", wt, wt[0] ? ")" : "");
            }
            fflush(stderr);
            comm_abort(d->comm);
            d->aborted = 1;
            return NSA_EXIT_COMM_TIMEOUT;
        }
        nap(&us);
    }
    d->wait_s += mono_s() - t0;
    flightrec_collective(FR_COLL_COMPLETED, seq, what, d->step);
    return 0;
}

static uint64_t fnv1a(const void *p, size_t n, uint64_t h) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

// ---- open / close ----------------------------------------------------------------------

// The buckets: reverse parameter order (backward's), each up to bucket_mb MiB (a larger
// parameter alone). Returns the largest bucket's bytes.
static size_t layout_buckets(Ddp *d, double bucket_mb) {
    const Model *m = d->m;
    const int P = m->n_params;
    const double cap = bucket_mb * 1048576.0;
    d->param_bucket = xcalloc((size_t)P, sizeof(int));
    d->b = xcalloc((size_t)P, sizeof(Bucket));
    size_t max_bytes = 0;
    for (int id = P - 1; id >= 0;) {
        Bucket *b = &d->b[d->nb];
        b->id_hi = id;
        double bytes = (double)m->params[id].numel * d->eb;
        id--;
        while (id >= 0 && bytes + (double)m->params[id].numel * d->eb <= cap) {
            bytes += (double)m->params[id].numel * d->eb;
            id--;
        }
        b->id_lo = id + 1;
        b->off = m->params[b->id_lo].offset;
        b->n = m->params[b->id_hi].offset + m->params[b->id_hi].numel - b->off;
        snprintf(b->name, sizeof b->name, "allreduce b%d", d->nb);
        for (int p = b->id_lo; p <= b->id_hi; p++) d->param_bucket[p] = d->nb;
        if ((size_t)b->n * (size_t)d->eb > max_bytes) max_bytes = (size_t)b->n * (size_t)d->eb;
        d->nb++;
    }
    return max_bytes;
}

// Every rank must have the same model, config and bucket layout: (config digest, layout
// hash) compared across ranks before the first collective. Returns NSA_EXIT_OK, or the
// exit code with err set.
static int agree_layout(Ddp *d, char *err, size_t errlen) {
    const int P = d->m->n_params;
    struct { char digest[16]; uint64_t layout; } mine, *all = xcalloc((size_t)d->world, sizeof mine);
    memset(&mine, 0, sizeof mine);
    memcpy(mine.digest, d->m->cfg.digest, 16);
    uint64_t h = fnv1a(&P, sizeof P, 0xcbf29ce484222325ull);
    h = fnv1a(&d->eb, sizeof d->eb, h);
    for (int k = 0; k < d->nb; k++) {
        int64_t v[3] = {d->b[k].id_lo, d->b[k].id_hi, d->b[k].n};
        h = fnv1a(v, sizeof v, h);
    }
    mine.layout = h;
    int rc = NSA_EXIT_OK;
    if (ddp_ctrl_wait(d, COMM_CTRL_ALLGATHER_U8, &mine, all, (int)sizeof mine, "allgather layout")) {
        snprintf(err, errlen, "data parallel: exchanging the config digest and bucket layout timed out");
        rc = NSA_EXIT_COMM_TIMEOUT;
    }
    for (int r = 0; rc == NSA_EXIT_OK && r < d->world; r++) {
        if (!memcmp(&all[r], &all[0], sizeof mine)) continue;
        snprintf(err, errlen,
                 "data parallel: rank %d's config or bucket layout differs from rank 0's (config digest %.16s vs %.16s, "
                 "layout %016" PRIx64 " vs %016" PRIx64 "): every rank must run the same config",
                 r, all[r].digest, all[0].digest, all[r].layout, all[0].layout);
        rc = NSA_EXIT_USAGE;
    }
    free(all);
    return rc;
}

Ddp *ddp_open(Model *m, const CommWorld *w, const DdpOpts *o, int *rc, char *err, size_t errlen) {
    *rc = NSA_EXIT_RUNTIME;
    if (w->transport == COMM_NCCL && strcmp(m->be->name, "cuda")) {
        snprintf(err, errlen, "--transport nccl needs the cuda backend (train.backend is \"%s\"; --transport mpi "
                 "reduces on the host)", m->be->name);
        *rc = NSA_EXIT_USAGE;
        return NULL;
    }
    Ddp *d = xcalloc(1, sizeof *d);
    d->m = m;
    d->rank = w->rank;
    d->world = w->world;
    d->transport = w->transport;
    d->mode = o->mode;
    d->timeout_s = o->timeout_s;
    d->bucket_mb = o->bucket_mb;
    d->faults = o->faults;
    d->eb = m->be->param_bytes;
    d->dtype = d->eb == 8 ? "f64" : "f32";
    d->fd_buckets = d->fd_times = -1;
    d->arrived = xcalloc((size_t)m->n_params, 1);
    d->used = xcalloc((size_t)m->n_params, 1);
    size_t max_bytes = layout_buckets(d, o->bucket_mb);
    int timed_out = 0;
    d->comm = comm_open(w, m->be, d->nb, max_bytes, o->timeout_s, &timed_out, err, errlen);
    if (!d->comm) {
        *rc = timed_out ? NSA_EXIT_COMM_TIMEOUT : NSA_EXIT_RUNTIME;
        ddp_close(d, 0);
        return NULL;
    }
    if ((*rc = agree_layout(d, err, errlen)) != NSA_EXIT_OK) {
        ddp_close(d, 0);
        return NULL;
    }
    if (o->out_dir) {
        // an artifact that cannot be created: [IO-ERROR] and exit 6 (trainer/ioerr.h)
        snprintf(d->path_buckets, sizeof d->path_buckets, "%s/buckets.jsonl", o->out_dir);
        snprintf(d->path_times, sizeof d->path_times, "%s/rank_times.jsonl", o->out_dir);
        if ((d->fd_buckets = artifact_open_append(d->path_buckets, NULL, err, errlen)) < 0 ||
            (d->fd_times = artifact_open_append(d->path_times, NULL, err, errlen)) < 0) {
            *rc = NSA_EXIT_IO;
            ddp_close(d, 0);
            return NULL;
        }
    }
    if (d->rank == 0) {
        printf("[DDP] world %d transport %s mode %s: %d bucket%s of at most %g MiB (largest %.3f MiB) over %d "
               "parameters, %s gradients; collective timeout %g s\n",
               d->world, comm_transport_name(d->transport), config_ddp_mode_name(d->mode), d->nb, d->nb == 1 ? "" : "s",
               o->bucket_mb, (double)max_bytes / 1048576.0, m->n_params, d->dtype, d->timeout_s);
        fflush(stdout);
    }
    *rc = NSA_EXIT_OK;
    return d;
}

void ddp_close(Ddp *d, int clean) {
    if (!d) return;
    if (d->comm) {
        if (clean && !d->aborted) comm_close(d->comm);
        else if (!d->aborted) comm_abort(d->comm);
    }
    if (d->fd_buckets >= 0) close(d->fd_buckets);
    if (d->fd_times >= 0) close(d->fd_times);
    free(d->b);
    free(d->param_bucket);
    free(d->arrived);
    free(d->used);
    free(d);
}

int ddp_n_buckets(const Ddp *d) { return d->nb; }

// ---- the step ------------------------------------------------------------------------------

void ddp_begin_step(Ddp *d, int64_t step) {
    d->step = step;
    d->wait_s = 0;
}

// Fresh bucket state; pending counts what each bucket waits for.
static void reset_buckets(Ddp *d) {
    memset(d->arrived, 0, (size_t)d->m->n_params);
    for (int k = 0; k < d->nb; k++) {
        Bucket *b = &d->b[k];
        b->pending = 0;
        for (int id = b->id_lo; id <= b->id_hi; id++)
            b->pending += !(d->mode == NSA_DDP_STATIC_GRAPH && d->recorded && !d->used[id]);
        b->launched = b->completed = b->started_rec = 0;
        b->seq = 0;
        b->ready_t = b->launch_t = b->complete_t = -1;
    }
    d->next_launch = d->first_open = 0;
    d->records_written = 0;
    d->static_diff = 0;
    d->failed = 0;
    d->t_bwd0 = mono_s();
}

void ddp_begin_backward(Ddp *d, int reduce) {
    d->armed = 0;
    if (!reduce) return;   // no_sync: earlier micro-batches only accumulate locally
    reset_buckets(d);
    d->armed = 1;
    // nccl: the first reducing backward of the process launches at its end. The CUDA
    // backend still grows its scratch buffers in the first steps, and cudaFree waits
    // for the whole device, including a collective that waits for a peer: with a
    // bucket in flight that could block the host outside our timeout.
    d->defer = d->transport == COMM_NCCL && !d->warm;
    // static_graph: buckets without a recorded parameter are ready at once
    for (int k = 0; k < d->nb; k++)
        if (d->b[k].pending == 0) d->b[k].ready_t = d->t_bwd0;
    try_launch(d);
}

void ddp_grad_ready(Ddp *d, int id) {
    if (!d->armed || id < 0 || id >= d->m->n_params || d->arrived[id]) return;
    d->arrived[id] = 1;
    Bucket *b = &d->b[d->param_bucket[id]];
    if (d->mode == NSA_DDP_STATIC_GRAPH && d->recorded && !d->used[id]) {
        d->static_diff = 1;   // arrived although unused at the recorded step: reported after the wait
    } else if (--b->pending == 0) {
        b->ready_t = mono_s();
        try_launch(d);
    }
    progress(d);
}

// static_graph: compare the arrived sets of all ranks (allgathered) with each other
// (first step) or with the record; print what differs. Returns the number of
// differences.
static int static_report(Ddp *d, const uint8_t *all) {
    const int P = d->m->n_params, W = d->world;
    int n_diff = 0;
    char ranks_a[256], ranks_b[256];
    for (int id = 0; id < P; id++) {
        size_t la = 0, lb = 0;
        ranks_a[0] = ranks_b[0] = 0;
        int ref = d->recorded ? d->used[id] : all[id];   // first step: rank 0 is the reference
        int differs = 0;
        for (int r = 0; r < W; r++) {
            int got = all[(size_t)r * P + id];
            if (got != ref) differs = 1;
            char *buf = got ? ranks_a : ranks_b;
            size_t *l = got ? &la : &lb;
            if (*l < sizeof ranks_a - 16) *l += (size_t)snprintf(buf + *l, sizeof ranks_a - *l, "%s%d", *l ? "," : "", r);
        }
        if (!differs) continue;
        n_diff++;
        if (!d->recorded)
            fprintf(stderr,
                    "[DDP] static_graph: step %" PRId64 ": %s received a gradient on rank(s) %s but not on rank(s) %s: "
                    "the used parameter set differs across ranks\n",
                    d->step, pname(d, id), ranks_a[0] ? ranks_a : "-", ranks_b[0] ? ranks_b : "-");
        else
            fprintf(stderr,
                    "[DDP] static_graph: step %" PRId64 ": %s %s at the recorded step but %s at this step on rank(s) %s\n",
                    d->step, pname(d, id), d->used[id] ? "received a gradient" : "received no gradient",
                    d->used[id] ? "not" : "did", d->used[id] ? (ranks_b[0] ? ranks_b : "-") : (ranks_a[0] ? ranks_a : "-"));
    }
    fflush(stderr);
    return n_diff;
}

int ddp_finish_backward(Ddp *d) {
    d->armed = 0;
    d->defer = 0;
    d->warm = 1;
    try_launch(d);
    if (d->failed) return report_stuck(d, 0);
    const int P = d->m->n_params;
    if (d->mode != NSA_DDP_DEFAULT) {
        // find_unused, static_graph: what did not arrive is ready now (its gradient
        // is whatever its buffer holds: zero unless an earlier micro-batch of the
        // step produced one), so every bucket launches and nothing hangs
        double t = mono_s();
        for (int id = P - 1; id >= 0; id--) {
            if (d->arrived[id]) continue;
            if (d->mode == NSA_DDP_STATIC_GRAPH && d->recorded) {
                if (!d->used[id]) continue;    // never waited for
                d->static_diff = 1;            // recorded as used, missing now
            }
            Bucket *b = &d->b[d->param_bucket[id]];
            if (--b->pending == 0) b->ready_t = t;
        }
        try_launch(d);
    }
    if (d->next_launch < d->nb && !d->failed) {
        // default mode: a bucket with a missing parameter can never launch here, while
        // the other ranks wait for it inside the collective. Say so before waiting.
        write_records(d);
        for (int k = d->next_launch; k < d->nb; k++) {
            if (d->b[k].pending == 0) continue;
            char *miss = bucket_names(d, &d->b[k], 1);
            printf("[DDP] step=%" PRId64 " rank=%d bucket=%d never launched: missing %s\n", d->step, d->rank, k, miss);
            free(miss);
        }
        fflush(stdout);
    }
    flightrec_event(FR_PHASE_COMM, FR_KIND_BEGIN, d->step, -1, "comm_wait");
    if (d->faults) faults_on_phase(d->faults, FR_PHASE_COMM, d->step);
    int rc = ddp_comm_wait(d);
    if (rc) return rc;
    write_records(d);
    if (d->mode == NSA_DDP_STATIC_GRAPH) {
        uint8_t *all = NULL;
        if (!d->recorded) {
            all = xmalloc((size_t)P * d->world);
            if ((rc = ddp_ctrl_wait(d, COMM_CTRL_ALLGATHER_U8, d->arrived, all, P, "allgather used"))) { free(all); return rc; }
            if (static_report(d, all)) {
                fprintf(stderr, "[DDP] rank %d: static_graph: the ranks disagree on the used parameters at step %" PRId64
                        " (the recorded step): exit 5\n", d->rank, d->step);
                free(all);
                return NSA_EXIT_DDP_CONTRACT;
            }
            memcpy(d->used, d->arrived, (size_t)P);
            d->recorded = 1;
            int n_used = 0;
            for (int id = 0; id < P; id++) n_used += d->used[id];
            if (d->rank == 0)
                printf("[DDP] static_graph: step %" PRId64 ": recorded %d of %d parameters as used (identical on all %d "
                       "ranks)\n", d->step, n_used, P, d->world);
        } else {
            int64_t mine = d->static_diff, any = 0;
            if ((rc = ddp_ctrl_wait(d, COMM_CTRL_MAX_I64, &mine, &any, 1, "allreduce static check"))) return rc;
            if (any) {
                all = xmalloc((size_t)P * d->world);
                if ((rc = ddp_ctrl_wait(d, COMM_CTRL_ALLGATHER_U8, d->arrived, all, P, "allgather used"))) { free(all); return rc; }
                static_report(d, all);
                fprintf(stderr, "[DDP] rank %d: static_graph: the used parameter set changed at step %" PRId64
                        " (recorded at the first step): exit 5\n", d->rank, d->step);
                free(all);
                return NSA_EXIT_DDP_CONTRACT;
            }
        }
        free(all);
    }
    return 0;
}

int ddp_mean(Ddp *d, double *v, const char *what) {
    double in = *v, out = 0;
    int rc = ddp_ctrl_wait(d, COMM_CTRL_SUM_F64, &in, &out, 1, what);
    if (rc) return rc;
    *v = out / d->world;
    return 0;
}

int ddp_check_weights(Ddp *d, int64_t step) {
    const Model *m = d->m;
    size_t bytes = (size_t)m->n_elems * m->be->param_bytes;
    char *host = xmalloc(bytes);
    m->be->to_host(host, m->param_mem, bytes);
    uint64_t h = fnv1a(host, bytes, 0xcbf29ce484222325ull);
    free(host);
    uint64_t *all = xcalloc((size_t)d->world, sizeof *all);
    int rc = ddp_ctrl_wait(d, COMM_CTRL_ALLGATHER_U8, &h, all, (int)sizeof h, "allgather weights");
    if (rc) { free(all); return rc; }
    int same = 1;
    for (int r = 1; r < d->world; r++) same &= all[r] == all[0];
    if (same) {
        if (d->rank == 0)
            printf("[DDP] weights after step %" PRId64 " are bitwise identical on all %d ranks (fnv1a64 %016" PRIx64 ")\n",
                   step, d->world, h);
    } else {
        for (int r = 0; r < d->world; r++)
            fprintf(stderr, "[DDP] rank %d: weights after step %" PRId64 ": rank %d fnv1a64 %016" PRIx64 "%s\n", d->rank,
                    step, r, all[r], all[r] == all[0] ? "" : " (differs from rank 0)");
        fprintf(stderr, "[DDP] rank %d: the weights differ across ranks: the reduced gradients were not identical\n",
                d->rank);
    }
    fflush(stdout);
    free(all);
    return same ? 0 : NSA_EXIT_RUNTIME;
}

double ddp_comm_wait_ms(const Ddp *d) { return d->wait_s * 1e3; }

void ddp_write_rank_times(Ddp *d, int64_t step, double step_ms) {
    char line[256];
    double wait_ms = d->wait_s * 1e3;
    snprintf(line, sizeof line, "{\"step\":%" PRId64 ",\"rank\":%d,\"compute_ms\":%.3f,\"comm_wait_ms\":%.3f}", step,
             d->rank, step_ms - wait_ms, wait_ms);
    jsonl_write(d->fd_times, line, d->path_times);
}
