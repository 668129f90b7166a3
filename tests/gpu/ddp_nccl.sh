#!/usr/bin/env bash
# tests/gpu/ddp_nccl.sh BUILD_DIR [--bench] — data parallel over NCCL on 2 GPUs (docs/ddp.md).
#
# Two ranks via mpirun, --transport nccl, the CUDA backend, tiny config (12 buckets):
#   1. every mode clean (default, find_unused, static_graph): exit 0, the same losses on
#      both ranks, every bucket launched with the same coll_seq on both ranks, weights
#      bitwise identical at the end, recorders exited 0
#   2. A/B: the same run over --transport mpi (host staging) gives the same losses (fp32)
#   3. correctness: 2 ranks x batch 2 == 1 rank x batch 4 (fp32: losses rel 1e-4, step-1
#      dump gradients 1e-4 of each tensor's max |g|); 1 rank under mpirun over nccl ==
#      --transport none, bitwise
#   4. divergent_unused=1: default -> exit 4 within the timeout naming rank 1, the bucket
#      and the parameter, no process left; find_unused -> exit 0; static_graph -> exit 5
#   5. drop_grad on every rank: default -> exit 4 on every rank; find_unused -> exit 0
#   6. hang=1:2:backward: rank 0's NCCL wait times out (ncclCommAbort, exit 4); rank 1 is
#      hung until SIGUSR1, its stack names fault_hang
#   7. crash=1:2: rank 1 SIGSEGV names fault_crash; mpirun ends, no process left
#   8. with --bench: m7c_125m tok/s on 1 GPU vs 2 GPUs (NCCL) and the scaling efficiency
# Prints PASS/FAIL per check and a summary; exit 0 when all pass. SKIP (77) without 2
# usable GPUs, NCCL in the build, or mpirun.
#
# On the 2-GPU machine, from the repo root:
#   cmake -S . -B build && cmake --build build -j && bash tests/gpu/ddp_nccl.sh build --bench
set -u
BUILD=${1:?usage: ddp_nccl.sh BUILD_DIR [--bench]}
BENCH=0; [ "${2:-}" = --bench ] && BENCH=1
BIN="$BUILD/nsa-train"
if [ ! -x "$BIN" ]; then echo "SKIP: $BIN is not built"; exit 77; fi
if ! command -v mpirun >/dev/null 2>&1; then echo "SKIP: mpirun not found"; exit 77; fi
read -r NGPU HAVE_NCCL _ < <("$BIN" --print-env | python3 -c '
import json, sys
e = json.load(sys.stdin)
print(len((e.get("cuda") or {}).get("devices") or []), 1 if e["nccl"] else 0, 1 if e["mpi"] else 0)')
if [ "$HAVE_NCCL" != 1 ]; then echo "SKIP: $BIN was built without NCCL (needs CUDA, MPI and nccl.h/libnccl at configure time)"; exit 77; fi
if [ "${NGPU:-0}" -lt 2 ]; then echo "SKIP: needs 2 usable GPUs, found ${NGPU:-0}"; exit 77; fi
"$BIN" --print-env | python3 -c 'import json,sys; e=json.load(sys.stdin); print("NCCL", e["nccl"], "|", e["mpi"]); [print("  GPU", d["index"], d["name"], d["uuid"]) for d in e["cuda"]["devices"]]'
TMP=$(mktemp -d)
STARTED=()
cleanup() {
  for p in "${STARTED[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 0.5
  for p in "${STARTED[@]}"; do kill -KILL "$p" 2>/dev/null; done
  [ "${KEEP_TMP:-0}" = 1 ] && echo "kept $TMP" || rm -rf "$TMP"
}
trap cleanup EXIT
ulimit -c 0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_NVLS_ENABLE=0          # no NVLink multicast (shared hosts: see the device docs)
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
MPIRUN=(mpirun --oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none
        -x NCCL_NVLS_ENABLE -x NCCL_DEBUG -x PATH -x LD_LIBRARY_PATH)
KEEP=(--mca orte_abort_on_non_zero_status 0)
pass=0; fail=0
ok()  { echo "PASS  $1"; pass=$((pass + 1)); }
bad() { echo "FAIL  $1"; fail=$((fail + 1)); }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }
T0=$SECONDS
TINY=(--config configs/tiny.json --backend cuda --set train.batch_size=2 --set train.bucket_mb=0.05)
PARAM=blocks.1.attn.gate.fc2.weight
paths() { local o=$1; echo "--out $o --log-file $o/ranks/rank_%r.log --flight-recorder $o/ranks/rank_%r.fr --stack-file $o/stacks/rank_%r.txt"; }
fr_state() { "$BIN" --show-flight-recorder "$1" 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin); s = d["state"]
print(int(s["exited"]), s["exit_code"], s["fatal_signal"], s["phase"], s["step"], d["pid"], "%.1f" % s["heartbeat_age_s"])' 2>/dev/null; }
no_process_left() { ! pgrep -f -- "[n]sa-train.*$1" >/dev/null; }
show_logs() { for f in "$1"/ranks/rank_*.log; do [ -f "$f" ] && sed "s|^|    $(basename "$f"): |" "$f" | tail -"${2:-6}"; done; }
losses() { python3 -c 'import json,sys; print(" ".join("%.9g" % json.loads(l)["loss"] for l in open(sys.argv[1])))' "$1/metrics.jsonl" 2>/dev/null; }

