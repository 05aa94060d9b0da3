"""Fleet view: energy by user, partition and job; hottest nodes and GPU slots over many jobs.

``build_fleet_report(rows)`` takes an iterable of job records (dicts with ``id``, ``name``,
``user``, ``partition``, ``run_dir``, ``submit_time``, and a ``summary`` where the registry's ledger
has one: :data:`SUMMARY_FORMAT`) and aggregates each job's summary (:func:`job_summary`, made from its
logs when the row has none).

A GPU slot is (host, gpu_index). Its temperature statistic is the mean over jobs of the slot's
average temperature; a slot is an outlier when it is hotter than the fleet median by more than
max(OUTLIER_MIN_C, OUTLIER_K robust sigmas) (sigma = 1.4826 x median absolute deviation).

The aggregation is plain Python over the summaries (no numpy): `report --since` over 10,000 ledgered
jobs must answer within a second, start of the interpreter included (bench/fleet), and most of that
second is decoding the summaries and walking them once.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional

from hpclaunch.reports.model import SLOWDOWN_REASONS, clean, page_text, reasons_text

try:  # the report extra's fast JSON codec (setup.cfg says why); the json module does the same without it
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised by tests/report/test_fleet_ledger.py with it hidden
    _orjson = None

FLEET_SCHEMA = "hpclaunch.fleet_report/1"
OUTLIER_MIN_C = 3.0
OUTLIER_K = 3.0
# The largest number a summary may hold (J, s, °C): no job comes near it (30 MW for a month is 8e13
# J), and sums of millions of them stay finite. A hand-edited 1e308 made every `report --since` fail
# (OverflowError in fsum); such a summary is now that job's warning.
SUMMARY_MAX = 1e15


@dataclass
class FleetReport:
    data: Dict[str, Any] = field(default_factory=dict)

    @property
    def warnings(self) -> List[str]:
        return self.data["warnings"]


_REASONS = frozenset(SLOWDOWN_REASONS)
_NUM = frozenset((float, int, type(None)))
_TEXT = frozenset((str, type(None)))


def _n(v: Any) -> Optional[float]:
    """A number or None, as a summary holds it; anything else is a broken ledger entry."""
    if v is None or (type(v) in (float, int) and -SUMMARY_MAX <= v <= SUMMARY_MAX):
        return v
    raise _bad(v)


def _bad(v: Any) -> Exception:
    if type(v) in (float, int):
        return ValueError(f"{v!r} is beyond any job's value (a summary's numbers are within ±{SUMMARY_MAX:g})")
    return TypeError(f"{v!r} is not a number")


def _reasons(throttle_s: Dict[str, Any]) -> Dict[str, float]:
    """The slowdown reasons with time (a ledger summary holds only those)."""
    return {r: _n(v) for r, v in throttle_s.items() if v and r in _REASONS}


def _add(into: Dict[str, float], reasons: Dict[str, float]) -> None:
    for r, v in reasons.items():
        into[r] = into.get(r, 0.0) + v


def _in_order(reasons: Dict[str, float]) -> Dict[str, float]:
    """Reasons in NVML bit order, rounded; a slot's hw_slowdown is the line an admin looks for."""
    return {r: round(reasons[r], 2) for r in SLOWDOWN_REASONS if r in reasons}


def strict_loads(text: str) -> Any:
    """JSON without NaN or Infinity (a ledger summary is written with allow_nan=False: one is a hand
    edit), raising ValueError: orjson where installed (it refuses them too), else the json module."""
    if _orjson is not None:
        return _orjson.loads(text)   # its JSONDecodeError is a ValueError
    return json.loads(text, parse_constant=_no_constant)


def _no_constant(name: str):
    raise ValueError(f"{name} in a ledger summary")


