"""Alerts on the login side (issue 47), without Slurm: the alerts: section's checks, secrets refused at
submission, a local job's state alerts (raised once, recorded in the run directory and the registry,
sent, printed by --wait), `hpclaunch alerts list/send`, and the Prometheus rules, checked and
unit-tested by promtool on a series the monitor recorded."""
import json
import os
import shutil
import subprocess
import sys

import pytest
from hlcli import hl, job_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "monitors"))
from alert_receivers import WebhookReceiver, wait_until  # noqa: E402
from monitor_helpers import FAKE_PATH, read_csv  # noqa: E402


def test_bad_alert_settings_are_one_line_each(tmp_path):
    job = job_file(tmp_path, """
name: a
command: [python, x.py]
alerts:
  resolve_after_s: -1
  rules: {memory: {threshold: 101}, near_slowdown: {for_s: 100000}, nope: {}}
  webhooks: [{url: "https://hooks.slack.com/services/T/B/secretpart"}, {url_env: "1BAD"}]
  email: {to: [not-an-address], password_env: SMTP_PW}
""")
    p = hl("validate", job, cwd=str(tmp_path), check=False)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    want = ["job.yaml: alerts.resolve_after_s: must be at least 0.1 (-1.0) — use a value >= 0.1",
            "job.yaml: alerts.rules.memory.threshold: must be at most 100 (101.0) — use a value <= 100",
            "job.yaml: alerts.rules.near_slowdown.for_s: must be at most 86400",
            "job.yaml: alerts.rules.nope: unknown key",
            "job.yaml: alerts.webhooks[0].url: unknown key — did you mean 'url_env'?",
            "job.yaml: alerts.webhooks[1].url_env: is not an environment variable name ('1BAD')",
            "job.yaml: alerts.webhooks[0]: needs exactly one of url_env and url_file",
            "job.yaml: alerts.email.to: must be 1 to 16 e-mail addresses",
            "job.yaml: alerts.email.user: is needed with a password"]
    for w in want:
        assert any(line.startswith(w) for line in lines), (w, lines)
    assert "secretpart" not in p.stderr   # an unknown key's value is never shown


