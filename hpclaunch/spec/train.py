"""The train: section's one schema, shared by `hpclaunch validate` (submit) and train_entry (the rank).

The `Train` record (keys, types, minimums, choices), the defaults the rank uses for a key nobody
sets, the learning-rate scaling, and the rules against the profile's limits. validate.py calls
`train_problems` with the job's world size (nodes x tasks_per_node), train_entry calls it with the
world it runs in, on the settings it will train with: the two cannot disagree.

Imports only hpclaunch.common and hpclaunch.spec.typedload: train_entry may import this module and
nothing else of the spec layer (docs/train-entry.md, "Limits: one schema at submit and on the rank").
"""
from __future__ import annotations

import math
import re
from typing import Any, List, Literal, Optional

from dataclasses import dataclass
from hpclaunch.spec.typedload import field, pattern_check

PRECISIONS = ("fp32", "bf16", "fp16")
LR_SCALINGS = ("none", "linear", "sqrt")
EXPORT_FORMATS = ("onnx",)
EXPORT_PRECISIONS = ("fp32", "fp16", "bf16")
ZERO_STAGES = (0, 1, 2, 3)
OFFLOADS = ("none", "params", "optimizer")
MODEL_SIZES = ("tiny", "small", "base", "large", "xl")

# What train_entry uses for a key that neither job.yaml nor its command line sets.
DEFAULTS: dict[str, Any] = {
    "epochs": 10, "batch_per_gpu": 64, "global_batch": None, "lr": 1e-3, "lr_scaling": "linear",
    "precision": "fp32", "seed": 0, "checkpoint_every": 0, "keep_checkpoints": 3,
    "async_checkpoint": True, "log_every": 10, "zero": 0, "offload": "none", "model_size": "small",
}


@dataclass
class Train:
    """Settings for hpclaunch.train_entry; checked against the profile's training limits."""

    epochs: Optional[int] = field(None, help="epochs to train", minimum=1)
    batch_per_gpu: Optional[int] = field(None, help="samples per device per micro-step", minimum=1)
    global_batch: Optional[int] = field(None, help="samples per optimizer step across all ranks", minimum=1)
    lr: Optional[float] = field(None, help="base learning rate", minimum=0)
    precision: Optional[Literal[PRECISIONS]] = field(None, help="mixed precision mode")
    seed: Optional[int] = field(None, help="job seed (each rank adds its rank)", minimum=0)
    checkpoint_every: Optional[int] = field(None, help="steps between checkpoints", minimum=1)
    keep_checkpoints: Optional[int] = field(None, help="checkpoints kept", minimum=1)
    async_checkpoint: Optional[bool] = field(None, help="fsync and publish checkpoints beside training "
                                             "(default true; false: the step waits)")
    log_every: Optional[int] = field(None, help="a step record every N optimizer steps (default 10)", minimum=1)
    export: Optional[List[Literal[EXPORT_FORMATS]]] = field(
        None, help="formats rank 0 exports the last checkpoint to at the end of the run (exports/ in the run "
                   "directory; needs hpclaunch[export])")
    export_precision: Optional[Literal[EXPORT_PRECISIONS]] = field(
        None, help="dtype of the exported graph (default fp32, also after mixed-precision training)")
    zero: Optional[Literal[ZERO_STAGES]] = field(
        None, help="ZeRO stage: 0 DDP (default); 1 optimizer state sharded (ZeroRedundancyOptimizer); 2 also "
                   "gradients (FSDP2, parameters kept gathered from forward to backward); 3 also parameters (FSDP2)")
    offload: Optional[Literal[OFFLOADS]] = field(
        None, help="params: FSDP2's CPUOffloadPolicy keeps the sharded parameters, gradients and optimizer state in "
                   "host memory (zero 2 or 3); optimizer alone is not offered by PyTorch")
    model: Optional[str] = field(
        None, help="the model: mlp (default), transformer, or module:factory (a function returning an nn.Module)",
        check=pattern_check(re.compile(r"mlp|transformer|[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", re.ASCII),
                            "is not mlp, transformer or module:factory", "e.g. transformer, or my_models:make"))
    model_size: Optional[Literal[MODEL_SIZES]] = field(
        None, help="size of the built-in transformer (model: transformer): tiny, small, base, large, xl")


