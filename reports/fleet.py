"""Fleet view: energy by user, partition and job; hottest nodes and GPU slots over many jobs.

``build_fleet_report(rows)`` takes an iterable of job records (dicts with ``id``, ``name``,
``user``, ``partition``, ``run_dir``, ``submit_time``) — the lead feeds it from the registry for
``hpclaunch report --since 7d`` — builds each job's report and aggregates.

A GPU slot is (host, gpu_index). Its temperature statistic is the mean over jobs of the slot's
average temperature; a slot is an outlier when it is hotter than the fleet median by more than
max(OUTLIER_MIN_C, OUTLIER_K robust sigmas) (sigma = 1.4826 x median absolute deviation).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List

import numpy as np

from hpclaunch.reports.document import build
from hpclaunch.reports.model import SLOWDOWN_REASONS, clean, reasons_text
from hpclaunch.reports.render_html import render_fleet_html

FLEET_SCHEMA = "hpclaunch.fleet_report/1"
OUTLIER_MIN_C = 3.0
OUTLIER_K = 3.0


@dataclass
class FleetReport:
    data: Dict[str, Any] = field(default_factory=dict)

    @property
    def warnings(self) -> List[str]:
        return self.data["warnings"]


def _acc(d: Dict[str, dict], key, e_total, e_gpu, e_cpu, gpu_h, complete):
    a = d.setdefault(str(key), {"jobs": 0, "energy_j": 0.0, "gpu_energy_j": 0.0, "cpu_energy_j": 0.0,
                                "gpu_hours": 0.0, "incomplete_jobs": 0, "unknown_energy_jobs": 0})
    a["jobs"] += 1
    if e_total is None:
        a["unknown_energy_jobs"] += 1
    a["energy_j"] += e_total or 0.0
    a["gpu_energy_j"] += e_gpu or 0.0
    a["cpu_energy_j"] += e_cpu or 0.0
    a["gpu_hours"] += gpu_h or 0.0
    if not complete:
        a["incomplete_jobs"] += 1


_REASONS = frozenset(SLOWDOWN_REASONS)


def _add_reasons(into: Dict[str, float], throttle_s: Dict[str, Any]) -> None:
    for reason, v in throttle_s.items():  # a ledger summary holds only the reasons with time
        if v and reason in _REASONS:
            into[reason] = into.get(reason, 0.0) + v


def _in_order(reasons: Dict[str, float]) -> Dict[str, float]:
    """Reasons in NVML bit order, rounded; a slot's hw_slowdown is the line an admin looks for."""
    return {r: round(reasons[r], 2) for r in SLOWDOWN_REASONS if r in reasons}


