"""Benchmark: the Prometheus exporter's series per node as GPUs and ranks grow (issue 50).

    python bench/scale/bench_exporter_scale.py [--scrapes 20] [--markdown docs/bench/scale-exporter.md]

The real monitor daemon (`python -m hpclaunch.monitors --prometheus-port`) over the fake NVML's H100s
(tests/monitors/fake_nvml.py), 1 to 8 GPUs and 8 or 64 ranks a node, scraped over HTTP ``--scrapes``
times: the series it serves (prometheus_client's own parser), the bytes of a scrape and its time. A
job's series are its nodes' sum: what a Prometheus server scraping a 64- or 1,024-node job holds.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "monitor"))
sys.path.insert(0, str(HERE))

import benchlib  # noqa: E402
import scalelib  # noqa: E402
from daemons import FAKE, fake_scenario  # noqa: E402


def one(gpus: int, ranks: int, scrapes: int, tmp: Path) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    scen = tmp / f"s{gpus}.json"
    scen.write_text(json.dumps(fake_scenario(gpus, 400)))
    run = tmp / f"run-{gpus}-{ranks}"
    run.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "CUDA_VISIBLE_DEVICES"}
    env.update(HPCLAUNCH_MONITOR_FAKE_NVML=FAKE, HPCLAUNCH_FAKE_NVML_SCENARIO=str(scen),
               HPCLAUNCH_TASKS_PER_NODE=str(ranks), SLURM_NODEID="5", SLURM_JOB_ID="99", SLURM_JOB_USER="bench")
    p = subprocess.Popen([sys.executable, "-m", "hpclaunch.monitors", "--interval", "0.2", "--run-dir", str(run),
                          "--host", "node0005", "--prometheus-port", str(port)], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        end = time.monotonic() + 60
        body = ""
        while time.monotonic() < end:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    body = r.read().decode()
                if "hpclaunch_gpu_energy_joules_total" in body and "hpclaunch_host_cpu_utilization_ratio" in body:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        times, sizes = [], []
        for _ in range(scrapes):
            t0 = time.perf_counter()
            with urllib.request.urlopen(url, timeout=5) as r:
                body = r.read().decode()
            times.append(time.perf_counter() - t0)
            sizes.append(len(body))
        series = sum(len(f.samples) for f in text_string_to_metric_families(body))
        labels = max((len(s.labels) for f in text_string_to_metric_families(body) for s in f.samples), default=0)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(30)
    return {"gpus": gpus, "ranks": ranks, "series": series, "bytes": scalelib.median(sizes),
            "scrape_ms": scalelib.median(times) * 1000, "max_labels": labels}


def bound():
    """(series a node, series a GPU) at most, from the exporter's own tables (docs/monitor-logs.md)."""
    from hpclaunch.monitors import prometheus, schema
    return 2 + len(prometheus.HOST_METRICS), len(prometheus.GPU_METRICS) + len(schema.THROTTLE_COUNTER_COLUMNS) + 1


def main() -> int:
    benchlib.run_from_wheel()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scrapes", type=int, default=20)
    ap.add_argument("--markdown", default=None)
    a = ap.parse_args()
    sec = benchlib.Section("The Prometheus exporter's series as a job grows (`bench/scale/bench_exporter_scale.py`)",
                           f"nice -n 10 python bench/scale/bench_exporter_scale.py --scrapes {a.scrapes}"
                           f" --markdown {a.markdown or 'docs/bench/scale-exporter.md'}")
    res = []
    with tempfile.TemporaryDirectory() as tmp:
        for gpus in (1, 2, 4, 8):
            for ranks in (8, 64):
                r = one(gpus, ranks, a.scrapes, Path(tmp))
                res.append(r)
                print(json.dumps(r), flush=True)
    per_node, per_gpu = bound()
    sec.para("One node's monitor with N fake H100s, 8 or 64 ranks a node; medians of the scrapes. The host row "
             "here has no RAPL and no CPU sensor: those two series are missing (never 0), so a node here serves 2 fewer "
             f"than {per_node} + {per_gpu} x GPUs (docs/monitor-logs.md).")
    sec.table(["GPUs", "ranks a node", "series a node", f"{per_node} + {per_gpu} x GPUs", "labels at most", "scrape KiB",
               "scrape ms", "64-node job", "1,024-node job"],
              [[r["gpus"], r["ranks"], r["series"], per_node + per_gpu * r["gpus"], r["max_labels"],
                f"{r['bytes'] / 1024:.1f}",
                f"{r['scrape_ms']:.1f}", f"{64 * r['series']:,}", f"{1024 * r['series']:,}"] for r in res])
    same = all(r["series"] == s["series"] for r in res for s in res if r["gpus"] == s["gpus"])
    sec.para(f"Series per node do not depend on the ranks (64 ranks a node serve what 8 do): {'yes' if same else 'NO'}. "
             f"Load average at the end: {scalelib.fmt_load(os.getloadavg())}.")
    sec.write(a.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
