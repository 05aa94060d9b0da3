"""The node monitor's alerts: rules on rows and events, episodes, the sender's threads, rate limit,
retries and secrets; then the daemon end to end with a webhook receiver and a real SMTP server."""

import json
import os
import subprocess
import time

import pytest

from hpclaunch.monitors import schema
from hpclaunch.monitors.alert_log import read_jsonl
from hpclaunch.monitors.alert_ranks import RankWatch
from hpclaunch.monitors.alert_sinks import (SecretError, Sender, Senders, Sink, _scrub, read_secret_file, secret,
                                            sinks_of)
from hpclaunch.monitors.alerts import AlertEngine, load_config
from alert_receivers import conf, run_monitor

C = {c: i for i, c in enumerate(schema.GPU_COLUMNS)}
T0 = 1_800_000_000.0


class Box:
    """Stands in for the sender: keeps what it is given."""

    def __init__(self):
        self.got = []
        self.log = type("L", (), {"close": lambda self: None})()

    def submit(self, rec):
        self.got.append(dict(rec))

    def close(self, wait_s=0):
        pass


def row(i=0, t=50, mem=1000.0, util=60, reasons=0, cap_ns=0, hwt=None, ranks="0"):
    r = [None] * len(schema.GPU_COLUMNS)
    r[C["gpu_index"]], r[C["gpu_uuid"]], r[C["ranks"]] = i, f"GPU-{i}", ranks
    r[C["temp_c"]], r[C["slowdown_temp_c"]] = t, 89
    r[C["mem_used_mib"]], r[C["mem_total_mib"]] = mem, 81559.0
    r[C["util_pct"]], r[C["throttle_reasons"]] = util, reasons
    r[C["throttle_sw_power_cap_ns"]], r[C["throttle_hw_thermal_slowdown_ns"]] = cap_ns, hwt
    return tuple(r)


@pytest.fixture
def engine(tmp_path):
    def make(c=None):
        box = Box()
        e = AlertEngine(c or conf(), "n1", str(tmp_path), {"SLURM_JOB_ID": "77", "HPCLAUNCH_JOB_NAME": "j"}, box)
        return e, box
    return make


def _feed(e, rows_at):
    for dt, rows in rows_at:
        e.rows(rows, T0 + dt)   # the rows, then what is due once a sample (tick)


def test_near_slowdown_raises_once_after_for_s_and_resolves_after_the_quiet_time(engine, tmp_path):
    e, box = engine(conf(rules__near_slowdown__for_s=3.0))
    hot = [row(0), row(1, t=86)]
    _feed(e, [(k, hot) for k in range(6)])                  # within 3 C for 5 s: one alert, at 3 s
    assert [(r["event"], r["rule"], r["gpu"], r["time_unix"]) for r in box.got] == [
        ("raised", "near_slowdown", 1, T0 + 3)]
    rec = box.got[0]
    assert (rec["severity"], rec["value"], rec["threshold"], rec["job_id"], rec["node"]) == ("warning", 3, 5.0, "77", "n1")
    assert (rec["first_seen"], rec["report"]) == (T0, "hpclaunch report 77")
    cool = [row(0), row(1, t=60)]
    _feed(e, [(k, cool) for k in range(6, 10)])              # clear for 3 s: not yet resolved
    assert len(box.got) == 1
    _feed(e, [(k, hot) for k in range(10, 12)])              # back before the quiet time: the same episode
    _feed(e, [(k, cool) for k in range(12, 18)])
    assert [r["event"] for r in box.got] == ["raised", "resolved"]
    assert box.got[1]["last_seen"] == T0 + 11 and box.got[1]["count"] == 5
    # the run directory's record is the same
    recs, _ = read_jsonl(str(tmp_path / "alerts" / "node-n1.jsonl"))
    assert [r["event"] for r in recs] == ["raised", "resolved"] and recs[0]["id"] == recs[1]["id"]


def test_a_blip_shorter_than_for_s_raises_nothing(engine):
    e, box = engine(conf(rules__near_slowdown__for_s=3.0))
    _feed(e, [(0, [row(t=87)]), (1, [row(t=87)]), (2, [row(t=60)]), (3, [row(t=87)]), (4, [row(t=60)])])
    assert box.got == []


