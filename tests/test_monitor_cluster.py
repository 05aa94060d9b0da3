"""The monitor on the real test cluster: one sampler per node, rows at the interval, gone after the
job, readable logs after scancel."""
import csv
import json
import os
import subprocess
import time

import pytest
from hlcli import hl

pytestmark = pytest.mark.cluster


def _submit(tmp_path, text):
    (tmp_path / "job.yaml").write_text(text)
    proc = hl("submit", str(tmp_path / "job.yaml"),
                           "--backend", "slurm", "--json", check=False, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _wait_state(job_id, states, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        st = json.loads(hl("status", job_id, "--json", check=False).stdout)
        if st["state"] in states:
            return st
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} never reached {states}: {st}")


def _rows(path):
    with open(path) as f:
        lines = f.read().split("\n")
    assert lines[0].startswith("# schema=hpclaunch.monitor.host/")
    body = [line for line in lines[1:] if line]
    reader = list(csv.reader(body))
    header, rows = reader[0], [r for r in reader[1:] if len(r) == len(reader[0])]
    return header, rows


JOB = """
name: monitored
profile: testcluster
launcher: srun
command: [bash, -c, "sleep {sleep}"]
resources: {{nodes: 2, tasks_per_node: 1, time: "00:05:00"}}
monitor: {{interval: 0.5}}
"""


def test_one_host_log_per_node_at_the_interval(slurm, hpc_home, tmp_path):
    sub = _submit(tmp_path, JOB.format(sleep=6))
    _wait_state(sub["job_id"], {"COMPLETED"})
    mon = os.path.join(sub["run_dir"], "monitor")
    assert sorted(f for f in os.listdir(mon) if f.endswith(".host.csv")) == ["c1.host.csv", "c2.host.csv"]
    for host in ("c1", "c2"):
        header, rows = _rows(os.path.join(mon, f"{host}.host.csv"))
        assert rows and {r[header.index("host")] for r in rows} == {host}
        t = [float(r[header.index("time_unix")]) for r in rows]
        gaps = [b - a for a, b in zip(t, t[1:])]
        assert len(rows) >= 8
        mean = sum(gaps) / len(gaps)
        assert abs(mean - 0.5) <= 0.05, (host, mean)
        assert all(g < 1.0 for g in gaps), gaps
        assert rows[-1][header.index("cpu_pct")] != ""
        assert rows[-1][header.index("rapl_energy_uj")] == ""   # no RAPL here: empty, never 0
    # the samplers are gone with the job
    time.sleep(1)
    assert subprocess.run(["pgrep", "-f", f"hpclaunch.monitors.*{sub['run_dir']}"]).returncode == 1
    events = open(os.path.join(mon, "c1.events.jsonl")).read()
    assert "source_unavailable" in events and "rapl" in events


def test_scancel_leaves_readable_logs(slurm, hpc_home, tmp_path):
    sub = _submit(tmp_path, JOB.format(sleep=120))
    _wait_state(sub["job_id"], {"RUNNING"})
    time.sleep(3)
    subprocess.run(["scancel", sub["job_id"]], check=True)
    _wait_state(sub["job_id"], {"CANCELLED"})
    time.sleep(2)
    mon = os.path.join(sub["run_dir"], "monitor")
    for host in ("c1", "c2"):
        header, rows = _rows(os.path.join(mon, f"{host}.host.csv"))
        assert len(rows) >= 3
        for r in rows:
            float(r[header.index("time_unix")])
    assert subprocess.run(["pgrep", "-f", f"hpclaunch.monitors.*{sub['run_dir']}"]).returncode == 1
