#!/usr/bin/env bash
# tests/cli/reference_train_torch.sh BUILD_DIR — rerun the float64 PyTorch reference
# trainer (tools/reference/make_train_golden.sh) and compare what it writes with the
# committed golden/reference_train/*.json (tools/reference/compare_train_golden.py:
# config, data order and clipping decisions equal; loss and grad_norm within 1e-11,
# lr 1e-15, final per-tensor norms 1e-10). So the committed curves stay what the
# reference computes: a file edited by hand, or a reference changed without
# regenerating, fails here.
#
# Needs a python3 with torch: $NSA_TORCH_PYTHON, else python3, else /usr/bin/python3
# (Debian's python3-torch). Without one it prints SKIP and exits 77 (ctest: skipped,
# never a silent pass); CI has no torch. About 15 s on 2 cores.
set -euo pipefail
build=${1:?usage: reference_train_torch.sh BUILD_DIR}
py=""
tried=()
for c in "${NSA_TORCH_PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$c" ] || continue
  tried+=("$c")
  if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import torch' >/dev/null 2>&1; then py=$c; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: no python3 with torch (tried: ${tried[*]}); the reference trainer was not rerun." \
       "Install python3-torch or set NSA_TORCH_PYTHON to run this check."
  exit 77
fi
if [ ! -x "$build/nsa-train" ]; then echo "FAIL: $build/nsa-train not built"; exit 1; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "reference trainer with $py (torch $("$py" -c 'import torch; print(torch.__version__)'))"
if ! bash tools/reference/make_train_golden.sh "$build" "$tmp" cpu "$py" > "$tmp/log" 2>&1; then
  cat "$tmp/log"
  echo "FAIL: tools/reference/make_train_golden.sh failed"
  exit 1
fi
grep -E "AdamW|^wrote" "$tmp/log"
n=0 fail=0
for f in golden/reference_train/*.json; do
  g=$tmp/$(basename "$f")
  if [ ! -f "$g" ]; then echo "FAIL: $f: make_train_golden.sh wrote no $(basename "$f")"; fail=1; continue; fi
  "$py" tools/reference/compare_train_golden.py "$f" "$g" || fail=1
  n=$((n + 1))
done
for g in "$tmp"/*.json; do
  [ -f "golden/reference_train/$(basename "$g")" ] || { echo "FAIL: $(basename "$g") is not committed"; fail=1; }
done
[ "$n" -gt 0 ] || { echo "FAIL: no golden/reference_train/*.json"; exit 1; }
if [ "$fail" -ne 0 ]; then echo "FAIL: the regenerated reference differs from the committed files"; exit 1; fi
echo "PASS: $n reference curves regenerated and equal to the committed files"
