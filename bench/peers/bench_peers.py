#!/usr/bin/env python3
"""bench/peers/bench_peers.py — the public NSA kernels timed the way bench_cuda_attn times ours.

    bench_peers.py --peers DEST [--S 2048,8192,65536] [--shape m7c|paper|both] [--reps 5]
                   [--warmup 2] [--only flash_nsa,nsa_triton] [--budget-s 420] [--grace-s 60]
                   [--check-max-s 2048]

DEST is a folder made by bench/peers/stage.sh (each peer's Python package, exported from a
snapshot of its repository, and PEERS.txt with the commits). For each peer, shape and S this
times the compressed + selected branches of NSA, compression and top-n selection included,
forward + backward, bf16, B = 1, with our geometry: l = 32, d = 16, l' = 64, n = 16 (one
initial + two local blocks forced, as ours), sliding window not timed (flash_nsa's needs
flash_attn; the table compares compressed + selected for everyone). Shapes as
bench_cuda_attn: m7c = 12 q / 2 KV heads, D 64; paper = 64 q / 4 KV heads, D 128.

One repetition = (grads cleared, not timed) sync, forward, sync, backward of both branch
outputs with one random dout, sync. Printed: the median over REPS repetitions after WARMUP
untimed ones (REPS capped at 3 for S >= 32768, as bench_cuda_attn does), one line per case in
the format of bench_cuda_attn's SUMMARY line plus `peer=NAME`:

    SUMMARY paper  S=8192   B=1   peer=flash_nsa keys/query sel 983 | cmp+sel fwd+bwd 8.380 ms | fwd ... | bwd ... | ...
    SUMMARY m7c    S=2048   B=1   peer=nsa_triton | SKIP: <why it could not run>

At S <= --check-max-s (default 2048) one more, untimed forward is compared with an fp32 torch
reference built from the same inputs and the peer's own top-n indices; the line ends with
`check vs fp32 torch: cmp rel E sel rel E ok|MISMATCH` (relative L2 error, tolerance 2e-2).

Each peer runs in a child process of its own (a CUDA fault or an import error in one cannot
take the other down); a case a child never reported gets a SKIP line naming the reason. The
whole run starts no case once --budget-s seconds have passed (each peer may use its fair share
of what is left when it starts), and stops a case still running --grace-s seconds later.

The peers' own files are never modified; this file wraps their public functions:
  flash_nsa  (mdy666/Scalable-Flash-Native-Sparse-Attention; the sequence of HFNSACore.forward):
    NSAHelper.set_hyperparameters + init_cu_seqlens; mean_pooling(k), mean_pooling(v);
    compress_attn(q, ck, cv) -> o_cmp, lse; slc_topk_indices(q, ck, lse,
    maybe_efficient_version=True, scale_slc_p=True) -> topk; select_attn(q, k, v, topk) -> o_sel.
  nsa_triton (XunhaoLai/native-sparse-attention-triton; the sequence of its ops README and
    NativeSparseAttention.forward with compress_type="avgpool"):
    avgpool_compress(k), avgpool_compress(v); compressed_attention(q, ck, cv, 32, 16, 64, 16, ...,
    init_blocks=1, local_blocks=2) -> o_cmp, topk_idx; topk_sparse_attention(q, k, v, topk_idx, 64).
Imports: only the modules these calls need. The packages' __init__ files are skipped (a stub
package object with the right __path__ is put in sys.modules): flash_nsa/__init__.py imports
pandas, its inference package and the module that wants flash_attn; native_sparse_attention/
ops/__init__.py imports the decode kernels and the torch reference ops. Where a module-level
import is missing on the machine, a shim is put in sys.modules: pkg_resources (flash_nsa/
utils.py uses only parse_version) and einops (weighted_pool.py imports einops.einsum, used only
with a positional embedding, which we do not pass). Each shim announces itself on stderr.
"""
import argparse
import os
import selectors
import subprocess
import sys
import time
import types

SHAPES = {"m7c": (12, 2, 64), "paper": (64, 4, 128)}   # H q heads, G KV heads, D
L_CMP, D_STRIDE, L_SEL, TOP_N, WINDOW = 32, 16, 64, 16, 512
N_INIT, N_LOCAL = 1, 2
CHECK_TOL = 2e-2   # relative L2 error of a bf16 branch output against the fp32 reference
PEERS = ("flash_nsa", "nsa_triton")
PKG = {"flash_nsa": "flash_nsa", "nsa_triton": "native_sparse_attention"}


