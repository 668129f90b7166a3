#!/usr/bin/env bash
# tests/cli/dump_match_first.sh BUILD_DIR — the dump_match check names the FIRST differing
# tensor in the order a step computes them (the forward's tensors in forward order — tok_emb,
# blocks.0 ..., norm_f, lm_head, logits — then the gradients in backward order: lm_head,
# norm_f, blocks.L-1 ... blocks.0 with the MLP before the attention, tok_emb) with its layer
# and branch, the worst tensor, and the stated tolerance (the cross-trainer
# comparison's localisation; harness/artifacts/locus.h says why gradients go in backward order).
#
# A wrapper trainer runs nsa-train and then edits the step-1 dump of cases b, c and e, so the
# differences are known exactly. The cases differ only in train.lr (a = 0.5, b = 0.25,
# c = 0.125, d = 0.0625, e = 0.03125), which step 1's gradients do not depend on (one step
# from the init); the check compares logits and grads.* with tolerance 1e-4:
#   b: grads.blocks.1.mlp.up_proj.weight      relative 1e-7 (under the tolerance: not named)
#      grads.blocks.1.attn.k_proj_sel.weight  relative 1e-2  <- the first (layer 1 before 0)
#      grads.blocks.1.attn.q_proj.weight      relative 2e-2  (q after the branches in backward)
#      grads.blocks.0.mlp.down_proj.weight    relative 0.5   <- the worst
#      grads.tok_emb.weight                   relative 0.3
#   c: grads.blocks.0.attn.gate.fc2.weight    relative 1e-3
#      grads.blocks.0.mlp.up_proj.weight      relative 0.4   <- first: the MLP's backward runs
#                                                               before the attention's (the
#                                                               file holds the gate first)
#   e: logits                                 relative 1e-3  <- first: the forward precedes
#      grads.blocks.1.mlp.down_proj.weight    relative 0.5      every gradient
# Case a (the reference) and a clean case d (no edit) must PASS with no false alarm.
# A reference glob may match one case per value of the other axes ("v=0.5,*" over a phi axis):
# each case compares with the reference of its own phi (labels first, then the name's
# prefix); a glob that leaves a case equally close to two references is a validation error.
# A tolerance may be given per case (an object of case globs, first match wins).
set -u
BUILD=${1:?usage: dump_match_first.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
H="$BUILD/nsa-harness"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, has, finish

cat >"$TMP/edit.py" <<'PY'
# edit.py DUMP NAME=REL...: add REL * max|tensor| to element 3 of each named F32 tensor
import json, struct, sys
path = sys.argv[1]
raw = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n]); base = 8 + n
for arg in sys.argv[2:]:
    name, rel = arg.rsplit("=", 1)
    t = hdr[name]; assert t["dtype"] == "F32", name
    b, e = t["data_offsets"]
    vals = struct.unpack("<%df" % ((e - b) // 4), raw[base + b:base + e])
    m = max(abs(v) for v in vals)
    struct.pack_into("<f", raw, base + b + 12, vals[3] + float(rel) * m)
open(path, "wb").write(raw)
PY
REAL="$BUILD/nsa-train"
cat >"$TMP/trainer" <<EOF
#!/usr/bin/env bash
# nsa-train, then the dump of case b or c edited (see dump_match_first.sh)
"$REAL" "\$@"; rc=\$?
dump=""; name=""; prev=""
for a in "\$@"; do
  [ "\$prev" = --dump-step ] && dump=\$a
  case "\$a" in train.lr=*) name=\${a#train.lr=} ;; esac
  prev=\$a
done
if [ -n "\$dump" ] && [ -f "\$dump" ]; then
  case "\$name" in
    0.25) python3 "$TMP/edit.py" "\$dump" grads.blocks.1.mlp.up_proj.weight=1e-7 grads.blocks.1.attn.k_proj_sel.weight=1e-2 \
         grads.blocks.1.attn.q_proj.weight=2e-2 grads.blocks.0.mlp.down_proj.weight=0.5 grads.tok_emb.weight=0.3 ;;
    0.125) python3 "$TMP/edit.py" "\$dump" grads.blocks.0.attn.gate.fc2.weight=1e-3 grads.blocks.0.mlp.up_proj.weight=0.4 ;;
    0.03125) python3 "$TMP/edit.py" "\$dump" logits=1e-3 grads.blocks.1.mlp.down_proj.weight=0.5 ;;
  esac
