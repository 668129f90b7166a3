#!/usr/bin/env bash
# tests/cli/layers.sh BUILD_DIR — no layer includes a layer above it (docs/architecture.md,
# "Layers"; harness/README.md): every #include "..." of the product's C, C++ and CUDA sources,
# resolved as the compiler does (the including file's folder, then the source root), must land
# in a folder its layer may use:
#   common/   common/ only (it is the bottom: both programs link it);
#   kernels/  kernels/, common/;
#   trainer/  trainer/, kernels/ (the op table), common/, and the generated nsa_build_info.h;
#   harness/  harness/, common/ (the runner runs the trainer as processes, never links it).
# Inside harness/ the runner's own layers, lowest first: artifacts/, core/, report/, exec/,
# checks/, families/, cmd/, then harness/main.c (the table of subcommands). A file of one of
# them includes its own folder, a lower one and common/ only.
# No two of the runner's files include each other, directly or around a loop (a.c includes b.h
# and b.c includes a.h), within a layer too; nor two of the trainer's. A check or a family is the file of harness/checks/
# or harness/families/ named as its key, and listed in its folder's table.
# Planted includes must be caught (the check checks itself first): trainer/ from harness/, a
# harness layer reaching up (core/ including exec/, exec/ including checks/), and a circle in
# each of harness/ and trainer/.
set -u
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"
cat >"$TMP/layers.py" <<'PY'
import os, re, sys
root = sys.argv[1]
allowed = {"common": {"common"}, "kernels": {"kernels", "common"},
           "trainer": {"trainer", "kernels", "common"}, "harness": {"harness", "common"}}
# the runner's layers, lowest first; a file directly in harness/ (main.c) is above them all
harness_layers = ["artifacts", "core", "report", "exec", "checks", "families", "cmd"]
generated = {"nsa_build_info.h"}
inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
def harness_rank(rel):   # rel: a path under the source root, in harness/
    parts = rel.split(os.sep)
    if len(parts) == 2: return len(harness_layers)           # harness/main.c
    return harness_layers.index(parts[1]) if parts[1] in harness_layers else None
bad = []
for layer in allowed:
    for d, _, files in os.walk(os.path.join(root, layer)):
        for f in files:
            if not f.endswith((".c", ".h", ".cu", ".cuh")): continue
            path = os.path.join(d, f)
            rel = os.path.relpath(path, root)
            if layer == "harness" and harness_rank(rel) is None:
                bad.append("%s: harness/%s is no layer of the runner (%s)" % (rel, rel.split(os.sep)[1],
                           ", ".join(harness_layers))); continue
            for name in inc.findall(open(path, errors="replace").read()):
                if name in generated and layer == "trainer": continue
                cand = [os.path.normpath(os.path.join(d, name)), os.path.normpath(os.path.join(root, name))]
                hit = next((c for c in cand if os.path.exists(c)), None)
                if not hit:
                    bad.append("%s: #include \"%s\" resolves to no file" % (rel, name)); continue
                hrel = os.path.relpath(hit, root)
                top = hrel.split(os.sep)[0]
                if top not in allowed[layer]:
                    bad.append("%s includes %s: %s/ may use %s only" % (rel, hrel, layer, ", ".join(sorted(allowed[layer]))))
                elif layer == "harness" and top == "harness":
                    me, it = harness_rank(rel), harness_rank(hrel)
                    if it is None or it > me:
                        reach = harness_layers[:me + 1] if me < len(harness_layers) else harness_layers
                        bad.append("%s includes %s: a layer above it (%s may use %s and common/ only)" % (
                                   rel, hrel, os.path.dirname(rel) + "/", ", ".join("harness/%s/" % l for l in reach)))
# no circle of includes between the runner's files, nor between the trainer's: a.c or a.h
# including b.h and b.c or b.h including a.h, directly or around a longer loop, even within one
# layer (the model reaches fault injection through its hooks table, not faults.h)
graph = {}
for top in ("harness", "trainer"):
    for d, _, files in os.walk(os.path.join(root, top)):
        for f in files:
            if not f.endswith((".c", ".h")): continue
            path = os.path.join(d, f)
            mod = os.path.relpath(path, root)[:-2]
            for name in inc.findall(open(path, errors="replace").read()):
                if name.startswith(top + "/") and name.endswith(".h") and name[:-2] != mod:
                    graph.setdefault(mod, set()).add(name[:-2])
state = {}
def visit(m, trail):
    state[m] = 1
    for n in sorted(graph.get(m, ())):
        if state.get(n) == 1:
            loop = trail[trail.index(n):] + [n]
            bad.append("include circle: %s" % " -> ".join(loop))
        elif n not in state:
            visit(n, trail + [n])
    state[m] = 2
