#!/usr/bin/env bash
# tests/cli/hang_forensics.sh BUILD_DIR — a data-parallel hang explained:
# 2 ranks over MPI on the CPU, `--fault hang=1:2:backward` (rank 1 stops in the backward of
# step 2, before it enqueues its first gradient bucket; rank 0 finishes its backward and
# waits in that bucket's allreduce). Asserts: every rank answered SIGUSR1 with a stack and its
# flight recorder (rank 0, which only waits, too: it used to get none); the waiting rank's
# collective (sequence number, name, step) and its bucket's parameters; the rank that never
# joined, where it is (phase, step, the frame fault_hang) — in the verdict line, RESULTS.md
# and summary.json; and the latency: the verdict comes at most stall_s + 5 s after the last
# heartbeat, and at most 5 s after the watchdog saw the stall (measured, printed). Then the
# same with 4 ranks (rank 2 hangs) and 8 ranks (rank 5 hangs): every stack whole, the hung rank
# named, every other rank waiting, all of them side by side in RESULTS.md.
# SKIPs (77) without mpirun or an MPI build.
# On a GPU machine (bench/gpu_multi.sh runs it): HF_PROFILE=gpu HF_TRANSPORT=nccl
# runs the same checks on ddp_onestep's gpu profile (m7c_125m, the CUDA backend, one GPU a
# rank); the 4- and 8-rank parts then need 4 and 8 GPUs and SKIP visibly with fewer.
set -u
BUILD=${1:?usage: hang_forensics.sh BUILD_DIR}
PROFILE=${HF_PROFILE:-ci} TRANSPORT=${HF_TRANSPORT:-mpi}
case "$PROFILE/$TRANSPORT" in ci/mpi|gpu/mpi|gpu/nccl) ;;
  *) echo "hang_forensics.sh: HF_PROFILE=$PROFILE HF_TRANSPORT=$TRANSPORT: expected ci/mpi, gpu/mpi or gpu/nccl" >&2; exit 2 ;;
esac
H="$BUILD/nsa-harness"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, finish
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
"$BUILD/nsa-train" --print-env | grep -q '"mpi": null' && { echo "SKIP: nsa-train built without MPI"; exit 77; }

if [ "$PROFILE" = gpu ]; then   # a GPU a rank
  ngpu=$("$BUILD/nsa-train" --print-env | python3 -c 'import json,sys; e=json.load(sys.stdin); print(len((e.get("cuda") or {}).get("devices") or []))')
  [ "$ngpu" -ge 2 ] || { echo "SKIP: the gpu profile wants a GPU a rank, 2; this machine shows $ngpu"; exit 77; }
fi
# (the runner adds the case's one-rank reference, ranks=1: it runs first and PASSes)
CASE="ddp_onestep/transport=$TRANSPORT,mode=default,branch=none,ranks=2"
# ci: stall_s 30 -> 6 s, timeout_s 120 -> 24 s; gpu: 120 -> 24 s, 600 -> 120 s. The trainer's
# own NSA_COMM_TIMEOUT (60 s; gpu 300 s) stays later.
SCALE=0.2 STALL_S=$([ "$PROFILE" = gpu ] && echo 120 || echo 30)
t0=$(date +%s.%N)
"$H" run scenarios/ddp_onestep.json --profile "$PROFILE" --case "$CASE" --fault hang=1:2:backward --timeout-scale "$SCALE" \
  --out "$TMP/r" --quiet >"$TMP/out" 2>&1
rc=$?
wall=$(python3 -c "import time; print('%.1f' % (time.time() - $t0))")
check "a hang exits 1 (exit $rc, ${wall} s wall)" test "$rc" = 1
D="$TMP/r/$CASE"
check "every rank wrote its stack: rank 0 (waiting)" test -s "$D/stacks/rank_0.txt"
check "every rank wrote its stack: rank 1 (hung)" test -s "$D/stacks/rank_1.txt"
check "rank 0's dump shows the collective it waits in" grep -q "collectives enqueued .* completed .* (last: allreduce" "$D/stacks/rank_0.txt"
check "rank 1's stack names fault_hang" grep -q "fault_hang" "$D/stacks/rank_1.txt"
python3 - "$TMP/r/summary.json" "$STALL_S" "$SCALE" <<'PY' && ok "summary.json: the waiting rank, its collective and bucket, who never joined, latency" || bad "summary.json facts"
import json, sys
c = next(x for x in json.load(open(sys.argv[1]))["cases"] if x["case"].endswith(",ranks=2"))
f = c["facts"]
assert c["verdict"] == "HANG", c["verdict"]
assert f["hang_never_joined"] == [1] and f["hang_waiting_ranks"] == [0], f
assert f["hang_wait_collective"].startswith("allreduce b") and f["hang_wait_seq"] > 0, f
assert f["hang_bucket_params"] and all(isinstance(p, str) for p in f["hang_bucket_params"]), f
assert all(r["stack_dumped"] for r in c["ranks"]), c["ranks"]
stall_s = float(sys.argv[2]) * float(sys.argv[3])
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

