# tests/cli/lib/common.sh — what the shell tests share (sourced): PASS/FAIL lines and their
# counts, exit-code and file-content checks, and the exit status.
pass=0 fail=0
ok() { echo "PASS  $1"; pass=$((pass + 1)); }
bad() { echo "FAIL  $1"; fail=$((fail + 1)); }
# check NAME CMD...: PASS when CMD succeeds
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }
# expect_exit NAME RC CMD...: PASS when CMD exits RC (its stdout+stderr in $TMP/out, the
# caller's scratch folder; the last lines shown on a FAIL)
expect_exit() { local name=$1 want=$2; shift 2
  "$@" >"$TMP/out" 2>&1; local rc=$?
  if [ "$rc" = "$want" ]; then ok "$name (exit $rc)"; else bad "$name: exit $rc, want $want"; tail -5 "$TMP/out"; fi; }
# has FILE TEXT: FILE contains TEXT (fixed string)
has() { grep -qF -- "$2" "$1"; }
# finish: the counts, and exit 0 only when nothing failed
finish() { echo "$pass passed, $fail failed"; [ "$fail" = 0 ]; exit $?; }
