"""The run directory's alert log: every alert raised and resolved, and what became of each delivery.

``<run dir>/alerts/`` holds, per node monitor, ``node-<host>.jsonl`` (its alerts) and
``node-<host>.delivery.jsonl`` (each try to send one), and for the login side ``job.jsonl`` and
``job.delivery.jsonl``. One writer per file, each record one ``O_APPEND`` write of one JSON line
(monitors/logfiles.py's writer): the files are append-only, a killed writer leaves at most one cut last
line, which readers skip. They are the record: a sink that is down loses nothing written here, and
what was not delivered is what has no ``delivered`` record for that sink (``undelivered``).

Alert record (one line; ``event`` raised or resolved, an episode's two records share its ``id``)::

    {"time_unix", "id", "event", "rule", "severity", "job_id", "job_name", "node", "gpu", "uuid",
     "rank", "ranks", "value", "threshold", "unit", "first_seen", "last_seen", "count", "message",
     "report"}

Delivery record: ``{"time_unix", "id", "event", "sink", "status": "delivered"|"failed", "attempt",
"error"}``. Neither ever holds a secret: a sink is named by its place in the job's alerts section
(``webhooks[0]``, ``email``), never by its URL.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

from .logfiles import _AppendFile, _open_no_link

ALERTS_DIR = "alerts"
SCHEMA = "hpclaunch.alerts/1"
JOB_FILE = "job.jsonl"
SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}
MAX_LINE = 64 * 1024   # a reader skips longer lines: no record is that long


def node_file(host: str) -> str:
    return f"node-{host}.jsonl"


def delivery_file(alert_file: str) -> str:
    return alert_file[:-len(".jsonl")] + ".delivery.jsonl"


class JsonLog(_AppendFile):
    """One append-only JSON-lines file (the directory made on the first write)."""

    def __init__(self, path: str, on_error=None):
        super().__init__(path, on_error)
        self._lock = threading.Lock()
        if os.path.isfile(path):
            try:
                with open(path, "rb") as f:
                    f.seek(-1, os.SEEK_END)
                    cut = f.read(1) != b"\n"
            except OSError:
                cut = False
            if cut:  # a killed writer's cut line: end it (it never parses)
                self.write_text("\n")

    def _open(self) -> bool:
        """Private as the rest of the run directory (0700 folder, 0600 file), whatever the umask of the
        command that writes first (the login side's may be 022)."""
        if self.fd is not None:
            return True
        try:
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        except OSError:
            pass
        try:
            self.fd = _open_no_link(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            return True
        except OSError as e:
            self._failed(e)
            return False

    def append(self, record: dict) -> bool:
        """One record, one write; the sink threads share a delivery log, hence the lock."""
        try:
            line = json.dumps(record, separators=(",", ":"), allow_nan=False, default=str)
        except (TypeError, ValueError):
            line = json.dumps({k: (v if isinstance(v, (str, int, type(None))) else repr(v))
                               for k, v in record.items()}, separators=(",", ":"))
        with self._lock:
            return self.write_text(line + "\n")


def read_jsonl(path: str, offset: int = 0) -> Tuple[List[dict], int]:
    """(records from ``offset`` up to the last newline, the offset after them): a follower reads on
    from there; a line still being written waits for its newline."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    out = []
    for line in data[:end].split(b"\n"):
        if not line or len(line) > MAX_LINE:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out, offset + end + 1


def alert_files(run_dir: str) -> List[str]:
    """The alert logs of a run directory (not the delivery logs), in name order."""
    d = os.path.join(run_dir, ALERTS_DIR)
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return []
    return [os.path.join(d, n) for n in names
            if n.endswith(".jsonl") and not n.endswith(".delivery.jsonl") and (n == JOB_FILE or n.startswith("node-"))]


def read_alerts(run_dir: str) -> List[dict]:
    """Every alert record of a run, in time order."""
    recs: List[dict] = []
    for path in alert_files(run_dir):
        recs.extend(read_jsonl(path)[0])
    recs.sort(key=lambda r: (r.get("time_unix") or 0))
    return recs


def delivered(run_dir: str) -> Dict[Tuple[str, str, str], dict]:
    """{(alert id, event, sink): its last delivery record} over every delivery log of the run."""
    out: Dict[Tuple[str, str, str], dict] = {}
    d = os.path.join(run_dir, ALERTS_DIR)
    try:
        names = sorted(n for n in os.listdir(d) if n.endswith(".delivery.jsonl"))
    except OSError:
        return out
    for n in names:
        for rec in read_jsonl(os.path.join(d, n))[0]:
            key = (str(rec.get("id")), str(rec.get("event")), str(rec.get("sink")))
            if out.get(key, {}).get("status") != "delivered":  # delivered once is delivered
                out[key] = rec
    return out


def wanted(record: dict, min_severity: str) -> bool:
    return SEVERITY_RANK.get(record.get("severity"), 0) >= SEVERITY_RANK.get(min_severity, 1)


def undelivered(run_dir: str, sinks: Iterable[Tuple[str, str]]) -> Iterator[Tuple[dict, str]]:
    """(alert record, sink name) for each alert a sink wants and has not had: ``sinks`` is
    (name, least severity) per sink."""
    sinks = list(sinks)
    if not sinks:
        return
    done = delivered(run_dir)
    for rec in read_alerts(run_dir):
        for name, least in sinks:
            if wanted(rec, least) and done.get((str(rec.get("id")), str(rec.get("event")), name), {}).get(
                    "status") != "delivered":
                yield rec, name


def text(record: dict) -> Tuple[str, str]:
    """(title, body) of an alert's message, for every sink."""
    sev = str(record.get("severity", "")).upper()
    resolved = record.get("event") == "resolved"
    where = record.get("node") or ""
    if record.get("gpu") is not None:
        where += f" GPU {record['gpu']}"
    if record.get("rank") is not None:
        where += f" rank {record['rank']}"
    title = f"[{'RESOLVED' if resolved else sev}] {record.get('message', record.get('rule'))}"
    lines = [f"job {record.get('job_id')} ({record.get('job_name')})" + (f" on {where.strip()}" if where.strip() else ""),
             f"rule {record.get('rule')}, severity {record.get('severity')}"]
    if record.get("value") is not None:
        unit = record.get("unit") or ""
        lines.append(f"value {record['value']}{unit}" + (f", threshold {record['threshold']}{unit}"
                                                         if record.get("threshold") is not None else ""))
    if record.get("first_seen") is not None:
        lines.append(f"first seen {_when(record['first_seen'])}, last seen {_when(record.get('last_seen'))}"
                     + (f", {record['count']} times" if (record.get("count") or 1) > 1 else ""))
    if record.get("report"):
        lines.append(f"report: {record['report']}")
    return title, "\n".join(lines)


def _when(t) -> str:
    import time
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(float(t)))
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def report_command(job_id: Optional[str]) -> Optional[str]:
    return f"hpclaunch report {job_id}" if job_id else None
