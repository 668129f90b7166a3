"""nsa_torch/train.py — the training loop (docs/config.md, "Optimizer, clipping,
learning-rate schedule and data order"): per step, grad_accum micro-batches (data ->
forward -> backward), the step's loss (mean over micro-batches, and over ranks), the
global gradient norm, the anomaly replay when either is non-finite (exit 3), the step-1
dump, clipping, AdamW written out per element in float64 as trainer/optim.c does, the
metrics.jsonl record."""
import fnmatch
import math
import os
import resource
import sys
import time

import torch

from nsa_torch import attention as A
from nsa_torch import data as dmod
from nsa_torch import diag, stio
from nsa_torch.data import DataSource
from nsa_torch.model import NSAModel

EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, EXIT_ANOMALY, EXIT_COMM, EXIT_IO = 0, 1, 2, 3, 4, 6


class UsageError(Exception):
    pass


class RunCtx:
    """What the model's forward consults: geometry, faults, diagnostics hooks."""

    def __init__(self, cfg, geom, faults, hb, gs, dropped):
        self.cfg, self.geom, self.faults, self.hb, self.gs = cfg, geom, faults, hb, gs
        self.dropped = dropped
        self.check = None
        self.acts = None
        self.sequential = cfg["train"]["prefill"] == "sequential"
        self.step = 0
        self.steps_begun = 0
        self.prev_states = None
        self.leaked = []
        self.pw = None
        self.saved_ff = {}

    def event(self, phase, layer, op, throttle=False):
        if self.hb is not None:
            self.hb.beat(self.step, phase, layer, op, throttle=throttle)

    def poison(self, L, b, o, t0, Tn):
        K = self.faults.nan_seqlen
        T = self.geom.T
        if not K or L != 0 or T % K:
            return o
        n = self.cfg["nsa"]
        target = "sel" if n["force_branch"] in ("none", "sel") else n["force_branch"]
        if b != target or not (t0 <= T - 1 < t0 + Tn):
            return o
        mask = torch.zeros(o.shape[0], o.shape[1], 1, 1, dtype=torch.bool, device=o.device)
        mask[0, T - 1 - t0] = True
        return o.masked_fill(mask, float("nan"))

    def layer_done(self, L, gate):
        if self.gs is not None and gate is not None and self.pw is not None:
            self.gs.layer(L, gate, self.pw)

    def decode_states(self, model, B, dtype, dev):
        g = self.geom
        stale = self.faults.prefill_leak and self.steps_begun >= 2 and self.prev_states is not None
        states = []
        for L in range(self.cfg["model"]["n_layers"]):
            st = {}
            for b in A.BRANCHES:
                st["k" + b] = torch.zeros(B, g.T, g.G, g.D, dtype=dtype, device=dev)
                st["v" + b] = torch.zeros(B, g.T, g.G, g.D, dtype=dtype, device=dev)
            if stale:
                st["Kc"], st["Vc"], st["stale"] = self.prev_states[L]["Kc"], self.prev_states[L]["Vc"], True
            else:
                st["Kc"] = torch.zeros(B, g.NC, g.G, g.D, dtype=dtype, device=dev)
                st["Vc"] = torch.zeros(B, g.NC, g.G, g.D, dtype=dtype, device=dev)
            states.append(st)
        if self.faults.prefill_leak and stale:
            self.leaked.append([(s["Kc"].clone(), s["Vc"].clone()) for s in states])
        self.prev_states = states
        return states

    def leaked_bytes(self):
        return sum(t.numel() * t.element_size() for step in self.leaked for pair in step for t in pair)


def lr_at(t, s):
    lr, W, S, lo = t["lr"], t["warmup_steps"], t["steps"], t["lr"] * t["min_lr_frac"]
    if W > 0 and s <= W:
        return lr * s / W
    span = S - W
    f = (s - W) / span if span > 0 else 1.0
    f = min(1.0, max(0.0, f))
    return lo + 0.5 * (lr - lo) * (1.0 + math.cos(3.14159265358979323846 * f))


def decays(name, p):
    return name.endswith(".weight") and p.dim() == 2


