"""`hpclaunch tune status|report STUDY`: a study's trials, its best trial as a ready job file, and
the energy it spent (in total and on pruned trials), as text, JSON (hpclaunch.study-report/1) or
one HTML page whose charts Optuna's visualization module draws with plotly (docs/tune.md).

A trial's energy is its task's report (hpclaunch report of the task's run directory: the monitor's
measured energy); a trial whose task left no monitor logs has none, and the totals say how many.
"""
from __future__ import annotations

import html
import json
import os
from typing import Any, Dict, List, Optional

from hpclaunch.runs.registry import FINAL_STATES, Registry
from hpclaunch.tune import study as files
from hpclaunch.tune.space import plain

REPORT_SCHEMA = "hpclaunch.study-report/1"


def trial_state(t, active: bool) -> str:
    """complete, pruned, failed, running, waiting, or interrupted (a trial left running by a task
    that ended without telling: the job was cancelled or lost; --resume runs its point again)."""
    word = files.state_word(t)
    return "interrupted" if word == "running" and not active else word


def trial_energy(run_dir: Optional[str]) -> Optional[float]:
    if not run_dir or not os.path.isdir(os.path.join(run_dir, "monitor")):
        return None
    from hpclaunch.reports import build_report

    try:
        total = build_report(run_dir, bins=8).data["energy_j"]["total"]
    except Exception:  # a damaged log: the trial's energy is unknown, the report goes on
        return None
    return float(total) if isinstance(total, (int, float)) else None


def _job_ids(settings: Dict[str, Any]) -> Dict[str, str]:
    """The study's array folders (their run directories) -> job id."""
    return {os.path.abspath(j["run_dir"]): str(j["job_id"]) for j in settings.get("jobs", []) if "run_dir" in j}


def document(folder: str, energy: bool = True, registry: Optional[Registry] = None) -> Dict[str, Any]:
    settings = files.read_settings(folder)
    study = files.open_study(folder, settings)
    active = _active(settings, registry)
    arrays = _job_ids(settings)
    rows: List[Dict[str, Any]] = []
    for t in study.get_trials(deepcopy=False):
        run_dir = t.user_attrs.get(files.ATTR_RUN_DIR)
        state = trial_state(t, active)
        rows.append({
            "number": t.number, "state": state, "params": {k: plain(v) for k, v in t.params.items()},
            "value": plain(t.value) if t.value is not None else None,
            "steps": t.user_attrs.get(files.ATTR_STEPS), "reported": len(t.intermediate_values),
            "energy_j": trial_energy(run_dir) if energy and state != "waiting" else None,
            "run_dir": run_dir, "task": t.user_attrs.get(files.ATTR_TASK),
            "job_id": arrays.get(os.path.dirname(run_dir)) if run_dir else None,
            "error": t.user_attrs.get(files.ATTR_ERROR),
            "duration_s": (t.datetime_complete - t.datetime_start).total_seconds()
            if t.datetime_complete and t.datetime_start else None,
        })
    counted = [r for r in rows if r["state"] in ("complete", "pruned", "failed")]
    complete = [r for r in rows if r["state"] == "complete"]
    best = None
    if complete:
        pick = max if settings["mode"] == "max" else min
        b = pick(complete, key=lambda r: r["value"])
        best = {"number": b["number"], "value": b["value"], "params": b["params"],
                "job_file": best_job_file(settings, b["params"])}

    def joules(keep) -> Dict[str, Any]:
        chosen = [r for r in rows if keep(r)]
        known = [r["energy_j"] for r in chosen if r["energy_j"] is not None]
        return {"joules": sum(known) if known else None, "trials": len(chosen), "unmeasured": len(chosen) - len(known)}

    return {
        "schema": REPORT_SCHEMA, "study": settings["name"], "folder": folder, "metric": settings["metric"],
        "mode": settings["mode"], "method": settings["method"], "trials_owed": settings["trials"],
        "counts": {s: sum(1 for r in rows if r["state"] == s)
                   for s in ("complete", "pruned", "failed", "running", "waiting", "interrupted")},
        "finished": len(counted), "steps_total": sum(r["steps"] or 0 for r in counted),
        "jobs": [{k: j.get(k) for k in ("backend", "job_id", "run_dir", "tasks")} for j in settings.get("jobs", [])],
        "trials": rows, "best": best,
        "energy": {"total": joules(lambda r: r["state"] != "waiting"), "pruned": joules(lambda r: r["state"] == "pruned")},
    }


