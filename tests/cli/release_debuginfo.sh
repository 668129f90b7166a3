#!/usr/bin/env bash
# tests/cli/release_debuginfo.sh BUILD_DIR — every build type keeps the diagnostics
#. A CPU-only -DCMAKE_BUILD_TYPE=Release build of nsa-train and
# nsa-harness, from this source tree, in a temporary folder (about 10 s on 2 cores):
#  1. its C compile commands carry -g (CMakeLists.txt adds it to every build type);
#  2. nsa-train --fault crash=0:1: SIGSEGV, the crash stack names
#     `fault_crash at .../trainer/faults.c:LINE` and train.c:LINE frames;
#  3. nsa-harness run --fault hang=0:2:backward (the runner's watchdog, SIGUSR1, the
#     symbolized stall dump): HANG, the stack file names fault_hang with file:line and
#     the diagnosis says "its stack stops in `fault_hang (trainer/faults.c:";
#  4. nsa-harness run --fault crash=0:1: CRASH, "the stack stops in
#     `fault_crash (trainer/faults.c:".
# These are the parts of diag_cli.sh and harness_run.sh that need file:line; a Release
# build without debug info printed `fault_hang at ??:?` and failed all of them.
# The build is configured without NSA_WERROR: what it checks is the debug info; warnings
# are gated by CI's own (RelWithDebInfo) build.
# BUILD_DIR is unused (the test builds its own); kept for the cli test convention.
set -u
command -v cmake >/dev/null 2>&1 || { echo "SKIP: cmake not found"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 not found (needed to read the reports)"; exit 77; }
command -v addr2line >/dev/null 2>&1 || { echo "SKIP: addr2line (binutils) not found: stacks cannot name file:line"; exit 77; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/nsa_release.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, finish
ulimit -c 0   # the crash must not leave a core file
R="$TMP/build"

t0=$(date +%s)
if ! cmake -S . -B "$R" -DCMAKE_BUILD_TYPE=Release -DNSA_ENABLE_CUDA=OFF -DNSA_ENABLE_MPI=OFF \
       -DNSA_WERROR=OFF >"$TMP/cfg.log" 2>&1; then
  bad "configure a Release build"; tail -20 "$TMP/cfg.log"; finish
fi
if ! cmake --build "$R" -j"$(nproc 2>/dev/null || echo 2)" --target nsa-train nsa-harness >"$TMP/build.log" 2>&1; then
  bad "build nsa-train and nsa-harness (Release)"; tail -20 "$TMP/build.log"; finish
fi
echo "      (Release build: $(( $(date +%s) - t0 )) s)"

# ---- 1. the flags ------------------------------------------------------------------------------
check "Release: the build type is Release" grep -qx "CMAKE_BUILD_TYPE:STRING=Release" "$R/CMakeCache.txt"
check "Release: every C compile command carries -g" python3 - "$R/compile_commands.json" <<'PY'
import json, sys
cmds = [c for c in json.load(open(sys.argv[1])) if c["file"].endswith(".c")]
assert cmds, "no C compile commands"
lacking = [c["file"] for c in cmds if " -g" not in " " + c["command"] + " " or " -g0 " in c["command"] + " "]
assert not lacking, lacking[:5]
PY

# ---- 2. nsa-train's crash stack ---------------------------------------------------------------
( bash -c 'ulimit -c 0; exec "$@"' _ "$R/nsa-train" --config configs/tiny.json --threads 2 --steps 3 --quiet \
    --out "$TMP/crash_train" --stack-file "$TMP/crash_train.txt" --fault crash=0:1 >/dev/null 2>&1; exit $? ) 2>/dev/null
rc=$?
check "Release nsa-train --fault crash=0:1 dies by SIGSEGV (status 139, got $rc)" test "$rc" = 139
check "Release crash stack: #0 fault_crash at .../trainer/faults.c:LINE" \
  grep -qE "#0 +fault_crash at .*trainer/faults\.c:[0-9]+" "$TMP/crash_train.txt"
check "Release crash stack: train.c:LINE frames" grep -qE "train\.c:[0-9]+" "$TMP/crash_train.txt"
check "Release crash stack: no ??:? frame of nsa-train's own code" \
  bash -c "! grep -E '(fault_|train_|faults_on_phase|main) at \?\?:\?' '$TMP/crash_train.txt'"
[ "$fail" = 0 ] || sed 's/^/    | /' "$TMP/crash_train.txt" | head -30

# ---- 3. the runner's HANG ------------------------------------------------------------------------
# timeout 120 s x 0.05 = 6 s; the rank hangs at step 2's backward within ~0.1 s
"$R/nsa-harness" run scenarios/branch_isolation.json --profile ci --filter 'branch=none,phi=avg' \
    --trainer "$R/nsa-train" --fault hang=0:2:backward --timeout-scale 0.05 --out "$TMP/hang" --quiet >"$TMP/hang.out" 2>&1
rc=$?
check "Release hang: nsa-harness exits 1 (got $rc)" test "$rc" = 1
stack="$TMP/hang/branch_isolation/branch=none,phi=avg/stacks/rank_0.txt"
check "Release hang: the stack file names fault_hang at .../trainer/faults.c:LINE" \
  grep -qE "fault_hang at .*trainer/faults\.c:[0-9]+" "$stack"
check "Release hang: HANG, and the diagnosis names fault_hang (trainer/faults.c:LINE)" python3 - "$TMP/hang" <<'PY'
import json, sys
rep = sys.argv[1]
c = json.load(open(rep + "/summary.json"))["cases"][0]
assert c["verdict"] == "HANG", c["verdict"]
md = open(rep + "/RESULTS.md").read()
assert "its stack stops in `fault_hang (trainer/faults.c:" in md, "no fault_hang (trainer/faults.c:LINE) in the diagnosis"
PY
[ "$fail" = 0 ] || { sed 's/^/    | /' "$stack" 2>&1 | head -30; tail -5 "$TMP/hang.out"; }

# ---- 4. the runner's CRASH -----------------------------------------------------------------------
"$R/nsa-harness" run scenarios/branch_isolation.json --profile ci --filter 'branch=none,phi=avg' \
    --trainer "$R/nsa-train" --fault crash=0:1 --out "$TMP/crash" --quiet >"$TMP/crash.out" 2>&1
rc=$?
check "Release crash: nsa-harness exits 1 (got $rc)" test "$rc" = 1
check "Release crash: CRASH by SIGSEGV, the diagnosis names fault_crash (trainer/faults.c:LINE)" python3 - "$TMP/crash" <<'PY'
import json, sys
rep = sys.argv[1]
c = json.load(open(rep + "/summary.json"))["cases"][0]
assert c["verdict"] == "CRASH" and c["ranks"][0]["signal"] == 11, (c["verdict"], c["ranks"])
md = open(rep + "/RESULTS.md").read()
assert "the stack stops in `fault_crash (trainer/faults.c:" in md, "no fault_crash (trainer/faults.c:LINE) in the diagnosis"
PY
finish
