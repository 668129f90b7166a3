#!/usr/bin/env bash
# tests/cli/bad_configs.sh — nsa-train rejects bad configs with a located message.
#
# Usage (from the source root): bash tests/cli/bad_configs.sh <build dir>
# For every line "<file> <expected>" of tests/bad_configs/EXPECTED, runs
#   <build>/nsa-train --config tests/bad_configs/<file> --check-config
# and requires exit status 2 and stderr containing "tests/bad_configs/<file>:<expected>"
# (the expectation starts with LINE:COL:, so position and message are checked as
# one string). Then bad `--set` overrides must fail naming the flag, the shipped
# configs must pass with exit 0, and a --check-config dump must load back to the
# same dump. One line per case, then "N passed, M failed". Skips (77) when
# nsa-train has not been built.
set -u
build=${1:?usage: bash tests/cli/bad_configs.sh <build dir>}
bin="$build/nsa-train"
if [ ! -x "$bin" ]; then
    echo "SKIP: $bin not built"
    exit 77
fi
dir=tests/bad_configs
[ -f "$dir/EXPECTED" ] || { echo "FAIL: run from the source root ($dir/EXPECTED not found)"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nsa_bad_configs.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() {
    echo "FAIL $1: $2"
    sed 's/^/    stderr: /' "$tmp/err"
    fail=$((fail + 1))
}

# expect_fail NAME SUBSTRING ARGS...: exit status 2, SUBSTRING in stderr.
expect_fail() {
    local name=$1 want=$2
    shift 2
    "$bin" "$@" --check-config >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" -ne 2 ]; then
        bad "$name" "exit status $rc, expected 2"
    elif ! grep -qF -- "$want" "$tmp/err"; then
        bad "$name" "stderr lacks: $want"
    else
        ok "$name"
    fi
}

# expect_pass NAME ARGS...: exit status 0, nothing on stderr.
expect_pass() {
    local name=$1
    shift
    "$bin" "$@" --check-config >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" -ne 0 ]; then
        bad "$name" "exit status $rc, expected 0"
    elif [ -s "$tmp/err" ]; then
        bad "$name" "unexpected stderr"
    else
        ok "$name"
    fi
}

# -- every bad config file, at its line:col -------------------------------------------
listed=" "
while read -r file want; do
    [ -n "$file" ] || continue
    listed="$listed$file "
    expect_fail "$file" "$dir/$file:$want" --config "$dir/$file"
done <"$dir/EXPECTED"
for f in "$dir"/*.json; do   # a bad config without an expectation would test nothing
    b=${f##*/}
    case "$listed" in
        *" $b "*) ;;
        *) : >"$tmp/err"; bad "$b" "no line in $dir/EXPECTED" ;;
    esac
done

# -- overrides: the message names the flag, not a file position --------------------------
cfg=configs/tiny.json
expect_fail set_range "--set nsa.w=0: nsa.w: expected a positive integer, got 0" \
    --config "$cfg" --set nsa.w=0
expect_fail set_type "--set model.dim=abc: model.dim: expected a positive integer, got string \"abc\"" \
    --config "$cfg" --set model.dim=abc
expect_fail set_unknown_key "--set model.dimm=64: model.dimm: unknown key 'dimm' in 'model'" \
    --config "$cfg" --set model.dimm=64
expect_fail set_unknown_section "--set optim.lr=1: optim.lr: unknown section 'optim'" \
    --config "$cfg" --set optim.lr=1
expect_fail set_malformed "--set train.lr: expected section.key=value" \
    --config "$cfg" --set train.lr
expect_fail set_relation "--set nsa.l=10: nsa.l: d (4) must divide l (10)" \
    --config "$cfg" --set nsa.l=10
expect_fail set_needs_path "--set data.kind=shards: data.kind: missing required key 'path' in 'data'" \
    --config "$cfg" --set data.kind=shards

# -- the shipped configs pass; overrides that are valid pass -----------------------------
expect_pass tiny --config configs/tiny.json
grep -qF '"name": "tiny"' "$tmp/out" || bad tiny_dump "--check-config output lacks the name"
expect_pass m7c_125m --config configs/m7c_125m.json
expect_pass tiny_overridden --config configs/tiny.json --set nsa.phi=mlp --set train.backend=cpu64 \
    --set train.checkpoint_layers=[0,2]
grep -qF '"precision": "fp64"' "$tmp/out" || bad tiny_overridden_dump "precision not resolved to fp64"

# -- a dump is a config: loading it gives the same dump ----------------------------------
"$bin" --config configs/m7c_125m.json --check-config >"$tmp/dump.json" 2>"$tmp/err"
expect_pass dump_reloads --config "$tmp/dump.json"
if cmp -s "$tmp/dump.json" "$tmp/out"; then ok dump_identical; else bad dump_identical "dump differs after reload"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
