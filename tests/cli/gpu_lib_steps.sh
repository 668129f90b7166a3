#!/usr/bin/env bash
# tests/cli/gpu_lib_steps.sh BUILD_DIR — bench/gpu_lib.sh's prologue and steps on the CPU: a BUILD
# that is a symbolic link to a folder that does not exist (a link into a fresh GPU machine's /tmp)
# gets that folder made; a failing step's summary line names its exit code and carries its log's
# last line; a passing step's line carries nothing more.
set -u
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, expect_exit, has, finish
SRC=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$TMP/repo" && cd "$TMP/repo" || exit 1
ln -s "$TMP/machine-tmp/gb" gbl
(
  BUILD=gbl OUT=$TMP/out BUDGET=100
  . "$SRC/bench/gpu_lib.sh"
  gpu_run_begin "build"
  step good 30 bash -c 'echo configured; echo'
  step broken 30 bash -c 'echo "a first line"; echo "CMake Error: the build folder is not there" >&2; echo; exit 3'
  printf '%s\n' "${SUM[@]}" >"$TMP/sum"
  echo "$B" >"$TMP/b"
)
check "a BUILD link to a missing folder: the folder is made" test -d "$TMP/machine-tmp/gb"
check "... and B stays the link's name" test "$(cat "$TMP/b")" = gbl
check "a passing step's line: its name, rc=0 and its time, nothing more" grep -qE '^good +rc=0 +[0-9]+s$' "$TMP/sum"
check "a failing step's line: rc=3 and its log's last line" \
  grep -qE '^broken +rc=3 +[0-9]+s  CMake Error: the build folder is not there$' "$TMP/sum"
finish
