#!/usr/bin/env python3
"""tools/reference/nsa_reference.py — an independent PyTorch autograd reference of the
NSA decoder (docs/design.md §2-3), in float64, that writes golden/ tensors.

It is written from the design's math, not from our C code: dense masked attention
(T x T masks; this is a reference, not a kernel), compression by pooling or the
block MLP, Eq. 9 selection scores from the compressed branch's probabilities, a
plain sort for the top-n, the gate and combine, SwiGLU, RMSNorm, rotate-half RoPE,
and autograd for every gradient.

Inputs (both written by nsa-train):
  --init FILE   a checkpoint holding the step-0 weights (nsa-train --save after one
                step with train.lr=1e-300: AdamW then moves no weight, the update
                rounds away in fp32; exactly-zero biases become -0.0)
  --dump FILE   nsa-train --dump-step: the step-1 batch (inputs, targets), the
                config (metadata), and the C backend's logits/loss/gradients, which
                are only used for the printed sanity comparison
Output (--out FILE, safetensors): inputs, targets (I32), params.<name> (F32, the
weights used), logits (F32), loss (F64 scalar), grads.<name> (F32), metadata:
config (canonical JSON), provenance. tests/trainer/test_golden.c checks the CPU
backend against it (CI), and the CUDA backend with NSA_GOLDEN_BACKEND=cuda.

Runs with torch >= 1.13 on CPU or CUDA (--device), always float64.
  python3 tools/reference/nsa_reference.py --init init.st --dump dump.st --out golden/tiny_avg_softmax.safetensors
"""
import argparse
import datetime
import json
import math
import struct
import sys

import torch

# ---- safetensors (standard format, no extra package) ------------------------------------
DT = {"F64": (torch.float64, 8), "F32": (torch.float32, 4), "I32": (torch.int32, 4), "I64": (torch.int64, 8),
      "F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2), "U8": (torch.uint8, 1)}


def st_read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = hdr.pop("__metadata__", {}) or {}
    base = 8 + n
    out = {}
    for name, info in hdr.items():
        dt, sz = DT[info["dtype"]]
        b0, b1 = info["data_offsets"]
        buf = bytearray(raw[base + b0:base + b1])
        t = torch.frombuffer(buf, dtype=dt) if b1 > b0 else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"]).clone()
    return out, meta


def st_write(path, tensors, meta):
    names = sorted(tensors)
    hdr = {"__metadata__": meta}
    blobs, off = [], 0
    rev = {v[0]: k for k, v in DT.items()}
    for k in names:
        t = tensors[k].detach().contiguous().cpu()
        b = t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.view(torch.int16).numpy().tobytes()
        hdr[k] = {"dtype": rev[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    js = json.dumps(hdr, separators=(",", ":")).encode("utf-8")
    js += b" " * ((8 - len(js) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)))
        f.write(js)
        for b in blobs:
            f.write(b)


# ---- the model, from docs/design.md ------------------------------------------------------------
class Cfg:
    def __init__(self, js):
        m, s, t = js["model"], js["nsa"], js["train"]
        self.V, self.C, self.L = m["vocab_size"], m["dim"], m["n_layers"]
        self.H, self.G, self.D, self.F = m["n_heads"], m["n_kv_heads"], m["head_dim"], m["ffn_dim"]
        self.eps, self.theta, self.tied = m["norm_eps"], m["rope_theta"], m["tie_embeddings"]
        self.l, self.d, self.lsel, self.n, self.w = s["l"], s["d"], s["l_sel"], s["n"], s["w"]
        self.phi, self.gate_act, self.force = s["phi"], s["gate_act"], s["force_branch"]
        self.gh = s["gate_hidden"]


def rmsnorm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):
    """rotate-half RoPE at each token's position; x [B, T, nh, D]"""
    B, T, nh, D = x.shape
    half = D // 2
    pos = torch.arange(T, dtype=torch.float64, device=x.device)
    inv = theta ** (-2.0 * torch.arange(half, dtype=torch.float64, device=x.device) / D)
    ang = pos[:, None] * inv[None, :]
    c, s = torch.cos(ang)[None, :, None, :], torch.sin(ang)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def masked_attention(q, k, v, mask, scale):
    """q [B,T,H,D]; k, v [B,S,G,D]; mask [B,G,T,S] bool (query t sees key s).
    Rows without any key give o = 0 (and no gradient), never NaN. Returns o, p."""
    B, T, H, D = q.shape
    G = k.shape[2]
    hpg = H // G
    qg = q.view(B, T, G, hpg, D).permute(0, 2, 3, 1, 4)          # B G hpg T D
    kg, vg = k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)         # B G S D
    s = torch.einsum("bghtd,bgsd->bghts", qg, kg) * scale
    m4 = mask[:, :, None, :, :]
    s = s.masked_fill(~m4, float("-inf"))
    mx = s.amax(-1, keepdim=True)
    mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx)).detach()
    e = torch.exp(s - mx) * m4
    den = e.sum(-1, keepdim=True)
    p = e / torch.where(den > 0, den, torch.ones_like(den))
    o = torch.einsum("bghts,bgsd->bghtd", p, vg)
    return o.permute(0, 3, 1, 2, 4).reshape(B, T, H, D), p         # p: B G hpg T S


