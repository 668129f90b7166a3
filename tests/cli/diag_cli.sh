#!/usr/bin/env bash
# tests/cli/diag_cli.sh — nsa-train's diagnostics end to end (docs/diagnostics.md):
# the stall dump of a hung rank (flight recorder read while it hangs, heartbeat
# stopped, SIGUSR1 -> symbolized main-thread stack naming fault_hang and train.c
# lines, flight-recorder section, exit 138, no process left), the crash dump
# (SIGSEGV -> shell status 139, fault_crash named), --list-faults, fault argument
# errors (exit 2 naming the value), --print-env JSON, --trace-grads, --gate-stats.
# Usage: bash tests/cli/diag_cli.sh <build dir>  (from the repo root)
set -u
BUILD=${1:?usage: diag_cli.sh <build dir>}
BIN="$BUILD/nsa-train"
if [ ! -x "$BIN" ]; then echo "SKIP: $BIN is not built"; exit 77; fi
TMP=$(mktemp -d)
STARTED=()   # pids this script started in the background
cleanup() {
  for p in "${STARTED[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
ulimit -c 0   # the crash test must not leave core files
pass=0; fail=0
ok()  { echo "PASS  $1"; pass=$((pass + 1)); }
bad() { echo "FAIL  $1"; fail=$((fail + 1)); }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }
expect_rc() { local name=$1 want=$2; shift 2; "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
  if [ "$rc" = "$want" ]; then ok "$name (exit $rc)"; else bad "$name: exit $rc, want $want"; sed 's/^/    /' "$TMP/err" | head -5; fi; }
TINY="--config configs/tiny.json --threads 2"
# state of a flight recorder file: "step phase heartbeat_ns exited fatal_signal"
fr_state() { "$BIN" --show-flight-recorder "$1" 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)["state"]
print(s["step"], s["phase"], s["heartbeat_ns"], int(s["exited"]), s["fatal_signal"], s["exit_code"])' 2>/dev/null; }

# ---- help, fault list, fault argument errors ----------------------------------------
expect_rc "--help" 0 "$BIN" --help
for flag in --rank --trace-grads --gate-stats --flight-recorder --stack-file --fault --list-faults --print-env; do
  check "--help lists $flag" grep -q -- "$flag" "$TMP/out"
done
expect_rc "--list-faults" 0 "$BIN" --list-faults
check "--list-faults lists all 9 faults, each with what it breaks and who catches it" python3 - "$TMP/out" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
heads = [l.split()[0] for l in lines if l and not l[0].isspace() and not l.startswith("#")]
want = ["gate_zero_init", "hang", "crash", "drop_grad", "divergent_unused", "nan_at_seqlen", "prefill_state_leak",
        "gc_recompute_mismatch", "clobber_activation"]
assert heads == want, heads
text = "\n".join(lines)
assert text.count("breaks:") == 9 and text.count("caught by:") == 9 and text.count("no effect:") == 9
PY
for spec in frob hang=0:x:backward hang=0:2:sleep crash=0 nan_at_seqlen=0 gate_zero_init=1 drop_grad=; do
  expect_rc "--fault $spec is a usage error" 2 "$BIN" $TINY --fault "$spec"
  check "--fault $spec: the message names the value" grep -qF -- "--fault $spec" "$TMP/err"
done
expect_rc "--fault drop_grad=no.such.param" 2 "$BIN" $TINY --steps 1 --out "$TMP/dg" --fault drop_grad=no.such.param
check "unknown drop_grad parameter is named, with valid examples" \
  grep -q "no parameter 'no.such.param'.*tok_emb.weight" "$TMP/err"
expect_rc "--fault clobber_activation=7 (2 layers)" 2 "$BIN" $TINY --steps 1 --out "$TMP/cl" --fault clobber_activation=7
check "out-of-range layer is named" grep -q "clobber_activation=7: layer out of range" "$TMP/err"
expect_rc "--rank x" 2 "$BIN" $TINY --rank x

# ---- --print-env -------------------------------------------------------------------------
expect_rc "--print-env" 0 env NSA_TEST_VAR=42 OMP_PROC_BIND=close "$BIN" --print-env $TINY
check "--print-env is JSON with build, cuda, nccl, mpi, host, env and config" python3 - "$TMP/out" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))
b = e["build"]
for k in ("git_sha", "git_dirty", "build_type", "c_compiler", "c_flags", "cuda_enabled"):
    assert k in b, k
