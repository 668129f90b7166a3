// harness/artifacts/locus.c — see locus.h.
#include "harness/artifacts/locus.h"

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
        return l;
    }
    // another trainer's names (a probe trainer's `layers.6.attn.select.wk.weight`): the first
    // all-digit component is the layer, as a ModuleList of blocks names it
    for (const char *p = strchr(n, '.'); p; p = strchr(p + 1, '.')) {
        char *end = NULL;
        if (p[1] < '0' || p[1] > '9') continue;
        long L = strtol(p + 1, &end, 10);
        if (*end == '.' || *end == 0) {
            l.layer = (int)L;
            l.part = *end ? block_part(end + 1) : "other";
            break;
        }
    }
    return l;
}

// A module-path pattern of a trainer map ({layer}: one or more digits, captured; *: any run
// of characters) matching `s` itself or a path under it ("PATTERN.rest"), as the probe's
// Pattern.within (probe/nsa_probe/mapfile.py). 1 on a match, *layer set when {layer} took part.
static int pattern_within(const char *p, const char *s, int *layer) {
    if (!*p) return *s == 0 || *s == '.';
    if (!strncmp(p, "{layer}", 7)) {
        int n = 0;
        while (s[n] >= '0' && s[n] <= '9') n++;
        for (int k = n; k >= 1; k--)   // greedy, then shorter (a regex's \d+ backtracks so)
            if (pattern_within(p + 7, s + k, layer)) {
                int v = 0;
                for (int i = 0; i < k && v < 100000000; i++) v = v * 10 + (s[i] - '0');
                *layer = v;
                return 1;
            }
        return 0;
    }
    if (*p == '*') {
        for (const char *t = s + strlen(s);; t--) {
            if (pattern_within(p + 1, t, layer)) return 1;
            if (t == s) return 0;
        }
    }
    return *p == *s && pattern_within(p + 1, s + 1, layer);
}

Locus tensor_locus_in(const char *name, const json_t *modules) {
    Locus l = tensor_locus(name);
    if (!json_is_object(modules) || strncmp(name, "grads.", 6)) return l;
    const char *bare = name + 6;
    int layer = -1;
    const char *lp = json_string_value(json_object_get(modules, "layers"));
    if (lp && pattern_within(lp, bare, &layer) && layer >= 0) l.layer = layer;
    const json_t *branches = json_object_get(modules, "branches");
    for (int b = 0; b < NSA_NBRANCH; b++) {
        const char *bp = json_string_value(json_object_get(branches, nsa_branch_name(b)));
        int lb = -1;
        if (bp && pattern_within(bp, bare, &lb)) {
            l.part = nsa_branch_name(b);
            if (lb >= 0) l.layer = lb;
            return l;
        }
    }
    const char *gp = json_string_value(json_object_get(json_object_get(modules, "gate"), "module"));
    int lg = -1;
    if (gp && pattern_within(gp, bare, &lg)) {
        l.part = "gate";
        if (lg >= 0) l.layer = lg;
    }
    return l;
}

void locus_label(const Locus *l, char *out, unsigned n) {
    if (l->layer >= 0) snprintf(out, n, "layer %d %s", l->layer, l->part);
    else snprintf(out, n, "%s", l->part);
}

// The name after "blocks.L." (NULL outside the blocks), and the prefix-free name.
static const char *block_rest(const char *name, const char **bare, int *layer) {
    if (!strncmp(name, "grads.", 6)) name += 6;
    else if (!strncmp(name, "acts.", 5)) name += 5;
    *bare = name;
    *layer = -1;
    if (strncmp(name, "blocks.", 7)) return NULL;
    char *end = NULL;
    long L = strtol(name + 7, &end, 10);
    if (!end || end == name + 7 || *end != '.') return NULL;
    *layer = (int)L;
    return end + 1;
}

// Within a block: the forward's order of its components (see tensor_model_order).
static int block_rank(const char *rest) {
    if (!strncmp(rest, "attn_norm", 9)) return 0;
    if (!strncmp(rest, "mlp_norm", 8)) return 7;
    const char *part = block_part(rest);
    if (!strcmp(part, "attn"))
        return !strncmp(rest, "attn.q_proj", 11) || !strcmp(rest, "attn.q") ? 1 : 6;   // q before, o/out after
    for (int b = 0; b < NSA_NBRANCH; b++)
        if (!strcmp(part, nsa_branch_name(b))) return 2 + b;   // cmp 2, sel 3, win 4 (nsa_names order)
    if (!strcmp(part, "gate")) return 5;
    if (!strcmp(part, "mlp")) return 8;
    return 9;   // the block output (acts.blocks.L.out), anything else
}

// The forward's order (0 .. 700000000); tensor_model_order puts gradients after it, reversed.
static long forward_key(const char *name) {
    const char *bare;
    int L;
    const char *rest = block_rest(name, &bare, &L);
    if (rest) return 2000000L + (long)L * 100 + block_rank(rest);
    // outside the blocks (the blocks sit between tok_emb and norm_f: 2000000 + 100 L + rank)
    static const struct { const char *prefix; long key; } outside[] = {
        {"inputs", 0}, {"targets", 0}, {"tok_emb", 1000000L}, {"norm_f", 300000000L},
        {"lm_head", 400000000L}, {"logits", 500000000L}, {"loss", 600000000L}};
    for (int i = 0; i < (int)(sizeof outside / sizeof outside[0]); i++)
        if (!strncmp(bare, outside[i].prefix, strlen(outside[i].prefix))) return outside[i].key;
    return 700000000L;
}

long tensor_model_order(const char *name) {
    long f = forward_key(name);
    if (strncmp(name, "grads.", 6)) return f;   // the forward: data, activations, logits, loss
    return 1000000000L + (800000000L - f);      // the backward: lm_head ... blocks.L-1 ... blocks.0 ... tok_emb
}

void tensor_where(const char *name, char *out, unsigned n) {
    const char *bare;
    int L;
    const char *rest = block_rest(name, &bare, &L);
    if (rest) {
        const char *part = block_part(rest);
        if (!strncmp(rest, "attn_norm", 9) || !strncmp(rest, "mlp_norm", 8)) part = "norm";
        snprintf(out, n, "layer %d, branch %s", L, part);
        return;
    }
    const char *what = "other";
    if (!strcmp(bare, "inputs") || !strcmp(bare, "targets")) what = "data";
    else if (!strncmp(bare, "tok_emb", 7)) what = "embedding";
    else if (!strncmp(bare, "norm_f", 6)) what = "final norm";
    else if (!strncmp(bare, "lm_head", 7)) what = "LM head";
    else if (!strcmp(bare, "logits") || !strcmp(bare, "loss")) what = "output";
    snprintf(out, n, "%s", what);
}
