"""Faults the probe injects through hooks (docs/trainer-maps.md "Faults"); the map's own faults
(an environment variable or flag of the trainer's) are applied by the command line instead.
Parsing needs no torch: `check(value, tmap)` is what `--fault V --list-faults` runs.
"""
import os
import signal
import sys
import time

PHASES = ["data", "forward", "backward", "optimizer", "comm"]

TABLE = [
    ("gate_zero_init", "the map's gate last layer (weight and bias) set to 0 before the first forward"),
    ("drop_grad", "drop_grad=PARAM: PARAM gets no gradient on every rank (requires_grad off in forward)"),
    ("divergent_unused", "divergent_unused=RANK[:PARAM]: the same on rank RANK only"),
    ("nan_at_seqlen", "nan_at_seqlen=K: the map's fault_output module gives NaN when the sequence length is a multiple of K"),
    ("hang", "hang=RANK:STEP:PHASE: rank RANK sleeps in fault_hang() on entering PHASE of step STEP"),
    ("crash", "crash=RANK:STEP: rank RANK dies by SIGSEGV in fault_crash() at step STEP's forward"),
]


def _uint(text, what, value, syntax):
    if not text.isdigit():
        raise ValueError("--fault %s: %s '%s' is not a non-negative integer (syntax: %s)" % (value, what, text, syntax))
    return int(text)


def parse(value, tmap):
    """(name, arg) of a --fault value, or ValueError naming it."""
    name, _, arg = value.partition("=")
    hook = [n for n, _ in TABLE]
    if tmap is not None and name in tmap.faults:
        return name, arg
    if name not in hook:
        known = hook + (sorted(tmap.faults) if tmap is not None else [])
        raise ValueError("--fault %s: unknown fault '%s' (known: %s)" % (value, name, ", ".join(known)))
    if name == "gate_zero_init":
        if arg:
            raise ValueError("--fault %s: gate_zero_init takes no argument" % value)
        if tmap is None or not tmap.gate:
            raise ValueError("--fault %s: the map names no gate (modules.gate)" % value)
        return name, None
    if name == "drop_grad":
        if not arg:
            raise ValueError("--fault %s: drop_grad needs a parameter name (syntax: drop_grad=PARAM)" % value)
        return name, arg
    if name == "divergent_unused":
        r, _, p = arg.partition(":")
        return name, (_uint(r, "RANK", value, "divergent_unused=RANK[:PARAM]"), p or None)
    if name == "nan_at_seqlen":
        k = _uint(arg, "K", value, "nan_at_seqlen=K")
        if k < 1:
            raise ValueError("--fault %s: K must be at least 1" % value)
        if tmap is None or not (tmap.fault_output or "sel" in tmap.branches):
            raise ValueError("--fault %s: the map names no modules.fault_output (nor a sel branch)" % value)
        return name, k
    if name == "hang":
        p = arg.split(":")
        syntax = "hang=RANK:STEP:PHASE"
        if len(p) != 3:
            raise ValueError("--fault %s: expected %s" % (value, syntax))
        if p[2] not in PHASES:
            raise ValueError("--fault %s: PHASE '%s' is not one of %s" % (value, p[2], ", ".join(PHASES)))
        return name, (_uint(p[0], "RANK", value, syntax), _uint(p[1], "STEP", value, syntax), p[2])
    p = arg.split(":")
    if len(p) != 2:
        raise ValueError("--fault %s: expected crash=RANK:STEP" % value)
    return name, (_uint(p[0], "RANK", value, "crash=RANK:STEP"), _uint(p[1], "STEP", value, "crash=RANK:STEP"))


def fault_hang():
    """Where a hang fault sleeps (the name the HANG diagnosis shows)."""
    while True:
        time.sleep(3600)


def fault_crash():
    """Where a crash fault dies (SIGSEGV: faulthandler dumps the stack, then the signal kills)."""
    os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(5)