def logs_signature(run_dir: str) -> str:
    """Names, sizes and change times of what a report reads (monitor/, metrics/, each attempt's
    ranks.tsv): a ledger entry with another signature is stale. "" when none can be read."""
    import hashlib
    import os
    parts = []
    for sub in ("monitor", "metrics", "logs"):
        try:
            with os.scandir(os.path.join(run_dir, sub)) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            path = e.path
            if sub == "logs":
                if not e.name.startswith("attempt"):
                    continue
                path = os.path.join(e.path, "ranks.tsv")
            try:
                st = os.stat(path)
            except OSError:
                continue
            parts.append(f"{sub}/{e.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32] if parts else ""


def job_summary(run_dir: str, engine: str = "auto") -> Dict[str, Any]:
    """What the fleet view needs of one job's report, small enough to keep in the registry's ledger
    (a few hundred bytes per GPU) and shaped like the report, so both feed the same code."""
    rep = build(run_dir, engine=engine, bins=8).data
    gpu_keys = ("host", "index", "uuid", "avg_temp_c", "max_temp_c", "time_near_slowdown_s")

    def reasons(throttle, keep=()):
        # the fleet adds up only reasons with time: zeros are left out (the ledger holds 10,000s of these)
        return {k: v for k, v in throttle.items() if v or k in keep}

    return {
        "energy_j": {k: rep["energy_j"][k] for k in ("total", "gpu", "cpu", "complete")},
        "duration_s": rep["duration_s"], "idle": {"energy_j": rep["idle"]["energy_j"]},
        "throttle_total_s": reasons(rep["throttle_total_s"], keep=("power", "thermal")),
        "gpus": [dict({k: g[k] for k in gpu_keys}, throttle_s=reasons(g["throttle_s"]),
                      coverage={"sampled_s": g["coverage"]["sampled_s"]}) for g in rep["gpus"]],
        "nodes": [{"host": n["host"], "energy_j": {"total": n["energy_j"]["total"]},
                   "max_gpu_temp_c": n.get("max_gpu_temp_c"), "max_cpu_temp_c": n.get("max_cpu_temp_c")}
                  for n in rep["nodes"]],
        "warnings": list(rep["warnings"]),
    }


def build_fleet_report(rows: Iterable[dict], *, engine: str = "auto") -> FleetReport:
    """Rows carrying a `summary` (the registry's ledger) are not re-read from their logs."""
    warnings: List[str] = []
    jobs: List[dict] = []
    by_user: Dict[str, dict] = {}
    by_part: Dict[str, dict] = {}
    slots: Dict[tuple, dict] = {}
    nodes: Dict[str, dict] = {}
    fleet_throttle: Dict[str, float] = {}
    for row in rows:
        jid = row.get("id")
        rd = row.get("run_dir")
        try:
            rep = row.get("summary") or job_summary(rd, engine)
        except Exception as e:  # noqa: BLE001 - one broken run dir must not hide the fleet
            warnings.append(f"job {jid}: report failed: {type(e).__name__}: {e}")
            continue
        e = rep["energy_j"]
        gpu_h = sum((g["coverage"]["sampled_s"] or 0.0) for g in rep["gpus"]) / 3600.0
        complete = bool(e["complete"])
        if e["total"] is None:
            warnings.append(f"job {jid}: energy unknown ({rd})")
        elif not complete:
            warnings.append(f"job {jid}: energy incomplete (see its report warnings)")
        _acc(by_user, row.get("user") or "?", e["total"], e["gpu"], e["cpu"], gpu_h, complete)
        _acc(by_part, row.get("partition") or "?", e["total"], e["gpu"], e["cpu"], gpu_h, complete)
        temps = [g["max_temp_c"] for g in rep["gpus"] if g["max_temp_c"] is not None]
        job_throttle: Dict[str, float] = {}
        _add_reasons(job_throttle, rep["throttle_total_s"])
        _add_reasons(fleet_throttle, job_throttle)
        jobs.append({
            "id": jid, "name": row.get("name"), "user": row.get("user"), "partition": row.get("partition"),
            "submit_time": row.get("submit_time"), "run_dir": str(rd), "duration_s": rep["duration_s"],
            "energy_j": e["total"], "gpu_energy_j": e["gpu"], "cpu_energy_j": e["cpu"], "complete": complete,
            "gpus": len(rep["gpus"]), "gpu_hours": round(gpu_h, 4),
            "idle_energy_j": rep["idle"]["energy_j"], "max_temp_c": max(temps) if temps else None,
            "throttle_power_s": rep["throttle_total_s"].get("power"),
            "throttle_thermal_s": rep["throttle_total_s"].get("thermal"),
            "throttle_s": _in_order(job_throttle),
            "warnings": len(rep["warnings"]),
        })
        for g in rep["gpus"]:
            s = slots.setdefault((g["host"], g["index"]), {"avg": [], "max": None, "near_s": 0.0, "jobs": 0,
                                                          "uuid": set(), "throttle": {}})
            s["jobs"] += 1
            _add_reasons(s["throttle"], g["throttle_s"])
            if g["uuid"]:
                s["uuid"].add(g["uuid"])
            if g["avg_temp_c"] is not None:
                s["avg"].append(g["avg_temp_c"])
            if g["max_temp_c"] is not None:
                s["max"] = g["max_temp_c"] if s["max"] is None else max(s["max"], g["max_temp_c"])
            s["near_s"] += g["time_near_slowdown_s"] or 0.0
        for n in rep["nodes"]:
            nd = nodes.setdefault(n["host"], {"max_gpu_temp_c": None, "max_cpu_temp_c": None, "jobs": 0,
                                              "energy_j": 0.0})
            nd["jobs"] += 1
            nd["energy_j"] += n["energy_j"]["total"] or 0.0
            for k in ("max_gpu_temp_c", "max_cpu_temp_c"):
                v = n.get(k)
                if v is not None:
                    nd[k] = v if nd[k] is None else max(nd[k], v)
    slot_rows = []
    for (h, i), s in slots.items():
        slot_rows.append({"host": h, "index": i, "jobs": s["jobs"], "uuids": sorted(s["uuid"]),
                          "mean_avg_temp_c": round(float(np.mean(s["avg"])), 2) if s["avg"] else None,
                          "max_temp_c": s["max"], "time_near_slowdown_s": round(s["near_s"], 2),
                          "throttle_s": _in_order(s["throttle"])})
    vals = np.array([r["mean_avg_temp_c"] for r in slot_rows if r["mean_avg_temp_c"] is not None])
    med = float(np.median(vals)) if vals.size else None
    sigma = float(1.4826 * np.median(np.abs(vals - med))) if vals.size else None
    thr = max(OUTLIER_MIN_C, OUTLIER_K * sigma) if sigma is not None else None
    for r in slot_rows:
        v = r["mean_avg_temp_c"]
        r["delta_vs_fleet_median_c"] = round(v - med, 2) if v is not None and med is not None else None
        r["outlier"] = bool(v is not None and thr is not None and v - med > thr)
    slot_rows.sort(key=lambda r: -(r["delta_vs_fleet_median_c"] if r["delta_vs_fleet_median_c"] is not None else -1e9))
    node_rows = [dict(host=h, **v) for h, v in nodes.items()]
    node_rows.sort(key=lambda r: -(r["max_gpu_temp_c"] if r["max_gpu_temp_c"] is not None else -1e9))
    jobs.sort(key=lambda j: -(j["energy_j"] or 0.0))
    for d in (by_user, by_part):
        for v in d.values():
            v["energy_kwh"] = round(v["energy_j"] / 3.6e6, 6)
            for k in ("energy_j", "gpu_energy_j", "cpu_energy_j", "gpu_hours"):
                v[k] = round(v[k], 3)
    known = [j["energy_j"] for j in jobs if j["energy_j"] is not None]
    total = sum(known) if known else None  # unknown is never 0
    data = {
        "schema": FLEET_SCHEMA, "jobs_count": len(jobs), "energy_j": None if total is None else round(total, 3),
        "energy_kwh": None if total is None else round(total / 3.6e6, 6),
        "unknown_energy_jobs": len(jobs) - len(known), "throttle_s": _in_order(fleet_throttle),
        "by_user": dict(sorted(by_user.items(), key=lambda kv: -kv[1]["energy_j"])),
        "by_partition": dict(sorted(by_part.items(), key=lambda kv: -kv[1]["energy_j"])),
        "jobs": jobs, "hottest_nodes": node_rows[:20],
        "gpu_slots": {"fleet_median_avg_temp_c": med, "robust_sigma_c": sigma, "outlier_threshold_c": thr,
                      "outliers": [r for r in slot_rows if r["outlier"]], "hottest": slot_rows[:20],
                      # a slot that slows down at a normal temperature (power brake, hw_slowdown) is not
                      # among the hottest: list the throttled ones on their own
                      "most_throttled": sorted((r for r in slot_rows if r["throttle_s"]),
                                               key=lambda r: -sum(r["throttle_s"].values()))[:20]},
        "warnings": warnings,
    }
    return FleetReport(data=data)


def render_fleet(fleet: FleetReport, fmt: str = "text", *, width: int = 120, color: bool = False) -> str:
    if fmt == "json":
        # indented for a reader; a large fleet compact, through the C encoder (indent needs the Python one)
        indent = 2 if fleet.data["jobs_count"] <= 200 else None
        return json.dumps(clean(fleet.data), indent=indent, allow_nan=False) + "\n"
    if fmt == "text":
        return _fleet_text(fleet, width, color)
    if fmt == "html":
        return render_fleet_html(fleet)
    raise ValueError(f"unknown format {fmt!r}")


def _fmt(v, nd=1):
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def _fleet_text(fleet: FleetReport, width: int, color: bool) -> str:
    import io

    from rich.console import Console
    from rich.table import Table

    d = fleet.data
    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=color, color_system="standard" if color else None,
                  highlight=False)
    unknown = d.get("unknown_energy_jobs") or 0
    energy = "unknown" if d["energy_kwh"] is None else f"{d['energy_kwh']:.3f} kWh"
    con.print(f"[bold]Fleet energy[/bold]: {d['jobs_count']} jobs, {energy}"
              + (f" ({unknown} job(s) with unknown energy not counted)" if unknown and d["energy_kwh"] is not None else ""))
    con.print("GPU throttle over all jobs: " + (reasons_text(d["throttle_s"]) or "none"))
    for title, grp in (("By user", d["by_user"]), ("By partition", d["by_partition"])):
        t = Table(title=title, title_justify="left")
        for c in ("", "jobs", "kWh", "GPU kWh", "CPU kWh", "GPU h", "incomplete"):
            t.add_column(c, justify="right" if c else "left")
        for k, v in grp.items():
            known = v["jobs"] > v.get("unknown_energy_jobs", 0)  # else the sums are 0 of nothing: n/a
            kwh = [f"{v[c] / 3.6e6:.3f}" if known else "n/a" for c in ("energy_j", "gpu_energy_j", "cpu_energy_j")]
            t.add_row(k, str(v["jobs"]), *kwh, f"{v['gpu_hours']:.1f}", str(v["incomplete_jobs"]))
        con.print(t)
    t = Table(title="Jobs by energy", title_justify="left")
    for c in ("job", "name", "user", "partition", "kWh", "GPUs", "max °C", "idle kWh", "complete", "throttle"):
        t.add_column(c)
    for j in d["jobs"][:20]:
        t.add_row(str(j["id"]), str(j["name"]), str(j["user"]), str(j["partition"]),
                  _fmt(j["energy_j"] / 3.6e6 if j["energy_j"] is not None else None, 3), str(j["gpus"]),
                  _fmt(j["max_temp_c"]), _fmt(j["idle_energy_j"] / 3.6e6 if j["idle_energy_j"] is not None else None, 3),
                  "yes" if j["complete"] else "NO", reasons_text(j["throttle_s"]))
    con.print(t)
    t = Table(title="Hottest nodes", title_justify="left")
    for c in ("host", "max GPU °C", "max CPU °C", "jobs"):
        t.add_column(c)
    for n in d["hottest_nodes"][:10]:
        t.add_row(n["host"], _fmt(n["max_gpu_temp_c"]), _fmt(n["max_cpu_temp_c"]), str(n["jobs"]))
    con.print(t)
    s = d["gpu_slots"]
    con.print(f"GPU slots: fleet median of average temperature {_fmt(s['fleet_median_avg_temp_c'])} °C, "
              f"outlier threshold +{_fmt(s['outlier_threshold_c'])} °C")
    t = Table(title="Hottest GPU slots", title_justify="left")
    for c in ("slot", "avg °C", "Δ median", "max °C", "near slowdown s", "jobs", "outlier", "throttle"):
        t.add_column(c)
    for r in s["hottest"][:10]:
        t.add_row(f"{r['host']}/{r['index']}", _fmt(r["mean_avg_temp_c"]), _fmt(r["delta_vs_fleet_median_c"]),
                  _fmt(r["max_temp_c"]), _fmt(r["time_near_slowdown_s"]), str(r["jobs"]), "YES" if r["outlier"] else "",
                  reasons_text(r["throttle_s"]))
    con.print(t)
    if s["most_throttled"]:
        t = Table(title="Most throttled GPU slots", title_justify="left")
        for c in ("slot", "jobs", "avg °C", "throttle"):
            t.add_column(c)
        for r in s["most_throttled"][:10]:
            t.add_row(f"{r['host']}/{r['index']}", str(r["jobs"]), _fmt(r["mean_avg_temp_c"]), reasons_text(r["throttle_s"]))
        con.print(t)
    for w in d["warnings"]:
        con.print(f"warning: {w}", markup=False)
    return buf.getvalue()
