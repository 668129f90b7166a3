#!/usr/bin/env python3
r"""bench/knob_table.py [--all] [--min-change PCT] LOG... — the knobs phase of
bench/gpu_kernels.sh side by side: its bench_cuda_attn logs (one a setting and round, named
knob_<SETTING>_<ROUND>.log, e.g. knob_NSA_CUDA_FWD_WS=0_2.log) become one line per (shape, S,
op) with each setting's times over its rounds (ms, lowest-highest) and, for every setting after
the first, the change of its median against the first setting's. The settings keep the order in
which their files are given (the first one is the reference). Lines whose changes all stay
within PCT percent (default 1) are left out unless --all: what a knob moved, in a few lines.

Exit 0 with a table; 2 when a file is missing, is not named knob_<SETTING>_<ROUND>.log, or when
no file has a timed op line."""
import os
import re
import statistics
import sys

NAME = re.compile(r"^knob_(.+)_(\d+)\.log$")
# "paper  S=8192   B=1   cmp bwd (+compress bwd)         1.268 ms     134.8 TFLOP/s"
LINE = re.compile(r"^(\w+)\s+S=(\d+)\s+B=(\d+)\s+(.+?)\s+([0-9]+(?:\.[0-9]+)?) ms\b")


def fail(msg):
    print("knob_table: " + msg, file=sys.stderr)
    sys.exit(2)


def main(argv):
    show_all, min_change, files = False, 1.0, []
    it = iter(argv)
    for a in it:
        if a == "--all":
            show_all = True
        elif a == "--min-change":
            v = next(it, None)
            try:
                min_change = float(v)
            except (TypeError, ValueError):
                fail("--min-change wants a number of percent, got %r" % v)
        else:
            files.append(a)
    if not files:
        fail("usage: knob_table.py [--all] [--min-change PCT] knob_<SETTING>_<ROUND>.log ...")
    settings, times, keys = [], {}, []   # times[(key, setting)] = [ms of each round]
    for f in files:
        m = NAME.match(os.path.basename(f))
        if not m:
            fail("%s: not named knob_<SETTING>_<ROUND>.log" % f)
        setting = m.group(1)
        if setting not in settings:
            settings.append(setting)
        try:
            lines = open(f, encoding="utf-8", errors="replace").read().splitlines()
        except OSError as e:
            fail("%s: %s" % (f, e.strerror or e))
        for line in lines:
            lm = LINE.match(line)
            if not lm:
                continue
            key = (lm.group(1), int(lm.group(2)), int(lm.group(3)), lm.group(4))
            if key not in keys:
                keys.append(key)
            times.setdefault((key, setting), []).append(float(lm.group(5)))
    if not keys:
        fail("no timed op lines in %s" % ", ".join(files))
    head = ["shape", "S", "B", "op"] + settings + ["change %s" % s for s in settings[1:]]
    rows = []
    for key in keys:
        base = times.get((key, settings[0]))
        cells, changes, moved = [], [], False
        for s in settings:
            v = times.get((key, s))
            cells.append("%.3f-%.3f" % (min(v), max(v)) if v else "-")
        for s in settings[1:]:
            v = times.get((key, s))
            if base and v and statistics.median(base) > 0:
                pct = 100.0 * (statistics.median(v) / statistics.median(base) - 1.0)
                changes.append("%+.1f %%" % pct)
                moved = moved or abs(pct) > min_change
            else:
                changes.append("-")
        if show_all or moved:
            rows.append([key[0], str(key[1]), str(key[2]), key[3]] + cells + changes)
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
    print(fmt(head))
    for r in rows:
        print(fmt(r))
    if not rows:
        print("(no op moved by more than %.1f %%; --all lists them all)" % min_change)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
