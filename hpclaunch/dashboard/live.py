"""What a job's page shows of its run directory, kept current by reading only what the logs appended
(reports.follow): GPU power and temperature and host CPU and memory as time series, each rank's
latest step record (metrics/rank<R>.jsonl, docs/run-directory.md), and the job's alerts (alerts/*.jsonl,
docs/alerts.md): each episode's newest record.

Each series keeps at most MAX_POINTS points: past that, neighbouring points are averaged in pairs and
the generation changes, so every open page is sent the whole (thinned) series again; otherwise a
page is sent only the points it does not have yet.

A large job's page stays small (issue 50): a chart of more than MAX_LINES GPUs or hosts becomes their
minimum, mean and maximum over time (envelope.py), and more than MAX_RANKS ranks become a summary and
the ranks furthest behind, sent only when they change (as the alerts are, whatever the job's size). The
logs are read at most every UPDATE_S, and never for more than a quarter of the time (a 1,024-node job's
10,000 files take a while to look at).
"""
from __future__ import annotations

import io
import math
import threading
import time
from collections import OrderedDict
from typing import Dict, Optional, Tuple

import numpy as np

from hpclaunch.dashboard.envelope import Envelope, pairs, rank_summary
from hpclaunch.monitors.alert_log import alert_files, read_jsonl
from hpclaunch.reports import events, readers
from hpclaunch.reports.follow import CsvFollower, JsonlFollower
from hpclaunch.reports.metrics import rank_hosts

