#!/usr/bin/env python3
"""A stand-in for probe/nsa-probe (docs/trainer-maps.md) in tests/cli/trainer_map_runner.sh.

It runs no script: it speaks the runner's side of trainer protocol 2 the way the probe does,
its behaviour read from test-only "stub" keys of the map (the real probe rejects them):
  stub_reject       --check-map prints this line on stderr and exits 2
  stub_knobs        features.knobs of --protocol-info ({knob: [values] or null})
  stub_features     more features of --protocol-info (e.g. transports, bootstraps, ddp_modes)
  stub_env_fail     --print-env prints this line on stderr and exits 2 (no python with torch)
  stub_case         a case: "ok" (metrics.jsonl), "no_metrics" (a [nsa_probe] FAIL line, exit 0),
                    "raise" (a Python exception, exit 1), "hang_fault" (the script calls the probe's
                    fault_hang and sleeps there), "hang_hook" (the script calls a probe hook that
                    sleeps): frames of .../nsa_probe/hooks.py and .../train.py, SIGUSR1 dumps them;
                    "ddp" (data parallel, rank from $RANK: under train.ddp_mode "default" rank 1
                    gets no gradient for blocks.1.gate.w, prints the probe's [DDP] line, and both
                    ranks hang as in the all-reduce; otherwise both finish)
  stub_grad_trace   records written to grad_trace.jsonl with --trace-grads
  stub_gate_stats   records written to gate_stats.jsonl with --gate-stats
Every call is appended to $STUB_PROBE_LOG when set.
"""
import faulthandler, json, os, signal, sys

# code "of the probe" and "of the user's script": compiled under their paths, so the stack dump
# names them as the real probe's and script's frames (the files need not exist)
PROBE_SRC = """import time
def fault_hang(step):
    while True:
        time.sleep(3600)
def on_forward(step):
    while True:
        time.sleep(3600)
"""
SCRIPT_SRC = """def train(hook):
    hook(1)
"""


def hang(out, stack_file, which):
    stack_f = open(stack_file.replace("%r", "0"), "a")
    signal.signal(signal.SIGUSR1, lambda *_: os._exit(138))   # after faulthandler's dump
    faulthandler.register(signal.SIGUSR1, file=stack_f, all_threads=True, chain=True)
    probe, script = {}, {}
    exec(compile(PROBE_SRC, os.path.join(out, "site", "nsa_probe", "hooks.py"), "exec"), probe)
    exec(compile(SCRIPT_SRC, os.path.join(out, "train.py"), "exec"), script)
    script["train"](probe[which])


def ddp(cfg, out, trace):
    rank = int(os.environ.get("RANK", "0"))
    hang = cfg["train"]["ddp_mode"] == "default"
    names = ["blocks.0.gate.w", "blocks.1.gate.w", "tok_emb.weight"]
    missing = ["blocks.1.gate.w"] if rank == 1 and hang else []
    if trace:
        with open(os.path.join(out, "grad_trace.jsonl"), "a") as f:
            f.write(json.dumps({"step": 1, "rank": rank, "n_params": 3, "arrived": 3 - len(missing), "missing": missing,
                                "expected_missing": [], "nonfinite": [], "zero": [],
                                "order": [n for n in names if n not in missing]}) + "\n")
    if missing:
        print("[DDP] step=1 rank=%d no gradient: %s" % (rank, ", ".join(missing)), flush=True)
    if hang:
        import time
        while True:
            time.sleep(3600)
    if rank == 0:
        with open(os.path.join(out, "metrics.jsonl"), "w") as f:
            f.write(json.dumps({"step": 1, "loss": 3.0, "grad_norm": 1.0, "lr": 0.001, "ms": 1.0}) + "\n")
    sys.exit(0)


def main():
    argv = sys.argv[1:]
    if os.environ.get("STUB_PROBE_LOG"):
        with open(os.environ["STUB_PROBE_LOG"], "a") as f:
            f.write(" ".join(argv) + "\n")
    opt = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--map", "--config", "--out", "--rank", "--heartbeat", "--stack-file", "--fault"):
            opt[a] = argv[i + 1]
            i += 2
        else:
            opt[a] = True
            i += 1
    m = json.load(open(opt["--map"]))
    if "--check-map" in opt:
        if m.get("stub_reject"):
            print(m["stub_reject"], file=sys.stderr)
            sys.exit(2)
        return
    if "--protocol-info" in opt:
        features = {"backends": ["cpu"], "precisions": ["fp32"], "transports": ["none"], "bootstraps": [],
                    "ddp_modes": ["default"], "prefill": ["batched", "sequential"],
                    "data": ["synthetic", "learnable"], "faults": [],
                    "diagnostics": ["stack_dump", "trace_grads", "gate_stats"]}
        features.update(m.get("stub_features", {}))
        if "stub_knobs" in m:
            features["knobs"] = m["stub_knobs"]
        print(json.dumps({"protocol": 2, "trainer": m.get("trainer", "stub"), "version": "1", "features": features}))
        return
    if "--print-env" in opt:
        if m.get("stub_env_fail"):
            print(m["stub_env_fail"], file=sys.stderr)
            sys.exit(2)
        print(json.dumps({"host": {"hostname": "stub", "cpu_model": "stub cpu", "cores": 2}, "cuda": {"devices": []},
                          "build": {"git_sha": "stub-probe"}}))
        return
    cfg = json.load(open(opt["--config"]))
    out = opt["--out"]
    case = m.get("stub_case", "ok")
    if case == "no_metrics":
        print("[nsa_probe] script train.py started (pid %d)" % os.getpid())
        print("[nsa_probe] FAIL: the script never called backward() (no optimizer step either)")
        return
    if case in ("hang_fault", "hang_hook"):
        hang(out, opt["--stack-file"], "fault_hang" if case == "hang_fault" else "on_forward")
    if case == "ddp":
        ddp(cfg, out, "--trace-grads" in opt)
    if case == "raise":
        print("[nsa_probe] script train.py started", flush=True)
        def train_step(step):
            raise RuntimeError("stub trainer: shapes do not match at step %d" % step)
        train_step(1)
    if "--trace-grads" in opt:
        with open(os.path.join(out, "grad_trace.jsonl"), "w") as f:
            for rec in m.get("stub_grad_trace", []):
                f.write(json.dumps(rec) + "\n")
    if "--gate-stats" in opt:
        with open(os.path.join(out, "gate_stats.jsonl"), "w") as f:
            for rec in m.get("stub_gate_stats", []):
                f.write(json.dumps(rec) + "\n")
    with open(os.path.join(out, "metrics.jsonl"), "w") as f:
        for step in range(1, cfg["train"]["steps"] + 1):
            loss = 3.0 - 0.2 * step
            f.write(json.dumps({"step": step, "loss": loss, "grad_norm": 1.0, "lr": cfg["train"]["lr"], "ms": 1.0}) + "\n")


if __name__ == "__main__":
    main()
