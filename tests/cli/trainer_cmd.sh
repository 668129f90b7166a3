#!/usr/bin/env bash
# tests/cli/trainer_cmd.sh BUILD_DIR — another trainer under the same scenarios
# (docs/trainer-protocol.md version 2), with the minimal example trainer
# docs/examples/minimal_trainer.py (plain python3, no torch):
#  1. `run --trainer-cmd "python3 docs/examples/minimal_trainer.py"` passes; the case got
#     CASE/config.json (the resolved config: what nsa-train --check-config prints) and no --set;
#     RESULTS.md's header and env.json name the minimal trainer (protocol 2);
#  2. a case needing what its --protocol-info lacks is a SKIP naming it: backend cpu64, data
#     'text', fault crash, diagnostic trace_grads (grad_arrival), init_weights (run.init_weights
#     "shared"), transport gloo;
#  3. the heartbeat file drives the watchdog: with --fault hang=0:2:forward the verdict is HANG
#     at step 2, phase forward, and the diagnosis names `fault_hang (docs/examples/
#     minimal_trainer.py:N)` from its faulthandler stack; a clean run of ~4 s under stall_s 1.5
#     (beats every ~10 ms) is no false HANG (margins: 1.5 s against 10 ms beats; loaded 2 cores);
#  4. bad values exit 2 naming the flag or file:line:col: an empty --trainer-cmd, an
#     unterminated quote, --trainer with --trainer-cmd, an unknown run.trainer;
#  5. a matrix over run.trainer runs both nsa-train and the minimal trainer (both PASS), and
#     the report says which ran each case;
#  6. (when nsa-train lists init_weights) run.init_weights "shared": the runner's nsa-train
#     writes each case's init_weights.safetensors, the case's trainer gets --init-weights;
#     nsa-train by path and nsa-train as a command (config.json) give the same losses;
#  7. a self-test whose run.trainer_cmd names the minimal trainer (relative to the file):
#     its hang detection PASSes, the nested report naming the minimal trainer;
#  8. transport gloo, 2 ranks (the example made to list gloo): the env launcher starts both with
#     --transport gloo --bootstrap env and a heartbeat file each; rank 1's hang is a HANG naming
#     rank 1, step 3, backward; both ranks answered SIGUSR1 with a stack;
#  9. a scenario's trainer whose --print-env fails (the PyTorch adapter without torch): its
#     cases are a SKIP quoting its first line; the other trainer's still run;
# 10. the example in docs/trainer-protocol.md is the file, byte for byte.
set -u
BUILD=${1:?usage: trainer_cmd.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
H="$BUILD/nsa-harness"
SRC=$(pwd)
MT=docs/examples/minimal_trainer.py
[ -x "$H" ] && [ -x "$BUILD/nsa-train" ] || { echo "SKIP: nsa-harness or nsa-train not built in $BUILD"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
[ -f "$MT" ] || { echo "FAIL: run from the source root ($MT not found)"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, expect_exit, has, finish
CMD="python3 $MT"

# scenario NAME STEPS STALL_S [EXTRA JSON members]: a scenario of the tiny config in $TMP
scenario() {
  cat >"$TMP/$1.json" <<EOF
{"name": "$1", "description": "the minimal trainer under the runner", "family": "branch_isolation",
 "config": "$SRC/configs/tiny.json", "overrides": {"train.steps": $2, "train.batch_size": 1, "train.seq_len": 32},
 "run": {"timeout_s": 60, "stall_s": $3}, "profiles": {"ci": {}}$4,
 "checks": [{"check": "finite"}, {"check": "loss_decrease", "min_drop": 0.01}]}
EOF
}

# ---- 1. a run with --trainer-cmd ---------------------------------------------------------------------
expect_exit "the minimal trainer rejects an unknown flag with exit 2" 2 python3 "$MT" --bogus
check "... naming it" has "$TMP/out" "unknown option '--bogus'"
check "... its --protocol-info: protocol 2, only what it supports" python3 -c "
import json, subprocess, sys; i = json.loads(subprocess.check_output([sys.executable, '$MT', '--protocol-info']))
f = i['features']; sys.exit(not (i['protocol'] == 2 and f['diagnostics'] == ['heartbeat', 'stack_dump'] and f['faults'] == ['hang']))"
scenario mini 7 30 ""
expect_exit "--trainer-cmd: the minimal trainer's case passes" 0 "$H" run "$TMP/mini.json" --profile ci --trainer-cmd "$CMD" --out "$TMP/r1"
C="$TMP/r1/mini/default"
check "... the case got CASE/config.json, the resolved config (train.steps 7)" python3 -c "
import json, sys; c = json.load(open('$C/config.json')); sys.exit(not (c['train']['steps'] == 7 and c['train']['seq_len'] == 32))"
"$BUILD/nsa-train" --config configs/tiny.json --set train.steps=7 --set train.batch_size=1 --set train.seq_len=32 \
  --check-config >"$TMP/check_config.json"
check "... config.json is what nsa-train --check-config prints for those overrides" python3 -c "
import json, sys; sys.exit(json.load(open('$C/config.json')) != json.load(open('$TMP/check_config.json')))"
check "... its command: --config CASE/config.json, --heartbeat, --stack-file, no --set" bash -c "
grep -q 'command: python3 $SRC/$MT --config $C/config.json --out $C --rank 0 --heartbeat $C/ranks/rank_0.hb --stack-file' '$C/output.log' &&
! grep -q -- '--set' '$C/output.log' && ! grep -q -- '--flight-recorder' '$C/output.log'"
check "... it wrote 7 metrics records" test "$(wc -l <"$C/metrics.jsonl")" = 7
check "... its last heartbeat says it exited 0" python3 -c "
import json, sys; b = json.load(open('$C/ranks/rank_0.hb')); sys.exit(not (b['exited'] and b['exit_code'] == 0 and b['phase'] == 'exit'))"
check "... RESULTS.md's header names the minimal trainer and protocol 2" \
  has "$TMP/r1/RESULTS.md" "· trainer \`python3 $SRC/$MT\` (minimal-trainer 1, protocol 2) ·"
# a trainer given as a command is asked --print-env once per run, not once more per case (for a
# Python trainer each ask starts the interpreter): a wrapper counts the asks over a 3-case matrix
cat >"$TMP/counting_trainer" <<EOF
#!/bin/sh
for a in "\$@"; do [ "\$a" = --print-env ] && echo ask >>"$TMP/print_env_asks"; done
exec python3 "$SRC/$MT" "\$@"
EOF
chmod +x "$TMP/counting_trainer"
scenario three 2 30 ', "matrix": {"seed": {"key": "train.seed", "values": [1, 2, 3]}}'
expect_exit "a 3-case run with a command trainer passes" 0 "$H" run "$TMP/three.json" --profile ci --trainer-cmd "$TMP/counting_trainer" --out "$TMP/r3"
check "... the trainer was asked --print-env once, not once per case ($(cat "$TMP/print_env_asks" 2>/dev/null | wc -l) asks)" \
  test "$(cat "$TMP/print_env_asks" 2>/dev/null | wc -l)" = 1
check "... each case's env.json still has the case's config digest and seed (filled in by the runner)" python3 -c "
import json, sys
ok = True
for s in (1, 2, 3):
    e = json.load(open('$TMP/r3/three/seed=%d/env.json' % s))
    ok &= e['config']['seed'] == s and len(e['config']['digest']) > 8 and 'asked once per run' in e['print_env']
sys.exit(not ok)"
check "... env.json names it (runner.trainer, runner.trainer_protocol, the case's trainer)" python3 -c "
import json, sys; r = json.load(open('$TMP/r1/env.json'))['runner']; c = json.load(open('$C/env.json'))['trainer']
sys.exit(not (r['trainer'] == 'python3 $SRC/$MT' and r['trainer_protocol']['protocol'] == 2 and
              r['trainer_protocol']['info']['trainer'] == 'minimal-trainer' and c['command'] == ['python3', '$SRC/$MT']))"

# ---- 2. what it lacks is a SKIP naming it --------------------------------------------------------------
scenario lacks 3 30 ', "matrix": {"v": {"values": {"cpu64": {"train.backend": "cpu64"}, "text": {"data.kind": "text", "data.path": "'"$SRC"'/README.md"}, "ok": {"train.seed": 3}}}}'
"$H" run "$TMP/lacks.json" --profile ci --trainer-cmd "$CMD" --out "$TMP/r2" >"$TMP/r2.out" 2>&1
rc=$?
check "a backend and a data kind it lacks: exit 0 (exit $rc)" test "$rc" = 0
check "... backend cpu64 is a SKIP naming it" grep -q "SKIP  lacks/v=cpu64 (.*): the trainer does not support backend 'cpu64' (--protocol-info)" "$TMP/r2.out"
check "... data 'text' is a SKIP naming it" grep -q "SKIP  lacks/v=text (.*): the trainer does not support data 'text' (--protocol-info)" "$TMP/r2.out"
check "... the third case still PASSes" grep -q "PASS  lacks/v=ok" "$TMP/r2.out"
"$H" run "$TMP/mini.json" --profile ci --trainer-cmd "$CMD" --fault crash=0:1 --out "$TMP/r3" >"$TMP/r3.out" 2>&1
check "a fault it lacks (crash, which nsa-train knows): SKIP naming it" grep -q "SKIP  mini/default (.*): the trainer does not support fault 'crash' (--protocol-info)" "$TMP/r3.out"
expect_exit "a fault no trainer knows: exit 2 before any case" 2 "$H" run "$TMP/mini.json" --profile ci --trainer-cmd "$CMD" --fault crahs=0:1 --out "$TMP/r3b"
check "... naming the fault" has "$TMP/out" "--fault crahs=0:1: "
sed 's/{"check": "finite"}/{"check": "grad_arrival", "expect_missing": []}/' "$TMP/mini.json" >"$TMP/diag.json"
"$H" run "$TMP/diag.json" --profile ci --trainer-cmd "$CMD" --out "$TMP/r4" >"$TMP/r4.out" 2>&1
check "a check needing a diagnostic it lacks (grad_arrival: trace_grads): SKIP naming it" \
  grep -q "SKIP  mini/default (.*): the trainer does not support diagnostic 'trace_grads' (--protocol-info)" "$TMP/r4.out"
scenario init 3 30 ''
sed -i 's/"stall_s": 30}/"stall_s": 30, "init_weights": "shared"}/' "$TMP/init.json"
"$H" run "$TMP/init.json" --profile ci --trainer-cmd "$CMD" --out "$TMP/r5" >"$TMP/r5.out" 2>&1
check "run.init_weights \"shared\" with a trainer without init_weights: SKIP naming it" \
  grep -q "SKIP  init/default (.*): the trainer does not support diagnostic 'init_weights' (--protocol-info)" "$TMP/r5.out"
scenario gloo 3 30 ''
sed -i 's/"stall_s": 30}/"stall_s": 30, "world_size": 2, "transport": "gloo"}/' "$TMP/gloo.json"
"$H" run "$TMP/gloo.json" --profile ci --out "$TMP/r6" >"$TMP/r6.out" 2>&1
check "transport gloo with nsa-train (which lacks it): SKIP naming it" \
  grep -q "SKIP  gloo/default (.*): the trainer does not support transport 'gloo' (--protocol-info)" "$TMP/r6.out"

# ---- 3. the heartbeat drives the watchdog -------------------------------------------------------------
scenario beat 60 1.5 ""
"$H" run "$TMP/beat.json" --profile ci --trainer-cmd "$CMD" --fault hang=0:2:forward --out "$TMP/h1" >"$TMP/h1.out" 2>&1
rc=$?
N=$(grep -n 'time.sleep(3600)' "$MT" | cut -d: -f1)
check "hang=0:2:forward: HANG at step 2, phase forward (exit $rc)" \
  bash -c "test $rc = 1 && grep -q 'HANG  beat/default (.*): rank 0 stalled at step 2, phase forward' '$TMP/h1.out'"
check "... the diagnosis: its stack stops in fault_hang (docs/examples/minimal_trainer.py:$N)" \
  has "$TMP/h1/RESULTS.md" "its stack stops in \`fault_hang (docs/examples/minimal_trainer.py:$N)\`"
check "... the stack file is Python's faulthandler dump of the main thread" \
  grep -q "^Current thread 0x.*(most recent call first):" "$TMP/h1/beat/default/stacks/rank_0.txt"
check "... the trainer answered SIGUSR1 with exit 138" grep -q "rank 0: stack written" "$TMP/h1/beat/default/output.log"
"$H" run "$TMP/beat.json" --profile ci --trainer-cmd "$CMD" --out "$TMP/h2" >"$TMP/h2.out" 2>&1
rc=$?
check "a clean run longer than stall_s while it beats: PASS, no false HANG (exit $rc)" \
  bash -c "test $rc = 0 && grep -q 'PASS  beat/default' '$TMP/h2.out'"
check "... and it did run longer than stall_s (1.5 s)" python3 -c "
import json, sys; w = json.load(open('$TMP/h2/summary.json'))['cases'][0]['time_s']; sys.exit(not w > 1.5)"

# ---- 4. bad values ------------------------------------------------------------------------------------
expect_exit "an empty --trainer-cmd" 2 "$H" run "$TMP/mini.json" --profile ci --trainer-cmd "  " --out "$TMP/b1"
check "... names the flag" has "$TMP/out" "nsa-harness run: --trainer-cmd '  ': expected a command"
expect_exit "an unterminated quote" 2 "$H" run "$TMP/mini.json" --profile ci --trainer-cmd "python3 'x.py" --out "$TMP/b2"
check "... names the flag, the value and the quote" has "$TMP/out" "nsa-harness run: --trainer-cmd 'python3 'x.py': unterminated ' quote at byte 9"
expect_exit "--trainer and --trainer-cmd together" 2 "$H" run "$TMP/mini.json" --profile ci --trainer "$BUILD/nsa-train" --trainer-cmd "$CMD" --out "$TMP/b3"
check "... names both" bash -c "grep -q -- '--trainer $BUILD/nsa-train and --trainer-cmd' '$TMP/out'"
scenario unk 3 30 ', "matrix": {"trainer": {"key": "run.trainer", "values": ["nsa-train", "torch"]}}'
expect_exit "an unknown run.trainer" 2 "$H" run "$TMP/unk.json" --profile ci --out "$TMP/b4"
check "... file:line:col naming it" grep -q "^$TMP/unk.json:3:[0-9]*: unknown trainer 'torch' (known: \"nsa-train\"" "$TMP/out"
expect_exit "a command that is no trainer: exit 2 before any case" 2 "$H" run "$TMP/mini.json" --profile ci --trainer-cmd "false" --out "$TMP/b5"
check "... naming the command and --print-env" has "$TMP/out" "\`false --print-env\` failed (exit status 1): is the trainer built and runnable (see --trainer-cmd)?"

# ---- 5. a matrix over run.trainer ----------------------------------------------------------------------
mkdir -p "$TMP/sc"
scenario both 3 30 ', "matrix": {"trainer": {"key": "run.trainer", "values": ["nsa-train", "mini"]}}'
REL=$(python3 -c "import os; print(os.path.relpath('$SRC/$MT', '$TMP/sc'))")   # relative to the scenario's folder
sed 's|"stall_s": 30}|"stall_s": 30, "trainers": {"mini": ["python3", "'"$REL"'"]}}|' "$TMP/both.json" >"$TMP/sc/both.json"
"$H" run "$TMP/sc/both.json" --profile ci --out "$TMP/m1" >"$TMP/m1.out" 2>&1
rc=$?
check "a matrix over run.trainer: both cases PASS (exit $rc)" \
  bash -c "test $rc = 0 && grep -q 'PASS  both/trainer=nsa-train' '$TMP/m1.out' && grep -q 'PASS  both/trainer=mini' '$TMP/m1.out'"
check "... nsa-train ran one (--set, flight recorder), the minimal trainer the other (config.json, heartbeat)" bash -c "
grep -q 'command: $BUILD/nsa-train --config .* --set train.steps=3 .*--flight-recorder' '$TMP/m1/both/trainer=nsa-train/output.log' &&
grep -q 'command: python3 $SRC/$MT --config $TMP/m1/both/trainer=mini/config.json .*--heartbeat' '$TMP/m1/both/trainer=mini/output.log'"
check "... the header names both, the Trainers section each case's" bash -c "
grep -q '· trainer mini \`python3 $SRC/$MT\` (minimal-trainer 1, protocol 2)' '$TMP/m1/RESULTS.md' &&
grep -q '^| both | trainer=mini | \`mini\` |' '$TMP/m1/RESULTS.md'"
check "... summary.json says which trainer ran each case" python3 -c "
import json, sys; t = json.dumps(json.load(open('$TMP/m1/summary.json')))
sys.exit(not ('\"trainer\": \"mini\"' in t and '\"trainer\": \"nsa-train\"' in t))"

# ---- 6. shared start weights (needs nsa-train --write-init / --init-weights: protocol 2's init_weights) ---
if "$BUILD/nsa-train" --protocol-info | grep -q '"init_weights"'; then
  scenario shared 2 30 ', "matrix": {"trainer": {"key": "run.trainer", "values": ["nsa-train", "nt"]}}'
  sed -i 's|"stall_s": 30}|"stall_s": 30, "init_weights": "shared", "trainers": {"nt": ["'"$BUILD"'/nsa-train"]}}|' "$TMP/shared.json"
  "$H" run "$TMP/shared.json" --profile ci --out "$TMP/w1" >"$TMP/w1.out" 2>&1
  rc=$?
  W="$TMP/w1/shared"
  check "run.init_weights \"shared\": nsa-train by path and as a command both PASS (exit $rc)" \
    bash -c "test $rc = 0 && test \$(grep -c '^\[[0-9]/2\] PASS' '$TMP/w1.out') = 2"
  check "... each case: the runner's nsa-train wrote init_weights.safetensors, the trainer got --init-weights" bash -c "
for c in trainer=nsa-train trainer=nt; do test -s '$W/'\$c/init_weights.safetensors &&
  grep -q -- '--write-init $W/'\$c/init_weights.safetensors '$W/'\$c/output.log &&
  grep -q -- 'command: .*--init-weights $W/'\$c/init_weights.safetensors '$W/'\$c/output.log || exit 1; done"
  check "... the two trainer forms give the same losses bitwise" python3 -c "
import json, sys; l = [[json.loads(x)['loss'] for x in open('$W/' + c + '/metrics.jsonl')] for c in ('trainer=nsa-train', 'trainer=nt')]
sys.exit(not (len(l[0]) == 2 and l[0] == l[1]))"
else
  echo "(nsa-train lists no init_weights yet: section 7 not run)"
fi

# ---- 7. a self-test detection with the file's run.trainer_cmd ----------------------------------------------
REL2=$(python3 -c "import os; print(os.path.relpath('$SRC/$MT', '$TMP'))")   # relative to the self-test file
cat >"$TMP/st.json" <<EOF
{"name": "st", "description": "the minimal trainer's hang, caught", "family": "selftest", "profiles": {"ci": {}},
 "run": {"timeout_s": 120, "trainer_cmd": "python3 $REL2"},
 "detections": [{"name": "beat.hang", "scenario": "beat.json", "fault": "hang=0:2:forward",
                 "expect": {"exit": 1, "verdicts": {"default": "HANG"},
                            "contains": ["its stack stops in \`fault_hang (docs/examples/minimal_trainer.py:$N)\`"]}}]}
EOF
"$H" run "$TMP/st.json" --profile ci --out "$TMP/s1" >"$TMP/s1.out" 2>&1
rc=$?
check "a self-test detection run by run.trainer_cmd: PASS (exit $rc)" bash -c "test $rc = 0 && grep -q 'PASS  st/beat.hang' '$TMP/s1.out'"
check "... the nested run got --trainer-cmd: its report names the minimal trainer" \
  has "$TMP/s1/st/beat.hang/run/RESULTS.md" "· trainer \`python3 $SRC/$MT\` (minimal-trainer 1, protocol 2) ·"

# ---- 8. two ranks over gloo, each with its heartbeat -------------------------------------------------------
# the example made to list transport gloo / bootstrap env and read its rank from RANK (a stub: it does
# no collective; what is tested is the runner's side: the env launcher, two heartbeat files, SIGUSR1 to both)
sed -e 's/"transports": \["none"\]/"transports": ["none", "gloo"]/' -e 's/"bootstraps": \[\]/"bootstraps": ["env"]/' \
    -e 's/VALUED = {"--config", "--out", "--rank",/VALUED = {"--transport", "--bootstrap", "--log-file", "--config", "--out", "--rank",/' \
    -e 's/rank = int(a.get("--rank", "0"))/rank = int(a.get("--rank", os.environ.get("RANK", "0")))/' \
    -e 's/"metrics.jsonl"), "w") as m:/"metrics.jsonl" if rank == 0 else "m%d.jsonl" % rank), "w") as m:/' "$MT" >"$TMP/gloo_trainer.py"
scenario gl 40 1.5 ''
sed -i 's/"stall_s": 1.5}/"stall_s": 1.5, "world_size": 2, "transport": "gloo"}/' "$TMP/gl.json"
"$H" run "$TMP/gl.json" --profile ci --trainer-cmd "python3 $TMP/gloo_trainer.py" --fault hang=1:3:backward --out "$TMP/g1" >"$TMP/g1.out" 2>&1
rc=$?
G="$TMP/g1/gl/default"
check "gloo, 2 ranks: the env launcher starts both with --transport gloo --bootstrap env and a heartbeat each" bash -c "
grep -q 'command: RANK=0 WORLD_SIZE=2 .* --transport gloo --bootstrap env .*--heartbeat $G/ranks/rank_%r.hb' '$G/output.log' &&
test -s '$G/ranks/rank_0.hb' && test -s '$G/ranks/rank_1.hb'"
check "... rank 1's hang=1:3:backward: HANG naming rank 1, step 3, backward (exit $rc)" \
  bash -c "test $rc = 1 && grep -q 'HANG  gl/default (.*): rank 1 stalled at step 3, phase backward' '$TMP/g1.out'"
check "... both ranks answered SIGUSR1 with a faulthandler stack" bash -c "
grep -q 'rank 0: stack written' '$G/output.log' && grep -q 'rank 1: stack written' '$G/output.log' &&
grep -q 'in fault_hang' '$G/stacks/rank_1.txt' && ! grep -q 'in fault_hang' '$G/stacks/rank_0.txt'"

# ---- 9. a scenario's trainer that cannot run here --------------------------------------------------------
printf '#!/bin/sh\necho "nsa-torch-train: no python with torch: apt-get install python3-torch" >&2\nexit 2\n' >"$TMP/no_torch"
chmod +x "$TMP/no_torch"
scenario gone 3 30 ', "matrix": {"trainer": {"key": "run.trainer", "values": ["nsa-train", "gone"]}}'
sed -i 's|"stall_s": 30}|"stall_s": 30, "trainers": {"gone": ["'"$TMP"'/no_torch"]}}|' "$TMP/gone.json"
"$H" run "$TMP/gone.json" --profile ci --fault hang=0:9:forward --out "$TMP/n1" >"$TMP/n1.out" 2>&1
rc=$?
check "a scenario's trainer whose --print-env fails: its case is a SKIP quoting why, the other runs (exit $rc)" bash -c "
test $rc = 0 && grep -q 'PASS  gone/trainer=nsa-train' '$TMP/n1.out' &&
grep -q \"SKIP  gone/trainer=gone (.*): the trainer gone cannot run here: \\\`$TMP/no_torch --print-env\\\` exited 2: nsa-torch-train: no python with torch: apt-get install python3-torch\" '$TMP/n1.out'"

# ---- 10. the doc quotes the file --------------------------------------------------------------------------
sed -n '/^<!-- minimal_trainer.py: begin -->$/,/^<!-- minimal_trainer.py: end -->$/p' docs/trainer-protocol.md |
  sed '1,2d;$d' | sed '$d' >"$TMP/quoted.py"
check "docs/trainer-protocol.md quotes docs/examples/minimal_trainer.py exactly" cmp -s "$TMP/quoted.py" "$MT"
finish
