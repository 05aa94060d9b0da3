"""ZeRO stages 0-3 on PyTorch's own sharding: what ``--zero`` maps to, and the state each rank keeps.

| stage | PyTorch | per rank at rest (P params, G grads, O optimizer state, N ranks) | per step |
|---|---|---|---|
| 0 | DistributedDataParallel | P + G + O | all-reduce G |
| 1 | DDP + ZeroRedundancyOptimizer | P + G + O/N (whole parameters' state per rank) | all-reduce G, broadcast P |
| 2 | FSDP2 ``fully_shard(reshard_after_forward=False)`` | (P + G + O)/N; all of P from forward to the end of backward | all-gather P, reduce-scatter G |
| 3 | FSDP2 ``fully_shard(reshard_after_forward=True)`` | (P + G + O)/N; a block's P only while it runs | all-gather P twice, reduce-scatter G |

Why these: ZeroRedundancyOptimizer is PyTorch's ZeRO-1 (the optimizer state partitioned, whole
parameters per rank). DDP always holds whole gradients (its buckets), so PyTorch has no sharded
gradient under DDP: stage 2 is FSDP2 keeping the gathered parameters from forward through
backward (FSDP1 called this SHARD_GRAD_OP, "ZeRO-2"): gradients are reduce-scattered and each rank
steps its shard, with DDP's traffic (one all-gather + one reduce-scatter = one all-reduce); stage 3
also frees each block's parameters after its forward and gathers them again for backward. FSDP2
shards every block of a ``ModuleList``/``Sequential`` (the transformer's blocks, the MLP's layers)
separately, then the root: one block is whole at a time.

Under stages 2-3 gradients are reduce-scattered at every micro-batch (no ``no_sync``): FSDP2's
``set_requires_gradient_sync(False)`` would accumulate whole gradients, undoing the saving.
bf16/fp16 add FSDP2's MixedPrecisionPolicy (parameters gathered in that dtype, gradients reduced in
fp32) to the autocast every stage uses. ``--offload params`` is FSDP2's CPUOffloadPolicy: sharded
parameters, gradients and optimizer state in host memory, the optimizer step on the CPU.

Every launcher that gives torch.distributed a process group works (torchrun, srun, mpirun:
distenv.py); Horovod has no sharding and is refused with stages 1-3.
"""
from __future__ import annotations

import contextlib
from typing import Optional

import torch
from torch import nn

from .config import ConfigError


def plain(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's whole value (a collective: every rank calls it), other tensors as they are."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def local(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """This rank's shard of a DTensor, other tensors as they are."""
    return t.to_local() if hasattr(t, "to_local") else t


def shard_units(model: nn.Module) -> list:
    """The modules FSDP2 shards one by one before the root: the children (with parameters) of every
    ModuleList and Sequential, outermost first, not looking inside a module already chosen."""
    units: list = []

    def visit(module: nn.Module) -> None:
        container = isinstance(module, (nn.ModuleList, nn.Sequential))
        for child in module.children():
            if container and any(True for _ in child.parameters()):
                units.append(child)
            else:
                visit(child)

    visit(model)
    return units


def nbytes(tensors) -> int:
    """Bytes this rank holds of these tensors (a DTensor's local shard)."""
    total = 0
    for t in tensors:
        t = local(t)
        if isinstance(t, torch.Tensor):
            total += t.numel() * t.element_size()
    return total


class Sharding:
    """The training loop's view of a ZeRO stage: shard the model, build the optimizer, wrap for
    data parallelism, skip gradient syncs, and count what each rank holds."""

    def __init__(self, stage: int, offload: str, dist, precision: str):
        if stage and dist.backend == "horovod":
            raise ConfigError(f"--zero {stage} needs a torch.distributed process group: Horovod has no sharding "
                              "(use launcher torchrun, srun or mpi, or --zero 0)")
        self.stage, self.offload, self.dist = stage, offload, dist
        self.amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)

    @property
    def fsdp(self) -> bool:
        return self.stage >= 2

    def shard(self, model: nn.Module) -> nn.Module:
        """Stages 2-3: FSDP2 on each unit, then the root, in place (the parameters become DTensors,
        so the optimizer is built afterwards). Stages 0-1: the model as it is."""
        if not self.fsdp:
            return model
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

        kwargs = {"reshard_after_forward": self.stage == 3}
        if self.amp is not None:
            kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=self.amp, reduce_dtype=torch.float32)
        if self.offload == "params":
            kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=self.dist.device.type == "cuda")
        for unit in shard_units(model):
            fully_shard(unit, **kwargs)
        fully_shard(model, **kwargs)
        return model

    def optimizer(self, model: nn.Module, cls, **kwargs):
        """``cls(params, **kwargs)``; stage 1: inside ZeroRedundancyOptimizer, which gives each rank
        whole parameters' optimizer state (about 1/N of it) and broadcasts what it updated."""
        params = [p for p in model.parameters() if p.requires_grad]
        if self.stage == 1:
            from torch.distributed.optim import ZeroRedundancyOptimizer

            return ZeroRedundancyOptimizer(params, optimizer_class=cls, **kwargs)
        return cls(params, **kwargs)

    def wrap(self, model: nn.Module) -> nn.Module:
        """Stages 0-1: DDP (after resume, as before); 2-3: FSDP2 already is the data parallelism."""
        return model if self.fsdp else self.dist.wrap_model(model)

    def no_sync(self, dmodel: nn.Module, last_micro_step: bool):
        return contextlib.nullcontext() if self.fsdp else self.dist.no_sync(dmodel, last_micro_step)

    def forward_module(self, dmodel: nn.Module) -> nn.Module:
        """What validation runs: DDP's inner module (no collectives), or the FSDP2 root (which gathers)."""
        return dmodel.module if isinstance(dmodel, nn.parallel.DistributedDataParallel) else dmodel

    def reshard(self, model: nn.Module) -> None:
        """Stage 2 keeps the parameters gathered after a forward until its backward; a validation
        forward has no backward, so they are freed here (a checkpoint reads the sharded ones)."""
        if self.stage == 2:
            for module in model.modules():
                if hasattr(module, "reshard") and hasattr(module, "unshard"):   # FSDPModule
                    module.reshard()

    def state_bytes(self, model: nn.Module, optimizer) -> dict:
        """Bytes of parameters, gradients and optimizer state this rank holds (its shards), from the
        tensors themselves."""
        params = list(model.parameters())
        inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer: this rank's local optimizer
        state = [v for s in inner.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
        return {"params": nbytes(params), "grads": nbytes(p.grad for p in params), "optimizer": nbytes(state)}
