#!/usr/bin/env bash
# tests/cli/torch_adapter.sh BUILD_DIR — the PyTorch trainer adapters/torch/nsa-torch-train
# (docs/trainer-protocol.md version 2) against its contract and against
# nsa-train's CPU backend:
#   the handshake (--protocol-info: protocol 2, its lists; answered in < 1 s, before torch
#   loads), a bad flag / unknown fault exit 2, a tiny run's metrics.jsonl with a falling loss;
#   the data bitwise equal to nsa-train's (step-1 dump inputs/targets, learnable and text);
#   from nsa-train's --write-init weights, loss and every gradient within 1e-4 relative of
#   nsa-train (fp32; the worst is printed) and within 1e-12 in fp64 (cpu64, phi mlp); batched == sequential prefill and checkpointing ==
#   none, bitwise; --dump-tensors 'grads.*': the gradients of the full dump, bitwise, no logits; the faults' documented effects (gate_zero_init, drop_grad, nan_at_seqlen,
#   hang + SIGUSR1, crash, heartbeat); 2 gloo ranks: a clean run with the same loss on both ranks
#   and identical weights, and divergent_unused in default mode ending with exit 4 on both.
# Needs a python with torch ($NSA_TORCH_PYTHON, python3, /usr/bin/python3): otherwise SKIP
# (exit 77). About 40 s on 2 loaded cores (tiny config, 1-3 steps per run).
set -uo pipefail
build=${1:?usage: torch_adapter.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$here/lib/common.sh"
py=""
for c in "${NSA_TORCH_PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$c" ] || continue
  if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import torch' >/dev/null 2>&1; then py=$c; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: no python with torch (tried \$NSA_TORCH_PYTHON, python3, /usr/bin/python3); install python3-torch"
  exit 77
fi
[ -x "$build/nsa-train" ] || { echo "FAIL: $build/nsa-train not built"; exit 1; }
cd "$root"
T=adapters/torch/nsa-torch-train
NT=$build/nsa-train
CFG=configs/tiny.json
TMP=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=1
jq_py() { "$py" -c "import json,sys; $1" "${@:2}"; }
quiet() { "$@" > /dev/null 2>&1; }
cmpdump() { quiet "$py" adapters/torch/tools/compare_dumps.py "$@"; }

# ---- handshake and usage ------------------------------------------------------------------
t0=$(date +%s%N)
$T --protocol-info > "$TMP/info.json"; rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
check "--protocol-info exits 0" [ "$rc" = 0 ]
check "--protocol-info answers in < 1 s (${ms} ms)" [ "$ms" -lt 1000 ]
check "--protocol-info: protocol 2, gloo, heartbeat, init_weights, the fault names of nsa-train" jq_py '
d = json.load(open(sys.argv[1])); f = d["features"]
nt = [l.split()[0] for l in open(sys.argv[2]) if l[:1].isalpha()]
assert d["protocol"] == 2 and d["trainer"] == "nsa-torch-train", d
assert "gloo" in f["transports"] and "env" in f["bootstraps"] and "sequential" in f["prefill"]
assert {"heartbeat", "stack_dump", "init_weights", "trace_grads", "gate_stats", "dump_step", "dump_tensors", "anomaly"} <= set(f["diagnostics"])
assert "flight_recorder" not in f["diagnostics"]
assert f["faults"] == nt, (f["faults"], nt)' "$TMP/info.json" <($NT --list-faults)
expect_exit "an unknown flag is exit 2" 2 $T --config $CFG --bogus
has "$TMP/out" "unknown option '--bogus'" && ok "... naming the flag" || bad "... naming the flag"
expect_exit "an unknown fault is exit 2" 2 $T --config $CFG --fault nosuch --list-faults
expect_exit "a malformed fault argument is exit 2" 2 $T --config $CFG --fault hang=0:x:backward
has "$TMP/out" "STEP 'x' is not a positive integer" && ok "... naming the value" || bad "... naming the value"
expect_exit "an unknown drop_grad parameter is exit 2" 2 $T --config $CFG --steps 1 --out "$TMP/u" --fault drop_grad=nope.weight
expect_exit "--print-env" 0 $T --print-env
check "--print-env has build.git_sha, cuda, host.cpu_model and host.cores" jq_py '
d = json.loads(open(sys.argv[1]).read()); assert d["build"]["git_sha"] and "cuda" in d and d["host"]["cpu_model"] and d["host"]["cores"] >= 1' "$TMP/out"

