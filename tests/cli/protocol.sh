#!/usr/bin/env bash
# tests/cli/protocol.sh BUILD_DIR — the trainer protocol's capability handshake
# (docs/trainer-protocol.md):
#  1. `nsa-train --protocol-info` prints one JSON object and exits 0 without a config (a
#     missing --config file is not read): protocol 2, trainer, the build's git sha as
#     --print-env has it, and every feature list; its faults are exactly --list-faults'; its
#     backends, precisions, prefill, ddp modes and data kinds (features.data) are the config
#     loader's names (less cuda and its precisions without a CUDA build); its transports are
#     those the build accepts; its diagnostics include init_weights;
#  2. a stub trainer whose --protocol-info leaves out prefill "sequential" and fault
#     prefill_state_leak: the sequential case is a SKIP naming the prefill mode while the
#     batched one still PASSes; --fault prefill_state_leak makes every case a SKIP naming
#     the fault; a fault it lists still runs (gate_zero_init: FAIL as without the stub);
#     env.json records protocol 2;
#  3. a trainer without --protocol-info (exit 2 on it, as nsa-train before the handshake,
#     which bisect builds from old commits; one that prints nothing; one that never answers,
#     stopped after 5 s with what it left behind) is protocol 0: the cases run as before,
#     none skipped; an answer that is not the protocol's JSON is protocol 0 with a warning.
set -u
BUILD=${1:?usage: protocol.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
H="$BUILD/nsa-harness"
T="$BUILD/nsa-train"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, finish

# ---- 1. the handshake --------------------------------------------------------------------------
"$T" --protocol-info --config "$TMP/no_such_config.json" >"$TMP/info.json" 2>"$TMP/info.err"
rc=$?
check "--protocol-info exits 0 without reading --config (exit $rc)" test "$rc" = 0
check "... one line of output" test "$(wc -l <"$TMP/info.json")" = 1
"$T" --print-env >"$TMP/env.json"
"$T" --list-faults >"$TMP/faults.txt"
"$T" --config configs/tiny.json --check-config --set train.backend=x --set train.precision=x --set train.prefill=x \
  --set train.ddp_mode=x --set data.kind=x >/dev/null 2>"$TMP/names.txt"
for t in none mpi nccl; do
  if timeout 60 "$T" --transport "$t" --config configs/tiny.json --check-config >/dev/null 2>"$TMP/t.err" ||
     ! grep -q "this build has no" "$TMP/t.err"; then echo "$t"; fi
done >"$TMP/transports.txt"
python3 - "$TMP" <<'PY' && ok "--protocol-info: fields, version, faults = --list-faults, names = the config loader's" || bad "--protocol-info content"
import json, re, sys
d = sys.argv[1]
info = json.load(open(d + "/info.json"))
env = json.load(open(d + "/env.json"))
errs = []
def want(cond, what):
    if not cond: errs.append(what)
want(info.get("protocol") == 2, "protocol != 2: %r" % info.get("protocol"))
want(info.get("trainer") == "nsa-train", "trainer: %r" % info.get("trainer"))
want(info.get("version") == env["build"]["git_sha"], "version %r != --print-env build.git_sha %r" % (info.get("version"), env["build"]["git_sha"]))
f = info.get("features", {})
keys = ["backends", "precisions", "transports", "bootstraps", "ddp_modes", "prefill", "data", "faults", "diagnostics"]
for k in keys:
    want(isinstance(f.get(k), list) and all(isinstance(x, str) for x in f[k]), "features.%s is not a list of names" % k)
faults = [l.split()[0] for l in open(d + "/faults.txt") if l.strip() and not l.startswith(("#", " "))]
want(f.get("faults") == faults, "faults %r != --list-faults %r" % (f.get("faults"), faults))
# the config loader's names: "train.KEY: expected one of "a", "b", got ..."
names = {}
for line in open(d + "/names.txt"):
    m = re.search(r"(?:train|data)\.(\w+): expected one of (.*), got", line)
    if m: names[m.group(1)] = re.findall(r'"([^"]*)"', m.group(2))
cuda = env["build"].get("cuda_enabled") is True
want(f.get("backends") == [b for b in names.get("backend", ["?"]) if cuda or b != "cuda"], "backends %r vs loader %r" % (f.get("backends"), names.get("backend")))
want(f.get("precisions") == [p for p in names.get("precision", ["?"]) if cuda or p in ("fp32", "fp64")], "precisions %r vs loader %r" % (f.get("precisions"), names.get("precision")))
want(f.get("prefill") == names.get("prefill"), "prefill %r vs loader %r" % (f.get("prefill"), names.get("prefill")))
want(f.get("ddp_modes") == names.get("ddp_mode"), "ddp_modes %r vs loader %r" % (f.get("ddp_modes"), names.get("ddp_mode")))
want(f.get("data") == names.get("kind"), "data %r vs loader's data.kind %r" % (f.get("data"), names.get("kind")))
transports = open(d + "/transports.txt").read().split()
want(f.get("transports") == transports, "transports %r vs what the build accepts %r" % (f.get("transports"), transports))
want(set(f.get("bootstraps", [])) <= {"mpi", "env", "slurm"} and "env" in f.get("bootstraps", []), "bootstraps %r" % f.get("bootstraps"))
want(("mpi" in f.get("bootstraps", [])) == ("mpi" in transports), "bootstrap mpi iff transport mpi")
for dg in ["trace_grads", "gate_stats", "dump_step", "dump_acts", "dump_tensors", "flight_recorder", "stack_dump", "init_weights"]:
    want(dg in f.get("diagnostics", []), "diagnostics lacks %s" % dg)
for e in errs: print("  " + e)
sys.exit(1 if errs else 0)
PY
check "--help lists --protocol-info" bash -c "'$T' --help | grep -q -- '--protocol-info'"

# ---- 2. a trainer that lists less --------------------------------------------------------------
python3 - "$TMP" <<'PY'
import json, sys
d = sys.argv[1]
info = json.load(open(d + "/info.json"))
info["trainer"] = "stub"
info["features"]["prefill"] = ["batched"]
info["features"]["faults"] = [x for x in info["features"]["faults"] if x != "prefill_state_leak"]
open(d + "/reduced.json", "w").write(json.dumps(info) + "\n")
PY
cat >"$TMP/reduced_trainer" <<EOF
#!/usr/bin/env bash
# nsa-train with a reduced --protocol-info: no sequential prefill, no prefill_state_leak
case " \$* " in *" --protocol-info "*) cat "$TMP/reduced.json"; exit 0 ;; esac
exec "$T" "\$@"
EOF
chmod +x "$TMP/reduced_trainer"
"$H" run scenarios/prefill_step5.json --profile ci --trainer "$TMP/reduced_trainer" --out "$TMP/r1" >"$TMP/r1.out" 2>&1
rc=$?
check "a prefill mode the trainer does not list: exit 0 (exit $rc)" test "$rc" = 0
check "... the batched case still PASSes" grep -q "PASS  prefill_step5/prefill=batched" "$TMP/r1.out"
check "... the sequential case is a SKIP naming the prefill mode" \
  grep -q "SKIP  prefill_step5/prefill=sequential (.*): the trainer does not support prefill 'sequential' (--protocol-info)" "$TMP/r1.out"
