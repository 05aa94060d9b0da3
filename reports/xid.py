"""XID errors in the report, from the monitor's ``<host>.events.jsonl`` files.

``xid`` records give the code, GPU and time of each XID. Whether a GPU's XIDs were collected at
all comes from the same files: each daemon start lists the GPUs it registered in
``source_available`` (source ``nvml``, ``xid_events``); ``source_unavailable`` with capability
``xid_events`` says where and why not, or that collection stopped mid-run. A GPU never listed has
``xids`` null (not collected: a monitor older than XID collection, or a driver without XID
events), never ``[]``, which means collected and none seen. A ``source_available`` with
``resumed_after_s`` marks a new event set after a mid-run stop: the gap is a warning.
"""
from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

# Display names of well-known codes (NVIDIA's XID catalog); the JSON carries only the code.
XID_NAMES = {
    13: "graphics engine exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
    45: "preemptive cleanup after previous errors", 48: "double-bit ECC error",
    63: "ECC page retirement / row remapping event", 64: "ECC page retirement / row remapping failure",
    74: "NVLink error", 79: "GPU has fallen off the bus", 92: "high single-bit ECC error rate",
    94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error",
}


@dataclass
class XidLog:
    # (time, code, MIG "gpu_instance/compute_instance" or None for the whole GPU)
    by_gpu: Dict[Tuple[str, int], List[Tuple[float, int, Optional[str]]]] = field(default_factory=dict)
    collected: Set[Tuple[str, int]] = field(default_factory=set)
    unavailable: Dict[Tuple[str, Optional[int], str], None] = field(default_factory=dict)  # ordered set
    unmatched: List[Tuple[str, float, int]] = field(default_factory=list)
    resumed: List[Tuple[str, float, float]] = field(default_factory=list)  # host, stopped, resumed (unix)
    skipped_lines: int = 0     # with XID data, unterminated (a killed writer) or unparsable
    unreadable: List[str] = field(default_factory=list)


def read(paths) -> XidLog:
    """The XID records and collection status of every events file (duplicates across copied
    files dropped on host, GPU, time, code and running count)."""
    log = XidLog()
    seen = set()
    for p in paths:
        fname_host = Path(p).name[: -len(".events.jsonl")] if str(p).endswith(".events.jsonl") else ""
        try:
            f = open(p, "r", errors="replace")
        except OSError as e:
            log.unreadable.append(f"{Path(p).name}: {e.strerror or e}")
            continue
        with f:
            for line in f:
                if "xid" not in line:  # cheap pre-filter: most records are other kinds
                    continue
                if not line.endswith("\n"):  # a killed writer's last line is not a record
                    log.skipped_lines += 1
                    continue
                try:
                    r = json.loads(line.lstrip("\ufeff"))  # a byte-order mark, as readers.without_bom
                    d = r.get("detail") or {}
                    host = r.get("host") or fname_host
                    kind = r.get("kind")
                    if kind == "xid":
                        t, code, idx = float(r["time_unix"]), int(d["xid"]), d.get("gpu_index")
                        key = (host, idx, t, code, d.get("xid_count"))
                        if key in seen:
                            continue
                        seen.add(key)
                        if idx is None:
                            log.unmatched.append((host, t, code))
                        else:
                            gi, ci = d.get("gpu_instance_id"), d.get("compute_instance_id")
                            mig = f"{gi}/{ci}" if gi is not None else None
                            log.by_gpu.setdefault((host, int(idx)), []).append((t, code, mig))
                    elif kind == "source_available" and d.get("source") == "nvml":
                        log.collected.update((host, int(i)) for i in d.get("xid_events") or ())
                        if d.get("resumed_after_s") is not None:
                            t = float(r["time_unix"])
                            log.resumed.append((host, t - float(d["resumed_after_s"]), t))
                    elif kind == "source_unavailable" and d.get("capability") == "xid_events":
                        log.unavailable[(host, d.get("gpu_index"), str(d.get("reason")))] = None
                except (ValueError, TypeError, KeyError, AttributeError):
                    log.skipped_lines += 1
    return log


