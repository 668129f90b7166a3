#!/usr/bin/env bash
# tests/cli/safetensors_py.sh — our safetensors files, read by an independent reader.
#
# Usage (from the source root): bash tests/cli/safetensors_py.sh <build dir>
# Runs <build>/tests/test_safetensors with NSA_ST_PY_OUT set, so its fixture
# (every dtype, 0-d, empty and 8-d tensors, odd offsets, UTF-8 metadata) is
# written by common/safetensors.c; then tools/st_dump.py (pure Python, its own
# parser) must read back exactly the names, order, dtypes, shapes, offsets,
# values and metadata below, print them in its text form, and reject a
# truncated copy and hand-built malformed files with "path: why". Skips (77)
# without python3.
set -u
build=${1:?usage: bash tests/cli/safetensors_py.sh <build dir>}
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP: python3 not found"
    exit 77
fi
bin="$build/tests/test_safetensors"
if [ ! -x "$bin" ]; then
    echo "FAIL: $bin not built"
    exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nsa_st_py.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fx="$tmp/fixture.safetensors"

if ! NSA_ST_PY_OUT="$fx" "$bin" >"$tmp/test.log" 2>&1; then
    cat "$tmp/test.log"
    echo "FAIL: $bin failed"
    exit 1
fi
[ -f "$fx" ] || { echo "FAIL: $bin did not write $fx"; exit 1; }
[ ! -e "$fx.tmp" ] || { echo "FAIL: $fx.tmp left behind"; exit 1; }

if ! python3 tools/st_dump.py --json -n -1 "$fx" >"$tmp/dump.json"; then
    echo "FAIL: st_dump.py rejected $fx"
    exit 1
fi

# The expected contents mirror FIXTURE in tests/trainer/test_safetensors.c.
python3 - "$tmp/dump.json" <<'EOF' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
expected = [
    ("f64", "F64", [3], [1.5, -0.25, 1e300]),
    ("u8", "U8", [5], [0, 1, 127, 128, 255]),
    ("blocks.0.attn.f32", "F32", [2, 3], [0.0, 1.0, -2.5, 3.25, 1024.0, -0.125]),
    ("f16", "F16", [4], [1.0, -2.0, 0.5, 65504.0]),
    ("bf16", "BF16", [2, 2], [1.0, -3.0, 0.15625, 256.0]),
    ("i64", "I64", [2], [-9007199254740993, 42]),
    ("i32", "I32", [3], [-1, 2147483647, -2147483648]),
    ("u16", "U16", [2], [0, 65535]),
    ("scalar", "F32", [], [7.5]),
    ("empty", "F32", [0, 4], []),
    ("eight_d", "I32", [1, 2, 1, 1, 1, 1, 1, 3], [0, 1, 2, 3, 4, 5]),
]
bad = []
got = [(t["name"], t["dtype"], t["shape"], t["values"]) for t in d["tensors"]]
if got != expected:
    bad.append("tensors differ:\n  got      %r\n  expected %r" % (got, expected))
# Contiguous offsets in insertion order.
at = 0
for t in d["tensors"]:
    if t["data_offsets"][0] != at:
        bad.append("tensor %s starts at %d, expected %d" % (t["name"], t["data_offsets"][0], at))
    at = t["data_offsets"][1]
meta = {"format": "pt", "note": "h\u00e9llo \u2713", "empty": ""}
if d["metadata"] != meta:
    bad.append("metadata %r != %r" % (d["metadata"], meta))
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
EOF

# The human-readable form: header line, metadata and a tensor line.
python3 tools/st_dump.py -n 3 "$fx" >"$tmp/dump.txt" || { echo "FAIL: st_dump.py text mode"; exit 1; }
for want in '11 tensors, 129 data bytes$' '^  meta note = "h.+llo .+"$' \
            '^  blocks\.0\.attn\.f32 +F32 +\[2, 3\] +6  0 1 -2\.5 \.\.\.$' \
            '^  f16 +F16 +\[4\] +4  1 -2 0\.5 \.\.\.$' '^  scalar +F32 +\[\] +1  7\.5$'; do
    if ! grep -qE -- "$want" "$tmp/dump.txt"; then
        cat "$tmp/dump.txt"
        echo "FAIL: text dump lacks a line matching '$want'"
        exit 1
    fi
done

# A torn file must be rejected, naming the file.
size=$(wc -c <"$fx")
head -c $((size - 1)) "$fx" >"$tmp/torn.safetensors"
if python3 tools/st_dump.py "$tmp/torn.safetensors" >/dev/null 2>"$tmp/torn.err"; then
    echo "FAIL: st_dump.py accepted a truncated file"
    exit 1
fi
grep -qF "$tmp/torn.safetensors: " "$tmp/torn.err" || { cat "$tmp/torn.err"; echo "FAIL: no 'path: why'"; exit 1; }

# st_dump.py's own checks, on hand-built malformed files (name, header JSON,
# data bytes).
python3 - "$tmp" <<'EOF' || exit 1
import struct, sys
cases = [
    ("gap", '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
            '"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}', 3),
    ("overlap", '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},'
                '"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}', 3),
    ("dup", '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
            '"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1),
    ("dtype", '{"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}}', 4),
    ("size", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', 4),
    ("shape", '{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}', 0),
    ("meta", '{"__metadata__":{"k":1}}', 0),
    ("json", '{"a":', 0),
]
for name, hdr, n in cases:
    h = hdr.encode()
    with open("%s/bad_%s.safetensors" % (sys.argv[1], name), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + bytes(n))
EOF
for f in "$tmp"/bad_*.safetensors; do
    if python3 tools/st_dump.py "$f" >/dev/null 2>"$tmp/bad.err"; then
        echo "FAIL: st_dump.py accepted malformed $f"
        exit 1
    fi
    grep -qF "$f: " "$tmp/bad.err" || { cat "$tmp/bad.err"; echo "FAIL: no 'path: why' for $f"; exit 1; }
done

echo "PASS: st_dump.py reads test_safetensors' fixture exactly and rejects malformed files"
