#!/usr/bin/env bash
# tests/cli/compare.sh — nsa-harness compare on two REAL reports that differ in one case.
#
# Usage (from the source root): bash tests/cli/compare.sh <build dir>
# The scenario (written here): the tiny model with 4 layers, 3 steps, three cases —
# ckpt=off (no checkpointing, the dump_match reference), ckpt=low (layers [0,2)
# checkpointed) and ckpt=high ([2,4)) — checks finite and dump_match of the step-1
# gradients against ckpt=off. Report A runs it cleanly; report B with
# --fault gc_recompute_mismatch=1, which perturbs layer 1's recomputation and so has
# an effect only where layer 1 is checkpointed: ckpt=low's gradients, loss from step 2
# and verdict (FAIL) change, ckpt=off and ckpt=high stay bitwise equal (asserted).
#  1. compare A A: exit 0, no change;
#  2. compare A B: exit 1, exactly ckpt=low regressed (verdict PASS -> FAIL, the loss
#     from step 2, peak memory — the fault saves a copy of the layer input — and its differing
#     tensors grouped by layer and part, layer 1 first), no other case listed;
#  3. compare B A: an improvement, exit 0;
#  4. --out: the Markdown file and the SVG beside it, well-formed XML; --plots DIR;
#  5. judged tolerances on edited copies of A: step time doubled (exit 1; --time-tol 1.5
#     exit 0), peak memory up (exit 1; --mem-tol; mem_bytes where peak_mem_bytes is absent),
#     a case missing from B (a filtered B: listed under "Absent from B", exit 0; beside a
#     real regression exit 1), a case B lists but did not run (exit 1), golden_* facts
#     printed generically (exit 0);
#  6. usage errors and bad inputs exit 2 naming the flag, the folder or file:line:col; a
#     summary.json that is `{}`, of another format, with a wrongly typed key, or a FIFO:
#     compare and show both exit 2 with the same message (a FIFO under a generous 60 s
#     timeout: it must return at once, the timeout only keeps a regression from hanging).
# Timing is noisy on a shared CPU, so 2 and 3 pass --time-tol inf. Skips (77) without
# python3 or the executables.
set -u
build=${1:?usage: bash tests/cli/compare.sh <build dir>}
H="$build/nsa-harness"
if [ ! -x "$H" ] || [ ! -x "$build/nsa-train" ]; then echo "SKIP: $H or nsa-train not built"; exit 77; fi
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 not found (needed to check the output)"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nsa_compare.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1: $2"; fail=$((fail + 1)); }
py() {   # py NAME SCRIPT ARGS...: a python assertion script; PASS/FAIL by its status
    local name=$1 script=$2
    shift 2
    if python3 -c "$script" "$@" >"$tmp/py.out" 2>&1; then ok "$name"; else bad "$name" "$(tail -5 "$tmp/py.out")"; fi
}
# expect RC NAME CMD...: run, keep stdout/stderr in $tmp/out, $tmp/err, check the exit code
expect() {
    local want=$1 name=$2
    shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" -eq "$want" ]; then ok "$name: exit $want"; else bad "$name" "exit $rc, wanted $want: $(head -5 "$tmp/err")"; fi
}

