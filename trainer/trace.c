// trainer/trace.c — gradient-arrival trace (see trace.h).
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "trainer/trace.h"
#include "trainer/ioerr.h"
#include "trainer/jsonl.h"

#define SCAN_CHUNK (1 << 20)   // gradient elements copied to the host at a time

int gradtrace_open(GradTrace *tr, const Model *m, const char *out_dir, int rank, int print, char *err,
                   size_t errlen) {
    memset(tr, 0, sizeof *tr);
    tr->m = m;
    tr->fd = -1;
    tr->print = print;
    tr->rank = rank;
    tr->n_params = m->n_params;
    size_t P = (size_t)m->n_params;
    tr->arrived = xcalloc(P, 1);
    tr->seen0 = xcalloc(P, 1);
    tr->order = xcalloc(P, sizeof(int));
    tr->expected = xcalloc(P, 1);
    tr->nonfinite = xcalloc(P, 1);
    tr->zero = xcalloc(P, 1);
    tr->host = xmalloc(sizeof(double) * SCAN_CHUNK);
    model_expected_unused(m, tr->expected);
    if (out_dir) {
        snprintf(tr->path, sizeof tr->path, "%s/grad_trace.jsonl", out_dir);
        // an artifact that cannot be created: [IO-ERROR], exit 6 (trainer/ioerr.h)
        if ((tr->fd = artifact_open_append(tr->path, "--trace-grads", err, errlen)) < 0) return -1;
    }
    return 0;
}

void gradtrace_begin_step(GradTrace *tr, int64_t step) {
    size_t P = (size_t)tr->n_params;
    memset(tr->arrived, 0, P);
    memset(tr->seen0, 0, P);
    tr->n_order = 0;
    tr->step = step;
    tr->micro = 0;
    tr->active = 1;
}

void gradtrace_begin_micro(GradTrace *tr, int micro) { tr->micro = micro; }

void gradtrace_ready(void *ctx, int id) {
    GradTrace *tr = ctx;
    if (!tr->active || id < 0 || id >= tr->n_params) return;   // replays after the step are not traced
    tr->arrived[id] = 1;
    if (tr->micro == 0 && !tr->seen0[id]) {
        tr->seen0[id] = 1;
        tr->order[tr->n_order++] = id;
    }
}

// Scan one parameter's gradient on the host: *nonfinite, *all_zero.
static void scan_grad(GradTrace *tr, int id, int *nonfinite, int *all_zero) {
    const Model *m = tr->m;
    const int64_t n = m->params[id].numel;
    const char *g = model_grad_ptr(m, id);
    *nonfinite = 0;
    *all_zero = 1;
    for (int64_t i0 = 0; i0 < n; i0 += SCAN_CHUNK) {
        int64_t k = n - i0 < SCAN_CHUNK ? n - i0 : SCAN_CHUNK;
        m->be->param_to_f64(tr->host, g + i0 * m->be->param_bytes, k);
        for (int64_t i = 0; i < k; i++) {
            double v = tr->host[i];
            if (!isfinite(v)) *nonfinite = 1;
            if (v != 0) *all_zero = 0;
        }
    }
}

static json_t *names(const GradTrace *tr, const uint8_t *set) {
    json_t *a = json_array();
    for (int i = 0; i < tr->n_params; i++)
        if (set[i]) json_array_append_new(a, json_string(tr->m->params[i].name));
    return a;
}

char *gradtrace_end_step(GradTrace *tr) {
    const Model *m = tr->m;
    const int P = tr->n_params;
    tr->active = 0;
    tr->n_arrived = tr->n_missing = tr->n_nonfinite = 0;
    uint8_t *missing = xcalloc((size_t)P, 1);
    for (int i = 0; i < P; i++) {
        int nf, z;
        scan_grad(tr, i, &nf, &z);
        tr->nonfinite[i] = (uint8_t)nf;
        tr->zero[i] = (uint8_t)(tr->arrived[i] && z && !nf);
        missing[i] = !tr->arrived[i];
        tr->n_arrived += tr->arrived[i];
        tr->n_missing += missing[i];
        tr->n_nonfinite += nf;
    }
    json_t *rec = json_object();
    json_object_set_new(rec, "step", json_integer(tr->step));
    json_object_set_new(rec, "rank", json_integer(tr->rank));
    json_object_set_new(rec, "n_params", json_integer(P));
    json_object_set_new(rec, "arrived", json_integer(tr->n_arrived));
    json_object_set_new(rec, "missing", names(tr, missing));
    json_object_set_new(rec, "expected_missing", names(tr, tr->expected));
    json_object_set_new(rec, "nonfinite", names(tr, tr->nonfinite));
    json_object_set_new(rec, "zero", names(tr, tr->zero));
    json_t *order = json_array();
    for (int i = 0; i < tr->n_order; i++) json_array_append_new(order, json_string(m->params[tr->order[i]].name));
    json_object_set_new(rec, "order", order);
    char *js = json_dumps(rec, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(rec);
    jsonl_write(tr->fd, js, tr->path);   // a failure: io_error, exit 6 at the step's end
    if (tr->print) {
        // the block goes out in one stdio flush
        printf("[GRAD-TRACE] step=%" PRId64 " rank=%d arrived=%d missing=%d\n", tr->step, tr->rank, tr->n_arrived,
               tr->n_missing);
        for (int i = 0; i < P; i++)
            if (missing[i]) printf("[GRAD-TRACE] step=%" PRId64 " rank=%d missing %s\n", tr->step, tr->rank, m->params[i].name);
        for (int i = 0; i < P; i++)
            if (tr->nonfinite[i])
                printf("[GRAD-TRACE] step=%" PRId64 " rank=%d nonfinite %s\n", tr->step, tr->rank, m->params[i].name);
        fflush(stdout);
    }
    free(missing);
    return js;
}

void gradtrace_close(GradTrace *tr) {
    if (tr->fd >= 0) close(tr->fd);
    tr->fd = -1;
    free(tr->arrived); free(tr->seen0); free(tr->order); free(tr->expected);
    free(tr->nonfinite); free(tr->zero); free(tr->host);
    tr->arrived = tr->seen0 = tr->expected = tr->nonfinite = tr->zero = NULL;
    tr->order = NULL;
    tr->host = NULL;
}
