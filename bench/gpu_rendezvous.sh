#!/usr/bin/env bash
# bench/gpu_rendezvous.sh — the nccl transport started WITHOUT MPI (the env bootstrap: torchrun-
# style variables and nsa-train's own TCP rendezvous, docs/ddp.md "Bootstraps") on a GPU
# machine, held bitwise to the same runs started by mpirun. One GPU run:
#
#   PHASES="build check w1 harness w2" BUDGET=540 bash bench/gpu_rendezvous.sh
#
# Phases, in this order (each step logs to its own file, a failing step never stops the next,
# every step is cut at the deadline, BUDGET seconds after the start, default 540):
#   build  configure (sm_90a, -Werror) and build nsa-train
#   check  --check-world with 2 ranks: env bootstrap (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT,
#          127.0.0.1) and mpirun -np 2 (the mpi bootstrap): both exit 0, one [WORLD] line a rank
#   w1     world size 1, tiny config, cuda backend, 3 steps, --dump-step, for ddp_mode default
#          and static_graph:
#            RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=P nsa-train --transport nccl ...
#          against  mpirun -np 1 nsa-train --transport nccl ...  : the losses and grad norms of
#          metrics.jsonl (%.17g), the end-of-run weight digest ([DDP] ... fnv1a64) and the
#          step-1 dump file must be bitwise equal
#   harness  the runner's launchers: nsa-harness run scenarios/launchers.json --profile gpu
#          (ddp_onestep's 125M case, world size 1 over NCCL, started by mpirun and by the env
#          launcher: finite, every gradient arrived, loss and grad norm bitwise equal)
#   w2     2 ranks sharing GPU 0 (CUDA_VISIBLE_DEVICES=0 for both):
#            plain    env and mpirun: NCCL is expected to refuse two ranks on one device
#                     ("Duplicate GPU detected"): the step records what each launcher's ranks
#                     printed (exit 4 or 1 with the NCCL message is the expected outcome)
#            hostid   the same with NCCL_HOSTID=nsa-rank<R> per rank, so that NCCL takes the
#                     ranks for two hosts (socket transport, no duplicate check): env against
#                     mpirun, ddp_mode default and static_graph (the control plane over the
#                     rendezvous star with 2 ranks: loss, used-set allgather, static check,
#                     weight check), bitwise as in w1
# Logs: $OUT/rendezvous_logs.tgz. Run from the repository root with .deps staged
# (tools/device-deps.sh), as root: mpirun needs OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM), set here.
set -u
# ---- sub-commands (one launch each; the phases below call them through gpu_lib's step) ----
BIN=${BIN:-${BUILD:-build}/nsa-train}
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
    echo $((30000 + RANDOM % 20000))
}
if [ "${1:-}" = __env ] || [ "${1:-}" = __mpi ]; then
  # __env|__mpi DIR WORLD HOSTID(0|1) ARGS...: WORLD ranks of nsa-train --transport nccl on GPU 0
  how=$1 d=$2 w=$3 hid=$4
  shift 4
  mkdir -p "$d"
  export CUDA_VISIBLE_DEVICES=0
  if [ "$how" = __env ]; then
    port=$(free_port)
    echo "env bootstrap: WORLD_SIZE=$w MASTER_ADDR=127.0.0.1 MASTER_PORT=$port"
    pids=()
    for ((r = 0; r < w; r++)); do
      extra=()
      [ "$hid" = 1 ] && extra=(NCCL_HOSTID=nsa-rank$r)
      env "${extra[@]}" RANK=$r WORLD_SIZE=$w MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "$BIN" "$@" --transport nccl --out "$d" --log-file "$d/rank_%r.log" &
      pids+=($!)
    done
    rc=0
    for r in "${!pids[@]}"; do
      wait "${pids[$r]}"; c=$?
      echo "rank $r exit $c"
      [ $c != 0 ] && rc=$c
    done
    exit $rc
  fi
  MPIRUN=(mpirun --oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none
          -x NCCL_NVLS_ENABLE -x NCCL_DEBUG -x CUDA_VISIBLE_DEVICES -x PATH -x LD_LIBRARY_PATH)
  if [ "$hid" = 1 ]; then
    exec "${MPIRUN[@]}" -np "$w" bash -c 'NCCL_HOSTID=nsa-rank$OMPI_COMM_WORLD_RANK exec "$0" "$@"' \
      "$BIN" "$@" --transport nccl --out "$d" --log-file "$d/rank_%r.log"
  fi
  exec "${MPIRUN[@]}" -np "$w" "$BIN" "$@" --transport nccl --out "$d" --log-file "$d/rank_%r.log"
