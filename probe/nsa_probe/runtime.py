"""The probe inside a training process: hooks and wrappers that observe the script's own
modules, backward calls, optimizers and collectives, and write what trainer protocol 2 asks
of a trainer (docs/trainer-maps.md). Installed before the script runs (`install`) or
explicitly (`attach`).

The hooks read and return nothing (the script's values are untouched) unless a fault is on.
"""
import json
import math
import os
import sys
import time
import types

import torch

from . import faults as faultlib
from . import safetensors
from .heartbeat import Heartbeat

_COLLECTIVES = ["all_reduce", "broadcast", "barrier", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter", "reduce",
                "all_gather_object", "broadcast_object_list", "monitored_barrier"]


def _num(x):
    """A float for JSON: non-finite values as the strings nan, inf, -inf (metrics.jsonl's rule)."""
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def seq_dim(shape, seq_len):
    """The dimension of a module output that is the sequence: the first after the batch whose
    size is the root input's length ([B, T, ...] and [B, heads, T, D] both); None if none is."""
    for d in range(1, len(shape)):
        if seq_len and shape[d] == seq_len:
            return d
    return 1 if len(shape) > 1 else None


def _rss_bytes():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _first_tensor(args):
    for a in args:
        if isinstance(a, torch.Tensor):
            return a
    return None


def _first_float(out):
    if isinstance(out, torch.Tensor):
        return out if out.is_floating_point() else None
    if isinstance(out, (tuple, list)):
        for o in out:
            t = _first_float(o)
            if t is not None:
                return t
    if isinstance(out, dict):
        for o in out.values():
            t = _first_float(o)
            if t is not None:
                return t
    return None


class Options:
    """What the probe does: the protocol's flags (docs/trainer-maps.md)."""
    def __init__(self, out=None, rank=None, heartbeat=None, stack_file=None, trace_grads=False, gate_stats=False,
                 dump_step=None, dump_acts=False, faults=(), anomaly=True, metrics=True, config=None):
        self.rank = int(os.environ.get("RANK", "0")) if rank is None else int(rank)
        sub = (lambda p: p.replace("%r", str(self.rank)) if p else p)
        self.out = out or "nsa_probe_out"
        self.heartbeat, self.stack_file, self.dump_step = sub(heartbeat), sub(stack_file), sub(dump_step)
        self.trace_grads, self.gate_stats, self.dump_acts = trace_grads, gate_stats, dump_acts
        self.faults, self.anomaly, self.metrics, self.config = list(faults), anomaly, metrics, config or {}


