#!/usr/bin/env bash
# tests/cli/trainer_regression.sh BUILD_DIR — regression across commits for a map trainer
# (docs/your-trainer.md "Regressions in your trainer", docs/regression.md): the example
# foreign trainer (examples/showcase: train_showcase.py, nsa_model.py, configs/, its map and
# YAML template) copied into a temporary git repository, judged by
# scenarios/trainer/golden_regression.json against baselines of its own:
#  1. commit A (good); `baseline record --trainer-map MAP --baselines DIR` of variant=base: the
#     baseline's provenance names the trainer's commit A (not this harness's), not dirty, the
#     map, the harness's commit; its fingerprint is python, torch and the machine, no compiler;
#  2. a run at A: variant=base PASSes bitwise; variant=sel, not recorded, is a SKIP naming the
#     record command with --trainer-map and --baselines; that very command records it;
#  3. commit B (a comment), C (the planted change: RMSNorm's eps 10x in nsa_model.py's
#     forward), D (a comment): the run at D FAILs the golden check, both variants, naming step
#     1 and the first differing activation (acts.blocks.0.attn.cmp.o, layer 0 cmp; the sel
#     variant acts.blocks.0.attn.sel.o), the trainer's gradients grouped by the map's branches
#     (`grads.layers.0.attn.select.*` under "layer 0 sel"), and the re-record command with the map;
#  4. `git bisect start D A && git bisect run nsa-harness run ... --bisect`, inside the
#     temporary repository, names C as the first bad commit; each step's report names the
#     commit it judged (env.json build.git_sha: the probe's view of the script's work tree).
# Needs git and a python with torch and PyYAML (SKIP otherwise, exit 77). Prints its wall time.
set -uo pipefail
build=${1:?usage: trainer_regression.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$here/lib/common.sh"
H=$(cd "$build" 2>/dev/null && pwd)/nsa-harness
[ -x "$H" ] || { echo "SKIP: $build/nsa-harness not built"; exit 77; }
command -v git >/dev/null 2>&1 || { echo "SKIP: git not found"; exit 77; }
torch_python_or_skip yaml
cd "$root"
t_start=$(date +%s.%N)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/nsa_trainer_regression.XXXXXX") || exit 1
repo=$TMP/repo
cleanup() { git -C "$repo" bisect reset >/dev/null 2>&1; rm -rf "$TMP"; }
trap cleanup EXIT
SCEN=$root/scenarios/trainer/golden_regression.json
MAP=$repo/showcase.map.json
BL=$TMP/baselines
# json FILE EXPR: print a Python expression over the JSON file as `j`
json() { "$py" -c 'import json, sys; j = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }

# ---- the trainer's own history: commit A ------------------------------------------------------
mkdir -p "$repo"
for f in train_showcase.py nsa_model.py configs showcase.map.json showcase.yaml.tmpl; do
  cp -r "examples/showcase/$f" "$repo/" || { echo "FAIL: examples/showcase/$f missing"; exit 1; }
done
printf '__pycache__/\n' >"$repo/.gitignore"
g() { git -C "$repo" -c user.name=test -c user.email=test@example.invalid -c commit.gpgsign=false "$@"; }
g init -q && g add -A && g commit -qm "A: the showcase trainer" || { echo "FAIL: git init/commit"; exit 1; }
A=$(g rev-parse HEAD)

# ---- 1. record variant=base at A ------------------------------------------------------------------
expect_exit "record variant=base at A" 0 "$H" baseline record "$SCEN" --trainer-map "$MAP" --baselines "$BL" \
  --filter variant=base --out "$TMP/rec_base"
B1=$BL/ci/cpu-$(uname -m)/trainer_golden_regression/variant=base.json
check "the baseline file: <baselines>/ci/cpu-<arch>/trainer_golden_regression/variant=base.json" test -f "$B1"
check "provenance.commit is the trainer's commit A" test "$(json "$B1" 'j["provenance"]["commit"]')" = "$A"
check "provenance.dirty false (the trainer's work tree)" test "$(json "$B1" 'j["provenance"]["dirty"]')" = False
hsha=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo None)   # this harness's commit (None: not a checkout)
check "provenance.trainer_map, and harness_commit this tree's HEAD" test "$(json "$B1" \
  'j["provenance"]["trainer_map"] == sys.argv[3] and str(j["provenance"]["harness_commit"]) == sys.argv[4]' "$MAP" "$hsha")" = True
check "fingerprint: python, torch, machine, cpu model, cores; no compiler key" test "$(json "$B1" \
  'sorted(j["provenance"]["fingerprint"])')" = "['backend', 'cores', 'cpu_model', 'machine', 'precision', 'python', 'torch']"
check "perf: no peak memory, no FLOPs from a probe trainer (null, not 0)" test "$(json "$B1" \
  '(j["perf"]["peak_mem_bytes"], j["perf"]["flops_per_step"])')" = "(None, None)"
"$H" baseline show "$B1" >"$TMP/show" 2>&1
check "baseline show names the map and says the commit is the trainer's" has "$TMP/show" "trainer map $MAP (the commit below is the trainer's"

# ---- 2. a run at A: base bitwise, sel SKIP naming the record command --------------------------
expect_exit "run at A: exit 0" 0 "$H" run "$SCEN" --trainer-map "$MAP" --baselines "$BL" \
  --filter variant=base --filter variant=sel --out "$TMP/runA"
cp "$TMP/out" "$TMP/runA.out"
check "run at A: variant=base bitwise equal to its baseline" grep -q \
  'PASS  trainer_golden_regression/variant=base .*bitwise equal to the baseline: 12 steps' "$TMP/runA.out"
rec=$(json "$TMP/runA/summary.json" \
  '[c["summary"] for c in j["cases"] if c["case"] == "variant=sel"][0].split("`")[1]')
case "$rec" in
  "nsa-harness baseline record $SCEN --profile ci --case trainer_golden_regression/variant=sel --baselines $BL --trainer-map $MAP")
    ok "run at A: variant=sel without a baseline SKIPs naming the record command with --trainer-map" ;;
  *) bad "variant=sel's record command: '$rec'"; grep -F 'variant=sel' "$TMP/runA.out" ;;