def die(msg):
    print("bench_peers.py: " + msg, file=sys.stderr)
    sys.exit(2)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="bench_peers.py", description=__doc__.split("\n")[0])
    ap.add_argument("--peers", required=True, help="folder made by bench/peers/stage.sh")
    ap.add_argument("--S", default="2048,8192,65536", help="comma-separated sequence lengths")
    ap.add_argument("--shape", default="both", help="m7c, paper or both")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions (median)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed repetitions first (Triton compiles here)")
    ap.add_argument("--only", default=",".join(PEERS), help="comma-separated peers: " + ", ".join(PEERS))
    ap.add_argument("--budget-s", type=float, default=420.0, help="start no case after this many seconds")
    ap.add_argument("--grace-s", type=float, default=60.0, help="then stop a case still running after this many more")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check-max-s", type=int, default=2048,
                    help="compare both branch outputs with an fp32 torch reference at S up to this (0: never)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    try:
        a.S = [int(x) for x in a.S.split(",") if x.strip()]
    except ValueError:
        die("--S wants comma-separated integers, got '%s'" % a.S)
    if not a.S or any(s < L_SEL for s in a.S):
        die("--S wants sequence lengths >= %d, got '%s'" % (L_SEL, ",".join(map(str, a.S))))
    if a.shape not in ("m7c", "paper", "both"):
        die("--shape wants m7c, paper or both, got '%s'" % a.shape)
    a.shapes = ["m7c", "paper"] if a.shape == "both" else [a.shape]
    if a.reps < 1:
        die("--reps wants a count >= 1, got %d" % a.reps)
    if a.warmup < 1:
        die("--warmup wants a count >= 1 (the first call compiles), got %d" % a.warmup)
    a.only = [p for p in a.only.split(",") if p]
    bad = [p for p in a.only if p not in PEERS]
    if bad or not a.only:
        die("--only wants peers among %s, got '%s'" % (", ".join(PEERS), ",".join(bad) or "(none)"))
    if a.grace_s < 0:
        die("--grace-s wants seconds >= 0, got %g" % a.grace_s)
    if a.budget_s <= 0:
        die("--budget-s wants seconds > 0, got %g" % a.budget_s)
    if not os.path.isfile(os.path.join(a.peers, "PEERS.txt")):
        die("--peers '%s' has no PEERS.txt: stage it first (bash bench/peers/stage.sh %s)" % (a.peers, a.peers))
    return a


def read_peers_txt(dest):
    info = {}
    with open(os.path.join(dest, "PEERS.txt")) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            p = line.rstrip("\n").split("\t")
            if len(p) >= 4:
                info[p[0]] = {"commit": p[1], "date": p[2], "origin": p[3]}
    return info


def case_head(shape, S, peer):
    return "SUMMARY %-6s S=%-6d B=%-3d peer=%s" % (shape, S, 1, peer)


def skip_line(shape, S, peer, why):
    why = " ".join(str(why).split())[:300]
    return "%s | SKIP: %s" % (case_head(shape, S, peer), why)


# ---------------------------------------------------------------- shims and imports

def note(msg):
    print("bench_peers.py: " + msg, file=sys.stderr, flush=True)


def stub_package(name, path):
    """Make `name` importable as a package rooted at `path` without running its __init__.py."""
    m = types.ModuleType(name)
    m.__path__ = [path]
    m.__package__ = name
    m.__file__ = os.path.join(path, "__init__.py")
    sys.modules[name] = m
    parent, _, child = name.rpartition(".")
    if parent and parent in sys.modules:
        setattr(sys.modules[parent], child, m)
    return m


def ensure_pkg_resources():
    try:
        import pkg_resources  # noqa: F401
        return
    except Exception:
        pass
    m = types.ModuleType("pkg_resources")
    try:
        from packaging.version import Version as _V

        def parse_version(s):
            return _V(str(s))
    except Exception:
        def parse_version(s):
            out = []
            for x in str(s).split("+")[0].split("."):
                num = "".join(c for c in x if c.isdigit())
                out.append(int(num) if num else 0)
            return tuple(out)
    m.parse_version = parse_version
    sys.modules["pkg_resources"] = m
    note("pkg_resources is missing here: shim with parse_version only (flash_nsa/utils.py needs no more)")


