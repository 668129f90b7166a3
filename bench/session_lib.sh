# bench/session_lib.sh — what the GPU session scripts share (sourced by gpu_session.sh and
# gpu_regression.sh): phase selection and steps cut at a deadline, so that one device call
# runs many phases and always prints its summary.
# The caller sets PHASES (space-separated), LOG (a folder), DEADLINE (in $SECONDS) and an
# array SUM=() that collects one line per step.

# has PHASE: is the phase selected?
has() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }

# step NAME LIMIT_S CMD...: run with a timeout (never past the deadline), log to
# $LOG/NAME.log, record the exit code and time in SUM; returns the command's code
step() {
  local name=$1 lim=$2
  shift 2
  local rem=$((DEADLINE - SECONDS - 20))
  if [ $rem -lt 15 ]; then SUM+=("$(printf '%-24s %s' "$name" "skipped (out of time)")"); return 99; fi
  [ "$lim" -gt "$rem" ] && lim=$rem
  local t0=$SECONDS
  timeout -k 5 "$lim" "$@" > "$LOG/$name.log" 2>&1
  local rc=$?
  SUM+=("$(printf '%-24s rc=%-4s %4ss' "$name" "$rc" $((SECONDS - t0)))")
  return $rc
}
