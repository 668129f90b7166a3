#!/usr/bin/env bash
# tests/cli/ddp_mpi.sh — data parallel over MPI on the CPU, 2 ranks (4 in part 3) (docs/ddp.md):
#   1. usage: --transport bogus, nccl without NCCL, a --rank that contradicts MPI,
#      configs that differ across ranks (exit 2 naming the rank); --print-env "mpi"
#   2. every mode clean (default, find_unused, static_graph): exit 0; the same loss on
#      both ranks; metrics.jsonl by rank 0 only (world_size 2); grad traces: every
#      parameter arrived on both ranks; buckets.jsonl: every bucket launched, the same
#      coll_seq on both ranks; rank_times.jsonl; weights bitwise identical at the end
#   3. correctness: 2 ranks x batch 2 and 4 ranks x batch 1 == 1 rank x batch 4 (losses and
#      gradient norms within 1e-5 relative, step-1 dump gradients — under data parallel those
#      the optimizer consumed, not a replay — within 1e-5 of each tensor's max |g|;
#      fp32 sums over the parts of the batch are added in a different order, so not
#      bitwise); 1 rank under mpirun == --transport none, bitwise
#   4. divergent_unused=1, default mode, --comm-timeout 6 (as in 6.): exit 4 within the timeout,
#      [DDP] never-launched line, buckets.jsonl and [COMM-TIMEOUT] name rank 1, the
#      bucket and blocks.1.attn.gate.fc2.weight; no process left
#   5. divergent_unused=1 with find_unused: exit 0; with static_graph: exit 5 naming
#      rank 1 and the parameter; drop_grad (every rank) with find_unused: exit 0
#   6. hang=1:2:backward: rank 0 exits 4 naming the collective; rank 1 hangs until the
#      test's SIGUSR1, and its stack names fault_hang
#   7. hang=1:2:comm: SIGUSR1 to both ranks; rank 1's stack names fault_hang and
#      ddp_finish_backward, rank 0's the DDP wait it is in (ddp_comm_wait/ddp_ctrl_wait)
#   8. crash=1:2: rank 1 SIGSEGV (stack names fault_crash); Open MPI then kills rank 0
#      (mpirun exits 139); no process left
# SKIP (exit 77) when mpirun is missing or nsa-train was built without MPI.
# Usage: bash tests/cli/ddp_mpi.sh <build dir>  (from the repo root)
set -u
BUILD=${1:?usage: ddp_mpi.sh <build dir>}
BIN="$BUILD/nsa-train"
if [ ! -x "$BIN" ]; then echo "SKIP: $BIN is not built"; exit 77; fi
if ! command -v mpirun >/dev/null 2>&1; then echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; fi
MPI_LIB=$("$BIN" --print-env | python3 -c 'import json,sys; print(json.load(sys.stdin)["mpi"] or "")')
if [ -z "$MPI_LIB" ]; then echo "SKIP: $BIN was built without MPI (libopenmpi-dev at configure time)"; exit 77; fi
echo "MPI: $MPI_LIB"
HAVE_NCCL=$("$BIN" --print-env | python3 -c 'import json,sys; print(1 if json.load(sys.stdin)["nccl"] else 0)')
TMP=$(mktemp -d)
STARTED=()   # pids this script started in the background
cleanup() {
  for p in "${STARTED[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 0.5
  for p in "${STARTED[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
ulimit -c 0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1   # as root (containers, CI)
export OMPI_MCA_rmaps_base_oversubscribe=1
# one host, ranks as processes: no binding (fewer cores than ranks is fine), shared
# memory without CMA single-copy (ptrace is often restricted in containers)
MPIRUN=(mpirun --oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none)
# keep the other ranks alive when one exits non-zero (Open MPI's default kills them)
KEEP=(--mca orte_abort_on_non_zero_status 0)
pass=0; fail=0
ok()  { echo "PASS  $1"; pass=$((pass + 1)); }
bad() { echo "FAIL  $1"; fail=$((fail + 1)); }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }
T0=$SECONDS
TINY=(--config configs/tiny.json --threads 1 --set train.batch_size=2 --set train.bucket_mb=0.05)
PARAM=blocks.1.attn.gate.fc2.weight   # divergent_unused's default for the 2-layer tiny model
# per-case paths: OUT, per-rank logs / recorders / stacks
paths() { local o=$1; echo "--out $o --log-file $o/ranks/rank_%r.log --flight-recorder $o/ranks/rank_%r.fr --stack-file $o/stacks/rank_%r.txt"; }
# "exited exit_code fatal_signal phase step pid" of a recorder
fr_state() { "$BIN" --show-flight-recorder "$1" 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin); s = d["state"]
print(int(s["exited"]), s["exit_code"], s["fatal_signal"], s["phase"], s["step"], d["pid"], "%.1f" % s["heartbeat_age_s"])' 2>/dev/null; }
no_process_left() { ! pgrep -f -- "[n]sa-train.*$1" >/dev/null; }
show_logs() { for f in "$1"/ranks/rank_*.log; do [ -f "$f" ] && sed "s|^|    $(basename "$f"): |" "$f" | tail -"${2:-8}"; done; }

