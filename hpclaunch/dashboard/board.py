"""The dashboard's view of the registry: its rows as the pages show them, the active ones refreshed
by their backends at most every REFRESH_S, with one batched status call per backend
(runs.jobs.refresh: one squeue and one sacct for all of Slurm's), however many pages are open.

Every method runs on the dashboard's one registry thread (server.py): an SQLite connection stays in
the thread that opened it, and two refreshes never overlap.
"""
from __future__ import annotations

import os
import time
from typing import Optional

from hpclaunch.common.errors import HpclaunchError
from hpclaunch.launchers.backends.base import JobStatus, state_of
from hpclaunch.launchers.backends.choice import relayed
from hpclaunch.runs import remote
from hpclaunch.runs.jobs import hosts_of, refresh
from hpclaunch.runs.progress import pending_text
from hpclaunch.runs.registry import JobRecord, Registry

REFRESH_S = 10.0   # a controller's squeue/sacct at most this often, whatever the number of pages open
MAX_ROWS = 500     # newest first; older ones: `hpclaunch list --all`


class Board:
    def __init__(self, since_s: float, refresh_s: float = REFRESH_S):
        self.since_s = since_s
        self.refresh_s = refresh_s
        self.error = ""                              # why the last refresh failed, for the page
        self._registry: Optional[Registry] = None
        self._statuses: dict[int, JobStatus] = {}
        self._refreshed = float("-inf")

    def registry(self) -> Registry:
        if self._registry is None:
            self._registry = Registry()
        return self._registry

    def rows(self) -> dict:
        """{"jobs": [row, ...] newest first, "error": ...}: jobs submitted within --since, and every
        job still active whenever it was submitted."""
        reg = self.registry()
        self._refresh(reg)
        recs = {r.key: r for r in reg.list(since=time.time() - self.since_s, limit=MAX_ROWS)}
        for r in reg.list(active_only=True, limit=MAX_ROWS):
            recs.setdefault(r.key, r)
        ordered = sorted(recs.values(), key=lambda r: r.submit_time, reverse=True)[:MAX_ROWS]
        return {"jobs": [self._row(r) for r in ordered], "error": self.error}

    def job(self, key: int) -> Optional[dict]:
        """One job's row with the hosts its ranks run on; None when the registry has no such job."""
        reg = self.registry()
        self._refresh(reg)
        try:
            rec = reg.get(key)
        except HpclaunchError:
            return None
        row = self._row(rec)
        hosts = hosts_of(rec.run_dir) if row["local"] and not rec.array_size else {}
        row["hosts"] = [{"host": h, "ranks": r} for h, r in sorted(hosts.items(), key=lambda kv: min(kv[1]))]
        row["error"] = self.error
        return row

    def _refresh(self, reg: Registry) -> None:
        now = time.monotonic()
        if now - self._refreshed < self.refresh_s:
            return
        self._refreshed = now
        active = [r for r in reg.list(active_only=True, limit=MAX_ROWS) if not state_of(r.state).final]
        here = [r for r in active if not relayed(r.backend)]
        far = [r for r in active if relayed(r.backend)]
        errors = []
        try:
            self._statuses.update(refresh(here, reg) if here else {})
        except (HpclaunchError, OSError) as e:  # the registry's states stand; the page says why
            errors.append(f"could not ask the backends for the jobs' states: {e}")
        if far:
            # Jobs submitted with --remote: their hpclaunch on the login node answers, over the
            # remote's ssh connection (one per refresh, whatever the number of its jobs).
            try:
                for key, row in remote.statuses(far, reg, remote.Sessions()).items():
                    self._statuses[key] = _remote_status(row)
            except (HpclaunchError, OSError) as e:
                errors.append(f"could not ask the remote login node for its jobs' states: {str(e).splitlines()[0]}")
        self.error = "; ".join(errors)

    def _row(self, rec: JobRecord) -> dict:
        st = self._statuses.get(rec.key)
        live = st is not None and not state_of(rec.state).final
        return {
            "key": rec.key, "job_id": rec.job_id, "name": rec.name, "backend": rec.backend,
            "cluster": rec.cluster, "user": rec.user, "host": rec.host, "state": rec.state,
            "exit_code": rec.exit_code, "attempts": rec.attempts, "submit_time": rec.submit_time,
            "end_time": rec.end_time, "nodes_requested": rec.nodes, "array_size": rec.array_size,
            "launcher": rec.launcher, "profile": rec.profile, "partition": rec.partition,
            "run_dir": rec.run_dir, "local": os.path.isdir(rec.run_dir),
            "nodes": st.nodes if st else "", "elapsed": st.elapsed if st else "",
            "reason": st.reason if live and st.reason not in ("", "None") else "",
            # a pending job: Slurm's reason in words and the start it expects (runs/progress.py)
            "waiting": pending_text(st) if live else "",
            "expected_start": st.expected_start if live else None,
            "source": st.source if st else "registry",
        }


def _remote_status(row: dict) -> JobStatus:
    """A remote `status --json` row as the status the pages show."""
    return JobStatus(state_of(row.get("state")), row.get("exit_code"), str(row.get("elapsed") or ""),
                     str(row.get("nodes") or ""), str(row.get("reason") or ""), int(row.get("attempts") or 1),
                     "remote")
