#!/usr/bin/env bash
# tests/cli/gpu_multi.sh BUILD_DIR — bench/gpu_multi.sh's own plumbing on the CPU (PROFILE=ci):
# a GPU run of it must print every report's counts and its non-PASS verdict lines
# on stdout (a remote GPU run brings back only a few files), pack the reports into logs.tgz,
# and exit 1 when a step failed; a clean run exits 0 with no verdict line; a bad PROFILE is
# exit 2. The GPU phases themselves (ddp, the gpu profile, scaling over NCCL) run only on a
# machine of several GPUs.
set -u
BUILD=${1:?usage: gpu_multi.sh BUILD_DIR}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, expect_exit, has, finish
[ -x "$BUILD/nsa-harness" ] && [ -x "$BUILD/nsa-train" ] || { echo "SKIP: nsa-harness or nsa-train not built"; exit 77; }
multi() { OUT="$TMP/$1" BUILD="$BUILD" PROFILE=ci PHASES=suite BUDGET=300 SUITE_ARGS="$2" bash bench/gpu_multi.sh; }

expect_exit "a planted fault: exit 1" 1 multi planted "--filter gate_init* --fault gate_zero_init"
check "the step line says the suite failed" grep -qE '^suite +rc=1 ' "$TMP/out"
check "the report's counts line" grep -qF -- "---- suite: **2 cases · 2 FAIL** · profile \`ci\`" "$TMP/out"
check "each FAIL's verdict line, with its evidence" \
  test "$(grep -cE '^\| gate_init \| gate=(softmax|sigmoid) \| \*\*FAIL\*\* \| .*uniform gate in 4/4 layers' "$TMP/out")" = 2
check "logs.tgz holds the report" bash -c "tar tzf '$TMP/planted/logs.tgz' | grep -qx 'logs/suite/RESULTS.md' && tar tzf '$TMP/planted/logs.tgz' | grep -qx 'logs/suite/summary.json'"

expect_exit "a clean run: exit 0" 0 multi clean "--filter gate_init*"
check "its counts line" grep -qF -- "---- suite: **2 cases · 2 PASS**" "$TMP/out"
check "no verdict line for a PASS" bash -c "! grep -q '^| gate_init' '$TMP/out'"

expect_exit "PROFILE=cpu: exit 2" 2 env PROFILE=cpu OUT="$TMP/bad" bash bench/gpu_multi.sh
check "it names the value" has "$TMP/out" "PROFILE=cpu: expected gpu or ci"
finish
