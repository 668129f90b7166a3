#!/usr/bin/env bash
# tests/cli/harness_run.sh — nsa-harness run, end to end, against faults injected
# into the trainer: every verdict, its localisation, the artifacts, and that no
# process outlives its case.
#
# Usage (from the source root): bash tests/cli/harness_run.sh <build dir>
#  1. clean run of the shipped scenarios (ci profile): exit 0, every case PASS, every
#     artifact of DESIGN 7 present, env.json with every field, GITHUB_STEP_SUMMARY;
#  2. gate_init with --fault gate_zero_init: exit 1, FAIL naming every layer and the
#     uniform values (1/3 softmax, 0.5 sigmoid);
#  3. a hang (--fault hang=0:2:backward): HANG within the timeout plus a few seconds,
#     the stack file names fault_hang with file:line, the report names the phase and
#     step, no nsa-train left running;
#  4. a crash (--fault crash=0:1): CRASH by SIGSEGV with the stack naming fault_crash; a
#     saved dump of an abort in free() (frames in libc and libgomp first): the diagnosis
#     names the first frame of the trainer's own code (gemm_f64), not __libc_message;
#  5. junit.xml of a run with PASS, FAIL, HANG, SKIP checked with a real XML parser
#     (python's xml.etree) against the structure CI systems read;
#  6. Ctrl-C (SIGINT) on the runner during a hung case: it stops the case, writes the
#     report marked interrupted, exits 130, leaves no process;
#  7. the gpu profile on a machine without a GPU: visible SKIP, exit 0; `show`.
# Skips (77) without python3 or the executables.
set -u
build=${1:?usage: bash tests/cli/harness_run.sh <build dir>}
H="$build/nsa-harness"
if [ ! -x "$H" ] || [ ! -x "$build/nsa-train" ]; then echo "SKIP: $H or nsa-train not built"; exit 77; fi
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 not found (needed to parse the reports)"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nsa_harness_run.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1: $2"; fail=$((fail + 1)); }
# py NAME SCRIPT ARGS...: run a python assertion script; PASS/FAIL by its status
py() {
    local name=$1 script=$2
    shift 2
    if python3 -c "$script" "$@" >"$tmp/py.out" 2>&1; then ok "$name"; else bad "$name" "$(tail -5 "$tmp/py.out")"; fi
}
no_process_left() {   # no nsa-train whose command line names this report dir
    if pgrep -f -- "$1" >/dev/null 2>&1; then
        bad "$2: no process left" "$(pgrep -af -- "$1")"
        pkill -9 -f -- "$1"
    else ok "$2: no process left"; fi
}

# 1. clean run ---------------------------------------------------------------------------
export GITHUB_STEP_SUMMARY="$tmp/step_summary.md"
"$H" run --profile ci --out "$tmp/clean" --quiet >"$tmp/clean.out" 2>&1
rc=$?
[ "$rc" -eq 0 ] && ok "clean run exits 0" || { bad "clean run exits 0" "exit $rc"; cat "$tmp/clean.out"; }
py "clean run: every case PASS, every artifact present" '
import json, os, sys
rep = sys.argv[1]
s = json.load(open(rep + "/summary.json"))
assert s["finished"] and s["exit_code"] == 0, s
# a CPU run has no SKIP a user cannot act on: scenarios/launchers.json has no
# ci profile (it needs a GPU), the gloo cases of ddp_onestep are only for a trainer that lists gloo
# (their axis marks gloo "if_supported": the PyTorch trainer), so neither is part of this run; a
# SKIP left (the PyTorch trainer without torch) says what would make it run
assert not [c for c in s["cases"] if c["scenario"] == "launchers"], "launchers has no ci profile"
assert not [c for c in s["cases"] if "transport=gloo" in c["case"]], "gloo cases are left out for nsa-train"
bad = [(c["scenario"], c["case"], c["verdict"], c["summary"]) for c in s["cases"]
       if c["verdict"] != "PASS" and not (c["verdict"] == "SKIP" and any(
           w in c["summary"] for w in ("install", "runs this case", "runs where")))]
assert len(s["cases"]) >= 10 and not bad, bad
for f in ["RESULTS.md", "summary.json", "junit.xml", "env.json"]:
    assert os.path.getsize(os.path.join(rep, f)) > 0, f
