// trainer/actdump.h — the forward activations of the step-1 dump (nsa-train
// --dump-acts), so a regression report can name the first layer and branch whose
// forward differs from a known-good run (harness/core/baseline.c reads them).
//
// At MODEL_EV_LAYER_FWD_DONE of layer L (every row of the layer computed) the
// layer's activations are copied to host memory, converted to F32 (F64 on the
// fp64 backend; the selected block indices stay I32), named
// "acts.blocks.L.<name>" in forward dataflow order:
//   attn_norm.out [B,T,C]   attn.q [B,T,H*D]   attn.{cmp,sel,win}.{k,v} [B,T,G*D]
//   attn.cmp.Kc, attn.cmp.Vc [B,NC,G,D]   attn.cmp.o [B,T,H*D]
//   attn.sel.idx [B,T,G,n] (I32)   attn.sel.o, attn.win.o [B,T,H*D]
//   attn.gate.out [B,T,G*3]   attn.out [B,T,H*D]   attn.residual [B,T,C]
//   mlp.hidden [B,T,F]   out [B,T,C]
// (a branch the config does not compute, and the gate under force_branch, are absent).
// With --dump-tensors only the activations its globs select are copied from the device.
#ifndef NSA_TRAINER_ACTDUMP_H
#define NSA_TRAINER_ACTDUMP_H
#include "trainer/model.h"
#include "common/safetensors.h"

typedef struct ActDump ActDump;

// select: the comma-separated globs of --dump-tensors (NULL: every activation); the
// string must outlive d.
ActDump *actdump_new(const char *select);
// Capture layer L of the forward just completed (called from the model's
// diagnostics hook at MODEL_EV_LAYER_FWD_DONE): the activations select names.
void actdump_layer(ActDump *d, const Model *m, int L);
// Add every captured tensor to f, layer by layer in forward order; the memory
// stays with d until actdump_free (after st_write).
void actdump_add(const ActDump *d, StFile *f);
void actdump_free(ActDump *d);

// n activation-typed elements at dev (backend memory) as the dump stores them, in a new
// host buffer (free()): F64 on a backend with 8-byte activations, else F32. 16-bit values
// are copied raw and widened on the host (every bf16 and fp16 value is an fp32 value); a
// tensor holding a NaN takes the route through act_to_f64, whose NaN bits are the
// backend's. Either way the floats are those of act_to_f64 narrowed to float.
void *actdump_to_host(const Model *m, const void *dev, int64_t n);
// n bf16 (bf16 != 0) or fp16 bit patterns widened exactly to fp32; returns -1 at the
// first NaN (out then incomplete), else 0.
int actdump_widen16(float *out, const uint16_t *in, int64_t n, int bf16);
#endif