assert len(b["git_sha"]) == 40 or b["git_sha"] == "unknown", b["git_sha"]
assert b["git_dirty"] in (True, False, None)
assert "cuda" in e and "nccl" in e and "mpi" in e
if e["cuda"] is not None:
    assert "runtime" in e["cuda"] and "driver" in e["cuda"] and isinstance(e["cuda"]["devices"], list)
    for d in e["cuda"]["devices"]:
        for k in ("index", "name", "uuid", "memory_bytes", "sm"):
            assert k in d, k
h = e["host"]
for k in ("hostname", "kernel", "cpu_model", "cores", "memory_bytes"):
    assert k in h, k
assert h["cores"] >= 1 and h["memory_bytes"] > 0
assert e["env"]["NSA_TEST_VAR"] == "42" and e["env"]["OMP_PROC_BIND"] == "close"
assert "PATH" not in e["env"] and "HOME" not in e["env"]
c = e["config"]
assert c["name"] == "tiny" and len(c["digest"]) == 16 and c["seed"] == 1337 and c["backend"] == "cpu"
assert c["precision"] == "fp32"
PY
expect_rc "--print-env without --config" 0 "$BIN" --print-env
check "--print-env without --config has no config section" python3 -c '
import json, sys; e = json.load(open(sys.argv[1])); assert "config" not in e and "build" in e' "$TMP/out"

# ---- --trace-grads, --gate-stats ---------------------------------------------------------
expect_rc "--trace-grads --gate-stats --rank 3" 0 "$BIN" $TINY --steps 2 --out "$TMP/tr" --trace-grads --gate-stats --rank 3 --quiet
check "[GRAD-TRACE] line per step on stdout" \
  test "$(grep -cE '^\[GRAD-TRACE\] step=[12] rank=3 arrived=37 missing=0$' "$TMP/out")" = 2
check "grad_trace.jsonl: one record per step with every field" python3 - "$TMP/tr/grad_trace.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == [1, 2]
for r in rows:
    assert list(r) == ["step", "rank", "n_params", "arrived", "missing", "expected_missing", "nonfinite", "zero", "order"], list(r)
    assert r["rank"] == 3 and r["n_params"] == 37 and r["arrived"] == 37 and r["missing"] == []
    assert r["order"][0] == "lm_head.weight" and r["order"][-1] == "tok_emb.weight" and len(r["order"]) == 37
PY
check "gate_stats.jsonl: one record per step, per layer" python3 - "$TMP/tr/gate_stats.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == [1, 2]
for r in rows:
    assert r["rank"] == 3 and r["gate_act"] == "softmax" and r["gated"] is True
    assert [l["layer"] for l in r["layers"]] == [0, 1]
    for l in r["layers"]:
        for k in ("fc2_weight_mean", "fc2_weight_std", "fc2_bias_mean", "fc2_bias_std"):
            assert isinstance(l[k], float), k
        for k in ("out_mean", "out_std", "out_min", "out_max"):
            assert len(l[k]) == 3, k
PY
expect_rc "drop_grad in the trace" 0 "$BIN" $TINY --steps 1 --out "$TMP/tr2" --trace-grads --quiet --fault drop_grad=blocks.1.attn.o_proj.weight
check "[GRAD-TRACE] names the missing parameter" \
  grep -qx '\[GRAD-TRACE\] step=1 rank=0 missing blocks.1.attn.o_proj.weight' "$TMP/out"

# ---- a normal run's flight recorder --------------------------------------------------------
expect_rc "--flight-recorder, 3 steps" 0 "$BIN" $TINY --steps 3 --out "$TMP/fr" --flight-recorder "$TMP/fr/fr.bin" --quiet
check "after a normal exit: step 3, phase done, exited, code 0, no signal" \
  test "$(fr_state "$TMP/fr/fr.bin" | cut -d' ' -f1,2,4,5,6)" = "3 done 1 0 0"
echo garbage > "$TMP/notfr"
expect_rc "--show-flight-recorder on a non-recorder" 1 "$BIN" --show-flight-recorder "$TMP/notfr"

# ---- hang + SIGUSR1 stall dump ------------------------------------------------------------
mkdir -p "$TMP/hang"
"$BIN" $TINY --steps 5 --out "$TMP/hang" --flight-recorder "$TMP/hang/fr.bin" --stack-file "$TMP/hang/stack.txt" \
  --fault hang=0:2:backward >"$TMP/hang/log" 2>&1 &
HPID=$!
STARTED+=("$HPID")
seen=""
for _ in $(seq 1 300); do   # up to 30 s for the rank to reach step 2 / backward
  st=$(fr_state "$TMP/hang/fr.bin")
  case "$st" in "2 backward "*) seen=$st; break;; esac
  sleep 0.1
