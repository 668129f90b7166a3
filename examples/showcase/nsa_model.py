"""Native Sparse Attention (NSA) decoder-only language model.

Three attention branches per layer, each with its own key/value projections
(Yuan et al., "Native Sparse Attention", 2025):

  compress (cmp): keys/values of blocks of `cmp_block` tokens taken every
                  `cmp_stride` tokens are compressed to one key/value per block
                  (learnable intra-block position embedding + MLP); a query sees
                  the blocks that end at or before it.
  select   (sel): the compressed attention probabilities, mapped onto blocks
                  of `sel_block` tokens and summed over the heads of a KV
                  group, pick `n_select` blocks per query (block 0, the current
                  block and the one before it are always taken, the remaining
                  ones are the highest-scoring complete blocks); exact causal
                  attention over the tokens of those blocks.
  window   (win): causal sliding window over the last `window` tokens.

out = sum_b sigmoid(gate(x))_b * o_b, gate = Linear -> SiLU -> Linear (3 per head).

Two forward paths: batched prefill (all positions at once) and sequential
prefill (token by token with per-layer KV caches, the decode algorithm).
Both give the same logits up to fp32 rounding.

Experimental switches (see README): `bugs` is a set of names, empty = off.
"""

import math
import os
import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


# kernel tile used to align the selected-key buffer in the batched path
SEL_TILE = 512


@dataclass
class ModelArgs:
    vocab_size: int = 256
    d_model: int = 64
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 16
    ffn_hidden: int = 128
    gate_hidden: int = 16
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    cmp_block: int = 16
    cmp_stride: int = 8
    sel_block: int = 16
    n_select: int = 4
    window: int = 32
    bugs: frozenset = field(default_factory=frozenset)


def parse_bugs(s):
    return frozenset(b.strip() for b in (s or "").split(",") if b.strip())


KNOWN_BUGS = {"gate_zero_init", "unused_param", "nan_seqlen", "prefill_leak",
              "gc_mid_layers", "inplace_op"}


# ----------------------------------------------------------------------------
# small pieces


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.type_as(x) * self.weight


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def rope_cos_sin(pos, head_dim, theta, device):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    ang = pos.float()[:, None] * inv_freq[None, :]           # [T, Dh/2]
    return ang.cos(), ang.sin()


def apply_rope(x, cos, sin):
    # x: [B, T, nh, Dh]; rotate-half convention
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    out = torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1)
    return out.type_as(x)


def cmp_to_sel_map(n_cmp, n_sel, l, d, ls, device):
    """Sparse form of W[i, j] = |[i*d, i*d+l) & [j*ls, (j+1)*ls)| / d.

    Returns idx, w of shape [n_sel, m]: selection block j collects
    sum_r w[j, r] * p_cmp[idx[j, r]] (entries outside 0..n_cmp-1 have weight 0).
    """
    m = (ls + l - 2) // d + 2
    j = torch.arange(n_sel, device=device)[:, None]
    i_lo = torch.div(j * ls - l + 1 + d - 1, d, rounding_mode="floor")
    i = i_lo + torch.arange(m, device=device)[None, :]
    lo = torch.maximum(i * d, j * ls)
    hi = torch.minimum(i * d + l, (j + 1) * ls)
    w = (hi - lo).clamp(min=0).float() / d
    w = w.masked_fill((i < 0) | (i >= n_cmp), 0.0)
    return i.clamp(0, max(n_cmp - 1, 0)), w


# ----------------------------------------------------------------------------
# KV caches for sequential prefill