check "... and the report says so" grep -q "the trainer does not support prefill 'sequential' (--protocol-info)" "$TMP/r1/RESULTS.md"
check "... RESULTS.md's header names the trainer and its protocol" \
  grep -q "· trainer \`$TMP/reduced_trainer\` (stub [0-9a-f?]*, protocol 2) ·" "$TMP/r1/RESULTS.md"
check "... env.json records protocol 2 and the trainer's answer" python3 -c "
import json, sys; r = json.load(open('$TMP/r1/env.json'))['runner']['trainer_protocol']
sys.exit(not (r['protocol'] == 2 and r['info']['trainer'] == 'stub'))"
"$H" run scenarios/gate_init.json --profile ci --trainer "$TMP/reduced_trainer" --fault prefill_state_leak \
  --out "$TMP/r2" >"$TMP/r2.out" 2>&1
rc=$?
check "a fault the trainer does not list: exit 0, every case skipped (exit $rc)" test "$rc" = 0
check "... each a SKIP naming the fault" test "$(grep -c "SKIP  gate_init/gate=.*: the trainer does not support fault 'prefill_state_leak' (--protocol-info)" "$TMP/r2.out")" = 2
"$H" run scenarios/gate_init.json --profile ci --trainer "$TMP/reduced_trainer" --fault gate_zero_init \
  --out "$TMP/r3" >"$TMP/r3.out" 2>&1
rc=$?
check "a fault it lists still runs: gate_zero_init FAILs gate_init (exit $rc)" \
  bash -c "test $rc = 1 && test \$(grep -c '^\[[0-9]/2\] FAIL' '$TMP/r3.out') = 2"
"$H" run scenarios/gate_init.json --profile ci --trainer "$TMP/reduced_trainer" --fault gate_zer_init \
  --out "$TMP/r4" >"$TMP/r4.out" 2>&1
