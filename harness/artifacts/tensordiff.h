// harness/artifacts/tensordiff.h — two safetensors dumps (nsa-train --dump-step) compared
// tensor by tensor: the dump_match check (harness/checks/dump_match.c) and `nsa-harness compare`
// (compare.c) share it.
//
// Each tensor of the reference file that the globs select is looked up by name in
// the candidate file. Tensors with the same dtype and shape are compared: bitwise
// first, and where the bits differ by the largest absolute difference relative to
// the reference tensor's largest magnitude — or, when larger, a noise floor:
// DUMPDIFF_NOISE_FLOOR x the RMS of every selected reference tensor of its kind
// (gradients; activations; none for logits, loss and integer tensors). A gradient that
// is zero in exact arithmetic (the phi=mlp key compressor's fc2 bias: softmax is
// invariant to it) is rounding noise around 0, ~1e-12 against gradients of ~1e-3, and two
// trainers' noise must not read as a 100 % difference (measured: 1.3 without the floor,
// PyTorch vs nsa-train on the CPU; the golden check's NOISE_FLOOR, check_golden.c, is the
// same idea). A tensor differs when that relative difference exceeds the tolerance
// (tolerance 0: any differing bit, whatever the floor).
#ifndef NSA_HARNESS_TENSORDIFF_H
#define NSA_HARNESS_TENSORDIFF_H
#include <jansson.h>

#include "common/util.h"
#include "common/safetensors.h"

#define DUMPDIFF_NOISE_FLOOR 1e-3

typedef struct {
    const char *name;   // the tensor's name (owned by the DumpDiff's files)
    double rel;         // max |cand - ref| / max(max |ref|, floor); INFINITY for a NaN difference or
                        // any difference against an all-zero reference; 1e-300 for bits
                        // that differ between numerically equal values (-0 vs 0, NaN payloads)
    int order;          // its index in the reference file
} TensorDiff;

typedef struct {
    StFile cand, ref;       // both files, read whole
    TensorDiff *differ;     // the differing tensors, largest relative difference first
    int n_differ;
    int n_compared;         // tensors selected by the globs and present with the same dtype and shape
    const char *last_compared;   // the last of them ("" when none)
    Str missing;            // ", "-separated: selected reference tensors absent from the
    int n_missing;          // candidate or with another dtype/shape there
    double worst;           // largest relative difference over every compared tensor
    int *layers;            // the blocks (blocks.L) the differing tensors belong to, ascending
    int n_layers;
    const TensorDiff *first;     // the differing tensor a step computes first: forward tensors in
                                 // forward order, then gradients in backward order (locus.h
                                 // tensor_model_order; ties: reference file order), or NULL
    int *model_order;            // indices into differ, in that order
} DumpDiff;

enum { DUMPDIFF_OK = 0, DUMPDIFF_NO_CAND = 1, DUMPDIFF_NO_REF = 2 };

// Read both files and compare them. globs: a JSON array of fnmatch patterns over tensor
// names, or NULL for every tensor; tol: relative tolerance (0 = bitwise). Returns
// DUMPDIFF_OK, or which file could not be read (err: "path: why"). Either way d is
// released with dumpdiff_free.
int dumpdiff_files(DumpDiff *d, const char *cand_path, const char *ref_path, const json_t *globs, double tol,
                   char *err, size_t errlen);
void dumpdiff_free(DumpDiff *d);
#endif
