#!/usr/bin/env bash
# tests/cli/train_cli.sh — nsa-train end to end: flags and exit codes, per-step
# lines and metrics.jsonl, --dump-step contents, bitwise resume, anomaly exit,
# every data source. Usage: bash tests/cli/train_cli.sh <build dir>  (from the repo root)
set -u
BUILD=${1:?usage: train_cli.sh <build dir>}
BIN="$BUILD/nsa-train"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0; fail=0
ok()  { echo "PASS  $1"; pass=$((pass + 1)); }
bad() { echo "FAIL  $1"; fail=$((fail + 1)); }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }
# expect_rc NAME RC CMD...: exit status must be RC
expect_rc() { local name=$1 want=$2; shift 2; "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
  if [ "$rc" = "$want" ]; then ok "$name (exit $rc)"; else bad "$name: exit $rc, want $want"; sed 's/^/    /' "$TMP/err" | head -5; fi; }
TINY="--config configs/tiny.json --threads 2"

expect_rc "--help" 0 "$BIN" --help
check "--help lists every flag" grep -q -- "--dump-step" "$TMP/out"
expect_rc "unknown flag" 2 "$BIN" $TINY --frobnicate
check "unknown flag is named" grep -q "unknown option '--frobnicate'" "$TMP/err"
expect_rc "missing --config" 2 "$BIN" --steps 3
expect_rc "flag without value" 2 "$BIN" --config
expect_rc "bad --steps" 2 "$BIN" $TINY --steps x
expect_rc "--threads -5" 2 "$BIN" --config configs/tiny.json --threads -5
check "--threads -5: one message, naming the value (it printed two)" test "$(grep -c . "$TMP/err")" = 1
expect_rc "--threads 0" 2 "$BIN" --config configs/tiny.json --threads 0
check "--threads 0: says what it wants" grep -q -- "--threads 0: expected a whole number from 1 to 1024" "$TMP/err"
# above the stated maximum (100000 was SIGSEGV inside libgomp), and not a number
for t in 100000 1025 2147483648 abc 4x ""; do
  expect_rc "--threads '$t'" 2 "$BIN" --config configs/tiny.json --threads "$t" --steps 1 --out "$TMP/thr"
  check "--threads '$t': one line naming the flag, the value and the range" \
    bash -c '[ "$(grep -c . "$1")" = 1 ] && grep -qxF -- "nsa-train: --threads $2: expected a whole number from 1 to 1024" "$1"' _ "$TMP/err" "$t"
done
expect_rc "--threads 1024 (the maximum) runs" 0 "$BIN" --config configs/tiny.json --threads 1024 --steps 1 --quiet --out "$TMP/thr1024"
expect_rc "unknown backend" 2 "$BIN" $TINY --backend tpu
check "unknown backend names the flag" grep -q -- "--set train.backend=tpu" "$TMP/err"
# the environment knobs: a set one is a whole number in its range, else exit 2 naming it and its value
expect_rc "NSA_KV_FUSED=2" 2 env NSA_KV_FUSED=2 "$BIN" $TINY --steps 1 --out "$TMP/kvf"
check "NSA_KV_FUSED=2 is named, with what it wants" grep -q "NSA_KV_FUSED=2: expected a whole number in \[0, 1\]" "$TMP/err"
expect_rc "NSA_KV_FUSED=0 (the per-branch K/V projections)" 0 env NSA_KV_FUSED=0 "$BIN" $TINY --steps 1 --out "$TMP/kvf0"
if grep -q "no CUDA support" <<<"$("$BIN" --devices 2>&1)"; then
  echo "SKIP  the CUDA backend's knobs: this build has no CUDA support"
else
  # read before the device is looked for, so these hold with and without a GPU
  for kv in NSA_CUDA_SEL_ROWS=yes NSA_CUDA_SEL_ROWS=2 NSA_CUDA_WGMMA=on NSA_CUDA_DEVICE=-1 NSA_CUDA_PROFILE_SKIP=x \
            NSA_CUDA_STATS=10 NSA_CUDA_FWD_WS=2 NSA_CUDA_DQ_WS=-2 NSA_CUDA_DKDV_WS=y NSA_CUDA_SELECT_STREAM=-2 \
            NSA_CUDA_SELECT_PAD=3 NSA_CUDA_DKDV_ALIGN=3 NSA_CUDA_SEL_DQ_TMA=3 NSA_CUDA_SEL_TMA_NST=1 NSA_CUDA_DKDV_TMA=2 \
            NSA_CUDA_ROWS_TMA=3 NSA_CUDA_DKDV_RT64=2 NSA_CUDA_SELECT_POS=-2 NSA_CUDA_FWD_KC128=2 NSA_CUDA_FWD_PINGPONG=3; do
    expect_rc "$kv" 2 env "$kv" "$BIN" $TINY --backend cuda --steps 1 --out "$TMP/knob"
    check "$kv is named, with the range it wants" grep -q "backend 'cuda': $kv: expected a whole number in \[" "$TMP/err"
  done
  expect_rc "NSA_CUDA_ATTN=fast" 2 env NSA_CUDA_ATTN=fast "$BIN" $TINY --backend cuda --steps 1 --out "$TMP/knob"
  check "NSA_CUDA_ATTN=fast is named, with what it wants" grep -q "NSA_CUDA_ATTN=fast: expected simple" "$TMP/err"
