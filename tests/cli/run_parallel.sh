#!/usr/bin/env bash
# tests/cli/run_parallel.sh BUILD_DIR — cases side by side (`nsa-harness run -j N`):
#  1. the same verdicts, in the same order, and for every case of nsa-train (deterministic:
#     same seed, same backend) the same numbers — loss and gradient norm at every step, bitwise
#     — one at a time and with -j 3; RESULTS.md, summary.json and junit.xml list the cases in
#     the plan's order;
#  2. the scheduler on a machine of 4 (fake) GPUs: nsa-train on the CPU behind a wrapper whose
#     --print-env lists 4 devices and which logs each rank's start, end, CUDA_VISIBLE_DEVICES and
#     OMP_NUM_THREADS. With -j 4: no two cases that ran at the same time shared a GPU; a case of
#     2 ranks held 2 distinct GPUs, both ranks the same two; a case comparing with a reference
#     (parity) started after the reference ended; a case with a timing check (growth of step
#     time) ran with nothing beside it; cases did run side by side; each rank got
#     OMP_NUM_THREADS = cores / jobs; with --cases-per-gpu 2, two cases shared a GPU and never
#     three; -j auto over 4 fake GPUs of 80 GiB: 3 cases a GPU (--cases-per-gpu auto), never 4;
#     two runs at once on the same GPUs (lock files) never shared a GPU, and the timing
#     cases of one ran with nothing of the other beside them; two runs at once with
#     --cases-per-gpu 2 each never put more than two cases on a GPU in all; a self-test whose
#     detection judges a hang's latency (the machine's lock held exclusively) finishes: its nested
#     run takes its locks in a folder of its own;
#  3. Ctrl-C while two cases hang side by side: exit 130, both ERROR "interrupted", the others
#     SKIP "not run: interrupted", no trainer left;
#  4. bad values exit 2 naming the flag and the value: -j 0, -j x, --cases-per-gpu 0,
#     NSA_HARNESS_CPUS=abc.
# Timing: nothing here judges speed; the overlap checks compare the logged instants of each
# rank's own start and end (a loaded machine only makes the intervals longer).
set -u
BUILD=${1:?usage: run_parallel.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
H="$BUILD/nsa-harness"
T="$BUILD/nsa-train"
SRC=$(pwd)
[ -x "$H" ] && [ -x "$T" ] || { echo "SKIP: nsa-harness or nsa-train not built in $BUILD"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"

# ---- 1. one at a time vs -j 3: verdicts and numbers ----------------------------------------------
SC=()
for s in branch_isolation gate_init gc_bisection prefill_step5 seqlen_nan_sweep golden_regression; do
  SC+=("scenarios/$s.json")
done
command -v mpirun >/dev/null 2>&1 && SC+=(scenarios/ddp_onestep.json)
# one at a time with OpenMP's own team (every core), whatever the caller's OMP_NUM_THREADS: -j 3
# gives each case 1 thread, so the numbers are compared across thread counts too
expect_exit "the scenarios one at a time" 0 env -u OMP_NUM_THREADS "$H" run "${SC[@]}" --profile ci --out "$TMP/serial" --quiet
expect_exit "the same scenarios with -j 3" 0 "$H" run "${SC[@]}" --profile ci -j 3 --out "$TMP/par"
check "... it said how many cases run at a time" has "$TMP/out" "nsa-harness: up to 3 cases at a time over"
check "same cases, same order, same verdicts; nsa-train's losses and gradient norms bitwise" python3 - "$TMP/serial" "$TMP/par" <<'EOF'
import json, os, sys, xml.etree.ElementTree as ET
a, b = sys.argv[1], sys.argv[2]
sa, sb = json.load(open(a + "/summary.json")), json.load(open(b + "/summary.json"))
ka = [(c["scenario"], c["case"], c["verdict"]) for c in sa["cases"]]
kb = [(c["scenario"], c["case"], c["verdict"]) for c in sb["cases"]]
if ka != kb:
    print("verdicts differ:", [x for x in zip(ka, kb) if x[0] != x[1]][:5]); sys.exit(1)
if len(ka) < 40: print("too few cases", len(ka)); sys.exit(1)
ja = [t.get("name") for t in ET.parse(a + "/junit.xml").iter("testcase")]
jb = [t.get("name") for t in ET.parse(b + "/junit.xml").iter("testcase")]
if ja != jb or not ja: print("junit order differs"); sys.exit(1)
def rows(md): return [l.split("|")[1:3] for l in open(md) if l.startswith("| ") and "PASS" in l]
if [r for r in rows(a + "/RESULTS.md")] != [r for r in rows(b + "/RESULTS.md")]:
    print("RESULTS.md rows differ"); sys.exit(1)
compared = 0
for c in sa["cases"]:
    m = os.path.join(a, c["dir"], "metrics.jsonl")
    if c["trainer"] != "nsa-train" or not os.path.exists(m): continue
    def nums(p):
        out = []
        for l in open(p):
            r = json.loads(l)   # the JSON text of each number: bitwise
            out.append((r.get("step"), repr(r.get("loss")), repr(r.get("grad_norm"))))
        return out
    if nums(m) != nums(os.path.join(b, c["dir"], "metrics.jsonl")):
        print("numbers differ in", c["dir"]); sys.exit(1)
    compared += 1
print("compared", compared, "cases' numbers")
sys.exit(compared < 30)
EOF

# ---- 2. the scheduler over 4 fake GPUs --------------------------------------------------------------
cat >"$TMP/fakegpu" <<EOF
#!/usr/bin/env bash
# nsa-train on the CPU that says it sees 4 GPUs; each rank logs its start, end and placement
for a in "\$@"; do
  if [ "\$a" = --print-env ]; then
    "$T" "\$@" | python3 -c 'import json, sys; e = json.load(sys.stdin)
import os; mem = os.environ.get("FAKE_GPU_MEM")
e["cuda"] = {"runtime": "fake", "driver": "fake", "devices": [dict({"index": i, "name": "Fake GPU"}, **({"memory_bytes": int(mem)} if mem else {})) for i in range(4)]}
print(json.dumps(e))'
    exit
  fi
  [ "\$a" = --protocol-info ] && exec "$T" "\$@"
done
out=""; prev=""
for a in "\$@"; do [ "\$prev" = --out ] && out=\$a; prev=\$a; done
start=\$(date +%s.%N)
"$T" "\$@"; rc=\$?
echo "\$(basename "\$(dirname "\$out")")/\$(basename "\$out") \$start \$(date +%s.%N) \${CUDA_VISIBLE_DEVICES:-none} \${OMP_NUM_THREADS:-none} \${OMPI_COMM_WORLD_RANK:-0}" >>"$TMP/runs.log"
exit \$rc
EOF
chmod +x "$TMP/fakegpu"
# scenario NAME FAMILY WORLD MATRIX CHECKS: the tiny config on the CPU, the gpu profile needing 1 GPU
scenario() {
  cat >"$TMP/$1.json" <<EOF
{"name": "$1", "description": "cases side by side", "family": "$2",
 "config": "$SRC/configs/tiny.json", "overrides": {"train.steps": 6, "train.seq_len": 64},
 "run": {"timeout_s": 120, "world_size": $3$( [ "$3" = 2 ] && echo ', "transport": "mpi"')},
 "profiles": {"gpu": {"requires": {"gpus": 1}}},
 "matrix": $4, "checks": $5}
EOF
}
scenario wide branch_isolation 1 '{"seed": {"key": "train.seed", "values": [1, 2, 3, 4, 5, 6, 7, 8]}}' '[{"check": "finite"}]'
scenario refd prefill_step5 1 '{"prefill": {"key": "train.prefill", "values": ["batched", "sequential"]}}' \
  '[{"check": "finite"}, {"check": "parity", "reference": "prefill=batched", "metric": "loss", "tolerance": 0}]'
scenario timed prefill_step5 1 '{"seed": {"key": "train.seed", "values": [1, 2]}}' \
  '[{"check": "finite"}, {"check": "growth", "metric": "ms", "max_ratio": 100, "skip": 1, "window": 2}]'
FILES=("$TMP/wide.json" "$TMP/refd.json" "$TMP/timed.json")
if command -v mpirun >/dev/null 2>&1; then
  scenario pair ddp_onestep 2 '{"seed": {"key": "train.seed", "values": [1, 2]}}' '[{"check": "finite"}]'
  FILES+=("$TMP/pair.json")
fi
NSA_HARNESS_CPUS=8 expect_exit "-j 4 over 4 fake GPUs" 0 "$H" run "${FILES[@]}" --profile gpu -j 4 \
  --trainer-cmd "$TMP/fakegpu" --out "$TMP/fake"
check "... it said 4 cases at a time over 4 GPUs" has "$TMP/out" "nsa-harness: up to 4 cases at a time over 4 GPUs (1 a GPU), 8 cores"
check "... a run line names the case's GPU" grep -qE '^\[[0-9]+/[0-9]+\] run   wide/seed=[0-9] on GPU [0-3]  \(' "$TMP/out"
# placement: the fake trainer's log, one line per rank: scenario/case, start, end, GPUs, threads, rank
cat >"$TMP/placement.py" <<'EOF'
import sys
log, per_gpu, want_threads = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cases, bad = {}, []
for l in open(log):
    n, s, e, dev, omp, rank = l.split()
    if dev == "none": bad.append("%s ran with no CUDA_VISIBLE_DEVICES" % n)
    if omp != want_threads: bad.append("%s: OMP_NUM_THREADS %s, want %s" % (n, omp, want_threads))
    cases.setdefault(n, []).append((float(s), float(e), dev))
iv = {n: (min(x[0] for x in v), max(x[1] for x in v), v[0][2].split(",")) for n, v in cases.items()}
for n, v in cases.items():
    if len(v) == 2 and (v[0][2] != v[1][2] or len(set(v[0][2].split(","))) != 2):
        bad.append("%s: 2 ranks on %s / %s, want the same 2 distinct GPUs" % (n, v[0][2], v[1][2]))
names, most, overlaps = sorted(iv), 0, 0
for a in names:   # at a's start: who else holds which GPU
    s0 = iv[a][0]
    live = [b for b in names if iv[b][0] <= s0 < iv[b][1]]
    load = {}
    for b in live:
        for g in iv[b][2]: load[g] = load.get(g, 0) + 1
    most = max([most] + list(load.values()))
    overlaps += len(live) > 1
    if a.startswith("timed/") and len(live) > 1: bad.append("%s ran beside %s" % (a, [b for b in live if b != a]))
    for b in names:
        if b != a and b.startswith("timed/") and iv[b][0] <= s0 < iv[b][1]: bad.append("%s started while %s ran" % (a, b))
if most > per_gpu: bad.append("a GPU held %d cases at once (at most %d)" % (most, per_gpu))
if "refd/prefill=sequential" in iv and iv["refd/prefill=sequential"][0] < iv["refd/prefill=batched"][1]:
    bad.append("the parity case started before its reference ended")
if overlaps == 0: bad.append("no two cases ran at the same time")
if per_gpu > 1 and most < 2: bad.append("no GPU was shared with --cases-per-gpu %d" % per_gpu)
print("%d cases, %d started beside another, at most %d a GPU" % (len(iv), overlaps, most))
if bad: print("\n".join(bad[:10])); sys.exit(1)
EOF
check "... no GPU shared, 2 ranks on 2 distinct GPUs, the parity case after its reference, timing cases alone, OMP_NUM_THREADS 8/4" \
  python3 "$TMP/placement.py" "$TMP/runs.log" 1 2
check "... the reports list the cases in the plan's order" python3 - "$TMP/fake/summary.json" <<'EOF'
import json, sys
c = [(x["scenario"], x["case"]) for x in json.load(open(sys.argv[1]))["cases"]]
want = [("wide", "seed=%d" % i) for i in range(1, 9)] + [("refd", "prefill=batched"), ("refd", "prefill=sequential"),
        ("timed", "seed=1"), ("timed", "seed=2")]
sys.exit(c[:len(want)] != want)
EOF
rm -f "$TMP/runs.log"
NSA_HARNESS_CPUS=8 expect_exit "--cases-per-gpu 2 -j 8 over 4 fake GPUs" 0 "$H" run "$TMP/wide.json" "$TMP/refd.json" \
  --profile gpu -j 8 --cases-per-gpu 2 --trainer-cmd "$TMP/fakegpu" --out "$TMP/fake2"
check "... two cases shared a GPU, never three; OMP_NUM_THREADS 8/8" python3 "$TMP/placement.py" "$TMP/runs.log" 2 1
rm -f "$TMP/runs.log"
FAKE_GPU_MEM=85899345920 NSA_HARNESS_CPUS=8 expect_exit "-j auto over 4 fake 80 GiB GPUs" 0 "$H" run "$TMP/wide.json" \
  "$TMP/refd.json" --profile gpu -j auto --trainer-cmd "$TMP/fakegpu" --out "$TMP/fake3"
check "... --cases-per-gpu auto: 3 a GPU (one per 24 GiB), 12 at a time" has "$TMP/out" \
  "nsa-harness: up to 12 cases at a time over 4 GPUs (3 a GPU), 8 cores"
check "... GPUs shared, never by four; OMP_NUM_THREADS 8/12 -> 1" python3 "$TMP/placement.py" "$TMP/runs.log" 3 1

# two runs at once on the same 4 GPUs (the main job's two runs; two CI jobs on one runner): the
# lock files keep every GPU to one case of either run, and a timing-sensitive case alone on the machine
sed 's/"name": "wide"/"name": "wideb"/' "$TMP/wide.json" >"$TMP/wideb.json"
rm -f "$TMP/runs.log"
mkdir -p "$TMP/locks"
NSA_HARNESS_LOCK_DIR="$TMP/locks" NSA_HARNESS_CPUS=8 "$H" run "$TMP/wide.json" "$TMP/refd.json" --profile gpu -j 4 \
  --trainer-cmd "$TMP/fakegpu" --out "$TMP/two_a" --quiet >"$TMP/two_a.out" 2>&1 &
pa=$!
for i in $(seq 1 300); do   # the second starts once the first holds every GPU (its first 4 cases)
  [ "$(ls -d "$TMP"/two_a/wide/*/ 2>/dev/null | wc -l)" -ge 4 ] && break
  sleep 0.1
done
NSA_HARNESS_LOCK_DIR="$TMP/locks" NSA_HARNESS_CPUS=8 "$H" run "$TMP/wideb.json" "$TMP/timed.json" --profile gpu -j 4 \
  --trainer-cmd "$TMP/fakegpu" --out "$TMP/two_b" --quiet >"$TMP/two_b.out" 2>&1
rb=$?
wait "$pa"
ra=$?
check "two runs at once over the same 4 fake GPUs: both pass (exit $ra, $rb)" test "$ra$rb" = 00
check "... no GPU held by two cases of either run at once, the timing cases alone on the machine" \
  python3 "$TMP/placement.py" "$TMP/runs.log" 1 2
check "... the runs took turns: the second, started while the first held every GPU, got one before the first's last case started" python3 - "$TMP/runs.log" <<'EOF'
import sys
st = {}
for l in open(sys.argv[1]):
    n, s = l.split()[:2]
    st[n] = min(float(s), st.get(n, 1e30))
a = [v for k, v in st.items() if k.startswith(("wide/", "refd/"))]
b = [v for k, v in st.items() if k.startswith(("wideb/", "timed/"))]
sys.exit(not (a and b and min(b) < max(a)))
EOF
check "... the lock files were made in NSA_HARNESS_LOCK_DIR" test -f "$TMP/locks/nsa-harness-machine.lock" -a -f "$TMP/locks/nsa-harness-gpu-0.lock"
# two runs at once that both share GPUs (--cases-per-gpu 2 each): two cases a GPU in all, not two of each run
sed 's/"name": "wide"/"name": "widec"/' "$TMP/wide.json" >"$TMP/widec.json"
rm -f "$TMP/runs.log"
NSA_HARNESS_LOCK_DIR="$TMP/locks" NSA_HARNESS_CPUS=8 "$H" run "$TMP/wide.json" "$TMP/wideb.json" --profile gpu -j 8 \
  --cases-per-gpu 2 --trainer-cmd "$TMP/fakegpu" --out "$TMP/two_c" --quiet >"$TMP/two_c.out" 2>&1 &
pa=$!
NSA_HARNESS_LOCK_DIR="$TMP/locks" NSA_HARNESS_CPUS=8 "$H" run "$TMP/widec.json" --profile gpu -j 8 --cases-per-gpu 2 \
  --trainer-cmd "$TMP/fakegpu" --out "$TMP/two_d" --quiet >"$TMP/two_d.out" 2>&1
rb=$?
wait "$pa"
ra=$?
check "two runs at once, --cases-per-gpu 2 each: both pass (exit $ra, $rb)" test "$ra$rb" = 00
check "... never more than two cases on a GPU in all (the GPUs' slot files)" python3 "$TMP/placement.py" "$TMP/runs.log" 2 1

# a self-test over the GPUs: a detection holds the machine's and its GPUs' locks for its nested run,
# the machine exclusively while it judges time (a hang); the nested run's cases take theirs in a lock
# folder of their own, so they do not wait for the detection's (before: the hang detection waited
# for its own machine lock until its timeout). Bounded by `timeout 200`; the detection's is 240 s.
mkdir -p "$TMP/locks" "$TMP/tmpdir"   # (a TMPDIR of its own: the nested runs' lock folders are made there)
cat >"$TMP/detect.json" <<EOF
{"name": "detect", "description": "detections over fake GPUs (test only)", "family": "selftest",
 "profiles": {"gpu": {}}, "run": {"timeout_s": 240},
 "detections": [
  {"name": "wide.hang", "scenario": "$TMP/wide.json", "filter": "seed=1", "fault": "hang=0:2:backward", "timeout_scale": 0.1,
   "expect": {"exit": 1, "verdicts": {"seed=1": "HANG"}}},
  {"name": "wide.clean", "scenario": "$TMP/wide.json", "filter": "seed=2", "expect": {"exit": 0, "verdicts": {"seed=2": "PASS"}}}]}
EOF
TMPDIR="$TMP/tmpdir" NSA_HARNESS_LOCK_DIR="$TMP/locks" NSA_HARNESS_CPUS=8 expect_exit "detections over 4 fake GPUs, one judging a hang's latency (nested runs)" 0 \
  timeout 200 "$H" run "$TMP/detect.json" --profile gpu -j 4 --trainer-cmd "$TMP/fakegpu" --out "$TMP/det"
check "... both detections as expected" python3 -c "import json,sys; s=json.load(open(sys.argv[1]))
v=[c['verdict'] for c in s['cases']]; sys.exit(0 if v == ['PASS', 'PASS'] else print(v) or 1)" "$TMP/det/summary.json"
check "... the nested runs' lock folders removed" bash -c "! ls -d \"$TMP/tmpdir\"/nsa_nested_locks.* 2>/dev/null | grep -q ."

# ---- 3. Ctrl-C with cases side by side -------------------------------------------------------------
# every case hangs at step 1; -j 2: two run at once; SIGINT once both hang: exit 130, both running
# cases ERROR "interrupted", the others SKIP "not run: interrupted", the report whole, no process left
"$H" run scenarios/branch_isolation.json --profile ci --fault hang=0:1:forward -j 2 --out "$TMP/intr" --quiet \
  >/dev/null 2>&1 &
hp=$!
for i in $(seq 1 300); do   # until two trainers sleep in the hang (up to 30 s on a loaded machine)
  [ "$(grep -l "sleeping forever" "$TMP"/intr/branch_isolation/*/ranks/rank_0.log 2>/dev/null | wc -l)" -ge 2 ] && break
  sleep 0.1
done
kill -INT "$hp"
wait "$hp"
rc=$?
check "SIGINT with -j 2: exit 130 (got $rc)" test "$rc" = 130
check "... the two running cases ERROR (interrupted), the rest SKIP not run, the report final" python3 - "$TMP/intr" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
v = [(c["verdict"], c["summary"]) for c in s["cases"]]
err = [x for x in v if x[0] == "ERROR" and x[1].startswith("interrupted")]
skip = [x for x in v if x[0] == "SKIP" and x[1] == "not run: interrupted"]
ok = s["interrupted"] and s["exit_code"] == 130 and len(err) == 2 and len(err) + len(skip) == len(v) == 8
if not ok: print(v)
sys.exit(not ok)
EOF
if pgrep -f -- "$TMP/intr" >/dev/null 2>&1; then bad "... no trainer left running: $(pgrep -af -- "$TMP/intr")"
else ok "... no trainer left running"; fi

# ---- 4. bad values --------------------------------------------------------------------------------
expect_exit "-j 0 is a usage error" 2 "$H" run scenarios/gate_init.json -j 0
check "... naming the flag and the value" has "$TMP/out" "nsa-harness run: -j 0: expected auto or a whole number from 1 to 1024"
expect_exit "-j x is a usage error" 2 "$H" run scenarios/gate_init.json --jobs x
check "... naming it" has "$TMP/out" "nsa-harness run: --jobs x: expected auto or a whole number from 1 to 1024"
expect_exit "--cases-per-gpu 0 is a usage error" 2 "$H" run scenarios/gate_init.json --cases-per-gpu 0
check "... naming it" has "$TMP/out" "nsa-harness run: --cases-per-gpu 0: expected auto or a whole number from 1 to 64"
NSA_HARNESS_CPUS=abc expect_exit "NSA_HARNESS_CPUS=abc is a usage error" 2 "$H" run scenarios/gate_init.json -j 2
check "... naming the variable and the value" has "$TMP/out" "nsa-harness run: NSA_HARNESS_CPUS=abc: expected a whole number from 1 to 4096"
finish
