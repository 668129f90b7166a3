#!/usr/bin/env python3
"""tools/reference/compare_train_golden.py — compare two reference training curves
(golden/reference_train/<variant>.json as written by train_reference.py): a committed
file against a regenerated one (tests/cli/reference_train_torch.sh), or two devices /
PyTorch versions against each other.

  python3 tools/reference/compare_train_golden.py COMMITTED.json REGENERATED.json

Must be equal: the config, the corpus (size, hash), the offset the data ends at, and per
step the step number, the clipping decision and the data offsets. Within tolerance
(relative): loss and grad_norm 1e-11, lr 1e-15, and per tensor the final norms with the
floors of tests/trainer/test_reference_train.c (1e-10). Provenance is not compared.
Exit 0 when they agree, 1 otherwise; the worst differences are printed either way.
Needs no torch.
"""
import json
import math
import sys

TOL_STEP, TOL_LR, TOL_FINAL = 1e-11, 1e-15, 1e-10


def rel(a, b):
    return abs(a - b) / abs(b) if b != 0 else abs(a - b)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().split("\n\n")[1])
    a_path, b_path = sys.argv[1], sys.argv[2]
    a, b = (json.load(open(p)) for p in (a_path, b_path))
    bad = []
    for key in ("config", "data"):
        if a[key] != b[key]:
            bad.append("%s differs: %s vs %s" % (key, json.dumps(a[key], sort_keys=True)[:200],
                                                 json.dumps(b[key], sort_keys=True)[:200]))
    if len(a["steps"]) != len(b["steps"]):
        bad.append("%d steps vs %d" % (len(a["steps"]), len(b["steps"])))
    worst = {"loss": (0.0, 0), "grad_norm": (0.0, 0), "lr": (0.0, 0)}
    for sa, sb in zip(a["steps"], b["steps"]):
        s = sa["step"]
        for k in ("step", "clipped", "data_offsets"):
            if sa[k] != sb[k]:
                bad.append("step %d: %s %s vs %s" % (s, k, sa[k], sb[k]))
        for k, tol in (("loss", TOL_STEP), ("grad_norm", TOL_STEP), ("lr", TOL_LR)):
            e = rel(sb[k], sa[k])
            if e > worst[k][0]:
                worst[k] = (e, s)
            if not e <= tol:
                bad.append("step %d: %s %.17g vs %.17g (relative %.3e > %.0e)" % (s, k, sa[k], sb[k], e, tol))
    sum_lr = sum(st["lr"] for st in a["steps"])
    fa, fb = a["final"], b["final"]
    if sorted(fa) != sorted(fb):
        bad.append("final: different tensors")
    n_total = sum(t["numel"] for t in fa.values())
    totals = {q: math.sqrt(sum(t[q] ** 2 for t in fa.values())) for q in ("adam_m_norm", "adam_v_norm")}
    wf = (0.0, "")
    for name in sorted(set(fa) & set(fb)):
        ta, tb = fa[name], fb[name]
        for q in ("norm", "update_norm", "adam_m_norm", "adam_v_norm"):
            if q in ("norm", "update_norm"):
                floor = 0.03 * math.sqrt(ta["numel"]) * sum_lr
            else:
                floor = 1e-3 * totals[q] * math.sqrt(ta["numel"] / n_total)
            e = abs(tb[q] - ta[q]) / max(ta[q], floor)
            if e > wf[0]:
                wf = (e, "%s of %s" % (q, name))
            if not e <= TOL_FINAL:
                bad.append("final %s of %s: %.17g vs %.17g (relative %.3e > %.0e)" % (q, name, ta[q], tb[q], e,
                                                                                       TOL_FINAL))
    at = {k: "%.3e (step %d)" % v if v[1] else "0" for k, v in worst.items()}
    print("%s vs %s: worst relative difference: loss %s, grad_norm %s, lr %s, final %s" %
          (a_path, b_path, at["loss"], at["grad_norm"], at["lr"], "%.3e (%s)" % wf if wf[1] else "0"))
    print("  provenance: %s | %s" % (a["provenance"].get("torch"), b["provenance"].get("torch")),
          "| devices: %s | %s" % (a["provenance"].get("device"), b["provenance"].get("device")))
    for line in bad[:20]:
        print("  MISMATCH:", line)
    if bad:
        print("  %d mismatches" % len(bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
