// harness/artifacts/tensorstats.c — see tensorstats.h.
#include "harness/artifacts/tensorstats.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/digest.h"

// The signs of element i for the four projections: the top four bits of a
// SplitMix64-style mix of i (fixed: changing it invalidates every baseline).
static unsigned signs_of(uint64_t i) {
    uint64_t z = i + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (unsigned)(z >> 60);
}

void tensor_stats(const StTensor *t, TensorStats *s) {
    memset(s, 0, sizeof *s);
    digest64_hex(digest64(t->data, t->nbytes, 0), s->digest);
    const size_t n = t->nbytes / st_dtype_size(t->dtype);
    s->numel = (int64_t)n;
    double ss = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = st_elem_f64(t, i);
        ss += x * x;
        s->sum += x;
        if (fabs(x) > s->max_abs || isnan(x)) s->max_abs = fabs(x);
        const unsigned sg = signs_of(i);
        for (int k = 0; k < TSTATS_PROJ; k++) s->proj[k] += (sg >> k) & 1 ? -x : x;
    }
    s->l2 = sqrt(ss);
}

json_t *tensor_stats_json(const StTensor *t, const TensorStats *s) {
    json_t *shape = json_array(), *proj = json_array();
    for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
    for (int k = 0; k < TSTATS_PROJ; k++) json_array_append_new(proj, json_real(s->proj[k]));
    return json_pack("{s:s,s:s,s:o,s:s,s:f,s:f,s:f,s:o}", "name", t->name, "dtype", st_dtype_name(t->dtype), "shape",
                     shape, "digest", s->digest, "l2", s->l2, "max_abs", s->max_abs, "sum", s->sum, "proj", proj);
}

static int num(const json_t *o, const char *k, double *out) {
    const json_t *v = json_object_get(o, k);
    if (!json_is_number(v)) return -1;
    *out = json_number_value(v);
    return 0;
}

int tensor_stats_parse(const json_t *o, TensorStats *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    const char *dg = json_string_value(json_object_get(o, "digest"));
    const json_t *proj = json_object_get(o, "proj"), *shape = json_object_get(o, "shape");
    if (!dg || strlen(dg) != 16 || num(o, "l2", &s->l2) || num(o, "max_abs", &s->max_abs) || num(o, "sum", &s->sum) ||
        !json_is_array(proj) || json_array_size(proj) != TSTATS_PROJ || !json_is_array(shape)) {
        snprintf(err, errlen, "tensor %s: expected digest (16 hex digits), l2, max_abs, sum, shape and %d proj values",
                 json_string_value(json_object_get(o, "name")) ? json_string_value(json_object_get(o, "name")) : "?",
                 TSTATS_PROJ);
        return -1;
    }
    snprintf(s->digest, sizeof s->digest, "%s", dg);
    for (int k = 0; k < TSTATS_PROJ; k++) s->proj[k] = json_number_value(json_array_get(proj, (size_t)k));
    s->numel = 1;
    size_t i;
    json_t *d;
    json_array_foreach(shape, i, d) s->numel *= json_integer_value(d);
    return 0;
}

double tensor_stats_floor(double sumsq, double total, int64_t n, double frac) {
    return total > 0 ? frac * sqrt(sumsq * (double)n / total) : 0;
}

double tensor_stats_rel(const TensorStats *a, const TensorStats *b, double floor) {
    if (!strcmp(a->digest, b->digest)) return 0;
    double p2 = 0;
    for (int k = 0; k < TSTATS_PROJ; k++) p2 += (a->proj[k] - b->proj[k]) * (a->proj[k] - b->proj[k]);
    double d = sqrt(p2 / TSTATS_PROJ);
    d = fmax(d, fabs(a->l2 - b->l2));
    if (b->numel > 0) d = fmax(d, fabs(a->sum - b->sum) / sqrt((double)b->numel));
    if (!isfinite(d) || !isfinite(a->l2)) return INFINITY;
    if (d == 0) return 1e-300;   // the bits differ, the summaries do not (e.g. -0 vs 0)
    const double den = fmax(b->l2, floor);
    return den > 0 ? d / den : INFINITY;
}
