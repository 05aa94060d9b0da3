"""`hpclaunch dashboard` as a user meets it: a real local job (its monitor reading the fake NVML, its
ranks appending step records), the server as a subprocess, and Debian's chromium driven by selenium
through Debian's chromedriver. Screenshots are kept in artifacts/dashboard/ at the repository's root
(git-ignored, beside the report test's artifacts/report-test.png), or $HPCLAUNCH_TEST_ARTIFACTS/dashboard
when that is set; the path is printed."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request

import pytest
from dashboard_parts import CHROMEDRIVER, CHROMIUM, chrome, dashboards, get, require_browser_parts, wait_for
from hlcli import hl, modules_loaded

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "monitors"))
import fake_nvml  # noqa: E402

# A rank of the job: a step record every 0.2 s in the metrics contract (docs/run-directory.md), for
# at most 120 s; the test cancels the job when it is done with it.
STEPS = textwrap.dedent("""\
    import json, os, time
    rank = int(os.environ["SLURM_PROCID"])
    folder = os.path.join(os.environ["HPCLAUNCH_RUN_DIR"], "metrics")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"rank{rank}.jsonl"), "a") as f:
        f.write(json.dumps({"kind": "header", "schema": "hpclaunch.metrics/1", "rank": rank}) + "\\n")
        end, step = time.time() + 120, 0
        while time.time() < end:
            step += 1
            f.write(json.dumps({"kind": "step", "time_unix": time.time(), "rank": rank, "epoch": step // 100,
                                "step": step, "steps": 1, "loss": 2.3 / step ** 0.3, "samples_per_s": 640.0 + rank,
                                "step_time_s": 0.2, "samples": 128, "attempt": 0}) + "\\n")
            f.flush()
            time.sleep(0.2)
""")


def readme_lines() -> list:
    """The README's `hpclaunch dashboard` lines as argument lists: tests/test_readme.py leaves them to
    this file (a server runs until Ctrl-C), which runs each exactly as written."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return [shlex.split(line.split("#")[0])[2:] for line in f if line.startswith("hpclaunch dashboard")]


README_LINES = readme_lines()


def scenario() -> dict:
    """The fake's two H100s, going from idle to load, as JSON (lists rather than functions)."""
    devices = []
    for d in fake_nvml.default_scenario()["devices"]:
        series = {k: ([v(i) for i in range(2000)] if callable(v) else v) for k, v in d["series"].items()}
        devices.append({"uuid": d["uuid"], "series": series, "unsupported": []})
    return {"driver": "550.54.15", "devices": devices}


@pytest.fixture
def browser_parts(require):
    require_browser_parts(require)


@pytest.fixture
def dashboard():
    with dashboards() as start:
        yield start


@pytest.fixture
def artefacts():
    folder = os.path.join(os.environ.get("HPCLAUNCH_TEST_ARTIFACTS") or os.path.join(ROOT, "artifacts"), "dashboard")
    os.makedirs(folder, exist_ok=True)
    for name in ("jobs.png", "job.png", "failed.png"):   # a failed run must not leave the last good run's pictures
        if os.path.exists(os.path.join(folder, name)):
            os.remove(os.path.join(folder, name))
    print(f"\ndashboard screenshots: {folder}")
    return folder


@pytest.fixture
def running_job(hpc_home, tmp_path):
    """A local 2-rank job, running, with the fake NVML under its monitor; cancelled afterwards."""
    (tmp_path / "steps.py").write_text(STEPS)
    (tmp_path / "scenario.json").write_text(json.dumps(scenario()))
    (tmp_path / "job.yaml").write_text(f"name: live-steps\nlauncher: srun\ncommand: [{sys.executable}, steps.py]\n"
                                       "resources: {nodes: 1, tasks_per_node: 2}\nmonitor: {interval: 0.5}\n")
    env = dict(os.environ, HPCLAUNCH_MONITOR_FAKE_NVML=os.path.join(HERE, "monitors", "fake_nvml.py"),
               HPCLAUNCH_FAKE_NVML_SCENARIO=str(tmp_path / "scenario.json"))
    sub = json.loads(hl("submit", "job.yaml", "--backend", "local", "--json", cwd=str(tmp_path), env=env).stdout)
    yield sub
    hl("cancel", sub["job_id"], check=False)


