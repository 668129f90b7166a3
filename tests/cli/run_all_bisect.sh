#!/usr/bin/env bash
# tests/cli/run_all_bisect.sh BUILD_DIR — `git bisect run ./run_all.sh --bisect ...` must skip
# a commit that does not build: run_all.sh exits 125 when its configure or build fails and
# --bisect is among its arguments (git bisect reads any other code from 1 to 127 as "bad"),
# and 2 without --bisect. Checked on a copy of the tree with a broken CMakeLists.txt
# (configure fails) and a broken kernel source (the build fails), CPU only.
set -u
SRC=$(pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, finish
copy() { rm -rf "$TMP/t"; mkdir -p "$TMP/t"
  git -C "$SRC" ls-files -z --cached --others --exclude-standard | (cd "$SRC" && xargs -0 tar -cf - 2>/dev/null) | tar -xf - -C "$TMP/t"; }
# expect NAME RC ARGS...: run_all.sh in the copy (its own build folder, CUDA off)
expect() { local name=$1 want=$2; shift 2
  (cd "$TMP/t" && NSA_BUILD_DIR="$TMP/t/b" CMAKE_ARGS="-DNSA_ENABLE_CUDA=OFF -DNSA_ENABLE_MPI=OFF" ./run_all.sh "$@") \
    >"$TMP/out" 2>&1
  local rc=$?
  if [ "$rc" = "$want" ]; then ok "$name (exit $rc)"; else bad "$name: exit $rc, want $want"; tail -5 "$TMP/out"; fi; }

copy
echo 'this is not cmake (' >>"$TMP/t/CMakeLists.txt"
expect "configure fails, --bisect: skip" 125 --bisect scenarios/gate_init.json --profile ci
grep -q "exit 125 (git bisect: skip this commit)" "$TMP/out" && ok "says why it skips" || bad "says why it skips"
expect "configure fails, no --bisect: 2" 2 scenarios/gate_init.json --profile ci

copy
printf '\nint broken = ;\n' >>"$TMP/t/kernels/cpu/gemm.c"
expect "build fails, --bisect: skip" 125 --bisect scenarios/gate_init.json --profile ci

grep -q "gemm.c.*error" "$TMP/out" && ok "the build failed in the broken file" || bad "the build failed in the broken file"
finish
