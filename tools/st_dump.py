#!/usr/bin/env python3
"""tools/st_dump.py — print what a safetensors file holds (standard library only).

For each file: its metadata, then one line per tensor with name, dtype, shape,
element count and the first few values. Used by people to inspect checkpoints,
step dumps and golden tensors, and by tests/cli/safetensors_py.sh as a reader
independent of common/safetensors.c: it validates the same structure (header
length, JSON without duplicate keys, known dtypes, shapes, data_offsets that
tile the data section exactly) and exits 1 with "path: why" otherwise.

Only the header and the first values of each tensor are read, so dumping a
large checkpoint is cheap.

  python3 tools/st_dump.py ckpt/model.safetensors
  python3 tools/st_dump.py -n 20 dump.safetensors     # 20 values per tensor (-1: all)
  python3 tools/st_dump.py --json -n -1 x.safetensors  # machine-readable, all values
"""
import argparse
import json
import math
import os
import struct
import sys

# dtype -> (bytes per element, struct code or None when decoded by hand).
# Beyond the eight the trainer writes, the other dtypes of the format are
# accepted so files written by PyTorch can be inspected too.
DTYPES = {
    "F64": (8, "d"), "F32": (4, "f"), "F16": (2, "e"), "BF16": (2, None),
    "I64": (8, "q"), "I32": (4, "i"), "I16": (2, "h"), "I8": (1, "b"),
    "U64": (8, "Q"), "U32": (4, "I"), "U16": (2, "H"), "U8": (1, "B"),
    "BOOL": (1, "?"), "F8_E4M3": (1, None), "F8_E5M2": (1, None),
}
FLOATS = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}
MAX_HEADER = 100 * 1000 * 1000   # as the reference implementation (and ours)


class BadFile(Exception):
    pass


def _no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise BadFile("duplicate key %r in the header" % k)
        d[k] = v
    return d


def _is_nonneg_int(x):
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _f8(b, exp_bits, bias, e4m3):
    """Decodes one 8-bit float (1 sign, exp_bits exponent, rest mantissa)."""
    man_bits = 7 - exp_bits
    s = -1.0 if b & 0x80 else 1.0
    e = (b >> man_bits) & ((1 << exp_bits) - 1)
    m = b & ((1 << man_bits) - 1)
    if e4m3 and e == 15 and m == 7:
        return math.nan   # E4M3 has no infinities; S.1111.111 is NaN
    if not e4m3 and e == 31:
        return s * math.inf if m == 0 else math.nan
    if e == 0:
        return s * m * 2.0 ** (1 - bias - man_bits)
    return s * (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)


def decode(dtype, raw):
    """Values of a little-endian byte string of this dtype."""
    size, code = DTYPES[dtype]
    n = len(raw) // size
    if dtype == "BF16":
        halves = struct.unpack("<%dH" % n, raw)
        return list(struct.unpack("<%df" % n, b"".join(struct.pack("<I", h << 16) for h in halves)))
    if dtype == "F8_E4M3":
        return [_f8(b, 4, 7, True) for b in raw]
    if dtype == "F8_E5M2":
        return [_f8(b, 5, 15, False) for b in raw]
    return list(struct.unpack("<%d%s" % (n, code), raw))


def read_header(path):
    """Validates the file's structure; returns (metadata, tensors, data_start).
    tensors: list of (name, dtype, shape, begin, end) in header order."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise BadFile("file is %d bytes, shorter than the 8-byte header length" % size)
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER:
            raise BadFile("header length %d is absurd" % n)
        if n > size - 8:
            raise BadFile("header length %d runs past the end of the file (%d bytes)" % (n, size))
        text = f.read(n)
    try:
        hdr = json.loads(text.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError) as e:
        raise BadFile("invalid JSON header: %s" % e)
    if not isinstance(hdr, dict):
        raise BadFile("header is not a JSON object")
    dsize = size - 8 - n
    meta = hdr.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise BadFile("__metadata__ is not an object of strings")
    tensors = []
    for name, e in hdr.items():
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            raise BadFile("tensor %r: entry is not {dtype, shape, data_offsets}" % name)
        dt, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
        if dt not in DTYPES:
            raise BadFile("tensor %r: unknown dtype %r" % (name, dt))
        if not isinstance(shape, list) or not all(_is_nonneg_int(d) for d in shape):
            raise BadFile("tensor %r: shape is not a list of non-negative integers" % name)
        if (not isinstance(offs, list) or len(offs) != 2 or not all(_is_nonneg_int(o) for o in offs)
                or offs[0] > offs[1] or offs[1] > dsize):
            raise BadFile("tensor %r: data_offsets %r not within the %d-byte data section" % (name, offs, dsize))
        if offs[1] - offs[0] != math.prod(shape) * DTYPES[dt][0]:
            raise BadFile("tensor %r: data_offsets size does not match dtype and shape" % name)
        tensors.append((name, dt, shape, offs[0], offs[1]))
    at = 0
    for name, _, _, b, e in sorted(tensors, key=lambda t: (t[3], t[4])):
        if b != at:
            raise BadFile("tensor %r at %d: %s" % (name, b, "overlap" if b < at else "gap before it"))
        at = e
    if at != dsize:
        raise BadFile("tensors cover %d bytes but the data section has %d" % (at, dsize))
    return meta, tensors, 8 + n


def fmt_value(dtype, v):
    if dtype == "F64":
        return repr(v)
    if dtype in FLOATS:
        return "%.9g" % v if dtype == "F32" else "%.5g" % v
    return str(v)


def dump(path, nvals, as_json):
    meta, tensors, start = read_header(path)
    out = []
    with open(path, "rb") as f:
        for name, dt, shape, b, e in tensors:
            size = DTYPES[dt][0]
            count = (e - b) // size
            take = count if nvals < 0 else min(count, nvals)
            f.seek(start + b)
            out.append((name, dt, shape, b, e, count, decode(dt, f.read(take * size))))
    if as_json:
        json.dump({"file": path, "metadata": meta,
                   "tensors": [{"name": n, "dtype": dt, "shape": s, "data_offsets": [b, e],
                                "numel": c, "values": v} for n, dt, s, b, e, c, v in out]},
                  sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
        return
    total = sum(e - b for _, _, _, b, e, _, _ in out)
    print("%s: %d tensors, %d data bytes" % (path, len(out), total))
    for k, v in meta.items():
        print("  meta %s = %s" % (k, json.dumps(v, ensure_ascii=False)))
    wname = max([len(t[0]) for t in out] + [4])
    wshape = max([len(str(t[2])) for t in out] + [5])
    for name, dt, shape, _, _, count, vals in out:
        shown = " ".join(fmt_value(dt, v) for v in vals) + (" ..." if len(vals) < count else "")
        line = "  %-*s %-7s %-*s %10d  %s" % (wname, name, dt, wshape, str(shape), count, shown)
        print(line.rstrip())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("-n", type=int, default=6, help="values shown per tensor (-1: all)")
    ap.add_argument("--json", action="store_true", help="one JSON object per file")
    args = ap.parse_args()
    rc = 0
    for path in args.files:
        try:
            dump(path, args.n, args.json)
        except BadFile as e:
            print("%s: %s" % (path, e), file=sys.stderr)
            rc = 1
        except OSError as e:
            print("%s: %s" % (path, e.strerror or e), file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