# ---- 1. usage --------------------------------------------------------------------------------
"$BIN" --config configs/tiny.json --transport bogus >"$TMP/o" 2>&1; rc=$?
check "--transport bogus: exit 2 ($rc)" [ $rc = 2 ]
if [ "$HAVE_NCCL" = 0 ]; then
  "$BIN" --config configs/tiny.json --transport nccl >"$TMP/o" 2>&1; rc=$?
  check "--transport nccl without NCCL in the build: exit 2 ($rc), says why" \
    bash -c "[ $rc = 2 ] && grep -q 'no NCCL support' '$TMP/o'"
fi
timeout -k 5 60 "${MPIRUN[@]}" -np 1 "$BIN" "${TINY[@]}" --steps 1 --transport mpi --rank 5 --out "$TMP/r5" >"$TMP/o" 2>&1; rc=$?
check "--rank 5 under MPI rank 0: exit 2 ($rc), names both" bash -c "[ $rc = 2 ] && grep -q -- '--rank 5 conflicts with the MPI rank 0' '$TMP/o'"
timeout -k 5 60 "${MPIRUN[@]}" -np 1 "$BIN" "${TINY[@]}" --steps 1 --transport mpi --out "$TMP/mm" : \
  -np 1 "$BIN" "${TINY[@]}" --steps 1 --transport mpi --out "$TMP/mm" --set train.lr=0.01 >"$TMP/o" 2>&1; rc=$?
check "configs that differ across ranks: exit 2 ($rc), names rank 1" \
  bash -c "[ $rc = 2 ] && grep -q \"rank 1's config or bucket layout differs from rank 0's\" '$TMP/o'"

# ---- 2. every mode, clean ------------------------------------------------------------------
for mode in default find_unused static_graph; do
  o="$TMP/clean_$mode"
  extra=()
  [ $mode = default ] && extra=(--dump-step "$o/step1.safetensors")
  timeout -k 5 120 "${MPIRUN[@]}" -np 2 "$BIN" "${TINY[@]}" --steps 3 --set train.ddp_mode=$mode --transport mpi \
    $(paths "$o") --trace-grads --comm-timeout 60 "${extra[@]}" >"$o.mpirun" 2>&1; rc=$?
  if [ $rc != 0 ]; then bad "$mode: 2 ranks clean: exit $rc"; show_logs "$o"; continue; fi
  ok "$mode: 2 ranks, 3 steps: exit 0"
  check "$mode: clean run: losses equal on both ranks, traces complete and consistent" python3 - "$o" "$mode" <<'PY'
import json, re, sys
o, mode = sys.argv[1], sys.argv[2]
def losses(r):
    return [l.split("| loss ")[1].split()[0] for l in open(f"{o}/ranks/rank_{r}.log") if l.startswith("step ")]
