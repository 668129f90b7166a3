# tools/lsan_tracer_retry.sh — sourced by run_all.sh (its sanitizer stage) and by
# tests/cli/lsan_tracer_retry.sh; defines one function and runs nothing.
#
# lsan_tracer_retry LOG DIR: LeakSanitizer's stop-the-world tracer itself sometimes crashes
# at a process's exit ("Tracer caught signal 11 ... LeakSanitizer has encountered a fatal
# error"; google/sanitizers#1353, intermittent, upstream). That is neither a leak report nor
# a failed test: CI once failed on it at test_model after all 8 of its tests had passed. Of
# the tests that the ctest output in LOG lists as failed, those whose output shows that
# crash and no sanitizer report (leak, ASan, UBSan) and no failed check are run once more,
# output appended to LOG after a line that says so. Exit 0 only when every failed test was
# such a one and its rerun passed; any other failure stays a failure.
lsan_tracer_retry() {
  local log=$1 dir=$2 failed t only_tracer=1 again=()
  failed=$(sed -n '/^The following tests FAILED:/,$ s/^[[:space:]]*[0-9][0-9]* - \([^ ]*\) (.*/\1/p' "$log")
  [ -n "$failed" ] || return 1
  for t in $failed; do
    # the test's output: from its result line to the next result line or ctest's summary
    if awk -v t="$t" '
         $0 ~ ("Test +#[0-9]+: " t " ") { on = 1; next }
         on && ($0 ~ /^ *[0-9]+\/[0-9]+ Test +#/ || $0 ~ /tests passed, .* failed out of/) { exit }
         on { print }' "$log" |
       awk '/LeakSanitizer has encountered a fatal error/ { crash = 1 }
            /ERROR: (LeakSanitizer|AddressSanitizer)|runtime error:|\[  FAILED  \]|\[  ERROR   \]/ { other = 1 }
            END { exit !(crash && !other) }'; then
      again+=("$t")
    else
      only_tracer=0
    fi
  done
  [ ${#again[@]} -gt 0 ] || return 1
  echo "NOTE  ${again[*]}: LeakSanitizer's tracer crashed at exit (no leak report, no failed check;" \
       "google/sanitizers#1353); run once more:" >>"$log"
  ctest --test-dir "$dir" --output-on-failure --no-tests=error -R "^($(IFS='|'; echo "${again[*]}"))\$" >>"$log" 2>&1 || return 1
  [ "$only_tracer" = 1 ]
}
