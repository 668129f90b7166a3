#!/usr/bin/env bash
# tests/cli/dump_tensors.sh BUILD_DIR — the step-1 dump holds only the tensors the run reads
# (nsa-train --dump-tensors, docs/diagnostics.md "--dump-step"):
#  1. nsa-train --dump-step F --dump-tensors 'grads.*': every gradient, bitwise those of a full
#     dump, and no logits; --dump-tensors logits: the logits bitwise, no gradient; two globs
#     select both; with --dump-acts a glob over acts.* selects those activations (bitwise) and
#     nothing else of them; inputs, targets, loss and the metadata (param_digests equal to the
#     full dump's, config, backend, precision, loss) always; without the flag the dump is the
#     one a build without the feature writes (the header's tensor order, every tensor);
#  2. --dump-tensors without --dump-step, empty, or with an empty glob: exit 2 naming the flag
#     and its value; --protocol-info lists the diagnostic dump_tensors, --help the flag;
#  3. nsa-harness asks for the tensors the scenario reads: ddp_onestep's two mpi cases run with
#     --dump-tensors grads.* (its dump_match and its family report read the gradients) and
#     PASS; prefill_step5 with --dump-tensors logits and PASSes; a golden case (it reads the
#     whole dump) runs without; a scenario of several dump_match checks gets the union of their
#     `tensors` (`except` only narrows; --dump-acts for the acts. glob) and PASSes; one more
#     dump_match without `tensors` means the whole dump; a trainer that does not list
#     dump_tensors gets the whole dump and still PASSes.
set -u
BUILD=${1:?usage: dump_tensors.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
H="$BUILD/nsa-harness"
T="$BUILD/nsa-train"
[ -x "$H" ] && [ -x "$T" ] || { echo "SKIP: nsa-harness or nsa-train not built in $BUILD"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 not found (it reads the safetensors headers)"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, expect_exit, has, finish

# st.py [--names|--other-config] FULL PART WANT UNWANTED: PART holds every tensor of FULL that
# matches one of the comma-separated globs WANT (and inputs, targets, loss), none matching one
# of UNWANTED, and the metadata; each of its tensors and its metadata are FULL's, bitwise
# (--names: the names only, for dumps of other batches; --other-config: every tensor and
# metadata but the config bitwise, for a config whose step 1 is the same)
cat >"$TMP/st.py" <<'EOF'
import fnmatch, json, struct, sys
mode = sys.argv.pop(1) if sys.argv[1].startswith("--") else ""
names_only = mode == "--names"
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    t = {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
    return t, h.get("__metadata__", {})
full, fmeta = load(sys.argv[1])
part, meta = load(sys.argv[2])
want = sys.argv[3].split(",") + ["inputs", "targets", "loss"]
unwanted = sys.argv[4].split(",")
sel = lambda k, gl: any(fnmatch.fnmatchcase(k, g) for g in gl)
differ = [k for k in part if part[k] != full.get(k) and not names_only]
missing = [k for k in full if sel(k, want) and k not in part]
extra = [k for k in part if sel(k, unwanted) or not sel(k, want)]
meta_bad = [k for k in ("param_digests", "config", "backend", "precision", "loss")
            if k not in meta or (meta[k] != fmeta.get(k) and not names_only and not (mode == "--other-config" and k == "config"))]
print("    %d of %d tensors; differ %s, missing %s, unwanted %s, metadata %s"
      % (len(part), len(full), differ[:3], missing[:3], extra[:3], meta_bad))
sys.exit(bool(differ or missing or extra or meta_bad))
EOF
# names.py FILE: the tensor names in header order
names() { python3 -c '
import json, struct, sys
b = open(sys.argv[1], "rb").read()
print(" ".join(k for k in json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]]) if k != "__metadata__"))' "$1"; }

# ---- 1. nsa-train ----------------------------------------------------------------------------
tr() { "$T" --config configs/tiny.json --set train.steps=2 --quiet --out "$TMP/$1" "${@:2}"; }
expect_exit "a full dump" 0 tr full --dump-step "$TMP/full.st"
expect_exit "--dump-tensors 'grads.*'" 0 tr grads --dump-step "$TMP/grads.st" --dump-tensors 'grads.*'
expect_exit "--dump-tensors logits" 0 tr logits --dump-step "$TMP/logits.st" --dump-tensors logits
expect_exit "--dump-tensors 'logits,grads.blocks.0.*'" 0 tr two --dump-step "$TMP/two.st" --dump-tensors 'logits,grads.blocks.0.*'
expect_exit "a full dump with --dump-acts" 0 tr fulla --dump-step "$TMP/fulla.st" --dump-acts
expect_exit "--dump-acts --dump-tensors 'acts.blocks.1.*,grads.norm_f.*'" 0 \
  tr acts --dump-step "$TMP/acts.st" --dump-acts --dump-tensors 'acts.blocks.1.*,grads.norm_f.*'
check "'grads.*': every gradient bitwise, no logits" python3 "$TMP/st.py" "$TMP/full.st" "$TMP/grads.st" 'grads.*' logits
check "logits: the logits bitwise, no gradient" python3 "$TMP/st.py" "$TMP/full.st" "$TMP/logits.st" logits 'grads.*'
check "'logits,grads.blocks.0.*': both, nothing of layer 1" python3 "$TMP/st.py" "$TMP/full.st" "$TMP/two.st" \
  'logits,grads.blocks.0.*' 'grads.blocks.1.*'
check "'acts.blocks.1.*,grads.norm_f.*': those activations and gradients bitwise, no other" \
  python3 "$TMP/st.py" "$TMP/fulla.st" "$TMP/acts.st" 'acts.blocks.1.*,grads.norm_f.*' 'acts.blocks.0.*,logits,grads.blocks.*'
check "... the selected dumps are smaller" test "$(stat -c %s "$TMP/grads.st")" -lt "$(stat -c %s "$TMP/full.st")" -a \
  "$(stat -c %s "$TMP/logits.st")" -lt "$(stat -c %s "$TMP/full.st")"
check "without the flag: inputs, targets, logits, loss, then every gradient, in that order" \
  python3 -c "import sys; n = sys.argv[1].split(); sys.exit(not (n[:4] == ['inputs', 'targets', 'logits', 'loss'] and
    len(n) == 4 + sum(1 for x in n if x.startswith('grads.')) and len(n) > 30))" "$(names "$TMP/full.st")"
