"""A large job's report one node at a time, its nodes shared among the machine's cores.

Read whole (document.py), a day-long 1,024-node job's logs are 708 M GPU rows: a hundred GB in
memory, minutes on one core. Here each node's logs (``<host>.gpu.csv``, ``<host>.host.csv``: the
monitor writes one of each per node) are read, computed and let go, in worker processes that take
consecutive nodes; the report then holds each GPU's figures and series, not its rows.

Two passes. The series and the peak power's bins need the job's window (its first and last sample
over every log) before any GPU is computed: pass 1 takes each log's from the bounds its columnar copy
stores, without reading it, and reads only the logs that have no valid copy (a first report: reading
them makes their copies, where the policy allows, so pass 2 reads those). Pass 2 reads each node's
logs and computes its GPUs and its host. The logs, the per-GPU statistics and the merge are those of
the whole-logs report, so the document is the same, warnings in the same order: only the job's peak
power may differ in its last digits (the GPUs' bins are summed node by node). What could make it
differ, the caller is told (:class:`Mismatch`) and reports the whole way: a GPU's or a host's rows in
two nodes' logs (a copied or rotated log), a window pass 2 found other than pass 1, GPUs on hosts
other than their logs' names. While the job runs its monitors append between the passes: pass 2 then
reads each log pass 1 read only up to the last line pass 1 saw, so both see the same rows.

Workers are processes of their own (reports/workers.py); the CLI sets how many
(``HPCLAUNCH_REPORT_WORKERS``, default: the CPUs this process may use). One worker, or a test's
``workers=0``, runs everything in this process.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from hpclaunch.reports import columnar, readers
from hpclaunch.reports.gpu_index import index_gpu_tables
from hpclaunch.reports.hosts import host_stats
from hpclaunch.reports.log_tables import Logs
from hpclaunch.reports.model import host_from_filename
from hpclaunch.reports.per_gpu import PerGpu
from hpclaunch.reports.plausible import ISOLATION_S, Window, _inside
from hpclaunch.reports.workers import Pool

# A job with this many GPU logs, or this much of them, is reported node by node.
MIN_FILES = 64
MIN_BYTES = 512 << 20
TASKS_PER_WORKER = 4   # nodes are handed out in this many runs per worker (a slow node evens out)


class Mismatch(Exception):
    """The logs are not one node's per name: the report is made the whole way."""


def wanted(files: Dict[str, List[Path]]) -> bool:
    gpu = files["gpu"]
    if len(gpu) >= MIN_FILES:
        return True
    size = 0
    for p in gpu:
        try:
            size += os.stat(p).st_size
        except OSError:
            pass
    return size >= MIN_BYTES


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Spec:
    """What every worker needs (picklable)."""
    window: Optional[Window]
    engine: str
    copies: Optional[columnar.Policy]
    gpu_counters: Tuple[str, ...]
    host_counters: Tuple[str, ...]
    unavailable: Dict[str, Dict[str, str]] = field(default_factory=dict)
    t0: float = 0.0
    t1: float = 0.0
    bins: int = 240
    recorded: Dict[str, float] = field(default_factory=dict)
    step: float = 1.0                      # the sampling interval the peak's bins start from
    step_bins: Tuple[float, int] = (1.0, 1)


@dataclass
class Nodes:
    """What document.build needs of the GPU and host logs, and their warnings in the whole way's order."""
    t0: Optional[float] = None
    t1: Optional[float] = None
    gpus: List[dict] = field(default_factory=list)
    series: Dict[str, Any] = field(default_factory=dict)
    hosts: Dict[str, dict] = field(default_factory=dict)
    node_peak: Dict[str, float] = field(default_factory=dict)
    gpu_peak: Optional[float] = None
    mstats: Dict[str, int] = field(default_factory=lambda: {"rows": 0, "unindexed": 0, "bad_time": 0,
                                                            "duplicates": 0})
    skipped: int = 0
    engines: set = field(default_factory=set)
    read_warnings: List[str] = field(default_factory=list)   # every GPU log's, then every host log's
    host_warnings: List[str] = field(default_factory=list)
    gpu_warnings: List[str] = field(default_factory=list)    # the peak step's, then each GPU's in key order
    have_gpus: bool = False


