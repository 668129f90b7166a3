"""The probe's own tests (run by tests/cli/probe.sh with a python that has torch):
the map loader's errors and positions, the knob translation, no loss bit changed by the probe,
what it writes (metrics, trace, gate statistics, dump), its faults, and library mode."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "probe"))
from nsa_probe.mapfile import MapError, TrainerMap  # noqa: E402

FIX = os.path.join(HERE, "fixtures")
ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "probe"), OMP_NUM_THREADS="1")


def probe(*args, cwd=FIX, timeout=120):
    r = subprocess.run([sys.executable, "-m", "nsa_probe"] + list(args), cwd=cwd, env=ENV, timeout=timeout,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    return r.returncode, r.stdout, r.stderr


def losses(text):
    return [l.split()[1] for l in text.splitlines() if l.startswith("loss ")]


def jsonl(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def safetensors_names(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return [k for k in json.loads(f.read(n)) if k != "__metadata__"]


class MapErrors(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp()
        open(os.path.join(self.d, "t.py"), "w").close()

    def tearDown(self):
        shutil.rmtree(self.d)

    def problems(self, text, files=None):
        for name, body in (files or {}).items():
            with open(os.path.join(self.d, name), "w") as f:
                f.write(body)
        p = os.path.join(self.d, "m.json")
        with open(p, "w") as f:
            f.write(text)
        with self.assertRaises(MapError) as cm:
            TrainerMap(p)
        return [x.replace(p, "m.json") for x in cm.exception.problems]

    def test_unknown_key_at_its_position(self):
        ps = self.problems('{"trainer": "x", "script": "t.py",\n  "knobz": {}}')
        self.assertEqual(len(ps), 1)
        self.assertTrue(ps[0].startswith("m.json:2:3: unknown key 'knobz' in the map"), ps[0])

    def test_wrong_type(self):
        ps = self.problems('{"trainer": "x", "script": "t.py", "args": "--steps"}')
        self.assertEqual(ps, ["m.json:1:44: args: expected an array of strings, got a string"])

    def test_syntax_error(self):
        ps = self.problems('{"trainer": "x",\n "script": "t.py",}')
        self.assertEqual(ps, ["m.json:2:19: trailing comma before '}'"])

    def test_missing_required_and_no_script(self):
        ps = self.problems('{"script": "nope.py"}')
        self.assertTrue(any("missing required key 'trainer'" in p for p in ps), ps)
        self.assertTrue(any(p.startswith("m.json:1:12: script: no such file") for p in ps), ps)

    def test_unknown_knob_suggests(self):
        ps = self.problems('{"trainer": "x", "script": "t.py", "knobs": {"train.stepz": {"flag": "-s"}, '
                           '"steps": {"flag": "-s"}}}')
        self.assertIn("unknown knob 'train.stepz'", ps[0])
        self.assertIn("did you mean train.steps?", ps[1])

    def test_template_placeholder_position(self):
        ps = self.problems('{"trainer": "x", "script": "t.py", "config_file": {"template": "c.yaml.tmpl"}}',
                           {"c.yaml.tmpl": "a: 1\nseq: {{train.seq_len}}\nbad:  {{train.sequence}}\n"})
        self.assertEqual(len(ps), 1)
        self.assertRegex(ps[0], r"c\.yaml\.tmpl:3:7: the placeholder \{\{train\.sequence\}\} names no knob")

    def test_placeholder_in_args(self):
        ps = self.problems('{"trainer": "x", "script": "t.py", "args": ["--x", "{{nope}}"]}')
        self.assertEqual(len(ps), 1)
        self.assertIn("m.json:1:52: args: the placeholder {{nope}} names no knob", ps[0])

    def test_cli_exit_2_lists_every_problem(self):
        p = os.path.join(self.d, "m.json")
        with open(p, "w") as f:
            f.write('{"trainer": "x", "script": "t.py", "knobs": {"a.b": {}}, "extra": 1}')
        rc, out, err = probe("--map", p, "--check-map")
        self.assertEqual(rc, 2)
        self.assertEqual(len(err.strip().splitlines()), 2, err)


class Knobs(unittest.TestCase):
    def test_translation(self):
        d = tempfile.mkdtemp()
        try:
            open(os.path.join(d, "t.py"), "w").close()
            with open(os.path.join(d, "c.yaml.tmpl"), "w") as f:
                f.write("lr: {{train.lr}}\neps: {{model.norm_eps}}\nsteps: {{train.steps}}\n")
            with open(os.path.join(d, "m.json"), "w") as f:
                json.dump({"trainer": "x", "script": "t.py", "args": ["--out", "{{out}}/r"],
                           "config_file": {"template": "c.yaml.tmpl", "env": "CONFIG"},
                           "knobs": {"train.steps": {"flag": "--steps"},
                                     "nsa.force_branch": {"env": "FB", "values": {"none": None, "sel": "s"}},
                                     "train.checkpoint_layers": {"env": "GC", "format": "{{begin}}:{{end}}"},
                                     "train.prefill": {"flag": "--batched", "values": {"batched": True,
                                                                                       "sequential": None}},
                                     "train.ddp_mode": {"values": {"default": {}, "find_unused": {"FU": "1"}}},
                                     "transport": {"env": "BK", "values": {"gloo": "gloo"}}}}, f)
            m = TrainerMap(os.path.join(d, "m.json"))
            cfg = {"train": {"steps": 2, "lr": 0.003, "checkpoint_layers": [6, 12], "prefill": "batched",
                             "ddp_mode": "find_unused"},
                   "model": {"norm_eps": 1e-05}, "nsa": {"force_branch": "sel"}}
            args, env, files = m.command(cfg, "gloo", "/o", 0, 2)
            self.assertEqual(args, ["--out", "/o/r", "--batched", "--steps", "2"])
            self.assertEqual(env, {"CONFIG": "/o/c.yaml", "FB": "s", "GC": "6:12", "FU": "1", "BK": "gloo"})
            self.assertEqual(files, {"/o/c.yaml": "lr: 0.003\neps: 1.0e-05\nsteps: 2\n"})
            cfg["nsa"]["force_branch"] = "none"
            cfg["train"]["prefill"] = "sequential"
            args, env, _ = m.command(cfg, None, "/o", 0, 1)
            self.assertNotIn("FB", env)
            self.assertNotIn("BK", env)
            self.assertNotIn("--batched", args)
            info = m.protocol_info("v")
            self.assertEqual(info["features"]["prefill"], ["batched", "sequential"])
            self.assertEqual(info["features"]["transports"], ["none", "gloo"])
            self.assertEqual(info["features"]["knobs"]["nsa.force_branch"], ["none", "sel"])
            self.assertIsNone(info["features"]["knobs"]["train.lr"])    # a template knob
            cfg["nsa"]["force_branch"] = "cmp"
            with self.assertRaises(MapError):
                m.command(cfg, None, "/o", 0, 1)
            # values and format together: the table first, the format for the rest; {{last}} = end - 1
            m.knobs["train.checkpoint_layers"] = {"flag": None, "env": "GC", "format": "{{begin}}-{{last}}",
                                                  "values": {"[0, 0]": None}}
            cfg["nsa"]["force_branch"] = "sel"
            self.assertEqual(m.command(cfg, None, "/o", 0, 1)[1]["GC"], "6-11")
            cfg["train"]["checkpoint_layers"] = [0, 0]
            self.assertNotIn("GC", m.command(cfg, None, "/o", 0, 1)[1])
        finally:
            shutil.rmtree(d)


class PrintEnv(unittest.TestCase):
    """--print-env names the GPUs, the driver and torch's CUDA runtime without importing torch
    (a fake nvidia-smi and a fake torch package whose __init__ would fail if imported)."""

    def test_driver_and_runtime(self):
        tmp = tempfile.mkdtemp()
        try:
            os.makedirs(os.path.join(tmp, "bin"))
            smi = os.path.join(tmp, "bin", "nvidia-smi")
            with open(smi, "w") as f:
                f.write("#!/bin/sh\necho '0, NVIDIA H200, GPU-aaa, 143771, 580.159.04'\n"
                        "echo '1, NVIDIA H200, GPU-bbb, 143771, 580.159.04'\n")
            os.chmod(smi, 0o755)
            os.makedirs(os.path.join(tmp, "py", "torch"))
            with open(os.path.join(tmp, "py", "torch", "__init__.py"), "w") as f:
                f.write("raise RuntimeError('imported')\n")
            with open(os.path.join(tmp, "py", "torch", "version.py"), "w") as f:
                f.write("__version__ = '2.11.0'\ncuda: Optional[str] = '13.0'\n")
            env = dict(ENV, PATH=os.path.join(tmp, "bin") + os.pathsep + os.environ.get("PATH", ""),
                       PYTHONPATH=os.path.join(tmp, "py") + os.pathsep + os.path.join(ROOT, "probe"),
                       CUDA_VISIBLE_DEVICES="1")
            code = "import json; from nsa_probe.envinfo import print_env; print(json.dumps(print_env(None)['cuda']))"
            r = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            cuda = json.loads(r.stdout)
            self.assertEqual(cuda["runtime"], "13.0")
            self.assertEqual(cuda["driver"], "580.159.04")
            self.assertEqual([d["uuid"] for d in cuda["devices"]], ["GPU-bbb"])
            with open(os.path.join(tmp, "py", "torch", "version.py"), "w") as f:
                f.write("cuda = None\n")   # a CPU build of torch
            r = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
            self.assertEqual(json.loads(r.stdout)["runtime"], "unknown")
        finally:
            shutil.rmtree(tmp)


class Probe(unittest.TestCase):
    def setUp(self):
        self.out = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.out)

    def test_no_loss_bit_changes(self):
        for extra in ([], ["--ckpt"]):           # checkpointing: the probe's looks must not disturb a region
            args = ["tiny_train.py", "--steps", "4", "--accum", "2"] + extra
            r = subprocess.run([sys.executable] + args, cwd=FIX, env=ENV, stdout=subprocess.PIPE,
                               universal_newlines=True)
            plain = losses(r.stdout)
            rc, out, err = probe("--map", "tiny.map.json", "--out", self.out, "--heartbeat", self.out + "/hb",
                                 "--trace-grads", "--gate-stats", "--dump-step", self.out + "/s.safetensors",
                                 "--dump-acts", *args)
            self.assertEqual(rc, 0, err)
            self.assertEqual(len(plain), 4)
            self.assertEqual(losses(out), plain)     # repr() of every loss: bitwise

    def test_outputs(self):
        rc, out, err = probe("--map", "tiny.map.json", "--out", self.out, "--heartbeat", self.out + "/hb",
                             "--trace-grads", "--gate-stats", "--dump-step", self.out + "/s.safetensors",
                             "--dump-acts", "tiny_train.py", "--steps", "3")
        self.assertEqual(rc, 0, err)
        m = jsonl(self.out + "/metrics.jsonl")
        self.assertEqual([r["step"] for r in m], [1, 2, 3])
        self.assertEqual(m[0]["tokens"], 32)
        self.assertEqual(m[1]["lr"], 0.005)          # the first param group's lr the step used: 1e-2 / 2
        self.assertEqual(float(losses(out)[0]), m[0]["loss"])
        t = jsonl(self.out + "/grad_trace.jsonl")
        self.assertEqual(len(t), 3)
        self.assertEqual((t[0]["n_params"], t[0]["arrived"], t[0]["missing"]), (23, 23, []))
        self.assertEqual(t[0]["order"][:2], ["out.bias", "out.weight"])   # backward order: the head first
        g = jsonl(self.out + "/gate_stats.jsonl")
        self.assertEqual([l["layer"] for l in g[0]["layers"]], [0, 1])
        self.assertEqual(g[0]["layers"][0]["fc2_fan_in"], 8)
        self.assertGreater(min(g[0]["layers"][0]["out_std"]), 1e-4)
        names = safetensors_names(self.out + "/s.safetensors")
        self.assertIn("loss", names)
        self.assertIn("inputs", names)
        self.assertIn("grads.layers.0.sel.w.weight", names)
        self.assertIn("acts.blocks.1.attn.sel.o", names)
        self.assertIn("acts.blocks.0.out", names)
        hb = json.load(open(self.out + "/hb"))
        self.assertEqual((hb["exited"], hb["exit_code"], hb["step"], hb["phase"]), (True, 0, 3, "exit"))

    def test_knobs_from_config(self):
        cfg = os.path.join(self.out, "config.json")
        with open(cfg, "w") as f:
            json.dump({"train": {"steps": 2, "seq_len": 12, "grad_accum": 1}}, f)
        rc, out, err = probe("--map", "tiny.map.json", "--config", cfg, "--out", self.out)
        self.assertEqual(rc, 0, err)
        m = jsonl(self.out + "/metrics.jsonl")
        self.assertEqual(len(m), 2)
        self.assertEqual(m[0]["tokens"], 24)

    def test_gate_zero_init(self):
        rc, out, err = probe("--map", "tiny.map.json", "--out", self.out, "--gate-stats",
                             "--fault", "gate_zero_init", "tiny_train.py", "--steps", "1")
        self.assertEqual(rc, 0, err)
        for l in jsonl(self.out + "/gate_stats.jsonl")[0]["layers"]:
            self.assertEqual((l["fc2_weight_std"], l["out_mean"], l["out_std"]), (0.0, [0.5] * 3, [0.0] * 3))

    def test_nan_at_seqlen(self):
        rc, out, err = probe("--map", "tiny.map.json", "--out", self.out, "--fault", "nan_at_seqlen=8",
                             "tiny_train.py", "--seq", "12")
        self.assertEqual(rc, 0, err)               # 12 is no multiple of 8
        rc, out, err = probe("--map", "tiny.map.json", "--out", self.out, "--fault", "nan_at_seqlen=8",
                             "tiny_train.py", "--seq", "16")
        self.assertEqual(rc, 3, err)
        a = json.load(open(self.out + "/anomaly.json"))
        self.assertEqual((a["tensor"], a["layer"], a["branch"], a["position"]["t"]), ("layers.0.sel", 0, "sel", 15))

    def test_drop_grad(self):
        rc, out, err = probe("--map", "tiny.map.json", "--out", self.out, "--trace-grads", "--fault",
                             "drop_grad=layers.1.win.w.bias", "tiny_train.py", "--steps", "2")
        self.assertEqual(rc, 0, err)
        t = jsonl(self.out + "/grad_trace.jsonl")
        self.assertEqual([r["missing"] for r in t], [["layers.1.win.w.bias"]] * 2)
        rc, out, err = probe("--map", "tiny.map.json", "--out", self.out, "--fault", "drop_grad=nope",
                             "tiny_train.py", "--steps", "1")
        self.assertEqual(rc, 2)
        self.assertIn("no parameter 'nope'", err)

    def test_bad_fault_is_exit_2(self):
        rc, out, err = probe("--map", "tiny.map.json", "--fault", "hang=0:x:forward", "--list-faults")
        self.assertEqual(rc, 2)
        self.assertIn("STEP 'x' is not a non-negative integer", err)

    def test_never_backward(self):
        script = os.path.join(self.out, "eval_only.py")
        with open(script, "w") as f:
            f.write("import torch\nm = torch.nn.Linear(2, 2)\nprint(m(torch.ones(2)).sum().item())\n")
        rc, out, err = probe("--out", self.out, script)
        self.assertEqual(rc, 0, err)
        self.assertIn("[nsa_probe] FAIL: the script never called backward()", out)

    def test_import_error_is_exit_1_with_traceback(self):
        script = os.path.join(self.out, "broken.py")
        with open(script, "w") as f:
            f.write("import torch\nimport no_such_module_here\n")
        rc, out, err = probe("--out", self.out, script)
        self.assertEqual(rc, 1)
        self.assertIn("Traceback (most recent call last):", err)
        self.assertIn("ModuleNotFoundError", err)

    def test_library_mode(self):
        script = os.path.join(self.out, "lib.py")
        with open(script, "w") as f:
            f.write("import sys, torch\nsys.path.insert(0, %r)\nimport nsa_probe\n"
                    "m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))\n"
                    "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
                    "probe = nsa_probe.attach(m, opt, out=%r)\n"
                    "for i in range(3):\n"
                    "    loss = m(torch.ones(2, 4)).pow(2).mean()\n"
                    "    loss.backward(); opt.step(); opt.zero_grad(); probe.step(loss)\n"
                    "probe.finish(0)\n" % (os.path.join(ROOT, "probe"), self.out))
        r = subprocess.run([sys.executable, script], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        m = jsonl(self.out + "/metrics.jsonl")
        self.assertEqual([x["step"] for x in m], [1, 2, 3])
        t = jsonl(self.out + "/grad_trace.jsonl")
        self.assertEqual(t[0]["arrived"], 4)


if __name__ == "__main__":
    unittest.main(verbosity=2)
