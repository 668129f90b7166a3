#!/usr/bin/env bash
# bench/gpu_kernels.sh — everything the CUDA backend needs checked and measured on a GPU
# machine, in one command (device time is scarce: one call does it all).
#
#   PHASES="build ops model golden train sanitize ncu ncusrc ncupeer sdpa bench knobs ab abattn e2e e2e_pack1 e2e_kvsplit goldenref" BUDGET=560 bash bench/gpu_kernels.sh
#
# Each phase logs to its own file; a failing phase never stops the next; every phase
# is cut at a deadline (BUDGET seconds after the start, default 560) so the summary
# always prints. At the end: a compact summary on stdout and all logs in
# $OUT/logs.tgz (OUT defaults to ./gpu-out). Run from the repository root with
# .deps staged (tools/device-deps.sh) when the machine lacks jansson/cmocka headers.
#   BENCH_ARGS   arguments of bench_cuda_attn (default: all S, both shapes)
#   E2E_BATCHES  batch sizes of bench/run_cuda.sh (default "1 2 4 8 16"), E2E_STEPS (10)
#   OPS_GROUPS   the op groups of the ops phase (default: all of them)
#   NCU_ARGS     arguments of bench_cuda_attn under Nsight Compute in the ncu phase (default: the
#                paper shape at S 8192, one repetition); NCU_KERNELS the kernels' name regex
#   NCU_SRC_KERNEL, NCU_SRC_ARGS  the ncusrc phase: one launch of the kernel whose name matches the
#                regex (default k_dkdv_ws) in bench_cuda_attn NCU_SRC_ARGS (default the paper shape at S
#                8192, one repetition) under Nsight Compute with program-counter sampling, then
#                bench/ncu_source.py: its warp-stall samples by opcode and by SASS instruction
#   NCU_PEER_DEST, NCU_PEER_ARGS  the ncupeer phase: a peer's kernels under Nsight Compute, as the
#                ncu phase does ours (bench/peers/bench_peers.py --peers NCU_PEER_DEST, the folder
#                bench/peers/stage.sh made; NCU_PEER_ARGS default flash_nsa at the paper shape, S
#                65536, one repetition after one warm-up), the same table: where its time goes
#   SDPA_S       the lengths of the sdpa phase (default 8192,16384): our dense causal kernel and
#                PyTorch's SDPA backends side by side (bench/sdpa_dense.py)
#   KNOBS        the knobs phase: environment settings (default "NSA_CUDA_DKDV_WS=0 NSA_CUDA_DKDV_WS=1";
#                a setting of several variables joins them with commas: A=1,B=2),
#                bench_cuda_attn (BENCH_ARGS, default both shapes at S 8192 and 32768) under each,
#                alternated ROUNDS (default 2) times; the summary is bench/knob_table.py's table
#                (each op's times under each setting, the change against the first setting)
#   REF, ROUNDS  the ab phase: this tree beside the tree in folder REF (another commit, e.g. `git
#                archive <commit>` unpacked there), both built alike, ROUNDS (default 3) alternations
#                of the end-to-end run (batch 1 and 16) and the per-op profile of a batch-16 step:
#                a speed change between two commits told from the machine's drift
#                The abattn phase: the same two trees' bench_cuda_attn (BENCH_ARGS) alternated ROUNDS
#                (default 2) times, REF first; the summary is bench/knob_table.py's table (each op's
#                times in both trees, this tree's change against REF's)
#   ALSO         the abattn phase: more trees beside REF and this one, "NAME=DIR ..." (NAME a word:
#                letters, digits, -), each built alike and run after this tree in every round; the
#                table gets a column and a change against REF for each
set -u
. "$(dirname "$0")/gpu_lib.sh"   # gpu_run_begin, has, step
gpu_run_begin "build ops model golden train sanitize profile bench e2e"

{ nvidia-smi; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv; nvcc --version; git log --oneline -1; date -u; } > "$LOG/device.txt" 2>&1

