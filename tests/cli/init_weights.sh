#!/usr/bin/env bash
# tests/cli/init_weights.sh BUILD_DIR — start weights (contract section 6;
# docs/diagnostics.md "Start weights"):
#  1. `nsa-train --write-init FILE` writes the step-0 parameters (F32; F64 on cpu64) under
#     the config's parameter names (= `nsa-harness list --tensors`' grads.* less the prefix,
#     in that order) and exits 0 without data or training (no metrics.jsonl; a data file
#     that does not exist is not read);
#  2. `--init-weights` of that file gives bitwise the losses and gradient norms of the
#     seeded init (cpu, 3 steps); the cpu64 file (F64, the init's own doubles) loaded into
#     an fp32 run casts to exactly the same parameters (bitwise again); the F32 file loaded
#     into a cpu64 run equals cpu64's own init to fp32 rounding (close, not equal);
#  3. a file with one element of blocks.1.attn.k_proj_sel.weight changed changes the loss;
#     --write-init with --fault gate_zero_init writes zero gates; under --init-weights the
#     fault has no effect (the file's weights exactly, as under --resume);
#  4. a missing, extra, misshapen or integer tensor, an unreadable file, a tensor whose bytes
#     no longer match its recorded digest: exit 2 naming the tensor and the file;
#     --init-weights with --resume, --write-init into a missing folder: exit 2;
#  5. data parallel (2 ranks under mpirun, when built with MPI): every rank loads the same
#     file, the run ends with the ranks' weights equal, and the loss is the one process's.
# The safetensors files are edited by a few lines of Python (no numpy): the header is JSON.
set -u
BUILD=${1:?usage: init_weights.sh BUILD_DIR}
T="$BUILD/nsa-train"
H="$BUILD/nsa-harness"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, expect_exit, has, finish
TINY=(--config configs/tiny.json --threads 2 --quiet)
PARAM=blocks.1.attn.k_proj_sel.weight

# the (step, loss, grad_norm) of a run's metrics.jsonl, one line per step
curve() { python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); print(r["step"], repr(r["loss"]), repr(r["grad_norm"]))' "$1/metrics.jsonl"; }

# stedit.py SRC DST ACTION [NAME]: rewrite a safetensors file (header JSON + data)
cat >"$TMP/stedit.py" <<'PY'
import json, struct, sys
src, dst, action = sys.argv[1:4]
name = sys.argv[4] if len(sys.argv) > 4 else None
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n]); data = raw[8 + n:]
meta = hdr.pop("__metadata__", {})
tensors = {k: (v, data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in hdr.items()}
order = sorted(tensors, key=lambda k: tensors[k][0]["data_offsets"][0])
def drop_digests(): meta.pop("tensor_digests", None); meta.pop("metadata_digests", None)   # an edited file
if action == "perturb":           # one element nudged (digests dropped: an edited file)
    v, b = tensors[name]; b = bytearray(b)
    if v["dtype"] == "F32":
        x = struct.unpack_from("<f", b, 4)[0]; struct.pack_into("<f", b, 4, x + 0.05)
    else:
        x = struct.unpack_from("<d", b, 8)[0]; struct.pack_into("<d", b, 8, x + 0.05)
    tensors[name] = (v, bytes(b)); drop_digests()
elif action == "corrupt":         # one byte flipped, the digests kept: the file changed after writing
    v, b = tensors[name]; b = bytearray(b); b[0] ^= 0x10; tensors[name] = (v, bytes(b))
elif action == "drop":
    order.remove(name); drop_digests()
elif action == "extra":
    tensors["blocks.9.attn.q_proj.weight"] = ({"dtype": "F32", "shape": [2]}, b"\0" * 8)
    order.append("blocks.9.attn.q_proj.weight"); drop_digests()
elif action == "reshape":         # [r, c] -> [c, r]: same bytes, wrong shape
    v, b = tensors[name]; v = dict(v, shape=list(reversed(v["shape"]))); tensors[name] = (v, b); drop_digests()
elif action == "int":             # the same bytes as I32
    v, b = tensors[name]; v = dict(v, dtype="I32"); tensors[name] = (v, b); drop_digests()
out, off, h = b"", 0, {"__metadata__": meta} if meta else {}
for k in order:
    v, b = tensors[k]
    h[k] = {"dtype": v["dtype"], "shape": v["shape"], "data_offsets": [off, off + len(b)]}
    out += b; off += len(b)
hj = json.dumps(h).encode(); hj += b" " * (-len(hj) % 8)
open(dst, "wb").write(struct.pack("<Q", len(hj)) + hj + out)
PY
# stnames.py FILE: "NAME DTYPE" per tensor, in file order
cat >"$TMP/stnames.py" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); h.pop("__metadata__", None)
for k in sorted(h, key=lambda k: h[k]["data_offsets"][0]): print(k, h[k]["dtype"])
PY

