#!/usr/bin/env bash
# tests/cli/two_nodes.sh BUILD_DIR — a simulated second node: two network
# namespaces joined by a veth pair, each a "node" with its own address (10.99.0.1 and
# 10.99.0.2) and, for the second, its own host name (a UTS namespace: nsa-node2). The runner
# runs on node 1; mpirun reaches node 2 through an rsh agent that enters its namespaces (as
# ssh would reach another machine), over a hostfile of the two addresses.
#  1. ddp_onestep's tiny cases (default, find_unused, static_graph) PASS across the two nodes
#     over the mpi transport, rank 1 on nsa-node2 (its flight recorder says so);
#  2. a hang fault on rank 1 (node 2) is a HANG whose verdict names "rank 1 on nsa-node2"
#     never joining the collective rank 0 waits in; both ranks' stacks are there (node 2's
#     through mpirun forwarding SIGUSR1); the verdict within stall_s + 5 s of the last
#     heartbeat; no process (orted included) left;
#  3. the env bootstrap across the nodes: nsa-train --check-world with RANK/WORLD_SIZE and
#     MASTER_ADDR=10.99.0.1 on each node agrees on one world (rank 0's id on both; each
#     rank's host named); a rank 1 whose rank 0 never listens ends with [COMM-TIMEOUT] naming
#     the address within its --rdzv-timeout.
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN), ip (iproute2), unshare (util-linux) and mpirun;
# without them it SKIPs (exit 77) saying which is missing.
set -u
BUILD=${1:?usage: two_nodes.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
H="$BUILD/nsa-harness"
T="$BUILD/nsa-train"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
skip() { echo "SKIP  two simulated nodes: $1"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces (run as root)"
for tool in ip unshare mpirun python3; do command -v $tool >/dev/null || skip "$tool is not installed"; done
TMP=$(mktemp -d)
N1="nsa2n_a$$" N2="nsa2n_b$$" V1="nv$$a" V2="nv$$b"
cleanup() {
  pkill -f "$TMP/" 2>/dev/null
  ip netns pids "$N1" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns pids "$N2" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "$N1" 2>/dev/null; ip netns del "$N2" 2>/dev/null   # the veth pair goes with them
  rm -rf "$TMP"
}
trap cleanup EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, finish
if ! { ip netns add "$N1" && ip netns add "$N2" && ip link add "$V1" type veth peer name "$V2" &&
       ip link set "$V1" netns "$N1" && ip link set "$V2" netns "$N2" &&
       ip -n "$N1" addr add 10.99.0.1/24 dev "$V1" && ip -n "$N2" addr add 10.99.0.2/24 dev "$V2" &&
       ip -n "$N1" link set "$V1" up && ip -n "$N2" link set "$V2" up &&
       ip -n "$N1" link set lo up && ip -n "$N2" link set lo up; } 2>"$TMP/ns.err"; then
  skip "cannot create network namespaces here: $(head -1 "$TMP/ns.err")"
fi
unshare --uts true 2>/dev/null || skip "cannot create a UTS namespace (unshare --uts)"
# the rsh agent: "agent HOST CMD..." runs CMD as a shell line on the node HOST, as ssh would
cat >"$TMP/agent" <<EOF
#!/bin/sh
host=\$1; shift
case "\$host" in
  10.99.0.1) ns=$N1; name=\$(hostname) ;;
  10.99.0.2) ns=$N2; name=nsa-node2 ;;
  *) echo "agent: no node \$host" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$name && exec sh -c \"\\\$0\"" "\$*"
EOF
chmod +x "$TMP/agent"
on1() { ip netns exec "$N1" "$@"; }
on2() { ip netns exec "$N2" unshare --uts sh -c 'hostname nsa-node2 && exec "$@"' sh "$@"; }

# ---- 1. ddp_onestep across the two nodes -------------------------------------------------------
cat >"$TMP/two_nodes.json" <<EOF
{
  "name": "two_nodes",
  "description": "ddp_onestep's tiny cases over two simulated nodes (tests/cli/two_nodes.sh)",
  "family": "ddp_onestep",
  "config": "$ROOT/configs/tiny.json",
  "overrides": {"train.steps": 2, "train.bucket_mb": 0.05},
  "run": {"world_size": 2, "transport": "mpi", "launcher": "mpirun", "hosts": ["10.99.0.1:1", "10.99.0.2:1"],
          "launcher_args": ["--mca", "plm_rsh_agent", "$TMP/agent", "--mca", "btl_tcp_if_include", "10.99.0.0/24",
                            "--mca", "oob_tcp_if_include", "10.99.0.0/24"],
          "timeout_s": 120, "stall_s": 8, "env": {"OMP_NUM_THREADS": "1", "NSA_COMM_TIMEOUT": "60"}},
  "profiles": {"ci": {}},
  "matrix": {"mode": {"key": "train.ddp_mode", "values": ["default", "find_unused", "static_graph"]}},
  "checks": [{"check": "finite"}, {"check": "grad_arrival", "ddp_unused_ok": true, "expect_missing": {"*": []}}]
}
EOF
on1 "$H" run "$TMP/two_nodes.json" --out "$TMP/r" --quiet >"$TMP/out" 2>&1
for m in default find_unused static_graph; do
  check "ddp_onestep mode=$m across two nodes over mpi: PASS" grep -q "| two_nodes | mode=$m | PASS" "$TMP/r/RESULTS.md"
