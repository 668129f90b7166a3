# tests/cli/lib/showcase.sh — what the tests of the example trainer under the harness share
# (showcase_trainer.sh, showcase_bugs.sh); sourced after lib/common.sh with `build` (the build
# folder) and `root` (the repository) set. SKIPs (exit 77) without a python with torch and
# PyYAML; then runs from the repository root with a temporary folder TMP, removed at exit, and
# every bug of the example trainer off (SHOWCASE_BUGS unset).
torch_python_or_skip yaml
cd "$root"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
H=$build/nsa-harness
MAP=examples/showcase/showcase.map.json
unset SHOWCASE_BUGS
# run NAME [nsa-harness run args...]: a run into $TMP/NAME (console in $TMP/NAME.out)
run() { local n=$1; shift; "$H" run "$@" --trainer-map "$MAP" --out "$TMP/$n" >"$TMP/$n.out" 2>&1; echo $? >"$TMP/$n.rc"; }
res() { cat "$TMP/$1/RESULTS.md"; }
line() { grep -F -- "$2" "$TMP/$1.out"; }   # the console line of a case