def _einsum_shim(*args):
    import torch
    *tensors, pattern = args
    names = {}

    def tr(side):
        out = []
        for tok in side.replace("...", " ... ").split():
            if tok == "...":
                out.append("...")
            else:
                out.append(names.setdefault(tok, "abcdefghijklmnopqrstuvwxyz"[len(names)]))
        return "".join(out)
    lhs, rhs = pattern.split("->")
    return torch.einsum(",".join(tr(s) for s in lhs.split(",")) + "->" + tr(rhs), *tensors)


def ensure_einops():
    try:
        import einops  # noqa: F401
        return
    except Exception:
        pass
    m = types.ModuleType("einops")
    m.einsum = _einsum_shim

    def rearrange(*a, **k):
        raise NotImplementedError("einops is missing on this machine (bench_peers.py shim): rearrange")
    m.rearrange = rearrange
    sys.modules["einops"] = m
    note("einops is missing here: shim (einsum through torch.einsum, rearrange raises; the timed calls use neither)")


class FlashNSA:
    name = "flash_nsa"

    def __init__(self, dest):
        root = os.path.join(dest, "flash_nsa")
        if not os.path.isdir(os.path.join(root, "flash_nsa")):
            raise RuntimeError("%s has no flash_nsa/ package (run stage.sh)" % root)
        sys.path.insert(0, root)
        ensure_pkg_resources()
        stub_package("flash_nsa", os.path.join(root, "flash_nsa"))
        from flash_nsa.utils import NSAHelper
        from flash_nsa.ops.compress_kv import mean_pooling
        from flash_nsa.ops.compress_attn import compress_attn
        from flash_nsa.ops.topk import slc_topk_indices
        from flash_nsa.ops.select_attn import select_attn
        self.H, self.mean_pooling, self.compress_attn = NSAHelper, mean_pooling, compress_attn
        self.slc_topk_indices, self.select_attn = slc_topk_indices, select_attn
        NSAHelper.set_hyperparameters(kernel_size=L_CMP, stride=D_STRIDE, block_size=L_SEL, window_size=WINDOW,
                                      top_n=TOP_N, num_init_blocks=N_INIT, num_local_blocks=N_LOCAL)
        self.path = "Ampere (no TMA) kernels" if NSAHelper.is_use_ampere_ops() else "Hopper TMA kernels"

    def describe(self):
        return ("compression mean_pooling (mean of l=32, stride 16, as ours); selection slc_topk_indices "
                "(efficient 32/16/64 kernel, fp16 block scores cubed; 1 initial + 2 local forced); %s" % self.path)

    def check(self, H, G, D):
        if H % G:
            return "H %% G != 0 (H=%d, G=%d)" % (H, G)
        if D & (D - 1):   # compress_attn/select_attn assert log2(v head dim) is an integer
            return "head dim %d is not a power of two (flash_nsa asserts it for V)" % D
        return None

    def setup(self, S, dev):
        import torch
        self.cu = torch.tensor([0, S], dtype=torch.int32, device=dev)
        self.H.init_cu_seqlens(self.cu)

    def forward(self, q, k, v, scale):
        ck = self.mean_pooling(k)
        cv = self.mean_pooling(v)
        o_cmp, lse = self.compress_attn(q, ck, cv, sm_scale=scale)
        topk, _ = self.slc_topk_indices(q, ck, lse, sm_scale=scale, maybe_efficient_version=True, scale_slc_p=True)
        o_sel = self.select_attn(q, k, v, topk, sm_scale=scale)
        return [o_cmp, o_sel], topk


