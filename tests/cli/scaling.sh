#!/usr/bin/env bash
# tests/cli/scaling.sh BUILD_DIR — bench/gpu_scaling.sh (the data-parallel scaling table)
# run on the CPU over MPI with the tiny config, so its plumbing is checked where no GPU is:
# 1, 2 and 4 ranks each give a row (ranks, step ms, tok/s, tok/s per rank, speedup, the
# doubling's efficiency: '-' at 1, tok/s(n) / (2 tok/s(n/2)) at 2 and 4, comm wait); the CSV
# says the same; bad arguments exit 2 naming the value; a missing build exits 2. The CPU's
# figures themselves mean nothing (4 ranks on 2 cores). SKIPs (77) without mpirun or MPI.
set -u
BUILD=${1:?usage: scaling.sh BUILD_DIR}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, finish
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
"$BUILD/nsa-train" --print-env | grep -q '"mpi": null' && { echo "SKIP: nsa-train built without MPI"; exit 77; }
S=bench/gpu_scaling.sh
CSV="$TMP/t.csv" CONFIG=configs/tiny.json BACKEND=cpu TRANSPORT=mpi bash "$S" "$BUILD" "1 2 4" 1 3 >"$TMP/out" 2>&1
rc=$?
cat "$TMP/out"
check "1, 2, 4 ranks over MPI on the CPU: exit 0 (exit $rc)" test "$rc" = 0
python3 - "$TMP/out" "$TMP/t.csv" <<'PY' && ok "a row per rank count, the speedup and doubling columns computed, the CSV alike" || bad "table / CSV"
import csv, sys
rows = [l.split() for l in open(sys.argv[1]) if l[:1].isdigit()]
assert [r[0] for r in rows] == ["1", "2", "4"], rows
tok = {r[0]: float(r[2]) for r in rows}
assert rows[0][4] == "1.00x" and rows[0][5] == "-", rows[0]
for n, half in (("2", "1"), ("4", "2")):
    r = next(r for r in rows if r[0] == n)
    # doubling efficiency, from the table's tok/s (whole numbers: each within 0.5 of the value
    # the script divided, so the ratio within that relative error, plus the 3 printed decimals)
    ratio = tok[n] / (2 * tok[half])
    assert abs(float(r[5]) - ratio) <= ratio * (0.5 / tok[n] + 0.5 / tok[half]) + 1e-3, r
    assert abs(float(r[3]) - tok[n] / int(n)) <= 1, r                   # tok/s per rank
c = list(csv.DictReader(open(sys.argv[2])))
assert [x["ranks"] for x in c] == ["1", "2", "4"] and c[0]["doubling_efficiency"] == "-", c
assert all(float(x["tok_per_s"]) > 0 and float(x["step_ms"]) > 0 for x in c), c
PY
bash "$S" "$BUILD" "1 x" >"$TMP/e1" 2>&1; rc=$?
check "a bad rank count: exit 2 naming it (exit $rc)" bash -c "[ $rc = 2 ] && grep -q \"got 'x'\" '$TMP/e1'"
bash "$S" "$BUILD" "1 2" 1 2 >"$TMP/e2" 2>&1; rc=$?
check "STEPS < 3: exit 2 (exit $rc)" bash -c "[ $rc = 2 ] && grep -q 'STEPS must be >= 3' '$TMP/e2'"
bash "$S" "$TMP/nothing" >"$TMP/e3" 2>&1; rc=$?
check "no nsa-train in BUILD_DIR: exit 2 (exit $rc)" bash -c "[ $rc = 2 ] && grep -q 'is not built' '$TMP/e3'"
finish
