#!/usr/bin/env bash
# tests/cli/gpu_kernels_abattn.sh BUILD_DIR — bench/gpu_kernels.sh's abattn phase on the CPU with a
# stand-in cmake: REF and each ALSO tree configured and built once; every round runs the trees'
# bench_cuda_attn in the order REF, this tree, the ALSO trees as given; the summary's table has a
# column for each in that order and the change of each against REF; an ALSO entry that is not
# NAME=DIR with NAME a word other than ref and head and DIR a folder is left out, with a line
# saying which, and the others still run.
set -u
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, expect_exit, has, finish
SRC=$(cd "$(dirname "$0")/../.." && pwd)
R=$TMP/repo
mkdir -p "$R/bench" "$TMP/bin" "$TMP/ref" "$TMP/fast" "$TMP/slow"
cp "$SRC/bench/gpu_kernels.sh" "$SRC/bench/gpu_lib.sh" "$SRC/bench/knob_table.py" "$R/bench/"
# each tree's time for its one op (ms)
echo 2.000 >"$TMP/ref/ms"; echo 1.500 >"$R/ms"; echo 1.000 >"$TMP/fast/ms"; echo 3.000 >"$TMP/slow/ms"
export ORDER=$TMP/order.log
# cmake -S SRC -B DIR ... (configure: DIR remembers SRC); cmake --build DIR ...: DIR/bench/bench_cuda_attn,
# which logs that it ran and prints one op line with SRC's time
cat >"$TMP/bin/cmake" <<'EOF'
#!/usr/bin/env bash
if [ "$1" = --build ]; then
  d=$2 src=$(cat "$2/.src")
  mkdir -p "$d/bench"
  { echo '#!/usr/bin/env bash'
    echo "echo '$src' >>\"\$ORDER\""
    echo "printf 'paper  S=8192   B=1   %-30s %8s ms     100.0 TFLOP/s\n' 'sel fwd' '$(cat "$src/ms")'"; } >"$d/bench/bench_cuda_attn"
  chmod +x "$d/bench/bench_cuda_attn"
  exit 0
fi
while [ $# -gt 0 ]; do case $1 in -S) s=$2; shift ;; -B) b=$2; shift ;; esac; shift; done
mkdir -p "$b" && echo "$s" >"$b/.src"
EOF
chmod +x "$TMP/bin/cmake"
export PATH=$TMP/bin:$PATH
(cd "$R" && cmake -S "$R" -B build && cmake --build build) || exit 1   # this tree's build (the build phase's)

cd "$R" || exit 1
PHASES=abattn REF=$TMP/ref ALSO="fast=$TMP/fast bad=$TMP/none ref=$TMP/fast junk slow=$TMP/slow" ROUNDS=2 BUDGET=200 OUT=$TMP/gout \
  expect_exit "abattn with REF and two ALSO trees (three entries not fit)" 0 bash bench/gpu_kernels.sh
cp "$TMP/out" "$TMP/summary"
for n in ref fast slow; do
  check "... abattn_build_$n in the summary, once" test "$(grep -cE "^abattn_build_$n +rc=0 " "$TMP/summary")" = 1
done
check "... no build of the unfit entries" bash -c "! grep -qE '^abattn_build_(bad|junk) ' '$TMP/summary'"
want=$(printf '%s\n' "$TMP/ref" "$R" "$TMP/fast" "$TMP/slow" "$TMP/ref" "$R" "$TMP/fast" "$TMP/slow")
check "each round runs ref, this tree, then the ALSO trees in their order" test "$(cat "$ORDER")" = "$want"
check "the table's header: ref, head, fast, slow, then each one's change against ref" \
  grep -qE '^shape +S +B +op +ref +head +fast +slow +change head +change fast +change slow$' "$TMP/summary"
check "the op's times in each tree and the changes (-25 %, -50 %, +50 %)" \
  grep -qE '^paper +8192 +1 +sel fwd +2\.000-2\.000 +1\.500-1\.500 +1\.000-1\.000 +3\.000-3\.000 +-25\.0 % +-50\.0 % +\+50\.0 %$' "$TMP/summary"
tar xzf "$TMP/gout/logs.tgz" -C "$TMP" logs/abattn_also.log 2>/dev/null
for e in "bad=$TMP/none" "ref=$TMP/fast" "'junk'"; do
  check "... the entry ${e//$TMP/TMP} is named as left out" grep -qF -- "${e//\'/}" "$TMP/logs/abattn_also.log"
done

PHASES=abattn REF=$TMP/none BUDGET=60 OUT=$TMP/gout2 expect_exit "abattn with a REF that is not a folder still ends with its summary" 0 \
  bash bench/gpu_kernels.sh
tar xzf "$TMP/gout2/logs.tgz" -C "$TMP/gout2" logs/abattn_configure.log 2>/dev/null
check "... and says REF is not a folder" has "$TMP/gout2/logs/abattn_configure.log" "abattn: REF='$TMP/none' is not a folder"
finish