class PrefillCache:
    """Per-layer cache for token-by-token prefill.

    Tensors are kept with their autograd history so the loss of a sequential
    prefill can be backpropagated through the token loop. `capacity` counts
    tokens (a [B, 1, ...] entry is B tokens).
    """

    def __init__(self, capacity):
        self.capacity = capacity
        self.used = 0
        self.store = {}
        self.step_tokens = 0
        self._retired = []

    def full(self, n=1):
        return self.used + n > self.capacity

    def reserve(self, n):
        if self.full(n):
            self._make_room(n)
        self.used += n
        self.step_tokens += n

    def _evict(self):
        while self._retired and self._retired[0]["released"]:
            seg = self._retired.pop(0)
            self.used -= seg["tokens"]

    def _make_room(self, n):
        # wait for the consumer to release old segments
        while self.full(n):
            self._evict()
            time.sleep(0.001)

    def new_step(self):
        if self.store:
            self._retired.append({"tokens": self.step_tokens, "data": self.store,
                                  "released": False})
        self.store = {}
        self.step_tokens = 0

    def release(self):
        for seg in self._retired:
            seg["released"] = True

    def append(self, name, x, dim=1):
        old = self.store.get(name)
        self.store[name] = x if old is None else torch.cat([old, x], dim=dim)
        return self.store[name]

    def get(self, name):
        return self.store.get(name)


# module-level caches, one per layer, reused across steps (decode server style)
_PREFILL_CACHES = {}


# ----------------------------------------------------------------------------
# attention branches


class CompressedAttention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        d, G, Dh = args.d_model, args.n_kv_heads, args.head_dim
        self.G, self.Dh, self.H = G, Dh, args.n_heads
        self.l, self.d = args.cmp_block, args.cmp_stride
        self.theta = args.rope_theta
        self.wk = nn.Linear(d, G * Dh, bias=False)
        self.wv = nn.Linear(d, G * Dh, bias=False)
        self.k_pe = nn.Parameter(torch.zeros(self.l, Dh))
        self.v_pe = nn.Parameter(torch.zeros(self.l, Dh))
        nn.init.normal_(self.k_pe, std=0.02)
        nn.init.normal_(self.v_pe, std=0.02)
        self.k_mlp = nn.Sequential(nn.Linear(self.l * Dh, Dh), nn.SiLU(), nn.Linear(Dh, Dh))
        self.v_mlp = nn.Sequential(nn.Linear(self.l * Dh, Dh), nn.SiLU(), nn.Linear(Dh, Dh))
        self.last_probs = None

    def _phi(self, blocks, pe, mlp):
        # blocks: [B, n, G, l, Dh]
        B, n, G, l, Dh = blocks.shape
        return mlp((blocks + pe).reshape(B, n, G, l * Dh))      # [B, n, G, Dh]

    def _kv(self, x, pos, cache):
        B, T, _ = x.shape
        cos, sin = rope_cos_sin(pos, self.Dh, self.theta, x.device)
        k = apply_rope(self.wk(x).view(B, T, self.G, self.Dh), cos, sin)
        v = self.wv(x).view(B, T, self.G, self.Dh)
        if cache is None:
            if T < self.l:
                kc = k.new_zeros(B, 0, self.G, self.Dh)
                vc = v.new_zeros(B, 0, self.G, self.Dh)
            else:
                kb = k.unfold(1, self.l, self.d).permute(0, 1, 2, 4, 3)   # [B, n, G, l, Dh]
                vb = v.unfold(1, self.l, self.d).permute(0, 1, 2, 4, 3)
                kc = self._phi(kb, self.k_pe, self.k_mlp)
                vc = self._phi(vb, self.v_pe, self.v_mlp)
            return kc, vc
        # sequential: one token at a time
        t = int(pos[-1])
        kr = cache.append("cmp_k", k)
        vr = cache.append("cmp_v", v)
        if t >= self.l - 1 and (t - self.l + 1) % self.d == 0:
            kb = kr[:, t - self.l + 1:t + 1].unsqueeze(1).permute(0, 1, 3, 2, 4)
            vb = vr[:, t - self.l + 1:t + 1].unsqueeze(1).permute(0, 1, 3, 2, 4)
            cache.append("cmp_kc", self._phi(kb, self.k_pe, self.k_mlp))
            cache.append("cmp_vc", self._phi(vb, self.v_pe, self.v_mlp))
        kc, vc = cache.get("cmp_kc"), cache.get("cmp_vc")
        if kc is None:
            kc = k.new_zeros(B, 0, self.G, self.Dh)
            vc = v.new_zeros(B, 0, self.G, self.Dh)
        return kc, vc

    def _attend(self, q, kc, vc, pos):
        B, T, H, Dh = q.shape
        n = kc.shape[1]
        if n == 0:
            return q.new_zeros(B, T, H, Dh), q.new_zeros(B, H, T, 0).float()
        rep = H // self.G
        qh = q.permute(0, 2, 1, 3)                                        # [B, H, T, Dh]
        kh = kc.permute(0, 2, 1, 3).repeat_interleave(rep, dim=1)         # [B, H, n, Dh]
        vh = vc.permute(0, 2, 1, 3).repeat_interleave(rep, dim=1)
        s = torch.matmul(qh, kh.transpose(-1, -2)) * (Dh ** -0.5)         # [B, H, T, n]
        block_end = torch.arange(n, device=q.device) * self.d + self.l - 1
        mask = block_end[None, :] > pos[:, None]                          # [T, n]
        has_any = (~mask).any(-1, keepdim=True)                           # [T, 1]
        s = s.masked_fill(mask & has_any, float("-inf"))
        p = torch.softmax(s, dim=-1) * has_any                            # empty rows -> 0
        o = torch.matmul(p.type_as(vh), vh)                               # [B, H, T, Dh]
        return o.permute(0, 2, 1, 3), p

    def importance(self, x, q, pos, cache=None):
        """Compressed attention probabilities only (used when this branch is off)."""
        kc, vc = self._kv(x, pos, cache)
        return self._attend(q, kc, vc, pos)[1]

    def forward(self, x, q, pos, cache=None):
        kc, vc = self._kv(x, pos, cache)
        o, p = self._attend(q, kc, vc, pos)
        self.last_probs = p.detach()
        return o


