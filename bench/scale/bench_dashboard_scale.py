"""Benchmark: the dashboard's page of a running job of 64, 256 and 1,024 nodes x 8 GPUs (issue 50).

    python bench/scale/bench_dashboard_scale.py [--nodes 64,256,1024] [--seconds 60] [--markdown docs/bench/scale-dashboard.md]

For each size, a job is running: a writer process appends, every second, one sample of every GPU and
(every 10 s) of every host to each node's logs, and a step record every 10 s to each rank's metrics
file, after 10 minutes of history written at the start (the times end now: the page draws what a
running job's has). The job is in a scratch registry; `hpclaunch dashboard` serves it. Measured:

* the job page in Debian's headless Chromium: from navigation to its charts and ranks drawn, the first
  time (the server reads every log then) and twice more (its view kept);
* one viewer's server-sent events over ``--seconds`` after the first message: bytes a minute (goal
  < 1 MB), messages, and the first message's size (the whole history, once);
* the dashboard process's CPU over that time (what following 10,000 files costs the login node).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import benchlib  # noqa: E402
import scalelib  # noqa: E402

GPUS, HISTORY_S, RANK_EVERY_S = 8, 600, 10


def _gpu_row(t: float, host: str, i: int, k: int) -> str:
    """A GPU row of the contract (monitors/schema.py) for sample ``k``."""
    from hpclaunch.monitors import schema
    power = 250.0 + 100.0 * ((k + 7 * i) % 60) / 60.0
    vals = {"time_unix": f"{t:.3f}", "host": host, "gpu_index": str(i), "gpu_uuid": f"GPU-{host}-{i}",
            "ranks": "", "power_w": f"{power:.1f}", "power_avg_w": f"{power:.1f}", "energy_mj": str(int(1e9 + k * 250000)),
            "temp_c": f"{55 + (k + i) % 20}", "mem_temp_c": "60", "mem_used_mib": "60000", "mem_total_mib": "81559",
            "util_pct": "97", "mem_util_pct": "40", "sm_clock_mhz": "1980", "mem_clock_mhz": "2619",
            "power_limit_w": "700", "throttle_reasons": "0", "slowdown_temp_c": "89", "shutdown_temp_c": "92"}
    return ",".join(vals.get(c, "0" if c != "error" else "") for c in schema.GPU_COLUMNS) + "\n"


def _host_row(t: float, host: str) -> str:
    from hpclaunch.monitors import schema
    vals = {"time_unix": f"{t:.3f}", "host": host, "cpu_pct": "35", "mem_used_mib": "200000", "mem_total_mib": "512000",
            "load1": "12", "rapl_energy_uj": "", "cpu_temp_c": "55", "monitor_cpu_s": "1.5", "monitor_rss_mib": "24"}
    return ",".join(vals.get(c, "") for c in schema.HOST_COLUMNS) + "\n"


def writer(run: Path, nodes: int, stop: threading.Event, start_k: int) -> None:
    """Append a sample a second to every node's logs, a step record every RANK_EVERY_S to every rank's."""
    from hpclaunch.monitors import schema
    k = start_k
    while not stop.is_set():
        t = time.time()
        for h in range(nodes):
            host = f"node{h:04d}"
            with open(run / schema.MONITOR_DIR / schema.gpu_file(host), "a") as f:
                f.write("".join(_gpu_row(t, host, i, k) for i in range(GPUS)))
            if k % 10 == 0:
                with open(run / schema.MONITOR_DIR / schema.host_file(host), "a") as f:
                    f.write(_host_row(t, host))
        if k % RANK_EVERY_S == 0:
            for r in range(nodes * GPUS):
                with open(run / "metrics" / f"rank{r}.jsonl", "a") as f:
                    f.write(json.dumps({"kind": "step", "time_unix": t, "rank": r, "epoch": 0, "step": k // RANK_EVERY_S,
                                        "loss": 1.0 / (1 + k), "samples_per_s": 128.0, "step_time_s": 0.5}) + "\n")
        k += 1
        stop.wait(max(0.0, 1.0 - (time.time() - t)))


def make_run(root: Path, nodes: int) -> Path:
    """The run directory with HISTORY_S of history ending now."""
    from hpclaunch.monitors import schema
    run = root / f"live-{nodes}"
    shutil.rmtree(run, ignore_errors=True)
    (run / schema.MONITOR_DIR).mkdir(parents=True)
    (run / "metrics").mkdir()
    now = time.time()
    for h in range(nodes):
        host = f"node{h:04d}"
        rows = [_gpu_row(now - HISTORY_S + k, host, i, k) for k in range(HISTORY_S) for i in range(GPUS)]
        (run / schema.MONITOR_DIR / schema.gpu_file(host)).write_text(
            schema.header_comment(schema.GPU_SCHEMA) + ",".join(schema.GPU_COLUMNS) + "\n" + "".join(rows))
        (run / schema.MONITOR_DIR / schema.host_file(host)).write_text(
            schema.header_comment(schema.HOST_SCHEMA) + ",".join(schema.HOST_COLUMNS) + "\n"
            + "".join(_host_row(now - HISTORY_S + k, host) for k in range(0, HISTORY_S, 10)))
    for r in range(nodes * GPUS):
        (run / "metrics" / f"rank{r}.jsonl").write_text(
            json.dumps({"kind": "header", "schema": "hpclaunch.metrics/1", "rank": r, "attempt": 0}) + "\n" + "".join(
                json.dumps({"kind": "step", "time_unix": now - HISTORY_S + k, "rank": r, "epoch": 0,
                            "step": k // RANK_EVERY_S, "loss": 1.0, "samples_per_s": 128.0, "step_time_s": 0.5}) + "\n"
                for k in range(0, HISTORY_S, RANK_EVERY_S)))
    return run


def sse_bytes(url: str, seconds: float) -> dict:
    """One viewer: the first message's bytes, then the bytes and messages over ``seconds``."""
    with urllib.request.urlopen(url, timeout=120) as r:
        first = 0
        while True:   # the first message ends with a blank line
            line = r.readline()
            first += len(line)
            if line in (b"\n", b"\r\n") and first > 10:
                break
        t0, got, msgs = time.monotonic(), 0, 0
        while time.monotonic() - t0 < seconds:
            line = r.readline()
            if not line:
                break
            got += len(line)
            msgs += line.startswith(b"data:")
        took = time.monotonic() - t0
    return {"first_bytes": first, "bytes_per_min": got / took * 60, "messages": msgs, "seconds": took}


