"""Requeue for PyTorch Lightning programs, without checkpointing inside a signal handler.

Lightning's own auto-requeue (``SLURMEnvironment``) saves its checkpoint, a barrier included, inside
the SIGUSR1 handler (Lightning-AI/pytorch-lightning#21406). A rank that waits in a gradient
all-reduce when its signal arrives cannot run that handler, while the other rank waits in the
checkpoint's barrier: the job hangs until its time limit (seen in this project's CI). This callback
does what train_entry does instead (``signals.py``): the signal, or hpclaunch's
``$HPCLAUNCH_REQUEUE_FLAG`` file, only sets a flag; at a batch end every rank takes part in one
boolean all-reduce, so they all stop at the same step; they save ``hpc_ckpt_<N>.ckpt`` (written
under another name, then renamed: a cut write never becomes the newest checkpoint), and exit with
``$HPCLAUNCH_REQUEUE_EXIT`` (75). hpclaunch requeues the job (``requeue.by: hpclaunch``, the
default) and Lightning resumes from the newest ``hpc_ckpt_<N>.ckpt`` in ``default_root_dir`` on the
next attempt (it does so on Slurm by itself).

    from lightning.pytorch.plugins.environments import SLURMEnvironment
    from hpclaunch.train_entry.lightning_requeue import RequeueCallback

    trainer = Trainer(default_root_dir=os.environ["HPCLAUNCH_RUN_DIR"], ...,
                      plugins=[SLURMEnvironment(auto_requeue=False)], callbacks=[RequeueCallback()])

Without ``requeue.signal_ranks`` the ranks see the flag file at most ``flag_interval_s`` late (a
stat a second, on a shared file system); with it, the signal (``$HPCLAUNCH_REQUEUE_SIGNAL``, USR2 by
default) is seen at the next batch end. Only that signal is handled here: SIGTERM stays Lightning's.
"""
from __future__ import annotations

import logging
import os
import re
import sys
import time
from typing import Callable, Optional

from lightning.pytorch.callbacks import Callback  # this module is imported by Lightning programs only

from .signals import StopRequest, requeue_exit_code, write_requeue_marker

log = logging.getLogger("hpclaunch.train_entry.lightning")
_HPC = re.compile(r"hpc_ckpt_(\d+)\.ckpt")


def next_hpc_path(folder: str) -> str:
    """``folder/hpc_ckpt_<N+1>.ckpt`` after the highest N there: the name Lightning resumes from."""
    try:
        names = os.listdir(folder)
    except OSError:
        names = []
    n = max((int(m.group(1)) for m in map(_HPC.fullmatch, names) if m), default=0)
    return os.path.join(folder, f"hpc_ckpt_{n + 1}.ckpt")


class RequeueCallback(Callback):
    """Stops every rank at the same batch end once a requeue is asked for, saves, exits 75."""

    def __init__(self, every_n_batches: int = 1, flag_interval_s: float = 1.0,
                 exit_fn: Callable[[int], None] = os._exit):
        if every_n_batches < 1:
            raise ValueError(f"every_n_batches={every_n_batches!r}: use 1 or more")
        self.every_n_batches = every_n_batches
        self.flag_interval_s = flag_interval_s
        self._exit = exit_fn  # os._exit: no interpreter teardown after the checkpoint (torch 2.13's DDP abort)
        self._stop: Optional[StopRequest] = None
        self._batches = 0

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit" or self._stop is not None:
            return
        run_dir = os.environ.get("HPCLAUNCH_RUN_DIR")
        self._stop = StopRequest(os.environ.get("HPCLAUNCH_REQUEUE_FLAG"),
                                 os.path.join(run_dir, ".hpclaunch") if run_dir else None,
                                 min_interval_s=self.flag_interval_s)
        name = os.environ.get("HPCLAUNCH_REQUEUE_SIGNAL") or "USR2"
        self._stop.install(("SIG" + name.upper().removeprefix("SIG"),))

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit" and self._stop is not None:
            self._stop.uninstall()
            self._stop = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if self._stop is None:
            return
        self._batches += 1
        # Only where an optimizer step ended (not inside gradient accumulation), every n-th such
        # batch; every rank counts the same batches, so they all take part in the same all-reduce.
        if (batch_idx + 1) % max(1, trainer.accumulate_grad_batches) or self._batches % self.every_n_batches:
            return
        if trainer.strategy.reduce_boolean_decision(self._stop.local(), all=False):
            self._requeue(trainer)

    def _requeue(self, trainer) -> None:
        stop, code = self._stop, requeue_exit_code()
        folder = str(trainer.default_root_dir)
        names = None
        if trainer.is_global_zero:  # rank 0 names both; no "hpc_ckpt_" in the temporary name, as
            # Lightning resumes from any name that has it
            names = (next_hpc_path(folder), os.path.join(folder, f".requeue-partial-{os.getpid()}.ckpt"))
        path, part = trainer.strategy.broadcast(names)
        trainer.save_checkpoint(part)  # every rank (a collective inside); rank 0 writes
        if trainer.is_global_zero:
            os.replace(part, path)
            stop.mark_served(trainer.global_step)
            run_dir = os.environ.get("HPCLAUNCH_RUN_DIR")
            if run_dir:
                write_requeue_marker(run_dir, {"step": trainer.global_step, "checkpoint": path,
                                               "reason": stop.reason, "time_unix": time.time()})
            log.warning("requeue requested (%s): checkpoint %s written at step %d; exiting %d",
                        stop.reason or "another rank", path, trainer.global_step, code)
        trainer.strategy.barrier("hpclaunch-requeue")  # the checkpoint is in place before anyone exits
        for lg in trainer.loggers:
            try:
                lg.finalize("requeue")
            except Exception as exc:  # a logger must not keep the job from requeueing
                log.warning("logger %s: %s", type(lg).__name__, exc)
        sys.stdout.flush()
        sys.stderr.flush()
        self._exit(code)


__all__ = ["RequeueCallback", "next_hpc_path"]