cat >"$tmp/gc_ab.json" <<EOF
{
  "name": "gc_ab",
  "description": "compare test: checkpointed layer ranges against no checkpointing, step-1 gradients bitwise",
  "family": "branch_isolation",
  "config": "$PWD/configs/tiny.json",
  "overrides": {"train.steps": 3, "model.n_layers": 4},
  "run": {"timeout_s": 60},
  "profiles": {"ci": {}},
  "matrix": {
    "ckpt": {"values": {"off": {"train.checkpoint_layers": [0, 0]},
                        "low": {"train.checkpoint_layers": [0, 2]},
                        "high": {"train.checkpoint_layers": [2, 4]}}}
  },
  "checks": [
    {"check": "finite"},
    {"check": "dump_match", "reference": "ckpt=off", "tensors": ["grads.*"], "tolerance": 0}
  ]
}
EOF
A="$tmp/A"
B="$tmp/B"
"$H" run "$tmp/gc_ab.json" --profile ci --out "$A" --quiet >"$tmp/runA.out" 2>&1
rc=$?
[ "$rc" -eq 0 ] && ok "report A (clean) exits 0" || bad "report A" "exit $rc: $(tail -5 "$tmp/runA.out")"
"$H" run "$tmp/gc_ab.json" --profile ci --out "$B" --quiet --fault gc_recompute_mismatch=1 >"$tmp/runB.out" 2>&1
rc=$?
[ "$rc" -eq 1 ] && ok "report B (gc_recompute_mismatch=1) exits 1" || bad "report B" "exit $rc: $(tail -5 "$tmp/runB.out")"
py "the premise: only ckpt=low differs between A and B" '
import json, sys, filecmp
A, B = sys.argv[1], sys.argv[2]
def losses(rep, case):
    return [json.loads(l)["loss"] for l in open(rep + "/gc_ab/" + case + "/metrics.jsonl")]
for case in ["ckpt=off", "ckpt=high"]:
    assert losses(A, case) == losses(B, case), case
    assert filecmp.cmp(A + "/gc_ab/" + case + "/step1.safetensors", B + "/gc_ab/" + case + "/step1.safetensors", shallow=False), case
assert losses(A, "ckpt=low") != losses(B, "ckpt=low")
v = {c["case"]: c["verdict"] for c in json.load(open(B + "/summary.json"))["cases"]}
assert v == {"ckpt=off": "PASS", "ckpt=low": "FAIL", "ckpt=high": "PASS"}, v
' "$A" "$B"

# 1. A against itself ------------------------------------------------------------------------
expect 0 "compare A A" "$H" compare "$A" "$A"
py "compare A A: no change" '
import sys
md = open(sys.argv[1]).read()
assert md.startswith("# nsa-harness compare"), md[:200]
assert "**No regression.** 3 cases compared: 3 unchanged." in md, md
assert "## Changes\n\nNone:" in md and "###" not in md, md
' "$tmp/out"

# 2. A against B: exactly ckpt=low regressed ----------------------------------------------------
expect 1 "compare A B" "$H" compare "$A" "$B" --time-tol inf
cp "$tmp/out" "$tmp/AB.md"
py "compare A B: ckpt=low regressed with its verdict, loss and tensors; no other case" '
import re, sys
md = open(sys.argv[1]).read()
assert "**B regressed against A: 1 case regressed**: `gc_ab/ckpt=low`." in md, md[:1500]
assert "2 unchanged, 1 regressed" in md
rows = [l for l in md.splitlines() if l.startswith("| gc_ab |")]
assert len(rows) == 1 and rows[0].startswith("| gc_ab | ckpt=low | PASS → **FAIL** |"), rows
# the fault saves a backend copy of the input of layer 1 (B*T*C floats): peak memory +131072 B
assert "**regressed**: verdict PASS → FAIL, loss, peak memory, step-1 tensors |" in rows[0], rows[0]
sections = re.findall(r"^### (.*)$", md, re.M)
assert sections == ["gc_ab / ckpt=low — regressed"], sections
assert "ckpt=off" not in md.replace("from ckpt=off", "").replace("to ckpt=off", ""), "another case is named"
assert "ckpt=high" not in md, "ckpt=high is named"
assert re.search(r"- loss: 2 of 3 steps differ, first at step 2 \([0-9.]+ → [0-9.]+\); largest relative difference [0-9.e-]+, past the tolerance 0\n", md), "loss delta"
assert re.search(r"- step time median \(ms\): [0-9.]+ → [0-9.]+ \([+-][0-9.]+ %\); tok/s median: [0-9.]+ → [0-9.]+", md), "time deltas"
assert re.search(r"- peak memory \(largest peak_mem_bytes\): \*\*(\d+) → (\d+) \(\+[0-9.]+ %\)\*\*", md), "memory"
m = re.search(r"step-1 tensors \(`step1.safetensors`.*?\): (\d+) of (\d+) differ", md)
assert m and int(m.group(1)) > 0, "tensor count"
groups = re.findall(r"^  - (layer \d+ \w+|embed|head|data|other) \((\d+)\): `([^`]+)`", md, re.M)
assert groups and groups[0][0].startswith("layer 1 "), groups[:3]
assert sum(int(g[1]) for g in groups) == int(m.group(1)), (groups, m.group(1))
assert all(g[2].startswith("grads.blocks.1.") for g in groups if g[0].startswith("layer 1")), groups
assert "Loss curves differ in 1 scenario; no plot written (give --out FILE or --plots DIR)." in md
' "$tmp/AB.md"

