"""nsa_torch/ddp.py — data parallel with torch.distributed: the world from the env launcher's
variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), a gloo (CPU) or nccl
(GPU) process group whose timeout is --comm-timeout, DistributedDataParallel in the
config's ddp_mode (default; find_unused -> find_unused_parameters=True; static_graph ->
static_graph=True) with bucket_cap_mb = train.bucket_mb, and the small collectives of the
loop (the mean loss, the dump's gradients)."""
import datetime
import os


class WorldError(Exception):
    pass


class World:
    def __init__(self, transport, bootstrap, comm_timeout, rank_flag):
        self.transport = transport
        self.dist = transport in ("gloo", "nccl")
        self.comm_timeout = comm_timeout
        self.rank, self.size, self.local_rank = rank_flag, 1, 0
        if not self.dist:
            return
        if bootstrap not in ("env", "auto"):
            raise WorldError("--bootstrap %s: this trainer joins a world only from the env launcher's variables "
                             "(--bootstrap env)" % bootstrap)
        try:
            self.rank = int(os.environ["RANK"])
            self.size = int(os.environ["WORLD_SIZE"])
            self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            os.environ["MASTER_ADDR"]
            os.environ["MASTER_PORT"]
        except KeyError as e:
            raise WorldError("--transport %s needs the env launcher's variable %s (RANK, WORLD_SIZE, MASTER_ADDR, "
                             "MASTER_PORT)" % (transport, e.args[0]))
        except ValueError as e:
            raise WorldError("--transport %s: bad launcher variable: %s" % (transport, e))

    def join(self, rdzv_timeout=None):
        """The rendezvous and a barrier under the rendezvous timeout (--rdzv-timeout, default the
        larger of --comm-timeout and 60 s: ranks of a loaded machine may take seconds to import
        torch), then the group every later collective uses, under --comm-timeout."""
        import torch.distributed as dist
        rt = rdzv_timeout or max(self.comm_timeout, 60.0)
        dist.init_process_group(self.transport, init_method="env://", rank=self.rank, world_size=self.size,
                                timeout=datetime.timedelta(seconds=rt))
        dist.barrier()
        self.pg = dist.new_group(list(range(self.size)), timeout=datetime.timedelta(seconds=self.comm_timeout),
                                 backend=self.transport)

    def wrap(self, model, cfg):
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        mode = cfg["train"]["ddp_mode"]
        kw = {"find_unused_parameters": mode == "find_unused", "bucket_cap_mb": cfg["train"]["bucket_mb"],
              "broadcast_buffers": False, "process_group": self.pg}
        if mode == "static_graph":
            kw["static_graph"] = True
        if next(model.parameters()).is_cuda:
            kw["device_ids"] = [torch.cuda.current_device()]
        return DDP(model, **kw)

    def mean(self, x, device):
        import torch
        import torch.distributed as dist
        t = torch.tensor([x], dtype=torch.float64, device=device)
        dist.all_reduce(t, group=self.pg)
        return float(t[0]) / self.size

    def gather(self, obj):
        import torch.distributed as dist
        out = [None] * self.size
        dist.all_gather_object(out, obj, group=self.pg)
        return out

    def close(self, ok):
        if self.dist and ok:
            import torch.distributed as dist
            try:
                dist.destroy_process_group()
            except Exception:
                pass