def runs(items: Sequence, workers: int) -> List[Sequence]:
    """``items`` in consecutive runs, TASKS_PER_WORKER per worker."""
    size = max(1, math.ceil(len(items) / max(1, workers * TASKS_PER_WORKER)))
    return [items[i:i + size] for i in range(0, len(items), size)]


# ---------------------------------------------------------------------------- pass 1: the window


def _copy_bounds(path: Path, kind: str, window: Optional[Window]) -> Optional[Tuple[Optional[float], Optional[float]]]:
    """A log's (first, last) sample time from its copy's stored bounds, when they say that no row of it
    is outside ``window`` (so none is dropped); None when the log must be read."""
    data = readers.copy_data(path, kind)
    if data is None:
        return None
    if not data.get("n"):
        return (None, None)
    b = data.get("bounds", {}).get("time_unix") if isinstance(data.get("bounds"), dict) else None
    if not (isinstance(b, list) and len(b) == 2):
        return None
    if b[0] is None:
        return (None, None)
    if not all(isinstance(x, float) and math.isfinite(x) for x in b):
        return None
    if window is not None and not _inside(tuple(b), window.lo, window.hi):
        return None
    if (window is None or not window.record) and b[1] - b[0] > ISOLATION_S:
        return None   # rows far from the rest may be dropped: read
    return (b[0], b[1])


def _pinned(spec: Spec) -> bool:
    """Whether the logs may still grow (a running job, or one without a record of its end): then both
    passes read each log up to where pass 1 found its last line, so they see the same rows."""
    return spec.copies is None or spec.copies.run_ended is not True


def _read_bounds(spec: Spec, items: Sequence[Tuple[str, str]]) -> List[tuple]:
    """Pass 1 in a worker: each (kind, path) log read (its copy written, where allowed), checked; its
    ((first, last) sample time, the bytes read when the log may still grow, else None)."""
    logs = Logs(spec.window, spec.engine, [], spec.copies)
    out = []
    for kind, path in items:
        reader, counters = (readers.read_gpu_log, spec.gpu_counters) if kind == "gpu" else \
            (readers.read_host_log, spec.host_counters)
        upto = readers.complete_end(path)[1] if _pinned(spec) else None
        out.append((_time_span(logs.one(path, reader, counters, upto).col("time_unix")), upto))
    return out


def _time_span(t: np.ndarray) -> Tuple[Optional[float], Optional[float]]:
    if not t.size:
        return (None, None)
    lo, hi = float(np.fmin.reduce(t)), float(np.fmax.reduce(t))
    return (None, None) if lo != lo else (lo, hi)


# ---------------------------------------------------------------------------- pass 2: the nodes


def _nodes(spec: Spec, nodes: Sequence[Tuple[List[Tuple[int, str]], List[Tuple[int, str]]]]) -> dict:
    """Pass 2 in a worker: each node's GPU logs and host logs ((index among their kind, path, the bytes
    pass 1 read of a log that may still grow or None) each)."""
    tot = None
    out = []
    for gpu_logs, host_logs in nodes:
        one = _node(spec, gpu_logs, host_logs)
        if one["tot"] is not None:
            tot = one["tot"] if tot is None else tot + one["tot"]
        one["tot"] = None
        out.append(one)
    return {"nodes": out, "tot": tot}


