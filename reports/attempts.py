"""Each attempt of a job, read from its run directory: when it started and ended, why it ended and
where it ran. Three records, each kept by its own writer:

* ``.hpclaunch/state``, the batch script's: a ``start`` line (batch host, node count) and an ``end``
  line (the step's exit code and outcome) per attempt, numbered as ``logs/attempt<N>``;
* ``.hpclaunch/attempts.json``, hpclaunch's (``runs/attempts.py``), from the scheduler: Slurm's
  ``sacct -D`` row of each attempt (state, start, end, elapsed, nodes). It alone knows what Slurm
  did (REQUEUED, NODE_FAIL, PREEMPTED) and the attempt whose script never wrote its end (a node
  failed under it);
* ``logs/attempt<N>/ranks.tsv``: the hosts that ran ranks.

Pure: reads files only (bounded), never asks a scheduler. Used by the report and by ``status``.
"""
from __future__ import annotations

import json
import os
import time
from typing import Dict, List, Optional

SCHEMA = "hpclaunch.attempts/1"
SCHEDULER_FILE = os.path.join(".hpclaunch", "attempts.json")
STATE_FILE = os.path.join(".hpclaunch", "state")
MAX_BYTES = 4 << 20            # a state or attempts file larger than this is read only this far
MAX_ATTEMPTS = 10_000
SLACK_S = 5.0                  # the batch host's clock against the controller's

# What ended an attempt, by the batch script's outcome (docs/run-directory.md).
OUTCOMES = {
    "completed": "completed",
    "failed": "failed",
    "requeued": "hpclaunch requeued it",
    "gave_up": "failed on the last attempt (requeue.max_attempts): hpclaunch gave up",
    "restart": "hpclaunch restarted the step inside the allocation",
}
# ... and by the scheduler's state, where the script could not say (it was stopped or never ended).
STATES = {
    "NODE_FAIL": "a node failed",
    "BOOT_FAIL": "a node failed to boot",
    "PREEMPTED": "preempted by a job of higher priority",
    "REQUEUED": "requeued (scontrol requeue: by the program, an administrator or hpclaunch)",
    "TIMEOUT": "its time limit",
    "DEADLINE": "its deadline",
    "CANCELLED": "cancelled",
    "OUT_OF_MEMORY": "out of memory",
    "FAILED": "failed",
    "COMPLETED": "completed",
}


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def _num(text) -> Optional[float]:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if value == value and abs(value) < 1e12 else None


def script_record(run_dir) -> Dict[int, dict]:
    """attempt -> {"start", "end", "rc", "outcome", "host", "nodes"} from .hpclaunch/state."""
    out: Dict[int, dict] = {}
    for line in _read(os.path.join(str(run_dir), STATE_FILE)).splitlines():
        words = line.split()
        if len(words) < 3 or not words[1].startswith("attempt="):
            continue
        t, n = _num(words[0]), words[1][8:]
        if t is None or not n.isdigit() or int(n) > 1_000_000:
            continue
        fields = dict(w.partition("=")[::2] for w in words[3:])
        rec = out.setdefault(int(n), {})
        if words[2] == "start":
            rec.update(start=t, end=None, rc=None, outcome=None, host=fields.get("host", "")[:255],
                       nodes=int(fields["nodes"]) if fields.get("nodes", "").isdigit() else None)
        elif words[2] == "end":
            rec.update(end=t, outcome=fields.get("outcome", "")[:32] or None,
                       rc=int(fields["rc"]) if fields.get("rc", "").lstrip("-").isdigit() else None,
                       reason=fields.get("reason", "")[:32] or None)
        elif words[2] == "fence":     # a node the job runtime will not use again (docs/recovery.md)
            rec.setdefault("fenced", []).append(fields.get("node", "?")[:255])
        elif words[2] == "verdict" and fields.get("verdict") == "hang":
            rec["hung"] = (fields.get("rank", "?")[:16], fields.get("node", "?")[:255])
        if len(out) >= MAX_ATTEMPTS:
            break
    return out


