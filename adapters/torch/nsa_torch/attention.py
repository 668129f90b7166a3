"""nsa_torch/attention.py — NSA attention (docs/design.md section 3) over a row range.

One code path serves both forward algorithms: `Geom` holds what depends only on the
config and T (masks, the Eq. 9 overlap weights, the forced/candidate blocks per query
row, the RoPE table), and every function works on query rows [t0, t0+Tn) against keys
of full length T (batched prefill: the rows are the whole sequence; sequential prefill:
one token, against caches of length T whose future rows are masked). Every op is
row-independent on the CPU (a row's bits do not depend on how many rows are in the call:
BLAS GEMM rows, last-dim reductions and softmax over rows of equal length), so the two
algorithms agree bitwise; tests/cli/torch_adapter.sh checks it.

Attention of one branch: scores s = scale * q.k over the keys the row sees (a boolean
mask), softmax, p.V. A row that sees no key gives o = 0 and p = 0 (never NaN, no gradient)."""
import math

import torch
import torch.nn.functional as F

BRANCHES = ("cmp", "sel", "win")


class Geom:
    def __init__(self, cfg, T, device, dtype):
        m, n = cfg["model"], cfg["nsa"]
        self.T, self.H, self.G, self.D = T, m["n_heads"], m["n_kv_heads"], m["head_dim"]
        self.hpg = self.H // self.G
        self.l, self.d, self.lsel, self.n, self.w = n["l"], n["d"], n["l_sel"], n["n"], n["w"]
        self.scale = 1.0 / math.sqrt(self.D)
        self.NC = (T - self.l) // self.d + 1 if T >= self.l else 0
        self.NS = (T + self.lsel - 1) // self.lsel
        t = torch.arange(T, device=device)
        ic = torch.arange(self.NC, device=device)
        self.cmp_mask = (ic[None, :] * self.d + self.l - 1 <= t[:, None])            # [T, NC]
        s = t[None, :]
        self.causal = s <= t[:, None]                                                # [T, T]
        self.win_mask = self.causal & (s > t[:, None] - self.w)
        self.kblock = t // self.lsel                                                 # [T]
        # Eq. 9 overlap weights w(i, j) = |[i d, i d + l) ∩ [j l', (j+1) l')| / d
        W = torch.zeros(self.NC, self.NS, dtype=torch.float64)
        for i in range(self.NC):
            for j in range(i * self.d // self.lsel, (i * self.d + self.l - 1) // self.lsel + 1):
                lo, hi = max(i * self.d, j * self.lsel), min(i * self.d + self.l, (j + 1) * self.lsel)
                W[i, j] = max(0, hi - lo) / self.d
        self.Wov = W.to(device)
        j = torch.arange(self.NS, device=device)
        cur = (t // self.lsel)[:, None]
        self.forced = ((j[None, :] == 0) | (j[None, :] == cur) | (j[None, :] == cur - 1)) & (j[None, :] <= cur)
        self.cand = (j[None, :] >= 1) & (j[None, :] <= cur - 2)
        self.kslots = (self.n - self.forced.sum(-1)).clamp(min=0)                   # [T]
        self.rank_base = j
        # RoPE (rotate-half): angle p * theta^(-2i/D), computed in double, stored in the compute type
        half = self.D // 2
        ang = torch.arange(T, dtype=torch.float64)[:, None] * torch.tensor(
            [m["rope_theta"] ** (-2.0 * i / self.D) for i in range(half)], dtype=torch.float64)[None, :]
        self.cos = torch.cos(ang).to(device=device, dtype=dtype)
        self.sin = torch.sin(ang).to(device=device, dtype=dtype)
        # compressed block i covers keys [i d, i d + l)
        self.cidx = (torch.arange(self.NC, device=device)[:, None] * self.d
                     + torch.arange(self.l, device=device)[None, :])                 # [NC, l]


def rope(x, g, t0, Tn):
    """x [B, Tn, nh, D] at positions t0.. : rotate-half."""
    half = g.D // 2
    c = g.cos[t0:t0 + Tn][None, :, None, :]
    s = g.sin[t0:t0 + Tn][None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def attend(q, K, V, mask, g):
    """q [B, Tn, H, D]; K, V [B, S, G, D]; mask bool [B|1, G|1, Tn, S]. -> o [B, Tn, H, D], p [B, G, hpg, Tn, S]"""
    B, Tn = q.shape[0], q.shape[1]
    qg = q.reshape(B, Tn, g.G, g.hpg, g.D).permute(0, 2, 3, 1, 4)                     # B G hpg Tn D
    s = torch.matmul(qg, K.permute(0, 2, 3, 1).unsqueeze(2)) * g.scale                 # B G hpg Tn S
    m = mask.unsqueeze(2)
    has = m.any(-1, keepdim=True)
    s = s.masked_fill(~m & has, float("-inf"))
    p = torch.softmax(s, dim=-1).masked_fill(~has, 0.0)
    o = torch.matmul(p, V.permute(0, 2, 1, 3).unsqueeze(2))                            # B G hpg Tn D
    return o.permute(0, 3, 1, 2, 4).reshape(B, Tn, g.H, g.D), p


def compress(src, i0, i1, phi, pw, pre, kv, g):
    """Compressed keys (kv='k') or values of blocks [i0, i1) from src [B, T, G, D]: [B, i1-i0, G, D]."""
    blocks = src[:, g.cidx[i0:i1]]                                                     # B Ni l G D
    if phi == "avg":
        return blocks.mean(2)
    B, Ni = blocks.shape[0], blocks.shape[1]
    pe = pw[pre + "attn.cmp_%s.pos_emb" % kv]
    X = (blocks + pe[None, None, :, None, :]).permute(0, 1, 3, 2, 4).reshape(B, Ni, g.G, g.l * g.D)
    h = F.silu(F.linear(X, pw[pre + "attn.cmp_%s.fc1.weight" % kv], pw[pre + "attn.cmp_%s.fc1.bias" % kv]))
    return F.linear(h, pw[pre + "attn.cmp_%s.fc2.weight" % kv], pw[pre + "attn.cmp_%s.fc2.bias" % kv])


def select(p_cmp, g, t0, Tn, B):
    """Top-n block selection (no gradient). p_cmp [B, G, hpg, Tn, NC] or None. -> key mask [B, G, Tn, T]
    and the selected blocks [B, G, Tn, NS] (bool)."""
    dev = g.forced.device
    if p_cmp is None or g.NC == 0:
        score = torch.zeros(B, g.G, Tn, g.NS, dtype=torch.float64, device=dev)
    else:
        score = torch.matmul(p_cmp.detach().double().sum(2), g.Wov)                    # B G Tn NS
    forced, cand = g.forced[t0:t0 + Tn], g.cand[t0:t0 + Tn]
    sc = score.masked_fill(~cand, float("-inf"))
    order = torch.sort(sc, dim=-1, descending=True, stable=True).indices
    rank = torch.empty_like(order)
    rank.scatter_(-1, order, g.rank_base.expand_as(order).contiguous())
    chosen = forced | (cand & (rank < g.kslots[t0:t0 + Tn, None]))
    keys = chosen[..., g.kblock] & g.causal[t0:t0 + Tn]
    return keys, chosen