def test_memory_idle_and_hardware_slowdown(engine):
    e, box = engine(conf(rules__memory__for_s=0.0, rules__idle__for_s=2.0, rules__hw_slowdown__for_s=0.0))
    _feed(e, [(0, [row(0, mem=80000.0), row(1, util=0)]), (1, [row(0, mem=80000.0), row(1, util=0)]),
              (2, [row(0, reasons=0x40), row(1, util=0)])])
    got = [(r["rule"], r["gpu"], r["value"]) for r in box.got]
    assert got == [("memory", 0, 98.1), ("hw_slowdown", 0, "hw_thermal_slowdown"), ("idle", 1, 0)]
    assert {r["severity"] for r in box.got if r["rule"] == "hw_slowdown"} == {"critical"}
    # the counter catches a slowdown that fell between samples (no bit set in either)
    e, box = engine(conf(rules__hw_slowdown__for_s=0.0))
    _feed(e, [(0, [row(hwt=1000)]), (5, [row(hwt=1000)]), (10, [row(hwt=90_000_000)])])
    assert [(r["rule"], r["time_unix"]) for r in box.got] == [("hw_slowdown", T0 + 10)]


def test_power_cap_share_of_the_window(engine):
    e, box = engine(conf(rules__power_cap__threshold=50.0, rules__power_cap__for_s=10.0))
    ns = 0
    steps = []
    for k in range(30):
        if k >= 12:
            ns += int(0.7e9)    # capped 70 % of each second from 12 s on
        steps.append((k, [row(cap_ns=ns)]))
    _feed(e, steps)
    (rec,) = [r for r in box.got if r["rule"] == "power_cap"]
    # 10 s window: above 50 % once 8 capped seconds are in it (5.6 s of 10)
    assert rec["time_unix"] == T0 + 19 and rec["value"] == 56.0 and rec["threshold"] == 50.0


def test_xids_one_alert_per_gpu_and_code_per_episode(engine):
    e, box = engine()
    e.rows([row(0), row(1)], T0)
    for t, code in ((1, 79), (1, 79), (2, 79), (2, 48)):
        e.on_event("xid", {"gpu_index": 1, "xid": code, "uuid": "GPU-1", "ranks": "1"}, T0 + t)
        e.rows([row(0), row(1)], T0 + t)
    assert [(r["rule"], r["value"], r["gpu"], r["severity"]) for r in box.got] == [
        ("xid", 79, 1, "critical"), ("xid", 48, 1, "critical")]
    for t in range(3, 12):
        e.rows([row(0), row(1)], T0 + t)
    resolved = [r for r in box.got if r["event"] == "resolved"]
    assert sorted(r["value"] for r in resolved) == [48, 79]
    assert next(r for r in resolved if r["value"] == 79)["count"] == 3


def test_close_resolves_open_episodes(engine):
    e, box = engine(conf(rules__memory__for_s=0.0))
    e.rows([row(mem=81000.0)], T0)
    e.close(T0 + 1, 0)
    assert [(r["event"], r.get("resolved")) for r in box.got] == [("raised", None), ("resolved", "ended with the monitor")]


def test_rank_watch_hang_oom_straggler(tmp_path, engine):
    e, box = engine(conf(rules__hang__for_s=100.0, rules__straggler__for_s=0.0))
    run = tmp_path
    (run / "logs" / "attempt0").mkdir(parents=True)
    (run / "metrics").mkdir()
    (run / "logs" / "attempt0" / "ranks.tsv").write_text("0\tn1\t10\n1\tn1\t11\n2\tn2\t12\n")
    log = run / "logs" / "attempt0" / "rank1.log"
    log.write_text("step 1\n")
    for r, t in ((0, 0.1), (1, 0.1), (2, 0.25)):
        (run / "metrics" / f"rank{r}.jsonl").write_text(
            "".join(json.dumps({"kind": "step", "step": s, "step_time_s": t}) + "\n" for s in range(5)))
    w = RankWatch(str(run), "n1", "0", True, e.rule)
    w.check(e, T0)
    with open(run / "metrics" / "rank0.jsonl", "a") as f:   # rank 0 grows once, then stops
        f.write(json.dumps({"kind": "step", "step": 6, "step_time_s": 0.1}) + "\n")
    w.check(e, T0 + 30)
    with open(log, "a") as f:
        f.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    w.check(e, T0 + 60)
    w.next_straggler = 0
    w.check(e, T0 + 140)
    got = [(r["rule"], r.get("rank"), r["severity"]) for r in box.got]
    assert ("straggler", 2, "warning") in got            # 2.5x the median, on the first node
    assert ("oom", 1, "critical") in got
    assert ("hang", 0, "critical") in got and ("hang", 1, "critical") not in got  # rank 1 never grew
    (rank1,) = [r for r in box.got if r["rule"] == "oom"]
    assert "CUDA out of memory" in rank1["message"]
    (run / "logs" / "attempt0" / "rank0.exit").write_text("0 1\n")   # a rank that ended is not hung
    e2, box2 = engine(conf(rules__hang__for_s=100.0))
    w2 = RankWatch(str(run), "n1", "0", False, e2.rule)
    w2.size[0] = (os.path.getsize(run / "metrics" / "rank0.jsonl"), T0 - 500, True)
    w2.check(e2, T0)
    assert [r for r in box2.got if r["rule"] == "hang"] == []