for c in s["cases"]:
    if c["verdict"] == "SKIP":
        continue
    d = os.path.join(rep, c["dir"])
    # the liveness record: the flight recorder of nsa-train, the heartbeat file of another
    # trainer (docs/trainer-protocol.md; run.trainers of a scenario, e.g. torch in cross_trainer_parity)
    live = "ranks/rank_0.fr" if c.get("trainer", "nsa-train") == "nsa-train" else "ranks/rank_0.hb"
    for f in ["output.log", "env.json", "metrics.jsonl", "ranks/rank_0.log", live]:
        assert os.path.getsize(os.path.join(d, f)) > 0, (d, f)
    assert os.path.isdir(os.path.join(d, "stacks")), d
    if c["scenario"] == "branch_isolation": assert os.path.getsize(os.path.join(d, "grad_trace.jsonl")) > 0
    if c["scenario"] == "gate_init": assert os.path.getsize(os.path.join(d, "gate_stats.jsonl")) > 0
    ce = json.load(open(os.path.join(d, "env.json")))
    for k in ["config", "command", "build", "host", "env"]: assert k in ce, (d, k)
    assert ce["config"]["digest"] and "seed" in ce["config"], ce["config"]
env = json.load(open(rep + "/env.json"))
for k in ["build", "cuda", "nccl", "mpi", "host", "env", "runner", "nvidia_smi"]: assert k in env, k
for k in ["git_sha", "git_dirty", "build_type", "c_compiler", "c_flags"]: assert k in env["build"], k
for k in ["command", "cwd", "git", "profile"]: assert k in env["runner"], k
md = open(rep + "/RESULTS.md").read()
assert md.startswith("# nsa-harness results") and "## Verdicts" in md and "## Diagnosis" in md and "## Environment" in md
assert os.path.exists(rep + "/branch_isolation/loss.svg") and os.path.exists(rep + "/gate_init/gate_gate_softmax.svg")
' "$tmp/clean"
grep -q "| branch_isolation | branch=sel,phi=mlp | PASS |" "$tmp/step_summary.md" 2>/dev/null \
    && ok "GITHUB_STEP_SUMMARY has the verdict table" || bad "GITHUB_STEP_SUMMARY" "table row missing"
unset GITHUB_STEP_SUMMARY

# 2. gate_zero_init -----------------------------------------------------------------------
"$H" run scenarios/gate_init.json --profile ci --fault gate_zero_init --out "$tmp/gate" --quiet >/dev/null 2>&1
rc=$?
[ "$rc" -eq 1 ] && ok "gate_zero_init exits 1" || bad "gate_zero_init exits 1" "exit $rc"
py "gate_zero_init: FAIL naming every layer and the uniform values" '
import json, re, sys
rep = sys.argv[1]
s = json.load(open(rep + "/summary.json"))
v = {c["case"]: c for c in s["cases"]}
assert v["gate=softmax"]["verdict"] == "FAIL" and v["gate=sigmoid"]["verdict"] == "FAIL", v
assert v["gate=softmax"]["facts"]["gate_uniform_layers"] == [0, 1, 2, 3], v["gate=softmax"]["facts"]
md = open(rep + "/RESULTS.md").read()
assert "| gate_init | gate=softmax | **FAIL** |" in md
assert "uniform gate in 4/4 layers (0, 1, 2, 3): every output 0.333333" in md, "softmax line"
assert "uniform gate in 4/4 layers (0, 1, 2, 3): every output 0.500000" in md, "sigmoid line"
assert re.search(r"exactly uniform in 4 of 4 layers \(0, 1, 2, 3\)", md), "diagnosis names the layers"
assert "Fault injection active" in md
' "$tmp/gate"
"$H" run scenarios/gate_init.json --profile ci --out "$tmp/gate_ok" --quiet >/dev/null 2>&1
rc=$?
[ "$rc" -eq 0 ] && grep -q "| gate_init | gate=softmax | PASS |" "$tmp/gate_ok/RESULTS.md" \
    && ok "gate_init without the fault: PASS" || bad "gate_init without the fault" "exit $rc"

# 3. hang ------------------------------------------------------------------------------------
# timeout 120 s x 0.05 = 6 s; the hang starts at step 2 within ~0.1 s
t0=$(date +%s.%N)
"$H" run scenarios/branch_isolation.json --profile ci --filter 'branch=none,phi=avg' \
    --fault hang=0:2:backward --timeout-scale 0.05 --out "$tmp/hang" --quiet >/dev/null 2>&1
