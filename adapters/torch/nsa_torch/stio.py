"""nsa_torch/stio.py — safetensors files without the safetensors package: an 8-byte
little-endian header length, a JSON header (name -> dtype, shape, data_offsets;
__metadata__ string -> string), then the raw little-endian tensor bytes. Written
atomically (FILE.tmp, then renamed), as nsa-train writes its dumps."""
import json
import os
import struct

import torch

DT = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
      "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8}
REV = {v: k for k, v in DT.items()}


class StError(Exception):
    pass


def read(path):
    """-> ({name: tensor}, metadata dict)"""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise StError("%s: %s" % (path, e.strerror))
    if len(raw) < 8:
        raise StError("%s: not a safetensors file (%d bytes)" % (path, len(raw)))
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise StError("%s: header length %d runs past the end of the file" % (path, n))
    try:
        hdr = json.loads(raw[8:8 + n].decode("utf-8"))
    except ValueError as e:
        raise StError("%s: bad header: %s" % (path, e))
    meta = hdr.pop("__metadata__", None) or {}
    base = 8 + n
    out = {}
    for name, info in hdr.items():
        if info.get("dtype") not in DT:
            raise StError("%s: tensor %s has unsupported dtype %s" % (path, name, info.get("dtype")))
        dt = DT[info["dtype"]]
        b0, b1 = info["data_offsets"]
        buf = bytearray(raw[base + b0:base + b1])
        if dt == torch.bfloat16:
            t = torch.frombuffer(buf, dtype=torch.int16).view(torch.bfloat16) if b1 > b0 else torch.empty(0, dtype=dt)
        else:
            t = torch.frombuffer(buf, dtype=dt) if b1 > b0 else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"]).clone()
    return out, meta


def write(path, tensors, meta=None):
    """tensors: {name: tensor} (written in sorted name order); meta: {str: str}"""
    hdr = {}
    if meta:
        hdr["__metadata__"] = {k: str(v) for k, v in meta.items()}
    blobs, off = [], 0
    for k in sorted(tensors):
        t = tensors[k].detach().contiguous().cpu()
        if t.dtype == torch.bfloat16:
            b = t.view(torch.int16).numpy().tobytes()
        else:
            b = t.numpy().tobytes()
        hdr[k] = {"dtype": REV[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    js = json.dumps(hdr, separators=(",", ":")).encode("utf-8")
    js += b" " * ((8 - len(js) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(js)))
        f.write(js)
        for b in blobs:
            f.write(b)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
