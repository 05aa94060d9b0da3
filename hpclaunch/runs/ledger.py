"""The fleet ledger: each ended job's report summary kept in the registry, so `report --since`
reads one table instead of every job's logs. A summary is made the first time a fleet view sees
the job ended, and made again when the job's logs have changed since (their signature differs)."""
from __future__ import annotations

import json
import time
from typing import List, Optional

from hpclaunch.reports.fleet import job_summary, logs_signature, strict_loads, summary_record
from hpclaunch.runs.registry import FINAL_STATES, Registry


# A job's logs settle soon after it ends (the monitor's last flush, a node's late write): ledger
# entries of jobs that ended longer ago than this are trusted without statting their logs, which
# would cost more than the rest of a 10,000-job view together. `report --refresh` checks them all.
SETTLED_S = 24 * 3600


def fleet_rows(registry: Registry, since: Optional[float] = None, refresh: bool = False,
               limit: Optional[int] = None, offset: int = 0) -> List[dict]:
    """The fleet view's rows for the jobs submitted since `since` (newest first, a page of `limit` from
    `offset`), each with its summary where the ledger has a current one (or one could be made now); a
    job whose report fails has none, and the fleet view says why."""
    settled = time.time() - SETTLED_S
    rows, kept, stale = [], [], []
    for key, job_id, name, user, partition, run_dir, submit, state, end, sig, summary in \
            registry.fleet(since, limit, offset):
        row = {"id": job_id, "name": name, "user": user, "partition": partition or "", "run_dir": run_dir,
               "submit_time": submit}
        rows.append(row)
        job = (row, key, state)
        if summary is not None and not refresh and end is not None and end < settled:
            kept.append((job, summary))
            continue
        now_sig = logs_signature(run_dir)
        if summary is not None and sig == now_sig and now_sig:
            kept.append((job, summary))
        else:
            stale.append((job, now_sig))
    for (job, _), summary in zip(kept, _decode([s for _, s in kept])):
        if summary is not None:
            job[0]["summary"] = summary
        else:  # an entry that does not decode (a hand edit, a damaged row): made again from the logs
            stale.append((job, logs_signature(job[0]["run_dir"])))
    fresh = []
    for (row, key, state), now_sig in stale:
        if state in FINAL_STATES and now_sig:
            try:
                made = json.dumps(job_summary(row["run_dir"]), allow_nan=False, separators=(",", ":"))
            except Exception:  # noqa: BLE001 - the fleet view reports it (it tries again, and says why)
                continue
            fresh.append((key, now_sig, made))
            row["summary"] = json.loads(made)  # as the next view will read it
    registry.put_ledger(fresh)
    return rows


def _decode(texts: List[str]) -> List[Optional[list]]:
    """The summaries, decoded in one call (a tenth faster than one call each over 10,000); an entry
    that is not a summary this version reads is None (the job is then summarised again)."""
    try:
        out = strict_loads("[" + ",".join(texts) + "]")
    except ValueError:
        out = None
    if out is None or len(out) != len(texts):  # a damaged entry: find it
        out = [_one(t) for t in texts]
    return [summary_record(s) for s in out]


def _one(text: str):
    try:
        return strict_loads(text)
    except ValueError:
        return None
