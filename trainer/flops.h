// trainer/flops.h — the model FLOPs of a training step, counted exactly from the
// config (bench/RESULTS.md "How FLOPs are counted"): what tok/s is turned into
// TFLOP/s and MFU with, and a deterministic counter for the CPU performance floor.
#ifndef NSA_TRAINER_FLOPS_H
#define NSA_TRAINER_FLOPS_H
#include "trainer/model.h"

// FLOPs of one optimizer step of micro-batches [B, T] (grad_accum of them):
// 3 x the forward's (backward = 2 x forward), where the forward counts
//   matmuls    2 per weight used per token (q, the K/V projections of every
//              branch that is computed, o, the gate MLP when gated, SwiGLU, LM
//              head; the embedding lookup is free) and the phi=mlp compressor's
//              2 x (l*D*D + D*D) per compressed block, group and K/V;
//   attention  4*D per (query head, key) over the keys each query really attends:
//              visible compressed blocks, its selected keys (min(n, t/l'+1) blocks,
//              the current one up to t), min(w, t+1) window keys.
// Model FLOPs, the MFU convention: the recomputation of checkpointed layers and
// elementwise ops are not counted.
double model_flops_per_step(const Model *m, int B, int T, int grad_accum);
#endif
