#!/usr/bin/env python3
r"""bench/ncu_source.py NCU_SOURCE_CSV [TOP] — where one kernel's warps wait, instruction by
instruction: the source page of an Nsight Compute report with the SourceCounters section
(`ncu --import R.ncu-rep --page source --print-source sass --csv`), whose rows are the kernel's
SASS instructions with their warp-stall samples (program-counter sampling). Prints

  * the share of all samples by opcode (the SASS mnemonic without its modifiers: HGMMA, MUFU,
    SHFL, BAR, SYNCS, LDS, LDGSTS, ...), largest first: which kind of instruction the time sits
    on;
  * the TOP (default 30) instructions with the most samples: address, samples, share, the
    not-issued samples where the report has them, and the instruction.

A sample is counted on the instruction a warp was about to issue, so the time of a wait shows on
the instruction after the one waited for (a warpgroup-MMA wait on the first use of its result).

Exit 0 with the tables; 2 when the file is missing or holds no source rows with a sampling
column (the header it found is printed)."""
import csv
import sys

SOURCE_COLS = ("Source", "SASS")
ADDRESS_COLS = ("Address", "# Address")
ALL_SAMPLES = "Warp Stall Sampling (All Samples)"
NOT_ISSUED = "Warp Stall Sampling (Not-issued Samples)"


def number(text):
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def opcode(sass):
    """the mnemonic of a SASS line without predicate and modifiers: '@!P0 HGMMA.64x64x16.F32' -> HGMMA"""
    words = sass.strip().split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0].rstrip(";") if words else "?"


def main():
    if len(sys.argv) not in (2, 3):
        print("usage: ncu_source.py NCU_SOURCE_CSV [TOP]", file=sys.stderr)
        return 2
    top = 30
    if len(sys.argv) == 3:
        try:
            top = int(sys.argv[2])
            if top < 1:
                raise ValueError
        except ValueError:
            print("ncu_source.py: TOP: expected a whole number >= 1, got '%s'" % sys.argv[2], file=sys.stderr)
            return 2
    try:
        lines = [l for l in open(sys.argv[1], newline="") if l.startswith('"')]
    except OSError as e:
        print("ncu_source.py: %s: %s" % (sys.argv[1], e.strerror), file=sys.stderr)
        return 2
    rows = list(csv.reader(lines))
    # the header: the first row naming a source column and the all-samples column
    hi = next((i for i, r in enumerate(rows) if ALL_SAMPLES in r and any(c in r for c in SOURCE_COLS)), None)
    if hi is None:
        print("ncu_source.py: %s: no source rows with '%s' (header seen: %s)" %
              (sys.argv[1], ALL_SAMPLES, rows[0][:12] if rows else "none"), file=sys.stderr)
        return 2
    head = rows[hi]
    src = next(head.index(c) for c in SOURCE_COLS if c in head)
    adr = next((head.index(c) for c in ADDRESS_COLS if c in head), None)
    alls = head.index(ALL_SAMPLES)
    noti = head.index(NOT_ISSUED) if NOT_ISSUED in head else None
    inst = []
    for r in rows[hi + 1:]:
        if len(r) != len(head) or r == head:
            continue
        s = number(r[alls])
        if s is None:
            continue
        inst.append((s, number(r[noti]) if noti is not None else None, r[adr] if adr is not None else "-", r[src].strip()))
    total = sum(x[0] for x in inst)
    if not inst or total <= 0:
        print("ncu_source.py: %s: no samples in '%s'" % (sys.argv[1], ALL_SAMPLES), file=sys.stderr)
        return 2
    by_op = {}
    for s, _, _, text in inst:
        by_op[opcode(text)] = by_op.get(opcode(text), 0.0) + s
    print("samples by opcode (%d instructions, %d samples)" % (len(inst), total))
    for op, s in sorted(by_op.items(), key=lambda x: (-x[1], x[0])):
        if s > 0:
            print("  %-10s %8d  %5.1f %%" % (op, s, 100.0 * s / total))
    print("the %d instructions with the most samples" % min(top, len(inst)))
    print("  %-8s %8s %7s %10s  %s" % ("address", "samples", "share", "not issued", "instruction"))
    for s, ni, a, text in sorted(inst, key=lambda x: -x[0])[:top]:
        print("  %-8s %8d %6.1f%% %10s  %s" % (a, s, 100.0 * s / total, "-" if ni is None else "%d" % ni, text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
