"""Goodput on the login side: a job's report with what the registry knows of it, the fleet's goodput
ledger (the registry's goodput table: one summary per ended job), and the partition's node failure
rate the checkpoint cadence starts from (docs/recovery.md)."""
from __future__ import annotations

import json
import time
from typing import List, Optional

from hpclaunch.reports import goodput, goodput_fleet
from hpclaunch.runtime import cadence
from hpclaunch.runs.registry import FINAL_STATES, JobRecord, Registry

# The failure rate is the ledger's over this window: failure rates move between weeks and partitions.
RATE_WINDOW_S = 90 * 86400.0


def job_facts(record: JobRecord) -> dict:
    """What the goodput report takes from the registry: the submission, the end, the shape."""
    doc = {}
    try:
        doc = json.loads(record.resolved or "{}")
    except ValueError:
        pass
    res = doc.get("resources") if isinstance(doc.get("resources"), dict) else {}
    return {"id": record.job_id, "name": record.name, "partition": record.partition,
            "submit_time": record.submit_time, "end_time": record.end_time if record.state in FINAL_STATES else None,
            "nodes": record.nodes or res.get("nodes"), "gpus_per_node": res.get("gpus_per_node") or 0,
            "spare_nodes": res.get("spare_nodes") or 0}


def job_report(record: JobRecord) -> dict:
    return goodput.build(record.run_dir, job_facts(record))


def run_dir_report(run_dir: str) -> dict:
    """A run directory's goodput without its registry row: the shape from its job.yaml, no queue time."""
    import os
    from hpclaunch.spec.yamlio import load_yaml_file
    try:
        doc = load_yaml_file(os.path.join(run_dir, "job.yaml"), "job file")
    except Exception:  # noqa: BLE001 - without it the report infers the nodes and counts no GPUs
        doc = {}
    res = doc.get("resources") if isinstance(doc, dict) and isinstance(doc.get("resources"), dict) else {}
    slurm = doc.get("slurm") if isinstance(doc, dict) and isinstance(doc.get("slurm"), dict) else {}
    return goodput.build(run_dir, {"name": doc.get("name") if isinstance(doc, dict) else None,
                                   "partition": slurm.get("partition"), "nodes": res.get("nodes"),
                                   "gpus_per_node": res.get("gpus_per_node") or 0,
                                   "spare_nodes": res.get("spare_nodes") or 0})


def remember(registry: Registry, record: JobRecord, doc: Optional[dict] = None) -> Optional[dict]:
    """Keep an ended job's summary in the goodput ledger (best effort): the fleet view and the
    failure rate read it."""
    if record.state not in FINAL_STATES:
        return None
    doc = doc or job_report(record)
    if not doc.get("attempts"):
        return None
    s = goodput.summary(doc)
    registry.put_goodput([(record.key, goodput.signature(record.run_dir), record.partition,
                           doc.get("first_start_unix"), s["node_hours"], s["failures"].get("node_failure", 0),
                           json.dumps(s, separators=(",", ":"), allow_nan=False))])
    return s


def fleet_report(registry: Registry, since: Optional[float] = None, refresh: bool = False) -> dict:
    """The fleet view: each ended job's summary (made now where the ledger has none, or a stale one),
    summed per partition and month."""
    records = [r for r in registry.list(since=since) if r.state in FINAL_STATES and not r.parent_key]
    held = registry.goodput([r.key for r in records])
    pairs: List[tuple] = []
    warnings: List[str] = []
    for r in records:
        entry = held.get(r.key)
        if entry is not None and not refresh and (r.end_time or 0) < time.time() - 86400:
            pairs.append((r.partition, _loads(entry[1])))
            continue
        if entry is not None and entry[0] == goodput.signature(r.run_dir):
            pairs.append((r.partition, _loads(entry[1])))
            continue
        try:
            s = remember(registry, r)
        except Exception as e:  # noqa: BLE001 - one job's unreadable logs must not hide the fleet
            warnings.append(f"job {r.job_id}: no goodput summary ({type(e).__name__}: {e})")
            continue
        if s is not None:
            pairs.append((r.partition, s))
    return goodput_fleet.build(pairs, since, warnings)


def _loads(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


def failure_rate(registry: Registry, partition: Optional[str], now: Optional[float] = None) -> float:
    """Node failures per node-hour on the partition over RATE_WINDOW_S, from the goodput ledger, with
    the job runtime's default rate weighing as its prior (runtime/cadence.py): little history moves
    it little, none leaves the default."""
    failures, node_hours = registry.node_failures(partition, (now or time.time()) - RATE_WINDOW_S)
    return (cadence.DEFAULT_RATE * cadence.PRIOR_NODE_HOURS + failures) / (cadence.PRIOR_NODE_HOURS + node_hours)
