#!/usr/bin/env bash
# tests/cli/gate_init_bf16.sh BUILD_DIR — the gate_init check on a bf16 trainer: a gate whose
# fc2 starts at zero outputs 1/3 (softmax) or 1/2 (sigmoid) rounded to bf16 in every position
# (1/3 -> 0.333984375), and the check must still call it uniform in every layer. On the CPU: a
# wrapper presents nsa-train as a CUDA device (--protocol-info lists cuda and bf16, --print-env gains a
# cuda.devices entry), trains on the CPU backend in fp32 and rounds the recorded gate
# statistics (out_mean, out_min, out_max) to bf16, as a bf16 forward stores them.
#  1. gate_zero_init, the scenario in bf16: FAIL in both cases, "uniform gate in 4/4 layers
#     (0, 1, 2, 3): every output 0.333333" and "... 0.500000", fact gate_uniform_layers [0..3]
#     (with the fp32 tolerance, 1e-6, softmax's 0.333984 was not uniform: nothing localised);
#  2. no fault: PASS (rounding a spread gate to bf16 does not make it uniform);
#  3. the same rounded statistics, the scenario in fp32: softmax's gate is not "uniform" (its
#     outputs are 6.5e-4 off 1/3, beyond fp32's rounding) but collapsed; sigmoid's 1/2 is exact
#     in bf16 and stays uniform.
set -u
BUILD=${1:?usage: gate_init_bf16.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
H="$BUILD/nsa-harness"
[ -x "$H" ] && [ -x "$BUILD/nsa-train" ] || { echo "SKIP: nsa-harness or nsa-train not built in $BUILD"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"

cat >"$TMP/round_bf16.py" <<'EOF'
import json, struct, sys
def bf16(x):   # round to nearest even on the upper 16 bits of the float32
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return struct.unpack("<f", struct.pack("<I", u))[0]
path = sys.argv[1]
out = []
for line in open(path):
    r = json.loads(line)
    for g in r.get("layers", []):
        for k in ("out_mean", "out_min", "out_max"):
            if k in g: g[k] = [bf16(v) for v in g[k]]
    out.append(json.dumps(r))
open(path, "w").write("\n".join(out) + "\n")
EOF
cat >"$TMP/fakebf16" <<EOF
#!/usr/bin/env bash
T="$BUILD/nsa-train"
for a in "\$@"; do case \$a in
  --protocol-info) "\$T" "\$@" | sed -e 's/"backends":\["cpu"/"backends":["cuda","cpu"/' \\
      -e 's/"precisions":\["fp32"/"precisions":["bf16","fp32"/'; exit \${PIPESTATUS[0]};;
  --print-env) "\$T" "\$@" | python3 -c '
import json, sys
e = json.load(sys.stdin)
e["cuda"] = {"runtime": "13.0", "driver": "13.0", "cublas": "13.1.0", "devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3",
             "uuid": "GPU-test", "memory_bytes": 85520809984, "sm": "sm_90", "sm_count": 132}]}
json.dump(e, sys.stdout)'; exit \${PIPESTATUS[0]};;
esac; done
out=""; prev=""
for a in "\$@"; do [ "\$prev" = --out ] && out=\$a; prev=\$a; done
"\$T" "\$@" --set 'train.backend="cpu"' --set 'train.precision="fp32"'; rc=\$?
[ -n "\$out" ] && [ -f "\$out/gate_stats.jsonl" ] && python3 "$TMP/round_bf16.py" "\$out/gate_stats.jsonl"
exit \$rc
EOF
chmod +x "$TMP/fakebf16"
# scenario NAME PRECISION: gate_init on the tiny config as a CUDA run in that precision
scenario() { cat >"$TMP/$1.json" <<EOF
{"name": "$1", "description": "gate_init on a bf16 trainer (test only)", "family": "gate_init",
 "config": "$PWD/configs/tiny.json",
 "overrides": {"train.steps": 1, "model.n_layers": 4, "train.backend": "cuda", "train.precision": "$2"},
 "profiles": {"ci": {}},
 "matrix": {"gate": {"key": "nsa.gate_act", "values": ["softmax", "sigmoid"]}},
 "checks": [{"check": "finite"}, {"check": "gate_init", "fc2_gain": 0.1, "fc2_std_tolerance": 0.3, "min_output_std": 1e-4}]}
EOF
}
scenario gate_bf16 bf16
scenario gate_fp32 fp32
hrun() { "$H" run --quiet --profile ci --trainer "$TMP/fakebf16" "$@" >"$TMP/out" 2>&1; }
facts() { python3 - "$1" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
f = {c["case"]: c.get("facts", {}) for c in s["cases"]}
print(json.dumps({k: [v.get("gate_uniform_layers"), v.get("gate_collapsed_layers")] for k, v in f.items()}, sort_keys=True))
EOF
}

hrun "$TMP/gate_bf16.json" --fault gate_zero_init --out "$TMP/zero"
rc=$?
check "gate_zero_init in bf16: exit 1 (got $rc)" test "$rc" = 1
check "... softmax: uniform in every layer at 1/3 rounded to bf16" has "$TMP/zero/RESULTS.md" \
  "uniform gate in 4/4 layers (0, 1, 2, 3): every output 0.333333"
check "... sigmoid: uniform in every layer at 1/2" has "$TMP/zero/RESULTS.md" \
  "uniform gate in 4/4 layers (0, 1, 2, 3): every output 0.500000"
check "... the facts: gate_uniform_layers [0, 1, 2, 3] in both cases, none collapsed" \
  test "$(facts "$TMP/zero")" = '{"gate=sigmoid": [[0, 1, 2, 3], []], "gate=softmax": [[0, 1, 2, 3], []]}'
check "... the recorded means are bf16's (0.333984375), not 1/3" \
  grep -q '"out_mean": \[0.333984375' "$TMP/zero/gate_bf16/gate=softmax/gate_stats.jsonl"

hrun "$TMP/gate_bf16.json" --out "$TMP/clean"
rc=$?
check "no fault in bf16: exit 0, no false alarm (got $rc)" test "$rc" = 0

hrun "$TMP/gate_fp32.json" --fault gate_zero_init --out "$TMP/zero32"
check "the same statistics as fp32: softmax's 0.333984 is not uniform within fp32's rounding (collapsed), sigmoid's 0.5 is" \
  test "$(facts "$TMP/zero32")" = '{"gate=sigmoid": [[0, 1, 2, 3], []], "gate=softmax": [[], [0, 1, 2, 3]]}'
finish