MAX_POINTS = 2000        # per series, what a browser draws without effort
UPDATE_S = 1.0           # the logs are read at most this often, however many pages follow the job (0: at each)
BUSY_SHARE = 0.25        # ... and at most this share of the time
MAX_LINES = 16           # a chart's lines, one per GPU or host; more: their envelope
MAX_RANKS = 32           # the ranks table's rows, one per rank; more: a summary and those furthest behind
FEW_LINES = 8            # a rank's new lines up to this many are all decoded; past it, its newest step and headers
START_BUDGET = 64 << 20  # a large job's monitor logs are followed from their last this-much-over-them-all
UPDATE_BUDGET_S = 2.0    # a large job's logs are read for this CPU time an update at most (the rest: the next)
PENDING_BYTES = 32 << 20   # monitor logs' new lines parsed together, at most this many bytes
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
    def __init__(self, how: str = "mean") -> None:
        self.t = np.empty(0)
        self.y = np.empty(0)
        self.how = how   # how a pair of points is made one: their mean (an envelope's min and max lines: min, max)

    def extend(self, t: np.ndarray, y: np.ndarray) -> bool:
        """Append; True when the series was thinned to stay within MAX_POINTS."""
        self.t, self.y = np.concatenate([self.t, t]), np.concatenate([self.y, y])
        thinned = False
        while self.t.size > MAX_POINTS:
            self.t, self.y, thinned = pairs(self.t), pairs(self.y, self.how), True
        return thinned


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
        self.envelopes: Dict[str, Envelope] = {}   # chart -> its envelope, once it has over MAX_LINES lines
        self._followers: Dict[str, object] = {}
        self.alerts: "OrderedDict[tuple, dict]" = OrderedDict()   # the newest record of each episode
        self._alert_offsets: Dict[str, int] = {}
        self._lock = threading.Lock()
        self._updated = self._noted = float("-inf")
        self._wait = 0.0                # until the next read (UPDATE_S, longer for a job of many files)
        self._alerts_seen = 0           # changes to self.alerts (a page is sent them when this moves)
        self._cursor = 0                # where the next update goes on reading (a large job's: update_budget)
        self._monitor_pass = False      # every monitor log has been read once

    def payload(self, seen: Optional[dict]) -> Tuple[dict, dict]:
        """(message for a page, what that page then holds). ``seen`` is what it held (None at first):
        from another generation, or None, it gets every point; else only the new ones."""
        with self._lock:
            self._update()
            full = not seen or seen.get("gen") != self.generation
            counts, charts = {}, {}
            lines = list(self.series.items()) + [((chart, how), line) for chart, env in self.envelopes.items()
                                                 for how, line in env.lines.items()]
            for (chart, label), s in sorted(lines):
                start = 0 if full else seen["counts"].get(f"{chart}\t{label}", 0)
                counts[f"{chart}\t{label}"] = s.t.size
                if s.t.size > start:
                    charts.setdefault(chart, {})[label] = {
                        "t": [round(v * 1000) for v in s.t[start:].tolist()],
                        "y": [None if math.isnan(v) else round(v, 2) for v in s.y[start:].tolist()]}
            hosts = rank_hosts(self.run_dir)
            ranks = [dict(rec, rank=r, host=hosts.get(r, "")) for r, rec in sorted(self.ranks.items())]
            msg = {"full": full, "charts": charts, "ranks": ranks, "notes": self.notes,
                   "bad_lines": self.bad_lines,
                   "chart_notes": {c: e.note("GPU" if CHARTS[c][0] == "gpu" else "host")
                                   for c, e in self.envelopes.items()}}
            state = {"gen": self.generation, "counts": counts, "alerts": self._alerts_seen}
            if full or seen.get("alerts") != self._alerts_seen:   # sent when they change
                msg["alerts"] = sorted(self.alerts.values(), key=lambda a: a.get("time_unix") or 0)
            if len(ranks) > MAX_RANKS:   # a summary and the furthest behind, sent when they change
                summary, behind = rank_summary(ranks)
                sig = hash(repr((summary, behind)))
                msg.update(ranks_summary=summary, ranks=behind)
                if not full and seen.get("ranks") == sig:
                    del msg["ranks_summary"], msg["ranks"]
                state["ranks"] = sig
            return msg, state

    def warm(self) -> None:
        """Read the logs now (when due), before any page asks: payload() then finds them read."""
        with self._lock:
            self._update()

    def _update(self) -> None:
        now = time.monotonic()
        if now - self._updated < self._wait:
            return
        self._updated = now
        try:
            self._read()
        finally:   # a job of many files is read less often: at most BUSY_SHARE of the time
            took = time.monotonic() - now
            self._wait = max(UPDATE_S, took / BUSY_SHARE) if UPDATE_S and took > 0.1 else UPDATE_S

    def _read_alerts(self) -> None:
        for path in alert_files(self.run_dir):  # the alert logs, append-only: read on from the last offset
            records, self._alert_offsets[path] = read_jsonl(path, self._alert_offsets.get(path, 0))
            for rec in records:  # an episode's resolved record takes its raised one's place
                key = (rec.get("id"), rec.get("rule"))
                self.alerts.pop(key, None)
                self.alerts[key] = {k: rec.get(k) for k in ALERT_FIELDS}
            self._alerts_seen += bool(records)
            while len(self.alerts) > MAX_ALERTS:
                self.alerts.popitem(last=False)

    def _read(self) -> None:
        """The lines appended to every log since the last read: the monitor logs first, then the ranks'. A
        large job's are followed from their recent end (START_BUDGET over them all), and read for at most
        UPDATE_BUDGET_S an update, the next update going on where this one stopped. The monitor logs'
        new lines are parsed together, a table for all the files of a kind and header (pending: a parse
        per file costs a 1,024-node job's first read a second)."""
        now = self._updated
        files = readers.monitor_files(self.run_dir)
        metrics = readers.metrics_files(self.run_dir)
        items = [(kind, p) for kind in ("gpu", "host") for p in files[kind]] + [("metrics", p) for p in metrics]
        large = len(files["gpu"]) > MAX_LINES
        start = max(32 << 10, min(32 << 20, START_BUDGET // max(1, len(files["gpu"]) + len(files["host"])))) \
            if large else None
        first = self._cursor % len(items) if items else 0
        cpu0 = time.thread_time()   # the budget is CPU: a loaded login node reads as much, only slower
        pending = _Pending(self._add)
        for j in range(len(items)):
            kind, path = items[(first + j) % len(items)]
            if kind == "metrics":
                pending.flush()
                follower = self._followers.setdefault(str(path), JsonlFollower(path, start=4096 if large else None))
                data, _ = follower.tail.read()
                if data:
                    self._metrics_chunk(path.name, data)
            else:
                follower = self._followers.setdefault(str(path), CsvFollower(path, kind, start=start))
                data, skip, restarted = follower.take()
                if restarted:
                    pending.flush()
                    self._drop(kind, path)
                if data is not None:
                    pending.add(kind, follower, data, skip)
            if (first + j) % len(items) == len(items) - len(metrics) - 1:
                pending.flush()
                self._monitor_pass = True   # every monitor log read once: their buckets can be drawn
            if UPDATE_S and time.thread_time() - cpu0 > UPDATE_BUDGET_S and j < len(items) - 1:
                self._cursor = first + j + 1
                break
        else:
            self._cursor = first
        pending.flush()
        for env in self.envelopes.values() if self._monitor_pass or not UPDATE_S else ():
            if env.settle():
                self.generation += 1
        self._read_alerts()
        if now - self._noted >= NOTES_S:
            self._noted = now
            self.notes = self._why_missing(files)

    def _add(self, kind: str, table: readers.Table) -> None:
        """A table's rows (of one or many logs), a line per host (and GPU), or a chart's envelope once it
        has more than MAX_LINES lines."""
        t = table.col("time_unix")
        codes, names = table.text["host"]
        ok = (codes >= 0) & ~np.isnan(t)
        gpu = table.col("gpu_index") if kind == "gpu" else None
        if gpu is not None:
            ok &= ~np.isnan(gpu)
        rows = np.flatnonzero(ok)
        if not rows.size:
            return
        # by host (and GPU), each one's rows in the order read
        order = rows[np.lexsort((codes[rows],) if gpu is None else (gpu[rows], codes[rows]))]
        c = codes[order]
        g = gpu[order] if gpu is not None else None
        change = c[1:] != c[:-1]
        if g is not None:
            change |= g[1:] != g[:-1]
        starts = np.flatnonzero(np.concatenate([[True], change]))
        ends = np.append(starts[1:], order.size).tolist()
        labels = [names[k] for k in c[starts].tolist()] if g is None else \
            [f"{names[k]} GPU{int(i)}" for k, i in zip(c[starts].tolist(), g[starts].tolist())]
        tt = t[order]
        for chart, (log, column, scale) in CHARTS.items():
            if log != kind:
                continue
            y = table.col(column)[order] * scale
            if chart not in self.envelopes and len({key[1] for key in self.series if key[0] == chart}
                                                   | set(labels)) > MAX_LINES:
                self._envelop(chart)
            if chart in self.envelopes:
                self.envelopes[chart].add_many(labels, tt, y)
                continue
            for label, a, b in zip(labels, starts.tolist(), ends):
                if self.series.setdefault((chart, label), Series()).extend(tt[a:b], y[a:b]):
                    self.generation += 1

    def _envelop(self, chart: str) -> None:
        """A chart past MAX_LINES lines becomes their envelope (its lines so far folded in)."""
        env = self.envelopes[chart] = Envelope(Series)
        for key in [key for key in self.series if key[0] == chart]:
            s = self.series.pop(key)
            env.add(key[1], s.t, s.y)
        self.generation += 1

    def _drop(self, kind: str, path) -> None:
        """A log read again from its start: forget its series (labels start with its host)."""
        host = path.name.split(".")[0]
        for chart, label in list(self.series):
            if CHARTS[chart][0] == kind and (label == host or label.startswith(host + " GPU")):
                del self.series[(chart, label)]
        self.generation += 1

    def _metrics_chunk(self, name: str, data: bytes) -> None:
        """A rank's new lines. The page shows its newest step record and the attempt of its newest header:
        a chunk of more than FEW_LINES lines (a first read: a large job's 8,192 ranks' last 4 KiB, a day
        of records) has only those lines decoded, the headers and, from the end, lines up to its newest
        step record, and its step records counted by their text (as train_entry and json.dumps write
        them), not decoded one by one."""
        if data.count(b"\n") <= FEW_LINES:
            records, bad = readers.parse_jsonl(io.StringIO(data.decode("utf-8", "replace"), newline=None))
            self.bad_lines += bad
            self._add_metrics(name, records)
            return
        lines = data.split(b"\n")[:-1]
        headers = [i for i, ln in enumerate(lines) if b'"header"' in ln] if b'"header"' in data else []
        found: Dict[int, dict] = {}
        for i in headers:
            found.update(self._decoded(i, lines[i]))
        for i in range(len(lines) - 1, -1, -1):   # the newest step record
            if i not in found and i not in headers:
                rec = self._decoded(i, lines[i])
                if rec and rec[i].get("kind") == "step":
                    found.update(rec)
                    break
        records = [found[i] for i in sorted(found)]
        self._add_metrics(name, records)
        steps = data.count(b'"kind":"step"') + data.count(b'"kind": "step"')
        parsed = sum(1 for r in records if r.get("kind") == "step")
        for r in records[-1:]:
            rank = r.get("rank")
            if type(rank) is int and rank in self.ranks:
                self.ranks[rank]["records"] += max(0, steps - parsed)

    def _decoded(self, i: int, line: bytes) -> Dict[int, dict]:
        """{i: the record} of one line, or {} (a line that is no record: counted in bad_lines)."""
        records, bad = readers.parse_jsonl((line.decode("utf-8", "replace") + "\n",))
        self.bad_lines += bad
        return {i: records[0]} if records else {}

    def _add_metrics(self, name: str, records: list) -> None:
        for rec in records:
            kind = rec.get("kind")
            if kind != "step" and kind != "header":
                continue
            try:
                rank = int(rec.get("rank", name[4:].split(".")[0]))
            except (TypeError, ValueError):
                continue
            if kind == "header":   # train_entry's step records leave the attempt to the header
                if type(rec.get("attempt")) is int:
                    self.header_attempt[rank] = rec["attempt"]
                continue
            mine = self.ranks.get(rank)
            if mine is None:
                mine = self.ranks[rank] = {"records": 0}
            if rank in self.header_attempt:
                mine["attempt"] = self.header_attempt[rank]
            mine["records"] += 1
            for k in RANK_FIELDS:
                v = rec.get(k)
                kind = type(v)   # JSON's numbers: int (never infinite; bool is not one) or float
                if kind is int or (kind is float and v - v == 0.0):
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


class _Pending:
    """Monitor logs' new lines waiting to be parsed together: by kind and header, up to PENDING_BYTES."""

    def __init__(self, add):
        self.add_table = add
        self.groups: "OrderedDict[tuple, tuple]" = OrderedDict()   # (kind, header) -> (follower, chunks, skips)
        self.size = 0

    def add(self, kind: str, follower: CsvFollower, data: bytes, skip: int) -> None:
        _, chunks, skips = self.groups.setdefault((kind, tuple(follower.header)), (follower, [], []))
        chunks.append(data)
        skips.append(skip)
        self.size += len(data)
        if self.size >= PENDING_BYTES:
            self.flush()

    def flush(self) -> None:
        groups, self.groups, self.size = self.groups, OrderedDict(), 0
        for (kind, _), (follower, chunks, skips) in groups.items():
            table = follower.parse(chunks, skips)
            if table is not None:
                self.add_table(kind, table)
