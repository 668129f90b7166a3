// harness/artifacts/tensornames.c — see tensornames.h.
#include "harness/artifacts/tensornames.h"

#include <stdio.h>

#include "common/nsa_names.h"   // NSA_BR_*: the config's enum values, the branch names

// a name of layer L (fmt has one %d), and one with a part too (%d then %s)
static void add1(StrList *out, const char *fmt, int L) {
    char n[160];
    snprintf(n, sizeof n, fmt, L);
    strlist_add(out, n);
}
static void add(StrList *out, const char *fmt, int L, const char *a) {
    char n[160];
    snprintf(n, sizeof n, fmt, L, a);
    strlist_add(out, n);
}

void dump_tensor_names(const NsaConfig *c, int with_acts, StrList *out) {
    strlist_add(out, "inputs");
    strlist_add(out, "targets");
    strlist_add(out, "logits");
    strlist_add(out, "loss");
    // activations (file order: after loss, before the gradients)
    const int fb = c->force_branch, gated = nsa_gated(fb);
    const int used[3] = {gated || fb == NSA_BR_CMP, gated || fb == NSA_BR_SEL, gated || fb == NSA_BR_WIN};
    const int computed[3] = {used[0] || used[1], used[1], used[2]};
    for (int L = 0; with_acts && L < c->n_layers; L++) {
        add1(out, "acts.blocks.%d.attn_norm.out", L);
        add1(out, "acts.blocks.%d.attn.q", L);
        for (int b = 0; b < 3; b++) {
            if (!computed[b]) continue;
            add(out, "acts.blocks.%d.attn.%s.k", L, nsa_branch_name(b));
            add(out, "acts.blocks.%d.attn.%s.v", L, nsa_branch_name(b));
        }
        if (computed[0]) {
            add1(out, "acts.blocks.%d.attn.cmp.Kc", L);
            add1(out, "acts.blocks.%d.attn.cmp.Vc", L);
            add1(out, "acts.blocks.%d.attn.cmp.o", L);
        }
        if (used[1]) {
            add1(out, "acts.blocks.%d.attn.sel.idx", L);
            add1(out, "acts.blocks.%d.attn.sel.o", L);
        }
        if (used[2]) add1(out, "acts.blocks.%d.attn.win.o", L);
        if (gated) add1(out, "acts.blocks.%d.attn.gate.out", L);
        add1(out, "acts.blocks.%d.attn.out", L);
        add1(out, "acts.blocks.%d.attn.residual", L);
        add1(out, "acts.blocks.%d.mlp.hidden", L);
        add1(out, "acts.blocks.%d.out", L);
    }
    // gradients, in the parameter order of trainer/model.c
    strlist_add(out, "grads.tok_emb.weight");
    for (int L = 0; L < c->n_layers; L++) {
        add1(out, "grads.blocks.%d.attn_norm.weight", L);
        add1(out, "grads.blocks.%d.attn.q_proj.weight", L);
        for (int b = 0; b < 3; b++) {
            add(out, "grads.blocks.%d.attn.k_proj_%s.weight", L, nsa_branch_name(b));
            add(out, "grads.blocks.%d.attn.v_proj_%s.weight", L, nsa_branch_name(b));
        }
        if (c->phi == NSA_PHI_MLP) {
            static const char *const KV[2] = {"k", "v"};
            for (int j = 0; j < 2; j++) {
                add(out, "grads.blocks.%d.attn.cmp_%s.pos_emb", L, KV[j]);
                add(out, "grads.blocks.%d.attn.cmp_%s.fc1.weight", L, KV[j]);
                add(out, "grads.blocks.%d.attn.cmp_%s.fc1.bias", L, KV[j]);
                add(out, "grads.blocks.%d.attn.cmp_%s.fc2.weight", L, KV[j]);
                add(out, "grads.blocks.%d.attn.cmp_%s.fc2.bias", L, KV[j]);
            }
        }
        add1(out, "grads.blocks.%d.attn.gate.fc1.weight", L);
        add1(out, "grads.blocks.%d.attn.gate.fc1.bias", L);
        add1(out, "grads.blocks.%d.attn.gate.fc2.weight", L);
        add1(out, "grads.blocks.%d.attn.gate.fc2.bias", L);
        add1(out, "grads.blocks.%d.attn.o_proj.weight", L);
        add1(out, "grads.blocks.%d.mlp_norm.weight", L);
        add1(out, "grads.blocks.%d.mlp.gate_proj.weight", L);
        add1(out, "grads.blocks.%d.mlp.up_proj.weight", L);
        add1(out, "grads.blocks.%d.mlp.down_proj.weight", L);
    }
    strlist_add(out, "grads.norm_f.weight");
    if (!c->tie_embeddings) strlist_add(out, "grads.lm_head.weight");
}