# -- the sender --------------------------------------------------------------------------------------

class Log:
    def __init__(self):
        self.recs = []

    def append(self, rec):
        self.recs.append(rec)

    def close(self):
        pass


def _rec(i, severity="warning"):
    return {"id": f"a{i}", "event": "raised", "severity": severity, "rule": "memory", "job_id": "1",
            "message": f"alert {i}"}


def test_rate_limit_holds_back_then_sends_the_rest_in_one_message():
    sent = []
    sink = Sink("webhooks[0]", "webhook", {"url_env": "X"})
    s = Sender([sink], Log(), rate_max=2, rate_per_s=2.0, send=lambda k, title, body, sev, t: sent.append(title))
    s.start()
    for i in range(5):
        s.submit(_rec(i))
    time.sleep(0.3)
    assert len(sent) == 1 or len(sent) == 2  # the bucket's two tokens: one alone, then what is left together
    s.close(5.0)
    assert sent[0].startswith("[WARNING] alert 0")
    assert any(t.startswith("[hpclaunch] ") and "alerts for job 1" in t for t in sent[1:]), sent
    delivered = [r["id"] for r in s.log.recs if r["status"] == "delivered"]
    assert sorted(delivered) == [f"a{i}" for i in range(5)]   # every alert delivered once
    assert len(sent) <= 3


def test_a_failing_sink_is_retried_and_delays_no_other():
    calls = {"dead": 0, "ok": []}

    def send(sink, title, body, sev, timeout):
        if sink.name == "webhooks[0]":
            calls["dead"] += 1
            time.sleep(timeout)       # a sink that never answers: each try takes the whole timeout
            return "timed out"
        calls["ok"].append((time.monotonic(), title))
        return None

    sinks = [Sink("webhooks[0]", "webhook", {}), Sink("webhooks[1]", "webhook", {})]
    log = Log()
    s = Senders(sinks, log, timeout_s=1.0, send=send).start()
    t0 = time.monotonic()
    s.submit(_rec(1, "critical"))
    assert wait(lambda: calls["ok"], 2.0)
    assert calls["ok"][0][0] - t0 < 0.5      # not behind the dead one's timeout
    t1 = time.monotonic()
    s.close(3.0)
    assert time.monotonic() - t1 < 3.5       # bounded
    st = [(r["sink"], r["status"]) for r in log.recs]
    assert ("webhooks[1]", "delivered") in st and ("webhooks[0]", "failed") in st
    assert sum(1 for r in log.recs if r["sink"] == "webhooks[0]") == calls["dead"] >= 1


def test_min_severity_filters():
    sent = []
    s = Sender([Sink("email", "email", {"min_severity": "critical"})], Log(),
               send=lambda k, title, body, sev, t: sent.append(title)).start()
    s.submit(_rec(1, "warning"))
    s.submit(_rec(2, "critical"))
    s.close(2.0)
    assert len(sent) == 1 and sent[0].startswith("[CRITICAL]")


def wait(check, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.02)
    return bool(check())


# -- secrets -----------------------------------------------------------------------------------------

def test_secret_files_must_be_the_users_alone(tmp_path):
    f = tmp_path / "hook"
    f.write_text("\nhttps://hooks.slack.com/services/T0/B0/sekrit\n")
    os.chmod(f, 0o644)
    with pytest.raises(SecretError) as e:
        read_secret_file(str(f))
    assert "readable or writable by others (mode 0644)" in str(e.value) and "chmod 600" in str(e.value)
    assert "sekrit" not in str(e.value)
    os.chmod(f, 0o600)
    assert read_secret_file(str(f)) == "https://hooks.slack.com/services/T0/B0/sekrit"
    link = tmp_path / "link"
    link.symlink_to(f)
    with pytest.raises(SecretError, match="a link is not followed"):
        read_secret_file(str(link))
    with pytest.raises(SecretError, match=r"\$NOPE_NOT_SET is not set"):
        secret("NOPE_NOT_SET", None, "alerts.webhooks[0]", environ={})


