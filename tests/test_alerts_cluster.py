"""Alerts on the real 2-node test cluster (issue 47): the node monitors raise them from the samples, the
login side from the job's end, and they reach a webhook receiver and an SMTP server the test starts.

The machine has no GPU: each node's monitor reads the fake NVML (tests/monitors/fake_nvml.py, one
scenario per node): on c2, GPU 1 heats to 2 C below its slowdown temperature, then raises XID 79,
then cools. The receivers listen on the host's end of the cluster's bridge (10.200.0.1): each node
is a network namespace of its own, whose loopback is not the host's (docs/alerts.md says so).
"""
import json
import os
import subprocess
import sys
import time

import pytest
from hlcli import hl

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "monitors"))
from alert_receivers import SilentPort, SmtpReceiver, WebhookReceiver, free_port, wait_until  # noqa: E402
from monitor_helpers import FAKE_PATH, read_csv, read_events  # noqa: E402

pytestmark = pytest.mark.cluster

BRIDGE = "10.200.0.1"   # the host, as the nodes reach it (tests/cluster/slurm-up.sh)
SECRET = "hooksecretQ7w9Zt4K"  # the webhook's key: the part of its URL a chat service keeps secret


def _series(temps=None):
    s = {"power_instant_mw": [90000], "power_average_mw": [88000], "power_usage_mw": [88000],
         "energy_mj": [1_000_000 + 50_000 * i for i in range(400)], "mem_temp_c": [40], "temp_c": temps or [55],
         "mem_used_mib": [1000], "mem_total_mib": [81559], "util_gpu": [60], "util_mem": [10], "sm_clock": [1980],
         "mem_clock": [2619], "power_limit_mw": [700000], "clocks_event_reasons": [0], "viol_thermal_ns": [0],
         "ce_sw_power_cap_ns": [0], "ecc_dbe": [0], "slowdown_c": [89], "shutdown_c": [92]}
    return s


def _scenario(tmp_path):
    quiet = {"driver": "550.54.15", "devices": [{"uuid": f"GPU-c1-{i}", "series": _series()} for i in range(2)]}
    # 0.5 s samples: 55 C for 3 s, 87 C (2 C from slowdown) for 7 s, then 55 C; XID 79 at 7.5 s
    hot = [55] * 6 + [87] * 14 + [55]
    c2 = {"driver": "550.54.15", "devices": [
        {"uuid": "GPU-c2-0", "series": _series()},
        {"uuid": "GPU-c2-1", "series": _series(hot), "xids": [{"after_s": 7.5, "xid": 79}]}]}
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps({"hosts": {"c1": quiet, "c2": c2, "default": quiet}}))
    return str(path)


JOB = """name: alerted
profile: testcluster
launcher: srun
command: [bash, -c, "{cmd}"]
resources: {{nodes: 2, tasks_per_node: 1, time: "00:05:00"}}
monitor: {{interval: 0.5}}
requeue: {{max_attempts: 1}}
alerts:
  resolve_after_s: 2
  evaluate_every_s: 1
  timeout_s: {timeout}
  rules: {{near_slowdown: {{threshold: 5, for_s: 1.5}}, idle: {{enabled: false}}}}
  webhooks: {webhooks}
  email: {{to: [ops@example.org], sender: hpclaunch@example.org, smtp_host: "{host}", smtp_port: {smtp}, min_severity: warning}}
"""


def _submit(tmp_path, env, cmd, webhooks, smtp_port, timeout=2):
    (tmp_path / "job.yaml").write_text(JOB.format(cmd=cmd, webhooks=webhooks, host=BRIDGE, smtp=smtp_port,
                                                  timeout=timeout))
    sub = json.loads(hl("submit", "job.yaml", "--backend", "slurm", "--json", cwd=str(tmp_path), env=env).stdout)
    return sub


def _state(job_id, env):
    return json.loads(hl("status", job_id, "--json", cwd="/", env=env).stdout)


