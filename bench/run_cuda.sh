#!/usr/bin/env bash
# bench/run_cuda.sh BUILD_DIR [BATCHES="1 2 4 8 16"] [STEPS=10] — end-to-end training
# throughput of m7c_125m at S=2048 on the CUDA backend (bf16), one line per batch size:
# median step time over steps 3..STEPS (steps 1-2 are warm-up: cuBLASLt plans, first
# allocations), tok/s, achieved model TFLOP/s and MFU, and the device memory the backend
# held at its peak (NSA_CUDA_STATS; excludes the CUDA context and cuBLASLt's 64 MiB
# workspace) next to nvidia-smi's reading of the whole process where available.
# Model FLOPs per trained token: 851.2e6 (bench/RESULTS.md: 6 x 118.3 M matmul weights
# + 141 M of NSA attention at S = 2048). MFU against the H100 SXM dense bf16 peak of
# 989.4 TFLOP/s, and against the 798 TFLOP/s a large bf16 GEMM measured on this device.
set -u
b=${1:?usage: run_cuda.sh BUILD_DIR [BATCHES] [STEPS] [extra nsa-train args...]}
batches=${2:-1 2 4 8 16}
steps=${3:-10}
shift 3 2>/dev/null || shift $#
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flops=851.2e6
printf "%-6s %10s %12s %10s %8s %8s %12s\n" "batch" "step ms" "tok/s" "TFLOP/s" "MFU989" "MFU798" "peak GiB"
for B in $batches; do
  o=$tmp/b$B
  NSA_CUDA_STATS=1 "$b/nsa-train" --config configs/m7c_125m.json --backend cuda --set train.batch_size=$B \
    --steps "$steps" --out "$o" --quiet "$@" 2> "$tmp/err$B" || { echo "B=$B failed: $(tail -3 "$tmp/err$B")"; continue; }
  ms=$(sed -n 's/.*"ms": \([0-9.]*\),.*/\1/p' "$o/metrics.jsonl" | tail -n +3 | sort -g |
       awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
  peak=$(sed -n 's/.*peak device memory held by the backend \([0-9.]*\) GiB.*/\1/p' "$tmp/err$B")
  awk -v B="$B" -v ms="$ms" -v f="$flops" -v pk="$peak" 'BEGIN {
    tok = B * 2048 / (ms / 1000); tf = tok * f / 1e12;
    printf "%-6d %10.1f %12.0f %10.1f %7.1f%% %7.1f%% %12s\n", B, ms, tok, tf, 100 * tf / 989.4, 100 * tf / 798, pk }'
done
