"""Slurm's view of energy (issue 17): after a job on the test cluster ends, `sacct -o AdminComment`
shows the energy hpclaunch measured. The machine has no GPU: the monitor reads the fake NVML
(tests/monitors/fake_nvml.py, H100 boards replayed), through its test hook, as the monitor tests do."""
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from copies import copy_meta
from hlcli import hl

from hpclaunch.reports import columnar

pytestmark = pytest.mark.cluster

HERE = os.path.dirname(os.path.abspath(__file__))


def test_sacct_admin_comment_carries_the_measured_energy(slurm, hpc_home, tmp_path):
    (tmp_path / "job.yaml").write_text("name: accounted\nprofile: testcluster\nlauncher: srun\n"
                                       "command: [sleep, '4']\nresources: {nodes: 2, tasks_per_node: 1}\n"
                                       "monitor: {interval: 0.5}\n")
    env = dict(os.environ, HPCLAUNCH_MONITOR_FAKE_NVML=os.path.join(HERE, "monitors", "fake_nvml.py"))
    proc = hl("submit", "job.yaml", "--backend", "slurm", "--wait", "--json", cwd=str(tmp_path), env=env,
              timeout=300)
    sub = json.loads(proc.stdout)
    # the same step left each node's logs a valid columnar copy: the user's report parses no CSV
    mon = Path(sub["run_dir"]) / "monitor"
    logs = sorted(mon.glob("*.gpu.csv")) + sorted(mon.glob("*.host.csv"))
    assert len(logs) == 4, logs
    for log in logs:
        meta = copy_meta(log)
        assert meta["format"] == columnar.FORMAT and meta["source"] == columnar.identity(os.stat(log)), (log, meta)
    report = json.loads(hl("report", sub["run_dir"], "--format", "json").stdout)
    assert report["energy_j"]["total"], report["energy_j"]
    deadline = time.time() + 60
    while True:  # slurmdbd records the job's end a moment after it ends
        row = subprocess.run(["sacct", "-n", "-P", "-X", "-j", sub["job_id"], "-o", "AdminComment"],
                             capture_output=True, text=True).stdout.strip()
        if row or time.time() > deadline:
            break
        time.sleep(1)
    line = json.loads(row)
    assert line["hpclaunch"] == 1 and line["gpus"] == len(report["gpus"]) > 0, line
    # the epilogue writes it after the monitor stopped: the report's figure, to the line's rounding
    assert line["energy_j"] == pytest.approx(report["energy_j"]["total"], abs=0.1), (line, report["energy_j"])

