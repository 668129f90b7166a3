"""nsa_torch/envinfo.py — --print-env: the facts the runner reads (docs/diagnostics.md
"--print-env"): build.git_sha, cuda {runtime, driver, devices: [...]} or null, host
{hostname, kernel, machine, cpu_model, cores, memory_bytes}, env, and the config's
name/backend/precision with --config."""
import os
import platform
import socket
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def git_sha():
    try:
        r = subprocess.run(["git", "-C", HERE, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        sha = r.stdout.strip() if r.returncode == 0 else "unknown"
        d = subprocess.run(["git", "-C", HERE, "--no-optional-locks", "status", "--porcelain",
                            "--untracked-files=no", "--", "."], capture_output=True, text=True, timeout=5)
        dirty = bool(d.stdout.strip()) if d.returncode == 0 else None
        return sha or "unknown", dirty
    except (OSError, subprocess.SubprocessError):
        return "unknown", None


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def mem_bytes():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def _nccl_version():
    try:
        import torch
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)
    except Exception:
        return None


def info(cfg=None):
    import torch
    sha, dirty = git_sha()
    cuda = None
    cuda_error = None
    if torch.cuda.is_available():
        devs = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            uuid = str(getattr(p, "uuid", "")) or ""
            devs.append({"index": i, "name": p.name, "uuid": ("GPU-" + uuid) if uuid and not uuid.startswith("GPU")
                         else uuid, "memory_bytes": p.total_memory, "sm": "sm_%d%d" % (p.major, p.minor),
                         "sm_count": p.multi_processor_count})
        driver = "unknown"
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=10)
            if r.returncode == 0 and r.stdout.strip():
                driver = r.stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError):
            pass
        cuda = {"runtime": torch.version.cuda or "unknown", "driver": driver, "cublas": None, "devices": devs}
    elif torch.version.cuda:
        cuda_error = "torch was built with CUDA %s but no device is usable" % torch.version.cuda
    out = {
        "trainer": "nsa-torch-train",
        "build": {"git_sha": sha, "git_dirty": dirty, "torch": torch.__version__, "python": platform.python_version(),
                  "cuda_enabled": bool(torch.version.cuda)},
        "cuda": cuda,
        "nccl": _nccl_version() if cuda else None,
        "mpi": None,
        "host": {"hostname": socket.gethostname(), "kernel": " ".join(platform.uname()[i] for i in (0, 2, 3)),
                 "machine": platform.machine(), "cpu_model": cpu_model(), "cores": os.cpu_count() or 1,
                 "memory_bytes": mem_bytes()},
        "env": {k: v for k, v in sorted(os.environ.items())
                if k.startswith(("NSA_", "NCCL_", "CUDA_", "OMPI_", "OMP_", "TORCH_"))},
    }
    if cuda_error:
        out["cuda_error"] = cuda_error
    if cfg is not None:
        out["config"] = {"name": cfg["name"], "seed": cfg["train"]["seed"], "backend": cfg["train"]["backend"],
                         "precision": cfg["train"]["precision"]}
    return out
