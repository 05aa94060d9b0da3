"""A trial's intermediate values, read from what its program writes, as (step, value) pairs.

Two sources, followed by offset while the program runs (a line counts once its newline is
written, as every reader of metrics records here):

- train_entry's `metrics/rank0.jsonl` (hpclaunch.metrics/1, docs/train-entry.md): each `epoch`
  record with the metric is one value, at step = the epoch (numbered from 0); the training steps
  run are the largest `step` of any record.
- the report file (`metrics/tune.jsonl`, HPCLAUNCH_TUNE_REPORT): one JSON object a line,
  `{"step": N, "value": X}` (or the metric's name instead of `value`), from hpclaunch.tune.report
  or any program that appends such lines; its steps run are the largest step reported.
"""
from __future__ import annotations

import json
import math
import os
from typing import Iterator, List, Optional, Tuple

TRAIN_ENTRY_FILE = os.path.join("metrics", "rank0.jsonl")
REPORT_FILE = os.path.join("metrics", "tune.jsonl")
# A line longer than this is not a record (a program writing something else there): skipped.
MAX_LINE = 1 << 16


class Follow:
    """The complete new lines of a growing file, as parsed JSON objects."""

    def __init__(self, path: str):
        self.path = path
        self.offset = 0
        self.partial = b""

    def records(self) -> Iterator[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(1 << 22)
        except OSError:
            return
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        if len(self.partial) > MAX_LINE:
            self.partial = b""
        for line in lines:
            if not line.strip() or len(line) > MAX_LINE:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                yield rec


def _number(value) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _step(value) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class TrialValues:
    """Follows both sources of one task's run directory for `metric`."""

    def __init__(self, run_dir: str, metric: str):
        self.metric = metric
        self.train = Follow(os.path.join(run_dir, TRAIN_ENTRY_FILE))
        self.helper = Follow(os.path.join(run_dir, REPORT_FILE))
        self.steps = 0          # training steps run (train_entry) or the last step reported
        self.last: Optional[Tuple[int, float]] = None

    def new(self) -> List[Tuple[int, float]]:
        """The (step, value) pairs written since the last call, in order."""
        out: List[Tuple[int, float]] = []
        for rec in self.train.records():
            step = _step(rec.get("step"))
            if step is not None:
                self.steps = max(self.steps, step)
            if rec.get("kind") == "epoch":
                epoch, value = _step(rec.get("epoch")), _number(rec.get(self.metric))
                if epoch is not None and value is not None:
                    out.append((epoch, value))
        for rec in self.helper.records():
            step = _step(rec.get("step"))
            value = _number(rec.get(self.metric, rec.get("value")))
            if step is not None and value is not None:
                self.steps = max(self.steps, step)
                out.append((step, value))
        if out:
            self.last = out[-1]
        return out