l0, l1 = losses(0), losses(1)
assert len(l0) == 3 and l0 == l1, (l0, l1)
m = [json.loads(l) for l in open(f"{o}/metrics.jsonl")]
assert len(m) == 3 and all(x["world_size"] == 2 and "comm_wait_ms" in x for x in m), m
assert ["%.6f" % x["loss"] for x in m] == l0
gt = [json.loads(l) for l in open(f"{o}/grad_trace.jsonl")]
assert sorted((g["step"], g["rank"]) for g in gt) == [(s, r) for s in (1, 2, 3) for r in (0, 1)]
assert all(g["missing"] == [] and g["arrived"] == g["n_params"] for g in gt), [g["missing"] for g in gt]
bk = [json.loads(l) for l in open(f"{o}/buckets.jsonl")]
nb = 1 + max(b["bucket"] for b in bk)
assert nb > 3 and len(bk) == 3 * 2 * nb, (nb, len(bk))
assert all(b["launched"] and b["complete_ms"] is not None and b["missing"] == [] for b in bk)
seq = {}
for b in bk:
    seq.setdefault((b["step"], b["bucket"]), set()).add(b["coll_seq"])
assert all(len(v) == 1 for v in seq.values()), "coll_seq differs across ranks"
names = [p for b in bk if b["step"] == 1 and b["rank"] == 0 for p in b["params"]]
assert names[0] == "lm_head.weight" and names[-1] == "tok_emb.weight" and len(set(names)) == len(names)
rt = [json.loads(l) for l in open(f"{o}/rank_times.jsonl")]
assert sorted((x["step"], x["rank"]) for x in rt) == [(s, r) for s in (1, 2, 3) for r in (0, 1)]
assert all(x["compute_ms"] > 0 and x["comm_wait_ms"] >= 0 for x in rt)
log0 = open(f"{o}/ranks/rank_0.log").read()
assert "[DDP] weights after step 3 are bitwise identical on all 2 ranks" in log0
assert f"mode {mode}:" in log0
PY
  check "$mode: both recorders exited 0 with the same collective count" python3 - "$BIN" "$o" <<'PY'
import json, subprocess, sys
st = [json.loads(subprocess.run([sys.argv[1], "--show-flight-recorder", f"{sys.argv[2]}/ranks/rank_{r}.fr"],
                                capture_output=True, text=True).stdout)["state"] for r in (0, 1)]
assert all(s["exited"] and s["exit_code"] == 0 for s in st), st
assert st[0]["coll_completed"] == st[1]["coll_completed"] == st[0]["coll_enqueued"] > 0, st
PY
done

# ---- 3. correctness: 2 ranks x B == 1 rank x 2B ----------------------------------------------
"$BIN" --config configs/tiny.json --threads 1 --set train.batch_size=4 --steps 3 --out "$TMP/one" \
  --dump-step "$TMP/one/step1.safetensors" --quiet >"$TMP/one.out" 2>&1 || bad "1 rank, batch 4: exit $?"
# the same 3 steps as run A (1 rank) and run B (data parallel): losses and step-1 gradients
same_training() {
  python3 - "$1" "$2" <<'PY'
import json, subprocess, sys
a, b = sys.argv[1], sys.argv[2]
la = [json.loads(l)["loss"] for l in open(f"{a}/metrics.jsonl")]
lb = [json.loads(l)["loss"] for l in open(f"{b}/metrics.jsonl")]
assert len(la) == len(lb) == 3
for x, y in zip(la, lb):
    assert abs(x - y) <= 1e-5 * abs(x), (la, lb)
# the gradient norm too: AdamW hides a uniform scale of the gradients from the losses
ga = [json.loads(l)["grad_norm"] for l in open(f"{a}/metrics.jsonl")]
gb = [json.loads(l)["grad_norm"] for l in open(f"{b}/metrics.jsonl")]
for x, y in zip(ga, gb):
    assert abs(x - y) <= 1e-5 * abs(x), (ga, gb)
def dump(p):
    j = json.loads(subprocess.run([sys.executable, "tools/st_dump.py", "--json", "-n", "-1", p],
                                  capture_output=True, text=True, check=True).stdout)
    return {t["name"]: t["values"] for t in j["tensors"]}, j["metadata"]
ta, ma = dump(f"{a}/step1.safetensors")
tb, mb = dump(f"{b}/step1.safetensors")
assert abs(float(ma["loss"]) - float(mb["loss"])) <= 1e-6 * abs(float(ma["loss"])), (ma["loss"], mb["loss"])
worst, bitwise, n = 0.0, 0, 0
for k, va in ta.items():
    if not k.startswith("grads."):
        continue
    vb = tb[k]
    mx = max(abs(v) for v in va) or 1.0
    d = max(abs(x - y) for x, y in zip(va, vb))
    worst = max(worst, d / mx); bitwise += va == vb; n += 1
assert n > 30 and worst <= 1e-5, (worst, n)
print(f"    {n} gradient tensors: {bitwise} bitwise equal, worst |diff|/max|g| = {worst:.2e}; "
      f"losses {la} vs {lb}")
PY
}
check "2 ranks x batch 2 == 1 rank x batch 4: losses, grad norms (rel 1e-5) and step-1 gradients (1e-5 of max|g|)" \
  same_training "$TMP/one" "$TMP/clean_default"