def scheduler_record(run_dir) -> List[dict]:
    """The scheduler's rows, as runs/attempts.py wrote them ([] without the file or with another)."""
    try:
        doc = json.loads(_read(os.path.join(str(run_dir), SCHEDULER_FILE)) or "{}")
    except ValueError:
        return []
    rows = doc.get("attempts") if isinstance(doc, dict) and doc.get("schema") == SCHEMA else None
    out = []
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and isinstance(row.get("job_id"), str):
            out.append({"job_id": row["job_id"][:64], "state": str(row.get("state") or "")[:32],
                        "exit_code": row.get("exit_code") if type(row.get("exit_code")) is int else None,
                        "start": _num(row.get("start_unix")), "end": _num(row.get("end_unix")),
                        "elapsed": _num(row.get("elapsed_s")), "nodes": str(row.get("nodes") or "")[:1024]})
    return out[:MAX_ATTEMPTS]


def rank_hosts(run_dir, attempt: int) -> List[str]:
    """The hosts of an attempt's ranks (logs/attempt<N>/ranks.tsv), by their lowest rank."""
    first: Dict[str, int] = {}
    text = _read(os.path.join(str(run_dir), "logs", f"attempt{attempt}", "ranks.tsv"))
    for line in text.splitlines()[:100_000]:
        cols = line.split("\t")
        if len(cols) >= 2 and cols[0].isdigit():
            host = cols[1][:255]
            first[host] = min(first.get(host, int(cols[0])), int(cols[0]))
    return sorted(first, key=first.get)


def _number(rows: List[dict], script: Dict[int, dict]) -> List[tuple]:
    """(attempt number, row) for each scheduler row: the attempt whose script started within the
    row's run (the batch script starts seconds after the scheduler starts the attempt), else the one
    after the row before (an attempt whose script never started: a node that failed to boot)."""
    starts = sorted((rec["start"], n) for n, rec in script.items() if rec.get("start") is not None)
    out, taken, prev = [], set(), -1
    for row in sorted(rows, key=lambda r: (r["start"] is None, r["start"] or 0)):
        lo, hi = row["start"], row["end"]
        match = [n for t, n in starts if lo is not None and lo - SLACK_S <= t <= (hi if hi is not None else 1e12) + SLACK_S
                 and n not in taken]
        n = match[0] if match else prev + 1
        while n in taken:
            n += 1
        taken.add(n)
        out.append((n, row))
        prev = n
    return out


def cause_of(a: dict, later: Optional[dict]) -> str:
    """Why an attempt ended, in words ("" while it runs); with what came next when another attempt
    followed that neither hpclaunch's script nor `scontrol requeue` asked for."""
    state, outcome = a.get("state") or "", a.get("outcome")
    if state == "NODE_FAIL" and outcome in ("failed", "stopped"):
        # the batch shell outlived the node and saw only its step die of it (gloo's abort, 134):
        # Slurm's NODE_FAIL is the cause, whichever ended first
        outcome = None
    if outcome and outcome != "stopped":
        text = OUTCOMES.get(outcome, outcome)
        if outcome in ("failed", "requeued", "gave_up") and a.get("exit_code") is not None:
            text = f"step exit code {a['exit_code']}: {text}"
        why = _recovery_words(a)
        if why:
            text = f"{why}: {text}"
            if outcome == "requeued" and a.get("fenced"):
                text += f" without {','.join(a['fenced'])}"
    elif state in STATES:
        text = STATES[state]
    elif outcome == "stopped":
        text = "stopped by SIGTERM (cancelled, out of time, preempted or requeued)"
    elif a.get("end_unix") is None:
        return ""
    else:
        text = state.lower() or "ended"
    if later is not None and outcome not in ("requeued", "restart") and state != "REQUEUED":
        if later.get("job_id") and a.get("job_id") and later["job_id"] != a["job_id"]:
            text += f"; hpclaunch resubmitted it as job {later['job_id']}"
        else:
            text += "; Slurm requeued it"
    return text


