#!/usr/bin/env bash
# tests/cli/ncu_table.sh BUILD_DIR — bench/ncu_table.py on Nsight Compute CSV written the way
# ncu 2025 writes it (quoted fields, thousands separators, durations in "ns", shared memory in
# "Kbyte"): one line per launch, durations converted to microseconds whatever unit ncu used, a
# row of another launch never mixed in, the three largest stall reasons where the report has the
# stall metrics; a percentage column from the "%" row where a name comes in two units; an
# unknown duration unit, a missing file and a file with no kernel rows are
# exit 2 with the file named.
set -u
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, expect_exit, has, finish
H='"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name","Rule Type","Rule Description","Estimated Speedup Type","Estimated Speedup"'
# row ID KERNEL SECTION METRIC UNIT VALUE
row() { printf '"%s","1840","bench_cuda_attn","127.0.0.1","%s","1","13","(128, 1, 1)","(2048, 4, 1)","0","9.0","%s","%s","%s","%s",\n' "$@"; }
{
  echo "==PROF== Connected to process 1840 (bench_cuda_attn)"   # ncu's own lines are not CSV rows
  echo "$H"
  row 0 "void k_dkdv<__nv_bfloat16, 128, 64, 2, 1>(AttnArgs, int)" "GPU Speed Of Light Throughput" "Duration" "ns" "14,686,176"
  row 0 "void k_dkdv<__nv_bfloat16, 128, 64, 2, 1>(AttnArgs, int)" "GPU Speed Of Light Throughput" "Compute (SM) Throughput" "%" "34.87"
  row 0 "void k_dkdv<__nv_bfloat16, 128, 64, 2, 1>(AttnArgs, int)" "Launch Statistics" "Dynamic Shared Memory Per Block" "Kbyte" "65.79"
  row 0 "void k_dkdv<__nv_bfloat16, 128, 64, 2, 1>(AttnArgs, int)" "SpeedOfLight" "" "" ""
  row 1 "void k_reduce_parts<__nv_bfloat16>(T1 *, T1 *, AttnArgs, int, int)" "GPU Speed Of Light Throughput" "Duration" "usecond" "277.60"
  row 2 "void k_rows_dq<__nv_bfloat16, 128, 2, 1>(AttnArgs)" "GPU Speed Of Light Throughput" "Duration" "msecond" "5.82"
  row 2 "void k_rows_dq<__nv_bfloat16, 128, 2, 1>(AttnArgs)" "Launch Statistics" "Registers Per Thread" "register/thread" "136"
} >"$TMP/ncu.csv"

expect_exit "a report of three launches" 0 python3 bench/ncu_table.py "$TMP/ncu.csv"
cp "$TMP/out" "$TMP/table"
check "a header and one line a launch" test "$(wc -l <"$TMP/table")" = 4
check "nanoseconds to microseconds, SM %, shared KB of the dK/dV launch" \
  grep -qE '^void k_dkdv<__nv_bfloat16, 128, 64, 2, 1>\(AttnArgs, int\) +14686\.2 +34\.9 +- +- +- +- +65\.8 ' "$TMP/table"
check "microseconds kept" grep -qE '^void k_reduce_parts<__nv_bfloat16>\(T1 \*, T1 \*, AttnArgs, int, int\) +277\.6 ' "$TMP/table"
check "milliseconds to microseconds, registers of that launch only" \
  grep -qE '^void k_rows_dq<__nv_bfloat16, 128, 2, 1>\(AttnArgs\) +5820\.0 +- +- +- +- +136\.0 ' "$TMP/table"
check "no stall column where the report has no stall metrics" bash -c "! grep -q 'top stalls' '$TMP/table'"

# the stall metrics (--metrics regex:smsp__average_warps_issue_stalled_...): the three largest
# reasons of each launch, "selected" (the issue itself) left out, a launch without them "-"
st() { row 0 "void k_dkdv<__nv_bfloat16, 128, 64, 2, 1>(AttnArgs, int)" "Command line profiler metrics" \
  "smsp__average_warps_issue_stalled_$1_per_issue_active.ratio" "inst" "$2"; }
{
  cat "$TMP/ncu.csv"
  st selected 1.00; st long_scoreboard 3.04; st wait 1.72; st barrier 0.82; st gmma 0.08; st short_scoreboard 0.63
} >"$TMP/stall.csv"
expect_exit "a report with stall metrics" 0 python3 bench/ncu_table.py "$TMP/stall.csv"
check "a stall column in the header" grep -q 'top stalls (cycles an issue)' "$TMP/out"
check "the three largest stalls of the dK/dV launch, largest first, without selected" \
  grep -qE '^void k_dkdv<.* +long_scoreboard 3\.04, wait 1\.72, barrier 0\.82$' "$TMP/out"
check "a launch without stall metrics: -" grep -qE '^void k_reduce_parts<.* +-$' "$TMP/out"

# MemoryWorkloadAnalysis names bytes a second "Memory Throughput" too: the column keeps the %
{
  cat "$TMP/ncu.csv"
  row 2 "void k_rows_dq<__nv_bfloat16, 128, 2, 1>(AttnArgs)" "GPU Speed Of Light Throughput" "Memory Throughput" "%" "48.02"
  row 2 "void k_rows_dq<__nv_bfloat16, 128, 2, 1>(AttnArgs)" "Memory Workload Analysis" "Memory Throughput" "Gbyte/second" "1,329.89"
  row 2 "void k_rows_dq<__nv_bfloat16, 128, 2, 1>(AttnArgs)" "Memory Workload Analysis" "L2 Hit Rate" "%" "88.78"
} >"$TMP/mem.csv"
expect_exit "a report with the memory section" 0 python3 bench/ncu_table.py "$TMP/mem.csv"
check "memory throughput in %, the L2 hit rate last" \
  grep -qE '^void k_rows_dq<__nv_bfloat16, 128, 2, 1>\(AttnArgs\) +5820\.0 +- +48\.0 +- +- +136\.0 +- +- +- +88\.8$' "$TMP/out"

sed 's/"Duration","ns"/"Duration","fortnight"/' "$TMP/ncu.csv" >"$TMP/unit.csv"
expect_exit "an unknown duration unit" 2 python3 bench/ncu_table.py "$TMP/unit.csv"
check "it names the file and the unit" has "$TMP/out" "$TMP/unit.csv: unknown Duration unit 'fortnight'"
expect_exit "a missing file" 2 python3 bench/ncu_table.py "$TMP/none.csv"
check "it names the file" has "$TMP/out" "$TMP/none.csv"
echo "$H" >"$TMP/empty.csv"
expect_exit "no kernel rows" 2 python3 bench/ncu_table.py "$TMP/empty.csv"
check "it says so" has "$TMP/out" "$TMP/empty.csv: no kernel rows"
finish