# 4 ranks (nothing had run on more than 2): 4 x batch 1, oversubscribed on 2 cores
timeout -k 5 120 "${MPIRUN[@]}" -np 4 "$BIN" --config configs/tiny.json --threads 1 --set train.batch_size=1 \
  --set train.bucket_mb=0.05 --steps 3 --transport mpi --out "$TMP/four" --dump-step "$TMP/four/step1.safetensors" \
  --quiet >"$TMP/four.out" 2>&1; rc=$?
check "4 ranks x batch 1: exit 0 (exit $rc)" test "$rc" = 0
check "4 ranks x batch 1 == 1 rank x batch 4: losses, grad norms (rel 1e-5) and step-1 gradients (1e-5 of max|g|)" \
  same_training "$TMP/one" "$TMP/four"
timeout -k 5 60 "${MPIRUN[@]}" -np 1 "$BIN" --config configs/tiny.json --threads 1 --set train.batch_size=4 --steps 3 \
  --transport mpi --out "$TMP/w1" --quiet >"$TMP/w1.out" 2>&1; rc=$?
check "1 rank under mpirun (--transport mpi) == --transport none, bitwise losses (exit $rc)" \
  bash -c "[ $rc = 0 ] && diff <(sed 's/, \"grad_norm.*//' '$TMP/one/metrics.jsonl') <(sed 's/, \"grad_norm.*//' '$TMP/w1/metrics.jsonl')"

# ---- 4. divergent_unused=1, default mode: a hang, reported -----------------------------------
o="$TMP/div_default"
t=$SECONDS
timeout -k 5 120 "${MPIRUN[@]}" -np 2 "$BIN" "${TINY[@]}" --steps 3 --transport mpi $(paths "$o") --trace-grads \
  --comm-timeout 6 --fault divergent_unused=1 >"$o.mpirun" 2>&1; rc=$?
el=$((SECONDS - t))
check "divergent_unused=1 default: exit 4 ($rc) within the timeout (${el} s)" [ $rc = 4 -a $el -lt 40 ]
check "divergent_unused=1 default: rank 1 says which bucket it never launched, and why" \
  grep -qE "^\[DDP\] step=1 rank=1 bucket=[0-9]+ never launched: missing $PARAM\$" "$o/ranks/rank_1.log"
check "divergent_unused=1 default: [COMM-TIMEOUT] names the collective, the bucket and $PARAM" \
  bash -c "cat '$o'/ranks/rank_*.log | grep -qE '^\[COMM-TIMEOUT\] rank [01]: collective seq [0-9]+ \(bucket [0-9]+: .*$PARAM.*\) not complete after 6 s'"
check "divergent_unused=1 default: buckets.jsonl: rank 1's bucket launched false, missing [$PARAM]" \
  python3 - "$o" "$PARAM" <<'PY'
import json, sys
bk = [json.loads(l) for l in open(f"{sys.argv[1]}/buckets.jsonl")]
r1 = [b for b in bk if b["rank"] == 1 and b["step"] == 1]
miss = [b for b in r1 if b["missing"]]
assert len(miss) == 1 and miss[0]["missing"] == [sys.argv[2]] and not miss[0]["launched"], miss
assert miss[0]["coll_seq"] is None and sys.argv[2] in miss[0]["params"]
k = miss[0]["bucket"]
assert all(b["launched"] for b in r1 if b["bucket"] < k) and not any(b["launched"] for b in r1 if b["bucket"] > k)
PY
check "divergent_unused=1 default: the grad trace of rank 1 misses $PARAM, rank 0's misses nothing" python3 - "$o" "$PARAM" <<'PY'
import json, sys
gt = {g["rank"]: g for g in map(json.loads, open(f"{sys.argv[1]}/grad_trace.jsonl")) if g["step"] == 1}
assert gt[1]["missing"] == [sys.argv[2]] and gt[0]["missing"] == [], gt
PY
check "divergent_unused=1 default: no process left" no_process_left "$o/ranks"