def _node(spec: Spec, gpu_logs, host_logs) -> dict:
    read_g: List[Tuple[int, List[str]]] = []
    read_h: List[Tuple[int, List[str]]] = []
    logs = Logs(spec.window, spec.engine, [], spec.copies)

    def tables(items, reader, counters, notes):
        for i, path, upto in items:
            first = len(logs.warnings)
            tb = logs.one(path, reader, counters, upto)
            notes.append((i, logs.warnings[first:]))
            yield tb

    keys, segs, fcols, txt, mstats = index_gpu_tables(tables(gpu_logs, readers.read_gpu_log, spec.gpu_counters, read_g))
    spans = [_time_span(fc["time_unix"]) if fc.get("time_unix") is not None else (None, None) for fc in fcols]
    htabs = list(tables(host_logs, readers.read_host_log, spec.host_counters, read_h))
    hw: List[str] = []
    hosts = host_stats(htabs, hw, spec.unavailable)
    del htabs
    gw: List[str] = []
    per = PerGpu(keys, segs, fcols, txt, gw)
    tot = None
    if keys:
        per.run(spec.t0, spec.t1, spec.bins, spec.recorded, spec.step_bins)
        tot = per.tot if per.node_peak else None
    return {"read_g": read_g, "read_h": read_h, "skipped": logs.skipped, "engines": logs.engines,
            "mstats": mstats, "spans": spans, "hosts": list(hosts.items()), "host_warnings": hw,
            "first_host_log": host_logs[0][0] if host_logs else None, "keys": keys,
            "gpu_hosts": sorted({keys[g][0] for g in segs}), "gpus": per.gpus, "series": per.series,
            "gpu_warnings": [(key, gw[a:b]) for key, a, b in getattr(per, "marks", [])],
            "duplicates": per.duplicates, "node_peak": per.node_peak, "tot": tot}


# ---------------------------------------------------------------------------- the report's part


def report(files: Dict[str, List[Path]], spec: Spec, bins: int, recorded: Dict[str, float],
           estimate_step: Callable[[], List[float]], pool: Pool) -> Nodes:
    """The GPU and host logs' part of the report, node by node. ``estimate_step()``: the sampling
    intervals of the first GPUs (the whole way's estimate when no interval is recorded)."""
    gpu_files, host_files = files["gpu"], files["host"]
    # pass 1: every log's window, from its copy where it has one that says it, else read (in the workers)
    spans: Dict[Tuple[str, int], Tuple[Optional[float], Optional[float]]] = {}
    upto: Dict[Tuple[str, int], Optional[int]] = {}
    unread: List[Tuple[str, str, int]] = []
    for kind, paths in (("gpu", gpu_files), ("host", host_files)):
        for i, p in enumerate(paths):
            got = _copy_bounds(p, kind, spec.window)
            if got is None:
                unread.append((kind, str(p), i))
            else:
                spans[(kind, i)] = got
    for part, got in zip(runs(unread, pool.workers),
                         pool.map(_read_bounds, [(spec, [(k, p) for k, p, _ in part]) for part in
                                                 runs(unread, pool.workers)])):
        for (kind, _, i), (span, end) in zip(part, got):
            spans[(kind, i)], upto[(kind, i)] = span, end
    by: Dict[str, Tuple[List[tuple], List[tuple]]] = {}
    for i, p in enumerate(gpu_files):
        by.setdefault(host_from_filename(p), ([], []))[0].append((i, str(p), upto.get(("gpu", i))))
    for i, p in enumerate(host_files):
        by.setdefault(host_from_filename(p), ([], []))[1].append((i, str(p), upto.get(("host", i))))
    nodes = list(by.values())
    t0, t1 = _window(spans)
    out = Nodes(t0=t0, t1=t1)
    if t0 is None:
        spec2 = spec
    else:
        guess_hosts = [host_from_filename(p) for p in gpu_files]
        step = _step(guess_hosts, recorded, estimate_step)
        spec2 = Spec(**{**spec.__dict__, "t0": t0, "t1": t1, "bins": bins, "recorded": recorded, "step": step,
                        "step_bins": PerGpu.bins_of(step, t0, t1)})
    parts = pool.map(_nodes, [(spec2, part) for part in runs(nodes, pool.workers)])
    _merge(out, parts, spans, recorded, estimate_step, spec2)
    return out


def _window(spans) -> Tuple[Optional[float], Optional[float]]:
    los = [a for a, _ in spans.values() if a is not None]
    his = [b for _, b in spans.values() if b is not None]
    return (min(los) if los else None), (max(his) if his else None)


