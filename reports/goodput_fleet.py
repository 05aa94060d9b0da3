"""The fleet's goodput: each job's summary (reports/goodput.py: summary), summed per partition and month."""
from __future__ import annotations

from typing import Iterable, Optional, Tuple

from hpclaunch.reports.goodput import CATEGORIES, SUMMARY_FORMAT

SCHEMA = "hpclaunch.goodput_fleet/1"


def build(jobs: Iterable[Tuple[Optional[str], dict]], since: Optional[float] = None, warnings=()) -> dict:
    """`jobs`: (partition, summary) pairs. Rows per (partition, month), the busiest first."""
    rows: dict = {}
    count = 0
    for partition, s in jobs:
        if not isinstance(s, dict) or s.get("format") != SUMMARY_FORMAT:
            continue
        count += 1
        key = (partition or "", s.get("month") or "-")
        row = rows.setdefault(key, {"partition": key[0], "month": key[1], "jobs": 0, "run_s": 0.0, "node_hours": 0.0,
                                    "seconds": {c: 0.0 for c in CATEGORIES}, "lost_gpu_hours": {},
                                    "lost_node_hours": {}, "failures": {}})
        row["jobs"] += 1
        row["run_s"] += float(s.get("run_s") or 0.0)
        row["node_hours"] += float(s.get("node_hours") or 0.0)
        for c in CATEGORIES:
            row["seconds"][c] += float((s.get("seconds") or {}).get(c) or 0.0)
        for field in ("lost_gpu_hours", "lost_node_hours", "failures"):
            for k, v in (s.get(field) or {}).items():
                row[field][k] = row[field].get(k, 0) + v
    out = []
    for row in sorted(rows.values(), key=lambda r: (-r["node_hours"], r["partition"], r["month"])):
        row["ettr"] = round(row["seconds"]["productive"] / row["run_s"], 4) if row["run_s"] > 0 else None
        row["failures_per_node_hour"] = (round(row["failures"].get("node_failure", 0) / row["node_hours"], 8)
                                         if row["node_hours"] > 0 else None)
        out.append(row)
    return {"schema": SCHEMA, "since_unix": since, "jobs": count, "rows": out, "warnings": list(warnings)}
