#!/usr/bin/env bash
# nsa-harness — the two commands.
#   ./run_all.sh          build what it runs (nsa-harness, nsa-train; no CUDA objects
#                         where no GPU is usable), then the main job: run every scenario in
#                         scenarios/ with the profile that fits the machine (gpu when a
#                         CUDA device is usable, else ci) and print the RESULTS.md path.
#                         Extra arguments go to `nsa-harness run` (e.g. --filter, --fault).
#                         Exit code: nsa-harness's (0 pass, 1 FAIL/HANG/CRASH, 2 invalid).
#   ./run_all.sh test     build and run every test (ctest); GPU-only tests show as SKIP
#                         where no GPU is usable. Then the sanitizer and fuzzing stage:
#                         a clang ASan+UBSan build in build-asan (-DNSA_FUZZ=ON, CPU
#                         only) runs the kernels/trainer unit tests, a short scenario
#                         run and the four fuzzers (README "Tests").
# Environment: NSA_BUILD_DIR (default build; the main job without a GPU: build-cpu),
# NSA_CUDA=on|off|auto (the main job: build the CUDA backend; auto = when
# nvidia-smi lists a GPU), CI=true turns warnings into errors,
# CMAKE_ARGS extra configure arguments (e.g. -DCMAKE_CUDA_ARCHITECTURES=90),
# NSA_ASAN_BUILD_DIR (default build-asan), NSA_FUZZ_SECONDS (each fuzzer's budget,
# default 25), NSA_SANITIZE_STAGE=0 leaves the sanitizer/fuzz stage out (it says so).
set -euo pipefail
cd "$(dirname "$0")"
mode=${1:-run}
case "$mode" in test|run) ;; -*) mode=run; set -- run "$@" ;; esac

# ---- what to build ---------------------------------------------------------------------
# test: everything, in build/ (CI compiles and links every CUDA file even without a GPU).
# run:  only nsa-harness and nsa-train. Where no GPU is usable the CUDA objects could not
#       run, so the main job builds without them, in build-cpu/ (-DNSA_ENABLE_CUDA=OFF):
#       the scenarios take the ci profile either way. NSA_CUDA=on|off|auto (default auto:
#       on when `nvidia-smi -L` lists a GPU) overrides the choice.
gpu_usable() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }
run_cfg=()
if [ "$mode" = run ]; then
  case "${NSA_CUDA:-auto}" in
    on) use_cuda=1 ;;
    off) use_cuda=0 ;;
    auto) if gpu_usable; then use_cuda=1; else use_cuda=0; fi ;;
    *) echo "run_all.sh: NSA_CUDA=${NSA_CUDA}: expected on, off or auto" >&2; exit 2 ;;
  esac
  if [ "$use_cuda" = 0 ]; then
    BUILD=${NSA_BUILD_DIR:-build-cpu}
    run_cfg+=(-DNSA_ENABLE_CUDA=OFF)
  else
    BUILD=${NSA_BUILD_DIR:-build}
  fi
  build_targets=(--target nsa-harness nsa-train)
else
  BUILD=${NSA_BUILD_DIR:-build}
  build_targets=()
fi

# ---- dependencies: install what is missing (root + apt-get), else say how ----------
need_pkgs=()
command -v cmake >/dev/null 2>&1 || need_pkgs+=(cmake)
command -v pkg-config >/dev/null 2>&1 || need_pkgs+=(pkg-config)
command -v cc >/dev/null 2>&1 || need_pkgs+=(build-essential)
command -v python3 >/dev/null 2>&1 || need_pkgs+=(python3)
if command -v pkg-config >/dev/null 2>&1; then
  pkg-config --exists jansson || need_pkgs+=(libjansson-dev)
  if [ "$mode" = test ]; then pkg-config --exists cmocka || need_pkgs+=(libcmocka-dev); fi
else
  need_pkgs+=(libjansson-dev libcmocka-dev)
