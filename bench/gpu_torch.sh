#!/usr/bin/env bash
# bench/gpu_torch.sh — the PyTorch trainer (adapters/torch) on a GPU machine, in one command
# (the same as on the CPU, with CUDA and nccl): cross-trainer parity on CUDA
# (nsa-train's CUDA backend against PyTorch autograd on CUDA, fp32 and bf16, from the same
# weights and batch: scenarios/cross_trainer_parity.json --profile gpu), then the families
# against the PyTorch trainer on CUDA (the ci profile's tiny model with train.backend=cuda:
# the gpu profile's m7c_125m at S up to 8192 is beyond a dense-masked autograd reference),
# clean and with the faults the detection matrix uses.
#
#   PHASES="build parity clean faults bf16" BUDGET=560 bash bench/gpu_torch.sh
#
# Needs the machine's python3 with a CUDA torch; .deps staged (tools/device-deps.sh) where
# jansson/cmocka headers are missing. Logs (one per step, each run's report, its RESULTS.md
# also as <step>.md) go to $OUT/logs.tgz (OUT default ./gpu-out; the device tool brings back
# at most 8 files); a summary of verdicts at the end.
set -u
. "$(dirname "$0")/gpu_lib.sh"   # gpu_run_begin, has, step
gpu_run_begin "build parity clean faults bf16" 560 torch
H=./$B/nsa-harness
T=adapters/torch/nsa-torch-train
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; date -u; } > "$LOG/device.txt" 2>&1

if has build; then
  step configure 120 cmake -S . -B "$B" -DCMAKE_CUDA_ARCHITECTURES=90a
  step build 300 cmake --build "$B" -j16 --target nsa-harness nsa-train
fi
# run NAME ARGS...: one nsa-harness run, its RESULTS.md kept as NAME.md
run() {
  local name=$1; shift
  step "$name" 240 "$H" run "$@" --out "$LOG/r_$name"
  cp "$LOG/r_$name/RESULTS.md" "$LOG/$name.md" 2>/dev/null
}
has parity && run parity scenarios/cross_trainer_parity.json --profile gpu
CU=(--profile ci --set train.backend=cuda --trainer-cmd "$T")
if has clean; then
  run clean scenarios/branch_isolation.json scenarios/gate_init.json scenarios/gc_bisection.json \
      scenarios/prefill_step5.json scenarios/seqlen_nan_sweep.json "${CU[@]}" --filter 'precision=fp32' --filter 'branch=*' \
      --filter 'gate=*' --filter 'ckpt=*' --filter 'prefill=*'
fi
if has faults; then
  run f_gate scenarios/gate_init.json "${CU[@]}" --fault gate_zero_init
  run f_gc scenarios/gc_bisection.json "${CU[@]}" --fault gc_recompute_mismatch=5
  run f_nan scenarios/seqlen_nan_sweep.json "${CU[@]}" --filter 'precision=fp32' --fault nan_at_seqlen=256
  run f_leak scenarios/prefill_step5.json "${CU[@]}" --fault prefill_state_leak
  run f_hang scenarios/branch_isolation.json "${CU[@]}" --filter 'branch=none,phi=avg' --fault hang=0:2:backward --timeout-scale 0.1
  run f_drop scenarios/branch_isolation.json "${CU[@]}" --fault drop_grad=blocks.1.attn.o_proj.weight
fi
if has bf16; then
  run bf16 scenarios/branch_isolation.json scenarios/gate_init.json "${CU[@]}" --set train.precision=bf16
fi
tar czf "$OUT/logs.tgz" --exclude='*.safetensors' --exclude='*.fr' -C "$(dirname "$LOG")" torch 2>/dev/null
echo "================ summary ================"
cat "$LOG/device.txt"
printf '%s\n' "${SUM[@]}"
for f in "$LOG"/*.md; do
  [ -f "$f" ] || continue
  echo "---- $(basename "$f" .md): $(grep -m1 -oE '\*\*[0-9]+ cases[^*]*\*\*' "$f")"
  grep -E '^\| [a-z_0-9]+ \| [^|]+ \| (\*\*)?(PASS|FAIL|HANG|CRASH|ERROR|SKIP)' "$f" | cut -c1-260 | head -40
done
