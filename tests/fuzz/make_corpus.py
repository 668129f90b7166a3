#!/usr/bin/env python3
"""tests/fuzz/make_corpus.py — (re)writes the committed seed corpora of the fuzzers
(tests/fuzz/CMakeLists.txt) from the repository's own files, deterministically:

  config/       configs/*.json, tests/bad_configs/*.json, and tiny.json with --set
                overrides (the input format of fuzz_config.c: file, then NUL-separated
                overrides)
  scenario/     scenarios/*.json, scenarios/selftest/*.json, tests/bad_scenarios/*.json, and
                gate_init.json with `run --set` overrides (NUL-separated, as for config)
  safetensors/  small files in every dtype, shaped like the trainer's dumps and
                checkpoints (names, metadata), plus malformed ones (st_read's every
                rejection: short, absurd header length, bad JSON, overlap, gap, ...)
  shards/       llm.c shards (256 int32 header, uint16 tokens; fuzz_shards.c reads
                V=512, B=2, T=8), one and two files (split by "NSASHARD"), malformed

and a libFuzzer dictionary per target (<target>.dict: JSON punctuation, every key
and string value of the JSON seeds, --set keys; the shard magic and separator).
Files not named seed-* in those folders (regression-*) are inputs a fuzzer once
failed on (the bug fixed): this script never touches them. Run from anywhere:
  python3 tests/fuzz/make_corpus.py
"""
import glob
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def reset(name):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if f.startswith("seed-"):
            os.remove(os.path.join(d, f))
    return d


def put(d, name, data):
    with open(os.path.join(d, "seed-" + name), "wb") as fp:
        fp.write(data if isinstance(data, bytes) else data.encode())


def copy_json(d, pattern, prefix):
    for p in sorted(glob.glob(os.path.join(ROOT, pattern))):
        put(d, prefix + os.path.basename(p), open(p, "rb").read())


# ---- config -------------------------------------------------------------------------------------
d = reset("config")
copy_json(d, "configs/*.json", "")
copy_json(d, "tests/bad_configs/*.json", "bad_")
tiny = open(os.path.join(ROOT, "configs/tiny.json"), "rb").read()
for i, sets in enumerate([
    ["nsa.w=64", "nsa.phi=mlp"],
    ["train.checkpoint_layers=[0,2]", "train.prefill=sequential"],
    ["train.lr=1e999"],
    ["data.kind=shards", "data.path=data/shard_*.bin"],
    ["model.tie_embeddings=true", "train.precision=bf16", "train.backend=cuda"],
    ["name=\"123\"", "nsa.gate_act=sigmoid", "nsa.force_branch=sel"],
    ["model=1", "nosuch.key=2", "train.seq_len=-1"],
    ["nsa.l=16", "nsa.d=5"],
]):
    put(d, "tiny_set%d" % i, tiny + b"\0" + b"\0".join(s.encode() for s in sets))

# ---- scenario -----------------------------------------------------------------------------------
d = reset("scenario")
copy_json(d, "scenarios/*.json", "")
copy_json(d, "scenarios/selftest/*.json", "selftest_")
copy_json(d, "tests/bad_scenarios/*.json", "bad_")
gate = open(os.path.join(ROOT, "scenarios/gate_init.json"), "rb").read()
for i, sets in enumerate([["train.seed=7"], ["nsa.w=64", "train.lr=1e999"], ["model=1", "nosuch.key=2"],
                          ["train.precision=bf16", "train.backend=cuda"]]):
    put(d, "gate_init_set%d" % i, gate + b"\0" + b"\0".join(s.encode() for s in sets))

# ---- safetensors ------------------------------------------------------------------------------
DT = {"F64": ("<d", 8), "F32": ("<f", 4), "F16": ("<e", 2), "I64": ("<q", 8), "I32": ("<i", 4),
      "U16": ("<H", 2), "U8": ("<B", 1)}


def st(tensors, meta=None, hdr_pad=0):
    """tensors: [(name, dtype, shape, raw bytes)] -> a safetensors file"""
    h, off, blob = {}, 0, b""
    if meta is not None:
        h["__metadata__"] = meta
    for name, dt, shape, raw in tensors:
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blob += raw
    hj = json.dumps(h, separators=(",", ":")).encode() + b" " * hdr_pad
    return struct.pack("<Q", len(hj)) + hj + blob