# ---- 5. divergent_unused=1 with find_unused / static_graph ------------------------------------
o="$TMP/div_find"
timeout -k 5 120 "${MPIRUN[@]}" -np 2 "$BIN" "${TINY[@]}" --steps 3 --set train.ddp_mode=find_unused --transport mpi \
  $(paths "$o") --comm-timeout 30 --fault divergent_unused=1 >"$o.mpirun" 2>&1; rc=$?
check "divergent_unused=1 find_unused: exit 0 ($rc), weights identical" \
  bash -c "[ $rc = 0 ] && grep -q 'bitwise identical on all 2 ranks' '$o/ranks/rank_0.log'"
o="$TMP/div_static"
timeout -k 5 120 "${MPIRUN[@]}" -np 2 "$BIN" "${TINY[@]}" --steps 3 --set train.ddp_mode=static_graph --transport mpi \
  $(paths "$o") --comm-timeout 30 --fault divergent_unused=1 >"$o.mpirun" 2>&1; rc=$?
check "divergent_unused=1 static_graph: exit 5 ($rc) naming rank 1 and $PARAM" \
  bash -c "[ $rc = 5 ] && cat '$o'/ranks/rank_*.log | grep -q 'static_graph: step 1: $PARAM received a gradient on rank(s) 0 but not on rank(s) 1'"
check "divergent_unused=1 static_graph: no process left" no_process_left "$o/ranks"

o="$TMP/drop_find"
timeout -k 5 120 "${MPIRUN[@]}" -np 2 "$BIN" "${TINY[@]}" --steps 2 --set train.ddp_mode=find_unused --transport mpi \
  $(paths "$o") --trace-grads --comm-timeout 30 --fault drop_grad=blocks.0.mlp.up_proj.weight >"$o.mpirun" 2>&1; rc=$?
check "drop_grad (every rank) with find_unused: exit 0 ($rc), both ranks' traces miss it" \
  bash -c "[ $rc = 0 ] && [ \$(grep -c '\"missing\":\[\"blocks.0.mlp.up_proj.weight\"\]' '$o/grad_trace.jsonl') = 4 ]"

# ---- 6. hang=1:2:backward: rank 0 times out, rank 1 hangs until SIGUSR1 ------------------------
o="$TMP/hang_bwd"
"${MPIRUN[@]}" "${KEEP[@]}" -np 2 "$BIN" "${TINY[@]}" --steps 3 --transport mpi $(paths "$o") --comm-timeout 6 \
  --fault hang=1:2:backward >"$o.mpirun" 2>&1 &
MP=$!; STARTED+=("$MP")
s0=""; s1=""
for i in $(seq 1 300); do   # up to 30 s: rank 0 exits 4 after its 6 s timeout
  s0=$(fr_state "$o/ranks/rank_0.fr"); s1=$(fr_state "$o/ranks/rank_1.fr")
  set -- $s0; [ "${1:-0}" = 1 ] && break
  sleep 0.1
done
check "hang=1:2:backward: rank 0 exited 4 on its own ($s0)" bash -c "set -- $s0; [ \"\$1\" = 1 -a \"\$2\" = 4 ]"
check "hang=1:2:backward: rank 0 names the collective it waited for" \
  grep -qE '^\[COMM-TIMEOUT\] rank 0: collective seq [0-9]+ \(bucket 0: lm_head.weight\) not complete after 6 s' "$o/ranks/rank_0.log"
set -- $s1
check "hang=1:2:backward: rank 1 still hung in backward of step 2, heartbeat stopped ($s1)" \
  bash -c "[ '$1' = 0 -a '$4' = backward -a '$5' = 2 ] && kill -0 $6"
