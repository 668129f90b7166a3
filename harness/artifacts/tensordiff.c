// harness/artifacts/tensordiff.c — see tensordiff.h.
#define _POSIX_C_SOURCE 200809L
#include "harness/artifacts/tensordiff.h"

#include "harness/artifacts/locus.h"
#include "harness/artifacts/tensorstats.h"

#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int diff_cmp(const void *a, const void *b) {
    double x = ((const TensorDiff *)a)->rel, y = ((const TensorDiff *)b)->rel;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int int_cmp(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

// A tensor is compared when a glob selects it (no glob: every tensor) and no "!glob" leaves
// it out (dump_match's `except`).
static int selected(const json_t *globs, const char *name) {
    int want = 1, positive = 0;
    size_t k;
    json_t *g;
    json_array_foreach(globs, k, g) positive |= json_string_value(g)[0] != '!';
    if (positive) {
        want = 0;
        json_array_foreach(globs, k, g) if (json_string_value(g)[0] != '!') want |= fnmatch(json_string_value(g), name, 0) == 0;
    }
    json_array_foreach(globs, k, g) if (json_string_value(g)[0] == '!') want &= fnmatch(json_string_value(g) + 1, name, 0) != 0;
    return want;
}

static int same_layout(const StTensor *a, const StTensor *b) {
    int same = a && a->dtype == b->dtype && a->ndim == b->ndim && a->nbytes == b->nbytes;
    for (int d = 0; same && d < b->ndim; d++) same = a->shape[d] == b->shape[d];
    return same;
}

// 0 when the bits are equal; else the largest absolute difference relative to the
// reference's largest magnitude, or to the noise floor when that is larger (see
// TensorDiff.rel and tensordiff.h)
static double relative_difference(const StTensor *cand, const StTensor *ref, double floor) {
    if (memcmp(cand->data, ref->data, ref->nbytes) == 0) return 0;
    size_t n = ref->nbytes / st_dtype_size(ref->dtype);
    double maxref = 0, maxdiff = 0;
    for (size_t e = 0; e < n; e++) {
        double x = st_elem_f64(cand, e), y = st_elem_f64(ref, e);
        maxref = fmax(maxref, fabs(y));
        double d = fabs(x - y);
        if (isnan(d)) d = INFINITY;
        maxdiff = fmax(maxdiff, d);
    }
    maxref = fmax(maxref, floor);
    double rel = maxref > 0 ? maxdiff / maxref : (maxdiff > 0 ? INFINITY : 0);
    return rel == 0 ? 1e-300 : rel;   // differing bits (e.g. -0 vs 0, NaN payloads) are a difference
}

// The noise floor's kinds: gradients and activations (each its own scale); 2: no floor.
static int floor_kind(const StTensor *t) {
    if (t->dtype != ST_F32 && t->dtype != ST_F64 && t->dtype != ST_F16 && t->dtype != ST_BF16) return 2;
    return !strncmp(t->name, "grads.", 6) ? 0 : !strncmp(t->name, "acts.", 5) ? 1 : 2;
}

// the distinct layers of the differing tensors, ascending
static void collect_layers(DumpDiff *d) {
    d->layers = xcalloc((size_t)d->n_differ + 1, sizeof(int));
    for (int i = 0; i < d->n_differ; i++) {
        int L = tensor_locus(d->differ[i].name).layer, seen = 0;   // any trainer's names (locus.h)
        if (L < 0) continue;
        for (int k = 0; k < d->n_layers; k++) seen |= d->layers[k] == L;
        if (!seen) d->layers[d->n_layers++] = L;
    }
    qsort(d->layers, (size_t)d->n_layers, sizeof(int), int_cmp);
}

static void compare_tensors(DumpDiff *d, const json_t *globs, double tol) {
    d->differ = xcalloc((size_t)d->ref.n_tensors + 1, sizeof(TensorDiff));
    // each kind's RMS over the selected reference tensors: the scale of the noise floor
    double sumsq[2] = {0, 0}, total[2] = {0, 0};
    for (int i = 0; i < d->ref.n_tensors; i++) {
        const StTensor *tr = &d->ref.tensors[i];
        int k = floor_kind(tr);
        if (k > 1 || !selected(globs, tr->name)) continue;
        size_t n = tr->nbytes / st_dtype_size(tr->dtype);
        for (size_t e = 0; e < n; e++) {
            double y = st_elem_f64(tr, e);
            if (isfinite(y)) sumsq[k] += y * y;
        }
        total[k] += (double)n;
    }
    for (int i = 0; i < d->ref.n_tensors; i++) {
        const StTensor *tr = &d->ref.tensors[i];
        if (!selected(globs, tr->name)) continue;
        const StTensor *tc = st_find(&d->cand, tr->name);
        if (!same_layout(tc, tr)) {
            str_printf(&d->missing, "%s%s", d->missing.len ? ", " : "", tr->name);
            d->n_missing++;
            continue;
        }
        d->n_compared++;
        d->last_compared = tr->name;
        int k = floor_kind(tr);
        double rel = relative_difference(tc, tr, k > 1 ? 0 : tensor_stats_floor(sumsq[k], total[k], 1, DUMPDIFF_NOISE_FLOOR));
        if ((tol == 0 && rel > 0) || rel > tol) d->differ[d->n_differ++] = (TensorDiff){tr->name, rel, i};
        d->worst = fmax(d->worst, rel);
    }
    qsort(d->differ, (size_t)d->n_differ, sizeof *d->differ, diff_cmp);
}

// the differing tensors in the order a step computes them (the first is where two runs part)
typedef struct { long key; int order, idx; } ModelKey;
static int model_cmp(const void *a, const void *b) {
    const ModelKey *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}
static void sort_model_order(DumpDiff *d) {
    ModelKey *k = xcalloc((size_t)d->n_differ + 1, sizeof *k);
    for (int i = 0; i < d->n_differ; i++) k[i] = (ModelKey){tensor_model_order(d->differ[i].name), d->differ[i].order, i};
    qsort(k, (size_t)d->n_differ, sizeof *k, model_cmp);
    d->model_order = xcalloc((size_t)d->n_differ + 1, sizeof(int));
    for (int i = 0; i < d->n_differ; i++) d->model_order[i] = k[i].idx;
    free(k);
    d->first = d->n_differ ? &d->differ[d->model_order[0]] : NULL;
}

int dumpdiff_files(DumpDiff *d, const char *cand_path, const char *ref_path, const json_t *globs, double tol,
                   char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    d->last_compared = "";
    if (st_read(&d->cand, cand_path, err, errlen)) return DUMPDIFF_NO_CAND;
    if (st_read(&d->ref, ref_path, err, errlen)) return DUMPDIFF_NO_REF;
    compare_tensors(d, globs, tol);
    collect_layers(d);
    sort_model_order(d);
    return DUMPDIFF_OK;
}

void dumpdiff_free(DumpDiff *d) {
    st_free(&d->cand);   // safe on a file that was not read (zeroed, or cleared by st_read)
    st_free(&d->ref);
    free(d->differ);
    free(d->layers);
    free(d->model_order);
    str_free(&d->missing);
    memset(d, 0, sizeof *d);
}
