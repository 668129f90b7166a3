"""nsa_torch/faults.py — the fault table (the names and argument syntax of
`nsa-train --list-faults`), the parser, and the faults that act outside the model
(fault_hang, fault_crash). The model-level effects live where they act (model.py,
attention.py, train.py) and read the Faults object. No torch import: --list-faults and
--protocol-info answer before torch is loaded."""
import sys
import time


class FaultSpec:
    def __init__(self, name, syntax, once, breaks, family, no_effect):
        self.name, self.syntax, self.once = name, syntax, once
        self.breaks, self.family, self.no_effect = breaks, family, no_effect


FAULTS = [
    FaultSpec("gate_zero_init", "gate_zero_init", True,
              "every layer's gate.fc2 weight and bias start at exactly 0, so at step 1 every gate output is exactly "
              "1/3 (softmax) or 0.5 (sigmoid): the branches are mixed uniformly whatever the token",
              "gate-init checks (--gate-stats at step 1: fc2 std vs Xavier gain 0.1, outputs not uniform)",
              "force_branch set (the gate is bypassed); --init-weights (the file's weights are used as given)"),
    FaultSpec("hang", "hang=RANK:STEP:PHASE", True,
              "rank RANK, on entering PHASE (data|forward|backward|optimizer|comm) of step STEP, writes the phase to "
              "the heartbeat, then sleeps forever in fault_hang(): the heartbeat stops (comm: the wait for the "
              "step's gradient reduction at the end of backward)",
              "watchdog -> HANG verdict (heartbeat phase/step, SIGUSR1 stack dump naming fault_hang)",
              "RANK is not this process's rank; STEP beyond the run; PHASE comm without data parallel"),
    FaultSpec("crash", "crash=RANK:STEP", True,
              "rank RANK dies by SIGSEGV (a NULL write in fault_crash() through ctypes.memset) at the start of step STEP's "
              "forward",
              "CRASH verdict (killed by signal 11, faulthandler stack naming fault_crash)",
              "RANK is not this process's --rank; STEP beyond the run"),
    FaultSpec("drop_grad", "drop_grad=PARAM", False,
              "PARAM is cut off from the loss (the forward uses it detached): it never gets a gradient, no "
              "accumulate-grad hook fires for it, its gradient stays zero (it only decays)",
              "DDP one-step gradient-arrival trace (--trace-grads: missing != expected_missing)",
              "never (an unknown PARAM is a usage error); repeatable, one parameter each"),
    FaultSpec("divergent_unused", "divergent_unused=RANK[:PARAM]", True,
              "on rank RANK only, PARAM is cut off from the loss (drop_grad's mechanism on that rank alone). PARAM "
              "defaults to blocks.<n_layers/2>.attn.gate.fc2.weight (with force_branch, whose gate is bypassed: "
              "blocks.<n_layers/2>.attn.o_proj.weight)",
              "DDP one-step: default mode -> HANG (the other ranks wait in the bucket's allreduce: exit 4 after "
              "--comm-timeout, or the watchdog); find_unused -> runs to the end, its numbers FAIL against one "
              "rank naming PARAM as the only differing gradient; static_graph -> a DDP error",
              "RANK is not a rank of the run; an unknown PARAM is a usage error"),
    FaultSpec("nan_at_seqlen", "nan_at_seqlen=K", True,
              "when train.seq_len T is a multiple of K, layer 0's selection-branch output becomes NaN at position "
              "T-1 of sequence 0: anomaly exit 3 naming blocks.0.attn.sel.o, op sel_attn_fwd, t = T-1",
              "sequence-length NaN sweep (exit 3 + anomaly.json at lengths that are multiples of K only)",
              "T not a multiple of K. With force_branch = cmp or win the forced branch's output is poisoned instead "
              "(blocks.0.attn.cmp.o / cmp_attn_fwd, blocks.0.attn.win.o / win_attn_fwd)"),
    FaultSpec("prefill_state_leak", "prefill_state_leak", True,
              "sequential prefill: from the second step this process runs, the compressed K/V caches are kept from "
              "the previous step (stale keys and values in the compressed branch and in selection), and every such "
              "step keeps one more copy of the caches alive (memory grows per step)",
              "step-5 prefill (sequential vs batched loss parity from step 2, no per-step memory growth)",
              "train.prefill = batched"),
    FaultSpec("gc_recompute_mismatch", "gc_recompute_mismatch=LAYER", True,
              "when LAYER is checkpointed, its recomputation in backward runs on its input perturbed by a relative "
              "+-1e-3 (+-2^-6 in bf16; alternating sign per element), so the recomputed activations differ from the "
              "forward's: gradients change but stay finite",
              "GC bisection (gradients with checkpointing vs without; bisects down to LAYER)",
              "LAYER not in train.checkpoint_layers"),
    FaultSpec("clobber_activation", "clobber_activation=LAYER", True,
              "after the forward and before its backward, LAYER's saved SwiGLU hidden (the input autograd saved for "
              "mlp.down_proj) is overwritten in place with its gate pre-activation: finite but wrong gradients",
              "GC bisection (checkpointing LAYER heals it: the recompute rewrites the activation)",
              "LAYER in train.checkpoint_layers (its backward recomputes the activation)"),
]
NAMES = [f.name for f in FAULTS]
PHASES = ["data", "forward", "backward", "optimizer", "comm"]


class FaultError(Exception):
    pass


def _int(s, lo, hi):
    if not s or not (s.isdigit() or (s[0] == "-" and s[1:].isdigit())):
        return None
    v = int(s)
    return v if lo <= v <= hi else None