def _recovery_words(a: dict) -> str:
    """What the job runtime's recovery saw end an attempt (a node it fenced, a rank it found hung)."""
    if a.get("reason") == "node" and a.get("fenced"):
        return f"node {','.join(a['fenced'])} failed (fenced)"
    if a.get("reason") == "hang" and a.get("hung"):
        return f"rank {a['hung']['rank']} on {a['hung']['node']} hung"
    return ""


def attempts(run_dir) -> List[dict]:
    """Every attempt, oldest first: attempt (from 0, as logs/attempt<N>), job_id, start_unix,
    end_unix (None while it runs), elapsed_s, state (the scheduler's word), outcome (the batch
    script's), exit_code (the step's, else the scheduler's), cause (why it ended, in words), nodes
    (the scheduler's node list, else the hosts of its ranks), batch_host."""
    script = script_record(run_dir)
    rows = dict(_number(scheduler_record(run_dir), script))
    out = []
    for n in sorted(set(script) | set(rows)):
        s, r = script.get(n, {}), rows.get(n, {})
        start = r.get("start") if r.get("start") is not None else s.get("start")
        end = s.get("end") if s.get("end") is not None else r.get("end")
        # a step restarted inside the allocation: the scheduler's row is the allocation's, not this attempt's
        inside = s.get("outcome") == "restart"
        if r.get("elapsed") is not None and r.get("end") is not None and not inside:
            elapsed = r["elapsed"]
        else:
            elapsed = end - start if end is not None and start is not None else None
        hosts, count = rank_hosts(run_dir, n), s.get("nodes")
        nodes = "" if inside and hosts else r.get("nodes") or ""
        if not nodes and hosts:
            nodes = ",".join(hosts) if count is None or count <= len(hosts) else \
                f"{count} nodes (ranks on {','.join(hosts)})"
        out.append({"attempt": n, "job_id": r.get("job_id"), "start_unix": start, "end_unix": end,
                    "elapsed_s": round(max(elapsed, 0.0), 3) if elapsed is not None else None,
                    "state": None if inside else r.get("state") or None, "outcome": s.get("outcome"),
                    "exit_code": s.get("rc") if s.get("rc") is not None else r.get("exit_code"),
                    "nodes": nodes or s.get("host") or "", "batch_host": s.get("host") or None,
                    "reason": s.get("reason"), "fenced": s.get("fenced", []),
                    "hung": {"rank": s["hung"][0], "node": s["hung"][1]} if s.get("hung") else None})
    for i, a in enumerate(out):
        a["cause"] = cause_of(a, out[i + 1] if i + 1 < len(out) else None)
    return out


def total_elapsed(history: List[dict], running: bool, now: Optional[float] = None) -> Optional[float]:
    """Seconds from the first attempt's start to the last one's end (or now, while the job runs)."""
    starts = [a["start_unix"] for a in history if a.get("start_unix") is not None]
    if not starts:
        return None
    ends = [a["end_unix"] for a in history if a.get("end_unix") is not None]
    last = (now if now is not None else time.time()) if running or not ends else max(ends)
    return max(0.0, last - min(starts))


def duration_text(seconds: Optional[float]) -> str:
    """Slurm's way: 0:07, 2:37, 1:02:37, 2-01:02:37; "-" when unknown."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{s:02d}"
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def attempt_line(a: dict) -> str:
    """"attempt 0: 12:01:05 -> 12:03:42 (2:37) on c[1-2]: step exit code 75: hpclaunch requeued it"."""
    def at(t):
        return time.strftime("%H:%M:%S", time.localtime(t)) if t is not None else "?"
    span = f"{at(a.get('start_unix'))} -> {at(a.get('end_unix')) if a.get('end_unix') is not None else 'now'}"
    took = f" ({duration_text(a['elapsed_s'])})" if a.get("elapsed_s") is not None else ""
    job = f" job {a['job_id']}" if a.get("job_id") else ""
    return (f"attempt {a['attempt']}:{job} {span}{took} on {a.get('nodes') or '?'}"
            f"{': ' + a['cause'] if a.get('cause') else ''}")
