#!/usr/bin/env bash
# bench/gpu_regression.sh — the regression layer on a GPU machine, in one command per
# GPU run (GPU time is scarce; docs/regression.md):
#
#   PHASES="build train memcheck golden_record" COMMIT=<sha> BUDGET=560 bash bench/gpu_regression.sh
#   PHASES="golden_check perf_record perf_check" COMMIT=<sha> bash bench/gpu_regression.sh
#
# Phases, run in this order (each logs to its own file; a failing phase never stops the next;
# every phase is cut at a deadline, BUDGET seconds after the start, default 560, so the
# summary prints):
#   build          configure (sm_90a, -Werror) and build nsa-train, nsa-harness
#   golden_record  baseline record scenarios/golden_regression.json --profile gpu into BL
#   golden_check   run the golden scenario (gpu) against BL: every case must PASS (bitwise)
#   perf_record    baseline record scenarios/perf.json --profile gpu --repeat 5 into BL (the
#                  run-to-run spread sets the floor's tolerance)
#   perf_check     run perf.json (gpu) against BL: both cases must hold their floors
#   train          tests/gpu/cuda_train.sh (determinism, resume, parity, dumps of every precision)
#   memcheck       compute-sanitizer memcheck over whole nsa-train runs: every precision with
#                  --dump-step --dump-acts --save, then --resume
# BL (default golden/baselines) is where baselines are read and written; at the end it is
# packed into $OUT/baselines.tgz with the logs in $OUT/logs.tgz. COMMIT: the tree's
# commit (a copied tree has no .git), stamped into the baselines' provenance.
# Run from the repository root with .deps staged (tools/device-deps.sh).
set -u
. "$(dirname "$0")/gpu_lib.sh"   # gpu_run_begin, has, step
gpu_run_begin "build train memcheck golden_record golden_check perf_record perf_check"
BL=${BL:-golden/baselines}
COMMIT=${COMMIT:-unknown}
H="./$B/nsa-harness"

{ nvidia-smi; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv; date -u; echo "commit $COMMIT"; } > "$LOG/device.txt" 2>&1

if has build; then
  step configure 120 cmake -S . -B "$B" -DCMAKE_CUDA_ARCHITECTURES=90a -DNSA_WERROR=ON
  step build 420 cmake --build "$B" -j16 --target nsa-train nsa-harness
fi
has golden_record && step golden_record 560 "$H" baseline record scenarios/golden_regression.json --profile gpu \
  --baselines "$BL" --out "$LOG/golden_record" --commit "$COMMIT"
has golden_check && step golden_check 560 "$H" run scenarios/golden_regression.json --profile gpu --baselines "$BL" \
  --out "$LOG/golden_check" --quiet
has perf_record && step perf_record 560 "$H" baseline record scenarios/perf.json --profile gpu --repeat 5 \
  --baselines "$BL" --out "$LOG/perf_record" --commit "$COMMIT"
has perf_check && step perf_check 300 "$H" run scenarios/perf.json --profile gpu --baselines "$BL" --out "$LOG/perf_check" --quiet

has train && step train 300 bash tests/gpu/cuda_train.sh "$B"
if has memcheck; then
  MC="compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9"
  for p in bf16 fp16 fp32; do
    d=$LOG/mc_$p
    step "memcheck_$p" 150 $MC "./$B/nsa-train" --config configs/tiny.json --backend cuda --set train.precision=$p \
      --steps 3 --stop-after 2 --dump-step "$d/step1.safetensors" --dump-acts --save "$d/ck.safetensors" --out "$d" --quiet
    step "memcheck_${p}_resume" 150 $MC "./$B/nsa-train" --config configs/tiny.json --backend cuda --set train.precision=$p \
      --steps 3 --resume "$d/ck.safetensors" --out "$d" --quiet
  done
fi
# the small files of the reports (not the multi-GB step dumps) and the baselines
(cd "$(dirname "$LOG")" && find logs -name '*.safetensors' -delete -o -name '*.fr' -delete; tar czf "$OUT/logs.tgz" logs) 2>/dev/null
[ -d "$BL/gpu" ] && tar czf "$OUT/baselines.tgz" -C "$BL" gpu
echo "================ summary ================"
grep -E "H100|H200" "$LOG/device.txt" | head -2
printf '%s\n' "${SUM[@]}"
[ -f "$LOG/build.log" ] && grep -E "error|warning" "$LOG/build.log" | head -10
[ -f "$LOG/train.log" ] && { echo "---- train"; grep -E "PASS|FAIL|SKIP" "$LOG/train.log" | head -20; }
for f in "$LOG"/memcheck_*.log; do [ -f "$f" ] && echo "---- $(basename "$f" .log): $(grep -E "ERROR SUMMARY" "$f" | head -1)"; done
for f in golden_record perf_record; do [ -f "$LOG/$f.log" ] && { echo "---- $f"; grep -E "recorded|not recorded|PASS|FAIL|ERROR|SKIP" "$LOG/$f.log" | tail -14; }; done
for f in golden_check perf_check; do
  [ -f "$LOG/$f/RESULTS.md" ] && { echo "---- $f"; grep -E "^\*\*|^\| (golden_regression|perf) \|" "$LOG/$f/RESULTS.md" | cut -c1-260 | head -16; }
done
echo "logs: $OUT/logs.tgz  baselines: $OUT/baselines.tgz"