check "a selection keeps the order: inputs, targets, logits, loss, grads.blocks.0.*" \
  python3 -c "import sys; n = sys.argv[1].split(); sys.exit(not (n[:4] == ['inputs', 'targets', 'logits', 'loss'] and
    all(x.startswith('grads.blocks.0.') for x in n[4:]) and len(n) > 8))" "$(names "$TMP/two.st")"

expect_exit "--dump-tensors without --dump-step is a usage error" 2 tr bad1 --dump-tensors logits
check "... naming the flag and its value" has "$TMP/out" "nsa-train: --dump-tensors logits selects the step dump's tensors: it needs --dump-step FILE"
expect_exit "--dump-tensors '' is a usage error" 2 tr bad2 --dump-step "$TMP/x.st" --dump-tensors ''
check "... naming the flag" has "$TMP/out" "nsa-train: --dump-tensors '': expected comma-separated globs"
expect_exit "--dump-tensors 'logits,' (an empty glob) is a usage error" 2 tr bad3 --dump-step "$TMP/x.st" --dump-tensors 'logits,'
check "... naming the flag and its value" has "$TMP/out" "nsa-train: --dump-tensors 'logits,': expected comma-separated globs"
check "... and nothing was written" test ! -e "$TMP/x.st"
check "--protocol-info lists dump_tensors" sh -c "'$T' --protocol-info | grep -q '\"dump_tensors\"'"
check "--help describes --dump-tensors" sh -c "'$T' --help | grep -q -- '--dump-tensors GLOBS'"

