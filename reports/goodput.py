"""The goodput report of one job: where its wall time went, attempt by attempt (docs/recovery.md,
schema in docs/report-schema.md, "Goodput").

Every second from the job's submission to its end is in exactly one category, so they add up to the
wall time:

    queued         waiting for an allocation (the first, and between requeued attempts)
    starting       an attempt's start to its first step: imports, rendezvous, loading a checkpoint
    productive     training steps that moved the job forward
    recomputing    steps done again: the work lost since the last checkpoint before a failure
    checkpointing  what training stopped for to save (the ranks' `checkpoint` records)
    detecting      a failure happened (a node's last heartbeat, a hung rank's last progress) until
                   the supervisor's verdict
    recovering     the verdict until the next attempt's first step (kill, drain, restart, reload);
                   for a requeue, until the new allocation (its queue wait is `queued`)
    ending         the last step to the attempt's end (the last validation and save, teardown)

Read from the run directory only (bounded): the job runtime's state lines (.hpclaunch/state: each
attempt's start, launch, the supervisor's verdicts, fences, each end with its outcome) and the
lowest rank's metrics (step records, checkpoint records). ETTR is productive time over the time
since the first attempt started (what a failure simulator predicts, reports/goodput_sim.py); lost
GPU-hours are charged to each failure's cause (detecting, recovering, recomputing, a failure's
requeue wait) and to the spare nodes held idle.
"""
from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Tuple

SCHEMA = "hpclaunch.goodput/1"
CATEGORIES = ("queued", "starting", "productive", "recomputing", "checkpointing", "detecting", "recovering",
              "ending")
MAX_BYTES = 8 << 20
MAX_LINES = 200_000


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(MAX_BYTES)
    except OSError:
        return b""


def _num(value) -> Optional[float]:
    if isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if value == value and abs(value) < 1e13 else None


def state_events(run_dir: str) -> List[dict]:
    """The state file's lines as {t, attempt, kind, **fields} (a verdict's own words are its fields)."""
    out = []
    for line in _read(os.path.join(run_dir, ".hpclaunch", "state")).decode("utf-8", "replace").splitlines()[:MAX_LINES]:
        words = line.split()
        if len(words) < 3 or not words[1].startswith("attempt=") or not words[1][8:].isdigit():
            continue
        t = _num(words[0])
        if t is None:
            continue
        fields = dict(w.partition("=")[::2] for w in words[3:] if "=" in w)
        out.append({"t": t, "attempt": int(words[1][8:]), "kind": words[2], **fields})
    return out


def progress_records(run_dir: str) -> Tuple[List[tuple], List[tuple]]:
    """(step records as (time, step, busy seconds), checkpoints as (time, seconds)) of the lowest rank
    with a metrics file."""
    folder = os.path.join(run_dir, "metrics")
    try:
        names = [n for n in os.listdir(folder) if n.startswith("rank") and n.endswith(".jsonl") and n[4:-6].isdigit()]
    except OSError:
        return [], []
    if not names:
        return [], []
    name = min(names, key=lambda n: int(n[4:-6]))
    steps, saves = [], []
    for line in _read(os.path.join(folder, name)).splitlines()[:MAX_LINES]:
        if not line.endswith(b"}") or (b'"step"' not in line and b'"checkpoint"' not in line):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        t = _num(rec.get("time_unix"))
        if t is None:
            continue
        if rec.get("kind") == "step" and _num(rec.get("step")) is not None:
            busy = (_num(rec.get("step_time_s")) or 0.0) * (_num(rec.get("steps")) or 1.0)
            steps.append((t, int(rec["step"]), max(0.0, busy)))
        elif rec.get("kind") == "checkpoint" and _num(rec.get("seconds")) is not None:
            saves.append((t, max(0.0, float(rec["seconds"]))))
    steps.sort()
    saves.sort()
    return steps, saves


