#!/usr/bin/env bash
# tests/cli/launchers.sh BUILD_DIR — the runner's launchers (harness/exec/launch.h):
#  1. the contracts, checked up front with the scenario's position: env needs transport nccl,
#     mpirun needs hosts, hosts only with mpirun, launcher_args only where mpirun/srun run, a
#     launcher that is not one, run.launcher as a matrix axis;
#  2. env: one process per rank with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
#     MASTER_ADDR, one MASTER_PORT and one NSA_RDZV_TOKEN for the case, the scenario's
#     variables and NCCL_DEBUG; nsa-train told --transport nccl --bootstrap env and %r paths;
#     each rank's output in its own ranks/rank_R.log; env.json names the launcher and port
#     (a stub trainer records what it got: the nccl transport needs a GPU);
#  3. env supervision as for mpirun: a rank that never ends is a HANG with no process left; a
#     rank killed by a signal is a CRASH naming that rank (its own wait status);
#  4. mpirun over a hostfile (localhost:2): ddp_onestep's tiny case passes over the mpi
#     transport; the hostfile is written in the case folder and passed;
#  5. srun outside an allocation: a visible SKIP with the reason.
set -u
BUILD=${1:?usage: launchers.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
H="$BUILD/nsa-harness"
T="$BUILD/nsa-train"
TMP=$(mktemp -d)
cleanup() { pkill -f "$TMP/" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, expect_exit, has, finish
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$TMP/scen"

# scen NAME RUN_JSON [MATRIX_JSON]: a scenario over configs/tiny.json with that "run"
scen() {
  cat >"$TMP/scen/$1.json" <<EOF
{
  "name": "$1",
  "description": "launchers.sh: $1",
  "family": "ddp_onestep",
  "profiles": {"ci": {}, "gpu": {}},
  "config": "$ROOT/configs/tiny.json",
  "overrides": {"train.steps": 2, "train.bucket_mb": 0.05},
  "run": $2,
  ${3:+\"matrix\": $3,}
  "checks": [{"check": "finite"}]
}
EOF
}

# ---- 1. contracts --------------------------------------------------------------------------------
scen env_mpi '{"world_size": 2, "transport": "mpi", "launcher": "env"}'
expect_exit "launcher env over mpi: exit 2" 2 "$H" validate "$TMP/scen/env_mpi.json"
check "... it needs transport nccl" has "$TMP/out" 'launcher "env" starts the ranks without MPI: it needs transport "nccl"'
scen nohosts '{"world_size": 2, "transport": "mpi", "launcher": "mpirun"}'
expect_exit "launcher mpirun without hosts: exit 2" 2 "$H" validate "$TMP/scen/nohosts.json"
check "... it needs hosts" has "$TMP/out" 'launcher "mpirun" needs "hosts"'
scen hostslocal '{"world_size": 2, "transport": "mpi", "hosts": ["a", "b"]}'
expect_exit "hosts with launcher local: exit 2" 2 "$H" validate "$TMP/scen/hostslocal.json"
check "... only mpirun takes them" has "$TMP/out" 'hosts: only launcher "mpirun" takes a host list'
scen argsenv '{"world_size": 2, "transport": "nccl", "launcher": "env", "launcher_args": ["-v"]}'
expect_exit "launcher_args with env: exit 2" 2 "$H" validate "$TMP/scen/argsenv.json"
check "... neither mpirun nor srun runs" has "$TMP/out" "launcher_args: arguments of mpirun or srun"
scen badname '{"launcher": "torchrun"}'
expect_exit "launcher torchrun: exit 2" 2 "$H" validate "$TMP/scen/badname.json"
check "... file:line:col, the choices and what it got" \
  grep -qE 'badname.json:8:[0-9]+: launcher: expected one of "local", "mpirun", "srun", "env", got "torchrun"' "$TMP/out"
scen badhost '{"world_size": 2, "transport": "mpi", "launcher": "mpirun", "hosts": ["node 1"]}'
expect_exit "a host name with a space: exit 2" 2 "$H" validate "$TMP/scen/badhost.json"
check "... names it" has "$TMP/out" "hosts[0]: 'node 1' is not a host name"
scen axis '{"world_size": 2, "transport": "nccl"}' '{"launcher": {"key": "run.launcher", "values": ["local", "env"]}}'
expect_exit "run.launcher as a matrix axis: valid" 0 "$H" list "$TMP/scen/axis.json"
check "... two cases" bash -c "grep -q 'launcher=local' '$TMP/out' && grep -q 'launcher=env' '$TMP/out'"

# ---- 2. env: what each rank gets -------------------------------------------------------------------
cat >"$TMP/stub" <<EOF
#!/usr/bin/env bash
# a trainer that records what it was given; rank \$STUB_HANG never ends, rank \$STUB_SEGV dies by SIGSEGV
case " \$* " in *" --print-env "*|*" --list-faults "*) exec "$T" "\$@" ;; esac
{ env | grep -E '^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|NSA_RDZV_TOKEN|FOO|NCCL_DEBUG)=' | sort
  printf 'ARGS %s\n' "\$*"; } >"$TMP/seen.\$RANK"
echo "stub rank \$RANK speaking" >&2
[ "\${STUB_HANG:-x}" = "\$RANK" ] && exec -a "stub-hang-$TMP" sleep 300   # argv[0] names this test's run
[ "\${STUB_SEGV:-x}" = "\$RANK" ] && kill -SEGV \$\$
exit 0
EOF
chmod +x "$TMP/stub"
scen env2 '{"world_size": 2, "transport": "nccl", "launcher": "env", "timeout_s": 60, "stall_s": 4, "env": {"FOO": "bar"}}'
NCCL_DEBUG=INFO "$H" run "$TMP/scen/env2.json" --trainer "$TMP/stub" --out "$TMP/env2" --quiet >"$TMP/out" 2>&1
for k in 0 1; do
  check "env rank $k: RANK=$k WORLD_SIZE=2 LOCAL_RANK=$k LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1" \
    bash -c "grep -qx RANK=$k '$TMP/seen.$k' && grep -qx WORLD_SIZE=2 '$TMP/seen.$k' && grep -qx LOCAL_RANK=$k '$TMP/seen.$k' \
             && grep -qx LOCAL_WORLD_SIZE=2 '$TMP/seen.$k' && grep -qx MASTER_ADDR=127.0.0.1 '$TMP/seen.$k'"
  check "env rank $k: the scenario's FOO=bar and the caller's NCCL_DEBUG=INFO" \
    bash -c "grep -qx FOO=bar '$TMP/seen.$k' && grep -qx NCCL_DEBUG=INFO '$TMP/seen.$k'"
  check "env rank $k: --transport nccl --bootstrap env, per-rank paths with %r" \
    bash -c "grep -q -- '--transport nccl --bootstrap env --log-file [^ ]*/ranks/rank_%r.log' '$TMP/seen.$k' \
             && grep -q -- '--flight-recorder [^ ]*/ranks/rank_%r.fr --stack-file [^ ]*/stacks/rank_%r.txt' '$TMP/seen.$k'"
  check "env rank $k: its output in ranks/rank_$k.log" has "$TMP/env2/env2/default/ranks/rank_$k.log" "stub rank $k speaking"
done
P0=$(grep MASTER_PORT= "$TMP/seen.0" 2>/dev/null); P1=$(grep MASTER_PORT= "$TMP/seen.1" 2>/dev/null)
K0=$(grep NSA_RDZV_TOKEN= "$TMP/seen.0" 2>/dev/null); K1=$(grep NSA_RDZV_TOKEN= "$TMP/seen.1" 2>/dev/null)
check "one MASTER_PORT and one NSA_RDZV_TOKEN for the case ($P0, $K0)" \
  bash -c "[ -n '$P0' ] && [ '$P0' = '$P1' ] && [ -n '$K0' ] && [ '$K0' = '$K1' ]"
check "env.json names the launcher and the port" \
  python3 -c "import json,sys; e=json.load(open('$TMP/env2/env2/default/env.json')); \
sys.exit(not (e['launcher']=='env' and 'MASTER_PORT=%d' % e['rendezvous']['master_port'] == '$P0'))"
check "output.log has rank 0's command with its variables" \
  bash -c "grep -q 'command: RANK=0 WORLD_SIZE=2 .*MASTER_PORT=[0-9]* .*--bootstrap env' '$TMP/env2/env2/default/output.log'"

# ---- 3. env supervision --------------------------------------------------------------------------
STUB_HANG=1 "$H" run "$TMP/scen/env2.json" --trainer "$TMP/stub" --out "$TMP/hang" --quiet >"$TMP/out" 2>&1
check "env: rank 1 never ends: HANG" grep -q '| env2 | default | \*\*HANG\*\*' "$TMP/hang/RESULTS.md"
check "... the watchdog named rank 1" has "$TMP/hang/env2/default/output.log" "no heartbeat from rank 1"
# this run's hung rank only (its argv[0] carries $TMP; a system-wide 'sleep 300' also matched
# other processes), given 5 s for the kernel to finish a SIGKILL; what is left is shown
gone() { for _ in $(seq 50); do pgrep -f "stub-hang-$TMP" >/dev/null || return 0; sleep 0.1; done
         ps -o pid,ppid,stat,args -p "$(pgrep -d, -f "stub-hang-$TMP")"; return 1; }
check "... no process left" gone
STUB_SEGV=1 "$H" run "$TMP/scen/env2.json" --trainer "$TMP/stub" --out "$TMP/segv" --quiet >"$TMP/out" 2>&1
check "env: rank 1 killed by SIGSEGV: CRASH naming rank 1 (its own wait status)" \
  grep -q '| env2 | default | \*\*CRASH\*\* | .* | rank 1 killed by SIGSEGV' "$TMP/segv/RESULTS.md"

# ---- 4. mpirun over a hostfile -------------------------------------------------------------------
if command -v mpirun >/dev/null; then
  scen hostfile '{"world_size": 2, "transport": "mpi", "launcher": "mpirun", "hosts": ["localhost:2"], "timeout_s": 120, "stall_s": 60, "env": {"OMP_NUM_THREADS": "1"}}'
  "$H" run "$TMP/scen/hostfile.json" --out "$TMP/hf" --quiet >"$TMP/out" 2>&1
  check "mpirun over hosts [localhost:2]: PASS" grep -q '| hostfile | default | PASS' "$TMP/hf/RESULTS.md"
  check "... the hostfile in the case folder says 'localhost slots=2'" grep -qx 'localhost slots=2' "$TMP/hf/hostfile/default/hostfile"
  check "... passed to mpirun" bash -c "grep -q 'mpirun -np 2 --hostfile [^ ]*/hostfile/default/hostfile --bind-to none' '$TMP/hf/hostfile/default/output.log'"
else
  echo "SKIP  mpirun over a hostfile: mpirun is not installed (apt-get install openmpi-bin)"
fi

# ---- 5. srun outside an allocation -----------------------------------------------------------------
scen srun '{"world_size": 2, "transport": "mpi", "launcher": "srun"}'
env -u SLURM_JOB_ID "$H" run "$TMP/scen/srun.json" --out "$TMP/srun" --quiet >"$TMP/out" 2>&1
check "srun outside an allocation: a visible SKIP with the reason" \
  grep -qE '\| srun \| default \| SKIP \| .* \| launcher srun: (srun is not on PATH|not inside a Slurm allocation)' "$TMP/srun/RESULTS.md"
finish
