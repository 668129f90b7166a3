#!/usr/bin/env bash
# tests/cli/showcase_bugs.sh BUILD_DIR — the example foreign trainer
# examples/showcase/train_showcase.py under the harness unchanged, through nsa_probe and its
# trainer map (docs/your-trainer.md), the families that judge no time and run one rank:
# with every bug off branch_isolation, gate_init, gc_bisection and seqlen_nan_sweep pass
# (three seeds on the fast ones); with each of the trainer's own bugs they exist for on
# (SHOWCASE_BUGS: gate_zero_init, inplace_op, nan_seqlen, gc_mid_layers), that family fails or
# crashes with the place named. The families that judge time or start ranks that must meet in
# time, the probe's faults and bad input: tests/cli/showcase_trainer.sh.
# Needs a python with torch and PyYAML (SKIP otherwise, exit 77). About 1.5 minutes on 2 cores.
set -uo pipefail
build=${1:?usage: showcase_bugs.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$here/lib/common.sh"
source "$here/lib/showcase.sh"   # TMP, H, MAP, run, res, line

# ---- every bug off: every family passes, no false alarm ---------------------------------
run clean scenarios/trainer/{branch_isolation,gate_init,gc_bisection,seqlen_nan_sweep}.json
check "clean: branch_isolation, gate_init, gc_bisection, seqlen_nan_sweep pass ($(tail -2 "$TMP/clean.out" | head -1))" test "$(cat "$TMP/clean.rc")" = 0
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

SHOWCASE_BUGS=gc_mid_layers run gc scenarios/trainer/gc_bisection.json
check "gc_mid_layers: every layer checkpointed FAILs the gradient comparison" has "$TMP/gc.out" "FAIL  trainer_gc_bisection/ckpt=[0,16)"
check "gc_mid_layers: the bisection's first culprit is layer 6, and [0,6) holds" \
  bash -c "grep -q 'checkpointing \*\*layer 6\*\* alone changes the gradients' '$TMP/gc/RESULTS.md' && ! grep -qE 'checkpointing \*\*layer [0-5]\*\*' '$TMP/gc/RESULTS.md'"
check "gc_mid_layers: layers 12..15 hold ([12,16) passes)" has "$TMP/gc.out" "PASS  trainer_gc_bisection/ckpt=[12,16)"

finish
