"""nsa_torch/diag.py — what the trainer emits for the runner (docs/diagnostics.md,
docs/trainer-protocol.md): the heartbeat file, SIGUSR1 / crash stack dumps
(faulthandler), the gradient-arrival trace, gate statistics, anomaly.json and JSONL
records (one os.write per line on an O_APPEND descriptor)."""
import faulthandler
import json
import math
import os
import signal
import socket
import threading
import time

EXIT_STALL_DUMP = 138


def jnum(x):
    """a JSON number, or the string "nan" / "inf" / "-inf" (as nsa-train writes them)"""
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


class Jsonl:
    """An append-only JSONL artifact: one os.write per record."""

    def __init__(self, path, truncate=False):
        self.path = path
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if truncate else 0)
        self.fd = os.open(path, flags, 0o644)

    def write(self, obj):
        line = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        done = 0
        while done < len(line):
            done += os.write(self.fd, line[done:])

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Heartbeat:
    """--heartbeat FILE: one JSON line, replaced atomically (FILE.tmp, rename) at every phase
    change, at least once per layer of forward and backward, and at exit; seq strictly
    increases. `throttle=True` beats (sequential prefill's per-token layer calls) are written
    at most every 0.2 s."""

    def __init__(self, path, rank):
        self.path, self.rank, self.seq = path, rank, 0
        self.pid, self.host = os.getpid(), socket.gethostname()
        self.state = {"step": 0, "phase": "init", "layer": -1, "op": ""}
        self.last = 0.0
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)

    def beat(self, step=None, phase=None, layer=None, op=None, throttle=False, exited=False, exit_code=0):
        now = time.time()
        if throttle and now - self.last < 0.2:
            return
        s = self.state
        if step is not None:
            s["step"] = step
        if phase is not None:
            s["phase"] = phase
        if layer is not None:
            s["layer"] = layer
        if op is not None:
            s["op"] = op
        self.seq += 1
        rec = {"seq": self.seq, "pid": self.pid, "rank": self.rank, "host": self.host, "step": s["step"],
               "phase": s["phase"], "layer": s["layer"], "op": s["op"], "exited": exited, "exit_code": exit_code,
               "time": round(now, 3)}
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "w") as f:
                f.write(json.dumps(rec, separators=(", ", ": ")) + "\n")
            os.replace(tmp, self.path)
        except OSError:
            pass
        self.last = now


class StackDumps:
    """SIGUSR1 -> faulthandler.dump_traceback(all_threads=True) appended to the stack file,
    then exit 138. The dump is written by faulthandler's C-level handler (it works while
    the main thread is blocked in C, e.g. in a collective); the exit is a Python handler
    (chained), with a watcher thread as fallback for a main thread that never returns to
    Python. Crashes (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) -> faulthandler.enable."""

    def __init__(self, path, rank):
        self.path = path
        if path:
            d = os.path.dirname(path)
            if d:
                os.makedirs(d, exist_ok=True)
            self.f = open(path, "a")
        else:
            import sys
            self.f = sys.stderr
        self.rank = rank
        signal.signal(signal.SIGUSR1, self._on_usr1)
        faulthandler.register(signal.SIGUSR1, file=self.f, all_threads=True, chain=True)
        faulthandler.enable(file=self.f, all_threads=True)
        if path:
            self.size0 = os.fstat(self.f.fileno()).st_size
            threading.Thread(target=self._watch, name="nsa-stack-watch", daemon=True).start()

    def _on_usr1(self, signum, frame):
        self._exit()

    def _exit(self):
        try:
            self.f.write("--- end of stall dump (rank %d pid %d): exiting with status 138 ---\n"
                         % (self.rank, os.getpid()))
            self.f.flush()
        except Exception:
            pass
        os._exit(EXIT_STALL_DUMP)

    def _watch(self):
        while True:
            time.sleep(0.25)
            try:
                if os.fstat(self.f.fileno()).st_size > self.size0:
                    time.sleep(0.75)     # the main thread's Python handler normally exits first
                    self._exit()
            except OSError:
                return


class GradTrace:
    """--trace-grads: the order of the first accumulate-grad hook of each parameter in a
    step's first micro-batch, the union over micro-batches, missing / expected_missing /
    nonfinite / zero (docs/diagnostics.md)."""

    def __init__(self, out_dir, rank, names, expected):
        self.rank, self.names, self.expected = rank, names, expected
        self.file = Jsonl(os.path.join(out_dir, "grad_trace.jsonl"))
        self.order, self.arrived, self.micro = [], set(), 0

    def begin_step(self, step):
        self.step, self.order, self.arrived = step, [], set()

    def begin_micro(self, k):
        self.micro = k

    def ready(self, name):
        if self.micro == 0 and name not in self.arrived:
            self.order.append(name)
        self.arrived.add(name)

    def end_step(self, params):
        import torch
        nonfinite, zero = [], []
        for name, p in params:
            g = p.grad
            if g is None:
                continue
            if not bool(torch.isfinite(g).all()):
                nonfinite.append(name)
            elif name in self.arrived and not bool(g.any()):
                zero.append(name)
        missing = [n for n in self.names if n not in self.arrived]
        rec = {"step": self.step, "rank": self.rank, "n_params": len(self.names), "arrived": len(self.arrived),
               "missing": missing, "expected_missing": [n for n in self.names if n in self.expected],
               "nonfinite": nonfinite, "zero": zero, "order": self.order}
        self.file.write(rec)
        print("[GRAD-TRACE] step=%d rank=%d arrived=%d missing=%d" % (self.step, self.rank, len(self.arrived),
                                                                      len(missing)))
        for n in missing:
            print("[GRAD-TRACE] step=%d rank=%d missing %s" % (self.step, self.rank, n))
        for n in nonfinite:
            print("[GRAD-TRACE] step=%d rank=%d nonfinite %s" % (self.step, self.rank, n), flush=True)


