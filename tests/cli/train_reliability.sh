#!/usr/bin/env bash
# tests/cli/train_reliability.sh BUILD_DIR — nsa-train under full disks and bad checkpoints
# (the trainer's side). Each block proves one defect fixed; run
# against the trainer before the fix (commit 9c71bce) 52 of its checks FAILed: SIGBUS
# (exit 135) on the full tmpfs, in the trainer and in --show-flight-recorder; exit 0, 1 or 3
# and no [IO-ERROR] line for /dev/full; exit 0 and a note for another config; exit 0 for
# flipped tensor bytes; no message for a resume past train.steps; the --save error only
# after training.
#
#  1. /dev/full: an artifact whose writes fail (metrics.jsonl, grad_trace.jsonl,
#     gate_stats.jsonl, anomaly.json as symlinks to /dev/full; the --dump-step and --save
#     files through their FILE.tmp staging file, since safetensors files are written to
#     FILE.tmp and renamed) ends the run with exit 6 and exactly one
#     `[IO-ERROR] file=<that file> errno=28 No space left on device` line on stderr, never a
#     warning and exit 0, never a signal.
#  2. a real 64 KiB tmpfs (mounted here; where mounting is refused, a visible SKIP line):
#     full before the run: --flight-recorder on it is exit 6 naming the recorder, no
#     SIGBUS (before: SIGBUS in flightrec_open), and reading the empty recorder, or a sparse
#     one of the recorder's size, is exit 1, no signal (--show-flight-recorder reads with
#     pread: a load from a mapped hole on a full tmpfs is SIGBUS); room for the recorder but not the metrics: exit 6 naming metrics.jsonl,
#     the metrics file still whole JSON lines, the recorder saying exit_code 6; --save on
#     it: exit 6 naming the checkpoint, no .tmp file left.
#  3. checkpoints: another config (nsa.w, data.kind) is exit 2 naming each key with both
#     values; --allow-config-change resumes with a warning; another train.steps is allowed
#     (a note); ten flipped bytes in one tensor are exit 1 naming that tensor (parameter
#     or AdamW moment) before a step runs; a checkpoint without checksums (older) loads
#     with a note; --resume at or past train.steps is exit 0 "nothing to do: ... at step S
#     of N"; --save into a missing or read-only directory, or onto a directory, is exit 2
#     at start (no metrics record: training never began).
set -u
BUILD=${1:?usage: train_reliability.sh BUILD_DIR}
BIN="$BUILD/nsa-train"
TMP=$(mktemp -d)
MNT="$TMP/mnt"
mounted=""
cleanup() { for m in $mounted; do umount "$m" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, finish
TINY="--config configs/tiny.json --threads 1 --quiet"   # one thread: tiny steps, a busy 2-core machine

# run NAME WANT_RC ARGS...: nsa-train; its exit code must be WANT_RC (stdout/err in $TMP/out, $TMP/err)
run() { local name=$1 want=$2; shift 2
  "$BIN" "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?
  if [ "$rc" = "$want" ]; then ok "$name (exit $rc)"; else bad "$name: exit $rc, want $want"; sed 's/^/    /' "$TMP/err" | head -8; fi; }
# io_line NAME FILE: stderr holds exactly one [IO-ERROR] line, and it names FILE
io_line() {
  local n; n=$(grep -c '^\[IO-ERROR\] ' "$TMP/err")
  if [ "$n" = 1 ] && grep -qxF "[IO-ERROR] file=$2 errno=28 No space left on device" "$TMP/err"; then ok "$1: one [IO-ERROR] line naming $(basename "$2"), errno 28"
  else bad "$1: want one line '[IO-ERROR] file=$2 errno=28 ...', got $n:"; grep '^\[IO-ERROR\]' "$TMP/err" | sed 's/^/    /'; fi; }
records() { [ -f "$1" ] && wc -l <"$1" || echo 0; }

# ---- 1. /dev/full ------------------------------------------------------------------------------
if [ -w /dev/full ]; then
  d="$TMP/full_metrics"; mkdir -p "$d"; ln -s /dev/full "$d/metrics.jsonl"
  run "metrics.jsonl on /dev/full" 6 $TINY --steps 3 --out "$d"
  io_line "metrics.jsonl" "$d/metrics.jsonl"

  d="$TMP/full_trace"; mkdir -p "$d"; ln -s /dev/full "$d/grad_trace.jsonl"
  run "grad_trace.jsonl on /dev/full (--trace-grads)" 6 $TINY --steps 3 --out "$d" --trace-grads
  io_line "grad_trace.jsonl" "$d/grad_trace.jsonl"
  check "grad_trace.jsonl: the run stopped at the step whose record failed" [ "$(records "$d/metrics.jsonl")" -le 1 ]

  d="$TMP/full_gate"; mkdir -p "$d"; ln -s /dev/full "$d/gate_stats.jsonl"
  run "gate_stats.jsonl on /dev/full (--gate-stats)" 6 $TINY --steps 3 --out "$d" --gate-stats
  io_line "gate_stats.jsonl" "$d/gate_stats.jsonl"

  d="$TMP/full_dump"; mkdir -p "$d"; ln -s /dev/full "$d/step1.safetensors.tmp"
  run "--dump-step file on /dev/full" 6 $TINY --steps 3 --out "$d" --dump-step "$d/step1.safetensors"
  io_line "--dump-step" "$d/step1.safetensors"
  check "--dump-step: no file left behind" [ ! -e "$d/step1.safetensors" ] && [ ! -e "$d/step1.safetensors.tmp" ]

  d="$TMP/full_save"; mkdir -p "$d"; ln -s /dev/full "$d/ck.safetensors.tmp"
  run "--save file on /dev/full" 6 $TINY --steps 3 --out "$d" --save "$d/ck.safetensors"
  io_line "--save" "$d/ck.safetensors"

  d="$TMP/full_anomaly"; mkdir -p "$d"; ln -s /dev/full "$d/anomaly.json"
  run "anomaly.json on /dev/full (a diverging run)" 6 $TINY --steps 5 --set train.lr=1e30 --set train.warmup_steps=0 \
      --set train.grad_clip=0 --out "$d"
  io_line "anomaly.json" "$d/anomaly.json"
  check "anomaly.json: the [ANOMALY] line is still on stderr" grep -q '^\[ANOMALY\] step=' "$TMP/err"
else
  echo "SKIP: /dev/full is not writable here: the /dev/full cases did not run"
fi

# ---- 2. a real 64 KiB tmpfs ------------------------------------------------------------------------
mkdir -p "$MNT"
if mount -t tmpfs -o size=64k tmpfs "$MNT" 2>"$TMP/mount.err"; then
  mounted="$MNT"
  dd if=/dev/zero of="$MNT/fill" bs=4k 2>/dev/null   # until ENOSPC: the disk is full
  run "--flight-recorder on a full tmpfs" 6 $TINY --steps 3 --out "$MNT/out" --flight-recorder "$MNT/fr"
  check "full tmpfs: no signal (exit $rc < 128)" [ "$rc" -lt 128 ]
  io_line "--flight-recorder" "$MNT/fr"
  check "full tmpfs: the message names the recorder and says why" grep -q "flight-recorder $MNT/fr: cannot reserve" "$TMP/err"
  run "reading the empty recorder is 'not a recorder', no signal" 1 --show-flight-recorder "$MNT/fr"
  truncate -s 16640 "$MNT/sparse.fr"   # a recorder's size, all holes: what the old trainer left
  run "reading a sparse recorder on the full tmpfs: 'not a recorder', no SIGBUS" 1 --show-flight-recorder "$MNT/sparse.fr"

  rm -f "$MNT/fill" "$MNT/fr"; rm -rf "$MNT/out"
  dd if=/dev/zero of="$MNT/fill" bs=4k count=10 2>/dev/null   # 24 KiB left: the recorder (20 KiB), then 4 KiB
  run "metrics.jsonl fills the tmpfs" 6 $TINY --steps 200 --out "$MNT/out" --flight-recorder "$MNT/fr"
  check "metrics on tmpfs: no signal (exit $rc < 128)" [ "$rc" -lt 128 ]
  io_line "metrics.jsonl on tmpfs" "$MNT/out/metrics.jsonl"
  check "metrics.jsonl holds only whole JSON lines (the record that did not fit was cut off)" python3 - "$MNT/out/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert 0 < len(rows) < 200 and [r["step"] for r in rows] == list(range(1, len(rows) + 1)), len(rows)
PY
  "$BIN" --show-flight-recorder "$MNT/fr" >"$TMP/fr.json" 2>"$TMP/err"
  check "the recorder on the full tmpfs says exited, exit_code 6" python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["state"]
assert s["exited"] and s["exit_code"] == 6 and s["fatal_signal"] == 0, s' "$TMP/fr.json"

  rm -rf "$MNT/out" "$MNT/fr"
  run "--save on the tmpfs" 6 $TINY --steps 2 --out "$MNT/out" --save "$MNT/ck.safetensors"
  io_line "--save on tmpfs" "$MNT/ck.safetensors"
  check "--save on tmpfs: neither the checkpoint nor its .tmp is left" [ ! -e "$MNT/ck.safetensors" ] && [ ! -e "$MNT/ck.safetensors.tmp" ]
  umount "$MNT" && mounted=""
else
  echo "SKIP: cannot mount a 64 KiB tmpfs here ($(head -1 "$TMP/mount.err")): the full-tmpfs cases did not run"
fi

# ---- 3. checkpoints ---------------------------------------------------------------------------------
CK="$TMP/ck.safetensors"
run "a 4-step checkpoint" 0 $TINY --steps 4 --save "$CK" --out "$TMP/ck"
run "another nsa.w and data.kind: refused" 2 $TINY --steps 6 --set nsa.w=64 --set data.kind=synthetic --resume "$CK" --out "$TMP/r1"
check "another config: names nsa.w with both values" grep -qxF "  nsa.w: checkpoint 32, this run 64" "$TMP/err"
check "another config: names data.kind with both values" grep -qxF '  data.kind: checkpoint "learnable", this run "synthetic"' "$TMP/err"
check "another config: says how to resume anyway" grep -q -- "--allow-config-change" "$TMP/err"
check "another config: no step ran" [ "$(records "$TMP/r1/metrics.jsonl")" = 0 ]
run "another nsa.w with --allow-config-change: resumed" 0 $TINY --steps 6 --set nsa.w=64 --resume "$CK" --out "$TMP/r2" --allow-config-change
check "--allow-config-change: the differing key is a warning" grep -q "warning: .*resumed anyway" "$TMP/err"
check "--allow-config-change: nsa.w listed" grep -qxF "  nsa.w: checkpoint 32, this run 64" "$TMP/err"
check "--allow-config-change: steps 5 and 6 ran" python3 -c '
import json, sys
assert [json.loads(l)["step"] for l in open(sys.argv[1])] == [5, 6]' "$TMP/r2/metrics.jsonl"
run "--allow-config-change without --resume" 2 $TINY --steps 2 --out "$TMP/x" --allow-config-change
run "another train.steps (train longer): allowed" 0 $TINY --steps 6 --resume "$CK" --out "$TMP/r3"
check "another train.steps: a note says so" grep -q "note: .*train.steps: checkpoint 4, this run 6 (allowed" "$TMP/err"

# flip 10 bytes (one every 7) inside the data of one tensor; the file stays valid safetensors
flip() { python3 - "$1" "$2" "$3" <<'PY'
import json, struct, sys
src, name, dst = sys.argv[1:4]
raw = bytearray(open(src, "rb").read()); n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); a, b = h[name]["data_offsets"]
assert b - a > 200
for i in range(10): raw[8 + n + a + 64 + 7 * i] ^= 0x5a
open(dst, "wb").write(raw)
PY
}
flip "$CK" blocks.1.attn.o_proj.weight "$TMP/bad1.safetensors"
run "ten flipped bytes in a weight" 1 $TINY --steps 6 --resume "$TMP/bad1.safetensors" --out "$TMP/b1"
check "flipped weight: the tensor is named corrupt" grep -q "tensor 'blocks.1.attn.o_proj.weight' is corrupt" "$TMP/err"
check "flipped weight: no step ran" [ "$(records "$TMP/b1/metrics.jsonl")" = 0 ]
flip "$CK" optim.v.tok_emb.weight "$TMP/bad2.safetensors"
run "ten flipped bytes in an AdamW moment" 1 $TINY --steps 6 --resume "$TMP/bad2.safetensors" --out "$TMP/b2"
check "flipped moment: the tensor is named corrupt" grep -q "tensor 'optim.v.tok_emb.weight' is corrupt" "$TMP/err"
check "the checkpoint is valid safetensors with a digest per tensor" python3 - "$CK" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
d = json.loads(h["__metadata__"]["tensor_digests"])
names = [k for k in h if k != "__metadata__"]
assert sorted(d) == sorted(names) and all(len(v) == 16 and int(v, 16) >= 0 for v in d.values())
PY
python3 - "$CK" "$TMP/old.safetensors" <<'PY'
# the same checkpoint as a writer before checksums made it: no "tensor_digests" (and no
# "metadata_digests", which came later still: tests/cli/checkpoint_meta.sh)
import json, struct, sys
raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
del h["__metadata__"]["tensor_digests"]
del h["__metadata__"]["metadata_digests"]
hdr = json.dumps(h, separators=(",", ":")).encode(); hdr += b" " * (-len(hdr) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hdr)) + hdr + raw[8 + n:])
PY
run "a checkpoint without checksums (older) resumes" 0 $TINY --steps 6 --resume "$TMP/old.safetensors" --out "$TMP/old"
check "no checksums: a note says its data is not verified" grep -q "no tensor checksums" "$TMP/err"

