#!/usr/bin/env bash
# tests/cli/train_help.sh — nsa-train's flags and --help come from one table
# (trainer/train_flags.c: TRAIN_FLAGS):
#   - --help lists every flag of the table, each once, and no other;
#   - every flag --help lists is one the parser takes: a flag with a value, given last, is
#     "--flag needs a value"; a switch is not an unknown option;
#   - a flag only by its full name, its value as the next word: an abbreviation, --flag=VALUE,
#     a short form other than -h, "--" and a plain word are unknown options, exit 2 naming them;
#   - a bad value is exit 2 with one line naming the flag and the value.
# Usage: bash tests/cli/train_help.sh <build dir>  (from the repo root)
set -u
BUILD=${1:?usage: train_help.sh <build dir>}
BIN="$BUILD/nsa-train"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. tests/cli/lib/common.sh
# expect_err NAME RC TEXT CMD...: CMD exits RC and its stderr is one line holding TEXT
expect_err() { local name=$1 want=$2 text=$3; shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
  if [ "$rc" = "$want" ] && [ "$(grep -c . "$TMP/err")" = 1 ] && has "$TMP/err" "$text"; then ok "$name (exit $rc)"
  else bad "$name: exit $rc, want $want and one line with: $text"; head -3 "$TMP/err" | sed 's/^/    /'; fi; }
CFG=configs/tiny.json

# ---- --help against the table ------------------------------------------------------------
expect_exit "--help" 0 "$BIN" --help
"$BIN" --help >"$TMP/help" 2>/dev/null
check "-h is --help" bash -c '"$1" -h | cmp -s - "$2"' _ "$BIN" "$TMP/help"
# the table's names: the rows {"name", ARG, FLAG_..., of trainer/train_flags.c
grep -oE '^ *\{"[a-z0-9-]+", ("[^"]*"|NULL), FLAG_' trainer/train_flags.c | sed -E 's/^ *\{"([^"]+)".*/\1/' | sort >"$TMP/table"
# a flag's line: two spaces, the flag, then its value's name or its text (not a comma: the
# paragraph on path flags starts a line with one too)
grep -oE '^  --[a-z0-9-]+( |$)' "$TMP/help" | sed 's/^  --//; s/ $//' | sort >"$TMP/listed"
check "the table has the flags (parsed: $(wc -l <"$TMP/table"))" test "$(wc -l <"$TMP/table")" -ge 30
check "--help lists every flag of the table, once, and no other" cmp -s "$TMP/table" "$TMP/listed"
cmp -s "$TMP/table" "$TMP/listed" || diff "$TMP/table" "$TMP/listed" | sed 's/^/    /'
check "--help's lines end by column 110" bash -c '! grep -qE "^.{111}" "$1"' _ "$TMP/help"

# ---- every listed flag is one the parser takes ---------------------------------------------
while read -r flag arg; do
  if [ -n "$arg" ]; then
    expect_err "--$flag $arg: given last, it needs a value" 2 "nsa-train: --$flag needs a value (see --help)" "$BIN" "--$flag"
  else
    # a switch, then a word that is no flag: parsed in order, the switch is taken (a switch
    # that answers at once -- --help, --list-faults, ... -- exits before the second word)
    "$BIN" "--$flag" --no-such-flag-xyz >"$TMP/out" 2>"$TMP/err" </dev/null
    check "--$flag: taken as a flag" bash -c '! grep -q "unknown option '"'"'--$1'"'"'" "$2"' _ "$flag" "$TMP/err"
  fi
done < <(grep -E '^  --[a-z0-9-]+( |$)' "$TMP/help" | sed -E 's/^  --([a-z0-9-]+)( ([^ ]+))?.*/\1 \3/' |
         awk '{ if ($2 ~ /^[A-Z]/) print $1, $2; else print $1 }')

# ---- unknown flags: exit 2 naming them -----------------------------------------------------
expect_err "unknown flag" 2 "nsa-train: unknown option '--frobnicate' (see --help)" "$BIN" --config $CFG --frobnicate
expect_err "an abbreviation is unknown" 2 "unknown option '--conf'" "$BIN" --conf $CFG
expect_err "--flag=VALUE is unknown" 2 "unknown option '--steps=3'" "$BIN" --config $CFG --steps=3
expect_err "a short form other than -h is unknown" 2 "unknown option '-c'" "$BIN" -c $CFG
expect_err "-h with more letters is unknown" 2 "unknown option '-hx'" "$BIN" -hx
expect_err "'--' is unknown" 2 "unknown option '--'" "$BIN" --config $CFG --
expect_err "a plain word is unknown" 2 "unknown option 'extra'" "$BIN" --config $CFG extra
expect_err "flags are read in order: the unknown one first" 2 "unknown option '--bogus'" "$BIN" --bogus --threads 0
expect_err "a value is the next word, whatever it looks like (--set --steps=2: an override)" 2 \
  "--set --steps=2: --steps: unknown key '--steps'" "$BIN" --config $CFG --set --steps=2 --check-config

# ---- bad values: exit 2, one line naming the flag and the value ---------------------------
expect_err "--threads 0" 2 "nsa-train: --threads 0: expected a whole number from 1 to 1024" "$BIN" --config $CFG --threads 0
expect_err "--save-every x" 2 "nsa-train: --save-every x: expected a non-negative integer" "$BIN" --config $CFG --save-every x
expect_err "--stop-after -1" 2 "nsa-train: --stop-after -1: expected a non-negative integer" "$BIN" --config $CFG --stop-after -1
expect_err "--rank 1x" 2 "nsa-train: --rank 1x: expected a non-negative integer" "$BIN" --config $CFG --rank 1x
expect_err "--transport tcp" 2 "nsa-train: --transport tcp: expected none, mpi or nccl" "$BIN" --config $CFG --transport tcp
expect_err "--bootstrap torchrun" 2 "nsa-train: --bootstrap torchrun: expected auto, mpi, env or slurm" "$BIN" --bootstrap torchrun
expect_err "--comm-timeout 0" 2 "nsa-train: --comm-timeout 0: expected a number of seconds > 0" "$BIN" --config $CFG --comm-timeout 0
expect_err "--rdzv-timeout 1e9" 2 "nsa-train: --rdzv-timeout 1e9: expected a number of seconds > 0" "$BIN" --config $CFG --rdzv-timeout 1e9
expect_err "--fault nosuch" 2 "nsa-train: --fault nosuch: unknown fault" "$BIN" --config $CFG --fault nosuch
expect_err "--steps x (the config loader's message)" 2 "--set train.steps=x: train.steps: expected a positive integer" "$BIN" --config $CFG --steps x
expect_err "NSA_COMM_TIMEOUT=abc" 2 "nsa-train: NSA_COMM_TIMEOUT=abc: expected a number of seconds > 0" env NSA_COMM_TIMEOUT=abc "$BIN" --config $CFG --check-config
finish
