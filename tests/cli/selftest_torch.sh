#!/usr/bin/env bash
# tests/cli/selftest_torch.sh — the detection matrix against the PyTorch trainer
# (scenarios/selftest/torch/detection_matrix.json, nested runs with --trainer-cmd
# adapters/torch/nsa-torch-train): branch_isolation, gate_init, gc_bisection, prefill_step5,
# seqlen_nan_sweep and ddp_onestep over gloo (2 ranks), each clean and with the faults the
# PyTorch trainer implements, with the verdicts and localisations of our own matrix (culprit
# layers 5 and 2, blocks.0.attn.sel.o at the multiples of 256, the first diverging step 2,
# the missing parameter, fault_hang / fault_crash in the Python stacks, the bucket rank 1
# never launched). With -j auto, as the main job runs it: the detections that judge no time side
# by side, those that judge time last, alone.
#
# Usage (from the source root): bash tests/cli/selftest_torch.sh <build dir> [timed|untimed|all]
#   timed (the default, RUN_SERIAL in ctest): the detections that judge time or start ranks that
#     must meet in time: a hang fault, a scaled-down timeout, a scenario with a growth or
#     perf_floor check, a scenario of several ranks (~1.5 min on 2 loaded cores);
#   untimed (tests/cli/selftest_torch_untimed.sh): every other detection of the ci profile;
#   all: the whole matrix in one run.
# The two parts split the ci profile's detections between them, each once, as read from
# scenarios/selftest/torch/detection_matrix.json: a detection added there runs in one of them.
# SKIP (77) without a python that has torch (the adapter looks for one as tests do:
# NSA_TORCH_PYTHON, python3, /usr/bin/python3), or when the executables are not built.
set -u
build=${1:?usage: bash tests/cli/selftest_torch.sh <build dir> [timed|untimed|all]}
part=${2:-timed}
case "$part" in timed|untimed|all) ;; *) echo "usage: bash tests/cli/selftest_torch.sh <build dir> [timed|untimed|all]"; exit 2 ;; esac
H="$build/nsa-harness"
if [ ! -x "$H" ] || [ ! -x "$build/nsa-train" ]; then echo "SKIP: $H or nsa-train not built"; exit 77; fi
if ! adapters/torch/nsa-torch-train --print-env >/dev/null 2>&1; then
  echo "SKIP: the PyTorch trainer cannot run here: $(adapters/torch/nsa-torch-train --print-env 2>&1 | head -1)"
  exit 77
fi
# The python the adapter picks, found once (as the adapter looks: NSA_TORCH_PYTHON, python3,
# /usr/bin/python3) and handed to its ~100 starts in the matrix: where python3 is a shim
# (pyenv) without torch, each start spent ~0.13 s asking it before /usr/bin/python3.
# torch_adapter.sh tests the adapter's own search.
for c in "${NSA_TORCH_PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 &&
    "$c" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' 2>/dev/null &&
    { NSA_TORCH_PYTHON=$(command -v "$c"); export NSA_TORCH_PYTHON; break; }
done
out=$(mktemp -d "${TMPDIR:-/tmp}/nsa_selftest_torch.XXXXXX") || exit 1
trap 'rm -rf "$out"' EXIT
# the part's detections (--case detection_matrix_torch/NAME), none for all
sel=()
if [ "$part" != all ]; then
  mapfile -t sel < <(python3 - "$part" scenarios/selftest/torch/detection_matrix.json <<'PY'
import json, os, sys
part, path = sys.argv[1], sys.argv[2]
d = json.load(open(path))
for x in d["detections"]:
    if "ci" not in x.get("profiles", ["ci"]):
        continue
    s = json.load(open(os.path.join(os.path.dirname(path), x["scenario"])))
    timed = ("hang" in json.dumps(x.get("fault", "")) or x.get("timeout_scale", 1) < 1
             or any(c.get("check") in ("growth", "perf_floor") for c in s.get("checks", []))
             or s.get("run", {}).get("world_size", 1) > 1)
    if timed == (part == "timed"):
        print("--case")
        print(d["name"] + "/" + x["name"])
PY
)
  if [ ${#sel[@]} -eq 0 ]; then echo "FAIL: no detection of the $part part in the matrix"; exit 1; fi
  echo "the $part part: $((${#sel[@]} / 2)) detections"
fi
"$H" run scenarios/selftest/torch --profile ci -j auto "${sel[@]}" --out "$out/rep"
rc=$?
fail=0
M="^## detection_matrix_torch — detection matrix"
if [ "$rc" -ne 0 ]; then
  echo "FAIL: the PyTorch detection matrix exited $rc"
  sed -n "/^## Diagnosis/,/$M/p" "$out/rep/RESULTS.md"
  sed -n '/^## detection_matrix_torch · .* — /,/^## Environment/p' "$out/rep/RESULTS.md"
  fail=1
fi
grep -q "$M" "$out/rep/RESULTS.md" || { echo "FAIL: no matrix in RESULTS.md"; fail=1; }
if sed -n "/$M/,/^## /p" "$out/rep/RESULTS.md" | grep '^| ' | grep -q "✗"; then
  echo "FAIL: a cell of the matrix is ✗"
  fail=1
fi
sed -n "/$M/,/^## /p" "$out/rep/RESULTS.md" | head -24
[ "$fail" -eq 0 ] && echo "PASS: every detection against the PyTorch trainer as expected"
exit "$fail"
