#!/usr/bin/env bash
# bench/gpu_startup.sh [BUILD_DIR] — where a short GPU case's seconds go, on the machine it is
# started on (one GPU):
#
#   BUDGET=190 PHASES="build context print_env startup prefill" bash bench/gpu_startup.sh build
#
# Phases (each step logs to its own file, is cut at the deadline — BUDGET seconds after the start,
# default 190 — and never stops the next):
#   build      only where BUILD_DIR/nsa-train is missing: configure + build nsa-train (CUDA, sm_90a)
#   context    a bare CUDA context, 3 times: a 20-line program (compiled here with nvcc) timing
#              cudaGetDeviceCount, cudaSetDevice + cudaFree(0) and a stream, and its process wall time;
#              and `nsa-train --help` (a process start without CUDA), 3 times
#   print_env  `nsa-train --print-env`, 3 times (the runner asks it once per trainer and run)
#   startup    nsa-train with NSA_TRAIN_TIMING=1 (trainer/timing.h) on the shapes the gpu-profile
#              scenarios run (configs/m7c_125m.json, --set train.backend=cuda and their gpu overrides;
#              2-3 steps each), REPS times each (default 3): the median of each phase (timing.json)
#              and of the whole process's wall time, one row per shape
#   prefill    sequential prefill, m7c_125m S=2048 B=1, PREFILL_STEPS steps (default 6) with
#              NSA_CUDA_GRAPH=0 (every forward eager) and with the graphs (the default): the median
#              ms a step of the last 3 steps of each (steps 1-2 run eagerly, step 3 records the
#              graphs, later steps replay them), and every step's ms
# stdout: the device, each step's exit code and time, then the tables (the last lines). The logs,
# every run's timing.json and metrics.jsonl go to $OUT/startup_logs.tgz and the tables to
# $OUT/startup.txt (OUT default ./gpu-out). Run from the repository root; tools/device-deps.sh's
# .deps are used where staged (gpu_lib.sh).
set -u
. "$(dirname "$0")/gpu_lib.sh"   # gpu_run_begin, has, step
gpu_run_begin "build context print_env startup prefill" 190 startup_logs
B=${1:-$B}
REPS=${REPS:-3}
PREFILL_STEPS=${PREFILL_STEPS:-6}
{ nvidia-smi -L 2>/dev/null || echo "nvidia-smi: not available"; date -u; nproc
  echo "commit ${COMMIT:-$(git rev-parse HEAD 2>/dev/null || sed -n 's/^node: //p' .git_archival.txt 2>/dev/null)}"
  echo "CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-unset (lazy by default since CUDA 12.2)}"
  nvidia-smi --query-gpu=name,driver_version,persistence_mode,memory.total --format=csv,noheader 2>/dev/null
} > "$LOG/device.txt" 2>&1
cat "$LOG/device.txt"
TAB="$LOG/tables.txt"
: > "$TAB"

if has build && [ ! -x "$B/nsa-train" ]; then
  step configure 150 cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DNSA_WERROR=ON
  step build 600 cmake --build "$B" -j"$(nproc)" --target nsa-train
fi
NT="$B/nsa-train"
[ -x "$NT" ] || { echo "no $NT (build it, or give the build folder as the first argument)"; printf '%s\n' "${SUM[@]}"; exit 1; }

# timed NAME LIMIT CMD...: step, with the command's own wall time (from just before its exec to
# its exit) in $LOG/NAME.wall
timed() {
  local name=$1 lim=$2
  shift 2
  # shellcheck disable=SC2016  # (expanded by the inner bash)
  step "$name" "$lim" bash -c 't0=$(date +%s.%N); "$@"; rc=$?; t1=$(date +%s.%N); echo "$t0 $t1" > "$0"; exit $rc' \
    "$LOG/$name.wall" "$@"
}
wall() { awk '{printf "%.3f", $2 - $1}' "$LOG/$1.wall" 2>/dev/null || echo "-"; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR) printf "%.3f", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2); else print "-"}'; }

