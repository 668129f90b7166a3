#!/usr/bin/env bash
# bench/gpu_probe.sh — a foreign PyTorch trainer (examples/showcase/) under nsa-harness on GPUs,
# through nsa_probe and its trainer map, on the machine it is started on (2 GPUs for ddp):
#
#   PHASES="build overhead torchrun harness suite" COMMIT=<sha> BUDGET=560 bash bench/gpu_probe.sh
#
# Phases (each step logs to its own file; a failing step never stops the next; every step is
# cut at the deadline, BUDGET seconds after the start, default 560):
#   build     nsa-harness and nsa-train without the CUDA backend (the runner drives the
#             Python trainer; nothing of ours runs on the GPU) into $BUILD (default build-cpu)
#   overhead  the probe's cost on one GPU: the showcase at its m7c shape (OVERHEAD_ARGS,
#             default --batch-size 2 --seq-len 2048), STEPS steps (default 30) plain, under the
#             probe with the heartbeat only (--no-anomaly --no-metrics), and with what the
#             runner turns on for a case (heartbeat, metrics, anomaly); the median of the
#             script's own per-step times after 5 warm-up steps, in that order, interleaved
#             ROUNDS times (default 2)
#   torchrun  torch's own torchrun, 2 processes, NCCL: `torchrun -m nsa_probe` clean, then with
#             divergent_unused=1 (the [DDP] line naming rank 1's parameter; the run is cut after
#             60 s: NCCL waits for the bucket that rank 1 never launches)
#   harness   scenarios/trainer/ddp_onestep.json, gpu profile (NCCL, 2 ranks): clean, then
#             --fault divergent_unused=1 on the default mode (HANG or CRASH naming the rank and the
#             parameter, every rank's Python stack)
#   suite     scenarios/trainer/*.json (or the files in SUITE), gpu profile, the showcase's map:
#             the families on the GPU
# stdout: the device and commit, each step's exit code and time, the overhead table, the [DDP]
# lines, each report's verdict lines. Each report's RESULTS.md goes to $OUT/NAME_RESULTS.md, the
# step logs to $OUT/probe_logs.tgz (the reports' dumps left out).
set -u
. "$(dirname "$0")/gpu_lib.sh"   # gpu_run_begin, has, step
BUILD=${BUILD:-build-cpu}
gpu_run_begin "build overhead torchrun harness suite"
COMMIT=${COMMIT:-unknown}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 OMP_NUM_THREADS=4
MAP=examples/showcase/showcase.map.json
SHOW=examples/showcase
{ nvidia-smi -L; date -u; echo "commit $COMMIT"; python3 -c 'import torch, yaml; print("torch", torch.__version__)'; } \
  > "$LOG/device.txt" 2>&1
cat "$LOG/device.txt"

if has build; then
  step configure 120 cmake -S . -B "$B" -DNSA_ENABLE_CUDA=OFF -DNSA_WERROR=ON
  step build 400 cmake --build "$B" -j"$(nproc)" --target nsa-train nsa-harness
fi

# median_ms LOG: the median of the showcase's "| 12.3 ms" per-step times after 5 warm-up steps
median_ms() { grep -oE '\| +[0-9.]+ ms' "$1" | awk '{print $2}' | tail -n +6 | sort -n |
              awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2); else print "-"}'; }
if has overhead; then
  STEPS=${STEPS:-30}
  OA=${OVERHEAD_ARGS:---batch-size 2 --seq-len 2048}
  tbl=()
  for r in $(seq 1 "${ROUNDS:-2}"); do
    # shellcheck disable=SC2086
    step "plain_$r" 300 bash -c "cd $SHOW && python3 train_showcase.py --config configs/m7c.yaml --dataset random --steps $STEPS --save-dir /tmp/sc $OA"
    # shellcheck disable=SC2086
    step "heartbeat_$r" 300 bash -c "cd $SHOW && PYTHONPATH=$PWD/probe python3 -m nsa_probe --map showcase.map.json --out /tmp/po_$r \
      --heartbeat /tmp/po_$r.hb --no-anomaly --no-metrics train_showcase.py --config configs/m7c.yaml --dataset random --steps $STEPS --save-dir /tmp/sc $OA"
    # shellcheck disable=SC2086
    step "harness_$r" 300 bash -c "cd $SHOW && PYTHONPATH=$PWD/probe python3 -m nsa_probe --map showcase.map.json --out /tmp/pr_$r \
      --heartbeat /tmp/pr_$r.hb train_showcase.py --config configs/m7c.yaml --dataset random --steps $STEPS --save-dir /tmp/sc $OA"
    tbl+=("round $r: plain $(median_ms "$LOG/plain_$r.log") ms, heartbeat only $(median_ms "$LOG/heartbeat_$r.log") ms, heartbeat+metrics+anomaly $(median_ms "$LOG/harness_$r.log") ms")
  done
  printf '%s\n' "overhead (median step ms, steps 6..$STEPS, $OA):" "${tbl[@]}"
fi

if has torchrun; then
  TR=(torchrun --standalone --nproc-per-node 2 -m nsa_probe --map "$PWD/$MAP" --trace-grads)
  step torchrun_clean 240 env PYTHONPATH="$PWD/probe" "${TR[@]}" --out /tmp/tr_clean \
    "$PWD/$SHOW/train_showcase.py" --config "$PWD/$SHOW/configs/m7c.yaml" --steps 3 --batch-size 1 --save-dir /tmp/sc
  step torchrun_divergent 60 env PYTHONPATH="$PWD/probe" "${TR[@]}" --out /tmp/tr_div --fault divergent_unused=1 \
    "$PWD/$SHOW/train_showcase.py" --config "$PWD/$SHOW/configs/m7c.yaml" --steps 3 --batch-size 1 --save-dir /tmp/sc
  grep -hE '^\[DDP\]|GRAD-TRACE\] .*missing' "$LOG/torchrun_divergent.log" | sort -u | head -8
  tail -3 "$LOG/torchrun_clean.log"
fi

# report NAME ARGS...: nsa-harness run --profile gpu --trainer-map into $LOG/NAME
report() { local name=$1; shift; step "$name" 900 "$B/nsa-harness" run "$@" --profile gpu --trainer-map "$MAP" --out "$LOG/$name" --quiet; }
if has harness; then
  report ddp_clean scenarios/trainer/ddp_onestep.json
  report ddp_divergent scenarios/trainer/ddp_onestep.json --filter 'mode=default' --fault divergent_unused=1
fi
# shellcheck disable=SC2086
has suite && report suite ${SUITE:-scenarios/trainer}
for d in ddp_clean ddp_divergent suite; do
  [ -f "$LOG/$d/RESULTS.md" ] || continue
  echo "== $d"
  grep -E '^\| *(PASS|FAIL|HANG|CRASH|SKIP|ERROR)|cases|stalled|stack stops|no gradient' "$LOG/$d/RESULTS.md" | head -30
done
printf '%s\n' "${SUM[@]}"
for d in ddp_clean ddp_divergent suite; do [ -f "$LOG/$d/RESULTS.md" ] && cp "$LOG/$d/RESULTS.md" "$OUT/${d}_RESULTS.md"; done
tar -czf "$OUT/probe_logs.tgz" -C "$(dirname "$LOG")" --exclude='*.safetensors' --exclude='*.pt' "$(basename "$LOG")" 2>/dev/null
for s in "${SUM[@]}"; do case "$s" in *"rc=0 "*) ;; *) exit 1 ;; esac; done
exit 0
