#!/usr/bin/env bash
# tests/cli/readme_examples.sh BUILD_DIR — the README's examples run as written on the machine
# the main job just built:
#  1. every example line that runs nsa-harness or nsa-train names the build folder as $B, and
#     each such block sets B first to build-cpu, the folder ./run_all.sh builds without a GPU
#     (run_all.sh says so); no example names build/ directly;
#  2. the revisions of the bisect example exist in this repository;
#  3. in a clone of this repository (this tree's .gitignore copied in), with B set to BUILD_DIR:
#     the README's validate, list, baseline show, --protocol-info, --dump-step and show lines,
#     verbatim, exit 0 (show on a report made for it); nsa-train without --out writes into
#     runs/ (said on its first line), not into the current folder;
#  4. nothing they left shows in `git status` (.gitignore covers runs/, reports/, the build
#     folders, and what nsa-train's older default --out left at the root).
# Skips (77) without git or outside a git checkout.
set -u
build=${1:?usage: bash tests/cli/readme_examples.sh <build dir>}
src=$(pwd)
B=$(cd "$build" && pwd)
[ -x "$B/nsa-harness" ] && [ -x "$B/nsa-train" ] || { echo "SKIP: nsa-harness or nsa-train not built in $build"; exit 77; }
command -v git >/dev/null 2>&1 || { echo "SKIP: git not found"; exit 77; }
git -C "$src" rev-parse HEAD >/dev/null 2>&1 || { echo "SKIP: $src is not a git checkout"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, finish, has

# ---- 1. the build folder of the examples -------------------------------------------------------------
check "README examples: \$B set to build-cpu before use, no build/ named directly" python3 - "$src/README.md" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
uses = [b for b in blocks if "nsa-harness " in b or "nsa-train " in b]
assert uses, "no example blocks"
for b in uses:
    lines = [l for l in b.splitlines() if l.strip()]
    runs = [l for l in lines if re.search(r"(^|\s)(\S*/)?nsa-(harness|train) ", l)]
    for l in runs:
        assert not re.search(r"(^|\s)build/nsa-", l), "names build/ directly: " + l
    if any("$B/" in l for l in lines):
        first = next(i for i, l in enumerate(lines) if "$B/" in l)
        sets = [l for l in lines[:first] if re.match(r"B=", l)]
        assert sets and sets[0].split()[0] == "B=build-cpu", ("B is not set to build-cpu first", lines[:2])
PY
check "run_all.sh's main job builds in build-cpu/ without a GPU" grep -q 'BUILD=${NSA_BUILD_DIR:-build-cpu}' "$src/run_all.sh"

# ---- 2. the bisect example's revisions ----------------------------------------------------------------
line=$(grep -E '^\$B/nsa-harness bisect ' "$src/README.md" | head -1)
good=$(sed -n 's/.*--good \([^ ]*\).*/\1/p' <<<"$line")
badr=$(sed -n 's/.*--bad \([^ ]*\).*/\1/p' <<<"$line")
check "the bisect example's revisions exist: --good $good --bad $badr" bash -c \
  "[ -n '$good' ] && git -C '$src' rev-parse -q --verify '$good^{commit}' >/dev/null && git -C '$src' rev-parse -q --verify '$badr^{commit}' >/dev/null"

# ---- 3. the examples, verbatim, in a clone ----------------------------------------------------------------
git clone -q --shared "$src" "$TMP/tree" || { bad "clone"; finish; }
cp "$src/.gitignore" "$TMP/tree/.gitignore"
ex() {   # ex PREFIX: run the README's line that starts with PREFIX, as written, in the clone
  local l
  l=$(grep -m1 -F -- "$1" "$src/README.md")
  [ -n "$l" ] || { echo "no README line starts with: $1" >"$TMP/ex.out"; return 99; }
  (cd "$TMP/tree" && B="$B" bash -c "$l") >"$TMP/ex.out" 2>&1
}
for p in '$B/nsa-harness validate scenarios/*.json' '$B/nsa-harness list ' '$B/nsa-harness baseline show golden/baselines' \
         '$B/nsa-train --protocol-info' '$B/nsa-train --config configs/tiny.json --dump-step runs/step1.safetensors'; do
  if ex "$p"; then ok "README: $p... (exit 0)"; else bad "README: $p... (exit $?)"; tail -5 "$TMP/ex.out"; fi
  case "$p" in *--dump-step*)
    check "... nsa-train without --out: runs/ (said first), nothing in the current folder" bash -c \
      "head -1 '$TMP/ex.out' | grep -qx 'nsa-train: writing metrics.jsonl to runs/ (no --out given)' &&
       [ -s '$TMP/tree/runs/metrics.jsonl' ] && [ -s '$TMP/tree/runs/step1.safetensors' ] && [ ! -e '$TMP/tree/metrics.jsonl' ]" ;;
  esac
done
(cd "$TMP/tree" && "$B/nsa-harness" run scenarios/gate_init.json --profile ci --out reports/20990101T000000Z_readme --quiet) >/dev/null 2>&1
if ex '$B/nsa-harness show "$(ls -d reports/2*/ | tail -n 1)"'; then ok "README: show the latest report (exit 0)"
else bad "README: show the latest report"; tail -5 "$TMP/ex.out"; fi

# ---- 4. nothing left that git status shows ------------------------------------------------------------------
# what an older nsa-train default left at the root, too
(cd "$TMP/tree" && touch metrics.jsonl anomaly.json grad_trace.jsonl step1.safetensors && mkdir -p build-cpu build-bisect &&
 touch build-cpu/x build-bisect/x)
left=$(git -C "$TMP/tree" status --porcelain --untracked-files=all | grep '^??')
check "git status shows nothing the examples left${left:+: $left}" test -z "$left"
check "... reports/README.md is not ignored" bash -c "! git -C '$TMP/tree' check-ignore -q reports/README.md"
finish
