// harness/artifacts/tensorstats.h — a tensor summarised so that a baseline can hold every
// tensor of a step dump at a few dozen bytes each, and still answer both
// questions a regression check asks (docs/regression.md):
//   - bitwise equal?        digest64 of the raw bytes (common/digest.h)
//   - how far apart?        an estimate of the normwise relative difference
//                           ||a - b||_2 / ||b||_2 from the summaries alone.
// The estimate uses four random-sign projections p_k = sum_i s_k(i) x_i
// (s_k(i) = +-1 from a hash of i): for a difference d independent of the signs,
// E[(p_k(a) - p_k(b))^2] = ||d||^2, so the RMS over k estimates ||d|| (within a
// factor ~2 either way, 4 degrees of freedom), and ||a|| - ||b|| and
// (sum a - sum b)/sqrt(n) bound it from below; est = the largest of the three over
// ||b||. Good enough to rank tensors and to tell 1e-7 from 1e-3.
#ifndef NSA_HARNESS_TENSORSTATS_H
#define NSA_HARNESS_TENSORSTATS_H
#include <jansson.h>
#include <stdint.h>

#include "common/safetensors.h"

#define TSTATS_PROJ 4

typedef struct {
    char digest[17];            // digest64 hex of the raw bytes
    int64_t numel;
    double l2, max_abs, sum;    // over the elements as doubles
    double proj[TSTATS_PROJ];   // random-sign projections
} TensorStats;

void tensor_stats(const StTensor *t, TensorStats *s);
// {"name", "dtype", "shape", "digest", "l2", "max_abs", "sum", "proj"} (17 significant digits)
json_t *tensor_stats_json(const StTensor *t, const TensorStats *s);
// Parse what tensor_stats_json wrote; 0, or -1 with why in err.
int tensor_stats_parse(const json_t *o, TensorStats *s, char *err, size_t errlen);
// 0 when the digests agree, else the estimate of ||a - b|| / max(||b||, floor)
// (INFINITY when that is 0 or a value is not finite). floor keeps a tensor that is
// zero in exact arithmetic (a gradient the loss is invariant to: rounding noise
// around 0) from reading as a 100 % difference: see tensor_stats_floor.
double tensor_stats_rel(const TensorStats *a, const TensorStats *b, double floor);
// The noise floor of a tensor of n elements among tensors of the same kind whose
// squared norms sum to sumsq over total elements: frac x the norm it would have if
// that kind's norm were spread evenly, frac * sqrt(sumsq * n / total).
double tensor_stats_floor(double sumsq, double total, int64_t n, double frac);
#endif