if has build; then
  step configure 120 cmake -S . -B "$B" -DCMAKE_CUDA_ARCHITECTURES=90a -DNSA_WERROR=ON
  step build 420 cmake --build "$B" -j16 --target nsa-train test_cuda_ops test_cuda_model test_golden bench_cuda_attn
fi
if has ops; then
  # one process per op group: a fault in one group cannot hide the others
  for grp in ${OPS_GROUPS:-matmul weight_copy embedding rmsnorm rope elementwise xent param gate compress cmp_attn select sel_attn win_attn rows}; do
    NSA_CUDA_SYNC_CHECK=1 step "ops_$grp" 240 "./$B/tests/test_cuda_ops" --filter "$grp"
  done
fi
has model && step model 300 "./$B/tests/test_cuda_model"
if has golden; then
  step golden_cpu 120 "./$B/tests/test_golden"
  step golden_cuda_bf16 120 env NSA_GOLDEN_BACKEND=cuda "./$B/tests/test_golden"
  step golden_cuda_fp32 120 env NSA_GOLDEN_BACKEND=cuda NSA_GOLDEN_PRECISION=fp32 "./$B/tests/test_golden"
fi
has train && step train 300 bash tests/gpu/cuda_train.sh "$B"
if has sanitize; then
  step memcheck 240 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 "./$B/tests/test_cuda_ops" --small --prec bf16
  step racecheck 240 compute-sanitizer --tool racecheck --error-exitcode 9 "./$B/tests/test_cuda_ops" --small --prec bf16 --filter cmp_attn,sel_attn,win_attn,rows,select
fi
if has profile; then   # per-op device time of m7c_125m training steps at the benchmark shape
  step profile 150 env NSA_CUDA_PROFILE=1 NSA_CUDA_PROFILE_SKIP=2 "./$B/nsa-train" --config configs/m7c_125m.json \
    --backend cuda --set train.batch_size=${PROFILE_B:-16} --steps 6 --quiet --out "$LOG/prof_run"
  step bench_b16 150 "./$B/bench/bench_cuda_attn" --S 2048 --B 16 --shape m7c --reps 5
  step bench_b16_pack1 150 env NSA_CUDA_SEL_PACK=0 "./$B/bench/bench_cuda_attn" --S 2048 --B 16 --shape m7c --reps 5
fi
# the sections and metrics bench/ncu_table.py reads (the ncu and ncupeer phases)
NCU_DETAILS=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" --csv --page details)
if has ncu; then   # the attention kernels under Nsight Compute: where each one's time goes
  if command -v ncu >/dev/null; then
    step ncu 300 ncu --clock-control none -k "regex:${NCU_KERNELS:-k_(rows|sel|dkdv|select|reduce)}" --launch-count 60 \
      "${NCU_DETAILS[@]}" "./$B/bench/bench_cuda_attn" ${NCU_ARGS:---S 8192 --shape paper --reps 1}
    python3 bench/ncu_table.py "$LOG/ncu.log" >"$LOG/ncu_table.txt" 2>&1
  else
    echo "ncu: not found" >"$LOG/ncu_table.txt"
  fi
fi
if has ncusrc; then   # where one kernel's warps wait, instruction by instruction
  if command -v ncu >/dev/null; then
    step ncusrc 240 ncu --clock-control none -k "regex:${NCU_SRC_KERNEL:-k_dkdv_ws}" --launch-count 1 \
      --section SourceCounters --section WarpStateStats -f -o "$LOG/ncusrc" \
      "./$B/bench/bench_cuda_attn" ${NCU_SRC_ARGS:---S 8192 --shape paper --reps 1}
    step ncusrc_page 120 ncu --import "$LOG/ncusrc.ncu-rep" --page source --print-source sass --csv
    python3 bench/ncu_source.py "$LOG/ncusrc_page.log" 40 >"$LOG/ncusrc_table.txt" 2>&1
  else
    echo "ncu: not found" >"$LOG/ncusrc_table.txt"
  fi
