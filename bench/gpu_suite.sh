#!/usr/bin/env bash
# bench/gpu_suite.sh — the scenario suite on a GPU machine, as a GPU runner runs it, timed:
#
#   PHASES="build startup suite_all suite_1 golden matrix scaling" BUDGET=560 bash bench/gpu_suite.sh
#
# phases (each logs to its own file, is cut at the call's deadline, and never stops the next):
#   build      configure + build nsa-harness, nsa-train (CUDA, sm_90a) in $BUILD (default build)
#   graph      test_seq_graph and tests/gpu/prefill_graph.sh (CUDA-graph prefill bitwise vs eager)
#   startup    bench/gpu_startup.sh: where a short case's seconds go (when the script exists)
#   suite_all  the main job, `./run_all.sh` (-j auto: a case per GPU), on every GPU; its wall time
#   suite_1    the same on one GPU (CUDA_VISIBLE_DEVICES=0)
#   main       the main job's first run alone: nsa-harness run -j auto (scenarios/ against nsa-train)
#   record     this GPU model's golden baselines and perf floors (`nsa-harness baseline record`,
#              --repeat 5 for the floors), copied at once to $OUT/baselines.tgz
#   golden     golden_regression + perf on this GPU model, -j auto (which baseline each compared with)
#   noise      bench/showcase_noise.json: the example trainer's step-1 gradients, run to run and
#              with checkpointing, on this GPU (the worst relative difference of each tensor)
#   matrix     the detection matrix, gpu profile, -j auto (MATRIX_FILTER: --filter for a part of it)
#   scaling    bench/gpu_scaling.sh over 1, 2, 4 GPUs (m7c_125m, S 2048, batch 16 a rank)
#   profile    where sequential prefill's time goes (nsys, kernels by time and count, eager and as
#              graphs) and what the step-1 dump costs (NSA_TRAIN_TIMING, with and without the dump)
# Every run's RESULTS.md and summary.json are kept under the log folder, and every case's
# start-up phases (NSA_TRAIN_TIMING=1: timing.json) as NAME_timings.tgz; at the end: a summary
# (wall time and verdict counts of each run) and $OUT/suite_logs.tgz. Run from the repository
# root with .deps staged (tools/device-deps.sh) where jansson is missing. COMMIT names the
# commit when the tree has no .git.
set -u
. "$(dirname "$0")/gpu_lib.sh"
gpu_run_begin "build graph startup suite_all suite_1 golden matrix scaling" 560 suite_logs
export NSA_BUILD_DIR=$B CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=90a" NSA_CUDA=on
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; date -u;
  echo "commit ${COMMIT:-$(git rev-parse HEAD 2>/dev/null || sed -n 's/^node: //p' .git_archival.txt)}"; } > "$LOG/device.txt" 2>&1

# keep_report NAME [DIR]: a run's report (DIR, default the newest reports/ folder) as
# LOG/NAME.{md,json}, and its wall time and verdict counts in LOG/runs.txt
keep_report() {
  local d=${2:-$(ls -dt reports/2*/ 2>/dev/null | head -1)}
  [ -n "$d" ] || return 0
  cp "$d/RESULTS.md" "$LOG/$1.md" 2>/dev/null
  cp "$d/summary.json" "$LOG/$1.json" 2>/dev/null
  python3 - "$d/summary.json" "$1" <<'EOF' >>"$LOG/runs.txt" 2>/dev/null
import json, sys
s = json.load(open(sys.argv[1]))
c = {k: v for k, v in s["counts"].items() if v}
print("%-22s wall %6.1f s  %s  %s" % (sys.argv[2], s.get("wall_s", 0), c, s.get("device", "")))
EOF
}

# the main job's two reports (its two runs end in either order): NAME_main (scenarios/ against
# nsa-train) and NAME_trainer (the example trainer's run: its command names a --trainer-map)
keep_main_job_reports() {
  local d kind
  for d in $(ls -dt reports/2*/ 2>/dev/null | head -2); do
    kind=main
    grep -q -- '--trainer-map' "$d/summary.json" 2>/dev/null && kind=trainer
    keep_report "$1_$kind" "$d"
  done
}

if has build; then
  # (the build type run_all.sh uses, the one the committed GPU baselines were recorded with)
  step configure 150 cmake -S . -B "$B" -DCMAKE_CUDA_ARCHITECTURES=90a -DNSA_WERROR=ON
  step build 420 cmake --build "$B" -j16 --target nsa-harness nsa-train
fi
if has graph; then   # sequential prefill as CUDA graphs: bitwise against eager, and its speed
  step graph_build 300 cmake --build "$B" -j16 --target test_seq_graph
  step graph_unit 120 "$B/tests/test_seq_graph"
  step graph_prefill 200 bash tests/gpu/prefill_graph.sh "$B"
fi
if has startup && [ -f bench/gpu_startup.sh ]; then
  step startup 200 bash bench/gpu_startup.sh "$B"