rc=$?
t1=$(date +%s.%N)
[ "$rc" -eq 1 ] && ok "hang exits 1" || bad "hang exits 1" "exit $rc"
python3 -c "import sys; d=float(sys.argv[2])-float(sys.argv[1]); sys.exit(0 if 6.0 <= d <= 6.0 + 8 else 1)" "$t0" "$t1" \
    && ok "hang: verdict within the timeout plus a few seconds" || bad "hang timing" "$(python3 -c "import sys; print(float(sys.argv[2])-float(sys.argv[1]))" "$t0" "$t1") s"
stack="$tmp/hang/branch_isolation/branch=none,phi=avg/stacks/rank_0.txt"
grep -q "fault_hang at .*trainer/faults.c:[0-9]" "$stack" 2>/dev/null \
    && ok "hang: stack file names fault_hang with file:line" || bad "hang stack" "$(head -30 "$stack" 2>&1)"
py "hang: HANG with phase, step and the hanging function" '
import json, sys
rep = sys.argv[1]
s = json.load(open(rep + "/summary.json"))
c = s["cases"][0]
assert c["verdict"] == "HANG", c
r = c["ranks"][0]
assert r["stalled"] and r["stack_dumped"] and r["phase"] == "backward" and r["step"] == 2, r
md = open(rep + "/RESULTS.md").read()
assert "rank 0 stalled at step 2, phase backward" in md
assert "its stack stops in `fault_hang (trainer/faults.c:" in md, "diagnosis names fault_hang"
' "$tmp/hang"
no_process_left "$tmp/hang" "hang"

# 4. crash -------------------------------------------------------------------------------------
"$H" run scenarios/branch_isolation.json --profile ci --filter 'branch=none,phi=avg' --fault crash=0:1 \
    --out "$tmp/crash" --quiet >/dev/null 2>&1
rc=$?
[ "$rc" -eq 1 ] && ok "crash exits 1" || bad "crash exits 1" "exit $rc"
py "crash: CRASH by SIGSEGV with its stack" '
import json, sys
rep = sys.argv[1]
s = json.load(open(rep + "/summary.json"))
c = s["cases"][0]
assert c["verdict"] == "CRASH" and c["ranks"][0]["signal"] == 11, c
assert "SIGSEGV" in c["summary"], c["summary"]
md = open(rep + "/RESULTS.md").read()
assert "fault_crash at" in md and "the stack stops in `fault_crash (trainer/faults.c:" in md
' "$tmp/crash"
no_process_left "$tmp/crash" "crash"

# 4b. a crash inside the C library: the frame of our code ---------------------------------------
# nsa-train's dump of a heap that a kernel overflowed (saved from a real run:
# a window of w+1 keys, fp64): SIGABRT from free()'s check, frames #0-#10 in libc and libgomp.
# The diagnosis must name the first frame of the trainer's own code, gemm_f64, not
# __libc_message (what it named before). A trainer command replays it: it writes the dump
# to its --stack-file and dies by SIGABRT (the rest of the protocol from the minimal trainer).
cat >"$tmp/abort_dump.txt" <<'DUMP'
nsa-train rank 0 pid 2137: SIGABRT (crash) at 2026-11-28T00:30:17.958Z
thread 2137 (main thread); fault address 0x859
native stack (21 frames; raw):
  #0  0x7f06ad8a8eec  /usr/lib/x86_64-linux-gnu/libc.so.6 + 0x8aeec
  #1  0x7f06ad859fb2  /usr/lib/x86_64-linux-gnu/libc.so.6 + 0x3bfb2
  #2  0x7f06ad844472  /usr/lib/x86_64-linux-gnu/libc.so.6 + 0x26472
  #3  0x7f06ad89d42f  /usr/lib/x86_64-linux-gnu/libc.so.6 + 0x7f42f
  #4  0x7f06ad8b286a  /usr/lib/x86_64-linux-gnu/libc.so.6 + 0x9486a
  #5  0x7f06ad8b595c  /usr/lib/x86_64-linux-gnu/libc.so.6 + 0x9795c
  #6  0x7f06ad8b65f8  /usr/lib/x86_64-linux-gnu/libc.so.6 + 0x985f8
  #7  0x7f06ad8b6cb5  /usr/lib/x86_64-linux-gnu/libc.so.6 + 0x98cb5
  #8  0x7f06b989a139  /usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0 + 0xd139
  #9  0x7f06b98a9e17  /usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0 + 0x1ce17
  #10  0x7f06b98a109a  /usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0 + 0x1409a
  #11  0x55dd5436221c  @SRC@/build/nsa-train + 0x6621c
  #12  0x55dd5435d53e  @SRC@/build/nsa-train + 0x6153e
  #13  0x55dd54317ae4  @SRC@/build/nsa-train + 0x1bae4
  #14  0x55dd5431c561  @SRC@/build/nsa-train + 0x20561
  #15  0x55dd5432c8a5  @SRC@/build/nsa-train + 0x308a5
  #16  0x55dd5432e4f5  @SRC@/build/nsa-train + 0x324f5
  #17  0x55dd54308a91  @SRC@/build/nsa-train + 0xca91
  #18  0x7f06ad84524a  /usr/lib/x86_64-linux-gnu/libc.so.6 + 0x2724a
  #19  0x7f06ad845305  /usr/lib/x86_64-linux-gnu/libc.so.6 + 0x27305
  #20  0x55dd5430d8c1  @SRC@/build/nsa-train + 0x118c1
