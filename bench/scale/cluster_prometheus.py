"""bench_cluster_start.py's Prometheus part: a job's monitors with their exporter on, on every node
of the test cluster, scraped by a real Prometheus (Debian's) on the host with one target a node (a
generated prometheus.yml, a scratch TSDB, a free port); what it holds is read through its HTTP API."""
from __future__ import annotations

import json
import random
import shutil
import statistics
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path


def prom_query(port: int, q: str):
    url = f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(q)}"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            res = json.loads(r.read().decode())
    except OSError:
        return None
    return res["data"]["result"] if res.get("status") == "success" else None


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prometheus_part(n: int, scratch: Path, env: dict, python: str, job_yaml, squeue_state) -> dict:
    """job_yaml(out, port) -> the job file's text; squeue_state(name) -> (job id, state)."""
    binary = shutil.which("prometheus")
    if not binary:
        return {"error": "no prometheus binary"}
    folder = scratch / f"prom{random.randrange(10**6)}"
    folder.mkdir(parents=True)
    qport, mport = free_port(), random.randrange(20000, 29990)
    targets = [f"c{i}:{mport}" for i in range(1, n + 1)]
    (folder / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n  - job_name: hpclaunch\n"
        f"    static_configs: [{{targets: {json.dumps(targets)}}}]\n")
    prom = subprocess.Popen([binary, f"--config.file={folder / 'prometheus.yml'}",
                             f"--storage.tsdb.path={folder / 'tsdb'}", f"--web.listen-address=127.0.0.1:{qport}"],
                            stdout=subprocess.DEVNULL, stderr=open(folder / "prometheus.log", "w"))
    res: dict = {"nodes": n, "targets": len(targets)}
    name = f"prom{n}x{random.randrange(10**6)}"
    try:
        deadline = time.time() + 90
        while len(prom_query(qport, "up") or ()) < len(targets):
            if time.time() > deadline:
                return dict(res, error="Prometheus never tried every target")
            time.sleep(1)
        out = scratch / name
        out.mkdir()
        (out / "job.yaml").write_text(job_yaml(name, out, mport))
        t0 = time.time()
        proc = subprocess.Popen([python, "-m", "hpclaunch", "submit", str(out / "job.yaml"), "--backend", "slurm",
                                 "--wait"], cwd=str(scratch), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        job_id = None
        best_up = 0
        seen = None
        while time.time() - t0 < 300 and proc.poll() is None:
            job_id = job_id or squeue_state(name)[0]
            if job_id:
                sel = f'{{job_id="{job_id}"}}'
                up = prom_query(qport, "up") or []
                n_up = sum(1 for r in up if r["value"][1] == "1")
                if n_up > best_up:
                    best_up, res["all_up_after_s"] = n_up, time.time() - t0
                per_node = prom_query(qport, f"count by (node) ({{__name__=~'hpclaunch_.+', job_id='{job_id}'}})")
                if per_node and len(per_node) == n and n_up == n:
                    seen = per_node
                    res["series_total"] = sum(int(r["value"][1]) for r in per_node)
                    res["series_per_node"] = sorted({int(r["value"][1]) for r in per_node})
                    res["metric_names"] = len(prom_query(qport, f"count by (__name__) ({sel})") or [])
                    res["scrape_s"] = sorted(float(r["value"][1]) for r in
                                             prom_query(qport, "scrape_duration_seconds") or [])
                    break
            time.sleep(1)
        res["targets_up"] = best_up
        res["ok"] = seen is not None
        stdout, stderr = proc.communicate(timeout=300)
        res["job_rc"] = proc.returncode
        if proc.returncode:
            res["tail"] = (stdout + stderr)[-1000:]
        if res.get("scrape_s"):
            s = res["scrape_s"]
            res["scrape_s"] = {"median": statistics.median(s), "max": max(s)}
    finally:
        prom.terminate()
        prom.wait(timeout=30)
    return res
