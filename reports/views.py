"""What the text and HTML views show of a large job: the JSON document has every node, GPU and rank;
a view shows the TOP rows of each table that matter most (the hottest GPUs and nodes, the slowest
ranks), the nodes' spread in one table (min, median, max over nodes), and says how many more there
are. ``full`` (``hpclaunch report --full``): every row, in the JSON's order of importance."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

TOP = 24          # rows of each table by default
GRID_NODES = 32   # above this many nodes the HTML heat maps are one cell per node, not per GPU


def _key(v: Optional[float]) -> float:
    return -(v if v is not None else -1e300)


def hottest_gpus(gpus: Sequence[dict], full: bool = False) -> Tuple[List[dict], int]:
    """(the GPUs to show, hottest first; how many are left out)."""
    rows = sorted(gpus, key=lambda g: (_key(g["max_temp_c"]), g["host"], g["index"]))
    return (rows, 0) if full or len(rows) <= TOP else (rows[:TOP], len(rows) - TOP)


def nodes_shown(nodes: Sequence[dict], full: bool = False) -> Tuple[List[dict], int]:
    """(the nodes to show; how many are left out): all in host order when they fit, else the hottest
    (by their hottest GPU, then their GPU energy)."""
    if full or len(nodes) <= TOP:
        return list(nodes), 0
    rows = sorted(nodes, key=lambda n: (_key(n["max_gpu_temp_c"]), _key(n["energy_j"]["gpu"]), n["host"]))
    return rows[:TOP], len(nodes) - TOP


def slowest_ranks(ranks: Sequence[dict], full: bool = False) -> Tuple[List[dict], int]:
    rows = sorted(ranks, key=lambda r: (-(r.get("slowdown_vs_median") or 0), r["rank"]))
    return (rows, 0) if full or len(rows) <= TOP else (rows[:TOP], len(rows) - TOP)


MEMORY_KEYS = ("state_mib", "peak_rss_mib", "cuda_peak_mib", "gpu_mem_used_mib")


def memory_ranks(ranks: Sequence[dict], full: bool = False) -> Tuple[List[dict], int]:
    """(the ranks with memory records to show; how many are left out): all in rank order when they fit,
    else those holding the most first (state held, then peak resident, CUDA and GPU memory)."""
    rows = sorted((r for r in ranks if r.get("memory")), key=lambda r: r["rank"])
    if full or len(rows) <= TOP:
        return rows, 0
    rows.sort(key=lambda r: (*(-(r["memory"].get(k) or 0.0) for k in MEMORY_KEYS), r["rank"]))
    return rows[:TOP], len(rows) - TOP


# (label, the node's value, digits)
SPREAD: Tuple[Tuple[str, Callable[[dict], Optional[float]], int], ...] = (
    ("GPU energy (MJ)", lambda n: None if n["energy_j"]["gpu"] is None else n["energy_j"]["gpu"] / 1e6, 3),
    ("CPU energy (MJ)", lambda n: None if n["energy_j"]["cpu"] is None else n["energy_j"]["cpu"] / 1e6, 3),
    ("GPU avg W", lambda n: n["avg_power_w"]["gpu"], 0),
    ("GPU peak W", lambda n: n["peak_gpu_power_w"], 0),
    ("max GPU °C", lambda n: n["max_gpu_temp_c"], 1),
    ("max CPU °C", lambda n: n["max_cpu_temp_c"], 1),
    ("CPU % avg", lambda n: n.get("avg_cpu_pct"), 0),
    ("monitor % of a core", lambda n: n["monitor"]["cpu_pct_of_core"], 3),
)


def node_spread(nodes: Sequence[dict]) -> List[Dict[str, Any]]:
    """Per figure, its min, median and max over the nodes that have it, and which node has the max."""
    out = []
    for label, get, digits in SPREAD:
        vals = sorted(((v, n["host"]) for n in nodes if (v := get(n)) is not None), key=lambda x: x[0])
        if not vals:
            continue
        k = len(vals)
        mid = vals[k // 2][0] if k % 2 else (vals[k // 2 - 1][0] + vals[k // 2][0]) / 2
        out.append({"figure": label, "nodes": k, "min": vals[0][0], "median": mid, "max": vals[-1][0],
                    "max_host": vals[-1][1], "digits": digits})
    return out


def more_line(left: int, what: str) -> str:
    return f"... {left:,} more {what}: hpclaunch report --full shows every one (the JSON has them all)"
