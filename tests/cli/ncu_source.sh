#!/usr/bin/env bash
# tests/cli/ncu_source.sh BUILD_DIR — bench/ncu_source.py on an Nsight Compute source page
# exported as CSV (`--page source --print-source sass --csv`: quoted fields, thousands
# separators): the samples summed by opcode (predicate and modifiers dropped) with their shares,
# the instructions with the most samples first; a bad TOP, a missing file and a file without the
# sampling column are exit 2 naming what was wrong.
set -u
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, expect_exit, has, finish
{
  echo "==PROF== Disconnected from process 1840"   # ncu's own lines are not CSV rows
  echo '"# Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed"'
  echo '"00007f0000000100","HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24 ;","1,200","300","5,120"'
  echo '"00007f0000000110","@!P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR8+0x18], R3 ;","2,500","2,400","40,960"'
  echo '"00007f0000000120","MUFU.EX2 R10, R10 ;","800","100","81,920"'
  echo '"00007f0000000130","HGMMA.64x128x16.F32.BF16 R88, R56, gdesc[UR12], R88 ;","500","50","5,120"'
  echo '"00007f0000000140","BAR.SYNC.DEFER_BLOCKING 0x0 ;","0","0","512"'
} >"$TMP/src.csv"

expect_exit "a source page" 0 python3 bench/ncu_source.py "$TMP/src.csv" 3
check "samples by opcode: SYNCS first (2500 of 5000)" grep -qE '^  SYNCS +2500 +50\.0 %$' "$TMP/out"
check "both warpgroup MMA shapes under HGMMA" grep -qE '^  HGMMA +1700 +34\.0 %$' "$TMP/out"
check "an opcode without samples is not listed" bash -c "! grep -qE '^  BAR ' '$TMP/out'"
check "the instruction with the most samples first, with its not-issued samples" \
  grep -qE '^  00007f0000000110 +2500 +50\.0% +2400  @!P0 SYNCS\.PHASECHK' "$TMP/out"
check "TOP 3: three instruction lines" test "$(grep -c '^  00007f' "$TMP/out")" = 3

expect_exit "a TOP that is not a number" 2 python3 bench/ncu_source.py "$TMP/src.csv" many
check "it names the value" has "$TMP/out" "TOP: expected a whole number >= 1, got 'many'"
expect_exit "a missing file" 2 python3 bench/ncu_source.py "$TMP/none.csv"
check "it names the file" has "$TMP/out" "$TMP/none.csv"
sed 's/Warp Stall Sampling (All Samples)/Instructions Issued/' "$TMP/src.csv" >"$TMP/nosamp.csv"
expect_exit "no sampling column" 2 python3 bench/ncu_source.py "$TMP/nosamp.csv"
check "it says which column it looked for" has "$TMP/out" "no source rows with 'Warp Stall Sampling (All Samples)'"
finish