def _median(xs: List[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2.0


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


# A ledger summary is one JSON array, fields by position (a dict per GPU takes twice as long to
# decode over 10,000 jobs, and the ledger five times the space); docs/fleet.md lists them:
# [SUMMARY_FORMAT, energy total J, GPU J, CPU J, complete, duration s, idle energy J, throttle s by
#  reason (power and thermal always), GPUs: [[host, index, uuid, avg °C, max °C, s near slowdown,
#  sampled s, throttle s by reason], ...], nodes: [[host, energy J, max GPU °C, max CPU °C], ...],
#  number of report warnings]
SUMMARY_FORMAT = 2


def job_summary(run_dir: str, engine: str = "auto") -> List[Any]:
    """What the fleet view needs of one job's report, small enough to keep in the registry's ledger,
    as plain JSON values (numpy scalars as numbers, NaN as None)."""
    # The log reader (numpy, pyarrow) loads here, when a job is summarised from its logs: a fleet
    # view whose jobs are all in the ledger never needs it (reports/__init__.py says why).
    from hpclaunch.reports.document import build
    rep = build(run_dir, engine=engine, bins=8).data

    def reasons(throttle, keep=()):
        # the fleet adds up only reasons with time: zeros are left out (the ledger holds 10,000s of these)
        return {k: v for k, v in throttle.items() if v or k in keep}

    e = rep["energy_j"]
    return clean([
        SUMMARY_FORMAT, e["total"], e["gpu"], e["cpu"], bool(e["complete"]), rep["duration_s"],
        rep["idle"]["energy_j"], reasons(rep["throttle_total_s"], keep=("power", "thermal")),
        [[g["host"], g["index"], g["uuid"], g["avg_temp_c"], g["max_temp_c"], g["time_near_slowdown_s"],
          g["coverage"]["sampled_s"], reasons(g["throttle_s"])] for g in rep["gpus"]],
        [[n["host"], n["energy_j"]["total"], n.get("max_gpu_temp_c"), n.get("max_cpu_temp_c")] for n in rep["nodes"]],
        len(rep["warnings"]),
    ])


def summary_record(value: Any) -> Optional[List[Any]]:
    """A decoded ledger summary as this version reads it: the array as it is, the first ledger's
    object form (format 1) converted, anything else None (not a summary: make it again)."""
    if type(value) is list:
        return value if value and value[0] == SUMMARY_FORMAT else None
    if type(value) is not dict:
        return None
    try:
        e = value["energy_j"]
        return [SUMMARY_FORMAT, e["total"], e["gpu"], e["cpu"], e["complete"], value["duration_s"],
                value["idle"]["energy_j"], value["throttle_total_s"],
                [[g["host"], g["index"], g["uuid"], g["avg_temp_c"], g["max_temp_c"], g["time_near_slowdown_s"],
                  g["coverage"]["sampled_s"], g["throttle_s"]] for g in value["gpus"]],
                [[n["host"], n["energy_j"]["total"], n.get("max_gpu_temp_c"), n.get("max_cpu_temp_c")]
                 for n in value["nodes"]],
                len(value["warnings"])]
    except (KeyError, TypeError, AttributeError):
        return None


def _job(row: dict, rec: List[Any]) -> tuple:
    """One job's fleet row and what its GPUs and nodes add, read from its summary before anything is
    added up: a summary of the wrong shape (a hand-edited ledger) raises here and adds nothing."""
    fmt, total, gpu_e, cpu_e, complete, duration, idle, throttle_total, gpus_in, nodes_in, warnings = rec
    if fmt != SUMMARY_FORMAT:
        raise ValueError(f"summary format {fmt!r}, not {SUMMARY_FORMAT}")
    total, gpu_e, cpu_e, duration, idle = _n(total), _n(gpu_e), _n(cpu_e), _n(duration), _n(idle)
    # Checked by type, a GPU (a node) at a time, not a value at a time: 10,000 jobs of 8 GPUs are
    # 640,000 values, and the checks were a fifth of the view's time.
    gpu_reasons = []   # each GPU's slowdown reasons with time (None: none), aligned with gpus_in
    lim = SUMMARY_MAX
    for g in gpus_in:
        h, i, uuid, avg, mx, near, sampled, th = g
        if not (type(h) is str and type(i) is int and type(uuid) in _TEXT and type(avg) in _NUM
                and type(mx) in _NUM and type(near) in _NUM and type(sampled) in _NUM and type(th) is dict):
            raise TypeError(f"GPU {g!r} is not [host, index, uuid, numbers, reasons]")
        if not ((avg is None or -lim <= avg <= lim) and (mx is None or -lim <= mx <= lim)
                and (near is None or -lim <= near <= lim) and (sampled is None or -lim <= sampled <= lim)):
            raise ValueError(f"GPU {g!r}: a number beyond any job's value (within ±{lim:g})")
        gpu_reasons.append(_reasons(th) if th else None)
    for n in nodes_in:
        h, energy, gpu_t, cpu_t = n
        if not (type(h) is str and type(energy) in _NUM and type(gpu_t) in _NUM and type(cpu_t) in _NUM):
            raise TypeError(f"node {n!r} is not [host, numbers]")
        if not ((energy is None or -lim <= energy <= lim) and (gpu_t is None or -lim <= gpu_t <= lim)
                and (cpu_t is None or -lim <= cpu_t <= lim)):
            raise ValueError(f"node {n!r}: a number beyond any job's value (within ±{lim:g})")
    gpus, nodes = list(zip(gpus_in, gpu_reasons)), nodes_in
    gpu_h = sum(g[6] or 0.0 for g in gpus_in) / 3600.0
    temps = [g[4] for g in gpus_in if g[4] is not None]
    throttle = _reasons(throttle_total)
    job = {
        "id": row.get("id"), "name": row.get("name"), "user": row.get("user"), "partition": row.get("partition"),
        "submit_time": row.get("submit_time"), "run_dir": str(row.get("run_dir")), "duration_s": duration,
        "energy_j": total, "gpu_energy_j": gpu_e, "cpu_energy_j": cpu_e, "complete": bool(complete),
        "gpus": len(gpus), "gpu_hours": round(gpu_h, 4), "idle_energy_j": idle,
        "max_temp_c": max(temps) if temps else None,
        "throttle_power_s": _n(throttle_total.get("power")), "throttle_thermal_s": _n(throttle_total.get("thermal")),
        "throttle_s": _in_order(throttle), "warnings": int(warnings),
    }
    return job, throttle, gpu_h, gpus, nodes


def _group() -> Dict[str, Any]:
    return {"jobs": 0, "energy_j": 0.0, "gpu_energy_j": 0.0, "cpu_energy_j": 0.0, "gpu_hours": 0.0,
            "incomplete_jobs": 0, "unknown_energy_jobs": 0}


def build_fleet_report(rows: Iterable[dict], *, engine: str = "auto") -> FleetReport:
    """Rows carrying a `summary` (the registry's ledger) are not re-read from their logs."""
    warnings: List[str] = []
    jobs: List[dict] = []
    by_user: Dict[str, dict] = {}
    by_part: Dict[str, dict] = {}
    slots: Dict[tuple, list] = {}   # (host, index) -> [jobs, avg temps, max temp, near s, uuids, throttle]
    nodes: Dict[str, dict] = {}
    fleet_throttle: Dict[str, float] = {}
    for row in rows:
        jid = row.get("id")
        try:
            try:
                job, throttle, gpu_h, gpus, job_nodes = _job(row, row.get("summary") or job_summary(
                    row.get("run_dir"), engine))
            except Exception as e:  # noqa: BLE001 - whatever a summary holds
                if not row.get("summary"):
                    raise
                # a ledger entry of the wrong shape or with absurd numbers (a hand edit; an older
                # hpclaunch's report of rows it now drops): this job's logs instead
                job, throttle, gpu_h, gpus, job_nodes = _job(row, job_summary(row.get("run_dir"), engine))
                warnings.append(f"job {jid}: its ledger summary was refused ({type(e).__name__}: {e}); "
                                "its logs were read instead")
        except Exception as e:  # noqa: BLE001 - one broken run dir (or ledger entry) must not hide the fleet
            warnings.append(f"job {jid}: report failed: {type(e).__name__}: {e}")
            continue
        jobs.append(job)
        total, complete = job["energy_j"], job["complete"]
        if total is None:
            warnings.append(f"job {jid}: energy unknown ({job['run_dir']})")
        elif not complete:
            warnings.append(f"job {jid}: energy incomplete (see its report warnings)")
        for groups, key in ((by_user, str(row.get("user") or "?")), (by_part, str(row.get("partition") or "?"))):
            a = groups.get(key)
            if a is None:
                a = groups[key] = _group()
            a["jobs"] += 1
            if total is None:
                a["unknown_energy_jobs"] += 1
            else:
                a["energy_j"] += total
            a["gpu_energy_j"] += job["gpu_energy_j"] or 0.0
            a["cpu_energy_j"] += job["cpu_energy_j"] or 0.0
            a["gpu_hours"] += gpu_h
            if not complete:
                a["incomplete_jobs"] += 1
        if throttle:
            _add(fleet_throttle, throttle)
        for (host, index, uuid, avg, mx, near, _, _), reasons in gpus:
            s = slots.get((host, index))
            if s is None:
                s = slots[(host, index)] = [0, [], None, 0.0, set(), {}]
            s[0] += 1
            if uuid:
                s[4].add(uuid)
            if avg is not None:
                s[1].append(avg)
            if mx is not None and (s[2] is None or mx > s[2]):
                s[2] = mx
            if near:
                s[3] += near
            if reasons:
                _add(s[5], reasons)
        for host, energy, gpu_t, cpu_t in job_nodes:
            nd = nodes.get(host)
            if nd is None:
                nd = nodes[host] = {"max_gpu_temp_c": None, "max_cpu_temp_c": None, "jobs": 0, "energy_j": 0.0}
            nd["jobs"] += 1
            if energy:
                nd["energy_j"] += energy
            if gpu_t is not None and (nd["max_gpu_temp_c"] is None or gpu_t > nd["max_gpu_temp_c"]):
                nd["max_gpu_temp_c"] = gpu_t
            if cpu_t is not None and (nd["max_cpu_temp_c"] is None or cpu_t > nd["max_cpu_temp_c"]):
                nd["max_cpu_temp_c"] = cpu_t
    slot_rows = []
    for (h, i), (n, avg, mx, near, uuids, reasons) in slots.items():
        slot_rows.append({"host": h, "index": i, "jobs": n, "uuids": sorted(uuids),
                          "mean_avg_temp_c": round(math.fsum(avg) / len(avg), 2) if avg else None,
                          "max_temp_c": mx, "time_near_slowdown_s": round(near, 2),
                          "throttle_s": _in_order(reasons)})
    vals = [r["mean_avg_temp_c"] for r in slot_rows if r["mean_avg_temp_c"] is not None]
    med: Optional[float] = _median(vals) if vals else None
    sigma = 1.4826 * _median([abs(v - med) for v in vals]) if vals else None
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
        if indent is None and _orjson is not None:
            try:  # orjson writes NaN/inf as null, which is what clean() makes of them
                return _orjson.dumps(fleet.data).decode() + "\n"
            except TypeError:  # an integer over 64 bits (a hand-edited ledger): the json module copes
                pass
        try:  # the summaries are plain JSON values: no pass over 10,000 jobs to clean them first
            return json.dumps(fleet.data, indent=indent, allow_nan=False) + "\n"
        except (TypeError, ValueError):  # a sum that overflowed to inf (a hand-edited ledger): null
            return json.dumps(clean(fleet.data), indent=indent, allow_nan=False) + "\n"
    if fmt == "text":
        return _fleet_text(fleet, width, color)
    if fmt == "html":
        from hpclaunch.reports.render_html import render_fleet_html  # numpy: only for this view
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
    if page_text(d):
        con.print(page_text(d), markup=False)
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