if has context; then
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  cat > "$LOG/cuda_ctx.cu" <<'EOF'
// a bare CUDA context: what every CUDA process pays before its first kernel
#include <cuda_runtime.h>
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(void) {
    double t0 = now();
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    double t1 = now();
    if (e != cudaSuccess || n == 0) { printf("no device: %s\n", cudaGetErrorString(e)); return 1; }
    e = cudaSetDevice(0);
    if (e == cudaSuccess) e = cudaFree(0);
    double t2 = now();
    cudaStream_t s;
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    double t3 = now();
    printf("device_count %.4f context %.4f stream %.4f (%s)\n", t1 - t0, t2 - t1, t3 - t2, cudaGetErrorString(e));
    return e != cudaSuccess;
}
EOF
  if step ctx_build 120 "$NVCC" -O2 -o "$LOG/cuda_ctx" "$LOG/cuda_ctx.cu"; then
    for r in $(seq 1 "$REPS"); do timed "ctx_$r" 60 "$LOG/cuda_ctx"; done
    ctxf() { cat "$LOG"/ctx_[0-9]*.log 2>/dev/null | awk -v f="$1" '/^device_count/ {print $f}' | median; }
    echo "bare CUDA context (median of $REPS): process wall $(for r in $(seq 1 "$REPS"); do wall "ctx_$r"; echo; done | median) s;" \
         "in process: device count $(ctxf 2) s, cudaSetDevice+cudaFree(0) $(ctxf 4) s, stream $(ctxf 6) s" >> "$TAB"
  fi
  for r in $(seq 1 "$REPS"); do timed "help_$r" 60 "$NT" --help; done
  echo "nsa-train --help (a process start, no CUDA; median of $REPS): $(for r in $(seq 1 "$REPS"); do wall "help_$r"; echo; done | median) s" >> "$TAB"
fi

if has print_env; then
  for r in $(seq 1 "$REPS"); do timed "print_env_$r" 60 "$NT" --print-env; done
  echo "nsa-train --print-env (median of $REPS): $(for r in $(seq 1 "$REPS"); do wall "print_env_$r"; echo; done | median) s" >> "$TAB"
fi

# the shapes the gpu-profile scenarios run (scenarios/*.json, "gpu" profiles): NAME|STEPS|SETS
SHAPES=(
  "m7c b1 (branch/gate/gc/golden)|2|train.batch_size=1"
  "m7c b1 phi=mlp (branch_isolation)|2|train.batch_size=1 nsa.phi=mlp"
  "m7c b1 T1000 fp32 (seqlen sweep)|1|model.max_seq_len=8192 train.seq_len=1000 train.precision=fp32"
  "m7c b16 (perf)|3|train.batch_size=16"
  "tiny (cross_trainer_parity)|3|"
)
if has startup; then
  rows=()
  for i in "${!SHAPES[@]}"; do
    IFS='|' read -r label steps sets <<<"${SHAPES[$i]}"
    cfg=configs/m7c_125m.json
    case "$label" in tiny*) cfg=configs/tiny.json ;; esac
    args=(--config "$cfg" --set train.backend=cuda --steps "$steps" --quiet)
    for kv in $sets; do args+=(--set "$kv"); done
    for r in $(seq 1 "$REPS"); do
      timed "startup_${i}_$r" 120 env NSA_TRAIN_TIMING=1 "$NT" "${args[@]}" --out "$LOG/startup_${i}_$r"
    done
    rows+=("$i|$label")
  done
  # one row per shape: the median of each phase over the repetitions (timing.json), and of the wall
  printf '%s\n' "${rows[@]}" > "$LOG/shapes.txt"
  python3 - "$LOG" "$REPS" "$LOG/shapes.txt" >> "$TAB" <<'PY'
import json, os, statistics, sys
log, reps = sys.argv[1], int(sys.argv[2])
cols = [("wall", None), ("exec>main", "exec_to_main_s"), ("config", "args_config_s"), ("backend", "backend_init_s"),
        ("ctx", ("backend_parts_s", "CUDA context")), ("lt", ("backend_parts_s", "cuBLASLt load (dlopen)")),
        ("alloc", "model_alloc_s"), ("weights", "weight_init_s"), ("optim", "optimizer_state_s"), ("data", "data_s"),
        ("step1", "first_step_s"), ("later", "later_steps_mean_s"), ("finish", "finish_s"), ("total", "total_s")]
