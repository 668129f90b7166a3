#!/usr/bin/env python3
r"""bench/ncu_table.py NCU_CSV — one line per kernel launch of an Nsight Compute report exported
with `ncu --csv --page details` (sections SpeedOfLight, Occupancy, LaunchStats, WarpStateStats,
ComputeWorkloadAnalysis, MemoryWorkloadAnalysis): duration, SM (compute) and memory throughput,
DRAM throughput, the busiest pipe's utilisation, achieved occupancy, registers and shared memory,
the warp cycles per issued instruction and the L2 hit rate. A percentage column takes the metric
only where ncu gives it in "%" (MemoryWorkloadAnalysis names its bytes a second "Memory
Throughput" too). Kernels are named without their template arguments' noise (the first
80 characters of the demangled name). Where the report also holds the stall metrics
(`--metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"`), a last
column names the three largest stall reasons of the launch with their cycles per issued
instruction (the issue itself, "selected", left out): where the cycles an issue go.

Exit 0 with a table; 2 when the file is missing or has no kernel rows."""
import csv
import sys

# (column header, the section's metric name as ncu prints it)
METRICS = [
    ("us", "Duration"),
    ("SM %", "Compute (SM) Throughput"),
    ("mem %", "Memory Throughput"),
    ("DRAM %", "DRAM Throughput"),
    ("occ %", "Achieved Occupancy"),
    ("regs", "Registers Per Thread"),
    ("smem KB", "Dynamic Shared Memory Per Block"),
    ("cyc/issue", "Warp Cycles Per Issued Instruction"),
    ("issue %", "Issue Slots Busy"),
    ("L2 hit %", "L2 Hit Rate"),
]
PERCENT = {n for h, n in METRICS if h.endswith("%")}


STALL_PREFIX, STALL_SUFFIX = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"


def top_stalls(m, n=3):
    """the n largest stall reasons of a launch's metrics, as 'reason cycles, ...' ('' if none)"""
    st = [(v, k[len(STALL_PREFIX):-len(STALL_SUFFIX)]) for k, v in m.items()
          if k.startswith(STALL_PREFIX) and k.endswith(STALL_SUFFIX)]
    st = sorted((x for x in st if x[1] != "selected"), key=lambda x: (-x[0], x[1]))
    return ", ".join("%s %.2f" % (r, v) for v, r in st[:n])


def main():
    if len(sys.argv) != 2:
        print("usage: ncu_table.py NCU_CSV", file=sys.stderr)
        return 2
    try:
        rows = list(csv.DictReader(l for l in open(sys.argv[1], newline="") if l.startswith('"')))
    except OSError as e:
        print("ncu_table.py: %s: %s" % (sys.argv[1], e.strerror), file=sys.stderr)
        return 2
    launches = {}
    order = []
    for r in rows:
        key = (r.get("ID"), r.get("Kernel Name", "?"))
        if key not in launches:
            launches[key] = {}
            order.append(key)
        name, unit, value = r.get("Metric Name", ""), r.get("Metric Unit", ""), r.get("Metric Value", "")
        try:
            v = float(value.replace(",", ""))
        except ValueError:
            continue
        if name == "Duration":   # to microseconds
            scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
                     "second": 1e6, "s": 1e6}
            if unit not in scale:   # never a silent wrong unit in the table
                print("ncu_table.py: %s: unknown Duration unit '%s'" % (sys.argv[1], unit), file=sys.stderr)
                return 2
            v *= scale[unit]
        if name in PERCENT and unit != "%":   # the same name in other units (bytes a second)
            continue
        if name == "Dynamic Shared Memory Per Block":
            v /= {"byte": 1024.0, "Kbyte": 1.0, "Mbyte": 1.0 / 1024}.get(unit, 1024.0)
        launches[key][name] = v
    if not order:
        print("ncu_table.py: %s: no kernel rows" % sys.argv[1], file=sys.stderr)
        return 2
    stalls = any(top_stalls(launches[k]) for k in order)
    print("%-80s %s%s" % ("kernel", " ".join("%9s" % h for h, _ in METRICS), "  top stalls (cycles an issue)" if stalls else ""))
    for key in order:
        m = launches[key]
        cols = " ".join("%9s" % ("%.1f" % m[n] if n in m else "-") for _, n in METRICS)
        print("%-80s %s%s" % (key[1][:80], cols, "  " + (top_stalls(m) or "-") if stalls else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