# 3. B against A: an improvement --------------------------------------------------------------------
expect 0 "compare B A (improvement)" "$H" compare "$B" "$A" --time-tol inf
py "compare B A: ckpt=low improved, no regression" '
import sys
md = open(sys.argv[1]).read()
assert "**No regression.** 3 cases compared: 2 unchanged, 1 improved." in md, md[:1500]
assert "| gc_ab | ckpt=low | FAIL → **PASS** |" in md and "### gc_ab / ckpt=low — improved" in md
' "$tmp/out"

# 4. --out and --plots ----------------------------------------------------------------------------
expect 1 "compare A B --out" "$H" compare "$A/summary.json" "$B/summary.json" --time-tol inf --out "$tmp/o/cmp.md"
grep -q "B regressed against A; wrote $tmp/o/cmp.md and 1 plot" "$tmp/out" && ok "--out: one line on stdout" \
    || bad "--out stdout" "$(cat "$tmp/out")"
py "--out: the Markdown and its SVG, well-formed, A solid and B dashed" '
import sys, xml.etree.ElementTree as ET
d = sys.argv[1]
md = open(d + "/cmp.md").read()
assert "`gc_ab/ckpt=low`" in md and "![loss gc_ab](cmp_gc_ab.svg)" in md, md[-600:]
root = ET.parse(d + "/cmp_gc_ab.svg").getroot()
ns = "{http://www.w3.org/2000/svg}"
assert root.tag == ns + "svg", root.tag
lines = root.findall(ns + "polyline")
assert len(lines) == 2 and "stroke-dasharray" not in lines[0].attrib and "stroke-dasharray" in lines[1].attrib, [l.attrib for l in lines]
texts = [t.text for t in root.iter(ns + "text")]
assert "ckpt=low" in texts and "A" in texts and "B" in texts, texts
' "$tmp/o"
expect 1 "compare A B --plots DIR" "$H" compare "$A" "$B" --time-tol inf --plots "$tmp/plots"
[ -s "$tmp/plots/compare_gc_ab.svg" ] && grep -q "(written to \`$tmp/plots\`)" "$tmp/out" \
    && grep -q "!\[loss gc_ab\]($tmp/plots/compare_gc_ab.svg)" "$tmp/out" \
    && ok "--plots DIR: compare_gc_ab.svg written and named in the Markdown" || bad "--plots" "$(tail -5 "$tmp/out")"

# 5. tolerances, missing cases and golden facts, on edited copies of A -----------------------------------
edit_copy() {   # edit_copy NAME PYTHON: copy A to $tmp/NAME, then run PYTHON in it (argv[1] = the copy)
    cp -r "$A" "$tmp/$1"
    python3 -c "$2" "$tmp/$1"
}
edit_copy slow '
import json, sys
p = sys.argv[1] + "/gc_ab/ckpt=high/metrics.jsonl"
recs = [json.loads(l) for l in open(p)]
for r in recs: r["ms"] *= 2; r["tok_per_s"] /= 2
open(p, "w").write("".join(json.dumps(r) + "\n" for r in recs))
'
expect 1 "step time doubled" "$H" compare "$A" "$tmp/slow"
grep -q "| gc_ab | ckpt=high | PASS | = (3 steps) | \*\*.* (+100.0 %)\*\* | \*\*.* (-50.0 %)\*\* |.*\*\*regressed\*\*: step time, tok/s |" "$tmp/out" \
    && ok "step time doubled: ckpt=high regressed on step time and tok/s" || bad "step time doubled" "$(grep '| gc_ab |' "$tmp/out")"