# ---- 1. every mode, clean ----------------------------------------------------------------
for mode in default find_unused static_graph; do
  o="$TMP/clean_$mode"
  timeout -k 5 300 "${MPIRUN[@]}" -np 2 "$BIN" "${TINY[@]}" --steps 5 --set train.ddp_mode=$mode --transport nccl \
    $(paths "$o") --trace-grads --comm-timeout 120 >"$o.mpirun" 2>&1; rc=$?
  if [ $rc != 0 ]; then bad "nccl $mode: 2 ranks clean: exit $rc"; show_logs "$o"; tail -5 "$o.mpirun"; continue; fi
  ok "nccl $mode: 2 ranks, 5 steps: exit 0 (losses $(losses "$o"))"
  check "nccl $mode: same losses on both ranks, all buckets launched with the same seq, weights identical" \
    python3 - "$o" "$BIN" <<'PY'
import json, subprocess, sys
o, b = sys.argv[1], sys.argv[2]
def losses(r):
    return [l.split("| loss ")[1].split()[0] for l in open(f"{o}/ranks/rank_{r}.log") if l.startswith("step ")]
assert len(losses(0)) == 5 and losses(0) == losses(1)
bk = [json.loads(l) for l in open(f"{o}/buckets.jsonl")]
assert bk and all(x["launched"] and x["complete_ms"] is not None and not x["missing"] for x in bk)
seq = {}
for x in bk:
    seq.setdefault((x["step"], x["bucket"]), set()).add(x["coll_seq"])
assert all(len(v) == 1 for v in seq.values())
gt = [json.loads(l) for l in open(f"{o}/grad_trace.jsonl")]
assert len(gt) == 10 and all(g["missing"] == [] for g in gt)
assert "bitwise identical on all 2 ranks" in open(f"{o}/ranks/rank_0.log").read()
for r in (0, 1):
    s = json.loads(subprocess.run([b, "--show-flight-recorder", f"{o}/ranks/rank_{r}.fr"], capture_output=True,
                                  text=True).stdout)["state"]
    assert s["exited"] and s["exit_code"] == 0 and s["coll_completed"] == s["coll_enqueued"], s
rt = [json.loads(l) for l in open(f"{o}/rank_times.jsonl")]
print("    comm wait ms per step (rank 0):", [x["comm_wait_ms"] for x in rt if x["rank"] == 0])
PY
done

