#!/usr/bin/env bash
# tests/cli/rendezvous.sh BUILD_DIR — nsa-train's bootstraps without MPI
# (docs/ddp.md "Bootstraps"): several `nsa-train --check-world` processes on 127.0.0.1 that
# find each other through the TCP rendezvous, with torchrun-style or Slurm variables. No
# GPU, no MPI. Asserts:
#   1. 3 ranks (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT; rank 2 started before rank 0, so
#      it retries): exit 0, one [WORLD] line each with its rank, world 3, local ranks 0-2
#      of 3 (derived: one host), bootstrap env, every rank's address, and the same id (the
#      digest of rank 0's broadcast bytes) on every rank
#   2. LOCAL_RANK / LOCAL_WORLD_SIZE as given
#   3. Slurm: SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID, rank 0's host = the first host of
#      SLURM_STEP_NODELIST in compressed notation (over SLURM_JOB_NODELIST), the port
#      20000 + SLURM_JOB_ID % 10000: bootstrap slurm, exit 0
#   4. a peer that never arrives: rank 0 exits 4 with "[COMM-TIMEOUT] ... 1 of 2 ranks
#      never arrived within 2 s (missing: rank 1)" within 2..4 s (--rdzv-timeout 2)
#   5. rank 0 that never comes: rank 1 exits 4 naming 127.0.0.1:PORT within 2..4 s
#      (NSA_RDZV_TIMEOUT=2)
#   6. a port already in use (another rank 0 listens there): exit 1 at once naming the
#      port and "Address already in use"; the holder goes on and completes its world
#   7. another WORLD_SIZE: both exit 2 naming rank 1 and both sizes
#   8. a duplicate RANK: all three exit 2 with "rank 1 arrived twice"
#   9. usage: RANK not below WORLD_SIZE, RANK without WORLD_SIZE, no MASTER_ADDR, a bad
#      --bootstrap, --rank that contradicts RANK, --bootstrap without a world, the mpi
#      transport under --bootstrap env: exit 2 naming the variable or flag
#  10. --check-world without variables: one rank, exit 0; WORLD_SIZE=2 with --transport
#      none trains alone with a warning
# Usage: bash tests/cli/rendezvous.sh <build dir>  (from the repo root). About 10 s.
set -u
BUILD=${1:?usage: rendezvous.sh BUILD_DIR}
BIN="$BUILD/nsa-train"
if [ ! -x "$BIN" ]; then echo "SKIP: $BIN is not built"; exit 77; fi
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, finish
T0=$SECONDS
# whatever launcher variables the calling environment has are not this test's
CLEAR=()
for v in RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT NSA_RDZV_PORT NSA_RDZV_TOKEN \
         NSA_RDZV_TIMEOUT NSA_BOOTSTRAP NSA_COMM_TIMEOUT TORCHELASTIC_RUN_ID TORCHELASTIC_USE_AGENT_STORE \
         SLURM_PROCID SLURM_NTASKS SLURM_STEP_NUM_TASKS SLURM_NPROCS SLURM_LOCALID SLURM_JOB_NODELIST \
         SLURM_STEP_NODELIST SLURM_NODELIST SLURM_JOB_ID SLURM_STEP_ID OMPI_COMM_WORLD_RANK PMIX_RANK PMI_RANK; do
  CLEAR+=(-u "$v")
done

# a free TCP port (in [LO, HI] if given): bound once, released, then used
free_port() {
  python3 - "${1:-0}" "${2:-0}" <<'PY' 2>/dev/null || echo $((20000 + RANDOM % 9000))
import random, socket, sys
lo, hi = int(sys.argv[1]), int(sys.argv[2])
for _ in range(200):
    p = random.randint(lo, hi) if lo else 0
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", p)); print(s.getsockname()[1]); break
    except OSError:
        pass
    finally:
        s.close()
PY
}

