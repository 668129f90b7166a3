#!/usr/bin/env bash
# tests/cli/bad_scenarios.sh — nsa-harness rejects bad scenario files with a located
# message, validates every shipped scenario, and runs good files beside bad ones.
#
# Usage (from the source root): bash tests/cli/bad_scenarios.sh <build dir>
# 1. For every line "<file> <expected>" of tests/bad_scenarios/EXPECTED:
#    `nsa-harness validate tests/bad_scenarios/<file>` must exit 2 and print
#    "tests/bad_scenarios/<file>:<expected>" (position and message as one string;
#    the positions were computed independently, by locating the offending token).
#    Every file in tests/bad_scenarios/ must have a line.
# 2. Every file in scenarios/ validates (exit 0) for all its profiles.
# 3. `nsa-harness run GOOD BAD1 BAD2` runs the good scenario's cases (PASS), lists
#    each bad file as ERROR with its file:line:col in RESULTS.md, summary.json and
#    junit.xml, and exits 2.
# 4. Usage errors exit 2 naming the flag.
set -u
build=${1:?usage: bash tests/cli/bad_scenarios.sh <build dir>}
bin="$build/nsa-harness"
if [ ! -x "$bin" ] || [ ! -x "$build/nsa-train" ]; then
    echo "SKIP: $bin or nsa-train not built"
    exit 77
fi
dir=tests/bad_scenarios
[ -f "$dir/EXPECTED" ] || { echo "FAIL: run from the source root ($dir/EXPECTED not found)"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nsa_bad_scenarios.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() {
    echo "FAIL $1: $2"
    [ -f "$tmp/err" ] && sed 's/^/    stderr: /' "$tmp/err" | head -20
    fail=$((fail + 1))
}

# 1. each bad file
while IFS= read -r line; do
    [ -z "$line" ] && continue
    f=${line%% *}
    want="$dir/$f:${line#* }"
    "$bin" validate "$dir/$f" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -ne 2 ]; then bad "$f" "exit status $rc, expected 2"
    elif ! grep -qF -- "$want" "$tmp/err"; then bad "$f" "stderr lacks: $want"
    else ok "$f"; fi
done <"$dir/EXPECTED"
for f in "$dir"/*.json; do
    b=$(basename "$f")
    grep -q "^$b " "$dir/EXPECTED" || bad "$b" "no line in EXPECTED"
done

# 2. the shipped scenarios
for f in scenarios/*.json; do
    "$bin" validate "$f" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -eq 0 ] && grep -q "^ok  $f" "$tmp/out"; then ok "valid $f"; else bad "valid $f" "exit status $rc"; fi
done

# 3. good and bad together: the good one runs, the bad ones are ERROR with positions
cat >"$tmp/good.json" <<JSON
{
  "name": "good",
  "description": "two training steps of the tiny model, finite",
  "family": "branch_isolation",
  "config": "$PWD/configs/tiny.json",
  "overrides": {"train.steps": 2, "train.seq_len": 64, "model.max_seq_len": 64},
  "run": {"timeout_s": 60},
  "profiles": {"ci": {}},
  "checks": [{"check": "finite"}]
}
JSON
"$bin" run "$tmp/good.json" "$dir/unknown_key_top.json" "$dir/matrix_empty_values.json" --profile ci \
    --out "$tmp/rep" --quiet >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 2 ]; then bad "mixed run" "exit status $rc, expected 2"
elif ! python3 - "$tmp/rep" <<'PY'
import json, sys
rep = sys.argv[1]
s = json.load(open(rep + "/summary.json"))
cases = {(c["scenario"], c["case"]): c["verdict"] for c in s["cases"]}
assert cases == {("good", "default"): "PASS"}, cases
inv = {i["file"]: i["problems"] for i in s["invalid_scenarios"]}
assert set(inv) == {"tests/bad_scenarios/unknown_key_top.json", "tests/bad_scenarios/matrix_empty_values.json"}, inv
assert inv["tests/bad_scenarios/unknown_key_top.json"][0].startswith("tests/bad_scenarios/unknown_key_top.json:6:3: "), inv
assert s["counts"]["ERROR"] == 2 and s["counts"]["PASS"] == 1 and s["exit_code"] == 2, s["counts"]
md = open(rep + "/RESULTS.md").read()
assert "| tests/bad_scenarios/matrix_empty_values.json | — | **ERROR** |" in md
assert "tests/bad_scenarios/matrix_empty_values.json:7:62: bad matrix" in md
import xml.etree.ElementTree as ET
root = ET.parse(rep + "/junit.xml").getroot()
errs = [tc for tc in root.iter("testcase") if tc.find("error") is not None]
assert len(errs) == 2 and root.get("errors") == "2", ET.tostring(root)[:400]
PY
then bad "mixed run" "report content (see above)"
else ok "mixed run: good PASS, 2 ERROR, exit 2"; fi

# 4. usage errors
expect_usage() {
    local name=$1 want=$2
    shift 2
    "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" -ne 2 ]; then bad "$name" "exit status $rc, expected 2"
    elif ! grep -qF -- "$want" "$tmp/err"; then bad "$name" "stderr lacks: $want"
    else ok "$name"; fi
}
expect_usage "unknown command" "unknown command 'rnu'" rnu
expect_usage "unknown option" "unknown option '--profil'" run --profil ci
expect_usage "bad profile" "--profile cpu: expected ci or gpu" run --profile cpu
expect_usage "bad timeout scale" "--timeout-scale 0: expected a number > 0" run --timeout-scale 0
expect_usage "missing value" "--out needs a value" run --out
expect_usage "filter matches nothing" "no case matches the --filter" run scenarios/gate_init.json --profile ci --filter nothing-matches-this --out "$tmp/none"
"$bin" run --bisect --trainer /nonexistent/nsa-train scenarios/gate_init.json >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 125 ]; then ok "--bisect setup failure exits 125"; else bad "--bisect" "exit status $rc, expected 125"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
