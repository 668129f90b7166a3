#!/usr/bin/env python3
"""bench/ncu_table.py NCU_CSV — one line per kernel launch of an Nsight Compute report exported
with `ncu --csv --page details` (sections SpeedOfLight, Occupancy, LaunchStats, WarpStateStats,
ComputeWorkloadAnalysis): duration, SM (compute) and memory throughput, DRAM throughput, the
busiest pipe's utilisation, achieved occupancy, registers and shared memory, and the warp cycles
per issued instruction. Kernels are named without their template arguments' noise (the first
80 characters of the demangled name).

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
]


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
        if name == "Dynamic Shared Memory Per Block":
            v /= {"byte": 1024.0, "Kbyte": 1.0, "Mbyte": 1.0 / 1024}.get(unit, 1024.0)
        launches[key][name] = v
    if not order:
        print("ncu_table.py: %s: no kernel rows" % sys.argv[1], file=sys.stderr)
        return 2
    print("%-80s %s" % ("kernel", " ".join("%9s" % h for h, _ in METRICS)))
    for key in order:
        m = launches[key]
        print("%-80s %s" % (key[1][:80], " ".join("%9s" % ("%.1f" % m[n] if n in m else "-") for _, n in METRICS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