rc=$?
check "a misspelt fault is still exit 2 before any case (exit $rc)" \
  bash -c "test $rc = 2 && grep -q -- '--fault gate_zer_init: ' '$TMP/r4.out' && test ! -e '$TMP/r4'"

# ---- 3. a trainer without the handshake ----------------------------------------------------------
cat >"$TMP/old_trainer" <<EOF
#!/usr/bin/env bash
# nsa-train as it was before the handshake: --protocol-info is an unknown option
case " \$* " in *" --protocol-info "*) echo "nsa-train: unknown option '--protocol-info' (see --help)" >&2; exit 2 ;; esac
exec "$T" "\$@"
EOF
chmod +x "$TMP/old_trainer"
"$H" run scenarios/prefill_step5.json scenarios/gate_init.json --profile ci --trainer "$TMP/old_trainer" \
  --out "$TMP/o1" >"$TMP/o1.out" 2>&1
rc=$?
check "protocol 0: the ci scenarios run as before, exit 0 (exit $rc)" test "$rc" = 0
check "... 4 PASS, nothing skipped" grep -q "^nsa-harness: 4 PASS$" "$TMP/o1.out"
check "... no warning about the handshake" bash -c "! grep -q 'protocol' '$TMP/o1.out'"
check "... RESULTS.md's header says protocol 0" grep -q "(protocol 0: no --protocol-info) ·" "$TMP/o1/RESULTS.md"
check "... env.json records protocol 0" python3 -c "
import json, sys; r = json.load(open('$TMP/o1/env.json'))['runner']['trainer_protocol']
sys.exit(not (r['protocol'] == 0 and r['info'] is None))"
MARK="nsa_probe_$$_$RANDOM"
cat >"$TMP/slow_trainer" <<EOF
#!/usr/bin/env bash
# --protocol-info: silent for 2 s (exit 0), or never answers (SLOW=1), leaving a setsid grandchild
case " \$* " in *" --protocol-info "*)
  [ -n "\${SLOW:-}" ] && { setsid python3 -c 'import time; time.sleep(300)' "$MARK" </dev/null >/dev/null 2>&1 & sleep 300; }
  sleep 2; exit 0 ;; esac
exec "$T" "\$@"
EOF
chmod +x "$TMP/slow_trainer"
"$H" run scenarios/gate_init.json --profile ci --trainer "$TMP/slow_trainer" --out "$TMP/o3" >"$TMP/o3.out" 2>&1
rc=$?
check "a trainer that prints nothing for --protocol-info: protocol 0, the cases run, no warning (exit $rc)" \
  bash -c "test $rc = 0 && grep -q '^nsa-harness: 2 PASS$' '$TMP/o3.out' && ! grep -q 'protocol' '$TMP/o3.out'"
t0=$(date +%s)
SLOW=1 "$H" run scenarios/gate_init.json --profile ci --trainer "$TMP/slow_trainer" --out "$TMP/o4" >"$TMP/o4.out" 2>&1
rc=$? t1=$(date +%s)
check "a trainer that never answers: protocol 0 after 5 s, the cases run (exit $rc, $((t1 - t0)) s)" \
  bash -c "test $rc = 0 && grep -q '^nsa-harness: 2 PASS$' '$TMP/o4.out' && test $((t1 - t0)) -lt 60"
check "... env.json says why" python3 -c "
import json, sys; r = json.load(open('$TMP/o4/env.json'))['runner']['trainer_protocol']
sys.exit(not (r['protocol'] == 0 and 'within 5 s' in r['note']))"
sleep 0.5
left=$(pgrep -f "$MARK" | tr '\n' ' ')
check "... nothing of the probe is left (its setsid grandchild killed)${left:+: pids $left}" test -z "$left"
[ -n "$left" ] && kill $left
cat >"$TMP/odd_trainer" <<EOF
#!/usr/bin/env bash
case " \$* " in *" --protocol-info "*) echo "hello"; exit 0 ;; esac
exec "$T" "\$@"
EOF
chmod +x "$TMP/odd_trainer"
"$H" run scenarios/gate_init.json --profile ci --trainer "$TMP/odd_trainer" --out "$TMP/o2" >"$TMP/o2.out" 2>&1
rc=$?
check "an answer that is not the protocol's JSON: protocol 0, the cases run (exit $rc)" \
  bash -c "test $rc = 0 && grep -q '^nsa-harness: 2 PASS$' '$TMP/o2.out'"
check "... with a warning saying so" grep -q "warning: the trainer .*odd_trainer: the answer to --protocol-info is not the protocol's JSON object" "$TMP/o2.out"
finish
