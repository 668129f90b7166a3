#!/usr/bin/env bash
# tests/cli/hang_forensics.sh BUILD_DIR — a data-parallel hang explained (issue 12 item 1):
# 2 ranks over MPI on the CPU, `--fault hang=1:2:backward` (rank 1 stops in the backward of
# step 2, before it enqueues its first gradient bucket; rank 0 finishes its backward and
# waits in that bucket's allreduce). Asserts: every rank answered SIGUSR1 with a stack and its
# flight recorder (rank 0, which only waits, too: it used to get none); the waiting rank's
# collective (sequence number, name, step) and its bucket's parameters; the rank that never
# joined, where it is (phase, step, the frame fault_hang) — in the verdict line, RESULTS.md
# and summary.json; and the latency: the verdict comes at most stall_s + 5 s after the last
# heartbeat, and at most 5 s after the watchdog saw the stall (measured, printed).
# SKIPs (77) without mpirun or an MPI build.
set -u
BUILD=${1:?usage: hang_forensics.sh BUILD_DIR}
H="$BUILD/nsa-harness"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, finish
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
"$BUILD/nsa-train" --print-env | grep -q '"mpi": null' && { echo "SKIP: nsa-train built without MPI"; exit 77; }

CASE='ddp_onestep/transport=mpi,mode=default,branch=none'
SCALE=0.2   # stall_s 30 -> 6 s, timeout_s 120 -> 24 s; the trainer's own NSA_COMM_TIMEOUT (60 s) stays later
t0=$(date +%s.%N)
"$H" run scenarios/ddp_onestep.json --profile ci --case "$CASE" --fault hang=1:2:backward --timeout-scale "$SCALE" \
  --out "$TMP/r" --quiet >"$TMP/out" 2>&1
rc=$?
wall=$(python3 -c "import time; print('%.1f' % (time.time() - $t0))")
check "a hang exits 1 (exit $rc, ${wall} s wall)" test "$rc" = 1
D="$TMP/r/ddp_onestep/transport=mpi,mode=default,branch=none"
check "every rank wrote its stack: rank 0 (waiting)" test -s "$D/stacks/rank_0.txt"
check "every rank wrote its stack: rank 1 (hung)" test -s "$D/stacks/rank_1.txt"
check "rank 0's dump shows the collective it waits in" grep -q "collectives enqueued .* completed .* (last: allreduce" "$D/stacks/rank_0.txt"
check "rank 1's stack names fault_hang" grep -q "fault_hang" "$D/stacks/rank_1.txt"
python3 - "$TMP/r/summary.json" <<'PY' && ok "summary.json: the waiting rank, its collective and bucket, who never joined, latency" || bad "summary.json facts"
import json, sys
c = json.load(open(sys.argv[1]))["cases"][0]
f = c["facts"]
assert c["verdict"] == "HANG", c["verdict"]
assert f["hang_never_joined"] == [1] and f["hang_waiting_ranks"] == [0], f
assert f["hang_wait_collective"].startswith("allreduce b") and f["hang_wait_seq"] > 0, f
assert f["hang_bucket_params"] and all(isinstance(p, str) for p in f["hang_bucket_params"]), f
assert all(r["stack_dumped"] for r in c["ranks"]), c["ranks"]
stall_s = 30 * 0.2
print("      measured: verdict %.1f s after the watchdog saw the stall, %.1f s after the last heartbeat (stall_s %.0f)"
      % (f["hang_seen_to_verdict_s"], f["hang_stall_to_verdict_s"], stall_s))
assert f["hang_seen_to_verdict_s"] <= 5.0, f
assert f["hang_stall_to_verdict_s"] <= stall_s + 5.0, f
PY
check "the verdict line names the rank that never joined and where it is" \
  grep -qE "\| \*\*HANG\*\* \| .* \| rank 1 never joined collective seq [0-9]+ \(allreduce b[0-9]+\): it is in backward of step 2, at fault_hang \(trainer/faults.c:[0-9]+\); 1 rank waits in it \|" \
  "$TMP/r/RESULTS.md"
check "RESULTS.md lays the ranks side by side" \
  bash -c "grep -q '^| 0 | yes, stack written | comm · 2 ' '$TMP/r/RESULTS.md' && grep -q '^| 1 | yes, stack written | backward · 2 ' '$TMP/r/RESULTS.md'"
check "... and says who waits in what, with the bucket's parameters" \
  grep -qE "\*\*who never joined\*\*: rank 0 waits in collective seq [0-9]+, \`allreduce b[0-9]+\` of step 2 \(gradient bucket [0-9]+: \`" "$TMP/r/RESULTS.md"
check "no process left" bash -c "! pgrep -f '[n]sa-train .*$TMP/r' >/dev/null"
finish
