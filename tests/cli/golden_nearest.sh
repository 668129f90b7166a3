#!/usr/bin/env bash
# tests/cli/golden_nearest.sh BUILD_DIR — a GPU model without baselines of its own is compared
# with the nearest recorded one (docs/regression.md, "Another GPU model: the nearest
# baseline"), on the CPU: a wrapper trainer presents nsa-train as a CUDA device of a chosen
# model and compute capability (--protocol-info lists cuda, --print-env gains a cuda.devices
# entry; the training itself runs on the CPU backend), so the harness sees exactly what it
# sees on that GPU — device class, architecture, build fingerprint. FAKE_SET plants a change
# in the trainer (one more --set the harness does not know of: its config digest stays).
#  1. baselines recorded as an H100 (sm_90) carry device_arch; `baseline show` prints it; the
#     H100 itself compares with its own (match "own", bitwise);
#  2. an H200 (sm_90, no baseline of its own): compared with the H100's — facts
#     golden_baseline_device / golden_baseline_match "nearest", bitwise where the bits agree;
#     RESULTS.md names the baseline device and says "nearest"; where the bits part (a planted
#     weight decay 1e-7: loss 1e-6 apart, as another GPU model's GEMM kernels may move them) the
#     cross-device tolerances judge: PASS, mode cross_device, "another GPU model, not bitwise";
#     a planted change beyond them (another peak lr) FAILs through the borrowed baseline;
#  3. an A100 (sm_80) baseline only: the H200 compares within the cross-device tolerances,
#     never bitwise. The harness sees backend cuda, so the cuda defaults hold (1e-1 per step,
#     2 per tensor): weight decay 1e-7 (loss 1e-6) PASSes, another peak lr FAILs (lr, data and
#     initial weights are exact in every mode), a window one key wider stays within them;
#     with the scenario's cross_device_tolerance 1e-5 / cross_device_tensor_tolerance 1e-2 the
#     weight decay still PASSes and the window FAILs (forward, step 1, acts.blocks.0.attn.win.o);
#  4. choice: same architecture first (H100 before a later A100; the evidence lists the one not
#     taken), else the most recently recorded (an L40S, sm_89, takes whichever of the two was
#     recorded last); among the same architecture the same build first (an H200 with another
#     CUDA runtime: SKIP on a bitwise-only check against the H100's; a GH200 recorded with its
#     runtime is taken and compared bitwise);
#  5. no candidate: the existing SKIP; a candidate recorded for another config is passed over
#     (SKIP, saying why);
#  6. perf floors are never borrowed: the H200 SKIPs its perf_floor naming the device and the
#     record command (with --repeat 5 for timings) while its golden case borrows.
# Takes ~30 s on 2 cores (4-step tiny cases).
set -u
BUILD=${1:?usage: golden_nearest.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
H="$BUILD/nsa-harness"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, has, finish

# the wrapper: nsa-train as a CUDA device named $FAKE_GPU with compute capability $FAKE_SM
cat >"$TMP/fakegpu" <<EOF
#!/usr/bin/env bash
T="$BUILD/nsa-train"
for a in "\$@"; do case \$a in
  --protocol-info) "\$T" "\$@" | sed 's/"backends":\["cpu"/"backends":["cuda","cpu"/'; exit \${PIPESTATUS[0]};;
  --print-env) "\$T" "\$@" | python3 -c '
import json, os, sys
e = json.load(sys.stdin)
e["cuda"] = {"runtime": os.environ.get("FAKE_CUDA", "13.0"), "driver": "13.0", "cublas": "13.1.0", "devices": [{"index": 0,
             "name": os.environ["FAKE_GPU"], "uuid": "GPU-test", "memory_bytes": 85520809984,
             "sm": os.environ["FAKE_SM"], "sm_count": 132}]}