class Probe:
    def __init__(self, tmap, opts):
        self.map, self.o = tmap, opts
        self.rank = opts.rank
        os.makedirs(opts.out, exist_ok=True)
        self.hb = Heartbeat(opts.heartbeat, self.rank)
        self.faults = faultlib.Faults(opts.faults, self.rank, self)
        self.nstep = 0                # optimizer steps done
        self.micro = 0                # backward calls in the current step
        self.in_backward = 0
        self.primary_params = None   # a parameter of the first optimizer: the root holds it
        self.global_handles = []
        self.root = None              # the outermost module called (DDP's inner module)
        self.root_outer = None
        self.names = []               # parameter names, in named_parameters() order
        self.params = []
        self.index = {}               # id(param) -> index
        self.tracked = {}             # id(module) -> (path, layer, branch, role)
        self.primary_opt = None
        self.ddp = None               # {"find_unused": bool, "static_graph": bool}
        self.losses = []
        self.tokens = 0
        self.t_step = time.perf_counter()
        self.arrived = None           # per parameter: arrived in this step
        self.order = []
        self.first_nonfinite = None   # (path, layer, branch, position) of this forward
        self.gate_rows = {}
        self.acts = []
        self.acts_seen = set()
        self.step1_inputs = None
        self.counts = {"forward": 0, "backward": 0, "optimizer": 0}
        self.layers_seen = set()
        self.finished = False
        cfg = opts.config
        self.force_branch = (cfg.get("nsa") or {}).get("force_branch", "none") if cfg else "none"
        # rank 0 alone writes metrics, gate statistics and the dump (trainer protocol 2); every
        # rank its gradient-arrival trace and anomaly record
        self.metrics_f = open(os.path.join(opts.out, "metrics.jsonl"), "a") if opts.metrics and self.rank == 0 else None
        if self.rank != 0:
            opts.gate_stats, opts.dump_step, opts.dump_acts = False, None, False
        self.handles = []
        self.n_arrived = self.n_expected = 0
        self.seq_len = 0
        self.grad_norm = None
        self._explicit_steps = 0

    # ---- output ------------------------------------------------------------------------
    def _jsonl(self, name, rec):
        path = os.path.join(self.o.out, name)
        line = (json.dumps(rec, separators=(",", ":")) + "\n").encode()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def say(self, text):
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    # ---- installation ----------------------------------------------------------------------
    def install(self, wrap_optimizers=True):
        """Global hooks and wrappers, before the script's first line (library mode: the
        optimizer given to attach() is adopted instead of every optimizer constructed)."""
        mm = torch.nn.modules.module
        # until the root module is known, a global pre-hook looks for it; then only the root and
        # the modules the map names (every module with the anomaly check) carry hooks
        self.global_handles = [mm.register_module_forward_pre_hook(self._discover)]
        self._wrap_backward()
        if wrap_optimizers:
            self._wrap_optimizer()
        self._wrap_ddp()
        self._wrap_collectives()

    def _wrap_backward(self):
        real = torch.autograd.backward
        probe = self

        def backward(tensors, *a, **k):
            if probe.in_backward:
                return real(tensors, *a, **k)
            probe._before_backward(tensors)
            probe.in_backward += 1
            try:
                return real(tensors, *a, **k)
            except BaseException as e:
                probe._backward_failed(e)
                raise
            finally:
                probe.in_backward -= 1
                probe._after_backward()
        backward.__wrapped__ = real
        torch.autograd.backward = backward

    def _wrap_optimizer(self):
        real_init = torch.optim.Optimizer.__init__
        probe = self

        def __init__(opt, *a, **k):
            real_init(opt, *a, **k)
            probe._adopt_optimizer(opt)
        torch.optim.Optimizer.__init__ = __init__

    def _adopt_optimizer(self, opt):
        if getattr(opt, "_nsa_probe", False):
            return
        opt._nsa_probe = True
        if self.primary_params is None:
            for g in opt.param_groups:
                if g["params"]:
                    self.primary_params = g["params"][0]
                    break
        cls_step = type(opt).step
        probe = self

        def step(self_, *a, **k):        # a bound method: LR schedulers re-wrap it through __func__
            primary = probe.primary_opt is None or probe.primary_opt is self_
            if primary:
                probe.primary_opt = self_
                probe._before_optimizer(self_)
            try:
                return cls_step(self_, *a, **k)
            finally:
                if primary:
                    probe._after_optimizer(self_)
        opt.step = types.MethodType(step, opt)

    def _wrap_ddp(self):
        try:
            DDP = torch.nn.parallel.DistributedDataParallel
        except AttributeError:
            return
        real_init = DDP.__init__
        probe = self

        def __init__(ddp, *a, **k):
            probe.hb.set(phase="init", op="DistributedDataParallel")
            real_init(ddp, *a, **k)
            probe.ddp = {"find_unused": bool(getattr(ddp, "find_unused_parameters", False)),
                         "static_graph": bool(getattr(ddp, "static_graph", False))}
            probe._adopt_root(ddp)
        DDP.__init__ = __init__

    def _wrap_collectives(self):
        try:
            import torch.distributed as dist
            import torch.distributed.distributed_c10d as c10d
        except ImportError:
            return
        if not dist.is_available():
            return
        probe = self
        for name in _COLLECTIVES + ["init_process_group"]:
            real = getattr(dist, name, None)
            if real is None:
                continue

            def make(real, name):
                def collective(*a, **k):
                    prev = (probe.hb.phase, probe.hb.op)
                    probe.hb.set(phase="init" if name == "init_process_group" else "comm",
                                 op="rendezvous" if name == "init_process_group" else name)
                    r = real(*a, **k)                  # raising: the beat keeps saying where
                    probe.hb.set(phase=prev[0], op=prev[1])
                    return r
                collective.__wrapped__ = real
                collective.__name__ = name
                return collective
            wrapped = make(real, name)
            setattr(dist, name, wrapped)
            if getattr(c10d, name, None) is real:
                setattr(c10d, name, wrapped)

    # ---- the root module and its names --------------------------------------------------------
    def _adopt_root(self, outer):
        inner = getattr(outer, "module", outer) if type(outer).__name__ == "DistributedDataParallel" else outer
        if self.root is inner:                 # DDP wrapped a model already seen: its hooks again
            self.root_outer = outer
            self._hook_modules(inner)
            return
        self.root, self.root_outer = inner, outer
        named = [(n, p) for n, p in inner.named_parameters() if p.requires_grad]
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.index = {id(p): i for i, p in enumerate(self.params)}
        self.arrived = [False] * len(self.params)
        m = self.map
        self.tracked = {}
        for path, mod in inner.named_modules():
            if not path:
                continue
            layer = m.layers.match(path) if m and m.layers else None
            branch = None
            role = None
            if layer is not None:
                role = "layer"
            else:
                for b, pat in (m.branches.items() if m else []):
                    if pat.match(path) is not None:
                        role, branch, layer = "branch", b, pat.match(path)
                if role is None and m and m.gate and m.gate["module"].match(path) is not None:
                    role, layer = "gate", m.gate["module"].match(path)
            if role is None and self.o.anomaly:
                role = "other"
            if role:
                lay = layer if layer is not None and layer >= 0 else (m.layer_of(path) if m else -1)
                br = branch if branch else (m.branch_of(path) if m else None)
                self.tracked[id(mod)] = (path, lay, br, role)
        self._hook_modules(inner)
        self.faults.on_root(self)

    def _hook_modules(self, inner):
        """The hooks the diagnostics asked for, on the modules that need them (a hook on every
        module call would cost the script's Python time on every module)."""
        for h in self.global_handles + self.handles:
            h.remove()
        self.global_handles, self.handles = [], []
        self.handles.append(inner.register_forward_pre_hook(self._root_pre))
        # gradient arrival: the trace, DDP's missing parameters, the wait in its all-reduce
        if self.o.trace_grads or self.ddp is not None or self.faults.drop_names:
            for i, p in enumerate(self.params):
                self.handles.append(p.register_hook(self._grad_hook(i)))
        looks = self.o.anomaly or self.o.gate_stats or self.o.dump_acts or self.faults.on
        for path, mod in inner.named_modules():
            info = self.tracked.get(id(mod))
            if info is None:
                continue
            if info[3] == "layer":
                self.handles.append(mod.register_forward_pre_hook(self._layer_pre))
            if info[3] == "layer" or looks:
                self.handles.append(mod.register_forward_hook(self._post_forward))

    def _discover(self, mod, args):
        """The global pre-hook before the root is known: the first module called that holds the
        optimizer's parameters (or, before any optimizer, any parameter) is the root."""
        if self.root is not None or self.in_backward:
            return None
        first = next(mod.parameters(), None)
        if first is None:
            return None
        if self.primary_params is not None and not any(p is self.primary_params for p in mod.parameters()):
            return None
        self._adopt_root(mod)
        self._root_pre(mod, args)
        return None

    def layer_count(self):
        return len({v[1] for v in self.tracked.values() if v[3] == "layer"})

    # ---- forward -----------------------------------------------------------------------------
    def _root_pre(self, mod, args):
        if not self.in_backward:
            self._root_forward(args)
        return None

    def _layer_pre(self, mod, args):
        if not self.in_backward:
            info = self.tracked[id(mod)]
            self.layers_seen.add(info[1])
            self.hb.set(layer=info[1], op=info[0])
        return None

    def _root_forward(self, args):
        self.counts["forward"] += 1
        self.first_nonfinite = None
        x = _first_tensor(args)
        if x is not None and not x.is_floating_point():
            if self.micro == 0:
                self.tokens = 0
            self.tokens += x.numel()
            self.seq_len = x.shape[-1] if x.dim() else 1
            if self.nstep == 0 and self.micro == 0 and self.step1_inputs is None:
                self.step1_inputs = x.detach().to("cpu", torch.int32)
        self.hb.set(phase="forward", step=self.nstep + 1, layer=-1, op="")
        self.faults.on_phase("forward", self.nstep + 1)

    def _post_forward(self, mod, args, out):
        info = self.tracked.get(id(mod))
        if info is None:
            return None
        path, layer, branch, role = info
        if self.in_backward:
            return None
        new = self.faults.on_output(path, layer, branch, role, out, self)
        if new is not None:
            out = new
        t = _first_float(out)
        if t is not None:
            # every look is at a detached tensor: an op on the tensor itself inside a non-reentrant
            # checkpoint region would be counted among the region's saved tensors (torch 1.13)
            if self.o.anomaly and self.first_nonfinite is None and not bool(torch.isfinite(t.detach()).all()):
                self._note_nonfinite(path, layer, branch, t.detach())
            first_micro = self.micro == 0
            if role == "gate" and self.o.gate_stats and first_micro:
                self._gate_row(path, layer, mod, t)
            if self.o.dump_acts and self.nstep == 0 and first_micro and role in ("layer", "branch", "gate"):
                name = ("acts.blocks.%d.out" % layer if role == "layer" else
                        "acts.blocks.%d.attn.%s.o" % (layer, branch) if role == "branch" else
                        "acts.blocks.%d.attn.gate.out" % layer)
                if name not in self.acts_seen:     # sequential prefill calls a module once per token
                    self.acts_seen.add(name)
                    self.acts.append((name, t.detach().float().cpu().clone()))
            if role == "layer" and t.requires_grad:
                t.register_hook(self._layer_grad_hook(layer, path))
        return new

    def _note_nonfinite(self, path, layer, branch, t):
        bad = (~torch.isfinite(t)).nonzero()
        pos = bad[0].tolist() if len(bad) else []
        td = seq_dim(t.shape, self.seq_len)
        position = {"b": pos[0] if len(pos) > 0 else -1, "t": pos[td] if td is not None and len(pos) > td else -1,
                    "col": pos[-1] if len(pos) > 2 else -1}
        v = t[tuple(pos)].item() if pos else float("nan")
        self.first_nonfinite = {"phase": "forward", "tensor": path, "layer": layer, "branch": branch,
                                "op": path.rsplit(".", 1)[-1], "position": position, "value": v}

    def _layer_grad_hook(self, layer, path):
        def hook(g):
            self.hb.set(phase="backward", layer=layer, op=path)
        return hook

    # ---- gradients ---------------------------------------------------------------------------
    def _grad_hook(self, i):
        def hook(g):
            if not self.arrived[i]:
                self.arrived[i] = True
                if self.micro == 0:
                    self.order.append(i)
                self.n_arrived += 1
                if self.n_arrived == self.n_expected and self.in_backward:
                    self.hb.set(phase="comm" if self.ddp else "backward",
                                op="DDP bucket all-reduce" if self.ddp else "")
        return hook

    def _before_backward(self, tensors):
        t = tensors if isinstance(tensors, torch.Tensor) else (tensors[0] if tensors else None)
        if isinstance(t, torch.Tensor) and t.numel() == 1:
            self.losses.append(t.detach())
            if self.o.anomaly and not bool(torch.isfinite(t.detach()).all()):
                self._anomaly(self.first_nonfinite or {
                    "phase": "forward", "tensor": "loss", "layer": -1, "branch": None, "op": "loss",
                    "position": {"b": -1, "t": -1, "col": -1}, "value": t.item()})
        self.counts["backward"] += 1
        if self.micro == 0:
            self.arrived = [False] * len(self.params)
            self.order = []
            self.n_arrived = 0
        self.n_expected = len(self.params) - len(self.faults.dropped(self))
        self.hb.set(phase="backward", layer=-1, op="")
        self.faults.on_phase("backward", self.nstep + 1)

    def _backward_failed(self, e):
        where = self.hb.op or "(before any layer's backward)"
        layer = self.hb.layer
        branch = self.map.branch_of(where) if self.map and self.hb.op else None
        self.say("[nsa_probe] rank %d step %d: backward failed after the gradient reached %s (layer %d%s): %s: %s"
                 % (self.rank, self.nstep + 1, where, layer, ", branch %s" % branch if branch else "",
                    type(e).__name__, str(e).split("\n")[0]))

    def _after_backward(self):
        self.micro += 1
        self.faults.on_phase("after_backward", self.nstep + 1)
        if self.ddp is not None and not self.ddp["find_unused"] and self.params:
            missing = [self.names[i] for i, a in enumerate(self.arrived) if not a]
            expected = set(self.map.expected_missing(self.names, self.force_branch)) if self.map else set()
            unexpected = [n for n in missing if n not in expected] if self.ddp.get("static_graph") else missing
            if unexpected and self.micro == 1:
                self.say("[DDP] step=%d rank=%d %d parameter(s) got no gradient under DistributedDataParallel "
                         "(find_unused_parameters=False): its reduction waits for them" %
                         (self.nstep + 1, self.rank, len(unexpected)))
                for n in unexpected:
                    self.say("[DDP] step=%d rank=%d no gradient: %s" % (self.nstep + 1, self.rank, n))
        self.hb.set(phase="data", layer=-1, op="")

    # ---- the optimizer step ---------------------------------------------------------------------
    def _before_optimizer(self, opt):
        step = self.nstep + 1
        self.hb.set(phase="optimizer", layer=-1, op=type(opt).__name__ if opt is not None else "", step=step)
        self.faults.on_phase("optimizer", step)
        grads = [(i, p.grad) for i, p in enumerate(self.params) if p.grad is not None]
        self.grad_norm = None
        if grads and (self.o.metrics or self.o.anomaly):
            norms = torch.stack([g.detach().float().norm() for _, g in grads])
            self.grad_norm = float(norms.norm())
            if self.o.anomaly and not math.isfinite(self.grad_norm):
                bad = [i for i, g in grads if not bool(torch.isfinite(g).all())]
                i = min(bad, key=lambda j: self.order.index(j) if j in self.order else len(self.order))
                name = self.names[i]
                self._write_step(step)
                self._anomaly({"phase": "backward", "tensor": "grads." + name, "layer": self.map.layer_of(name)
                               if self.map else -1, "branch": self.map.branch_of(name) if self.map else None,
                               "op": "backward", "position": {"b": -1, "t": -1, "col": -1},
                               "value": self.grad_norm})
        if self.o.dump_step and step == 1:
            self._dump(grads)
        if self.o.trace_grads:
            self._trace(step, grads)
        if self.o.gate_stats and self.gate_rows:
            self._jsonl("gate_stats.jsonl", {
                "step": step, "rank": self.rank,
                "gate_act": self.map.gate["activation"] if self.map and self.map.gate else "none",
                "gated": self.force_branch in (None, "none"),
                "layers": [self.gate_rows[k] for k in sorted(self.gate_rows)]})

    def _after_optimizer(self, opt):
        self.nstep += 1
        self.counts["optimizer"] += 1
        self._write_step(self.nstep, opt)
        self.micro = 0
        self.gate_rows = {}
        self.hb.set(phase="data", layer=-1, op="", step=self.nstep)
        self.faults.on_phase("data", self.nstep + 1)

    def _write_step(self, step, opt=None):
        now = time.perf_counter()
        ms = (now - self.t_step) * 1e3
        self.t_step = now
        loss = float(torch.stack([l.float() for l in self.losses]).mean()) if self.losses else float("nan")
        self.losses = []
        if not self.metrics_f:
            return
        world = _world_size()
        tokens = self.tokens * world
        mem = torch.cuda.memory_allocated() if torch.cuda.is_available() and torch.cuda.is_initialized() else _rss_bytes()
        lr = opt.param_groups[0].get("lr") if opt is not None and opt.param_groups else None
        rec = {"step": step, "loss": _num(loss), "grad_norm": _num(self.grad_norm) if self.grad_norm is not None
               else None, "lr": float(lr) if isinstance(lr, (int, float)) else None, "ms": round(ms, 3),
               "tokens": tokens, "tok_per_s": round(tokens / (ms / 1e3), 1) if ms > 0 else None,
               "mem_bytes": mem, "rss_bytes": _rss_bytes(), "world_size": world}
        self.metrics_f.write(json.dumps(rec) + "\n")
        self.metrics_f.flush()

    def _trace(self, step, grads):
        expected = self.map.expected_missing(self.names, self.force_branch) if self.map else []
        missing = [self.names[i] for i, a in enumerate(self.arrived or []) if not a]
        flags = []
        if grads:
            fin = torch.stack([torch.isfinite(g).all() for _, g in grads]).tolist()
            nz = torch.stack([(g != 0).any() for _, g in grads]).tolist()
            flags = list(zip([i for i, _ in grads], fin, nz))
        nonfinite = [self.names[i] for i, f, _ in flags if not f]
        zero = [self.names[i] for i, f, z in flags if f and not z and self.arrived and self.arrived[i]]
        rec = {"step": step, "rank": self.rank, "n_params": len(self.params),
               "arrived": sum(1 for a in (self.arrived or []) if a), "missing": missing,
               "expected_missing": expected, "nonfinite": nonfinite, "zero": zero,
               "order": [self.names[i] for i in self.order]}
        self._jsonl("grad_trace.jsonl", rec)
        self.say("[GRAD-TRACE] step=%d rank=%d arrived=%d missing=%d" % (step, self.rank, rec["arrived"], len(missing)))
        for n in missing:
            self.say("[GRAD-TRACE] step=%d rank=%d missing %s" % (step, self.rank, n))
        for n in nonfinite:
            self.say("[GRAD-TRACE] step=%d rank=%d nonfinite %s" % (step, self.rank, n))

    # ---- gate statistics ----------------------------------------------------------------------
    def _gate_row(self, path, layer, mod, out):
        g = self.map.gate
        last = None
        for n, m in mod.named_modules():
            full = path + ("." + n if n else "")
            if g["last"].match(full) is not None:
                last = m
        act = g["activation"]
        y = out.detach().float()
        if act == "sigmoid":
            y = torch.sigmoid(y)
        elif act == "softmax":
            y = torch.softmax(y.reshape(-1, 3), dim=-1)
        y = y.reshape(-1, 3)
        cols = [g["order"].index(b) for b in ("cmp", "sel", "win")]
        row = {"layer": layer, "fc2_name": g["last"].text.replace("{layer}", "*")}
        if last is not None and getattr(last, "weight", None) is not None:
            w = last.weight.detach().double()
            row.update(fc2_weight_mean=_num(w.mean()), fc2_weight_std=_num(w.std(unbiased=False)),
                       fc2_fan_in=int(w.shape[1]) if w.dim() == 2 else int(w.numel()),
                       fc2_fan_out=int(w.shape[0]))
            b = getattr(last, "bias", None)
            if b is not None:
                b = b.detach().double()
                row.update(fc2_bias_mean=_num(b.mean()), fc2_bias_std=_num(b.std(unbiased=False)))
            else:
                row.update(fc2_bias_mean=0.0, fc2_bias_std=0.0)
        yd = y.double()
        row.update(out_mean=[_num(yd[:, c].mean()) for c in cols],
                   out_std=[_num(yd[:, c].std(unbiased=False)) for c in cols],
                   out_min=[_num(yd[:, c].min()) for c in cols], out_max=[_num(yd[:, c].max()) for c in cols])
        self.gate_rows[layer] = row

    # ---- the step dump ------------------------------------------------------------------------
    def _dump(self, grads):
        ts = []
        if self.step1_inputs is not None:
            ts.append(("inputs", self.step1_inputs))
        loss = float(torch.stack([l.float() for l in self.losses]).mean()) if self.losses else float("nan")
        ts.append(("loss", torch.tensor(loss, dtype=torch.float64)))
        ts += self.acts
        for i, g in grads:
            ts.append(("grads." + self.names[i], g.detach().float()))
        cfg = self.o.config or {}
        train = cfg.get("train", {}) if isinstance(cfg, dict) else {}
        safetensors.write(self.o.dump_step, ts, {"config": json.dumps(cfg), "backend": train.get("backend", "?"),
                                                 "precision": train.get("precision", "?"), "loss": repr(loss),
                                                 "trainer": self.map.name if self.map else "?"})
        self.acts = []

    # ---- anomaly ------------------------------------------------------------------------------
    def _anomaly(self, a):
        step = self.nstep + 1
        self.say("[ANOMALY] step=%d micro=%d phase=%s tensor=%s layer=%d branch=%s op=%s value=%s"
                 % (step, self.micro, a["phase"], a["tensor"], a["layer"], a["branch"] or "-", a["op"], a["value"]))
        name = "anomaly.json" if self.rank == 0 else "anomaly.rank%d.json" % self.rank
        rec = {"step": step, "micro_batch": self.micro, "phase": a["phase"], "tensor": a["tensor"],
               "layer": a["layer"], "branch": a["branch"], "op": a["op"], "position": a["position"],
               "value": "%g" % a["value"], "trainer": "nsa_probe"}
        with open(os.path.join(self.o.out, name), "w") as f:
            f.write(json.dumps(rec) + "\n")
        if self.losses and self.metrics_f:
            self._write_step(step)
        self.finish(3)
        os._exit(3)

    # ---- the end -------------------------------------------------------------------------------
    def finish(self, code):
        if self.finished:
            return
        self.finished = True
        if code == 0 and self.counts["backward"] == 0:
            self.say("[nsa_probe] FAIL: the script never called backward() (%d forward calls of a module with "
                     "parameters, %d optimizer steps): there was no training step to observe"
                     % (self.counts["forward"], self.counts["optimizer"]))
        elif code == 0 and self.counts["optimizer"] == 0:
            self.say("[nsa_probe] FAIL: the script called backward() %d times but never an optimizer's step()"
                     % self.counts["backward"])
        summary = {"rank": self.rank, "exit_code": code, "root": type(self.root).__name__ if self.root else None,
                   "n_params": len(self.params), "layers": sorted(self.layers_seen),
                   "branches": {}, "gates": 0, "counts": self.counts,
                   "ddp": self.ddp, "faults": self.o.faults}
        if self.map:
            for v in self.tracked.values():
                if v[3] == "branch":
                    summary["branches"][v[2]] = summary["branches"].get(v[2], 0) + 1
                elif v[3] == "gate":
                    summary["gates"] += 1
        try:
            with open(os.path.join(self.o.out, "probe.rank%d.json" % self.rank), "w") as f:
                f.write(json.dumps(summary) + "\n")
        except OSError:
            pass
        if self.metrics_f:
            self.metrics_f.close()
        self.hb.exit(code)

    # ---- library mode ---------------------------------------------------------------------------
    def step(self, loss=None):
        """Library mode: call after each optimizer step. With an optimizer attached the step was
        seen already (its loss through backward()); without one this is the step's boundary."""
        if self.primary_opt is not None and self.counts["optimizer"] > self._explicit_steps:
            self._explicit_steps = self.counts["optimizer"]
            return
        if loss is not None and not self.losses:
            self.losses.append(loss.detach())
        self._before_optimizer(None)
        self._after_optimizer(None)
        self._explicit_steps = self.counts["optimizer"]


def _world_size():
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_world_size()
    except Exception:
        pass
    return int(os.environ.get("WORLD_SIZE", "1"))
