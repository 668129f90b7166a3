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
  if [ "$rc" = "$want" ]; then ok "$name (exit $rc)"; else bad "$name: exit $rc, want $want"; grep -E "^(\[[0-9]+/[0-9]+\] )?(ERROR|FAIL) " "$TMP/out" | head -5; tail -5 "$TMP/out"; report_failures "$TMP/out"; fi; }
# report_failures OUT: where OUT (an nsa-harness run's output) names its report ("RESULTS: PATH"),
# the report's sections of the cases that did not pass (their evidence: a launcher's or a rank's
# last lines), 30 lines each at most, so that a failure seen once under load says why in the
# test's own log (the test's folder is gone when it ends)
report_failures() {
  local r; r=$(sed -n 's/^RESULTS: //p' "$1" | tail -1)
  [ -n "$r" ] && [ -f "$r" ] || return 0
  awk '/^## / { p = / — (FAIL|HANG|CRASH|ERROR)$/; n = 0 } p && n++ < 30' "$r"
}
# has FILE TEXT: FILE contains TEXT (fixed string)
has() { grep -qF -- "$2" "$1"; }
# finish: the counts, and exit 0 only when nothing failed
finish() { echo "$pass passed, $fail failed"; [ "$fail" = 0 ]; exit $?; }
# torch_python_or_skip [MODULE...]: py= the first of $NSA_TORCH_PYTHON, python3, /usr/bin/python3
# that imports torch and the MODULEs, exported as NSA_TORCH_PYTHON; none: a SKIP line, exit 77
torch_python_or_skip() {
  local c mods="torch${1:+, $*}"
  mods=${mods// /}; mods=${mods//,/, }
  py=""
  for c in "${NSA_TORCH_PYTHON:-}" python3 /usr/bin/python3; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1 && "$c" -c "import $mods" >/dev/null 2>&1; then py=$c; break; fi
  done
  if [ -z "$py" ]; then
    echo "SKIP: no python that imports $mods (tried \$NSA_TORCH_PYTHON, python3, /usr/bin/python3); install python3-torch${1:+ and python3-$1}"
    exit 77
  fi
  export NSA_TORCH_PYTHON=$py
}