json.dump(e, sys.stdout)'; exit \${PIPESTATUS[0]};;
esac; done
exec "\$T" "\$@" --set 'train.backend="cpu"' \${FAKE_SET:+--set "\$FAKE_SET"}
EOF
chmod +x "$TMP/fakegpu"
# scenario NAME EXTRA_CHECK_KEYS: the golden scenario of this test (2 variants, 4 steps, cuda
# fp32 as the harness sees it; bitwise only on another build, as the gpu profile)
scenario() { cat >"$TMP/$1.json" <<EOF
{"name": "golden_near", "description": "golden on a GPU model without baselines of its own (test only)", "family": "golden_regression",
 "config": "$PWD/configs/tiny.json", "overrides": {"train.steps": 4, "train.backend": "cuda", "train.precision": "fp32"},
 "profiles": {"ci": {}},
 "matrix": {"variant": {"values": {"base": {}, "win": {"nsa.force_branch": "win"}}}},
 "checks": [{"check": "finite"}, {"check": "golden", "other_build": "skip"$2}]}
EOF
}
scenario golden ""
scenario declared ', "cross_device_tolerance": {"ci": 1e-5}, "cross_device_tensor_tolerance": {"ci": 1e-2}'
cat >"$TMP/perf.json" <<EOF
{"name": "nearperf", "description": "perf floors are per device model (test only)", "family": "perf_floor",
 "config": "$PWD/configs/tiny.json", "overrides": {"train.steps": 4, "train.backend": "cuda", "train.precision": "fp32"},
 "profiles": {"ci": {}},
 "checks": [{"check": "finite"}, {"check": "perf_floor", "metrics": ["tok_per_s", "peak_mem_bytes"]}]}
EOF
H100="NVIDIA H100 80GB HBM3" H200="NVIDIA H200" A100="NVIDIA A100-SXM4-80GB" L40S="NVIDIA L40S"
# as GPU SM ARGS...: nsa-harness with the wrapper presenting that GPU
as() { local gpu=$1 sm=$2; shift 2; FAKE_GPU=$gpu FAKE_SM=$sm "$H" "$@" --profile ci --trainer "$TMP/fakegpu"; }
# hrun NAME WANT_RC GPU SM ARGS...: nsa-harness run as that GPU; its exit code must be WANT_RC
hrun() { local name=$1 want=$2 gpu=$3 sm=$4; shift 4
  as "$gpu" "$sm" run --quiet "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
  if [ "$rc" = "$want" ]; then ok "$name (exit $rc)"; else bad "$name: exit $rc, want $want"; tail -5 "$TMP/err"; fi; }
# record GPU SM DIR SCENARIO: baseline record as that GPU into DIR
record() { as "$1" "$2" baseline record "$4" --baselines "$3" --out "$TMP/rec_$RANDOM" >"$TMP/out" 2>&1 ||
  { bad "record as $1"; tail -5 "$TMP/out"; }; }
# fact OUT CASE KEY: a fact of a case from summary.json
fact() { python3 - "$1/summary.json" "$2" "$3" <<'PY'
import json, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    if c["case"] == sys.argv[2]:
        v = c["facts"].get(sys.argv[3])
        print(v if not isinstance(v, (list, dict)) else json.dumps(v))
PY
}
# expect OUT CASE KEY VALUE: a fact equals VALUE
expect() { local got; got=$(fact "$1" "$2" "$3")
  if [ "$got" = "$4" ]; then ok "$(basename "$1"): $2 $3 = $4"; else bad "$(basename "$1"): $2 $3 = '$got', want '$4'"; fi; }
verdicts() { python3 -c "import json,sys; print(' '.join(c['verdict'] for c in json.load(open(sys.argv[1]))['cases']))" "$1/summary.json"; }
# says OUT TEXT: RESULTS.md of OUT contains TEXT
says() { if has "$1/RESULTS.md" "$2"; then ok "$(basename "$1"): RESULTS.md says \"$2\""
  else bad "$(basename "$1"): RESULTS.md lacks \"$2\""; sed -n '/^## Verdicts/,/^## Environment/p' "$1/RESULTS.md" | head -30; fi; }

# ---- 1. baselines of an H100 ---------------------------------------------------------------------
record "$H100" sm_90 "$TMP/bl" "$TMP/golden.json"
hb="$TMP/bl/ci/nvidia-h100-80gb-hbm3/golden_near/variant=base.json"
check "recorded as an H100: under its device class, device_arch sm_90" \
  python3 -c "import json,sys; b=json.load(open(sys.argv[1])); assert b['device_arch']=='sm_90', b['device_arch']" "$hb"