# start NAME VAR=VALUE... -- ARGS...: one nsa-train in the background; its stdout, stderr,
# exit code and wall time go to $TMP/NAME.{out,err,rc,secs}
start() {
  local name=$1; shift
  local vars=()
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  (
    t=$EPOCHREALTIME
    env "${CLEAR[@]}" "${vars[@]}" timeout -k 2 30 "$BIN" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
    echo $? >"$TMP/$name.rc"
    echo "$t $EPOCHREALTIME" | awk '{printf "%.2f\n", $2 - $1}' >"$TMP/$name.secs"
  ) &
  PIDS+=($!)
}
# run NAME VAR=VALUE... -- ARGS...: the same in the foreground
run() { start "$@"; wait "${PIDS[-1]}"; }
rc() { cat "$TMP/$1.rc" 2>/dev/null || echo none; }
secs() { cat "$TMP/$1.secs" 2>/dev/null || echo 999; }
world_field() { grep -o " $2=[^ ]*" "$TMP/$1.out" | head -1 | cut -d= -f2-; }
show() { for f in "$@"; do sed "s|^|    $f: |" "$TMP/$f.err" "$TMP/$f.out" 2>/dev/null | head -4; done; }

# ---- 1. three ranks, torchrun-style variables ----------------------------------------------------
P=$(free_port)
E=(WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P)
start w2 RANK=2 "${E[@]}" -- --check-world --rdzv-timeout 20
sleep 0.3   # rank 2 is up before rank 0 listens: it retries
start w0 RANK=0 "${E[@]}" -- --check-world --rdzv-timeout 20
start w1 RANK=1 "${E[@]}" -- --check-world --rdzv-timeout 20
wait
good=1
for r in 0 1 2; do
  [ "$(rc w$r)" = 0 ] && [ "$(grep -c '^\[WORLD\]' "$TMP/w$r.out")" = 1 ] || good=0
  [ "$(world_field w$r rank)" = $r ] && [ "$(world_field w$r world)" = 3 ] || good=0
  [ "$(world_field w$r local_rank)" = $r ] && [ "$(world_field w$r local_size)" = 3 ] || good=0
  [ "$(world_field w$r bootstrap)" = env ] && [ "$(world_field w$r rendezvous)" = "127.0.0.1:$P" ] || good=0
  grep -q " peers=0@127.0.0.1(.*),1@127.0.0.1(.*),2@127.0.0.1(.*)$" "$TMP/w$r.out" || good=0
done
check "3 ranks (env): exit 0, one [WORLD] line each with rank, world 3, local rank r of 3, bootstrap env, every peer" \
  [ $good = 1 ]
[ $good = 1 ] || show w0 w1 w2
ids=$(for r in 0 1 2; do world_field w$r id; done | sort -u)
check "3 ranks: the id exchange: every rank has rank 0's bytes (id $ids)" \
  bash -c "[ \$(echo '$ids' | wc -l) = 1 ] && [ -n '$ids' ]"
echo "    $(cat "$TMP/w1.out")"

# ---- 2. LOCAL_RANK / LOCAL_WORLD_SIZE as given -------------------------------------------------
P=$(free_port)
E=(WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P LOCAL_WORLD_SIZE=4)
start l0 RANK=0 LOCAL_RANK=3 "${E[@]}" -- --check-world --rdzv-timeout 20
start l1 RANK=1 LOCAL_RANK=2 "${E[@]}" -- --check-world --rdzv-timeout 20
wait
check "LOCAL_RANK/LOCAL_WORLD_SIZE taken as given (3 and 2 of 4)" \
  bash -c "[ $(rc l0) = 0 ] && [ $(rc l1) = 0 ] && [ '$(world_field l0 local_rank)' = 3 ] && [ '$(world_field l1 local_rank)' = 2 ] && [ '$(world_field l1 local_size)' = 4 ]"