# ---- 3. through the harness ------------------------------------------------------------------
# has_arg CASE_DIR WORD [VALUE]: the case's trainer command line (env.json) holds WORD (followed by VALUE)
has_arg() { python3 -c '
import json, sys
c = json.load(open(sys.argv[1] + "/env.json"))["command"]
w = sys.argv[2:]
sys.exit(not any(c[i:i + len(w)] == w for i in range(len(c))))' "$@"; }
no_flag() { ! has_arg "$1" --dump-tensors; }

if command -v mpirun >/dev/null 2>&1 && ! "$T" --print-env | grep -q '"mpi": null'; then
  D="$TMP/ddp/ddp_onestep/transport=mpi,mode=find_unused,branch=none"
  expect_exit "ddp_onestep (ci) transport=mpi,mode=find_unused,branch=none: PASS" 0 "$H" run scenarios/ddp_onestep.json \
    --profile ci --filter 'transport=mpi,mode=find_unused,branch=none,*' --out "$TMP/ddp"
  check "... two cases PASS" grep -q "2 PASS" "$TMP/out"
  check "... the two-rank case ran with --dump-tensors grads.*" has_arg "$D,ranks=2" --dump-tensors 'grads.*'
  check "... the one-rank case too" has_arg "$D,ranks=1" --dump-tensors 'grads.*'
  check "... its dump holds every gradient and no logits" \
    python3 "$TMP/st.py" --names "$TMP/full.st" "$D,ranks=2/step1.safetensors" 'grads.*' logits
  check "... the dump_match compared every gradient" grep -qE '37 tensors equal to transport=mpi' "$TMP/ddp/RESULTS.md"
else
  echo "SKIP  ddp_onestep through the harness: no mpirun, or nsa-train built without MPI"
fi

expect_exit "prefill_step5 (ci) through the harness: PASS" 0 "$H" run scenarios/prefill_step5.json --profile ci --out "$TMP/pf"
check "... its cases ran with --dump-tensors logits" has_arg "$TMP/pf/prefill_step5/prefill=sequential" --dump-tensors logits
check "... the dump holds the logits and no gradient" python3 "$TMP/st.py" --names "$TMP/full.st" \
  "$TMP/pf/prefill_step5/prefill=sequential/step1.safetensors" logits 'grads.*'
expect_exit "a golden_regression case through the harness" 0 "$H" run scenarios/golden_regression.json --profile ci \
  --filter variant=base --out "$TMP/gold"
check "... ran with --dump-acts" has_arg "$TMP/gold/golden_regression/variant=base" --dump-acts
check "... and without --dump-tensors (golden reads the whole dump)" no_flag "$TMP/gold/golden_regression/variant=base"

# scn NAME EXTRA_CHECK: three dump_match checks over two cases whose step-1 tensors are equal
# (the cases differ in the learning rate only), plus EXTRA_CHECK (JSON, or empty)
scn() {
  cat >"$TMP/$1.json" <<EOF
{
  "name": "$1",
  "description": "dump_match checks naming their tensors",
  "family": "branch_isolation",
  "config": "$PWD/configs/tiny.json",
  "overrides": {"train.steps": 1},
  "profiles": {"ci": {}},
  "run": {"timeout_s": 120},
  "matrix": {"v": {"key": "train.lr", "values": [0.5, 0.25]}},
  "checks": [
    {"check": "dump_match", "reference": "v=0.5", "tensors": ["logits"]},
    {"check": "dump_match", "reference": "v=0.5", "tensors": ["grads.blocks.0.*"], "except": {"v=0.25": ["grads.blocks.0.mlp.*"]}},
    {"check": "dump_match", "reference": "v=0.5", "tensors": ["acts.blocks.1.out", "logits"]}${2:+,
    $2}
  ]
}
EOF
}
scn union ""
expect_exit "three dump_match checks: PASS" 0 "$H" run "$TMP/union.json" --out "$TMP/u"
check "... with --dump-tensors the union of their tensors, once each" has_arg "$TMP/u/union/v=0.25" --dump-tensors \
  'logits,grads.blocks.0.*,acts.blocks.1.out'
check "... and --dump-acts (an acts. glob)" has_arg "$TMP/u/union/v=0.25" --dump-acts
check "... the dump holds exactly those (\`except\` only narrows a check: blocks.0's MLP gradients too)" \
  python3 "$TMP/st.py" --other-config "$TMP/fulla.st" "$TMP/u/union/v=0.25/step1.safetensors" 'logits,grads.blocks.0.*,acts.blocks.1.out' \
  'grads.blocks.1.*,grads.tok_emb.*,acts.blocks.0.*,acts.blocks.1.attn*'
scn whole '{"check": "dump_match", "reference": "v=0.5"}'
expect_exit "... plus a dump_match without tensors: PASS" 0 "$H" run "$TMP/whole.json" --out "$TMP/w"
check "... without --dump-tensors (it reads the whole dump)" no_flag "$TMP/w/whole/v=0.25"
# a trainer that does not list dump_tensors: nsa-train whose --protocol-info leaves it out
"$T" --protocol-info | python3 -c '
import json, sys
i = json.load(sys.stdin)
i["features"]["diagnostics"] = [d for d in i["features"]["diagnostics"] if d != "dump_tensors"]
print(json.dumps(i))' >"$TMP/info.json"
cat >"$TMP/older_trainer" <<EOF
#!/usr/bin/env bash
# nsa-train without the diagnostic dump_tensors in its answer
case " \$* " in *" --protocol-info "*) cat "$TMP/info.json"; exit 0 ;; *" --dump-tensors "*) exit 2 ;; esac
exec "$T" "\$@"
EOF
chmod +x "$TMP/older_trainer"
expect_exit "a trainer that does not list dump_tensors: PASS" 0 "$H" run "$TMP/union.json" --trainer "$TMP/older_trainer" --out "$TMP/o"
check "... without --dump-tensors" no_flag "$TMP/o/union/v=0.25"
finish