class NSATriton:
    name = "nsa_triton"

    def __init__(self, dest):
        root = os.path.join(dest, "nsa_triton")
        pkg = os.path.join(root, "native_sparse_attention")
        if not os.path.isdir(pkg):
            raise RuntimeError("%s has no native_sparse_attention/ package (run stage.sh)" % root)
        sys.path.insert(0, root)
        ensure_einops()
        stub_package("native_sparse_attention", pkg)
        stub_package("native_sparse_attention.ops", os.path.join(pkg, "ops"))
        from native_sparse_attention.ops.triton.weighted_pool import avgpool_compress
        from native_sparse_attention.ops.triton.compressed_attention import compressed_attention
        from native_sparse_attention.ops.triton.topk_sparse_attention import topk_sparse_attention
        self.avgpool_compress, self.compressed_attention = avgpool_compress, compressed_attention
        self.topk_sparse_attention = topk_sparse_attention

    def describe(self):
        return ("compression avgpool_compress (mean of l=32, stride 16, as ours; the repo also has weightedpool/linear); "
                "selection inside compressed_attention (scores recomputed, summed over the group's heads, "
                "torch.topk + sort; 1 initial + 2 local forced; per KV head loop above S=32768)")

    def check(self, H, G, D):
        if H % G:
            return "H %% G != 0 (H=%d, G=%d)" % (H, G)
        if D > 256:
            return "head dim %d > 256 (not supported by native-sparse-attention-triton)" % D
        return None

    def setup(self, S, dev):
        import torch
        self.S = S
        self.NC = (S - L_CMP) // D_STRIDE + 1
        self.cu = torch.tensor([0, S], dtype=torch.int32, device=dev)

    def forward(self, q, k, v, scale):
        ck, ccu = self.avgpool_compress(k, None, self.cu, L_CMP, D_STRIDE, None)
        cv, _ = self.avgpool_compress(v, None, self.cu, L_CMP, D_STRIDE, None)
        o_cmp, topk_idx = self.compressed_attention(q, ck, cv, L_CMP, D_STRIDE, L_SEL, TOP_N, self.cu, ccu,
                                                    self.S, self.NC, scale, init_blocks=N_INIT, local_blocks=N_LOCAL)
        o_sel = self.topk_sparse_attention(q, k, v, topk_idx, L_SEL, self.cu, scale)
        return [o_cmp, o_sel], topk_idx


ADAPTERS = {"flash_nsa": FlashNSA, "nsa_triton": NSATriton}


# ---------------------------------------------------------------- timing (child)