def _active(settings: Dict[str, Any], registry: Optional[Registry]) -> bool:
    """Whether a job of the study may still run (its trials marked running are then running)."""
    from hpclaunch.runs.tuning import jobs_of

    reg = registry or Registry()
    for job in jobs_of(settings, reg):
        if job.record.state in FINAL_STATES:
            continue
        try:
            if job.status().state.value not in FINAL_STATES:
                return True
        except Exception:  # a backend that cannot answer: assume the worst, say running
            return True
    return False


def best_job_file(settings: Dict[str, Any], params: Dict[str, Any]) -> str:
    """The study's job with the best trial's values in place of its sweep: a plain job file."""
    from hpclaunch.spec.sweep import fill
    from hpclaunch.spec.yamlio import dump_yaml
    from hpclaunch.tune.space import point as as_text

    text = as_text(params)
    job = json.loads(json.dumps(settings["job"]))  # a deep copy of plain data
    job.pop("sweep", None)
    job["name"] = f"{settings['name']}-best"
    job["command"] = [fill(str(a), text) for a in job.get("command", [])]
    env = {k: fill(str(v), text) for k, v in (job.get("env") or {}).items()}
    train = dict(job.get("train") or {})
    for name, value in params.items():
        if name.startswith("env."):
            env[name[4:]] = text[name]
        elif name.startswith("train."):
            train[name[6:]] = value
    job["env"], job["train"] = env, train
    return dump_yaml(_pruned(job))


def _pruned(data: Any) -> Any:
    """Plain data without None values and empty sections (the defaults a job file leaves out)."""
    if isinstance(data, dict):
        out = {k: _pruned(v) for k, v in data.items() if v is not None}
        return {k: v for k, v in out.items() if v not in ({}, [])}
    if isinstance(data, list):
        return [_pruned(v) for v in data]
    return data


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table_lines(doc: Dict[str, Any]) -> List[str]:
    names = sorted({k for r in doc["trials"] for k in r["params"]})
    head = ["trial", "state", *names, doc["metric"], "steps", "energy J"]
    body = [[str(r["number"]), r["state"], *(_cell(r["params"].get(n)) for n in names), _cell(r["value"]),
             _cell(r["steps"]), _cell(r["energy_j"])] for r in doc["trials"]]
    widths = [max(len(row[i]) for row in [head] + body) for i in range(len(head))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head] + body]


def text(doc: Dict[str, Any], job_file: bool = True) -> str:
    c = doc["counts"]
    lines = [f"study {doc['study']}: {doc['method']}, {doc['mode']} {doc['metric']}; {doc['finished']} of "
             f"{doc['trials_owed']} trials ended ({c['complete']} complete, {c['pruned']} pruned, {c['failed']} failed"
             + (f", {c['running']} running" if c["running"] else "")
             + (f", {c['interrupted']} interrupted" if c["interrupted"] else "") + f"); {doc['steps_total']} steps",
             ""]
    lines += table_lines(doc)
    e = doc["energy"]
    lines += ["", f"energy: {_cell(e['total']['joules'])} J in total, {_cell(e['pruned']['joules'])} J on "
              f"{e['pruned']['trials']} pruned trials" + (f" ({e['total']['unmeasured']} trials unmeasured)"
                                                          if e["total"]["unmeasured"] else "")]
    for r in doc["trials"]:
        if r["error"]:
            lines.append(f"trial {r['number']} failed: {r['error']} (logs: {r['run_dir']})")
    best = doc["best"]
    if best:
        lines += ["", f"best: trial {best['number']}, {doc['metric']} {_cell(best['value'])}: "
                  + ", ".join(f"{k}={_cell(v)}" for k, v in sorted(best["params"].items()))]
        if job_file:
            lines += ["", "best job file:", *("  " + x for x in best["job_file"].splitlines())]
    return "\n".join(lines) + "\n"


def html_page(doc: Dict[str, Any], folder: str) -> str:
    """One self-contained page: the table, the best job file, and Optuna's optimisation-history
    and parallel-coordinate plots (plotly, its script inlined once: no network needed)."""
    import optuna.visualization as vis

    settings = files.read_settings(folder)
    study = files.open_study(folder, settings)
    figures = []
    if doc["counts"]["complete"]:
        figures.append(vis.plot_optimization_history(study, target_name=doc["metric"]))
        if doc["counts"]["complete"] > 1:
            figures.append(vis.plot_parallel_coordinate(study, target_name=doc["metric"]))
    charts = "".join(f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figures))
    best = doc["best"]
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>study "
            f"{html.escape(doc['study'])}</title></head><body><h1>study {html.escape(doc['study'])}</h1>"
            f"<pre>{html.escape(text(doc, job_file=False))}</pre>{charts}"
            + (f"<h2>best job file</h2><pre>{html.escape(best['job_file'])}</pre>" if best else "")
            + "</body></html>\n")
