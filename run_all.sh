#!/usr/bin/env bash
# nsa-harness — the two commands.
#   ./run_all.sh          build if needed, then the main job: run every scenario in
#                         scenarios/ with the profile that fits the machine (gpu when a
#                         CUDA device is usable, else ci) and print the RESULTS.md path.
#                         Extra arguments go to `nsa-harness run` (e.g. --filter, --fault).
#                         Exit code: nsa-harness's (0 pass, 1 FAIL/HANG/CRASH, 2 invalid).
#   ./run_all.sh test     build and run every test (ctest); GPU-only tests show as SKIP
#                         where no GPU is usable.
# Environment: NSA_BUILD_DIR (default build), CI=true turns warnings into errors,
# CMAKE_ARGS extra configure arguments (e.g. -DCMAKE_CUDA_ARCHITECTURES=90).
set -euo pipefail
cd "$(dirname "$0")"
mode=${1:-run}
case "$mode" in test|run) ;; -*) mode=run; set -- run "$@" ;; esac
BUILD=${NSA_BUILD_DIR:-build}

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
if [ ${#opt_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    need_pkgs+=("${opt_pkgs[@]}")
  else
    echo "run_all.sh: note: without ${opt_pkgs[*]} the data-parallel (MPI) cases are skipped;" \
         "install with: sudo apt-get install -y ${opt_pkgs[*]}" >&2
  fi
fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
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
  cmake -S . -B "$BUILD" "${cfg_args[@]}" ${CMAKE_ARGS:-} >/dev/null || build_failed
elif [ ${#cfg_args[@]} -gt 0 ]; then
  cmake -S . -B "$BUILD" "${cfg_args[@]}" ${CMAKE_ARGS:-} >/dev/null || build_failed
fi
jobs=$(nproc 2>/dev/null || echo 2)
cmake --build "$BUILD" -j"$jobs" || build_failed

case "$mode" in
  test)
    # Tests run one at a time: each already uses every core through OpenMP.
    ctest --test-dir "$BUILD" --output-on-failure --no-tests=error
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
