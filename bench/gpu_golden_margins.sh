#!/usr/bin/env bash
# bench/gpu_golden_margins.sh — on a GPU machine: how far honest implementation
# differences and planted one-line changes move the golden scenario (gpu profile) from the
# committed baselines of this GPU model, in tolerance mode (docs/regression.md,
# "Tolerances"). Needs a built tree (bench/gpu_regression.sh PHASES=build) and .deps.
#
#   CASES="base win mlp" bash bench/gpu_golden_margins.sh
#
# Honest: the same build with NSA_CUDA_SEL_PACK=0 (another tiling of the selected-branch
# kernels: other summation order) and NSA_CUDA_ATTN=simple (the reference-style attention
# kernels). Planted, each in a copy of the sources built CUDA-on: the window's key test
# admits t - w (one key too many) in the tensor-core kernels; AdamW without its first
# moment's bias correction. Prints per run: verdicts, worst loss and tensor differences.
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
B=${BUILD:-build}
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig:${PKG_CONFIG_PATH:-}
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
W=$(mktemp -d)
# the baselines with a fingerprint id no build has: every run is judged in tolerance mode
cp -r golden/baselines "$W/tolbl"
find "$W/tolbl" -name '*.json' -exec sed -i 's/"fingerprint_id": "[0-9a-f]*"/"fingerprint_id": "0000000000000000"/' {} +
sel=()
for c in ${CASES:-base win mlp}; do sel+=(--case "golden_regression/variant=$c"); done
report() {   # NAME DIR: one line per case from summary.json
  python3 - "$2/summary.json" "$1" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
for c in s["cases"]:
    f = c["facts"]
    print("%-14s %-20s %-5s mode=%-9s cause=%-9s step=%-4s worst_loss=%.3g worst_tensor=%.3g" % (
        sys.argv[2], c["case"], c["verdict"], f.get("golden_mode"), f.get("golden_cause"),
        f.get("golden_first_diverging_step"), f.get("golden_worst_loss_rel", -1), f.get("golden_worst_tensor_rel", -1)))
PY
}
run() {   # NAME TRAINER [ENV...]
  local name=$1 tr=$2; shift 2
  env "$@" "./$B/nsa-harness" run scenarios/golden_regression.json --profile gpu --baselines "$W/tolbl" \
    --trainer "$tr" "${sel[@]}" --out "$W/$name" --quiet > "$W/$name.log" 2>&1
  report "$name" "$W/$name" | tee -a "$OUT/margins.txt"
}
plant() {   # NAME FILE SED: a copy of the sources with one line changed, CUDA build of nsa-train
  local name=$1 file=$2 expr=$3 d=$W/src_$1
  mkdir -p "$d" && tar --exclude=./build --exclude=./reports --exclude=./.deps --exclude=./gpu-out -cf - . | tar -xf - -C "$d"
  sed -i "$expr" "$d/$file"
  cmp -s "$d/$file" "$file" && { echo "plant $name: sed changed nothing" | tee -a "$OUT/margins.txt"; return 1; }
  cmake -S "$d" -B "$d/build" -DCMAKE_CUDA_ARCHITECTURES=90 > "$W/cfg_$name.log" 2>&1 &&
    cmake --build "$d/build" -j16 --target nsa-train > "$W/build_$name.log" 2>&1 ||
    { echo "plant $name: build failed" | tee -a "$OUT/margins.txt"; tail -5 "$W/build_$name.log"; return 1; }
  run "$name" "$d/build/nsa-train"
}
: > "$OUT/margins.txt"
run same_build "./$B/nsa-train"
run sel_pack0 "./$B/nsa-train" NSA_CUDA_SEL_PACK=0
run attn_simple "./$B/nsa-train" NSA_CUDA_ATTN=simple
plant win_key kernels/cuda/attn_tiles.cuh 's/if (BR == BR_WIN) return s <= t \&\& s > t - a.w;/if (BR == BR_WIN) return s <= t \&\& s >= t - a.w;/'
plant adamw trainer/optim.c 's/double bc1 = 1.0 - pow(c->beta1, (double)o->t)/double bc1 = 1.0/'
echo "================ margins (tolerance mode; gpu tolerances: loss 3e-2, tensor 1e-1) ================"
cat "$OUT/margins.txt"