def test_the_users_settings_file_and_the_profile_layer_under_the_job(tmp_path, monkeypatch):
    cfg = tmp_path / "cfg"
    (cfg / "hpclaunch").mkdir(parents=True)
    (cfg / "hpclaunch" / "alerts.yaml").write_text("webhooks: [{url_env: MY_HOOK}]\nrules: {idle: {for_s: 60}}\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(cfg))
    from hpclaunch.spec.loading import resolve_data
    r = resolve_data({"name": "a", "command": ["x"], "profile": "local", "alerts": {"rules": {"idle": {"threshold": 3}}}},
                     "job.yaml", str(tmp_path))
    doc = r.to_document()["alerts"]
    assert doc["webhooks"] == [{"url_env": "MY_HOOK", "url_file": None, "min_severity": "warning"}]
    assert doc["rules"]["idle"] == {"enabled": True, "threshold": 3.0, "for_s": 60.0}
    assert doc["rules"]["memory"] == {"enabled": True, "threshold": 95.0, "for_s": 30.0}   # hpclaunch's default
    # the profile's defaults are the site's: under the user's settings, under the job
    (tmp_path / "site.yaml").write_text("name: site\nextends: local\nnode: {cpus: 2}\ndefaults:\n  alerts:\n"
                                        "    rules: {memory: {threshold: 90}, idle: {for_s: 30}}\n"
                                        "    email: {to: [ops@example.org], min_severity: critical}\n")
    r = resolve_data({"name": "a", "command": ["x"], "profile": "site.yaml"}, "job.yaml", str(tmp_path))
    doc = r.to_document()["alerts"]
    assert doc["rules"]["memory"]["threshold"] == 90.0 and doc["rules"]["idle"]["for_s"] == 60.0   # the user's
    assert doc["email"]["to"] == ["ops@example.org"] and doc["webhooks"][0]["url_env"] == "MY_HOOK"
    from hpclaunch.spec.typedload import SourceMap
    where = SourceMap("job.yaml", r.origins)
    assert where.of("alerts.rules.memory.threshold").endswith("site.yaml")
    assert where.of("alerts.webhooks").endswith("alerts.yaml")
    (cfg / "hpclaunch" / "alerts.yaml").write_text("bogus: 1\n")
    from hpclaunch.common.errors import InvalidInput
    with pytest.raises(InvalidInput) as e:
        resolve_data({"name": "a", "command": ["x"], "profile": "local"}, "job.yaml", str(tmp_path))
    assert "hpclaunch/alerts.yaml: alerts.bogus: unknown key" in str(e.value)   # the file named


LOCAL = """
name: {name}
launcher: srun
command: [bash, -c, '{cmd}']
resources: {{nodes: 1, tasks_per_node: 1}}
monitor: {{interval: 0.2}}
requeue: {{max_attempts: 1}}
alerts:
  webhooks: [{hooks}]
  timeout_s: 2
"""


def test_submit_refuses_a_secret_file_others_can_read_and_an_unset_variable(hpc_home, tmp_path):
    secret = tmp_path / "hook-url"
    secret.write_text("https://hooks.slack.com/services/T/B/verysecret\n")
    os.chmod(secret, 0o644)
    job = job_file(tmp_path, LOCAL.format(name="s", cmd="true", hooks=f"{{url_file: {secret}}}"))
    p = hl("submit", job, "--backend", "local", cwd=str(tmp_path), check=False)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert f"{secret}: is readable or writable by others (mode 0644) — chmod 600 {secret}" in p.stderr
    assert "verysecret" not in p.stderr and not (tmp_path / "runs").exists()
    assert json.loads(hl("list", "--all", "--json", cwd="/").stdout) == []
    job = job_file(tmp_path, LOCAL.format(name="s", cmd="true", hooks="{url_env: HL_UNSET_HOOK_VAR}"))
    env = {k: v for k, v in os.environ.items() if k != "HL_UNSET_HOOK_VAR"}
    p = hl("submit", job, "--backend", "local", cwd=str(tmp_path), check=False, env=env)
    assert p.returncode == 2 and "$HL_UNSET_HOOK_VAR is not set" in p.stderr and "export HL_UNSET_HOOK_VAR" in p.stderr
    assert not (tmp_path / "runs").exists()


def test_a_failed_local_jobs_critical_alert_once_printed_sent_listed(hpc_home, tmp_path):
    hook = WebhookReceiver()
    try:
        env = dict(os.environ, HL_HOOK=hook.url("t0kenabcdef1234"))
        cmd = "sleep 1; echo torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.00 GiB; exit 3"
        job = job_file(tmp_path, LOCAL.format(name="broken", cmd=cmd, hooks="{url_env: HL_HOOK}"))
        p = hl("submit", job, "--backend", "local", "--wait", cwd=str(tmp_path), check=False, env=env)
        assert p.returncode == 3, p.stderr
        assert "ALERT CRITICAL job_failed: job " in p.stderr and "failed: FAILED, exit code 3" in p.stderr
        texts = wait_until(lambda: len(hook.texts()) >= 2 and hook.texts(), timeout=10)
        assert len(texts) == 2 and texts[0].startswith("[CRITICAL] job ") and "hpclaunch report" in texts[0]
        assert "rank 0 on " in texts[1] and "ran out of memory (CUDA out of memory)" in texts[1]
        st = json.loads(hl("status", "broken", "--json", cwd="/", env=env).stdout)
        hl("status", "broken", "--json", cwd="/", env=env)   # asked again: raised once all the same
        listed = json.loads(hl("alerts", "list", st["job_id"], "--json", cwd="/").stdout)
        rules = [r["rule"] for r in listed["alerts"]]
        assert rules.count("job_failed") == 1 and listed["alerts"][0]["delivery"] == {"webhooks[0]": "delivered"}
        assert len(hook.texts()) == 2
        # the registry holds it too (the audit trail), and the text view says it
        from hpclaunch.runs.registry import Registry
        reg = Registry()
        (rec,) = reg.find(st["job_id"])
        events = [json.loads(e["detail"]) for e in reg.events(rec.key) if e["kind"] == "alert"]
        assert [e["rule"] for e in events] == ["job_failed", "oom"]
        text = hl("alerts", "list", cwd="/").stdout
        assert "CRITICAL" in text and "job_failed" in text and "webhooks[0] delivered" in text
        assert subprocess.run(["grep", "-rl", "t0kenabcdef1234", str(tmp_path), str(hpc_home)],
                              capture_output=True, text=True).stdout == ""
    finally:
        hook.close()


def test_a_completed_jobs_energy_and_a_dead_sink_caught_up_by_alerts_send(hpc_home, tmp_path):
    port = __import__("alert_receivers").free_port()
    env = dict(os.environ, HL_HOOK=f"http://127.0.0.1:{port}/hooks/abcdef123456", HPCLAUNCH_MONITOR_FAKE_NVML=FAKE_PATH)
    env.pop("HPCLAUNCH_FAKE_NVML_SCENARIO", None)
    job = job_file(tmp_path, LOCAL.format(name="fine", cmd="sleep 2", hooks="{url_env: HL_HOOK, min_severity: info}"))
    p = hl("submit", job, "--backend", "local", "--wait", cwd=str(tmp_path), check=False, env=env)
    assert p.returncode == 0, p.stderr
    assert "ALERT INFO job_completed: job " in p.stderr and " completed: " in p.stderr
    st = json.loads(hl("status", "fine", "--json", cwd="/", env=env).stdout)
    listed = json.loads(hl("alerts", "list", st["job_id"], "--json", cwd="/").stdout)["alerts"]
    (done,) = [r for r in listed if r["rule"] == "job_completed"]
    report = json.loads(hl("report", st["run_dir"], "--format", "json", cwd="/").stdout)
    assert done["value"] == report["energy_j"]["total"] > 0 and done["energy_j"]["gpu"] == report["energy_j"]["gpu"]
    assert done["delivery"]["webhooks[0]"].startswith("failed: ")   # nothing listened: recorded, not lost
    hook = WebhookReceiver(port=port)
    try:
        p = hl("alerts", "send", st["job_id"], cwd="/", env=env, check=False)
        assert p.returncode == 0 and "0 alert record(s) still undelivered" in p.stdout, p.stdout + p.stderr
        assert [t.split(" ")[0] for t in hook.texts()] == ["[INFO]"] and "completed" in hook.texts()[0]
        hl("alerts", "send", st["job_id"], cwd="/", env=env)
        assert len(hook.texts()) == 1   # delivered once is delivered
    finally:
        hook.close()


def test_alerts_send_waits_for_the_job_to_end(hpc_home, tmp_path):
    job = job_file(tmp_path, LOCAL.format(name="long", cmd="sleep 30", hooks=""))
    sub = json.loads(hl("submit", job, "--backend", "local", "--json", cwd=str(tmp_path)).stdout)
    try:
        p = hl("alerts", "send", sub["job_id"], cwd="/", check=False)
        assert p.returncode == 2 and "its monitors send its alerts while it runs" in p.stderr
    finally:
        hl("cancel", sub["job_id"], cwd="/", check=False)


# -- Prometheus rules ------------------------------------------------------------------------------

def _labels(node, gpu, uuid, ranks):
    return f'job_id="42",job_name="hot job",user="me",node="{node}",gpu="{gpu}",uuid="{uuid}",ranks="{ranks}"'


def test_prometheus_rules_pass_promtool_and_fire_the_monitors_alert_on_its_recorded_series(tmp_path, require):
    if shutil.which("promtool") is None:
        require("promtool is not installed (Debian's prometheus package: make deps)", "this test")
    # the job's thresholds: near slowdown 5 C for 2 s
    job = job_file(tmp_path, "name: t\ncommand: [x]\nalerts: {rules: {near_slowdown: {threshold: 5, for_s: 2}}}\n")
    hl("alerts", "prometheus-rules", job, "-o", str(tmp_path / "rules.yml"), cwd=str(tmp_path))
    p = subprocess.run(["promtool", "check", "rules", str(tmp_path / "rules.yml")], capture_output=True, text=True)
    assert p.returncode == 0 and "SUCCESS: 6 rules found" in p.stdout, p.stdout + p.stderr
    # the monitor records a GPU heating towards its slowdown temperature, then an XID, and alerts on them
    from alert_receivers import conf, run_monitor
    run, _ = run_monitor(tmp_path, conf(rules__near_slowdown__for_s=0.2, resolve_after_s=0.5), {})
    _, _, rows = read_csv(run / "monitor" / "n7.gpu.csv")
    g1 = [r for r in rows if r["gpu_index"] == "1"]
    alerts = [json.loads(x) for x in open(run / "alerts" / "node-n7.jsonl")]
    near = next(a for a in alerts if a["rule"] == "near_slowdown")
    # the recorded series as Prometheus would have scraped it, one sample a second (the rows' order kept)
    temps = " ".join(r["temp_c"] for r in g1)
    xids = " ".join(r["xid_count"] for r in g1)
    first_near = next(i for i, r in enumerate(g1) if 89 - float(r["temp_c"]) <= 5)
    first_xid = next(i for i, r in enumerate(g1) if int(r["xid_count"]) > 0)
    lab = _labels("n7", "1", g1[0]["gpu_uuid"], g1[0]["ranks"])
    base = {"severity": "warning", "hpclaunch_rule": "near_slowdown", **{
        k: v.strip('"') for k, v in (kv.split("=", 1) for kv in lab.split(","))}}
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1s", "tests": [{
        "interval": "1s",
        "input_series": [
            {"series": f"hpclaunch_gpu_temperature_celsius{{{lab}}}", "values": temps},
            {"series": f"hpclaunch_gpu_slowdown_temperature_celsius{{{lab}}}", "values": f"89x{len(g1)}"},
            {"series": f"hpclaunch_gpu_xid_errors_total{{{lab}}}", "values": xids}],
        "alert_rule_test": [
            {"eval_time": f"{first_near + 1}s", "alertname": "HpclaunchGpuNearSlowdown", "exp_alerts": []},
            {"eval_time": f"{first_near + 2}s", "alertname": "HpclaunchGpuNearSlowdown", "exp_alerts": [{
                "exp_labels": base, "exp_annotations": _annotations(
                    tmp_path, "HpclaunchGpuNearSlowdown", lab, 5, f"{89 - float(g1[first_near + 2]['temp_c']):g}")}]},
            {"eval_time": f"{first_xid}s", "alertname": "HpclaunchGpuXid", "exp_alerts": [{
                "exp_labels": dict(base, severity="critical", hpclaunch_rule="xid"),
                "exp_annotations": _annotations(tmp_path, "HpclaunchGpuXid", lab, None)}]},
        ]}]}
    (tmp_path / "test.yml").write_text(json.dumps(test))   # JSON is YAML
    p = subprocess.run(["promtool", "test", "rules", "test.yml"], cwd=str(tmp_path), capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    # the same alert: the monitor raised it on the same GPU of the same recorded samples
    assert (near["gpu"], near["node"], near["threshold"]) == (1, "n7", 5.0)
    assert float(g1[first_near]["time_unix"]) == near["first_seen"]


def _annotations(tmp_path, alert, lab, threshold, value=None):
    """The rule's annotations as Prometheus renders them for these labels (promtool compares them whole)."""
    text = open(tmp_path / "rules.yml").read()
    block = text.split(f'alert: "{alert}"')[1]
    summary = json.loads(block.split("summary: ")[1].split("\n")[0])
    labels = dict(kv.split("=", 1) for kv in lab.split(","))
    labels = {k: v.strip('"') for k, v in labels.items()}
    desc = (f"job {labels['job_id']} ({labels['job_name']}) of {labels['user']} on {labels['node']} GPU {labels['gpu']} "
            f"(ranks {labels['ranks']})" + (f": value {value}, threshold {threshold:g}" if threshold is not None else "")
            + f"; hpclaunch report {labels['job_id']}")
    return {"summary": summary, "description": desc}


def test_the_dashboards_job_page_shows_each_episodes_newest_record(tmp_path):
    from hpclaunch.dashboard.live import JobLive
    from hpclaunch.monitors.alert_log import JsonLog
    log = JsonLog(str(tmp_path / "alerts" / "node-c1.jsonl"))
    base = {"rule": "xid", "severity": "critical", "node": "c1", "gpu": 0, "message": "XID 79 on c1 GPU 0"}
    log.append(dict(base, id="c1-1", event="raised", time_unix=1.0, first_seen=1.0, last_seen=1.0))
    view = JobLive(str(tmp_path))
    msg, _ = view.payload(None)
    assert [(a["event"], a["rule"], a["gpu"]) for a in msg["alerts"]] == [("raised", "xid", 0)]
    log.append(dict(base, id="c1-1", event="resolved", time_unix=9.0, first_seen=1.0, last_seen=3.0))
    JsonLog(str(tmp_path / "alerts" / "job.jsonl")).append(
        {"id": "job-1-job_failed", "event": "raised", "rule": "job_failed", "severity": "critical", "time_unix": 10.0,
         "message": "job 1 (x) failed"})
    view._updated = float("-inf")
    msg, _ = view.payload(None)
    assert [(a["event"], a["rule"]) for a in msg["alerts"]] == [("resolved", "xid"), ("raised", "job_failed")]
