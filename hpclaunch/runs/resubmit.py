"""Queueing a job again without the nodes that failed under it, into the same run directory."""
from __future__ import annotations

import json
import os
from typing import Sequence

from hpclaunch.launchers.backends.choice import get_backend
from hpclaunch.launchers.backends.base import JobRef, Rerun
from hpclaunch.runs.registry import Registry


def resubmit(record, registry: Registry, *, exclude: Sequence[str], attempts_so_far: int, reason: str):
    """Queue a job again from its own script, without the given nodes, continuing in its run
    directory (checkpoints, logs per attempt), on the backend it ran on. Returns the new registry
    record."""
    be = get_backend(record.backend)
    with open(os.path.join(record.run_dir, "script.sbatch"), encoding="utf-8") as f:
        script = f.read()
    doc = json.loads(record.resolved or "{}")
    cwd = doc.get("hpclaunch", {}).get("submit_dir") or os.path.dirname(os.path.dirname(record.run_dir))
    job_id = be.resubmit(Rerun(script, record.run_dir, tuple(exclude), attempts_so_far), cwd)
    try:
        new = registry.add(backend=record.backend, cluster=record.cluster, job_id=job_id, name=record.name,
                           run_dir=record.run_dir, job_file=record.job_file, job_sha256=record.job_sha256,
                           profile=record.profile, partition=record.partition, launcher=record.launcher,
                           nodes=record.nodes, resolved=json.loads(record.resolved) if record.resolved else None,
                           parent_key=None)
        registry.update_state(new.key, "PENDING", attempts=attempts_so_far + 1)
        registry.update_state(record.key, "NODE_FAIL" if record.state != "CANCELLED" else record.state,
                              detail={"resubmitted_as": job_id, "reason": reason})
        registry.event(new.key, "resubmitted", {"from": record.job_id, "exclude": list(exclude), "reason": reason})
    except BaseException:
        be.abandon([job_id])
        raise
    be.release(JobRef(job_id, record.run_dir))
    return new
