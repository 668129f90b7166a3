"""nsa_torch/cli.py — the command line of nsa-torch-train (docs/trainer-protocol.md,
version 2): flags, the handshake answers (--protocol-info and --list-faults before torch is
imported), --print-env, and the run with its exit codes: 0 ok, 1 runtime failure, 2 usage
or invalid config, 3 non-finite value (anomaly.json), 4 a collective timed out
(--comm-timeout), 6 an artifact could not be written, 138 after SIGUSR1's stack dump."""
import os
import sys

from nsa_torch import faults as faultmod
from nsa_torch import protocol

USAGE = """usage: nsa-torch-train --config FILE [options]

The PyTorch NSA trainer of nsa-harness (adapters/torch/README.md): the model of
docs/design.md, trained with autograd and AdamW; speaks the trainer protocol version 2.

  --config FILE         the config (JSON; the runner passes the resolved one)
  --set KEY=VALUE       override a config value (VALUE is JSON, else a string); repeatable
  --steps N, --backend NAME   shorthands for --set train.steps=N / train.backend=NAME
  --out DIR             metrics.jsonl and the other artifacts go here (default .)
  --rank R              this process's rank without a transport (default 0)
  --transport T         none (default), gloo (CPU), nccl (GPU): torch.distributed, world from
                        RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
  --bootstrap env       how the world is joined (env only)
  --comm-timeout S      seconds a collective may take (default $NSA_COMM_TIMEOUT or 300): exit 4
  --rdzv-timeout S      seconds the rendezvous waits for every rank (default $NSA_RDZV_TIMEOUT, else
                        the larger of --comm-timeout and 60)
  --init-weights FILE   start from these weights (safetensors, every parameter by name, F32/F64)
  --heartbeat FILE      liveness file (one JSON line, replaced atomically)
  --stack-file FILE     where SIGUSR1 / crash stack dumps go (faulthandler); SIGUSR1 exits 138
  --log-file FILE       stdout and stderr appended to FILE
  --trace-grads         OUT/grad_trace.jsonl        --gate-stats   OUT/gate_stats.jsonl
  --dump-step FILE      step 1's batch, logits, loss and gradients (safetensors)
  --dump-acts           with --dump-step: the activations
  --dump-tensors GLOBS  with --dump-step: only the tensors matching one of these comma-separated
                        globs (e.g. 'grads.*', 'logits'); inputs, targets and loss always
  --fault NAME[=ARG]    inject a fault (repeatable); --list-faults describes them
  --list-faults         list the faults, exit      --protocol-info   the handshake JSON, exit
  --print-env           environment facts as JSON, exit
  --threads N           torch CPU threads          --quiet           no per-step lines
every path flag replaces %r by the rank."""

VALUE_FLAGS = {"--config", "--set", "--steps", "--backend", "--out", "--rank", "--transport", "--bootstrap",
               "--comm-timeout", "--rdzv-timeout", "--init-weights", "--heartbeat", "--stack-file", "--log-file",
               "--dump-step", "--dump-tensors", "--fault", "--threads"}
BOOL_FLAGS = {"--trace-grads", "--gate-stats", "--dump-acts", "--print-env", "--quiet"}


class Args:
    def __init__(self):
        self.config = None
        self.sets = []
        self.out = "."
        self.rank = 0
        self.transport = "none"
        self.bootstrap = "auto"
        self.comm_timeout = None
        self.rdzv_timeout = None
        self.init_weights = self.heartbeat = self.stack_file = self.log_file = self.dump_step = None
        self.dump_tensors = None
        self.trace_grads = self.gate_stats = self.dump_acts = self.print_env = self.quiet = False
        self.threads = 0


def err(msg, code=2):
    sys.stderr.write("nsa-torch-train: %s\n" % msg)
    return code


