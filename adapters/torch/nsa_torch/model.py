"""nsa_torch/model.py — the NSA decoder (docs/design.md sections 2-3, docs/architecture.md
"The model"): parameters with nsa-train's names, shapes and order, nsa-train's seeded
initialisation, and the forward (autograd does the backward).

Parameters live in an nn.Module tree whose named_parameters() are exactly the names of
`nsa-harness list --tensors` (tok_emb.weight, blocks.L.attn.q_proj.weight, ...), in
nsa-train's order; the forward is functional over a dict name -> tensor (`weights`), so a
parameter cut off by a fault is the same parameter detached.

Initialisation (`init_weights`) is nsa-train's: element e of parameter i is a pure function
of (seed, stream 0x1A17000 + i, e) through trainer/rng.h's generator — normal(0, 0.02) for
projections and embeddings, 0.02/sqrt(2L) for o_proj and down_proj, ones for norms, zero
biases, Xavier-uniform for the mlp compressor and Xavier-uniform with gain 0.1 for gate.fc2
— computed in float64 with numpy (log/cos may differ from glibc's in the last bit, so a
value can differ by one fp32 ulp after rounding; --init-weights gives identical weights)."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

from nsa_torch import attention as A
from nsa_torch import data as rngmod


class _Holder(nn.Module):
    def __init__(self, **shapes):
        super().__init__()
        for k, shape in shapes.items():
            setattr(self, k, nn.Parameter(torch.zeros(*shape)))


def _lin(o, i, bias=False):
    return _Holder(weight=(o, i), bias=(o,)) if bias else _Holder(weight=(o, i))


class _Attn(nn.Module):
    def __init__(self, c, phi, gh):
        super().__init__()
        C, H, G, D, l = c["dim"], c["n_heads"], c["n_kv_heads"], c["head_dim"], c["_l"]
        self.q_proj = _lin(H * D, C)
        for b in A.BRANCHES:
            setattr(self, "k_proj_" + b, _lin(G * D, C))
            setattr(self, "v_proj_" + b, _lin(G * D, C))
        if phi == "mlp":
            for kv in ("k", "v"):
                m = nn.Module()
                m.pos_emb = nn.Parameter(torch.zeros(l, D))
                m.fc1 = _lin(D, l * D, True)
                m.fc2 = _lin(D, D, True)
                setattr(self, "cmp_" + kv, m)
        self.gate = nn.Module()
        self.gate.fc1 = _lin(gh, C, True)
        self.gate.fc2 = _lin(3 * G, gh, True)
        self.o_proj = _lin(C, H * D)


class _Block(nn.Module):
    def __init__(self, c, phi, gh):
        super().__init__()
        C, Fd = c["dim"], c["ffn_dim"]
        self.attn_norm = _Holder(weight=(C,))
        self.attn = _Attn(c, phi, gh)
        self.mlp_norm = _Holder(weight=(C,))
        self.mlp = nn.Module()
        self.mlp.gate_proj = _lin(Fd, C)
        self.mlp.up_proj = _lin(Fd, C)
        self.mlp.down_proj = _lin(C, Fd)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


class NSAModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        m, n = cfg["model"], cfg["nsa"]
        c = dict(m)
        c["_l"] = n["l"]
        self.tok_emb = _Holder(weight=(m["vocab_size"], m["dim"]))
        self.blocks = nn.ModuleList([_Block(c, n["phi"], n["gate_hidden"]) for _ in range(m["n_layers"])])
        self.norm_f = _Holder(weight=(m["dim"],))
        if not m["tie_embeddings"]:
            self.lm_head = _Holder(weight=(m["vocab_size"], m["dim"]))
        fb = n["force_branch"]
        self.gated = fb == "none"
        self.used = {b: self.gated or fb == b for b in A.BRANCHES}
        self.cmp_needed = self.used["cmp"] or self.used["sel"]
        self.names = [k for k, _ in self.named_parameters()]

    # ---- parameters -------------------------------------------------------------------------
    def init_weights(self, seed):
        L = self.cfg["model"]["n_layers"]
        with torch.no_grad():
            for i, (name, p) in enumerate(self.named_parameters()):
                shape = tuple(p.shape)
                numel = p.numel()
                stream = 0x1A17000 + i
                e = np.arange(numel, dtype=np.uint64)
                if name.endswith("norm.weight") or name == "norm_f.weight":
                    v = np.ones(numel)
                elif name.endswith(".bias"):
                    v = np.zeros(numel)
                elif name.endswith("gate.fc2.weight") or ".cmp_" in name and name.endswith("fc1.weight") \
                        or ".cmp_" in name and name.endswith("fc2.weight"):
                    gain = 0.1 if "gate.fc2" in name else 1.0
                    bound = gain * math.sqrt(6.0 / (shape[0] + shape[1]))
                    v = bound * (2.0 * rngmod.rng_uniform(seed, stream, e) - 1.0)
                else:
                    std = 0.02 / math.sqrt(2.0 * L) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
                    v = std * rngmod.rng_normal(seed, stream, e)
                p.copy_(torch.from_numpy(np.asarray(v, dtype=np.float64).reshape(shape)).to(p.dtype))

    def expected_unused(self):
        """model_expected_unused: what the config says gets no gradient (force_branch)."""
        if self.gated:
            return []
        out = []
        for name in self.names:
            parts = name.split(".")
            if len(parts) < 4 or parts[2] != "attn":
                continue
            if parts[3] == "gate":
                out.append(name)
            for b in A.BRANCHES:
                if not self.used[b] and parts[3] in ("k_proj_" + b, "v_proj_" + b):
                    out.append(name)
            if not self.used["cmp"] and parts[3] in ("cmp_k", "cmp_v"):
                out.append(name)
        return out

    def weights(self, ctx):
        dropped = ctx.dropped if ctx is not None else ()
        return {k: (p.detach() if k in dropped else p) for k, p in self.named_parameters()}

    # ---- one block over rows [t0, t0+Tn) ---------------------------------------------------------
    def layer_rows(self, pw, L, x, t0, Tn, ctx, st=None):
        cfg, g = self.cfg, ctx.geom
        m, n = cfg["model"], cfg["nsa"]
        B, H, G, D = x.shape[0], g.H, g.G, g.D
        pre = "blocks.%d." % L
        eps = m["norm_eps"]
        chk = ctx.check if st is None else None
        acts = ctx.acts if st is None else None
        rec = {}

        def note(name, t, branch, op):
            if chk is not None:
                chk(pre + name, t, L, branch, op)
            if acts is not None:
                rec[name] = t

        xn = rmsnorm(x, pw[pre + "attn_norm.weight"], eps)
        note("attn_norm.out", xn, "", "rmsnorm_fwd")
        q = A.rope(F.linear(xn, pw[pre + "attn.q_proj.weight"]).view(B, Tn, H, D), g, t0, Tn)
        note("attn.q", q.reshape(B, Tn, H * D), "", "matmul_fwd+rope")
        K, V = {}, {}
        for b in A.BRANCHES:
            if not (self.used[b] or (b == "cmp" and self.cmp_needed)):
                continue
            with torch.set_grad_enabled(torch.is_grad_enabled() and self.used[b]):
                k = A.rope(F.linear(xn, pw[pre + "attn.k_proj_%s.weight" % b]).view(B, Tn, G, D), g, t0, Tn)
                v = F.linear(xn, pw[pre + "attn.v_proj_%s.weight" % b]).view(B, Tn, G, D)
            note("attn.%s.k" % b, k.reshape(B, Tn, G * D), b, "matmul_fwd+rope")
            note("attn.%s.v" % b, v.reshape(B, Tn, G * D), b, "matmul_fwd")
            if st is None:
                K[b], V[b] = k, v
            else:
                st["k" + b][:, t0:t0 + Tn] = k
                st["v" + b][:, t0:t0 + Tn] = v
                K[b], V[b] = st["k" + b], st["v" + b]
        o, p_cmp = {}, None
        if self.cmp_needed:
            with torch.set_grad_enabled(torch.is_grad_enabled() and self.used["cmp"]):
                if st is None:
                    Kc = A.compress(K["cmp"], 0, g.NC, n["phi"], pw, pre, "k", g)
                    Vc = A.compress(V["cmp"], 0, g.NC, n["phi"], pw, pre, "v", g)
                else:
                    i0 = _visible(g, t0 - 1)
                    i1 = _visible(g, t0 + Tn - 1)
                    if i1 > i0 and not st.get("stale"):
                        st["Kc"][:, i0:i1] = A.compress(K["cmp"], i0, i1, n["phi"], pw, pre, "k", g)
                        st["Vc"][:, i0:i1] = A.compress(V["cmp"], i0, i1, n["phi"], pw, pre, "v", g)
                    Kc, Vc = st["Kc"], st["Vc"]
                note("attn.cmp.Kc", Kc, "cmp", "compress_fwd")
                note("attn.cmp.Vc", Vc, "cmp", "compress_fwd")
                if g.NC > 0:
                    o["cmp"], p_cmp = A.attend(q, Kc, Vc, g.cmp_mask[t0:t0 + Tn][None, None], g)
                else:
                    o["cmp"] = torch.zeros_like(q)
                o["cmp"] = ctx.poison(L, "cmp", o["cmp"], t0, Tn)
                note("attn.cmp.o", o["cmp"].reshape(B, Tn, H * D), "cmp", "cmp_attn_fwd")
        chosen = None
        if self.used["sel"]:
            keys, chosen = A.select(p_cmp, g, t0, Tn, B)
            o["sel"], _ = A.attend(q, K["sel"], V["sel"], keys, g)
            o["sel"] = ctx.poison(L, "sel", o["sel"], t0, Tn)
            if acts is not None:
                rec["attn.sel.idx"] = _sel_idx(chosen, n["n"])
            note("attn.sel.o", o["sel"].reshape(B, Tn, H * D), "sel", "sel_attn_fwd")
        if self.used["win"]:
            o["win"], _ = A.attend(q, K["win"], V["win"], g.win_mask[t0:t0 + Tn][None, None], g)
            o["win"] = ctx.poison(L, "win", o["win"], t0, Tn)
            note("attn.win.o", o["win"].reshape(B, Tn, H * D), "win", "win_attn_fwd")
        gate = None
        if self.gated:
            gh = F.silu(F.linear(xn, pw[pre + "attn.gate.fc1.weight"], pw[pre + "attn.gate.fc1.bias"]))
            gl = F.linear(gh, pw[pre + "attn.gate.fc2.weight"], pw[pre + "attn.gate.fc2.bias"]).view(B, Tn, G, 3)
            # sigmoid in float64, rounded back: torch's vectorised fp32 sigmoid gives a row different
            # bits depending on where it falls in the call (the vector tail), which would break the
            # bitwise agreement of batched and sequential prefill
            gate = torch.softmax(gl, -1) if n["gate_act"] == "softmax" else torch.sigmoid(gl.double()).to(gl.dtype)
            note("attn.gate.out", gate.reshape(B, Tn, G * 3), "gate", "gate_act_fwd")
            gh_ = gate.repeat_interleave(g.hpg, dim=2)
            ao = gh_[..., 0:1] * o["cmp"] + gh_[..., 1:2] * o["sel"] + gh_[..., 2:3] * o["win"]
        else:
            ao = o[n["force_branch"]]
        ao = ao.reshape(B, Tn, H * D)
        note("attn.out", ao, "", "combine_fwd")
        x_mid = x + F.linear(ao, pw[pre + "attn.o_proj.weight"])
        note("attn.residual", x_mid, "", "matmul_fwd(o_proj)+residual")
        xn2 = rmsnorm(x_mid, pw[pre + "mlp_norm.weight"], eps)
        ffa = F.linear(xn2, pw[pre + "mlp.gate_proj.weight"])
        ffb = F.linear(xn2, pw[pre + "mlp.up_proj.weight"])
        ffh = F.silu(ffa) * ffb
        note("mlp.hidden", ffh, "", "swiglu_fwd")
        y = x_mid + F.linear(ffh, pw[pre + "mlp.down_proj.weight"])
        note("out", y, "", "matmul_fwd(down_proj)+residual")
        if acts is not None:
            ctx.acts.update({"acts.blocks.%d.%s" % (L, k): v for k, v in rec.items()})
        return y, gate, (ffa, ffh)

    # ---- the whole model -----------------------------------------------------------------------------
    def forward(self, inputs, targets, ctx):
        cfg = self.cfg
        Lnum = cfg["model"]["n_layers"]
        pw = self.weights(ctx)
        x = F.embedding(inputs, pw["tok_emb.weight"])
        if ctx.check is not None:
            ctx.check("tok_emb.out", x, -1, "", "embedding_fwd")
        if x.requires_grad:
            x.register_hook(_bwd_beat(ctx, -1, "embedding_bwd"))
        ck0, ck1 = cfg["train"]["checkpoint_layers"]
        sequential = ctx.sequential and ctx.check is None and ctx.acts is None
        dec = self.decode(pw, x.detach(), ctx) if sequential else None
        ctx.saved_ff = {}
        for L in range(Lnum):
            ctx.event("forward", L, "layer_fwd")
            if sequential or ck0 <= L < ck1:
                x = torch.utils.checkpoint.checkpoint(_CkptLayer(self, pw, L, ctx, dec), x,
                                                      **_ckpt_kwargs())
            else:
                x, gate, ff = self.layer_rows(pw, L, x, 0, x.shape[1], ctx)
                ctx.layer_done(L, gate)
                ctx.saved_ff[L] = ff
            if x.requires_grad:
                x.register_hook(_bwd_beat(ctx, L))
        ctx.event("forward", -1, "head")
        xf = rmsnorm(x, pw["norm_f.weight"], cfg["model"]["norm_eps"])
        head = pw["tok_emb.weight"] if cfg["model"]["tie_embeddings"] else pw["lm_head.weight"]
        logits = F.linear(xf, head)
        if ctx.check is not None:
            ctx.check("logits", logits, -1, "", "matmul_fwd(lm_head)")
        if logits.requires_grad:
            logits.register_hook(_bwd_beat(ctx, -1, "head_bwd"))
        lg = logits.reshape(-1, logits.shape[-1])
        if lg.dtype in (torch.float16, torch.bfloat16):
            lg = lg.float()
        losses = F.cross_entropy(lg, targets.reshape(-1), reduction="none")
        return logits, losses

    def decode(self, pw, x, ctx):
        """Sequential prefill, the decode algorithm: token t goes through every block before t+1
        starts; each block keeps caches of its keys and values and of the compressed blocks
        completed so far. Returns every block's output [B, T, C] (no gradient: the backward
        recomputes each block batched, as checkpointing does)."""
        g = ctx.geom
        B, T, C = x.shape
        Lnum = self.cfg["model"]["n_layers"]
        with torch.no_grad():
            states = ctx.decode_states(self, B, x.dtype, x.device)
            outs = [torch.zeros_like(x) for _ in range(Lnum)]
            gates = [None] * Lnum
            for t in range(T):
                xt = x[:, t:t + 1]
                for L in range(Lnum):
                    ctx.event("forward", L, "layer_fwd", throttle=t > 0)
                    xt, gate, _ = self.layer_rows(pw, L, xt, t, 1, ctx, states[L])
                    outs[L][:, t:t + 1] = xt
                    if gate is not None:
                        if gates[L] is None:
                            gates[L] = torch.zeros(B, T, g.G, 3, dtype=gate.dtype, device=gate.device)
                        gates[L][:, t:t + 1] = gate
            for L in range(Lnum):
                ctx.layer_done(L, gates[L])
        return outs


def _visible(g, t):
    """compressed blocks complete at row t (ended at or before t)"""
    if t < g.l - 1:
        return 0
    return min(g.NC, (t - g.l + 1) // g.d + 1)


def _sel_idx(chosen, n):
    """[B, G, T, NS] bool -> [B, T, G, n] int32 (ascending, -1 padded)"""
    B, G, T, NS = chosen.shape
    j = torch.arange(NS, device=chosen.device).expand_as(chosen)
    key = torch.where(chosen, j, NS + j)
    srt = torch.sort(key, dim=-1).values[..., :n]
    srt = torch.where(srt < NS, srt, torch.full_like(srt, -1))
    if srt.shape[-1] < n:
        srt = torch.cat([srt, torch.full((B, G, T, n - srt.shape[-1]), -1, device=srt.device, dtype=srt.dtype)], -1)
    return srt.permute(0, 2, 1, 3).to(torch.int32)


def _ckpt_kwargs():
    import inspect
    try:
        if "use_reentrant" in inspect.signature(torch.utils.checkpoint.checkpoint).parameters:
            return {"use_reentrant": True, "preserve_rng_state": False}
    except (TypeError, ValueError):
        pass
    return {"preserve_rng_state": False}


class _CkptLayer:
    """The function torch.utils.checkpoint runs for block L. Its first call (under no_grad)
    is the forward: the batched block, or, in sequential prefill, the decode algorithm's
    output for the block; its second call (grad enabled, inside backward) recomputes the
    block batched — where gc_recompute_mismatch perturbs the input."""

    def __init__(self, model, pw, L, ctx, dec):
        self.model, self.pw, self.L, self.ctx, self.dec = model, pw, L, ctx, dec

    def __call__(self, x):
        ctx, L = self.ctx, self.L
        if not torch.is_grad_enabled():
            if self.dec is not None:
                return self.dec[L]
            y, gate, _ = self.model.layer_rows(self.pw, L, x, 0, x.shape[1], ctx)
            ctx.layer_done(L, gate)
            return y
        ctx.event("backward", L, "recompute")
        ck0, ck1 = self.model.cfg["train"]["checkpoint_layers"]
        if ctx.faults.gc_mismatch_layer == L and ck0 <= L < ck1:
            eps = 1.0 / 64 if x.dtype in (torch.bfloat16, torch.float16) else 1e-3
            sign = torch.ones(x.numel(), dtype=x.dtype, device=x.device)
            sign[1::2] = -1
            x = x + (x.detach() * (eps * sign.view_as(x)))
        y, _, _ = self.model.layer_rows(self.pw, L, x, 0, x.shape[1], ctx)
        return y


def _bwd_beat(ctx, L, op="layer_bwd"):
    def hook(grad):
        ctx.event("backward", L, op)
        if ctx.check is not None and op == "layer_bwd":
            ctx.check("blocks.%d.out.grad" % L, grad, L, "", "layer_bwd", phase="backward")
        return None
    return hook
