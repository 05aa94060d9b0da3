"""A real Prometheus scrapes the monitors of a running 2-node job on the test cluster (issue 17).

Prometheus (Debian's package) runs on the host, on a loopback port, and scrapes `c1:PORT` and `c2:PORT`
(each node is a network namespace; the monitors listen on every interface of theirs). The machine has
no GPU: each node's monitor reads the fake NVML (tests/monitors/fake_nvml.py: two H100 boards
replayed, their energy counters rising), through its test hook, as tests/test_accounting_cluster.py
does; there is no RAPL either, so the GPU energy counter is the job's only energy series. What is
compared: per GPU, the rise of `hpclaunch_gpu_energy_joules_total` over the job's scrapes (max - min
over the job, through PromQL), against the same GPU's energy in `hpclaunch report --format json`
(built from the CSV logs), and their sums against the report's GPU total."""
import json
import os
import pwd
import random
import shutil
import sys
import time

import pytest
from hlcli import hl

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "monitors"))
from monitor_helpers import FAKE_PATH, PrometheusServer, free_ports, wait_for  # noqa: E402

pytestmark = pytest.mark.cluster

NODES = ("c1", "c2")
JOB = """name: prom fleet
profile: testcluster
launcher: srun
command: [bash, -c, "sleep 25"]
resources: {{nodes: 2, tasks_per_node: 2, time: "00:05:00"}}
monitor: {{interval: 1, prometheus_port: {port}}}
requeue: {{max_attempts: 1}}
"""


def _csv_counter_ends(run_dir, key):
    """(first, last) energy counter in joules of one GPU's CSV rows, with their sample times."""
    import csv
    host, gpu = key
    with open(os.path.join(run_dir, "monitor", f"{host}.gpu.csv")) as f:
        rows = [r for r in csv.DictReader(line for line in f if not line.startswith("#"))
                if r.get("gpu_index") == gpu and r.get("energy_mj")]
    return [(r["time_unix"], float(r["energy_mj"]) / 1000) for r in (rows[0], rows[-1])] if rows else None


def _state(job_id):
    return json.loads(hl("status", job_id, "--json", cwd="/").stdout)