def get(j, key):
    if isinstance(key, tuple):
        return (j.get(key[0]) or {}).get(key[1])
    return j.get(key)
print("nsa-train start-up by phase, seconds (median of %d; timing.json; wall = the process, exec to exit; exec>main in clock ticks, +-0.01):" % reps)
print("%-36s" % "shape" + "".join("%10s" % c for c, _ in cols))
parts_all = {}
for line in open(sys.argv[3]):
    i, label = line.rstrip("\n").split("|", 1)
    vals = {c: [] for c, _ in cols}
    for r in range(1, reps + 1):
        d = os.path.join(log, "startup_%s_%d" % (i, r))
        try:
            j = json.load(open(os.path.join(d, "timing.json")))
            t0, t1 = map(float, open(os.path.join(log, "startup_%s_%d.wall" % (i, r))).read().split())
        except Exception:
            continue
        vals["wall"].append(t1 - t0)
        for c, k in cols[1:]:
            v = get(j, k)
            if isinstance(v, (int, float)): vals[c].append(v)
        for k, v in (j.get("backend_parts_s") or {}).items(): parts_all.setdefault(k, []).append(v)
        for k, v in (j.get("first_step_parts_s") or {}).items(): parts_all.setdefault("first step: " + k, []).append(v)
    print("%-36s" % label[:36] + "".join("%10s" % ("%.3f" % statistics.median(vals[c]) if vals[c] else "-") for c, _ in cols))
if parts_all:
    print("backend and first-step parts, all shapes (median, s): " +
          ", ".join("%s %.3f" % (k, statistics.median(v)) for k, v in parts_all.items()))
PY
fi

if has prefill; then
  pargs=(--config configs/m7c_125m.json --set train.backend=cuda --set train.batch_size=1 --set train.prefill=sequential
         --steps "$PREFILL_STEPS" --quiet)
  step prefill_eager 150 env NSA_TRAIN_TIMING=1 NSA_CUDA_GRAPH=0 "$NT" "${pargs[@]}" --out "$LOG/prefill_eager"
  step prefill_graph 150 env NSA_TRAIN_TIMING=1 "$NT" "${pargs[@]}" --out "$LOG/prefill_graph"
  ms() { sed -n 's/.*"ms": \([0-9.]*\),.*/\1/p' "$LOG/$1/metrics.jsonl" 2>/dev/null; }
  med_ms() { ms "$1" | tail -n 3 | median; }
  losses() { sed -n 's/.*"loss": \([-0-9.eE+]*\),.*/\1/p' "$LOG/$1/metrics.jsonl" 2>/dev/null; }
  same=$(cmp -s <(losses prefill_eager) <(losses prefill_graph) && [ -n "$(losses prefill_graph)" ] && echo "bitwise equal" || echo "DIFFER")
  ge=$(python3 -c 'import json, sys; g = json.load(open(sys.argv[1]))["sequential_graph"]
print("%d eager, %d recorded (%d graphs, %d nodes, %.2f s to record), %d replayed, %d failures" % (g["eager"], g["captures"],
      g["graphs"], g["nodes"], g["capture_s"], g["replays"], g["failures"]))' "$LOG/prefill_graph/timing.json" 2>/dev/null)
  echo "sequential prefill m7c_125m S=2048 B=1, ms/step (median of the last 3 of $PREFILL_STEPS steps): eager" \
       "$(med_ms prefill_eager), graph $(med_ms prefill_graph); losses $same; graph run: ${ge:-?}" >> "$TAB"
  echo "  every step, ms: eager $(ms prefill_eager | tr '\n' ' ')| graph $(ms prefill_graph | tr '\n' ' ')" >> "$TAB"
fi

tar -czf "$OUT/startup_logs.tgz" -C "$(dirname "$LOG")" "$(basename "$LOG")" 2>/dev/null
cp "$TAB" "$OUT/startup.txt"
printf '%s\n' "${SUM[@]}"
echo "================ start-up ================"
cat "$TAB"
for s in "${SUM[@]}"; do case "$s" in *"rc=0 "*) ;; *) exit 1 ;; esac; done
exit 0