fi
# every case's start-up phases (nsa-train's timing.json), kept after each suite run
export NSA_TRAIN_TIMING=1
keep_timings() {
  (cd reports && find . -name timing.json -newer "$LOG/device.txt" | tar czf "$LOG/$1_timings.tgz" -T -) 2>/dev/null
}
if has profile; then   # sequential prefill kernel by kernel; the step-1 dump's cost
  tr="$B/nsa-train --config configs/m7c_125m.json --backend cuda --set train.batch_size=1 --quiet"
  if command -v nsys >/dev/null; then
    for g in 0 1; do
      step "profile_nsys_graph$g" 150 env NSA_CUDA_GRAPH=$g nsys profile -t cuda --cuda-graph-trace=node \
        -o "$LOG/prefill_g$g" --force-overwrite true $tr --set train.prefill=sequential --steps 3 --out "$LOG/pf_seq$g"
      nsys stats -q -r cuda_gpu_kern_sum -f csv "$LOG/prefill_g$g.nsys-rep" >"$LOG/prefill_g$g.kern.csv" 2>&1
      rm -f "$LOG/prefill_g$g.nsys-rep" "$LOG"/prefill_g$g.sqlite
    done
  else
    echo "nsys: not found" >"$LOG/profile_nsys.log"
  fi
  step profile_dump_none 120 env NSA_TRAIN_TIMING=1 $tr --steps 3 --out "$LOG/pf_nodump"
  step profile_dump_step 120 env NSA_TRAIN_TIMING=1 $tr --steps 3 --out "$LOG/pf_dump" --dump-step "$LOG/pf_dump.safetensors"
  step profile_dump_acts 120 env NSA_TRAIN_TIMING=1 $tr --steps 3 --out "$LOG/pf_acts" --dump-step "$LOG/pf_acts.safetensors" --dump-acts
  ls -la "$LOG"/pf_*.safetensors >"$LOG/profile_dump_sizes.txt" 2>&1; rm -f "$LOG"/pf_*.safetensors
fi
if has suite_all; then   # the main job on every GPU: both of its runs, -j auto
  t0=$SECONDS
  step suite_all 560 ./run_all.sh
  echo "suite_all: $((SECONDS - t0)) s wall (./run_all.sh, $(nvidia-smi -L | wc -l) GPUs)" >>"$LOG/runs.txt"
  keep_main_job_reports suite_all
  keep_timings suite_all
fi
if has suite_1; then
  t0=$SECONDS
  step suite_1 560 env CUDA_VISIBLE_DEVICES=0 ./run_all.sh
  echo "suite_1: $((SECONDS - t0)) s wall (./run_all.sh, CUDA_VISIBLE_DEVICES=0)" >>"$LOG/runs.txt"
  keep_main_job_reports suite_1
  keep_timings suite_1
fi
if has record; then   # this GPU model's baselines, sent back before anything else can run out of time
  c=${COMMIT:+--commit $COMMIT}
  step record_golden 300 "$B/nsa-harness" baseline record scenarios/golden_regression.json --profile gpu \
    --out "$LOG/golden_record" $c
  (find golden/baselines -newer "$LOG/device.txt" -type f | tar czf "$OUT/baselines.tgz" -T -) 2>/dev/null
  step record_perf 300 "$B/nsa-harness" baseline record scenarios/perf.json --profile gpu --repeat 5 \
    --out "$LOG/perf_record" $c
  (find golden/baselines -newer "$LOG/device.txt" -type f | tar czf "$OUT/baselines.tgz" -T -) 2>/dev/null
fi
if has golden; then
  step golden 300 "$B/nsa-harness" run scenarios/golden_regression.json scenarios/perf.json -j auto
  keep_report golden
fi
if has noise; then   # run-to-run noise of the example trainer's gradients (bench/showcase_noise.json)
  step noise 300 "$B/nsa-harness" run bench/showcase_noise.json --profile gpu -j auto \
    --trainer-map examples/showcase/showcase.map.json
  keep_report noise
fi
if has main; then   # the main run alone (nsa-harness run -j auto, scenarios/ against nsa-train)
  t0=$SECONDS
  step main 560 "$B/nsa-harness" run -j auto
  echo "main: $((SECONDS - t0)) s wall (nsa-harness run -j auto, $(nvidia-smi -L | wc -l) GPUs)" >>"$LOG/runs.txt"
  keep_report main
  keep_timings main
fi
if has matrix; then
  step matrix 560 "$B/nsa-harness" run scenarios/selftest/detection_matrix.json --profile gpu -j auto ${MATRIX_FILTER:-}
  keep_report matrix
fi
if has scaling; then
  step scaling 300 bash bench/gpu_scaling.sh "$B" "1 2 4" 16 10
fi

# the logs without tensor dumps (a record's or a case's step-1 dump is a GB), cut at 40 MB
(cd "$(dirname "$LOG")" && find "$(basename "$LOG")" -type f ! -name '*.safetensors' -size -20M |
  tar czf "$OUT/suite_logs.tgz" -T -) 2>/dev/null
[ "$(stat -c %s "$OUT/suite_logs.tgz" 2>/dev/null || echo 0)" -gt 40000000 ] &&
  (cd "$(dirname "$LOG")" && find "$(basename "$LOG")" -type f \( -name '*.log' -o -name '*.md' -o -name '*.json' -o -name '*.txt' \) -size -2M |
    tar czf "$OUT/suite_logs.tgz" -T -) 2>/dev/null
echo "================ summary ================"
cat "$LOG/device.txt" | head -8
printf '%s\n' "${SUM[@]}"
cat "$LOG/runs.txt" 2>/dev/null
[ -f "$LOG/startup.log" ] && tail -30 "$LOG/startup.log"
[ -f "$LOG/scaling.log" ] && cat "$LOG/scaling.log"