def test_sink_urls_and_scrubbing():
    hook = Sink("webhooks[0]", "webhook", {"url_env": "H"}, {"H": "https://chat.example.org/x/hooks/abcdef123456"})
    url, parts = hook.url()
    assert url == "mmosts://chat.example.org/x/abcdef123456"
    assert _scrub("could not reach https://chat.example.org/x/hooks/abcdef123456 (abcdef123456)", parts) == \
        "could not reach *** (***)"
    mail = Sink("email", "email", {"to": ["a@example.org"], "sender": "b@example.org", "smtp_host": "mx",
                                   "smtp_port": 587, "security": "starttls", "user": "me", "password_env": "P"},
                {"P": "p@ss/word"})
    url, parts = mail.url()
    assert url.startswith("mailtos://me:p%40ss%2Fword@mx:587?") and "mode=starttls" in url
    assert _scrub("login failed for p@ss/word", parts) == "login failed for ***"
    assert [s.name for s in sinks_of({"webhooks": [{"url_env": "A"}, {"url_file": "/x"}], "email": {"to": []}})] == \
        ["webhooks[0]", "webhooks[1]", "email"]


# -- the daemon end to end ---------------------------------------------------------------------------

def test_daemon_sends_warning_then_critical_then_resolved_once_each(tmp_path):
    from alert_receivers import SmtpReceiver, WebhookReceiver
    hook, mail = WebhookReceiver(), SmtpReceiver()
    try:
        c = conf(resolve_after_s=0.5, rules__near_slowdown__for_s=0.2, timeout_s=2.0)
        c["webhooks"] = [{"url_env": "T_HOOK", "min_severity": "warning"}]
        c["email"] = {"to": ["me@example.org"], "sender": "hpclaunch@example.org", "smtp_host": "127.0.0.1",
                      "smtp_port": mail.port, "security": "none", "min_severity": "critical"}
        run, p = run_monitor(tmp_path, c, {"T_HOOK": hook.url("tok3n1234567")})
        recs, _ = read_jsonl(str(run / "alerts" / "node-n7.jsonl"))
        assert [(r["event"], r["rule"], r["gpu"]) for r in recs][:2] == [("raised", "near_slowdown", 1), ("raised", "xid", 1)]
        assert sorted((r["event"], r["rule"]) for r in recs) == [("raised", "near_slowdown"), ("raised", "xid"),
                                                                 ("resolved", "near_slowdown"), ("resolved", "xid")]
        texts = [t.split("\r\n")[0] for t in hook.texts()]
        assert len(texts) == 4 and texts[0].startswith("[WARNING] GPU 1 on n7") and texts[1].startswith("[CRITICAL] XID 79")
        assert [s.split(" ")[0] for s in mail.subjects()] == ["[CRITICAL]", "[RESOLVED]"]   # critical only
        assert all(d["status"] == "delivered" for d in read_jsonl(str(run / "alerts" / "node-n7.delivery.jsonl"))[0])
        assert "tok3n1234567" not in p.stderr and not subprocess.run(
            ["grep", "-rl", "tok3n1234567", str(run)], capture_output=True).stdout
    finally:
        hook.close()
        mail.close()


def test_daemon_without_alert_settings_writes_no_alerts(tmp_path):
    run, _ = run_monitor(tmp_path, None, {}, duration="1")
    assert not (run / "alerts").exists()
    assert load_config(str(run)) is None
    # a sweep task's monitor reads its job's settings
    task = tmp_path / "sweep-1" / "task3"
    (tmp_path / "sweep-1" / ".hpclaunch").mkdir(parents=True)
    (tmp_path / "sweep-1" / ".hpclaunch" / "alerts.json").write_text(json.dumps({"enabled": True}))
    task.mkdir()
    assert load_config(str(task)) == {"enabled": True}


def test_a_sink_that_never_answers_costs_the_samples_nothing(tmp_path):
    from alert_receivers import SilentPort
    silent = SilentPort()
    try:
        c = conf(resolve_after_s=0.5, rules__near_slowdown__for_s=0.2, timeout_s=5.0)
        c["webhooks"] = [{"url_env": "T_HOOK"}]
        t0 = time.monotonic()
        run, _ = run_monitor(tmp_path, c, {"T_HOOK": f"http://127.0.0.1:{silent.port}/hooks/abcdefabcdef"})
        took = time.monotonic() - t0
        stats = [json.loads(x)["detail"] for x in open(run / "monitor" / "n7.events.jsonl")
                 if '"monitor_stats"' in x][-1]
        assert stats["skipped_slots"] == 0 and stats["max_work_s"] < 0.1, stats
        assert took < 3 + 3 + 8   # the run, the sender's last try (3 s at most), start-up
        recs, _ = read_jsonl(str(run / "alerts" / "node-n7.jsonl"))
        assert len(recs) == 4      # recorded, whatever the sink did
    finally:
        silent.close()
