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
# PyYAML: the example foreign trainer (examples/showcase/) reads a YAML config, as research
# code does; wanted in the python that has torch
torch_yaml_python() {
  local c
  for c in "${NSA_TORCH_PYTHON:-}" python3 /usr/bin/python3; do
    [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 &&
      "$c" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None or u.find_spec("yaml") is None)' 2>/dev/null &&
      return 0
  done
  return 1
}
torch_yaml_python || torch_pkgs+=(python3-yaml)
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
# ---- `test`: what runs beside the main tests -------------------------------------------
# The main ctest runs one test at a time (tests/CMakeLists.txt says why: OpenMP teams on 2
# cores collapse when two run at once, and many tests judge wall-clock time). Beside it, a
# background lane runs CPU-only work that judges no time, at the lowest CPU priority (nice
# 19 in a session of its own whose autogroup is niced to 19 as well, where the kernel
# groups by session): it takes the CPU the main tests leave idle (they mostly wait: stall
# timeouts, rendezvous, Python startup) and almost none they want. Measured beside it: the
# detection matrix 87 s (88-91 s alone), harness_run 49 s (47-53 s alone). In order:
#   1. the main build's unit tests (labels kernels, trainer) but test_rendezvous,
#      test_ddp and test_stackdump (they judge time: in the main ctest); log $BUILD/bg_unit.log;
#   2. the sanitizer build in $ASAN (clang, ASan + UBSan, -DNSA_FUZZ=ON, CPU only);
#      log $ASAN/build.log;
#   3. its unit tests, leaks checked, but test_gradcheck (under ASan it takes ~170 s (12x)
#      and reaches no line of kernels/ or trainer/ that the other unit tests do not: clang
#      source coverage, README "Tests") and the three that judge time; log $ASAN/unit.log.
# After the main ctest, in the foreground: the lane's results, then the sanitized scenario
# run with test_rendezvous, test_ddp and test_stackdump, then the fuzzers (full priority: a fuzzer's
# budget is wall-clock seconds).
ASAN=${NSA_ASAN_BUILD_DIR:-build-asan}
san_state=skip lane_pid=
SAN_BG_EXCLUDE='^(test_gradcheck|test_rendezvous|test_ddp|test_stackdump)$'
SAN_FG_TESTS='^(asan_scenarios|test_rendezvous|test_ddp|test_stackdump)$'
sanitize_prepare() {   # clang ready and $ASAN configured; san_state says how it went
  if [ "${NSA_SANITIZE_STAGE:-1}" = 0 ]; then san_state=off; return 0; fi
  if ! san_probe; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "run_all.sh: installing $SAN_PKGS"
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq && apt-get install -y -qq $SAN_PKGS >/dev/null || true
    fi
    if ! san_probe; then san_state=noclang; return 0; fi
  fi
  local san_cfg=(-DNSA_FUZZ=ON -DNSA_ENABLE_CUDA=OFF -DNSA_ENABLE_MPI=OFF)
  if [ "${CI:-}" = true ]; then san_cfg+=(-DNSA_WERROR=ON); fi
  if [ ! -f "$ASAN/CMakeCache.txt" ] || [ ${#cfg_args[@]} -gt 0 ]; then
    CC=clang cmake -S . -B "$ASAN" "${san_cfg[@]}" >/dev/null || { san_state=cfgfail; return 0; }
  fi
  san_state=ready
}
# lsan_tracer_retry LOG DIR (tools/lsan_tracer_retry.sh): a test that failed only because
# LeakSanitizer's own tracer crashed at its exit is run once more, saying so in LOG
. tools/lsan_tracer_retry.sh
# bg_lane BUILD ASAN JOBS UNIT_RE SAN_STATE: the lane's three steps; each writes its exit
# status next to its log (bg_unit.rc, build.rc, unit.rc)
bg_lane() {
  local B=$1 A=$2 j=$3 re=$4 st=$5
  [ -w /proc/self/autogroup ] && echo 19 >/proc/self/autogroup 2>/dev/null
  if [ -n "$re" ]; then
    ctest --test-dir "$B" --output-on-failure --no-tests=error -R "$re" >"$B/bg_unit.log" 2>&1
    echo $? >"$B/bg_unit.rc"
  fi
  [ "$st" = ready ] || return 0
  date +%s >"$A/build.start"
  cmake --build "$A" -j"$j" >"$A/build.log" 2>&1
  echo $? >"$A/build.rc"
  date +%s >"$A/build.end"
  [ "$(cat "$A/build.rc")" = 0 ] || return 0
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:abort_on_error=1} \
    ctest --test-dir "$A" --output-on-failure --no-tests=error -L 'kernels|trainer' -E "$SAN_BG_EXCLUDE" >"$A/unit.log" 2>&1
  local rc=$?
  if [ "$rc" != 0 ] &&
     ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
     UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:abort_on_error=1} \
       lsan_tracer_retry "$A/unit.log" "$A"; then
    rc=0
  fi
  echo "$rc" >"$A/unit.rc"
}
# ctest's per-test lines and failures, without its progress lines
ctest_lines() { grep -vE '^( *Start +[0-9]+:|Test project|Internal ctest changing into directory|Constructing a list of tests|Updating test list|Checking test dependency graph)' "$1" | sed -e '/^ *$/d' -e 's/^/  /'; }
sanitize_finish() {
  local t1 t2 t3 tb rc=0
  echo "==== sanitizer + fuzzing stage ($ASAN: clang, ASan + UBSan, CPU only) ===="
  case "$san_state" in
    off) echo "SKIP  sanitizer + fuzzing stage: NSA_SANITIZE_STAGE=0"; return 0 ;;
    noclang)
      echo "SKIP  sanitizer + fuzzing stage: clang cannot build an ASan+UBSan libFuzzer program here" >&2
      echo "      install with:  sudo apt-get install -y $SAN_PKGS" >&2
      return 0 ;;
    cfgfail) echo "FAIL  sanitizer + fuzzing stage: configuring $ASAN failed"; return 2 ;;
  esac
  t1=$(date +%s)
  tb=$(cat "$ASAN/build.end" 2>/dev/null || echo "$t1")
  if [ "$(cat "$ASAN/build.rc" 2>/dev/null)" != 0 ]; then
    echo "FAIL  sanitizer + fuzzing stage: building $ASAN failed; the end of $ASAN/build.log:"
    grep -vE '^\[ *[0-9]+%\] (Building|Linking|Built target)' "$ASAN/build.log" | tail -n 60
    return 2
  fi
  echo "$ASAN built in the background in $((tb - $(cat "$ASAN/build.start" 2>/dev/null || echo "$tb"))) s (log $ASAN/build.log); its unit tests (leaks checked;" \
       "run in the background, log $ASAN/unit.log):"
  ctest_lines "$ASAN/unit.log"
  [ "$(cat "$ASAN/unit.rc" 2>/dev/null)" = 0 ] || rc=1
  # the scenario run and the two unit tests that judge time, in the foreground
  local fg=0 aso=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  local ubo=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:abort_on_error=1}
  ASAN_OPTIONS=$aso UBSAN_OPTIONS=$ubo \
    ctest --test-dir "$ASAN" --output-on-failure --no-tests=error -L 'kernels|trainer|sanitize' -R "$SAN_FG_TESTS" \
    >"$ASAN/fg.log" 2>&1 || fg=$?
  if [ "$fg" != 0 ] && ASAN_OPTIONS=$aso UBSAN_OPTIONS=$ubo lsan_tracer_retry "$ASAN/fg.log" "$ASAN"; then fg=0; fi
  cat "$ASAN/fg.log"
  [ "$fg" = 0 ] || rc=1
  t2=$(date +%s)
  # the fuzzers, one per core (each is single-threaded), NSA_FUZZ_SECONDS each
  ctest --test-dir "$ASAN" --output-on-failure --no-tests=error -L fuzz -j"$jobs" || rc=1
  t3=$(date +%s)
  echo "==== sanitizer + fuzzing stage: build and unit tests in the background of the main tests;" \
       "scenario run + 3 timed unit tests $((t2 - t1)) s, fuzzers $((t3 - t2)) s; $([ $rc = 0 ] && echo PASS || echo FAIL) ===="
  return $rc
}