done
check "flight recorder shows step 2, phase backward while the rank hangs" test -n "$seen"
hb1=$(echo "$seen" | cut -d' ' -f3)
sleep 0.7
hb2=$(fr_state "$TMP/hang/fr.bin" | cut -d' ' -f3)
check "heartbeat stopped advancing" test -n "$hb1" -a "$hb1" = "$hb2"
check "no stack dump before the signal" test ! -s "$TMP/hang/stack.txt"
# SIGUSR1 to a worker (OpenMP) thread if there is one: it must be forwarded to the main thread
worker=$(ls /proc/$HPID/task 2>/dev/null | grep -vx "$HPID" | head -1)
if [ -n "$worker" ]; then
  python3 -c '
import ctypes, platform, sys
nr = {"x86_64": 234, "aarch64": 131}[platform.machine()]
sys.exit(ctypes.CDLL(None).syscall(nr, int(sys.argv[1]), int(sys.argv[2]), 10))' "$HPID" "$worker"
  echo "      (SIGUSR1 sent to worker thread $worker of pid $HPID)"
else
  kill -USR1 "$HPID"
fi
t0=$(date +%s)
while kill -0 "$HPID" 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt 15 ]; do sleep 0.1; done
wait "$HPID" 2>/dev/null; hrc=$?
check "the stalled rank exited within 15 s" test $(( $(date +%s) - t0 )) -lt 15
check "stall dump exit status is 138 (got $hrc)" test "$hrc" = 138
check "no process left behind" bash -c "! kill -0 $HPID 2>/dev/null"
S="$TMP/hang/stack.txt"
check "stack file: header names rank, pid, SIGUSR1 and UTC time" \
  grep -qE "^nsa-train rank 0 pid $HPID: SIGUSR1 \(stall dump\) at [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$" "$S"
check "stack file: the main thread's stack" grep -q "^thread $HPID (main thread)" "$S"
check "stack file names fault_hang" grep -qE "#[0-9]+ +fault_hang at .*faults\.c:[0-9]+" "$S"
check "stack file has train.c:LINE frames" grep -qE "train\.c:[0-9]+" "$S"
check "stack file has the flight-recorder section at step 2 / backward" \
  grep -q "state: step 2 phase backward" "$S"
check "stack file lists the last events" grep -qE "t=\+[0-9.]+ step 2 layer -1 backward begin backward" "$S"
check "flight recorder records the signal, not a normal exit" \
  test "$(fr_state "$TMP/hang/fr.bin" | cut -d' ' -f4,5)" = "0 10"
if [ "$fail" -gt 0 ]; then sed 's/^/    | /' "$S" | head -60; fi

# ---- crash: SIGSEGV, crash dump, status 139 ------------------------------------------------
# (the subshell's stderr swallows the shell's own "Segmentation fault" notice)
( bash -c 'ulimit -c 0; exec "$@"' _ "$BIN" $TINY --steps 3 --out "$TMP/crash" --quiet \
  --stack-file "$TMP/crash/stack.txt" --flight-recorder "$TMP/crash/fr.bin" --fault crash=0:1 >"$TMP/out" 2>"$TMP/err"; exit $? ) 2>/dev/null
crc=$?
check "crash=0:1 dies by SIGSEGV (shell status 139, got $crc)" test "$crc" = 139
check "crash stack names fault_crash" grep -qE "#0 +fault_crash at .*faults\.c:[0-9]+" "$TMP/crash/stack.txt"
check "crash header says SIGSEGV (crash)" grep -q ": SIGSEGV (crash) at .*Z$" "$TMP/crash/stack.txt"
check "crash flight recorder: step 1 forward, signal 11" \
  test "$(fr_state "$TMP/crash/fr.bin" | cut -d' ' -f1,2,4,5)" = "1 forward 0 11"
# the fallback without addr2line still dumps (no file:line) and still re-raises
( bash -c 'ulimit -c 0; exec "$@"' _ env NSA_ADDR2LINE=none "$BIN" $TINY --steps 3 --out "$TMP/crash2" --quiet \
  --fault crash=0:1 >"$TMP/out" 2>"$TMP/err"; exit $? ) 2>/dev/null
crc=$?
check "without addr2line: still SIGSEGV (got $crc)" test "$crc" = 139
check "without addr2line: the dump goes to stderr with raw frames" grep -q "backtrace_symbols_fd; addr2line not found" "$TMP/err"
expect_rc "a rank that is not targeted does not crash" 0 "$BIN" $TINY --steps 2 --out "$TMP/crash3" --quiet --rank 1 --fault crash=0:1

echo "diag_cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
