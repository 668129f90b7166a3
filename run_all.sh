#!/usr/bin/env bash
# nsa-harness — the two commands.
#
#   ./run_all.sh          build what it runs (nsa-harness, nsa-train; no CUDA objects
#                         where no GPU is usable: in build-cpu/, else build/), then the main
#                         job: run every scenario in scenarios/ with the profile that fits the
#                         machine (gpu when a CUDA device is usable, else ci), independent
#                         cases side by side over the GPUs or cores (NSA_JOBS below), and
#                         scenarios/trainer/ against the example foreign trainer (after it; on
#                         a GPU machine beside it, the GPUs shared case by case); prints the
#                         RESULTS.md paths and, last, a line with the outcome of both runs.
#   ./run_all.sh [run] OPTIONS...
#                         the same build, then one `nsa-harness run OPTIONS...` (e.g.
#                         --filter, --fault, --profile; `./run_all.sh run --help` lists them).
#   ./run_all.sh test     build everything in build/ and run every test (ctest); GPU-only
#                         tests show as SKIP where no GPU is usable. Beside the main ctest, a
#                         background lane at the lowest CPU priority runs the unit tests, the
#                         sanitizer build, the command-line tests that judge no time (not
#                         RUN_SERIAL) and the four fuzzers; then the sanitizer and fuzzing
#                         stage: the clang ASan+UBSan build in build-asan (-DNSA_FUZZ=ON, CPU
#                         only) ran the kernels/trainer unit tests and the fuzzers in the lane,
#                         and runs a short scenario run in the foreground (README "Tests"). A lane test that timed out (a loaded
#                         machine gives the lane almost no CPU) is run once more in the
#                         foreground, saying so (tools/timeout_retry.sh). The last line says
#                         PASS, or FAIL and what failed.
#   ./run_all.sh --help   this text (nothing is built; so does `help` or `-h`).
#
# Exit codes of the main job (no arguments, or `run`): the runner's (nsa-harness run):
#   0 every case passed (SKIPs allowed)   1 a case FAIL, HANG or CRASH
#   2 an invalid scenario or a usage error (of run_all.sh or of nsa-harness run), missing
#     packages it could not install, a configure or build that failed
#   125 with --bisect among the arguments: the configure or build failed, or the runner
#     could not judge the commit (git bisect run: skip this commit)
#   130 interrupted (Ctrl-C)
#   Without arguments the worse of its two runs: 2 over 1 over 0.
# Exit codes of `test`:
#   0 every test passed or SKIPped visibly
#   1 a test failed: in the main ctest, the background lane (after a timed-out test's rerun)
#     or the sanitizer and fuzzing stage; the last line names each
#   2 a usage error, missing packages it could not install, a configure or build that failed
#     (the main build, or the sanitizer build of the stage)
#   130 interrupted (Ctrl-C)
#
# Environment: NSA_JOBS (the main job's cases at a time, `nsa-harness run -j`: default auto,
# one case per GPU for the gpu profile, else one per core; 1: one at a time),
# NSA_BUILD_DIR (default build; the main job without a GPU: build-cpu),
# NSA_CUDA=on|off|auto (the main job: build the CUDA backend; auto = when
# nvidia-smi lists a GPU), CI=true turns warnings into errors,
# CMAKE_ARGS extra configure arguments (e.g. -DCMAKE_CUDA_ARCHITECTURES=90),
# NSA_ASAN_BUILD_DIR (default build-asan), NSA_FUZZ_SECONDS (each fuzzer's budget,
# default 25), NSA_SANITIZE_STAGE=0 leaves the sanitizer/fuzz stage out (it says so).
set -euo pipefail
cd "$(dirname "$0")"
# the header above, without its comment marks: --help, and a mistyped mode (before any build)
usage() {
  echo "usage: ./run_all.sh [run] [nsa-harness run options...] | ./run_all.sh test | ./run_all.sh --help"
  sed -n '3,/^set -euo pipefail/p' run_all.sh | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
}
mode=${1:-run}
case "$mode" in
  run) ;;
  test)
    if [ $# -gt 1 ]; then
      echo "run_all.sh: test takes no arguments (got: ${*:2}); see ./run_all.sh --help" >&2
      exit 2
    fi ;;
  -h|--help|help) usage; exit 0 ;;
  -*) mode=run; set -- run "$@" ;;
  *)
    echo "run_all.sh: unknown mode '$mode': expected run, test or --help (or options of nsa-harness run," \
         "which start with -)" >&2
    echo >&2
    usage >&2
    exit 2 ;;
