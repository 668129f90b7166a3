#!/usr/bin/env bash
# tests/cli/golden_regression.sh BUILD_DIR — the regression layer end to end on the ci
# profile (docs/regression.md):
#  1. the shipped golden scenario passes against the committed baselines
#     (golden/baselines/ci/...): bitwise on the recording machine's build, within the
#     stated tolerance on another CPU or compiler;
#  2. no baseline: every case SKIPs naming the exact record command, exit 0;
#     `baseline record` writes one per case, `baseline show` reads them, and the
#     run against them is bitwise; a case whose config changed (--set) is ERROR
#     "re-record", exit 2; a torn baseline file is ERROR naming file:line:col;
#  3. planted single-line changes to the numerics, each in a temporary copy of the
#     sources (never in this tree) built CPU-only and run with --trainer, judged in
#     tolerance mode (as on a machine with another build fingerprint): every one
#     makes the run exit 1 with a golden FAIL that names the first diverging step,
#     the cause and where (tensor, layer, branch), and the feature the differing
#     variants share:
#       forward   the window sees one key too many       -> step 1, acts.blocks.0.attn.win.o
#                 (and the GitHub step summary carries the diagnosis and regression table)
#       backward  the softmax gate's backward drops a term -> step 1, highest layer 1, softmax gate
#       optimizer AdamW without its first-moment bias correction -> step 2, optimizer
#       schedule  warmup shifted by one step              -> step 1, lr
#       data      the learnable task's sequences shifted by one -> step 1, data
# Takes ~1-2 min on 2 cores (one CPU-only build of nsa-train, then a rebuild of one
# file and 9 tiny cases per plant, 2 for the warmup and data plants).
set -u
BUILD=${1:?usage: golden_regression.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
SRC=$(pwd)
H="$BUILD/nsa-harness"
SCEN=scenarios/golden_regression.json
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, finish
# run NAME WANT_RC ARGS...: nsa-harness run, its exit code must be WANT_RC
run() { local name=$1 want=$2; shift 2
  "$H" run "$SCEN" --profile ci --quiet "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
  if [ "$rc" = "$want" ]; then ok "$name (exit $rc)"; else bad "$name: exit $rc, want $want"; tail -5 "$TMP/err"; fi; }
# fact OUT CASE KEY: a fact of a case from summary.json
fact() { python3 - "$1/summary.json" "$2" "$3" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
for c in s["cases"]:
    if c["case"] == sys.argv[2]:
        v = c["facts"].get(sys.argv[3])
        print(v if not isinstance(v, (list, dict)) else json.dumps(v))
PY
}
verdicts() { python3 -c "import json,sys; print(' '.join(c['verdict'] for c in json.load(open(sys.argv[1]))['cases']))" "$1/summary.json"; }

# ---- 1. the committed baselines ------------------------------------------------------------
run "clean tree against the committed ci baselines" 0 --out "$TMP/clean"
check "clean tree: all 9 variants PASS" test "$(verdicts "$TMP/clean")" = "PASS PASS PASS PASS PASS PASS PASS PASS PASS"
mode=$(fact "$TMP/clean" variant=base golden_mode)
echo "      comparison mode on this machine: $mode (bitwise where the build fingerprint equals the recording one)"
check "clean tree: the golden check compared (mode $mode)" test -n "$mode"

# ---- 2. record, show, missing, stale, torn -----------------------------------------------
mkdir -p "$TMP/none"
run "no baseline: SKIP, exit 0" 0 --baselines "$TMP/none" --out "$TMP/skip"
check "no baseline: every case SKIP" test "$(verdicts "$TMP/skip")" = "SKIP SKIP SKIP SKIP SKIP SKIP SKIP SKIP SKIP"
check "no baseline: the SKIP names the record command" \
  grep -qF "nsa-harness baseline record scenarios/golden_regression.json --profile ci --case golden_regression/variant=odd_T --baselines $TMP/none" "$TMP/skip/RESULTS.md"
"$H" baseline record "$SCEN" --profile ci --baselines "$TMP/bl" --out "$TMP/rec" >"$TMP/out" 2>"$TMP/err"
check "baseline record: exit 0, 9 recorded" grep -q "9 recorded, 0 not recorded" "$TMP/out"
bfile="$TMP/bl/ci/cpu-$(uname -m)/golden_regression/variant=sel.json"
check "baseline record: one file per case under profile/device class/scenario" test -s "$bfile"
"$H" baseline show "$bfile" >"$TMP/out" 2>&1
check "baseline show: provenance, steps, dump and perf" \
  bash -c "grep -q 'fingerprint' '$TMP/out' && grep -q 'steps: 24' '$TMP/out' && grep -q 'tensors summarised' '$TMP/out' && grep -q 'FLOPs/step' '$TMP/out'"
run "against a fresh recording" 0 --baselines "$TMP/bl" --out "$TMP/fresh"
check "against a fresh recording: bitwise" test "$(fact "$TMP/fresh" variant=sel golden_mode)" = bitwise
# (one case: the ERROR and its message are per case; the exit code is 2 for one as for nine)
run "a config the baseline was not recorded for: ERROR re-record" 2 --baselines "$TMP/bl" --set train.seed=7 --filter variant=sel --out "$TMP/stale"
check "stale baseline: ERROR naming re-record and both digests" grep -q "re-record: .* was recorded for config digest [0-9a-f]*, this case's config digest is [0-9a-f]*" "$TMP/stale/RESULTS.md"
head -c 3000 "$bfile" >"$bfile.torn" && mv "$bfile.torn" "$bfile"
run "a torn baseline file: ERROR" 2 --baselines "$TMP/bl" --filter variant=sel --out "$TMP/torn"
check "torn baseline: names file:line:col" grep -q "invalid baseline: $bfile:[0-9]*:[0-9]*:" "$TMP/torn/RESULTS.md"

# ---- 3. planted changes, in a temporary copy -------------------------------------------------
cache() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }
mkdir -p "$TMP/src"
if git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1; then
  # the tree as it is: tracked files and untracked ones git does not ignore
  git -C "$SRC" ls-files -z --cached --others --exclude-standard | (cd "$SRC" && xargs -0 tar -cf - 2>/dev/null) |
    tar -xf - -C "$TMP/src"
