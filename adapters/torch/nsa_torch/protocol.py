"""nsa_torch/protocol.py — the capability handshake (--protocol-info), printed before
torch is imported (docs/trainer-protocol.md). Every list is what this trainer implements;
the fault names come from the fault table (faults.FAULTS)."""
import json

from nsa_torch import faults

PROTOCOL = 2
TRAINER = "nsa-torch-train"
VERSION = "0.1"

DIAGNOSTICS = ["trace_grads", "gate_stats", "dump_step", "dump_acts", "dump_tensors", "heartbeat", "stack_dump",
               "log_file", "anomaly", "init_weights"]


def info():
    return {
        "protocol": PROTOCOL,
        "trainer": TRAINER,
        "version": VERSION,
        "features": {
            "backends": ["cpu", "cpu64", "cuda"],
            "precisions": ["fp32", "fp64", "bf16"],
            "transports": ["none", "gloo", "nccl"],
            "bootstraps": ["env"],
            "ddp_modes": ["default", "find_unused", "static_graph"],
            "prefill": ["batched", "sequential"],
            "data": ["synthetic", "learnable", "shards", "text"],
            "faults": [f.name for f in faults.FAULTS],
            "diagnostics": DIAGNOSTICS,
        },
    }


def print_info(out):
    out.write(json.dumps(info(), separators=(",", ":")) + "\n")
    out.flush()
