#!/usr/bin/env python3
"""bench/sdpa_dense.py — PyTorch's scaled_dot_product_attention, each backend in turn (cuDNN,
flash, memory-efficient), beside our dense causal kernel: causal, bf16, B = 1, forward and
backward, at the two shapes of bench_cuda_attn (paper: 64 query heads, 4 KV heads, D 128; m7c:
12 query heads, 2 KV heads, D 64).

    python3 bench/sdpa_dense.py [--S 8192,16384] [--shape m7c|paper|both] [--reps 5] [--warmup 2]
                                [--ours BENCH_CUDA_ATTN.log]

K and V are given to SDPA with every query head's copy (the KV heads repeated, outside the
timing): the backends that take grouped heads differ, and the FLOPs are the same. FLOPs are the
FlashAttention convention bench_cuda_attn counts: forward 4 D per (query head, visible key),
t + 1 keys for position t; backward 2.5x the forward. Times: the median of --reps calls after
--warmup, each bracketed by CUDA events after a device synchronisation; the backward is timed
alone (its forward run untimed before it).

One line per (shape, S, backend): `SDPA shape S=.. backend fwd MS ms (TF TFLOP/s) bwd MS ms (TF
TFLOP/s)`, or `| SKIP: why` where a backend does not take the call; then, with --ours (the output
of bench_cuda_attn for the same shapes and lengths), the Markdown table of TFLOP/s forward /
backward, ours beside each backend. Without a CUDA device: `SKIP: ...`, exit 0. Exit 2 on a bad
argument."""
import argparse
import re
import statistics
import sys

SHAPES = {"paper": (64, 4, 128), "m7c": (12, 2, 64)}   # query heads, KV heads, head dim
BACKENDS = ["cudnn", "flash", "efficient"]


def causal_flops(S, H, D):
    fwd = 4.0 * D * H * S * (S + 1) / 2
    return fwd, 2.5 * fwd


def parse_ours(path):
    """{(shape, S): (fwd TFLOP/s, bwd TFLOP/s)} from bench_cuda_attn's dense causal lines"""
    out = {}
    pat = re.compile(r"^(\w+)\s+S=(\d+)\s+B=\d+\s+dense causal (fwd|bwd)\s+[\d.]+ ms\s+([\d.]+) TFLOP/s")
    with open(path) as f:
        for line in f:
            m = pat.match(line)
            if m:
                key = (m.group(1), int(m.group(2)))
                fb = out.setdefault(key, [None, None])
                fb[0 if m.group(3) == "fwd" else 1] = float(m.group(4))
    return {k: tuple(v) for k, v in out.items()}


def table(ours, sdpa):
    """Markdown: one row per (shape, S), cells 'fwd / bwd' TFLOP/s"""
    keys = sorted(set(ours) | set(sdpa), key=lambda k: (k[0] != "paper", k[1]))
    cell = lambda v: "%s / %s" % tuple("%.0f" % x if x is not None else "-" for x in v) if v else "-"
    lines = ["| shape | S | ours (bench_cuda_attn) | " + " | ".join("SDPA " + b for b in BACKENDS) + " |",
             "|---|---:|---:|" + "---:|" * len(BACKENDS)]
    for k in keys:
        h, g, d = SHAPES.get(k[0], (0, 0, 0))
        lines.append("| %s: %d heads, D %d | %s | %s | %s |" % (k[0], h, d, "{:,}".format(k[1]), cell(ours.get(k)),
                                                         " | ".join(cell(sdpa.get(k, {}).get(b)) for b in BACKENDS)))
    return "\n".join(lines)


def time_backend(torch, backend, S, H, G, D, reps, warmup):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    kind = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]
    gen = torch.Generator(device="cuda").manual_seed(1)
    mk = lambda h: torch.randn(1, h, S, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    q = mk(H).requires_grad_()
    k = mk(G).repeat_interleave(H // G, dim=1).detach().requires_grad_()
    v = mk(G).repeat_interleave(H // G, dim=1).detach().requires_grad_()
    dout = mk(H)
    F = torch.nn.functional.scaled_dot_product_attention
    fwd_ms, bwd_ms = [], []
    ev = lambda: torch.cuda.Event(enable_timing=True)
    with sdpa_kernel([kind]):
        for i in range(warmup + reps):
            torch.cuda.synchronize()
            a, b = ev(), ev()
            a.record()
            out = F(q, k, v, is_causal=True)
            b.record()
            torch.cuda.synchronize()
            c, d = ev(), ev()
            c.record()
            out.backward(dout)
            d.record()
            torch.cuda.synchronize()
            q.grad = k.grad = v.grad = None
            if i >= warmup:
                fwd_ms.append(a.elapsed_time(b))
                bwd_ms.append(c.elapsed_time(d))
    return statistics.median(fwd_ms), statistics.median(bwd_ms)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--S", default="8192,16384")
    ap.add_argument("--shape", default="both", choices=["m7c", "paper", "both"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--ours", help="bench_cuda_attn's output for the same shapes and lengths")
    a = ap.parse_args()
    try:
        Ss = [int(x) for x in a.S.split(",")]
        if any(s < 1 for s in Ss):
            raise ValueError
    except ValueError:
        print("sdpa_dense.py: --S %s: expected positive whole numbers separated by commas" % a.S, file=sys.stderr)
        return 2
    if a.reps < 1 or a.warmup < 0:
        print("sdpa_dense.py: --reps %d --warmup %d: expected reps >= 1, warmup >= 0" % (a.reps, a.warmup), file=sys.stderr)
        return 2
    ours = {}
    if a.ours:
        try:
            ours = parse_ours(a.ours)
        except OSError as e:
            print("sdpa_dense.py: --ours %s: %s" % (a.ours, e.strerror), file=sys.stderr)
            return 2
    try:
        import torch
    except ImportError:
        print("SKIP: no torch")
        return 0
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 0
    print("device: %s, torch %s, cuDNN %s" % (torch.cuda.get_device_name(0), torch.__version__, torch.backends.cudnn.version()))
    shapes = ["paper", "m7c"] if a.shape == "both" else [a.shape]
    sdpa = {}
    for name in shapes:
        H, G, D = SHAPES[name]
        for S in Ss:
            ff, fb = causal_flops(S, H, D)
            for be in BACKENDS:
                try:
                    f_ms, b_ms = time_backend(torch, be, S, H, G, D, a.reps, a.warmup)
                except Exception as e:   # a backend that does not take this call (shape, GPU, build)
                    print("SDPA %-6s S=%-6d %-9s | SKIP: %s" % (name, S, be, str(e).splitlines()[0][:160] if str(e) else type(e).__name__))
                    continue
                tf = (ff / (f_ms * 1e-3) / 1e12, fb / (b_ms * 1e-3) / 1e12)
                sdpa.setdefault((name, S), {})[be] = tf
                print("SDPA %-6s S=%-6d %-9s fwd %9.3f ms (%6.1f TFLOP/s) bwd %9.3f ms (%6.1f TFLOP/s)"
                      % (name, S, be, f_ms, tf[0], b_ms, tf[1]))
                torch.cuda.empty_cache()
    print()
    print(table(ours, sdpa))
    return 0


if __name__ == "__main__":
    sys.exit(main())
