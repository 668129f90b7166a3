#!/usr/bin/env bash
# tests/fuzz/run_fuzzer.sh FUZZER SEED_DIR SECONDS ARTIFACT_DIR — one libFuzzer target
# for a fixed time budget (a ctest entry, label fuzz: tests/fuzz/CMakeLists.txt).
# The committed seeds are read only: inputs the fuzzer adds go to a temporary corpus,
# removed at the end. libFuzzer first runs every seed (a crash there is a regression
# of a bug once fixed), then explores for SECONDS (env NSA_FUZZ_SECONDS overrides).
# Exit 0 when nothing was found; else libFuzzer's status, with its report, and the
# input that failed kept in ARTIFACT_DIR (once the bug is fixed, copy it into
# SEED_DIR as regression-<what>: make_corpus.py leaves such files alone).
# Sanitizers: ASan with leak detection (a loader must free what it allocated, for a
# rejected input too: the harness loads many scenarios, configs and dumps in one
# process); UBSan stops at the first report, with its stack. Limits per input: 10 s,
# 2 GB.
set -u
fuzzer=${1:?usage: run_fuzzer.sh FUZZER SEED_DIR SECONDS ARTIFACT_DIR}
seeds=${2:?}
secs=${NSA_FUZZ_SECONDS:-${3:?}}
artifacts=${4:?}
name=$(basename "$fuzzer")
[ -x "$fuzzer" ] || { echo "FAIL  $name: $fuzzer is not built"; exit 1; }
[ -d "$seeds" ] || { echo "FAIL  $name: no seed corpus $seeds"; exit 1; }
mkdir -p "$artifacts" || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/nsa_${name}.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:abort_on_error=1}
dict=()   # SEED_DIR.dict (make_corpus.py): the format's keys and tokens
[ -f "$seeds.dict" ] && dict=(-dict="$seeds.dict")
echo "$name: $(find "$seeds" -type f | wc -l) seeds in $seeds, then $secs s of fuzzing${dict:+ (dictionary $seeds.dict)}"
"$fuzzer" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "${dict[@]}" \
  -artifact_prefix="$artifacts/$name-" "$work/corpus" "$seeds" >"$work/log" 2>&1
rc=$?
if [ "$rc" = 0 ]; then
  grep -E "INITED|DONE" "$work/log"
  echo "PASS  $name: no crash, leak, timeout or sanitizer report in $secs s" \
       "($(grep -o 'number_of_executed_units: [0-9]*' "$work/log" | grep -o '[0-9]*$') inputs," \
       "$(find "$work/corpus" -type f | wc -l) new in the corpus)"
else
  # libFuzzer's progress lines are many: the start, then the failure whole
  grep -vE "^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse|RELOAD)" "$work/log" | tail -150
  echo "FAIL  $name: exit $rc; the input is in $artifacts/ (fix the bug, then copy it into $seeds/)"
fi
exit "$rc"
