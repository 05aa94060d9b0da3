"""Resuming the reference trainer: the newest checkpoint that verifies and loads on every rank."""
from __future__ import annotations

import logging
import os
from typing import Optional

from . import checkpoint as ckpt
from .config import ConfigError
from .dist_init import Dist
from .manifest import BadCheckpoint, read_manifest

log = logging.getLogger("hpclaunch.train_entry")


def resume_newest(dist: Dist, store, model, opt, sched, scaler, state: dict) -> Optional[str]:
    """The newest checkpoint that verifies and loads on every rank; one that does not load (a
    pickle that would run code, a model of another shape) is named and the next older one is
    tried. Checkpoints that exist but none loads: one line, exit 2 (training from step 0 would
    bury them)."""
    rank, world = dist.rank, dist.world_size
    found: list = []
    if rank == 0:
        found, skipped = store.valid_checkpoints()
        for p, why in skipped:
            log.warning("checkpoint %s skipped: %s", p, why)
        if not found:
            log.info("no valid checkpoint in %s: starting from step 0", store.root)
    refused = []
    for i in range(dist.broadcast_int(len(found))):
        step = dist.broadcast_int(found[i][1]["step"] if rank == 0 else -1)
        path = store.step_dir(step)
        try:
            load_checkpoint(path, model, opt, sched, scaler, state, rank, world)
            error = None
        except ckpt.CheckpointError as exc:
            error = str(exc)
        if not dist.any(error is not None):
            if rank == 0:
                log.info("resuming from %s (newest loadable checkpoint: step %d, epoch %d, batch %d)",
                         path, state["step"], state["epoch"], state["batch_in_epoch"])
            return path
        if error:
            log.warning("checkpoint %s not used: %s", path, error)
        refused.append(path)
    if refused:
        raise ConfigError(f"{store.root}: no checkpoint here can be resumed ({len(refused)} refused, see the "
                          "warnings above) \u2014 move them aside, or start afresh with --no-resume")
    return None

def load_checkpoint(path: str, model, opt, sched, scaler, state: dict, rank: int, world: int) -> None:
    """One checkpoint into the model, optimizer, scheduler, scaler and the trainer's state; raises
    UnsafeCheckpoint when it does not fit (no pickle: checkpoint.torch_load loads weights only)."""
    try:  # again on every rank (only rank 0 verified it): bounded, its fields checked
        manifest = read_manifest(path)
    except (BadCheckpoint, OSError) as exc:
        raise ckpt.UnsafeCheckpoint(f"{path}: {exc}") from None
    weights = os.path.join(path, "model.safetensors")
    try:
        ckpt.load_weights(model, weights)
    except ckpt.UnsafeCheckpoint:
        raise
    except FileNotFoundError:  # not listed in its manifest, so not verified to be there
        raise ckpt.UnsafeCheckpoint(f"{path}: no model.safetensors") from None
    except (RuntimeError, ValueError, KeyError) as exc:
        why = ckpt.weights_mismatch(model, weights) or (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ckpt.UnsafeCheckpoint(f"the weights do not fit this model: {why[:200]} (another --hidden or "
                                    "--model than the run that wrote it?)") from None
    try:
        tr = ckpt.torch_load(os.path.join(path, "trainer.pt"))
    except FileNotFoundError:
        raise ckpt.UnsafeCheckpoint(f"{path}: no trainer.pt") from None
    try:
        opt.load_state_dict(tr["optimizer"])
        sched.load_state_dict(tr["scheduler"])
        scaler.load_state_dict(tr["scaler"])
        loaded = dict(tr["state"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise ckpt.UnsafeCheckpoint(f"trainer.pt does not fit this run ({str(exc)[:200]})") from None
    problem = _state_problem(loaded, manifest["step"])
    if problem:
        raise ckpt.UnsafeCheckpoint(f"{path}: trainer.pt's state {problem}")
    state.update(loaded)
    rng_path = os.path.join(path, f"rng-rank{rank}.pt")
    if manifest.get("world_size") != world:
        log.warning("checkpoint %s was written by %s ranks, now %d: restarting epoch %d from its first batch "
                    "(exact resume needs the same world size)", path, manifest.get("world_size"), world,
                    state["epoch"])
        state.update(batch_in_epoch=0, ep_loss=0.0, ep_correct=0.0, ep_count=0.0)
    try:
        rng = ckpt.torch_load(rng_path)
    except FileNotFoundError:
        log.warning("no RNG state for rank %d in %s; RNGs stay freshly seeded", rank, path)
        return
    try:
        ckpt.set_rng_state(rng)
    except (KeyError, TypeError, ValueError) as exc:
        raise ckpt.UnsafeCheckpoint(f"{rng_path}: not an RNG state ({exc})") from None


def _state_problem(loaded: dict, step: int) -> Optional[str]:
    """What is wrong with a trainer.pt's ``state`` (the counters the loop goes on from), or None."""
    for key in ("step", "epoch", "batch_in_epoch"):
        if not (isinstance(loaded.get(key), int) and not isinstance(loaded[key], bool) and loaded[key] >= 0):
            return f"has no whole number {key}"
    for key in ("ep_loss", "ep_correct", "ep_count"):
        if not isinstance(loaded.get(key), (int, float)) or isinstance(loaded[key], bool):
            return f"has no number {key}"
    if loaded["step"] != step:
        return f"is of step {loaded['step']}, its manifest of step {step}"
    return None
