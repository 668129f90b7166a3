#!/usr/bin/env bash
# tests/cli/trainer_map_runner.sh BUILD_DIR — the runner's side of trainer maps
# (docs/trainer-maps.md): a trainer given by a map is the command `PROBE --map MAP`, PROBE from
# $NSA_PROBE, here a stub (tests/cli/stub_probe.py: no torch, no script; its behaviour comes
# from "stub_*" keys of the map) that answers --check-map, --protocol-info (features.knobs),
# --print-env and writes what a case asks for:
#  1. --trainer-map with a missing file is exit 2 naming the flag and the file; with --trainer-cmd
#     or --trainer it is exit 2 naming both flags;
#  2. a map the probe rejects (--check-map exits 2 printing `m.json:3:5: unknown key 'x'`): the
#     run exits 2 printing that line before any case (no report, the probe asked nothing else);
#     `validate` of a scenario whose run.trainers names it exits 2 printing it too;
#  3. features.knobs: an override (matrix, scenario, --set) of a key the knobs lack is a SKIP
#     "the trainer map has no knob 'K'"; a value its list lacks "the trainer map's knob 'K' has
#     no value 'V'" (strings by their string, numbers by their JSON text); the others run;
#  4. run.trainers.NAME {"map": PATH} (relative to the scenario's folder) runs the probe's command;
#     a missing map file and an unknown key beside "map" are exit 2 at file:line:col;
#  5. --trainer-map whose --print-env fails (no python with torch): a SKIP quoting its first line,
#     exit 0, not exit 2;
#  6. exit 0 without metrics and a `[nsa_probe] FAIL:` line: a FAIL quoting it; a Python
#     exception: a CRASH whose summary ends in the exception line, the traceback in the evidence;
#  7. grad_arrival "expect_missing": "trainer" (the record's own expected_missing) and gate_init
#     with the record's fc2_fan_in / fc2_fan_out and "fc2_gain": null, each passing and failing;
#  8. a HANG's stack (faulthandler) names the probe's fault_hang, but passes over a probe hook to
#     the script's frame;
#  9. ddp_onestep with a trainer that writes no buckets.jsonl / rank_times.jsonl (2 ranks over
#     gloo, the env launcher): the per-rank table from grad_trace.jsonl, the HANG's diagnosis
#     naming the rank and parameter of its `[DDP] step=S rank=R no gradient: NAME` line.
set -u
BUILD=${1:?usage: trainer_map_runner.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
H="$BUILD/nsa-harness"
SRC=$(pwd)
[ -x "$H" ] && [ -x "$BUILD/nsa-train" ] || { echo "SKIP: nsa-harness or nsa-train not built in $BUILD"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
[ -f tests/cli/stub_probe.py ] || { echo "FAIL: run from the source root (tests/cli/stub_probe.py not found)"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, expect_exit, has, finish
printf '#!/bin/sh\nexec python3 %s/tests/cli/stub_probe.py "$@"\n' "$SRC" >"$TMP/probe"
chmod +x "$TMP/probe"
export NSA_PROBE="$TMP/probe" STUB_PROBE_LOG="$TMP/probe.log"
mkdir -p "$TMP/maps" "$TMP/sub"

# map NAME JSON: a trainer map for the stub in $TMP/maps
map() { printf '%s\n' "$2" >"$TMP/maps/$1"; }
# case_is REPORT CASE VERDICT TEXT: summary.json has CASE with VERDICT and TEXT in its summary
case_is() { python3 - "$@" <<'PY'
import json, sys
rep, case, verdict, text = sys.argv[1:5]
cs = [c for c in json.load(open(rep + "/summary.json"))["cases"] if c["case"] == case]
ok = cs and cs[0]["verdict"] == verdict and text in cs[0]["summary"]
if not ok: print("   got:", [(c["case"], c["verdict"], c["summary"]) for c in cs] or "no case " + case)
sys.exit(not ok)
PY
}
COMMON='"config": "'"$SRC"'/configs/tiny.json", "overrides": {"train.steps": 3, "train.batch_size": 1, "train.seq_len": 32}'
FINITE='{"check": "finite"}'
# scenario NAME 'MEMBERS' [CHECKS]: a scenario of the tiny config in $TMP (MEMBERS after "run")
scenario() {
  cat >"$TMP/$1.json" <<EOF
{"name": "$1", "description": "a map trainer under the runner", "family": "branch_isolation",
 $COMMON, $2, "profiles": {"ci": {}},
 "checks": [${3:-$FINITE}]}
EOF
}

# ---- 1. --trainer-map's usage errors -------------------------------------------------------------
map good.map.json '{"trainer": "stubbed"}'
scenario plain '"run": {"timeout_s": 60}'
expect_exit "--trainer-map with a missing file: exit 2" 2 "$H" run "$TMP/plain.json" --trainer-map "$TMP/maps/nope.json" --out "$TMP/r1"
check "... naming the flag and the file" has "$TMP/out" "--trainer-map $TMP/maps/nope.json: no such file"
expect_exit "--trainer-map with --trainer-cmd: exit 2" 2 "$H" run "$TMP/plain.json" --trainer-map "$TMP/maps/good.map.json" --trainer-cmd "python3 x.py"
check "... naming both flags" bash -c "grep -qF -- '--trainer-map $TMP/maps/good.map.json and --trainer-cmd python3 x.py' '$TMP/out'"
expect_exit "--trainer-map with --trainer: exit 2" 2 "$H" run "$TMP/plain.json" --trainer-map "$TMP/maps/good.map.json" --trainer "$BUILD/nsa-train"
check "... naming both flags" bash -c "grep -qF -- '--trainer-map $TMP/maps/good.map.json and --trainer $BUILD/nsa-train' '$TMP/out'"
expect_exit "a good map runs (the probe's command)" 0 "$H" run "$TMP/plain.json" --profile ci --trainer-map "$TMP/maps/good.map.json" --out "$TMP/r1"
check "... PASS" case_is "$TMP/r1" default PASS "all finite"
check "... the case ran PROBE --map ABS_MAP --config CASE/config.json" \
  has "$TMP/r1/plain/default/output.log" "command: $TMP/probe --map $TMP/maps/good.map.json --config $TMP/r1/plain/default/config.json --out"
check "... the map was checked first (--check-map)" bash -c "head -1 '$TMP/probe.log' | grep -qx -- '--map $TMP/maps/good.map.json --check-map'"
check "... RESULTS.md names the trainer by the map's file name" has "$TMP/r1/RESULTS.md" "· trainer \`good.map.json\` (stubbed 1, protocol 2)"

# ---- 2. a map the probe rejects --------------------------------------------------------------------
map m.json '{"trainer": "stubbed", "stub_reject": "m.json:3:5: unknown key '"'x'"'"}'
rm -f "$TMP/probe.log"
expect_exit "a map the probe rejects: exit 2" 2 "$H" run "$TMP/plain.json" --profile ci --trainer-map "$TMP/maps/m.json" --out "$TMP/r2"
check "... printing the probe's line" has "$TMP/out" "m.json:3:5: unknown key 'x'"
check "... saying the probe rejects the map" has "$TMP/out" "--trainer-map $TMP/maps/m.json: the probe rejects the trainer map"
check "... before any case: no report, the probe asked only --check-map" bash -c "
[ ! -e '$TMP/r2' ] && [ \"\$(cat '$TMP/probe.log')\" = '--map $TMP/maps/m.json --check-map' ]"
scenario rejected '"run": {"timeout_s": 60, "trainers": {"stub": {"map": "maps/m.json"}}, "trainer": "stub"}'
expect_exit "validate: run.trainers naming a map the probe rejects: exit 2" 2 "$H" validate "$TMP/rejected.json"
check "... printing the probe's line" has "$TMP/out" "m.json:3:5: unknown key 'x'"
check "... and where the map stands (file:line:col)" bash -c "grep -qE '^$TMP/rejected.json:[0-9]+:[0-9]+: trainers.stub.map: the probe rejects' '$TMP/out'"
expect_exit "run: the same scenario's map is checked before any case: exit 2" 2 "$H" run "$TMP/rejected.json" --profile ci --out "$TMP/r2b"
check "... printing the probe's line" has "$TMP/out" "m.json:3:5: unknown key 'x'"
check "... no report" test ! -e "$TMP/r2b"
NSA_PROBE="$TMP/no_such_probe" expect_exit "a probe that cannot be started: exit 2" 2 "$H" run "$TMP/plain.json" --profile ci --trainer-map "$TMP/maps/good.map.json" --out "$TMP/r2c"
check "... saying so" has "$TMP/out" "cannot start the probe $TMP/no_such_probe"

# ---- 3. features.knobs: SKIPs naming the knob or the value -----------------------------------------
scenario knobs '"run": {"timeout_s": 60}, "matrix": {"branch": {"key": "nsa.force_branch", "values": ["none", "cmp", "sel"]}}'
map noknob.map.json '{"trainer": "stubbed", "stub_knobs": {"train.steps": null, "train.batch_size": null, "train.seq_len": null}}'
expect_exit "knobs without nsa.force_branch: every case SKIPs (exit 0)" 0 "$H" run "$TMP/knobs.json" --profile ci --trainer-map "$TMP/maps/noknob.map.json" --out "$TMP/r3a"
for b in none cmp sel; do
  check "... branch=$b SKIP naming the knob" case_is "$TMP/r3a" "branch=$b" SKIP "the trainer map has no knob 'nsa.force_branch'"
done
map somevalues.map.json '{"trainer": "stubbed", "stub_knobs": {"train.steps": [3], "train.batch_size": null, "train.seq_len": null, "nsa.force_branch": ["none", "sel"]}}'
expect_exit "knob nsa.force_branch with only none and sel" 0 "$H" run "$TMP/knobs.json" --profile ci --trainer-map "$TMP/maps/somevalues.map.json" --out "$TMP/r3b"
check "... branch=cmp SKIP naming the value" case_is "$TMP/r3b" "branch=cmp" SKIP "the trainer map's knob 'nsa.force_branch' has no value 'cmp'"
check "... branch=none runs (train.steps 3 is in [3]: a number by its JSON text)" case_is "$TMP/r3b" "branch=none" PASS "all finite"
check "... branch=sel runs" case_is "$TMP/r3b" "branch=sel" PASS "all finite"
expect_exit "a --set of a key the knobs lack" 0 "$H" run "$TMP/knobs.json" --profile ci --trainer-map "$TMP/maps/somevalues.map.json" --set train.seed=7 --out "$TMP/r3c"
check "... SKIP naming it" case_is "$TMP/r3c" "branch=none" SKIP "the trainer map has no knob 'train.seed'"
map steps2.map.json '{"trainer": "stubbed", "stub_knobs": {"train.steps": [2], "train.batch_size": null, "train.seq_len": null}}'
expect_exit "a number the knob's list lacks" 0 "$H" run "$TMP/plain.json" --profile ci --trainer-map "$TMP/maps/steps2.map.json" --out "$TMP/r3d"
check "... SKIP naming the value" case_is "$TMP/r3d" default SKIP "the trainer map's knob 'train.steps' has no value '3'"

# ---- 4. run.trainers.NAME {"map": PATH} ----------------------------------------------------------------
cat >"$TMP/sub/named.json" <<EOF
{"name": "named", "description": "a scenario's map trainer", "family": "branch_isolation",
 $COMMON,
 "run": {"timeout_s": 60, "trainers": {"stub": {"map": "../maps/good.map.json"}}, "trainer": "stub"},
 "profiles": {"ci": {}}, "checks": [{"check": "finite"}]}
EOF
expect_exit "run.trainers.stub {\"map\": \"../maps/good.map.json\"}: validate" 0 "$H" validate "$TMP/sub/named.json"
expect_exit "... run" 0 "$H" run "$TMP/sub/named.json" --profile ci --out "$TMP/r4"
check "... PASS" case_is "$TMP/r4" default PASS "all finite"
check "... the probe's command with the map resolved against the scenario's folder" \
  has "$TMP/r4/named/default/output.log" "command: $TMP/probe --map $TMP/maps/good.map.json --config"
check "... env.json names the map" python3 -c "
import json, sys; e = json.load(open('$TMP/r4/env.json'))
sys.exit(e['runner']['trainers']['stub']['map'] != '$TMP/maps/good.map.json')"
cat >"$TMP/sub/badmap.json" <<EOF
{"name": "badmap", "description": "bad map entries", "family": "branch_isolation",
 $COMMON,
 "run": {"trainers": {"a": {"map": "../maps/nope.json"},
                      "b": {"map": "../maps/good.map.json", "args": ["x"]}}},
 "profiles": {"ci": {}}, "checks": [{"check": "finite"}]}
EOF
expect_exit "a missing map file, an unknown key beside map: exit 2" 2 "$H" validate "$TMP/sub/badmap.json"
check "... the missing file at file:line:col" has "$TMP/out" "$TMP/sub/badmap.json:3:36: trainers.a.map: $TMP/sub/../maps/nope.json: no such file"
check "... the unknown key at file:line:col" has "$TMP/out" "$TMP/sub/badmap.json:4:61: unknown key 'args' in run.trainers.b (known: map)"

# ---- 5. --trainer-map whose --print-env fails: a SKIP ----------------------------------------------------
map nopython.map.json '{"trainer": "stubbed", "stub_env_fail": "nsa-probe: no python with torch (tried python3, /usr/bin/python3): apt-get install python3-torch"}'
expect_exit "--print-env fails: exit 0 (not 2)" 0 "$H" run "$TMP/plain.json" --profile ci --trainer-map "$TMP/maps/nopython.map.json" --out "$TMP/r5"
check "... the case is a SKIP quoting its first line" case_is "$TMP/r5" default SKIP \
  "the trainer nopython.map.json cannot run here: \`$TMP/probe --map $TMP/maps/nopython.map.json --print-env\` exited 2: nsa-probe: no python with torch (tried python3, /usr/bin/python3): apt-get install python3-torch"
check "... and the run says so on stderr" has "$TMP/out" "no python with torch"

# ---- 6. no metrics with a [nsa_probe] FAIL line; a Python exception --------------------------------------
map nometrics.map.json '{"trainer": "stubbed", "stub_case": "no_metrics"}'
map raise.map.json '{"trainer": "stubbed", "stub_case": "raise"}'
scenario broken '"run": {"timeout_s": 60, "trainers": {"nometrics": {"map": "maps/nometrics.map.json"}, "raise": {"map": "maps/raise.map.json"}}}, "matrix": {"trainer": {"key": "run.trainer", "values": ["nometrics", "raise"]}}'
expect_exit "no metrics / an exception: exit 1" 1 "$H" run "$TMP/broken.json" --profile ci --out "$TMP/r6"
check "... no metrics: FAIL quoting the probe's FAIL line" case_is "$TMP/r6" trainer=nometrics FAIL \
  "the trainer exited 0 and wrote no metrics: [nsa_probe] FAIL: the script never called backward() (no optimizer step either)"
check "... the exception: CRASH, its exception line in the summary" case_is "$TMP/r6" trainer=raise CRASH \
  "rank 0 exited with code 1 (runtime failure): RuntimeError: stub trainer: shapes do not match at step 1"
check "... the traceback in the evidence, from its first line to the exception" python3 -c "
import sys; t = open('$TMP/r6/RESULTS.md').read()
i = t.find(\"rank 0's last Python traceback\"); b = t[i:t.find('\`\`\`', t.find('\`\`\`', i) + 3)]
sys.exit(not (i >= 0 and 'Traceback (most recent call last):' in b and 'in train_step' in b
              and b.rstrip().endswith('RuntimeError: stub trainer: shapes do not match at step 1')))"

# ---- 7. grad_arrival "trainer"; gate_init's fans and "fc2_gain": null ----------------------------------
rec() {  # rec MISSING EXPECTED ORDER: three steps of grad_trace records (JSON arrays)
  local s out=""
  for s in 1 2 3; do
    out="$out${out:+, }{\"step\": $s, \"rank\": 0, \"n_params\": 3, \"arrived\": 2, \"missing\": $1, \"expected_missing\": $2, \"nonfinite\": [], \"zero\": [], \"order\": $3}"
  done
  echo "[$out]"
}
map ga_ok.map.json "{\"trainer\": \"stubbed\", \"stub_grad_trace\": $(rec '["gate.w"]' '["gate.w"]' '["b.w", "a.w"]')}"
map ga_extra.map.json "{\"trainer\": \"stubbed\", \"stub_grad_trace\": $(rec '["gate.w", "a.w"]' '["gate.w"]' '["b.w"]')}"
map ga_arrived.map.json "{\"trainer\": \"stubbed\", \"stub_grad_trace\": $(rec '[]' '["gate.w"]' '["b.w", "gate.w", "a.w"]')}"
scenario arrival '"run": {"timeout_s": 60, "trainers": {"ok": {"map": "maps/ga_ok.map.json"}, "extra": {"map": "maps/ga_extra.map.json"}, "arrived": {"map": "maps/ga_arrived.map.json"}}}, "matrix": {"trainer": {"key": "run.trainer", "values": ["ok", "extra", "arrived"]}}' \
  '{"check": "grad_arrival", "expect_missing": "trainer"}'
expect_exit "grad_arrival \"trainer\": validate" 0 "$H" validate "$TMP/arrival.json"
expect_exit "... run (two cases fail)" 1 "$H" run "$TMP/arrival.json" --profile ci --out "$TMP/r7a"
check "... missing = the record's expected_missing: PASS" case_is "$TMP/r7a" trainer=ok PASS "missing = expected"
check "... one missing beyond it: FAIL naming rank, step, parameter" case_is "$TMP/r7a" trainer=extra FAIL "step 1 rank 0: 1 unexpected missing: a.w"
check "... one it names arrived: FAIL naming it" case_is "$TMP/r7a" trainer=arrived FAIL "step 1 rank 0: 1 expected-missing gradient(s) arrived: gate.w"

# gate_stats: fc2 std 0.0139 = Xavier(0.1) with the record's fans 100 and 3 (the config's fans,
# gate_hidden 16 and 3*2, give 0.0302: each case's verdict flips when the fans are ignored)
gate() {  # gate WSTD OUT_STD OUT_MEAN: a gate_stats record of two layers with fans 100, 3
  echo "[{\"step\": 1, \"rank\": 0, \"gate_act\": \"softmax\", \"gated\": true, \"layers\": [
    {\"layer\": 0, \"fc2_weight_std\": $1, \"fc2_bias_mean\": 0, \"out_std\": $2, \"out_mean\": $3, \"fc2_fan_in\": 100, \"fc2_fan_out\": 3},
    {\"layer\": 1, \"fc2_weight_std\": $1, \"fc2_bias_mean\": 0, \"out_std\": $2, \"out_mean\": $3, \"fc2_fan_in\": 100, \"fc2_fan_out\": 3}]}]"
}
map gate_ok.map.json "{\"trainer\": \"stubbed\", \"stub_gate_stats\": $(gate 0.0139 '[0.01, 0.01, 0.01]' '[0.3, 0.35, 0.35]')}"
map gate_off.map.json "{\"trainer\": \"stubbed\", \"stub_gate_stats\": $(gate 0.0302 '[0.01, 0.01, 0.01]' '[0.3, 0.35, 0.35]')}"
map gate_own.map.json "{\"trainer\": \"stubbed\", \"stub_gate_stats\": $(gate 5.0 '[0.01, 0.01, 0.01]' '[0.3, 0.35, 0.35]')}"
map gate_uniform.map.json "{\"trainer\": \"stubbed\", \"stub_gate_stats\": $(gate 5.0 '[0, 0, 0]' '[0.3333333333, 0.3333333333, 0.3333333333]')}"
gate_scenario() {  # gate_scenario NAME CHECK A B: a gate_init scenario over two map trainers
  cat >"$TMP/$1.json" <<EOF
{"name": "$1", "description": "gate_init against a map trainer", "family": "gate_init", $COMMON,
 "run": {"timeout_s": 60, "trainers": {"$3": {"map": "maps/gate_$3.map.json"}, "$4": {"map": "maps/gate_$4.map.json"}}},
 "matrix": {"trainer": {"key": "run.trainer", "values": ["$3", "$4"]}}, "profiles": {"ci": {}},
 "checks": [$2]}
EOF
}
gate_scenario gatefans '{"check": "gate_init", "fc2_gain": 0.1}' ok off
expect_exit "gate_init with the record's fc2 fans (one case fails)" 1 "$H" run "$TMP/gatefans.json" --profile ci --out "$TMP/r7b"
check "... fc2 std at Xavier of the record's fans: PASS" case_is "$TMP/r7b" trainer=ok PASS "by the trainer's fc2 fans"
check "... fc2 std at Xavier of the config's fans: FAIL" case_is "$TMP/r7b" trainer=off FAIL "fc2 weight std off the Xavier(gain 0.1) expectation 0.01393 in 2/2 layers"
gate_scenario gatenull '{"check": "gate_init", "fc2_gain": null}' own uniform
expect_exit "gate_init \"fc2_gain\": null: validate" 0 "$H" validate "$TMP/gatenull.json"
expect_exit "... run (one case fails)" 1 "$H" run "$TMP/gatenull.json" --profile ci --out "$TMP/r7c"
check "... any fc2 std: PASS (not compared)" case_is "$TMP/r7c" trainer=own PASS "not compared: the trainer's own init"
check "... an exactly uniform gate still FAILs" case_is "$TMP/r7c" trainer=uniform FAIL "uniform gate in 2/2 layers"

# ---- 8. where a HANG's Python stack stops: the probe's fault_hang, else the script's frame --------------
map hang_fault.map.json '{"trainer": "stubbed", "stub_case": "hang_fault"}'
map hang_hook.map.json '{"trainer": "stubbed", "stub_case": "hang_hook"}'
scenario hangs '"run": {"timeout_s": 60, "stall_s": 2, "trainers": {"fault": {"map": "maps/hang_fault.map.json"}, "hook": {"map": "maps/hang_hook.map.json"}}}, "matrix": {"trainer": {"key": "run.trainer", "values": ["fault", "hook"]}}'
expect_exit "two hangs in the probe's code: exit 1" 1 "$H" run "$TMP/hangs.json" --profile ci --out "$TMP/r8"
check "... the fault's HANG stops in the probe's fault_hang" bash -c "
grep -qF 'its stack stops in \`fault_hang ($TMP/r8/hangs/trainer=fault/site/nsa_probe/hooks.py:4)\`' '$TMP/r8/RESULTS.md'"
check "... the hook's HANG stops in the script's frame, past the probe's hook" bash -c "
grep -qF 'its stack stops in \`train ($TMP/r8/hangs/trainer=hook/train.py:2)\`' '$TMP/r8/RESULTS.md'"

# ---- 9. ddp_onestep without buckets.jsonl / rank_times.jsonl: the gradient trace and [DDP] lines ----------
map ddp.map.json '{"trainer": "stubbed", "stub_case": "ddp", "stub_features": {"transports": ["none", "gloo"], "bootstraps": ["env"], "ddp_modes": ["default", "find_unused"]}}'
cat >"$TMP/ddp.json" <<EOF
{"name": "ddp", "description": "data parallel through the probe", "family": "ddp_onestep",
 "config": "$SRC/configs/tiny.json", "overrides": {"train.steps": 1},
 "run": {"world_size": 2, "transport": "gloo", "timeout_s": 60, "stall_s": 2,
         "trainers": {"stub": {"map": "maps/ddp.map.json"}}, "trainer": "stub"},
 "profiles": {"ci": {}}, "matrix": {"mode": {"key": "train.ddp_mode", "values": ["default", "find_unused"]}},
 "checks": [{"check": "finite"}, {"check": "grad_arrival", "expect_missing": "trainer"}]}
EOF
expect_exit "ddp_onestep through the probe (default mode hangs)" 1 "$H" run "$TMP/ddp.json" --profile ci --out "$TMP/r9"
check "... default: HANG" case_is "$TMP/r9" mode=default HANG ""
check "... find_unused: PASS" case_is "$TMP/r9" mode=find_unused PASS ""
check "... the diagnosis names the rank and parameter from its [DDP] no-gradient line" \
  has "$TMP/r9/RESULTS.md" "**ddp · mode=default**: rank 1 got no gradient for \`blocks.1.gate.w\` at step 1"
check "... and that find_unused passes the same configuration" has "$TMP/r9/RESULTS.md" "with find_unused the same configuration passes (\`mode=find_unused\`)"
check "... the per-rank table from the gradient trace" has "$TMP/r9/RESULTS.md" "| mode=default | HANG | 0 | 3/3 (step 1) | — |"
check "... rank 1's missing gradient in it" has "$TMP/r9/RESULTS.md" "|  |  | 1 | 2/3 (step 1; no gradient: \`blocks.1.gate.w\`) | — |"

finish
