#!/usr/bin/env bash
# tests/cli/harness_help.sh BUILD_DIR — every nsa-harness subcommand's options are one table
# (harness/cmd/<command>.c, harness/cmd/options.h) and its --help is made from it:
#  1. `help X`, `X --help` and `X -h` print the same text, exit 0, for run, list, validate,
#     show, baseline (and `baseline show --help`), compare, bisect;
#  2. that text names every option of the command's table (the rows read from the source),
#     and the options the commands have always taken (a row lost from a table fails here);
#  3. an unknown option, an abbreviation, --flag=VALUE and "--" are exit 2 naming the word;
#     an option without its value is exit 2 naming the option; a bad value is exit 2 naming
#     the option and the value; nothing of it on stdout.
set -u
build=${1:?usage: bash tests/cli/harness_help.sh <build dir>}
H="$build/nsa-harness"
[ -x "$H" ] || { echo "SKIP: $H not built"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, finish, has
SRC=${NSA_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}

# ---- 1. the three ways to ask ------------------------------------------------------------------
for c in run list validate show baseline compare bisect; do
  "$H" help "$c" >"$TMP/help_$c" 2>"$TMP/err"; rc=$?
  [ "$rc" = 0 ] && [ -s "$TMP/help_$c" ] && [ ! -s "$TMP/err" ] && ok "help $c: exit 0, on stdout" || bad "help $c: exit $rc"
  for h in --help -h; do
    "$H" "$c" "$h" >"$TMP/out" 2>&1; rc=$?
    [ "$rc" = 0 ] && cmp -s "$TMP/out" "$TMP/help_$c" && ok "$c $h: the same text" || bad "$c $h: exit $rc or another text"
  done
done
"$H" baseline show --help >"$TMP/out" 2>&1
check "baseline show --help: baseline's text" cmp -s "$TMP/out" "$TMP/help_baseline"

# ---- 2. every option of each table -------------------------------------------------------------
# the rows of a table: {"name", ... in the file's *_ROWS arrays, and the shared CMD_OPT_* rows
rows() {   # FILE ARRAY
  python3 - "$SRC/harness/cmd/$1" "$2" "$SRC/harness/cmd/options.h" <<'PY'
import re, sys
src, array, opts = open(sys.argv[1]).read(), sys.argv[2], open(sys.argv[3]).read()
body = src[src.index("static const CmdOption %s[] = {" % array):]
body = body[:body.index("\n};\n")]
shared = dict(re.findall(r'#define (CMD_OPT_\w+)\s*\\?\s*\{"([a-z-]+)"', opts))
names = re.findall(r'^    \{"([a-z-]+)",', body, re.M) + [shared[m] for m in re.findall(r"^    (CMD_OPT_\w+),", body, re.M)]
assert names, array
print("\n".join(names))
PY
}
lists_rows() {   # COMMAND FILE ARRAY
  local n=0 missing=""
  for name in $(rows "$2" "$3"); do
    n=$((n + 1))
    grep -q -- "--$name\b" "$TMP/help_$1" || missing="$missing --$name"
  done
  [ "$n" -gt 0 ] && [ -z "$missing" ] && ok "help $1 lists the $n options of $3" || bad "help $1 lacks:$missing (of $n)"
}
lists_rows run run.c RUN_ROWS
lists_rows list list.c LIST_ROWS
lists_rows validate validate.c VALIDATE_ROWS
lists_rows show show.c SHOW_ROWS
lists_rows baseline baseline.c RECORD_ROWS
lists_rows compare compare.c COMPARE_ROWS
lists_rows bisect bisect.c BISECT_ROWS
# the options the commands take, as users have typed them
names() {   # COMMAND OPTION...
  local c=$1 missing=""
  shift
  for o in "$@"; do grep -qF -- "$o" "$TMP/help_$c" || missing="$missing $o"; done
  [ -z "$missing" ] && ok "help $c names $*" || bad "help $c lacks:$missing"
}
names run "--profile ci|gpu" "--out DIR" "--filter GLOB" "--case SCENARIO/CASE" "--fault NAME[=ARG]" \
  "--set KEY=VALUE" "--timeout-scale X" "--trainer PATH" '--trainer-cmd "CMD"' "--trainer-map MAP" \
  "--baselines DIR" --recording --bisect "-j, --jobs N|auto" "--cases-per-gpu N|auto" --quiet "--help"
names list "--profile ci|gpu" --checks --tensors
names baseline "--profile ci|gpu" "--filter GLOB" "--case SCENARIO/CASE" "--set KEY=VALUE" "--repeat N" \
  "--warmup N" "--baselines DIR" "--out DIR" "--trainer PATH" "--trainer-map MAP" "--timeout-scale X" \
  "--commit SHA" "baseline show FILE|DIR"
names compare "--out FILE" "--plots DIR" "--loss-tol REL" "--time-tol REL" "--mem-tol REL" "--tensor-tol REL"
names bisect "--good REV" "--bad REV" "--repo DIR" "--out DIR" --no-verify --allow-dirty "--jobs N" \
  --keep-worktrees "--profile ci|gpu" "--set KEY=VALUE" --trainer-map
check "help run: the data folder in place of <home>" sh -c "! grep -q '<home>' '$TMP/help_run' && grep -q 'golden/baselines' '$TMP/help_run'"

# ---- 3. usage errors ------------------------------------------------------------------------------
usage() {   # LABEL MESSAGE ARGS...: exit 2, MESSAGE on stderr, nothing on stdout
  local label=$1 msg=$2
  shift 2
  "$H" "$@" >"$TMP/so" 2>"$TMP/se"; local rc=$?
  if [ "$rc" = 2 ] && grep -qF -- "$msg" "$TMP/se" && [ ! -s "$TMP/so" ]; then ok "$label"
  else bad "$label: exit $rc, stderr: $(head -c 300 "$TMP/se")"; fi
}
for c in run list validate show "baseline record" "baseline show"; do
  # shellcheck disable=SC2086
  usage "$c --bogus: unknown, named" "nsa-harness $c: unknown option '--bogus'" $c --bogus
done
usage "compare: unknown, named" "nsa-harness compare: unknown option '--bogus'" compare a b --bogus
usage "run: an abbreviation is unknown" "unknown option '--prof'" run --prof ci
usage "run: --flag=VALUE is unknown" "unknown option '--out=x'" run --out=x
usage "run: -- is unknown" "unknown option '--'" run -- x
usage "run: an unknown short form" "unknown option '-x'" run -x
usage "run --out: needs a value" "nsa-harness run: --out needs a value" run --out
usage "list --profile: needs a value" "nsa-harness list: --profile needs a value" list --profile
usage "baseline record --out: needs a value" "nsa-harness baseline record: --out needs a value" baseline record --out
usage "compare --mem-tol: needs a value" "nsa-harness compare: --mem-tol needs a value" compare a b --mem-tol
usage "bisect --good: needs a value" "nsa-harness bisect: --good needs a value" bisect --good
usage "run --jobs x: flag and value" "nsa-harness run: --jobs x: expected auto or a whole number from 1 to 1024" run --jobs x
usage "run -j0: flag and value" "nsa-harness run: -j 0: expected auto" run -j0
usage "run --profile xx: flag and value" "nsa-harness run: --profile xx: expected ci or gpu" run --profile xx
usage "run --set: flag and value" "nsa-harness run: --set 'foo': expected section.key=value" run --set foo
usage "run --timeout-scale: flag and value" "nsa-harness run: --timeout-scale 0: expected a number > 0" run --timeout-scale 0
usage "list --profile zz: flag and value" "nsa-harness list: --profile zz: expected ci or gpu" list --profile zz
usage "baseline record --repeat 0: flag and value" "nsa-harness baseline record: --repeat 0: expected a whole number from 1 to 100" \
  baseline record --repeat 0
usage "compare --loss-tol x: flag and value" "nsa-harness compare: --loss-tol 'x': expected a relative tolerance" compare a b --loss-tol x
usage "bisect --jobs 0: flag and value" "nsa-harness bisect: --jobs 0: expected a number from 1 to 1024" bisect --good a --bad b --jobs 0
usage "bisect --trainer: refused, named" "nsa-harness bisect: --trainer: bisect builds the trainer" bisect --good a --bad b --trainer x
usage "show: one report" "usage: nsa-harness show REPORT" show a b
usage "help nosuch" "nsa-harness help: no command 'nosuch'" help nosuch
usage "an unknown command" "nsa-harness: unknown command 'nosuch'" nosuch
finish