fi

# ---- a short run: one line per step, metrics.jsonl ----------------------------------
expect_rc "3 steps" 0 "$BIN" $TINY --steps 3 --out "$TMP/run"
check "one line per step with loss, grad norm, lr, ms, tok/s" \
  test "$(grep -cE '^step +[0-9]+/3 \| loss [0-9.]+ \| grad_norm [0-9.]+ \| lr [0-9.e+-]+ \| +[0-9.]+ ms \| +[0-9]+ tok/s$' "$TMP/out")" = 3
check "metrics.jsonl has 3 JSON records with the step fields" python3 - "$TMP/run/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == [1, 2, 3], rows
for r in rows:
    for k in ("loss", "grad_norm", "lr", "ms", "tok_per_s", "tokens"):
        assert isinstance(r[k], (int, float)), (k, r)
PY

# ---- --dump-step: batch, logits, loss and every parameter gradient --------------------
expect_rc "--dump-step" 0 "$BIN" $TINY --steps 1 --out "$TMP/dump" --dump-step "$TMP/dump/step1.safetensors"
check "dump holds inputs, targets, logits, loss and a gradient per parameter" python3 - "$TMP/dump/step1.safetensors" <<'PY'
import json, struct, sys, math
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n]); data = raw[8 + n:]
meta = hdr.pop("__metadata__")
assert hdr["inputs"]["dtype"] == "I32" and hdr["inputs"]["shape"] == [4, 128], hdr["inputs"]
assert hdr["logits"]["shape"] == [4, 128, 256] and hdr["logits"]["dtype"] == "F32"
grads = [k for k in hdr if k.startswith("grads.")]
assert "grads.tok_emb.weight" in grads and "grads.blocks.1.attn.gate.fc2.weight" in grads and "grads.norm_f.weight" in grads
assert len(grads) == 2 * 17 + 3, len(grads)   # tiny (phi=avg): 2 blocks x 17 tensors + tok_emb, norm_f, lm_head
b, e = hdr["loss"]["data_offsets"]
loss = struct.unpack("<d", data[b:e])[0]
assert abs(loss - float(meta["loss"])) < 1e-12 and 4 < loss < 7, loss
# the logits reproduce the loss: mean over rows of logsumexp - logit[target]
b, e = hdr["logits"]["data_offsets"]; lg = struct.unpack("<%df" % (4 * 128 * 256), data[b:e])
b, e = hdr["targets"]["data_offsets"]; tg = struct.unpack("<%di" % (4 * 128), data[b:e])
tot = 0.0
for r in range(4 * 128):
    row = lg[r * 256:(r + 1) * 256]; mx = max(row)
    tot += mx + math.log(sum(math.exp(v - mx) for v in row)) - row[tg[r]]
assert abs(tot / 512 - loss) < 1e-4, (tot / 512, loss)
PY

# ---- --dump-acts: every layer's forward activations, in forward order, the same
#      values the plain dump's logits come from (the dump replay does not change them)
expect_rc "--dump-acts without --dump-step" 2 "$BIN" $TINY --steps 1 --dump-acts --out "$TMP/x"
check "--dump-acts needs --dump-step: says so" grep -q -- "--dump-acts .* needs --dump-step" "$TMP/err"
expect_rc "--dump-acts" 0 "$BIN" $TINY --steps 1 --out "$TMP/acts" --dump-step "$TMP/acts/step1.safetensors" --dump-acts
check "activations dumped per layer in forward order; logits and gradients unchanged by them" \
  python3 - "$TMP/acts/step1.safetensors" "$TMP/dump/step1.safetensors" <<'PY'
import json, struct, sys
def load(p):
    raw = open(p, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n]); h.pop("__metadata__"); return h, raw[8 + n:]
ha, da = load(sys.argv[1]); hp, dp = load(sys.argv[2])
acts = [k for k in ha if k.startswith("acts.")]
want = ["attn_norm.out", "attn.q", "attn.cmp.k", "attn.cmp.v", "attn.sel.k", "attn.sel.v", "attn.win.k", "attn.win.v",
        "attn.cmp.Kc", "attn.cmp.Vc", "attn.cmp.o", "attn.sel.idx", "attn.sel.o", "attn.win.o", "attn.gate.out",
        "attn.out", "attn.residual", "mlp.hidden", "out"]
