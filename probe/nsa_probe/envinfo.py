"""--print-env without importing torch: the host, the GPUs and the driver nvidia-smi lists, the
versions of python and torch (from the installed package's metadata) and the CUDA runtime torch
was built with (from its version.py), the script's commit."""
import hashlib
import os
import importlib.util
import platform
import re
import socket
import subprocess
import sys


def _run(argv, cwd=None):
    try:
        r = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=3,
                           universal_newlines=True)
        return r.stdout if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def script_version(script):
    """(sha, dirty): the git commit of the script's work tree, else a digest of the file."""
    d = os.path.dirname(os.path.abspath(script))
    sha = _run(["git", "rev-parse", "HEAD"], cwd=d)
    if sha:
        st = _run(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no", "."], cwd=d)
        return sha.strip(), bool(st and st.strip())
    try:
        with open(script, "rb") as f:
            return "sha256-" + hashlib.sha256(f.read()).hexdigest()[:16], None
    except OSError:
        return "unknown", None


def _gpus():
    """(devices CUDA_VISIBLE_DEVICES leaves, the driver version or None)"""
    out = _run(["nvidia-smi", "--query-gpu=index,name,uuid,memory.total,driver_version",
                "--format=csv,noheader,nounits"])
    devs, driver = [], None
    for line in (out or "").splitlines():
        p = [x.strip() for x in line.split(",")]
        if len(p) == 5 and p[0].isdigit():
            devs.append({"index": int(p[0]), "name": p[1], "uuid": p[2],
                         "memory_bytes": int(float(p[3]) * 1024 * 1024) if p[3].replace(".", "").isdigit() else None})
            driver = driver or p[4] or None
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None and devs:
        keep = [v.strip() for v in vis.split(",") if v.strip()]
        devs = [d for d in devs if str(d["index"]) in keep or d["uuid"] in keep]
    return devs, driver


def _torch_cuda():
    """The CUDA version torch was built with, read from torch/version.py (`cuda = '13.0'`, or
    `cuda: Optional[str] = ...`) without importing torch; None where there is none."""
    try:
        spec = importlib.util.find_spec("torch")
        for d in (spec.submodule_search_locations or []) if spec else []:
            with open(os.path.join(d, "version.py")) as f:
                for line in f:
                    m = re.match(r"cuda\s*(?::[^=]*)?=\s*['\"]?([^'\"\s]+)", line)
                    if m:
                        return None if m.group(1) == "None" else m.group(1)
    except (OSError, ImportError, ValueError):
        pass
    return None


def _version(pkg):
    try:
        from importlib import metadata
        return metadata.version(pkg)
    except Exception:
        return None


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def print_env(tmap):
    sha, dirty = script_version(tmap.script) if tmap and tmap.script else ("unknown", None)
    devs, driver = _gpus()
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        mem = None
    return {
        "trainer": tmap.name if tmap else None,
        "map": tmap.path if tmap else None,
        "build": {"git_sha": sha, "git_dirty": dirty, "python": sys.version.split()[0],
                  "torch": _version("torch"), "probe": "nsa_probe 1"},
        "cuda": {"runtime": _torch_cuda() or "unknown", "driver": driver or "unknown", "devices": devs} if devs else None,
        "host": {"hostname": socket.gethostname(), "kernel": " ".join(platform.uname()[2:4]),
                 "machine": platform.machine(), "cpu_model": _cpu_model(), "cores": os.cpu_count(),
                 "memory_bytes": mem},
        "env": {k: v for k, v in sorted(os.environ.items())
                if k.startswith(("NSA_", "NCCL_", "CUDA_", "OMP_", "TORCH_", "SHOWCASE_"))},
    }