fi
exit \$rc
EOF
chmod +x "$TMP/trainer"
cat >"$TMP/scn.json" <<EOF
{
  "name": "dump_first",
  "description": "four copies of one case; b and c with edited gradient dumps",
  "family": "branch_isolation",
  "config": "$PWD/configs/tiny.json",
  "overrides": {"train.steps": 1},
  "profiles": {"ci": {}},
  "run": {"timeout_s": 120},
  "matrix": {"v": {"key": "train.lr", "values": [0.5, 0.25, 0.125, 0.0625, 0.03125]}},
  "checks": [
    {"check": "dump_match", "reference": "v=0.5", "tensors": ["logits", "grads.*"], "tolerance": 1e-4}
  ]
}
EOF
"$H" run "$TMP/scn.json" --trainer "$TMP/trainer" --out "$TMP/r" >"$TMP/run.out" 2>&1
rc=$?
check "exit 1: three cases FAIL (exit $rc)" test "$rc" = 1
check "... b, c and e FAIL, a and d PASS" python3 -c "
import json, sys
s = json.load(open('$TMP/r/summary.json'))
v = {c['case']: c['verdict'] for c in s['cases']}
sys.exit(not (v == {'v=0.5': 'PASS', 'v=0.25': 'FAIL', 'v=0.125': 'FAIL', 'v=0.0625': 'PASS', 'v=0.03125': 'FAIL'}) and print(v) is None)"
md="$TMP/r/RESULTS.md"
check "b: the first differing tensor, its layer and branch, the relative difference and the tolerance, the worst" \
  grep -qE '4 of 38 tensors differ from v=0\.5; first differing tensor: `grads\.blocks\.1\.attn\.k_proj_sel\.weight` \(layer 1, branch sel\): relative 1\.00e-02 > 0\.0001; worst grads\.blocks\.0\.mlp\.down_proj\.weight: relative 0\.5' "$md"
check "... the sub-tolerance difference is not named" bash -c "! grep 'v=0.25' '$md' | grep -q 'up_proj'"
check "c: within a layer the MLP's gradients before the attention's (not the file's order)" \
  grep -qE 'first differing tensor: `grads\.blocks\.0\.mlp\.up_proj\.weight` \(layer 0, branch mlp\): relative 4\.00e-01 > 0\.0001; worst grads\.blocks\.0\.mlp\.up_proj\.weight' "$md"
check "e: the forward (logits) before every gradient" \
  grep -qE 'first differing tensor: `logits` \(output\): relative 1\.00e-03 > 0\.0001; worst grads\.blocks\.1\.mlp\.down_proj\.weight' "$md"
check "d: no false alarm, the tolerance stated" grep -qE '38 tensors equal to v=0\.5 \(within relative 0\.0001; worst 0\)' "$md"
check "facts: dump_first_differ names tensor, layer and where" python3 -c "
import json, sys
fd = [c.get('facts', {}).get('dump_first_differ') for c in json.load(open('$TMP/r/summary.json'))['cases']]
want = {'tensor': 'grads.blocks.1.attn.k_proj_sel.weight', 'layer': 1, 'where': 'layer 1, branch sel'}
sys.exit(not any(d and all(d.get(k) == v for k, v in want.items()) for d in fd))"
check "details: the differing tensors in that order" \
  grep -qF '`grads.blocks.1.attn.k_proj_sel.weight` (layer 1, branch sel) 0.01, `grads.blocks.1.attn.q_proj.weight` (layer 1, branch attn) 0.02, `grads.blocks.0.mlp.down_proj.weight` (layer 0, branch mlp) 0.5, `grads.tok_emb.weight` (embedding) 0.3' "$md"
