#!/usr/bin/env bash
# bench/run_cpu.sh — CPU step time of the tiny config and of one m7c_125m step at S=2048.
# Usage: bash bench/run_cpu.sh [build dir]   (from the repo root; builds nothing)
# Prints a Markdown table row per measurement to paste into bench/RESULTS.md.
# FLOPs per token (training, forward+backward = 3x forward) are counted from the config:
#   dense:  6 * (matmul parameters)  — every weight matrix is used once per token forward
#   NSA:    per query head, forward QK^T + PV = 4*D per key: compressed keys (visible blocks),
#           selected keys (<= n*l'), window keys (<= w), averaged over positions; x3 for training
set -euo pipefail
BUILD=${1:-build}
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
threads=$(nproc)
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
when=$(date -u +%Y-%m-%d)
sha=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)

run() {  # name config steps extra-args...
  local name=$1 cfg=$2 steps=$3; shift 3
  "$BUILD/nsa-train" --config "$cfg" --steps "$steps" --out "$TMP/$name" --quiet "$@"
  python3 - "$TMP/$name/metrics.jsonl" "$cfg" "$name" "$threads" "$cpu" "$when" "$sha" "$*" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
cfg = json.load(open(sys.argv[2]))
name, threads, cpu, when, sha, extra = sys.argv[3:9]
m, n = cfg["model"], cfg["nsa"]
C, L, H, G, D, F, V = (m[k] for k in ("dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim", "vocab_size"))
T = cfg.get("train", {}).get("seq_len", m["max_seq_len"])
for kv in extra.split("--set")[1:]:
    k, v = kv.strip().split("=", 1)
    if k == "train.seq_len": T = int(v)
gh = n.get("gate_hidden", C // 4)
mat = V * C + L * (H * D * C + 6 * G * D * C + C * H * D + gh * C + 3 * G * gh + 3 * F * C)
l, d, ls, nn, w = n["l"], n["d"], n["l_sel"], n["n"], n["w"]
keys = 0
for t in range(T):
    keys += (max(0, (t - l + 1) // d + 1) if t >= l - 1 else 0) + min((t // ls + 1) * ls, nn * ls, t + 1) + min(w, t + 1)
attn = 3 * L * H * 4 * D * keys / T
flops_tok = 6 * mat + attn
steps = rows[1:] if len(rows) > 1 else rows      # drop the first (warm-up) step when we can
ms = statistics.median(r["ms"] for r in steps)
tok = rows[0]["tokens"]
print(f"| {name} | {cpu} | {threads} | {when} | {sha} | {ms:.1f} ms | {tok / ms * 1e3:,.0f} | "
      f"{flops_tok * tok / ms / 1e6:.1f} GFLOP/s | `nsa-train --config {sys.argv[2]} --steps {len(rows)} {extra}` |")
PY
}
echo "| run | CPU | threads | date | commit | step time (median) | tok/s | achieved | command |"
echo "|---|---|---|---|---|---|---|---|---|"
run tiny configs/tiny.json 30
run m7c_125m_S2048 configs/m7c_125m.json 2