def summarize(records: List[Tuple[float, int, Optional[str]]]) -> List[dict]:
    """Per code: count, first and last time, by code; ``mig_instances`` ("GI/CI") where the
    driver named MIG instances."""
    by: Dict[int, List[float]] = defaultdict(list)
    migs: Dict[int, Set[str]] = defaultdict(set)
    for t, code, mig in records:
        by[code].append(t)
        if mig is not None:
            migs[code].add(mig)
    out = []
    for c, ts in sorted(by.items()):
        x = {"xid": c, "count": len(ts), "first_unix": min(ts), "last_unix": max(ts)}
        if migs[c]:
            x["mig_instances"] = sorted(migs[c])
        out.append(x)
    return out


def apply(gpus: List[dict], log: XidLog, warnings: List[str]) -> None:
    """Set ``xids`` on each GPU of the report and add the warnings."""
    known = set()
    missing = []
    for g in gpus:
        key = (g["host"], g["index"])
        known.add(key)
        recs = log.by_gpu.get(key, [])
        g["xids"] = summarize(recs) if (recs or key in log.collected) else None
        if g["xids"] is None:
            missing.append(f"{g['host']}/gpu{g['index']}")
        elif g["xids"]:
            warnings.append(f"{g['host']}/gpu{g['index']}: XID errors " + ", ".join(
                f"{x['xid']} (x{x['count']})" for x in g["xids"]) + " (see gpus[].xids)")
    for (host, idx, reason) in log.unavailable:
        warnings.append(f"{host}" + (f"/gpu{idx}" if idx is not None else "") + f": XID events: {reason}")
    for host, stopped, resumed in log.resumed:
        warnings.append(f"{host}: XID events collected again from {_when(resumed)} UTC; none were collected "
                        f"for {resumed - stopped:.0f} s before (from {_when(stopped)} UTC)")
    if missing:
        warnings.append(f"XID errors not collected for {len(missing)} GPU(s) ({', '.join(missing[:5])}"
                        f"{', ...' if len(missing) > 5 else ''}): no XID collection in their monitor logs")
    for (host, idx), recs in log.by_gpu.items():
        if (host, idx) not in known:
            warnings.append(f"{host}/gpu{idx}: {len(recs)} XID error(s) logged for a GPU without GPU rows")
    for host, t, code in log.unmatched:
        warnings.append(f"{host}: XID {code} on a GPU the monitor could not identify")
    if log.skipped_lines:
        warnings.append(f"events: {log.skipped_lines} line(s) with XID data skipped (unterminated or unparsable)")
    for u in log.unreadable:
        warnings.append(f"events file unreadable, its XIDs unknown: {u}")


# ---------------------------------------------------------------------------- rendering


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def table(data: dict) -> Tuple[Tuple[str, ...], List[tuple]]:
    """(headers, rows) of the XID table: one row per GPU and code, GPUs with XIDs only."""
    rows = []
    for g in data["gpus"]:
        for x in g.get("xids") or ():
            mig = f" (MIG {', '.join(x['mig_instances'])})" if x.get("mig_instances") else ""
            rows.append((f"{g['host']}/{g['index']}{mig}", ",".join(map(str, g["ranks"])) or "-", x["xid"],
                         XID_NAMES.get(x["xid"], ""), x["count"], _when(x["first_unix"]), _when(x["last_unix"])))
    return ("GPU", "ranks", "XID", "meaning", "count", "first (UTC)", "last (UTC)"), rows


def summary(data: dict) -> str:
    """One line: how many XIDs, on how many of the GPUs whose XIDs were collected."""
    gpus = data["gpus"]
    if not gpus:
        return ""
    got = [g for g in gpus if g.get("xids") is not None]
    if not got:
        return "XID errors: not collected (no XID collection in the monitor logs)"
    n = sum(x["count"] for g in got for x in g["xids"])
    with_x = sum(1 for g in got if g["xids"])
    s = (f"XID errors: {n} on {with_x} of {len(got)} GPU(s)" if n
         else f"XID errors: none on {len(got)} GPU(s)") + " with XID collection"
    if len(got) < len(gpus):
        s += f"; not collected on {len(gpus) - len(got)} GPU(s)"
    return s