def _rank_step(parts):
    """RANK and STEP of hang=RANK:STEP:PHASE and crash=RANK:STEP, checked as nsa-train does."""
    r, s = _int(parts[0], 0, 1 << 20), _int(parts[1], 1, 1 << 62)
    if r is None:
        raise FaultError("RANK '%s' is not a non-negative integer" % parts[0])
    if s is None:
        raise FaultError("STEP '%s' is not a positive integer" % parts[1])
    return r, s


class Faults:
    """The active faults (all off by default)."""

    def __init__(self):
        self.given = set()
        self.specs = []
        self.gate_zero_init = False
        self.hang = None          # (rank, step, phase)
        self.crash = None         # (rank, step)
        self.drop = []            # parameter names
        self.divergent = None     # (rank, name or "")
        self.nan_seqlen = 0
        self.prefill_leak = False
        self.gc_mismatch_layer = -1
        self.clobber_layer = -1
        self.rank = 0

    @property
    def active(self):
        return bool(self.specs)

    def parse(self, spec):
        name, eq, arg = spec.partition("=")
        arg = arg if eq else None
        fs = next((f for f in FAULTS if f.name == name), None)
        if fs is None:
            raise FaultError("--fault %s: unknown fault (known: %s; see --list-faults)"
                             % (spec, ", ".join(f.syntax for f in FAULTS)))
        if fs.once and name in self.given:
            raise FaultError("--fault %s: fault %s given twice" % (spec, name))
        try:
            self._parse_one(name, arg)
        except FaultError as e:
            raise FaultError("--fault %s: %s (syntax: %s)" % (spec, e, fs.syntax))
        self.given.add(name)
        self.specs.append(spec)

    def _parse_one(self, name, arg):
        def need(syntax):
            if not arg:
                raise FaultError("needs an argument: " + syntax)

        def no_arg():
            if arg is not None:
                raise FaultError("%s takes no argument" % name)

        if name == "gate_zero_init":
            no_arg()
            self.gate_zero_init = True
        elif name == "prefill_state_leak":
            no_arg()
            self.prefill_leak = True
        elif name == "hang":
            need("hang=RANK:STEP:PHASE")
            parts = arg.split(":", 2)
            if len(parts) != 3:
                raise FaultError("expected RANK:STEP:PHASE")
            r, s = _rank_step(parts)
            if parts[2] not in PHASES:
                raise FaultError("PHASE '%s' is not one of data, forward, backward, optimizer, comm" % parts[2])
            self.hang = (r, s, parts[2])
        elif name == "crash":
            need("crash=RANK:STEP")
            parts = arg.split(":", 1)
            if len(parts) != 2:
                raise FaultError("expected RANK:STEP")
            self.crash = _rank_step(parts)
        elif name == "drop_grad":
            need("drop_grad=PARAM")
            if arg in self.drop:
                raise FaultError("given twice")
            if len(self.drop) == 16:
                raise FaultError("at most 16 drop_grad faults")
            self.drop.append(arg)
        elif name == "divergent_unused":
            need("divergent_unused=RANK[:PARAM]")
            r_s, colon, p = arg.partition(":")
            r = _int(r_s, 0, 1 << 20)
            if r is None:
                raise FaultError("RANK '%s' is not a non-negative integer" % r_s)
            if colon and not p:
                raise FaultError("PARAM after ':' is empty")
            self.divergent = (r, p)
        elif name == "nan_at_seqlen":
            need("nan_at_seqlen=K")
            k = _int(arg, 1, 1 << 30)
            if k is None:
                raise FaultError("K '%s' is not a positive integer" % arg)
            self.nan_seqlen = k
        elif name in ("gc_recompute_mismatch", "clobber_activation"):
            need(name + "=LAYER")
            v = _int(arg, 0, 1 << 20)
            if v is None:
                raise FaultError("LAYER '%s' is not a non-negative integer" % arg)
            if name == "gc_recompute_mismatch":
                self.gc_mismatch_layer = v
            else:
                self.clobber_layer = v

    def check_config(self, cfg):
        L = cfg["model"]["n_layers"]
        if self.gc_mismatch_layer >= L:
            raise FaultError("--fault gc_recompute_mismatch=%d: layer out of range (model.n_layers = %d)"
                             % (self.gc_mismatch_layer, L))
        if self.clobber_layer >= L:
            raise FaultError("--fault clobber_activation=%d: layer out of range (model.n_layers = %d)"
                             % (self.clobber_layer, L))

    def on_phase(self, phase, step):
        """Entering a phase of a step (after the heartbeat recorded it): crash / hang."""
        if self.crash and phase == "forward" and step == self.crash[1] and self.rank == self.crash[0]:
            sys.stderr.write("nsa-torch-train: [FAULT] crash: rank %d step %d: SIGSEGV now\n" % (self.rank, step))
            sys.stderr.flush()
            fault_crash()
        if self.hang and phase == self.hang[2] and step == self.hang[1] and self.rank == self.hang[0]:
            sys.stderr.write("nsa-torch-train: [FAULT] hang: rank %d step %d phase %s: sleeping forever\n"
                             % (self.rank, step, phase))
            sys.stderr.flush()
            fault_hang()


def fault_hang():
    """Sleeps forever: a stack dump of a hung rank names this function."""
    while True:
        time.sleep(3600)


def fault_crash():
    """Writes to address 0 through libc's memset (a foreign function: no Python frame above this
    one): SIGSEGV, and faulthandler's dump stops in this function."""
    import ctypes
    ctypes.memset(0, 0x5E, 1)


def list_faults(out):
    out.write("# nsa-torch-train faults (--fault NAME[=ARG], repeatable; never active unless asked)\n")
    for s in FAULTS:
        out.write("%-22s %s\n" % (s.name, s.syntax))
        out.write("    breaks:    %s\n" % s.breaks)
        out.write("    caught by: %s\n" % s.family)
        out.write("    no effect: %s\n" % s.no_effect)