fi
if has ncupeer; then   # a peer's kernels, the same sections and table as ours in the ncu phase
  if ! command -v ncu >/dev/null; then
    echo "ncu: not found" >"$LOG/ncupeer_table.txt"
  elif [ ! -f "${NCU_PEER_DEST:-}/PEERS.txt" ]; then
    echo "ncupeer: NCU_PEER_DEST='${NCU_PEER_DEST:-}' has no PEERS.txt (bash bench/peers/stage.sh DEST, then carry it)" >"$LOG/ncupeer_table.txt"
  else
    step ncupeer 300 ncu --clock-control none --target-processes all --launch-count 200 \
      "${NCU_DETAILS[@]}" python3 bench/peers/bench_peers.py --peers "$NCU_PEER_DEST" \
      ${NCU_PEER_ARGS:---S 65536 --shape paper --reps 1 --warmup 1 --only flash_nsa}
    python3 bench/ncu_table.py "$LOG/ncupeer.log" >"$LOG/ncupeer_table.txt" 2>&1
  fi
fi
if has sdpa; then   # the dense causal anchor: ours beside SDPA's cuDNN, flash and efficient backends
  step sdpa_ours 200 "./$B/bench/bench_cuda_attn" --shape both --S "${SDPA_S:-8192,16384}" --reps 5
  step sdpa 300 python3 bench/sdpa_dense.py --shape both --S "${SDPA_S:-8192,16384}" --reps 5 --ours "$LOG/sdpa_ours.log"
fi
if has ab; then   # this tree beside REF, alternated on the same GPU
  if [ -d "${REF:-}" ]; then
    step ab_configure 120 cmake -S "$REF" -B "$REF/$B" -DCMAKE_CUDA_ARCHITECTURES=90a -DNSA_WERROR=ON
    step ab_build 420 cmake --build "$REF/$B" -j16 --target nsa-train
    for r in $(seq "${ROUNDS:-3}"); do
      for t in head ref; do
        tb=$B; [ $t = ref ] && tb=$REF/$B
        step "ab_${t}_e2e_$r" 120 bash bench/run_cuda.sh "$tb" "1 16" 12
        step "ab_${t}_prof_$r" 120 env NSA_CUDA_PROFILE=1 NSA_CUDA_PROFILE_SKIP=2 "$tb/nsa-train" \
          --config configs/m7c_125m.json --backend cuda --set train.batch_size=16 --steps 6 --quiet --out "$LOG/ab_run_$t$r"
      done
    done
  else
    echo "ab: REF='${REF:-}' is not a folder (the other tree to compare with)" >"$LOG/ab_configure.log"
  fi