symbolized (addr2line):
  #0  __pthread_kill_implementation at ./nptl/./nptl/pthread_kill.c:44  [libc.so.6]
  #1  __GI_raise at ./signal/../sysdeps/posix/raise.c:26  [libc.so.6]
  #2  __GI_abort at ./stdlib/./stdlib/abort.c:79 (discriminator 21)  [libc.so.6]
  #3  __libc_message at ./libio/../sysdeps/posix/libc_fatal.c:156  [libc.so.6]
  #4  malloc_printerr at ./malloc/./malloc/malloc.c:5662  [libc.so.6]
  #5  _int_malloc at ./malloc/./malloc/malloc.c:3998  [libc.so.6]
  #6  _int_memalign at ./malloc/./malloc/malloc.c:4967  [libc.so.6]
  #7  _mid_memalign at ./malloc/./malloc/malloc.c:3565  [libc.so.6]
  #8  ?? ??:0  [libgomp.so.1.0.0]
  #9  omp_fulfill_event at ??:?  [libgomp.so.1.0.0]
  #10  GOMP_parallel at ??:?  [libgomp.so.1.0.0]
  #11  gemm_f64 at @SRC@/kernels/cpu/gemm.c:466  [nsa-train]
  #12  matmul_fwd_f64 at @SRC@/kernels/cpu/dense.c:51  [nsa-train]
  #13  layer_forward at @SRC@/trainer/model.c:555  [nsa-train]
  #14  model_forward at @SRC@/trainer/model.c:621 (discriminator 3)  [nsa-train]
  #15  step_micro_batches at @SRC@/trainer/train.c:649  [nsa-train]
         (inlined by) train_step at @SRC@/trainer/train.c:792
         (inlined by) train_run_inner at @SRC@/trainer/train.c:874
  #16  train_run at @SRC@/trainer/train.c:298  [nsa-train]
  #17  main at @SRC@/trainer/train_main.c:557  [nsa-train]
  #18  __libc_start_call_main at ./csu/../sysdeps/x86/libc-start.c:58  [libc.so.6]
  #19  __libc_start_main_impl at ./csu/../csu/libc-start.c:360  [libc.so.6]
  #20  _start at ??:?  [nsa-train]
