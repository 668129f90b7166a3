#!/usr/bin/env bash
# bench/peers/selftest.sh — what of bench/peers can be checked without a GPU (about 15 s):
#  1. stage.sh exports both peers from their snapshots into a temporary folder (PEERS.txt
#     names two commits) and refuses a bad snapshot path with exit 1;
#  2. bench_peers.py's wrappers import every peer module the timed calls need, with a stand-in
#     triton, a device capability of 9.0, and flash_attn, pandas, einops, pkg_resources and
#     megatron made unimportable (so the wrappers must not need them, and the shims work);
#     sel_keys_per_query counts the keys of a known index tensor;
#  3. usage errors exit 2 without a traceback; without CUDA every case prints a SKIP line;
#  4. run.sh with a stand-in bench_cuda_attn builds the table from ours + peers logs, and
#     table.py turns known SUMMARY lines into the right cells and ratios.
# Needs a python with torch (NSA_TORCH_PYTHON, else python3, else /usr/bin/python3) and the
# snapshots stage.sh defaults to (or FLASH_NSA_GIT / NSA_TRITON_GIT); exit 77 when either is missing.
set -u
export PYTHONDONTWRITEBYTECODE=1   # no __pycache__ left in bench/peers
here=$(cd "$(dirname "$0")" && pwd)
PY=
for c in "${NSA_TORCH_PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$c" ] && "$c" -c 'import torch' 2>/dev/null && { PY=$c; break; }
done
[ -n "$PY" ] || { echo "SKIP: no python with torch"; exit 77; }
fn=${FLASH_NSA_GIT:-/work/.mirror/mdy666+Scalable-Flash-Native-Sparse-Attention/repo}
nt=${NSA_TRITON_GIT:-/work/.mirror/XunhaoLai+native-sparse-attention-triton/repo}
[ -e "$fn" ] && [ -e "$nt" ] || { echo "SKIP: peer snapshots not here ($fn, $nt)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

# 1. staging
bash "$here/stage.sh" "$tmp/peers" --flash-nsa "$fn" --nsa-triton "$nt" > "$tmp/stage.out" 2>&1
[ "$(grep -vc '^#' "$tmp/peers/PEERS.txt")" = 2 ] && [ -f "$tmp/peers/flash_nsa/flash_nsa/ops/select_attn.py" ] &&
  [ -f "$tmp/peers/nsa_triton/native_sparse_attention/ops/triton/compressed_attention.py" ] &&
  ok "stage.sh exports both packages, PEERS.txt has 2 commits" || { bad "stage.sh"; cat "$tmp/stage.out"; }
bash "$here/stage.sh" "$tmp/p2" --flash-nsa "$tmp/nowhere" --nsa-triton "$nt" > "$tmp/stage2.out" 2>&1
[ $? = 1 ] && grep -q "flash_nsa: '$tmp/nowhere' is no git snapshot" "$tmp/stage2.out" &&
  ok "stage.sh names a bad snapshot and exits 1" || { bad "stage.sh bad path"; cat "$tmp/stage2.out"; }

# 2. imports with a stand-in triton, forbidden optional packages
cat > "$tmp/imp.py" <<'EOF'
import sys, types
class D:
    def __call__(self, *a, **k):
        return a[0] if len(a) == 1 and callable(a[0]) and not k else D()
    def __getattr__(self, n): return D()
    def __getitem__(self, k): return D()
class M(types.ModuleType):
    def __getattr__(self, n):
        if n.startswith("__"): raise AttributeError(n)
        return D()
tri = M("triton"); tri.__path__ = []; tri.__version__ = "3.6.0"
tri.jit = lambda f=None, **k: f if f else (lambda g: g)
tri.autotune = tri.heuristics = lambda *a, **k: (lambda g: g)
tri.cdiv = lambda a, b: -(-a // b)
tri.next_power_of_2 = lambda n: 1 << (n - 1).bit_length()
tl = M("triton.language"); tools = M("triton.tools"); tools.__path__ = []; td = M("triton.tools.tensor_descriptor")
tri.language, tri.tools, tools.tensor_descriptor = tl, tools, td
sys.modules.update({"triton": tri, "triton.language": tl, "triton.tools": tools, "triton.tools.tensor_descriptor": td})
import torch
torch.cuda.get_device_capability = lambda *a: (9, 0)
for m in ("flash_attn", "flash_attn_interface", "pandas", "einops", "pkg_resources", "megatron"):
    sys.modules[m] = None
sys.path.insert(0, sys.argv[1])
import bench_peers as bp
for cls in (bp.FlashNSA, bp.NSATriton):
    ad = cls(sys.argv[2])
    assert callable(ad.forward) and ad.check(12, 2, 64) is None and ad.check(64, 4, 128) is None, cls
    print("loaded", ad.name)
print("flash_nsa D=96:", bp.FlashNSA.check(None, 12, 2, 96))
e = sys.modules["einops"].einsum(torch.ones(2, 3, 4), torch.full((2, 3), 2.0), "h k d, h k -> h d")
assert e.shape == (2, 4) and float(e[0, 0]) == 6.0
pr = sys.modules["pkg_resources"]
assert pr.parse_version("3.6.0") >= pr.parse_version("3.4.0") and not pr.parse_version("3.2.0") >= pr.parse_version("3.4.0")
# indices [1 KV head, S=130, n=3]: t=0: {0}; t=64: {0,1}; t=129: {0,1,2} with block 2 = keys 128..129
S = 130
idx = torch.full((1, S, 3), -1, dtype=torch.int32)
for t in range(S):
    for i, j in enumerate(range(t // 64 + 1)):
        idx[0, t, i] = j
idx[0, 5, 2] = 99   # flash_nsa-style pad value (>= blocks): not counted
want = sum(t + 1 for t in range(S)) / S
got = bp.sel_keys_per_query(idx, S)
assert abs(got - want) < 1e-9, (got, want)
# bench_case end to end on the CPU with a stand-in peer (torch.cuda timing calls made no-ops)
for f in ("synchronize", "reset_peak_memory_stats", "empty_cache"):
    setattr(torch.cuda, f, lambda *a, **k: None)
torch.cuda.max_memory_allocated = lambda *a, **k: 3 * 2 ** 30
class Fake:   # a stand-in peer that is right by construction (the reference, rounded to bf16)
    name = "fake"
    calls = 0
    skew = 1.0
    def check(self, H, G, D): return None if D == 64 else "D %d refused" % D
    def setup(self, S, dev): self.S = S
    def forward(self, q, k, v, scale):
        Fake.calls += 1
        # block 0 forced, then blocks 3, 2, 1 where visible; pad 99 (flash_nsa style) and -1
        topk = torch.tensor([0, 3, 2, 1, 99, -1], dtype=torch.int32).view(1, 1, 6).expand(k.shape[1], self.S, 6)
        rc, rs, _ = bp.ref_outputs(q, k, v, topk, scale * self.skew)
        z = (q * 0).to(q.dtype)
        return [rc.to(q.dtype) + z, rs.to(q.dtype) + z], topk
line = bp.bench_case(Fake(), "m7c", 256, 3, 2, 1, device="cpu")
print(line)
assert line.startswith("SUMMARY m7c    S=256    B=1   peer=fake keys/query sel ") and "cmp+sel fwd+bwd " in line, line
assert "median of 3 after 2 warm-up" in line and "peak 3.00 GiB" in line and Fake.calls == 6, (line, Fake.calls)
assert line.endswith(" ok") and "check vs fp32 torch: cmp rel " in line, line
Fake.skew = 1.5   # a wrapper passing the wrong softmax scale is caught
bad = bp.bench_case(Fake(), "m7c", 256, 1, 1, 1, device="cpu")
assert bad.endswith(" MISMATCH"), bad
nochk = bp.bench_case(Fake(), "m7c", 256, 1, 1, 1, device="cpu", check_max_s=0)
assert "check vs" not in nochk, nochk
Fake.skew = 1.0
want = sum(min(t + 1, 256) for t in range(256)) / 256   # S=256: blocks 0..3 all listed: every key <= t
assert " sel %.0f |" % want in line, (want, line)
refused = bp.bench_case(Fake(), "paper", 256, 3, 2, 1, device="cpu")
assert refused == "SUMMARY paper  S=256    B=1   peer=fake | SKIP: D 128 refused", refused
print("imports and helpers ok")
EOF
"$PY" "$tmp/imp.py" "$here" "$tmp/peers" > "$tmp/imp.out" 2>&1
grep -q "loaded flash_nsa" "$tmp/imp.out" && grep -q "loaded nsa_triton" "$tmp/imp.out" && grep -q "imports and helpers ok" "$tmp/imp.out" &&
  grep -q "pkg_resources is missing here: shim" "$tmp/imp.out" && grep -q "einops is missing here: shim" "$tmp/imp.out" &&
  grep -q "flash_nsa D=96: head dim 96 is not a power of two" "$tmp/imp.out" &&
  ok "wrappers import both peers without flash_attn/pandas/einops/pkg_resources; shims and key count right" ||
  { bad "imports"; cat "$tmp/imp.out"; }

# 3. usage errors and the no-CUDA path
for args in "--peers $tmp/peers --S 20x" "--peers $tmp/peers --shape huge" "--peers $tmp/none" "--peers $tmp/peers --only x" "--peers $tmp/peers --reps 0"; do
  # shellcheck disable=SC2086
  "$PY" "$here/bench_peers.py" $args > "$tmp/u.out" 2>&1
  st=$?
  [ $st = 2 ] && ! grep -q Traceback "$tmp/u.out" && grep -q "^bench_peers.py: --" "$tmp/u.out" &&
    ok "bench_peers.py $args: exit 2, $(head -c 70 "$tmp/u.out")" || { bad "usage $args (status $st)"; cat "$tmp/u.out"; }
done
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  "$PY" "$here/bench_peers.py" --peers "$tmp/peers" --S 2048,8192 --shape both --reps 1 > "$tmp/p.out" 2>&1
  [ "$(grep -c '^SUMMARY .* peer=.* | SKIP: ' "$tmp/p.out")" = 8 ] && ok "no CUDA: 8 SKIP lines (2 peers x 2 shapes x 2 S)" ||
    { bad "no-CUDA SKIP lines"; cat "$tmp/p.out"; }
fi

# a child that hangs is stopped at its share of the budget + grace; the next peer still runs
sed 's/^def child_main(a):$/def child_main(a):\n    print(case_head("m7c", 2048, a.child) + " keys\/query sel 1 | cmp+sel fwd+bwd 1.000 ms", flush=True)\n    time.sleep(60)/' \
  "$here/bench_peers.py" > "$tmp/bp_hang.py"
"$PY" "$tmp/bp_hang.py" --peers "$tmp/peers" --S 2048,8192 --shape m7c --budget-s 4 --grace-s 1 > "$tmp/h.out" 2>&1
[ "$(grep -c 'S=8192 .*| SKIP: time budget (--budget-s) spent; the case in flight was stopped' "$tmp/h.out")" = 2 ] &&
  [ "$(grep -c 'S=2048 .*cmp+sel fwd+bwd 1.000 ms' "$tmp/h.out")" = 2 ] &&
  ok "a hanging peer is stopped at its share of --budget-s, the case named, the next peer runs" || { bad "budget"; cat "$tmp/h.out"; }

# 4. table from known lines, and run.sh end to end with a stand-in bench_cuda_attn
cat > "$tmp/ours.log" <<'EOF'
SUMMARY m7c    S=2048   B=1   keys/query cmp 63 sel 993 win 456 | cmp+sel fwd+bwd 0.691 ms | all NSA fwd+bwd 1.000 ms | dense causal fwd+bwd 2.000 ms | dense/NSA 2.00x
SUMMARY paper  S=65536  B=1   keys/query cmp 2047 sel 1023 win 512 | cmp+sel fwd+bwd 230.900 ms | all NSA fwd+bwd 240.000 ms | dense causal fwd+bwd 1500.000 ms | dense/NSA 6.25x
EOF
cat > "$tmp/peers.log" <<'EOF'
SUMMARY m7c    S=2048   B=1   peer=flash_nsa keys/query sel 993 | cmp+sel fwd+bwd 4.670 ms | fwd 1.000 ms | bwd 3.670 ms | check vs fp32 torch: cmp rel 3.1e-03 sel rel 4.0e-03 ok
SUMMARY m7c    S=2048   B=1   peer=nsa_triton | SKIP: AssertionError: too big
SUMMARY paper  S=65536  B=1   peer=flash_nsa keys/query sel 1023 | cmp+sel fwd+bwd 115.300 ms | fwd 40.000 ms | bwd 75.300 ms
SUMMARY paper  S=65536  B=1   peer=nsa_triton keys/query sel 1022 | cmp+sel fwd+bwd 160.000 ms | fwd 60.000 ms | bwd 100.000 ms
EOF
"$PY" "$here/table.py" --ours "$tmp/ours.log" --peers-log "$tmp/peers.log" > "$tmp/t.md" 2>&1
grep -qF "| paper: 64 q / 4 KV, D 128, top-16 × 64 | 65,536 | 230.9 | **115.3** | 160.0 | 0.50× | 0.69× | 1023 / 1023 / 1022 |" "$tmp/t.md" &&
  grep -qF "| m7c: 12 q / 2 KV, D 64 | 2,048 | **0.69** | 4.67 | — | 6.76× | — | 993 / 993 / — |" "$tmp/t.md" &&
  grep -qF -- "- NSA-triton, m7c, S=2048: AssertionError: too big" "$tmp/t.md" &&
  grep -qF "flash_nsa m7c S=2048 ok (cmp rel 3.1e-03 sel rel 4.0e-03)" "$tmp/t.md" &&
  ok "table.py: cells, bold fastest, ratios peer/ours, SKIP reason listed" || { bad "table.py"; cat "$tmp/t.md"; }
mkdir -p "$tmp/build/bench"
printf '#!/bin/sh\necho "args: $*" >&2\ncat %s\n' "$tmp/ours.log" > "$tmp/build/bench/bench_cuda_attn"
chmod +x "$tmp/build/bench/bench_cuda_attn"
PYTHON=$PY S=2048 SHAPE=m7c REPS=1 BUDGET=200 PEER_RESERVE=60 bash "$here/run.sh" "$tmp/build" "$tmp/peers" "$tmp/out" > "$tmp/run.out" 2>&1
grep -q "args: --S 2048 --shape m7c --reps 1 --no-dense" "$tmp/run.out" && [ -s "$tmp/out/table.md" ] &&
  grep -qF "| m7c: 12 q / 2 KV, D 64 | 2,048 | 0.69 |" "$tmp/out/table.md" && [ -s "$tmp/out/peers.log" ] && [ -s "$tmp/out/env.txt" ] &&
  ok "run.sh: ours with the given S/shape/reps, peers, table.md in OUT" || { bad "run.sh"; cat "$tmp/run.out"; }
bash "$here/run.sh" "$tmp/build" "$tmp/nope" "$tmp/out2" > "$tmp/run2.out" 2>&1
[ $? = 2 ] && grep -q "has no PEERS.txt" "$tmp/run2.out" && ok "run.sh: unstaged DEST exits 2" || { bad "run.sh DEST"; cat "$tmp/run2.out"; }

echo "selftest: $pass passed, $fail failed"
[ $fail = 0 ]
