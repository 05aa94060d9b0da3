"""The goodput report as text, JSON or one self-contained HTML page: one job (reports/goodput.py) or the
fleet (reports/goodput_fleet.py)."""
from __future__ import annotations

import html
import json
import time
from typing import List

from hpclaunch.reports.goodput import CATEGORIES

COLORS = {"queued": "#bbbbbb", "starting": "#9ecae1", "productive": "#2ca02c", "recomputing": "#ff7f0e",
          "checkpointing": "#1f77b4", "detecting": "#d62728", "recovering": "#9467bd", "ending": "#8c564b"}
CAUSES = {"node_failure": "dead nodes", "hang": "hung ranks", "unrecorded": "attempts the scheduler ended",
          "spare_nodes": "spare nodes held"}


def render(doc: dict, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc, indent=2, allow_nan=False) + "\n"
    fleet = doc.get("schema", "").startswith("hpclaunch.goodput_fleet")
    if fmt == "html":
        return fleet_html(doc) if fleet else job_html(doc)
    return fleet_text(doc) if fleet else job_text(doc)


def _dur(s) -> str:
    s = float(s or 0.0)
    if s < 60:
        return f"{s:.1f} s"
    m, sec = divmod(int(round(s)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def _pct(part, whole) -> str:
    return f"{100.0 * part / whole:5.1f} %" if whole else "    -"


def _clock(t) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "-"


def job_text(doc: dict) -> str:
    j = doc["job"]
    wall = doc["wall_s"]
    out = [f"goodput of job {j.get('id') or '-'} ({j.get('name') or j.get('run_dir') or '-'}): "
           f"{j['nodes']} node(s) x {j['gpus_per_node']} GPU(s)"
           + (f" + {j['spare_nodes']} spare(s)" if j.get("spare_nodes") else "")]
    ettr = doc.get("ettr")
    out.append(f"  wall {_dur(wall)} (run {_dur(doc['run_s'])}), ETTR {'-' if ettr is None else f'{100 * ettr:.1f} %'}")
    out.append("")
    out.append("  where the time went")
    for c in CATEGORIES:
        v = doc["seconds"].get(c, 0.0)
        out.append(f"    {c:<14}{_dur(v):>10}  {_pct(v, wall)}")
    out.append(f"    {'total':<14}{_dur(sum(doc['seconds'].values())):>10}")
    out.append("")
    out.append("  attempts")
    for a in doc["attempts"]:
        what = a.get("outcome") or "(no end recorded)"
        if a.get("failure"):
            what += f": {CAUSES.get(a['failure'], a['failure'])}"
        steps = f" steps {a['steps'][0]}-{a['steps'][1]}" if a.get("steps") else ""
        fenced = f", fenced {','.join(a['fenced'])}" if a.get("fenced") else ""
        out.append(f"    {a['attempt']:>3}  {_clock(a['start'])}-{_clock(a['end'])}  on {','.join(a['nodes']) or '-'}"
                   f"{steps}  {what}{fenced}")
    if doc["incidents"]:
        out.append("")
        out.append("  failures")
        for i in doc["incidents"]:
            where = f" rank {i['rank']}" if i.get("rank") is not None else ""
            where += f" on {i['node']}" if i.get("node") else ""
            detect = f", detected in {_dur(i['detect_s'])}" if i.get("detect_s") is not None else ""
            stacks = f"; stacks in {i['stacks']}" if i.get("stacks") else ""
            out.append(f"    attempt {i['attempt']}: {CAUSES.get(i['cause'], i['cause'])}{where}{detect}{stacks}")
    lost = doc.get("lost_gpu_hours") or {}
    node_h = doc.get("lost_node_hours") or {}
    if node_h:
        out.append("")
        out.append("  lost, by cause            GPU-hours   node-hours")
        for cause in sorted(node_h):
            out.append(f"    {CAUSES.get(cause, cause):<24}{lost.get(cause, 0.0):>10.3f}   {node_h[cause]:>10.3f}")
    for w in doc.get("warnings", []):
        out.append(f"  warning: {w}")
    return "\n".join(out) + "\n"


def fleet_text(doc: dict) -> str:
    out = [f"goodput of {doc['jobs']} job(s) since {time.strftime('%Y-%m-%d', time.localtime(doc['since_unix']))}"
           if doc.get("since_unix") else f"goodput of {doc['jobs']} job(s)"]
    out.append(f"  {'partition':<14}{'month':<9}{'jobs':>5}{'ETTR':>8}  " + "".join(f"{c[:9]:>10}" for c in CATEGORIES)
               + "   lost GPU-h by cause")
    for row in doc["rows"]:
        lost = ", ".join(f"{CAUSES.get(k, k)} {v:.2f}" for k, v in sorted(row["lost_gpu_hours"].items())) or "-"
        ettr = "-" if row["ettr"] is None else f"{100 * row['ettr']:.1f}%"
        out.append(f"  {row['partition'] or '-':<14}{row['month']:<9}{row['jobs']:>5}{ettr:>8}  "
                   + "".join(f"{row['seconds'][c] / 3600.0:>9.2f}h" for c in CATEGORIES) + f"   {lost}")
    for w in doc.get("warnings", []):
        out.append(f"  warning: {w}")
    return "\n".join(out) + "\n"


CSS = ("body{font-family:system-ui,sans-serif;margin:24px;color:#222}h1{font-size:20px}h2{font-size:16px;"
       "border-bottom:1px solid #ddd}table{border-collapse:collapse;font-size:12px}th,td{padding:3px 8px;"
       "border-bottom:1px solid #eee;text-align:right}td.l,th.l{text-align:left}.sw{display:inline-block;"
       "width:10px;height:10px;margin-right:4px}.warn{color:#8a4b00}")


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _legend() -> str:
    return " ".join(f'<span class="sw" style="background:{COLORS[c]}"></span>{_e(c)}' for c in CATEGORIES)


def _bar(segments: List[dict], t0: float, t1: float, width: int = 1000, height: int = 22) -> str:
    span = max(t1 - t0, 1e-9)
    rects = []
    for s in segments:
        x = (s["start"] - t0) / span * width
        w = max((s["end"] - s["start"]) / span * width, 0.5)
        rects.append(f'<rect x="{x:.2f}" y="0" width="{w:.2f}" height="{height}" fill="{COLORS.get(s["category"], "#000")}">'
                     f'<title>{_e(s["category"])} {_e(_dur(s["end"] - s["start"]))} (attempt {_e(s["attempt"])}'
                     f'{", " + _e(s["cause"]) if s.get("cause") else ""})</title></rect>')
    return f'<svg width="{width}" height="{height}" role="img">{"".join(rects)}</svg>'


def _page(title: str, body: str) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f'<style>{CSS}</style></head><body>{body}'
            '<script>document.documentElement.dataset.rendered="1"</script></body></html>\n')


def job_html(doc: dict) -> str:
    j = doc["job"]
    wall = doc["wall_s"]
    rows = "".join(f'<tr><td class="l"><span class="sw" style="background:{COLORS[c]}"></span>{_e(c)}</td>'
                   f'<td>{_e(_dur(doc["seconds"][c]))}</td><td>{_e(_pct(doc["seconds"][c], wall))}</td></tr>'
                   for c in CATEGORIES)
    attempts = "".join(
        f'<tr><td>{_e(a["attempt"])}</td><td class="l">{_e(",".join(a["nodes"]))}</td><td>{_e(_clock(a["start"]))}</td>'
        f'<td>{_e(_clock(a["end"]))}</td><td class="l">{_e(a.get("outcome") or "-")}</td>'
        f'<td class="l">{_e(CAUSES.get(a.get("failure"), a.get("failure") or ""))}</td>'
        f'<td class="l">{_e(",".join(a.get("fenced") or []))}</td></tr>' for a in doc["attempts"])
    lost = "".join(f'<tr><td class="l">{_e(CAUSES.get(k, k))}</td><td>{v:.3f}</td>'
                   f'<td>{doc["lost_node_hours"].get(k, 0.0):.3f}</td></tr>' for k, v in sorted(doc["lost_gpu_hours"].items()))
    warn = "".join(f'<p class="warn">{_e(w)}</p>' for w in doc.get("warnings", []))
    ettr = "-" if doc.get("ettr") is None else f"{100 * doc['ettr']:.1f} %"
    t0 = doc.get("submit_unix") or 0.0
    t1 = doc.get("end_unix") or t0
    body = (f'<h1>Goodput: job {_e(j.get("id") or "-")} ({_e(j.get("name") or "-")})</h1>'
            f'<p>{_e(j["nodes"])} node(s) x {_e(j["gpus_per_node"])} GPU(s), {_e(j.get("spare_nodes") or 0)} spare(s); '
            f'wall {_e(_dur(wall))}; ETTR <b>{_e(ettr)}</b></p>'
            f'<h2>Timeline</h2>{_bar(doc["timeline"], t0, t1)}<p>{_legend()}</p>'
            f'<h2>Where the time went</h2><table><tr><th class="l">category</th><th>time</th><th>share</th></tr>{rows}</table>'
            f'<h2>Attempts</h2><table><tr><th>#</th><th class="l">nodes</th><th>start</th><th>end</th>'
            f'<th class="l">outcome</th><th class="l">failure</th><th class="l">fenced</th></tr>{attempts}</table>'
            f'<h2>Lost, by cause</h2><table><tr><th class="l">cause</th><th>GPU-hours</th><th>node-hours</th></tr>'
            f'{lost}</table>{warn}')
    return _page(f"goodput {j.get('id') or ''}", body)


def fleet_html(doc: dict) -> str:
    rows = []
    for r in doc["rows"]:
        total = sum(r["seconds"].values())
        segs, t = [], 0.0
        for c in CATEGORIES:
            segs.append({"start": t, "end": t + r["seconds"][c], "category": c, "attempt": "-"})
            t += r["seconds"][c]
        lost = ", ".join(f"{CAUSES.get(k, k)} {v:.2f}" for k, v in sorted(r["lost_gpu_hours"].items())) or "-"
        ettr = "-" if r["ettr"] is None else f"{100 * r['ettr']:.1f} %"
        rows.append(f'<tr><td class="l">{_e(r["partition"] or "-")}</td><td>{_e(r["month"])}</td><td>{_e(r["jobs"])}</td>'
                    f'<td>{_e(ettr)}</td><td>{_bar(segs, 0.0, total, 400, 14)}</td><td class="l">{_e(lost)}</td></tr>')
    warn = "".join(f'<p class="warn">{_e(w)}</p>' for w in doc.get("warnings", []))
    body = (f'<h1>Goodput of {_e(doc["jobs"])} job(s)</h1><p>{_legend()}</p><table><tr><th class="l">partition</th>'
            f'<th>month</th><th>jobs</th><th>ETTR</th><th>time</th><th class="l">lost GPU-hours by cause</th></tr>'
            f'{"".join(rows)}</table>{warn}')
    return _page("goodput fleet", body)
