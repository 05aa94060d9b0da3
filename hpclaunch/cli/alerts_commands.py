"""`alerts list [JOB]`, `alerts send JOB`, `alerts prometheus-rules [JOB.yaml]` (docs/alerts.md)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from hpclaunch.cli.output import parse_age, print_json, write_user_file
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.monitors.alert_log import delivered, read_alerts
from hpclaunch.runs.registry import FINAL_STATES, Registry

MAX_JOBS = 200


def cmd_alerts(args: argparse.Namespace) -> int:
    return {"list": _list, "send": _send, "prometheus-rules": _rules}[args.action](args)


def _job_settings(record) -> dict:
    try:
        doc = json.loads(record.resolved or "{}")
    except ValueError:
        doc = {}
    conf = doc.get("alerts")
    return conf if isinstance(conf, dict) else {}


def _rows(record, registry: Registry) -> list[dict]:
    """The job's alerts: its run directory's records, each with its deliveries, and the registry's
    alert events that the run directory lacks (a run directory removed or out of reach)."""
    recs = read_alerts(record.run_dir) if os.path.isdir(record.run_dir) else []
    done = delivered(record.run_dir) if recs else {}
    conf = _job_settings(record)
    from hpclaunch.monitors.alert_sinks import sinks_of
    from hpclaunch.monitors.alert_log import wanted
    sinks = sinks_of(conf)
    for rec in recs:
        rec["delivery"] = {}
        for s in sinks:
            if wanted(rec, s.min_severity):
                d = done.get((str(rec.get("id")), str(rec.get("event")), s.name))
                rec["delivery"][s.name] = "delivered" if d and d.get("status") == "delivered" else (
                    f"failed: {d.get('error')}" if d else "pending")
    ids = {(r.get("id"), r.get("event")) for r in recs}
    for ev in registry.events(record.key):
        if ev["kind"] != "alert":
            continue
        try:
            d = json.loads(ev["detail"] or "{}")
        except ValueError:
            continue
        if (d.get("id"), "raised") not in ids:
            recs.append(dict(d, time_unix=ev["time"], event="raised", job_id=record.job_id, job_name=record.name,
                             source="registry"))
    recs.sort(key=lambda r: r.get("time_unix") or 0)
    return recs


def _where(rec: dict) -> str:
    out = rec.get("node") or ""
    if rec.get("gpu") is not None:
        out += f" GPU {rec['gpu']}"
    if rec.get("rank") is not None:
        out += f" rank {rec['rank']}"
    return out.strip() or "job"


def _show(record, rows: list[dict]) -> None:
    print(f"job {record.job_id} ({record.name}), {record.state}: {len(rows)} alert record(s)")
    for r in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.get("time_unix") or 0))
        sev = "RESOLVED" if r.get("event") == "resolved" else str(r.get("severity", "")).upper()
        sent = ", ".join(f"{k} {v}" for k, v in (r.get("delivery") or {}).items())
        print(f"  {when}  {sev:8s}  {str(r.get('rule')):13s} {_where(r):18s} {r.get('message')}"
              + (f"  [{sent}]" if sent else ""))


def _list(args: argparse.Namespace) -> int:
    from hpclaunch.runs.jobs import find_job
    reg = Registry()
    if args.job:
        job = find_job(args.job, reg)
        rows = _rows(job.record, reg)
        if args.json:
            print_json({"job_id": job.id, "name": job.name, "state": job.record.state, "alerts": rows})
        else:
            _show(job.record, rows)
        return 0
    since = time.time() - parse_age(args.since)
    out = []
    for rec in reg.list(since=since, limit=MAX_JOBS):
        rows = _rows(rec, reg)
        if rows:
            out.append((rec, rows))
    if args.json:
        print_json([{"job_id": r.job_id, "name": r.name, "state": r.state, "alerts": rows} for r, rows in out])
        return 0
    if not out:
        print(f"no alerts in the jobs submitted in the last {args.since}")
    for rec, rows in out:
        _show(rec, rows)
    return 0


def _send(args: argparse.Namespace) -> int:
    from hpclaunch.runs.alerts import send_undelivered
    from hpclaunch.runs.jobs import find_job
    job = find_job(args.job)
    if job.record.state not in FINAL_STATES:
        raise HpclaunchError(f"job {job.id} is {job.record.state}: its monitors send its alerts while it runs \u2014 "
                             f"after it ends: hpclaunch alerts send {job.id} (see hpclaunch alerts list {job.id})")
    conf = _job_settings(job.record)
    tried = send_undelivered(job.run_dir, conf) if conf.get("enabled") else 0
    left = [r for r in _rows(job.record, job.registry) if any(v != "delivered" for v in (r.get("delivery") or {}).values())]
    print(f"job {job.id}: {tried} delivery(ies) tried; {len(left)} alert record(s) still undelivered"
          + (f" \u2014 see hpclaunch alerts list {job.id}" if left else ""))
    return 0 if not left else 1


def _rules(args: argparse.Namespace) -> int:
    from hpclaunch.monitors.prometheus_rules import rules, to_yaml
    from hpclaunch.spec.typedload import to_plain
    if args.job:
        from hpclaunch.spec.loading import resolve_job
        conf = to_plain(resolve_job(args.job, args.override).job.alerts)
        source = f"the alerts: of {args.job}"
    else:
        from hpclaunch.spec.alerts import Alerts
        conf = to_plain(Alerts())
        source = "hpclaunch's default thresholds"
    made = rules(conf)
    text = to_yaml(made, f"Prometheus alerting rules for hpclaunch's monitor metrics, from {source}.\n"
                         "Made by `hpclaunch alerts prometheus-rules`; check: promtool check rules FILE.")
    if args.output:
        write_user_file(args.output, text, "rules file")
        print(f"wrote {len(made)} rule(s) to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
