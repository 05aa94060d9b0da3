"""The monitor's events logs (``<host>.events.jsonl``, docs/monitor-logs.md): the interval each host's
daemon recorded and why a source was unavailable. Whole lines only, as the other readers."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Dict

from hpclaunch.reports import readers


def _event_records(paths, marker: str):
    """(host, record) of each whole line of the events logs that contains `marker` and parses as
    JSON; the host from the record, else from the file name."""
    for p in paths:
        fname_host = Path(p).name[: -len(".events.jsonl")] if str(p).endswith(".events.jsonl") else ""
        try:
            f = open(p, "r", errors="replace")
        except OSError:
            continue
        with f:  # only the lines that can be what is looked for are parsed
            records, _ = readers.parse_jsonl(line for line in f if marker in line)
        for rec in records:
            yield str(rec.get("host") or fname_host), rec


def recorded_intervals(paths) -> Dict[str, float]:
    """The sampling interval each host's daemon recorded (``interval_s`` of its last ``header``
    event), by host; hosts whose header lacks a finite positive one are left out."""
    out: Dict[str, float] = {}
    for host, rec in _event_records(paths, '"header"'):
        try:
            value = float((rec.get("detail") or {}).get("interval_s")) if rec.get("kind") == "header" else None
        except (ValueError, TypeError, AttributeError):
            continue
        if value is not None and math.isfinite(value) and value > 0:
            out[host] = value
    return out


def unavailable_sources(paths) -> Dict[str, Dict[str, str]]:
    """Why each host's daemon could not read a source (its last ``source_unavailable`` event per
    source, unless a later ``source_available`` says it came back): {host: {source: reason}}."""
    out: Dict[str, Dict[str, str]] = {}
    for host, rec in _event_records(paths, '"source_'):
        detail = rec.get("detail")
        if not isinstance(detail, dict):
            continue
        source, kind = str(detail.get("source")), rec.get("kind")
        sources = out.setdefault(host, {})
        if kind == "source_unavailable":
            sources[source] = " ".join(str(detail.get("reason") or "unavailable").split())[:300]
        elif kind == "source_available":
            sources.pop(source, None)
    return out