fi

# ---- the run ------------------------------------------------------------------------------------
. "$(dirname "$0")/gpu_lib.sh"   # gpu_run_begin, has, step
gpu_run_begin "build check w1 harness w2" 540
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# launcher variables of the calling environment are not this run's
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT NSA_BOOTSTRAP NSA_RDZV_PORT NSA_RDZV_TOKEN \
      SLURM_PROCID SLURM_NTASKS SLURM_LOCALID TORCHELASTIC_USE_AGENT_STORE
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
export BIN
TINY=(--config configs/tiny.json --backend cuda --steps 3 --set train.bucket_mb=0.05 --comm-timeout 120
      --rdzv-timeout 60)
result() { SUM+=("$(printf '%-24s %s' "$1" "$2")"); }

# bitwise: losses and grad norms as written (%.17g), the weight digest, the step-1 dump
compare() {   # NAME DIR_ENV DIR_MPI
  local name=$1 a=$2 b=$3
  local out
  out=$(python3 - "$a" "$b" <<'PY' 2>&1
import glob, re, sys
def get(d):
    txt = open(d + "/metrics.jsonl").read()
    losses = re.findall(r'"loss": ([^,]+)', txt)
    gn = re.findall(r'"grad_norm": ([^,]+)', txt)
    w = None
    for f in sorted(glob.glob(d + "/rank_*.log")):
        for l in open(f):
            m = re.search(r"weights after step \d+ are bitwise identical on all \d+ ranks \(fnv1a64 ([0-9a-f]+)\)", l)
            if m: w = m.group(1)
    return losses, gn, w
try:
    a, b = get(sys.argv[1]), get(sys.argv[2])
except OSError as e:
    print("DIFFER (a run left no %s)" % e.filename)
    sys.exit(1)
same = a == b and len(a[0]) == 3 and a[2] is not None
print(("EQUAL" if same else "DIFFER") + " losses %s / %s, weights %s / %s" % (",".join(a[0]), ",".join(b[0]), a[2], b[2]))
sys.exit(0 if same else 1)
PY
)
  local rc=$?
  if [ -f "$a/step1.safetensors" ] || [ -f "$b/step1.safetensors" ]; then
    if cmp -s "$a/step1.safetensors" "$b/step1.safetensors"; then out="$out; dump EQUAL"; else out="$out; dump DIFFER"; rc=1; fi
  fi
  result "$name" "$([ $rc = 0 ] && echo PASS || echo FAIL) env == mpirun bitwise: $out"
  echo "$name: $out" >>"$LOG/compare.txt"
}

{ nvidia-smi; date -u; git rev-parse HEAD 2>/dev/null; } >"$LOG/device.txt" 2>&1

if has build; then
  # WERROR=OFF: warnings are listed in the summary but do not cost the run its results
  step configure 120 cmake -S . -B "$B" -DCMAKE_CUDA_ARCHITECTURES=90a -DNSA_WERROR=${WERROR:-ON}
  step build 420 cmake --build "$B" -j16 --target nsa-train nsa-harness
fi
"$BIN" --print-env >"$LOG/print_env.json" 2>&1

