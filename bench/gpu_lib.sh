# bench/gpu_lib.sh — what the GPU scripts share (sourced by gpu_kernels.sh and
# gpu_regression.sh): phase selection and steps cut at a deadline, so that one GPU run
# runs many phases and always prints its summary.
# gpu_run_begin sets what has and step use: PHASES (space-separated), LOG (a folder), DEADLINE
# (in $SECONDS) and an array SUM=() that collects one line per step.

# gpu_run_begin DEFAULT_PHASES [DEFAULT_BUDGET [LOG_NAME]]: the scripts' common prologue.
# OUT (default ./gpu-out, created), LOG (a fresh folder LOG_NAME, default logs), PHASES
# ($PHASES or the default), DEADLINE ($BUDGET or DEFAULT_BUDGET, default 560, seconds from
# now), B ($BUILD or build; a symbolic link to a folder that does not exist, as a link into a
# fresh machine's /tmp is, gets that folder made), SUM=(); the .deps staged by
# tools/device-deps.sh on the pkg-config and library paths; NSA_SOURCE_DIR (the repository
# root, the caller's folder) and PYTHONUNBUFFERED exported.
gpu_run_begin() {
  OUT=${OUT:-$PWD/gpu-out}
  mkdir -p "$OUT"
  LOG=$(mktemp -d)/${3:-logs}
  mkdir -p "$LOG"
  PHASES=${PHASES:-$1}
  DEADLINE=$((SECONDS + ${BUDGET:-${2:-560}}))
  B=${BUILD:-build}
  if [ -L "$B" ] && [ ! -e "$B" ]; then mkdir -p "$(readlink -m "$B")"; fi
  export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig:${PKG_CONFIG_PATH:-}
  export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  export NSA_SOURCE_DIR=$PWD PYTHONUNBUFFERED=1
  SUM=()
}

# has PHASE: is the phase selected?
has() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }

# step NAME LIMIT_S CMD...: run with a timeout (never past the deadline), log to
# $LOG/NAME.log, record the exit code and time in SUM (a failing step's line also carries the
# last line of its log, cut to 120 characters); returns the command's code
step() {
  local name=$1 lim=$2
  shift 2
  local rem=$((DEADLINE - SECONDS - 20))
  if [ $rem -lt 15 ]; then SUM+=("$(printf '%-24s %s' "$name" "skipped (out of time)")"); return 99; fi
  [ "$lim" -gt "$rem" ] && lim=$rem
  local t0=$SECONDS
  timeout -k 5 "$lim" "$@" > "$LOG/$name.log" 2>&1
  local rc=$?
  local why=""
  [ $rc -ne 0 ] && why=$(grep -v '^[[:space:]]*$' "$LOG/$name.log" | tail -n 1 | cut -c1-120)
  SUM+=("$(printf '%-24s rc=%-4s %4ss' "$name" "$rc" $((SECONDS - t0)))${why:+  $why}")
  return $rc
}