# ---- 1. --write-init ---------------------------------------------------------------------------
mkdir -p "$TMP/w"
expect_exit "--write-init: exit 0" 0 "$T" "${TINY[@]}" --out "$TMP/w" --write-init "$TMP/init32.st" \
  --set data.kind=text --set data.path="$TMP/no_such_corpus.txt"
check "... the file is written" test -s "$TMP/init32.st"
check "... without training (no metrics.jsonl)" test ! -e "$TMP/w/metrics.jsonl"
python3 "$TMP/stnames.py" "$TMP/init32.st" >"$TMP/names32.txt"
# branch_isolation's first case (branch=none,phi=avg) is configs/tiny.json's model: its grads.* are the parameters, in order
"$H" list scenarios/branch_isolation.json --tensors --profile ci 2>/dev/null |
  awk '/^ *grads\./ {sub(/^ *grads\./, ""); print $1, "F32"; n++; next} n {exit}' >"$TMP/want32.txt"
check "... every parameter by its name, F32, in list --tensors' order ($(wc -l <"$TMP/names32.txt") tensors)" \
  bash -c "test -s '$TMP/want32.txt' && cmp -s '$TMP/names32.txt' '$TMP/want32.txt'"
expect_exit "--write-init on cpu64: exit 0" 0 "$T" "${TINY[@]}" --backend cpu64 --write-init "$TMP/init64.st"
check "... F64 tensors" bash -c "python3 '$TMP/stnames.py' '$TMP/init64.st' | awk '\$2 != \"F64\" {exit 1}'"

# ---- 2. bitwise the default init ----------------------------------------------------------------
"$T" "${TINY[@]}" --steps 3 --out "$TMP/def" >/dev/null 2>&1
"$T" "${TINY[@]}" --steps 3 --out "$TMP/ld" --init-weights "$TMP/init32.st" >/dev/null 2>&1
"$T" "${TINY[@]}" --steps 3 --out "$TMP/ld64" --init-weights "$TMP/init64.st" >/dev/null 2>&1
curve "$TMP/def" >"$TMP/def.curve"; curve "$TMP/ld" >"$TMP/ld.curve"; curve "$TMP/ld64" >"$TMP/ld64.curve"
check "--init-weights of --write-init's file: 3 steps bitwise the default init's loss and grad norm" \
  bash -c "test \$(wc -l <'$TMP/def.curve') = 3 && cmp -s '$TMP/def.curve' '$TMP/ld.curve'"
check "the cpu64 (F64) file into an fp32 run: bitwise the default init too (the same cast)" \
  bash -c "test \$(wc -l <'$TMP/def.curve') = 3 && cmp -s '$TMP/def.curve' '$TMP/ld64.curve'"
"$T" "${TINY[@]}" --backend cpu64 --steps 3 --out "$TMP/def64" >/dev/null 2>&1
"$T" "${TINY[@]}" --backend cpu64 --steps 3 --out "$TMP/c64" --init-weights "$TMP/init32.st" >/dev/null 2>&1
check "the F32 file into a cpu64 run: the cpu64 init's losses to fp32 rounding (rel < 1e-5, not bitwise)" python3 -c "
import json, sys
a = [json.loads(l)['loss'] for l in open('$TMP/def64/metrics.jsonl')]
b = [json.loads(l)['loss'] for l in open('$TMP/c64/metrics.jsonl')]
sys.exit(not (len(a) == len(b) == 3 and a != b and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b))))"

# ---- 3. a perturbed file changes the loss -------------------------------------------------------
python3 "$TMP/stedit.py" "$TMP/init32.st" "$TMP/pert.st" perturb "$PARAM"
"$T" "${TINY[@]}" --steps 3 --out "$TMP/pt" --init-weights "$TMP/pert.st" >/dev/null 2>&1
check "one element of $PARAM nudged: the step-1 loss changes" python3 -c "
import json, sys
a = json.loads(open('$TMP/def/metrics.jsonl').readline())['loss']
b = json.loads(open('$TMP/pt/metrics.jsonl').readline())['loss']
sys.exit(not (a != b))"