# ---- a run, and parity with nsa-train --------------------------------------------------------
$NT --config $CFG --write-init "$TMP/init.st" > /dev/null
$NT --config $CFG --steps 1 --dump-step "$TMP/c.st" --out "$TMP/c" --quiet
expect_exit "tiny run, 3 steps, nsa-train's start weights" 0 $T --config $CFG --steps 3 --out "$TMP/t" --quiet \
  --init-weights "$TMP/init.st" --dump-step "$TMP/t.st" --heartbeat "$TMP/t/hb.json"
check "metrics.jsonl: 3 records, loss falls" jq_py '
r = [json.loads(l) for l in open(sys.argv[1])]
assert [x["step"] for x in r] == [1, 2, 3] and r[-1]["loss"] < r[0]["loss"], r
assert all(k in r[0] for k in ("loss", "grad_norm", "lr", "ms", "tok_per_s", "mem_bytes", "rss_bytes"))' "$TMP/t/metrics.jsonl"
$NT --config $CFG --steps 3 --out "$TMP/n3" --quiet
check "metrics.jsonl data_digest (the tokens of each step) equal to nsa-train's over 3 steps" jq_py '
a = [json.loads(l)["data_digest"] for l in open(sys.argv[1])]; b = [json.loads(l)["data_digest"] for l in open(sys.argv[2])]
assert a == b and len(a) == 3, (a, b)' "$TMP/t/metrics.jsonl" "$TMP/n3/metrics.jsonl"
check "heartbeat: the last beat says exited, exit_code 0, phase exit" jq_py '
d = json.load(open(sys.argv[1])); assert d["exited"] and d["exit_code"] == 0 and d["phase"] == "exit" and d["seq"] > 10, d' "$TMP/t/hb.json"
echo "parity with nsa-train (cpu, fp32) from the same weights and batch:"
"$py" adapters/torch/tools/compare_dumps.py "$TMP/t.st" "$TMP/c.st" --tol 1e-4 | sed 's/^/    /'
check "loss and every gradient within 1e-4 relative of nsa-train, inputs/targets bitwise" \
  cmpdump "$TMP/t.st" "$TMP/c.st" --tol 1e-4
$NT --config $CFG --backend cpu64 --set nsa.phi=mlp --steps 1 --dump-step "$TMP/c64.st" --out "$TMP/c64" --quiet
$T --config $CFG --backend cpu64 --set nsa.phi=mlp --steps 1 --dump-step "$TMP/t64.st" --out "$TMP/t64" --quiet
echo "parity with nsa-train (cpu64, fp64, phi mlp):"
"$py" adapters/torch/tools/compare_dumps.py "$TMP/t64.st" "$TMP/c64.st" --tol 1e-12 | sed 's/^/    /'
check "fp64: loss and every gradient within 1e-12 relative of nsa-train's cpu64 (the same math)" \
  cmpdump "$TMP/t64.st" "$TMP/c64.st" --tol 1e-12
$T --config $CFG --steps 1 --out "$TMP/t0" --quiet --dump-step "$TMP/t0.st"
check "own seeded init equals nsa-train's (same loss and gradients, bitwise)" \
  cmpdump "$TMP/t0.st" "$TMP/t.st" --tol 0 --exact inputs targets logits loss
