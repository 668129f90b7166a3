#!/usr/bin/env bash
# tests/cli/selftest.sh — the detection matrix (scenarios/selftest/): every family
# against every fault it must catch, and against no fault over three seeds, each
# detection a nested `nsa-harness run` whose verdicts and localisation are checked
# (see the detections for what each asserts: culprit layer 5 and 2, the lengths
# that are multiples of 256 and blocks.0.attn.sel.o, the first diverging step 2,
# the missing parameter, fault_hang / fault_crash in the stacks). With -j auto, as the main job
# runs it: the detections that judge no time side by side (one OpenMP thread each), those
# that judge time (a hang's latency, a scaled-down timeout, a timing check) last, alone.
#
# Usage (from the source root): bash tests/cli/selftest.sh <build dir>
# Passes when nsa-harness exits 0 (every detection as expected) and its RESULTS.md
# shows the matrix with no ✗. Skips (77) when the executables are not built.
set -u
build=${1:?usage: bash tests/cli/selftest.sh <build dir>}
H="$build/nsa-harness"
if [ ! -x "$H" ] || [ ! -x "$build/nsa-train" ]; then echo "SKIP: $H or nsa-train not built"; exit 77; fi
out=$(mktemp -d "${TMPDIR:-/tmp}/nsa_selftest.XXXXXX") || exit 1
trap 'rm -rf "$out"' EXIT
"$H" run scenarios/selftest --profile ci -j auto --out "$out/rep"
rc=$?
fail=0
if [ "$rc" -ne 0 ]; then
    echo "FAIL: the detection matrix exited $rc"
    sed -n '/^## Diagnosis/,/^## detection_matrix — detection matrix/p' "$out/rep/RESULTS.md"
    # the evidence of each detection that missed (the nested reports go with the temp dir)
    sed -n '/^## detection_matrix · .* — /,/^## Environment/p' "$out/rep/RESULTS.md"
    fail=1
fi
if ! grep -q "^## detection_matrix — detection matrix" "$out/rep/RESULTS.md"; then echo "FAIL: no matrix in RESULTS.md"; fail=1; fi
if sed -n '/^## detection_matrix — detection matrix/,/^## /p' "$out/rep/RESULTS.md" | grep '^| ' | grep -q "✗"; then
    echo "FAIL: a cell of the matrix is ✗"
    fail=1
fi
sed -n '/^## detection_matrix — detection matrix/,/^## /p' "$out/rep/RESULTS.md" | head -20
[ "$fail" -eq 0 ] && echo "PASS: every detection as expected"
exit "$fail"
