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

It also follows the job's checkpoint cadence (docs/recovery.md): every ``interval_s`` seconds
(default ``$HPCLAUNCH_CHECKPOINT_INTERVAL_S``, which hpclaunch sets from the failure rate; none when
unset) rank 0's clock makes every rank save ``hpc_ckpt_<N>.ckpt`` at one batch end and train on (the
newest ``keep`` are kept), so that a restart after a dead node or a hang resumes from there; and each
rank writes step records to ``$HPCLAUNCH_RUN_DIR/metrics/rank<R>.jsonl`` every ``log_every`` batches
(hpclaunch.metrics/1: what hang detection measures a rank's pace by) and each checkpoint's cost.
"""
from __future__ import annotations

import logging
import os
import re
import sys
import time
from typing import Callable, Optional

from lightning.pytorch.callbacks import Callback  # this module is imported by Lightning programs only

from hpclaunch.common.checkpoint_interval import interval_s as daly_interval

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
                 exit_fn: Callable[[int], None] = os._exit, interval_s: Optional[float] = None,
                 keep: int = 2, log_every: int = 10):
        if every_n_batches < 1:
            raise ValueError(f"every_n_batches={every_n_batches!r}: use 1 or more")
        if keep < 1 or log_every < 0:
            raise ValueError(f"keep={keep!r}, log_every={log_every!r}: keep at least 1, log_every 0 (off) or more")
        self.every_n_batches = every_n_batches
        self.flag_interval_s = flag_interval_s
        self._exit = exit_fn  # os._exit: no interpreter teardown after the checkpoint (torch 2.13's DDP abort)
        self._stop: Optional[StopRequest] = None
        self._batches = 0
        if interval_s is None:
            text = os.environ.get("HPCLAUNCH_CHECKPOINT_INTERVAL_S", "")
            interval_s = float(text) if text.replace(".", "", 1).isdigit() else None
        self.interval_s = interval_s or None
        self._mtbf = None
        if self.interval_s is not None and os.environ.get("HPCLAUNCH_MTBF_S", "").isdigit():
            self._mtbf = float(os.environ["HPCLAUNCH_MTBF_S"]) or None   # auto: retuned with the measured cost
        self._costs: list = []
        self.keep, self.log_every = keep, log_every
        self._saved_at = time.monotonic()
        self._metrics = None
        self._since = (0, time.perf_counter())   # batches since the last step record, and when it was

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit" or self._stop is not None:
            return
        run_dir = os.environ.get("HPCLAUNCH_RUN_DIR")
        self._stop = StopRequest(os.environ.get("HPCLAUNCH_REQUEUE_FLAG"),
                                 os.path.join(run_dir, ".hpclaunch") if run_dir else None,
                                 min_interval_s=self.flag_interval_s)
        name = os.environ.get("HPCLAUNCH_REQUEUE_SIGNAL") or "USR2"
        self._stop.install(("SIG" + name.upper().removeprefix("SIG"),))
        self._saved_at = time.monotonic()
        if run_dir and self.log_every:
            from .metrics import MetricsWriter
            self._metrics = MetricsWriter(run_dir, trainer.global_rank, {
                "world_size": trainer.world_size, "attempt": int(os.environ.get("HPCLAUNCH_ATTEMPT", "0") or 0),
                "job_name": os.environ.get("HPCLAUNCH_JOB_NAME"), "source": "lightning",
                "resumed_step": trainer.global_step}, tensorboard=False, mlflow=False)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit" and self._stop is not None:
            self._stop.uninstall()
            self._stop = None
        if stage == "fit" and self._metrics is not None:
            self._metrics.close()
            self._metrics = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if self._stop is None:
            return
        self._batches += 1
        self._record_steps(trainer)
        # Only where an optimizer step ended (not inside gradient accumulation), every n-th such
        # batch; every rank counts the same batches, so they all take part in the same all-reduce.
        if (batch_idx + 1) % max(1, trainer.accumulate_grad_batches) or self._batches % self.every_n_batches:
            return
        if trainer.strategy.reduce_boolean_decision(self._stop.local(), all=False):
            self._requeue(trainer)
        if self.interval_s is not None:
            due = trainer.is_global_zero and time.monotonic() - self._saved_at >= self.interval_s
            if trainer.strategy.reduce_boolean_decision(due, all=False):
                self._checkpoint(trainer)

    def _record_steps(self, trainer) -> None:
        n, since = self._since
        n += 1
        if self._metrics is None or n < self.log_every:
            self._since = (n, since)
            return
        now = time.perf_counter()
        self._metrics.step(trainer.current_epoch, trainer.global_step, float("nan"), 0, (now - since) / n, None,
                           float("nan"), steps=n)   # pace only: loss and lr are Lightning's loggers' business
        self._since = (0, now)

    def _save_hpc(self, trainer) -> str:
        """Every rank takes part; rank 0 publishes hpc_ckpt_<N+1>.ckpt (a cut write is never the newest)."""
        folder = str(trainer.default_root_dir)
        names = None
        if trainer.is_global_zero:  # rank 0 names both; no "hpc_ckpt_" in the temporary name, as
            # Lightning resumes from any name that has it
            names = (next_hpc_path(folder), os.path.join(folder, f".requeue-partial-{os.getpid()}.ckpt"))
        path, part = trainer.strategy.broadcast(names)
        t0 = time.perf_counter()
        trainer.save_checkpoint(part)  # every rank (a collective inside); rank 0 writes
        if trainer.is_global_zero:
            os.replace(part, path)
            cost = time.perf_counter() - t0
            if self._metrics is not None:
                self._metrics.event("checkpoint", step=trainer.global_step, seconds=round(cost, 4))
            if self._mtbf is not None:
                self._costs = (self._costs + [cost])[-5:]
                self.interval_s = daly_interval(sorted(self._costs)[len(self._costs) // 2], self._mtbf)
        self._saved_at = time.monotonic()
        return path

    def _checkpoint(self, trainer) -> None:
        """The cadence's checkpoint: saved at this batch end, older ones beyond `keep` removed."""
        path = self._save_hpc(trainer)
        if trainer.is_global_zero:
            folder = os.path.dirname(path)
            found = sorted((int(m.group(1)), m.group(0)) for m in map(_HPC.fullmatch, os.listdir(folder)) if m)
            for _, name in found[:-self.keep]:
                try:
                    os.unlink(os.path.join(folder, name))
                except OSError:
                    pass
            log.info("checkpoint %s at step %d (every %g s)", path, trainer.global_step, self.interval_s)
        trainer.strategy.barrier("hpclaunch-checkpoint")

    def _requeue(self, trainer) -> None:
        stop, code = self._stop, requeue_exit_code()
        path = self._save_hpc(trainer)
        if trainer.is_global_zero:
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
        if self._metrics is not None:
            self._metrics.close()
        sys.stdout.flush()
        sys.stderr.flush()
        self._exit(code)


__all__ = ["RequeueCallback", "next_hpc_path"]