esac

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
  echo "run_all.sh $mode: FAIL (exit 2): configuring or building $BUILD failed (the errors above)" >&2
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
# cores collapse when two run at once, and many tests judge wall-clock time): the tests that
# judge time (RUN_SERIAL) and the GPU tests. Beside it, a
# background lane runs CPU-only work that judges no time, at a low CPU priority (nice 10 in a
# session of its own whose autogroup is niced to 10 as well, where the kernel groups by
# session): it takes the CPU the main tests leave idle (they mostly wait: stall timeouts,
# rendezvous, Python startup) and about a tenth of what they want — not nice 19's 1.5 %: the
# lane's command-line tests run trainers whose runs a stall watchdog judges (a rank without a
# heartbeat for stall_s, 30 s on the ci profile, is hung), and a PyTorch step that needs half
# a second of CPU would take that long at 1.5 %. Measured beside it: the
# detection matrix 87 s (88-91 s alone), harness_run 49 s (47-53 s alone). In order:
#   1. the main build's unit tests (labels kernels, trainer, harness) but test_rendezvous,
#      test_ddp and test_stackdump (they judge time: in the main ctest); log $BUILD/bg_unit.log;
#   2. the sanitizer build in $ASAN (clang, ASan + UBSan, -DNSA_FUZZ=ON, CPU only);
#      log $ASAN/build.log;
#   3. its unit tests, leaks checked, but test_gradcheck (under ASan it takes ~170 s (12x)
#      and reaches no line of kernels/ or trainer/ that the other unit tests do not: clang
#      source coverage, README "Tests") and the three that judge time; log $ASAN/unit.log;
#   4. the main build's command-line tests (label cli) that are not RUN_SERIAL: they judge no
#      time and start no ranks that must meet in time, so a starved CPU only makes them
#      longer; one per core at a time, each trainer with one OpenMP thread (OMP_NUM_THREADS=1;
#      a run that sets its own keeps it): two teams of every core collapse, and the tiny ci
#      model gains little from a second thread (test_gradcheck: 16 s with 2 threads, 19 s with
#      1; two at once 71 s with 2 threads each, 20 s with 1); log $BUILD/bg_cli.log;
#   5. the fuzzers of $ASAN, one per core: the lane ends well before the main ctest (a clean
#      clone on 2 cores: 95 s before it), so their wall-clock budget (NSA_FUZZ_SECONDS each)
#      runs beside the main ctest's last tests instead of after it, 60 s off the whole
#      run; at nice 10 they take the CPU those tests leave idle (they mostly wait on ranks and
#      Python); each fuzzer's last line, printed after the main ctest, says how many inputs it
#      ran; log $ASAN/fuzz.log.
# After the main ctest, in the foreground: the lane's results, then the sanitized scenario
# run with test_rendezvous, test_ddp and test_stackdump.
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
# timeout_retry LOG DIR WHERE (tools/timeout_retry.sh): a lane test that timed out is run once
# more in the foreground, saying so in LOG; any other failure stays one
. tools/timeout_retry.sh
# lane_result NAME HEADING TESTS: the lane's step NAME ($BUILD/NAME.log, .rc) after the main
# ctest: a test that timed out there once more in the foreground (tools/timeout_retry.sh), its
# ctest lines under HEADING, and a failure (of TESTS) added to rc and failures
lane_result() {
  local log=$BUILD/$1.log rcf=$BUILD/$1.rc names
  if [ "$(cat "$rcf" 2>/dev/null)" != 0 ] && timeout_retry "$log" "$BUILD" "the background lane (nice 10)"; then
    echo 0 >"$rcf"
  fi
  echo "$2 (run in the background, log $log):"
  ctest_lines "$log"
  if [ "$(cat "$rcf" 2>/dev/null)" != 0 ]; then
    rc=1
    names=$(failed_tests "$log")
    failures+=("the background lane's $3 (log $log): ${names:-see the log}")
  fi
}
# bg_lane BUILD ASAN JOBS UNIT_RE SAN_STATE CLI_RE: the lane's four steps; each writes its
# exit status next to its log (bg_unit.rc, build.rc, unit.rc, bg_cli.rc)
bg_lane() {
  local B=$1 A=$2 j=$3 re=$4 st=$5 cli=$6
  [ -w /proc/self/autogroup ] && echo 10 >/proc/self/autogroup 2>/dev/null
  if [ -n "$re" ]; then
    ctest --test-dir "$B" --output-on-failure --no-tests=error -R "$re" >"$B/bg_unit.log" 2>&1
    echo $? >"$B/bg_unit.rc"
  fi
  [ "$st" = ready ] && bg_lane_asan "$A" "$j"
  if [ -n "$cli" ]; then
    OMP_NUM_THREADS=1 ctest --test-dir "$B" --output-on-failure --no-tests=error -j"$j" -R "$cli" >"$B/bg_cli.log" 2>&1
    echo $? >"$B/bg_cli.rc"
  fi
  if [ "$st" = ready ] && [ "$(cat "$A/build.rc" 2>/dev/null)" = 0 ]; then
    ctest --test-dir "$A" --output-on-failure --no-tests=error -L fuzz -j"$j" >"$A/fuzz.log" 2>&1
    echo $? >"$A/fuzz.rc"
    # each fuzzer's own last line (its inputs run), before a later ctest in $A replaces the log
    grep -hE '^(PASS|FAIL)  fuzz_' "$A/Testing/Temporary/LastTest.log" >"$A/fuzz_lines.log" 2>/dev/null
  fi
  return 0
}
# bg_lane_asan ASAN JOBS: the lane's sanitizer build and its unit tests
bg_lane_asan() {
  local A=$1 j=$2
  date +%s >"$A/build.start"
  cmake --build "$A" -j"$j" >"$A/build.log" 2>&1
  echo $? >"$A/build.rc"
  date +%s >"$A/build.end"
  [ "$(cat "$A/build.rc")" = 0 ] || return 0
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:abort_on_error=1} \
    ctest --test-dir "$A" --output-on-failure --no-tests=error -L 'kernels|trainer|harness' -E "$SAN_BG_EXCLUDE" >"$A/unit.log" 2>&1
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
# failed_tests LOG: the names ctest's summary in LOG lists as failed, space-separated
failed_tests() {
  { sed -n '/^The following tests FAILED:/,/^Errors while running CTest/ s/^[[:space:]]*[0-9][0-9]* - \([^ ]*\) .*/\1/p' "$1" 2>/dev/null || true; } |
    sort -u | paste -sd' ' -
}
# what failed, one entry per part, for the last line (`test`)
failures=()
sanitize_finish() {
  local t1 t2 t3 tb rc=0 names
  echo "==== sanitizer + fuzzing stage ($ASAN: clang, ASan + UBSan, CPU only) ===="
  case "$san_state" in
    off) echo "SKIP  sanitizer + fuzzing stage: NSA_SANITIZE_STAGE=0"; return 0 ;;
    noclang)
      echo "SKIP  sanitizer + fuzzing stage: clang cannot build an ASan+UBSan libFuzzer program here" >&2
      echo "      install with:  sudo apt-get install -y $SAN_PKGS" >&2
      return 0 ;;
    cfgfail) echo "FAIL  sanitizer + fuzzing stage: configuring $ASAN failed"; failures+=("configuring $ASAN"); return 2 ;;
  esac
  t1=$(date +%s)
  tb=$(cat "$ASAN/build.end" 2>/dev/null || echo "$t1")
  if [ "$(cat "$ASAN/build.rc" 2>/dev/null)" != 0 ]; then
    echo "FAIL  sanitizer + fuzzing stage: building $ASAN failed; the end of $ASAN/build.log:"
    grep -vE '^\[ *[0-9]+%\] (Building|Linking|Built target)' "$ASAN/build.log" | tail -n 60
    failures+=("building $ASAN (log $ASAN/build.log)")
    return 2
  fi
  local aso=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  local ubo=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:abort_on_error=1}
  # a sanitized unit test that timed out in the lane: once more in the foreground
  if [ "$(cat "$ASAN/unit.rc" 2>/dev/null)" != 0 ] &&
     ASAN_OPTIONS=$aso UBSAN_OPTIONS=$ubo timeout_retry "$ASAN/unit.log" "$ASAN" "the background lane (nice 10)"; then
    echo 0 >"$ASAN/unit.rc"
  fi
  echo "$ASAN built in the background in $((tb - $(cat "$ASAN/build.start" 2>/dev/null || echo "$tb"))) s (log $ASAN/build.log); its unit tests (leaks checked;" \
       "run in the background, log $ASAN/unit.log):"
  ctest_lines "$ASAN/unit.log"
  if [ "$(cat "$ASAN/unit.rc" 2>/dev/null)" != 0 ]; then
    rc=1
    names=$(failed_tests "$ASAN/unit.log")
    failures+=("the sanitized unit tests (log $ASAN/unit.log): ${names:-see the log}")
  fi
  # the scenario run and the two unit tests that judge time, in the foreground
  local fg=0
  ASAN_OPTIONS=$aso UBSAN_OPTIONS=$ubo \
    ctest --test-dir "$ASAN" --output-on-failure --no-tests=error -L 'kernels|trainer|sanitize' -R "$SAN_FG_TESTS" \
    >"$ASAN/fg.log" 2>&1 || fg=$?
  if [ "$fg" != 0 ] && ASAN_OPTIONS=$aso UBSAN_OPTIONS=$ubo lsan_tracer_retry "$ASAN/fg.log" "$ASAN"; then fg=0; fi
  cat "$ASAN/fg.log"
  if [ "$fg" != 0 ]; then
    rc=1
    names=$(failed_tests "$ASAN/fg.log")
    failures+=("the sanitized scenario run and timed unit tests (log $ASAN/fg.log): ${names:-see the log}")
  fi
  t2=$(date +%s)
  # the fuzzers, one per core (each is single-threaded), NSA_FUZZ_SECONDS each: run in the lane
  echo "the fuzzers (run in the background, log $ASAN/fuzz.log):"
  if [ -f "$ASAN/fuzz.log" ]; then ctest_lines "$ASAN/fuzz.log"; fi
  if [ -f "$ASAN/fuzz_lines.log" ]; then sed 's/^/  /' "$ASAN/fuzz_lines.log"; fi
  if [ "$(cat "$ASAN/fuzz.rc" 2>/dev/null)" != 0 ]; then
    rc=1
    names=$(failed_tests "$ASAN/fuzz.log")
    failures+=("the fuzzers (log $ASAN/fuzz.log): ${names:-see the log}")
  fi
  echo "==== sanitizer + fuzzing stage: build, unit tests and fuzzers in the background of the main tests;" \
       "scenario run + 3 timed unit tests $((t2 - t1)) s; $([ $rc = 0 ] && echo PASS || echo FAIL) ===="
  return $rc
}

