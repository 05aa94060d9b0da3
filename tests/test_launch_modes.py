"""Launch modes on this machine (issue 16): a Ray job on the local backend, and `init --launcher`
starters that validate for every mode."""
import json
import os
import subprocess

import pytest
from hlcli import hl

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


@pytest.mark.parametrize("mode,launcher,tasks", [("torchrun", "torchrun", 2), ("ray", "ray", 1), ("jax", "srun", 1),
                                                 ("lightning", "srun", 2), ("mpi", "mpi", 2),
                                                 ("tensorflow", "tensorflow", 2)])
def test_init_writes_a_valid_starter_for_each_mode(run_cli, tmp_path, monkeypatch, mode, launcher, tasks):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("init", f"{mode}.yaml", "--launcher", mode, "--profile", "testcluster")
    assert code == 0, err
    code, out, err = run_cli("validate", f"{mode}.yaml")
    assert code == 0 and f"profile 'testcluster', {launcher}, 2 node(s) x {tasks} rank(s)" in out, (out, err)
    text = (tmp_path / f"{mode}.yaml").read_text()
    assert f"# {mode}: " in text or mode == "torchrun"


def test_ray_on_the_local_backend_ends_with_the_driver(hpc_home, tmp_path):
    (tmp_path / "job.yaml").write_text(f"name: ray here\nlauncher: ray\ncommand: [python, {EXAMPLES}/ray_hosts.py, '2']\n"
                                       "resources: {nodes: 1, tasks_per_node: 1, cpus_per_task: 2}\n"
                                       "monitor: {interval: 0}\n")
    done = hl("submit", "job.yaml", "--backend", "local", "--wait", "--json", cwd=str(tmp_path), timeout=240)
    run_dir = json.loads(done.stdout)["run_dir"]
    log = open(os.path.join(run_dir, "logs", "attempt0", "rank0.log")).read()
    assert "cpus 2 nodes 1 hosts" in log, log
    assert json.loads(hl("status", run_dir, "--json").stdout)["state"] == "COMPLETED"
    left = subprocess.run(["pgrep", "-af", "raylet|gcs_server|ray::"], capture_output=True, text=True).stdout
    assert not [line for line in left.splitlines() if "pgrep" not in line], left


def test_pyxis_needs_slurm_and_the_local_backend_says_so(hpc_home, tmp_path):
    (tmp_path / "pyx.yaml").write_text("name: pyx\nextends: local\ncontainer: {runtime: pyxis}\n")
    (tmp_path / "job.yaml").write_text(f"name: boxed\nprofile: {tmp_path}/pyx.yaml\nlauncher: srun\n"
                                       "command: [hostname]\ncontainer: {image: 'nvcr.io#nvidia/pytorch:24.05-py3'}\n")
    proc = hl("submit", "job.yaml", "--backend", "local", cwd=str(tmp_path), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "pyxis runs containers through Slurm's srun" in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists() or not os.listdir(tmp_path / "runs")