def lr_factor(scaling: str, world_size: int) -> float:
    """How much the base learning rate is multiplied by for this many data-parallel ranks."""
    if scaling not in LR_SCALINGS:
        raise ValueError(f"lr scaling must be one of {', '.join(LR_SCALINGS)}, got {scaling!r}")
    return {"none": 1.0, "linear": float(world_size), "sqrt": math.sqrt(world_size)}[scaling]


def scaled_lr(lr: float, scaling: str, world_size: int) -> float:
    """The effective learning rate the optimizer uses: base lr x lr_factor."""
    return lr * lr_factor(scaling, world_size)


def train_problems(train: Any, world_size: Optional[int], limits: Any, lr_scaling: Optional[str],
                   profile: str = "") -> list[tuple[str, str, Any, str]]:
    """What breaks the profile's limits (or the batch arithmetic), as (path, message, value, fix).

    `train` has Train's attributes, `limits` max_epochs, max_batch_per_gpu and lr_range (the
    profile's Limits, or train_entry's). A value of None is not checked: not set, or already
    reported by its type check; so is what needs a world size when `world_size` is None or < 1.
    """
    out: list[tuple[str, str, Any, str]] = []
    who = f"profile '{profile}'" if profile else "the profile"
    epochs, batch, lr = train.epochs, train.batch_per_gpu, train.lr
    max_epochs, max_batch, lr_range = limits.max_epochs, limits.max_batch_per_gpu, limits.lr_range
    if epochs is not None and max_epochs is not None and epochs > max_epochs:
        out.append(("train.epochs", f"{who} allows at most {max_epochs} epochs", epochs,
                    f"use at most {max_epochs} (profile.limits.max_epochs={max_epochs})"))
    if batch is not None and max_batch is not None and batch > max_batch:
        out.append(("train.batch_per_gpu", f"{who} allows at most {max_batch} samples per device", batch,
                    f"use at most {max_batch} (profile.limits.max_batch_per_gpu={max_batch}), and "
                    f"train.global_batch (--global-batch) for a larger effective batch"))
    world = world_size if world_size is not None and world_size >= 1 else None
    scaling = lr_scaling or DEFAULTS["lr_scaling"]
    # The limit bounds the effective (scaled) learning rate, the one the optimizer steps with: that
    # is what a site's range protects, and the rank knows nothing else. validate computes it the
    # same way from nodes x tasks_per_node and profile.training.lr_scaling.
    if lr is not None and lr_range and world is not None and scaling in LR_SCALINGS:
        lo, hi = lr_range
        factor = lr_factor(scaling, world)
        effective = lr * factor
        if not lo <= effective <= hi:
            out.append(("train.lr", f"{who} allows learning rates in [{lo:g}, {hi:g}]", lr,
                        f"effective LR {effective:g} (base {lr:g} x {factor:g}: {scaling} scaling, world size "
                        f"{world}) is outside profile.limits.lr_range; use a base lr in "
                        f"[{lo / factor:g}, {hi / factor:g}]"))
    zero, offload = getattr(train, "zero", None), getattr(train, "offload", None)
    if offload == "optimizer":
        out.append(("train.offload", "PyTorch offers no optimizer-only offload: FSDP2's CPUOffloadPolicy moves the "
                    "parameters, gradients and optimizer state to host memory together", offload,
                    "use offload: params (with zero: 2 or 3)"))
    elif offload == "params" and zero is not None and zero < 2:
        out.append(("train.offload", f"offload needs FSDP2, which runs ZeRO stages 2 and 3; zero is {zero}", offload,
                    "set zero: 2 or 3, or leave offload unset"))
    if train.global_batch is not None and batch is not None and world is not None:
        per_step = batch * world
        if train.global_batch % per_step:
            out.append(("train.global_batch",
                        f"not a multiple of batch_per_gpu x world size = {batch} x {world}", train.global_batch,
                        f"use a multiple of {per_step}"))
    return out