else
  tar -C "$SRC" --exclude=./build --exclude=./reports -cf - . | tar -xf - -C "$TMP/src"
fi
t0=$(date +%s)
if ! CC=$(cache CMAKE_C_COMPILER) cmake -S "$TMP/src" -B "$TMP/b" -DNSA_ENABLE_CUDA=OFF -DNSA_ENABLE_MPI=OFF \
     -DCMAKE_BUILD_TYPE="$(cache CMAKE_BUILD_TYPE)" -DNSA_NATIVE="$(cache NSA_NATIVE)" >"$TMP/cfg.log" 2>&1 ||
   ! cmake --build "$TMP/b" -j"$(nproc)" --target nsa-train >"$TMP/build.log" 2>&1; then
  bad "CPU-only build of the copy"; tail -n 20 "$TMP/cfg.log" "$TMP/build.log"
  echo "$pass passed, $fail failed"; exit 1
fi
echo "      CPU-only build of the copy: $(( $(date +%s) - t0 )) s"

# The plants are judged in TOLERANCE mode — the mode of a machine whose build fingerprint
# differs from the recording one (CI's CPU, another compiler) and the harder one to
# detect in: a copy of the committed baselines whose fingerprint id matches no build.
cp -r "$SRC/golden/baselines" "$TMP/tolbl"
find "$TMP/tolbl" -name '*.json' -exec sed -i 's/"fingerprint_id": "[0-9a-f]*"/"fingerprint_id": "0000000000000000"/' {} +