def test_the_dashboard_follows_a_running_job_in_chromium(browser_parts, running_job, dashboard, artefacts):
    assert [] in README_LINES                                         # the README's first line, as written
    dash = dashboard()
    assert dash.url == f"http://127.0.0.1:{dash.port}/"           # loopback: no token
    driver = chrome()
    try:
        driver.get(dash.local("/"))
        key = wait_for(driver, """(function () {
            var row = [...document.querySelectorAll('#jobs tbody tr')].find(
                r => r.cells[1].textContent === 'live-steps' && r.cells[2].textContent === 'RUNNING');
            return row && row.getAttribute('data-key'); })()""", "running job in the list")
        assert driver.find_element("css selector", f"tr[data-key='{key}'] td:nth-child(4)").text == "local"
        driver.save_screenshot(os.path.join(artefacts, "jobs.png"))

        driver.find_element("link text", running_job["job_id"]).click()   # the job's page, as a user gets there
        wait_for(driver, f"location.pathname === '/job/{key}'", "job page")
        driver.execute_script("window.__notReloaded = 'marker'")
        wait_for(driver, "document.getElementById('fact-state') && "
                         "document.getElementById('fact-state').textContent.startsWith('RUNNING')", "state")
        step = "document.querySelector(\"#ranks tr[data-rank='0'] td.step\")"
        first = int(wait_for(driver, f"{step} && {step}.textContent", "rank 0's step"))
        points = ("(function () { var d = document.getElementById('chart-power').data || [];"
                  " return d.reduce((n, t) => n + t.x.length, 0); })()")
        power_before = wait_for(driver, points, "GPU power samples")
        time.sleep(5)
        second = int(driver.execute_script(f"return {step}.textContent"))
        assert second > first, (first, second)                           # progress moved on ...
        assert driver.execute_script("return window.__notReloaded") == "marker"   # ... without a reload
        assert driver.execute_script("return " + points) > power_before  # the chart grew in place
        traces = driver.execute_script("return document.getElementById('chart-power').data.map(t => t.name)")
        assert len(traces) == 2 and all(t.endswith(("GPU0", "GPU1")) for t in traces), traces
        temps = driver.execute_script("return document.getElementById('chart-temp').data[0].y.filter(v => v)")
        assert temps and 30 <= min(temps) and max(temps) <= 60, temps   # the fake's H100 from 31 to 51 °C
        assert driver.execute_script("return document.getElementById('chart-cpu').data.length") == 1
        assert driver.find_elements("css selector", "#ranks tr[data-rank='1']")
        assert driver.find_element("css selector", "svg.main-svg")     # plotly drew (it came from the server)
        driver.save_screenshot(os.path.join(artefacts, "job.png"))
        severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert severe == [], severe
    except BaseException:
        driver.save_screenshot(os.path.join(artefacts, "failed.png"))   # what the page showed when it failed
        raise
    finally:
        driver.quit()
    assert dash.stop() == 0                                           # Ctrl-C: exit 0


@pytest.mark.parametrize("args", [a for a in README_LINES if "--host" in a] + [["--token"]])
def test_a_non_loopback_bind_needs_the_printed_token(hpc_home, dashboard, args):
    dash = dashboard(*args)
    token = dash.token
    assert len(token) >= 32 and re.fullmatch(r"/[\w-]{16}/", dash.root), dash.url   # pages under a random path
    for path in ("/", "/api/jobs", "/vendor/plotly.min.js", "/static/dashboard.js", "/job/1/events"):
        for url in (dash.local(path), f"http://127.0.0.1:{dash.port}{path}"):   # under the root or not
            code, body, _ = get(url)
            assert code == 403 and "token" in body, (url, code, body)
    assert get(dash.local("/?token=" + token[:-1] + "x"))[0] == 403
    code, body, headers = get(dash.local("/?token=" + token))
    assert code == 200 and "hpclaunch jobs" in body
    cookie, *attributes = headers["Set-Cookie"].split("; ")
    assert cookie == f"hpclaunch_dashboard_{dash.port}={token}" and "HttpOnly" in attributes, attributes
    assert f"Path={dash.root}" in attributes and "SameSite=Strict" in attributes, attributes
    code, body, _ = get(dash.local("/api/jobs"), cookie=cookie)            # the page's own requests
    assert code == 200 and json.loads(body) == {"jobs": [], "error": ""}
    code, body, _ = get(f"http://127.0.0.1:{dash.port}/?token={token}")   # the root with the token: there
    assert code == 200 and "hpclaunch jobs" in body
    assert dash.stop() == 0


def test_loopback_answers_only_to_loopback_names(hpc_home, dashboard):
    dash = dashboard()
    assert get(dash.local("/api/jobs"))[0] == 200
    req = urllib.request.Request(dash.local("/api/jobs"), headers={"Host": f"attacker.example:{dash.port}"})
    with pytest.raises(urllib.error.HTTPError) as e:   # a rebinding page names its own host
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 403
    assert get(dash.local("/job/999"))[:2] == (404, "no job 999 in the registry (the list: /)\n")
    assert get(dash.local("/api/job/999"))[0] == 404 and get(dash.local("/job/999/events"))[0] == 404
    assert get(dash.local("/job/x1"))[0] == 404