# N ranks (4, then 8): ddp_onestep with world_size N, rank HUNG hangs in the backward of step 2,
# the others wait in its bucket's allreduce; the latency bound holds as for 2 ranks. Every
# rank's stack must be whole: with 4 processes on 2 cores the first rank to exit after its dump
# made mpirun kill the others mid-dump (two of four files were their header alone) until a
# stall dump waited for the other ranks' files to end theirs (trainer/stackdump.c).
ranks_case() {   # ranks_case N HUNG
  local n=$1 hung=$2 k
  if [ "$PROFILE" = gpu ] && [ "$ngpu" -lt "$n" ]; then
    echo "SKIP  $n ranks: the gpu profile wants a GPU a rank, $n; this machine shows $ngpu"; return
  fi
  python3 - scenarios/ddp_onestep.json "$TMP/dd$n.json" "$n" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1]))
n = int(sys.argv[3])
d["name"] = "ddp_onestep%d" % n
d["run"]["world_size"] = n
# the ranks axis: n ranks, and the one-rank reference with the batch of all n
d["matrix"]["ranks"] = {"values": {str(n): {"run.world_size": n}, "1": {"run.world_size": 1, "train.batch_size": 4 * n}}}
d["profiles"]["gpu"]["matrix"]["ranks"] = {"values": {str(n): {"run.world_size": n}, "1": {"run.world_size": 1, "train.batch_size": n}}}
here = os.path.dirname(os.path.abspath(sys.argv[1]))
d["config"] = os.path.join(here, d["config"])
d["profiles"]["gpu"]["config"] = os.path.join(here, d["profiles"]["gpu"]["config"])
d["profiles"]["gpu"]["requires"]["gpus"] = n
json.dump(d, open(sys.argv[2], "w"))
PY
  local C="ddp_onestep$n/transport=$TRANSPORT,mode=default,branch=none,ranks=$n" R="$TMP/r$n"
  "$H" run "$TMP/dd$n.json" --profile "$PROFILE" --case "$C" --fault "hang=$hung:2:backward" --timeout-scale "$SCALE" \
    --out "$R" --quiet >"$TMP/out$n" 2>&1
  local rc=$?
  check "$n ranks: a hang exits 1 (exit $rc)" test "$rc" = 1
  for k in $(seq 0 $((n - 1))); do
    check "$n ranks: rank $k's stack is whole (symbolized, ends its dump)" \
      bash -c "grep -q '^symbolized' '$R/$C/stacks/rank_$k.txt' && grep -q -- '--- end of stall dump' '$R/$C/stacks/rank_$k.txt'"
  done
  check "$n ranks: rank $hung's stack names fault_hang" grep -q "fault_hang" "$R/$C/stacks/rank_$hung.txt"
  python3 - "$R/summary.json" "$n" "$hung" "$STALL_S" "$SCALE" <<'PY' && ok "$n ranks: summary.json names rank $hung as the one that never joined, the others waiting, within stall_s + 5 s" || bad "$n ranks: summary.json facts"
import json, sys
n, hung, stall_s = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]) * float(sys.argv[5])
c = next(x for x in json.load(open(sys.argv[1]))["cases"] if x["case"].endswith(",ranks=%d" % n))
f = c["facts"]
assert c["verdict"] == "HANG", c["verdict"]
assert f["hang_never_joined"] == [hung] and f["hang_waiting_ranks"] == [k for k in range(n) if k != hung], f
assert len(c["ranks"]) == n and all(r["stack_dumped"] for r in c["ranks"]), c["ranks"]
assert f["hang_stall_to_verdict_s"] <= stall_s + 5.0, f
PY
  check "$n ranks: the verdict line names rank $hung, where it is, and $((n - 1)) waiting ranks" \
    grep -qE "\| \*\*HANG\*\* \| .* \| rank $hung never joined collective seq [0-9]+ \(allreduce b[0-9]+\): it is in backward of step 2, at fault_hang \(trainer/faults.c:[0-9]+\); $((n - 1)) ranks wait in it \|" \
    "$R/RESULTS.md"
  check "$n ranks: RESULTS.md lays the $n ranks side by side" \
    bash -c "for k in \$(seq 0 $((n - 1))); do [ \$k = $hung ] && continue; grep -q \"^| \$k | yes, stack written | comm · 2 \" '$R/RESULTS.md' || exit 1; done; grep -q '^| $hung | yes, stack written | backward · 2 ' '$R/RESULTS.md'"
  check "$n ranks: no process left" bash -c "! pgrep -f '[n]sa-train .*$R' >/dev/null"
}
ranks_case 4 2
ranks_case 8 5
finish