def select_blocks(p_cmp, cfg, T):
    """p_cmp [B,G,hpg,T,NC] (compressed-branch probabilities). Returns the selection
    mask [B,G,T,T] over raw keys and the chosen block lists."""
    B, G = p_cmp.shape[0], p_cmp.shape[1]
    NC = p_cmp.shape[-1]
    NS = (T + cfg.lsel - 1) // cfg.lsel
    # Eq. 9 overlap weights w(i,j) = |[i d, i d + l) ∩ [j l', (j+1) l')| / d
    W = torch.zeros(NC, NS, dtype=torch.float64, device=p_cmp.device)
    for i in range(NC):
        for j in range(NS):
            lo, hi = max(i * cfg.d, j * cfg.lsel), min(i * cfg.d + cfg.l, (j + 1) * cfg.lsel)
            W[i, j] = max(0, hi - lo) / cfg.d
    score = torch.einsum("bgtc,cj->bgtj", p_cmp.sum(2), W) if NC > 0 else \
        torch.zeros(B, G, T, NS, dtype=torch.float64, device=p_cmp.device)
    score = score.cpu()
    mask = torch.zeros(B, G, T, T, dtype=torch.bool)
    chosen = []
    for b in range(B):
        for g in range(G):
            for t in range(T):
                cur = t // cfg.lsel
                forced = sorted({0, cur, cur - 1} & set(range(0, cur + 1)))
                cand = [j for j in range(1, cur - 1) if j not in forced]   # complete, not forced
                cand.sort(key=lambda j: (-float(score[b, g, t, j]), j))    # highest first, ties: lower index
                sel = sorted(forced + cand[:max(0, cfg.n - len(forced))])
                chosen.append(sel)
                for j in sel:
                    s0, s1 = j * cfg.lsel, min((j + 1) * cfg.lsel, t + 1)
                    mask[b, g, t, s0:s1] = True
    return mask.to(p_cmp.device), chosen