def test_a_job_submitted_elsewhere_is_listed_with_what_the_registry_knows(hpc_home, dashboard):
    """A row whose run directory is on another machine (backend "remote") but without the remote's
    settings (a hand-made row): listed with the registry's state, its page without live data, and the
    list says why its state was not refreshed (tests/test_remote_cluster.py refreshes a real one)."""
    from hpclaunch.runs.registry import Registry

    reg = Registry()
    far = reg.add(backend="remote", cluster="big-cluster", job_id="4242", name="far-away", nodes=2,
                  run_dir="/nonexistent/shared/code/far-away-4242", state="RUNNING")
    reg.close()
    dash = dashboard()
    code, body, _ = get(dash.local("/api/jobs"))
    listed = json.loads(body)
    assert code == 200 and "could not ask the remote login node" in listed["error"], listed
    assert "job 4242: the row holds no remote settings" in listed["error"], listed
    assert [(r["job_id"], r["backend"], r["cluster"], r["state"], r["local"]) for r in listed["jobs"]] == \
        [("4242", "remote", "big-cluster", "RUNNING", False)]
    code, body, _ = get(dash.local(f"/api/job/{far.key}"))
    page = json.loads(body)
    assert code == 200 and page["job"]["nodes_requested"] == 2 and page["job"]["hosts"] == []
    assert page["live"] == {"full": True, "charts": {}, "ranks": [], "notes": []}
    assert dash.stop() == 0