esac
# shellcheck disable=SC2086 # the command as the finding prints it (no spaces in these paths)
expect_exit "that command records variant=sel" 0 "$H" ${rec#nsa-harness } --out "$TMP/rec_sel"

# ---- 3. B (a comment), C (the planted change), D (a comment): D fails -------------------------
echo "# B: a comment" >>"$repo/train_showcase.py"
g commit -qam "B: a comment"
sed -i 's/keepdim=True) + self.eps)/keepdim=True) + self.eps * 10)/' "$repo/nsa_model.py"
check "the plant applies (RMSNorm eps 10x)" grep -q 'self.eps \* 10)' "$repo/nsa_model.py"
g commit -qam "C: RMSNorm eps 1e-5 -> 1e-4"
C=$(g rev-parse HEAD)
echo "# D: another comment" >>"$repo/nsa_model.py"
g commit -qam "D: another comment"
D=$(g rev-parse HEAD)
expect_exit "run at D: the golden check fails" 1 "$H" run "$SCEN" --trainer-map "$MAP" --baselines "$BL" \
  --filter variant=base --filter variant=sel --out "$TMP/runD"
cp "$TMP/out" "$TMP/runD.out"
check "D: both variants FAIL" bash -c "grep -qF 'FAIL  trainer_golden_regression/variant=base' '$TMP/runD.out' &&
  grep -qF 'FAIL  trainer_golden_regression/variant=sel' '$TMP/runD.out'"
check "D, variant=base: diverges at step 1" has "$TMP/runD/RESULTS.md" 'diverges from the baseline at step 1 (loss 5.7'
check "D, variant=base: the forward, acts.blocks.0.attn.cmp.o (layer 0 cmp)" has "$TMP/runD/RESULTS.md" \
  'the forward changed: the first differing activation in dataflow order is `acts.blocks.0.attn.cmp.o` (layer 0 cmp)'
check "D, variant=sel: acts.blocks.0.attn.sel.o (layer 0 sel)" has "$TMP/runD/RESULTS.md" \
  'the first differing activation in dataflow order is `acts.blocks.0.attn.sel.o` (layer 0 sel)'
check "D: facts golden_first_diverging_step 1, cause forward, bitwise" test "$(json "$TMP/runD/summary.json" \
  'sorted({(c["facts"]["golden_first_diverging_step"], c["facts"]["golden_cause"], c["facts"]["golden_mode"]) for c in j["cases"]})')" \
  = "[(1, 'forward', 'bitwise')]"
check "D: the trainer's gradients grouped by the map's branches (layer 0 sel: attn.select.*)" grep -qE \
  '\*\*layer 0 sel\*\* \([0-9]+ tensors\):.*`grads.layers.0.attn.select.' "$TMP/runD/RESULTS.md"
check "D: the baseline's commit (A) and the re-record command with the map" bash -c \
  "grep -qF 'at $A); comparison bitwise: same build fingerprint' '$TMP/runD/RESULTS.md' &&
   grep -qF -- '--case trainer_golden_regression/variant=base --baselines $BL --trainer-map $MAP\`' '$TMP/runD/RESULTS.md'"

# ---- 4. git bisect run in the trainer's repository names C ------------------------------------
(
  cd "$repo" || exit 1
  git bisect start "$D" "$A" >/dev/null &&
  git bisect run sh -c "exec '$H' run '$SCEN' --trainer-map '$MAP' --baselines '$BL' --filter variant=base \
      --bisect --quiet --out '$TMP/bisect/'\$(git rev-parse --short HEAD)"
) >"$TMP/bisect.out" 2>&1
grep -E "^(running |[0-9a-f]{40} is the first bad commit)" "$TMP/bisect.out" | cut -c1-160
check "git bisect run names C as the first bad commit" grep -q "^$C is the first bad commit" "$TMP/bisect.out" \
  || tail -20 "$TMP/bisect.out"
check "git bisect run: C's subject" grep -q "C: RMSNorm eps 1e-5 -> 1e-4" "$TMP/bisect.out"
short_c=$(g rev-parse --short "$C")
check "the step at C judged C's trainer (env.json build.git_sha) and failed it" test "$(json \
  "$TMP/bisect/$short_c/trainer_golden_regression/variant=base/env.json" 'j["build"]["git_sha"]')" = "$C"
check "the step at C: FAIL, forward at step 1" has "$TMP/bisect/$short_c/RESULTS.md" 'the forward changed'
g bisect reset >/dev/null 2>&1

t_end=$(date +%s.%N)
"$py" -c "import sys; print('timing: whole test %.1f s' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t_start" "$t_end"
finish