def block(x, P, pre, cfg):
    B, T, C = x.shape
    H, G, D = cfg.H, cfg.G, cfg.D
    scale = 1.0 / math.sqrt(D)
    xn = rmsnorm(x, P[pre + "attn_norm.weight"], cfg.eps)
    q = rope((xn @ P[pre + "attn.q_proj.weight"].T).view(B, T, H, D), cfg.theta)
    k, v = {}, {}
    for br in ("cmp", "sel", "win"):
        k[br] = rope((xn @ P[pre + f"attn.k_proj_{br}.weight"].T).view(B, T, G, D), cfg.theta)
        v[br] = (xn @ P[pre + f"attn.v_proj_{br}.weight"].T).view(B, T, G, D)
    dev = x.device
    tpos = torch.arange(T, device=dev)
    # compressed branch: block i covers [i d, i d + l); query t sees i iff i d + l - 1 <= t
    NC = (T - cfg.l) // cfg.d + 1 if T >= cfg.l else 0
    comp = []
    for kv, src in (("k", k["cmp"]), ("v", v["cmp"])):
        if NC == 0:
            comp.append(torch.zeros(B, 0, G, D, dtype=x.dtype, device=dev))
            continue
        blocks = torch.stack([src[:, i * cfg.d:i * cfg.d + cfg.l] for i in range(NC)], 1)   # B NC l G D
        if cfg.phi == "avg":
            comp.append(blocks.mean(2))
        else:
            pe = P[pre + f"attn.cmp_{kv}.pos_emb"]                                          # l D
            X = (blocks + pe[None, None, :, None, :]).permute(0, 1, 3, 2, 4).reshape(B, NC, G, cfg.l * D)
            h = torch.nn.functional.silu(X @ P[pre + f"attn.cmp_{kv}.fc1.weight"].T + P[pre + f"attn.cmp_{kv}.fc1.bias"])
            comp.append(h @ P[pre + f"attn.cmp_{kv}.fc2.weight"].T + P[pre + f"attn.cmp_{kv}.fc2.bias"])
    Kc, Vc = comp
    ic = torch.arange(NC, device=dev)
    mask_c = (ic[None, :] * cfg.d + cfg.l - 1 <= tpos[:, None])[None, None].expand(B, G, T, NC)
    o_cmp, p_cmp = masked_attention(q, Kc, Vc, mask_c, scale)
    # selection (no gradient through top-n)
    mask_s, _ = select_blocks(p_cmp.detach(), cfg, T)
    o_sel, _ = masked_attention(q, k["sel"], v["sel"], mask_s, scale)
    # sliding window: keys t - w + 1 .. t
    mask_w = ((tpos[None, :] <= tpos[:, None]) & (tpos[None, :] > tpos[:, None] - cfg.w))[None, None].expand(B, G, T, T)
    o_win, _ = masked_attention(q, k["win"], v["win"], mask_w, scale)
    # gate: act(fc2(silu(fc1(xn)))), 3 values per group, column g*3 + branch
    hg = torch.nn.functional.silu(xn @ P[pre + "attn.gate.fc1.weight"].T + P[pre + "attn.gate.fc1.bias"])
    gl = (hg @ P[pre + "attn.gate.fc2.weight"].T + P[pre + "attn.gate.fc2.bias"]).view(B, T, G, 3)
    gate = torch.softmax(gl, -1) if cfg.gate_act == "softmax" else torch.sigmoid(gl)
    gate_h = gate.repeat_interleave(H // G, dim=2)                                          # B T H 3
    o = gate_h[..., 0:1] * o_cmp + gate_h[..., 1:2] * o_sel + gate_h[..., 2:3] * o_win
    x = x + o.reshape(B, T, H * D) @ P[pre + "attn.o_proj.weight"].T
    xn2 = rmsnorm(x, P[pre + "mlp_norm.weight"], cfg.eps)
    hm = torch.nn.functional.silu(xn2 @ P[pre + "mlp.gate_proj.weight"].T) * (xn2 @ P[pre + "mlp.up_proj.weight"].T)
    return x + hm @ P[pre + "mlp.down_proj.weight"].T


def forward(P, inputs, targets, cfg):
    x = P["tok_emb.weight"][inputs.long()]
    for L in range(cfg.L):
        x = block(x, P, f"blocks.{L}.", cfg)
    xf = rmsnorm(x, P["norm_f.weight"], cfg.eps)
    head = P["tok_emb.weight"] if cfg.tied else P["lm_head.weight"]
    logits = xf @ head.T
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.V), targets.reshape(-1).long())
    return logits, loss


def rel(a, b):
    a, b = a.double().cpu().reshape(-1), b.double().cpu().reshape(-1)
    d = torch.linalg.norm(b)
    return float(torch.linalg.norm(a - b) / d) if d > 0 else float(torch.linalg.norm(a - b))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--init", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--command", default="", help="the generating command, recorded in the metadata")
    args = ap.parse_args()
    ck, _ = st_read(args.init)
    dump, dmeta = st_read(args.dump)
    cjs = json.loads(dmeta["config"])
    if cjs["nsa"]["force_branch"] != "none":
        sys.exit("force_branch configs are not covered by this reference")
    cfg = Cfg(cjs)
    dev = torch.device(args.device)
    names = [k for k in ck if not k.startswith("optim.")]
    P = {k: ck[k].to(dev, torch.float64).requires_grad_(True) for k in names}
    inputs, targets = dump["inputs"].to(dev), dump["targets"].to(dev)
    logits, loss = forward(P, inputs, targets, cfg)
    loss.backward()
    print(f"reference loss {loss.item():.12f} | C ({dmeta.get('backend', '?')}) loss {dump['loss'].item():.12f}")
    print(f"  logits rel err (C vs reference) {rel(dump['logits'], logits.detach()):.3e}")
    worst = max((rel(dump['grads.' + k], P[k].grad), k) for k in names)
    print(f"  worst gradient rel err (C vs reference) {worst[0]:.3e} ({worst[1]})")
    out = {"inputs": inputs.cpu().to(torch.int32), "targets": targets.cpu().to(torch.int32),
           "logits": logits.detach().cpu().to(torch.float32), "loss": loss.detach().cpu().reshape(())}
    for k in names:
        out["params." + k] = ck[k].to(torch.float32)
        out["grads." + k] = P[k].grad.detach().cpu().to(torch.float32)
    meta = {"config": dmeta["config"],
            "provenance": "tools/reference/nsa_reference.py (PyTorch %s, float64, device %s), %s UTC" %
                          (torch.__version__, args.device, datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M")),
            "command": args.command}
    st_write(args.out, out, meta)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