flight recorder: off (no --flight-recorder FILE)
--- end of crash dump: re-raising SIGABRT ---
DUMP
sed -i "s|@SRC@|$PWD|g" "$tmp/abort_dump.txt"
cat >"$tmp/abort_trainer.sh" <<SH
#!/usr/bin/env bash
for a in "\$@"; do case \$a in --protocol-info|--print-env|--list-faults) exec python3 "$PWD/docs/examples/minimal_trainer.py" "\$@";; esac; done
while [ \$# -gt 0 ]; do [ "\$1" = --stack-file ] && sf=\$2; shift; done
cat "$tmp/abort_dump.txt" >"\${sf/\%r/0}"
kill -ABRT \$\$
SH
cat >"$tmp/abort.json" <<JSON
{"name": "abort", "description": "a trainer that aborts in free()", "family": "branch_isolation",
 "config": "$PWD/configs/tiny.json", "overrides": {"train.steps": 2}, "profiles": {"ci": {}},
 "checks": [{"check": "finite"}]}
JSON
"$H" run "$tmp/abort.json" --profile ci --trainer-cmd "bash $tmp/abort_trainer.sh" --out "$tmp/abort" --quiet >/dev/null 2>&1
rc=$?
[ "$rc" -eq 1 ] && ok "abort in free(): exits 1" || bad "abort in free(): exits 1" "exit $rc"
py "abort in free(): CRASH by SIGABRT, the stack stops in gemm_f64 (the first frame of ours), not __libc_message" '
import json, sys
rep = sys.argv[1]
c = json.load(open(rep + "/summary.json"))["cases"][0]
assert c["verdict"] == "CRASH" and c["ranks"][0]["signal"] == 6, c
md = open(rep + "/RESULTS.md").read()
line = [l for l in md.splitlines() if l.startswith("- **abort · default CRASH**")]
assert line and "the stack stops in `gemm_f64 (" in line[0] and "kernels/cpu/gemm.c:466)`" in line[0], line
' "$tmp/abort"

# 5. junit.xml structure ------------------------------------------------------------------------
cat >"$tmp/skip.json" <<JSON
{
  "name": "needs_gpus",
  "description": "a case that needs more GPUs than any CI machine has",
  "family": "gate_init",
  "config": "$PWD/configs/tiny.json",
  "overrides": {"train.steps": 1},
  "profiles": {"ci": {"requires": {"gpus": 64}}},
  "checks": [{"check": "finite"}]
}
JSON
cp "$tmp/skip.json" "$tmp/skip_copy.json"
"$H" run scenarios/gate_init.json "$tmp/skip.json" --profile ci --fault gate_zero_init --out "$tmp/junit" --quiet >/dev/null 2>&1
py "junit.xml: testsuites/testsuite/testcase/failure/skipped/system-out" '
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1] + "/junit.xml").getroot()
assert root.tag == "testsuites", root.tag
for a in ["name", "tests", "failures", "errors", "skipped", "time"]: assert a in root.attrib, a
suites = root.findall("testsuite")
names = [s.get("name") for s in suites]
assert names == ["gate_init", "needs_gpus"], names
total = 0
for s in suites:
    for a in ["name", "tests", "failures", "errors", "skipped", "time", "timestamp", "hostname"]: assert a in s.attrib, (s.get("name"), a)
    cases = s.findall("testcase")
    assert int(s.get("tests")) == len(cases), s.attrib
    total += len(cases)
    for tc in cases:
        for a in ["classname", "name", "time"]: assert a in tc.attrib, a
        float(tc.get("time"))
        assert tc.get("classname") == s.get("name")
gi = suites[0]
assert gi.get("failures") == "2" and gi.get("errors") == "0", gi.attrib
for tc in gi.findall("testcase"):
    f = tc.find("failure")
    assert f is not None and f.get("type") == "FAIL" and f.get("message", "").startswith("FAIL: uniform gate"), ET.tostring(tc)[:300]
    assert "gate_init" in (f.text or "") and tc.find("system-out") is not None and "step" in tc.find("system-out").text
sk = suites[1].find("testcase").find("skipped")
assert sk is not None and "needs 64 GPUs" in sk.get("message"), ET.tostring(suites[1])
assert suites[1].get("skipped") == "1"
assert int(root.get("tests")) == total == 3 and root.get("failures") == "2" and root.get("skipped") == "1", root.attrib
' "$tmp/junit"
py "junit.xml: HANG and CRASH are failures with their type" '
import sys, xml.etree.ElementTree as ET
for d, t in [(sys.argv[1], "HANG"), (sys.argv[2], "CRASH")]:
    root = ET.parse(d + "/junit.xml").getroot()
    f = root.find("testsuite/testcase/failure")
    assert f is not None and f.get("type") == t, (t, ET.tostring(root)[:300])
' "$tmp/hang" "$tmp/crash"

# 6. Ctrl-C during a hung case -------------------------------------------------------------------
"$H" run scenarios/branch_isolation.json --profile ci --filter 'phi=avg' --fault hang=0:1:forward \
    --out "$tmp/intr" --quiet >/dev/null 2>&1 &
hp=$!
for i in $(seq 1 100); do   # wait until the first case's trainer hangs
    grep -q "sleeping forever" "$tmp/intr/branch_isolation/branch=none,phi=avg/ranks/rank_0.log" 2>/dev/null && break
    sleep 0.1