expect 0 "step time doubled, --time-tol 1.5" "$H" compare "$A" "$tmp/slow" --time-tol 1.5
edit_copy mem '
import json, sys
p = sys.argv[1] + "/gc_ab/ckpt=off/metrics.jsonl"
recs = [json.loads(l) for l in open(p)]
recs[-1]["peak_mem_bytes"] += 4096
open(p, "w").write("".join(json.dumps(r) + "\n" for r in recs))
'
expect 1 "peak memory +4096 B" "$H" compare "$A" "$tmp/mem" --time-tol inf
grep -q "| gc_ab | ckpt=off | .*\*\*regressed\*\*: peak memory |" "$tmp/out" && grep -q "^- peak memory (largest peak_mem_bytes): \*\*" "$tmp/out" \
    && ok "peak memory: ckpt=off regressed" || bad "peak memory" "$(grep '| gc_ab |' "$tmp/out")"
expect 0 "peak memory +4096 B, --mem-tol 0.01" "$H" compare "$A" "$tmp/mem" --time-tol inf --mem-tol 0.01
edit_copy oldmem '
import json, sys
p = sys.argv[1] + "/gc_ab/ckpt=off/metrics.jsonl"
recs = [json.loads(l) for l in open(p)]
for r in recs: r.pop("peak_mem_bytes", None)
recs[-1]["mem_bytes"] += 4096
open(p, "w").write("".join(json.dumps(r) + "\n" for r in recs))
'
expect 1 "mem_bytes +4096 B where B has no peak_mem_bytes" "$H" compare "$A" "$tmp/oldmem" --time-tol inf
grep -q "^- peak memory (largest mem_bytes): \*\*" "$tmp/out" && ok "without peak_mem_bytes: mem_bytes compared" \
    || bad "mem_bytes fallback" "$(grep 'peak memory' "$tmp/out")"
edit_copy missing '
import json, sys
p = sys.argv[1] + "/summary.json"
s = json.load(open(p))
s["cases"] = [c for c in s["cases"] if c["case"] != "ckpt=high"]
json.dump(s, open(p, "w"), indent=1)
'
# a full report against a filtered one: the case B does not list is absent, listed
# apart, not compared and not a regression by itself; a regression among the others still is
expect 0 "a case of A missing from B (a filtered B)" "$H" compare "$A" "$tmp/missing" --time-tol inf
py "missing case: listed under Absent from B, not in Changes, exit 0" '
import sys
md = open(sys.argv[1]).read()
assert "**No regression.** 2 cases compared: 2 unchanged. 1 case of A is absent from B: not compared, not a regression" in md, md[:1200]
assert "## Absent from B" in md and "- `gc_ab` (1): `ckpt=high` PASS" in md, md
assert "| gc_ab | ckpt=high |" not in md and "### gc_ab / ckpt=high" not in md, md
' "$tmp/out"
edit_copy missing_fail '
import json, sys
p = sys.argv[1] + "/summary.json"
s = json.load(open(p))
s["cases"] = [c for c in s["cases"] if c["case"] != "ckpt=high"]
for c in s["cases"]:
    if c["case"] == "ckpt=off": c["verdict"] = "FAIL"
json.dump(s, open(p, "w"), indent=1)
'
expect 1 "absent beside a real regression: exit 1" "$H" compare "$A" "$tmp/missing_fail" --time-tol inf
py "... the regression named, the absent case apart" '
import sys
md = open(sys.argv[1]).read()
assert "**B regressed against A: 1 case regressed**: `gc_ab/ckpt=off`. 2 cases compared: 1 unchanged, 1 regressed. 1 case of A is absent from B" in md, md[:1200]
assert "- `gc_ab` (1): `ckpt=high` PASS" in md, md
' "$tmp/out"
edit_copy notrun '
import json, sys
p = sys.argv[1] + "/summary.json"
s = json.load(open(p))
for c in s["cases"]:
    if c["case"] == "ckpt=high": c["verdict"] = "SKIP"; c["ran"] = False; c["summary"] = "not run: interrupted"