def vals(dt, n, f=lambda i: (i * 0.37) - 1.5):
    if dt == "BF16":   # the top half of a float32
        return b"".join(struct.pack("<f", f(i))[2:] for i in range(n))
    fmt, _ = DT[dt]
    if fmt in ("<q", "<i"):
        return b"".join(struct.pack(fmt, i * 7 - 20) for i in range(n))
    if fmt in ("<H", "<B"):
        return b"".join(struct.pack(fmt, (i * 13) % 200) for i in range(n))
    return b"".join(struct.pack(fmt, f(i)) for i in range(n))


d = reset("safetensors")
cfg = json.dumps(json.load(open(os.path.join(ROOT, "configs/tiny.json"))), separators=(",", ":"))
dump = [("logits", "F32", [1, 2, 4], vals("F32", 8)),
        ("grads.blocks.0.attn.gate.fc2.bias", "F32", [6], vals("F32", 6)),
        ("acts.blocks.1.attn.sel.o", "BF16", [2, 3], vals("BF16", 6)),
        ("tokens", "I32", [1, 3], vals("I32", 3))]
put(d, "dump.safetensors", st(dump, {"config": cfg, "step": "1", "param_digests": "{\"tok_emb.weight\":\"0123456789abcdef\"}"}))
put(d, "checkpoint.safetensors", st([("params.tok_emb.weight", "F32", [4, 2], vals("F32", 8)),
                                     ("adam.m.tok_emb.weight", "F32", [4, 2], vals("F32", 8)),
                                     ("rng", "U8", [16], vals("U8", 16)),
                                     ("data_pos", "I64", [3], vals("I64", 3))],
                                    {"format": "nsa-checkpoint", "step": "10", "config": cfg}))
for dt in ["F64", "F32", "F16", "BF16", "I64", "I32", "U16", "U8"]:
    put(d, "dtype_%s.safetensors" % dt.lower(), st([("t", dt, [2, 3], vals(dt, 6))]))
special = struct.pack("<4e", float("inf"), float("nan"), -0.0, 5.96e-8)   # f16 inf, nan, -0, subnormal
put(d, "f16_special.safetensors", st([("s", "F16", [4], special)]))
put(d, "scalar_and_empty.safetensors", st([("scalar", "F32", [], vals("F32", 1)), ("empty", "F32", [0, 3], b""),
                                           ("v", "U8", [1], b"\x07")]))
put(d, "no_tensors.safetensors", st([], {"k": "v"}))
put(d, "padded_header.safetensors", st([("a", "F32", [2], vals("F32", 2))], hdr_pad=6))
put(d, "max_dims.safetensors", st([("d8", "U8", [1, 1, 1, 2, 1, 1, 1, 1], b"\x01\x02")]))
# malformed
put(d, "bad_short.safetensors", b"\x10\x00\x00")
put(d, "bad_absurd_len.safetensors", struct.pack("<Q", 1 << 60) + b"{}")
put(d, "bad_len_past_end.safetensors", struct.pack("<Q", 100) + b"{}")
put(d, "bad_json.safetensors", struct.pack("<Q", 5) + b"{\"a\":")
put(d, "bad_not_object.safetensors", struct.pack("<Q", 2) + b"[]")
put(d, "bad_meta.safetensors", st([], {"k": 1}))
put(d, "bad_dtype.safetensors", (lambda h: struct.pack("<Q", len(h)) + h + b"\0" * 4)(
    b'{"t":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}}'))
put(d, "bad_shape_size.safetensors", (lambda h: struct.pack("<Q", len(h)) + h + b"\0" * 8)(
    b'{"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}'))