def _mean_std(x):
    """x: float64 numpy array. Population std; all equal -> std exactly 0."""
    import numpy as np
    if x.size == 0:
        return 0.0, 0.0, math.inf, -math.inf
    lo, hi = float(x.min()), float(x.max())
    if np.isfinite(x).all() and lo == hi:
        return lo, 0.0, lo, hi
    mu = float(x.sum()) / x.size
    return mu, math.sqrt(float(((x - mu) ** 2).sum()) / x.size), lo, hi


class GateStats:
    """--gate-stats: per step, from the first micro-batch's forward, per layer: gate.fc2
    weight/bias mean and std, gate outputs per branch mean/std/min/max."""

    def __init__(self, out_dir, rank, cfg):
        self.rank, self.cfg = rank, cfg
        self.file = Jsonl(os.path.join(out_dir, "gate_stats.jsonl"))
        self.armed, self.layers = False, {}

    def arm(self):
        self.armed, self.layers = True, {}

    def layer(self, L, gate, pw):
        if not self.armed or gate is None:
            return
        pre = "blocks.%d.attn.gate.fc2." % L
        w = pw[pre + "weight"].detach().double().cpu().numpy().ravel()
        b = pw[pre + "bias"].detach().double().cpu().numpy().ravel()
        out = gate.detach().double().cpu().numpy().reshape(-1, 3)
        wm, ws, _, _ = _mean_std(w)
        bm, bs, _, _ = _mean_std(b)
        st = [_mean_std(out[:, k]) for k in range(3)]
        self.layers[L] = {"layer": L, "fc2_weight_mean": jnum(wm), "fc2_weight_std": jnum(ws),
                          "fc2_bias_mean": jnum(bm), "fc2_bias_std": jnum(bs),
                          "out_mean": [jnum(s[0]) for s in st], "out_std": [jnum(s[1]) for s in st],
                          "out_min": [jnum(s[2]) for s in st], "out_max": [jnum(s[3]) for s in st]}

    def finish_step(self, step):
        if not self.armed:
            return
        self.armed = False
        gated = self.cfg["nsa"]["force_branch"] == "none"
        self.file.write({"step": step, "rank": self.rank, "gate_act": self.cfg["nsa"]["gate_act"], "gated": gated,
                         "layers": [self.layers[L] for L in sorted(self.layers)] if gated else []})


class AnomalyFound(Exception):
    pass


class FiniteCheck:
    """Anomaly localisation (the replay of a non-finite step): every named activation of
    the forward, and the gradients flowing into each block's output in backward, are
    scanned; the first non-finite value is kept with its name, layer, branch, op and
    position (b, t, col of a [B, T, ...] tensor)."""

    def __init__(self, T):
        self.T, self.found = T, None

    def __call__(self, name, t, layer, branch, op, phase="forward"):
        if self.found is not None:
            return
        import torch
        bad = ~torch.isfinite(t.detach())
        if not bool(bad.any()):
            return
        flat = bad.reshape(-1)
        i = int(torch.nonzero(flat, as_tuple=False)[0, 0])
        width = 1
        for s in t.shape[2:]:
            width *= int(s)
        row = i // width
        T = t.shape[1] if t.dim() > 1 else 1
        v = float(t.detach().reshape(-1)[i])
        self.found = {"phase": phase, "tensor": name, "layer": layer, "branch": branch, "op": op,
                      "position": {"b": row // T, "t": row % T, "col": i % width}, "value": v}
        if phase == "forward":
            raise AnomalyFound()


def write_anomaly(out_dir, rank, step, micro, a):
    sys_line = ("[ANOMALY] step=%d micro=%d phase=%s tensor=%s layer=%d branch=%s op=%s b=%d t=%d col=%d value=%g"
                % (step, micro, a["phase"], a["tensor"], a["layer"], a["branch"] or "-", a["op"],
                   a["position"]["b"], a["position"]["t"], a["position"]["col"], a["value"]))
    import sys
    sys.stderr.write(sys_line + "\n")
    name = "anomaly.json" if rank == 0 else "anomaly.rank%d.json" % rank
    rec = {"step": step, "micro_batch": micro, "phase": a["phase"], "tensor": a["tensor"], "layer": a["layer"],
           "branch": a["branch"], "op": a["op"], "position": a["position"], "value": "%g" % a["value"]}
    with open(os.path.join(out_dir, name), "w") as f:
        f.write(json.dumps(rec) + "\n")
