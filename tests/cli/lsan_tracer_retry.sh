#!/usr/bin/env bash
# tests/cli/lsan_tracer_retry.sh BUILD_DIR — run_all.sh's sanitizer stage reruns a test once
# when it failed only because LeakSanitizer's own tracer crashed at its exit
# (tools/lsan_tracer_retry.sh), and nothing else: a leak report, an ASan or UBSan report, a
# failed check or a timeout stays a failure, and so does a rerun that fails. Fed ctest logs
# shaped as ctest writes them (the first is CI's, 2026-11-25) and a stand-in `ctest` on PATH
# that records what it was asked to run; CPU only, no build needed.
set -u
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, finish
. "$(dirname "$0")/../../tools/lsan_tracer_retry.sh"
mkdir -p "$TMP/bin"
cat >"$TMP/bin/ctest" <<'SH'
#!/usr/bin/env bash
echo "$*" >>"$FAKE_ARGS"
echo "1/1 Test #9: rerun ......   $([ "$FAKE_RC" = 0 ] && echo Passed || echo '***Failed')"
exit "$FAKE_RC"
SH
chmod +x "$TMP/bin/ctest"
export PATH="$TMP/bin:$PATH" FAKE_ARGS="$TMP/args"

# a ctest log: log FILE, then blocks "NAME|STATUS|OUTPUT LINE;OUTPUT LINE..." for each test
log() { local f=$1 i=0 n=$(($# - 1)) b name st out failed=()
  shift; : >"$f"
  for b in "$@"; do
    i=$((i + 1)); IFS='|' read -r name st out <<<"$b"
    printf '%2d/%d Test #%d: %s .......   %s   1.00 sec\n' "$i" "$n" "$((i + 1))" "$name" "$st" >>"$f"
    [ -n "$out" ] && tr ';' '\n' <<<"$out" >>"$f"
    [ "$st" = Passed ] || failed+=("$((i + 1)) - $name ($st)")
  done
  printf '\n%d%% tests passed, %d tests failed out of %d\n\nThe following tests FAILED:\n' \
    $(( (n - ${#failed[@]}) * 100 / n )) "${#failed[@]}" "$n" >>"$f"
  for b in "${failed[@]}"; do printf '\t  %s\n' "$b" >>"$f"; done
  echo "Errors while running CTest" >>"$f"; }
TRACER='[  PASSED  ] 8 test(s).;Tracer caught signal 11: addr=0x9270 pc=0x55653204457a sp=0x7fc3768edd40;==27778==LeakSanitizer has encountered a fatal error.;==27778==HINT: For debugging, try setting environment variable LSAN_OPTIONS=verbosity=1:log_threads=1;==27778==HINT: LeakSanitizer does not work under ptrace (strace, gdb, etc)'
LEAK='==1==ERROR: LeakSanitizer: detected memory leaks;Direct leak of 64 byte(s) in 1 object(s) allocated from:'
# run NAME WANT_RC FAKE_RC WANT_RERUN LOGFILE: WANT_RERUN the -R regex ctest must get, or - for no rerun
run() { local name=$1 want=$2 frc=$3 rerun=$4 f=$5 rc
  rm -f "$FAKE_ARGS"
  FAKE_RC=$frc lsan_tracer_retry "$f" "$TMP/build"; rc=$?
  if [ "$rc" = "$want" ]; then ok "$name: exit $rc"; else bad "$name: exit $rc, want $want"; fi
  if [ "$rerun" = - ]; then
    check "$name: no rerun" test ! -e "$FAKE_ARGS"
  else
    check "$name: reruns $rerun in $TMP/build" grep -qF -- "--test-dir $TMP/build --output-on-failure --no-tests=error -R $rerun" "$FAKE_ARGS"
    check "$name: says why in the log" grep -qF "NOTE  " "$f"
  fi; }

log "$TMP/ci.log" "test_dense_ops|Passed|" "test_model|Subprocess aborted***Exception:|$TRACER" "test_safetensors|Passed|"
run "CI's log, the rerun passes" 0 0 '^(test_model)$' "$TMP/ci.log"
check "the log names the test and the upstream issue" grep -qF "NOTE  test_model: LeakSanitizer's tracer crashed at exit" "$TMP/ci.log"
check "the rerun's output follows the note" bash -c "sed -n '/^NOTE  /,\$p' '$TMP/ci.log' | grep -q '1/1 Test #9: rerun'"
log "$TMP/ci2.log" "test_model|Subprocess aborted***Exception:|$TRACER"
run "the rerun fails" 1 1 '^(test_model)$' "$TMP/ci2.log"
log "$TMP/leak.log" "test_model|Subprocess aborted***Exception:|$LEAK;$TRACER"
run "a leak report and the tracer crash" 1 0 - "$TMP/leak.log"
log "$TMP/ubsan.log" "test_diag|Subprocess aborted***Exception:|kernels/cpu/gemm.c:10:3: runtime error: signed integer overflow;$TRACER"
run "a UBSan report and the tracer crash" 1 0 - "$TMP/ubsan.log"
log "$TMP/cmocka.log" "test_data|***Failed|[  FAILED  ] 1 test(s), listed below:;$TRACER"
run "a failed check and the tracer crash" 1 0 - "$TMP/cmocka.log"
log "$TMP/timeout.log" "test_nsa_ops|***Timeout|"
run "a timeout" 1 0 - "$TMP/timeout.log"
log "$TMP/two.log" "test_model|Subprocess aborted***Exception:|$TRACER" "test_data|***Failed|[  FAILED  ] 1 test(s), listed below:" \
    "test_diag|Subprocess aborted***Exception:|$TRACER"
run "two tracer crashes beside a real failure: rerun, still a failure" 1 0 '^(test_model|test_diag)$' "$TMP/two.log"
log "$TMP/prefix.log" "test_model_x|***Failed|[  FAILED  ] 1 test(s), listed below:" "test_model|Passed|$TRACER"
run "a passing test's output is not a failed one's" 1 0 - "$TMP/prefix.log"
printf '100%% tests passed, 0 tests failed out of 3\n' >"$TMP/none.log"
run "no failed test" 1 0 - "$TMP/none.log"
finish