json.dump(s, open(p, "w"), indent=1)
'
expect 1 "a case B lists but did not run: still a regression" "$H" compare "$A" "$tmp/notrun" --time-tol inf
grep -q "| gc_ab | ckpt=high | PASS → \*\*not run\*\* |.*\*\*regressed\*\*: not run in B |" "$tmp/out" \
    && ok "not run in B: regressed" || bad "not run in B" "$(grep '| gc_ab |' "$tmp/out")"
expect 0 "a case new in B that passes" "$H" compare "$tmp/missing" "$A" --time-tol inf
grep -q "| gc_ab | ckpt=high | absent → \*\*PASS\*\* |.*| new |" "$tmp/out" && ok "new case: listed as new" \
    || bad "new case" "$(grep '| gc_ab |' "$tmp/out")"
edit_copy golden '
import json, sys
p = sys.argv[1] + "/summary.json"
s = json.load(open(p))
for c in s["cases"]:
    if c["case"] == "ckpt=high": c["facts"]["golden_loss_max_rel"] = 0.25; c["facts"]["golden_differs"] = ["loss", "grad_norm"]
json.dump(s, open(p, "w"), indent=1)
'
expect 0 "golden_* facts (reported, not judged)" "$H" compare "$A" "$tmp/golden" --time-tol inf
py "golden_* facts: key and compact JSON value" '
import sys
md = open(sys.argv[1]).read()
assert "## Golden-regression facts" in md, md
assert "| gc_ab | ckpt=high | `golden_loss_max_rel` | — | `0.25` |" in md, md
assert "| gc_ab | ckpt=high | `golden_differs` | — | `[\"loss\",\"grad_norm\"]` |" in md, md
assert "### gc_ab / ckpt=high — changed" in md and "golden_* facts differ" in md
' "$tmp/out"
expect 0 "equal golden_* facts" "$H" compare "$tmp/golden" "$tmp/golden"
grep -q "The golden_\* facts of 1 unchanged case are equal in A and B (not shown)." "$tmp/out" \
    && ok "equal golden_* facts: counted, not listed" || bad "equal golden facts" "$(tail -5 "$tmp/out")"

# 6. usage errors and bad inputs ----------------------------------------------------------------------
expect 2 "one report only" "$H" compare "$A"
grep -q "expected two reports" "$tmp/err" && ok "one report: says two are expected" || bad "one report" "$(cat "$tmp/err")"
expect 2 "--loss-tol abc" "$H" compare "$A" "$B" --loss-tol abc
grep -q -- "--loss-tol 'abc'" "$tmp/err" && ok "--loss-tol abc: names flag and value" || bad "--loss-tol abc" "$(cat "$tmp/err")"
expect 2 "--time-tol -1" "$H" compare "$A" "$B" --time-tol -1
grep -q -- "--time-tol '-1'" "$tmp/err" && ok "--time-tol -1: names flag and value" || bad "--time-tol -1" "$(cat "$tmp/err")"
expect 2 "--mem-tol without a value" "$H" compare "$A" "$B" --mem-tol
grep -q -- "--mem-tol needs a value" "$tmp/err" && ok "--mem-tol: needs a value" || bad "--mem-tol" "$(cat "$tmp/err")"
expect 2 "unknown option" "$H" compare "$A" "$B" --bogus
grep -q -- "unknown option '--bogus'" "$tmp/err" && ok "unknown option named" || bad "unknown option" "$(cat "$tmp/err")"
expect 2 "a nonexistent folder" "$H" compare "$A" "$tmp/no_such_report"
grep -q "B: $tmp/no_such_report: no such report folder" "$tmp/err" && ! grep -q -- "-1:-1" "$tmp/err" \
    && ok "nonexistent folder: named, no -1:-1" || bad "nonexistent folder" "$(cat "$tmp/err")"
