#!/usr/bin/env bash
# tests/cli/run_counts.sh BUILD_DIR — what a run says about its size and progress agrees
# everywhere, and a CPU run has no SKIP a user cannot act on:
#  1. `list`: an adaptive family's case says it runs as its bisection, a case only for a trainer
#     with an "if_supported" value is marked, and the totals line per profile counts the cases
#     listed above it, in the words of `run`'s first line;
#  2. a run of gc_bisection, gate_init, ddp_onestep (mode=default: mpi and gloo) and
#     golden_regression (variant=base), its console not a terminal:
#     - the first line: "6 cases (+ gc_bisection's bisection steps) in 4 scenarios", then
#       "not part of this run: 2 cases of ddp_onestep (they need transport 'gloo', which the
#       trainer (nsa-train) does not support ...)" — gloo cases are neither run nor SKIPped;
#     - each "run" line: the elapsed time; after the first case an ETA and the verdicts so far;
#     - a case still running (one held by --fault hang) prints what it does every
#       NSA_HARNESS_PROGRESS_S seconds (0.5 here; 30 by default): "still running after ...:
#       rank 0 at step 3/24 forward";
#     - the last line "7 PASS (6 cases; gc_bisection's 1 ran as 2 bisection steps)", and
#       RESULTS.md's counts "**6 cases (gc_bisection's 1 ran as 2 bisection steps) · 7 PASS**";
#       summary.json holds the 7 verdicts;
#  3. scenarios/launchers.json (GPU only) under --profile ci: no case, not a SKIP; stderr says it
#     has no ci profile and that --profile gpu runs it;
#  4. SKIP summaries say what would make the case run: a GPU case under --profile gpu here.
set -u
build=${1:?usage: bash tests/cli/run_counts.sh <build dir>}
H="$build/nsa-harness"
[ -x "$H" ] && [ -x "$build/nsa-train" ] || { echo "SKIP: $H or nsa-train not built"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, finish, has

# ---- 1. list ---------------------------------------------------------------------------------------
"$H" list --profile ci >"$TMP/list.out" 2>&1
check "list: gc_bisection's case runs as its bisection" grep -q "^    profile ci: 1 case (each run as its bisection: 2 or more steps), " "$TMP/list.out"
check "list: ddp_onestep's gloo cases are marked" \
  grep -q "^      transport=gloo,mode=default,.*  (only for a trainer that supports transport 'gloo': a run whose trainer does not is without it)$" "$TMP/list.out"
check "list: the totals line counts the cases listed" python3 - "$TMP/list.out" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
cases = sum(1 for l in lines if l.startswith("      "))
marked = sum(1 for l in lines if l.startswith("      ") and "(only for a trainer that supports" in l)
scen = sum(1 for l in lines if re.match(r"^    profile ci: [1-9]", l))
tot = [l for l in lines if l.startswith("profile ci: ")]
want = "profile ci: %d cases (+ gc_bisection's bisection steps) in %d scenarios; %d of them only for a trainer that supports their value (marked above)" % (cases, scen, marked)
assert tot == [want], (tot, want)
assert marked == 10, marked
PY

# ---- 2. a run: first line, progress, last line, RESULTS.md -------------------------------------------
NSA_HARNESS_PROGRESS_S=0.5 "$H" run scenarios/gc_bisection.json scenarios/gate_init.json scenarios/ddp_onestep.json \
  scenarios/golden_regression.json --profile ci --filter gc_bisection --filter gate_init --filter mode=default \
  --filter variant=base --out "$TMP/r" >"$TMP/r.out" 2>"$TMP/r.err"
rc=$?
check "the run exits 0 (exit $rc)" test "$rc" = 0
check "first line: 6 cases (+ gc_bisection's bisection steps) in 4 scenarios" \
  grep -q "^nsa-harness: 6 cases (+ gc_bisection's bisection steps) in 4 scenarios, profile ci, report $TMP/r$" "$TMP/r.out"
check "then: the gloo cases are not part of this run, and why" \
  grep -qF "nsa-harness: not part of this run: 2 cases of ddp_onestep (they need transport 'gloo', which the trainer (nsa-train) does not support (--protocol-info))" "$TMP/r.out"
check "run lines: the first shows the elapsed time" grep -qE '^\[1/6·1\] run   gc_bisection/ckpt=off  \([0-9.]+ s elapsed\)$' "$TMP/r.out"
check "run lines: later ones an ETA and the verdicts so far" \
  grep -qE '^\[2/6\] run   gate_init/gate=softmax  \([0-9.]+ s elapsed, ETA ~[0-9]+(\.[0-9])? (s|m [0-9]+ s); 2 PASS\)$' "$TMP/r.out"
check "last lines: 7 PASS (6 cases; gc_bisection's 1 ran as 2 bisection steps)" \
  grep -qx "nsa-harness: 7 PASS (6 cases; gc_bisection's 1 ran as 2 bisection steps)" "$TMP/r.out"
check "RESULTS.md: the same counts" has "$TMP/r/RESULTS.md" "**6 cases (gc_bisection's 1 ran as 2 bisection steps) · 7 PASS**"
check "summary.json: 7 verdicts, no gloo case, no SKIP" python3 - "$TMP/r/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert len(s["cases"]) == 7 and s["counts"]["PASS"] == 7, s["counts"]
assert not [c for c in s["cases"] if "gloo" in c["case"]]
PY
[ "$fail" = 0 ] || { echo "--- run output"; cat "$TMP/r.out" "$TMP/r.err"; }
# a long case: one held at step 3 (--fault hang) until it is a HANG (stall_s 120 x 0.02)
NSA_HARNESS_PROGRESS_S=0.5 "$H" run scenarios/golden_regression.json --profile ci --filter variant=base \
  --fault hang=0:3:forward --timeout-scale 0.02 --out "$TMP/h" >"$TMP/h.out" 2>&1
check "a case still running says what it does, every NSA_HARNESS_PROGRESS_S: rank 0's step of 24, its phase" \
  bash -c "[ \$(grep -cE '^\[1/1\] \.\.\.   golden_regression/variant=base: still running after [0-9.]+ s: rank 0 at step 3/24 forward\$' '$TMP/h.out') -ge 2 ]"

# ---- 3. a scenario without the profile -----------------------------------------------------------------
"$H" run scenarios/launchers.json --profile ci --out "$TMP/l" >"$TMP/l.out" 2>"$TMP/l.err"
rc=$?
check "launchers under --profile ci: exit 0, no case" bash -c "[ $rc = 0 ] && grep -q '^nsa-harness: 0 cases in 0 scenarios, profile ci' '$TMP/l.out'"
check "... stderr: no ci profile, --profile gpu runs it" \
  grep -q "scenarios/launchers.json has no 'ci' profile: not part of this run (--profile gpu runs it)$" "$TMP/l.err"

# ---- 4. a SKIP says what would make it run ----------------------------------------------------------
if "$build/nsa-train" --print-env | python3 -c "import json,sys; e=json.load(sys.stdin); sys.exit(0 if not (e.get('cuda') or {}).get('devices') else 1)"; then
  "$H" run scenarios/gate_init.json --profile gpu --filter gate=softmax --out "$TMP/g" >"$TMP/g.out" 2>&1
  check "a GPU case without a GPU: SKIP naming what runs it" \
    grep -q "SKIP  gate_init/gate=softmax (.*): needs 1 GPU, found 0: runs where 1 CUDA device is usable$" "$TMP/g.out"
else
  echo "SKIP the GPU-less SKIP check: this machine has a CUDA device"
fi
finish
