"""The login side of alerts: the job's states (failed, completed with its energy, the report's
suggestions), the settings the node monitors read, and the alerts a sink missed.

* At submission, :func:`prepare` checks that every secret a sink names can be had (the environment
  variable is set, the file is the user's own and unreadable to others: else one line, and nothing
  is queued) and writes the job's resolved `alerts:` section to ``.hpclaunch/alerts.json``, which each
  node's monitor reads (monitors/alerts.py). No secret is written: only the variables' and files' names.
* When hpclaunch first records a job's final state (runs/jobs.py ``Job.settle``), :func:`on_final`
  raises its alerts: a critical one for FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, ..., an info one
  with the energy of a COMPLETED job and one with the report's suggestions. Each is raised once per job:
  the registry keeps one ``alert`` event per alert (the dedup key and the audit trail), the run
  directory's ``alerts/job.jsonl`` the record. They are sent as the node's are (monitors/alert_sinks.py),
  and the node alerts no sink took are sent again (the monitors have stopped by then).
"""
from __future__ import annotations

import json
import os
import time
from typing import List, Optional

from hpclaunch.common.atomic import write_atomic
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.monitors.alert_log import (ALERTS_DIR, JOB_FILE, JsonLog, delivery_file, read_alerts,
                                          report_command, undelivered)
from hpclaunch.monitors.alert_sinks import Sender, SecretError, sinks_of
from hpclaunch.monitors.alert_ranks import OOM_NEEDLES
from hpclaunch.monitors.alerts import CONFIG_FILE

FAILED = {"FAILED": "failed", "TIMEOUT": "reached its time limit", "NODE_FAIL": "lost a node",
          "OUT_OF_MEMORY": "ran out of memory", "BOOT_FAIL": "had a node fail to boot",
          "DEADLINE": "passed its deadline", "GAVE_UP": "used every attempt and never succeeded"}


def settings(document: Optional[dict]) -> Optional[dict]:
    """A resolved job document's `alerts` mapping when alerts are on, else None."""
    conf = (document or {}).get("alerts")
    return conf if isinstance(conf, dict) and conf.get("enabled") else None


def check_secrets(conf: Optional[dict], environ=None) -> None:
    """Every secret a sink names can be had here, or the user's one line (the job's monitors read the
    same variable, which the job inherits, or the same file, on the shared filesystem)."""
    for sink in sinks_of(conf, environ):
        try:
            sink.url()
        except SecretError as e:
            raise HpclaunchError(f"{e}") from None


def write_config(run_dir: str, conf: Optional[dict]) -> None:
    """At submission, before the job is released: .hpclaunch/alerts.json, what the monitors evaluate."""
    if conf is not None:
        write_atomic(os.path.join(run_dir, CONFIG_FILE), json.dumps(conf, sort_keys=True) + "\n", mode=0o600)


def _records(job, st, conf: dict) -> List[dict]:
    rules = {k: v for k, v in (conf.get("rules") or {}).items() if isinstance(v, dict) and v.get("enabled", True)}
    rec = job.record
    base = {"job_id": rec.job_id, "job_name": rec.name, "node": None, "report": report_command(rec.job_id),
            "first_seen": st.end_time or None, "last_seen": st.end_time or None, "count": 1, "threshold": None,
            "unit": ""}
    state = str(st.state)
    out = []
    if state in FAILED and "job_failed" in rules:
        out.append(dict(base, rule="job_failed", severity="critical", value=state,
                        message=f"job {rec.job_id} ({rec.name}) {FAILED[state]}: {state}, exit code {st.exit_code}"))
    if state == "OUT_OF_MEMORY" and "oom" in rules:
        out.append(dict(base, rule="oom", severity="critical", value=state,
                        message=f"job {rec.job_id} ({rec.name}): a rank ran out of memory (Slurm: OUT_OF_MEMORY)"))
    elif state in FAILED and "oom" in rules:
        found = _oom_in_first_failure(job)
        if found is not None and not any(r.get("rule") == "oom" and r.get("rank") == found[0]
                                         for r in read_alerts(job.run_dir)):  # its node's monitor said it already
            rank, host, needle = found
            out.append(dict(base, rule="oom", severity="critical", value=needle, rank=rank, ranks=str(rank), node=host,
                            message=f"job {rec.job_id} ({rec.name}): rank {rank} on {host or 'its node'} ran out of "
                                    f"memory ({needle})"))
    if state == "COMPLETED" and ("job_completed" in rules or "suggestions" in rules):
        data = _report(job.run_dir)
        if "job_completed" in rules:
            energy = (data or {}).get("energy_j", {})
            kwh = (data or {}).get("energy_kwh", {})
            said = (f"{energy['total'] / 1000:.3g} kJ ({kwh.get('total')} kWh; GPU {_kj(energy.get('gpu'))}, "
                    f"CPU {_kj(energy.get('cpu'))})" if energy.get("total") is not None else "energy unknown")
            out.append(dict(base, rule="job_completed", severity="info", value=energy.get("total"), unit=" J",
                            energy_j=energy or None, duration_s=(data or {}).get("duration_s"),
                            message=f"job {rec.job_id} ({rec.name}) completed: {said}"))
        if "suggestions" in rules and data:
            tips = suggestions(data, float(rules["suggestions"].get("threshold", 30.0)))
            if tips:
                out.append(dict(base, rule="suggestions", severity="info", value=len(tips), suggestions=tips,
                                threshold=rules["suggestions"].get("threshold"),
                                message=f"job {rec.job_id} ({rec.name}): " + "; ".join(tips)))
    for r in out:
        r.update(time_unix=round(_now(), 3), id=f"job-{rec.job_id}-{r['rule']}", event="raised")
    return out