fi
# MPI: the data-parallel path on the CPU. Optional: without it the build leaves MPI
# out and the multi-rank tests and ddp_onestep cases SKIP visibly. Installed when we
# can (root), else named.
opt_pkgs=()
command -v mpirun >/dev/null 2>&1 && command -v mpicc >/dev/null 2>&1 || opt_pkgs+=(openmpi-bin libopenmpi-dev)
# PyTorch: the PyTorch trainer (adapters/torch/), its tests and the cross-trainer parity
# scenario. Optional in the same way: Debian's python3-torch (CPU) when we can, else the
# cases that need it SKIP, naming the command. A python with torch is looked for as the
# adapter does: $NSA_TORCH_PYTHON, python3, /usr/bin/python3.
torch_python() {
  local c
  for c in "${NSA_TORCH_PYTHON:-}" python3 /usr/bin/python3; do
    [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 &&
      "$c" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' 2>/dev/null &&
      return 0
  done
  return 1
}
torch_pkgs=()
torch_python || torch_pkgs+=(python3-torch)
can_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }
if [ ${#opt_pkgs[@]} -gt 0 ]; then
  if can_apt; then
    need_pkgs+=("${opt_pkgs[@]}")
  else
    echo "run_all.sh: note: without ${opt_pkgs[*]} the data-parallel (MPI) cases are skipped;" \
         "install with: sudo apt-get install -y ${opt_pkgs[*]}" >&2
  fi
fi
if [ ${#torch_pkgs[@]} -gt 0 ]; then
  if can_apt; then
    need_pkgs+=("${torch_pkgs[@]}")
  else
    echo "run_all.sh: note: without a python3 with torch the PyTorch trainer's tests and the" \
         "cross-trainer parity cases are skipped; install with: sudo apt-get install -y python3-torch" \
         "(or set NSA_TORCH_PYTHON to a python that has torch)" >&2
  fi
fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if can_apt; then
    echo "run_all.sh: installing ${need_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
  else
    echo "run_all.sh: missing packages: ${need_pkgs[*]}" >&2
    echo "install them with:  sudo apt-get install -y ${need_pkgs[*]}" >&2
    exit 2
  fi
fi

# ---- configure + build (incremental) -------------------------------------------------
# Under `git bisect run ./run_all.sh --bisect ...` a commit that does not configure or
# build must exit 125 ("skip this commit"), not cmake's status, which git bisect would
# read as "bad".
bisect=0
for a in "$@"; do [ "$a" = --bisect ] && bisect=1; done
build_failed() {
  if [ "$bisect" = 1 ]; then echo "run_all.sh: the build failed: exit 125 (git bisect: skip this commit)" >&2; exit 125; fi
  exit 2
}
cfg_args=()
if [ "${CI:-}" = true ]; then cfg_args+=(-DNSA_WERROR=ON); fi
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD" "${run_cfg[@]}" "${cfg_args[@]}" ${CMAKE_ARGS:-} >/dev/null || build_failed
elif [ ${#cfg_args[@]} -gt 0 ]; then
  cmake -S . -B "$BUILD" "${run_cfg[@]}" "${cfg_args[@]}" ${CMAKE_ARGS:-} >/dev/null || build_failed
fi
jobs=$(nproc 2>/dev/null || echo 2)
cmake --build "$BUILD" -j"$jobs" "${build_targets[@]}" || build_failed

# ---- the sanitizer and fuzzing stage of `test` ------------------------------------------
# clang with its sanitizer and libFuzzer runtimes (Debian 12: clang, libclang-rt-14-dev;
# libomp-dev for OpenMP under clang). Installed when we can (root + apt-get); otherwise
# the stage is a visible SKIP naming the command, never a silent pass.
SAN_PKGS="clang libclang-rt-14-dev libomp-dev"
san_probe() {   # can clang build and link an ASan+UBSan libFuzzer target here?
  command -v clang >/dev/null 2>&1 || return 1
  local d rc
  d=$(mktemp -d) || return 1
  printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$d/p.c"
  clang -fsanitize=fuzzer,address,undefined "$d/p.c" -o "$d/p" >/dev/null 2>&1 && "$d/p" -runs=10 >/dev/null 2>&1
  rc=$?
  rm -rf "$d"
  return $rc
}
sanitize_stage() {
  local ASAN=${NSA_ASAN_BUILD_DIR:-build-asan} t0 t1 t2 t3 rc=0
  echo "==== sanitizer + fuzzing stage ($ASAN: clang, ASan + UBSan, CPU only) ===="
  if [ "${NSA_SANITIZE_STAGE:-1}" = 0 ]; then
    echo "SKIP  sanitizer + fuzzing stage: NSA_SANITIZE_STAGE=0"
    return 0
  fi
  if ! san_probe; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "run_all.sh: installing $SAN_PKGS"
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq && apt-get install -y -qq $SAN_PKGS >/dev/null || true
    fi
    if ! san_probe; then
      echo "SKIP  sanitizer + fuzzing stage: clang cannot build an ASan+UBSan libFuzzer program here" >&2
      echo "      install with:  sudo apt-get install -y $SAN_PKGS" >&2
      return 0
    fi
  fi
  t0=$(date +%s)
  local san_cfg=(-DNSA_FUZZ=ON -DNSA_ENABLE_CUDA=OFF -DNSA_ENABLE_MPI=OFF)
  if [ "${CI:-}" = true ]; then san_cfg+=(-DNSA_WERROR=ON); fi
  if [ ! -f "$ASAN/CMakeCache.txt" ] || [ ${#cfg_args[@]} -gt 0 ]; then
    CC=clang cmake -S . -B "$ASAN" "${san_cfg[@]}" >/dev/null || return 2
  fi
  cmake --build "$ASAN" -j"$jobs" || return 2
  t1=$(date +%s)
  # the unit tests (leaks checked) and the scenario run; test_gradcheck is left out:
  # under ASan it takes ~170 s (12x) and reaches no line of kernels/ or trainer/ that
  # the other unit tests do not (clang source coverage, README "Tests")
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:abort_on_error=1} \
    ctest --test-dir "$ASAN" --output-on-failure --no-tests=error -L 'kernels|trainer|sanitize' -E '^test_gradcheck$' || rc=1
  t2=$(date +%s)
  # the fuzzers, one per core (each is single-threaded), NSA_FUZZ_SECONDS each
  ctest --test-dir "$ASAN" --output-on-failure --no-tests=error -L fuzz -j"$jobs" || rc=1
  t3=$(date +%s)
  echo "==== sanitizer + fuzzing stage: build $((t1 - t0)) s, unit tests + scenario run $((t2 - t1)) s," \
       "fuzzers $((t3 - t2)) s; $([ $rc = 0 ] && echo PASS || echo FAIL) ===="
  return $rc
}

case "$mode" in
  test)
    # Tests run one at a time: each already uses every core through OpenMP.
    rc=0
    ctest --test-dir "$BUILD" --output-on-failure --no-tests=error || rc=$?
    sanitize_stage || { s=$?; [ "$rc" != 0 ] || rc=$s; }
    exit "$rc"
    ;;
  run)
    shift $(( $# > 0 ? 1 : 0 ))
    exec "$BUILD/nsa-harness" run "$@"
    ;;
  *)
    echo "usage: ./run_all.sh [run [nsa-harness run options...]] | ./run_all.sh test" >&2
    exit 2
    ;;
esac