"$H" baseline show "$hb" >"$TMP/out" 2>&1
check "baseline show: the architecture" has "$TMP/out" "device class nvidia-h100-80gb-hbm3 (architecture sm_90, its device_arch)"
hrun "the H100 against its own" 0 "$H100" sm_90 "$TMP/golden.json" --baselines "$TMP/bl" --out "$TMP/own"
expect "$TMP/own" variant=base golden_baseline_match own
expect "$TMP/own" variant=base golden_mode bitwise
check "own: the report does not say nearest" bash -c "! grep -q nearest \"$TMP/own/RESULTS.md\""

# ---- 2. an H200: the same architecture -----------------------------------------------------------
hrun "an H200 against the H100's baselines" 0 "$H200" sm_90 "$TMP/golden.json" --baselines "$TMP/bl" --out "$TMP/h200"
check "H200: both variants PASS" test "$(verdicts "$TMP/h200")" = "PASS PASS"
expect "$TMP/h200" variant=base golden_baseline_device nvidia-h100-80gb-hbm3
expect "$TMP/h200" variant=base golden_baseline_match nearest
expect "$TMP/h200" variant=base golden_baseline_arch sm_90
expect "$TMP/h200" variant=base golden_device nvidia-h200
expect "$TMP/h200" variant=win golden_mode bitwise
says "$TMP/h200" "bitwise equal to the nearest baseline (nvidia-h100-80gb-hbm3, same architecture sm_90)"
says "$TMP/h200" "| golden_near | variant=win | PASS | golden (bitwise; nearest baseline: nvidia-h100-80gb-hbm3) |"
says "$TMP/h200" "had no baseline for this device (nvidia-h200, sm_90) and were compared with the nearest, nvidia-h100-80gb-hbm3's (the same architecture, sm_90): bitwise where the bits agree, else within the cross-device tolerances. Record this device's own, on it: \`nsa-harness baseline record $TMP/golden.json --profile ci --baselines $TMP/bl\`"
FAKE_SET=train.weight_decay=1e-7 \
  hrun "an H200, its bits apart from the H100's (weight decay 1e-7): within the cross-device tolerances" 0 "$H200" sm_90 "$TMP/golden.json" --baselines "$TMP/bl" --out "$TMP/h200_wd"
expect "$TMP/h200_wd" variant=base golden_mode cross_device
expect "$TMP/h200_wd" variant=base golden_cause none
expect "$TMP/h200_wd" variant=base golden_baseline_match nearest
says "$TMP/h200_wd" "within the cross-device tolerance of the nearest baseline (nvidia-h100-80gb-hbm3, same architecture sm_90): 4 steps"
says "$TMP/h200_wd" "(another GPU model, not bitwise)"
FAKE_SET=train.lr=3.1e-3 \
  hrun "an H200, another peak lr: FAIL through the borrowed baseline" 1 "$H200" sm_90 "$TMP/golden.json" --baselines "$TMP/bl" --filter variant=base --out "$TMP/h200_lr"
expect "$TMP/h200_lr" variant=base golden_cause lr
expect "$TMP/h200_lr" variant=base golden_mode cross_device
expect "$TMP/h200_lr" variant=base golden_baseline_match nearest
says "$TMP/h200_lr" "diverges from the nearest baseline (nvidia-h100-80gb-hbm3, same architecture sm_90) at step"
says "$TMP/h200_lr" "comparison cross-device tolerance 0.1 per step, 2 per tensor: another GPU model of the same architecture, not bitwise equal"
says "$TMP/h200_lr" "nvidia-h100-80gb-hbm3's stands in, recorded on the same architecture (sm_90, from its device_arch): compared bitwise where the build is the same but for the GPU model and the bits agree, else within the cross-device tolerances; record this device's own with \`nsa-harness baseline record $TMP/golden.json --profile ci --case golden_near/variant=base"

