"""What a job's page shows of its run directory, kept current by reading only what the logs appended
(reports.follow): GPU power and temperature and host CPU and memory as time series, each rank's
latest step record (metrics/rank<R>.jsonl, docs/run-directory.md), and the job's alerts (alerts/*.jsonl,
docs/alerts.md): each episode's newest record.

Each series keeps at most MAX_POINTS points: past that, neighbouring points are averaged in pairs and
the generation changes, so every open page is sent the whole (thinned) series again; otherwise a
page is sent only the points it does not have yet.
"""
from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from typing import Dict, Optional, Tuple

import numpy as np

from hpclaunch.monitors.alert_log import alert_files, read_jsonl
from hpclaunch.reports import events, readers
from hpclaunch.reports.follow import CsvFollower, JsonlFollower
from hpclaunch.reports.metrics import rank_hosts

MAX_POINTS = 2000        # per series, what a browser draws without effort
UPDATE_S = 1.0           # the logs are read at most this often, however many pages follow the job
NOTES_S = 10.0           # the events logs (why a source is missing) at most this often
MAX_ALERTS = 100         # alert episodes a page shows, the newest
ALERT_FIELDS = ("time_unix", "event", "severity", "rule", "node", "gpu", "rank", "message", "first_seen", "last_seen")
RANK_FIELDS = ("step", "epoch", "loss", "samples_per_s", "step_time_s", "time_unix", "attempt")
CHARTS = {  # chart -> (log kind, column, scale)
    "power": ("gpu", "power_w", 1.0),
    "temp": ("gpu", "temp_c", 1.0),
    "cpu": ("host", "cpu_pct", 1.0),
    "mem": ("host", "mem_used_mib", 1 / 1024),   # GiB
}


class Series:
    def __init__(self) -> None:
        self.t = np.empty(0)
        self.y = np.empty(0)

    def extend(self, t: np.ndarray, y: np.ndarray) -> bool:
        """Append; True when the series was thinned to stay within MAX_POINTS."""
        self.t, self.y = np.concatenate([self.t, t]), np.concatenate([self.y, y])
        thinned = False
        while self.t.size > MAX_POINTS:
            self.t, self.y, thinned = _pairs(self.t), _pairs(self.y), True
        return thinned


def _pairs(a: np.ndarray) -> np.ndarray:
    """Means of neighbouring pairs (NaN only where both are; an odd last point stays)."""
    n = a.size // 2 * 2
    head = a[:n].reshape(-1, 2)
    ok = ~np.isnan(head)
    count = ok.sum(axis=1)
    means = np.where(count > 0, np.where(ok, head, 0.0).sum(axis=1) / np.maximum(count, 1), np.nan)
    return np.concatenate([means, a[n:]])


