"""nsa_torch/data.py — the data sources, token-identical to trainer/data.c.

Every random value is the counter-based generator of trainer/rng.h (SplitMix64's
finalizer), a pure function of (seed, stream, index), computed here in numpy uint64
(wrapping arithmetic, like C's). A global micro-batch is world*B sequences of T+1 tokens;
rank r takes sequences [r*B, (r+1)*B).
  synthetic  token (gs, p) = rng_below(seed, 0x5EED0000 + gs, p, V), gs the global
             sequence index batches*world*B + r*B + b
  learnable  the seeded sparse Markov chain of data.c (K = 4 successors with probabilities
             0.6, 0.25, 0.1, 0.05, 32 burn-in draws)
  shards     llm.c shards (256 int32 header: 20240520, 1, count; uint16 tokens), files in
             sorted glob order; a window of world*B*T+1 tokens, moving to the next file when
             the current one has too few left
  text       the bytes of one file, the same rule, wrapping to offset 0"""
import glob

import numpy as np

M64 = (1 << 64) - 1
SYNTH_STREAM = 0x5EED0000
LEARN_STREAM = 0x1EA4000000000000
LEARN_SUCC_SALT = 0xC4A1
LEARN_P = (0.6, 0.25, 0.1, 0.05)
LEARN_BURNIN = 32


def _u(x):
    return np.asarray(x, dtype=np.uint64)


def mix64(z):
    with np.errstate(over="ignore"):
        z = _u(z) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def rng_u64(seed, stream, index):
    with np.errstate(over="ignore"):
        return mix64(mix64(_u(seed & M64) ^ mix64(stream)) + _u(index))