if has check; then
  P=$(free_port)
  step check_env 60 bash -c "RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P '$BIN' --check-world & \
    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P '$BIN' --check-world; r0=\$?; wait \$!; r1=\$?; \
    echo \"exit \$r0 \$r1\"; [ \$r0 = 0 ] && [ \$r1 = 0 ]"
  step check_mpi 60 mpirun --oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none \
    -np 2 "$BIN" --check-world
fi

if has w1; then
  for mode in default static_graph; do
    step "env1_$mode" 120 bash "$SELF" __env "$LOG/env1_$mode" 1 0 "${TINY[@]}" --set train.ddp_mode=$mode \
      --dump-step "$LOG/env1_$mode/step1.safetensors"
    step "mpi1_$mode" 120 bash "$SELF" __mpi "$LOG/mpi1_$mode" 1 0 "${TINY[@]}" --set train.ddp_mode=$mode \
      --dump-step "$LOG/mpi1_$mode/step1.safetensors"
    compare "w1 $mode" "$LOG/env1_$mode" "$LOG/mpi1_$mode"
  done
fi

if has harness; then
  step launchers 300 "./$B/nsa-harness" run scenarios/launchers.json --profile gpu --out "$LOG/launchers" --quiet
  while IFS= read -r row; do result "launchers" "$row"; done < <(grep -E '^\| launchers \|' "$LOG/launchers/RESULTS.md" 2>/dev/null | cut -c1-230)
fi

if has w2; then
  # plain: what NCCL says about two ranks on one GPU, under each launcher
  step env2_plain 120 bash "$SELF" __env "$LOG/env2_plain" 2 0 "${TINY[@]}"
  step mpi2_plain 120 bash "$SELF" __mpi "$LOG/mpi2_plain" 2 0 "${TINY[@]}"
  for k in env2_plain mpi2_plain; do
    msg=$(grep -hE "Duplicate GPU|ncclCommInitRankConfig|COMM-|invalid usage|error" "$LOG/$k"/rank_*.log "$LOG/$k.log" 2>/dev/null |
          head -2 | tr '\n' ' ' | cut -c1-220)
    result "$k" "${msg:-(no NCCL message: see $k.log)}"
  done
  for mode in default static_graph; do
    step "env2_hostid_$mode" 150 bash "$SELF" __env "$LOG/env2_hostid_$mode" 2 1 "${TINY[@]}" --set train.ddp_mode=$mode
    step "mpi2_hostid_$mode" 150 bash "$SELF" __mpi "$LOG/mpi2_hostid_$mode" 2 1 "${TINY[@]}" --set train.ddp_mode=$mode
    compare "w2 hostid $mode" "$LOG/env2_hostid_$mode" "$LOG/mpi2_hostid_$mode"
  done
fi

(cd "$(dirname "$LOG")" && find logs -name '*.safetensors' -delete; tar czf "$OUT/rendezvous_logs.tgz" logs) 2>/dev/null
echo "================ summary ================"
grep -E "H100|H200" "$LOG/device.txt" | head -2
python3 -c 'import json,sys; e=json.load(open(sys.argv[1])); print("nccl", e.get("nccl"), "| mpi", e.get("mpi"))' \
  "$LOG/print_env.json" 2>/dev/null
printf '%s\n' "${SUM[@]}"
[ -f "$LOG/build.log" ] && grep -E "error|warning" "$LOG/build.log" | head -10
for f in check_env check_mpi; do [ -f "$LOG/$f.log" ] && { echo "---- $f"; grep -E "^\[WORLD\]|exit|rror" "$LOG/$f.log" | head -4; }; done
for d in "$LOG"/env2_hostid_default "$LOG"/env1_default; do
  [ -d "$d" ] && { echo "---- $(basename "$d") rank 0"; grep -E "joined a world|\[DDP\] world|\[DDP\] weights|^step " "$d/rank_0.log" | head -6; }
done
echo "logs: $OUT/rendezvous_logs.tgz"
