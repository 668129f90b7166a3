// harness/artifacts/locus.h — where in the model a dumped tensor belongs: its layer and the
// part of the model whose code produced it, from its dotted name alone.
//
// Names (docs/scenarios.md, "What a run writes"): "logits", "loss", "inputs",
// "targets", "grads.<parameter>" (docs/architecture.md lists every parameter) and,
// with --dump-acts, "acts.blocks.L.<activation>" (docs/diagnostics.md).
// A regression finding groups differing tensors by (layer, part) so that the
// report points at the code: part "sel" of layer 1 is the selection branch.
#ifndef NSA_HARNESS_LOCUS_H
#define NSA_HARNESS_LOCUS_H
#include <jansson.h>

typedef struct {
    int layer;          // block index, -1 outside the blocks
    const char *part;   // "cmp", "sel", "win", "gate", "attn" (q/o projections, norm,
                        // the combined output), "mlp", "embed", "head" (final norm,
                        // LM head, logits, loss), "data" (inputs, targets), "other"
    int is_grad;        // a parameter gradient ("grads.")
    int is_act;         // a forward activation ("acts.", "logits", "loss")
} Locus;

Locus tensor_locus(const char *name);
// The same for a map trainer's gradient names (docs/trainer-maps.md): `modules` is its map's
// "modules" object; a "grads.<parameter>" under a `branches` pattern is that branch's, under
// `gate.module` the gate's, and its layer is what `layers`'s {layer} matched
// (grads.layers.0.attn.select.wk.weight: layer 0 sel). Other names, or modules NULL:
// tensor_locus.
Locus tensor_locus_in(const char *name, const json_t *modules);
// "layer 1 sel" / "head" / "embed": a short label of a locus, into out
void locus_label(const Locus *l, char *out, unsigned n);

// The order a training step computes a dump's tensors, for naming the FIRST tensor where
// two runs part (the origin of a difference: everything computed after it inherits it):
// first the forward — inputs/targets, tok_emb, blocks.0 ... blocks.L-1 (within a block:
// attn_norm, the query, the cmp, sel and win branches, the gate, the attention output
// (o_proj, attn.out, residual), mlp_norm, the MLP, the block output), norm_f, lm_head,
// logits, loss — then the gradients ("grads.<parameter>") in the backward's order, the
// reverse: lm_head, norm_f, blocks.L-1 ... blocks.0 (within a block the MLP, then the
// attention: o_proj, gate, win, sel, cmp, q, attn_norm), tok_emb. A broken backward of
// layer 1's selection branch changes layer 1's k_proj_sel gradient first, then every
// gradient below it (layer 0, tok_emb): forward order would name tok_emb. Unknown names
// after their section. Equal keys: same layer and component (break ties by file order).
long tensor_model_order(const char *name);
// "layer 1, branch sel" / "layer 0, branch norm" / "layer 2, branch mlp" inside a block
// (branch: cmp, sel, win, gate, attn (q/o projections, the combined output), norm
// (attn_norm, mlp_norm), mlp, other); "embedding", "final norm", "LM head", "output"
// (logits, loss), "data" (inputs, targets) outside.
void tensor_where(const char *name, char *out, unsigned n);
#endif