$T --config $CFG --steps 1 --out "$TMP/tg" --quiet --dump-step "$TMP/tg.st" --dump-tensors 'grads.*'
check "--dump-tensors 'grads.*': every gradient of the full dump, bitwise, and no logits" jq_py '
import struct
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
full, part = load(sys.argv[1]), load(sys.argv[2])
want = sorted(k for k in full if k.startswith("grads.") or k in ("inputs", "targets", "loss"))
assert sorted(part) == want and len(want) > 30, sorted(part)
assert all(part[k] == full[k] for k in part)' "$TMP/t0.st" "$TMP/tg.st"
expect_exit "--dump-tensors without --dump-step is exit 2" 2 $T --config $CFG --dump-tensors logits
has "$TMP/out" "--dump-tensors logits selects the step dump's tensors: it needs --dump-step FILE" && ok "... naming the flag" || bad "... naming the flag"
head -c 300000 README.md docs/*.md > "$TMP/corpus.txt"
$NT --config $CFG --set data.kind=text --set data.path="$TMP/corpus.txt" --steps 1 --dump-step "$TMP/ct.st" --out "$TMP/ct" --quiet
$T --config $CFG --set data.kind=text --set data.path="$TMP/corpus.txt" --steps 1 --dump-step "$TMP/tt.st" --out "$TMP/tt" --quiet
check "text data: inputs/targets bitwise equal to nsa-train's, gradients within 1e-4" \
  cmpdump "$TMP/tt.st" "$TMP/ct.st" --tol 1e-4

# ---- forward algorithms and checkpointing ----------------------------------------------------
$T --config $CFG --steps 3 --out "$TMP/seq" --quiet --set train.prefill=sequential --dump-step "$TMP/seq.st"
check "sequential prefill: per-step losses bitwise equal to batched" \
  cmp <(cut -d, -f1-3 "$TMP/t0/metrics.jsonl" | head -1) <(cut -d, -f1-3 "$TMP/seq/metrics.jsonl" | head -1)
check "sequential prefill: step-1 logits and gradients bitwise equal to batched" \
  cmpdump "$TMP/seq.st" "$TMP/t0.st" --tol 0 --exact inputs targets logits loss
$T --config $CFG --steps 1 --out "$TMP/ck" --quiet --set 'train.checkpoint_layers=[0,2]' --dump-step "$TMP/ck.st"
check "checkpointing layers [0,2): gradients bitwise equal to no checkpointing" \
  cmpdump "$TMP/ck.st" "$TMP/t0.st" --tol 0
$T --config $CFG --steps 1 --out "$TMP/gcm" --quiet --set 'train.checkpoint_layers=[0,2]' --fault gc_recompute_mismatch=1 --dump-step "$TMP/gcm.st" 2>/dev/null
check "gc_recompute_mismatch=1: checkpointed gradients differ from no checkpointing" \
  bash -c "! '$py' adapters/torch/tools/compare_dumps.py '$TMP/gcm.st' '$TMP/t0.st' --tol 0 >/dev/null 2>&1"

# ---- faults -------------------------------------------------------------------------------------
$T --config $CFG --steps 1 --out "$TMP/gz" --quiet --gate-stats --fault gate_zero_init 2>/dev/null
$T --config $CFG --steps 1 --out "$TMP/g" --quiet --gate-stats
check "gate_zero_init: every layer's gate output exactly 1/3 with std 0; clean: std > 0" jq_py '
z = json.loads(open(sys.argv[1]).readline()); c = json.loads(open(sys.argv[2]).readline())
assert all(o == 0.3333333432674408 for L in z["layers"] for o in L["out_mean"]) and all(s == 0 for L in z["layers"] for s in L["out_std"]), z
assert all(s > 0 for L in c["layers"] for s in L["out_std"]) and c["layers"][0]["fc2_weight_std"] > 0.02, c' \
  "$TMP/gz/gate_stats.jsonl" "$TMP/g/gate_stats.jsonl"
P=blocks.1.attn.o_proj.weight
$T --config $CFG --steps 1 --out "$TMP/dg" --quiet --trace-grads --fault drop_grad=$P --dump-step "$TMP/dg.st" >/dev/null 2>&1
check "drop_grad=$P: missing in grad_trace.jsonl, its dumped gradient exactly zero" jq_py '
r = json.loads(open(sys.argv[1]).readline()); assert r["missing"] == [sys.argv[2]] and r["arrived"] == 36, r
sys.path.insert(0, "adapters/torch"); from nsa_torch import stio; t, _ = stio.read(sys.argv[3])
assert not t["grads." + sys.argv[2]].any()' "$TMP/dg/grad_trace.jsonl" $P "$TMP/dg.st"
expect_exit "nan_at_seqlen=64 at T=128: the anomaly exit" 3 $T --config $CFG --steps 1 --out "$TMP/nan" --quiet --fault nan_at_seqlen=64
check "anomaly.json names blocks.0.attn.sel.o, layer 0, branch sel, op sel_attn_fwd, t=127" jq_py '
a = json.load(open(sys.argv[1]))
assert (a["tensor"], a["layer"], a["branch"], a["op"], a["position"]["t"], a["position"]["b"]) == ("blocks.0.attn.sel.o", 0, "sel", "sel_attn_fwd", 127, 0), a' "$TMP/nan/anomaly.json"
expect_exit "nan_at_seqlen=48 at T=128: no effect" 0 $T --config $CFG --steps 1 --out "$TMP/nan2" --quiet --fault nan_at_seqlen=48
$T --config $CFG --steps 3 --out "$TMP/h" --quiet --fault hang=0:2:forward --heartbeat "$TMP/h/hb_%r.json" \
   --stack-file "$TMP/h/stack_%r.txt" 2>/dev/null & pid=$!
seq1=0; seq2=0
for i in $(seq 1 100); do sleep 0.2; grep -q '"step": 2' "$TMP/h/hb_0.json" 2>/dev/null && break; done
seq1=$(jq_py 'print(json.load(open(sys.argv[1]))["seq"])' "$TMP/h/hb_0.json" 2>/dev/null || echo 0)
sleep 1.5
seq2=$(jq_py 'print(json.load(open(sys.argv[1]))["seq"])' "$TMP/h/hb_0.json" 2>/dev/null || echo 0)
check "hang=0:2:forward: heartbeat at step 2 phase forward (seq $seq1), then no new beat (seq $seq2)" jq_py '
d = json.load(open(sys.argv[1])); assert d["step"] == 2 and d["phase"] == "forward" and not d["exited"], d
assert int(sys.argv[2]) == int(sys.argv[3]) > 5' "$TMP/h/hb_0.json" "$seq1" "$seq2"
kill -USR1 $pid; wait $pid; rc=$?
check "SIGUSR1: exit 138" [ "$rc" = 138 ]
check "the stack file's current thread stops in fault_hang" \
  bash -c "grep -A1 '^Current thread' '$TMP/h/stack_0.txt' | grep -q 'in fault_hang'"

$T --config $CFG --steps 3 --out "$TMP/cr" --quiet --fault crash=0:2 --stack-file "$TMP/cr/stack.txt" >/dev/null 2>&1
rc=$?
check "crash=0:2: killed by SIGSEGV (shell status $rc), faulthandler's current thread stops in fault_crash" \
  bash -c "[ $rc = 139 ] && grep -A1 '^Current thread' '$TMP/cr/stack.txt' | grep -q 'in fault_crash'"

# ---- data parallel over gloo (the first rank to time out may see the other's connection close:
# [COMM-TIMEOUT] or [COMM-ERROR], exit 4 either way) ---------------------------------------------------------------------
ddp() {   # OUT ARGS...: two ranks through the env launcher's variables; rcs in OUT/rc_R
  local out=$1; shift; mkdir -p "$out"
  local port=$((20000 + RANDOM % 20000)) pids=()
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      $T --config $CFG --transport gloo --bootstrap env --out "$out" --log-file "$out/rank_%r.log" "$@" &
    pids+=($!)
  done
  for r in 0 1; do wait ${pids[$r]}; echo $? > "$out/rc_$r"; done
}
ddp "$TMP/d1" --steps 2 --trace-grads
check "gloo, 2 ranks: both exit 0" bash -c "[ \$(cat '$TMP/d1/rc_0') = 0 ] && [ \$(cat '$TMP/d1/rc_1') = 0 ]"
check "gloo, 2 ranks: the same loss on both ranks at every step, identical weights at the end" bash -c "
  diff <(grep -o 'loss [0-9.]*' '$TMP/d1/rank_0.log') <(grep -o 'loss [0-9.]*' '$TMP/d1/rank_1.log') &&
  [ \$(grep -c 'loss' '$TMP/d1/rank_0.log') -ge 2 ] && grep -q 'weights are identical on the 2 ranks' '$TMP/d1/rank_0.log'"
check "gloo: grad_trace.jsonl has both ranks' records, nothing missing" jq_py '
r = [json.loads(l) for l in open(sys.argv[1])]
assert sorted((x["step"], x["rank"]) for x in r) == [(1, 0), (1, 1), (2, 0), (2, 1)] and all(not x["missing"] for x in r)' "$TMP/d1/grad_trace.jsonl"
NSA_COMM_TIMEOUT=4 ddp "$TMP/d2" --steps 2 --quiet --fault divergent_unused=1
check "divergent_unused=1, default mode: a hang that ends with exit 4 on both ranks after --comm-timeout" \
  bash -c "[ \$(cat '$TMP/d2/rc_0') = 4 ] && [ \$(cat '$TMP/d2/rc_1') = 4 ] && grep -q '^\[COMM-' '$TMP/d2/rank_0.log' &&
  grep -q 'bucket never launched: missing blocks.1.attn.gate.fc2.weight' '$TMP/d2/rank_1.log'" ||
  { cat "$TMP"/d2/rc_* "$TMP"/d2/rank_*.log | tail -n 20; }
finish