class Timeline:
    """Contiguous segments (start, end, category, attempt, cause) from the submission to the end."""

    def __init__(self, t0: float):
        self.segments: List[list] = []
        self.t = t0

    def to(self, t: float, category: str, attempt: Optional[int], cause: Optional[str] = None) -> None:
        if t > self.t:
            last = self.segments[-1] if self.segments else None
            if last is not None and last[1] == self.t and last[2:] == [category, attempt, cause]:
                last[1] = t      # one segment for a run of steps
            else:
                self.segments.append([self.t, t, category, attempt, cause])
            self.t = t

    def move(self, lo: float, hi: float, category: str) -> None:
        """Re-label [lo, hi) as `category` where it lies (a checkpoint inside training)."""
        out = []
        for s in self.segments:
            a, b = s[0], s[1]
            if b <= lo or a >= hi or s[2] not in ("productive", "recomputing", "starting", "ending"):
                out.append(s)
                continue
            if a < lo:
                out.append([a, lo] + s[2:])
            out.append([max(a, lo), min(b, hi), category] + s[3:])
            if b > hi:
                out.append([hi, b] + s[2:])
        self.segments = out


def build(run_dir: str, facts: Optional[dict] = None) -> dict:
    """The job's goodput document (docs/report-schema.md, "Goodput"). `facts`: what the registry
    knows of the job (submit_time, end_time, nodes, gpus_per_node, spare_nodes, partition, id,
    name); without a submission time the timeline starts at the first attempt."""
    facts = dict(facts or {})
    events = state_events(run_dir)
    steps, saves = progress_records(run_dir)
    warnings: List[str] = []
    starts = [e for e in events if e["kind"] == "start"]
    if not starts:
        return _empty(facts, ["no attempt has started (no start line in .hpclaunch/state)"])
    first = starts[0]["t"]
    submit = _num(facts.get("submit_time"))
    if submit is None or submit > first:
        # the state file's times are whole seconds: a submission less than 2 s "after" the start is that
        if submit is not None and submit > first + 2.0:
            warnings.append("the submission time is after the first start (clocks differ): queue time left out")
        submit = first
    last_t = max(e["t"] for e in events)
    end = _num(facts.get("end_time"))
    if end is None or end < last_t:
        end = max([last_t] + [s[0] for s in steps])
    tl = Timeline(submit)
    attempts = _attempts(events)
    high = 0                               # the highest step reached so far
    owed = 0.0                             # seconds trained, unrecorded, after the last save before a failure
    incidents: List[dict] = []
    previous_failure: Optional[dict] = None
    for i, at in enumerate(attempts):
        nxt = attempts[i + 1]["start"] if i + 1 < len(attempts) else end
        stop = at["end"] if at["end"] is not None else nxt
        stop = min(max(stop, at["start"]), nxt)
        if previous_failure is not None and previous_failure.get("requeued"):
            tl.to(at["start"], "queued", at["n"], previous_failure["cause"])
        elif previous_failure is not None:
            tl.to(at["start"], "recovering", at["n"], previous_failure["cause"])
        else:
            tl.to(at["start"], "queued", at["n"])
        mine = [s for s in steps if at["start"] <= s[0] <= stop]
        opening = "recovering" if previous_failure is not None else "starting"
        cause = previous_failure["cause"] if previous_failure is not None else None
        if mine:
            tl.to(max(at["start"], mine[0][0] - mine[0][2]), opening, at["n"], cause)
            resumed_high = high
            for t, step, _busy in mine:
                redo = step <= resumed_high
                if not redo and owed > 0.0:
                    # the steps past the last record that the failed attempt did unrecorded, done again
                    cut = min(t, tl.t + owed)
                    owed -= cut - tl.t
                    tl.to(cut, "recomputing", at["n"], cause)
                tl.to(t, "recomputing" if redo else "productive", at["n"], cause if redo else None)
                high = max(high, step)
            at["first_step"] = mine[0][0]
            at["steps"] = (mine[0][1], mine[-1][1])
        failure = at.get("failure")
        if failure is not None:
            since = min(max(failure["since"], tl.t), failure["t"])
            if mine:   # trained on, unrecorded, until it failed: the first pass is productive, its redo not
                saved = max([tl.t] + [c for c, _ in saves if c <= since])
                owed += max(0.0, since - saved)
            tl.to(since, "productive", at["n"])
            tl.to(failure["t"], "detecting", at["n"], failure["cause"])
            tl.to(stop, "recovering", at["n"], failure["cause"])
            failure["detect_s"] = round(failure["t"] - since, 3)
            incidents.append(failure)
            previous_failure = failure
        elif at["end"] is None and i + 1 < len(attempts):
            # no end line: the batch shell was stopped (the scheduler requeued the job: a node it lost,
            # preemption); from the last step to the next start counts as lost to that
            failure = {"cause": "unrecorded", "t": stop, "since": tl.t, "requeued": True, "attempt": at["n"]}
            tl.to(stop, "recovering", at["n"], "unrecorded")
            incidents.append(failure)
            previous_failure = failure
        else:
            tl.to(stop, "ending", at["n"])
            previous_failure = None
            if at.get("outcome") == "requeued":   # the time limit's requeue: the wait is queue time
                pass
    tl.to(end, "ending", attempts[-1]["n"] if attempts else None)
    for t, seconds in saves:
        tl.move(t - seconds, t, "checkpointing")
    return _document(facts, run_dir, submit, first, end, tl, attempts, incidents, warnings, bool(steps))


