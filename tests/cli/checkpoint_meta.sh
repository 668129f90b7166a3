#!/usr/bin/env bash
# tests/cli/checkpoint_meta.sh BUILD_DIR — a checkpoint's metadata is checksummed and
# validated on --resume (trainer/checkpoint.h, docs/diagnostics.md
# "Checkpoints"). Before the fix the per-tensor checksums did not cover the metadata:
# step="-5" resumed and trained steps -4..4 with a negative learning rate (exit 0),
# optim_t="-1" ended in an ANOMALY blamed on tok_emb.out, data_offset -1, seed "x" and
# data_shard 99 were accepted silently. On a real 4-step checkpoint of configs/tiny.json:
#  1. the untouched checkpoint resumes bitwise (steps 5-6 of 4 + 2 == of one 6-step run)
#     and holds "metadata_digests", one digest64 per other metadata entry;
#  2. each of those edits, as a hand edit (the digest table left as it was): exit 1 before
#     any step, naming the key and its value ("changed after the checkpoint was written");
#     so is an edit to a valid value (data_batches 9), a removed entry, an added one;
#  3. the same edits with the digest table recomputed (a writer's bug, or a checkpoint from
#     before the table existed): exit 1 naming the key, the value and what it must be;
#     data_shard 99 and an offset past the data against the run's own text data;
#  4. a checkpoint without "metadata_digests" (older) resumes, with a note, its values
#     still validated.
set -u
BUILD=${1:?usage: checkpoint_meta.sh BUILD_DIR}
BIN="$BUILD/nsa-train"
[ -x "$BIN" ] || { echo "SKIP: $BIN not built"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 not found (edits the checkpoints)"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"   # ok, bad, check, has, finish
TINY="--config configs/tiny.json --threads 1 --quiet"
records() { [ -f "$1" ] && wc -l <"$1" || echo 0; }

# run NAME WANT_RC ARGS...: nsa-train; its exit code must be WANT_RC (stderr in $TMP/err)
run() { local name=$1 want=$2; shift 2
  "$BIN" "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?
  if [ "$rc" = "$want" ]; then ok "$name (exit $rc)"; else bad "$name: exit $rc, want $want"; sed 's/^/    /' "$TMP/err" | head -8; fi; }

# edit SRC DST KEY VALUE|-  REDIGEST: DST is SRC with metadata KEY set to VALUE ('-': removed);
# REDIGEST 1 recomputes "metadata_digests" as the writer does, 0 leaves it, 'drop' removes it
edit() { python3 - "$@" <<'PY'
import json, struct, sys
src, dst, key, val, redigest = sys.argv[1:6]
raw = open(src, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
meta = h["__metadata__"]
if key != "-":
    if val == "-": meta.pop(key, None)
    else: meta[key] = val
if redigest == "drop":
    meta.pop("metadata_digests", None)
elif redigest == "1":
    def d64(b):   # common/digest.h
        M = (1 << 64) - 1; K1, K2, K3 = 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
        def fmix(k):
            k ^= k >> 33; k = k * 0xff51afd7ed558ccd & M; k ^= k >> 33; k = k * 0xc4ceb9fe1a85ec53 & M; return k ^ (k >> 33)
        h = (0 ^ (len(b) * K1 & M)) + K2 & M
        for i in range(0, len(b), 8):
            w = int.from_bytes(b[i:i + 8].ljust(8, b"\0"), "little")
            x = h ^ fmix(w * K1 & M); h = ((x << 27 | x >> 37) & M) * K2 + K3 & M
        return "%016x" % fmix(h)
    meta["metadata_digests"] = json.dumps({k: d64(v.encode()) for k, v in meta.items() if k != "metadata_digests"},
                                          separators=(",", ":"))
hdr = json.dumps(h, separators=(",", ":")).encode(); hdr += b" " * (-len(hdr) % 8)
open(dst, "wb").write(struct.pack("<Q", len(hdr)) + hdr + raw[8 + n:])
PY
}

# refused NAME FILE TEXT [ARGS...]: --resume FILE is exit 1 before any step, stderr has TEXT
refused() { local name=$1 file=$2 text=$3; shift 3
  rm -rf "$TMP/r"
  run "$name: refused" 1 $TINY --steps 6 --resume "$file" --out "$TMP/r" "$@"
  check "$name: names the key and the value" has "$TMP/err" "$text"
  check "$name: no step ran" [ "$(records "$TMP/r/metrics.jsonl")" = 0 ]; }

# ---- 1. the untouched checkpoint -------------------------------------------------------------------
CK="$TMP/ck.safetensors"
run "a 4-step checkpoint" 0 $TINY --steps 4 --save "$CK" --out "$TMP/ck"
check "its metadata_digests: one digest64 per other metadata entry, the same as common/digest.h's" python3 - "$CK" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; meta = json.loads(raw[8:8 + n])["__metadata__"]
d = json.loads(meta["metadata_digests"])
assert sorted(d) == sorted(k for k in meta if k != "metadata_digests"), sorted(d)
assert all(len(v) == 16 for v in d.values()), d
PY
edit "$CK" "$TMP/same.safetensors" - - 1
check "the test's digest64 is the trainer's (recomputing changes no byte)" cmp -s "$CK" "$TMP/same.safetensors"
run "6 steps in one run" 0 $TINY --steps 6 --out "$TMP/full"
run "the untouched checkpoint resumes" 0 $TINY --steps 6 --resume "$CK" --out "$TMP/res"
check "... without a note about checksums" bash -c "! grep -q 'no .*checksums' '$TMP/err'"
check "... bitwise: steps 5 and 6 have the losses and grad norms of the one run" python3 - "$TMP/full/metrics.jsonl" "$TMP/res/metrics.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])][4:]
b = [json.loads(l) for l in open(sys.argv[2])]
assert [r["step"] for r in b] == [5, 6], b
assert [(r["loss"], r["grad_norm"], r["lr"]) for r in a] == [(r["loss"], r["grad_norm"], r["lr"]) for r in b], (a, b)
PY

# ---- 2. hand edits: the digest names the entry -----------------------------------------------------
for kv in "step=-5" "optim_t=-1" "data_offset=-1" "seed=x" "data_shard=99" "data_batches=9"; do
  k=${kv%%=*} v=${kv#*=}
  edit "$CK" "$TMP/e.safetensors" "$k" "$v" 0
  refused "hand edit $k=\"$v\"" "$TMP/e.safetensors" "metadata '$k' is \"$v\", changed after the checkpoint was written"
done
edit "$CK" "$TMP/e.safetensors" seed - 0
refused "a removed entry (seed)" "$TMP/e.safetensors" "metadata 'seed' is missing: the checkpoint recorded a checksum for it"
edit "$CK" "$TMP/e.safetensors" resume_at 2 0
refused "an added entry (resume_at)" "$TMP/e.safetensors" "metadata 'resume_at' (\"2\") has no checksum in 'metadata_digests'"

# ---- 3. digests recomputed: the values are validated -----------------------------------------------
v() { edit "$CK" "$TMP/v.safetensors" "$1" "$2" 1; refused "re-digested $1=\"$2\"" "$TMP/v.safetensors" "$3"; }
v step -5 "metadata 'step' is -5: must be >= 0"
v optim_t -1 "metadata 'optim_t' is -1: must be >= 0"
v optim_t 5 "metadata 'optim_t' is 5: more than 'step' 4"
v data_offset -1 "metadata 'data_offset' is -1: must be >= 0"
v seed x "metadata 'seed' is \"x\": not a whole number"
v seed 7 "metadata 'seed' is 7: the checkpoint's config has train.seed 1337"
v data_shard 99 "metadata 'data_shard' is 99: outside this run's data: the learnable source has no shards (always 0)"
v data_batches 3 "metadata 'data_batches' is 3: fewer than 'step' 4"
v step 4.5 "metadata 'step' is \"4.5\": not a whole number"
v loss_scale nan "metadata 'loss_scale' is \"nan\": must be a number in [1, 16777216]"
v backend cpu64 "metadata 'backend' is \"cpu64\": the checkpoint's config has train.backend \"cpu\""
# the data position against the run's own data: text (one shard, README.md's bytes)
TEXT="--set data.kind=text --set data.path=README.md"
CKT="$TMP/ckt.safetensors"
run "a 2-step checkpoint on text data" 0 $TINY $TEXT --steps 2 --save "$CKT" --out "$TMP/ckt"
edit "$CKT" "$TMP/t.safetensors" data_shard 99 1
refused "text data, data_shard 99" "$TMP/t.safetensors" "metadata 'data_shard' is 99: outside this run's data: the data has 1 shard" $TEXT
edit "$CKT" "$TMP/t.safetensors" data_offset 999999999 1
refused "text data, an offset past the data" "$TMP/t.safetensors" "metadata 'data_offset' is 999999999: outside this run's data: shard 0 (README.md) has" $TEXT
run "the text checkpoint itself resumes" 0 $TINY $TEXT --steps 3 --resume "$CKT" --out "$TMP/rt"

# ---- 4. an older checkpoint, without metadata_digests -------------------------------------------------
edit "$CK" "$TMP/old.safetensors" - - drop
run "a checkpoint without metadata checksums (older) resumes" 0 $TINY --steps 6 --resume "$TMP/old.safetensors" --out "$TMP/old"
check "... with a note: validated, not verified" has "$TMP/err" "the checkpoint has no metadata checksums (written before they existed): its metadata is validated, not verified"
edit "$CK" "$TMP/old2.safetensors" step -5 drop
refused "an older checkpoint with step=\"-5\"" "$TMP/old2.safetensors" "metadata 'step' is -5: must be >= 0"
finish
