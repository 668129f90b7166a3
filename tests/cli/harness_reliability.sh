#!/usr/bin/env bash
# tests/cli/harness_reliability.sh BUILD_DIR — the runner's side of reliability:
# every item here is a defect a user hit, and each check fails on the code before its fix.
#  1. full disk: a trainer that reports an artifact it could not write ([IO-ERROR], exit 6)
#     is an ERROR "disk full writing <file>" (was FAIL "no metrics were written"); on a small
#     tmpfs neither binary dies by a signal and the run says what it could not write (the
#     runner read the trainer's half-allocated flight recorder and died by SIGBUS); with 0, 4,
#     64, 200 and 1024 KiB free the final report lists every case and names the
#     disk, or the run is refused up front when no report fits;
#  2. one --out at a time: a second run into a folder another run holds exits 2 naming the
#     holder's pid; a reused report folder starts clean of the last report's cases; a
#     non-empty folder that is not a report is refused;
#  3. reports that agree in every state — running, interrupted, done: the header's counts,
#     the rows, summary.json and junit.xml (a case not reached is PENDING while the run goes
#     on, SKIP once it stopped); a family's own cases are sub-steps of the progress counter;
#  4. reproduce lines carry every option that shaped the case (--set, --timeout-scale,
#     --fault, exact --case);
#  5. checked up front, before any case runs: a misspelt --fault, an --out that is a file or
#     cannot be made; check parameters that can never hold (a tensors glob matching no
#     tensor, a fractional window); validate/list of a folder without scenarios; help nosuch;
#  6. messages that say what they got (a tolerance out of range, --trainer /bin/true, show of
#     a missing folder, --set train.lr=1e999, --out ""), a 1 MB name cut in the report;
#  7. `list --tensors` names exactly what the trainer's dumps hold (every committed ci
#     baseline's dump, and a tied-embedding dump);
#  8. hostile inputs: validate /dev/zero, /dev/urandom, a FIFO, a 65 MiB file, a
#     config that is /dev/zero, an --out whose summary.json is a FIFO: exit 2 at once, naming
#     the file (under a generous `timeout 60`: each answers in milliseconds); a config pipe
#     `<(...)` still works;
#  9. RESULTS.md puts each scenario's description above its table; the Trainers
#     table only when the cases ran more than one trainer;
# 10. help run states --timeout-scale's range; validate takes folders as run does
#     (DIR/ gives DIR/x.json; a folder without *.json is exit 2 naming it).
set -u
BUILD=${1:?usage: harness_reliability.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
H="$BUILD/nsa-harness"
T="$BUILD/nsa-train"
TMP=$(mktemp -d)
MNT=""
cleanup() { [ -n "$MNT" ] && umount "$MNT" 2>/dev/null; pkill -f "$TMP/" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, expect_exit, has, finish
GATE="scenarios/gate_init.json --profile ci"

# ---- 1. full disk --------------------------------------------------------------------------
cat >"$TMP/io_trainer" <<EOF
#!/usr/bin/env bash
# a trainer that behaves like nsa-train on a full disk: it names the file and exits 6
case " \$* " in *" --print-env "*|*" --list-faults "*) exec "$T" "\$@" ;; esac
echo "nsa-train: cannot write metrics.jsonl" >&2
echo "[IO-ERROR] file=/data/out/metrics.jsonl errno=28 No space left on device" >&2
exit 6
EOF
chmod +x "$TMP/io_trainer"
expect_exit "a trainer out of disk: the run exits 2" 2 "$H" run $GATE --trainer "$TMP/io_trainer" --out "$TMP/io" --quiet
check "ERROR names the file: disk full writing /data/out/metrics.jsonl" \
  grep -q "| gate_init | gate=softmax | \*\*ERROR\*\* | .* | disk full writing /data/out/metrics.jsonl (rank 0, exit 6)" "$TMP/io/RESULTS.md"
MNT="$TMP/tiny_fs"
mkdir -p "$MNT"
# tiny_fs LEFT_KIB: a fresh 4 MiB tmpfs at $MNT, filled up to LEFT_KIB free (0 when mounting is
# not allowed here: the caller skips)
tiny_fs() {
  umount "$MNT" 2>/dev/null
  mount -t tmpfs -o size=4m tmpfs "$MNT" 2>"$TMP/mount.err" || return 1
  local avail=$(( $(stat -f -c '%a * %S' "$MNT") ))
  local fill=$(( avail - $1 * 1024 ))
  [ "$fill" -le 0 ] || fallocate -l "$fill" "$MNT/filler"
}
if tiny_fs 160; then
  # a trainer meets the full disk mid-case: 160 KiB free let the case start (the report and
  # its ballast fit), 100 steps of gate statistics do not
  "$H" run $GATE --case gate_init/gate=softmax --set train.steps=100 --out "$MNT/r" >"$TMP/out" 2>&1
  rc=$?
  check "a trainer meets the full disk: nsa-harness ends by exit, not by a signal (exit $rc)" test "$rc" -lt 128
  # the claim's ballast and the rank log's first blocks: when the trainer meets the full disk
  # its [IO-ERROR] line lands and the report that names the file still fits
  check "... the report names the disk-full file" \
    grep -q "| gate_init | gate=softmax | \*\*ERROR\*\* | .* | disk full writing $MNT/r/gate_init/gate=softmax/" "$MNT/r/RESULTS.md"
  check "... and says so on the console, announcing the report it wrote" grep -q "^RESULTS: $MNT/r/RESULTS.md" "$TMP/out"
  tiny_fs 20   # the recorder (16640 bytes) fits, its metrics do not
  "$T" --config configs/tiny.json --steps 2 --flight-recorder "$MNT/fr" --out "$MNT/tr" --quiet >"$TMP/out" 2>&1
  rc=$?
  check "20 KiB free: nsa-train --flight-recorder ends by exit, not by a signal (exit $rc)" test "$rc" -lt 128
  # "a full disk still leaves a report that says why" at every amount of free space (with
  # 200 KiB free the reports stayed at "1 PASS · 9 PENDING", never naming the disk): ten
  # cases; too little room for any report is refused up front, exit 2 naming the disk and
  # leaving no report; otherwise the final RESULTS.md, summary.json and junit.xml list every
  # case with its verdict (none PENDING), agree with each other and with the exit code, and a
  # run that found the disk full names it (ERROR "not run: disk full" for the cases not run)
  for left in 0 4 64 200 1024; do
    tiny_fs "$left"
    "$H" run scenarios/gate_init.json scenarios/branch_isolation.json --profile ci --out "$MNT/r" >"$TMP/out" 2>&1
    rc=$?
    if [ "$left" -le 4 ]; then
      check "$left KiB free: refused up front, exit 2 (exit $rc)" test "$rc" = 2
      check "... naming the disk and its free space" grep -q -- "--out $MNT/r: the disk is full: $MNT/r (tmpfs mounted on $MNT) has [0-9]* KiB free" "$TMP/out"
      check "... and no report left behind" bash -c "test ! -e '$MNT/r/RESULTS.md' && test ! -e '$MNT/r/summary.json'"
      continue
    fi
    python3 - "$MNT/r" "$MNT" "$rc" >"$TMP/py.out" 2>&1 <<'PY' && ok "$left KiB free: the final report lists all 10 cases, agrees with itself and the exit code (exit $rc), names the disk" || { bad "$left KiB free: final report"; tail -5 "$TMP/py.out"; tail -3 "$TMP/out"; }
import json, re, sys, xml.etree.ElementTree as ET
d, mnt, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
md = open(d + "/RESULTS.md").read()
s = json.load(open(d + "/summary.json"))
j = ET.parse(d + "/junit.xml").getroot()
rows = re.findall(r"^\| (?:gate_init|branch_isolation) \| [^|]+ \| \**([A-Z]+)\** \|", md, re.M)
vs = [c["verdict"] for c in s["cases"]]
head = re.search(r"\*\*(\d+) cases?((?: · \d+ [A-Z]+)*)\*\*", md)
hc = {v: int(n) for n, v in re.findall(r"(\d+) ([A-Z]+)", head.group(2))}
assert len(rows) == len(vs) == int(head.group(1)) == int(j.get("tests")) == 10, (rows, vs, head.group(0))
assert "PENDING" not in vs and s["finished"] and "Partial report" not in md, (vs, s["finished"])
assert hc == {v: vs.count(v) for v in set(vs)} == {k: v for k, v in s["counts"].items() if v}, (hc, s["counts"])
assert s["exit_code"] == rc == (2 if "ERROR" in vs else 1 if set(vs) - {"PASS", "SKIP"} else 0), (s["exit_code"], rc, vs)
if rc:   # not every case passed: the disk is why, and both reports say so, naming it
    assert s["disk_full"] and "(tmpfs mounted on %s)" % mnt in s["disk_full"]["why"], s["disk_full"]
    assert "**Disk full**: the disk holding %s (tmpfs mounted on %s)" % (d, mnt) in md, md[:1500]
    notrun = [c for c in s["cases"] if c["summary"].startswith("not run: disk full")]
    assert all(c["verdict"] == "ERROR" and mnt in c["summary"] for c in notrun), notrun
    assert all(c["verdict"] in ("PASS", "ERROR") for c in s["cases"]), vs
print(rc, hc)
PY
    [ "$rc" = 0 ] || check "... and show says so" bash -c "'$H' show '$MNT/r' | grep -q '^DISK FULL: the disk holding $MNT/r (tmpfs mounted on $MNT)'"
  done
  umount "$MNT" && MNT=""
else
  echo "SKIP: cannot mount a tmpfs here ($(head -1 "$TMP/mount.err")): the full-disk part is not run"
  MNT=""
fi

# ---- 2. one run per --out ----------------------------------------------------------------------
mkdir -p "$TMP/held"
echo 424242 >"$TMP/held/.nsa-harness.lock"
# blocking, not -n: the wait loop below takes the lock for an instant each time it looks,
# and a non-blocking holder that started in that instant gave up (seen once on 2 loaded
# cores: the run then found the folder free and the check failed)
flock "$TMP/held/.nsa-harness.lock" sleep 60 &
holder=$!
for _ in $(seq 1 100); do   # until the lock is held (a loaded machine may take a while)
  flock -n "$TMP/held/.nsa-harness.lock" true || break
  sleep 0.1
done
expect_exit "a folder another run holds: exit 2" 2 "$H" run $GATE --out "$TMP/held" --quiet
check "... naming the holder's pid" has "$TMP/out" "is in use by another nsa-harness run (pid 424242)"
pkill -P "$holder" sleep 2>/dev/null; kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
expect_exit "a first report" 0 "$H" run $GATE --out "$TMP/reuse" --quiet
expect_exit "the same folder, another scenario" 0 "$H" run scenarios/perf.json --profile ci --out "$TMP/reuse" --quiet
check "the reused folder holds no case of the earlier report" test ! -e "$TMP/reuse/gate_init"
check "... and the new report's cases" test -d "$TMP/reuse/perf"
mkdir -p "$TMP/other" && echo keep >"$TMP/other/notes.txt"
expect_exit "a non-empty folder that is not a report: exit 2" 2 "$H" run $GATE --out "$TMP/other" --quiet
check "... said, and nothing touched" bash -c "grep -q 'not empty and not an nsa-harness report' '$TMP/out' && test -s '$TMP/other/notes.txt'"

# ---- 3. reports agree in every state ----------------------------------------------------------
# agree DIR STATE: the header's counts, the rows, summary.json and junit.xml say the same
agree() { python3 - "$1" "$2" <<'PY'
import json, re, sys, xml.etree.ElementTree as ET
d, state = sys.argv[1], sys.argv[2]
md = open(d + "/RESULTS.md").read()
head = re.search(r"\*\*(\d+) cases?((?: · \d+ [A-Z]+)*)\*\*", md)
total = int(head.group(1)); hc = {v: int(n) for n, v in re.findall(r"(\d+) ([A-Z]+)", head.group(2))}
rows = re.findall(r"^\| gate_init \| [^|]+ \| \**([A-Z]+)\** \|", md, re.M)
s = json.load(open(d + "/summary.json"))
sc = {k: v for k, v in s["counts"].items() if v}
vs = [c["verdict"] for c in s["cases"]]
j = ET.parse(d + "/junit.xml").getroot()
jt = {k: int(j.get(k)) for k in ("tests", "failures", "errors", "skipped")}
rc = {v: rows.count(v) for v in set(rows)}
assert total == len(rows) == len(vs) == jt["tests"], (total, rows, vs, jt)
assert hc == rc == sc == {v: vs.count(v) for v in set(vs)}, (hc, rc, sc, vs)
assert jt["errors"] == hc.get("ERROR", 0) and jt["skipped"] == hc.get("SKIP", 0) + hc.get("PENDING", 0), (jt, hc)
assert jt["failures"] == sum(hc.get(v, 0) for v in ("FAIL", "HANG", "CRASH")), (jt, hc)
want = {"running": "PENDING", "interrupted": "SKIP", "done": None}[state]
assert want is None or want in vs, (state, vs)
print(state, hc)
PY
}
"$H" run $GATE --fault hang=0:1:forward --out "$TMP/states" --quiet >"$TMP/states.out" 2>&1 &
run_pid=$!
for _ in $(seq 1 100); do [ -d "$TMP/states/gate_init/gate=softmax/ranks" ] && break; sleep 0.1; done
sleep 1
check "running: counts, rows, summary.json and junit.xml agree" agree "$TMP/states" running
kill -INT "$run_pid"; wait "$run_pid"
check "interrupted: they agree" agree "$TMP/states" interrupted
check "interrupted: the header says it" has "$TMP/states/RESULTS.md" "**Interrupted**"
"$H" run $GATE --fault gate_zero_init --out "$TMP/done" --quiet >/dev/null 2>&1
check "done: they agree" agree "$TMP/done" done
"$H" run scenarios/gc_bisection.json --profile ci --out "$TMP/gcb" >"$TMP/gcb.out" 2>&1
check "a family's own cases are sub-steps: [1/1·1], [1/1·2], never [2/2]" \
  bash -c "grep -q '^\[1/1·1\] PASS' '$TMP/gcb.out' && grep -q '^\[1/1·2\] PASS' '$TMP/gcb.out' && ! grep -q '^\[2/2\]' '$TMP/gcb.out'"

# ---- 4. reproduce lines --------------------------------------------------------------------------
"$H" run $GATE --fault gate_zero_init --set train.seed=7 --timeout-scale 2 --out "$TMP/repro" --quiet >/dev/null 2>&1
check "the reproduce line carries --case, --set, --timeout-scale and --fault" \
  grep -qE "reproduce: \`.*nsa-harness run scenarios/gate_init.json --profile ci --case gate_init/gate=softmax --fault gate_zero_init --set train.seed=7 --timeout-scale 2\`" \
  "$TMP/repro/RESULTS.md"

# ---- 5. up front ---------------------------------------------------------------------------------
expect_exit "--fault misspelt: exit 2 before any case" 2 "$H" run $GATE --fault gate_zer_init --out "$TMP/f" --quiet
check "... naming the fault, no report written" bash -c "grep -q -- '--fault gate_zer_init: ' '$TMP/out' && test ! -e '$TMP/f'"
echo x >"$TMP/afile"
expect_exit "--out is a file: exit 2" 2 "$H" run $GATE --out "$TMP/afile" --quiet
check "... said" has "$TMP/out" "--out $TMP/afile: exists and is not a folder"
expect_exit "--out cannot be made: exit 2" 2 "$H" run $GATE --out /proc/nsa-harness-test --quiet
check "... said, with the reason" has "$TMP/out" "--out /proc/nsa-harness-test: cannot create it:"
mkdir -p "$TMP/scen"
# copies of a shipped scenario, one defect each (their config paths made absolute)
sed "s|\"\.\./configs/|\"$PWD/configs/|" scenarios/prefill_step5.json >"$TMP/prefill.json"
sed 's/"tensors": \["logits"\]/"tensors": ["nosuch*"]/' "$TMP/prefill.json" >"$TMP/scen/nosuch.json"
expect_exit "a tensors glob that matches no tensor: validate exit 2" 2 "$H" validate "$TMP/scen/nosuch.json"
check "... at its file:line:col, naming the glob" grep -q "nosuch.json:[0-9]*:[0-9]*: tensors\[0\]: 'nosuch\*' matches no tensor" "$TMP/out"
sed 's/"window": 5/"window": 2.5/' "$TMP/prefill.json" >"$TMP/scen/window.json"
expect_exit "a fractional window: validate exit 2" 2 "$H" validate "$TMP/scen/window.json"
check "... says what it got" grep -q "window: expected a whole number of steps, got 2.5" "$TMP/out"
mkdir -p "$TMP/empty"
expect_exit "validate of a folder without scenarios: exit 2" 2 "$H" validate "$TMP/empty"
expect_exit "list of a folder without scenarios: exit 2" 2 "$H" list "$TMP/empty"
expect_exit "help nosuch: exit 2" 2 "$H" help nosuch

# ---- 6. messages ---------------------------------------------------------------------------------
sed 's/"tolerance": {"ci": 0, "gpu": 2e-2}/"tolerance": {"ci": 7, "gpu": 2e-2}/' "$TMP/prefill.json" >"$TMP/scen/tol.json"
expect_exit "a tolerance out of range: exit 2" 2 "$H" validate "$TMP/scen/tol.json"
check "... its range [0, 1] and what it got" has "$TMP/out" "tolerance: expected a number in [0, 1], got 7"
expect_exit "--trainer /bin/true: exit 2" 2 "$H" run $GATE --trainer /bin/true --out "$TMP/t" --quiet
check "... says it printed nothing, not 'failed (status 0)'" has "$TMP/out" "printed nothing for --print-env"
expect_exit "show of a missing folder: exit 2" 2 "$H" show "$TMP/nonexistent"
check "... names it, no -1:-1" bash -c "grep -q '$TMP/nonexistent: No such file or directory' '$TMP/out' && ! grep -q -- '-1:-1' '$TMP/out'"
expect_exit "--set train.lr=1e999: exit 2" 2 "$H" run $GATE --set train.lr=1e999 --out "$TMP/lr" --quiet
check "... out of the range of a number, not 'got string'" has "$TMP/out" "1e999 is out of the range of a number"
expect_exit "--out '': exit 2" 2 "$H" run $GATE --out "" --quiet
check "... expected a folder" has "$TMP/out" "--out '': expected a folder"
python3 -c "
import json; s = json.load(open('scenarios/gate_init.json')); s['name'] = 'x!' * 500000
json.dump(s, open('$TMP/scen/bigname.json', 'w'))"
"$H" run "$TMP/scen/bigname.json" --profile ci --out "$TMP/big" --quiet >/dev/null 2>&1
check "a 1 MB invalid name: RESULTS.md and junit.xml stay small" \
  bash -c "test \$(stat -c %s '$TMP/big/RESULTS.md') -lt 20000 && test \$(stat -c %s '$TMP/big/junit.xml') -lt 20000"

# ---- 7. list --tensors against real dumps ----------------------------------------------------------
"$H" list scenarios/golden_regression.json --profile ci --tensors >"$TMP/tensors.txt"
python3 - "$TMP/tensors.txt" golden/baselines/ci/cpu-*/golden_regression <<'PY' && ok "list --tensors equals every committed ci baseline's dump, in order" || bad "list --tensors vs the baselines' dumps"
import json, os, sys
listed, case = {}, None
for line in open(sys.argv[1]):
    if line.startswith("      ") and not line.startswith("        "): case = line.strip(); listed[case] = []
    elif line.startswith("        ") and case: listed[case].append(line.strip())
for f in sorted(os.listdir(sys.argv[2])):
    b = json.load(open(os.path.join(sys.argv[2], f)))
    real = [t["name"] for t in b["dump"]["tensors"]]
    assert listed[b["case"]] == real, (b["case"], set(listed[b["case"]]) ^ set(real))
assert len(listed) == 9, listed.keys()
PY
"$T" --config configs/tiny.json --steps 1 --set model.tie_embeddings=true --dump-step "$TMP/tied.st" --out "$TMP/tied" --quiet
cat >"$TMP/scen/tied.json" <<EOF
{"name": "tied", "description": "test", "family": "prefill_step5", "config": "$PWD/configs/tiny.json",
 "overrides": {"train.steps": 1, "model.tie_embeddings": true}, "profiles": {"ci": {}},
 "matrix": {"p": {"key": "train.prefill", "values": ["batched", "sequential"]}},
 "checks": [{"check": "dump_match", "reference": "p=batched"}]}
EOF
"$H" list "$TMP/scen/tied.json" --profile ci --tensors | sed -n 's/^        //p' | sort -u >"$TMP/tied_listed.txt"
python3 -c "
import json, struct, sys
raw = open('$TMP/tied.st', 'rb').read(); n = struct.unpack('<Q', raw[:8])[0]
print('\n'.join(sorted(k for k in json.loads(raw[8:8 + n]) if k != '__metadata__')))" >"$TMP/tied_real.txt"
check "list --tensors equals a tied-embedding dump (no lm_head)" cmp -s "$TMP/tied_listed.txt" "$TMP/tied_real.txt"

# ---- 8. hostile inputs: every file is read with a limit, only a regular file ----------------
# `validate /dev/zero` grew to 1.6 GB and never returned; a FIFO without a writer blocked in
# open(). Each must be exit 2 at once: the `timeout 60` is generous on purpose (they answer in
# milliseconds), it only keeps a regression from hanging the suite.
for f in /dev/zero /dev/urandom; do
  expect_exit "validate $f: exit 2 at once" 2 timeout 60 "$H" validate "$f"
  check "... names it: not a regular file" has "$TMP/out" "$f: not a regular file (a character device)"
done
mkfifo "$TMP/scen_fifo.json"
expect_exit "validate of a FIFO without a writer: exit 2 at once" 2 timeout 60 "$H" validate "$TMP/scen_fifo.json"
check "... names it: not a regular file (a FIFO)" has "$TMP/out" "$TMP/scen_fifo.json: not a regular file (a FIFO or pipe)"
expect_exit "run of a FIFO: exit 2 at once" 2 timeout 60 "$H" run "$TMP/scen_fifo.json" --profile ci --out "$TMP/fifo_run" --quiet
truncate -s 65M "$TMP/huge.json"
expect_exit "a 65 MiB scenario file: exit 2" 2 timeout 60 "$H" validate "$TMP/huge.json"
check "... larger than the 64 MiB limit, said" has "$TMP/out" "$TMP/huge.json: larger than 64 MiB"
sed 's|"config": "[^"]*tiny.json"|"config": "/dev/zero"|' "$TMP/prefill.json" >"$TMP/zero_config.json"
expect_exit "a scenario whose config is /dev/zero: exit 2 at once" 2 timeout 60 "$H" validate "$TMP/zero_config.json"
check "... naming the config" has "$TMP/out" "/dev/zero: not a regular file (a character device)"
expect_exit "nsa-train --config /dev/zero: exit 2 at once" 2 timeout 60 "$T" --config /dev/zero --check-config
expect_exit "nsa-train --config <(...) still reads a pipe" 0 timeout 60 "$T" --config <(cat configs/tiny.json) --check-config
mkdir -p "$TMP/fifo_out"
mkfifo "$TMP/fifo_out/summary.json"
expect_exit "--out whose summary.json is a FIFO: exit 2 at once" 2 timeout 60 "$H" run $GATE --out "$TMP/fifo_out" --quiet
check "... saying what it is" has "$TMP/out" "its summary.json is not a report's ($TMP/fifo_out/summary.json: not a regular file"

# ---- 9. what RESULTS.md says ----------------------------------------------------------------
python3 - "$TMP/done/RESULTS.md" <<'PY' && ok "each scenario's description stands above its table" || bad "scenario description above its table"
import json, sys
md = open(sys.argv[1]).read()
desc = json.load(open("scenarios/gate_init.json"))["description"]
head = "### gate_init\n\n" + desc + " (`scenarios/gate_init.json`, family gate_init)\n\n| scenario | case | verdict |"
assert head in md and md.index(head) < md.index("| gate_init | gate=softmax |"), md[:1500]
PY
check "one trainer: no Trainers table" bash -c "! grep -q '^## Trainers' '$TMP/done/RESULTS.md'"
# every case run by one trainer of the scenario's own (run.trainers + run.trainer): still one trainer
python3 - "$TMP/prefill.json" "$TMP/scen/own_trainer.json" "$T" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["name"] = "own_trainer"
s.setdefault("run", {})["trainers"] = {"nt": [sys.argv[3]]}
s["run"]["trainer"] = "nt"
json.dump(s, open(sys.argv[2], "w"), indent=1)
PY
"$H" run "$TMP/scen/own_trainer.json" --profile ci --out "$TMP/own" --quiet >"$TMP/out" 2>&1
check "a scenario's own trainer for every case: the cases ran it" python3 -c "
import json, sys; s = json.load(open('$TMP/own/summary.json')); sys.exit(not {c.get('trainer') for c in s['cases']} == {'nt'})"
check "... one trainer: no Trainers table" bash -c "! grep -q '^## Trainers' '$TMP/own/RESULTS.md'"

# ---- 10. messages that say what they mean -----------------------------------------------------
"$H" help run >"$TMP/help_run.txt"
check "help run: --timeout-scale states the range the parser accepts (0 < X <= 1000)" \
  grep -q "timeout_s and stall_s by X, a number with" "$TMP/help_run.txt"
check "... 0 < X <= 1000" grep -q "0 < X <= 1000" "$TMP/help_run.txt"
expect_exit "--timeout-scale 1000.5: exit 2" 2 "$H" run $GATE --timeout-scale 1000.5 --out "$TMP/ts" --quiet
# validate takes folders as run and list do: its *.json, not its subfolders; a folder without one is exit 2
mkdir -p "$TMP/vdir/sub" "$TMP/vnone/sub"
cp "$TMP/prefill.json" "$TMP/vdir/a.json"
cp "$TMP/prefill.json" "$TMP/vdir/sub/b.json"
cp "$TMP/prefill.json" "$TMP/vnone/sub/c.json"
expect_exit "validate DIR/: the scenarios directly in it" 0 "$H" validate "$TMP/vdir/"
check "... named DIR/a.json (no //), not the subfolder's" bash -c "grep -q '^ok  $TMP/vdir/a.json ' '$TMP/out' && ! grep -q 'b.json\|//' '$TMP/out'"
expect_exit "validate FILE DIR-without-*.json: exit 2, not silently FILE alone" 2 "$H" validate scenarios/gate_init.json "$TMP/vnone"
check "... naming the folder" has "$TMP/out" "$TMP/vnone: a folder without scenario files (*.json directly in it; subfolders are not searched"
expect_exit "run FILE DIR-without-*.json: exit 2 as well" 2 "$H" run scenarios/gate_init.json "$TMP/vnone" --profile ci --out "$TMP/vr" --quiet
"$H" help validate >"$TMP/help_validate.txt"
check "help validate: a SCENARIO is a file or a directory" grep -q "A SCENARIO is a file, or a" "$TMP/help_validate.txt"

finish