def _attempts(events: List[dict]) -> List[dict]:
    """Each attempt: its start, end and outcome, and the failure that ended it (a verdict)."""
    out: Dict[int, dict] = {}
    for e in events:
        at = out.get(e["attempt"])
        if e["kind"] == "start":
            at = out[e["attempt"]] = {"n": e["attempt"], "start": e["t"], "end": None, "outcome": None,
                                      "reason": e.get("reason"), "nodes": [], "fenced": []}
        if at is None:
            continue
        if e["kind"] == "launch":
            at["nodes"] = [n for n in e.get("nodes", "").split(",") if n]
            at["checkpoint_interval"] = _num(e.get("checkpoint_interval"))
        elif e["kind"] == "verdict" and e.get("verdict") in ("node", "hang"):
            since = _num(e.get("since"))
            at["failure"] = {"cause": "node_failure" if e["verdict"] == "node" else "hang", "t": e["t"],
                             "since": since if since is not None else e["t"], "attempt": e["attempt"],
                             "node": e.get("node"), "rank": e.get("rank"), "stacks": e.get("stacks")}
        elif e["kind"] == "fence":
            at["fenced"].append(e.get("node"))
        elif e["kind"] == "end":
            at["end"], at["outcome"] = e["t"], e.get("outcome")
            if e.get("outcome") == "requeued" and at.get("failure"):
                at["failure"]["requeued"] = True
    return [out[n] for n in sorted(out)]


