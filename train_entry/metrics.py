"""Per-rank metrics: ``metrics/rank<N>.jsonl`` (schema hpclaunch.metrics/1). Step records are flushed
at most once a second (a flush per step is a syscall on every step); every other record at once.

TensorBoard (``torch.utils.tensorboard``, needs the ``tensorboard`` package) and MLflow
(local file store under ``<run_dir>/mlruns``) are used by rank 0 only when importable.
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
from typing import Optional

SCHEMA = "hpclaunch.metrics/1"
log = logging.getLogger("hpclaunch.train_entry")


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None   # JSON has no NaN/inf; null = "not finite"
    return v


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


class MetricsWriter:
    def __init__(self, run_dir: str, rank: int, header: dict, tensorboard: bool = True, mlflow: bool = True):
        self.rank = rank
        d = os.path.join(run_dir, "metrics")
        os.makedirs(d, exist_ok=True)
        self.path = os.path.join(d, f"rank{rank}.jsonl")
        self._f = open(self.path, "a", buffering=1 << 16)
        if self._f.tell() and not _ends_with_newline(self.path):
            # A killed attempt's cut last record: end its line (it stays unparsable and skipped),
            # or this attempt's header would be glued to it and lost with it.
            self._f.write("\n")
        self._flushed = 0.0
        self._write({"kind": "header", "schema": SCHEMA, "time_unix": time.time(), "rank": rank, **header})
        self._tb = self._mlflow = None
        if rank == 0 and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

                self._tb = SummaryWriter(os.path.join(run_dir, "tensorboard"))
            except Exception as exc:  # ImportError, or tensorboard missing underneath
                log.debug("tensorboard off: %s", exc)
        if rank == 0 and mlflow:
            try:
                import mlflow

                mlflow.set_tracking_uri("file:" + os.path.join(os.path.abspath(run_dir), "mlruns"))
                mlflow.start_run(run_name=header.get("job_name") or "train")
                mlflow.log_params({k: v for k, v in header.get("config", {}).items() if v is not None})
                self._mlflow = mlflow
            except Exception as exc:
                log.debug("mlflow off: %s", exc)

    FLUSH_EVERY_S = 1.0

    def _write(self, rec: dict, lazy: bool = False) -> None:
        self._f.write(json.dumps({k: _clean(v) for k, v in rec.items()}, separators=(",", ":")) + "\n")
        now = time.monotonic()
        if not lazy or now - self._flushed >= self.FLUSH_EVERY_S:
            self._f.flush()
            self._flushed = now

    def step(self, epoch: int, step: int, loss: float, samples: int, step_time_s: float,
             grad_norm: Optional[float], lr: float, steps: int = 1, **extra) -> None:
        """One record for the `steps` optimizer steps since the previous one (--log-every): `samples`
        is their sum on this rank, `loss` and `step_time_s` their means; `grad_norm` and `lr` are
        those of the last step."""
        busy = step_time_s * steps
        self._write({"kind": "step", "time_unix": time.time(), "rank": self.rank, "epoch": epoch, "step": step,
                     "steps": steps, "loss": loss, "samples_per_s": samples / busy if busy > 0 else None,
                     "step_time_s": step_time_s, "samples": samples, "grad_norm": grad_norm, "lr": lr, **extra},
                    lazy=True)
        if self._tb is not None:
            self._tb.add_scalar("train/loss", loss, step)
            self._tb.add_scalar("train/lr", lr, step)
            if grad_norm is not None:
                self._tb.add_scalar("train/grad_norm", grad_norm, step)
        if self._mlflow is not None:
            vals = {"loss": loss, "lr": lr, "grad_norm": _clean(grad_norm)}
            self._mlflow.log_metrics({k: v for k, v in vals.items() if v is not None}, step=step)  # no made-up 0

    def epoch(self, epoch: int, step: int, loss: float, accuracy: float, val_loss, val_accuracy, **extra) -> None:
        self._write({"kind": "epoch", "time_unix": time.time(), "rank": self.rank, "epoch": epoch, "step": step,
                     "loss": loss, "accuracy": accuracy, "val_loss": val_loss, "val_accuracy": val_accuracy,
                     **extra})
        if self._tb is not None:
            self._tb.add_scalar("epoch/loss", loss, step)
            if val_accuracy is not None:
                self._tb.add_scalar("epoch/val_accuracy", val_accuracy, step)
                self._tb.add_scalar("epoch/val_loss", val_loss, step)
        if self._mlflow is not None:
            vals = {"epoch_loss": loss, "accuracy": accuracy}
            if val_accuracy is not None:
                vals.update(val_loss=val_loss, val_accuracy=val_accuracy)
            self._mlflow.log_metrics({k: _clean(v) for k, v in vals.items() if _clean(v) is not None}, step=step)

    def event(self, kind: str, **fields) -> None:
        self._write({"kind": kind, "time_unix": time.time(), "rank": self.rank, **fields})

    def close(self) -> None:
        self._f.close()
        if self._tb is not None:
            self._tb.close()
        if self._mlflow is not None:
            try:
                self._mlflow.end_run()
            except Exception:
                pass


def read_metrics(path: str) -> list:
    """The records (JSON objects) of one file. A record counts only once its newline is written:
    a last line without one (a killed writer's, or one still being written) is skipped even when
    it parses, since a cut can leave valid JSON (a number cut short), as the monitors' readers do."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.endswith("\n"):
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):  # RecursionError: a line nested a thousand deep
                continue
            if isinstance(rec, dict):
                out.append(rec)
    return out
