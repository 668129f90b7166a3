#!/usr/bin/env bash
# bench/peers/stage.sh DEST [--flash-nsa GITDIR[@REV]] [--nsa-triton GITDIR[@REV]]
#
# Exports the Python package of each public NSA implementation that bench_peers.py
# compares with ours from a git snapshot of its repository (a bare git directory or a
# clone; `git archive`, nothing is modified) into DEST, so DEST can be carried to the
# GPU machine. DEST lives in this repository but is never committed: when it is inside
# the work tree and not ignored yet, its path is added to .git/info/exclude.
#
#   DEST/flash_nsa/flash_nsa/...                 mdy666/Scalable-Flash-Native-Sparse-Attention
#   DEST/nsa_triton/native_sparse_attention/...  XunhaoLai/native-sparse-attention-triton
#   DEST/PEERS.txt   one line per peer: name, commit sha, commit date, origin, source
#
# Only the package folder (plus README.md and LICENSE) is exported: a few hundred KiB.
# Defaults are the snapshots this workplace fetched (override with the flags, or with
# FLASH_NSA_GIT / NSA_TRITON_GIT; REV defaults to HEAD).
set -euo pipefail
usage() { echo "usage: stage.sh DEST [--flash-nsa GITDIR[@REV]] [--nsa-triton GITDIR[@REV]]" >&2; exit 2; }
[ $# -ge 1 ] || usage
dest=$1; shift
fn=${FLASH_NSA_GIT:-/work/.mirror/mdy666+Scalable-Flash-Native-Sparse-Attention/repo}
nt=${NSA_TRITON_GIT:-/work/.mirror/XunhaoLai+native-sparse-attention-triton/repo}
while [ $# -gt 0 ]; do
  case $1 in
    --flash-nsa) [ $# -ge 2 ] || usage; fn=$2; shift 2 ;;
    --nsa-triton) [ $# -ge 2 ] || usage; nt=$2; shift 2 ;;
    *) echo "stage.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
case $dest in ''|/|.) echo "stage.sh: DEST '$dest' is not a folder of its own" >&2; exit 2 ;; esac

# keep DEST out of git when it is inside this work tree
top=$(git rev-parse --show-toplevel 2>/dev/null || true)
mkdir -p "$dest"
adest=$(cd "$dest" && pwd -P)
if [ -n "$top" ]; then
  atop=$(cd "$top" && pwd -P)
  case $adest/ in
    "$atop"/*)
      rel=${adest#"$atop"/}
      if ! git -C "$top" check-ignore -q "$rel/PEERS.txt"; then
        ex=$(git -C "$top" rev-parse --git-common-dir)
        case $ex in /*) ;; *) ex=$top/$ex ;; esac
        mkdir -p "$ex/info"
        echo "/$rel/" >> "$ex/info/exclude"
        echo "stage.sh: added /$rel/ to $ex/info/exclude"
      fi ;;
    *) echo "stage.sh: note: $adest is outside the work tree; carry only takes paths inside it" >&2 ;;
  esac
fi

# export NAME GITSPEC PKG ORIGIN: GITSPEC is GITDIR[@REV]
export_peer() {
  local name=$1 spec=$2 pkg=$3 origin=$4 gd rev sha date
  gd=${spec%@*}; rev=HEAD
  [ "$gd" != "$spec" ] && rev=${spec##*@}
  if ! sha=$(git --git-dir="$gd" rev-parse --verify -q "$rev^{commit}" 2>/dev/null); then
    # a clone with a work tree: its git directory is GITDIR/.git
    if [ -d "$gd/.git" ] && sha=$(git --git-dir="$gd/.git" rev-parse --verify -q "$rev^{commit}"); then
      gd=$gd/.git
    else
      echo "stage.sh: $name: '$spec' is no git snapshot with commit '$rev'" >&2; return 1
    fi
  fi
  date=$(git --git-dir="$gd" show -s --format=%cI "$sha")
  git --git-dir="$gd" cat-file -e "$sha:$pkg" 2>/dev/null ||
    { echo "stage.sh: $name: commit $sha has no folder $pkg/" >&2; return 1; }
  rm -rf "${adest:?}/$name"
  mkdir -p "$adest/$name"
  local extra=()
  for f in README.md LICENSE; do git --git-dir="$gd" cat-file -e "$sha:$f" 2>/dev/null && extra+=("$f"); done
  git --git-dir="$gd" archive --format=tar "$sha" "$pkg" "${extra[@]}" | tar -x -C "$adest/$name"
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$sha" "$date" "$origin" "$gd" >> "$adest/PEERS.txt.new"
  echo "stage.sh: $name: $origin @ ${sha:0:12} ($date) -> $adest/$name/$pkg ($(find "$adest/$name" -name '*.py' | wc -l) .py files)"
}

rm -f "$adest/PEERS.txt.new"
printf '# name\tcommit\tdate\torigin\tsource\n' > "$adest/PEERS.txt.new"
rc=0
export_peer flash_nsa "$fn" flash_nsa mdy666/Scalable-Flash-Native-Sparse-Attention || rc=1
export_peer nsa_triton "$nt" native_sparse_attention XunhaoLai/native-sparse-attention-triton || rc=1
mv "$adest/PEERS.txt.new" "$adest/PEERS.txt"
echo "stage.sh: $(du -sk "$adest" | cut -f1) KiB in $adest; carry it with the build folder (run's carry: [\"${rel:-$dest}\", ...])"
exit $rc