def parse(argv, A, faults):
    """Returns None to go on, or an exit code."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--help", "-h"):
            print(USAGE)
            return 0
        if a == "--protocol-info":
            protocol.print_info(sys.stdout)
            return 0
        if a == "--list-faults":
            faultmod.list_faults(sys.stdout)
            return 0
        if a in BOOL_FLAGS:
            setattr(A, a[2:].replace("-", "_"), True)
            i += 1
            continue
        if a not in VALUE_FLAGS:
            return err("unknown option '%s' (see --help)" % a)
        if i + 1 >= len(argv):
            return err("%s needs a value (see --help)" % a)
        v = argv[i + 1]
        i += 2
        if a == "--set":
            A.sets.append(v)
        elif a in ("--steps", "--backend"):
            A.sets.append("train.%s=%s" % (a[2:], v))
        elif a == "--fault":
            try:
                faults.parse(v)
            except faultmod.FaultError as e:
                return err(str(e))
        elif a in ("--rank", "--threads"):
            if not v.isdigit() or int(v) > 1000000000:
                return err("%s %s: expected a non-negative integer" % (a, v))
            setattr(A, a[2:], int(v))
        elif a == "--transport":
            if v not in ("none", "gloo", "nccl"):
                return err("--transport %s: expected none, gloo or nccl" % v)
            A.transport = v
        elif a == "--bootstrap":
            if v not in ("auto", "env"):
                return err("--bootstrap %s: expected env (this trainer joins a world from the env launcher's "
                           "variables)" % v)
            A.bootstrap = v
        elif a in ("--comm-timeout", "--rdzv-timeout"):
            try:
                t = float(v)
            except ValueError:
                t = -1
            if not (0 < t <= 1e7):
                return err("%s %s: expected a number of seconds > 0" % (a, v))
            if a == "--comm-timeout":
                A.comm_timeout = t
            else:
                A.rdzv_timeout = t
        else:
            setattr(A, a[2:].replace("-", "_"), v)
    return None


def subst(path, rank):
    return path.replace("%r", str(rank)) if path else path


def redirect_log(path):
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)


def main(argv):
    A = Args()
    faults = faultmod.Faults()
    rc = parse(argv, A, faults)
    if rc is not None:
        return rc
    if A.comm_timeout is None:
        e = os.environ.get("NSA_COMM_TIMEOUT")
        try:
            A.comm_timeout = float(e) if e else 300.0
        except ValueError:
            return err("NSA_COMM_TIMEOUT=%s: expected a number of seconds > 0" % e)
        if not A.comm_timeout > 0:
            return err("NSA_COMM_TIMEOUT=%s: expected a number of seconds > 0" % e)
    if A.dump_acts and not A.dump_step:
        return err("--dump-acts adds the activations to the step dump: it needs --dump-step FILE")
    if A.dump_tensors is not None and not A.dump_step:
        return err("--dump-tensors %s selects the step dump's tensors: it needs --dump-step FILE" % A.dump_tensors)
    if A.dump_tensors is not None and "" in A.dump_tensors.split(","):
        return err("--dump-tensors '%s': expected comma-separated globs of tensor names, none empty "
                   "(e.g. 'grads.*' or 'logits,grads.*')" % A.dump_tensors)
    from nsa_torch import config as cfgmod
    from nsa_torch.ddp import World, WorldError
    try:
        world = World(A.transport, A.bootstrap, A.comm_timeout, A.rank)
    except WorldError as e:
        return err(str(e))
    rank = world.rank
    for k in ("out", "heartbeat", "stack_file", "log_file", "dump_step", "init_weights"):
        setattr(A, k, subst(getattr(A, k), rank))
    if A.log_file:
        try:
            redirect_log(A.log_file)
        except OSError as e:
            return err("--log-file %s: %s" % (A.log_file, e.strerror))
    from nsa_torch import diag
    try:
        diag.StackDumps(A.stack_file, rank)
    except OSError as e:
        return err("--stack-file %s: %s" % (A.stack_file, e.strerror), 1)
    if A.print_env and not A.config:
        from nsa_torch import envinfo
        import json
        print(json.dumps(envinfo.info(), indent=2))
        return 0
    if not A.config:
        return err("--config FILE is required (see --help)")
    try:
        cfg = cfgmod.load(A.config, A.sets)
    except cfgmod.ConfigError as e:
        return err(str(e))
    if A.print_env:
        from nsa_torch import envinfo
        import json
        print(json.dumps(envinfo.info(cfg), indent=2))
        return 0
    return run(A, cfg, faults, world)


def run(A, cfg, faults, world):
    import torch
    from nsa_torch import train
    from nsa_torch.data import DataError
    if A.threads:
        torch.set_num_threads(A.threads)
    elif world.size > 1 and not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world.size))
    tr = None
    rc = 1
    try:
        tr = train.Trainer(A, cfg, faults, world)
        if world.dist:
            tr.beat_init()
            if A.rdzv_timeout is None and os.environ.get("NSA_RDZV_TIMEOUT"):
                try:
                    A.rdzv_timeout = float(os.environ["NSA_RDZV_TIMEOUT"])
                except ValueError:
                    pass
            world.join(A.rdzv_timeout)
        tr.setup()
        rc = tr.run()
    except (train.UsageError, faultmod.FaultError, DataError) as e:
        rc = err(str(e))
    except RuntimeError as e:
        msg = str(e)
        if world.dist and ("timed out" in msg.lower() or "timeout" in msg.lower()):
            sys.stderr.write("[COMM-TIMEOUT] rank %d: a collective did not complete within %g s: %s\n"
                             % (world.rank, A.comm_timeout, msg.splitlines()[0] if msg else ""))
            rc = 4
        elif world.dist and ("connection" in msg.lower() or "gloo" in msg.lower()):
            sys.stderr.write("[COMM-ERROR] rank %d: %s\n" % (world.rank, msg.splitlines()[0] if msg else ""))
            rc = 4
        else:
            import traceback
            traceback.print_exc()
            rc = 1
    except OSError as e:
        sys.stderr.write("[IO-ERROR] file=%s errno=%d %s\n" % (e.filename, e.errno or 0, e.strerror))
        rc = 6
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        if tr is not None and tr.hb is not None:
            tr.hb.beat(phase="exit", layer=-1, op="exit", exited=True, exit_code=rc)
    if rc != 0 and world.dist:
        os._exit(rc)      # peers may be stuck in a collective: no process-group teardown
    world.close(rc == 0)
    return rc
