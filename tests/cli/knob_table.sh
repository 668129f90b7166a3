#!/usr/bin/env bash
# tests/cli/knob_table.sh BUILD_DIR — bench/knob_table.py on bench_cuda_attn logs written the
# way the knobs phase of bench/gpu_kernels.sh names them: one line per (shape, S, op) with each
# setting's lowest-highest times over its rounds in the order the files were given, the change
# of the median against the first setting, the ops that moved by no more than 1 % left out
# unless --all; a file not named knob_<SETTING>_<ROUND>.log, a missing file and logs with no
# timed op line are exit 2 with the file named.
set -u
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, expect_exit, has, finish
# log FILE "OP MS" ...: a bench_cuda_attn log of the paper shape at S 8192 with these ops
log() { local f=$1; shift
  { echo "device: NVIDIA H200"
    for o in "$@"; do printf 'paper  S=8192   B=1   %-30s %8s ms     100.0 TFLOP/s\n' "${o% *}" "${o##* }"; done
    echo "SUMMARY paper  S=8192   B=1   keys/query cmp 255 | all NSA fwd+bwd 13.078 ms"; } >"$TMP/$f"; }
log "knob_NSA_X=0_1.log" "dense causal fwd 3.300" "cmp bwd (+compress bwd) 1.268" "win fwd 0.540"
log "knob_NSA_X=0_2.log" "dense causal fwd 3.320" "cmp bwd (+compress bwd) 1.270" "win fwd 0.546"
log "knob_NSA_X=-1_1.log" "dense causal fwd 2.540" "cmp bwd (+compress bwd) 1.272" "win fwd 0.500"
log "knob_NSA_X=-1_2.log" "dense causal fwd 2.560" "cmp bwd (+compress bwd) 1.266" "win fwd 0.504"
k=(knob_NSA_X=0_1.log knob_NSA_X=0_2.log knob_NSA_X=-1_1.log knob_NSA_X=-1_2.log)

cd "$TMP" || exit 1
expect_exit "two settings, two rounds each" 0 python3 "$OLDPWD/bench/knob_table.py" "${k[@]}"
cp out table
check "the header: the settings in the order given, then the change of the second" \
  grep -qE '^shape +S +B +op +NSA_X=0 +NSA_X=-1 +change NSA_X=-1$' table
check "the dense forward: both rounds' range of each setting, the medians' change (2.550 / 3.310)" \
  grep -qE '^paper +8192 +1 +dense causal fwd +3\.300-3\.320 +2\.540-2\.560 +-23\.0 %$' table
check "a second op, its own medians (0.502 / 0.543)" grep -qE '^paper +8192 +1 +win fwd +0\.540-0\.546 +0\.500-0\.504 +-7\.6 %$' table
check "an op within 1 % left out, the summary line never read as an op" \
  bash -c "! grep -qE 'cmp bwd|SUMMARY|keys/query' table"
expect_exit "--all" 0 python3 "$OLDPWD/bench/knob_table.py" --all "${k[@]}"
check "--all lists the op that did not move, its name with spaces and parentheses whole" grep -qE '^paper +8192 +1 +cmp bwd \(\+compress bwd\) +1\.268-1\.270 +1\.266-1\.272 +\+0\.0 %$' out
expect_exit "the reference is the first setting given" 0 python3 "$OLDPWD/bench/knob_table.py" "${k[2]}" "${k[0]}"
check "the change then reads from the other side" grep -qE 'dense causal fwd +2\.540-2\.540 +3\.300-3\.300 +\+29\.9 %$' out
expect_exit "--min-change 10" 0 python3 "$OLDPWD/bench/knob_table.py" --min-change 10 "${k[@]}"
check "only the dense forward moved by more than 10 %" test "$(grep -c 'fwd' out)" = 1

cp "${k[0]}" bench.log
expect_exit "a file not named knob_<SETTING>_<ROUND>.log" 2 python3 "$OLDPWD/bench/knob_table.py" bench.log
check "it names the file and the form it wants" has out "bench.log: not named knob_<SETTING>_<ROUND>.log"
expect_exit "a missing file" 2 python3 "$OLDPWD/bench/knob_table.py" knob_NSA_Y=1_1.log
check "it names the file" has out "knob_NSA_Y=1_1.log"
echo "nothing timed" >knob_NSA_Z=1_1.log
expect_exit "no timed op line" 2 python3 "$OLDPWD/bench/knob_table.py" knob_NSA_Z=1_1.log
check "it says so" has out "no timed op lines in knob_NSA_Z=1_1.log"
expect_exit "--min-change without a number" 2 python3 "$OLDPWD/bench/knob_table.py" --min-change lots "${k[0]}"
check "it names the flag and the value" has out "--min-change wants a number of percent, got 'lots'"
finish
