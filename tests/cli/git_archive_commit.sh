#!/usr/bin/env bash
# tests/cli/git_archive_commit.sh BUILD_DIR — a tree without git (a release tarball, `git
# archive`) still knows its commit: git archive fills in .git_archival.txt (.gitattributes:
# export-subst), cmake/build_info.cmake reads it where `git rev-parse` fails, and nsa-train
# --print-env names that commit (build.git_sha; git_dirty null: nothing to compare with).
#
# The archive is of HEAD with this work tree's .gitattributes, .git_archival.txt and
# cmake/build_info.cmake (so the test checks the mechanism as it is here, committed or not):
# a commit made in a shared clone in a temporary folder (this repository's refs, index and
# objects are not touched). It is unpacked into a folder of another git repository (with a
# commit of its own, which must not be taken for the tree's), configured CPU-only without MPI
# and nsa-train and nsa-harness are built (about 2-3 minutes on 2 cores); a run of nsa-harness
# there names its report by the archived commit. Also: the same tree with
# .git_archival.txt as committed (not filled in) says "unknown", not a wrong commit.
# Skips (77) without git or outside a git checkout.
set -u
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, finish
src=$(pwd)
command -v git >/dev/null 2>&1 || { echo "SKIP: git not found"; exit 77; }
git -C "$src" rev-parse HEAD >/dev/null 2>&1 || { echo "SKIP: $src is not a git checkout"; exit 77; }
for f in .gitattributes .git_archival.txt cmake/build_info.cmake; do
  [ -f "$src/$f" ] || { bad "$f exists"; finish; }
done
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t

# ---- a commit: HEAD with this tree's three files, in a shared clone ----------------------------
git clone -q --shared --no-checkout "$src" "$TMP/clone" || { bad "clone"; finish; }
G() { git --git-dir="$TMP/clone/.git" "$@"; }
G read-tree "$(git -C "$src" rev-parse HEAD)" &&
  G --work-tree="$src" add -f .gitattributes .git_archival.txt cmake/build_info.cmake || { bad "stage the files"; finish; }
commit=$(G commit-tree "$(G write-tree)" -p "$(git -C "$src" rev-parse HEAD)" -m "archive test")
[ -n "$commit" ] || { bad "commit-tree"; finish; }

# ---- git archive, unpacked inside another repository ----------------------------------------------
mkdir -p "$TMP/outer/rel" && git -C "$TMP/outer" init -q . && git -C "$TMP/outer" commit -q --allow-empty -m outer
outer=$(git -C "$TMP/outer" rev-parse HEAD)
G archive "$commit" | tar -x -C "$TMP/outer/rel" || { bad "git archive | tar -x"; finish; }
check "git archive filled in .git_archival.txt: commit: $commit" grep -qx "commit: $commit" "$TMP/outer/rel/.git_archival.txt"
check "the unpacked tree has no .git of its own" test ! -e "$TMP/outer/rel/.git"

# ---- configure and build nsa-train there ---------------------------------------------------------
t0=$(date +%s)
if cmake -S "$TMP/outer/rel" -B "$TMP/b" -DNSA_ENABLE_CUDA=OFF -DNSA_ENABLE_MPI=OFF >"$TMP/build.log" 2>&1 &&
   cmake --build "$TMP/b" --target nsa-train -j"$(nproc 2>/dev/null || echo 2)" >>"$TMP/build.log" 2>&1; then
  ok "configure and build nsa-train in the unpacked tree ($(( $(date +%s) - t0 )) s)"
else
  bad "configure and build nsa-train in the unpacked tree"; tail -20 "$TMP/build.log"; finish
fi
"$TMP/b/nsa-train" --print-env >"$TMP/env.json" 2>"$TMP/env.err"
check "--print-env: build.git_sha is the archived commit (not the enclosing repository's $outer), git_dirty null" \
  python3 - "$TMP/env.json" "$commit" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))["build"]
assert b["git_sha"] == sys.argv[2], b
assert b["git_dirty"] is None, b
PY
check "--protocol-info: version is the archived commit" bash -c "'$TMP/b/nsa-train' --protocol-info | grep -q '\"version\":\"$commit\"'"

# ---- nsa-harness there: its report is named by the archived commit, not the enclosing repository's
if cmake --build "$TMP/b" --target nsa-harness -j"$(nproc 2>/dev/null || echo 2)" >>"$TMP/build.log" 2>&1; then
  "$TMP/b/nsa-harness" run "$TMP/outer/rel/scenarios/gate_init.json" --profile ci --filter 'gate=softmax' --quiet \
    >"$TMP/run.out" 2>&1
  rep=$(basename "$(ls -d "$TMP/outer/rel/reports"/*/ 2>/dev/null | head -1)")
  check "nsa-harness run in the unpacked tree: the report ($rep) named by the archived commit (${commit:0:12}), not the enclosing repository's (${outer:0:7})" \
    test "${rep##*_}" = "${commit:0:12}"
else
  bad "build nsa-harness in the unpacked tree"; tail -20 "$TMP/build.log"
fi

# ---- the same tree with the file as committed: "unknown", never a wrong commit --------------------
git -C "$src" show HEAD:.git_archival.txt >/dev/null 2>&1 && git -C "$src" show HEAD:.git_archival.txt >"$TMP/committed" \
  || cp "$src/.git_archival.txt" "$TMP/committed"
cp "$TMP/committed" "$TMP/outer/rel/.git_archival.txt"
cmake -DSRC="$TMP/outer/rel" -DOUT="$TMP/info.h" -P "$TMP/outer/rel/cmake/build_info.cmake"
check "a plain copy (the file not filled in): NSA_BUILD_GIT_SHA \"unknown\"" grep -q '^#define NSA_BUILD_GIT_SHA "unknown"$' "$TMP/info.h"
finish
