// trainer/actdump.h — the forward activations of the step-1 dump (nsa-train
// --dump-acts), so a regression report can name the first layer and branch whose
// forward differs from a known-good run (harness/baseline.c reads them).
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
#ifndef NSA_TRAINER_ACTDUMP_H
#define NSA_TRAINER_ACTDUMP_H
#include "trainer/model.h"
#include "common/safetensors.h"

typedef struct ActDump ActDump;

ActDump *actdump_new(void);
// Capture layer L of the forward just completed (called from the model's
// diagnostics hook at MODEL_EV_LAYER_FWD_DONE).
void actdump_layer(ActDump *d, const Model *m, int L);
// Add every captured tensor to f, layer by layer in forward order; the memory
// stays with d until actdump_free (after st_write).
void actdump_add(const ActDump *d, StFile *f);
void actdump_free(ActDump *d);
#endif
