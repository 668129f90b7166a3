#!/usr/bin/env bash
# tests/cli/contributing_paths.sh [BUILD_DIR] — keeps docs/contributing.md true to the code:
#  1. every `file: symbol` reference names a file that exists and holds that symbol
#     (as a whole word; "CPU_FN(cpu_backend)" and "struct Backend" as written);
#  2. every other backticked repository path (a name with a '/' that starts with one of
#     the project's folders) exists: a file, a folder, or a glob that matches.
# A moved file or a renamed table fails here, not in a reader's hands.
# (BUILD_DIR is accepted for ctest's uniform call and not used.)
set -u
cd "$(dirname "$0")/../.."
. tests/cli/lib/common.sh
DOC=docs/contributing.md
[ -f "$DOC" ] || { bad "$DOC exists"; finish; }
refs=$(grep -o '`[^`]*`' "$DOC" | tr -d '`' | sort -u)
n_sym=0 n_path=0
while IFS= read -r r; do
  [ -n "$r" ] || continue
  if [[ "$r" =~ ^([A-Za-z0-9_./*-]+/[A-Za-z0-9_.*-]+):\ (.+)$ ]]; then
    f=${BASH_REMATCH[1]} sym=${BASH_REMATCH[2]}
    n_sym=$((n_sym + 1))
    if [ ! -f "$f" ]; then bad "$r: no file $f"
    elif grep -qF -- "$sym" "$f" && grep -qw -- "${sym##* }" "$f"; then ok "$r"
    else bad "$r: $f does not hold '$sym'"; fi
  elif [[ "$r" =~ ^(common|kernels|trainer|harness|tests|scenarios|docs|bench|golden|tools|configs)/[A-Za-z0-9_./*-]*$ ]]; then
    n_path=$((n_path + 1))
    # shellcheck disable=SC2086  # a glob is meant to expand
    if compgen -G "$r" >/dev/null || [ -e "$r" ]; then ok "$r exists"; else bad "$r: no such file or folder"; fi
  fi
done <<<"$refs"
[ "$n_sym" -ge 10 ] && ok "$n_sym symbol references checked" || bad "symbol references found: $n_sym (the parser missed them?)"
[ "$n_path" -ge 10 ] && ok "$n_path paths checked" || bad "paths found: $n_path"
finish
