#!/usr/bin/env bash
# bench/peers/run.sh BUILD_DIR DEST [OUT] — ours and the public NSA kernels side by side on
# this machine's GPU, in one command, then the Markdown table of the results.
#
#   BUILD_DIR  a CUDA build of this repository (BUILD_DIR/bench/bench_cuda_attn). When the
#              binary is missing it is configured and built here first (the project's default
#              CUDA architectures, or CMAKE_ARGS; .deps on the pkg-config path as
#              bench/gpu_kernels.sh does), unless BUILD=0. "-" skips ours.
#   DEST       the folder bench/peers/stage.sh made (carried to the GPU machine)
#   OUT        where the logs and table.md go (default: $OUT if set, else ./peers-out)
#
# Steps: env.txt (device, commit, versions) → ours: bench_cuda_attn --S $S --shape $SHAPE --no-dense
# --reps $REPS (ours.log) → peers: bench_peers.py, same S/shape/reps (peers.log) → table.py
# (table.md, also printed). The whole command keeps inside BUDGET seconds (default 570, the
# device tool's per-command limit is 600): the build and ours are cut so that PEER_RESERVE
# seconds remain, the peers get what remains minus a margin for the table.
#   S (2048,8192,65536)  SHAPE (both)  REPS (5)  BUDGET (570)  PYTHON (python3)
#   COMMIT         what to call this tree in the table (the GPU machine's copy has no .git)
#   OURS_LOG=FILE  reuse a bench_cuda_attn log instead of running ours
#   PEER_ARGS      more bench_peers.py arguments (e.g. "--only flash_nsa --warmup 3")
#   PEER_RESERVE   seconds the build and ours must leave for the peers + table (240)
set -u
usage() { echo "usage: run.sh BUILD_DIR|- DEST [OUT]" >&2; exit 2; }
[ $# -ge 2 ] || usage
b=$1 dest=$2 out=${3:-${OUT:-$PWD/peers-out}}
S=${S:-2048,8192,65536} SHAPE=${SHAPE:-both} REPS=${REPS:-5} BUDGET=${BUDGET:-570} PY=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
[ -f "$dest/PEERS.txt" ] || { echo "run.sh: DEST '$dest' has no PEERS.txt (bash bench/peers/stage.sh $dest, then carry it)" >&2; exit 2; }
case $BUDGET in ''|*[!0-9]*) echo "run.sh: BUDGET wants whole seconds, got '$BUDGET'" >&2; exit 2 ;; esac
mkdir -p "$out" || exit 2
export PYTHONUNBUFFERED=1
end=$((SECONDS + BUDGET))
reserve=${PEER_RESERVE:-240}   # seconds the build and ours leave for the peers and the table
left() { local l=$((end - SECONDS - ${1:-0})); [ "$l" -ge 1 ] && echo "$l" || echo 1; }   # never 0 (= no limit)

{
  dev=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
  echo "device: ${dev:-? (no nvidia-smi answer)}"
  c=${COMMIT:-$(git log -1 --format='%h %cI' 2>/dev/null)}
  echo "commit: ${c:-? (no .git here: set COMMIT=...)}$( [ -z "${COMMIT:-}" ] && git rev-parse -q HEAD >/dev/null 2>&1 && ! git diff --quiet HEAD 2>/dev/null && echo ' (+ local changes)')"
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "$("$PY" -c 'import sys, torch; t = "absent"
try:
    import triton; t = triton.__version__
except Exception: pass
print("python %s, torch %s, triton %s" % (sys.version.split()[0], torch.__version__, t))' 2>&1 | tail -1)"
  echo "command: S=$S SHAPE=$SHAPE REPS=$REPS"
} > "$out/env.txt"
cat "$out/env.txt"

# ---- ours
if [ -n "${OURS_LOG:-}" ]; then
  cp "$OURS_LOG" "$out/ours.log" && echo "ours: reusing $OURS_LOG"
elif [ "$b" = "-" ]; then
  echo "ours: skipped (BUILD_DIR -)" | tee "$out/ours.log"
else
  bin=$b/bench/bench_cuda_attn
  if [ ! -x "$bin" ] && [ "${BUILD:-1}" = 1 ]; then
    echo "ours: $bin missing: building it (log: $out/build.log)"
    export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig:${PKG_CONFIG_PATH:-}
    export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
    # shellcheck disable=SC2086
    { timeout "$(left "$reserve")" cmake -S . -B "$b" ${CMAKE_ARGS:-} &&
      timeout "$(left "$reserve")" cmake --build "$b" -j"$(nproc)" --target bench_cuda_attn; } > "$out/build.log" 2>&1 ||
      { echo "ours: build failed:"; tail -15 "$out/build.log"; }
  fi
  if [ -x "$bin" ]; then
    echo "ours: $bin --S $S --shape $SHAPE --reps $REPS"
    timeout "$(left "$reserve")" "$bin" --S "$S" --shape "$SHAPE" --reps "$REPS" --no-dense 2>&1 | tee "$out/ours.log"
    st=${PIPESTATUS[0]}
    [ "$st" = 0 ] || echo "ours: bench_cuda_attn ended with status $st (124: cut at the time budget)"
  else
    echo "ours: no $bin" | tee "$out/ours.log"
  fi
fi

# ---- peers (grace 20 s per peer for a case in flight at its deadline, 20 s kept for the table)
pb=$(left 60)
[ "$pb" -ge 30 ] || pb=30
echo "peers: $PY bench_peers.py --peers $dest --S $S --shape $SHAPE --reps $REPS --budget-s $pb ${PEER_ARGS:-}"
# shellcheck disable=SC2086
"$PY" "$here/bench_peers.py" --peers "$dest" --S "$S" --shape "$SHAPE" --reps "$REPS" --budget-s "$pb" \
  --grace-s 20 ${PEER_ARGS:-} 2>&1 | tee "$out/peers.log"

# ---- table
echo
"$PY" "$here/table.py" --ours "$out/ours.log" --peers-log "$out/peers.log" --peers "$dest" --env "$out/env.txt" |
  tee "$out/table.md"
grep -q '^SUMMARY.*cmp+sel fwd+bwd' "$out/ours.log" && grep -q '^SUMMARY.*peer=.*cmp+sel fwd+bwd' "$out/peers.log"
