#!/usr/bin/env bash
# bench/gpu_multi.sh — what has never run on several GPUs, in as few GPU runs as
# the time allows, on the machine it is started on (nvidia-h200-x2, -x4, -x8):
#
#   PHASES="build ddp suite matrix scaling hang" COMMIT=<sha> BUDGET=560 bash bench/gpu_multi.sh
#
# Phases, in this order (each step logs to its own file, a failing step never stops the next,
# every step is cut at the deadline, BUDGET seconds after the start, default 560):
#   build    configure (sm_90a, -Werror) and build nsa-train, nsa-harness into $BUILD
#            (default build)
#   ddp      tests/gpu/ddp_nccl.sh --bench: NCCL data parallel on 2 GPUs (every mode clean,
#            NCCL vs MPI, 2 x batch 2 == 1 x batch 4, the divergent/drop/hang/crash faults,
#            m7c_125m on 1 vs 2 GPUs)
#   suite    the scenario suite's gpu profile, as ./run_all.sh runs it on a GPU machine: every
#            scenario in scenarios/, ddp_onestep's NCCL and MPI cases included. SUITE_ARGS go
#            to `nsa-harness run` (e.g. --filter 'ddp_onestep*' to run a part in this call)
#   matrix   the detection matrix's gpu profile (scenarios/selftest/). MATRIX_ARGS go to
#            `nsa-harness run`: split it over calls with --filter, and record which ran where
#   scaling  bench/gpu_scaling.sh over 1, 2, 4, 8 GPUs (the counts this machine has):
#            m7c_125m at S 2048, tok/s and the efficiency of each doubling
#   hang     tests/cli/hang_forensics.sh with HF_PROFILE=gpu HF_TRANSPORT=nccl: a rank that
#            never joins, 2 ranks, then 4 where there are 4 GPUs (every rank's stack, the
#            rank named)
# Time on 2 x H200: ddp 95 s; the hang 15 s on the CPU, more with m7c_125m's start on GPUs; the
# suite's gpu profile 8 m 34 s on one H100 without ddp_onestep (its 10 ddp cases ~20-60 s each,
# and as many one-rank references, ranks=1). The detection matrix's gpu profile takes most of an
# hour on one GPU: run it in parts with MATRIX_ARGS="--filter ...".
# stdout: the device and commit, each step's exit code and time, then each report's verdict
# lines and counts (the suite's and the matrix's verdict tables are what bench/RESULTS.md
# records), the scaling table and the PASS/FAIL lines of ddp and hang; exit 1 when a step
# failed, SKIPped or was cut by the deadline, else 0. Every log, and the
# reports' RESULTS.md and summary.json, go to $OUT/logs.tgz (OUT default ./gpu-out).
# COMMIT: the tree's true commit (a tree copied without .git cannot say), printed with the
# device. PROFILE=ci runs the suite, matrix and hang phases on the ci profile over MPI: the
# script's own plumbing on the CPU (tests/cli/gpu_multi.sh). Run from the repository root
# with .deps staged (tools/device-deps.sh) where the machine lacks jansson/cmocka headers.
set -u
. "$(dirname "$0")/gpu_lib.sh"   # gpu_run_begin, has, step
gpu_run_begin "build ddp suite matrix scaling hang"
COMMIT=${COMMIT:-unknown}
PROFILE=${PROFILE:-gpu}
case "$PROFILE" in gpu) HF_T=nccl ;; ci) HF_T=mpi ;; *) echo "gpu_multi.sh: PROFILE=$PROFILE: expected gpu or ci" >&2; exit 2 ;; esac
export NCCL_NVLS_ENABLE=0   # no NVLink multicast on shared hosts (the device docs)

{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sort | uniq -c;
  date -u; echo "commit $COMMIT"; } > "$LOG/device.txt" 2>&1

if has build; then
  step configure 120 cmake -S . -B "$B" -DCMAKE_CUDA_ARCHITECTURES=90a -DNSA_WERROR=ON
  step build 420 cmake --build "$B" -j"$(nproc)" --target nsa-train nsa-harness
fi
has ddp && step ddp 600 bash tests/gpu/ddp_nccl.sh "$B" --bench
# report NAME TARGET...: nsa-harness run --profile $PROFILE into $LOG/NAME (its RESULTS.md travels)
report() { local name=$1; shift; step "$name" 3000 "$B/nsa-harness" run "$@" --profile "$PROFILE" --out "$LOG/$name" --quiet; }
# shellcheck disable=SC2086
has suite && report suite scenarios ${SUITE_ARGS:-}
# shellcheck disable=SC2086
has matrix && report matrix scenarios/selftest ${MATRIX_ARGS:-}
has scaling && step scaling 600 env CSV="$LOG/scaling.csv" bash bench/gpu_scaling.sh "$B" "1 2 4 8"
has hang && step hang 600 env HF_PROFILE="$PROFILE" HF_TRANSPORT="$HF_T" bash tests/cli/hang_forensics.sh "$B"

tar czf "$OUT/logs.tgz" -C "$(dirname "$LOG")" logs 2>/dev/null
echo "================ summary ================"
cat "$LOG/device.txt"
printf '%s\n' "${SUM[@]}"
# verdicts NAME: a report's counts line and the lines of its verdict table that are not PASS
verdicts() {
  local r="$LOG/$1/RESULTS.md"
  [ -f "$r" ] || return 0
  echo "---- $1: $(sed -n 3p "$r" | cut -c1-200)"
  sed -n '/^## Verdicts/,/^## /p' "$r" | grep '^| ' | grep -v -E '^\| (scenario|---)' |
    awk -F' \\| ' '$3 != "PASS" { print }' | cut -c1-300 | head -40
  sed -n '/^## detection_matrix — detection matrix/,/^## /p' "$r" | grep '^| ' | head -40
}
verdicts suite
verdicts matrix
[ -f "$LOG/ddp.log" ] && { echo "---- ddp"; grep -E "^(PASS|FAIL|SKIP)|passed|tok/s|efficiency" "$LOG/ddp.log" | head -40; }
[ -f "$LOG/scaling.log" ] && { echo "---- scaling"; cat "$LOG/scaling.log" | head -12; }
[ -f "$LOG/hang.log" ] && { echo "---- hang"; grep -E "FAIL|SKIP|measured|passed" "$LOG/hang.log" | head -20; }
echo "logs: $OUT/logs.tgz"
# exit 1 when a step failed, SKIPped (77) or was cut by the deadline; else 0
printf '%s\n' "${SUM[@]}" | grep -qE 'rc=[1-9]|skipped' && exit 1
exit 0
