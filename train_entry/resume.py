"""Resuming the reference trainer: the newest checkpoint that verifies and loads on every rank."""
from __future__ import annotations

import logging
import os
from typing import Optional

from . import checkpoint as ckpt
from . import sharded_checkpoint as sharded
from .config import ConfigError
from .dist_init import Dist
from .manifest import BadCheckpoint, read_manifest

log = logging.getLogger("hpclaunch.train_entry")


def resume_newest(dist: Dist, store, model, opt, sched, scaler, state: dict, stage: int = 0,
                  global_batch: Optional[int] = None, accum_steps: int = 1) -> Optional[str]:
    """The newest checkpoint that verifies and loads on every rank; one that does not load (a
    pickle that would run code, a model of another shape) is named and the next older one is
    tried. Checkpoints that exist but none loads: one line, exit 2 (training from step 0 would
    bury them). ``stage``: this run's ZeRO stage (a sharded checkpoint loads into any stage, a
    whole-model one into stage 0); ``global_batch``, ``accum_steps``: this run's, to go on
    mid-epoch at another world size."""
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
        error, pending, loaded, manifest = None, None, None, {}
        try:  # what each rank checks alone (manifest, headers, shapes): no collective in it
            manifest = _manifest(path)
            if sharded.is_sharded(manifest):
                pending = sharded.prepare(path, manifest, model, opt, stage)
            else:
                loaded = _load_whole(path, model, opt, sched, scaler, stage)
        except ckpt.CheckpointError as exc:
            error = str(exc)
        if dist.any(error is not None):   # agreed first: a sharded load is collective
            error = error or "another rank refused it"
        elif pending is not None:
            try:
                loaded = sharded.load(pending, model, opt, sched, scaler, stage)
            except ckpt.CheckpointError as exc:
                error = str(exc)
        if error is None:
            try:
                _go_on(path, manifest, loaded, state, rank, world, global_batch, accum_steps)
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


def _manifest(path: str) -> dict:
    try:  # again on every rank (only rank 0 verified it): bounded, its fields checked
        return read_manifest(path)
    except (BadCheckpoint, OSError) as exc:
        raise ckpt.UnsafeCheckpoint(f"{path}: {exc}") from None


def _load_whole(path: str, model, opt, sched, scaler, stage: int) -> dict:
    """model.safetensors and trainer.pt into the model, optimizer, scheduler and scaler; returns the
    trainer state. UnsafeCheckpoint when it does not fit (no pickle: checkpoint.torch_load loads
    weights only)."""
    if stage:
        raise ckpt.UnsafeCheckpoint(f"{path}: a whole-model checkpoint (written with --zero 0) does not load into "
                                    f"--zero {stage}'s shards; resume it with --zero 0, or start afresh with "
                                    "--no-resume")
    weights = os.path.join(path, "model.safetensors")
    try:
        ckpt.load_weights(model, weights)
    except ckpt.UnsafeCheckpoint:
        raise
    except FileNotFoundError:  # not listed in its manifest, so not verified to be there
        raise ckpt.UnsafeCheckpoint(f"{path}: no model.safetensors") from None
    except (RuntimeError, ValueError, KeyError) as exc:
        why = ckpt.weights_mismatch(model, weights) or ckpt.first_line(exc)
        raise ckpt.UnsafeCheckpoint(f"the weights do not fit this model: {why} (another --hidden or "
                                    "--model than the run that wrote it?)") from None
    try:
        tr = ckpt.torch_load(os.path.join(path, "trainer.pt"))
    except FileNotFoundError:
        raise ckpt.UnsafeCheckpoint(f"{path}: no trainer.pt") from None
    try:
        opt.load_state_dict(tr["optimizer"])
        sched.load_state_dict(tr["scheduler"])
        scaler.load_state_dict(tr["scaler"])
        return dict(tr["state"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise ckpt.UnsafeCheckpoint(f"trainer.pt does not fit this run ({ckpt.first_line(exc)})") from None


def _go_on(path: str, manifest: dict, loaded: dict, state: dict, rank: int, world: int,
           global_batch: Optional[int], accum_steps: int) -> None:
    """The loop's counters and this rank's RNGs from a loaded checkpoint. At another world size the
    epoch goes on after the same step when the global batch is the same (every optimizer step then
    takes the same samples: DistributedSampler interleaves the ranks), else it restarts."""
    problem = _state_problem(loaded, manifest["step"])
    if problem:
        what = sharded.TRAINER if sharded.is_sharded(manifest) else "trainer.pt"
        raise ckpt.UnsafeCheckpoint(f"{path}: {what}'s state {problem}")
    if loaded.get("ep_sums") == "global":   # the epoch's sums over every rank: each rank takes its share
        for key in ("ep_loss", "ep_correct", "ep_count"):
            loaded[key] = loaded[key] / world
    loaded.pop("ep_sums", None)
    if manifest.get("world_size") != world:
        old_accum = manifest.get("accum_steps")
        if global_batch is not None and manifest.get("global_batch") == global_batch and isinstance(old_accum, int) \
                and old_accum > 0 and loaded["batch_in_epoch"] % old_accum == 0:
            loaded["batch_in_epoch"] = loaded["batch_in_epoch"] // old_accum * accum_steps
            log.info("checkpoint %s was written by %s ranks, now %d, with the same global batch %d: epoch %d goes on "
                     "after its step %d", path, manifest.get("world_size"), world, global_batch, loaded["epoch"],
                     loaded["batch_in_epoch"] // accum_steps)
        else:
            log.warning("checkpoint %s was written by %s ranks, now %d: restarting epoch %d from its first batch "
                        "(going on mid-epoch needs the same world size, or the same global batch)", path,
                        manifest.get("world_size"), world, loaded["epoch"])
            loaded.update(batch_in_epoch=0, ep_loss=0.0, ep_correct=0.0, ep_count=0.0)
    state.update(loaded)
    if sharded.is_sharded(manifest):
        found = sharded.set_rng_state_file(os.path.join(path, sharded.rng_name(rank)))
    else:
        found = _set_rng_pt(os.path.join(path, f"rng-rank{rank}.pt"))
    if not found:
        log.warning("no RNG state for rank %d in %s; RNGs stay freshly seeded", rank, path)


def _set_rng_pt(rng_path: str) -> bool:
    try:
        rng = ckpt.torch_load(rng_path)
    except FileNotFoundError:
        return False
    try:
        ckpt.set_rng_state(rng)
    except (KeyError, TypeError, ValueError) as exc:
        raise ckpt.UnsafeCheckpoint(f"{rng_path}: not an RNG state ({ckpt.first_line(exc)})") from None
    return True


def _state_problem(loaded: dict, step: int) -> Optional[str]:
    """What is wrong with a checkpoint's trainer ``state`` (the counters the loop goes on from), or None."""
    for key in ("step", "epoch", "batch_in_epoch"):
        if not (isinstance(loaded.get(key), int) and not isinstance(loaded[key], bool) and loaded[key] >= 0):
            return f"has no whole number {key}"
    for key in ("ep_loss", "ep_correct", "ep_count"):
        if not isinstance(loaded.get(key), (int, float)) or isinstance(loaded[key], bool):
            return f"has no number {key}"
    if loaded["step"] != step:
        return f"is of step {loaded['step']}, its manifest of step {step}"
    return None
