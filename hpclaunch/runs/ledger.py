"""The fleet ledger: each ended job's report summary kept in the registry, so `report --since`
reads one table instead of every job's logs. A summary is made the first time a fleet view sees
the job ended, and made again when the job's logs have changed since (their signature differs)."""
from __future__ import annotations

import json
import time
from typing import List, Optional

from hpclaunch.reports.fleet import job_summary, logs_signature
from hpclaunch.runs.registry import FINAL_STATES, Registry


# A job's logs settle soon after it ends (the monitor's last flush, a node's late write): ledger
# entries of jobs that ended longer ago than this are trusted without statting their logs, which
# would cost more than the rest of a 10,000-job view together. `report --refresh` checks them all.
SETTLED_S = 24 * 3600


def fleet_rows(registry: Registry, since: Optional[float] = None, refresh: bool = False) -> List[dict]:
    """The fleet view's rows for the jobs submitted since `since`, each with its summary where the
    ledger has a current one (or one could be made now); a job whose report fails has none, and
    the fleet view says why."""
    records = registry.list(since=since)
    kept = registry.ledger([r.key for r in records])
    settled = time.time() - SETTLED_S
    rows, fresh = [], []
    for r in records:
        row = {"id": r.job_id, "name": r.name, "user": r.user, "partition": r.partition or "",
               "run_dir": r.run_dir, "submit_time": r.submit_time}
        entry = kept.get(r.key)
        if entry is not None and not refresh and r.end_time is not None and r.end_time < settled:
            row["summary"] = json.loads(entry[1])
            rows.append(row)
            continue
        sig = logs_signature(r.run_dir)
        if entry is not None and entry[0] == sig and sig:
            row["summary"] = json.loads(entry[1])
        elif r.state in FINAL_STATES and sig:
            try:
                row["summary"] = job_summary(r.run_dir)
            except Exception:  # noqa: BLE001 - the fleet view reports it (it tries again, and says why)
                pass
            else:
                fresh.append((r.key, sig, json.dumps(row["summary"], allow_nan=False, default=_plain)))
        rows.append(row)
    registry.put_ledger(fresh)
    return rows


def _plain(value):
    """numpy scalars in a summary, as JSON numbers."""
    return value.item() if hasattr(value, "item") else str(value)
