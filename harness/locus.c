// harness/locus.c — see locus.h.
#include "harness/locus.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/nsa_names.h"

// The part of a block tensor, from the name after "blocks.L.". Branch tensors
// carry the branch in their name: k_proj_sel, cmp_k.fc1, attn.sel.o, attn.cmp.Kc.
static const char *block_part(const char *rest) {
    for (int b = 0; b < NSA_NBRANCH; b++) {
        const char *br = nsa_branch_name(b);
        char a[16], c[16], d[16];
        snprintf(a, sizeof a, "_%s", br);   // k_proj_cmp
        snprintf(c, sizeof c, ".%s.", br);  // attn.sel.o
        snprintf(d, sizeof d, "%s_", br);   // cmp_k.fc1 (phi = mlp)
        if (strstr(rest, a) || strstr(rest, c) || strstr(rest, d)) return br;
    }
    if (strstr(rest, "gate.") || strstr(rest, ".gate")) {
        // attn.gate.* is the NSA gate; mlp.gate_proj is the SwiGLU gate
        if (!strncmp(rest, "mlp", 3)) return "mlp";
        return "gate";
    }
    if (!strncmp(rest, "mlp", 3)) return "mlp";   // mlp.*, mlp_norm
    if (!strncmp(rest, "attn", 4)) return "attn"; // attn_norm, attn.q_proj, attn.o_proj, attn.o
    return "other";
}

Locus tensor_locus(const char *name) {
    Locus l = {-1, "other", 0, 0};
    const char *n = name;
    if (!strncmp(n, "grads.", 6)) {
        l.is_grad = 1;
        n += 6;
    } else if (!strncmp(n, "acts.", 5)) {
        l.is_act = 1;
        n += 5;
    }
    if (!strcmp(n, "inputs") || !strcmp(n, "targets")) {
        l.part = "data";
        return l;
    }
    if (!strcmp(n, "logits") || !strcmp(n, "loss")) {
        l.part = "head";
        l.is_act = 1;
        return l;
    }
    if (!strncmp(n, "tok_emb", 7)) {
        l.part = "embed";
        return l;
    }
    if (!strncmp(n, "norm_f", 6) || !strncmp(n, "lm_head", 7)) {
        l.part = "head";
        return l;
    }
    if (!strncmp(n, "blocks.", 7)) {
        char *end = NULL;
        long L = strtol(n + 7, &end, 10);
        if (end && end != n + 7 && *end == '.') {
            l.layer = (int)L;
            l.part = block_part(end + 1);
        }
    }
    return l;
}

void locus_label(const Locus *l, char *out, unsigned n) {
    if (l->layer >= 0) snprintf(out, n, "layer %d %s", l->layer, l->part);
    else snprintf(out, n, "%s", l->part);
}
