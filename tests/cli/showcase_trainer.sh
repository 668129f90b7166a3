#!/usr/bin/env bash
# tests/cli/showcase_trainer.sh BUILD_DIR — a trainer this project did not write the harness
# for, under the harness unchanged: examples/showcase/train_showcase.py (a research-style
# PyTorch NSA trainer: argparse, a YAML config, environment knobs, DDP under torchrun's
# variables) through nsa_probe and its trainer map, with scenarios/trainer/*.json
# (docs/your-trainer.md). With every bug off every family passes (three seeds on the fast
# ones); with each of the trainer's own bugs on (SHOWCASE_BUGS), the family that exists for it
# fails or hangs with the place named; the probe's faults over gloo (a rank whose parameter
# gets no gradient: HANG naming the rank and the parameter, every rank's stack); bad input.
# Needs a python with torch and PyYAML (SKIP otherwise, exit 77). About 3 minutes on 2 cores.
set -uo pipefail
build=${1:?usage: showcase_trainer.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$here/lib/common.sh"
torch_python_or_skip yaml
cd "$root"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
H=$build/nsa-harness
MAP=examples/showcase/showcase.map.json
unset SHOWCASE_BUGS
# run NAME [nsa-harness run args...]: a run into $TMP/NAME (console in $TMP/NAME.out)
run() { local n=$1; shift; "$H" run "$@" --trainer-map "$MAP" --out "$TMP/$n" >"$TMP/$n.out" 2>&1; echo $? >"$TMP/$n.rc"; }
res() { cat "$TMP/$1/RESULTS.md"; }
line() { grep -F -- "$2" "$TMP/$1.out"; }   # the console line of a case

# ---- every bug off: every family passes, no false alarm ---------------------------------
run clean scenarios/trainer/{branch_isolation,ddp_onestep,gate_init,gc_bisection,prefill_step5,seqlen_nan_sweep}.json
check "clean: every family passes ($(tail -2 "$TMP/clean.out" | head -1))" test "$(cat "$TMP/clean.rc")" = 0
check "clean: no FAIL, HANG, CRASH or SKIP" bash -c "! grep -qE '\] (FAIL|HANG|CRASH|SKIP|ERROR) ' '$TMP/clean.out'"
for s in 2 3; do
  run "seed$s" scenarios/trainer/gate_init.json scenarios/trainer/branch_isolation.json \
      scenarios/trainer/seqlen_nan_sweep.json --filter 'T=512' --filter 'T=384' --filter 'default' --filter 'branch=*' \
      --set train.seed=$s
  check "clean, seed $s: gate_init, branch_isolation, seqlen 384/512 pass" test "$(cat "$TMP/seed$s.rc")" = 0
done

# ---- each of the trainer's own bugs, caught by its family with the place named ----------
SHOWCASE_BUGS=gate_zero_init run gate scenarios/trainer/gate_init.json
check "gate_zero_init: gate_init FAILs: every layer's gate exactly uniform" \
  bash -c "grep -q 'FAIL  trainer_gate_init/default' '$TMP/gate.out' && grep -q 'uniform gate in 2/2 layers (0, 1): every output 0.500000' '$TMP/gate.out'"

SHOWCASE_BUGS=inplace_op run inplace scenarios/trainer/branch_isolation.json
check "inplace_op: CRASH where the selection branch runs (all, sel) with torch's in-place error" \
  bash -c "grep -q 'CRASH trainer_branch_isolation/branch=none' '$TMP/inplace.out' && grep -q 'CRASH trainer_branch_isolation/branch=sel' '$TMP/inplace.out' && grep -q 'modified by an inplace operation' '$TMP/inplace.out'"
check "inplace_op: cmp and win alone PASS" \
  bash -c "grep -q 'PASS  trainer_branch_isolation/branch=cmp' '$TMP/inplace.out' && grep -q 'PASS  trainer_branch_isolation/branch=win' '$TMP/inplace.out'"
check "inplace_op: the evidence quotes the Python traceback" has "$TMP/inplace/RESULTS.md" "Traceback (most recent call last)"

SHOWCASE_BUGS=nan_seqlen run nan scenarios/trainer/seqlen_nan_sweep.json
for T in 512 1024 2048; do
  check "nan_seqlen: T=$T FAILs naming layers.0.attn.select (layer 0, branch sel)" \
    bash -c "line=\$(grep -F 'trainer_seqlen_nan_sweep/T=$T ' '$TMP/nan.out' | grep -v ' run '); [[ \$line == *FAIL*'layers.0.attn.select (layer 0, branch sel'* ]]"
done
check "nan_seqlen: 128, 256, 384, 1000 pass" \
  bash -c "[ \$(grep -cE 'PASS  trainer_seqlen_nan_sweep/T=(128|256|384|1000) ' '$TMP/nan.out') = 4 ]"

SHOWCASE_BUGS=prefill_leak run leak scenarios/trainer/prefill_step5.json --timeout-scale 0.5
check "prefill_leak: sequential prefill HANGs at step 5" has "$TMP/leak.out" "HANG  trainer_prefill_step5/prefill=sequential"
check "prefill_leak: ... rank 0 stalled at step 5" has "$TMP/leak.out" "rank 0 stalled at step 5"
check "prefill_leak: the diagnosis says where its Python stack stops (_make_room)" \
  has "$TMP/leak/RESULTS.md" "its stack stops in \`_make_room (examples/showcase/nsa_model.py:"
check "prefill_leak: batched prefill passes" has "$TMP/leak.out" "PASS  trainer_prefill_step5/prefill=batched"

SHOWCASE_BUGS=gc_mid_layers run gc scenarios/trainer/gc_bisection.json
check "gc_mid_layers: every layer checkpointed FAILs the gradient comparison" has "$TMP/gc.out" "FAIL  trainer_gc_bisection/ckpt=[0,16)"
check "gc_mid_layers: the bisection's first culprit is layer 6, and [0,6) holds" \
  bash -c "grep -q 'checkpointing \*\*layer 6\*\* alone changes the gradients' '$TMP/gc/RESULTS.md' && ! grep -qE 'checkpointing \*\*layer [0-5]\*\*' '$TMP/gc/RESULTS.md'"
check "gc_mid_layers: layers 12..15 hold ([12,16) passes)" has "$TMP/gc.out" "PASS  trainer_gc_bisection/ckpt=[12,16)"

SHOWCASE_BUGS=unused_param run unused scenarios/trainer/ddp_onestep.json --filter 'mode=default' --filter 'mode=find_unused,branch=none'
check "unused_param: find_unused FAILs naming the parameter and a rank" \
  bash -c "grep -F 'trainer_ddp_onestep/mode=find_unused,branch=none' '$TMP/unused.out' | grep -q 'FAIL.*rank [01]: .*unexpected missing: layers.0.attn.select.score_temp'"
check "unused_param: the default mode's failure names each rank and the parameter" \
  bash -c "grep -q 'rank 0 got no gradient for \`layers.0.attn.select.score_temp\`' '$TMP/unused/RESULTS.md' && grep -q 'rank 1 got no gradient for \`layers.0.attn.select.score_temp\`' '$TMP/unused/RESULTS.md'"

# ---- the probe's faults on this trainer -------------------------------------------------------
t0=$SECONDS
run divergent scenarios/trainer/ddp_onestep.json --filter 'mode=default' --fault divergent_unused=1 --set train.steps=1 --timeout-scale 0.5
dt=$((SECONDS - t0))
check "divergent_unused=1 over gloo: HANG" has "$TMP/divergent.out" "HANG  trainer_ddp_onestep/mode=default,branch=none"
check "... within stall_s + 5 s of the start ($dt s; stall_s 15 s after --timeout-scale 0.5, plus start-up; wide: 45 s)" test "$dt" -le 45
check "... the rank and the parameter named" has "$TMP/divergent/RESULTS.md" "rank 1 got no gradient for \`layers.1.attn.gate.2.weight\`"
check "... rank 0 waits in the DDP all-reduce, rank 1 in the barrier" \
  bash -c "grep -q 'rank 0 stalled in phase \`comm\` at step 1, layer 0, op \`DDP bucket all-reduce\`' '$TMP/divergent/RESULTS.md' && grep -q 'rank 1 stalled in phase \`comm\` at step 1, op \`barrier\`' '$TMP/divergent/RESULTS.md'"
check "... every rank's Python stack" \
  bash -c "for r in 0 1; do grep -q 'Current thread' '$TMP/divergent/trainer_ddp_onestep/mode=default,branch=none/stacks/rank_'\$r'.txt' || exit 1; done"
run hang scenarios/trainer/gate_init.json --fault hang=0:1:backward --timeout-scale 0.5
check "hang=0:1:backward: HANG in backward, the stack stopping in the probe's fault_hang" \
  bash -c "grep -q 'HANG  trainer_gate_init/default' '$TMP/hang.out' && grep -q 'fault_hang' '$TMP/hang/RESULTS.md'"

# ---- bad input ----------------------------------------------------------------------------------
mkdir -p "$TMP/m"
cp examples/showcase/showcase.yaml.tmpl "$TMP/m/"
cp examples/showcase/train_showcase.py examples/showcase/nsa_model.py "$TMP/m/"
sed 's/"args":/"argz":/' "$MAP" >"$TMP/m/bad_key.map.json"
expect_exit "a map with an unknown key: exit 2" 2 "$H" run scenarios/trainer/gate_init.json --trainer-map "$TMP/m/bad_key.map.json"
check "... naming file:line:col and the key" bash -c "grep -qE 'bad_key.map.json:4:3: unknown key .argz. in the map' '$TMP/out'"
sed 's/"trainer": "showcase"/"trainer": 7/' "$MAP" >"$TMP/m/bad_type.map.json"
expect_exit "a map with a wrong type: exit 2" 2 "$H" run scenarios/trainer/gate_init.json --trainer-map "$TMP/m/bad_type.map.json"
check "... naming file:line:col" bash -c "grep -qE 'bad_type.map.json:2:14: trainer: expected a name \(a string\), got an integer' '$TMP/out'"
cp "$MAP" "$TMP/m/tmpl.map.json"
sed 's/{{train.seq_len}}/{{train.sequence_len}}/' examples/showcase/showcase.yaml.tmpl >"$TMP/m/showcase.yaml.tmpl"
expect_exit "a template naming an unknown knob: exit 2" 2 "$H" run scenarios/trainer/gate_init.json --trainer-map "$TMP/m/tmpl.map.json"
check "... naming the template's line and column" bash -c "grep -qE 'showcase.yaml.tmpl:20:12: the placeholder \{\{train.sequence_len\}\} names no knob' '$TMP/out'"
cp examples/showcase/showcase.yaml.tmpl "$TMP/m/"
printf 'import torch\nimport showcase_helpers_that_do_not_exist\n' >"$TMP/m/train_showcase.py"
"$H" run scenarios/trainer/gate_init.json --trainer-map "$TMP/m/tmpl.map.json" --out "$TMP/import_crash" >"$TMP/import_crash.out" 2>&1
check "a trainer that dies at import: CRASH, not HANG" has "$TMP/import_crash.out" "CRASH trainer_gate_init/default"
check "... with its Python exception" has "$TMP/import_crash.out" "ModuleNotFoundError: No module named 'showcase_helpers_that_do_not_exist'"
printf 'import torch\nm = torch.nn.Linear(4, 4)\nprint("evaluating only", m(torch.ones(4)).sum().item())\n' >"$TMP/m/train_showcase.py"
"$H" run scenarios/trainer/gate_init.json --trainer-map "$TMP/m/tmpl.map.json" --out "$TMP/nobwd" >"$TMP/nobwd.out" 2>&1
check "a trainer that never calls backward: FAIL saying so" \
  bash -c "grep -q 'FAIL  trainer_gate_init/default' '$TMP/nobwd.out' && grep -q 'never called backward()' '$TMP/nobwd.out'"
finish
