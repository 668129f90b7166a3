#!/usr/bin/env bash
# tests/cli/bisect.sh — nsa-harness bisect end to end, on a small git history made
# from this tree's committed sources (git archive HEAD) in a temporary repository:
#
#   c0 import · c1 benign · c2 benign · c3 breaks the build (syntax error in
#   trainer/data.c) · c4 fixes it · c5 plants a numerical change (gate.fc2 init gain
#   0.1 -> 0.0 in trainer/model.c) · c6 benign
#
# The scenario that must catch the plant (the "detector"): the regression scenario,
# scenarios/golden_regression.json --filter variant=base against the committed baseline
# golden/baselines/ci/cpu-<arch>/ (its golden check: "the initial weights differ:
# blocks.*.attn.gate.fc2.weight"), when HEAD has both; else scenarios/gate_init.json
# (its gate_init check: "uniform gate in 4/4 layers"). BISECT_TEST_DETECTOR=golden or
# gate_init chooses.
#
#  1. bisect --good c0 --bad c6 <detector> --profile ci --no-verify: exit 0, names exactly c5
#     with its subject and the detector's finding (summary lines and the case's RESULTS.md
#     section); the steps are c3 (build failed -> skip), c4 (good), c5 (bad): the midpoint
#     of c1..c5 is c3, so the broken commit is visited and skipped; each step's report is
#     kept, its trainer was built from that commit (env.json) and is kept beside it
#     (NN_SHA/nsa-train): the report's header names its commit and its reproduce command
#     names that file, which exists; the inputs' state is printed first (as committed);
#     bisect.md has the table; no worktree, temporary folder or process is left;
#  2. --good c2 --bad c4 (gate_init, --no-verify): the skipped c3 sits at the boundary: exit 1,
#     "the first bad commit is one of:" c3 and c4;
#  3. usage: an unknown revision, GOOD not an ancestor of BAD, not a git repository, a
#     missing --bad, a bad --set: exit 2;
#  4. Ctrl-C (SIGINT) while a step's run is hung (gate_init, --fault hang): exit 130, the
#     step's report marked interrupted, worktrees and processes gone;
#  5. the git bisect run recipe of docs/bisect.md (a fixed runner and inputs, nsa-train
#     built per commit, a failed build exit 125) with the detector names c5 too;
#  6. inputs that differ from their commit (a copy of scenarios/, configs/ and the baselines in
#     a git repository of its own): a one-digit edit to the golden baseline is refused before
#     anything is built (exit 2, naming the file and --allow-dirty); with --allow-dirty (an edited
#     gate_init.json) the edit is stated before the first step and in bisect.md, and GOOD is
#     tested first by default: --good c5 tests bad: exit 2 after one step, saying so.
# Nothing is left behind: the repository, the reports and ccache's cache (CCACHE_DIR)
# live in one temporary folder; no worktree is added to this tree's repository.
# Prints the wall time of part 1 and of the whole test.
# Skips (77) without git, python3, the executables, or outside a git checkout.
set -u
build=${1:?usage: bash tests/cli/bisect.sh <build dir>}
H="$build/nsa-harness"
if [ ! -x "$H" ] || [ ! -x "$build/nsa-train" ]; then echo "SKIP: $H or nsa-train not built"; exit 77; fi
command -v git >/dev/null 2>&1 || { echo "SKIP: git not found"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 not found (needed to read the reports)"; exit 77; }
src=$(pwd)
git -C "$src" rev-parse HEAD >/dev/null 2>&1 || { echo "SKIP: $src is not a git checkout (git archive HEAD needs one)"; exit 77; }
H=$(cd "$(dirname "$H")" && pwd)/nsa-harness
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nsa_bisect_test.XXXXXX") || exit 1
bpid=
cleanup() {
    # what a failed assertion may have left: the bisect of part 4, a git bisect in progress
    # (bisect's children die with it: PR_SET_PDEATHSIG)
    [ -n "$bpid" ] && kill -9 "$bpid" 2>/dev/null
    git -C "$tmp/repo" bisect reset >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
export TMPDIR="$tmp/tmpdir"   # bisect's own temporary folders (worktree, build) go here
mkdir -p "$TMPDIR"
export CCACHE_DIR="$tmp/ccache"   # used when ccache is on the PATH; deleted with the rest
pass=0
fail=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1: $2"; fail=$((fail + 1)); }
py() {
    local name=$1 script=$2
    shift 2
    if python3 -c "$script" "$@" >"$tmp/py.out" 2>&1; then ok "$name"; else bad "$name" "$(tail -8 "$tmp/py.out")"; fi
}
nothing_left() {   # $1: label
    local n
    n=$(git -C "$tmp/repo" worktree list --porcelain | grep -c '^worktree ')
    [ "$n" -eq 1 ] && ok "$1: no worktree left in the bisected repository" \
        || bad "$1: worktrees left" "$(git -C "$tmp/repo" worktree list)"
    [ -z "$(ls -A "$TMPDIR")" ] && ok "$1: temporary folder removed" || bad "$1: temporary folder left" "$(ls -A "$TMPDIR")"
    if pgrep -f -- "$tmp/" >/dev/null 2>&1; then bad "$1: no process left" "$(pgrep -af -- "$tmp/")"; else ok "$1: no process left"; fi
}
t_start=$(date +%s.%N)

# ---- the detector ----------------------------------------------------------------------------
detector=${BISECT_TEST_DETECTOR:-}
if [ -z "$detector" ]; then
    detector=gate_init
    git -C "$src" cat-file -e HEAD:scenarios/golden_regression.json 2>/dev/null \
        && git -C "$src" cat-file -e "HEAD:golden/baselines/ci/cpu-$(uname -m)/golden_regression/variant=base.json" 2>/dev/null \
        && detector=golden
fi
if [ "$detector" = golden ]; then
    det_args=(scenarios/golden_regression.json --filter variant=base)
    det_case="golden_regression · variant=base"
    det_line='^- golden_regression/variant=base \*\*FAIL\*\*: diverges from the baseline at step 1 .*the initial weights differ .*blocks\.0\.attn\.gate\.fc2\.weight'
else
    det_args=(scenarios/gate_init.json)
    det_case="gate_init · gate=softmax"
    det_line='^- gate_init/gate=softmax \*\*FAIL\*\*: uniform gate in 4/4 layers'
fi
echo "detector: ${det_args[*]}"

ccache_note="ccache not on the PATH"
command -v ccache >/dev/null 2>&1 && ccache_note="ccache on the PATH (an empty cache in $CCACHE_DIR)"
[ -n "${CCACHE_DISABLE:-}" ] && ccache_note="ccache disabled (CCACHE_DISABLE)"

# ---- the history ---------------------------------------------------------------------------
export GIT_AUTHOR_NAME="bisect test" GIT_AUTHOR_EMAIL="bisect@test" GIT_COMMITTER_NAME="bisect test" GIT_COMMITTER_EMAIL="bisect@test"
export GIT_AUTHOR_DATE="2026-01-01T00:00:00Z" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z"
mkdir -p "$tmp/repo"
git -C "$src" archive HEAD | tar -x -C "$tmp/repo" || { bad "history" "git archive HEAD failed"; exit 1; }
grep -q 'gate_fc2 = {INIT_XAVIER, 0.1}' "$tmp/repo/trainer/model.c" || { bad "history" "trainer/model.c has no gate_fc2 gain 0.1 to plant a change in"; exit 1; }
(
    set -e
    cd "$tmp/repo"
    g() { git -c init.defaultBranch=main -c commit.gpgsign=false "$@"; }
    g init -q .
    g add -A && g commit -qm "c0: import" && g tag c0
    echo "// c1" >>trainer/optim.c && g commit -qam "c1: a comment in optim.c" && g tag c1
    echo "c2" >>README.md && g commit -qam "c2: a README line" && g tag c2
    echo "this is not C;" >>trainer/data.c && g commit -qam "c3: a syntax error in data.c" && g tag c3
    sed -i '$d' trainer/data.c && g commit -qam "c4: fix the build" && g tag c4
    sed -i 's/gate_fc2 = {INIT_XAVIER, 0.1}/gate_fc2 = {INIT_XAVIER, 0.0}/' trainer/model.c
    g commit -qam "c5: gate fc2 init gain 0.1 -> 0.0" && g tag c5
    echo "c6" >>README.md && g commit -qam "c6: another README line" && g tag c6
) >"$tmp/history.log" 2>&1 || { bad "history" "$(tail -5 "$tmp/history.log")"; exit 1; }
sha() { git -C "$tmp/repo" rev-parse "$1"; }
short() { git -C "$tmp/repo" rev-parse --short "$1"; }

# ---- 1. the first bad commit ------------------------------------------------------------------
src_head=$(git -C "$src" rev-parse --short=7 HEAD)   # the inputs' commit as bisect reads it (a commit landing meanwhile is not its)
t0=$(date +%s.%N)
"$H" bisect --repo "$tmp/repo" --good c0 --bad c6 --out "$tmp/out" "${det_args[@]}" --profile ci --quiet --no-verify \
    >"$tmp/b1.out" 2>&1
rc=$?
t1=$(date +%s.%N)
cat "$tmp/b1.out"
[ "$rc" -eq 0 ] && ok "bisect exits 0" || bad "bisect exits 0" "exit $rc"
grep -qx "first bad commit: $(sha c5) c5: gate fc2 init gain 0.1 -> 0.0" "$tmp/b1.out" \
    && ok "names exactly c5 with its subject" || bad "names c5" "$(grep 'first bad' "$tmp/b1.out")"
grep -q "$det_line" "$tmp/b1.out" \
    && ok "prints the failing case's summary line" || bad "finding summary" "missing"
grep -q "^## $det_case — FAIL" "$tmp/b1.out" \
    && ok "prints the failing case's RESULTS.md section" || bad "finding section" "missing"
grep -q "build failed (.*trainer/data.c:[0-9]*:[0-9]*: error" "$tmp/b1.out" \
    && ok "the broken commit's build error is shown" || bad "build error line" "missing"
grep -q "^bisect: inputs ([0-9]* paths: scenarios, configs.*) as committed at $src_head in $(cd "$src" && pwd -P)\$" "$tmp/b1.out" \
    && ok "the inputs' state comes first: as committed, the commit named" || bad "inputs' state line" "$(grep '^bisect: inputs' "$tmp/b1.out")"
py "steps: c3 build failed -> skip, c4 good, c5 bad; reports kept; trainers built from their commits" '
import json, os, re, sys
out, c3, c4, c5 = sys.argv[1:5]
md = open(os.path.join(out, "bisect.md")).read()
rows = [l for l in md.split("\n## Steps")[1].split("\n## ")[0].splitlines() if re.match(r"\| \d+ \|", l)]
cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
assert [c[1].strip("`") for c in cells] == [c3[:7], c4[:7], c5[:7]], cells
assert cells[0][3].startswith("build failed") and cells[0][4] == "—" and cells[0][5] == "skip", cells[0]
assert cells[1][3].startswith("ok") and cells[1][4] == "0" and cells[1][5] == "good", cells[1]
assert cells[2][3].startswith("ok") and cells[2][4] == "1" and cells[2][5] == "bad", cells[2]
assert "**First bad commit:** `%s` c5: gate fc2 init gain 0.1 -> 0.0" % c5 in md
assert "**FAIL**" in md and "### The first failing case" in md
for i, (sha, code) in enumerate([(c4, 0), (c5, 1)]):
    d = os.path.join(out, cells[i + 1][6].strip("`/"), "report")
    s = json.load(open(os.path.join(d, "summary.json")))
    assert s["finished"] and s["exit_code"] == code and s["profile"] == "ci", (d, s["exit_code"])
    env = json.load(open(os.path.join(d, "env.json")))
    assert env["build"]["git_sha"] == sha and env["build"]["git_dirty"] in (0, False), env["build"]
    assert env["cuda"] is None or not env["cuda"].get("devices"), "a CPU-only build"
    # the trainer is kept beside the report; the report names its commit and the reproduce
    # commands name the kept file (the build folder is gone)
    kept = os.path.join(out, cells[i + 1][6].strip("`/"), "nsa-train")
    assert os.access(kept, os.X_OK), kept
    md_r = open(os.path.join(d, "RESULTS.md")).read()
    assert "trainer `%s` (nsa-train %s, protocol" % (kept, sha[:7]) in md_r, (kept, md_r[:600])
    repro = re.findall(r"reproduce: `([^`]*)`", md_r)
    assert code == 0 or repro, "a failing case lists its reproduce command"
    for r in repro:
        assert "--trainer " + kept in r, r
log = open(os.path.join(out, cells[0][6].strip("`/"), "build.log")).read()
assert "error" in log and "data.c" in log, log[-500:]
' "$tmp/out" "$(sha c3)" "$(sha c4)" "$(sha c5)"
nothing_left "bisect c0..c6"
# (others may add worktrees of their own to it meanwhile: only ours, below $tmp, count)
if git -C "$src" worktree list --porcelain | grep -q "^worktree $tmp/"; then
    bad "worktrees of $src" "$(git -C "$src" worktree list)"
else ok "no worktree added to $src's repository"; fi

# ---- 2. skipped commits at the boundary -------------------------------------------------------------
"$H" bisect --repo "$tmp/repo" --good c2 --bad c4 --out "$tmp/out2" scenarios/gate_init.json --profile ci --no-verify >"$tmp/b2.out" 2>&1
rc=$?
sed -n '/^the first bad commit could not/,/^$/p' "$tmp/b2.out"
[ "$rc" -eq 1 ] && ok "boundary skip exits 1" || { bad "boundary skip exits 1" "exit $rc"; cat "$tmp/b2.out"; }
grep -q "the first bad commit is one of:" "$tmp/b2.out" && grep -q "^  $(sha c3) c3: .* (skip)" "$tmp/b2.out" \
    && grep -q "^  $(sha c4) c4: .* (bad (assumed))" "$tmp/b2.out" \
    && ok "lists the candidates c3 (skip) and c4" || bad "candidates" "$(cat "$tmp/b2.out")"
nothing_left "boundary skip"

# ---- 3. usage errors ----------------------------------------------------------------------------------
expect2() {   # label, expected message, args...
    local label=$1 msg=$2
    shift 2
    "$H" bisect "$@" >"$tmp/u.out" 2>&1
    local rc=$?
    if [ "$rc" -eq 2 ] && grep -qF -- "$msg" "$tmp/u.out"; then ok "usage: $label"; else bad "usage: $label" "exit $rc: $(cat "$tmp/u.out")"; fi
}
expect2 "unknown revision" "--good nosuch: not a commit in $tmp/repo" --repo "$tmp/repo" --good nosuch --bad c6
expect2 "GOOD not an ancestor of BAD" "is not an ancestor of --bad c0" --repo "$tmp/repo" --good c6 --bad c0
mkdir -p "$tmp/notrepo"
expect2 "not a git repository" "--repo $tmp/notrepo: not a git repository" --repo "$tmp/notrepo" --good c0 --bad c6
expect2 "missing --bad" "--good REV and --bad REV are required" --repo "$tmp/repo" --good c0
expect2 "invalid --set" "--set nosuch.key=1" --repo "$tmp/repo" --good c0 --bad c6 scenarios/gate_init.json --profile ci --set nosuch.key=1
[ -z "$(ls -A "$TMPDIR")" ] && ok "usage errors leave no temporary folder" || bad "usage errors left" "$(ls -A "$TMPDIR")"

# ---- 4. Ctrl-C while a step's run hangs ---------------------------------------------------------------
# c3..c5: the only commit to test is c4; its run hangs at step 1 (timeout 60 s) until SIGINT
"$H" bisect --repo "$tmp/repo" --good c3 --bad c5 --out "$tmp/out4" scenarios/gate_init.json --profile ci --no-verify \
    --fault hang=0:1:forward >"$tmp/b4.out" 2>&1 &
bpid=$!
for _ in $(seq 600); do   # until the step's trainer is running (its case folder exists)
    ls -d "$tmp"/out4/01_*/report/gate_init/*/ranks >/dev/null 2>&1 && break
    sleep 0.1
done
sleep 1
kill -INT "$bpid"
wait "$bpid"
rc=$?
bpid=
[ "$rc" -eq 130 ] && ok "SIGINT: exit 130" || { bad "SIGINT: exit 130" "exit $rc"; cat "$tmp/b4.out"; }
py "SIGINT: the step's report is marked interrupted, bisect.md says so" '
import glob, json, sys
out = sys.argv[1]
s = json.load(open(glob.glob(out + "/01_*/report/summary.json")[0]))
assert s["interrupted"] and s["exit_code"] == 130, (s["interrupted"], s["exit_code"])
md = open(out + "/bisect.md").read()
assert "Interrupted" in md and "| stop |" in md, md
' "$tmp/out4"
nothing_left "SIGINT"

# ---- 5. the git bisect run recipe (docs/bisect.md) ------------------------------------------------------
# the runner and its inputs stay fixed (copied out of the tree); each commit builds only
# nsa-train, a failed build is 125 (skip); `run --bisect` turns exit 2 into 125 too
inputs="$tmp/inputs"
mkdir -p "$inputs"
cp -r scenarios configs "$inputs/" && cp "$H" "$inputs/nsa-harness"
rec_args="$inputs/${det_args[0]} ${det_args[*]:1}"
if [ "$detector" = golden ]; then   # old commits lack the baselines too
    mkdir -p "$inputs/golden" && cp -r golden/baselines "$inputs/golden/"
    rec_args="$rec_args --baselines $inputs/golden/baselines"
fi
(
    cd "$tmp/repo"
    git bisect start c6 c0 >/dev/null
    git bisect run sh -c "cmake -S . -B build-bisect -DNSA_ENABLE_CUDA=OFF -DNSA_ENABLE_MPI=OFF >/dev/null 2>&1 \
        && cmake --build build-bisect --target nsa-train -j$(nproc) >/dev/null 2>&1 || exit 125; \
        exec $inputs/nsa-harness run $rec_args --profile ci --trainer build-bisect/nsa-train \
        --out $tmp/recipe/\$(git rev-parse --short HEAD) --bisect --quiet"
) >"$tmp/b5.out" 2>&1
grep -E "^(Bisecting: |running |[0-9a-f]{40} is the first bad commit)" "$tmp/b5.out" | cut -c1-160
grep -q "^$(sha c5) is the first bad commit" "$tmp/b5.out" \
    && ok "git bisect run recipe names c5" || bad "git bisect run recipe" "$(tail -20 "$tmp/b5.out")"
grep -q "^    c5: gate fc2 init gain 0.1 -> 0.0" "$tmp/b5.out" && ok "git bisect run recipe: its subject" || bad "recipe subject" "missing"
git -C "$tmp/repo" bisect reset >/dev/null 2>&1

# ---- 6. inputs that differ from their commit; GOOD tested first by default ------------------------------
in6="$tmp/inputs6"
mkdir -p "$in6/golden" && cp -r scenarios configs "$in6/" && cp -r golden/baselines "$in6/golden/"
git -C "$in6" -c init.defaultBranch=main init -q . && git -C "$in6" add -A && git -C "$in6" -c commit.gpgsign=false commit -qm inputs
base_json=$(ls "$in6"/golden/baselines/ci/*/golden_regression/variant=base.json 2>/dev/null | head -1)
if [ -n "$base_json" ]; then
    # one digit of the first recorded loss, as in the report that found it
    python3 - "$base_json" <<'PY'
import re, sys
p = sys.argv[1]; s = open(p).read()
m = re.search(r'"loss": ?-?[0-9]+\.([0-9]+)', s)
i = m.end(1) - 1
open(p, "w").write(s[:i] + str((int(s[i]) + 1) % 10) + s[i + 1:])
PY
    rel=${base_json#"$in6"/}
    "$H" bisect --repo "$tmp/repo" --good c4 --bad c5 --out "$tmp/out6" "$in6/scenarios/golden_regression.json" \
        --filter variant=base --baselines "$in6/golden/baselines" --profile ci >"$tmp/b6.out" 2>&1
    rc=$?
    [ "$rc" -eq 2 ] && grep -qF " M $rel" "$tmp/b6.out" && grep -q "the inputs every commit would be judged with differ from their commit" "$tmp/b6.out" \
        && grep -q -- "--allow-dirty" "$tmp/b6.out" \
        && ok "an edited baseline: refused (exit 2) naming the file and --allow-dirty" || bad "dirty baseline refused" "exit $rc: $(cat "$tmp/b6.out")"
    [ ! -e "$tmp/out6" ] && [ -z "$(ls -A "$TMPDIR")" ] && ok "... before anything is built or written" || bad "dirty: something was made" "$(ls "$tmp/out6" "$TMPDIR" 2>&1)"
    git -C "$in6" checkout -q -- .
fi
sed -i 's/"description": "/"description": "(edited) /' "$in6/scenarios/gate_init.json"
"$H" bisect --repo "$tmp/repo" --good c5 --bad c6 --out "$tmp/out7" "$in6/scenarios/gate_init.json" --profile ci --allow-dirty \
    >"$tmp/b7.out" 2>&1
rc=$?
[ "$rc" -eq 2 ] && ok "--allow-dirty, --good c5 (which fails): exit 2" || bad "--allow-dirty verify exit" "exit $rc: $(tail -5 "$tmp/b7.out")"
sed -n '/WARNING (--allow-dirty)/,/^\[step 1\]/p' "$tmp/b7.out" | grep -q "^     M scenarios/gate_init.json$" \
    && ok "--allow-dirty: the edited file is stated before the first step" || bad "dirty stated up front" "$(head -12 "$tmp/b7.out")"
grep -q "^\[step 1\] $(short c5) c5: .* (verify)$" "$tmp/b7.out" && [ "$(grep -c '^\[step ' "$tmp/b7.out")" = 1 ] \
    && grep -q "^nsa-harness bisect: --good $(short c5) tested bad, not good .*--no-verify to assume it" "$tmp/b7.out" \
    && ok "GOOD is tested first by default: c5 tests bad, said so, one step" || bad "verify by default" "$(cat "$tmp/b7.out")"
grep -q "inputs that differ from their commit" "$tmp/out7/bisect.md" \
    && grep -q "(verify)" "$tmp/out7/bisect.md" && grep -q "Stopped (exit 2): --good" "$tmp/out7/bisect.md" \
    && ok "bisect.md: the dirty inputs, the verify step, why it stopped" || bad "bisect.md of --allow-dirty" "$(head -20 "$tmp/out7/bisect.md")"
nothing_left "--allow-dirty"

t_end=$(date +%s.%N)
python3 -c "import sys; a, b, c = map(float, sys.argv[1:4]); print('timing: bisect c0..c6 %.1f s (3 steps), whole test %.1f s; %s' % (b - a, c - float(sys.argv[4]), sys.argv[5]))" \
    "$t0" "$t1" "$t_end" "$t_start" "$ccache_note"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
