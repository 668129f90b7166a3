#!/usr/bin/env bash
# tools/reference/make_golden.sh — regenerate golden/tiny_<phi>_<gate>.safetensors.
#
#   bash tools/reference/make_golden.sh BUILD_DIR [OUT_DIR=golden] [DEVICE=cpu|cuda] [PYTHON=python3]
#
# For each variant (phi avg/mlp x gate softmax/sigmoid) of configs/tiny.json:
#  1. nsa-train (CPU backend) runs one step with train.lr=1e-300, so the checkpoint it
#     saves holds the step-0 weights (AdamW's update rounds away in fp32), and
#     --dump-step writes the step-1 batch and the config;
#  2. tools/reference/nsa_reference.py recomputes logits, loss and every gradient in
#     float64 with PyTorch autograd from those weights and that batch, and writes the
#     golden file (inputs, targets, params.*, logits, loss, grads.*, config, provenance).
set -euo pipefail
build=${1:?usage: make_golden.sh BUILD_DIR [OUT_DIR] [DEVICE] [PYTHON]}
out=${2:-golden}
dev=${3:-cpu}
py=${4:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
for phi in avg mlp; do
  for act in softmax sigmoid; do
    d=$tmp/${phi}_${act}
    mkdir -p "$d"
    cmd=(--config configs/tiny.json --set "nsa.phi=$phi" --set "nsa.gate_act=$act" --set train.lr=1e-300
         --set train.warmup_steps=0 --steps 1 --backend cpu --save "$d/init.safetensors"
         --dump-step "$d/dump.safetensors" --out "$d/run" --quiet)
    "$build/nsa-train" "${cmd[@]}"
    echo "== tiny phi=$phi gate=$act"
    "$py" tools/reference/nsa_reference.py --init "$d/init.safetensors" --dump "$d/dump.safetensors" \
      --out "$out/tiny_${phi}_${act}.safetensors" --device "$dev" \
      --command "nsa-train ${cmd[*]} ; nsa_reference.py --device $dev"
  done
done