def _document(facts, run_dir, submit, first, end, tl, attempts, incidents, warnings, stepped) -> dict:
    totals = {c: 0.0 for c in CATEGORIES}
    for a, b, cat, _n, _c in tl.segments:
        totals[cat] += b - a
    wall = end - submit
    run_time = end - first
    nodes = int(facts.get("nodes") or max([len(a["nodes"]) for a in attempts] + [1]))
    gpus = int(facts.get("gpus_per_node") or 0)
    spares = int(facts.get("spare_nodes") or 0)
    per_hour = (nodes * gpus) / 3600.0
    lost: Dict[str, float] = {}
    lost_node_h: Dict[str, float] = {}
    for a, b, cat, _n, cause in tl.segments:
        if cause and cat in ("detecting", "recovering", "recomputing", "queued"):
            lost[cause] = lost.get(cause, 0.0) + (b - a) * per_hour
            lost_node_h[cause] = lost_node_h.get(cause, 0.0) + (b - a) * nodes / 3600.0
    if spares:
        lost["spare_nodes"] = spares * gpus * run_time / 3600.0
        lost_node_h["spare_nodes"] = spares * run_time / 3600.0
    if not stepped:
        warnings.append("no step records (metrics/rank<R>.jsonl): an attempt's whole run counts as productive, "
                        "start-up and recomputation included")
    return {
        "schema": SCHEMA,
        "job": {"id": facts.get("id"), "name": facts.get("name"), "partition": facts.get("partition"),
                "run_dir": run_dir, "nodes": nodes, "spare_nodes": spares, "gpus_per_node": gpus},
        "submit_unix": submit, "first_start_unix": first, "end_unix": end,
        "wall_s": round(wall, 3), "run_s": round(run_time, 3),
        "seconds": {c: round(v, 3) for c, v in totals.items()},
        "ettr": round(totals["productive"] / run_time, 4) if run_time > 0 else None,
        "lost_gpu_hours": {k: round(v, 6) for k, v in sorted(lost.items())},
        "lost_node_hours": {k: round(v, 6) for k, v in sorted(lost_node_h.items())},
        "attempts": [_attempt_row(a) for a in attempts],
        "incidents": [{k: v for k, v in i.items() if v is not None} for i in incidents],
        "timeline": [{"start": round(a, 3), "end": round(b, 3), "category": cat, "attempt": n, "cause": c}
                     for a, b, cat, n, c in tl.segments],
        "warnings": warnings,
    }


def _attempt_row(a: dict) -> dict:
    failure = a.get("failure") or {}
    return {"attempt": a["n"], "start": a["start"], "end": a["end"], "outcome": a.get("outcome"),
            "nodes": a["nodes"], "fenced": [n for n in a["fenced"] if n], "restart_reason": a.get("reason"),
            "first_step": a.get("first_step"), "steps": list(a["steps"]) if a.get("steps") else None,
            "checkpoint_interval_s": a.get("checkpoint_interval"), "failure": failure.get("cause")}


def _empty(facts: dict, warnings: List[str]) -> dict:
    return {"schema": SCHEMA, "job": {"id": facts.get("id"), "name": facts.get("name"),
                                      "partition": facts.get("partition")},
            "wall_s": 0.0, "run_s": 0.0, "seconds": {c: 0.0 for c in CATEGORIES}, "ettr": None,
            "lost_gpu_hours": {}, "lost_node_hours": {}, "attempts": [], "incidents": [], "timeline": [],
            "warnings": warnings}


# The fleet's record of a job (the registry's goodput ledger; reports/goodput_fleet.py sums them).
SUMMARY_FORMAT = 1


def summary(doc: dict) -> dict:
    """What the fleet view and the failure rate need of a job's goodput document."""
    first = doc.get("first_start_unix")
    failures: Dict[str, int] = {}
    for i in doc.get("incidents", []):
        failures[i["cause"]] = failures.get(i["cause"], 0) + 1
    nodes = (doc.get("job") or {}).get("nodes") or 1
    return {"format": SUMMARY_FORMAT, "month": _month(first), "run_s": doc.get("run_s", 0.0),
            "node_hours": round(doc.get("run_s", 0.0) * nodes / 3600.0, 6), "seconds": doc.get("seconds", {}),
            "lost_gpu_hours": doc.get("lost_gpu_hours", {}), "lost_node_hours": doc.get("lost_node_hours", {}),
            "failures": failures}


def _month(t) -> str:
    import time
    return time.strftime("%Y-%m", time.gmtime(t)) if t else "-"


def signature(run_dir: str) -> str:
    """Sizes and change times of what build() reads: a ledger entry with another is stale."""
    parts = []
    for rel in (os.path.join(".hpclaunch", "state"), os.path.join("metrics", "rank0.jsonl")):
        try:
            st = os.stat(os.path.join(run_dir, rel))
        except OSError:
            continue
        parts.append(f"{rel}:{st.st_size}:{st.st_mtime_ns}")
    return ";".join(parts)
