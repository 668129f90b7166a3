#!/usr/bin/env bash
# tests/cli/install.sh BUILD_DIR — the build installs and the installed runner stands on its own:
#  1. `cmake --install BUILD --prefix P` puts nsa-harness and nsa-train in P/bin and the
#     scenarios, configs, golden baselines, probe, PyTorch adapter and examples in
#     P/share/nsa-harness;
#  2. from a folder outside the source tree, P/bin/nsa-harness finds its data there (harness/core/home.h):
#     `list` counts the installed scenarios as the source tree's; a run of the installed
#     gate_init scenario PASSes with the installed nsa-train, its report under ./reports, every
#     path in it (scenario files, trainer) under P — nothing read from the source tree;
#     `run --help` names the installed probe and baselines; a golden case compares with the
#     installed baselines (PASS, not SKIP); `baseline show` reads them;
#  3. CMakePresets.json lists the builds (cpu, cuda, asan) and test sets by label;
#  4. NSA_HARNESS_HOME overrides the data folder; one without scenarios/ is exit 2 naming it.
set -u
BUILD=${1:?usage: install.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
SRC=$(pwd)
[ -x "$BUILD/nsa-harness" ] && [ -x "$BUILD/nsa-train" ] || { echo "SKIP: nsa-harness or nsa-train not built in $BUILD"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"
P="$TMP/prefix"

expect_exit "cmake --install into a temporary prefix" 0 cmake --install "$BUILD" --prefix "$P"
check "... P/bin holds nsa-harness and nsa-train" test -x "$P/bin/nsa-harness" -a -x "$P/bin/nsa-train"
check "... P/share/nsa-harness holds scenarios, configs, baselines, probe, adapter, examples" \
  test -f "$P/share/nsa-harness/scenarios/gate_init.json" -a -f "$P/share/nsa-harness/configs/tiny.json" \
  -a -d "$P/share/nsa-harness/golden/baselines/ci" -a -x "$P/share/nsa-harness/probe/nsa-probe" \
  -a -x "$P/share/nsa-harness/adapters/torch/nsa-torch-train" -a -d "$P/share/nsa-harness/examples"

mkdir -p "$TMP/work"
cd "$TMP/work"
"$P/bin/nsa-harness" list --profile ci >"$TMP/list_inst" 2>&1
(cd "$SRC" && "$BUILD/nsa-harness" list --profile ci) >"$TMP/list_src" 2>&1
check "list from elsewhere counts the installed scenarios as the source tree's" \
  test "$(tail -1 "$TMP/list_inst")" = "$(tail -1 "$TMP/list_src")"
check "... and names installed files" grep -q "$P/share/nsa-harness/scenarios/gate_init.json" "$TMP/list_inst"
expect_exit "the installed runner runs the installed gate_init scenario" 0 \
  "$P/bin/nsa-harness" run "$P/share/nsa-harness/scenarios/gate_init.json" --profile ci
check "... its report is under ./reports" sh -c 'ls -d reports/2*/RESULTS.md >/dev/null 2>&1'
check "... every path in it is the prefix's, none the source tree's" python3 - "$P" "$SRC" <<'EOF'
import glob, json, sys
p, src = sys.argv[1], sys.argv[2]
s = json.load(open(glob.glob("reports/2*/summary.json")[0]))
files = [c["scenario_file"] for c in s["cases"]]
bad = [f for f in files if not f.startswith(p)]
text = open(glob.glob("reports/2*/RESULTS.md")[0]).read()
if src + "/" in text.replace(p, ""): bad.append("RESULTS.md names " + src)
if not files or bad: print(files, bad[:3]); sys.exit(1)
EOF
"$P/bin/nsa-harness" run --help >"$TMP/help" 2>&1
check "run --help names the installed probe and baselines" \
  sh -c "grep -q '$P/share/nsa-harness/probe/nsa-probe' '$TMP/help' && grep -q '$P/share/nsa-harness/golden/baselines' '$TMP/help'"
expect_exit "baseline show reads the installed baselines" 0 "$P/bin/nsa-harness" baseline show "$P/share/nsa-harness/golden/baselines"
check "... and lists them" grep -q "golden_regression" "$TMP/out"
expect_exit "a run with a golden check compares with the installed baselines" 0 \
  "$P/bin/nsa-harness" run "$P/share/nsa-harness/scenarios/golden_regression.json" --profile ci --filter variant=base --out "$TMP/gold"
check "... and finds them (PASS, no SKIP for a missing baseline)" python3 -c '
import json, sys; c = json.load(open(sys.argv[1]))["cases"]; sys.exit(not (c and all(x["verdict"] == "PASS" for x in c)))' "$TMP/gold/summary.json"
NSA_HARNESS_HOME="$SRC" "$P/bin/nsa-harness" run --help >"$TMP/help2" 2>&1
check "NSA_HARNESS_HOME overrides the data folder" grep -q "$SRC/probe/nsa-probe" "$TMP/help2"
NSA_HARNESS_HOME="$TMP/nowhere" expect_exit "NSA_HARNESS_HOME without scenarios/ is a usage error" 2 "$P/bin/nsa-harness" list
check "... naming the variable and the value" has "$TMP/out" "nsa-harness: NSA_HARNESS_HOME=$TMP/nowhere: no scenarios/ folder there"
cd "$SRC"
expect_exit "CMakePresets.json is valid (cmake --list-presets=all)" 0 cmake --list-presets=all
check "... it has the cpu, cuda and asan builds and the unit, cli, gpu and sanitize test sets" python3 -c '
import json; p = json.load(open("CMakePresets.json"))
names = lambda k: {x["name"] for x in p[k]}
ok = {"cpu", "cuda", "asan"} <= names("configurePresets") and {"unit", "cli", "gpu", "sanitize"} <= names("testPresets")
raise SystemExit(not ok)'
finish