for m in sorted(graph):
    if m not in state: visit(m, [m])
# the plug-ins: a check or a family is one file of harness/checks/ or harness/families/ named
# as its key, defining `const CheckDef check_KEY` / `const FamilyDef family_KEY` with
# .name = "KEY", listed in its folder's table (checks.c: CHECKS, families.c: FAMILIES)
plugin = re.compile(r'^const (CheckDef|FamilyDef) (check|family)_(\w+) = \{(.*?)^\};', re.M | re.S)
for folder, table in (("checks", "checks.c"), ("families", "families.c")):
    d = os.path.join(root, "harness", folder)
    if not os.path.isdir(d): continue
    listed = open(os.path.join(d, table), errors="replace").read() if os.path.exists(os.path.join(d, table)) else ""
    for f in sorted(os.listdir(d)):
        if not f.endswith(".c"): continue
        for kind, prefix, key, body in plugin.findall(open(os.path.join(d, f), errors="replace").read()):
            rel = "harness/%s/%s" % (folder, f)
            if f != key + ".c":
                bad.append("%s defines %s_%s: a %s is the file named as its key (harness/%s/%s.c)" % (
                           rel, prefix, key, prefix, folder, key))
            if '.name = "%s"' % key not in body:
                bad.append('%s: %s_%s must have .name = "%s"' % (rel, prefix, key, key))
            if "&%s_%s" % (prefix, key) not in listed:
                bad.append("%s: %s_%s is not listed in harness/%s/%s" % (rel, prefix, key, folder, table))
print("\n".join(bad) if bad else "every include within its layer's reach, no include circles; "
      "every check and family in the file named as its key, listed")
sys.exit(1 if bad else 0)
PY
# plant INCLUDE FILE: a copy of harness/, common/ and trainer/model.h with INCLUDE appended to
# FILE (under harness/); the check must fail and name FILE and the included header
plant() {
  rm -rf "$TMP/tree" && mkdir -p "$TMP/tree/trainer"
  cp -r harness common "$TMP/tree/" && cp trainer/model.h "$TMP/tree/trainer/"
  echo "#include \"$1\"" >>"$TMP/tree/$2"
  ! python3 "$TMP/layers.py" "$TMP/tree" >"$TMP/planted" 2>&1 && grep -q "^$2 includes $1" "$TMP/planted"
}
check "a planted #include of trainer/ in harness/ is caught, naming the file" \
  plant trainer/model.h harness/core/scenario.c
check "a planted #include of harness/exec/ in harness/core/ is caught (a layer above it)" \
  plant harness/exec/runner.h harness/core/scenario.c
check "a planted #include of harness/checks/ in harness/exec/ is caught" \
  plant harness/checks/baseline_lookup.h harness/exec/runner.c
check "a planted #include of harness/cmd/ in harness/report/ is caught" \
  plant harness/cmd/commands.h harness/report/report.h
circle() {
  rm -rf "$TMP/tree" && mkdir -p "$TMP/tree" && cp -r harness common "$TMP/tree/"
  echo '#include "harness/core/check.h"' >>"$TMP/tree/harness/core/result.c"
  ! python3 "$TMP/layers.py" "$TMP/tree" >"$TMP/planted" 2>&1 && grep -q "^include circle: .*harness/core/result" "$TMP/planted"
}
check "a planted include circle within a layer (core/result.c including core/check.h) is caught" circle
trainer_circle() {
  rm -rf "$TMP/tree" && mkdir -p "$TMP/tree" && cp -r trainer common kernels "$TMP/tree/"
  echo '#include "trainer/faults.h"' >>"$TMP/tree/trainer/model.c"
  ! python3 "$TMP/layers.py" "$TMP/tree" >"$TMP/planted" 2>&1 &&
    grep -q "^include circle: .*trainer/faults -> trainer/model\|^include circle: .*trainer/model -> trainer/faults" "$TMP/planted"
}
check "a planted trainer circle (the model including faults.h, which includes model.h) is caught" trainer_circle
misnamed() {
  rm -rf "$TMP/tree" && mkdir -p "$TMP/tree" && cp -r harness common "$TMP/tree/"
  mv "$TMP/tree/harness/checks/growth.c" "$TMP/tree/harness/checks/trend.c"
  ! python3 "$TMP/layers.py" "$TMP/tree" >"$TMP/planted" 2>&1 &&
    grep -q "^harness/checks/trend.c defines check_growth: a check is the file named as its key" "$TMP/planted"
}
check "a check in a file not named as its key is caught" misnamed
check "the source tree: no layer includes a layer above it, no include circles, plug-ins named as their keys" python3 "$TMP/layers.py" "$(pwd)"
finish