def _step(gpu_hosts, recorded: Dict[str, float], estimate_step: Callable[[], List[float]]) -> float:
    """PerGpu.peak_step's bin width, from the hosts given."""
    probe = [recorded[h] for h in gpu_hosts if h in recorded] or estimate_step()
    return max((max(probe) if recorded and probe else float(np.median(probe))) if probe else 1.0, 1e-3)


def _merge(out: Nodes, parts: List[dict], spans, recorded, estimate_step, spec: Spec) -> None:
    read_g, read_h, host_first, gpu_w = [], [], [], []
    seen_gpus, seen_hosts, gpu_hosts = set(), set(), set()
    tot = None
    for part in parts:
        if part["tot"] is not None:
            tot = part["tot"] if tot is None else tot + part["tot"]
        for nd in part["nodes"]:
            for key in nd["keys"]:
                if key in seen_gpus:
                    raise Mismatch(f"GPU {key} in two nodes' logs")
                seen_gpus.add(key)
            read_g += nd["read_g"]
            read_h += nd["read_h"]
            out.skipped += nd["skipped"]
            out.engines |= nd["engines"]
            for k in ("rows", "unindexed", "bad_time"):
                out.mstats[k] += nd["mstats"][k]
            for (i, _), span in zip(nd["read_g"], nd["spans"]):
                if span != spans.get(("gpu", i)):
                    raise Mismatch("a GPU log's window differs between the passes")
            for h, d in nd["hosts"]:
                if h in seen_hosts:
                    raise Mismatch(f"host {h} in two nodes' logs")
                seen_hosts.add(h)
            host_first.append((nd["first_host_log"], nd["hosts"], nd["host_warnings"]))
            gpu_hosts.update(nd["gpu_hosts"])
            out.gpus += nd["gpus"]
            out.series.update(nd["series"])
            gpu_w += nd["gpu_warnings"]
            out.mstats["duplicates"] += nd["duplicates"]
            out.node_peak.update(nd["node_peak"])
            out.have_gpus = out.have_gpus or bool(nd["keys"])
    out.read_warnings = [w for _, ws in sorted(read_g, key=lambda x: x[0]) for w in ws] + \
        [w for _, ws in sorted(read_h, key=lambda x: x[0]) for w in ws]
    for _, hosts, hw in sorted(host_first, key=lambda x: -1 if x[0] is None else x[0]):
        out.hosts.update(hosts)
        out.host_warnings += hw
    gpu_spans = {k: v for k, v in spans.items() if k[0] == "gpu"}
    host_spans = {("host", h): (d["first_unix"], d["last_unix"]) for h, d in out.hosts.items()}
    if _window({**gpu_spans, **host_spans}) != (out.t0, out.t1):   # the hosts' windows, as pass 1 took them
        raise Mismatch("a host log's window differs between the passes")
    if out.have_gpus and out.t0 is not None:
        if _step(gpu_hosts, recorded, estimate_step) != spec.step:
            raise Mismatch("GPUs on hosts other than their logs' names")
        unrecorded = sorted(h for h in gpu_hosts if h not in recorded)
        if unrecorded:
            out.gpu_warnings.append(f"sampling interval not recorded for {', '.join(unrecorded[:5])}"
                                    f"{' and others' if len(unrecorded) > 5 else ''} (no events header with "
                                    "interval_s): estimated from the timestamps")
    order = sorted(range(len(out.gpus)), key=lambda i: (out.gpus[i]["host"], out.gpus[i]["index"]))
    out.gpus = [out.gpus[i] for i in order]
    out.series = {k: out.series[k] for k in sorted(out.series, key=lambda k: (k.rsplit("/", 1)[0], int(k.rsplit("/", 1)[1])))}
    out.gpu_warnings += [w for _, ws in sorted(gpu_w, key=lambda x: x[0]) for w in ws]
    out.gpu_peak = float(tot.max()) if tot is not None and out.node_peak else None
