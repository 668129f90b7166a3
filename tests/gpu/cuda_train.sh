#!/usr/bin/env bash
# tests/gpu/cuda_train.sh BUILD_DIR — nsa-train --backend cuda end to end (label gpu).
#
#  1. determinism: tiny, bf16, 30 steps twice: bitwise-equal losses (metrics.jsonl)
#  2. resume: 6 steps straight == 3 steps + --resume 3 steps, bitwise
#  3. parity with the CPU reference: tiny, first 10 steps, |loss_cuda - loss_cpu| / loss_cpu
#     <= 2e-2 (bf16), 2e-3 (fp16), 1e-4 (fp32); the model learns (step 30 < step 1)
#  4. m7c_125m at S=2048, B=1: first 3 steps of cuda bf16 vs cpu fp32 within 1e-2
#     (the acceptance: loss matches the CPU reference's first steps)
#  5. --dump-step (and --dump-acts) in bf16/fp16/fp32: logits F32, well-formed, and within
#     each precision's tolerance of the CPU's logits, normwise
# Prints SKIP and exits 77 where no CUDA device is usable.
set -u
b=${1:?usage: cuda_train.sh BUILD_DIR}
if ! dev=$("$b/nsa-train" --devices 2>&1); then
  echo "SKIP: no usable CUDA device ($dev)"
  exit 77
fi
echo "$dev"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
losses() { sed -n 's/.*"loss": \([-0-9.eE+]*\),.*/\1/p' "$1/metrics.jsonl"; }
ok() { echo "PASS: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
run() { "$b/nsa-train" --quiet "$@" || { bad "nsa-train $* exited $?"; return 1; }; }

# 1. determinism
run --config configs/tiny.json --backend cuda --steps 30 --out "$tmp/d1"
run --config configs/tiny.json --backend cuda --steps 30 --out "$tmp/d2"
if [ -s "$tmp/d1/metrics.jsonl" ] && cmp -s <(losses "$tmp/d1") <(losses "$tmp/d2"); then ok "tiny bf16 30 steps twice: bitwise-equal losses"
else bad "tiny bf16 30 steps twice: losses differ"; fi

# 2. resume
run --config configs/tiny.json --backend cuda --steps 6 --out "$tmp/r1"
run --config configs/tiny.json --backend cuda --steps 6 --stop-after 3 --save "$tmp/ck.safetensors" --out "$tmp/r2"
run --config configs/tiny.json --backend cuda --steps 6 --resume "$tmp/ck.safetensors" --out "$tmp/r2"
if cmp -s <(losses "$tmp/r1") <(losses "$tmp/r2"); then ok "resume after 3 of 6 steps: bitwise-equal losses"
else bad "resume: losses differ"; paste <(losses "$tmp/r1") <(losses "$tmp/r2"); fi

# 3. parity of the first steps with the CPU, each precision
run --config configs/tiny.json --backend cpu --steps 30 --out "$tmp/cpu"
for p in bf16:2e-2 fp16:2e-3 fp32:1e-4; do
  prec=${p%%:*} tol=${p##*:}
  run --config configs/tiny.json --backend cuda --set "train.precision=$prec" --steps 30 --out "$tmp/$prec"
  worst=$(paste <(losses "$tmp/cpu" | head -10) <(losses "$tmp/$prec" | head -10) |
          awk '{d=($2-$1)/$1; if (d<0) d=-d; if (d>m) m=d} END {printf "%.3e", m}')
  if awk -v w="$worst" -v t="$tol" 'BEGIN {exit !(w <= t)}'; then ok "tiny $prec first 10 losses vs cpu: worst rel diff $worst <= $tol"
  else bad "tiny $prec first 10 losses vs cpu: worst rel diff $worst > $tol"; fi
done
first=$(losses "$tmp/bf16" | head -1) last=$(losses "$tmp/bf16" | tail -1)
if awk -v a="$first" -v z="$last" 'BEGIN {exit !(z < a - 0.1)}'; then ok "tiny bf16 learns: loss $first -> $last"
else bad "tiny bf16 does not learn: loss $first -> $last"; fi

# 4. m7c_125m, S=2048: first 3 steps vs the CPU reference
run --config configs/m7c_125m.json --backend cpu --steps 3 --out "$tmp/m_cpu"
run --config configs/m7c_125m.json --backend cuda --steps 3 --out "$tmp/m_cuda"
echo "m7c_125m S=2048 losses (cpu fp32 | cuda bf16):"
paste <(losses "$tmp/m_cpu") <(losses "$tmp/m_cuda")
worst=$(paste <(losses "$tmp/m_cpu") <(losses "$tmp/m_cuda") |
        awk '{d=($2-$1)/$1; if (d<0) d=-d; if (d>m) m=d} END {printf "%.3e", m}')
if awk -v w="$worst" 'BEGIN {exit !(w <= 1e-2)}'; then ok "m7c_125m S=2048 first 3 losses cuda bf16 vs cpu: worst rel diff $worst <= 1e-2"
else bad "m7c_125m S=2048 first 3 losses: worst rel diff $worst > 1e-2"; fi

# 5. --dump-step in every precision: logits are written as F32 (the
#    16-bit values converted exactly), the file is well-formed (tools/st_dump.py checks
#    the structure), and they agree with the CPU's fp32 logits within each precision's
#    tolerance, normwise (before the fix, bf16/fp16 dumps declared F32 over a 2-byte
#    buffer: a heap over-read and logits off by ~1.2 normwise)
run --config configs/tiny.json --backend cpu --steps 1 --dump-step "$tmp/dcpu.st" --out "$tmp/dcpu"
for p in bf16:3e-2 fp16:5e-3 fp32:1e-4; do
  prec=${p%%:*} tol=${p##*:}
  run --config configs/tiny.json --backend cuda --set "train.precision=$prec" --steps 1 --dump-step "$tmp/d$prec.st" \
      --dump-acts --out "$tmp/dd$prec"
  if ! python3 tools/st_dump.py "$tmp/d$prec.st" >/dev/null; then bad "$prec dump is not a well-formed safetensors file"; continue; fi
  res=$(python3 - "$tmp/dcpu.st" "$tmp/d$prec.st" <<'PY'
import json, math, struct, sys
def logits(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    t = h["logits"]; b0, b1 = t["data_offsets"]
    cnt = 1
    for d in t["shape"]: cnt *= d
    assert t["dtype"] == "F32" and b1 - b0 == 4 * cnt, (t["dtype"], b1 - b0, cnt)
    return struct.unpack("<%df" % cnt, raw[8 + n + b0:8 + n + b1])
a, b = logits(sys.argv[1]), logits(sys.argv[2])
num = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b))); den = math.sqrt(sum(x * x for x in a))
print("%.3e" % (num / den))
PY
) || { bad "$prec dump logits unreadable: $res"; continue; }
  if awk -v w="$res" -v t="$tol" 'BEGIN {exit !(w <= t)}'; then ok "tiny $prec --dump-step logits F32 vs cpu: normwise $res <= $tol"
  else bad "tiny $prec --dump-step logits vs cpu: normwise $res > $tol"; fi
done

if [ $fail -eq 0 ]; then echo "cuda_train: all checks passed"; else echo "cuda_train: FAILED"; fi
exit $fail