# ---- 3. Slurm -----------------------------------------------------------------------------------
P=$(free_port 20000 29999)
JOB=$((70000 + P - 20000))   # 20000 + SLURM_JOB_ID % 10000 = P
E=(SLURM_NTASKS=2 SLURM_JOB_ID=$JOB SLURM_STEP_ID=0 "SLURM_STEP_NODELIST=127.0.0.[1-4]" "SLURM_JOB_NODELIST=bogus[1-2]")
start s1 SLURM_PROCID=1 SLURM_LOCALID=1 "${E[@]}" -- --check-world --rdzv-timeout 20
start s0 SLURM_PROCID=0 SLURM_LOCALID=0 "${E[@]}" -- --check-world --rdzv-timeout 20
wait
check "Slurm: bootstrap slurm, rank 0's host the first of SLURM_STEP_NODELIST=127.0.0.[1-4], port 20000 + SLURM_JOB_ID % 10000 = $P, SLURM_LOCALID" \
  bash -c "[ $(rc s0) = 0 ] && [ $(rc s1) = 0 ] && [ '$(world_field s1 bootstrap)' = slurm ] && [ '$(world_field s1 rendezvous)' = 127.0.0.1:$P ] && [ '$(world_field s1 rank)' = 1 ] && [ '$(world_field s1 local_rank)' = 1 ] && [ '$(world_field s0 id)' = '$(world_field s1 id)' ]"
[ "$(rc s0)" = 0 ] || show s0 s1

# ---- 4 + 5. a peer that never arrives; rank 0 that never comes (in parallel) ---------------------
P=$(free_port)
P2=$(free_port)
start miss RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P -- --check-world --rdzv-timeout 2
start unreach RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P2 NSA_RDZV_TIMEOUT=2 -- --check-world
wait
check "a peer that never arrives: exit 4 ($(rc miss)) in $(secs miss) s (timeout 2 s): $(head -1 "$TMP/miss.err")" \
  bash -c "[ $(rc miss) = 4 ] && grep -qF '[COMM-TIMEOUT] rank 0: rendezvous at 127.0.0.1:$P: 1 of 2 ranks never arrived within 2 s (missing: rank 1)' '$TMP/miss.err' && awk -v x=$(secs miss) 'BEGIN { exit !(x >= 2 && x < 4) }'"
check "rank 0 never comes: exit 4 ($(rc unreach)) in $(secs unreach) s naming 127.0.0.1:$P2" \
  bash -c "[ $(rc unreach) = 4 ] && grep -qF '[COMM-TIMEOUT] rank 1: rendezvous at 127.0.0.1:$P2: rank 0 not reachable within 2 s' '$TMP/unreach.err' && awk -v x=$(secs unreach) 'BEGIN { exit !(x >= 2 && x < 4) }'"
sed 's/^/    /' "$TMP/unreach.err"

# ---- 6. a port already in use ---------------------------------------------------------------------
P=$(free_port)
E=(WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P)
start holder RANK=0 "${E[@]}" -- --check-world --rdzv-timeout 20
sleep 0.4
run inuse RANK=0 "${E[@]}" -- --check-world --rdzv-timeout 20
check "port in use: exit 1 ($(rc inuse)) in $(secs inuse) s naming the port: $(head -1 "$TMP/inuse.err" | cut -c1-150)..." \
  bash -c "[ $(rc inuse) = 1 ] && grep -q 'cannot listen on port $P .*Address already in use' '$TMP/inuse.err' && awk -v x=$(secs inuse) 'BEGIN { exit !(x < 1.5) }'"
run holder1 RANK=1 "${E[@]}" -- --check-world --rdzv-timeout 20
wait
check "port in use: the rank 0 that holds it completes its world" bash -c "[ $(rc holder) = 0 ] && [ $(rc holder1) = 0 ]"

