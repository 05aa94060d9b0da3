"""Terminal rendering of a report: rich tables and unicode sparklines (rich imported lazily)."""
from __future__ import annotations

import io
import math
from typing import Any, Optional, Sequence

import numpy as np

from hpclaunch.reports import xid as report_xid
from hpclaunch.reports.attempts import attempt_line, duration_text as attempt_duration
from hpclaunch.reports.model import (MEMORY_COLUMNS, crosscheck_text, duration_text, energy_text, sources_text,
                                     throttle_by_reason_cell)

SPARK = "▁▂▃▄▅▆▇█"
MAX_GPU_ROWS = 24
MAX_NODE_ROWS = 16


def sparkline(values: Sequence[float], width: int = 40, lo: Optional[float] = None,
              hi: Optional[float] = None) -> str:
    """Unicode sparkline; NaN/None -> space. Values are averaged into ``width`` buckets."""
    # clipped: a span between huge values must stay finite (plausible.py makes them missing first)
    a = np.clip(np.array([np.nan if v is None else v for v in values], dtype=float), -1e300, 1e300)
    if a.size == 0:
        return ""
    if a.size > width:
        edges = np.linspace(0, a.size, width + 1).astype(int)
        with np.errstate(all="ignore"):
            a = np.array([np.nanmean(a[e0:e1]) if np.any(~np.isnan(a[e0:e1])) else np.nan
                          for e0, e1 in zip(edges[:-1], edges[1:])])
    ok = ~np.isnan(a)
    if not ok.any():
        return " " * a.size
    lo = float(np.nanmin(a)) if lo is None else lo
    hi = float(np.nanmax(a)) if hi is None else hi
    if hi <= lo:  # constant: a flat mid line
        return "".join(" " if math.isnan(v) else SPARK[3] for v in a)
    span = hi - lo
    out = []
    for v in a:
        if math.isnan(v):
            out.append(" ")
        else:
            out.append(SPARK[int(min(max((v - lo) / span, 0), 1) * (len(SPARK) - 1) + 0.5)])
    return "".join(out)


def _n(v: Any, nd: int = 1, unit: str = "") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        s = f"{v:,.{nd}f}"
    else:
        s = str(v)
    return s + unit


_energy = energy_text


def _dur(s: Optional[float]) -> str:
    if s is None:
        return "n/a"
    s = float(s)
    if s >= 3600:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    if s >= 60:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{s:.1f}s"


def _sum_series(series: dict, key: str, how: str = "sum"):
    arrs = [v[key] for v in series.get("gpu", {}).values() if key in v]
    if not arrs:
        return None
    m = np.vstack(arrs)
    import warnings
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if how == "sum":
            return np.where(np.all(np.isnan(m), axis=0), np.nan, np.nansum(m, axis=0))
        return np.nanmax(m, axis=0) if how == "max" else np.nanmean(m, axis=0)


