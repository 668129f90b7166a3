#!/usr/bin/env bash
# tests/cli/layers.sh BUILD_DIR — no layer includes a layer above it (docs/architecture.md,
# "Layers"): every #include "..." of the product's C, C++ and CUDA sources, resolved as the
# compiler does (the including file's folder, then the source root), must land in a folder its
# layer may use:
#   common/   common/ only (it is the bottom: both programs link it);
#   kernels/  kernels/, common/;
#   trainer/  trainer/, kernels/ (the op table), common/, and the generated nsa_build_info.h;
#   harness/  harness/, common/ (the runner runs the trainer as processes, never links it).
# A planted include of trainer/ in harness/ must be caught (the check checks itself first).
set -u
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"
cat >"$TMP/layers.py" <<'PY'
import os, re, sys
root = sys.argv[1]
allowed = {"common": {"common"}, "kernels": {"kernels", "common"},
           "trainer": {"trainer", "kernels", "common"}, "harness": {"harness", "common"}}
generated = {"nsa_build_info.h"}
inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
bad = []
for layer in allowed:
    for d, _, files in os.walk(os.path.join(root, layer)):
        for f in files:
            if not f.endswith((".c", ".h", ".cu", ".cuh")): continue
            path = os.path.join(d, f)
            for name in inc.findall(open(path, errors="replace").read()):
                if name in generated and layer == "trainer": continue
                cand = [os.path.normpath(os.path.join(d, name)), os.path.normpath(os.path.join(root, name))]
                hit = next((c for c in cand if os.path.exists(c)), None)
                if not hit:
                    bad.append("%s: #include \"%s\" resolves to no file" % (os.path.relpath(path, root), name)); continue
                top = os.path.relpath(hit, root).split(os.sep)[0]
                if top not in allowed[layer]:
                    bad.append("%s includes %s: %s/ may use %s only" % (os.path.relpath(path, root), os.path.relpath(hit, root),
                               layer, ", ".join(sorted(allowed[layer]))))
print("\n".join(bad) if bad else "every include within its layer's reach")
sys.exit(1 if bad else 0)
PY
# the check itself: a copy of harness/ and common/ with one planted upward include
mkdir -p "$TMP/tree"
cp -r harness common "$TMP/tree/"
mkdir -p "$TMP/tree/trainer" && cp trainer/model.h "$TMP/tree/trainer/"
echo '#include "trainer/model.h"' >>"$TMP/tree/harness/scenario.c"
python3 "$TMP/layers.py" "$TMP/tree" >"$TMP/planted" 2>&1
check "a planted #include of trainer/ in harness/ is caught, naming the file" \
  sh -c "! python3 '$TMP/layers.py' '$TMP/tree' >/dev/null 2>&1 && grep -q 'harness/scenario.c includes trainer/model.h' '$TMP/planted'"
check "the source tree: no layer includes a layer above it" python3 "$TMP/layers.py" "$(pwd)"
finish
