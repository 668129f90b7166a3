#!/usr/bin/env python3
"""tools/reference/train_reference.py — an independent float64 PyTorch reference of the
training loop: it trains the NSA model of nsa_reference.py for N optimizer steps from
our step-0 weights, on data it reads itself, and writes the loss curve as a golden file
(golden/reference_train/<variant>.json) that tests/trainer/test_reference_train.c
compares our trainer against.

It is written from the documented contract (docs/config.md, "Optimizer, clipping,
learning-rate schedule and data order"), not from trainer/optim.c or trainer/data.c:

  data (text source)  the file's bytes are the tokens. A micro-batch of B sequences reads
                      the window [o, o + B*T] (B*T + 1 bytes): sequence b is
                      bytes[o + b*T : o + b*T + T + 1], inputs its first T bytes, targets
                      its last T. Before reading, a window that would run past the end of
                      the file (n - o < B*T + 1) restarts at o = 0; after reading,
                      o += B*T. o starts at 0. A step reads grad_accum micro-batches in turn.
  loss                per micro-batch the mean cross-entropy over its B*T tokens; the
                      step's loss is the mean over its micro-batches, and its gradient
                      the gradient of that mean (before any update of the step).
  grad_norm           the L2 norm of all parameter gradients together (a tied weight
                      counts once), before clipping.
  clipping            if grad_clip > 0 and grad_norm > grad_clip, every gradient is
                      multiplied by grad_clip / grad_norm.
  lr(s)               steps s = 1..steps; W = warmup_steps, S = steps, lo = lr*min_lr_frac:
                        s <= W (W > 0):  lr * s / W
                        otherwise:       lo + (lr - lo) * (1 + cos(pi * f)) / 2,
                                         f = (s - W) / (S - W) clamped to [0, 1] (f = 1 if S <= W)
  AdamW               t = the step number s (1-based), per element:
                        m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
                        p = p - lr(s) * ( (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
                                          + wd * p )          (p on the right: before the step)
                      m = v = 0 before step 1; wd = weight_decay for the tensors that decay,
                      0 for the others.
  which tensors decay every 2-D `.weight` tensor: the linear maps and the embeddings
                      (tok_emb, lm_head); not the RMSNorm weights (1-D), not the biases,
                      not the mlp compressor's pos_emb.

The AdamW update is written out by hand (above) and, as a check of the reference itself,
mirrored by torch.optim.AdamW (two parameter groups, lr set per step) fed the same
clipped gradients: the largest relative difference between the two after any step is
recorded ("adamw_crosscheck") and must stay below 1e-12.

Inputs:
  --config FILE  the canonical config (nsa-train ... --check-config); data.kind must be text
  --init FILE    a checkpoint holding the step-0 weights in float64: nsa-train --backend
                 cpu64 --save after one step with train.lr=1e-300 (the update is below half
                 an ulp of every nonzero weight, so the weights are the initial ones, except
                 that exactly-zero biases become at most 1e-301 in magnitude, which changes
                 no value computed from them: z + 1e-301 == z for every |z| > 1e-285)
  --data-root D  directory the config's data.path is relative to (default: .)
Output (--out FILE): JSON, every real in %.17g: per step loss, grad_norm, clipped, lr, the
data offsets it read; per tensor the final weights' norm, the update norm ||W_N - W_0||,
the Adam moments' norms, the initial norm and whether it decays; the byte offset after
the last micro-batch; the config; the corpus's size and FNV-1a 64 hash; provenance.

Runs with torch >= 1.13 on CPU or CUDA (--device), always float64.
"""
import argparse
import datetime
import json
import math
import os
import platform
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nsa_reference as ref  # noqa: E402  (the model: written from docs/design.md)


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


class TextData:
    """The text source by the documented rule (see the module comment)."""

    def __init__(self, raw, B, T):
        self.raw, self.B, self.T, self.off = raw, B, T, 0
        if len(raw) < B * T + 1:
            raise SystemExit("corpus has %d bytes, fewer than one micro-batch (%d)" % (len(raw), B * T + 1))

    def next(self):
        B, T = self.B, self.T
        if len(self.raw) - self.off < B * T + 1:
            self.off = 0
        o = self.off
        seqs = [list(self.raw[o + b * T:o + b * T + T + 1]) for b in range(B)]
        self.off += B * T
        t = torch.tensor(seqs, dtype=torch.int64)
        return o, t[:, :T].contiguous(), t[:, 1:].contiguous()