def _oom_in_first_failure(job):
    """(rank, host, message) when the first rank to fail says it ran out of memory in its last 64 KB."""
    try:
        first = job.first_failure()
        if first is None:
            return None
        with open(first.path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            tail = f.read()
    except OSError:
        return None
    needle = next((n for n in OOM_NEEDLES if n in tail), None)
    return (first.rank, first.host, needle.decode()) if needle is not None else None


def _kj(j) -> str:
    return f"{j / 1000:.3g} kJ" if isinstance(j, (int, float)) else "n/a"


def _now() -> float:
    return time.time()


def _report(run_dir: str) -> Optional[dict]:
    """The report's document, or None when it cannot be made (no logs)."""
    try:
        from hpclaunch.reports import build_report
        return build_report(run_dir, bins=8).data
    except Exception:  # noqa: BLE001 - the alert says its energy is unknown
        return None


def suggestions(data: dict, pct: float) -> List[str]:
    """What the report's figures suggest, each above ``pct`` percent: idle GPU energy, throttled GPU
    time; and stragglers, as the report lists them."""
    out = []
    idle = (data.get("idle") or {}).get("share_of_gpu_pct")
    if isinstance(idle, (int, float)) and idle > pct:
        out.append(f"{idle:.0f} % of GPU energy was drawn idle (utilisation <= "
                   f"{data['idle'].get('util_threshold_pct')} %): fewer GPUs, or keep them fed")
    sampled = sum((g.get("coverage") or {}).get("sampled_s") or 0 for g in data.get("gpus") or [])
    for reason, secs in sorted((data.get("throttle_total_s") or {}).items()):
        if sampled and isinstance(secs, (int, float)) and 100.0 * secs / sampled > pct and reason in ("power", "thermal"):
            out.append(f"GPUs were held down by {reason} {100.0 * secs / sampled:.0f} % of their time: "
                       + ("a lower power limit costs little here" if reason == "power" else "check the cooling"))
    st = data.get("stragglers") or {}
    if st.get("ranks"):
        worst = st["ranks"][0]
        out.append(f"rank {worst['rank']} on {worst.get('host')} straggled ({worst['ratio']}x the median step time)")
    return out


def on_final(job, st, environ=None) -> List[dict]:
    """The alerts of a job hpclaunch has just seen end (once per job and alert: the registry says which
    were raised), written, recorded and sent; then the node alerts no sink took are sent again."""
    conf = settings(_document(job.record))
    if conf is None:
        return []
    raised = []
    log = JsonLog(os.path.join(job.run_dir, ALERTS_DIR, JOB_FILE))
    try:
        for rec in _records(job, st, conf):
            if job.registry.event_once(job.record.key, "alert",
                                       {k: rec[k] for k in ("id", "rule", "severity", "message")}, rec["id"]):
                log.append(rec)
                raised.append(rec)
    finally:
        log.close()
    send_undelivered(job.run_dir, conf, environ)
    return raised


def send_undelivered(run_dir: str, conf: dict, environ=None, wait_s: Optional[float] = None) -> int:
    """Send every alert of the run that a sink wants and has not had; at most ``wait_s`` (the alert
    timeout, plus a second) is waited for. Returns how many (alert, sink) pairs were tried."""
    sinks = sinks_of(conf, environ)
    if not sinks:
        return 0
    lock = _lock(run_dir)  # two commands sending a run's alerts at once would send them twice
    if lock is None:
        return 0
    try:
        return _send(run_dir, conf, sinks, wait_s)
    finally:
        os.close(lock)


def _lock(run_dir: str) -> Optional[int]:
    """An exclusive lock on alerts/.send.lock, or None when another command holds it (it sends them)."""
    import fcntl
    try:
        os.makedirs(os.path.join(run_dir, ALERTS_DIR), mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(run_dir, ALERTS_DIR, ".send.lock"),
                     os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _send(run_dir: str, conf: dict, sinks, wait_s: Optional[float]) -> int:
    todo = list(undelivered(run_dir, [(s.name, s.min_severity) for s in sinks]))
    if not todo:
        return 0
    log = JsonLog(os.path.join(run_dir, ALERTS_DIR, delivery_file(JOB_FILE)))
    rate = conf.get("rate_limit") or {}
    timeout = float(conf.get("timeout_s", 5.0))
    senders = []
    for sink in sinks:  # one thread each: a sink that is down delays no other
        mine = [r for r, n in todo if n == sink.name]
        if mine:
            sender = Sender([sink], log, int(rate.get("max", 20)), float(rate.get("per_s", 3600.0)), timeout)
            for r in mine:
                sender.submit(r)
            senders.append(sender.start())
    for sender in senders:
        sender.stop()
    end = time.monotonic() + (timeout + 1.0 if wait_s is None else wait_s)
    for sender in senders:
        sender.join(end - time.monotonic())
    log.close()
    return len(todo)


def _document(record) -> Optional[dict]:
    try:
        return json.loads(record.resolved or "{}")
    except ValueError:
        return None