@pytest.mark.parametrize("args, message", [
    (["--port", "70000"], "--port 70000: expected a port from 1 to 65535, or 0 for any free one"),
    (["--host", "203.0.113.7"], "--host 203.0.113.7: not an address of this machine"),
    (["--host", "login1.example"], "--host login1.example: expected an IP address of this machine"),
    (["--since", "a week"], "--since a week: expected an age like 30m, 12h or 7d"),
])
def test_bad_arguments_are_one_line(hpc_home, args, message):
    proc = hl("dashboard", *args, check=False, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1, proc.stderr


def test_a_port_in_use_is_one_line(hpc_home, dashboard):
    first = dashboard()
    proc = hl("dashboard", "--port", str(first.port), check=False, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith(f"--port {first.port}: already in use"), proc.stderr


def test_help_loads_none_of_the_dashboard_libraries():
    code = "from hpclaunch.cli import main; main(['dashboard', '--help'])"
    assert modules_loaded(code, ("aiohttp", "aiohttp_sse", "plotly", "numpy")) == []


def test_chromedriver_is_debians(browser_parts):
    """The test drives Debian's chromium with Debian's driver, matched versions, nothing downloaded."""
    assert shutil.which("chromedriver") == CHROMEDRIVER
    browser = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout
    driver = subprocess.run([CHROMEDRIVER, "--version"], capture_output=True, text=True).stdout
    assert browser.split()[1].split(".")[0] == driver.split()[1].split(".")[0], (browser, driver)


def test_the_list_asks_each_backend_once_per_refresh_for_all_its_jobs(hpc_home, tmp_path, monkeypatch):
    from hpclaunch.dashboard.board import Board
    from hpclaunch.runs import jobs

    (tmp_path / "job.yaml").write_text("name: sleeper\nlauncher: srun\ncommand: [sleep, '60']\n"
                                       "resources: {nodes: 1, tasks_per_node: 1}\nmonitor: {interval: 0}\n")
    ids = [json.loads(hl("submit", "job.yaml", "--backend", "local", "--json", "-o", f"name=sleeper{i}",
                         cwd=str(tmp_path)).stdout)["job_id"] for i in range(3)]
    calls = []

    class Counting:
        def __init__(self, backend):
            self.backend = backend

        def statuses(self, refs):
            calls.append(("statuses", len(refs)))
            return self.backend.statuses(refs)

        def status(self, ref):
            calls.append(("status", 1))
            return self.backend.status(ref)

        def __getattr__(self, name):
            return getattr(self.backend, name)

    real = jobs.get_backend
    monkeypatch.setattr(jobs, "get_backend", lambda name: Counting(real(name)))
    try:
        board = Board(since_s=86400, refresh_s=3600)
        for _ in range(3):   # three pages open, each asking twice
            rows = board.rows()["jobs"]
            board.job(rows[0]["key"])
        assert calls == [("statuses", 3)], calls
        assert {r["name"] for r in rows} == {"sleeper0", "sleeper1", "sleeper2"}
        assert {r["state"] for r in rows} <= {"PENDING", "RUNNING"} and all(r["source"] == "local" for r in rows)
        board.refresh_s = 0
        board.rows()
        assert calls == [("statuses", 3)] * 2, calls
    finally:
        for job_id in ids:
            hl("cancel", job_id, check=False)


def test_a_job_page_is_sent_only_new_points_until_the_series_is_thinned(tmp_path, monkeypatch):
    sys.path.insert(0, os.path.join(HERE, "report"))
    from synth import GpuSpec, HostSpec, write_run

    from hpclaunch.dashboard import live
    from hpclaunch.monitors import schema

    monkeypatch.setattr(live, "UPDATE_S", 0.0)
    write_run(tmp_path, [GpuSpec("n1", 0), GpuSpec("n1", 1)], hosts=[HostSpec("n1")], duration=1500)
    view = live.JobLive(str(tmp_path))
    first, seen = view.payload(None)
    assert first["full"] and sorted(first["charts"]) == ["cpu", "mem", "power", "temp"]
    assert sorted(first["charts"]["power"]) == ["n1 GPU0", "n1 GPU1"]
    assert len(first["charts"]["power"]["n1 GPU0"]["t"]) == 1501
    again, seen = view.payload(seen)
    assert not again["full"] and again["charts"] == {}             # nothing new: nothing sent
    path = tmp_path / schema.MONITOR_DIR / schema.gpu_file("n1")
    last_two = path.read_text().splitlines(keepends=True)[-2:]
    with open(path, "a") as f:
        f.write("".join(last_two))                                 # one more sample of each GPU
    delta, seen = view.payload(seen)
    assert not delta["full"] and {k: len(v["t"]) for k, v in delta["charts"]["power"].items()} == \
        {"n1 GPU0": 1, "n1 GPU1": 1}
    with open(path, "a") as f:
        f.write("".join(last_two) * 500)                           # past MAX_POINTS: thinned in pairs
    thinned, _ = view.payload(seen)
    assert thinned["full"] and len(thinned["charts"]["power"]["n1 GPU0"]["t"]) <= live.MAX_POINTS
    assert len(thinned["charts"]["temp"]["n1 GPU1"]["y"]) == len(thinned["charts"]["temp"]["n1 GPU1"]["t"])


def test_a_rank_s_attempt_comes_from_its_header_when_steps_leave_it_out(tmp_path, monkeypatch):
    """train_entry names the attempt in each header (one per attempt), not in its step records."""
    from hpclaunch.dashboard import live

    monkeypatch.setattr(live, "UPDATE_S", 0.0)
    (tmp_path / "metrics").mkdir()
    path = tmp_path / "metrics" / "rank3.jsonl"
    header = {"kind": "header", "schema": "hpclaunch.metrics/1", "rank": 3}
    step = {"kind": "step", "rank": 3, "epoch": 0, "loss": 1.5}
    path.write_text("".join(json.dumps(r) + "\n" for r in (dict(header, attempt=0), dict(step, step=10))))
    view = live.JobLive(str(tmp_path))
    msg, _ = view.payload(None)
    assert [(r["rank"], r["step"], r["attempt"], r["records"]) for r in msg["ranks"]] == [(3, 10, 0, 1)]
    with open(path, "a") as f:   # requeued: a new header, then steps again
        f.write("".join(json.dumps(r) + "\n" for r in (dict(header, attempt=1), dict(step, step=4))))
    msg, _ = view.payload(None)
    assert [(r["rank"], r["step"], r["attempt"], r["records"]) for r in msg["ranks"]] == [(3, 4, 1, 2)]


def test_a_pending_job_s_row_says_why_it_waits_and_until_when(hpc_home, tmp_path, monkeypatch):
    """Slurm's reason in words and the start it expects, on the job list and the job page (issue 45, item 7)."""
    import time

    from hpclaunch.dashboard.board import Board
    from hpclaunch.launchers.backends.base import JobStatus, State
    from hpclaunch.runs import jobs
    from hpclaunch.runs.registry import Registry

    rec = Registry().add(backend="slurm", cluster="c", job_id="77", name="behind", run_dir=str(tmp_path))
    soon = time.time() + 600

    class Fake:
        def statuses(self, refs):
            return [JobStatus(State.PENDING, None, "0:00", "", "Priority", 1, "squeue", expected_start=soon)
                    for _ in refs]

    monkeypatch.setattr(jobs, "get_backend", lambda name: Fake())
    board = Board(since_s=86400, refresh_s=3600)
    (row,) = board.rows()["jobs"]
    assert row["reason"] == "Priority" and row["expected_start"] == soon
    assert row["waiting"].startswith("Priority: jobs of higher priority are ahead of it; expected to start ")
    assert board.job(rec.key)["waiting"] == row["waiting"]