def _wait_final(job_id, env, timeout=300):
    return wait_until(lambda: _state(job_id, env)["state"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
                      and _state(job_id, env), timeout=timeout, step=1.0)


def _alerts(run_dir):
    out = []
    for name in sorted(os.listdir(os.path.join(run_dir, "alerts"))):
        if name.endswith(".jsonl") and not name.endswith(".delivery.jsonl"):
            out += read_events(os.path.join(run_dir, "alerts", name))
    return sorted(out, key=lambda r: r["time_unix"])


def _env(**extra):
    env = dict(os.environ, HPCLAUNCH_MONITOR_FAKE_NVML=FAKE_PATH, **extra)
    return env


def _grep_secret(tmp_path, home, run_dir):
    """Every file the job and hpclaunch wrote: the run directory, the registry folder, the test's folder."""
    found = []
    for root in {str(tmp_path), str(home), run_dir}:
        p = subprocess.run(["grep", "-rl", "--binary-files=text", SECRET, root], capture_output=True, text=True)
        found += [f for f in p.stdout.split() if not f.endswith(("scenario.json",))]
    return found


def test_warning_then_critical_then_resolved_each_delivered_once(slurm, hpc_home, tmp_path):
    hook, mail = WebhookReceiver(BRIDGE), SmtpReceiver(BRIDGE)
    try:
        env = _env(HPCLAUNCH_FAKE_NVML_SCENARIO=_scenario(tmp_path), HL_TEST_WEBHOOK=hook.url(SECRET))
        sub = _submit(tmp_path, env, "sleep 18", "[{url_env: HL_TEST_WEBHOOK, min_severity: info}]", mail.port)
        job_id, run_dir = sub["job_id"], sub["run_dir"]
        st = _wait_final(job_id, env)
        assert st["state"] == "COMPLETED", st
        recs = _alerts(run_dir)
        node = [r for r in recs if r["node"]]
        kinds = [(r["event"], r["rule"], r["node"], r["gpu"]) for r in node]
        # the warning, then the critical alert, each resolved; all on c2's GPU 1, nothing on c1
        assert kinds[:2] == [("raised", "near_slowdown", "c2", 1), ("raised", "xid", "c2", 1)], kinds
        assert sorted(kinds) == sorted([("raised", "near_slowdown", "c2", 1), ("raised", "xid", "c2", 1),
                                        ("resolved", "near_slowdown", "c2", 1), ("resolved", "xid", "c2", 1)]), kinds
        warn, crit = node[0], node[1]
        assert (warn["severity"], warn["value"], warn["threshold"], warn["job_id"]) == ("warning", 2, 5.0, job_id)
        assert (crit["severity"], crit["value"], crit["uuid"], crit["ranks"]) == ("critical", 79, "GPU-c2-1", "1")
        assert crit["report"] == f"hpclaunch report {job_id}"
        # the completed job's info alert, with its energy (the report's)
        (done,) = [r for r in recs if r["rule"] == "job_completed"]
        report = json.loads(hl("report", run_dir, "--format", "json", cwd="/").stdout)
        assert done["severity"] == "info" and done["value"] == report["energy_j"]["total"] and done["value"] > 0
        assert f"job {job_id} (alerted) completed" in done["message"]
        # each delivered once: the webhook (min_severity info) all five records, e-mail the four of the node
        texts = wait_until(lambda: len(hook.texts()) >= 5 and hook.texts(), timeout=20)
        assert len(texts) == 5, texts
        assert [t.split("\r\n")[0].split("]")[0] + "]" for t in texts[:2]] == ["[WARNING]", "[CRITICAL]"], texts
        assert f"job {job_id} (alerted) on c2 GPU 1" in texts[0] and "XID 79 on c2 GPU 1" in texts[1]
        assert sum("[RESOLVED]" in t for t in texts) == 2 and sum("[INFO]" in t for t in texts) == 1, texts
        assert all(path == f"/hooks/{SECRET}" for path, _ in hook.got)  # Mattermost's webhook, Slack's payload
        subjects = wait_until(lambda: len(mail.subjects()) >= 4 and mail.subjects(), timeout=20)
        assert len(subjects) == 4 and subjects[0].startswith("[WARNING]") and subjects[1].startswith("[CRITICAL]")
        assert all(to == ["ops@example.org"] for _, to, _, _ in mail.got)
        # the alerts list: run directory and registry, every delivery made
        listed = json.loads(hl("alerts", "list", job_id, "--json", cwd="/").stdout)
        assert len(listed["alerts"]) == len(recs) and all(
            set(r["delivery"].values()) == {"delivered"} for r in listed["alerts"] if r["delivery"])
        # the secret is in no file the job or hpclaunch wrote (run directory, registry, logs)
        assert _grep_secret(tmp_path, hpc_home, run_dir) == []
    finally:
        hook.close()
        mail.close()


def test_a_failed_jobs_critical_alert(slurm, hpc_home, tmp_path):
    hook, mail = WebhookReceiver(BRIDGE), SmtpReceiver(BRIDGE)
    try:
        env = _env(HL_TEST_WEBHOOK=hook.url(SECRET))
        env.pop("HPCLAUNCH_FAKE_NVML_SCENARIO", None)
        sub = _submit(tmp_path, env, "sleep 2; exit 3", "[{url_env: HL_TEST_WEBHOOK}]", mail.port)
        st = _wait_final(sub["job_id"], env)
        assert st["state"] == "FAILED", st
        (rec,) = [r for r in _alerts(sub["run_dir"]) if r["rule"] == "job_failed"]
        assert rec["severity"] == "critical" and rec["value"] == "FAILED" and f"job {sub['job_id']}" in rec["message"]
        texts = wait_until(lambda: [t for t in hook.texts() if "[CRITICAL]" in t], timeout=20)
        assert len(texts) == 1 and "FAILED" in texts[0], hook.texts()
        assert wait_until(lambda: [s for s in mail.subjects() if s.startswith("[CRITICAL]")], timeout=20)
        # recorded in the registry too, once, however often the state is asked for
        _state(sub["job_id"], env)
        listed = json.loads(hl("alerts", "list", sub["job_id"], "--json", cwd="/").stdout)
        assert [r["rule"] for r in listed["alerts"]].count("job_failed") == 1
        assert _grep_secret(tmp_path, hpc_home, sub["run_dir"]) == []
    finally:
        hook.close()
        mail.close()


def test_a_sink_that_is_down_delays_nothing_and_loses_nothing(slurm, hpc_home, tmp_path):
    hook, mail, silent = WebhookReceiver(BRIDGE), SmtpReceiver(BRIDGE), SilentPort(BRIDGE)
    refused_port = free_port(BRIDGE)  # nothing listens there: connection refused
    revived = None
    try:
        env = _env(HPCLAUNCH_FAKE_NVML_SCENARIO=_scenario(tmp_path), HL_TEST_WEBHOOK=hook.url(SECRET),
                   HL_DOWN=f"http://{BRIDGE}:{refused_port}/hooks/{SECRET}",
                   HL_SILENT=f"http://{BRIDGE}:{silent.port}/hooks/{SECRET}")
        hooks = "[{url_env: HL_DOWN}, {url_env: HL_SILENT}, {url_env: HL_TEST_WEBHOOK}]"
        t0 = time.time()
        # each try of the silent sink takes the whole timeout (10 s): a working sink behind it would wait as long
        sub = _submit(tmp_path, env, "sleep 18", hooks, mail.port, timeout=10)
        job_id, run_dir = sub["job_id"], sub["run_dir"]
        st = _wait_final(job_id, env)
        assert st["state"] == "COMPLETED", st
        recs = [r for r in _alerts(run_dir) if r["node"]]
        assert len(recs) == 4
        # the working sinks got each alert soon after it was raised, whatever the dead ones did
        raised = {r["rule"]: r["time_unix"] for r in recs if r["event"] == "raised"}
        got = {}
        for t in hook.texts():
            for rule, word in (("near_slowdown", "[WARNING]"), ("xid", "[CRITICAL]")):
                if t.startswith(word):
                    got.setdefault(rule, True)
        assert set(got) == {"near_slowdown", "xid"}, hook.texts()
        deliveries = [json.loads(line) for line in open(os.path.join(run_dir, "alerts", "node-c2.delivery.jsonl"))]
        ok = {(d["id"], d["event"], d["sink"]): d["time_unix"] for d in deliveries if d["status"] == "delivered"}
        for r in recs:
            if r["event"] == "raised":
                # the first message also imports apprise (a second or two on this loaded machine)
                assert ok[(r["id"], "raised", "webhooks[2]")] - raised[r["rule"]] < 5.0, (r, deliveries)
        failed = {d["sink"] for d in deliveries if d["status"] == "failed"}
        assert failed == {"webhooks[0]", "webhooks[1]"}, deliveries
        # the monitor kept its interval: no sample slot skipped on the node whose sinks were down
        stats = [e["detail"] for e in read_events(os.path.join(run_dir, "monitor", "c2.events.jsonl"))
                 if e["kind"] == "monitor_stats"]
        assert stats and stats[-1]["skipped_slots"] == 0 and stats[-1]["max_work_s"] < 0.25, stats
        _, _, rows = read_csv(os.path.join(run_dir, "monitor", "c2.gpu.csv"))
        times = sorted({float(r["time_unix"]) for r in rows})
        assert max(b - a for a, b in zip(times, times[1:])) < 1.2
        assert time.time() - t0 < 150
        # nothing lost: the alert list names what the dead sinks lack; once one is back, `alerts send` delivers it
        listed = json.loads(hl("alerts", "list", job_id, "--json", cwd="/").stdout)["alerts"]
        lacking = [r for r in listed if r.get("node") and r["delivery"].get("webhooks[0]") != "delivered"]
        assert len(lacking) == 4, listed
        revived = WebhookReceiver(BRIDGE, refused_port)
        p = hl("alerts", "send", job_id, cwd="/", env=env, check=False, timeout=120)
        assert p.returncode == 1 and "still undelivered" in p.stdout  # the silent one still is
        titles = [t.split("\r\n")[0] for t in revived.texts()]
        assert sum(t.startswith("[WARNING]") for t in titles) == 1 and sum(t.startswith("[CRITICAL]") for t in titles) == 1
        assert sum(t.startswith("[RESOLVED]") for t in titles) == 2, titles
        listed = json.loads(hl("alerts", "list", job_id, "--json", cwd="/").stdout)["alerts"]
        assert all(r["delivery"].get("webhooks[0]") == "delivered" for r in listed if r.get("node"))
        assert all(r["delivery"].get("webhooks[1]") != "delivered" for r in listed if r.get("node"))
        assert _grep_secret(tmp_path, hpc_home, run_dir) == []
    finally:
        for x in (hook, mail, silent, revived):
            if x is not None:
                x.close()
