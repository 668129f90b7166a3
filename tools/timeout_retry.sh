# tools/timeout_retry.sh — sourced by run_all.sh (`test`: the background lane's results) and
# by tests/cli/timeout_retry.sh; defines one function and runs nothing.
#
# timeout_retry LOG DIR WHERE: the background lane runs tests at a low CPU priority (nice 10;
# once nice 19) beside the main ctest, so on a loaded machine a test there can get little CPU
# and reach its ctest TIMEOUT although it passes (CI once, at nice 19: test_nsa_ops timed out
# at 900 s in the lane, and passed in 113 s in the sanitizer build). A timeout there says the machine was
# busy, not that the test failed. Of the tests that the ctest output in LOG lists as failed,
# those that timed out ("(Timeout)") are run once more, in the foreground at the caller's
# priority, with their output appended to LOG after a NOTE line that says so (WHERE: where
# they timed out, for that line). Exit 0 only when every failed test timed out and its rerun
# passed; any other failure stays a failure (and is not rerun), and so does a rerun that
# fails or times out again.
timeout_retry() {
  local log=$1 dir=$2 where=$3 name status only_timeouts=1 again=()
  while IFS=' ' read -r name status; do
    [ -n "$name" ] || continue
    if [ "$status" = Timeout ]; then again+=("$name"); else only_timeouts=0; fi
  done < <(sed -n '/^The following tests FAILED:/,/^Errors while running CTest/ s/^[[:space:]]*[0-9][0-9]* - \([^ ]*\) (\([^)]*\)).*/\1 \2/p' "$log")
  [ ${#again[@]} -gt 0 ] || return 1
  [ "$only_timeouts" = 1 ] || return 1
  echo "NOTE  ${again[*]}: timed out in $where (a loaded machine gives it almost no CPU there);" \
       "run once more in the foreground:" >>"$log"
  ctest --test-dir "$dir" --output-on-failure --no-tests=error -R "^($(IFS='|'; echo "${again[*]}"))\$" >>"$log" 2>&1 || return 1
}