case "$mode" in
  test)
    rc=0
    # an interrupted run leaves nothing of the background lane behind (and keeps its status)
    trap 'if [ -n "$lane_pid" ]; then kill -- -"$lane_pid" 2>/dev/null || kill "$lane_pid" 2>/dev/null || true; fi' EXIT
    sanitize_prepare
    # the main build's unit tests that go to the background lane
    bg_re=$(ctest --test-dir "$BUILD" -N -L 'kernels|trainer|harness' | sed -n 's/^ *Test *#[0-9]*: *//p' |
            { grep -vxE 'test_rendezvous|test_ddp|test_stackdump' || true; } | paste -sd'|' -)
    [ -z "$bg_re" ] || bg_re="^($bg_re)\$"
    # the command-line tests that go to the lane: label cli, not RUN_SERIAL (ctest's JSON; none
    # when it cannot be read: then every test runs in the main ctest)
    cli_re=$({ ctest --test-dir "$BUILD" --show-only=json-v1 2>/dev/null || true; } | python3 -c '
import json, sys
try: tests = json.load(sys.stdin)["tests"]
except Exception: sys.exit(0)
for t in tests:
    p = {x["name"]: x["value"] for x in t.get("properties", [])}
    if "cli" in p.get("LABELS", []) and not p.get("RUN_SERIAL"): print(t["name"])' 2>/dev/null | paste -sd'|' -) || cli_re=
    [ -z "$cli_re" ] || cli_re="^($cli_re)\$"
    main_ex=$(printf '%s\n' "$bg_re" "$cli_re" | sed -n 's/^^(\(.*\))\$$/\1/p' | paste -sd'|' -)
    [ -z "$main_ex" ] || main_ex="^($main_ex)\$"
    rm -f "$BUILD/bg_unit.log" "$BUILD/bg_unit.rc" "$BUILD/bg_cli.log" "$BUILD/bg_cli.rc" \
          "$ASAN/build.rc" "$ASAN/build.end" "$ASAN/unit.log" "$ASAN/unit.rc" "$ASAN/fuzz.log" "$ASAN/fuzz.rc" \
          "$ASAN/fuzz_lines.log"
    lowprio=(nice -n 10)
    command -v setsid >/dev/null 2>&1 && lowprio=(setsid -w nice -n 10)
    "${lowprio[@]}" bash -c "$(declare -f bg_lane bg_lane_asan lsan_tracer_retry); SAN_BG_EXCLUDE='$SAN_BG_EXCLUDE'; bg_lane \"\$@\"" \
      _ "$BUILD" "$ASAN" "$jobs" "$bg_re" "$san_state" "$cli_re" </dev/null >/dev/null 2>&1 &
    lane_pid=$!
    echo "==== background lane (nice 10): the unit tests of $BUILD, then the sanitizer build and its unit tests," \
         "then the command-line tests that judge no time (logs $BUILD/bg_unit.log, $ASAN/build.log, $ASAN/unit.log," \
         "$BUILD/bg_cli.log) ===="
    t_ct=$(date +%s)
    ct=0
    ctest --test-dir "$BUILD" --output-on-failure --no-tests=error ${main_ex:+-E "$main_ex"} 2>&1 | tee "$BUILD/ctest.log" || ct=$?
    if [ "$ct" != 0 ]; then
      rc=1
      names=$(failed_tests "$BUILD/ctest.log")
      failures+=("ctest of $BUILD: ${names:-ctest exited $ct, see above}")
    fi
    t_ct_end=$(date +%s)
    wait "$lane_pid" || true
    lane_pid=
    t_w=$(date +%s)
    echo "==== ctest ($BUILD, one test at a time): $((t_ct_end - t_ct)) s; then $((t_w - t_ct_end)) s waiting for the background lane ===="
    [ -z "$bg_re" ] || lane_result bg_unit "the unit tests of $BUILD" "unit tests of $BUILD"
    [ -z "$cli_re" ] || lane_result bg_cli "the command-line tests of $BUILD that judge no time" "command-line tests of $BUILD"
    sanitize_finish || { s=$?; [ "$s" -le "$rc" ] || rc=$s; }
    notes=$({ cat "$BUILD/bg_unit.log" "$BUILD/bg_cli.log" "$ASAN/unit.log" 2>/dev/null || true; } | sed -n 's/^NOTE  \([^:]*\):.*/\1/p' | paste -sd' ' -)
    if [ "$rc" = 0 ]; then
      echo "run_all.sh test: PASS (exit 0)${notes:+; run again after a note: $notes (above)}"
    else
      msg=$(printf '%s; ' "${failures[@]}")
      echo "run_all.sh test: FAIL (exit $rc): ${msg%; }"
    fi
    exit "$rc"
    ;;
  run)
    shift $(( $# > 0 ? 1 : 0 ))
    # with arguments: one `nsa-harness run` with them. Without: every scenario against
    # nsa-train, then the scenarios for users' own trainers (scenarios/trainer/) against the
    # example foreign trainer through its map (examples/showcase/; docs/your-trainer.md).
    [ $# -gt 0 ] && exec "$BUILD/nsa-harness" run "$@"
    rc=0 rc2=0
    jobs=(-j "${NSA_JOBS:-auto}")   # cases side by side: one per GPU for the gpu profile, else one per core
    trainer_run=("$BUILD/nsa-harness" run "${jobs[@]}" scenarios/trainer/*.json --trainer-map examples/showcase/showcase.map.json)
    title="==== the scenarios for your own trainer, against the example foreign trainer (examples/showcase/showcase.map.json) ===="
    if [ "$use_cuda" = 1 ] && [ "${NSA_JOBS:-auto}" != 1 ]; then
      # on a GPU machine both runs at once: their cases share the GPUs through the runner's lock
      # files (a GPU to one case at a time, timing-sensitive cases alone on the machine), each
      # given half the cores; the second run's lines are printed after the first's
      half=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
      tlog=$(mktemp)
      NSA_HARNESS_CPUS=$half "${trainer_run[@]}" >"$tlog" 2>&1 &
      tpid=$!
      trap 'kill -INT "$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null; rm -f "$tlog"' EXIT
      NSA_HARNESS_CPUS=$half "$BUILD/nsa-harness" run "${jobs[@]}" || rc=$?
      wait "$tpid" || rc2=$?
      trap - EXIT
      echo "$title (ran beside the first)"
      cat "$tlog"
      rm -f "$tlog"
      if [ "$rc" = 130 ] || [ "$rc2" = 130 ]; then echo "run_all.sh: interrupted (exit 130)" >&2; exit 130; fi
    else
      "$BUILD/nsa-harness" run "${jobs[@]}" || rc=$?
      if [ "$rc" = 130 ]; then echo "run_all.sh: interrupted (exit 130): the main run stopped; scenarios/trainer/ not run" >&2; exit 130; fi
      echo "$title"
      "${trainer_run[@]}" || rc2=$?
    fi
    # the worse of the two: 130 (interrupted) over 2 (invalid) over 1 (a case failed) over 0
    outcome() { case "$1" in 0) echo "PASS" ;; 1) echo "FAIL (a case FAIL, HANG or CRASH)" ;;
                  2) echo "ERROR (an invalid scenario or option)" ;; 130) echo "interrupted" ;; *) echo "exit $1" ;; esac; }
    worst=$rc
    for c in 130 2 1; do if [ "$rc" = "$c" ] || [ "$rc2" = "$c" ]; then worst=$c; break; fi; done
    [ "$rc" = 0 ] && [ "$rc2" = 0 ] && worst=0
    echo "run_all.sh: $([ "$worst" = 0 ] && echo PASS || echo FAIL) (exit $worst): scenarios/ against nsa-train $(outcome "$rc");" \
         "scenarios/trainer/ against the example trainer $(outcome "$rc2") (each RESULTS.md above;" \
         "the binaries are in $BUILD/: B=$BUILD for the README's examples)"
    exit "$worst"
    ;;
esac