# ---- 3. an A100 only: another architecture -------------------------------------------------------
# (the harness sees backend cuda: the cuda defaults, 1e-1 per step and 2 per tensor, apply
# unless the scenario declares cross_device_tolerance / cross_device_tensor_tolerance)
record "$A100" sm_80 "$TMP/bla" "$TMP/golden.json"
hrun "an H200 against an A100's: within the cross-device tolerance" 0 "$H200" sm_90 "$TMP/golden.json" --baselines "$TMP/bla" --out "$TMP/cross"
expect "$TMP/cross" variant=base golden_mode cross_device
expect "$TMP/cross" variant=base golden_baseline_device nvidia-a100-sxm4-80gb
expect "$TMP/cross" variant=base golden_baseline_arch sm_80
says "$TMP/cross" "within the cross-device tolerance of the nearest baseline (nvidia-a100-sxm4-80gb, another architecture: sm_80, this device sm_90)"
says "$TMP/cross" "| golden_near | variant=base | PASS | golden (cross_device; nearest baseline: nvidia-a100-sxm4-80gb) |"
FAKE_SET=train.weight_decay=1e-7 \
  hrun "weight decay 1e-7 (loss 1e-6), another architecture: PASS, never bitwise" 0 "$H200" sm_90 "$TMP/golden.json" --baselines "$TMP/bla" --out "$TMP/cross_wd"
expect "$TMP/cross_wd" variant=base golden_cause none
FAKE_SET=train.lr=3.1e-3 \
  hrun "another peak lr, another architecture: FAIL (lr is compared exactly)" 1 "$H200" sm_90 "$TMP/golden.json" --baselines "$TMP/bla" --filter variant=base --out "$TMP/cross_lr"
expect "$TMP/cross_lr" variant=base golden_cause lr
FAKE_SET=train.weight_decay=1e-7 \
  hrun "declared 1e-5 per step, 1e-2 per tensor: the weight-decay change PASSes" 0 "$H200" sm_90 "$TMP/declared.json" --baselines "$TMP/bla" --out "$TMP/decl_wd"
expect "$TMP/decl_wd" variant=base golden_cause none
FAKE_SET=nsa.w=33 \
  hrun "declared tolerances: the window one key wider FAILs" 1 "$H200" sm_90 "$TMP/declared.json" --baselines "$TMP/bla" --out "$TMP/decl_w"
expect "$TMP/decl_w" variant=win golden_cause forward
expect "$TMP/decl_w" variant=win golden_first_diverging_step 1
expect "$TMP/decl_w" variant=win golden_first_tensor acts.blocks.0.attn.win.o
expect "$TMP/decl_w" variant=win golden_mode cross_device
says "$TMP/decl_w" "comparison cross-device tolerance 1e-05 per step, 0.01 per tensor: recorded on another architecture"
says "$TMP/decl_w" "nvidia-a100-sxm4-80gb's stands in, recorded on another architecture (sm_80, from its device_arch): compared within the cross-device tolerances, never bitwise"
FAKE_SET=nsa.w=33 \
  hrun "the same change at the cuda defaults: within them (PASS)" 0 "$H200" sm_90 "$TMP/golden.json" --baselines "$TMP/bla" --out "$TMP/cross_w"
expect "$TMP/cross_w" variant=win golden_cause none

# ---- 4. which is nearest ----------------------------------------------------------------------------
sleep 1   # the A100's recorded after the H100's (timestamps to the second)
record "$A100" sm_80 "$TMP/bl" "$TMP/golden.json"
hrun "H100 and a later A100: an H200 takes the H100 (same architecture first)" 0 "$H200" sm_90 "$TMP/golden.json" --baselines "$TMP/bl" --out "$TMP/pick"
expect "$TMP/pick" variant=base golden_baseline_device nvidia-h100-80gb-hbm3
FAKE_SET=train.lr=3.1e-3 \
  hrun "... its evidence lists the candidate not taken" 1 "$H200" sm_90 "$TMP/golden.json" --baselines "$TMP/bl" --filter variant=base --out "$TMP/pick_wd"
