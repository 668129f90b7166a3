// trainer/gatestats.c — per-layer gate statistics (see gatestats.h).
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "common/jsonutil.h"
#include "common/nsa_names.h"
#include "trainer/gatestats.h"
#include "trainer/ioerr.h"
#include "trainer/jsonl.h"


// mean and population std of x[0..n) in double. When every value is equal the
// mean is that value and std exactly 0 (summation rounding cannot blur it).
static void mean_std(const double *x, int64_t n, int64_t stride, double *mean, double *std, double *mn,
                     double *mx) {
    double s = 0, lo = INFINITY, hi = -INFINITY;
    int nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = x[i * stride];
        s += v;
        if (!isfinite(v)) nonfinite = 1;
        if (v < lo) lo = v;
        if (v > hi) hi = v;
    }
    if (mn) *mn = lo;
    if (mx) *mx = hi;
    if (n == 0) { *mean = *std = 0; return; }
    if (!nonfinite && lo == hi) { *mean = lo; *std = 0; return; }
    double mu = s / (double)n, ss = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = x[i * stride] - mu;
        ss += d * d;
    }
    *mean = mu;
    *std = sqrt(ss / (double)n);
}

static double *scratch(GateStats *gs, size_t n) {
    if (n > gs->host_n) {
        free(gs->host);
        gs->host = xmalloc(sizeof(double) * n);
        gs->host_n = n;
    }
    return gs->host;
}

int gatestats_open(GateStats *gs, const char *out_dir, int rank, int n_layers, char *err, size_t errlen) {
    memset(gs, 0, sizeof *gs);
    gs->fd = -1;
    gs->rank = rank;
    gs->n_layers = n_layers;
    gs->layers = xcalloc((size_t)n_layers, sizeof(GateLayerStats));
    if (out_dir) {
        snprintf(gs->path, sizeof gs->path, "%s/gate_stats.jsonl", out_dir);
        // an artifact that cannot be created: [IO-ERROR], exit 6 (trainer/ioerr.h)
        if ((gs->fd = artifact_open_append(gs->path, "--gate-stats", err, errlen)) < 0) return -1;
    }
    return 0;
}

void gatestats_arm(GateStats *gs) {
    gs->armed = 1;
    for (int L = 0; L < gs->n_layers; L++) gs->layers[L].have = 0;
}

void gatestats_layer(GateStats *gs, const Model *m, int L) {
    if (!gs->armed || !nsa_gated(m->cfg.force_branch) || L < 0 || L >= gs->n_layers) return;
    const Backend *be = m->be;
    GateLayerStats *st = &gs->layers[L];
    const LayerActs *a = &m->acts[L];
    const int G = m->G;
    const int64_t rows = (int64_t)m->B * m->T * G;   // (row, group) pairs
    // fc2 weight [3G, gh] and bias [3G]
    int idw = m->lid[L][LP_GATE_FC2_W], idb = m->lid[L][LP_GATE_FC2_B];
    int64_t nw = m->params[idw].numel, nb = m->params[idb].numel;
    double *h = scratch(gs, (size_t)(nw > rows * 3 ? nw : rows * 3));
    be->param_to_f64(h, model_param_ptr(m, idw), nw);
    mean_std(h, nw, 1, &st->fc2_w_mean, &st->fc2_w_std, NULL, NULL);
    be->param_to_f64(h, model_param_ptr(m, idb), nb);
    mean_std(h, nb, 1, &st->fc2_b_mean, &st->fc2_b_std, NULL, NULL);
    // outputs [N, G, 3]: branch b is every third value starting at b
    be->act_to_f64(h, a->gate, rows * 3);
    for (int b = 0; b < 3; b++)
        mean_std(h + b, rows, 3, &st->out_mean[b], &st->out_std[b], &st->out_min[b], &st->out_max[b]);
    st->have = 1;
}

static json_t *triple(const double *v) {
    json_t *a = json_array();
    for (int b = 0; b < 3; b++) json_array_append_new(a, json_real_or_name(v[b]));
    return a;
}

char *gatestats_finish_step(GateStats *gs, const Model *m, int64_t step) {
    if (!gs->armed) return NULL;
    gs->armed = 0;
    const int gated = nsa_gated(m->cfg.force_branch);
    json_t *rec = json_object();
    json_object_set_new(rec, "step", json_integer(step));
    json_object_set_new(rec, "rank", json_integer(gs->rank));
    json_object_set_new(rec, "gate_act", json_string(m->cfg.gate_act == NSA_GATE_SIGMOID ? "sigmoid" : "softmax"));
    json_object_set_new(rec, "gated", json_boolean(gated));
    json_t *layers = json_array();
    for (int L = 0; gated && L < gs->n_layers; L++) {
        const GateLayerStats *st = &gs->layers[L];
        if (!st->have) continue;   // the forward stopped early (anomaly localisation)
        json_t *o = json_object();
        json_object_set_new(o, "layer", json_integer(L));
        json_object_set_new(o, "fc2_weight_mean", json_real_or_name(st->fc2_w_mean));
        json_object_set_new(o, "fc2_weight_std", json_real_or_name(st->fc2_w_std));
        json_object_set_new(o, "fc2_bias_mean", json_real_or_name(st->fc2_b_mean));
        json_object_set_new(o, "fc2_bias_std", json_real_or_name(st->fc2_b_std));
        json_object_set_new(o, "out_mean", triple(st->out_mean));
        json_object_set_new(o, "out_std", triple(st->out_std));
        json_object_set_new(o, "out_min", triple(st->out_min));
        json_object_set_new(o, "out_max", triple(st->out_max));
        json_array_append_new(layers, o);
    }
    json_object_set_new(rec, "layers", layers);
    char *js = json_dumps(rec, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(rec);
    jsonl_write(gs->fd, js, gs->path);   // a failure: io_error, exit 6 at the step's end
    return js;
}

void gatestats_close(GateStats *gs) {
    if (gs->fd >= 0) close(gs->fd);
    gs->fd = -1;
    free(gs->layers);
    free(gs->host);
    gs->layers = NULL;
    gs->host = NULL;
}