# ---- 3b. faults on the seeded init: written by --write-init, no effect under --init-weights -----
"$T" "${TINY[@]}" --write-init "$TMP/zero.st" --fault gate_zero_init >/dev/null 2>&1
check "--write-init --fault gate_zero_init: the written gate.fc2 weights are all 0" python3 -c "
import json, struct, sys
raw = open('$TMP/zero.st', 'rb').read(); n = struct.unpack('<Q', raw[:8])[0]; h = json.loads(raw[8:8 + n])
t = h['blocks.0.attn.gate.fc2.weight']; b, e = t['data_offsets']
v = struct.unpack('<%df' % ((e - b) // 4), raw[8 + n + b:8 + n + e])
sys.exit(not (len(v) > 0 and all(x == 0 for x in v)))"
"$T" "${TINY[@]}" --steps 3 --out "$TMP/ldf" --init-weights "$TMP/init32.st" --fault gate_zero_init >/dev/null 2>&1
curve "$TMP/ldf" >"$TMP/ldf.curve"
check "--init-weights with --fault gate_zero_init: exactly the file's weights (the fault has no effect, as under --resume)" \
  bash -c "test \$(wc -l <'$TMP/ldf.curve') = 3 && cmp -s '$TMP/def.curve' '$TMP/ldf.curve'"

# ---- 4. files that do not fit: exit 2 naming the tensor and the file ------------------------------
bad_file() {   # bad_file WHAT ACTION TEXT
  python3 "$TMP/stedit.py" "$TMP/init32.st" "$TMP/$2.st" "$2" "$PARAM"
  expect_exit "$1: exit 2" 2 "$T" "${TINY[@]}" --steps 1 --out "$TMP/bad" --init-weights "$TMP/$2.st"
  check "... names the file and the tensor: $3" has "$TMP/out" "nsa-train: --init-weights: $TMP/$2.st: tensor $3"
}
bad_file "a missing tensor" drop "'$PARAM' missing (this config needs it, [32,64])"
bad_file "an extra tensor" extra "'blocks.9.attn.q_proj.weight' is not a parameter of this config"
bad_file "a misshapen tensor" reshape "'$PARAM' has shape [64,32], this config needs [32,64]"
bad_file "an integer tensor" int "'$PARAM' is I32: expected F32 or F64"
bad_file "a tensor changed after writing" corrupt "'$PARAM' is corrupt"
check "... and nothing trained (no metrics.jsonl)" test ! -e "$TMP/bad/metrics.jsonl"
expect_exit "an unreadable file: exit 2" 2 "$T" "${TINY[@]}" --steps 1 --out "$TMP/bad" --init-weights "$TMP/nope.st"
check "... names it" has "$TMP/out" "--init-weights: $TMP/nope.st"
expect_exit "--init-weights with --resume: exit 2" 2 "$T" "${TINY[@]}" --init-weights "$TMP/init32.st" --resume "$TMP/init32.st"
check "... says give one" has "$TMP/out" "both say where the weights come from"
expect_exit "--write-init into a folder that does not exist: exit 2" 2 "$T" "${TINY[@]}" --write-init "$TMP/no/dir/x.st"
check "... names the flag" has "$TMP/out" "--write-init $TMP/no/dir/x.st: directory"
check "--help describes both flags" bash -c "'$T' --help | grep -q -- '--init-weights FILE' && '$T' --help | grep -q -- '--write-init FILE'"

# ---- 5. data parallel: every rank loads the file --------------------------------------------------
if command -v mpirun >/dev/null 2>&1 && "$T" --protocol-info | grep -q '"mpi"'; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  DP=(--config configs/tiny.json --threads 1 --quiet --steps 2 --set train.batch_size=2)
  "$T" "${DP[@]}" --out "$TMP/one" --init-weights "$TMP/pert.st" >/dev/null 2>&1
  timeout 120 mpirun --oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none \
    -np 2 "$T" "${DP[@]}" --set train.batch_size=1 --transport mpi --out "$TMP/two" --init-weights "$TMP/pert.st" \
    >"$TMP/dp.out" 2>&1
  rc=$?
  check "2 ranks (mpi) from the perturbed file: exit 0, the ranks' weights equal at the end (exit $rc)" test "$rc" = 0
  check "... the loss is the one process's on the same file (rel < 1e-6)" python3 -c "
import json, sys
a = [json.loads(l)['loss'] for l in open('$TMP/one/metrics.jsonl')]
b = [json.loads(l)['loss'] for l in open('$TMP/two/metrics.jsonl')]
sys.exit(not (len(a) == len(b) == 2 and all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(a, b))))"
else
  echo "(data parallel part skipped: no mpirun or no MPI in this build)"
fi
finish
