#!/usr/bin/env bash
# tests/cli/dump_tensors.sh BUILD_DIR — the step-1 dump holds only the tensors the checks read:
#  1. nsa-train --dump-step F --dump-tensors 'grads.*': every gradient, bitwise those of a full
#     dump, and no logits; --dump-tensors logits: the logits bitwise, no gradient; inputs,
#     targets, loss and the metadata always; a list of two globs selects both;
#  2. --dump-tensors without --dump-step, or empty: exit 2 naming the flag; --protocol-info lists
#     the diagnostic dump_tensors;
#  3. nsa-harness asks for exactly the tensors its dump_match checks compare: prefill_step5's
#     cases are run with --dump-tensors logits and still PASS; a golden_regression case (it reads
#     the whole dump) gets a full dump and no --dump-tensors.
set -u
BUILD=${1:?usage: dump_tensors.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
H="$BUILD/nsa-harness"
T="$BUILD/nsa-train"
[ -x "$H" ] && [ -x "$T" ] || { echo "SKIP: nsa-harness or nsa-train not built in $BUILD"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"

cat >"$TMP/st.py" <<'EOF'
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}, h.get("__metadata__", {})
# st.py FULL PART MUST_HAVE_GLOB MUST_NOT_HAVE_GLOB: PART's tensors are FULL's, bitwise
import fnmatch
full, _ = load(sys.argv[1])
part, meta = load(sys.argv[2])
want, unwanted = sys.argv[3].split(","), sys.argv[4]
bad = [k for k in part if part[k] != full.get(k)]
missing = [k for k in full if any(fnmatch.fnmatch(k, g) for g in want + ["inputs", "targets", "loss"]) and k not in part]
extra = [k for k in part if fnmatch.fnmatch(k, unwanted)]
if "param_digests" not in meta or "config" not in meta: bad.append("metadata")
print("%d tensors of %d, differ %s, missing %s, unwanted %s" % (len(part), len(full), bad[:3], missing[:3], extra[:3]))
sys.exit(bool(bad or missing or extra) or len(part) < 4)
EOF
tr() { "$T" --config configs/tiny.json --set train.steps=2 --quiet --out "$TMP/$1" "${@:2}"; }
tr full --dump-step "$TMP/full.st" >/dev/null 2>&1
tr grads --dump-step "$TMP/grads.st" --dump-tensors 'grads.*' >/dev/null 2>&1
tr logits --dump-step "$TMP/logits.st" --dump-tensors logits >/dev/null 2>&1
tr two --dump-step "$TMP/two.st" --dump-tensors 'logits,grads.blocks.0.*' >/dev/null 2>&1
check "--dump-tensors 'grads.*': every gradient bitwise, no logits" python3 "$TMP/st.py" "$TMP/full.st" "$TMP/grads.st" 'grads.*' logits
check "--dump-tensors logits: the logits bitwise, no gradient" python3 "$TMP/st.py" "$TMP/full.st" "$TMP/logits.st" logits 'grads.*'
check "--dump-tensors 'logits,grads.blocks.0.*': both, nothing of layer 1" python3 "$TMP/st.py" "$TMP/full.st" "$TMP/two.st" \
  'logits,grads.blocks.0.*' 'grads.blocks.1.*'
check "... the selected dump is smaller" test "$(stat -c %s "$TMP/grads.st")" -lt "$(stat -c %s "$TMP/full.st")"

expect_exit "--dump-tensors without --dump-step is a usage error" 2 tr bad1 --dump-tensors logits
check "... naming it" has "$TMP/out" "nsa-train: --dump-tensors logits selects the step dump's tensors: it needs --dump-step FILE"
expect_exit "--dump-tensors '' is a usage error" 2 tr bad2 --dump-step "$TMP/x.st" --dump-tensors ''
check "... naming it" has "$TMP/out" "nsa-train: --dump-tensors '': expected comma-separated globs"
check "--protocol-info lists dump_tensors" sh -c "'$T' --protocol-info | grep -q '\"dump_tensors\"'"

expect_exit "prefill_step5 (ci) through the harness" 0 "$H" run scenarios/prefill_step5.json --profile ci --out "$TMP/pf" --quiet
check "... its cases ran with --dump-tensors logits" grep -q -- "--dump-tensors logits" "$TMP/pf/prefill_step5/prefill=sequential/output.log"
check "... the dump holds the logits and no gradient" python3 - "$TMP/pf/prefill_step5/prefill=sequential/step1.safetensors" <<'EOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
sys.exit(not ("logits" in h and not any(k.startswith("grads.") for k in h)))
EOF
expect_exit "a golden_regression case through the harness" 0 "$H" run scenarios/golden_regression.json --profile ci \
  --filter variant=base --out "$TMP/gold" --quiet
check "... ran without --dump-tensors (golden reads the whole dump)" \
  sh -c "! grep -q -- --dump-tensors '$TMP/gold/golden_regression/variant=base/output.log'"
finish
