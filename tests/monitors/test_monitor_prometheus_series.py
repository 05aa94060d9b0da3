"""How many series a node's exporter serves (issue 50): a bounded number per GPU, whatever the number of
ranks (a GPU's ranks are one label value, never a series each), with the documented label set. The
real daemon, the fake NVML with 8 GPUs, scraped over HTTP."""
import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest

import fake_nvml
from monitor_helpers import FAKE_PATH, free_ports, wait_for
from hpclaunch.monitors import schema

HOST = "node0042"
JOB_LABELS = {"job_id", "job_name", "user", "node"}
GPU_LABELS = JOB_LABELS | {"gpu", "uuid", "ranks"}
# docs/monitor-logs.md, "Series per node": 2 of the monitor, 6 of the host, 17 per GPU
PER_NODE, PER_GPU = 8, 17


@pytest.fixture(autouse=True)
def _needs_prometheus_client(require):
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        require("prometheus_client is not installed (pip install '.[monitor]', make venv)", __file__)


def _scrape_node(tmp_path, gpus: int, tasks_per_node: int):
    """The families and samples one scrape of a node's exporter gives: {name: [(labels, value)]}."""
    devices = []
    for i in range(gpus):
        d = fake_nvml._h100(f"GPU-0f1e2d3c-0000-4000-8000-{i:012d}", i)
        d["series"] = {k: ([v(j) for j in range(200)] if callable(v) else v) for k, v in d["series"].items()}
        devices.append(d)
    scen = tmp_path / f"scenario-{tasks_per_node}.json"
    scen.write_text(json.dumps({"driver": "550.54.15", "devices": devices}))
    run = tmp_path / f"run-{tasks_per_node}"
    run.mkdir()
    port, held = free_ports()
    held[0].close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "CUDA_VISIBLE_DEVICES"}
    env.update({"HPCLAUNCH_MONITOR_FAKE_NVML": FAKE_PATH, "HPCLAUNCH_FAKE_NVML_SCENARIO": str(scen),
                "HPCLAUNCH_TASKS_PER_NODE": str(tasks_per_node), "SLURM_NODEID": "3", "SLURM_JOB_ID": "77",
                "HPCLAUNCH_JOB_NAME": "big", "SLURM_JOB_USER": "alice", "PYTHONUNBUFFERED": "1"})
    p = subprocess.Popen([sys.executable, "-m", "hpclaunch.monitors", "--interval", "0.1", "--run-dir", str(run),
                          "--host", HOST, "--prometheus-port", str(port)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: os.path.exists(run / schema.MONITOR_DIR / schema.prometheus_port_file(HOST)), "port file")

        def scrape():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return r.read().decode()
        # a few samples in: the counters read, the CPU's share measured over an interval
        wait_for(lambda: all(m in scrape() for m in ("hpclaunch_gpu_energy_joules_total",
                                                    "hpclaunch_host_cpu_utilization_ratio")), "a whole sample")
        from prometheus_client.parser import text_string_to_metric_families
        out = {}
        for fam in text_string_to_metric_families(scrape()):
            for s in fam.samples:
                out.setdefault(s.name, []).append((s.labels, s.value))
        return out
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=20)


def test_a_node_of_8_gpus_and_64_ranks_serves_17_series_a_gpu(tmp_path):
    many = _scrape_node(tmp_path, 8, 64)
    few = _scrape_node(tmp_path, 8, 8)
    count = sum(len(v) for v in many.values())
    host_series = sum(len(v) for k, v in many.items() if not k.startswith("hpclaunch_gpu_"))
    gpu_series = count - host_series
    # this machine's host row lacks RAPL and a CPU sensor: those two are no series (never 0)
    missing = {"hpclaunch_host_rapl_energy_joules_total", "hpclaunch_host_cpu_temperature_celsius"} - set(many)
    assert host_series == PER_NODE - len(missing)
    assert gpu_series == PER_GPU * 8 and count <= PER_NODE + PER_GPU * 8
    assert sum(len(v) for v in few.values()) == count   # 8 times the ranks, not one series more
    for name, samples in many.items():
        for labels, _ in samples:
            want = (GPU_LABELS | ({"reason"} if name == "hpclaunch_gpu_throttle_seconds_total" else set())
                    if name.startswith("hpclaunch_gpu_") else JOB_LABELS)
            assert set(labels) == want, (name, labels)
    ranks = {lab["gpu"]: lab["ranks"] for lab, _ in many["hpclaunch_gpu_power_watts"]}
    # node 3 of 64 ranks a node: ranks 192-255, 8 on each GPU (local rank modulo 8), in one label value
    assert ranks["0"] == ";".join(str(192 + k) for k in range(0, 64, 8)) and len(ranks) == 8


def test_the_documented_count_is_the_modules():
    from hpclaunch.monitors import prometheus
    per_gpu = len(prometheus.GPU_METRICS) + len(schema.THROTTLE_COUNTER_COLUMNS) + 1   # + the error gauge
    per_node = 2 + len(prometheus.HOST_METRICS)
    assert (per_node, per_gpu) == (PER_NODE, PER_GPU)
    doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "monitor-logs.md")).read()
    assert f"{PER_NODE} + {PER_GPU} × GPUs" in doc
