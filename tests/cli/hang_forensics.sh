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
# same with 4 ranks (rank 2 hangs): every stack whole, rank 2 named, 0, 1, 3 waiting.
# SKIPs (77) without mpirun or an MPI build.
# On a GPU machine (bench/gpu_multi.sh runs it): HF_PROFILE=gpu HF_TRANSPORT=nccl
# runs the same checks on ddp_onestep's gpu profile (m7c_125m, the CUDA backend, one GPU a
# rank); the 4-rank part then needs 4 GPUs and SKIPs visibly with fewer.
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

# 4 ranks: ddp_onestep with world_size 4, rank 2 hangs in the backward of step 2,
# ranks 0, 1, 3 wait in its bucket's allreduce. Every rank's stack must be whole: with 4
# processes on 2 cores the first rank to exit after its dump made mpirun kill the others
# mid-dump (two of four files were their header alone) until a stall dump waited for the
# other ranks' files to end theirs (trainer/stackdump.c).
if [ "$PROFILE" = gpu ]; then
  if [ "$ngpu" -lt 4 ]; then echo "SKIP  4 ranks: the gpu profile wants a GPU a rank, 4; this machine shows $ngpu"; finish; fi
fi
python3 - scenarios/ddp_onestep.json "$TMP/dd4.json" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1]))
d["name"] = "ddp_onestep4"
d["run"]["world_size"] = 4
# the ranks axis: 4 ranks, and the one-rank reference with the batch of all four
d["matrix"]["ranks"] = {"values": {"4": {"run.world_size": 4}, "1": {"run.world_size": 1, "train.batch_size": 16}}}
d["profiles"]["gpu"]["matrix"]["ranks"] = {"values": {"4": {"run.world_size": 4}, "1": {"run.world_size": 1, "train.batch_size": 4}}}
here = os.path.dirname(os.path.abspath(sys.argv[1]))
d["config"] = os.path.join(here, d["config"])
d["profiles"]["gpu"]["config"] = os.path.join(here, d["profiles"]["gpu"]["config"])
d["profiles"]["gpu"]["requires"]["gpus"] = 4
json.dump(d, open(sys.argv[2], "w"))
PY
C4="ddp_onestep4/transport=$TRANSPORT,mode=default,branch=none,ranks=4"
"$H" run "$TMP/dd4.json" --profile "$PROFILE" --case "$C4" --fault hang=2:2:backward --timeout-scale "$SCALE" \
  --out "$TMP/r4" --quiet >"$TMP/out4" 2>&1
rc=$?
check "4 ranks: a hang exits 1 (exit $rc)" test "$rc" = 1
D4="$TMP/r4/$C4"
for k in 0 1 2 3; do
  check "4 ranks: rank $k's stack is whole (symbolized, ends its dump)" \
    bash -c "grep -q '^symbolized' '$D4/stacks/rank_$k.txt' && grep -q -- '--- end of stall dump' '$D4/stacks/rank_$k.txt'"
done
check "4 ranks: rank 2's stack names fault_hang" grep -q "fault_hang" "$D4/stacks/rank_2.txt"
python3 - "$TMP/r4/summary.json" <<'PY' && ok "4 ranks: summary.json names rank 2 as the one that never joined, 0, 1, 3 waiting" || bad "4 ranks: summary.json facts"
import json, sys
c = next(x for x in json.load(open(sys.argv[1]))["cases"] if x["case"].endswith(",ranks=4"))
f = c["facts"]
assert c["verdict"] == "HANG", c["verdict"]
assert f["hang_never_joined"] == [2] and f["hang_waiting_ranks"] == [0, 1, 3], f
assert len(c["ranks"]) == 4 and all(r["stack_dumped"] for r in c["ranks"]), c["ranks"]
PY
check "4 ranks: the verdict line names rank 2, where it is, and 3 waiting ranks" \
  grep -qE "\| \*\*HANG\*\* \| .* \| rank 2 never joined collective seq [0-9]+ \(allreduce b[0-9]+\): it is in backward of step 2, at fault_hang \(trainer/faults.c:[0-9]+\); 3 ranks wait in it \|" \
  "$TMP/r4/RESULTS.md"
check "4 ranks: RESULTS.md lays the four ranks side by side" \
  bash -c "for k in 0 1 3; do grep -q \"^| \$k | yes, stack written | comm · 2 \" '$TMP/r4/RESULTS.md' || exit 1; done; grep -q '^| 2 | yes, stack written | backward · 2 ' '$TMP/r4/RESULTS.md'"
check "4 ranks: no process left" bash -c "! pgrep -f '[n]sa-train .*$TMP/r4' >/dev/null"
finish
