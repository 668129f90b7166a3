#!/usr/bin/env bash
# bench/gpu_scaling.sh BUILD_DIR [COUNTS="1 2 4 8"] [B=16] [STEPS=10] — data-parallel scaling of
# m7c_125m at S = 2048 over NCCL. For each rank count n in COUNTS that the
# machine has GPUs for: n ranks through mpirun, --transport nccl, batch B per rank (global batch
# n B), STEPS steps. One line per n: the median step time of rank 0 over steps 3..STEPS (1-2 are
# warm-up), global tok/s, tok/s per GPU, the speedup over the smallest n, the efficiency of the
# doubling from n/2 (tok/s(n) / (2 tok/s(n/2))), and rank 0's mean wait in collectives per step.
# The goal: efficiency >= 0.95 at 2 GPUs and >= 0.9 at 8.
#
# The same script on the CPU checks its own plumbing (tests/cli/scaling.sh):
#   CONFIG=configs/tiny.json BACKEND=cpu TRANSPORT=mpi bash bench/gpu_scaling.sh build "1 2 4" 2 4
# Env: CONFIG (configs/m7c_125m.json), BACKEND (cuda), TRANSPORT (nccl), CSV=FILE (also write the
# table as CSV). Exit 0 when every count that fits ran, 1 when one failed or none fits, 2 on bad
# arguments.
set -u
b=${1:?usage: gpu_scaling.sh BUILD_DIR [COUNTS] [B] [STEPS]}
counts=${2:-1 2 4 8} B=${3:-16} steps=${4:-10}
config=${CONFIG:-configs/m7c_125m.json} backend=${BACKEND:-cuda} transport=${TRANSPORT:-nccl}
bin="$b/nsa-train"
[ -x "$bin" ] || { echo "gpu_scaling.sh: $bin is not built" >&2; exit 2; }
for v in $counts "$B" "$steps"; do
  case $v in ''|*[!0-9]*|0) echo "gpu_scaling.sh: counts, B and STEPS want positive integers, got '$v'" >&2; exit 2 ;; esac
done
[ "$steps" -ge 3 ] || { echo "gpu_scaling.sh: STEPS must be >= 3 (steps 1-2 are warm-up), got $steps" >&2; exit 2; }
command -v mpirun >/dev/null 2>&1 || { echo "gpu_scaling.sh: mpirun not found" >&2; exit 2; }
ngpu=$("$bin" --print-env | python3 -c 'import json,sys; e=json.load(sys.stdin); print(len((e.get("cuda") or {}).get("devices") or []))')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_NVLS_ENABLE=0   # no NVLink multicast on shared hosts (the device docs)
MPIRUN=(mpirun --oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none
        -x NCCL_NVLS_ENABLE -x PATH -x LD_LIBRARY_PATH)
echo "# $(date -u +%FT%TZ) $config backend $backend transport $transport, batch $B per rank, $steps steps;" \
     "GPUs here: $ngpu; $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
printf "%-5s %9s %12s %12s %8s %10s %12s\n" "ranks" "step ms" "tok/s" "tok/s/rank" "speedup" "doubling" "comm ms/step"
[ -n "${CSV:-}" ] && echo "ranks,step_ms,tok_per_s,tok_per_s_per_rank,speedup,doubling_efficiency,comm_wait_ms" > "$CSV"
fail=0 ran=0
first=""
declare -A tps
for n in $counts; do
  if [ "$backend" = cuda ] && [ "$n" -gt "$ngpu" ]; then echo "$n     (skipped: $ngpu GPUs here)"; continue; fi
  o="$tmp/n$n"
  timeout -k 5 900 "${MPIRUN[@]}" -np "$n" "$bin" --config "$config" --backend "$backend" --transport "$transport" \
    --set train.batch_size="$B" --set train.warmup_steps=0 --steps "$steps" --out "$o" --log-file "$o/rank_%r.log" \
    --comm-timeout 300 --quiet >"$tmp/n$n.out" 2>&1
  rc=$?
  if [ $rc != 0 ] || [ ! -s "$o/metrics.jsonl" ]; then
    echo "$n     FAILED (exit $rc): $(tail -2 "$tmp/n$n.out" | tr '\n' ' ')"; fail=1; continue
  fi
  read -r ms tok wait < <(python3 - "$o/metrics.jsonl" <<'PY'
import json, statistics, sys
m = [json.loads(l) for l in open(sys.argv[1])][2:]   # steps 3.. (1-2: warm-up)
ms = statistics.median(x["ms"] for x in m)
print(f"{ms:.3f} {statistics.median(x['tokens'] for x in m) / (ms / 1e3):.1f} {sum(x.get('comm_wait_ms', 0) for x in m) / len(m):.2f}")
PY
)
  tps[$n]=$tok
  ran=$((ran + 1))
  [ -z "$first" ] && first=$n
  out=$(python3 -c "
n, tok, ms, wait, f, tf = $n, $tok, $ms, $wait, $first, ${tps[$first]}
half = ${tps[$((n / 2))]:-0} if n % 2 == 0 else 0
sp = tok / tf * f
d = f'{tok / (2 * half):.3f}' if half else '-'
print(f'{n:<5d} {ms:9.2f} {tok:12.0f} {tok / n:12.0f} {sp:7.2f}x {d:>10s} {wait:12.2f}')
print(f'{n},{ms},{tok},{tok / n:.1f},{sp:.3f},{d},{wait}')")
  echo "${out%%$'\n'*}"
  [ -n "${CSV:-}" ] && echo "${out##*$'\n'}" >> "$CSV"
done
[ $ran -gt 0 ] || { echo "gpu_scaling.sh: no rank count ran (GPUs here: $ngpu)" >&2; exit 1; }
exit $fail
