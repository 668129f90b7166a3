#!/usr/bin/env bash
# tests/cli/probe.sh BUILD_DIR — nsa_probe (probe/, docs/trainer-maps.md): its Python tests
# (tests/probe/test_probe.py: the map loader's FILE:line:col errors, knob translation, no loss
# bit changed by the probe, metrics / trace / gate statistics / dump, faults, library mode),
# the handshake without torch, and the probe's copy of the harness config's keys and tiny
# config against nsa-train's own (`--check-config`). Needs a python with torch for the first
# part (SKIP otherwise, exit 77). About 15 s.
set -uo pipefail
build=${1:?usage: probe.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$here/lib/common.sh"
cd "$root"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
py=""
for c in "${NSA_TORCH_PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$c" ] || continue
  if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import torch' >/dev/null 2>&1; then py=$c; break; fi
done
[ -x "$build/nsa-train" ] || { echo "FAIL: $build/nsa-train not built"; exit 1; }

# the handshake needs no torch: answered by a python without it too, fast
anypy=$(command -v python3 || echo /usr/bin/python3)
PYTHONPATH=probe "$anypy" -c 'import sys; sys.modules["torch"] = None
import runpy; sys.argv = ["nsa_probe", "--map", "examples/showcase/showcase.map.json", "--protocol-info"]
runpy.run_module("nsa_probe", run_name="__main__")' >"$TMP/info" 2>&1
check "--protocol-info answers without importing torch" has "$TMP/info" '"protocol": 2'
check "--protocol-info lists the map's knobs" has "$TMP/info" '"nsa.force_branch": ["cmp", "none", "sel", "win"]'
check "--protocol-info derives prefill from train.prefill's values" has "$TMP/info" '"prefill": ["batched", "sequential"]'

# the probe's list of knobs = the harness config's keys; its --try config = tiny.json resolved
"$build/nsa-train" --config configs/tiny.json --check-config --set train.steps=1 >"$TMP/tiny.json" 2>&1
check "probe/nsa_probe/try_config.json is configs/tiny.json resolved with train.steps=1" \
  cmp -s "$TMP/tiny.json" probe/nsa_probe/try_config.json
"$anypy" - "$TMP/tiny.json" <<'PY' >"$TMP/keys" 2>&1
import json, sys
sys.path.insert(0, "probe")
from nsa_probe.mapfile import CONFIG_KEYS
cfg = json.load(open(sys.argv[1]))
have = {"%s.%s" % (s, k) for s, v in cfg.items() if isinstance(v, dict) for k in v} | {"data.path"}
mine = {"%s.%s" % (s, k) for s, ks in CONFIG_KEYS.items() for k in ks}
print("only nsa-train:", sorted(have - mine), "only the probe:", sorted(mine - have))
sys.exit(have != mine)
PY
check "the probe's knobs are exactly the config's keys ($(cat "$TMP/keys"))" test $? = 0

if [ -z "$py" ]; then
  echo "SKIP: no python with torch for the probe's own tests (tried \$NSA_TORCH_PYTHON, python3, /usr/bin/python3)"
  finish
fi
"$py" tests/probe/test_probe.py >"$TMP/unit" 2>&1
rc=$?
grep -E '\.\.\. (ok|FAIL|ERROR)' "$TMP/unit" | sed 's/^/  /'
check "tests/probe/test_probe.py ($(grep -E '^Ran ' "$TMP/unit"))" test "$rc" = 0
[ "$rc" = 0 ] || tail -40 "$TMP/unit"
finish
