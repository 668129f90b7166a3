"""python -m nsa_probe [PROBE OPTIONS] [--] [SCRIPT [ARGS...]] (docs/trainer-maps.md)."""
import faulthandler
import json
import os
import runpy
import signal
import sys

from . import envinfo
from . import faults as faultlib
from .mapfile import MapError, TrainerMap

VALUED = {"--map", "--config", "--out", "--rank", "--transport", "--bootstrap", "--heartbeat", "--stack-file",
          "--log-file", "--dump-step", "--fault", "--init-weights"}
FLAGS = {"--protocol-info", "--print-env", "--list-faults", "--check-map", "--try", "--trace-grads",
         "--gate-stats", "--dump-acts", "--no-anomaly", "--no-metrics", "--help", "-h"}
USAGE = """usage: python -m nsa_probe [--map MAP] [options] [--] [SCRIPT [ARGS...]]
Runs an unmodified PyTorch training script with the nsa-harness trainer protocol installed
from outside (docs/trainer-maps.md). Options (before SCRIPT):
  --map FILE             the trainer map (JSON)
  --check-map            validate the map and exit (0, or 2 with FILE:line:col problems)
  --try                  run the map's command for one step and say what works
  --protocol-info | --print-env | --list-faults   the handshake (no torch needed)
  --config FILE          the case's resolved config: the map's knobs are applied from it
  --out DIR              the probe's files (default nsa_probe_out)
  --rank R | --transport T | --bootstrap env | --heartbeat F | --stack-file F | --log-file F
  --trace-grads | --gate-stats | --dump-step F | --dump-acts | --fault NAME[=ARG]
  --no-anomaly | --no-metrics
"""


def die(msg, code=2):
    sys.stderr.write("nsa_probe: %s\n" % msg)
    sys.exit(code)


def parse(argv):
    a, i = {"--fault": []}, 0
    while i < len(argv):
        k = argv[i]
        if k == "--":
            i += 1
            break
        if not k.startswith("-"):
            break
        if k in FLAGS:
            a[k] = True
        elif k in VALUED:
            if i + 1 >= len(argv):
                die("%s needs a value" % k)
            i += 1
            if k == "--fault":
                a[k].append(argv[i])
            else:
                a[k] = argv[i]
        else:
            die("unknown option '%s' (the script's own options go after SCRIPT; --help lists the probe's)" % k)
        i += 1
    return a, argv[i:]


def load_map(path):
    try:
        return TrainerMap(path)
    except MapError as e:
        for p in e.problems:
            sys.stderr.write(p + "\n")
        sys.exit(2)


def handshake(a, tmap):
    if a.get("--check-map"):
        if not tmap:
            die("--check-map needs --map FILE")
        print("%s: ok (trainer %s, %d knobs, %d faults of its own)" % (tmap.shown, tmap.name, len(tmap.knobs),
                                                                        len(tmap.faults)))
        return 0
    if a.get("--list-faults"):
        for v in a["--fault"]:
            try:
                faultlib.parse(v, tmap)
            except ValueError as e:
                die(str(e))
        for n, d in faultlib.TABLE:
            if n != "gate_zero_init" or (tmap and tmap.gate):
                print("%-18s %s" % (n, d))
        for n in sorted(tmap.faults) if tmap else []:
            f = tmap.faults[n]
            print("%-18s the trainer's own: %s" % (n, ("%s=%s" % (f["env"], f["value"])) if f["env"]
                                                     else "%s %s" % (f["flag"], f["value"])))
        return 0
    if a.get("--protocol-info"):
        if not tmap:
            die("--protocol-info needs --map FILE")
        print(json.dumps(tmap.protocol_info(envinfo.script_version(tmap.script)[0])))
        return 0
    if a.get("--print-env"):
        print(json.dumps(envinfo.print_env(tmap), indent=2))
        return 0
    return None


def setup_stacks(path):
    """SIGUSR1: every thread's stack to path, then exit 138; a crash signal: the stack, then the signal."""
    f = open(path, "a") if path else sys.stderr
    signal.signal(signal.SIGUSR1, lambda *_: os._exit(138))   # runs after faulthandler's dump
    faulthandler.register(signal.SIGUSR1, file=f, all_threads=True, chain=True)
    faulthandler.enable(file=f, all_threads=True)
    return f


def redirect_log(path):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main(argv):
    a, rest = parse(argv)
    if a.get("--help") or a.get("-h"):
        sys.stdout.write(USAGE)
        return 0
    tmap = load_map(a["--map"]) if "--map" in a else None
    r = handshake(a, tmap)
    if r is not None:
        return r
    if a.get("--try"):
        from . import tryrun
        return tryrun.run(a, tmap)
    rank = int(a.get("--rank", os.environ.get("RANK", "0")))
    sub = (lambda p: p.replace("%r", str(rank)) if p else p)
    if a.get("--log-file"):
        redirect_log(sub(a["--log-file"]))
    cfg = None
    if "--config" in a:
        try:
            with open(a["--config"]) as f:
                cfg = json.load(f)
        except (OSError, ValueError) as e:
            die("--config %s: %s" % (a["--config"], e))
    out = a.get("--out", "nsa_probe_out")
    os.makedirs(out, exist_ok=True)
    for v in a["--fault"]:
        try:
            faultlib.parse(v, tmap)
        except ValueError as e:
            die(str(e))
    if rest:
        script, sargs = rest[0], rest[1:]
    elif tmap:
        script, sargs = tmap.script, []
    else:
        die("no script: give SCRIPT or --map with a 'script'")
    env, cwd = {}, None
    if tmap:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        transport = a.get("--transport")
        try:
            extra, env, files = tmap.command(cfg, transport, os.path.abspath(out), rank, world, a["--fault"])
        except MapError as e:
            die("; ".join(e.problems))
        if not rest:
            sargs = extra
        else:
            sargs = sargs + extra[len(tmap.args):] if cfg is not None else sargs
        for path, text in files.items():
            if rank == 0 or not os.path.exists(path):
                tmp = "%s.%d.tmp" % (path, os.getpid())
                with open(tmp, "w") as f:
                    f.write(text)
                os.replace(tmp, path)
        cwd = tmap.expand(tmap.cwd, tmap.case_values(cfg or {}, transport, os.path.abspath(out), rank, world)) \
            if tmap.cwd else tmap.dir
        if not os.path.isabs(cwd):
            cwd = os.path.join(tmap.dir, cwd)
    script = os.path.abspath(script)
    if not os.path.isfile(script):
        die("no such script: %s" % script)
    os.environ.update(env)
    setup_stacks(sub(a.get("--stack-file")))

    from .runtime import Options, Probe     # torch is imported from here on
    opts = Options(out=out, rank=rank, heartbeat=a.get("--heartbeat"), trace_grads=bool(a.get("--trace-grads")),
                   gate_stats=bool(a.get("--gate-stats")), dump_step=a.get("--dump-step"),
                   dump_acts=bool(a.get("--dump-acts")), faults=a["--fault"], anomaly=not a.get("--no-anomaly"),
                   metrics=not a.get("--no-metrics"), config=cfg)
    probe = Probe(tmap, opts)
    probe.install()
    if cwd:
        os.chdir(cwd)
    sys.argv = [script] + list(sargs)
    sys.path.insert(0, os.path.dirname(script))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            sys.stderr.write("%s\n" % e.code)
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    probe.finish(code)
    sys.stdout.flush()
    sys.stderr.flush()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
