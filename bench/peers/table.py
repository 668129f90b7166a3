#!/usr/bin/env python3
"""bench/peers/table.py — the Markdown table of the side-by-side results from one run's logs.

    table.py --ours OURS.log --peers-log PEERS.log [--peers DEST] [--env ENV.txt]

OURS.log: bench_cuda_attn's output (its SUMMARY lines); PEERS.log: bench_peers.py's output
(SUMMARY lines with peer=NAME, SKIP lines). Prints one row per (shape, S) found in either:
shape | S | ours | flash_nsa | NSA-triton (ms, compressed + selected fwd + bwd) | peer / ours
ratios (> 1: ours faster) | selected keys per query of each, so the sparsity can be seen to
match. The fastest of a row is bold. Cases a peer could not run are listed under the table
with the reason it printed. Exit status 0, or 2 on a usage error (unreadable file).
"""
import argparse
import os
import re
import sys

PEERS = ("flash_nsa", "nsa_triton")
LABEL = {"ours": "ours", "flash_nsa": "flash_nsa", "nsa_triton": "NSA-triton"}
SHAPE_LABEL = {"paper": "paper: 64 q / 4 KV, D 128, top-16 × 64", "m7c": "m7c: 12 q / 2 KV, D 64"}
SHAPE_ORDER = ["paper", "m7c"]
LINE = re.compile(r"^SUMMARY\s+(\S+)\s+S=(\d+)\s+B=(\d+)\s+(?:peer=(\S+)\s*)?(.*)$")
MS = re.compile(r"cmp\+sel fwd\+bwd ([0-9.]+) ms")
SEL = re.compile(r"keys/query\b.*?\bsel ([0-9.]+)")
SKIP = re.compile(r"\|\s*SKIP:\s*(.*)$")
CHECK = re.compile(r"check vs fp32 torch: (cmp rel \S+ sel rel \S+) (ok|MISMATCH)")


CHECKS = []   # (who, shape, S, errors, verdict) from the peers' check fields


def parse(path, default_who):
    """{(shape, S): {who: (ms or None, sel keys or None, skip reason or None)}} from one log."""
    out = {}
    try:
        f = open(path, errors="replace")
    except OSError as e:
        print("table.py: cannot read %s: %s" % (path, e.strerror), file=sys.stderr)
        sys.exit(2)
    with f:
        for line in f:
            m = LINE.match(line.strip())
            if not m:
                continue
            shape, S, who, rest = m.group(1), int(m.group(2)), m.group(4) or default_who, m.group(5)
            ms, sel, skip = MS.search(rest), SEL.search(rest), SKIP.search(rest)
            chk = CHECK.search(rest)
            if chk:
                CHECKS.append((who, shape, S, chk.group(1), chk.group(2)))
            out.setdefault((shape, S), {})[who] = (float(ms.group(1)) if ms else None,
                                                   float(sel.group(1)) if sel else None,
                                                   skip.group(1) if skip else (None if ms else "no time in its line"))
    return out


def fmt_ms(x):
    return "%.2f" % x if x < 100 else "%.1f" % x


def build(ours, peers, header_lines):
    rows = {}
    for src in (ours, peers):
        for key, d in src.items():
            rows.setdefault(key, {}).update(d)
    keys = sorted(rows, key=lambda k: (SHAPE_ORDER.index(k[0]) if k[0] in SHAPE_ORDER else 9, k[0], k[1]))
    cols = ["ours"] + list(PEERS)
    out = list(header_lines)
    out.append("")
    out.append("| shape | S | " + " | ".join(LABEL[c] for c in cols) + " | " +
               " | ".join("%s / ours" % LABEL[p] for p in PEERS) + " | selected keys/query (" +
               " / ".join(LABEL[c] for c in cols) + ") |")
    out.append("|---|---:|" + "---:|" * len(cols) + "---:|" * len(PEERS) + "---|")
    notes = []
    last_shape = None
    for key in keys:
        shape, S = key
        d = rows[key]
        ms = {c: (d.get(c) or (None, None, None))[0] for c in cols}
        best = min((v for v in ms.values() if v is not None), default=None)
        cells = []
        for c in cols:
            v = ms[c]
            if v is None:
                cells.append("—")
                why = (d.get(c) or (None, None, "not in the log"))[2]
                notes.append("%s, %s, S=%d: %s" % (LABEL[c], shape, S, why or "no time"))
            else:
                s = fmt_ms(v)
                cells.append("**%s**" % s if v == best and sum(x is not None for x in ms.values()) > 1 else s)
        ratios = []
        for p in PEERS:
            if ms[p] is not None and ms["ours"]:
                ratios.append("%.2f×" % (ms[p] / ms["ours"]))
            else:
                ratios.append("—")
        sels = []
        for c in cols:
            sv = (d.get(c) or (None, None, None))[1]
            sels.append("%.0f" % sv if sv is not None else "—")
        label = SHAPE_LABEL.get(shape, shape) if shape != last_shape else "same"
        last_shape = shape
        out.append("| %s | %s | %s | %s | %s |" % (label, "{:,}".format(S), " | ".join(cells), " | ".join(ratios),
                                                   " / ".join(sels)))
    if not keys:
        out.append("| (no SUMMARY lines in either log) | | | | | | | |")
    if notes:
        out.append("")
        out.append("Not measured:")
        out.extend("- " + n for n in notes)
    if CHECKS:
        out.append("")
        out.append("Output checks against an fp32 torch reference (same inputs, the peer's own top-n): " + "; ".join(
            "%s %s S=%d %s (%s)" % (LABEL.get(w, w), sh, S, v, e) for w, sh, S, e, v in CHECKS) + ".")
    return out


def main(argv):
    ap = argparse.ArgumentParser(prog="table.py")
    ap.add_argument("--ours", required=True)
    ap.add_argument("--peers-log", required=True)
    ap.add_argument("--peers", default=None, help="staging folder (PEERS.txt names the commits)")
    ap.add_argument("--env", default=None, help="env.txt written by run.sh (device, commit, date)")
    a = ap.parse_args(argv)
    ours = parse(a.ours, "ours")
    peers = parse(a.peers_log, "?")
    peers = {k: {w: v for w, v in d.items() if w in PEERS} for k, d in peers.items()}
    head = ["Compressed + selected branches including compression and top-n selection, forward + backward, "
            "bf16, B = 1; ms, median of the timed repetitions; ratio = peer ms / ours ms (> 1: ours faster). "
            "Sliding window not timed (flash_nsa's needs flash_attn)."]
    if a.env and os.path.isfile(a.env):
        with open(a.env, errors="replace") as f:
            env = [l.strip() for l in f if l.strip()]
        head.append("Run: " + "; ".join(env[:6]) + ".")
    if a.peers and os.path.isfile(os.path.join(a.peers, "PEERS.txt")):
        with open(os.path.join(a.peers, "PEERS.txt")) as f:
            for line in f:
                p = line.rstrip("\n").split("\t")
                if line.startswith("#") or len(p) < 4:
                    continue
                head.append("%s: %s @ %s (%s)." % (LABEL.get(p[0], p[0]), p[3], p[1][:12], p[2][:10]))
    print("\n".join(build(ours, peers, head)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