case "$mode" in
  test)
    rc=0
    # an interrupted run leaves nothing of the background lane behind (and keeps its status)
    trap 'if [ -n "$lane_pid" ]; then kill -- -"$lane_pid" 2>/dev/null || kill "$lane_pid" 2>/dev/null || true; fi' EXIT
    sanitize_prepare
    # the main build's unit tests that go to the background lane
    bg_re=$(ctest --test-dir "$BUILD" -N -L 'kernels|trainer' | sed -n 's/^ *Test *#[0-9]*: *//p' |
            { grep -vxE 'test_rendezvous|test_ddp|test_stackdump' || true; } | paste -sd'|' -)
    [ -z "$bg_re" ] || bg_re="^($bg_re)\$"
    rm -f "$BUILD/bg_unit.log" "$BUILD/bg_unit.rc" "$ASAN/build.rc" "$ASAN/build.end" "$ASAN/unit.log" "$ASAN/unit.rc"
    lowprio=(nice -n 19)
    command -v setsid >/dev/null 2>&1 && lowprio=(setsid -w nice -n 19)
    "${lowprio[@]}" bash -c "$(declare -f bg_lane lsan_tracer_retry); SAN_BG_EXCLUDE='$SAN_BG_EXCLUDE'; bg_lane \"\$@\"" \
      _ "$BUILD" "$ASAN" "$jobs" "$bg_re" "$san_state" </dev/null >/dev/null 2>&1 &
    lane_pid=$!
    echo "==== background lane (nice 19): the unit tests of $BUILD, then the sanitizer build and its unit tests" \
         "(logs $BUILD/bg_unit.log, $ASAN/build.log, $ASAN/unit.log) ===="
    t_ct=$(date +%s)
    ctest --test-dir "$BUILD" --output-on-failure --no-tests=error ${bg_re:+-E "$bg_re"} || rc=$?
    t_ct_end=$(date +%s)
    wait "$lane_pid" || true
    lane_pid=
    t_w=$(date +%s)
    echo "==== ctest ($BUILD, one test at a time): $((t_ct_end - t_ct)) s; then $((t_w - t_ct_end)) s waiting for the background lane ===="
    if [ -n "$bg_re" ]; then
      echo "the unit tests of $BUILD (run in the background, log $BUILD/bg_unit.log):"
      ctest_lines "$BUILD/bg_unit.log"
      [ "$(cat "$BUILD/bg_unit.rc" 2>/dev/null)" = 0 ] || { [ "$rc" != 0 ] || rc=8; }
    fi
    sanitize_finish || { s=$?; [ "$rc" != 0 ] || rc=$s; }
    exit "$rc"
    ;;
  run)
    shift $(( $# > 0 ? 1 : 0 ))
    # with arguments: one `nsa-harness run` with them. Without: every scenario against
    # nsa-train, then the scenarios for users' own trainers (scenarios/trainer/) against the
    # example foreign trainer through its map (examples/showcase/; docs/your-trainer.md).
    [ $# -gt 0 ] && exec "$BUILD/nsa-harness" run "$@"
    rc=0
    "$BUILD/nsa-harness" run || rc=$?
    echo "==== the scenarios for your own trainer, against the example foreign trainer (examples/showcase/showcase.map.json) ===="
    rc2=0
    "$BUILD/nsa-harness" run scenarios/trainer/*.json --trainer-map examples/showcase/showcase.map.json || rc2=$?
    # the worse of the two: 2 (invalid) over 1 (a case failed) over 0
    if [ "$rc" = 2 ] || [ "$rc2" = 2 ]; then exit 2; fi
    [ "$rc" = 0 ] && exit "$rc2"
    exit "$rc"
    ;;
  *)
    echo "usage: ./run_all.sh [run [nsa-harness run options...]] | ./run_all.sh test" >&2
    exit 2
    ;;
esac
