#!/usr/bin/env bash
# tests/cli/showcase_trainer.sh BUILD_DIR — a trainer this project did not write the harness
# for, under the harness unchanged: examples/showcase/train_showcase.py (a research-style
# PyTorch NSA trainer: argparse, a YAML config, environment knobs, DDP under torchrun's
# variables) through nsa_probe and its trainer map, with scenarios/trainer/*.json
# (docs/your-trainer.md), the part that judges time or starts ranks that must meet in time:
# with every bug off the families prefill_step5 (its step-time growth check) and ddp_onestep
# (2 gloo ranks) pass; with the trainer's own bugs that show as a hang or across ranks on
# (SHOWCASE_BUGS), the family that exists for it fails or hangs with the place named; the
# probe's faults over gloo (a rank whose parameter gets no gradient: HANG naming the rank and
# the parameter, every rank's stack); bad input. The other families and bugs, which judge no
# time: tests/cli/showcase_bugs.sh.
# Needs a python with torch and PyYAML (SKIP otherwise, exit 77). About 1.5 minutes on 2 cores.
set -uo pipefail
build=${1:?usage: showcase_trainer.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$here/lib/common.sh"
source "$here/lib/showcase.sh"   # TMP, H, MAP, run, res, line

# ---- every bug off: every family passes, no false alarm ---------------------------------
run clean scenarios/trainer/{ddp_onestep,prefill_step5}.json
check "clean: ddp_onestep and prefill_step5 pass ($(tail -2 "$TMP/clean.out" | head -1))" test "$(cat "$TMP/clean.rc")" = 0
check "clean: no FAIL, HANG, CRASH or SKIP" bash -c "! grep -qE '\] (FAIL|HANG|CRASH|SKIP|ERROR) ' '$TMP/clean.out'"

# ---- the trainer's own bugs that hang or show across ranks, caught with the place named -----
SHOWCASE_BUGS=prefill_leak run leak scenarios/trainer/prefill_step5.json --timeout-scale 0.5
check "prefill_leak: sequential prefill HANGs at step 5" has "$TMP/leak.out" "HANG  trainer_prefill_step5/prefill=sequential"
check "prefill_leak: ... rank 0 stalled at step 5" has "$TMP/leak.out" "rank 0 stalled at step 5"
check "prefill_leak: the diagnosis says where its Python stack stops (_make_room)" \
  has "$TMP/leak/RESULTS.md" "its stack stops in \`_make_room (examples/showcase/nsa_model.py:"
check "prefill_leak: batched prefill passes" has "$TMP/leak.out" "PASS  trainer_prefill_step5/prefill=batched"

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