def page_load_s(driver, url: str) -> float:
    """Seconds from navigation to the charts and the ranks table drawn."""
    driver.get("about:blank")
    driver.get(url)
    end = time.monotonic() + 120
    while time.monotonic() < end:
        t = driver.execute_script(
            "var c = document.getElementById('chart-power'), r = document.querySelectorAll('#ranks tbody tr');"
            "return c && c.data && c.data.length && r.length ? performance.now() : null;")
        if t:
            return t / 1000.0
        time.sleep(0.05)
    raise RuntimeError("the job page drew nothing in 120 s")


def page_ready_s(driver, url: str) -> float:
    """Seconds from navigation to a page's scripts (plotly's among them) loaded and run."""
    driver.get("about:blank")
    driver.get(url)
    end = time.monotonic() + 120
    while time.monotonic() < end:
        t = driver.execute_script("return document.readyState === 'complete' && window.Plotly ? performance.now() : null;")
        if t:
            return t / 1000.0
        time.sleep(0.05)
    raise RuntimeError("the page did not load in 120 s")


def bench_size(nodes: int, seconds: float, root: Path) -> dict:
    import psutil
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    run = make_run(root, nodes)
    home = root / f"home-{nodes}"
    shutil.rmtree(home, ignore_errors=True)
    env = dict(os.environ, HPCLAUNCH_HOME=str(home))
    small = root / f"small-{nodes}"   # a job without logs: its page warms the browser (plotly, the page's script)
    small.mkdir(exist_ok=True)
    code = ("from hpclaunch.runs.registry import Registry; r = Registry(); "
            f"k = r.add(backend='local', cluster='local', job_id='1', name='big{nodes}', run_dir={str(run)!r}, "
            f"nodes={nodes}).key; r.update_state(k, 'RUNNING'); print(k); "
            f"print(r.add(backend='local', cluster='local', job_id='2', name='small', run_dir={str(small)!r}, nodes=1).key)")
    key, small_key = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                    check=True).stdout.split()
    stop = threading.Event()
    w = threading.Thread(target=writer, args=(run, nodes, stop, HISTORY_S), daemon=True)
    w.start()
    dash = subprocess.Popen([sys.executable, "-m", "hpclaunch", "dashboard", "--port", "0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        base = re.match(r"hpclaunch dashboard: (http://\S+/)$", dash.stdout.readline().strip()).group(1)
        opts = webdriver.ChromeOptions()
        opts.binary_location = "/usr/bin/chromium"
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                    "--window-size=1300,1500"):
            opts.add_argument(arg)
        driver = webdriver.Chrome(options=opts, service=Service(executable_path="/usr/bin/chromedriver"))
        try:
            cold = page_ready_s(driver, f"{base}job/{small_key}")   # the browser's own first load
            loads = [page_load_s(driver, f"{base}job/{key}") for _ in range(3)]
        finally:
            driver.quit()
        proc = psutil.Process(dash.pid)
        c0 = sum(proc.cpu_times()[:2])
        sse = sse_bytes(f"{base}job/{key}/events", seconds)
        cpu = (sum(proc.cpu_times()[:2]) - c0) / sse["seconds"] * 100
    finally:
        stop.set()
        w.join()
        dash.terminate()
        dash.wait(30)
    shutil.rmtree(run, ignore_errors=True)
    return {"nodes": nodes, "cold_browser_s": cold, "loads": loads, "cpu_pct": cpu, "load": os.getloadavg(), **sse}


def main() -> int:
    benchlib.run_from_wheel()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="64,256,1024")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--markdown", default=None)
    a = ap.parse_args()
    sec = benchlib.Section("The dashboard's page of a 1,024-node job (`bench/scale/bench_dashboard_scale.py`)",
                           f"nice -n 10 python bench/scale/bench_dashboard_scale.py --nodes {a.nodes} --seconds {a.seconds:g}"
                           f" --markdown {a.markdown or 'docs/bench/scale-dashboard.md'}")
    root = Path(tempfile.mkdtemp(prefix="hpclaunch-dash-scale-"))
    rows, res = [], []
    try:
        for n in (int(x) for x in a.nodes.split(",")):
            r = bench_size(n, a.seconds, root)
            res.append(r)
            print(json.dumps(r), flush=True)
            rows.append([f"{n:,}", f"{n * GPUS:,}", f"{n * GPUS:,}", f"{r['cold_browser_s']:.2f}", f"{r['loads'][0]:.2f}",
                         f"{scalelib.median(r['loads'][1:]):.2f}", f"{r['first_bytes'] / 1024:,.0f}",
                         f"{r['bytes_per_min'] / 1024:,.1f}", str(r["messages"]), f"{r['cpu_pct']:.0f}",
                         scalelib.fmt_load(r["load"])])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    sec.para(f"A running job of N nodes x {GPUS} GPUs, its logs appended every second (one sample of every GPU; every "
             f"10 s one of every host and a step record of every rank) after {HISTORY_S // 60} minutes of history; one "
             f"viewer. Page load: Debian's headless Chromium, from navigation to the charts and the ranks table "
             "drawn. The browser first opens a small job's page (its cold start: plotly and the page's script loaded "
             "and compiled, as a user coming from another job's page has them); the big job's first load is then the "
             f"server's first read of every log, the next two with its view kept. Events: {a.seconds:g} s of one "
             "viewer's stream after its first message. CPU: the dashboard process's, over those seconds (% of one "
             "core; it reads the logs at most a quarter of the time). The machine's 2 CPUs are shared.")
    sec.table(["nodes", "GPUs", "ranks", "browser cold start (s)", "page load, first (s)", "page load, again (s)", "first message KiB",
               "events KiB/min", "messages", "server CPU %", "load"], rows)
    big = res[-1]
    sec.para(f"At {big['nodes']:,} nodes: page load {big['loads'][0]:.2f} s first (after the browser's cold start), {scalelib.median(big['loads'][1:]):.2f} s "
             f"after (goal < 3 s: {'met' if max(big['loads']) < 3 else 'NOT met'}); events "
             f"{big['bytes_per_min'] / 2**20:.3f} MiB a minute (goal < 1 MB: "
             f"{'met' if big['bytes_per_min'] < 1e6 else 'NOT met'}). The page shows the min, mean and max over the GPUs "
             "and hosts, and the ranks' summary with the 16 furthest behind (hpclaunch/dashboard/envelope.py).")
    scalelib.svg_plot(Path(benchlib.REPO) / "docs" / "bench" / "scale-dashboard.svg",
                      "Job page: events KiB a minute and first load (s x 100) against nodes", "", "nodes",
                      [("events KiB/min", [r["nodes"] for r in res], [r["bytes_per_min"] / 1024 for r in res]),
                       ("first page load, s x 100", [r["nodes"] for r in res], [r["loads"][0] * 100 for r in res])])
    sec.para("![Job page against nodes](bench/scale-dashboard.svg)")
    sec.write(a.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