fi
# bench_cuda_attn's arguments in the phases that compare settings or trees (knobs, abattn)
CMP_ARGS=${BENCH_ARGS:---shape both --S 8192,32768 --reps 3}
ALSO_NAMES=()   # the abattn phase's other trees (ALSO), in their order
if has abattn; then   # the attention ops of this tree beside REF's (and ALSO's), alternated on the same GPU
  if [ -d "${REF:-}" ]; then
    declare -A abdir=([ref]="$REF" [head]=.)
    for t in ${ALSO:-}; do   # NAME=DIR, NAME a word other than ref and head
      name=${t%%=*} dir=${t#*=}
      if [ "$name" = "$t" ] || ! [[ $name =~ ^[A-Za-z0-9-]+$ ]] || [ "$name" = ref ] || [ "$name" = head ] || [ ! -d "$dir" ]; then
        echo "abattn: ALSO entry '$t' is not NAME=DIR with NAME a word (letters, digits, -; not ref or head) and DIR a folder: left out" >>"$LOG/abattn_also.log"
        continue
      fi
      abdir[$name]=$dir
      ALSO_NAMES+=("$name")
    done
    for name in ref "${ALSO_NAMES[@]}"; do
      dir=${abdir[$name]}
      step "abattn_configure_$name" 120 cmake -S "$dir" -B "$dir/$B" -DCMAKE_CUDA_ARCHITECTURES=90a -DNSA_WERROR=ON
      step "abattn_build_$name" 420 cmake --build "$dir/$B" -j16 --target bench_cuda_attn
    done
    for r in $(seq "${ROUNDS:-2}"); do
      for name in ref head "${ALSO_NAMES[@]}"; do
        # shellcheck disable=SC2086  # the arguments, one a word
        step "knob_${name}_$r" 300 "${abdir[$name]}/$B/bench/bench_cuda_attn" $CMP_ARGS
      done
    done
  else
    echo "abattn: REF='${REF:-}' is not a folder (the other tree to compare with)" >"$LOG/abattn_configure.log"
  fi
fi
has bench && step bench_attn 300 "./$B/bench/bench_cuda_attn" ${BENCH_ARGS:-}
KNOBS=${KNOBS:-NSA_CUDA_DKDV_WS=0 NSA_CUDA_DKDV_WS=1} KNOB_ROUNDS=${ROUNDS:-2}
if has knobs; then   # bench_cuda_attn under each setting of KNOBS, alternated ROUNDS times on one GPU
  for r in $(seq "$KNOB_ROUNDS"); do
    for kv in $KNOBS; do
      # shellcheck disable=SC2086  # a setting's comma-joined assignments, split into env's arguments
      step "knob_${kv}_$r" 300 env ${kv//,/ } "./$B/bench/bench_cuda_attn" $CMP_ARGS
    done
  done
fi
has e2e && step e2e 300 bash bench/run_cuda.sh "$B" "${E2E_BATCHES:-1 2 4 8 16}" "${E2E_STEPS:-10}"
has e2e_pack1 && step e2e_pack1 150 env NSA_CUDA_SEL_PACK=0 bash bench/run_cuda.sh "$B" "4 16" "${E2E_STEPS:-10}"
# the six K/V projections as six GEMMs again (the per-branch path) beside the fused one
has e2e_kvsplit && step e2e_kvsplit 150 env NSA_KV_FUSED=0 bash bench/run_cuda.sh "$B" "1 16" "${E2E_STEPS:-10}"
if has goldenref; then   # the reference on this machine's PyTorch (CUDA, fp64) vs the committed golden files
  step goldenref 200 bash tools/reference/make_golden.sh "$B" "$LOG/golden_gpu" cuda python3
fi

tar czf "$OUT/logs.tgz" -C "$(dirname "$LOG")" logs 2>/dev/null
echo "================ summary ================"
head -12 "$LOG/device.txt" | grep -E "H100|H200|Driver|MiB" | head -3
printf '%s\n' "${SUM[@]}"
sh_fail() { grep -h -E "FAIL|error|Error|ERROR|fault|illegal|Aborted|Segmentation" "$@" 2>/dev/null | grep -v "0 failed" | head -${N:-25}; }
if ls "$LOG"/ops_*.log > /dev/null 2>&1; then
  echo "---- ops: $(cat "$LOG"/ops_*.log | grep -c -E ' PASS$') PASS, $(cat "$LOG"/ops_*.log | grep -c -E ' FAIL$') FAIL"
  N=30 sh_fail "$LOG"/ops_*.log
  grep -h "select_blocks" "$LOG"/ops_select.log 2>/dev/null | head -8
fi
[ -f "$LOG/model.log" ] && { echo "---- model"; grep -E "FAIL|failures|cpu fp32 loss|all, normwise|determinism.*losses" "$LOG/model.log" | head -40; }
for f in golden_cpu golden_cuda_bf16 golden_cuda_fp32; do
  [ -f "$LOG/$f.log" ] && { echo "---- $f"; grep -E "FAIL|passed|SKIP|loss " "$LOG/$f.log" | head -12; }
done
[ -f "$LOG/train.log" ] && { echo "---- train"; grep -E "PASS|FAIL|SKIP|^[0-9]" "$LOG/train.log" | head -20; }
for f in memcheck racecheck; do
  [ -f "$LOG/$f.log" ] && { echo "---- $f"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|checks, |Invalid|hazard" "$LOG/$f.log" | head -6; }
done
[ -f "$LOG/profile.log" ] && { echo "---- profile (m7c_125m, steps 3-6)"; grep -E "profile|^  " "$LOG/profile.log" | head -34; }
[ -f "$LOG/bench_b16.log" ] && { echo "---- bench m7c S=2048 B=16"; cat "$LOG/bench_b16.log" | head -12; }
[ -f "$LOG/bench_b16_pack1.log" ] && { echo "---- bench m7c S=2048 B=16, one position per sel tile"; grep -E "sel|SUMMARY" "$LOG/bench_b16_pack1.log" | head -5; }
[ -f "$LOG/sdpa.log" ] && { echo "---- dense causal: ours and SDPA (TFLOP/s forward / backward)"; grep -E "^\||SKIP|device:" "$LOG/sdpa.log" | head -20; }
[ -f "$LOG/ncu_table.txt" ] && { echo "---- ncu"; cut -c1-260 "$LOG/ncu_table.txt" | head -40; }
[ -f "$LOG/ncupeer_table.txt" ] && { echo "---- ncu of a peer"; cut -c1-260 "$LOG/ncupeer_table.txt" | head -60; }
[ -f "$LOG/ncusrc_table.txt" ] && { echo "---- ncu source (${NCU_SRC_KERNEL:-k_dkdv_ws})"; cut -c1-200 "$LOG/ncusrc_table.txt" | head -70; }
[ -f "$LOG/bench_attn.log" ] && { echo "---- bench_attn"; grep -E "SUMMARY|m7c +S=2048|peak|SKIP|rror" "$LOG/bench_attn.log" | head -30; }
# knob_table.py over the logs of SETTINGS (the first is the reference), each one's rounds
knob_summary() {
  local title=$1 kv r kf=(); shift
  for kv in "$@"; do
    for r in $(seq "$KNOB_ROUNDS"); do [ -f "$LOG/knob_${kv}_$r.log" ] && kf+=("$LOG/knob_${kv}_$r.log"); done; done
  [ ${#kf[@]} -gt 0 ] || return 0
  echo "---- $title (ms, lowest-highest; ops that moved > 1 %)"
  python3 bench/knob_table.py "${kf[@]}" 2>&1 | head -60
}
# shellcheck disable=SC2086  # the settings, one a word
has knobs && knob_summary "knobs: bench_cuda_attn under each setting, alternated" $KNOBS
has abattn && knob_summary "abattn: bench_cuda_attn of REF (ref), this tree (head)${ALSO:+ and the ALSO trees}, alternated" ref head "${ALSO_NAMES[@]}"
if ls "$LOG"/ab_*_e2e_*.log >/dev/null 2>&1; then
  echo "---- ab: this tree (head) beside REF (ref), m7c_125m S=2048, alternated"
  for f in $(ls "$LOG"/ab_*_e2e_*.log | sort -t_ -k4n); do grep -E "^(1|16) " "$f" | sed "s|^|$(basename "$f" .log) |"; done
fi
[ -f "$LOG/e2e.log" ] && { echo "---- e2e m7c_125m S=2048"; cat "$LOG/e2e.log" | head -12; }
[ -f "$LOG/e2e_pack1.log" ] && { echo "---- e2e, one position per sel tile"; cat "$LOG/e2e_pack1.log" | head -6; }
[ -f "$LOG/e2e_kvsplit.log" ] && { echo "---- e2e, six K/V GEMMs (NSA_KV_FUSED=0)"; cat "$LOG/e2e_kvsplit.log" | head -6; }
[ -f "$LOG/goldenref.log" ] && { echo "---- goldenref"; grep -E "reference loss|worst|logits" "$LOG/goldenref.log" | head -12; }
echo "logs: $OUT/logs.tgz"