def sel_keys_per_query(topk, S):
    """Selected keys per (query, KV head) from the peer's indices [KV heads, S, n] (ours: 'keys/query sel')."""
    import torch
    idx = topk.long()
    t = torch.arange(S, device=idx.device).view(1, S, 1)
    valid = (idx >= 0) & (idx <= t // L_SEL)
    k0 = idx * L_SEL
    cnt = (torch.minimum(k0 + L_SEL, t + 1) - k0).clamp(min=0) * valid
    return cnt.sum().item() / (S * idx.shape[0])


def ref_outputs(q, k, v, topk, scale):
    """fp32 torch reference of both branches from the same inputs and the peer's own top-n
    indices: compressed attention over mean-pooled blocks visible to each row, selected
    attention over the keys <= t of the valid selected blocks. Returns (o_cmp, o_sel, rows
    with a visible compressed block)."""
    import torch
    S, H, D = q.shape
    G = k.shape[1]
    hpg = H // G
    dev = q.device
    qf, kf, vf = q.detach().float(), k.detach().float(), v.detach().float()
    NC = (S - L_CMP) // D_STRIDE + 1
    win = (torch.arange(NC, device=dev)[:, None] * D_STRIDE + torch.arange(L_CMP, device=dev)[None, :])
    kc = kf[win].mean(1).repeat_interleave(hpg, dim=1)          # [NC, H, D]
    vc = vf[win].mean(1).repeat_interleave(hpg, dim=1)
    t = torch.arange(S, device=dev)
    vis = (torch.arange(NC, device=dev)[None, :] * D_STRIDE + L_CMP - 1) <= t[:, None]   # [S, NC]
    sc = torch.einsum("thd,ihd->hti", qf, kc) * scale
    p = torch.softmax(sc.masked_fill(~vis, float("-inf")), -1).nan_to_num(0.0)
    o_cmp = torch.einsum("hti,ihd->thd", p, vc)
    NS = (S + L_SEL - 1) // L_SEL
    idx = topk.long()
    valid = (idx >= 0) & (idx <= (t // L_SEL).view(1, S, 1))
    blk = torch.zeros(G, S, NS, dtype=torch.int32, device=dev)
    blk.scatter_add_(2, idx.clamp(0, NS - 1), valid.int())
    keym = (blk > 0)[:, :, t // L_SEL] & (t[None, :] <= t[:, None])[None]          # [G, S(t), S(s)]
    keym = keym.repeat_interleave(hpg, dim=0)                                      # [H, S, S]
    ss = torch.einsum("thd,shd->hts", qf, kf.repeat_interleave(hpg, dim=1)) * scale
    ps = torch.softmax(ss.masked_fill(~keym, float("-inf")), -1).nan_to_num(0.0)
    o_sel = torch.einsum("hts,shd->thd", ps, vf.repeat_interleave(hpg, dim=1))
    return o_cmp, o_sel, t >= L_CMP - 1


def rel_err(x, ref, rows):
    x, ref = x.detach().float()[rows], ref[rows]
    return ((x - ref).norm() / ref.norm().clamp(min=1e-30)).item()


def bench_case(ad, shape, S, reps, warmup, seed, device="cuda", check_max_s=2048):
    import torch
    H, G, D = SHAPES[shape]
    why = ad.check(H, G, D)
    if why:
        return skip_line(shape, S, ad.name, why)
    dev = torch.device(device)
    torch.manual_seed(seed)
    q = torch.randn(S, H, D, device=dev, dtype=torch.bfloat16).requires_grad_(True)
    k = torch.randn(S, G, D, device=dev, dtype=torch.bfloat16).requires_grad_(True)
    v = torch.randn(S, G, D, device=dev, dtype=torch.bfloat16).requires_grad_(True)
    dout = torch.randn(S, H, D, device=dev, dtype=torch.bfloat16)
    scale = D ** -0.5
    ad.setup(S, dev)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    tf, tb, tt = [], [], []
    keys = None
    for r in range(warmup + reps):
        q.grad = k.grad = v.grad = None
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        outs, topk = ad.forward(q, k, v, scale)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        torch.autograd.backward(outs, [dout] * len(outs))
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if r == 0:
            keys = sel_keys_per_query(topk, S)
        if r >= warmup:
            tf.append((t1 - t0) * 1e3)
            tb.append((t2 - t1) * 1e3)
            tt.append((t2 - t0) * 1e3)
        del outs, topk
    peak = torch.cuda.max_memory_allocated() / 2 ** 30
    check = ""
    if S <= check_max_s:   # not timed: do the wrappers call the peer right? (scale, layout, causality)
        with torch.no_grad():
            outs, topk = ad.forward(q, k, v, scale)
            r_cmp, r_sel, rows = ref_outputs(q, k, v, topk, scale)
            e_cmp, e_sel = rel_err(outs[0], r_cmp, rows), rel_err(outs[1], r_sel, slice(None))
            del outs, topk, r_cmp, r_sel
        verdict = "ok" if max(e_cmp, e_sel) <= CHECK_TOL else "MISMATCH"
        check = " | check vs fp32 torch: cmp rel %.1e sel rel %.1e %s" % (e_cmp, e_sel, verdict)

    def med(x):
        return sorted(x)[len(x) // 2]
    return ("%s keys/query sel %.0f | cmp+sel fwd+bwd %.3f ms | fwd %.3f ms | bwd %.3f ms | min %.3f ms | "
            "peak %.2f GiB | median of %d after %d warm-up%s" %
            (case_head(shape, S, ad.name), keys, med(tt), med(tf), med(tb), min(tt), peak, len(tt), warmup, check))


def child_main(a):
    peer = a.child
    cases = [(sh, S) for sh in a.shapes for S in a.S]
    try:
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device visible to torch %s" % torch.__version__)
    except Exception as e:
        for sh, S in cases:
            print(skip_line(sh, S, peer, "%s: %s" % (type(e).__name__, e)), flush=True)
        return 0
    try:
        ad = ADAPTERS[peer](a.peers)
    except Exception as e:
        import traceback
        traceback.print_exc()
        for sh, S in cases:
            print(skip_line(sh, S, peer, "import failed: %s: %s" % (type(e).__name__, e)), flush=True)
        return 0
    print("# %s on %s: %s" % (peer, torch.cuda.get_device_name(0), ad.describe()), flush=True)
    for sh, S in cases:
        if a.deadline is not None and time.time() > a.deadline:
            print(skip_line(sh, S, peer, "time budget (--budget-s) spent before this case"), flush=True)
            continue
        reps = min(a.reps, 3) if S >= 32768 else a.reps
        try:
            line = bench_case(ad, sh, S, reps, a.warmup, a.seed, check_max_s=a.check_max_s)
        except Exception as e:
            import traceback
            traceback.print_exc()
            msg = str(e).strip().splitlines()
            line = skip_line(sh, S, peer, "%s: %s" % (type(e).__name__, msg[0] if msg else ""))
        print(line, flush=True)
        try:
            torch.cuda.synchronize()
        except Exception as e:   # a sticky CUDA error: every later case would fail the same way
            for sh2, S2 in cases[cases.index((sh, S)) + 1:]:
                print(skip_line(sh2, S2, peer, "CUDA context broken by an earlier case: %s" % e), flush=True)
            return 0
        torch.cuda.empty_cache()
    return 0


# ---------------------------------------------------------------- parent

def run_peer(a, peer, deadline, info):
    cases = [(sh, S) for sh in a.shapes for S in a.S]
    seen = set()
    inf = info.get(peer, {})
    print("# peer %s: %s @ %s (%s)" % (peer, inf.get("origin", "?"), inf.get("commit", "?")[:12], inf.get("date", "?")),
          flush=True)
    cmd = [sys.executable, "-u", os.path.abspath(__file__), "--child", peer, "--peers", a.peers,
           "--S", ",".join(map(str, a.S)), "--shape", a.shape, "--reps", str(a.reps), "--warmup", str(a.warmup),
           "--seed", str(a.seed), "--check-max-s", str(a.check_max_s), "--deadline", "%.3f" % deadline]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, bufsize=1)
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    why_missing = None
    grace = a.grace_s   # a case started just before the deadline may finish

    def handle(chunk):
        line = chunk.rstrip("\n")
        print(line, flush=True)
        if line.startswith("SUMMARY"):
            f = line.split()
            try:
                seen.add((f[1], int(f[2][2:])))
            except (IndexError, ValueError):
                pass
    while True:
        left = deadline + grace - time.time()
        if left <= 0:
            p.kill()
            why_missing = "time budget (--budget-s) spent; the case in flight was stopped"
            break
        if not sel.select(timeout=min(left, 5.0)):
            if p.poll() is not None:
                break
            continue
        chunk = p.stdout.readline()
        if not chunk:
            break
        handle(chunk)
    rc = p.wait()
    for chunk in p.stdout:   # lines already buffered when the child ended or was stopped
        handle(chunk)
    if why_missing is None and rc != 0:
        why_missing = "the %s child process ended with status %d (its stderr above says why)" % (peer, rc)
    for sh, S in cases:
        if (sh, S) not in seen:
            print(skip_line(sh, S, peer, why_missing or "the child process reported nothing for this case"),
                  flush=True)


def main(argv):
    a = parse_args(argv)
    if a.child:
        if a.child not in PEERS:
            die("--child wants a peer name, got '%s'" % a.child)
        return child_main(a)
    info = read_peers_txt(a.peers)
    t0 = time.time()
    deadline = t0 + a.budget_s
    try:   # versions only: the parent leaves CUDA alone (each child makes its own context)
        import torch
        tri = "absent"
        try:
            import triton
            tri = triton.__version__
        except Exception:
            pass
        print("# python %s; torch %s; triton %s" % (sys.version.split()[0], torch.__version__, tri), flush=True)
    except Exception as e:
        print("# torch unavailable in the parent: %s" % e, flush=True)
    print("# geometry: l=%d d=%d l'=%d n=%d (init %d, local %d); window not timed; bf16, B=1; shapes %s; S %s" %
          (L_CMP, D_STRIDE, L_SEL, TOP_N, N_INIT, N_LOCAL, ",".join(a.shapes), ",".join(map(str, a.S))), flush=True)
    for i, peer in enumerate(a.only):
        now = time.time()
        if now > deadline:
            for sh in a.shapes:
                for S in a.S:
                    print(skip_line(sh, S, peer, "time budget (--budget-s) spent before this peer"), flush=True)
            continue
        # a fair share of what is left, so one slow peer cannot starve the next
        run_peer(a, peer, now + (deadline - now) / (len(a.only) - i), info)
    print("# bench_peers.py done in %.0f s" % (time.time() - t0), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