class SelectedAttention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        d, G, Dh, H = args.d_model, args.n_kv_heads, args.head_dim, args.n_heads
        self.G, self.Dh, self.H = G, Dh, H
        self.ls, self.n = args.sel_block, args.n_select
        self.l, self.d = args.cmp_block, args.cmp_stride
        self.theta = args.rope_theta
        assert self.n >= 3, "n_select counts block 0 and the two local blocks"
        self.wk = nn.Linear(d, G * Dh, bias=False)
        self.wv = nn.Linear(d, G * Dh, bias=False)
        # per-head temperature of the selected attention
        self.score_temp = nn.Parameter(torch.ones(H))
        self.temp_in_topk = "unused_param" in args.bugs
        self.bug_pad = "nan_seqlen" in args.bugs
        self.bug_inplace = "inplace_op" in args.bugs

    @torch.no_grad()
    def _pick_blocks(self, p_cmp, pos, n_sel):
        """p_cmp [B, H, T, n_cmp] -> block indices [B, G, T, n], valid [B, G, T, n]."""
        B, H, T, n_cmp = p_cmp.shape
        if n_cmp == 0:
            imp = p_cmp.new_zeros(B, H, T, n_sel).float()
        else:
            idx, w = cmp_to_sel_map(n_cmp, n_sel, self.l, self.d, self.ls, p_cmp.device)
            imp = (p_cmp.float()[..., idx] * w).sum(-1)                   # [B, H, T, n_sel]
        if self.temp_in_topk:
            imp = imp * self.score_temp.view(1, H, 1, 1)
        imp = imp.view(B, self.G, H // self.G, T, n_sel).sum(2)           # [B, G, T, n_sel]
        j = torch.arange(n_sel, device=p_cmp.device)[None, :]
        cur = (pos // self.ls)[:, None]
        forced = (j == 0) | (j == cur) | (j == cur - 1)
        free = (j < cur) & ~forced
        inf = torch.full_like(imp, float("inf"))
        score = torch.where(forced, inf, torch.where(free, imp, -inf))
        if n_sel < self.n:
            score = F.pad(score, (0, self.n - n_sel), value=float("-inf"))
        order = torch.sort(score, dim=-1, descending=True, stable=True).indices[..., :self.n]
        valid = score.gather(-1, order) > float("-inf")
        return order, valid

    def _attend(self, q, k, v, idx, valid, pos, key_pad=None):
        # q [B, T, H, Dh]; k, v [B, L, G, Dh]; idx/valid [B, G, T, n]
        B, T, H, Dh = q.shape
        G, rep, ls = self.G, H // self.G, self.ls
        L = k.shape[1]
        tok = (idx[..., None] * ls + torch.arange(ls, device=q.device)).flatten(-2)  # [B, G, T, n*ls]
        mask = (tok > pos[None, None, :, None]) | ~valid.repeat_interleave(ls, dim=-1)
        tok = tok.clamp(max=L - 1)
        if key_pad is not None:
            mask = mask | key_pad[tok]
        K = tok.shape[-1]
        gidx = tok.reshape(B, G, T * K, 1).expand(B, G, T * K, Dh)
        kg = torch.gather(k.transpose(1, 2), 2, gidx).view(B, G, T, K, Dh)
        vg = torch.gather(v.transpose(1, 2), 2, gidx).view(B, G, T, K, Dh)
        qg = q.view(B, T, G, rep, Dh).permute(0, 2, 1, 3, 4)              # [B, G, T, rep, Dh]
        logits = torch.matmul(qg, kg.transpose(-1, -2))                   # [B, G, T, rep, K]
        if self.temp_in_topk:
            logits = logits * (Dh ** -0.5)
        else:
            logits = logits * ((Dh ** -0.5) * self.score_temp.view(1, G, 1, rep, 1))
        mask = mask[:, :, :, None, :]
        probs = torch.softmax(logits.masked_fill(mask, float("-inf")), dim=-1)
        if self.bug_inplace:
            probs.masked_fill_(mask, 0.0)  # make sure padded keys contribute nothing
        o = torch.matmul(probs.type_as(vg), vg)                           # [B, G, T, rep, Dh]
        return o.permute(0, 2, 1, 3, 4).reshape(B, T, H, Dh)

    def forward(self, x, q, p_cmp, pos, cache=None):
        B, T, _ = x.shape
        cos, sin = rope_cos_sin(pos, self.Dh, self.theta, x.device)
        k = apply_rope(self.wk(x).view(B, T, self.G, self.Dh), cos, sin)
        v = self.wv(x).view(B, T, self.G, self.Dh)
        if cache is not None:
            k = cache.append("sel_k", k)
            v = cache.append("sel_v", v)
            n_sel = int(pos[-1]) // self.ls + 1
            idx, valid = self._pick_blocks(p_cmp, pos, n_sel)
            return self._attend(q, k, v, idx, valid, pos)
        n_sel = (T + self.ls - 1) // self.ls
        idx, valid = self._pick_blocks(p_cmp, pos, n_sel)
        # pad keys to the kernel tile; padded keys are masked out
        pad = (-T) % SEL_TILE
        k = F.pad(k, (0, 0, 0, 0, 0, pad))
        v = F.pad(v, (0, 0, 0, 0, 0, pad))
        key_pad = torch.zeros(T + pad, dtype=torch.bool, device=x.device)
        if self.bug_pad:
            key_pad[-pad:] = True
        else:
            key_pad[T:] = True
        return self._attend(q, k, v, idx, valid, pos, key_pad)


class SlidingWindowAttention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        d, G, Dh = args.d_model, args.n_kv_heads, args.head_dim
        self.G, self.Dh, self.H = G, Dh, args.n_heads
        self.w = args.window
        self.theta = args.rope_theta
        self.wk = nn.Linear(d, G * Dh, bias=False)
        self.wv = nn.Linear(d, G * Dh, bias=False)

    def forward(self, x, q, pos, cache=None):
        B, T, _ = x.shape
        G, Dh, H, w = self.G, self.Dh, self.H, self.w
        rep = H // G
        cos, sin = rope_cos_sin(pos, Dh, self.theta, x.device)
        k = apply_rope(self.wk(x).view(B, T, G, Dh), cos, sin)
        v = self.wv(x).view(B, T, G, Dh)
        qg = q.view(B, T, G, rep, Dh)
        if cache is not None:
            kk = cache.append("win_k", k)[:, -w:]                         # [B, L, G, Dh]
            vv = cache.append("win_v", v)[:, -w:]
            logits = torch.matmul(qg[:, 0], kk.permute(0, 2, 3, 1)) * (Dh ** -0.5)  # [B, G, rep, L]
            p = torch.softmax(logits, dim=-1)
            o = torch.matmul(p.type_as(vv), vv.permute(0, 2, 1, 3))       # [B, G, rep, Dh]
            return o.reshape(B, 1, H, Dh)
        # chunked local attention: queries of chunk c see the keys of chunks c-1 and c
        nc = (T + w - 1) // w
        tp = nc * w
        qc = F.pad(q, (0, 0, 0, 0, 0, tp - T)).view(B, nc, w, G, rep, Dh)
        qc = qc.permute(0, 3, 1, 2, 4, 5).reshape(B, G, nc, w * rep, Dh)
        kb = F.pad(k, (0, 0, 0, 0, w, tp - T)).view(B, nc + 1, w, G, Dh)
        vb = F.pad(v, (0, 0, 0, 0, w, tp - T)).view(B, nc + 1, w, G, Dh)
        kk = torch.cat([kb[:, :-1], kb[:, 1:]], dim=2).permute(0, 3, 1, 4, 2)   # [B, G, nc, Dh, 2w]
        vv = torch.cat([vb[:, :-1], vb[:, 1:]], dim=2).permute(0, 3, 1, 2, 4)   # [B, G, nc, 2w, Dh]
        logits = torch.matmul(qc, kk) * (Dh ** -0.5)                      # [B, G, nc, w*rep, 2w]
        qpos = torch.arange(tp, device=x.device).view(nc, w, 1)
        kpos = (torch.arange(nc, device=x.device) * w - w).view(nc, 1, 1) + torch.arange(2 * w, device=x.device)
        mask = (kpos > qpos) | (kpos <= qpos - w) | (kpos < 0)              # [nc, w, 2w]
        logits = logits.view(B, G, nc, w, rep, 2 * w).masked_fill(mask[:, :, None, :], float("-inf"))
        p = torch.softmax(logits, dim=-1).view(B, G, nc, w * rep, 2 * w)
        o = torch.matmul(p.type_as(vv), vv)                               # [B, G, nc, w*rep, Dh]
        o = o.view(B, G, nc, w, rep, Dh).permute(0, 2, 3, 1, 4, 5).reshape(B, tp, H, Dh)
        return o[:, :T]


class NativeSparseAttention(nn.Module):
    BRANCHES = ("cmp", "sel", "win")

    def __init__(self, args: ModelArgs):
        super().__init__()
        d, H, Dh = args.d_model, args.n_heads, args.head_dim
        assert H % args.n_kv_heads == 0
        self.H, self.Dh, self.theta = H, Dh, args.rope_theta
        self.wq = nn.Linear(d, H * Dh, bias=False)
        self.compress = CompressedAttention(args)
        self.select = SelectedAttention(args)
        self.window = SlidingWindowAttention(args)
        self.gate = nn.Sequential(nn.Linear(d, args.gate_hidden), nn.SiLU(),
                                  nn.Linear(args.gate_hidden, 3 * H))
        self.wo = nn.Linear(H * Dh, d, bias=False)
        if "gate_zero_init" in args.bugs:
            nn.init.zeros_(self.gate[2].weight)
            nn.init.zeros_(self.gate[2].bias)
        else:
            nn.init.xavier_uniform_(self.gate[2].weight, gain=0.1)
            nn.init.zeros_(self.gate[2].bias)
        self.force_branch = os.environ.get("NSA_FORCE_BRANCH", "").strip().lower() or None
        if self.force_branch in ("none", "all"):
            self.force_branch = None
        if self.force_branch is not None and self.force_branch not in self.BRANCHES:
            raise ValueError(f"NSA_FORCE_BRANCH must be one of {self.BRANCHES}, got {self.force_branch!r}")

    def forward(self, x, pos, cache=None):
        B, T, _ = x.shape
        cos, sin = rope_cos_sin(pos, self.Dh, self.theta, x.device)
        q = apply_rope(self.wq(x).view(B, T, self.H, self.Dh), cos, sin)
        fb = self.force_branch
        if fb == "cmp":
            o = self.compress(x, q, pos, cache)
        elif fb == "sel":
            with torch.no_grad():
                p_cmp = self.compress.importance(x, q, pos, cache)
            o = self.select(x, q, p_cmp, pos, cache)
        elif fb == "win":
            o = self.window(x, q, pos, cache)
        else:
            o_cmp = self.compress(x, q, pos, cache)
            o_sel = self.select(x, q, self.compress.last_probs, pos, cache)
            o_win = self.window(x, q, pos, cache)
            g = torch.sigmoid(self.gate(x)).view(B, T, self.H, 3)
            o = g[..., 0:1] * o_cmp + g[..., 1:2] * o_sel + g[..., 2:3] * o_win
        return self.wo(o.reshape(B, T, self.H * self.Dh))


class NSABlock(nn.Module):
    def __init__(self, layer_id, args: ModelArgs):
        super().__init__()
        self.layer_id = layer_id
        self.attention_norm = RMSNorm(args.d_model, args.norm_eps)
        self.attn = NativeSparseAttention(args)
        self.ffn_norm = RMSNorm(args.d_model, args.norm_eps)
        self.feed_forward = FeedForward(args.d_model, args.ffn_hidden)
        # attention output temperature (annealing experiments; 1.0 = off)
        self.register_buffer("attn_temp", torch.ones(()))
        self.anneal_in_forward = "gc_mid_layers" in args.bugs and 6 <= layer_id < 12

    def forward(self, x, pos, cache=None):
        a = self.attn(self.attention_norm(x), pos, cache)
        if self.anneal_in_forward:
            t = self.attn_temp.clone()
            self.attn_temp.mul_(0.999)
            a = a * t
        h = x + a
        return h + self.feed_forward(self.ffn_norm(h))


class NSATransformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.d_model)
        self.layers = nn.ModuleList([NSABlock(i, args) for i in range(args.n_layers)])
        self.norm = RMSNorm(args.d_model, args.norm_eps)
        self.output = nn.Linear(args.d_model, args.vocab_size, bias=False)
        self.gc_begin, self.gc_end = 0, 0

    def set_grad_checkpointing(self, begin, end):
        self.gc_begin, self.gc_end = begin, end

    def forward(self, tokens, batched=True):
        if batched:
            return self._forward_batched(tokens)
        return self._forward_sequential(tokens)

    def _forward_batched(self, tokens):
        B, T = tokens.shape
        pos = torch.arange(T, device=tokens.device)
        h = self.tok_embeddings(tokens)
        for i, layer in enumerate(self.layers):
            if self.training and self.gc_begin <= i < self.gc_end:
                h = checkpoint(layer, h, pos, use_reentrant=False)
            else:
                h = layer(h, pos)
        return self.output(self.norm(h))

    def _caches(self, B, T):
        cap = 4 * B * T
        if "prefill_leak" in self.args.bugs:
            for i in range(len(self.layers)):
                if i not in _PREFILL_CACHES:
                    _PREFILL_CACHES[i] = PrefillCache(cap)
                _PREFILL_CACHES[i].new_step()
            return [_PREFILL_CACHES[i] for i in range(len(self.layers))]
        return [PrefillCache(cap) for _ in self.layers]

    def _forward_sequential(self, tokens):
        B, T = tokens.shape
        caches = self._caches(B, T)
        outs = []
        for t in range(T):
            pos = torch.arange(t, t + 1, device=tokens.device)
            h = self.tok_embeddings(tokens[:, t:t + 1])
            for layer, cache in zip(self.layers, caches):
                cache.reserve(B)
                h = layer(h, pos, cache)
            outs.append(self.output(self.norm(h)))
        return torch.cat(outs, dim=1)