# plant NAME FILE SED [RUN ARGS...]: apply one sed to the copy (it must change the file),
# rebuild, run the golden scenario (or the cases RUN ARGS select: --filter) with that
# trainer into $TMP/p_NAME; then restore the file
plant() { local name=$1 file=$2 expr=$3; shift 3
  cp "$TMP/src/$file" "$TMP/orig"
  sed -i "$expr" "$TMP/src/$file"
  if cmp -s "$TMP/src/$file" "$TMP/orig"; then bad "plant $name: the sed changed nothing in $file"; return 1; fi
  echo "      plant $name: $(diff "$TMP/orig" "$TMP/src/$file" | grep '^>' | head -1)"
  cmake --build "$TMP/b" --target nsa-train >"$TMP/build.log" 2>&1 || { bad "plant $name: rebuild"; cp "$TMP/orig" "$TMP/src/$file"; return 1; }
  run "plant $name: golden FAIL" 1 --trainer "$TMP/b/nsa-train" --baselines "$TMP/tolbl" --out "$TMP/p_$name" "$@"
  expect "$name" variant=base golden_mode tolerance
  cp "$TMP/orig" "$TMP/src/$file"
  touch "$TMP/src/$file"
}
# expect NAME CASE KEY VALUE: a golden fact of a planted run
expect() { local got; got=$(fact "$TMP/p_$1" "$2" "$3")
  if [ "$got" = "$4" ]; then ok "plant $1: $2 $3 = $4"; else bad "plant $1: $2 $3 = '$got', want '$4'"; fi; }
diag() { if grep -qF -- "$2" "$TMP/p_$1/RESULTS.md"; then ok "plant $1: RESULTS.md says \"$2\""
  else bad "plant $1: RESULTS.md lacks \"$2\""; sed -n '/^## Diagnosis/,/^## /p' "$TMP/p_$1/RESULTS.md" | head -12; fi; }

# forward: the sliding window sees w+1 keys (with a GitHub step summary: CI readers get
# the diagnosis and the regression table there, not only the verdicts)
export GITHUB_STEP_SUMMARY="$TMP/step_summary.md"
plant window kernels/cpu/nsa_attn.c 's/put_span((int64_t)t - g->w + 1, (int64_t)t + 1,/put_span((int64_t)t - g->w, (int64_t)t + 1,/'
unset GITHUB_STEP_SUMMARY
check "step summary: diagnosis and regression table" bash -c "grep -q '^### Diagnosis' '$TMP/step_summary.md' &&
  grep -q '^### Regression against baselines and floors' '$TMP/step_summary.md' &&
  grep -q '| golden_regression | variant=win | FAIL | golden (tolerance) | 1 | forward | layer 0 win' '$TMP/step_summary.md'"
expect window variant=base golden_cause forward
expect window variant=base golden_first_diverging_step 1
expect window variant=win golden_first_tensor acts.blocks.0.attn.win.o
expect window variant=cmp golden_cause none
expect window variant=sel golden_cause none
diag window "exactly the variants that run the sliding-window branch differ"

# backward: the softmax gate's backward drops the sum term
plant gate_bwd kernels/cpu/nsa_gate.c 's/dxi\[b\] = gi\[b\] \* (dgi\[b\] - dot);/dxi[b] = gi[b] * dgi[b];/'
expect gate_bwd variant=base golden_cause backward
expect gate_bwd variant=base golden_locus "layer 1 backward"
expect gate_bwd variant=sigmoid golden_cause none
diag gate_bwd "the softmax gate activation"
diag gate_bwd "the highest layer with a differing gradient is 1"

# optimizer: AdamW without the first moment's bias correction
plant adamw trainer/optim.c 's/double bc1 = 1.0 - pow(c->beta1, (double)o->t)/double bc1 = 1.0/'
expect adamw variant=odd_T golden_cause optimizer
expect adamw variant=odd_T golden_first_diverging_step 2
diag adamw "every variant differs from its baseline (9 of 9)"
diag adamw "the update of step 1 differs"

# LR schedule: warmup one step ahead. This plant and the next check facts and findings of
# single cases (base, mlp; base, ckpt), never the set of variants that differ: they run
# those cases only.
plant warmup trainer/optim.c 's/return c->lr \* (double)step \/ (double)c->warmup_steps;/return c->lr * (double)(step + 1) \/ (double)c->warmup_steps;/' \
  --filter variant=base --filter variant=mlp
expect warmup variant=mlp golden_cause lr
expect warmup variant=mlp golden_first_diverging_step 1
diag warmup "the LR schedule changed: lr at step 1"

# data order: every sequence of the learnable task shifted by one
plant data trainer/data.c 's/uint64_t gs = gs0 + (uint64_t)b;/uint64_t gs = gs0 + (uint64_t)b + 1;/' \
  --filter variant=base --filter variant=ckpt
expect data variant=ckpt golden_cause data
expect data variant=ckpt golden_first_diverging_step 1
diag data "the data order changed: the tokens of step 1 differ"

finish
