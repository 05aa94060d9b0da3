"""Bring up the process group (gloo / NCCL) or Horovod, bind the device, seed RNGs.

``Dist`` hides the difference between torch.distributed and horovod.torch for the
trainer: collectives (sum, max, barrier), wrapping the model / optimizer and the
no_sync context for gradient accumulation. horovod is imported lazily; it is not
installed on the development machine, so the Horovod path is written against the
horovod 0.28 API but untested here.
"""
from __future__ import annotations

import contextlib
import datetime
import logging
import os
import random
import socket
from typing import Mapping, Optional

import numpy as np
import torch

from .distenv import DistEnv, DistEnvError, detect, resolve_master

log = logging.getLogger("hpclaunch.train_entry")


class DeviceMismatchError(RuntimeError):
    pass


def pick_device(d: DistEnv, env: Mapping[str, str], cuda_count: Optional[int] = None) -> str:
    """local rank -> GPU.  Fails fast when a node runs more ranks than it has GPUs.

    If the launcher already isolated one GPU per task (srun --gpus-per-task, a single
    entry in CUDA_VISIBLE_DEVICES), every rank uses cuda:0.
    """
    if cuda_count is None:
        cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if cuda_count == 0:
        return "cpu"
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    if cuda_count == 1 and visible and "," not in visible:
        return "cuda:0"
    if d.local_rank >= cuda_count or d.local_world_size > cuda_count:
        raise DeviceMismatchError(
            f"rank {d.rank}: local rank {d.local_rank} of {d.local_world_size} ranks on this node, but only "
            f"{cuda_count} GPU(s) visible (CUDA_VISIBLE_DEVICES={visible or '<unset>'}). "
            f"Start at most one rank per GPU (tasks_per_node / --nproc-per-node <= GPUs per node).")
    return f"cuda:{d.local_rank}"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def set_deterministic() -> None:
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


class Dist:
    """Process-group facade. ``backend`` is one of none, gloo, nccl, horovod."""

    def __init__(self, env: DistEnv, backend: str, device: torch.device, hvd=None):
        self.env = env
        self.backend = backend
        self.device = device
        self.hvd = hvd
        self.rank = env.rank
        self.world_size = env.world_size
        self.local_rank = env.local_rank

    # -- collectives -------------------------------------------------------------------------
    def _reduce(self, t: torch.Tensor, op: str) -> torch.Tensor:
        if self.backend == "none":
            return t
        if self.backend == "horovod":
            hop = self.hvd.Sum if op == "sum" else self.hvd.Max
            return self.hvd.allreduce(t, op=hop)
        import torch.distributed as dist

        t = t.clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
        return t

    def sum(self, values):
        """Sum a list of floats across ranks (float64)."""
        t = torch.tensor(list(values), dtype=torch.float64, device=self._coll_device())
        return self._reduce(t, "sum").cpu().tolist()

    def any(self, flag: bool) -> bool:
        if self.backend == "none":
            return bool(flag)
        t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=self._coll_device())
        return bool(self._reduce(t, "max").item())

    def any_start(self, flag: bool):
        """Start a non-blocking "any rank true?" reduction; finish it with ``any_wait``.

        The requeue agreement uses this so it adds no extra rendezvous of the ranks: by the time
        the result is awaited (k steps later) DDP's own all-reduces, queued behind it, have completed.
        """
        if self.backend in ("gloo", "nccl"):
            import torch.distributed as dist

            t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=self._coll_device())
            return t, dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True)
        return self.any(flag), None   # none / horovod: synchronous

    def any_wait(self, handle) -> bool:
        value, work = handle
        if work is None:
            return bool(value)
        work.wait()
        return bool(value.item())

    def flags_start(self, flags):
        """any_start for several flags at once: an elementwise "any rank true?" (one all-reduce)."""
        vals = [1 if f else 0 for f in flags]
        if self.backend == "none":
            return tuple(bool(v) for v in vals), None
        t = torch.tensor(vals, dtype=torch.int32, device=self._coll_device())
        if self.backend in ("gloo", "nccl"):
            import torch.distributed as dist

            return t, dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True)
        return tuple(bool(v) for v in self._reduce(t, "max").tolist()), None   # horovod: synchronous

    def flags_wait(self, handle) -> tuple:
        value, work = handle
        if work is None:
            return tuple(value)
        work.wait()
        return tuple(bool(v) for v in value.tolist())

    def flags(self, flags) -> tuple:
        return self.flags_wait(self.flags_start(flags))

    def broadcast_int(self, value: int) -> int:
        """Rank 0's value on every rank."""
        if self.backend == "none":
            return value
        v = value if self.rank == 0 else 0
        t = torch.tensor([v], dtype=torch.int64, device=self._coll_device())
        return int(self._reduce(t, "sum").item())

    def barrier(self) -> None:
        if self.backend == "none":
            return
        if self.backend == "horovod":
            self.hvd.barrier() if hasattr(self.hvd, "barrier") else self.hvd.allreduce(torch.zeros(1), name="barrier")
            return
        import torch.distributed as dist

        if self.backend == "nccl":
            dist.barrier(device_ids=[self.device.index])
        else:
            dist.barrier()

    def _coll_device(self):
        return self.device if self.backend == "nccl" else torch.device("cpu")

    # -- model / optimizer -------------------------------------------------------------------
    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        if self.backend in ("gloo", "nccl"):
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [self.device.index] if self.device.type == "cuda" else None
            return DDP(model, device_ids=ids)
        return model

    def wrap_optimizer(self, optimizer, model: torch.nn.Module, accum_steps: int):
        if self.backend != "horovod":
            return optimizer
        hvd = self.hvd
        optimizer = hvd.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters(), backward_passes_per_step=accum_steps)
        return optimizer

    def broadcast_initial_state(self, model, optimizer) -> None:
        """Horovod only (DDP broadcasts parameters itself when it wraps the model)."""
        if self.backend == "horovod":
            self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            self.hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    def no_sync(self, model, last_micro_step: bool):
        """Skip the gradient all-reduce on the non-final micro-steps of an accumulation."""
        if not last_micro_step and self.backend in ("gloo", "nccl"):
            return model.no_sync()
        return contextlib.nullcontext()  # horovod: backward_passes_per_step does it

    def synchronize_grads(self, optimizer) -> None:
        """Horovod reduces inside step(); force it before clipping / unscaling."""
        if self.backend == "horovod":
            optimizer.synchronize()

    def optimizer_step_context(self, optimizer):
        if self.backend == "horovod":
            return optimizer.skip_synchronize()
        return contextlib.nullcontext()

    def shutdown(self) -> None:
        if self.backend in ("gloo", "nccl"):
            import torch.distributed as dist

            if dist.is_initialized():
                try:
                    dist.destroy_process_group()
                except Exception as exc:  # at exit: say so, the run's result stands
                    log.warning("destroy_process_group failed: %s", exc)
        elif self.backend == "horovod":
            with contextlib.suppress(Exception):
                self.hvd.shutdown()