mkdir -p "$tmp/empty_dir"
expect 2 "a folder without summary.json" "$H" compare "$tmp/empty_dir" "$A"
grep -q "A: report folder $tmp/empty_dir has no summary.json" "$tmp/err" && ok "folder without summary.json: said so" \
    || bad "folder without summary.json" "$(cat "$tmp/err")"
mkdir -p "$tmp/broken"
head -c 300 "$A/summary.json" >"$tmp/broken/summary.json"
expect 2 "a truncated summary.json" "$H" compare "$A" "$tmp/broken"
grep -q "$tmp/broken/summary.json:[0-9]*:[0-9]*: " "$tmp/err" && ok "truncated summary.json: file:line:col" \
    || bad "truncated summary.json" "$(cat "$tmp/err")"
edit_copy badverdict '
import json, sys
p = sys.argv[1] + "/summary.json"
s = json.load(open(p))
s["cases"][1]["verdict"] = "MAYBE"
json.dump(s, open(p, "w"), indent=1)
'
expect 2 "an invalid verdict" "$H" compare "$tmp/badverdict" "$A"
grep -q "$tmp/badverdict/summary.json:[0-9]*:[0-9]*: cases\[1\].verdict: expected PASS" "$tmp/err" \
    && ok "invalid verdict: file:line:col and the path" || bad "invalid verdict" "$(cat "$tmp/err")"
# summaries that are not a report's: compare and show refuse them alike, exit 2
# naming the file, the place and what is wrong (one loader, harness/report/report_in.c)
mkdir -p "$tmp/empty_obj" "$tmp/other_fmt" "$tmp/badtype" "$tmp/fifo"
echo '{}' >"$tmp/empty_obj/summary.json"
echo '{"format": "other-tool-3", "cases": []}' >"$tmp/other_fmt/summary.json"
python3 -c '
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json")); s["started"] = 7
json.dump(s, open(sys.argv[2] + "/summary.json", "w"), indent=1)' "$A" "$tmp/badtype"
mkfifo "$tmp/fifo/summary.json"
for d in empty_obj other_fmt badtype fifo; do
  expect 2 "compare of a $d summary" timeout 60 "$H" compare "$tmp/$d" "$A"
  cp "$tmp/err" "$tmp/err_compare"
  expect 2 "show of a $d summary" timeout 60 "$H" show "$tmp/$d"
  case $d in
    empty_obj) want="$tmp/empty_obj/summary.json:1:1: summary: not a report summary: no \"format\"" ;;
    other_fmt) want="$tmp/other_fmt/summary.json:1:12: format: not a report summary: expected \"nsa-harness-summary-1\", got \"other-tool-3\"" ;;
    badtype) want="$tmp/badtype/summary.json:[0-9]*:[0-9]*: started: expected a string, got an integer" ;;
    fifo) want="$tmp/fifo/summary.json: not a regular file (a FIFO or pipe)" ;;
  esac
  grep -q "^nsa-harness compare: A: $want" "$tmp/err_compare" && grep -q "^nsa-harness show: $want" "$tmp/err" \
      && ! grep -q "(null)\|Nothing to diagnose" "$tmp/out" && ok "$d: compare and show say the same: $want" \
      || bad "$d summary" "compare: $(cat "$tmp/err_compare") show: $(cat "$tmp/err") $(head -3 "$tmp/out")"
done
expect 0 "show of a real report" "$H" show "$A"
grep -q "^report $A — started 20[0-9-]*T" "$tmp/out" && ok "show of a real report: its header" || bad "show of a real report" "$(head -3 "$tmp/out")"
expect 0 "help compare" "$H" help compare
grep -q -- "--loss-tol REL" "$tmp/out" && ok "help compare lists the options" || bad "help compare" "$(head -3 "$tmp/out")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