done
check "... rank 1 ran on nsa-node2 (its recorder), rank 0 here" \
  grep -q "rank 1 runs on host nsa-node2" "$TMP/r/two_nodes/mode=default/output.log"

# ---- 2. a hang on node 2 ------------------------------------------------------------------------
on1 "$H" run "$TMP/two_nodes.json" --case two_nodes/mode=default --fault hang=1:2:backward --out "$TMP/h" --quiet \
  >"$TMP/out" 2>&1
R="$TMP/h/RESULTS.md" D="$TMP/h/two_nodes/mode=default"
check "hang on rank 1 of node 2: HANG naming 'rank 1 on nsa-node2' as the one that never joined" \
  grep -q "| two_nodes | mode=default | \*\*HANG\*\* | .* | rank 1 on nsa-node2 never joined collective seq [0-9]* (allreduce b[0-9]*)" "$R"
check "... a stack for every rank (node 2's through mpirun's forwarded SIGUSR1)" \
  bash -c "grep -q 'SIGUSR1 (stall dump)' '$D/stacks/rank_0.txt' && grep -q 'SIGUSR1 (stall dump)' '$D/stacks/rank_1.txt' \
           && grep -q 'fault_hang' '$D/stacks/rank_1.txt'"
check "... the side-by-side table names each rank's node" \
  bash -c "grep -q '^| 0 on ' '$R' && grep -q '^| 1 on nsa-node2 | yes, stack written' '$R'"
LAT=$(python3 -c "import json; c=json.load(open('$TMP/h/summary.json'))['cases'][0]; \
print('%.1f' % c['facts']['hang_stall_to_verdict_s'])" 2>/dev/null)
check "... verdict ${LAT:-?} s after the last heartbeat: within stall_s 8 + 5 s" \
  python3 -c "import sys; sys.exit(not (0 < float('${LAT:-0}') <= 13.0))"
check "... no rank or orted left on either node" \
  bash -c "[ -z \"\$(ip netns pids $N1)\" ] && [ -z \"\$(ip netns pids $N2)\" ] && ! pgrep -f '[n]sa-train.*$TMP' >/dev/null"

# ---- 3. the env bootstrap across the nodes ---------------------------------------------------------
W="env WORLD_SIZE=2 MASTER_ADDR=10.99.0.1 MASTER_PORT=29517 NSA_RDZV_TOKEN=two-nodes-$$"
on1 $W RANK=0 "$T" --check-world --bootstrap env --rdzv-timeout 30 >"$TMP/w0" 2>&1 &
P0=$!
on2 $W RANK=1 "$T" --check-world --bootstrap env --rdzv-timeout 30 >"$TMP/w1" 2>&1
RC1=$?
wait $P0
RC0=$?
check "--check-world across the nodes: both ranks exit 0 ($RC0, $RC1)" test "$RC0$RC1" = 00
ID0=$(grep -o 'id=[0-9a-f]*' "$TMP/w0" 2>/dev/null) ID1=$(grep -o 'id=[0-9a-f]*' "$TMP/w1" 2>/dev/null)
check "... one world: the same id on both nodes ($ID0)" bash -c "[ -n '$ID0' ] && [ '$ID0' = '$ID1' ]"
check "... rank 1 knows it is on nsa-node2 at 10.99.0.2, its own local rank 0" \
  bash -c "grep -q 'rank=1 world=2 local_rank=0 local_size=1 bootstrap=env' '$TMP/w1' && grep -q '1@10.99.0.2(nsa-node2)' '$TMP/w1'"
t0=$(date +%s.%N)
on2 $W RANK=1 "$T" --check-world --bootstrap env --rdzv-timeout 3 >"$TMP/w2" 2>&1
RC=$?
el=$(python3 -c "print('%.1f' % ($(date +%s.%N) - $t0))")
check "rank 0 never listens: rank 1 exits 4 within its 3 s timeout (+2 s) (exit $RC, $el s)" \
  python3 -c "import sys; sys.exit(not ($RC == 4 and $el <= 5.0))"
check "... [COMM-TIMEOUT] naming rank 0's address" grep -q "COMM-TIMEOUT.*10.99.0.1:29517" "$TMP/w2"
finish