says "$TMP/pick_wd" "other candidates: nvidia-a100-sxm4-80gb (sm_80, nearer one taken)"
hrun "an L40S (sm_89): the most recently recorded, the A100's" 0 "$L40S" sm_89 "$TMP/golden.json" --baselines "$TMP/bl" --out "$TMP/l40s"
expect "$TMP/l40s" variant=base golden_baseline_device nvidia-a100-sxm4-80gb
expect "$TMP/l40s" variant=base golden_mode cross_device
find "$TMP/bl/ci/nvidia-h100-80gb-hbm3" -name '*.json' -exec sed -i 's/"recorded": "[^"]*"/"recorded": "2099-01-01T00:00:00Z"/' {} +
hrun "the H100's re-dated later: the L40S takes it" 0 "$L40S" sm_89 "$TMP/golden.json" --baselines "$TMP/bl" --out "$TMP/l40s2"
expect "$TMP/l40s2" variant=base golden_baseline_device nvidia-h100-80gb-hbm3
# the same architecture, another build (CUDA runtime 12.4): as on its own device, so on a
# bitwise-only check a SKIP naming the key and the command; a GH200 recorded with that build is
# then nearer than the (later) H100, and compares bitwise
FAKE_CUDA=12.4 hrun "an H200 with another CUDA runtime: SKIP (bitwise only)" 0 "$H200" sm_90 "$TMP/golden.json" --baselines "$TMP/bl" --out "$TMP/build"
says "$TMP/build" "the nearest baseline (nvidia-h100-80gb-hbm3, same architecture sm_90) was recorded with another build (cuda_runtime (\`13.0\` → \`12.4\`)): on this profile only a bitwise comparison judges — record this device's own baseline with this build from a known-good commit: \`nsa-harness baseline record $TMP/golden.json --profile ci --case golden_near/variant=base --baselines $TMP/bl\`"
FAKE_CUDA=12.4 record "NVIDIA GH200 480GB" sm_90 "$TMP/bl" "$TMP/golden.json"
FAKE_CUDA=12.4 hrun "... with a GH200 of that build recorded: it is taken" 0 "$H200" sm_90 "$TMP/golden.json" --baselines "$TMP/bl" --out "$TMP/gh200"
expect "$TMP/gh200" variant=base golden_baseline_device nvidia-gh200-480gb
expect "$TMP/gh200" variant=base golden_mode bitwise
hrun "an H200 of the H100's build: the H100's" 0 "$H200" sm_90 "$TMP/golden.json" --baselines "$TMP/bl" --out "$TMP/h100again"
expect "$TMP/h100again" variant=base golden_baseline_device nvidia-h100-80gb-hbm3

# ---- 5. no candidate ---------------------------------------------------------------------------------
mkdir -p "$TMP/none"
hrun "no baseline anywhere: SKIP" 0 "$H200" sm_90 "$TMP/golden.json" --baselines "$TMP/none" --out "$TMP/skip"
says "$TMP/skip" "no baseline for variant=base on nvidia-h200 (profile ci): record one with \`nsa-harness baseline record $TMP/golden.json --profile ci --case golden_near/variant=base --baselines $TMP/none"
expect "$TMP/skip" variant=base golden_baseline missing
hrun "a candidate of another config: passed over, SKIP" 0 "$H200" sm_90 "$TMP/golden.json" --baselines "$TMP/bla" --set train.seed=7 --filter variant=base --out "$TMP/stale"
says "$TMP/stale" "no baseline for variant=base on nvidia-h200 (profile ci)"
says "$TMP/stale" "no other device's could stand in: nvidia-a100-sxm4-80gb (recorded for config digest"

# ---- 6. perf floors are per device model -----------------------------------------------------------
record "$H100" sm_90 "$TMP/bl" "$TMP/perf.json"
check "the H100's floor recorded" test -s "$TMP/bl/ci/nvidia-h100-80gb-hbm3/nearperf/default.json"
hrun "an H200 with the H100's floor: perf_floor SKIPs" 0 "$H200" sm_90 "$TMP/perf.json" "$TMP/golden.json" --baselines "$TMP/bl" --out "$TMP/perf"
says "$TMP/perf" "no performance floor for default on nvidia-h200 (profile ci): perf floors are per device model and never borrowed from another device's — record this device's own, on this nvidia-h200, with \`nsa-harness baseline record $TMP/perf.json --profile ci --case nearperf/default --baselines $TMP/bl --repeat 5\`"
expect "$TMP/perf" default perf_floor_baseline missing
expect "$TMP/perf" variant=base golden_baseline_match nearest

finish
