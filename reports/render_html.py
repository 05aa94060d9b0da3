"""HTML rendering: one self-contained file, hand-written inline SVG (no network, no matplotlib).

Contents: summary cards, power and temperature over time per GPU (a band min/median/max plus the
top GPUs when there are more than 16), node x GPU heat maps of peak temperature and energy,
loss/throughput curves when metrics exist, tables, coverage and warnings. A tiny inline script
sets ``document.title`` and ``data-rendered`` on <html> so a headless browser test can prove
that the page's JS ran.
"""
from __future__ import annotations

import html
import math
import warnings
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np

from hpclaunch.reports import xid as report_xid
from hpclaunch.reports.attempts import duration_text as attempt_duration
from hpclaunch.reports.model import (MEMORY_COLUMNS, SLOWDOWN_REASONS, crosscheck_text, duration_text, energy_text,
                                     reasons_text,
                                     sources_text, throttle_by_reason_cell)

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
MAX_LINES = 16

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.sub{color:#666;font-size:13px} .cards{display:flex;flex-wrap:wrap;gap:10px;margin:14px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:150px}
.card b{display:block;font-size:18px} .card span{color:#666;font-size:12px}
table{border-collapse:collapse;font-size:12px;margin:6px 0} th,td{white-space:nowrap;padding:3px 7px;border-bottom:1px solid #eee;text-align:right}
th{background:#f6f6f6;position:sticky;top:0} td.l,th.l{text-align:left}
.warn{color:#8a4b00;font-size:13px} .charts{display:flex;flex-wrap:wrap;gap:18px}
svg text{font-size:11px;fill:#333} .note{color:#666;font-size:12px;max-width:1100px}
details{margin:6px 0}
"""


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _n(v, nd=1, unit=""):
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.{nd}f}{unit}"
    return f"{v}{unit}"


_energy = energy_text


def _mem_gib(node) -> str:
    mem = node.get("mem_used_mib") or {}
    used, total = mem.get("max"), mem.get("total")
    return f"{_n(None if used is None else used / 1024, 1)} / {_n(None if total is None else total / 1024, 1)}"


def _ticks(lo: float, hi: float, n: int = 5) -> List[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=raw)
    start = math.ceil(lo / step) * step
    out = []
    v = start
    while v <= hi + 1e-9 * step:
        out.append(round(v, 10))
        v += step
    return out


def _clipped(ys: Sequence[float]) -> List[float]:
    return [v if v is None or not math.isfinite(v) else min(max(v, -1e300), 1e300) for v in ys]


def line_chart(lines: Sequence[Tuple[str, Sequence[float], Sequence[float], str]], title: str, ylabel: str,
               xlabel: str = "time since job start", width: int = 560, height: int = 260,
               hlines: Sequence[Tuple[float, str]] = (), band: Optional[Tuple[Sequence[float], Sequence[float], Sequence[float]]] = None,
               time_axis: bool = True) -> str:
    """SVG line chart. lines: (label, x, y, colour); NaN breaks a line. band: (x, lo, hi) filled."""
    ml, mr, mt, mb = 54, 12, 24, 36
    pw, ph = width - ml - mr, height - mt - mb
    # clipped: a span between huge values must stay finite (plausible.py makes them missing first)
    lines = [(label, x, _clipped(y), col) for label, x, y, col in lines]
    band = (band[0], _clipped(band[1]), _clipped(band[2])) if band else None
    xs_all = [v for _, x, _, _ in lines for v in x] + (list(band[0]) if band else [])
    ys_all = [v for _, _, y, _ in lines for v in y if v is not None and math.isfinite(v)]
    if band:
        ys_all += [v for v in list(band[1]) + list(band[2]) if v is not None and math.isfinite(v)]
    ys_all += [h for h, _ in hlines]
    if not xs_all or not ys_all:
        return f'<svg width="{width}" height="60" role="img"><text x="10" y="30">{_e(title)}: no data</text></svg>'
    x0, x1 = min(xs_all), max(xs_all)
    y0, y1 = min(ys_all), max(ys_all)
    if not y1 - y0 > 1e-9 * max(abs(y0), abs(y1)):  # flat (1e308 ± 1 is 1e308): a span around it
        y0, y1 = y0 - max(1.0, abs(y0) * 0.05), y1 + max(1.0, abs(y1) * 0.05)
    pad = (y1 - y0) * 0.05
    y0, y1 = y0 - pad, y1 + pad
    if x1 <= x0:
        x1 = x0 + 1

    def X(v):
        return ml + (v - x0) / (x1 - x0) * pw

    def Y(v):
        return mt + ph - (v - y0) / (y1 - y0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'aria-label="{_e(title)}">',
           f'<text x="{ml}" y="15" style="font-weight:600;font-size:12px">{_e(title)}</text>',
           f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#ccc"/>']
    for tv in _ticks(y0, y1):
        out.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{Y(tv):.1f}" y2="{Y(tv):.1f}" stroke="#eee"/>'
                   f'<text x="{ml - 4}" y="{Y(tv) + 4:.1f}" text-anchor="end">{tv:g}</text>')
    if time_axis:
        scale, unit = (3600.0, " (h)") if x1 - x0 > 3 * 3600 else ((60.0, " (min)") if x1 - x0 > 180 else (1.0, " (s)"))
    else:
        scale, unit = 1.0, ""
    for tv in _ticks(x0 / scale, x1 / scale):
        out.append(f'<text x="{X(tv * scale):.1f}" y="{mt + ph + 14}" text-anchor="middle">{tv:g}</text>')
    out.append(f'<text x="{ml + pw / 2}" y="{height - 4}" text-anchor="middle">{_e(xlabel)}{unit}</text>')
    out.append(f'<text transform="translate(12,{mt + ph / 2}) rotate(-90)" text-anchor="middle">{_e(ylabel)}</text>')
    if band:
        bx, blo, bhi = band
        pts_hi = [(X(x), Y(h)) for x, h in zip(bx, bhi) if h is not None and math.isfinite(h)]
        pts_lo = [(X(x), Y(lo)) for x, lo in zip(bx, blo) if lo is not None and math.isfinite(lo)]
        if pts_hi and pts_lo:
            pts = pts_hi + pts_lo[::-1]
            out.append('<polygon fill="#1f77b4" fill-opacity="0.15" stroke="none" points="'
                       + " ".join(f"{a:.1f},{b:.1f}" for a, b in pts) + '"><title>min–max over GPUs</title></polygon>')
    for hv, hl in hlines:
        out.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{Y(hv):.1f}" y2="{Y(hv):.1f}" stroke="#d62728" '
                   f'stroke-dasharray="5,4"/><text x="{ml + pw - 4}" y="{Y(hv) - 4:.1f}" text-anchor="end" '
                   f'style="fill:#d62728">{_e(hl)}</text>')
    for label, xs, ys, col in lines:
        seg: List[str] = []
        segs: List[List[str]] = []
        for x, y in zip(xs, ys):
            if y is None or not math.isfinite(y):
                if seg:
                    segs.append(seg)
                seg = []
                continue
            seg.append(f"{X(x):.1f},{Y(y):.1f}")
        if seg:
            segs.append(seg)
        for sg in segs:
            out.append(f'<polyline fill="none" stroke="{col}" stroke-width="1.3" points="{" ".join(sg)}">'
                       f'<title>{_e(label)}</title></polyline>')
    # legend
    lx = ml + 6
    ly = mt + 12
    for i, (label, _, _, col) in enumerate(lines[:10]):
        out.append(f'<rect x="{lx}" y="{ly + i * 13 - 8}" width="10" height="3" fill="{col}"/>'
                   f'<text x="{lx + 14}" y="{ly + i * 13 - 4}">{_e(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def _color(v: float, lo: float, hi: float) -> str:
    """Sequential colour (pale yellow -> red -> dark purple)."""
    stops = [(255, 255, 204), (254, 178, 76), (240, 59, 32), (128, 0, 38)]
    f = 0.0 if hi <= lo else min(max((v - lo) / (hi - lo), 0.0), 1.0)
    k = f * (len(stops) - 1)
    i = min(int(k), len(stops) - 2)
    t = k - i
    c = [round(stops[i][j] + (stops[i + 1][j] - stops[i][j]) * t) for j in range(3)]
    return "#%02x%02x%02x" % tuple(c)


def heatmap(rows: Sequence[str], cols: Sequence[int], values: dict, title: str, fmt, unit: str,
            cell: int = 34) -> str:
    """values[(row, col)] -> float or None. SVG grid with a colour scale."""
    vals = [v for v in values.values() if v is not None]
    lo, hi = (min(vals), max(vals)) if vals else (0.0, 1.0)
    ch = max(12, min(cell, 22 if len(rows) > 16 else cell))
    ml, mt = 90, 34
    w = ml + len(cols) * cell + 140
    h = mt + len(rows) * ch + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="{_e(title)}">',
           f'<text x="0" y="14" style="font-weight:600;font-size:12px">{_e(title)}</text>']
    for j, c in enumerate(cols):
        out.append(f'<text x="{ml + j * cell + cell / 2}" y="{mt - 6}" text-anchor="middle">{c}</text>')
    out.append(f'<text x="{ml - 6}" y="{mt - 6}" text-anchor="end">node \\ GPU</text>')
    for i, r in enumerate(rows):
        y = mt + i * ch
        out.append(f'<text x="{ml - 6}" y="{y + ch / 2 + 4}" text-anchor="end">{_e(r)}</text>')
        for j, c in enumerate(cols):
            v = values.get((r, c))
            x = ml + j * cell
            if (r, c) not in values:
                continue
            fill = "#eeeeee" if v is None else _color(v, lo, hi)
            label = "n/a" if v is None else fmt(v)
            out.append(f'<rect x="{x}" y="{y}" width="{cell - 1}" height="{ch - 1}" fill="{fill}">'
                       f'<title>{_e(r)} GPU {c}: {_e(label)}{_e(unit) if v is not None else ""}</title></rect>')
            if ch >= 16 and cell >= 30:
                dark = v is not None and hi > lo and (v - lo) / (hi - lo) > 0.55
                out.append(f'<text x="{x + cell / 2}" y="{y + ch / 2 + 4}" text-anchor="middle" '
                           f'style="font-size:10px;fill:{"#fff" if dark else "#222"}">{_e(label)}</text>')
    # scale
    sx = ml + len(cols) * cell + 16
    for k in range(10):
        v = lo + (hi - lo) * (9 - k) / 9
        out.append(f'<rect x="{sx}" y="{mt + k * 10}" width="14" height="10" fill="{_color(v, lo, hi)}"/>')
    out.append(f'<text x="{sx + 18}" y="{mt + 9}">{_e(fmt(hi))}{_e(unit)}</text>'
               f'<text x="{sx + 18}" y="{mt + 99}">{_e(fmt(lo))}{_e(unit)}</text>')
    out.append("</svg>")
    return "".join(out)


def _table(headers: Sequence[str], rows: Iterable[Sequence], left: int = 1) -> str:
    out = ['<div style="overflow-x:auto"><table><thead><tr>']
    out += [f'<th class="{"l" if i < left else ""}">{_e(h)}</th>' for i, h in enumerate(headers)]
    out.append("</tr></thead><tbody>")
    for r in rows:
        out.append("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{_e(v)}</td>' for i, v in enumerate(r))
                   + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def _gpu_lines(report, key: str, pick_by: str):
    ser = report.series
    gs = ser.get("gpu", {})
    if not gs or report.data["duration_s"] is None:
        return [], None
    bins = ser["bins"]
    dur = report.data["duration_s"] or 0.0
    xs = [(i + 0.5) / bins * dur for i in range(bins)]
    names = list(gs)
    band = None
    if len(names) > MAX_LINES:
        m = np.vstack([gs[k][key] for k in names])
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN bins
            lo, hi, med = np.nanmin(m, 0), np.nanmax(m, 0), np.nanmedian(m, 0)
        band = (xs, lo.tolist(), hi.tolist())
        by = {g["host"] + "/" + str(g["index"]): g for g in report.data["gpus"]}
        top = sorted(names, key=lambda k: -(by.get(k, {}).get(pick_by) or -1e18))[:4]
        lines = [("median of GPUs", xs, med.tolist(), "#555")]
        lines += [(f"{k} (top {pick_by.replace('_', ' ')})", xs, gs[k][key].tolist(), PALETTE[(i + 1) % 10])
                  for i, k in enumerate(top)]
        return lines, band
    return [(k, xs, gs[k][key].tolist(), PALETTE[i % 10]) for i, k in enumerate(names)], None


def _by_reason(g) -> str:
    """The GPU's slowdown reasons with time, as in the JSON; "none", or "n/a" when nothing was logged."""
    cell = throttle_by_reason_cell(g)
    if not cell:
        return "n/a" if all(g["throttle_s"].get(r) is None for r in SLOWDOWN_REASONS) else "none"
    return cell


def _xids(d) -> str:
    headers, rows = report_xid.table(d)
    line = report_xid.summary(d)
    if not line:
        return ""
    return (f"<h2>XID errors</h2><p class=\"note\">{_e(line)}</p>"
            + (_table(headers, rows, left=2) if rows else ""))


def _attempts_table(history: list) -> str:
    """One row per attempt: when, how long, where, and why it ended."""
    import time

    def at(t):
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t is not None else ""
    rows = [(str(a["attempt"]), a.get("job_id") or "", at(a.get("start_unix")), at(a.get("end_unix")) or "running",
             attempt_duration(a.get("elapsed_s")), a.get("nodes") or "", a.get("cause") or "") for a in history]
    return "<h2>Attempts</h2>" + _table(("attempt", "job", "start", "end", "elapsed", "nodes", "cause"), rows, left=7)


def render_html(report) -> str:
    d = report.data
    job = d["job"]
    e = d["energy_j"]
    title = f"hpclaunch report — job {job.get('id') or '?'} ({job.get('name') or '?'})"
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(title)}</title>"
             f"<meta name=\"viewport\" content=\"width=device-width\"><style>{CSS}</style></head><body>",
             f"<h1>{_e(title)}</h1><div class=\"sub\">{_e(job.get('run_dir'))} · schema {_e(d['schema'])} · "
             f"{len(d['nodes'])} node(s), {len(d['gpus'])} GPU(s), {len(d['ranks'])} rank(s)</div>"]
    ef = d["efficiency"]
    eps = (ef.get("energy_per_sample_j") or {})
    cards = [
        ("Duration", duration_text(d["duration_s"])),
        ("Energy total" + ("" if e["complete"] else " (incomplete)"), _energy(e["total"])),
        ("GPU energy", _energy(e["gpu"])), ("CPU energy (RAPL)", _energy(e["cpu"])),
        ("GPU power avg / peak", f"{_n(d['power_w']['gpu_avg'], 0)} / {_n(d['power_w']['gpu_peak'], 0)} W"),
        ("Idle GPU energy", f"{_energy(d['idle']['energy_j'])} ({_n(d['idle']['share_of_gpu_pct'], 1)} %)"),
        ("Energy per sample", _n(eps.get("total") if eps.get("total") is not None else eps.get("gpu"), 4, " J")),
        ("Throttled power / thermal", f"{_n(d['throttle_total_s'].get('power'), 0)} / "
                                      f"{_n(d['throttle_total_s'].get('thermal'), 0)} GPU·s"),
    ]
    history = d.get("attempt_history") or []
    if len(history) > 1:
        cards.insert(1, ("Attempts", f"{len(history)} in {attempt_duration(job.get('elapsed_s'))}"))
    st = d.get("stragglers")
    if st:
        cards.append(("Slowest rank", f"{st['slowest_rank']} ({_n(st['slowest_ratio'], 3)}× median)"))
    parts.append('<div class="cards">' + "".join(f"<div class=\"card\"><span>{_e(k)}</span><b>{_e(v)}</b></div>"
                                                 for k, v in cards) + "</div>")
    if len(history) > 1:
        parts.append(_attempts_table(history))
    if d["warnings"]:
        parts.append(f"<details open><summary class=\"warn\">{len(d['warnings'])} warning(s)</summary><ul>"
                     + "".join(f"<li class=\"warn\">{_e(w)}</li>" for w in d["warnings"][:200]) + "</ul></details>")
    # time series
    parts.append("<h2>Power and temperature over time</h2><div class=\"charts\">")
    pl, pb = _gpu_lines(report, "power", "energy_j")
    parts.append(line_chart(pl, "GPU power (bin means)", "W", band=pb))
    tl, tb = _gpu_lines(report, "temp", "max_temp_c")
    sds = sorted({g["slowdown_temp_c"] for g in d["gpus"] if g["slowdown_temp_c"] is not None})
    parts.append(line_chart(tl, "GPU temperature (bin maxima)", "°C", band=tb,
                            hlines=[(s, f"slowdown {s:g} °C") for s in sds[:2]]))
    parts.append("</div>")
    # heat maps
    hosts = sorted({g["host"] for g in d["gpus"]})
    idxs = sorted({g["index"] for g in d["gpus"]})
    if hosts:
        tv = {(g["host"], g["index"]): g["max_temp_c"] for g in d["gpus"]}
        emax = max((g["energy_j"] or 0.0) for g in d["gpus"])
        escale, eunit = (3.6e6, " kWh") if emax >= 3.6e6 else ((1e6, " MJ") if emax >= 1e6 else (1e3, " kJ"))
        ev = {(g["host"], g["index"]): (g["energy_j"] / escale if g["energy_j"] is not None else None) for g in d["gpus"]}
        parts.append("<h2>Node × GPU</h2><div class=\"charts\">")
        parts.append(heatmap(hosts, idxs, tv, "Peak GPU temperature", lambda v: f"{v:.0f}", " °C"))
        parts.append(heatmap(hosts, idxs, ev, "GPU energy", lambda v: f"{v:.2f}" if v < 10 else f"{v:.0f}", eunit))
        parts.append("</div>")
    # metrics
    ser = report.series
    if ser.get("loss") or ser.get("throughput"):
        parts.append("<h2>Training</h2><div class=\"charts\">")
        if ser.get("loss"):
            xs = [s for s, _ in ser["loss"]]
            parts.append(line_chart([("loss (mean over ranks)", xs, [v for _, v in ser["loss"]], PALETTE[0])],
                                    "Loss", "loss", xlabel="step", time_axis=False))
        if ser.get("throughput"):
            xs = [s for s, _ in ser["throughput"]]
            parts.append(line_chart([("samples/s (sum over ranks)", xs, [v for _, v in ser["throughput"]], PALETTE[2])],
                                    "Throughput", "samples/s", xlabel="step", time_axis=False))
        parts.append("</div>")
    # tables
    parts.append("<h2>Nodes</h2>")
    parts.append(_table(("host", "GPUs", "GPU energy", "CPU energy", "total", "GPU avg W", "GPU peak W",
                         "max GPU °C", "max CPU °C", "CPU % avg / max", "memory used GiB max / total",
                         "load avg / max", "monitor CPU % of a core", "monitor RSS MiB"),
                        [(n["host"], len(n["gpus"]), _energy(n["energy_j"]["gpu"]), _energy(n["energy_j"]["cpu"]),
                          _energy(n["energy_j"]["total"]), _n(n["avg_power_w"]["gpu"], 0), _n(n["peak_gpu_power_w"], 0),
                          _n(n["max_gpu_temp_c"]), _n(n["max_cpu_temp_c"]),
                          f"{_n(n.get('avg_cpu_pct'), 0)} / {_n(n.get('max_cpu_pct'), 0)}", _mem_gib(n),
                          f"{_n((n.get('load1') or {}).get('avg'), 1)} / {_n((n.get('load1') or {}).get('max'), 1)}",
                          _n(n["monitor"]["cpu_pct_of_core"], 3),
                          _n(n["monitor"]["max_rss_mib"], 0)) for n in d["nodes"]]))
    parts.append("<h2>GPUs</h2><p class=\"note\">Energy source: <i>counter</i> = differences of the driver's "
                 "energy counter (resets start a new segment); <i>integrated_power</i> = trapezoid of sampled power. "
                 "Cross-check = (power integral − counter) / counter. Throttle seconds marked * come from NVML "
                 "violation counters (exact), others from the sampled reasons bitmask. <i>Throttle by reason</i> "
                 "lists the slowdown reasons with time on that GPU (gpu_idle, applications_clocks_setting and "
                 "display_clock_setting are not slowdowns).</p>")
    rows = []
    for g in d["gpus"]:
        ts, tsrc = g["throttle_s"], g["throttle_source"]
        rows.append((f"{g['host']}/{g['index']}", g["uuid"] or "n/a",
                     ",".join(map(str, g["ranks"])) + (" (shared)" if g["shared"] else ""),
                     _energy(g["energy_j"]), g["energy_source"] or "n/a", _n(g["crosscheck_pct"] + 0.0 if g["crosscheck_pct"] is not None else None, 2, " %"),
                     _n(g["avg_power_w"], 0), _n(g["max_power_w"], 0), _n(g["power_limit_w"], 0),
                     _n(g["avg_temp_c"]), _n(g["max_temp_c"]), _n(g["max_mem_temp_c"]), _n(g["slowdown_margin_c"]),
                     _n(g["time_near_slowdown_s"], 0),
                     _n(ts.get("power"), 0) + ("*" if tsrc.get("power", "").startswith("violation_counter") else ""),
                     _n(ts.get("thermal"), 0) + ("*" if tsrc.get("thermal", "").startswith("violation_counter") else ""),
                     _by_reason(g),
                     _n(g["max_mem_used_mib"], 0), _n(g["avg_util_pct"]), _energy(g["idle_energy_j"]),
                     _n(g["coverage"]["pct_of_job"], 2, " %")))
    parts.append(_table(("GPU", "UUID", "ranks", "energy", "source", "cross-check", "avg W", "max W", "limit W",
                         "avg °C", "max °C", "HBM max °C", "margin °C", "near slowdown s", "power thr s",
                         "thermal thr s", "throttle by reason s", "max mem MiB", "util %", "idle energy",
                         "coverage"), rows, left=3))
    parts.append(_xids(d))
    if d["ranks"]:
        parts.append("<h2>Ranks</h2>")
        rk = sorted(d["ranks"], key=lambda r: -(r.get("slowdown_vs_median") or 0))
        parts.append(_table(("rank", "host", "GPUs", "energy", "split", "steps", "median step s", "× median",
                             "J/sample"),
                            [(r["rank"], r["host"] or "n/a", " ".join(r["gpus"]), _energy(r["energy_j"]),
                              r["energy_split"] or "n/a", _n(r["steps"]), _n(r["median_step_time_s"], 4),
                              _n(r["slowdown_vs_median"], 3), _n(r["energy_per_sample_j"], 4)) for r in rk[:200]], left=2))
        mem = [r for r in sorted(d["ranks"], key=lambda r: r["rank"]) if r.get("memory")]
        if mem:
            parts.append("<h3>Memory per rank</h3><p class=\"note\">parameters, gradients and optimizer state the "
                         "rank holds (its shards under ZeRO), from the tensors; peaks from the rank and, for a GPU of "
                         "its own, from the monitor</p>")
            parts.append(_table(("rank", "host", *(h for h, _ in MEMORY_COLUMNS)),
                                [(r["rank"], r["host"] or "n/a", *(_n(r["memory"].get(k), 2) for _, k in MEMORY_COLUMNS))
                                 for r in mem[:200]], left=2))
    cov = d["coverage"]
    mo = d["monitor_overhead"]
    parts.append("<h2>Coverage and honesty</h2><ul class=\"note\">"
                 f"<li>energy sources: {_e(sources_text(cov['energy_sources']))}; counter vs integrated power "
                 f"{_e(crosscheck_text(cov['crosscheck_pct']))}</li>"
                 f"<li>{cov['gpu_rows_read']} GPU rows read, {cov['duplicate_rows_removed']} duplicates removed, "
                 f"{cov['malformed_rows_skipped']} malformed rows skipped; {cov['n_gaps']} gap(s) longer than "
                 f"{_e(cov['gap_threshold'])}; minimum GPU coverage {_n(cov['min_gpu_coverage_pct'], 2, ' %')}</li>"
                 f"<li>monitor overhead: max {_n(mo['max_cpu_pct_of_core'], 3, ' %')} of one core, max RSS "
                 f"{_n(mo['max_rss_mib'], 0, ' MiB')}</li>"
                 f"<li>peak power: {_e(d['power_w']['peak_method'])}</li></ul>")
    parts.append("<script>(function(){var n=document.querySelectorAll('svg').length;"
                 "document.documentElement.setAttribute('data-rendered','1');"
                 "document.title='[rendered] '+document.title+' ('+n+' charts)';})();</script>")
    parts.append("</body></html>\n")
    return "".join(parts)


def _group_kwh(v) -> list:
    """A user's or partition's kWh columns; n/a when none of its jobs has a known energy."""
    known = v["jobs"] > v.get("unknown_energy_jobs", 0)
    return [f"{v[c] / 3.6e6:.3f}" if known else "n/a" for c in ("energy_j", "gpu_energy_j", "cpu_energy_j")]


def render_fleet_html(fleet) -> str:
    d = fleet.data
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>hpclaunch fleet report</title>"
             f"<style>{CSS}</style></head><body><h1>Fleet energy: {d['jobs_count']} jobs, "
             f"{'unknown' if d['energy_kwh'] is None else format(d['energy_kwh'], '.3f') + ' kWh'}</h1>",
             f"<p class=\"note\">GPU throttle over all jobs: {_e(reasons_text(d['throttle_s']) or 'none')}</p>"]
    for title, grp in (("By user", d["by_user"]), ("By partition", d["by_partition"])):
        parts.append(f"<h2>{title}</h2>")
        parts.append(_table(("", "jobs", "kWh", "GPU kWh", "CPU kWh", "GPU h", "incomplete"),
                            [(k, v["jobs"], *_group_kwh(v), f"{v['gpu_hours']:.1f}", v["incomplete_jobs"])
                             for k, v in grp.items()]))
    parts.append("<h2>Jobs</h2>")
    parts.append(_table(("job", "name", "user", "partition", "kWh", "GPUs", "max °C", "complete", "throttle"),
                        [(j["id"], j["name"], j["user"], j["partition"],
                          _n(j["energy_j"] / 3.6e6 if j["energy_j"] is not None else None, 3), j["gpus"],
                          _n(j["max_temp_c"]), "yes" if j["complete"] else "no", reasons_text(j["throttle_s"]))
                         for j in d["jobs"]], left=4))
    s = d["gpu_slots"]
    parts.append(f"<h2>GPU slots</h2><p class=\"note\">fleet median of average temperature "
                 f"{_n(s['fleet_median_avg_temp_c'])} °C; outlier threshold +{_n(s['outlier_threshold_c'])} °C</p>")
    parts.append(_table(("slot", "avg °C", "Δ median", "max °C", "near slowdown s", "jobs", "outlier"),
                        [(f"{r['host']}/{r['index']}", _n(r["mean_avg_temp_c"]), _n(r["delta_vs_fleet_median_c"]),
                          _n(r["max_temp_c"]), _n(r["time_near_slowdown_s"]), r["jobs"], "YES" if r["outlier"] else "",
                          reasons_text(r["throttle_s"])) for r in s["hottest"]]))
    if s["most_throttled"]:
        parts.append("<h2>Most throttled GPU slots</h2>")
        parts.append(_table(("slot", "jobs", "avg °C", "throttle"),
                            [(f"{r['host']}/{r['index']}", r["jobs"], _n(r["mean_avg_temp_c"]),
                              reasons_text(r["throttle_s"])) for r in s["most_throttled"]]))
    parts.append("<script>document.documentElement.setAttribute('data-rendered','1');</script></body></html>\n")
    return "".join(parts)
