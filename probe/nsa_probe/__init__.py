"""nsa_probe: an unmodified PyTorch training script under nsa-harness (docs/trainer-maps.md).

Two ways in:
  python -m nsa_probe --map MAP SCRIPT ARGS...        (or torchrun ... -m nsa_probe ...)
  probe = nsa_probe.attach(model, optimizer, map="trainer.map.json", out="probe_out")
  ... loss.backward(); optimizer.step(); probe.step(loss)

Both write the same files. Importing this package imports no torch; `attach` does.
"""

__all__ = ["attach"]


def attach(model, optimizer=None, map=None, out=None, heartbeat=None, stack_file=None, trace_grads=True,
           gate_stats=True, dump_step=None, faults=(), anomaly=True, config=None, rank=None):
    """Install the probe on `model` (and `optimizer`) from inside the script; returns the probe.

    `map`: a trainer map's path (module roles: layers, branches, gate) or None. `out`: where the
    files go (default $NSA_PROBE_OUT, else nsa_probe_out). Call `probe.step(loss)` after each
    optimizer step; with the optimizer attached the step is also seen by itself and
    `step(loss)` only records the loss."""
    import os
    from .mapfile import TrainerMap
    from .runtime import Options, Probe
    from .__main__ import setup_stacks
    tmap = TrainerMap(map) if isinstance(map, str) else map
    opts = Options(out=out or os.environ.get("NSA_PROBE_OUT"), rank=rank, heartbeat=heartbeat,
                   stack_file=stack_file, trace_grads=trace_grads, gate_stats=gate_stats and bool(tmap and tmap.gate),
                   dump_step=dump_step, faults=faults, anomaly=anomaly, config=config)
    setup_stacks(opts.stack_file)
    probe = Probe(tmap, opts)
    probe.install(wrap_optimizers=False)
    probe._adopt_root(model)
    if optimizer is not None:
        probe._adopt_optimizer(optimizer)
    return probe