# ---- 2. A/B: nccl vs mpi on the same GPUs, fp32 -------------------------------------------
for t in nccl mpi; do
  timeout -k 5 300 "${MPIRUN[@]}" -np 2 "$BIN" "${TINY[@]}" --set train.precision=fp32 --steps 5 --transport $t \
    $(paths "$TMP/ab_$t") --comm-timeout 120 --dump-step "$TMP/ab_$t/step1.safetensors" >"$TMP/ab_$t.mpirun" 2>&1 \
    || { bad "A/B: fp32 over $t: exit $?"; show_logs "$TMP/ab_$t"; }
done
check "A/B: nccl and mpi give the same losses (fp32, rel 1e-6): $(losses "$TMP/ab_nccl") | $(losses "$TMP/ab_mpi")" \
  python3 - "$TMP/ab_nccl" "$TMP/ab_mpi" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f"{d}/metrics.jsonl")] for d in sys.argv[1:3])
assert len(a) == len(b) == 5 and all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(a, b)), (a, b)
PY

# ---- 3. correctness: 2 ranks x batch 2 == 1 rank x batch 4 (fp32) --------------------------
"$BIN" --config configs/tiny.json --backend cuda --set train.precision=fp32 --set train.batch_size=4 --steps 5 \
  --out "$TMP/one" --dump-step "$TMP/one/step1.safetensors" --quiet >"$TMP/one.out" 2>&1 || bad "1 rank fp32 batch 4: exit $?"
check "2 GPUs x batch 2 == 1 GPU x batch 4 (fp32): losses rel 1e-4, step-1 gradients 1e-4 of max|g|" \
  python3 - "$TMP/one" "$TMP/ab_nccl" <<'PY'
import json, subprocess, sys
a, b = sys.argv[1], sys.argv[2]
la = [json.loads(l)["loss"] for l in open(f"{a}/metrics.jsonl")]
lb = [json.loads(l)["loss"] for l in open(f"{b}/metrics.jsonl")]
assert len(la) == len(lb) == 5 and all(abs(x - y) <= 1e-4 * abs(x) for x, y in zip(la, lb)), (la, lb)
def dump(p):
    j = json.loads(subprocess.run([sys.executable, "tools/st_dump.py", "--json", "-n", "-1", p],
                                  capture_output=True, text=True, check=True).stdout)
    return {t["name"]: t["values"] for t in j["tensors"]}
ta, tb = dump(f"{a}/step1.safetensors"), dump(f"{b}/step1.safetensors")
worst, bit, n = 0.0, 0, 0
for k, va in ta.items():
    if k.startswith("grads."):
        vb = tb[k]; mx = max(abs(v) for v in va) or 1.0
        worst = max(worst, max(abs(x - y) for x, y in zip(va, vb)) / mx); bit += va == vb; n += 1
print(f"    {n} gradient tensors: {bit} bitwise, worst |diff|/max|g| {worst:.2e}; losses {la} vs {lb}")
assert worst <= 1e-4
PY

timeout -k 5 300 "${MPIRUN[@]}" -np 1 "$BIN" --config configs/tiny.json --backend cuda --set train.precision=fp32 \
  --set train.batch_size=4 --steps 5 --transport nccl --out "$TMP/w1" --quiet >"$TMP/w1.out" 2>&1; rc=$?
check "1 rank under mpirun --transport nccl == --transport none, bitwise losses (exit $rc)" \
  bash -c "[ $rc = 0 ] && diff <(sed 's/, \"grad_norm.*//' '$TMP/one/metrics.jsonl') <(sed 's/, \"grad_norm.*//' '$TMP/w1/metrics.jsonl')"

# ---- 4. divergent_unused=1 ------------------------------------------------------------------
o="$TMP/div_default"; t=$SECONDS
timeout -k 5 300 "${MPIRUN[@]}" -np 2 "$BIN" "${TINY[@]}" --steps 3 --transport nccl $(paths "$o") --comm-timeout 20 \
  --fault divergent_unused=1 >"$o.mpirun" 2>&1; rc=$?; el=$((SECONDS - t))