def _throttle_by_reason(con, gpus) -> None:
    """Per GPU (the GPU table's order), the slowdown reasons with time, as the JSON has them.
    reason=seconds, no space inside, so a wrapped cell breaks only between reasons."""
    from rich import box
    from rich.table import Table

    rows = [(g, cell) for g in gpus if (cell := throttle_by_reason_cell(g))]
    if not rows:
        return
    t = Table(title="Throttle time by reason (s)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("gpu", no_wrap=True)
    t.add_column("reasons with time (* = NVML counter, else sampled bitmask)")
    for g, cell in rows[:MAX_GPU_ROWS]:
        t.add_row(f"{g['host']}/{g['index']}", cell)
    con.print(t)
    if len(rows) > MAX_GPU_ROWS:
        con.print(f"... {len(rows) - MAX_GPU_ROWS} more throttled GPUs (see --format json/html)")


def _xids(con, d, Table, box) -> None:
    """XID errors per GPU and code, then one line saying how far they were collected."""
    headers, rows = report_xid.table(d)
    if rows:
        t = Table(title="XID errors (driver error reports)", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False)
        for c in headers:
            t.add_column(c, justify="right" if c in ("XID", "count") else "left", no_wrap=c != "meaning")
        for r in rows[:MAX_GPU_ROWS]:
            t.add_row(*map(str, r))
        con.print(t)
        if len(rows) > MAX_GPU_ROWS:
            con.print(f"... {len(rows) - MAX_GPU_ROWS} more XID rows (see --format json/html)")
    line = report_xid.summary(d)
    if line:
        con.print(line, markup=False)


def _nodes_table(con, d, Table, box) -> None:
    """One row per node: GPU columns when the job had GPUs, and always the host's CPU, memory and load
    (a CPU-only job, or any program not built on train_entry, still has those)."""
    has_gpus = bool(d["gpus"])
    t = Table(title="Nodes", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
    cols = ["host"] + (["GPUs", "GPU energy", "GPU avg W", "GPU peak W", "max GPU °C"] if has_gpus else []) + \
        ["CPU energy", "CPU %", "mem GiB", "load", "mon %"]
    for c in cols:
        t.add_column(c, justify="left" if c == "host" else "right", no_wrap=True)
    for nd in d["nodes"][:MAX_NODE_ROWS]:
        ne, mem, load = nd["energy_j"], nd.get("mem_used_mib") or {}, nd.get("load1") or {}
        gib = [None if v is None else v / 1024 for v in (mem.get("max"), mem.get("total"))]
        row = [nd["host"]]
        if has_gpus:
            row += [str(len(nd["gpus"])), _energy(ne["gpu"]), _n(nd["avg_power_w"]["gpu"], 0),
                    _n(nd["peak_gpu_power_w"], 0), _n(nd["max_gpu_temp_c"], 1)]
        row += [_energy(ne["cpu"]), f"{_n(nd.get('avg_cpu_pct'), 0)}/{_n(nd.get('max_cpu_pct'), 0)}",
                f"{_n(gib[0], 1)}/{_n(gib[1], 1)}", f"{_n(load.get('avg'), 1)}/{_n(load.get('max'), 1)}",
                _n(nd["monitor"]["cpu_pct_of_core"], 2)]
        t.add_row(*row)
    con.print(t)
    con.print("CPU % and load: avg/max over the job; mem GiB: max used/total; mon %: the monitor's own CPU "
              "(% of one core).", markup=False, style="dim")
    if len(d["nodes"]) > MAX_NODE_ROWS:
        con.print(f"... {len(d['nodes']) - MAX_NODE_ROWS} more nodes (see --format json/html)")


def _gpu_table(con, gpus, ser, Table, box) -> None:
    """GPUs, hottest first, with the legend of their columns."""
    t = Table(title="GPUs (hottest first)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
              padding=(0, 1, 0, 1), collapse_padding=True)
    for c in ("gpu", "ranks", "energy", "W avg/max", "hdrm", "°C avg/max", "HBM", "margin", "near",
              "thr P/T", "util", "power", "temp"):
        t.add_column(c, justify="left" if c in ("gpu", "ranks", "power", "temp") else "right", no_wrap=True)
    for g in gpus[:MAX_GPU_ROWS]:
        key = f"{g['host']}/{g['index']}"
        s = ser.get("gpu", {}).get(key, {})
        ts = g["throttle_s"]
        src = {"counter": "", "integrated_power": "~"}.get(g["energy_source"], "?")
        rk = ",".join(map(str, g["ranks"][:4])) + ("…" if len(g["ranks"]) > 4 else "") + ("÷" if g["shared"] else "")
        thr = (_n(ts.get("power"), 0) + ("*" if g["throttle_source"].get("power", "").startswith("violation_counter") else "")
               + "/" + _n(ts.get("thermal"), 0) + ("*" if g["throttle_source"].get("thermal", "").startswith("violation_counter") else ""))
        t.add_row(key, rk or "-", src + _energy(g["energy_j"], 0),
                  f"{_n(g['avg_power_w'], 0)}/{_n(g['max_power_w'], 0)}", _n(g["power_headroom_w"], 0),
                  f"{_n(g['avg_temp_c'], 0)}/{_n(g['max_temp_c'], 0)}", _n(g["max_mem_temp_c"], 0),
                  _n(g["slowdown_margin_c"], 1), _n(g["time_near_slowdown_s"], 0), thr,
                  _n(g["avg_util_pct"], 0), sparkline(s.get("power", []), 10), sparkline(s.get("temp", []), 10))
    con.print(t)
    con.print("energy: from counter differences; ~ = integrated power. headroom = power limit - max W. margin = "
              "slowdown threshold - max °C; near = s within 5 °C of it. thr P/T = s throttled for power/thermal "
              "(* = NVML violation counters, else sampled bitmask). ÷ = GPU shared by ranks (energy split evenly).",
              markup=False, style="dim")
    if len(gpus) > MAX_GPU_ROWS:
        con.print(f"... {len(gpus) - MAX_GPU_ROWS} more GPUs (see --format json/html)")


def _memory_table(con, d, Table, box) -> None:
    """What each rank holds (train_entry's memory records; the GPU's use from the monitor): the
    saving of ZeRO stages shows in the first column."""
    rows = [r for r in d["ranks"] if r.get("memory")]
    if not rows:
        return
    cols = [(h, k) for h, k in MEMORY_COLUMNS if any(r["memory"].get(k) is not None for r in rows)]
    t = Table(title="Memory per rank (parameters, gradients, optimizer state held; peaks)", title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False)
    for c in ("rank", "host", *(h for h, _ in cols)):
        t.add_column(c, justify="right")
    for r in rows[:64]:
        t.add_row(str(r["rank"]), str(r["host"] or "n/a"), *(_n(r["memory"].get(k), 2) for _, k in cols))
    con.print(t)


def render_text(report, width: int = 120, color: bool = False) -> str:
    from rich.console import Console
    from rich import box
    from rich.table import Table

    d = report.data
    ser = report.series
    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=color, color_system="standard" if color else None,
                  highlight=False, emoji=False)
    job = d["job"]
    e = d["energy_j"]
    title = f"hpclaunch report — job {job.get('id') or '?'} ({job.get('name') or '?'})"
    con.print(f"[bold]{title}[/bold]")
    con.print(f"run dir {job.get('run_dir')}   duration {duration_text(d['duration_s'])}   "
              f"{len(d['nodes'])} node(s), {len(d['gpus'])} GPU(s), {len(d['ranks'])} rank(s)")
    history = d.get("attempt_history") or []
    if len(history) > 1:
        con.print(f"Attempts {len(history)}, {attempt_duration(job.get('elapsed_s'))} in all:", markup=False)
        for a in history:
            con.print(f"  {attempt_line(a)}", markup=False)
    pw = d["power_w"]
    lines = [
        f"Energy  total {_energy(e['total'])}{'' if e['complete'] else ' (incomplete, see warnings)'}"
        f" = GPU {_energy(e['gpu'])} + CPU {_energy(e['cpu'])}",
        f"Power   GPU avg {_n(pw['gpu_avg'], 0, ' W')}, peak {_n(pw['gpu_peak'], 0, ' W')};"
        f" CPU avg {_n(pw['cpu_avg'], 0, ' W')}",
    ]
    ef = d["efficiency"]
    if ef.get("steps"):
        eps = ef["energy_per_step_j"] or {}
        epsm = ef["energy_per_sample_j"] or {}
        lines.append(f"Work    {ef['steps']:,} steps, {_n(ef['samples'], 0)} samples; "
                     f"per step {_n(eps.get('total') if eps.get('total') is not None else eps.get('gpu'), 1, ' J')}"
                     f"{'' if eps.get('total') is not None else ' (GPU only)'}, per sample "
                     f"{_n(epsm.get('total') if epsm.get('total') is not None else epsm.get('gpu'), 3, ' J')}")
    idle = d["idle"]
    if not d["gpus"]:  # a CPU-only job: no GPU power or idle-GPU lines of n/a
        lines.pop(1)
    else:
        lines.append(f"Idle    {_energy(idle['energy_j'])} drawn by allocated GPUs at ≤{idle['util_threshold_pct']:g} % "
                     f"utilisation ({_n(idle['share_of_gpu_pct'], 1, ' %')} of GPU energy, {_dur(idle['gpu_s'])} GPU-time)")
    tt = d["throttle_total_s"]
    if tt:
        lines.append(f"Throttle (GPU-seconds) power {_n(tt.get('power'), 1)}, thermal {_n(tt.get('thermal'), 1)}, "
                     f"any slowdown (bitmask) {_n(tt.get('any_slowdown'), 1)}")
    st = d.get("stragglers")
    if st:
        lines.append(f"Steps   median step {_n(st['median_step_time_s'], 4, ' s')}; slowest rank {st['slowest_rank']} "
                     f"at {_n(st['slowest_ratio'], 3)}× median; spread {_n(st['spread_pct'], 1, ' %')}")
    for ln in lines:
        con.print(ln, markup=False)
    p = _sum_series(ser, "power", "sum")
    tmax = _sum_series(ser, "temp", "max")
    sw = max(20, min(80, width - 40))
    if p is not None and np.any(~np.isnan(p)):
        con.print(f"GPU power  {sparkline(p, sw)}  {_n(float(np.nanmin(p)), 0)}–{_n(float(np.nanmax(p)), 0)} W",
                  markup=False)
    if tmax is not None and np.any(~np.isnan(tmax)):
        con.print(f"Max temp   {sparkline(tmax, sw)}  {_n(float(np.nanmin(tmax)), 0)}–{_n(float(np.nanmax(tmax)), 0)} °C",
                  markup=False)

    _nodes_table(con, d, Table, box)
    gpus = sorted(d["gpus"], key=lambda g: -(g["max_temp_c"] if g["max_temp_c"] is not None else -1e9))
    if gpus:
        _gpu_table(con, gpus, ser, Table, box)
    _throttle_by_reason(con, gpus)
    _xids(con, d, Table, box)

    # ranks / stragglers
    if st and st["ranks"]:
        t = Table(title="Stragglers (median step time vs median of all ranks)", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False)
        for c in ("rank", "host", "median step s", "× median"):
            t.add_column(c, justify="right")
        for r in st["ranks"][:10]:
            t.add_row(str(r["rank"]), str(r["host"]), _n(r["median_step_time_s"], 4), _n(r["ratio"], 3))
        con.print(t)
    _memory_table(con, d, Table, box)
    if any((r.get("gpu_shared_by") or 0) > 1 for r in d["ranks"]):
        con.print("note: some GPUs are shared by several ranks; their energy is split evenly between those ranks",
                  markup=False)

    # honesty
    cov = d["coverage"]
    xc = cov.get("crosscheck_pct")
    con.print(f"Sources: {sources_text(cov['energy_sources'])}; "
              f"counter vs integrated power {crosscheck_text(xc)}; "
              f"min coverage {_n(cov['min_gpu_coverage_pct'], 2, ' %')}; {cov['n_gaps']} gap(s) > {cov['gap_threshold']}; "
              f"{cov['duplicate_rows_removed']} duplicate and {cov['malformed_rows_skipped']} malformed rows dropped",
              markup=False)
    mo = d["monitor_overhead"]
    con.print(f"Monitor overhead: max {_n(mo['max_cpu_pct_of_core'], 3, ' %')} of one core, "
              f"max RSS {_n(mo['max_rss_mib'], 0, ' MiB')}", markup=False)
    if d["warnings"]:
        con.print(f"[bold]Warnings ({len(d['warnings'])})[/bold]")
        for w in d["warnings"][:30]:
            con.print(f"  ! {w}", markup=False)
        if len(d["warnings"]) > 30:
            con.print(f"  ... {len(d['warnings']) - 30} more (see --format json)")
    return buf.getvalue()
