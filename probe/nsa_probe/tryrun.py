"""--try: the map against its trainer for one optimizer step, every diagnostic on; a table of
what works and what does not. The config is --config FILE, else try_config.json (the harness's
tiny config, resolved, with train.steps = 1): each knob the map has is applied from it."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def _read_jsonl(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError):
        return []


def run(a, tmap):
    if tmap is None:
        sys.stderr.write("nsa_probe: --try needs --map FILE\n")
        return 2
    cfg_path = a.get("--config") or os.path.join(HERE, "try_config.json")
    out = tempfile.mkdtemp(prefix="nsa_probe_try_")
    argv = [sys.executable, "-m", "nsa_probe", "--map", tmap.path, "--config", cfg_path, "--out", out,
            "--heartbeat", os.path.join(out, "hb"), "--stack-file", os.path.join(out, "stack.txt"),
            "--trace-grads", "--dump-step", os.path.join(out, "step1.safetensors")]
    if tmap.gate:
        argv.append("--gate-stats")
    if tmap.layers:
        argv.append("--dump-acts")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(HERE) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    timeout = float(os.environ.get("NSA_PROBE_TRY_TIMEOUT", "300"))
    print("trying %s (%s) for one step with %s" % (tmap.shown, tmap.name, cfg_path))
    with open(os.path.join(out, "output.log"), "w") as log:
        try:
            r = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout)
            code = r.returncode
        except subprocess.TimeoutExpired:
            code = None
    s = {}
    try:
        with open(os.path.join(out, "probe.rank0.json")) as f:
            s = json.load(f)
    except (OSError, ValueError):
        pass
    metrics = _read_jsonl(os.path.join(out, "metrics.jsonl"))
    trace = _read_jsonl(os.path.join(out, "grad_trace.jsonl"))
    gates = _read_jsonl(os.path.join(out, "gate_stats.jsonl"))
    counts = s.get("counts", {})
    rows = []

    def row(ok, what, detail):
        rows.append(("ok" if ok is True else ok or "MISSING", what, detail))

    row(code == 0, "the script ran", "exit %s" % ("timeout after %g s" % timeout if code is None else code))
    row(counts.get("forward", 0) > 0, "a forward of the model", "%d calls, root module %s with %d parameters"
        % (counts.get("forward", 0), s.get("root"), s.get("n_params", 0)))
    if tmap.layers:
        layers = s.get("layers", [])
        row(bool(layers) or "NOT MATCHED", "modules.layers %r" % tmap.layers.text,
            "layers %s" % (",".join(map(str, layers)) if layers else "none matched"))
    for b, p in sorted(tmap.branches.items()):
        n = s.get("branches", {}).get(b, 0)
        row(n > 0 or "NOT MATCHED", "modules.branches.%s %r" % (b, p.text), "%d modules" % n)
    if tmap.gate:
        row(s.get("gates", 0) > 0 or "NOT MATCHED", "modules.gate %r" % tmap.gate["module"].text,
            "%d modules; gate statistics %s" % (s.get("gates", 0), "written" if gates and gates[0].get("layers")
                                                else "not written"))
    row(counts.get("backward", 0) > 0, "backward()", "%d calls; loss %s" % (counts.get("backward", 0),
                                                                        metrics[0].get("loss") if metrics else "-"))
    row(bool(trace) and not trace[0]["missing"] or (trace and "SOME MISSING"), "gradients arrived",
        "%d of %d%s" % (trace[0]["arrived"], trace[0]["n_params"], (": missing " + ", ".join(trace[0]["missing"][:5]))
                        if trace[0]["missing"] else "") if trace else "no trace")
    row(counts.get("optimizer", 0) > 0, "an optimizer step", "%d steps" % counts.get("optimizer", 0))
    row(os.path.exists(os.path.join(out, "step1.safetensors")), "the step dump", "step1.safetensors")
    knobs = ", ".join(sorted(tmap.knobs)) or "none"
    print("%-12s %-45s %s" % ("", "map knobs", knobs))
    for st, what, detail in rows:
        print("%-12s %-45s %s" % (st, what, detail))
    bad = [r for r in rows if r[0] != "ok"]
    if bad:
        print("\nthe probe's files and the script's output are kept in %s" % out)
    if bad and code != 0:
        print("\nthe script's last output lines (%s/output.log):" % out)
        with open(os.path.join(out, "output.log"), errors="replace") as f:
            for line in f.readlines()[-15:]:
                print("  " + line.rstrip())
    if not bad:
        shutil.rmtree(out, ignore_errors=True)
    return 0 if not bad else 1