class Faults:
    def __init__(self, values, rank, probe):
        tmap = probe.map
        self.rank, self.hb, self.probe_params = rank, probe.hb, []
        self.parsed = [parse(v, tmap) for v in values]
        self.drop_names = [a for n, a in self.parsed if n == "drop_grad"]
        for n, a in self.parsed:
            if n == "divergent_unused" and a[0] == rank:
                self.drop_names.append(a[1] or "")      # "" = the default, resolved at the root
        self.drop_idx = []
        self.on = bool(self.parsed)
        if self.on:
            sys.stderr.write("nsa_probe: rank %d: FAULT INJECTION ACTIVE: %s\n" % (rank, " ".join(values)))
            sys.stderr.flush()

    def _default_unused(self, probe):
        names = probe.names
        if not names:
            return None
        layers = sorted({probe.map.layer_of(n) for n in names} - {-1}) if probe.map else []
        mid = layers[len(layers) // 2] if layers else -1
        if probe.map and probe.map.gate and mid >= 0:
            for n in names:
                if probe.map.gate["last"].within(n) and probe.map.layer_of(n) == mid and n.endswith("weight"):
                    return n
        for n in names:
            if mid < 0 or probe.map.layer_of(n) == mid:
                return n
        return names[0]

    def on_root(self, probe):
        import torch
        self.drop_idx = []
        self.probe_params = probe.params
        for want in self.drop_names:
            name = want or self._default_unused(probe)
            if name not in probe.names:
                close = [n for n in probe.names if want and want.split(".")[-1] == n.split(".")[-1]][:4]
                sys.stderr.write("nsa_probe: --fault: no parameter '%s' in the model (e.g. %s)\n"
                                 % (name, ", ".join(close or probe.names[:4])))
                probe.finish(2)
                os._exit(2)
            self.drop_idx.append(probe.names.index(name))
            if not want:
                sys.stderr.write("[FAULT] divergent_unused: %s gets no gradient on this rank\n" % name)
        if any(n == "gate_zero_init" for n, _ in self.parsed):
            with torch.no_grad():
                for n, p in zip(probe.names, probe.params):
                    if probe.map.gate["last"].within(n):
                        p.zero_()

    def dropped(self, probe):
        return self.drop_idx

    def on_phase(self, phase, step, probe=None):
        if not self.on:
            return
        if phase == "forward" and self.drop_idx:
            for i in self.drop_idx:
                self.probe_params[i].requires_grad_(False)
        if phase == "after_backward" and self.drop_idx:
            for i in self.drop_idx:
                self.probe_params[i].requires_grad_(True)
        for n, a in self.parsed:
            if n == "hang" and a == (self.rank, step, phase):
                sys.stderr.write("[FAULT] hang: rank %d step %d phase %s\n" % (self.rank, step, phase))
                sys.stderr.flush()
                self.hb.set(phase=phase, op="fault_hang")
                fault_hang()
            if n == "crash" and phase == "forward" and a == (self.rank, step):
                sys.stderr.write("[FAULT] crash: rank %d step %d\n" % (self.rank, step))
                sys.stderr.flush()
                fault_crash()

    def on_output(self, path, layer, branch, role, out, probe):
        if not self.on:
            return None
        for n, k in self.parsed:
            if n != "nan_at_seqlen" or not probe.seq_len or probe.seq_len % k:
                continue
            m = probe.map
            target = m.fault_output.match(path) is not None if m.fault_output else (
                role == "branch" and branch == "sel" and layer == 0)
            if not target:
                continue
            import torch
            if isinstance(out, torch.Tensor) and out.is_floating_point() and out.dim() >= 2:
                from .runtime import seq_dim
                out = out.clone()
                idx = [0] + [slice(None)] * (out.dim() - 1)
                idx[seq_dim(out.shape, probe.seq_len)] = -1      # the last position of sequence 0
                out[tuple(idx)] = float("nan")
                return out
        return None