put(d, "bad_overlap.safetensors", (lambda h: struct.pack("<Q", len(h)) + h + b"\0" * 8)(
    b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'))
put(d, "bad_gap.safetensors", (lambda h: struct.pack("<Q", len(h)) + h + b"\0" * 12)(
    b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}'))
put(d, "bad_huge_shape.safetensors", (lambda h: struct.pack("<Q", len(h)) + h + b"\0" * 4)(
    b'{"a":{"dtype":"F32","shape":[4294967296,4294967296,1],"data_offsets":[0,4]}}'))
put(d, "bad_neg_offset.safetensors", (lambda h: struct.pack("<Q", len(h)) + h + b"\0" * 4)(
    b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}'))
put(d, "bad_dup_key.safetensors", (lambda h: struct.pack("<Q", len(h)) + h + b"\0" * 8)(
    b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'))

# ---- shards -------------------------------------------------------------------------------------
MAGIC, VERSION = 20240520, 1


def shard(tokens, count=None, magic=MAGIC, version=VERSION):
    h = [0] * 256
    h[0], h[1], h[2] = magic, version, len(tokens) if count is None else count
    return struct.pack("<256i", *h) + struct.pack("<%dH" % len(tokens), *tokens)


d = reset("shards")
toks = [(i * 37 + 11) % 512 for i in range(40)]
put(d, "one.bin", shard(toks))
put(d, "exact_one_window.bin", shard(toks[:17]))   # B*T+1 = 17
put(d, "two.bin", shard(toks) + b"NSASHARD" + shard([(t + 5) % 512 for t in toks[:25]]))
put(d, "two_second_bad_token.bin", shard(toks) + b"NSASHARD" + shard(toks[:20] + [600]))
put(d, "two_second_truncated.bin", shard(toks) + b"NSASHARD" + shard(toks[:30])[:-6])
put(d, "bad_magic.bin", shard(toks, magic=20240519))
put(d, "bad_version.bin", shard(toks, version=2))
put(d, "bad_negative_count.bin", shard(toks, count=-1))
put(d, "bad_count_too_big.bin", shard(toks, count=1 << 30))
put(d, "bad_trailing_bytes.bin", shard(toks) + b"\0\0")
put(d, "bad_token.bin", shard(toks[:30] + [512] + toks[:9]))
put(d, "bad_too_few.bin", shard(toks[:16]))
put(d, "bad_short_header.bin", shard(toks)[:100])
# ---- dictionaries (libFuzzer -dict): JSON punctuation, every key and string value of
# the JSON seeds, and the tokens the binary formats check -----------------------------------


def json_tokens(paths):
    toks = set(['{', '}', '[', ']', ':', ',', '"', 'true', 'false', 'null', '-1', '0', '1e999', '0.5', '1e-300',
                '"profiles"', '"ci"', '"gpu"', '"matrix"', '"checks"', '"overrides"'])

    def walk(v):
        if isinstance(v, dict):
            for k, x in v.items():
                toks.add(json.dumps(k))
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, str) and len(v) <= 40:
            toks.add(json.dumps(v))
    for p in paths:
        try:
            walk(json.load(open(p)))
        except ValueError:
            pass
    return toks


def write_dict(name, toks):
    with open(os.path.join(HERE, name + ".dict"), "w") as fp:
        fp.write("# libFuzzer dictionary, written by make_corpus.py\n")
        for t in sorted(x if isinstance(x, bytes) else x.encode() for x in toks):
            esc = "".join("\\x%02x" % b if b < 32 or b > 126 or b in (34, 92) else chr(b) for b in t)
            fp.write('"%s"\n' % esc)


cfg_paths = glob.glob(os.path.join(ROOT, "configs/*.json")) + glob.glob(os.path.join(ROOT, "tests/bad_configs/*.json"))
cfg_toks = json_tokens(cfg_paths)
# --set keys: section.key for every key of the shipped configs' sections
for p in glob.glob(os.path.join(ROOT, "configs/*.json")):
    for sec, v in json.load(open(p)).items():
        if isinstance(v, dict):
            cfg_toks.update("%s.%s=" % (sec, k) for k in v)
cfg_toks.update(["\0", "="])
write_dict("config", cfg_toks)
write_dict("scenario", cfg_toks | json_tokens(glob.glob(os.path.join(ROOT, "scenarios/*.json")) +
                                   glob.glob(os.path.join(ROOT, "scenarios/selftest/*.json")) +
                                   glob.glob(os.path.join(ROOT, "tests/bad_scenarios/*.json")) + cfg_paths))
write_dict("safetensors", json_tokens([]) | {'"dtype"', '"shape"', '"data_offsets"', '"__metadata__"'} |
           {'"%s"' % d for d in ["F64", "F32", "F16", "BF16", "I64", "I32", "U16", "U8", "BOOL"]})
write_dict("shards", {struct.pack("<i", MAGIC), struct.pack("<i", VERSION), b"NSASHARD", struct.pack("<i", -1),
                      struct.pack("<H", 511), struct.pack("<H", 512)})
print("corpora and dictionaries written under", HERE)
