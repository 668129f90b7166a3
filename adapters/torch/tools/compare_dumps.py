#!/usr/bin/env python3
"""adapters/torch/tools/compare_dumps.py A.safetensors B.safetensors [--tol REL] [--exact NAME...]

Compares two --dump-step files (nsa-train's and nsa-torch-train's): the tensors named
--exact (default inputs, targets) must be bitwise equal; loss, logits and every grads.*
tensor are compared by relative L2 error ||a-b|| / ||b||. Prints the loss difference, the
worst gradient and its relative error; exit 1 when a tensor is missing, an --exact tensor
differs or an error exceeds --tol."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

from nsa_torch import stio  # noqa: E402


def rel(a, b, floor=0.0):
    """||a-b|| / max(||b||, floor): a gradient that is zero in exact arithmetic (the key
    compressor's fc2.bias: softmax is invariant to a shift of every key) is rounding noise
    in both trainers, so it is measured against floor = 1e-6 x the global gradient norm."""
    a, b = a.double().reshape(-1), b.double().reshape(-1)
    d = max(float(torch.linalg.norm(b)), floor)
    e = float(torch.linalg.norm(a - b))
    return e / d if d > 0 else e


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--exact", nargs="*", default=["inputs", "targets"])
    args = ap.parse_args()
    A, _ = stio.read(args.a)
    B, _ = stio.read(args.b)
    bad = 0
    for n in args.exact:
        if n not in A or n not in B or not torch.equal(A[n], B[n]):
            print("FAIL %s differs" % n)
            bad = 1
        else:
            print("ok   %s bitwise equal" % n)
    grads = sorted(n for n in B if n.startswith("grads."))
    missing = [n for n in grads + ["loss", "logits"] if n not in A]
    if missing:
        print("FAIL missing in %s: %s" % (args.a, ", ".join(missing[:5])))
        return 1
    dl = abs(float(A["loss"]) - float(B["loss"])) / abs(float(B["loss"]))
    print("loss %.12f vs %.12f: relative %.3e" % (float(A["loss"]), float(B["loss"]), dl))
    print("logits relative %.3e" % rel(A["logits"], B["logits"]))
    gn = float(torch.sqrt(sum((B[n].double() ** 2).sum() for n in grads)))
    worst = max((rel(A[n], B[n], 1e-6 * gn), n) for n in grads)
    print("worst gradient relative error %.3e (%s) over %d tensors (floor 1e-6 x grad norm %.3g)" % (worst[0], worst[1], len(grads), gn))
    if dl > args.tol or worst[0] > args.tol:
        print("FAIL above tolerance %g" % args.tol)
        bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main())