check "divergent_unused=1 default: exit 4 ($rc) within the timeout (${el} s)" [ $rc = 4 -a $el -lt 80 ]
check "divergent_unused=1 default: rank 1: [DDP] bucket never launched: missing $PARAM" \
  grep -qE "^\[DDP\] step=1 rank=1 bucket=[0-9]+ never launched: missing $PARAM\$" "$o/ranks/rank_1.log"
check "divergent_unused=1 default: [COMM-TIMEOUT] names the collective, bucket and $PARAM" \
  bash -c "cat '$o'/ranks/rank_*.log | grep -qE '^\[COMM-TIMEOUT\] rank [01]: collective seq [0-9]+ \(bucket [0-9]+: .*$PARAM.*\) not complete after 20 s'"
check "divergent_unused=1 default: buckets.jsonl: rank 1's bucket not launched, missing [$PARAM]" \
  python3 -c "
import json, sys
bk = [json.loads(l) for l in open('$o/buckets.jsonl')]
m = [b for b in bk if b['rank'] == 1 and b['missing']]
assert len(m) == 1 and m[0]['missing'] == ['$PARAM'] and not m[0]['launched'], m"
check "divergent_unused=1 default: no process left" no_process_left "$o/ranks"
o="$TMP/div_find"
timeout -k 5 300 "${MPIRUN[@]}" -np 2 "$BIN" "${TINY[@]}" --steps 3 --set train.ddp_mode=find_unused --transport nccl \
  $(paths "$o") --comm-timeout 60 --fault divergent_unused=1 >"$o.mpirun" 2>&1; rc=$?
check "divergent_unused=1 find_unused: exit 0 ($rc)" [ $rc = 0 ]
o="$TMP/div_static"
timeout -k 5 300 "${MPIRUN[@]}" -np 2 "$BIN" "${TINY[@]}" --steps 3 --set train.ddp_mode=static_graph --transport nccl \
  $(paths "$o") --comm-timeout 60 --fault divergent_unused=1 >"$o.mpirun" 2>&1; rc=$?
check "divergent_unused=1 static_graph: exit 5 ($rc) naming rank 1 and $PARAM" \
  bash -c "[ $rc = 5 ] && cat '$o'/ranks/rank_*.log | grep -q '$PARAM received a gradient on rank(s) 0 but not on rank(s) 1'"

# ---- 5. drop_grad on every rank ---------------------------------------------------------------
o="$TMP/drop_default"
"${MPIRUN[@]}" "${KEEP[@]}" -np 2 "$BIN" "${TINY[@]}" --steps 2 --transport nccl $(paths "$o") --comm-timeout 15 \
  --fault drop_grad=blocks.0.mlp.up_proj.weight >"$o.mpirun" 2>&1 &
MP=$!; STARTED+=("$MP")
for i in $(seq 1 900); do kill -0 $MP 2>/dev/null || break; sleep 0.1; done
s0=$(fr_state "$o/ranks/rank_0.fr"); s1=$(fr_state "$o/ranks/rank_1.fr")
check "drop_grad (every rank), default: both ranks exit 4 ($s0 / $s1)" \
  bash -c "set -- $s0; [ \"\$2\" = 4 ] && set -- $s1 && [ \"\$2\" = 4 ]"
o="$TMP/drop_find"
timeout -k 5 300 "${MPIRUN[@]}" -np 2 "$BIN" "${TINY[@]}" --steps 2 --set train.ddp_mode=find_unused --transport nccl \
  $(paths "$o") --comm-timeout 60 --fault drop_grad=blocks.0.mlp.up_proj.weight >"$o.mpirun" 2>&1; rc=$?
check "drop_grad (every rank), find_unused: exit 0 ($rc)" [ $rc = 0 ]

# ---- 6. hang=1:2:backward ---------------------------------------------------------------------
o="$TMP/hang_bwd"
"${MPIRUN[@]}" "${KEEP[@]}" -np 2 "$BIN" "${TINY[@]}" --steps 3 --transport nccl $(paths "$o") --comm-timeout 10 \
  --fault hang=1:2:backward >"$o.mpirun" 2>&1 &
