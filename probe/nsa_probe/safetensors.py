"""A safetensors writer (the step dump), torch only: written to FILE.tmp, then renamed."""
import json
import os
import struct

_DTYPES = {"float32": "F32", "float64": "F64", "int32": "I32", "int64": "I64"}


def write(path, tensors, metadata):
    """tensors: [(name, torch tensor)] in order; metadata: {str: str}. A name given more than once
    (a module called once per token in step 1: sequential prefill) keeps its first place and its
    last tensor, as a header written from a dict would say, with no unreferenced bytes left
    between the tensors (a reader rejects such gaps)."""
    import torch
    last = {}
    for name, t in tensors:
        last[name] = t
    header, blobs, off = {}, [], 0
    for name, t in last.items():
        t = t.detach().to("cpu").contiguous()
        if t.dtype in (torch.float16, torch.bfloat16):
            t = t.float()
        dt = _DTYPES[str(t.dtype).replace("torch.", "")]
        data = t.numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
