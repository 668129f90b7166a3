#!/usr/bin/env bash
# tests/cli/timeout_retry.sh BUILD_DIR — run_all.sh `test` reruns a background-lane test once,
# in the foreground, when it timed out there (tools/timeout_retry.sh: the lane runs at nice 10,
# and a loaded machine can starve it past a test's TIMEOUT), and nothing else: a failed check,
# a crash, or a timeout beside another failure stays a failure, and so does a rerun that fails.
# Fed ctest logs shaped as ctest writes them and a stand-in `ctest` on PATH that records what
# it was asked to run; CPU only, no build needed.
set -u
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, finish
. "$(dirname "$0")/../../tools/timeout_retry.sh"
mkdir -p "$TMP/bin"
cat >"$TMP/bin/ctest" <<'SH'
#!/usr/bin/env bash
echo "$*" >>"$FAKE_ARGS"
echo "1/1 Test #9: rerun ......   $([ "$FAKE_RC" = 0 ] && echo Passed || echo '***Timeout')"
exit "$FAKE_RC"
SH
chmod +x "$TMP/bin/ctest"
export PATH="$TMP/bin:$PATH" FAKE_ARGS="$TMP/args"
# log FILE NAME:STATUS...: a ctest log whose summary lists the tests that did not pass
log() { local f=$1 i=0 b name st failed=()
  shift; : >"$f"
  for b in "$@"; do
    i=$((i + 1)); name=${b%%:*}; st=${b#*:}
    case "$st" in Passed) printf '%d/%d Test #%d: %s ....   Passed   1.00 sec\n' "$i" $# "$i" "$name" ;;
      Timeout) printf '%d/%d Test #%d: %s ....***Timeout 900.02 sec\n' "$i" $# "$i" "$name" ;;
      *) printf '%d/%d Test #%d: %s ....***%s   1.00 sec\n' "$i" $# "$i" "$name" "$st" ;; esac >>"$f"
    [ "$st" = Passed ] || failed+=("$i - $name ($st)")
  done
  printf '\nThe following tests FAILED:\n' >>"$f"
  for b in "${failed[@]}"; do printf '\t%3s\n' "$b" >>"$f"; done
  echo "Errors while running CTest" >>"$f"; }
# run NAME WANT_RC FAKE_RC WANT_RERUN LOG: WANT_RERUN the -R regex ctest must get, or - for none
run() { local name=$1 want=$2 frc=$3 rerun=$4 f=$5 rc
  rm -f "$FAKE_ARGS"
  FAKE_RC=$frc timeout_retry "$f" "$TMP/build" "the background lane (nice 10)"; rc=$?
  if [ "$rc" = "$want" ]; then ok "$name: exit $rc"; else bad "$name: exit $rc, want $want"; fi
  if [ "$rerun" = - ]; then
    check "$name: no rerun" test ! -e "$FAKE_ARGS"
  else
    check "$name: reruns $rerun in $TMP/build" grep -qF -- "--test-dir $TMP/build --output-on-failure --no-tests=error -R $rerun" "$FAKE_ARGS"
    check "$name: says why in the log" grep -qF "NOTE  " "$f"
  fi; }

# CI's case: test_nsa_ops timed out in the lane (900 s), passing in 113 s elsewhere
log "$TMP/ci.log" test_dense_ops:Passed test_nsa_ops:Timeout test_model:Passed
run "a lane timeout, the rerun passes" 0 0 '^(test_nsa_ops)$' "$TMP/ci.log"
check "the NOTE names the test and where it timed out" grep -qF "NOTE  test_nsa_ops: timed out in the background lane (nice 10)" "$TMP/ci.log"
log "$TMP/again.log" test_nsa_ops:Timeout
run "the rerun times out too" 1 8 '^(test_nsa_ops)$' "$TMP/again.log"
log "$TMP/two.log" test_nsa_ops:Timeout test_gradcheck:Timeout
run "two timeouts: both rerun at once" 0 0 '^(test_nsa_ops|test_gradcheck)$' "$TMP/two.log"
log "$TMP/mixed.log" test_nsa_ops:Timeout test_data:Failed
run "a timeout beside a failed test: no rerun, a failure" 1 0 - "$TMP/mixed.log"
log "$TMP/failed.log" test_data:Failed
run "a failed test" 1 0 - "$TMP/failed.log"
log "$TMP/crash.log" "test_data:Exception: SegFault"
run "a crash" 1 0 - "$TMP/crash.log"
printf '100%% tests passed, 0 tests failed out of 3\n' >"$TMP/none.log"
run "no failed test" 1 0 - "$TMP/none.log"
finish
