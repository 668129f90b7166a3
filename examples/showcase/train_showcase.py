#!/usr/bin/env python3
"""Train a small NSA language model.

    python3 train_showcase.py --config configs/tiny.yaml --dataset synthetic --steps 20
    torchrun --nproc-per-node 2 train_showcase.py --config configs/m7c.yaml

Environment:
    CONFIG                  YAML config when --config is not given
    NSA_FORCE_BRANCH        cmp|sel|win: run only that attention branch (gate bypassed)
    NSA_GC_RANGE            b:e  gradient checkpointing for layers b <= i < e
    NSA_PREFILL_BATCHED     1 (default) batched prefill, 0 token-by-token prefill with KV caches
    NSA_TRACE_GRADS         1: print the gradient norm of every parameter
    NSA_DDP_STATIC_GRAPH    1: DDP(static_graph=True)
    NSA_DDP_FIND_UNUSED     1: DDP(find_unused_parameters=True)
    TORCH_BACKEND           gloo|nccl (default nccl on CUDA, else gloo)
    SHOWCASE_BUGS           comma-separated experimental switches (see README)
"""

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch
import torch.distributed as dist
import torch.nn.functional as F
import yaml
from torch.nn.parallel import DistributedDataParallel as DDP

from nsa_model import KNOWN_BUGS, ModelArgs, NSATransformer, parse_bugs


def get_args():
    p = argparse.ArgumentParser(description="NSA LM trainer")
    p.add_argument("--config", default=None, help="YAML config (default: $CONFIG)")
    p.add_argument("--dataset", choices=["synthetic", "random"], default="synthetic")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--seq-len", type=int, default=None)
    p.add_argument("--n-layers", type=int, default=None)
    p.add_argument("--device", choices=["cpu", "cuda"], default=None)
    p.add_argument("--precision", choices=["fp32", "bf16"], default=None)
    p.add_argument("--log-every", type=int, default=1)
    p.add_argument("--save-dir", default="./runs/showcase",
                   help="where last.pt goes ('' = don't save)")
    return p.parse_args()


def load_config(args):
    path = args.config or os.environ.get("CONFIG")
    cfg = {}
    if path:
        with open(path) as f:
            cfg = yaml.safe_load(f) or {}
    mcfg = dict(cfg.get("model", {}))
    mcfg.update(cfg.get("nsa", {}))
    tcfg = dict(cfg.get("train", {}))
    for k in ("steps", "seed", "lr", "batch_size", "seq_len", "device", "precision"):
        v = getattr(args, k)
        if v is not None:
            tcfg[k] = v
    if args.n_layers is not None:
        mcfg["n_layers"] = args.n_layers
    return mcfg, tcfg


def env_flag(name, default="0"):
    return os.environ.get(name, default).strip().lower() in ("1", "true", "yes", "on")


# ----------------------------------------------------------------------------
# data


class SyntheticLM:
    """Noisy bigram chains: x[t+1] = table[x[t]] with prob 0.9, else uniform.

    The table is shared by all ranks (fixed by the seed); the stream is per rank.
    """

    def __init__(self, vocab, batch_size, seq_len, seed, rank, kind="synthetic"):
        self.V, self.B, self.T, self.kind = vocab, batch_size, seq_len, kind
        g = torch.Generator().manual_seed(seed)
        self.table = torch.randperm(vocab, generator=g)
        self.gen = torch.Generator().manual_seed(seed + rank)

    def next_batch(self):
        B, T, V, g = self.B, self.T, self.V, self.gen
        if self.kind == "random":
            return torch.randint(0, V, (B, T + 1), generator=g)
        x = torch.empty(B, T + 1, dtype=torch.long)
        x[:, 0] = torch.randint(0, V, (B,), generator=g)
        noise = torch.rand(B, T + 1, generator=g) < 0.1
        rnd = torch.randint(0, V, (B, T + 1), generator=g)
        for t in range(T):
            x[:, t + 1] = torch.where(noise[:, t + 1], rnd[:, t + 1], self.table[x[:, t]])
        return x


# ----------------------------------------------------------------------------


def lr_at(step, base_lr, warmup, total, min_ratio):
    if step < warmup:
        return base_lr * (step + 1) / warmup
    prog = (step - warmup) / max(1, total - warmup)
    return base_lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(prog, 1.0))))