[ -n "${6:-}" ] && kill -USR1 "$6"
for i in $(seq 1 200); do kill -0 $MP 2>/dev/null || break; sleep 0.1; done
check "hang=1:2:backward: SIGUSR1 -> rank 1's stack names fault_hang" grep -q "fault_hang at" "$o/stacks/rank_1.txt"
s1=$(fr_state "$o/ranks/rank_1.fr")
check "hang=1:2:backward: rank 1's recorder: fatal_signal 10 ($s1)" bash -c "set -- $s1; [ \"\$3\" = 10 ]"
check "hang=1:2:backward: mpirun ended" bash -c "! kill -0 $MP 2>/dev/null"
check "hang=1:2:backward: no process left" no_process_left "$o/ranks"

# ---- 7. hang=1:2:comm: stall dumps of both ranks name the DDP wait ------------------------------
o="$TMP/hang_comm"
"${MPIRUN[@]}" "${KEEP[@]}" -np 2 "$BIN" "${TINY[@]}" --steps 3 --transport mpi $(paths "$o") --comm-timeout 60 \
  --fault hang=1:2:comm >"$o.mpirun" 2>&1 &
MP=$!; STARTED+=("$MP")
for i in $(seq 1 300); do   # both heartbeats stale for 1.5 s, rank 1 in phase comm
  s0=$(fr_state "$o/ranks/rank_0.fr"); s1=$(fr_state "$o/ranks/rank_1.fr")
  python3 -c "import sys; a, b = sys.argv[1].split(), sys.argv[2].split(); sys.exit(0 if len(a) == 7 and len(b) == 7 and b[3] == 'comm' and b[4] == '2' and float(a[6]) > 1.5 and float(b[6]) > 1.5 else 1)" "$s0" "$s1" && break
  sleep 0.1
done
set -- $s0; p0=${6:-}; set -- $s1; p1=${6:-}
check "hang=1:2:comm: both ranks stalled, rank 1 in phase comm of step 2 ($s0 / $s1)" [ -n "$p0" -a -n "$p1" ]
[ -n "$p0" ] && kill -USR1 "$p0"; [ -n "$p1" ] && kill -USR1 "$p1"
for i in $(seq 1 200); do kill -0 $MP 2>/dev/null || break; sleep 0.1; done
check "hang=1:2:comm: rank 1's stack names fault_hang inside ddp_finish_backward" \
  bash -c "grep -q 'fault_hang at' '$o/stacks/rank_1.txt' && grep -q 'ddp_finish_backward at' '$o/stacks/rank_1.txt'"
check "hang=1:2:comm: rank 0's stack names the DDP wait ($(grep -oE 'ddp_(comm|ctrl)_wait' "$o/stacks/rank_0.txt" 2>/dev/null | head -1))" \
  grep -qE 'ddp_(comm|ctrl)_wait at' "$o/stacks/rank_0.txt"
check "hang=1:2:comm: mpirun ended" bash -c "! kill -0 $MP 2>/dev/null"
check "hang=1:2:comm: no process left" no_process_left "$o/ranks"

# ---- 8. crash=1:2 --------------------------------------------------------------------------
o="$TMP/crash"
timeout -k 5 120 "${MPIRUN[@]}" -np 2 "$BIN" "${TINY[@]}" --steps 3 --transport mpi $(paths "$o") --comm-timeout 30 \
  --fault crash=1:2 >"$o.mpirun" 2>&1; rc=$?
check "crash=1:2: mpirun exits 139 (rank 1's SIGSEGV; Open MPI then kills rank 0) ($rc)" [ $rc = 139 ]
check "crash=1:2: rank 1's crash dump names fault_crash" grep -q "fault_crash at" "$o/stacks/rank_1.txt"
s1=$(fr_state "$o/ranks/rank_1.fr"); s0=$(fr_state "$o/ranks/rank_0.fr")
check "crash=1:2: rank 1's recorder: fatal_signal 11; rank 0 stopped in step 2 ($s1 / $s0)" \
  bash -c "set -- $s1; [ \"\$3\" = 11 ] && set -- $s0 && [ \"\$5\" = 2 ]"
check "crash=1:2: no process left" no_process_left "$o/ranks"

echo "ddp_mpi: $pass passed, $fail failed ($((SECONDS - T0)) s)"
[ $fail = 0 ]
