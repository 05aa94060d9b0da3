"""What the scale benches share: a child process's wall, CPU and peak resident memory of its whole tree
(its workers included), Chromium's time to render a page, and a plot as inline SVG (the HTML report's
own line chart: no matplotlib)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DATA = Path(os.environ.get("HPCLAUNCH_SCALE_DATA") or (Path(tempfile.gettempdir()) / "hpclaunch-scale"))


def run_measured(argv: Sequence[str], env: Optional[dict] = None, timeout: float = 7200) -> dict:
    """Run ``argv``; its last stdout line is JSON. Adds wall_s (from the parent), peak_tree_rss_mib (the
    process and every descendant, summed, sampled every 0.1 s) and the load average before and after."""
    import psutil

    load0 = os.getloadavg()
    t0 = time.perf_counter()
    p = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = [0]
    done = threading.Event()

    def sample():
        try:
            root = psutil.Process(p.pid)
        except psutil.Error:
            return
        while not done.is_set():
            total = 0
            try:
                for q in [root] + root.children(recursive=True):
                    try:
                        total += q.memory_info().rss
                    except psutil.Error:
                        pass
            except psutil.Error:
                pass
            peak[0] = max(peak[0], total)
            done.wait(0.1)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        out, err = p.communicate(timeout=timeout)
    finally:
        done.set()
        th.join()
    wall = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"{' '.join(argv[:4])}... failed ({p.returncode}):\n{err[-3000:]}")
    res = json.loads(out.strip().splitlines()[-1])
    res.update(wall_s_outside=wall, peak_tree_rss_mib=peak[0] / 2**20, load_before=load0, load_after=os.getloadavg())
    return res


def chromium_render_s(page: Path, runs: int = 3) -> List[float]:
    """Seconds from navigation start to the page loaded, its script run and two frames painted, in
    Debian's headless chromium (through its chromedriver), a fresh tab each run."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--window-size=1300,1500", "--disable-background-networking"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service(executable_path="/usr/bin/chromedriver"))
    out = []
    try:
        for _ in range(runs):
            driver.get("about:blank")
            driver.get(page.as_uri())   # returns once the load event fired
            took = driver.execute_async_script(
                "var done = arguments[arguments.length - 1];"
                "requestAnimationFrame(function () { requestAnimationFrame(function () {"
                " done(performance.now()); }); });")
            out.append(took / 1000.0)
    finally:
        driver.quit()
    return out


def svg_plot(path: Path, title: str, ylabel: str, xlabel: str,
             lines: Sequence[Tuple[str, Sequence[float], Sequence[float]]]) -> None:
    """A line chart (the HTML report's, reports/render_html.py) written to ``path``."""
    sys.path.insert(0, str(REPO))
    from hpclaunch.reports.render_html import PALETTE, line_chart

    svg = line_chart([(label, list(x), list(y), PALETTE[i % len(PALETTE)]) for i, (label, x, y) in enumerate(lines)],
                     title, ylabel, xlabel=xlabel, width=640, height=300, time_axis=False)
    svg = svg.replace("<svg ", '<svg style="background:#fff;font-family:sans-serif" ', 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(svg)
    os.replace(tmp, path)


def fmt_load(load: Sequence[float]) -> str:
    return " / ".join(f"{x:.1f}" for x in load)


def median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def table(rows: List[Dict[str, object]], cols: Sequence[str]) -> Tuple[List[str], List[List[str]]]:
    return list(cols), [[str(r.get(c, "")) for c in cols] for r in rows]