def rng_uniform(seed, stream, index):
    return (rng_u64(seed, stream, index) >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def rng_below(seed, stream, index, n):
    return (rng_uniform(seed, stream, index) * float(n)).astype(np.uint64) % np.uint64(n)


def rng_normal(seed, stream, index):
    index = _u(index)
    with np.errstate(over="ignore"):
        u1 = rng_uniform(seed, stream, np.uint64(2) * index)
        u2 = rng_uniform(seed, stream, np.uint64(2) * index + np.uint64(1))
    u1 = np.maximum(u1, 1e-300)
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(6.283185307179586 * u2)


class DataError(Exception):
    pass


class DataSource:
    def __init__(self, cfg, rank=0, world=1):
        d, m, t = cfg["data"], cfg["model"], cfg["train"]
        self.kind, self.V = d["kind"], m["vocab_size"]
        self.B, self.T, self.seed = t["batch_size"], t["seq_len"], t["seed"]
        self.rank, self.world = rank, world
        self.stride = world * self.B * self.T
        self.batches, self.shard, self.offset = 0, 0, 0
        if self.kind == "learnable":
            V = self.V
            v = np.repeat(np.arange(V, dtype=np.uint64), 4)
            k = np.tile(np.arange(4, dtype=np.uint64), V)
            self.succ = rng_below(self.seed ^ LEARN_SUCC_SALT, v, k, V).astype(np.int64).reshape(V, 4)
            c, th = 0.0, []
            for p in LEARN_P[:-1]:
                c += p
                th.append(c)
            self.th = th
        elif self.kind in ("shards", "text"):
            self._open_files(d["path"])

    def _open_files(self, path):
        need = self.stride + 1
        if self.kind == "text":
            if self.V < 256:
                raise DataError("%s: the text source's byte tokens need vocab_size >= 256 (got %d)" % (path, self.V))
            try:
                with open(path, "rb") as f:
                    raw = f.read()
            except OSError as e:
                raise DataError("%s: %s" % (path, e.strerror))
            if len(raw) == 0:
                raise DataError("%s: empty file" % path)
            if len(raw) < need:
                raise DataError("%s: %d bytes, too few for one micro-batch (world*B*T+1 = %d)" % (path, len(raw), need))
            self.files = [np.frombuffer(raw, dtype=np.uint8).astype(np.int64)]
            return
        names = sorted(glob.glob(path))
        if not names:
            raise DataError("%s: %s" % (path, "no file matches the pattern" if any(c in path for c in "*?[")
                                        else "No such file or directory"))
        self.files = []
        for fn in names:
            with open(fn, "rb") as f:
                raw = f.read()
            if len(raw) < 1024:
                raise DataError("%s: truncated file: %d bytes, shorter than the 1024-byte header" % (fn, len(raw)))
            h = np.frombuffer(raw[:1024], dtype="<i4")
            if h[0] != 20240520 or h[1] != 1 or h[2] < 0 or len(raw) != 1024 + 2 * int(h[2]):
                raise DataError("%s: not an llm.c shard (magic %d, version %d, count %d, %d bytes)"
                                % (fn, h[0], h[1], h[2], len(raw)))
            if int(h[2]) < need:
                raise DataError("%s: %d tokens, too few for one micro-batch (world*B*T+1 = %d)" % (fn, h[2], need))
            tok = np.frombuffer(raw[1024:], dtype="<u2").astype(np.int64)
            if tok.size and tok.max() >= self.V:
                i = int(np.argmax(tok >= self.V))
                raise DataError("%s: token %d at index %d is >= vocab_size %d" % (fn, tok[i], i, self.V))
            self.files.append(tok)

    def next(self):
        """One micro-batch: (inputs, targets) int64 numpy arrays [B, T]."""
        B, T = self.B, self.T
        if self.kind in ("shards", "text"):
            if len(self.files[self.shard]) - self.offset < self.stride + 1:
                self.shard = (self.shard + 1) % len(self.files)
                self.offset = 0
            tok = self.files[self.shard]
            base = self.offset + self.rank * B * T
            idx = base + np.arange(B)[:, None] * T + np.arange(T + 1)[None, :]
            seq = tok[idx]
            self.offset += self.stride
        else:
            gs = np.uint64(self.batches * self.world * B + self.rank * B) + np.arange(B, dtype=np.uint64)
            if self.kind == "synthetic":
                stream = np.uint64(SYNTH_STREAM) + gs[:, None]
                seq = rng_below(self.seed, stream, np.arange(T + 1, dtype=np.uint64)[None, :], self.V).astype(np.int64)
            else:
                seq = self._learnable(gs)
        self.batches += 1
        return np.ascontiguousarray(seq[:, :T]), np.ascontiguousarray(seq[:, 1:])

    def _learnable(self, gs):
        T = self.T
        with np.errstate(over="ignore"):
            stream = np.uint64(LEARN_STREAM) + gs
        idx = np.arange(LEARN_BURNIN + T + 1, dtype=np.uint64)
        u = rng_uniform(self.seed, stream[:, None], idx[None, :])          # [B, 33+T]; column 0 unused
        v = rng_below(self.seed, stream, np.zeros_like(stream), self.V).astype(np.int64)
        th0, th1, th2 = self.th
        seq = np.empty((len(gs), T + 1), dtype=np.int64)
        rows = np.arange(len(gs))
        for i in range(1, LEARN_BURNIN + T + 1):
            ui = u[:, i]
            k = (ui >= th0).astype(np.int64) + (ui >= th1) + (ui >= th2)
            v = self.succ[v, k]
            if i >= LEARN_BURNIN:
                seq[rows, i - LEARN_BURNIN] = v
        return seq

    def position(self):
        return {"batches": self.batches, "shard": self.shard, "offset": self.offset}

    def set_position(self, p):
        self.batches, self.shard, self.offset = p["batches"], p["shard"], p["offset"]


# ---- digest64 (common/digest.h), for metrics.jsonl's data_digest ------------------------------------
_K1, _K2, _K3 = 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9


def _fmix64(k):
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & M64
    return k ^ (k >> 33)


def digest64(data, seed=0):
    """common/digest.h's digest64 of the bytes `data`, chained from `seed`."""
    n = len(data)
    h = ((seed ^ ((n * _K1) & M64)) + _K2) & M64
    pad = data + b"\0" * ((8 - n % 8) % 8)
    words = np.frombuffer(pad, dtype="<u8")
    with np.errstate(over="ignore"):   # mix(w) = fmix64(w * K1), vectorised
        k = words * np.uint64(_K1)
        k ^= k >> np.uint64(33)
        k *= np.uint64(0xFF51AFD7ED558CCD)
        k ^= k >> np.uint64(33)
        k *= np.uint64(0xC4CEB9FE1A85EC53)
        k ^= k >> np.uint64(33)
    for m in k.tolist():
        x = h ^ m
        h = ((((x << 27) | (x >> 37)) & M64) * _K2 + _K3) & M64
    return _fmix64(h)
