"""The trainer map (docs/trainer-maps.md): load and validate it with positions, translate a
case's config into the script's command line, environment and config file, and derive the
handshake's feature lists from it. Needs no torch.
"""
import fnmatch
import json
import os
import re

from . import jsonpos

# The harness config's keys (docs/config.md; tests/cli/trainer_map.sh checks this list
# against `nsa-train --check-config`), plus the transport.
CONFIG_KEYS = {
    "model": ["vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim", "max_seq_len",
              "rope_theta", "norm_eps", "tie_embeddings"],
    "nsa": ["l", "d", "l_sel", "n", "w", "phi", "gate_act", "gate_hidden", "force_branch"],
    "train": ["seq_len", "batch_size", "grad_accum", "steps", "lr", "min_lr_frac", "warmup_steps", "weight_decay",
              "beta1", "beta2", "adam_eps", "grad_clip", "seed", "checkpoint_layers", "prefill", "backend",
              "precision", "ddp_mode", "bucket_mb"],
    "data": ["kind", "path"],
}
KNOBS = ["%s.%s" % (s, k) for s, keys in CONFIG_KEYS.items() for k in keys] + ["transport"]
SPECIALS = ["out", "rank", "world_size", "map_dir"]   # placeholders that are not knobs
BRANCHES = ["cmp", "sel", "win"]
HOOK_FAULTS = ["gate_zero_init", "drop_grad", "divergent_unused", "nan_at_seqlen", "hang", "crash"]
PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")


class MapError(Exception):
    """Every problem of a map, each 'FILE:line:col: message'."""
    def __init__(self, problems):
        Exception.__init__(self, "\n".join(problems))
        self.problems = problems


def _pattern_regex(pat):
    """A module-path pattern: {layer} -> a layer index (captured), * -> any run of characters."""
    out, i = "", 0
    for m in re.finditer(r"\{layer\}|\*", pat):
        out += re.escape(pat[i:m.start()])
        out += r"(?P<layer>\d+)" if m.group(0) == "{layer}" else r".*"
        i = m.end()
    return re.compile("^" + out + re.escape(pat[i:]) + "$")


class Pattern:
    def __init__(self, text):
        self.text = text
        self.rx = _pattern_regex(text)
        self.prefix_rx = re.compile(self.rx.pattern[:-1] + r"(\..*)?$")

    def match(self, path):
        """The layer index (or -1 when the pattern has none) if path is the module; else None."""
        m = self.rx.match(path)
        if not m:
            return None
        return int(m.group("layer")) if "layer" in m.groupdict() and m.group("layer") is not None else -1

    def within(self, name):
        """1 if name (a parameter or module path) is the module or lies under it."""
        return bool(self.prefix_rx.match(name))

    def at(self, layer):
        return self.text.replace("{layer}", str(layer))


