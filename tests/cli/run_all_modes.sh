#!/usr/bin/env bash
# tests/cli/run_all_modes.sh BUILD_DIR — run_all.sh itself, with stand-in cmake, ctest and
# apt-get on PATH (a copy of run_all.sh and tools/ in a temporary folder; nothing is built
# and nothing is installed; CPU only, seconds):
#  1. `--help`, `-h`, `help`: run_all's own usage (its modes and every exit code), exit 0,
#     before anything is configured or built; a mistyped mode (`tset`) and `test` with an
#     argument: exit 2 with the usage on stderr, nothing built;
#  2. every literal `exit N` in run_all.sh is documented in its header's exit codes;
#  3. `test` where a background-lane unit test timed out (a loaded machine) and passes when run
#     again: run once more in the foreground with a NOTE saying so, exit 0, the last line
#     PASS naming the note (before: exit 8 after "... PASS");
#  4. the same test timing out again: exit 1, the last line FAIL naming the lane and the test;
#  5. a lane test that failed (not a timeout): no rerun, exit 1, the last line names it;
#  6. a failed test of the main ctest: exit 1, the last line names it;
#  7. a build that fails: exit 2, the last line says so.
set -u
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, finish
src=$(pwd)
mkdir -p "$TMP/tree/tools" "$TMP/bin"
cp "$src/run_all.sh" "$TMP/tree/" && cp "$src"/tools/*.sh "$TMP/tree/tools/"
# cmake: configure writes a CMakeCache.txt; --build fails when FAKE_BUILD_RC says so
cat >"$TMP/bin/cmake" <<'SH'
#!/usr/bin/env bash
echo "cmake $*" >>"$FAKE_LOG"
if [ "$1" = -S ]; then mkdir -p "$4" && touch "$4/CMakeCache.txt"; exit 0; fi
if [ "$1" = --build ]; then exit "${FAKE_BUILD_RC:-0}"; fi
exit 0
SH
# ctest: -N lists two unit tests; the lane's run (-R with both) times out or fails in
# test_nsa_ops per FAKE_LANE; its rerun (-R ^(test_nsa_ops)$) per FAKE_RERUN; the main ctest
# (-E ...) fails cli_x when FAKE_MAIN=fail
cat >"$TMP/bin/ctest" <<'SH'
#!/usr/bin/env bash
echo "ctest $*" >>"$FAKE_LOG"
args=" $* "
result() {   # NAME STATUS(Passed|Timeout|Failed)
  case "$2" in
    Passed) printf '%d/%d Test #%d: %s ....   Passed    1.00 sec\n' 1 1 1 "$1" ;;
    Timeout) printf '%d/%d Test #%d: %s ....***Timeout 900.01 sec\n' 1 1 1 "$1" ;;
    Failed) printf '%d/%d Test #%d: %s ....***Failed    1.00 sec\n' 1 1 1 "$1" ;;
  esac; }
summary() {  # NAME STATUS of the failed one, or nothing
  if [ $# = 0 ]; then printf '\n100%% tests passed, 0 tests failed out of 1\n'; exit 0; fi
  printf '\n50%% tests passed, 1 tests failed out of 2\n\nThe following tests FAILED:\n\t  1 - %s (%s)\nErrors while running CTest\n' "$1" "$2"
  exit 8; }
case "$args" in
  *" -N "*) printf 'Test project x\n  Test  #1: test_nsa_ops\n  Test  #2: test_dense_ops\n\nTotal Tests: 2\n'; exit 0 ;;
  *"-R ^(test_nsa_ops)\$ "*)
    st=${FAKE_RERUN:-Passed}; result test_nsa_ops "$st"
    [ "$st" = Passed ] && summary; summary test_nsa_ops "$st" ;;
  *" -R "*)
    st=${FAKE_LANE:-Passed}; result test_nsa_ops "$st"; result test_dense_ops Passed
    [ "$st" = Passed ] && summary; summary test_nsa_ops "$st" ;;
  *" -E "*)
    if [ "${FAKE_MAIN:-pass}" = fail ]; then result cli_x Failed; summary cli_x Failed; fi
    result cli_y Passed; summary ;;
esac
exit 0
SH
printf '#!/bin/sh\necho "apt-get $*" >>"$FAKE_LOG"\nexit 0\n' >"$TMP/bin/apt-get"
chmod +x "$TMP/bin/"*
export PATH="$TMP/bin:$PATH" FAKE_LOG="$TMP/calls" NSA_SANITIZE_STAGE=0 NSA_BUILD_DIR="$TMP/b"
unset CI
# ra NAME ARGS...: run the copy; its output in $TMP/NAME.out/.err, exit in $TMP/NAME.rc
ra() { local n=$1; shift; : >"$FAKE_LOG"; rm -rf "$TMP/b"
  (cd "$TMP" && bash "$TMP/tree/run_all.sh" "$@" >"$TMP/$n.out" 2>"$TMP/$n.err"); echo $? >"$TMP/$n.rc"; }
rc_is() { [ "$(cat "$TMP/$1.rc")" = "$2" ]; }
last() { tail -n 1 "$TMP/$1.out"; }
nothing_built() { ! grep -q '^cmake' "$FAKE_LOG" && [ ! -e "$TMP/b" ]; }

# ---- 1. usage, before anything is built ----------------------------------------------------
for h in --help -h help; do
  ra help "$h"
  check "$h: exit 0" rc_is help 0
  check "$h: run_all's own usage (modes and exit codes)" bash -c "head -1 '$TMP/help.out' | grep -q '^usage: ./run_all.sh ' &&
    grep -q '^Exit codes of .test.:' '$TMP/help.out' && grep -q '^  ./run_all.sh test ' '$TMP/help.out'"
  check "$h: nothing configured or built" nothing_built
done
ra typo tset
check "a mistyped mode: exit 2" rc_is typo 2
check "a mistyped mode: named, with the usage on stderr" bash -c "grep -q \"unknown mode 'tset'\" '$TMP/typo.err' &&
  grep -q '^usage: ./run_all.sh ' '$TMP/typo.err'"
check "a mistyped mode: nothing configured or built" nothing_built
ra testarg test extra
check "test with an argument: exit 2 naming it, nothing built" bash -c "[ \$(cat '$TMP/testarg.rc') = 2 ] &&
  grep -q 'test takes no arguments (got: extra)' '$TMP/testarg.err'" && check "... nothing built" nothing_built

# ---- 2. every literal exit code is documented -----------------------------------------------
check "every literal exit code of run_all.sh is in its header's exit codes" python3 - "$src/run_all.sh" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
head = text[:text.index("set -euo pipefail")]
doc = head[head.index("Exit codes of the main job"):]
documented = {int(m) for m in re.findall(r"^#\s+(\d+) ", doc, re.M)} | {int(m) for m in re.findall(r"#\s+\d+ [^\n]*?\s{2,}(\d+) ", doc)}
used = {int(m) for m in re.findall(r"\bexit (\d+)\b", text[len(head):])}
missing = used - documented
assert not missing, ("undocumented exit codes", missing, documented)
assert "exit 8" not in text and "rc=8" not in text
PY

# ---- 3.-6. test: the lane's and the main ctest's results, and the last line -------------------
FAKE_LANE=Timeout FAKE_RERUN=Passed ra t1 test
check "lane timeout, rerun passes: exit 0" rc_is t1 0
reruns() { grep -cF -- '-R ^(test_nsa_ops)$' "$FAKE_LOG"; }
check "... rerun once, only that test" test "$(reruns)" = 1
check "... a NOTE says it timed out in the lane and ran again" grep -q '^  NOTE  test_nsa_ops: timed out in the background lane (nice 10' "$TMP/t1.out"
check "... the last line: PASS, naming the note" bash -c "tail -n 1 '$TMP/t1.out' | grep -qx 'run_all.sh test: PASS (exit 0); run again after a note: test_nsa_ops (above)'"
FAKE_LANE=Timeout FAKE_RERUN=Timeout ra t2 test
check "lane timeout, the rerun times out too: exit 1" rc_is t2 1
check "... the last line names the lane and the test" bash -c "tail -n 1 '$TMP/t2.out' | grep -q \"^run_all.sh test: FAIL (exit 1): the background lane's unit tests of $TMP/b (log $TMP/b/bg_unit.log): test_nsa_ops\$\""
FAKE_LANE=Failed ra t3 test
check "a lane test that failed: exit 1, no rerun" bash -c "[ \$(cat '$TMP/t3.rc') = 1 ] && [ $(reruns) = 0 ]"
check "... the last line names it" bash -c "tail -n 1 '$TMP/t3.out' | grep -q 'FAIL (exit 1): .*: test_nsa_ops\$'"
FAKE_MAIN=fail ra t4 test
check "a failed test of the main ctest: exit 1, the last line names it" bash -c "[ \$(cat '$TMP/t4.rc') = 1 ] &&
  tail -n 1 '$TMP/t4.out' | grep -qx 'run_all.sh test: FAIL (exit 1): ctest of $TMP/b: cli_x'"
FAKE_BUILD_RC=1 ra t5 test
check "a failed build: exit 2, the last line says so" bash -c "[ \$(cat '$TMP/t5.rc') = 2 ] &&
  tail -n 1 '$TMP/t5.err' | grep -q 'run_all.sh test: FAIL (exit 2): configuring or building $TMP/b failed'"
for n in t1 t2 t3 t4; do [ "$(cat "$TMP/$n.rc")" = 0 ] || [ "$(cat "$TMP/$n.rc")" = 1 ] || { echo "--- $n"; tail -n 20 "$TMP/$n.out" "$TMP/$n.err"; }; done
finish
