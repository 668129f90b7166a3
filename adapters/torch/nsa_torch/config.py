"""nsa_torch/config.py — the config this trainer runs (docs/config.md).

The runner passes the resolved canonical config (`nsa-train --check-config` output,
every key present). For manual use a shorter file and `--set section.key=VALUE`
overrides (VALUE is JSON, else a string) are accepted too: the defaults of
docs/config.md are filled in and the keys and types checked. The strict checks of
common/config.c (every rule between values) are not repeated here: run the config through
`nsa-train --check-config` for those."""
import json

DEFAULTS = {
    "model": {"rope_theta": 10000.0, "norm_eps": 1e-5, "tie_embeddings": False},
    "nsa": {"phi": "avg", "gate_act": "softmax", "gate_hidden": 0, "force_branch": "none"},
    "train": {"seq_len": None, "batch_size": 1, "grad_accum": 1, "steps": 100, "lr": 3e-4, "min_lr_frac": 0.1,
              "warmup_steps": 0, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95, "adam_eps": 1e-8,
              "grad_clip": 1.0, "seed": 1337, "checkpoint_layers": [0, 0], "prefill": "batched", "backend": "cpu",
              "precision": None, "ddp_mode": "default", "bucket_mb": 25.0},
    "data": {"kind": "learnable"},
}
REQUIRED = {
    "model": ["vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim", "max_seq_len"],
    "nsa": ["l", "d", "l_sel", "n", "w"],
}
ENUMS = {
    ("nsa", "phi"): ["avg", "mlp"], ("nsa", "gate_act"): ["softmax", "sigmoid"],
    ("nsa", "force_branch"): ["none", "cmp", "sel", "win"], ("train", "prefill"): ["batched", "sequential"],
    ("train", "backend"): ["cpu", "cpu64", "cuda"], ("train", "ddp_mode"): ["default", "find_unused", "static_graph"],
    ("data", "kind"): ["synthetic", "learnable", "shards", "text"],
    ("train", "precision"): ["fp32", "fp64", "bf16", "fp16"],
}
PRECISIONS = {"cpu": ["fp32"], "cpu64": ["fp64"], "cuda": ["bf16", "fp32"]}


class ConfigError(Exception):
    pass


def _known(sec):
    return REQUIRED.get(sec, []) + list(DEFAULTS.get(sec, {})) + (["path"] if sec == "data" else [])


def load(path, sets):
    try:
        with open(path) as f:
            js = json.load(f)
    except OSError as e:
        raise ConfigError("--config %s: %s" % (path, e.strerror))
    except ValueError as e:
        raise ConfigError("%s: not valid JSON: %s" % (path, e))
    if not isinstance(js, dict):
        raise ConfigError("%s: the config must be a JSON object" % path)
    for s in sets:
        key, eq, val = s.partition("=")
        if not eq:
            raise ConfigError("--set %s: expected KEY=VALUE" % s)
        try:
            v = json.loads(val)
        except ValueError:
            v = val
        sec, dot, k = key.partition(".")
        if not dot:
            if key != "name":
                raise ConfigError("--set %s: %s: only leaf keys can be set" % (s, key))
            js["name"] = v
            continue
        if sec not in ("model", "nsa", "train", "data") or k not in _known(sec):
            raise ConfigError("--set %s: %s: unknown key" % (s, key))
        js.setdefault(sec, {})[k] = v
    return resolve(js, path)


def resolve(js, where):
    out = {"name": js.get("name", "config")}
    for sec in ("model", "nsa", "train", "data"):
        given = js.get(sec, {})
        if not isinstance(given, dict):
            raise ConfigError("%s: %s: expected an object" % (where, sec))
        for k in given:
            if k not in _known(sec):
                raise ConfigError("%s: %s.%s: unknown key '%s' in '%s' (known: %s)"
                                  % (where, sec, k, k, sec, ", ".join(_known(sec))))
        for k in REQUIRED.get(sec, []):
            if k not in given:
                raise ConfigError("%s: %s.%s: missing required key '%s' in '%s'" % (where, sec, k, k, sec))
        d = dict(DEFAULTS.get(sec, {}))
        d.update(given)
        out[sec] = d
    for sec, k in ENUMS:
        v = out[sec].get(k)
        if v is not None and v not in ENUMS[(sec, k)]:
            raise ConfigError("%s: %s.%s: expected one of %s, got %s"
                              % (where, sec, k, ", ".join(ENUMS[(sec, k)]), json.dumps(v)))
    m, n, t = out["model"], out["nsa"], out["train"]
    for sec, keys in (("model", REQUIRED["model"]), ("nsa", REQUIRED["nsa"]),
                      ("train", ["batch_size", "grad_accum", "steps", "warmup_steps", "seed"])):
        for k in keys:
            v = out[sec][k]
            if not isinstance(v, int) or isinstance(v, bool) or v < (0 if k in ("warmup_steps", "seed") else 1):
                raise ConfigError("%s: %s.%s: expected a positive integer, got %s" % (where, sec, k, json.dumps(v)))
    if t["seq_len"] is None:
        t["seq_len"] = m["max_seq_len"]
    if n["gate_hidden"] in (None, 0):
        n["gate_hidden"] = max(1, m["dim"] // 4)
    if t["precision"] is None:
        t["precision"] = {"cpu": "fp32", "cpu64": "fp64", "cuda": "bf16"}[t["backend"]]
    if t["precision"] not in PRECISIONS[t["backend"]]:
        raise ConfigError("%s: train.precision: %s is not supported with backend %s by this trainer (allowed: %s)"
                          % (where, t["precision"], t["backend"], ", ".join(PRECISIONS[t["backend"]])))
    ck = t["checkpoint_layers"]
    if not (isinstance(ck, list) and len(ck) == 2 and 0 <= ck[0] <= ck[1] <= m["n_layers"]):
        raise ConfigError("%s: train.checkpoint_layers: expected [begin, end] with 0 <= begin <= end <= n_layers, "
                          "got %s" % (where, json.dumps(ck)))
    if t["seq_len"] > m["max_seq_len"]:
        raise ConfigError("%s: train.seq_len: seq_len (%d) must be <= model.max_seq_len (%d)"
                          % (where, t["seq_len"], m["max_seq_len"]))
    if m["n_heads"] % m["n_kv_heads"] or m["head_dim"] % 2:
        raise ConfigError("%s: model: n_kv_heads must divide n_heads and head_dim be even" % where)
    if n["l"] % n["d"] or n["l_sel"] % n["d"] or n["l"] > n["l_sel"] or n["n"] < 3:
        raise ConfigError("%s: nsa: d must divide l and l_sel, l <= l_sel, n >= 3" % where)
    if out["data"]["kind"] in ("shards", "text") and not out["data"].get("path"):
        raise ConfigError("%s: data.path: missing required key 'path' in 'data' (required when kind is \"%s\")"
                          % (where, out["data"]["kind"]))
    return out
