#!/usr/bin/env python3
"""A minimal trainer speaking the nsa-harness trainer protocol, version 2 (docs/trainer-protocol.md).

No model: the "loss" decays from a number derived from the config's seed. It shows the
required parts: --protocol-info, --print-env, --config (the resolved JSON), --out, --rank,
metrics.jsonl, the heartbeat file, SIGUSR1 -> stack dump + exit 138, exit 2 on unknown flags,
and one fault, hang=RANK:STEP:PHASE. Run: nsa-harness run S.json --trainer-cmd "python3 THIS".
"""
import faulthandler, json, math, os, signal, socket, sys, time

INFO = {"protocol": 2, "trainer": "minimal-trainer", "version": "1",
        "features": {"backends": ["cpu"], "precisions": ["fp32"], "transports": ["none"],
                     "bootstraps": [], "ddp_modes": ["default"], "prefill": ["batched"],
                     "data": ["synthetic", "learnable"], "faults": ["hang"],
                     "diagnostics": ["heartbeat", "stack_dump"]}}
VALUED = {"--config", "--out", "--rank", "--heartbeat", "--stack-file", "--fault"}
FLAGS = {"--protocol-info", "--print-env", "--list-faults"}


def usage(msg):
    print("minimal_trainer: " + msg, file=sys.stderr)
    sys.exit(2)


def parse(argv):
    a, i = {"--fault": []}, 0
    while i < len(argv):
        k = argv[i]
        if k in FLAGS:
            a[k] = True
        elif k in VALUED and i + 1 < len(argv):
            i += 1
            a[k] = a[k] + [argv[i]] if k == "--fault" else argv[i]
        else:
            usage("unknown option %r" % k)
        i += 1
    for f in a["--fault"]:
        p = f.split("=", 1)[-1].split(":")
        if not f.startswith("hang=") or len(p) != 3 or not (p[0] + p[1]).isdigit():
            usage("unknown fault %r (known: hang=RANK:STEP:PHASE)" % f)
    return a


class Beat:
    """The heartbeat file: one JSON line, replaced atomically at every phase change."""
    def __init__(self, path, rank):
        self.path, self.rank, self.seq, self.step = path, rank, 0, 0

    def __call__(self, phase, layer=-1, op="", exited=False, code=0):
        if not self.path:
            return
        self.seq += 1
        rec = {"seq": self.seq, "pid": os.getpid(), "rank": self.rank, "host": socket.gethostname(),
               "step": self.step, "phase": phase, "layer": layer, "op": op,
               "exited": exited, "exit_code": code, "time": time.time()}
        with open(self.path + ".tmp", "w") as f:
            f.write(json.dumps(rec) + "\n")
        os.replace(self.path + ".tmp", self.path)


def fault_hang():
    while True:
        time.sleep(3600)


def main():
    a = parse(sys.argv[1:])
    if a.get("--protocol-info"):
        return print(json.dumps(INFO))
    if a.get("--list-faults"):
        return print("hang                   hang=RANK:STEP:PHASE")
    if a.get("--print-env"):
        return print(json.dumps({"host": {"hostname": socket.gethostname(), "cpu_model": "?", "cores": os.cpu_count()},
                                 "cuda": {"devices": []}, "build": {"git_sha": "minimal-trainer-1"}}))
    if "--config" not in a or "--out" not in a:
        usage("--config FILE and --out DIR are required")
    rank = int(a.get("--rank", "0"))
    cfg = json.load(open(a["--config"]))
    stack = a.get("--stack-file")
    if stack:
        stack_f = open(stack.replace("%r", str(rank)), "a")
        signal.signal(signal.SIGUSR1, lambda *_: os._exit(138))   # runs after faulthandler's dump
        faulthandler.register(signal.SIGUSR1, file=stack_f, all_threads=True, chain=True)
        faulthandler.enable(file=stack_f)
    beat = Beat((a.get("--heartbeat") or "").replace("%r", str(rank)), rank)
    hangs = [f[5:].split(":") for f in a["--fault"]]
    seed, lr = cfg["train"].get("seed", 1), cfg["train"]["lr"]
    with open(os.path.join(a["--out"], "metrics.jsonl"), "w") as m:
        for step in range(1, cfg["train"]["steps"] + 1):
            beat.step = step
            for phase in ("data", "forward", "backward", "optimizer"):
                if [str(rank), str(step), phase] in hangs:
                    beat(phase, op="fault_hang")
                    fault_hang()
                for layer in range(cfg["model"]["n_layers"]) if phase in ("forward", "backward") else [-1]:
                    beat(phase, layer, "toy" if layer >= 0 else "")
                    time.sleep(0.01)
            loss = (2.0 + (seed % 7) / 10.0) * math.exp(-0.05 * step)
            m.write(json.dumps({"step": step, "loss": loss, "grad_norm": loss / 2, "lr": lr, "ms": 50.0}) + "\n")
            m.flush()
    beat("exit", exited=True, code=0)


if __name__ == "__main__":
    main()