def load_init(model, path):
    try:
        ts, _ = stio.read(path)
    except stio.StError as e:
        raise UsageError("--init-weights %s" % e)
    params = dict(model.named_parameters())
    for n in params:
        if n not in ts:
            raise UsageError("--init-weights %s: tensor '%s' is missing (this model has %d parameters)"
                             % (path, n, len(params)))
    for n, t in ts.items():
        if n not in params:
            raise UsageError("--init-weights %s: tensor '%s' is not a parameter of this model" % (path, n))
        if list(t.shape) != list(params[n].shape):
            raise UsageError("--init-weights %s: tensor '%s' has shape %s, this model needs %s"
                             % (path, n, list(t.shape), list(params[n].shape)))
        if t.dtype not in (torch.float32, torch.float64):
            raise UsageError("--init-weights %s: tensor '%s' is %s (F32 or F64 expected)" % (path, n, t.dtype))
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(ts[n].to(p.dtype))


def rss_bytes():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Trainer:
    def __init__(self, args, cfg, faults, world):
        self.a, self.cfg, self.faults, self.world = args, cfg, faults, world
        self.rank = world.rank if world.size > 1 or world.dist else args.rank
        faults.rank = self.rank
        t = cfg["train"]
        self.B, self.T, self.accum = t["batch_size"], t["seq_len"], t["grad_accum"]
        be = t["backend"]
        if be == "cuda":
            if not torch.cuda.is_available():
                raise UsageError("backend 'cuda': no CUDA device is usable by torch %s" % torch.__version__)
            self.device = torch.device("cuda", world.local_rank % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        self.pdtype = torch.float64 if be == "cpu64" else torch.float32
        self.autocast = be == "cuda" and t["precision"] == "bf16"
        self.out = args.out
        self.hb = diag.Heartbeat(args.heartbeat, self.rank) if args.heartbeat else None

    def beat(self, phase, op, layer=-1):
        if self.hb is not None:
            self.hb.beat(self.ctx.step, phase, layer, op)

    def enter(self, phase, op, step):
        self.beat(phase, op)
        self.faults.on_phase(phase, step)

    # ---- setup ------------------------------------------------------------------------------------
    def setup(self):
        cfg, a = self.cfg, self.a
        self.beat_init()
        os.makedirs(self.out, exist_ok=True)
        if a.dump_step:   # a path that can never be written fails now, not after the step (as nsa-train)
            d = os.path.dirname(a.dump_step) or "."
            if os.path.isdir(a.dump_step):
                raise UsageError("--dump-step %s: is a directory (give a file name)" % a.dump_step)
            if not os.path.isdir(d):
                raise UsageError("--dump-step %s: directory %s does not exist (create it first)" % (a.dump_step, d))
            if not os.access(d, os.W_OK | os.X_OK):
                raise UsageError("--dump-step %s: directory %s is not writable" % (a.dump_step, d))
        torch.manual_seed(0)
        self.model = NSAModel(cfg).to(self.device, self.pdtype)
        self.names = list(self.model.names)
        self.faults.check_config(cfg)
        dropped = set(self.faults.drop)
        for n in dropped:
            if n not in self.names:
                L = cfg["model"]["n_layers"] - 1
                raise UsageError("--fault drop_grad=%s: no parameter '%s' in this model (valid names are like %s, "
                                 "%s, blocks.%d.attn.o_proj.weight, %s; %d parameters in all)"
                                 % (n, n, self.names[0], "blocks.0.attn.q_proj.weight", L, self.names[-1],
                                    len(self.names)))
        if self.faults.divergent is not None:
            r, pname = self.faults.divergent
            if not pname:
                L = cfg["model"]["n_layers"] // 2
                pname = "blocks.%d.attn.%s" % (L, "gate.fc2.weight" if self.model.gated else "o_proj.weight")
            if pname not in self.names:
                raise UsageError("--fault divergent_unused=%d:%s: no parameter '%s' in this model (valid names are "
                                 "like %s, blocks.0.attn.q_proj.weight; %d parameters in all)"
                                 % (r, pname, pname, self.names[0], len(self.names)))
            if r == self.rank:
                dropped.add(pname)
                sys.stderr.write("nsa-torch-train: rank %d: [FAULT] divergent_unused: %s gets no gradient on this "
                                 "rank\n" % (self.rank, pname))
        if self.faults.active:
            sys.stderr.write("nsa-torch-train: rank %d: FAULT INJECTION ACTIVE: %s\n"
                             % (self.rank, " ".join(self.faults.specs)))
        if a.init_weights:
            load_init(self.model, a.init_weights)
        else:
            self.model.init_weights(cfg["train"]["seed"])
            if self.faults.gate_zero_init:
                with torch.no_grad():
                    for n, p in self.model.named_parameters():
                        if ".attn.gate.fc2." in n:
                            p.zero_()
        self.geom = A.Geom(cfg, self.T, self.device, self.pdtype)
        self.gs = diag.GateStats(self.out, self.rank, cfg) if a.gate_stats else None
        self.ctx = RunCtx(cfg, self.geom, self.faults, self.hb, self.gs, dropped)
        self.trace = diag.GradTrace(self.out, self.rank, self.names, set(self.model.expected_unused())) \
            if a.trace_grads else None
        self._hooks = []
        self.buckets = None
        self.arrived = set()
        if self.trace is not None or self.world.dist:
            for n, p in self.model.named_parameters():
                self._hook_param(n, p)
        self.ddp = self.world.wrap(self.model, cfg) if self.world.dist else None
        self.fwd = self.ddp if self.ddp is not None else self.model
        self.data = DataSource(cfg, self.world.rank if self.world.dist else 0, self.world.size)
        self.m = {n: torch.zeros_like(p) for n, p in self.model.named_parameters()}
        self.v = {n: torch.zeros_like(p) for n, p in self.model.named_parameters()}
        self.metrics = diag.Jsonl(os.path.join(self.out, "metrics.jsonl"), truncate=True) if self.rank == 0 else None
        self.n_elems = sum(p.numel() for p in self.model.parameters())
        if not a.quiet:
            print("nsa-torch-train: config %s | backend %s (%s, torch %s) | %d parameters | data %s | B=%d T=%d "
                  "grad_accum=%d steps=%d | prefill %s | checkpoint layers %s | world %d"
                  % (cfg["name"], cfg["train"]["backend"], cfg["train"]["precision"], torch.__version__,
                     self.n_elems, cfg["data"]["kind"], self.B, self.T, self.accum, cfg["train"]["steps"],
                     cfg["train"]["prefill"], cfg["train"]["checkpoint_layers"], self.world.size), flush=True)

    def beat_init(self):
        if self.hb is not None:
            self.hb.beat(0, "init", -1, "init")

    def _ready(self, name):
        self.arrived.add(name)
        if self.trace is not None:
            self.trace.ready(name)

    def _hook_param(self, name, p):
        if hasattr(p, "register_post_accumulate_grad_hook"):
            self._hooks.append(p.register_post_accumulate_grad_hook(lambda _p, n=name: self._ready(n)))
        else:   # torch < 2.1: the parameter's AccumulateGrad node
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(lambda *_a, n=name: self._ready(n))
            self._hooks.append(acc)

    # ---- one micro-batch ----------------------------------------------------------------------------
    def forward(self, model, inp, tgt):
        self.ctx.pw = self.model.weights(self.ctx)
        if self.autocast:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return model(inp, tgt, self.ctx)
        return model(inp, tgt, self.ctx)

    def clobber(self):
        L = self.faults.clobber_layer
        ff = self.ctx.saved_ff.get(L)
        if ff is not None:
            ffa, ffh = ff
            ffh.data.copy_(ffa.data)

    def tensors(self, inp, tgt):
        return (torch.from_numpy(inp).to(self.device), torch.from_numpy(tgt).to(self.device))

    # ---- the run ------------------------------------------------------------------------------------------
    def run(self):
        t = self.cfg["train"]
        for step in range(1, t["steps"] + 1):
            rc = self.step(step)
            if rc != EXIT_OK:
                return rc
        if self.world.dist:
            sums = self.world.gather([float(p.detach().double().sum()) for p in self.model.parameters()])
            bad = [self.names[i] for i in range(len(self.names)) if len({s[i] for s in sums}) > 1]
            if bad:
                sys.stderr.write("[DDP] the weights differ across ranks after step %d: %s\n" % (t["steps"], bad[0]))
                return EXIT_RUNTIME
            if not self.a.quiet or self.rank == 0:
                print("[DDP] rank %d: the weights are identical on the %d ranks after step %d"
                      % (self.rank, self.world.size, t["steps"]), flush=True)
        return EXIT_OK

    def step(self, step):
        t = self.cfg["train"]
        t0 = time.time()
        ctx = self.ctx
        ctx.step = step
        self.beat("data", "step")
        if self.trace:
            self.trace.begin_step(step)
        if self.gs:
            self.gs.arm()
        pos = self.data.position()
        self.arrived = set()
        for p in self.model.parameters():
            p.grad = None
        loss_sum, N, digest = 0.0, self.B * self.T, 0
        scale = 1.0 / (N * self.accum)
        for k in range(self.accum):
            self.enter("data", "data_next", step)
            inp_np, tgt_np = self.data.next()
            digest = dmod.digest64(inp_np.astype("<i4").tobytes(), digest)
            digest = dmod.digest64(tgt_np.astype("<i4").tobytes(), digest)
            inp, tgt = self.tensors(inp_np, tgt_np)
            self.enter("forward", "forward", step)
            ctx.steps_begun += 1 if k == 0 else 0
            sync = k == self.accum - 1 or self.ddp is None
            with (self.ddp.no_sync() if not sync else _nullctx()):
                logits, losses = self.forward(self.fwd, inp, tgt)
                loss_sum += float(losses.detach().double().sum()) / N
                if k == 0 and self.gs:
                    self.gs.finish_step(step)
                if self.faults.clobber_layer >= 0:
                    self.clobber()
                self.enter("backward", "backward", step)
                if self.trace:
                    self.trace.begin_micro(k)
                (losses.sum() * scale).backward()
        if self.trace:
            self.trace.end_step(self.model.named_parameters())
        loss = loss_sum / self.accum
        if self.world.dist:
            rc = self.ddp_contract(step)
            if rc != EXIT_OK:
                return rc
            self.enter("comm", "allreduce loss", step)
            loss = self.world.mean(loss, self.device)
        self.enter("optimizer", "grad_norm", step)
        grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p)) for n, p in self.model.named_parameters()}
        gnorm = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads.values()))
        if not math.isfinite(loss) or not math.isfinite(gnorm):
            sys.stderr.write("nsa-torch-train: step %d: non-finite %s (loss %g, grad norm %g); replaying the step to "
                             "localise\n" % (step, "loss" if not math.isfinite(loss) else "gradient", loss, gnorm))
            if self.metrics:
                self.metrics.write({"step": step, "loss": "%g" % loss, "grad_norm": "%g" % gnorm, "anomaly": True})
            self.localise(step, pos)
            return EXIT_ANOMALY
        if step == 1 and self.a.dump_step:
            self.dump(pos)
        lr = lr_at(t, step)
        self.beat("optimizer", "adamw")
        self.adamw(grads, gnorm, lr, step)
        dt = time.time() - t0
        toks = self.B * self.T * self.accum * self.world.size
        if not self.a.quiet:
            print("step %5d/%d | loss %.6f | grad_norm %.4f | lr %.3e | %8.1f ms | %9.0f tok/s"
                  % (step, t["steps"], loss, gnorm, lr, dt * 1e3, toks / dt), flush=True)
        if self.metrics:
            pb = self.pdtype.itemsize if hasattr(self.pdtype, "itemsize") else (8 if self.pdtype == torch.float64 else 4)
            mem = 4 * self.n_elems * pb + ctx.leaked_bytes()
            self.metrics.write({"step": step, "loss": diag.jnum(loss), "grad_norm": diag.jnum(gnorm), "lr": lr,
                                "ms": round(dt * 1e3, 3), "tok_per_s": round(toks / dt, 1), "tokens": toks,
                                "mem_bytes": mem, "rss_bytes": rss_bytes(), "peak_mem_bytes": mem,
                                "data_digest": "%016x" % digest, "world_size": self.world.size})
        self.beat("optimizer", "step")
        return EXIT_OK

    def ddp_contract(self, step):
        """What DDP's mode promises about unused parameters. default: every parameter's gradient
        must arrive — a bucket holding one that did not is never launched, so this rank waits for
        it (wait_for_unready_bucket) while the other ranks wait in that bucket's allreduce: a
        hang, ended by --comm-timeout (exit 4) or the runner's watchdog. static_graph: the set of
        parameters that received a gradient must be the same on every rank and at every step
        (recorded at step 1): otherwise exit 5 naming them. find_unused: DDP marks them ready."""
        mode = self.cfg["train"]["ddp_mode"]
        missing = [n for n in self.names if n not in self.arrived]
        self.bucket_record(step, mode, missing)
        if mode == "default" and missing:
            print("[DDP] step=%d rank=%d bucket never launched: missing %s" % (step, self.rank, ", ".join(missing)),
                  flush=True)
            self.enter("comm", "comm_wait", step)
            wait_for_unready_bucket(self.world.comm_timeout)
            sys.stderr.write("[COMM-TIMEOUT] rank %d: the gradient reduction of step %d (a bucket holding %s) not "
                             "complete after %g s\n" % (self.rank, step, missing[0], self.world.comm_timeout))
            return EXIT_COMM
        if mode == "static_graph":
            sets = self.world.gather(sorted(self.arrived))
            if step == 1:
                self.static_set = set(sets[0])
            lines = []
            for n in self.names:
                have = [r for r, st in enumerate(sets) if n in st]
                if 0 < len(have) < len(sets):
                    lines.append("[DDP] static_graph: step %d: %s received a gradient on rank(s) %s but not on "
                                 "rank(s) %s" % (step, n, ",".join(map(str, have)),
                                                 ",".join(str(r) for r in range(len(sets)) if r not in have)))
                elif step > 1 and (n in self.static_set) != bool(have):
                    lines.append("[DDP] static_graph: step %d: %s %s a gradient, unlike step 1" %
                                 (step, n, "received" if have else "did not receive"))
            if lines:
                for ln in lines:
                    print(ln, flush=True)
                    sys.stderr.write(ln + "\n")
                return 5
        return EXIT_OK

    def bucket_record(self, step, mode, missing):
        """OUT/buckets.jsonl (docs/ddp.md), simplified: torch DDP's bucket layout is internal, so
        one record per step and rank stands for the whole reduction ("bucket": 0, every parameter
        in reverse order): launched unless a gradient is missing in default mode, and the
        parameters whose gradient never arrived (find_unused / static_graph: marked ready by DDP,
        still named). Written before any wait."""
        if self.buckets is None:
            self.buckets = diag.Jsonl(os.path.join(self.out, "buckets.jsonl"))
        pb = 8 if self.pdtype == torch.float64 else 4
        launched = not (mode == "default" and missing)
        self.buckets.write({"step": step, "rank": self.rank, "bucket": 0, "elements": self.n_elems,
                            "bytes": self.n_elems * pb, "dtype": "f64" if pb == 8 else "f32",
                            "params": list(reversed(self.names)), "ready_ms": None, "launched": launched,
                            "coll_seq": None, "launch_ms": None, "complete_ms": None, "missing": missing})

    def adamw(self, grads, gnorm, lr, step):
        t = self.cfg["train"]
        b1, b2, eps, wd, clip = t["beta1"], t["beta2"], t["adam_eps"], t["weight_decay"], t["grad_clip"]
        bc1, bc2 = 1.0 - b1 ** step, 1.0 - b2 ** step
        cs = clip / gnorm if clip > 0 and gnorm > clip else None
        with torch.no_grad():
            for n, p in self.model.named_parameters():
                g = grads[n]
                if cs is not None:
                    g = g * cs
                gd = g.double()
                md = b1 * self.m[n].double() + (1 - b1) * gd
                vd = b2 * self.v[n].double() + (1 - b2) * gd * gd
                self.m[n].copy_(md)
                self.v[n].copy_(vd)
                pd = p.double()
                w = wd if decays(n, p) else 0.0
                p.copy_(pd - lr * ((md / bc1) / (torch.sqrt(vd / bc2) + eps) + w * pd))

    # ---- replays --------------------------------------------------------------------------------------------
    def localise(self, step, pos):
        """The step again (same data, weights not updated), without DDP, every named activation
        checked in forward and the blocks' output gradients in backward."""
        self.data.set_position(pos)
        chk = diag.FiniteCheck(self.T)
        self.ctx.check = chk
        for p in self.model.parameters():
            p.grad = None
        for k in range(self.accum):
            inp, tgt = self.tensors(*self.data.next())
            try:
                logits, losses = self.forward(self.model, inp, tgt)
                loss = losses.sum() / (self.B * self.T * self.accum)
                if chk.found is None and not bool(torch.isfinite(loss)):
                    chk.found = {"phase": "forward", "tensor": "loss", "layer": -1, "branch": "", "op": "xent_fwd_bwd",
                                 "position": {"b": 0, "t": 0, "col": 0}, "value": float(loss)}
                if chk.found is None:
                    loss.backward()
            except diag.AnomalyFound:
                pass
            if chk.found is not None:
                diag.write_anomaly(self.out, self.rank, step, k, chk.found)
                self.ctx.check = None
                return
        self.ctx.check = None
        diag.write_anomaly(self.out, self.rank, step, -1, {"phase": "unknown", "tensor": "unlocalised (replay stayed "
                           "finite)", "layer": -1, "branch": "", "op": "", "position": {"b": 0, "t": 0, "col": 0},
                           "value": 0.0})

    def dump(self, pos):
        """--dump-step: step 1's first micro-batch replayed alone: inputs, targets, logits, loss,
        --dump-acts: acts.*; grads.<name>: alone, the replay's own gradients; under data parallel
        the gradients this step's optimizer consumes (DDP's all-reduced mean over every rank and
        micro-batch, before clipping), not a replay with a scale of its own (as nsa-train,
        docs/diagnostics.md "--dump-step")"""
        data = DataSource(self.cfg, self.world.rank if self.world.dist else 0, self.world.size)
        data.set_position(pos)
        inp_np, tgt_np = data.next()
        inp, tgt = self.tensors(inp_np, tgt_np)
        saved = {n: (p.grad.clone() if p.grad is not None else None) for n, p in self.model.named_parameters()}
        for p in self.model.parameters():
            p.grad = None
        self.ctx.acts = {} if self.a.dump_acts else None
        trace, self.trace_off = self.trace, None
        if trace is not None:
            trace.micro = 1    # not traced
        logits, losses = self.forward(self.model, inp, tgt)
        acts = self.ctx.acts
        self.ctx.acts = None
        if self.faults.clobber_layer >= 0:
            self.clobber()
        N = self.B * self.T
        loss = float(losses.detach().double().sum()) / N
        if self.world.dist:
            grads = {n: (saved[n] if saved[n] is not None else torch.zeros_like(p))
                     for n, p in self.model.named_parameters()}
            loss = self.world.mean(loss, self.device)
        else:
            (losses.sum() / (N * self.world.size)).backward()
            grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p)) for n, p in self.model.named_parameters()}
        if self.rank == 0:
            fdt = torch.float64 if self.pdtype == torch.float64 else torch.float32
            globs = self.a.dump_tensors.split(",") if self.a.dump_tensors is not None else None

            def wanted(name):   # --dump-tensors: a tensor left out is not copied from the device
                return globs is None or any(fnmatch.fnmatchcase(name, g) for g in globs)
            out = {"inputs": torch.from_numpy(inp_np).to(torch.int32), "targets": torch.from_numpy(tgt_np).to(torch.int32)}
            if wanted("logits"):
                out["logits"] = logits.detach().to(fdt).cpu()
            out["loss"] = torch.tensor(loss, dtype=torch.float64)
            for n, g in grads.items():
                if wanted("grads." + n):
                    out["grads." + n] = g.detach().to(fdt).cpu()
            for n, v in (acts or {}).items():
                if wanted(n):
                    out[n] = v.detach().cpu() if v.dtype == torch.int32 else v.detach().to(fdt).cpu()
            import json
            stio.write(self.a.dump_step, out, {"config": json.dumps(self.cfg, sort_keys=True, indent=2),
                                               "backend": self.cfg["train"]["backend"],
                                               "precision": self.cfg["train"]["precision"], "loss": "%.17g" % loss,
                                               "trainer": "nsa-torch-train"})
        for n, p in self.model.named_parameters():
            p.grad = saved[n]


def wait_for_unready_bucket(timeout):
    """Where a rank whose gradient never arrived waits (as DDP's reducer would for the bucket)."""
    end = time.time() + timeout
    while time.time() < end:
        time.sleep(min(0.5, max(0.0, end - time.time())))


class _nullctx:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False