run "--resume at train.steps" 0 $TINY --steps 4 --resume "$CK" --out "$TMP/past"
check "at train.steps: 'nothing to do' with step S of N" grep -q "nothing to do: the checkpoint $CK is at step 4 of 4 (train.steps)" "$TMP/err"
run "--resume past train.steps" 0 $TINY --steps 2 --resume "$CK" --out "$TMP/past2"
check "past train.steps: 'nothing to do' with step S of N" grep -q "nothing to do: the checkpoint $CK is at step 4 of 2" "$TMP/err"
check "past train.steps: no step ran" [ "$(records "$TMP/past2/metrics.jsonl")" = 0 ]

# --save that can never be written: exit 2 at start, before a step runs (200 steps would take seconds)
run "--save into a missing directory" 2 $TINY --steps 200 --out "$TMP/s1" --save "$TMP/nodir/ck.safetensors"
check "--save missing directory: names the flag, the path and the directory" grep -q -- "--save $TMP/nodir/ck.safetensors: directory $TMP/nodir does not exist" "$TMP/err"
check "--save missing directory: failed at start (no metrics record)" [ "$(records "$TMP/s1/metrics.jsonl")" = 0 ]
run "--save onto a directory" 2 $TINY --steps 200 --out "$TMP/s2" --save "$TMP"
check "--save onto a directory: said" grep -q -- "--save $TMP: is a directory" "$TMP/err"
mkdir -p "$TMP/ro"
if [ "$(id -u)" = 0 ]; then   # root writes through permission bits: a read-only mount instead
  if mount -t tmpfs -o ro,size=16k tmpfs "$TMP/ro" 2>/dev/null; then mounted="$mounted $TMP/ro"; ro=1; else ro=0; fi
else chmod 555 "$TMP/ro"; ro=1; fi
if [ "$ro" = 1 ]; then
  run "--save into a read-only directory" 2 $TINY --steps 200 --out "$TMP/s3" --save "$TMP/ro/ck.safetensors"
  check "--save read-only: names the flag and says not writable" grep -q -- "--save $TMP/ro/ck.safetensors: directory $TMP/ro is not writable" "$TMP/err"
  check "--save read-only: failed at start (no metrics record)" [ "$(records "$TMP/s3/metrics.jsonl")" = 0 ]
else
  echo "SKIP: no read-only directory could be made here (root without mount): the read-only --save case did not run"
fi
finish
