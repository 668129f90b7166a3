"""nsa_torch — a PyTorch NSA trainer speaking the nsa-harness trainer protocol (version 2).

Modules, one concern each: cli (flags, dispatch), protocol (the handshake), faults (the
fault table and hooks), config (the resolved config), data (token-identical to
trainer/data.c), stio (safetensors), attention (the three NSA branches, batched and
decode), model (parameters, init, forward), train (the loop), ddp (torch.distributed),
diag (heartbeat, stacks, anomaly, traces, dumps), envinfo (--print-env)."""