done
kill -INT "$hp"
wait "$hp"
rc=$?
[ "$rc" -eq 130 ] && ok "SIGINT: exit 130" || bad "SIGINT exit code" "exit $rc"
py "SIGINT: report written, marked interrupted, remaining cases not run" '
import json, sys
rep = sys.argv[1]
s = json.load(open(rep + "/summary.json"))
assert s["interrupted"] and not s["finished"] and s["exit_code"] == 130, s
v = [c["verdict"] for c in s["cases"]]
# the cases never reached are SKIP ("not run: interrupted", "ran": false), as the header
# and junit.xml count them (they were null and counted nowhere)
assert v[0] == "ERROR" and all(x == "SKIP" for x in v[1:]) and len(v) == 4, v
assert [c["ran"] for c in s["cases"]] == [True, False, False, False], s["cases"]
assert s["counts"]["SKIP"] == 3 and s["counts"]["ERROR"] == 1, s["counts"]
md = open(rep + "/RESULTS.md").read()
assert "**Interrupted** by the user after 1 of 4 cases" in md and "not run: interrupted" in md
' "$tmp/intr"
no_process_left "$tmp/intr" "SIGINT"

# 6b. a trainer that ignores SIGUSR1 and SIGTERM and leaves a detached grandchild:
# the runner escalates to SIGKILL of the process group and kills the orphan that
# left the group (it is the runner's as child subreaper). Nothing survives.
mark="nsa_stubborn_$$_$RANDOM"
cat >"$tmp/stubborn-train" <<SH
#!/usr/bin/env bash
for a in "\$@"; do [ "\$a" = --print-env ] && { echo '{"build": {}, "cuda": null, "host": {}, "env": {}}'; exit 0; }; done
trap '' USR1 TERM
setsid python3 -c 'import time; time.sleep(1000)' $mark </dev/null >/dev/null 2>&1 &
while true; do sleep 0.2; done
SH
chmod +x "$tmp/stubborn-train"
t0=$(date +%s)
"$H" run scenarios/gate_init.json --profile ci --filter gate=softmax --trainer "$tmp/stubborn-train" \
    --timeout-scale 0.05 --out "$tmp/stubborn" --quiet >/dev/null 2>&1
rc=$?
t1=$(date +%s)
[ "$rc" -eq 1 ] && grep -q "| gate_init | gate=softmax | \*\*HANG\*\* |" "$tmp/stubborn/RESULTS.md" \
    && ok "stubborn trainer: HANG" || bad "stubborn trainer HANG" "exit $rc"
grep -q "SIGKILL to the process group" "$tmp/stubborn/gate_init/gate=softmax/output.log" \
    && grep -q "did not answer SIGUSR1" "$tmp/stubborn/RESULTS.md" \
    && ok "stubborn trainer: SIGUSR1, SIGTERM ignored -> SIGKILL, said so" || bad "stubborn escalation" "$(cat "$tmp/stubborn/gate_init/gate=softmax/output.log")"
[ $((t1 - t0)) -le 20 ] && ok "stubborn trainer: ended in $((t1 - t0)) s" || bad "stubborn timing" "$((t1 - t0)) s"
no_process_left "$mark" "stubborn trainer (setsid grandchild)"
no_process_left "$tmp/stubborn" "stubborn trainer (the trainer)"

# 7. gpu profile without a GPU; show ----------------------------------------------------------------
if "$build/nsa-train" --print-env | python3 -c "import json,sys; e=json.load(sys.stdin); sys.exit(0 if not (e.get('cuda') or {}).get('devices') else 1)"; then
    "$H" run scenarios/gate_init.json --profile gpu --out "$tmp/gpu" --quiet >/dev/null 2>&1
    rc=$?
    [ "$rc" -eq 0 ] && grep -q "| gate_init | gate=softmax | SKIP | — | needs 1 GPU, found 0: runs where 1 CUDA device is usable |" "$tmp/gpu/RESULTS.md" \
        && ok "gpu profile without a GPU: visible SKIP, exit 0" || bad "gpu profile SKIP" "exit $rc"
else
    echo "SKIP gpu-profile-without-GPU check: this machine has a CUDA device"
fi
"$H" show "$tmp/gate" >"$tmp/show.out" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q "FAIL   gate_init/gate=softmax: uniform gate" "$tmp/show.out" && grep -q "## Diagnosis" "$tmp/show.out" \
    && ok "show prints verdicts and diagnosis, exits with the run's code" || bad "show" "exit $rc: $(head -5 "$tmp/show.out")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