def init_distributed(env: Mapping[str, str] | None = None, backend: str = "auto",
                     timeout_s: float = 600.0, seed: int = 0, group_of_one: bool = False) -> Dist:
    """Detect the launch, initialise the process group, bind the device, seed, log one line.
    ``group_of_one``: a process started alone still gets a process group, of one rank (ZeRO
    stages 1-3 shard over one; DCP checkpoints the same way)."""
    env = dict(os.environ if env is None else env)
    d = detect(env)
    if backend == "horovod" and d.launcher != "horovod":
        d = detect({**env, "HPCLAUNCH_LAUNCHER": "horovod"})

    hvd = None
    if d.launcher == "horovod":
        try:
            import horovod.torch as hvd  # noqa: F811  (lazy, optional)
        except ImportError as exc:
            raise DistEnvError("launched by horovodrun but horovod.torch is not importable: "
                               "install hpclaunch[horovod] (see docs/train-entry.md)") from exc
        hvd.init()
        d = DistEnv("horovod", hvd.rank(), hvd.local_rank(), hvd.size(), hvd.local_size(),
                    hvd.cross_rank(), d.master_addr, d.master_port)

    device_str = pick_device(d, env)
    device = torch.device(device_str)
    if device.type == "cuda":
        torch.cuda.set_device(device)

    if d.launcher == "horovod":
        chosen = "horovod"
    elif not d.distributed and not group_of_one:
        chosen = "none"
    elif not d.distributed:
        import torch.distributed as dist

        chosen = backend if backend not in ("auto", "horovod") else ("nccl" if device.type == "cuda" else "gloo")
        dist.init_process_group(backend=chosen, store=dist.HashStore(), rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=timeout_s))
    else:
        chosen = backend if backend not in ("auto", "horovod") else ("nccl" if device.type == "cuda" else "gloo")
        if chosen == "nccl" and device.type != "cuda":
            raise DistEnvError("backend nccl requested but no CUDA device is visible; use gloo")
        import torch.distributed as dist

        if d.launcher != "torchrun":  # torchrun already exported MASTER_ADDR/PORT (and its store)
            addr, port = resolve_master(env)
            os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = addr, str(port)
            os.environ.setdefault("RANK", str(d.rank))
            os.environ.setdefault("WORLD_SIZE", str(d.world_size))
            os.environ.setdefault("LOCAL_RANK", str(d.local_rank))
        kwargs = {}
        if chosen == "nccl":
            kwargs["device_id"] = device
        dist.init_process_group(backend=chosen, init_method="env://", rank=d.rank, world_size=d.world_size,
                                timeout=datetime.timedelta(seconds=timeout_s), **kwargs)

    seed_everything(seed + d.rank)
    log.info("rank=%d local_rank=%d world_size=%d host=%s device=%s backend=%s launcher=%s",
             d.rank, d.local_rank, d.world_size, socket.gethostname(), device, chosen, d.launcher)
    return Dist(d, chosen, device, hvd)