def main():
    args = get_args()
    mcfg, tcfg = load_config(args)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    ddp = world > 1

    dev_name = tcfg.get("device", "auto")
    if dev_name in (None, "auto"):
        dev_name = "cuda" if torch.cuda.is_available() else "cpu"
    if dev_name == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")

    if ddp:
        backend = os.environ.get("TORCH_BACKEND") or ("nccl" if dev_name == "cuda" else "gloo")
        dist.init_process_group(backend=backend)
        rank, world = dist.get_rank(), dist.get_world_size()
    master = rank == 0

    steps = int(tcfg.get("steps", 20))
    seed = int(tcfg.get("seed", 1234))
    lr = float(tcfg.get("lr", 3e-3))
    B = int(tcfg.get("batch_size", 4))
    T = int(tcfg.get("seq_len", 128))
    warmup = int(tcfg.get("warmup", 5))
    precision = tcfg.get("precision", "fp32")
    clip = float(tcfg.get("grad_clip", 1.0))

    bugs = parse_bugs(os.environ.get("SHOWCASE_BUGS", ""))
    unknown = bugs - KNOWN_BUGS
    if unknown:
        raise SystemExit(f"unknown SHOWCASE_BUGS entries: {sorted(unknown)}")

    fields = ModelArgs.__dataclass_fields__
    # YAML reads "1e-5" as a string: cast to the field's type
    margs = ModelArgs(**{k: type(fields[k].default)(v) for k, v in mcfg.items() if k in fields and k != "bugs"},
                      bugs=bugs)

    torch.manual_seed(seed)
    model = NSATransformer(margs).to(device)

    gc = os.environ.get("NSA_GC_RANGE", "").strip()
    if gc:
        b, e = (int(s) for s in gc.split(":"))
        model.set_grad_checkpointing(b, e)
    batched = env_flag("NSA_PREFILL_BATCHED", "1")

    if master:
        n_params = sum(p.numel() for p in model.parameters())
        print(f"model: {margs.n_layers} layers, d_model {margs.d_model}, {n_params / 1e6:.2f}M params | "
              f"device {device} | world {world} | B {B} T {T} | precision {precision} | "
              f"prefill {'batched' if batched else 'sequential'} | "
              f"force_branch {os.environ.get('NSA_FORCE_BRANCH') or '-'} | gc {gc or '-'} | "
              f"bugs {','.join(sorted(bugs)) or '-'}", flush=True)

    if env_flag("NSA_TRACE_GRADS"):
        for name, p in model.named_parameters():
            p.register_hook(lambda g, n=name: print(f"grad {n} norm={g.float().norm().item():.4e}", flush=True))

    raw_model = model
    if ddp:
        kw = {}
        if env_flag("NSA_DDP_FIND_UNUSED"):
            kw["find_unused_parameters"] = True
        if env_flag("NSA_DDP_STATIC_GRAPH"):
            kw["static_graph"] = True
        model = DDP(model, device_ids=[local_rank] if dev_name == "cuda" else None, **kw)

    decay = [p for n, p in raw_model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in raw_model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([
        {"params": decay, "weight_decay": float(tcfg.get("weight_decay", 0.1))},
        {"params": no_decay, "weight_decay": 0.0},
    ], lr=lr, betas=tuple(float(b) for b in tcfg.get("betas", (0.9, 0.95))), eps=1e-8)

    data = SyntheticLM(margs.vocab_size, B, T, seed, rank, args.dataset)
    use_amp = precision == "bf16"

    model.train()
    for step in range(1, steps + 1):
        t0 = time.time()
        cur_lr = lr_at(step - 1, lr, warmup, steps, float(tcfg.get("min_lr_ratio", 0.1)))
        for g in opt.param_groups:
            g["lr"] = cur_lr

        batch = data.next_batch().to(device)
        inputs, targets = batch[:, :-1], batch[:, 1:]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_amp):
            logits = model(inputs, batched=batched)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))

        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(raw_model.parameters(), clip)
        opt.step()

        if device.type == "cuda":
            torch.cuda.synchronize()
        ms = (time.time() - t0) * 1000
        if master and (step % args.log_every == 0 or step == steps):
            print(f"step {step} | loss {loss.item():.4f} | lr {cur_lr:.2e} | {ms:.1f} ms", flush=True)

    if master and args.save_dir:
        os.makedirs(args.save_dir, exist_ok=True)
        torch.save({"model": raw_model.state_dict(), "step": steps,
                    "model_args": {k: getattr(margs, k) for k in fields if k != "bugs"}},
                   os.path.join(args.save_dir, "last.pt"))
        print(f"saved {os.path.join(args.save_dir, 'last.pt')}", flush=True)

    if ddp:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