def test_prometheus_scrapes_a_two_node_jobs_monitors(slurm, hpc_home, tmp_path, require):
    server = shutil.which("prometheus")
    if server is None:
        require("the prometheus server is not installed (Debian's prometheus package: make deps)", "this test")
    qport, held = free_ports(1)
    for s in held:
        s.close()
    # The monitors' port, below Linux's ephemeral range (slurmstepd's I/O ports on the nodes are in it):
    # if another job's monitor holds it on a node, that node's monitor takes one of the next 7
    # (docs/monitor-logs.md), so Prometheus scrapes the range, as a site would.
    mport = random.randrange(20000, 30000 - 8)
    targets = [f"{n}:{p}" for n in NODES for p in range(mport, mport + 8)]
    # Prometheus first: it scrapes from the monitors' first sample (the energy counter's opening value)
    prom = PrometheusServer(server, tmp_path, targets, qport)
    job_id = None
    try:
        # Prometheus answers before it scrapes (its target discovery hands targets over every 5 s): a
        # job started in that gap has its first samples, the energy counter's opening value among
        # them, never scraped. Wait until every target has been tried once (`up` has a row for each).
        wait_for(lambda: len(prom.query("up") or ()) == len(targets), "Prometheus's first scrape of every target",
                 timeout=60)
        (tmp_path / "job.yaml").write_text(JOB.format(port=mport))
        env = dict(os.environ, HPCLAUNCH_MONITOR_FAKE_NVML=FAKE_PATH)
        env.pop("HPCLAUNCH_FAKE_NVML_SCENARIO", None)
        sub = json.loads(hl("submit", "job.yaml", "--backend", "slurm", "--json", cwd=str(tmp_path), env=env).stdout)
        job_id = sub["job_id"]
        sel = f'{{job_id="{job_id}"}}'

        # other helpers' jobs may hold the cluster's nodes: the job may queue a while
        wait_for(lambda: _state(job_id)["state"] in ("RUNNING", "COMPLETED", "FAILED", "CANCELLED"),
                 "the job's start", timeout=480)
        # while it runs: every GPU of both nodes, with the job's labels
        power = wait_for(lambda: len(prom.query("hpclaunch_gpu_power_watts" + sel) or ()) == 4
                         and prom.query("hpclaunch_gpu_power_watts" + sel),
                         "the job's 4 GPU series in Prometheus", timeout=60)
        assert _state(job_id)["state"] == "RUNNING"
        ports = {n: open(os.path.join(sub["run_dir"], "monitor", f"{n}.prometheus.port")).read().strip()
                 for n in NODES}
        user = pwd.getpwuid(os.getuid()).pw_name   # Slurm's SLURM_JOB_USER on the nodes
        seen = {}
        for r in power:
            m = r["metric"]
            assert m["job_id"] == job_id and m["job_name"] == "prom fleet" and m["user"] == user, m
            assert m["instance"] == f"{m['node']}:{ports[m['node']]}" and m["uuid"].startswith("GPU-"), m
            seen[(m["node"], m["gpu"])] = m["ranks"]
            assert 50 < float(r["value"][1]) < 1000
        assert sorted(seen) == [(n, g) for n in NODES for g in ("0", "1")]
        # 2 ranks a node, global ranks 0-1 on c1 and 2-3 on c2, one a GPU
        ranks = {n: sorted(seen[(n, g)] for g in ("0", "1")) for n in NODES}
        assert ranks == {"c1": ["0", "1"], "c2": ["2", "3"]}, seen
        host = prom.query("hpclaunch_host_load1" + sel)
        assert sorted(r["metric"]["node"] for r in host) == list(NODES)
        assert prom.query("hpclaunch_host_rapl_energy_joules_total" + sel) == []  # no RAPL here: no series

        wait_for(lambda: _state(job_id)["state"] == "COMPLETED", "the job's end", timeout=180)
        # the monitors served their final sample to a scrape before they stopped (--prometheus-linger),
        # and the job ended after them: Prometheus holds the whole job now
        end = time.time()
        span = "10m"   # the whole job (the server, and so its data, is this test's own)
        counter = "hpclaunch_gpu_energy_joules_total" + sel
        rise = prom.query(f"max_over_time({counter}[{span}]) - min_over_time({counter}[{span}])", at=end)
        report = json.loads(hl("report", sub["run_dir"], "--format", "json", cwd="/").stdout)
        by_gpu = {(g["host"], str(g["index"])): g for g in report["gpus"]}
        assert sorted(by_gpu) == sorted(seen)
        prom_j = {(r["metric"]["node"], r["metric"]["gpu"]): float(r["value"][1]) for r in rise}
        # on a mismatch, what Prometheus holds: every raw sample of the counter, series by series
        raw = [(r["metric"]["node"], r["metric"]["gpu"], r["metric"].get("ranks"), r["values"][:3], len(r["values"]))
               for r in prom.query(f"{counter}[{span}]", at=end) or ()]
        for key, joules in prom_j.items():
            g = by_gpu[key]
            assert g["energy_source"] == "counter", g
            assert joules == pytest.approx(g["energy_j"], rel=0.01), (key, joules, g["energy_j"], raw,
                                                                       _csv_counter_ends(sub["run_dir"], key))
        assert sum(prom_j.values()) == pytest.approx(report["energy_j"]["gpu"], rel=0.01)
        # what PromQL's increase() says over the same range (it extrapolates to the range's ends)
        inc = prom.query(f"sum(increase({counter}[{span}]))", at=end)
        print(f"job {job_id}: Prometheus max-min {sum(prom_j.values()):.1f} J, increase() "
              f"{float(inc[0]['value'][1]) if inc else float('nan'):.1f} J, report GPU {report['energy_j']['gpu']} J")
    finally:
        if job_id is not None:
            hl("cancel", job_id, cwd="/", check=False)
        prom.close()