# ---- 7. another WORLD_SIZE; 8. a duplicate RANK ---------------------------------------------------
P=$(free_port)
start m0 RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P -- --check-world --rdzv-timeout 20
sleep 0.3
run m1 RANK=1 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P -- --check-world --rdzv-timeout 20
wait
msg="rank 1 (from 127.0.0.1, host $(hostname)) has WORLD_SIZE 3, rank 0 has 2"
check "another WORLD_SIZE: both exit 2 ($(rc m0), $(rc m1)) naming rank 1 and both sizes" \
  bash -c "[ $(rc m0) = 2 ] && [ $(rc m1) = 2 ] && grep -qF '$msg' '$TMP/m0.err' && grep -qF 'rank 0 rejected this rank: $msg' '$TMP/m1.err'"
P=$(free_port)
E=(WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P)
start d0 RANK=0 "${E[@]}" -- --check-world --rdzv-timeout 20
sleep 0.3
start da RANK=1 "${E[@]}" -- --check-world --rdzv-timeout 20
sleep 0.3
start db RANK=1 "${E[@]}" -- --check-world --rdzv-timeout 20
wait
check "a duplicate RANK: every process exits 2 ($(rc d0) $(rc da) $(rc db)) with 'rank 1 arrived twice' (in $(secs d0) s)" \
  bash -c "[ $(rc d0) = 2 ] && [ $(rc da) = 2 ] && [ $(rc db) = 2 ] && grep -q 'rank 1 arrived twice: from 127.0.0.1' '$TMP/d0.err' '$TMP/da.err' '$TMP/db.err' && [ \$(grep -l 'arrived twice' '$TMP/d0.err' '$TMP/da.err' '$TMP/db.err' | wc -l) = 3 ]"

# ---- 9. usage -------------------------------------------------------------------------------------
usage() {   # NAME NEEDLE VAR=VALUE... -- ARGS...
  local name=$1 needle=$2; shift 2
  run "$name" "$@"
  check "usage: $name: exit 2 ($(rc "$name")), says '$needle'" \
    bash -c "[ $(rc "$name") = 2 ] && grep -qF -- '$needle' '$TMP/$name.err'"
}
usage rank_not_below "RANK=2 is not below WORLD_SIZE=2" RANK=2 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 -- --check-world
usage rank_alone "RANK is set but WORLD_SIZE is not" RANK=1 -- --check-world
usage no_master "WORLD_SIZE=2 but MASTER_ADDR is not set" RANK=1 WORLD_SIZE=2 -- --check-world
usage bad_bootstrap "--bootstrap torchrun: expected auto, mpi, env or slurm" -- --check-world --bootstrap torchrun
usage rank_conflict "--rank 3 conflicts with the rank 1 of the env bootstrap" RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
  -- --check-world --rank 3
usage no_world "--bootstrap env: there is no world to join with --transport none" -- --config configs/tiny.json --bootstrap env
usage bad_port "MASTER_PORT=0: expected a whole number in [1, 65535]" RANK=0 WORLD_SIZE=2 MASTER_ADDR=x MASTER_PORT=0 -- --check-world
if "$BIN" --print-env | grep -q '"mpi": "'; then
  usage mpi_env "the mpi transport is MPI: it needs the mpi bootstrap" -- --config configs/tiny.json --transport mpi --bootstrap env
fi

# ---- 10. one rank; the warning of a world without a transport -------------------------------------
run single -- --check-world
check "--check-world without variables: one rank, exit 0 ($(rc single)): $(cat "$TMP/single.out")" \
  bash -c "[ $(rc single) = 0 ] && grep -q '^\[WORLD\] rank=0 world=1 local_rank=0 local_size=1 bootstrap=env ' '$TMP/single.out'"
run alone RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 -- --config configs/tiny.json --steps 1 --threads 1 --quiet --out "$TMP/alone"
check "WORLD_SIZE=2 with --transport none: trains alone, exit 0 ($(rc alone)), with a warning" \
  bash -c "[ $(rc alone) = 0 ] && grep -q 'WORLD_SIZE=2 is set but --transport is none' '$TMP/alone.err'"

echo "rendezvous: $((SECONDS - T0)) s"
finish