assert acts == ["acts.blocks.%d.%s" % (L, w) for L in range(2) for w in want], acts
assert ha["acts.blocks.1.attn.sel.idx"]["dtype"] == "I32" and ha["acts.blocks.1.attn.sel.idx"]["shape"] == [4, 128, 2, 4]
assert ha["acts.blocks.0.attn.cmp.Kc"]["shape"] == [4, 31, 2, 16]   # (128 - 8) / 4 + 1 compressed blocks
for k in hp:   # everything the plain dump holds is bitwise the same
    a, b = ha[k]["data_offsets"], hp[k]["data_offsets"]
    assert da[a[0]:a[1]] == dp[b[0]:b[1]], k
PY
check "metrics carry peak backend memory, model FLOPs and the data digest of each step" python3 - "$TMP/run/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    assert r["peak_mem_bytes"] >= r["mem_bytes"] > 0, r
    assert r["flops"] > 0 and r["flops"] == rows[0]["flops"], r
    assert len(r["data_digest"]) == 16 and int(r["data_digest"], 16) >= 0, r
assert len({r["data_digest"] for r in rows}) == len(rows), "each step reads other tokens"
PY

# ---- resume is bitwise: 20 steps straight == 10 + save + resume 10 --------------------
"$BIN" $TINY --steps 20 --out "$TMP/full" --quiet
"$BIN" $TINY --steps 20 --stop-after 10 --save "$TMP/ck.safetensors" --out "$TMP/half" --quiet
expect_rc "resume from step 10" 0 "$BIN" $TINY --steps 20 --resume "$TMP/ck.safetensors" --out "$TMP/half" --quiet
check "resumed losses and grad norms equal the straight run bit for bit (steps 11-20)" python3 - "$TMP/full/metrics.jsonl" "$TMP/half/metrics.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert [r["step"] for r in b] == list(range(1, 21)), [r["step"] for r in b]
for x, y in zip(a, b):
    assert x["loss"] == y["loss"] and x["grad_norm"] == y["grad_norm"], (x, y)
PY
check "checkpoint is safetensors with weights under their names" python3 - "$TMP/ck.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
assert h["tok_emb.weight"]["shape"] == [256, 64] and h["tok_emb.weight"]["dtype"] == "F32"
assert "optim.m.blocks.0.attn.q_proj.weight" in h and h["__metadata__"]["step"] == "10"
PY
expect_rc "resume from a missing file" 1 "$BIN" $TINY --steps 20 --resume "$TMP/nope.safetensors" --out "$TMP/x"
expect_rc "resume with another shape" 1 "$BIN" $TINY --set model.dim=32 --set model.head_dim=8 --steps 20 --resume "$TMP/ck.safetensors" --out "$TMP/x"
check "shape mismatch is named" grep -q "tok_emb.weight" "$TMP/err"

# ---- a diverging run stops with exit 3 and names the first non-finite tensor ---------
expect_rc "diverging run (lr 1e30)" 3 "$BIN" $TINY --steps 5 --set train.lr=1e30 --set train.warmup_steps=0 --set train.grad_clip=0 --out "$TMP/nan"
check "anomaly line on stderr" grep -q '^\[ANOMALY\] step=.* tensor=' "$TMP/err"
check "anomaly.json written" python3 -c "import json,sys; a=json.load(open(sys.argv[1])); assert a['tensor'] and a['op'] and a['phase'] in ('forward','backward')" "$TMP/nan/anomaly.json"

# ---- data sources: text and llm.c shards ------------------------------------------------
python3 -c "
import struct
open('$TMP/a.txt','w').write('the quick brown fox jumps over the lazy dog. ' * 200)
toks = [(i * 7) % 256 for i in range(5000)]
open('$TMP/s0.bin','wb').write(struct.pack('<256i', 20240520, 1, len(toks), *([0]*253)) + struct.pack('<%dH' % len(toks), *toks))
open('$TMP/bad.bin','wb').write(struct.pack('<256i', 123, 1, 10, *([0]*253)) + b'\0' * 20)
"
expect_rc "text data" 0 "$BIN" $TINY --steps 2 --set data.kind=text --set data.path="$TMP/a.txt" --out "$TMP/text"
expect_rc "shard data" 0 "$BIN" $TINY --steps 2 --set data.kind=shards --set data.path="$TMP/s*.bin" --out "$TMP/shard"
expect_rc "synthetic data" 0 "$BIN" $TINY --steps 2 --set data.kind=synthetic --out "$TMP/syn"
expect_rc "bad shard magic" 2 "$BIN" $TINY --steps 2 --set data.kind=shards --set data.path="$TMP/bad.bin" --out "$TMP/x"
check "bad shard is named" grep -q "bad.bin" "$TMP/err"
expect_rc "missing text file" 2 "$BIN" $TINY --steps 2 --set data.kind=text --set data.path="$TMP/none.txt" --out "$TMP/x"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