# ---- one reference per value of another axis -------------------------------------------------
python3 - "$TMP/scn.json" "$TMP/scn2.json" "$TMP/scn3.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["name"] = "dump_axes"
s["checks"][0]["tensors"] = ["grads.*"]
s["matrix"] = {"v": {"key": "train.lr", "values": [0.5, 0.25]}, "p": {"key": "nsa.phi", "values": ["avg", "mlp"]}}
s["checks"][0]["reference"] = "v=0.5,*"
json.dump(s, open(sys.argv[2], "w"))
s["matrix"] = {"v": {"key": "train.lr", "values": [0.5, 0.25, 0.125]}}
s["checks"][0]["reference"] = "v=0.[52]*"
json.dump(s, open(sys.argv[3], "w"))
PY
"$H" run "$TMP/scn2.json" --trainer "$TMP/trainer" --out "$TMP/r2" >"$TMP/run2.out" 2>&1
rc=$?
check "v=0.5,* over phi: exit 1, only the edited phi=avg and phi=mlp cases FAIL (exit $rc)" python3 -c "
import json, sys
v = {c['case']: c['verdict'] for c in json.load(open('$TMP/r2/summary.json'))['cases']}
sys.exit(not (v == {'v=0.5,p=avg': 'PASS', 'v=0.5,p=mlp': 'PASS', 'v=0.25,p=avg': 'FAIL', 'v=0.25,p=mlp': 'FAIL'}) and print(v) is None)"
check "... each against the reference of its own phi (the same first tensor, nothing missing)" \
  test "$(grep -cE 'FAIL +dump_axes/v=0\.25,p=(avg|mlp) .*4 of [0-9]+ tensors differ from v=0\.5,p=\1; first differing tensor: `grads\.blocks\.1\.attn\.k_proj_sel\.weight`' "$TMP/run2.out")" = 2
# ---- a tolerance per case (first matching glob wins; every case must match one) -----------------
python3 - "$TMP/scn.json" "$TMP/scn4.json" "$TMP/scn5.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["name"] = "dump_tol"
s["matrix"]["v"]["values"] = [0.5, 0.25, 0.125]
s["checks"][0]["tolerance"] = {"ci": {"v=0.25": 0.6, "*": 1e-4}}
json.dump(s, open(sys.argv[2], "w"))
s["checks"][0]["tolerance"] = {"v=0.25": 0.6, "v=0.5": 1e-4}
json.dump(s, open(sys.argv[3], "w"))
PY
"$H" run "$TMP/scn4.json" --trainer "$TMP/trainer" --out "$TMP/r4" >"$TMP/run4.out" 2>&1
check "per-case tolerance: b (its edits up to relative 0.5) PASSes under 0.6, c still FAILs under 1e-4" \
  bash -c "grep -q 'PASS  dump_tol/v=0.25 .*within relative 0.6' '$TMP/run4.out' && grep -q 'FAIL  dump_tol/v=0.125 .*> 0.0001' '$TMP/run4.out'"
"$H" validate "$TMP/scn5.json" >"$TMP/v5.out" 2>&1
rc=$?
check "a case no tolerance glob matches: exit 2 naming it (exit $rc)" \
  bash -c "test $rc = 2 && grep -q 'tolerance: case v=0.125 matches none of its case globs' '$TMP/v5.out'"
"$H" validate "$TMP/scn3.json" >"$TMP/v3.out" 2>&1
rc=$?
check "a reference glob that leaves a case equally close to two: exit 2, says which (exit $rc)" \
  bash -c "test $rc = 2 && grep -q \"reference 'v=0.\[52\]\*' matches 2 cases, and case v=0.125 is as close to v=0.5 as to v=0.25\" '$TMP/v3.out'"
finish
