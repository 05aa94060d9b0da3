"""A rendered script is "the exact sbatch script": given straight to `sbatch` (no hpclaunch submit,
no run directory made beforehand) it runs on the real test cluster (issue 14, item 5)."""
import os
import subprocess
import sys
import time

import pytest
from hlcli import hl

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _final_state(job_id, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = subprocess.run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode"],
                             capture_output=True, text=True).stdout.split()
        if out and out[-1].split("|")[0] not in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED"):
            return out[-1]
        time.sleep(1)
    raise AssertionError(f"job {job_id} did not end in {timeout} s")


def test_render_then_plain_sbatch_from_a_fresh_directory(slurm, tmp_path):
    (tmp_path / "job.yaml").write_text(f"""
name: plain sbatch
profile: testcluster
launcher: torchrun
command: [python, {ROOT}/examples/ddp_check.py, "3"]
resources: {{nodes: 2, tasks_per_node: 1, time: "00:05:00"}}
monitor: {{interval: 1}}
""")
    script = hl("render", "job.yaml", cwd=str(tmp_path)).stdout
    (tmp_path / "s.sh").write_text(script)
    assert not (tmp_path / "runs").exists()
    # as a user with their environment activated runs it (sbatch exports it to the job)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    sub = subprocess.run(["sbatch", "--parsable", "s.sh"], cwd=str(tmp_path), capture_output=True, text=True,
                         env=env)
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip().split(";")[0]
    assert _final_state(job_id) == "COMPLETED|0:0"
    run_dir = tmp_path / "runs" / f"plain_sbatch-{job_id}"
    # Slurm's log began in the submit directory; the run directory links it
    log = run_dir / "logs" / "slurm.out"
    assert log.is_symlink() and os.path.samefile(log, tmp_path / f"slurm-plain_sbatch-{job_id}.out")
    text = log.read_text()
    assert f"job {job_id} attempt 0 on c1 c2" in text, text
    rank0 = (run_dir / "logs" / "attempt0" / "rank0.log").read_text()
    assert "params identical: True" in rank0, rank0
    assert (run_dir / "script.sbatch").read_text() == script
    assert sorted(p.name for p in (run_dir / "monitor").iterdir()), "the monitor wrote nothing"
    port = (run_dir / ".hpclaunch" / "state").read_text().split(" port=")[1].split()[0]
    assert 20000 <= int(port) < 30000, port


def test_hpclaunch_submit_keeps_slurms_log_in_the_run_directory(slurm, hpc_home, tmp_path):
    (tmp_path / "job.yaml").write_text("name: in place\nprofile: testcluster\nlauncher: srun\n"
                                       "command: [hostname]\nresources: {nodes: 1, tasks_per_node: 1}\n"
                                       "monitor: {interval: 0}\n")
    proc = hl("submit", "job.yaml", "--backend", "slurm", "--wait", cwd=str(tmp_path), timeout=200)
    run_dir = [line.split(": ", 1)[1].strip() for line in proc.stdout.splitlines() if "run directory" in line][0]
    log = os.path.join(run_dir, "logs", "slurm.out")
    assert os.path.isfile(log) and not os.path.islink(log) and "attempt 0 on c1" in open(log).read()
    assert not list(tmp_path.glob("slurm-*.out"))
