"""Which of this node's GPUs the job uses, and which global ranks use each.

The rule (also in docs/monitor-logs.md):

1. The job's GPUs on this node are the first non-empty of ``--gpus``,
   ``SLURM_STEP_GPUS``, ``SLURM_JOB_GPUS``, ``CUDA_VISIBLE_DEVICES``: a comma list of
   NVML indices or GPU UUIDs (``GPU-...``), in the order the ranks see them.
   Slurm's lists are the node's physical indices; ``CUDA_VISIBLE_DEVICES`` is only
   physical outside cgroup-constrained steps, which is why it comes last. None of
   them set: every GPU NVML lists, in NVML index order.
2. ``tasks_per_node`` = ``--tasks-per-node`` or ``HPCLAUNCH_TASKS_PER_NODE`` or
   ``SLURM_NTASKS_PER_NODE``; ``node_id`` = ``--node-id`` or ``SLURM_NODEID`` (else 0).
3. With ``n`` GPUs in the list at positions ``0..n-1`` and ``t`` tasks per node:
   if ``t >= n``, local rank ``r`` uses the GPU at position ``r % n`` (torchrun's
   LOCAL_RANK -> device convention; several ranks may share a GPU); if ``t < n``,
   the GPU at position ``j`` belongs to local rank ``j * t // n`` (contiguous blocks).
4. global rank = ``node_id * t + local_rank``.
5. Unknown ``t``: every GPU's ``ranks`` cell is empty (unknown, not "none").
"""

from __future__ import annotations

import os
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

_GPU_VARS = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES")


def _split(value: str) -> List[str]:
    return [t.strip() for t in value.split(",") if t.strip()]


def allocated_gpus(env: Mapping[str, str], override: Optional[str] = None
                   ) -> Tuple[Optional[List[str]], Optional[str]]:
    """The job's GPU tokens on this node and where they came from, or (None, None)."""
    if override:
        return _split(override), "--gpus"
    for var in _GPU_VARS:
        value = env.get(var, "")
        if value and value.strip() and value.strip() != "NoDevFiles":
            return _split(value), var
    return None, None


def _int(value) -> Optional[int]:
    try:
        return int(str(value).split("(")[0])  # SLURM_NTASKS_PER_NODE may read "4(x2)"
    except (TypeError, ValueError):
        return None


def tasks_and_node(env: Mapping[str, str], tasks_per_node: Optional[int] = None,
                   node_id: Optional[int] = None) -> Tuple[Optional[int], int]:
    t = tasks_per_node if tasks_per_node is not None else \
        _int(env.get("HPCLAUNCH_TASKS_PER_NODE")) or _int(env.get("SLURM_NTASKS_PER_NODE"))
    n = node_id if node_id is not None else _int(env.get("SLURM_NODEID"))
    return (t if t and t > 0 else None), (n if n is not None and n >= 0 else 0)


def ranks_by_position(n_gpus: int, tasks_per_node: Optional[int], node_id: int
                      ) -> List[List[int]]:
    """Global ranks per GPU position (rule 3 and 4 above)."""
    out: List[List[int]] = [[] for _ in range(n_gpus)]
    if not n_gpus or not tasks_per_node:
        return out
    t = tasks_per_node
    if t >= n_gpus:
        for r in range(t):
            out[r % n_gpus].append(node_id * t + r)
    else:
        for j in range(n_gpus):
            out[j].append(node_id * t + j * t // n_gpus)
    return out


def gpu_rank_map(devices: Sequence[Tuple[int, str]], env: Optional[Mapping[str, str]] = None,
                 gpus: Optional[str] = None, tasks_per_node: Optional[int] = None,
                 node_id: Optional[int] = None, all_gpus: bool = False) -> dict:
    """Map NVML devices ``[(index, uuid), ...]`` to ranks.

    Returns ``{"selected": {index: "r0;r1"}, "gpus_from": ..., "unmatched": [...],
    "tasks_per_node": t, "node_id": n}``. GPUs outside the job's allocation are not
    selected (they belong to other jobs on a shared node) unless ``all_gpus``.
    """
    env = os.environ if env is None else env
    tokens, source = allocated_gpus(env, gpus)
    t, nid = tasks_and_node(env, tasks_per_node, node_id)
    by_index = {i: u for i, u in devices}
    by_uuid = {u: i for i, u in devices if u}
    order: List[int] = []
    unmatched: List[str] = []
    if tokens is None:
        order = [i for i, _ in devices]
    else:
        for tok in tokens:
            idx = None
            if tok.isdigit() and int(tok) in by_index:
                idx = int(tok)
            elif tok in by_uuid:
                idx = by_uuid[tok]
            else:  # UUID prefixes are accepted by CUDA_VISIBLE_DEVICES
                hits = [i for u, i in by_uuid.items() if tok.startswith("GPU-") and u.startswith(tok)]
                idx = hits[0] if len(hits) == 1 else None
            if idx is None or idx in order:
                unmatched.append(tok)
            else:
                order.append(idx)
    ranks = ranks_by_position(len(order), t, nid)
    selected: Dict[int, str] = {idx: ";".join(str(r) for r in rs) for idx, rs in zip(order, ranks)}
    if all_gpus:
        for i, _ in devices:
            selected.setdefault(i, "")
    return {"selected": dict(sorted(selected.items())), "gpus_from": source or "all NVML devices",
            "unmatched": unmatched, "tasks_per_node": t, "node_id": nid}