class TrainerMap:
    def __init__(self, path):
        self.path = os.path.abspath(path)
        self.dir = os.path.dirname(self.path)
        self.problems = []
        try:
            with open(self.path, encoding="utf-8") as f:
                self.text = f.read()
        except OSError as e:
            raise MapError(["%s: cannot read the trainer map: %s" % (path, e.strerror)])
        try:
            self.root = jsonpos.parse(self.text)
        except jsonpos.JsonError as e:
            raise MapError(["%s:%d:%d: %s" % (path, e.line, e.col, e.msg)])
        self.shown = path
        self._load()
        if self.problems:
            self.problems.sort(key=lambda p: [int(x) if x.isdigit() else 0 for x in p.split(":")[1:3]])
            raise MapError(self.problems)

    # ---- validation helpers --------------------------------------------------------------
    def problem(self, node_or_pos, msg, key_pos=None):
        line, col = key_pos if key_pos else (node_or_pos.line, node_or_pos.col)
        self.problems.append("%s:%d:%d: %s" % (self.shown, line, col, msg))

    def keys(self, node, known, where):
        for k in node.value:
            if k not in known:
                self.problem(None, "unknown key '%s' in %s (known: %s)" % (k, where, ", ".join(known)),
                             key_pos=node.keys[k])

    def typed(self, node, key, types, what, required=False, where="the map"):
        if key not in node.value:
            if required:
                self.problem(node, "%s: missing required key '%s' (%s)" % (where, key, what))
            return None
        v = node.value[key]
        ok = any(isinstance(v.value, t) and not (t is int and isinstance(v.value, bool)) for t in types)
        if not ok:
            self.problem(v, "%s: expected %s, got %s" % (key, what, jsonpos.type_name(v.value)))
            return None
        return v

    def placeholders(self, text, node, where):
        for m in PLACEHOLDER.finditer(text):
            name = m.group(1)
            if name not in KNOBS and name not in SPECIALS and not name.isdigit() and name not in ("begin", "end", "last", "value"):
                self.problem(node, "%s: the placeholder {{%s}} names no knob (knobs are the config's keys, e.g. "
                             "train.seq_len, and transport; also %s)" % (where, name, ", ".join(SPECIALS)))

    # ---- the schema ----------------------------------------------------------------------
    def _load(self):
        r = self.root
        if not isinstance(r.value, dict):
            self.problem(r, "the trainer map must be a JSON object, got %s" % jsonpos.type_name(r.value))
            return
        self.keys(r, ["trainer", "script", "args", "cwd", "config_file", "env", "knobs", "faults", "modules",
                      "python", "description"], "the map")
        t = self.typed(r, "trainer", [str], "a name (a string)", required=True)
        self.name = t.value if t else "?"
        if t and not re.match(r"^[A-Za-z0-9_.-]{1,63}$", t.value):
            self.problem(t, "trainer: '%s' is not a name (1 to 63 of A-Z a-z 0-9 _ . -)" % t.value)
        s = self.typed(r, "script", [str], "the training script's path (a string)", required=True)
        self.script = os.path.join(self.dir, s.value) if s else None
        if s and not os.path.isfile(self.script):
            self.problem(s, "script: no such file: %s" % self.script)
        self.args = []
        a = self.typed(r, "args", [list], "an array of strings")
        if a:
            for item in a.value:
                if not isinstance(item.value, str):
                    self.problem(item, "args: expected a string, got %s" % jsonpos.type_name(item.value))
                else:
                    self.placeholders(item.value, item, "args")
                    self.args.append(item.value)
        c = self.typed(r, "cwd", [str], "a folder (a string)")
        self.cwd = c.value if c else None
        if c:
            self.placeholders(c.value, c, "cwd")
        self.env = self._string_table(r, "env")
        self.python = (r.value["python"].value if "python" in r.value and isinstance(r.value["python"].value, str)
                       else None)
        self.typed(r, "python", [str], "an interpreter (a string)")
        self.typed(r, "description", [str], "a string")
        self._config_file(r)
        self._knobs(r)
        self._faults(r)
        self._modules(r)

    def _string_table(self, r, key):
        out = {}
        e = self.typed(r, key, [dict], "an object {NAME: string}")
        if e:
            for k, v in e.value.items():
                if not isinstance(v.value, str):
                    self.problem(v, "%s.%s: expected a string, got %s" % (key, k, jsonpos.type_name(v.value)))
                else:
                    self.placeholders(v.value, v, "%s.%s" % (key, k))
                    out[k] = v.value
        return out

    def _config_file(self, r):
        self.config_file = None
        cf = self.typed(r, "config_file", [dict], "an object {template, name, flag | env}")
        if not cf:
            return
        self.keys(cf, ["template", "name", "flag", "env"], "config_file")
        t = self.typed(cf, "template", [str], "a template file (a string)", required=True, where="config_file")
        n = self.typed(cf, "name", [str], "a file name (a string)")
        fl = self.typed(cf, "flag", [str], "a flag (a string)")
        ev = self.typed(cf, "env", [str], "an environment variable (a string)")
        if fl and ev:
            self.problem(ev, "config_file: give 'flag' or 'env', not both")
        if not t:
            return
        tpath = os.path.join(self.dir, t.value)
        try:
            with open(tpath, encoding="utf-8") as f:
                ttext = f.read()
        except OSError as e:
            self.problem(t, "config_file.template: cannot read %s: %s" % (tpath, e.strerror))
            return
        shown = os.path.relpath(tpath) if not os.path.isabs(self.shown) else tpath
        for lineno, line in enumerate(ttext.split("\n"), 1):
            for m in PLACEHOLDER.finditer(line):
                name = m.group(1)
                if name not in KNOBS and name not in SPECIALS:
                    self.problems.append("%s:%d:%d: the placeholder {{%s}} names no knob (knobs are the config's "
                                         "keys, e.g. train.seq_len, and transport; also %s)"
                                         % (shown, lineno, m.start() + 1, name, ", ".join(SPECIALS)))
        base = os.path.basename(t.value)
        for ext in (".tmpl", ".in", ".template"):
            if base.endswith(ext):
                base = base[:-len(ext)]
        self.config_file = {"template": tpath, "text": ttext, "name": n.value if n else base,
                            "flag": fl.value if fl else None, "env": ev.value if ev else None}

    def _knobs(self, r):
        self.knobs = {}
        k = self.typed(r, "knobs", [dict], "an object {knob: {flag | env, values, format}}")
        if not k:
            return
        for name, node in k.value.items():
            if name not in KNOBS:
                close = [x for x in KNOBS if x.split(".")[-1] == name.split(".")[-1]]
                self.problem(None, "knobs: unknown knob '%s'%s (a knob is a key of the harness config, e.g. "
                             "train.seq_len, or transport)" % (name, " (did you mean %s?)" % close[0] if close else ""),
                             key_pos=k.keys[name])
                continue
            if not isinstance(node.value, dict):
                self.problem(node, "knobs.%s: expected an object {flag | env, values, format}, got %s"
                             % (name, jsonpos.type_name(node.value)))
                continue
            self.keys(node, ["flag", "env", "values", "format"], "knobs.%s" % name)
            fl = self.typed(node, "flag", [str], "a flag (a string)")
            ev = self.typed(node, "env", [str], "an environment variable (a string)")
            if fl and ev:
                self.problem(ev, "knobs.%s: give 'flag' or 'env', not both" % name)
            fmt = self.typed(node, "format", [str], "a format string")
            if fmt:
                self.placeholders(fmt.value, fmt, "knobs.%s.format" % name)
            values = None
            vt = self.typed(node, "values", [dict], "an object {harness value: trainer value | true | null}")
            if vt:
                values = {}
                for hv, tv in vt.value.items():
                    if isinstance(tv.value, dict):
                        bad = [k for k, x in tv.value.items() if not isinstance(x.value, str)]
                        for k in bad:
                            self.problem(tv.value[k], "knobs.%s.values.%s.%s: expected a string" % (name, hv, k))
                        values[hv] = {k: x.value for k, x in tv.value.items()}
                        continue
                    if not (tv.value is None or tv.value is True or isinstance(tv.value, str)):
                        self.problem(tv, "knobs.%s.values.%s: expected a string, true, null or an object of "
                                     "environment variables, got %s" % (name, hv, jsonpos.type_name(tv.value)))
                    values[hv] = tv.value
            self.knobs[name] = {"flag": fl.value if fl else None, "env": ev.value if ev else None,
                                "values": values, "format": fmt.value if fmt else None}
        # knobs a template or args name without an entry are knobs too (value as is)
        texts = list(self.args) + list(self.env.values()) + [self.cwd or ""]
        if self.config_file:
            texts.append(self.config_file["text"])
        for text in texts:
            for m in PLACEHOLDER.finditer(text):
                n = m.group(1)
                if n in KNOBS and n not in self.knobs:
                    self.knobs[n] = {"flag": None, "env": None, "values": None, "format": None}

    def _faults(self, r):
        self.faults = {}
        f = self.typed(r, "faults", [dict], "an object {fault: {env | flag, value}}")
        if not f:
            return
        for name, node in f.value.items():
            if not re.match(r"^[a-z_][a-z0-9_]*$", name):
                self.problem(None, "faults: '%s' is not a fault name" % name, key_pos=f.keys[name])
                continue
            if not isinstance(node.value, dict):
                self.problem(node, "faults.%s: expected an object {env | flag, value}" % name)
                continue
            self.keys(node, ["env", "flag", "value"], "faults.%s" % name)
            fl = self.typed(node, "flag", [str], "a flag (a string)")
            ev = self.typed(node, "env", [str], "an environment variable (a string)")
            va = self.typed(node, "value", [str], "a string")
            if not fl and not ev:
                self.problem(node, "faults.%s: needs 'env' or 'flag'" % name)
            self.faults[name] = {"flag": fl.value if fl else None, "env": ev.value if ev else None,
                                 "value": va.value if va else "1"}

    def _modules(self, r):
        self.layers = None
        self.branches = {}
        self.gate = None
        self.fault_output = None
        m = self.typed(r, "modules", [dict], "an object {layers, branches, gate, fault_output}")
        if not m:
            return
        self.keys(m, ["layers", "branches", "gate", "fault_output"], "modules")
        lay = self.typed(m, "layers", [str], "a module-path pattern with {layer} (a string)")
        if lay:
            if "{layer}" not in lay.value:
                self.problem(lay, "modules.layers: the pattern must contain {layer}, e.g. \"layers.{layer}\"")
            self.layers = Pattern(lay.value)
        br = self.typed(m, "branches", [dict], "an object {cmp, sel, win: pattern}")
        if br:
            self.keys(br, BRANCHES, "modules.branches")
            for b in BRANCHES:
                v = self.typed(br, b, [str], "a module-path pattern (a string)")
                if v:
                    self.branches[b] = Pattern(v.value)
        g = self.typed(m, "gate", [dict], "an object {module, last, activation, order}")
        if g:
            self.keys(g, ["module", "last", "activation", "order"], "modules.gate")
            mod = self.typed(g, "module", [str], "a module-path pattern", required=True, where="modules.gate")
            last = self.typed(g, "last", [str], "the gate's last linear layer (a pattern)", required=True,
                              where="modules.gate")
            act = self.typed(g, "activation", [str], "sigmoid, softmax or none")
            if act and act.value not in ("sigmoid", "softmax", "none"):
                self.problem(act, "modules.gate.activation: expected sigmoid, softmax or none, got '%s'" % act.value)
            order = ["cmp", "sel", "win"]
            o = self.typed(g, "order", [list], "the branches of the gate's last dimension")
            if o:
                order = [x.value for x in o.value]
                if sorted(order) != sorted(BRANCHES):
                    self.problem(o, "modules.gate.order: expected the three branches cmp, sel, win in some order")
            if mod and last:
                self.gate = {"module": Pattern(mod.value), "last": Pattern(last.value),
                             "activation": act.value if act else "none", "order": order}
        fo = self.typed(m, "fault_output", [str], "a module path")
        if fo:
            self.fault_output = Pattern(fo.value)

    # ---- the handshake ---------------------------------------------------------------------
    def knob_values(self, name, default):
        k = self.knobs.get(name)
        if k is None:
            return default
        return sorted(k["values"]) if k["values"] is not None else default

    def protocol_info(self, version):
        knobs = {n: (sorted(k["values"]) if k["values"] is not None and k["format"] is None else None)
                 for n, k in sorted(self.knobs.items())}
        transports = ["none"] + [t for t in self.knob_values("transport", []) if t != "none"]
        faults = [f for f in HOOK_FAULTS
                  if (f != "gate_zero_init" or self.gate) and
                  (f != "nan_at_seqlen" or self.fault_output or "sel" in self.branches)]
        faults += [f for f in sorted(self.faults) if f not in faults]
        diags = ["heartbeat", "stack_dump", "log_file", "trace_grads", "dump_step", "anomaly"]
        if self.layers:
            diags.append("dump_acts")
        if self.gate:
            diags.append("gate_stats")
        features = {
            "backends": self.knob_values("train.backend", ["cpu", "cpu64", "cuda"]),
            "precisions": self.knob_values("train.precision", ["fp32", "fp64", "bf16", "fp16"]),
            "transports": transports,
            "bootstraps": ["env"],
            "ddp_modes": self.knob_values("train.ddp_mode", ["default"]),
            "prefill": self.knob_values("train.prefill", ["batched"]),
            "faults": faults,
            "diagnostics": diags,
            "knobs": knobs,
        }
        if "data.kind" in self.knobs and self.knobs["data.kind"]["values"] is not None:
            features["data"] = sorted(self.knobs["data.kind"]["values"])
        return {"protocol": 2, "trainer": self.name, "version": version, "features": features,
                "map": self.path}

    # ---- a case -> the script's command line --------------------------------------------
    def case_values(self, cfg, transport, out, rank, world):
        """{placeholder: string} for every knob the config has, and the specials."""
        vals = {"out": out or "", "rank": str(rank), "world_size": str(world), "map_dir": self.dir,
                "transport": transport or "none"}
        for sec, keys in CONFIG_KEYS.items():
            for k in keys:
                if isinstance(cfg.get(sec), dict) and k in cfg[sec]:
                    vals["%s.%s" % (sec, k)] = cfg[sec][k]
        return vals

    @staticmethod
    def _text(v):
        """A value as the trainer reads it. Reals always carry a '.' (1.0e-05, not 1e-05), which
        JSON, YAML 1.1 and Python all read as a float."""
        if isinstance(v, str):
            return v
        if isinstance(v, float) and v == v and v not in (float("inf"), float("-inf")):
            t = repr(v)
            mant, e, exp = t.partition("e")
            return (mant if "." in mant else mant + ".0") + (e + exp if e else "")
        return json.dumps(v)

    def _format(self, name, raw, vals):
        """The trainer's value of knob `name`: a string, True (a bare flag) or None (nothing)."""
        k = self.knobs.get(name, {"values": None, "format": None})
        key = self._text(raw)
        if k["values"] is not None and key in k["values"]:
            return k["values"][key]
        if k["values"] is not None and k["format"] is None:
            raise MapError(["%s: the knob %s has no value '%s' (the map's values: %s)"
                            % (self.shown, name, key, ", ".join(sorted(k["values"])))])
        if k["format"] is not None:
            items = raw if isinstance(raw, list) else [raw]
            sub = {str(i): self._text(x) for i, x in enumerate(items)}
            if len(items) == 2:
                sub.update(begin=self._text(items[0]), end=self._text(items[1]))
                if isinstance(items[1], int):
                    sub["last"] = self._text(items[1] - 1)
            sub["value"] = key
            return self.expand(k["format"], dict(vals, **sub))
        if isinstance(raw, list):
            return ",".join(self._text(x) for x in raw)
        return self._text(raw)

    def expand(self, text, vals):
        def rep(m):
            n = m.group(1)
            if n not in vals:
                raise MapError(["%s: the placeholder {{%s}} has no value in this case" % (self.shown, n)])
            v = vals[n]
            if n in self.knobs:
                v = self._format(n, v, vals)
                return "" if v is None or v is True or isinstance(v, dict) else v
            return self._text(v)
        return PLACEHOLDER.sub(rep, text)

    def command(self, cfg, transport, out, rank, world, faults=()):
        """(args, env, files): the script's extra arguments (after `args`), environment
        additions, and {path: text} files to write (the config file)."""
        vals = self.case_values(cfg or {}, transport, out, rank, world)
        args = [self.expand(a, vals) for a in self.args]
        env = {k: self.expand(v, vals) for k, v in self.env.items()}
        files = {}
        if self.config_file and cfg is not None:      # no case config: the script's own file
            path = os.path.join(out or ".", self.config_file["name"])
            files[path] = self.expand(self.config_file["text"], vals)
            if self.config_file["flag"]:
                args += [self.config_file["flag"], path]
            elif self.config_file["env"]:
                env[self.config_file["env"]] = path
        for name, k in sorted(self.knobs.items()):
            if name not in vals or (cfg is None and name != "transport"):
                continue
            if name == "transport" and vals[name] == "none":
                continue                      # one process, no transport: nothing to pass
            if not k["flag"] and not k["env"] and not any(isinstance(x, dict) for x in (k["values"] or {}).values()):
                continue
            v = self._format(name, vals[name], vals)
            if v is None:
                continue
            if isinstance(v, dict):
                env.update(v)
                continue
            if k["flag"]:
                args += [k["flag"]] if v is True else [k["flag"], v]
            else:
                env[k["env"]] = "1" if v is True else v
        for f in faults:
            spec = self.faults.get(f.split("=", 1)[0])
            if spec:
                if spec["flag"]:
                    args += [spec["flag"], spec["value"]]
                else:
                    env[spec["env"]] = spec["value"]
        return args, env, files

    # ---- module roles --------------------------------------------------------------------
    def layer_of(self, path):
        if not self.layers:
            return -1
        m = self.layers.prefix_rx.match(path)
        return int(m.group("layer")) if m else -1

    def branch_of(self, path):
        for b, p in self.branches.items():
            if p.within(path):
                return b
        return None

    def in_gate(self, path):
        return bool(self.gate and self.gate["module"].within(path))

    def expected_missing(self, names, force_branch):
        """With force_branch = one branch: the other branches' and the gate's parameters."""
        if force_branch in (None, "none") or not self.branches:
            return []
        return [n for n in names
                if self.in_gate(n) or any(p.within(n) for b, p in self.branches.items() if b != force_branch)]


def glob_match(name, pattern):
    return fnmatch.fnmatchcase(name, pattern)
