# tests/cli/lib/common.sh — what the shell tests of the regression layer share (sourced):
# PASS/FAIL lines and their counts, and the exit status.
pass=0 fail=0
ok() { echo "PASS  $1"; pass=$((pass + 1)); }
bad() { echo "FAIL  $1"; fail=$((fail + 1)); }
# check NAME CMD...: PASS when CMD succeeds
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }
# finish: the counts, and exit 0 only when nothing failed
finish() { echo "$pass passed, $fail failed"; [ "$fail" = 0 ]; exit $?; }