def lr_at(s, tc):
    lr, W, S, lo = tc["lr"], tc["warmup_steps"], tc["steps"], tc["lr"] * tc["min_lr_frac"]
    if W > 0 and s <= W:
        return lr * s / W
    f = (s - W) / (S - W) if S > W else 1.0
    f = min(1.0, max(0.0, f))
    return lo + (lr - lo) * (1.0 + math.cos(math.pi * f)) / 2.0


def decays(name, t):
    return name.endswith(".weight") and t.dim() == 2


def g17(x):
    return "%.17g" % x


class Raw:
    """A value written by json.dumps as it is (the config: nsa-train's canonical numbers)."""

    def __init__(self, v):
        self.v = v


def emit(o, ind=0):
    """JSON with every float as %.17g (json.dumps writes the shortest repr)."""
    pad, pad1 = "  " * ind, "  " * (ind + 1)
    if isinstance(o, Raw):
        return json.dumps(o.v, indent=2).replace("\n", "\n" + pad)
    if isinstance(o, bool) or o is None or isinstance(o, str):
        return json.dumps(o)
    if isinstance(o, int):
        return str(o)
    if isinstance(o, float):
        if not math.isfinite(o):
            raise SystemExit("non-finite value in the reference output")
        s = g17(o)
        return s if any(c in s for c in ".en") else s + ".0"
    if isinstance(o, list):
        if all(not isinstance(v, (dict, list)) for v in o):
            return "[" + ", ".join(emit(v) for v in o) + "]"
        return "[\n" + ",\n".join(pad1 + emit(v, ind + 1) for v in o) + "\n" + pad + "]"
    if isinstance(o, dict):
        if not o:
            return "{}"
        flat = all(not isinstance(v, (dict, list)) for v in o.values())
        if flat and len(o) <= 12:
            return "{" + ", ".join(json.dumps(k) + ": " + emit(v) for k, v in o.items()) + "}"
        return "{\n" + ",\n".join(pad1 + json.dumps(k) + ": " + emit(v, ind + 1) for k, v in o.items()) + "\n" + pad + "}"
    raise TypeError(type(o))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--init", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--variant", required=True)
    ap.add_argument("--data-root", default=".")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--command", default="", help="the generating command, recorded in the output")
    ap.add_argument("--source-commit", default="", help="the commit of the nsa-harness tree used, recorded")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (default 1: the summation order, so the bits, do not depend on the machine)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with open(args.config) as f:
        cjs = json.load(f)
    tc = cjs["train"]
    if cjs["data"]["kind"] != "text":
        sys.exit("train_reference.py reads only data.kind = text (got %s)" % cjs["data"]["kind"])
    if cjs["nsa"]["force_branch"] != "none":
        sys.exit("force_branch configs are not covered by this reference")
    cfg = ref.Cfg(cjs)
    dev = torch.device(args.device)
    with open(os.path.join(args.data_root, cjs["data"]["path"]), "rb") as f:
        raw = f.read()
    data = TextData(raw, tc["batch_size"], tc["seq_len"])

    ck, _ = ref.st_read(args.init)
    names = [k for k in ck if not k.startswith("optim.")]
    bad = [k for k in names if ck[k].dtype != torch.float64]
    if bad:
        sys.exit("--init must hold float64 weights (nsa-train --backend cpu64); %s is %s" % (bad[0], ck[bad[0]].dtype))
    P = {k: ck[k].to(dev).clone().requires_grad_(True) for k in names}
    W0 = {k: ck[k].to(dev).clone() for k in names}
    M = {k: torch.zeros_like(W0[k]) for k in names}
    V = {k: torch.zeros_like(W0[k]) for k in names}
    b1, b2, eps, wd = tc["beta1"], tc["beta2"], tc["adam_eps"], tc["weight_decay"]
    # torch.optim.AdamW on a shadow copy: checks the hand-written update
    shadow = {k: W0[k].clone() for k in names}
    topt = torch.optim.AdamW([{"params": [shadow[k] for k in names if decays(k, W0[k])], "weight_decay": wd},
                              {"params": [shadow[k] for k in names if not decays(k, W0[k])], "weight_decay": 0.0}],
                             lr=tc["lr"], betas=(b1, b2), eps=eps)
    worst_x = 0.0

    accum, clip = tc["grad_accum"], tc["grad_clip"]
    steps = []
    for s in range(1, tc["steps"] + 1):
        for k in names:
            P[k].grad = None
        loss_sum, offs = 0.0, []
        for _ in range(accum):
            o, inp, tgt = data.next()
            offs.append(o)
            _, loss = ref.forward(P, inp.to(dev), tgt.to(dev), cfg)
            (loss / accum).backward()
            loss_sum += loss.item()
        loss_s = loss_sum / accum
        G = {k: (P[k].grad if P[k].grad is not None else torch.zeros_like(W0[k])).detach() for k in names}
        gnorm = math.sqrt(sum(float((G[k] * G[k]).sum()) for k in names))
        clipped = clip > 0 and gnorm > clip
        if clipped:
            G = {k: G[k] * (clip / gnorm) for k in names}
        lr = lr_at(s, tc)
        bc1, bc2 = 1.0 - b1 ** s, 1.0 - b2 ** s
        with torch.no_grad():
            for k in names:
                M[k].mul_(b1).add_((1.0 - b1) * G[k])
                V[k].mul_(b2).add_((1.0 - b2) * G[k] * G[k])
                w = wd if decays(k, W0[k]) else 0.0
                p = P[k]
                p.copy_(p - lr * ((M[k] / bc1) / (torch.sqrt(V[k] / bc2) + eps) + w * p))
            for k in names:
                shadow[k].grad = G[k].clone()
            for grp in topt.param_groups:
                grp["lr"] = lr
            topt.step()
            for k in names:
                d = float(torch.linalg.norm(shadow[k] - P[k])) / max(float(torch.linalg.norm(P[k])), 1e-300)
                worst_x = max(worst_x, d)
                shadow[k].copy_(P[k])   # keep both on one trajectory; the difference is per step
        steps.append({"step": s, "loss": loss_s, "grad_norm": gnorm, "clipped": bool(clipped), "lr": lr,
                      "data_offsets": offs})
        print("step %3d  loss %.12f  grad_norm %.12f%s  lr %.6e  offsets %s" %
              (s, loss_s, gnorm, " (clipped)" if clipped else "", lr, offs), flush=True)
    if not worst_x < 1e-12:
        sys.exit("the hand-written AdamW differs from torch.optim.AdamW by %.3e (relative): fix the reference" % worst_x)
    print("hand-written AdamW vs torch.optim.AdamW: %.3e (largest relative per-tensor difference after a step)" % worst_x)

    def nrm(t):
        return float(torch.linalg.norm(t.detach().double().reshape(-1)))

    final = {k: {"numel": W0[k].numel(), "norm": nrm(P[k]), "update_norm": nrm(P[k] - W0[k]), "init_norm": nrm(W0[k]),
                 "adam_m_norm": nrm(M[k]), "adam_v_norm": nrm(V[k]), "decay": decays(k, W0[k])} for k in names}
    out = {
        "format": "nsa-harness reference training curve 1",
        "variant": args.variant,
        "written_by": "tools/reference/train_reference.py",
        "provenance": {
            "command": args.command,
            "source_commit": args.source_commit,
            "date_utc": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "device": args.device + (" (%s)" % torch.cuda.get_device_name(dev) if dev.type == "cuda" else
                                     " (%s)" % platform.machine()),
            "dtype": "float64",
            "torch_threads": torch.get_num_threads(),
            "adamw_crosscheck": worst_x,
        },
        "data": {"path": cjs["data"]["path"], "bytes": len(raw), "fnv1a64": fnv1a64(raw),
                 "offset_after": data.off},
        "config": Raw(cjs),
        "steps": steps,
        "final": final,
    }
    with open(args.out, "w") as f:
        f.write(emit(out) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