class JobLive:
    """One run directory's live view, shared by every page showing it (thread-safe)."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.generation = 0
        self.series: Dict[Tuple[str, str], Series] = {}
        self.ranks: Dict[int, dict] = {}
        self.header_attempt: Dict[int, int] = {}   # rank -> the attempt its newest header names
        self.bad_lines = 0
        self.notes: list = []
        self._followers: Dict[str, object] = {}
        self.alerts: "OrderedDict[tuple, dict]" = OrderedDict()   # the newest record of each episode
        self._alert_offsets: Dict[str, int] = {}
        self._lock = threading.Lock()
        self._updated = self._noted = float("-inf")

    def payload(self, seen: Optional[dict]) -> Tuple[dict, dict]:
        """(message for a page, what that page then holds). ``seen`` is what it held (None at first):
        from another generation, or None, it gets every point; else only the new ones."""
        with self._lock:
            self._update()
            full = not seen or seen.get("gen") != self.generation
            counts, charts = {}, {}
            for (chart, label), s in sorted(self.series.items()):
                start = 0 if full else seen["counts"].get(f"{chart}\t{label}", 0)
                counts[f"{chart}\t{label}"] = s.t.size
                if s.t.size > start:
                    charts.setdefault(chart, {})[label] = {
                        "t": [round(v * 1000) for v in s.t[start:].tolist()],
                        "y": [None if math.isnan(v) else round(v, 2) for v in s.y[start:].tolist()]}
            hosts = rank_hosts(self.run_dir)
            ranks = [dict(rec, rank=r, host=hosts.get(r, "")) for r, rec in sorted(self.ranks.items())]
            msg = {"full": full, "charts": charts, "ranks": ranks, "notes": self.notes,
                   "bad_lines": self.bad_lines, "alerts": sorted(self.alerts.values(), key=lambda a: a.get("time_unix") or 0)}
            return msg, {"gen": self.generation, "counts": counts}

    def _update(self) -> None:
        now = time.monotonic()
        if now - self._updated < UPDATE_S:
            return
        self._updated = now
        files = readers.monitor_files(self.run_dir)
        for kind in ("gpu", "host"):
            for path in files[kind]:
                follower = self._followers.setdefault(str(path), CsvFollower(path, kind))
                table, restarted = follower.read()
                if restarted:
                    self._drop(kind, path)
                if table is not None:
                    self._add(kind, table)
        for path in readers.metrics_files(self.run_dir):
            follower = self._followers.setdefault(str(path), JsonlFollower(path))
            records, bad, _ = follower.read()
            self.bad_lines += bad
            self._add_metrics(path.name, records)
        for path in alert_files(self.run_dir):  # the alert logs, append-only: read on from the last offset
            records, self._alert_offsets[path] = read_jsonl(path, self._alert_offsets.get(path, 0))
            for rec in records:  # an episode's resolved record takes its raised one's place
                key = (rec.get("id"), rec.get("rule"))
                self.alerts.pop(key, None)
                self.alerts[key] = {k: rec.get(k) for k in ALERT_FIELDS}
            while len(self.alerts) > MAX_ALERTS:
                self.alerts.popitem(last=False)
        if now - self._noted >= NOTES_S:
            self._noted = now
            self.notes = self._why_missing(files)

    def _add(self, kind: str, table: readers.Table) -> None:
        t = table.col("time_unix")
        codes, names = table.text["host"]
        gpu = table.col("gpu_index") if kind == "gpu" else None
        for code, host in enumerate(names):
            rows = (codes == code) & ~np.isnan(t)
            if gpu is None:
                self._extend(kind, table, rows, host)
                continue
            for index in np.unique(gpu[rows & ~np.isnan(gpu)]):
                self._extend(kind, table, rows & (gpu == index), f"{host} GPU{int(index)}")

    def _extend(self, kind: str, table: readers.Table, rows: np.ndarray, label: str) -> None:
        t = table.col("time_unix")[rows]
        for chart, (log, column, scale) in CHARTS.items():
            if log == kind and t.size:
                if self.series.setdefault((chart, label), Series()).extend(t, table.col(column)[rows] * scale):
                    self.generation += 1

    def _drop(self, kind: str, path) -> None:
        """A log read again from its start: forget its series (labels start with its host)."""
        host = path.name.split(".")[0]
        for chart, label in list(self.series):
            if CHARTS[chart][0] == kind and (label == host or label.startswith(host + " GPU")):
                del self.series[(chart, label)]
        self.generation += 1

    def _add_metrics(self, name: str, records: list) -> None:
        for rec in records:
            if rec.get("kind") not in ("step", "header"):
                continue
            try:
                rank = int(rec.get("rank", name[4:].split(".")[0]))
            except (TypeError, ValueError):
                continue
            if rec["kind"] == "header":   # train_entry's step records leave the attempt to the header
                if type(rec.get("attempt")) is int:
                    self.header_attempt[rank] = rec["attempt"]
                continue
            mine = self.ranks.setdefault(rank, {"records": 0})
            if rank in self.header_attempt:
                mine["attempt"] = self.header_attempt[rank]
            mine["records"] += 1
            for k in RANK_FIELDS:
                v = rec.get(k)
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    mine[k] = v

    def _why_missing(self, files: dict) -> list:
        """Why a node's daemon had no GPU (or other) readings: its last source_unavailable events."""
        notes = []
        for host, sources in sorted(events.unavailable_sources(files["events"]).items()):
            for source, reason in sorted(sources.items()):
                notes.append(f"{host}: {source} unavailable: {reason}")
        return notes[:20]


class LiveCache:
    """The JobLive of each run directory being shown, the most recently used kept (bounded)."""

    def __init__(self, size: int = 16):
        self.size = size
        self._items: "OrderedDict[str, JobLive]" = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run_dir: str) -> JobLive:
        with self._lock:
            live = self._items.pop(run_dir, None) or JobLive(run_dir)
            self._items[run_dir] = live
            while len(self._items) > self.size:
                self._items.popitem(last=False)
            return live