MP=$!; STARTED+=("$MP")
s0=""; s1=""
for i in $(seq 1 900); do
  s0=$(fr_state "$o/ranks/rank_0.fr"); s1=$(fr_state "$o/ranks/rank_1.fr")
  set -- $s0; [ "${1:-0}" = 1 ] && break
  sleep 0.1
done
check "hang=1:2:backward: rank 0 exited 4 after its NCCL wait timed out ($s0)" bash -c "set -- $s0; [ \"\$1\" = 1 -a \"\$2\" = 4 ]"
check "hang=1:2:backward: rank 0 names the collective" \
  grep -qE '^\[COMM-TIMEOUT\] rank 0: collective seq [0-9]+ \(bucket 0: lm_head.weight\) not complete after 10 s' "$o/ranks/rank_0.log"
set -- $s1
check "hang=1:2:backward: rank 1 still hung in backward of step 2 ($s1)" bash -c "[ '${1:-}' = 0 -a '${4:-}' = backward -a '${5:-}' = 2 ]"
[ -n "${6:-}" ] && kill -USR1 "$6"
for i in $(seq 1 300); do kill -0 $MP 2>/dev/null || break; sleep 0.1; done
check "hang=1:2:backward: SIGUSR1 -> rank 1's stack names fault_hang" grep -q "fault_hang at" "$o/stacks/rank_1.txt"
check "hang=1:2:backward: mpirun ended" bash -c "! kill -0 $MP 2>/dev/null"
check "hang=1:2:backward: no process left" no_process_left "$o/ranks"

# ---- 7. crash=1:2 -----------------------------------------------------------------------------
o="$TMP/crash"
timeout -k 5 300 "${MPIRUN[@]}" -np 2 "$BIN" "${TINY[@]}" --steps 3 --transport nccl $(paths "$o") --comm-timeout 60 \
  --fault crash=1:2 >"$o.mpirun" 2>&1; rc=$?
check "crash=1:2: mpirun exits non-zero ($rc), rank 1's dump names fault_crash" \
  bash -c "[ $rc != 0 ] && grep -q 'fault_crash at' '$o/stacks/rank_1.txt'"
check "crash=1:2: no process left" no_process_left "$o/ranks"

# ---- 8. throughput: m7c_125m, 1 vs 2 GPUs --------------------------------------------------------
if [ $BENCH = 1 ]; then
  M7=(--config configs/m7c_125m.json --backend cuda --steps 8 --set train.batch_size=${DDP_BENCH_B:-8} --set train.warmup_steps=0)
  "$BIN" "${M7[@]}" --out "$TMP/m1" --quiet >"$TMP/m1.out" 2>&1 || bad "m7c 1 GPU: exit $?"
  timeout -k 5 600 "${MPIRUN[@]}" -np 2 "$BIN" "${M7[@]}" --transport nccl --out "$TMP/m2" --log-file "$TMP/m2/rank_%r.log" \
    --comm-timeout 120 >"$TMP/m2.mpirun" 2>&1 || bad "m7c 2 GPUs nccl: exit $?"
  python3 - "$TMP/m1" "$TMP/m2" <<'PY'
import json, sys
def tps(d):
    m = [json.loads(l) for l in open(f"{d}/metrics.jsonl")][3:]   # steps 4..8 (warm)
    return sum(x["tokens"] for x in m) / sum(x["ms"] / 1e3 for x in m), sum(x["comm_wait_ms"] for x in m) / len(m)
(t1, _), (t2, w2) = tps(sys.argv[1]), tps(sys.argv[2])
print(f"BENCH m7c_125m tok/s: 1 GPU {t1:.0f}, 2 GPUs (nccl) {t2:.0f}: speedup {t2 / t1:.2f}x, "
      f"efficiency {t2 / t1 / 2 * 100:.0f}%, rank 0 comm wait {w2:.1f} ms/step")
PY
fi

echo "ddp_nccl: $pass passed, $fail failed ($((SECONDS - T0)) s)"
[ $fail = 0 ]
